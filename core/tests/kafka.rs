//! The Kafka backend against a Kafka-compatible broker started by the
//! test binary (`kafka_cluster/mod.rs`).
#![cfg(feature = "kafka")]
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod kafka_cluster;
use kafka_cluster::{broker, topic};

use mqlite::kafka::KafkaBroker;
use mqlite::{
    partition_for_key, Acks, BorrowedRecord, ConsumerConfig, Error, Header, ProducerConfig, Record,
    TopicConfig,
};

/// Polls until `n` messages came (or 30 s passed).
fn poll_n(c: &mut mqlite::kafka::KafkaConsumer, n: usize) -> Vec<mqlite::Message> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < n && Instant::now() < deadline {
        got.extend(c.poll(Duration::from_millis(200)).unwrap());
    }
    got
}

#[test]
fn topics_are_created_listed_described_and_deleted() {
    let Some(b) = broker() else { return };
    let t = topic("admin");
    b.create_topic(&t, TopicConfig::new(3)).unwrap();
    assert!(b.topics().unwrap().contains(&t));
    let info = b.topic(&t).unwrap();
    assert_eq!(info.partitions.len(), 3);
    assert_eq!(info.config.partitions, 3);
    assert!(matches!(
        b.create_topic(&t, TopicConfig::new(3)),
        Err(Error::TopicExists(_))
    ));
    assert!(matches!(
        b.create_topic("bad/name", TopicConfig::new(1)),
        Err(Error::InvalidTopicName { .. })
    ));
    assert!(matches!(
        b.add_partitions(&t, 2),
        Err(Error::InvalidArgument(_))
    ));
    // tansu 0.6 has no CreatePartitions: the cluster's refusal comes back
    // as an error that says so, and the topic is unchanged.
    match b.add_partitions(&t, 5) {
        Ok(()) => assert_eq!(b.topic(&t).unwrap().partitions.len(), 5),
        Err(e) => {
            assert!(e.to_string().contains("not supported"), "{e}");
            assert_eq!(b.topic(&t).unwrap().partitions.len(), 3);
        }
    }
    b.delete_topic(&t).unwrap();
    assert!(!b.topics().unwrap().contains(&t));
    assert!(matches!(b.topic(&t), Err(Error::UnknownTopic(_))));
    assert!(matches!(b.delete_topic(&t), Err(Error::UnknownTopic(_))));
}

#[test]
fn a_bad_address_is_refused() {
    assert!(matches!(
        KafkaBroker::open("/tmp/not-a-cluster", &[]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        KafkaBroker::open("kafka://", &[]),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn records_come_back_whole_and_in_order() {
    let Some(b) = broker() else { return };
    let t = topic("roundtrip");
    b.create_topic(&t, TopicConfig::new(2)).unwrap();
    let p = b.producer(ProducerConfig::default()).unwrap();
    for i in 0..50u32 {
        let md = p
            .send(
                Record::new(&t)
                    .partition(i % 2)
                    .key(format!("k{i}"))
                    .value(format!("v{i}"))
                    .header("n", i.to_le_bytes().to_vec())
                    .timestamp(1_700_000_000_000 + i64::from(i)),
            )
            .unwrap();
        assert_eq!(md.partition, i % 2);
        assert_eq!(
            md.offset,
            u64::from(i / 2),
            "offsets are dense per partition"
        );
    }
    let mut c = b.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[(&t, 0), (&t, 1)]).unwrap();
    let got = poll_n(&mut c, 50);
    assert_eq!(got.len(), 50);
    let mut last = [None::<u64>; 2];
    for m in &got {
        let i: u32 = std::str::from_utf8(&m.value().unwrap()[1..])
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(m.topic(), t);
        assert_eq!(m.partition(), i % 2);
        assert_eq!(m.offset(), u64::from(i / 2));
        assert_eq!(m.key().unwrap(), format!("k{i}").as_bytes());
        assert_eq!(m.timestamp(), 1_700_000_000_000 + i64::from(i));
        assert_eq!(
            m.headers(),
            vec![Header::new("n", i.to_le_bytes().to_vec())]
        );
        let slot = &mut last[m.partition() as usize];
        assert!(slot.is_none_or(|o| o + 1 == m.offset()), "in order");
        *slot = Some(m.offset());
    }
    assert_eq!(c.lag().unwrap(), vec![(t.clone(), 0, 0), (t.clone(), 1, 0)]);
    assert_eq!(c.position(&t, 1).unwrap(), 25);
    c.seek(&t, 1, 20).unwrap();
    let again = poll_n(&mut c, 5);
    assert_eq!(again.first().map(mqlite::Message::offset), Some(20));
}

#[test]
fn a_key_lands_where_a_directory_puts_it() {
    let Some(b) = broker() else { return };
    let t = topic("keys");
    b.create_topic(&t, TopicConfig::new(7)).unwrap();
    let p = b.producer(ProducerConfig::default()).unwrap();
    for i in 0..40 {
        let key = format!("user-{i}");
        let md = p.send(Record::new(&t).key(key.clone()).value("x")).unwrap();
        assert_eq!(md.partition, partition_for_key(key.as_bytes(), 7), "{key}");
    }
}

#[test]
fn batches_callbacks_and_acks_all() {
    let Some(b) = broker() else { return };
    let t = topic("batch");
    b.create_topic(&t, TopicConfig::new(1)).unwrap();
    let p = b
        .producer(ProducerConfig {
            acks: Acks::All,
            linger_ms: 5,
            ..ProducerConfig::default()
        })
        .unwrap();
    let values: Vec<String> = (0..100).map(|i| format!("b{i}")).collect();
    let recs: Vec<BorrowedRecord<'_>> = values
        .iter()
        .map(|v| BorrowedRecord {
            topic: &t,
            value: Some(v.as_bytes()),
            ..BorrowedRecord::default()
        })
        .collect();
    let mds = p.send_batch(&recs).unwrap();
    let offsets: Vec<u64> = mds.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, (0..100).collect::<Vec<u64>>());
    let seen = Arc::new(Mutex::new(Vec::new()));
    for i in 0..20 {
        let seen = Arc::clone(&seen);
        p.send_async(Record::new(&t).value(format!("a{i}")), move |r| {
            seen.lock().unwrap().push(r.unwrap().offset);
        })
        .unwrap();
    }
    p.flush().unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_unstable();
    assert_eq!(seen, (100..120).collect::<Vec<u64>>());
    p.close().unwrap();
    assert!(matches!(
        p.send(Record::new(&t).value("late")),
        Err(Error::Closed(_))
    ));
}

#[test]
fn bad_input_gets_typed_errors() {
    let Some(b) = broker() else { return };
    let t = topic("bad");
    b.create_topic(&t, TopicConfig::new(2)).unwrap();
    let p = b.producer(ProducerConfig::default()).unwrap();
    assert!(matches!(
        p.send(Record::new(&t).partition(2).value("x")),
        Err(Error::UnknownPartition { count: 2, .. })
    ));
    assert!(matches!(
        p.send(Record::new("no/such").value("x")),
        Err(Error::InvalidTopicName { .. })
    ));
    // A named producer needs Kafka's transactions, which tansu lacks.
    let named = b.producer(ProducerConfig {
        name: Some("named".into()),
        ..ProducerConfig::default()
    });
    assert!(matches!(named, Err(Error::InvalidConfig(_))), "{named:?}");
    let mut c = b.consumer(ConsumerConfig::default()).unwrap();
    assert!(matches!(
        c.assign(&[(&t, 9)]),
        Err(Error::UnknownPartition { .. })
    ));
    assert!(matches!(c.subscribe(&[&t]), Err(Error::InvalidArgument(_))));
    assert!(matches!(c.commit(), Err(Error::InvalidArgument(_))));
    c.close();
    assert!(matches!(c.poll(Duration::ZERO), Err(Error::Closed(_))));
}

#[test]
fn a_group_resumes_from_its_commits() {
    let Some(b) = broker() else { return };
    let t = topic("group");
    let g = topic("g");
    b.create_topic(&t, TopicConfig::new(2)).unwrap();
    let p = b.producer(ProducerConfig::default()).unwrap();
    for i in 0..40u32 {
        p.send(Record::new(&t).partition(i % 2).value(format!("{i}")))
            .unwrap();
    }
    let config = || ConsumerConfig {
        enable_auto_commit: false,
        ..ConsumerConfig::group(g.clone())
    };
    let mut c = b.consumer(config()).unwrap();
    c.subscribe(&[&t]).unwrap();
    let first = poll_n(&mut c, 40);
    assert_eq!(first.len(), 40);
    // Commit half of partition 0 (with metadata, which tansu 0.6 does
    // not keep), all of partition 1.
    c.commit_offsets(&[(&t, 0, 10, "half"), (&t, 1, 20, "")])
        .unwrap();
    assert_eq!(c.committed(&t, 0).unwrap().unwrap().offset, 10);
    assert_eq!(c.committed(&t, 1).unwrap().unwrap().offset, 20);
    c.close();
    drop(c);

    let mut c = b.consumer(config()).unwrap();
    c.subscribe(&[&t]).unwrap();
    let rest = poll_n(&mut c, 10);
    let got: HashSet<(u32, u64)> = rest.iter().map(|m| (m.partition(), m.offset())).collect();
    let want: HashSet<(u32, u64)> = (10..20).map(|o| (0, o)).collect();
    assert_eq!(got, want, "the group resumes where it committed");
    c.commit().unwrap();
    assert_eq!(c.committed(&t, 0).unwrap().unwrap().offset, 20);
}
