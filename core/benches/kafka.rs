//! The cost of mqlite's Kafka layer (`mqlite::kafka`) over librdkafka used
//! directly through the `rdkafka` crate, on a Kafka-compatible broker this
//! bench starts: `tansu` on 127.0.0.1, its storage in memory, stopped at the
//! end (found as the Kafka tests find it: `MQLITE_TANSU`, then `PATH`,
//! then `~/.cargo/bin`; without it the bench says so and measures nothing).
//!
//! `cargo bench -p mqlite --features kafka --bench kafka`. Runs, scale,
//! filter and the JSON record as in every bench on the shared harness
//! (`harness/mod.rs`); the default scale takes about a minute for 3 runs.
//!
//! Each row of the layer has as baseline the same work done with `rdkafka`
//! alone, with the librdkafka properties the layer sets for the same
//! [`ProducerConfig`] / [`ConsumerConfig`] (`producer_props`,
//! `consumer_props` below mirror `core/src/kafka/{producer,consumer}.rs`),
//! on a topic of one partition made the same way, with values of 100 B and
//! of 1 KiB, no key, no headers:
//!
//! - `send`: [`KafkaProducer::send`] of one record, which waits for its
//!   delivery report, against a `ThreadedProducer` send followed by a wait
//!   for that record's report (acks=1, linger.ms=0). Mostly the round trip
//!   to the broker: the layer's share is its record copy (`Record` owns its
//!   value), its checks and the handing of the report to the caller.
//! - `send_batch`: [`KafkaProducer::send_batch`] of 100 borrowed records,
//!   against 100 sends and a wait for the 100 reports (acks=1,
//!   linger.ms=0).
//! - `send_async + flush`: [`KafkaProducer::send_async`] of every record
//!   (with a callback) then one `flush`, against sends then `flush`
//!   (acks=1, linger.ms=5): throughput, where the layer's per-record work
//!   (a `Record`, a boxed callback, the metadata built for it) weighs most.
//! - `poll`: [`KafkaConsumer::poll`] of messages produced beforehand, from
//!   the start of an assigned partition (no group), against
//!   `BaseConsumer::poll` copying each message's key and value out (the
//!   layer builds owned [`mqlite::Message`]s).
//!
//! The producer rows each get a fresh topic (deleted after), and wait for
//! a few records before the clock starts (connection and metadata); the
//! consumer's clock starts at `assign`, so it includes librdkafka's first
//! fetch on both sides.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

mod harness;
use harness::{filter_matches, scaled, Harness};

use mqlite::kafka::{bootstrap_servers, KafkaBroker};
use mqlite::{
    Acks, BorrowedRecord, Compression, ConsumerConfig, IsolationLevel, OffsetReset, ProducerConfig,
    Record, TopicConfig,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message as _;
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer as _, ProducerContext, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, TopicPartitionList};

/// The value sizes measured.
const SIZES: [(usize, &str); 2] = [(100, "100 B"), (1024, "1 KiB")];

/// Records per `send_batch`.
const BATCH: usize = 100;

/// The linger of the throughput rows.
const THROUGHPUT_LINGER_MS: u64 = 5;

/// How long a row may wait for the broker before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------
// The broker
// ---------------------------------------------------------------------

/// The tansu of this bench, started on first use.
struct Cluster {
    url: String,
    child: Mutex<Child>,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();

fn tansu_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MQLITE_TANSU") {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join("tansu"))
        .find(|p| p.is_file())
}

/// The `kafka://` address of the bench's broker, started on first call.
fn cluster_url() -> &'static str {
    &CLUSTER
        .get_or_init(|| {
            let bin = tansu_binary().expect("main checked for the tansu binary");
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let listen = format!("tcp://127.0.0.1:{port}");
            let child = Command::new(&bin)
                .args([
                    "broker",
                    "--listener-url",
                    &listen,
                    "--advertised-listener-url",
                    &listen,
                    "--storage-engine",
                    "memory://tansu/",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "tansu did not listen on {port}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Cluster {
                url: format!("kafka://127.0.0.1:{port}"),
                child: Mutex::new(child),
            }
        })
        .url
}

/// Stops the broker when `main` returns or unwinds (statics are never
/// dropped).
struct StopCluster;

impl Drop for StopCluster {
    fn drop(&mut self) {
        if let Some(c) = CLUSTER.get() {
            let mut child = c
                .child
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A topic name no other row of this process uses.
fn fresh_topic(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "bench-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------------
// librdkafka's properties, as the layer sets them
// ---------------------------------------------------------------------

/// What `KafkaProducer::new` sets for `c` (core/src/kafka/producer.rs),
/// `timeout` being the broker's request timeout.
fn producer_props(c: &ProducerConfig, timeout: Duration) -> Vec<(&'static str, String)> {
    let acks = match c.acks {
        Acks::Zero => "0",
        Acks::One => "1",
        Acks::All => "all",
    };
    let compression = match c.compression {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    };
    vec![
        ("acks", acks.to_owned()),
        (
            "enable.idempotence",
            (c.idempotent && c.acks == Acks::All).to_string(),
        ),
        ("linger.ms", c.linger_ms.to_string()),
        ("batch.size", c.batch_size.to_string()),
        (
            "queue.buffering.max.kbytes",
            c.buffer_memory.div_ceil(1024).max(1).to_string(),
        ),
        ("compression.type", compression.to_owned()),
        ("partitioner", "murmur2_random".to_owned()),
        ("message.timeout.ms", timeout.as_millis().to_string()),
    ]
}

/// What `KafkaConsumer::new` sets for `c` (core/src/kafka/consumer.rs),
/// `group` being the private group of a consumer without one.
fn consumer_props(c: &ConsumerConfig, group: &str) -> Vec<(&'static str, String)> {
    assert!(c.group_id.is_none(), "the bench's consumers have no group");
    let reset = match c.auto_offset_reset {
        OffsetReset::Earliest => "earliest",
        OffsetReset::Latest => "latest",
        OffsetReset::Error => "error",
    };
    let isolation = match c.isolation_level {
        IsolationLevel::ReadCommitted => "read_committed",
        IsolationLevel::ReadUncommitted => "read_uncommitted",
    };
    let mut v = vec![
        ("group.id", group.to_owned()),
        ("auto.offset.reset", reset.to_owned()),
        // A consumer without a group never commits.
        ("enable.auto.commit", "false".to_owned()),
        (
            "auto.commit.interval.ms",
            c.auto_commit_interval_ms.to_string(),
        ),
        (
            "enable.auto.offset.store",
            c.enable_auto_offset_store.to_string(),
        ),
        ("max.poll.interval.ms", c.max_poll_interval_ms.to_string()),
        ("isolation.level", isolation.to_owned()),
        // The default `Averagely`.
        ("partition.assignment.strategy", "range".to_owned()),
    ];
    if !c.client_id.is_empty() {
        v.push(("client.id", c.client_id.clone()));
    }
    v
}

/// A librdkafka configuration: the broker's address, then `props`.
fn client_config(url: &str, props: &[(&'static str, String)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap_servers(url).unwrap());
    for (k, v) in props {
        c.set(*k, v);
    }
    c
}

/// The producer settings of the synchronous rows (linger 0) and of the
/// throughput rows.
fn producer_config(linger_ms: u64) -> ProducerConfig {
    ProducerConfig {
        acks: Acks::One,
        linger_ms,
        ..ProducerConfig::default()
    }
}

// ---------------------------------------------------------------------
// The baseline producer: rdkafka's ThreadedProducer counting its reports
// ---------------------------------------------------------------------

#[derive(Default)]
struct Delivered {
    acked: u64,
    failed: u64,
    /// Partition and offset of the latest acknowledged record.
    last: (i32, i64),
}

/// Counts delivery reports, and wakes who waits for them.
#[derive(Default)]
struct Counting {
    state: Mutex<Delivered>,
    done: Condvar,
}

impl ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, (): ()) {
        let mut s = self.state.lock().unwrap();
        match result {
            Ok(m) => {
                s.acked += 1;
                s.last = (m.partition(), m.offset());
            }
            Err(_) => s.failed += 1,
        }
        drop(s);
        self.done.notify_all();
    }
}

type RawProducer = ThreadedProducer<Counting>;

fn raw_producer(url: &str, config: &ProducerConfig, timeout: Duration) -> RawProducer {
    client_config(url, &producer_props(config, timeout))
        .create_with_context(Counting::default())
        .unwrap()
}

/// Hands one record to librdkafka, waiting while its queue is full (as
/// the layer does).
fn raw_send(p: &RawProducer, topic: &str, value: &[u8]) {
    let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).payload(value);
    loop {
        match p.send(rec) {
            Ok(()) => return,
            Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                std::thread::sleep(Duration::from_millis(1));
                rec = back;
            }
            Err((e, _)) => panic!("rdkafka send: {e}"),
        }
    }
}

/// Waits until `n` reports came, none of them a failure.
fn raw_wait_for(p: &RawProducer, n: u64) {
    let ctx = p.context();
    let mut s = ctx.state.lock().unwrap();
    while s.acked + s.failed < n {
        s = ctx.done.wait_timeout(s, PATIENCE).unwrap().0;
    }
    assert_eq!(s.failed, 0, "rdkafka delivery failures");
    black_box(s.last);
}

// ---------------------------------------------------------------------
// The rows
// ---------------------------------------------------------------------

/// What a producer row does.
#[derive(Clone, Copy)]
enum Produce {
    /// One record at a time, each waited for.
    Sync,
    /// Batches of [`BATCH`], each waited for.
    Batch,
    /// Every record handed over, then one flush.
    Async,
}

impl Produce {
    fn linger_ms(self) -> u64 {
        match self {
            Produce::Sync | Produce::Batch => 0,
            Produce::Async => THROUGHPUT_LINGER_MS,
        }
    }
}

/// Records sent before the clock starts.
const WARMUP: u64 = 10;

/// Seconds for `n` records of `value` through rdkafka alone.
fn raw_produce(b: &KafkaBroker, url: &str, how: Produce, value: &[u8], n: u64) -> f64 {
    let topic = fresh_topic("raw");
    b.create_topic(&topic, TopicConfig::new(1)).unwrap();
    let p = raw_producer(url, &producer_config(how.linger_ms()), b.request_timeout());
    for i in 1..=WARMUP {
        raw_send(&p, &topic, value);
        raw_wait_for(&p, i);
    }
    let t = Instant::now();
    match how {
        Produce::Sync => {
            for i in 1..=n {
                raw_send(&p, &topic, value);
                raw_wait_for(&p, WARMUP + i);
            }
        }
        Produce::Batch => {
            let mut sent = WARMUP;
            while sent < WARMUP + n {
                for _ in 0..BATCH {
                    raw_send(&p, &topic, value);
                }
                sent += BATCH as u64;
                raw_wait_for(&p, sent);
            }
        }
        Produce::Async => {
            for _ in 0..n {
                raw_send(&p, &topic, value);
            }
            p.flush(PATIENCE).unwrap();
            raw_wait_for(&p, WARMUP + n);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    drop(p);
    b.delete_topic(&topic).unwrap();
    secs
}

/// Failed deliveries seen by the layer's `send_async` callbacks.
static ASYNC_FAILED: AtomicU64 = AtomicU64::new(0);

/// Seconds for `n` records of `value` through the layer.
fn layer_produce(b: &KafkaBroker, how: Produce, value: &[u8], n: u64) -> f64 {
    let topic = fresh_topic("layer");
    b.create_topic(&topic, TopicConfig::new(1)).unwrap();
    let p = b.producer(producer_config(how.linger_ms())).unwrap();
    for _ in 0..WARMUP {
        p.send(Record::new(&topic).value(value)).unwrap();
    }
    let t = Instant::now();
    match how {
        Produce::Sync => {
            for _ in 0..n {
                black_box(p.send(Record::new(&topic).value(value)).unwrap());
            }
        }
        Produce::Batch => {
            let batch: Vec<BorrowedRecord<'_>> = (0..BATCH)
                .map(|_| BorrowedRecord {
                    topic: &topic,
                    value: Some(value),
                    ..BorrowedRecord::default()
                })
                .collect();
            let mut sent = 0;
            while sent < n {
                black_box(p.send_batch(&batch).unwrap());
                sent += BATCH as u64;
            }
        }
        Produce::Async => {
            for _ in 0..n {
                p.send_async(Record::new(&topic).value(value), |r| {
                    if r.is_err() {
                        ASYNC_FAILED.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .unwrap();
            }
            p.flush_timeout(PATIENCE).unwrap();
        }
    }
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(ASYNC_FAILED.load(Ordering::Relaxed), 0, "layer failures");
    p.close().unwrap();
    drop(p);
    b.delete_topic(&topic).unwrap();
    secs
}

/// The topics the consumer rows read, one per value size, filled once
/// (size, topic).
static FILLED: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());

/// A topic of one partition holding `n` records of `size` bytes, made on
/// first call.
fn filled_topic(b: &KafkaBroker, url: &str, size: usize, n: u64) -> String {
    let mut filled = FILLED.lock().unwrap();
    if let Some((_, t)) = filled.iter().find(|(s, _)| *s == size) {
        return t.clone();
    }
    let topic = fresh_topic("read");
    b.create_topic(&topic, TopicConfig::new(1)).unwrap();
    let p = raw_producer(
        url,
        &producer_config(THROUGHPUT_LINGER_MS),
        b.request_timeout(),
    );
    let value = vec![b'v'; size];
    for _ in 0..n {
        raw_send(&p, &topic, &value);
    }
    p.flush(PATIENCE).unwrap();
    raw_wait_for(&p, n);
    filled.push((size, topic.clone()));
    topic
}

/// An owned copy of a message, as a direct user of rdkafka keeps it.
struct Owned {
    partition: i32,
    offset: i64,
    timestamp: Option<i64>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
}

/// Seconds for rdkafka alone to read `n` messages of `size` bytes of
/// `topic` from its start.
fn raw_consume(url: &str, topic: &str, size: usize, n: u64) -> f64 {
    let group = fresh_topic("ungrouped");
    let c: BaseConsumer = client_config(url, &consumer_props(&ConsumerConfig::default(), &group))
        .create()
        .unwrap();
    let max = ConsumerConfig::default().max_poll_records;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let deadline = Instant::now() + PATIENCE;
    let t = Instant::now();
    c.assign(&tpl).unwrap();
    let mut got = 0u64;
    let mut bytes = 0u64;
    let mut kept: Vec<Owned> = Vec::with_capacity(max);
    while got < n {
        assert!(Instant::now() < deadline, "rdkafka read {got} of {n}");
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                kept.push(Owned {
                    partition: m.partition(),
                    offset: m.offset(),
                    timestamp: m.timestamp().to_millis(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                });
                got += 1;
                if kept.len() == max {
                    for o in kept.drain(..) {
                        bytes += o.value.map_or(0, |v| v.len() as u64);
                        black_box((o.partition, o.offset, o.timestamp, o.key));
                    }
                }
            }
            Some(Err(e)) => panic!("rdkafka poll: {e}"),
            None => {}
        }
    }
    let secs = t.elapsed().as_secs_f64();
    for o in kept.drain(..) {
        bytes += o.value.map_or(0, |v| v.len() as u64);
    }
    assert_eq!(bytes, n * size as u64);
    secs
}

/// Seconds for the layer to read `n` messages of `size` bytes of `topic`
/// from its start.
fn layer_consume(b: &KafkaBroker, topic: &str, size: usize, n: u64) -> f64 {
    let mut c = b.consumer(ConsumerConfig::default()).unwrap();
    let deadline = Instant::now() + PATIENCE;
    let t = Instant::now();
    c.assign(&[(topic, 0)]).unwrap();
    let mut got = 0u64;
    let mut bytes = 0u64;
    while got < n {
        assert!(Instant::now() < deadline, "the layer read {got} of {n}");
        for m in c.poll(Duration::from_millis(200)).unwrap() {
            bytes += m.value().map_or(0, |v| v.len() as u64);
            got += 1;
            black_box(m);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    c.close();
    assert_eq!(bytes, n * size as u64);
    secs
}

/// Messages per row: (one-record sends, batched sends, async sends,
/// reads) for a value of `size` bytes.
fn counts(size: usize) -> (u64, u64, u64, u64) {
    let batches = |n: u64| n.div_ceil(BATCH as u64) * BATCH as u64;
    if size <= 100 {
        (
            scaled(2_000),
            batches(scaled(20_000)),
            scaled(100_000),
            scaled(100_000),
        )
    } else {
        (
            scaled(2_000),
            batches(scaled(10_000)),
            scaled(40_000),
            scaled(30_000),
        )
    }
}

fn one_run(h: &mut Harness) {
    let url = cluster_url();
    let b = KafkaBroker::open(url, &[]).unwrap();
    let produce_rows = [
        (
            Produce::Sync,
            "send: one record, waits for its delivery report (acks=1, linger.ms=0)",
            "rdkafka ThreadedProducer send + wait for its report",
            "KafkaProducer::send",
        ),
        (
            Produce::Batch,
            "send_batch: 100 records, waits for the 100 reports (acks=1, linger.ms=0)",
            "rdkafka 100 sends + wait for their reports",
            "KafkaProducer::send_batch of 100",
        ),
        (
            Produce::Async,
            "throughput: sends, then one flush (acks=1, linger.ms=5)",
            "rdkafka ThreadedProducer send, then flush",
            "KafkaProducer::send_async, then flush",
        ),
    ];
    for (how, group, raw, layer) in produce_rows {
        for (size, label) in SIZES {
            let base = format!("{raw}, {label}");
            let own = format!("{layer}, {label}");
            if !(filter_matches(&base) || filter_matches(&own)) {
                continue;
            }
            let (one, batched, many, _) = counts(size);
            let n = match how {
                Produce::Sync => one,
                Produce::Batch => batched,
                Produce::Async => many,
            };
            let value = vec![b'v'; size];
            h.record(
                &base,
                group,
                n,
                size,
                raw_produce(&b, url, how, &value, n),
                None,
            );
            h.record(
                &own,
                group,
                n,
                size,
                layer_produce(&b, how, &value, n),
                Some(&base),
            );
        }
    }
    let group = "poll: messages from the start of an assigned partition (no group)";
    for (size, label) in SIZES {
        let base = format!("rdkafka BaseConsumer::poll + copy out, {label}");
        let own = format!("KafkaConsumer::poll, {label}");
        if !(filter_matches(&base) || filter_matches(&own)) {
            continue;
        }
        let (_, _, _, n) = counts(size);
        let topic = filled_topic(&b, url, size, n);
        h.record(
            &base,
            group,
            n,
            size,
            raw_consume(url, &topic, size, n),
            None,
        );
        h.record(
            &own,
            group,
            n,
            size,
            layer_consume(&b, &topic, size, n),
            Some(&base),
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let Some(bin) = tansu_binary() else {
        eprintln!(
            "skipped: no tansu binary (MQLITE_TANSU, PATH, ~/.cargo/bin; \
             cargo install tansu --version 0.6.0 --locked --features dynostore)"
        );
        return;
    };
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let broker = format!(
        "broker: {} ({version}), memory storage, on 127.0.0.1, started by the bench",
        bin.display()
    );
    let _stop = StopCluster;
    harness::run_bench(
        "kafka",
        &[
            broker.as_str(),
            "baseline rows: rdkafka alone with the librdkafka properties the layer sets",
        ],
        one_run,
    );
}
