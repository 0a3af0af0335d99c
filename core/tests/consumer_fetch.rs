//! One consumer reading many partitions whose batches are larger than its
//! share of a poll: every message once, in order, with turns taken fairly,
//! and the batch a poll stopped in given up by whatever moves the position
//! (seek, pause, `poll_one`, retention, a rebalance).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use mqlite::log::batch::RecordRef;
use mqlite::raw::partition_log;
use mqlite::{Broker, Config, ConsumerConfig, Message, TopicConfig};

fn broker(dir: &std::path::Path) -> Broker {
    Broker::open(dir, Config::default().retention_check_interval_ms(0)).unwrap()
}

/// Appends `batches` batches of `per` records to `topic`/`p`; the value of
/// a record is `p/offset`.
fn append(b: &Broker, topic: &str, p: u32, batches: usize, per: usize) {
    let log = partition_log(b, topic, p).unwrap();
    for _ in 0..batches {
        let from = log.end_offset();
        let values: Vec<String> = (0..per)
            .map(|i| format!("{p}/{}", from + i as u64))
            .collect();
        let recs: Vec<RecordRef<'_>> = values
            .iter()
            .map(|v| RecordRef {
                key: None,
                value: Some(v.as_bytes()),
                headers: &[],
                timestamp: 1_700_000_000_000,
            })
            .collect();
        log.append(&recs).unwrap();
    }
}

fn check(m: &Message) {
    let want = format!("{}/{}", m.partition(), m.offset());
    assert_eq!(m.value().unwrap(), want.as_bytes());
}

fn assign_all(c: &mut mqlite::Consumer, topic: &str, n: u32) {
    let parts: Vec<(&str, u32)> = (0..n).map(|p| (topic, p)).collect();
    c.assign(&parts).unwrap();
}

#[test]
fn every_partition_gets_its_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let b = broker(tmp.path());
    b.create_topic("t", TopicConfig::new(8)).unwrap();
    for p in 0..8 {
        append(&b, "t", p, 4, 1000);
    }
    let mut c = b
        .consumer(ConsumerConfig::default().max_poll_records(100))
        .unwrap();
    assign_all(&mut c, "t", 8);
    let mut next = [0u64; 8];
    let mut polls = 0;
    loop {
        let got = c.poll(Duration::ZERO).unwrap();
        if got.is_empty() {
            break;
        }
        polls += 1;
        assert!(got.len() <= 100);
        for m in &got {
            let p = m.partition() as usize;
            assert_eq!(m.offset(), next[p], "partition {p}");
            next[p] += 1;
            check(m);
        }
        // Turns go round, and a partition cut short by a full poll goes
        // first next time: none gets ahead by more than two shares.
        let (lo, hi) = (next.iter().min().unwrap(), next.iter().max().unwrap());
        assert!(hi - lo <= 128, "poll {polls}: {next:?}");
    }
    assert_eq!(next, [4000u64; 8]);
    assert_eq!(polls, 320);
}

#[test]
fn a_poll_over_many_partitions_reaches_them_all() {
    let tmp = tempfile::tempdir().unwrap();
    let b = broker(tmp.path());
    b.create_topic("t", TopicConfig::new(32)).unwrap();
    for p in 0..32 {
        append(&b, "t", p, 1, 1000);
    }
    let mut c = b.consumer(ConsumerConfig::default()).unwrap();
    assign_all(&mut c, "t", 32);
    let mut seen = [0u64; 32];
    // The default `max_poll_records` (500): every partition within a few
    // polls, every poll full.
    for _ in 0..5 {
        let got = c.poll(Duration::ZERO).unwrap();
        assert_eq!(got.len(), 500);
        for m in &got {
            assert_eq!(m.offset(), seen[m.partition() as usize]);
            seen[m.partition() as usize] += 1;
        }
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}

#[test]
fn pause_poll_one_and_commit_in_the_middle_of_a_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let b = broker(tmp.path());
    b.create_topic("t", TopicConfig::new(2)).unwrap();
    for p in 0..2 {
        append(&b, "t", p, 1, 1000);
    }
    let mut c = b
        .consumer(
            ConsumerConfig::group("g")
                .enable_auto_commit(false)
                .max_poll_records(100),
        )
        .unwrap();
    assign_all(&mut c, "t", 2);
    let got = c.poll(Duration::ZERO).unwrap();
    assert_eq!(got.len(), 100);
    let at0 = c.position("t", 0).unwrap();
    let at1 = c.position("t", 1).unwrap();
    assert!(at0 > 0 && at0 < 1000 && at1 < 1000, "{at0} {at1}");

    // Paused in the middle of its batch: nothing from it, then it goes on.
    c.pause(&[("t", 0)]).unwrap();
    for m in c.poll(Duration::ZERO).unwrap() {
        assert_eq!(m.partition(), 1);
        check(&m);
    }
    c.resume(&[("t", 0)]).unwrap();
    let mut next0 = at0;
    let mut next1 = c.position("t", 1).unwrap();

    // `poll_one` hands out one message at a time from the kept batch; a
    // commit takes only what was handed out.
    for _ in 0..150 {
        let m = c.poll_one(Duration::ZERO).unwrap().unwrap();
        check(&m);
        let next = if m.partition() == 0 {
            &mut next0
        } else {
            &mut next1
        };
        assert_eq!(m.offset(), *next);
        *next += 1;
    }
    c.commit().unwrap();
    assert_eq!(c.committed("t", 0).unwrap().unwrap().offset, next0);
    assert_eq!(c.committed("t", 1).unwrap().unwrap().offset, next1);
    // A seek back puts the held messages back and reads from there (the
    // messages of partition 1 still held come first).
    c.seek("t", 0, 10).unwrap();
    let mut got: Vec<Message> = Vec::new();
    while got.is_empty() {
        got = c
            .poll(Duration::ZERO)
            .unwrap()
            .into_iter()
            .filter(|m| m.partition() == 0)
            .collect();
    }
    assert_eq!(got[0].offset(), 10);
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.offset(), 10 + i as u64);
        check(m);
    }
    drop(c);

    // A new member of the group resumes at the committed offsets.
    let mut d = b
        .consumer(ConsumerConfig::group("g").max_poll_records(100))
        .unwrap();
    assign_all(&mut d, "t", 2);
    let mut first = [None; 2];
    for m in d.poll(Duration::ZERO).unwrap() {
        first[m.partition() as usize].get_or_insert(m.offset());
    }
    assert_eq!(first[0].unwrap_or(next0), next0);
    assert_eq!(first[1].unwrap_or(next1), next1);
}

#[test]
fn retention_deleting_the_segment_of_a_kept_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let b = broker(tmp.path());
    b.create_topic(
        "t",
        TopicConfig::new(1)
            .segment_bytes(64 << 10)
            .retention_bytes(1),
    )
    .unwrap();
    append(&b, "t", 0, 1, 1000);
    let mut c = b
        .consumer(ConsumerConfig::default().max_poll_records(100))
        .unwrap();
    assign_all(&mut c, "t", 1);
    assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 100);
    // More segments, then retention deletes all but the active one: the
    // kept batch is gone with its segment.
    append(&b, "t", 0, 6, 1000);
    b.enforce_retention().unwrap();
    let start = b.topic("t").unwrap().partitions[0].start_offset;
    assert!(start > 1000, "{start}");
    let got = c.poll(Duration::ZERO).unwrap();
    assert_eq!(got[0].offset(), start);
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.offset(), start + i as u64);
        check(m);
    }
    assert_eq!(c.stats().skipped, start - 100);
}

#[test]
fn a_tailing_reader_stopped_in_a_batch_sees_what_is_appended() {
    let tmp = tempfile::tempdir().unwrap();
    let b = broker(tmp.path());
    b.create_topic("t", TopicConfig::new(3)).unwrap();
    let mut c = b
        .consumer(ConsumerConfig::default().max_poll_records(100))
        .unwrap();
    assign_all(&mut c, "t", 3);
    let mut next = [0u64; 3];
    for round in 0..5 {
        append(&b, "t", round % 3, 1, 250);
        // Read part of it, append elsewhere and to the same partition, read on.
        let got = c.poll(Duration::from_millis(100)).unwrap();
        append(&b, "t", (round + 1) % 3, 1, 7);
        append(&b, "t", round % 3, 1, 3);
        let mut all = got;
        loop {
            let more = c.poll(Duration::ZERO).unwrap();
            if more.is_empty() {
                break;
            }
            all.extend(more);
        }
        for m in &all {
            let p = m.partition() as usize;
            assert_eq!(m.offset(), next[p]);
            next[p] += 1;
            check(m);
        }
        for (p, n) in next.iter().enumerate() {
            let end = partition_log(&b, "t", p as u32).unwrap().end_offset();
            assert_eq!(*n, end);
        }
    }
}

#[test]
fn a_poll_over_two_partitions_allocates_once() {
    let tmp = tempfile::tempdir().unwrap();
    let b = broker(tmp.path());
    b.create_topic("t", TopicConfig::new(8)).unwrap();
    for p in 0..8 {
        append(&b, "t", p, 1, 1000);
    }
    let mut c = b
        .consumer(ConsumerConfig::default().max_poll_records(100))
        .unwrap();
    assign_all(&mut c, "t", 8);
    for _ in 0..20 {
        // A share of 64 from one partition and 36 from the next: the
        // messages are stored once, in room made for the whole poll, not
        // regrown when the second partition is reached.
        let got = c.poll(Duration::ZERO).unwrap();
        assert_eq!(got.len(), 100);
        assert_eq!(got.capacity(), 100);
        let batch = c.poll_batch(Duration::ZERO).unwrap();
        assert_eq!(batch.len(), 100);
        got.iter().for_each(check);
    }
}

#[test]
fn an_empty_poll_allocates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let b = broker(tmp.path());
    b.create_topic("t", TopicConfig::new(2)).unwrap();
    let mut c = b.consumer(ConsumerConfig::default()).unwrap();
    assign_all(&mut c, "t", 2);
    let got = c.poll(Duration::ZERO).unwrap();
    assert!(got.is_empty());
    assert_eq!(got.capacity(), 0);
}
