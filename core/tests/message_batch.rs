//! `Consumer::poll_batch`: the same messages, positions and stats as
//! `poll`, whatever the batches hold (keys, tombstones, headers, compressed
//! and uncompressed batches, several partitions, polls that stop inside a
//! batch); the `MessageBatch` accessors agree with each other; and a batch
//! keeps what it reads from alive after its topic is deleted. Small
//! segments, so reads cross segment boundaries too.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{cfg, Msg, Rng};
use mqlite::{
    Broker, Compression, Consumer, ConsumerConfig, OffsetReset, ProducerConfig, Record, TopicConfig,
};

const TOPIC: &str = "mixed";
const PARTITIONS: u32 = 3;

/// A topic of `PARTITIONS` partitions holding `n` records of every shape,
/// written by producers with and without compression (so partitions mix
/// compressed and uncompressed batches of several sizes).
fn fill(mq: &Broker, n: u64) {
    mq.create_topic(TOPIC, TopicConfig::new(PARTITIONS).segment_bytes(64 << 10))
        .unwrap();
    let mut rng = Rng::new(7);
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    let lz4 = mq
        .producer(ProducerConfig::default().compression(Compression::Lz4))
        .unwrap();
    let mut i = 0;
    while i < n {
        let run = rng.range(1, 40);
        let producer = if rng.range(0, 2) == 0 { &plain } else { &lz4 };
        let part = rng.range(0, u64::from(PARTITIONS)) as u32;
        let mut batch = Vec::new();
        for _ in 0..run.min(n - i) {
            let mut r = Record::new(TOPIC).partition(part);
            if i % 3 != 0 {
                r = r.key(format!("k{i}"));
            }
            if i % 7 != 0 {
                let len = rng.range(0, 300) as usize;
                r = r.value(rng.bytes(len));
            }
            for h in 0..(i % 4) {
                r = r.header(format!("h{h}"), vec![h as u8; h as usize]);
            }
            batch.push(r);
            i += 1;
        }
        let borrowed: Vec<_> = batch.iter().map(Record::as_borrowed).collect();
        producer.send_batch(&borrowed).unwrap();
    }
}

fn consumer(mq: &Broker, max_poll_records: usize) -> Consumer {
    let mut c = mq
        .consumer(
            ConsumerConfig::default()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(max_poll_records),
        )
        .unwrap();
    let parts: Vec<(&str, u32)> = (0..PARTITIONS).map(|p| (TOPIC, p)).collect();
    c.assign(&parts).unwrap();
    c
}

/// Every message, in delivery order, and the shape of each poll.
fn drain_poll(c: &mut Consumer) -> (Vec<Msg>, Vec<usize>) {
    let (mut out, mut sizes) = (Vec::new(), Vec::new());
    loop {
        let msgs = c.poll(Duration::ZERO).unwrap();
        if msgs.is_empty() {
            return (out, sizes);
        }
        sizes.push(msgs.len());
        out.extend(msgs.iter().map(Msg::from));
    }
}

fn drain_poll_batch(c: &mut Consumer) -> (Vec<Msg>, Vec<usize>) {
    let (mut out, mut sizes) = (Vec::new(), Vec::new());
    loop {
        let batch = c.poll_batch(Duration::ZERO).unwrap();
        if batch.is_empty() {
            return (out, sizes);
        }
        sizes.push(batch.len());
        // Every way of reading the batch says the same.
        let by_ref: Vec<Msg> = batch.iter().map(Msg::from).collect();
        assert_eq!(batch.iter().len(), batch.len());
        for (i, m) in by_ref.iter().enumerate() {
            assert_eq!(&Msg::from(batch.get(i).unwrap()), m);
            assert_eq!(&Msg::from(&batch.to_message(i).unwrap()), m);
            assert_eq!(batch.get(i).unwrap().topic(), TOPIC);
        }
        assert!(batch.get(batch.len()).is_none() && batch.to_message(batch.len()).is_none());
        let owned: Vec<Msg> = batch.into_iter().map(|m| Msg::from(&m)).collect();
        assert_eq!(owned, by_ref);
        out.extend(by_ref);
    }
}

#[test]
fn poll_batch_delivers_what_poll_delivers() {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), cfg()).unwrap();
    fill(&mq, 3_000);
    for max in [1, 7, 64, 500, 10_000] {
        let mut a = consumer(&mq, max);
        let mut b = consumer(&mq, max);
        let (polled, poll_sizes) = drain_poll(&mut a);
        let (batched, batch_sizes) = drain_poll_batch(&mut b);
        assert_eq!(polled.len(), 3_000, "max_poll_records {max}");
        assert_eq!(batched, polled, "max_poll_records {max}");
        assert_eq!(batch_sizes, poll_sizes, "max_poll_records {max}");
        for p in 0..PARTITIONS {
            assert_eq!(b.position(TOPIC, p).unwrap(), a.position(TOPIC, p).unwrap());
        }
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!((sb.records, sb.bytes), (sa.records, sa.bytes));
        assert_eq!(sa.records, 3_000);
    }
}

#[test]
fn a_batch_outlives_its_topic() {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), cfg()).unwrap();
    fill(&mq, 500);
    let mut c = consumer(&mq, 10_000);
    let (expected, _) = drain_poll(&mut consumer(&mq, 10_000));
    let batch = c.poll_batch(Duration::ZERO).unwrap();
    drop(c);
    mq.delete_topic(TOPIC).unwrap();
    let got: Vec<Msg> = batch.iter().map(Msg::from).collect();
    assert_eq!(got, expected);
}

#[test]
fn an_empty_poll_batch_waits_for_the_timeout_and_a_closed_consumer_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), cfg()).unwrap();
    mq.create_topic(TOPIC, TopicConfig::new(PARTITIONS))
        .unwrap();
    let mut c = consumer(&mq, 10);
    let t = std::time::Instant::now();
    let batch = c.poll_batch(Duration::from_millis(50)).unwrap();
    assert!(batch.is_empty() && batch.iter().next().is_none());
    assert!(t.elapsed() >= Duration::from_millis(50));
    c.close();
    assert!(matches!(
        c.poll_batch(Duration::ZERO),
        Err(mqlite::Error::Closed(_))
    ));
}
