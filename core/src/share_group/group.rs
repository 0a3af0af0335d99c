//! A share group as the members of one process share it: the state of its
//! share partitions, its store, its dead letters, and the decisions that
//! change them, made under one lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::state::{is_foreign, Change, Delivery, Entry, Limits, Part, State, FOREIGN};
use super::store::{OpLock, Ops, Parts, Store};
use crate::broker::BrokerInner;
use crate::consumer::ConsumerWaker;
use crate::dead_letter::DeadLetters;
use crate::error::{Error, IoContext, Result};
use crate::message::Message;
use crate::offsets::journal::Syncer;
use crate::sync::lock;

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

/// What a member does with messages it holds.
#[derive(Debug, Clone)]
pub(crate) enum Action {
    Ack,
    Release {
        delay_ms: u64,
    },
    Reject {
        reason: String,
    },
    Renew {
        lock: Duration,
    },
    /// Gives back records the consumer fetched but never handed to the
    /// application: available now, their delivery not counted.
    Return,
    /// Gives records back until a wall-clock time (ms since the epoch).
    ReleaseUntil {
        not_before_ms: i64,
    },
}

/// A read of one partition: the partition, the offset the read started
/// at (if known), the messages it returned.
pub(crate) type PartRead = ((String, u32), Option<u64>, Vec<Message>);

/// A message a member was given, and how often it was delivered.
pub(crate) type Delivered = (Message, u32);

/// What [`ShareGroup::prepare`] gives a polling member.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    /// Records delivered again.
    pub delivered: Vec<Delivered>,
    /// Per assigned partition: where reading goes on (`None`: nothing read
    /// yet, the reset policy decides) and whether its window is full.
    pub positions: Vec<((String, u32), Option<u64>, bool)>,
    /// When something changes by itself next (a lock runs out, a delayed
    /// record is due).
    pub next_due: Option<Instant>,
    /// Locks that ran out, and records dead-lettered, in this call.
    pub expired: u64,
    pub dead_lettered: u64,
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

/// Counts of one call that changed records.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Settled {
    pub dead_lettered: u64,
    /// Ticket of the store's group commit for this call's record.
    pub ticket: u64,
}

#[derive(Debug)]
struct Inner {
    parts: Parts,
    /// `None` once the last member left: the group is closed (its file
    /// lock let go), and a new member opens it again.
    store: Option<Store>,
    members: HashMap<u64, ConsumerWaker>,
    next_member: u64,
    /// Dead-letter topics by source topic.
    dead: HashMap<String, Arc<DeadLetters>>,
    /// Shared mode: when to look next whether the processes holding
    /// records still live.
    next_liveness_check: Instant,
}

/// How often a poll in shared mode looks whether the processes holding
/// records still live (the records of one that exited are available at
/// once, without waiting for their locks to run out).
const LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// One share group of this process.
#[derive(Debug)]
pub(crate) struct ShareGroup {
    name: String,
    broker: Arc<BrokerInner>,
    /// Shared mode: this process's token (see [`Store::open_shared`]).
    owner: Option<u64>,
    settings: Settings,
    inner: Mutex<Inner>,
    syncer: Arc<Syncer>,
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
                inner.store.as_ref()?;
                match inner.parts.get(&key) {
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
            .filter(|g| lock(&g.inner).store.is_some())
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
        let (store, parts) = match owner {
            Some(token) => Store::open_shared(broker.dir(), name, broker.file_mode(), token)?,
            None => Store::open(broker.dir(), name, broker.file_mode())?,
        };
        let mut topics: Vec<String> = parts.keys().map(|(t, _)| t.clone()).collect();
        topics.sort();
        topics.dedup();
        let g = Arc::new(ShareGroup {
            name: name.to_owned(),
            broker: Arc::clone(broker),
            owner,
            settings,
            inner: Mutex::new(Inner {
                parts,
                store: Some(store),
                members: HashMap::new(),
                next_member: 1,
                dead: HashMap::new(),
                next_liveness_check: Instant::now(),
            }),
            syncer: Arc::new(Syncer::default()),
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
        inner.members.remove(&id);
        if self.owner.is_some() {
            // Other processes learn it from the file (if it cannot be
            // written, the locks run out).
            if let Err(e) = self.store_release_of(&mut inner, id) {
                ::log::warn!(
                    "share group {:?}: releasing a member's records: {e}",
                    self.name
                );
            }
        }
        let mut released = 0;
        for p in inner.parts.values_mut() {
            released += p.release_member(id);
        }
        if released > 0 {
            wake_others(&inner, id);
        }
        if inner.members.is_empty() {
            // Nothing is held (acquisitions are stored as available, or
            // released above): the file and its lock go, whatever messages
            // are still referenced.
            inner.store = None;
            inner.parts.clear();
        }
    }

    /// Shared mode: stores the records member `id` holds as available.
    fn store_release_of(&self, inner: &mut Inner, id: u64) -> Result<()> {
        let _op = self.enter(inner)?;
        let mut ops = self.ops();
        for ((t, p), part) in &inner.parts {
            let changes: Vec<Change> = part
                .entries
                .iter()
                .filter(|(_, e)| matches!(e.state, State::Acquired { member, .. } if member == id))
                .map(|(o, e)| Change {
                    offset: *o,
                    entry: Entry {
                        state: State::Available { not_before_ms: 0 },
                        ..e.clone()
                    },
                })
                .collect();
            ops.changes(t, *p, &changes);
        }
        append(inner.store.as_mut(), &ops).map(|_| ())
    }

    /// The store, unless the group or the broker was closed.
    fn store(&self, inner: &mut Inner) -> Result<()> {
        self.broker.check_open()?;
        if inner.store.is_none() {
            return Err(Error::Closed("share group"));
        }
        Ok(())
    }

    /// Begins an operation on the group's state (under its mutex): the
    /// store must be open, and in shared mode the state file's lock is
    /// taken and what other processes wrote is read in (see
    /// [`Store::enter`]); the lock is held until the guard returned is
    /// dropped, which must happen before the mutex is let go.
    ///
    /// # Errors
    /// A closed group or broker; I/O errors reading the state file.
    fn enter(&self, inner: &mut Inner) -> Result<Option<OpLock>> {
        self.store(inner)?;
        let Inner { store, parts, .. } = inner;
        match store.as_mut() {
            Some(s) => s.enter(parts),
            None => Err(Error::Closed("share group")),
        }
    }

    /// Shared mode: makes the records held by processes that exited
    /// available (their delivery counted), at most every
    /// [`LIVENESS_CHECK`]. Nothing is written: read back, their
    /// acquisitions say the same.
    fn release_dead_holders(&self, inner: &mut Inner, now: Instant) {
        if self.owner.is_none() || now < inner.next_liveness_check {
            return;
        }
        inner.next_liveness_check = now + LIVENESS_CHECK;
        let mut holders: Vec<u64> = inner
            .parts
            .values()
            .flat_map(|p| p.entries.values())
            .filter_map(|e| match e.state {
                State::Acquired { member, .. } if is_foreign(member) => Some(member),
                _ => None,
            })
            .collect();
        holders.sort_unstable();
        holders.dedup();
        for member in holders {
            if !crate::shared::process_alive(self.broker.dir(), member & !FOREIGN) {
                for p in inner.parts.values_mut() {
                    p.release_member(member);
                }
            }
        }
    }

    /// Operations to store, as this group stores them.
    fn ops(&self) -> Ops {
        Ops::new(self.owner)
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
        self.syncer.wait(ticket, || match &lock(&self.inner).store {
            Some(s) => s.sync_target(),
            None => (None, std::path::PathBuf::new(), ticket),
        })
    }

    /// The group locked for a delivery to member `id`, locks taken now
    /// running for `lock_for`; and now.
    ///
    /// # Errors
    /// A closed group or broker.
    fn begin(
        &self,
        id: u64,
        lock_for: Duration,
    ) -> Result<(
        std::sync::MutexGuard<'_, Inner>,
        Option<OpLock>,
        Delivery,
        Instant,
    )> {
        let mut inner = lock(&self.inner);
        let op = self.enter(&mut inner)?;
        let now = Instant::now();
        let to = Delivery {
            member: id,
            deadline: now + lock_for,
            now_ms: crate::clock::now_ms(),
        };
        Ok((inner, op, to, now))
    }

    /// What member `id` may take before reading the log: locks that ran out
    /// are settled, records due again are delivered to it (at most `max`),
    /// and the partitions' positions and windows are reported.
    ///
    /// # Errors
    /// I/O errors writing the store (nothing is delivered then).
    pub(crate) fn prepare(
        &self,
        id: u64,
        assigned: &[(String, u32)],
        max: usize,
        lock_for: Duration,
    ) -> Result<Prepared> {
        let (mut inner, _op, to, now) = self.begin(id, lock_for)?;
        self.release_dead_holders(&mut inner, now);
        let limits = self.settings.limits();
        let mut out = Prepared::default();
        let mut ops = self.ops();
        let mut decided: Vec<((String, u32), Vec<Change>)> = Vec::new();
        let mut taken = 0usize;
        for key in assigned {
            let Some(part) = inner.parts.get_mut(key) else {
                out.positions.push((key.clone(), None, false));
                continue;
            };
            let expired = part.expired(now, limits);
            out.expired += expired.len() as u64;
            part.apply(expired);
            let changes = part.redeliverable(to, max.saturating_sub(taken), limits);
            if !changes.is_empty() {
                taken += changes
                    .iter()
                    .filter(|c| matches!(c.entry.state, State::Acquired { .. }))
                    .count();
                // Stored (again) before the send: one that a lock running
                // out made is not stored yet.
                ops.changes(&key.0, key.1, &changes);
                decided.push((key.clone(), changes));
            }
        }
        start_ops(&mut inner.parts, &mut ops);
        append(inner.store.as_mut(), &ops)?;
        mark_starts_stored(&mut inner.parts);
        for (key, changes) in decided {
            for c in &changes {
                if let (State::Acquired { member, .. }, Some(m)) = (c.entry.state, &c.entry.message)
                {
                    if member != id {
                        continue;
                    }
                    out.delivered.push((m.clone(), c.entry.count));
                }
            }
            if let Some(p) = inner.parts.get_mut(&key) {
                p.apply(changes.clone());
            }
            out.dead_lettered += self.settle_dead_letters(&mut inner, &key, &changes);
        }
        let mut lock_due: Option<Instant> = None;
        let mut wall_due: Option<i64> = None;
        for key in assigned {
            let Some(p) = inner.parts.get_mut(key) else {
                continue;
            };
            p.advance();
            let (l, w) = p.next_due();
            lock_due = min_opt(lock_due, l);
            wall_due = min_opt(wall_due, w);
            out.positions
                .push((key.clone(), Some(p.next), p.window_full(limits)));
        }
        let wall = wall_due.map(|d| {
            now + Duration::from_millis(u64::try_from(d.saturating_sub(to.now_ms)).unwrap_or(0))
        });
        out.next_due = min_opt(lock_due, wall);
        self.maybe_compact(&mut inner);
        Ok(out)
    }

    /// Takes, for member `id`, what a read of the log returned: per
    /// partition, the offset the read started at (if known) and the
    /// messages, in offset order. At most `max` records are delivered.
    ///
    /// # Errors
    /// I/O errors writing the store (nothing is delivered then).
    pub(crate) fn take_read(
        &self,
        id: u64,
        reads: Vec<PartRead>,
        max: usize,
        lock_for: Duration,
    ) -> Result<(Vec<Delivered>, u64)> {
        let (mut inner, op, to, _) = self.begin(id, lock_for)?;
        let limits = self.settings.limits();
        let mut ops = self.ops();
        let mut decided = Vec::new();
        let mut taken = 0usize;
        let mut new_parts: Vec<(String, u32)> = Vec::new();
        for (key, start, messages) in reads {
            let Some(first) = messages.first().map(Message::offset) else {
                continue;
            };
            if !inner.parts.contains_key(&key) {
                new_parts.push(key.clone());
            }
            let part = inner
                .parts
                .entry(key.clone())
                .or_insert_with(|| Part::at(start.unwrap_or(first)));
            let (changes, next) = part.read(to, start, &messages, max - taken, limits);
            taken += changes
                .iter()
                .filter(|c| matches!(c.entry.state, State::Acquired { member, .. } if member == id))
                .count();
            ops.changes(&key.0, key.1, &changes);
            decided.push((key, changes, next));
        }
        start_ops(&mut inner.parts, &mut ops);
        if let Err(e) = append(inner.store.as_mut(), &ops) {
            // Nothing changes: not even the partitions first read here.
            for key in &new_parts {
                inner.parts.remove(key);
            }
            return Err(e);
        }
        mark_starts_stored(&mut inner.parts);
        let mut delivered = Vec::new();
        let mut dead_lettered = 0;
        for (key, changes, next) in decided {
            for c in &changes {
                if let (State::Acquired { member, .. }, Some(m)) = (c.entry.state, &c.entry.message)
                {
                    if member != id {
                        continue;
                    }
                    delivered.push((m.clone(), c.entry.count));
                }
            }
            if let Some(p) = inner.parts.get_mut(&key) {
                p.apply(changes.clone());
                p.next = p.next.max(next);
            }
            dead_lettered += self.settle_dead_letters(&mut inner, &key, &changes);
            if let Some(p) = inner.parts.get_mut(&key) {
                p.advance();
            }
        }
        self.maybe_compact(&mut inner);
        drop(op);
        drop(inner);
        // A partition read for the first time holds retention back from
        // now on (the floor is not lowered elsewhere).
        let mut topics: Vec<&str> = new_parts.iter().map(|(t, _)| t.as_str()).collect();
        topics.dedup();
        for t in topics {
            self.broker.refresh_retention_floors(t);
        }
        Ok((delivered, dead_lettered))
    }

    /// Applies `action` of member `id` to records it holds: `(topic,
    /// partition, offset, delivery count)`. All or nothing: if one of them
    /// is not held by this delivery (its lock ran out, it was settled
    /// already), nothing changes.
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
        let op = self.enter(&mut inner)?;
        let now = Instant::now();
        for &(t, p, o, count) in records {
            let held = inner
                .parts
                .get(&(t.to_owned(), p))
                .and_then(|part| part.entries.get(&o))
                .is_some_and(|e| {
                    e.count == count
                        && matches!(e.state, State::Acquired { member, deadline }
                            if member == id && deadline > now)
                });
            if !held {
                return Err(Error::InvalidRecordState(format!(
                    "{t}/{p} offset {o} (delivery {count}) is not held by this consumer: \
                     its lock ran out or it was acknowledged, released or rejected already"
                )));
            }
        }
        let mut by_part: HashMap<(String, u32), Vec<Change>> = HashMap::new();
        for &(t, p, o, _) in records {
            let key = (t.to_owned(), p);
            let Some(e) = inner.parts.get(&key).and_then(|part| part.entries.get(&o)) else {
                continue;
            };
            let entry = match action {
                Action::Ack => Entry {
                    state: State::Acked,
                    count: e.count,
                    message: None,
                },
                Action::Release { delay_ms } => Entry {
                    state: State::Available {
                        not_before_ms: if *delay_ms == 0 {
                            0
                        } else {
                            // The clock reads whole milliseconds: one more
                            // so that the delay is never cut short.
                            crate::clock::now_ms()
                                .saturating_add(i64::try_from(*delay_ms).unwrap_or(i64::MAX))
                                .saturating_add(1)
                        },
                    },
                    ..e.clone()
                },
                Action::Reject { .. } => Entry {
                    state: State::DeadLettering,
                    ..e.clone()
                },
                Action::Renew { lock } => Entry {
                    state: State::Acquired {
                        member: id,
                        deadline: now + *lock,
                    },
                    ..e.clone()
                },
                Action::ReleaseUntil { not_before_ms } => Entry {
                    state: State::Available {
                        not_before_ms: *not_before_ms,
                    },
                    ..e.clone()
                },
                Action::Return => Entry {
                    state: State::Available { not_before_ms: 0 },
                    count: e.count.saturating_sub(1),
                    ..e.clone()
                },
            };
            by_part
                .entry(key)
                .or_default()
                .push(Change { offset: o, entry });
        }
        let mut ops = self.ops();
        for (key, changes) in &mut by_part {
            changes.sort_by_key(|c| c.offset);
            // Alone, a release without a delay and a renewal change
            // nothing stored (an acquisition is stored as available); other
            // processes must learn of them.
            let stored = match action {
                Action::Ack
                | Action::Reject { .. }
                | Action::Return
                | Action::ReleaseUntil { .. } => true,
                Action::Release { delay_ms } => *delay_ms > 0 || self.is_shared(),
                Action::Renew { .. } => self.is_shared(),
            };
            if stored {
                ops.changes(&key.0, key.1, changes);
            }
        }
        start_ops(&mut inner.parts, &mut ops);
        let ticket = append(inner.store.as_mut(), &ops)?;
        mark_starts_stored(&mut inner.parts);
        let mut settled = Settled {
            dead_lettered: 0,
            ticket,
        };
        for (key, changes) in &by_part {
            if let Some(p) = inner.parts.get_mut(key) {
                p.apply(changes.clone());
            }
        }
        let mut send_error = None;
        if let Action::Reject { reason } = action {
            if sync_first {
                // The rejection is durable before the dead letter is.
                if op.is_some() {
                    // The state file's lock is held: synced here, without
                    // letting the mutex go.
                    if let Some((Some(file), path, _)) =
                        inner.store.as_ref().map(Store::sync_target)
                    {
                        file.sync_data()
                            .ctx(|| format!("syncing {}", path.display()))?;
                    }
                } else {
                    drop(inner);
                    self.sync(ticket)?;
                    inner = lock(&self.inner);
                }
            }
            for (key, changes) in &by_part {
                match self.dead_letter(&mut inner, key, changes, reason) {
                    Ok(n) => settled.dead_lettered += n,
                    Err(e) => send_error = Some(e),
                }
            }
        }
        for key in by_part.keys() {
            if let Some(p) = inner.parts.get_mut(key) {
                p.advance();
            }
        }
        if !matches!(action, Action::Renew { .. }) {
            wake_others(&inner, id);
        }
        self.maybe_compact(&mut inner);
        drop(op);
        match send_error {
            Some(e) => Err(e),
            None => Ok(settled),
        }
    }

    /// Dead-letters the records of `changes` that are to be (stored and
    /// applied as such already), archiving each that was sent. Returns how
    /// many were.
    fn settle_dead_letters(
        &self,
        inner: &mut Inner,
        key: &(String, u32),
        changes: &[Change],
    ) -> u64 {
        let dead: Vec<Change> = changes
            .iter()
            .filter(|c| c.entry.state == State::DeadLettering)
            .cloned()
            .collect();
        if dead.is_empty() {
            return 0;
        }
        let reason = match self.settings.max_deliveries {
            0 => "dead-lettered".to_owned(),
            n => format!("delivered {n} times (max_deliveries) without an acknowledgement"),
        };
        match self.dead_letter(inner, key, &dead, &reason) {
            Ok(n) => n,
            Err(e) => {
                // Kept as to be dead-lettered, with their messages: polls retry.
                ::log::warn!(
                    "share group {:?}: dead-lettering records of {}/{} failed, retried at the next poll: {e}",
                    self.name,
                    key.0,
                    key.1
                );
                0
            }
        }
    }

    /// Sends the records of `changes` to the dead-letter topic, then stores
    /// them as archived. Returns how many were sent.
    fn dead_letter(
        &self,
        inner: &mut Inner,
        key: &(String, u32),
        changes: &[Change],
        reason: &str,
    ) -> Result<u64> {
        let dl = self.dead_letters(inner, &key.0)?;
        let mut archived = Vec::new();
        let mut failed = None;
        for c in changes {
            let Some(m) = &c.entry.message else { continue };
            match dl.send(m, c.entry.count, reason) {
                Ok(()) => archived.push(Change {
                    offset: c.offset,
                    entry: Entry {
                        state: State::Archived,
                        count: c.entry.count,
                        message: None,
                    },
                }),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let n = archived.len() as u64;
        if !archived.is_empty() {
            let mut ops = self.ops();
            ops.changes(&key.0, key.1, &archived);
            // Not stored, the records are sent again (a duplicate the dead
            // letters' producer drops) when read back.
            append(inner.store.as_mut(), &ops)?;
            if let Some(p) = inner.parts.get_mut(key) {
                p.apply(archived);
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// The dead letters of source topic `topic`.
    fn dead_letters(&self, inner: &mut Inner, topic: &str) -> Result<Arc<DeadLetters>> {
        if let Some(d) = inner.dead.get(topic) {
            return Ok(Arc::clone(d));
        }
        let name = match &self.settings.dead_letter_topic {
            Some(t) => t.clone(),
            None => default_dead_letter_topic(topic, &self.name),
        };
        let d = Arc::new(DeadLetters::open(
            Arc::clone(&self.broker),
            &name,
            &self.name,
            "share-dlq",
        )?);
        inner.dead.insert(topic.to_owned(), Arc::clone(&d));
        Ok(d)
    }

    /// Rewrites the store when it grew large against the state.
    fn maybe_compact(&self, inner: &mut Inner) {
        let estimate: u64 = inner
            .parts
            .iter()
            .map(|((t, _), p)| 40 + t.len() as u64 + 40 * p.entries.len() as u64)
            .sum();
        let Some(store) = inner.store.as_mut() else {
            return;
        };
        if !store.wants_compaction(estimate) {
            return;
        }
        let ops = Ops::whole(self.owner, &inner.parts);
        let Some(store) = inner.store.as_mut() else {
            return;
        };
        match store.rewrite(&ops) {
            Ok(()) => self.syncer.covered(store.appended()),
            Err(e) => ::log::warn!("share group {:?}: rewriting its state: {e}", self.name),
        }
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
        let _op = self.enter(&mut inner)?;
        let now_ms = crate::clock::now_ms();
        let mut b = ShareBacklog::default();
        for key in partitions {
            let log = self.broker.topic(&key.0)?.partition(key.1)?;
            let end = log.end_offset();
            let Some(part) = inner.parts.get(key) else {
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

/// Start operations for the partitions whose start moved since stored.
fn start_ops(parts: &mut Parts, ops: &mut Ops) {
    for ((t, p), part) in parts.iter() {
        if part.start != part.start_stored {
            ops.start(t, *p, part.start);
        }
    }
}

fn mark_starts_stored(parts: &mut Parts) {
    for part in parts.values_mut() {
        part.start_stored = part.start;
    }
}

/// Appends `ops` to the store (an error if it was closed meanwhile).
fn append(store: Option<&mut Store>, ops: &Ops) -> Result<u64> {
    store.ok_or(Error::Closed("share group"))?.append(ops)
}

fn wake_others(inner: &Inner, id: u64) {
    for (m, w) in &inner.members {
        if *m != id {
            w.wakeup();
        }
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
