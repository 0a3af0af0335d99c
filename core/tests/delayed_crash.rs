//! Processes moving delayed records killed with `-9` again and again: every
//! delayed record that was sent arrives at its topic exactly once.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cfg;
use mqlite::{Acks, Broker, ConsumerConfig, ProducerConfig, Record, TopicConfig};

const CHILD_DIR: &str = "MQLITE_DELAYED_CHILD_DIR";
const CHILD_SEND: &str = "MQLITE_DELAYED_CHILD_SEND";
const RECORDS: u64 = 400;

/// The child: sends the delayed records (when told to), printing `SENT i`
/// once each send returned, then lets its mover work until killed.
#[test]
fn delayed_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let mq = Broker::open(&dir, cfg()).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    if std::env::var(CHILD_SEND).is_ok() {
        let p = mq
            .producer(ProducerConfig::default().acks(Acks::All))
            .unwrap();
        for i in 0..RECORDS {
            // Due in 0.1 to 2.1 s, out of send order.
            let delay = 100 + (i * 7919) % 2000;
            p.send(
                Record::new("t")
                    .partition((i % 2) as u32)
                    .value(i.to_string())
                    .delay(Duration::from_millis(delay)),
            )
            .unwrap();
            writeln!(out, "SENT {i}").unwrap();
            out.flush().unwrap();
        }
    }
    loop {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run_child(exe: &Path, dir: &Path, send: bool, kill_after: Duration) -> Vec<String> {
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "delayed_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_DIR, dir)
    .stdout(Stdio::piped())
    .stderr(std::fs::File::create(dir.join("child.stderr")).unwrap())
    .stdin(Stdio::null());
    if send {
        cmd.env(CHILD_SEND, "1");
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(std::result::Result::ok)
            .collect::<Vec<_>>()
    });
    std::thread::sleep(kill_after);
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap()
}

#[test]
fn killed_movers_deliver_every_delayed_record_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", TopicConfig::new(2)).unwrap();
    }
    let exe = std::env::current_exe().unwrap();
    // The first child sends (and is killed while its mover works), the
    // others only move, each killed after a while.
    let lines = run_child(&exe, tmp.path(), true, Duration::from_millis(900));
    let sent: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("SENT ")?.parse().ok())
        .collect();
    assert!(
        !sent.is_empty(),
        "the sender was killed before it sent anything"
    );
    for cycle in 0..8u64 {
        run_child(
            &exe,
            tmp.path(),
            false,
            Duration::from_millis(150 + cycle * 97 % 300),
        );
    }
    // Then a process that stays until everything is due and moved.
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.subscribe(&["t"]).unwrap();
    let mut seen: HashMap<u64, u32> = HashMap::new();
    let end = Instant::now() + Duration::from_secs(15);
    let mut quiet_since = Instant::now();
    while Instant::now() < end {
        let got = c.poll(Duration::from_millis(100)).unwrap();
        if got.is_empty() {
            if sent.iter().all(|i| seen.contains_key(i))
                && quiet_since.elapsed() > Duration::from_secs(3)
            {
                break;
            }
            continue;
        }
        quiet_since = Instant::now();
        for m in got {
            let v: u64 = std::str::from_utf8(m.value().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            *seen.entry(v).or_default() += 1;
        }
    }
    for i in &sent {
        assert!(
            seen.contains_key(i),
            "delayed record {i} was sent and never arrived; stderr:\n{}",
            std::fs::read_to_string(tmp.path().join("child.stderr")).unwrap_or_default()
        );
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    // Records the kill cut short after they were written may arrive too,
    // once: only those after the last one reported sent.
    let last = sent.iter().max().copied().unwrap_or(0);
    assert!(seen.keys().all(|v| sent.contains(v) || *v > last));
}
