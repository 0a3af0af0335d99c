//! The append path of a partition log: a batch checked (size, producer
//! sequence), laid out and written at the end of the active segment (through
//! the map, or with `pwritev` for a large one, see [`gather`]), then
//! published to readers.
//!
//! [`gather`]: super::gather

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::batch::{
    self, ProducerFields, RecordRef, SectionInfo, ATTR_APP_SEQUENCE, ATTR_NAMED_PRODUCER,
};
use super::{gather, now_ms, PartitionLog, Writer};
use crate::dedup::{Idempotence, SequenceCheck};
use crate::error::{Error, Result};
use crate::sync::lock;

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
    /// Bytes the batch takes on disk (0 for a duplicate).
    pub bytes: usize,
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

    /// The exact size of the batch once the producer fields and attributes
    /// are known (a one-record batch is written compact).
    fn encoded_len(&self, producer: &ProducerFields, attributes: u16) -> usize {
        match self {
            // Several records keep the full layout, whose size the caller
            // computed: no second pass over them.
            BatchSource::Records(r, len) if r.len() > 1 => *len,
            BatchSource::Records(r, _) => batch::encoded_len(r, producer, attributes),
            BatchSource::Section { bytes, info, .. } => {
                batch::section_encoded_len(bytes, info.count, producer, attributes)
            }
        }
    }

    fn max_timestamp(&self) -> i64 {
        match self {
            BatchSource::Records(r, _) => r.iter().map(|r| r.timestamp).max().unwrap_or(i64::MIN),
            BatchSource::Section { info, .. } => info.max_timestamp,
        }
    }
}

/// Batches at least this long are written with `pwritev` when flushed at
/// once (`acks=all`) or made mostly of large values ([`writes_by_file`]).
/// Measured with `bench/python_rates.py` (1000 x 1 KiB per call,
/// `acks=all`) and `core/benches/sizes.rs`: see docs/decisions.md.
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
        BatchSource::Records(records, _) => batch::encode(buf, base, records, producer, attributes),
        BatchSource::Section { bytes, info, .. } => {
            batch::write_section(buf, base, bytes, info, producer, attributes)
        }
    };
    if let Some(t) = append_time {
        batch::stamp_log_append_time(&mut buf[..written], t);
    }
    written
}

/// Whether a batch of `len` bytes is written to the file with `pwritev`
/// ([`gather`]) rather than encoded into the map: when it is at least
/// [`FILE_WRITE_MIN`] long and either flushed at once (`acks=all`) or made
/// of large values (or a prepared section) for half its bytes or more,
/// which are then written from where they are (see docs/decisions.md).
#[inline]
fn writes_by_file(src: &BatchSource<'_>, len: usize, flush_next: bool) -> bool {
    len >= FILE_WRITE_MIN && (flush_next || gather::in_place_bytes(src) * 2 >= len)
}

impl PartitionLog {
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
    /// then written to the file with `pwritev` rather than through the map,
    /// as is one of that size made mostly of large values whatever the
    /// acks ([`writes_by_file`]).
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
            return Err(self.closed_error());
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(self.poisoned_error());
        }
        // Until the next clean close, a crash must be followed by a check:
        // the directory's session is on disk before anything is written.
        self.config.unclean.mark()?;
        // Shared mode, several writers: the partition's append lock, and
        // what other processes appended since.
        let shared = self.lock_for_append(&mut w)?;
        if let Some(idem) = idem {
            let table = self.producer_table(&mut w, idem.named, false)?;
            match table.check(idem, count as u32, &self.topic, self.partition)? {
                SequenceCheck::Duplicate(original) => {
                    return Ok(Appended {
                        base_offset: original.unwrap_or(UNKNOWN_OFFSET),
                        duplicate: true,
                        log_append_time: None,
                        bytes: 0,
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
        let len = src.encoded_len(&producer, attributes);
        // A large batch is written to the file from where its bytes are
        // (see `writes_by_file`), in the multi-record layout (a compact
        // one-record batch saves nothing worth a copy at that size); its
        // layout fixes its length.
        let mut gathered = writes_by_file(&src, len, flush_next)
            .then(|| gather::lay_out(&src, w.next_offset, producer, attributes, append_time));
        let len = gathered.as_ref().map_or(len, gather::Gathered::len);
        if w.active.end() + len > w.active.capacity() {
            self.roll(&mut w)?;
        }
        // A full disk fails here, with nothing written.
        w.active.ensure_room(len)?;
        let base = w.next_offset;
        let pos = w.active.end();
        if let Some(g) = &shared {
            g.set_in_progress((pos + len) as u64);
        }
        let Writer {
            active,
            active_writer,
            ..
        } = &mut *w;
        let written = if let Some(g) = &mut gathered {
            // Published below only once the whole batch is in the file:
            // readers never see part of it.
            let res = g.write_with(|parts| active.write_vectored_at_end(active_writer, parts));
            if let Err(e) = res {
                // Part of the batch may be in the file (a short write on a
                // full disk): zeroed again through the map (its blocks are
                // allocated), so that no later append leaves it behind as
                // garbage for recovery to find after a clean close.
                active.reserve(active_writer, len).fill(0);
                return Err(e);
            }
            g.len()
        } else {
            let buf = active.reserve(active_writer, len);
            let tail = buf.as_ptr() as usize + len;
            let written = encode(buf, base, &src, producer, attributes, append_time);
            self.hints.tail.store(tail, Ordering::Relaxed);
            self.hints
                .segment
                .store(Arc::as_ptr(active) as usize, Ordering::Relaxed);
            written
        };
        let by_file = gathered.is_some();
        drop(gathered);
        debug_assert_eq!(written, len);
        let interval = self.config.index_interval_bytes;
        if w.indexes_stale && pos > 0 && pos.saturating_sub(w.last_index_pos) >= interval
            || pos < w.last_index_pos
        {
            // Shared mode: other processes' entries first (their file
            // length read again), then decide.
            let Writer {
                active,
                active_writer,
                ..
            } = &mut *w;
            w.last_index_pos = active.adopt_indexes(active_writer);
            w.indexes_stale = false;
        }
        let index = (pos > 0 && pos - w.last_index_pos >= interval).then_some((base, w.max_ts));
        if index.is_some() {
            w.last_index_pos = pos;
        }
        let Writer {
            active,
            active_writer,
            ..
        } = &mut *w;
        active.commit(active_writer, written, index, max_ts);
        w.max_ts = w.max_ts.max(max_ts);
        w.next_offset = base + count as u64;
        self.end_offset.store(w.next_offset, Ordering::Release);
        let published = self.publish_tail(w.next_offset, &w.active, Some(written));
        // The append lock's release runs the fence `announce` needs.
        let fenced = shared.is_some();
        drop(shared);
        if w.active.growth_due() {
            self.grow_ahead(&mut w);
        }
        if let Some(idem) = idem {
            w.producers
                .record(idem, producer.base_sequence, count as u32, base);
        }
        if self.config.prefault {
            if by_file {
                // Pages written with `pwritev` need no faulting in: doing it
                // ahead would only zero pages about to be overwritten.
                self.prepare_ahead(&mut w);
            } else {
                self.prefault_ahead(&mut w);
            }
        }
        drop(w);
        self.announce(published, fenced);
        Ok(Appended {
            base_offset: base,
            duplicate: false,
            log_append_time: append_time,
            bytes: written,
        })
    }
}
