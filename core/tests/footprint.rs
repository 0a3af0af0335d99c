//! Disk footprint: segment and index files start small and grow in steps
//! ahead of the writer (the map covers the whole segment, the file only
//! what was allocated). A small data directory stays small; files cut in
//! the middle of a growth recover; directories written when every segment
//! was preallocated to its full size still open, read and append.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{partition_dir, read_partition, segment_logs, Msg};
use mqlite::{
    Broker, Config, ConsumerConfig, OffsetReset, OpenMode, ProducerConfig, Record, TopicConfig,
};

/// Exclusive mode, by name: these tests check how its segment files grow, are
/// allocated and are cut at open (shared mode pads sealed segments for readers
/// that map them and checks only after a crash).
fn cfg() -> Config {
    common::cfg().mode(OpenMode::Exclusive)
}

/// Bytes the files and directories under `dir` take on disk (allocated
/// blocks, as `du -s` counts them).
fn disk_usage(dir: &Path) -> u64 {
    let meta = std::fs::symlink_metadata(dir).unwrap();
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for e in std::fs::read_dir(dir).unwrap() {
            total += disk_usage(&e.unwrap().path());
        }
    }
    total
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

/// The hello world: one topic of 4 partitions, 10 small messages sent and
/// read back, with the default configuration (page faulting ahead on).
#[test]
fn hello_world_takes_at_most_one_mib() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mq = Broker::open(&dir, Config::default()).unwrap();
    mq.create_topic("greetings", TopicConfig::new(4)).unwrap();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..10 {
        producer
            .send(Record::new("greetings").value(format!("hello {i}")))
            .unwrap();
    }
    let mut c = mq
        .consumer(ConsumerConfig::group("g").auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.subscribe(&["greetings"]).unwrap();
    let mut got = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while got < 10 && std::time::Instant::now() < deadline {
        got += c.poll(std::time::Duration::from_millis(100)).unwrap().len();
    }
    assert_eq!(got, 10);
    c.commit().unwrap();
    let open = disk_usage(&dir);
    drop(c);
    drop(producer);
    mq.close().unwrap();
    let closed = disk_usage(&dir);
    println!("hello world: {open} bytes on disk while open, {closed} after close");
    assert!(open <= 1 << 20, "{open} bytes on disk while open");
    assert!(closed <= 1 << 20, "{closed} bytes on disk after close");
}

/// Writes past several growth steps: the file stays within a step of the
/// data, everything reads back, and the sealed segment is cut to its data.
#[test]
fn segment_files_grow_with_the_data() {
    for prefault in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let mq = Broker::open(&dir, cfg().prefault(prefault)).unwrap();
        let segment = 4u64 << 20;
        mq.create_topic("t", TopicConfig::new(1).segment_bytes(segment))
            .unwrap();
        let producer = mq.producer(ProducerConfig::default()).unwrap();
        let value = vec![7u8; 1000];
        let mut lens = Vec::new();
        let mut n = 0u64;
        // Up to just past the first roll.
        while mq.topic("t").unwrap().partitions[0].segments == 1 {
            producer
                .send(Record::new("t").partition(0).value(value.clone()))
                .unwrap();
            n += 1;
            if n.is_multiple_of(200) {
                let logs = segment_logs(&dir, "t", 0);
                let data = mq.topic("t").unwrap().partitions[0].size_bytes;
                let len = file_len(&logs[0]);
                assert!(len >= data, "{len} < {data}");
                // Grown ahead by at most two doubling steps (the next one
                // is taken half way through the last), never more than
                // the segment.
                assert!(len <= 4 * data + (64 << 10), "{len} for {data}");
                assert!(len <= segment);
                lens.push(len);
            }
        }
        lens.dedup();
        assert!(lens.len() >= 4, "grew in steps: {lens:?}");
        let logs = segment_logs(&dir, "t", 0);
        assert_eq!(logs.len(), 2);
        let sealed_len = file_len(&logs[0]);
        assert!(sealed_len <= segment && sealed_len > segment - 2000);
        let idx = logs[0].with_extension("idx");
        assert!(file_len(&idx) > 0 && file_len(&idx).is_multiple_of(8));
        let got = read_partition(&mq, "t", 0).unwrap();
        assert_eq!(got.len() as u64, n);
        assert!(got.iter().all(|m| m.value.as_deref() == Some(&value[..])));
        drop(producer);
        mq.close().unwrap();
        let mq = Broker::open(&dir, cfg()).unwrap();
        assert_eq!(read_partition(&mq, "t", 0).unwrap().len() as u64, n);
        // Seeks use the indexes of both segments.
        for o in (0..n).step_by(997) {
            let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
            c.assign(&[("t", 0)]).unwrap();
            c.seek("t", 0, o).unwrap();
            assert_eq!(c.poll(std::time::Duration::ZERO).unwrap()[0].offset(), o);
        }
        mq.close().unwrap();
    }
}

fn write_records(dir: &Path, n: usize, segment: u64) -> Vec<Msg> {
    let mq = Broker::open(dir, cfg()).unwrap();
    if mq.topic("t").is_err() {
        mq.create_topic("t", TopicConfig::new(1).segment_bytes(segment))
            .unwrap();
    }
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let start = mq.topic("t").unwrap().partitions[0].end_offset as usize;
    for i in start..start + n {
        producer
            .send(
                Record::new("t")
                    .partition(0)
                    .value(format!("{i:05}-{}", "v".repeat(i % 300))),
            )
            .unwrap();
    }
    drop(producer);
    let all = read_partition(&mq, "t", 0).unwrap();
    mq.close().unwrap();
    all
}

/// A crash while the file grew can leave any length between the data and
/// the segment size, page-aligned or not, or a length cutting into the
/// data (a growth that never reached the disk, with the tail lost): the
/// log opens, keeps what is whole, appends and grows again.
#[test]
fn a_file_cut_in_the_middle_of_a_growth_recovers() {
    let segment = 1u64 << 20;
    let template = tempfile::tempdir().unwrap();
    let sent = write_records(template.path(), 600, segment);
    let log = segment_logs(template.path(), "t", 0)[0].clone();
    let data_end = {
        let mq = Broker::open(template.path(), cfg()).unwrap();
        let s = mq.topic("t").unwrap().partitions[0].size_bytes;
        mq.close().unwrap();
        s
    };
    let allocated = file_len(&log);
    assert!(allocated > data_end && allocated < segment, "{allocated}");
    for (what, len, kept) in [
        ("no growth yet", 0, 0usize),
        ("just past the data, unaligned", data_end + 1000, sent.len()),
        ("at the data's end", data_end, sent.len()),
        (
            "half a step further",
            data_end + (allocated - data_end) / 2 + 3,
            sent.len(),
        ),
        ("the full segment", segment, sent.len()),
        ("into the last record", data_end - 10, sent.len() - 1),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        copy_tree(template.path(), dir);
        let pdir = partition_dir(dir, "t", 0);
        // Looks crashed: no clean-close recovery point.
        std::fs::remove_file(pdir.join("recovery.point")).unwrap();
        let log = segment_logs(dir, "t", 0)[0].clone();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(len)
            .unwrap();
        let mq = Broker::open(dir, cfg()).unwrap();
        let got = read_partition(&mq, "t", 0).unwrap();
        assert_eq!(got, sent[..kept], "{what}");
        mq.close().unwrap();
        let all = write_records(dir, 900, segment);
        assert_eq!(all.len(), kept + 900, "{what}");
        assert_eq!(all[..kept], sent[..kept], "{what}");
        let mq = Broker::open(dir, cfg()).unwrap();
        assert_eq!(read_partition(&mq, "t", 0).unwrap(), all, "{what}");
        mq.close().unwrap();
    }
}

/// A directory written when segments and indexes were preallocated to
/// their full size (zeros after the data) opens, reads, appends and rolls;
/// the rolled segment is cut to its data.
#[test]
fn fully_preallocated_files_still_open() {
    let segment = 256u64 << 10;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let sent = write_records(dir, 300, segment);
    let log = segment_logs(dir, "t", 0)[0].clone();
    // What an older version left: every file at its full size.
    let entries = segment / 4096 + 2;
    for (ext, len) in [
        ("log", segment),
        ("idx", 8 * entries),
        ("tix", 16 * entries),
    ] {
        std::fs::OpenOptions::new()
            .write(true)
            .open(log.with_extension(ext))
            .unwrap()
            .set_len(len)
            .unwrap();
    }
    let mq = Broker::open(dir, cfg()).unwrap();
    assert_eq!(read_partition(&mq, "t", 0).unwrap(), sent);
    mq.close().unwrap();
    assert_eq!(file_len(&log), segment, "an open changed the file's length");
    // Appends fill it, roll, and the old segment is trimmed.
    let all = write_records(dir, 1500, segment);
    assert_eq!(all[..sent.len()], sent[..]);
    let logs = segment_logs(dir, "t", 0);
    assert!(logs.len() >= 2);
    assert!(file_len(&logs[0]) < segment);
    let mq = Broker::open(dir, cfg()).unwrap();
    assert_eq!(read_partition(&mq, "t", 0).unwrap(), all);
    mq.close().unwrap();
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// An explicit prefault (`RawLog::prefault`) allocates the whole active
/// segment, so the writer meets no growth step afterwards.
#[test]
fn an_explicit_prefault_allocates_the_whole_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mq = Broker::open(&dir, cfg()).unwrap();
    let segment = 2u64 << 20;
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(segment))
        .unwrap();
    let log = segment_logs(&dir, "t", 0)[0].clone();
    assert!(file_len(&log) < segment);
    mqlite::raw::partition_log(&mq, "t", 0).unwrap().prefault();
    assert_eq!(file_len(&log), segment);
    mq.close().unwrap();
}
