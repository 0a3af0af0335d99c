//! Idempotent and named producers: duplicates are recognised and never
//! written twice, gaps are refused when asked, the state survives restarts
//! and `kill -9`, and a newer producer of a name fences the older.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{cfg, read_partition};
use mqlite::{Acks, BorrowedRecord, Broker, Error, ProducerConfig, Record, TopicConfig};

fn open(dir: &Path) -> Broker {
    Broker::open(dir, cfg()).unwrap()
}

fn named(mq: &Broker, name: &str) -> mqlite::Producer {
    mq.producer(ProducerConfig::default().name(name)).unwrap()
}

fn rec(seq: i64) -> Record {
    Record::new("t")
        .key(format!("k{}", seq % 13))
        .value(seq.to_le_bytes().to_vec())
        .sequence(seq)
}

/// Every sequence number in the topic, each partition read in order.
fn sequences(mq: &Broker, partitions: u32) -> Vec<i64> {
    let mut out = Vec::new();
    for p in 0..partitions {
        for m in read_partition(mq, "t", p).unwrap() {
            out.push(i64::from_le_bytes(
                m.value.unwrap()[..8].try_into().unwrap(),
            ));
        }
    }
    out.sort_unstable();
    out
}

#[test]
fn a_resend_returns_the_original_offsets_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    mq.create_topic("t", TopicConfig::new(3)).unwrap();
    let p = mq
        .producer(ProducerConfig::default().name("ingest-1").dedup_window(30))
        .unwrap();
    let first: Vec<_> = (0..20).map(|s| p.send(rec(s)).unwrap()).collect();
    assert!(first.iter().all(|m| !m.duplicate));
    // A lost acknowledgement: the application sends the same records again.
    for s in [19, 17, 3] {
        let again = p.send(rec(s)).unwrap();
        assert!(again.duplicate);
        assert_eq!(
            (again.partition, again.offset),
            (first[s as usize].partition, first[s as usize].offset)
        );
    }
    // In a batch: the already-written ones are duplicates, the rest written.
    let recs: Vec<Record> = (15..25).map(rec).collect();
    let borrowed: Vec<BorrowedRecord<'_>> = recs.iter().map(Record::as_borrowed).collect();
    let mds = p.send_batch(&borrowed).unwrap();
    for (md, s) in mds.iter().zip(15..25) {
        assert_eq!(md.duplicate, s < 20, "sequence {s}");
        if s < 20 {
            assert_eq!(md.offset, first[s as usize].offset);
        }
    }
    // Asynchronously too.
    let (tx, rx) = std::sync::mpsc::channel();
    p.send_async(rec(5), move |r| tx.send(r.unwrap()).unwrap())
        .unwrap();
    p.flush().unwrap();
    let md = rx.recv().unwrap();
    assert!(md.duplicate);
    assert_eq!(md.offset, first[5].offset);
    assert_eq!(sequences(&mq, 3), (0..25).collect::<Vec<_>>());
    let st = p.stats();
    assert_eq!((st.records, st.duplicates), (25, 9));
    assert_eq!(p.last_sequence().unwrap(), Some(24));

    // Older than the dedup window (default 5 batches per partition): still
    // a duplicate, the original offset no longer known.
    let small = mq
        .producer(ProducerConfig::default().name("ingest-2"))
        .unwrap();
    for s in 0..10 {
        small.send(rec(s).key("one-key")).unwrap();
    }
    let old = small.send(rec(0).key("one-key")).unwrap();
    assert!(old.duplicate);
    assert_eq!(old.known_offset(), None);
    let recent = small.send(rec(9).key("one-key")).unwrap();
    assert!(recent.duplicate);
    assert!(recent.known_offset().is_some());
}

#[test]
fn gaps_are_refused_with_strict_sequences() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let p = mq
        .producer(
            ProducerConfig::default()
                .name("strict")
                .strict_sequences(true),
        )
        .unwrap();
    p.send(rec(0)).unwrap();
    p.send(rec(1)).unwrap();
    match p.send(rec(5)) {
        Err(
            e @ Error::OutOfOrderSequence {
                expected: 2,
                received: 5,
                ..
            },
        ) => {
            assert_eq!(e.code(), 402);
            assert!(e.to_string().contains("expected 2, received 5"), "{e}");
        }
        other => panic!("expected a gap error, got {other:?}"),
    }
    assert_eq!(sequences(&mq, 1), [0, 1], "nothing written");
    assert!(
        p.send(rec(1)).unwrap().duplicate,
        "a duplicate is not a gap"
    );
    p.send(rec(2)).unwrap();
    // Without strictness (the default) gaps are fine, as with Pulsar.
    let loose = named(&mq, "loose");
    loose.send(rec(0)).unwrap();
    loose.send(rec(10)).unwrap();
    assert!(loose.send(rec(7)).unwrap().duplicate);
}

#[test]
fn dedup_state_survives_restarts_rolls_and_a_lost_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = open(tmp.path());
        // Small segments: many rolls, so the snapshots come into play.
        mq.create_topic("t", TopicConfig::new(2).segment_bytes(4096))
            .unwrap();
        let p = named(&mq, "ingest-1");
        assert_eq!(p.last_sequence().unwrap(), None);
        for s in 0..500 {
            p.send(rec(s)).unwrap();
        }
        // An anonymous producer's records do not confuse anything.
        let anon = mq.producer(ProducerConfig::default()).unwrap();
        anon.send(Record::new("t").value(i64::MAX.to_le_bytes().to_vec()))
            .unwrap();
    }
    for round in 0..3 {
        if round == 2 {
            // Without snapshots, the state is rebuilt from batch headers.
            for p in 0..2 {
                let _ = std::fs::remove_file(
                    tmp.path().join(format!("topics/t/{p}/producers.snapshot")),
                );
            }
        }
        let mq = open(tmp.path());
        let p = named(&mq, "ingest-1");
        assert_eq!(p.epoch(), round + 1);
        assert_eq!(p.last_sequence().unwrap(), Some(499), "round {round}");
        for s in 400..500 {
            let md = p.send(rec(s)).unwrap();
            assert!(md.duplicate, "round {round}: {s} written twice");
        }
        let mut all = sequences(&mq, 2);
        assert_eq!(all.pop(), Some(i64::MAX));
        assert_eq!(all, (0..500).collect::<Vec<_>>());
    }
}

#[test]
fn a_newer_producer_fences_the_older() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let old = named(&mq, "ingest-1");
    old.send(rec(0)).unwrap();
    let new = named(&mq, "ingest-1");
    assert_eq!(new.producer_id(), old.producer_id());
    assert_eq!((old.epoch(), new.epoch()), (0, 1));
    for res in [
        old.send(rec(1)).map(drop),
        old.send_async(rec(1), |_| {}),
        old.send_batch(&[rec(1).as_borrowed()]).map(drop),
    ] {
        match res {
            Err(e @ Error::ProducerFenced { .. }) => assert_eq!(e.code(), 403),
            other => panic!("expected ProducerFenced, got {other:?}"),
        }
    }
    assert_eq!(sequences(&mq, 1), [0], "the fenced producer wrote nothing");
    new.send(rec(1)).unwrap();
    assert_eq!(sequences(&mq, 1), [0, 1]);
    // Another name is another producer.
    let other = named(&mq, "ingest-2");
    assert_ne!(other.producer_id(), new.producer_id());
    other.send(rec(0)).unwrap();
}

#[test]
fn async_named_sends_across_partitions_dedup_per_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    mq.create_topic("t", TopicConfig::new(4)).unwrap();
    let p = mq
        .producer(
            ProducerConfig::default()
                .name("a")
                .linger_ms(5)
                .acks(Acks::All),
        )
        .unwrap();
    for round in 0..2 {
        for s in 0..300i64 {
            // Key-less: the partition follows the sequence, so a re-send
            // lands where the original did.
            let r = Record::new("t").value(s.to_le_bytes().to_vec()).sequence(s);
            p.send_async(r, move |res| {
                let md = res.unwrap();
                assert_eq!(md.duplicate, round == 1, "sequence {s}");
            })
            .unwrap();
        }
        p.flush().unwrap();
    }
    assert_eq!(sequences(&mq, 4), (0..300).collect::<Vec<_>>());
}

// ------------------------------------------------------------ kill -9

const CHILD_DIR: &str = "MQLITE_IDEM_CHILD_DIR";
const CHILD_FROM: &str = "MQLITE_IDEM_CHILD_FROM";
const TOTAL: i64 = 3000;

/// The child: a named producer sending sequences from `FROM`, printing each
/// acknowledged one, until killed.
#[test]
fn resume_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let from: i64 = std::env::var(CHILD_FROM).unwrap().parse().unwrap();
    let mq = Broker::open(&dir, cfg()).unwrap();
    let p = named(&mq, "resumer");
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    for s in from..TOTAL {
        let md = p.send(rec(s)).unwrap();
        writeln!(out, "ACK {s} {}", md.duplicate).unwrap();
        out.flush().unwrap();
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// A named producer killed with `-9` resumes from `last_sequence()`,
/// re-sending an overlapping range: nothing lost, nothing twice.
#[test]
fn named_producer_resumes_after_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = open(tmp.path());
        mq.create_topic("t", TopicConfig::new(3).segment_bytes(16 * 1024))
            .unwrap();
    }
    let exe = std::env::current_exe().unwrap();
    let mut acked_max = -1i64;
    for cycle in 0..8u64 {
        // Resume a little before the last persisted sequence: the overlap
        // must come back as duplicates.
        let from = {
            let mq = open(tmp.path());
            let last = named(&mq, "resumer").last_sequence().unwrap();
            assert!(
                last.unwrap_or(-1) >= acked_max,
                "an acknowledged record was lost"
            );
            (last.unwrap_or(-1) - 20).max(0)
        };
        if from >= TOTAL - 1 {
            break;
        }
        let mut child = Command::new(&exe)
            .args(["--exact", "resume_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, tmp.path())
            .env(CHILD_FROM, from.to_string())
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acks = 0;
        let stop_after = 50 + (cycle * 97) % 400;
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("ACK ") {
                let seq: i64 = rest.split(' ').next().unwrap().parse().unwrap();
                acked_max = acked_max.max(seq);
                acks += 1;
                if acks >= stop_after {
                    break;
                }
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    // Finish the job and check: every sequence exactly once.
    let mq = open(tmp.path());
    let p = named(&mq, "resumer");
    let last = p.last_sequence().unwrap().unwrap_or(-1);
    assert!(last >= acked_max);
    for s in (last - 20).max(0)..TOTAL {
        p.send(rec(s)).unwrap();
    }
    assert_eq!(sequences(&mq, 3), (0..TOTAL).collect::<Vec<_>>());
}

/// Records with and without application sequences keep separate sequence
/// spaces: neither is ever taken for a duplicate of the other.
#[test]
fn mixing_sequenced_and_plain_records_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let p = named(&mq, "mixed");
    assert!(!p.send(rec(0)).unwrap().duplicate);
    let plain = p
        .send(Record::new("t").value(100i64.to_le_bytes().to_vec()))
        .unwrap();
    assert!(!plain.duplicate);
    assert!(!p.send(rec(1)).unwrap().duplicate, "1 is new");
    assert!(p.send(rec(1)).unwrap().duplicate);
    assert_eq!(p.last_sequence().unwrap(), Some(1));
    drop(p);
    drop(mq);
    let mq = open(tmp.path());
    let p = named(&mq, "mixed");
    assert_eq!(p.last_sequence().unwrap(), Some(1), "after a restart too");
    p.send(Record::new("t").value(101i64.to_le_bytes().to_vec()))
        .unwrap();
    assert!(p.send(rec(1)).unwrap().duplicate);
    assert!(!p.send(rec(2)).unwrap().duplicate);
    let mut got = sequences(&mq, 1);
    got.retain(|&s| s < 1000);
    assert_eq!(got, [0, 1, 2, 100, 101]);
    // An anonymous producer without sequences has no last sequence.
    let anon = mq.producer(ProducerConfig::default()).unwrap();
    anon.send(Record::new("t").value("x")).unwrap();
    assert_eq!(anon.last_sequence().unwrap(), None);
}
