//! Concurrency stress: producer threads and consumers in several consumer
//! groups with random joins, leaves, re-subscriptions, commits, seeks,
//! expulsions, partition additions and topics created while pattern
//! subscriptions are live, for a bounded time, with invariants checked as it
//! runs and at the end:
//!
//! - one owner per partition per group: the rebalance listeners keep a shared
//!   ownership map, and a partition assigned to a member while another member
//!   still holds it is a violation; after every poll a consumer's assignment
//!   must be what the map says it owns and every message must come from a
//!   partition it owns; once the group settles, every partition has exactly
//!   one owner;
//! - no loss: every acknowledged record is consumed at least once by every
//!   group subscribed to its topic (duplicates are allowed, counted and
//!   printed), and every record in the log was acknowledged with its offset
//!   and payload;
//! - order: within one consumer's continuous ownership of a partition the
//!   offsets it is handed are consecutive (from the group's committed offset)
//!   unless it seeked; one producer thread's counters increase with offset in
//!   every partition;
//! - committed offsets are never ahead of the log end nor of what the group
//!   consumed; after the producers stop, every group drains to the end and
//!   commits it.
//!
//! `MQLITE_STRESS_SECS` (default 4) sets how long producers and chaos run;
//! the seed is printed and `MQLITE_STRESS_SEED` replays its random choices
//! (thread scheduling is not replayed). `--nocapture` shows the report.
#![allow(clippy::unwrap_used)]

mod audit;
#[path = "../common/mod.rs"]
mod common;
mod consumers;
mod load;
mod state;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use audit::*;
use common::Rng;
use consumers::*;
use load::*;
use mqlite::sync::lock;
use mqlite::{
    Acks, AssignmentStrategy, Broker, Compression, Consumer, ConsumerConfig, ConsumerWaker, Error,
    Message, Partitioner, Producer, ProducerConfig, RebalanceContext, RebalanceListener, Record,
    RecordMetadata, TopicConfig,
};
use state::*;

/// Topics that exist from the start; every group reads them.
pub(crate) const STATIC_TOPICS: [&str; 2] = ["s0", "s1"];
/// The subscription of the pattern groups: the static topics and the
/// `dyn-N` topics created while they run.
pub(crate) const PATTERN: &str = "s[0-9]+|dyn-[0-9]+";
pub(crate) const STATIC_MAX_PARTITIONS: u32 = 16;
pub(crate) const DYN_MAX_PARTITIONS: u32 = 10;
/// Small segments, so that rolls happen while consumers read.
pub(crate) const SEGMENT_BYTES: u64 = 256 << 10;
/// Most violations kept in full (all are counted).
pub(crate) const MAX_REPORTED: usize = 200;

pub(crate) const RUN: u8 = 0;
pub(crate) const DRAIN: u8 = 1;
pub(crate) const SETTLE: u8 = 2;
pub(crate) const STOP: u8 = 3;

/// A partition: `(topic, partition)`.
pub(crate) type Tp = (String, u32);

/// A member id and its assignment, as a consumer thread last saw them.
pub(crate) type Seen = (String, Vec<Tp>);

/// One consumer group of the run.
pub(crate) struct GroupSpec {
    pub(crate) name: &'static str,
    pub(crate) strategy: AssignmentStrategy,
    /// Subscribes with [`PATTERN`] rather than to [`STATIC_TOPICS`].
    pub(crate) pattern: bool,
    pub(crate) auto_commit: bool,
    /// Members sometimes stop polling for longer than a short
    /// `max_poll_interval_ms` and are expelled.
    pub(crate) expiry: bool,
    pub(crate) slots: usize,
}

pub(crate) const GROUPS: &[GroupSpec] = &[
    GroupSpec {
        name: "g-range",
        strategy: AssignmentStrategy::Averagely,
        pattern: false,
        auto_commit: true,
        expiry: false,
        slots: 3,
    },
    GroupSpec {
        name: "g-sticky",
        strategy: AssignmentStrategy::Sticky,
        pattern: false,
        auto_commit: false,
        expiry: false,
        slots: 3,
    },
    GroupSpec {
        name: "g-rr",
        strategy: AssignmentStrategy::RoundRobin,
        pattern: true,
        auto_commit: false,
        expiry: false,
        slots: 3,
    },
    GroupSpec {
        name: "g-hash",
        strategy: AssignmentStrategy::ConsistentHash,
        pattern: true,
        auto_commit: true,
        expiry: true,
        slots: 2,
    },
];

/// `max_poll_interval_ms` of the expiry group, and how long its members
/// stall to get expelled.
pub(crate) const EXPIRY_MS: u64 = 1000;
pub(crate) const STALL_MS: (u64, u64) = (1300, 1700);

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

#[test]
fn stress() {
    let secs = env_u64("MQLITE_STRESS_SECS").unwrap_or(4);
    let seed = Rng::seed_from_env("MQLITE_STRESS_SEED");
    println!("stress: seed {seed}, {secs} s (replay with MQLITE_STRESS_SEED={seed})");
    let mut rng = Rng::new(seed);
    let tmp = tempfile::tempdir().unwrap();
    let prefault = rng.range(0, 2) == 0;
    let mq = Broker::open(tmp.path(), common::cfg().prefault(prefault)).unwrap();
    for t in STATIC_TOPICS {
        let n = rng.range(1, 4) as u32;
        mq.create_topic(t, TopicConfig::new(n).segment_bytes(SEGMENT_BYTES))
            .unwrap();
    }
    let slots: usize = GROUPS.iter().map(|g| g.slots).sum();
    let sh = Arc::new(Shared {
        seed,
        mq,
        phase: AtomicU8::new(RUN),
        stop_producers: AtomicBool::new(false),
        acks: Mutex::default(),
        owners: Mutex::default(),
        tracks: Mutex::default(),
        published: Mutex::default(),
        wakers: Mutex::new(vec![ConsumerWaker::default(); slots]),
        violations: Mutex::default(),
        violation_count: AtomicU64::new(0),
        generations: Mutex::new(vec![0; GROUPS.len()]),
        ops: Ops::default(),
    });

    let mut consumers: Vec<JoinHandle<()>> = Vec::new();
    for (g, spec) in GROUPS.iter().enumerate() {
        for slot in 0..spec.slots {
            let s = Slot {
                sh: Arc::clone(&sh),
                g,
                slot,
                rng: Rng::new(rng.next_u64()),
                state: Arc::default(),
                consumer: None,
                subscribed: false,
                rejoin_at: Instant::now(),
                uncommitted: false,
                caught_up: false,
                last_commit: Instant::now(),
                next_chaos: Instant::now(),
            };
            consumers.push(
                std::thread::Builder::new()
                    .name(format!("{}-s{slot}", spec.name))
                    .spawn(move || s.run())
                    .unwrap(),
            );
        }
    }
    let shared_producer = Arc::new(sh.mq.producer(producer_config(Kind::Shared)).unwrap());
    let kinds = [
        (Kind::Shared, Some(Arc::clone(&shared_producer))),
        (Kind::Shared, Some(shared_producer)),
        (Kind::Lingering, None),
        (Kind::Durable, None),
    ];
    let mut producers = Vec::new();
    for (source, (kind, shared)) in kinds.into_iter().enumerate() {
        let sh = Arc::clone(&sh);
        let seed = rng.next_u64();
        producers.push(
            std::thread::Builder::new()
                .name(format!("producer-{source}"))
                .spawn(move || producer_thread(sh, source as u16, kind, shared, seed))
                .unwrap(),
        );
    }
    let chaos = {
        let sh = Arc::clone(&sh);
        let seed = rng.next_u64();
        let max_dyn = 2 + (secs / 10) as u32;
        std::thread::spawn(move || chaos_thread(sh, seed, max_dyn))
    };

    // Run: watch the groups from outside.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) {
        sh.observe();
        std::thread::sleep(Duration::from_millis(20));
    }
    sh.stop_producers.store(true, Ordering::Release);
    for h in producers {
        if h.join().is_err() {
            sh.violation("a producer thread panicked".into());
        }
    }
    if chaos.join().is_err() {
        sh.violation("the chaos thread panicked".into());
    }
    let run_secs = started.elapsed().as_secs_f64();
    let (sent, done) = (
        sh.ops.async_sent.load(Ordering::Relaxed),
        sh.ops.async_done.load(Ordering::Relaxed),
    );
    if sent != done {
        sh.violation(format!(
            "{sent} records sent with send_async, {done} callbacks after flush"
        ));
    }

    // Drain: everyone joins and commits what it consumes.
    let backlog: u64 = (0..GROUPS.len())
        .flat_map(|g| {
            sh.group_partitions(g)
                .into_iter()
                .map(move |(tp, end)| (g, tp, end))
        })
        .map(|(g, tp, end)| end.saturating_sub(sh.frontier(g, &tp)))
        .sum();
    sh.phase.store(DRAIN, Ordering::Release);
    let drain_started = Instant::now();
    let drain_limit = Duration::from_secs(60 + secs);
    let mut drained = false;
    loop {
        sh.observe();
        match sh.drained() {
            Ok(()) => {
                drained = true;
                break;
            }
            Err(what) if drain_started.elapsed() > drain_limit => {
                sh.violation(format!("not drained after {drain_limit:?}: {what}"));
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let drain_secs = drain_started.elapsed().as_secs_f64();
    let mut settle_secs = 0.0;

    // Settle: every partition with exactly one owner, as every member sees it.
    if drained {
        sh.phase.store(SETTLE, Ordering::Release);
        let settle_started = Instant::now();
        loop {
            match sh.settled() {
                Ok(()) => break,
                Err(what) if settle_started.elapsed() > Duration::from_secs(30) => {
                    sh.violation(format!("groups did not settle in 30 s: {what}"));
                    break;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        settle_secs = settle_started.elapsed().as_secs_f64();
        // Nothing moved while settling: still drained.
        if let Err(what) = sh.drained() {
            sh.violation(format!("after settling: {what}"));
        }
    }
    sh.phase.store(STOP, Ordering::Release);
    for h in consumers {
        if h.join().is_err() {
            sh.violation("a consumer thread panicked".into());
        }
    }
    sh.observe();
    let left: Vec<_> = lock(&sh.owners).keys().cloned().collect();
    if !left.is_empty() {
        sh.violation(format!(
            "partitions still owned after every consumer closed: {left:?}"
        ));
    }
    for spec in GROUPS {
        let info = sh.mq.describe_group(spec.name).unwrap();
        if !info.members.is_empty() {
            sh.violation(format!(
                "group {}: members left after every consumer closed: {:?}",
                spec.name, info.members
            ));
        }
    }

    // Audit the log against the acknowledgements.
    let in_log = audit(&sh);
    let acked = sh.ops.records_acked.load(Ordering::Relaxed);
    if in_log != acked {
        sh.violation(format!("{in_log} records in the log, {acked} acknowledged"));
    }

    // Report.
    let generations = lock(&sh.generations).clone();
    let topics = sh.mq.topics();
    let partitions: usize = topics
        .iter()
        .map(|t| sh.mq.topic(t).unwrap().partitions.len())
        .sum();
    println!(
        "stress: seed {seed}; run {run_secs:.1} s, drain {drain_secs:.3} s ({backlog} records behind), settle {settle_secs:.3} s; {} topics, {partitions} partitions; prefault {prefault}",
        topics.len()
    );
    for (g, spec) in GROUPS.iter().enumerate() {
        println!(
            "stress: group {} ({}, {}): {} rebalances (generation)",
            spec.name,
            spec.strategy,
            if spec.pattern { "pattern" } else { "topics" },
            generations[g]
        );
    }
    for (name, n) in sh.ops.report() {
        println!("stress:   {name:<22} {n}");
    }
    let count = sh.violation_count.load(Ordering::Relaxed);
    println!("stress: {count} violations");
    let violations = lock(&sh.violations).clone();
    assert!(
        violations.is_empty(),
        "seed {seed}: {count} violations (replay with MQLITE_STRESS_SEED={seed}):\n{}",
        violations.join("\n")
    );
}
