//! Produce at scale: keys spread over many partitions, and record sizes
//! from 16 B to 1 MiB beside `write(2)` and `read(2)` of the same bytes.
//!
//! `cargo bench -p mqlite --bench sizes`. Conventions as in `log.rs`:
//! `MQLITE_BENCH_RUNS` (default 3) runs per row, `MQLITE_BENCH_SCALE`
//! (default 1.0) scales the counts, `MQLITE_BENCH_FILTER=text` runs only
//! the rows whose name contains `text` (`a|b`: either).
//!
//! - Key spread: records with distinct keys sent over P = 1, 10, 100 and
//!   1,000 partitions (default producer config, `acks=1`), by
//!   `send_batch` of 100 records, by `send` one at a time and by
//!   `send_async` with a 5 ms linger; "fresh" rows time from the topic's
//!   creation (every partition's first append included), "steady" rows
//!   first append one record to every partition. Ratios are to the P=100
//!   row of the same kind, from the same run.
//! - Sizes: `Producer::send_borrowed` (the send of `send`, without copying
//!   the record first) of records of one size into a fresh topic, against
//!   `write(2)` of the same bytes in the same sizes into a fresh file; then
//!   `Consumer::poll_batch` of that log against `read(2)` of that file into
//!   a buffer. Each run does the four in turn (interleaved); the ratio is
//!   taken per run and the table shows the median and the spread.
#![allow(clippy::unwrap_used)]

use std::fs::OpenOptions;
use std::hint::black_box;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqlite::{BorrowedRecord, Broker, Config, ConsumerConfig, ProducerConfig, TopicConfig};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn spread(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

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

fn scaled(n: u64) -> u64 {
    ((n as f64 * scale()) as u64).max(1)
}

/// Whether a row is selected by `MQLITE_BENCH_FILTER` (see `log.rs`).
fn filter_matches(name: &str) -> bool {
    std::env::var("MQLITE_BENCH_FILTER")
        .map_or(true, |f| f.split('|').any(|part| name.contains(part)))
}

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mqlite-sizes-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn time(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

// ------------------------------------------------------------- key spread

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `send_batch` of 100 records, each with its own key.
    Batch,
    /// `send` of one record with a key at a time.
    One,
    /// `send_async` with a key, `linger_ms(5)`, then a `flush`.
    Async,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Batch => "send_batch of 100 by key",
            Mode::One => "send with a key",
            Mode::Async => "send_async with a key, linger 5 ms",
        }
    }
}

/// `n` records of 100 B with distinct keys sent over `partitions`
/// partitions; with `steady`, every partition has had an append before
/// the clock starts.
fn key_spread(n: u64, partitions: u32, mode: Mode, steady: bool) -> f64 {
    let dir = fresh_dir("spread");
    let mq = Broker::open(&dir, Config::default()).expect("open");
    mq.create_topic("t", TopicConfig::new(partitions))
        .expect("create");
    let value = vec![7u8; 100];
    let keys: Vec<[u8; 8]> = (0..n).map(u64::to_le_bytes).collect();
    let rec = |i: usize| BorrowedRecord {
        topic: "t",
        partition: None,
        key: Some(&keys[i]),
        value: Some(&value),
        headers: &[],
        timestamp: None,
        sequence: None,
    };
    let config = match mode {
        Mode::Async => ProducerConfig::default().linger_ms(5),
        _ => ProducerConfig::default(),
    };
    let producer = mq.producer(config).expect("producer");
    if steady {
        for p in 0..partitions {
            let r = BorrowedRecord {
                partition: Some(p),
                ..rec(0)
            };
            producer.send_borrowed(&r).expect("warm-up send");
        }
    }
    let done = Arc::new(AtomicU64::new(0));
    let secs = time(|| match mode {
        Mode::Batch => {
            let mut batch: Vec<BorrowedRecord<'_>> = Vec::with_capacity(100);
            for chunk in (0..n as usize).collect::<Vec<_>>().chunks(100) {
                batch.clear();
                batch.extend(chunk.iter().map(|&i| rec(i)));
                black_box(producer.send_batch(&batch).expect("send_batch"));
            }
        }
        Mode::One => {
            for i in 0..n as usize {
                black_box(producer.send_borrowed(&rec(i)).expect("send"));
            }
        }
        Mode::Async => {
            for i in 0..n as usize {
                let done = Arc::clone(&done);
                producer
                    .send_async_borrowed(
                        &rec(i),
                        Box::new(move |r| {
                            r.expect("delivered");
                            done.fetch_add(1, Ordering::Relaxed);
                        }),
                    )
                    .expect("send_async");
            }
            producer.flush().expect("flush");
        }
    });
    if mode == Mode::Async {
        assert_eq!(done.load(Ordering::Relaxed), n);
    }
    drop(producer);
    drop(mq);
    let _ = std::fs::remove_dir_all(&dir);
    secs
}

fn key_spread_rows() {
    let runs = runs();
    for mode in [Mode::Batch, Mode::One, Mode::Async] {
        for steady in [true, false] {
            let when = if steady { "steady" } else { "fresh" };
            let mut got: Vec<(String, f64, f64, f64)> = Vec::new();
            for partitions in [1u32, 10, 100, 1000] {
                let name = format!("{}, P={partitions}, {when}", mode.label());
                if !filter_matches(&name) {
                    continue;
                }
                let n = scaled(match mode {
                    Mode::Batch => 1_000_000,
                    Mode::One | Mode::Async => 400_000,
                })
                .max(u64::from(partitions));
                let rates: Vec<f64> = (0..runs)
                    .map(|_| n as f64 / key_spread(n, partitions, mode, steady))
                    .collect();
                let (lo, hi) = spread(&rates);
                let rate = median(rates);
                eprintln!("  {name:<60} {:>8.3} M msg/s", rate / 1e6);
                got.push((name, rate, lo, hi));
            }
            if got.is_empty() {
                continue;
            }
            let base = got
                .iter()
                .find(|g| g.0.contains("P=100,"))
                .map_or(f64::NAN, |g| g.1);
            println!();
            println!(
                "| {} ({when}), 100 B records with distinct keys | M msg/s (median) | spread | ratio to P=100 |",
                mode.label()
            );
            println!("|---|---:|---:|---:|");
            for (name, rate, lo, hi) in &got {
                println!(
                    "| {name} | {:.3} | {:.3}-{:.3} | {:.2} |",
                    rate / 1e6,
                    lo / 1e6,
                    hi / 1e6,
                    rate / base
                );
            }
        }
    }
}

// ------------------------------------------------------------ record sizes

/// One run of the four measurements of one record size: seconds for
/// (`write(2)`, `Producer::send_borrowed`, `read(2)`, `Consumer::poll_batch`).
fn sizes_run(size: usize, count: usize) -> [f64; 4] {
    let dir = fresh_dir(&format!("size-{size}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let value: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();

    // write(2) of the same bytes, in the same sizes, into a fresh file.
    let path = dir.join("raw");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("file");
    let write = time(|| {
        for _ in 0..count {
            f.write_all(black_box(&value)).expect("write");
        }
    });
    drop(f);

    // The same records through the producer into a fresh topic.
    let mq = Broker::open(dir.join("mq"), Config::default()).expect("open");
    mq.create_topic(
        "t",
        TopicConfig::new(1)
            .segment_bytes(256 << 20)
            .max_message_bytes(2 << 20),
    )
    .expect("create");
    let producer = mq.producer(ProducerConfig::default()).expect("producer");
    let rec = BorrowedRecord {
        topic: "t",
        partition: None,
        key: None,
        value: Some(&value),
        headers: &[],
        timestamp: None,
        sequence: None,
    };
    let send = time(|| {
        for _ in 0..count {
            black_box(producer.send_borrowed(&rec).expect("send"));
        }
    });
    drop(producer);

    // read(2) of the file into a buffer, in the same sizes.
    let mut f = std::fs::File::open(&path).expect("open raw");
    let mut buf = vec![0u8; size];
    let read = time(|| {
        for _ in 0..count {
            f.read_exact(&mut buf).expect("read");
            black_box(&buf);
        }
    });
    drop(f);

    // poll_batch of the log.
    let mut consumer = mq
        .consumer(ConsumerConfig::default().max_poll_records(1000))
        .expect("consumer");
    consumer.assign(&[("t", 0)]).expect("assign");
    let mut got = 0usize;
    let mut bytes = 0usize;
    let poll = time(|| {
        while got < count {
            for m in &consumer
                .poll_batch(Duration::from_millis(100))
                .expect("poll_batch")
            {
                bytes += m.value().map_or(0, <[u8]>::len);
                got += 1;
            }
        }
    });
    assert_eq!(bytes, size * count);
    drop(consumer);
    drop(mq);
    let _ = std::fs::remove_dir_all(&dir);
    [write, send, read, poll]
}

fn size_rows() {
    let runs = runs();
    let mut produce: Vec<String> = Vec::new();
    let mut consume: Vec<String> = Vec::new();
    for size in [16usize, 100, 1 << 10, 16 << 10, 256 << 10, 1 << 20] {
        let name = format!("record size {size} B");
        if !filter_matches(&name) {
            continue;
        }
        // 256 MiB per row, at most 2 M records.
        let count = (scaled(256 << 20) as usize / size).clamp(1, scaled(2_000_000) as usize);
        let all: Vec<[f64; 4]> = (0..runs).map(|_| sizes_run(size, count)).collect();
        let bytes = (size * count) as f64;
        let col = |k: usize| -> Vec<f64> { all.iter().map(|r| bytes / r[k]).collect() };
        let ratio = |a: usize, b: usize| -> Vec<f64> { all.iter().map(|r| r[b] / r[a]).collect() };
        let fmt = |v: Vec<f64>| {
            let (lo, hi) = spread(&v);
            format!("{:.2} ({:.2}-{:.2})", median(v), lo, hi)
        };
        let gbs = |v: Vec<f64>| {
            let (lo, hi) = spread(&v);
            format!("{:.2} ({:.2}-{:.2})", median(v) / 1e9, lo / 1e9, hi / 1e9)
        };
        eprintln!(
            "  {name:<24} send {} GB/s, write(2) {} GB/s, ratio {}",
            gbs(col(1)),
            gbs(col(0)),
            fmt(ratio(1, 0))
        );
        produce.push(format!(
            "| {size} | {count} | {} | {} | {} |",
            gbs(col(1)),
            gbs(col(0)),
            fmt(ratio(1, 0))
        ));
        consume.push(format!(
            "| {size} | {count} | {} | {} | {} |",
            gbs(col(3)),
            gbs(col(2)),
            fmt(ratio(3, 2))
        ));
    }
    if produce.is_empty() {
        return;
    }
    println!();
    println!(
        "| record bytes | records | Producer::send GB/s | write(2) GB/s | ratio send / write(2) |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for l in &produce {
        println!("{l}");
    }
    println!();
    println!("| record bytes | records | Consumer::poll_batch GB/s | read(2) GB/s | ratio poll_batch / read(2) |");
    println!("|---:|---:|---:|---:|---:|");
    for l in &consume {
        println!("{l}");
    }
    println!();
    println!("(median of {runs} interleaved runs, min-max in brackets; GB/s of record values)");
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    key_spread_rows();
    size_rows();
}
