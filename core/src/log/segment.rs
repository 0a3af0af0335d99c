//! One segment: a memory-mapped log file, grown in chunks ahead of the
//! writer, plus its two sparse indexes. Append, read, recover, seal, delete.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::files::FileCache;
use crate::log::batch::{self, BatchHeader, Check};
use crate::log::index::{IndexFile, OffsetEntry, TimeEntry, OFFSET_ENTRY, TIME_ENTRY};
use crate::log::mmap::{is_not_found, sync_dir, MappedFile, WriteToken};
use crate::log::recover::recover;
pub(crate) use crate::log::recover::Recovered;

/// File name of a segment's log, index or time index.
pub(crate) fn segment_path(dir: &Path, base: u64, ext: &str) -> PathBuf {
    dir.join(format!("{base:020}.{ext}"))
}

/// Suffix given to the files of a segment removed by retention; they are
/// unlinked when the last reader lets go (or at the next open).
pub(crate) const DELETED_SUFFIX: &str = "deleted";
/// Name stem of a segment prepared ahead of a roll: the whole stem in
/// exclusive mode; in shared mode each process's writer prepares its own,
/// `next.<token>` (see `PartitionLog::prepared_stem`).
pub(crate) const PREPARED_STEM: &str = "next";

/// Bytes a new segment's log file is created with, and its first growth
/// step (see [`MappedFile::grow_for`]): a small partition takes little
/// disk.
pub(crate) const LOG_FIRST_STEP: usize = 64 << 10;
/// First growth step of an index file (created empty).
pub(crate) const INDEX_FIRST_STEP: usize = 4 << 10;

/// Sizes a segment is created with, and where its log's descriptor is kept.
#[derive(Debug, Clone)]
pub(crate) struct SegmentSizes {
    /// Most bytes of the log (what is mapped; the file grows up to it).
    pub log_bytes: usize,
    /// Most entries of each index.
    pub index_entries: usize,
    /// Unix mode bits of created files.
    pub mode: u32,
    /// The broker's descriptor cache, where the log's descriptor is kept
    /// while the segment is active.
    pub files: Arc<FileCache>,
}

/// Where recovery moves the bytes it cuts from `<base>.log` at byte `pos`
/// after a clean shutdown (they cannot be a torn write, so they are damage
/// worth inspecting): `<base>.log.damaged-<pos>` next to the segment.
pub(crate) fn quarantine_path(log: &Path, pos: usize) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(format!(".{QUARANTINE_INFIX}-{pos}"));
    PathBuf::from(name)
}

/// What a quarantine file's name holds after the segment file's name.
pub(crate) const QUARANTINE_INFIX: &str = "damaged";

/// A segment of a partition's log.
#[derive(Debug)]
pub(crate) struct Segment {
    dir: PathBuf,
    base: u64,
    log: MappedFile,
    index: IndexFile,
    time: IndexFile,
    sealed: AtomicBool,
    /// Set before the files are renamed aside ([`Segment::mark_deleted`]):
    /// a sync that then finds the file gone has nothing left to do.
    deleting: AtomicBool,
    deleted: AtomicBool,
    dir_synced: AtomicBool,
    max_timestamp: AtomicI64,
    /// Whether the time index read from disk was checked against the log:
    /// [`TIME_UNCHECKED`], [`TIME_TRUSTED`] or [`TIME_DISTRUSTED`].
    time_state: AtomicU8,
}

/// The time index came from disk and has not been checked yet.
const TIME_UNCHECKED: u8 = 0;
/// The time index was written by this process or checked out.
const TIME_TRUSTED: u8 = 1;
/// The time index disagrees with the log: lookups scan from the start.
const TIME_DISTRUSTED: u8 = 2;

/// The right to write a segment (its log and both indexes): one per
/// segment, made with it, held by the partition's writer. Every write,
/// publish and trim of the segment takes it mutably.
#[derive(Debug)]
pub(crate) struct SegmentWriter {
    log: WriteToken,
    pub(super) index: WriteToken,
    pub(super) time: WriteToken,
}

impl SegmentWriter {
    /// No right to write anything (see [`WriteToken::none`]).
    pub(crate) fn none() -> SegmentWriter {
        SegmentWriter {
            log: WriteToken::none(),
            index: WriteToken::none(),
            time: WriteToken::none(),
        }
    }
}

/// A segment created ahead of time under a temporary name, with its pages
/// faulted in, waiting to become the next active segment.
#[derive(Debug)]
pub(crate) struct PreparedSegment {
    log: MappedFile,
    index: IndexFile,
    time: IndexFile,
    writer: SegmentWriter,
    /// Bytes of the log faulted in.
    populated: usize,
}

impl PreparedSegment {
    /// Creates `<stem>.*` files in `dir`; with `populate`, allocates and
    /// faults in the first `populate` bytes of the log (the writer grows
    /// the file and faults in the rest ahead of itself, see
    /// `PartitionLog::prefault_ahead`; index pages are few and left to
    /// fault on use). Without, the log starts at [`LOG_FIRST_STEP`].
    pub(crate) fn create(
        dir: &Path,
        stem: &str,
        sizes: SegmentSizes,
        populate: usize,
    ) -> Result<Self> {
        let p = |ext: &str| dir.join(format!("{stem}.{ext}"));
        let initial = populate.max(LOG_FIRST_STEP);
        let (log, log_token) = MappedFile::create(
            &p("log"),
            sizes.log_bytes,
            initial,
            LOG_FIRST_STEP,
            sizes.mode,
            Some(&sizes.files),
        )?;
        let (index, index_token) =
            IndexFile::create(&p("idx"), OFFSET_ENTRY, sizes.index_entries, sizes.mode)?;
        let (time, time_token) =
            IndexFile::create(&p("tix"), TIME_ENTRY, sizes.index_entries, sizes.mode)?;
        let seg = PreparedSegment {
            log,
            index,
            time,
            writer: SegmentWriter {
                log: log_token,
                index: index_token,
                time: time_token,
            },
            populated: populate.min(sizes.log_bytes),
        };
        seg.log.populate_range(0, populate);
        Ok(seg)
    }

    /// Log capacity.
    pub(crate) fn capacity(&self) -> usize {
        self.log.capacity()
    }

    /// Bytes of the log faulted in at creation.
    pub(crate) fn populated(&self) -> usize {
        self.populated
    }
}

impl Segment {
    /// Creates a new, empty active segment, with its writer.
    pub(crate) fn create(
        dir: &Path,
        base: u64,
        sizes: SegmentSizes,
    ) -> Result<(Segment, SegmentWriter)> {
        let (log, log_token) = MappedFile::create(
            &segment_path(dir, base, "log"),
            sizes.log_bytes,
            LOG_FIRST_STEP,
            LOG_FIRST_STEP,
            sizes.mode,
            Some(&sizes.files),
        )?;
        let (index, index_token) = IndexFile::create(
            &segment_path(dir, base, "idx"),
            OFFSET_ENTRY,
            sizes.index_entries,
            sizes.mode,
        )?;
        let (time, time_token) = IndexFile::create(
            &segment_path(dir, base, "tix"),
            TIME_ENTRY,
            sizes.index_entries,
            sizes.mode,
        )?;
        let writer = SegmentWriter {
            log: log_token,
            index: index_token,
            time: time_token,
        };
        Ok((
            Segment::assemble(dir, base, log, index, time, false).trusted(),
            writer,
        ))
    }

    /// Turns a prepared segment into the active segment starting at `base`.
    pub(crate) fn from_prepared(
        dir: &Path,
        base: u64,
        mut p: PreparedSegment,
    ) -> Result<(Segment, SegmentWriter)> {
        p.index.file_mut().rename(&segment_path(dir, base, "idx"))?;
        p.time.file_mut().rename(&segment_path(dir, base, "tix"))?;
        // The log last: a segment is discovered by its .log file.
        p.log.rename(&segment_path(dir, base, "log"))?;
        Ok((
            Segment::assemble(dir, base, p.log, p.index, p.time, false).trusted(),
            p.writer,
        ))
    }

    /// Marks the time index as this process's own (nothing to check).
    fn trusted(self) -> Segment {
        self.time_state.store(TIME_TRUSTED, Ordering::Relaxed);
        self
    }

    fn assemble(
        dir: &Path,
        base: u64,
        log: MappedFile,
        index: IndexFile,
        time: IndexFile,
        sealed: bool,
    ) -> Segment {
        let max_ts = time.last_time().map_or(i64::MIN, |e| e.ts);
        Segment {
            dir: dir.to_owned(),
            base,
            log,
            index,
            time,
            sealed: AtomicBool::new(sealed),
            deleting: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            dir_synced: AtomicBool::new(sealed),
            max_timestamp: AtomicI64::new(max_ts),
            time_state: AtomicU8::new(TIME_UNCHECKED),
        }
    }

    /// Opens a sealed (read-only) segment. Cheap: maps the files, reads nothing.
    pub(crate) fn open_sealed(dir: &Path, base: u64) -> Result<Segment> {
        let log = MappedFile::open_read_only(&segment_path(dir, base, "log"))?;
        let open_index = |ext, width| {
            let path = segment_path(dir, base, ext);
            if path.exists() {
                IndexFile::open_sealed(&path, width)
            } else {
                // A missing index only costs scans; make an empty one.
                IndexFile::create(&path, width, 0, 0o600).map(|(index, _)| index)
            }
        };
        let mut index = open_index("idx", OFFSET_ENTRY)?;
        let mut time = open_index("tix", TIME_ENTRY)?;
        // A crash between creating the next segment and trimming this one
        // leaves allocated zero entries at the end: drop them.
        index.drop_zero_tail();
        time.drop_zero_tail();
        let seg = Segment::assemble(dir, base, log, index, time, true);
        seg.drop_pages();
        if seg.max_timestamp() == i64::MIN && seg.end() > 0 {
            // No time entry: fall back to the file's modification time.
            let mtime = std::fs::metadata(seg.path())
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(i64::MIN, |d| d.as_millis() as i64);
            seg.max_timestamp.store(mtime, Ordering::Relaxed);
        }
        Ok(seg)
    }

    /// Opens a segment in a process that only reads it (shared mode): the
    /// log mapped read-only at `capacity` (or its file's length, if
    /// longer), nothing published yet (see `reader.rs`), no index (lookups
    /// scan: the writer may still be writing or trimming the indexes, and
    /// a map of a file cut meanwhile would fault past its end).
    pub(crate) fn open_reader_active(dir: &Path, base: u64, capacity: usize) -> Result<Segment> {
        let log = MappedFile::open_for_reader(&segment_path(dir, base, "log"), capacity)?;
        let index = IndexFile::empty(&segment_path(dir, base, "idx"), OFFSET_ENTRY);
        let time = IndexFile::empty(&segment_path(dir, base, "tix"), TIME_ENTRY);
        let seg = Segment::assemble(dir, base, log, index, time, false);
        // No time index: time lookups scan, and the largest timestamp comes
        // from the batches the reader checks ([`Segment::note_timestamp`]).
        seg.time_state.store(TIME_DISTRUSTED, Ordering::Relaxed);
        Ok(seg)
    }

    /// Opens the active segment in a process that appends to it while
    /// others may too (shared mode, several writers): log and indexes
    /// mapped writable, nothing published and nothing written (what is
    /// published comes from the partition's tail page, checked batch by
    /// batch, and the indexes' entries from [`Segment::adopt_indexes`]
    /// under the partition's append lock). A missing index stays empty:
    /// lookups scan.
    pub(crate) fn open_shared_active(
        dir: &Path,
        base: u64,
        sizes: &SegmentSizes,
    ) -> Result<(Segment, SegmentWriter)> {
        let (log, log_token, _) = MappedFile::open_writable(
            &segment_path(dir, base, "log"),
            sizes.log_bytes,
            LOG_FIRST_STEP,
            Some(&sizes.files),
        )?;
        let open_index = |ext, width| {
            let path = segment_path(dir, base, ext);
            match IndexFile::open_active(&path, width, sizes.index_entries) {
                Err(e) if is_not_found(&e) => {
                    Ok((IndexFile::empty(&path, width), WriteToken::none()))
                }
                r => r,
            }
        };
        let (index, index_token) = open_index("idx", OFFSET_ENTRY)?;
        let (time, time_token) = open_index("tix", TIME_ENTRY)?;
        let seg = Segment::assemble(dir, base, log, index, time, false);
        // Time lookups scan until the entries are adopted and checked.
        seg.time_state.store(TIME_DISTRUSTED, Ordering::Relaxed);
        Ok((
            seg,
            SegmentWriter {
                log: log_token,
                index: index_token,
                time: time_token,
            },
        ))
    }

    /// Shared mode, several writers, after taking the append lock from a
    /// dead holder: reads the lengths of the log and index files again
    /// (that holder may have grown them, or trimmed them in a roll it did
    /// not publish).
    pub(crate) fn refresh_lengths(&self) {
        self.log.refresh_allocated();
        self.index.file().refresh_allocated();
        self.time.file().refresh_allocated();
    }

    /// Shared mode, several writers, under the partition's append lock:
    /// takes in the index entries other processes appended (well-formed
    /// entries after the last known one, pointing below the published
    /// end). Returns the log position of the last offset-index entry (0:
    /// none).
    pub(crate) fn adopt_indexes(&self, w: &mut SegmentWriter) -> usize {
        // (The files' lengths this process knows are at most what they
        // are: only a roll trims them, and one not published is repaired
        // with `refresh_lengths` first.)
        let limit = self.end();
        self.index.adopt(&mut w.index, limit);
        self.time.adopt(&mut w.time, limit);
        let n = self.index.len();
        if n == 0 {
            0
        } else {
            self.index.offset_entry(n - 1).pos as usize
        }
    }

    /// Raises the segment's largest known timestamp (a reader process,
    /// from the batches it checked).
    pub(crate) fn note_timestamp(&self, ts: i64) {
        self.max_timestamp.fetch_max(ts, Ordering::Relaxed);
    }

    /// The log file, for a reader process advancing its published length.
    pub(crate) fn log_file(&self) -> &MappedFile {
        &self.log
    }

    /// A segment this process only reads, sealed by its writer: publishes
    /// its data up to `end` (where its checked seal entry says it ends)
    /// and takes `max_ts` as its largest timestamp, checked against the
    /// batch headers when time retention or a time lookup first asks.
    /// Returns false, changing nothing, when `end` lies past the mapping.
    pub(crate) fn adopt_seal_end(&self, end: usize, max_ts: i64, flushed: bool) -> bool {
        if end > self.log.capacity() {
            return false;
        }
        self.log.advance_published(end, flushed);
        self.max_timestamp.fetch_max(max_ts, Ordering::Relaxed);
        self.time_state.store(TIME_UNCHECKED, Ordering::Release);
        true
    }

    /// Marks a segment this process only reads as sealed: the writer
    /// rolled past it, and readers at its end go on to the next one.
    pub(crate) fn mark_sealed_by_writer(&self) {
        self.sealed.store(true, Ordering::Release);
    }

    /// Opens the active (last) segment and recovers its tail: scans from the
    /// last index entry that checks out, truncating at the first bad batch.
    /// `max_batch` bounds how far a partial write can reach.
    pub(crate) fn open_active(
        dir: &Path,
        base: u64,
        sizes: SegmentSizes,
        interval: usize,
        max_batch: usize,
        trust_index: bool,
        committed: Option<&dyn Fn(u64) -> Option<super::CommittedRun>>,
    ) -> Result<(Segment, SegmentWriter, Recovered)> {
        let (mut log, log_token, file_len) = MappedFile::open_writable(
            &segment_path(dir, base, "log"),
            sizes.log_bytes,
            LOG_FIRST_STEP,
            Some(&sizes.files),
        )?;
        let open_index = |ext, width| {
            let path = segment_path(dir, base, ext);
            // Opened first, created only when missing: one system call
            // fewer per index at every open.
            match IndexFile::open_active(&path, width, sizes.index_entries) {
                Err(e) if is_not_found(&e) => {
                    IndexFile::create(&path, width, sizes.index_entries, sizes.mode)
                }
                r => r,
            }
        };
        let (mut index, index_token) = open_index("idx", OFFSET_ENTRY)?;
        let (mut time, time_token) = open_index("tix", TIME_ENTRY)?;
        let mut writer = SegmentWriter {
            log: log_token,
            index: index_token,
            time: time_token,
        };
        let limit = (file_len as usize).min(log.capacity());
        let rec = recover(
            base,
            &mut log,
            &mut index,
            &mut time,
            &mut writer,
            limit,
            interval,
            max_batch,
            trust_index,
            sizes.mode,
            committed,
        );
        if let Some(found) = rec.unsupported {
            return Err(Error::UnsupportedVersion {
                path: log.path().to_owned(),
                found: u32::from(found),
                supported: u32::from(batch::MAX_MAGIC),
            });
        }
        let seg = Segment::assemble(dir, base, log, index, time, false);
        seg.max_timestamp
            .store(rec.max_timestamp, Ordering::Relaxed);
        seg.drop_pages();
        Ok((seg, writer, rec))
    }

    /// Unmaps the pages read so far (see [`MappedFile::drop_pages`]).
    pub(crate) fn drop_pages(&self) {
        self.log.drop_pages();
        self.index.file().drop_pages();
        self.time.file().drop_pages();
    }

    /// First offset of the segment.
    #[inline]
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// Published (readable) length of the log.
    #[inline]
    pub(crate) fn end(&self) -> usize {
        self.log.published()
    }

    /// Capacity of the log: the most it may hold.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.log.capacity()
    }

    /// Bytes of the log file allocated so far (at least [`Segment::end`]).
    #[inline]
    pub(crate) fn allocated(&self) -> usize {
        self.log.allocated()
    }

    /// Makes sure `len` more bytes fit in the file after the end, growing
    /// it if not: a full disk is an [`Error::DiskFull`] here, before
    /// anything is written. `len` must fit in the capacity. Writer only.
    #[inline]
    pub(crate) fn ensure_room(&self, len: usize) -> Result<()> {
        let needed = self.end() + len;
        if needed <= self.log.allocated() {
            return Ok(());
        }
        self.log.grow_for(needed)
    }

    /// Whether the writer is past the middle of the last growth step, so
    /// that the file should grow ahead of it ([`Segment::grow_ahead`]).
    #[inline]
    pub(crate) fn growth_due(&self) -> bool {
        let (end, allocated) = (self.end(), self.log.allocated());
        allocated < self.capacity() && (self.log.next_growth() - allocated) / 2 > allocated - end
    }

    /// Grows the log file to the segment's full capacity. Writer only.
    pub(crate) fn grow_to_capacity(&self) -> Result<()> {
        self.log.grow_for(self.capacity())
    }

    /// Grows the log file by its next step, ahead of the writer. Writer
    /// only.
    pub(crate) fn grow_ahead(&self) -> Result<()> {
        self.log.grow_for(self.log.next_growth())
    }

    /// Whether the segment was rolled (no more appends).
    #[inline]
    pub(crate) fn is_sealed(&self) -> bool {
        self.sealed.load(Ordering::Acquire)
    }

    /// Largest record timestamp known for the segment.
    pub(crate) fn max_timestamp(&self) -> i64 {
        self.max_timestamp.load(Ordering::Relaxed)
    }

    /// [`Segment::max_timestamp`] once the time index read from disk (where
    /// it comes from) has been checked against the log: what time retention
    /// and time lookups must use, so a damaged index can neither expire a
    /// segment early nor hide its records from a lookup.
    pub(crate) fn checked_max_timestamp(&self) -> i64 {
        self.check_time_index();
        self.max_timestamp()
    }

    /// Checks, once per process, a time index that came from disk: every
    /// entry must sit on a batch boundary, name that batch's offset and carry
    /// the largest timestamp of the batches before it. An index that
    /// disagrees is not used again (lookups scan the segment) and a sealed
    /// segment's max timestamp is taken from its batch headers instead.
    fn check_time_index(&self) {
        if self.time_state.load(Ordering::Acquire) != TIME_UNCHECKED {
            return;
        }
        let (ok, walked_max, complete) = self.time_index_matches_log();
        if !ok && self.time.len() > 0 {
            ::log::warn!(
                "time index of {} disagrees with the log; time lookups scan the segment",
                self.path().display()
            );
        }
        if !ok {
            if self.is_sealed() && complete {
                self.max_timestamp.store(walked_max, Ordering::Relaxed);
            } else {
                self.max_timestamp.fetch_max(walked_max, Ordering::Relaxed);
            }
        }
        let state = if ok { TIME_TRUSTED } else { TIME_DISTRUSTED };
        let _ = self.time_state.compare_exchange(
            TIME_UNCHECKED,
            state,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Walks the batch headers (lengths and offsets, no CRC: the reads that
    /// follow check those) against the time entries present now. Returns
    /// (entries all match, largest batch timestamp seen, walk reached the
    /// end of the published data).
    fn time_index_matches_log(&self) -> (bool, i64, bool) {
        let n = self.time.len();
        let end = self.end();
        let (mut i, mut pos, mut expected, mut max) = (0usize, 0usize, self.base, i64::MIN);
        let mut ok = true;
        let complete = loop {
            while i < n {
                let e = self.time.time_entry(i);
                match (e.pos as usize).cmp(&pos) {
                    std::cmp::Ordering::Greater => break,
                    std::cmp::Ordering::Less => ok = false,
                    std::cmp::Ordering::Equal => {
                        ok &= self.base + u64::from(e.rel) == expected && e.ts == max;
                    }
                }
                i += 1;
            }
            let Some(h) = BatchHeader::parse(self.log.bytes(pos, end)) else {
                break pos == end || self.log.bytes(pos, end).iter().all(|&b| b == 0);
            };
            if h.length == 0 {
                break true;
            }
            let total = h.total_len();
            if h.base_offset != expected
                || h.length < batch::MIN_LENGTH
                || total > end - pos
                || (h.record_count == 0 && !h.is_control())
            {
                break false;
            }
            max = max.max(h.max_timestamp);
            expected = h.next_offset();
            pos += total;
        };
        if self.is_sealed() {
            // Nothing is being committed to a sealed segment: every entry
            // must have been walked, and its max timestamp (taken from the
            // last entry) must be the headers' own.
            ok &= complete && i == n && self.max_timestamp() == max;
        }
        // In the active segment, an entry past the walked end is the one
        // being committed now, or nonsense that `entry_checks_out` rejects.
        (ok, max, complete)
    }

    /// The partition directory the segment's files are in.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the log file.
    pub(crate) fn path(&self) -> &Path {
        self.log.path()
    }

    /// Size on disk of the log (the published bytes for the active segment).
    pub(crate) fn size(&self) -> u64 {
        self.end() as u64
    }

    /// Published bytes `[start, end)`.
    #[inline]
    pub(crate) fn bytes(&self, start: usize, end: usize) -> &[u8] {
        self.log.bytes(start, end)
    }

    /// The first position after `pos` (at any byte: compact batches are
    /// not aligned) that holds a valid batch, if any: where reading can go
    /// on past damage.
    pub(crate) fn next_valid_batch_after(&self, pos: usize) -> Option<usize> {
        let end = self.end();
        let mut at = pos + 1;
        while at < end {
            if let Check::Valid(_) = batch::check(self.log.bytes(at, end)) {
                return Some(at);
            }
            at += 1;
        }
        None
    }

    /// The batch at `pos`, or `None` at the end of the published data.
    /// A damaged batch is an [`Error::Corrupt`].
    #[inline(always)]
    pub(crate) fn batch_at(&self, pos: usize) -> Result<Option<BatchHeader>> {
        let end = self.end();
        if pos >= end {
            return Ok(None);
        }
        match batch::check(self.log.bytes(pos, end)) {
            Check::Valid(h) => Ok(Some(h)),
            Check::End => Ok(None),
            Check::Invalid(reason) => Err(self.invalid(pos, reason)),
        }
    }

    /// The error for the invalid batch at `pos`: [`Error::UnsupportedVersion`]
    /// for a batch of a newer format, else [`Error::Corrupt`].
    #[cold]
    pub(crate) fn invalid(&self, pos: usize, reason: &str) -> Error {
        if reason == batch::UNSUPPORTED_VERSION {
            let magic = self.log.bytes(pos, self.end()).get(16).copied();
            return Error::UnsupportedVersion {
                path: self.log.path().to_owned(),
                found: u32::from(magic.unwrap_or(0)),
                supported: u32::from(batch::MAX_MAGIC),
            };
        }
        self.corrupt(pos, reason)
    }

    /// The corruption error for `pos`.
    pub(crate) fn corrupt(&self, pos: usize, reason: &str) -> Error {
        Error::Corrupt {
            path: self.log.path().to_owned(),
            position: pos as u64,
            reason: reason.to_owned(),
        }
    }

    /// Position of the batch containing `offset` (or the first batch after
    /// it), or the published end when the segment holds nothing at or past it.
    pub(crate) fn find(&self, offset: u64) -> Result<usize> {
        let rel = offset.saturating_sub(self.base).min(u64::from(u32::MAX)) as u32;
        let (mut pos, mut expected) = match self.index.floor_offset(rel) {
            Some(e) if self.entry_checks_out(e.pos as usize, e.rel) => {
                (e.pos as usize, self.base + u64::from(e.rel))
            }
            _ => (0, self.base),
        };
        while let Some(h) = self.batch_at(pos)? {
            // The base offset is outside the CRC: check the sequence.
            if h.base_offset != expected {
                return Err(self.corrupt(pos, "batch base offset out of sequence"));
            }
            if h.last_offset() >= offset {
                return Ok(pos);
            }
            expected = h.next_offset();
            pos += h.total_len();
        }
        Ok(pos)
    }

    fn entry_checks_out(&self, pos: usize, rel: u32) -> bool {
        matches!(self.batch_at(pos), Ok(Some(h)) if h.base_offset == self.base + u64::from(rel))
    }

    /// Position to start scanning from for the first record with a timestamp
    /// at or after `ts`.
    pub(crate) fn find_time(&self, ts: i64) -> usize {
        self.check_time_index();
        if self.time_state.load(Ordering::Acquire) == TIME_DISTRUSTED {
            return 0;
        }
        match self.time.floor_time(ts) {
            Some(e) if self.entry_checks_out(e.pos as usize, e.rel) => e.pos as usize,
            _ => 0,
        }
    }

    /// Writable space above the published end, within the allocated file
    /// ([`Segment::ensure_room`] first), for the segment's writer.
    #[inline]
    pub(crate) fn reserve<'a>(&'a self, w: &'a mut SegmentWriter, len: usize) -> &'a mut [u8] {
        self.log.unpublished_mut(&mut w.log, self.end(), len)
    }

    /// Writes the concatenation of `parts` as the batch being written at
    /// the end, with `pwritev` (see
    /// [`MappedFile::write_unpublished_vectored`]); publish the batch with
    /// [`Segment::commit`].
    pub(crate) fn write_vectored_at_end(
        &self,
        w: &mut SegmentWriter,
        parts: &[&[u8]],
    ) -> Result<()> {
        self.log
            .write_unpublished_vectored(&mut w.log, self.end(), parts)
    }

    /// Publishes a batch written through [`Segment::reserve`] or
    /// [`Segment::write_vectored_at_end`] and indexes it
    /// when `index` is set.
    #[inline]
    pub(crate) fn commit(
        &self,
        w: &mut SegmentWriter,
        len: usize,
        index: Option<(u64, i64)>,
        max_ts: i64,
    ) {
        let pos = self.end();
        if let Some((offset, ts_before)) = index {
            if self.index.has_room() && self.time.has_room() {
                let rel = (offset - self.base) as u32;
                self.index.push_offset(
                    &mut w.index,
                    OffsetEntry {
                        rel,
                        pos: pos as u32,
                    },
                );
                self.time.push_time(
                    &mut w.time,
                    TimeEntry {
                        ts: ts_before,
                        rel,
                        pos: pos as u32,
                    },
                );
            }
        }
        if max_ts > self.max_timestamp.load(Ordering::Relaxed) {
            self.max_timestamp.store(max_ts, Ordering::Relaxed);
        }
        self.log.publish(&mut w.log, pos + len);
    }

    /// Rolls: trims the files to their data, closes the log's descriptor
    /// (the last one the segment held: what needs the file later opens it
    /// by path) and marks the segment sealed. Takes the segment's writer:
    /// nothing writes to it again.
    ///
    /// With `shared` (readers in other processes map the file), the log is
    /// trimmed to [`shared_sealed_len`] rather than to its data.
    pub(crate) fn seal(&self, mut w: SegmentWriter, next_offset: u64, shared: bool) -> Result<()> {
        // A final time entry records the segment's largest timestamp.
        let max_ts = self.max_timestamp();
        if self.time.has_room() && self.end() > 0 {
            self.time.push_time(
                &mut w.time,
                TimeEntry {
                    ts: max_ts,
                    rel: (next_offset - self.base) as u32,
                    pos: self.end() as u32,
                },
            );
        }
        let log_len = if shared {
            shared_sealed_len(self.end())
        } else {
            self.end()
        };
        let trimmed = self
            .log
            .trim_to(&mut w.log, log_len)
            .and_then(|()| self.index.file().trim(&mut w.index))
            .and_then(|()| self.time.file().trim(&mut w.time));
        // Nothing writes to the file again, trimmed or not.
        self.log.release_file();
        trimmed?;
        self.sealed.store(true, Ordering::Release);
        Ok(())
    }

    /// Flushes everything published to disk: the log, its directory entry
    /// and, once sealed, the indexes. The active segment's indexes are not
    /// synced: they are hints, every entry is checked against the log before
    /// use, and after an unclean shutdown recovery rebuilds them from the
    /// log; syncing them would cost an `acks=all` flush up to two more
    /// `msync`s.
    pub(crate) fn flush(&self) -> Result<()> {
        self.log.flush()?;
        if self.is_sealed() {
            self.index.file().flush()?;
            self.time.file().flush()?;
            self.sync_log_file()?; // the trimmed size
        }
        if !self.dir_synced.load(Ordering::Acquire) {
            sync_dir(&self.dir)?;
            self.dir_synced.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Flushes the log from its flushed end through byte `end`, past the
    /// published end (a transaction's data before its commit point), and
    /// the segment's directory entry, in one `msync`.
    pub(crate) fn flush_through(&self, end: usize) -> Result<()> {
        self.log.flush_through(end)?;
        if !self.dir_synced.load(Ordering::Acquire) {
            sync_dir(&self.dir)?;
            self.dir_synced.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Writes the unpublished bytes `[start, end)` of the log to disk (see
    /// [`MappedFile::sync_unpublished`]).
    pub(crate) fn sync_unpublished(&self, start: usize, end: usize) -> Result<()> {
        self.log.sync_unpublished(start, end)
    }

    /// Whether everything published is on disk.
    pub(crate) fn is_flushed(&self) -> bool {
        self.log.is_flushed() && self.dir_synced.load(Ordering::Acquire)
    }

    /// fsyncs the log and both index files whole (after an unclean
    /// shutdown, what recovery kept may be only in the page cache). Files
    /// without a descriptor (indexes, sealed segments) are opened by path
    /// for it.
    pub(crate) fn sync_all_files(&self) -> Result<()> {
        self.log.sync_file()?;
        self.index.file().sync_file()?;
        self.time.file().sync_file()
    }

    /// fsyncs the log file; one that retention renamed aside meanwhile
    /// needs nothing more.
    fn sync_log_file(&self) -> Result<()> {
        match self.log.sync_file() {
            Err(e) if is_not_found(&e) && self.deleting.load(Ordering::Acquire) => Ok(()),
            r => r,
        }
    }

    /// Closes every descriptor the segment still holds (the active log's,
    /// when its log is closed). The mappings stay until the last holder
    /// (the log, a cursor, a message) drops the segment; appends to it fail
    /// from now on.
    pub(crate) fn release_files(&self) {
        self.log.release_file();
        self.index.file().release_file();
        self.time.file().release_file();
    }

    /// A stand-in for the active segment of a closed log: no file, no
    /// mapping, nothing readable, no room.
    pub(crate) fn closed(dir: &Path, base: u64) -> Segment {
        let path = |ext| segment_path(dir, base, ext);
        Segment::assemble(
            dir,
            base,
            MappedFile::empty(&path("log")),
            IndexFile::empty(&path("idx"), OFFSET_ENTRY),
            IndexFile::empty(&path("tix"), TIME_ENTRY),
            true,
        )
    }

    /// Checks every batch of a sealed segment: valid (CRC32C included),
    /// offsets following on from the base, and ending exactly at
    /// `next_base`, where the next segment starts. `Err((position,
    /// reason))` at the first failure.
    pub(crate) fn check_chain(
        &self,
        next_base: u64,
    ) -> std::result::Result<(), (usize, &'static str)> {
        let (mut pos, mut expected) = (0usize, self.base);
        loop {
            match self.batch_at(pos) {
                Ok(Some(h)) if h.base_offset == expected => {
                    expected = h.next_offset();
                    pos += h.total_len();
                }
                Ok(Some(_)) => return Err((pos, "batch base offset out of sequence")),
                Ok(None) if expected == next_base => return Ok(()),
                Ok(None) => return Err((pos, "segment ends before the next one starts")),
                Err(_) => return Err((pos, "invalid batch")),
            }
        }
    }

    /// Maps published bytes `[start, end)` of the log file for reading
    /// (`MADV_POPULATE_READ`), best effort.
    pub(crate) fn populate_read(&self, start: usize, end: usize) {
        self.log.populate_read(start, end);
    }

    /// Faults in the log's pages for writing (best effort).
    pub(crate) fn populate(&self) {
        self.log.populate();
    }

    /// Faults in the log's pages of `[start, end)` for writing (best effort).
    pub(crate) fn populate_range(&self, start: usize, end: usize) {
        self.log.populate_range(start, end);
    }

    /// See [`MappedFile::write_back_ahead`].
    pub(crate) fn write_back_ahead(&self, start: usize, end: usize) {
        self.log.write_back_ahead(start, end);
    }

    /// Removes the segment: renames its files aside at once (so a reopen no
    /// longer sees it) and unlinks them when the last holder drops it.
    pub(crate) fn mark_deleted(&self) -> Result<()> {
        self.deleting.store(true, Ordering::Release);
        for (f, ext) in [
            (self.index.file(), "idx"),
            (self.time.file(), "tix"),
            (&self.log, "log"),
        ] {
            f.rename_shared(&deleted_path(&self.dir, self.base, ext))?;
        }
        self.deleted.store(true, Ordering::Release);
        Ok(())
    }
}

/// The length a sealed segment's log file keeps in shared mode: its data
/// (`data_end` bytes), then at least a batch header's worth of zeros, up to
/// the next page boundary.
///
/// SAFETY-relevant: a reader in another process maps the file at the
/// segment's full capacity and may trust a published length that is wrong
/// (the tail page is untrusted). What it reads at the end of the data is
/// the next batch's header; that header, zeros (a zero length: the end),
/// lies inside the file, so the reader stops there and never touches a page
/// past the file's end (which would raise `SIGBUS`). Rounded up to a page,
/// since whole pages are what a mapping reads. A shared-mode file is never
/// made shorter than this.
pub(crate) fn shared_sealed_len(data_end: usize) -> usize {
    (data_end + batch::HEADER_LEN).next_multiple_of(PAGE_LEN)
}

/// Pages, as mapped.
const PAGE_LEN: usize = 4096;

/// The length of a segment's log file and the number of valid batches at
/// its start (what recovery drops when it removes the segment); `(0, 0)`
/// for a file that cannot be read.
pub(crate) fn count_batches(path: &Path) -> (u64, u64) {
    let Ok(file) = MappedFile::open_read_only(path) else {
        return (0, 0);
    };
    let bytes = file.bytes(0, file.capacity());
    let (mut pos, mut n) = (0usize, 0u64);
    while let Check::Valid(h) = batch::check(&bytes[pos..]) {
        pos += h.total_len();
        n += 1;
    }
    (bytes.len() as u64, n)
}

fn deleted_path(dir: &Path, base: u64, ext: &str) -> PathBuf {
    dir.join(format!("{base:020}.{ext}.{DELETED_SUFFIX}"))
}

impl Drop for Segment {
    fn drop(&mut self) {
        if *self.deleted.get_mut() {
            for ext in ["log", "idx", "tix"] {
                let _ = std::fs::remove_file(deleted_path(&self.dir, self.base, ext));
            }
        }
    }
}
