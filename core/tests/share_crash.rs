//! Share-consuming processes killed with `-9` mid-work, again and again:
//! an acknowledged message is never delivered again, every message is
//! delivered until acknowledged, and a delivery the killed process got
//! counts in the next delivery's `delivery_count`.
#![allow(clippy::unwrap_used)]

#[path = "common/child.rs"]
mod child;
mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use common::cfg;
use mqlite::{Acks, Broker, ProducerConfig, Record, ShareConsumerConfig, TopicConfig};

const CHILD_DIR: &str = "MQLITE_SHARE_CHILD_DIR";
const CHILD_ACKS: &str = "MQLITE_SHARE_CHILD_ACKS";
const PARTITIONS: u32 = 3;
const MESSAGES: u64 = 900;

/// The child: two members share-consume `t`, print `GOT p o count` for
/// each delivery, `ACKING p o` before acknowledging and `ACKED p o` once
/// the acknowledgement returned; `IDLE` when nothing comes any more.
#[test]
fn share_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let acks = match std::env::var(CHILD_ACKS).as_deref() {
        Ok("1") => Acks::One,
        _ => Acks::All,
    };
    let mq = Broker::open(&dir, cfg()).unwrap();
    let config = ShareConsumerConfig::group("g")
        .commit_acks(acks)
        .max_deliveries(0)
        .max_poll_records(9);
    let mut members = [
        mq.share_consumer(config.clone()).unwrap(),
        mq.share_consumer(config).unwrap(),
    ];
    for m in &mut members {
        m.subscribe(&["t"]).unwrap();
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY").unwrap();
    let mut round = 0u64;
    let mut idle = 0;
    loop {
        round += 1;
        if idle > 40 {
            // Nothing left (the parent stops reading at this line).
            writeln!(out, "IDLE").unwrap();
            out.flush().unwrap();
            return;
        }
        for c in &mut members {
            let got = c.poll(Duration::from_millis(20)).unwrap();
            if got.is_empty() {
                idle += 1;
            } else {
                idle = 0;
            }
            for m in &got {
                writeln!(
                    out,
                    "GOT {} {} {}",
                    m.partition(),
                    m.offset(),
                    m.delivery_count()
                )
                .unwrap();
            }
            out.flush().unwrap();
            // Every seventh message is released (delivered again soon);
            // the rest acknowledged, in one call or one by one.
            let (release, ack): (Vec<_>, Vec<_>) = got
                .into_iter()
                .partition(|m| (m.offset() + round).is_multiple_of(7));
            c.release(&release, Duration::ZERO).unwrap();
            for m in &ack {
                writeln!(out, "ACKING {} {}", m.partition(), m.offset()).unwrap();
            }
            out.flush().unwrap();
            if round.is_multiple_of(2) {
                c.ack(&ack).unwrap();
            } else {
                for m in &ack {
                    m.ack().unwrap();
                }
            }
            for m in &ack {
                writeln!(out, "ACKED {} {}", m.partition(), m.offset()).unwrap();
            }
            out.flush().unwrap();
        }
    }
}

/// Whether a child's output ends idle having delivered nothing that was
/// acknowledged before (`acked`), which it extends.
fn lines_idle(lines: &[String], acked: &mut HashSet<(u32, u64)>) -> bool {
    for l in lines {
        let f: Vec<&str> = l.split(' ').collect();
        match f.as_slice() {
            ["GOT", p, o, _] => {
                let key = (p.parse().unwrap(), o.parse().unwrap());
                assert!(
                    !acked.contains(&key),
                    "{key:?} delivered after its acknowledgement"
                );
            }
            ["ACKED", p, o] => {
                acked.insert((p.parse().unwrap(), o.parse().unwrap()));
            }
            _ => {}
        }
    }
    lines.last().is_some_and(|l| l == "IDLE")
}

fn run_child(dir: &Path, acks: &str, stop_after: usize) -> Vec<String> {
    let dir_s = dir.to_str().unwrap();
    let mut acked = 0;
    child::run_child_until(
        dir,
        "share_child",
        &[(CHILD_DIR, dir_s), (CHILD_ACKS, acks)],
        |l| {
            if l.starts_with("ACKED ") {
                acked += 1;
            }
            acked >= stop_after || l == "IDLE"
        },
    )
}

#[test]
fn killed_share_consumers_never_redeliver_what_they_acknowledged() {
    killed_share_consumers("all");
}

#[test]
fn killed_share_consumers_with_commit_acks_1() {
    killed_share_consumers("1");
}

fn killed_share_consumers(acks: &str) {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", TopicConfig::new(PARTITIONS)).unwrap();
        let p = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..MESSAGES {
            p.send(
                Record::new("t")
                    .partition((i % u64::from(PARTITIONS)) as u32)
                    .value(i.to_le_bytes().to_vec()),
            )
            .unwrap();
        }
    }
    let mut acked: HashSet<(u32, u64)> = HashSet::new();
    // Acknowledgements made, maybe cut short by the kill.
    let mut acking: HashSet<(u32, u64)> = HashSet::new();
    let mut deliveries: HashMap<(u32, u64), u32> = HashMap::new();
    let mut cycles = 0;
    for cycle in 0..300 {
        cycles += 1;
        if acking.len() == MESSAGES as usize && cycle > 0 {
            // Those of the last acknowledgements the kill may have cut
            // short are delivered again if they were not made: one more
            // child sees to it (it ends when nothing comes).
            if lines_idle(&run_child(tmp.path(), acks, usize::MAX), &mut acked) {
                break;
            }
        }
        let lines = run_child(tmp.path(), acks, 40 + cycle * 37 % 150);
        for l in &lines {
            let f: Vec<&str> = l.split(' ').collect();
            match f.as_slice() {
                ["GOT", p, o, count] => {
                    let key = (p.parse().unwrap(), o.parse().unwrap());
                    let count: u32 = count.parse().unwrap();
                    assert!(
                        !acked.contains(&key),
                        "{key:?} delivered again (count {count}) after its acknowledgement"
                    );
                    let seen = deliveries.entry(key).or_default();
                    *seen += 1;
                    // Deliveries the killed process got count too (some it
                    // never printed).
                    assert!(
                        count >= *seen,
                        "{key:?}: delivery_count {count} after {seen} deliveries"
                    );
                    *seen = count;
                }
                ["ACKING", p, o] => {
                    acking.insert((p.parse().unwrap(), o.parse().unwrap()));
                }
                ["ACKED", p, o] => {
                    acked.insert((p.parse().unwrap(), o.parse().unwrap()));
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        acking.len(),
        MESSAGES as usize,
        "every message acknowledged in the end; last child's stderr:\n{}",
        std::fs::read_to_string(tmp.path().join("child.stderr")).unwrap_or_default()
    );
    assert!(
        cycles >= 4,
        "{cycles} children: too few to have been killed mid-work"
    );
    assert!(deliveries.values().any(|c| *c > 1));
    // And nothing is left to deliver.
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut c = mq.share_consumer(ShareConsumerConfig::group("g")).unwrap();
    c.subscribe(&["t"]).unwrap();
    assert!(c.poll(Duration::from_millis(300)).unwrap().is_empty());
}
