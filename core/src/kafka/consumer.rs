//! [`KafkaConsumer`]: a [`ConsumerConfig`]'s consumer on a Kafka cluster.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _, ConsumerContext};
use rdkafka::message::Message as _;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::ClientContext;

use super::error::{from_code, from_kafka};
use super::producer::headers_of;
use super::KafkaBroker;
use crate::assign::AssignmentStrategy;
use crate::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use crate::error::{Error, Result};
use crate::message::{Message, MessageBatch};
use crate::offsets::CommittedOffset;

/// A change of a group member's partitions, as the group coordinator
/// decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RebalanceEvent {
    /// These partitions are given to this member.
    Assign(Vec<(String, u32)>),
    /// These partitions are taken from this member (it may commit them
    /// before they go).
    Revoke(Vec<(String, u32)>),
    /// These partitions were taken without this member being asked (its
    /// session ran out): another member may own them already.
    Lost(Vec<(String, u32)>),
}

/// librdkafka's rebalance callback: by default it assigns and revokes at
/// once; while a listener waits for the changes (`deferred`), it records
/// them instead and the partitions stay as they are until
/// [`KafkaConsumer::complete_rebalance`] (librdkafka waits for that call).
#[derive(Default)]
pub(crate) struct Rebalances {
    deferred: std::sync::atomic::AtomicBool,
    pending: std::sync::Mutex<std::collections::VecDeque<(RebalanceEvent, TopicPartitionList)>>,
}

impl ClientContext for Rebalances {}

fn pairs(tpl: &TopicPartitionList) -> Vec<(String, u32)> {
    let mut v: Vec<(String, u32)> = tpl
        .elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition() as u32))
        .collect();
    v.sort();
    v
}

impl ConsumerContext for Rebalances {
    fn rebalance(
        &self,
        base: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let event = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                RebalanceEvent::Assign(pairs(tpl))
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS if base.assignment_lost() => {
                RebalanceEvent::Lost(pairs(tpl))
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                RebalanceEvent::Revoke(pairs(tpl))
            }
            other => {
                ::log::warn!("rebalance error from the cluster: {other:?}");
                // librdkafka asks to drop the assignment on an error.
                let _ = base.unassign();
                return;
            }
        };
        if self.deferred.load(std::sync::atomic::Ordering::Acquire) {
            crate::sync::lock(&self.pending).push_back((event, tpl.clone()));
        } else {
            apply(base, &event, tpl);
        }
    }
}

/// Makes `event` effective: librdkafka assigns or drops the partitions.
fn apply(base: &BaseConsumer<Rebalances>, event: &RebalanceEvent, tpl: &TopicPartitionList) {
    let r = match event {
        RebalanceEvent::Assign(_) => base.assign(tpl),
        RebalanceEvent::Revoke(_) | RebalanceEvent::Lost(_) => base.unassign(),
    };
    if let Err(e) = r {
        ::log::warn!("applying a rebalance: {e}");
    }
}

/// Reads the topics of a Kafka cluster, with the calls of
/// [`crate::Consumer`].
///
/// How its [`ConsumerConfig`] maps onto librdkafka:
/// - `group_id`: `group.id`; a consumer without a group can only
///   [`assign`](KafkaConsumer::assign) and has nothing to commit to.
/// - `auto_offset_reset`, `enable_auto_commit`, `auto_commit_interval_ms`,
///   `enable_auto_offset_store`, `max_poll_interval_ms`, `client_id`,
///   `isolation_level`: the Kafka settings of the same names.
/// - `assignment_strategy`: `Averagely` is Kafka's `range`,
///   `RoundRobin` its `roundrobin`; the others have no Kafka
///   assignor and are refused ([`Error::InvalidConfig`]), as are
///   `broadcast` and `wanted_partitions`.
/// - `max_poll_records`: the most messages one
///   [`poll`](KafkaConsumer::poll) returns.
/// - `commit_acks`: on a cluster a commit is acknowledged once the group
///   coordinator stored it (replicated like `acks=all`).
pub struct KafkaConsumer {
    inner: BaseConsumer<Rebalances>,
    config: ConsumerConfig,
    timeout: Duration,
    /// Topic names as the messages share them.
    names: HashMap<String, Arc<str>>,
    closed: bool,
    /// Partitions read to their end since their last message (only with
    /// `enable.partition.eof`, see [`KafkaConsumer::reading_to_end`]).
    at_end: std::collections::HashSet<u32>,
    /// Messages polled for [`KafkaConsumer::poll_one`] and not handed out.
    held: std::collections::VecDeque<Message>,
    /// Partitions paused by [`KafkaConsumer::pause`].
    paused: Vec<(String, u32)>,
    stats: crate::ConsumerStats,
}

impl std::fmt::Debug for KafkaConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConsumer")
            .field("config", &self.config)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

/// Kafka's name of the assignor doing what `s` does.
fn assignor(s: AssignmentStrategy) -> Result<&'static str> {
    match s {
        AssignmentStrategy::Averagely => Ok("range"),
        AssignmentStrategy::RoundRobin => Ok("roundrobin"),
        other => Err(Error::InvalidConfig(format!(
            "assignment strategy {other:?} has no Kafka assignor (use Averagely or RoundRobin)"
        ))),
    }
}

impl KafkaConsumer {
    pub(super) fn new(broker: &KafkaBroker, config: ConsumerConfig) -> Result<KafkaConsumer> {
        Self::with_properties(broker, config, &[])
    }

    fn with_properties(
        broker: &KafkaBroker,
        config: ConsumerConfig,
        extra: &[(&'static str, &str)],
    ) -> Result<KafkaConsumer> {
        config.validate()?;
        if config.broadcast {
            return Err(Error::InvalidConfig(
                "broadcast consumers are not available on a Kafka cluster".to_owned(),
            ));
        }
        if !config.wanted_partitions.is_empty() {
            return Err(Error::InvalidConfig(
                "wanted_partitions is not available on a Kafka cluster".to_owned(),
            ));
        }
        let reset = match config.auto_offset_reset {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
            OffsetReset::Error => "error",
        };
        let isolation = match config.isolation_level {
            IsolationLevel::ReadCommitted => "read_committed",
            IsolationLevel::ReadUncommitted => "read_uncommitted",
        };
        // librdkafka wants a group id even to assign; a consumer without a
        // group gets a private one it never commits to.
        let (group, grouped) = match &config.group_id {
            Some(g) => (g.clone(), true),
            None => (
                format!("mqlite-ungrouped-{}-{}", std::process::id(), unique()),
                false,
            ),
        };
        let mut props: Vec<(&str, String)> = vec![
            ("group.id", group),
            ("auto.offset.reset", reset.to_owned()),
            (
                "enable.auto.commit",
                (grouped && config.enable_auto_commit).to_string(),
            ),
            (
                "auto.commit.interval.ms",
                config.auto_commit_interval_ms.to_string(),
            ),
            // Offsets are stored as messages are handed out (see
            // `handed`), not as librdkafka hands them to this consumer:
            // a commit covers what the application received.
            ("enable.auto.offset.store", "false".to_owned()),
            (
                "max.poll.interval.ms",
                config.max_poll_interval_ms.to_string(),
            ),
            ("isolation.level", isolation.to_owned()),
            (
                "partition.assignment.strategy",
                assignor(config.assignment_strategy)?.to_owned(),
            ),
        ];
        if !config.client_id.is_empty() {
            props.push(("client.id", config.client_id.clone()));
        }
        for (k, v) in extra {
            props.push((k, (*v).to_owned()));
        }
        let inner = broker
            .client_config(&props)
            .create_with_context(Rebalances::default())
            .map_err(|e| from_kafka(e, "making a consumer"))?;
        Ok(KafkaConsumer {
            inner,
            config,
            timeout: broker.request_timeout(),
            names: HashMap::new(),
            closed: false,
            at_end: std::collections::HashSet::new(),
            held: std::collections::VecDeque::new(),
            paused: Vec::new(),
            stats: crate::ConsumerStats::default(),
        })
    }

    /// A consumer without a group that notes when it has read a partition
    /// to its end ([`KafkaConsumer::at_end`]), for reads of one topic: the
    /// cluster says so in its fetch answers, which stays right where a
    /// cluster's `ListOffsets` answer lags (tansu 0.6 answers the base
    /// offset of the last batch).
    pub(crate) fn reading_to_end(
        broker: &KafkaBroker,
        max_poll_records: usize,
    ) -> Result<KafkaConsumer> {
        let config = ConsumerConfig {
            max_poll_records,
            ..ConsumerConfig::default()
        };
        Self::with_properties(broker, config, &[("enable.partition.eof", "true")])
    }

    /// Records group changes for the caller to apply
    /// ([`KafkaConsumer::take_rebalance`], then
    /// [`KafkaConsumer::complete_rebalance`]) instead of applying them at
    /// once: for a rebalance listener, told of a revocation while the
    /// partitions are still this member's.
    pub(crate) fn defer_rebalances(&self, on: bool) {
        self.inner
            .context()
            .deferred
            .store(on, std::sync::atomic::Ordering::Release);
    }

    /// The next group change recorded and not applied yet.
    pub(crate) fn take_rebalance(&mut self) -> Option<(RebalanceEvent, TopicPartitionList)> {
        crate::sync::lock(&self.inner.context().pending).pop_front()
    }

    /// Applies a group change taken with [`KafkaConsumer::take_rebalance`];
    /// messages held of partitions that go are dropped.
    pub(crate) fn complete_rebalance(&mut self, event: &RebalanceEvent, tpl: &TopicPartitionList) {
        if let RebalanceEvent::Revoke(gone) | RebalanceEvent::Lost(gone) = event {
            self.held.retain(|m| {
                !gone
                    .iter()
                    .any(|(t, p)| m.topic() == t && m.partition() == *p)
            });
            self.paused.retain(|tp| !gone.contains(tp));
        }
        apply(&self.inner, event, tpl);
    }

    /// Whether a group change waits to be taken.
    pub(crate) fn rebalance_pending(&self) -> bool {
        !crate::sync::lock(&self.inner.context().pending).is_empty()
    }

    /// Whether the consumer read `partition` to its end since the last
    /// message it polled from it.
    pub(crate) fn at_end(&self, partition: u32) -> bool {
        self.at_end.contains(&partition)
    }

    /// The consumer's configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    fn check_open(&self) -> Result<()> {
        if self.closed {
            Err(Error::Closed("consumer"))
        } else {
            Ok(())
        }
    }

    fn check_grouped(&self, what: &str) -> Result<()> {
        if self.config.group_id.is_none() {
            return Err(Error::InvalidArgument(format!(
                "{what} needs a consumer group (ConsumerConfig::group)"
            )));
        }
        Ok(())
    }

    /// Joins the group's consumption of `topics`: the group coordinator
    /// assigns their partitions among the members.
    ///
    /// # Errors
    /// [`Error::InvalidTopicName`]; [`Error::InvalidArgument`] without a
    /// group.
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        self.check_open()?;
        self.check_grouped("subscribe")?;
        for t in topics {
            crate::topic::validate_topic_name(t)?;
        }
        self.inner
            .subscribe(topics)
            .map_err(|e| from_kafka(e, "subscribing"))
    }

    /// Leaves the subscription (and the partitions it gave).
    pub fn unsubscribe(&mut self) {
        self.inner.unsubscribe();
    }

    /// Reads exactly `partitions` (topic, partition), from the committed
    /// offset or as `auto_offset_reset` says.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`].
    pub fn assign(&mut self, partitions: &[(&str, u32)]) -> Result<()> {
        self.check_open()?;
        let mut tpl = TopicPartitionList::new();
        for (t, p) in partitions {
            crate::topic::validate_topic_name(t)?;
            let count = self.partition_count(t)?;
            if *p >= count {
                return Err(Error::UnknownPartition {
                    topic: (*t).to_owned(),
                    partition: *p,
                    count,
                });
            }
            tpl.add_partition(t, *p as i32);
        }
        self.inner
            .assign(&tpl)
            .map_err(|e| from_kafka(e, "assigning partitions"))
    }

    /// Reads exactly `partitions`, each from its given offset (`None`: the
    /// partition's first).
    ///
    /// # Errors
    /// As [`KafkaConsumer::assign`].
    pub(crate) fn assign_from(&mut self, partitions: &[(&str, u32, Option<u64>)]) -> Result<()> {
        self.check_open()?;
        let mut tpl = TopicPartitionList::new();
        for (t, p, from) in partitions {
            let at = match from {
                Some(o) => Offset::Offset(
                    i64::try_from(*o)
                        .map_err(|_| Error::InvalidArgument(format!("offset {o} out of range")))?,
                ),
                None => Offset::Beginning,
            };
            tpl.add_partition_offset(t, *p as i32, at)
                .map_err(|e| from_kafka(e, "assigning partitions"))?;
        }
        self.inner
            .assign(&tpl)
            .map_err(|e| from_kafka(e, "assigning partitions"))
    }

    /// The first and next offsets of a partition on the cluster.
    ///
    /// # Errors
    /// The cluster's errors.
    pub(crate) fn watermarks(&self, topic: &str, partition: u32) -> Result<(u64, u64)> {
        let (low, high) = self
            .inner
            .fetch_watermarks(topic, partition as i32, self.timeout)
            .map_err(|e| from_kafka(e, &format!("reading offsets of {topic}/{partition}")))?;
        Ok((low.max(0) as u64, high.max(0) as u64))
    }

    fn partition_count(&self, topic: &str) -> Result<u32> {
        super::partition_count(&self.inner, topic, self.timeout)?
            .ok_or_else(|| Error::UnknownTopic(topic.to_owned()))
    }

    /// The partitions this consumer reads, sorted.
    pub fn assignment(&self) -> Vec<(String, u32)> {
        let mut v: Vec<(String, u32)> = self
            .inner
            .assignment()
            .map(|tpl| {
                tpl.elements()
                    .iter()
                    .map(|e| (e.topic().to_owned(), e.partition() as u32))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Up to `max_poll_records` messages, waiting up to `timeout` for the
    /// first.
    ///
    /// # Errors
    /// [`Error::OffsetOutOfRange`] with `auto_offset_reset=Error`; the
    /// cluster's errors.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<Message>> {
        self.check_open()?;
        self.stats.polls += 1;
        let out: Vec<Message> = if self.held.is_empty() {
            self.fetch(timeout)?
        } else {
            self.held.drain(..).collect()
        };
        self.handed(&out);
        Ok(out)
    }

    /// Stores the offsets after `messages` (being handed to the
    /// application) for the next commit, with `enable_auto_offset_store`.
    fn handed(&mut self, messages: &[Message]) {
        if !self.config.enable_auto_offset_store {
            return;
        }
        // The last of each partition's messages is enough: walked from the
        // end, the first seen of each partition.
        let mut stored: Vec<(&str, u32)> = Vec::new();
        for m in messages.iter().rev() {
            let key = (m.topic(), m.partition());
            if stored.contains(&key) {
                continue;
            }
            stored.push(key);
            // librdkafka stores the offset after the one given.
            let Ok(at) = i64::try_from(m.offset()) else {
                continue;
            };
            if let Err(e) = self.inner.store_offset(m.topic(), m.partition() as i32, at) {
                ::log::warn!("storing the offset of {}: {e}", m.id());
            }
        }
    }

    /// Up to `max_poll_records` messages from librdkafka, waiting up to
    /// `timeout` for the first.
    fn fetch(&mut self, timeout: Duration) -> Result<Vec<Message>> {
        let mut out = Vec::new();
        let deadline = Instant::now() + timeout;
        let max = self.config.max_poll_records.max(1);
        while out.len() < max && !self.rebalance_pending() {
            // In slices: a group change recorded meanwhile ends the poll.
            let wait = if out.is_empty() {
                deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100))
            } else {
                Duration::ZERO
            };
            let Some(got) = self.inner.poll(wait) else {
                if out.is_empty() && Instant::now() < deadline && !self.rebalance_pending() {
                    continue;
                }
                break;
            };
            let m = match got {
                Ok(m) => m,
                Err(rdkafka::error::KafkaError::PartitionEOF(p)) => {
                    self.at_end.insert(p as u32);
                    if out.is_empty() && Instant::now() < deadline {
                        continue;
                    }
                    break;
                }
                Err(e) => {
                    if out.is_empty() {
                        return Err(match e.rdkafka_error_code() {
                            Some(code) => from_code(code, "", "polling the cluster"),
                            None => from_kafka(e, "polling the cluster"),
                        });
                    }
                    break;
                }
            };
            self.at_end.remove(&(m.partition() as u32));
            let topic = if let Some(t) = self.names.get(m.topic()) {
                Arc::clone(t)
            } else {
                let t: Arc<str> = Arc::from(m.topic());
                self.names.insert(m.topic().to_owned(), Arc::clone(&t));
                t
            };
            self.stats.records += 1;
            self.stats.bytes +=
                (m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len)) as u64;
            out.push(Message::from_fields(
                &topic,
                m.partition() as u32,
                m.offset() as u64,
                m.timestamp().to_millis().unwrap_or(-1),
                m.key(),
                m.payload(),
                &headers_of(m.headers()),
            ));
        }
        Ok(out)
    }

    /// One message, waiting up to `timeout`: the messages of a poll are
    /// handed out one by one.
    ///
    /// # Errors
    /// As [`KafkaConsumer::poll`].
    pub fn poll_one(&mut self, timeout: Duration) -> Result<Option<Message>> {
        self.check_open()?;
        if self.held.is_empty() {
            self.stats.polls += 1;
            let got = self.fetch(timeout)?;
            self.held.extend(got);
        }
        Ok(self.next_held())
    }

    /// A message [`KafkaConsumer::poll_one`] holds already, if any.
    pub fn next_held(&mut self) -> Option<Message> {
        let m = self.held.pop_front()?;
        self.handed(std::slice::from_ref(&m));
        Some(m)
    }

    /// Subscribes to every topic whose whole name matches the regular
    /// expression `pattern` (librdkafka's regex subscription).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid expression or without a
    /// group.
    pub fn subscribe_pattern(&mut self, pattern: &str) -> Result<()> {
        self.check_open()?;
        self.check_grouped("subscribe")?;
        regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
            Error::InvalidArgument(format!("invalid topic pattern {pattern:?}: {e}"))
        })?;
        let re = format!("^(?:{pattern})$");
        self.inner
            .subscribe(&[re.as_str()])
            .map_err(|e| from_kafka(e, "subscribing"))
    }

    /// Moves the next read of an assigned partition to its first (`end`
    /// false) or next (`end` true) offset.
    ///
    /// # Errors
    /// As [`KafkaConsumer::seek`].
    pub fn seek_to_edge(&mut self, topic: &str, partition: u32, end: bool) -> Result<()> {
        let (low, high) = self.watermarks(topic, partition)?;
        self.seek(topic, partition, if end { high } else { low })
    }

    /// For each `(topic, partition, timestamp_ms)`, the earliest offset
    /// whose record timestamp is at or after it (`None` when all are
    /// older).
    ///
    /// # Errors
    /// The cluster's errors.
    pub fn offsets_for_times(&self, query: &[(&str, u32, i64)]) -> Result<Vec<Option<u64>>> {
        let mut tpl = TopicPartitionList::new();
        for (t, p, ts) in query {
            tpl.add_partition_offset(t, *p as i32, Offset::Offset(*ts))
                .map_err(|e| from_kafka(e, "looking up offsets"))?;
        }
        let got = self
            .inner
            .offsets_for_times(tpl, self.timeout)
            .map_err(|e| from_kafka(e, "looking up offsets"))?;
        Ok(query
            .iter()
            .map(|(t, p, _)| {
                got.find_partition(t, *p as i32)
                    .and_then(|e| match e.offset() {
                        Offset::Offset(o) if o >= 0 => Some(o as u64),
                        _ => None,
                    })
            })
            .collect())
    }

    /// Stops (`pause` true) or restarts fetching from assigned partitions.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a partition not assigned.
    pub fn pause(&mut self, partitions: &[(&str, u32)], pause: bool) -> Result<()> {
        self.check_open()?;
        let mut tpl = TopicPartitionList::new();
        for (t, p) in partitions {
            self.check_assigned(t, *p)?;
            tpl.add_partition(t, *p as i32);
        }
        let r = if pause {
            self.inner.pause(&tpl)
        } else {
            self.inner.resume(&tpl)
        };
        r.map_err(|e| from_kafka(e, "pausing"))?;
        for (t, p) in partitions {
            self.paused.retain(|(pt, pp)| !(pt == t && pp == p));
            if pause {
                self.paused.push(((*t).to_owned(), *p));
            }
        }
        self.paused.sort();
        Ok(())
    }

    /// The partitions paused.
    pub fn paused(&self) -> Vec<(String, u32)> {
        self.paused.clone()
    }

    /// Stores `(topic, partition, offset)` as processed: the next
    /// [`KafkaConsumer::commit`] (or auto-commit) commits it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a partition not assigned.
    pub fn store_offsets(&mut self, offsets: &[(&str, u32, u64)]) -> Result<()> {
        self.check_open()?;
        let mut tpl = TopicPartitionList::new();
        for (t, p, o) in offsets {
            self.check_assigned(t, *p)?;
            let at = i64::try_from(*o)
                .map_err(|_| Error::InvalidArgument(format!("offset {o} out of range")))?;
            tpl.add_partition_offset(t, *p as i32, Offset::Offset(at))
                .map_err(|e| from_kafka(e, "storing offsets"))?;
        }
        self.inner
            .store_offsets(&tpl)
            .map_err(|e| from_kafka(e, "storing offsets"))
    }

    /// What this consumer did so far (records, bytes, polls).
    pub fn stats(&self) -> crate::ConsumerStats {
        self.stats
    }

    /// [`KafkaConsumer::poll`] as one [`MessageBatch`].
    ///
    /// # Errors
    /// As [`KafkaConsumer::poll`].
    pub fn poll_batch(&mut self, timeout: Duration) -> Result<MessageBatch> {
        let mut batch = MessageBatch::default();
        for m in self.poll(timeout)? {
            m.push_into(&mut batch);
        }
        Ok(batch)
    }

    /// Commits the position of every assigned partition (the offset after
    /// the last message polled), waiting for the coordinator.
    ///
    /// # Errors
    /// [`Error::CommitFailed`] when the group rebalanced meanwhile;
    /// [`Error::InvalidArgument`] without a group.
    pub fn commit(&mut self) -> Result<()> {
        self.check_open()?;
        self.check_grouped("commit")?;
        self.stats.commits += 1;
        match self.inner.commit_consumer_state(CommitMode::Sync) {
            Ok(()) => Ok(()),
            // Nothing polled since the last commit: nothing to do.
            Err(e)
                if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::NoOffset) =>
            {
                Ok(())
            }
            Err(e) => Err(from_kafka(e, "committing")),
        }
    }

    /// Commits `(topic, partition, offset, metadata)`: `offset` is the
    /// next message to read.
    ///
    /// # Errors
    /// As [`KafkaConsumer::commit`].
    pub fn commit_offsets(&mut self, offsets: &[(&str, u32, u64, &str)]) -> Result<()> {
        self.check_open()?;
        self.check_grouped("commit")?;
        let mut tpl = TopicPartitionList::new();
        for (t, p, o, meta) in offsets {
            let at = i64::try_from(*o)
                .map_err(|_| Error::InvalidArgument(format!("offset {o} out of range")))?;
            tpl.add_partition_offset(t, *p as i32, Offset::Offset(at))
                .map_err(|e| from_kafka(e, "committing"))?;
            if !meta.is_empty() {
                if let Some(mut e) = tpl.find_partition(t, *p as i32) {
                    e.set_metadata(*meta);
                }
            }
        }
        self.stats.commits += 1;
        self.inner
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| from_kafka(e, "committing"))
    }

    /// The group's committed offset of a partition, `None` when it has
    /// none.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a group; the cluster's errors.
    pub fn committed(&self, topic: &str, partition: u32) -> Result<Option<CommittedOffset>> {
        self.check_open()?;
        self.check_grouped("committed")?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, partition as i32);
        let got = self
            .inner
            .committed_offsets(tpl, self.timeout)
            .map_err(|e| from_kafka(e, "reading committed offsets"))?;
        Ok(got
            .find_partition(topic, partition as i32)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) if o >= 0 => Some(CommittedOffset {
                    offset: o as u64,
                    metadata: e.metadata().to_owned(),
                    timestamp: 0,
                }),
                _ => None,
            }))
    }

    /// Moves the next read of an assigned partition to `offset`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a partition not assigned; the
    /// cluster's errors.
    pub fn seek(&mut self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        self.check_open()?;
        self.check_assigned(topic, partition)?;
        let at = i64::try_from(offset)
            .map_err(|_| Error::InvalidArgument(format!("offset {offset} out of range")))?;
        if self
            .inner
            .seek(topic, partition as i32, Offset::Offset(at), self.timeout)
            .is_ok()
        {
            return Ok(());
        }
        // librdkafka seeks only a partition it fetches already; one just
        // assigned is assigned again, starting at `offset`, the others
        // where they stand.
        let positions = self
            .inner
            .position()
            .map_err(|e| from_kafka(e, "reading positions"))?;
        let mut tpl = TopicPartitionList::new();
        for e in positions.elements() {
            let start = if e.topic() == topic && e.partition() == partition as i32 {
                Offset::Offset(at)
            } else {
                e.offset()
            };
            tpl.add_partition_offset(e.topic(), e.partition(), start)
                .map_err(|e| from_kafka(e, "seeking"))?;
        }
        self.inner
            .assign(&tpl)
            .map_err(|e| from_kafka(e, "seeking"))
    }

    fn check_assigned(&self, topic: &str, partition: u32) -> Result<()> {
        if self
            .assignment()
            .iter()
            .any(|(t, p)| t == topic && *p == partition)
        {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{topic}/{partition} is not assigned to this consumer"
            )))
        }
    }

    /// The offset the next message of an assigned partition will have:
    /// after the last one polled, else the committed offset, else where
    /// `auto_offset_reset` starts.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a partition not assigned; the
    /// cluster's errors.
    pub fn position(&self, topic: &str, partition: u32) -> Result<u64> {
        self.check_open()?;
        self.check_assigned(topic, partition)?;
        // Messages fetched and not handed out yet are still to come.
        if let Some(m) = self
            .held
            .iter()
            .find(|m| m.topic() == topic && m.partition() == partition)
        {
            return Ok(m.offset());
        }
        let pos = self
            .inner
            .position()
            .map_err(|e| from_kafka(e, "reading positions"))?;
        if let Some(Offset::Offset(o)) = pos
            .find_partition(topic, partition as i32)
            .map(|e| e.offset())
        {
            if o >= 0 {
                return Ok(o as u64);
            }
        }
        if self.config.group_id.is_some() {
            if let Some(c) = self.committed(topic, partition)? {
                return Ok(c.offset);
            }
        }
        let (low, high) = self
            .inner
            .fetch_watermarks(topic, partition as i32, self.timeout)
            .map_err(|e| from_kafka(e, "reading offsets"))?;
        Ok(match self.config.auto_offset_reset {
            OffsetReset::Latest => high.max(0) as u64,
            _ => low.max(0) as u64,
        })
    }

    /// What a transaction commits for this consumer's group
    /// ([`crate::Transaction::send_offsets`]): the position of every
    /// assigned partition, and the group's membership as librdkafka
    /// states it (so a commit from a member that lost the partitions is
    /// refused).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a group; the cluster's errors.
    pub(crate) fn transaction_offsets(
        &self,
    ) -> Result<(
        rdkafka::TopicPartitionList,
        rdkafka::consumer::ConsumerGroupMetadata,
    )> {
        self.check_open()?;
        if self.config.group_id.is_none() {
            return Err(Error::InvalidArgument(
                "sending offsets to a transaction needs a consumer with a group_id".into(),
            ));
        }
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (t, p) in self.assignment() {
            let o = self.position(&t, p)?;
            tpl.add_partition_offset(&t, p as i32, Offset::Offset(o as i64))
                .map_err(|e| from_kafka(e, "sending offsets to a transaction"))?;
        }
        let meta = self.inner.group_metadata().ok_or_else(|| {
            Error::InvalidArgument("the consumer has no group membership yet".into())
        })?;
        Ok((tpl, meta))
    }

    /// Messages left to read in each assigned partition: its end offset
    /// minus the position.
    ///
    /// # Errors
    /// The cluster's errors.
    pub fn lag(&mut self) -> Result<Vec<(String, u32, u64)>> {
        let mut out = Vec::new();
        for (t, p) in self.assignment() {
            let pos = self.position(&t, p)?;
            let (_, high) = self
                .inner
                .fetch_watermarks(&t, p as i32, self.timeout)
                .map_err(|e| from_kafka(e, "reading offsets"))?;
            out.push((t, p, (high.max(0) as u64).saturating_sub(pos)));
        }
        Ok(out)
    }

    /// Leaves the group (committing first when auto-commit is on); later
    /// calls fail with [`Error::Closed`].
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        if self.config.group_id.is_some() && self.config.enable_auto_commit {
            let _ = self.inner.commit_consumer_state(CommitMode::Sync);
        }
        self.inner.unsubscribe();
        self.closed = true;
    }

    /// Whether [`KafkaConsumer::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.closed
    }
}

impl Drop for KafkaConsumer {
    fn drop(&mut self) {
        self.close();
    }
}

/// A number no other consumer of this process got.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
