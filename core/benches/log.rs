//! Log, producer and consumer throughput beside raw baselines, in one run.
//!
//! `cargo bench -p mqlite --bench log` (or `make bench`). Each row runs
//! `MQLITE_BENCH_RUNS` times (default 3), interleaved with the other rows
//! (every row's first run, then every row's second, ...), and is reported
//! as the median and the min-max of its runs; `MQLITE_BENCH_SCALE`
//! (default 1.0) scales the message counts; `MQLITE_BENCH_FILTER=text`
//! runs only the rows whose name contains `text` (`a|b`: either);
//! `MQLITE_BENCH_JSON=path` writes every run's figures there (see
//! `harness`); `MQLITE_BENCH_SIZES=100` (a comma-separated list) runs only
//! those message sizes of the per-size rows (100 and 1024 B). Ratios are against the raw memmap2 write of the same bytes
//! into already-touched pages, measured in the same run, because the
//! machines are shared and noisy.
#![allow(clippy::unwrap_used)]

mod harness;

use std::fs::OpenOptions;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use harness::{filter_matches, scaled, Harness};
use memmap2::MmapMut;
use mqlite::log::batch::{self, RecordRef};
use mqlite::raw::{partition_log, RawLog};
use mqlite::{
    Acks, BorrowedRecord, Broker, Compression, ConsumerConfig, Processor, ProcessorConfig,
    ProducerConfig, TopicConfig,
};

const SEGMENT: u64 = 512 << 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mqlite-bench-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Opens a broker with one single-partition topic of big segments, its
/// segment prefaulted in this thread when `prefault` is set.
fn open(tag: &str, prefault: bool) -> (Broker, RawLog, PathBuf) {
    open_with(tag, prefault, false, SEGMENT)
}

fn open_with(
    tag: &str,
    prefault: bool,
    background: bool,
    segment: u64,
) -> (Broker, RawLog, PathBuf) {
    let dir = fresh_dir(tag);
    let mq = Broker::open(&dir, harness::exclusive().prefault(background)).expect("open");
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(segment))
        .expect("create");
    let log = partition_log(&mq, "t", 0).expect("log");
    if prefault {
        log.prefault();
    }
    (mq, log, dir)
}

fn close(mq: Broker, dir: &Path) {
    drop(mq);
    let _ = std::fs::remove_dir_all(dir);
}

fn time(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

fn record(value: &[u8]) -> RecordRef<'_> {
    RecordRef {
        key: None,
        value: Some(value),
        headers: &[],
        timestamp: 1_700_000_000_000,
    }
}

/// Encoded size of one single-record batch holding `size` bytes of value,
/// as the log writes it (compact, no producer fields).
fn encoded(size: usize) -> usize {
    let v = vec![0u8; size];
    batch::encoded_len(&[record(&v)], &batch::ProducerFields::default(), 0)
}

fn raw_mmap(n: u64, size: usize, touched: bool) -> f64 {
    let msg = vec![7u8; encoded(size)];
    let len = msg.len() * n as usize;
    let dir = fresh_dir("raw");
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("raw");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("file");
    f.set_len(len as u64).expect("set_len");
    let mut map = unsafe_map(&f);
    if touched {
        map.fill(1);
    }
    let secs = time(|| {
        let mut at = 0;
        for _ in 0..n {
            map[at..at + msg.len()].copy_from_slice(&msg);
            at += msg.len();
        }
        black_box(&map);
    });
    drop(map);
    let _ = std::fs::remove_dir_all(&dir);
    secs
}

#[allow(unsafe_code)]
fn unsafe_map(f: &std::fs::File) -> MmapMut {
    // SAFETY: the file is private to this benchmark and not truncated while mapped.
    unsafe { MmapMut::map_mut(f).expect("map") }
}

fn memcpy(n: u64, size: usize) -> f64 {
    let msg = vec![7u8; encoded(size)];
    let mut buf = vec![1u8; msg.len() * n as usize];
    time(|| {
        let mut at = 0;
        for _ in 0..n {
            buf[at..at + msg.len()].copy_from_slice(&msg);
            at += msg.len();
        }
        black_box(&buf);
    })
}

fn crc(n: u64, size: usize) -> f64 {
    let msg = vec![7u8; encoded(size)];
    time(|| {
        let mut x = 0u32;
        for _ in 0..n {
            x ^= crc32c::crc32c(black_box(&msg[16..]));
        }
        black_box(x);
    })
}

/// How the segments of an append benchmark are prepared.
#[derive(Clone, Copy)]
enum Pages {
    /// One big segment, faulted in before the clock starts.
    Prefaulted,
    /// One big segment, pages faulted by the writer as it goes.
    Cold,
    /// 64 MiB segments rolling, the next one faulted in by the background
    /// thread while the current one fills (the default configuration).
    Rolling,
}

fn append(n: u64, size: usize, per_batch: usize, pages: Pages) -> f64 {
    let (mq, log, dir) = match pages {
        Pages::Prefaulted => open("append", true),
        Pages::Cold => open("append", false),
        Pages::Rolling => open_with("append", false, true, 64 << 20),
    };
    let value = vec![7u8; size];
    let recs: Vec<RecordRef<'_>> = (0..per_batch).map(|_| record(&value)).collect();
    let batches = n / per_batch as u64;
    let secs = time(|| {
        for _ in 0..batches {
            log.append(&recs).expect("append");
        }
    });
    close(mq, &dir);
    secs
}

fn scan(n: u64, size: usize, per_batch: usize) -> f64 {
    let (mq, log, dir) = open("scan", true);
    let value = vec![7u8; size];
    let recs: Vec<RecordRef<'_>> = (0..per_batch).map(|_| record(&value)).collect();
    for _ in 0..n / per_batch as u64 {
        log.append(&recs).expect("append");
    }
    let mut sum = 0usize;
    let secs = time(|| {
        let got = log
            .scan(0, |_, _, v| sum += v.map_or(0, <[u8]>::len))
            .expect("scan");
        assert_eq!(got, n / per_batch as u64 * per_batch as u64);
    });
    black_box(sum);
    close(mq, &dir);
    secs
}

/// A plain buffered `read(2)` loop (64 KiB at a time) over the bytes of a
/// log of `n` one-record batches, written as the `log read+CRC` row writes
/// them and read from the page cache: the floor for reading them.
fn raw_read(n: u64, size: usize) -> f64 {
    use std::io::Read;
    let (mq, log, dir) = open("rawread", true);
    let value = vec![7u8; size];
    for _ in 0..n {
        log.append(&[record(&value)]).expect("append");
    }
    let used = mq.topic("t").expect("topic").partitions[0].size_bytes as usize;
    let path = dir.join("topics/t/0/00000000000000000000.log");
    let mut file = std::fs::File::open(path).expect("open");
    let mut buf = vec![0u8; 64 << 10];
    let mut sum = 0u64;
    let secs = time(|| {
        let mut left = used;
        while left > 0 {
            let k = file.read(&mut buf[..left.min(64 << 10)]).expect("read");
            if k == 0 {
                break;
            }
            sum += u64::from(buf[k - 1]);
            left -= k;
        }
        assert_eq!(left, 0);
    });
    black_box(sum);
    close(mq, &dir);
    secs
}

fn produce(n: u64, size: usize) -> f64 {
    let (mq, log, dir) = open("produce", true);
    drop(log);
    let producer = mq.producer(ProducerConfig::default()).expect("producer");
    let value = vec![7u8; size];
    let secs = time(|| {
        for _ in 0..n {
            producer
                .send_borrowed(&BorrowedRecord {
                    topic: "t",
                    partition: Some(0),
                    value: Some(&value),
                    ..BorrowedRecord::default()
                })
                .expect("send");
        }
    });
    drop(producer);
    close(mq, &dir);
    secs
}

/// How the producer bench sends.
#[derive(Clone, Copy)]
enum SendMode {
    /// `send`, one record at a time.
    One,
    /// `send_batch` of 100 records.
    Batch,
    /// `send_async` with a callback, then `flush`.
    Async,
    /// `send`, one record at a time, each with the next application
    /// sequence (0, 1, 2, ...).
    Sequenced,
}

/// `n` records through a `Producer` configured by `config`, from `threads`
/// threads (each its own partition).
fn produce_with(n: u64, size: usize, threads: u64, mode: SendMode, config: ProducerConfig) -> f64 {
    let dir = fresh_dir("producer");
    let mq = Broker::open(&dir, harness::exclusive().prefault(false)).expect("open");
    mq.create_topic("t", TopicConfig::new(threads as u32).segment_bytes(SEGMENT))
        .expect("create");
    for p in 0..threads as u32 {
        partition_log(&mq, "t", p).expect("log").prefault();
    }
    let producer = mq.producer(config).expect("producer");
    let value = vec![7u8; size];
    let secs = time(|| {
        std::thread::scope(|s| {
            for t in 0..threads {
                let (producer, value) = (&producer, &value);
                s.spawn(move || {
                    let rec = BorrowedRecord {
                        topic: "t",
                        partition: Some(t as u32),
                        value: Some(value),
                        ..BorrowedRecord::default()
                    };
                    let per = n / threads;
                    match mode {
                        SendMode::One => {
                            for _ in 0..per {
                                producer.send_borrowed(&rec).expect("send");
                            }
                        }
                        SendMode::Sequenced => {
                            for seq in 0..per {
                                let rec = BorrowedRecord {
                                    sequence: Some(seq as i64),
                                    ..rec
                                };
                                producer.send_borrowed(&rec).expect("send");
                            }
                        }
                        SendMode::Batch => {
                            let recs = vec![rec; 100];
                            for _ in 0..per / 100 {
                                producer
                                    .send_batch_with(&recs, &mut |_, _| {})
                                    .expect("send_batch");
                            }
                        }
                        SendMode::Async => {
                            for _ in 0..per {
                                producer
                                    .send_async_borrowed(
                                        &rec,
                                        Box::new(|r| {
                                            r.expect("delivered");
                                        }),
                                    )
                                    .expect("send_async");
                            }
                        }
                    }
                });
            }
        });
        producer.flush().expect("flush");
    });
    drop(producer);
    close(mq, &dir);
    secs
}

/// `n` one-record batches read by one consumer: `poll` (owned messages) or,
/// with `batch`, `poll_batch` (read by reference).
fn consume(n: u64, size: usize, batch: bool) -> f64 {
    let (mq, log, dir) = open("consume", true);
    let value = vec![7u8; size];
    for _ in 0..n {
        log.append(&[record(&value)]).expect("append");
    }
    let mut consumer = mq
        .consumer(ConsumerConfig::default().max_poll_records(1000))
        .expect("consumer");
    consumer.assign(&[("t", 0)]).expect("assign");
    let mut got = 0u64;
    let mut bytes = 0usize;
    let wait = Duration::from_millis(100);
    let secs = time(|| {
        while got < n {
            if batch {
                for m in &consumer.poll_batch(wait).expect("poll_batch") {
                    bytes += m.value().map_or(0, <[u8]>::len);
                    got += 1;
                }
            } else {
                for m in consumer.poll(wait).expect("poll") {
                    bytes += m.value().map_or(0, <[u8]>::len);
                    got += 1;
                }
            }
        }
    });
    black_box(bytes);
    drop(consumer);
    close(mq, &dir);
    secs
}

/// `n` one-record batches handled by a `Processor` (orderly, 4 workers)
/// with a trivial handler that stops it after the last one: the same data
/// as the `Consumer::poll` rows.
fn process(n: u64, size: usize) -> f64 {
    let (mq, log, dir) = open("process", true);
    let value = vec![7u8; size];
    for _ in 0..n {
        log.append(&[record(&value)]).expect("append");
    }
    let mut consumer = mq
        .consumer(ConsumerConfig::group("bench").enable_auto_commit(false))
        .expect("consumer");
    consumer.assign(&[("t", 0)]).expect("assign");
    let mut proc = Processor::new(consumer, ProcessorConfig::default()).expect("processor");
    let stop = proc.stopper();
    let got = AtomicU64::new(0);
    let secs = time(|| {
        let stats = proc
            .run(|m| {
                black_box(m.value());
                if got.fetch_add(1, Ordering::Relaxed) + 1 == n {
                    stop.stop();
                }
                true
            })
            .expect("run");
        assert_eq!(stats.processed, n);
    });
    drop(proc);
    close(mq, &dir);
    secs
}

/// `n` messages of two partitions read by a group of two consumers, each
/// on its own thread.
fn consume_group(n: u64, size: usize) -> f64 {
    let dir = fresh_dir("group");
    let mq = Broker::open(&dir, harness::exclusive().prefault(false)).expect("open");
    mq.create_topic("t", TopicConfig::new(2).segment_bytes(SEGMENT))
        .expect("create");
    let value = vec![7u8; size];
    for p in 0..2u32 {
        let log = partition_log(&mq, "t", p).expect("log");
        log.prefault();
        for _ in 0..n / 2 {
            log.append(&[record(&value)]).expect("append");
        }
    }
    let config = ConsumerConfig::group("bench")
        .enable_auto_commit(false)
        .max_poll_records(1000);
    let mut members: Vec<_> = (0..2)
        .map(|_| {
            let mut c = mq.consumer(config.clone()).expect("consumer");
            c.subscribe(&["t"]).expect("subscribe");
            c
        })
        .collect();
    // Settle the assignment: one partition each.
    for _ in 0..2 {
        for c in &mut members {
            c.poll(Duration::ZERO).expect("poll");
            c.seek_to_beginning("t", c.assignment()[0].1).expect("seek");
        }
    }
    let secs = time(|| {
        std::thread::scope(|s| {
            for c in &mut members {
                s.spawn(move || {
                    let mut got = 0u64;
                    let mut bytes = 0usize;
                    while got < n / 2 {
                        for m in c.poll(Duration::from_millis(100)).expect("poll") {
                            bytes += m.value().map_or(0, <[u8]>::len);
                            got += 1;
                        }
                    }
                    black_box(bytes);
                });
            }
        });
    });
    drop(members);
    close(mq, &dir);
    secs
}

/// Waits (sleeping, then yielding) until the `i`-th tick of `rate` per
/// second after `start`; returns the nanoseconds since `start` then.
fn pace(start: Instant, rate: u64, i: u64) -> u64 {
    let due = start + Duration::from_nanos(1_000_000_000 / rate) * i as u32;
    loop {
        let now = Instant::now();
        if now >= due {
            break;
        }
        if due.duration_since(now) > Duration::from_micros(200) {
            std::thread::sleep(
                due.duration_since(now)
                    .saturating_sub(Duration::from_micros(100)),
            );
        } else {
            std::thread::yield_now();
        }
    }
    start.elapsed().as_nanos() as u64
}

/// Produce-to-consume latency in one process: a producer thread sends at
/// `rate` messages/s (`acks=1`), a consumer thread parked in `poll` takes
/// each; returns the latencies (ns) of `n` messages, sorted.
fn latencies(n: u64, rate: u64) -> Vec<u64> {
    let dir = fresh_dir("latency");
    let mq = Broker::open(&dir, harness::exclusive().prefault(false)).expect("open");
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(SEGMENT))
        .expect("create");
    partition_log(&mq, "t", 0).expect("log").prefault();
    let producer = mq.producer(ProducerConfig::default()).expect("producer");
    let mut consumer = mq
        .consumer(ConsumerConfig::default().max_poll_records(1000))
        .expect("consumer");
    consumer.assign(&[("t", 0)]).expect("assign");
    let start = Instant::now();
    let mut out = Vec::with_capacity(n as usize);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..n {
                let sent = pace(start, rate, i);
                producer
                    .send_borrowed(&BorrowedRecord {
                        topic: "t",
                        partition: Some(0),
                        value: Some(&sent.to_le_bytes()),
                        ..BorrowedRecord::default()
                    })
                    .expect("send");
            }
        });
        while (out.len() as u64) < n {
            for m in consumer.poll(Duration::from_millis(100)).expect("poll") {
                let now = start.elapsed().as_nanos() as u64;
                let v = m.value().expect("value");
                let sent = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
                out.push(now.saturating_sub(sent));
            }
        }
    });
    drop(consumer);
    drop(producer);
    close(mq, &dir);
    out.sort_unstable();
    out
}

/// The floor under [`latencies`]: the same paced producer thread hands a
/// timestamp to a thread parked with `std::thread::park` (a locked vector
/// and an `unpark`, no log); returns the latencies (ns) of `n` hand-offs,
/// sorted.
fn wakeup_latencies(n: u64, rate: u64) -> Vec<u64> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let start = Instant::now();
    let queue: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::with_capacity(1024));
    let pending = AtomicBool::new(false);
    let mut out = Vec::with_capacity(n as usize);
    std::thread::scope(|s| {
        let consumer = s.spawn(|| {
            let mut out = Vec::with_capacity(n as usize);
            let mut taken = Vec::with_capacity(1024);
            while (out.len() as u64) < n {
                if !pending.swap(false, Ordering::AcqRel) {
                    std::thread::park();
                    continue;
                }
                std::mem::swap(&mut taken, &mut *queue.lock().expect("queue"));
                let now = start.elapsed().as_nanos() as u64;
                out.extend(taken.drain(..).map(|sent| now.saturating_sub(sent)));
            }
            out
        });
        let waiter = consumer.thread().clone();
        for i in 0..n {
            let sent = pace(start, rate, i);
            queue.lock().expect("queue").push(sent);
            pending.store(true, Ordering::Release);
            waiter.unpark();
        }
        out = consumer.join().expect("consumer");
    });
    out.sort_unstable();
    out
}

/// `n` sends with `acks=all` split over `threads` threads (one partition):
/// concurrent senders share flushes (group commit).
fn produce_durable(n: u64, size: usize, threads: u64) -> f64 {
    let (mq, log, dir) = open_with("durable", false, false, 64 << 20);
    drop(log);
    let producer = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .expect("producer");
    let value = vec![7u8; size];
    let secs = time(|| {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..n / threads {
                        producer
                            .send_borrowed(&BorrowedRecord {
                                topic: "t",
                                partition: Some(0),
                                value: Some(&value),
                                ..BorrowedRecord::default()
                            })
                            .expect("send");
                    }
                });
            }
        });
    });
    let flushes = mq.topic("t").expect("topic").partitions[0].flushes.max(1);
    eprintln!(
        "    ({threads} threads: {:.1} records per flush, {:.0} us per flush round)",
        n as f64 / flushes as f64,
        secs * 1e6 / flushes as f64
    );
    drop(producer);
    close(mq, &dir);
    secs
}

/// Seconds to open a data directory whose one partition holds `segments`
/// full segments of 16 MiB (median of 5 opens): open reads only the tail of
/// the active segment, so this must not grow with the log.
fn open_time(segments: u64) -> f64 {
    let dir = open_dir(segments);
    let secs = median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                let mq = Broker::open(&dir, harness::exclusive().prefault(false)).expect("open");
                black_box(mq.topic("t").expect("topic"));
                let secs = t.elapsed().as_secs_f64();
                drop(mq); // the close (a flush) is not timed
                secs
            })
            .collect(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    secs
}

/// Seconds to open the data directory of [`open_time`] (`segments` full
/// segments of 16 MiB and half of one, written in exclusive mode) in
/// exclusive or `shared` mode and send one record to its partition (median
/// of 5, after one such open not timed): a shared open learns where each
/// sealed segment ends from its seal entry and where the active one ends
/// from the tail page, without reading their batches, so this must not
/// grow with the log either.
fn open_and_send_time(segments: u64, shared: bool) -> f64 {
    let dir = open_dir(segments);
    let config = harness::exclusive().prefault(false).shared(shared);
    let once = || {
        let t = Instant::now();
        let mq = Broker::open(&dir, config.clone()).expect("open");
        let p = mq.producer(ProducerConfig::default()).expect("producer");
        p.send(mqlite::Record::new("t").partition(0).value(&b"x"[..]))
            .expect("send");
        let secs = t.elapsed().as_secs_f64();
        drop(p);
        drop(mq); // the close (a flush) is not timed
        secs
    };
    once();
    let secs = median((0..5).map(|_| once()).collect());
    let _ = std::fs::remove_dir_all(&dir);
    secs
}

/// A data directory whose one partition holds `segments` full segments of
/// 16 MiB and half of one, of 100-record batches of 1,000-byte records.
fn open_dir(segments: u64) -> PathBuf {
    let dir = fresh_dir("open");
    {
        let mq = Broker::open(&dir, harness::exclusive().prefault(false)).expect("open");
        mq.create_topic("t", TopicConfig::new(1).segment_bytes(16 << 20))
            .expect("create");
        let log = partition_log(&mq, "t", 0).expect("log");
        let value = vec![7u8; 1000];
        let recs: Vec<RecordRef<'_>> = (0..100).map(|_| record(&value)).collect();
        let per_segment = (16 << 20) / batch::batch_len(&recs) as u64;
        for _ in 0..segments * per_segment + per_segment / 2 {
            log.append(&recs).expect("append");
        }
    }
    dir
}

/// `n` messages of `size` bytes spread evenly over `partitions` partitions
/// (written as 1000-record batches, as a producer's batching writes them),
/// read by one consumer assigned all of them, with `max_poll_records` set
/// to `max_poll` (`None`: the default).
fn consume_partitions(n: u64, size: usize, partitions: u32, max_poll: Option<usize>) -> f64 {
    let dir = fresh_dir("spread");
    let mq = Broker::open(&dir, harness::exclusive().prefault(false)).expect("open");
    mq.create_topic("t", TopicConfig::new(partitions).segment_bytes(SEGMENT))
        .expect("create");
    let value = vec![7u8; size];
    let per = n / u64::from(partitions);
    for p in 0..partitions {
        let log = partition_log(&mq, "t", p).expect("log");
        let mut left = per;
        while left > 0 {
            let k = left.min(1000);
            let recs: Vec<RecordRef<'_>> = (0..k).map(|_| record(&value)).collect();
            log.append(&recs).expect("append");
            left -= k;
        }
    }
    let mut config = ConsumerConfig::default();
    if let Some(m) = max_poll {
        config = config.max_poll_records(m);
    }
    let mut consumer = mq.consumer(config).expect("consumer");
    let parts: Vec<(&str, u32)> = (0..partitions).map(|p| ("t", p)).collect();
    consumer.assign(&parts).expect("assign");
    let total = per * u64::from(partitions);
    let mut got = 0u64;
    let mut bytes = 0usize;
    let secs = time(|| {
        while got < total {
            for m in consumer.poll(Duration::from_millis(100)).expect("poll") {
                bytes += m.value().map_or(0, <[u8]>::len);
                got += 1;
            }
        }
    });
    assert_eq!(got, total);
    black_box(bytes);
    drop(consumer);
    close(mq, &dir);
    secs
}

/// Whether `MQLITE_BENCH_SIZES` (comma-separated sizes in bytes; all when
/// unset) selects the per-size rows of `size`.
fn size_selected(size: usize) -> bool {
    std::env::var("MQLITE_BENCH_SIZES")
        .map_or(true, |v| v.split(',').any(|s| s.trim().parse() == Ok(size)))
}

fn main() {
    harness::run_bench("log", &[], one_run);
}

/// One run of every selected row, in the order they are listed.
fn one_run(h: &mut Harness) {
    for &(size, n) in &[(100usize, scaled(2_000_000)), (1024usize, scaled(300_000))] {
        if !size_selected(size) {
            continue;
        }
        let group = format!("{size} B");
        let baseline = format!("raw mmap write, touched pages ({size} B)");
        let mut bench = |name: &str, msgs: u64, f: &dyn Fn() -> f64| {
            if !filter_matches(name) {
                return;
            }
            let secs = f();
            h.record(
                &format!("{name} ({size} B)"),
                &group,
                msgs,
                size,
                secs,
                Some(&baseline),
            );
        };
        bench("memcpy into touched memory", n, &|| memcpy(n, size));
        bench("raw mmap write, fresh file (page faults)", n, &|| {
            raw_mmap(n, size, false)
        });
        bench("raw mmap write, touched pages", n, &|| {
            raw_mmap(n, size, true)
        });
        bench("crc32c of one batch", n, &|| crc(n, size));
        bench("log append, 1 per batch, prefaulted", n, &|| {
            append(n, size, 1, Pages::Prefaulted)
        });
        bench("log append, 1 per batch, cold segment", n, &|| {
            append(n, size, 1, Pages::Cold)
        });
        bench("log append, 1 per batch, 64 MiB rolling", n, &|| {
            append(n, size, 1, Pages::Rolling)
        });
        bench("log append, 100 per batch, prefaulted", n, &|| {
            append(n, size, 100, Pages::Prefaulted)
        });
        bench("log append, 100 per batch, 64 MiB rolling", n, &|| {
            append(n, size, 100, Pages::Rolling)
        });
        bench("log read+CRC, 1-record batches", n, &|| scan(n, size, 1));
        bench("log read+CRC, 100-record batches", n, &|| {
            scan(n, size, 100)
        });
        bench("Producer::send, 1 at a time", n, &|| produce(n, size));
        let cfg = ProducerConfig::default;
        bench("Producer::send, not idempotent", n, &|| {
            produce_with(n, size, 1, SendMode::One, cfg().idempotent(false))
        });
        bench("Producer::send, 2 threads", n, &|| {
            produce_with(n, size, 2, SendMode::One, cfg())
        });
        bench("Producer::send, named, explicit sequences", n, &|| {
            produce_with(n, size, 1, SendMode::Sequenced, cfg().name("bench"))
        });
        bench("Producer::send, named, initial_sequence", n, &|| {
            produce_with(
                n,
                size,
                1,
                SendMode::One,
                cfg().name("bench").initial_sequence(0),
            )
        });
        bench("Producer::send_batch of 100", n, &|| {
            produce_with(n, size, 1, SendMode::Batch, cfg())
        });
        bench("Producer::send_batch of 100, 2 threads", n, &|| {
            produce_with(n, size, 2, SendMode::Batch, cfg())
        });
        bench("Producer::send_async, linger 5 ms", n, &|| {
            produce_with(n, size, 1, SendMode::Async, cfg().linger_ms(5))
        });
        for codec in [
            Compression::Lz4,
            Compression::Zstd,
            Compression::Snappy,
            Compression::Gzip,
        ] {
            let c = n / 10;
            bench(&format!("Producer::send_batch of 100, {codec}"), c, &|| {
                produce_with(c, size, 1, SendMode::Batch, cfg().compression(codec))
            });
        }
        bench("Consumer::poll", n, &|| consume(n, size, false));
        bench("Consumer::poll_batch", n, &|| consume(n, size, true));
        bench("Processor::run, trivial handler, 4 threads", n, &|| {
            process(n, size)
        });
        bench("Consumer::poll, group of 2 (2 partitions)", n, &|| {
            consume_group(n, size)
        });
        let d = scaled(4000);
        bench("Producer::send acks=all, 1 thread", d, &|| {
            produce_durable(d, size, 1)
        });
        bench("Producer::send acks=all, 8 threads", d, &|| {
            produce_durable(d, size, 8)
        });
        let a = scaled(200_000);
        bench("Producer::send_async acks=all", a, &|| {
            produce_with(a, size, 1, SendMode::Async, cfg().acks(Acks::All))
        });
        bench("raw read(2) of the log file, 1-record batches", n, &|| {
            raw_read(n, size)
        });
        // Readers of one-record batches against the raw read of the same
        // file, run by run.
        let raw = h.last_rate(&format!(
            "raw read(2) of the log file, 1-record batches ({size} B)"
        ));
        for reader in ["log read+CRC, 1-record batches", "Consumer::poll_batch"] {
            if let (Some(raw), Some(own)) = (raw, h.last_rate(&format!("{reader} ({size} B)"))) {
                h.figure(
                    &format!("{reader} over raw read(2) ({size} B)"),
                    "x",
                    own / raw,
                );
            }
        }
    }
    // One consumer over the same messages spread over more partitions, and
    // over `max_poll_records`: rates, and ratios to the first row of each
    // sweep measured in the same run.
    let spread_n = scaled(2_000_000);
    let mut sweep = |title: &str, cases: &[(String, u32, Option<usize>)]| {
        let mut first: Option<String> = None;
        for (name, parts, max_poll) in cases {
            if !filter_matches(name) {
                continue;
            }
            let secs = consume_partitions(spread_n, 100, *parts, *max_poll);
            let base = first.get_or_insert_with(|| name.clone()).clone();
            h.record(name, title, spread_n, 100, secs, Some(&base));
        }
    };
    let spread: Vec<(String, u32, Option<usize>)> = [1u32, 2, 8, 32]
        .iter()
        .map(|&p| (format!("Consumer::poll spread, P={p} (100 B)"), p, None))
        .collect();
    sweep("one consumer, 100 B messages over P partitions", &spread);
    let polls: Vec<(String, u32, Option<usize>)> = [100usize, 500, 1000, 10_000]
        .iter()
        .map(|&m| {
            (
                format!("Consumer::poll P=8, max_poll_records={m} (100 B)"),
                8,
                Some(m),
            )
        })
        .collect();
    sweep(
        "one consumer over 8 partitions, by max_poll_records",
        &polls,
    );
    if filter_matches("latency") {
        // The producer thread paces itself on the clock, yielding while it
        // waits (the consumer parks in `poll`, woken by each append).
        let rate = 100_000;
        let n = scaled(200_000);
        // The baseline first, then mqlite, then the baseline again: the
        // machine's wake-up cost drifts.
        let base_a = wakeup_latencies(n, rate);
        let l = latencies(n, rate);
        let base_b = wakeup_latencies(n, rate);
        let pct =
            |l: &[u64], q: f64| l[((l.len() as f64 * q) as usize).min(l.len() - 1)] as f64 / 1e3;
        let what = format!("produce-to-consume latency (acks=1, {n} messages at {rate}/s)");
        for (q, label) in [(0.5, "p50"), (0.99, "p99"), (0.999, "p99.9"), (1.0, "max")] {
            h.figure(&format!("{what}, {label}"), "us", pct(&l, q));
        }
        let floor =
            format!("thread park/unpark hand-off at {rate}/s (baseline, mean of before and after)");
        for (q, label) in [(0.5, "p50"), (0.99, "p99")] {
            let b = f64::midpoint(pct(&base_a, q), pct(&base_b, q));
            h.figure(&format!("{floor}, {label}"), "us", b);
        }
        h.figure(
            "produce-to-consume latency p50 over the hand-off p50",
            "x",
            pct(&l, 0.5) / f64::midpoint(pct(&base_a, 0.5), pct(&base_b, 0.5)),
        );
    }
    if filter_matches("open") {
        let small = open_time(1);
        let large = open_time(64);
        h.figure("open, one 16 MiB segment", "ms", small * 1e3);
        h.figure("open, 64 segments of 16 MiB (1 GiB)", "ms", large * 1e3);
        h.figure("open, 64 segments over one segment", "x", large / small);
        h.figure(
            "open, cost per extra segment",
            "us",
            (large - small) * 1e6 / 63.0,
        );
        let exclusive = open_and_send_time(64, false);
        let shared = open_and_send_time(64, true);
        h.figure(
            "open and one send, 64 segments of 16 MiB, exclusive mode",
            "ms",
            exclusive * 1e3,
        );
        h.figure(
            "open and one send, 64 segments of 16 MiB, shared mode",
            "ms",
            shared * 1e3,
        );
        h.figure(
            "open and one send, 64 segments of 16 MiB, shared over exclusive mode",
            "x",
            shared / exclusive,
        );
    }
}
