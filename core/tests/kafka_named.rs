//! Named producers on a Kafka cluster through the same `Producer` a
//! directory has: `last_sequence` survives a restart, a re-sent sequence is
//! dropped as a duplicate, a failed send writes neither its records nor
//! its sequences, and a fenced producer fails with `ProducerFenced`.
//!
//! The cluster is librdkafka's own mock cluster, in this process: a named
//! producer on a cluster runs Kafka transactions, which tansu 0.6 (the
//! broker of the other Kafka tests) does not have.
#![cfg(feature = "kafka")]
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use mqlite::{Broker, Error, ProducerAccessMode, ProducerConfig, Record};
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

mod kafka_mock;
use kafka_mock::{committed, open};

fn named(mq: &Broker, name: &str) -> mqlite::Producer {
    mq.producer(ProducerConfig {
        name: Some(name.to_owned()),
        ..ProducerConfig::default()
    })
    .unwrap()
}

fn keyed(i: i64) -> Record {
    Record::new("t")
        .key(format!("k{}", i % 5))
        .value(format!("v{i}"))
        .sequence(i)
}

#[test]
fn a_restarted_producer_resumes_and_drops_what_it_wrote_before() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 3, 1).unwrap();
    let mq = open(&mock);
    {
        let p = named(&mq, "orders");
        assert_eq!(p.name(), Some("orders"));
        assert_eq!(p.last_sequence().unwrap(), None);
        assert_eq!(p.next_sequence().unwrap(), 0);
        for i in 0..4 {
            assert!(!p.send(keyed(i)).unwrap().duplicate);
        }
        let recs: Vec<Record> = (4..10).map(keyed).collect();
        let borrowed: Vec<_> = recs.iter().map(Record::as_borrowed).collect();
        let md = p.send_batch(&borrowed).unwrap();
        assert!(md
            .iter()
            .all(|m| !m.duplicate && m.known_offset().is_some()));
        assert_eq!(p.last_sequence().unwrap(), Some(9));
        // A re-send in the same session is a duplicate too.
        assert!(p.send(keyed(7)).unwrap().duplicate);
    }
    // Another producer of the name (a restart) reads where the name stands.
    let p = named(&mq, "orders");
    assert_eq!(p.last_sequence().unwrap(), Some(9));
    assert_eq!(p.next_sequence().unwrap(), 10);
    let recs: Vec<Record> = (5..15).map(keyed).collect();
    let borrowed: Vec<_> = recs.iter().map(Record::as_borrowed).collect();
    let md = p.send_batch(&borrowed).unwrap();
    let dups: Vec<bool> = md.iter().map(|m| m.duplicate).collect();
    assert_eq!(dups, [[true; 5], [false; 5]].concat());
    assert_eq!(p.last_sequence().unwrap(), Some(14));
    // Another name has sequences of its own.
    let other = named(&mq, "orders-2");
    assert_eq!(other.last_sequence().unwrap(), None);
    assert!(!other.send(keyed(3)).unwrap().duplicate);

    let seen = committed(&mq, "t", 3, 16);
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for (partition, v) in &seen {
        *count.entry(v.clone()).or_default() += 1;
        let i: i64 = v[1..].parse().unwrap();
        let want = mqlite::partition_for_key(format!("k{}", i % 5).as_bytes(), 3);
        assert_eq!(*partition, want, "{v} is where its key puts it");
    }
    let mut want: BTreeMap<String, usize> = (0..15).map(|i| (format!("v{i}"), 1)).collect();
    *want.get_mut("v3").unwrap() += 1;
    assert_eq!(count, want, "each sequence once (v3 also from orders-2)");
    // The sequences' topic is the cluster's, not the application's.
    assert!(!mq.topics().iter().any(|t| t.starts_with("__")));
}

/// What a failed send leaves. What a reader sees of the aborted
/// transaction is not checked: librdkafka's mock cluster writes no abort
/// markers and lists no aborted transactions in its fetch answers, so a
/// `read_committed` reader there sees aborted records that reached it
/// (Kafka does not).
#[test]
fn a_failed_send_takes_no_sequence() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    let mq = open(&mock);
    let p = named(&mq, "failing");
    p.send(Record::new("t").value("v0").sequence(0)).unwrap();

    // A batch refused before it reaches the cluster (its second record
    // is too large): the transaction is aborted, the producer goes on.
    let big = vec![0u8; 2 << 20];
    let recs = [
        Record::new("t").value("v1").sequence(1),
        Record::new("t").value(big).sequence(2),
    ];
    let borrowed: Vec<_> = recs.iter().map(Record::as_borrowed).collect();
    let r = p.send_batch(&borrowed);
    assert!(matches!(r, Err(Error::MessageTooLarge { .. })), "{r:?}");
    assert_eq!(p.last_sequence().unwrap(), Some(0));
    assert!(
        !p.send(Record::new("t").value("v1").sequence(1))
            .unwrap()
            .duplicate
    );

    // The cluster refuses a record: the commit fails and the transaction
    // is aborted.
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let r = p.send(Record::new("t").value("v2").sequence(2));
    assert!(r.is_err(), "{r:?}");
    assert_eq!(p.last_sequence().unwrap(), Some(1));
}

#[test]
fn a_fenced_producer_fails_with_producer_fenced() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    let mq = open(&mock);
    let old = named(&mq, "fenced");
    old.send(Record::new("t").value("a").sequence(0)).unwrap();
    // The cluster's answer when a newer producer of the name registered
    // (librdkafka's mock cluster does not fence by itself: it is pushed).
    mock.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED],
    );
    let r = old.send(Record::new("t").value("b").sequence(1));
    assert!(matches!(r, Err(Error::ProducerFenced { .. })), "{r:?}");
    // Every later send fails the same way, even one of a sequence the
    // producer holds for written.
    let r = old.send(Record::new("t").value("b").sequence(1));
    assert!(matches!(r, Err(Error::ProducerFenced { .. })), "{r:?}");
    let r = old.send(Record::new("t").value("a").sequence(0));
    assert!(matches!(r, Err(Error::ProducerFenced { .. })), "{r:?}");
    // (On Kafka the newer producer's registration aborts what the fenced
    // one left open; the mock cluster does not, so what the newer one
    // reads of sequence 1 is not checked here.)
    let newer = named(&mq, "fenced");
    assert!(newer.last_sequence().unwrap() >= Some(0));
    assert!(
        !newer
            .send(Record::new("t").value("c").sequence(2))
            .unwrap()
            .duplicate
    );
}

#[test]
fn automatic_numbering_goes_on_after_a_restart() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 2, 1).unwrap();
    let mq = open(&mock);
    let make = || {
        mq.producer(ProducerConfig {
            name: Some("auto".to_owned()),
            initial_sequence: Some(100),
            ..ProducerConfig::default()
        })
        .unwrap()
    };
    let p = make();
    assert_eq!(p.next_auto_sequence(), Some(100));
    for i in 0..3 {
        p.send(Record::new("t").value(format!("a{i}"))).unwrap();
    }
    assert_eq!(p.last_sequence().unwrap(), Some(102));
    drop(p);
    let p = make();
    assert_eq!(p.next_auto_sequence(), Some(103));
    let (tx, rx) = std::sync::mpsc::channel();
    p.send_async(Record::new("t").value("a3"), move |r| {
        tx.send(r).unwrap();
    })
    .unwrap();
    assert!(!rx.recv().unwrap().unwrap().duplicate);
    assert_eq!(p.last_sequence().unwrap(), Some(103));
}

#[test]
fn what_a_cluster_cannot_honour_is_refused() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    let mq = open(&mock);
    for mode in [
        ProducerAccessMode::Exclusive,
        ProducerAccessMode::WaitForExclusive,
        ProducerAccessMode::Shared,
    ] {
        let r = mq.producer(ProducerConfig {
            name: Some("m".to_owned()),
            access_mode: mode,
            ..ProducerConfig::default()
        });
        assert!(matches!(r, Err(Error::InvalidConfig(_))), "{mode:?}");
    }
    let r = mq.producer(ProducerConfig {
        name: Some("m".to_owned()),
        transactional_id: Some("m".to_owned()),
        ..ProducerConfig::default()
    });
    assert!(matches!(r, Err(Error::InvalidConfig(_))));
    // Sequences need a name; a named producer runs no explicit
    // transaction (each send is one).
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    assert!(matches!(
        plain.send(Record::new("t").value("x").sequence(0)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        plain.last_sequence(),
        Err(Error::InvalidArgument(_))
    ));
    let p = named(&mq, "m");
    assert!(matches!(
        p.begin_transaction(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        p.send(Record::new("t").value("x").sequence(-1)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        p.send(Record::new("t").partition(4).value("x").sequence(0)),
        Err(Error::UnknownPartition { .. })
    ));
    assert_eq!(p.last_sequence().unwrap(), None);
    let strict = mq
        .producer(ProducerConfig {
            name: Some("strict".to_owned()),
            strict_sequences: true,
            ..ProducerConfig::default()
        })
        .unwrap();
    strict
        .send(Record::new("t").value("x").sequence(0))
        .unwrap();
    assert!(matches!(
        strict.send(Record::new("t").value("x").sequence(2)),
        Err(Error::OutOfOrderSequence {
            expected: 1,
            received: 2,
            ..
        })
    ));
}
