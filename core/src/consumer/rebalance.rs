//! Rebalance listeners (Kafka's `ConsumerRebalanceListener`), the
//! context they run with, and how a group member takes the partitions its
//! group gives it.

use super::{Consumer, ConsumerStats};
use crate::error::Result;
use crate::group::Group;
use crate::offsets::CommittedOffset;

/// What a rebalance listener may do with its consumer while it runs:
/// commit, look at and move positions, read the assignment. It is not the
/// consumer itself, so a listener cannot poll, subscribe or close from
/// inside a rebalance (calls that would start another one).
#[derive(Debug)]
pub struct RebalanceContext<'a> {
    consumer: &'a mut Consumer,
}

impl<'a> RebalanceContext<'a> {
    pub(crate) fn new(consumer: &'a mut Consumer) -> Self {
        RebalanceContext { consumer }
    }

    /// The consumer, for the engine's own listeners.
    pub(crate) fn consumer(&mut self) -> &mut Consumer {
        self.consumer
    }

    /// The partitions the consumer reads now (during `on_revoke`, the
    /// revoked ones are still among them).
    pub fn assignment(&self) -> Vec<(String, u32)> {
        self.consumer.assignment()
    }

    /// [`Consumer::commit`]: the positions of every partition read.
    pub fn commit(&mut self) -> Result<()> {
        self.consumer.commit()
    }

    /// [`Consumer::commit_offsets`].
    pub fn commit_offsets(&mut self, offsets: &[(&str, u32, u64, &str)]) -> Result<()> {
        self.consumer.commit_offsets(offsets)
    }

    /// [`Consumer::committed`].
    pub fn committed(&self, topic: &str, partition: u32) -> Result<Option<CommittedOffset>> {
        self.consumer.committed(topic, partition)
    }

    /// [`Consumer::position`].
    pub fn position(&mut self, topic: &str, partition: u32) -> Result<u64> {
        self.consumer.position(topic, partition)
    }

    /// [`Consumer::seek`].
    pub fn seek(&mut self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        self.consumer.seek(topic, partition, offset)
    }

    /// [`Consumer::seek_to_beginning`].
    pub fn seek_to_beginning(&mut self, topic: &str, partition: u32) -> Result<()> {
        self.consumer.seek_to_beginning(topic, partition)
    }

    /// [`Consumer::seek_to_end`].
    pub fn seek_to_end(&mut self, topic: &str, partition: u32) -> Result<()> {
        self.consumer.seek_to_end(topic, partition)
    }

    /// [`Consumer::offsets_for_times`].
    pub fn offsets_for_times(&self, query: &[(&str, u32, i64)]) -> Result<Vec<Option<u64>>> {
        self.consumer.offsets_for_times(query)
    }

    /// [`Consumer::lag`].
    pub fn lag(&mut self) -> Result<Vec<(String, u32, u64)>> {
        self.consumer.lag()
    }

    /// [`Consumer::pause`].
    pub fn pause(&mut self, partitions: &[(&str, u32)]) -> Result<()> {
        self.consumer.pause(partitions)
    }

    /// [`Consumer::resume`].
    pub fn resume(&mut self, partitions: &[(&str, u32)]) -> Result<()> {
        self.consumer.resume(partitions)
    }

    /// [`Consumer::paused`].
    pub fn paused(&self) -> Vec<(String, u32)> {
        self.consumer.paused()
    }

    /// [`Consumer::store_offsets`].
    pub fn store_offsets(&mut self, offsets: &[(&str, u32, u64)]) -> Result<()> {
        self.consumer.store_offsets(offsets)
    }

    /// [`Consumer::member_id`].
    pub fn member_id(&self) -> Option<&str> {
        self.consumer.member_id()
    }

    /// [`Consumer::stats`].
    pub fn stats(&self) -> ConsumerStats {
        self.consumer.stats()
    }

    /// [`Consumer::waker`].
    pub fn waker(&self) -> super::ConsumerWaker {
        self.consumer.waker()
    }
}

/// Called when a group member's partitions change (Kafka's
/// `ConsumerRebalanceListener`). Each runs inside `poll` (or `subscribe`,
/// `assign`, `close`), on the consumer's thread, with a
/// [`RebalanceContext`]: commit in `on_revoke` to hand over exactly what
/// was processed, seek in `on_assign` to start somewhere of your own.
pub trait RebalanceListener: Send {
    /// The consumer now owns `partitions` (its positions start at the
    /// group's committed offsets).
    fn on_assign(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        let _ = (ctx, partitions);
    }

    /// The consumer is about to give up `partitions`: they go to another
    /// member once this returns. Messages fetched for them and not handed
    /// out yet were dropped; their positions are what was handed out.
    fn on_revoke(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        let _ = (ctx, partitions);
    }

    /// The consumer has already lost `partitions` (Kafka's
    /// `onPartitionsLost`): it was removed from the group for not polling
    /// within `max_poll_interval_ms`, and the group may have handed them
    /// to other members already. Unlike [`on_revoke`](Self::on_revoke),
    /// nothing can be committed for them any more: they are no longer in
    /// the assignment (so [`RebalanceContext::commit`] has nothing to
    /// commit), a [`RebalanceContext::commit_offsets`] for them fails with
    /// [`Error::CommitFailed`](crate::Error::CommitFailed), and no
    /// auto-commit runs. Drop the state kept for them. The consumer then
    /// joins the group again.
    ///
    /// The default calls `on_revoke`, as Kafka's does, so that clean-up
    /// written there runs in both cases.
    fn on_lost(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.on_revoke(ctx, partitions);
    }
}

impl Consumer {
    /// Takes the partitions the group gave this member (`acquired`) and
    /// those whose logs did not open before: each starts at the group's
    /// committed offset, and the listener hears of those that opened. A
    /// partition whose log does not open stays this member's (the group
    /// records it as owned, so nobody else reads it) and is tried again at
    /// the next sync rather than dropped.
    pub(super) fn take_acquired(&mut self, group: &Group, id: &str, acquired: Vec<(String, u32)>) {
        let retries = self
            .member
            .as_mut()
            .map(|m| std::mem::take(&mut m.unopened))
            .unwrap_or_default();
        if acquired.is_empty() && retries.is_empty() {
            return;
        }
        let mut opened = Vec::new();
        let mut unopened = Vec::new();
        let tries = acquired
            .into_iter()
            .map(|tp| (tp, false))
            .chain(retries.into_iter().map(|tp| (tp, true)));
        for ((t, p), retry) in tries {
            match self.broker().topic(&t).and_then(|topic| {
                let log = topic.partition(p)?;
                Ok((topic, log))
            }) {
                Ok(found) => opened.push(((t, p), found)),
                Err(e) => {
                    if !retry {
                        ::log::warn!(
                            "consumer {id} of group {}: {t}/{p} was assigned but does not open ({e}); \
                             it is tried again at every poll",
                            group.name()
                        );
                    }
                    unopened.push((t, p));
                }
            }
        }
        if let Some(m) = &mut self.member {
            m.unopened = unopened;
        }
        if opened.is_empty() {
            return;
        }
        self.put_back();
        let mut names = Vec::with_capacity(opened.len());
        for ((t, p), (topic, log)) in opened {
            let mut a = self.keep_or_new(topic, log);
            a.restart(group.resume(&t, p));
            self.assigned.push(a);
            names.push((t, p));
        }
        if let Some(mut l) = self.listener.take() {
            l.on_assign(&mut RebalanceContext::new(self), &names);
            self.listener = Some(l);
        }
    }
}
