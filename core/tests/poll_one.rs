//! One-message consumption (`Consumer::poll_one`): exact positions, commits
//! and lag while the consumer holds a poll's worth of fetched messages;
//! groups that rebalance whatever a member holds; pause and resume; stored
//! offsets; subscriptions to topics that do not exist yet.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cfg;
use mqlite::{
    Broker, Consumer, ConsumerConfig, Error, Message, ProducerConfig, RebalanceContext,
    RebalanceListener, Record, TopicConfig,
};

fn setup(partitions: u32, per_partition: u32) -> (tempfile::TempDir, Broker) {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(partitions)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for part in 0..partitions {
        for i in 0..per_partition {
            p.send(
                Record::new("t")
                    .partition(part)
                    .value(format!("{part}-{i}")),
            )
            .unwrap();
        }
    }
    (tmp, mq)
}

fn one(c: &mut Consumer) -> Option<Message> {
    c.poll_one(Duration::ZERO).unwrap()
}

#[test]
fn positions_and_commits_count_only_what_was_handed_out() {
    let (_tmp, mq) = setup(1, 100);
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    for i in 0..10u64 {
        let m = one(&mut c).unwrap();
        assert_eq!(m.offset(), i);
        assert_eq!(c.position("t", 0).unwrap(), i + 1);
    }
    let stats = c.stats();
    assert_eq!(stats.records, 10, "only handed-out messages are counted");
    c.commit().unwrap();
    assert_eq!(c.committed("t", 0).unwrap().unwrap().offset, 10);
    // Lag counts from the committed offset.
    assert_eq!(c.lag().unwrap(), vec![("t".to_string(), 0, 90)]);
    // A commit after every message costs no re-read and is exact.
    for i in 10..20u64 {
        assert_eq!(one(&mut c).unwrap().offset(), i);
        c.commit().unwrap();
        assert_eq!(c.committed("t", 0).unwrap().unwrap().offset, i + 1);
    }
    // poll and poll_batch return the held messages first, nothing skipped.
    let batch = c.poll(Duration::ZERO).unwrap();
    assert_eq!(batch[0].offset(), 20);
    let mut next = batch.last().unwrap().offset() + 1;
    let b = c.poll_batch(Duration::ZERO).unwrap();
    for m in &b {
        assert_eq!(m.offset(), next);
        next += 1;
    }
    while let Some(m) = one(&mut c) {
        assert_eq!(m.offset(), next);
        next += 1;
    }
    assert_eq!(next, 100);
    drop(c);
    // A new consumer of the group resumes at the commit.
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    assert_eq!(one(&mut c).unwrap().offset(), 20);
}

#[test]
fn a_seek_drops_held_messages_of_that_partition_only() {
    let (_tmp, mq) = setup(2, 50);
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[("t", 0), ("t", 1)]).unwrap();
    let m = one(&mut c).unwrap();
    let (seeked, other) = (m.partition(), 1 - m.partition());
    // A failed seek changes nothing.
    assert!(matches!(
        c.seek("t", seeked, 1000),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert_eq!(c.position("t", seeked).unwrap(), 1);
    c.seek("t", seeked, 40).unwrap();
    let mut seen: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    while let Some(m) = one(&mut c) {
        seen.entry(m.partition()).or_default().push(m.offset());
    }
    assert_eq!(seen[&seeked], (40..50).collect::<Vec<_>>());
    assert_eq!(seen[&other], (0..50).collect::<Vec<_>>());
}

#[test]
fn pause_and_resume() {
    let (_tmp, mq) = setup(2, 20);
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[("t", 0), ("t", 1)]).unwrap();
    let first = one(&mut c).unwrap();
    let paused = first.partition();
    c.pause(&[("t", paused)]).unwrap();
    assert_eq!(c.paused(), vec![("t".to_string(), paused)]);
    assert!(matches!(
        c.pause(&[("t", 0), ("t", 7)]),
        Err(Error::InvalidArgument(_))
    ));
    let mut others = 0;
    while let Some(m) = one(&mut c) {
        assert_ne!(m.partition(), paused, "a paused partition is not read");
        others += 1;
    }
    assert_eq!(others, 20);
    // Its position stays where it was handed out.
    assert_eq!(c.position("t", paused).unwrap(), 1);
    c.resume(&[("t", paused)]).unwrap();
    assert!(c.paused().is_empty());
    let mut next = 1;
    while let Some(m) = one(&mut c) {
        assert_eq!((m.partition(), m.offset()), (paused, next));
        next += 1;
    }
    assert_eq!(next, 20);
}

#[test]
fn commits_take_stored_offsets_without_auto_offset_store() {
    let (_tmp, mq) = setup(1, 30);
    let conf = ConsumerConfig::group("g")
        .enable_auto_commit(true)
        .enable_auto_offset_store(false);
    let mut c = mq.consumer(conf.clone()).unwrap();
    c.subscribe(&["t"]).unwrap();
    for _ in 0..10 {
        let m = one(&mut c).unwrap();
        if m.offset() < 5 {
            c.store_offset(&m).unwrap();
        }
    }
    c.commit().unwrap();
    assert_eq!(c.committed("t", 0).unwrap().unwrap().offset, 5);
    c.store_offsets(&[("t", 0, 7)]).unwrap();
    assert!(matches!(
        c.store_offsets(&[("t", 3, 1)]),
        Err(Error::InvalidArgument(_))
    ));
    // Closing auto-commits what was stored, not what was handed out.
    c.close();
    assert!(matches!(
        c.store_offsets(&[("t", 0, 8)]),
        Err(Error::Closed(_))
    ));
    let mut c = mq.consumer(conf).unwrap();
    c.subscribe(&["t"]).unwrap();
    assert_eq!(one(&mut c).unwrap().offset(), 7);
    // With the automatic store on, storing is refused.
    let mut auto = mq.consumer(ConsumerConfig::group("h")).unwrap();
    auto.assign(&[("t", 0)]).unwrap();
    assert!(matches!(
        auto.store_offsets(&[("t", 0, 1)]),
        Err(Error::InvalidArgument(_))
    ));
    // Once closed, that is what a call is told first.
    auto.close();
    assert!(matches!(
        auto.store_offsets(&[("t", 0, 1)]),
        Err(Error::Closed(_))
    ));
}

#[test]
fn subscribing_to_a_topic_that_does_not_exist_yet_waits_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut alone = mq.consumer(ConsumerConfig::default()).unwrap();
    alone.subscribe(&["later"]).unwrap();
    let mut member = mq.consumer(ConsumerConfig::group("g")).unwrap();
    member.subscribe(&["later"]).unwrap();
    assert!(one(&mut alone).is_none());
    assert!(one(&mut member).is_none());
    assert!(alone.assignment().is_empty());
    mq.create_topic("later", TopicConfig::new(2)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..4u32 {
        p.send(Record::new("later").partition(i % 2).value("x"))
            .unwrap();
    }
    let mut got = 0;
    while alone.poll_one(Duration::from_millis(50)).unwrap().is_some() {
        got += 1;
    }
    assert_eq!(got, 4);
    let mut got = 0;
    while member
        .poll_one(Duration::from_millis(50))
        .unwrap()
        .is_some()
    {
        got += 1;
    }
    assert_eq!(got, 4);
    assert_eq!(member.assignment().len(), 2);
}

/// Commits in `on_revoke` through the context: exactly what was handed out.
struct CommitOnRevoke(Arc<Mutex<Vec<u64>>>);

impl RebalanceListener for CommitOnRevoke {
    fn on_revoke(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        ctx.commit().unwrap();
        for (t, p) in partitions {
            let c = ctx.committed(t, *p).unwrap().map_or(0, |c| c.offset);
            self.0.lock().unwrap().push(c);
        }
    }
}

#[test]
fn a_revoke_hands_over_exactly_what_was_handed_out() {
    let (_tmp, mq) = setup(1, 100);
    let committed = Arc::new(Mutex::new(Vec::new()));
    let conf = ConsumerConfig::group("g").enable_auto_commit(false);
    let mut a = mq.consumer(conf.clone()).unwrap();
    a.subscribe_with(&["t"], Box::new(CommitOnRevoke(Arc::clone(&committed))))
        .unwrap();
    for i in 0..7u64 {
        assert_eq!(one(&mut a).unwrap().offset(), i);
    }
    // `a` holds the rest of its poll; a second member takes over on close.
    let mut b = mq.consumer(conf).unwrap();
    b.subscribe(&["t"]).unwrap();
    a.close();
    assert_eq!(*committed.lock().unwrap(), vec![7]);
    let m = b.poll_one(Duration::from_millis(200)).unwrap().unwrap();
    assert_eq!(
        m.offset(),
        7,
        "the new owner starts at the committed offset"
    );
}

/// Sizes of each member's assignment.
fn sizes(members: &[Consumer]) -> Vec<usize> {
    members.iter().map(|c| c.assignment().len()).collect()
}

#[test]
fn a_group_settles_within_two_polls_whatever_members_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Arc::new(Broker::open(tmp.path(), cfg()).unwrap());
    mq.create_topic("t", TopicConfig::new(8)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // A producer writing continuously, to every partition.
    let writer = {
        let (mq, stop) = (Arc::clone(&mq), Arc::clone(&stop));
        std::thread::spawn(move || {
            let p = mq.producer(ProducerConfig::default()).unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for part in 0..8 {
                    p.send(Record::new("t").partition(part).value(n.to_string()))
                        .unwrap();
                }
                n += 1;
                if n.is_multiple_of(64) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            n
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let conf = ConsumerConfig::group("g").enable_auto_commit(true);
    // Delivered (partition, offset) pairs, across members and rebalances.
    let mut seen: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let take = |c: &mut Consumer, seen: &mut BTreeMap<u32, Vec<u64>>| {
        if let Some(m) = c.poll_one(Duration::from_millis(100)).unwrap() {
            seen.entry(m.partition()).or_default().push(m.offset());
        }
    };
    let mut members = vec![mq.consumer(conf.clone()).unwrap()];
    members[0].subscribe(&["t"]).unwrap();
    for _ in 0..5 {
        take(&mut members[0], &mut seen);
    }
    assert_eq!(sizes(&members), vec![8]);
    // A member joins while the first holds most of a poll's worth.
    let mut joining = mq.consumer(conf.clone()).unwrap();
    joining.subscribe(&["t"]).unwrap();
    members.push(joining);
    for _ in 0..2 {
        for c in &mut members {
            take(c, &mut seen);
        }
    }
    assert_eq!(sizes(&members), vec![4, 4], "settled within two polls each");
    // A third.
    let mut third = mq.consumer(conf.clone()).unwrap();
    third.subscribe(&["t"]).unwrap();
    members.push(third);
    for _ in 0..2 {
        for c in &mut members {
            take(c, &mut seen);
        }
    }
    let mut s = sizes(&members);
    s.sort_unstable();
    assert_eq!(s, vec![2, 3, 3]);
    // The first leaves: the others take its partitions over.
    let mut first = members.remove(0);
    first.close();
    for _ in 0..2 {
        for c in &mut members {
            take(c, &mut seen);
        }
    }
    assert_eq!(sizes(&members).iter().sum::<usize>(), 8);
    let mut s = sizes(&members);
    s.sort_unstable();
    assert_eq!(s, vec![4, 4]);
    // Read on for a while, then check nothing was skipped: every
    // partition's delivered offsets cover 0..=max (at least once).
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        for c in &mut members {
            take(c, &mut seen);
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    for (p, offsets) in &mut seen {
        offsets.sort_unstable();
        offsets.dedup();
        let max = *offsets.last().unwrap();
        assert_eq!(
            offsets.len() as u64,
            max + 1,
            "partition {p}: an offset below {max} was never delivered"
        );
    }
}
