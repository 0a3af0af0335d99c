//! Opening a partition's log: listing its segment files, recovering the
//! active segment's tail (and, after an unclean shutdown, the sealed
//! segments from the recovery point on) and reporting acknowledged records
//! the log no longer holds.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

use super::checkpoint::{CheckpointFile, RecoveryPoint};
use super::flush::GroupCommit;
use super::segment::{self, Segment, DELETED_SUFFIX, PREPARED_STEM};
use super::{mmap, LogConfig, PartitionLog, RecoveryStats, Waiters, Writer};
use crate::dedup::ProducerTable;
use crate::error::{IoContext, Result};
use crate::faults::{self, SyncKind};
use crate::shared::{Tail, TailPage};

/// Files that the open of many partitions makes durable one by one; from
/// this many on, one `syncfs(2)` of the filesystem makes them all durable
/// at once (see [`PartitionLog::sync_opened`]). A `syncfs` writes back every
/// dirty page of the filesystem, other programs' too, so it is worth it
/// only over many files: 256 fsyncs (64 one-segment partitions) took about
/// as long as one `syncfs` on the shared machine (see docs/decisions.md).
const SYNCFS_MIN_FILES: usize = 256;

/// What an open that checked the partition (after an unclean shutdown, or
/// at its creation) must still make durable before the partition is used:
/// the segments recovery kept, then the new recovery point.
#[derive(Debug)]
pub(crate) struct PendingSync {
    /// Segments that may hold what recovery kept (only in the page cache
    /// after a `kill -9`).
    segments: Vec<Arc<Segment>>,
    /// The recovery point to write once they are durable.
    point: RecoveryPoint,
}

impl PendingSync {
    /// Files the sync covers: three per segment, and the recovery point.
    fn files(&self) -> usize {
        self.segments.len() * 3 + 1
    }
}

impl PartitionLog {
    /// Makes the partitions just opened (`opened`, each with what its open
    /// left to sync) durable, and writes their recovery points: one by one
    /// for a few files; for more, all their files first with one
    /// `syncfs(2)` of the filesystem holding `dir`, then every recovery
    /// point, then one more `syncfs(2)`. Either way no recovery point
    /// moves past data before that data is durable, and a crash anywhere
    /// in between leaves points that are checked again at the next open.
    /// No partition may be used before this returns.
    pub(crate) fn sync_opened(
        opened: &[(Arc<PartitionLog>, Option<PendingSync>)],
        dir: &Path,
    ) -> Result<()> {
        let files: usize = opened
            .iter()
            .filter_map(|(_, p)| p.as_ref().map(PendingSync::files))
            .sum();
        if files < SYNCFS_MIN_FILES || !cfg!(target_os = "linux") || !same_filesystem(opened, dir) {
            for (log, pending) in opened {
                if let Some(pending) = pending {
                    log.finish_pending(pending)?;
                }
            }
            return Ok(());
        }
        sync_filesystem(dir)?;
        for (log, pending) in opened {
            if let Some(pending) = pending {
                log.checkpoint.write(pending.point, false)?;
            }
        }
        sync_filesystem(dir)
    }

    /// The one-partition path of [`PartitionLog::sync_opened`]: syncs the
    /// kept segments' files, then writes and syncs the recovery point.
    pub(crate) fn finish_pending(&self, pending: &PendingSync) -> Result<()> {
        for seg in &pending.segments {
            seg.sync_all_files()?;
        }
        self.checkpoint.write(pending.point, true)
    }

    /// Opens the partition in `dir`, creating it (empty) if needed, and
    /// recovers the tail of its active segment. What it must still make
    /// durable (when it checked the partition: after an unclean shutdown,
    /// or at its creation) is returned for [`PartitionLog::sync_opened`],
    /// to be synced with other partitions': the partition may not be used
    /// before that.
    pub(crate) fn open_unsynced(
        topic: Arc<str>,
        partition: u32,
        dir: &Path,
        config: LogConfig,
    ) -> Result<(Self, Option<PendingSync>)> {
        Self::open_unsynced_trusting(topic, partition, dir, config, false)
    }

    /// The offset of the partition in `dir`'s recovery point when the point
    /// says it was closed cleanly (in any session), else `None` (no point,
    /// a damaged one, or one a crash or a requested full recovery left).
    pub(crate) fn clean_point(dir: &Path) -> Result<Option<u64>> {
        Ok(
            super::checkpoint::read_point(&dir.join(super::checkpoint::FILE))?
                .filter(|(p, _)| p.clean)
                .map(|(p, _)| p.offset),
        )
    }

    /// Syncs directory `dir` (its entries: files created, renamed, removed).
    pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
        mmap::sync_dir(dir)
    }

    /// [`PartitionLog::open_unsynced`]; with `trust_clean`, a clean
    /// recovery point is trusted whatever session it names: the caller
    /// knows (from the summary of the broker's last clean close, see
    /// `partition_handle.rs`) that the partition was closed cleanly and not
    /// written to since.
    pub(crate) fn open_unsynced_trusting(
        topic: Arc<str>,
        partition: u32,
        dir: &Path,
        config: LogConfig,
        trust_clean: bool,
    ) -> Result<(Self, Option<PendingSync>)> {
        // Listed first, created only when missing: two system calls fewer
        // per partition at every open.
        let listing = match std::fs::read_dir(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::private_dir::create_dir_all(dir, config.file_mode)?;
                std::fs::read_dir(dir)
            }
            r => r,
        };
        let mut bases = Vec::new();
        for entry in listing.ctx(|| format!("listing {}", dir.display()))? {
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
        let topic_name = Arc::clone(&topic);
        let mut segments = Vec::with_capacity(bases.len().max(1));
        let mut recovery = RecoveryStats::default();
        let (checkpoint, point) =
            CheckpointFile::open_session(dir, config.file_mode, &config.files)?;
        // After an unclean shutdown, every batch from the recovery point on
        // is checked (see checkpoint.rs): `None` after a clean one, in the
        // directory's last session (see unclean.rs).
        let check_from = match point {
            Some((p, session)) if (trust_clean && p.clean) || config.unclean.trusts(p, session) => {
                None
            }
            Some((p, _)) => Some(p.offset),
            None => Some(0),
        };
        let point = point.map(|(p, _)| p);
        if let Some(from) = check_from {
            Self::truncate_at_damaged_sealed(dir, &mut bases, from, &mut recovery)?;
        }
        let (active, active_writer, rec) = match bases.split_last() {
            None => {
                let (seg, writer) = Segment::create(dir, 0, sizes)?;
                (seg, writer, segment::Recovered::default())
            }
            Some((&last, sealed)) => {
                for &base in sealed {
                    segments.push(Arc::new(Segment::open_sealed(dir, base)?));
                }
                let committed = config.committed.clone();
                let ask = move |first: u64| {
                    committed
                        .as_ref()
                        .and_then(|c| (c.0)(&topic_name, partition, first))
                };
                let (seg, writer, rec) = Segment::open_active(
                    dir,
                    last,
                    sizes,
                    config.index_interval_bytes,
                    config.max_batch(),
                    check_from.is_none(),
                    config
                        .committed
                        .is_some()
                        .then_some(&ask as &dyn Fn(u64) -> Option<super::CommittedRun>),
                )?;
                if rec.truncated {
                    recovery.truncated_bytes += rec.truncated_bytes;
                    recovery.dropped_batches += rec.dropped_batches;
                    recovery.quarantined_bytes += rec.quarantined_bytes;
                    if rec.abandoned_transaction {
                        recovery.abandoned_transactions += 1;
                    } else if rec.torn_tail {
                        recovery.torn_tails += 1;
                    } else {
                        recovery.corruptions += 1;
                    }
                }
                (seg, writer, rec)
            }
        };
        let next_offset = rec.next_offset.max(active.base());
        if let Some(p) = point.filter(|p| p.offset > next_offset) {
            Self::report_lost(dir, p, next_offset, rec.truncated, &mut recovery);
        }
        let active = Arc::new(active);
        segments.push(Arc::clone(&active));
        // What recovery kept may still be only in the page cache (a `kill
        // -9` keeps it): it is made durable before the recovery point moves
        // past it (see `sync_opened`).
        let pending = check_from.map(|from| PendingSync {
            segments: segments
                .iter()
                .enumerate()
                .filter(|&(i, _)| segments.get(i + 1).map_or(u64::MAX, |s| s.base()) > from)
                .map(|(_, seg)| Arc::clone(seg))
                .collect(),
            point: RecoveryPoint {
                offset: next_offset,
                clean: false,
            },
        });
        let start = segments[0].base();
        // Shared mode: readers in other processes learn the log's end from
        // the tail page, reset now that recovery fixed that end.
        let tail = match &config.shared {
            Some(_) => {
                let page = TailPage::open(dir, config.file_mode)?;
                page.reset(Tail {
                    next_offset,
                    active_base: active.base(),
                    published: active.end() as u64,
                    log_start: start,
                    cuts: 0,
                    last_batch: None,
                });
                Some(Mutex::new(page))
            }
            None => None,
        };
        let log = PartitionLog {
            topic,
            partition,
            dir: dir.to_owned(),
            segments: RwLock::new(segments),
            writer: Mutex::new(Writer {
                max_ts: rec.max_timestamp,
                last_index_pos: rec.last_index_pos,
                indexes_stale: false,
                populated_to: 0,
                flushes_seen: 0,
                grow_failed_at: usize::MAX,
                prepare_requested: false,
                closed: false,
                active,
                active_writer,
                next_offset,
                producers: ProducerTable::default(),
                producers_loaded: false,
            }),
            start_offset: AtomicU64::new(start),
            end_offset: AtomicU64::new(next_offset),
            waiters: Waiters::default(),
            group: Box::new(GroupCommit::new(next_offset)),
            flushed_fast: AtomicU64::new(next_offset),
            poisoned: AtomicBool::new(false),
            flushes: AtomicU64::new(0),
            retention_floor: AtomicU64::new(config.initial_retention_floor()),
            prepare: Mutex::new(None),
            populating: Arc::new(AtomicBool::new(false)),
            recovery,
            checkpoint,
            config,
            hints: super::prefetch::Hints::default(),
            tail,
            reader: None,
        };
        Ok((log, pending))
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
}

/// Whether every partition directory in `opened` that has something to
/// sync is on the filesystem of `dir` (a partition directory made a mount
/// point of its own is synced file by file).
fn same_filesystem(opened: &[(Arc<PartitionLog>, Option<PendingSync>)], dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = |d: &Path| std::fs::metadata(d).map(|m| m.dev()).ok();
    let Some(own) = dev(dir) else {
        return false;
    };
    opened
        .iter()
        .filter(|(_, p)| p.is_some())
        .all(|(log, _)| dev(&log.dir) == Some(own))
}

/// `syncfs(2)` of the filesystem holding `dir`: every file and directory
/// entry written there so far is durable once it returns (Linux reports
/// write-back errors of any file since 5.8).
fn sync_filesystem(dir: &Path) -> Result<()> {
    faults::before_sync(dir, SyncKind::Filesystem)
        .and_then(|()| std::fs::File::open(dir))
        .and_then(|d| syncfs(&d))
        .ctx(|| format!("syncing the filesystem of {}", dir.display()))?;
    faults::after_sync(dir, SyncKind::Filesystem);
    Ok(())
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn syncfs(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `file` is an open descriptor for the whole call.
    if unsafe { libc::syncfs(file.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn syncfs(_: &std::fs::File) -> std::io::Result<()> {
    // Not reached: `sync_opened` syncs file by file there.
    Err(std::io::ErrorKind::Unsupported.into())
}
