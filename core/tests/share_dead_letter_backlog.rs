//! Records waiting to be dead-lettered while the dead-letter topic cannot
//! be written do not hold back the other messages: a poll still delivers
//! what was released, whatever `max_poll_records`, and the waiting dead
//! letters go once the topic can be written again.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cfg;
use mqlite::faults::set_sync_hook;
use mqlite::{Broker, ProducerConfig, Record, ShareConsumerConfig, TopicConfig};

#[test]
fn released_messages_are_delivered_while_dead_letters_wait() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    mq.create_topic("dlq", TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..4 {
        p.send(Record::new("t").value(format!("poison {i}")))
            .unwrap();
    }
    p.send(Record::new("t").value("fine")).unwrap();
    let config = ShareConsumerConfig::group("g")
        .dead_letter_topic("dlq")
        .max_poll_records(1);
    let mut sc = mq.share_consumer(config).unwrap();
    sc.subscribe(&["t"]).unwrap();
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while got.len() < 5 && Instant::now() < end {
        got.extend(sc.poll(Duration::from_millis(50)).unwrap());
    }
    assert_eq!(got.len(), 5);
    let dlq_dir = tmp.path().join("topics").join("dlq");
    set_sync_hook(Some(Arc::new(move |path: &Path, _, before| {
        if before && path.starts_with(&dlq_dir) {
            Err(std::io::Error::other("injected: the disk failed"))
        } else {
            Ok(())
        }
    })));
    for m in &got[..4] {
        assert!(m.reject("cannot parse").is_err());
    }
    // Four dead letters wait; the fifth message, released, comes back.
    got[4].release(Duration::ZERO).unwrap();
    let mut again = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while again.is_empty() && Instant::now() < end {
        again = sc.poll(Duration::from_millis(50)).unwrap();
    }
    assert_eq!(again.len(), 1, "held back by the waiting dead letters");
    assert_eq!(again[0].value(), Some(&b"fine"[..]));
    assert_eq!(again[0].delivery_count(), 2);
    again[0].ack().unwrap();
    set_sync_hook(None);
    drop(sc);
    drop(mq);
    // Reopened (the poisoned dead-letter partition with it): all four go.
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut sc = mq
        .share_consumer(ShareConsumerConfig::group("g").dead_letter_topic("dlq"))
        .unwrap();
    sc.subscribe(&["t"]).unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while sc.stats().dead_lettered < 4 && Instant::now() < end {
        assert!(sc.poll(Duration::from_millis(50)).unwrap().is_empty());
    }
    assert_eq!(sc.stats().dead_lettered, 4);
    assert_eq!(mq.topic("dlq").unwrap().partitions[0].end_offset, 4);
}
