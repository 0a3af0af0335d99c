//! `kill -9` during appends and commits: no acknowledged record is ever
//! lost or damaged, named producers never write a sequence twice, committed
//! offsets never run ahead of the data nor back (see
//! `common/crash_cycle.rs` for what each cycle does and checks).
//!
//! The child is this test binary itself, re-run with `--exact crash_child`
//! and `MQLITE_CRASH_CHILD_DIR` set. Cycles: 50 by default,
//! `MQLITE_CRASH_CYCLES=N` for soak runs; `MQLITE_CRASH_SEED` replays the
//! kill timings and plans of a printed seed. `cargo run --release -p mqlite
//! --example crash_soak` runs the same cycles standalone.
#![allow(clippy::unwrap_used)]

#[path = "common/crash_cycle.rs"]
mod crash_cycle;

use std::path::Path;
use std::process::Command;

use crash_cycle::{Rng, Soak};

const CHILD_DIR: &str = "MQLITE_CRASH_CHILD_DIR";
const CHILD_PLAN: &str = "MQLITE_CRASH_CHILD_PLAN";

/// The child side; a no-op in a normal test run.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let plan = std::env::var(CHILD_PLAN).expect("the child's plan");
    crash_cycle::child(Path::new(&dir), &plan);
}

#[test]
fn acknowledged_records_survive_kill_9() {
    let cycles: u64 = std::env::var("MQLITE_CRASH_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(50);
    let seed = std::env::var("MQLITE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!(
        "crash test seed: {seed} (MQLITE_CRASH_SEED={seed} replays the kill timings and plans)"
    );
    let exe = std::env::current_exe().expect("test binary path");
    let spawn = |dir: &Path, plan: &str| {
        let mut c = Command::new(&exe);
        c.args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir)
            .env(CHILD_PLAN, plan);
        c
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut soak = Soak::new(tmp.path());
    let mut rng = Rng::new(seed);
    let started = std::time::Instant::now();
    for _ in 0..cycles {
        soak.cycle(tmp.path(), &mut rng, &spawn);
    }
    soak.finish(tmp.path());
    println!(
        "{} in {:.1} s",
        soak.summary(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        soak.violations.is_empty(),
        "seed {seed}: {}\n{}",
        soak.summary(),
        soak.violations.join("\n")
    );
    assert!(
        soak.acked_checked > 0,
        "no child ever acknowledged a record"
    );
    if cycles >= 6 {
        assert!(
            soak.by_mode.iter().flatten().all(|&n| n > 0),
            "every durability level and producer kind ran"
        );
    }
}
