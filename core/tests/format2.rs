//! Format version 2: the compact one-record batch (`magic` 2) next to the
//! full layout (`magic` 1), how big it is on disk, what it round-trips,
//! recovery of damaged compact batches, named producers after a restart,
//! the refusal of a newer `magic`, and directories written by format
//! versions 1 and 2 (`fixtures/`) read as they are and written on (format
//! 3's transaction markers included).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{batches, cfg, partition_dir, read_partition, segment_logs, Msg};
use mqlite::log::batch::{
    self, check, encode, encoded_len, stamp_log_append_time, BatchHeader, Check, ProducerFields,
    RecordRef, Records, ATTR_APP_SEQUENCE, ATTR_LOG_APPEND_TIME, ATTR_NAMED_PRODUCER,
    LENGTH_PREFIX, MAGIC, MAGIC_COMPACT, UNSUPPORTED_VERSION,
};
use mqlite::log::check::{check_partition, CheckOptions};
use mqlite::log::follow::{Follower, SETTLE};
use mqlite::{
    BorrowedRecord, Broker, Config, Error, ErrorKind, Header, OpenMode, ProducerConfig, Record,
    RecoveryStats, TopicConfig,
};

/// Exclusive mode, by name: for the tests that check what its open does with a
/// damaged, torn or newer-format log, and the files it keeps
/// (docs/decisions.md, "A data directory's mode by name").
fn exclusive() -> Config {
    cfg().mode(OpenMode::Exclusive)
}

/// The most bytes a one-record batch may take beyond its key and value.
const MAX_OVERHEAD: usize = 40;

/// The tests read and damage the segment files as exclusive mode lays them
/// out, and check what its open makes of them.
fn open(dir: &Path) -> Broker {
    Broker::open(dir, exclusive()).unwrap()
}

/// Bytes of the partition's log(s) up to the end of their data.
fn used_bytes(dir: &Path, topic: &str, p: u32) -> usize {
    segment_logs(dir, topic, p)
        .iter()
        .map(|l| {
            batches(&std::fs::read(l).unwrap())
                .last()
                .map_or(0, common::Span::end)
        })
        .sum()
}

/// Headers of every batch of the partition's active segment.
fn headers(dir: &Path, topic: &str, p: u32) -> Vec<BatchHeader> {
    let log = std::fs::read(segment_logs(dir, topic, p).last().unwrap()).unwrap();
    batches(&log)
        .iter()
        .map(|s| match check(&log[s.pos..]) {
            Check::Valid(h) => h,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn one_record_batches_take_at_most_40_bytes_beyond_key_and_value() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mq = open(dir);
    const N: usize = 200;
    let cases: [(&str, ProducerConfig, bool, bool); 4] = [
        ("default-keyed", ProducerConfig::default(), true, false),
        ("default-unkeyed", ProducerConfig::default(), false, false),
        (
            "named-seq",
            ProducerConfig::default().name("app"),
            true,
            true,
        ),
        (
            "plain",
            ProducerConfig::default().idempotent(false),
            false,
            false,
        ),
    ];
    for (topic, config, keyed, sequenced) in cases {
        mq.create_topic(topic, TopicConfig::new(1)).unwrap();
        let p = mq.producer(config).unwrap();
        let mut payload = 0;
        // What format 1 wrote for the same records: each one a full batch.
        let mut full = 0;
        for i in 0..N {
            let value = vec![b'v'; 16 + i % 100];
            let mut r = Record::new(topic).value(value.clone());
            payload += value.len();
            let key = keyed.then(|| format!("key-{i}"));
            full += batch::batch_len(&[RecordRef {
                key: key.as_deref().map(str::as_bytes),
                value: Some(&value),
                headers: &[],
                timestamp: 0,
            }]);
            if let Some(key) = key {
                payload += key.len();
                r = r.key(key);
            }
            if sequenced {
                r = r.sequence(i as i64);
            }
            p.send(r).unwrap();
        }
        p.close().unwrap();
        let used = used_bytes(dir, topic, 0);
        // The figures docs/decisions.md quotes (`-- --nocapture`).
        println!(
            "{topic}: {:.2} bytes per record beyond key and value ({:.2} in format 1)",
            (used - payload) as f64 / N as f64,
            (full - payload) as f64 / N as f64
        );
        assert!(
            used <= payload + N * MAX_OVERHEAD,
            "{topic}: {used} bytes for {N} records of {payload} bytes: {} per record",
            (used - payload) as f64 / N as f64
        );
        assert_eq!(
            mq.topic(topic).unwrap().partitions[0].size_bytes as usize,
            used
        );
        for h in headers(dir, topic, 0) {
            assert_eq!(h.magic, MAGIC_COMPACT, "{topic}");
        }
    }
    // The size the old layout took, for comparison: a 16-byte value alone
    // took 88 bytes.
    let p = mq.producer(ProducerConfig::default()).unwrap();
    mq.create_topic("sixteen", TopicConfig::new(1)).unwrap();
    p.send(Record::new("sixteen").value(vec![7u8; 16])).unwrap();
    assert!(used_bytes(dir, "sixteen", 0) <= 16 + MAX_OVERHEAD);
    mq.close().unwrap();
}

/// An owned record: key, value, headers, timestamp.
type Owned = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<Header>, i64);

fn refs(r: &Owned) -> RecordRef<'_> {
    RecordRef {
        key: r.0.as_deref(),
        value: r.1.as_deref(),
        headers: &r.2,
        timestamp: r.3,
    }
}

#[test]
fn every_field_round_trips_through_the_compact_layout() {
    let records = vec![
        (
            Some(b"k".to_vec()),
            Some(b"value".to_vec()),
            vec![],
            1_700_000_000_000,
        ),
        (None, Some(vec![0u8; 300]), vec![], -5),
        (Some(b"tomb".to_vec()), None, vec![], i64::MIN),
        (None, None, vec![], i64::MAX),
        (
            Some(vec![]),
            Some(vec![]),
            vec![
                Header::new("a", "1"),
                Header::new("", ""),
                Header::new("ü", vec![0xff; 200]),
            ],
            0,
        ),
    ];
    let producers = [
        ProducerFields::default(),
        ProducerFields {
            producer_id: 0,
            producer_epoch: 0,
            base_sequence: 0,
        },
        ProducerFields {
            producer_id: 1024,
            producer_epoch: 3,
            base_sequence: 123_456_789,
        },
        ProducerFields {
            producer_id: i64::MAX,
            producer_epoch: i16::MIN,
            base_sequence: i64::MAX,
        },
        ProducerFields {
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: 7,
        },
    ];
    let attrs = [
        0,
        ATTR_NAMED_PRODUCER,
        ATTR_NAMED_PRODUCER | ATTR_APP_SEQUENCE,
        ATTR_LOG_APPEND_TIME,
        1 << 4 | 1 << 5, // transactional, control
    ];
    for r in &records {
        for producer in producers {
            for attributes in attrs {
                let rec = refs(r);
                let len = encoded_len(&[rec], &producer, attributes);
                let mut buf = vec![0u8; len];
                let n = encode(&mut buf, 42, &[rec], producer, attributes);
                assert_eq!(n, len);
                if attributes & ATTR_LOG_APPEND_TIME != 0 {
                    stamp_log_append_time(&mut buf, 1_234);
                }
                let Check::Valid(h) = check(&buf) else {
                    panic!("{:?}", check(&buf))
                };
                assert_eq!(h.magic, MAGIC_COMPACT);
                assert_eq!(h.total_len(), len);
                assert_eq!(h.base_offset, 42);
                assert_eq!((h.record_count, h.last_offset_delta), (1, 0));
                assert_eq!(h.next_offset(), 43);
                assert_eq!(h.producer, producer);
                assert_eq!(h.attributes, attributes);
                let views: Vec<_> = Records::new(&buf, &h).collect::<Result<_, _>>().unwrap();
                assert_eq!(views.len(), 1);
                let v = &views[0];
                assert_eq!(v.offset_delta, 0);
                let want_ts = if attributes & ATTR_LOG_APPEND_TIME != 0 {
                    1_234
                } else {
                    r.3
                };
                assert_eq!(h.record_timestamp(v.timestamp_delta), want_ts);
                assert_eq!(v.key.clone().map(|k| buf[k].to_vec()), r.0);
                assert_eq!(v.value.clone().map(|k| buf[k].to_vec()), r.1);
                assert_eq!(
                    batch::decode_headers(&buf[v.headers.clone()], v.header_count),
                    r.2
                );
                // The same through the records section.
                let section = batch::records_section(&buf, &h, 1 << 20).unwrap();
                let again: Vec<_> = Records::in_section(&section, &h).collect();
                assert_eq!(again.len(), 1);
                let w = again[0].clone().unwrap();
                assert_eq!(w.value.map(|k| section[k].to_vec()), r.1);
                // Every byte of the batch matters: any change is refused
                // or reads as a different base offset.
                for i in LENGTH_PREFIX..len {
                    let mut bad = buf.clone();
                    bad[i] ^= 0x10;
                    assert!(!matches!(check(&bad), Check::Valid(_)), "byte {i}");
                }
            }
        }
    }
    // Several records, or a codec, keep the full layout.
    let two = [refs(&records[0]), refs(&records[1])];
    let mut buf = vec![0u8; encoded_len(&two, &producers[2], 0)];
    encode(&mut buf, 0, &two, producers[2], 0);
    assert!(matches!(check(&buf), Check::Valid(h) if h.magic == MAGIC && h.record_count == 2));
}

#[test]
fn one_record_send_through_every_path_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mq = open(dir);
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    mq.create_topic("append", TopicConfig::new(1).log_append_time(true))
        .unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let lingering = mq
        .producer(ProducerConfig::default().linger_ms(0).idempotent(false))
        .unwrap();
    let mut want = Vec::new();
    let base = Record::new("t").timestamp(1_600_000_000_000);
    let sent = [
        base.clone().key("a").value("one"),
        base.clone().value("two").header("h", "x").header("h", ""),
        base.clone().key("tombstone"),
    ];
    for r in &sent {
        want.push(p.send(r.clone()).unwrap().offset);
    }
    // The asynchronous path (the accumulator's records section).
    lingering
        .send_async(base.clone().key("b").value("async"), |_| {})
        .unwrap();
    lingering.flush().unwrap();
    // Several records at once: the full layout.
    let many: Vec<Record> = (0..3)
        .map(|i| base.clone().value(format!("m{i}")))
        .collect();
    let borrowed: Vec<BorrowedRecord<'_>> = many.iter().map(Record::as_borrowed).collect();
    p.send_batch(&borrowed).unwrap();
    p.send(Record::new("append").value("stamped")).unwrap();
    let got = read_partition(&mq, "t", 0).unwrap();
    assert_eq!(got.len(), 7);
    assert_eq!(got[0].key.as_deref(), Some(&b"a"[..]));
    assert_eq!(
        got[1].headers,
        vec![Header::new("h", "x"), Header::new("h", "")]
    );
    assert_eq!(got[2].value, None);
    assert_eq!(got[3].value.as_deref(), Some(&b"async"[..]));
    assert!(got.iter().all(|m| m.timestamp == 1_600_000_000_000));
    assert_eq!(
        got.iter().map(|m| m.offset).collect::<Vec<_>>(),
        (0..7).collect::<Vec<_>>()
    );
    let magics: Vec<u8> = headers(dir, "t", 0).iter().map(|h| h.magic).collect();
    assert_eq!(magics, [2, 2, 2, 2, 1]);
    // Log-append time: the record carries the append time.
    let stamped = read_partition(&mq, "append", 0).unwrap();
    let h = headers(dir, "append", 0)[0];
    assert_eq!(h.magic, MAGIC_COMPACT);
    assert_ne!(h.attributes & ATTR_LOG_APPEND_TIME, 0);
    assert_eq!(stamped[0].timestamp, h.max_timestamp);
    assert!(stamped[0].timestamp > 1_700_000_000_000);
    // The follower and the checker read the mixed log the same way.
    mq.close().unwrap();
    let mut f = Follower::open(partition_dir(dir, "t", 0)).unwrap();
    let followed = f.poll(100).unwrap();
    assert_eq!(followed.len(), 7);
    for (a, b) in followed.iter().zip(&got) {
        assert_eq!(
            (a.offset, &a.key, &a.value, &a.headers),
            (b.offset, &b.key, &b.value, &b.headers)
        );
        assert_eq!(a.timestamp, b.timestamp);
    }
    let report = check_partition(
        &partition_dir(dir, "t", 0),
        CheckOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert!(report.issues.is_empty(), "{:?}", report.issues);
    assert_eq!(report.records(), 7);
}

/// A directory of one-record batches followed by a batch of several,
/// closed; returns the log path and what was written.
fn mixed_log(dir: &Path, n: usize) -> (std::path::PathBuf, Vec<Msg>) {
    let mq = open(dir);
    mq.create_topic("t", TopicConfig::new(1).index_interval_bytes(128))
        .unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..n {
        let r = Record::new("t")
            .key(format!("k{i}"))
            .value(format!("value {i}"));
        p.send(r).unwrap();
        if i % 7 == 3 {
            let many: Vec<Record> = (0..3)
                .map(|j| Record::new("t").value(format!("batched {i}.{j}")))
                .collect();
            let borrowed: Vec<BorrowedRecord<'_>> = many.iter().map(Record::as_borrowed).collect();
            p.send_batch(&borrowed).unwrap();
        }
    }
    let sent = read_partition(&mq, "t", 0).unwrap();
    mq.close().unwrap();
    (segment_logs(dir, "t", 0).pop().unwrap(), sent)
}

#[test]
fn a_torn_zeroed_or_corrupted_compact_batch_is_recovered() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (log_path, sent) = mixed_log(dir, 40);
    let good = std::fs::read(&log_path).unwrap();
    let spans = batches(&good);
    let last = *spans.last().unwrap();
    assert_eq!(good[last.pos + 16], MAGIC_COMPACT);
    let point = log_path.with_file_name("recovery.point");
    let point_bytes = std::fs::read(&point).unwrap();
    let crashed = |log: &[u8]| {
        std::fs::write(&log_path, log).unwrap();
        std::fs::write(&point, &point_bytes).unwrap();
        // No recovery point: the last run crashed, every batch is checked.
        std::fs::remove_file(&point).unwrap();
    };
    let end = last.base;

    // Torn: the second half of the last batch never reached the disk.
    let mut log = good.clone();
    log[last.pos + last.len / 2..last.end()].fill(0);
    crashed(&log);
    let mq = open(dir);
    let info = &mq.topic("t").unwrap().partitions[0];
    assert_eq!(info.end_offset, end);
    assert_eq!(info.recovery.torn_tails, 1);
    assert_eq!(info.recovery.dropped_batches, 1);
    assert_eq!(read_partition(&mq, "t", 0).unwrap(), sent[..end as usize]);
    let p = mq.producer(ProducerConfig::default()).unwrap();
    assert_eq!(p.send(Record::new("t").value("after")).unwrap().offset, end);
    mq.close().unwrap();
    drop(mq);

    // Zeroed: the whole last batch is zeros, the end of the data.
    let mut log = good.clone();
    log[last.pos..last.end()].fill(0);
    crashed(&log);
    let mq = open(dir);
    let info = &mq.topic("t").unwrap().partitions[0];
    assert_eq!(info.end_offset, end);
    assert_eq!(info.recovery, RecoveryStats::default());
    mq.close().unwrap();
    drop(mq);

    // Corrupted: a compact batch in the middle, valid batches after it.
    let victim = spans[spans.len() / 2];
    assert_eq!(good[victim.pos + 16], MAGIC_COMPACT);
    let mut log = good.clone();
    log[victim.end() - 2] ^= 0x40;
    crashed(&log);
    let mq = open(dir);
    let info = &mq.topic("t").unwrap().partitions[0];
    assert_eq!(info.end_offset, victim.base);
    assert_eq!(info.recovery.corruptions, 1);
    assert_eq!(info.recovery.torn_tails, 0);
    assert!(info.recovery.dropped_batches > 1);
    assert_eq!(
        read_partition(&mq, "t", 0).unwrap(),
        sent[..victim.base as usize]
    );
    mq.close().unwrap();
}

#[test]
fn the_checker_and_follower_find_damage_in_a_compact_batch_and_resume_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (log_path, sent) = mixed_log(dir, 30);
    let mut log = std::fs::read(&log_path).unwrap();
    let spans = batches(&log);
    let victim = spans[5];
    assert_eq!(log[victim.pos + 16], MAGIC_COMPACT);
    log[victim.pos + 20] ^= 1;
    std::fs::write(&log_path, &log).unwrap();
    let report = check_partition(
        &partition_dir(dir, "t", 0),
        CheckOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(report.issues.len(), 1, "{:?}", report.issues);
    assert_eq!(report.issues[0].position, victim.pos as u64);
    assert_eq!(report.records(), sent.len() as u64 - 1);
    let mut f = Follower::open(partition_dir(dir, "t", 0)).unwrap();
    assert_eq!(f.poll(100).unwrap().len() as u64, victim.base);
    // In the active segment it could be a write in flight until it settles.
    assert!(f.poll(100).unwrap().is_empty());
    std::thread::sleep(SETTLE + std::time::Duration::from_millis(50));
    match f.poll(100) {
        Err(Error::Corrupt { position, .. }) => assert_eq!(position, victim.pos as u64),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_named_producer_resumes_from_compact_batches_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mq = open(dir);
    mq.create_topic("t", TopicConfig::new(2)).unwrap();
    let p = mq.producer(ProducerConfig::default().name("app")).unwrap();
    for s in 0..6 {
        p.send(
            Record::new("t")
                .partition((s % 2) as u32)
                .value(format!("r{s}"))
                .sequence(s),
        )
        .unwrap();
    }
    p.close().unwrap();
    mq.close().unwrap();
    drop(mq);
    for h in headers(dir, "t", 0) {
        assert_eq!(h.magic, MAGIC_COMPACT);
        assert_ne!(h.attributes & ATTR_NAMED_PRODUCER, 0);
        assert_ne!(h.attributes & ATTR_APP_SEQUENCE, 0);
    }
    // Without the snapshots, the state comes from the batch headers alone.
    for part in 0..2 {
        let snap = partition_dir(dir, "t", part).join("producers.snapshot");
        std::fs::remove_file(&snap).unwrap();
    }
    let mq = open(dir);
    let p = mq.producer(ProducerConfig::default().name("app")).unwrap();
    assert_eq!(p.last_sequence().unwrap(), Some(5));
    assert_eq!(p.next_sequence().unwrap(), 6);
    // A re-send of a written sequence is a duplicate with its offset.
    let dup = p
        .send(Record::new("t").partition(0).value("r4").sequence(4))
        .unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.offset, 2);
    let new = p
        .send(Record::new("t").partition(0).value("r6").sequence(6))
        .unwrap();
    assert!(!new.duplicate);
    assert_eq!(new.offset, 3);
    assert_eq!(read_partition(&mq, "t", 0).unwrap().len(), 4);
    mq.close().unwrap();
}

/// The magic-1 batch `bytes` rewritten with `magic`, its CRC recomputed.
fn with_magic(bytes: &[u8], magic: u8) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[16] = magic;
    let crc = crc32c::crc32c(&b[16..]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn a_batch_from_a_newer_format_is_refused_not_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (log_path, _) = mixed_log(dir, 10);
    let good = std::fs::read(&log_path).unwrap();
    let spans = batches(&good);
    let last = *spans.last().unwrap();
    let newer = with_magic(&good[last.pos..last.end()], batch::MAX_MAGIC + 1);
    assert_eq!(check(&newer), Check::Invalid(UNSUPPORTED_VERSION));
    assert_eq!(
        check(&with_magic(&newer, 0)),
        Check::Invalid("unknown format version")
    );
    let mut log = good.clone();
    log[last.pos..last.end()].copy_from_slice(&newer);
    std::fs::write(&log_path, &log).unwrap();
    // At the tail of the active segment (what recovery reads), after a
    // crash: refused, and nothing is cut.
    std::fs::remove_file(log_path.with_file_name("recovery.point")).unwrap();
    match Broker::open(dir, exclusive()).and_then(|mq| mq.topic("t").map(|_| ())) {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::UnsupportedVersion, "{e}");
            assert!(matches!(
                e,
                Error::UnsupportedVersion {
                    found: 4,
                    supported: 3,
                    ..
                }
            ));
        }
        Ok(()) => panic!("a newer batch was accepted"),
    }
    assert_eq!(std::fs::read(&log_path).unwrap(), log);
    // The follower refuses it too.
    let mut f = Follower::open(partition_dir(dir, "t", 0)).unwrap();
    let mut err = None;
    for _ in 0..100 {
        match f.poll(100) {
            Ok(_) => {}
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::UnsupportedVersion));
}

/// Copies a directory tree.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// What `core/tests/fixtures/format1` holds (written by the format-1
/// engine: see its README).
fn fixture_expectations(mq: &Broker) {
    let events0 = read_partition(mq, "events", 0).unwrap();
    let events1 = read_partition(mq, "events", 1).unwrap();
    let logs = read_partition(mq, "logs", 0).unwrap();
    assert!(events0.len() >= 6);
    assert_eq!(events1.len(), 3);
    for (k, m) in events0.iter().take(3).chain(events1.iter()).enumerate() {
        let i = if k < 3 { 2 * k } else { 2 * (k - 3) + 1 };
        assert_eq!(m.key.as_deref(), Some(format!("k{i}").as_bytes()));
        assert_eq!(m.value.as_deref(), Some(format!("event-{i}").as_bytes()));
        assert_eq!(m.headers, vec![Header::new("n", format!("{i}"))]);
        assert_eq!(m.timestamp, 1_700_000_000_000 + i as i64);
    }
    for (s, m) in events0[3..6].iter().enumerate() {
        assert_eq!(m.key.as_deref(), Some(format!("o{s}").as_bytes()));
        assert_eq!(m.value.as_deref(), Some(format!("order-{s}").as_bytes()));
        assert_eq!(m.timestamp, 1_700_000_003_000 + s as i64);
    }
    assert!(logs.len() >= 10);
    for (i, m) in logs[..4].iter().enumerate() {
        assert_eq!(m.key, None);
        assert_eq!(m.value.as_deref(), Some(format!("line-{i}").as_bytes()));
    }
    assert_eq!(logs[4].key.as_deref(), Some(&b"gone"[..]));
    assert_eq!(logs[4].value, None);
    for (i, m) in logs[5..10].iter().enumerate() {
        let v = format!("zipped-{i}-aaaaaaaaaaaaaaaaaaaaaaaa");
        assert_eq!(m.value.as_deref(), Some(v.as_bytes()));
    }
    let c = mq
        .consumer(mqlite::ConsumerConfig::group("readers").enable_auto_commit(false))
        .unwrap();
    let committed = c.committed("events", 0).unwrap().unwrap();
    assert_eq!(
        (committed.offset, committed.metadata.as_str()),
        (2, "fixture")
    );
}

#[test]
fn a_format_1_directory_opens_reads_and_takes_format_2_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format1"),
        &dir,
    );
    // Every batch of the fixture is in the full layout.
    for (t, p) in [("events", 0), ("events", 1), ("logs", 0)] {
        assert!(headers(&dir, t, p).iter().all(|h| h.magic == MAGIC));
    }
    let mq = open(&dir);
    for (t, p) in [("events", 0), ("events", 1), ("logs", 0)] {
        assert_eq!(
            mq.topic(t).unwrap().partitions[p as usize].recovery,
            RecoveryStats::default()
        );
    }
    fixture_expectations(&mq);
    // The named producer's state written in format 1 carries over.
    let named = mq
        .producer(ProducerConfig::default().name("orders-app"))
        .unwrap();
    assert_eq!(named.last_sequence().unwrap(), Some(2));
    let dup = named
        .send(
            Record::new("events")
                .partition(0)
                .value("order-2")
                .sequence(2),
        )
        .unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.offset, 5);
    named
        .send(
            Record::new("events")
                .partition(0)
                .key("o3")
                .value("order-3")
                .sequence(3),
        )
        .unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..3 {
        p.send(
            Record::new("logs")
                .key(format!("new{i}"))
                .value(format!("v2-{i}")),
        )
        .unwrap();
    }
    mq.close().unwrap();
    drop(mq);
    let mq = open(&dir);
    fixture_expectations(&mq);
    let events0 = read_partition(&mq, "events", 0).unwrap();
    assert_eq!(events0.len(), 7);
    assert_eq!(events0[6].value.as_deref(), Some(&b"order-3"[..]));
    let logs = read_partition(&mq, "logs", 0).unwrap();
    assert_eq!(logs.len(), 13);
    for (i, m) in logs[10..].iter().enumerate() {
        assert_eq!(m.offset, 10 + i as u64);
        assert_eq!(m.value.as_deref(), Some(format!("v2-{i}").as_bytes()));
    }
    let magics: Vec<u8> = headers(&dir, "logs", 0).iter().map(|h| h.magic).collect();
    assert_eq!(magics, [1, 1, 1, 1, 1, 1, 2, 2, 2]);
    mq.close().unwrap();
}

/// A full-layout batch at `base` with records at `deltas`, ending at
/// `base + last`.
fn gapped(base: u64, deltas: &[u32], last: u32, ts: i64) -> Vec<u8> {
    let values: Vec<String> = deltas
        .iter()
        .map(|d| format!("gap {}", base + u64::from(*d)))
        .collect();
    let recs: Vec<RecordRef<'_>> = values
        .iter()
        .map(|v| RecordRef {
            key: None,
            value: Some(v.as_bytes()),
            headers: &[],
            timestamp: ts,
        })
        .collect();
    let mut buf = vec![0u8; batch::batch_len(&recs) + 5 * recs.len()];
    let n = batch::encode_batch_with_gaps(
        &mut buf,
        base,
        &recs,
        deltas,
        last,
        ProducerFields::default(),
        0,
    );
    buf.truncate(n);
    buf
}

#[test]
fn offsets_may_skip_inside_a_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mq = open(dir);
    mq.create_topic("t", TopicConfig::new(1).index_interval_bytes(64))
        .unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..5 {
        p.send(Record::new("t").value(format!("a{i}")).timestamp(1_000 + i))
            .unwrap();
    }
    mq.close().unwrap();
    drop(mq);
    // Batches whose last offsets pass their records: 5 and 8 of 5..=11,
    // 12..=14 without a gap, then 17 alone of 15..=19.
    let log_path = segment_logs(dir, "t", 0).pop().unwrap();
    let mut log = std::fs::read(&log_path).unwrap();
    let end = batches(&log).last().unwrap().end();
    log.truncate(end);
    log.extend(gapped(5, &[0, 3], 6, 2_000));
    log.extend(gapped(12, &[0, 1, 2], 2, 3_000));
    log.extend(gapped(15, &[2], 4, 4_000));
    std::fs::write(&log_path, &log).unwrap();
    // Read back as after a crash: every batch is checked, the indexes rebuilt.
    std::fs::remove_file(log_path.with_file_name("recovery.point")).unwrap();

    let mq = open(dir);
    let info = &mq.topic("t").unwrap().partitions[0];
    assert_eq!(info.recovery, RecoveryStats::default());
    assert_eq!(info.end_offset, 20);
    let want: Vec<u64> = vec![0, 1, 2, 3, 4, 5, 8, 12, 13, 14, 17];
    let got = read_partition(&mq, "t", 0).unwrap();
    assert_eq!(got.iter().map(|m| m.offset).collect::<Vec<_>>(), want);
    assert_eq!(got[6].value.as_deref(), Some(&b"gap 8"[..]));
    // Appends go on after the last batch's last offset.
    let p = mq.producer(ProducerConfig::default()).unwrap();
    assert_eq!(p.send(Record::new("t").value("after")).unwrap().offset, 20);

    let mut c = mq
        .consumer(mqlite::ConsumerConfig::default().max_poll_records(1000))
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    for (seek, first) in [(6u64, 8u64), (9, 12), (15, 17), (18, 20), (0, 0), (13, 13)] {
        c.seek("t", 0, seek).unwrap();
        let m = c.poll(std::time::Duration::ZERO).unwrap();
        assert_eq!(m[0].offset(), first, "seek {seek}");
        assert_eq!(m.last().unwrap().offset(), 20, "seek {seek}");
        assert_eq!(c.position("t", 0).unwrap(), 21);
        assert_eq!(c.lag().unwrap(), vec![("t".to_owned(), 0, 0)]);
    }
    // A poll that stops right after a gapped batch: the position steps
    // over the gap.
    let mut one = mq
        .consumer(mqlite::ConsumerConfig::default().max_poll_records(2))
        .unwrap();
    one.assign(&[("t", 0)]).unwrap();
    one.seek("t", 0, 5).unwrap();
    let m = one.poll(std::time::Duration::ZERO).unwrap();
    assert_eq!(
        m.iter().map(mqlite::Message::offset).collect::<Vec<_>>(),
        [5, 8]
    );
    assert_eq!(one.poll(std::time::Duration::ZERO).unwrap()[0].offset(), 12);
    // The time index and the lookup by time.
    assert_eq!(mq.offset_for_timestamp("t", 0, 2_500).unwrap(), Some(12));
    assert_eq!(mq.offset_for_timestamp("t", 0, 3_500).unwrap(), Some(17));
    mq.close().unwrap();
    drop(mq);
    // The follower and the checker step over the gaps too.
    let mut f = Follower::open(partition_dir(dir, "t", 0)).unwrap();
    let followed: Vec<u64> = f.poll(100).unwrap().iter().map(|r| r.offset).collect();
    assert_eq!(followed[..want.len()], want[..]);
    assert_eq!(f.position(), 21);
    f.seek(9).unwrap();
    assert_eq!(f.poll(1).unwrap()[0].offset, 12);
    let report = check_partition(
        &partition_dir(dir, "t", 0),
        CheckOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert!(report.issues.is_empty(), "{:?}", report.issues);
    assert_eq!(report.end_offset, 21);
}

#[test]
fn producer_stats_count_the_bytes_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mq = open(dir);
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..20 {
        p.send(Record::new("t").value(format!("v{i}"))).unwrap();
    }
    let many: Vec<Record> = (0..3)
        .map(|i| Record::new("t").value(format!("m{i}")))
        .collect();
    let borrowed: Vec<BorrowedRecord<'_>> = many.iter().map(Record::as_borrowed).collect();
    p.send_batch(&borrowed).unwrap();
    let one = [Record::new("t").value("alone")];
    let borrowed: Vec<BorrowedRecord<'_>> = one.iter().map(Record::as_borrowed).collect();
    p.send_batch(&borrowed).unwrap();
    let lingering = mq.producer(ProducerConfig::default().linger_ms(0)).unwrap();
    lingering
        .send_async(Record::new("t").value("async"), |_| {})
        .unwrap();
    lingering.flush().unwrap();
    let written = p.stats().bytes + lingering.stats().bytes;
    assert_eq!(
        written,
        mq.topic("t").unwrap().partitions[0].size_bytes,
        "bytes counted by the producers against the log's size"
    );
    mq.close().unwrap();
}

#[test]
fn a_format_2_directory_opens_reads_and_takes_transactions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format2"),
        &dir,
    );
    let magics =
        |t: &str, p: u32| -> Vec<u8> { headers(&dir, t, p).iter().map(|h| h.magic).collect() };
    assert_eq!(magics("events", 0), [2; 6]);
    assert_eq!(magics("logs", 0), [1, 2, 1]);
    assert!(!dir.join("transactions.log").exists());
    let mq = open(&dir);
    fixture_expectations(&mq);
    let named = mq
        .producer(ProducerConfig::default().name("orders-app"))
        .unwrap();
    assert_eq!(named.last_sequence().unwrap(), Some(2));
    let p = mq
        .producer(ProducerConfig::default().transactional_id("upgrade"))
        .unwrap();
    let tx = p.begin_transaction().unwrap();
    tx.send(Record::new("logs").value("in-a-transaction"))
        .unwrap();
    tx.send(Record::new("events").partition(1).value("also"))
        .unwrap();
    let md = tx.commit().unwrap();
    assert_eq!((md[0].offset, md[1].offset), (10, 3));
    mq.close().unwrap();
    drop(mq);
    // The markers are control batches (`magic` 3) after the records.
    assert_eq!(magics("logs", 0), [1, 2, 1, 2, batch::MAGIC_CONTROL]);
    assert_eq!(magics("events", 1), [2, 2, 2, 2, batch::MAGIC_CONTROL]);
    let mq = open(&dir);
    let events1 = read_partition(&mq, "events", 1).unwrap();
    assert_eq!(events1.len(), 4);
    assert_eq!(events1[3].value.as_deref(), Some(&b"also"[..]));
    let logs = read_partition(&mq, "logs", 0).unwrap();
    assert_eq!(logs.len(), 11);
    assert_eq!(logs[10].value.as_deref(), Some(&b"in-a-transaction"[..]));
    assert_eq!(mq.topic("logs").unwrap().partitions[0].end_offset, 12);
    // Appends go on after the marker.
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    assert_eq!(
        plain
            .send(Record::new("logs").value("after"))
            .unwrap()
            .offset,
        12
    );
    mq.close().unwrap();
}
