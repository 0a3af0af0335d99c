//! What the engine's bench binaries share: runs interleaved across rows,
//! the spread of each row over its runs, and a machine-readable record of
//! every run.
//!
//! A bench binary makes one [`Harness`], then for each of
//! [`Harness::runs`] runs measures every row once and hands the seconds to
//! [`Harness::record`] (row A run 1, row B run 1, ..., then run 2): the
//! load of a shared machine, which drifts over minutes, then weighs on
//! every row alike. Figures that are not rates (latency percentiles, open
//! times) go to [`Harness::figure`], one value per run. At the end,
//! [`Harness::finish`] prints the tables (median and min-max of each row,
//! and of its ratio to its baseline measured in the same run) and, when
//! `MQLITE_BENCH_JSON=path` is set, writes every run's values with the
//! machine (CPU, cores, kernel), the date, the 1-minute load average
//! before and after, and the git commit, in the format bench/report.py
//! renders (its docstring describes it).
//!
//! Environment: `MQLITE_BENCH_RUNS` (runs per row, default 3),
//! `MQLITE_BENCH_SCALE` (scales message counts, default 1.0),
//! `MQLITE_BENCH_FILTER` (`a|b`: only rows whose name contains `a` or `b`),
//! `MQLITE_BENCH_JSON` (where the JSON goes; a relative path is taken from
//! the repository's root), `MQLITE_BENCH_MACHINE`
//! (`quiet` or `shared`: what the person running it knows of the machine;
//! recorded as given).

#![allow(dead_code)] // each bench binary uses its own part of this module

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

/// The config the benches open data directories with: exclusive mode by
/// name, whatever the default, so that every figure says which mode it
/// measured (the shared-mode rows ask for shared mode).
pub fn exclusive() -> mqlite::Config {
    mqlite::Config::default().mode(mqlite::OpenMode::Exclusive)
}

/// Runs per row (`MQLITE_BENCH_RUNS`, default 3, at least 1).
pub fn runs() -> usize {
    std::env::var("MQLITE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1)
}

/// `n` scaled by `MQLITE_BENCH_SCALE` (default 1.0), at least 100.
pub fn scaled(n: u64) -> u64 {
    let s: f64 = std::env::var("MQLITE_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    ((n as f64 * s) as u64).max(100)
}

/// Whether a row is selected by `MQLITE_BENCH_FILTER`: substrings separated
/// by `|`, any of which may match (unset: every row).
pub fn filter_matches(name: &str) -> bool {
    std::env::var("MQLITE_BENCH_FILTER")
        .map_or(true, |f| f.split('|').any(|part| name.contains(part)))
}

/// Index of the value at quantile `q` in a sorted list of `len` values
/// (nearest rank).
pub fn nearest_rank(len: usize, q: f64) -> usize {
    ((len as f64 - 1.0) * q).round() as usize
}

/// Writes `n` records of `value` to partition 0 of `topic`, in batches of
/// 1,000, and flushes them.
pub fn write_records(mq: &mqlite::Broker, topic: &str, n: u64, value: &[u8]) {
    let p = mq.producer(mqlite::ProducerConfig::default()).unwrap();
    let chunk: Vec<mqlite::BorrowedRecord<'_>> = (0..1000)
        .map(|_| mqlite::BorrowedRecord {
            topic,
            partition: Some(0),
            value: Some(value),
            ..mqlite::BorrowedRecord::default()
        })
        .collect();
    let mut written = 0;
    while written < n {
        let k = (n - written).min(1000) as usize;
        p.send_batch(&chunk[..k]).unwrap();
        written += k as u64;
    }
    p.close().unwrap();
}

/// The median (upper middle for an even count), minimum and maximum of `v`.
pub fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s: Vec<f64> = v.to_vec();
    s.sort_by(f64::total_cmp);
    (s[s.len() / 2], s[0], s[s.len() - 1])
}

/// One rate row: a name, its messages per run, and the seconds of each run.
struct Row {
    name: String,
    group: String,
    msgs: u64,
    payload: usize,
    secs: Vec<f64>,
    baseline: Option<String>,
}

/// One figure that is not a rate, one value per run.
struct Figure {
    name: String,
    unit: String,
    values: Vec<f64>,
}

/// Collects the runs of one bench binary (see the module documentation).
pub struct Harness {
    bench: String,
    runs: usize,
    date: String,
    load_start: Option<f64>,
    git: Value,
    rows: Vec<Row>,
    figures: Vec<Figure>,
    notes: Vec<String>,
}

/// The body of a bench binary's `main`: nothing with `--list` (what
/// `cargo test --benches` asks), else `one_run` once per interleaved run
/// (`MQLITE_BENCH_RUNS`), `notes` added, and the tables and JSON written.
pub fn run_bench(bench: &str, notes: &[&str], one_run: fn(&mut Harness)) {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut h = Harness::new(bench);
    let runs = h.runs();
    for run in 1..=runs {
        eprintln!("run {run} of {runs}");
        one_run(&mut h);
    }
    for n in notes {
        h.note(n);
    }
    h.finish();
}

impl Harness {
    /// A harness for the bench binary `bench` (its file name), started now
    /// (the date, load average and commit are taken here).
    pub fn new(bench: &str) -> Harness {
        Harness {
            bench: bench.to_owned(),
            runs: runs(),
            date: utc_now(),
            load_start: load_average(),
            git: git(),
            rows: Vec::new(),
            figures: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Runs per row.
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// Adds one run of the rate row `name` (of `group`): `msgs` messages of
    /// `payload` bytes in `secs`. `baseline` names the row this one's ratio
    /// is taken against, run by run (`None`: no ratio). Prints the run.
    pub fn record(
        &mut self,
        name: &str,
        group: &str,
        msgs: u64,
        payload: usize,
        secs: f64,
        baseline: Option<&str>,
    ) {
        eprintln!("  {name:<52} {:>8.2} M msg/s", msgs as f64 / secs / 1e6);
        if let Some(r) = self.rows.iter_mut().find(|r| r.name == name) {
            r.secs.push(secs);
            return;
        }
        self.rows.push(Row {
            name: name.to_owned(),
            group: group.to_owned(),
            msgs,
            payload,
            secs: vec![secs],
            baseline: baseline.map(str::to_owned),
        });
    }

    /// Adds one run's value of the figure `name`, in `unit`.
    pub fn figure(&mut self, name: &str, unit: &str, value: f64) {
        eprintln!("  {name:<52} {value:>8.2} {unit}");
        if let Some(f) = self.figures.iter_mut().find(|f| f.name == name) {
            f.values.push(value);
            return;
        }
        self.figures.push(Figure {
            name: name.to_owned(),
            unit: unit.to_owned(),
            values: vec![value],
        });
    }

    /// Adds a line about the whole run to the JSON's notes.
    pub fn note(&mut self, text: &str) {
        self.notes.push(text.to_owned());
    }

    /// The rates of row `name`, run by run (messages per second).
    fn rates(&self, name: &str) -> Option<Vec<f64>> {
        let r = self.rows.iter().find(|r| r.name == name)?;
        Some(r.secs.iter().map(|s| r.msgs as f64 / s).collect())
    }

    /// The rate of row `name` in the latest run (messages per second).
    pub fn last_rate(&self, name: &str) -> Option<f64> {
        self.rates(name)?.last().copied()
    }

    /// The ratios of row `r` to its baseline, run by run.
    fn ratios(&self, r: &Row) -> Option<Vec<f64>> {
        let base = self.rates(r.baseline.as_deref()?)?;
        let own = self.rates(&r.name)?;
        (base.len() == own.len()).then(|| own.iter().zip(&base).map(|(a, b)| a / b).collect())
    }

    /// The tables, as markdown.
    pub fn tables(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} interleaved run(s); each cell: median (min-max) over the runs",
            self.runs
        );
        let mut groups: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !groups.contains(&r.group.as_str()) {
                groups.push(&r.group);
            }
        }
        for g in groups {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "| {g} | messages/s | MB/s (payload) | ratio to the baseline row |"
            );
            let _ = writeln!(out, "|---|---:|---:|---:|");
            for r in self.rows.iter().filter(|r| r.group == g) {
                let rates = self.rates(&r.name).unwrap_or_default();
                let (m, lo, hi) = spread(&rates);
                let ratio = self.ratios(r).map_or_else(
                    || "-".to_owned(),
                    |v| {
                        let (m, lo, hi) = spread(&v);
                        format!("{m:.2} ({lo:.2}-{hi:.2})")
                    },
                );
                let _ = writeln!(
                    out,
                    "| {} | {} ({}-{}) | {:.0} | {ratio} |",
                    r.name,
                    fmt_rate(m),
                    fmt_rate(lo),
                    fmt_rate(hi),
                    m * r.payload as f64 / 1e6
                );
            }
        }
        if !self.figures.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(out, "| figure | median | min | max |");
            let _ = writeln!(out, "|---|---:|---:|---:|");
            for f in &self.figures {
                let (m, lo, hi) = spread(&f.values);
                let u = &f.unit;
                let _ = writeln!(
                    out,
                    "| {} | {m:.2} {u} | {lo:.2} {u} | {hi:.2} {u} |",
                    f.name
                );
            }
        }
        out
    }

    /// The whole record as JSON (see the module documentation).
    pub fn json(&self, load_end: Option<f64>) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let rates: Vec<f64> = r.secs.iter().map(|s| r.msgs as f64 / s).collect();
                let (median, min, max) = spread(&rates);
                let ratio = self.ratios(r).map(|v| {
                    let (median, min, max) = spread(&v);
                    json!({"median": median, "min": min, "max": max})
                });
                json!({
                    "name": r.name,
                    "group": r.group,
                    "msgs": r.msgs,
                    "size": r.payload,
                    "secs": r.secs,
                    "msgs_per_s": {"median": median, "min": min, "max": max},
                    "baseline": r.baseline,
                    "ratio_to_baseline": ratio,
                })
            })
            .collect();
        let figures: Vec<Value> = self
            .figures
            .iter()
            .map(|f| {
                let (median, min, max) = spread(&f.values);
                json!({"name": f.name, "unit": f.unit, "values": f.values,
                       "median": median, "min": min, "max": max})
            })
            .collect();
        json!({
            "suite": format!("engine-{}", self.bench),
            "kind": "engine",
            "command": format!("cargo bench -p mqlite --bench {}", self.bench),
            "env": env_settings(),
            "date": self.date,
            "machine": machine(),
            "machine_state": std::env::var("MQLITE_BENCH_MACHINE").ok(),
            "load_avg": {"start": self.load_start, "end": load_end},
            "git": self.git,
            "runs": self.runs,
            "interleaved": true,
            "rows": rows,
            "figures": figures,
            "notes": self.notes,
        })
    }

    /// Prints the tables and writes the JSON to `MQLITE_BENCH_JSON`, if set.
    pub fn finish(self) {
        println!("{}", self.tables());
        let load_end = load_average();
        if let Ok(path) = std::env::var("MQLITE_BENCH_JSON") {
            // `cargo bench` runs the binary in the crate's directory: a
            // relative path is taken from the repository's root instead.
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let path = root.join(path);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).expect("creating the JSON's directory");
            }
            let text = serde_json::to_string_pretty(&self.json(load_end)).expect("JSON");
            std::fs::write(&path, text + "\n").expect("writing MQLITE_BENCH_JSON");
            eprintln!("wrote {}", path.display());
        }
    }
}

/// A rate as `12.34 M` or `567.8 K`.
pub fn fmt_rate(rate: f64) -> String {
    if rate >= 1e6 {
        format!("{:.2} M", rate / 1e6)
    } else {
        format!("{:.1} K", rate / 1e3)
    }
}

/// The `MQLITE_BENCH_*` settings of this run (what reproduces it).
fn env_settings() -> Value {
    let mut m = serde_json::Map::new();
    for k in ["RUNS", "SCALE", "FILTER"] {
        if let Ok(v) = std::env::var(format!("MQLITE_BENCH_{k}")) {
            m.insert(format!("MQLITE_BENCH_{k}"), Value::String(v));
        }
    }
    Value::Object(m)
}

/// The 1-minute load average, from /proc/loadavg.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU model, logical CPUs, kernel release, rustc.
fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
    });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_owned());
    json!({
        "cpu": cpu.unwrap_or_else(|| std::env::consts::ARCH.to_owned()),
        "cores": std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        "kernel": kernel,
        "rustc": output("rustc", &["--version"]),
        "python": null,
    })
}

/// The commit measured, and whether the work tree differed from it.
fn git() -> Value {
    let dir = env!("CARGO_MANIFEST_DIR");
    let commit = output("git", &["-C", dir, "rev-parse", "HEAD"]);
    let dirty = output(
        "git",
        &["-C", dir, "status", "--porcelain", "--untracked-files=no"],
    )
    .map(|s| !s.is_empty());
    json!({"commit": commit, "dirty": dirty})
}

/// The trimmed standard output of a command that succeeded.
fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Now in UTC, ISO 8601, from date(1) (the bench crate has no date library).
fn utc_now() -> String {
    output("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_default()
}
