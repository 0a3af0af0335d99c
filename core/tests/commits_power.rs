//! Committed offsets with `commit_acks=all` under simulated power loss.
//!
//! A child process commits, from three threads (consumers of one group,
//! each committing two partitions at once with the same metadata; two
//! with `commit_acks=all`, one with `commit_acks=1`, whose commits only
//! the others' syncs make durable, so that more is lost), while
//! a sync hook records how far each of the group's files was made durable
//! (the journal by `fdatasync` of its length; a snapshot or a new journal
//! by the sync of its temporary file before the rename). The metadata is
//! large, so the journal is folded into a new snapshot every few hundred
//! commits. The parent kills the child at a random moment and models the
//! power loss on the group's files (`common/power.rs`: pages past the
//! durable end kept, reverted, torn or garbled; a file replaced by a
//! rename during the cycle has nothing older to revert to), then reopens
//! and checks that the reopen succeeds, that each commit is whole (both
//! partitions carry the same commit), that every `commit_acks=all` commit
//! that returned is there or was followed by a later one, and that no
//! thread's commits went back past what the previous cycle found.
//!
//! Cycles: 12 by default, `MQLITE_COMMITS_POWER_CYCLES=N` for more;
//! `MQLITE_COMMITS_POWER_SEED` replays a printed seed.
#![allow(clippy::unwrap_used)]

#[path = "common/power.rs"]
mod power;

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mqlite::{Acks, Broker, Config, ConsumerConfig, TopicConfig};
use power::{child_setup, durable_marks, env_or, power_out, run_and_kill, say_ready, seed, Rng};

const CHILD_DIR: &str = "MQLITE_COMMITS_POWER_DIR";
const CHILD_CYCLE: &str = "MQLITE_COMMITS_POWER_CYCLE";
const MARKS: &str = "sync-marks.txt";
const THREADS: u32 = 3;
/// The thread that commits with `commit_acks=1`.
const QUICK: u32 = 2;
/// Records per partition: commits cycle through their offsets.
const ROOM: u64 = 100;

fn config() -> Config {
    Config::default()
        .prefault(false)
        .retention_check_interval_ms(0)
}

/// The metadata of commit `n` of thread `w` in `cycle`: parsed back to
/// tell which commit a partition holds.
fn metadata(cycle: u64, w: u32, n: u64) -> String {
    format!("{cycle}:{w}:{n}:{}", "m".repeat(1500))
}

fn parse(metadata: &str) -> Option<(u64, u32, u64)> {
    let mut it = metadata.split(':');
    Some((
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    ))
}

/// The child; a no-op in a normal test run.
#[test]
fn commits_power_child() {
    let Some((dir, cycle)) = child_setup(CHILD_DIR, CHILD_CYCLE, MARKS) else {
        return;
    };
    let mq = Broker::open(&dir, config()).unwrap();
    say_ready();
    let started = Instant::now();
    std::thread::scope(|s| {
        for w in 0..THREADS {
            let mq = &mq;
            s.spawn(move || {
                let mut c = mq
                    .consumer(
                        ConsumerConfig::group("g")
                            .enable_auto_commit(false)
                            .commit_acks(if w == QUICK { Acks::One } else { Acks::All }),
                    )
                    .unwrap();
                let (a, b) = (2 * w, 2 * w + 1);
                c.assign(&[("t", a), ("t", b)]).unwrap();
                for n in 0.. {
                    let m = metadata(cycle, w, n);
                    let o = n % ROOM;
                    c.commit_offsets(&[("t", a, o, &m), ("t", b, o, &m)])
                        .unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {w} {n}").unwrap();
                    out.flush().unwrap();
                    if started.elapsed() > Duration::from_secs(60) {
                        break;
                    }
                }
            });
        }
    });
}

/// The group's files, with their inode and contents.
fn group_files(dir: &Path) -> HashMap<PathBuf, (u64, Vec<u8>)> {
    let mut out = HashMap::new();
    for name in ["g.offsets", "g.commits"] {
        let path = dir.join("groups").join(name);
        if let (Ok(m), Ok(b)) = (std::fs::metadata(&path), std::fs::read(&path)) {
            out.insert(path, (m.ino(), b));
        }
    }
    out
}

/// The contents of `before`'s files that are still the same files (inode)
/// in `now`: a file replaced since (a fold renamed a new one over it) is
/// another inode, whose pages never held the old file's bytes.
fn same_files(
    before: &HashMap<PathBuf, (u64, Vec<u8>)>,
    now: &HashMap<PathBuf, (u64, Vec<u8>)>,
) -> HashMap<PathBuf, Vec<u8>> {
    before
        .iter()
        .filter(|(path, (ino, _))| now.get(*path).is_some_and(|(i, _)| i == ino))
        .map(|(path, (_, bytes))| (path.clone(), bytes.clone()))
        .collect()
}

#[test]
fn durable_commits_survive_simulated_power_loss() {
    let cycles = env_or("MQLITE_COMMITS_POWER_CYCLES", 12);
    let seed = seed("MQLITE_COMMITS_POWER_SEED", "commits power-loss");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    {
        let mq = Broker::open(&dir, config()).unwrap();
        mq.create_topic("t", TopicConfig::new(2 * THREADS)).unwrap();
        let p = mq.producer(mqlite::ProducerConfig::default()).unwrap();
        for part in 0..2 * THREADS {
            for _ in 0..ROOM {
                p.send(mqlite::Record::new("t").partition(part).value(&b"v"[..]))
                    .unwrap();
            }
        }
        p.close().unwrap();
        mq.close().unwrap();
    }
    // Per thread, the commit the group must hold at least: the last one
    // that returned with `commit_acks=all`, or the one the previous cycle
    // found.
    let mut acked: HashMap<u32, (u64, u64)> = HashMap::new();
    let (mut pages, mut acks) = (0usize, 0usize);
    for cycle in 0..cycles {
        let before = group_files(&dir);
        let _ = std::fs::remove_file(tmp.path().join(MARKS));
        let lines = run_and_kill(
            "commits_power_child",
            &[
                (CHILD_DIR, dir.display().to_string()),
                (CHILD_CYCLE, cycle.to_string()),
            ],
            Duration::from_millis(20 + rng.below(300)),
        );
        for l in lines.iter().filter_map(|l| l.strip_prefix("ACK ")) {
            let f: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            if f[0] as u32 != QUICK {
                acked.insert(f[0] as u32, (cycle, f[1]));
                acks += 1;
            }
        }

        // The power goes out.
        let marks = durable_marks(&tmp.path().join(MARKS));
        let now = group_files(&dir);
        pages += power_out(now.keys(), &same_files(&before, &now), &marks, &mut rng);

        let mq = Broker::open(&dir, config())
            .unwrap_or_else(|e| panic!("cycle {cycle}: reopen failed: {e} (seed {seed})"));
        let c = mq
            .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
            .unwrap();
        for w in 0..THREADS {
            let (a, b) = (2 * w, 2 * w + 1);
            let got_a = c.committed("t", a).unwrap();
            let got_b = c.committed("t", b).unwrap();
            let (Some(got_a), Some(got_b)) = (got_a, got_b) else {
                assert!(
                    !acked.contains_key(&w),
                    "cycle {cycle}: thread {w}'s commits are gone (seed {seed})"
                );
                continue;
            };
            assert_eq!(
                got_a.metadata, got_b.metadata,
                "cycle {cycle}: thread {w}'s commit is not whole (seed {seed})"
            );
            let (gc, gw, gn) = parse(&got_a.metadata)
                .unwrap_or_else(|| panic!("cycle {cycle}: damaged metadata (seed {seed})"));
            assert_eq!(gw, w);
            assert_eq!(got_a.offset, gn % ROOM);
            if let Some(&(ac, an)) = acked.get(&w) {
                assert!(
                    (gc, gn) >= (ac, an),
                    "cycle {cycle}: thread {w}'s commit {ac}:{an} returned, the group holds \
                     {gc}:{gn} (seed {seed})"
                );
            }
            // What the next cycle must keep at least.
            acked.insert(w, (gc, gn));
        }
        drop(c);
        mq.close().unwrap();
    }
    println!(
        "commits power loss: {cycles} cycles, {acks} commits acknowledged, {pages} pages lost, \
         torn or garbled"
    );
    assert!(acks > 0, "nothing was ever acknowledged");
}
