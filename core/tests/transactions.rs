//! Transactions: records across topics and partitions and consumer offsets
//! become visible together or not at all; aborts, fencing, limits, markers
//! never delivered and stepped over by positions and lag; `kill -9` at
//! every step of a commit.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{cfg, read_partition};
use mqlite::faults::{self, CommitStep};
use mqlite::{
    Acks, Broker, ConsumerConfig, Error, ErrorKind, OffsetReset, OpenMode, ProducerConfig, Record,
    TopicConfig,
};

fn open(dir: &Path) -> Broker {
    Broker::open(dir, cfg()).unwrap()
}

/// Exclusive mode, by name: after the crash of an exclusive-mode session's
/// commit (`txn_crash_child`), which only an exclusive open finishes.
fn open_exclusive(dir: &Path) -> Broker {
    Broker::open(dir, cfg().mode(OpenMode::Exclusive)).unwrap()
}

fn setup(mq: &Broker) {
    mq.create_topic("a", TopicConfig::new(2)).unwrap();
    mq.create_topic("b", TopicConfig::new(1)).unwrap();
}

fn txn_producer(mq: &Broker, id: &str) -> mqlite::Producer {
    mq.producer(ProducerConfig::default().transactional_id(id))
        .unwrap()
}

fn values(mq: &Broker, topic: &str, p: u32) -> Vec<String> {
    read_partition(mq, topic, p)
        .unwrap()
        .into_iter()
        .map(|m| String::from_utf8(m.value.unwrap()).unwrap())
        .collect()
}

fn end(mq: &Broker, topic: &str, p: u32) -> u64 {
    mq.topic(topic).unwrap().partitions[p as usize].end_offset
}

/// Sends `n` records of transaction `tag` over a/0, a/1 and b/0.
fn send_some(tx: &mqlite::Transaction, tag: &str, n: usize) {
    for i in 0..n {
        let (topic, p) = [("a", 0), ("a", 1), ("b", 0)][i % 3];
        tx.send(Record::new(topic).partition(p).value(format!("{tag}-{i}")))
            .unwrap();
    }
}

#[test]
fn a_commit_shows_everything_and_an_abort_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    setup(&mq);
    let p = txn_producer(&mq, "etl");
    let tx = p.begin_transaction().unwrap();
    send_some(&tx, "t1", 6);
    // Nothing is visible before the commit.
    assert_eq!((end(&mq, "a", 0), end(&mq, "b", 0)), (0, 0));
    let md = tx.commit().unwrap();
    assert_eq!(md.len(), 6);
    assert_eq!(
        (md[0].topic.as_ref(), md[0].partition, md[0].offset),
        ("a", 0, 0)
    );
    assert_eq!(
        (md[3].topic.as_ref(), md[3].partition, md[3].offset),
        ("a", 0, 1)
    );
    // Two records and a marker in each partition.
    assert_eq!(end(&mq, "a", 0), 3);
    assert_eq!(values(&mq, "a", 0), ["t1-0", "t1-3"]);
    assert_eq!(values(&mq, "a", 1), ["t1-1", "t1-4"]);
    assert_eq!(values(&mq, "b", 0), ["t1-2", "t1-5"]);

    let tx = p.begin_transaction().unwrap();
    send_some(&tx, "t2", 3);
    tx.abort().unwrap();
    {
        let tx = p.begin_transaction().unwrap();
        send_some(&tx, "t3", 3);
        // Dropped: aborted.
    }
    assert_eq!(end(&mq, "a", 0), 3);
    assert_eq!(values(&mq, "b", 0), ["t1-2", "t1-5"]);
    // Plain sends go on after the marker.
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    let m = plain
        .send(Record::new("a").partition(0).value("plain"))
        .unwrap();
    assert_eq!(m.offset, 3);
    assert_eq!(values(&mq, "a", 0), ["t1-0", "t1-3", "plain"]);
    mq.close().unwrap();
    // And after a reopen.
    let mq = open(tmp.path());
    assert_eq!(values(&mq, "a", 0), ["t1-0", "t1-3", "plain"]);
    assert_eq!(values(&mq, "b", 0), ["t1-2", "t1-5"]);
}

#[test]
fn a_caught_up_consumer_has_no_lag_behind_markers() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    setup(&mq);
    let p = txn_producer(&mq, "etl");
    for round in 0..3 {
        let tx = p.begin_transaction().unwrap();
        send_some(&tx, &format!("r{round}"), 3);
        tx.commit().unwrap();
    }
    for max in [1, 2, 500] {
        let mut c = mq
            .consumer(
                ConsumerConfig::group(format!("g{max}"))
                    .auto_offset_reset(OffsetReset::Earliest)
                    .max_poll_records(max),
            )
            .unwrap();
        c.subscribe(&["b"]).unwrap();
        let mut got = Vec::new();
        for _ in 0..20 {
            got.extend(c.poll(Duration::from_millis(50)).unwrap());
            if got.len() == 3 {
                break;
            }
        }
        assert_eq!(got.len(), 3, "max_poll_records {max}");
        assert_eq!(c.position("b", 0).unwrap(), 6, "max_poll_records {max}");
        let lag = c.lag().unwrap();
        assert_eq!(lag, vec![("b".to_string(), 0, 0)], "max_poll_records {max}");
        c.commit().unwrap();
    }
    // A seek onto a marker delivers the next record.
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[("b", 0)]).unwrap();
    c.seek("b", 0, 1).unwrap();
    let got = c.poll(Duration::from_millis(100)).unwrap();
    assert_eq!(got[0].offset(), 2);
    assert_eq!(got[0].value(), Some(&b"r1-2"[..]));
}

#[test]
fn offsets_commit_with_the_records() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    setup(&mq);
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..4 {
        plain
            .send(Record::new("b").value(format!("in-{i}")))
            .unwrap();
    }
    let p = txn_producer(&mq, "etl");
    let mut c = mq
        .consumer(ConsumerConfig::group("g").auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.subscribe(&["b"]).unwrap();
    let mut got = Vec::new();
    while got.len() < 4 {
        got.extend(c.poll(Duration::from_millis(100)).unwrap());
    }
    // Aborted: neither the output nor the offsets.
    let tx = p.begin_transaction().unwrap();
    tx.send(Record::new("a").partition(0).value("out")).unwrap();
    tx.send_offsets(&c).unwrap();
    tx.abort().unwrap();
    assert_eq!(c.committed("b", 0).unwrap(), None);
    assert_eq!(end(&mq, "a", 0), 0);
    // Committed: both.
    let tx = p.begin_transaction().unwrap();
    tx.send(Record::new("a").partition(0).value("out")).unwrap();
    tx.send_offsets(&c).unwrap();
    tx.commit().unwrap();
    assert_eq!(c.committed("b", 0).unwrap().unwrap().offset, 4);
    assert_eq!(values(&mq, "a", 0), ["out"]);
    // Explicit offsets: checked first, nothing added on an error.
    let tx = p.begin_transaction().unwrap();
    let e = tx.send_offsets_to("g", &[("b", 0, 99, "")]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OffsetOutOfRange);
    let e = tx.send_offsets_to("g", &[("nope", 0, 1, "")]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownTopic);
    tx.send_offsets_to("g", &[("b", 0, 2, "meta")]).unwrap();
    tx.commit().unwrap();
    let got = c.committed("b", 0).unwrap().unwrap();
    assert_eq!((got.offset, got.metadata.as_str()), (2, "meta"));
}

#[test]
fn a_newer_producer_fences_the_older_and_its_transaction() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    setup(&mq);
    let old = txn_producer(&mq, "etl");
    let tx = old.begin_transaction().unwrap();
    tx.send(Record::new("a").partition(0).value("zombie"))
        .unwrap();
    let new = txn_producer(&mq, "etl");
    assert_eq!(tx.commit().unwrap_err().kind(), ErrorKind::ProducerFenced);
    assert_eq!(
        old.begin_transaction().unwrap_err().kind(),
        ErrorKind::ProducerFenced
    );
    let tx = new.begin_transaction().unwrap();
    tx.send(Record::new("a").partition(0).value("fresh"))
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(values(&mq, "a", 0), ["fresh"]);
    // A transactional id and a producer name of the same spelling are
    // different things.
    let named = mq.producer(ProducerConfig::default().name("etl")).unwrap();
    named.send(Record::new("b").value("named")).unwrap();
    let tx = new.begin_transaction().unwrap();
    tx.send(Record::new("b").value("still")).unwrap();
    tx.commit().unwrap();
}

#[test]
fn bad_use_gets_typed_errors_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    setup(&mq);
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    assert_eq!(
        plain.begin_transaction().unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let e = mq
        .producer(ProducerConfig::default().transactional_id("bad id"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let p = mq
        .producer(
            ProducerConfig::default()
                .transactional_id("small")
                .max_transaction_bytes(300),
        )
        .unwrap();
    let tx = p.begin_transaction().unwrap();
    // One open at a time.
    assert_eq!(
        p.begin_transaction().unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    tx.send(Record::new("a").partition(0).value(vec![1u8; 100]))
        .unwrap();
    let e = tx
        .send(Record::new("a").partition(0).value(vec![2u8; 400]))
        .unwrap_err();
    assert!(
        matches!(e, Error::TransactionTooLarge { max: 300, .. }),
        "{e}"
    );
    assert_eq!(
        tx.send(Record::new("nope").value("x")).unwrap_err().kind(),
        ErrorKind::UnknownTopic
    );
    assert_eq!(
        tx.send(Record::new("a").partition(7).value("x"))
            .unwrap_err()
            .kind(),
        ErrorKind::UnknownPartition
    );
    assert_eq!(
        tx.send(Record::new("a").value("x").sequence(1))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(tx.len(), 1);
    tx.commit().unwrap();
    assert_eq!(read_partition(&mq, "a", 0).unwrap().len(), 1);
    // A transaction open too long is aborted.
    let slow = mq
        .producer(
            ProducerConfig::default()
                .transactional_id("slow")
                .transaction_timeout_ms(50),
        )
        .unwrap();
    let tx = slow.begin_transaction().unwrap();
    tx.send(Record::new("b").value("late")).unwrap();
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(tx.commit().unwrap_err().kind(), ErrorKind::Timeout);
    assert_eq!(end(&mq, "b", 0), 0);
    // The producer can start a new one.
    slow.begin_transaction().unwrap().abort().unwrap();
    // A closed producer.
    let tx = p.begin_transaction().unwrap();
    p.close().unwrap();
    assert_eq!(
        tx.send(Record::new("b").value("x")).unwrap_err().kind(),
        ErrorKind::Closed
    );
}

#[test]
fn transactions_from_threads_are_whole_or_absent() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    setup(&mq);
    std::thread::scope(|s| {
        for t in 0..4 {
            let mq = &mq;
            s.spawn(move || {
                let p = txn_producer(mq, &format!("w{t}"));
                for n in 0..30 {
                    let tx = p.begin_transaction().unwrap();
                    send_some(&tx, &format!("w{t}.{n}"), 5);
                    if n % 3 == 0 {
                        tx.abort().unwrap();
                    } else {
                        tx.commit().unwrap();
                    }
                }
            });
        }
        // A plain producer in between.
        let plain = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..100 {
            plain
                .send(
                    Record::new("a")
                        .partition(i % 2)
                        .value(format!("plain-{i}")),
                )
                .unwrap();
        }
    });
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for (t, p) in [("a", 0), ("a", 1), ("b", 0)] {
        for v in values(&mq, t, p) {
            if let Some((tag, _)) = v.rsplit_once('-') {
                if !tag.starts_with("plain") {
                    *seen.entry(tag.to_owned()).or_default() += 1;
                }
            }
        }
    }
    assert_eq!(seen.len(), 4 * 20, "committed transactions");
    for (tag, n) in &seen {
        assert_eq!(*n, 5, "transaction {tag} is not whole");
        let n: usize = tag.rsplit('.').next().unwrap().parse().unwrap();
        assert_ne!(n % 3, 0, "aborted transaction {tag} is visible");
    }
}

const CHILD_DIR: &str = "MQLITE_TXN_CHILD_DIR";
const CHILD_STEP: &str = "MQLITE_TXN_CHILD_STEP";
const CHILD_ACKS: &str = "MQLITE_TXN_CHILD_ACKS";

const STEPS: [(&str, CommitStep); 7] = [
    ("written", CommitStep::DataWritten),
    ("synced", CommitStep::DataSynced),
    ("committed", CommitStep::Committed),
    ("marked", CommitStep::PartMarked),
    ("part", CommitStep::PartPublished),
    ("published", CommitStep::Published),
    ("offsets", CommitStep::OffsetsApplied),
];

/// The child: one committed transaction, then a second one during whose
/// commit it dies (`kill -9` of itself) at the step named in the
/// environment. A no-op in a normal test run.
#[test]
fn txn_crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let step = std::env::var(CHILD_STEP).unwrap();
    let step = STEPS.iter().find(|(n, _)| *n == step).unwrap().1;
    let acks = if std::env::var(CHILD_ACKS).unwrap() == "all" {
        Acks::All
    } else {
        Acks::One
    };
    // Exclusive mode, by name: the crash of an exclusive-mode session's
    // commit (shared mode's are finished by the next committer).
    let mq = Broker::open(Path::new(&dir), cfg().mode(OpenMode::Exclusive)).unwrap();
    setup(&mq);
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..3 {
        plain
            .send(Record::new("b").value(format!("in-{i}")))
            .unwrap();
    }
    let p = mq
        .producer(ProducerConfig::default().transactional_id("etl").acks(acks))
        .unwrap();
    let tx = p.begin_transaction().unwrap();
    send_some(&tx, "first", 6);
    tx.send_offsets_to("g", &[("b", 0, 1, "")]).unwrap();
    tx.commit().unwrap();
    faults::set_commit_hook(Some(std::sync::Arc::new(move |s| {
        if s == step {
            // SAFETY: kill(2) on this process with SIGKILL.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    })));
    let tx = p.begin_transaction().unwrap();
    send_some(&tx, "second", 6);
    tx.send_offsets_to("g", &[("b", 0, 3, "")]).unwrap();
    let _ = tx.commit();
    // A step the commit never reaches (no `DataSynced` with `acks=1`).
    std::process::exit(0);
}

#[test]
fn kill_9_at_every_commit_step_leaves_it_whole_or_absent() {
    let exe = std::env::current_exe().unwrap();
    for acks in ["1", "all"] {
        for (name, step) in STEPS {
            let tmp = tempfile::tempdir().unwrap();
            let status = Command::new(&exe)
                .args([
                    "--exact",
                    "txn_crash_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DIR, tmp.path())
                .env(CHILD_STEP, name)
                .env(CHILD_ACKS, acks)
                .status()
                .unwrap();
            let reached = !(step == CommitStep::DataSynced && acks == "1");
            assert_eq!(
                status.success(),
                !reached,
                "acks={acks} step {name}: {status}"
            );
            let committed =
                reached && step != CommitStep::DataWritten && step != CommitStep::DataSynced;
            let committed = committed || !reached;
            for round in 0..2 {
                let mq = open_exclusive(tmp.path());
                let mut all = Vec::new();
                for (t, p) in [("a", 0), ("a", 1), ("b", 0)] {
                    all.extend(values(&mq, t, p));
                }
                let second = all.iter().filter(|v| v.starts_with("second-")).count();
                let first = all.iter().filter(|v| v.starts_with("first-")).count();
                let at = format!("acks={acks} step {name} open {round}");
                assert_eq!(first, 6, "{at}");
                assert_eq!(second, if committed { 6 } else { 0 }, "{at}: {all:?}");
                let mut c = mq.consumer(ConsumerConfig::group("g")).unwrap();
                c.subscribe(&["b"]).unwrap();
                let offset = c.committed("b", 0).unwrap().unwrap().offset;
                assert_eq!(offset, if committed { 3 } else { 1 }, "{at}");
                drop(c);
                // Appends go on at the end, after any marker written back.
                let plain = mq.producer(ProducerConfig::default()).unwrap();
                let md = plain
                    .send(
                        Record::new("a")
                            .partition(0)
                            .value(format!("after-{round}")),
                    )
                    .unwrap();
                assert_eq!(md.offset + 1, end(&mq, "a", 0), "{at}");
                drop(plain);
                mq.close().unwrap();
            }
        }
    }
}

#[test]
fn both_isolation_levels_read_the_same_records() {
    use mqlite::IsolationLevel;
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    setup(&mq);
    let p = txn_producer(&mq, "etl");
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    for n in 0..5 {
        let tx = p.begin_transaction().unwrap();
        send_some(&tx, &format!("t{n}"), 3);
        plain.send(Record::new("b").value(format!("p{n}"))).unwrap();
        if n % 2 == 0 {
            tx.commit().unwrap();
        } else {
            tx.abort().unwrap();
        }
    }
    let read = |level: IsolationLevel| {
        let mut c = mq
            .consumer(ConsumerConfig::default().isolation_level(level))
            .unwrap();
        c.assign(&[("b", 0)]).unwrap();
        let mut out = Vec::new();
        loop {
            let got = c.poll(Duration::from_millis(20)).unwrap();
            if got.is_empty() {
                break;
            }
            out.extend(
                got.iter()
                    .map(|m| (m.offset(), m.value().unwrap().to_vec())),
            );
        }
        (out, c.position("b", 0).unwrap())
    };
    let committed = read(IsolationLevel::ReadCommitted);
    assert_eq!(committed, read(IsolationLevel::ReadUncommitted));
    let values: Vec<&[u8]> = committed.0.iter().map(|(_, v)| v.as_slice()).collect();
    assert_eq!(
        values,
        [
            &b"p0"[..],
            b"t0-2",
            b"p1",
            b"p2",
            b"t2-2",
            b"p3",
            b"p4",
            b"t4-2"
        ]
    );
    assert_eq!(committed.1, end(&mq, "b", 0));
    assert_eq!(
        IsolationLevel::parse("read_uncommitted").unwrap(),
        IsolationLevel::ReadUncommitted
    );
    assert_eq!(
        IsolationLevel::parse("serializable").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn recovery_counts_an_abandoned_transaction() {
    let exe = std::env::current_exe().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let status = Command::new(&exe)
        .args([
            "--exact",
            "txn_crash_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, tmp.path())
        .env(CHILD_STEP, "written")
        .env(CHILD_ACKS, "1")
        .status()
        .unwrap();
    assert!(!status.success());
    let mq = open_exclusive(tmp.path());
    let abandoned: u64 = ["a", "b"]
        .iter()
        .flat_map(|t| mq.topic(t).unwrap().partitions)
        .map(|p| p.recovery.abandoned_transactions)
        .sum();
    assert_eq!(abandoned, 3, "one part in each of the three partitions");
    let torn: u64 = ["a", "b"]
        .iter()
        .flat_map(|t| mq.topic(t).unwrap().partitions)
        .map(|p| p.recovery.torn_tails + p.recovery.corruptions)
        .sum();
    assert_eq!(torn, 0);
}

#[test]
fn offsets_of_a_member_that_lost_its_partitions_fail_the_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    setup(&mq);
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    for p in 0..2 {
        plain
            .send(Record::new("a").partition(p).value("in"))
            .unwrap();
    }
    let member = |name: &str| {
        let mut c = mq
            .consumer(
                ConsumerConfig::group("g")
                    .client_id(name)
                    .auto_offset_reset(OffsetReset::Earliest)
                    .enable_auto_commit(false),
            )
            .unwrap();
        c.subscribe(&["a"]).unwrap();
        c
    };
    let mut c1 = member("c1");
    let mut got = 0;
    while got < 2 {
        got += c1.poll(Duration::from_millis(50)).unwrap().len();
    }
    let p = txn_producer(&mq, "etl");
    let tx = p.begin_transaction().unwrap();
    tx.send(Record::new("b").value("out")).unwrap();
    tx.send_offsets(&c1).unwrap();
    // A second member takes one of c1's partitions.
    let mut c2 = member("c2");
    for _ in 0..20 {
        c2.poll(Duration::from_millis(20)).unwrap();
        c1.poll(Duration::from_millis(20)).unwrap();
        if c1.assignment().len() == 1 && c2.assignment().len() == 1 {
            break;
        }
    }
    assert_eq!(c1.assignment().len(), 1);
    let e = tx.commit().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CommitFailed, "{e}");
    assert_eq!(end(&mq, "b", 0), 0, "nothing written");
    assert_eq!(c1.committed("a", 0).unwrap(), None);
    // With the partitions it still owns, it commits.
    let tx = p.begin_transaction().unwrap();
    tx.send(Record::new("b").value("out")).unwrap();
    tx.send_offsets(&c1).unwrap();
    tx.commit().unwrap();
    assert_eq!(values(&mq, "b", 0), ["out"]);
}

#[test]
fn a_transaction_to_a_deleted_topic_fails_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    setup(&mq);
    let p = txn_producer(&mq, "etl");
    let tx = p.begin_transaction().unwrap();
    tx.send(Record::new("a").partition(0).value("x")).unwrap();
    tx.send(Record::new("b").value("y")).unwrap();
    mq.delete_topic("b").unwrap();
    assert!(tx.commit().is_err());
    assert_eq!(end(&mq, "a", 0), 0, "nothing of it in the other topic");
    let tx = p.begin_transaction().unwrap();
    tx.send(Record::new("a").partition(0).value("z")).unwrap();
    tx.commit().unwrap();
    assert_eq!(values(&mq, "a", 0), ["z"]);
}

#[test]
fn no_transaction_begins_once_the_broker_is_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    setup(&mq);
    let p = txn_producer(&mq, "etl");
    let plain = mq.producer(ProducerConfig::default()).unwrap();
    mq.close().unwrap();
    assert!(matches!(p.begin_transaction(), Err(Error::Closed(_))));
    // Closed comes before "no transactional id", as for every call.
    assert!(matches!(plain.begin_transaction(), Err(Error::Closed(_))));
}

const RECREATE_DIR: &str = "MQLITE_TXN_RECREATE_DIR";

/// The child: commits a transaction, deletes topic `a` and creates it
/// again, then dies before the commit point of a second transaction just
/// like the first (its parts at the same offsets, of the same lengths, as
/// the first's, whose commit record is still in the transaction log). A
/// no-op in a normal test run.
#[test]
fn txn_recreate_child() {
    let Ok(dir) = std::env::var(RECREATE_DIR) else {
        return;
    };
    let mq = open(Path::new(&dir));
    setup(&mq);
    let p = txn_producer(&mq, "etl");
    let tx = p.begin_transaction().unwrap();
    send_some(&tx, "first", 6);
    tx.commit().unwrap();
    mq.delete_topic("a").unwrap();
    mq.create_topic("a", TopicConfig::new(2)).unwrap();
    faults::set_commit_hook(Some(std::sync::Arc::new(|s| {
        if s == CommitStep::DataWritten {
            // SAFETY: kill(2) on this process with SIGKILL.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    })));
    let tx = p.begin_transaction().unwrap();
    send_some(&tx, "first", 6);
    let _ = tx.commit();
    std::process::exit(0);
}

#[test]
fn a_commit_record_of_a_deleted_topic_keeps_nothing_of_its_successor() {
    let tmp = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "txn_recreate_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(RECREATE_DIR, tmp.path())
        .status()
        .unwrap();
    assert!(!status.success());
    let mq = open(tmp.path());
    assert_eq!(values(&mq, "a", 0), Vec::<String>::new());
    assert_eq!(values(&mq, "a", 1), Vec::<String>::new());
    assert_eq!(values(&mq, "b", 0), ["first-2", "first-5"]);
    mq.close().unwrap();
}

/// Runs the crash child to `step` (`acks=1`) in a fresh directory.
fn crashed_at(step: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "txn_crash_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, tmp.path())
        .env(CHILD_STEP, step)
        .env(CHILD_ACKS, "1")
        .status()
        .unwrap();
    assert!(!status.success());
    tmp
}

/// Every value of the three partitions, through a broker opened with `config`.
fn all_values(dir: &Path, config: mqlite::Config) -> mqlite::Result<Vec<String>> {
    let mq = Broker::open(dir, config)?;
    let mut all = Vec::new();
    for (t, p) in [("a", 0), ("a", 1), ("b", 0)] {
        all.extend(values(&mq, t, p));
    }
    mq.close()?;
    Ok(all)
}

#[test]
fn shared_mode_never_shows_or_overwrites_an_unfinished_transaction() {
    let seconds = |v: &[String]| v.iter().filter(|v| v.starts_with("second-")).count();
    for (step, committed) in [("written", false), ("committed", true)] {
        let tmp = crashed_at(step);
        // A shared open that could write is refused until an exclusive
        // open finished what the crash left: after the commit point, the
        // records are there, not yet readable, and would be written over.
        let e = Broker::open(tmp.path(), cfg().shared(true)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Locked, "{step}: {e}");
        assert!(e.to_string().contains("exclusive mode"), "{e}");
        // A read-only one reads, without the unfinished transaction.
        let v = all_values(tmp.path(), cfg().shared(true).readonly(true)).unwrap();
        assert_eq!(seconds(&v), 0, "{step}: {v:?}");
        assert_eq!(v.iter().filter(|v| v.starts_with("first-")).count(), 6);
        let whole = if committed { 6 } else { 0 };
        assert_eq!(
            seconds(&all_values(tmp.path(), cfg().mode(OpenMode::Exclusive)).unwrap()),
            whole,
            "{step}"
        );
        let v = all_values(tmp.path(), cfg().shared(true)).unwrap();
        assert_eq!(seconds(&v), whole, "{step}");
    }
}
