//! A full disk, modelled with a file-size limit (`RLIMIT_FSIZE`, with
//! `SIGXFSZ` ignored so writes fail with `EFBIG` instead of killing the
//! process): a new segment's first allocation at roll, topic creation, the producer
//! registry and committed offsets fail part-way with `DiskFull`, earlier data
//! stays readable, nothing half-made is left behind, and everything works
//! again once the limit is lifted.
//!
//! The limit is process-wide, so this file holds a single test.
#![allow(clippy::unwrap_used)]

#[path = "common/file_limit.rs"]
mod file_limit;

use file_limit::{read_values, set_file_size_limit};
use mqlite::{Broker, Config, ConsumerConfig, Error, ProducerConfig, Record, TopicConfig};

fn is_disk_full<T: std::fmt::Debug>(what: &str, r: mqlite::Result<T>) {
    match r {
        Err(Error::DiskFull { .. }) => {}
        Err(e) => panic!("{what}: expected DiskFull, got {e} ({e:?})"),
        Ok(v) => panic!("{what}: expected DiskFull, got Ok({v:?})"),
    }
}

#[test]
fn disk_full_fails_cleanly_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let config = || Config::default().retention_check_interval_ms(0);
    let mq = Broker::open(&dir, config()).unwrap();
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(64 * 1024))
        .unwrap();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let mut acked: Vec<Vec<u8>> = Vec::new();
    let value = |i: usize| format!("{i:06}-{}", "x".repeat(200)).into_bytes();
    for i in 0..50 {
        producer
            .send(Record::new("t").partition(0).value(value(i)))
            .unwrap();
        acked.push(value(i));
    }
    let mut consumer = mq.consumer(ConsumerConfig::group("g")).unwrap();
    consumer.assign(&[("t", 0)]).unwrap();
    consumer.commit_offsets(&[("t", 0, 10, "before")]).unwrap();

    set_file_size_limit(Some(1024));

    // Appends inside the allocated segment (64 KiB, all of it: a segment
    // starts with that much) still succeed; the roll to a new segment
    // cannot allocate it. A growth step failing is tests/disk_full_growth.rs.
    let mut failed = None;
    for i in 50..2000 {
        match producer.send(Record::new("t").partition(0).value(value(i))) {
            Ok(_) => acked.push(value(i)),
            Err(e) => {
                failed = Some((i, e));
                break;
            }
        }
    }
    let (first_failed, err) = failed.expect("the roll never failed");
    assert!(matches!(err, Error::DiskFull { .. }), "roll: {err}");
    assert_eq!(err.code(), 2);
    println!("roll failed after {} records: {err}", acked.len());
    // It keeps failing cleanly while the disk is full, and reads go on.
    is_disk_full(
        "a second send",
        producer.send(Record::new("t").partition(0).value(value(first_failed))),
    );
    assert_eq!(read_values(&mq, "t"), acked, "earlier data changed");

    // Smaller than any metadata file from here on.
    set_file_size_limit(Some(16));
    // Topic creation: a segment's first 64 KiB and topic.json.
    is_disk_full("create_topic", mq.create_topic("u", TopicConfig::new(2)));
    assert!(mq.topic("u").is_err(), "a half-created topic is visible");
    // The producer registry (a new named producer).
    is_disk_full(
        "named producer",
        mq.producer(ProducerConfig::default().name("new-name"))
            .map(|_| ()),
    );
    // Committed offsets: the commit fails and the old one stays.
    let commit = consumer.commit_offsets(&[("t", 0, 20, "during")]);
    match &commit {
        Err(Error::DiskFull { .. } | Error::CommitFailed(_)) => {}
        other => panic!("commit on a full disk: {other:?}"),
    }
    println!("commit on a full disk: {}", commit.unwrap_err());
    let committed = consumer.committed("t", 0).unwrap().unwrap();
    assert_eq!(
        (committed.offset, committed.metadata.as_str()),
        (10, "before")
    );

    set_file_size_limit(None);

    // Space is back: everything works, the failed operations included.
    for i in first_failed..first_failed + 600 {
        producer
            .send(Record::new("t").partition(0).value(value(i)))
            .unwrap();
        acked.push(value(i));
    }
    mq.create_topic("u", TopicConfig::new(2)).unwrap();
    drop(
        mq.producer(ProducerConfig::default().name("new-name"))
            .unwrap(),
    );
    consumer.commit_offsets(&[("t", 0, 20, "after")]).unwrap();
    assert_eq!(read_values(&mq, "t"), acked);
    drop(consumer);
    drop(producer);
    mq.close().unwrap();
    drop(mq);

    // And all of it after a reopen.
    let mq = Broker::open(&dir, config()).unwrap();
    assert_eq!(read_values(&mq, "t"), acked);
    assert!(
        mq.topic("t").unwrap().partitions[0].segments > 1,
        "never rolled"
    );
    assert_eq!(mq.topic("u").unwrap().partitions.len(), 2);
    let c = mq.consumer(ConsumerConfig::group("g")).unwrap();
    assert_eq!(c.committed("t", 0).unwrap().unwrap().offset, 20);
}
