//! Copying a topic between a data directory and a Kafka cluster, either
//! way, once or continuously, with no record lost or written twice across
//! restarts of the copy.
//!
//! When both sides have the same partition count, partitions map one to
//! one (a missing destination is created with the source's count), so
//! each record keeps its partition and its order, with its key, value,
//! headers and timestamp. When the counts differ, records map by key:
//! a record with a key goes to its key's partition (murmur2, as producers
//! place keys, so each key keeps its order), one without to its source
//! partition's number modulo the destination's count.
//!
//! Each copied record carries the copy's progress in its headers, written
//! in the same append as the record: [`MIRROR_OFFSET_HEADER`], its offset
//! in the source; when partitions map by key, also
//! [`MIRROR_PARTITION_HEADER`], its source partition, and on the last
//! record each write puts in a destination partition,
//! [`MIRROR_PROGRESS_HEADER`], how far every source partition had been
//! copied when the write began. A copy that starts reads the tails of the
//! destination's partitions and resumes after what they hold. There is no
//! separate commit that a crash could separate from the write (a crash
//! between a write and its commit is what duplicates records in a copy
//! that commits its progress elsewhere). What it asks: nothing but copies
//! of this source write records with these headers to the destination
//! topic, and one copy of a topic runs at a time (each write waits for
//! the destination's acknowledgement before the next is read).
//!
//! [`Mirror`] runs a copy and reports on it while it runs; [`status`]
//! says how far behind the destination is without copying.

mod copy;
mod resume;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use copy::{read_cluster, read_dir, ClusterSource, DirSource, Mapping, Plan};
use resume::ByKey;

use super::{KafkaBroker, KafkaConsumer};
use crate::error::{Error, Result};
use crate::producer::{Acks, ProducerConfig};
use crate::topic::{validate_topic_name, TopicConfig};
use crate::{Broker, ConsumerConfig};

/// The header a copied record carries: its offset in the source partition
/// (decimal ASCII).
pub const MIRROR_OFFSET_HEADER: &str = "mqlite.mirror.offset";

/// The header a copied record carries when partitions map by key: its
/// source partition (decimal ASCII).
pub const MIRROR_PARTITION_HEADER: &str = "mqlite.mirror.partition";

/// The header the last record of each write in a destination partition
/// carries when partitions map by key: for each source partition in
/// order, the offset below which every record had been copied when the
/// write began (decimal ASCII, separated by commas).
pub const MIRROR_PROGRESS_HEADER: &str = "mqlite.mirror.progress";

/// The header the last record of each write in a destination partition
/// carries, beside [`MIRROR_PROGRESS_HEADER`], when a copy cut short left
/// records in that partition above the write's starting point: for each
/// such source partition, `partition:offset`, the last of its offsets
/// there (separated by commas). A copy that resumes passes over those
/// records; every write it puts in the partition says so again until its
/// starting point passes them, so that later writes never hide them from
/// the next copy that resumes.
pub const MIRROR_COPIED_HEADER: &str = "mqlite.mirror.copied";

/// Whether `key` names a header a copy of a copy replaces with its own
/// (the offset headers of each copy stay, the last one the newest).
fn replaced_header(key: &str) -> bool {
    key == MIRROR_PARTITION_HEADER || key == MIRROR_PROGRESS_HEADER || key == MIRROR_COPIED_HEADER
}

/// The longest wait between two attempts of a continuous copy that fails.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How a copy runs.
#[derive(Debug, Clone)]
pub struct MirrorOptions {
    /// Stop once the destination has every record the source had when the
    /// copy started (and return the first error); otherwise copy until
    /// [`MirrorOptions::stop`] is set (or [`Mirror::stop`] called),
    /// starting again after errors that may pass (the cluster out of
    /// reach, a full disk, a topic not there yet), counted in
    /// [`MirrorStats::errors`].
    pub once: bool,
    /// Records per write to the destination (at most).
    pub max_batch: usize,
    /// How long a read of the source waits for records.
    pub poll_timeout: Duration,
    /// Set to end a continuous copy (checked between writes).
    pub stop: Arc<AtomicBool>,
}

impl Default for MirrorOptions {
    fn default() -> Self {
        MirrorOptions {
            once: true,
            max_batch: 500,
            poll_timeout: Duration::from_millis(200),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// What a copy did, and how far behind its destination is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Records written to the destination.
    pub copied: u64,
    /// Writes to the destination.
    pub batches: u64,
    /// Per source partition: `(partition, next source offset to copy,
    /// source end offset when last looked)`; the lag is their difference.
    pub partitions: Vec<(u32, u64, u64)>,
    /// Errors met (a continuous copy starts again after each).
    pub errors: u64,
    /// The last error met, in words.
    pub last_error: Option<String>,
    /// How long the copy has run.
    pub elapsed: Duration,
}

impl MirrorStats {
    /// Records of the source not copied yet (when last looked).
    pub fn lag(&self) -> u64 {
        self.partitions
            .iter()
            .map(|(_, next, end)| end.saturating_sub(*next))
            .sum()
    }

    /// Records copied per second, on average since the copy started.
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.copied as f64 / secs
        } else {
            0.0
        }
    }
}

/// A copy's stats as it runs.
#[derive(Debug, Default)]
struct Live {
    stats: Mutex<MirrorStats>,
    started: OnceLock<Instant>,
}

impl Live {
    fn with<T>(&self, f: impl FnOnce(&mut MirrorStats) -> T) -> T {
        f(&mut self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// A copy starts from `next`, the source's partitions ending at `ends`.
    fn begin(&self, next: &[u64], ends: &[u64]) {
        self.started.get_or_init(Instant::now);
        self.with(|s| {
            s.partitions = next
                .iter()
                .zip(ends)
                .enumerate()
                .map(|(p, (&n, &e))| (p as u32, n, e.max(n)))
                .collect();
        });
    }

    /// A write of `records` records ended (none: nothing was written
    /// there), each source partition now copied up to `next`.
    fn wrote(&self, records: u64, next: &[u64]) {
        self.with(|s| {
            if records > 0 {
                s.copied += records;
                s.batches += 1;
            }
            for (e, &n) in s.partitions.iter_mut().zip(next) {
                e.1 = n;
            }
        });
    }

    /// Source partition `p` ends at `end`.
    fn end(&self, p: u32, end: u64) {
        self.with(|s| {
            if let Some(e) = s.partitions.get_mut(p as usize) {
                e.2 = end.max(e.1);
            }
        });
    }

    fn failed(&self, e: &Error) {
        self.with(|s| {
            s.errors += 1;
            s.last_error = Some(e.to_string());
        });
    }

    fn snapshot(&self) -> MirrorStats {
        let mut s = self.with(|s| s.clone());
        s.elapsed = self.started.get().map_or(Duration::ZERO, Instant::elapsed);
        s
    }
}

/// Which way a copy goes.
enum Direction<'a> {
    ToCluster(&'a Broker, &'a KafkaBroker),
    FromCluster(&'a KafkaBroker, &'a Broker),
}

fn direction<'a>(source: &'a Broker, destination: &'a Broker) -> Result<Direction<'a>> {
    source.check_open()?;
    destination.check_open()?;
    match (source.cluster(), destination.cluster()) {
        (None, Some(k)) => Ok(Direction::ToCluster(source, k)),
        (Some(k), None) => Ok(Direction::FromCluster(k, destination)),
        _ => Err(Error::InvalidArgument(
            "a mirror copies between a data directory and a Kafka cluster: \
             one of source and destination must be each"
                .into(),
        )),
    }
}

/// Checks that a copy can go from `source` to `destination`: both open,
/// one a data directory and the other a Kafka cluster.
///
/// # Errors
/// [`Error::Closed`]; [`Error::InvalidArgument`] for two directories or
/// two clusters.
pub fn check_pair(source: &Broker, destination: &Broker) -> Result<()> {
    direction(source, destination).map(drop)
}

/// Whether a continuous copy starts again after `e` (it may pass).
fn passing(e: &Error) -> bool {
    matches!(
        e,
        Error::Io { .. }
            | Error::Timeout(_)
            | Error::DiskFull { .. }
            | Error::BufferFull { .. }
            | Error::UnknownTopic(_)
            | Error::UnknownPartition { .. }
            | Error::OffsetOutOfRange { .. }
    )
}

/// A copy of one topic between a data directory and a Kafka cluster,
/// which reports on itself while it runs (from another thread:
/// [`Mirror::stats`], [`Mirror::stop`]).
#[derive(Debug)]
pub struct Mirror {
    topic: String,
    options: MirrorOptions,
    live: Live,
    running: AtomicBool,
}

impl Mirror {
    /// A copy of `topic` that runs as `options` say.
    ///
    /// # Errors
    /// [`Error::InvalidTopicName`] for a name no topic can have;
    /// [`Error::InvalidArgument`] for a `max_batch` of 0.
    pub fn new(topic: &str, options: MirrorOptions) -> Result<Mirror> {
        validate_topic_name(topic)?;
        if options.max_batch == 0 {
            return Err(Error::InvalidArgument(
                "max_batch: a copy writes at least one record at a time".into(),
            ));
        }
        Ok(Mirror {
            topic: topic.to_owned(),
            options,
            live: Live::default(),
            running: AtomicBool::new(false),
        })
    }

    /// The topic it copies.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Copies from `source` to `destination` (one a data directory, the
    /// other a Kafka cluster), creating the destination topic with the
    /// source's partition count when it is missing. Returns when the copy
    /// is done (`once`), stopped, or failed for good.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when both are directories or both
    /// clusters, or when this mirror is running already;
    /// [`Error::Closed`] when either is closed; [`Error::UnknownTopic`]
    /// when the source has no such topic (a continuous copy waits for
    /// it); errors of either side (a copy `once` stops at the first; what
    /// it wrote stays, and the next copy resumes after it).
    pub fn run(&self, source: &Broker, destination: &Broker) -> Result<MirrorStats> {
        let way = direction(source, destination)?;
        if self.running.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidArgument(format!(
                "the mirror of {:?} is running already",
                self.topic
            )));
        }
        struct Running<'a>(&'a AtomicBool);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _running = Running(&self.running);
        let mut backoff = Duration::from_millis(100);
        loop {
            let before = self.live.snapshot().copied;
            let r = match way {
                Direction::ToCluster(dir, k) => {
                    run_to_cluster(dir, k, &self.topic, &self.options, &self.live)
                }
                Direction::FromCluster(k, dir) => {
                    run_from_cluster(k, dir, &self.topic, &self.options, &self.live)
                }
            };
            match r {
                Ok(()) => return Ok(self.stats()),
                Err(e) => {
                    self.live.failed(&e);
                    if self.options.once || !passing(&e) {
                        return Err(e);
                    }
                }
            }
            if self.live.snapshot().copied > before {
                backoff = Duration::from_millis(100);
            }
            let until = Instant::now() + backoff;
            while Instant::now() < until {
                if self.options.stop.load(Ordering::Acquire) {
                    return Ok(self.stats());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Ends a continuous copy (its [`Mirror::run`] returns after the
    /// write in progress); a stopped mirror stays stopped.
    pub fn stop(&self) {
        self.options.stop.store(true, Ordering::Release);
    }

    /// What the copy has done so far, and its lag when last looked.
    pub fn stats(&self) -> MirrorStats {
        self.live.snapshot()
    }
}

/// Copies `topic` from `source` to `destination` (one a data directory,
/// the other a Kafka cluster): [`Mirror::run`] of a new [`Mirror`].
///
/// # Errors
/// As [`Mirror::new`] and [`Mirror::run`].
pub fn mirror(
    source: &Broker,
    destination: &Broker,
    topic: &str,
    options: &MirrorOptions,
) -> Result<MirrorStats> {
    Mirror::new(topic, options.clone())?.run(source, destination)
}

/// How far `destination` is behind `source` on `topic`, read from what
/// earlier copies wrote, without copying: [`MirrorStats::partitions`]
/// and [`MirrorStats::lag`] (when partitions map by key, a write cut
/// short may count again until a copy runs).
///
/// # Errors
/// As [`Mirror::run`] (a destination without the topic is not one: it
/// lags by the whole source).
pub fn status(source: &Broker, destination: &Broker, topic: &str) -> Result<MirrorStats> {
    validate_topic_name(topic)?;
    let plan = match direction(source, destination)? {
        Direction::ToCluster(dir, k) => plan_to_cluster(dir, k, topic, false)?,
        Direction::FromCluster(k, dir) => {
            let probe = KafkaConsumer::reading_to_end(k, 1)?;
            plan_from_cluster(k, dir, topic, &probe, false)?
        }
    };
    let live = Live::default();
    live.begin(&plan.next, &plan.ends);
    let mut s = live.snapshot();
    s.elapsed = Duration::ZERO;
    Ok(s)
}

/// Partitions whose destination a copy asks about at once when it starts
/// (each question to a cluster is a round trip).
const PARALLEL: u32 = 16;

/// `f` of every partition `0..n`, [`PARALLEL`] at a time on threads of
/// their own, in partition order.
fn per_partition<T: Send>(n: u32, f: impl Fn(u32) -> Result<T> + Sync) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(n as usize);
    let mut from = 0;
    while from < n {
        let to = (from + PARALLEL).min(n);
        let f = &f;
        let results: Vec<Result<T>> = std::thread::scope(|s| {
            let handles: Vec<_> = (from..to).map(|p| s.spawn(move || f(p))).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::InvalidArgument("a mirror thread panicked".into()))
                    })
                })
                .collect()
        });
        for r in results {
            out.push(r?);
        }
        from = to;
    }
    Ok(out)
}

/// Where a copy of `topic` from `dir` to `cluster` starts (creating the
/// cluster's topic when missing and `create`).
fn plan_to_cluster(dir: &Broker, cluster: &KafkaBroker, topic: &str, create: bool) -> Result<Plan> {
    let info = dir.topic(topic)?;
    let n = info.partitions.len() as u32;
    let starts: Vec<u64> = info.partitions.iter().map(|p| p.start_offset).collect();
    let ends: Vec<u64> = info.partitions.iter().map(|p| p.end_offset).collect();
    let m = match cluster.partition_count(topic)? {
        Some(m) => m,
        None if create => {
            match cluster.create_topic(topic, TopicConfig::new(n)) {
                Ok(()) | Err(Error::TopicExists(_)) => {}
                Err(e) => return Err(e),
            }
            n
        }
        None => {
            return Ok(Plan {
                next: starts,
                ends,
                mapping: Mapping::OneToOne,
            })
        }
    };
    let probe = cluster.consumer(ConsumerConfig::default())?;
    let read = |d: u32| move |from: u64, _: u64| read_cluster(cluster, topic, d, from);
    let (next, mapping) = if m == n {
        let next = per_partition(n, |p| {
            let (low, high) = probe.watermarks(topic, p)?;
            let done = resume::one_to_one(p, low, high, &mut read(p))?;
            Ok(done.map_or(0, |o| o + 1))
        })?;
        (next, Mapping::OneToOne)
    } else {
        let tails = per_partition(m, |d| {
            let (low, high) = probe.watermarks(topic, d)?;
            ByKey::tail(low, high, &mut read(d))
        })?;
        let mut resume = ByKey::new(n);
        for (d, tail) in (0..m).zip(&tails) {
            resume.absorb(d, tail);
        }
        (
            resume.low.clone(),
            Mapping::ByKey {
                partitions: m,
                resume,
            },
        )
    };
    let next = next
        .iter()
        .zip(starts.iter().zip(&ends))
        .map(|(&o, (&s, &e))| o.clamp(s, e))
        .collect();
    Ok(Plan {
        next,
        ends,
        mapping,
    })
}

/// Where a copy of `topic` from `cluster` to `dir` starts (creating the
/// directory's topic when missing and `create`); `source` is the
/// consumer that will read the cluster (it answers for watermarks).
fn plan_from_cluster(
    cluster: &KafkaBroker,
    dir: &Broker,
    topic: &str,
    source: &KafkaConsumer,
    create: bool,
) -> Result<Plan> {
    let n = cluster
        .partition_count(topic)?
        .ok_or_else(|| Error::UnknownTopic(topic.to_owned()))?;
    let marks = per_partition(n, |p| source.watermarks(topic, p))?;
    let starts: Vec<u64> = marks.iter().map(|&(low, _)| low).collect();
    let ends: Vec<u64> = marks.iter().map(|&(low, high)| high.max(low)).collect();
    let info = match dir.topic(topic) {
        Ok(info) => info,
        Err(Error::UnknownTopic(_)) if create => {
            match dir.create_topic(topic, TopicConfig::new(n)) {
                Ok(()) | Err(Error::TopicExists(_)) => {}
                Err(e) => return Err(e),
            }
            dir.topic(topic)?
        }
        Err(Error::UnknownTopic(_)) => {
            return Ok(Plan {
                next: starts,
                ends,
                mapping: Mapping::OneToOne,
            })
        }
        Err(e) => return Err(e),
    };
    let m = info.partitions.len() as u32;
    let (next, mapping) = if m == n {
        let mut next = Vec::with_capacity(n as usize);
        for pi in &info.partitions {
            let d = pi.partition;
            let done = resume::one_to_one(d, pi.start_offset, pi.end_offset, &mut |from, end| {
                read_dir(dir, topic, d, from, end)
            })?;
            next.push(done.map_or(0, |o| o + 1));
        }
        (next, Mapping::OneToOne)
    } else {
        let mut resume = ByKey::new(n);
        for pi in &info.partitions {
            let d = pi.partition;
            resume.learn(d, pi.start_offset, pi.end_offset, &mut |from, end| {
                read_dir(dir, topic, d, from, end)
            })?;
        }
        (
            resume.low.clone(),
            Mapping::ByKey {
                partitions: m,
                resume,
            },
        )
    };
    // The cluster's end may be short of what is there (a broker that
    // answers with the start of its last batch): never clamp down to it.
    let next = next.iter().zip(&starts).map(|(&o, &s)| o.max(s)).collect();
    Ok(Plan {
        next,
        ends,
        mapping,
    })
}

/// One copy from `dir` to `cluster`, until done, stopped or failed.
fn run_to_cluster(
    dir: &Broker,
    cluster: &KafkaBroker,
    topic: &str,
    options: &MirrorOptions,
    live: &Live,
) -> Result<()> {
    let plan = plan_to_cluster(dir, cluster, topic, true)?;
    let n = plan.next.len() as u32;
    let producer = cluster.producer(ProducerConfig {
        acks: Acks::All,
        linger_ms: 1,
        ..ProducerConfig::default()
    })?;
    let mut consumer = dir.consumer(ConsumerConfig {
        max_poll_records: options.max_batch.max(1),
        ..ConsumerConfig::default()
    })?;
    let parts: Vec<(&str, u32)> = (0..n).map(|p| (topic, p)).collect();
    consumer.assign(&parts)?;
    for p in 0..n {
        consumer.seek(topic, p, plan.next[p as usize])?;
    }
    let mut source = DirSource {
        dir,
        topic,
        consumer,
        ends: plan.ends.clone(),
    };
    copy::copy(
        topic,
        &mut source,
        &mut |records| producer.send_batch(records).map(drop),
        plan,
        options,
        live,
    )?;
    producer.close()
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// One copy from `cluster` to `dir`, until done, stopped or failed.
fn run_from_cluster(
    cluster: &KafkaBroker,
    dir: &Broker,
    topic: &str,
    options: &MirrorOptions,
    live: &Live,
) -> Result<()> {
    let mut consumer = KafkaConsumer::reading_to_end(cluster, options.max_batch.max(1))?;
    let plan = plan_from_cluster(cluster, dir, topic, &consumer, true)?;
    let n = plan.next.len() as u32;
    let from: Vec<(&str, u32, Option<u64>)> = (0..n)
        .map(|p| (topic, p, Some(plan.next[p as usize])))
        .collect();
    consumer.assign_from(&from)?;
    let producer = dir.producer(ProducerConfig {
        acks: Acks::All,
        ..ProducerConfig::default()
    })?;
    let ends = Mutex::new(plan.ends.clone());
    let stop = AtomicBool::new(false);
    let mut source = ClusterSource {
        topic,
        consumer,
        ends: &ends,
    };
    std::thread::scope(|s| {
        s.spawn(|| copy::watch_ends(cluster, topic, &ends, &stop));
        // Stops the watch however the copy ends (a panic too: the scope
        // waits for the watch before it unwinds).
        let _stop = StopOnDrop(&stop);
        copy::copy(
            topic,
            &mut source,
            &mut |records| producer.send_batch(records).map(drop),
            plan,
            options,
            live,
        )
    })?;
    producer.close()
}

/// Copies `topic` of the data directory `dir` to the cluster, once or
/// until stopped, with no restart after errors: one attempt of
/// [`Mirror::run`].
///
/// # Errors
/// [`Error::UnknownTopic`] when the directory has no such topic; errors
/// of either side (the copy stops; what it wrote stays, and the next
/// copy resumes after it).
pub fn to_cluster(
    dir: &Broker,
    cluster: &KafkaBroker,
    topic: &str,
    options: &MirrorOptions,
) -> Result<MirrorStats> {
    let live = Live::default();
    run_to_cluster(dir, cluster, topic, options, &live)?;
    Ok(live.snapshot())
}

/// Copies `topic` of the cluster to the data directory `dir`, once or
/// until stopped, with no restart after errors: one attempt of
/// [`Mirror::run`].
///
/// # Errors
/// [`Error::UnknownTopic`] when the cluster has no such topic; errors of
/// either side (the copy stops; what it wrote stays, and the next copy
/// resumes after it).
pub fn from_cluster(
    cluster: &KafkaBroker,
    dir: &Broker,
    topic: &str,
    options: &MirrorOptions,
) -> Result<MirrorStats> {
    let live = Live::default();
    run_from_cluster(cluster, dir, topic, options, &live)?;
    Ok(live.snapshot())
}
