//! A read-only follower of one partition's log, for a process that does not
//! own the data directory (`mqlite tail`, monitoring, debugging tools).
//!
//! The data directory has a single owner (the `LOCK` file), so another
//! process cannot open a [`Broker`](crate::Broker) on it. A [`Follower`]
//! needs no lock: it opens a partition directory (`<dir>/topics/<topic>/<p>`),
//! discovers the segments from their file names and reads their batches
//! with the same checks the engine uses ([`batch::check`]: bounds, format
//! version, record count, CRC32C), plus the base offset sequence.
//!
//! # What it sees, and when
//! - There is no cross-process notification: a follower finds new batches
//!   by looking again. [`Follower::poll`] never blocks; [`Follower::wait`]
//!   looks every [`POLL_INTERVAL`] (50 ms) until something arrives, so a
//!   record shows up 25 ms after its append on average.
//! - It reads up to the first position that does not hold a whole, valid
//!   batch (a zero length field, a short or torn header, a CRC mismatch) and
//!   stops there: the writer may be in the middle of that batch. The next
//!   look starts again from the same position. A batch whose CRC fails is
//!   never delivered.
//! - An invalid batch is reported as [`Error::Corrupt`] (with the file and
//!   byte position) when it cannot be a write in flight: when a newer
//!   segment exists (the writer rolled past it), or when it stays invalid
//!   for [`SETTLE`] while a valid batch follows it. A torn tail after a
//!   crash of the writer, with nothing after it, is waited on: the next
//!   owner's recovery clears it and appends from that position.
//! - New segments are found by listing the directory whenever the follower
//!   reaches the end of the one it reads. Segments deleted by retention are
//!   skipped (counted by [`Follower::skipped`]); a segment being read stays
//!   readable after its deletion, through the open file.
//!
//! # Why positioned reads, not a map
//! The follower reads with `pread` into its own buffer instead of mapping
//! the segment files. When the writer rolls, it shrinks the old segment to
//! its data (files are allocated ahead of their data); a map of that file
//! made before the shrink would raise `SIGBUS` on a page past the new end,
//! and no check
//! made before a read can rule out a shrink between the check and the read.
//! A `pread` past the end returns fewer bytes instead. The copy costs little
//! next to the polling.
//!
//! Every length read from disk is checked against the file and the largest
//! batch before it is used: a damaged file gives an error, never a panic.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};
use crate::log::batch::{
    self, BatchHeader, Check, Header, Records, HEADER_LEN, LENGTH_PREFIX, MIN_LENGTH,
};
use crate::log::compression::MAX_UNCOMPRESSED_LEN;
use crate::log::crc;

/// How often [`Follower::wait`] looks for new batches.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How long an invalid batch at the end of the newest segment, with a valid
/// batch after it, may stay so before it is reported as corruption (a batch
/// being written is whole within microseconds).
pub const SETTLE: Duration = Duration::from_millis(500);

/// Most bytes read ahead of the batch asked for (while catching up).
const READ_AHEAD: usize = 256 << 10;
/// Bytes read at first, and after a look that found nothing (probably at
/// the end of the data); doubled after each valid batch, up to
/// [`READ_AHEAD`].
const TAIL_READ: usize = 4 << 10;
/// Index files larger than this are ignored (a damaged size; real ones
/// hold 8 bytes per `index_interval_bytes` of a segment).
const MAX_INDEX_FILE: u64 = 64 << 20;
/// Width of an offset index entry: `relative_offset: u32, position: u32`.
const INDEX_ENTRY: usize = 8;

/// The base offsets of the segments in a partition directory, sorted:
/// every `<20 digits>.log` file (segments being deleted and prepared ones
/// have other names).
pub fn segment_bases(dir: &Path) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    let entries = std::fs::read_dir(dir).ctx(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let entry = entry.ctx(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".log")) else {
            continue;
        };
        if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(base) = stem.parse::<u64>() {
                bases.push(base);
            }
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Path of the segment log starting at `base` in `dir`.
pub fn segment_log_path(dir: &Path, base: u64) -> PathBuf {
    super::segment::segment_path(dir, base, "log")
}

/// A whole batch whose bounds, format and CRC32C checked out.
#[derive(Debug, Clone)]
pub struct FollowedBatch {
    path: Arc<Path>,
    position: u64,
    header: BatchHeader,
    bytes: Vec<u8>,
}

/// One record of a followed batch, copied out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowedRecord {
    /// Its offset in the partition.
    pub offset: u64,
    /// Its timestamp (ms since the epoch).
    pub timestamp: i64,
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value, if any (`None` for a tombstone).
    pub value: Option<Vec<u8>>,
    /// The headers, in order.
    pub headers: Vec<Header>,
}

impl FollowedBatch {
    /// The segment file holding the batch.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Byte position of the batch in its segment file.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The batch header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch as stored (header, records, padding).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn corrupt(&self, reason: &str) -> Error {
        Error::Corrupt {
            path: self.path.to_path_buf(),
            position: self.position,
            reason: reason.to_owned(),
        }
    }

    /// Decodes the records (decompressing them first when the batch has a
    /// codec).
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a malformed record or compressed block.
    pub fn records(&self) -> Result<Vec<FollowedRecord>> {
        let h = &self.header;
        let section = batch::records_section(&self.bytes, h, MAX_UNCOMPRESSED_LEN)
            .map_err(|r| self.corrupt(r))?;
        let mut out = Vec::with_capacity(h.record_count.min(1 << 16) as usize);
        for r in Records::in_section(&section, h) {
            let r = r.map_err(|r| self.corrupt(r))?;
            if r.offset_delta > h.last_offset_delta {
                return Err(self.corrupt("record offset delta past the batch's last offset"));
            }
            // Ranges come from the bounds-checked decoder; `get` keeps a
            // mistake there an error rather than a panic.
            let slice = |rg: std::ops::Range<usize>| {
                section
                    .get(rg)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| self.corrupt("record field out of bounds"))
            };
            let headers = match r.header_count {
                0 => Vec::new(),
                n => batch::decode_headers(&slice(r.headers.clone())?, n),
            };
            out.push(FollowedRecord {
                offset: h.base_offset + u64::from(r.offset_delta),
                timestamp: h.record_timestamp(r.timestamp_delta),
                key: r.key.map(slice).transpose()?,
                value: r.value.map(slice).transpose()?,
                headers,
            });
        }
        Ok(out)
    }
}

/// What a look at one position of a segment file found.
#[derive(Debug, Clone)]
pub enum Probe {
    /// A whole batch that checks out (its base offset is not checked here).
    Batch(FollowedBatch),
    /// A zero length field, or the end of the file: no more data (yet).
    End,
    /// Bytes that are not a valid batch: damage, or a write in flight.
    Invalid {
        /// Which check failed.
        reason: &'static str,
        /// The header as stored, when all of it could be read (unchecked).
        header: Option<BatchHeader>,
        /// Whether the stored CRC32C matches the bytes, when the whole
        /// claimed batch could be read.
        crc_ok: Option<bool>,
    },
}

/// One segment log file opened for positioned reads, with a read-ahead
/// buffer.
#[derive(Debug)]
pub struct SegmentFile {
    path: Arc<Path>,
    base: u64,
    file: File,
    max_batch: usize,
    /// Bytes of the file from `window_start` on, as last read.
    window: Vec<u8>,
    window_start: u64,
    read_ahead: usize,
}

/// Opens `path` for reading; anything but a regular file is corrupt data.
/// Opened with `O_NONBLOCK`, so that a FIFO put in a segment's place cannot
/// block the open (it has no effect on a regular file).
pub(super) fn open_regular(path: &Path) -> Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ctx(|| format!("opening {}", path.display()))?;
    let meta = file
        .metadata()
        .ctx(|| format!("reading the size of {}", path.display()))?;
    if !meta.is_file() {
        return Err(Error::Corrupt {
            path: path.to_owned(),
            position: 0,
            reason: "not a regular file".to_owned(),
        });
    }
    Ok(file)
}

/// Reads into `buf` at `pos` until it is full or the file ends; returns the
/// bytes read.
fn read_full_at(file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    if pos > i64::MAX as u64 {
        return Ok(0); // past any file's end (and not a valid file offset)
    }
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], pos.saturating_add(got as u64)) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

impl SegmentFile {
    /// Opens the segment starting at `base` in the partition directory `dir`.
    pub fn open(dir: &Path, base: u64) -> Result<SegmentFile> {
        let path = segment_log_path(dir, base);
        let file = open_regular(&path)?;
        Ok(SegmentFile {
            path: path.into(),
            base,
            file,
            max_batch: u32::MAX as usize + LENGTH_PREFIX,
            window: Vec::new(),
            window_start: 0,
            read_ahead: TAIL_READ,
        })
    }

    /// Refuses batches larger than `bytes` (header included) without
    /// reading them: the topic's `max_message_bytes` bounds what a writer
    /// appends. By default only the file's size bounds a batch.
    pub fn with_max_batch_bytes(mut self, bytes: usize) -> SegmentFile {
        self.max_batch = bytes.max(HEADER_LEN);
        self
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The segment's base offset (from its file name).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The file's current size (allocated ahead of the data while the
    /// segment is active).
    pub fn file_len(&self) -> Result<u64> {
        Ok(self
            .file
            .metadata()
            .ctx(|| format!("reading the size of {}", self.path.display()))?
            .len())
    }

    /// Forgets the bytes read so far, so that the next look reads the file
    /// again (bytes past the last valid batch may have been written since).
    pub fn invalidate(&mut self) {
        self.window.clear();
        self.window_start = 0;
    }

    /// Up to `want` bytes of the file at `pos` (fewer at its end), read
    /// again unless the buffer holds them.
    fn read(&mut self, pos: u64, want: usize) -> Result<&[u8]> {
        let start = self.window_start;
        let have = self.window.len() as u64;
        let covered = pos >= start && pos.saturating_add(want as u64) <= start + have;
        if !covered {
            let n = want.max(self.read_ahead);
            // Old bytes are overwritten by the read (or cut off after it):
            // only growth needs zero-filling.
            self.window.resize(n, 0);
            let got = read_full_at(&self.file, &mut self.window, pos)
                .ctx(|| format!("reading {} at byte {pos}", self.path.display()))?;
            self.window.truncate(got);
            self.window_start = pos;
        }
        let off = (pos - self.window_start) as usize;
        let end = off.saturating_add(want).min(self.window.len());
        Ok(&self.window[off.min(end)..end])
    }

    /// Looks at the batch at byte `pos`. Only I/O failures are errors; what
    /// the bytes hold is in the [`Probe`].
    pub fn probe(&mut self, pos: u64) -> Result<Probe> {
        let head = self.read(pos, HEADER_LEN)?;
        if head.len() < LENGTH_PREFIX {
            let probe = match batch::check(head) {
                Check::End => Probe::End,
                _ => Probe::Invalid {
                    reason: "truncated header",
                    header: None,
                    crc_ok: None,
                },
            };
            self.after_miss();
            return Ok(probe);
        }
        let header = BatchHeader::parse(head);
        let length = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if length == 0 {
            self.after_miss();
            return Ok(Probe::End);
        }
        let invalid = |reason, crc_ok| Probe::Invalid {
            reason,
            header,
            crc_ok,
        };
        let total = LENGTH_PREFIX + length as usize;
        if length < MIN_LENGTH {
            self.after_miss();
            return Ok(invalid("length smaller than a batch header", None));
        }
        if total > self.max_batch {
            self.after_miss();
            return Ok(invalid("length larger than the largest batch", None));
        }
        // Checked against the file before anything that size is allocated.
        if total > READ_AHEAD && pos.saturating_add(total as u64) > self.file_len()? {
            self.after_miss();
            return Ok(invalid("length runs past the end of the segment", None));
        }
        let bytes = self.read(pos, total)?;
        if bytes.len() < total {
            self.after_miss();
            return Ok(invalid("length runs past the end of the segment", None));
        }
        match batch::check(bytes) {
            Check::Valid(h) => {
                let bytes = bytes.to_vec();
                let batch = FollowedBatch {
                    path: Arc::clone(&self.path),
                    position: pos,
                    header: h,
                    bytes,
                };
                self.read_ahead = (self.read_ahead * 2).min(READ_AHEAD);
                Ok(Probe::Batch(batch))
            }
            Check::End => {
                self.after_miss();
                Ok(Probe::End)
            }
            Check::Invalid(reason) => {
                let crc_ok = header.map(|h| crc::crc32c(&bytes[16..total]) == h.crc);
                self.after_miss();
                Ok(invalid(reason, crc_ok))
            }
        }
    }

    /// After a look that found no valid batch: read again next time, and
    /// read little (the follower is probably at the end of the data).
    fn after_miss(&mut self) {
        self.invalidate();
        self.read_ahead = TAIL_READ;
    }

    /// Index entries `(relative_offset, position)` of the segment, up to the
    /// first zero entry (the allocated rest). Empty when there is no
    /// readable index: it only saves scanning.
    fn index_entries(&self, dir: &Path) -> Vec<(u32, u32)> {
        let path = super::segment::segment_path(dir, self.base, "idx");
        let Ok(file) = open_regular(&path) else {
            return Vec::new();
        };
        let len = file.metadata().map_or(0, |m| m.len());
        if len > MAX_INDEX_FILE {
            return Vec::new();
        }
        let mut buf = vec![0u8; len as usize];
        let Ok(got) = read_full_at(&file, &mut buf, 0) else {
            return Vec::new();
        };
        buf[..got]
            .chunks_exact(INDEX_ENTRY)
            .map(|e| {
                let rel = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                let pos = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
                (rel, pos)
            })
            .take_while(|&(rel, pos)| rel != 0 || pos != 0)
            .collect()
    }

    /// A batch to scan from for `offset`, `(position, base offset)`: the
    /// last index entry at or below it whose batch checks out, else the
    /// segment's start.
    fn index_floor(&mut self, dir: &Path, offset: u64) -> Result<(u64, u64)> {
        let entries = self.index_entries(dir);
        let rel = offset.saturating_sub(self.base).min(u64::from(u32::MAX)) as u32;
        let upto = entries.partition_point(|&(r, _)| r <= rel);
        // Entries are hints: take the newest one that matches its batch
        // (the newest may point at a batch still being written).
        for &(r, pos) in entries[..upto].iter().rev().take(4) {
            if let Probe::Batch(b) = self.probe(u64::from(pos))? {
                if Some(b.header.base_offset) == self.base.checked_add(u64::from(r)) {
                    return Ok((u64::from(pos), b.header.base_offset));
                }
            }
        }
        Ok((0, self.base))
    }
}

/// A reader of one partition directory that follows the log as another
/// process appends to it, without taking the directory's lock. See the
/// [module documentation](self).
#[derive(Debug)]
pub struct Follower {
    dir: PathBuf,
    max_batch: Option<usize>,
    seg: Option<SegmentFile>,
    /// Byte position of the next batch in `seg`.
    pos: u64,
    /// The base offset the next batch must have.
    next_offset: u64,
    /// Records below this offset are not returned by `poll` (a seek into
    /// the middle of a batch).
    min_offset: u64,
    skipped: u64,
    /// An invalid batch at the end of the newest segment with a valid one
    /// after it: `(segment base, position, first seen)`.
    suspect: Option<(u64, u64, Instant)>,
    pending: VecDeque<FollowedRecord>,
}

/// Why there was no batch to return at the follower's position.
#[derive(Debug, Clone, Copy)]
enum Miss {
    /// The end of the written data.
    End,
    /// A batch valid by its CRC with the wrong base offset.
    OutOfSequence,
    /// Not a valid batch.
    Invalid(&'static str),
}

const OUT_OF_SEQUENCE: &str = "batch base offset out of sequence";

/// Where the scan of one segment stopped.
struct Scan {
    pos: u64,
    next_offset: u64,
}

impl Follower {
    /// Opens the partition directory `dir` (`<data>/topics/<topic>/<p>`),
    /// positioned at its first retained offset.
    ///
    /// # Errors
    /// An I/O error when the directory cannot be listed.
    pub fn open(dir: impl AsRef<Path>) -> Result<Follower> {
        let mut f = Follower {
            dir: dir.as_ref().to_owned(),
            max_batch: None,
            seg: None,
            pos: 0,
            next_offset: 0,
            min_offset: 0,
            skipped: 0,
            suspect: None,
            pending: VecDeque::new(),
        };
        f.seek_to_beginning()?;
        Ok(f)
    }

    /// Refuses batches larger than `bytes` without reading them (pass the
    /// topic's `max_message_bytes`); a larger length field is damage.
    pub fn with_max_batch_bytes(mut self, bytes: usize) -> Follower {
        self.max_batch = Some(bytes);
        if let Some(s) = self.seg.take() {
            self.seg = Some(s.with_max_batch_bytes(bytes));
        }
        self
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The offset of the next record [`Follower::poll`] returns (once it
    /// exists).
    pub fn position(&self) -> u64 {
        match self.pending.front() {
            Some(r) => r.offset,
            None => self.next_offset.max(self.min_offset),
        }
    }

    /// Offsets passed over because retention deleted their segments before
    /// the follower read them.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    fn open_segment(&self, base: u64) -> Result<SegmentFile> {
        let s = SegmentFile::open(&self.dir, base)?;
        Ok(match self.max_batch {
            Some(m) => s.with_max_batch_bytes(m),
            None => s,
        })
    }

    fn reset(&mut self) {
        self.seg = None;
        self.pos = 0;
        self.suspect = None;
        self.pending.clear();
    }

    /// Moves to the first retained offset.
    pub fn seek_to_beginning(&mut self) -> Result<()> {
        self.reset();
        let bases = segment_bases(&self.dir)?;
        if let Some(&first) = bases.first() {
            self.seg = Some(self.open_segment(first)?);
            self.next_offset = first;
        } else {
            self.next_offset = 0;
        }
        self.min_offset = 0;
        Ok(())
    }

    /// Moves to the end of the log: only batches appended from now on are
    /// returned.
    pub fn seek_to_end(&mut self) -> Result<()> {
        self.seek_inner(u64::MAX)?;
        self.min_offset = self.next_offset;
        Ok(())
    }

    /// Moves to `offset`: the batch holding it is read next and `poll`
    /// leaves out its records before `offset`. An offset below the first
    /// retained one starts at that one; one past the end waits for it.
    pub fn seek(&mut self, offset: u64) -> Result<()> {
        self.seek_inner(offset)?;
        self.min_offset = offset;
        Ok(())
    }

    fn seek_inner(&mut self, offset: u64) -> Result<()> {
        self.reset();
        let bases = segment_bases(&self.dir)?;
        if bases.is_empty() {
            self.next_offset = 0;
            return Ok(());
        }
        let i = bases.partition_point(|&b| b <= offset).saturating_sub(1);
        let mut seg = self.open_segment(bases[i])?;
        let (from, expected) = seg.index_floor(&self.dir, offset)?;
        let scan = Self::scan(&mut seg, from, expected, offset)?;
        self.pos = scan.pos;
        self.next_offset = scan.next_offset;
        self.seg = Some(seg);
        Ok(())
    }

    /// Walks valid batches from `pos`, where a batch with base offset
    /// `expected` starts, up to the one holding `offset`, or to the first
    /// position without a valid batch in sequence.
    fn scan(seg: &mut SegmentFile, mut pos: u64, mut expected: u64, offset: u64) -> Result<Scan> {
        while let Probe::Batch(b) = seg.probe(pos)? {
            let h = b.header();
            if h.base_offset != expected || h.last_offset() >= offset {
                break;
            }
            expected = h.next_offset();
            pos += h.total_len() as u64;
        }
        Ok(Scan {
            pos,
            next_offset: expected,
        })
    }

    fn corrupt(seg: &SegmentFile, pos: u64, reason: &str) -> Error {
        if reason == batch::UNSUPPORTED_VERSION {
            let mut magic = [0u8; 1];
            let found = match seg.file.read_at(&mut magic, pos + 16) {
                Ok(1) => u32::from(magic[0]),
                _ => 0,
            };
            return Error::UnsupportedVersion {
                path: seg.path().to_owned(),
                found,
                supported: u32::from(batch::MAX_MAGIC),
            };
        }
        Error::Corrupt {
            path: seg.path().to_owned(),
            position: pos,
            reason: reason.to_owned(),
        }
    }

    /// The next whole, valid batch, or `None` when none is there yet.
    /// Never blocks. Batches come whole: a seek into the middle of one
    /// returns all of it (see [`Follower::poll`]).
    ///
    /// # Errors
    /// [`Error::Corrupt`] (file and position) for damage that cannot be a
    /// write in flight; an I/O error when the directory or a segment cannot
    /// be read (the topic was deleted, for one).
    pub fn next_batch(&mut self) -> Result<Option<FollowedBatch>> {
        loop {
            let Some(seg) = self.seg.as_mut() else {
                // An empty directory at the last look: is there a segment now?
                match segment_bases(&self.dir)?.first() {
                    Some(&first) => {
                        self.seg = Some(self.open_segment(first)?);
                        self.pos = 0;
                        self.next_offset = self.next_offset.max(first);
                        continue;
                    }
                    None => return Ok(None),
                }
            };
            let found = seg.probe(self.pos)?;
            let miss = match found {
                Probe::Batch(b) if b.header.base_offset == self.next_offset => {
                    return Ok(Some(self.advance(b)));
                }
                Probe::Batch(_) => Miss::OutOfSequence,
                Probe::End => Miss::End,
                Probe::Invalid { reason, .. } => Miss::Invalid(reason),
            };
            seg.invalidate();
            // Listed before looking again: a batch appended just before a
            // roll is seen by the second look.
            let bases = segment_bases(&self.dir)?;
            let base = seg.base();
            let successor = bases.iter().copied().find(|&b| b > base);
            let Some(next) = successor else {
                if bases.binary_search(&base).is_err() {
                    return Err(Error::io(
                        format!(
                            "following {}: segment {} is gone and no newer one exists \
                             (was the topic deleted?)",
                            self.dir.display(),
                            seg.path().display()
                        ),
                        io::Error::from(io::ErrorKind::NotFound),
                    ));
                }
                return self.at_tail(miss);
            };
            // The writer rolled past this segment: it is complete.
            match seg.probe(self.pos)? {
                Probe::Batch(b) if b.header.base_offset == self.next_offset => {
                    return Ok(Some(self.advance(b)));
                }
                Probe::Batch(_) => {
                    return Err(Self::corrupt(seg, self.pos, OUT_OF_SEQUENCE));
                }
                Probe::Invalid { reason, .. } => {
                    return Err(Self::corrupt(seg, self.pos, reason));
                }
                Probe::End => {}
            }
            let retained = bases.binary_search(&base).is_ok();
            if next != self.next_offset {
                if retained || next < self.next_offset {
                    return Err(Self::corrupt(
                        seg,
                        self.pos,
                        &format!(
                            "the segment ends at offset {} but the next one starts at {next}",
                            self.next_offset
                        ),
                    ));
                }
                // Retention deleted this segment and the ones after it
                // while we read it.
                self.skipped += next - self.next_offset;
                self.next_offset = next;
            }
            self.seg = Some(self.open_segment(next)?);
            self.pos = 0;
            self.suspect = None;
        }
    }

    fn advance(&mut self, b: FollowedBatch) -> FollowedBatch {
        self.pos += b.header.total_len() as u64;
        self.next_offset = b.header.next_offset();
        self.suspect = None;
        b
    }

    /// Nothing valid at the end of the newest segment: wait, or report
    /// damage that has lasted.
    fn at_tail(&mut self, miss: Miss) -> Result<Option<FollowedBatch>> {
        let seg = self.seg.as_mut().expect("a segment is open");
        let (reason, damaged) = match miss {
            Miss::End => {
                self.suspect = None;
                return Ok(None);
            }
            // Valid by CRC but not where the sequence says: the base offset
            // (outside the CRC) is damaged, unless it is still being written.
            Miss::OutOfSequence => (OUT_OF_SEQUENCE, true),
            // Whole and checked, but from a newer format: refused now.
            Miss::Invalid(reason) if reason == batch::UNSUPPORTED_VERSION => {
                return Err(Self::corrupt(seg, self.pos, reason));
            }
            Miss::Invalid(reason) => (reason, Self::valid_batch_after(seg, self.pos)?),
        };
        if !damaged {
            // A write in flight or a torn tail: look again later.
            self.suspect = None;
            return Ok(None);
        }
        let key = (seg.base(), self.pos);
        match self.suspect {
            Some((b, p, since)) if (b, p) == key => {
                if since.elapsed() >= SETTLE {
                    return Err(Self::corrupt(seg, self.pos, reason));
                }
            }
            _ => self.suspect = Some((key.0, key.1, Instant::now())),
        }
        Ok(None)
    }

    /// Whether the length field at `pos` leads to a whole, valid batch.
    fn valid_batch_after(seg: &mut SegmentFile, pos: u64) -> Result<bool> {
        let head = seg.read(pos, LENGTH_PREFIX)?;
        if head.len() < LENGTH_PREFIX {
            return Ok(false);
        }
        let length = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if length < MIN_LENGTH {
            return Ok(false);
        }
        let next = pos + (LENGTH_PREFIX + length as usize) as u64;
        let valid = matches!(seg.probe(next)?, Probe::Batch(_));
        seg.invalidate();
        Ok(valid)
    }

    /// Up to `max` records that are there now (none when nothing new was
    /// written), in offset order. Never blocks.
    ///
    /// # Errors
    /// As [`Follower::next_batch`], and [`Error::Corrupt`] for a malformed
    /// record.
    pub fn poll(&mut self, max: usize) -> Result<Vec<FollowedRecord>> {
        let mut out = Vec::new();
        while out.len() < max {
            if let Some(r) = self.pending.pop_front() {
                out.push(r);
                continue;
            }
            let Some(b) = self.next_batch()? else { break };
            let min = self.min_offset;
            self.pending
                .extend(b.records()?.into_iter().filter(|r| r.offset >= min));
        }
        Ok(out)
    }

    /// Like [`Follower::poll`], looking again every [`POLL_INTERVAL`] until
    /// a record arrives or `timeout` passes.
    pub fn wait(&mut self, max: usize, timeout: Duration) -> Result<Vec<FollowedRecord>> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.poll(max)?;
            let now = Instant::now();
            if !got.is_empty() || now >= deadline {
                return Ok(got);
            }
            std::thread::sleep(POLL_INTERVAL.min(deadline - now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::test_util::{batch_bytes, write_at};
    use crate::{Broker, Config, ProducerConfig, Record, TopicConfig};

    fn broker(dir: &Path) -> Broker {
        Broker::open(dir, Config::default().retention_check_interval_ms(0)).unwrap()
    }

    fn pdir(dir: &Path, topic: &str) -> PathBuf {
        dir.join("topics").join(topic).join("0")
    }

    fn produce(b: &Broker, topic: &str, from: usize, n: usize) {
        let p = b.producer(ProducerConfig::default()).unwrap();
        for i in from..from + n {
            p.send(
                Record::new(topic)
                    .key(format!("k{i}"))
                    .value(format!("value-{i:05}"))
                    .header("h", format!("{i}")),
            )
            .unwrap();
        }
        p.close().unwrap();
    }

    fn drain(f: &mut Follower) -> Vec<FollowedRecord> {
        let mut all = Vec::new();
        loop {
            let got = f.poll(1000).unwrap();
            if got.is_empty() {
                return all;
            }
            all.extend(got);
        }
    }

    fn value(r: &FollowedRecord) -> String {
        String::from_utf8(r.value.clone().unwrap()).unwrap()
    }

    #[test]
    fn follows_a_writer_appending_meanwhile() {
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        // Small segments: the writer rolls many times while we read.
        b.create_topic("t", TopicConfig::new(1).segment_bytes(4096))
            .unwrap();
        let mut f = Follower::open(pdir(tmp.path(), "t"))
            .unwrap()
            .with_max_batch_bytes(1 << 20);
        assert!(f.poll(10).unwrap().is_empty());
        const N: usize = 2000;
        let mut got = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                let p = b.producer(ProducerConfig::default()).unwrap();
                for i in 0..N {
                    p.send(Record::new("t").value(format!("value-{i:05}")))
                        .unwrap();
                    if i % 100 == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                p.close().unwrap();
            });
            let deadline = Instant::now() + Duration::from_secs(60);
            while got.len() < N && Instant::now() < deadline {
                got.extend(f.wait(500, Duration::from_millis(200)).unwrap());
            }
        });
        assert_eq!(got.len(), N);
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r.offset, i as u64);
            assert_eq!(value(r), format!("value-{i:05}"));
        }
        assert!(segment_bases(&pdir(tmp.path(), "t")).unwrap().len() > 5);
        assert_eq!(f.position(), N as u64);
        assert_eq!(f.skipped(), 0);
    }

    #[test]
    fn keys_headers_seek_and_end() {
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic(
            "t",
            TopicConfig::new(1)
                .segment_bytes(4096)
                .index_interval_bytes(256),
        )
        .unwrap();
        produce(&b, "t", 0, 300);
        let dir = pdir(tmp.path(), "t");

        let mut f = Follower::open(&dir).unwrap();
        let all = drain(&mut f);
        assert_eq!(all.len(), 300);
        assert_eq!(all[7].key.as_deref(), Some(&b"k7"[..]));
        assert_eq!(all[7].headers, vec![Header::new("h", "7")]);
        assert!(all[7].timestamp > 0);

        // Through the index, into a sealed segment and into the active one.
        for at in [0u64, 1, 150, 257, 299] {
            f.seek(at).unwrap();
            let got = drain(&mut f);
            assert_eq!(got.len() as u64, 300 - at, "seek {at}");
            assert_eq!(got[0].offset, at);
            assert_eq!(value(&got[0]), format!("value-{at:05}"));
        }
        f.seek(1000).unwrap();
        assert!(f.poll(10).unwrap().is_empty());

        f.seek_to_end().unwrap();
        assert_eq!(f.position(), 300);
        assert!(f.poll(10).unwrap().is_empty());
        produce(&b, "t", 300, 5);
        let got = drain(&mut f);
        assert_eq!(
            got.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![300, 301, 302, 303, 304]
        );
    }

    #[test]
    fn retention_deletions_are_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic(
            "t",
            TopicConfig::new(1)
                .segment_bytes(4096)
                .retention_bytes(8192),
        )
        .unwrap();
        produce(&b, "t", 0, 20);
        let dir = pdir(tmp.path(), "t");
        let mut f = Follower::open(&dir).unwrap();
        assert_eq!(f.poll(5).unwrap().len(), 5);
        // Many rolls; retention keeps about two segments.
        produce(&b, "t", 20, 600);
        b.enforce_retention().unwrap();
        let start = b.topic("t").unwrap().partitions[0].start_offset;
        assert!(start > 100, "{start}");
        let got = drain(&mut f);
        // The segment being read stays readable through the open file; the
        // ones deleted after it are skipped.
        assert_eq!(got.first().unwrap().offset, 5);
        assert_eq!(got.last().unwrap().offset, 619);
        assert!(f.skipped() > 0);
        assert_eq!(got.len() as u64 + f.skipped(), 615);
        assert!(got.windows(2).all(|w| w[0].offset < w[1].offset));

        // A new follower starts at the first retained offset.
        let mut g = Follower::open(&dir).unwrap();
        assert_eq!(g.poll(1).unwrap()[0].offset, start);
    }

    #[test]
    fn torn_tail_is_waited_on_then_read() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        std::fs::create_dir_all(&dir).unwrap();
        let log = segment_log_path(&dir, 0);
        // A preallocated segment holding two batches and half of a third.
        std::fs::write(&log, vec![0u8; 64 << 10]).unwrap();
        let b0 = batch_bytes(0, &["a", "b"]);
        let b1 = batch_bytes(2, &["c"]);
        let b2 = batch_bytes(3, &["d", "e", "f"]);
        write_at(&log, 0, &b0);
        let at2 = (b0.len() + b1.len()) as u64;
        write_at(&log, b0.len() as u64, &b1);
        write_at(&log, at2, &b2[..b2.len() / 2]);

        let mut f = Follower::open(&dir).unwrap();
        let got = drain(&mut f);
        assert_eq!(got.iter().map(value).collect::<Vec<_>>(), ["a", "b", "c"]);
        // The torn batch is never delivered and is not an error: it may be
        // in flight, and a writer's recovery clears it.
        std::thread::sleep(SETTLE + Duration::from_millis(50));
        assert!(f.poll(10).unwrap().is_empty());
        assert!(f.next_batch().unwrap().is_none());
        // The rest of the write lands.
        write_at(&log, at2, &b2);
        let got = drain(&mut f);
        assert_eq!(got.iter().map(value).collect::<Vec<_>>(), ["d", "e", "f"]);
        assert_eq!(f.position(), 6);
    }

    #[test]
    fn corrupt_batch_in_a_sealed_segment_is_an_error_with_its_place() {
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic("t", TopicConfig::new(1).segment_bytes(4096))
            .unwrap();
        produce(&b, "t", 0, 200);
        b.close().unwrap();
        let dir = pdir(tmp.path(), "t");
        let first = segment_log_path(&dir, 0);
        // Damage the third batch of the first (sealed) segment.
        let mut s = SegmentFile::open(&dir, 0).unwrap();
        let mut pos = 0;
        for _ in 0..2 {
            let Probe::Batch(b) = s.probe(pos).unwrap() else {
                panic!("valid batch expected")
            };
            pos += b.header().total_len() as u64;
        }
        let mut bytes = std::fs::read(&first).unwrap();
        bytes[pos as usize + 40] ^= 0x5a;
        std::fs::write(&first, bytes).unwrap();

        let mut f = Follower::open(&dir).unwrap();
        assert_eq!(f.poll(2).unwrap().len(), 2);
        match f.poll(10) {
            Err(Error::Corrupt {
                path,
                position,
                reason,
            }) => {
                assert_eq!(path, first);
                assert_eq!(position, pos);
                assert!(reason.contains("CRC"), "{reason}");
            }
            other => panic!("expected a corruption error, got {other:?}"),
        }
        // It stays an error; nothing past it is delivered.
        assert!(f.next_batch().is_err());
        // The probe of a debugging tool sees the stored header.
        let mut s = SegmentFile::open(&dir, 0).unwrap();
        match s.probe(pos).unwrap() {
            Probe::Invalid {
                header: Some(h),
                crc_ok: Some(false),
                ..
            } => assert_eq!(h.base_offset, 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn damage_at_the_tail_before_more_data_is_reported_once_settled() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        std::fs::create_dir_all(&dir).unwrap();
        let log = segment_log_path(&dir, 0);
        std::fs::write(&log, vec![0u8; 64 << 10]).unwrap();
        let b0 = batch_bytes(0, &["a"]);
        let mut b1 = batch_bytes(1, &["b"]);
        let b2 = batch_bytes(2, &["c"]);
        let last = b1.len() - 1;
        b1[last - 8] ^= 1;
        write_at(&log, 0, &b0);
        write_at(&log, b0.len() as u64, &b1);
        write_at(&log, (b0.len() + b1.len()) as u64, &b2);

        let mut f = Follower::open(&dir).unwrap();
        assert_eq!(f.poll(10).unwrap().len(), 1);
        // Could still be a write in flight.
        assert!(f.poll(10).unwrap().is_empty());
        std::thread::sleep(SETTLE + Duration::from_millis(50));
        match f.poll(10) {
            Err(Error::Corrupt { path, position, .. }) => {
                assert_eq!(path, log);
                assert_eq!(position, b0.len() as u64);
            }
            other => panic!("expected a corruption error, got {other:?}"),
        }
    }

    #[test]
    fn damaged_bytes_never_panic() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        std::fs::create_dir_all(&dir).unwrap();
        let log = segment_log_path(&dir, 0);
        let mut good = Vec::new();
        for i in 0..4u64 {
            good.extend(batch_bytes(i * 2, &["xy", "zzz"]));
        }
        good.resize(good.len() + 64, 0);
        // Every byte, a few damaging values: the follower returns records,
        // nothing, or an error, and never a record that was not written.
        for i in 0..good.len() {
            for v in [0x00u8, 0xff, 0x80, 0x01] {
                let mut bytes = good.clone();
                if bytes[i] == v {
                    continue;
                }
                bytes[i] = v;
                std::fs::write(&log, &bytes).unwrap();
                let mut f = Follower::open(&dir).unwrap().with_max_batch_bytes(4096);
                for _ in 0..3 {
                    match f.poll(100) {
                        Ok(got) => {
                            for r in got {
                                let v = r.value.unwrap();
                                assert!(v == b"xy" || v == b"zzz", "{i}: {v:?}");
                            }
                        }
                        Err(Error::Corrupt { .. }) => break,
                        Err(e) => panic!("unexpected error: {e}"),
                    }
                }
            }
        }
        // A length field claiming more than the file or the largest batch.
        let mut bytes = good.clone();
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&log, &bytes).unwrap();
        let mut s = SegmentFile::open(&dir, 0).unwrap();
        assert!(matches!(s.probe(0).unwrap(), Probe::Invalid { .. }));
        let mut s = SegmentFile::open(&dir, 0)
            .unwrap()
            .with_max_batch_bytes(1024);
        assert!(matches!(
            s.probe(0).unwrap(),
            Probe::Invalid {
                reason: "length larger than the largest batch",
                ..
            }
        ));
        // Positions past the end of the file are the end.
        assert!(matches!(s.probe(1 << 40).unwrap(), Probe::End));
        assert!(matches!(s.probe(u64::MAX - 3).unwrap(), Probe::End));
    }

    #[test]
    fn a_fifo_in_place_of_a_segment_is_an_error_not_a_hang() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        std::fs::create_dir_all(&dir).unwrap();
        let path = segment_log_path(&dir, 0);
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        match Follower::open(&dir) {
            Err(Error::Corrupt { reason, .. }) => assert_eq!(reason, "not a regular file"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_deleted_partition_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic("t", TopicConfig::new(1)).unwrap();
        produce(&b, "t", 0, 3);
        let mut f = Follower::open(pdir(tmp.path(), "t")).unwrap();
        assert_eq!(drain(&mut f).len(), 3);
        b.delete_topic("t").unwrap();
        assert!(f.poll(10).is_err());
        assert!(Follower::open(pdir(tmp.path(), "missing")).is_err());
    }
}
