//! Share consumers: job-queue consumption of topics (Kafka's share groups,
//! Pulsar's shared subscriptions, SQS).
//!
//! The members of a share group take messages from any partition of the
//! topics they subscribe to, each message to one member at a time; there
//! is no partition ownership and no rebalance. A member acknowledges each
//! message ([`ShareMessage::ack`]), gives it back ([`release`], now or
//! after a delay, without holding back the messages behind it), rejects it
//! to the dead-letter topic ([`reject`]) or extends its lock
//! ([`renew`]). A message whose lock runs out (its consumer died, hung,
//! or left) is delivered again; one delivered `max_deliveries` times
//! without an acknowledgement goes to the dead-letter topic with headers
//! saying where it came from and why (see [`crate::dead_letters`]).
//!
//! The state (which messages are done, how often each in flight was
//! delivered) is kept in `groups/<group>.share`, appended per poll and per
//! acknowledgement, durable as `commit_acks` says; it survives `kill -9`
//! and reopens. A delivery counts when it is made, so a consumer that
//! crashes on a message (kills its process) uses up one of its deliveries.
//! At most `max_in_flight` offsets per partition are read ahead of the
//! first one not done: past that the partition is not read until
//! messages are settled (counted in [`ShareConsumerStats::window_full`]);
//! acknowledgement state is never dropped.
//!
//! In exclusive mode a share group is used by the process that has the
//! directory; in shared mode by members in any number of processes, which
//! read and append its state file under its lock for each operation (see
//! `store.rs`); a process that exits gives its messages back at once.
//!
//! [`release`]: ShareMessage::release
//! [`reject`]: ShareMessage::reject
//! [`renew`]: ShareMessage::renew

mod engine;
mod group;
mod held;
mod lock_page;
#[cfg(test)]
mod model_tests;
mod state;
mod store;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use group::Registry;
use group::{Action, Delivered, PartRead, Settings, ShareGroup};

use crate::broker::BrokerInner;
use crate::consumer::{Consumer, ConsumerConfig, ConsumerWaker, OffsetReset};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::offsets::{validate_group_id, validate_group_name};
use crate::producer::Acks;

pub use group::{default_dead_letter_topic, ShareBacklog};

/// How long a poll in shared mode waits before it looks at the group's
/// state again (other processes' releases wake no member here).
const SHARED_RECHECK: Duration = Duration::from_millis(50);

/// Settings of a share consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareConsumerConfig {
    /// The share group.
    pub group_id: String,
    /// This consumer's name (default `"consumer"`).
    pub client_id: String,
    /// How long a delivered message stays locked to its consumer before it
    /// is delivered again (default 30000 ms, as Kafka's
    /// `group.share.record.lock.duration.ms`); [`ShareMessage::renew`]
    /// extends it.
    pub lock_duration_ms: u64,
    /// Deliveries after which a message that was not acknowledged goes to
    /// the dead-letter topic (default 5, as Kafka's
    /// `group.share.delivery.count.limit`; 0: no limit).
    pub max_deliveries: u32,
    /// Most offsets per partition read ahead of the first one not done
    /// (default 2000).
    pub max_in_flight: u32,
    /// Where dead letters go; `None` (default): `<topic>.<group>.dlq` for
    /// each source topic (see [`default_dead_letter_topic`]). Created with
    /// one partition when missing.
    pub dead_letter_topic: Option<String>,
    /// Most messages one `poll` returns (default 500).
    pub max_poll_records: usize,
    /// Where a partition the group never read starts (default earliest:
    /// messages produced before the first consumer are delivered).
    pub auto_offset_reset: OffsetReset,
    /// How durable acknowledgements are when they return, as a producer's
    /// `acks`: [`Acks::All`] (default) synced (calls made at once share a
    /// sync), [`Acks::One`]/[`Acks::Zero`] written to the operating system
    /// (surviving `kill -9`, not a crash of the machine).
    pub commit_acks: Acks,
}

impl ShareConsumerConfig {
    /// A member of share group `id`, with the defaults.
    pub fn group(id: impl Into<String>) -> Self {
        ShareConsumerConfig {
            group_id: id.into(),
            client_id: "consumer".into(),
            lock_duration_ms: 30_000,
            max_deliveries: 5,
            max_in_flight: 2000,
            dead_letter_topic: None,
            max_poll_records: 500,
            auto_offset_reset: OffsetReset::Earliest,
            commit_acks: Acks::All,
        }
    }

    /// Sets `client_id`.
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = id.into();
        self
    }

    /// Sets `lock_duration_ms`.
    pub fn lock_duration_ms(mut self, ms: u64) -> Self {
        self.lock_duration_ms = ms;
        self
    }

    /// Sets `max_deliveries`.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = n;
        self
    }

    /// Sets `max_in_flight`.
    pub fn max_in_flight(mut self, n: u32) -> Self {
        self.max_in_flight = n;
        self
    }

    /// Sets `dead_letter_topic`.
    pub fn dead_letter_topic(mut self, topic: impl Into<String>) -> Self {
        self.dead_letter_topic = Some(topic.into());
        self
    }

    /// Sets `max_poll_records`.
    pub fn max_poll_records(mut self, n: usize) -> Self {
        self.max_poll_records = n;
        self
    }

    /// Sets `auto_offset_reset`.
    pub fn auto_offset_reset(mut self, reset: OffsetReset) -> Self {
        self.auto_offset_reset = reset;
        self
    }

    /// Sets `commit_acks`.
    pub fn commit_acks(mut self, acks: Acks) -> Self {
        self.commit_acks = acks;
        self
    }

    fn validate(&self) -> Result<()> {
        validate_group_id("group_id", &self.group_id)?;
        validate_group_name("client_id", &self.client_id)?;
        let bad = |s: &str| Err(Error::InvalidArgument(s.into()));
        if self.lock_duration_ms == 0 {
            return bad("lock_duration_ms must be at least 1");
        }
        if self.max_in_flight == 0 {
            return bad("max_in_flight must be at least 1");
        }
        if self.max_poll_records == 0 {
            return bad("max_poll_records must be at least 1");
        }
        if self.auto_offset_reset == OffsetReset::Error {
            return bad("a share consumer's auto_offset_reset is earliest or latest");
        }
        if let Some(t) = &self.dead_letter_topic {
            crate::topic::validate_name_or_internal(t)?;
        }
        Ok(())
    }
}

/// What a share consumer did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareConsumerStats {
    /// Messages handed out by `poll` and `poll_one` (deliveries again
    /// included; not those given back before they were handed out).
    pub records: u64,
    /// Of those, deliveries of a message delivered before.
    pub redelivered: u64,
    /// Calls to `poll` and `poll_one`.
    pub polls: u64,
    /// Messages acknowledged.
    pub acked: u64,
    /// Messages released.
    pub released: u64,
    /// Messages rejected.
    pub rejected: u64,
    /// Messages this consumer sent to the dead-letter topic (rejected, or
    /// delivered `max_deliveries` times).
    pub dead_lettered: u64,
    /// Locks found run out by this consumer's polls.
    pub expired: u64,
    /// Polls that found a partition's window full (`max_in_flight`
    /// offsets read ahead of the first not done) and did not read it.
    pub window_full: u64,
    /// Messages skipped because retention deleted them before they were
    /// delivered.
    pub skipped: u64,
}

#[derive(Debug, Default)]
struct Counters {
    acked: AtomicU64,
    released: AtomicU64,
    rejected: AtomicU64,
    dead_lettered: AtomicU64,
}

/// What a message needs to settle itself: its member.
#[derive(Debug)]
struct Member {
    group: Arc<ShareGroup>,
    id: u64,
    lock: Duration,
    acks: Acks,
    counters: Counters,
}

impl Member {
    fn settle(&self, records: &[(&str, u32, u64, u32)], action: Action) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let durable = self.acks == Acks::All;
        let settled = self.group.settle(self.id, records, &action, durable)?;
        let n = records.len() as u64;
        let c = &self.counters;
        match action {
            Action::Ack => c.acked.fetch_add(n, Ordering::Relaxed),
            Action::Release { .. } | Action::ReleaseUntil { .. } => {
                c.released.fetch_add(n, Ordering::Relaxed)
            }
            Action::Reject { .. } => c.rejected.fetch_add(n, Ordering::Relaxed),
            Action::Renew { .. } | Action::Return => 0,
        };
        c.dead_lettered
            .fetch_add(settled.dead_lettered, Ordering::Relaxed);
        let synced = !matches!(
            action,
            Action::Renew { .. } | Action::Reject { .. } | Action::Return
        );
        if durable && synced {
            self.group.sync(settled.ticket)?;
        }
        Ok(())
    }
}

/// A message delivered to a share consumer: the [`Message`] (its accessors
/// through `Deref`), how often it was delivered, and the calls that settle
/// it.
#[derive(Debug, Clone)]
pub struct ShareMessage {
    message: Message,
    delivery_count: u32,
    member: Arc<Member>,
}

impl std::ops::Deref for ShareMessage {
    type Target = Message;
    fn deref(&self) -> &Message {
        &self.message
    }
}

impl ShareMessage {
    /// The message.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// How many times it was delivered, this delivery included (1 the first
    /// time).
    pub fn delivery_count(&self) -> u32 {
        self.delivery_count
    }

    fn record(&self) -> (&str, u32, u64, u32) {
        (
            self.message.topic(),
            self.message.partition(),
            self.message.offset(),
            self.delivery_count,
        )
    }

    /// Done with: it is never delivered again.
    ///
    /// # Errors
    /// [`Error::InvalidRecordState`] if this delivery no longer holds it
    /// (its lock ran out, it was settled already); I/O errors.
    pub fn ack(&self) -> Result<()> {
        self.member.settle(&[self.record()], Action::Ack)
    }

    /// Gives it back: delivered again (to any member) now, or once `delay`
    /// has passed. The messages behind it are delivered meanwhile.
    ///
    /// # Errors
    /// As [`ack`](Self::ack).
    pub fn release(&self, delay: Duration) -> Result<()> {
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.member
            .settle(&[self.record()], Action::Release { delay_ms })
    }

    /// Gives it back until `at_ms` (wall clock, ms since the epoch): as
    /// [`release`](Self::release) with the delay that ends then, without
    /// the rounding of a delay to whole milliseconds from now.
    pub(crate) fn release_until(&self, at_ms: i64) -> Result<()> {
        self.member.settle(
            &[self.record()],
            Action::ReleaseUntil {
                not_before_ms: at_ms,
            },
        )
    }

    /// Sends it to the dead-letter topic now, with `reason` in its
    /// `mqlite.dlq.reason` header; it is never delivered again.
    ///
    /// # Errors
    /// As [`ack`](Self::ack); errors of the send to the dead-letter topic
    /// (the message is then still to be dead-lettered: the next poll tries
    /// again).
    pub fn reject(&self, reason: &str) -> Result<()> {
        self.member.settle(
            &[self.record()],
            Action::Reject {
                reason: reason.to_owned(),
            },
        )
    }

    /// Extends its lock by the consumer's `lock_duration_ms` from now.
    ///
    /// # Errors
    /// As [`ack`](Self::ack).
    pub fn renew(&self) -> Result<()> {
        self.member.settle(
            &[self.record()],
            Action::Renew {
                lock: self.member.lock,
            },
        )
    }
}

/// A member of a share group. See the [module documentation](self).
pub struct ShareConsumer {
    member: Arc<Member>,
    config: ShareConsumerConfig,
    /// Reads the log: a standalone consumer of every partition of the
    /// subscribed topics, positioned where the group reads on.
    reader: Consumer,
    /// Where the reader is, per partition, as far as this member knows.
    positions: HashMap<(String, u32), u64>,
    paused: HashSet<(String, u32)>,
    /// Messages taken from the group and not handed out yet (see
    /// [`held`]), handed out until `held_until`.
    held: VecDeque<ShareMessage>,
    held_until: Instant,
    stats: ShareConsumerStats,
    closed: bool,
}

impl std::fmt::Debug for ShareConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareConsumer")
            .field("group", &self.config.group_id)
            .field("member", &self.member.id)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl ShareConsumer {
    pub(crate) fn new(
        broker: Arc<BrokerInner>,
        config: ShareConsumerConfig,
    ) -> Result<ShareConsumer> {
        config.validate()?;
        broker.check_writable("share consumer")?;
        let reader = Consumer::new(
            Arc::clone(&broker),
            ConsumerConfig {
                client_id: config.client_id.clone(),
                auto_offset_reset: config.auto_offset_reset,
                max_poll_records: config.max_poll_records,
                enable_auto_commit: false,
                ..ConsumerConfig::default()
            },
        )?;
        let settings = Settings {
            max_deliveries: config.max_deliveries,
            max_in_flight: config.max_in_flight,
            dead_letter_topic: config.dead_letter_topic.clone(),
        };
        let group = broker
            .share_groups()
            .get(&broker, &config.group_id, settings)?;
        let id = group.join(reader.waker());
        Ok(ShareConsumer {
            member: Arc::new(Member {
                group,
                id,
                lock: Duration::from_millis(config.lock_duration_ms),
                acks: config.commit_acks,
                counters: Counters::default(),
            }),
            config,
            reader,
            positions: HashMap::default(),
            paused: HashSet::default(),
            held: VecDeque::new(),
            held_until: Instant::now(),
            stats: ShareConsumerStats::default(),
            closed: false,
        })
    }

    /// This consumer's settings.
    pub fn config(&self) -> &ShareConsumerConfig {
        &self.config
    }

    /// The share group's name.
    pub fn group_id(&self) -> &str {
        self.member.group.name()
    }

    fn check_open(&self) -> Result<()> {
        if self.closed {
            return Err(Error::Closed("share consumer"));
        }
        if self.member.group.broker_closed() {
            return Err(Error::Closed("broker"));
        }
        Ok(())
    }

    /// Takes messages from every partition of `topics`, including
    /// partitions added later; a topic that does not exist yet is read once
    /// it is created. Replaces the previous subscription.
    ///
    /// # Errors
    /// An invalid topic name (nothing changes then).
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        self.check_open()?;
        self.reader.subscribe(topics)?;
        self.give_back_held();
        self.positions.clear();
        self.paused.clear();
        Ok(())
    }

    /// Up to `max_poll_records` messages, each locked to this consumer for
    /// `lock_duration_ms`, waiting up to `timeout` for the first: messages
    /// due again (released, or whose lock ran out) first, then new ones.
    /// Messages [`poll_one`](Self::poll_one) holds are returned first
    /// (without taking more).
    ///
    /// # Errors
    /// [`Error::Closed`]; I/O errors reading the log or writing the
    /// group's state (nothing is delivered then).
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<ShareMessage>> {
        self.check_open()?;
        self.stats.polls += 1;
        let held = self.take_held();
        if !held.is_empty() {
            return Ok(held);
        }
        let got = self.fetch(timeout)?;
        self.count_handed(&got);
        Ok(got)
    }

    /// Takes up to `max_poll_records` messages from the group (see
    /// [`poll`](Self::poll)), not counted in the stats yet.
    fn fetch(&mut self, timeout: Duration) -> Result<Vec<ShareMessage>> {
        let deadline = Instant::now() + timeout;
        let max = self.config.max_poll_records;
        // A pass that moved the reader (a seek, a partition resumed, the
        // subscription taken in) may read nothing yet: a poll makes two
        // passes at least, even with no time to wait.
        let mut passes = 0;
        loop {
            passes += 1;
            // The locks of what this pass takes start after this.
            let pass_start = Instant::now();
            let assigned = self.reader.assignment();
            let prepared =
                self.member
                    .group
                    .prepare(self.member.id, &assigned, max, self.member.lock)?;
            self.stats.expired += prepared.expired;
            self.stats.dead_lettered += prepared.dead_lettered;
            let mut got = prepared.delivered;
            self.place_reader(&prepared.positions)?;
            if got.len() < max {
                let wait = if got.is_empty() {
                    let until = prepared.next_due.map_or(deadline, |d| d.min(deadline));
                    let wait = until.saturating_duration_since(Instant::now());
                    if self.member.group.is_shared() {
                        // Releases and acknowledgements of other processes
                        // wake no one here: looked for this often.
                        wait.min(SHARED_RECHECK)
                    } else {
                        wait
                    }
                } else {
                    Duration::ZERO
                };
                let read = self.reader.poll(wait)?;
                if !read.is_empty() {
                    let reads = self.split_read(read);
                    let (more, dead) = self.member.group.take_read(
                        self.member.id,
                        reads,
                        max - got.len(),
                        self.member.lock,
                    )?;
                    self.stats.dead_lettered += dead;
                    got.extend(more);
                }
            }
            if !got.is_empty() || (Instant::now() >= deadline && passes >= 2) {
                self.stats.skipped = self.reader.stats().skipped;
                self.hold_from(pass_start);
                return Ok(self.hand_out(got));
            }
            self.check_open()?;
        }
    }

    /// Moves the reader where the group reads on, and pauses partitions
    /// whose window is full.
    fn place_reader(&mut self, positions: &[((String, u32), Option<u64>, bool)]) -> Result<()> {
        for (key, next, full) in positions {
            if *full {
                self.stats.window_full += 1;
                if self.paused.insert(key.clone()) {
                    self.reader.pause(&[(key.0.as_str(), key.1)])?;
                }
                continue;
            }
            if self.paused.remove(key) {
                self.reader.resume(&[(key.0.as_str(), key.1)])?;
            }
            let Some(next) = *next else { continue };
            if self.positions.get(key) == Some(&next) {
                continue;
            }
            match self.reader.seek(&key.0, key.1, next) {
                Ok(()) => {}
                // Retention removed it: reading goes on from the start.
                Err(Error::OffsetOutOfRange { .. }) => {
                    self.reader.seek_to_beginning(&key.0, key.1)?;
                }
                Err(e) => return Err(e),
            }
            self.positions.insert(key.clone(), next);
        }
        Ok(())
    }

    /// A read's messages by partition, with where each partition's read
    /// started (as far as known); the positions move past them.
    fn split_read(&mut self, read: Vec<Message>) -> Vec<PartRead> {
        let mut by: Vec<PartRead> = Vec::new();
        for m in read {
            let key = (m.topic().to_owned(), m.partition());
            if let Some((_, _, v)) = by.iter_mut().find(|(k, _, _)| *k == key) {
                v.push(m);
            } else {
                let start = self.positions.get(&key).copied();
                by.push((key, start, vec![m]));
            }
        }
        for (key, _, v) in &by {
            if let Some(last) = v.last() {
                self.positions.insert(key.clone(), last.offset() + 1);
            }
        }
        by
    }

    fn hand_out(&self, got: Vec<Delivered>) -> Vec<ShareMessage> {
        got.into_iter()
            .map(|(message, delivery_count)| ShareMessage {
                message,
                delivery_count,
                member: Arc::clone(&self.member),
            })
            .collect()
    }

    fn records(messages: &[ShareMessage]) -> Vec<(&str, u32, u64, u32)> {
        messages.iter().map(ShareMessage::record).collect()
    }

    /// Acknowledges `messages` at once (one write, one sync): all or
    /// nothing.
    ///
    /// # Errors
    /// As [`ShareMessage::ack`]; if one is refused, none is acknowledged.
    pub fn ack(&self, messages: &[ShareMessage]) -> Result<()> {
        self.check_open()?;
        self.member.settle(&Self::records(messages), Action::Ack)
    }

    /// Releases `messages` at once (see [`ShareMessage::release`]).
    ///
    /// # Errors
    /// As [`ShareConsumer::ack`].
    pub fn release(&self, messages: &[ShareMessage], delay: Duration) -> Result<()> {
        self.check_open()?;
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.member
            .settle(&Self::records(messages), Action::Release { delay_ms })
    }

    /// Rejects `messages` at once (see [`ShareMessage::reject`]).
    ///
    /// # Errors
    /// As [`ShareMessage::reject`].
    pub fn reject(&self, messages: &[ShareMessage], reason: &str) -> Result<()> {
        self.check_open()?;
        self.member.settle(
            &Self::records(messages),
            Action::Reject {
                reason: reason.to_owned(),
            },
        )
    }

    /// Renews the locks of `messages` at once (see [`ShareMessage::renew`]).
    ///
    /// # Errors
    /// As [`ShareConsumer::ack`].
    pub fn renew(&self, messages: &[ShareMessage]) -> Result<()> {
        self.check_open()?;
        self.member.settle(
            &Self::records(messages),
            Action::Renew {
                lock: self.member.lock,
            },
        )
    }

    /// Makes the current or next `poll` return at once.
    pub fn waker(&self) -> ConsumerWaker {
        self.reader.waker()
    }

    /// What this consumer did so far.
    pub fn stats(&self) -> ShareConsumerStats {
        let c = &self.member.counters;
        ShareConsumerStats {
            acked: c.acked.load(Ordering::Relaxed),
            released: c.released.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            dead_lettered: self.stats.dead_lettered + c.dead_lettered.load(Ordering::Relaxed),
            ..self.stats
        }
    }

    /// Messages of the subscribed topics not done with by the group:
    /// deliverable, locked to a consumer, or released with a delay (what a
    /// job queue's size is).
    ///
    /// # Errors
    /// [`Error::Closed`]; a topic deleted meanwhile.
    pub fn backlog(&mut self) -> Result<ShareBacklog> {
        self.check_open()?;
        // Partitions are taken in as a poll would.
        let assigned = self.reader.assignment();
        self.member.group.backlog(
            &assigned,
            self.config.auto_offset_reset == OffsetReset::Latest,
        )
    }

    /// Leaves the group: the messages this consumer holds are delivered
    /// again (to other members). Later calls fail with [`Error::Closed`].
    pub fn close(&mut self) {
        if !self.closed {
            if !self.member.group.broker_closed() {
                self.give_back_held();
            }
            self.held.clear();
            self.closed = true;
            self.member.group.leave(self.member.id);
            self.reader.close();
        }
    }

    /// Whether [`close`](Self::close) was called, or the broker closed.
    pub fn is_closed(&self) -> bool {
        self.closed || self.member.group.broker_closed()
    }
}

impl Drop for ShareConsumer {
    fn drop(&mut self) {
        self.close();
    }
}
