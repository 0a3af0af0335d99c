//! Shared mode's cost on the append path: a partition log that writes its
//! tail page after every publish (readers in other processes follow it)
//! beside the same log in exclusive mode, in one run, and the rate of a
//! reader log following the writer.
//!
//! `cargo bench -p mqlite --bench shared_log`; `MQLITE_BENCH_RUNS`,
//! `MQLITE_BENCH_SCALE`, `MQLITE_BENCH_FILTER` and `MQLITE_BENCH_JSON` as
//! for the `log` bench (see `harness`). Ratios are against the exclusive
//! row of the same run (rows interleave run by run), since the machines
//! are shared and noisy.
#![allow(clippy::unwrap_used)]

mod harness;

use std::time::Instant;

use harness::{filter_matches, scaled, Harness};
use mqlite::log::shared_raw::{Options, ReaderLog, WriterLog};

const SEGMENT: usize = 64 << 20;

fn main() {
    harness::run_bench("shared_log", &[], one_run);
}

/// Appends `n` one-record batches of `size` bytes; seconds taken.
fn append(n: u64, size: usize, shared: bool) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        shared,
        ..Options::new(SEGMENT)
    };
    let w = WriterLog::open(dir.path(), &opts).unwrap();
    let value = vec![7u8; size];
    let t = Instant::now();
    for _ in 0..n {
        w.append(&[&value], 1).unwrap();
    }
    t.elapsed().as_secs_f64()
}

/// A reader log catching up on `n` one-record batches (refresh, then
/// read), written beforehand; seconds taken by the reader.
fn follow(n: u64, size: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        shared: true,
        ..Options::new(SEGMENT)
    };
    let w = WriterLog::open(dir.path(), &opts).unwrap();
    let value = vec![7u8; size];
    for _ in 0..n {
        w.append(&[&value], 1).unwrap();
    }
    let t = Instant::now();
    let r = ReaderLog::open(dir.path(), &opts).unwrap();
    r.refresh();
    let got = r.read_from(0).unwrap().len() as u64;
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(got, n);
    secs
}

fn one_run(h: &mut Harness) {
    let size = 100;
    let n = scaled(1_000_000);
    let group = format!("{size} B");
    let baseline = format!("log append, exclusive mode ({size} B)");
    let rows: [(&str, &dyn Fn() -> f64); 3] = [
        ("log append, exclusive mode", &|| append(n, size, false)),
        ("log append, shared mode (tail page each publish)", &|| {
            append(n, size, true)
        }),
        ("reader log: refresh + read + CRC", &|| follow(n, size)),
    ];
    for (name, f) in rows {
        if filter_matches(name) {
            let secs = f();
            h.record(
                &format!("{name} ({size} B)"),
                &group,
                n,
                size,
                secs,
                Some(&baseline),
            );
        }
    }
}
