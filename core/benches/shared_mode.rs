//! Shared mode across processes, against the same work in one process,
//! measured in one run: produce-to-consume latency (p50, p99) with the
//! consumer in another process and in the writer's own process, and the
//! consume rate of a reader process and of a consumer in the writer's
//! process. Every row opens the directory in shared mode, so the ratios
//! show what crossing a process costs, not what shared mode costs (the
//! `shared_log` bench has that).
//!
//! Readers: one consumer in shared mode against exclusive mode, in this
//! process, over records written beforehand: `poll_batch` of 500 with no
//! group; a group member committing (synced) after each poll of 500; a
//! group member committing after each message with `commit_acks=1`.
//!
//! Writers: one writer in shared mode against exclusive mode (send rate,
//! batches of 1 and of 100, in this process), then writer processes (this
//! binary run again) sending at once: 2 and 4 on one partition, 2 and 4 on
//! a partition each, against one writer process; and `acks=all` from 4
//! processes against one. A row whose processes fail (today a second
//! writer process gets `Locked`) prints `skipped: <error>` and is left out.
//!
//! `cargo bench -p mqlite --bench shared_mode`; `MQLITE_BENCH_RUNS`,
//! `MQLITE_BENCH_SCALE`, `MQLITE_BENCH_FILTER` and `MQLITE_BENCH_JSON` as
//! for the `log` bench (see `harness`). The other process is this bench
//! binary run again with `MQLITE_SHARED_BENCH_ROLE` set. Ratios are taken
//! run by run against the in-process row of the same run (rows interleave),
//! since the machines are shared and noisy.
#![allow(clippy::unwrap_used)]

mod harness;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use harness::{filter_matches, nearest_rank, scaled, write_records, Harness};
use mqlite::{
    Acks, BorrowedRecord, Broker, Config, Consumer, ConsumerConfig, OffsetReset, ProducerConfig,
    Record, TopicConfig,
};

const ROLE: &str = "MQLITE_SHARED_BENCH_ROLE";
const DIR: &str = "MQLITE_SHARED_BENCH_DIR";
const N: &str = "MQLITE_SHARED_BENCH_N";
const OUT: &str = "MQLITE_SHARED_BENCH_OUT";
const PARTITION: &str = "MQLITE_SHARED_BENCH_PARTITION";
const ACKS_ALL: &str = "MQLITE_SHARED_BENCH_ACKS_ALL";
const SIZE: usize = 100;

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        child(&role);
        return;
    }
    harness::run_bench(
        "shared_mode",
        &[
            "latency: one 100 B record every ~100 us (acks=1), time from before the send to the \
             consumer's receipt; consume: a reader catching up on records written beforehand, \
             timed from the consumer's creation to its last record",
            "writers: 100 B records, acks=1 unless named; writer processes: every process \
             sends its share of the records to its partition once all are ready, the rate is \
             all their records over the time from the start to the last one's end",
        ],
        one_run,
    );
}

fn config() -> Config {
    Config::default().shared(true).prefault(false)
}

/// Nanoseconds since the epoch: the clock every process shares.
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The role of the other process: `writer` (see [`writer_child`]), or `latency` (receive `n` records of `lat`
/// and write each one's latency in ns to the output file) or `consume`
/// (consume `n` records of `tp` and write the seconds taken). Two more,
/// for instruction counts of the consume rows run by hand under callgrind
/// (see docs/benchmarks.md): `write_and_hold` (write `n` records to `tp`,
/// create `<out>.ready`, stay open until `<out>.done` exists) and
/// `write_then_consume` (the in-process row: write, then consume in the
/// same process).
fn child(role: &str) {
    if role == "writer" {
        writer_child();
        return;
    }
    let dir = PathBuf::from(std::env::var_os(DIR).unwrap());
    let n: u64 = std::env::var(N).unwrap().parse().unwrap();
    let out = PathBuf::from(std::env::var_os(OUT).unwrap());
    let mq = Broker::open(&dir, config()).unwrap();
    let text = match role {
        "latency" => {
            let mut c = consumer(&mq, "lat");
            std::fs::write(out.with_extension("ready"), b"").unwrap();
            let lat = receive(&mut c, n);
            lat.iter().map(|v| v.to_string() + "\n").collect::<String>()
        }
        "consume" => format!("{}\n", consume(&mq, n)),
        "write_and_hold" => {
            write_tp(&mq, n);
            std::fs::write(out.with_extension("ready"), b"").unwrap();
            while !out.with_extension("done").exists() {
                std::thread::sleep(Duration::from_millis(10));
            }
            String::new()
        }
        "write_then_consume" => {
            write_tp(&mq, n);
            format!("{}\n", consume(&mq, n))
        }
        other => panic!("unknown role {other}"),
    };
    std::fs::write(&out, text).unwrap();
}

fn consumer(mq: &Broker, topic: &str) -> Consumer {
    let mut c = mq
        .consumer(
            ConsumerConfig::default()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(10_000),
        )
        .unwrap();
    c.assign(&[(topic, 0)]).unwrap();
    c
}

/// Receives `n` records whose values are their send times; their
/// latencies in ns.
fn receive(c: &mut Consumer, n: u64) -> Vec<u64> {
    let mut lat = Vec::with_capacity(n as usize);
    while (lat.len() as u64) < n {
        let batch = c.poll_batch(Duration::from_secs(5)).unwrap();
        let now = now_ns();
        for m in &batch {
            let sent = u64::from_le_bytes(m.value().unwrap()[..8].try_into().unwrap());
            lat.push(now.saturating_sub(sent));
        }
    }
    lat
}

/// Consumes `n` records of `tp` from its start; seconds from the
/// consumer's creation to the last record.
fn consume(mq: &Broker, n: u64) -> f64 {
    let t = Instant::now();
    let mut c = consumer(mq, "tp");
    let mut got = 0u64;
    let mut bytes = 0usize;
    while got < n {
        let batch = c.poll_batch(Duration::from_secs(5)).unwrap();
        for m in &batch {
            bytes += m.value().map_or(0, <[u8]>::len);
        }
        got += batch.len() as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(bytes as u64, n * SIZE as u64);
    secs
}

/// This bench binary as the other process in `role`.
fn spawn(role: &str, dir: &Path, n: u64, out: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env(ROLE, role)
        .env(DIR, dir)
        .env(N, n.to_string())
        .env(OUT, out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// Sends `n` records to `lat` one by one, about 100 us apart, each
/// carrying its send time.
fn send_paced(mq: &Broker, n: u64) {
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let mut value = vec![0u8; SIZE];
    for _ in 0..n {
        value[..8].copy_from_slice(&now_ns().to_le_bytes());
        p.send(Record::new("lat").partition(0).value(value.clone()))
            .unwrap();
        let until = Instant::now() + Duration::from_micros(100);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}

/// Latencies (ns) of `n` records with the consumer in this process
/// (`other_process` false) or in another.
fn latency(n: u64, other_process: bool) -> Vec<u64> {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), config()).unwrap();
    mq.create_topic("lat", TopicConfig::new(1)).unwrap();
    if other_process {
        let out = dir.path().join("latency.txt");
        let mut child = spawn("latency", dir.path(), n, &out);
        let ready = out.with_extension("ready");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() {
            assert!(
                Instant::now() < deadline,
                "the reader process did not start"
            );
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the reader process ended before it was ready: {status}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        send_paced(&mq, n);
        assert!(child.wait().unwrap().success());
        std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    } else {
        let mut c = consumer(&mq, "lat");
        std::thread::scope(|s| {
            let h = s.spawn(move || receive(&mut c, n));
            send_paced(&mq, n);
            h.join().unwrap()
        })
    }
}

/// Seconds a consumer takes to read `n` records written beforehand, in
/// this process or in another.
fn throughput(n: u64, other_process: bool) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), config()).unwrap();
    write_tp(&mq, n);
    if other_process {
        let out = dir.path().join("consume.txt");
        let mut child = spawn("consume", dir.path(), n, &out);
        assert!(child.wait().unwrap().success());
        std::fs::read_to_string(&out)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    } else {
        consume(&mq, n)
    }
}

/// Creates topic `tp` and writes `n` records of `SIZE` bytes to it, in
/// batches of 1,000.
fn write_tp(mq: &Broker, n: u64) {
    mq.create_topic("tp", TopicConfig::new(1)).unwrap();
    write_records(mq, "tp", n, &[7u8; SIZE]);
}

fn percentile_us(sorted: &[u64], q: f64) -> f64 {
    sorted[nearest_rank(sorted.len(), q)] as f64 / 1e3
}

fn one_run(h: &mut Harness) {
    reader_rows(h);
    writer_rows(h);
    if filter_matches("latency") {
        let n = scaled(20_000);
        let (mut p50, mut p99) = ([0.0; 2], [0.0; 2]);
        for (i, (other, label)) in [(false, "this process"), (true, "another process")]
            .into_iter()
            .enumerate()
        {
            let mut lat = latency(n, other);
            lat.sort_unstable();
            p50[i] = percentile_us(&lat, 0.5);
            p99[i] = percentile_us(&lat, 0.99);
            h.figure(
                &format!("produce-to-consume latency p50, consumer in {label}"),
                "us",
                p50[i],
            );
            h.figure(
                &format!("produce-to-consume latency p99, consumer in {label}"),
                "us",
                p99[i],
            );
        }
        h.figure(
            "latency p50 ratio: another process / this process (target <= 1.5)",
            "x",
            p50[1] / p50[0],
        );
        h.figure(
            "latency p99 ratio: another process / this process",
            "x",
            p99[1] / p99[0],
        );
    }
    if filter_matches("consume") {
        let n = scaled(2_000_000);
        let group = format!("{SIZE} B");
        let base = format!("consume, consumer in the writer's process ({SIZE} B)");
        for (other, name) in [
            (false, base.clone()),
            (
                true,
                format!("consume, reader process (target >= 0.8x) ({SIZE} B)"),
            ),
        ] {
            let secs = throughput(n, other);
            h.record(&name, &group, n, SIZE, secs, Some(&base));
        }
    }
}

// Writers.

/// Sends `n` records of `SIZE` bytes to `w`/`partition` through `p`, in
/// batches of `batch`.
fn send_with(p: &mqlite::Producer, n: u64, batch: u64, partition: u32) -> mqlite::Result<()> {
    let value = vec![7u8; SIZE];
    let chunk: Vec<BorrowedRecord<'_>> = (0..batch)
        .map(|_| BorrowedRecord {
            topic: "w",
            partition: Some(partition),
            value: Some(&value),
            ..BorrowedRecord::default()
        })
        .collect();
    let mut sent = 0;
    while sent < n {
        let k = (n - sent).min(batch);
        if k == 1 {
            p.send(Record::new("w").partition(partition).value(value.clone()))?;
        } else {
            p.send_batch(&chunk[..k as usize])?;
        }
        sent += k;
    }
    Ok(())
}

/// Seconds one writer in this process takes to send `n` records in batches
/// of `batch` to a new directory opened with `cfg`.
fn one_writer(cfg: Config, n: u64, batch: u64, acks: Acks) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), cfg).unwrap();
    mq.create_topic("w", TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default().acks(acks)).unwrap();
    let t = Instant::now();
    send_with(&p, n, batch, 0).unwrap();
    let secs = t.elapsed().as_secs_f64();
    drop(p);
    mq.close().unwrap();
    secs
}

/// A writer process: opens the directory, takes a producer (`acks=all`
/// when `ACKS_ALL` is 1), creates `<out>.ready`, waits for `go` beside
/// it, sends `n` records to `w`/`PARTITION` one by one and writes the time
/// it ended (ns since the epoch) to `out`. On an error it writes
/// `ERR <error>` to `out` and exits with status 2.
fn writer_child() {
    let dir = PathBuf::from(std::env::var_os(DIR).unwrap());
    let n: u64 = std::env::var(N).unwrap().parse().unwrap();
    let out = PathBuf::from(std::env::var_os(OUT).unwrap());
    let partition: u32 = std::env::var(PARTITION).unwrap().parse().unwrap();
    let acks_all = std::env::var(ACKS_ALL).is_ok_and(|v| v == "1");
    let go = out.parent().unwrap().join("go");
    let run = || -> mqlite::Result<u64> {
        let mq = Broker::open(&dir, config())?;
        let acks = if acks_all { Acks::All } else { Acks::One };
        let p = mq.producer(ProducerConfig::default().acks(acks))?;
        std::fs::write(out.with_extension("ready"), b"").unwrap();
        while !go.exists() {
            std::thread::sleep(Duration::from_micros(100));
        }
        send_with(&p, n, 1, partition)?;
        let end = now_ns();
        drop(p);
        mq.close()?;
        Ok(end)
    };
    match run() {
        Ok(end) => std::fs::write(&out, format!("{end}\n")).unwrap(),
        Err(e) => {
            std::fs::write(&out, format!("ERR {e}\n")).unwrap();
            std::process::exit(2);
        }
    }
}

/// Runs `procs` writer processes sending `n` records in all (`n / procs`
/// each) to topic `w` of `partitions` partitions (process `i` to
/// partition `i % partitions`), released at once; the seconds from the
/// release to the last one's end, or the first error.
fn writer_processes(procs: u64, partitions: u32, n: u64, acks_all: bool) -> Result<f64, String> {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    {
        let mq = Broker::open(&data, config()).unwrap();
        mq.create_topic("w", TopicConfig::new(partitions)).unwrap();
        mq.close().unwrap();
    }
    let each = n / procs;
    let outs: Vec<PathBuf> = (0..procs).map(|i| work.join(format!("w{i}.txt"))).collect();
    let mut children: Vec<Child> = outs
        .iter()
        .enumerate()
        .map(|(i, out)| {
            Command::new(std::env::current_exe().unwrap())
                .env(ROLE, "writer")
                .env(DIR, &data)
                .env(N, each.to_string())
                .env(OUT, out)
                .env(PARTITION, (i as u32 % partitions).to_string())
                .env(ACKS_ALL, if acks_all { "1" } else { "0" })
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let error = |children: &mut Vec<Child>, outs: &[PathBuf]| -> String {
        for c in children.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        outs.iter()
            .filter_map(|o| std::fs::read_to_string(o).ok())
            .find_map(|t| t.strip_prefix("ERR ").map(|e| e.trim().to_owned()))
            .unwrap_or_else(|| "a writer process failed".to_owned())
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !outs.iter().all(|o| o.with_extension("ready").exists()) {
        let failed = children
            .iter_mut()
            .any(|c| c.try_wait().unwrap().is_some_and(|s| !s.success()));
        if failed || Instant::now() > deadline {
            return Err(error(&mut children, &outs));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let start = now_ns();
    std::fs::write(work.join("go"), b"").unwrap();
    for c in &mut children {
        if !c.wait().unwrap().success() {
            return Err(error(&mut children, &outs));
        }
    }
    let mut last = start;
    for o in &outs {
        let text = std::fs::read_to_string(o).unwrap();
        last = last.max(text.trim().parse().map_err(|_| text.clone())?);
    }
    Ok((last - start) as f64 / 1e9)
}

/// Prints a row that could not run, and notes it once in the JSON.
fn skipped(h: &mut Harness, name: &str, error: &str) {
    eprintln!("  {name:<52} skipped: {error}");
    static NOTED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut noted = NOTED.lock().unwrap();
    if !noted.iter().any(|n| n == name) {
        noted.push(name.to_owned());
        h.note(&format!("{name}: skipped: {error}"));
    }
}

/// How a reader row reads: without a group, committing after each poll,
/// or after each message.
#[derive(Clone, Copy)]
enum Reads {
    Plain,
    CommitPerPoll,
    CommitPerMessage,
}

/// Seconds for one consumer opened with `cfg` to read `n` records written
/// beforehand (not timed), as `how` says.
fn one_reader(cfg: Config, n: u64, how: Reads) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), cfg).unwrap();
    mq.create_topic("r", TopicConfig::new(1)).unwrap();
    write_records(&mq, "r", n, &[7; SIZE]);
    let t = Instant::now();
    let (per_poll, acks) = match how {
        Reads::CommitPerMessage => (1, Acks::One),
        _ => (500, Acks::All),
    };
    let mut c = if matches!(how, Reads::Plain) {
        let config = ConsumerConfig::default()
            .auto_offset_reset(OffsetReset::Earliest)
            .max_poll_records(per_poll);
        let mut c = mq.consumer(config).unwrap();
        c.assign(&[("r", 0)]).unwrap();
        c
    } else {
        let config = ConsumerConfig::group("g")
            .enable_auto_commit(false)
            .commit_acks(acks)
            .auto_offset_reset(OffsetReset::Earliest)
            .max_poll_records(per_poll);
        let mut c = mq.consumer(config).unwrap();
        c.subscribe(&["r"]).unwrap();
        c
    };
    let mut got = 0u64;
    while got < n {
        let batch = c.poll_batch(Duration::from_secs(5)).unwrap();
        got += batch.len() as u64;
        if !matches!(how, Reads::Plain) && !batch.is_empty() {
            c.commit().unwrap();
        }
    }
    let secs = t.elapsed().as_secs_f64();
    drop(c);
    mq.close().unwrap();
    secs
}

fn reader_rows(h: &mut Harness) {
    let group = format!("readers ({SIZE} B)");
    for (label, how, n) in [
        ("poll_batch of 500", Reads::Plain, scaled(2_000_000)),
        (
            "group, commit after each poll of 500",
            Reads::CommitPerPoll,
            scaled(500_000),
        ),
        (
            "group, commit_acks=1 after each message",
            Reads::CommitPerMessage,
            scaled(100_000),
        ),
    ] {
        let base = format!("exclusive mode, consume, {label} ({SIZE} B)");
        let shared = format!("shared mode, consume, {label} ({SIZE} B)");
        both_modes(h, &group, [&base, &shared], n, |cfg| {
            one_reader(cfg, n, how)
        });
    }
}

/// Records the row `names[0]` timed by `time` in exclusive mode and the
/// row `names[1]` in shared mode, against it; which goes first alternates
/// from run to run.
fn both_modes(
    h: &mut Harness,
    group: &str,
    names: [&str; 2],
    n: u64,
    time: impl Fn(Config) -> f64,
) {
    let [base, shared] = names;
    let mut pair = [
        (base, harness::exclusive().prefault(false), None),
        (shared, config(), Some(base)),
    ];
    if RUN.load(std::sync::atomic::Ordering::Relaxed) % 2 == 1 {
        pair.reverse();
    }
    for (name, cfg, baseline) in pair {
        if filter_matches(name) {
            let secs = time(cfg);
            h.record(name, group, n, SIZE, secs, baseline);
        }
    }
}

/// Runs of [`writer_rows`] so far.
static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn writer_rows(h: &mut Harness) {
    let group = format!("writers ({SIZE} B)");
    for (batch, n) in [(1, scaled(200_000)), (100, scaled(2_000_000))] {
        let base = format!("exclusive mode, batches of {batch} ({SIZE} B)");
        let shared =
            format!("shared mode, one writer, batches of {batch} (target >= 0.9x) ({SIZE} B)");
        both_modes(h, &group, [&base, &shared], n, |cfg| {
            one_writer(cfg, n, batch, Acks::One)
        });
    }
    // Each send waits for its flush: what the modes' flushes cost.
    for (batch, n) in [(1, scaled(4_000)), (100, scaled(200_000))] {
        let base = format!("exclusive mode, acks=all, batches of {batch} ({SIZE} B)");
        let shared = format!(
            "shared mode, one writer, acks=all, batches of {batch} (target >= 0.9x) ({SIZE} B)"
        );
        both_modes(h, &group, [&base, &shared], n, |cfg| {
            one_writer(cfg, n, batch, Acks::All)
        });
    }
    let group = format!("writer processes ({SIZE} B, one record per send)");
    let n = scaled(400_000);
    let base = format!("1 writer process ({SIZE} B)");
    let rows: [(String, u64, u32, bool); 5] = [
        (base.clone(), 1, 1, false),
        (
            format!("2 writer processes, one partition (target >= 0.8x) ({SIZE} B)"),
            2,
            1,
            false,
        ),
        (
            format!("4 writer processes, one partition (target >= 0.8x) ({SIZE} B)"),
            4,
            1,
            false,
        ),
        (
            format!("2 writer processes, a partition each ({SIZE} B)"),
            2,
            2,
            false,
        ),
        (
            format!("4 writer processes, a partition each ({SIZE} B)"),
            4,
            4,
            false,
        ),
    ];
    let all_n = scaled(20_000);
    let all_base = format!("acks=all: 1 writer process ({SIZE} B)");
    let all_rows: [(String, u64, u32, bool); 2] = [
        (all_base.clone(), 1, 1, true),
        (
            format!("acks=all: 4 writer processes, one partition ({SIZE} B)"),
            4,
            1,
            true,
        ),
    ];
    for (rows, n, base) in [(&rows[..], n, &base), (&all_rows[..], all_n, &all_base)] {
        if !rows.iter().any(|r| filter_matches(&r.0)) {
            continue;
        }
        for (name, procs, partitions, acks_all) in rows {
            match writer_processes(*procs, *partitions, n, *acks_all) {
                Ok(secs) => {
                    let baseline = (name != base).then_some(base.as_str());
                    h.record(name, &group, n / procs * procs, SIZE, secs, baseline);
                }
                Err(e) => skipped(h, name, &e),
            }
        }
    }
    RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}
