//! What every measurement shares: the payloads, fresh directories, errors,
//! and the loop that runs a row several times and keeps the median.

use std::fmt;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use mqlite::OpenMode;

use tempfile::TempDir;

use crate::report::{Report, Row};

/// Number of distinct payloads cycled through: enough that two equal
/// payloads are far apart in any file (no block compression can fold them).
const POOL: usize = 1024;

/// Messages one consume call asks for (mqlite's `max_poll_records` default,
/// Kafka's too), used by every system's consume loop.
pub const CONSUME_BATCH: usize = 500;

/// A failed measurement, in words.
#[derive(Debug)]
pub struct BenchError(pub String);

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Result of a measurement step.
pub type Res<T> = Result<T, BenchError>;

/// Adds what was being done to any displayable error.
pub trait Context<T> {
    /// Wraps the error as "`what`: error".
    fn ctx(self, what: &str) -> Res<T>;
}

impl<T, E: fmt::Display> Context<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Res<T> {
        self.map_err(|e| BenchError(format!("{what}: {e}")))
    }
}

/// Fails with `what` unless `ok`.
pub fn check(ok: bool, what: impl FnOnce() -> String) -> Res<()> {
    if ok {
        Ok(())
    } else {
        Err(BenchError(what()))
    }
}

/// The settings and payloads of one message size.
#[derive(Clone)]
pub struct Ctx {
    /// Payload bytes per message.
    pub size: usize,
    /// Messages per batch in the batched and durable rows.
    pub batch: usize,
    /// Sender threads of the group-commit row.
    pub threads: usize,
    /// Parent of the fresh directories.
    pub tmp: PathBuf,
    /// The mode mqlite's rows open their data directory in (exclusive
    /// unless a row is a shared-mode twin).
    pub mode: OpenMode,
    pool: Vec<Vec<u8>>,
}

impl Ctx {
    /// Settings for `size`-byte messages, with pseudo-random payloads.
    pub fn new(size: usize, batch: usize, threads: usize, tmp: PathBuf) -> Ctx {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ size as u64;
        let pool = (0..POOL)
            .map(|_| {
                (0..size)
                    .map(|_| {
                        // xorshift64*
                        x ^= x >> 12;
                        x ^= x << 25;
                        x ^= x >> 27;
                        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
                    })
                    .collect()
            })
            .collect();
        Ctx {
            size,
            batch,
            threads,
            tmp,
            mode: OpenMode::Exclusive,
            pool,
        }
    }

    /// The same settings and payloads, mqlite opened in `mode`.
    pub fn in_mode(&self, mode: OpenMode) -> Ctx {
        Ctx {
            mode,
            ..self.clone()
        }
    }

    /// The payload of message `i`.
    #[inline]
    pub fn payload(&self, i: u64) -> &[u8] {
        &self.pool[i as usize % POOL]
    }

    /// The digest of the payloads of messages `0..n` (see [`Tally`]).
    pub fn digest(&self, n: u64) -> u64 {
        let per: Vec<u64> = self.pool.iter().map(|p| digest(p)).collect();
        let (full, rest) = (n / POOL as u64, (n % POOL as u64) as usize);
        let all: u64 = per.iter().sum();
        let part: u64 = per[..rest].iter().sum();
        all.wrapping_mul(full).wrapping_add(part)
    }

    /// A fresh, empty directory, removed when dropped.
    pub fn dir(&self) -> Res<TempDir> {
        tempfile::Builder::new()
            .prefix("mqlite-rust-peers-")
            .tempdir_in(&self.tmp)
            .ctx("creating a temporary directory")
    }

    /// The batches of `self.batch` that cover messages `0..n`.
    pub fn batches(&self, n: u64) -> impl Iterator<Item = (u64, usize)> {
        chunks(n, self.batch)
    }
}

/// The runs of at most `k` messages that cover `0..n`: `(first, length)`.
pub fn chunks(n: u64, k: usize) -> impl Iterator<Item = (u64, usize)> {
    let k = k.max(1) as u64;
    (0..n.div_ceil(k)).map(move |j| (j * k, (n - j * k).min(k) as usize))
}

/// Seconds `f` takes.
pub fn time(f: impl FnOnce() -> Res<()>) -> Res<f64> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed().as_secs_f64())
}

/// What a consume loop read: every payload byte goes into a digest, checked
/// against the payloads written, so each system does the same per-byte work
/// and a wrong or missing message fails the row.
#[derive(Default)]
pub struct Tally {
    got: u64,
    bytes: u64,
    digest: u64,
}

impl Tally {
    /// Counts one message's payload.
    #[inline]
    pub fn add(&mut self, v: &[u8]) {
        self.got += 1;
        self.bytes += v.len() as u64;
        self.digest = self.digest.wrapping_add(digest(v));
    }

    /// Messages counted so far.
    pub fn count(&self) -> u64 {
        self.got
    }

    /// Fails unless exactly the payloads of messages `0..n` were counted.
    pub fn check(&self, ctx: &Ctx, n: u64) -> Res<()> {
        let want = ctx.digest(n);
        check(
            self.got == n && self.bytes == n * ctx.size as u64 && self.digest == want,
            || {
                format!(
                    "read back {} messages / {} bytes / digest {:#x}, expected {n} / {} / {want:#x}",
                    self.got,
                    self.bytes,
                    self.digest,
                    n * ctx.size as u64
                )
            },
        )
    }
}

/// Sum of the bytes of `v`.
#[inline]
fn digest(v: &[u8]) -> u64 {
    v.iter().map(|&b| u64::from(b)).sum()
}

/// Who a row measures; only peers are scaled down when slow.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// mqlite itself.
    Mqlite,
    /// A raw baseline (memcpy, memmap2).
    Baseline,
    /// A peer crate.
    Peer,
}

/// A measurement: `run(ctx, n)` does its setup in fresh directories and
/// returns the seconds of the timed part for `n` messages.
pub type RunFn = Rc<dyn Fn(&Ctx, u64) -> Res<f64>>;

/// One row to measure.
pub struct Bench {
    /// The `system` field.
    pub system: String,
    /// The `durability` field.
    pub durability: String,
    /// mqlite, baseline or peer.
    pub kind: Kind,
    /// The group's reference row.
    pub reference: bool,
    /// The measurement.
    pub run: RunFn,
    /// Whether the row is also measured with mqlite in shared mode (a
    /// twin row after it; see [`with_shared_twins`]).
    pub shared_twin: bool,
    /// Whether the row is the shared-mode twin of the row before it.
    pub is_twin: bool,
}

impl Bench {
    /// A row.
    pub fn new(
        system: &str,
        durability: impl Into<String>,
        kind: Kind,
        run: impl Fn(&Ctx, u64) -> Res<f64> + 'static,
    ) -> Bench {
        Bench {
            system: system.to_owned(),
            durability: durability.into(),
            kind,
            reference: false,
            run: Rc::new(run),
            shared_twin: false,
            is_twin: false,
        }
    }

    /// Marks the row as one measured in shared mode too.
    pub fn shared_twin(mut self) -> Bench {
        self.shared_twin = true;
        self
    }

    /// Marks the row as its group's reference.
    pub fn reference(mut self) -> Bench {
        self.reference = true;
        self
    }
}

/// `benches` with, after each row marked [`Bench::shared_twin`] (when
/// `twins`), the same row with mqlite opened in shared mode: system
/// "<system> (shared mode)". In one group the twins run interleaved with
/// the exclusive-mode rows, so their ratio is measured in one run; a twin
/// runs after its row on odd runs and before it on even ones (see
/// [`run_order`]).
pub fn with_shared_twins(benches: Vec<Bench>, twins: bool) -> Vec<Bench> {
    let mut out = Vec::with_capacity(benches.len() * 2);
    for b in benches {
        let twin = (twins && b.shared_twin).then(|| {
            let run = Rc::clone(&b.run);
            Bench {
                system: format!("{} (shared mode)", b.system),
                durability: format!("{}; data directory opened in shared mode", b.durability),
                kind: b.kind,
                reference: false,
                run: Rc::new(move |c: &Ctx, n| run(&c.in_mode(OpenMode::Shared), n)),
                shared_twin: false,
                is_twin: true,
            }
        });
        out.push(b);
        out.extend(twin);
    }
    out
}

/// Rows compared with each other.
pub struct Group {
    /// The `group` field.
    pub name: String,
    /// Messages per row (before any scaling of a slow peer).
    pub n: u64,
    /// Notes printed under the heading and attached to every row (for
    /// example why `n` differs from `--n`).
    pub note: Option<String>,
    /// Peers left out of this group, and why.
    pub left_out: Vec<String>,
    /// The rows, reference first.
    pub benches: Vec<Bench>,
}

/// How rows are run.
pub struct RunOpts {
    /// Runs per row.
    pub runs: usize,
    /// Case-insensitive text a row's "group: system" must contain.
    pub only: Option<String>,
    /// A peer whose run is predicted to take longer than this (seconds) at
    /// the group's `n` is measured at a smaller `n`.
    pub budget: f64,
    /// Each run (and pilot) in a fresh process ([`run_one`]) rather than in
    /// this one.
    pub isolate: bool,
}

/// The flag that makes this binary run one row once and print its seconds
/// (what [`run_one`] starts).
pub const CHILD_FLAG: &str = "--child-run";

/// One run of `bench` (of `group`) over `n` messages: in a fresh process of
/// this binary when `isolate`, else here. A fresh process per run keeps the
/// rows from weighing on each other: a peer's leftover threads, its heap
/// (sled leaves glibc's heap so fragmented that the allocations of rows run
/// after it in the same process cost measurably more) or its memory maps.
fn run_one(ctx: &Ctx, group: &Group, bench: &Bench, n: u64, isolate: bool) -> Res<f64> {
    if !isolate {
        return (bench.run)(ctx, n);
    }
    let exe = std::env::current_exe().map_err(|e| BenchError(format!("current_exe: {e}")))?;
    let out = std::process::Command::new(exe)
        .arg(CHILD_FLAG)
        .arg(format!("{}\t{}", group.name, bench.system))
        .args(["--n", &n.to_string()])
        .args(["--sizes", &ctx.size.to_string()])
        .args(["--batch", &ctx.batch.to_string()])
        .args(["--threads", &ctx.threads.to_string()])
        .arg("--tmp")
        .arg(&ctx.tmp)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| BenchError(format!("starting a child run: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.trim().strip_prefix("secs=").map(str::parse::<f64>) {
        Some(Ok(secs)) if out.status.success() => Ok(secs),
        _ => Err(BenchError(format!(
            "child run failed ({}): {}",
            out.status,
            text.trim()
        ))),
    }
}

/// Median of `v` (mean of the middle two for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// `n` for a peer row: a pilot run of a fiftieth predicts the full run's
/// time; above the budget, `n` shrinks to fit it (in whole batches).
fn scaled_n(ctx: &Ctx, group: &Group, bench: &Bench, opts: &RunOpts) -> Res<(u64, Option<String>)> {
    let (n, budget) = (group.n, opts.budget);
    let b = ctx.batch as u64;
    let pilot = (n / 50).max(10 * b) / b * b;
    if bench.kind != Kind::Peer || pilot * 2 > n {
        return Ok((n, None));
    }
    let secs = run_one(ctx, group, bench, pilot, opts.isolate)?;
    let predicted = secs * n as f64 / pilot as f64;
    if predicted <= budget {
        return Ok((n, None));
    }
    let scaled = ((n as f64 * budget / predicted) as u64 / b * b).max(pilot);
    Ok((
        scaled,
        Some(format!(
            "N scaled down from {n} to {scaled} (slow peer: {pilot} messages took {secs:.2} s, \
             {predicted:.0} s predicted for {n})"
        )),
    ))
}

/// A row's messages per run, its scaling note, and the seconds of its runs.
type Plan = (u64, Option<String>, Vec<f64>);

/// Asks the kernel to write back all dirty pages (sync(1)), so that the
/// writeback of earlier rows does not weigh on the next measurement.
fn settle() {
    let _ = std::process::Command::new("sync").status();
}

/// The order in which run `run` (from 1) measures `rows`: as listed on
/// odd runs; on even runs each shared-mode twin goes before its row, so
/// that neither mode always runs right after the other (a row that runs
/// second can find the page cache and the CPU's frequency as the first
/// left them). A twin whose row was left out (`--only`) stays where it
/// is.
pub fn run_order(rows: &[&Bench], run: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    if run.is_multiple_of(2) {
        for i in 1..rows.len() {
            if rows[i].is_twin && rows[i - 1].shared_twin {
                order.swap(i - 1, i);
            }
        }
    }
    order
}

/// Runs every selected row of `group` and adds them to `report`; returns
/// the rows that failed, in words.
///
/// The runs are interleaved (run 1 of every row, then run 2, ...) so that
/// the load of a shared machine, which changes over time, weighs on every
/// row alike; each run starts after a sync(1). Twins swap places with
/// their rows on even runs ([`run_order`]).
pub fn run_group(ctx: &Ctx, group: &Group, opts: &RunOpts, report: &mut Report) -> Vec<String> {
    let selected: Vec<&Bench> = group
        .benches
        .iter()
        .filter(|b| {
            opts.only.as_ref().is_none_or(|f| {
                let row = format!("{}: {}", group.name, b.system).to_lowercase();
                f.to_lowercase().split('|').any(|alt| row.contains(alt))
            })
        })
        .collect();
    if selected.is_empty() {
        return Vec::new();
    }
    crate::report::print_heading(group);
    report.notes.extend(
        group
            .left_out
            .iter()
            .map(|why| format!("{}: left out: {why}", group.name)),
    );
    let mut failures = Vec::new();
    // Per row: its n and scaling note, then the seconds of each run.
    let mut plans: Vec<Option<Plan>> = Vec::new();
    for bench in &selected {
        settle();
        match scaled_n(ctx, group, bench, opts) {
            Ok((n, note)) => plans.push(Some((n, note, Vec::new()))),
            Err(e) => {
                failures.push(fail(group, bench, &e));
                plans.push(None);
            }
        }
    }
    for run in 1..=opts.runs {
        if std::io::stderr().is_terminal() {
            eprint!("  run {run} of {}\r", opts.runs);
        }
        for i in run_order(&selected, run) {
            let (bench, plan) = (selected[i], &mut plans[i]);
            let Some((n, _, secs)) = plan else { continue };
            settle();
            match run_one(ctx, group, bench, *n, opts.isolate) {
                Ok(s) => secs.push(s),
                Err(e) => {
                    failures.push(fail(group, bench, &e));
                    *plan = None;
                }
            }
        }
    }
    let mut reference: Option<f64> = None;
    for (bench, plan) in selected.iter().zip(plans) {
        let Some((n, scaled, secs)) = plan else {
            continue;
        };
        let msgs_per_s = n as f64 / median(secs.clone());
        let runs: Vec<f64> = secs.iter().map(|s| n as f64 / s).collect();
        let lo = runs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = runs.iter().copied().fold(0.0, f64::max);
        let note = [group.note.clone(), scaled]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; ");
        let row = Row {
            group: group.name.clone(),
            system: bench.system.clone(),
            durability: bench.durability.clone(),
            n,
            size: ctx.size,
            msgs_per_s,
            runs_msgs_per_s: runs,
            msgs_per_s_min: lo,
            msgs_per_s_max: hi,
            mb_per_s: msgs_per_s * ctx.size as f64 / 1e6,
            reference: bench.reference,
            baseline: bench.kind == Kind::Baseline,
            note: (!note.is_empty()).then_some(note),
        };
        if bench.reference {
            reference = Some(msgs_per_s);
        }
        crate::report::print_row(&row, reference);
        report.rows.push(row);
    }
    failures
}

/// Prints and words a failed row.
fn fail(group: &Group, bench: &Bench, e: &BenchError) -> String {
    println!("  {:<44} FAILED: {e}", bench.system);
    format!("{}: {}: {e}", group.name, bench.system)
}
