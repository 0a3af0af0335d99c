//! `kill -9` soak: runs the crash cycles of `tests/crash.rs` standalone.
//!
//! ```text
//! cargo run --release -p mqlite --example crash_soak -- [CYCLES] [--cycles N] [--dir D] [--seed S]
//! ```
//!
//! Cycles default to `MQLITE_CRASH_CYCLES`, else 1,000; the seed to
//! `MQLITE_CRASH_SEED`, else the clock. Each cycle starts this program as a
//! child (`--child DIR PLAN`) that appends with one of the three durability
//! levels through an anonymous or a named producer while a consumer group
//! commits, kills it with SIGKILL after a random 1-50 ms, reopens the
//! directory and checks every acknowledged record and commit (see
//! `tests/common/crash_cycle.rs`). Without `--dir` a temporary directory is
//! used and removed afterwards; with it, the soak continues on what an
//! earlier soak left there. Prints a summary; exits non-zero on any
//! violation.
#![allow(clippy::unwrap_used)]

#[path = "../tests/common/crash_cycle.rs"]
mod crash_cycle;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use crash_cycle::{Rng, Soak};

fn usage() -> ExitCode {
    eprintln!("usage: crash_soak [CYCLES] [--cycles N] [--dir DIR] [--seed SEED]");
    ExitCode::from(2)
}

fn env_number(name: &str) -> Result<Option<u64>, ExitCode> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => {
            if let Ok(n) = v.trim().parse() {
                Ok(Some(n))
            } else {
                eprintln!("{name} must be a number, got {v:?}");
                Err(ExitCode::from(2))
            }
        }
        _ => Ok(None),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let (Some(dir), Some(plan)) = (args.get(1), args.get(2)) else {
            return usage();
        };
        crash_cycle::child(Path::new(dir), plan);
        return ExitCode::SUCCESS;
    }
    let (mut cycles, mut seed) = match (
        env_number("MQLITE_CRASH_CYCLES"),
        env_number("MQLITE_CRASH_SEED"),
    ) {
        (Ok(c), Ok(s)) => (c.unwrap_or(1000), s),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let mut dir: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let number = |v: Option<&String>| v.and_then(|v| v.parse::<u64>().ok());
        match a.as_str() {
            "--cycles" => match number(it.next()) {
                Some(n) => cycles = n,
                None => return usage(),
            },
            "--seed" => match number(it.next()) {
                Some(s) => seed = Some(s),
                None => return usage(),
            },
            "--dir" => match it.next() {
                Some(v) => dir = Some(PathBuf::from(v)),
                None => return usage(),
            },
            other => match other.parse() {
                Ok(n) => cycles = n,
                Err(_) => return usage(),
            },
        }
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let tmp;
    let dir = if let Some(d) = dir {
        d
    } else {
        tmp = match tempfile::tempdir() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("creating a temporary directory: {e}");
                return ExitCode::FAILURE;
            }
        };
        tmp.path().to_owned()
    };
    println!(
        "crash soak: {cycles} cycles in {} with seed {seed} (MQLITE_CRASH_SEED={seed} replays \
         the kill timings and plans)",
        dir.display()
    );
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("finding this program: {e}");
            return ExitCode::FAILURE;
        }
    };
    let spawn = |dir: &Path, plan: &str| {
        let mut c = Command::new(&exe);
        c.arg("--child").arg(dir).arg(plan);
        c
    };
    let started = Instant::now();
    let mut soak = Soak::new(&dir);
    let mut rng = Rng::new(seed);
    for i in 0..cycles {
        soak.cycle(&dir, &mut rng, &spawn);
        if (i + 1) % 100 == 0 && i + 1 < cycles {
            eprintln!(
                "{} ({:.0} s)",
                soak.summary(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    soak.finish(&dir);
    println!(
        "{} in {:.1} s",
        soak.summary(),
        started.elapsed().as_secs_f64()
    );
    if soak.violation_count() == 0 {
        ExitCode::SUCCESS
    } else {
        println!("seed {seed}; violations:");
        for v in &soak.violations {
            println!("  {v}");
        }
        ExitCode::FAILURE
    }
}
