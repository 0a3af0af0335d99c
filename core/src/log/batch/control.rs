//! The control batch layout (`magic` 3): a transaction marker. It holds no
//! record; it takes one offset of the partition, which readers step over
//! without delivering anything.
//!
//! ```text
//!  0  base_offset      u64   the marker's offset (as in every layout)
//!  8  length           u32   36 (as in every layout: bytes after this field)
//! 12  crc              u32   CRC32C of bytes [16, 48) (as in every layout)
//! 16  magic            u8    3
//! 17  kind             u8    0 abort, 1 commit
//! 18  reserved         u16   zero
//! 20  timestamp        i64   when the marker was written, ms since the epoch
//! 28  producer_id      i64   the transactional producer's id
//! 36  producer_epoch   i16   its epoch
//! 38  reserved         u16   zero
//! 40  transaction      u64   the transaction's number in the data directory's transaction log
//! ```
//!
//! A build that reads format version 2 at most refuses the `magic` with
//! `UnsupportedVersion` rather than delivering the marker as a record.

use super::{rd, BatchHeader, ProducerFields, CRC_START, LENGTH_PREFIX, OFF_CRC, OFF_LENGTH};

/// The `magic` of a control batch (a transaction marker).
pub const MAGIC_CONTROL: u8 = 3;
/// Total bytes of a control batch.
pub const CONTROL_LEN: usize = 48;
/// Attribute bit: the batch belongs to a transaction (data batches written
/// at a commit, and markers).
pub const ATTR_TRANSACTIONAL: u16 = 1 << 4;
/// Attribute bit: a control batch (a marker; it holds no record).
pub const ATTR_CONTROL: u16 = 1 << 5;

const OFF_KIND: usize = 17;
const OFF_RESERVED: usize = 18;
const OFF_TIMESTAMP: usize = 20;
const OFF_PRODUCER_ID: usize = 28;
const OFF_EPOCH: usize = 36;
const OFF_RESERVED2: usize = 38;
const OFF_TRANSACTION: usize = 40;

/// What a marker says about the transactional batches before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerKind {
    /// The transaction was abandoned: its batches are never delivered to a
    /// `read_committed` consumer.
    Abort,
    /// The transaction committed.
    Commit,
}

/// A transaction marker, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// Commit or abort.
    pub kind: MarkerKind,
    /// When it was written.
    pub timestamp: i64,
    /// The transactional producer's id.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The transaction's number in the transaction log.
    pub transaction: u64,
}

/// Encodes `marker` at `base_offset` into `buf` (at least [`CONTROL_LEN`]
/// bytes). Returns the bytes written.
pub fn encode_marker(buf: &mut [u8], base_offset: u64, marker: &Marker) -> usize {
    let b = &mut buf[..CONTROL_LEN];
    b[0..8].copy_from_slice(&base_offset.to_le_bytes());
    b[OFF_LENGTH..OFF_LENGTH + 4]
        .copy_from_slice(&((CONTROL_LEN - LENGTH_PREFIX) as u32).to_le_bytes());
    b[16] = MAGIC_CONTROL;
    b[OFF_KIND] = match marker.kind {
        MarkerKind::Abort => 0,
        MarkerKind::Commit => 1,
    };
    b[OFF_RESERVED..OFF_TIMESTAMP].fill(0);
    b[OFF_TIMESTAMP..OFF_TIMESTAMP + 8].copy_from_slice(&marker.timestamp.to_le_bytes());
    b[OFF_PRODUCER_ID..OFF_PRODUCER_ID + 8].copy_from_slice(&marker.producer_id.to_le_bytes());
    b[OFF_EPOCH..OFF_EPOCH + 2].copy_from_slice(&marker.producer_epoch.to_le_bytes());
    b[OFF_RESERVED2..OFF_TRANSACTION].fill(0);
    b[OFF_TRANSACTION..OFF_TRANSACTION + 8].copy_from_slice(&marker.transaction.to_le_bytes());
    let crc = crate::log::crc::crc32c(&b[CRC_START..]);
    b[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    CONTROL_LEN
}

/// The header of the control batch at the start of `b` (no CRC check):
/// one offset, no record. `None` when `b` is too short.
pub(super) fn parse(b: &[u8]) -> Option<BatchHeader> {
    if b.len() < CONTROL_LEN {
        return None;
    }
    let ts = i64::from_le_bytes(rd(b, OFF_TIMESTAMP));
    Some(BatchHeader {
        base_offset: u64::from_le_bytes(rd(b, 0)),
        length: u32::from_le_bytes(rd(b, OFF_LENGTH)),
        crc: u32::from_le_bytes(rd(b, OFF_CRC)),
        magic: MAGIC_CONTROL,
        attributes: ATTR_TRANSACTIONAL | ATTR_CONTROL,
        last_offset_delta: 0,
        first_timestamp: ts,
        max_timestamp: ts,
        producer: ProducerFields {
            producer_id: i64::from_le_bytes(rd(b, OFF_PRODUCER_ID)),
            producer_epoch: i16::from_le_bytes(rd(b, OFF_EPOCH)),
            base_sequence: -1,
        },
        record_count: 0,
    })
}

/// The checks of a control batch `b` (exactly its bytes, CRC already
/// checked): its length, a known kind, zero reserved bytes.
pub(super) fn check(b: &[u8]) -> Result<BatchHeader, &'static str> {
    if b.len() != CONTROL_LEN {
        return Err("control batch of the wrong length");
    }
    if b[OFF_KIND] > 1 {
        return Err("unknown control batch kind");
    }
    if b[OFF_RESERVED..OFF_TIMESTAMP] != [0, 0] || b[OFF_RESERVED2..OFF_TRANSACTION] != [0, 0] {
        return Err("control batch with nonzero reserved bytes");
    }
    parse(b).ok_or("truncated header")
}

/// The marker of the checked control batch `b`, `None` if `b` is not one.
pub fn marker(b: &[u8]) -> Option<Marker> {
    if b.len() < CONTROL_LEN || b[16] != MAGIC_CONTROL {
        return None;
    }
    Some(Marker {
        kind: if b[OFF_KIND] == 1 {
            MarkerKind::Commit
        } else {
            MarkerKind::Abort
        },
        timestamp: i64::from_le_bytes(rd(b, OFF_TIMESTAMP)),
        producer_id: i64::from_le_bytes(rd(b, OFF_PRODUCER_ID)),
        producer_epoch: i16::from_le_bytes(rd(b, OFF_EPOCH)),
        transaction: u64::from_le_bytes(rd(b, OFF_TRANSACTION)),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::log::batch::{check as check_batch, Check, Records};

    fn sample() -> Marker {
        Marker {
            kind: MarkerKind::Commit,
            timestamp: 1_700_000_000_000,
            producer_id: 42,
            producer_epoch: 3,
            transaction: 9,
        }
    }

    #[test]
    fn round_trips_and_holds_no_record() {
        let mut buf = [0u8; CONTROL_LEN];
        assert_eq!(encode_marker(&mut buf, 100, &sample()), CONTROL_LEN);
        let Check::Valid(h) = check_batch(&buf) else {
            panic!("not valid")
        };
        assert_eq!(
            (h.base_offset, h.next_offset(), h.record_count),
            (100, 101, 0)
        );
        assert_eq!(h.magic, MAGIC_CONTROL);
        assert_ne!(h.attributes & ATTR_CONTROL, 0);
        assert_eq!(h.total_len(), CONTROL_LEN);
        assert_eq!(marker(&buf), Some(sample()));
        assert_eq!(Records::new(&buf, &h).count(), 0);
    }

    #[test]
    fn damage_is_refused() {
        let mut buf = [0u8; CONTROL_LEN];
        encode_marker(&mut buf, 0, &sample());
        for at in 12..CONTROL_LEN {
            let mut b = buf;
            b[at] ^= 0x10;
            assert!(matches!(check_batch(&b), Check::Invalid(_)), "byte {at}");
        }
        // A valid CRC over a bad kind or reserved byte is still refused.
        for at in [OFF_KIND, OFF_RESERVED, OFF_RESERVED2 + 1] {
            let mut b = buf;
            b[at] = 7;
            let crc = crate::log::crc::crc32c(&b[CRC_START..]);
            b[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
            assert!(matches!(check_batch(&b), Check::Invalid(_)), "byte {at}");
        }
    }
}
