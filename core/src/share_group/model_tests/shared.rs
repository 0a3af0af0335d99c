//! The model test in shared mode: the members of the group spread over two
//! or three processes, each with its own `Store::open_shared`, state
//! (`Parts`), process token (`ProcessSlot`: its `procs/<token>.live`) and
//! readers, all on one data directory (two stores in one test process
//! stand for two processes: the state file's lock belongs to each open
//! file). Every call of a process is the group's engine in shared mode
//! (`engine.rs`, through `process.rs`): it takes the lock, reads what the others appended (or the
//! whole file after another's rewrite), decides, appends (acquisitions
//! with the holder's token and deadline; releases and renewals too) and
//! lets go. The operations interleave the processes' polls (also a
//! member's read of the log with another process's poll, and compaction,
//! in between),
//! settling calls, leaves (stored releases), time passing, records
//! produced, dead-letter sends failing or the process dying between the
//! send and the storing, compactions by one process (the others read the
//! file whole at their next call), looks (as `backlog`), reads by a new
//! process, and processes dying (`kill -9`: their `.live` lock goes) and
//! starting again (a new token).
//!
//! Checked, besides what the exclusive test checks (see the parent
//! module), across the processes: no record is locked to two members at
//! once (any processes' states that live); a record held by a dead
//! process's member is delivered again, its delivery counted, without
//! waiting for its lock: a process that looked at the holders after the
//! death (at most once per `LIVENESS_CHECK`, as `release_dead_holders`)
//! or read the file whole must deliver it; the state of the process that
//! wrote last, and the state a new process reads back, is the model's:
//! its own members' locks as decided, others' with their holder's token
//! and deadline, dead holders' available once it knows; drained (the dead
//! processes started again first, after one round that must give their
//! records back with their locks not run out), every record is done, for
//! every process that starts again too.
//!
//! The clock. Locks are stored in ms of the system's monotonic clock,
//! converted from and back to `Instant`s against the real clocks when
//! written and read (`store.rs`: `mono_ms_of`, `instant_of`), so a
//! deadline another process reads back is the one written give or take
//! 2 ms (more if the thread is preempted between two clock reads). The
//! synthetic clock (`Instant`s `base + ms`, `base` the real now when the
//! case starts) runs ahead of the real one but is converted the same way
//! (only differences from the real now matter), so cross-process lock
//! expiry is tested on it, with care: time moves in steps of 100 ms and
//! every lock runs for 100·k + 50 ms, so a deadline is always 50 ms away
//! from any `now` a decision compares it with, and the rounding never
//! changes an expiry; the model accepts a read-back deadline within
//! 40 ms of its own, and its own process's deadline exactly. Wall-clock
//! delays are stored exactly. Some locks run for 100 s, so that only the
//! death of their holder's process gives their records back before the
//! drain.

use super::*;

fn lock_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => Just(150u64),
        2 => Just(350),
        4 => (0u64..10).prop_map(|k| k * 100 + 50),
        1 => Just(100_050),
    ]
}

fn setup() -> impl Strategy<Value = Setup> {
    (2usize..=3)
        .prop_flat_map(|procs| {
            (
                Just(procs),
                1u32..=2,
                prop::collection::vec((lock_ms(), 1usize..=4), procs..=4),
                prop_oneof![1 => Just(0u32), 4 => 1u32..=4],
                prop_oneof![1u64..=3, 4u64..=12],
                any::<bool>(),
            )
        })
        .prop_map(
            |(procs, partitions, members, max_deliveries, max_in_flight, drain_acks)| Setup {
                shared: true,
                procs,
                partitions,
                members,
                max_deliveries,
                max_in_flight,
                drain_acks,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    let m = 0usize..4;
    let p = 0usize..3;
    prop_oneof![
        6 => (m.clone(), any::<bool>()).prop_map(|(m, wait)| Op::Poll { m, wait }),
        2 => (m.clone(), m.clone(), prop::bool::weighted(0.2))
            .prop_map(|(a, b, compact)| Op::Interleaved { a, b, compact }),
        8 => (
            m.clone(),
            prop_oneof![3 => Just(None), 1 => m.clone().prop_map(Some)],
            act(),
            prop::collection::vec(0usize..HANDLES, 1..=3),
        )
            .prop_map(|(m, from, act, picks)| Op::Settle {
                m,
                from: from.unwrap_or(m),
                act,
                picks,
            }),
        4 => prop_oneof![0u64..=2, 3u64..=15].prop_map(|k| Op::Tick(k * 100)),
        2 => (0u32..2, 1u64..=4, prop::bool::weighted(0.3))
            .prop_map(|(p, n, gap)| Op::Produce { p, n, gap }),
        1 => p.clone().prop_map(Op::Kill),
        1 => p.clone().prop_map(Op::Restart),
        1 => p.clone().prop_map(Op::Look),
        1 => Just(Op::Reopen),
        1 => Just(Op::CrashInDeadLetter),
        1 => prop::bool::weighted(0.4).prop_map(Op::DeadLetterFails),
        1 => m.prop_map(Op::Leave),
        2 => p.prop_map(Op::Compact),
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
    // 512 cases take about 5 s in a debug build; PROPTEST_CASES asks for
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
    fn shared_share_groups_follow_the_model((setup, ops) in case()) {
        if let Err(e) = run(&setup, &ops) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// A member keeps what it holds when another process rewrites the state
/// file: reading the rewritten file whole, a process knows its own
/// members' acquisitions (written with its token) by their counts, and an
/// acknowledgement of a record still locked succeeds (were it taken for
/// another process's holding, the acknowledgement would fail and the
/// record be delivered again once its lock ran out).
#[test]
fn own_holdings_survive_a_rewrite_by_another_process() {
    use super::process::{Clock, DlqSink, Proc};
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_deliveries: 5,
        max_in_flight: 100,
    };
    let clk = Clock {
        now: Instant::now(),
        wall: WALL0,
    };
    let mut a = Proc::open(dir.path(), limits, true, clk);
    let mut b = Proc::open(dir.path(), limits, true, clk);
    let mut sink = DlqSink::default();
    let src = Arc::new(Source::buffer(&Arc::from(TOPIC), 0, Vec::new()));
    // Member 1 of process A takes offset 0, locked for 30 s.
    let read = vec![(key(0), None, vec![message(&src, 0)])];
    let (got, _) = a.take_read(clk, &mut sink, 1, read, 10, 30_000);
    assert_eq!(got.len(), 1);
    // Process B rewrites the state file (`maybe_compact`).
    b.compact(clk);
    // Member 1 of A acknowledges it.
    let settled = a.settle(clk, &mut sink, 1, &[(0, 0, 1)], &Action::Ack);
    assert_eq!(
        settled,
        Settled::Done,
        "A's state of 0/0: {:?} (A's token {:x})",
        a.engine.parts[&key(0)].entries[&0].state,
        a.owner.unwrap()
    );
}
