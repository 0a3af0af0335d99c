//! Delayed delivery: a record sent with a delivery time reaches its topic
//! (and consumers of every kind) when due, in the order of the delivery
//! times, across a close and reopen, and retention of the waiting room
//! never deletes a record before it was delivered.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::cfg;
use mqlite::{
    delayed, Broker, ConsumerConfig, Error, Message, ProducerConfig, Record, ShareConsumerConfig,
    TopicConfig,
};

fn poll_until(c: &mut mqlite::Consumer, n: usize, within: Duration) -> Vec<(Message, Instant)> {
    let end = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < end {
        for m in c.poll(Duration::from_millis(20)).unwrap() {
            got.push((m, Instant::now()));
        }
    }
    got
}

fn consumer(mq: &Broker, topic: &str) -> mqlite::Consumer {
    let mut c = mq.consumer(ConsumerConfig::group("g")).unwrap();
    c.subscribe(&[topic]).unwrap();
    c
}

#[test]
fn a_delayed_record_arrives_when_due_with_its_data() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(3)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let mut c = consumer(&mq, "t");
    let sent_at = Instant::now();
    let md = p
        .send(
            Record::new("t")
                .partition(2)
                .key("k")
                .value("later")
                .header("h", "v")
                .delay(Duration::from_millis(400)),
        )
        .unwrap();
    assert_eq!(&*md.topic, delayed::TOPIC);
    p.send(Record::new("t").partition(2).value("now")).unwrap();
    let got = poll_until(&mut c, 2, Duration::from_secs(10));
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].0.value(), Some(&b"now"[..]));
    let (m, at) = &got[1];
    assert!(at.duration_since(sent_at) >= Duration::from_millis(400));
    assert_eq!(m.value(), Some(&b"later"[..]));
    assert_eq!(m.key(), Some(&b"k"[..]));
    assert_eq!(m.partition(), 2);
    let headers = m.headers();
    assert!(headers.iter().any(|h| h.key == "h" && h.value == b"v"));
    assert!(headers.iter().any(|h| h.key == delayed::DELIVER_AT_HEADER));
    assert!(!headers
        .iter()
        .any(|h| h.key == delayed::TARGET_TOPIC_HEADER));
}

#[test]
fn records_arrive_in_the_order_of_their_delivery_times() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    for (v, after) in [("c", 900), ("a", 300), ("b", 600)] {
        p.send(Record::new("t").value(v).deliver_at(now + after))
            .unwrap();
    }
    // Due already: sent as it is.
    p.send(Record::new("t").value("0").deliver_at(now - 1))
        .unwrap();
    let mut c = consumer(&mq, "t");
    let got = poll_until(&mut c, 4, Duration::from_secs(10));
    let values: Vec<_> = got
        .iter()
        .map(|(m, _)| m.value().unwrap().to_vec())
        .collect();
    assert_eq!(
        values,
        vec![b"0".to_vec(), b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
}

#[test]
fn a_waiting_record_survives_a_close_and_arrives_after_the_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", TopicConfig::new(1)).unwrap();
        let p = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..20 {
            p.send(
                Record::new("t")
                    .value(format!("{i}"))
                    .delay(Duration::from_millis(300 + 20 * i)),
            )
            .unwrap();
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut c = consumer(&mq, "t");
    let got = poll_until(&mut c, 20, Duration::from_secs(10));
    let values: Vec<String> = got
        .iter()
        .map(|(m, _)| String::from_utf8(m.value().unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(values, (0..20).map(|i| i.to_string()).collect::<Vec<_>>());
    // Moved once each.
    assert!(c.poll(Duration::from_millis(300)).unwrap().is_empty());
}

#[test]
fn retention_of_the_waiting_room_keeps_what_was_not_moved() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    // The waiting room, made beforehand with small segments and a
    // retention of 1 ms.
    mq.create_topic(
        delayed::TOPIC,
        TopicConfig::new(1)
            .segment_bytes(4096)
            .retention_ms(1)
            .retention_respects_groups(true),
    )
    .unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let n = 300;
    for i in 0..n {
        p.send(
            Record::new("t")
                .value(format!("{i:0>100}"))
                .delay(Duration::from_millis(1500)),
        )
        .unwrap();
    }
    let info = mq.topic(delayed::TOPIC).unwrap();
    assert!(info.partitions[0].segments > 3, "{info:?}");
    let deadline = Instant::now() + Duration::from_millis(1200);
    while Instant::now() < deadline {
        mq.enforce_retention().unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut c = consumer(&mq, "t");
    let got = poll_until(&mut c, n, Duration::from_secs(10));
    assert_eq!(got.len(), n);
    // Once moved, retention may take them.
    std::thread::sleep(Duration::from_millis(300));
    mq.enforce_retention().unwrap();
    let info = mq.topic(delayed::TOPIC).unwrap();
    assert!(info.partitions[0].start_offset > 0, "{info:?}");
}

#[test]
fn a_share_consumer_gets_a_delayed_record_when_due() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("jobs", TopicConfig::new(2)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    p.send(
        Record::new("jobs")
            .value("j")
            .delay(Duration::from_millis(300)),
    )
    .unwrap();
    let mut sc = mq.share_consumer(ShareConsumerConfig::group("w")).unwrap();
    sc.subscribe(&["jobs"]).unwrap();
    assert!(sc.poll(Duration::from_millis(100)).unwrap().is_empty());
    let end = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < end {
        got = sc.poll(Duration::from_millis(50)).unwrap();
    }
    assert_eq!(got.len(), 1);
    got[0].ack().unwrap();
}

#[test]
fn bad_delays_and_destinations_are_refused_and_a_vanished_topic_dead_letters() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let later = Duration::from_secs(60);
    assert!(matches!(
        p.send(Record::new("nope").value("x").delay(later)),
        Err(Error::UnknownTopic(_))
    ));
    assert!(matches!(
        p.send(Record::new("t").partition(5).value("x").delay(later)),
        Err(Error::UnknownPartition { .. })
    ));
    assert!(matches!(
        p.send(Record::new("t").header(delayed::DELIVER_AT_HEADER, "soon")),
        Err(Error::InvalidArgument(_))
    ));
    // Nothing waits from those.
    assert!(mq.topic(delayed::TOPIC).is_err());
    // A topic deleted before its record is due: the record is dead-lettered.
    mq.create_topic("gone", TopicConfig::new(1)).unwrap();
    p.send(
        Record::new("gone")
            .value("x")
            .delay(Duration::from_millis(200)),
    )
    .unwrap();
    mq.delete_topic("gone").unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let mut seen = HashSet::new();
    while seen.is_empty() && Instant::now() < end {
        if let Ok(mut c) = mq.consumer(ConsumerConfig::default()) {
            if c.subscribe(&[delayed::DEAD_LETTER_TOPIC]).is_ok() {
                for m in c.poll(Duration::from_millis(100)).unwrap() {
                    seen.insert(m.value().unwrap().to_vec());
                }
            }
        }
    }
    assert!(seen.contains(&b"x"[..]));
}

#[test]
fn a_delayed_record_of_an_aborted_transaction_never_arrives() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let p = mq
        .producer(ProducerConfig::default().transactional_id("tx"))
        .unwrap();
    let tx = p.begin_transaction().unwrap();
    tx.send(
        Record::new("t")
            .value("aborted")
            .delay(Duration::from_millis(200)),
    )
    .unwrap();
    tx.abort().unwrap();
    let tx = p.begin_transaction().unwrap();
    tx.send(
        Record::new("t")
            .value("committed")
            .delay(Duration::from_millis(200)),
    )
    .unwrap();
    tx.commit().unwrap();
    let mut c = consumer(&mq, "t");
    let got = poll_until(&mut c, 2, Duration::from_secs(3));
    let values: Vec<_> = got
        .iter()
        .map(|(m, _)| m.value().unwrap().to_vec())
        .collect();
    assert_eq!(values, vec![b"committed".to_vec()]);
}
