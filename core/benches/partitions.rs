//! What idle partitions cost: for P partitions, the time to create them,
//! to open them (cleanly closed, and after a `kill -9`-style exit), the RSS
//! and descriptors an open holds, and the time, syncs and RSS of sending
//! one message to each partition after the open. Each partition count
//! runs in exclusive mode (rows `P=n`) and then in shared mode (rows
//! `shared mode, P=n`: every open of the directory is a shared one).
//!
//! `cargo bench -p mqlite --bench partitions`. Each measurement runs in a
//! child process of its own (this binary, run again), so that RSS and
//! descriptor counts start from an empty process; the empty broker's RSS is
//! measured in the same child and subtracted. The figures go through the
//! shared bench harness (`harness/mod.rs`): `MQLITE_BENCH_RUNS` runs
//! (default 3), interleaved over the partition counts, each figure's median
//! and min-max printed and, with `MQLITE_BENCH_JSON=path`, every run's
//! value written as JSON. `MQLITE_BENCH_SCALE` (default 1.0) scales the
//! largest partition count (10,000 at 1.0: the rows are 1, 10, 100, 1,000
//! and 10,000, those above the scaled limit, at least 100, left out);
//! `MQLITE_BENCH_FILTER=text` runs only the partition counts whose name
//! (`P=1000`) contains `text` (`a|b`: either). The children run under a
//! descriptor limit of 1,024 (the usual default `ulimit -n`;
//! `MQLITE_BENCH_NOFILE=n` sets another): a step that fails (as opening
//! more partitions than that did before descriptors were cached) shows as
//! `NaN` (`null` in the JSON).
#![allow(clippy::unwrap_used)]

mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use harness::{filter_matches, scaled, Harness};
use mqlite::faults::{set_sync_hook, SyncKind};
use mqlite::{Broker, Config, ProducerConfig, Record, TopicConfig};

/// Partitions per topic: larger counts use several topics.
const PER_TOPIC: u32 = 1000;
const CHILD_ENV: &str = "MQLITE_PARTITIONS_BENCH_CHILD";

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

/// The child: one step on `dir` with `p` partitions, in shared mode or
/// not; prints `key=value` pairs on stdout.
fn child(step: &str, p: u32, shared: bool, dir: &Path) {
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
    let config = Config::default().shared(shared);
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
    let syncs = count_syncs(dir);
    if step == "create" {
        let t = Instant::now();
        let b = Broker::open(dir, config).unwrap();
        for (name, n) in topics(p) {
            b.create_topic(&name, TopicConfig::new(n)).unwrap();
        }
        b.close().unwrap();
        out.push(format!("create_s={}", t.elapsed().as_secs_f64()));
        out.push(format!("create_syncs={}", syncs.load(Ordering::Relaxed)));
        set_sync_hook(None);
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
    out.push(format!("open_syncs={}", syncs.swap(0, Ordering::Relaxed)));
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

fn run_child(step: &str, p: u32, shared: bool, dir: &Path) -> Vec<(String, f64)> {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .env(CHILD_ENV, format!("{step}:{p}:{shared}:{}", dir.display()))
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

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut it = spec.splitn(4, ':');
        let (step, p, shared, dir) = (
            it.next().unwrap(),
            it.next().unwrap().parse().unwrap(),
            it.next().unwrap() == "true",
            it.next().unwrap(),
        );
        child(step, p, shared, Path::new(dir));
        return;
    }
    harness::run_bench(
        "partitions",
        &[
            "each step in a child process of its own under a descriptor limit of 1,024; \
           RSS counted from the empty broker's; syncs: fsync, fdatasync and msync of the \
           partitions' files (not directories)",
        ],
        one_run,
    );
}

/// One run of every selected partition count: create, clean open and one
/// send to each partition, `kill -9`-style exit, open after it and one
/// send to each partition again.
fn one_run(h: &mut Harness) {
    let limit = scaled(10_000).min(10_000) as u32;
    let counts = [1u32, 10, 100, 1000, 10_000];
    for (shared, p) in [false, true]
        .into_iter()
        .flat_map(|s| counts.map(|p| (s, p)))
    {
        let row = if shared {
            format!("shared mode, P={p}")
        } else {
            format!("P={p}")
        };
        if p > limit || !filter_matches(&row) {
            continue;
        }
        let dir = fresh_dir(p);
        let c = run_child("create", p, shared, &dir);
        h.figure(&format!("{row}: create"), "ms", get(&c, "create_s") * 1e3);
        h.figure(
            &format!("{row}: create, syncs"),
            "syncs",
            get(&c, "create_syncs"),
        );
        let o = run_child("clean", p, shared, &dir);
        let kib = |b: f64| b / 1024.0;
        h.figure(&format!("{row}: open"), "ms", get(&o, "open_s") * 1e3);
        h.figure(
            &format!("{row}: open, CPU (user + system)"),
            "ms",
            get(&o, "open_cpu_s") * 1e3,
        );
        h.figure(
            &format!("{row}: open, RSS"),
            "KiB",
            kib(get(&o, "open_rss")),
        );
        h.figure(
            &format!("{row}: open, descriptors"),
            "fds",
            get(&o, "open_fds"),
        );
        h.figure(
            &format!("{row}: one send to each partition"),
            "ms",
            get(&o, "send_s") * 1e3,
        );
        h.figure(
            &format!("{row}: one send to each partition, CPU"),
            "ms",
            get(&o, "send_cpu_s") * 1e3,
        );
        h.figure(
            &format!("{row}: one send to each partition, syncs"),
            "syncs",
            get(&o, "send_syncs"),
        );
        h.figure(
            &format!("{row}: after the sends, RSS"),
            "KiB",
            kib(get(&o, "send_rss")),
        );
        h.figure(
            &format!("{row}: after the sends, descriptors"),
            "fds",
            get(&o, "send_fds"),
        );
        h.figure(&format!("{row}: threads"), "threads", get(&o, "threads"));
        if p >= 100 {
            let per = f64::from(p) * 1024.0;
            h.figure(
                &format!("{row}: RSS per partition after open"),
                "KiB",
                get(&o, "open_rss") / per,
            );
            h.figure(
                &format!("{row}: RSS per partition after one send each"),
                "KiB",
                get(&o, "send_rss") / per,
            );
        }
        let _ = run_child("crash", p, shared, &dir);
        let r = run_child("clean", p, shared, &dir);
        h.figure(
            &format!("{row}: open after kill -9"),
            "ms",
            get(&r, "open_s") * 1e3,
        );
        h.figure(
            &format!("{row}: open after kill -9, CPU"),
            "ms",
            get(&r, "open_cpu_s") * 1e3,
        );
        h.figure(
            &format!("{row}: open after kill -9, syncs"),
            "syncs",
            get(&r, "open_syncs"),
        );
        h.figure(
            &format!("{row}: open after kill -9, RSS"),
            "KiB",
            kib(get(&r, "open_rss")),
        );
        h.figure(
            &format!("{row}: one send to each partition after kill -9"),
            "ms",
            get(&r, "send_s") * 1e3,
        );
        h.figure(
            &format!("{row}: one send to each partition after kill -9, syncs"),
            "syncs",
            get(&r, "send_syncs"),
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
