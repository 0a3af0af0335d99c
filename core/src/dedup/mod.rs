//! Producer identities (ids, epochs, names) and the per-partition sequence
//! state that makes sends idempotent.
//!
//! Two pieces:
//! - [`Registry`] (`registry`): allocates producer ids and keeps named
//!   producers' ids and epochs in `<dir>/producers/registry.json`, shared
//!   by every process of a shared-mode directory (`epochs` holds the page
//!   through which they see each other's epochs).
//! - [`ProducerTable`]: per partition, for each producer id, the epoch, the
//!   highest sequence written and the last few batches (the dedup window).
//!   It is rebuilt from batch headers when first needed, starting from a
//!   snapshot (`producers.snapshot` in the partition directory) written at
//!   every segment roll and at close, so rebuilding reads at most the active
//!   segment's headers.

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::atomic_file::write_atomic;
use crate::error::{Error, Result};
use crate::log::batch::{BatchHeader, ATTR_APP_SEQUENCE, ATTR_NAMED_PRODUCER};
use crate::seqranges::SeqRanges;

mod claim;
mod epochs;
mod registry;

pub(crate) use registry::{NamedIdentity, Registry};

/// Default number of batches per producer and partition remembered for
/// dedup (Kafka's `max.in.flight.requests.per.connection` bound).
pub const DEFAULT_DEDUP_WINDOW: usize = 5;

/// Largest producer name accepted.
pub const MAX_PRODUCER_NAME_LEN: usize = 249;

/// Checks a producer name: 1 to 249 characters of `[A-Za-z0-9._-]`.
pub fn validate_producer_name(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidArgument(format!(
            "producer name {name:?}: {why}"
        )))
    };
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name.len() > MAX_PRODUCER_NAME_LEN {
        return bad("is longer than 249 characters");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("may only contain ASCII letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

// ------------------------------------------------------------ per partition

/// One remembered batch of a producer in a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WindowEntry {
    /// Sequence of the first record.
    pub first_seq: i64,
    /// Number of records (their sequences are consecutive).
    pub count: u32,
    /// Offset of the first record.
    pub base_offset: u64,
    /// The sequences are the application's own.
    #[serde(default)]
    pub app: bool,
}

fn minus_one() -> i64 {
    -1
}

/// What a partition knows about one producer.
///
/// Two sequence spaces are kept apart: the ones the partition assigns to
/// records sent without a sequence, and the application's own
/// (`Record::sequence`), so that mixing the two never makes one look like a
/// duplicate of the other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProducerState {
    /// Highest epoch seen; older epochs are fenced.
    pub epoch: i16,
    /// Highest sequence assigned by the partition.
    pub last_seq: i64,
    /// Highest application sequence written (-1: none).
    #[serde(default = "minus_one")]
    pub last_app_seq: i64,
    /// Whether the producer has a durable name (kept across restarts).
    pub named: bool,
    /// The last batches, oldest first.
    pub window: VecDeque<WindowEntry>,
    /// The application sequences written here, above the producer's
    /// contiguous floor (see [`crate::Producer::next_sequence`]).
    #[serde(default)]
    pub app_written: SeqRanges,
}

impl ProducerState {
    /// The offset of the record with application sequence `seq`, if still
    /// remembered.
    pub(crate) fn offset_of(&self, seq: i64) -> Option<u64> {
        self.window.iter().filter(|w| w.app).find_map(|w| {
            let d = seq.checked_sub(w.first_seq)?;
            (d >= 0 && d < i64::from(w.count)).then(|| w.base_offset + d as u64)
        })
    }

    fn remember(&mut self, entry: WindowEntry, cap: usize) {
        self.window.push_back(entry);
        while self.window.len() > cap.max(1) {
            self.window.pop_front();
        }
    }
}

/// Hashes producer ids (small integers) with one multiplication: the
/// table is looked up on every idempotent append.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_i64(&mut self, v: i64) {
        self.0 = (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type IdMap<V> = HashMap<i64, V, std::hash::BuildHasherDefault<IdHasher>>;

/// Sequence state of every producer that wrote to one partition.
#[derive(Debug, Default, Clone)]
pub(crate) struct ProducerTable {
    /// The first producer that wrote here, inline: a partition mostly has
    /// one producer at a time, whose lookup (on every idempotent append)
    /// then touches the partition's writer state only, not a map's memory
    /// as well (with keys spread over 1,000 partitions, one more cache
    /// miss per append).
    first: Option<(i64, ProducerState)>,
    /// Every other producer.
    others: IdMap<ProducerState>,
}

impl PartialEq for ProducerTable {
    /// The same producers in the same states, wherever each is kept.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(id, s)| other.get(id) == Some(s))
    }
}

impl Eq for ProducerTable {}

/// What the table says about a batch about to be appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SequenceCheck {
    /// Write it with this first sequence.
    Write(i64),
    /// Already written; the original offset of its first record when known.
    Duplicate(Option<u64>),
}

/// The identity an idempotent append carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Idempotence {
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub epoch: i16,
    /// Whether the producer is named (its state survives restarts).
    pub named: bool,
    /// The application's sequence of the first record; `None` lets the
    /// partition assign the next one.
    pub sequence: Option<i64>,
    /// Reject a sequence that skips ahead (Kafka's rule) instead of allowing
    /// gaps (Pulsar's).
    pub strict: bool,
    /// Sequences come in any order: a duplicate is a sequence written
    /// before (as far as the ranges kept say), not one at or below the last.
    pub sparse: bool,
    /// Batches remembered for dedup.
    pub window: usize,
    /// Every application sequence below this one is known to be written
    /// (to some partition): the partition forgets its ranges below it.
    pub floor: i64,
}

impl ProducerTable {
    /// The state of producer `id`, if it wrote here.
    #[inline]
    pub(crate) fn get(&self, id: i64) -> Option<&ProducerState> {
        match &self.first {
            Some((first, s)) if *first == id => Some(s),
            _ => self.others.get(&id),
        }
    }

    /// [`ProducerTable::get`], mutable.
    fn get_mut(&mut self, id: i64) -> Option<&mut ProducerState> {
        match &mut self.first {
            Some((first, s)) if *first == id => Some(s),
            _ => self.others.get_mut(&id),
        }
    }

    /// The state of producer `id`, made by `make` if it has none yet.
    fn entry(&mut self, id: i64, make: impl FnOnce() -> ProducerState) -> &mut ProducerState {
        if self.first.as_ref().is_some_and(|(first, _)| *first != id) {
            return self.others.entry(id).or_insert_with(make);
        }
        &mut self.first.get_or_insert_with(|| (id, make())).1
    }

    /// Sets the state of producer `id`.
    fn insert(&mut self, id: i64, state: ProducerState) {
        match self.get_mut(id) {
            Some(s) => *s = state,
            None => {
                self.entry(id, || state);
            }
        }
    }

    /// Number of producers.
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.others.len()
    }

    /// Every producer and its state (the first one first).
    fn iter(&self) -> impl Iterator<Item = (i64, &ProducerState)> {
        self.first
            .iter()
            .map(|(id, s)| (*id, s))
            .chain(self.others.iter().map(|(id, s)| (*id, s)))
    }

    /// Decides what to do with a batch of `count` records from `idem`.
    pub(crate) fn check(
        &self,
        idem: &Idempotence,
        count: u32,
        topic: &str,
        partition: u32,
    ) -> Result<SequenceCheck> {
        let state = self.get(idem.producer_id);
        if let Some(s) = state {
            if s.epoch > idem.epoch {
                return Err(Error::ProducerFenced {
                    producer_id: idem.producer_id,
                    epoch: idem.epoch,
                    current_epoch: s.epoch,
                });
            }
        }
        let Some(seq) = idem.sequence else {
            return Ok(SequenceCheck::Write(state.map_or(0, |s| s.last_seq + 1)));
        };
        let last = state.map_or(-1, |s| s.last_app_seq);
        if seq < 0 {
            return Err(Error::InvalidArgument(format!(
                "sequence numbers start at 0, got {seq}"
            )));
        }
        if idem.sparse {
            return Ok(match state {
                Some(s) if s.app_written.contains(seq) => {
                    SequenceCheck::Duplicate(s.offset_of(seq))
                }
                _ => SequenceCheck::Write(seq),
            });
        }
        if seq <= last {
            let last_in_batch = seq.saturating_add(i64::from(count) - 1);
            if last_in_batch > last {
                return Err(Error::InvalidArgument(format!(
                    "batch with sequences {seq}..={last_in_batch} overlaps the last written sequence {last}; send the records after {last} only"
                )));
            }
            return Ok(SequenceCheck::Duplicate(
                state.and_then(|s| s.offset_of(seq)),
            ));
        }
        if idem.strict && seq != last + 1 {
            return Err(Error::OutOfOrderSequence {
                topic: topic.to_owned(),
                partition,
                expected: last + 1,
                received: seq,
            });
        }
        Ok(SequenceCheck::Write(seq))
    }

    /// Records a batch written by `idem` with sequences `first_seq..`.
    pub(crate) fn record(&mut self, idem: &Idempotence, first_seq: i64, count: u32, base: u64) {
        let s = self.entry(idem.producer_id, || ProducerState {
            epoch: idem.epoch,
            last_seq: -1,
            last_app_seq: -1,
            named: idem.named,
            window: VecDeque::new(),
            app_written: SeqRanges::default(),
        });
        s.epoch = s.epoch.max(idem.epoch);
        s.named |= idem.named;
        let last = first_seq + i64::from(count) - 1;
        let app = idem.sequence.is_some();
        if !app {
            // Partition-assigned sequences are never re-sent: no window.
            s.last_seq = s.last_seq.max(last);
            return;
        }
        s.last_app_seq = s.last_app_seq.max(last);
        s.app_written.raise_floor(idem.floor);
        s.app_written.insert(first_seq, last + 1);
        s.remember(
            WindowEntry {
                first_seq,
                count,
                base_offset: base,
                app,
            },
            idem.window,
        );
    }

    /// Folds in a batch found on disk while rebuilding. Batches of
    /// anonymous producers from earlier runs are skipped: their ids are never
    /// used again.
    pub(crate) fn observe(&mut self, h: &BatchHeader) {
        let p = h.producer;
        if p.producer_id < 0 || p.base_sequence < 0 || h.attributes & ATTR_NAMED_PRODUCER == 0 {
            return;
        }
        let idem = Idempotence {
            producer_id: p.producer_id,
            epoch: p.producer_epoch,
            named: true,
            sequence: (h.attributes & ATTR_APP_SEQUENCE != 0).then_some(p.base_sequence),
            strict: false,
            sparse: false,
            window: DEFAULT_DEDUP_WINDOW,
            floor: 0,
        };
        self.record(&idem, p.base_sequence, h.record_count, h.base_offset);
    }

    /// Raises producer `id`'s floor of written application sequences
    /// (nothing when it never wrote here).
    pub(crate) fn raise_floor(&mut self, id: i64, floor: i64) {
        if let Some(s) = self.get_mut(id) {
            s.app_written.raise_floor(floor);
        }
    }

    /// Adds the named producers' state read from disk to a table holding
    /// this process's anonymous producers.
    pub(crate) fn merge_loaded(&mut self, loaded: ProducerTable) {
        for (id, s) in loaded.first.into_iter().chain(loaded.others) {
            self.entry(id, || s);
        }
    }

    /// Drops anonymous producers (used when saving: they die with the
    /// process).
    fn named_only(&self) -> Vec<(i64, ProducerState)> {
        let mut v: Vec<_> = self
            .iter()
            .filter(|(_, s)| s.named)
            .map(|(id, s)| (id, s.clone()))
            .collect();
        v.sort_by_key(|(id, _)| *id);
        v
    }
}

/// File name of a partition's producer-state snapshot.
pub(crate) const SNAPSHOT_FILE: &str = "producers.snapshot";

#[derive(Debug, Serialize, Deserialize)]
struct SnapshotFile {
    /// Format version of this file.
    version: u32,
    /// The state covers every batch below this offset.
    offset: u64,
    producers: Vec<(i64, ProducerState)>,
}

/// Writes `table` as the state of the partition in `dir` below `offset`.
/// Not fsynced: a lost or damaged snapshot only makes the next rebuild read
/// more of the log.
pub(crate) fn save_snapshot(
    dir: &Path,
    table: &ProducerTable,
    offset: u64,
    mode: u32,
) -> Result<()> {
    let file = SnapshotFile {
        version: 1,
        offset,
        producers: table.named_only(),
    };
    let bytes = serde_json::to_vec(&file).expect("snapshot serialises");
    write_atomic(&dir.join(SNAPSHOT_FILE), &bytes, mode, false)
}

/// Reads the snapshot of the partition in `dir`: the table and the offset it
/// covers. `None` when missing or unreadable (the caller rebuilds from the
/// start of the log).
pub(crate) fn load_snapshot(dir: &Path) -> Option<(ProducerTable, u64)> {
    let path = dir.join(SNAPSHOT_FILE);
    let bytes = crate::atomic_file::read_small(&path).ok()??;
    match serde_json::from_slice::<SnapshotFile>(&bytes) {
        Ok(f) if f.version == 1 => {
            let mut table = ProducerTable::default();
            for (id, mut s) in f.producers {
                // Bound what a hostile file can make us keep.
                while s.window.len() > 1024 {
                    s.window.pop_front();
                }
                s.app_written = std::mem::take(&mut s.app_written).normalized();
                table.insert(id, s);
            }
            Some((table, f.offset))
        }
        Ok(f) => {
            ::log::warn!("ignoring {}: unknown version {}", path.display(), f.version);
            None
        }
        Err(e) => {
            ::log::warn!("ignoring damaged {}: {e}", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idem(seq: Option<i64>, strict: bool) -> Idempotence {
        Idempotence {
            producer_id: 7,
            epoch: 0,
            named: true,
            sequence: seq,
            strict,
            sparse: false,
            window: 5,
            floor: 0,
        }
    }

    /// The first producer is kept apart from the others: each keeps its
    /// own state, a table compares by content, and the snapshot and the
    /// merge of a loaded table keep every producer.
    #[test]
    fn producers_after_the_first_keep_their_own_state() {
        let of = |id: i64, seq: Option<i64>| Idempotence {
            producer_id: id,
            ..idem(seq, false)
        };
        let mut t = ProducerTable::default();
        t.record(&of(7, None), 0, 3, 100);
        t.record(&of(8, None), 0, 5, 103);
        t.record(&of(9, Some(4)), 4, 1, 108);
        t.record(&of(7, None), 3, 1, 109);
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(7).map(|s| s.last_seq), Some(3));
        assert_eq!(t.get(8).map(|s| s.last_seq), Some(4));
        assert_eq!(t.get(9).map(|s| s.last_app_seq), Some(4));
        assert!(t.get(10).is_none());
        assert_eq!(
            t.check(&of(8, None), 1, "t", 0).unwrap(),
            SequenceCheck::Write(5)
        );
        assert_eq!(
            t.check(&of(9, Some(4)), 1, "t", 0).unwrap(),
            SequenceCheck::Duplicate(Some(108))
        );
        // The same producers recorded in another order: another one is
        // first, the tables are equal.
        let mut u = ProducerTable::default();
        u.record(&of(9, Some(4)), 4, 1, 108);
        u.record(&of(8, None), 0, 5, 103);
        u.record(&of(7, None), 0, 4, 100);
        assert_eq!(t, u);
        u.record(&of(8, None), 5, 1, 110);
        assert_ne!(t, u);
        // Saved (named producers only: all three are) and loaded back.
        let dir = tempfile::tempdir().unwrap();
        save_snapshot(dir.path(), &t, 110, 0o600).unwrap();
        let (loaded, offset) = load_snapshot(dir.path()).unwrap();
        assert_eq!(offset, 110);
        assert_eq!(loaded, t);
        // Merged into a table holding another producer: all four.
        let mut m = ProducerTable::default();
        m.record(
            &Idempotence {
                named: false,
                ..of(1, None)
            },
            0,
            1,
            0,
        );
        m.merge_loaded(loaded);
        assert_eq!(m.len(), 4);
        assert_eq!(m.get(8).map(|s| s.last_seq), Some(4));
        assert_eq!(m.get(1).map(|s| s.last_seq), Some(0));
    }

    #[test]
    fn auto_sequences_follow_the_last() {
        let mut t = ProducerTable::default();
        assert_eq!(
            t.check(&idem(None, false), 3, "t", 0).unwrap(),
            SequenceCheck::Write(0)
        );
        t.record(&idem(None, false), 0, 3, 100);
        assert_eq!(
            t.check(&idem(None, false), 1, "t", 0).unwrap(),
            SequenceCheck::Write(3)
        );
    }

    #[test]
    fn duplicates_report_their_offset_while_in_the_window() {
        let mut t = ProducerTable::default();
        for i in 0..10 {
            t.record(&idem(Some(i), false), i, 1, 100 + i as u64);
        }
        assert_eq!(
            t.check(&idem(Some(9), false), 1, "t", 0).unwrap(),
            SequenceCheck::Duplicate(Some(109))
        );
        assert_eq!(
            t.check(&idem(Some(2), false), 1, "t", 0).unwrap(),
            SequenceCheck::Duplicate(None),
            "older than the window: still a duplicate, offset unknown"
        );
    }

    #[test]
    fn gaps_are_errors_only_when_strict() {
        let mut t = ProducerTable::default();
        t.record(&idem(Some(0), true), 0, 1, 0);
        assert_eq!(
            t.check(&idem(Some(5), false), 1, "t", 0).unwrap(),
            SequenceCheck::Write(5)
        );
        match t.check(&idem(Some(5), true), 1, "t", 0) {
            Err(Error::OutOfOrderSequence {
                expected: 1,
                received: 5,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn older_epochs_are_fenced() {
        let mut t = ProducerTable::default();
        let mut newer = idem(None, false);
        newer.epoch = 3;
        t.record(&newer, 0, 1, 0);
        assert!(matches!(
            t.check(&idem(None, false), 1, "t", 0),
            Err(Error::ProducerFenced { .. })
        ));
    }
}
