//! A consuming process killed with `-9`: the next member of its group
//! resumes at the committed offsets. Every message is consumed at least
//! once, and only messages after the last commit are delivered again,
//! with commits synced (`commit_acks=all`) and with commits only written
//! to the operating system (`commit_acks=1`: a process crash keeps them).
#![allow(clippy::unwrap_used)]

#[path = "common/child.rs"]
mod child;
mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use common::cfg;
use mqlite::{Acks, Broker, ConsumerConfig, ProducerConfig, Record, TopicConfig};

const CHILD_DIR: &str = "MQLITE_GROUP_CHILD_DIR";
/// `1` makes the child commit with `commit_acks=1`.
const CHILD_ACKS: &str = "MQLITE_GROUP_CHILD_ACKS";
const PARTITIONS: u32 = 3;
const PER_PARTITION: u64 = 400;

/// The child: consumes in group `g`, prints `GOT p o` for each message it
/// processes and `COMMITTED p o` after each commit (every 25 messages).
#[test]
fn consume_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let mq = Broker::open(&dir, cfg()).unwrap();
    let mut c = mq
        .consumer(
            ConsumerConfig::group("g")
                .enable_auto_commit(false)
                .commit_acks(match std::env::var(CHILD_ACKS).as_deref() {
                    Ok("1") => Acks::One,
                    _ => Acks::All,
                })
                .max_poll_records(7),
        )
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY").unwrap();
    let mut since_commit = 0;
    loop {
        let got = c.poll(Duration::from_millis(100)).unwrap();
        // Caught up (an empty poll alone is not proof: on a loaded machine
        // the first polls can return before the assignment): commit, stop.
        let assigned = c.assignment();
        let caught_up = got.is_empty()
            && !assigned.is_empty()
            && assigned.iter().all(|(t, p)| {
                let end = mq.topic(t).unwrap().partitions[*p as usize].end_offset;
                c.position(t, *p).unwrap() >= end
            });
        if caught_up {
            since_commit = usize::MAX;
        }
        for m in &got {
            writeln!(out, "GOT {} {}", m.partition(), m.offset()).unwrap();
            since_commit += 1;
        }
        out.flush().unwrap();
        if since_commit >= 25 {
            c.commit().unwrap();
            for (t, p) in c.assignment() {
                if let Some(o) = c.committed(&t, p).unwrap() {
                    writeln!(out, "COMMITTED {p} {}", o.offset).unwrap();
                }
            }
            out.flush().unwrap();
            if caught_up {
                return;
            }
            since_commit = 0;
        }
    }
}

fn run_child(dir: &Path, acks: &str, stop_after: usize) -> Vec<String> {
    let dir_s = dir.to_str().unwrap();
    let mut got = 0;
    child::run_child_until(
        dir,
        "consume_child",
        &[(CHILD_DIR, dir_s), (CHILD_ACKS, acks)],
        |l| {
            if l.starts_with("GOT ") {
                got += 1;
            }
            got >= stop_after
        },
    )
}

#[test]
fn a_killed_consumer_resumes_at_its_commits() {
    killed_consumers_resume("all");
}

#[test]
fn a_killed_consumer_resumes_at_its_commits_made_with_commit_acks_1() {
    killed_consumers_resume("1");
}

/// Children committing with `commit_acks` `acks` killed until every
/// message was consumed.
fn killed_consumers_resume(acks: &str) {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", TopicConfig::new(PARTITIONS)).unwrap();
        let p = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..PER_PARTITION {
            for part in 0..PARTITIONS {
                p.send(
                    Record::new("t")
                        .partition(part)
                        .value(i.to_le_bytes().to_vec()),
                )
                .unwrap();
            }
        }
    }
    let mut seen: HashSet<(u32, u64)> = HashSet::new();
    let mut committed: HashMap<u32, u64> = HashMap::new();
    let total = (u64::from(PARTITIONS) * PER_PARTITION) as usize;
    // Until everything was seen: a loaded machine may need many cycles
    // (a child killed before it polled makes no progress).
    for cycle in 0..300 {
        if seen.len() == total {
            break;
        }
        let before = committed.clone();
        let lines = run_child(tmp.path(), acks, 60 + cycle * 37 % 200);
        for l in &lines {
            let mut it = l.split(' ');
            match (it.next(), it.next(), it.next()) {
                (Some("GOT"), Some(p), Some(o)) => {
                    let (p, o): (u32, u64) = (p.parse().unwrap(), o.parse().unwrap());
                    if !seen.insert((p, o)) {
                        // Delivered again: only what was not committed.
                        let c = before.get(&p).copied().unwrap_or(0);
                        assert!(
                            o >= c,
                            "offset {o} of {p} re-delivered after a commit of {c}"
                        );
                    }
                }
                (Some("COMMITTED"), Some(p), Some(o)) => {
                    committed.insert(p.parse().unwrap(), o.parse().unwrap());
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        seen.len(),
        total,
        "every message consumed at least once; last child's stderr:\n{}",
        std::fs::read_to_string(tmp.path().join("child.stderr")).unwrap_or_default()
    );
}
