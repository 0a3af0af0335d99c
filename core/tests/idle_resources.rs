//! Threads and descriptors of a broker with many partitions, counted in
//! `/proc/self` (one test in this binary, so that no other test's threads
//! or files are counted).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;

use common::read_partition;
use mqlite::{Acks, Broker, Config, ProducerConfig, Record, TopicConfig};

fn tasks() -> BTreeSet<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn thread_names() -> Vec<String> {
    tasks()
        .into_iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/self/task/{t}/comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect()
}

/// Background work of 1,000 partitions runs on the broker's few pool
/// threads, none per partition, and they end at the close; descriptors stay
/// within `max_open_files` while every partition is written, flushed and
/// read.
#[test]
fn threads_and_descriptors_stay_bounded() {
    threads_with_many_partitions();
    descriptors_with_a_small_limit();
}

fn threads_with_many_partitions() {
    const PARTITIONS: u32 = 1000;
    let tmp = tempfile::tempdir().unwrap();
    let initial = tasks();
    let before = initial.len();
    // Prefaulting on: pages are faulted in ahead of every partition's
    // writer, the background work that used to take a thread each.
    let mq = Broker::open(tmp.path(), Config::default().prefault(true)).unwrap();
    mq.create_topic("t", TopicConfig::new(PARTITIONS).segment_bytes(64 << 10))
        .unwrap();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    // The retention thread, the pool's two, and the producer's own.
    let allowed = before + 4;
    let mut most = 0;
    // Every thread seen while appending: a thread started per job would
    // show as ever more new ids.
    let mut seen = BTreeSet::new();
    let mut names = BTreeSet::new();
    for round in 0..2 {
        for p in 0..PARTITIONS {
            // 20 KiB: past the point where pages are faulted in ahead; the
            // second round passes the middle of the 64 KiB segment, where
            // the next one is prepared.
            producer
                .send(
                    Record::new("t")
                        .partition(p)
                        .value(vec![round as u8; 20 << 10]),
                )
                .unwrap();
            let now = tasks();
            most = most.max(now.len());
            seen.extend(now.difference(&initial).cloned());
            if p % 50 == 0 {
                names.extend(thread_names());
            }
        }
    }
    assert!(
        most <= allowed,
        "{most} threads while appending to {PARTITIONS} partitions (at most {allowed}): {names:?}"
    );
    assert!(
        seen.len() <= allowed - before,
        "{} threads started while appending to {PARTITIONS} partitions: {names:?}",
        seen.len()
    );
    for n in &names {
        assert!(
            !["mqlite-populate", "mqlite-write-ahe", "mqlite-prepare"].contains(&n.as_str()),
            "a thread per partition's job: {n}"
        );
    }
    assert!(tasks().len() <= allowed, "after the appends");
    drop(producer);
    mq.close().unwrap();
    let after = tasks().len();
    assert!(
        after <= before,
        "threads after the close: {after}, before the open: {before}"
    );
}

fn descriptors_with_a_small_limit() {
    const PARTITIONS: u32 = 100;
    const LIMIT: usize = 8;
    let tmp = tempfile::tempdir().unwrap();
    let before = fds();
    let mq = Broker::open(tmp.path(), common::cfg().max_open_files(LIMIT)).unwrap();
    mq.create_topic("t", TopicConfig::new(PARTITIONS).segment_bytes(128 << 10))
        .unwrap();
    // The cache, the directory lock, and one file opened for a call.
    let allowed = before + LIMIT + 2;
    let mut most = fds();
    let producer = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    for round in 0..3u32 {
        for p in 0..PARTITIONS {
            let len = if round == 1 { 70 << 10 } else { 200 };
            producer
                .send(Record::new("t").partition(p).value(vec![p as u8; len]))
                .unwrap();
            most = most.max(fds());
        }
    }
    for p in 0..PARTITIONS {
        let got = read_partition(&mq, "t", p).unwrap();
        assert_eq!(got.len(), 3, "partition {p}");
        assert_eq!(got[1].value.as_ref().unwrap().len(), 70 << 10);
        most = most.max(fds());
    }
    assert!(
        most <= allowed,
        "{most} descriptors open with {PARTITIONS} partitions and max_open_files {LIMIT} \
         (at most {allowed})"
    );
    drop(producer);
    mq.close().unwrap();
    drop(mq);
    assert!(fds() <= before, "descriptors left after the close");
}
