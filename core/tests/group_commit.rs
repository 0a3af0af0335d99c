//! `acks=all`: every acknowledged record is flushed, and concurrent senders
//! share flushes instead of paying one each.
#![allow(clippy::unwrap_used)]

use std::sync::Barrier;

use mqlite::{Acks, Broker, Config, ProducerConfig, Record, TopicConfig};

#[test]
fn concurrent_durable_senders_share_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), Config::default().prefault(false)).unwrap();
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(1 << 20))
        .unwrap();
    let producer = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    const THREADS: usize = 8;
    const EACH: usize = 40;
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (producer, barrier) = (&producer, &barrier);
            s.spawn(move || {
                barrier.wait();
                for i in 0..EACH {
                    producer
                        .send(Record::new("t").partition(0).value(format!("{t}-{i}")))
                        .unwrap();
                }
            });
        }
    });
    let info = mq.topic("t").unwrap().partitions[0].clone();
    assert_eq!(info.end_offset, (THREADS * EACH) as u64);
    assert!(info.flushes >= 1);
    assert!(
        info.flushes < (THREADS * EACH) as u64,
        "{} flushes for {} sends: no sharing",
        info.flushes,
        THREADS * EACH
    );
}

#[test]
fn acks_one_does_not_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), Config::default().prefault(false)).unwrap();
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(1 << 20))
        .unwrap();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..100 {
        producer
            .send(Record::new("t").value(format!("{i}")))
            .unwrap();
    }
    assert_eq!(mq.topic("t").unwrap().partitions[0].flushes, 0);
    let durable = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    durable.send(Record::new("t").value("x")).unwrap();
    assert_eq!(mq.topic("t").unwrap().partitions[0].flushes, 1);
}

/// Large `acks=all` batches are written with pwrite rather than through the
/// map; small ones and `acks=1` ones through the map. Mixed in one
/// partition, across segment rolls, with a consumer tailing the partition as
/// it is written: every record reads back as sent, then again after reopen.
#[test]
fn large_durable_batches_read_back_beside_mapped_writes() {
    use mqlite::{BorrowedRecord, ConsumerConfig};
    use std::time::Duration;

    fn value(i: u64) -> Vec<u8> {
        let len = 200 + (i * 7919 % 900) as usize;
        (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
    }
    let dir = tempfile::tempdir().unwrap();
    const ROUNDS: u64 = 40;
    const BATCH: u64 = 200; // about 120 KiB: over the pwrite threshold
    let mut expected = Vec::new();
    {
        let mq = Broker::open(dir.path(), Config::default()).unwrap();
        mq.create_topic("t", TopicConfig::new(1).segment_bytes(1 << 20))
            .unwrap();
        let all = mq
            .producer(ProducerConfig::default().acks(Acks::All))
            .unwrap();
        let one = mq.producer(ProducerConfig::default()).unwrap();
        let mut consumer = mq.consumer(ConsumerConfig::default()).unwrap();
        consumer.assign(&[("t", 0)]).unwrap();
        let mut seen = 0u64;
        let mut next = 0u64;
        for round in 0..ROUNDS {
            let values: Vec<Vec<u8>> = (next..next + BATCH).map(value).collect();
            let records: Vec<BorrowedRecord<'_>> = values
                .iter()
                .map(|v| BorrowedRecord {
                    topic: "t",
                    partition: Some(0),
                    value: Some(v),
                    ..BorrowedRecord::default()
                })
                .collect();
            let producer = if round % 2 == 0 { &all } else { &one };
            let mds = producer.send_batch(&records).unwrap();
            assert_eq!(mds[0].offset, next);
            expected.extend(values);
            next += BATCH;
            let v = value(next);
            all.send(Record::new("t").partition(0).value(v.clone()))
                .unwrap();
            expected.push(v);
            next += 1;
            for m in consumer.poll(Duration::from_millis(10)).unwrap() {
                assert_eq!(m.value(), Some(&expected[m.offset() as usize][..]));
                assert_eq!(m.offset(), seen);
                seen += 1;
            }
        }
        let info = mq.topic("t").unwrap().partitions[0].clone();
        assert_eq!(info.end_offset, next);
        assert!(info.segments > 3, "{} segments: no roll", info.segments);
    }
    let mq = Broker::open(dir.path(), Config::default()).unwrap();
    let mut consumer = mq.consumer(ConsumerConfig::default()).unwrap();
    consumer.assign(&[("t", 0)]).unwrap();
    let mut seen = 0usize;
    while seen < expected.len() {
        let batch = consumer.poll(Duration::from_millis(100)).unwrap();
        assert!(!batch.is_empty(), "only {seen} of {} read", expected.len());
        for m in batch {
            assert_eq!(m.offset(), seen as u64);
            assert_eq!(m.value(), Some(&expected[seen][..]));
            seen += 1;
        }
    }
}
