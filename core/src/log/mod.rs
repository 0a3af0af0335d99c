//! One partition's commit log: a list of segments, the single writer, roll,
//! retention, group-commit flushing, readers and their wake-ups.

mod append;
pub mod batch;
pub mod check;
mod checkpoint;
pub mod compression;
pub(crate) mod crc;
mod flush;
pub mod follow;
mod gather;
mod index;
#[allow(unsafe_code)]
mod mmap;
mod open;
#[allow(unsafe_code)]
mod prefetch;
mod reader;
mod recover;
mod run;
mod seal_end;
mod segment;
#[doc(hidden)]
pub mod shared_raw;
mod shared_writer;
#[cfg(test)]
pub(crate) mod test_util;
mod txn_part;
mod unclean;

use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::Thread;
use std::time::Instant;

use crate::background::{self, Pending, Pool};
use crate::dedup::{self, ProducerTable};
use crate::error::{Error, Result};
use crate::files::FileCache;
use crate::shared::{LastBatch, Tail, TailPage};
use crate::sync;
use crate::sync::lock;
pub(crate) use append::{Appended, BatchSource, UNKNOWN_OFFSET};
use batch::BatchHeader;
use checkpoint::{CheckpointFile, RecoveryPoint};
use flush::GroupCommit;
pub(crate) use open::PendingSync;
pub(crate) use run::RunBatch;
pub(crate) use txn_part::PreparedPart;

pub(crate) use segment::Segment;
use segment::{PreparedSegment, SegmentSizes, SegmentWriter};
pub(crate) use unclean::UncleanMark;

/// Settings of one partition log, derived from the topic config.
#[derive(Debug, Clone)]
pub(crate) struct LogConfig {
    /// Most bytes of each segment (its files grow in chunks up to it).
    pub segment_bytes: usize,
    /// Bytes of log between two index entries.
    pub index_interval_bytes: usize,
    /// Largest encoded batch accepted.
    pub max_message_bytes: usize,
    /// Delete closed segments whose newest record is older than this.
    pub retention_ms: Option<u64>,
    /// Delete the oldest closed segments while the log is larger than this.
    pub retention_bytes: Option<u64>,
    /// Fault in segment pages ahead of the writer.
    pub prefault: bool,
    /// Unix mode of created files.
    pub file_mode: u32,
    /// Stamp batches with their append time.
    pub log_append_time: bool,
    /// Time retention keeps what groups have not committed
    /// (`retention_respects_groups`): until the broker first sets the
    /// floor, the log keeps everything.
    pub respects_groups: bool,
    /// The data directory's unclean mark, set before the first append.
    pub unclean: Arc<UncleanMark>,
    /// The broker's background threads (page faulting, writing ahead,
    /// preparing the next segment).
    pub pool: Arc<Pool>,
    /// The broker's descriptor cache.
    pub files: Arc<FileCache>,
    /// Shared mode (other processes read the log): `None` for exclusive
    /// mode, where nothing more is written.
    pub shared: Option<SharedLog>,
    /// What recovery asks about transaction data a crash left without its
    /// marker (`None`: no transaction log; such data is kept).
    pub committed: Option<CommittedRuns>,
}

/// Whether the transaction that wrote data into partition `(topic,
/// partition)` from an offset on committed (its commit record is in the
/// data directory's transaction log), and if so the `length` field of its
/// first batch and, when known, its CRC32C field: recovery's question
/// about transaction data that a crash left at the end of a log without
/// its marker (see `recover.rs`).
#[derive(Clone)]
pub(crate) struct CommittedRuns(pub Arc<CommittedFn>);

/// The question [`CommittedRuns`] answers: `(topic, partition, first
/// offset)`.
pub(crate) type CommittedFn = dyn Fn(&str, u32, u64) -> Option<CommittedRun> + Send + Sync;

/// What the transaction log says of a committed transaction's first batch
/// in a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommittedRun {
    /// Its `length` field.
    pub len: u32,
    /// Its CRC32C field (unknown in logs written before it was kept): a
    /// run at the same offset whose first batch has another is not this
    /// transaction's (its topic was deleted and made again).
    pub crc: Option<u32>,
}

impl std::fmt::Debug for CommittedRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommittedRuns")
    }
}

/// What a partition log does for readers in other processes (shared mode):
/// it keeps the partition's tail page (see [`crate::shared::TailPage`])
/// up to date after every publish, rings `doorbell` after each, and trims
/// sealed segments to a length those readers can always touch safely (see
/// [`Segment::seal`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedLog {
    /// Rung after every publish (the data directory's doorbell, say).
    pub doorbell: Option<Doorbell>,
    /// Several writers: set when the log is opened by
    /// [`PartitionLog::open_reader`] in a process that appends too (see
    /// `shared_writer.rs`).
    pub writers: Option<SharedWriters>,
}

/// What a process appending to logs that other processes append to needs:
/// its registration in the data directory (its token, held alive) and the
/// directory, where the other processes' registrations are.
#[derive(Debug, Clone)]
pub(crate) struct SharedWriters {
    /// This process's registration.
    pub slot: Arc<crate::shared::ProcessSlot>,
    /// The data directory.
    pub root: Arc<std::path::Path>,
}

/// A hook the log calls after each publish in shared mode, told whether
/// the caller ran a sequentially consistent fence after the publish (the
/// append lock's release does), so that the hook need not run its own. It
/// may run with the log's locks held (the writer's, or the segment list's
/// during retention): it must be quick and must not call back into the
/// log.
#[derive(Clone)]
pub(crate) struct Doorbell(pub Arc<dyn Fn(bool) + Send + Sync>);

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Doorbell")
    }
}

impl LogConfig {
    /// The retention floor a log starts with: keep all when its topic
    /// respects groups (the broker lowers it once it knows the groups'
    /// offsets), no limit otherwise.
    fn initial_retention_floor(&self) -> u64 {
        if self.respects_groups {
            0
        } else {
            u64::MAX
        }
    }

    fn sizes(&self) -> SegmentSizes {
        SegmentSizes {
            log_bytes: self.segment_bytes,
            index_entries: self.segment_bytes / self.index_interval_bytes + 2,
            mode: self.file_mode,
            files: Arc::clone(&self.files),
        }
    }

    /// Largest batch, header included, that can be appended.
    fn max_batch(&self) -> usize {
        self.max_message_bytes
    }
}

/// What recovery truncated when the partition was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Bytes removed from the tail of the active segment.
    pub truncated_bytes: u64,
    /// Batches removed (damaged or partial ones and any valid ones after them).
    pub dropped_batches: u64,
    /// Truncations of a torn tail (a partial last write).
    pub torn_tails: u64,
    /// Damage found where no torn write can be: followed by more data, in
    /// a log closed cleanly, or in a sealed segment.
    pub corruptions: u64,
    /// Records below the recovery point (acknowledged as written) that the
    /// log no longer holds: a cut, emptied or missing segment file.
    pub lost_records: u64,
    /// Bytes of damaged log moved aside for inspection (next to the
    /// segment, as `<base>.log.damaged-<position>`) instead of dropped.
    pub quarantined_bytes: u64,
    /// Transactions whose records a crash left at the end of the log
    /// before their commit point: cut (they were never readable).
    pub abandoned_transactions: u64,
}

/// A thread waiting for appends on one or more partitions.
#[derive(Debug)]
pub(crate) struct Waiter {
    thread: Thread,
    woken: AtomicBool,
}

impl Waiter {
    /// A waiter for the calling thread.
    pub(crate) fn current() -> Arc<Waiter> {
        Arc::new(Waiter {
            thread: std::thread::current(),
            woken: AtomicBool::new(false),
        })
    }

    /// Wakes the waiting thread (cheap when it is already awake).
    pub(crate) fn wake(&self) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            self.thread.unpark();
        }
    }

    /// Whether it was woken since its last reset.
    fn is_woken(&self) -> bool {
        self.woken.load(Ordering::Acquire)
    }

    /// Whether this waiter belongs to the calling thread.
    pub(crate) fn is_current(&self) -> bool {
        self.thread.id() == std::thread::current().id()
    }

    /// Clears a previous wake-up before a new wait.
    pub(crate) fn reset(&self) {
        self.woken.store(false, Ordering::Release);
    }

    /// Parks until woken or `deadline`; returns whether it was woken.
    /// Must be called from the thread the waiter was made for.
    pub(crate) fn wait_until(&self, deadline: Instant) -> bool {
        loop {
            if self.woken.load(Ordering::Acquire) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            std::thread::park_timeout(deadline - now);
        }
    }
}

#[derive(Debug, Default)]
struct Waiters {
    count: AtomicUsize,
    list: Mutex<Vec<Arc<Waiter>>>,
}

#[derive(Debug)]
#[allow(clippy::struct_field_names)] // `active` and the right to write it
struct Writer {
    active: Arc<Segment>,
    /// The right to write `active` (after the close, the last active
    /// segment's: nothing writes then).
    active_writer: SegmentWriter,
    next_offset: u64,
    max_ts: i64,
    last_index_pos: usize,
    /// Shared mode, several writers: other processes appended since the
    /// index entries were last taken in ([`Segment::adopt_indexes`], done
    /// before this process next writes an entry).
    indexes_stale: bool,
    /// Bytes of the active segment whose pages were (or are being) faulted
    /// in ahead of the writer.
    populated_to: usize,
    /// `PartitionLog::flushes` when the writer last decided whether to fault
    /// pages in ahead (see [`PartitionLog::prefault_ahead`]).
    flushes_seen: u64,
    /// The active segment's allocated length when growing it ahead of the
    /// writer last failed (a full disk): not tried again until a growth
    /// the writer needs succeeds (`usize::MAX`: none failed).
    grow_failed_at: usize,
    prepare_requested: bool,
    closed: bool,
    /// Producer sequence state, loaded on first idempotent use.
    producers: ProducerTable,
    /// Whether named producers' state was read from disk (snapshot and
    /// batch headers). Anonymous producers' ids are new in this process, so
    /// their state is all in memory and needs no loading.
    producers_loaded: bool,
}

/// How far the active segment's blocks were written ahead of the writer.
///
/// `posix_fallocate` reserves a segment's blocks as unwritten extents. The
/// first flush that reaches a block converts it, and on ext4 (as on XFS)
/// that conversion is metadata the flush must then also write (the inode,
/// or a journal commit): on this project's VM a small `msync` that reaches
/// a new page took about 50 us more. For streams of small flushes (`acks=all`
/// senders) the blocks are written ahead instead, a window at a time, on a
/// background thread, so the senders' flushes overwrite written blocks.
/// In shared mode too: the write-ahead writes no byte of the map
/// ([`mmap::MappedFile::write_back_ahead`]), so what another process appends
/// there is never overwritten, and on a file another process trimmed at a
/// seal meanwhile, the pages past its end fail the populate with `EFAULT`
/// (never `SIGBUS`) and are skipped.
#[derive(Debug)]
struct WriteAhead {
    /// Base offset of the segment this is about.
    segment: u64,
    /// Bytes of the segment written ahead so far.
    to: usize,
    /// The segment's end at the last flush.
    last_end: usize,
}

/// Bytes written ahead at a time.
const WRITE_AHEAD_WINDOW: usize = 1 << 20;
/// Flushes of this many bytes or more do not write ahead: they convert a
/// new block once per four pages or more, and the extra writes cost more
/// than that (`send_async` with `acks=all`, whose flushes each cover many
/// records, ran 2-18 % slower with a 64 KiB limit in two A/B runs).
const WRITE_AHEAD_MAX_FLUSH: usize = 16 << 10;
const PAGE: usize = 4096;

/// The commit log of one partition.
#[derive(Debug)]
pub(crate) struct PartitionLog {
    topic: Arc<str>,
    partition: u32,
    dir: PathBuf,
    config: LogConfig,
    segments: RwLock<Vec<Arc<Segment>>>,
    writer: Mutex<Writer>,
    start_offset: AtomicU64,
    end_offset: AtomicU64,
    waiters: Waiters,
    /// Group commit, in its own allocation: the append path does not
    /// touch it.
    group: Box<GroupCommit>,
    /// `FlushState::flushed`, readable without the lock.
    flushed_fast: AtomicU64,
    poisoned: AtomicBool,
    flushes: AtomicU64,
    /// The lowest offset committed by any group (`u64::MAX`: no limit):
    /// time retention does not delete past it. A log whose topic respects
    /// groups starts at 0 (keep all) until the broker computes it.
    retention_floor: AtomicU64,
    /// The next segment, being prepared by the broker's pool.
    prepare: Mutex<Option<Pending<Result<PreparedSegment>>>>,
    /// Whether a job of the broker's pool is queued or at work on the
    /// active segment's pages ([`PartitionLog::spawn_populate`],
    /// [`PartitionLog::write_ahead`]): one at a time per partition.
    populating: Arc<AtomicBool>,
    recovery: RecoveryStats,
    /// The recovery point file (see checkpoint.rs).
    checkpoint: CheckpointFile,
    /// Where the next append writes, for prefetching ([`prefetch`]).
    hints: prefetch::Hints,
    /// Shared mode, writer side: the tail page, written after every
    /// publish (the lock keeps its writes one at a time).
    tail: Option<Mutex<TailPage>>,
    /// Set for a log opened by a process that is not the writer
    /// ([`PartitionLog::open_reader`]).
    reader: Option<Box<reader::ReaderState>>,
}

/// Milliseconds since the Unix epoch ([`crate::clock`]).
pub(crate) use crate::clock::now_ms;

/// Bytes of a segment faulted in ahead of its writer at a time
/// ([`PartitionLog::prefault_ahead`]).
const POPULATE_WINDOW: usize = 8 << 20;
/// Bytes a segment holds before pages are faulted in ahead of its writer:
/// a partition that gets a message now and then faults in its own few
/// pages rather than a window it may never fill (with many partitions,
/// that window was most of the process's memory).
const POPULATE_AFTER: usize = 16 << 10;

impl PartitionLog {
    /// The topic name.
    pub(crate) fn topic(&self) -> &Arc<str> {
        &self.topic
    }

    /// The partition number.
    pub(crate) fn partition(&self) -> u32 {
        self.partition
    }

    /// First retained offset.
    #[inline]
    pub(crate) fn start_offset(&self) -> u64 {
        self.start_offset.load(Ordering::Acquire)
    }

    /// Offset the next appended record will get (the high watermark).
    #[inline]
    pub(crate) fn end_offset(&self) -> u64 {
        self.end_offset.load(Ordering::Acquire)
    }

    /// Sets the lowest offset committed by any group (see
    /// `retention_respects_groups`).
    pub(crate) fn set_retention_floor(&self, offset: u64) {
        self.retention_floor.store(offset, Ordering::Release);
    }

    /// Number of flushes to disk done since open (one serves many
    /// concurrent `acks=all` senders).
    pub(crate) fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }

    /// What recovery did when the log was opened.
    pub(crate) fn recovery(&self) -> RecoveryStats {
        self.recovery
    }

    /// Bytes of log data on disk (published bytes of every segment).
    pub(crate) fn size_bytes(&self) -> u64 {
        sync::read(&self.segments).iter().map(|s| s.size()).sum()
    }

    /// Number of segments.
    pub(crate) fn segment_count(&self) -> usize {
        sync::read(&self.segments).len()
    }

    /// Fails with [`Error::Poisoned`] once a write or sync failed (until
    /// the partition is reopened).
    pub(crate) fn check_not_poisoned(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(self.poisoned_error());
        }
        Ok(())
    }

    fn poisoned_error(&self) -> Error {
        Error::Poisoned {
            topic: self.topic.to_string(),
            partition: self.partition,
        }
    }

    /// The producer table; with `named`, first loaded from disk if it was
    /// not yet: the snapshot, then the headers of every batch after it.
    /// With `follow`, in shared mode with several writers, what other
    /// processes appended is taken in first (an append under the append
    /// lock has done that already).
    fn producer_table<'w>(
        &self,
        w: &'w mut Writer,
        named: bool,
        follow: bool,
    ) -> Result<&'w mut ProducerTable> {
        if let Some(r) = self
            .reader
            .as_deref()
            .filter(|r| follow && r.writer.is_some())
        {
            // Shared mode, several writers: what other processes wrote
            // counts (an append catches up again under the append lock).
            self.follow_others(r, w);
        }
        if named && !w.producers_loaded {
            let start = self.start_offset();
            let (mut table, from) = match dedup::load_snapshot(&self.dir) {
                Some((t, off)) if off <= w.next_offset => (t, off.max(start)),
                _ => (ProducerTable::default(), start),
            };
            let mut c = self.cursor(from)?;
            loop {
                match self.next_batch(&mut c) {
                    Ok(Some((_, h))) => {
                        if h.base_offset >= from {
                            table.observe(&h);
                        }
                    }
                    Ok(None) => break,
                    // A damaged batch must not make every named producer
                    // fail here: its producer (unknown) may only see a
                    // lower last sequence and send those records again.
                    Err(e) => {
                        ::log::error!(
                            "producer state of {}/{}: a damaged batch is left out ({e}); the \
                             producer that wrote it may send its records again",
                            self.topic,
                            self.partition
                        );
                        if !self.skip_damaged(&mut c) {
                            break;
                        }
                    }
                }
            }
            w.producers.merge_loaded(table);
            w.producers_loaded = true;
        }
        Ok(&mut w.producers)
    }

    /// The highest application sequence producer `id` (named or not)
    /// wrote here (-1 if none).
    pub(crate) fn producer_last_seq(&self, id: i64, named: bool) -> Result<i64> {
        let mut w = lock(&self.writer);
        Ok(self
            .producer_table(&mut w, named, true)?
            .get(id)
            .map_or(-1, |s| s.last_app_seq))
    }

    /// Whether producer `id` wrote application sequence `seq` here, as far
    /// as the ranges it keeps say.
    pub(crate) fn producer_has_written(&self, id: i64, named: bool, seq: i64) -> Result<bool> {
        let mut w = lock(&self.writer);
        Ok(self
            .producer_table(&mut w, named, true)?
            .get(id)
            .is_some_and(|s| s.app_written.contains(seq)))
    }

    /// The application sequences producer `id` wrote here (see
    /// [`crate::Producer::next_sequence`]), after raising its floor to
    /// `floor`; `None` if it never wrote here.
    pub(crate) fn producer_written(
        &self,
        id: i64,
        named: bool,
        floor: i64,
    ) -> Result<Option<crate::seqranges::SeqRanges>> {
        let mut w = lock(&self.writer);
        let table = self.producer_table(&mut w, named, true)?;
        table.raise_floor(id, floor);
        Ok(table.get(id).map(|s| s.app_written.clone()))
    }

    /// The offset of producer `id`'s record with sequence `seq`, if it is
    /// still in the dedup window.
    pub(crate) fn producer_offset_of(&self, id: i64, named: bool, seq: i64) -> Result<Option<u64>> {
        let mut w = lock(&self.writer);
        Ok(self
            .producer_table(&mut w, named, true)?
            .get(id)
            .and_then(|s| s.offset_of(seq)))
    }

    /// Largest batch accepted, header included.
    pub(crate) fn max_batch_bytes(&self) -> usize {
        self.config.max_batch()
    }

    /// Saves the producer table, if loaded, as the state below `offset`.
    fn save_producer_snapshot(&self, w: &Writer) {
        // Unloaded, the table holds no named producer: the snapshot on disk
        // (if any) stays as it is.
        if w.producers_loaded {
            let t = &w.producers;
            if let Err(e) = dedup::save_snapshot(&self.dir, t, w.next_offset, self.config.file_mode)
            {
                ::log::warn!(
                    "saving the producer state of {}/{} failed: {e}",
                    self.topic,
                    self.partition
                );
            }
        }
    }

    /// Grows the active segment's file by its next step, ahead of the
    /// writer, so that the writer rarely grows it on the way to a write and
    /// the pages faulted in and written ahead ([`PartitionLog::prefault_ahead`],
    /// [`PartitionLog::write_ahead`]) have a file under them. A failure (a
    /// full disk) is left for the writer's own growth to report, and not
    /// tried again until the file has grown.
    #[cold]
    #[allow(clippy::unused_self)]
    fn grow_ahead(&self, w: &mut Writer) {
        let allocated = w.active.allocated();
        if w.grow_failed_at == allocated {
            return;
        }
        if let Err(e) = w.active.grow_ahead() {
            w.grow_failed_at = allocated;
            ::log::debug!(
                "growing {} ahead of the writer: {e}",
                w.active.path().display()
            );
        }
    }

    /// Allocates the active segment's file to its full size and faults in
    /// its pages, in the calling thread (an explicit request, for a writer
    /// that wants no growth step or page fault later). Best effort: on a
    /// full disk, what is allocated is faulted in.
    pub(crate) fn prefault_active(&self) {
        if self.reader.is_some() {
            return; // a reader never writes the files
        }
        let active = {
            let w = lock(&self.writer);
            if let Err(e) = w.active.grow_to_capacity() {
                ::log::warn!("allocating {}: {e}", w.active.path().display());
            }
            Arc::clone(&w.active)
        };
        active.populate();
    }

    /// Background page faulting, a window at a time: the first
    /// [`POPULATE_WINDOW`] of the active segment once it holds
    /// [`POPULATE_AFTER`] bytes (idle partitions cost no memory), the next window once the writer is half
    /// way into the last one, and the next segment (its first window) once
    /// the active one is half full. Windows stop at the file's allocated
    /// length (the file is grown first, in the writer, by
    /// [`PartitionLog::grow_ahead`]): a small file gets small windows. A window rather than the whole segment:
    /// a slow writer (an `acks=all` one, say) would otherwise share the two
    /// cores with the zeroing of a segment's worth of pages it may never
    /// use, and hold that much page cache.
    ///
    /// Not while the partition is being flushed (`acks=all` senders: a
    /// flush since the last decision): faulting pages in on another thread
    /// slows the msyncs down more than the writer's own page faults cost
    /// (Python `send_batch` of 1000 x 1 KiB with `acks=all`: median 786 k
    /// -> 930 k msg/s; see docs/decisions.md).
    #[inline]
    fn prefault_ahead(&self, w: &mut Writer) {
        let (end, cap, allocated) = (w.active.end(), w.active.capacity(), w.active.allocated());
        let window_due = end >= POPULATE_AFTER
            && w.populated_to < allocated
            && end + POPULATE_WINDOW / 2 >= w.populated_to;
        let prepare_due = !w.prepare_requested && end > cap / 2;
        if !window_due && !prepare_due {
            return;
        }
        let flushes = self.flushes.load(Ordering::Relaxed);
        let flushing = flushes != w.flushes_seen;
        w.flushes_seen = flushes;
        if window_due && !flushing {
            let from = w.populated_to.max(end);
            let to = (from + POPULATE_WINDOW).min(allocated);
            if from < to && self.spawn_populate(&w.active, from, to) {
                w.populated_to = to;
            }
        }
        if prepare_due {
            w.prepare_requested = true;
            self.start_prepare(if flushing { 0 } else { POPULATE_WINDOW });
        }
    }

    /// For batches written with `pwritev`: once the active segment is half
    /// full, starts creating the next segment on the broker's pool, with
    /// no page faulted in, so that the roll renames files rather than
    /// creating them in the writer.
    #[inline]
    fn prepare_ahead(&self, w: &mut Writer) {
        if !w.prepare_requested && w.active.end() > w.active.capacity() / 2 {
            w.prepare_requested = true;
            self.start_prepare(0);
        }
    }

    /// After a small flush, makes sure the file's blocks a little ahead of
    /// the writer are already written (see [`WriteAhead`]): when the writer
    /// is within half a window of the end of what was written ahead, a
    /// background thread writes the next window back as it is (zeros) and
    /// syncs it. Large flushes (a `pwrite` batch, a slow `acks=1` stream
    /// flushed now and then) pay for the conversion once per flush anyway,
    /// and would only write their bytes twice.
    fn write_ahead(&self) {
        let Some(seg) = sync::read(&self.segments).last().cloned() else {
            return;
        };
        let end = seg.end();
        let mut wa = lock(&self.group.written_ahead);
        if wa.segment != seg.base() {
            *wa = WriteAhead {
                segment: seg.base(),
                to: 0,
                last_end: end,
            };
            return;
        }
        let flushed_bytes = end.saturating_sub(wa.last_end);
        wa.last_end = end;
        // Only what the file holds: the writer grows it ahead of itself.
        let allocated = seg.allocated();
        let from = wa.to.max(end.next_multiple_of(PAGE));
        let to = (from + WRITE_AHEAD_WINDOW).min(allocated);
        if flushed_bytes >= WRITE_AHEAD_MAX_FLUSH
            || end + WRITE_AHEAD_WINDOW / 2 < wa.to
            || from >= to
            || self.populating.swap(true, Ordering::AcqRel)
        {
            return;
        }
        wa.to = to;
        drop(wa);
        self.spawn_background(move || seg.write_back_ahead(from, to));
    }

    /// Faults in `[from, to)` of `seg`'s log on the broker's pool, unless a
    /// job is still queued or at work for this partition (then the caller
    /// tries again at a later append). Returns whether it was queued.
    #[cold]
    fn spawn_populate(&self, seg: &Arc<Segment>, from: usize, to: usize) -> bool {
        if self.populating.swap(true, Ordering::AcqRel) {
            return false;
        }
        let seg = Arc::clone(seg);
        self.spawn_background(move || seg.populate_range(from, to))
    }

    /// Queues `work` on the broker's pool, for a caller that has set
    /// `populating` (one such job per partition at a time); `populating`
    /// is cleared when the work is done, or when the job is dropped unrun
    /// (the pool shut down). Returns whether it was queued.
    fn spawn_background(&self, work: impl FnOnce() + Send + 'static) -> bool {
        /// Clears the flag however the job ends.
        struct Busy(Arc<AtomicBool>);
        impl Drop for Busy {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let busy = Busy(Arc::clone(&self.populating));
        self.config.pool.submit(move || {
            let _busy = busy;
            work();
        })
    }

    /// Starts preparing the next segment on the broker's pool, faulting in
    /// its first `populate` bytes.
    fn start_prepare(&self, populate: usize) {
        let mut slot = lock(&self.prepare);
        if slot.is_some() {
            return;
        }
        let dir = self.dir.clone();
        let sizes = self.config.sizes();
        let stem = self.prepared_stem();
        let sweep = self.dead_prepared_sweep();
        let (result, done) = background::pending();
        if self.config.pool.submit(move || {
            if let Some(sweep) = sweep {
                sweep(&dir);
            }
            done.complete(PreparedSegment::create(&dir, &stem, sizes, populate));
        }) {
            *slot = Some(result);
        }
    }

    /// The prepared next segment, once its job ends; `None` when there is
    /// none, it failed, or its job was dropped (the broker closed).
    fn take_prepared(&self) -> Option<PreparedSegment> {
        let pending = lock(&self.prepare).take()?;
        match pending.wait()? {
            Ok(p) => Some(p),
            Err(e) => {
                ::log::warn!(
                    "preparing the next segment of {}/{} failed: {e}",
                    self.topic,
                    self.partition
                );
                None
            }
        }
    }

    /// Seals the active segment and starts a new one at the next offset.
    fn roll(&self, w: &mut Writer) -> Result<()> {
        let base = w.next_offset;
        let (new, new_writer, populated) = match self.take_prepared() {
            Some(p) if p.capacity() == self.config.segment_bytes => {
                let populated = p.populated();
                let (seg, writer) = Segment::from_prepared(&self.dir, base, p)?;
                (seg, writer, populated)
            }
            _ => {
                let (seg, writer) = Segment::create(&self.dir, base, self.config.sizes())?;
                (seg, writer, 0)
            }
        };
        let new = Arc::new(new);
        sync::write(&self.segments).push(Arc::clone(&new));
        let old = std::mem::replace(&mut w.active, new);
        let old_writer = std::mem::replace(&mut w.active_writer, new_writer);
        w.last_index_pos = 0;
        w.indexes_stale = false;
        w.populated_to = populated;
        w.grow_failed_at = usize::MAX;
        w.prepare_requested = false;
        if let Err(e) = old.seal(old_writer, base, self.config.shared.is_some()) {
            // The old segment keeps its allocated tail; it is still
            // readable and reopens fine. Report and carry on.
            ::log::warn!("trimming {} failed: {e}", old.path().display());
        }
        if self.shared_writer().is_some() {
            // The next holder of the append lock appends to the new one.
            self.write_tail(w.next_offset, &w.active);
        }
        // Keeps rebuilding the producer table down to the active segment.
        self.save_producer_snapshot(w);
        self.enforce_retention_locked(now_ms());
        Ok(())
    }

    /// Deletes closed segments beyond the retention limits (never the active
    /// one). Returns how many were deleted. In shared mode with several
    /// writers, under the partition's append lock.
    pub(crate) fn enforce_retention(&self, now: i64) -> usize {
        if self.shared_writer().is_none() {
            return self.enforce_retention_locked(now);
        }
        if self.config.retention_bytes.is_none() && self.config.retention_ms.is_none() {
            return 0;
        }
        let mut w = lock(&self.writer);
        if w.closed {
            return 0;
        }
        match self.lock_for_append(&mut w) {
            Ok(_guard) => self.enforce_retention_locked(now),
            Err(e) => {
                ::log::warn!("retention of {}/{}: {e}", self.topic, self.partition);
                0
            }
        }
    }

    /// [`PartitionLog::enforce_retention`] by the log's writer: in shared
    /// mode with several writers, the caller holds the append lock.
    fn enforce_retention_locked(&self, now: i64) -> usize {
        let (bytes, ms) = (self.config.retention_bytes, self.config.retention_ms);
        let pure_reader = self.reader.as_ref().is_some_and(|r| r.writer.is_none());
        if (bytes.is_none() && ms.is_none()) || pure_reader {
            return 0;
        }
        let removed: Vec<Arc<Segment>> = {
            let mut segs = sync::write(&self.segments);
            if segs.is_empty() {
                return 0; // closed
            }
            let mut size: u64 = segs.iter().map(|s| s.size()).sum();
            let mut n = 0;
            while n + 1 < segs.len() && segs[n].is_sealed() {
                let s = &segs[n];
                let by_size = bytes.is_some_and(|b| size - s.size() >= b);
                // With `retention_respects_groups`, time retention keeps a
                // segment until every group committed past it; the size
                // limit is a hard cap and wins.
                let floor = self.retention_floor.load(Ordering::Acquire);
                let committed_past = segs[n + 1].base() <= floor;
                let by_time = committed_past
                    && ms.is_some_and(|ms| {
                        let max_ts = s.checked_max_timestamp();
                        max_ts != i64::MIN && now.saturating_sub(max_ts) > ms as i64
                    });
                if !by_size && !by_time {
                    break;
                }
                size -= s.size();
                n += 1;
            }
            let removed: Vec<Arc<Segment>> = segs.drain(..n).collect();
            self.start_offset.store(segs[0].base(), Ordering::Release);
            if !removed.is_empty() {
                // Readers in other processes drop what is gone.
                if let Some(active) = segs.last() {
                    self.write_tail(self.end_offset(), active);
                }
            }
            removed
        };
        for s in &removed {
            if let Err(e) = s.mark_deleted() {
                ::log::warn!("deleting segment {} failed: {e}", s.path().display());
            }
        }
        removed.len()
    }

    /// Flushes, refuses further appends, removes the prepared segment and
    /// releases every file and mapping (see [`PartitionLog::release`]).
    pub(crate) fn close(&self) -> Result<()> {
        let res = self.flush();
        {
            let mut w = lock(&self.writer);
            // Several writers: another process may append after this one
            // closes, so no point here is ever clean (and the producer
            // snapshot is saved at rolls, under the append lock).
            if !w.closed && res.is_ok() && self.shared_writer().is_none() {
                self.save_producer_snapshot(&w);
                // Everything is flushed: the next open need not check.
                let _ = self.checkpoint.write_session(
                    RecoveryPoint {
                        offset: w.next_offset,
                        clean: true,
                    },
                    self.config.unclean.session(),
                    false,
                );
            }
            w.closed = true;
        }
        // Consumers parked in poll notice the close at once.
        for w in lock(&self.waiters.list).iter() {
            w.wake();
        }
        if let Some(p) = self.take_prepared() {
            drop(p);
            let stem = self.prepared_stem();
            for ext in ["log", "idx", "tix"] {
                let _ = std::fs::remove_file(self.dir.join(format!("{stem}.{ext}")));
            }
        }
        self.release();
        res
    }

    /// After the close: lets go of every segment and closes every
    /// descriptor, the active segment's and the recovery point's included,
    /// whoever else still holds the log (producers, consumers). A segment a
    /// live message reads from stays mapped (its descriptors closed) until
    /// the last such message is dropped; nothing else does. Reads of the
    /// closed log find nothing ([`PartitionLog::cursor`] fails with
    /// [`Error::Closed`]).
    fn release(&self) {
        let segments = std::mem::take(&mut *sync::write(&self.segments));
        {
            let mut w = lock(&self.writer);
            let base = w.next_offset;
            w.active = Arc::new(Segment::closed(&self.dir, base));
        }
        for s in &segments {
            s.release_files();
        }
        self.checkpoint.release();
        drop(segments);
        // A page-faulting or write-ahead job of the pool holds a segment
        // until it has run (or is dropped, at the broker's close): wait for
        // it, so that the close has released everything when it returns.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while self.populating.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Shared mode: publishes the log's end in the tail page (after the
    /// segment's own publish) and rings the doorbell. Nothing in exclusive
    /// mode.
    #[inline]
    fn write_tail(&self, next_offset: u64, active: &Segment) {
        if self.publish_tail(next_offset, active, None) {
            self.ring_doorbell(false);
        }
    }

    /// After an append or a commit published (the tail page written when
    /// `published`): rings the doorbell of shared mode and wakes this
    /// process's waiting readers. Each pairs the publish with a waiter's
    /// count, so one sequentially consistent fence between the publish and
    /// their loads serves both: run here unless `fenced` (the caller ran
    /// one since, as the append lock's release does).
    #[inline]
    fn announce(&self, published: bool, fenced: bool) {
        if !fenced {
            fence(Ordering::SeqCst);
        }
        if published {
            self.ring_doorbell(true);
        }
        self.wake_waiters_fenced();
    }

    /// Rings the doorbell of shared mode (`fenced`: the caller ran a
    /// sequentially consistent fence since its publish).
    #[inline]
    fn ring_doorbell(&self, fenced: bool) {
        if let Some(Doorbell(ring)) = self
            .config
            .shared
            .as_ref()
            .and_then(|s| s.doorbell.as_ref())
        {
            ring(fenced);
        }
    }

    /// [`PartitionLog::write_tail`] without the doorbell: whether a page
    /// was written (never in exclusive mode, which reads nothing for it).
    /// `last_len`: the length of the batch just appended, which ends the
    /// active segment's data (an append's publish), so that the next
    /// holder of the append lock can check that one batch instead of
    /// walking every new one (several writers only: a single writer's
    /// readers never take the lock).
    #[inline]
    fn publish_tail(&self, next_offset: u64, active: &Segment, last_len: Option<usize>) -> bool {
        let tail = |last_len: Option<usize>| {
            let end = active.end();
            Tail {
                next_offset,
                active_base: active.base(),
                published: end as u64,
                log_start: self.start_offset(),
                cuts: 0,
                last_batch: last_len.filter(|&l| l <= end).map(|l| LastBatch {
                    pos: (end - l) as u64,
                    max_timestamp: active.max_timestamp(),
                }),
            }
        };
        if let Some(page) = &self.tail {
            lock(page).write(tail(None));
            true
        } else if let Some(sw) = self.shared_writer() {
            // Under the append lock. What this process wrote it knows: the
            // next append skips the catch-up unless another process wrote
            // since.
            sw.page.write(tail(last_len));
            sw.known_seq.store(sw.page.seq(), Ordering::Release);
            true
        } else {
            false
        }
    }

    // ------------------------------------------------------------ readers

    /// A cursor at the batch holding `offset`.
    pub(crate) fn cursor(&self, offset: u64) -> Result<Cursor> {
        let seg = {
            let segs = sync::read(&self.segments);
            if segs.is_empty() {
                return Err(Error::Closed("partition"));
            }
            let (start, end) = (self.start_offset(), self.end_offset());
            if offset < start || offset > end {
                return Err(Error::OffsetOutOfRange {
                    topic: self.topic.to_string(),
                    partition: self.partition,
                    offset,
                    start,
                    end,
                });
            }
            let i = segs
                .partition_point(|s| s.base() <= offset)
                .saturating_sub(1);
            Arc::clone(&segs[i])
        };
        let pos = seg.find(offset)?;
        Ok(Cursor { seg, pos, ahead: 0 })
    }

    /// Moves `c` past the damaged batch at its position: to the next
    /// position of its segment that holds a valid batch, or to the start of
    /// the next segment. `false` when there is nothing valid after it.
    fn skip_damaged(&self, c: &mut Cursor) -> bool {
        if let Some(pos) = c.seg.next_valid_batch_after(c.pos) {
            c.pos = pos;
            return true;
        }
        self.next_segment(c)
    }

    /// Moves `c` to the start of the segment after its own; `false` (and
    /// `c` unchanged) when there is none.
    fn next_segment(&self, c: &mut Cursor) -> bool {
        let next = {
            let segs = sync::read(&self.segments);
            segs.iter().find(|s| s.base() > c.seg.base()).cloned()
        };
        match next {
            Some(s) => {
                c.seg = s;
                c.pos = 0;
                c.ahead = 0;
                true
            }
            None => false,
        }
    }

    /// The next batch at the cursor, moving on to the next segment at the end
    /// of a sealed one; `None` when nothing more is published.
    #[inline]
    pub(crate) fn next_batch(&self, c: &mut Cursor) -> Result<Option<(usize, BatchHeader)>> {
        loop {
            let sealed = c.seg.is_sealed();
            if c.pos + READ_AHEAD / 2 > c.ahead {
                c.read_ahead();
            }
            if let Some(h) = c.seg.batch_at(c.pos)? {
                let at = c.pos;
                c.pos += h.total_len();
                return Ok(Some((at, h)));
            }
            if !sealed || !self.next_segment(c) {
                return Ok(None);
            }
        }
    }

    /// The earliest offset whose record timestamp is at or after `ts`, or
    /// `None` when every record is older.
    pub(crate) fn offset_for_timestamp(&self, ts: i64) -> Result<Option<u64>> {
        let segs: Vec<Arc<Segment>> = sync::read(&self.segments).clone();
        for seg in segs {
            if seg.checked_max_timestamp() < ts {
                continue;
            }
            let mut pos = seg.find_time(ts);
            while let Some(h) = seg.batch_at(pos)? {
                if h.max_timestamp >= ts {
                    let bytes = seg.bytes(pos, pos + h.total_len());
                    // Decompressed first when the batch has a codec.
                    let section =
                        batch::records_section(bytes, &h, compression::MAX_UNCOMPRESSED_LEN)
                            .map_err(|reason| seg.corrupt(pos, reason))?;
                    for r in batch::Records::in_section(&section, &h) {
                        let r = r.map_err(|reason| seg.corrupt(pos, reason))?;
                        if h.record_timestamp(r.timestamp_delta) >= ts {
                            return Ok(Some(h.base_offset + u64::from(r.offset_delta)));
                        }
                    }
                }
                pos += h.total_len();
            }
        }
        Ok(None)
    }

    // ------------------------------------------------------------ waiting

    /// Registers a waiter woken by the next append.
    pub(crate) fn add_waiter(&self, w: &Arc<Waiter>) {
        let mut list = lock(&self.waiters.list);
        list.push(Arc::clone(w));
        self.waiters.count.store(list.len(), Ordering::SeqCst);
    }

    /// Removes a waiter added by [`PartitionLog::add_waiter`].
    pub(crate) fn remove_waiter(&self, w: &Arc<Waiter>) {
        let mut list = lock(&self.waiters.list);
        if let Some(i) = list.iter().position(|x| Arc::ptr_eq(x, w)) {
            list.swap_remove(i);
        }
        self.waiters.count.store(list.len(), Ordering::SeqCst);
    }

    /// Wakes this process's waiting readers, the caller having run a
    /// sequentially consistent fence since its publish (see
    /// [`PartitionLog::announce`]).
    #[inline]
    fn wake_waiters_fenced(&self) {
        // The fence pairs with the one in `Consumer` between registering
        // and re-checking: either it sees our append or we see its waiter.
        if self.waiters.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        // Unparked outside the lock: a woken consumer takes it at once (to
        // remove itself), and finding it held would park it again until
        // this thread let go, a second wake-up on the way to the data.
        let asleep: Vec<Arc<Waiter>> = lock(&self.waiters.list)
            .iter()
            .filter(|w| !w.is_woken())
            .cloned()
            .collect();
        for w in asleep {
            w.wake();
        }
    }
}

/// A reading position in a partition log.
#[derive(Debug, Clone)]
pub(crate) struct Cursor {
    /// The segment being read; kept alive while the cursor holds it.
    pub seg: Arc<Segment>,
    /// Byte position of the next batch in it.
    pub pos: usize,
    /// End of the bytes of `seg` already mapped for reading ahead of `pos`
    /// ([`Cursor::read_ahead`]).
    pub ahead: usize,
}

/// Bytes a reader maps ahead of itself in one call: reading a log the
/// process did not write (after a reopen) otherwise takes a page fault per
/// few pages; one `MADV_POPULATE_READ` per window maps them in bulk.
const READ_AHEAD: usize = 1 << 20;

impl Cursor {
    /// Maps the next [`READ_AHEAD`] published bytes from `pos` (or from
    /// where the last call stopped) for reading. Near the end of the
    /// published data (less than an eighth of a window left) it does
    /// nothing: that tail was just written, by this process or another,
    /// and a syscall per batch there would cost more than it saves.
    fn read_ahead(&mut self) {
        let from = self.ahead.max(self.pos);
        let end = (from + READ_AHEAD).min(self.seg.end());
        if end >= from + READ_AHEAD / 8 {
            self.seg.populate_read(from, end);
            self.ahead = end;
        }
    }
}

#[cfg(test)]
mod tests;
