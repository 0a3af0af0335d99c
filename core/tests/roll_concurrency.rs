//! Readers racing the writer through segment rolls and retention deletions:
//! offsets only ever go up by one, except for resets to the new start after
//! retention, and every value is exactly what was written.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{cfg, files_ending, read_partition};
use mqlite::{Acks, Broker, ConsumerConfig, Message, ProducerConfig, Record, TopicConfig};

const PARTITIONS: u32 = 2;
const PER_PARTITION: u64 = 8_000;

fn value(p: u32, offset: u64) -> Vec<u8> {
    let mut v = format!("{p}/{offset}/").into_bytes();
    v.extend(std::iter::repeat_n(
        b'a' + (offset % 26) as u8,
        (offset % 40) as usize,
    ));
    v
}

fn check(m: &Message) {
    assert_eq!(
        m.value(),
        Some(&value(m.partition(), m.offset())[..]),
        "value of {}/{}",
        m.partition(),
        m.offset()
    );
    assert_eq!(m.key(), Some(&m.offset().to_le_bytes()[..]));
}

/// Reads until every partition reached its last offset, checking order.
/// Returns how many resets (jumps over deleted records) it saw.
fn reader(mq: &Broker, max_poll: usize, hold: usize, stop: &AtomicBool) -> u64 {
    let mut c = mq
        .consumer(ConsumerConfig::default().max_poll_records(max_poll))
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    let mut last: Vec<Option<u64>> = vec![None; PARTITIONS as usize];
    let mut held: VecDeque<Message> = VecDeque::new();
    let mut resets = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while last.iter().any(|l| *l != Some(PER_PARTITION - 1)) {
        assert!(Instant::now() < deadline, "reader stuck at {last:?}");
        assert!(!stop.load(Ordering::Relaxed), "another thread failed");
        let got = c.poll(Duration::from_millis(100)).unwrap();
        for m in got {
            check(&m);
            let p = m.partition() as usize;
            let o = m.offset();
            let expected_next = last[p].map_or(0, |l| l + 1);
            if o != expected_next {
                // Only a reset past records retention deleted: forward, and
                // to at most the current start.
                let start = mq.topic("t").unwrap().partitions[p].start_offset;
                assert!(
                    o > expected_next && o <= start,
                    "partition {p}: offset {o} after {:?} (start now {start})",
                    last[p]
                );
                resets += 1;
            }
            last[p] = Some(o);
            // Hold some messages for a while: their segments may be deleted
            // meanwhile, and they must stay readable.
            if hold > 0 {
                held.push_back(m);
                if held.len() > hold {
                    check(&held.pop_front().unwrap());
                }
            }
        }
    }
    for m in &held {
        check(m);
    }
    resets
}

#[test]
fn readers_race_rolls_and_retention() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let config = TopicConfig::new(PARTITIONS)
        .segment_bytes(4096)
        .retention_bytes(3 * 4096)
        .index_interval_bytes(256);
    mq.create_topic("t", config).unwrap();
    let stop = AtomicBool::new(false);
    let resets = std::thread::scope(|s| {
        let (mq, stop) = (&mq, &stop);
        let readers: Vec<_> = [(1, 0), (7, 50), (500, 0), (10_000, 1000)]
            .into_iter()
            .map(|(max_poll, hold)| {
                s.spawn(move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        reader(mq, max_poll, hold, stop)
                    }));
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    r.unwrap()
                })
            })
            .collect();
        // Something else describing the topic and applying retention.
        let janitor = s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                mq.enforce_retention().unwrap();
                let info = mq.topic("t").unwrap();
                for p in &info.partitions {
                    assert!(p.start_offset <= p.end_offset);
                    assert!(p.segments >= 1);
                }
                std::thread::yield_now();
            }
        });
        let producer = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..PER_PARTITION {
            for p in 0..PARTITIONS {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let md = producer
                    .send(
                        Record::new("t")
                            .partition(p)
                            .key(i.to_le_bytes().to_vec())
                            .value(value(p, i)),
                    )
                    .unwrap();
                assert_eq!(md.offset, i);
            }
            if i % 64 == 0 {
                std::thread::yield_now(); // let slow readers fall behind retention now and then
            }
        }
        let resets: Vec<u64> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        janitor.join().unwrap();
        resets
    });
    println!("resets per reader: {resets:?}");
    let info = mq.topic("t").unwrap();
    for p in 0..PARTITIONS {
        let pi = &info.partitions[p as usize];
        assert_eq!(pi.end_offset, PER_PARTITION);
        assert!(
            pi.start_offset > 0,
            "retention should have deleted segments"
        );
        // Every reader and held message is gone: so are the deleted files.
        assert!(files_ending(tmp.path(), "t", p, ".deleted").is_empty());
        let got = read_partition(&mq, "t", p).unwrap();
        assert_eq!(got.len() as u64, PER_PARTITION - pi.start_offset);
        for m in &got {
            assert_eq!(m.value.as_deref(), Some(&value(p, m.offset)[..]));
        }
    }
}

/// With page faulting ahead of the writer on (a window at a time, and the
/// next segment prepared in the background), every byte written is read
/// back, while writing and after a reopen: populating pages never touches
/// what they hold.
#[test]
fn prefaulting_ahead_of_the_writer_keeps_every_byte() {
    prefault_case(Acks::One, cfg());
}

/// The same in shared mode, where windows are faulted in ahead of the
/// writer too (no next segment is prepared there).
#[test]
fn prefaulting_ahead_of_the_writer_in_shared_mode_keeps_every_byte() {
    prefault_case(Acks::One, cfg().mode(mqlite::OpenMode::Shared));
}

/// The same with `acks=all`, where the writer stops faulting pages in ahead
/// (and prepares the next segment without) while flushes run, and starts
/// again once they stop.
#[test]
fn prefaulting_paused_by_flushes_keeps_every_byte() {
    prefault_case(Acks::All, cfg());
}

fn prefault_case(acks: Acks, config: mqlite::Config) {
    let dir = tempfile::tempdir().unwrap();
    let config = config.prefault(true);
    let topic = "pf";
    let big = |i: u64| -> Vec<u8> {
        let mut v = value(0, i);
        v.resize(96 << 10, (i % 251) as u8);
        v
    };
    let n: u64 = 400; // about 38 MiB: several windows, several segments
    {
        let mq = Broker::open(dir.path(), config.clone()).unwrap();
        mq.create_topic(topic, TopicConfig::new(1).segment_bytes(12 << 20))
            .unwrap();
        let p = mq.producer(ProducerConfig::default().acks(acks)).unwrap();
        let fast = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..n {
            // Every other eighth of the run is sent with acks=1: with
            // acks=all, the flushes stop and windows are faulted in again.
            let sender = if (i / (n / 8)) % 2 == 1 { &fast } else { &p };
            sender
                .send(Record::new(topic).key(i.to_le_bytes()).value(big(i)))
                .unwrap();
        }
        fast.flush().unwrap();
        p.flush().unwrap();
        let got = read_partition(&mq, topic, 0).unwrap();
        assert_eq!(got.len() as u64, n);
        assert!(got
            .iter()
            .all(|m| m.value.as_deref() == Some(&big(m.offset)[..])));
        mq.close().unwrap();
    }
    let mq = Broker::open(dir.path(), config).unwrap();
    let got = read_partition(&mq, topic, 0).unwrap();
    assert_eq!(got.len() as u64, n);
    for m in &got {
        assert_eq!(
            m.value.as_deref(),
            Some(&big(m.offset)[..]),
            "offset {}",
            m.offset
        );
    }
    assert!(files_ending(dir.path(), topic, 0, ".log").len() >= 3);
}
