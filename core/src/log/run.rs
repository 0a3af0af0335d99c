//! Reading a run of batches per call.
//!
//! [`PartitionLog::read_run`] hands a reader every batch from its cursor on,
//! each checked (bounds, format, CRC32C) before it is handed out, in one
//! loop: the segment's published length is read once per run and the
//! cursor's fields are kept in registers, where [`PartitionLog::next_batch`]
//! reads both, and builds and returns the batch's header through two layers
//! of results, once per batch. One-record batches in the compact layout are
//! checked and decoded inline ([`batch::check_compact`]); anything else
//! goes through [`batch::check`], so a damaged batch is reported exactly as
//! [`PartitionLog::next_batch`] reports it, after every batch before it was
//! handed out.
//!
//! A run ends where the published data ends (read when the run reached the
//! segment: a batch published later is read by the next run, never a part
//! of one), at the end of a sealed segment (it goes on in the next one),
//! or when the reader says so.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::batch::{self, BatchHeader, Check};
use super::{Cursor, PartitionLog, Segment, READ_AHEAD};
use crate::error::Result;

/// One checked batch of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunBatch<'a> {
    /// Its position in its segment.
    pub at: usize,
    /// Its header.
    pub header: BatchHeader,
    /// Its bytes (exactly the batch).
    pub bytes: &'a [u8],
    /// Position of its records section in `bytes`
    /// ([`BatchHeader::records_at`]).
    pub records_at: usize,
}

impl PartitionLog {
    /// Calls `f` with each batch from the cursor on, in order, moving the
    /// cursor past each one before the call (as [`PartitionLog::next_batch`]
    /// does), and on to the next segment at the end of a sealed one.
    /// Returns `Ok(Some)` with what `f` broke with, `Ok(None)` when nothing
    /// more is published, and the error of an invalid batch, with the
    /// cursor left at it, once `f` had every batch before it.
    #[inline(always)]
    pub(crate) fn read_run<B>(
        &self,
        c: &mut Cursor,
        mut f: impl FnMut(&Arc<Segment>, &RunBatch<'_>) -> ControlFlow<B>,
    ) -> Result<Option<B>> {
        loop {
            // Sealed first: the length read after it is then the final one.
            let sealed = c.seg.is_sealed();
            let end = c.seg.end();
            {
                let Cursor { seg, pos, ahead } = &mut *c;
                let bytes = seg.bytes(0, end);
                while *pos < end {
                    let at = *pos;
                    if at + READ_AHEAD / 2 > *ahead {
                        read_ahead(seg, at, ahead, end);
                    }
                    let b = &bytes[at..];
                    let (header, records_at) = match batch::check_compact(b) {
                        Some(x) => x,
                        None => match batch::check(b) {
                            Check::Valid(h) => (h, h.records_at()),
                            Check::End => break,
                            Check::Invalid(reason) => return Err(seg.invalid(at, reason)),
                        },
                    };
                    let next = at + header.total_len();
                    *pos = next;
                    let run = RunBatch {
                        at,
                        header,
                        bytes: &bytes[at..next],
                        records_at,
                    };
                    if let ControlFlow::Break(b) = f(seg, &run) {
                        return Ok(Some(b));
                    }
                }
            }
            if !sealed || !self.next_segment(c) {
                return Ok(None);
            }
        }
    }
}

/// [`Cursor::read_ahead`] on the cursor's fields, with the published length
/// already read.
#[cold]
#[inline(never)]
fn read_ahead(seg: &Segment, pos: usize, ahead: &mut usize, end: usize) {
    let from = (*ahead).max(pos);
    let to = (from + READ_AHEAD).min(end);
    if to >= from + READ_AHEAD / 8 {
        seg.populate_read(from, to);
        *ahead = to;
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::error::Error;
    use crate::log::batch::{ProducerFields, RecordRef};
    use crate::log::test_util::write_at;
    use crate::{Broker, Config, TopicConfig};

    /// Where a batch was read: segment base, position, header.
    type Seen = (u64, usize, BatchHeader);

    fn open(dir: &Path) -> (Broker, Arc<PartitionLog>) {
        let mq = Broker::open(dir, Config::default().prefault(false)).unwrap();
        mq.create_topic("t", TopicConfig::new(1).segment_bytes(4096))
            .unwrap();
        let log = mq.inner().topic("t").unwrap().partition(0).unwrap();
        (mq, log)
    }

    /// Appends `n` batches: mostly one-record (compact) ones, some of
    /// three records and some with producer fields.
    fn fill(log: &PartitionLog, n: usize) {
        for i in 0..n {
            let value = format!("value-{i:04}");
            let count = if i % 7 == 3 { 3 } else { 1 };
            let recs: Vec<RecordRef<'_>> = (0..count)
                .map(|_| RecordRef {
                    key: (i % 2 == 0).then_some(&b"k"[..]),
                    value: Some(value.as_bytes()),
                    headers: &[],
                    timestamp: 1_700_000_000_000 + i as i64,
                })
                .collect();
            let producer = if i % 5 == 4 {
                ProducerFields {
                    producer_id: 1000 + i as i64,
                    producer_epoch: 0,
                    base_sequence: 0,
                }
            } else {
                ProducerFields::default()
            };
            log.append(&recs, producer).unwrap();
        }
    }

    /// Every batch from `from` by `next_batch`, and the error that ended
    /// the reading, if any.
    fn by_next_batch(log: &PartitionLog, from: u64) -> (Vec<Seen>, Option<String>) {
        let mut c = log.cursor(from).unwrap();
        let mut seen = Vec::new();
        loop {
            match log.next_batch(&mut c) {
                Ok(Some((at, h))) => seen.push((c.seg.base(), at, h)),
                Ok(None) => return (seen, None),
                Err(e) => return (seen, Some(e.to_string())),
            }
        }
    }

    /// The same by runs, each broken off after `per_run` batches (and
    /// started again from the cursor), checking that each batch's bytes
    /// are the ones at its position and the cursor is past it.
    fn by_runs(log: &PartitionLog, from: u64, per_run: usize) -> (Vec<Seen>, Option<String>) {
        let mut c = log.cursor(from).unwrap();
        let mut seen = Vec::new();
        loop {
            let mut k = 0;
            let got = log.read_run(&mut c, |seg, b| {
                assert_eq!(b.bytes, seg.bytes(b.at, b.at + b.header.total_len()));
                assert_eq!(b.records_at, b.header.records_at());
                seen.push((seg.base(), b.at, b.header));
                k += 1;
                if k == per_run {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            match got {
                Ok(Some(())) => {
                    let &(base, at, h) = seen.last().unwrap();
                    assert_eq!((c.seg.base(), c.pos), (base, at + h.total_len()));
                }
                Ok(None) => return (seen, None),
                Err(e) => return (seen, Some(e.to_string())),
            }
        }
    }

    fn same_as_next_batch(log: &PartitionLog, from: u64) -> (Vec<Seen>, Option<String>) {
        let want = by_next_batch(log, from);
        for per_run in [1, 3, usize::MAX] {
            assert_eq!(by_runs(log, from, per_run), want, "runs of {per_run}");
        }
        want
    }

    #[test]
    fn runs_read_what_next_batch_reads_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let (_mq, log) = open(dir.path());
        fill(&log, 400);
        assert!(log.segments.read().unwrap().len() > 5);
        let (seen, err) = same_as_next_batch(&log, 0);
        assert_eq!(err, None);
        assert_eq!(seen.len(), 400);
        let mut next = 0;
        for (_, _, h) in &seen {
            assert_eq!(h.base_offset, next);
            next = h.next_offset();
        }
        assert_eq!(next, log.end_offset());
        assert!(seen
            .iter()
            .any(|(_, _, h)| h.magic == batch::MAGIC_COMPACT && h.producer.producer_id >= 0));
        // From the middle of a segment.
        let (seen, _) = same_as_next_batch(&log, 201);
        assert!(seen[0].2.base_offset <= 201 && seen[0].2.last_offset() >= 201);
    }

    /// Damage in the middle of a run: the batches before it are handed
    /// out, then the error that `next_batch` gives, with the cursor at the
    /// damaged batch; every byte of two batches and one past a segment's
    /// end, with a few damaging values.
    #[test]
    fn damage_in_a_run_is_reported_after_the_batches_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let (_mq, log) = open(dir.path());
        fill(&log, 400);
        let (clean, _) = by_next_batch(&log, 0);
        let first_base = clean[0].0;
        let in_first: Vec<&Seen> = clean.iter().filter(|s| s.0 == first_base).collect();
        let second_base = clean.iter().find(|s| s.0 != first_base).unwrap().0;
        let path = log.segments.read().unwrap()[0].path().to_owned();
        let original = std::fs::read(&path).unwrap();
        // A compact batch in the middle, one with producer fields, and the
        // last batch of the segment.
        let targets = [
            *in_first[5],
            **in_first
                .iter()
                .find(|s| s.2.magic == batch::MAGIC_COMPACT && s.2.producer.producer_id >= 0)
                .unwrap(),
            **in_first.last().unwrap(),
        ];
        let mut errors = 0;
        for (_, at, h) in targets {
            let end = at + h.total_len();
            for (i, &byte) in original.iter().enumerate().take(end).skip(at) {
                for v in [0x01u8, 0x80, 0xff] {
                    write_at(&path, i as u64, &[byte ^ v]);
                    let (seen, err) = same_as_next_batch(&log, 0);
                    write_at(&path, i as u64, &[byte]);
                    let before = clean.iter().take_while(|s| s.1 != at || s.0 != first_base);
                    assert!(seen.iter().zip(before).all(|(a, b)| a == b), "byte {i}");
                    if let Some(e) = err {
                        errors += 1;
                        assert!(e.contains(&format!("at byte {at}:")), "byte {i}: {e}");
                    }
                }
            }
            // A zero length: the end of the data, in the middle of a
            // sealed segment (reading goes on in the next one).
            write_at(&path, at as u64 + 8, &[0; 4]);
            let (seen, err) = same_as_next_batch(&log, 0);
            write_at(&path, at as u64 + 8, &original[at + 8..at + 12]);
            assert_eq!(err, None);
            assert!(seen.iter().all(|s| s.0 != first_base || s.1 < at));
        }
        assert!(errors > 0);
        // A CRC mismatch: exactly the batches before it, then the error,
        // with the cursor left at the damaged batch.
        let (_, at, _) = targets[0];
        write_at(&path, (at + 20) as u64, &[original[at + 20] ^ 0x5a]);
        let mut c = log.cursor(0).unwrap();
        let mut got = Vec::new();
        let res = log.read_run(&mut c, |seg, b| {
            got.push((seg.base(), b.at));
            ControlFlow::<()>::Continue(())
        });
        match res {
            Err(Error::Corrupt {
                position, reason, ..
            }) => {
                assert_eq!(position, at as u64);
                assert!(reason.contains("CRC"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(got.len(), 5);
        assert_eq!(c.pos, at);
        assert_ne!(second_base, first_base);
    }

    /// A run reads up to the published length read when it reached the
    /// segment; what is published meanwhile is read by the next run.
    #[test]
    fn batches_published_during_a_run_are_read_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let mq = Broker::open(dir.path(), Config::default().prefault(false)).unwrap();
        mq.create_topic("t", TopicConfig::new(1)).unwrap();
        let log = mq.inner().topic("t").unwrap().partition(0).unwrap();
        fill(&log, 10);
        let mut c = log.cursor(0).unwrap();
        let mut first = Vec::new();
        let res = log.read_run(&mut c, |_, b| {
            if first.is_empty() {
                fill(&log, 5);
            }
            first.push(b.header.base_offset);
            ControlFlow::<()>::Continue(())
        });
        assert!(matches!(res, Ok(None)));
        assert_eq!(first.len(), 10);
        let mut second = Vec::new();
        log.read_run(&mut c, |_, b| {
            second.push(b.header.base_offset);
            ControlFlow::<()>::Continue(())
        })
        .unwrap();
        assert_eq!(second.len(), 5);
        assert_eq!(second[0], log.end_offset() - 5 - 2); // one batch of three
        drop(mq);
    }

    /// A reader following a writer (that rolls segments) never sees a torn
    /// or skipped batch.
    #[test]
    fn a_tailing_run_sees_only_whole_batches() {
        let dir = tempfile::tempdir().unwrap();
        let (_mq, log) = open(dir.path());
        const N: usize = 3000;
        let mut c = log.cursor(0).unwrap();
        let mut next = 0u64;
        let mut batches = 0;
        std::thread::scope(|s| {
            s.spawn(|| fill(&log, N));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while batches < N && std::time::Instant::now() < deadline {
                log.read_run(&mut c, |_, b| {
                    assert_eq!(b.header.base_offset, next);
                    let rec = batch::Records::new(b.bytes, &b.header);
                    assert_eq!(rec.count(), b.header.record_count as usize);
                    next = b.header.next_offset();
                    batches += 1;
                    ControlFlow::<()>::Continue(())
                })
                .unwrap();
            }
        });
        assert_eq!(batches, N);
        assert_eq!(next, log.end_offset());
    }
}
