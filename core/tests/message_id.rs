//! The unique id of a message (`MessageId`): on every message and on what
//! a send returns, a string that round-trips, and a position to seek to.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use mqlite::{Broker, ConsumerConfig, Error, MessageId, ProducerConfig, Record, TopicConfig};

#[test]
fn every_message_has_an_id_that_round_trips_and_can_be_sought() {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), common::cfg()).unwrap();
    mq.create_topic("orders.eu-1_x", TopicConfig::new(3))
        .unwrap();
    mq.create_topic("other", TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let mut sent = Vec::new();
    for i in 0..9u8 {
        let md = p
            .send(
                Record::new("orders.eu-1_x")
                    .partition(u32::from(i % 3))
                    .value(vec![i]),
            )
            .unwrap();
        let id = md.id().unwrap();
        assert_eq!(id, MessageId::new("orders.eu-1_x", md.partition, md.offset));
        sent.push((id, i));
    }
    assert_eq!(sent[4].0.to_string(), "orders.eu-1_x:1:1");
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[
        ("orders.eu-1_x", 0),
        ("orders.eu-1_x", 1),
        ("orders.eu-1_x", 2),
    ])
    .unwrap();
    let mut got = Vec::new();
    while got.len() < 9 {
        for m in c.poll(Duration::from_millis(200)).unwrap() {
            let id = m.id();
            assert_eq!(id, m.as_message_ref().id());
            let text = id.to_string();
            assert_eq!(text.parse::<MessageId>().unwrap(), id);
            got.push((id, m.value().unwrap()[0]));
        }
    }
    got.sort();
    let mut want = sent.clone();
    want.sort();
    assert_eq!(got, want);
    // Seeking to an id reads that message next.
    let (target, value) = &sent[7];
    c.seek_to_id(&target.to_string().parse().unwrap()).unwrap();
    let m = loop {
        let ms = c.poll(Duration::from_millis(200)).unwrap();
        if let Some(m) = ms.into_iter().next() {
            break m;
        }
    };
    assert_eq!(&m.id(), target);
    assert_eq!(m.value().unwrap()[0], *value);
    // A partition this consumer does not have: the error `seek` gives.
    let unassigned = MessageId::new("other", 0, 0);
    let by_id = c.seek_to_id(&unassigned).unwrap_err();
    let by_seek = c.seek("other", 0, 0).unwrap_err();
    assert!(matches!(by_id, Error::InvalidArgument(_)));
    assert_eq!(by_id.to_string(), by_seek.to_string());
    // A duplicate's metadata names the original; an unknown offset has no id.
    let named = mq.producer(ProducerConfig::default().name("n")).unwrap();
    let r = Record::new("other")
        .partition(0)
        .value(b"d".to_vec())
        .sequence(0);
    let first = named.send(r.clone()).unwrap();
    let dup = named.send(r).unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.id(), first.id());
    let mut unknown = first.clone();
    unknown.offset = mqlite::RecordMetadata::UNKNOWN_OFFSET;
    assert_eq!(unknown.id(), None);
}

#[test]
fn malformed_ids_are_refused() {
    for bad in [
        "", "t", "t:0", "t:0:0:0", "t:x:0", "t:0:-1", "t t:0:0", "t:00:1",
    ] {
        assert!(
            matches!(bad.parse::<MessageId>(), Err(Error::InvalidArgument(_))),
            "{bad:?}"
        );
    }
    let id = MessageId::new("t", 7, 42);
    assert!(id.to_string().len() <= mqlite::MAX_MESSAGE_ID_LEN);
}
