//! The read state a consumer keeps per assigned partition: its position,
//! cursor (parked between calls) and the batch it stopped in the middle of.

use std::sync::{Arc, Weak};

use crate::group::Resume;
use crate::log::batch::BatchHeader;
use crate::log::{Cursor, PartitionLog, Segment};
use crate::message::Source;
use crate::topic::Topic;

/// The batch a partition reader stopped in the middle of
/// (`max_poll_records`, or its share of a poll over many partitions), kept
/// so that the next fetch goes on where this one stopped: the batch is
/// checked (CRC32C) and, when compressed, decompressed once, however many
/// polls take it apart, and its records are not decoded again from its
/// start. It belongs to the cursor it was read through: whatever drops or
/// replaces the cursor (a seek, a reset, a rebalance, retention deleting
/// the segment) drops it too, and it is only used while the cursor is still
/// at the batch and the position at the record it stopped before.
#[derive(Debug)]
pub(super) struct Within {
    /// Base offset of the segment holding the batch.
    pub(super) segment: u64,
    /// Position of the batch in that segment.
    pub(super) pos: usize,
    /// Its header, as checked.
    pub(super) header: BatchHeader,
    /// Where its records stand ([`Records::state`](crate::log::batch::Records::state)).
    pub(super) records: (usize, u32),
    /// The offset of the record it stopped before.
    pub(super) next: u64,
    /// For a compressed batch: its records section, decompressed, as the
    /// source of its messages.
    pub(super) buffer: Option<Arc<Source>>,
}

/// Why [`Consumer::take_records`](super::Consumer::take_records) stopped.
pub(super) enum Stop {
    /// The batch has no more records.
    End,
    /// `limit` messages were taken; the batch has more, from this
    /// [`Records::state`](crate::log::batch::Records::state) on.
    Limit((usize, u32)),
    /// A record is malformed, or the batch's records cannot be decompressed.
    Malformed(&'static str),
}

/// A cursor (and the source of its segment's messages) kept between two
/// calls without keeping the segment alive: the log holds its segments
/// while it is open, so [`Weak`] references come back as long as it is,
/// and once the broker is closed a consumer that is not dropped holds no
/// mapping. A segment retention removed meanwhile is not come back to:
/// the next read seeks its position again, as after a reset.
#[derive(Debug)]
struct Parked {
    seg: Weak<Segment>,
    pos: usize,
    ahead: usize,
    source: Option<Weak<Source>>,
}

impl Assigned {
    /// Puts the cursor away at the end of a call (see [`Parked`]).
    pub(super) fn park(&mut self) {
        if let Some(c) = self.cursor.take() {
            self.parked = Some(Parked {
                seg: Arc::downgrade(&c.seg),
                pos: c.pos,
                ahead: c.ahead,
                source: self.source.take().map(|s| Arc::downgrade(&s)),
            });
        }
        self.source = None;
    }

    /// Takes the parked cursor back, if its segment is still there (the
    /// batch kept in it goes with it otherwise).
    pub(super) fn unpark(&mut self) {
        let Some(p) = self.parked.take() else { return };
        if self.cursor.is_some() {
            return;
        }
        if let Some(seg) = p.seg.upgrade() {
            self.cursor = Some(Cursor {
                seg,
                pos: p.pos,
                ahead: p.ahead,
            });
            self.source = p.source.and_then(|s| s.upgrade());
        } else {
            self.within = None;
        }
    }

    /// Drops the cursor, parked or not: the next read seeks its position.
    pub(super) fn forget_cursor(&mut self) {
        self.cursor = None;
        self.within = None;
        self.source = None;
        self.parked = None;
    }
}

#[derive(Debug)]
pub(super) struct Assigned {
    pub(super) topic: Arc<Topic>,
    pub(super) log: Arc<PartitionLog>,
    /// Next offset to deliver; `None` until first resolved.
    pub(super) position: Option<u64>,
    pub(super) cursor: Option<Cursor>,
    /// Base offset the batch at the cursor must have, once known (the base
    /// offset is outside the CRC; this is what catches damage to it).
    pub(super) next_base: Option<u64>,
    /// The batch at the cursor, when the last fetch stopped in its middle
    /// (see [`Within`]).
    pub(super) within: Option<Within>,
    /// The source of the messages of the segment last read in place.
    pub(super) source: Option<Arc<Source>>,
    /// `cursor` and `source` between two calls (see [`Parked`]).
    parked: Option<Parked>,
    /// Messages jumped over since the last count because retention deleted
    /// them before they were read.
    pub(super) skipped: u64,
    /// The committed offset this partition starts from was found beyond the
    /// end of the log (`(committed, log_end)`, see [`Resume::OutOfRange`]):
    /// the first resolve applies `auto_offset_reset`.
    pub(super) out_of_range: Option<(u64, u64)>,
    /// Resets of an out-of-range committed offset since the last count.
    pub(super) resets: u64,
    /// Messages of this partition held for `poll_one` (see `held`).
    pub(super) held: u32,
    /// With messages held: the offset of the next one to hand out.
    pub(super) handed: u64,
    /// Not read until resumed ([`Consumer::pause`](super::Consumer::pause)).
    pub(super) paused: bool,
    /// The offset stored by [`Consumer::store_offsets`], what commits take
    /// when `enable_auto_offset_store` is off.
    pub(super) stored: Option<u64>,
}

impl Assigned {
    pub(super) fn new(
        topic: Arc<Topic>,
        log: Arc<PartitionLog>,
        resume: Option<Resume>,
    ) -> Assigned {
        let (position, out_of_range) = match resume {
            None => (None, None),
            Some(Resume::At(o)) => (Some(o), None),
            Some(Resume::OutOfRange { committed, log_end }) => (None, Some((committed, log_end))),
        };
        Assigned {
            topic,
            log,
            position,
            cursor: None,
            next_base: None,
            within: None,
            source: None,
            parked: None,
            skipped: 0,
            out_of_range,
            resets: 0,
            held: 0,
            handed: 0,
            paused: false,
            stored: None,
        }
    }

    /// Starts the partition over from `resume` (a group's committed offset).
    pub(super) fn restart(&mut self, resume: Option<Resume>) {
        let fresh = Assigned::new(Arc::clone(&self.topic), Arc::clone(&self.log), resume);
        let skipped = self.skipped;
        let resets = self.resets;
        let paused = self.paused;
        *self = fresh;
        self.skipped = skipped;
        self.resets = resets;
        self.paused = paused;
    }
}
