//! A dead letter that cannot be written (the dead-letter topic's sync fails,
//! poisoning its partition): the rejected message is neither lost nor
//! delivered again; after a reopen it reaches the dead-letter topic, once.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cfg;
use mqlite::faults::set_sync_hook;
use mqlite::{
    Broker, ConsumerConfig, Error, ProducerConfig, Record, ShareConsumerConfig, TopicConfig,
};

fn dead_letters(mq: &Broker) -> Vec<Vec<u8>> {
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.subscribe(&["dlq"]).unwrap();
    let mut out = Vec::new();
    loop {
        let got = c.poll(Duration::from_millis(300)).unwrap();
        if got.is_empty() {
            return out;
        }
        out.extend(got.iter().map(|m| m.value().unwrap().to_vec()));
    }
}

#[test]
fn a_dead_letter_that_fails_is_kept_and_sent_once_after_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let config = ShareConsumerConfig::group("g").dead_letter_topic("dlq");
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", TopicConfig::new(1)).unwrap();
        mq.create_topic("dlq", TopicConfig::new(1)).unwrap();
        let p = mq.producer(ProducerConfig::default()).unwrap();
        p.send(Record::new("t").value("poison")).unwrap();
        p.send(Record::new("t").value("fine")).unwrap();
        let mut sc = mq.share_consumer(config.clone()).unwrap();
        sc.subscribe(&["t"]).unwrap();
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(5);
        while got.len() < 2 && Instant::now() < end {
            got.extend(sc.poll(Duration::from_millis(50)).unwrap());
        }
        assert_eq!(got.len(), 2);
        // Every sync of the dead-letter topic's files fails from now on.
        let dlq_dir = tmp.path().join("topics").join("dlq");
        set_sync_hook(Some(Arc::new(move |path: &Path, _, before| {
            if before && path.starts_with(&dlq_dir) {
                Err(std::io::Error::other("injected: the disk failed"))
            } else {
                Ok(())
            }
        })));
        let err = got[0].reject("cannot parse").unwrap_err();
        assert!(!matches!(err, Error::InvalidRecordState(_)), "{err}");
        // Being dead-lettered: not settled again, not delivered again.
        assert!(matches!(got[0].ack(), Err(Error::InvalidRecordState(_))));
        got[1].ack().unwrap();
        assert!(sc.poll(Duration::from_millis(300)).unwrap().is_empty());
        set_sync_hook(None);
    }
    // Reopened (the poisoned partition with it): the dead letter is sent.
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut sc = mq.share_consumer(config).unwrap();
    sc.subscribe(&["t"]).unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while sc.stats().dead_lettered == 0 && Instant::now() < end {
        assert!(sc.poll(Duration::from_millis(50)).unwrap().is_empty());
    }
    assert_eq!(sc.stats().dead_lettered, 1);
    assert_eq!(dead_letters(&mq), vec![b"poison".to_vec()]);
    // And never again.
    drop(sc);
    drop(mq);
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut sc = mq
        .share_consumer(ShareConsumerConfig::group("g").dead_letter_topic("dlq"))
        .unwrap();
    sc.subscribe(&["t"]).unwrap();
    assert!(sc.poll(Duration::from_millis(300)).unwrap().is_empty());
    assert_eq!(dead_letters(&mq), vec![b"poison".to_vec()]);
}
