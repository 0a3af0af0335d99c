//! The delivery timeout: an `acks=all` send whose flush ends past it fails
//! with `Timeout` (its record is in the log: an append is never undone); a
//! queued record not appended in time fails with `Timeout` and is never
//! appended. Flushes are made slow with the sync hook (process-wide, so
//! this file holds a single test).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mqlite::faults::set_sync_hook;
use mqlite::{Acks, Broker, Config, ConsumerConfig, Error, ProducerConfig, Record, TopicConfig};

/// Delivery reports by record name.
type Reports = Vec<(String, mqlite::Result<u64>)>;

fn values_of(mq: &Broker, topic: &str, partition: u32) -> Vec<Vec<u8>> {
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[(topic, partition)]).unwrap();
    let mut out = Vec::new();
    loop {
        let msgs = c.poll(Duration::from_millis(100)).unwrap();
        if msgs.is_empty() {
            return out;
        }
        out.extend(msgs.iter().map(|m| m.value().unwrap().to_vec()));
    }
}

/// Makes syncs under `dir` sleep `ms` while `on` is set.
fn slow_syncs(dir: PathBuf, ms: u64, on: Arc<AtomicBool>) {
    set_sync_hook(Some(Arc::new(move |path: &Path, _, before| {
        if before && on.load(Ordering::Acquire) && path.starts_with(&dir) {
            std::thread::sleep(Duration::from_millis(ms));
        }
        Ok(())
    })));
}

fn blocking_send_past_its_deadline(dir: &Path) {
    let mq = Broker::open(dir, Config::default().retention_check_interval_ms(0)).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let timed = mq
        .producer(
            ProducerConfig::default()
                .acks(Acks::All)
                .delivery_timeout_ms(100),
        )
        .unwrap();
    let unlimited = mq
        .producer(
            ProducerConfig::default()
                .acks(Acks::All)
                .delivery_timeout_ms(0),
        )
        .unwrap();
    let on = Arc::new(AtomicBool::new(true));
    slow_syncs(dir.join("topics/t/0"), 400, Arc::clone(&on));
    let r = timed.send(Record::new("t").value("late"));
    assert!(matches!(r, Err(Error::Timeout(100))), "{r:?}");
    let batch = timed.send_batch(&[Record::new("t").value("late-batch").as_borrowed()]);
    assert!(matches!(batch, Err(Error::Timeout(100))), "{batch:?}");
    // Without a limit the slow flush is waited for.
    unlimited.send(Record::new("t").value("patient")).unwrap();
    on.store(false, Ordering::Release);
    set_sync_hook(None);
    timed.send(Record::new("t").value("fast")).unwrap();
    assert_eq!(timed.stats().errors, 2);
    // Appended before the timer fired: in the log (documented).
    let want: Vec<Vec<u8>> = ["late", "late-batch", "patient", "fast"]
        .iter()
        .map(|v| v.as_bytes().to_vec())
        .collect();
    assert_eq!(values_of(&mq, "t", 0), want);
    drop((timed, unlimited));
    mq.close().unwrap();
}

fn queued_records_past_their_deadline(dir: &Path) {
    let mq = Broker::open(dir, Config::default().retention_check_interval_ms(0)).unwrap();
    mq.create_topic("q", TopicConfig::new(2)).unwrap();
    let p = mq
        .producer(
            ProducerConfig::default()
                .acks(Acks::All)
                .linger_ms(10)
                .delivery_timeout_ms(200),
        )
        .unwrap();
    let on = Arc::new(AtomicBool::new(true));
    // The producer's thread is held in partition 0's flush for 1.5 s; the
    // batch of partition 1 lingers behind it past its deadline.
    slow_syncs(dir.join("topics/q/0"), 1500, Arc::clone(&on));
    let results: Arc<Mutex<Reports>> = Arc::default();
    let report = |name: &str| {
        let results = Arc::clone(&results);
        let name = name.to_owned();
        move |r: mqlite::Result<mqlite::RecordMetadata>| {
            results.lock().unwrap().push((name, r.map(|m| m.offset)));
        }
    };
    p.send_async(Record::new("q").partition(0).value("a"), report("a"))
        .unwrap();
    // Until the producer's thread is in the slow flush.
    std::thread::sleep(Duration::from_millis(100));
    p.send_async(Record::new("q").partition(1).value("b"), report("b"))
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    on.store(false, Ordering::Release);
    p.flush().unwrap();
    set_sync_hook(None);
    let mut got = std::mem::take(&mut *results.lock().unwrap());
    got.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(got.len(), 2, "{got:?}");
    for (name, r) in &got {
        assert!(matches!(r, Err(Error::Timeout(200))), "{name}: {r:?}");
    }
    assert_eq!(p.stats().errors, 2);
    // "b" was never appended; "a" was (before its timer fired).
    p.send(Record::new("q").partition(1).value("after"))
        .unwrap();
    p.flush().unwrap();
    assert_eq!(values_of(&mq, "q", 1), vec![b"after".to_vec()]);
    assert_eq!(values_of(&mq, "q", 0), vec![b"a".to_vec()]);
    drop(p);
    mq.close().unwrap();
}

#[test]
fn delivery_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    blocking_send_past_its_deadline(&tmp.path().join("sync"));
    queued_records_past_their_deadline(&tmp.path().join("async"));
}
