//! One-message consumption ([`Consumer::poll_one`]): the messages a poll
//! fetched and the consumer holds until it hands them out, one per call.
//!
//! The consumer fetches a poll's worth (up to `max_poll_records`) and hands
//! the messages out in the order `poll` would return them. Positions,
//! commits and lag count only what was handed out: a partition with held
//! messages is at its next message to hand out
//! ([`Assigned::visible_position`]), so a commit after every message commits
//! exactly that message plus one, and costs no fetch.
//!
//! Whatever changes the assignment or a position puts held messages back
//! first ([`Consumer::put_back`]): their partitions go back to the first of
//! them and are read again by the next fetch. A rebalance therefore drops
//! the held messages of a revoked partition, and its new owner starts from
//! the committed offset, as with Kafka's consumer.
//!
//! Handing out a held message checks, with one atomic load, whether the
//! group changed since the member last brought itself in line with it, and
//! every [`MAINTENANCE`] (or when an auto-commit is due) does the work of a
//! poll: a member that holds messages takes part in rebalances at its next
//! call, whatever it holds.
//!
//! The broker drops every consumer's held messages at close
//! ([`Held::clear`]), so that once it is closed no file stays mapped but for
//! messages the application itself holds.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::partition::Assigned;
use super::Consumer;
use crate::error::Result;
use crate::message::{Message, Sink};
use crate::sync;

/// How often a consumer that holds messages does the work of a poll
/// (heartbeat to its group, topic changes) while it hands them out.
pub(super) const MAINTENANCE: Duration = Duration::from_millis(100);

/// Fetched messages not yet handed out, each with the index of its partition
/// in the consumer's assignment.
#[derive(Debug, Default)]
pub(crate) struct Held {
    queue: Mutex<VecDeque<(u32, Message)>>,
}

impl Held {
    fn lock(&self) -> MutexGuard<'_, VecDeque<(u32, Message)>> {
        sync::lock(&self.queue)
    }

    /// Drops every held message (the broker closes), outside the lock.
    pub(crate) fn clear(&self) {
        drop(std::mem::take(&mut *self.lock()));
    }
}

impl Assigned {
    /// The next offset to hand out: that of the first held message, or the
    /// read position when none is held.
    #[inline]
    pub(super) fn visible_position(&self) -> Option<u64> {
        if self.held > 0 {
            Some(self.handed)
        } else {
            self.position
        }
    }

    /// Counts held message `m` of this partition as handed out.
    #[inline]
    fn handed_out(&mut self, m: &Message) {
        self.held -= 1;
        self.handed = m.offset() + 1;
    }

    /// Goes back to the first held message (the next fetch reads it again).
    pub(super) fn put_back(&mut self) {
        if self.held == 0 {
            return;
        }
        self.held = 0;
        self.position = Some(self.handed);
        self.forget_cursor();
        self.next_base = None;
    }
}

impl Consumer {
    /// Returns the next message, waiting up to `timeout` for one; `None`
    /// when the timeout passed (or [`ConsumerWaker::wakeup`] was called).
    ///
    /// It fetches what [`poll`](Self::poll) would return, holds it, and
    /// hands it out one message per call, so a loop over `poll_one` costs
    /// little more per message than one over `poll`. Positions, commits,
    /// lag and stats count only the messages handed out, so
    /// "`poll_one`, process, [`commit`](Self::commit)" commits exactly what
    /// was processed. A group member takes part in rebalances at every
    /// call, whatever it holds: held messages of a revoked partition are
    /// dropped and its new owner reads them from the committed offset.
    /// `poll` and `poll_batch` return the held messages first.
    ///
    /// [`ConsumerWaker::wakeup`]: super::ConsumerWaker::wakeup
    pub fn poll_one(&mut self, timeout: Duration) -> Result<Option<Message>> {
        #[cfg(feature = "kafka")]
        if self.kafka.is_some() {
            return self.cluster_poll(timeout, crate::kafka::KafkaConsumer::poll_one);
        }
        match self.next_held() {
            Some(m) => Ok(Some(m)),
            None => self.poll_one_slow(timeout),
        }
    }

    /// [`poll_one`](Self::poll_one) when it can return at once without any
    /// work but handing out a held message: no fetch, no wait, no commit
    /// or rebalance due. `None` otherwise (the consumer may still hold
    /// messages: `poll_one` hands them out). For callers that do the rest
    /// of a poll elsewhere, such as a binding that releases its own lock
    /// for it.
    #[inline]
    pub fn next_held(&mut self) -> Option<Message> {
        on_cluster!(self, k => k.next_held());
        if !self.fresh() {
            return None;
        }
        let m = self.hand_out()?;
        self.stats.polls += 1;
        Some(m)
    }

    /// Whether a held message can be handed out without the work of a poll.
    #[inline]
    fn fresh(&self) -> bool {
        !self.closed
            && !self.broker().is_closed()
            && self
                .member
                .as_ref()
                .is_none_or(|m| m.group.epoch() == m.epoch)
            && self.maintain_at.is_none_or(|at| Instant::now() < at)
    }

    /// Hands out the first held message.
    #[inline]
    fn hand_out(&mut self) -> Option<Message> {
        let (i, m) = self.held.lock().pop_front()?;
        self.assigned[i as usize].handed_out(&m);
        self.stats.records += 1;
        self.stats.bytes += m.payload_len();
        Some(m)
    }

    #[cold]
    fn poll_one_slow(&mut self, timeout: Duration) -> Result<Option<Message>> {
        self.check_open()?;
        self.stats.polls += 1;
        self.poll_prologue()?;
        if let Some(m) = self.hand_out() {
            return Ok(Some(m));
        }
        let mut got: Vec<Message> = Vec::new();
        self.poll_wait(timeout, &mut got)?;
        self.hold(got);
        Ok(self.hand_out())
    }

    /// Holds what a fetch returned (nothing is held).
    fn hold(&mut self, got: Vec<Message>) {
        let mut queue = self.held.lock();
        let mut at = usize::MAX;
        for m in got {
            // A fetch takes each partition's messages in one run.
            let same = self.assigned.get(at).is_some_and(|a| {
                a.log.partition() == m.partition() && **a.topic.name() == *m.topic()
            });
            if !same {
                let Some(i) = self.assigned.iter().position(|a| {
                    a.log.partition() == m.partition() && **a.topic.name() == *m.topic()
                }) else {
                    continue;
                };
                at = i;
            }
            let a = &mut self.assigned[at];
            if a.held == 0 {
                a.handed = m.offset();
            }
            a.held += 1;
            queue.push_back((at as u32, m));
        }
    }

    /// Moves held messages (up to `max_poll_records`) into a poll's sink.
    /// Returns whether there were any.
    pub(super) fn drain_held<S: Sink>(&mut self, out: &mut S) -> bool {
        let mut queue = self.held.lock();
        if queue.is_empty() {
            return false;
        }
        let n = queue.len().min(self.config.max_poll_records);
        out.reserve(n);
        for (i, m) in queue.drain(..n) {
            self.assigned[i as usize].handed_out(&m);
            m.push_into(out);
        }
        true
    }

    /// Puts every held message back (see the module documentation): called
    /// before anything changes the assignment.
    pub(super) fn put_back(&mut self) {
        let mut queue = self.held.lock();
        if queue.is_empty() {
            return;
        }
        queue.clear();
        drop(queue);
        for a in &mut self.assigned {
            a.put_back();
        }
    }

    /// Puts back the held messages of one partition (before a seek of it).
    pub(super) fn put_back_partition(&mut self, i: usize) {
        if self.assigned[i].held == 0 {
            return;
        }
        let i32 = i as u32;
        self.held.lock().retain(|(j, _)| *j != i32);
        self.assigned[i].put_back();
    }

    /// When the next held message must wait for the work of a poll: for a
    /// consumer that has a group or a pattern (heartbeats, auto-commit,
    /// topic changes), [`MAINTENANCE`] from now or the next auto-commit.
    pub(super) fn schedule_maintenance(&mut self) {
        if self.offsets.is_none() && self.pattern.is_none() {
            self.maintain_at = None;
            return;
        }
        let mut at = Instant::now() + MAINTENANCE;
        if self.config.enable_auto_commit && self.offsets.is_some() {
            let every = Duration::from_millis(self.config.auto_commit_interval_ms);
            at = at.min(self.last_auto_commit + every);
        }
        self.maintain_at = Some(at);
        if let Some(m) = &mut self.member {
            // Read before the group sync that follows: a change made
            // meanwhile is seen at the next call.
            m.epoch = m.group.epoch();
        }
    }
}
