//! Producer identities across processes on one shared data directory:
//! producer ids handed out concurrently in several processes never repeat
//! (a named producer keeps one id everywhere, its epochs go up), and a
//! named producer is fenced by a newer one of its name in another process
//! (its next send fails with `ProducerFenced`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use mqlite::{Broker, Error, ProducerConfig, Record, TopicConfig};
use shared_mode_procs::{mark, read_lines, shared, spawn, ChildEnv, Dirs, Journal};

const READY: Duration = Duration::from_secs(30);
const DONE: Duration = Duration::from_secs(120);

/// The roles of this file's child processes.
#[test]
#[ignore = "a role run in a child process by the other tests of this file"]
fn child() {
    let Some(env) = ChildEnv::get() else {
        return;
    };
    match env.role.as_str() {
        "ids" => ids(&env),
        "older" => older(&env),
        other => panic!("unknown role {other}"),
    }
}

/// Producers made by child `k` (arg `k,count`), all kept open until the
/// parent says `GO` was seen by everyone: every 8th named (after a name
/// shared by every child, or one of its own), the others anonymous. Each
/// is journalled as `anon <id>` or `named <name> <id> <epoch>`.
fn ids(env: &ChildEnv) {
    let [k, count] = env.nums()[..] else {
        panic!("arg: k,count")
    };
    let mq = Broker::open(&env.data, shared()).unwrap();
    env.ready();
    shared_mode_procs::wait_until(READY, "GO", || env.file("GO").exists());
    let mut journal = Journal::open(&env.file("ids"));
    let mut lines = String::new();
    let mut keep = Vec::new();
    for i in 0..count {
        if i % 8 == 0 {
            let name = if i % 16 == 0 {
                format!("shared-{}", i % 3)
            } else {
                format!("own-{k}-{i}")
            };
            let p = mq
                .producer(ProducerConfig::default().name(name.clone()))
                .unwrap();
            writeln!(lines, "named {name} {} {}", p.producer_id(), p.epoch()).unwrap();
            keep.push(p);
        } else {
            let p = mq.producer(ProducerConfig::default()).unwrap();
            writeln!(lines, "anon {}", p.producer_id()).unwrap();
            keep.push(p);
        }
    }
    journal.lines(&lines);
    drop(keep);
    mq.close().unwrap();
}

/// Named producer `p`: sends one record, says it is ready, waits for the
/// parent's `NEWER` marker (a newer `p` in the parent), sends again and
/// prints what that send returned.
fn older(env: &ChildEnv) {
    let mq = Broker::open(&env.data, shared()).unwrap();
    let p = mq.producer(ProducerConfig::default().name("p")).unwrap();
    p.send(Record::new("t").value(b"old-1".to_vec())).unwrap();
    std::fs::write(env.file("older.epoch"), p.epoch().to_string()).unwrap();
    env.ready();
    shared_mode_procs::wait_until(READY, "NEWER", || env.file("NEWER").exists());
    match p.send(Record::new("t").value(b"old-2".to_vec())) {
        Err(Error::ProducerFenced {
            epoch,
            current_epoch,
            ..
        }) => println!("fenced {epoch} by {current_epoch}"),
        other => println!("not fenced: {other:?}"),
    }
    mq.close().unwrap();
}

#[test]
fn producer_ids_never_repeat_across_processes() {
    let dirs = Dirs::new();
    let mut kids: Vec<_> = (0..3)
        .map(|k| spawn("ids", &format!("ids{k}"), &dirs, &format!("{k},400")))
        .collect();
    for k in &mut kids {
        k.wait_ready(READY);
    }
    mark(&dirs.work, "GO");
    for k in &mut kids {
        k.expect_success(DONE);
    }
    let mut anon = HashSet::new();
    let mut named: HashMap<String, (i64, Vec<i16>)> = HashMap::new();
    let lines = read_lines(&dirs.work.join("ids"));
    assert_eq!(lines.len(), 3 * 400);
    for line in lines {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["anon", id] => {
                let id: i64 = id.parse().unwrap();
                assert!(id >= 0);
                assert!(anon.insert(id), "anonymous id {id} handed out twice");
            }
            ["named", name, id, epoch] => {
                let (id, epoch): (i64, i16) = (id.parse().unwrap(), epoch.parse().unwrap());
                let e = named.entry((*name).to_owned()).or_insert((id, Vec::new()));
                assert_eq!(e.0, id, "{name} has two ids");
                e.1.push(epoch);
            }
            _ => panic!("bad line {line:?}"),
        }
    }
    let named_ids: HashSet<i64> = named.values().map(|(id, _)| *id).collect();
    assert_eq!(named_ids.len(), named.len(), "two names share an id");
    assert!(named_ids.is_disjoint(&anon), "a named id is also anonymous");
    for (name, (_, mut epochs)) in named {
        epochs.sort_unstable();
        let want: Vec<i16> = (0..epochs.len() as i16).collect();
        assert_eq!(epochs, want, "epochs of {name}");
    }
}

#[test]
fn a_named_producer_is_fenced_by_a_newer_one_in_another_process() {
    let dirs = Dirs::new();
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let mut old = spawn("older", "older", &dirs, "");
    old.wait_ready(READY);
    let old_epoch: i16 = std::fs::read_to_string(dirs.work.join("older.epoch"))
        .unwrap()
        .parse()
        .unwrap();
    let p = mq.producer(ProducerConfig::default().name("p")).unwrap();
    assert_eq!(p.epoch(), old_epoch + 1);
    p.send(Record::new("t").value(b"new-1".to_vec())).unwrap();
    mark(&dirs.work, "NEWER");
    old.expect_success(DONE);
    let said = old.line("fenced").unwrap_or_else(|| old.output());
    assert_eq!(said, format!("fenced {old_epoch} by {}", p.epoch()));
    drop(p);
    mq.close().unwrap();
}
