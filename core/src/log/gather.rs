//! Large batches laid out for one `pwritev` to the segment file, straight
//! from the caller's buffers ([`PartitionLog::append_batch`]).
//!
//! Writing a new page through the segment's map costs a page fault and a
//! zeroed page before the copy; `pwritev` fills page-cache pages with the
//! bytes at once. Large record values and prepared sections are not copied
//! first: the batch is a list of pieces, the header, each record's framing
//! (and its value when short) built here, and the long values themselves;
//! the CRC is computed over the pieces where they are.
//!
//! The layout is the batch format of `docs/FORMAT.md` (see
//! [`batch`]): the header is written by [`batch::write_section_batch`],
//! and only its length and CRC fields are set here.
//!
//! [`PartitionLog::append_batch`]: super::PartitionLog::append_batch

use std::cell::Cell;

use super::batch::{self, ProducerFields, RecordRef, SectionInfo};
use super::BatchSource;
use crate::error::Result;

/// Values at least this long are written from the caller's memory; shorter
/// ones are copied next to their record's framing (a piece per value would
/// cost more than the copy).
pub(super) const IN_PLACE_MIN: usize = 4 << 10;

/// Where the header's `length` field is, and its CRC (the format's
/// `length` is the last field of the prefix, the CRC follows it and covers
/// everything after itself).
const LENGTH_AT: usize = batch::LENGTH_PREFIX - 4;
const CRC_AT: usize = batch::LENGTH_PREFIX;
const CRC_FROM: usize = batch::LENGTH_PREFIX + 4;

/// Capacity of the per-thread buffer kept between batches.
const KEEP: usize = 4 << 20;

thread_local! {
    static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// One batch as pieces: `own` (header, framing, short values, padding)
/// cut by borrowed long values.
#[derive(Debug)]
pub(super) struct Gathered<'a> {
    /// Bytes built here, in order.
    own: Vec<u8>,
    /// `(at, bytes)`: `bytes` come after `own[..at]` (and before the rest).
    cuts: Vec<(usize, &'a [u8])>,
    /// Total length of the batch.
    len: usize,
}

impl Drop for Gathered<'_> {
    fn drop(&mut self) {
        let mut own = std::mem::take(&mut self.own);
        if own.capacity() <= KEEP {
            own.clear();
            let _ = SPARE.try_with(|c| c.set(own));
        }
    }
}

impl<'a> Gathered<'a> {
    /// The batch's encoded length.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Computes the CRC, then writes the batch with `write(parts)` (the
    /// concatenation of `parts` is the batch) in one call, header
    /// included. Measured against writing a long batch a chunk at a time,
    /// each chunk checksummed just before it is written: one call of a
    /// 1 MiB record is about a third faster (see docs/decisions.md).
    pub(super) fn write_with(&mut self, write: impl FnOnce(&[&[u8]]) -> Result<()>) -> Result<()> {
        let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
        digest.update(&self.own[CRC_FROM..batch::HEADER_LEN]);
        for (k, p) in self.parts().iter().enumerate() {
            // The first piece starts with the header.
            digest.update(if k == 0 { &p[batch::HEADER_LEN..] } else { p });
        }
        self.set_crc(&digest);
        write(&self.parts())
    }

    fn set_crc(&mut self, digest: &crc_fast::Digest) {
        let crc = digest.finalize() as u32;
        self.own[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// The pieces, in order.
    fn parts(&self) -> Vec<&[u8]> {
        let mut parts = Vec::with_capacity(self.cuts.len() * 2 + 1);
        let mut from = 0;
        for &(at, bytes) in &self.cuts {
            if at > from {
                parts.push(&self.own[from..at]);
            }
            parts.push(bytes);
            from = at;
        }
        if self.own.len() > from {
            parts.push(&self.own[from..]);
        }
        parts
    }

    fn start() -> Gathered<'a> {
        let mut own = SPARE.try_with(Cell::take).unwrap_or_default();
        own.resize(batch::HEADER_LEN, 0);
        Gathered {
            own,
            cuts: Vec::new(),
            len: 0,
        }
    }

    /// Appends `bytes`: in place when long, else copied.
    fn push_bytes(&mut self, bytes: &'a [u8]) {
        if bytes.len() >= IN_PLACE_MIN {
            self.cuts.push((self.own.len(), bytes));
        } else {
            self.own.extend_from_slice(bytes);
        }
    }

    fn borrowed_len(&self) -> usize {
        self.cuts.iter().map(|c| c.1.len()).sum()
    }

    /// Pads to the batch alignment and writes the header, all but its CRC
    /// (set by [`Gathered::write_with`]).
    fn finish(&mut self, base: u64, info: SectionInfo, producer: ProducerFields, attributes: u16) {
        let unpadded = self.own.len() + self.borrowed_len();
        let len = unpadded.next_multiple_of(batch::ALIGN);
        self.own.resize(self.own.len() + (len - unpadded), 0);
        let mut head = [0u8; batch::HEADER_LEN + batch::ALIGN];
        let n = batch::write_section_batch(&mut head, base, &[], info, producer, attributes);
        debug_assert!(n <= head.len());
        self.own[..batch::HEADER_LEN].copy_from_slice(&head[..batch::HEADER_LEN]);
        let length = (len - batch::LENGTH_PREFIX) as u32;
        self.own[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&length.to_le_bytes());
        self.len = len;
    }
}

/// Zigzag varint, as the record format writes it.
fn push_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn opt_len(b: Option<&[u8]>) -> usize {
    b.map_or(1, |b| batch::varint_len(b.len() as i64) + b.len())
}

/// Bytes of `src` a [`lay_out`] would write from where they are: its
/// values of [`IN_PLACE_MIN`] bytes or more, or its whole prepared section.
pub(super) fn in_place_bytes(src: &BatchSource<'_>) -> usize {
    match *src {
        BatchSource::Records(records, _) => records
            .iter()
            .filter_map(|r| r.value)
            .filter(|v| v.len() >= IN_PLACE_MIN)
            .map(<[u8]>::len)
            .sum(),
        BatchSource::Section { bytes, .. } => bytes.len(),
    }
}

/// Lays out one batch of `src` at `base` (see the module comment).
/// `append_time` is stamped as the batch's `max_timestamp` (log-append-time
/// topics, whose `attributes` say so).
pub(super) fn lay_out<'a>(
    src: &BatchSource<'a>,
    base: u64,
    producer: ProducerFields,
    attributes: u16,
    append_time: Option<i64>,
) -> Gathered<'a> {
    let mut g = Gathered::start();
    let mut info = match *src {
        BatchSource::Records(records, _) => {
            let first_ts = records.first().map_or(0, |r| r.timestamp);
            let mut max_ts = first_ts;
            for (i, r) in records.iter().enumerate() {
                max_ts = max_ts.max(r.timestamp);
                push_record(&mut g, r, r.timestamp.wrapping_sub(first_ts), i as i64);
            }
            SectionInfo {
                count: records.len() as u32,
                first_timestamp: first_ts,
                max_timestamp: max_ts,
            }
        }
        BatchSource::Section { bytes, info, .. } => {
            g.cuts.push((g.own.len(), bytes));
            info
        }
    };
    if let Some(t) = append_time {
        info.max_timestamp = t;
    }
    g.finish(base, info, producer, attributes);
    g
}

/// One record in the record format (`length, attributes, timestamp_delta,
/// offset_delta, key, value, header_count, headers`, zigzag varints).
fn push_record<'a>(g: &mut Gathered<'a>, r: &RecordRef<'a>, ts_delta: i64, off_delta: i64) {
    let mut body = 1 + batch::varint_len(ts_delta) + batch::varint_len(off_delta);
    body += opt_len(r.key) + opt_len(r.value);
    body += batch::varint_len(r.headers.len() as i64);
    for h in r.headers {
        body += batch::varint_len(h.key.len() as i64) + h.key.len();
        body += batch::varint_len(h.value.len() as i64) + h.value.len();
    }
    let own = &mut g.own;
    push_varint(own, body as i64);
    own.push(0); // record attributes, unused
    push_varint(own, ts_delta);
    push_varint(own, off_delta);
    match r.key {
        Some(k) => {
            push_varint(own, k.len() as i64);
            g.push_bytes(k);
        }
        None => push_varint(own, -1),
    }
    match r.value {
        Some(v) => {
            push_varint(&mut g.own, v.len() as i64);
            g.push_bytes(v);
        }
        None => push_varint(&mut g.own, -1),
    }
    push_varint(&mut g.own, r.headers.len() as i64);
    for h in r.headers {
        push_varint(&mut g.own, h.key.len() as i64);
        g.own.extend_from_slice(h.key.as_bytes());
        push_varint(&mut g.own, h.value.len() as i64);
        g.own.extend_from_slice(&h.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::{Check, Header, Records};

    /// The batch as `write_with` writes it (in one call, which its type
    /// allows).
    fn concat(g: &mut Gathered<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        g.write_with(|parts| {
            out = parts.concat();
            Ok(())
        })
        .expect("write");
        assert_eq!(out.len(), g.len());
        out
    }

    /// Batches laid out here check out (length, CRC) and decode to the
    /// records given, with short and long values, keys, headers, null
    /// values and an append time; and have the length `batch_len` gives.
    #[test]
    fn laid_out_batches_decode_to_their_records() {
        // A long value, borrowed: 3 MiB.
        let long: Vec<u8> = (0..(3 << 20) as u32).map(|i| (i * 7 + 3) as u8).collect();
        let mid: Vec<u8> = (0..IN_PLACE_MIN as u32).map(|i| i as u8).collect();
        let headers = vec![Header::new("h", vec![1u8, 2, 3]), Header::new("k2", vec![])];
        let records = vec![
            RecordRef {
                key: Some(b"key"),
                value: Some(&long),
                headers: &headers,
                timestamp: 1_000,
            },
            RecordRef {
                key: None,
                value: Some(b"short"),
                headers: &[],
                timestamp: 990,
            },
            RecordRef {
                key: Some(&mid),
                value: None,
                headers: &[],
                timestamp: 1_500,
            },
            RecordRef {
                key: None,
                value: Some(&mid[1..]),
                headers: &headers,
                timestamp: 1_200,
            },
        ];
        let producer = ProducerFields {
            producer_id: 7,
            producer_epoch: 2,
            base_sequence: 40,
        };
        for append_time in [None, Some(9_999)] {
            let len = batch::batch_len(&records);
            let src = BatchSource::Records(&records, len);
            let attrs = if append_time.is_some() {
                batch::ATTR_LOG_APPEND_TIME
            } else {
                0
            };
            let mut g = lay_out(&src, 123, producer, attrs, append_time);
            assert_eq!(g.len(), len);
            // The long value and the 4 KiB key; the 4095-byte value is copied.
            assert_eq!(g.cuts.len(), 2, "long values and keys are borrowed");
            let bytes = concat(&mut g);
            assert_eq!(bytes.len(), len);
            let h = match batch::check(&bytes) {
                Check::Valid(h) => h,
                other => panic!("invalid batch: {other:?}"),
            };
            assert_eq!(h.base_offset, 123);
            assert_eq!(h.record_count, 4);
            assert_eq!(h.producer, producer);
            assert_eq!(h.first_timestamp, 1_000);
            assert_eq!(h.max_timestamp, append_time.unwrap_or(1_500));
            let got: Vec<_> = Records::new(&bytes, &h)
                .map(|r| r.expect("record"))
                .collect();
            assert_eq!(got.len(), 4);
            for (i, (r, want)) in got.iter().zip(&records).enumerate() {
                assert_eq!(r.offset_delta, i as u32, "record {i}");
                assert_eq!(r.key.clone().map(|k| &bytes[k]), want.key, "record {i}");
                assert_eq!(r.value.clone().map(|v| &bytes[v]), want.value, "record {i}");
                assert_eq!(r.header_count as usize, want.headers.len(), "record {i}");
                assert_eq!(h.first_timestamp + r.timestamp_delta, want.timestamp);
            }
            // The CRC is over the pieces where they are: one byte of a
            // borrowed value changed makes the batch invalid.
            let mut damaged = bytes.clone();
            damaged[200] ^= 1;
            assert!(!matches!(batch::check(&damaged), Check::Valid(_)));
        }
    }

    /// A prepared section is written in place after the header, padded.
    #[test]
    fn sections_are_framed_like_write_section_batch() {
        let section: Vec<u8> = (0..70_001u32).map(|i| (i % 251) as u8).collect();
        let info = SectionInfo {
            count: 3,
            first_timestamp: 5,
            max_timestamp: 8,
        };
        let src = BatchSource::Section {
            bytes: &section,
            info,
            attributes: 0,
        };
        let mut g = lay_out(&src, 9, ProducerFields::default(), 0, None);
        let mut want = vec![0u8; batch::section_batch_len(section.len())];
        let n =
            batch::write_section_batch(&mut want, 9, &section, info, ProducerFields::default(), 0);
        let bytes = concat(&mut g);
        assert_eq!(bytes, &want[..n]);
        assert_eq!(in_place_bytes(&src), section.len());
    }
}
