//! Transactions on a Kafka cluster through the same `Producer` and
//! `Transaction` a directory has: records and consumer offsets visible
//! together at the commit, nothing of an aborted or dropped transaction
//! visible to `read_committed` readers, a newer producer with the same
//! transactional id fencing the older.
//!
//! The cluster is librdkafka's own mock cluster, in this process: tansu
//! 0.6 (the broker of the other Kafka tests) has no transactions.
#![cfg(feature = "kafka")]
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use mqlite::{Broker, Config, ConsumerConfig, Error, OffsetReset, ProducerConfig, Record};
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

mod kafka_mock;
use kafka_mock::{committed_values, open};

fn transactional(mq: &Broker, id: &str) -> mqlite::Producer {
    mq.producer(ProducerConfig {
        transactional_id: Some(id.to_owned()),
        ..ProducerConfig::default()
    })
    .unwrap()
}

#[test]
fn committed_records_appear_together_and_aborted_ones_never() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    let mq = open(&mock);
    let p = transactional(&mq, "tx-a");
    assert_eq!(p.transactional_id(), Some("tx-a"));

    let txn = p.begin_transaction().unwrap();
    assert!(matches!(
        p.begin_transaction(),
        Err(Error::InvalidArgument(_))
    ));
    txn.send(Record::new("t").value("a1")).unwrap();
    assert!(matches!(
        txn.send(Record::new("t").partition(9).value("refused")),
        Err(Error::UnknownPartition { .. })
    ));
    txn.send(Record::new("t").value("a2")).unwrap();
    assert_eq!(txn.len(), 2);
    let md = txn.commit().unwrap();
    assert_eq!(md.len(), 2);
    assert_eq!(md[1].offset, md[0].offset + 1);

    let txn = p.begin_transaction().unwrap();
    txn.send(Record::new("t").value("b1")).unwrap();
    txn.abort().unwrap();

    {
        let dropped = p.begin_transaction().unwrap();
        dropped.send(Record::new("t").value("c1")).unwrap();
    }

    let txn = p.begin_transaction().unwrap();
    txn.send(Record::new("t").value("d1")).unwrap();
    assert!(matches!(
        txn.send(Record::new("t").value("x").sequence(1)),
        Err(Error::InvalidArgument(_))
    ));
    txn.commit().unwrap();

    assert_eq!(committed_values(&mq, "t", 3), vec!["a1", "a2", "d1"]);
}

#[test]
fn a_fenced_commit_fails_with_producer_fenced() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    let mq = open(&mock);
    let p = transactional(&mq, "tx-f");
    let txn = p.begin_transaction().unwrap();
    txn.send(Record::new("t").value("fenced")).unwrap();
    // The cluster's answer to the commit when a newer producer took the
    // transactional id (librdkafka's mock cluster does not fence by
    // itself: the answer is pushed).
    mock.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED],
    );
    let r = txn.commit();
    assert!(matches!(r, Err(Error::ProducerFenced { .. })), "{r:?}");
    // The fenced producer can do nothing more.
    assert!(p.begin_transaction().is_err());
    // (On Kafka the newer producer's registration aborts what the fenced
    // one left open; the mock cluster does not, so what a reader sees of
    // it is not checked here.)
    let newer = transactional(&mq, "tx-f");
    let txn = newer.begin_transaction().unwrap();
    txn.send(Record::new("t").value("newer")).unwrap();
    txn.commit().unwrap();
}

#[test]
fn offsets_go_with_the_transaction_and_a_refused_one_fails_it() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("in", 1, 1).unwrap();
    mock.create_topic("out", 1, 1).unwrap();
    let mq = open(&mock);
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..5 {
        plain
            .send(Record::new("in").value(format!("m{i}")))
            .unwrap();
    }
    let mut c = mq
        .consumer(ConsumerConfig {
            auto_offset_reset: OffsetReset::Earliest,
            enable_auto_commit: false,
            ..ConsumerConfig::group("g")
        })
        .unwrap();
    c.subscribe(&["in"]).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 3 && Instant::now() < deadline {
        if let Some(m) = c.poll_one(Duration::from_millis(100)).unwrap() {
            got.push(m);
        }
    }
    assert_eq!(got.len(), 3);

    // Consume, transform, produce: the consumer's positions go with the
    // records (librdkafka's mock cluster accepts transactional offset
    // commits without storing them, so the committed offset is not read
    // back here).
    let p = transactional(&mq, "tx-o");
    let txn = p.begin_transaction().unwrap();
    for m in &got {
        txn.send(Record::new("out").value(m.value().unwrap().to_vec()))
            .unwrap();
    }
    txn.send_offsets(&c).unwrap();
    txn.send_offsets_to("g2", &[("in", 0, 4, "by name")])
        .unwrap();
    assert!(matches!(
        txn.send_offsets_to("", &[("in", 0, 4, "")]),
        Err(Error::InvalidArgument(_))
    ));
    txn.commit().unwrap();

    // The cluster refuses the offsets: nothing of the transaction shows.
    let txn = p.begin_transaction().unwrap();
    txn.send(Record::new("out").value("lost")).unwrap();
    mock.request_errors(
        RDKafkaApiKey::TxnOffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED],
    );
    let r = txn.send_offsets_to("g2", &[("in", 0, 5, "")]);
    assert!(r.is_err(), "{r:?}");
    // A commit after the refusal fails too (librdkafka wants an abort,
    // which the failed commit makes). What a reader sees of the aborted
    // record is not checked here: the mock cluster has no last stable
    // offset, so it shows the record until the abort marker lands, which
    // after a refusal may be later than the reader looks.
    assert!(txn.commit().is_err());
    assert_eq!(committed_values(&mq, "out", 3)[..3], ["m0", "m1", "m2"]);

    // A consumer of a directory cannot commit with a cluster's transaction.
    let tmp = tempfile::tempdir().unwrap();
    let dir = Broker::open(tmp.path(), Config::default()).unwrap();
    let dc = dir.consumer(ConsumerConfig::group("g")).unwrap();
    let txn = p.begin_transaction().unwrap();
    assert!(matches!(
        txn.send_offsets(&dc),
        Err(Error::InvalidArgument(_))
    ));
    txn.abort().unwrap();
}

#[test]
fn transactions_need_a_transactional_id_on_a_cluster_too() {
    let mock = MockCluster::new(1).unwrap();
    let mq = open(&mock);
    let p = mq.producer(ProducerConfig::default()).unwrap();
    assert_eq!(p.transactional_id(), None);
    assert!(matches!(
        p.begin_transaction(),
        Err(Error::InvalidArgument(_))
    ));
}
