//! Where a record goes: the partition chosen for it (explicit, by key, by
//! the application's sequence, or by the partitioner) and the topic's
//! partitions, found through a one-entry cache per thread.

use std::sync::Arc;

use super::{partition_for_key, BorrowedRecord, Inner, Partitioner};
use crate::broker::BrokerInner;
use crate::error::{Error, Result};
use crate::log::PartitionLog;
use crate::partition_handle::PartitionHandle;
use crate::topic::Topic;

/// A topic's partition list.
pub(super) type Partitions = Arc<TopicLogs>;

/// A topic's partitions as a producer sends to them: each partition's log
/// is opened on its first use (a first send to one partition of a topic of
/// thousands opens that one).
pub(crate) struct TopicLogs {
    topic: Arc<Topic>,
    handles: Arc<Vec<Arc<PartitionHandle>>>,
}

impl TopicLogs {
    /// The partitions of `topic` as they are now.
    pub(crate) fn of(topic: Arc<Topic>) -> TopicLogs {
        let handles = topic.handles();
        topic.refresh_open(&handles);
        TopicLogs { topic, handles }
    }

    /// The topic's name.
    #[inline]
    pub(crate) fn name(&self) -> &Arc<str> {
        self.topic.name()
    }

    /// Number of partitions.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.handles.len()
    }

    /// Partition `p`'s log, opened if this is its first use.
    ///
    /// # Errors
    /// `UnknownPartition`; the error of its open.
    #[inline]
    pub(crate) fn get(&self, p: u32) -> Result<&Arc<PartitionLog>> {
        match self.handles.get(p as usize).and_then(|h| h.log()) {
            Some(log) => Ok(log),
            None => self.open(p),
        }
    }

    #[cold]
    #[inline(never)]
    fn open(&self, p: u32) -> Result<&Arc<PartitionLog>> {
        let Some(h) = self.handles.get(p as usize) else {
            return Err(Error::UnknownPartition {
                topic: self.name().to_string(),
                partition: p,
                count: self.len() as u32,
            });
        };
        self.topic.open_handle(p, h)?;
        h.log().ok_or(Error::Closed("topic"))
    }
}

/// Where a record goes: a partition of a topic's partition list.
pub(super) struct Route {
    pub(super) parts: Lent,
    pub(super) partition: u32,
}

impl Route {
    /// The partition's log (opened if this is its first use).
    ///
    /// # Errors
    /// As [`TopicLogs::get`].
    #[inline]
    pub(super) fn log(&self) -> Result<&Arc<PartitionLog>> {
        self.parts.parts().get(self.partition)
    }
}

/// Whether an append's error is a fault of its partition, after which a
/// key-less record may be sent elsewhere: the append wrote nothing.
pub(super) fn is_partition_fault(e: &Error) -> bool {
    matches!(
        e,
        Error::Poisoned { .. } | Error::DiskFull { .. } | Error::Io { .. }
    )
}

/// The last topic this thread sent to, for [`Inner::partitions_of`].
struct CachedTopic {
    broker: std::sync::Weak<BrokerInner>,
    /// The broker's topics version when this was looked up.
    version: u64,
    name: Arc<str>,
    /// Its partitions; `None` while lent to a [`Lent`].
    parts: Option<Partitions>,
    /// Told apart from the entry it replaced.
    generation: u64,
}

thread_local! {
    static LAST_TOPIC: std::cell::RefCell<Option<CachedTopic>> =
        const { std::cell::RefCell::new(None) };
}

/// A topic's partitions taken from this thread's cache: given back to it
/// when dropped (a move each way instead of a reference count up and down).
pub(super) struct Lent {
    parts: Option<Partitions>,
    /// The cache entry to give them back to.
    generation: Option<u64>,
}

impl Lent {
    #[inline]
    pub(super) fn parts(&self) -> &Partitions {
        self.parts.as_ref().expect("held until dropped")
    }
}

impl Drop for Lent {
    #[inline]
    fn drop(&mut self) {
        let (Some(generation), Some(parts)) = (self.generation, self.parts.take()) else {
            return;
        };
        let _ = LAST_TOPIC.try_with(move |c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                if let Some(e) = c.as_mut() {
                    if e.generation == generation && e.parts.is_none() {
                        e.parts = Some(parts);
                    }
                }
            }
        });
    }
}

/// Empties this thread's topic cache (a deleted topic or a closed broker
/// should not be kept alive by it).
pub(crate) fn forget_cached_topic() {
    let _ = LAST_TOPIC.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            *c = None;
        }
    });
}

impl Inner {
    /// Chooses the partition of `r` among `count` (not checked against it).
    pub(super) fn choose(
        &self,
        topic: &Arc<str>,
        count: u32,
        r: &BorrowedRecord<'_>,
        size_hint: impl FnOnce() -> usize,
    ) -> Result<u32> {
        Ok(match r.partition {
            Some(p) => p,
            None => match &self.config.partitioner {
                Partitioner::Custom(select) => {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| select(r, count)))
                        .map_err(|_| {
                            Error::InvalidArgument("the partition selector panicked".into())
                        })?
                }
                _ if r.key.is_some() => partition_for_key(r.key.unwrap_or_default(), count),
                // Records with the application's sequences go where a
                // re-send of them will go too, so it is recognised.
                _ if r.sequence.is_some() => {
                    (r.sequence.unwrap_or(0).unsigned_abs() % u64::from(count)) as u32
                }
                Partitioner::RoundRobin => {
                    self.avoided
                        .steer(topic, count, self.chooser.round_robin(count))
                }
                Partitioner::Sticky => {
                    let p = self
                        .chooser
                        .sticky(topic, count, size_hint(), self.config.batch_size);
                    self.avoided.steer(topic, count, p)
                }
            },
        })
    }

    /// Whether `r` may go to another partition after a partition fault:
    /// no key, no explicit partition, no application sequence, and a
    /// built-in partitioner (a custom selector's choice is the
    /// application's).
    #[inline]
    pub(super) fn movable(&self, r: &BorrowedRecord<'_>) -> bool {
        r.key.is_none()
            && r.partition.is_none()
            && r.sequence.is_none()
            && !matches!(self.config.partitioner, Partitioner::Custom(_))
    }

    /// Puts `partition` of `topic` on the avoid list after a fault, for
    /// `fault_backoff_ms`; the sticky choice moves on from it.
    pub(super) fn note_fault(&self, topic: &Arc<str>, partition: u32) {
        let backoff = std::time::Duration::from_millis(self.config.fault_backoff_ms);
        if self.avoided.avoid(topic, partition, backoff) {
            self.stats.avoided();
        }
        self.chooser.batch_sent(topic, partition);
    }

    /// Chooses the partition of `r`.
    pub(super) fn route(
        &self,
        r: &BorrowedRecord<'_>,
        size_hint: impl FnOnce() -> usize,
    ) -> Result<Route> {
        let parts = self.partitions_of(r.topic)?;
        let partition = self.partition_in(&parts, r, size_hint)?;
        Ok(Route { parts, partition })
    }

    /// Chooses the partition of `r` among `parts` (the topic's).
    #[inline(always)]
    pub(super) fn partition_in(
        &self,
        parts: &Lent,
        r: &BorrowedRecord<'_>,
        size_hint: impl FnOnce() -> usize,
    ) -> Result<u32> {
        let count = parts.parts().len() as u32;
        let partition = self.choose(parts.parts().name(), count, r, size_hint)?;
        if partition >= count {
            return Err(Error::UnknownPartition {
                topic: r.topic.to_owned(),
                partition,
                count,
            });
        }
        Ok(partition)
    }

    /// The partitions of topic `name`, through a one-entry cache per thread
    /// (most producers send to one topic from each thread): no lock, no
    /// hashing and no reference count on a hit. The broker's topics version
    /// (bumped by deletes, growth and close) says when to look again; a
    /// `Weak` to the broker keeps its allocation, so a new broker is never
    /// mistaken for a dropped one at the same address. The cache holds the
    /// partitions of one topic until this thread sends to another topic or
    /// exits, or deletes that topic or closes its broker (see
    /// docs/decisions.md).
    #[inline(always)]
    pub(super) fn partitions_of(&self, name: &str) -> Result<Lent> {
        let version = self.broker.topics_version();
        let hit = LAST_TOPIC.try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            let e = c.as_mut()?;
            if e.broker.as_ptr() != Arc::as_ptr(&self.broker)
                || e.version != version
                || &*e.name != name
            {
                return None;
            }
            // None when lent already (a send from a callback inside a send):
            // that one looks the topic up.
            let parts = e.parts.take()?;
            Some(Lent {
                parts: Some(parts),
                generation: Some(e.generation),
            })
        });
        if let Ok(Some(lent)) = hit {
            return Ok(lent);
        }
        self.look_up_partitions(name, version)
    }

    /// [`Inner::partitions_of`] on a cache miss: looks the topic up and
    /// makes it this thread's cached topic.
    #[cold]
    #[inline(never)]
    fn look_up_partitions(&self, name: &str, version: u64) -> Result<Lent> {
        let topic = match self.broker.topic_or_create(name) {
            Ok(t) => t,
            Err(e) => {
                forget_cached_topic();
                return Err(e);
            }
        };
        let name = Arc::clone(topic.name());
        let parts = Arc::new(TopicLogs::of(topic));
        let generation = LAST_TOPIC.try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            let generation = c.as_ref().map_or(0, |e| e.generation + 1);
            *c = Some(CachedTopic {
                broker: Arc::downgrade(&self.broker),
                version,
                name,
                parts: None,
                generation,
            });
            Some(generation)
        });
        Ok(Lent {
            parts: Some(parts),
            generation: generation.ok().flatten(),
        })
    }
}
