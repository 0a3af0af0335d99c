//! Many partitions, most of them idle: the descriptor limit
//! (`Config::max_open_files`), the directory's unclean mark (one sync for
//! the first appends of every partition, and a crash after them still
//! checked), the syncs of creating and recovering many partitions (two
//! syncs of the filesystem, not one per file), and what a bad limit gets.
//!
//! The crash test's child is this test binary itself, re-run with
//! `--exact crash_child` and `MQLITE_IDLE_CHILD_DIR` set.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::{cfg, read_partition, segment_logs};
use mqlite::faults::{set_sync_hook, SyncKind};
use mqlite::{
    Acks, Broker, Config, Error, OpenMode, ProducerConfig, Record, RecoveryStats, TopicConfig,
};

/// Exclusive mode, by name: for the tests that check its unclean mark and the
/// checks of its open after a crash (docs/decisions.md, "A data directory's
/// mode by name").
fn exclusive() -> Config {
    cfg().mode(OpenMode::Exclusive)
}

const CHILD_DIR: &str = "MQLITE_IDLE_CHILD_DIR";
const TOPIC: &str = "t";

fn value(p: u32, i: u32, len: usize) -> Vec<u8> {
    let mut v = format!("{p}-{i}-").into_bytes();
    v.resize(len.max(v.len()), (p + i) as u8);
    v
}

/// A limit of 0 descriptors is refused before anything is created.
#[test]
fn zero_max_open_files_is_invalid() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let err = Broker::open(&dir, cfg().max_open_files(0)).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(!dir.exists(), "nothing is created for a bad config");
    assert!(cfg().max_open_files(0).validate().is_err());
    assert!(cfg().max_open_files(1).validate().is_ok());
}

/// A descriptor limit far below the number of partitions: every
/// partition is written (small batches, large `pwrite` ones flushed at
/// once, segment rolls, file growth) and read back whole, before and
/// after a reopen.
#[test]
fn fewer_descriptors_than_partitions_read_and_write_everything() {
    const PARTITIONS: u32 = 40;
    let tmp = tempfile::tempdir().unwrap();
    let config = || cfg().max_open_files(3);
    let mq = Broker::open(tmp.path(), config()).unwrap();
    mq.create_topic(TOPIC, TopicConfig::new(PARTITIONS).segment_bytes(128 << 10))
        .unwrap();
    let all = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    let one = mq.producer(ProducerConfig::default()).unwrap();
    let mut sent: Vec<Vec<Vec<u8>>> = vec![Vec::new(); PARTITIONS as usize];
    for round in 0..6u32 {
        for p in 0..PARTITIONS {
            // Rounds 2 and 4 send batches large enough for `pwrite` (they
            // need the active segment's descriptor), the others small ones.
            let len = if round % 2 == 0 && round > 0 {
                80 << 10
            } else {
                100
            };
            let v = value(p, round, len);
            let producer = if round % 3 == 0 { &one } else { &all };
            producer
                .send(Record::new(TOPIC).partition(p).value(v.clone()))
                .unwrap();
            sent[p as usize].push(v);
        }
    }
    let check = |mq: &Broker, what: &str| {
        for p in 0..PARTITIONS {
            let got: Vec<Vec<u8>> = read_partition(mq, TOPIC, p)
                .unwrap()
                .into_iter()
                .map(|m| m.value.unwrap())
                .collect();
            assert!(got == sent[p as usize], "{what}: partition {p} differs");
        }
    };
    check(&mq, "before the reopen");
    assert!(
        segment_logs(tmp.path(), TOPIC, 0).len() > 1,
        "the segments should have rolled"
    );
    drop((all, one));
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(tmp.path(), config()).unwrap();
    check(&mq, "after the reopen");
    let info = mq.topic(TOPIC).unwrap();
    for p in &info.partitions {
        assert_eq!(p.recovery, RecoveryStats::default(), "a clean reopen");
    }
}

/// Held by each test that installs a sync hook, for as long as it counts:
/// the hook is one for the whole process, and tests run on threads of one.
static HOOK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`HOOK`] (a test that failed holding it does not fail the others).
fn hold_hook() -> std::sync::MutexGuard<'static, ()> {
    HOOK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Counts the file syncs (fsync, fdatasync) of files under `dir`.
fn count_file_syncs(dir: &Path) -> Arc<AtomicU64> {
    let n = Arc::new(AtomicU64::new(0));
    let (c, dir) = (Arc::clone(&n), dir.to_owned());
    set_sync_hook(Some(Arc::new(move |path: &Path, kind, before| {
        if !before && path.starts_with(&dir) && kind == SyncKind::File {
            c.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    })));
    n
}

/// The first append to each of many partitions after an open costs one
/// sync for them all (the directory's session), not one each.
#[test]
fn first_appends_after_an_open_sync_once() {
    let _hook = hold_hook();
    const PARTITIONS: u32 = 200;
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic(TOPIC, TopicConfig::new(PARTITIONS))
            .unwrap();
        mq.close().unwrap();
    }
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let syncs = count_file_syncs(tmp.path());
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    for p in 0..PARTITIONS {
        producer
            .send(Record::new(TOPIC).partition(p).value(&b"x"[..]))
            .unwrap();
    }
    let n = syncs.load(Ordering::Relaxed);
    set_sync_hook(None);
    assert!(
        (1..=2).contains(&n),
        "{n} file syncs for the first appends to {PARTITIONS} partitions"
    );
    // The session file is what was synced.
    assert!(tmp.path().join("recovery.session").exists());
}

/// The child: opens the directory, appends one record to partition 0 and
/// ends at once, as `kill -9` would (no close: the page cache keeps it).
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let mq = Broker::open(&dir, cfg()).unwrap();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    producer
        .send(Record::new(TOPIC).partition(0).value(vec![b'c'; 300]))
        .unwrap();
    std::process::exit(0); // no destructor runs: nothing is closed
}

fn run_crash_child(dir: &Path) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Flips a byte inside the last batch of partition 0's active segment.
fn damage_last_batch(dir: &Path) {
    let log = segment_logs(dir, TOPIC, 0).pop().unwrap();
    let mut bytes = std::fs::read(&log).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap();
    bytes[end - 10] ^= 0x40;
    std::fs::write(&log, bytes).unwrap();
}

/// A partition appended to after its clean close and then crashed is
/// checked like any unclean shutdown (its damaged tail is a torn write,
/// cut, not corruption of a clean log), although its recovery point still
/// says "closed cleanly": the directory's session moved on before the
/// append. A partition closed cleanly in the last session is trusted.
#[test]
fn a_crash_after_the_first_append_is_recovered_as_unclean() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    {
        let mq = Broker::open(dir, exclusive()).unwrap();
        mq.create_topic(TOPIC, TopicConfig::new(2)).unwrap();
        let producer = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..20u32 {
            for p in 0..2 {
                producer
                    .send(Record::new(TOPIC).partition(p).value(value(p, i, 300)))
                    .unwrap();
            }
        }
        drop(producer);
        mq.close().unwrap();
    }
    run_crash_child(dir);
    damage_last_batch(dir);
    {
        let mq = Broker::open(dir, exclusive()).unwrap();
        let info = mq.topic(TOPIC).unwrap();
        let r = info.partitions[0].recovery;
        assert_eq!(info.partitions[0].end_offset, 20, "the torn batch is cut");
        assert_eq!(
            (r.torn_tails, r.corruptions, r.quarantined_bytes),
            (1, 0, 0),
            "recovered as after an unclean shutdown: {r:?}"
        );
        assert_eq!(info.partitions[1].recovery, RecoveryStats::default());
        assert_eq!(read_partition(&mq, TOPIC, 0).unwrap().len(), 20);
        mq.close().unwrap();
    }
    // Closed cleanly now: the same damage is corruption of a clean log.
    damage_last_batch(dir);
    let mq = Broker::open(dir, exclusive()).unwrap();
    let r = mq.topic(TOPIC).unwrap().partitions[0].recovery;
    assert_eq!(
        (r.torn_tails, r.corruptions),
        (0, 1),
        "a clean close is trusted: {r:?}"
    );
    assert!(r.quarantined_bytes > 0);
}

/// Counts, under `dir`, the file syncs (fsync, fdatasync) and the
/// filesystem syncs (syncfs); with `fail_fs`, the filesystem sync number
/// `fail_fs` (from 1) fails as a disk error would.
fn count_syncs_by_kind(dir: &Path, fail_fs: Option<u64>) -> (Arc<AtomicU64>, Arc<AtomicU64>) {
    let (files, fs) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (f, s, dir) = (Arc::clone(&files), Arc::clone(&fs), dir.to_owned());
    set_sync_hook(Some(Arc::new(move |path: &Path, kind, before| {
        if !path.starts_with(&dir) {
            return Ok(());
        }
        match (kind, before) {
            (SyncKind::Filesystem, true) => {
                let n = s.fetch_add(1, Ordering::Relaxed) + 1;
                if fail_fs == Some(n) {
                    return Err(std::io::Error::from_raw_os_error(libc::EIO));
                }
            }
            (SyncKind::File, false) => {
                f.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        Ok(())
    })));
    (files, fs)
}

/// Creating many partitions makes their files durable with two syncs of
/// the filesystem (before and after their recovery points), not one sync
/// per file; the topic opens with every partition empty and writable.
#[test]
fn creating_many_partitions_syncs_the_filesystem_not_each_file() {
    let _hook = hold_hook();
    const PARTITIONS: u32 = 100;
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let (files, fs) = count_syncs_by_kind(tmp.path(), None);
    mq.create_topic(TOPIC, TopicConfig::new(PARTITIONS))
        .unwrap();
    let (files, fs) = (files.load(Ordering::Relaxed), fs.load(Ordering::Relaxed));
    set_sync_hook(None);
    assert_eq!(fs, 2, "filesystem syncs at the creation");
    assert!(
        files <= 2,
        "{files} file syncs for the creation of {PARTITIONS} partitions"
    );
    mq.close().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let info = mq.topic(TOPIC).unwrap();
    assert_eq!(info.partitions.len(), PARTITIONS as usize);
    for p in &info.partitions {
        assert_eq!((p.start_offset, p.end_offset), (0, 0));
        assert_eq!(p.recovery, RecoveryStats::default(), "a clean reopen");
    }
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    producer
        .send(Record::new(TOPIC).partition(PARTITIONS - 1).value("x"))
        .unwrap();
}

/// After a crash, the open checks every partition of every topic and makes
/// what it kept durable with two syncs of the filesystem for all topics
/// together (two topics whose files, each alone, would be synced one by
/// one), not one per file; when the second fails (as a crash during
/// recovery would end it), the open fails and the next one checks
/// everything again and recovers the same log.
#[test]
fn recovery_of_many_partitions_syncs_the_filesystem_not_each_file() {
    let _hook = hold_hook();
    const PARTITIONS: u32 = 40;
    const TOPICS: [&str; 2] = [TOPIC, "u"];
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    {
        let mq = Broker::open(dir, cfg()).unwrap();
        for t in TOPICS {
            mq.create_topic(t, TopicConfig::new(PARTITIONS)).unwrap();
        }
        let producer = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..5u32 {
            for t in TOPICS {
                for p in 0..PARTITIONS {
                    producer
                        .send(Record::new(t).partition(p).value(value(p, i, 100)))
                        .unwrap();
                }
            }
        }
        drop(producer);
        mq.close().unwrap();
    }
    run_crash_child(dir); // one more record in partition 0, no close
    damage_last_batch(dir);
    let (_, fs) = count_syncs_by_kind(dir, Some(2));
    let failed = Broker::open(dir, cfg());
    set_sync_hook(None);
    assert!(
        matches!(failed, Err(Error::Io { .. })),
        "{:?}",
        failed.err()
    );
    assert_eq!(fs.load(Ordering::Relaxed), 2);
    let (files, fs) = count_syncs_by_kind(dir, None);
    let mq = Broker::open(dir, cfg()).unwrap();
    let (files, fs) = (files.load(Ordering::Relaxed), fs.load(Ordering::Relaxed));
    set_sync_hook(None);
    assert_eq!(fs, 2, "filesystem syncs at the recovery");
    assert!(files <= 2, "{files} file syncs for the recovery");
    // The failed open cut the torn batch already; this one checked every
    // partition again (the two filesystem syncs: nothing to sync after a
    // clean open) and found nothing more to cut.
    let info = mq.topic(TOPIC).unwrap();
    assert_eq!(info.partitions[0].end_offset, 5, "the torn batch is cut");
    for t in TOPICS {
        for p in 0..PARTITIONS {
            let got = read_partition(&mq, t, p).unwrap();
            assert_eq!(got.len(), 5, "{t} partition {p}");
            assert_eq!(got[4].value, Some(value(p, 4, 100)), "{t} partition {p}");
        }
    }
}
