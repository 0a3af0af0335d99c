//! Shared mode's check of the logs after a process ended without closing
//! the directory: the next process that opens it alone checks every
//! partition as an exclusive open after a crash does, cuts damage at the
//! tail and reports it in `PartitionInfo::recovery`; after a clean close
//! nothing is checked, and damage made at rest is a `Corrupt` error for
//! readers.
#![allow(clippy::unwrap_used)]

#[path = "common/child.rs"]
mod child;
mod common;

use std::io::Write;
use std::path::Path;

use common::{batches, cfg, read_partition, segment_logs};
use mqlite::{Broker, Config, Error, OpenMode, ProducerConfig, Record, RecoveryStats, TopicConfig};

const CHILD_DIR: &str = "MQLITE_SHARED_RECOVERY_CHILD_DIR";
const TOPIC: &str = "t";
const RECORDS: u64 = 40;

fn shared() -> Config {
    cfg().mode(OpenMode::Shared)
}

fn value(i: u64) -> Vec<u8> {
    format!("record {i:04} {}", "x".repeat(100)).into_bytes()
}

/// Creates the topic and sends [`RECORDS`] records, one batch each.
fn write_records(mq: &Broker) {
    mq.create_topic(TOPIC, TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..RECORDS {
        p.send(Record::new(TOPIC).value(value(i)).partition(0))
            .unwrap();
    }
    p.flush().unwrap();
}

/// The child: writes the records in shared mode, says `READY` and waits to
/// be killed.
#[test]
fn recovery_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let mq = Broker::open(&dir, shared()).unwrap();
    write_records(&mq);
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Flips one byte in the middle of the last batch of the partition's
/// active segment; returns the base offset of that batch (where a check
/// cuts).
fn damage_last_batch(dir: &Path) -> u64 {
    let log = segment_logs(dir, TOPIC, 0).pop().unwrap();
    let mut bytes = std::fs::read(&log).unwrap();
    let spans = batches(&bytes);
    assert_eq!(spans.len() as u64, RECORDS, "one batch per record");
    let last = spans.last().unwrap();
    let at = last.pos + last.len / 2;
    bytes[at] ^= 0x5a;
    std::fs::write(&log, &bytes).unwrap();
    last.base
}

fn values(mq: &Broker) -> Result<Vec<Vec<u8>>, Error> {
    Ok(read_partition(mq, TOPIC, 0)?
        .into_iter()
        .map(|m| m.value.unwrap())
        .collect())
}

#[test]
fn a_lone_open_after_a_killed_writer_checks_every_partition_and_cuts_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let lines = child::run_child_until(
        tmp.path(),
        "recovery_child",
        &[(CHILD_DIR, dir.to_str().unwrap())],
        |l| l.ends_with("READY"),
    );
    assert!(lines.iter().any(|l| l.ends_with("READY")), "{lines:?}");
    let cut = damage_last_batch(&dir);

    let mq = Broker::open(&dir, shared()).unwrap();
    let info = mq.topic(TOPIC).unwrap();
    let p = &info.partitions[0];
    assert_eq!(p.end_offset, cut, "the damaged last batch is cut");
    assert_eq!(p.recovery.dropped_batches, 1, "{:?}", p.recovery);
    assert!(p.recovery.truncated_bytes > 0, "{:?}", p.recovery);
    let want: Vec<_> = (0..cut).map(value).collect();
    assert_eq!(values(&mq).unwrap(), want, "every record before the cut");

    // Appends go on from the cut, and a clean close leaves nothing to check.
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    producer
        .send(Record::new(TOPIC).value(value(cut)).partition(0))
        .unwrap();
    producer.flush().unwrap();
    drop(producer);
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(&dir, shared()).unwrap();
    let p = &mq.topic(TOPIC).unwrap().partitions[0];
    assert_eq!(p.end_offset, cut + 1);
    assert_eq!(p.recovery, RecoveryStats::default());
    let want: Vec<_> = (0..=cut).map(value).collect();
    assert_eq!(values(&mq).unwrap(), want);
}

#[test]
fn after_a_clean_close_damage_made_at_rest_is_an_error_for_readers_not_a_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mq = Broker::open(&dir, shared()).unwrap();
    write_records(&mq);
    mq.close().unwrap();
    drop(mq);
    damage_last_batch(&dir);

    let mq = Broker::open(&dir, shared()).unwrap();
    let p = &mq.topic(TOPIC).unwrap().partitions[0];
    assert_eq!(p.end_offset, RECORDS, "nothing checked, nothing cut");
    assert_eq!(p.recovery, RecoveryStats::default());
    let err = values(&mq).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
}
