//! `send_batch` of records spread by key over many partitions, and over
//! topics that alternate within one call: every record lands in its key's
//! partition, in input order per partition, and is reported at its own
//! index with the offset it was written at; application sequences spread
//! over partitions are deduplicated when sent again.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::Duration;

use mqlite::{
    partition_for_key, BorrowedRecord, Broker, Config, ConsumerConfig, ProducerConfig, TopicConfig,
};

/// A record as read back: offset, key, value.
type Read = (u64, Vec<u8>, Vec<u8>);

fn read_partition(mq: &Broker, topic: &str, p: u32) -> Vec<Read> {
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[(topic, p)]).unwrap();
    let mut out = Vec::new();
    loop {
        let msgs = c.poll(Duration::from_millis(20)).unwrap();
        if msgs.is_empty() {
            return out;
        }
        out.extend(msgs.iter().map(|m| {
            (
                m.offset(),
                m.key().unwrap().to_vec(),
                m.value().unwrap().to_vec(),
            )
        }));
    }
}

#[test]
fn keyed_batches_over_many_partitions_and_topics_keep_their_order() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), Config::default()).unwrap();
    mq.create_topic("a", TopicConfig::new(1000)).unwrap();
    mq.create_topic("b", TopicConfig::new(7)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    // Keys repeat (several records per key and partition), and the topic
    // changes in runs: a, b, a.
    let keys: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| (i % 1300).to_le_bytes().to_vec())
        .collect();
    let values: Vec<Vec<u8>> = (0..3000u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let topic_of = |i: usize| if (1000..1500).contains(&i) { "b" } else { "a" };
    let mut sent: HashMap<(String, u32), Vec<Read>> = HashMap::new();
    for call in 0..3 {
        let range = call * 1000..(call + 1) * 1000;
        let recs: Vec<BorrowedRecord<'_>> = range
            .clone()
            .map(|i| BorrowedRecord {
                topic: topic_of(i),
                partition: None,
                key: Some(&keys[i]),
                value: Some(&values[i]),
                headers: &[],
                timestamp: None,
                sequence: None,
            })
            .collect();
        let mds = p.send_batch(&recs).unwrap();
        assert_eq!(mds.len(), recs.len());
        for (i, md) in range.zip(&mds) {
            let topic = topic_of(i);
            let count = if topic == "a" { 1000 } else { 7 };
            assert_eq!(&*md.topic, topic, "record {i}");
            assert_eq!(
                md.partition,
                partition_for_key(&keys[i], count),
                "record {i}"
            );
            sent.entry((topic.to_owned(), md.partition))
                .or_default()
                .push((md.offset, keys[i].clone(), values[i].clone()));
        }
    }
    for ((topic, part), mut want) in sent {
        // Offsets follow input order within each partition.
        let offsets: Vec<u64> = want.iter().map(|w| w.0).collect();
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "{topic}/{part}: {offsets:?}"
        );
        want.sort_by_key(|w| w.0);
        assert_eq!(read_partition(&mq, &topic, part), want, "{topic}/{part}");
    }
}

#[test]
fn sequenced_records_over_many_partitions_are_deduplicated() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), Config::default()).unwrap();
    mq.create_topic("t", TopicConfig::new(200)).unwrap();
    let p = mq
        .producer(ProducerConfig::default().name("spread"))
        .unwrap();
    let values: Vec<Vec<u8>> = (0..1000u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let recs: Vec<BorrowedRecord<'_>> = (0..1000)
        .map(|i| BorrowedRecord {
            topic: "t",
            partition: None,
            key: None,
            value: Some(&values[i]),
            headers: &[],
            timestamp: None,
            sequence: Some(i as i64),
        })
        .collect();
    let first = p.send_batch(&recs).unwrap();
    assert!(first.iter().all(|m| !m.duplicate));
    for (i, m) in first.iter().enumerate() {
        assert_eq!(
            m.partition,
            (i % 200) as u32,
            "sequence {i} goes by sequence"
        );
    }
    // Sent again, with 200 new ones: the old ones are duplicates at their
    // original offsets.
    let more: Vec<Vec<u8>> = (1000..1200u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let mut again = recs.clone();
    again.extend((0..200).map(|k| BorrowedRecord {
        value: Some(&more[k]),
        sequence: Some(1000 + k as i64),
        ..recs[0]
    }));
    let second = p.send_batch(&again).unwrap();
    for (i, m) in second.iter().enumerate() {
        if i < 1000 {
            assert!(m.duplicate, "sequence {i}");
            assert_eq!(
                (m.partition, m.offset),
                (first[i].partition, first[i].offset)
            );
        } else {
            assert!(!m.duplicate, "sequence {i}");
        }
    }
    assert_eq!(p.last_sequence().unwrap(), Some(1199));
    for part in 0..200u32 {
        let got = read_partition_values(&mq, part);
        let want: Vec<Vec<u8>> = (0..1200u32)
            .filter(|i| i % 200 == part)
            .map(|i| i.to_le_bytes().to_vec())
            .collect();
        assert_eq!(got, want, "partition {part}");
    }
}

fn read_partition_values(mq: &Broker, p: u32) -> Vec<Vec<u8>> {
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[("t", p)]).unwrap();
    let mut out = Vec::new();
    loop {
        let msgs = c.poll(Duration::from_millis(20)).unwrap();
        if msgs.is_empty() {
            return out;
        }
        out.extend(msgs.iter().map(|m| m.value().unwrap().to_vec()));
    }
}

/// Records of two topics that take turns within one call still share one
/// batch per partition.
#[test]
fn alternating_topics_share_one_batch_per_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), Config::default()).unwrap();
    mq.create_topic("a", TopicConfig::new(4)).unwrap();
    mq.create_topic("b", TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let values: Vec<Vec<u8>> = (0..40u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let recs: Vec<BorrowedRecord<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| BorrowedRecord {
            topic: if i % 10 == 9 { "b" } else { "a" },
            partition: (i % 10 != 9).then_some(i as u32 % 4),
            value: Some(v),
            ..Default::default()
        })
        .collect();
    let mds = p.send_batch(&recs).unwrap();
    assert_eq!(p.stats().batches, 5, "{:?}", p.stats());
    // Offsets consecutive per partition, in input order.
    let mut next: HashMap<(String, u32), u64> = HashMap::new();
    for md in &mds {
        let n = next
            .entry((md.topic.to_string(), md.partition))
            .or_default();
        assert_eq!(md.offset, *n);
        *n += 1;
    }
    assert_eq!(next[&("a".to_owned(), 0)], 10);
    assert_eq!(next[&("b".to_owned(), 0)], 4);
}
