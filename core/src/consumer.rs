//! Consumers: assignment, subscription, positions and polling.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::broker::BrokerInner;
use crate::error::{Error, Result};
use crate::log::batch::{self, BatchHeader, Header};
use crate::log::compression::MAX_UNCOMPRESSED_LEN;
use crate::log::{Cursor, PartitionLog, Segment, Waiter};
use crate::topic::Topic;

/// Where to start when there is no valid position (Kafka's
/// `auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffsetReset {
    /// The first retained offset (default).
    #[default]
    Earliest,
    /// The end: only records written from now on.
    Latest,
    /// Fail with [`Error::OffsetOutOfRange`].
    Error,
}

impl std::str::FromStr for OffsetReset {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "earliest" | "smallest" | "beginning" => Ok(OffsetReset::Earliest),
            "latest" | "largest" | "end" => Ok(OffsetReset::Latest),
            "error" | "none" => Ok(OffsetReset::Error),
            _ => Err(Error::InvalidArgument(format!(
                "auto_offset_reset must be earliest, latest or error, got {s:?}"
            ))),
        }
    }
}

/// Settings of a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Consumer group; `None` for a standalone consumer.
    pub group_id: Option<String>,
    /// Where to start without a valid position.
    pub auto_offset_reset: OffsetReset,
    /// Most messages one `poll` returns (default 500, as Kafka).
    pub max_poll_records: usize,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            group_id: None,
            auto_offset_reset: OffsetReset::Earliest,
            max_poll_records: 500,
        }
    }
}

impl ConsumerConfig {
    /// A consumer in group `id`.
    pub fn group(id: impl Into<String>) -> Self {
        ConsumerConfig {
            group_id: Some(id.into()),
            ..ConsumerConfig::default()
        }
    }

    /// Sets `auto_offset_reset`.
    pub fn auto_offset_reset(mut self, reset: OffsetReset) -> Self {
        self.auto_offset_reset = reset;
        self
    }

    /// Sets `max_poll_records` (at least 1).
    pub fn max_poll_records(mut self, n: usize) -> Self {
        self.max_poll_records = n.max(1);
        self
    }
}

/// What a message's byte ranges point into.
#[derive(Clone)]
enum Backing {
    /// The segment's memory map (a record of an uncompressed batch).
    Segment(Arc<Segment>),
    /// The decompressed records section of a compressed batch, shared by
    /// every message of that batch. (An `Arc<Vec<u8>>` rather than an
    /// `Arc<[u8]>`: the decompressed `Vec` is shared as it is, not copied.)
    Buffer(Arc<Vec<u8>>),
}

impl Backing {
    #[inline]
    fn bytes(&self, start: u32, end: u32) -> &[u8] {
        match self {
            Backing::Segment(seg) => seg.bytes(start as usize, end as usize),
            Backing::Buffer(buf) => &buf[start as usize..end as usize],
        }
    }
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backing::Segment(seg) => f.debug_tuple("Segment").field(seg).finish(),
            Backing::Buffer(buf) => write!(f, "Buffer({} bytes)", buf.len()),
        }
    }
}

/// A decompressed batch kept by a partition reader that stopped in its
/// middle (`max_poll_records`), so the next poll does not decompress it again.
#[derive(Debug)]
struct Decoded {
    /// Base offset of the segment holding the batch.
    segment: u64,
    /// Position of the batch in that segment.
    pos: usize,
    /// The batch's CRC (one more check that it is the same batch).
    crc: u32,
    records: Arc<Vec<u8>>,
}

/// A consumed record. Key, value and headers are read in place from the
/// memory map (for a compressed batch: from the batch's records, decompressed
/// once and shared by its messages); the message keeps its segment (or that
/// buffer) alive while it exists, even if retention or topic deletion removes
/// the file meanwhile.
#[derive(Debug, Clone)]
pub struct Message {
    topic: Arc<str>,
    partition: u32,
    offset: u64,
    timestamp: i64,
    data: Backing,
    key: Option<(u32, u32)>,
    value: Option<(u32, u32)>,
    headers: (u32, u32),
    header_count: u32,
}

impl Message {
    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The offset.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The timestamp (ms since the epoch).
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The key, if any.
    #[inline]
    pub fn key(&self) -> Option<&[u8]> {
        self.key.map(|(s, e)| self.data.bytes(s, e))
    }

    /// The value, if any (`None` for a tombstone).
    #[inline]
    pub fn value(&self) -> Option<&[u8]> {
        self.value.map(|(s, e)| self.data.bytes(s, e))
    }

    /// Number of headers.
    pub fn header_count(&self) -> usize {
        self.header_count as usize
    }

    /// The headers, decoded, in order.
    pub fn headers(&self) -> Vec<Header> {
        if self.header_count == 0 {
            return Vec::new();
        }
        batch::decode_headers(
            self.data.bytes(self.headers.0, self.headers.1),
            self.header_count,
        )
    }
}

/// Why [`Consumer::take_records`] stopped.
enum Stop {
    /// The batch has no more records.
    End,
    /// `limit` messages were taken; the batch has more.
    Limit,
    /// A record is malformed, or the batch's records cannot be decompressed.
    Malformed(&'static str),
}

#[derive(Debug)]
struct Assigned {
    topic: Arc<Topic>,
    log: Arc<PartitionLog>,
    /// Next offset to deliver; `None` until first resolved.
    position: Option<u64>,
    cursor: Option<Cursor>,
    /// Base offset the batch at the cursor must have, once known (the base
    /// offset is outside the CRC; this is what catches damage to it).
    next_base: Option<u64>,
    /// The compressed batch at the cursor, decompressed, when the last fetch
    /// stopped in its middle.
    decoded: Option<Decoded>,
}

/// Reads records from assigned partitions or subscribed topics.
///
/// A consumer alone in its group gets every partition of the topics it
/// subscribes to; sharing partitions among several members comes with
/// consumer groups.
#[derive(Debug)]
pub struct Consumer {
    broker: Arc<BrokerInner>,
    config: ConsumerConfig,
    assigned: Vec<Assigned>,
    subscription: Vec<Arc<Topic>>,
    waiter: Option<Arc<Waiter>>,
    next_start: usize,
    closed: bool,
}

impl Consumer {
    pub(crate) fn new(broker: Arc<BrokerInner>, config: ConsumerConfig) -> Result<Consumer> {
        if config.max_poll_records == 0 {
            return Err(Error::InvalidArgument(
                "max_poll_records must be at least 1".into(),
            ));
        }
        Ok(Consumer {
            broker,
            config,
            assigned: Vec::new(),
            subscription: Vec::new(),
            waiter: None,
            next_start: 0,
            closed: false,
        })
    }

    fn check_open(&self) -> Result<()> {
        if self.closed {
            return Err(Error::Closed("consumer"));
        }
        self.broker.check_open()
    }

    /// This consumer's settings.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Reads exactly these partitions (replacing any assignment or
    /// subscription). Nothing changes if any partition is unknown.
    pub fn assign(&mut self, partitions: &[(&str, u32)]) -> Result<()> {
        self.check_open()?;
        // Resolve every partition before touching the current assignment.
        let mut wanted = Vec::with_capacity(partitions.len());
        for &(t, p) in partitions {
            let topic = self.broker.topic(t)?;
            let log = topic.partition(p)?;
            wanted.push((topic, log));
        }
        let mut next = Vec::with_capacity(wanted.len());
        for (topic, log) in wanted {
            if next.iter().any(|a: &Assigned| Arc::ptr_eq(&a.log, &log)) {
                continue;
            }
            next.push(self.keep_or_new(topic, log));
        }
        self.subscription.clear();
        self.assigned = next;
        Ok(())
    }

    fn keep_or_new(&mut self, topic: Arc<Topic>, log: Arc<PartitionLog>) -> Assigned {
        match self.assigned.iter().position(|a| Arc::ptr_eq(&a.log, &log)) {
            Some(i) => self.assigned.swap_remove(i),
            None => Assigned {
                topic,
                log,
                position: None,
                cursor: None,
                next_base: None,
                decoded: None,
            },
        }
    }

    /// Reads every partition of `topics`, including partitions added later.
    /// Nothing changes if any topic is unknown.
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        self.check_open()?;
        let mut subs = Vec::with_capacity(topics.len());
        for &t in topics {
            let topic = self.broker.topic(t)?;
            if !subs.iter().any(|s: &Arc<Topic>| Arc::ptr_eq(s, &topic)) {
                subs.push(topic);
            }
        }
        self.subscription = subs;
        self.refresh_subscription();
        Ok(())
    }

    /// Drops the subscription or manual assignment: the consumer reads
    /// nothing until the next `subscribe` or `assign`.
    pub fn unsubscribe(&mut self) {
        self.subscription.clear();
        self.assigned.clear();
    }

    /// Brings the assignment in line with the subscribed topics' partitions.
    fn refresh_subscription(&mut self) {
        if self.subscription.is_empty() {
            self.assigned.retain(|a| !a.topic.is_deleted());
            return;
        }
        self.subscription.retain(|t| !t.is_deleted());
        let want: usize = self.subscription.iter().map(|t| t.partitions().len()).sum();
        if want == self.assigned.len()
            && self
                .assigned
                .iter()
                .all(|a| self.subscription.iter().any(|t| Arc::ptr_eq(t, &a.topic)))
        {
            return;
        }
        let subs = self.subscription.clone();
        let mut next = Vec::with_capacity(want);
        for t in subs {
            for log in t.partitions().iter() {
                next.push(self.keep_or_new(Arc::clone(&t), Arc::clone(log)));
            }
        }
        self.assigned = next;
    }

    /// The partitions this consumer reads, as `(topic, partition)` pairs.
    pub fn assignment(&self) -> Vec<(String, u32)> {
        self.assigned
            .iter()
            .map(|a| (a.topic.name().to_string(), a.log.partition()))
            .collect()
    }

    fn find(&self, topic: &str, partition: u32) -> Result<usize> {
        self.assigned
            .iter()
            .position(|a| &**a.topic.name() == topic && a.log.partition() == partition)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "partition {topic}/{partition} is not assigned to this consumer"
                ))
            })
    }

    /// Sets the next offset to read from an assigned partition.
    ///
    /// # Errors
    /// [`Error::OffsetOutOfRange`] if `offset` is not between the first
    /// retained offset and the end (inclusive); `InvalidArgument` if the
    /// partition is not assigned.
    pub fn seek(&mut self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        self.check_open()?;
        self.refresh_subscription();
        let i = self.find(topic, partition)?;
        let a = &mut self.assigned[i];
        a.cursor = Some(a.log.cursor(offset)?);
        a.next_base = None;
        a.decoded = None;
        a.position = Some(offset);
        Ok(())
    }

    /// The next offset this consumer will read from a partition.
    pub fn position(&mut self, topic: &str, partition: u32) -> Result<u64> {
        self.check_open()?;
        self.refresh_subscription();
        let i = self.find(topic, partition)?;
        let reset = self.config.auto_offset_reset;
        Self::resolve(&mut self.assigned[i], reset)
    }

    /// Resolves a partition's position (applying `auto_offset_reset`) and
    /// makes sure it has a cursor.
    fn resolve(a: &mut Assigned, reset: OffsetReset) -> Result<u64> {
        if let (Some(p), Some(_)) = (a.position, &a.cursor) {
            return Ok(p);
        }
        let wanted = a.position;
        let target = match (wanted, reset) {
            (Some(p), _) if p >= a.log.start_offset() && p <= a.log.end_offset() => p,
            (_, OffsetReset::Earliest) => a.log.start_offset(),
            (_, OffsetReset::Latest) => a.log.end_offset(),
            (p, OffsetReset::Error) => {
                return Err(Error::OffsetOutOfRange {
                    topic: a.topic.name().to_string(),
                    partition: a.log.partition(),
                    offset: p.unwrap_or(0),
                    start: a.log.start_offset(),
                    end: a.log.end_offset(),
                })
            }
        };
        match a.log.cursor(target) {
            Ok(c) => {
                a.cursor = Some(c);
                a.next_base = None;
                a.position = Some(target);
                Ok(target)
            }
            // Retention moved the start between the check and the cursor.
            Err(Error::OffsetOutOfRange { .. }) if reset != OffsetReset::Error => {
                a.position = None;
                Self::resolve(a, reset)
            }
            Err(e) => Err(e),
        }
    }

    /// Appends up to `limit` messages of partition `a` to `out`.
    fn fetch(
        a: &mut Assigned,
        reset: OffsetReset,
        limit: usize,
        out: &mut Vec<Message>,
    ) -> Result<()> {
        let mut position = Self::resolve(a, reset)?;
        if position < a.log.start_offset() {
            // Retention deleted what we were about to read. Keep the
            // position: `resolve` resets it, or reports it out of range.
            a.cursor = None;
            position = Self::resolve(a, reset)?;
        }
        let log = Arc::clone(&a.log);
        let cursor = a.cursor.as_mut().expect("resolved");
        let mut taken = 0;
        let mut failed = None;
        let mut skipped = false;
        while taken < limit {
            let (at, h) = match log.next_batch(cursor) {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            // The base offset is outside the CRC: every batch must hold the
            // next offset to deliver, or it is damaged.
            let expected = a.next_base.is_none_or(|b| b == h.base_offset);
            if h.base_offset > position && position < log.start_offset() {
                // Retention deleted the segments between the one we finished
                // and this one while we read: not damage, a reset.
                cursor.pos = at;
                skipped = true;
                break;
            }
            if !expected || h.base_offset > position || h.last_offset() < position {
                cursor.pos = at;
                failed = Some(cursor.seg.corrupt(at, "batch base offset out of sequence"));
                break;
            }
            let bytes = cursor.seg.bytes(at, at + h.total_len());
            // Uncompressed batches are read in place; a compressed one is
            // decompressed once into a buffer its messages share.
            // `take_records` is monomorphized per backing, so the
            // uncompressed path does no per-record work for compression.
            let stop = if h.attributes & batch::CODEC_MASK == 0 {
                let seg = &cursor.seg;
                Self::take_records(
                    batch::Records::new(bytes, &h),
                    at,
                    || Backing::Segment(Arc::clone(seg)),
                    &h,
                    &log,
                    &mut position,
                    &mut taken,
                    limit,
                    out,
                )
            } else {
                match Self::decompress(a.decoded.take(), &cursor.seg, at, bytes, &h) {
                    Ok(buf) => {
                        let stop = Self::take_records(
                            batch::Records::over_section(&buf, h.record_count),
                            0,
                            || Backing::Buffer(Arc::clone(&buf)),
                            &h,
                            &log,
                            &mut position,
                            &mut taken,
                            limit,
                            out,
                        );
                        if let Stop::Limit = stop {
                            // The next fetch comes back to this batch.
                            a.decoded = Some(Decoded {
                                segment: cursor.seg.base(),
                                pos: at,
                                crc: h.crc,
                                records: buf,
                            });
                        }
                        stop
                    }
                    Err(reason) => Stop::Malformed(reason),
                }
            };
            match stop {
                Stop::End => {}
                Stop::Limit => {
                    cursor.pos = at; // come back to the rest of this batch
                    a.next_base = Some(h.base_offset);
                    break;
                }
                Stop::Malformed(reason) => {
                    cursor.pos = at;
                    a.next_base = Some(h.base_offset);
                    failed = Some(cursor.seg.corrupt(at, reason));
                    break;
                }
            }
            a.next_base = Some(h.next_offset());
        }
        a.position = Some(position);
        if skipped {
            a.cursor = None;
            a.next_base = None;
            if taken == 0 {
                return Self::fetch(a, reset, limit, out);
            }
        }
        match failed {
            // Deliver what was read first; the error comes back next poll.
            Some(e) if taken == 0 => Err(e),
            _ => Ok(()),
        }
    }

    /// Appends the records of one batch from `position` on to `out`, until
    /// `taken` reaches `limit`. `base` is the position of the records' byte
    /// ranges in `backing`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn take_records(
        records: batch::Records<'_>,
        base: usize,
        backing: impl Fn() -> Backing,
        h: &BatchHeader,
        log: &PartitionLog,
        position: &mut u64,
        taken: &mut usize,
        limit: usize,
        out: &mut Vec<Message>,
    ) -> Stop {
        for r in records {
            let r = match r {
                Ok(r) => r,
                Err(reason) => return Stop::Malformed(reason),
            };
            let offset = h.base_offset + r.offset_delta as u64;
            if offset < *position {
                continue;
            }
            if *taken == limit {
                return Stop::Limit;
            }
            let abs =
                |rg: std::ops::Range<usize>| ((base + rg.start) as u32, (base + rg.end) as u32);
            out.push(Message {
                topic: Arc::clone(log.topic()),
                partition: log.partition(),
                offset,
                timestamp: h.record_timestamp(r.timestamp_delta),
                data: backing(),
                key: r.key.map(abs),
                value: r.value.map(abs),
                headers: abs(r.headers),
                header_count: r.header_count,
            });
            *position = offset + 1;
            *taken += 1;
        }
        Stop::End
    }

    /// The records of the compressed batch at `at` of `seg` (`bytes`),
    /// decompressed, or taken from `cached` when that is the same batch.
    #[cold]
    fn decompress(
        cached: Option<Decoded>,
        seg: &Segment,
        at: usize,
        bytes: &[u8],
        h: &BatchHeader,
    ) -> std::result::Result<Arc<Vec<u8>>, &'static str> {
        if let Some(d) = cached {
            if d.segment == seg.base() && d.pos == at && d.crc == h.crc {
                return Ok(d.records);
            }
        }
        let section = batch::records_section(bytes, h, MAX_UNCOMPRESSED_LEN)?;
        Ok(Arc::new(section.into_owned()))
    }

    fn has_data(&self) -> bool {
        self.assigned
            .iter()
            .any(|a| a.position.is_none_or(|p| a.log.end_offset() > p))
    }

    /// Returns the next messages (at most `max_poll_records`), taken fairly
    /// across the assigned partitions. Waits up to `timeout` for data when
    /// there is none, woken by appends; an empty vector means the timeout
    /// passed.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<Message>> {
        self.check_open()?;
        self.refresh_subscription();
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            self.fetch_all(&mut out)?;
            if !out.is_empty() || Instant::now() >= deadline {
                return Ok(out);
            }
            self.wait(deadline)?;
            self.check_open()?;
        }
    }

    fn fetch_all(&mut self, out: &mut Vec<Message>) -> Result<()> {
        let n = self.assigned.len();
        if n == 0 {
            return Ok(());
        }
        let max = self.config.max_poll_records;
        let share = (max / n).max(1);
        let start = self.next_start % n;
        self.next_start = self.next_start.wrapping_add(1);
        let reset = self.config.auto_offset_reset;
        for k in 0..n {
            let left = max - out.len();
            if left == 0 {
                break;
            }
            let a = &mut self.assigned[(start + k) % n];
            if let Err(e) = Self::fetch(a, reset, share.min(left), out) {
                if out.is_empty() {
                    return Err(e);
                }
                break; // deliver what was read; the error comes back next poll
            }
        }
        Ok(())
    }

    /// Parks until an assigned partition gets data or the deadline passes.
    fn wait(&mut self, deadline: Instant) -> Result<()> {
        let waiter = match &self.waiter {
            Some(w) if w.is_current() => Arc::clone(w),
            _ => {
                let w = Waiter::current();
                self.waiter = Some(Arc::clone(&w));
                w
            }
        };
        waiter.reset();
        for a in &self.assigned {
            a.log.add_waiter(&waiter);
        }
        // Pairs with the fence in the append path (see `wake_waiters`).
        fence(Ordering::SeqCst);
        if !self.has_data() {
            waiter.wait_until(deadline);
        }
        for a in &self.assigned {
            a.log.remove_waiter(&waiter);
        }
        Ok(())
    }

    /// Whether the consumer, or the data directory it reads, was closed.
    pub fn is_closed(&self) -> bool {
        self.check_open().is_err()
    }

    /// Stops the consumer; later calls fail with [`Error::Closed`].
    pub fn close(&mut self) {
        self.closed = true;
        self.assigned.clear();
        self.subscription.clear();
    }
}
