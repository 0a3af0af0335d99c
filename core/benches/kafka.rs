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
//!
//! The copy rows measure the bridge between a data directory and the
//! cluster ([`to_cluster`], [`from_cluster`] with the default
//! [`MirrorOptions`]: up to 500 records per read and per write, each
//! write waited for, acks=all) against a plain loop doing the same copy
//! without the bridge's resume header (`mqlite.mirror.offset` on every
//! record) and without its resume scan: a directory [`mqlite::Consumer`]'s
//! polls, each poll's records sent with an rdkafka producer (acks=all,
//! idempotent, linger.ms=1, as the bridge's) and waited for before the
//! next poll, until each partition reaches the end it had at the start;
//! and an rdkafka `BaseConsumer` (`enable.partition.eof`, as the bridge's
//! reader) feeding a directory `Producer::send_batch` (acks=all) up to 500
//! records at a time, until every partition is at its end. Records keep
//! partition, key, value, headers and timestamp. Each copy is one whole
//! run of the copy, clock started before its producer and consumer are
//! made (what `mqlite mirror --to/--from` does once): 200,000 records of
//! 100 B or 80,000 of 1 KiB, on one partition and spread over four, into
//! a destination made beforehand (a fresh cluster topic, a fresh
//! directory). The figures are the same copies of 4 records: the fixed
//! cost of a copy (on tansu mostly the idempotent producer's wait for its
//! producer id, on both sides).
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

use mqlite::kafka::mirror::{from_cluster, to_cluster, MirrorOptions};
use mqlite::kafka::{bootstrap_servers, KafkaBroker};
use mqlite::{
    Acks, BorrowedRecord, Broker, Compression, Config, ConsumerConfig, Header, IsolationLevel,
    Message, OffsetReset, ProducerConfig, Record, TopicConfig,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::{
    BorrowedMessage, Header as KHeader, Headers as _, Message as _, OwnedHeaders,
};
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer as _, ProducerContext, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

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
        drop(
            COPY_SOURCES
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
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
        // The layer stores each offset as it hands the message out.
        ("enable.auto.offset.store", "false".to_owned()),
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
    raw_send_record(p, BaseRecord::to(topic).payload(value));
}

/// [`raw_send`] of a record built by the caller.
fn raw_send_record(p: &RawProducer, mut rec: BaseRecord<'_, [u8], [u8]>) {
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

// ---------------------------------------------------------------------
// The bridge (mqlite::kafka::mirror) against a plain copy loop
// ---------------------------------------------------------------------

/// Records per read of the source and per write, as the bridge's default
/// `max_batch`.
const COPY_BATCH: usize = 500;

/// The longest wait of one read of the source, as the bridge's default
/// `poll_timeout`.
const COPY_POLL: Duration = Duration::from_millis(200);

/// The producer settings of the bridge's writes to a cluster.
fn copy_to_cluster_config() -> ProducerConfig {
    ProducerConfig {
        acks: Acks::All,
        linger_ms: 1,
        ..ProducerConfig::default()
    }
}

/// The producer settings of the bridge's writes to a directory.
fn copy_to_dir_config() -> ProducerConfig {
    ProducerConfig {
        acks: Acks::All,
        ..ProducerConfig::default()
    }
}

/// A data directory of the bench, removed when dropped.
struct Dir {
    broker: Broker,
    _tmp: tempfile::TempDir,
}

fn new_dir() -> Dir {
    let tmp = tempfile::tempdir().unwrap();
    let broker = Broker::open(tmp.path(), Config::default()).unwrap();
    Dir { broker, _tmp: tmp }
}

/// The directory holding the sources of the copies to the cluster (taken
/// and removed by [`StopCluster`]).
static COPY_SOURCES: Mutex<Option<Dir>> = Mutex::new(None);

/// Writes `n` records of `value` to `topic` of `dir`, `n / parts` to each
/// of its `parts` partitions.
fn fill_dir(dir: &Broker, topic: &str, parts: u32, n: u64, value: &[u8]) {
    dir.create_topic(topic, TopicConfig::new(parts)).unwrap();
    let p = dir.producer(ProducerConfig::default()).unwrap();
    for q in 0..parts {
        let chunk: Vec<BorrowedRecord<'_>> = (0..1000)
            .map(|_| BorrowedRecord {
                topic,
                partition: Some(q),
                value: Some(value),
                ..BorrowedRecord::default()
            })
            .collect();
        let mut written = 0;
        while written < n / u64::from(parts) {
            let k = (n / u64::from(parts) - written).min(1000) as usize;
            p.send_batch(&chunk[..k]).unwrap();
            written += k as u64;
        }
    }
    p.close().unwrap();
}

/// A topic of the cluster the copies read: (value size, partitions,
/// records) and its name.
type ClusterSource = ((usize, u32, u64), String);

/// The topics the copies from the cluster read, filled once.
static CLUSTER_SOURCES: Mutex<Vec<ClusterSource>> = Mutex::new(Vec::new());

/// A cluster topic of `parts` partitions holding `n` records of `size`
/// bytes, `n / parts` in each, made on first call.
fn cluster_source(b: &KafkaBroker, url: &str, size: usize, parts: u32, n: u64) -> String {
    let mut filled = CLUSTER_SOURCES.lock().unwrap();
    if let Some((_, t)) = filled.iter().find(|(k, _)| *k == (size, parts, n)) {
        return t.clone();
    }
    let topic = fresh_topic("copy-src");
    b.create_topic(&topic, TopicConfig::new(parts)).unwrap();
    let p = raw_producer(
        url,
        &producer_config(THROUGHPUT_LINGER_MS),
        b.request_timeout(),
    );
    let value = vec![b'v'; size];
    for q in 0..parts {
        for _ in 0..n / u64::from(parts) {
            raw_send_record(
                &p,
                BaseRecord::to(&topic).partition(q as i32).payload(&value),
            );
        }
    }
    p.flush(PATIENCE).unwrap();
    raw_wait_for(&p, n);
    filled.push(((size, parts, n), topic.clone()));
    topic
}

/// A directory topic of `parts` partitions holding `n` records of `size`
/// bytes, new for each run (its cluster copy is new too); returns its
/// name and the source directory.
fn dir_source(size: usize, parts: u32, n: u64) -> String {
    let mut sources = COPY_SOURCES.lock().unwrap();
    let dir = sources.get_or_insert_with(new_dir);
    let topic = fresh_topic("copy-dir");
    fill_dir(&dir.broker, &topic, parts, n, &vec![b'v'; size]);
    topic
}

/// Runs `f` on the directory of the copies to the cluster.
fn with_sources<T>(f: impl FnOnce(&Broker) -> T) -> T {
    let sources = COPY_SOURCES.lock().unwrap();
    f(&sources.as_ref().unwrap().broker)
}

/// Seconds for [`to_cluster`] to copy `topic` (of `parts` partitions,
/// `n` records) to a cluster topic made beforehand.
fn bridge_to_cluster(b: &KafkaBroker, topic: &str, parts: u32, n: u64) -> f64 {
    b.create_topic(topic, TopicConfig::new(parts)).unwrap();
    let secs = with_sources(|dir| {
        let t = Instant::now();
        let stats = to_cluster(dir, b, topic, &MirrorOptions::default()).unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(stats.copied, n);
        dir.delete_topic(topic).unwrap();
        secs
    });
    b.delete_topic(topic).unwrap();
    secs
}

/// rdkafka's copy of a directory's message (partition, key, value,
/// headers, timestamp).
fn raw_send_copy(p: &RawProducer, topic: &str, m: &Message) {
    let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
        .partition(m.partition() as i32)
        .timestamp(m.timestamp());
    if let Some(k) = m.key() {
        rec = rec.key(k);
    }
    if let Some(v) = m.value() {
        rec = rec.payload(v);
    }
    let headers = m.headers();
    if !headers.is_empty() {
        let mut h = OwnedHeaders::new_with_capacity(headers.len());
        for x in &headers {
            h = h.insert(KHeader {
                key: &x.key,
                value: Some(&x.value[..]),
            });
        }
        rec = rec.headers(h);
    }
    raw_send_record(p, rec);
}

/// Seconds for a plain loop to copy `topic` (of `parts` partitions, `n`
/// records) to a cluster topic made beforehand: a directory consumer's
/// polls, each poll's records sent with rdkafka and waited for before the
/// next poll, until every partition is read to the end it had at the
/// start.
fn loop_to_cluster(b: &KafkaBroker, url: &str, topic: &str, parts: u32, n: u64) -> f64 {
    b.create_topic(topic, TopicConfig::new(parts)).unwrap();
    let secs = with_sources(|dir| {
        let t = Instant::now();
        let ends: Vec<u64> = dir
            .topic(topic)
            .unwrap()
            .partitions
            .iter()
            .map(|pi| pi.end_offset)
            .collect();
        let p = raw_producer(url, &copy_to_cluster_config(), b.request_timeout());
        let mut c = dir
            .consumer(ConsumerConfig {
                max_poll_records: COPY_BATCH,
                ..ConsumerConfig::default()
            })
            .unwrap();
        let all: Vec<(&str, u32)> = (0..parts).map(|q| (topic, q)).collect();
        c.assign(&all).unwrap();
        for q in 0..parts {
            c.seek(topic, q, 0).unwrap();
        }
        let deadline = Instant::now() + PATIENCE;
        let mut copied = 0u64;
        while (0..parts).any(|q| c.position(topic, q).unwrap() < ends[q as usize]) {
            assert!(Instant::now() < deadline, "the loop copied {copied} of {n}");
            let msgs = c.poll(COPY_POLL).unwrap();
            for m in &msgs {
                raw_send_copy(&p, topic, m);
            }
            copied += msgs.len() as u64;
            raw_wait_for(&p, copied);
        }
        p.flush(PATIENCE).unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(copied, n);
        dir.delete_topic(topic).unwrap();
        secs
    });
    b.delete_topic(topic).unwrap();
    secs
}

/// Seconds for [`from_cluster`] to copy the cluster's `topic` (of
/// `parts` partitions, `n` records) to a new directory, the topic made
/// there beforehand.
fn bridge_from_cluster(b: &KafkaBroker, topic: &str, parts: u32, n: u64) -> f64 {
    let d = new_dir();
    d.broker
        .create_topic(topic, TopicConfig::new(parts))
        .unwrap();
    let t = Instant::now();
    let stats = from_cluster(b, &d.broker, topic, &MirrorOptions::default()).unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(stats.copied, n);
    secs
}

/// Seconds for a plain loop to copy the cluster's `topic` (of `parts`
/// partitions, `n` records) to a new directory, the topic made there
/// beforehand: an rdkafka `BaseConsumer` reading every partition from its
/// start (`enable.partition.eof`, as the bridge's reader), up to
/// [`COPY_BATCH`] messages per write, each write a directory `send_batch`
/// with acks=all, until every partition is read to its end.
fn loop_from_cluster(url: &str, topic: &str, parts: u32, n: u64) -> f64 {
    let d = new_dir();
    d.broker
        .create_topic(topic, TopicConfig::new(parts))
        .unwrap();
    let t = Instant::now();
    let mut props = consumer_props(&ConsumerConfig::default(), &fresh_topic("copy"));
    props.push(("enable.partition.eof", "true".to_owned()));
    let c: BaseConsumer = client_config(url, &props).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for q in 0..parts {
        tpl.add_partition_offset(topic, q as i32, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let p = d.broker.producer(copy_to_dir_config()).unwrap();
    let deadline = Instant::now() + PATIENCE;
    let mut at_end = vec![false; parts as usize];
    let mut copied = 0u64;
    let mut batch: Vec<BorrowedMessage<'_>> = Vec::with_capacity(COPY_BATCH);
    loop {
        assert!(Instant::now() < deadline, "the loop copied {copied} of {n}");
        let wait = if batch.is_empty() {
            Duration::from_millis(100)
        } else {
            Duration::ZERO
        };
        let write = match c.poll(wait) {
            Some(Ok(m)) => {
                at_end[m.partition() as usize] = false;
                batch.push(m);
                batch.len() == COPY_BATCH
            }
            Some(Err(KafkaError::PartitionEOF(q))) => {
                at_end[q as usize] = true;
                true
            }
            Some(Err(e)) => panic!("rdkafka poll: {e}"),
            None => true,
        };
        if write && !batch.is_empty() {
            let headers: Vec<Vec<Header>> = batch
                .iter()
                .map(|m| {
                    m.headers().map_or_else(Vec::new, |h| {
                        h.iter()
                            .map(|x| Header::new(x.key, x.value.unwrap_or_default()))
                            .collect()
                    })
                })
                .collect();
            let records: Vec<BorrowedRecord<'_>> = batch
                .iter()
                .zip(&headers)
                .map(|(m, h)| BorrowedRecord {
                    topic,
                    partition: Some(m.partition() as u32),
                    key: m.key(),
                    value: m.payload(),
                    headers: h,
                    timestamp: m.timestamp().to_millis(),
                    sequence: None,
                })
                .collect();
            p.send_batch(&records).unwrap();
            copied += batch.len() as u64;
            batch.clear();
        }
        if batch.is_empty() && at_end.iter().all(|e| *e) {
            break;
        }
    }
    p.close().unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(copied, n);
    secs
}

/// Records per copy row for values of `size` bytes (a multiple of 4, so
/// that every partition gets as many).
fn copy_count(size: usize) -> u64 {
    let n = if size <= 100 {
        scaled(200_000)
    } else {
        scaled(80_000)
    };
    n / 4 * 4
}

/// Records of the copies that measure a copy's fixed cost.
const TINY_COPY: u64 = 4;

/// The copy rows of one run, then the fixed cost of a copy: the seconds
/// of copies of [`TINY_COPY`] records (one partition, 100 B).
fn copy_rows(h: &mut Harness, b: &KafkaBroker, url: &str) {
    for parts in [1u32, 4] {
        let p_label = if parts == 1 {
            "1 partition".to_owned()
        } else {
            format!("{parts} partitions")
        };
        let group = format!(
            "copy directory -> cluster, {p_label} (acks=all, {COPY_BATCH} records per write)"
        );
        for (size, label) in SIZES {
            let base = format!("plain loop: Consumer::poll + rdkafka sends, {p_label}, {label}");
            let own = format!("mirror::to_cluster, {p_label}, {label}");
            if filter_matches(&base) || filter_matches(&own) {
                let n = copy_count(size);
                let topic = dir_source(size, parts, n);
                h.record(
                    &base,
                    &group,
                    n,
                    size,
                    loop_to_cluster(b, url, &topic, parts, n),
                    None,
                );
                let topic = dir_source(size, parts, n);
                h.record(
                    &own,
                    &group,
                    n,
                    size,
                    bridge_to_cluster(b, &topic, parts, n),
                    Some(&base),
                );
            }
        }
        let group = format!(
            "copy cluster -> directory, {p_label} (acks=all, {COPY_BATCH} records per write)"
        );
        for (size, label) in SIZES {
            let base = format!("plain loop: rdkafka BaseConsumer + send_batch, {p_label}, {label}");
            let own = format!("mirror::from_cluster, {p_label}, {label}");
            if filter_matches(&base) || filter_matches(&own) {
                let n = copy_count(size);
                let topic = cluster_source(b, url, size, parts, n);
                h.record(
                    &base,
                    &group,
                    n,
                    size,
                    loop_from_cluster(url, &topic, parts, n),
                    None,
                );
                h.record(
                    &own,
                    &group,
                    n,
                    size,
                    bridge_from_cluster(b, &topic, parts, n),
                    Some(&base),
                );
            }
        }
    }
    let what = format!("a copy of {TINY_COPY} records (1 partition, 100 B)");
    if filter_matches(&what) {
        let topic = dir_source(100, 1, TINY_COPY);
        let secs = loop_to_cluster(b, url, &topic, 1, TINY_COPY);
        h.figure(
            &format!("plain loop directory -> cluster, {what}"),
            "ms",
            secs * 1e3,
        );
        let topic = dir_source(100, 1, TINY_COPY);
        let secs = bridge_to_cluster(b, &topic, 1, TINY_COPY);
        h.figure(&format!("mirror::to_cluster, {what}"), "ms", secs * 1e3);
        let topic = cluster_source(b, url, 100, 1, TINY_COPY);
        let secs = loop_from_cluster(url, &topic, 1, TINY_COPY);
        h.figure(
            &format!("plain loop cluster -> directory, {what}"),
            "ms",
            secs * 1e3,
        );
        let secs = bridge_from_cluster(b, &topic, 1, TINY_COPY);
        h.figure(&format!("mirror::from_cluster, {what}"), "ms", secs * 1e3);
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
    copy_rows(h, &b, url);
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
