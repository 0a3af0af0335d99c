//! Groups shared by processes. Two `Group`s opened on one directory behave
//! as two processes would: each has its own descriptors (so its own
//! `flock`s) and its own map of the shared page. One test runs a member in
//! a child process and kills it.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::shared::PROBE_INTERVAL_MS;
use super::*;
use crate::assign::AssignmentStrategy;

fn spec(max_poll_ms: u64) -> MemberSpec {
    MemberSpec {
        topics: vec!["t".to_owned()],
        strategy: AssignmentStrategy::default(),
        wanted: Vec::new(),
        max_poll_interval: Duration::from_millis(max_poll_ms),
    }
}

fn counts(t: &str) -> Option<u32> {
    (t == "t").then_some(6)
}

fn open(dir: &Path) -> Group {
    std::fs::create_dir_all(dir.join("groups")).unwrap();
    Group::open_shared(dir, "g", 0o600).unwrap()
}

/// Syncs `id` until it has nothing to revoke, releasing what it must;
/// returns what it owns then.
fn settle(g: &Group, id: &str, owned: &mut BTreeSet<TopicPartition>) {
    for _ in 0..10 {
        let h = g.sync(id, &counts, None).unwrap();
        for tp in &h.revoke {
            owned.remove(tp);
        }
        if !h.revoke.is_empty() {
            g.release(id, &h.revoke, &counts);
        }
        owned.extend(h.acquired);
        if h.revoke.is_empty() {
            return;
        }
    }
}

fn wait_probe() {
    std::thread::sleep(Duration::from_millis(PROBE_INTERVAL_MS + 20));
}

#[test]
fn members_in_two_processes_split_the_partitions_with_one_owner_each() {
    let dir = tempfile::tempdir().unwrap();
    let (g1, g2) = (open(dir.path()), open(dir.path()));
    let a = g1.join("c", spec(60_000), &counts).unwrap();
    let (mut oa, mut ob) = (BTreeSet::new(), BTreeSet::new());
    settle(&g1, &a, &mut oa);
    assert_eq!(oa.len(), 6);
    let epoch = g1.epoch();
    let b = g2.join("c", spec(60_000), &counts).unwrap();
    assert_ne!(a, b, "ids are unique across processes");
    assert_ne!(
        g1.epoch(),
        epoch,
        "the join is seen through the shared page"
    );
    settle(&g2, &b, &mut ob);
    assert!(ob.is_empty(), "nothing is free until a releases");
    settle(&g1, &a, &mut oa);
    settle(&g2, &b, &mut ob);
    assert_eq!(oa.len() + ob.len(), 6);
    assert!(oa.is_disjoint(&ob));
    assert_eq!(ob.len(), 3);
    let (gen1, members1) = g1.describe(&counts);
    let (gen2, members2) = g2.describe(&counts);
    assert_eq!((gen1, &members1), (gen2, &members2));
    assert_eq!(members1.len(), 2);
    g2.leave(&b, &counts);
    settle(&g1, &a, &mut oa);
    assert_eq!(oa.len(), 6, "a takes over what b left");
    assert!(!g2.is_member(&b, &counts));
}

#[test]
fn a_member_whose_process_ended_is_removed_and_its_partitions_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let g1 = open(dir.path());
    let a = g1.join("c", spec(60_000), &counts).unwrap();
    let mut oa = BTreeSet::new();
    {
        let g2 = open(dir.path());
        let b = g2.join("c", spec(60_000), &counts).unwrap();
        let mut ob = BTreeSet::new();
        settle(&g1, &a, &mut oa);
        settle(&g2, &b, &mut ob);
        assert_eq!(ob.len(), 3);
        // g2 goes without leaving: its liveness lock ends with it.
    }
    wait_probe();
    settle(&g1, &a, &mut oa);
    assert_eq!(oa.len(), 6, "{oa:?}");
    let (_, members) = g1.describe(&counts);
    assert_eq!(members.len(), 1);
}

#[test]
fn a_member_polling_through_its_slot_is_kept_and_one_that_stops_is_expelled() {
    let dir = tempfile::tempdir().unwrap();
    let (g1, g2) = (open(dir.path()), open(dir.path()));
    let a = g1.join("c", spec(400), &counts).unwrap();
    let b = g2.join("c", spec(400), &counts).unwrap();
    let (mut oa, mut ob) = (BTreeSet::new(), BTreeSet::new());
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        settle(&g1, &a, &mut oa);
        settle(&g2, &b, &mut ob);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(g1.is_member(&b, &counts) && g2.is_member(&a, &counts));
    assert_eq!(oa.len() + ob.len(), 6);
    // b stops polling (its process lives on): a expels it after 400 ms.
    let until = Instant::now() + Duration::from_millis(700);
    while Instant::now() < until {
        settle(&g1, &a, &mut oa);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!g1.is_member(&b, &counts));
    assert_eq!(oa.len(), 6);
    assert!(g2.sync(&b, &counts, None).is_err());
}

#[test]
fn commits_are_checked_against_owners_in_every_process_and_seen_by_all() {
    let dir = tempfile::tempdir().unwrap();
    let (g1, g2) = (open(dir.path()), open(dir.path()));
    let a = g1.join("c", spec(60_000), &counts).unwrap();
    let b = g2.join("c", spec(60_000), &counts).unwrap();
    let (mut oa, mut ob) = (BTreeSet::new(), BTreeSet::new());
    settle(&g1, &a, &mut oa);
    settle(&g2, &b, &mut ob);
    settle(&g1, &a, &mut oa);
    settle(&g2, &b, &mut ob);
    let theirs = ob.iter().next().unwrap().clone();
    let c = |o: u64| CommittedOffset {
        offset: o,
        metadata: String::new(),
        timestamp: 0,
    };
    let err = g1
        .commit(Some(&a), &[(theirs.0.clone(), theirs.1, c(5))])
        .unwrap_err();
    assert!(matches!(err, Error::CommitFailed(_)), "{err}");
    g2.commit(Some(&b), &[(theirs.0.clone(), theirs.1, c(7))])
        .unwrap();
    assert_eq!(g1.committed(&theirs.0, theirs.1).unwrap().offset, 7);
    let mine = oa.iter().next().unwrap().clone();
    g1.commit(Some(&a), &[(mine.0.clone(), mine.1, c(9))])
        .unwrap();
    // Neither commit lost the other's (read-modify-write under the lock).
    assert_eq!(g2.committed(&mine.0, mine.1).unwrap().offset, 9);
    assert_eq!(g2.committed(&theirs.0, theirs.1).unwrap().offset, 7);
    assert_eq!(g1.all_committed().len(), 2);
}

#[test]
fn garbage_in_the_shared_files_is_survived() {
    let dir = tempfile::tempdir().unwrap();
    let g1 = open(dir.path());
    let a = g1.join("c", spec(60_000), &counts).unwrap();
    let mut oa = BTreeSet::new();
    settle(&g1, &a, &mut oa);
    let gdir = dir.path().join("groups");
    let mut noise = vec![0u8; 8192];
    let mut x: u32 = 0x1234_5678;
    for b in &mut noise {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    std::fs::write(gdir.join("g.state"), &noise[..3000]).unwrap();
    std::fs::write(gdir.join("g.shm"), &noise[..4096]).unwrap();
    // The state is gone: a finds itself removed and joins again.
    let g2 = open(dir.path());
    assert!(!g1.is_member(&a, &counts));
    let a2 = g1.join("c", spec(60_000), &counts).unwrap();
    let mut oa2 = BTreeSet::new();
    settle(&g1, &a2, &mut oa2);
    assert_eq!(oa2.len(), 6);
    let (_, members) = g2.describe(&counts);
    assert_eq!(members.len(), 1);
}

const CHILD_ENV: &str = "MQLITE_TEST_GROUP_CHILD";

/// Not a test on its own: the child process of
/// `a_member_in_a_killed_process_is_removed`. It joins the group in the
/// directory named in its environment, takes its share, says so, and
/// polls until it is killed.
#[test]
#[ignore = "run as a child process by a_member_in_a_killed_process_is_removed"]
fn group_child_member_polls_until_killed() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let g = open(Path::new(&dir));
    let id = g.join("child", spec(60_000), &counts).unwrap();
    let mut owned = BTreeSet::new();
    loop {
        settle(&g, &id, &mut owned);
        if owned.len() == 3 {
            std::fs::write(Path::new(&dir).join("child-ready"), b"").unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_member_in_a_killed_process_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let g = open(dir.path());
    let a = g.join("c", spec(60_000), &counts).unwrap();
    let mut oa = BTreeSet::new();
    settle(&g, &a, &mut oa);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "group::shared_tests::group_child_member_polls_until_killed",
            "--nocapture",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !dir.path().join("child-ready").exists() {
        settle(&g, &a, &mut oa);
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the child never took its share"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    settle(&g, &a, &mut oa);
    assert_eq!(oa.len(), 3);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_probe();
    settle(&g, &a, &mut oa);
    assert_eq!(oa.len(), 6, "the killed member's partitions are taken over");
    assert_eq!(g.describe(&counts).1.len(), 1);
}
