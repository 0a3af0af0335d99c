//! Shared mode across processes, against the same work in one process,
//! measured in one run: produce-to-consume latency (p50, p99) with the
//! consumer in another process and in the writer's own process, and the
//! consume rate of a reader process and of a consumer in the writer's
//! process. Every row opens the directory in shared mode, so the ratios
//! show what crossing a process costs, not what shared mode costs (the
//! `shared_log` bench has that).
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

use harness::{filter_matches, scaled, Harness};
use mqlite::{
    BorrowedRecord, Broker, Config, Consumer, ConsumerConfig, OffsetReset, ProducerConfig, Record,
    TopicConfig,
};

const ROLE: &str = "MQLITE_SHARED_BENCH_ROLE";
const DIR: &str = "MQLITE_SHARED_BENCH_DIR";
const N: &str = "MQLITE_SHARED_BENCH_N";
const OUT: &str = "MQLITE_SHARED_BENCH_OUT";
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

/// The role of the other process: `latency` (receive `n` records of `lat`
/// and write each one's latency in ns to the output file) or `consume`
/// (consume `n` records of `tp` and write the seconds taken). Two more,
/// for instruction counts of the consume rows run by hand under callgrind
/// (see docs/benchmarks.md): `write_and_hold` (write `n` records to `tp`,
/// create `<out>.ready`, stay open until `<out>.done` exists) and
/// `write_then_consume` (the in-process row: write, then consume in the
/// same process).
fn child(role: &str) {
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
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let value = vec![7u8; SIZE];
    let chunk: Vec<BorrowedRecord<'_>> = (0..1000)
        .map(|_| BorrowedRecord {
            topic: "tp",
            partition: Some(0),
            value: Some(&value),
            ..BorrowedRecord::default()
        })
        .collect();
    let mut written = 0;
    while written < n {
        let k = (n - written).min(1000) as usize;
        p.send_batch(&chunk[..k]).unwrap();
        written += k as u64;
    }
}

fn percentile_us(sorted: &[u64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i] as f64 / 1e3
}

fn one_run(h: &mut Harness) {
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
