//! Committing offsets: a consumer committing one partition's offset per
//! call, with `commit_acks=1` (written to the operating system) and
//! `commit_acks=all` (synced, commits made at once sharing a sync), from
//! one thread and from eight.
//!
//! `cargo bench -p mqlite --bench commits`. Runs, scale, filter and the
//! JSON record as in every bench on the shared harness (`harness/mod.rs`).
//!
//! - `commit_acks=1` against `pwrite` of the same number of bytes (a
//!   commit's journal record, 41 bytes for a topic of one letter and no
//!   metadata) to a file, one call each: the cost of the layer over the
//!   system call it makes.
//! - `commit_acks=all`, one thread, against `pwrite` and `fdatasync` per
//!   record; eight threads (each its own consumer of the group, committing
//!   its own partition) against one thread.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

mod harness;
use harness::{filter_matches, scaled, Harness};

use mqlite::{Acks, Broker, ConsumerConfig, ProducerConfig, Record, TopicConfig};

/// Records in each partition: commits cycle through their offsets.
const ROOM: u64 = 64;

/// A journal record's bytes for one partition of topic `t`, no metadata.
const RECORD_LEN: usize = 41;

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mqlite-commits-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Seconds for `n` commits from each of `threads` consumers of one group
/// (consumer `i` commits partition `i`).
fn commits(acks: Acks, threads: u32, n: u64) -> f64 {
    let dir = fresh_dir("c");
    let mq = Broker::open(&dir, harness::exclusive()).unwrap();
    mq.create_topic("t", TopicConfig::new(threads)).unwrap();
    // Offsets to commit (a commit past the log's end is refused).
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..threads {
        for _ in 0..ROOM {
            p.send(Record::new("t").partition(i).value(&b"v"[..]))
                .unwrap();
        }
    }
    p.close().unwrap();
    let consumers: Vec<_> = (0..threads)
        .map(|i| {
            let mut c = mq
                .consumer(
                    ConsumerConfig::group("bench")
                        .enable_auto_commit(false)
                        .commit_acks(acks),
                )
                .unwrap();
            c.assign(&[("t", i)]).unwrap();
            c
        })
        .collect();
    // One commit each first: the journal exists before the clock starts.
    let mut consumers: Vec<_> = consumers
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            c.commit_offsets(&[("t", i as u32, 0, "")]).unwrap();
            c
        })
        .collect();
    let t = Instant::now();
    std::thread::scope(|s| {
        for (i, c) in consumers.iter_mut().enumerate() {
            s.spawn(move || {
                for o in 1..=n {
                    c.commit_offsets(&[("t", i as u32, black_box(o % ROOM), "")])
                        .unwrap();
                }
            });
        }
    });
    let secs = t.elapsed().as_secs_f64();
    drop(consumers);
    mq.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    secs
}

/// Seconds for `n` `pwrite`s of a record's bytes at the end of a file,
/// each followed by an `fdatasync` with `sync`.
fn pwrites(sync: bool, n: u64) -> f64 {
    let dir = fresh_dir("w");
    std::fs::create_dir_all(&dir).unwrap();
    let f = std::fs::File::create(dir.join("f")).unwrap();
    let rec = [5u8; RECORD_LEN];
    let t = Instant::now();
    for i in 0..n {
        f.write_all_at(&rec, i * RECORD_LEN as u64).unwrap();
        if sync {
            f.sync_data().unwrap();
        }
    }
    let secs = t.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_dir_all(&dir);
    secs
}

fn one_run(h: &mut Harness) {
    let prefix = "commit of one partition, commit_acks=1";
    if filter_matches(prefix) {
        let n = scaled(200_000);
        let group = "commit_acks=1 against pwrite of its record";
        let base = "pwrite of 41 B";
        h.record(base, group, n, RECORD_LEN, pwrites(false, n), None);
        let secs = commits(Acks::One, 1, n);
        h.record(prefix, group, n, RECORD_LEN, secs, Some(base));
    }
    let prefix = "commit of one partition, commit_acks=all";
    if filter_matches(prefix) {
        let n = scaled(2_000);
        let group = "commit_acks=all against pwrite and fdatasync";
        let base = "pwrite of 41 B and fdatasync";
        h.record(base, group, n, RECORD_LEN, pwrites(true, n), None);
        let one = format!("{prefix}, 1 thread");
        h.record(
            &one,
            group,
            n,
            RECORD_LEN,
            commits(Acks::All, 1, n),
            Some(base),
        );
        let group = "commit_acks=all, 8 threads against 1";
        let eight = format!("{prefix}, 8 threads");
        let secs = commits(Acks::All, 8, n);
        h.record(&eight, group, 8 * n, RECORD_LEN, secs, Some(&one));
    }
}

fn main() {
    harness::run_bench("commits", &[], one_run);
}
