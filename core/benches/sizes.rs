//! Produce at scale: keys spread over many partitions, and record sizes
//! from 16 B to 1 MiB beside `write(2)` and `read(2)` of the same bytes.
//!
//! `cargo bench -p mqlite --bench sizes`. Runs, scale, filter and the JSON
//! record as in every bench on the shared harness (`harness/mod.rs`):
//! `MQLITE_BENCH_RUNS` (default 3) interleaved runs of every row,
//! `MQLITE_BENCH_SCALE` (default 1.0) scales the counts,
//! `MQLITE_BENCH_FILTER=text` runs only the rows whose name contains `text`
//! (`a|b`: either), `MQLITE_BENCH_JSON=path` writes every run's figures.
//!
//! - Key spread: records with distinct keys sent over P = 1, 10, 100 and
//!   1,000 partitions (default producer config, `acks=1`), by
//!   `send_batch` of 100 records, by `send` one at a time and by
//!   `send_async` with a 5 ms linger; "fresh" rows time from the topic's
//!   creation (every partition's first append included), "steady" rows
//!   first append one record to every partition. Each row's baseline is
//!   the P=100 row of the same kind, from the same run.
//! - Sizes: `Producer::send_borrowed` (the send of `send`, without copying
//!   the record first) of records of one size into a fresh topic, against
//!   `write(2)` of the same bytes in the same sizes into a fresh file; then
//!   `Consumer::poll_batch` of that log against `read(2)` of that file into
//!   a buffer. Each run does the four in turn (interleaved); the baseline
//!   of the send row is the `write(2)` row, that of the `poll_batch` row the
//!   `read(2)` row, each from the same run.
#![allow(clippy::unwrap_used)]

use std::fs::OpenOptions;
use std::hint::black_box;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod harness;
use harness::{filter_matches, scaled, Harness};

use mqlite::{BorrowedRecord, Broker, ConsumerConfig, ProducerConfig, TopicConfig};

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
    let mq = Broker::open(&dir, harness::exclusive()).expect("open");
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
            producer
                .send_borrowed(&r)
                .unwrap_or_else(|e| panic!("warm-up send to partition {p}: {e}"));
        }
    }
    let done = Arc::new(AtomicU64::new(0));
    let secs = time(|| match mode {
        Mode::Batch => {
            let mut batch: Vec<BorrowedRecord<'_>> = Vec::with_capacity(100);
            for chunk in (0..n as usize).collect::<Vec<_>>().chunks(100) {
                batch.clear();
                batch.extend(chunk.iter().map(|&i| rec(i)));
                let got = producer.send_batch(&batch).unwrap_or_else(|e| {
                    panic!("send_batch over {partitions} partitions: {e} ({e:?})")
                });
                black_box(got);
            }
        }
        Mode::One => {
            for i in 0..n as usize {
                let got = producer
                    .send_borrowed(&rec(i))
                    .unwrap_or_else(|e| panic!("send over {partitions} partitions: {e} ({e:?})"));
                black_box(got);
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

/// One run of every selected key-spread row; each row's baseline is the
/// P=100 row of its kind.
fn key_spread_rows(h: &mut Harness) {
    for mode in [Mode::Batch, Mode::One, Mode::Async] {
        for steady in [true, false] {
            let when = if steady { "steady" } else { "fresh" };
            let group = format!(
                "{} ({when}), 100 B records with distinct keys",
                mode.label()
            );
            let baseline = format!("{}, P=100, {when}", mode.label());
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
                let secs = key_spread(n, partitions, mode, steady);
                h.record(&name, &group, n, 100, secs, Some(&baseline));
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
    let mq = Broker::open(dir.join("mq"), harness::exclusive()).expect("open");
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

/// One run of every selected record-size row: `Producer::send` against
/// `write(2)`, and `Consumer::poll_batch` against `read(2)`, of one size.
fn size_rows(h: &mut Harness) {
    for size in [16usize, 100, 1 << 10, 16 << 10, 256 << 10, 1 << 20] {
        let prefix = format!("record size {size} B");
        if !filter_matches(&prefix) {
            continue;
        }
        // 256 MiB per row, at most 2 M records.
        let count = (scaled(256 << 20) as usize / size).clamp(1, scaled(2_000_000) as usize);
        let [write, send, read, poll] = sizes_run(size, count);
        let msgs = count as u64;
        let produce = "record sizes, Producer::send against write(2)";
        let consume = "record sizes, Consumer::poll_batch against read(2)";
        let write_row = format!("{prefix}, write(2)");
        let read_row = format!("{prefix}, read(2)");
        h.record(&write_row, produce, msgs, size, write, None);
        let send_row = format!("{prefix}, Producer::send");
        h.record(&send_row, produce, msgs, size, send, Some(&write_row));
        h.record(&read_row, consume, msgs, size, read, None);
        let poll_row = format!("{prefix}, Consumer::poll_batch");
        h.record(&poll_row, consume, msgs, size, poll, Some(&read_row));
    }
}

fn main() {
    harness::run_bench("sizes", &[], one_run);
}

/// One run of every selected row, key spread first.
fn one_run(h: &mut Harness) {
    key_spread_rows(h);
    size_rows(h);
}
