//! The glue of `group.rs` over one process's store and state: `prepare`,
//! `take_read`, `settle`, `leave` (with `store_release_of`),
//! dead-lettering, `release_dead_holders` and compaction, copied step for
//! step (in exclusive and in shared mode, as `ShareGroup::owner` says)
//! over the real decisions of `state.rs` and the real journal of
//! `store.rs`, with a synthetic clock and a dead-letter sink in place of
//! the broker. A change of that glue is to be made here too.

use std::path::{Path, PathBuf};

use super::super::state::{is_foreign, FOREIGN};
use super::super::store::OpLock;
use super::*;
use crate::shared::ProcessSlot;

/// `group.rs`'s `LIVENESS_CHECK`.
pub(super) const LIVENESS_CHECK_MS: u64 = 1000;

/// The clock as a call of the group reads it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    /// `Instant::now()`.
    pub now: Instant,
    /// `clock::now_ms()` (wall clock, ms since the epoch).
    pub wall: i64,
}

/// The dead-letter topic (its named producer drops duplicates) and its
/// faults, shared by the processes.
#[derive(Debug, Default)]
pub(super) struct DlqSink {
    /// Sends fail (the topic cannot be written).
    pub fails: bool,
    /// The next process to dead-letter records dies after the sends,
    /// before it stores them as archived.
    pub crash_next: bool,
    /// What the current call sent: record and delivery count.
    pub sent: Vec<(u32, u64, u32)>,
    /// Sent by a process that died before storing them as archived.
    pub unarchived: Vec<(u32, u64)>,
}

/// One process's share group: `ShareGroup` and its `Inner` (without the
/// members' wakers).
#[derive(Debug)]
pub(super) struct Proc {
    /// The data directory.
    dir: PathBuf,
    limits: Limits,
    /// `None`: the process is dead.
    pub store: Option<Store>,
    pub parts: Parts,
    /// Shared mode: the process's token (`ShareGroup::owner`).
    pub owner: Option<u64>,
    /// Shared mode: the process's `procs/<token>.live` (dropped when it
    /// dies).
    slot: Option<ProcessSlot>,
    next_liveness_check: Instant,
    /// Died in the middle of a call: nothing more is written or sent.
    pub dying: bool,
}

/// `ShareGroup::begin` (after `enter`).
fn begin(clk: Clock, id: u64, lock_ms: u64) -> (Delivery, Instant) {
    let to = Delivery {
        member: id,
        deadline: clk.now + Duration::from_millis(lock_ms),
        now_ms: clk.wall,
    };
    (to, clk.now)
}

impl Proc {
    /// A process that opens the group (`Registry::get`): in shared mode it
    /// registers in the directory first (`Broker::open`).
    pub(super) fn open(dir: &Path, limits: Limits, shared: bool, clk: Clock) -> Proc {
        let slot = shared.then(|| ProcessSlot::register(dir, 0o600).unwrap());
        let owner = slot.as_ref().map(ProcessSlot::token);
        let (store, parts) = if shared {
            Store::open_shared(dir, GROUP, 0o600, owner.unwrap_or(0)).unwrap()
        } else {
            Store::open(dir, GROUP, 0o600).unwrap()
        };
        Proc {
            dir: dir.to_owned(),
            limits,
            store: Some(store),
            parts,
            owner,
            slot,
            next_liveness_check: clk.now,
            dying: false,
        }
    }

    /// The process dies (`kill -9`): its file lock and its `.live` file
    /// go.
    pub(super) fn kill(&mut self) {
        self.store = None;
        self.parts = Parts::new();
        self.slot = None;
        self.dying = false;
    }

    pub(super) fn alive(&self) -> bool {
        self.store.is_some()
    }

    fn is_shared(&self) -> bool {
        self.owner.is_some()
    }

    /// `ShareGroup::ops`.
    fn ops(&self) -> Ops {
        Ops::new(self.owner)
    }

    /// `ShareGroup::enter`: in shared mode, the state file's lock, and
    /// what other processes wrote read in.
    fn enter(&mut self) -> Option<OpLock> {
        self.store.as_mut().unwrap().enter(&mut self.parts).unwrap()
    }

    /// `group::append` (a dying process writes nothing).
    fn append(&mut self, ops: &Ops) -> u64 {
        if self.dying {
            return 0;
        }
        self.store.as_mut().unwrap().append(ops).unwrap()
    }

    /// `ShareGroup::backlog`'s look at the state (under the lock, what
    /// other processes wrote read in), without the counting.
    pub(super) fn look(&mut self) {
        let _op = self.enter();
    }

    /// `ShareGroup::release_dead_holders`.
    fn release_dead_holders(&mut self, now: Instant) {
        if self.owner.is_none() || now < self.next_liveness_check {
            return;
        }
        self.next_liveness_check = now + Duration::from_millis(LIVENESS_CHECK_MS);
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

    /// `ShareGroup::prepare` (without `next_due`).
    pub(super) fn prepare(
        &mut self,
        clk: Clock,
        sink: &mut DlqSink,
        id: u64,
        assigned: &[(String, u32)],
        max: usize,
        lock_ms: u64,
    ) -> Prepared {
        let _op = self.enter();
        let (to, now) = begin(clk, id, lock_ms);
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
        start_ops(&mut self.parts, &mut ops);
        self.append(&ops);
        mark_starts_stored(&mut self.parts);
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
            if let Some(p) = self.parts.get_mut(&key) {
                p.apply(changes.clone());
            }
            out.dead_lettered += self.settle_dead_letters(sink, &key, &changes);
        }
        for key in assigned {
            let Some(p) = self.parts.get_mut(key) else {
                continue;
            };
            p.advance();
            out.positions
                .push((key.clone(), Some(p.next), p.window_full(limits)));
        }
        out
    }

    /// `ShareGroup::take_read`.
    pub(super) fn take_read(
        &mut self,
        clk: Clock,
        sink: &mut DlqSink,
        id: u64,
        reads: Vec<PartRead>,
        max: usize,
        lock_ms: u64,
    ) -> (Vec<Delivered>, u64) {
        let _op = self.enter();
        let (to, _) = begin(clk, id, lock_ms);
        let limits = self.limits;
        let mut ops = self.ops();
        let mut decided = Vec::new();
        let mut taken = 0usize;
        for (key, start, messages) in reads {
            let Some(first) = messages.first().map(Message::offset) else {
                continue;
            };
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
        start_ops(&mut self.parts, &mut ops);
        self.append(&ops);
        mark_starts_stored(&mut self.parts);
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
            if let Some(p) = self.parts.get_mut(&key) {
                p.apply(changes.clone());
                p.next = p.next.max(next);
            }
            dead_lettered += self.settle_dead_letters(sink, &key, &changes);
            if let Some(p) = self.parts.get_mut(&key) {
                p.advance();
            }
        }
        (delivered, dead_lettered)
    }

    /// `ShareGroup::settle` (the partitions in order, for a deterministic
    /// test).
    pub(super) fn settle(
        &mut self,
        clk: Clock,
        sink: &mut DlqSink,
        id: u64,
        records: &[(u32, u64, u32)],
        action: &Action,
    ) -> Settled {
        let _op = self.enter();
        let now = clk.now;
        for &(p, o, count) in records {
            let held = self
                .parts
                .get(&key(p))
                .and_then(|part| part.entries.get(&o))
                .is_some_and(|e| {
                    e.count == count
                        && matches!(e.state, State::Acquired { member, deadline }
                            if member == id && deadline > now)
                });
            if !held {
                return Settled::Refused;
            }
        }
        let mut by_part: BTreeMap<(String, u32), Vec<Change>> = BTreeMap::new();
        for &(p, o, _) in records {
            let key = key(p);
            let Some(e) = self.parts.get(&key).and_then(|part| part.entries.get(&o)) else {
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
                            clk.wall
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
        start_ops(&mut self.parts, &mut ops);
        self.append(&ops);
        mark_starts_stored(&mut self.parts);
        for (key, changes) in &by_part {
            if let Some(p) = self.parts.get_mut(key) {
                p.apply(changes.clone());
            }
        }
        let mut send_failed = false;
        if let Action::Reject { .. } = action {
            for (key, changes) in &by_part {
                if self.dead_letter(sink, key, changes).is_err() {
                    send_failed = true;
                }
            }
        }
        for key in by_part.keys() {
            if let Some(p) = self.parts.get_mut(key) {
                p.advance();
            }
        }
        if send_failed {
            Settled::SendFailed
        } else {
            Settled::Done
        }
    }

    /// `ShareGroup::settle_dead_letters`.
    fn settle_dead_letters(
        &mut self,
        sink: &mut DlqSink,
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
        self.dead_letter(sink, key, &dead).unwrap_or(0)
    }

    /// `ShareGroup::dead_letter`, sending to the sink; dies after the sends
    /// when the sink says so.
    fn dead_letter(
        &mut self,
        sink: &mut DlqSink,
        key: &(String, u32),
        changes: &[Change],
    ) -> Result<u64, ()> {
        let mut archived = Vec::new();
        let mut failed = false;
        for c in changes {
            let Some(m) = &c.entry.message else { continue };
            if self.dying || sink.fails {
                failed = true;
                break;
            }
            sink.sent.push((m.partition(), m.offset(), c.entry.count));
            archived.push(Change {
                offset: c.offset,
                entry: Entry {
                    state: State::Archived,
                    count: c.entry.count,
                    message: None,
                },
            });
        }
        let n = archived.len() as u64;
        if !archived.is_empty() {
            if sink.crash_next {
                // The process dies before storing them as archived.
                sink.crash_next = false;
                self.dying = true;
                for c in &archived {
                    sink.unarchived.push((key.1, c.offset));
                }
                return Err(());
            }
            let mut ops = self.ops();
            ops.changes(&key.0, key.1, &archived);
            self.append(&ops);
            if let Some(p) = self.parts.get_mut(key) {
                p.apply(archived);
            }
        }
        if failed {
            Err(())
        } else {
            Ok(n)
        }
    }

    /// `ShareGroup::leave` (with `store_release_of`), but the group stays
    /// open: a new member takes the place of the one that left.
    pub(super) fn leave(&mut self, id: u64) {
        if self.is_shared() {
            // `store_release_of`.
            let _op = self.enter();
            let mut ops = self.ops();
            for ((t, p), part) in &self.parts {
                let changes: Vec<Change> = part
                    .entries
                    .iter()
                    .filter(
                        |(_, e)| matches!(e.state, State::Acquired { member, .. } if member == id),
                    )
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
            self.append(&ops);
        }
        for p in self.parts.values_mut() {
            p.release_member(id);
        }
    }

    /// `ShareGroup::maybe_compact`, whatever the file's size, as the end of
    /// an operation (under the lock, what the others wrote read in).
    pub(super) fn compact(&mut self) {
        let _op = self.enter();
        let ops = Ops::whole(self.owner, &self.parts);
        self.store.as_mut().unwrap().rewrite(&ops).unwrap();
    }
}

/// `group::start_ops`.
fn start_ops(parts: &mut Parts, ops: &mut Ops) {
    for ((t, p), part) in parts.iter() {
        if part.start != part.start_stored {
            ops.start(t, *p, part.start);
        }
    }
}

/// `group::mark_starts_stored`.
fn mark_starts_stored(parts: &mut Parts) {
    for part in parts.values_mut() {
        part.start_stored = part.start;
    }
}
