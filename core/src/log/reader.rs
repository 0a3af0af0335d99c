//! A partition log opened by a process that is not its writer (shared
//! mode): it reads what the writer, in another process, publishes.
//!
//! Nothing here writes a file: no recovery, no cleanup, segments and the
//! tail page mapped read-only. The log's end comes from the partition's
//! tail page ([`TailPage`]), which [`PartitionLog::refresh`] reads (one
//! sequence-lock read when nothing changed) and checks before it believes
//! any of it, since another process wrote it, may have died half-way, or
//! may not be mqlite at all:
//! - the published length only moves forward, stays within the mapping
//!   and within the file's length (`stat` again when the tail says more
//!   than was known), and moves only over whole batches that check out
//!   (length, offsets following on, CRC32C): a garbage length makes the
//!   reader stop at the first byte that is not such a batch, which in a
//!   written file is the zero length after the data;
//! - a new active segment is believed once its file is listed in the
//!   directory; the old one is then read to its (trimmed) file length and
//!   marked sealed, so cursors go on to the next segment;
//! - segments are dropped for retention only once their files are gone.
//!
//! A tail that fails a check is ignored: the reader keeps what it knew and
//! looks again at the next refresh. The read path (cursors, fetches) is
//! the writer's, unchanged, and checks every batch again before delivery.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::batch::{self, Check};
use super::checkpoint::CheckpointFile;
use super::flush::GroupCommit;
use super::segment::{Segment, SegmentWriter};
use super::{LogConfig, PartitionLog, RecoveryStats, Waiters, Writer};
use crate::dedup::ProducerTable;
use crate::error::{Error, IoContext, Result};
use crate::shared::{Tail, TailPage};
use crate::sync::{self, lock};

/// What a log opened by [`PartitionLog::open_reader`] keeps.
#[derive(Debug)]
pub(crate) struct ReaderState {
    /// The tail page, once it exists: a partition no writer opened in
    /// shared mode since its last exclusive use has none (its log does not
    /// change until one does).
    tail: std::sync::OnceLock<TailPage>,
    /// The last tail fully acted on (or written, by a process that
    /// appends too): a refresh that reads it again does nothing more.
    pub(super) seen: Mutex<Option<Tail>>,
    /// Shared mode with several writers: this process appends too.
    pub(super) writer: Option<SharedWriter>,
}

/// A log's part in appending from several processes (see
/// `shared_writer.rs`).
#[derive(Debug)]
pub(crate) struct SharedWriter {
    /// The tail page, writable: the append lock and the published end.
    pub(super) page: TailPage,
    /// The tail page's sequence when this process last wrote it or took
    /// all of it in (odd: none yet), with the log's end then in
    /// `Writer::next_offset`: see [`TailPage::unchanged_since`].
    pub(super) known_seq: std::sync::atomic::AtomicU32,
    /// This process's registration (its token and liveness lock), and
    /// the data directory where the others' are.
    pub(super) writers: super::SharedWriters,
}

/// Tries at listing and opening the segments when retention removes one
/// meanwhile.
const OPEN_TRIES: usize = 8;

impl PartitionLog {
    /// Opens the partition in `dir` for a process that reads it while
    /// another may write it (shared mode). Writes nothing. Without the
    /// tail page a writer keeps there (no writer opened the partition in
    /// shared mode yet), the active segment is read up to its last whole,
    /// valid batch, and the tail page is looked for again at each refresh. Appends to the returned log fail with
    /// [`Error::InvalidArgument`]; call [`PartitionLog::refresh`] before
    /// reading to see what the writer published since.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `dir` holds no segment; I/O errors.
    pub(crate) fn open_reader(
        topic: Arc<str>,
        partition: u32,
        dir: &Path,
        config: LogConfig,
    ) -> Result<PartitionLog> {
        let writers = config.shared.as_ref().and_then(|s| s.writers.clone());
        let tail = std::sync::OnceLock::new();
        let writer = if let Some(writers) = writers {
            // Pages are faulted in ahead of the writer as in exclusive mode
            // (`prefault_ahead`): by `MADV_POPULATE_WRITE`, which fails
            // rather than raising `SIGBUS` on a page past the end of a file
            // another process trimmed meanwhile.
            Some(SharedWriter {
                page: TailPage::open(dir, config.file_mode)?,
                known_seq: std::sync::atomic::AtomicU32::new(1),
                writers,
            })
        } else {
            if let Ok(page) = TailPage::open_read_only(dir) {
                let _ = tail.set(page);
            }
            None
        };
        let sizes = writer.is_some().then(|| config.sizes());
        // Segments after the one the tail page names are not published (a
        // roll under way, or one whose writer died before publishing it).
        let newest = writer
            .as_ref()
            .map(|sw| &sw.page)
            .or_else(|| tail.get())
            .and_then(TailPage::read)
            .map(|t| t.active_base);
        let (checkpoint, point) =
            CheckpointFile::open_session(dir, config.file_mode, &config.files)?;
        // What is on disk: below the recovery point, or below what a flush
        // in some process covered. A process that appends flushes the rest
        // before its own `acks=all` batches count as durable (another
        // process may have left records only in the page cache).
        let durable = match &writer {
            Some(sw) => point.map_or(0, |(p, _)| p.offset).max(sw.page.flushed()),
            None => u64::MAX,
        };
        let mut tries = 0;
        let (segments, active_writer) = loop {
            tries += 1;
            match open_segments(dir, config.segment_bytes, sizes.as_ref(), newest, durable) {
                Err(e) if super::mmap::is_not_found(&e) && tries < OPEN_TRIES => {}
                r => break r?,
            }
        };
        let active = Arc::clone(segments.last().expect("open_segments returns one or more"));
        let start = segments[0].base();
        let end = active.base();
        let appends = writer.is_some();
        let durable = durable.min(end);
        let log = PartitionLog {
            topic,
            partition,
            dir: dir.to_owned(),
            segments: RwLock::new(segments),
            writer: Mutex::new(Writer {
                max_ts: i64::MIN,
                last_index_pos: 0,
                indexes_stale: true,
                populated_to: 0,
                flushes_seen: 0,
                grow_failed_at: usize::MAX,
                prepare_requested: false,
                // A reader's appends are refused (see `closed_error`).
                closed: !appends,
                active,
                active_writer: active_writer.unwrap_or_else(SegmentWriter::none),
                next_offset: end,
                producers: ProducerTable::default(),
                producers_loaded: false,
            }),
            start_offset: AtomicU64::new(start),
            end_offset: AtomicU64::new(end),
            waiters: Waiters::default(),
            // A reader has nothing to flush: its flush returns at once. A
            // writer flushes what the others wrote before its own batches.
            group: Box::new(GroupCommit::new(if appends { durable } else { u64::MAX })),
            flushed_fast: AtomicU64::new(if appends { durable } else { u64::MAX }),
            poisoned: AtomicBool::new(false),
            flushes: AtomicU64::new(0),
            retention_floor: AtomicU64::new(config.initial_retention_floor()),
            prepare: Mutex::new(None),
            populating: Arc::new(AtomicBool::new(false)),
            recovery: RecoveryStats::default(),
            checkpoint,
            config,
            hints: super::prefetch::Hints::default(),
            tail: None,
            reader: Some(Box::new(ReaderState {
                tail,
                seen: Mutex::new(None),
                writer,
            })),
        };
        log.start_shared_tail();
        log.refresh();
        Ok(log)
    }

    /// The tail page refresh reads: the writable one of a log this process
    /// also appends to, else the read-only one, once it exists.
    fn tail_page<'a>(&self, r: &'a ReaderState) -> Option<&'a TailPage> {
        if let Some(sw) = &r.writer {
            return Some(&sw.page);
        }
        match r.tail.get() {
            Some(page) => Some(page),
            None => TailPage::open_read_only(&self.dir)
                .ok()
                .map(|page| r.tail.get_or_init(|| page)),
        }
    }

    /// Whether this log was opened for reading only
    /// ([`PartitionLog::open_reader`]).
    #[inline]
    pub(crate) fn is_reader(&self) -> bool {
        self.reader.is_some()
    }

    /// The error for an append the log refuses: closed, or opened for
    /// reading only.
    #[cold]
    pub(crate) fn closed_error(&self) -> Error {
        if self.reader.is_some() {
            return Error::InvalidArgument(format!(
                "partition {}/{} is opened for reading: another process writes it",
                self.topic, self.partition
            ));
        }
        Error::Closed("partition")
    }

    /// A reader log: learns from the tail page what the writer published
    /// since the last call (new batches, a roll, retention) and makes it
    /// readable, after the checks in the module's doc. Cheap when nothing
    /// changed (one read of the tail page). Returns whether anything
    /// changed. Nothing for the writer's own log.
    pub(crate) fn refresh(&self) -> bool {
        let Some(r) = &self.reader else {
            return false;
        };
        // Under the writer lock: this process's own appends (several
        // writers) stay out of the bytes being checked. An append under
        // way catches up itself.
        let mut w = if r.writer.is_some() {
            match self.writer.try_lock() {
                Ok(w) => w,
                Err(std::sync::TryLockError::WouldBlock) => return false,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            }
        } else {
            lock(&self.writer)
        };
        self.follow_others(r, &mut w)
    }

    /// [`PartitionLog::refresh_locked`], and for a log this process
    /// appends to, the producers' state of the batches it took in (their
    /// sequences and epochs count in this process's dedup checks).
    ///
    /// A tail page left in the middle of a write tells nothing: its writer
    /// may still be writing it, or may have died doing so, and then no read
    /// would ever learn the log's end (a process that opened meanwhile
    /// would see none of the active segment, and a named producer none of
    /// its sequences there). A process that appends then takes the append
    /// lock, which waits for a live writer and repairs after a dead one, and
    /// takes in the producers' state itself.
    pub(super) fn follow_others(&self, r: &ReaderState, w: &mut Writer) -> bool {
        let before = w.next_offset;
        let Some(changed) = self.refresh_locked(r, w) else {
            if let Err(e) = self.lock_for_append(w) {
                ::log::warn!(
                    "{}/{}: settling a half-written tail page: {e}",
                    self.topic,
                    self.partition
                );
            }
            return w.next_offset != before;
        };
        if r.writer.is_some() && w.producers_loaded && w.next_offset > before {
            self.observe_producers(w, before);
        }
        changed
    }

    /// [`PartitionLog::refresh`] with the writer lock held: whether
    /// anything changed, or `None` when this process appends to the log
    /// and its tail page is in the middle of a write for longer than the
    /// reads here (see [`PartitionLog::follow_others`]).
    pub(super) fn refresh_locked(&self, r: &ReaderState, w: &mut Writer) -> Option<bool> {
        if let Some(sw) = &r.writer {
            if sw
                .page
                .unchanged_since(sw.known_seq.load(Ordering::Acquire), w.next_offset)
            {
                return Some(false);
            }
        }
        let Some(page) = self.tail_page(r) else {
            return Some(self.scan_without_tail(w));
        };
        let Some((tail, seq)) = page.read_with_seq() else {
            if page.seq() & 1 == 0 {
                return Some(false); // not a tail page: ignored
            }
            // In the middle of a write (its writer died writing it): a
            // process that appends repairs it under the append lock; one
            // that only reads takes in the active segment's whole, valid
            // batches, as without a tail page. A dead writer's repair
            // keeps those (its batch was whole before it published), so
            // no reader sees a batch that then goes.
            return r.writer.is_none().then(|| self.scan_without_tail(w));
        };
        Some(self.apply_tail(r, w, tail, seq, Walk::Checked).0)
    }

    /// Moves the log to what `tail` says, after the checks in the module's
    /// doc (`how` the new batches of the active segment are walked).
    /// Returns whether anything changed and whether all of it was
    /// believed.
    /// `seq` is the sequence `tail` was read under.
    pub(super) fn apply_tail(
        &self,
        r: &ReaderState,
        w: &mut Writer,
        tail: Tail,
        seq: u32,
        how: Walk,
    ) -> (bool, bool) {
        let mut seen = lock(&r.seen);
        if *seen == Some(tail) {
            if let Some(sw) = &r.writer {
                if w.next_offset == tail.next_offset {
                    sw.known_seq.store(seq, Ordering::Release);
                }
            }
            return (false, true);
        }
        let Some(active) = sync::read(&self.segments).last().cloned() else {
            return (false, false); // closed
        };
        let plausible = tail.active_base >= active.base()
            && tail.next_offset >= tail.active_base
            && tail.log_start <= tail.active_base;
        if !plausible {
            return (false, false);
        }
        let mut changed = false;
        let mut applied = true;
        let active = if tail.active_base == active.base() {
            active
        } else {
            match self.follow_roll(w, &active, tail.active_base) {
                Some(new) => {
                    changed = true;
                    new
                }
                None => return (false, false),
            }
        };
        // After a roll, the producers' state of the old segment's last
        // batches was not observed: the caller observes from where it was.
        let how = if changed { Walk::Checked } else { how };
        // A first look (this process opened the log) believes the end the
        // page names once the batch its publisher appended last checks
        // out, as a writer catching up does: walking everything before it
        // would read the whole active segment at every open, and the read
        // path checks each batch before delivery.
        let first = seen.is_none() && active.log_file().published() == 0;
        let advanced = if (how == Walk::Trusted || first) && self.adopt_tail_end(w, &active, &tail)
        {
            Advance::Moved
        } else {
            self.advance_by(w, &active, tail.published, how)
        };
        match advanced {
            Advance::Moved => changed = true,
            Advance::Nothing => {}
            Advance::Partly => {
                changed = true;
                applied = false;
            }
            Advance::Refused => applied = false,
        }
        changed |= self.drop_retained(tail.log_start);
        if applied {
            *seen = Some(tail);
            if let Some(sw) = &r.writer {
                if w.next_offset == tail.next_offset {
                    sw.known_seq.store(seq, Ordering::Release);
                }
            }
        }
        if changed && r.writer.is_some() {
            // Other processes appended: their index entries are taken in
            // before this process writes one.
            w.indexes_stale = true;
            w.max_ts = w.max_ts.max(w.active.max_timestamp());
        }
        (changed, applied)
    }

    /// Without a tail page: publishes the active segment's whole, valid
    /// batches up to its file's length (nobody writes the log while no
    /// writer keeps a tail page). Returns whether anything changed.
    pub(super) fn scan_without_tail(&self, w: &mut Writer) -> bool {
        let Some(active) = sync::read(&self.segments).last().cloned() else {
            return false; // closed
        };
        if active.log_file().published() == 0 && !holds_data(&self.dir, active.base()) {
            // Nothing appended yet (a new partition, or a roll's new
            // segment): told by a read of the file, which maps none of its
            // pages in.
            return false;
        }
        match active.log_file().file_len() {
            Some(len) => matches!(
                self.advance(w, &active, len as u64),
                Advance::Moved | Advance::Partly
            ),
            None => false,
        }
    }

    /// Whether this process appends to the log in shared mode (several
    /// writers), bytes other processes publish count as not yet flushed
    /// here (this process's `acks=all` flushes them with its own).
    fn others_unflushed(&self) -> bool {
        self.reader.as_ref().is_some_and(|r| r.writer.is_some())
    }

    /// Moves the published length of `seg` (the active segment, or the
    /// old one at a roll) towards `claimed`, over whole valid batches
    /// only, and the log's end offset with it.
    pub(super) fn advance(&self, w: &mut Writer, seg: &Segment, claimed: u64) -> Advance {
        self.advance_by(w, seg, claimed, Walk::Checked)
    }

    /// [`Self::advance`], walking the new batches as `how` says.
    fn advance_by(&self, w: &mut Writer, seg: &Segment, claimed: u64, how: Walk) -> Advance {
        let log = seg.log_file();
        let from = log.published();
        let Ok(claimed) = usize::try_from(claimed) else {
            return Advance::Refused;
        };
        if claimed <= from {
            return Advance::Nothing; // never backwards
        }
        if claimed > log.capacity() {
            return Advance::Refused;
        }
        if claimed > log.allocated() {
            // The writer grew the file, or the tail lies: ask the file.
            match log.file_len() {
                Some(len) if claimed <= len => {}
                _ => return Advance::Refused,
            }
        }
        let flushed = !self.others_unflushed();
        let (to, next) = match how {
            Walk::Checked => walk(seg, claimed, self.end_offset(), flushed),
            Walk::Trusted => {
                let observe = w.producers_loaded.then_some(&mut w.producers);
                walk_headers(seg, claimed, self.end_offset(), flushed, observe)
            }
        };
        if to == from {
            return Advance::Refused;
        }
        self.end_offset.store(next, Ordering::Release);
        w.next_offset = next;
        if to == claimed {
            Advance::Moved
        } else {
            // Partly believed: the rest is looked at again next time.
            Advance::Partly
        }
    }

    /// The writer rolled to a segment at `new_base`: opens the segments
    /// after `old` up to it (once `new_base`'s file is listed), reads
    /// `old` to the end of its file and marks it sealed. Returns the new
    /// active segment; `None` (nothing changed) when the roll is not to be
    /// believed or its files cannot be opened.
    pub(super) fn follow_roll(
        &self,
        w: &mut Writer,
        old: &Arc<Segment>,
        new_base: u64,
    ) -> Option<Arc<Segment>> {
        let bases: Vec<u64> = list_bases(&self.dir)
            .ok()?
            .into_iter()
            .filter(|&b| b > old.base() && b <= new_base)
            .collect();
        if bases.last() != Some(&new_base) {
            return None;
        }
        let appends = self.others_unflushed();
        let mut opened = Vec::with_capacity(bases.len());
        let mut new_writer = None;
        for &base in &bases {
            let seg = if appends && base == new_base {
                Segment::open_shared_active(&self.dir, base, &self.config.sizes()).map(|(s, t)| {
                    new_writer = Some(t);
                    s
                })
            } else {
                Segment::open_reader_active(&self.dir, base, self.config.segment_bytes)
            };
            match seg {
                Ok(s) => opened.push(Arc::new(s)),
                // Removed by retention meanwhile: nothing to read there.
                Err(e) if super::mmap::is_not_found(&e) && base != new_base => {}
                Err(e) => {
                    ::log::warn!(
                        "{}/{}: following the writer to segment {base}: {e}",
                        self.topic,
                        self.partition
                    );
                    return None;
                }
            }
        }
        // The old segment was trimmed before the roll was published: its
        // file's length bounds its data (and ends in zeros, see
        // `segment::shared_sealed_len`).
        if let Some(len) = old.log_file().file_len() {
            let _ = self.advance(w, old, len as u64);
        }
        old.mark_sealed_by_writer();
        if appends {
            // Sealed by another process: nothing here writes it again.
            old.log_file().release_file();
        }
        // Segments in between are read whole now.
        for pair in opened.windows(2) {
            seal_whole(&pair[0], pair[1].base(), !appends);
        }
        let new = Arc::clone(opened.last()?);
        sync::write(&self.segments).extend(opened);
        self.end_offset.fetch_max(new_base, Ordering::AcqRel);
        w.active = Arc::clone(&new);
        w.populated_to = 0;
        if let Some(t) = new_writer {
            w.active_writer = t;
        }
        w.next_offset = w.next_offset.max(new_base);
        Some(new)
    }

    /// Drops the oldest segments the writer's retention removed (below
    /// `log_start`, their files gone), never the active one. Returns
    /// whether it dropped any.
    fn drop_retained(&self, log_start: u64) -> bool {
        if log_start <= self.start_offset() {
            return false;
        }
        let mut segs = sync::write(&self.segments);
        let mut n = 0;
        while n + 1 < segs.len() && segs[n + 1].base() <= log_start && !segs[n].path().exists() {
            n += 1;
        }
        if n == 0 {
            return false;
        }
        // Cursors on them keep their mappings until they let go.
        segs.drain(..n);
        self.start_offset.store(segs[0].base(), Ordering::Release);
        true
    }
}

/// How a walk over batches another process published takes them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Walk {
    /// Each batch checks out (length, offsets following on, CRC32C)
    /// before it is believed: what a process that only reads does, and
    /// what the repair after a dead writer does.
    Checked,
    /// Headers only (lengths within the file, offsets following on), each
    /// one's producer fields taken into the producer table when it is
    /// loaded: for a process that holds the append lock, taken from a
    /// live holder that published those batches whole. The read path
    /// checks every batch's CRC32C before delivery.
    Trusted,
}

/// What [`PartitionLog::advance`] did.
pub(super) enum Advance {
    /// The published length moved.
    Moved,
    /// Nothing new.
    Nothing,
    /// The published length moved, but not as far as the tail said.
    Partly,
    /// The tail's length failed a check.
    Refused,
}

/// The base offsets of the segments in `dir`, in order.
pub(super) fn list_bases(dir: &Path) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir).ctx(|| format!("listing {}", dir.display()))? {
        let entry = entry.ctx(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(".log") {
            if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(base) = stem.parse::<u64>() {
                    bases.push(base);
                }
            }
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Whether the log file of the segment at `base` in `dir` holds anything
/// but zeros at its start (a segment a roll created and nothing was
/// appended to yet holds none). `true` when it cannot be read: such a
/// segment is never taken for an empty one.
pub(super) fn holds_data(dir: &Path, base: u64) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let Ok(mut f) = super::follow::open_regular(&super::segment::segment_path(dir, base, "log"))
    else {
        return true;
    };
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return true,
        }
    }
    head[..n].iter().any(|&b| b != 0)
}

/// Opens the segments of `dir` for reading: every one as in
/// [`Segment::open_reader_active`]; all but the last are read whole and
/// marked sealed, the last (the writer's active segment) is published by
/// the first refresh. With `writable` (this process appends too), the last
/// is opened for appending ([`Segment::open_shared_active`]), and its
/// writer returned. Segments after `newest` (the active one as the tail
/// page names it) are left out: they are not published yet. Sealed
/// segments wholly below offset `durable` count as flushed.
fn open_segments(
    dir: &Path,
    capacity: usize,
    writable: Option<&super::segment::SegmentSizes>,
    newest: Option<u64>,
    durable: u64,
) -> Result<(Vec<Arc<Segment>>, Option<SegmentWriter>)> {
    let mut bases = list_bases(dir)?;
    if let Some(newest) = newest {
        // Empty ones only: a segment holding data was published (a roll
        // publishes its new segment before anything is appended to it).
        while bases.len() > 1
            && bases
                .last()
                .is_some_and(|&b| b > newest && !holds_data(dir, b))
        {
            bases.pop();
        }
    }
    let Some((&last, sealed)) = bases.split_last() else {
        return Err(Error::InvalidArgument(format!(
            "{} holds no partition log",
            dir.display()
        )));
    };
    let mut segments = Vec::with_capacity(bases.len());
    for &base in sealed {
        segments.push(Arc::new(Segment::open_reader_active(dir, base, capacity)?));
    }
    // Those wholly below `durable` count as flushed.
    for (i, seg) in segments.iter().enumerate() {
        let next = bases.get(i + 1).copied().unwrap_or(u64::MAX);
        seal_whole(seg, next, next <= durable);
    }
    let writer = if let Some(sizes) = writable {
        let (seg, w) = Segment::open_shared_active(dir, last, sizes)?;
        segments.push(Arc::new(seg));
        Some(w)
    } else {
        segments.push(Arc::new(Segment::open_reader_active(dir, last, capacity)?));
        None
    };
    Ok((segments, writer))
}

/// Publishes, in a segment the writer sealed (the segment based at
/// `next_base` follows it), its batches up to its file's length (the zeros
/// after its data stop the walk), and marks it sealed. Its seal entry,
/// when the files bear it out, says where the data ends without a walk
/// (see `seal_end.rs`). Otherwise the batch headers are walked: sealed
/// data is never written again, so the walk reads only the headers
/// (lengths within the file, base offsets following on), not the CRC of
/// every byte. The read path checks each batch's CRC before delivery, as
/// it does for sealed segments in exclusive mode.
fn seal_whole(seg: &Segment, next_base: u64, flushed: bool) {
    if let Some(len) = seg.log_file().file_len() {
        let adopted = super::seal_end::seal_end(seg.dir(), seg.base(), next_base, len as u64)
            .is_some_and(|s| seg.adopt_seal_end(s.end, s.max_timestamp, flushed));
        if !adopted {
            let (to, _) = walk_headers(seg, len, seg.base(), flushed, None);
            let len = len.min(seg.log_file().capacity());
            // A walk stopped before the file's end by damage rather than
            // by the zeros after the data: the rest is published too, so
            // that a reader meets the damage (an error naming it) instead
            // of going on to the next segment past it.
            if to < len
                && !matches!(
                    batch::check(seg.log_file().unpublished(to, len)),
                    Check::End
                )
            {
                seg.log_file().advance_published(len, flushed);
            }
        }
    }
    seg.mark_sealed_by_writer();
}

/// [`walk`] over headers only (see [`Walk::Trusted`] and [`seal_whole`]),
/// each one's producer fields taken into `observe` when given.
fn walk_headers(
    seg: &Segment,
    limit: usize,
    mut next: u64,
    flushed: bool,
    mut observe: Option<&mut ProducerTable>,
) -> (usize, u64) {
    let log = seg.log_file();
    let from = log.published();
    let limit = limit.min(log.allocated());
    if limit <= from {
        return (from, next);
    }
    let bytes = log.unpublished(from, limit);
    let mut pos = 0;
    while let Some(h) = batch::BatchHeader::parse(&bytes[pos..]) {
        let total = h.total_len();
        if h.length < batch::MIN_LENGTH || total > bytes.len() - pos || h.base_offset != next {
            break;
        }
        let Some(after) = h
            .base_offset
            .checked_add(u64::from(h.last_offset_delta) + 1)
        else {
            break;
        };
        seg.note_timestamp(h.max_timestamp);
        if let Some(table) = observe.as_deref_mut() {
            table.observe(&h);
        }
        pos += total;
        next = after;
    }
    log.advance_published(from + pos, flushed);
    (from + pos, next)
}

/// Publishes, in `seg` (a file this process only reads), the batches from
/// its published length on that check out (length, CRC32C, base offsets
/// following on from `next`), up to `limit` bytes, at most the file's
/// length as last read (`flushed`: as in
/// [`super::mmap::MappedFile::advance_published`]). Returns the new
/// published length and the offset after the last batch.
fn walk(seg: &Segment, limit: usize, mut next: u64, flushed: bool) -> (usize, u64) {
    let log = seg.log_file();
    let from = log.published();
    let limit = limit.min(log.allocated());
    if limit <= from {
        return (from, next);
    }
    let bytes = log.unpublished(from, limit);
    let mut pos = 0;
    while let Check::Valid(h) = batch::check(&bytes[pos..]) {
        if h.base_offset != next {
            break;
        }
        seg.note_timestamp(h.max_timestamp);
        pos += h.total_len();
        next = h.next_offset();
    }
    log.advance_published(from + pos, flushed);
    (from + pos, next)
}
