//! A re-send with `acks=all` that is recognised as a duplicate returns only
//! once its original is durable, even if the original was written with a
//! lower `acks` (it may still be only in the page cache).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::cfg;
use mqlite::faults::{set_sync_hook, SyncKind};
use mqlite::{Acks, Broker, ProducerConfig, Record, TopicConfig};

#[test]
fn a_duplicate_sent_with_acks_all_makes_its_original_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let dir = tmp.path().join("topics").join("t");
    // The highest offset-bearing byte synced in t's log (0: none).
    let synced = Arc::new(AtomicU64::new(0));
    let s = Arc::clone(&synced);
    set_sync_hook(Some(Arc::new(move |path: &Path, kind, before| {
        if !before && path.starts_with(&dir) && path.extension().is_some_and(|e| e == "log") {
            if let SyncKind::Range { end } = kind {
                s.fetch_max(end, Ordering::SeqCst);
            }
        }
        Ok(())
    })));
    let config = ProducerConfig::default().name("n");
    for (seq, how) in ["send", "send_batch", "send_async"].into_iter().enumerate() {
        let seq = seq as i64;
        {
            let p = mq.producer(config.clone().acks(Acks::One)).unwrap();
            p.send(Record::new("t").value("v").sequence(seq)).unwrap();
        }
        let before = synced.load(Ordering::SeqCst);
        let p = mq.producer(config.clone().acks(Acks::All)).unwrap();
        let r = Record::new("t").value("v").sequence(seq);
        let md = match how {
            "send" => p.send(r).unwrap(),
            "send_batch" => p.send_batch(&[r.as_borrowed()]).unwrap().remove(0),
            _ => {
                let (tx, rx) = std::sync::mpsc::channel();
                p.send_async(r, move |res| tx.send(res).unwrap()).unwrap();
                p.flush().unwrap();
                rx.recv().unwrap().unwrap()
            }
        };
        assert!(md.duplicate, "{how}");
        assert!(
            synced.load(Ordering::SeqCst) > before,
            "the duplicate ({how}) was reported before its original was synced"
        );
    }
    set_sync_hook(None);
}
