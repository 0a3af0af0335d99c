//! The data directory lock: one open handle at a time, in this process or
//! any other, and a clear error naming the holder.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use mqlite::{Broker, Config, Error, OpenMode, ProducerConfig, Record, TopicConfig, LOCK_FILE};

/// Exclusive mode, by name: these tests check its lock: one handle per
/// directory, `Locked` for any other (shared mode shares the engine within a
/// process).
fn cfg() -> Config {
    common::cfg().mode(OpenMode::Exclusive)
}

const CHILD_DIR: &str = "MQLITE_LOCK_CHILD_DIR";

/// The child side: holds the directory until its stdin closes. A no-op in
/// a normal test run.
#[test]
fn lock_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let mq = Broker::open(&dir, cfg()).expect("child: open");
    println!("\nLOCKED");
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    mq.close().expect("child: close");
}

/// Starts a child holding `dir`; returns once it holds the lock.
fn child_holding(dir: &Path) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lock_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l == "LOCKED" => break,
            Some(Ok(_)) => {}
            other => panic!("the child exited before taking the lock: {other:?}"),
        }
    }
    // Keep draining its output so it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    child
}

fn lock_holder(dir: &Path) -> String {
    std::fs::read_to_string(dir.join(LOCK_FILE))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn second_open_in_this_process_is_locked() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let pid = std::process::id();
    for _ in 0..2 {
        match Broker::open(tmp.path(), cfg()) {
            Err(e @ Error::Locked { .. }) => {
                let Error::Locked { path, holder } = &e else {
                    unreachable!()
                };
                assert_eq!(path, tmp.path());
                assert!(holder.contains("this process"), "{holder}");
                assert!(holder.contains(&pid.to_string()), "{holder}");
                assert!(e.to_string().contains(&pid.to_string()), "{e}");
                assert_eq!(e.code(), 3);
            }
            other => panic!("expected Locked, got {other:?}"),
        }
    }
    // The failed attempts changed nothing: the lock file still names us and
    // the first handle works.
    assert_eq!(lock_holder(tmp.path()), pid.to_string());
    let p = mq.producer(ProducerConfig::default()).unwrap();
    p.send(Record::new("t").value("still mine")).unwrap();
    assert_eq!(mq.topics(), ["t"]);
}

#[test]
fn close_releases_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.close().unwrap();
    assert!(mq.is_closed());
    // The closed handle still exists; the directory is free anyway.
    let again = Broker::open(tmp.path(), cfg()).unwrap();
    assert!(matches!(
        Broker::open(tmp.path(), cfg()),
        Err(Error::Locked { .. })
    ));
    mq.close().unwrap(); // closing twice is fine and does not free `again`'s lock
    assert!(matches!(
        Broker::open(tmp.path(), cfg()),
        Err(Error::Locked { .. })
    ));
    drop(again);
    Broker::open(tmp.path(), cfg()).unwrap();
}

#[test]
fn drop_releases_the_lock_even_with_live_producers() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    producer.send(Record::new("t").value("a")).unwrap();
    drop(mq);
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert!(matches!(
        producer.send(Record::new("t").value("b")),
        Err(Error::Closed(_))
    ));
    assert_eq!(mq.topic("t").unwrap().partitions[0].end_offset, 1);
}

#[test]
fn another_process_holding_the_lock_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = child_holding(tmp.path());
    match Broker::open(tmp.path(), cfg()) {
        Err(Error::Locked { path, holder }) => {
            assert_eq!(path, tmp.path());
            assert_eq!(holder, format!("process {}", child.id()));
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    // The child lets go when it closes.
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert_eq!(lock_holder(tmp.path()), std::process::id().to_string());
    mq.close().unwrap();
}

#[test]
fn a_killed_holder_releases_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = child_holding(tmp.path());
    assert!(matches!(
        Broker::open(tmp.path(), cfg()),
        Err(Error::Locked { .. })
    ));
    child.kill().unwrap(); // SIGKILL: no close, no cleanup
    child.wait().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert_eq!(lock_holder(tmp.path()), std::process::id().to_string());
    mq.close().unwrap();
}
