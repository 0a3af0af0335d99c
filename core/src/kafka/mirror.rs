//! Copying a topic between a data directory and a Kafka cluster, either
//! way, once or continuously, with no record lost or written twice across
//! restarts of the copy.
//!
//! Partitions map one to one (the destination is created with the
//! source's partition count, or must already have it), so each record
//! keeps its partition and its order, with its key, value, headers and
//! timestamp. Each copied record carries one more header,
//! [`MIRROR_OFFSET_HEADER`]: the offset it had in the source. That header
//! is the copy's progress, written in the same append as the record: a
//! copy that starts reads the last record of each destination partition
//! that carries it and resumes after that offset. There is no separate
//! commit that a crash could separate from the write (a crash between a
//! write and its commit is what duplicates records in a copy that commits
//! its progress elsewhere). What it asks: nothing but copies of the same
//! source partition write to a destination partition with that header,
//! and a destination partition receives its records in order (one copy
//! at a time; each batch waits for the destination's acknowledgement
//! before the next is read).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{KafkaBroker, KafkaConsumer};
use crate::error::{Error, Result};
use crate::log::batch::Header;
use crate::message::Message;
use crate::producer::{Acks, BorrowedRecord, ProducerConfig};
use crate::topic::TopicConfig;
use crate::{Broker, ConsumerConfig};

/// The header a copied record carries: its offset in the source partition
/// (decimal ASCII).
pub const MIRROR_OFFSET_HEADER: &str = "mqlite.mirror.offset";

/// How a copy runs.
#[derive(Debug, Clone)]
pub struct MirrorOptions {
    /// Stop once the destination has every record the source had when the
    /// copy started; otherwise copy until [`MirrorOptions::stop`] is set.
    pub once: bool,
    /// Records per write to the destination (at most).
    pub max_batch: usize,
    /// How long a read of the source waits for records.
    pub poll_timeout: Duration,
    /// Set to end a continuous copy (checked between batches).
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

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Records written to the destination.
    pub copied: u64,
    /// Writes to the destination.
    pub batches: u64,
    /// Per partition: `(partition, next source offset to copy, source end
    /// offset when last looked)`; the lag is their difference.
    pub partitions: Vec<(u32, u64, u64)>,
}

impl MirrorStats {
    /// Records of the source not copied yet (when last looked).
    pub fn lag(&self) -> u64 {
        self.partitions
            .iter()
            .map(|(_, next, end)| end.saturating_sub(*next))
            .sum()
    }
}

/// The source offset a copied message carries, if it is a copy.
fn mirrored_offset(m: &Message) -> Option<u64> {
    m.headers()
        .into_iter()
        .rev()
        .find(|h| h.key == MIRROR_OFFSET_HEADER)
        .and_then(|h| std::str::from_utf8(&h.value).ok()?.parse().ok())
}

/// The last source offset found in a destination partition whose offsets
/// run from `start` to about `end`, read by `read(from, end)` (the
/// messages from `from` on, to `end` or further): the tail first, then a
/// window four times wider, until found or `start` is reached.
fn last_copied(
    start: u64,
    end: u64,
    mut read: impl FnMut(u64, u64) -> Result<Vec<Message>>,
) -> Result<Option<u64>> {
    let mut width = 16u64;
    let mut upto = end;
    while upto > start {
        let from = upto.saturating_sub(width).max(start);
        // Messages past `upto` were read by an earlier, narrower window
        // and carried no copy's header.
        let found = read(from, upto)?.iter().filter_map(mirrored_offset).max();
        if found.is_some() {
            return Ok(found);
        }
        upto = from;
        width = width.saturating_mul(4);
    }
    Ok(None)
}

/// The messages of `topic`/`partition` of a directory from `from` up to
/// `end`.
fn read_dir(
    dir: &Broker,
    topic: &str,
    partition: u32,
    from: u64,
    end: u64,
) -> Result<Vec<Message>> {
    let mut c = dir.consumer(ConsumerConfig::default())?;
    c.assign(&[(topic, partition)])?;
    c.seek(topic, partition, from)?;
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.position(topic, partition)? < end {
        out.extend(c.poll(Duration::from_millis(100))?);
        if Instant::now() > deadline {
            return Err(Error::Timeout(30_000));
        }
    }
    Ok(out)
}

/// The messages of `topic`/`partition` of a cluster from `from` to its
/// end (as its fetch answers say: see [`KafkaConsumer::reading_to_end`]).
fn read_cluster(
    cluster: &KafkaBroker,
    topic: &str,
    partition: u32,
    from: u64,
) -> Result<Vec<Message>> {
    let mut c = KafkaConsumer::reading_to_end(cluster, 500)?;
    c.assign_from(&[(topic, partition, Some(from))])?;
    let mut out = Vec::new();
    let deadline = Instant::now() + cluster.request_timeout();
    while !c.at_end(partition) {
        out.extend(c.poll(Duration::from_millis(100))?);
        if Instant::now() > deadline {
            return Err(Error::Timeout(cluster.request_timeout().as_millis() as u64));
        }
    }
    Ok(out)
}

/// `m` with its source offset added to its headers.
fn copied_headers(m: &Message) -> Vec<Header> {
    let mut h = m.headers();
    h.push(Header::new(MIRROR_OFFSET_HEADER, m.offset().to_string()));
    h
}

/// Splits `msgs` (one poll, in order per partition) into runs of one
/// partition, at most `max` long, keeping each partition's order.
fn runs(msgs: &[Message], max: usize) -> Vec<&[Message]> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < msgs.len() {
        let p = msgs[i].partition();
        let mut j = i + 1;
        while j < msgs.len() && msgs[j].partition() == p && j - i < max {
            j += 1;
        }
        out.push(&msgs[i..j]);
        i = j;
    }
    out
}

fn check_counts(topic: &str, source: u32, dest: u32) -> Result<()> {
    if source == dest {
        return Ok(());
    }
    Err(Error::InvalidConfig(format!(
        "topic {topic:?} has {source} partitions in the source and {dest} in the destination: \
         a copy maps partitions one to one"
    )))
}

/// What the copy loop reads from.
trait Source {
    /// The next messages, in order per partition.
    fn poll(&mut self, timeout: Duration) -> Result<Vec<Message>>;
    /// The next offset this source will read from partition `p`.
    fn position(&mut self, p: u32) -> Result<u64>;
    /// The partition's end offset now (as far as the source can tell).
    fn end(&mut self, p: u32) -> Result<u64>;
    /// Whether a copy `once` is done with partition `p`.
    fn done(&mut self, p: u32) -> Result<bool>;
}

struct DirSource<'a> {
    dir: &'a Broker,
    topic: &'a str,
    consumer: crate::Consumer,
    /// Each partition's end when the copy started.
    ends: Vec<u64>,
}

impl Source for DirSource<'_> {
    fn poll(&mut self, timeout: Duration) -> Result<Vec<Message>> {
        self.consumer.poll(timeout)
    }
    fn position(&mut self, p: u32) -> Result<u64> {
        self.consumer.position(self.topic, p)
    }
    fn end(&mut self, p: u32) -> Result<u64> {
        let info = self.dir.topic(self.topic)?;
        Ok(info
            .partitions
            .get(p as usize)
            .map_or(0, |pi| pi.end_offset))
    }
    fn done(&mut self, p: u32) -> Result<bool> {
        Ok(self.consumer.position(self.topic, p)? >= self.ends[p as usize])
    }
}

struct ClusterSource<'a> {
    topic: &'a str,
    consumer: KafkaConsumer,
}

impl Source for ClusterSource<'_> {
    fn poll(&mut self, timeout: Duration) -> Result<Vec<Message>> {
        self.consumer.poll(timeout)
    }
    fn position(&mut self, p: u32) -> Result<u64> {
        self.consumer.position(self.topic, p)
    }
    fn end(&mut self, p: u32) -> Result<u64> {
        Ok(self.consumer.watermarks(self.topic, p)?.1)
    }
    fn done(&mut self, p: u32) -> Result<bool> {
        Ok(self.consumer.at_end(p))
    }
}

/// Copies from `source` to `send` (a write to the destination that
/// returns once acknowledged) until `options` says to stop; `next` starts
/// as each partition's next offset to copy.
fn copy(
    topic: &str,
    source: &mut dyn Source,
    send: &mut dyn FnMut(&[BorrowedRecord<'_>]) -> Result<()>,
    mut next: Vec<u64>,
    options: &MirrorOptions,
) -> Result<MirrorStats> {
    let mut stats = MirrorStats::default();
    let n = next.len() as u32;
    loop {
        if options.stop.load(Ordering::Acquire) {
            break;
        }
        let msgs = source.poll(options.poll_timeout)?;
        for run in runs(&msgs, options.max_batch.max(1)) {
            let headers: Vec<Vec<Header>> = run.iter().map(copied_headers).collect();
            let records: Vec<BorrowedRecord<'_>> = run
                .iter()
                .zip(&headers)
                .map(|(m, h)| BorrowedRecord {
                    topic,
                    partition: Some(m.partition()),
                    key: m.key(),
                    value: m.value(),
                    headers: h,
                    timestamp: Some(m.timestamp()),
                    sequence: None,
                })
                .collect();
            send(&records)?;
            stats.copied += run.len() as u64;
            stats.batches += 1;
            let last = &run[run.len() - 1];
            next[last.partition() as usize] = last.offset() + 1;
        }
        if msgs.is_empty() && options.once {
            let mut done = true;
            for p in 0..n {
                done &= source.done(p)?;
            }
            if done {
                break;
            }
        }
    }
    stats.partitions = Vec::with_capacity(n as usize);
    for p in 0..n {
        // Offsets without records (transaction markers) move the position
        // past the last copied record.
        let at = next[p as usize].max(source.position(p)?);
        stats.partitions.push((p, at, source.end(p)?.max(at)));
    }
    Ok(stats)
}

/// Copies `topic` of the data directory `dir` to the cluster (creating
/// it there with the same partition count when missing).
///
/// # Errors
/// [`Error::UnknownTopic`] when the directory has no such topic;
/// [`Error::InvalidConfig`] when the cluster's topic has another
/// partition count; errors of either side (the copy stops; what it wrote
/// stays, and the next copy resumes after it).
pub fn to_cluster(
    dir: &Broker,
    cluster: &KafkaBroker,
    topic: &str,
    options: &MirrorOptions,
) -> Result<MirrorStats> {
    let info = dir.topic(topic)?;
    let n = info.partitions.len() as u32;
    match cluster.partition_count(topic)? {
        None => match cluster.create_topic(topic, TopicConfig::new(n)) {
            Ok(()) | Err(Error::TopicExists(_)) => {}
            Err(e) => return Err(e),
        },
        Some(m) => check_counts(topic, n, m)?,
    }
    let mut next = Vec::with_capacity(n as usize);
    let mut ends = Vec::with_capacity(n as usize);
    let probe = cluster.consumer(ConsumerConfig::default())?;
    for pi in &info.partitions {
        let (low, high) = probe.watermarks(topic, pi.partition)?;
        let done = last_copied(low, high, |from, _| {
            read_cluster(cluster, topic, pi.partition, from)
        })?;
        let from = done.map_or(pi.start_offset, |o| o + 1);
        next.push(from.clamp(pi.start_offset, pi.end_offset));
        ends.push(pi.end_offset);
    }
    drop(probe);
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
        consumer.seek(topic, p, next[p as usize])?;
    }
    let mut source = DirSource {
        dir,
        topic,
        consumer,
        ends,
    };
    let stats = copy(
        topic,
        &mut source,
        &mut |records| producer.send_batch(records).map(drop),
        next,
        options,
    )?;
    producer.close()?;
    Ok(stats)
}

/// Copies `topic` of the cluster to the data directory `dir` (creating it
/// there with the same partition count when missing).
///
/// # Errors
/// [`Error::UnknownTopic`] when the cluster has no such topic;
/// [`Error::InvalidConfig`] when the directory's topic has another
/// partition count; errors of either side (the copy stops; what it wrote
/// stays, and the next copy resumes after it).
pub fn from_cluster(
    cluster: &KafkaBroker,
    dir: &Broker,
    topic: &str,
    options: &MirrorOptions,
) -> Result<MirrorStats> {
    let n = cluster
        .partition_count(topic)?
        .ok_or_else(|| Error::UnknownTopic(topic.to_owned()))?;
    let info = match dir.topic(topic) {
        Ok(info) => info,
        Err(Error::UnknownTopic(_)) => {
            match dir.create_topic(topic, TopicConfig::new(n)) {
                Ok(()) | Err(Error::TopicExists(_)) => {}
                Err(e) => return Err(e),
            }
            dir.topic(topic)?
        }
        Err(e) => return Err(e),
    };
    check_counts(topic, n, info.partitions.len() as u32)?;
    let mut consumer = KafkaConsumer::reading_to_end(cluster, options.max_batch.max(1))?;
    let mut next = Vec::with_capacity(n as usize);
    for pi in &info.partitions {
        let done = last_copied(pi.start_offset, pi.end_offset, |from, end| {
            read_dir(dir, topic, pi.partition, from, end)
        })?;
        let (low, _) = consumer.watermarks(topic, pi.partition)?;
        next.push(done.map_or(low, |o| (o + 1).max(low)));
    }
    let from: Vec<(&str, u32, Option<u64>)> =
        (0..n).map(|p| (topic, p, Some(next[p as usize]))).collect();
    consumer.assign_from(&from)?;
    let producer = dir.producer(ProducerConfig {
        acks: Acks::All,
        ..ProducerConfig::default()
    })?;
    let mut source = ClusterSource { topic, consumer };
    let stats = copy(
        topic,
        &mut source,
        &mut |records| producer.send_batch(records).map(drop),
        next,
        options,
    )?;
    producer.close()?;
    Ok(stats)
}
