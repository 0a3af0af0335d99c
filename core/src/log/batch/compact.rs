//! The compact batch layout (`magic` 2): one uncompressed record, with the
//! producer fields as varints and no per-record framing.
//!
//! ```text
//!  0  base_offset      u64   offset of the record (as in every layout)
//!  8  length           u32   bytes after this field (as in every layout)
//! 12  crc              u32   CRC32C of bytes [16, 12 + length) (as in every layout)
//! 16  magic            u8    2
//! 17  flags            u8    bit 0 log-append time, bit 1 transactional, bit 2 control,
//!                            bit 3 sequences chosen by the application, bit 4 named producer,
//!                            bit 5 producer fields present; bits 6-7 zero
//! 18  timestamp        i64   the record's timestamp (the append time with bit 0)
//! 26  producer_id      varint  } only with bit 5
//!  .  producer_epoch   varint  }
//!  .  base_sequence    varint  }
//!  .  key_length varint, key, value_length varint, value, header_count varint, headers
//! ```
//!
//! No padding: the batch ends with its record. Flag bits 0-4 are the
//! `magic` 1 attribute bits 3-7, so the decoded [`BatchHeader`] carries the
//! same `attributes` whichever layout was read.

use super::{
    get_varint, opt_len, put_opt, put_varint, rd, varint_len, BatchHeader, ProducerFields,
    RecordRef, CODEC_MASK, LENGTH_PREFIX, OFF_CRC, OFF_LENGTH,
};

/// The `magic` of the compact layout.
pub const MAGIC_COMPACT: u8 = 2;
/// Bytes of the compact header before the optional producer fields.
pub const COMPACT_FIXED_LEN: usize = 26;
/// The smallest `length` of a compact batch: its fixed header and a record
/// with no key, no value and no headers (3 bytes).
pub const COMPACT_MIN_LENGTH: u32 = (COMPACT_FIXED_LEN + 3 - LENGTH_PREFIX) as u32;

const OFF_FLAGS: usize = 17;
const OFF_TIMESTAMP: usize = 18;
/// Flag: the producer fields follow the timestamp.
const FLAG_PRODUCER: u8 = 1 << 5;
/// Flag bits 0-4 hold `magic` 1 attribute bits 3-7.
const ATTR_SHIFT: u32 = 3;
const FLAG_ATTRS: u8 = 0x1f;
/// Attribute bits a compact batch can carry.
const COMPACT_ATTRS: u16 = (FLAG_ATTRS as u16) << ATTR_SHIFT;

/// Whether a batch of `records` with `attributes` is written in the compact
/// layout: one record, no codec.
#[inline]
pub fn is_compact(records: usize, attributes: u16) -> bool {
    records == 1 && attributes & !COMPACT_ATTRS == 0 && attributes & CODEC_MASK == 0
}

#[inline]
fn has_producer(p: &ProducerFields) -> bool {
    (p.producer_id, p.producer_epoch, p.base_sequence) != (-1, -1, -1)
}

/// Bytes of the producer fields of a compact header.
#[inline]
fn producer_len(p: &ProducerFields) -> usize {
    if has_producer(p) {
        varint_len(p.producer_id)
            + varint_len(i64::from(p.producer_epoch))
            + varint_len(p.base_sequence)
    } else {
        0
    }
}

/// Position of the record in a compact batch with producer fields `p`.
#[inline]
pub(super) fn record_at(p: &ProducerFields) -> usize {
    COMPACT_FIXED_LEN + producer_len(p)
}

/// Bytes of the compact record body of `r`.
#[inline]
pub(super) fn body_len(r: &RecordRef<'_>) -> usize {
    let mut n = opt_len(r.key) + opt_len(r.value) + varint_len(r.headers.len() as i64);
    for h in r.headers {
        n += varint_len(h.key.len() as i64) + h.key.len();
        n += varint_len(h.value.len() as i64) + h.value.len();
    }
    n
}

/// Total bytes of a compact batch whose record body is `body` bytes.
#[inline]
pub(super) fn compact_len(body: usize, producer: &ProducerFields) -> usize {
    record_at(producer) + body
}

/// Writes the compact header and `body` (already in place or written by
/// `put_body`) and the CRC; `buf` is exactly the batch.
#[inline]
pub(super) fn finish(
    buf: &mut [u8],
    base_offset: u64,
    producer: &ProducerFields,
    attributes: u16,
    timestamp: i64,
) {
    let total = buf.len();
    buf[0..8].copy_from_slice(&base_offset.to_le_bytes());
    buf[OFF_LENGTH..OFF_LENGTH + 4]
        .copy_from_slice(&((total - LENGTH_PREFIX) as u32).to_le_bytes());
    buf[16] = MAGIC_COMPACT;
    let mut flags = ((attributes & COMPACT_ATTRS) >> ATTR_SHIFT) as u8;
    let mut p = COMPACT_FIXED_LEN;
    if has_producer(producer) {
        flags |= FLAG_PRODUCER;
        p = put_varint(buf, p, producer.producer_id);
        p = put_varint(buf, p, i64::from(producer.producer_epoch));
        put_varint(buf, p, producer.base_sequence);
    }
    buf[OFF_FLAGS] = flags;
    buf[OFF_TIMESTAMP..OFF_TIMESTAMP + 8].copy_from_slice(&timestamp.to_le_bytes());
    set_crc(buf);
}

#[inline]
fn set_crc(buf: &mut [u8]) {
    let crc = crate::log::crc::crc32c(&buf[super::CRC_START..]);
    buf[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes the one record `r` as a compact batch into `buf` (exactly
/// [`compact_len`] bytes).
pub(super) fn encode(
    buf: &mut [u8],
    base_offset: u64,
    r: &RecordRef<'_>,
    producer: &ProducerFields,
    attributes: u16,
) -> usize {
    let mut p = record_at(producer);
    p = put_opt(buf, p, r.key);
    p = put_opt(buf, p, r.value);
    p = put_varint(buf, p, r.headers.len() as i64);
    for h in r.headers {
        p = put_opt(buf, p, Some(h.key.as_bytes()));
        p = put_opt(buf, p, Some(&h.value));
    }
    finish(
        &mut buf[..p],
        base_offset,
        producer,
        attributes,
        r.timestamp,
    );
    p
}

/// Writes the append time `ts` into the compact batch `buf`.
pub(super) fn stamp(buf: &mut [u8], ts: i64) {
    buf[OFF_FLAGS] |= (super::ATTR_LOG_APPEND_TIME >> ATTR_SHIFT) as u8;
    buf[OFF_TIMESTAMP..OFF_TIMESTAMP + 8].copy_from_slice(&ts.to_le_bytes());
    set_crc(buf);
}

/// Decodes a compact header from `b` (at least through the producer
/// fields; no CRC check) and finds where its record starts. `None` when `b`
/// is too short or a varint is malformed.
#[inline(always)]
pub(super) fn parse(b: &[u8]) -> Option<(BatchHeader, usize)> {
    if b.len() < COMPACT_FIXED_LEN {
        return None;
    }
    let flags = b[OFF_FLAGS];
    let ts = i64::from_le_bytes(rd(b, OFF_TIMESTAMP));
    let mut producer = ProducerFields::default();
    let mut p = COMPACT_FIXED_LEN;
    if flags & FLAG_PRODUCER != 0 {
        producer.producer_id = get_varint(b, &mut p)?;
        producer.producer_epoch = i16::try_from(get_varint(b, &mut p)?).ok()?;
        producer.base_sequence = get_varint(b, &mut p)?;
    }
    Some((header(b, flags, ts, producer), p))
}

/// The header of the compact batch `b` with `flags`, timestamp `ts` and
/// `producer` fields, decoded by the caller.
#[inline(always)]
fn header(b: &[u8], flags: u8, ts: i64, producer: ProducerFields) -> BatchHeader {
    BatchHeader {
        base_offset: u64::from_le_bytes(rd(b, 0)),
        length: u32::from_le_bytes(rd(b, OFF_LENGTH)),
        crc: u32::from_le_bytes(rd(b, OFF_CRC)),
        magic: MAGIC_COMPACT,
        attributes: u16::from(flags & FLAG_ATTRS) << ATTR_SHIFT,
        last_offset_delta: 0,
        first_timestamp: ts,
        max_timestamp: ts,
        producer,
        record_count: 1,
    }
}

/// The checks of a compact batch `b` (exactly its bytes, CRC already
/// checked) beyond its header decoding: known flags, producer fields in
/// their shortest encoding and present exactly when set, and a record
/// position inside the batch.
#[inline(always)]
pub(super) fn check(b: &[u8]) -> Result<BatchHeader, &'static str> {
    check_at(b).map(|(h, _)| h)
}

/// [`check`], also returning the position of the record.
#[inline(always)]
pub(super) fn check_at(b: &[u8]) -> Result<(BatchHeader, usize), &'static str> {
    if b.len() >= COMPACT_FIXED_LEN + 3 && b[OFF_FLAGS] & !FLAG_ATTRS == 0 {
        // No producer fields (the common case): the record follows the
        // fixed header, and there is nothing else to check.
        let ts = i64::from_le_bytes(rd(b, OFF_TIMESTAMP));
        let h = header(b, b[OFF_FLAGS], ts, ProducerFields::default());
        return Ok((h, COMPACT_FIXED_LEN));
    }
    let (h, p) = parse(b).ok_or("malformed compact batch header")?;
    if b[OFF_FLAGS] & !(FLAG_ATTRS | FLAG_PRODUCER) != 0 {
        return Err("unknown compact batch flags");
    }
    // The encoding is canonical: the record position follows from the
    // decoded fields alone (`BatchHeader::records_at`).
    if p != record_at(&h.producer) || p + 3 > b.len() {
        return Err("malformed compact batch header");
    }
    Ok((h, p))
}
