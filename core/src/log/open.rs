//! Opening a partition's log: listing its segment files, recovering the
//! active segment's tail (and, after an unclean shutdown, the sealed
//! segments from the recovery point on) and reporting acknowledged records
//! the log no longer holds.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use super::checkpoint::{CheckpointFile, RecoveryPoint};
use super::flush::{FlushState, GroupCommit};
use super::segment::{self, Segment, DELETED_SUFFIX, PREPARED_STEM};
use super::{mmap, LogConfig, PartitionLog, RecoveryStats, Waiters, WriteAhead, Writer};
use crate::dedup::ProducerTable;
use crate::error::{IoContext, Result};

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
        let (checkpoint, point) =
            CheckpointFile::open_session(dir, config.file_mode, &config.files)?;
        // After an unclean shutdown, every batch from the recovery point on
        // is checked (see checkpoint.rs): `None` after a clean one, in the
        // directory's last session (see unclean.rs).
        let check_from = match point {
            Some((p, session)) if config.unclean.trusts(p, session) => None,
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
                let (seg, writer, rec) = Segment::open_active(
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
                (seg, writer, rec)
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
            hints: super::prefetch::Hints::default(),
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
}
