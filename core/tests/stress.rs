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

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::Rng;
use mqlite::{
    Acks, AssignmentStrategy, Broker, Compression, Consumer, ConsumerConfig, ConsumerWaker, Error,
    Message, Partitioner, Producer, ProducerConfig, RebalanceContext, RebalanceListener, Record,
    RecordMetadata, TopicConfig,
};

/// Topics that exist from the start; every group reads them.
const STATIC_TOPICS: [&str; 2] = ["s0", "s1"];
/// The subscription of the pattern groups: the static topics and the
/// `dyn-N` topics created while they run.
const PATTERN: &str = "s[0-9]+|dyn-[0-9]+";
const STATIC_MAX_PARTITIONS: u32 = 16;
const DYN_MAX_PARTITIONS: u32 = 10;
/// Small segments, so that rolls happen while consumers read.
const SEGMENT_BYTES: u64 = 256 << 10;
/// Most violations kept in full (all are counted).
const MAX_REPORTED: usize = 200;

const RUN: u8 = 0;
const DRAIN: u8 = 1;
const SETTLE: u8 = 2;
const STOP: u8 = 3;

/// A partition: `(topic, partition)`.
type Tp = (String, u32);

/// A member id and its assignment, as a consumer thread last saw them.
type Seen = (String, Vec<Tp>);

/// One consumer group of the run.
struct GroupSpec {
    name: &'static str,
    strategy: AssignmentStrategy,
    /// Subscribes with [`PATTERN`] rather than to [`STATIC_TOPICS`].
    pattern: bool,
    auto_commit: bool,
    /// Members sometimes stop polling for longer than a short
    /// `max_poll_interval_ms` and are expelled.
    expiry: bool,
    slots: usize,
}

const GROUPS: &[GroupSpec] = &[
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
const EXPIRY_MS: u64 = 1000;
const STALL_MS: (u64, u64) = (1300, 1700);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

macro_rules! counters {
    ($($name:ident: $doc:literal,)*) => {
        /// Operations performed, for the report.
        #[derive(Default)]
        struct Ops { $(#[doc = $doc] $name: AtomicU64,)* }

        impl Ops {
            fn report(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    records_acked: "records acknowledged to producers",
    sends: "blocking single sends",
    batch_sends: "send_batch calls",
    async_sent: "records sent with send_async",
    async_done: "send_async callbacks run",
    producer_restarts: "producers closed and replaced",
    partition_additions: "add_partitions calls",
    topics_created: "topics created under live pattern subscriptions",
    joins: "consumers created and subscribed",
    resubscribes: "subscribe again on a member (leave + join)",
    leaves_close: "members closed",
    leaves_unsubscribe: "members unsubscribed",
    expulsions: "members expelled for not polling (and joined again)",
    stalls: "stalls past max_poll_interval_ms",
    lost_partitions: "partitions an expelled member lost (on_lost)",
    expelled_handovers: "partitions taken over from an expelled member",
    zombie_polls: "polls by a member expelled meanwhile",
    assigned: "partitions assigned (on_assign)",
    revoked: "partitions revoked (on_revoke)",
    consumer_rebalances: "rebalances consumers took part in (ConsumerStats)",
    polls: "polls",
    messages: "messages consumed",
    commits: "commit() calls",
    commit_offsets: "commit_offsets() calls (at or below the position)",
    revoke_commits: "commits in on_revoke",
    drain_commits: "commits while draining",
    rejected_commits: "commits refused as expected (not owned, past the end)",
    seeks: "backward seeks",
    seeks_to_beginning: "seek_to_beginning calls",
    rejected_seeks: "seeks refused as expected (past the end, not assigned)",
    wakeups: "ConsumerWaker::wakeup calls",
    dup_handover: "records delivered again after a hand-over",
    dup_seek: "records read again after a seek",
    observations: "monitor observations of every group",
}

/// Consumption of one partition by one group.
#[derive(Default)]
struct Track {
    /// Times each offset was delivered (saturating).
    counts: Vec<u8>,
    /// Every offset below it was delivered at least once.
    frontier: u64,
}

/// One continuous ownership of a partition by one consumer.
struct Stint {
    /// The offset the consumer must be handed next.
    expected: u64,
    /// Offsets below it were delivered in this stint before a backward seek.
    reread_until: u64,
    /// Last counter seen per producer thread since the stint began or seeked.
    counters: HashMap<u16, u64>,
}

/// What one consumer slot knows of its consumer, shared with its listener.
#[derive(Default)]
struct SlotState {
    member: Option<String>,
    /// Set while the slot subscribes on purpose (a new member id is expected).
    rejoining: bool,
    /// Ordered, so that a seed picks the same partitions again.
    stints: BTreeMap<Tp, Stint>,
}

struct Shared {
    seed: u64,
    mq: Broker,
    phase: AtomicU8,
    stop_producers: AtomicBool,
    /// Per partition, by offset: the acknowledged payload (`pack`), or
    /// `NONE`.
    acks: Mutex<HashMap<Tp, Vec<u64>>>,
    /// `(group index, partition)` → member id, kept by the listeners.
    owners: Mutex<HashMap<(usize, Tp), String>>,
    tracks: Mutex<HashMap<(usize, Tp), Track>>,
    /// `(group, slot)` → the member id and assignment after its last poll.
    published: Mutex<HashMap<(usize, usize), Seen>>,
    wakers: Mutex<Vec<ConsumerWaker>>,
    violations: Mutex<Vec<String>>,
    violation_count: AtomicU64,
    generations: Mutex<Vec<u64>>,
    ops: Ops,
}

const NONE: u64 = u64::MAX;

fn pack(source: u16, counter: u64) -> u64 {
    ((source as u64) << 48) | counter
}

fn mix(source: u16, counter: u64) -> u64 {
    let mut z = pack(source, counter).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A record's value: producer thread, counter, and a filler derived from
/// both (so a garbled value is recognised).
fn payload(source: u16, counter: u64) -> Vec<u8> {
    let h = mix(source, counter);
    let fill = (h % 48) as usize;
    let mut v = Vec::with_capacity(11 + fill);
    v.extend_from_slice(&source.to_le_bytes());
    v.extend_from_slice(&counter.to_le_bytes());
    v.push(fill as u8);
    v.extend((0..fill).map(|i| (h >> ((i % 8) * 8)) as u8 ^ i as u8));
    v
}

/// The producer thread and counter of a value made by [`payload`].
fn parse_payload(v: &[u8]) -> Option<(u16, u64)> {
    if v.len() < 11 {
        return None;
    }
    let source = u16::from_le_bytes([v[0], v[1]]);
    let counter = u64::from_le_bytes(v[2..10].try_into().ok()?);
    (v == payload(source, counter).as_slice()).then_some((source, counter))
}

fn tp_of(m: &Message) -> Tp {
    (m.topic().to_owned(), m.partition())
}

impl Shared {
    fn violation(&self, what: String) {
        let n = self.violation_count.fetch_add(1, Ordering::Relaxed);
        if (n as usize) < MAX_REPORTED {
            eprintln!("stress VIOLATION (seed {}): {what}", self.seed);
            lock(&self.violations).push(what);
        }
    }

    fn bump(&self, counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn phase(&self) -> u8 {
        self.phase.load(Ordering::Acquire)
    }

    /// End offset of a partition, if it exists.
    fn end_offset(&self, topic: &str, partition: u32) -> Option<u64> {
        let info = self.mq.topic(topic).ok()?;
        info.partitions
            .get(partition as usize)
            .map(|p| p.end_offset)
    }

    /// Every partition the group `g` reads: `(partition, end offset)`.
    fn group_partitions(&self, g: usize) -> Vec<(Tp, u64)> {
        let topics: Vec<String> = if GROUPS[g].pattern {
            self.mq.topics()
        } else {
            STATIC_TOPICS.iter().map(|t| t.to_string()).collect()
        };
        let mut out = Vec::new();
        for t in topics {
            if let Ok(info) = self.mq.topic(&t) {
                for p in &info.partitions {
                    out.push(((t.clone(), p.partition), p.end_offset));
                }
            }
        }
        out
    }

    fn is_member(&self, g: usize, id: &str) -> bool {
        self.mq
            .describe_group(GROUPS[g].name)
            .is_ok_and(|info| info.members.iter().any(|m| m.id == id))
    }

    /// Records that `send` acknowledged `(source, counter)` at `md`.
    fn ack(&self, md: &RecordMetadata, source: u16, counter: u64) {
        if md.duplicate {
            self.violation(format!(
                "producer {source} record {counter} acknowledged as a duplicate (never re-sent): {md:?}"
            ));
            return;
        }
        let Some(offset) = md.known_offset() else {
            self.violation(format!(
                "producer {source} record {counter} acknowledged without an offset: {md:?}"
            ));
            return;
        };
        {
            let mut acks = lock(&self.acks);
            let v = acks
                .entry((md.topic.to_string(), md.partition))
                .or_default();
            let i = offset as usize;
            if v.len() <= i {
                v.resize(i + 1, NONE);
            }
            if v[i] != NONE {
                let prev = v[i];
                drop(acks);
                self.violation(format!(
                    "{}/{} offset {offset} acknowledged twice: to producer {} record {} and to producer {source} record {counter}",
                    md.topic,
                    md.partition,
                    prev >> 48,
                    prev & ((1 << 48) - 1)
                ));
                return;
            }
            v[i] = pack(source, counter);
        }
        self.bump(&self.ops.records_acked, 1);
    }

    /// Member `me` of group `g` was just assigned `tp` (from `on_assign`).
    fn take_ownership(&self, g: usize, tp: &Tp, me: &str) {
        let prev = lock(&self.owners).insert((g, tp.clone()), me.to_owned());
        match prev {
            None => {}
            Some(prev) if prev == me => self.violation(format!(
                "group {}: {}/{} assigned to {me}, which already holds it",
                GROUPS[g].name, tp.0, tp.1
            )),
            Some(prev) => {
                if self.is_member(g, &prev) {
                    self.violation(format!(
                        "group {}: {}/{} assigned to {me} while {prev} still holds it (no on_revoke ran)",
                        GROUPS[g].name, tp.0, tp.1
                    ));
                } else if GROUPS[g].expiry {
                    self.bump(&self.ops.expelled_handovers, 1);
                } else {
                    self.violation(format!(
                        "group {}: {}/{} assigned to {me}; its holder {prev} left the group without revoking it",
                        GROUPS[g].name, tp.0, tp.1
                    ));
                }
            }
        }
    }

    /// Member `me` of group `g` gives up `tp` (from `on_revoke`).
    fn release_ownership(&self, g: usize, tp: &Tp, me: &str) {
        let prev = lock(&self.owners).remove(&(g, tp.clone()));
        if prev.as_deref() != Some(me) {
            self.violation(format!(
                "group {}: {me} revoked {}/{}, which the listeners saw owned by {prev:?}",
                GROUPS[g].name, tp.0, tp.1
            ));
        }
    }

    /// Brings the slot's idea of its member id in line with the consumer's.
    /// A new id the slot did not ask for means the consumer was expelled and
    /// joined again by itself: what it held is gone without a revoke.
    fn sync_member(&self, g: usize, member_id: Option<&str>, st: &mut SlotState) {
        let now = member_id.map(str::to_owned);
        if now == st.member {
            return;
        }
        if let (Some(old), Some(new), false) = (&st.member, &now, st.rejoining) {
            self.bump(&self.ops.expulsions, 1);
            if !GROUPS[g].expiry {
                self.violation(format!(
                    "group {}: member {old} was replaced by {new} without leaving (expelled with max_poll_interval_ms of 300 s?)",
                    GROUPS[g].name
                ));
            }
            let mut owners = lock(&self.owners);
            let before = owners.len();
            owners.retain(|(gg, _), o| !(*gg == g && o == old));
            let lost = before - owners.len();
            drop(owners);
            if lost > 0 || !st.stints.is_empty() {
                self.violation(format!(
                    "group {}: {old} was expelled and still held {lost} partitions ({} stints): on_lost did not run",
                    GROUPS[g].name,
                    st.stints.len()
                ));
            }
            st.stints.clear();
        } else if !st.stints.is_empty() {
            self.violation(format!(
                "group {}: member {:?} became {now:?} still holding {:?} (no on_revoke)",
                GROUPS[g].name,
                st.member,
                st.stints.keys().collect::<Vec<_>>()
            ));
            st.stints.clear();
        }
        st.member = now;
    }

    /// After a poll: the consumer's assignment, its slot's stints and the
    /// ownership map agree.
    fn check_consistency(&self, g: usize, c: &Consumer, st: &SlotState) {
        let mut assigned = c.assignment();
        assigned.sort();
        let mut stints: Vec<Tp> = st.stints.keys().cloned().collect();
        stints.sort();
        let name = GROUPS[g].name;
        if assigned != stints {
            self.violation(format!(
                "group {name}: member {:?} reads {assigned:?} but was assigned {stints:?} by its listener",
                st.member
            ));
        }
        let Some(me) = &st.member else {
            if !assigned.is_empty() {
                self.violation(format!(
                    "group {name}: a consumer outside the group reads {assigned:?}"
                ));
            }
            return;
        };
        let mut mine: Vec<Tp> = lock(&self.owners)
            .iter()
            .filter(|((gg, _), o)| *gg == g && *o == me)
            .map(|((_, tp), _)| tp.clone())
            .collect();
        mine.sort();
        if mine != assigned {
            if GROUPS[g].expiry && !self.is_member(g, me) {
                // Expelled after this poll's sync: it learns at its next poll.
                self.bump(&self.ops.zombie_polls, 1);
            } else {
                self.violation(format!(
                    "group {name}: member {me} reads {assigned:?}, the ownership map says it owns {mine:?}"
                ));
            }
        }
    }

    /// Checks and records the messages one poll returned.
    fn consume(&self, g: usize, st: &mut SlotState, msgs: &[Message]) {
        if msgs.is_empty() {
            return;
        }
        let name = GROUPS[g].name;
        let mut bad = Vec::new();
        let acks = lock(&self.acks);
        let mut tracks = lock(&self.tracks);
        let mut dup_handover = 0;
        let mut dup_seek = 0;
        for m in msgs {
            let tp = tp_of(m);
            let o = m.offset();
            let Some(stint) = st.stints.get_mut(&tp) else {
                bad.push(format!(
                    "group {name}: member {:?} handed {}/{} offset {o}, a partition it was not assigned",
                    st.member, tp.0, tp.1
                ));
                continue;
            };
            if o != stint.expected {
                bad.push(format!(
                    "group {name}: member {:?} handed {}/{} offset {o}, expected {} ({})",
                    st.member,
                    tp.0,
                    tp.1,
                    stint.expected,
                    if o < stint.expected {
                        "went backwards"
                    } else {
                        "skipped records"
                    }
                ));
            }
            stint.expected = o + 1;
            let parsed = m.value().and_then(parse_payload);
            let Some((source, counter)) = parsed else {
                bad.push(format!(
                    "group {name}: {}/{} offset {o} has a garbled value {:?}",
                    tp.0,
                    tp.1,
                    m.value()
                ));
                continue;
            };
            if let Some(last) = stint.counters.insert(source, counter) {
                if counter <= last {
                    bad.push(format!(
                        "group {name}: {}/{} offset {o}: producer {source} record {counter} after its record {last}",
                        tp.0, tp.1
                    ));
                }
            }
            if let Some(&a) = acks.get(&tp).and_then(|v| v.get(o as usize)) {
                if a != NONE && a != pack(source, counter) {
                    bad.push(format!(
                        "group {name}: {}/{} offset {o} holds producer {source} record {counter}; send acknowledged producer {} record {} there",
                        tp.0, tp.1, a >> 48, a & ((1 << 48) - 1)
                    ));
                }
            }
            let t = tracks.entry((g, tp)).or_default();
            let i = o as usize;
            if t.counts.len() <= i {
                t.counts.resize(i + 1, 0);
            }
            if t.counts[i] > 0 {
                if o < stint.reread_until {
                    dup_seek += 1;
                } else {
                    dup_handover += 1;
                }
            }
            t.counts[i] = t.counts[i].saturating_add(1);
            while t.counts.get(t.frontier as usize).is_some_and(|&n| n > 0) {
                t.frontier += 1;
            }
        }
        drop(tracks);
        drop(acks);
        self.bump(&self.ops.messages, msgs.len() as u64);
        self.bump(&self.ops.dup_handover, dup_handover);
        self.bump(&self.ops.dup_seek, dup_seek);
        for b in bad {
            self.violation(b);
        }
    }

    fn frontier(&self, g: usize, tp: &Tp) -> u64 {
        lock(&self.tracks)
            .get(&(g, tp.clone()))
            .map_or(0, |t| t.frontier)
    }

    /// One look at every group from outside: owners unique, committed
    /// offsets not past the log end nor past what the group consumed.
    fn observe(&self) {
        for (g, spec) in GROUPS.iter().enumerate() {
            let info = match self.mq.describe_group(spec.name) {
                Ok(i) => i,
                Err(e) => {
                    self.violation(format!("describe_group({}): {e}", spec.name));
                    continue;
                }
            };
            {
                let mut gens = lock(&self.generations);
                gens[g] = gens[g].max(info.generation);
            }
            let mut seen = BTreeSet::new();
            for m in &info.members {
                for tp in &m.partitions {
                    if !seen.insert(tp.clone()) {
                        self.violation(format!(
                            "group {}: {}/{} owned twice in describe_group: {info:?}",
                            spec.name, tp.0, tp.1
                        ));
                    }
                }
            }
            // Ends and frontiers are read after the committed offsets: both
            // only grow.
            let mut ends: HashMap<String, Vec<u64>> = HashMap::new();
            for (t, p, c) in &info.committed {
                let end = match ends.get(t) {
                    Some(v) => v.get(*p as usize).copied(),
                    None => match self.mq.topic(t) {
                        Ok(ti) => {
                            let v: Vec<u64> = ti.partitions.iter().map(|x| x.end_offset).collect();
                            let e = v.get(*p as usize).copied();
                            ends.insert(t.clone(), v);
                            e
                        }
                        Err(_) => None,
                    },
                };
                let Some(end) = end else {
                    self.violation(format!(
                        "group {}: committed offset for {t}/{p}, which does not exist",
                        spec.name
                    ));
                    continue;
                };
                if c.offset > end {
                    self.violation(format!(
                        "group {}: committed {} for {t}/{p}, past its end {end}",
                        spec.name, c.offset
                    ));
                }
                let frontier = self.frontier(g, &(t.clone(), *p));
                if c.offset > frontier {
                    self.violation(format!(
                        "group {}: committed {} for {t}/{p}, but the group has only consumed everything below {frontier}",
                        spec.name, c.offset
                    ));
                }
            }
        }
        self.bump(&self.ops.observations, 1);
    }

    /// Whether every group consumed and committed every partition it reads
    /// to its end; else what is missing.
    fn drained(&self) -> std::result::Result<(), String> {
        for (g, spec) in GROUPS.iter().enumerate() {
            let committed: HashMap<Tp, u64> = self
                .mq
                .describe_group(spec.name)
                .map_err(|e| e.to_string())?
                .committed
                .into_iter()
                .map(|(t, p, c)| ((t, p), c.offset))
                .collect();
            for (tp, end) in self.group_partitions(g) {
                let frontier = self.frontier(g, &tp);
                let c = committed.get(&tp).copied().unwrap_or(0);
                if frontier < end || c < end {
                    return Err(format!(
                        "group {}: {}/{} consumed below {frontier}, committed {c}, end {end}",
                        spec.name, tp.0, tp.1
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether every group settled: each partition it reads owned by exactly
    /// one member, and each member's own assignment equal to what the group
    /// says it owns; else what is not.
    fn settled(&self) -> std::result::Result<(), String> {
        let published = lock(&self.published).clone();
        for (g, spec) in GROUPS.iter().enumerate() {
            let info = self
                .mq
                .describe_group(spec.name)
                .map_err(|e| e.to_string())?;
            let mine: BTreeMap<String, Vec<Tp>> = published
                .iter()
                .filter(|((gg, _), _)| *gg == g)
                .map(|(_, (id, a))| (id.clone(), a.clone()))
                .collect();
            let theirs: BTreeMap<String, Vec<Tp>> = info
                .members
                .iter()
                .map(|m| {
                    let mut v = m.partitions.clone();
                    v.sort();
                    (m.id.clone(), v)
                })
                .collect();
            if mine != theirs {
                return Err(format!(
                    "group {}: consumers read {mine:?}, the group says {theirs:?}",
                    spec.name
                ));
            }
            let mut owned: BTreeMap<Tp, usize> = BTreeMap::new();
            for a in mine.values() {
                for tp in a {
                    *owned.entry(tp.clone()).or_default() += 1;
                }
            }
            for (tp, _) in self.group_partitions(g) {
                let n = owned.remove(&tp).unwrap_or(0);
                if n != 1 {
                    return Err(format!(
                        "group {}: {}/{} has {n} owners: {mine:?}",
                        spec.name, tp.0, tp.1
                    ));
                }
            }
            if !owned.is_empty() {
                return Err(format!(
                    "group {}: owns partitions it does not read: {owned:?}",
                    spec.name
                ));
            }
        }
        Ok(())
    }
}

/// The rebalance listener of one consumer slot.
struct Listener {
    sh: Arc<Shared>,
    g: usize,
    state: Arc<Mutex<SlotState>>,
    rng: Rng,
}

impl RebalanceListener for Listener {
    fn on_assign(&mut self, c: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        let sh = &self.sh;
        let mut st = lock(&self.state);
        sh.sync_member(self.g, c.member_id(), &mut st);
        let me = c.member_id().unwrap_or("<none>").to_owned();
        for tp in partitions {
            sh.take_ownership(self.g, tp, &me);
            // A new owner starts at the group's committed offset (nothing
            // is retained away here, so "earliest" is 0).
            let start = match c.committed(&tp.0, tp.1) {
                Ok(c) => c.map_or(0, |c| c.offset),
                Err(e) => {
                    sh.violation(format!("committed({}/{}) in on_assign: {e}", tp.0, tp.1));
                    0
                }
            };
            let stint = Stint {
                expected: start,
                reread_until: 0,
                counters: HashMap::new(),
            };
            if st.stints.insert(tp.clone(), stint).is_some() {
                sh.violation(format!(
                    "group {}: {}/{} assigned to {me} twice without a revoke",
                    GROUPS[self.g].name, tp.0, tp.1
                ));
            }
        }
        sh.bump(&sh.ops.assigned, partitions.len() as u64);
    }

    fn on_revoke(&mut self, c: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        let sh = Arc::clone(&self.sh);
        let g = self.g;
        let mut st = lock(&self.state);
        sh.sync_member(g, c.member_id(), &mut st);
        let me = c.member_id().unwrap_or("<none>").to_owned();
        // Manual committers hand over exactly what they processed, half the
        // time (the other half leaves duplicates for the next owner).
        let commit = !GROUPS[g].auto_commit && self.rng.range(0, 2) == 0;
        let mut to_commit = Vec::new();
        for tp in partitions {
            match st.stints.remove(tp) {
                Some(stint) => {
                    match c.position(&tp.0, tp.1) {
                        Ok(p) if p != stint.expected => sh.violation(format!(
                            "group {}: {me} position of {}/{} is {p}, but it was handed everything below {}",
                            GROUPS[g].name, tp.0, tp.1, stint.expected
                        )),
                        Ok(_) => {}
                        Err(e) => sh.violation(format!(
                            "position({}/{}) in on_revoke: {e}",
                            tp.0, tp.1
                        )),
                    }
                    to_commit.push((tp.clone(), stint.expected));
                }
                None => sh.violation(format!(
                    "group {}: {me} revoked {}/{}, which it was never assigned",
                    GROUPS[g].name, tp.0, tp.1
                )),
            }
            sh.release_ownership(g, tp, &me);
        }
        drop(st);
        if commit && !to_commit.is_empty() {
            let offsets: Vec<(&str, u32, u64, &str)> = to_commit
                .iter()
                .map(|((t, p), o)| (t.as_str(), *p, *o, "revoke"))
                .collect();
            match c.commit_offsets(&offsets) {
                Ok(()) => sh.bump(&sh.ops.revoke_commits, 1),
                Err(e) => sh.violation(format!(
                    "group {}: {me} commit in on_revoke of {offsets:?}: {e}",
                    GROUPS[g].name
                )),
            }
        }
        sh.bump(&sh.ops.revoked, partitions.len() as u64);
    }

    fn on_lost(&mut self, c: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        let sh = &self.sh;
        let g = self.g;
        let mut st = lock(&self.state);
        let me = c.member_id().unwrap_or("<none>").to_owned();
        if !GROUPS[g].expiry {
            sh.violation(format!(
                "group {}: {me} lost {partitions:?} but its members never stall",
                GROUPS[g].name
            ));
        }
        if sh.is_member(g, &me) {
            sh.violation(format!(
                "group {}: {me} told it lost {partitions:?} while still a member",
                GROUPS[g].name
            ));
        }
        for tp in partitions {
            if st.stints.remove(tp).is_none() {
                sh.violation(format!(
                    "group {}: {me} lost {}/{}, which it was never assigned",
                    GROUPS[g].name, tp.0, tp.1
                ));
            }
            // Another member may have taken it already.
            let mut owners = lock(&sh.owners);
            if owners.get(&(g, tp.clone())) == Some(&me) {
                owners.remove(&(g, tp.clone()));
            }
            drop(owners);
            // Nothing can be committed for a lost partition.
            match c.commit_offsets(&[(tp.0.as_str(), tp.1, 0, "lost")]) {
                Err(Error::CommitFailed(_)) => {}
                other => sh.violation(format!(
                    "group {}: {me} commit of lost {}/{}: {other:?}",
                    GROUPS[g].name, tp.0, tp.1
                )),
            }
        }
        drop(st);
        sh.bump(&sh.ops.lost_partitions, partitions.len() as u64);
    }
}

/// One consumer thread of a group: joins, polls, and in the run phase
/// leaves, re-subscribes, commits, seeks and stalls at random.
struct Slot {
    sh: Arc<Shared>,
    g: usize,
    slot: usize,
    rng: Rng,
    state: Arc<Mutex<SlotState>>,
    consumer: Option<Consumer>,
    subscribed: bool,
    rejoin_at: Instant,
    /// Messages since the last commit while draining.
    uncommitted: bool,
    /// The last poll returned nothing.
    caught_up: bool,
    /// When the last commit while draining was made.
    last_commit: Instant,
    /// When the next random action of the run phase is due.
    next_chaos: Instant,
}

impl Slot {
    fn run(mut self) {
        while self.sh.phase() != STOP {
            let phase = self.sh.phase();
            if !self.subscribed {
                if phase == RUN && Instant::now() < self.rejoin_at {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                self.join();
                continue;
            }
            self.poll_once();
            if phase == RUN {
                self.chaos();
            } else {
                self.drain_commit();
            }
        }
        self.leave(true);
    }

    fn listener(&mut self) -> Box<dyn RebalanceListener> {
        Box::new(Listener {
            sh: Arc::clone(&self.sh),
            g: self.g,
            state: Arc::clone(&self.state),
            rng: Rng::new(self.rng.next_u64()),
        })
    }

    /// Creates a consumer if there is none, and subscribes it.
    fn join(&mut self) {
        let spec = &GROUPS[self.g];
        let mut listener = None;
        if self.consumer.is_none() {
            let config = ConsumerConfig::group(spec.name)
                .client_id(format!("{}-s{}", spec.name, self.slot))
                .assignment_strategy(spec.strategy)
                .enable_auto_commit(spec.auto_commit)
                .auto_commit_interval_ms(self.rng.range(5, 100))
                .max_poll_records(self.rng.range(1, 300) as usize)
                .max_poll_interval_ms(if spec.expiry { EXPIRY_MS } else { 300_000 });
            match self.sh.mq.consumer(config) {
                Ok(c) => {
                    lock(&self.sh.wakers)[self.slot_index()] = c.waker();
                    self.consumer = Some(c);
                }
                Err(e) => {
                    self.sh.violation(format!("creating a consumer: {e}"));
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            }
            listener = Some(self.listener());
        }
        self.subscribe(listener);
        self.sh.bump(&self.sh.ops.joins, 1);
    }

    fn slot_index(&self) -> usize {
        GROUPS[..self.g].iter().map(|g| g.slots).sum::<usize>() + self.slot
    }

    /// Subscribes (again), with a new listener or keeping the one set.
    fn subscribe(&mut self, listener: Option<Box<dyn RebalanceListener>>) {
        let spec = &GROUPS[self.g];
        let c = self.consumer.as_mut().expect("a consumer");
        lock(&self.state).rejoining = true;
        let res = if spec.pattern {
            c.subscribe_pattern(PATTERN, listener)
        } else {
            match listener {
                Some(l) => c.subscribe_with(&STATIC_TOPICS, l),
                None => c.subscribe(&STATIC_TOPICS),
            }
        };
        let mut st = lock(&self.state);
        self.sh.sync_member(self.g, c.member_id(), &mut st);
        st.rejoining = false;
        drop(st);
        match res {
            Ok(()) => self.subscribed = true,
            Err(e) => self
                .sh
                .violation(format!("group {}: subscribe: {e}", spec.name)),
        }
    }

    /// Closes the consumer (or only unsubscribes it); its partitions must
    /// all have been revoked.
    fn leave(&mut self, close: bool) {
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        let spec = &GROUPS[self.g];
        if close {
            c.close();
            self.sh
                .bump(&self.sh.ops.consumer_rebalances, c.stats().rebalances);
        } else {
            c.unsubscribe();
        }
        {
            let mut st = lock(&self.state);
            self.sh.sync_member(self.g, c.member_id(), &mut st);
            if !st.stints.is_empty() {
                self.sh.violation(format!(
                    "group {}: left still holding {:?} (no on_revoke)",
                    spec.name,
                    st.stints.keys().collect::<Vec<_>>()
                ));
                st.stints.clear();
            }
            st.member = None;
        }
        if !c.assignment().is_empty() {
            self.sh.violation(format!(
                "group {}: after leaving, the consumer still reads {:?}",
                spec.name,
                c.assignment()
            ));
        }
        lock(&self.sh.published).remove(&(self.g, self.slot));
        if close {
            self.consumer = None;
        }
        self.subscribed = false;
    }

    fn poll_once(&mut self) {
        let timeout = Duration::from_millis(self.rng.range(0, 15));
        let c = self.consumer.as_mut().expect("subscribed");
        let res = c.poll(timeout);
        self.sh.bump(&self.sh.ops.polls, 1);
        let mut st = lock(&self.state);
        self.sh.sync_member(self.g, c.member_id(), &mut st);
        match res {
            Ok(msgs) => {
                self.uncommitted |= !msgs.is_empty();
                self.caught_up = msgs.is_empty();
                self.sh.consume(self.g, &mut st, &msgs);
            }
            Err(e) => self
                .sh
                .violation(format!("group {}: poll: {e}", GROUPS[self.g].name)),
        }
        self.sh.check_consistency(self.g, c, &st);
        let mut assignment = c.assignment();
        assignment.sort();
        let published = st.member.clone().map(|m| (m, assignment));
        drop(st);
        let mut p = lock(&self.sh.published);
        match published {
            Some(v) => p.insert((self.g, self.slot), v),
            None => p.remove(&(self.g, self.slot)),
        };
    }

    /// While draining: commit what was consumed. Commits are durable (an
    /// fsync each): while catching up, at most one every 100 ms.
    fn drain_commit(&mut self) {
        let due = self.caught_up || self.last_commit.elapsed() > Duration::from_millis(100);
        if !due || (!self.uncommitted && self.rng.range(0, 20) != 0) {
            return;
        }
        self.uncommitted = false;
        self.last_commit = Instant::now();
        let c = self.consumer.as_mut().expect("subscribed");
        match c.commit() {
            Ok(()) => self.sh.bump(&self.sh.ops.drain_commits, 1),
            Err(e) => self.sh.violation(format!(
                "group {}: commit while draining: {e}",
                GROUPS[self.g].name
            )),
        }
    }

    /// Now and then in the run phase, one random action.
    fn chaos(&mut self) {
        let now = Instant::now();
        if now < self.next_chaos {
            return;
        }
        self.next_chaos = now + Duration::from_millis(self.rng.range(5, 100));
        let spec = &GROUPS[self.g];
        let commit_odds = if spec.auto_commit { 100 } else { 250 };
        match self.rng.range(0, 1000) {
            0..=29 => {
                self.leave(true);
                self.sh.bump(&self.sh.ops.leaves_close, 1);
                self.rejoin_at = Instant::now() + Duration::from_millis(self.rng.range(0, 200));
            }
            30..=44 => {
                self.leave(false);
                self.sh.bump(&self.sh.ops.leaves_unsubscribe, 1);
                self.rejoin_at = Instant::now() + Duration::from_millis(self.rng.range(0, 200));
            }
            45..=64 => {
                self.subscribe(None);
                self.sh.bump(&self.sh.ops.resubscribes, 1);
            }
            65..=84 => self.bad_commits(),
            85..=184 => self.commit_some(),
            185..=304 => self.seek_back(false),
            305..=319 => self.seek_back(true),
            320..=339 => self.bad_seeks(),
            340..=389 => std::thread::sleep(Duration::from_millis(self.rng.range(10, 60))),
            390..=394 if spec.expiry => {
                self.sh.bump(&self.sh.ops.stalls, 1);
                std::thread::sleep(Duration::from_millis(
                    self.rng.range(STALL_MS.0, STALL_MS.1),
                ));
            }
            r if (400..400 + commit_odds).contains(&r) => self.commit_all(),
            _ => {}
        }
    }

    /// An owned partition and the offset this consumer must be handed next.
    fn pick_owned(&mut self) -> Option<(Tp, u64)> {
        let st = lock(&self.state);
        if st.stints.is_empty() {
            return None;
        }
        let i = self.rng.range(0, st.stints.len() as u64) as usize;
        st.stints
            .iter()
            .nth(i)
            .map(|(tp, s)| (tp.clone(), s.expected))
    }

    /// Commits every position, then checks what the group stored.
    fn commit_all(&mut self) {
        let spec = &GROUPS[self.g];
        let c = self.consumer.as_mut().expect("subscribed");
        match c.commit() {
            Ok(()) => {
                self.sh.bump(&self.sh.ops.commits, 1);
                let st = lock(&self.state);
                for (tp, s) in &st.stints {
                    let got = c.committed(&tp.0, tp.1).ok().flatten().map(|c| c.offset);
                    if got.unwrap_or(0) != s.expected {
                        self.sh.violation(format!(
                            "group {}: after commit(), {}/{} committed {got:?}, position {}",
                            spec.name, tp.0, tp.1, s.expected
                        ));
                    }
                }
            }
            Err(Error::CommitFailed(_)) if spec.expiry => {}
            Err(e) => self
                .sh
                .violation(format!("group {}: commit: {e}", spec.name)),
        }
    }

    /// Commits one owned partition at or below its position.
    fn commit_some(&mut self) {
        let Some((tp, expected)) = self.pick_owned() else {
            return;
        };
        let spec = &GROUPS[self.g];
        let offset = expected - self.rng.range(0, expected.min(20) + 1);
        let c = self.consumer.as_mut().expect("subscribed");
        match c.commit_offsets(&[(&tp.0, tp.1, offset, "stress")]) {
            Ok(()) => {
                self.sh.bump(&self.sh.ops.commit_offsets, 1);
                let got = c.committed(&tp.0, tp.1).ok().flatten();
                if got
                    .as_ref()
                    .is_none_or(|c| c.offset != offset || c.metadata != "stress")
                {
                    self.sh.violation(format!(
                        "group {}: committed {offset} to {}/{}, read back {got:?}",
                        spec.name, tp.0, tp.1
                    ));
                }
            }
            Err(Error::CommitFailed(_)) if spec.expiry => {}
            Err(e) => self.sh.violation(format!(
                "group {}: commit_offsets({}/{} at {offset}): {e}",
                spec.name, tp.0, tp.1
            )),
        }
    }

    /// Commits that must be refused: past the end, and of a partition this
    /// member does not own.
    fn bad_commits(&mut self) {
        let spec = &GROUPS[self.g];
        let g = self.g;
        let owned: BTreeSet<Tp> = lock(&self.state).stints.keys().cloned().collect();
        let all = self.sh.group_partitions(g);
        let c = self.consumer.as_mut().expect("subscribed");
        if let Some((tp, end)) = owned
            .iter()
            .next()
            .and_then(|tp| all.iter().find(|(t, _)| t == tp).cloned())
        {
            let past = end + 1_000_000_000;
            match c.commit_offsets(&[(&tp.0, tp.1, past, "")]) {
                Err(Error::OffsetOutOfRange { .. }) => {
                    self.sh.bump(&self.sh.ops.rejected_commits, 1)
                }
                other => self.sh.violation(format!(
                    "group {}: committing {past} to {}/{} (end {end}) gave {other:?}, not OffsetOutOfRange",
                    spec.name, tp.0, tp.1
                )),
            }
        }
        let others: Vec<&Tp> = all
            .iter()
            .map(|(tp, _)| tp)
            .filter(|tp| !owned.contains(*tp))
            .collect();
        if !others.is_empty() {
            let tp = others[self.rng.range(0, others.len() as u64) as usize];
            match c.commit_offsets(&[(&tp.0, tp.1, 0, "")]) {
                Err(Error::CommitFailed(_)) => self.sh.bump(&self.sh.ops.rejected_commits, 1),
                other => self.sh.violation(format!(
                    "group {}: member {:?} committing {}/{}, which it does not own, gave {other:?}, not CommitFailed",
                    spec.name,
                    c.member_id(),
                    tp.0,
                    tp.1
                )),
            }
        }
    }

    /// Seeks an owned partition backwards (or to its beginning).
    fn seek_back(&mut self, to_beginning: bool) {
        let Some((tp, expected)) = self.pick_owned() else {
            return;
        };
        let spec = &GROUPS[self.g];
        let target = if to_beginning {
            0
        } else {
            expected - self.rng.range(0, expected.min(50) + 1)
        };
        let c = self.consumer.as_mut().expect("subscribed");
        match c.position(&tp.0, tp.1) {
            Ok(p) if p == expected => {}
            other => self.sh.violation(format!(
                "group {}: position({}/{}) is {other:?}, but it was handed everything below {expected}",
                spec.name, tp.0, tp.1
            )),
        }
        let res = if to_beginning {
            c.seek_to_beginning(&tp.0, tp.1)
        } else {
            c.seek(&tp.0, tp.1, target)
        };
        match res {
            Ok(()) => {
                let mut st = lock(&self.state);
                let s = st.stints.get_mut(&tp).expect("picked");
                s.reread_until = s.reread_until.max(expected);
                s.expected = target;
                s.counters.clear();
                let counter = if to_beginning {
                    &self.sh.ops.seeks_to_beginning
                } else {
                    &self.sh.ops.seeks
                };
                self.sh.bump(counter, 1);
            }
            Err(e) => self.sh.violation(format!(
                "group {}: seek({}/{}, {target}): {e}",
                spec.name, tp.0, tp.1
            )),
        }
    }

    /// Seeks that must be refused and leave the position alone.
    fn bad_seeks(&mut self) {
        let spec = &GROUPS[self.g];
        let g = self.g;
        if let Some((tp, expected)) = self.pick_owned() {
            let c = self.consumer.as_mut().expect("subscribed");
            let past = self.sh.end_offset(&tp.0, tp.1).unwrap_or(0) + 1_000_000_000;
            match c.seek(&tp.0, tp.1, past) {
                Err(Error::OffsetOutOfRange { .. }) => self.sh.bump(&self.sh.ops.rejected_seeks, 1),
                other => self.sh.violation(format!(
                    "group {}: seek({}/{}, {past}) gave {other:?}, not OffsetOutOfRange",
                    spec.name, tp.0, tp.1
                )),
            }
            match c.position(&tp.0, tp.1) {
                Ok(p) if p == expected => {}
                other => self.sh.violation(format!(
                    "group {}: after a refused seek, position({}/{}) is {other:?}, expected {expected}",
                    spec.name, tp.0, tp.1
                )),
            }
        }
        let owned: BTreeSet<Tp> = lock(&self.state).stints.keys().cloned().collect();
        let all = self.sh.group_partitions(g);
        if let Some((tp, _)) = all.iter().find(|(tp, _)| !owned.contains(tp)) {
            let c = self.consumer.as_mut().expect("subscribed");
            match c.seek(&tp.0, tp.1, 0) {
                Err(Error::InvalidArgument(_)) => self.sh.bump(&self.sh.ops.rejected_seeks, 1),
                other => self.sh.violation(format!(
                    "group {}: seek on {}/{}, not assigned, gave {other:?}, not InvalidArgument",
                    spec.name, tp.0, tp.1
                )),
            }
        }
    }
}

/// How a producer thread's producer is set up.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Defaults (acks=1, sticky), one producer shared by two threads.
    Shared,
    /// `linger_ms` 2, small batches, lz4, round-robin.
    Lingering,
    /// `acks=all`, snappy.
    Durable,
}

fn producer_config(kind: Kind) -> ProducerConfig {
    match kind {
        Kind::Shared => ProducerConfig::default(),
        Kind::Lingering => ProducerConfig::default()
            .linger_ms(2)
            .batch_size(2048)
            .compression(Compression::Lz4)
            .partitioner(Partitioner::RoundRobin),
        Kind::Durable => ProducerConfig::default()
            .acks(Acks::All)
            .compression(Compression::Snappy),
    }
}

/// Records per second one producer thread sends at most.
fn rate_per_producer() -> f64 {
    if cfg!(debug_assertions) {
        2000.0
    } else {
        5000.0
    }
}

fn producer_thread(
    sh: Arc<Shared>,
    source: u16,
    kind: Kind,
    shared: Option<Arc<Producer>>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let own = shared.is_none();
    let new_producer = || match sh.mq.producer(producer_config(kind)) {
        Ok(p) => Arc::new(p),
        Err(e) => panic!("creating a producer: {e}"),
    };
    let mut producer = shared.unwrap_or_else(new_producer);
    let linger_ms = producer.config().linger_ms;
    let mut counter = 0u64;
    let mut topics: Vec<(String, u32)> = Vec::new();
    let start = Instant::now();
    let rate = rate_per_producer();
    let mut iteration = 0u64;
    let mut follow_up: Option<(String, u32)> = None;
    while !sh.stop_producers.load(Ordering::Acquire) {
        if iteration.is_multiple_of(32) {
            topics = sh
                .mq
                .topics()
                .into_iter()
                .filter_map(|t| {
                    let n = sh.mq.topic(&t).ok()?.partitions.len() as u32;
                    Some((t, n))
                })
                .collect();
        }
        iteration += 1;
        let (mut topic, count) = topics[rng.range(0, topics.len() as u64) as usize].clone();
        let mut mode = rng.range(0, 10);
        // Asynchronous bursts are longer: they fill batches that a later
        // blocking send to the same partition must not overtake.
        let n = rng.range(1, if mode >= 7 { 40 } else { 12 });
        // Half the time the whole burst goes to one partition (a hot one).
        let mut hot = (rng.range(0, 2) == 0).then(|| rng.range(0, count as u64) as u32);
        // Half the time, an asynchronous burst to a hot partition is
        // followed by blocking sends to it (which must land after it).
        if let Some((t, p)) = follow_up.take() {
            if rng.range(0, 2) == 0 {
                (topic, hot, mode) = (t, Some(p), rng.range(0, 7));
            }
        }
        if let (Some(p), 7..) = (hot, mode) {
            follow_up = Some((topic.clone(), p));
        }
        let mut records = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let mut r = Record::new(topic.as_str()).value(payload(source, counter));
            match (hot, rng.range(0, 10)) {
                (Some(p), _) => r = r.partition(p),
                (None, 0..=3) => r = r.partition(rng.range(0, count as u64) as u32),
                (None, 4..=6) => r = r.key(format!("k{}", rng.range(0, 37))),
                _ => {}
            }
            records.push((r, counter));
            counter += 1;
        }
        match mode {
            0..=3 => {
                for (r, ctr) in records {
                    match producer.send(r) {
                        Ok(md) => sh.ack(&md, source, ctr),
                        Err(e) => sh.violation(format!("producer {source}: send: {e}")),
                    }
                    sh.bump(&sh.ops.sends, 1);
                }
            }
            4..=6 => {
                let borrowed: Vec<_> = records.iter().map(|(r, _)| r.as_borrowed()).collect();
                match producer.send_batch(&borrowed) {
                    Ok(mds) => {
                        for (md, (_, ctr)) in mds.iter().zip(&records) {
                            sh.ack(md, source, *ctr);
                        }
                    }
                    Err(e) => sh.violation(format!("producer {source}: send_batch: {e}")),
                }
                sh.bump(&sh.ops.batch_sends, 1);
            }
            _ => {
                for (r, ctr) in records {
                    let sh2 = Arc::clone(&sh);
                    let res = producer.send_async(r, move |res| {
                        match res {
                            Ok(md) => sh2.ack(&md, source, ctr),
                            Err(e) => {
                                sh2.violation(format!("producer {source}: delivery of {ctr}: {e}"))
                            }
                        }
                        sh2.bump(&sh2.ops.async_done, 1);
                    });
                    match res {
                        Ok(()) => sh.bump(&sh.ops.async_sent, 1),
                        Err(e) => sh.violation(format!("producer {source}: send_async: {e}")),
                    }
                }
            }
        }
        if own && rng.range(0, 300) == 0 {
            if let Err(e) = producer.flush() {
                sh.violation(format!("producer {source}: flush: {e}"));
            }
            drop(producer);
            producer = new_producer();
            sh.bump(&sh.ops.producer_restarts, 1);
        }
        if linger_ms > 0 && rng.range(0, 2) == 0 {
            // Pause around the linger deadline, so that sends meet the
            // background thread appending lingering batches.
            std::thread::sleep(Duration::from_micros(rng.range(0, 2000 * linger_ms)));
        }
        // Bursts: send freely until 200 records ahead of the rate, then
        // sleep off the excess.
        let budget = start.elapsed().as_secs_f64() * rate;
        if counter as f64 > budget + 200.0 {
            std::thread::sleep(Duration::from_secs_f64((counter as f64 - budget) / rate));
        }
    }
    if let Err(e) = producer.flush() {
        sh.violation(format!("producer {source}: final flush: {e}"));
    }
}

/// Adds partitions, creates topics matching the pattern, wakes consumers.
fn chaos_thread(sh: Arc<Shared>, seed: u64, max_dyn_topics: u32) {
    let mut rng = Rng::new(seed);
    let mut dyn_topics = 0u32;
    while !sh.stop_producers.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(rng.range(5, 80)));
        match rng.range(0, 100) {
            0..=39 => {
                let topics = sh.mq.topics();
                let t = &topics[rng.range(0, topics.len() as u64) as usize];
                let max = if t.starts_with("dyn-") {
                    DYN_MAX_PARTITIONS
                } else {
                    STATIC_MAX_PARTITIONS
                };
                let Ok(info) = sh.mq.topic(t) else { continue };
                let n = info.partitions.len() as u32;
                if n < max {
                    let to = (n + rng.range(1, 3) as u32).min(max);
                    match sh.mq.add_partitions(t, to) {
                        Ok(()) => sh.bump(&sh.ops.partition_additions, 1),
                        Err(e) => sh.violation(format!("add_partitions({t}, {to}): {e}")),
                    }
                }
            }
            40..=54 if dyn_topics < max_dyn_topics => {
                let name = format!("dyn-{dyn_topics}");
                let config = TopicConfig::new(rng.range(1, 4) as u32).segment_bytes(SEGMENT_BYTES);
                match sh.mq.create_topic(&name, config) {
                    Ok(()) => sh.bump(&sh.ops.topics_created, 1),
                    Err(e) => sh.violation(format!("create_topic({name}): {e}")),
                }
                dyn_topics += 1;
            }
            _ => {
                let wakers = lock(&sh.wakers);
                wakers[rng.range(0, wakers.len() as u64) as usize].wakeup();
                drop(wakers);
                sh.bump(&sh.ops.wakeups, 1);
            }
        }
    }
}

/// Reads every partition from the start and checks it against what the
/// producers were told: every record acknowledged at its offset with its
/// payload, and one producer thread's counters increasing with offset.
/// Returns the number of records in the log.
fn audit(sh: &Shared) -> u64 {
    let acks = lock(&sh.acks).clone();
    let mut total = 0u64;
    for t in sh.mq.topics() {
        let info = sh.mq.topic(&t).expect("topic");
        for p in &info.partitions {
            let tp = (t.clone(), p.partition);
            let end = p.end_offset;
            let empty = Vec::new();
            let acked = acks.get(&tp).unwrap_or(&empty);
            if acked.len() as u64 > end {
                sh.violation(format!(
                    "{t}/{}: records acknowledged up to offset {}, but the log ends at {end}",
                    p.partition,
                    acked.len() - 1
                ));
            }
            let mut c = sh
                .mq
                .consumer(ConsumerConfig::default().max_poll_records(5000))
                .expect("consumer");
            c.assign(&[(t.as_str(), p.partition)]).expect("assign");
            let mut next = 0u64;
            let mut last: HashMap<u16, u64> = HashMap::new();
            let mut bad = 0u32;
            let mut complain = |what: String| {
                bad += 1;
                if bad <= 5 {
                    sh.violation(what);
                }
            };
            while next < end {
                let msgs = match c.poll(Duration::ZERO) {
                    Ok(m) => m,
                    Err(e) => {
                        complain(format!("{t}/{}: reading at {next}: {e}", p.partition));
                        break;
                    }
                };
                if msgs.is_empty() {
                    complain(format!(
                        "{t}/{}: reading stopped at {next}, end {end}",
                        p.partition
                    ));
                    break;
                }
                for m in &msgs {
                    let o = m.offset();
                    if o != next {
                        complain(format!(
                            "{t}/{}: offset {o} where {next} was due",
                            p.partition
                        ));
                    }
                    next = o + 1;
                    let Some((source, counter)) = m.value().and_then(parse_payload) else {
                        complain(format!("{t}/{}: offset {o}: garbled value", p.partition));
                        continue;
                    };
                    match acked.get(o as usize) {
                        Some(&a) if a == pack(source, counter) => {}
                        Some(&NONE) | None => complain(format!(
                            "{t}/{}: offset {o} (producer {source} record {counter}) was never acknowledged",
                            p.partition
                        )),
                        Some(&a) => complain(format!(
                            "{t}/{}: offset {o} holds producer {source} record {counter}; producer {} record {} was acknowledged there",
                            p.partition,
                            a >> 48,
                            a & ((1 << 48) - 1)
                        )),
                    }
                    if let Some(prev) = last.insert(source, counter) {
                        if counter <= prev {
                            complain(format!(
                                "{t}/{}: offset {o}: producer {source} record {counter} after its record {prev}",
                                p.partition
                            ));
                        }
                    }
                }
            }
            total += next;
        }
    }
    total
}

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
