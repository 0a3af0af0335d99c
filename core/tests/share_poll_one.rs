//! One-message consumption by share consumers (`ShareConsumer::poll_one`):
//! a poll's messages handed out one per call, given back to the group
//! uncounted once half their lock has run or the consumer closes.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::cfg;
use mqlite::{
    Broker, ProducerConfig, Record, ShareBacklog, ShareConsumer, ShareConsumerConfig, ShareMessage,
    TopicConfig,
};

fn setup(n: u64) -> (tempfile::TempDir, Broker) {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("jobs", TopicConfig::new(2)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..n {
        p.send(
            Record::new("jobs")
                .partition((i % 2) as u32)
                .value(i.to_string()),
        )
        .unwrap();
    }
    (tmp, mq)
}

fn member(mq: &Broker, config: ShareConsumerConfig) -> ShareConsumer {
    let mut c = mq.share_consumer(config).unwrap();
    c.subscribe(&["jobs"]).unwrap();
    c
}

fn value(m: &ShareMessage) -> u64 {
    std::str::from_utf8(m.value().unwrap())
        .unwrap()
        .parse()
        .unwrap()
}

/// Calls `poll_one` until `n` messages came or `within` passed.
fn take(c: &mut ShareConsumer, n: usize, within: Duration) -> Vec<ShareMessage> {
    let end = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < end {
        if let Some(m) = c.poll_one(Duration::from_millis(50)).unwrap() {
            got.push(m);
        }
    }
    got
}

#[test]
fn poll_one_hands_out_a_poll_one_message_per_call() {
    let (_tmp, mq) = setup(100);
    let mut c = member(&mq, ShareConsumerConfig::group("g").max_poll_records(40));
    let got = take(&mut c, 100, Duration::from_secs(10));
    let mut values: Vec<u64> = got.iter().map(value).collect();
    values.sort_unstable();
    assert_eq!(values, (0..100).collect::<Vec<_>>());
    assert!(got.iter().all(|m| m.delivery_count() == 1));
    for m in &got {
        m.ack().unwrap();
    }
    let s = c.stats();
    assert_eq!((s.records, s.acked, s.redelivered), (100, 100, 0), "{s:?}");
    assert!(c.poll_one(Duration::from_millis(50)).unwrap().is_none());
    assert_eq!(c.backlog().unwrap(), ShareBacklog::default());
}

#[test]
fn poll_returns_what_poll_one_holds_first() {
    let (_tmp, mq) = setup(10);
    let mut c = member(&mq, ShareConsumerConfig::group("g"));
    let first = c.poll_one(Duration::from_secs(5)).unwrap().unwrap();
    let rest = c.poll(Duration::from_secs(5)).unwrap();
    assert_eq!(rest.len(), 9);
    let mut values: Vec<u64> = rest.iter().map(value).chain([value(&first)]).collect();
    values.sort_unstable();
    assert_eq!(values, (0..10).collect::<Vec<_>>());
    c.ack(&rest).unwrap();
    first.ack().unwrap();
    assert_eq!(c.stats().records, 10);
}

/// A consumer slower than half a lock per message gives its held messages
/// back: never counted as deliveries, so `max_deliveries` 1 does not
/// dead-letter what the application never saw.
#[test]
fn held_messages_go_back_uncounted_once_half_their_lock_ran() {
    let (_tmp, mq) = setup(6);
    let config = ShareConsumerConfig::group("g")
        .lock_duration_ms(200)
        .max_deliveries(1);
    let mut c = member(&mq, config);
    let mut seen = Vec::new();
    let end = Instant::now() + Duration::from_secs(20);
    while seen.len() < 6 && Instant::now() < end {
        let Some(m) = c.poll_one(Duration::from_millis(50)).unwrap() else {
            continue;
        };
        assert_eq!(m.delivery_count(), 1, "offset {}", m.offset());
        std::thread::sleep(Duration::from_millis(120));
        m.ack().unwrap();
        seen.push(value(&m));
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..6).collect::<Vec<_>>());
    let s = c.stats();
    assert_eq!((s.dead_lettered, s.redelivered), (0, 0), "{s:?}");
    assert!(mq.topic("jobs.g.dlq").is_err(), "nothing dead-lettered");
}

#[test]
fn closing_gives_held_messages_to_the_other_members_uncounted() {
    let (_tmp, mq) = setup(10);
    let mut a = member(&mq, ShareConsumerConfig::group("g"));
    let mut b = member(&mq, ShareConsumerConfig::group("g"));
    let handed = a.poll_one(Duration::from_secs(5)).unwrap().unwrap();
    let got = b.poll(Duration::from_millis(100)).unwrap();
    assert!(got.is_empty(), "a holds them: {}", got.len());
    a.close();
    let got = {
        let end = Instant::now() + Duration::from_secs(5);
        let mut got = Vec::new();
        while got.len() < 10 && Instant::now() < end {
            got.extend(b.poll(Duration::from_millis(50)).unwrap());
        }
        got
    };
    assert_eq!(got.len(), 10);
    for m in &got {
        // The one `a` handed out was delivered before; the others not.
        let expected = if m.offset() == handed.offset() && m.partition() == handed.partition() {
            2
        } else {
            1
        };
        assert_eq!(
            m.delivery_count(),
            expected,
            "{}/{}",
            m.partition(),
            m.offset()
        );
    }
    b.ack(&got).unwrap();
}

#[test]
fn a_new_subscription_gives_held_messages_back() {
    let (_tmp, mq) = setup(10);
    let mut a = member(&mq, ShareConsumerConfig::group("g"));
    let first = a.poll_one(Duration::from_secs(5)).unwrap().unwrap();
    first.ack().unwrap();
    mq.create_topic("other", TopicConfig::new(1)).unwrap();
    a.subscribe(&["other"]).unwrap();
    let mut b = member(&mq, ShareConsumerConfig::group("g"));
    let got = b.poll(Duration::from_secs(5)).unwrap();
    assert_eq!(got.len(), 9);
    assert!(got.iter().all(|m| m.delivery_count() == 1));
    b.ack(&got).unwrap();
}
