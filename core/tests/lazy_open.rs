//! Partitions open on first use after a clean close: the open reads one
//! summary file and each partition's recovery point, no segment; the first
//! use of a partition opens it, once, whatever the number of threads; what
//! is reported stays what the eager open reported; an unclean exit still
//! checks every partition.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use common::{read_partition, segment_logs};
use mqlite::{
    Broker, Config, ConsumerConfig, Error, OffsetReset, OpenMode, PartitionInfo, ProducerConfig,
    Record, TopicConfig,
};

/// Exclusive mode, by name: these tests check how its open leaves partitions
/// closed until first use and checks them then, which shared mode does
/// otherwise (docs/decisions.md, "A data directory's mode by name").
fn cfg() -> Config {
    common::cfg().mode(OpenMode::Exclusive)
}

const TOPIC: &str = "t";
const CHILD_DIR: &str = "MQLITE_LAZY_OPEN_CHILD_DIR";
const SUMMARY: &str = "partitions.summary";

/// The tests run one at a time: one counts this process's descriptors and
/// mappings.
static ALONE: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn maps() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

/// Sends `n` records of `size` bytes to `partition`.
fn send(mq: &Broker, partition: u32, n: usize, size: usize) {
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..n {
        producer
            .send(
                Record::new(TOPIC)
                    .partition(partition)
                    .value(vec![b'a' + (i % 26) as u8; size]),
            )
            .unwrap();
    }
}

/// What describing a partition reports, but the flushes since open.
fn described(p: &PartitionInfo) -> (u32, u64, u64, u64, usize) {
    (
        p.partition,
        p.start_offset,
        p.end_offset,
        p.size_bytes,
        p.segments,
    )
}

/// A topic of 6 partitions (several segments in some, partition 5 empty)
/// closed cleanly, and what describing it said before the close.
fn filled(dir: &Path) -> Vec<PartitionInfo> {
    let mq = Broker::open(dir, cfg()).unwrap();
    mq.create_topic(TOPIC, TopicConfig::new(6).segment_bytes(8192))
        .unwrap();
    for p in 0..5 {
        send(&mq, p, 20 + 40 * p as usize, 100 + 50 * p as usize);
    }
    let mut c = mq
        .consumer(ConsumerConfig {
            group_id: Some("g".into()),
            ..ConsumerConfig::default()
        })
        .unwrap();
    c.assign(&[(TOPIC, 1), (TOPIC, 2)]).unwrap();
    c.commit_offsets(&[(TOPIC, 1, 7, ""), (TOPIC, 2, 30, "")])
        .unwrap();
    drop(c);
    let before = mq.topic(TOPIC).unwrap().partitions;
    mq.close().unwrap();
    assert!(
        dir.join(SUMMARY).exists(),
        "a clean close writes the summary"
    );
    before
}

/// After a clean close, an untouched partition is described, counted in
/// lag, produced to and consumed from as before; the summary is removed by
/// the open and written again by the close.
#[test]
fn untouched_partitions_report_and_work_as_before() {
    let _alone = alone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let before = filled(dir);
    let mq = Broker::open(dir, cfg()).unwrap();
    assert!(!dir.join(SUMMARY).exists(), "the open removes the summary");
    assert_eq!(mq.topics(), vec![TOPIC.to_owned()]);
    let after = mq.topic(TOPIC).unwrap().partitions;
    assert_eq!(
        after.iter().map(described).collect::<Vec<_>>(),
        before.iter().map(described).collect::<Vec<_>>()
    );
    assert!(before.iter().any(|p| p.segments > 1));
    assert!(after
        .iter()
        .all(|p| p.recovery == mqlite::RecoveryStats::default()));
    // Lag and committed offsets of a group.
    let mut c = mq
        .consumer(ConsumerConfig {
            group_id: Some("g".into()),
            ..ConsumerConfig::default()
        })
        .unwrap();
    c.assign(&[(TOPIC, 1), (TOPIC, 2)]).unwrap();
    assert_eq!(c.committed(TOPIC, 2).unwrap().unwrap().offset, 30);
    assert_eq!(c.position(TOPIC, 1).unwrap(), 7);
    assert_eq!(
        c.lag().unwrap(),
        vec![
            (TOPIC.to_owned(), 1, before[1].end_offset - 7),
            (TOPIC.to_owned(), 2, before[2].end_offset - 30)
        ]
    );
    drop(c);
    // Produced to and consumed from.
    send(&mq, 3, 5, 10);
    let got = read_partition(&mq, TOPIC, 3).unwrap();
    assert_eq!(got.len() as u64, before[3].end_offset + 5);
    assert_eq!(got.last().unwrap().value.as_deref(), Some(&[b'e'; 10][..]));
    assert_eq!(read_partition(&mq, TOPIC, 4).unwrap().len(), 180);
    mq.close().unwrap();
    assert!(dir.join(SUMMARY).exists());
    // Once more: a partition appended to in the last session is described
    // from the new summary, the others from the one before.
    let mq = Broker::open(dir, cfg()).unwrap();
    let again = mq.topic(TOPIC).unwrap().partitions;
    assert_eq!(again[3].end_offset, before[3].end_offset + 5);
    assert_eq!(described(&again[4]), described(&before[4]));
}

/// The open of 2,000 partitions closed cleanly maps and holds open no
/// partition file: descriptors and mappings do not grow with the number of
/// partitions until they are used.
#[test]
fn a_clean_open_maps_no_partition_until_it_is_used() {
    let _alone = alone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    {
        let mq = Broker::open(dir, cfg()).unwrap();
        mq.create_topic(TOPIC, TopicConfig::new(2000)).unwrap();
        send(&mq, 7, 3, 10);
        mq.close().unwrap();
    }
    let (fds0, maps0) = (fds(), maps());
    let mq = Broker::open(dir, cfg()).unwrap();
    assert_eq!(mq.topics(), vec![TOPIC.to_owned()]);
    let (fds1, maps1) = (fds(), maps());
    assert!(
        fds1 <= fds0 + 8,
        "{fds0} descriptors before the open, {fds1} after"
    );
    assert!(
        maps1 <= maps0 + 40,
        "{maps0} mappings before the open, {maps1} after"
    );
    // Reading one partition opens that one alone.
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[(TOPIC, 7)]).unwrap();
    c.seek(TOPIC, 7, 0).unwrap();
    let got = c.poll(Duration::from_secs(5)).unwrap();
    assert_eq!(got.len(), 3);
    let maps2 = maps();
    assert!(maps2 > maps1, "the partition read is mapped");
    assert!(
        maps2 <= maps1 + 40,
        "{maps1} mappings, {maps2} after one partition's use"
    );
    drop(got);
    drop(c);
    // A send to one partition opens that one alone, whether it is open
    // already or not.
    send(&mq, 7, 1, 10);
    send(&mq, 9, 1, 10);
    let maps3 = maps();
    assert!(
        maps3 <= maps2 + 40,
        "{maps2} mappings, {maps3} after sends to two partitions"
    );
    assert_eq!(read_partition(&mq, TOPIC, 7).unwrap().len(), 4);
    // Keyed sends over the whole topic open the partitions they reach.
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let batch: Vec<Record> = (0..50)
        .map(|i| Record::new(TOPIC).key(format!("k{i}")).value("v"))
        .collect();
    let borrowed: Vec<_> = batch.iter().map(Record::as_borrowed).collect();
    producer.send_batch(&borrowed).unwrap();
    assert!(maps() > maps3, "the keyed records' partitions are mapped");
}

/// Several threads using a partition not open yet get one log: the first
/// use opens it once.
#[test]
fn concurrent_first_use_opens_once() {
    let _alone = alone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    filled(dir);
    let mq = Arc::new(Broker::open(dir, cfg()).unwrap());
    let threads = 8;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (mq, barrier) = (Arc::clone(&mq), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let producer = mq.producer(ProducerConfig::default()).unwrap();
                producer
                    .send(Record::new(TOPIC).partition(4).value(vec![i as u8; 8]))
                    .unwrap()
            })
        })
        .collect();
    let mut offsets: Vec<u64> = handles
        .into_iter()
        .map(|h| h.join().unwrap().offset)
        .collect();
    offsets.sort_unstable();
    // One log: every send got its own offset after the old end.
    assert_eq!(offsets, (180..180 + threads as u64).collect::<Vec<_>>());
    assert_eq!(read_partition(&mq, TOPIC, 4).unwrap().len(), 180 + threads);
}

/// A consumer subscribed before anything is appended to a partition not
/// open yet is woken by the first append.
#[test]
fn a_parked_consumer_is_woken_by_the_first_append() {
    let _alone = alone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    filled(dir);
    let mq = Arc::new(Broker::open(dir, cfg()).unwrap());
    let mut c = mq
        .consumer(ConsumerConfig {
            auto_offset_reset: OffsetReset::Latest,
            ..ConsumerConfig::default()
        })
        .unwrap();
    c.subscribe(&[TOPIC]).unwrap();
    assert!(c.poll(Duration::ZERO).unwrap().is_empty());
    let sender = {
        let mq = Arc::clone(&mq);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            send(&mq, 5, 1, 4);
        })
    };
    let got = c.poll(Duration::from_secs(20)).unwrap();
    sender.join().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].partition(), got[0].offset()), (5, 0));
}

/// A partition damaged while the broker was closed: damage in its log is
/// found and cut as by the eager open; a partition that cannot be opened
/// fails its first use (and every later one) with a typed error, not a
/// panic, and the other partitions work.
#[test]
fn damage_found_on_first_use_is_an_error_of_that_partition() {
    let _alone = alone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let before = filled(dir);
    // Partition 1: a byte of its last batch flipped.
    let log = segment_logs(dir, TOPIC, 1).pop().unwrap();
    let mut bytes = std::fs::read(&log).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap();
    bytes[end - 10] ^= 0x40;
    std::fs::write(&log, bytes).unwrap();
    // Partition 2: its active segment's log replaced by a directory.
    let log = segment_logs(dir, TOPIC, 2).pop().unwrap();
    std::fs::remove_file(&log).unwrap();
    std::fs::create_dir(&log).unwrap();
    let mq = Broker::open(dir, cfg()).unwrap();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    for _ in 0..2 {
        let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
        match c.assign(&[(TOPIC, 2)]) {
            Err(Error::Io { .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(mq.topic(TOPIC), Err(Error::Io { .. })));
        assert!(mq.offset_for_timestamp(TOPIC, 2, 0).is_err());
        assert!(producer
            .send(Record::new(TOPIC).partition(2).value(&b"x"[..]))
            .is_err());
    }
    // The others work; partition 1 was cut at the damage, as recovery of a
    // cleanly closed log does.
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[(TOPIC, 0), (TOPIC, 1)]).unwrap();
    c.seek_to_end(TOPIC, 1).unwrap();
    assert_eq!(c.position(TOPIC, 1).unwrap(), before[1].end_offset - 1);
    c.seek(TOPIC, 1, 0).unwrap();
    let mut read = 0;
    while read < before[1].end_offset - 1 {
        let got = c.poll(Duration::from_secs(5)).unwrap();
        assert!(!got.is_empty());
        read += got.iter().filter(|m| m.partition() == 1).count() as u64;
    }
    assert_eq!(
        mq.offset_for_timestamp(TOPIC, 1, 0).unwrap(),
        Some(0),
        "partition 1 is usable"
    );
    assert_eq!(
        mq.offset_for_timestamp(TOPIC, 0, 0).unwrap(),
        Some(0),
        "partition 0 opened on first use"
    );
}

/// A group member given a partition whose log does not open keeps it
/// (nobody else reads it), warns, and reads it once it opens: it is never
/// dropped from the member's share without a word.
#[test]
fn a_group_member_reads_a_partition_that_did_not_open_once_it_does() {
    let _alone = alone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let before = filled(dir);
    // Partition 2's active log set aside, a directory in its place.
    let log = segment_logs(dir, TOPIC, 2).pop().unwrap();
    let aside = log.with_extension("aside");
    std::fs::rename(&log, &aside).unwrap();
    std::fs::create_dir(&log).unwrap();
    let mq = Broker::open(dir, cfg()).unwrap();
    let mut c = mq
        .consumer(ConsumerConfig::group("fresh").auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.subscribe(&[TOPIC]).unwrap();
    let mut got = [0u64; 6];
    let others: u64 = before
        .iter()
        .filter(|p| p.partition != 2)
        .map(|p| p.end_offset)
        .sum();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while got.iter().sum::<u64>() < others {
        assert!(std::time::Instant::now() < deadline, "read {got:?}");
        for m in c.poll(Duration::from_millis(100)).unwrap() {
            got[m.partition() as usize] += 1;
        }
    }
    assert_eq!(got[2], 0);
    assert!(!c.assignment().contains(&(TOPIC.to_owned(), 2)));
    let group = mq.describe_group("fresh").unwrap();
    assert!(
        group
            .members
            .iter()
            .any(|m| m.partitions.contains(&(TOPIC.to_owned(), 2))),
        "the group still gives partition 2 to the member: {group:?}"
    );
    // Repaired: the next polls open it and read it from the start.
    std::fs::remove_dir(&log).unwrap();
    std::fs::rename(&aside, &log).unwrap();
    while got[2] < before[2].end_offset {
        assert!(std::time::Instant::now() < deadline, "read {got:?}");
        for m in c.poll(Duration::from_millis(100)).unwrap() {
            got[m.partition() as usize] += 1;
        }
    }
    assert_eq!(got[2], before[2].end_offset);
    assert!(c.assignment().contains(&(TOPIC.to_owned(), 2)));
}

/// The child: opens the directory (partitions open on first use), appends
/// to partition 0 and ends at once, as `kill -9` would.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let mq = Broker::open(&dir, cfg()).unwrap();
    send(&mq, 0, 1, 300);
    std::process::exit(0); // nothing is closed
}

/// After an unclean exit of a session that opened lazily, the next open
/// checks every partition, those the session never used too: damage in
/// one of those is a torn tail cut as after any crash.
#[test]
fn an_unclean_exit_after_a_lazy_open_checks_every_partition() {
    let _alone = alone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let before = filled(dir);
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(!dir.join(SUMMARY).exists(), "no summary after a crash");
    // Partition 3 was not used by the crashed session.
    let log = segment_logs(dir, TOPIC, 3).pop().unwrap();
    let mut bytes = std::fs::read(&log).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap();
    bytes[end - 10] ^= 0x40;
    std::fs::write(&log, bytes).unwrap();
    let mq = Broker::open(dir, cfg()).unwrap();
    let info = mq.topic(TOPIC).unwrap().partitions;
    assert_eq!(info[0].end_offset, before[0].end_offset + 1);
    let r = info[3].recovery;
    assert_eq!(
        (r.torn_tails, r.corruptions),
        (1, 0),
        "checked as after an unclean shutdown: {r:?}"
    );
    assert_eq!(info[3].end_offset, before[3].end_offset - 1);
    assert_eq!(info[4].recovery, mqlite::RecoveryStats::default());
}
