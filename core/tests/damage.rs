//! One damaged file takes down only what it belongs to: a topic whose
//! `topic.json` is unreadable, a group whose offsets file is, or the
//! producer registry. The directory opens, the damaged piece answers
//! `Corrupt` (and is listed as damaged), everything else works.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::cfg;
use mqlite::{Broker, ConsumerConfig, Error, OffsetReset, ProducerConfig, Record, TopicConfig};

/// Topics `a` and `b` with 3 records each, group `g` and `h` committed.
fn populated(dir: &Path) {
    let mq = Broker::open(dir, cfg()).unwrap();
    for t in ["a", "b"] {
        mq.create_topic(t, TopicConfig::new(1)).unwrap();
    }
    let p = mq
        .producer(ProducerConfig::default().name("ingest"))
        .unwrap();
    for t in ["a", "b"] {
        for i in 0..3 {
            p.send(Record::new(t).value(format!("{t}{i}")).sequence(i))
                .unwrap();
        }
    }
    for g in ["g", "h"] {
        let mut c = mq.consumer(ConsumerConfig::group(g)).unwrap();
        c.assign(&[("b", 0)]).unwrap();
        c.commit_offsets(&[("b", 0, 1, "")]).unwrap();
    }
}

fn corrupt(e: Result<impl std::fmt::Debug, Error>, what: &str) {
    match e {
        Err(Error::Corrupt { .. }) => {}
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    }
}

fn read_all(mq: &Broker, topic: &str) -> usize {
    let mut c = mq
        .consumer(ConsumerConfig::default().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[(topic, 0)]).unwrap();
    c.poll(Duration::ZERO).unwrap().len()
}

#[test]
fn a_damaged_topic_file_takes_down_only_its_topic() {
    let tmp = tempfile::tempdir().unwrap();
    populated(tmp.path());
    std::fs::write(
        tmp.path().join("topics/a/topic.json"),
        b"{\"version\": 1, \"na",
    )
    .unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert_eq!(mq.topics(), vec!["a".to_owned(), "b".to_owned()]);
    let damaged = mq.damaged();
    assert_eq!(damaged.len(), 1);
    assert_eq!(
        (damaged[0].0.as_str(), damaged[0].1.as_str()),
        ("topic", "a")
    );
    corrupt(mq.topic("a"), "describe");
    let p = mq.producer(ProducerConfig::default()).unwrap();
    corrupt(p.send(Record::new("a").value("x")), "send");
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    corrupt(c.assign(&[("a", 0)]), "assign");
    corrupt(mq.create_topic("a", TopicConfig::new(1)), "create over it");
    // Everything else works.
    assert_eq!(read_all(&mq, "b"), 3);
    p.send(Record::new("b").value("more")).unwrap();
    let named = mq
        .producer(ProducerConfig::default().name("ingest"))
        .unwrap();
    assert_eq!(named.last_sequence().unwrap(), Some(2));
    // Deleting it is the way out.
    mq.delete_topic("a").unwrap();
    assert!(mq.damaged().is_empty());
    mq.create_topic("a", TopicConfig::new(2)).unwrap();
    p.send(Record::new("a").value("fresh")).unwrap();
}

#[test]
fn a_damaged_offsets_file_takes_down_only_its_group() {
    let tmp = tempfile::tempdir().unwrap();
    populated(tmp.path());
    std::fs::write(tmp.path().join("groups/g.offsets"), b"\x00\x01 not json").unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert_eq!(mq.groups(), vec!["g".to_owned(), "h".to_owned()]);
    let damaged = mq.damaged();
    assert_eq!(damaged.len(), 1);
    assert_eq!(
        (damaged[0].0.as_str(), damaged[0].1.as_str()),
        ("group", "g")
    );
    corrupt(mq.consumer(ConsumerConfig::group("g")), "consumer");
    corrupt(mq.describe_group("g"), "describe");
    let mut h = mq.consumer(ConsumerConfig::group("h")).unwrap();
    h.assign(&[("b", 0)]).unwrap();
    assert_eq!(h.position("b", 0).unwrap(), 1);
    assert_eq!(read_all(&mq, "a"), 3);
    mq.producer(ProducerConfig::default())
        .unwrap()
        .send(Record::new("a").value("x"))
        .unwrap();
}

#[test]
fn a_damaged_producer_registry_refuses_only_idempotent_producers() {
    let tmp = tempfile::tempdir().unwrap();
    populated(tmp.path());
    std::fs::write(tmp.path().join("producers/registry.json"), b"[1, 2").unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let damaged = mq.damaged();
    assert_eq!(damaged.len(), 1);
    assert_eq!(damaged[0].0, "producers");
    corrupt(
        mq.producer(ProducerConfig::default()),
        "anonymous idempotent",
    );
    corrupt(
        mq.producer(ProducerConfig::default().name("ingest")),
        "named",
    );
    let plain = mq
        .producer(ProducerConfig::default().idempotent(false))
        .unwrap();
    plain.send(Record::new("a").value("x")).unwrap();
    assert_eq!(read_all(&mq, "a"), 4);
    let mut h = mq.consumer(ConsumerConfig::group("h")).unwrap();
    h.assign(&[("b", 0)]).unwrap();
    assert_eq!(h.position("b", 0).unwrap(), 1);
}

#[test]
fn a_damaged_batch_does_not_fail_every_named_producer() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        // Index entries every batch: open checks only from the last one.
        mq.create_topic("a", TopicConfig::new(1).index_interval_bytes(64))
            .unwrap();
        mq.create_topic("b", TopicConfig::new(1)).unwrap();
        let ingest = mq
            .producer(ProducerConfig::default().name("ingest"))
            .unwrap();
        for i in 0..10 {
            ingest
                .send(Record::new("a").value(format!("a{i}")).sequence(i))
                .unwrap();
        }
        let other = mq
            .producer(ProducerConfig::default().name("other"))
            .unwrap();
        for i in 0..4 {
            other
                .send(Record::new("b").value(format!("b{i}")).sequence(i))
                .unwrap();
        }
    }
    // A batch in the middle of `a` damaged, and no producer snapshot: the
    // producer state of `a` is rebuilt from batch headers and meets it.
    let part = tmp.path().join("topics/a/0");
    let log = part.join("00000000000000000000.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let spans = common::batches(&bytes);
    assert_eq!(spans.len(), 10);
    bytes[spans[4].pos + 40] ^= 0x01;
    std::fs::write(&log, &bytes).unwrap();
    let _ = std::fs::remove_file(part.join("producers.snapshot"));
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    // The damage is not at the tail, so open keeps it; readers meet it.
    assert_eq!(mq.topic("a").unwrap().partitions[0].end_offset, 10);
    // The producer that never wrote to `a` is unaffected.
    let other = mq
        .producer(ProducerConfig::default().name("other"))
        .unwrap();
    assert_eq!(other.last_sequence().unwrap(), Some(3));
    assert_eq!(other.next_sequence().unwrap(), 4);
    other
        .send(Record::new("a").value("b-in-a").sequence(4))
        .unwrap();
    // The one that did sees its batches around the damage.
    let ingest = mq
        .producer(ProducerConfig::default().name("ingest"))
        .unwrap();
    assert_eq!(ingest.last_sequence().unwrap(), Some(9));
    let md = ingest
        .send(Record::new("a").value("again").sequence(9))
        .unwrap();
    assert!(
        md.duplicate,
        "a re-send after the damage is still deduplicated"
    );
}
