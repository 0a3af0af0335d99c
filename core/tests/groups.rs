//! Consumer groups: sharing partitions, rebalances with revoke before
//! assign, committed offsets, broadcast mode, patterns, wakeup, lag.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::cfg;
use mqlite::{
    AssignmentStrategy, Broker, Consumer, ConsumerConfig, Error, OffsetReset, ProducerConfig,
    RebalanceContext, RebalanceListener, Record, TopicConfig,
};

fn setup(partitions: u32, per_partition: u64) -> (tempfile::TempDir, Broker) {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(partitions)).unwrap();
    produce(&mq, "t", partitions, per_partition);
    (tmp, mq)
}

fn produce(mq: &Broker, topic: &str, partitions: u32, per_partition: u64) {
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..per_partition {
        for part in 0..partitions {
            p.send(
                Record::new(topic)
                    .partition(part)
                    .value(format!("{part}:{i}")),
            )
            .unwrap();
        }
    }
}

fn member(mq: &Broker, group: &str) -> Consumer {
    let mut c = mq
        .consumer(
            ConsumerConfig::group(group)
                .enable_auto_commit(false)
                .max_poll_records(10_000),
        )
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    c
}

/// Every partition of `t` is owned by at most one member, and (once
/// everyone polled) by exactly one.
fn check_owners(mq: &Broker, group: &str, partitions: u32, all_owned: bool) {
    let info = mq.describe_group(group).unwrap();
    let mut seen = BTreeSet::new();
    for m in &info.members {
        for tp in &m.partitions {
            assert!(seen.insert(tp.clone()), "{tp:?} owned twice: {info:?}");
        }
    }
    if all_owned {
        assert_eq!(seen.len(), partitions as usize, "{info:?}");
    }
}

#[test]
fn members_share_partitions_and_hand_them_over() {
    let (_tmp, mq) = setup(4, 10);
    let mut a = member(&mq, "g");
    assert_eq!(a.assignment().len(), 4, "alone, it gets everything");
    let mut b = member(&mq, "g");
    // b's share is still a's until a polls and revokes it.
    check_owners(&mq, "g", 4, false);
    a.poll(Duration::ZERO).unwrap();
    b.poll(Duration::ZERO).unwrap();
    check_owners(&mq, "g", 4, true);
    assert_eq!(a.assignment().len(), 2);
    assert_eq!(b.assignment().len(), 2);
    let mut c = member(&mq, "g");
    for _ in 0..2 {
        for m in [&mut a, &mut b, &mut c] {
            m.poll(Duration::ZERO).unwrap();
        }
    }
    check_owners(&mq, "g", 4, true);
    let sizes: Vec<usize> = [&a, &b, &c].iter().map(|m| m.assignment().len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 4);
    assert!(sizes.iter().all(|&n| (1..=2).contains(&n)), "{sizes:?}");
    // Leaving hands everything to the others at once.
    c.close();
    a.poll(Duration::ZERO).unwrap();
    b.poll(Duration::ZERO).unwrap();
    a.poll(Duration::ZERO).unwrap();
    check_owners(&mq, "g", 4, true);
    assert_eq!(a.assignment().len() + b.assignment().len(), 4);
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl RebalanceListener for Log {
    fn on_assign(&mut self, _: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.0
            .lock()
            .unwrap()
            .push(format!("assign {partitions:?}"));
    }
    fn on_revoke(&mut self, consumer: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        // Commit what was processed before the partitions go.
        consumer.commit().unwrap();
        self.0
            .lock()
            .unwrap()
            .push(format!("revoke {partitions:?}"));
    }
}

/// Revoke runs (and can commit) before the partition is assigned elsewhere;
/// the new owner starts at the committed offset: nothing skipped, nothing
/// read twice when the old owner committed what it read.
#[test]
fn revoke_commits_before_the_new_owner_starts_there() {
    let (_tmp, mq) = setup(2, 100);
    let log_a = Log::default();
    let mut a = mq
        .consumer(
            ConsumerConfig::group("g")
                .enable_auto_commit(false)
                .max_poll_records(30),
        )
        .unwrap();
    a.subscribe_with(&["t"], Box::new(log_a.clone())).unwrap();
    let mut read: HashMap<(u32, u64), usize> = HashMap::new();
    for m in a.poll(Duration::ZERO).unwrap() {
        *read.entry((m.partition(), m.offset())).or_default() += 1;
    }
    let log_b = Log::default();
    let mut b = mq
        .consumer(
            ConsumerConfig::group("g")
                .enable_auto_commit(false)
                .max_poll_records(1000),
        )
        .unwrap();
    b.subscribe_with(&["t"], Box::new(log_b.clone())).unwrap();
    for _ in 0..5 {
        for c in [&mut a, &mut b] {
            for m in c.poll(Duration::ZERO).unwrap() {
                *read.entry((m.partition(), m.offset())).or_default() += 1;
            }
        }
    }
    assert_eq!(read.len(), 200, "every message read");
    assert!(read.values().all(|&n| n == 1), "none read twice");
    let la = log_a.0.lock().unwrap().clone();
    assert!(la[0].starts_with("assign"));
    assert!(la.iter().any(|e| e.starts_with("revoke")), "{la:?}");
    let lb = log_b.0.lock().unwrap().clone();
    assert_eq!(lb.len(), 1, "{lb:?}");
}

#[test]
fn committed_offsets_are_durable_and_resume_the_group() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", TopicConfig::new(1)).unwrap();
        produce(&mq, "t", 1, 50);
        let mut c = mq
            .consumer(
                ConsumerConfig::group("g")
                    .enable_auto_commit(false)
                    .max_poll_records(20),
            )
            .unwrap();
        c.subscribe(&["t"]).unwrap();
        assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 20);
        c.commit().unwrap();
        assert_eq!(c.committed("t", 0).unwrap().unwrap().offset, 20);
        c.commit_offsets(&[("t", 0, 25, "checkpoint-7")]).unwrap();
        assert_eq!(c.lag().unwrap(), [("t".to_string(), 0, 25)]);
        // Not committed: read but lost with the process.
        c.poll(Duration::ZERO).unwrap();
        std::mem::forget(c); // no close, no auto-commit: as if killed
    }
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let info = mq.describe_group("g").unwrap();
    assert_eq!(info.committed[0].2.offset, 25);
    assert_eq!(info.committed[0].2.metadata, "checkpoint-7");
    let mut c = member(&mq, "g");
    let got = c.poll(Duration::ZERO).unwrap();
    assert_eq!(got[0].offset(), 25, "resumes at the committed offset");
    assert_eq!(got.len(), 25);
    // Auto-commit at close.
    let mut d = mq
        .consumer(ConsumerConfig::group("h").max_poll_records(10))
        .unwrap();
    d.subscribe(&["t"]).unwrap();
    d.poll(Duration::ZERO).unwrap();
    d.close();
    assert_eq!(mq.describe_group("h").unwrap().committed[0].2.offset, 10);
}

#[test]
fn a_member_that_stops_polling_is_removed() {
    let (_tmp, mq) = setup(2, 1);
    let config = ConsumerConfig::group("g")
        .enable_auto_commit(false)
        .max_poll_interval_ms(100);
    let mut a = mq.consumer(config.clone()).unwrap();
    a.subscribe(&["t"]).unwrap();
    let mut b = mq.consumer(config).unwrap();
    b.subscribe(&["t"]).unwrap();
    a.poll(Duration::ZERO).unwrap();
    b.poll(Duration::ZERO).unwrap();
    assert_eq!(a.assignment().len(), 1);
    // a stops polling; b's poll notices after max_poll_interval_ms.
    let t = std::time::Instant::now();
    while b.assignment().len() < 2 {
        b.poll(Duration::from_millis(50)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(10));
    }
    check_owners(&mq, "g", 2, true);
    // a's commit of what it held is refused (b owns it now), and a rejoins
    // at its next poll.
    let (t, p) = a.assignment()[0].clone();
    assert!(matches!(
        a.commit_offsets(&[(&t, p, 1, "")]),
        Err(Error::CommitFailed(_))
    ));
    a.poll(Duration::ZERO).unwrap();
    b.poll(Duration::ZERO).unwrap();
    a.poll(Duration::ZERO).unwrap();
    check_owners(&mq, "g", 2, true);
}

/// Records `on_lost` apart from `on_revoke`, and what a commit there gave.
#[derive(Clone, Default)]
struct LostLog(Arc<Mutex<Vec<String>>>);

impl RebalanceListener for LostLog {
    fn on_revoke(&mut self, _: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.0
            .lock()
            .unwrap()
            .push(format!("revoke {partitions:?}"));
    }
    fn on_lost(&mut self, consumer: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        let (t, p) = &partitions[0];
        let commit = match consumer.commit_offsets(&[(t, *p, 1, "")]) {
            Err(Error::CommitFailed(_)) => "refused",
            Ok(()) => "accepted",
            Err(_) => "other error",
        };
        self.0
            .lock()
            .unwrap()
            .push(format!("lost {partitions:?} commit {commit}"));
    }
}

/// A revoke-only listener, to see that `on_lost` defaults to `on_revoke`.
#[derive(Clone, Default)]
struct RevokeOnly(Arc<Mutex<Vec<(String, u32)>>>);

impl RebalanceListener for RevokeOnly {
    fn on_revoke(&mut self, _: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.0.lock().unwrap().extend_from_slice(partitions);
    }
}

/// Two members of group "g" of `t` (2 partitions) with a
/// `max_poll_interval_ms` of 100, `a` with `listener`, once they share the
/// partitions.
fn two_members(
    mq: &Broker,
    auto_commit: bool,
    listener: Box<dyn RebalanceListener>,
) -> (Consumer, Consumer) {
    let config = ConsumerConfig::group("g")
        .enable_auto_commit(auto_commit)
        .max_poll_interval_ms(100);
    let mut a = mq.consumer(config.clone()).unwrap();
    a.subscribe_with(&["t"], listener).unwrap();
    let mut b = mq.consumer(config).unwrap();
    b.subscribe(&["t"]).unwrap();
    a.poll(Duration::ZERO).unwrap();
    b.poll(Duration::ZERO).unwrap();
    a.poll(Duration::ZERO).unwrap();
    assert_eq!(a.assignment().len(), 1);
    (a, b)
}

/// Polls only `b` until the group expelled the other member and `b` owns
/// both partitions.
fn take_over(b: &mut Consumer) {
    let t = std::time::Instant::now();
    while b.assignment().len() < 2 {
        b.poll(Duration::from_millis(50)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}

#[test]
fn an_expelled_member_is_told_it_lost_its_partitions() {
    let (_tmp, mq) = setup(2, 3);
    let log = LostLog::default();
    let (mut a, mut b) = two_members(&mq, true, Box::new(log.clone()));
    let held = a.assignment();
    let old_id = a.member_id().unwrap().to_owned();
    log.0.lock().unwrap().clear(); // the revoke of b's partition
    take_over(&mut b);
    let committed_before = mq.describe_group("g").unwrap().committed;
    // a's next poll tells it (on_lost, not on_revoke; no auto-commit; a
    // commit from there refused), and it joins again under a new id.
    a.poll(Duration::ZERO).unwrap();
    assert_eq!(
        *log.0.lock().unwrap(),
        vec![format!("lost {held:?} commit refused")]
    );
    assert_ne!(a.member_id().unwrap(), old_id);
    assert_eq!(mq.describe_group("g").unwrap().committed, committed_before);
    b.poll(Duration::ZERO).unwrap();
    a.poll(Duration::ZERO).unwrap();
    check_owners(&mq, "g", 2, true);
    assert_eq!(a.assignment().len(), 1);
}

/// Without an `on_lost` of its own, a listener hears it as `on_revoke`
/// (Kafka's default).
#[test]
fn on_lost_defaults_to_on_revoke() {
    let (_tmp, mq) = setup(2, 1);
    let revoked = RevokeOnly::default();
    let (mut a, mut b) = two_members(&mq, false, Box::new(revoked.clone()));
    let held = a.assignment();
    revoked.0.lock().unwrap().clear();
    take_over(&mut b);
    a.poll(Duration::ZERO).unwrap();
    assert_eq!(*revoked.0.lock().unwrap(), held);
}

#[test]
fn commits_of_partitions_not_owned_fail() {
    let (_tmp, mq) = setup(2, 1);
    let mut a = member(&mq, "g");
    let mut b = member(&mq, "g");
    a.poll(Duration::ZERO).unwrap();
    b.poll(Duration::ZERO).unwrap();
    let (t, p) = b.assignment()[0].clone();
    match a.commit_offsets(&[(&t, p, 0, "")]) {
        Err(e @ Error::CommitFailed(_)) => assert_eq!(e.code(), 500),
        other => panic!("expected CommitFailed, got {other:?}"),
    }
    let mut standalone = mq.consumer(ConsumerConfig::default()).unwrap();
    standalone.subscribe(&["t"]).unwrap();
    assert!(matches!(
        standalone.commit(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        mq.consumer(ConsumerConfig::group("../x")),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.subscribe_pattern("([", None),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn broadcast_consumers_each_read_everything_with_own_offsets() {
    let (_tmp, mq) = setup(3, 5);
    let mut cs: Vec<Consumer> = (0..2)
        .map(|i| {
            let mut c = mq
                .consumer(
                    ConsumerConfig::group("b")
                        .broadcast(true)
                        .client_id(format!("node-{i}"))
                        .max_poll_records(100),
                )
                .unwrap();
            c.subscribe(&["t"]).unwrap();
            c
        })
        .collect();
    for c in &mut cs {
        assert_eq!(c.assignment().len(), 3);
        assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 15);
    }
    cs[0].commit().unwrap();
    assert_eq!(cs[0].committed("t", 1).unwrap().unwrap().offset, 5);
    assert_eq!(cs[1].committed("t", 1).unwrap(), None, "offsets of its own");
    // A broadcast consumer of the same name resumes at its own commits.
    drop(cs.remove(0));
    let mut again = mq
        .consumer(
            ConsumerConfig::group("b")
                .broadcast(true)
                .client_id("node-0")
                .max_poll_records(100),
        )
        .unwrap();
    again.subscribe(&["t"]).unwrap();
    assert!(
        again.poll(Duration::ZERO).unwrap().is_empty(),
        "all committed"
    );
    // And a pattern subscription is replaced by a later plain one.
    again.subscribe_pattern("nothing-.*", None).unwrap();
    again.subscribe(&["t"]).unwrap();
    assert_eq!(again.assignment().len(), 3);
    assert!(mq
        .consumer(ConsumerConfig::default().broadcast(true))
        .is_err());
}

#[test]
fn patterns_and_new_partitions_rebalance() {
    let (_tmp, mq) = setup(1, 1);
    let mut a = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    a.subscribe_pattern("ev-.*", None).unwrap();
    assert!(a.assignment().is_empty());
    mq.create_topic("ev-1", TopicConfig::new(2)).unwrap();
    mq.create_topic("other", TopicConfig::new(2)).unwrap();
    a.poll(Duration::ZERO).unwrap();
    assert_eq!(a.assignment().len(), 2);
    mq.add_partitions("ev-1", 3).unwrap();
    a.poll(Duration::ZERO).unwrap();
    assert_eq!(a.assignment().len(), 3);
    // Standalone pattern subscriptions too.
    let mut s = mq.consumer(ConsumerConfig::default()).unwrap();
    s.subscribe_pattern("ev-.*|t", None).unwrap();
    assert_eq!(s.assignment().len(), 4);
}

#[test]
fn wakeup_ends_a_blocked_poll() {
    let (_tmp, mq) = setup(1, 0);
    let mut c = member(&mq, "g");
    let waker = c.waker();
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            waker.wakeup();
        });
        assert!(c.poll(Duration::from_secs(30)).unwrap().is_empty());
    });
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn every_strategy_keeps_one_owner_per_partition_through_random_churn() {
    for strategy in [
        AssignmentStrategy::Averagely,
        AssignmentStrategy::RoundRobin,
        AssignmentStrategy::ConsistentHash,
        AssignmentStrategy::Sticky,
    ] {
        let (_tmp, mq) = setup(7, 3);
        let mut members: Vec<Consumer> = Vec::new();
        let mut seed = 42u64;
        for step in 0..40 {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            if members.len() < 2 || !(seed >> 33).is_multiple_of(3) {
                let mut c = mq
                    .consumer(
                        ConsumerConfig::group("g")
                            .assignment_strategy(strategy)
                            .enable_auto_commit(false),
                    )
                    .unwrap();
                c.subscribe(&["t"]).unwrap();
                members.push(c);
            } else {
                let i = (seed >> 40) as usize % members.len();
                members.swap_remove(i).close();
            }
            for _ in 0..2 {
                for m in &mut members {
                    m.poll(Duration::ZERO).unwrap();
                    check_owners(&mq, "g", 7, false);
                }
            }
            check_owners(&mq, "g", 7, true);
            let total: usize = members.iter().map(|m| m.assignment().len()).sum();
            assert_eq!(total, 7, "{strategy:?} step {step}");
        }
    }
}

#[test]
fn retention_past_a_position_is_counted_as_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic(
        "t",
        TopicConfig::new(1)
            .segment_bytes(4096)
            .retention_bytes(4096),
    )
    .unwrap();
    let mut c = mq
        .consumer(
            ConsumerConfig::group("g")
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(1),
        )
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    produce(&mq, "t", 1, 5);
    assert_eq!(c.poll(Duration::ZERO).unwrap()[0].offset(), 0);
    produce(&mq, "t", 1, 500);
    mq.enforce_retention().unwrap();
    let start = mq.topic("t").unwrap().partitions[0].start_offset;
    assert!(start > 1);
    assert_eq!(c.poll(Duration::ZERO).unwrap()[0].offset(), start);
    assert_eq!(c.stats().skipped, start - 1);
    assert!(c.stats().polls >= 2);
}

/// Time retention keeps what a group has not committed past; the size
/// limit is a hard cap that wins; the floor survives a reopen.
#[test]
fn retention_can_wait_for_groups() {
    let tmp = tempfile::tempdir().unwrap();
    let topic = |bytes: Option<u64>| {
        let mut c = TopicConfig::new(1)
            .segment_bytes(4096)
            .retention_ms(1)
            .retention_respects_groups(true);
        c.retention_bytes = bytes;
        c
    };
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", topic(None)).unwrap();
        mq.create_topic("capped", topic(Some(3 * 4096))).unwrap();
        for t in ["t", "capped"] {
            let mut c = mq
                .consumer(ConsumerConfig::group("slow").enable_auto_commit(false))
                .unwrap();
            c.assign(&[(t, 0)]).unwrap();
            produce(&mq, t, 1, 10);
            c.commit_offsets(&[(t, 0, 5, "")]).unwrap();
            produce(&mq, t, 1, 1000);
        }
        std::thread::sleep(Duration::from_millis(5));
        mq.enforce_retention().unwrap();
        let start = mq.topic("t").unwrap().partitions[0].start_offset;
        assert!(start <= 5, "deleted past the group's commit: start {start}");
        let capped = mq.topic("capped").unwrap().partitions[0].start_offset;
        assert!(capped > 5, "the size cap wins: start {capped}");
    }
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    mq.enforce_retention().unwrap();
    assert!(
        mq.topic("t").unwrap().partitions[0].start_offset <= 5,
        "after a reopen too"
    );
    let mut c = mq
        .consumer(ConsumerConfig::group("slow").enable_auto_commit(false))
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    c.commit_offsets(&[("t", 0, 900, "")]).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    mq.enforce_retention().unwrap();
    let start = mq.topic("t").unwrap().partitions[0].start_offset;
    assert!(
        start > 5 && start <= 900,
        "follows the commit: start {start}"
    );
}

#[test]
fn deleting_a_topic_forgets_its_offsets_and_commits_are_bounded() {
    let (_tmp, mq) = setup(1, 10);
    let mut c = member(&mq, "g");
    assert!(matches!(
        c.commit_offsets(&[("t", 0, 11, "")]),
        Err(Error::OffsetOutOfRange { .. })
    ));
    c.commit_offsets(&[("t", 0, 10, "")]).unwrap();
    c.close();
    mq.delete_topic("t").unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    produce(&mq, "t", 1, 3);
    assert!(mq.describe_group("g").unwrap().committed.is_empty());
    let mut c = member(&mq, "g");
    assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 3, "starts afresh");
}

/// `Broker::groups`: groups with committed offsets or members, sorted; a
/// group only described is not listed; the list survives a reopen.
#[test]
fn groups_lists_the_groups_in_use() {
    let (tmp, mq) = setup(2, 3);
    assert!(mq.groups().is_empty());
    mq.describe_group("nobody").unwrap();
    assert!(mq.groups().is_empty());
    let mut members = member(&mq, "members");
    members.poll(Duration::ZERO).unwrap();
    let mut billing = mq
        .consumer(ConsumerConfig::group("billing").enable_auto_commit(false))
        .unwrap();
    billing.assign(&[("t", 0)]).unwrap();
    assert!(!billing.poll(Duration::from_secs(1)).unwrap().is_empty());
    billing.commit().unwrap();
    assert_eq!(mq.groups(), ["billing", "members"]);
    members.close();
    assert_eq!(mq.groups(), ["billing"]);
    drop((members, billing));
    mq.close().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert_eq!(mq.groups(), ["billing"]);
}
