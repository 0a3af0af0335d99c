//! A full disk while a large batch is written with `pwritev` (modelled
//! with a file-size limit below the write's position, in a segment whose
//! blocks are already allocated, so that the write itself fails part-way):
//! the send fails with `DiskFull`, nothing of it is published, later
//! appends work, and a reopen finds the log clean (no garbage left behind
//! the failed write for recovery to cut or quarantine).
//!
//! The limit is process-wide, so this file holds a single test.
#![allow(clippy::unwrap_used)]

#[path = "common/file_limit.rs"]
mod file_limit;

use file_limit::{read_values, set_file_size_limit};
use mqlite::raw::partition_log;
use mqlite::{Broker, Config, Error, ProducerConfig, Record, RecoveryStats, TopicConfig};

#[test]
fn a_failed_large_write_leaves_the_log_readable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let large = |i: u8| vec![i; 700 << 10];
    // Small records go through the map.
    let small = |i: u8| vec![i; 3000];
    let mut acked: Vec<Vec<u8>> = Vec::new();
    {
        let mq = Broker::open(&dir, Config::default()).unwrap();
        mq.create_topic(
            "t",
            TopicConfig::new(1)
                .segment_bytes(8 << 20)
                .max_message_bytes(2 << 20),
        )
        .unwrap();
        // The whole segment allocated: the write, not a growth, fails.
        partition_log(&mq, "t", 0).unwrap().prefault();
        let p = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..10 {
            p.send(Record::new("t").value(small(i))).unwrap();
            acked.push(small(i));
        }
        // About 30 KiB written: the large batch's first chunk gets to the
        // limit (a short write), the rest fails.
        set_file_size_limit(Some(64 << 10));
        match p.send(Record::new("t").value(large(100))) {
            Err(Error::DiskFull { .. }) => {}
            other => panic!("expected DiskFull, got {other:?}"),
        }
        assert_eq!(read_values(&mq, "t"), acked, "nothing of it published");
        // Small records go through the map, into allocated blocks.
        p.send(Record::new("t").value(small(11))).unwrap();
        acked.push(small(11));
        set_file_size_limit(None);
        // Small again: a large batch would overwrite what the failed write
        // left, and hide it.
        p.send(Record::new("t").value(small(12))).unwrap();
        acked.push(small(12));
        assert_eq!(read_values(&mq, "t"), acked);
    }
    let mq = Broker::open(&dir, Config::default()).unwrap();
    let info = mq.topic("t").unwrap();
    assert_eq!(info.partitions[0].recovery, RecoveryStats::default());
    assert_eq!(read_values(&mq, "t"), acked);
}
