//! Transactions in shared mode: committed from several processes at once,
//! whole or absent to readers in every process; a committer killed at
//! every step of its commit leaves its transaction whole (after the commit
//! point) or absent (before it), whichever process finishes it: one that
//! appends to a partition, the next commit of another, the next open in
//! shared or exclusive mode, the first open after a restart of the machine
//! (which checks every log as after a power loss). A newer producer of a
//! transactional id in another process fences the older.
#![allow(clippy::unwrap_used)]

mod shared_mode_procs;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mqlite::faults::{self, CommitStep};
use mqlite::{Acks, Broker, ConsumerConfig, ProducerConfig, Record, TopicConfig};
use shared_mode_procs::{
    exclusive, ok, pick, read_all, read_lines, request_stop, shared, spawn, ChildEnv, Dirs,
    Journal, Rng,
};

/// The partitions every transaction here writes.
const PARTS: [(&str, u32); 3] = [("a", 0), ("a", 1), ("b", 0)];

#[test]
#[ignore = "a child process of the tests in this file"]
fn child() {
    let Some(env) = ChildEnv::get() else {
        return;
    };
    match env.role.as_str() {
        "crash" => crash_child(&env),
        "committer" => committer_child(&env),
        "after_restart" => after_restart_child(&env),
        "recreate" => recreate_child(&env),
        "with_offsets" => {
            // Three plain records in b/0, then one transaction committing
            // group `g`'s offset there to 2.
            let mq = ok("open", Broker::open(&env.data, shared()));
            let plain = ok("producer", mq.producer(ProducerConfig::default()));
            for i in 0..3 {
                ok("send", plain.send(Record::new("b").value(format!("p{i}"))));
            }
            let p = ok(
                "producer",
                mq.producer(ProducerConfig::default().transactional_id("etl")),
            );
            let tx = ok("begin", p.begin_transaction());
            ok("send", tx.send(Record::new("b").value("t1")));
            ok("offsets", tx.send_offsets_to("g", &[("b", 0, 2, "")]));
            ok("commit", tx.commit());
            ok("close", mq.close());
        }
        "bulk" => {
            faults::set_transaction_log_limit(Some(LOG_LIMIT));
            let mq = ok("open", Broker::open(&env.data, shared()));
            env.ready();
            commit_many(&mq, &env.name, env.arg.parse().unwrap());
        }
        "fill" => {
            // Commits that leave the log longer than LOG_LIMIT (this process
            // empties it only past 64 MiB), none of them flushed; then
            // waits to be killed.
            let mq = ok("open", Broker::open(&env.data, shared()));
            commit_many(&mq, &env.name, env.arg.parse().unwrap());
            env.ready();
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        "empty_after_skip" => empty_after_skip_child(&env),
        "newer" => {
            // A newer producer of transactional id `etl`, which fences the
            // parent's; then one committed transaction.
            let mq = ok("open", Broker::open(&env.data, shared()));
            let p = ok(
                "producer",
                mq.producer(ProducerConfig::default().transactional_id("etl")),
            );
            let tx = ok("begin", p.begin_transaction());
            ok("send", tx.send(Record::new("b").value("newer")));
            ok("commit", tx.commit());
        }
        other => panic!("unknown role {other}"),
    }
}

fn prepare(dirs: &Dirs) {
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    mq.create_topic("a", TopicConfig::new(2)).unwrap();
    mq.create_topic("b", TopicConfig::new(1)).unwrap();
    mq.close().unwrap();
}

/// Sends `n` records of transaction `tag` over the three partitions.
fn send_some(tx: &mqlite::Transaction, tag: &str, n: usize) {
    for i in 0..n {
        let (topic, p) = PARTS[i % 3];
        ok(
            "send",
            tx.send(Record::new(topic).partition(p).value(format!("{tag}-{i}"))),
        );
    }
}

/// Every value of the three partitions, as `mq` reads them.
fn values(mq: &Broker) -> Vec<String> {
    let mut all = Vec::new();
    for (t, p) in PARTS {
        all.extend(
            read_all(mq, t, p)
                .into_iter()
                .map(|(_, v)| String::from_utf8(v).unwrap()),
        );
    }
    all
}

fn count(all: &[String], prefix: &str) -> usize {
    all.iter().filter(|v| v.starts_with(prefix)).count()
}

const STEPS: [(&str, CommitStep); 7] = [
    ("written", CommitStep::DataWritten),
    ("synced", CommitStep::DataSynced),
    ("committed", CommitStep::Committed),
    ("marked", CommitStep::PartMarked),
    ("part", CommitStep::PartPublished),
    ("published", CommitStep::Published),
    ("offsets", CommitStep::OffsetsApplied),
];

/// One committed transaction, then a second during whose commit the
/// child kills itself at the step named by its argument (`<step>`), with
/// `acks=all`.
fn crash_child(env: &ChildEnv) {
    let step = STEPS.iter().find(|(n, _)| *n == env.arg).unwrap().1;
    let mq = ok("open", Broker::open(&env.data, shared()));
    let plain = ok("producer", mq.producer(ProducerConfig::default()));
    for i in 0..3 {
        ok(
            "send",
            plain.send(Record::new("b").value(format!("in-{i}"))),
        );
    }
    let p = ok(
        "producer",
        mq.producer(
            ProducerConfig::default()
                .transactional_id("etl")
                .acks(Acks::All),
        ),
    );
    let tx = ok("begin", p.begin_transaction());
    send_some(&tx, "first", 6);
    ok("offsets", tx.send_offsets_to("g", &[("b", 0, 1, "")]));
    ok("commit", tx.commit());
    faults::set_commit_hook(Some(std::sync::Arc::new(move |s| {
        if s == step {
            // SAFETY: kill(2) on this process with SIGKILL.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    })));
    let tx = ok("begin", p.begin_transaction());
    send_some(&tx, "second", 6);
    ok("offsets", tx.send_offsets_to("g", &[("b", 0, 3, "")]));
    let _ = tx.commit();
    std::process::exit(0);
}

/// Runs the crash child to `step` in a prepared directory; whether its
/// second transaction passed its commit point.
fn crash_at(dirs: &Dirs, step: &str, name: &str) -> bool {
    let mut child = spawn("crash", name, dirs, step);
    let status = child.wait_for(Duration::from_secs(60)).unwrap();
    assert!(!status.success(), "{step}: {status}\n{}", child.output());
    assert!(
        !child.output().contains("ERROR"),
        "{step}:\n{}",
        child.output()
    );
    !matches!(step, "written" | "synced")
}

/// The committed offset of group `g` on b/0.
fn committed_offset(mq: &Broker) -> u64 {
    let mut c = mq.consumer(ConsumerConfig::group("g")).unwrap();
    c.subscribe(&["b"]).unwrap();
    c.committed("b", 0).unwrap().unwrap().offset
}

/// Checks what the three partitions hold after the crash at `step`.
fn check_after(mq: &Broker, step: &str, committed: bool, how: &str) {
    let all = values(mq);
    let at = format!("step {step}, finished by {how}");
    assert_eq!(count(&all, "first-"), 6, "{at}: {all:?}");
    assert_eq!(count(&all, "in-"), 3, "{at}: {all:?}");
    let whole = if committed { 6 } else { 0 };
    assert_eq!(count(&all, "second-"), whole, "{at}: {all:?}");
    assert_eq!(committed_offset(mq), if committed { 3 } else { 1 }, "{at}");
    // Appends go on at the end, after any marker written back.
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    for (t, p) in PARTS {
        let md = plain
            .send(Record::new(t).partition(p).value("after"))
            .unwrap();
        assert_eq!(
            md.offset + 1,
            mq.topic(t).unwrap().partitions[p as usize].end_offset,
            "{at}"
        );
    }
}

#[test]
fn a_committer_killed_at_every_step_leaves_its_transaction_whole_or_absent() {
    for (step, _) in STEPS {
        // Finished by a process that was open all along: its appends take
        // each partition's append lock over from the dead committer, and
        // its next commit finishes the offsets.
        let dirs = Dirs::new();
        prepare(&dirs);
        let mq = Broker::open(&dirs.data, shared()).unwrap();
        let committed = crash_at(&dirs, step, "crash-live");
        let plain = mq.producer(ProducerConfig::default()).unwrap();
        for (t, p) in PARTS {
            plain
                .send(Record::new(t).partition(p).value("bump"))
                .unwrap();
        }
        let all = values(&mq);
        assert_eq!(
            count(&all, "second-"),
            if committed { 6 } else { 0 },
            "step {step}, appends: {all:?}"
        );
        let p = mq
            .producer(ProducerConfig::default().transactional_id("other"))
            .unwrap();
        let tx = p.begin_transaction().unwrap();
        tx.send(Record::new("b").value("other-0")).unwrap();
        tx.commit().unwrap();
        check_after(&mq, step, committed, "a live process");
        drop((p, plain));
        mq.close().unwrap();

        // Finished by the next shared open, before anything is appended.
        let dirs = Dirs::new();
        prepare(&dirs);
        let committed = crash_at(&dirs, step, "crash-open");
        let mq = Broker::open(&dirs.data, shared()).unwrap();
        check_after(&mq, step, committed, "a shared open");
        mq.close().unwrap();

        // Finished by the next exclusive open.
        let dirs = Dirs::new();
        prepare(&dirs);
        let committed = crash_at(&dirs, step, "crash-excl");
        let mq = Broker::open(&dirs.data, exclusive()).unwrap();
        check_after(&mq, step, committed, "an exclusive open");
        mq.close().unwrap();
        // And shared mode goes on from there.
        let mq = Broker::open(&dirs.data, shared()).unwrap();
        assert_eq!(
            count(&values(&mq), "second-"),
            if committed { 6 } else { 0 }
        );
        mq.close().unwrap();
    }
}

#[test]
fn a_newer_producer_in_another_process_fences_the_older() {
    let dirs = Dirs::new();
    prepare(&dirs);
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let p = mq
        .producer(ProducerConfig::default().transactional_id("etl"))
        .unwrap();
    let tx = p.begin_transaction().unwrap();
    tx.send(Record::new("b").value("older")).unwrap();
    spawn("newer", "newer", &dirs, "").expect_success(Duration::from_secs(60));
    let e = tx.commit().unwrap_err();
    assert_eq!(e.kind(), mqlite::ErrorKind::ProducerFenced, "{e}");
    let all = values(&mq);
    assert_eq!(all, ["newer"], "the fenced transaction wrote nothing");
    assert_eq!(
        p.begin_transaction().unwrap_err().kind(),
        mqlite::ErrorKind::ProducerFenced
    );
    mq.close().unwrap();
}

/// Commits a transaction over a/0, a/1 and b/0, deletes topic `a` and
/// creates it again, then dies before the commit point of a second
/// transaction just like the first (its parts at the same offsets, of the
/// same lengths, as the first's, whose commit record is still in the log).
fn recreate_child(env: &ChildEnv) {
    let mq = ok("open", Broker::open(&env.data, shared()));
    let p = ok(
        "producer",
        mq.producer(ProducerConfig::default().transactional_id("etl")),
    );
    let tx = ok("begin", p.begin_transaction());
    send_some(&tx, "first", 6);
    ok("commit", tx.commit());
    ok("delete", mq.delete_topic("a"));
    ok("create", mq.create_topic("a", TopicConfig::new(2)));
    faults::set_commit_hook(Some(std::sync::Arc::new(move |s| {
        if s == CommitStep::DataWritten {
            // SAFETY: kill(2) on this process with SIGKILL.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    })));
    let tx = ok("begin", p.begin_transaction());
    send_some(&tx, "first", 6);
    let _ = tx.commit();
    std::process::exit(0);
}

#[test]
fn a_commit_record_of_a_deleted_topic_finishes_nothing_in_its_successor() {
    let dirs = Dirs::new();
    prepare(&dirs);
    let mut child = spawn("recreate", "recreate", &dirs, "");
    let status = child.wait_for(Duration::from_secs(60)).unwrap();
    assert!(
        !status.success() && !child.output().contains("ERROR"),
        "{}",
        child.output()
    );
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    for (t, p) in PARTS {
        plain
            .send(Record::new(t).partition(p).value("bump"))
            .unwrap();
    }
    let got: Vec<Vec<String>> = PARTS
        .iter()
        .map(|(t, p)| {
            read_all(&mq, t, *p)
                .into_iter()
                .map(|(_, v)| String::from_utf8(v).unwrap())
                .collect()
        })
        .collect();
    assert_eq!(got[0], ["bump"], "a/0");
    assert_eq!(got[1], ["bump"], "a/1");
    assert_eq!(got[2], ["first-2", "first-5", "bump"], "b/0");
    drop(plain);
    mq.close().unwrap();
}

/// Commits `n` transactions of two records (a/0, a/1), `<name>:<i>`, as
/// transactional id `name`.
fn commit_many(mq: &Broker, name: &str, n: u64) {
    let p = ok(
        "producer",
        mq.producer(ProducerConfig::default().transactional_id(name)),
    );
    for i in 0..n {
        let tx = ok("begin", p.begin_transaction());
        for part in 0..2 {
            let v = format!("{name}:{i}");
            ok("send", tx.send(Record::new("a").partition(part).value(v)));
        }
        ok("commit", tx.commit());
    }
}

/// The size at which the emptying test's processes empty the log (64 MiB
/// without the hook).
const LOG_LIMIT: u64 = 1 << 20;

#[test]
fn the_transaction_log_is_emptied_while_processes_commit() {
    // Enough commits from two processes for the log to pass the size at
    // which a commit empties it (1 MiB here): 6,000 commits left 2.2 MB
    // with the emptying turned off (about 370 bytes a commit with its
    // note). Each process, from its second commit on, reads only what the
    // lock's page does not say is finished, so the one that empties the
    // log reads it whole first to learn the partitions to flush.
    faults::set_transaction_log_limit(Some(LOG_LIMIT));
    let n = pick(3000, 12_000);
    let dirs = Dirs::new();
    prepare(&dirs);
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let mut child = spawn("bulk", "bulk", &dirs, &n.to_string());
    child.wait_ready(Duration::from_secs(60));
    commit_many(&mq, "here", n);
    child.expect_success(Duration::from_secs(300));
    for p in 0..2 {
        let mut next: BTreeMap<String, u64> = BTreeMap::new();
        for (_, v) in read_all(&mq, "a", p) {
            let v = String::from_utf8(v).unwrap();
            let (name, i) = v.split_once(':').unwrap();
            let due = next.entry(name.to_owned()).or_default();
            assert_eq!(i.parse::<u64>().unwrap(), *due, "a/{p}: {v}");
            *due += 1;
        }
        assert_eq!(next.values().copied().collect::<Vec<_>>(), [n, n], "a/{p}");
    }
    // Emptied: it starts with a `start` entry (a frame: length, CRC, JSON).
    let log = std::fs::read(dirs.data.join("transactions.log")).unwrap();
    assert!(
        log.len() < LOG_LIMIT as usize,
        "transactions.log holds {} bytes",
        log.len()
    );
    let first = u32::from_le_bytes(log[..4].try_into().unwrap()) as usize;
    let entry = String::from_utf8_lossy(&log[8..8 + first]);
    assert!(entry.starts_with("{\"start\""), "{entry}");
    mq.close().unwrap();
    // The numbering went on across the emptying: a new producer commits
    // and a fresh open finds nothing to finish.
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    commit_many(&mq, "later", 3);
    assert_eq!(read_all(&mq, "a", 0).len() as u64, 2 * n + 3);
    mq.close().unwrap();
}

/// Opens the directory with the log's limit at [`LOG_LIMIT`] (past it, so
/// the open empties the log), noting every file synced meanwhile: prints
/// `log <bytes left>` and `synced <path in the directory>` for each.
fn empty_after_skip_child(env: &ChildEnv) {
    faults::set_transaction_log_limit(Some(LOG_LIMIT));
    let synced = Arc::new(Mutex::new(BTreeSet::new()));
    let seen = Arc::clone(&synced);
    let data = env.data.clone();
    faults::set_sync_hook(Some(Arc::new(move |path: &Path, _, before| {
        if let (false, Ok(rel)) = (before, path.strip_prefix(&data)) {
            seen.lock().unwrap().insert(rel.display().to_string());
        }
        Ok(())
    })));
    let mq = ok("open", Broker::open(&env.data, shared()));
    let log = std::fs::metadata(env.data.join("transactions.log")).unwrap();
    println!("log {}", log.len());
    for p in synced.lock().unwrap().iter() {
        println!("synced {p}");
    }
    ok("close", mq.close());
}

#[test]
fn a_process_that_skipped_finished_commits_flushes_their_partitions_before_emptying() {
    // Another process's commits, all finished, none flushed (it is killed
    // after them): the next process's first look at the log skips them
    // (the lock's page says they are finished), so it does not know which
    // partitions they wrote; emptying the log (at its open here, the log
    // being past the limit) must still make their markers durable first.
    let dirs = Dirs::new();
    prepare(&dirs);
    let mut fill = spawn("fill", "fill", &dirs, "4000");
    fill.wait_ready(Duration::from_secs(300));
    fill.kill9();
    let len = std::fs::metadata(dirs.data.join("transactions.log"))
        .unwrap()
        .len();
    assert!(len > LOG_LIMIT, "transactions.log holds only {len} bytes");
    let mut child = spawn("empty_after_skip", "empty", &dirs, "");
    child.expect_success(Duration::from_secs(120));
    let out = child.stdout();
    let left: u64 = child.line("log ").unwrap()[4..].parse().unwrap();
    assert!(left < 1024, "not emptied ({left} bytes left):\n{out}");
    for part in ["topics/a/0/", "topics/a/1/"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("synced {part}"))),
            "{part} not flushed before the log was emptied:\n{out}"
        );
    }
}

/// The transaction numbers of the commit records in `dir`'s log.
fn commit_numbers(dir: &Path) -> Vec<u64> {
    let log = std::fs::read(dir.join("transactions.log")).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at + 8 <= log.len() {
        let len = u32::from_le_bytes(log[at..at + 4].try_into().unwrap()) as usize;
        let entry: serde_json::Value = serde_json::from_slice(&log[at + 8..at + 8 + len]).unwrap();
        if let Some(txn) = entry.get("commit").and_then(|c| c.get("txn")) {
            out.push(txn.as_u64().unwrap());
        }
        at += 8 + len;
    }
    out
}

#[test]
fn a_process_that_skipped_finished_commits_numbers_its_own_after_them() {
    // The skipped commit records are where the numbering would come from:
    // the lock's page says what to number from instead.
    let dirs = Dirs::new();
    prepare(&dirs);
    let mut fill = spawn("fill", "fill", &dirs, "10");
    fill.wait_ready(Duration::from_secs(60));
    fill.kill9();
    let before = commit_numbers(&dirs.data);
    assert_eq!(before.len(), 10, "{before:?}");
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    commit_many(&mq, "later", 2);
    mq.close().unwrap();
    let all = commit_numbers(&dirs.data);
    assert_eq!(all.len(), 12, "{all:?}");
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
}

/// The first open after a restart of the machine (a new boot id: the
/// open checks every partition as after a power loss, then finishes the
/// transactions): prints `seconds <n>` and `offset <o>`.
fn after_restart_child(env: &ChildEnv) {
    faults::set_boot_id(Some(0x5eed_0000_0000_0000_0000_0000_0000_0001));
    let mq = ok("open", Broker::open(&env.data, shared()));
    println!("seconds {}", count(&values(&mq), "second-"));
    println!("offset {}", committed_offset(&mq));
    ok("close", mq.close());
}

#[test]
fn the_first_open_after_a_restart_keeps_a_committed_transaction() {
    for (step, _) in STEPS {
        let dirs = Dirs::new();
        prepare(&dirs);
        let committed = crash_at(&dirs, step, "crash");
        let mut child = spawn("after_restart", "restart", &dirs, "");
        child.expect_success(Duration::from_secs(60));
        let whole = if committed { 6 } else { 0 };
        assert_eq!(
            child.line("seconds"),
            Some(format!("seconds {whole}")),
            "step {step}:\n{}",
            child.output()
        );
        let offset = if committed { 3 } else { 1 };
        assert_eq!(child.line("offset"), Some(format!("offset {offset}")));
        // The next open (no restart) agrees.
        let mq = Broker::open(&dirs.data, shared()).unwrap();
        check_after(&mq, step, committed, "the first open after a restart");
        mq.close().unwrap();
    }
}

#[test]
fn a_commit_that_ended_is_not_finished_again_by_the_next_process() {
    // A commit that ended properly writes no `applied` note: the lock
    // file's page says it ended. Finishing it again would commit its
    // offsets again, over the later commit below.
    let dirs = Dirs::new();
    prepare(&dirs);
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    spawn("with_offsets", "t1", &dirs, "").expect_success(Duration::from_secs(60));
    assert_eq!(committed_offset(&mq), 2);
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    for i in 3..6 {
        plain.send(Record::new("b").value(format!("p{i}"))).unwrap();
    }
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.subscribe(&["b"]).unwrap();
    c.commit_offsets(&[("b", 0, 5, "")]).unwrap();
    drop(c);
    assert_eq!(committed_offset(&mq), 5);
    // This process's first commit reads the other's commit record.
    let p = mq
        .producer(ProducerConfig::default().transactional_id("other"))
        .unwrap();
    let tx = p.begin_transaction().unwrap();
    tx.send(Record::new("a").partition(0).value("t2")).unwrap();
    tx.commit().unwrap();
    assert_eq!(
        committed_offset(&mq),
        5,
        "finished again by the next commit"
    );
    mq.close().unwrap();
    // Neither by the next open in shared mode, nor in exclusive mode.
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    assert_eq!(committed_offset(&mq), 5, "finished again by a shared open");
    mq.close().unwrap();
    let mq = Broker::open(&dirs.data, exclusive()).unwrap();
    assert_eq!(
        committed_offset(&mq),
        5,
        "finished again by an exclusive open"
    );
    assert_eq!(count(&values(&mq), "t"), 2);
    mq.close().unwrap();
}

/// Commits transactions of three records (one per partition) in a loop
/// until asked to stop, as transactional id `<name>`; journals each
/// committed one (`c <incarnation>:<i>`) after its commit returned. The
/// argument is the incarnation. Every other transaction also commits a
/// group offset.
fn committer_child(env: &ChildEnv) {
    let inc: u64 = env.arg.parse().unwrap();
    let mq = ok("open", Broker::open(&env.data, shared()));
    let p = ok(
        "producer",
        mq.producer(ProducerConfig::default().transactional_id(&env.name)),
    );
    let plain = ok("producer", mq.producer(ProducerConfig::default()));
    let mut journal = Journal::open(&env.file(&format!("{}.journal", env.name)));
    env.ready();
    let mut i = 0u64;
    while !env.stopping() {
        let tx = ok("begin", p.begin_transaction());
        for (k, (t, part)) in PARTS.iter().enumerate() {
            let v = format!("{}:{inc}:{i}:{k}", env.name);
            ok("send", tx.send(Record::new(*t).partition(*part).value(v)));
        }
        if i.is_multiple_of(2) {
            ok(
                "offsets",
                tx.send_offsets_to(&format!("g-{}", env.name), &[("a", 0, i, "")]),
            );
        }
        ok("commit", tx.commit());
        journal.line(&format!("c {inc}:{i}"));
        ok(
            "plain",
            plain.send(Record::new("a").partition(1).value("plain")),
        );
        i += 1;
    }
}

#[test]
fn transactions_from_processes_killed_at_random_are_whole_or_absent() {
    let dirs = Dirs::new();
    prepare(&dirs);
    let names = ["t1", "t2"];
    let mut rng = Rng::new("shared-mode transactions storm");
    let mut inc = [0u64; 2];
    let mut procs: Vec<_> = names
        .iter()
        .map(|n| spawn("committer", n, &dirs, "0"))
        .collect();
    for p in &mut procs {
        p.wait_ready(Duration::from_secs(60));
    }
    let kills = pick(8, 60);
    // A reader in this process sees every transaction whole while they run.
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    for round in 0..kills {
        std::thread::sleep(Duration::from_millis(rng.range(50, 250)));
        let w = (round % 2) as usize;
        procs[w].kill9();
        check_whole(&mq, false);
        inc[w] += 1;
        procs[w] = spawn("committer", names[w], &dirs, &inc[w].to_string());
        procs[w].wait_ready(Duration::from_secs(60));
    }
    std::thread::sleep(Duration::from_millis(200));
    request_stop(&dirs.work);
    for p in &mut procs {
        p.expect_success(Duration::from_secs(60));
    }
    drop(mq);
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let seen = check_whole(&mq, true);
    for n in names {
        let journal = read_lines(&dirs.work.join(format!("{n}.journal")));
        assert!(!journal.is_empty(), "{n} committed nothing");
        for line in journal {
            let id = line.trim_start_matches("c ");
            assert!(
                seen.contains(&format!("{n}:{id}")),
                "{n} {id}: acknowledged, not found"
            );
        }
    }
    mq.close().unwrap();
}

/// Reads the three partitions through `mq` and checks that each holds
/// the transactions' records in the order each process committed them.
/// With `settled` (nothing runs), also that every transaction is whole:
/// its three records, one in each partition. (While others commit, a
/// transaction can be published in one partition and not yet in the next,
/// as in Kafka.) Returns the transactions found
/// (`<name>:<incarnation>:<i>`).
fn check_whole(mq: &Broker, settled: bool) -> BTreeSet<String> {
    let mut parts: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for (k, (t, p)) in PARTS.iter().enumerate() {
        let records = read_all(mq, t, *p);
        let mut last: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (_, v) in &records {
            let v = String::from_utf8(v.clone()).unwrap();
            if v == "plain" {
                continue;
            }
            let f: Vec<&str> = v.split(':').collect();
            assert_eq!(f.len(), 4, "{v}");
            assert_eq!(f[3], k.to_string(), "{v} in {t}/{p}");
            let (inc, i): (u64, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
            if let Some(prev) = last.insert(f[0].to_owned(), (inc, i)) {
                assert!(prev < (inc, i), "{v} after {prev:?} in {t}/{p}");
            }
            parts
                .entry(format!("{}:{inc}:{i}", f[0]))
                .or_default()
                .insert(k as u64);
        }
    }
    if settled {
        let torn: Vec<_> = parts.iter().filter(|(_, ks)| ks.len() != 3).collect();
        assert!(torn.is_empty(), "transactions not whole: {torn:?}");
    }
    parts.into_keys().collect()
}
