//! The consumer's read path: resolving a partition's position, reading its
//! batches (in place, or decompressed) into a sink, and sharing a poll
//! fairly across the assigned partitions.

use std::sync::Arc;

use super::partition::{Assigned, Decoded, Stop};
use super::{Consumer, OffsetReset};
use crate::error::{Error, Result};
use crate::log::batch::{self, BatchHeader};
use crate::log::compression::MAX_UNCOMPRESSED_LEN;
use crate::log::{PartitionLog, Segment};
use crate::message::{Rec, Sink, Source, Span};

impl Consumer {
    /// Resolves a partition's position (applying `auto_offset_reset`) and
    /// makes sure it has a cursor.
    pub(super) fn resolve(a: &mut Assigned, reset: OffsetReset) -> Result<u64> {
        a.unpark();
        if let (Some(p), Some(_)) = (a.position, &a.cursor) {
            return Ok(p);
        }
        let start = a.log.start_offset();
        if let Some((committed, log_end)) = a.out_of_range {
            let end = a.log.end_offset();
            if reset == OffsetReset::Error {
                return Err(Error::OffsetOutOfRange {
                    topic: a.topic.name().to_string(),
                    partition: a.log.partition(),
                    offset: committed,
                    start,
                    end: log_end,
                });
            }
            // As Kafka's consumer does when it detects that the log was
            // truncated under its position: resume at the first offset the
            // cut removed (records appended since then are new to the
            // group), whichever reset policy is set.
            let to = log_end.clamp(start, end);
            ::log::warn!(
                "consumer of {}/{}: committed offset {committed} is beyond the log end \
                 {log_end} (recovery cut the log); resuming at {to}",
                a.topic.name(),
                a.log.partition()
            );
            a.out_of_range = None;
            a.resets += 1;
            a.position = Some(to);
            a.forget_cursor();
        }
        let wanted = a.position;
        if let Some(p) = wanted {
            if p < start && reset != OffsetReset::Error {
                a.skipped += start - p;
            }
        }
        let target = match (wanted, reset) {
            (Some(p), _) if p >= a.log.start_offset() && p <= a.log.end_offset() => p,
            (_, OffsetReset::Earliest) => a.log.start_offset(),
            (_, OffsetReset::Latest) => a.log.end_offset(),
            (p, OffsetReset::Error) => {
                return Err(Error::OffsetOutOfRange {
                    topic: a.topic.name().to_string(),
                    partition: a.log.partition(),
                    offset: p.unwrap_or(0),
                    start: a.log.start_offset(),
                    end: a.log.end_offset(),
                })
            }
        };
        match a.log.cursor(target) {
            Ok(c) => {
                a.cursor = Some(c);
                a.next_base = None;
                a.position = Some(target);
                Ok(target)
            }
            // Retention moved the start between the check and the cursor.
            Err(Error::OffsetOutOfRange { .. }) if reset != OffsetReset::Error => {
                a.position = None;
                Self::resolve(a, reset)
            }
            Err(e) => Err(e),
        }
    }

    /// Appends up to `limit` messages of partition `a` to `out`.
    fn fetch<S: Sink>(
        a: &mut Assigned,
        reset: OffsetReset,
        limit: usize,
        out: &mut S,
    ) -> Result<()> {
        let mut position = Self::resolve(a, reset)?;
        if position < a.log.start_offset() {
            // Retention deleted what we were about to read. Keep the
            // position: `resolve` resets it, or reports it out of range.
            a.forget_cursor();
            position = Self::resolve(a, reset)?;
        }
        let log = Arc::clone(&a.log);
        let cursor = a.cursor.as_mut().expect("resolved");
        let mut taken = 0;
        let mut failed = None;
        let mut skipped = false;
        while taken < limit {
            let (at, h) = match log.next_batch(cursor) {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            // The base offset is outside the CRC: every batch must hold the
            // next offset to deliver, or it is damaged.
            let expected = a.next_base.is_none_or(|b| b == h.base_offset);
            if h.base_offset > position && position < log.start_offset() {
                // Retention deleted the segments between the one we finished
                // and this one while we read: not damage, a reset.
                cursor.pos = at;
                skipped = true;
                break;
            }
            if !expected || h.base_offset > position || h.last_offset() < position {
                cursor.pos = at;
                failed = Some(cursor.seg.corrupt(at, "batch base offset out of sequence"));
                break;
            }
            let bytes = cursor.seg.bytes(at, at + h.total_len());
            // Uncompressed batches are read in place; a compressed one is
            // decompressed once into a buffer its messages share.
            // `take_records` is monomorphized per backing, so the
            // uncompressed path does no per-record work for compression.
            let stop = if h.attributes & batch::CODEC_MASK == 0 {
                let src = match &a.source {
                    Some(src) if src.is_segment(&cursor.seg) => src,
                    _ => a.source.insert(Arc::new(Source::segment(
                        log.topic(),
                        log.partition(),
                        &cursor.seg,
                    ))),
                };
                Self::take_records(
                    batch::Records::new(bytes, &h),
                    at,
                    src,
                    &h,
                    &mut position,
                    &mut taken,
                    limit,
                    out,
                )
            } else {
                match Self::decompress(a.decoded.take(), &log, &cursor.seg, at, bytes, &h) {
                    Ok(src) => {
                        let stop = Self::take_records(
                            batch::Records::over_section(src.buffer_bytes(), h.record_count),
                            0,
                            &src,
                            &h,
                            &mut position,
                            &mut taken,
                            limit,
                            out,
                        );
                        if let Stop::Limit = stop {
                            // The next fetch comes back to this batch.
                            a.decoded = Some(Decoded {
                                segment: cursor.seg.base(),
                                pos: at,
                                crc: h.crc,
                                records: src,
                            });
                        }
                        stop
                    }
                    Err(reason) => Stop::Malformed(reason),
                }
            };
            match stop {
                Stop::End => {}
                Stop::Limit => {
                    cursor.pos = at; // come back to the rest of this batch
                    a.next_base = Some(h.base_offset);
                    break;
                }
                Stop::Malformed(reason) => {
                    cursor.pos = at;
                    a.next_base = Some(h.base_offset);
                    failed = Some(cursor.seg.corrupt(at, reason));
                    break;
                }
            }
            a.next_base = Some(h.next_offset());
        }
        a.position = Some(position);
        if skipped {
            a.forget_cursor();
            a.next_base = None;
            if taken == 0 {
                return Self::fetch(a, reset, limit, out);
            }
        }
        match failed {
            // Deliver what was read first; the error comes back next poll.
            Some(e) if taken == 0 => Err(e),
            _ => Ok(()),
        }
    }

    /// Appends the records of one batch from `position` on to `out`, until
    /// `taken` reaches `limit`. `base` is the position of the records' byte
    /// ranges in `backing`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn take_records<S: Sink>(
        records: batch::Records<'_>,
        base: usize,
        src: &Arc<Source>,
        h: &BatchHeader,
        position: &mut u64,
        taken: &mut usize,
        limit: usize,
        out: &mut S,
    ) -> Stop {
        // Room for this batch's records at once (an empty poll allocates
        // nothing; a batched log is not regrown record by record).
        out.reserve((h.record_count as usize).min(limit - *taken));
        for r in records {
            let r = match r {
                Ok(r) => r,
                Err(reason) => return Stop::Malformed(reason),
            };
            let offset = h.base_offset + u64::from(r.offset_delta);
            if offset < *position {
                continue;
            }
            if *taken == limit {
                return Stop::Limit;
            }
            out.push(
                src,
                Rec {
                    offset,
                    timestamp: h.record_timestamp(r.timestamp_delta),
                    key: Span::opt(base, r.key),
                    value: Span::opt(base, r.value),
                    headers: Span::new(base, r.headers),
                    header_count: r.header_count,
                    source: 0,
                },
            );
            *position = offset + 1;
            *taken += 1;
        }
        Stop::End
    }

    /// The records of the compressed batch at `at` of `seg` (`bytes`),
    /// decompressed, or taken from `cached` when that is the same batch.
    #[cold]
    fn decompress(
        cached: Option<Decoded>,
        log: &PartitionLog,
        seg: &Segment,
        at: usize,
        bytes: &[u8],
        h: &BatchHeader,
    ) -> std::result::Result<Arc<Source>, &'static str> {
        if let Some(d) = cached {
            if d.segment == seg.base() && d.pos == at && d.crc == h.crc {
                return Ok(d.records);
            }
        }
        let section = batch::records_section(bytes, h, MAX_UNCOMPRESSED_LEN)?;
        Ok(Arc::new(Source::buffer(
            log.topic(),
            log.partition(),
            section.into_owned(),
        )))
    }

    pub(super) fn fetch_all<S: Sink>(&mut self, out: &mut S) -> Result<()> {
        let n = self.assigned.len();
        if n == 0 {
            return Ok(());
        }
        let max = self.config.max_poll_records;
        let share = (max / n).max(1);
        let start = self.next_start % n;
        self.next_start = self.next_start.wrapping_add(1);
        let reset = self.config.auto_offset_reset;
        for k in 0..n {
            let left = max - out.len();
            if left == 0 {
                break;
            }
            let a = &mut self.assigned[(start + k) % n];
            if a.paused {
                continue;
            }
            let res = Self::fetch(a, reset, share.min(left), out);
            a.park();
            self.stats.skipped += std::mem::take(&mut a.skipped);
            self.stats.offset_resets += std::mem::take(&mut a.resets);
            if let Err(e) = res {
                if out.len() == 0 {
                    return Err(e);
                }
                break; // deliver what was read; the error comes back next poll
            }
        }
        Ok(())
    }
}
