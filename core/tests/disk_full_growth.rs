//! A full disk met when a segment's file grows (modelled, as in
//! tests/disk_full.rs, with `RLIMIT_FSIZE` and `SIGXFSZ` ignored): the
//! append that needs the growth fails with `DiskFull` and writes nothing,
//! the file keeps its length (no page of the map past its end is touched,
//! so no `SIGBUS`), earlier records stay readable, and appends go on once
//! there is space again, before and after a reopen.
//!
//! The limit is process-wide, so this file holds a single test.
#![allow(clippy::unwrap_used)]

#[path = "common/file_limit.rs"]
mod file_limit;

use file_limit::{read_values, set_file_size_limit};
use mqlite::{Broker, Config, Error, ProducerConfig, Record, TopicConfig};

#[test]
fn a_growth_on_a_full_disk_fails_cleanly_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    // Page faulting ahead on: its windows must stay inside the file too.
    let config = || Config::default().retention_check_interval_ms(0);
    let mq = Broker::open(&dir, config()).unwrap();
    // Far from a roll: only growth steps can fail.
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(16 << 20))
        .unwrap();
    let log = dir.join("topics/t/0/00000000000000000000.log");
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let value = |i: usize| format!("{i:06}-{}", "x".repeat(1000)).into_bytes();
    let mut acked = Vec::new();
    for i in 0..20 {
        producer
            .send(Record::new("t").partition(0).value(value(i)))
            .unwrap();
        acked.push(value(i));
    }
    let limit = 200 << 10;
    set_file_size_limit(Some(limit));
    let mut failed = None;
    for i in acked.len()..5000 {
        match producer.send(Record::new("t").partition(0).value(value(i))) {
            Ok(_) => acked.push(value(i)),
            Err(e) => {
                failed = Some((i, e));
                break;
            }
        }
    }
    let (first_failed, err) = failed.expect("no growth ever failed");
    assert!(matches!(err, Error::DiskFull { .. }), "growth: {err}");
    println!("growth failed after {} records: {err}", acked.len());
    let info = mq.topic("t").unwrap().partitions[0].clone();
    assert_eq!(info.segments, 1, "it rolled instead");
    assert_eq!(
        info.end_offset,
        acked.len() as u64,
        "the failed append wrote"
    );
    let len = std::fs::metadata(&log).unwrap().len();
    assert!(len <= limit && len >= info.size_bytes, "file length {len}");
    // It keeps failing cleanly, writing nothing, and reads go on.
    for _ in 0..3 {
        match producer.send(Record::new("t").partition(0).value(value(first_failed))) {
            Err(Error::DiskFull { .. }) => {}
            other => panic!("a send on a full disk: {other:?}"),
        }
    }
    assert_eq!(
        mq.topic("t").unwrap().partitions[0].end_offset,
        acked.len() as u64
    );
    assert_eq!(read_values(&mq, "t"), acked, "earlier data changed");

    set_file_size_limit(None);
    for i in first_failed..first_failed + 400 {
        producer
            .send(Record::new("t").partition(0).value(value(i)))
            .unwrap();
        acked.push(value(i));
    }
    assert!(std::fs::metadata(&log).unwrap().len() > limit);
    assert_eq!(read_values(&mq, "t"), acked);
    drop(producer);
    mq.close().unwrap();
    drop(mq);

    let mq = Broker::open(&dir, config()).unwrap();
    assert_eq!(read_values(&mq, "t"), acked);
    mq.close().unwrap();
}
