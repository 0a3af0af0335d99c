//! The engine of a share group in one process: the state of its share
//! partitions, its store, and the calls that change them (`prepare`,
//! `take_read`, `settle`, `leave`, dead-lettering, the release of records
//! held by processes that exited, compaction), in exclusive and in shared
//! mode. The decisions are `state.rs`'s and the journal is `store.rs`'s.
//!
//! What a call takes from where it runs is passed in: whether the host is
//! open and the clocks ([`Env`]), and where dead letters go
//! ([`DeadLetterSink`]). [`ShareGroup`](super::group::ShareGroup) runs the
//! engine on the broker (under its mutex, which serialises the calls); the
//! model tests run it on a synthetic clock and sink.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::state::{is_foreign, Change, Delivery, Entry, Limits, Part, State, FOREIGN};
use super::store::{OpLock, Ops, Parts, Store};
use crate::error::{Error, IoContext, Result};
use crate::message::Message;
use crate::offsets::journal::Syncer;

/// How often a poll in shared mode looks whether the processes holding
/// records still live (the records of one that exited are available at
/// once, without waiting for their locks to run out).
pub(crate) const LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// What an engine call reads from where it runs.
pub(crate) trait Env {
    /// Whether the host (the broker) is open; a call does nothing once it
    /// is closed.
    ///
    /// # Errors
    /// [`Error::Closed`] once the host is closed.
    fn check_open(&self) -> Result<()>;

    /// Now, on the monotonic clock.
    fn now(&self) -> Instant;

    /// Now, on the wall clock (ms since the epoch).
    fn wall_ms(&self) -> i64;
}

/// Where the engine sends dead letters.
pub(crate) trait DeadLetterSink {
    /// Sends `message`, delivered `count` times, to the dead-letter topic
    /// of its topic, with `reason`.
    ///
    /// # Errors
    /// The send failed: the message stays to be dead-lettered.
    fn send(&mut self, message: &Message, count: u32, reason: &str) -> Result<()>;

    /// Called after sends, before the records sent are stored as archived
    /// (never sent again): makes the sends safe. Nothing to do for sends
    /// that are done when [`send`](Self::send) returns.
    ///
    /// # Errors
    /// The records sent are not stored as archived: they stay to be
    /// dead-lettered, and are sent again (a duplicate the dead letters'
    /// producer drops).
    fn flush(&mut self) -> Result<()> {
        Ok(())
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

/// What [`Engine::prepare`] gives a polling member.
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

/// What [`Engine::take_read`] gives a member.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    /// Records delivered to it.
    pub delivered: Vec<Delivered>,
    /// Records dead-lettered.
    pub dead_lettered: u64,
    /// Partitions read for the first time.
    pub new_parts: Vec<(String, u32)>,
}

/// Counts of one call that changed records.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Settled {
    pub dead_lettered: u64,
    /// Ticket of the store's group commit for this call's record.
    pub ticket: u64,
}

/// A settling call between [`Engine::settle`] (its changes stored and
/// applied) and [`Engine::finish_settle`] (a rejection's dead letters
/// sent, `start` moved on); in shared mode it holds the state file's lock.
#[derive(Debug)]
pub(crate) struct Settling<'a> {
    by_part: BTreeMap<(String, u32), Vec<Change>>,
    /// A rejection's reason.
    reject: Option<&'a str>,
    ticket: u64,
    /// Exclusive mode: the rejection is to be synced (up to `ticket`)
    /// before its dead letters are sent.
    sync_first: bool,
    op: Option<OpLock>,
}

impl Settling<'_> {
    /// The ticket to sync before [`Engine::finish_settle`], with the
    /// engine's lock let go meanwhile (exclusive mode, a rejection that
    /// is durable before its dead letters are).
    pub(crate) fn sync_first(&self) -> Option<u64> {
        self.sync_first.then_some(self.ticket)
    }
}

/// The state and store of one share group in one process (see the
/// module's notes).
#[derive(Debug)]
pub(crate) struct Engine {
    /// The group's name.
    name: String,
    /// The data directory (where processes' liveness is looked up).
    dir: PathBuf,
    /// Shared mode: this process's token (see [`Store::open_shared`]).
    owner: Option<u64>,
    limits: Limits,
    /// `None` once closed (the file lock let go).
    store: Option<Store>,
    /// The share partitions' state.
    pub(crate) parts: Parts,
    /// Shared mode: when to look next whether the processes holding
    /// records still live.
    next_liveness_check: Instant,
    /// The group commit of the store's syncs.
    syncer: Arc<Syncer>,
}

impl Engine {
    /// Opens the store of group `name` in `dir` (shared mode with
    /// `owner`, this process's token) and reads its state back; `now` on
    /// the monotonic clock.
    ///
    /// # Errors
    /// As [`Store::open`] and [`Store::open_shared`].
    pub(crate) fn open(
        dir: &Path,
        name: &str,
        mode: u32,
        owner: Option<u64>,
        limits: Limits,
        now: Instant,
    ) -> Result<Engine> {
        let (store, parts) = match owner {
            Some(token) => Store::open_shared(dir, name, mode, token)?,
            None => Store::open(dir, name, mode)?,
        };
        Ok(Engine {
            name: name.to_owned(),
            dir: dir.to_owned(),
            owner,
            limits,
            store: Some(store),
            parts,
            next_liveness_check: now,
            syncer: Arc::new(Syncer::default()),
        })
    }

    /// The group commit of the store's syncs.
    pub(crate) fn syncer(&self) -> &Arc<Syncer> {
        &self.syncer
    }

    /// Whether the store is open.
    pub(crate) fn is_open(&self) -> bool {
        self.store.is_some()
    }

    /// Closes the store (its file lock let go) and forgets the state.
    pub(crate) fn close(&mut self) {
        self.store = None;
        self.parts.clear();
    }

    /// The file to sync, its path, and the bytes appended so far (nothing
    /// to sync, and `ticket`, once closed).
    pub(crate) fn sync_target(&self, ticket: u64) -> (Option<Arc<File>>, PathBuf, u64) {
        match &self.store {
            Some(s) => s.sync_target(),
            None => (None, PathBuf::new(), ticket),
        }
    }

    /// Begins an operation on the group's state: the host and the store
    /// must be open, and in shared mode the state file's lock is taken and
    /// what other processes wrote is read in (see [`Store::enter`]); the
    /// lock is held until the guard returned is dropped.
    ///
    /// # Errors
    /// A closed host or store; I/O errors reading the state file.
    pub(crate) fn enter(&mut self, env: &impl Env) -> Result<Option<OpLock>> {
        env.check_open()?;
        match self.store.as_mut() {
            Some(s) => s.enter(&mut self.parts),
            None => Err(Error::Closed("share group")),
        }
    }

    /// Whether other processes may use the group (shared mode).
    fn is_shared(&self) -> bool {
        self.owner.is_some()
    }

    /// Operations to store, as this group stores them.
    fn ops(&self) -> Ops {
        Ops::new(self.owner)
    }

    /// Appends `ops` to the store (an error if it was closed meanwhile).
    fn append(&mut self, ops: &Ops) -> Result<u64> {
        self.store
            .as_mut()
            .ok_or(Error::Closed("share group"))?
            .append(ops)
    }

    /// Shared mode: makes the records held by processes that exited
    /// available (their delivery counted), at most every
    /// [`LIVENESS_CHECK`]. Nothing is written: read back, their
    /// acquisitions say the same.
    fn release_dead_holders(&mut self, now: Instant) {
        if self.owner.is_none() || now < self.next_liveness_check {
            return;
        }
        self.next_liveness_check = now + LIVENESS_CHECK;
        let mut holders: Vec<u64> = self
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
            if !crate::shared::process_alive(&self.dir, member & !FOREIGN) {
                for p in self.parts.values_mut() {
                    p.release_member(member);
                }
            }
        }
    }

    /// What member `id` may take before reading the log: locks that ran out
    /// are settled, records due again are delivered to it (at most `max`,
    /// locked for `lock_for`), and the partitions' positions and windows
    /// are reported.
    ///
    /// # Errors
    /// A closed host or store; I/O errors writing the store (nothing is
    /// delivered then).
    pub(crate) fn prepare(
        &mut self,
        env: &impl Env,
        sink: &mut impl DeadLetterSink,
        id: u64,
        assigned: &[(String, u32)],
        max: usize,
        lock_for: Duration,
    ) -> Result<Prepared> {
        let _op = self.enter(env)?;
        let (to, now) = delivery(env, id, lock_for);
        self.release_dead_holders(now);
        let limits = self.limits;
        let mut out = Prepared::default();
        let mut ops = self.ops();
        let mut decided: Vec<((String, u32), Vec<Change>)> = Vec::new();
        let mut taken = 0usize;
        for key in assigned {
            let Some(part) = self.parts.get_mut(key) else {
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
        start_ops(&self.parts, &mut ops);
        self.append(&ops)?;
        mark_starts_stored(&mut self.parts);
        for (key, changes) in decided {
            delivered_to(id, &changes, &mut out.delivered);
            if let Some(p) = self.parts.get_mut(&key) {
                p.apply(changes.clone());
            }
            out.dead_lettered += self.settle_dead_letters(sink, &key, &changes);
        }
        let mut lock_due: Option<Instant> = None;
        let mut wall_due: Option<i64> = None;
        for key in assigned {
            let Some(p) = self.parts.get_mut(key) else {
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
        self.maybe_compact();
        Ok(out)
    }

    /// Takes, for member `id`, what a read of the log returned: per
    /// partition, the offset the read started at (if known) and the
    /// messages, in offset order. At most `max` records are delivered,
    /// locked for `lock_for`.
    ///
    /// # Errors
    /// A closed host or store; I/O errors writing the store (nothing
    /// changes then, not even the partitions first read here).
    pub(crate) fn take_read(
        &mut self,
        env: &impl Env,
        sink: &mut impl DeadLetterSink,
        id: u64,
        reads: Vec<PartRead>,
        max: usize,
        lock_for: Duration,
    ) -> Result<Taken> {
        let _op = self.enter(env)?;
        let (to, _) = delivery(env, id, lock_for);
        let limits = self.limits;
        let mut ops = self.ops();
        let mut decided = Vec::new();
        let mut taken = 0usize;
        let mut out = Taken::default();
        for (key, start, messages) in reads {
            let Some(first) = messages.first().map(Message::offset) else {
                continue;
            };
            if !self.parts.contains_key(&key) {
                out.new_parts.push(key.clone());
            }
            let part = self
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
        start_ops(&self.parts, &mut ops);
        if let Err(e) = self.append(&ops) {
            for key in &out.new_parts {
                self.parts.remove(key);
            }
            return Err(e);
        }
        mark_starts_stored(&mut self.parts);
        for (key, changes, next) in decided {
            delivered_to(id, &changes, &mut out.delivered);
            if let Some(p) = self.parts.get_mut(&key) {
                p.apply(changes.clone());
                p.next = p.next.max(next);
            }
            out.dead_lettered += self.settle_dead_letters(sink, &key, &changes);
            if let Some(p) = self.parts.get_mut(&key) {
                p.advance();
            }
        }
        self.maybe_compact();
        Ok(out)
    }

    /// Applies `action` of member `id` to records it holds: `(topic,
    /// partition, offset, delivery count)`, stored and applied. All or
    /// nothing: if one of them is not held by this delivery (its lock ran
    /// out, it was settled already), nothing changes. With `sync_first`, a
    /// rejection is durable before its dead letters are sent: synced here
    /// in shared mode, by the caller in exclusive mode (see
    /// [`Settling::sync_first`]). [`finish_settle`](Self::finish_settle)
    /// ends the call.
    ///
    /// # Errors
    /// [`Error::InvalidRecordState`] as said; a closed host or store; I/O
    /// errors writing or syncing the store.
    pub(crate) fn settle<'a>(
        &mut self,
        env: &impl Env,
        id: u64,
        records: &[(&str, u32, u64, u32)],
        action: &'a Action,
        sync_first: bool,
    ) -> Result<Settling<'a>> {
        let op = self.enter(env)?;
        let now = env.now();
        for &(t, p, o, count) in records {
            let held = self
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
        let mut by_part: BTreeMap<(String, u32), Vec<Change>> = BTreeMap::new();
        for &(t, p, o, _) in records {
            let key = (t.to_owned(), p);
            let Some(e) = self.parts.get(&key).and_then(|part| part.entries.get(&o)) else {
                continue;
            };
            let entry = settled_entry(env, id, now, e, action);
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
        start_ops(&self.parts, &mut ops);
        let ticket = self.append(&ops)?;
        mark_starts_stored(&mut self.parts);
        for (key, changes) in &by_part {
            if let Some(p) = self.parts.get_mut(key) {
                p.apply(changes.clone());
            }
        }
        let reject = match action {
            Action::Reject { reason } => Some(reason.as_str()),
            _ => None,
        };
        let mut sync_later = false;
        if reject.is_some() && sync_first {
            if op.is_some() {
                // The state file's lock is held: synced here, without
                // letting it go.
                if let Some((Some(file), path, _)) = self.store.as_ref().map(Store::sync_target) {
                    file.sync_data()
                        .ctx(|| format!("syncing {}", path.display()))?;
                }
            } else {
                sync_later = true;
            }
        }
        Ok(Settling {
            by_part,
            reject,
            ticket,
            sync_first: sync_later,
            op,
        })
    }

    /// Ends a settling call: a rejection's records are sent to the
    /// dead-letter topic and stored as archived, and the partitions'
    /// starts move on.
    ///
    /// # Errors
    /// For a rejection, errors sending to the dead-letter topic (the
    /// records stay to be dead-lettered, which polls retry).
    pub(crate) fn finish_settle(
        &mut self,
        sink: &mut impl DeadLetterSink,
        settling: Settling<'_>,
    ) -> Result<Settled> {
        let Settling {
            by_part,
            reject,
            ticket,
            op,
            ..
        } = settling;
        let mut settled = Settled {
            dead_lettered: 0,
            ticket,
        };
        let mut send_error = None;
        if let Some(reason) = reject {
            for (key, changes) in &by_part {
                match self.dead_letter(sink, key, changes, reason) {
                    Ok(n) => settled.dead_lettered += n,
                    Err(e) => send_error = Some(e),
                }
            }
        }
        for key in by_part.keys() {
            if let Some(p) = self.parts.get_mut(key) {
                p.advance();
            }
        }
        self.maybe_compact();
        drop(op);
        match send_error {
            Some(e) => Err(e),
            None => Ok(settled),
        }
    }

    /// Member `id` leaves: the records it holds are available again
    /// (stored so in shared mode, for the other processes; if that cannot
    /// be written, their locks run out there). Returns how many.
    pub(crate) fn leave(&mut self, env: &impl Env, id: u64) -> usize {
        if self.is_shared() {
            if let Err(e) = self.store_release_of(env, id) {
                ::log::warn!(
                    "share group {:?}: releasing a member's records: {e}",
                    self.name
                );
            }
        }
        let mut released = 0;
        for p in self.parts.values_mut() {
            released += p.release_member(id);
        }
        released
    }

    /// Shared mode: stores the records member `id` holds as available.
    fn store_release_of(&mut self, env: &impl Env, id: u64) -> Result<()> {
        let _op = self.enter(env)?;
        let mut ops = self.ops();
        for ((t, p), part) in &self.parts {
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
        self.append(&ops).map(|_| ())
    }

    /// Dead-letters the records of `changes` that are to be (stored and
    /// applied as such already), archiving each that was sent. Returns how
    /// many were.
    fn settle_dead_letters(
        &mut self,
        sink: &mut impl DeadLetterSink,
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
        let reason = match self.limits.max_deliveries {
            0 => "dead-lettered".to_owned(),
            n => format!("delivered {n} times (max_deliveries) without an acknowledgement"),
        };
        match self.dead_letter(sink, key, &dead, &reason) {
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
        &mut self,
        sink: &mut impl DeadLetterSink,
        key: &(String, u32),
        changes: &[Change],
        reason: &str,
    ) -> Result<u64> {
        let mut archived = Vec::new();
        let mut failed = None;
        for c in changes {
            let Some(m) = &c.entry.message else { continue };
            match sink.send(m, c.entry.count, reason) {
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
            sink.flush()?;
            let mut ops = self.ops();
            ops.changes(&key.0, key.1, &archived);
            // Not stored, the records are sent again (a duplicate the dead
            // letters' producer drops) when read back.
            self.append(&ops)?;
            if let Some(p) = self.parts.get_mut(key) {
                p.apply(archived);
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Rewrites the store when it grew large against the state.
    fn maybe_compact(&mut self) {
        let estimate: u64 = self
            .parts
            .iter()
            .map(|((t, _), p)| 40 + t.len() as u64 + 40 * p.entries.len() as u64)
            .sum();
        if !self
            .store
            .as_ref()
            .is_some_and(|s| s.wants_compaction(estimate))
        {
            return;
        }
        if let Err(e) = self.compact() {
            ::log::warn!("share group {:?}: rewriting its state: {e}", self.name);
        }
    }

    /// Rewrites the store as one record of the whole state (within an
    /// operation: see [`enter`](Self::enter)).
    ///
    /// # Errors
    /// A closed store; I/O errors (the old file stays in use then).
    pub(crate) fn compact(&mut self) -> Result<()> {
        let ops = Ops::whole(self.owner, &self.parts);
        let store = self.store.as_mut().ok_or(Error::Closed("share group"))?;
        store.rewrite(&ops)?;
        self.syncer.covered(store.appended());
        Ok(())
    }
}

/// To whom, and until when, records are delivered in a call: member `id`,
/// locked for `lock_for` from now; and now.
fn delivery(env: &impl Env, id: u64, lock_for: Duration) -> (Delivery, Instant) {
    let now = env.now();
    let to = Delivery {
        member: id,
        deadline: now + lock_for,
        now_ms: env.wall_ms(),
    };
    (to, now)
}

/// The entry `e`, held by member `id`, after `action` at `now`.
fn settled_entry(env: &impl Env, id: u64, now: Instant, e: &Entry, action: &Action) -> Entry {
    match action {
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
                    // The clock reads whole milliseconds: one more so that
                    // the delay is never cut short.
                    env.wall_ms()
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
    }
}

/// Adds the records of `changes` acquired by member `id` to `out`.
fn delivered_to(id: u64, changes: &[Change], out: &mut Vec<Delivered>) {
    for c in changes {
        if let (State::Acquired { member, .. }, Some(m)) = (c.entry.state, &c.entry.message) {
            if member == id {
                out.push((m.clone(), c.entry.count));
            }
        }
    }
}

/// Start operations for the partitions whose start moved since stored.
fn start_ops(parts: &Parts, ops: &mut Ops) {
    for ((t, p), part) in parts {
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

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
