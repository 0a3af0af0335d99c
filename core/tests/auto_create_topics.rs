//! Topic creation on first use (`Config::auto_create_topics`): sends and
//! consumer `subscribe` / `assign` naming a missing topic create it with
//! `default_partitions`; invalid names and read-only handles create
//! nothing; concurrent first uses share one topic; off by default.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use mqlite::{Broker, Config, ConsumerConfig, Error, ProducerConfig, Record, TopicConfig};

fn partitions(mq: &Broker, topic: &str) -> usize {
    mq.topic(topic).unwrap().partitions.len()
}

#[test]
fn off_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), Config::default()).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let r = p.send(Record::new("missing").value("v"));
    assert!(matches!(r, Err(Error::UnknownTopic(_))), "{r:?}");
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    let r = c.assign(&[("missing", 0)]);
    assert!(matches!(r, Err(Error::UnknownTopic(_))), "{r:?}");
    c.subscribe(&["missing"]).unwrap();
    assert!(mq.topics().is_empty());
}

#[test]
fn sends_and_consumers_create_missing_topics() {
    let tmp = tempfile::tempdir().unwrap();
    let config = Config::default()
        .auto_create_topics(true)
        .default_partitions(3);
    let mq = Broker::open(tmp.path(), config).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let md = p.send(Record::new("sent").value("v")).unwrap();
    assert_eq!(md.offset, 0);
    assert_eq!(partitions(&mq, "sent"), 3);
    p.send_batch(&[Record::new("batched").value("v").as_borrowed()])
        .unwrap();
    assert_eq!(partitions(&mq, "batched"), 3);
    p.send_async(Record::new("queued").value("v"), |r| {
        r.unwrap();
    })
    .unwrap();
    p.flush().unwrap();
    assert_eq!(partitions(&mq, "queued"), 3);
    // An explicit partition past the default count is still refused.
    let r = p.send(Record::new("explicit").partition(5).value("v"));
    assert!(matches!(r, Err(Error::UnknownPartition { .. })), "{r:?}");

    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[("assigned", 2)]).unwrap();
    assert_eq!(partitions(&mq, "assigned"), 3);
    c.subscribe(&["subscribed"]).unwrap();
    assert_eq!(partitions(&mq, "subscribed"), 3);
    // A pattern names no topic: nothing is created.
    let before = mq.topics();
    c.subscribe_pattern("pat.*", None).unwrap();
    assert_eq!(mq.topics(), before);
    // An existing topic keeps its own partitions.
    mq.create_topic("own", TopicConfig::new(5)).unwrap();
    p.send(Record::new("own").value("v")).unwrap();
    assert_eq!(partitions(&mq, "own"), 5);

    // Invalid names fail as before and create nothing.
    let before = mq.topics();
    let r = p.send(Record::new("bad name").value("v"));
    assert!(matches!(r, Err(Error::InvalidTopicName { .. })), "{r:?}");
    let r = c.assign(&[("bad/name", 0)]);
    assert!(matches!(r, Err(Error::InvalidTopicName { .. })), "{r:?}");
    let r = c.subscribe(&["..", "ok"]);
    assert!(matches!(r, Err(Error::InvalidTopicName { .. })), "{r:?}");
    assert_eq!(mq.topics(), before);
}

#[test]
fn concurrent_first_uses_share_one_topic() {
    let tmp = tempfile::tempdir().unwrap();
    let config = Config::default()
        .auto_create_topics(true)
        .default_partitions(2);
    let mq = Arc::new(Broker::open(tmp.path(), config).unwrap());
    std::thread::scope(|s| {
        for i in 0..8 {
            let mq = Arc::clone(&mq);
            s.spawn(move || {
                if i % 2 == 0 {
                    let p = mq.producer(ProducerConfig::default()).unwrap();
                    p.send(Record::new("race").value(format!("{i}"))).unwrap();
                } else {
                    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
                    c.assign(&[("race", 1)]).unwrap();
                }
            });
        }
    });
    assert_eq!(mq.topics(), vec!["race".to_owned()]);
    assert_eq!(partitions(&mq, "race"), 2);
    let sent: u64 = mq
        .topic("race")
        .unwrap()
        .partitions
        .iter()
        .map(|p| p.end_offset - p.start_offset)
        .sum();
    assert_eq!(sent, 4);
}

#[test]
fn read_only_handles_never_create() {
    let tmp = tempfile::tempdir().unwrap();
    let writer = Broker::open(tmp.path(), Config::default().shared(true)).unwrap();
    writer.create_topic("t", TopicConfig::new(1)).unwrap();
    let ro = Broker::open(
        tmp.path(),
        Config::default().readonly(true).auto_create_topics(true),
    )
    .unwrap();
    let mut c = ro.consumer(ConsumerConfig::default()).unwrap();
    let r = c.assign(&[("missing", 0)]);
    assert!(matches!(r, Err(Error::UnknownTopic(_))), "{r:?}");
    c.subscribe(&["missing"]).unwrap();
    assert_eq!(writer.topics(), vec!["t".to_owned()]);
}

#[test]
fn default_partitions_is_checked() {
    let tmp = tempfile::tempdir().unwrap();
    for n in [0, 100_001] {
        let r = Broker::open(tmp.path(), Config::default().default_partitions(n));
        assert!(matches!(r, Err(Error::InvalidConfig(_))), "{n}: {r:?}");
    }
}
