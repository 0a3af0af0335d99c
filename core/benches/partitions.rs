//! What idle partitions cost: for P partitions, the time to create them,
//! to open them (cleanly closed, and after a `kill -9`-style exit), the RSS
//! and descriptors an open holds, and the time, syncs and RSS of sending
//! one message to each partition after the open.
//!
//! `cargo bench -p mqlite --bench partitions`. Each measurement runs in a
//! child process of its own (this binary, run again), so that RSS and
//! descriptor counts start from an empty process; the empty broker's RSS is
//! measured in the same child and subtracted. Each figure is the median of
//! `MQLITE_BENCH_RUNS` runs (default 3), interleaved over the partition
//! counts; `MQLITE_BENCH_SCALE` (default 1.0) scales the largest partition
//! count (10,000 at 1.0: the rows are 1, 10, 100, 1,000 and 10,000, those
//! above the scaled limit left out); `MQLITE_BENCH_FILTER=text` runs only
//! the rows whose name contains `text` (`a|b`: either). The children run
//! under a descriptor limit of 1,024 (the usual default `ulimit -n`;
//! `MQLITE_BENCH_NOFILE=n` sets another): a step that fails (as opening
//! more partitions than that did before descriptors were cached) shows as
//! `fail` (NaN).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mqlite::faults::{set_sync_hook, SyncKind};
use mqlite::{Broker, Config, ProducerConfig, Record, TopicConfig};

/// Partitions per topic: larger counts use several topics.
const PER_TOPIC: u32 = 1000;
const CHILD_ENV: &str = "MQLITE_PARTITIONS_BENCH_CHILD";

fn runs() -> usize {
    std::env::var("MQLITE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

fn scale() -> f64 {
    std::env::var("MQLITE_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0)
}

fn filter_matches(name: &str) -> bool {
    match std::env::var("MQLITE_BENCH_FILTER") {
        Ok(f) if !f.is_empty() => f.split('|').any(|p| name.contains(p)),
        _ => true,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// Resident set of this process, in bytes (`VmRSS`).
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// CPU time (user and system) this process used so far, in seconds: on a
/// shared machine, less noisy than wall time.
fn cpu() -> f64 {
    // SAFETY: `getrusage` fills the struct it is given.
    #[allow(unsafe_code)]
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &raw mut ru);
        ru
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn count_dir(path: &str) -> u64 {
    std::fs::read_dir(path).map_or(0, |d| d.count() as u64)
}

fn topics(p: u32) -> Vec<(String, u32)> {
    let mut v = Vec::new();
    let mut left = p;
    let mut i = 0;
    while left > 0 {
        let n = left.min(PER_TOPIC);
        v.push((format!("t{i}"), n));
        left -= n;
        i += 1;
    }
    v
}

/// Counts syncs (fsync, fdatasync, msync) of files under the bench's
/// directory from now on.
fn count_syncs(dir: &Path) -> Arc<AtomicU64> {
    let n = Arc::new(AtomicU64::new(0));
    let (c, dir) = (Arc::clone(&n), dir.to_owned());
    set_sync_hook(Some(Arc::new(move |path: &Path, kind, before| {
        if !before && path.starts_with(&dir) && !matches!(kind, SyncKind::Dir) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    })));
    n
}

/// The child: one step on `dir` with `p` partitions; prints `key=value`
/// pairs on stdout.
fn child(step: &str, p: u32, dir: &Path) {
    let nofile: u64 = std::env::var("MQLITE_BENCH_NOFILE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls with valid pointers to a local struct.
    #[allow(unsafe_code)]
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit);
        limit.rlim_cur = nofile.min(limit.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit);
    }
    let config = Config::default();
    let base_rss = {
        // The empty broker: the baseline every RSS figure is counted from.
        let empty = dir.with_extension("empty");
        let _ = std::fs::remove_dir_all(&empty);
        let b = Broker::open(&empty, config.clone()).unwrap();
        let r = rss();
        drop(b);
        let _ = std::fs::remove_dir_all(&empty);
        r
    };
    let mut out = vec![format!("base_rss={base_rss}")];
    if step == "create" {
        let t = Instant::now();
        let b = Broker::open(dir, config).unwrap();
        for (name, n) in topics(p) {
            b.create_topic(&name, TopicConfig::new(n)).unwrap();
        }
        b.close().unwrap();
        out.push(format!("create_s={}", t.elapsed().as_secs_f64()));
        println!("{}", out.join(" "));
        return;
    }
    let fds0 = count_dir("/proc/self/fd");
    let (t, c) = (Instant::now(), cpu());
    let b = Broker::open(dir, config).unwrap();
    out.push(format!("open_s={}", t.elapsed().as_secs_f64()));
    out.push(format!("open_cpu_s={}", cpu() - c));
    out.push(format!("open_rss={}", rss().saturating_sub(base_rss)));
    out.push(format!(
        "open_fds={}",
        count_dir("/proc/self/fd").saturating_sub(fds0)
    ));
    let syncs = count_syncs(dir);
    let producer = b.producer(ProducerConfig::default()).unwrap();
    let (t, c) = (Instant::now(), cpu());
    for (name, n) in topics(p) {
        for i in 0..n {
            producer
                .send(Record::new(name.as_str()).value(&b"x"[..]).partition(i))
                .unwrap();
        }
    }
    out.push(format!("send_s={}", t.elapsed().as_secs_f64()));
    out.push(format!("send_cpu_s={}", cpu() - c));
    out.push(format!("send_syncs={}", syncs.load(Ordering::Relaxed)));
    out.push(format!("send_rss={}", rss().saturating_sub(base_rss)));
    out.push(format!("threads={}", count_dir("/proc/self/task")));
    out.push(format!(
        "send_fds={}",
        count_dir("/proc/self/fd").saturating_sub(fds0)
    ));
    println!("{}", out.join(" "));
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if step == "crash" {
        // As `kill -9`: no close, the page cache keeps what was written.
        // SAFETY: ends the process at once; nothing runs after it.
        #[allow(unsafe_code)]
        unsafe {
            libc::_exit(0)
        };
    }
    drop(producer);
    b.close().unwrap();
    set_sync_hook(None);
}

fn run_child(step: &str, p: u32, dir: &Path) -> Vec<(String, f64)> {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .env(CHILD_ENV, format!("{step}:{p}:{}", dir.display()))
        .output()
        .unwrap();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "  child {step} with {p} partitions failed: {}",
            err.lines().skip(1).take(1).collect::<String>()
        );
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

fn get(m: &[(String, f64)], k: &str) -> f64 {
    m.iter().find(|(n, _)| n == k).map_or(f64::NAN, |(_, v)| *v)
}

fn fresh_dir(p: u32) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mqlite-bench-{}-p{p}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[derive(Default)]
struct Samples {
    values: Vec<(String, Vec<f64>)>,
}

impl Samples {
    fn add(&mut self, key: &str, v: f64) {
        match self.values.iter_mut().find(|(k, _)| k == key) {
            Some((_, vs)) => vs.push(v),
            None => self.values.push((key.to_owned(), vec![v])),
        }
    }

    fn median(&self, key: &str) -> f64 {
        self.values
            .iter()
            .find(|(k, _)| k == key)
            .map_or(f64::NAN, |(_, v)| median(v.clone()))
    }

    fn spread(&self, key: &str) -> (f64, f64) {
        self.values
            .iter()
            .find(|(k, _)| k == key)
            .map_or((f64::NAN, f64::NAN), |(_, v)| {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (lo, hi)
            })
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut it = spec.splitn(3, ':');
        let (step, p, dir) = (
            it.next().unwrap(),
            it.next().unwrap().parse().unwrap(),
            it.next().unwrap(),
        );
        child(step, p, Path::new(dir));
        return;
    }
    let limit = (10_000.0 * scale()).max(1.0) as u32;
    let counts: Vec<u32> = [1, 10, 100, 1000, 10_000]
        .into_iter()
        .filter(|&p| p <= limit && filter_matches(&format!("{p} partitions")))
        .collect();
    let mut samples: Vec<Samples> = counts.iter().map(|_| Samples::default()).collect();
    for run in 0..runs() {
        for (i, &p) in counts.iter().enumerate() {
            let dir = fresh_dir(p);
            let s = &mut samples[i];
            let c = run_child("create", p, &dir);
            s.add("create_s", get(&c, "create_s"));
            let o = run_child("clean", p, &dir);
            for k in [
                "open_s",
                "open_cpu_s",
                "send_cpu_s",
                "open_rss",
                "open_fds",
                "send_s",
                "send_syncs",
                "send_rss",
                "threads",
                "send_fds",
            ] {
                s.add(k, get(&o, k));
            }
            let _ = run_child("crash", p, &dir);
            let r = run_child("clean", p, &dir);
            for k in ["open_s", "open_rss", "send_s", "send_syncs"] {
                s.add(&format!("crash_{k}"), get(&r, k));
            }
            let _ = std::fs::remove_dir_all(&dir);
            eprintln!("  run {} of {}: {p} partitions done", run + 1, runs());
        }
    }
    println!(
        "{:>6} | {:>9} | {:>8} | {:>8} | {:>9} | {:>5} | {:>8} | {:>8} | {:>5} | {:>10} | {:>7} | {:>10} | {:>10} | {:>5}",
        "P",
        "create ms",
        "open ms",
        "open cpu",
        "open RSS",
        "fds",
        "send ms",
        "send cpu",
        "syncs",
        "send RSS",
        "threads",
        "crash open",
        "crash send",
        "syncs"
    );
    let kib = |b: f64| format!("{:.0} KiB", b / 1024.0);
    for (i, &p) in counts.iter().enumerate() {
        let s = &samples[i];
        let ms = |k: &str| format!("{:.1}", s.median(k) * 1e3);
        println!(
            "{p:>6} | {:>9} | {:>8} | {:>8} | {:>9} | {:>5} | {:>8} | {:>8} | {:>5} | {:>10} | {:>7} | {:>10} | {:>10} | {:>5}",
            ms("create_s"),
            ms("open_s"),
            ms("open_cpu_s"),
            kib(s.median("open_rss")),
            s.median("open_fds"),
            ms("send_s"),
            ms("send_cpu_s"),
            s.median("send_syncs"),
            kib(s.median("send_rss")),
            s.median("threads"),
            ms("crash_open_s"),
            ms("crash_send_s"),
            s.median("crash_send_syncs"),
        );
    }
    println!();
    println!("spread (min-max over runs) of the timed columns, ms (cpu: user + system time of the process):");
    for (i, &p) in counts.iter().enumerate() {
        let s = &samples[i];
        let r = |k: &str| {
            let (lo, hi) = s.spread(k);
            format!("{:.1}-{:.1}", lo * 1e3, hi * 1e3)
        };
        println!(
            "{p:>6}: create {} open {} send {} crash open {} crash send {}",
            r("create_s"),
            r("open_s"),
            r("send_s"),
            r("crash_open_s"),
            r("crash_send_s")
        );
    }
    let per = |k: &str| {
        counts
            .iter()
            .zip(&samples)
            .filter(|(&p, _)| p >= 100)
            .map(|(&p, s)| format!("{p}: {:.1} KiB", s.median(k) / f64::from(p) / 1024.0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("RSS per partition after open: {}", per("open_rss"));
    println!("RSS per partition after one send each: {}", per("send_rss"));
}
