//! `acks=all`: every acknowledged record is flushed, and concurrent senders
//! share flushes instead of paying one each.

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
