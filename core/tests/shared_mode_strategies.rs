//! Shared mode: every assignment strategy, and broadcast consumers, with
//! the members of a group in different processes. For each case two
//! member processes join one group; the parent produces once both joined;
//! the members' final assignments must split the topic's partitions
//! between them (each partition owned by exactly one), and together they
//! must have consumed every record (broadcast: each one every record).
//!
//! The members are this test binary, re-run with `--exact strategy_member`
//! and `MQLITE_STRATEGY_DIR` set. Each member writes the engine's warnings
//! to `<case>-<member>.log`, shown when a check fails; members stop when
//! told to, when the parent's test fails, or after two minutes.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use mqlite::{
    AssignmentStrategy, Broker, Config, ConsumerConfig, ProducerConfig, Record, TopicConfig,
};

const DIR_ENV: &str = "MQLITE_STRATEGY_DIR";
const CASE_ENV: &str = "MQLITE_STRATEGY_CASE";
const ME_ENV: &str = "MQLITE_STRATEGY_ME";
const PARTITIONS: u32 = 6;
const PER_PARTITION: u32 = 50;

fn strategy(case: &str) -> Option<AssignmentStrategy> {
    Some(match case {
        "averagely" => AssignmentStrategy::Averagely,
        "round_robin" => AssignmentStrategy::RoundRobin,
        "consistent_hash" => AssignmentStrategy::ConsistentHash,
        "sticky" => AssignmentStrategy::Sticky,
        "by_config" => AssignmentStrategy::ByConfig,
        _ => return None,
    })
}

const CASES: [&str; 6] = [
    "averagely",
    "round_robin",
    "consistent_hash",
    "sticky",
    "by_config",
    "broadcast",
];

/// Writes the engine's log records at `warn` and above to a file.
struct FileLog(std::sync::Mutex<std::fs::File>);

impl log::Log for FileLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            use std::io::Write;
            let _ = writeln!(self.0.lock().unwrap(), "{} {}", r.level(), r.args());
        }
    }
    fn flush(&self) {}
}

/// Every member's log, for a failure's message.
fn member_logs(work: &Path) -> String {
    let mut out = String::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(work)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.sort();
    for p in paths
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
    {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        if !text.is_empty() {
            let _ = write!(out, "{}:\n{text}", p.display());
        }
    }
    out
}

/// Tells the members to stop when dropped (the test's end, or its panic).
struct StopMembers<'a>(&'a Path);

impl Drop for StopMembers<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("stop"), b"");
    }
}

fn mark(dir: &Path, name: &str) {
    std::fs::write(dir.join(name), b"").unwrap();
}

fn wait_for(path: &Path, timeout: Duration) -> bool {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A member process: joins, reports, consumes until idle, writes what it
/// owns and got, and stays a live member until told to stop.
#[test]
#[ignore = "run by the other tests as a member process"]
fn strategy_member() {
    let (Ok(dir), Ok(case), Ok(me)) = (
        std::env::var(DIR_ENV),
        std::env::var(CASE_ENV),
        std::env::var(ME_ENV),
    ) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let work = dir.join("work");
    let file = std::fs::File::create(work.join(format!("{case}-{me}.log"))).unwrap();
    if log::set_boxed_logger(Box::new(FileLog(std::sync::Mutex::new(file)))).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
    let mq = Broker::open(dir.join("data"), Config::default().shared(true)).unwrap();
    let mut config = ConsumerConfig::group(format!("g-{case}")).client_id(format!("m{me}"));
    match strategy(&case) {
        Some(s) => config = config.assignment_strategy(s),
        None => config = config.broadcast(true),
    }
    if case == "by_config" {
        let first = if me == "0" { 0 } else { PARTITIONS / 2 };
        config = config.wanted_partitions(
            (first..first + PARTITIONS / 2)
                .map(|p| ("t".to_owned(), p))
                .collect(),
        );
    }
    let mut c = mq.consumer(config).unwrap();
    c.subscribe(&["t"]).unwrap();
    c.poll(Duration::from_millis(50)).unwrap();
    mark(&work, &format!("{case}-{me}.joined"));
    let mut got = BTreeSet::new();
    let start = Instant::now();
    let mut last = Instant::now();
    while last.elapsed() < Duration::from_millis(1500)
        || (got.is_empty() && start.elapsed() < Duration::from_secs(20))
    {
        for m in c.poll(Duration::from_millis(100)).unwrap() {
            got.insert((m.partition(), m.offset()));
            last = Instant::now();
        }
    }
    let owned: Vec<String> = c
        .assignment()
        .into_iter()
        .map(|(_, p)| p.to_string())
        .collect();
    let consumed: Vec<String> = got.iter().map(|(p, o)| format!("{p}:{o}")).collect();
    // Written aside and renamed: the parent reads the file as soon as it
    // exists, and must never see it half written.
    let result = work.join(format!("{case}-{me}.result"));
    let aside = work.join(format!("{case}-{me}.result.tmp"));
    std::fs::write(
        &aside,
        format!("{}\n{}\n", owned.join(","), consumed.join(",")),
    )
    .unwrap();
    std::fs::rename(&aside, &result).unwrap();
    let stop = work.join("stop");
    let waiting = Instant::now();
    while !stop.exists() && waiting.elapsed() < Duration::from_secs(120) {
        c.poll(Duration::from_millis(50)).unwrap();
    }
}

fn spawn(dir: &Path, case: &str, me: u32) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "strategy_member", "--ignored", "--nocapture"])
        .env(DIR_ENV, dir)
        .env(CASE_ENV, case)
        .env(ME_ENV, me.to_string())
        .spawn()
        .unwrap()
}

fn parse(line: &str) -> Vec<String> {
    line.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_strategy_and_broadcast_split_a_topic_between_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let stop_members = StopMembers(&work);
    let mq = Broker::open(dir.join("data"), Config::default().shared(true)).unwrap();
    mq.create_topic("t", TopicConfig::new(PARTITIONS)).unwrap();
    let mut children = Vec::new();
    for case in CASES {
        for me in 0..2 {
            children.push(spawn(dir, case, me));
        }
    }
    for case in CASES {
        for me in 0..2 {
            let joined = work.join(format!("{case}-{me}.joined"));
            assert!(wait_for(&joined, Duration::from_secs(60)), "{case}-{me}");
        }
    }
    // Both members of every group joined: let the rebalances settle.
    std::thread::sleep(Duration::from_millis(500));
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for partition in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            p.send(Record::new("t").partition(partition).value(format!("{i}")))
                .unwrap();
        }
    }
    p.flush().unwrap();
    let all: BTreeSet<String> = (0..PARTITIONS)
        .flat_map(|p| (0..u64::from(PER_PARTITION)).map(move |o| format!("{p}:{o}")))
        .collect();
    let every: Vec<String> = (0..PARTITIONS).map(|p| p.to_string()).collect();
    for case in CASES {
        let mut owned = Vec::new();
        let mut consumed = Vec::new();
        for me in 0..2 {
            let result = work.join(format!("{case}-{me}.result"));
            assert!(wait_for(&result, Duration::from_secs(60)), "{case}-{me}");
            let text = std::fs::read_to_string(&result).unwrap();
            let mut lines = text.lines();
            owned.push(parse(lines.next().unwrap_or("")));
            consumed.push(parse(lines.next().unwrap_or("")));
        }
        if case == "broadcast" {
            for got in &consumed {
                assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), all, "{case}");
            }
            continue;
        }
        let mut both: Vec<String> = owned.concat();
        both.sort_by_key(|p| p.parse::<u32>().unwrap());
        assert_eq!(
            both,
            every,
            "{case}: owners {owned:?}; the members' logs:\n{}",
            member_logs(&work)
        );
        let union: BTreeSet<String> = consumed.concat().into_iter().collect();
        assert_eq!(union, all, "{case}");
    }
    drop(stop_members);
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
}
