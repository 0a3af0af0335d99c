//! The acknowledgement state of one share partition (a partition as a share
//! group consumes it): which records are in flight, with whom, how often
//! they were delivered, and which are done.
//!
//! Offsets below [`Part::start`] are done. Offsets from `start` up to
//! [`Part::next`] (the next offset to read from the log) were read: those
//! with an [`Entry`] are in flight or done out of order, those without one
//! were never delivered (transaction markers, aborted records) and count as
//! done. Entries at or above `next` are states read back from the store
//! whose records have not been read again since the group was opened: the
//! read that reaches them applies them (a done record is skipped, one that
//! was delivered before keeps its count).
//!
//! Nothing here does I/O: the functions decide [`Change`]s, which the group
//! writes to its store before applying them, so that a failed write
//! changes nothing.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::message::Message;

/// A record's state as the store keeps it. An acquired record is stored
/// as available with its delivery already counted, so that a crash of the
/// process that held it counts as a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// Deliverable (at or after its `not_before` time).
    Available = 0,
    /// Acknowledged: never delivered again.
    Acked = 1,
    /// Given up on and dead-lettered: never delivered again.
    Archived = 2,
    /// Being dead-lettered: sent to the dead-letter topic (again, the send
    /// is idempotent) before it becomes archived.
    DeadLettering = 3,
}

impl Stored {
    /// The state of a stored code, if it is one.
    pub(crate) fn from_code(c: u8) -> Option<Stored> {
        Some(match c {
            0 => Stored::Available,
            1 => Stored::Acked,
            2 => Stored::Archived,
            3 => Stored::DeadLettering,
            _ => return None,
        })
    }
}

/// The member ids of holders in other processes (shared mode): this bit
/// and the holder process's token (whose top bit is clear). Members of
/// this process count from 1.
pub(crate) const FOREIGN: u64 = 1 << 63;

/// Whether `member` is a holder in another process.
pub(crate) fn is_foreign(member: u64) -> bool {
    member & FOREIGN != 0
}

/// A record's state in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Deliverable from `not_before_ms` (wall clock, ms since the epoch).
    Available { not_before_ms: i64 },
    /// Delivered to `member`, locked until `deadline`.
    Acquired { member: u64, deadline: Instant },
    /// To be sent to the dead-letter topic.
    DeadLettering,
    /// Acknowledged.
    Acked,
    /// Dead-lettered.
    Archived,
}

impl State {
    /// Whether the record is done with (never delivered again).
    pub(crate) fn is_done(self) -> bool {
        matches!(self, State::Acked | State::Archived)
    }

    /// Whether a member of this process holds the record.
    pub(crate) fn is_held_here(self) -> bool {
        matches!(self, State::Acquired { member, .. } if !is_foreign(member))
    }

    /// The state the store keeps, and its `not_before` time.
    pub(crate) fn stored(self) -> (Stored, i64) {
        match self {
            State::Available { not_before_ms } => (Stored::Available, not_before_ms),
            State::Acquired { .. } => (Stored::Available, 0),
            State::DeadLettering => (Stored::DeadLettering, 0),
            State::Acked => (Stored::Acked, 0),
            State::Archived => (Stored::Archived, 0),
        }
    }

    /// The state of a stored record, as read back.
    pub(crate) fn from_stored(s: Stored, not_before_ms: i64) -> State {
        match s {
            Stored::Available => State::Available { not_before_ms },
            Stored::Acked => State::Acked,
            Stored::Archived => State::Archived,
            Stored::DeadLettering => State::DeadLettering,
        }
    }
}

/// One record in flight (or done out of order).
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub state: State,
    /// Deliveries so far.
    pub count: u32,
    /// The record, kept while it may be delivered again (it reads in place
    /// from the segment's map: holding it costs a reference count).
    pub message: Option<Message>,
}

/// A decided change of one record.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub offset: u64,
    pub entry: Entry,
}

/// The limits a decision follows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Deliveries after which a record is dead-lettered (0: no limit).
    pub max_deliveries: u32,
    /// Most offsets from `start` to `next` (records in flight or read).
    pub max_in_flight: u64,
}

impl Limits {
    /// Whether a record delivered `count` times may not be delivered again.
    pub(crate) fn exhausted(self, count: u32) -> bool {
        self.max_deliveries > 0 && count >= self.max_deliveries
    }
}

/// To whom, and when, records are delivered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Delivery {
    /// The member they go to.
    pub member: u64,
    /// When its lock runs out.
    pub deadline: Instant,
    /// Now, on the wall clock (ms since the epoch).
    pub now_ms: i64,
}

/// One share partition's state.
#[derive(Debug, Default)]
pub(crate) struct Part {
    /// Every offset below is done.
    pub start: u64,
    /// The next offset to read from the log.
    pub next: u64,
    /// Records in flight or done out of order (see the module's notes).
    pub entries: BTreeMap<u64, Entry>,
    /// `start` as last written to the store.
    pub start_stored: u64,
}

impl Part {
    /// A partition whose reading starts at `offset`.
    pub(crate) fn at(offset: u64) -> Part {
        Part {
            start: offset,
            next: offset,
            entries: BTreeMap::new(),
            start_stored: u64::MAX,
        }
    }

    /// Whether no more records may be read until some are done.
    pub(crate) fn window_full(&self, limits: Limits) -> bool {
        self.next.saturating_sub(self.start) >= limits.max_in_flight
    }

    /// Moves `start` over what is done, dropping the entries below it.
    pub(crate) fn advance(&mut self) {
        let first_open = self
            .entries
            .range(self.start..self.next)
            .find(|(_, e)| !e.state.is_done())
            .map(|(o, _)| *o);
        let start = first_open.unwrap_or(self.next).max(self.start);
        if start > self.start {
            self.start = start;
            self.entries = self.entries.split_off(&start);
        }
    }

    /// Acquired records whose lock ran out by `now`: each becomes
    /// available again, or, delivered as often as allowed, to be
    /// dead-lettered. Returns the changes (none is stored: an acquired
    /// record is stored as available already; a dead-lettering is stored
    /// by the caller before the send).
    pub(crate) fn expired(&self, now: Instant, limits: Limits) -> Vec<Change> {
        let mut out = Vec::new();
        for (o, e) in self.entries.range(self.start..self.next) {
            if let State::Acquired { deadline, .. } = e.state {
                if deadline <= now {
                    let state = if limits.exhausted(e.count) {
                        State::DeadLettering
                    } else {
                        State::Available { not_before_ms: 0 }
                    };
                    out.push(Change {
                        offset: *o,
                        entry: Entry { state, ..e.clone() },
                    });
                }
            }
        }
        out
    }

    /// The earliest time something here changes by itself: a lock that
    /// runs out (monotonic), a delayed record that becomes due (wall clock,
    /// ms).
    pub(crate) fn next_due(&self) -> (Option<Instant>, Option<i64>) {
        let mut lock = None::<Instant>;
        let mut due = None::<i64>;
        for e in self.entries.range(self.start..).map(|(_, e)| e) {
            match e.state {
                State::Acquired { deadline, .. } => {
                    lock = Some(lock.map_or(deadline, |l| l.min(deadline)));
                }
                State::Available { not_before_ms } if e.message.is_some() => {
                    due = Some(due.map_or(not_before_ms, |d| d.min(not_before_ms)));
                }
                _ => {}
            }
        }
        (lock, due)
    }

    /// Records read before that are deliverable again by `to.now_ms`, up to
    /// `max` acquired: acquired by `to.member` until `to.deadline` (count +
    /// 1), or, when delivered as often as allowed, to be dead-lettered; and
    /// records to be dead-lettered whose send failed before (sent again,
    /// not counted in `max`). A record whose message is not held any more
    /// is read again: `next` moves back to it.
    pub(crate) fn redeliverable(
        &mut self,
        to: Delivery,
        max: usize,
        limits: Limits,
    ) -> Vec<Change> {
        let mut out = Vec::new();
        let mut reread = None;
        let mut acquired = 0usize;
        for (o, e) in self.entries.range(self.start..self.next) {
            match e.state {
                State::Available { not_before_ms } if not_before_ms <= to.now_ms => {
                    if acquired >= max {
                        break;
                    }
                    if e.message.is_none() {
                        reread = Some(*o);
                        break;
                    }
                    let entry = acquire_or_give_up(e, to, limits);
                    if matches!(entry.state, State::Acquired { .. }) {
                        acquired += 1;
                    }
                    out.push(Change { offset: *o, entry });
                }
                State::DeadLettering if e.message.is_some() => out.push(Change {
                    offset: *o,
                    entry: e.clone(),
                }),
                _ => {}
            }
        }
        if let Some(o) = reread {
            self.next = o;
        }
        out
    }

    /// Decides what a read from the log that started at `read_start` (the
    /// offset the reader was at, when known) and returned `messages` (this
    /// partition's, in offset order) gives `member`, up to `max` records,
    /// within the window, delivered `to`. Records another member took meanwhile, and any
    /// that do not follow on from `next`, are left. Returns the changes and
    /// where the read leaves `next`.
    pub(crate) fn read(
        &self,
        to: Delivery,
        read_start: Option<u64>,
        messages: &[Message],
        max: usize,
        limits: Limits,
    ) -> (Vec<Change>, u64) {
        let mut out = Vec::new();
        let Some(first) = messages.first().map(Message::offset) else {
            return (out, self.next);
        };
        // The read must cover `next`: it started at or before it.
        if read_start.unwrap_or(first) > self.next {
            return (out, self.next);
        }
        let mut next = self.next;
        let mut acquired = 0usize;
        for m in messages {
            let o = m.offset();
            if o < next {
                continue;
            }
            if o > next {
                // The read runs on from `next`: offsets skipped up to `o`
                // hold no record (a transaction's marker, or deleted by
                // retention). They are passed, so that `start` can move
                // over them and the window not count them (a gap as wide
                // as the window would stall the partition for good); what
                // the group knew of records retention deleted is dropped.
                for (k, e) in self.entries.range(next..o) {
                    let unreachable = e.message.is_none()
                        && !e.state.is_done()
                        && !matches!(e.state, State::Acquired { .. });
                    if unreachable {
                        out.push(Change {
                            offset: *k,
                            entry: Entry {
                                state: State::Acked,
                                count: e.count,
                                message: None,
                            },
                        });
                    }
                }
                next = o;
            }
            if o.saturating_sub(self.start) >= limits.max_in_flight || acquired >= max {
                break;
            }
            next = o + 1;
            let entry = match self.entries.get(&o) {
                Some(e) if e.state.is_done() => continue,
                Some(e) => e.clone(),
                None => Entry {
                    state: State::Available { not_before_ms: 0 },
                    count: 0,
                    message: None,
                },
            };
            let entry = Entry {
                message: Some(m.clone()),
                ..entry
            };
            let entry = match entry.state {
                State::Available { not_before_ms } if not_before_ms > to.now_ms => entry,
                State::Available { .. } => {
                    acquired += 1;
                    acquire_or_give_up(&entry, to, limits)
                }
                // Stored as dead-lettering: sent again (idempotent), then
                // archived. (An acquired state is never read back.)
                _ => entry,
            };
            out.push(Change { offset: o, entry });
        }
        (out, next)
    }

    /// Applies decided changes (after they were stored).
    pub(crate) fn apply(&mut self, changes: Vec<Change>) {
        for c in changes {
            self.entries.insert(c.offset, c.entry);
        }
    }

    /// Makes every record `member` holds available again (it left).
    pub(crate) fn release_member(&mut self, member: u64) -> usize {
        let mut n = 0;
        for e in self.entries.values_mut() {
            if matches!(e.state, State::Acquired { member: m, .. } if m == member) {
                e.state = State::Available { not_before_ms: 0 };
                n += 1;
            }
        }
        n
    }
}

/// The entry of `e` delivered once more (`to`), or, if it was delivered as
/// often as allowed, to be dead-lettered.
fn acquire_or_give_up(e: &Entry, to: Delivery, limits: Limits) -> Entry {
    if limits.exhausted(e.count) {
        Entry {
            state: State::DeadLettering,
            ..e.clone()
        }
    } else {
        Entry {
            state: State::Acquired {
                member: to.member,
                deadline: to.deadline,
            },
            count: e.count.saturating_add(1),
            message: e.message.clone(),
        }
    }
}
