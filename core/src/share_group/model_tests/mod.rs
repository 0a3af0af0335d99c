//! A model-based property test of share groups.
//!
//! Sequences of polls (with `max_poll_records` and the `max_in_flight`
//! window), acknowledgements, releases (now and delayed), rejections,
//! renewals, time passing, records produced, members leaving, dead-letter
//! sends failing, compactions and crashes (the state read back from the
//! store, also between a dead letter's send and its archiving), over one or
//! two partitions and two or three members, are checked after every step
//! against a model of what each record may be, then drained.
//!
//! Checked: every delivery is of a record the model says is deliverable
//! (not acknowledged or dead-lettered, including after a restart; not
//! locked to anyone, its lock or its release's delay passed; within the
//! window from the first record not done), its delivery count one more
//! than before and never past `max_deliveries`; a settling call succeeds
//! exactly when the member holds every record named with a lock not run
//! out; what is sent to the dead letters is rejected or delivered as
//! often as allowed, never acknowledged, and sent once (again only after
//! a crash between the send and its storing); after every step each
//! record's state (holder, lock deadline, delay, count) is the model's,
//! `start` has passed only records done, and nothing in the state is not
//! a record; a restart reads back what was there (done records, counts,
//! delays, to be dead-lettered), acquired records available with their
//! delivery counted; a poll that waits and gets nothing leaves nothing
//! deliverable in the window; and drained, every record is done, and stays
//! so after a restart.
//!
//! The driver ([`Sys`], `driver.rs`) runs processes, each the group's
//! engine of `engine.rs` (`prepare`, `take_read`, `settle`, `leave`,
//! dead-lettering, `release_dead_holders`, compaction: what `ShareGroup`
//! runs on) over its own store (`process.rs`), and members, each the
//! member's poll of `mod.rs` (`place_reader`, `split_read`, the passes of
//! `poll`) over its own reader, copied step for step, with a synthetic
//! clock (`Instant`s are `base + ms`, the wall clock `WALL0 + ms`), a
//! synthetic log (offsets with gaps where a transaction marker would be)
//! and a dead-letter sink (which drops duplicates, as the named producer
//! does) in place of the broker; the model's checks are in `check.rs`.
//! The test here is the group in exclusive mode (one process,
//! [`Store::open`]); `shared.rs` has the one in shared mode (two or three
//! processes, `Store::open_shared`).

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::engine::{Action, Delivered, PartRead, Prepared};
use super::state::{Limits, State};
use super::store::{Parts, Store};
use crate::message::{Message, Rec, Sink, Source, Span};

const TOPIC: &str = "jobs";
const GROUP: &str = "workers";
/// The wall clock at synthetic time 0 (ms since the epoch).
const WALL0: i64 = 1_700_000_000_000;
/// The most deliveries a member keeps handles of (the oldest go).
const HANDLES: usize = 24;

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

mod check;
mod driver;
mod process;
mod shared;

use driver::Sys;

fn key(p: u32) -> (String, u32) {
    (TOPIC.to_owned(), p)
}

/// A record of `src` at `offset`, with no key or value.
fn message(src: &Arc<Source>, offset: u64) -> Message {
    let mut v: Vec<Message> = Vec::with_capacity(1);
    Sink::push(
        &mut v,
        src,
        Rec {
            offset,
            timestamp: 0,
            key: Span::NONE,
            value: Span::NONE,
            headers: Span::NONE,
            header_count: 0,
            source: 0,
        },
    );
    v.pop().unwrap()
}

/// What a record is, as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum M {
    /// Deliverable from `not_before_ms` (wall clock).
    Avail {
        not_before_ms: i64,
    },
    /// Delivered to `member`, its lock running out at `deadline_ms`
    /// (synthetic ms). A lock that ran out is deliverable again (or to be
    /// dead-lettered when delivered as often as allowed).
    Held {
        member: u64,
        deadline_ms: u64,
    },
    /// Rejected, not sent to the dead-letter topic yet.
    Rejected,
    /// Sent to the dead-letter topic.
    Archived,
    Acked,
}

#[derive(Debug, Clone, Copy)]
struct MRec {
    s: M,
    count: u32,
}

impl MRec {
    fn done(self) -> bool {
        matches!(self.s, M::Acked | M::Archived)
    }
}

/// A record's state where it matters across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Norm {
    Done,
    ToDeadLetter { count: u32 },
    Open { count: u32, not_before_ms: i64 },
}

fn norm(parts: &Parts, limits: Limits, p: u32, o: u64) -> Norm {
    let Some(part) = parts.get(&key(p)) else {
        return Norm::Open {
            count: 0,
            not_before_ms: 0,
        };
    };
    if o < part.start {
        return Norm::Done;
    }
    let Some(e) = part.entries.get(&o) else {
        return if o < part.next {
            Norm::Done
        } else {
            Norm::Open {
                count: 0,
                not_before_ms: 0,
            }
        };
    };
    let open = |not_before_ms| {
        if limits.exhausted(e.count) {
            Norm::ToDeadLetter { count: e.count }
        } else {
            Norm::Open {
                count: e.count,
                not_before_ms,
            }
        }
    };
    match e.state {
        State::Acked | State::Archived => Norm::Done,
        State::DeadLettering => Norm::ToDeadLetter { count: e.count },
        State::Available { not_before_ms } => open(not_before_ms),
        State::Acquired { .. } => open(0),
    }
}

/// A member: its id in the group, its settings, its reader (a standalone
/// consumer: position per partition, paused partitions) and what its
/// `ShareConsumer` knows (`positions`), and the deliveries it was given.
#[derive(Debug)]
struct Member {
    /// Its id in its process's group (from 1 in each process).
    id: u64,
    /// Its id in the model: unique over the processes and their starts.
    uid: u64,
    /// Its process (an index of `Sys::procs`).
    proc: usize,
    lock_ms: u64,
    max_poll: usize,
    reader_pos: HashMap<u32, u64>,
    reader_paused: HashSet<u32>,
    reader_turn: usize,
    positions: HashMap<(String, u32), u64>,
    paused: HashSet<(String, u32)>,
    held: Vec<(u32, u64, u32)>,
}

impl Member {
    fn new(id: u64, uid: u64, proc: usize, lock_ms: u64, max_poll: usize) -> Member {
        Member {
            id,
            uid,
            proc,
            lock_ms,
            max_poll,
            reader_pos: HashMap::new(),
            reader_paused: HashSet::new(),
            reader_turn: 0,
            positions: HashMap::new(),
            paused: HashSet::new(),
            held: Vec::new(),
        }
    }

    /// A new consumer in its place (after a restart, or after it left).
    fn restart(&mut self, (id, uid): (u64, u64)) {
        *self = Member::new(id, uid, self.proc, self.lock_ms, self.max_poll);
    }
}

/// How a settling call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    Done,
    /// `InvalidRecordState`: nothing changed.
    Refused,
    /// Applied, but the dead-letter send failed (the records stay to be
    /// dead-lettered).
    SendFailed,
}

/// The settings of a case.
#[derive(Debug, Clone)]
struct Setup {
    /// Shared mode (each process with `Store::open_shared`), or exclusive
    /// (one process, `Store::open`).
    shared: bool,
    /// Processes (1 in exclusive mode); member `i` is in process
    /// `i % procs`.
    procs: usize,
    partitions: u32,
    /// Per member: lock duration (ms) and `max_poll_records`.
    members: Vec<(u64, usize)>,
    max_deliveries: u32,
    max_in_flight: u64,
    /// Whether the drain acknowledges what it gets (otherwise it lets
    /// locks run out until `max_deliveries` dead-letters everything).
    drain_acks: bool,
}

#[derive(Debug, Clone, Copy)]
enum Act {
    Ack,
    Release(u64),
    Reject,
    Renew,
    /// `poll_one` giving back what it did not hand out.
    Return,
}

#[derive(Debug, Clone)]
enum Op {
    /// A poll: with `wait`, one that waits (passes until something is
    /// delivered or nothing changes; time does not pass); without, one of
    /// timeout 0 (two passes).
    Poll {
        m: usize,
        wait: bool,
    },
    /// Member `a` prepares and reads the log, then `b` polls (then, with
    /// `compact`, `b`'s process rewrites the state file, as an operation
    /// may end), then `a` takes what it read: two threads of one process,
    /// or two processes.
    Interleaved {
        a: usize,
        b: usize,
        compact: bool,
    },
    /// Member `m` settles deliveries made to member `from` (`picks` index
    /// its handles).
    Settle {
        m: usize,
        from: usize,
        act: Act,
        picks: Vec<usize>,
    },
    Tick(u64),
    /// `n` records appended to partition `p`, after a transaction marker
    /// (an offset with no record) if `gap`.
    Produce {
        p: u32,
        n: u64,
        gap: bool,
    },
    /// Every process dies and starts again; the state is read back from
    /// the store.
    Crash,
    /// Shared mode: process `p` dies (unless it is the last alive).
    Kill(usize),
    /// Shared mode: process `p` (dies if alive, and) starts again.
    Restart(usize),
    /// Shared mode: process `p` looks at the state (as `backlog` does).
    Look(usize),
    /// Shared mode: the state as a process that opens the group reads it.
    Reopen,
    /// The process that dead-letters next dies after the sends and
    /// before the records are stored as archived.
    CrashInDeadLetter,
    DeadLetterFails(bool),
    Leave(usize),
    /// Process `p` rewrites the state file (compaction).
    Compact(usize),
}

fn run(setup: &Setup, ops: &[Op]) -> Result<(), String> {
    let mut sys = Sys::new(setup);
    for (i, op) in ops.iter().enumerate() {
        sys.step(op)
            .map_err(|e| format!("step {i} ({op:?}): {e}"))?;
    }
    sys.drain(setup.drain_acks)
        .map_err(|e| format!("drain: {e}"))
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        1u32..=2,
        prop::collection::vec(
            (
                prop_oneof![Just(100u64), Just(300), 50u64..1000],
                1usize..=4,
            ),
            2..=3,
        ),
        prop_oneof![1 => Just(0u32), 4 => 1u32..=4],
        prop_oneof![1u64..=3, 4u64..=12],
        any::<bool>(),
    )
        .prop_map(
            |(partitions, members, max_deliveries, max_in_flight, drain_acks)| Setup {
                shared: false,
                procs: 1,
                partitions,
                members,
                max_deliveries,
                max_in_flight,
                drain_acks,
            },
        )
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        4 => Just(Act::Ack),
        2 => Just(Act::Release(0)),
        2 => (1u64..2000).prop_map(Act::Release),
        1 => Just(Act::Reject),
        2 => Just(Act::Renew),
        1 => Just(Act::Return),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let m = 0usize..3;
    prop_oneof![
        6 => (m.clone(), any::<bool>()).prop_map(|(m, wait)| Op::Poll { m, wait }),
        1 => (m.clone(), m.clone(), prop::bool::weighted(0.2))
            .prop_map(|(a, b, compact)| Op::Interleaved { a, b, compact }),
        8 => (
            m.clone(),
            prop_oneof![4 => Just(None), 1 => m.clone().prop_map(Some)],
            act(),
            prop::collection::vec(0usize..HANDLES, 1..=3),
        )
            .prop_map(|(m, from, act, picks)| Op::Settle {
                m,
                from: from.unwrap_or(m),
                act,
                picks,
            }),
        4 => prop_oneof![0u64..100, 100u64..1500].prop_map(Op::Tick),
        2 => (0u32..2, 1u64..=4, prop::bool::weighted(0.3))
            .prop_map(|(p, n, gap)| Op::Produce { p, n, gap }),
        1 => Just(Op::Crash),
        1 => Just(Op::CrashInDeadLetter),
        1 => prop::bool::weighted(0.4).prop_map(Op::DeadLetterFails),
        1 => m.prop_map(Op::Leave),
        1 => Just(Op::Compact(0)),
    ]
}

/// A case: its settings, then records produced to each partition, then the
/// operations.
fn case() -> impl Strategy<Value = (Setup, Vec<Op>)> {
    setup().prop_flat_map(|s| {
        let produce = (0..s.partitions, 0u64..=8, prop::bool::weighted(0.2))
            .prop_map(|(p, n, gap)| Op::Produce { p, n, gap });
        (
            Just(s),
            prop::collection::vec(produce, 1..=3),
            prop::collection::vec(op(), 1..=60),
        )
            .prop_map(|(s, mut first, ops)| {
                first.extend(ops);
                (s, first)
            })
    })
}

proptest! {
    // 512 cases take about 2 s in a debug build; PROPTEST_CASES asks for
    // more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(512),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn share_groups_follow_the_model((setup, ops) in case()) {
        if let Err(e) = run(&setup, &ops) {
            return Err(TestCaseError::fail(e));
        }
    }
}
