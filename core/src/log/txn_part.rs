//! A transaction's part in one partition: its data batches and its commit
//! marker, written under the partition's writer lock, published together.
//!
//! [`PartitionLog::prepare_transaction`] takes the writer lock and writes
//! the data batches (transactional attribute) above the published end,
//! leaving room for the marker; nothing is visible yet. The transaction's
//! coordinator then writes its commit record (the commit point) and calls
//! [`PreparedPart::publish`], which writes the commit marker and publishes
//! data and marker at once. Dropped unpublished, the part is zeroed again:
//! the log is as before.
//!
//! Until the commit point the first data batch's `length` field is 0 (its
//! value is kept in the commit record and written by `publish`), so that a
//! crash between the two leaves data that every reader takes for the end of
//! the log (a reader in shared mode, a build that knows nothing of
//! transactions, the command-line tools). Recovery puts the length back
//! when the commit record exists (and the coordinator writes the marker)
//! and cuts the data otherwise (`recover.rs`).
//!
//! In shared mode the part also holds the partition's append lock from
//! its prepare to its publish. A process that takes the lock over from a
//! committer that died after the commit point finds the part unpublished
//! and finishes it from the commit record ([`PartitionLog::restore_committed`]);
//! before the commit point, what the committer left is cleared as any dead
//! writer's is.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::batch::{self, Check, Marker, MarkerKind, ProducerFields, RecordRef};
use super::{PartitionLog, Writer};
use crate::error::{Error, Result};
use crate::shared::AppendGuard;
use crate::sync::lock;

/// A transaction's data written in one partition, not yet published; the
/// partition's writer lock is held until it is published or dropped.
pub(crate) struct PreparedPart<'a> {
    log: &'a PartitionLog,
    w: MutexGuard<'a, Writer>,
    /// Where the part starts in the active segment.
    pos: usize,
    /// Bytes of data batches (the marker follows them).
    data_len: usize,
    /// The first offset of the data, and the marker's.
    first: u64,
    marker_offset: u64,
    max_ts: i64,
    producer: ProducerFields,
    /// The first batch's length field, written at the commit.
    first_len: u32,
    /// The first batch's CRC32C field.
    first_crc: u32,
    published: bool,
    /// Shared mode: the partition's append lock (let go after `w`).
    shared: Option<AppendGuard<'a>>,
}

/// Splits `records` into runs whose batches fit in `max` bytes each.
fn split(records: &[RecordRef<'_>], max: usize) -> Result<Vec<std::ops::Range<usize>>> {
    let mut runs = Vec::new();
    let mut start = 0;
    while start < records.len() {
        let mut end = start + 1;
        if batch::batch_len(&records[start..end]) > max {
            return Err(Error::MessageTooLarge {
                size: batch::batch_len(&records[start..end]),
                max,
            });
        }
        while end < records.len() && batch::batch_len(&records[start..=end]) <= max {
            end += 1;
        }
        runs.push(start..end);
        start = end;
    }
    Ok(runs)
}

impl PartitionLog {
    /// Writes `records` as the data of a transaction by `producer` (id and
    /// epoch; no sequence) above the published end, with room for its
    /// marker after them, holding the writer lock (see the module doc).
    ///
    /// # Errors
    /// [`Error::TransactionTooLarge`] when the part does not fit in one
    /// segment; [`Error::MessageTooLarge`] for a record larger than a
    /// batch may be; closed, poisoned, a full disk, I/O errors. Nothing is
    /// written then.
    pub(crate) fn prepare_transaction(
        &self,
        records: &[RecordRef<'_>],
        producer: ProducerFields,
    ) -> Result<PreparedPart<'_>> {
        let runs = split(records, self.config.max_batch())?;
        let attributes = batch::ATTR_TRANSACTIONAL;
        let data_len: usize = runs
            .iter()
            .map(|r| batch::encoded_len(&records[r.clone()], &producer, attributes))
            .sum();
        let total = data_len + batch::CONTROL_LEN;
        let mut w = lock(&self.writer);
        if w.closed {
            return Err(self.closed_error());
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(self.poisoned_error());
        }
        if total > w.active.capacity() {
            return Err(Error::TransactionTooLarge {
                size: total,
                max: w.active.capacity(),
            });
        }
        self.config.unclean.mark()?;
        // Shared mode: the append lock, and what others appended since.
        let shared = self.lock_for_append(&mut w)?;
        if w.active.end() + total > w.active.capacity() {
            self.roll(&mut w)?;
        }
        w.active.ensure_room(total)?;
        let first = w.next_offset;
        let pos = w.active.end();
        if let Some(g) = &shared {
            // A process taking the lock over after this one died knows
            // what to finish or clear.
            g.set_in_progress((pos + total) as u64);
        }
        let mut max_ts = i64::MIN;
        let mut next = first;
        let (first_len, first_crc);
        {
            let Writer {
                active,
                active_writer,
                ..
            } = &mut *w;
            let buf = active.reserve(active_writer, total);
            let mut at = 0;
            for r in runs {
                let part = &records[r];
                max_ts = part.iter().fold(max_ts, |m, r| m.max(r.timestamp));
                at += batch::encode(&mut buf[at..], next, part, producer, attributes);
                next += part.len() as u64;
            }
            debug_assert_eq!(at, data_len);
            // The first batch's length stays 0 until the commit point: to
            // every reader (and a recovery that does not know of the
            // commit) the data ends here.
            let prefix = batch::Prefix::read(buf).expect("a whole batch was encoded");
            (first_len, first_crc) = (prefix.length, prefix.crc);
            buf[8..12].fill(0);
        }
        Ok(PreparedPart {
            log: self,
            w,
            pos,
            data_len,
            first,
            marker_offset: next,
            max_ts,
            producer,
            first_len,
            first_crc,
            published: false,
            shared,
        })
    }
}

impl PreparedPart<'_> {
    /// The offset of the part's first record.
    pub(crate) fn first_offset(&self) -> u64 {
        self.first
    }

    /// The length field of its first batch (0 in the log until the commit:
    /// see [`PreparedPart::publish`]).
    pub(crate) fn first_len(&self) -> u32 {
        self.first_len
    }

    /// The CRC32C field of its first batch.
    pub(crate) fn first_crc(&self) -> u32 {
        self.first_crc
    }

    /// The offset its commit marker will take.
    pub(crate) fn marker_offset(&self) -> u64 {
        self.marker_offset
    }

    /// The partition's log.
    pub(crate) fn log(&self) -> &PartitionLog {
        self.log
    }

    /// Makes the data durable (for `acks=all`, before the commit record):
    /// everything published before it, in every segment (a segment sealed
    /// by a roll may still hold unsynced records and markers: damage there
    /// after a power loss would cut every later segment), the active
    /// segment's directory entry, then the unpublished data.
    ///
    /// When every sealed segment is flushed (the common case), one `msync`
    /// of the active segment covers both its unflushed published bytes and
    /// the data.
    pub(crate) fn sync(&self) -> Result<()> {
        let end = self.pos + self.data_len;
        if self.log.sealed_flushed() {
            return self.w.active.flush_through(end);
        }
        self.log.flush_to(self.first)?;
        self.w.active.flush()?;
        self.w.active.sync_unpublished(self.pos, end)
    }

    /// Writes the commit marker of transaction `transaction` and publishes
    /// data and marker together; lets go of the writer lock.
    pub(crate) fn publish(mut self, transaction: u64, timestamp: i64) {
        let marker = Marker {
            kind: MarkerKind::Commit,
            timestamp,
            producer_id: self.producer.producer_id,
            producer_epoch: self.producer.producer_epoch,
            transaction,
        };
        let total = self.data_len + batch::CONTROL_LEN;
        let interval = self.log.config.index_interval_bytes;
        let w = &mut *self.w;
        {
            let buf = w.active.reserve(&mut w.active_writer, total);
            buf[8..12].copy_from_slice(&self.first_len.to_le_bytes());
            batch::encode_marker(&mut buf[self.data_len..], self.marker_offset, &marker);
        }
        crate::faults::commit_step(crate::faults::CommitStep::PartMarked);
        let index = (self.pos > 0 && self.pos - w.last_index_pos >= interval)
            .then_some((self.first, w.max_ts));
        if index.is_some() {
            w.last_index_pos = self.pos;
        }
        let max_ts = self.max_ts.max(timestamp);
        w.active.commit(&mut w.active_writer, total, index, max_ts);
        w.max_ts = w.max_ts.max(max_ts);
        w.next_offset = self.marker_offset + 1;
        self.log.end_offset.store(w.next_offset, Ordering::Release);
        let published = self
            .log
            .publish_tail(w.next_offset, &w.active, Some(batch::CONTROL_LEN));
        if w.active.growth_due() {
            self.log.grow_ahead(w);
        }
        self.published = true;
        let log = self.log;
        // The append lock's release (dropping the part) runs the fence
        // `announce` needs.
        let fenced = self.shared.is_some();
        drop(self);
        log.announce(published, fenced);
    }
}

impl Drop for PreparedPart<'_> {
    fn drop(&mut self) {
        if !self.published {
            // Abandoned before its commit point: the log is as before.
            let total = self.data_len + batch::CONTROL_LEN;
            let w = &mut *self.w;
            w.active.reserve(&mut w.active_writer, total).fill(0);
        }
    }
}

impl PartitionLog {
    /// Whether every sealed segment is flushed (what `flush_segments`
    /// would find to flush is in the active segment only).
    fn sealed_flushed(&self) -> bool {
        let segs = crate::sync::read(&self.segments);
        segs.len() < 2 || segs[segs.len() - 2].is_flushed()
    }

    /// Appends the commit marker of an earlier transaction whose data ends
    /// the log (recovery of a commit a crash interrupted after its commit
    /// point): only when the log's end is `marker_offset`. Returns whether
    /// it was written.
    pub(crate) fn append_commit_marker(&self, marker_offset: u64, marker: &Marker) -> Result<bool> {
        let mut w = lock(&self.writer);
        if w.closed {
            return Err(self.closed_error());
        }
        self.config.unclean.mark()?;
        // Shared mode: taking the lock over from the committer, if it died
        // holding it, finishes its part (then the marker is there).
        let shared = self.lock_for_append(&mut w)?;
        if w.next_offset != marker_offset {
            return Ok(false);
        }
        if w.active.end() + batch::CONTROL_LEN > w.active.capacity() {
            self.roll(&mut w)?;
        }
        w.active.ensure_room(batch::CONTROL_LEN)?;
        let Writer {
            active,
            active_writer,
            ..
        } = &mut *w;
        let buf = active.reserve(active_writer, batch::CONTROL_LEN);
        batch::encode_marker(buf, marker_offset, marker);
        active.commit(active_writer, batch::CONTROL_LEN, None, marker.timestamp);
        w.next_offset = marker_offset + 1;
        self.end_offset.store(w.next_offset, Ordering::Release);
        let published = self.publish_tail(w.next_offset, &w.active, Some(batch::CONTROL_LEN));
        let fenced = shared.is_some();
        drop(shared);
        drop(w);
        self.announce(published, fenced);
        Ok(true)
    }

    /// Shared mode, the append lock taken over from a dead holder: when
    /// what it left past the published end (up to byte `dirty_to` of the
    /// active segment) is a transaction's part whose commit record is in
    /// the transaction log of data directory `root` (the holder died after
    /// the commit point), puts its first batch's length back, writes its
    /// commit marker and takes both in as appended (the caller publishes
    /// them). Returns whether it did; anything else is left for the caller
    /// to clear.
    pub(super) fn restore_committed(&self, w: &mut Writer, root: &Path, dirty_to: usize) -> bool {
        let end = w.active.end();
        let first = w.next_offset;
        if dirty_to <= end {
            return false;
        }
        let Writer {
            active,
            active_writer,
            ..
        } = &mut *w;
        let buf = active.reserve(active_writer, dirty_to - end);
        // A prepared part leaves a first batch with length 0, and a
        // transactional one; a committer that died in the middle of its
        // publish may have put the length back (and written the marker)
        // without publishing either.
        let Some(prefix) = batch::Prefix::read(buf).filter(|p| {
            p.base_offset == first
                && (p.length == 0
                    || batch::BatchHeader::parse(buf).is_some_and(|h| h.is_transactional()))
        }) else {
            return false;
        };
        let record = match crate::txn::find_commit(root, &self.topic, self.partition, first) {
            Ok(Some(r)) => r,
            Ok(None) => return false,
            Err(e) => {
                ::log::warn!(
                    "{}/{}: reading the transaction log: {e}",
                    self.topic,
                    self.partition
                );
                return false;
            }
        };
        let Some(part) = record
            .parts
            .iter()
            .find(|p| p.topic == self.topic.as_ref() && p.partition == self.partition)
        else {
            return false;
        };
        if part.first_crc.is_some_and(|c| c != prefix.crc)
            || (prefix.length != 0 && prefix.length != part.first_len)
        {
            return false; // another part at this offset (the topic made again)
        }
        buf[8..12].copy_from_slice(&part.first_len.to_le_bytes());
        let (mut at, mut next, mut max_ts) = (0, first, i64::MIN);
        while next < part.marker {
            match batch::check(&buf[at..]) {
                Check::Valid(h)
                    if h.base_offset == next
                        && h.is_transactional()
                        && h.producer.producer_id == record.producer_id =>
                {
                    at += h.total_len();
                    next = h.next_offset();
                    max_ts = max_ts.max(h.max_timestamp);
                }
                _ => break,
            }
        }
        if next != part.marker || at + batch::CONTROL_LEN > buf.len() {
            // Not the part the record names (or damaged): cleared.
            buf[8..12].fill(0);
            return false;
        }
        batch::encode_marker(&mut buf[at..], part.marker, &record.marker());
        let max_ts = max_ts.max(record.timestamp);
        active.commit(active_writer, at + batch::CONTROL_LEN, None, max_ts);
        w.max_ts = w.max_ts.max(max_ts);
        w.next_offset = part.marker + 1;
        ::log::warn!(
            "{}/{}: finished transaction {} ({:?}) at offsets {first}..{}: its committer died \
             after the commit point",
            self.topic,
            self.partition,
            record.txn,
            record.transactional_id,
            part.marker
        );
        true
    }
}
