//! A share group as the members of one process share it: its engine (the
//! state of its share partitions, its store, and the decisions that change
//! them: `engine.rs`) under one lock, its members' wakers, and its dead
//! letters, on the broker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::engine::{DeadLetterSink, Engine, Env, Prepared, Settled};
use super::state::{Limits, State};
use crate::broker::BrokerInner;
use crate::consumer::ConsumerWaker;
use crate::dead_letter::DeadLetters;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::offsets::journal::Syncer;
use crate::sync::lock;

pub(crate) use super::engine::{Action, Delivered, PartRead};

/// Settings every member of a group in one process shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    pub max_deliveries: u32,
    pub max_in_flight: u32,
    pub dead_letter_topic: Option<String>,
}

impl Settings {
    fn limits(&self) -> Limits {
        Limits {
            max_deliveries: self.max_deliveries,
            max_in_flight: u64::from(self.max_in_flight),
        }
    }
}

/// Messages of a share group not done yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareBacklog {
    /// Deliverable now (never delivered, released, or whose lock ran out).
    pub available: u64,
    /// Locked to a consumer.
    pub in_flight: u64,
    /// Released with a delay that has not passed yet.
    pub delayed: u64,
}

#[derive(Debug)]
struct Inner {
    /// Closed once the last member left (its file lock let go): a new
    /// member opens the group again.
    engine: Engine,
    members: HashMap<u64, ConsumerWaker>,
    next_member: u64,
    /// Dead-letter topics by source topic.
    dead: HashMap<String, DeadLetters>,
}

/// One share group of this process.
#[derive(Debug)]
pub(crate) struct ShareGroup {
    name: String,
    broker: Arc<BrokerInner>,
    /// Shared mode: this process's token (see `Store::open_shared`).
    owner: Option<u64>,
    settings: Settings,
    inner: Mutex<Inner>,
    /// The engine's group commit of syncs.
    syncer: Arc<Syncer>,
}

/// The broker as the [`Env`] of the engine's calls: whether it is open,
/// and the system's clocks.
struct BrokerEnv<'a>(&'a BrokerInner);

impl Env for BrokerEnv<'_> {
    fn check_open(&self) -> Result<()> {
        self.0.check_open()
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall_ms(&self) -> i64 {
        crate::clock::now_ms()
    }
}

/// The engine's [`Env`] during the broker's close: the broker refuses new
/// operations already, but the members' records are still to be given
/// back (see [`Registry::close_members`]).
struct ClosingEnv;

impl Env for ClosingEnv {
    fn check_open(&self) -> Result<()> {
        Ok(())
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall_ms(&self) -> i64 {
        crate::clock::now_ms()
    }
}

/// A group's dead-letter topics on the broker, opened at their first
/// send (and kept in `dead`), as the engine's [`DeadLetterSink`].
struct BrokerDeadLetters<'a> {
    group: &'a ShareGroup,
    dead: &'a mut HashMap<String, DeadLetters>,
}

impl DeadLetterSink for BrokerDeadLetters<'_> {
    fn send(&mut self, message: &Message, count: u32, reason: &str) -> Result<()> {
        let topic = message.topic();
        if let Some(d) = self.dead.get(topic) {
            return d.send(message, count, reason);
        }
        let g = self.group;
        let name = match &g.settings.dead_letter_topic {
            Some(t) => t.clone(),
            None => default_dead_letter_topic(topic, &g.name),
        };
        let d = DeadLetters::open(Arc::clone(&g.broker), &name, &g.name, "share-dlq")?;
        self.dead
            .entry(topic.to_owned())
            .or_insert(d)
            .send(message, count, reason)
    }
}

/// The share groups open in a process (one [`ShareGroup`] per name while
/// it has members).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    groups: Mutex<HashMap<String, Weak<ShareGroup>>>,
}

impl Registry {
    /// The lowest first offset not done of `topic`/`partition` among the
    /// share groups open here that read it (`None`: none holds it back).
    /// With `mover_only`, only the delayed records' mover counts, and it
    /// holds everything back (offset 0) while it is not open or has not
    /// read the partition yet.
    pub(crate) fn floor(&self, topic: &str, partition: u32, mover_only: bool) -> Option<u64> {
        let groups: Vec<Arc<ShareGroup>> = lock(&self.groups)
            .iter()
            .filter(|(n, _)| !mover_only || n.as_str() == crate::delayed::MOVER_GROUP)
            .filter_map(|(_, w)| w.upgrade())
            .collect();
        let key = (topic.to_owned(), partition);
        let floor = groups
            .iter()
            .filter_map(|g| {
                let inner = lock(&g.inner);
                if !inner.engine.is_open() {
                    return None;
                }
                match inner.engine.parts.get(&key) {
                    Some(p) => Some(p.start),
                    // A group of other topics holds nothing back here.
                    None => mover_only.then_some(0),
                }
            })
            .min();
        if mover_only {
            Some(floor.unwrap_or(0))
        } else {
            floor
        }
    }

    /// At the broker's close in shared mode, once new operations are
    /// refused: waits for the operations under way, then every member of
    /// this process leaves its group. The records they hold are stored as
    /// available for the other processes at once (a share consumer left
    /// open past its broker's close, or messages of it still referenced,
    /// would hold them in a process that lives on until their locks ran
    /// out), and each group's file is let go.
    pub(crate) fn close_members(&self) {
        for g in self.open_groups() {
            let mut inner = lock(&g.inner);
            let ids: Vec<u64> = inner.members.keys().copied().collect();
            for id in ids {
                inner.engine.leave(&ClosingEnv, id);
            }
            inner.members.clear();
            inner.engine.close();
        }
    }

    /// The share groups open in this process.
    fn open_groups(&self) -> Vec<Arc<ShareGroup>> {
        lock(&self.groups)
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Share group `name`, opened (its state read back) if no member has it
    /// open.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it is open with other settings;
    /// [`Error::Locked`] if another process uses it (exclusive mode only); I/O errors.
    pub(crate) fn get(
        &self,
        broker: &Arc<BrokerInner>,
        name: &str,
        settings: Settings,
    ) -> Result<Arc<ShareGroup>> {
        let mut groups = lock(&self.groups);
        if let Some(g) = groups
            .get(name)
            .and_then(Weak::upgrade)
            .filter(|g| lock(&g.inner).engine.is_open())
        {
            if g.settings != settings {
                return Err(Error::InvalidArgument(format!(
                    "share group {name:?} is open in this process with max_deliveries {}, \
                     max_in_flight {} and dead_letter_topic {:?}; its members must agree",
                    g.settings.max_deliveries,
                    g.settings.max_in_flight,
                    g.settings.dead_letter_topic
                )));
            }
            return Ok(g);
        }
        let owner = broker.process_token();
        let engine = Engine::open(
            broker.dir(),
            name,
            broker.file_mode(),
            owner,
            settings.limits(),
            Instant::now(),
        )?;
        let mut topics: Vec<String> = engine.parts.keys().map(|(t, _)| t.clone()).collect();
        topics.sort();
        topics.dedup();
        let g = Arc::new(ShareGroup {
            name: name.to_owned(),
            broker: Arc::clone(broker),
            owner,
            settings,
            syncer: Arc::clone(engine.syncer()),
            inner: Mutex::new(Inner {
                engine,
                members: HashMap::new(),
                next_member: 1,
                dead: HashMap::new(),
            }),
        });
        groups.retain(|_, w| w.strong_count() > 0);
        groups.insert(name.to_owned(), Arc::downgrade(&g));
        drop(groups);
        // Retention keeps what the group has not done with from now on.
        for t in &topics {
            broker.refresh_retention_floors(t);
        }
        Ok(g)
    }
}

impl ShareGroup {
    /// The group's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether the broker the group was opened on is closed.
    pub(crate) fn broker_closed(&self) -> bool {
        self.broker.is_closed()
    }

    /// The broker as the engine's calls see it.
    fn env(&self) -> BrokerEnv<'_> {
        BrokerEnv(&self.broker)
    }

    /// A new member, woken through `waker` when records it may want come
    /// back. Returns its id.
    pub(crate) fn join(&self, waker: ConsumerWaker) -> u64 {
        let mut inner = lock(&self.inner);
        let id = inner.next_member;
        inner.next_member += 1;
        inner.members.insert(id, waker);
        id
    }

    /// Member `id` leaves: the records it holds are available again.
    pub(crate) fn leave(&self, id: u64) {
        let mut inner = lock(&self.inner);
        if inner.members.remove(&id).is_none() {
            // Left already, at the broker's close.
            return;
        }
        let released = inner.engine.leave(&self.env(), id);
        if released > 0 {
            wake_others(&inner, id);
        }
        if inner.members.is_empty() {
            // Nothing is held (acquisitions are stored as available, or
            // released above): the file and its lock go, whatever messages
            // are still referenced.
            inner.engine.close();
        }
    }

    /// Whether other processes may use the group (shared mode).
    pub(crate) fn is_shared(&self) -> bool {
        self.owner.is_some()
    }

    /// Waits until what was written up to `ticket` is durable.
    ///
    /// # Errors
    /// I/O errors of the sync.
    pub(crate) fn sync(&self, ticket: u64) -> Result<()> {
        self.syncer
            .wait(ticket, || lock(&self.inner).engine.sync_target(ticket))
    }

    /// What member `id` may take before reading the log: locks that ran out
    /// are settled, records due again are delivered to it (at most `max`),
    /// and the partitions' positions and windows are reported (see
    /// [`Engine::prepare`]).
    ///
    /// # Errors
    /// A closed group or broker; I/O errors writing the store (nothing is
    /// delivered then).
    pub(crate) fn prepare(
        &self,
        id: u64,
        assigned: &[(String, u32)],
        max: usize,
        lock_for: Duration,
    ) -> Result<Prepared> {
        let mut inner = lock(&self.inner);
        let Inner { engine, dead, .. } = &mut *inner;
        let mut sink = BrokerDeadLetters { group: self, dead };
        engine.prepare(&self.env(), &mut sink, id, assigned, max, lock_for)
    }

    /// Takes, for member `id`, what a read of the log returned: per
    /// partition, the offset the read started at (if known) and the
    /// messages, in offset order. At most `max` records are delivered.
    /// Returns them, and how many records were dead-lettered.
    ///
    /// # Errors
    /// A closed group or broker; I/O errors writing the store (nothing is
    /// delivered then).
    pub(crate) fn take_read(
        &self,
        id: u64,
        reads: Vec<PartRead>,
        max: usize,
        lock_for: Duration,
    ) -> Result<(Vec<Delivered>, u64)> {
        let taken = {
            let mut inner = lock(&self.inner);
            let Inner { engine, dead, .. } = &mut *inner;
            let mut sink = BrokerDeadLetters { group: self, dead };
            engine.take_read(&self.env(), &mut sink, id, reads, max, lock_for)?
        };
        // A partition read for the first time holds retention back from
        // now on (the floor is not lowered elsewhere).
        let mut topics: Vec<&str> = taken.new_parts.iter().map(|(t, _)| t.as_str()).collect();
        topics.dedup();
        for t in topics {
            self.broker.refresh_retention_floors(t);
        }
        Ok((taken.delivered, taken.dead_lettered))
    }

    /// Applies `action` of member `id` to records it holds: `(topic,
    /// partition, offset, delivery count)`. All or nothing: if one of them
    /// is not held by this delivery (its lock ran out, it was settled
    /// already), nothing changes. With `sync_first`, a rejection is durable
    /// before its dead letters are sent.
    ///
    /// # Errors
    /// [`Error::InvalidRecordState`] as said; I/O errors writing the store;
    /// for a rejection, errors sending to the dead-letter topic (the
    /// records stay to be dead-lettered, which polls retry).
    pub(crate) fn settle(
        &self,
        id: u64,
        records: &[(&str, u32, u64, u32)],
        action: &Action,
        sync_first: bool,
    ) -> Result<Settled> {
        let mut inner = lock(&self.inner);
        let settling = inner
            .engine
            .settle(&self.env(), id, records, action, sync_first)?;
        if let Some(ticket) = settling.sync_first() {
            // Synced with the lock let go (other members' calls share the
            // sync).
            drop(inner);
            self.sync(ticket)?;
            inner = lock(&self.inner);
        }
        let Inner { engine, dead, .. } = &mut *inner;
        let mut sink = BrokerDeadLetters { group: self, dead };
        let settled = engine.finish_settle(&mut sink, settling);
        if !matches!(action, Action::Renew { .. }) {
            wake_others(&inner, id);
        }
        settled
    }

    /// How many messages of `partitions` wait for the group (see
    /// [`ShareBacklog`]), as the group knows them now. Offsets the group
    /// never read count as waiting (from the log's start, or none with
    /// `latest`); a transaction's markers among them count too.
    ///
    /// # Errors
    /// Unknown topics or partitions; a closed group.
    pub(crate) fn backlog(
        &self,
        partitions: &[(String, u32)],
        latest: bool,
    ) -> Result<ShareBacklog> {
        let mut inner = lock(&self.inner);
        let _op = inner.engine.enter(&self.env())?;
        let now_ms = crate::clock::now_ms();
        let mut b = ShareBacklog::default();
        for key in partitions {
            let log = self.broker.topic(&key.0)?.partition(key.1)?;
            let end = log.end_offset();
            let Some(part) = inner.engine.parts.get(key) else {
                if !latest {
                    b.available += end.saturating_sub(log.start_offset());
                }
                continue;
            };
            let next = part.next.min(end);
            let mut unread_known = 0;
            for (o, e) in part.entries.range(part.start..end) {
                if *o >= next {
                    unread_known += 1;
                }
                match e.state {
                    State::Acquired { .. } => b.in_flight += 1,
                    State::Available { not_before_ms } if not_before_ms > now_ms => b.delayed += 1,
                    State::Available { .. } | State::DeadLettering => b.available += 1,
                    State::Acked | State::Archived => {}
                }
            }
            b.available += (end.saturating_sub(next)).saturating_sub(unread_known);
        }
        Ok(b)
    }
}

/// The default dead-letter topic of `topic` in share group `group`:
/// `<topic>.<group>.dlq`, or, when that is too long for a topic name,
/// `<topic prefix>.dlq.<hash>`.
pub fn default_dead_letter_topic(topic: &str, group: &str) -> String {
    let name = format!("{topic}.{group}.dlq");
    if crate::topic::validate_topic_name(&name).is_ok() {
        return name;
    }
    let h = crate::log::crc::crc32c(format!("{topic}\0{group}").as_bytes());
    let keep = topic.len().min(crate::MAX_TOPIC_NAME_LEN - 16);
    format!("{}.dlq.{h:08x}", &topic[..keep])
}

fn wake_others(inner: &Inner, id: u64) {
    for (m, w) in &inner.members {
        if *m != id {
            w.wakeup();
        }
    }
}
