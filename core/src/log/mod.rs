//! One partition's commit log: a list of segments, the single writer, roll,
//! retention, group-commit flushing, readers and their wake-ups.

pub mod batch;
pub mod check;
mod checkpoint;
pub mod compression;
mod crc;
pub mod follow;
mod index;
#[allow(unsafe_code)]
mod mmap;
#[allow(unsafe_code)]
mod segment;

use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::{JoinHandle, Thread};
use std::time::Instant;

use crate::dedup::{self, Idempotence, ProducerTable, SequenceCheck};
use crate::error::{Error, IoContext, Result};
use batch::{
    BatchHeader, ProducerFields, RecordRef, SectionInfo, ATTR_APP_SEQUENCE, ATTR_NAMED_PRODUCER,
};
use checkpoint::{CheckpointFile, RecoveryPoint};
pub(crate) use segment::Segment;
use segment::{PreparedSegment, SegmentSizes, DELETED_SUFFIX, PREPARED_STEM};

/// Settings of one partition log, derived from the topic config.
#[derive(Debug, Clone)]
pub(crate) struct LogConfig {
    /// Preallocated size of each segment.
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
}

impl LogConfig {
    fn sizes(&self) -> SegmentSizes {
        SegmentSizes {
            log_bytes: self.segment_bytes,
            index_entries: self.segment_bytes / self.index_interval_bytes + 2,
            mode: self.file_mode,
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
}

/// Where an appended batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Appended {
    /// Offset of the first record (for a duplicate: of the original, or
    /// [`UNKNOWN_OFFSET`] when no longer remembered).
    pub base_offset: u64,
    /// The batch was a re-send of one already written; nothing was written.
    pub duplicate: bool,
    /// The append time stamped on the batch, for a log-append-time topic.
    pub log_append_time: Option<i64>,
}

/// Offset reported for a duplicate whose original is no longer remembered.
pub(crate) const UNKNOWN_OFFSET: u64 = u64::MAX;

/// What an append writes: records encoded in place, or a records section
/// prepared (and perhaps compressed) beforehand.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BatchSource<'a> {
    /// Records to encode straight into the segment, with their batch's
    /// encoded size ([`batch::batch_len`]).
    Records(&'a [RecordRef<'a>], usize),
    /// A ready records section.
    Section {
        /// The section: plain records, or a framed compressed block.
        bytes: &'a [u8],
        /// Count and timestamps of its records.
        info: SectionInfo,
        /// Attribute bits describing it (the codec).
        attributes: u16,
    },
}

impl BatchSource<'_> {
    /// Number of records.
    pub(crate) fn count(&self) -> usize {
        match self {
            BatchSource::Records(r, _) => r.len(),
            BatchSource::Section { info, .. } => info.count as usize,
        }
    }

    fn batch_len(&self) -> usize {
        match self {
            BatchSource::Records(_, len) => *len,
            BatchSource::Section { bytes, .. } => batch::section_batch_len(bytes.len()),
        }
    }

    fn max_timestamp(&self) -> i64 {
        match self {
            BatchSource::Records(r, _) => r.iter().map(|r| r.timestamp).max().unwrap_or(i64::MIN),
            BatchSource::Section { info, .. } => info.max_timestamp,
        }
    }
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
struct Writer {
    active: Arc<Segment>,
    next_offset: u64,
    max_ts: i64,
    last_index_pos: usize,
    /// Bytes of the active segment whose pages were (or are being) faulted
    /// in ahead of the writer.
    populated_to: usize,
    /// `PartitionLog::flushes` when the writer last decided whether to fault
    /// pages in ahead (see [`PartitionLog::prefault_ahead`]).
    flushes_seen: u64,
    prepare_requested: bool,
    closed: bool,
    /// Producer sequence state, loaded on first idempotent use.
    producers: ProducerTable,
    /// Whether named producers' state was read from disk (snapshot and
    /// batch headers). Anonymous producers' ids are new in this process, so
    /// their state is all in memory and needs no loading.
    producers_loaded: bool,
    /// Whether the recovery point was marked unclean (and synced) since
    /// open: done before the first append.
    marked_unclean: bool,
}

#[derive(Debug, Default)]
struct FlushState {
    /// Every offset below this is on disk.
    flushed: u64,
    /// A flush (msync) is running.
    in_progress: bool,
    /// A caller (the leader) waits for more callers before it flushes.
    collecting: bool,
    /// Counts the flushes started; callers count themselves in the round
    /// they wait for.
    round: u64,
    /// The end offset the running flush covers, at least.
    flushing_to: u64,
    /// Callers waiting for the next flush to start (each counted once per
    /// round).
    arrivals: usize,
    /// Callers the next flush waits for: as many as were waiting on the last
    /// one, counting those that came while it ran. A steady group of `n`
    /// `acks=all` senders is so served by one flush per round of `n`.
    expected: usize,
    /// Records the last flush covered: the next one also waits until as
    /// many were appended, so that a flusher fed by appenders that do not
    /// wait for it (the producer's thread flushing `send_async` records)
    /// covers as much per flush as the last one.
    last_covered: u64,
    /// A caller sleeps on [`PartitionLog::flush_ends`]: the flusher wakes
    /// the sleepers when it ends.
    sleepers: bool,
    /// A collection was completed by the last caller it waited for, which
    /// flushes in the leader's place: the leader, still waiting on
    /// `arrival_cv`, is woken when that flush ends.
    leader_waiting: bool,
    /// How long the last flush took: the longest a leader waits.
    last_flush: std::time::Duration,
}

/// The state of `acks=all` flushes shared by a partition's callers.
#[derive(Debug)]
struct GroupCommit {
    state: Mutex<FlushState>,
    /// Wakes a flush leader collecting callers.
    arrival_cv: Condvar,
    /// Counts finished flushes (wrapping): the futex word callers waiting
    /// for a flush sleep on, all woken by one `wake_all` when it changes.
    flush_ends: AtomicU32,
    /// The blocks written ahead of small flushes ([`PartitionLog::write_ahead`]).
    written_ahead: Mutex<WriteAhead>,
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
    /// time retention does not delete past it.
    retention_floor: AtomicU64,
    prepare: Mutex<Option<JoinHandle<Result<PreparedSegment>>>>,
    /// Whether a background thread is faulting in pages of the active
    /// segment ([`PartitionLog::spawn_populate`]).
    populating: Arc<AtomicBool>,
    recovery: RecoveryStats,
    /// The recovery point file (see checkpoint.rs).
    checkpoint: CheckpointFile,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Milliseconds since the Unix epoch ([`crate::clock`]).
pub(crate) use crate::clock::now_ms;

/// Batches at least this long that are flushed at once (`acks=all`) are
/// written with `pwrite` ([`PartitionLog::append_batch`]). Measured with
/// `bench/python_rates.py` (1000 x 1 KiB per call, `acks=all`): see
/// docs/decisions.md.
const FILE_WRITE_MIN: usize = 64 << 10;

/// Encodes a batch into `buf` (exactly its length); returns the bytes written.
#[inline(always)]
fn encode(
    buf: &mut [u8],
    base: u64,
    src: &BatchSource<'_>,
    producer: ProducerFields,
    attributes: u16,
    append_time: Option<i64>,
) -> usize {
    let written = match *src {
        BatchSource::Records(records, _) => {
            batch::encode_batch(buf, base, records, producer, attributes)
        }
        BatchSource::Section { bytes, info, .. } => {
            batch::write_section_batch(buf, base, bytes, info, producer, attributes)
        }
    };
    if let Some(t) = append_time {
        batch::stamp_log_append_time(&mut buf[..written], t);
    }
    written
}

/// Scratch memory kept per thread for batches written with `pwrite`; a larger
/// one is freed after use.
const SCRATCH_KEEP: usize = 4 << 20;

/// Runs `f` on `len` bytes of this thread's scratch buffer (contents
/// unspecified: `f` overwrites them).
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) if len <= SCRATCH_KEEP => {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            f(&mut buf[..len])
        }
        // Too big to keep, or already in use further up this thread's stack.
        _ => f(&mut vec![0u8; len]),
    })
}

/// Bytes of a segment faulted in ahead of its writer at a time
/// ([`PartitionLog::prefault_ahead`]).
const POPULATE_WINDOW: usize = 8 << 20;

impl PartitionLog {
    /// Opens the partition in `dir`, creating it (empty) if needed, and
    /// recovers the tail of its active segment.
    pub(crate) fn open(
        topic: Arc<str>,
        partition: u32,
        dir: &Path,
        config: LogConfig,
    ) -> Result<Self> {
        crate::private_dir::create_dir_all(dir, config.file_mode)?;
        let mut bases = Vec::new();
        for entry in std::fs::read_dir(dir).ctx(|| format!("listing {}", dir.display()))? {
            let entry = entry.ctx(|| format!("listing {}", dir.display()))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(DELETED_SUFFIX) || name.starts_with(&format!("{PREPARED_STEM}.")) {
                // Leftovers of retention or of a prepared segment: remove.
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            if let Some(stem) = name.strip_suffix(".log") {
                if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
                    bases.push(stem.parse::<u64>().expect("20 digits fit in u64"));
                }
            }
        }
        bases.sort_unstable();
        let sizes = config.sizes();
        let mut segments = Vec::with_capacity(bases.len().max(1));
        let mut recovery = RecoveryStats::default();
        let (checkpoint, point) = CheckpointFile::open(dir, config.file_mode)?;
        // After an unclean shutdown, every batch from the recovery point on
        // is checked (see checkpoint.rs): `None` after a clean one.
        let check_from = match point {
            Some(p) if p.clean => None,
            Some(p) => Some(p.offset),
            None => Some(0),
        };
        if let Some(from) = check_from {
            Self::truncate_at_damaged_sealed(dir, &mut bases, from, &mut recovery)?;
        }
        let (active, rec) = match bases.split_last() {
            None => {
                let seg = Segment::create(dir, 0, sizes)?;
                (seg, segment::Recovered::default())
            }
            Some((&last, sealed)) => {
                for &base in sealed {
                    segments.push(Arc::new(Segment::open_sealed(dir, base)?));
                }
                let (seg, rec) = Segment::open_active(
                    dir,
                    last,
                    sizes,
                    config.index_interval_bytes,
                    config.max_batch(),
                    check_from.is_none(),
                )?;
                if rec.truncated {
                    recovery.truncated_bytes += rec.truncated_bytes;
                    recovery.dropped_batches += rec.dropped_batches;
                    recovery.quarantined_bytes += rec.quarantined_bytes;
                    if rec.torn_tail {
                        recovery.torn_tails += 1;
                    } else {
                        recovery.corruptions += 1;
                    }
                }
                (seg, rec)
            }
        };
        let next_offset = rec.next_offset.max(active.base());
        if let Some(p) = point.filter(|p| p.offset > next_offset) {
            Self::report_lost(dir, p, next_offset, rec.truncated, &mut recovery);
        }
        let active = Arc::new(active);
        segments.push(Arc::clone(&active));
        if let Some(from) = check_from {
            // What recovery kept may still be only in the page cache (a
            // `kill -9` keeps it): make it durable before the recovery
            // point moves past it.
            for (i, seg) in segments.iter().enumerate() {
                let next_base = segments.get(i + 1).map_or(u64::MAX, |s| s.base());
                if next_base > from {
                    seg.sync_all_files()?;
                }
            }
            checkpoint.write(
                RecoveryPoint {
                    offset: next_offset,
                    clean: false,
                },
                true,
            )?;
        }
        let start = segments[0].base();
        Ok(PartitionLog {
            topic,
            partition,
            dir: dir.to_owned(),
            segments: RwLock::new(segments),
            writer: Mutex::new(Writer {
                max_ts: rec.max_timestamp,
                last_index_pos: rec.last_index_pos,
                populated_to: 0,
                flushes_seen: 0,
                prepare_requested: false,
                closed: false,
                active,
                next_offset,
                producers: ProducerTable::default(),
                producers_loaded: false,
                marked_unclean: false,
            }),
            start_offset: AtomicU64::new(start),
            end_offset: AtomicU64::new(next_offset),
            waiters: Waiters::default(),
            group: Box::new(GroupCommit {
                state: Mutex::new(FlushState {
                    flushed: next_offset,
                    ..FlushState::default()
                }),
                arrival_cv: Condvar::new(),
                flush_ends: AtomicU32::new(0),
                written_ahead: Mutex::new(WriteAhead {
                    segment: u64::MAX,
                    to: 0,
                    last_end: 0,
                }),
            }),
            flushed_fast: AtomicU64::new(next_offset),
            poisoned: AtomicBool::new(false),
            flushes: AtomicU64::new(0),
            retention_floor: AtomicU64::new(u64::MAX),
            prepare: Mutex::new(None),
            populating: Arc::new(AtomicBool::new(false)),
            recovery,
            checkpoint,
            config,
        })
    }

    /// Reports records below the recovery point `p` (flushed, so
    /// acknowledged at any `acks`) that the log, now ending at
    /// `next_offset`, no longer holds: a cut below the point, or a segment
    /// file emptied or removed behind the engine's back. Counted in
    /// `lost_records`, and as a corruption unless the cut was counted
    /// already (`cut`): a clean close leaves no torn write.
    fn report_lost(
        dir: &Path,
        p: RecoveryPoint,
        next_offset: u64,
        cut: bool,
        recovery: &mut RecoveryStats,
    ) {
        let lost = p.offset - next_offset;
        recovery.lost_records += lost;
        if !cut && recovery.corruptions == 0 {
            recovery.corruptions += 1;
        }
        ::log::error!(
            "recovery: the log in {} ends at offset {next_offset}, but offsets up to {} were \
             written and flushed{}: {lost} acknowledged records are missing (a damaged, \
             emptied or removed segment file)",
            dir.display(),
            p.offset,
            if p.clean {
                " and the log closed cleanly"
            } else {
                ""
            },
        );
    }

    /// Unclean-shutdown recovery of the sealed segments (`bases` but the
    /// last) that may hold offsets at or after `from`: checks every batch
    /// (CRC32C, offsets following on, up to the next segment's base). A
    /// segment that fails (a power loss tore pages it had not flushed) is
    /// cut back to its valid prefix by making it the active segment again,
    /// and the segments after it are removed, so the log stays one valid
    /// prefix of what was appended.
    fn truncate_at_damaged_sealed(
        dir: &Path,
        bases: &mut Vec<u64>,
        from: u64,
        recovery: &mut RecoveryStats,
    ) -> Result<()> {
        for i in 0..bases.len().saturating_sub(1) {
            let next = bases[i + 1];
            if next <= from {
                continue;
            }
            let seg = Segment::open_sealed(dir, bases[i])?;
            let Err((pos, reason)) = seg.check_chain(next) else {
                continue;
            };
            ::log::warn!(
                "recovery: sealed segment {} is damaged at byte {pos} ({reason}) after an \
                 unclean shutdown; the log is cut back there",
                seg.path().display()
            );
            drop(seg);
            for &later in &bases[i + 1..] {
                for ext in ["log", "idx", "tix"] {
                    let path = segment::segment_path(dir, later, ext);
                    if ext == "log" {
                        let (bytes, batches) = segment::count_batches(&path);
                        recovery.truncated_bytes += bytes;
                        recovery.dropped_batches += batches;
                    }
                    std::fs::remove_file(&path)
                        .or_else(|e| match e.kind() {
                            std::io::ErrorKind::NotFound => Ok(()),
                            _ => Err(e),
                        })
                        .ctx(|| format!("removing {}", path.display()))?;
                }
            }
            bases.truncate(i + 1);
            mmap::sync_dir(dir)?;
            break;
        }
        Ok(())
    }

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
        self.segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|s| s.size())
            .sum()
    }

    /// Number of segments.
    pub(crate) fn segment_count(&self) -> usize {
        self.segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    fn poisoned_error(&self) -> Error {
        Error::Poisoned {
            topic: self.topic.to_string(),
            partition: self.partition,
        }
    }

    /// Appends `records` as one batch with the given producer fields as they
    /// are (no sequence checks). Returns once the batch is in the map and
    /// visible to readers (the `acks=1` guarantee); call
    /// [`PartitionLog::flush_to`] for `acks=all`.
    pub(crate) fn append(
        &self,
        records: &[RecordRef<'_>],
        producer: ProducerFields,
    ) -> Result<Appended> {
        let len = batch::batch_len(records);
        self.append_batch(BatchSource::Records(records, len), producer, None, false)
    }

    /// Appends one batch. With `idem`, the producer's epoch and sequence are
    /// checked against what the partition holds, in the same critical
    /// section as the write: a re-sent batch is answered with its original
    /// offset and not written, an older epoch is fenced, and the batch gets
    /// the next sequence when the producer did not choose one.
    ///
    /// `flush_next` says the caller flushes the batch as soon as it is
    /// appended (`acks=all`): a batch of [`FILE_WRITE_MIN`] bytes or more is
    /// then written to the file with `pwrite` rather than through the map.
    #[allow(unsafe_code)]
    pub(crate) fn append_batch(
        &self,
        src: BatchSource<'_>,
        mut producer: ProducerFields,
        idem: Option<&Idempotence>,
        flush_next: bool,
    ) -> Result<Appended> {
        let count = src.count();
        if count == 0 {
            return Err(Error::InvalidArgument(
                "a batch needs at least one record".into(),
            ));
        }
        let len = src.batch_len();
        if len > self.config.max_batch() {
            return Err(Error::MessageTooLarge {
                size: len,
                max: self.config.max_batch(),
            });
        }
        let mut max_ts = src.max_timestamp();
        let mut attributes = match src {
            BatchSource::Records(..) => 0,
            BatchSource::Section { attributes, .. } => attributes,
        };
        let append_time = self.config.log_append_time.then(now_ms);
        if let Some(t) = append_time {
            attributes |= batch::ATTR_LOG_APPEND_TIME;
            max_ts = t;
        }
        let mut w = lock(&self.writer);
        if w.closed {
            return Err(Error::Closed("partition"));
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(self.poisoned_error());
        }
        if !w.marked_unclean {
            self.mark_unclean()?;
            w.marked_unclean = true;
        }
        if let Some(idem) = idem {
            let table = self.producer_table(&mut w, idem.named)?;
            match table.check(idem, count as u32, &self.topic, self.partition)? {
                SequenceCheck::Duplicate(original) => {
                    return Ok(Appended {
                        base_offset: original.unwrap_or(UNKNOWN_OFFSET),
                        duplicate: true,
                        log_append_time: None,
                    })
                }
                SequenceCheck::Write(seq) => {
                    producer = ProducerFields {
                        producer_id: idem.producer_id,
                        producer_epoch: idem.epoch,
                        base_sequence: seq,
                    };
                    if idem.named {
                        attributes |= ATTR_NAMED_PRODUCER;
                    }
                    if idem.sequence.is_some() {
                        attributes |= ATTR_APP_SEQUENCE;
                    }
                }
            }
        }
        if w.active.end() + len > w.active.capacity() {
            self.roll(&mut w)?;
        }
        let base = w.next_offset;
        let pos = w.active.end();
        let written = if flush_next && len >= FILE_WRITE_MIN {
            with_scratch(len, |buf| {
                let written = encode(buf, base, &src, producer, attributes, append_time);
                w.active.write_at_end(&buf[..written]).map(|()| written)
            })?
        } else {
            // SAFETY: we hold the writer lock, so we are the segment's only
            // writer.
            let buf = unsafe { w.active.reserve(len) };
            encode(buf, base, &src, producer, attributes, append_time)
        };
        debug_assert_eq!(written, len);
        let index = (pos > 0 && pos - w.last_index_pos >= self.config.index_interval_bytes)
            .then_some((base, w.max_ts));
        if index.is_some() {
            w.last_index_pos = pos;
        }
        w.active.commit(written, index, max_ts);
        w.max_ts = w.max_ts.max(max_ts);
        w.next_offset = base + count as u64;
        self.end_offset.store(w.next_offset, Ordering::Release);
        if let Some(idem) = idem {
            w.producers
                .record(idem, producer.base_sequence, count as u32, base);
        }
        if self.config.prefault {
            self.prefault_ahead(&mut w);
        }
        drop(w);
        self.wake_waiters();
        Ok(Appended {
            base_offset: base,
            duplicate: false,
            log_append_time: append_time,
        })
    }

    /// The producer table; with `named`, first loaded from disk if it was
    /// not yet: the snapshot, then the headers of every batch after it.
    fn producer_table<'w>(&self, w: &'w mut Writer, named: bool) -> Result<&'w mut ProducerTable> {
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
            .producer_table(&mut w, named)?
            .get(id)
            .map_or(-1, |s| s.last_app_seq))
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
        let table = self.producer_table(&mut w, named)?;
        table.raise_floor(id, floor);
        Ok(table.get(id).map(|s| s.app_written.clone()))
    }

    /// The offset of producer `id`'s record with sequence `seq`, if it is
    /// still in the dedup window.
    pub(crate) fn producer_offset_of(&self, id: i64, named: bool, seq: i64) -> Result<Option<u64>> {
        let mut w = lock(&self.writer);
        Ok(self
            .producer_table(&mut w, named)?
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

    /// Faults in the active segment's pages in the calling thread.
    pub(crate) fn prefault_active(&self) {
        let active = Arc::clone(&lock(&self.writer).active);
        active.populate();
    }

    /// Background page faulting, a window at a time: the first
    /// [`POPULATE_WINDOW`] of the active segment on its first append (idle
    /// partitions cost no memory), the next window once the writer is half
    /// way into the last one, and the next segment (its first window) once
    /// the active one is half full. A window rather than the whole segment:
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
        let (end, cap) = (w.active.end(), w.active.capacity());
        let window_due = w.populated_to < cap && end + POPULATE_WINDOW / 2 >= w.populated_to;
        let prepare_due = !w.prepare_requested && end > cap / 2;
        if !window_due && !prepare_due {
            return;
        }
        let flushes = self.flushes.load(Ordering::Relaxed);
        let flushing = flushes != w.flushes_seen;
        w.flushes_seen = flushes;
        if window_due && !flushing {
            let from = w.populated_to.max(end);
            let to = (from + POPULATE_WINDOW).min(cap);
            if self.spawn_populate(&w.active, from, to) {
                w.populated_to = to;
            }
        }
        if prepare_due {
            w.prepare_requested = true;
            self.start_prepare(if flushing { 0 } else { POPULATE_WINDOW });
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
        let Some(seg) = self
            .segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .last()
            .cloned()
        else {
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
        if flushed_bytes >= WRITE_AHEAD_MAX_FLUSH
            || end + WRITE_AHEAD_WINDOW / 2 < wa.to
            || wa.to >= seg.capacity()
            || self.populating.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let from = wa.to.max(end.next_multiple_of(PAGE));
        let to = (from + WRITE_AHEAD_WINDOW).min(seg.capacity());
        wa.to = to;
        drop(wa);
        self.spawn_background("mqlite-write-ahead", move || seg.write_back_ahead(from, to));
    }

    /// Faults in `[from, to)` of `seg`'s log on a background thread, unless
    /// one is still at work for this partition (then the caller tries again
    /// at a later append). Returns whether it started.
    #[cold]
    fn spawn_populate(&self, seg: &Arc<Segment>, from: usize, to: usize) -> bool {
        if self.populating.swap(true, Ordering::AcqRel) {
            return false;
        }
        let seg = Arc::clone(seg);
        self.spawn_background("mqlite-populate", move || seg.populate_range(from, to))
    }

    /// Runs `work` on a new thread named `name`, for a caller that has set
    /// `populating` (one such thread per partition at a time); `populating`
    /// is cleared when the work is done, or at once if the thread cannot
    /// start. Returns whether it started.
    fn spawn_background(&self, name: &str, work: impl FnOnce() + Send + 'static) -> bool {
        let busy = Arc::clone(&self.populating);
        let started = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                work();
                busy.store(false, Ordering::Release);
            });
        if started.is_err() {
            self.populating.store(false, Ordering::Release);
        }
        started.is_ok()
    }

    /// Starts preparing the next segment in the background, faulting in
    /// its first `populate` bytes.
    fn start_prepare(&self, populate: usize) {
        let mut slot = lock(&self.prepare);
        if slot.is_some() {
            return;
        }
        let dir = self.dir.clone();
        let sizes = self.config.sizes();
        *slot = std::thread::Builder::new()
            .name("mqlite-prepare".into())
            .spawn(move || PreparedSegment::create(&dir, sizes, populate))
            .ok();
    }

    fn take_prepared(&self) -> Option<PreparedSegment> {
        let handle = lock(&self.prepare).take()?;
        match handle.join() {
            Ok(Ok(p)) => Some(p),
            Ok(Err(e)) => {
                ::log::warn!(
                    "preparing the next segment of {}/{} failed: {e}",
                    self.topic,
                    self.partition
                );
                None
            }
            Err(_) => None,
        }
    }

    /// Seals the active segment and starts a new one at the next offset.
    fn roll(&self, w: &mut Writer) -> Result<()> {
        let base = w.next_offset;
        let (new, populated) = match self.take_prepared() {
            Some(p) if p.capacity() == self.config.segment_bytes => {
                let populated = p.populated();
                (Segment::from_prepared(&self.dir, base, p)?, populated)
            }
            _ => (Segment::create(&self.dir, base, self.config.sizes())?, 0),
        };
        let new = Arc::new(new);
        self.segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::clone(&new));
        let old = std::mem::replace(&mut w.active, new);
        w.last_index_pos = 0;
        w.populated_to = populated;
        w.prepare_requested = false;
        if let Err(e) = old.seal(base) {
            // The old segment keeps its preallocated tail; it is still
            // readable and reopens fine. Report and carry on.
            ::log::warn!("trimming {} failed: {e}", old.path().display());
        }
        // Keeps rebuilding the producer table down to the active segment.
        self.save_producer_snapshot(w);
        self.enforce_retention(now_ms());
        Ok(())
    }

    /// Deletes closed segments beyond the retention limits (never the active
    /// one). Returns how many were deleted.
    pub(crate) fn enforce_retention(&self, now: i64) -> usize {
        let (bytes, ms) = (self.config.retention_bytes, self.config.retention_ms);
        if bytes.is_none() && ms.is_none() {
            return 0;
        }
        let removed: Vec<Arc<Segment>> = {
            let mut segs = self.segments.write().unwrap_or_else(|p| p.into_inner());
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
            let removed = segs.drain(..n).collect();
            self.start_offset.store(segs[0].base(), Ordering::Release);
            removed
        };
        for s in &removed {
            if let Err(e) = s.mark_deleted() {
                ::log::warn!("deleting segment {} failed: {e}", s.path().display());
            }
        }
        removed.len()
    }

    /// Group commit: returns once every offset below `target` is on disk.
    ///
    /// Concurrent callers share one flush. The first caller to find no flush
    /// running (the leader) waits, for at most the last flush's duration,
    /// until as many callers wait as the last flush served (see
    /// [`FlushState::expected`]) and as many records were appended as it
    /// covered; the caller that completes that flushes at once in the
    /// leader's place, so the round does not also wait for the leader to
    /// be woken. A lone sender never waits.
    #[inline(never)]
    pub(crate) fn flush_to(&self, target: u64) -> Result<()> {
        if self.flushed_fast.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        let mut st = lock(&self.group.state);
        let mut counted_in = None;
        loop {
            if st.flushed >= target {
                return Ok(());
            }
            if self.poisoned.load(Ordering::Acquire) {
                return Err(self.poisoned_error());
            }
            // A caller the running flush covers waits for it uncounted.
            let covered = st.in_progress && target <= st.flushing_to;
            if counted_in != Some(st.round) && !covered {
                counted_in = Some(st.round);
                st.arrivals += 1;
            }
            let lead = !st.in_progress && !st.collecting;
            let complete = st.collecting && self.collected(&st);
            if !lead && !complete {
                let seen = self.group.flush_ends.load(Ordering::Acquire);
                st.sleepers = true;
                drop(st);
                while self.group.flush_ends.load(Ordering::Acquire) == seen {
                    atomic_wait::wait(&self.group.flush_ends, seen);
                }
                if self.flushed_fast.load(Ordering::Acquire) >= target {
                    return Ok(());
                }
                st = lock(&self.group.state);
                continue;
            }
            if complete {
                // The leader still waits on `arrival_cv`: it sees from
                // `round` that its round was taken over, and is woken when
                // the flush ends.
                st.collecting = false;
                st.leader_waiting = true;
            } else if !self.collected(&st) {
                let wait = st.last_flush.min(std::time::Duration::from_millis(2));
                let deadline = Instant::now() + wait;
                let round = st.round;
                st.collecting = true;
                while st.round == round && !self.collected(&st) {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    st = self
                        .group
                        .arrival_cv
                        .wait_timeout(st, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                if st.round != round {
                    continue; // taken over: wait for that flush
                }
                st.collecting = false;
            }
            self.flush_round(st)?;
            if self.flushed_fast.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            st = lock(&self.group.state);
        }
    }

    /// Whether the next flush has what the last one had: as many callers
    /// waiting and as many records appended since.
    fn collected(&self, st: &FlushState) -> bool {
        st.arrivals >= st.expected
            && self.end_offset().saturating_sub(st.flushed) >= st.last_covered
    }

    /// Runs one group-commit flush for the callers counted so far, then
    /// wakes everyone waiting. Called with the flush state locked.
    fn flush_round(&self, mut st: MutexGuard<'_, FlushState>) -> Result<()> {
        st.in_progress = true;
        st.flushing_to = self.end_offset();
        let served = std::mem::take(&mut st.arrivals);
        let before = st.flushed;
        st.round += 1;
        drop(st);
        let started = Instant::now();
        let res = self.flush_segments();
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.group.state);
        st.in_progress = false;
        st.last_flush = started.elapsed();
        st.expected = served + st.arrivals;
        let res = match res {
            Ok(end) => {
                st.last_covered = end.saturating_sub(before).max(1);
                st.flushed = st.flushed.max(end);
                self.flushed_fast.store(st.flushed, Ordering::Release);
                Ok(end)
            }
            Err(e) => {
                self.poisoned.store(true, Ordering::Release);
                Err(e)
            }
        };
        // Everyone waiting looks again: the served return at once, the
        // others take the lock (one of them leads the next flush).
        self.group.flush_ends.fetch_add(1, Ordering::Release);
        let sleepers = std::mem::take(&mut st.sleepers);
        let leader = std::mem::take(&mut st.leader_waiting);
        drop(st);
        if sleepers {
            atomic_wait::wake_all(&self.group.flush_ends);
        }
        if leader {
            self.group.arrival_cv.notify_all();
        }
        let end = res?;
        // After the wake-ups, which are what the senders wait for. Not
        // synced: a lost update only lengthens a recovery.
        let _ = self.checkpoint.advance(end);
        self.write_ahead();
        Ok(())
    }

    /// Records, durably, that the log is being written to: until the next
    /// clean close, a crash must be followed by a check from the recovery
    /// point. Writer only (under the writer lock), before the first append.
    fn mark_unclean(&self) -> Result<()> {
        let point = RecoveryPoint {
            offset: self.flushed_fast.load(Ordering::Acquire),
            clean: false,
        };
        self.checkpoint.write(point, true)
    }

    /// Flushes everything published so far; returns the offset it covers.
    fn flush_segments(&self) -> Result<u64> {
        let end = self.end_offset();
        let dirty: Vec<Arc<Segment>> = {
            let segs = self.segments.read().unwrap_or_else(|p| p.into_inner());
            let mut v: Vec<_> = segs
                .iter()
                .rev()
                .take_while(|s| !(s.is_sealed() && s.is_flushed()))
                .cloned()
                .collect();
            v.reverse();
            v
        };
        for s in dirty {
            s.flush()?;
        }
        Ok(end)
    }

    /// Flushes everything appended so far.
    pub(crate) fn flush(&self) -> Result<()> {
        self.flush_to(self.end_offset())
    }

    /// Flushes, refuses further appends, removes the prepared segment and
    /// releases every file and mapping (see [`PartitionLog::release`]).
    pub(crate) fn close(&self) -> Result<()> {
        let res = self.flush();
        {
            let mut w = lock(&self.writer);
            if !w.closed && res.is_ok() {
                self.save_producer_snapshot(&w);
                // Everything is flushed: the next open need not check.
                let _ = self.checkpoint.write(
                    RecoveryPoint {
                        offset: w.next_offset,
                        clean: true,
                    },
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
            for ext in ["log", "idx", "tix"] {
                let _ = std::fs::remove_file(self.dir.join(format!("{PREPARED_STEM}.{ext}")));
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
        let segments =
            std::mem::take(&mut *self.segments.write().unwrap_or_else(|p| p.into_inner()));
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
        // A background page-faulting or write-ahead thread holds a segment
        // for the few milliseconds its call takes: wait for it, so that
        // the close has released everything when it returns.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while self.populating.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    // ------------------------------------------------------------ readers

    /// A cursor at the batch holding `offset`.
    pub(crate) fn cursor(&self, offset: u64) -> Result<Cursor> {
        let seg = {
            let segs = self.segments.read().unwrap_or_else(|p| p.into_inner());
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

    /// The next batch at the cursor, moving on to the next segment at the end
    /// of a sealed one; `None` when nothing more is published.
    #[inline]
    /// Moves `c` past the damaged batch at its position: to the next
    /// position of its segment that holds a valid batch, or to the start of
    /// the next segment. `false` when there is nothing valid after it.
    fn skip_damaged(&self, c: &mut Cursor) -> bool {
        if let Some(pos) = c.seg.next_valid_batch_after(c.pos) {
            c.pos = pos;
            return true;
        }
        let next = {
            let segs = self.segments.read().unwrap_or_else(|p| p.into_inner());
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
            if !sealed {
                return Ok(None);
            }
            let next = {
                let segs = self.segments.read().unwrap_or_else(|p| p.into_inner());
                segs.iter().find(|s| s.base() > c.seg.base()).cloned()
            };
            match next {
                Some(s) => {
                    c.seg = s;
                    c.pos = 0;
                    c.ahead = 0;
                }
                None => return Ok(None),
            }
        }
    }

    /// The earliest offset whose record timestamp is at or after `ts`, or
    /// `None` when every record is older.
    pub(crate) fn offset_for_timestamp(&self, ts: i64) -> Result<Option<u64>> {
        let segs: Vec<Arc<Segment>> = self
            .segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
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
                    for r in batch::Records::over_section(&section, h.record_count) {
                        let r = r.map_err(|reason| seg.corrupt(pos, reason))?;
                        if h.record_timestamp(r.timestamp_delta) >= ts {
                            return Ok(Some(h.base_offset + r.offset_delta as u64));
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

    #[inline]
    fn wake_waiters(&self) {
        // Pairs with the fence in `Consumer` between registering and
        // re-checking: either it sees our append or we see its waiter.
        fence(Ordering::SeqCst);
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
mod tests {
    use super::*;
    use crate::faults::SyncKind;
    use crate::{Broker, Config, TopicConfig};

    fn open(dir: &Path, segment_bytes: u64) -> (Broker, Arc<PartitionLog>) {
        let mq = Broker::open(dir, Config::default().prefault(false)).unwrap();
        mq.create_topic("t", TopicConfig::new(1).segment_bytes(segment_bytes))
            .unwrap();
        let log = mq.inner().topic("t").unwrap().partition(0).unwrap();
        (mq, log)
    }

    fn append(log: &PartitionLog, value: &[u8], count: usize) -> u64 {
        let recs: Vec<RecordRef<'_>> = (0..count)
            .map(|_| RecordRef {
                key: None,
                value: Some(value),
                headers: &[],
                timestamp: 1,
            })
            .collect();
        log.append(&recs, ProducerFields::default())
            .unwrap()
            .base_offset
    }

    fn written_ahead(log: &PartitionLog) -> usize {
        while log.populating.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        lock(&log.group.written_ahead).to
    }

    /// Small flushes get the blocks ahead of the writer written (so that
    /// their own msyncs overwrite written blocks); the written-ahead zeros
    /// never show through what the writer put there; large flushes do not
    /// write ahead.
    #[test]
    fn small_flushes_write_blocks_ahead_and_large_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let (_mq, log) = open(dir.path(), 8 << 20);
        let value = [7u8; 100];
        for _ in 0..3 {
            append(&log, &value, 1);
            log.flush().unwrap();
        }
        let ahead = written_ahead(&log);
        let end = log.segments.read().unwrap().last().unwrap().end();
        assert!(ahead >= end + WRITE_AHEAD_WINDOW / 2, "{ahead} <= {end}");
        // The writer goes on through the written-ahead window and past it;
        // every record reads back.
        let per_window = WRITE_AHEAD_WINDOW / 150;
        for i in 0..per_window * 2 {
            append(&log, &value, 1);
            if i % 50 == 0 {
                log.flush().unwrap();
            }
        }
        log.flush().unwrap();
        assert!(written_ahead(&log) > ahead, "no second window");
        let mut c = log.cursor(0).unwrap();
        let mut records = 0u64;
        while let Some((at, h)) = log.next_batch(&mut c).unwrap() {
            assert_eq!(h.base_offset, records);
            let bytes = c.seg.bytes(at, at + h.total_len());
            assert!(bytes.windows(value.len()).any(|w| w == value));
            records += u64::from(h.record_count);
        }
        assert_eq!(records, log.end_offset());

        let dir = tempfile::tempdir().unwrap();
        let (_mq, log) = open(dir.path(), 8 << 20);
        for _ in 0..8 {
            append(&log, &[1u8; 1000], 100);
            log.flush().unwrap();
        }
        assert_eq!(written_ahead(&log), 0, "large flushes wrote ahead");
    }

    /// The caller that completes the collection a leader waits for flushes
    /// in its place (on its own thread, not waking the leader first); the
    /// leader returns once that flush covers it.
    #[test]
    fn the_caller_completing_a_round_flushes_for_the_leader() {
        let dir = tempfile::tempdir().unwrap();
        let (_mq, log) = open(dir.path(), 1 << 20);
        let syncs = Arc::new(Mutex::new(Vec::new()));
        let (root, seen) = (dir.path().to_owned(), Arc::clone(&syncs));
        crate::faults::set_sync_hook(Some(Arc::new(move |path: &Path, kind, before| {
            if before && path.starts_with(&root) && matches!(kind, SyncKind::Range { .. }) {
                lock(&seen).push(std::thread::current().id());
            }
            Ok(())
        })));
        {
            let mut st = lock(&log.group.state);
            st.expected = 2;
            // The leader alone would flush after this long.
            st.last_flush = std::time::Duration::from_secs(10);
        }
        let first = append(&log, b"a", 1);
        std::thread::scope(|s| {
            let leader = s.spawn(|| log.flush_to(first + 1));
            while !lock(&log.group.state).collecting {
                std::thread::yield_now();
            }
            assert_eq!(log.flushes(), 0);
            let second = append(&log, b"b", 1);
            log.flush_to(second + 1).unwrap();
            leader.join().unwrap().unwrap();
        });
        crate::faults::set_sync_hook(None);
        assert_eq!(*lock(&syncs), vec![std::thread::current().id()]);
        assert_eq!(log.flushes(), 1);
        assert!(log.flushed_fast.load(Ordering::Acquire) >= 2);
        let st = lock(&log.group.state);
        assert_eq!(st.expected, 2);
        assert!(!st.collecting && !st.in_progress && !st.leader_waiting);
    }
}
