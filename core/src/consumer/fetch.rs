//! The consumer's read path: resolving a partition's position, reading its
//! batches (in place, or decompressed) into a sink, and sharing a poll
//! fairly across the assigned partitions.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::partition::{Assigned, Stop, Within};
use super::{Consumer, OffsetReset};
use crate::error::{Error, Result};
use crate::log::batch::{self, BatchHeader};
use crate::log::compression::MAX_UNCOMPRESSED_LEN;
use crate::log::{Cursor, PartitionLog, RunBatch, Segment};
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

    /// Appends up to `limit` messages of partition `a` to `out`, which has
    /// room for `room` (at least `limit`) more in this poll: `out` grows
    /// once for what the batch read has and the poll can take, not once per
    /// partition visited.
    fn fetch<S: Sink>(
        a: &mut Assigned,
        reset: OffsetReset,
        limit: usize,
        room: usize,
        out: &mut S,
    ) -> Result<()> {
        let mut position = Self::resolve(a, reset)?;
        if position < a.log.start_offset() {
            // Retention deleted what we were about to read. Keep the
            // position: `resolve` resets it, or reports it out of range.
            a.forget_cursor();
            position = Self::resolve(a, reset)?;
        }
        let log: &PartitionLog = &a.log;
        let cursor = a.cursor.as_mut().expect("resolved");
        let mut taken = 0;
        let mut failed = None;
        let mut skipped = false;
        'read: {
            // The batch the last fetch stopped in, if the cursor is still
            // at it, is finished first (it was checked, and decompressed,
            // when first read): the loop below reads whole batches.
            if let Some(w) = a.within.take() {
                if w.segment == cursor.seg.base()
                    && w.pos == cursor.pos
                    && w.next == position
                    && limit > 0
                {
                    let (at, h) = (w.pos, w.header);
                    out.reserve((w.records.1 as usize).min(room));
                    let (stop, buffer) = Self::take_kept(
                        w,
                        cursor,
                        &mut a.source,
                        log,
                        &mut position,
                        &mut taken,
                        limit,
                        out,
                    );
                    if let Stop::End = stop {
                        a.next_base = Some(h.next_offset());
                        position = position.max(h.next_offset());
                    } else {
                        let kept = (position, buffer);
                        failed = Self::stopped(
                            stop,
                            at,
                            &h,
                            cursor,
                            &mut a.next_base,
                            &mut a.within,
                            kept,
                        );
                        break 'read;
                    }
                }
            }
            if taken >= limit {
                break 'read;
            }
            let source = &mut a.source;
            // Kept in locals while the run goes on (written back after it),
            // and the segment `source` reads from as a pointer: per batch,
            // the compact path compares registers, not fields behind
            // references.
            let mut next_base = a.next_base;
            let mut source_seg: *const Segment = std::ptr::null();
            // Whether `out` was given room for the compact batches ahead.
            let mut reserved = false;
            let run = log.read_run(cursor, |seg, b| {
                #[cfg(test)]
                tests::count(|c| c.checked += 1);
                let h = &b.header;
                // The base offset is outside the CRC: every batch must hold
                // the next offset to deliver, or it is damaged. A batch that
                // starts at the position, right after the last one, passes
                // every check (one comparison on the way of a run).
                if h.base_offset != position || next_base.is_some_and(|nb| nb != position) {
                    if let Some(exit) = Self::out_of_sequence(
                        log,
                        b.at,
                        h.base_offset,
                        h.last_offset(),
                        position,
                        next_base,
                    ) {
                        return ControlFlow::Break(exit);
                    }
                }
                if h.magic == batch::MAGIC_COMPACT {
                    // One uncompressed record (the compact layout has no
                    // codec), at the position: read in place.
                    if !reserved {
                        reserved = true;
                        Self::reserve_compact(out, seg, b.at, limit - taken);
                    }
                    let src = Self::segment_source(source, &mut source_seg, log, seg);
                    if let Err(reason) = Self::take_compact(b, src, out) {
                        return ControlFlow::Break(Exit::Malformed(b.at, h.base_offset, reason));
                    }
                    taken += 1;
                    position = h.base_offset + 1;
                    next_base = Some(position);
                } else {
                    // Taken by value: the header does not need to be in
                    // memory on the compact path.
                    let rb = *b;
                    let got = Self::take_batch(
                        rb,
                        seg,
                        (source, &mut source_seg),
                        log,
                        &mut position,
                        &mut taken,
                        (limit, room),
                        out,
                    );
                    if let Some(exit) = got {
                        return ControlFlow::Break(exit);
                    }
                    next_base = Some(rb.header.next_offset());
                }
                if taken < limit {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(Exit::Full)
                }
            });
            a.next_base = next_base;
            match run {
                Ok(None | Some(Exit::Full)) => {}
                Ok(Some(Exit::Skipped(at))) => {
                    cursor.pos = at;
                    skipped = true;
                }
                Ok(Some(Exit::OutOfSequence(at))) => {
                    cursor.pos = at;
                    failed = Some(cursor.seg.corrupt(at, "batch base offset out of sequence"));
                }
                Ok(Some(Exit::Malformed(at, base, reason))) => {
                    cursor.pos = at;
                    a.next_base = Some(base);
                    failed = Some(cursor.seg.corrupt(at, reason));
                }
                Ok(Some(Exit::Stopped(stop, at, h, buffer))) => {
                    let kept = (position, buffer);
                    failed =
                        Self::stopped(stop, at, &h, cursor, &mut a.next_base, &mut a.within, kept);
                }
                Err(e) => failed = Some(e),
            }
        }
        if taken >= limit && failed.is_none() && !skipped && a.within.is_none() {
            Self::step_over_markers(cursor, &mut position, &mut a.next_base);
        }
        a.position = Some(position);
        if skipped {
            a.forget_cursor();
            a.next_base = None;
            if taken == 0 {
                return Self::fetch(a, reset, limit, room, out);
            }
        }
        match failed {
            // Deliver what was read first; the error comes back next poll.
            Some(e) if taken == 0 => Err(e),
            _ => Ok(()),
        }
    }

    /// The checks of a batch's base offset (`base`, last offset `last`, at
    /// `at`) that does not start at `position` right after the batch before
    /// it (`next_base`): `None` when it holds `position` anyway (the first
    /// batch read after a seek into it), else why the fetch ends there.
    #[cold]
    #[inline(never)]
    fn out_of_sequence(
        log: &PartitionLog,
        at: usize,
        base: u64,
        last: u64,
        position: u64,
        next_base: Option<u64>,
    ) -> Option<Exit> {
        if base > position && position < log.start_offset() {
            // Retention deleted the segments between the one we finished
            // and this one while we read: not damage, a reset.
            return Some(Exit::Skipped(at));
        }
        let expected = next_base.is_none_or(|nb| nb == base);
        if !expected || base > position || last < position {
            return Some(Exit::OutOfSequence(at));
        }
        None
    }

    /// Makes room in `out`, once per fetch, for the compact batches it may
    /// take from `at` in `seg` on: `left` at most, and no more than the
    /// published bytes there can hold (a reader near the end of the log
    /// does not reserve for a full poll). One-record batches carry no
    /// record count to reserve by, as a batch of many does.
    #[cold]
    #[inline(never)]
    fn reserve_compact<S: Sink>(out: &mut S, seg: &Segment, at: usize, left: usize) {
        const SMALLEST: usize = batch::LENGTH_PREFIX + batch::COMPACT_MIN_LENGTH as usize;
        let fit = seg.end().saturating_sub(at) / SMALLEST;
        out.reserve(fit.clamp(1, left.max(1)));
    }

    /// The source of the messages read in place from `seg`: `source`,
    /// made for `seg` if it is not already (`source_seg` is the segment
    /// `source` was last checked or made for in this run).
    #[inline(always)]
    fn segment_source<'s>(
        source: &'s mut Option<Arc<Source>>,
        source_seg: &mut *const Segment,
        log: &PartitionLog,
        seg: &Arc<Segment>,
    ) -> &'s Arc<Source> {
        if !std::ptr::eq(*source_seg, Arc::as_ptr(seg)) {
            Self::new_segment_source(source, log, seg);
            *source_seg = Arc::as_ptr(seg);
        }
        match source {
            Some(src) => src,
            None => unreachable!("made by new_segment_source"),
        }
    }

    /// Makes `source` the source of `seg`'s messages, unless it is already.
    #[cold]
    #[inline(never)]
    fn new_segment_source(
        source: &mut Option<Arc<Source>>,
        log: &PartitionLog,
        seg: &Arc<Segment>,
    ) {
        if !source.as_ref().is_some_and(|s| s.is_segment(seg)) {
            *source = Some(Arc::new(Source::segment(log.topic(), log.partition(), seg)));
        }
    }

    /// Takes the records of the batch `b` of `seg` in the full layout,
    /// plain or compressed (the compact layout is read inline by
    /// [`Consumer::fetch`]): from `position` on, while `taken` is below
    /// `limit` (`room`: what the poll has room for). Returns why the fetch
    /// ends at it, if it does before the batch's end; else moves
    /// `position` past the batch.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn take_batch<S: Sink>(
        b: RunBatch<'_>,
        seg: &Arc<Segment>,
        (source, source_seg): (&mut Option<Arc<Source>>, &mut *const Segment),
        log: &PartitionLog,
        position: &mut u64,
        taken: &mut usize,
        (limit, room): (usize, usize),
        out: &mut S,
    ) -> Option<Exit> {
        let (at, h) = (b.at, &b.header);
        out.reserve((h.record_count as usize).min(room - *taken));
        if h.attributes & batch::CODEC_MASK != 0 {
            // Decompressed once into a buffer its messages share.
            let (stop, buffer) =
                Self::take_compressed(log, b.bytes, h, position, taken, limit, out);
            if !matches!(stop, Stop::End) {
                return Some(Exit::Stopped(stop, at, *h, buffer));
            }
        } else {
            // Read in place (`take_records` is monomorphized per backing,
            // so this path does no per-record work for compression).
            let src = Self::segment_source(source, source_seg, log, seg);
            let records = batch::Records::new(b.bytes, h);
            let stop = Self::take_records(records, at, src, h, position, taken, limit, out);
            if !matches!(stop, Stop::End) {
                return Some(Exit::Stopped(stop, at, *h, None));
            }
        }
        // Offsets may skip past the batch's last record (its
        // `last_offset_delta`): the next batch starts after the gap.
        *position = (*position).max(h.next_offset());
        None
    }

    /// Moves a fetch that filled its poll past the transaction markers
    /// right after the last record it took (in the cursor's segment), so
    /// that a consumer that read everything has no lag behind them: the
    /// peek costs a byte compare when none follows. A marker that fails
    /// its checks is left for the next fetch to report.
    #[cold]
    #[inline(never)]
    fn step_over_markers(cursor: &mut Cursor, position: &mut u64, next_base: &mut Option<u64>) {
        loop {
            let end = cursor.seg.end();
            if cursor.pos + batch::CONTROL_LEN > end {
                return;
            }
            let b = cursor
                .seg
                .bytes(cursor.pos, cursor.pos + batch::CONTROL_LEN);
            if b[16] != batch::MAGIC_CONTROL {
                return;
            }
            match batch::check(b) {
                batch::Check::Valid(h) if h.base_offset == *position => {
                    *position = h.next_offset();
                    *next_base = Some(*position);
                    cursor.pos += batch::CONTROL_LEN;
                }
                _ => return,
            }
        }
    }

    /// Leaves the cursor at the batch at `at` (header `h`) that a fetch
    /// stopped in (`stop` is not [`Stop::End`]): when its records were
    /// taken up to the fetch's limit, keeps it in `within` with the
    /// position and, when compressed, its records decompressed (`kept`),
    /// so that the next fetch goes on from there without checking or
    /// decoding it again; returns the error of a malformed one.
    #[cold]
    #[inline(never)]
    fn stopped(
        stop: Stop,
        at: usize,
        h: &BatchHeader,
        cursor: &mut Cursor,
        next_base: &mut Option<u64>,
        within: &mut Option<Within>,
        kept: (u64, Option<Arc<Source>>),
    ) -> Option<Error> {
        cursor.pos = at;
        *next_base = Some(h.base_offset);
        match stop {
            Stop::End => None,
            Stop::Limit(records) => {
                *within = Some(Within {
                    segment: cursor.seg.base(),
                    pos: at,
                    header: *h,
                    records,
                    next: kept.0,
                    buffer: kept.1,
                });
                None
            }
            Stop::Malformed(reason) => Some(cursor.seg.corrupt(at, reason)),
        }
    }

    /// Goes on with the kept batch `w` (the cursor at it) from where the
    /// last fetch stopped, moving the cursor past it. `taken` is below
    /// `limit`. Returns how it stopped, and the records of a compressed
    /// batch, decompressed.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn take_kept<S: Sink>(
        w: Within,
        cursor: &mut Cursor,
        source: &mut Option<Arc<Source>>,
        log: &PartitionLog,
        position: &mut u64,
        taken: &mut usize,
        limit: usize,
        out: &mut S,
    ) -> (Stop, Option<Arc<Source>>) {
        let at = w.pos;
        cursor.pos = at + w.header.total_len();
        if let Some(buffer) = w.buffer {
            let records = batch::Records::resume(buffer.buffer_bytes(), w.records);
            let stop =
                Self::take_records(records, 0, &buffer, &w.header, position, taken, limit, out);
            (stop, Some(buffer))
        } else {
            let bytes = cursor.seg.bytes(at, cursor.pos);
            let src = match source {
                Some(src) if src.is_segment(&cursor.seg) => src,
                _ => source.insert(Arc::new(Source::segment(
                    log.topic(),
                    log.partition(),
                    &cursor.seg,
                ))),
            };
            let records = batch::Records::resume(bytes, w.records);
            let stop = Self::take_records(records, at, src, &w.header, position, taken, limit, out);
            (stop, None)
        }
    }

    /// Decompresses the compressed batch `bytes` (header `h`) and takes its
    /// records (`taken` is below `limit`). Returns how it stopped, and the
    /// records decompressed.
    #[cold]
    #[inline(never)]
    fn take_compressed<S: Sink>(
        log: &PartitionLog,
        bytes: &[u8],
        h: &BatchHeader,
        position: &mut u64,
        taken: &mut usize,
        limit: usize,
        out: &mut S,
    ) -> (Stop, Option<Arc<Source>>) {
        match Self::decompress(log, bytes, h) {
            Ok(src) => {
                let records = batch::Records::over_section(src.buffer_bytes(), h.record_count);
                let stop = Self::take_records(records, 0, &src, h, position, taken, limit, out);
                (stop, Some(src))
            }
            Err(reason) => (Stop::Malformed(reason), None),
        }
    }

    /// Appends the records of one batch from `position` on to `out`, until
    /// `taken` reaches `limit` (then [`Stop::Limit`] with where `records`
    /// stand, at the first record not taken, if the batch has more).
    /// `taken` is below `limit`; `base` is the position of the records'
    /// byte ranges in `src`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn take_records<S: Sink>(
        mut records: batch::Records<'_>,
        base: usize,
        src: &Arc<Source>,
        h: &BatchHeader,
        position: &mut u64,
        taken: &mut usize,
        limit: usize,
        out: &mut S,
    ) -> Stop {
        loop {
            let r = match records.next() {
                Some(Ok(r)) => r,
                Some(Err(reason)) => return Stop::Malformed(reason),
                None => return Stop::End,
            };
            let offset = h.base_offset + u64::from(r.offset_delta);
            if offset < *position {
                continue;
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
            if *taken == limit {
                let state = records.state();
                return if state.1 == 0 {
                    Stop::End
                } else {
                    Stop::Limit(state)
                };
            }
        }
    }

    /// Takes the record of the compact (one-record) batch `b`, which holds
    /// the position (checked by the caller): what
    /// [`Consumer::take_records`] does for it, without the record iterator.
    #[inline(always)]
    fn take_compact<S: Sink>(
        b: &RunBatch<'_>,
        src: &Arc<Source>,
        out: &mut S,
    ) -> std::result::Result<(), &'static str> {
        let h = &b.header;
        let r = batch::compact_record(b.bytes, b.records_at)?;
        out.push(
            src,
            Rec {
                offset: h.base_offset,
                // The record's timestamp: a compact batch stores one, the
                // append time when the topic sets it.
                timestamp: h.first_timestamp,
                key: Span::opt(b.at, r.key),
                value: Span::opt(b.at, r.value),
                headers: Span::new(b.at, r.headers),
                header_count: r.header_count,
                source: 0,
            },
        );
        Ok(())
    }

    /// The records of the compressed batch `bytes`, decompressed.
    #[cold]
    fn decompress(
        log: &PartitionLog,
        bytes: &[u8],
        h: &BatchHeader,
    ) -> std::result::Result<Arc<Source>, &'static str> {
        #[cfg(test)]
        tests::count(|c| c.decompressed += 1);
        let section = batch::records_section(bytes, h, MAX_UNCOMPRESSED_LEN)?;
        Ok(Arc::new(Source::buffer(
            log.topic(),
            log.partition(),
            section.into_owned(),
        )))
    }

    /// Fills `out` with up to `max_poll_records` messages, taking turns
    /// over the assigned partitions: each one visited takes up to its share
    /// of the poll (`max_poll_records` over the partition count, but at
    /// least [`MIN_SHARE`]), and the next poll starts at the first partition
    /// this one did not visit, or at the last one visited if the poll filled
    /// up before its share: every partition with messages gets its turn,
    /// and about the same number of messages over a round.
    pub(super) fn fetch_all<S: Sink>(&mut self, out: &mut S) -> Result<()> {
        let n = self.assigned.len();
        if n == 0 {
            return Ok(());
        }
        let max = self.config.max_poll_records;
        let share = (max / n).max(MIN_SHARE.min(max));
        let start = self.next_start % n;
        // Every partition had its turn: the next poll starts one further.
        let mut next = start + 1;
        let reset = self.config.auto_offset_reset;
        // Whether the last partition visited was given less than its share.
        let mut cut = false;
        for k in 0..n {
            let left = max - out.len();
            if left == 0 {
                // The poll is full: the partitions not visited come first
                // next time, after the last one if it was cut short.
                next = start + k - usize::from(cut);
                break;
            }
            let a = &mut self.assigned[(start + k) % n];
            if a.paused {
                continue;
            }
            cut = left < share;
            if a.log.is_reader() {
                a.log.refresh();
            }
            let res = Self::fetch(a, reset, share.min(left), left, out);
            a.park();
            self.stats.skipped += std::mem::take(&mut a.skipped);
            self.stats.offset_resets += std::mem::take(&mut a.resets);
            if let Err(e) = res {
                if out.len() == 0 {
                    self.next_start = (start + k + 1) % n;
                    return Err(e);
                }
                // Deliver what was read; the error comes back next poll,
                // which starts with this partition.
                next = start + k;
                break;
            }
        }
        self.next_start = next % n;
        Ok(())
    }
}

/// Why a fetch's run of batches ended before the published end.
enum Exit {
    /// The fetch took its limit.
    Full,
    /// Retention deleted what came before the batch at this position.
    Skipped(usize),
    /// The batch at this position does not hold the next offset.
    OutOfSequence(usize),
    /// The compact batch at this position (with this base offset) holds a
    /// malformed record (what [`Consumer::stopped`] makes of
    /// [`Stop::Malformed`], without the whole header).
    Malformed(usize, u64, &'static str),
    /// The batch at this position (with this header) stopped before its
    /// end ([`Consumer::stopped`]), with its records decompressed if it is
    /// compressed.
    Stopped(Stop, usize, BatchHeader, Option<Arc<Source>>),
}

/// Fewest messages a poll takes from a partition when it has them (unless
/// `max_poll_records` is smaller): splitting a poll into shares of a few
/// messages over many partitions would spend more on moving between them
/// than on the messages.
const MIN_SHARE: usize = 64;

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use crate::log::test_util::records;
    use crate::raw::partition_log;
    use crate::{
        BorrowedRecord, Broker, Compression, Config, ConsumerConfig, Message, ProducerConfig,
        TopicConfig,
    };

    /// What the read path did in this thread.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub(super) struct Counts {
        /// Batches checked (bounds, CRC32C) by a fetch.
        pub(super) checked: u64,
        /// Compressed batches decompressed by a fetch.
        pub(super) decompressed: u64,
    }

    thread_local! {
        static COUNTS: Cell<Counts> = Cell::new(Counts::default());
    }

    pub(super) fn count(f: impl FnOnce(&mut Counts)) {
        COUNTS.with(|c| {
            let mut v = c.get();
            f(&mut v);
            c.set(v);
        });
    }

    fn take() -> Counts {
        COUNTS.with(|c| c.replace(Counts::default()))
    }

    fn broker(dir: &std::path::Path) -> Broker {
        Broker::open(dir, Config::default().retention_check_interval_ms(0)).unwrap()
    }

    /// Appends one batch of `n` records to `topic`/`p`, values `v<offset>`.
    fn append_batch(b: &Broker, topic: &str, p: u32, n: usize) {
        let log = partition_log(b, topic, p).unwrap();
        let from = log.end_offset();
        let values: Vec<String> = (0..n).map(|i| format!("v{}", from + i as u64)).collect();
        log.append(&records(&values)).unwrap();
    }

    fn offsets(got: &[Message]) -> Vec<u64> {
        got.iter().map(Message::offset).collect()
    }

    fn check_values(got: &[Message]) {
        for m in got {
            assert_eq!(m.value().unwrap(), format!("v{}", m.offset()).as_bytes());
        }
    }

    #[test]
    fn a_batch_read_by_polls_of_100_is_checked_once() {
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic("t", TopicConfig::new(1)).unwrap();
        append_batch(&b, "t", 0, 1000);
        let mut c = b
            .consumer(ConsumerConfig::default().max_poll_records(100))
            .unwrap();
        c.assign(&[("t", 0)]).unwrap();
        take();
        for k in 0..10u64 {
            let got = c.poll(Duration::ZERO).unwrap();
            assert_eq!(offsets(&got), (k * 100..k * 100 + 100).collect::<Vec<_>>());
            check_values(&got);
        }
        assert_eq!(take().checked, 1);
        // The next batch, appended meanwhile, is checked once too.
        append_batch(&b, "t", 0, 1000);
        let mut all = Vec::new();
        for _ in 0..10 {
            all.extend(c.poll(Duration::ZERO).unwrap());
        }
        assert_eq!(offsets(&all), (1000..2000).collect::<Vec<_>>());
        check_values(&all);
        assert!(c.poll(Duration::ZERO).unwrap().is_empty());
        assert_eq!(take().checked, 1);
    }

    #[test]
    fn a_compressed_batch_is_checked_and_decompressed_once() {
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic("t", TopicConfig::new(1)).unwrap();
        let p = b
            .producer(ProducerConfig::default().compression(Compression::Lz4))
            .unwrap();
        let values: Vec<String> = (0..1000).map(|i| format!("v{i}")).collect();
        let recs: Vec<BorrowedRecord<'_>> = values
            .iter()
            .map(|v| BorrowedRecord {
                topic: "t",
                partition: Some(0),
                value: Some(v.as_bytes()),
                ..BorrowedRecord::default()
            })
            .collect();
        p.send_batch(&recs).unwrap();
        p.close().unwrap();
        let mut c = b
            .consumer(ConsumerConfig::default().max_poll_records(100))
            .unwrap();
        c.assign(&[("t", 0)]).unwrap();
        take();
        let mut all = Vec::new();
        for _ in 0..10 {
            let got = c.poll(Duration::ZERO).unwrap();
            assert_eq!(got.len(), 100);
            all.extend(got);
        }
        assert_eq!(offsets(&all), (0..1000).collect::<Vec<_>>());
        check_values(&all);
        assert_eq!(
            take(),
            Counts {
                checked: 1,
                decompressed: 1
            }
        );
    }

    #[test]
    fn a_seek_drops_the_kept_batch() {
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic("t", TopicConfig::new(1)).unwrap();
        append_batch(&b, "t", 0, 1000);
        let mut c = b
            .consumer(ConsumerConfig::default().max_poll_records(100))
            .unwrap();
        c.assign(&[("t", 0)]).unwrap();
        take();
        assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 100);
        // Back into the part already read, then forward past the kept place.
        for at in [50u64, 720] {
            c.seek("t", 0, at).unwrap();
            let got = c.poll(Duration::ZERO).unwrap();
            assert_eq!(offsets(&got), (at..at + 100).collect::<Vec<_>>());
            check_values(&got);
        }
        assert_eq!(take().checked, 3);
    }

    #[test]
    fn many_partitions_check_each_batch_once() {
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic("t", TopicConfig::new(32)).unwrap();
        for p in 0..32 {
            append_batch(&b, "t", p, 1000);
        }
        // The default `max_poll_records` (500): about 15 per partition a poll.
        let mut c = b.consumer(ConsumerConfig::default()).unwrap();
        let parts: Vec<(&str, u32)> = (0..32).map(|p| ("t", p)).collect();
        c.assign(&parts).unwrap();
        take();
        let mut next = [0u64; 32];
        loop {
            let got = c.poll(Duration::ZERO).unwrap();
            if got.is_empty() {
                break;
            }
            for m in &got {
                let p = m.partition() as usize;
                assert_eq!(m.offset(), next[p]);
                next[p] += 1;
            }
            check_values(&got);
        }
        assert_eq!(next, [1000u64; 32]);
        assert_eq!(take().checked, 32);
    }

    /// A batch whose base offset (outside the CRC) does not follow on from
    /// the batch before it, in a run of one-record batches and after a
    /// batch of many: the messages before it come in that poll, then the
    /// error at the batch, never its message; with the offset put back,
    /// the same consumer reads on.
    #[test]
    fn a_base_offset_out_of_sequence_is_an_error_at_its_batch() {
        use crate::Error;
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic("t", TopicConfig::new(1)).unwrap();
        for _ in 0..10 {
            append_batch(&b, "t", 0, 1);
        }
        append_batch(&b, "t", 0, 5);
        for _ in 0..5 {
            append_batch(&b, "t", 0, 1);
        }
        let path = tmp.path().join("topics/t/0/00000000000000000000.log");
        let bytes = std::fs::read(&path).unwrap();
        let mut starts = vec![0usize];
        while starts.len() < 16 {
            let at = *starts.last().unwrap();
            starts.push(
                at + 12 + u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize,
            );
        }
        // Batch 6 (offset 6) claiming offsets 5, 7 and 1000; batch 11
        // (offset 15, after the batch of five at 10) claiming 14 and 16.
        for (batch, delivered, wrong) in [(6usize, 6u64, [5u64, 7, 1000]), (11, 15, [14, 16, 16])] {
            let at = starts[batch];
            let good: [u8; 8] = bytes[at..at + 8].try_into().unwrap();
            for w in wrong {
                crate::log::test_util::write_at(&path, at as u64, &w.to_le_bytes());
                let mut c = b
                    .consumer(ConsumerConfig::default().max_poll_records(1000))
                    .unwrap();
                c.assign(&[("t", 0)]).unwrap();
                let got = c.poll_batch(Duration::ZERO).unwrap();
                let got: Vec<u64> = got.iter().map(|m| m.offset()).collect();
                assert_eq!(got, (0..delivered).collect::<Vec<_>>(), "{batch} as {w}");
                match c.poll_batch(Duration::ZERO) {
                    Err(Error::Corrupt {
                        position, reason, ..
                    }) => {
                        assert_eq!(position, at as u64);
                        assert!(reason.contains("out of sequence"), "{reason}");
                    }
                    other => panic!("{batch} as {w}: {other:?}"),
                }
                crate::log::test_util::write_at(&path, at as u64, &good);
                let got = c.poll(Duration::ZERO).unwrap();
                assert_eq!(offsets(&got), (delivered..20).collect::<Vec<_>>());
                check_values(&got);
            }
        }
    }

    /// A compact batch whose CRC matches but whose record is malformed (a
    /// value length past the batch's end): the messages before it, then
    /// the error at the batch; put right, the same consumer reads on.
    #[test]
    fn a_malformed_compact_record_is_an_error_at_its_batch() {
        use crate::Error;
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic("t", TopicConfig::new(1)).unwrap();
        for _ in 0..8 {
            append_batch(&b, "t", 0, 1);
        }
        let path = tmp.path().join("topics/t/0/00000000000000000000.log");
        let bytes = std::fs::read(&path).unwrap();
        let mut at = 0usize;
        for _ in 0..3 {
            at += 12 + u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        }
        let end = at + 12 + u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        // No producer fields: the record is at 26, a null key (1), then
        // the value's length (zigzag, one byte for "v3").
        assert_eq!(bytes[at + 16], crate::log::batch::MAGIC_COMPACT);
        assert_eq!((bytes[at + 26], bytes[at + 27]), (1, 4));
        let mut bad = bytes[at..end].to_vec();
        bad[27] = 40;
        let crc = ::crc32c::crc32c(&bad[16..]);
        bad[12..16].copy_from_slice(&crc.to_le_bytes());
        crate::log::test_util::write_at(&path, at as u64, &bad);
        let mut c = b
            .consumer(ConsumerConfig::default().max_poll_records(1000))
            .unwrap();
        c.assign(&[("t", 0)]).unwrap();
        let got = c.poll_batch(Duration::ZERO).unwrap();
        assert_eq!(
            got.iter().map(|m| m.offset()).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        match c.poll_batch(Duration::ZERO) {
            Err(Error::Corrupt {
                position, reason, ..
            }) => {
                assert_eq!(position, at as u64);
                assert!(reason.contains("malformed record"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        crate::log::test_util::write_at(&path, at as u64, &bytes[at..end]);
        let got = c.poll(Duration::ZERO).unwrap();
        assert_eq!(offsets(&got), (3..8).collect::<Vec<_>>());
        check_values(&got);
    }

    /// One-record (compact) batches, read as a run: keys, headers and
    /// values come through; a CRC mismatch in the middle of the run
    /// delivers the messages before it in that poll, then the error, at the
    /// damaged batch, and never the message.
    #[test]
    fn one_record_batches_in_a_run_and_damage_in_its_middle() {
        use crate::{Error, Record};
        let tmp = tempfile::tempdir().unwrap();
        let b = broker(tmp.path());
        b.create_topic("t", TopicConfig::new(1)).unwrap();
        let p = b.producer(ProducerConfig::default()).unwrap();
        for i in 0..100 {
            let mut r = Record::new("t").value(format!("v{i}"));
            if i % 3 == 0 {
                r = r.key(format!("k{i}")).header("h", format!("{i}"));
            }
            p.send(r).unwrap();
        }
        p.close().unwrap();
        let mut c = b
            .consumer(ConsumerConfig::default().max_poll_records(1000))
            .unwrap();
        c.assign(&[("t", 0)]).unwrap();
        take();
        let got = c.poll_batch(Duration::ZERO).unwrap();
        assert_eq!(got.len(), 100);
        assert_eq!(take().checked, 100);
        for (i, m) in got.iter().enumerate() {
            assert_eq!(m.offset(), i as u64);
            assert_eq!(m.value().unwrap(), format!("v{i}").as_bytes());
            if i % 3 == 0 {
                assert_eq!(m.key().unwrap(), format!("k{i}").as_bytes());
                assert_eq!(m.headers(), vec![crate::Header::new("h", format!("{i}"))]);
            } else {
                assert_eq!((m.key(), m.header_count()), (None, 0));
            }
        }
        drop(got);

        // Damage batch 40 in the file (the segment's map shows it).
        let log = partition_log(&b, "t", 0).unwrap();
        let path = tmp.path().join("topics/t/0/00000000000000000000.log");
        let bytes = std::fs::read(&path).unwrap();
        let mut at = 0usize;
        for _ in 0..40 {
            at += 12 + u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        }
        crate::log::test_util::write_at(&path, at as u64 + 30, &[bytes[at + 30] ^ 0x10]);
        c.seek("t", 0, 0).unwrap();
        let got = c.poll(Duration::ZERO).unwrap();
        assert_eq!(offsets(&got), (0..40).collect::<Vec<_>>());
        match c.poll(Duration::ZERO) {
            Err(Error::Corrupt {
                position, reason, ..
            }) => {
                assert_eq!(position, at as u64);
                assert!(reason.contains("CRC"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(log.end_offset(), 100);
    }
}
