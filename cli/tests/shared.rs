//! The CLI alongside an application that holds the data directory in
//! shared mode (this test process plays the application): the reading
//! commands open it read-only and work; `tail` follows the writer through
//! a read-only consumer; writing commands write beside the application.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{json_lines, ok, Lines};
use mqlite::{Broker, Config, Error, ProducerConfig, Record, TopicConfig};
use serde_json::Value;

fn open_shared(dir: &Path) -> Broker {
    Broker::open(
        dir,
        Config::default()
            .prefault(false)
            .retention_check_interval_ms(0)
            .shared(true),
    )
    .unwrap()
}

/// Every file and directory below `dir` with its size and modification
/// time, but the shared page `mqlite.shm`, which the application (the
/// writer) updates in place at any time.
fn tree(dir: &Path) -> Vec<(String, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                todo.push(e.path());
            }
            if e.file_name() == "mqlite.shm" {
                continue;
            }
            out.push((
                e.path().display().to_string(),
                m.len(),
                m.modified().unwrap(),
            ));
        }
    }
    out.sort();
    out
}

#[test]
fn reading_commands_work_while_an_application_holds_it_shared() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let app = open_shared(dir);
    app.create_topic("t", TopicConfig::new(2)).unwrap();
    let producer = app.producer(ProducerConfig::default()).unwrap();
    for i in 0..10 {
        producer
            .send(
                Record::new("t")
                    .partition(i % 2)
                    .value(format!("v{i}").into_bytes()),
            )
            .unwrap();
    }
    producer.flush().unwrap();
    let before = tree(dir);

    assert_eq!(ok(dir, &["topics"], None), "t\n");
    let v: Value =
        serde_json::from_str(&ok(dir, &["topic", "describe", "t", "--json"], None)).unwrap();
    assert_eq!(v["offsets"][0]["end_offset"], 5);
    assert_eq!(v["offsets"][1]["end_offset"], 5);
    let mut values: Vec<String> = json_lines(&ok(dir, &["consume", "t", "--format", "json"], None))
        .iter()
        .map(|l| l["value"].as_str().unwrap().to_owned())
        .collect();
    values.sort();
    let mut want: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    want.sort();
    assert_eq!(values, want);
    // The reading commands wrote no data.
    assert_eq!(tree(dir), before);

    // A group consumed from the CLI commits (a write every process may
    // make); the application's own handle sees the commit.
    ok(dir, &["consume", "t", "--group", "g", "--max", "10"], None);
    let info = app.describe_group("g").unwrap();
    let mut committed: Vec<(u32, u64)> = info
        .committed
        .iter()
        .map(|(_, p, c)| (*p, c.offset))
        .collect();
    committed.sort_unstable();
    assert_eq!(committed, vec![(0, 5), (1, 5)]);
    let groups = ok(dir, &["groups"], None);
    assert!(groups.lines().any(|l| l.starts_with('g')), "{groups}");
    let g: Value =
        serde_json::from_str(&ok(dir, &["group", "describe", "g", "--json"], None)).unwrap();
    assert_eq!(g["offsets"][0]["lag"], 0);

    // The application writes, and so does the CLI, beside it, to the same
    // partition; the application's next record follows the CLI's.
    ok(dir, &["produce", "t", "--partition", "0"], Some("cli\n"));
    let md = producer
        .send(Record::new("t").partition(0).value(b"app".to_vec()))
        .unwrap();
    assert_eq!(md.offset, 6);
    let v: Value =
        serde_json::from_str(&ok(dir, &["topic", "describe", "t", "--json"], None)).unwrap();
    assert_eq!(v["offsets"][0]["end_offset"], 7);
    drop(producer);
    app.close().unwrap();
}

#[test]
fn tail_follows_a_shared_writer_with_a_read_only_consumer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let app = open_shared(dir);
    app.create_topic("t", TopicConfig::new(2)).unwrap();
    let producer = app.producer(ProducerConfig::default()).unwrap();
    producer
        .send(Record::new("t").partition(0).value(b"before".to_vec()))
        .unwrap();
    let tail = Lines::spawn(dir, &["tail", "t", "--from-beginning", "--format", "json"]);
    let first = tail.next(10_000).expect("the record written before");
    assert_eq!(
        serde_json::from_str::<Value>(&first).unwrap()["value"],
        "before"
    );
    // tail holds a read-only shared handle: exclusive mode is refused.
    assert!(matches!(
        Broker::open(dir, Config::default()),
        Err(Error::Locked { .. })
    ));
    const N: u32 = 200;
    let mut seen = Vec::new();
    for i in 0..N {
        producer
            .send(
                Record::new("t")
                    .partition(i % 2)
                    .value(format!("value-{i}").into_bytes()),
            )
            .unwrap();
        if i % 20 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < N as usize && Instant::now() < deadline {
        let Some(line) = tail.next(1_000) else {
            continue;
        };
        seen.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    let out = tail.kill();
    assert_eq!(
        seen.len(),
        N as usize,
        "tail stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for p in 0..2 {
        let offs: Vec<u64> = seen
            .iter()
            .filter(|v| v["partition"] == p)
            .map(|v| v["offset"].as_u64().unwrap())
            .collect();
        let first = u64::from(p == 0); // "before" came first in partition 0
        assert_eq!(offs, (first..first + u64::from(N / 2)).collect::<Vec<_>>());
    }
    drop(producer);
    app.close().unwrap();
}

#[test]
fn tail_with_files_leaves_the_directory_unopened() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "t", "--partitions", "1"], None);
    ok(dir, &["produce", "t"], Some("old\n"));
    let tail = Lines::spawn(dir, &["tail", "t", "--files", "--from-beginning"]);
    assert_eq!(tail.next(10_000).as_deref(), Some("old"));
    // No handle of tail's: an application opens the directory in exclusive
    // mode, and tail follows what it writes.
    let app = Broker::open(dir, Config::default()).unwrap();
    let producer = app.producer(ProducerConfig::default()).unwrap();
    producer
        .send(Record::new("t").value(b"new".to_vec()))
        .unwrap();
    assert_eq!(tail.next(10_000).as_deref(), Some("new"));
    tail.kill();
    drop(producer);
    app.close().unwrap();
}

#[test]
fn tail_follows_partitions_added_by_a_shared_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let app = open_shared(dir);
    app.create_topic("t", TopicConfig::new(1)).unwrap();
    let producer = app.producer(ProducerConfig::default()).unwrap();
    let send = |partition: u32, value: &str| {
        producer
            .send(
                Record::new("t")
                    .partition(partition)
                    .value(value.as_bytes().to_vec()),
            )
            .unwrap();
    };
    send(0, "a");
    let tail = Lines::spawn(dir, &["tail", "t", "--from-beginning"]);
    assert_eq!(tail.next(10_000).as_deref(), Some("a"));
    app.add_partitions("t", 2).unwrap();
    send(1, "b"); // in the new partition, followed from its start
    send(0, "c"); // partition 0 goes on from where it was
    let mut got = vec![tail.next(10_000), tail.next(10_000)];
    got.sort();
    assert_eq!(got, vec![Some("b".to_owned()), Some("c".to_owned())]);
    // Nothing twice.
    assert_eq!(tail.next(1_500), None);
    tail.kill();
    drop(producer);
    app.close().unwrap();
}
