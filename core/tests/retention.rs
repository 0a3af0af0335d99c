//! Retention by size and by time: whole closed segments go, oldest first,
//! never the active one; readers are reset or told, and messages held across
//! a deletion stay valid until dropped.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{cfg, files_ending, read_partition, segment_logs, Msg};
use mqlite::{
    Broker, Config, ConsumerConfig, Error, OffsetReset, OpenMode, ProducerConfig, Record,
    TopicConfig,
};

/// Exclusive mode, by name: for the tests that count its segment files and
/// their sizes (shared mode pads sealed segments to a page, and removes
/// retention's leftovers otherwise).
fn exclusive() -> Config {
    cfg().mode(OpenMode::Exclusive)
}

const SEGMENT: u64 = 4096;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Record `i` of a test topic, at timestamp `ts`.
fn record(topic: &str, i: u64, ts: i64) -> Record {
    Record::new(topic)
        .partition(0)
        .key(format!("k{i}"))
        .value(format!("value {i} {}", "x".repeat((i % 50) as usize)))
        .header("i", i.to_le_bytes().to_vec())
        .timestamp(ts)
}

fn expected(topic: &str, i: u64, ts: i64) -> Msg {
    let r = record(topic, i, ts);
    Msg {
        partition: 0,
        offset: i,
        timestamp: ts,
        key: r.key,
        value: r.value,
        headers: r.headers,
    }
}

/// Sends records `from..to` to partition 0 of `topic`, all at timestamp `ts`.
fn send(mq: &Broker, topic: &str, from: u64, to: u64, ts: i64) {
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in from..to {
        assert_eq!(p.send(record(topic, i, ts)).unwrap().offset, i);
    }
}

fn base_of(path: &Path) -> u64 {
    path.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// The partition's segments on disk agree with what the broker reports.
fn check_disk(mq: &Broker, dir: &Path, topic: &str) -> Vec<u64> {
    let info = &mq.topic(topic).unwrap().partitions[0];
    let bases: Vec<u64> = segment_logs(dir, topic, 0)
        .iter()
        .map(|p| base_of(p))
        .collect();
    assert_eq!(bases.len(), info.segments, "segment files on disk");
    assert_eq!(
        bases[0], info.start_offset,
        "start offset is the first segment's base"
    );
    bases
}

#[test]
fn retention_by_size_deletes_oldest_closed_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), exclusive()).unwrap();
    let limit = 3 * SEGMENT + 100;
    mq.create_topic(
        "t",
        TopicConfig::new(1)
            .segment_bytes(SEGMENT)
            .retention_bytes(limit),
    )
    .unwrap();
    let ts = now_ms();
    let mut sent = 0;
    let mut starts = Vec::new();
    for round in 0..8 {
        send(&mq, "t", sent, sent + 60 + round * 7, ts);
        sent += 60 + round * 7;
        mq.enforce_retention().unwrap();
        let info = mq.topic("t").unwrap().partitions[0].clone();
        let bases = check_disk(&mq, tmp.path(), "t");
        assert_eq!(info.end_offset, sent, "retention never touches the end");
        // The oldest segment stays only if deleting it would go below the
        // limit, or if it is the active one.
        let first_size = if bases.len() > 1 {
            std::fs::metadata(&segment_logs(tmp.path(), "t", 0)[0])
                .unwrap()
                .len()
        } else {
            info.size_bytes
        };
        assert!(
            bases.len() == 1 || info.size_bytes - first_size < limit,
            "round {round}: {} bytes in {} segments, the oldest ({first_size} bytes) should have gone",
            info.size_bytes,
            bases.len()
        );
        // Only ever deleting while the rest still holds the limit.
        if info.start_offset > 0 {
            assert!(info.size_bytes >= limit, "round {round}: deleted too much");
        }
        // Whatever is retained reads back in full and in order.
        let got = read_partition(&mq, "t", 0).unwrap();
        let want: Vec<Msg> = (info.start_offset..sent)
            .map(|i| expected("t", i, ts))
            .collect();
        assert!(got == want, "round {round}: retained records differ");
        starts.push(info.start_offset);
    }
    assert!(
        starts.windows(2).all(|w| w[0] <= w[1]),
        "start only moves forward: {starts:?}"
    );
    assert!(*starts.last().unwrap() > 0, "something was deleted");
    assert!(files_ending(tmp.path(), "t", 0, ".deleted").is_empty());

    // The start offset survives a reopen.
    let start = mq.topic("t").unwrap().partitions[0].start_offset;
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(tmp.path(), exclusive()).unwrap();
    let info = &mq.topic("t").unwrap().partitions[0];
    assert_eq!((info.start_offset, info.end_offset), (start, sent));
}

#[test]
fn the_active_segment_is_never_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let old = now_ms() - 3_600_000;
    let config = TopicConfig::new(1)
        .segment_bytes(SEGMENT)
        .retention_bytes(1)
        .retention_ms(1);
    mq.create_topic("t", config).unwrap();
    send(&mq, "t", 0, 200, old);
    mq.enforce_retention().unwrap();
    let info = mq.topic("t").unwrap().partitions[0].clone();
    let bases = check_disk(&mq, tmp.path(), "t");
    assert_eq!(bases.len(), 1, "only the active segment is left");
    assert!(info.start_offset > 0 && info.start_offset < 200);
    assert_eq!(info.end_offset, 200);
    let got = read_partition(&mq, "t", 0).unwrap();
    assert_eq!(got.len() as u64, 200 - info.start_offset);
    assert_eq!(mq.enforce_retention().unwrap(), 0, "nothing more to delete");
    assert_eq!(
        mq.topic("t").unwrap().partitions[0].start_offset,
        info.start_offset
    );
    send(&mq, "t", 200, 201, old);
}

#[test]
fn retention_by_time_deletes_segments_whose_records_are_all_old() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic(
        "t",
        TopicConfig::new(1)
            .segment_bytes(SEGMENT)
            .retention_ms(60_000),
    )
    .unwrap();
    let old = now_ms() - 3_600_000;
    send(&mq, "t", 0, 150, old);
    // Rolls enforce retention: every closed all-old segment is already gone.
    let info = mq.topic("t").unwrap().partitions[0].clone();
    assert_eq!(info.segments, 1, "closed old segments go on roll");
    let first_new = info.end_offset;
    let now = now_ms();
    send(&mq, "t", first_new, first_new + 150, now);
    mq.enforce_retention().unwrap();
    let info = mq.topic("t").unwrap().partitions[0].clone();
    let bases = check_disk(&mq, tmp.path(), "t");
    // The first segment left is the one holding the first new record (it
    // may hold old records too: a segment goes only when all are old).
    assert!(info.start_offset <= first_new, "{bases:?}");
    assert!(
        bases.get(1).is_none_or(|&b| b > first_new),
        "{bases:?} {first_new}"
    );
    let got = read_partition(&mq, "t", 0).unwrap();
    assert_eq!(got.first().unwrap().offset, info.start_offset);
    for m in &got {
        let ts = if m.offset < first_new { old } else { now };
        assert_eq!(*m, expected("t", m.offset, ts));
    }
    // Record timestamps decide, not file times: recent records stay.
    assert_eq!(mq.enforce_retention().unwrap(), 0);
    assert_eq!(
        mq.topic("t").unwrap().partitions[0].end_offset,
        first_new + 150
    );
}

#[test]
fn the_background_thread_applies_retention() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg().retention_check_interval_ms(10)).unwrap();
    mq.create_topic(
        "t",
        TopicConfig::new(1).segment_bytes(SEGMENT).retention_ms(300),
    )
    .unwrap();
    // Young enough to survive the rolls, old within a second.
    send(&mq, "t", 0, 150, now_ms());
    let segments = mq.topic("t").unwrap().partitions[0].segments;
    assert!(segments > 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    // The segment leaves the list first, then its files are renamed away
    // (outside the list's lock): wait for both.
    while mq.topic("t").unwrap().partitions[0].segments > 1
        || segment_logs(tmp.path(), "t", 0).len() > 1
    {
        assert!(
            Instant::now() < deadline,
            "the background thread deleted nothing"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let info = mq.topic("t").unwrap().partitions[0].clone();
    assert_eq!(info.end_offset, 150);
    check_disk(&mq, tmp.path(), "t");
}

/// A consumer positioned before the new start: reset per `auto_offset_reset`.
#[test]
fn consumers_before_the_start_are_reset() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic(
        "t",
        TopicConfig::new(1)
            .segment_bytes(SEGMENT)
            .retention_bytes(SEGMENT),
    )
    .unwrap();
    let ts = now_ms();
    send(&mq, "t", 0, 20, ts);
    let consumer = |reset| {
        let mut c = mq
            .consumer(
                ConsumerConfig::default()
                    .auto_offset_reset(reset)
                    .max_poll_records(5),
            )
            .unwrap();
        c.assign(&[("t", 0)]).unwrap();
        // Without a position, `Error` fails at once (Kafka's "none"): seek.
        c.seek("t", 0, 0).unwrap();
        let got = c.poll(Duration::ZERO).unwrap();
        assert_eq!(
            got.iter().map(mqlite::Message::offset).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        c
    };
    let mut earliest = consumer(OffsetReset::Earliest);
    let mut failing = consumer(OffsetReset::Error);
    let mut latest = consumer(OffsetReset::Latest);
    // Enough to roll several times: the first segments go.
    send(&mq, "t", 20, 300, ts);
    mq.enforce_retention().unwrap();
    let start = mq.topic("t").unwrap().partitions[0].start_offset;
    assert!(start > 5, "retention should have passed the consumers");

    let got = earliest.poll(Duration::ZERO).unwrap();
    assert_eq!(
        Msg::from(&got[0]),
        expected("t", start, ts),
        "Earliest resets to the new start"
    );
    assert_eq!(earliest.position("t", 0).unwrap(), start + got.len() as u64);

    for _ in 0..2 {
        match failing.poll(Duration::ZERO) {
            Err(Error::OffsetOutOfRange {
                offset,
                start: s,
                end,
                partition: 0,
                ..
            }) => assert_eq!((offset, s, end), (5, start, 300)),
            other => panic!("expected OffsetOutOfRange, got {other:?}"),
        }
    }
    failing.seek("t", 0, start).unwrap();
    let got = failing.poll(Duration::ZERO).unwrap();
    assert_eq!(
        Msg::from(&got[0]),
        expected("t", start, ts),
        "after a seek to the start"
    );

    assert!(
        latest.poll(Duration::ZERO).unwrap().is_empty(),
        "Latest resets to the end"
    );
    send(&mq, "t", 300, 301, ts);
    let got = latest.poll(Duration::ZERO).unwrap();
    assert_eq!(
        got.iter().map(mqlite::Message::offset).collect::<Vec<_>>(),
        [300]
    );
}

/// A message read from a segment that retention then deletes stays valid
/// (a zero-copy view into the map); the files go when the last holder drops.
#[test]
fn held_messages_keep_deleted_segments_until_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic(
        "t",
        TopicConfig::new(1)
            .segment_bytes(SEGMENT)
            .retention_bytes(SEGMENT),
    )
    .unwrap();
    let ts = now_ms();
    send(&mq, "t", 0, 10, ts);
    let held = {
        let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
        c.assign(&[("t", 0)]).unwrap();
        let mut got = c.poll(Duration::ZERO).unwrap();
        got.swap_remove(3)
    };
    assert_eq!(Msg::from(&held), expected("t", 3, ts));
    send(&mq, "t", 10, 300, ts);
    mq.enforce_retention().unwrap();
    assert!(mq.topic("t").unwrap().partitions[0].start_offset > 3);
    let base0 = segment_logs(tmp.path(), "t", 0)[0].clone();
    assert_ne!(base_of(&base0), 0, "segment 0 is no longer listed");
    let deleted = files_ending(tmp.path(), "t", 0, ".deleted");
    assert_eq!(
        deleted.len(),
        3,
        "log and indexes of segment 0 wait for the holder: {deleted:?}"
    );
    assert!(deleted.iter().all(|p| p
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("00000000000000000000.")));
    // Other deleted segments had no holder and are gone already.
    assert_eq!(
        Msg::from(&held),
        expected("t", 3, ts),
        "the held message is still readable"
    );
    let clone = held.clone();
    drop(held);
    assert_eq!(
        files_ending(tmp.path(), "t", 0, ".deleted").len(),
        3,
        "a clone still holds it"
    );
    assert_eq!(clone.value(), expected("t", 3, ts).value.as_deref());
    drop(clone);
    assert!(
        files_ending(tmp.path(), "t", 0, ".deleted").is_empty(),
        "files removed on last drop"
    );
}

/// A message held across close and reopen (which removes `.deleted`
/// leftovers) stays readable.
#[test]
fn held_messages_survive_close_and_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), exclusive()).unwrap();
    mq.create_topic(
        "t",
        TopicConfig::new(1)
            .segment_bytes(SEGMENT)
            .retention_bytes(SEGMENT),
    )
    .unwrap();
    let ts = now_ms();
    send(&mq, "t", 0, 10, ts);
    let held = {
        let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
        c.assign(&[("t", 0)]).unwrap();
        c.poll(Duration::ZERO).unwrap().swap_remove(0)
    };
    send(&mq, "t", 10, 300, ts);
    mq.enforce_retention().unwrap();
    assert_eq!(files_ending(tmp.path(), "t", 0, ".deleted").len(), 3);
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(tmp.path(), exclusive()).unwrap();
    assert!(
        files_ending(tmp.path(), "t", 0, ".deleted").is_empty(),
        "reopen removes leftovers"
    );
    assert!(mq.topic("t").unwrap().partitions[0].start_offset > 0);
    assert_eq!(Msg::from(&held), expected("t", 0, ts));
    drop(held);
    assert_eq!(
        read_partition(&mq, "t", 0).unwrap().last().unwrap().offset,
        299
    );
}
