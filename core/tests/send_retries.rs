//! Retries and fault avoidance: key-less records whose partition is
//! poisoned (a failed fsync) or full (a file-size limit) are sent to
//! another partition and all land exactly once; records with a key or an
//! explicit partition never move and fail with the typed error.
//!
//! The file-size limit is process-wide, so this file holds a single test
//! (the scenarios run one after the other).
#![allow(clippy::unwrap_used)]

#[path = "common/file_limit.rs"]
#[allow(dead_code)]
mod file_limit;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use file_limit::set_file_size_limit;
use mqlite::faults::set_sync_hook;
use mqlite::{
    partition_for_key, Acks, Broker, Config, ConsumerConfig, Error, Partitioner, ProducerConfig,
    Record, TopicConfig,
};

/// Every value of every partition of `topic`, with its partition.
fn read_all(mq: &Broker, topic: &str, partitions: u32) -> Vec<(u32, Vec<u8>)> {
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    let list: Vec<(&str, u32)> = (0..partitions).map(|p| (topic, p)).collect();
    c.assign(&list).unwrap();
    let mut out = Vec::new();
    loop {
        let msgs = c.poll(Duration::from_millis(100)).unwrap();
        if msgs.is_empty() {
            return out;
        }
        out.extend(
            msgs.iter()
                .map(|m| (m.partition(), m.value().unwrap_or_default().to_vec())),
        );
    }
}

/// Checks that each of `values` was read exactly once, none from `bad`.
fn landed_once_elsewhere(read: &[(u32, Vec<u8>)], values: &[Vec<u8>], bad: u32) {
    let mut seen: HashMap<&[u8], Vec<u32>> = HashMap::new();
    for (p, v) in read {
        seen.entry(v.as_slice()).or_default().push(*p);
    }
    for v in values {
        let got = seen.get(v.as_slice()).cloned().unwrap_or_default();
        assert_eq!(
            got.len(),
            1,
            "{:?} read {} times",
            String::from_utf8_lossy(v),
            got.len()
        );
        assert_ne!(
            got[0],
            bad,
            "{:?} landed in the bad partition",
            String::from_utf8_lossy(v)
        );
    }
}

/// A key whose partition among `count` is `p`.
fn key_for(p: u32, count: u32) -> Vec<u8> {
    (0u32..100_000)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| partition_for_key(k, count) == p)
        .unwrap()
}

fn poisoned_partition(dir: &Path, partitioner: &Partitioner) {
    let mq = Broker::open(dir, Config::default().retention_check_interval_ms(0)).unwrap();
    mq.create_topic("t", TopicConfig::new(3)).unwrap();
    let all = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    // A failed fsync poisons partition 1.
    let victim = dir.join("topics/t/1");
    set_sync_hook(Some(Arc::new(move |path: &Path, _, before| {
        if before && path.starts_with(&victim) {
            Err(std::io::Error::from_raw_os_error(libc::EIO))
        } else {
            Ok(())
        }
    })));
    let res = all.send(Record::new("t").partition(1).value("lost"));
    set_sync_hook(None);
    assert!(matches!(res, Err(Error::Io { .. })), "{res:?}");

    let p = mq
        .producer(
            ProducerConfig::default()
                .partitioner(partitioner.clone())
                .batch_size(64),
        )
        .unwrap();
    let mut values = Vec::new();
    for i in 0..60 {
        let v = format!("one-{i}").into_bytes();
        p.send(Record::new("t").value(v.clone())).unwrap();
        values.push(v);
    }
    // send_batch: the key-less records of a failed chunk move.
    let batch: Vec<Vec<u8>> = (0..60).map(|i| format!("batch-{i}").into_bytes()).collect();
    let records: Vec<Record> = batch
        .iter()
        .map(|v| Record::new("t").value(v.clone()))
        .collect();
    let borrowed: Vec<_> = records.iter().map(Record::as_borrowed).collect();
    let mds = p.send_batch(&borrowed).unwrap();
    assert!(mds.iter().all(|m| m.partition != 1), "{mds:?}");
    values.extend(batch);
    // Asynchronous records, lingering in the accumulator (round robin:
    // some are due in partition 1 whatever the random sticky choices).
    let lingering = mq
        .producer(
            ProducerConfig::default()
                .partitioner(Partitioner::RoundRobin)
                .linger_ms(5),
        )
        .unwrap();
    let results = Arc::new(Mutex::new(Vec::new()));
    for i in 0..60 {
        let v = format!("async-{i}").into_bytes();
        let results = Arc::clone(&results);
        lingering
            .send_async(Record::new("t").value(v.clone()), move |r| {
                results.lock().unwrap().push(r.map(|m| m.partition));
            })
            .unwrap();
        values.push(v);
    }
    lingering.flush().unwrap();
    let results = results.lock().unwrap();
    assert_eq!(results.len(), 60);
    for r in results.iter() {
        assert_ne!(*r.as_ref().unwrap(), 1);
    }

    // Records that may not move fail at once, with the typed error.
    let keyed = p.send(Record::new("t").key(key_for(1, 3)).value("keyed"));
    assert!(
        matches!(keyed, Err(Error::Poisoned { partition: 1, .. })),
        "{keyed:?}"
    );
    let explicit = p.send(Record::new("t").partition(1).value("explicit"));
    assert!(
        matches!(explicit, Err(Error::Poisoned { partition: 1, .. })),
        "{explicit:?}"
    );
    let explicit_batch = p.send_batch(&[Record::new("t").partition(1).value("x").as_borrowed()]);
    assert!(matches!(explicit_batch, Err(Error::Poisoned { .. })));

    let st = p.stats();
    assert!(st.retries >= 1, "{st:?}");
    assert!(st.avoided_partitions >= 1, "{st:?}");
    let lst = lingering.stats();
    assert!(lst.avoided_partitions >= 1 && lst.retries >= 1, "{lst:?}");
    assert_eq!(st.errors, 3, "{st:?}");
    drop((p, lingering, all));
    let _ = mq.close();
    // Reopened, the poisoned partition is read too.
    let mq = Broker::open(dir, Config::default().retention_check_interval_ms(0)).unwrap();
    let read = read_all(&mq, "t", 3);
    landed_once_elsewhere(&read, &values, 1);
    for v in ["keyed", "explicit", "x"] {
        assert!(!read.iter().any(|(_, r)| r == v.as_bytes()), "{v} written");
    }
    mq.close().unwrap();
}

fn retries_exhausted(dir: &Path) {
    // One partition, poisoned: the record has nowhere to go; it is tried
    // `retries` more times and fails with the partition's error.
    let mq = Broker::open(dir, Config::default().retention_check_interval_ms(0)).unwrap();
    mq.create_topic("one", TopicConfig::new(1)).unwrap();
    let all = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    let victim = dir.join("topics/one/0");
    set_sync_hook(Some(Arc::new(move |path: &Path, _, before| {
        if before && path.starts_with(&victim) {
            Err(std::io::Error::from_raw_os_error(libc::EIO))
        } else {
            Ok(())
        }
    })));
    let _ = all.send(Record::new("one").value("lost"));
    set_sync_hook(None);
    let p = mq.producer(ProducerConfig::default().retries(3)).unwrap();
    let r = p.send(Record::new("one").value("v"));
    assert!(matches!(r, Err(Error::Poisoned { .. })), "{r:?}");
    assert_eq!(p.stats().retries, 3);
    let none = mq.producer(ProducerConfig::default().retries(0)).unwrap();
    let r = none.send(Record::new("one").value("v"));
    assert!(matches!(r, Err(Error::Poisoned { .. })), "{r:?}");
    assert_eq!(none.stats().retries, 0);
    drop((p, none, all));
    // Closing reports the poisoned partition.
    let _ = mq.close();
}

fn full_partition(dir: &Path) {
    let mq = Broker::open(dir, Config::default().retention_check_interval_ms(0)).unwrap();
    mq.create_topic("d", TopicConfig::new(3).segment_bytes(64 * 1024))
        .unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let filler = vec![b'f'; 1000];
    // Partition 1 nearly fills its segment; the others hold little.
    for _ in 0..50 {
        p.send(Record::new("d").partition(1).value(filler.clone()))
            .unwrap();
    }
    set_file_size_limit(Some(1024));
    // Explicit sends to partition 1 fail once its segment must roll.
    let mut full = None;
    for _ in 0..200 {
        if let Err(e) = p.send(Record::new("d").partition(1).value(filler.clone())) {
            full = Some(e);
            break;
        }
    }
    let full = full.expect("partition 1 never filled");
    assert!(matches!(full, Error::DiskFull { .. }), "{full}");
    // Then small records fill the rest of its segment.
    let mut left = 0;
    while p
        .send(Record::new("d").partition(1).value("small-0000"))
        .is_ok()
    {
        left += 1;
        assert!(left < 10_000, "partition 1 never filled");
    }
    let keyed = p.send(Record::new("d").key(key_for(1, 3)).value(filler.clone()));
    assert!(matches!(keyed, Err(Error::DiskFull { .. })), "{keyed:?}");
    // Round robin: every third record is due in partition 1.
    let rr = mq
        .producer(ProducerConfig::default().partitioner(Partitioner::RoundRobin))
        .unwrap();
    let mut values = Vec::new();
    for i in 0..90 {
        let v = format!("full-{i:05}").into_bytes();
        rr.send(Record::new("d").value(v.clone())).unwrap();
        values.push(v);
    }
    let st = rr.stats();
    set_file_size_limit(None);
    assert_eq!(st.avoided_partitions, 1, "{st:?}");
    assert_eq!(st.retries, 1, "avoided after one failure: {st:?}");
    assert_eq!(st.records, 90);
    let read = read_all(&mq, "d", 3);
    landed_once_elsewhere(&read, &values, 1);
    drop((p, rr));
    mq.close().unwrap();
}

#[test]
fn key_less_records_avoid_faulty_partitions() {
    let tmp = tempfile::tempdir().unwrap();
    poisoned_partition(&tmp.path().join("sticky"), &Partitioner::Sticky);
    poisoned_partition(&tmp.path().join("rr"), &Partitioner::RoundRobin);
    retries_exhausted(&tmp.path().join("one"));
    full_partition(&tmp.path().join("full"));
}
