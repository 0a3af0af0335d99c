//! Consumers: assignment, subscription, positions and polling.

/// Returns from the calling method with `$e` (`$k` the cluster's
/// consumer) when the consumer reads a Kafka cluster.
macro_rules! on_cluster {
    ($self:ident, $k:ident => $e:expr) => {
        #[cfg(feature = "kafka")]
        if let Some($k) = $self.kafka.as_mut() {
            return $e;
        }
    };
    (ref $self:ident, $k:ident => $e:expr) => {
        #[cfg(feature = "kafka")]
        if let Some($k) = $self.kafka.as_ref() {
            return $e;
        }
    };
}

mod config;
mod fetch;
mod flow;
mod held;
#[cfg(feature = "kafka")]
mod on_cluster;
mod partition;
mod rebalance;
mod transactional;
pub use config::{ConsumerConfig, OffsetReset};
pub use transactional::IsolationLevel;

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::broker::BrokerInner;
use crate::error::{Error, Result};
use crate::group::{Group, MemberSpec, Resume};
use crate::log::{PartitionLog, Waiter};
use crate::message::{Message, MessageBatch, Sink};
use crate::offsets::CommittedOffset;
use crate::producer::Acks;
use crate::sync;
use crate::topic::Topic;
pub(crate) use held::Held;
use partition::Assigned;

/// Longest a poll parks on a shared directory's doorbell before it looks
/// again (group changes in other processes, and a safety net against a
/// lost wake-up).
const SHARED_WAIT_SLICE: Duration = Duration::from_millis(100);
pub use rebalance::{RebalanceContext, RebalanceListener};

/// Wakes a consumer blocked in [`Consumer::poll`] from another thread: that
/// `poll` returns at once (with what it has, maybe nothing).
#[derive(Debug, Clone, Default)]
pub struct ConsumerWaker {
    inner: Arc<WakeState>,
}

#[derive(Debug, Default)]
struct WakeState {
    flag: AtomicBool,
    waiter: Mutex<Option<Arc<Waiter>>>,
    /// Shared mode: the directory's doorbell, which a parked poll waits on.
    share: Option<Arc<crate::shared::DirShare>>,
}

impl ConsumerWaker {
    /// Forgets a wakeup no `poll` has taken yet (one made for a poll that
    /// did not need it, such as a stop request that came after the work).
    pub fn clear(&self) {
        self.inner.flag.store(false, Ordering::SeqCst);
    }

    /// Makes the current or next `poll` return at once.
    pub fn wakeup(&self) {
        self.inner.flag.store(true, Ordering::SeqCst);
        if let Some(w) = &*sync::lock(&self.inner.waiter) {
            w.wake();
        }
        if let Some(share) = &self.inner.share {
            // Wakes every waiter of the directory: rare, and they look
            // again and park.
            share.ring();
        }
    }
}

/// What a consumer did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Messages returned by `poll`.
    pub records: u64,
    /// Bytes of keys and values returned.
    pub bytes: u64,
    /// Calls to `poll`.
    pub polls: u64,
    /// Group rebalances this consumer took part in.
    pub rebalances: u64,
    /// Messages skipped because retention deleted them before they were
    /// read (`auto_offset_reset` moved the position past them).
    pub skipped: u64,
    /// Commits made (manual and automatic).
    pub commits: u64,
    /// Committed offsets found beyond the end of their partition's log
    /// (recovery cut the log below them) and reset by `auto_offset_reset`.
    pub offset_resets: u64,
}

/// A group member's identity and subscription.
#[derive(Debug)]
struct Membership {
    group: Arc<Group>,
    id: String,
    /// Explicit topics, or a pattern matched against every topic.
    topics: Vec<String>,
    pattern: Option<regex::Regex>,
    generation: u64,
    /// The group's [`Group::epoch`] when this member last synced with it.
    epoch: u64,
    /// Partitions the group gave this member whose logs did not open (a
    /// damaged or unreadable file, found on first use): still this
    /// member's, tried again at every sync until they open or are revoked.
    unopened: Vec<(String, u32)>,
}

/// Reads records from assigned partitions or subscribed topics.
///
/// A consumer alone in its group gets every partition of the topics it
/// subscribes to; sharing partitions among several members comes with
/// consumer groups.
pub struct Consumer {
    /// The data directory (`None` on a Kafka cluster: see `kafka`).
    broker: Option<Arc<BrokerInner>>,
    /// The consumer on a Kafka cluster, when it reads one.
    #[cfg(feature = "kafka")]
    kafka: Option<Box<crate::kafka::KafkaConsumer>>,
    config: ConsumerConfig,
    assigned: Vec<Assigned>,
    /// The topics subscribed to, by name (those that do not exist yet are
    /// waited for), and those of them that exist.
    sub_names: Vec<String>,
    subscription: Vec<Arc<Topic>>,
    waiter: Option<Arc<Waiter>>,
    next_start: usize,
    closed: bool,
    /// Membership of a group in clustering mode.
    member: Option<Membership>,
    /// A pattern subscription outside a group.
    pattern: Option<regex::Regex>,
    /// The broker's topics version when a pattern was last matched.
    pattern_version: Option<u64>,
    /// Where commits go: the group, or this broadcast consumer's own store.
    offsets: Option<Arc<Group>>,
    listener: Option<Box<dyn RebalanceListener>>,
    last_auto_commit: Instant,
    wake: ConsumerWaker,
    stats: ConsumerStats,
    /// Messages fetched for [`Consumer::poll_one`] and not handed out yet.
    held: Arc<Held>,
    /// When handing out held messages must wait for the work of a poll
    /// (see [`held`]).
    maintain_at: Option<Instant>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("config", &self.config)
            .field("assignment", &self.assignment())
            .field("member", &self.member.as_ref().map(|m| &m.id))
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// The data directory. Every public call of a consumer on a Kafka
    /// cluster returns before it would get here ([`on_cluster!`]).
    fn broker(&self) -> &Arc<BrokerInner> {
        match &self.broker {
            Some(b) => b,
            None => unreachable!("a consumer on a Kafka cluster has no data directory"),
        }
    }

    /// The engine this consumer reads from.
    pub(crate) fn broker_inner(&self) -> Arc<BrokerInner> {
        Arc::clone(self.broker())
    }

    pub(crate) fn new(broker: Arc<BrokerInner>, config: ConsumerConfig) -> Result<Consumer> {
        config.validate()?;
        let share = broker.share().cloned();
        let offsets = match &config.group_id {
            Some(g) if config.broadcast => {
                Some(broker.group(&crate::offsets::broadcast_key(g, &config.client_id))?)
            }
            Some(g) => Some(broker.group(g)?),
            None => None,
        };
        let held = Arc::new(Held::default());
        broker.register_held(&held);
        let wake = ConsumerWaker {
            inner: Arc::new(WakeState {
                share: share.clone(),
                ..WakeState::default()
            }),
        };
        Ok(Consumer::with_parts(
            Some(broker),
            config,
            offsets,
            wake,
            held,
        ))
    }

    /// A consumer with nothing assigned or subscribed yet, reading the
    /// data directory `broker` (`None` on a Kafka cluster).
    pub(super) fn with_parts(
        broker: Option<Arc<BrokerInner>>,
        config: ConsumerConfig,
        offsets: Option<Arc<Group>>,
        wake: ConsumerWaker,
        held: Arc<Held>,
    ) -> Consumer {
        Consumer {
            broker,
            #[cfg(feature = "kafka")]
            kafka: None,
            config,
            assigned: Vec::new(),
            sub_names: Vec::new(),
            subscription: Vec::new(),
            waiter: None,
            next_start: 0,
            closed: false,
            member: None,
            pattern: None,
            pattern_version: None,
            offsets,
            listener: None,
            last_auto_commit: Instant::now(),
            wake,
            stats: ConsumerStats::default(),
            held,
            maintain_at: None,
        }
    }

    /// Whether `subscribe` joins a group that shares partitions.
    fn clustering(&self) -> bool {
        self.config.group_id.is_some() && !self.config.broadcast
    }

    fn check_open(&self) -> Result<()> {
        if self.closed {
            return Err(Error::Closed("consumer"));
        }
        self.broker().check_open()
    }

    /// This consumer's settings.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Reads exactly these partitions (replacing any assignment or
    /// subscription). Nothing changes if any partition is unknown.
    pub fn assign(&mut self, partitions: &[(&str, u32)]) -> Result<()> {
        on_cluster!(self, k => k.assign(partitions));
        self.check_open()?;
        // Resolve every partition before touching the current assignment.
        let mut wanted = Vec::with_capacity(partitions.len());
        for &(t, p) in partitions {
            let topic = self.broker().topic_or_create(t)?;
            let log = topic.partition(p)?;
            wanted.push((topic, log));
        }
        // A group member leaves first, revoking (and committing) all it
        // owned, the partitions it keeps reading included.
        self.put_back();
        self.leave_group();
        let mut next = Vec::with_capacity(wanted.len());
        for (topic, log) in wanted {
            if next.iter().any(|a: &Assigned| Arc::ptr_eq(&a.log, &log)) {
                continue;
            }
            next.push(self.keep_or_new(topic, log));
        }
        self.sub_names.clear();
        self.subscription.clear();
        self.pattern = None;
        self.pattern_version = None;
        self.assigned = next;
        Ok(())
    }

    fn keep_or_new(&mut self, topic: Arc<Topic>, log: Arc<PartitionLog>) -> Assigned {
        if let Some(i) = self.assigned.iter().position(|a| Arc::ptr_eq(&a.log, &log)) {
            self.assigned.swap_remove(i)
        } else {
            // A partition read anew starts at this consumer's (or its
            // group's) committed offset, if any.
            let resume = self
                .offsets
                .as_ref()
                .and_then(|g| g.resume(topic.name(), log.partition()));
            Assigned::new(topic, log, resume)
        }
    }

    /// Reads every partition of `topics`, including partitions added later.
    /// A topic that does not exist yet is read once it is created (as
    /// Kafka's consumer waits for it). Nothing changes if a name is invalid
    /// or a topic is damaged.
    ///
    /// With a `group_id` (and not in broadcast mode) the consumer joins the
    /// group and gets its share of the partitions, which changes as members
    /// come and go (see [`RebalanceListener`]).
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        #[cfg(feature = "kafka")]
        if self.kafka.is_some() {
            let listener = self.listener.take();
            return self.cluster_subscribe(topics, None, listener);
        }
        self.subscribe_inner(topics, None, None)
    }

    /// [`Consumer::subscribe`] with a listener told of every change of the
    /// consumer's partitions.
    pub fn subscribe_with(
        &mut self,
        topics: &[&str],
        listener: Box<dyn RebalanceListener>,
    ) -> Result<()> {
        #[cfg(feature = "kafka")]
        if self.kafka.is_some() {
            return self.cluster_subscribe(topics, None, Some(listener));
        }
        self.subscribe_inner(topics, None, Some(listener))
    }

    /// Subscribes to every topic whose whole name matches the regular
    /// expression `pattern`, now and as topics are created.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid expression.
    pub fn subscribe_pattern(
        &mut self,
        pattern: &str,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        #[cfg(feature = "kafka")]
        if self.kafka.is_some() {
            return self.cluster_subscribe(&[], Some(pattern), listener);
        }
        let re = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
            Error::InvalidArgument(format!("invalid topic pattern {pattern:?}: {e}"))
        })?;
        self.subscribe_inner(&[], Some(re), listener)
    }

    fn subscribe_inner(
        &mut self,
        topics: &[&str],
        pattern: Option<regex::Regex>,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        self.check_open()?;
        let mut names: Vec<String> = Vec::with_capacity(topics.len());
        for &t in topics {
            // A topic that does not exist yet is waited for (as Kafka's
            // consumer does) or created (`auto_create_topics`); a damaged
            // one is refused.
            match self.broker().topic_or_create(t) {
                Ok(_) => {}
                Err(Error::UnknownTopic(_)) => crate::topic::validate_topic_name(t)?,
                Err(e) => return Err(e),
            }
            if !names.iter().any(|n| n == t) {
                names.push(t.to_owned());
            }
        }
        if pattern.is_none() && names.is_empty() {
            return Err(Error::InvalidArgument(
                "subscribe to at least one topic".into(),
            ));
        }
        self.put_back();
        self.leave_group();
        self.assigned.clear();
        self.sub_names.clear();
        self.subscription.clear();
        self.pattern = None;
        self.pattern_version = None;
        if listener.is_some() {
            self.listener = listener;
        }
        if self.clustering() {
            let group = Arc::clone(self.offsets.as_ref().expect("a group consumer has a group"));
            let spec = self.member_spec(&names, pattern.as_ref());
            let broker = Arc::clone(self.broker());
            let id = group.join(&self.config.client_id, spec, &|t| broker.partition_count(t))?;
            self.member = Some(Membership {
                group,
                id,
                topics: names,
                pattern,
                generation: 0,
                epoch: 0,
                unopened: Vec::new(),
            });
            self.group_sync()?;
        } else {
            self.sub_names = names;
            self.pattern = pattern;
            self.pattern_version = None;
            self.refresh_subscription()?;
        }
        Ok(())
    }

    /// The names of every topic whose name `re` matches.
    fn matching_topics(&self, re: &regex::Regex) -> Vec<String> {
        let mut names = self.broker().topic_names();
        names.retain(|n| re.is_match(n));
        names
    }

    fn member_spec(&self, topics: &[String], pattern: Option<&regex::Regex>) -> MemberSpec {
        let topics = match pattern {
            Some(re) => self.matching_topics(re),
            None => topics.to_vec(),
        };
        MemberSpec {
            topics,
            strategy: self.config.assignment_strategy,
            wanted: self.config.wanted_partitions.clone(),
            max_poll_interval: Duration::from_millis(self.config.max_poll_interval_ms),
        }
    }

    /// Drops the subscription or manual assignment: the consumer reads
    /// nothing until the next `subscribe` or `assign`. A group member
    /// leaves its group (committing first with auto-commit).
    pub fn unsubscribe(&mut self) {
        on_cluster!(self, k => k.unsubscribe());
        self.put_back();
        self.leave_group();
        self.sub_names.clear();
        self.subscription.clear();
        self.assigned.clear();
        self.pattern = None;
        self.pattern_version = None;
    }

    /// Leaves the group, if a member: revokes everything (listener, and a
    /// commit with auto-commit) and lets the others take over.
    fn leave_group(&mut self) {
        if self.member.is_none() {
            return;
        }
        self.put_back();
        let owned = self.assignment();
        if !owned.is_empty() {
            self.revoke(&owned);
        }
        let m = self.member.take().expect("checked");
        let broker = Arc::clone(self.broker());
        m.group.leave(&m.id, &|t| broker.partition_count(t));
        self.assigned.clear();
    }

    /// Runs the revoke listener and auto-commit for `partitions`, then
    /// drops them from the assignment and releases them to the group.
    fn revoke(&mut self, partitions: &[(String, u32)]) {
        // Held messages go back: those of the revoked partitions are the
        // new owner's, from the committed offset.
        self.put_back();
        // As Kafka: auto-commit first, then the listener (whose own commit,
        // if any, is the last word).
        if self.config.enable_auto_commit {
            let offsets = self.positions(Some(partitions));
            if let Err(e) = self.commit_raw(&offsets) {
                ::log::warn!("auto-commit before a rebalance failed: {e}");
            }
        }
        if let Some(mut l) = self.listener.take() {
            // Only what it was told it got (not partitions whose log never
            // opened).
            let unopened = self.member.as_ref().map(|m| m.unopened.as_slice());
            let told: Vec<(String, u32)> = partitions
                .iter()
                .filter(|p| !unopened.is_some_and(|u| u.contains(p)))
                .cloned()
                .collect();
            if !told.is_empty() {
                l.on_revoke(&mut RebalanceContext::new(self), &told);
            }
            self.listener = Some(l);
        }
        self.assigned.retain(|a| {
            !partitions
                .iter()
                .any(|(t, p)| **a.topic.name() == **t && a.log.partition() == *p)
        });
        let broker = Arc::clone(self.broker());
        if let Some(m) = &mut self.member {
            m.unopened.retain(|u| !partitions.contains(u));
            m.group
                .release(&m.id, partitions, &|t| broker.partition_count(t));
        }
    }

    /// Brings a group member in line with its group: revokes what is no
    /// longer its own, takes what was released to it.
    fn group_sync(&mut self) -> Result<()> {
        let Some(m) = &self.member else { return Ok(()) };
        let group = Arc::clone(&m.group);
        let id = m.id.clone();
        let broker = Arc::clone(self.broker());
        if !group.is_member(&id, &|t| broker.partition_count(t)) {
            // Removed for not polling in time: everything it had is gone.
            // Join again, as Kafka's consumer does.
            ::log::warn!(
                "consumer {id} was removed from group {}; joining again",
                group.name()
            );
            let lost = self.assignment();
            self.put_back();
            self.assigned.clear();
            if !lost.is_empty() {
                if let Some(mut l) = self.listener.take() {
                    l.on_lost(&mut RebalanceContext::new(self), &lost);
                    self.listener = Some(l);
                }
            }
            if self.member.as_ref().is_none_or(|m| m.id != id) {
                // The listener left the group or subscribed again.
                return Ok(());
            }
            let m = self.member.take().expect("checked");
            let spec = self.member_spec(&m.topics, m.pattern.as_ref());
            let broker = Arc::clone(self.broker());
            let id = group.join(&self.config.client_id, spec, &|t| broker.partition_count(t))?;
            self.member = Some(Membership {
                id,
                unopened: Vec::new(),
                ..m
            });
            return self.group_sync();
        }
        let version = self.broker().topics_version();
        if let Some(re) = m
            .pattern
            .as_ref()
            .filter(|_| self.pattern_version != Some(version))
        {
            self.pattern_version = Some(version);
            let matching = self.matching_topics(re);
            if matching != m.topics {
                let spec = self.member_spec(&matching, None);
                let broker = Arc::clone(self.broker());
                group.update(&id, spec, &|t| broker.partition_count(t));
                if let Some(m) = &mut self.member {
                    m.topics = matching;
                }
            }
        }
        let waiter = self.ensure_waiter();
        let broker = Arc::clone(self.broker());
        let sync = group.sync(&id, &|t| broker.partition_count(t), Some(&waiter))?;
        if let Some(m) = &mut self.member {
            if m.generation != sync.generation {
                m.generation = sync.generation;
                self.stats.rebalances += 1;
            }
        }
        if !sync.revoke.is_empty() {
            self.revoke(&sync.revoke);
        }
        self.take_acquired(&group, &id, sync.acquired);
        Ok(())
    }

    fn ensure_waiter(&mut self) -> Arc<Waiter> {
        match &self.waiter {
            Some(w) if w.is_current() => Arc::clone(w),
            _ => {
                let w = Waiter::current();
                self.waiter = Some(Arc::clone(&w));
                w
            }
        }
    }

    /// Brings the assignment in line with the subscribed topics' partitions.
    fn refresh_subscription(&mut self) -> Result<()> {
        if self.member.is_some() {
            return Ok(());
        }
        // Topics are looked up (and a pattern matched) again only when
        // topics were created, deleted or grew since the last time: a
        // subscribed topic that does not exist yet is read once it does.
        let version = self.broker().topics_version();
        if (self.pattern.is_some() || !self.sub_names.is_empty())
            && self.pattern_version != Some(version)
        {
            self.pattern_version = Some(version);
            if let Some(re) = &self.pattern {
                self.sub_names = self.matching_topics(re);
            }
            self.subscription = self
                .sub_names
                .iter()
                .filter_map(|n| self.broker().topic(n).ok())
                .collect();
        }
        if self.subscription.is_empty() {
            if self.assigned.iter().any(|a| a.topic.is_deleted()) {
                self.put_back();
                self.assigned.retain(|a| !a.topic.is_deleted());
            }
            return Ok(());
        }
        self.subscription.retain(|t| !t.is_deleted());
        let want: usize = self
            .subscription
            .iter()
            .map(|t| t.partition_count() as usize)
            .sum();
        if want == self.assigned.len()
            && self
                .assigned
                .iter()
                .all(|a| self.subscription.iter().any(|t| Arc::ptr_eq(t, &a.topic)))
        {
            return Ok(());
        }
        // Partitions not open yet open now (their first use).
        let mut logs = Vec::with_capacity(self.subscription.len());
        for t in &self.subscription {
            logs.push((Arc::clone(t), t.partitions()?));
        }
        self.put_back();
        let mut next = Vec::with_capacity(want);
        for (t, parts) in logs {
            for log in parts.iter() {
                next.push(self.keep_or_new(Arc::clone(&t), Arc::clone(log)));
            }
        }
        self.assigned = next;
        Ok(())
    }

    /// The partitions this consumer reads, as `(topic, partition)` pairs.
    pub fn assignment(&self) -> Vec<(String, u32)> {
        on_cluster!(ref self, k => k.assignment());
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
        on_cluster!(self, k => k.seek(topic, partition, offset));
        self.check_open()?;
        self.refresh_subscription()?;
        let i = self.find(topic, partition)?;
        let cursor = self.assigned[i].log.cursor(offset)?;
        self.put_back_partition(i);
        let a = &mut self.assigned[i];
        a.forget_cursor();
        a.cursor = Some(cursor);
        a.park();
        a.next_base = None;
        a.position = Some(offset);
        a.out_of_range = None;
        Ok(())
    }

    /// Moves to the message `id` names (its topic, partition and offset),
    /// as [`Consumer::seek`] does. Errors as `seek`: a partition this
    /// consumer is not assigned fails as it does there.
    pub fn seek_to_id(&mut self, id: &crate::MessageId) -> Result<()> {
        self.seek(&id.topic, id.partition, id.offset)
    }

    /// The next offset this consumer will read from a partition.
    pub fn position(&mut self, topic: &str, partition: u32) -> Result<u64> {
        on_cluster!(self, k => k.position(topic, partition));
        self.check_open()?;
        self.refresh_subscription()?;
        let i = self.find(topic, partition)?;
        let reset = self.config.auto_offset_reset;
        let a = &mut self.assigned[i];
        if a.held > 0 {
            return Ok(a.handed);
        }
        let res = Self::resolve(a, reset);
        self.stats.skipped += std::mem::take(&mut a.skipped);
        self.stats.offset_resets += std::mem::take(&mut a.resets);
        a.park();
        res
    }

    fn has_data(&self) -> bool {
        self.assigned.iter().any(|a| {
            if a.log.is_reader() {
                a.log.refresh();
            }
            !a.paused && a.position.is_none_or(|p| a.log.end_offset() > p)
        })
    }

    /// Returns the next messages (at most `max_poll_records`), taken fairly
    /// across the assigned partitions. Waits up to `timeout` for data when
    /// there is none, woken by appends; an empty vector means the timeout
    /// passed.
    ///
    /// A group member also takes part in rebalances here (its listener runs
    /// on this thread), and auto-commits every `auto_commit_interval_ms`.
    /// [`ConsumerWaker::wakeup`] from another thread makes it return at
    /// once.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<Message>> {
        #[cfg(feature = "kafka")]
        if self.kafka.is_some() {
            return self.cluster_poll(timeout, crate::kafka::KafkaConsumer::poll);
        }
        let mut out = Vec::new();
        self.poll_into(timeout, &mut out)?;
        Ok(out)
    }

    /// [`poll`](Self::poll), returning the messages as one [`MessageBatch`]:
    /// the same messages, read by reference (or turned into owned
    /// messages), for less work per message than owned messages cost (see
    /// the [`MessageBatch`] documentation). Positions, commits, rebalances
    /// and stats are exactly those of `poll`.
    pub fn poll_batch(&mut self, timeout: Duration) -> Result<MessageBatch> {
        #[cfg(feature = "kafka")]
        if self.kafka.is_some() {
            return self.cluster_poll(timeout, crate::kafka::KafkaConsumer::poll_batch);
        }
        let mut out = MessageBatch::default();
        self.poll_into(timeout, &mut out)?;
        Ok(out)
    }

    fn poll_into<S: Sink>(&mut self, timeout: Duration, out: &mut S) -> Result<()> {
        self.check_open()?;
        self.stats.polls += 1;
        self.poll_prologue()?;
        // Messages held for `poll_one` come first.
        if !self.drain_held(out) {
            self.poll_wait(timeout, out)?;
        }
        self.stats.records += out.len() as u64;
        self.stats.bytes += out.payload_bytes();
        Ok(())
    }

    /// The work every poll does first: auto-commit when due, rebalances,
    /// topic changes.
    fn poll_prologue(&mut self) -> Result<()> {
        self.maybe_auto_commit();
        self.schedule_maintenance();
        self.group_sync()?;
        self.refresh_subscription()?;
        Ok(())
    }

    /// Fetches into `out`, waiting up to `timeout` for data.
    fn poll_wait<S: Sink>(&mut self, timeout: Duration, out: &mut S) -> Result<()> {
        let now = Instant::now();
        // A timeout too far away to represent waits as good as forever.
        let deadline = now
            .checked_add(timeout)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
        loop {
            if self.wake.inner.flag.swap(false, Ordering::SeqCst) {
                break;
            }
            self.fetch_all(out)?;
            if out.len() != 0 || Instant::now() >= deadline {
                break;
            }
            let mut until = deadline;
            if let Some(m) = &self.member {
                if let Some(t) = m.group.next_expiry(&m.id) {
                    until = until.min(t.max(Instant::now()));
                }
            }
            self.wait(until)?;
            self.check_open()?;
            self.group_sync()?;
        }
        Ok(())
    }

    fn maybe_auto_commit(&mut self) {
        if !self.config.enable_auto_commit || self.offsets.is_none() {
            return;
        }
        let every = Duration::from_millis(self.config.auto_commit_interval_ms);
        if self.last_auto_commit.elapsed() < every {
            return;
        }
        self.last_auto_commit = Instant::now();
        if let Err(e) = self.commit() {
            ::log::warn!("auto-commit failed: {e}");
        }
    }

    /// A handle that wakes this consumer's `poll` from another thread.
    pub fn waker(&self) -> ConsumerWaker {
        self.wake.clone()
    }

    /// Commits the position (the next offset to read) of every partition
    /// this consumer reads: what `poll` returned counts as processed.
    /// Returns once the offsets are on disk.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a `group_id`;
    /// [`Error::CommitFailed`] when a rebalance took a partition away; I/O
    /// errors.
    pub fn commit(&mut self) -> Result<()> {
        on_cluster!(self, k => k.commit());
        self.check_open()?;
        let offsets = self.positions(None);
        self.commit_raw(&offsets)
    }

    /// The positions of the partitions read (of `only` those, if given), as
    /// offsets to commit.
    fn positions(&self, only: Option<&[(String, u32)]>) -> Vec<(String, u32, CommittedOffset)> {
        self.assigned
            .iter()
            .filter(|a| {
                only.is_none_or(|ps| {
                    ps.iter()
                        .any(|(t, p)| **a.topic.name() == **t && a.log.partition() == *p)
                })
            })
            .filter_map(|a| {
                let offset = if self.config.enable_auto_offset_store {
                    a.visible_position()?
                } else {
                    a.stored?
                };
                Some((
                    a.topic.name().to_string(),
                    a.log.partition(),
                    committed_now(offset, ""),
                ))
            })
            .collect()
    }

    /// Commits the given `(topic, partition, offset, metadata)` entries:
    /// `offset` is the next offset to read (the last processed plus one).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a metadata string is longer than
    /// [`Config::max_commit_metadata_bytes`](crate::Config) (nothing is
    /// committed); [`Error::OffsetOutOfRange`] for an offset past the end.
    pub fn commit_offsets(&mut self, offsets: &[(&str, u32, u64, &str)]) -> Result<()> {
        on_cluster!(self, k => k.commit_offsets(offsets));
        self.check_open()?;
        let max = self.broker().max_commit_metadata_bytes();
        if let Some(&(t, p, _, m)) = offsets.iter().find(|o| o.3.len() > max) {
            return Err(Error::InvalidArgument(format!(
                "commit metadata of {t}/{p} is {} bytes, more than max_commit_metadata_bytes ({max})",
                m.len()
            )));
        }
        let offsets: Vec<(String, u32, CommittedOffset)> = offsets
            .iter()
            .map(|&(t, p, o, m)| (t.to_owned(), p, committed_now(o, m)))
            .collect();
        for (t, p, c) in &offsets {
            let topic = self.broker().topic(t)?;
            let log = topic.partition(*p)?;
            if c.offset > log.end_offset() {
                return Err(Error::OffsetOutOfRange {
                    topic: t.clone(),
                    partition: *p,
                    offset: c.offset,
                    start: log.start_offset(),
                    end: log.end_offset(),
                });
            }
        }
        self.commit_raw(&offsets)
    }

    /// Like [`Consumer::commit`], then calls `callback` with the outcome
    /// (Kafka's `commitAsync`). The commit is durable when the callback runs.
    pub fn commit_with(&mut self, callback: impl FnOnce(&Result<()>)) -> Result<()> {
        on_cluster!(self, k => {
            let r = k.commit();
            callback(&r);
            r
        });
        let res = self.commit();
        callback(&res);
        res
    }

    fn commit_raw(&mut self, offsets: &[(String, u32, CommittedOffset)]) -> Result<()> {
        self.broker().check_writable("commit")?;
        let Some(group) = &self.offsets else {
            return Err(Error::InvalidArgument(
                "commit needs a consumer with a group_id".into(),
            ));
        };
        if offsets.is_empty() {
            return Ok(());
        }
        group.commit_as(
            self.member.as_ref().map(|m| m.id.as_str()),
            offsets,
            self.config.commit_acks == Acks::All,
        )?;
        self.stats.commits += 1;
        let mut topics: Vec<&str> = offsets.iter().map(|(t, _, _)| t.as_str()).collect();
        topics.dedup();
        for t in topics {
            self.broker().refresh_retention_floors(t);
        }
        Ok(())
    }

    /// The group's committed offset of a partition (with its metadata), if
    /// any.
    pub fn committed(&self, topic: &str, partition: u32) -> Result<Option<CommittedOffset>> {
        on_cluster!(ref self, k => k.committed(topic, partition));
        self.check_open()?;
        let Some(group) = &self.offsets else {
            return Err(Error::InvalidArgument(
                "committed offsets need a consumer with a group_id".into(),
            ));
        };
        Ok(group.committed(topic, partition))
    }

    /// Per partition read: `(topic, partition, lag)`, the end offset minus
    /// the committed offset (minus the position when nothing is committed).
    pub fn lag(&mut self) -> Result<Vec<(String, u32, u64)>> {
        on_cluster!(self, k => k.lag());
        self.check_open()?;
        let reset = self.config.auto_offset_reset;
        let mut out = Vec::with_capacity(self.assigned.len());
        for i in 0..self.assigned.len() {
            let (t, p) = {
                let a = &self.assigned[i];
                (a.topic.name().to_string(), a.log.partition())
            };
            // An out-of-range committed offset counts from where the log
            // was cut, where reading resumes.
            let committed = self
                .offsets
                .as_ref()
                .and_then(|g| g.resume(&t, p))
                .map(Resume::offset);
            let from = if let Some(c) = committed {
                c
            } else {
                let a = &mut self.assigned[i];
                let from = if a.held > 0 {
                    a.handed
                } else {
                    Self::resolve(a, reset).unwrap_or(0)
                };
                a.park();
                from
            };
            let log = &self.assigned[i].log;
            if log.is_reader() {
                log.refresh();
            }
            let end = log.end_offset();
            out.push((t, p, end.saturating_sub(from)));
        }
        Ok(out)
    }

    /// Moves to the first retained offset of a partition read.
    pub fn seek_to_beginning(&mut self, topic: &str, partition: u32) -> Result<()> {
        on_cluster!(self, k => k.seek_to_edge(topic, partition, false));
        let start = self
            .broker()
            .topic(topic)?
            .partition(partition)?
            .start_offset();
        self.seek(topic, partition, start)
    }

    /// Moves to the end of a partition read (only new records).
    pub fn seek_to_end(&mut self, topic: &str, partition: u32) -> Result<()> {
        on_cluster!(self, k => k.seek_to_edge(topic, partition, true));
        let end = self
            .broker()
            .topic(topic)?
            .partition(partition)?
            .end_offset();
        self.seek(topic, partition, end)
    }

    /// For each `(topic, partition, timestamp_ms)`, the earliest offset whose
    /// timestamp is at or after it (`None` when every record is older), via
    /// the time index.
    pub fn offsets_for_times(&self, query: &[(&str, u32, i64)]) -> Result<Vec<Option<u64>>> {
        on_cluster!(ref self, k => k.offsets_for_times(query));
        self.check_open()?;
        query
            .iter()
            .map(|&(t, p, ts)| {
                self.broker()
                    .topic(t)?
                    .partition(p)?
                    .offset_for_timestamp(ts)
            })
            .collect()
    }

    /// Turns automatic commits on or off (the processor turns them off
    /// while it runs: it commits what was processed, not what was fetched).
    pub(crate) fn set_auto_commit(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.config.enable_auto_commit, on)
    }

    /// Replaces the rebalance listener, returning the previous one.
    pub fn set_rebalance_listener(
        &mut self,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Option<Box<dyn RebalanceListener>> {
        #[cfg(feature = "kafka")]
        if self.kafka.is_some() {
            return self.cluster_set_listener(listener);
        }
        std::mem::replace(&mut self.listener, listener)
    }

    /// What this consumer did so far.
    pub fn stats(&self) -> ConsumerStats {
        on_cluster!(ref self, k => k.stats());
        self.stats
    }

    /// This member's id in its group, when it is one.
    pub fn member_id(&self) -> Option<&str> {
        on_cluster!(ref self, _k => None);
        self.member.as_ref().map(|m| m.id.as_str())
    }

    /// Parks until an assigned partition gets data or the deadline passes.
    #[allow(clippy::unnecessary_wraps)]
    fn wait(&mut self, deadline: Instant) -> Result<()> {
        if let Some(share) = self.broker().share().cloned() {
            self.wait_shared(&share, deadline);
            return Ok(());
        }
        let waiter = self.ensure_waiter();
        waiter.reset();
        *sync::lock(&self.wake.inner.waiter) = Some(Arc::clone(&waiter));
        if self.wake.inner.flag.load(Ordering::SeqCst) {
            return Ok(());
        }
        for a in &self.assigned {
            a.log.add_waiter(&waiter);
        }
        // Pairs with the fence in the append path (see `PartitionLog::announce`).
        fence(Ordering::SeqCst);
        if !self.has_data() {
            waiter.wait_until(deadline);
        }
        for a in &self.assigned {
            a.log.remove_waiter(&waiter);
        }
        Ok(())
    }

    /// Shared mode: parks on the directory's doorbell (rung by the
    /// writer's appends, in any process) until it rings, the deadline
    /// passes, or [`SHARED_WAIT_SLICE`] passes (group changes in other
    /// processes, and a safety net).
    fn wait_shared(&self, share: &crate::shared::DirShare, deadline: Instant) {
        let bell = share.prepare_wait();
        if self.wake.inner.flag.load(Ordering::SeqCst) || self.has_data() {
            return;
        }
        let left = deadline
            .saturating_duration_since(Instant::now())
            .min(SHARED_WAIT_SLICE);
        if !left.is_zero() {
            bell.wait(left);
        }
    }

    /// Whether the consumer, or the data directory it reads, was closed.
    pub fn is_closed(&self) -> bool {
        on_cluster!(ref self, k => k.is_closed());
        self.check_open().is_err()
    }

    /// Stops the consumer: a group member commits (with auto-commit) and
    /// leaves its group, so its partitions go to the others at once. Later
    /// calls fail with [`Error::Closed`].
    pub fn close(&mut self) {
        #[cfg(feature = "kafka")]
        if self.kafka.is_some() {
            return self.cluster_close();
        }
        if self.closed {
            return;
        }
        if self.broker().check_open().is_ok() {
            self.put_back();
            if self.member.is_some() {
                self.leave_group();
            } else if self.config.enable_auto_commit && self.offsets.is_some() {
                if let Err(e) = self.commit() {
                    ::log::warn!("auto-commit at close failed: {e}");
                }
            }
        }
        self.closed = true;
        self.held.clear();
        self.assigned.clear();
        self.sub_names.clear();
        self.subscription.clear();
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.close();
    }
}

fn committed_now(offset: u64, metadata: &str) -> CommittedOffset {
    CommittedOffset {
        offset,
        metadata: metadata.to_owned(),
        timestamp: crate::log::now_ms(),
    }
}
