//! Send latency of writer processes sharing one partition (shared mode):
//! `cargo run --release -p mqlite --example shared_send_latency -- [PROCS]`
//! starts PROCS (default 2) processes that each send 200,000 records of
//! 100 B, one at a time, to partition 0 of one topic at once, and prints
//! each one's latency percentiles per send.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use mqlite::{Broker, Config, ProducerConfig, Record, TopicConfig};

const SENDS: usize = 200_000;

/// One writer process: waits for the start mark, sends, prints.
fn writer(dir: &Path) {
    let mq = Broker::open(dir, Config::default().shared(true)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let value = [7u8; 100];
    let go = dir.parent().unwrap().join("go");
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut ns = Vec::with_capacity(SENDS);
    for _ in 0..SENDS {
        let t = Instant::now();
        p.send(Record::new("t").partition(0).value(&value[..]))
            .unwrap();
        ns.push(t.elapsed().as_nanos() as u64);
    }
    ns.sort_unstable();
    let us = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    println!(
        "per send, us: p50 {:.1} p99 {:.1} p99.9 {:.1} p99.99 {:.1} max {:.1}",
        us(0.5),
        us(0.99),
        us(0.999),
        us(0.9999),
        us(1.0)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(dir) = args.get(2).filter(|_| args[1] == "--writer") {
        writer(Path::new(dir));
        return;
    }
    let procs: usize = args.get(1).map_or(2, |s| s.parse().unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    Broker::open(&data, Config::default().shared(true))
        .unwrap()
        .create_topic("t", TopicConfig::new(1))
        .unwrap();
    let writers: Vec<_> = (0..procs)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .arg("--writer")
                .arg(&data)
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(tmp.path().join("go"), b"").unwrap();
    for mut w in writers {
        assert!(w.wait().unwrap().success());
    }
}
