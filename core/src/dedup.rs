//! Producer identities (ids, epochs, names) and the per-partition sequence
//! state that makes sends idempotent.
//!
//! Two pieces:
//! - [`Registry`]: allocates producer ids and keeps named producers' ids and
//!   epochs in `<dir>/producers/registry.json` (written tmp + fsync +
//!   rename). Anonymous producers get a fresh id from a block reserved in the
//!   file, so creating one rarely writes.
//! - [`ProducerTable`]: per partition, for each producer id, the epoch, the
//!   highest sequence written and the last few batches (the dedup window).
//!   It is rebuilt from batch headers when first needed, starting from a
//!   snapshot (`producers.snapshot` in the partition directory) written at
//!   every segment roll and at close, so rebuilding reads at most the active
//!   segment's headers.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI16, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::atomic_file::write_atomic;
use crate::error::{Error, Result};
use crate::log::batch::{BatchHeader, ATTR_APP_SEQUENCE, ATTR_NAMED_PRODUCER};
use crate::seqranges::SeqRanges;
use crate::sync;

/// Default number of batches per producer and partition remembered for
/// dedup (Kafka's `max.in.flight.requests.per.connection` bound).
pub const DEFAULT_DEDUP_WINDOW: usize = 5;

/// Ids reserved per write of the registry for anonymous producers.
const ID_BLOCK: i64 = 1024;

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

#[derive(Debug, Default, Serialize, Deserialize)]
struct RegistryFile {
    /// First id not yet handed out or reserved.
    next_id: i64,
    /// Named producers: name -> (id, epoch).
    named: HashMap<String, NamedRecord>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct NamedRecord {
    id: i64,
    epoch: i16,
}

/// The live identity of a named producer, shared by the registry and every
/// producer object made under the name; the newest object fences the older.
#[derive(Debug)]
pub(crate) struct NamedIdentity {
    /// The producer id, stable across restarts.
    pub id: i64,
    /// The epoch of the newest producer object under this name.
    pub current_epoch: AtomicI16,
}

#[derive(Debug)]
struct RegistryState {
    file: RegistryFile,
    /// Ids reserved in the file and not yet handed out: `[next, end)`.
    next_anonymous: i64,
    reserved_end: i64,
    live: HashMap<String, Arc<NamedIdentity>>,
}

/// Producer id allocation and named producers of one data directory.
#[derive(Debug)]
pub(crate) struct Registry {
    path: PathBuf,
    mode: u32,
    state: Mutex<RegistryState>,
    /// Why the registry file could not be read, when it is damaged: ids
    /// cannot be handed out safely (one already in the logs would make new
    /// records look like duplicates), so idempotent producers are refused
    /// with this error; everything else works.
    damage: Option<Error>,
}

impl Registry {
    /// Opens (or starts) the registry under `<dir>/producers/`. A damaged
    /// file leaves the registry unavailable (see [`Registry::damage`])
    /// rather than failing.
    pub(crate) fn open(dir: &Path, mode: u32) -> Result<Registry> {
        let pdir = dir.join("producers");
        crate::private_dir::create_dir_all(&pdir, mode)?;
        let path = pdir.join("registry.json");
        match Self::read(&path) {
            Ok(file) => Ok(Self::with(path, mode, file, None)),
            Err(e) if crate::broker::is_damage(&e) => {
                ::log::error!(
                    "the producer registry is unavailable ({e}): idempotent producers are \
                     refused until it is repaired or removed"
                );
                Ok(Self::with(path, mode, RegistryFile::default(), Some(e)))
            }
            Err(e) => Err(e),
        }
    }

    fn with(path: PathBuf, mode: u32, file: RegistryFile, damage: Option<Error>) -> Registry {
        let next = file.next_id;
        Registry {
            path,
            mode,
            state: Mutex::new(RegistryState {
                file,
                next_anonymous: next,
                reserved_end: next,
                live: HashMap::new(),
            }),
            damage,
        }
    }

    /// The error idempotent producers get while the registry is damaged.
    pub(crate) fn damage(&self) -> Option<Error> {
        self.damage.as_ref().map(Error::duplicate)
    }

    fn check_usable(&self) -> Result<()> {
        match &self.damage {
            Some(e) => Err(e.duplicate()),
            None => Ok(()),
        }
    }

    fn read(path: &Path) -> Result<RegistryFile> {
        let path = path.to_owned();
        let file = match crate::atomic_file::read_small(&path)? {
            Some(bytes) => {
                serde_json::from_slice::<RegistryFile>(&bytes).map_err(|e| Error::Corrupt {
                    path: path.clone(),
                    position: e.column() as u64,
                    reason: format!("producer registry is not valid: {e}"),
                })?
            }
            None => RegistryFile::default(),
        };
        if file.next_id < 0
            || file
                .named
                .values()
                .any(|r| r.id < 0 || r.id >= file.next_id)
        {
            return Err(Error::Corrupt {
                path,
                position: 0,
                reason: "producer registry holds ids out of range".into(),
            });
        }
        Ok(file)
    }

    fn save(&self, file: &RegistryFile) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(file).expect("registry serialises");
        write_atomic(&self.path, &bytes, self.mode, true)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryState> {
        sync::lock(&self.state)
    }

    /// A fresh id for an anonymous producer (epoch 0).
    pub(crate) fn allocate_anonymous(&self) -> Result<i64> {
        self.check_usable()?;
        let mut st = self.lock();
        if st.next_anonymous == st.reserved_end {
            let end = st.file.next_id + ID_BLOCK;
            let old = st.file.next_id;
            st.file.next_id = end;
            if let Err(e) = self.save(&st.file) {
                st.file.next_id = old;
                return Err(e);
            }
            st.next_anonymous = old;
            st.reserved_end = end;
        }
        let id = st.next_anonymous;
        st.next_anonymous += 1;
        Ok(id)
    }

    /// The id of the producer named `name` (allocated on first use) and a new
    /// epoch, which fences every older object of that name.
    pub(crate) fn acquire_named(&self, name: &str) -> Result<(Arc<NamedIdentity>, i16)> {
        validate_producer_name(name)?;
        self.check_usable()?;
        let mut st = self.lock();
        let before = st.file.named.get(name).copied();
        let record = if let Some(r) = before {
            if r.epoch == i16::MAX {
                return Err(Error::InvalidArgument(format!(
                    "producer name {name:?} has used every epoch"
                )));
            }
            NamedRecord {
                id: r.id,
                epoch: r.epoch + 1,
            }
        } else {
            // Take the id from the file's counter, past any ids reserved
            // for anonymous producers.
            let id = st.file.next_id;
            st.file.next_id += 1;
            NamedRecord { id, epoch: 0 }
        };
        st.file.named.insert(name.to_owned(), record);
        if let Err(e) = self.save(&st.file) {
            if let Some(r) = before {
                st.file.named.insert(name.to_owned(), r)
            } else {
                st.file.next_id -= 1;
                st.file.named.remove(name)
            };
            return Err(e);
        }
        if before.is_none() && st.next_anonymous == st.reserved_end {
            st.next_anonymous = st.file.next_id;
            st.reserved_end = st.file.next_id;
        }
        let ident = st
            .live
            .entry(name.to_owned())
            .or_insert_with(|| {
                Arc::new(NamedIdentity {
                    id: record.id,
                    current_epoch: AtomicI16::new(record.epoch),
                })
            })
            .clone();
        ident.current_epoch.store(record.epoch, Ordering::Release);
        Ok((ident, record.epoch))
    }
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

    #[test]
    fn registry_fences_and_persists() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::open(dir.path(), 0o600).unwrap();
        let a = r.allocate_anonymous().unwrap();
        let (n1, e1) = r.acquire_named("ingest-1").unwrap();
        let (n2, e2) = r.acquire_named("ingest-1").unwrap();
        assert_eq!(n1.id, n2.id);
        assert_ne!(a, n1.id);
        assert_eq!((e1, e2), (0, 1));
        assert_eq!(n1.current_epoch.load(Ordering::Acquire), 1);
        drop(r);
        let r = Registry::open(dir.path(), 0o600).unwrap();
        let (n3, e3) = r.acquire_named("ingest-1").unwrap();
        assert_eq!((n3.id, e3), (n1.id, 2));
        let b = r.allocate_anonymous().unwrap();
        assert!(b > a && b != n1.id);
        assert!(r.acquire_named("bad/name").is_err());
    }
}
