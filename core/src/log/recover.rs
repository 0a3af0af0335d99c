//! Recovery of the active segment's tail at open: which batches hold,
//! where the data ends, what is cut, and the indexes rebuilt on the way.

use crate::log::batch::{self, Check};
use crate::log::index::{last_nonzero, zero_nonzero, IndexFile, OffsetEntry, TimeEntry};
use crate::log::mmap::MappedFile;
use crate::log::segment::{quarantine_path, SegmentWriter};

/// What recovery found at the tail of the active segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// Offset after the last valid batch.
    pub next_offset: u64,
    /// Largest record timestamp in the segment (`i64::MIN` when empty).
    pub max_timestamp: i64,
    /// Position of the last index entry (0 when none).
    pub last_index_pos: usize,
    /// Bytes removed from the tail.
    pub truncated_bytes: u64,
    /// Batches removed (the bad one and any valid ones after it).
    pub dropped_batches: u64,
    /// Whether the removed bytes were a torn tail (a partial last write)
    /// rather than damage followed by more data.
    pub torn_tail: bool,
    /// Whether anything was truncated at all.
    pub truncated: bool,
    /// Bytes of the cut moved aside (after a clean shutdown, see
    /// [`quarantine_path`]).
    pub quarantined_bytes: u64,
    /// The `magic` of a batch from a newer format version where the scan
    /// stopped (nothing was cut: the segment is refused).
    pub unsupported: Option<u8>,
    /// Whether the cut was a transaction's data that a crash left without
    /// its marker and without a commit record: written, never published,
    /// never acknowledged (see [`recover`]).
    pub abandoned_transaction: bool,
}

/// Tail recovery of the active segment (see [`Segment::open_active`]).
/// Without `trust_index` (after an unclean shutdown: a power loss may have
/// kept index pages whose log pages it lost) every batch is checked from the
/// start and the indexes are rebuilt.
///
/// `trust_index` also says the log was closed cleanly: a bad batch found
/// then cannot be a torn write, so it counts as corruption, and the bytes
/// cut are first copied to a quarantine file (created with `mode`).
///
/// A transaction's data batches (transactional, not control) are written
/// at its commit with the first one's `length` left 0, followed by room for
/// its marker; the length and the marker are written once its commit record
/// is, and published together. So a crash in the middle of a commit leaves
/// either data that reads as the end of the log (before the commit point),
/// or data whose marker may be missing (after it). `committed(first
/// offset)` says whether the transaction's commit record was written, and
/// the first batch's length: the length is then put back and the data kept
/// (its marker is written again after the open); otherwise the data is cut
/// like a torn write (no reader saw it, no sender was told it was written).
/// Without `committed` (nothing known) unmarked data with its length is
/// kept. Data batches of a transaction get no index entry here, so that a
/// cut never leaves one behind.
#[allow(clippy::too_many_arguments)]
pub(super) fn recover(
    base: u64,
    log: &mut MappedFile,
    index: &mut IndexFile,
    time: &mut IndexFile,
    w: &mut SegmentWriter,
    limit: usize,
    interval: usize,
    max_batch: usize,
    trust_index: bool,
    mode: u32,
    committed: Option<&dyn Fn(u64) -> Option<super::CommittedRun>>,
) -> Recovered {
    let clean = trust_index;
    let log_path = log.path().to_owned();
    index.recover(limit);
    time.recover(limit);
    // Start from the last offset-index entry that points at a valid batch and
    // has a matching time entry (which carries the max timestamp before it).
    let mut start = (0usize, base, i64::MIN, 0usize);
    if trust_index {
        let bytes = &log.all_mut()[..limit];
        for i in (0..index.len()).rev() {
            let e = index.offset_entry(i);
            let pos = e.pos as usize;
            let ok = matches!(batch::check(&bytes[pos..]), Check::Valid(h) if h.base_offset == base + u64::from(e.rel));
            let t = (i < time.len()).then(|| time.time_entry(i));
            if let (true, Some(t)) = (ok, t) {
                if t.rel == e.rel && t.pos == e.pos {
                    start = (pos, base + u64::from(e.rel), t.ts, i + 1);
                    break;
                }
            }
        }
    }
    let (mut pos, mut expected, mut max_ts, keep) = start;
    index.truncate(keep);
    time.truncate(keep);
    let mut last_index_pos = if keep > 0 { pos } else { 0 };
    let mut rec = Recovered::default();
    let bytes = log.all_mut();
    // The transaction data seen since the last marker or plain batch:
    // where it starts, its first offset and the max timestamp before it.
    let mut open_run: Option<(usize, u64, i64)> = None;
    // Where a committed transaction's first length was put back.
    let mut restored_at = None;
    loop {
        let outcome = batch::check(&bytes[pos..limit]);
        let mut bad = match outcome {
            Check::Valid(h) if h.base_offset == expected => {
                let txn_data = h.is_transactional() && !h.is_control();
                if txn_data {
                    open_run.get_or_insert((pos, expected, max_ts));
                } else {
                    open_run = None;
                }
                if pos - last_index_pos >= interval && pos > 0 && !txn_data {
                    index.push_offset(
                        &mut w.index,
                        OffsetEntry {
                            rel: (h.base_offset - base) as u32,
                            pos: pos as u32,
                        },
                    );
                    time.push_time(
                        &mut w.time,
                        TimeEntry {
                            ts: max_ts,
                            rel: (h.base_offset - base) as u32,
                            pos: pos as u32,
                        },
                    );
                    last_index_pos = pos;
                }
                max_ts = max_ts.max(h.max_timestamp);
                expected = h.next_offset();
                pos += h.total_len();
                continue;
            }
            Check::Valid(_) => Some("batch base offset out of sequence"),
            Check::End => {
                // A transaction's first batch before its commit point has
                // length 0: when the commit record says it committed, the
                // length goes back and the scan goes on through it.
                // Its CRC32C field tells it from a part written at the
                // same offset after the topic was deleted and made again.
                let length = committed
                    .filter(|_| restored_at != Some(pos))
                    .zip(batch::Prefix::read(&bytes[pos..limit]))
                    .and_then(|(c, prefix)| {
                        c(expected).filter(|run| run.crc.is_none_or(|c| c == prefix.crc))
                    })
                    .map(|run| run.len)
                    .filter(|&len| pos + batch::LENGTH_PREFIX + len as usize <= limit);
                if let Some(len) = length {
                    bytes[pos + 8..pos + 12].copy_from_slice(&len.to_le_bytes());
                    restored_at = Some(pos);
                    continue;
                }
                if is_unpublished_transaction(&bytes[pos..limit]) {
                    rec.abandoned_transaction = true;
                }
                None
            }
            Check::Invalid(reason) => Some(reason),
        };
        if bad == Some(batch::UNSUPPORTED_VERSION) {
            // Written by a newer version on purpose: refused, never cut.
            rec.unsupported = Some(bytes[pos + 16]);
            break;
        }
        if let (Some((at, first, ts)), Some(committed)) = (open_run, committed) {
            if committed(first).is_none() {
                // Cut from the run's start: what follows it is the run
                // itself (valid batches) and whatever damage ended it.
                (pos, expected, max_ts) = (at, first, ts);
                bad = Some("transaction data without a commit (a crash during its commit)");
                rec.abandoned_transaction = true;
            }
        }
        // Past the last good batch: find how far damage or valid-looking
        // leftovers reach, and zero it all so the zero-length end marker holds.
        let mut chain = pos;
        let mut dropped = 0u64;
        if bad.is_some() {
            dropped = 1;
            let claimed = bytes
                .get(pos + 8..pos + 12)
                .map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
            let next = pos + batch::LENGTH_PREFIX + claimed as usize;
            if claimed >= batch::MIN_LENGTH && next <= limit {
                chain = next;
                while let Check::Valid(h) = batch::check(&bytes[chain..limit]) {
                    chain += h.total_len();
                    dropped += 1;
                }
            }
        }
        let window_end = limit.min(chain.saturating_add(max_batch));
        let garbage_end = last_nonzero(&bytes[pos..window_end])
            .map_or(pos, |last| pos + last + 1)
            .max(if bad.is_some() { chain } else { pos });
        if garbage_end > pos {
            // After a clean shutdown no write was in flight: a bad batch is
            // damage, kept for inspection before the cut.
            let corrupt_after_clean = clean && bad.is_some();
            if corrupt_after_clean {
                let path = quarantine_path(&log_path, pos);
                match crate::atomic_file::write_atomic(&path, &bytes[pos..garbage_end], mode, true)
                {
                    Ok(()) => rec.quarantined_bytes = (garbage_end - pos) as u64,
                    Err(e) => ::log::error!(
                        "recovery could not keep the damaged bytes of {} in {}: {e}",
                        log_path.display(),
                        path.display()
                    ),
                }
            }
            // Zero everything after `pos`, not just the window: valid old
            // batches left further on could line up with new appends and
            // come back at the next open.
            zero_nonzero(&mut bytes[pos..limit]);
            rec.truncated = true;
            rec.truncated_bytes = (garbage_end - pos) as u64;
            rec.dropped_batches = dropped.max(1);
            // Torn: nothing valid followed the damage, and a write may have
            // been in flight.
            rec.torn_tail = dropped <= 1 && !corrupt_after_clean && !rec.abandoned_transaction;
            let what = if rec.abandoned_transaction {
                "a transaction left by a crash during its commit"
            } else if corrupt_after_clean {
                "corruption in a log closed cleanly; the cut bytes are kept in the .damaged file beside it"
            } else if rec.torn_tail {
                "torn tail"
            } else {
                "corruption before more data"
            };
            let message = format!(
                "recovery truncated {} bytes ({} batches, {what}) at position {} of {}: {}",
                rec.truncated_bytes,
                rec.dropped_batches,
                pos,
                log_path.display(),
                bad.unwrap_or("partial write after the end marker"),
            );
            if rec.torn_tail || rec.abandoned_transaction {
                ::log::warn!("{message}");
            } else {
                ::log::error!("{message}");
            }
        }
        break;
    }
    log.set_published(pos);
    rec.next_offset = expected;
    rec.max_timestamp = max_ts;
    rec.last_index_pos = last_index_pos;
    rec
}

/// Whether `b` starts with a transaction's first data batch whose `length`
/// is still 0 (written, its commit point never reached): a full or compact
/// batch header with the transactional attribute after the zero length.
fn is_unpublished_transaction(b: &[u8]) -> bool {
    if b.len() < batch::LENGTH_PREFIX + 6 || b[8..12] != [0; 4] {
        return false;
    }
    match b[16] {
        batch::MAGIC => u16::from_le_bytes([b[17], b[18]]) & batch::ATTR_TRANSACTIONAL != 0,
        // Compact flag bit 1: the full layout's attribute bit 4.
        batch::MAGIC_COMPACT => b[17] & 0x02 != 0,
        _ => false,
    }
}
