//! Groups shared by processes. Two `Group`s opened on one directory behave
//! as two processes would: each has its own registration (so its own
//! token in the group's lock) and its own map of the shared pages. One test runs a member in
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

/// The group `g` as a process of its own would open it (its own
/// registration, so its own token for the group's lock).
fn open(dir: &Path) -> Group {
    std::fs::create_dir_all(dir.join("groups")).unwrap();
    let slot = Arc::new(crate::shared::ProcessSlot::register(dir, 0o600).unwrap());
    Group::open_shared(dir, "g", 0o600, &slot).unwrap()
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
    // b stops polling (its process lives on): a expels it once 400 ms
    // passed without a poll (waited for up to 10 s: a loaded machine may
    // run a's polls late, never early).
    let stopped = Instant::now();
    let mut expelled_after = None;
    while oa.len() < 6 && stopped.elapsed() < Duration::from_secs(10) {
        settle(&g1, &a, &mut oa);
        if expelled_after.is_none() && !g1.is_member(&b, &counts) {
            expelled_after = Some(stopped.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!g1.is_member(&b, &counts));
    // b's last poll was at most one round (20 ms and two settles) before.
    let after = expelled_after.expect("b expelled");
    assert!(
        after >= Duration::from_millis(300),
        "expelled after {after:?}"
    );
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
    // The state is gone: the next process to read it replaces it with an
    // empty one, and a finds itself removed and joins again.
    let g2 = open(dir.path());
    assert!(!g1.is_member(&a, &counts));
    let a2 = g1.join("c", spec(60_000), &counts).unwrap();
    let mut oa2 = BTreeSet::new();
    settle(&g1, &a2, &mut oa2);
    assert_eq!(oa2.len(), 6);
    // Noise in the pages: the group's page is reset (members' slots are
    // lost), the lock's holder is taken for dead and its versions for
    // unknown (every process reads the state file again).
    std::fs::write(gdir.join("g.shm"), &noise[..4096]).unwrap();
    std::fs::write(gdir.join("g.lock"), &noise[4096..]).unwrap();
    let (_, members) = g2.describe(&counts);
    assert_eq!(members.len(), 1);
    assert!(g1.is_member(&a2, &counts));
    settle(&g1, &a2, &mut oa2);
    assert_eq!(oa2.len(), 6);
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

fn at(offset: u64) -> CommittedOffset {
    CommittedOffset {
        offset,
        metadata: String::new(),
        timestamp: 0,
    }
}

/// The committed offsets as a process opening the group now reads them.
fn on_disk(dir: &Path) -> Vec<(String, u32, u64)> {
    let mut v: Vec<_> = OffsetStore::open(dir, "g", 0o600)
        .unwrap()
        .all()
        .into_iter()
        .map(|(t, p, c)| (t, p, c.offset))
        .collect();
    v.sort();
    v
}

#[test]
fn a_commit_reads_what_another_process_committed_since_its_own_last_one() {
    let dir = tempfile::tempdir().unwrap();
    let (g1, g2) = (open(dir.path()), open(dir.path()));
    let t = || "t".to_owned();
    g1.commit(None, &[(t(), 0, at(1))]).unwrap();
    g1.commit(None, &[(t(), 0, at(2))]).unwrap();
    g2.commit(None, &[(t(), 1, at(5))]).unwrap();
    // g1's view is one commit behind: it reads g2's before it appends
    // (appending at the end it knew would overwrite it).
    g1.commit(None, &[(t(), 0, at(3))]).unwrap();
    g2.commit(None, &[(t(), 1, at(6))]).unwrap();
    g1.commit(None, &[(t(), 2, at(7))]).unwrap();
    let want = vec![(t(), 0, 3), (t(), 1, 6), (t(), 2, 7)];
    assert_eq!(on_disk(dir.path()), want);
    assert_eq!(g1.committed("t", 1).unwrap().offset, 6);
    assert_eq!(g2.committed("t", 2).unwrap().offset, 7);
}

#[test]
fn a_commit_after_a_holder_died_reads_what_it_may_have_written() {
    let dir = tempfile::tempdir().unwrap();
    let g1 = open(dir.path());
    let t = || "t".to_owned();
    g1.commit(None, &[(t(), 0, at(1))]).unwrap();
    // A process commits and dies holding the lock, before it could say in
    // the page that the offsets changed.
    OffsetStore::open(dir.path(), "g", 0o600)
        .unwrap()
        .commit(&[(t(), 1, at(4))], true)
        .unwrap();
    let slot = crate::shared::ProcessSlot::register(dir.path(), 0o600).unwrap();
    let page = crate::shared::LockPage::open(
        &dir.path().join("groups/g.lock"),
        0o600,
        dir.path(),
        slot.token(),
    )
    .unwrap();
    page.leave_held_by(0x1234_5678);
    g1.commit(None, &[(t(), 0, at(2))]).unwrap();
    assert_eq!(on_disk(dir.path()), vec![(t(), 0, 2), (t(), 1, 4)]);
}

#[test]
fn a_state_changed_by_another_process_is_read_and_one_unchanged_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let (g1, g2) = (open(dir.path()), open(dir.path()));
    let a = g1.join("c", spec(60_000), &counts).unwrap();
    let mut oa = BTreeSet::new();
    settle(&g1, &a, &mut oa);
    let mine = oa.iter().next().unwrap().clone();
    // Unchanged since g1 wrote it: the commit's check does not read the
    // file (a file made unreadable behind the lock's back is not seen).
    let state = dir.path().join("groups/g.state");
    let kept = std::fs::read(&state).unwrap();
    std::fs::write(&state, b"not json").unwrap();
    g1.commit(Some(&a), &[(mine.0.clone(), mine.1, at(1))])
        .unwrap();
    std::fs::write(&state, &kept).unwrap();
    // g2 joins (the state changes): g1's next commit reads it, and finds
    // the partitions it must hand over still its own until it releases.
    let b = g2.join("c", spec(60_000), &counts).unwrap();
    g1.commit(Some(&a), &[(mine.0.clone(), mine.1, at(2))])
        .unwrap();
    let h = g1.sync(&a, &counts, None).unwrap();
    g1.release(&a, &h.revoke, &counts);
    for tp in &h.revoke {
        let err = g1
            .commit(Some(&a), &[(tp.0.clone(), tp.1, at(3))])
            .unwrap_err();
        assert!(matches!(err, Error::CommitFailed(_)), "{err}");
    }
    assert_eq!(h.revoke.len(), 3, "{h:?}");
    assert!(g2.is_member(&b, &counts));
}
