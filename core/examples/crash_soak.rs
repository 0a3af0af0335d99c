//! `kill -9` soak: runs the crash cycles of `tests/crash.rs` standalone.
//!
//! ```text
//! cargo run --release -p mqlite --example crash_soak -- --cycles 1000 [--dir D] [--seed S]
//! ```
//!
//! Each cycle starts this program as a child (`--child DIR CYCLE`) that
//! appends with `acks=1`, kills it with SIGKILL after a random 5-50 ms,
//! reopens the directory and checks every acknowledged record. Without
//! `--dir` a temporary directory is used and removed afterwards; with it,
//! the soak continues on what is there. Exits non-zero on any violation.

#[path = "../tests/common/crash_cycle.rs"]
mod crash_cycle;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crash_cycle::{Rng, Soak};

fn usage() -> ExitCode {
    eprintln!("usage: crash_soak [--cycles N] [--dir DIR] [--seed SEED]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let (Some(dir), Some(Ok(cycle))) = (args.get(1), args.get(2).map(|c| c.parse::<u64>()))
        else {
            return usage();
        };
        crash_cycle::child(Path::new(dir), cycle);
        return ExitCode::SUCCESS;
    }
    let mut cycles = 100u64;
    let mut dir: Option<PathBuf> = None;
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = it.next();
        match (a.as_str(), value) {
            ("--cycles", Some(v)) => match v.parse() {
                Ok(n) => cycles = n,
                Err(_) => return usage(),
            },
            ("--dir", Some(v)) => dir = Some(PathBuf::from(v)),
            ("--seed", Some(v)) => match v.parse() {
                Ok(s) => seed = s,
                Err(_) => return usage(),
            },
            _ => return usage(),
        }
    }
    let tmp;
    let dir = match dir {
        Some(d) => d,
        None => {
            tmp = match tempfile::tempdir() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("creating a temporary directory: {e}");
                    return ExitCode::FAILURE;
                }
            };
            tmp.path().to_owned()
        }
    };
    println!("crash soak in {} with seed {seed}", dir.display());
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("finding this program: {e}");
            return ExitCode::FAILURE;
        }
    };
    let spawn = |dir: &Path, cycle: u64| {
        let mut c = Command::new(&exe);
        c.arg("--child").arg(dir).arg(cycle.to_string());
        c
    };
    let mut soak = Soak::new(&dir);
    let mut rng = Rng::new(seed);
    for i in 0..cycles {
        soak.cycle(&dir, &mut rng, &spawn);
        if (i + 1) % 100 == 0 {
            eprintln!("{}", soak.summary());
        }
    }
    println!("{}", soak.summary());
    if soak.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
