//! The record-batch format: encode, decode, CRC32C.
//!
//! A batch is the unit of append, checksum, compression and dedup. Layout
//! (little-endian; every byte is documented in `docs/FORMAT.md`):
//!
//! ```text
//!  0  base_offset        u64   offset of the first record
//!  8  length             u32   bytes after this field; 0 marks the end of written data
//! 12  crc                u32   CRC32C of bytes [16, 12 + length)
//! 16  magic              u8    format version (1)
//! 17  attributes         u16   bits 0-2 codec, bit 3 log-append time, bit 4 transactional, bit 5 control,
//!                              bit 6 sequences chosen by the application, bit 7 named producer
//! 19  last_offset_delta  u32   offset of the last record minus base_offset
//! 23  first_timestamp    i64   ms since the epoch
//! 31  max_timestamp      i64
//! 39  producer_id        i64   -1 when not idempotent
//! 47  producer_epoch     i16
//! 49  base_sequence      i64   sequence of the first record, -1 when not idempotent
//! 57  record_count       u32
//! 61  records...   (compressed as one block when the codec is not none)
//! ..  zero padding to a multiple of 8 bytes (counted in `length`)
//! ```
//!
//! Each record (Kafka's v2 record layout, zigzag varints):
//! `length, attributes: i8, timestamp_delta: varlong, offset_delta: varint,
//! key_len (-1 = null), key, value_len (-1 = null), value, header_count,
//! headers (key_len, key utf-8, value_len, value)`.
//!
//! A batch of one uncompressed record is written in the compact layout
//! (`magic` 2, see the `compact` module): the same first 17 bytes
//! (`base_offset`, `length`, `crc`, `magic`), then a one-byte flags field,
//! one timestamp, the producer fields as varints and the record without its
//! length, attributes and deltas. Both layouts make format version 2.
//! Format version 3 adds the control batch (`magic` 3, see the `control`
//! module): a transaction marker, which takes one offset and holds no
//! record. The `magic` byte tells the layouts apart, and a reader refuses a
//! larger one ([`UNSUPPORTED_VERSION`]).

use std::ops::Range;

use crate::log::crc;

mod compact;
pub use compact::{is_compact, COMPACT_FIXED_LEN, COMPACT_MIN_LENGTH, MAGIC_COMPACT};
mod control;
pub use control::{
    encode_marker, marker, Marker, MarkerKind, ATTR_CONTROL, ATTR_TRANSACTIONAL, CONTROL_LEN,
    MAGIC_CONTROL,
};

/// The `magic` of the full layout (any number of records, any codec),
/// unchanged since format version 1.
pub const MAGIC: u8 = 1;
/// The largest `magic` this build reads (format version 3: the control
/// batch, a transaction marker).
pub const MAX_MAGIC: u8 = MAGIC_CONTROL;
/// The [`Check::Invalid`] reason of a batch whose CRC32C checks out but
/// whose `magic` is larger than [`MAX_MAGIC`]: written by a newer format
/// version, refused as [`Error::UnsupportedVersion`](crate::Error), never
/// cut as damage.
pub const UNSUPPORTED_VERSION: &str = "batch from a newer format version";
/// Attribute bit: the batch carries its append time in `max_timestamp`,
/// which is the timestamp of every record (Kafka's log-append time).
pub const ATTR_LOG_APPEND_TIME: u16 = 1 << 3;

/// Attribute bit: the records' sequences were chosen by the application
/// (a named producer's `sequence`), not assigned by the partition.
pub const ATTR_APP_SEQUENCE: u16 = 1 << 6;
/// Attribute bit: the producer has a durable name, so its sequence state is
/// kept across restarts.
pub const ATTR_NAMED_PRODUCER: u16 = 1 << 7;

/// Size of the fixed header of the full (`magic` 1) layout.
pub const HEADER_LEN: usize = 61;
/// Bytes before the CRC-covered part that are not counted by `length`.
pub const LENGTH_PREFIX: usize = 12;
/// The smallest valid value of the `length` field (of a compact batch).
pub const MIN_LENGTH: u32 = COMPACT_MIN_LENGTH;
/// The smallest valid `length` of a full (`magic` 1) batch.
pub const FULL_MIN_LENGTH: u32 = (HEADER_LEN - LENGTH_PREFIX) as u32;
/// First byte covered by the CRC.
const CRC_START: usize = 16;

const OFF_LENGTH: usize = 8;
const OFF_CRC: usize = 12;
const OFF_MAGIC: usize = 16;
const OFF_ATTRIBUTES: usize = 17;
const OFF_LAST_DELTA: usize = 19;
const OFF_FIRST_TS: usize = 23;
const OFF_MAX_TS: usize = 31;
const OFF_PRODUCER_ID: usize = 39;
const OFF_PRODUCER_EPOCH: usize = 47;
const OFF_BASE_SEQUENCE: usize = 49;
const OFF_RECORD_COUNT: usize = 57;

pub use super::compression::{Compression, CODEC_MASK};

/// A record header: a UTF-8 name and a byte value. Names may repeat.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Header {
    /// The header name.
    pub key: String,
    /// The header value.
    pub value: Vec<u8>,
}

impl Header {
    /// Makes a header.
    pub fn new(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Header {
        Header {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// Producer identity carried in a batch header (for idempotence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerFields {
    /// Producer id, -1 when none.
    pub producer_id: i64,
    /// Producer epoch, -1 when none.
    pub producer_epoch: i16,
    /// Sequence of the first record, -1 when none.
    pub base_sequence: i64,
}

impl Default for ProducerFields {
    fn default() -> Self {
        ProducerFields {
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }
}

/// One record to encode, borrowed from the caller.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// Optional key.
    pub key: Option<&'a [u8]>,
    /// Optional value (`None` is a tombstone).
    pub value: Option<&'a [u8]>,
    /// Headers, in order.
    pub headers: &'a [Header],
    /// Create time in ms since the epoch.
    pub timestamp: i64,
}

mod varint;
pub use varint::varint_len;
use varint::{get_varint, put_varint};

#[inline(always)]
fn opt_len(b: Option<&[u8]>) -> usize {
    match b {
        Some(b) => varint_len(b.len() as i64) + b.len(),
        None => 1,
    }
}

/// Size of a record's body (everything after its length varint).
#[inline(always)]
fn record_body_len(r: &RecordRef<'_>, ts_delta: i64, off_delta: i64) -> usize {
    let mut n = 1 + varint_len(ts_delta) + varint_len(off_delta);
    n += opt_len(r.key) + opt_len(r.value);
    n += varint_len(r.headers.len() as i64);
    for h in r.headers {
        n += varint_len(h.key.len() as i64) + h.key.len();
        n += varint_len(h.value.len() as i64) + h.value.len();
    }
    n
}

#[inline(always)]
fn put_opt(buf: &mut [u8], pos: usize, b: Option<&[u8]>) -> usize {
    match b {
        Some(b) => {
            let p = put_varint(buf, pos, b.len() as i64);
            buf[p..p + b.len()].copy_from_slice(b);
            p + b.len()
        }
        None => put_varint(buf, pos, -1),
    }
}

/// Writes record `r` at `pos` (its length varint, then its body); returns
/// the position after it. `buf` must hold the record where it ends.
///
/// The body's length is known once the body is written: the body goes
/// after room for the length varint of a lower bound of its size, and
/// moves up a byte in the rare case where the body reaches 64 (or 8,192)
/// bytes while the bound stays below. It never moves down, so it never
/// passes the record's end.
#[inline]
fn put_record(
    buf: &mut [u8],
    pos: usize,
    r: &RecordRef<'_>,
    ts_delta: i64,
    off_delta: i64,
) -> usize {
    // Attributes, the two deltas, key, value and header count take a byte
    // each at least, plus the key's and value's bytes.
    let least = 6 + r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len);
    let room = varint_len(least as i64);
    let start = pos + room;
    buf[start] = 0; // record attributes, unused
    let mut p = start + 1;
    p = put_varint(buf, p, ts_delta);
    p = put_varint(buf, p, off_delta);
    p = put_opt(buf, p, r.key);
    p = put_opt(buf, p, r.value);
    p = put_varint(buf, p, r.headers.len() as i64);
    for h in r.headers {
        p = put_opt(buf, p, Some(h.key.as_bytes()));
        p = put_opt(buf, p, Some(&h.value));
    }
    let body = p - start;
    debug_assert_eq!(body, record_body_len(r, ts_delta, off_delta));
    let need = varint_len(body as i64);
    if need != room {
        buf.copy_within(start..p, pos + need);
    }
    put_varint(buf, pos, body as i64);
    pos + need + body
}

/// Encoded size of a batch holding `records` (which must not be empty).
pub fn batch_len(records: &[RecordRef<'_>]) -> usize {
    let first_ts = records.first().map_or(0, |r| r.timestamp);
    let mut n = HEADER_LEN;
    for (i, r) in records.iter().enumerate() {
        let body = record_body_len(r, r.timestamp.wrapping_sub(first_ts), i as i64);
        n += varint_len(body as i64) + body;
    }
    padded(n)
}

/// Full-layout batches are padded with zeros to a multiple of [`ALIGN`]
/// bytes (as in format 1, where every batch therefore started 8-byte
/// aligned). Compact batches are not padded: in format 2 a batch may start
/// at any byte, and no reader relies on alignment.
pub const ALIGN: usize = 8;

#[inline]
fn padded(n: usize) -> usize {
    (n + ALIGN - 1) & !(ALIGN - 1)
}

/// Encoded size of the batch [`encode`] writes for `records` with
/// `producer` and `attributes`: the compact layout for one uncompressed
/// record ([`is_compact`]), the full layout ([`batch_len`]) otherwise.
#[inline]
pub fn encoded_len(records: &[RecordRef<'_>], producer: &ProducerFields, attributes: u16) -> usize {
    match records {
        [r] if is_compact(1, attributes) => compact::compact_len(compact::body_len(r), producer),
        _ => batch_len(records),
    }
}

/// Encodes `records` as one batch at the start of `buf` (at least
/// [`encoded_len`] bytes), in the compact layout when [`is_compact`] says
/// so, else as [`encode_batch`] does. Returns the number of bytes written.
#[inline]
pub fn encode(
    buf: &mut [u8],
    base_offset: u64,
    records: &[RecordRef<'_>],
    producer: ProducerFields,
    attributes: u16,
) -> usize {
    match records {
        [r] if is_compact(1, attributes) => {
            compact::encode(buf, base_offset, r, &producer, attributes)
        }
        _ => encode_batch(buf, base_offset, records, producer, attributes),
    }
}

/// Encodes `records` as one full-layout batch whose records have the
/// offset deltas `offset_deltas` (strictly increasing, one per record) and
/// whose last offset is `base_offset + last_offset_delta` (at least the
/// last record's): a batch with offset gaps, as compaction or transaction
/// markers leave them. `buf` must be at least [`batch_len`] plus 5 bytes
/// per record long. Returns the bytes written.
///
/// # Panics
/// When the deltas are not strictly increasing, do not match the records,
/// or pass `last_offset_delta`.
pub fn encode_batch_with_gaps(
    buf: &mut [u8],
    base_offset: u64,
    records: &[RecordRef<'_>],
    offset_deltas: &[u32],
    last_offset_delta: u32,
    producer: ProducerFields,
    attributes: u16,
) -> usize {
    assert_eq!(
        records.len(),
        offset_deltas.len(),
        "one offset delta per record"
    );
    assert!(
        offset_deltas.windows(2).all(|w| w[0] < w[1]),
        "deltas must increase"
    );
    assert!(offset_deltas.last().is_none_or(|&d| d <= last_offset_delta));
    let first_ts = records.first().map_or(0, |r| r.timestamp);
    let mut max_ts = first_ts;
    let mut p = HEADER_LEN;
    for (r, &d) in records.iter().zip(offset_deltas) {
        max_ts = max_ts.max(r.timestamp);
        p = put_record(buf, p, r, r.timestamp.wrapping_sub(first_ts), i64::from(d));
    }
    let end = padded(p);
    buf[p..end].fill(0);
    let h = BatchHeader {
        base_offset,
        length: (end - LENGTH_PREFIX) as u32,
        crc: 0,
        magic: MAGIC,
        attributes,
        last_offset_delta,
        first_timestamp: first_ts,
        max_timestamp: max_ts,
        producer,
        record_count: records.len() as u32,
    };
    h.write(&mut buf[..HEADER_LEN]);
    let crc = crc::crc32c(&buf[CRC_START..end]);
    buf[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    end
}

/// Encodes `records` as one batch in the full (`magic` 1) layout at the
/// start of `buf`, which must be at least [`batch_len`] bytes long. Returns
/// the number of bytes written.
pub fn encode_batch(
    buf: &mut [u8],
    base_offset: u64,
    records: &[RecordRef<'_>],
    producer: ProducerFields,
    attributes: u16,
) -> usize {
    let first_ts = records.first().map_or(0, |r| r.timestamp);
    let mut max_ts = first_ts;
    let mut p = HEADER_LEN;
    for (i, r) in records.iter().enumerate() {
        max_ts = max_ts.max(r.timestamp);
        p = put_record(buf, p, r, r.timestamp.wrapping_sub(first_ts), i as i64);
    }
    let end = padded(p);
    buf[p..end].fill(0);
    let p = end;
    let h = BatchHeader {
        base_offset,
        length: (p - LENGTH_PREFIX) as u32,
        crc: 0,
        magic: MAGIC,
        attributes,
        last_offset_delta: records.len().saturating_sub(1) as u32,
        first_timestamp: first_ts,
        max_timestamp: max_ts,
        producer,
        record_count: records.len() as u32,
    };
    h.write(&mut buf[..HEADER_LEN]);
    let crc = crc::crc32c(&buf[CRC_START..p]);
    buf[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    p
}

/// Records encoded ahead of their batch (the producer's accumulator): the
/// records section of a future batch plus what its header needs.
#[derive(Debug, Clone, Default)]
pub struct EncodedRecords {
    /// The records, back to back, offset deltas counted from 0.
    pub bytes: Vec<u8>,
    /// Number of records.
    pub count: u32,
    /// Timestamp of the first record.
    pub first_timestamp: i64,
    /// Largest timestamp.
    pub max_timestamp: i64,
}

impl EncodedRecords {
    /// Appends one record.
    pub fn push(&mut self, r: &RecordRef<'_>) {
        if self.count == 0 {
            self.first_timestamp = r.timestamp;
            self.max_timestamp = r.timestamp;
        }
        let ts_delta = r.timestamp.wrapping_sub(self.first_timestamp);
        let off_delta = i64::from(self.count);
        let body = record_body_len(r, ts_delta, off_delta);
        let start = self.bytes.len();
        self.bytes.resize(start + varint_len(body as i64) + body, 0);
        let end = put_record(&mut self.bytes, start, r, ts_delta, off_delta);
        debug_assert_eq!(end, self.bytes.len());
        self.count += 1;
        self.max_timestamp = self.max_timestamp.max(r.timestamp);
    }

    /// Bytes one more record would add.
    pub fn record_len(&self, r: &RecordRef<'_>) -> usize {
        let first = if self.count == 0 {
            r.timestamp
        } else {
            self.first_timestamp
        };
        let body = record_body_len(r, r.timestamp.wrapping_sub(first), i64::from(self.count));
        varint_len(body as i64) + body
    }

    /// Size of the batch these records make without compression.
    pub fn batch_len(&self) -> usize {
        section_batch_len(self.bytes.len())
    }

    /// Empties the buffer, keeping its allocation.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.count = 0;
    }
}

/// Encoded size of record `r` as the record at `index` of a batch whose
/// first timestamp is `first_timestamp`.
pub fn encoded_record_len(r: &RecordRef<'_>, first_timestamp: i64, index: usize) -> usize {
    let body = record_body_len(r, r.timestamp.wrapping_sub(first_timestamp), index as i64);
    varint_len(body as i64) + body
}

/// Size of a batch whose records section (plain records or a framed
/// compressed block) is `section_len` bytes.
#[inline]
pub fn section_batch_len(section_len: usize) -> usize {
    padded(HEADER_LEN + section_len)
}

/// The header fields of a batch built from a prepared records section.
#[derive(Debug, Clone, Copy)]
pub struct SectionInfo {
    /// Number of records.
    pub count: u32,
    /// Timestamp of the first record.
    pub first_timestamp: i64,
    /// Largest timestamp.
    pub max_timestamp: i64,
}

/// Writes a batch whose records section is already encoded (and perhaps
/// compressed, as `attributes` says) at the start of `buf`, which must be
/// [`section_batch_len`] bytes long at least. Returns the bytes written.
pub fn write_section_batch(
    buf: &mut [u8],
    base_offset: u64,
    section: &[u8],
    info: SectionInfo,
    producer: ProducerFields,
    attributes: u16,
) -> usize {
    let end = HEADER_LEN + section.len();
    buf[HEADER_LEN..end].copy_from_slice(section);
    let p = padded(end);
    buf[end..p].fill(0);
    let h = BatchHeader {
        base_offset,
        length: (p - LENGTH_PREFIX) as u32,
        crc: 0,
        magic: MAGIC,
        attributes,
        last_offset_delta: info.count.saturating_sub(1),
        first_timestamp: info.first_timestamp,
        max_timestamp: info.max_timestamp,
        producer,
        record_count: info.count,
    };
    h.write(&mut buf[..HEADER_LEN]);
    let crc = crc::crc32c(&buf[CRC_START..p]);
    buf[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    p
}

/// The record body of a one-record, uncompressed records section (as
/// [`EncodedRecords`] makes it) in the compact layout: the record without
/// its length, attributes and (zero) deltas. `None` when the section is not
/// one such record.
fn compact_body(section: &[u8]) -> Option<&[u8]> {
    let mut p = 0;
    let len = usize::try_from(get_varint(section, &mut p)?).ok()?;
    if p.checked_add(len)? != section.len() || section.get(p + 1..p + 3)? != [0, 0] {
        return None;
    }
    Some(&section[p + 3..])
}

/// Size of the batch [`write_section`] makes of a prepared records section
/// of `count` records with `producer` and `attributes`.
#[inline]
pub fn section_encoded_len(
    section: &[u8],
    count: u32,
    producer: &ProducerFields,
    attributes: u16,
) -> usize {
    match compact_body(section).filter(|_| is_compact(count as usize, attributes)) {
        Some(body) => compact::compact_len(body.len(), producer),
        None => section_batch_len(section.len()),
    }
}

/// Writes a batch of a prepared records section at the start of `buf`
/// (at least [`section_encoded_len`] bytes): in the compact layout when it
/// holds one uncompressed record, else as [`write_section_batch`] does.
/// Returns the bytes written.
pub fn write_section(
    buf: &mut [u8],
    base_offset: u64,
    section: &[u8],
    info: SectionInfo,
    producer: ProducerFields,
    attributes: u16,
) -> usize {
    match compact_body(section).filter(|_| is_compact(info.count as usize, attributes)) {
        Some(body) => {
            let at = compact::record_at(&producer);
            let end = at + body.len();
            buf[at..end].copy_from_slice(body);
            compact::finish(
                &mut buf[..end],
                base_offset,
                &producer,
                attributes,
                info.first_timestamp,
            );
            end
        }
        None => write_section_batch(buf, base_offset, section, info, producer, attributes),
    }
}

/// Writes the append time `ts` into the encoded batch `buf` (its
/// `max_timestamp`, or the timestamp of a compact batch) and updates the
/// CRC. The batch must have been encoded with [`ATTR_LOG_APPEND_TIME`] set.
pub fn stamp_log_append_time(buf: &mut [u8], ts: i64) {
    if buf[OFF_MAGIC] == MAGIC_COMPACT {
        compact::stamp(buf, ts);
        return;
    }
    buf[OFF_MAX_TS..OFF_MAX_TS + 8].copy_from_slice(&ts.to_le_bytes());
    let crc = crc::crc32c(&buf[CRC_START..]);
    buf[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

// ---------------------------------------------------------------- header

/// The decoded fixed header of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: u64,
    /// Bytes after the length field.
    pub length: u32,
    /// Stored CRC32C.
    pub crc: u32,
    /// Format version.
    pub magic: u8,
    /// Attribute bits.
    pub attributes: u16,
    /// Offset of the last record minus `base_offset`.
    pub last_offset_delta: u32,
    /// Timestamp of the first record.
    pub first_timestamp: i64,
    /// Largest record timestamp.
    pub max_timestamp: i64,
    /// Producer identity.
    pub producer: ProducerFields,
    /// Number of records.
    pub record_count: u32,
}

/// The fields every layout starts with, read as they are (nothing
/// checked): a prepared transaction part's first batch is told by its
/// zero `length` and its CRC32C field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prefix {
    /// Offset of the first record.
    pub base_offset: u64,
    /// Bytes after the `length` field.
    pub length: u32,
    /// The CRC32C field.
    pub crc: u32,
}

impl Prefix {
    /// The prefix at the start of `b`; `None` when `b` is shorter.
    pub(crate) fn read(b: &[u8]) -> Option<Prefix> {
        let b = b.get(..CRC_START)?;
        Some(Prefix {
            base_offset: u64::from_le_bytes(rd(b, 0)),
            length: u32::from_le_bytes(rd(b, OFF_LENGTH)),
            crc: u32::from_le_bytes(rd(b, OFF_CRC)),
        })
    }
}

#[inline]
fn rd<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

impl BatchHeader {
    /// Total bytes the batch occupies on disk.
    #[inline]
    pub fn total_len(&self) -> usize {
        LENGTH_PREFIX + self.length as usize
    }

    /// The timestamp of a record with `timestamp_delta`: the batch's append
    /// time on a log-append-time batch, else its create time.
    #[inline]
    pub fn record_timestamp(&self, timestamp_delta: i64) -> i64 {
        if self.attributes & ATTR_LOG_APPEND_TIME != 0 {
            self.max_timestamp
        } else {
            self.first_timestamp.wrapping_add(timestamp_delta)
        }
    }

    /// Offset of the last record.
    #[inline]
    pub fn last_offset(&self) -> u64 {
        self.base_offset + u64::from(self.last_offset_delta)
    }

    /// Offset after the last record.
    #[inline]
    pub fn next_offset(&self) -> u64 {
        self.last_offset() + 1
    }

    /// Whether the batch is a control batch (a transaction marker): it
    /// takes one offset and holds no record.
    #[inline]
    pub fn is_control(&self) -> bool {
        self.magic == MAGIC_CONTROL
    }

    /// Whether the batch was written by a transaction (its data or its
    /// marker).
    #[inline]
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// The batch's codec (attribute bits 0-2); `None` for a codec number
    /// this build does not know.
    #[inline]
    pub fn compression(&self) -> Option<Compression> {
        Compression::from_bits(self.attributes & CODEC_MASK)
    }

    /// Position of the records section in the batch: after the header,
    /// whose size depends on the layout.
    #[inline]
    pub fn records_at(&self) -> usize {
        if self.magic == MAGIC_COMPACT {
            compact::record_at(&self.producer)
        } else if self.magic == MAGIC_CONTROL {
            CONTROL_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Decodes a header from the start of `b` (no CRC check): the compact
    /// layout when `magic` says so, else the full one (whatever the
    /// `magic`). `None` if `b` is too short.
    pub fn parse(b: &[u8]) -> Option<BatchHeader> {
        match b.get(OFF_MAGIC) {
            Some(&MAGIC_COMPACT) => return compact::parse(b).map(|(h, _)| h),
            Some(&MAGIC_CONTROL) => return control::parse(b),
            _ => {}
        }
        if b.len() < HEADER_LEN {
            return None;
        }
        Some(BatchHeader {
            base_offset: u64::from_le_bytes(rd(b, 0)),
            length: u32::from_le_bytes(rd(b, OFF_LENGTH)),
            crc: u32::from_le_bytes(rd(b, OFF_CRC)),
            magic: b[OFF_MAGIC],
            attributes: u16::from_le_bytes(rd(b, OFF_ATTRIBUTES)),
            last_offset_delta: u32::from_le_bytes(rd(b, OFF_LAST_DELTA)),
            first_timestamp: i64::from_le_bytes(rd(b, OFF_FIRST_TS)),
            max_timestamp: i64::from_le_bytes(rd(b, OFF_MAX_TS)),
            producer: ProducerFields {
                producer_id: i64::from_le_bytes(rd(b, OFF_PRODUCER_ID)),
                producer_epoch: i16::from_le_bytes(rd(b, OFF_PRODUCER_EPOCH)),
                base_sequence: i64::from_le_bytes(rd(b, OFF_BASE_SEQUENCE)),
            },
            record_count: u32::from_le_bytes(rd(b, OFF_RECORD_COUNT)),
        })
    }

    fn write(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.base_offset.to_le_bytes());
        b[OFF_LENGTH..OFF_LENGTH + 4].copy_from_slice(&self.length.to_le_bytes());
        b[OFF_CRC..OFF_CRC + 4].copy_from_slice(&self.crc.to_le_bytes());
        b[OFF_MAGIC] = self.magic;
        b[OFF_ATTRIBUTES..OFF_ATTRIBUTES + 2].copy_from_slice(&self.attributes.to_le_bytes());
        b[OFF_LAST_DELTA..OFF_LAST_DELTA + 4]
            .copy_from_slice(&self.last_offset_delta.to_le_bytes());
        b[OFF_FIRST_TS..OFF_FIRST_TS + 8].copy_from_slice(&self.first_timestamp.to_le_bytes());
        b[OFF_MAX_TS..OFF_MAX_TS + 8].copy_from_slice(&self.max_timestamp.to_le_bytes());
        b[OFF_PRODUCER_ID..OFF_PRODUCER_ID + 8]
            .copy_from_slice(&self.producer.producer_id.to_le_bytes());
        b[OFF_PRODUCER_EPOCH..OFF_PRODUCER_EPOCH + 2]
            .copy_from_slice(&self.producer.producer_epoch.to_le_bytes());
        b[OFF_BASE_SEQUENCE..OFF_BASE_SEQUENCE + 8]
            .copy_from_slice(&self.producer.base_sequence.to_le_bytes());
        b[OFF_RECORD_COUNT..OFF_RECORD_COUNT + 4].copy_from_slice(&self.record_count.to_le_bytes());
    }
}

/// What was found at a position of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// A whole, valid batch.
    Valid(BatchHeader),
    /// A zero length field: the end of written data.
    End,
    /// Something that is not a valid batch, and why.
    Invalid(&'static str),
}

/// Checks the batch starting at the beginning of `b` (the bytes up to the end
/// of the readable region): bounds, version, record count and CRC32C.
pub fn check(b: &[u8]) -> Check {
    if b.len() < LENGTH_PREFIX {
        return if b.iter().all(|&x| x == 0) {
            Check::End
        } else {
            Check::Invalid("truncated header")
        };
    }
    let length = u32::from_le_bytes(rd(b, OFF_LENGTH));
    if length == 0 {
        return Check::End;
    }
    if length < MIN_LENGTH {
        return Check::Invalid("length smaller than a batch header");
    }
    let total = LENGTH_PREFIX + length as usize;
    if total > b.len() {
        return Check::Invalid("length runs past the end of the segment");
    }
    // The first 17 bytes are the same in every layout and version: the CRC
    // is checked before the `magic` is trusted.
    let stored_crc = u32::from_le_bytes(rd(b, OFF_CRC));
    if crc::crc32c(&b[CRC_START..total]) != stored_crc {
        return Check::Invalid("CRC32C mismatch");
    }
    match b[OFF_MAGIC] {
        MAGIC => {}
        MAGIC_COMPACT => {
            return match compact::check(&b[..total]) {
                Ok(h) => Check::Valid(h),
                Err(reason) => Check::Invalid(reason),
            }
        }
        MAGIC_CONTROL => {
            return match control::check(&b[..total]) {
                Ok(h) => Check::Valid(h),
                Err(reason) => Check::Invalid(reason),
            }
        }
        m if m > MAX_MAGIC => return Check::Invalid(UNSUPPORTED_VERSION),
        _ => return Check::Invalid("unknown format version"),
    }
    if length < FULL_MIN_LENGTH {
        return Check::Invalid("length smaller than a batch header");
    }
    let Some(h) = BatchHeader::parse(b) else {
        return Check::Invalid("truncated header");
    };
    // Offsets may skip (`last_offset_delta` beyond the records), never
    // fall short.
    if h.record_count == 0 || h.last_offset_delta < h.record_count - 1 {
        return Check::Invalid("record count does not match the offset delta");
    }
    if h.attributes & CODEC_MASK != 0 {
        if let Err(reason) = check_compressed(&b[HEADER_LEN..total], &h) {
            return Check::Invalid(reason);
        }
    }
    Check::Valid(h)
}

/// The compact batch at the start of `b` (the bytes up to the end of the
/// readable region) when it is one and [`check`] finds it valid, with the
/// position of its record; `None` for anything else, which [`check`] then
/// classifies. The read path's case for one-record batches: the same checks
/// (bounds, CRC32C, flags, header encoding), decoded in the caller's loop.
#[inline(always)]
pub(crate) fn check_compact(b: &[u8]) -> Option<(BatchHeader, usize)> {
    let length = u32::from_le_bytes(*b.get(OFF_LENGTH..OFF_LENGTH + 4)?.first_chunk()?);
    if length < MIN_LENGTH {
        return None;
    }
    let batch = b.get(..LENGTH_PREFIX + length as usize)?;
    if batch[OFF_MAGIC] != MAGIC_COMPACT
        || crc::crc32c(&batch[CRC_START..]) != u32::from_le_bytes(rd(batch, OFF_CRC))
    {
        return None;
    }
    compact::check_at(batch).ok()
}

/// The checks of a compressed batch's records section (`section`: the bytes
/// after the header, padding included): a known codec, and a framed block
/// that lies inside the batch and is followed by padding only.
///
/// The uncompressed size is not checked against
/// [`MAX_UNCOMPRESSED_LEN`](super::compression::MAX_UNCOMPRESSED_LEN) here:
/// that limit is enforced when the records are decompressed. A batch with a
/// valid CRC was written on purpose, and recovery truncates what fails this
/// check; a reader limit must not destroy data.
#[cold]
fn check_compressed(section: &[u8], h: &BatchHeader) -> Result<(), &'static str> {
    if h.compression().is_none() {
        return Err("unsupported compression codec");
    }
    let (_, data) = super::compression::parse_framing(section)?;
    if section.len() - super::compression::FRAMING_LEN - data.len() >= ALIGN {
        return Err("compressed block followed by more than padding");
    }
    Ok(())
}

/// The records section of a checked batch (`batch`: its bytes from the
/// header on), uncompressed: borrowed from `batch` for an uncompressed batch
/// (from the end of the header to the end of the batch, padding included;
/// the record decoder never reads past the last record), decompressed
/// otherwise, refusing more than `limit` uncompressed bytes before
/// allocating (pass
/// [`MAX_UNCOMPRESSED_LEN`](super::compression::MAX_UNCOMPRESSED_LEN)).
///
/// Iterate over it with [`Records::over_section`]; ranges are relative to
/// the section. An `Err` (damaged compressed data, unknown codec) is a
/// corrupt batch.
pub fn records_section<'a>(
    batch: &'a [u8],
    h: &BatchHeader,
    limit: usize,
) -> Result<std::borrow::Cow<'a, [u8]>, &'static str> {
    let end = h.total_len().min(batch.len());
    let section = batch.get(h.records_at()..end).unwrap_or_default();
    match h.attributes & CODEC_MASK {
        0 => Ok(std::borrow::Cow::Borrowed(section)),
        _ => decompress_section(section, h, limit).map(std::borrow::Cow::Owned),
    }
}

#[cold]
fn decompress_section(
    section: &[u8],
    h: &BatchHeader,
    limit: usize,
) -> Result<Vec<u8>, &'static str> {
    let codec = h.compression().ok_or("unsupported compression codec")?;
    super::compression::decompress_records(codec, section, limit)
}

// ---------------------------------------------------------------- records

/// Positions of one decoded record inside its batch's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView {
    /// Offset relative to the batch's base offset.
    pub offset_delta: u32,
    /// Timestamp relative to the batch's first timestamp.
    pub timestamp_delta: i64,
    /// Byte range of the key, if any.
    pub key: Option<Range<usize>>,
    /// Byte range of the value, if any.
    pub value: Option<Range<usize>>,
    /// Byte range of the encoded headers.
    pub headers: Range<usize>,
    /// Number of headers.
    pub header_count: u32,
}

/// Iterates over the records of one checked batch, bounds-checking every
/// length. Yields `Err` once (and then stops) on a malformed record.
pub struct Records<'a> {
    buf: &'a [u8],
    /// Position of the next record in `buf`; [`COMPRESSED`] for a compressed
    /// batch given to [`Records::new`].
    pos: usize,
    left: u32,
    /// The record is in the compact layout (no length, attributes or
    /// deltas; it ends where `buf` ends).
    compact: bool,
}

/// `Records::pos` of a compressed batch given to [`Records::new`] (with an
/// empty `buf`, so decoding fails at once without moving `pos`).
const COMPRESSED: usize = usize::MAX;

impl<'a> Records<'a> {
    /// Records of the uncompressed batch `buf` (the whole batch, header
    /// included), read in place; ranges are relative to `buf`. For a
    /// compressed batch this yields one `Err`: read those through
    /// [`records_section`] and [`Records::over_section`].
    #[inline]
    pub fn new(buf: &'a [u8], header: &BatchHeader) -> Records<'a> {
        if header.attributes & CODEC_MASK != 0 {
            return Records {
                buf: &[],
                pos: COMPRESSED,
                left: 1,
                compact: false,
            };
        }
        Records {
            buf: &buf[..header.total_len().min(buf.len())],
            pos: header.records_at(),
            left: header.record_count,
            compact: header.magic == MAGIC_COMPACT,
        }
    }

    /// The records of a records section (as returned by
    /// [`records_section`]) of the batch whose header is `header`, in
    /// either layout; ranges are relative to `section`.
    #[inline]
    pub fn in_section(section: &'a [u8], header: &BatchHeader) -> Records<'a> {
        Records {
            buf: section,
            pos: 0,
            left: header.record_count,
            compact: header.magic == MAGIC_COMPACT,
        }
    }

    /// The first `count` records of a records section (as returned by
    /// [`records_section`]) of a full-layout batch; ranges are relative to
    /// `section`. [`Records::in_section`] reads either layout.
    #[inline]
    pub fn over_section(section: &'a [u8], count: u32) -> Records<'a> {
        Records {
            buf: section,
            pos: 0,
            left: count,
            compact: false,
        }
    }

    /// Where the iteration stands: the position of the next record in the
    /// bytes it reads, and how many records are left. [`Records::resume`]
    /// picks up from there.
    #[inline]
    pub fn state(&self) -> (usize, u32) {
        (self.pos, self.left)
    }

    /// The records of `buf` from `state` on: `buf` is what was given to
    /// [`Records::new`] (for an uncompressed batch, cut to its
    /// [`total_len`](BatchHeader::total_len)) or [`Records::over_section`],
    /// and `state` a [`Records::state`] of an iteration over it. Every
    /// length is checked as usual: a wrong state yields an `Err`, never a
    /// panic.
    #[inline]
    pub fn resume(buf: &'a [u8], state: (usize, u32)) -> Records<'a> {
        Records {
            buf,
            pos: state.0,
            left: state.1,
            compact: false,
        }
    }
}

/// `None`: the buffer ended; `Some(None)`: the field is null.
#[allow(clippy::option_option)]
#[inline(always)]
fn get_opt(buf: &[u8], pos: &mut usize) -> Option<Option<Range<usize>>> {
    let n = get_varint(buf, pos)?;
    if n < 0 {
        return (n == -1).then_some(None);
    }
    let start = *pos;
    let end = start.checked_add(usize::try_from(n).ok()?)?;
    if end > buf.len() {
        return None;
    }
    *pos = end;
    Some(Some(start..end))
}

#[inline(always)]
fn parse_record(buf: &[u8], pos: &mut usize) -> Option<RecordView> {
    let len = usize::try_from(get_varint(buf, pos)?).ok()?;
    let end = pos.checked_add(len)?;
    if end > buf.len() {
        return None;
    }
    let rec = &buf[..end];
    let mut p = *pos + 1; // attributes
    let timestamp_delta = get_varint(rec, &mut p)?;
    let offset_delta = u32::try_from(get_varint(rec, &mut p)?).ok()?;
    let r = parse_body(rec, p, offset_delta, timestamp_delta)?;
    *pos = end;
    Some(r)
}

/// The record of a compact batch: its body from `*pos` to the end of `buf`.
#[inline(always)]
fn parse_compact_record(buf: &[u8], pos: &mut usize) -> Option<RecordView> {
    let r = parse_body(buf, *pos, 0, 0)?;
    *pos = buf.len();
    Some(r)
}

/// The fields of a record after its deltas, from `p` to exactly the end of
/// `rec`.
#[inline(always)]
fn parse_body(
    rec: &[u8],
    mut p: usize,
    offset_delta: u32,
    timestamp_delta: i64,
) -> Option<RecordView> {
    let end = rec.len();
    let key = get_opt(rec, &mut p)?;
    let value = get_opt(rec, &mut p)?;
    let header_count = u32::try_from(get_varint(rec, &mut p)?).ok()?;
    let hstart = p;
    if header_count != 0 {
        p = skip_headers(rec, p, header_count)?;
    }
    if p != end {
        return None;
    }
    Some(RecordView {
        offset_delta,
        timestamp_delta,
        key,
        value,
        headers: hstart..end,
        header_count,
    })
}

/// Checks `count` encoded headers from `p` on (names must be UTF-8) and
/// returns the position after them. Out of line: most records have none.
#[inline(never)]
fn skip_headers(rec: &[u8], mut p: usize, count: u32) -> Option<usize> {
    for _ in 0..count {
        let k = get_opt(rec, &mut p)??;
        std::str::from_utf8(&rec[k]).ok()?;
        get_opt(rec, &mut p)?;
    }
    Some(p)
}

impl Iterator for Records<'_> {
    type Item = Result<RecordView, &'static str>;

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let r = if self.compact {
            parse_compact_record(self.buf, &mut self.pos)
        } else {
            parse_record(self.buf, &mut self.pos)
        };
        if let Some(r) = r {
            Some(Ok(r))
        } else {
            self.left = 0;
            Some(Err(if self.pos == COMPRESSED {
                "compressed batch read without decompressing it"
            } else {
                "malformed record"
            }))
        }
    }
}

/// The record of the compact batch `batch` (exactly its bytes, checked),
/// whose record starts at `at` (from [`check_compact`], or
/// [`BatchHeader::records_at`]); ranges are relative to `batch`. What
/// [`Records::new`] yields for it, without the iterator.
#[inline(always)]
pub(crate) fn compact_record(batch: &[u8], at: usize) -> Result<RecordView, &'static str> {
    parse_body(batch, at, 0, 0).ok_or("malformed record")
}

/// Appends `headers` to `out` as a record stores them (each name and value
/// a length varint and bytes), for [`decode_headers`] to read back.
#[cfg(feature = "kafka")]
pub(crate) fn encode_headers(out: &mut Vec<u8>, headers: &[Header]) {
    for h in headers {
        for b in [h.key.as_bytes(), &h.value[..]] {
            let at = out.len();
            out.resize(at + varint_len(b.len() as i64) + b.len(), 0);
            put_opt(out, at, Some(b));
        }
    }
}

/// Decodes `count` headers from their encoded bytes (as found by
/// [`RecordView::headers`]). Malformed bytes yield the headers read so far.
pub fn decode_headers(buf: &[u8], count: u32) -> Vec<Header> {
    let mut out = Vec::with_capacity(count.min(64) as usize);
    let mut p = 0;
    for _ in 0..count {
        let Some(Some(k)) = get_opt(buf, &mut p) else {
            break;
        };
        let Some(v) = get_opt(buf, &mut p) else { break };
        let Ok(key) = std::str::from_utf8(&buf[k]) else {
            break;
        };
        out.push(Header {
            key: key.to_owned(),
            value: v.map(|v| buf[v].to_vec()).unwrap_or_default(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_whose_length_takes_a_byte_more_than_their_bound_encode_exactly() {
        // Values around the sizes where a body's length varint grows
        // (64 and 8,192 bytes of body), with and without keys and headers
        // and with deltas of several bytes: each batch is exactly
        // `batch_len` long, checks, and reads back the same records.
        let data = vec![7u8; 9000];
        let headers = [Header {
            key: "h".into(),
            value: vec![1; 40],
        }];
        let mut sizes: Vec<usize> = (0..140).collect();
        sizes.extend(8100..8200);
        for len in sizes {
            for (key, hs, step) in [
                (None, &headers[..0], 0i64),
                (Some(&data[..3]), &headers[..], 1_000_000),
            ] {
                let recs: Vec<RecordRef<'_>> = (0..3)
                    .map(|i| RecordRef {
                        key,
                        value: Some(&data[..len]),
                        headers: hs,
                        timestamp: 1_700_000_000_000 + i * step,
                    })
                    .collect();
                let mut buf = vec![0u8; batch_len(&recs)];
                let n = encode_batch(&mut buf, 5, &recs, ProducerFields::default(), 0);
                assert_eq!(n, buf.len(), "value {len}");
                let Check::Valid(h) = check(&buf) else {
                    panic!("value {len}: batch does not check");
                };
                let got: Vec<RecordView> = Records::new(&buf, &h)
                    .collect::<Result<_, _>>()
                    .expect("records");
                assert_eq!(got.len(), 3);
                for (i, v) in got.iter().enumerate() {
                    assert_eq!(v.value.clone().map(|r| r.len()), Some(len));
                    assert_eq!(v.key.clone().map(|r| r.len()), key.map(<[u8]>::len));
                    assert_eq!(v.offset_delta, i as u32);
                    assert_eq!(v.timestamp_delta, i as i64 * step);
                    assert_eq!(v.header_count as usize, hs.len());
                }
            }
        }
    }

    #[test]
    fn zero_length_is_end_and_short_length_is_invalid() {
        assert_eq!(check(&[0u8; 100]), Check::End);
        let mut b = [0u8; 100];
        b[8] = 3;
        assert!(matches!(check(&b), Check::Invalid(_)));
    }
}
