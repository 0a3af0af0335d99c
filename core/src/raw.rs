//! Low-level access to one partition's log, below the producer and
//! consumer: for benchmarks and tools. Not a stable API.

use std::ops::ControlFlow;
use std::sync::Arc;

use crate::broker::Broker;
use crate::error::Result;
use crate::log::batch::{self, BatchHeader, ProducerFields, RecordRef};
use crate::log::compression::MAX_UNCOMPRESSED_LEN;
use crate::log::{PartitionLog, Segment};

/// A handle on one partition's commit log.
#[derive(Debug, Clone)]
pub struct RawLog(Arc<PartitionLog>);

/// The log of `topic`/`partition`.
pub fn partition_log(broker: &Broker, topic: &str, partition: u32) -> Result<RawLog> {
    Ok(RawLog(broker.inner().topic(topic)?.partition(partition)?))
}

impl RawLog {
    /// Appends `records` as one batch; returns its base offset.
    #[inline]
    pub fn append(&self, records: &[RecordRef<'_>]) -> Result<u64> {
        Ok(self
            .0
            .append(records, ProducerFields::default())?
            .base_offset)
    }

    /// Allocates the active segment's file to its full size and faults
    /// in its pages now, in this thread.
    pub fn prefault(&self) {
        self.0.prefault_active();
    }

    /// Flushes everything appended so far to disk.
    pub fn flush(&self) -> Result<()> {
        self.0.flush()
    }

    /// Next offset to be written.
    pub fn end_offset(&self) -> u64 {
        self.0.end_offset()
    }

    /// Reads every record from `from` to the end, checking each batch's
    /// CRC (and decompressing compressed batches), and calls
    /// `f(offset, key, value)`; returns the record count.
    pub fn scan(
        &self,
        from: u64,
        mut f: impl FnMut(u64, Option<&[u8]>, Option<&[u8]>),
    ) -> Result<u64> {
        let mut c = self.0.cursor(from)?;
        let mut n = 0;
        let stopped = self.0.read_run(&mut c, |seg, b| {
            let (at, h, bytes) = (b.at, &b.header, b.bytes);
            if h.magic == batch::MAGIC_COMPACT {
                // One record, at the batch's base offset.
                match batch::compact_record(bytes, b.records_at) {
                    Ok(r) if h.base_offset >= from => {
                        f(
                            h.base_offset,
                            r.key.map(|k| &bytes[k]),
                            r.value.map(|v| &bytes[v]),
                        );
                        n += 1;
                    }
                    Ok(_) => {}
                    Err(reason) => return ControlFlow::Break(seg.corrupt(at, reason)),
                }
                return ControlFlow::Continue(());
            }
            let got = if h.attributes & batch::CODEC_MASK != 0 {
                scan_compressed(seg, at, bytes, h, from, &mut f)
            } else {
                scan_records(seg, at, bytes, h, from, &mut f)
            };
            match got {
                Ok(k) => {
                    n += k;
                    ControlFlow::Continue(())
                }
                Err(e) => ControlFlow::Break(e),
            }
        })?;
        match stopped {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }
}

/// [`RawLog::scan`] of one uncompressed full-layout batch (`bytes`, at `at`
/// in `seg`).
fn scan_records(
    seg: &Segment,
    at: usize,
    bytes: &[u8],
    h: &BatchHeader,
    from: u64,
    f: &mut impl FnMut(u64, Option<&[u8]>, Option<&[u8]>),
) -> Result<u64> {
    deliver(seg, at, batch::Records::new(bytes, h), bytes, h, from, f)
}

/// Hands `f` each record of `records` (whose keys and values index into
/// `buf`) at or after `from`, and counts them; a malformed record is the
/// batch's corruption.
fn deliver(
    seg: &Segment,
    at: usize,
    records: batch::Records<'_>,
    buf: &[u8],
    h: &BatchHeader,
    from: u64,
    f: &mut impl FnMut(u64, Option<&[u8]>, Option<&[u8]>),
) -> Result<u64> {
    let mut n = 0;
    for r in records {
        let r = r.map_err(|reason| seg.corrupt(at, reason))?;
        let offset = h.base_offset + u64::from(r.offset_delta);
        if offset >= from {
            f(offset, r.key.map(|k| &buf[k]), r.value.map(|v| &buf[v]));
            n += 1;
        }
    }
    Ok(n)
}

/// [`RawLog::scan`] of one compressed batch (`bytes`, at `at` in `seg`).
#[cold]
#[inline(never)]
fn scan_compressed(
    seg: &Segment,
    at: usize,
    bytes: &[u8],
    h: &BatchHeader,
    from: u64,
    f: &mut impl FnMut(u64, Option<&[u8]>, Option<&[u8]>),
) -> Result<u64> {
    let section = batch::records_section(bytes, h, MAX_UNCOMPRESSED_LEN)
        .map_err(|reason| seg.corrupt(at, reason))?;
    let records = batch::Records::over_section(&section, h.record_count);
    deliver(seg, at, records, &section, h, from, f)
}
