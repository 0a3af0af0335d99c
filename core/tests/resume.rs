//! Resuming a named producer after a crash with `next_sequence()`: with
//! asynchronous sends over several partitions, a higher sequence may be
//! written to one partition while lower ones queued for another are lost,
//! so `last_sequence() + 1` skips them; `next_sequence()` is the first one
//! missing, and re-sending from it loses nothing and doubles nothing.
//!
//! The kill test's child is this test binary itself, re-run with `--exact
//! resume_child` and `MQLITE_RESUME_CHILD_DIR` set.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{cfg, read_partition};
use mqlite::{Broker, ProducerConfig, Record, TopicConfig};

const CHILD_DIR: &str = "MQLITE_RESUME_CHILD_DIR";
const TOPIC: &str = "t";
const PARTITIONS: u32 = 4;
const NAME: &str = "ingest";
/// Sequences the application sends: `0..TOTAL`.
const TOTAL: i64 = 30_000;

fn open(dir: &Path) -> Broker {
    let mq = Broker::open(dir, cfg()).unwrap();
    if mq.topic(TOPIC).is_err() {
        mq.create_topic(
            TOPIC,
            TopicConfig::new(PARTITIONS).segment_bytes(256 * 1024),
        )
        .unwrap();
    }
    mq
}

/// The application's record `seq`: always to the same partition, with a
/// size depending on it so that the partitions' batches fill (and are
/// written) at different moments.
fn record(seq: i64) -> Record {
    let partition = (seq % i64::from(PARTITIONS)) as u32;
    let mut value = seq.to_le_bytes().to_vec();
    value.resize(8 + 40 * partition as usize, b'x');
    Record::new(TOPIC)
        .partition(partition)
        .value(value)
        .sequence(seq)
}

/// Every sequence in the topic, with the partition holding it.
fn on_disk(mq: &Broker) -> Vec<(i64, u32)> {
    let mut out = Vec::new();
    for p in 0..PARTITIONS {
        for m in read_partition(mq, TOPIC, p).unwrap() {
            let seq = i64::from_le_bytes(m.value.unwrap()[..8].try_into().unwrap());
            out.push((seq, p));
        }
    }
    out.sort_unstable();
    out
}

/// The first sequence missing from `seqs` (sorted).
fn first_missing(seqs: &[(i64, u32)]) -> i64 {
    let mut next = 0;
    for &(s, _) in seqs {
        if s == next {
            next += 1;
        } else if s > next {
            break;
        }
    }
    next
}

/// The child side: resumes from `next_sequence()` and sends the rest
/// asynchronously; a no-op in a normal test run.
#[test]
fn resume_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let mq = open(Path::new(&dir));
    let p = mq
        .producer(
            ProducerConfig::default()
                .name(NAME)
                .linger_ms(2)
                .batch_size(4096),
        )
        .unwrap();
    let start = p.next_sequence().unwrap();
    println!("start {start}");
    for seq in start..TOTAL {
        p.send_async(record(seq), |r| {
            r.unwrap();
        })
        .unwrap();
    }
    p.flush().unwrap();
    println!("done");
}

#[test]
fn resuming_from_next_sequence_after_kill_9_loses_and_doubles_nothing() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    println!("seed {seed}");
    let mut rng = seed | 1;
    let mut next_rand = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let tmp = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut old_recipe_would_lose = 0;
    let mut finished = false;
    for cycle in 0..12 {
        let kill = cycle < 11;
        let mut child = Command::new(&exe)
            .args(["--exact", "resume_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Wait until the child resumed, then let it send for a while.
        loop {
            let Some(line) = lines.next() else {
                let out = child.wait_with_output().unwrap();
                panic!("cycle {cycle}: the child stopped: {out:?}");
            };
            let line = line.unwrap();
            if line.contains("start ") {
                break;
            }
        }
        if kill {
            std::thread::sleep(Duration::from_millis(next_rand(40)));
            child.kill().unwrap();
        }
        let status = child.wait().unwrap();
        let rest: Vec<String> = lines.map_while(std::result::Result::ok).collect();
        if !kill {
            assert!(status.success(), "the last run completes");
            assert!(rest.iter().any(|l| l.contains("done")));
        }
        finished |= rest.iter().any(|l| l.contains("done"));

        // What is on disk: no sequence twice, each in its partition.
        let mq = open(tmp.path());
        let seqs = on_disk(&mq);
        for w in seqs.windows(2) {
            assert_ne!(w[0].0, w[1].0, "cycle {cycle}: sequence {} twice", w[0].0);
        }
        for &(s, p) in &seqs {
            assert_eq!(i64::from(p), s % i64::from(PARTITIONS));
        }
        let p = mq.producer(ProducerConfig::default().name(NAME)).unwrap();
        let next = p.next_sequence().unwrap();
        assert_eq!(next, first_missing(&seqs), "cycle {cycle}");
        let last = p.last_sequence().unwrap().unwrap_or(-1);
        if last + 1 > next {
            old_recipe_would_lose += 1;
        }
        drop(p);
        mq.close().unwrap();
    }
    assert!(finished);
    let mq = open(tmp.path());
    let seqs: Vec<i64> = on_disk(&mq).into_iter().map(|(s, _)| s).collect();
    assert_eq!(seqs, (0..TOTAL).collect::<Vec<_>>(), "every sequence once");
    println!(
        "cycles where last_sequence() + 1 would have skipped records: {old_recipe_would_lose}"
    );
}

/// Sends `seqs` in this order with blocking sends: the state a crash leaves
/// when some sends queued for one partition were lost.
fn crafted(dir: &Path, seqs: &[i64]) {
    let mq = open(dir);
    let p = mq.producer(ProducerConfig::default().name(NAME)).unwrap();
    for &s in seqs {
        assert!(!p.send(record(s)).unwrap().duplicate);
    }
    drop(p);
    mq.close().unwrap();
}

/// Re-sends `start..20` with the same sequences and partitions.
fn resend_from(dir: &Path, start: i64) -> Vec<i64> {
    let mq = open(dir);
    let p = mq.producer(ProducerConfig::default().name(NAME)).unwrap();
    for s in start..20 {
        p.send(record(s)).unwrap();
    }
    drop(p);
    let seqs = on_disk(&mq).into_iter().map(|(s, _)| s).collect();
    mq.close().unwrap();
    seqs
}

#[test]
fn last_sequence_plus_one_loses_what_next_sequence_keeps() {
    // 0..=6 sent asynchronously, 3 (for partition 3) lost in the crash
    // while 4, 5 and 6 (partitions 0, 1, 2) were written.
    let written = [0, 1, 2, 4, 5, 6];
    let old = tempfile::tempdir().unwrap();
    crafted(old.path(), &written);
    let new = tempfile::tempdir().unwrap();
    crafted(new.path(), &written);

    let mq = open(old.path());
    let p = mq.producer(ProducerConfig::default().name(NAME)).unwrap();
    let last = p.last_sequence().unwrap().unwrap();
    assert_eq!((last, p.next_sequence().unwrap()), (6, 3));
    drop(p);
    mq.close().unwrap();

    let with_last = resend_from(old.path(), last + 1);
    assert!(!with_last.contains(&3), "the old recipe loses sequence 3");
    assert_eq!(with_last.len(), 19);

    let mq = open(new.path());
    let p = mq.producer(ProducerConfig::default().name(NAME)).unwrap();
    let next = p.next_sequence().unwrap();
    drop(p);
    mq.close().unwrap();
    assert_eq!(resend_from(new.path(), next), (0..20).collect::<Vec<_>>());
}

#[test]
fn next_sequence_is_the_first_gap_and_survives_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = open(tmp.path());
        let p = mq.producer(ProducerConfig::default().name(NAME)).unwrap();
        assert_eq!(p.next_sequence().unwrap(), 0);
        for s in [0, 1, 2, 3, 5, 6, 9] {
            p.send(record(s)).unwrap();
        }
        // Skipped sequences: the first gap, although 9 was written.
        assert_eq!(p.next_sequence().unwrap(), 4);
        p.send(record(4)).unwrap();
        assert_eq!(p.next_sequence().unwrap(), 7);
        let anonymous = mq.producer(ProducerConfig::default()).unwrap();
        assert_eq!(anonymous.next_sequence().unwrap(), 0);
        let plain = mq
            .producer(ProducerConfig::default().idempotent(false))
            .unwrap();
        assert!(matches!(
            plain.next_sequence(),
            Err(mqlite::Error::InvalidArgument(_))
        ));
        drop((p, anonymous, plain));
        mq.close().unwrap();
    }
    // After a clean close (from the snapshot) and a rebuild from the log
    // alone (snapshot removed), the same answer.
    for remove_snapshots in [false, true] {
        if remove_snapshots {
            for part in 0..PARTITIONS {
                let _ = std::fs::remove_file(
                    tmp.path()
                        .join("topics")
                        .join(TOPIC)
                        .join(part.to_string())
                        .join("producers.snapshot"),
                );
            }
        }
        let mq = open(tmp.path());
        let p = mq.producer(ProducerConfig::default().name(NAME)).unwrap();
        assert_eq!(p.next_sequence().unwrap(), 7);
        drop(p);
        mq.close().unwrap();
    }
    let mq = open(tmp.path());
    mq.close().unwrap();
    let p = {
        let mq = open(tmp.path());
        let p = mq.producer(ProducerConfig::default().name(NAME)).unwrap();
        mq.close().unwrap();
        p
    };
    assert!(matches!(p.next_sequence(), Err(mqlite::Error::Closed(_))));
}
