//! File descriptors and memory mappings a broker holds: a constant number
//! per partition (none per sealed segment), and none at all once the
//! broker is closed, whatever producers and consumers made from it are
//! still alive. Counted in `/proc/self/fd` and `/proc/self/maps` (Linux).
//!
//! The tests of this file take one lock: the process-wide descriptor count
//! is only meaningful while no other test of the file opens files.
//! Run with `--nocapture` to see the figures.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use mqlite::{
    Acks, Broker, Config, ConsumerConfig, OffsetReset, OpenMode, ProducerConfig, Record,
    TopicConfig,
};

/// Exclusive mode, by name: these tests count its descriptors and mappings
/// (shared mode holds more: tail pages, process files).
fn cfg() -> Config {
    common::cfg().mode(OpenMode::Exclusive)
}

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Descriptors open in this process.
fn process_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Descriptors open on files under `dir`, the data directory's lock file
/// (held while the broker is open) not counted.
fn fds_under(dir: &Path) -> usize {
    // The directory's own locks: `LOCK`, and `LIVE` (held against shared
    // openers), one each whatever the partitions.
    let locks = [dir.join(mqlite::LOCK_FILE), dir.join("LIVE")];
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir) && !locks.contains(target))
        .count()
}

/// Mappings of files under `dir` (those renamed aside included).
fn maps_under(dir: &Path) -> usize {
    let dir = dir.to_str().unwrap();
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(5)
                .is_some_and(|p| p.starts_with(dir))
        })
        .count()
}

/// A fresh data directory, by its canonical path (what readlink shows).
fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().canonicalize().unwrap();
    (tmp, path)
}

/// Sealed segments of every partition of `topic`.
fn sealed_segments(mq: &Broker, topic: &str) -> usize {
    mq.topic(topic)
        .unwrap()
        .partitions
        .iter()
        .map(|p| p.segments - 1)
        .sum()
}

const PARTITIONS: u32 = 4;

fn send_round(p: &mqlite::Producer, topic: &str, n: usize) {
    for i in 0..n {
        let part = (i as u32) % PARTITIONS;
        p.send(Record::new(topic).partition(part).value(vec![b'x'; 300]))
            .unwrap();
    }
}

#[test]
fn descriptors_do_not_grow_with_sealed_segments_and_close_releases_everything() {
    let _serial = serial();
    let baseline_fds = process_fds();
    let (_tmp, dir) = data_dir();
    let mq = Broker::open(&dir, cfg()).unwrap();
    let topic = "rolls";
    mq.create_topic(topic, TopicConfig::new(PARTITIONS).segment_bytes(4096))
        .unwrap();
    let opened = fds_under(&dir);
    let producer = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    send_round(&producer, topic, 200);
    let (fds_few, maps_few, sealed_few) = (
        fds_under(&dir),
        maps_under(&dir),
        sealed_segments(&mq, topic),
    );
    send_round(&producer, topic, 2_000);
    let (fds_many, maps_many, sealed_many) = (
        fds_under(&dir),
        maps_under(&dir),
        sealed_segments(&mq, topic),
    );
    eprintln!(
        "{PARTITIONS} partitions: opened {opened} fds; {sealed_few} sealed segments: \
         {fds_few} fds, {maps_few} maps; {sealed_many} sealed: {fds_many} fds, {maps_many} maps"
    );
    assert!(
        sealed_many >= sealed_few + 100,
        "{sealed_few} -> {sealed_many}"
    );
    // Opened, never written: the active segment's log, one per partition.
    assert_eq!(opened, PARTITIONS as usize);
    // Written and flushed: the recovery point too.
    assert_eq!(fds_few, 2 * PARTITIONS as usize);
    assert_eq!(
        fds_many, fds_few,
        "descriptors grew with the sealed segments"
    );

    // A consumer that read everything, its messages dropped, and the
    // producer, both kept alive across the close.
    let mut consumer = mq
        .consumer(ConsumerConfig::default().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut read = 0;
    loop {
        let batch = consumer.poll(Duration::ZERO).unwrap();
        if batch.is_empty() {
            break;
        }
        read += batch.len();
    }
    assert_eq!(read, 2_200);
    mq.close().unwrap();
    eprintln!(
        "closed, producer and consumer alive: {} fds, {} maps",
        fds_under(&dir),
        maps_under(&dir)
    );
    assert_eq!(
        fds_under(&dir),
        0,
        "descriptors under the data directory after close"
    );
    assert_eq!(
        maps_under(&dir),
        0,
        "mappings under the data directory after close"
    );
    assert_eq!(
        process_fds(),
        baseline_fds,
        "process descriptors after close"
    );
    // The objects still work as far as a closed broker allows.
    assert!(producer.send(Record::new(topic).value("late")).is_err());
    assert!(consumer.poll(Duration::ZERO).is_err());
    drop((producer, consumer, mq));
    assert_eq!(process_fds(), baseline_fds);
}

/// A broker on `dir` with topic `held` of 100 records over several 4 KiB
/// segments, and a consumer assigned its partition from the start.
fn hundred_records_over_segments(dir: &Path) -> (Broker, mqlite::Consumer) {
    let mq = Broker::open(dir, cfg()).unwrap();
    mq.create_topic("held", TopicConfig::new(1).segment_bytes(4096))
        .unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..100u32 {
        p.send(Record::new("held").value(format!("value {i:04} {}", "y".repeat(200))))
            .unwrap();
    }
    let mut c = mq
        .consumer(ConsumerConfig::default().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[("held", 0)]).unwrap();
    (mq, c)
}

#[test]
fn a_live_message_keeps_its_segment_mapped_without_descriptors() {
    let _serial = serial();
    let (_tmp, dir) = data_dir();
    let (mq, mut c) = hundred_records_over_segments(&dir);
    let mut all = Vec::new();
    loop {
        let batch = c.poll(Duration::ZERO).unwrap();
        if batch.is_empty() {
            break;
        }
        all.extend(batch);
    }
    assert_eq!(all.len(), 100);
    // The first message, in the first sealed segment, and the last, in the
    // active one.
    let last = all.pop().unwrap();
    let first = all.swap_remove(0);
    drop(all);
    mq.close().unwrap();
    let maps = maps_under(&dir);
    eprintln!(
        "two live messages after close: {} fds, {maps} maps",
        fds_under(&dir)
    );
    assert_eq!(fds_under(&dir), 0);
    // Their two segments' logs at least (an index is mapped when not empty).
    assert!((2..=6).contains(&maps), "{maps} mappings");
    assert!(first.value().unwrap().starts_with(b"value 0000 "));
    assert!(last.value().unwrap().starts_with(b"value 0099 "));
    drop(first);
    drop(last);
    assert_eq!(maps_under(&dir), 0);
}

#[test]
fn idle_partitions_hold_one_descriptor_written_ones_two() {
    let _serial = serial();
    let (_tmp, dir) = data_dir();
    let topics = 50;
    {
        let mq = Broker::open(&dir, cfg()).unwrap();
        for t in 0..topics {
            mq.create_topic(&format!("t{t}"), TopicConfig::new(1).segment_bytes(4096))
                .unwrap();
        }
        assert_eq!(fds_under(&dir), topics);
        let p = mq
            .producer(ProducerConfig::default().acks(Acks::All))
            .unwrap();
        for t in 0..topics {
            p.send(Record::new(format!("t{t}")).value("v")).unwrap();
        }
        assert_eq!(fds_under(&dir), 2 * topics);
        mq.close().unwrap();
        assert_eq!(fds_under(&dir), 0);
    }
    let mq = Broker::open(&dir, cfg()).unwrap();
    // After a clean close partitions open on first use: none yet.
    assert_eq!(fds_under(&dir), 0, "after a reopen");
    for t in 0..topics {
        mq.topic(&format!("t{t}")).unwrap();
    }
    assert_eq!(fds_under(&dir), topics, "once opened");
    drop(mq);
    assert_eq!(fds_under(&dir), 0);
}

/// Descriptors left for the rest of the process (standard streams, the
/// test harness, the data directory's lock).
const SLACK: u64 = 64;

/// Environment variable that turns [`many_topics_child`] on.
const CHILD: &str = "MQLITE_RESOURCES_CHILD";

/// Under a descriptor limit of twice the topic count (the ratio of 10,000
/// topics under `ulimit -n 20000`) plus [`SLACK`], every topic can be
/// created, written (`acks=1`), closed (which flushes) and opened again.
/// Runs in a child process, which sets its own `RLIMIT_NOFILE`.
/// `MQLITE_RESOURCES_TOPICS` sets the number of topics (default 1,000),
/// `MQLITE_RESOURCES_NOFILE` the limit.
#[test]
fn topics_fit_under_twice_their_number_of_descriptors() {
    let _serial = serial();
    let topics: usize = std::env::var("MQLITE_RESOURCES_TOPICS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "many_topics_child", "--nocapture"])
        .env(CHILD, topics.to_string())
        .env(
            "MQLITE_RESOURCES_NOFILE",
            std::env::var("MQLITE_RESOURCES_NOFILE")
                .unwrap_or_else(|_| (2 * topics as u64 + SLACK).to_string()),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(out.status.success(), "child failed: {stderr}");
    assert!(
        stderr.contains("many topics: ok"),
        "child did not run: {stderr}"
    );
}

/// The child of [`topics_fit_under_twice_their_number_of_descriptors`].
#[test]
#[ignore = "run by topics_fit_under_twice_their_number_of_descriptors"]
fn many_topics_child() {
    let Some(topics) = std::env::var(CHILD)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        return;
    };
    let limit: u64 = std::env::var("MQLITE_RESOURCES_NOFILE")
        .unwrap()
        .parse()
        .unwrap();
    let rl = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: plain syscall with a valid struct.
    assert_eq!(
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const rl) },
        0
    );
    let (_tmp, dir) = data_dir();
    {
        let mq = Broker::open(&dir, cfg()).unwrap();
        for t in 0..topics {
            mq.create_topic(&format!("t{t}"), TopicConfig::new(1).segment_bytes(4096))
                .unwrap_or_else(|e| panic!("topic {t} of {topics}: {e}"));
        }
        let p = mq
            .producer(ProducerConfig::default().acks(Acks::One))
            .unwrap();
        for t in 0..topics {
            p.send(Record::new(format!("t{t}")).value("v")).unwrap();
        }
        eprintln!(
            "{topics} topics under RLIMIT_NOFILE {limit}: {} fds open",
            process_fds()
        );
        mq.close().unwrap();
    }
    let mq = Broker::open(&dir, cfg()).unwrap();
    assert_eq!(mq.topics().len(), topics);
    eprintln!("reopened: {} fds open; many topics: ok", process_fds());
}

/// Messages a consumer fetched for `poll_one` and did not hand out yet are
/// dropped when the broker closes: no mapping outlives the close but those
/// of messages the application holds.
#[test]
fn messages_held_for_poll_one_are_released_at_close() {
    let _serial = serial();
    let (_tmp, dir) = data_dir();
    let (mq, mut c) = hundred_records_over_segments(&dir);
    // One handed out; the rest of the poll's worth is held by the consumer.
    let first = c.poll_one(Duration::ZERO).unwrap().unwrap();
    assert_eq!(first.offset(), 0);
    drop(first);
    assert!(maps_under(&dir) > 0);
    mq.close().unwrap();
    assert_eq!(fds_under(&dir), 0);
    assert_eq!(
        maps_under(&dir),
        0,
        "the consumer, still alive, holds no mapping"
    );
    assert!(matches!(
        c.poll_one(Duration::ZERO),
        Err(mqlite::Error::Closed(_))
    ));
}
