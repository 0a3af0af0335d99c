//! Transactions against plain sends of the same records, and reading a log
//! of transactions at both isolation levels.
//!
//! `cargo bench -p mqlite --bench transactions`. Runs, scale, filter and
//! the JSON record as in every bench on the shared harness
//! (`harness/mod.rs`).
//!
//! - Commit: transactions of 10 records of 100 B over 2 partitions (5
//!   each), committed one after another, against `send_batch` of the same
//!   10 records (one call, the partition given per record), at `acks=1`
//!   and at `acks=all`. Rates count records; each transaction row's
//!   baseline is the `send_batch` row of the same `acks`, from the same run.
//!   The same transactions in shared mode (one process), against the
//!   exclusive-mode row: what the directory's transaction lock and log
//!   catch-up cost per commit.
//! - Read: `Consumer::poll_batch` of a log written by those transactions
//!   (records and markers), with `isolation_level` read_committed against
//!   read_uncommitted, interleaved.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod harness;
use harness::{filter_matches, scaled, Harness};

use mqlite::{
    Acks, BorrowedRecord, Broker, Config, ConsumerConfig, IsolationLevel, ProducerConfig, Record,
    TopicConfig,
};

const VALUE: [u8; 100] = [7; 100];
const PER_TXN: usize = 10;

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mqlite-txn-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn open(dir: &PathBuf) -> Broker {
    open_in(dir, false)
}

/// Opens `dir` (shared mode with `shared`) with topic `t` of 2 partitions.
fn open_in(dir: &PathBuf, shared: bool) -> Broker {
    let mq = Broker::open(dir, Config::default().shared(shared)).unwrap();
    mq.create_topic("t", TopicConfig::new(2).segment_bytes(256 << 20))
        .unwrap();
    mq
}

/// Seconds for `n` transactions of [`PER_TXN`] records (in shared mode
/// with `shared`).
fn transactions(acks: Acks, n: u64, shared: bool) -> f64 {
    let dir = fresh_dir("tx");
    let mq = open_in(&dir, shared);
    let p = mq
        .producer(
            ProducerConfig::default()
                .transactional_id("bench")
                .acks(acks),
        )
        .unwrap();
    let t = Instant::now();
    for _ in 0..n {
        let tx = p.begin_transaction().unwrap();
        for i in 0..PER_TXN {
            tx.send(Record::new("t").partition((i % 2) as u32).value(VALUE))
                .unwrap();
        }
        black_box(tx.commit().unwrap());
    }
    let secs = t.elapsed().as_secs_f64();
    drop(p);
    mq.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    secs
}

/// Seconds for `n` `send_batch` calls of the same records.
fn batches(acks: Acks, n: u64) -> f64 {
    let dir = fresh_dir("batch");
    let mq = open(&dir);
    let p = mq.producer(ProducerConfig::default().acks(acks)).unwrap();
    let records: Vec<BorrowedRecord<'_>> = (0..PER_TXN)
        .map(|i| BorrowedRecord {
            topic: "t",
            partition: Some((i % 2) as u32),
            value: Some(&VALUE),
            ..BorrowedRecord::default()
        })
        .collect();
    let t = Instant::now();
    for _ in 0..n {
        black_box(p.send_batch(&records).unwrap());
    }
    let secs = t.elapsed().as_secs_f64();
    drop(p);
    mq.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    secs
}

fn commit_rows(h: &mut Harness) {
    for (acks, label, count) in [
        (Acks::One, "acks=1", scaled(50_000)),
        (Acks::All, "acks=all", scaled(2_000)),
    ] {
        let prefix = format!("10 records over 2 partitions, {label}");
        if !filter_matches(&prefix) {
            continue;
        }
        let group = format!("transactions against send_batch, {label}");
        let msgs = count * PER_TXN as u64;
        let base = format!("{prefix}, send_batch");
        h.record(&base, &group, msgs, VALUE.len(), batches(acks, count), None);
        let row = format!("{prefix}, transaction");
        let secs = transactions(acks, count, false);
        h.record(&row, &group, msgs, VALUE.len(), secs, Some(&base));
        let shared = format!("{prefix}, transaction in shared mode");
        let secs = transactions(acks, count, true);
        let group = format!("transactions in shared mode against exclusive mode, {label}");
        h.record(&shared, &group, msgs, VALUE.len(), secs, Some(&row));
    }
}

/// Seconds to read every record of the log in `dir` at `level`.
fn read_all(mq: &Broker, level: IsolationLevel, records: u64) -> f64 {
    let mut c = mq
        .consumer(
            ConsumerConfig::default()
                .isolation_level(level)
                .max_poll_records(1000),
        )
        .unwrap();
    c.assign(&[("t", 0), ("t", 1)]).unwrap();
    let mut got = 0u64;
    let t = Instant::now();
    while got < records {
        for m in &c.poll_batch(Duration::from_millis(100)).unwrap() {
            black_box(m.value());
            got += 1;
        }
    }
    t.elapsed().as_secs_f64()
}

fn read_rows(h: &mut Harness) {
    let prefix = "poll_batch of a log of 10-record transactions";
    if !filter_matches(prefix) {
        return;
    }
    let n = scaled(100_000);
    let dir = fresh_dir("read");
    let mq = open(&dir);
    let p = mq
        .producer(ProducerConfig::default().transactional_id("bench"))
        .unwrap();
    for _ in 0..n {
        let tx = p.begin_transaction().unwrap();
        for i in 0..PER_TXN {
            tx.send(Record::new("t").partition((i % 2) as u32).value(VALUE))
                .unwrap();
        }
        tx.commit().unwrap();
    }
    let records = n * PER_TXN as u64;
    let group = "read_committed against read_uncommitted";
    let base = format!("{prefix}, read_uncommitted");
    let uncommitted = read_all(&mq, IsolationLevel::ReadUncommitted, records);
    h.record(&base, group, records, VALUE.len(), uncommitted, None);
    let committed = read_all(&mq, IsolationLevel::ReadCommitted, records);
    let row = format!("{prefix}, read_committed");
    h.record(&row, group, records, VALUE.len(), committed, Some(&base));
    drop(p);
    mq.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    harness::run_bench("transactions", &[], one_run);
}

/// One run of every selected row.
fn one_run(h: &mut Harness) {
    commit_rows(h);
    read_rows(h);
}
