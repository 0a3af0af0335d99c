//! Per-batch compression: the codecs, and the framed block that holds a
//! batch's records when its codec is not [`Compression::None`].
//!
//! With a codec, the whole records section of a batch (every record, in the
//! same encoding as an uncompressed batch) is compressed as one block and
//! stored right after the 61-byte header as
//!
//! ```text
//! 0  uncompressed_len  u32 LE   bytes of the records section once decompressed
//! 4  compressed_len    u32 LE   bytes of compressed data that follow
//! 8  data              compressed_len bytes, in the codec's own format
//! ..                   zero padding to a multiple of 8 bytes (part of the batch)
//! ```
//!
//! The codec formats are: gzip (RFC 1952, one member), snappy (the raw
//! format, not the framing format), lz4 (the block format, no frame header)
//! and zstd (one or more zstd frames). `docs/FORMAT.md` documents the same.
//!
//! Decompression never trusts `uncompressed_len`: it is refused above a
//! limit before anything is allocated (see [`MAX_UNCOMPRESSED_LEN`]), and the
//! decompressed size must equal it exactly.

use std::cell::RefCell;
use std::fmt;
use std::io::Read;
use std::str::FromStr;

use crate::error::Error;

/// Bits of a batch's `attributes` that hold its codec number.
pub const CODEC_MASK: u16 = 0b111;

/// Bytes of framing before the compressed data: `uncompressed_len` and
/// `compressed_len`, both `u32` little-endian.
pub const FRAMING_LEN: usize = 8;

/// The largest records section a compressed batch may hold once
/// decompressed: 64 MiB.
///
/// This is a rule of the format, independent of any topic setting, so that
/// every reader (consumer, time search, tools) can refuse a larger
/// `uncompressed_len` before allocating anything (a "decompression bomb").
/// Writers must not compress a larger records section (store it
/// uncompressed or refuse it): readers report such a batch as corrupt when
/// they decompress it. (The batch check at recovery does not apply this
/// limit, so such a batch is not truncated away.)
pub const MAX_UNCOMPRESSED_LEN: usize = 64 << 20;

/// zstd level used by [`compress_records`] (zstd's own default).
pub const ZSTD_LEVEL: i32 = 3;

/// Compression codec of a batch (attribute bits 0-2), numbered as Kafka
/// numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(u8)]
pub enum Compression {
    /// Records are stored as they are.
    #[default]
    None = 0,
    /// gzip (deflate), default level.
    Gzip = 1,
    /// Snappy, raw format.
    Snappy = 2,
    /// LZ4, block format.
    Lz4 = 3,
    /// Zstandard, level 3.
    Zstd = 4,
}

impl Compression {
    /// Every codec, in codec-number order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec numbered `bits` (attribute bits 0-2, already extracted with
    /// [`CODEC_MASK`]); `None` for a number this build does not know.
    #[inline]
    pub fn from_bits(bits: u16) -> Option<Compression> {
        match bits {
            0 => Some(Compression::None),
            1 => Some(Compression::Gzip),
            2 => Some(Compression::Snappy),
            3 => Some(Compression::Lz4),
            4 => Some(Compression::Zstd),
            _ => None,
        }
    }

    /// The codec number, as stored in attribute bits 0-2.
    #[inline]
    pub fn bits(self) -> u16 {
        self as u16
    }

    /// The codec's name: `"none"`, `"gzip"`, `"snappy"`, `"lz4"` or `"zstd"`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Compression {
    type Err = Error;

    /// Parses a codec name, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self, Error> {
        Compression::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "compression must be none, gzip, snappy, lz4 or zstd, got {s:?}"
                ))
            })
    }
}

thread_local! {
    // zstd and deflate contexts are worth reusing (their tables are
    // allocated per context); one per thread that compresses or decompresses.
    static ZSTD_COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { RefCell::new(None) };
    static ZSTD_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
    static GZIP_COMPRESSOR: RefCell<Option<flate2::Compress>> = const { RefCell::new(None) };
}

/// Appends the records section `records` (encoded records, back to back) to
/// `out` as `codec` stores it in a batch: for a codec, the framed block
/// `uncompressed_len u32, compressed_len u32, compressed bytes`; for
/// [`Compression::None`], `records` unchanged (uncompressed batches have no
/// framing). Padding is the caller's business.
///
/// gzip and zstd keep their compression state per thread for reuse (a few
/// hundred KiB for deflate, up to about a megabyte for zstd at level 3),
/// freed when the thread ends.
///
/// # Panics
/// If `records` is longer than `u32::MAX` bytes (writers must keep it within
/// [`MAX_UNCOMPRESSED_LEN`]), or if zstd cannot allocate a context.
pub fn compress_records(codec: Compression, records: &[u8], out: &mut Vec<u8>) {
    if codec == Compression::None {
        out.extend_from_slice(records);
        return;
    }
    let ulen = u32::try_from(records.len()).expect("records section fits in u32");
    let frame_at = out.len();
    out.extend_from_slice(&ulen.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // compressed_len, set below
    let start = out.len();
    match codec {
        Compression::None => unreachable!("handled above"),
        Compression::Gzip => gzip(records, out),
        Compression::Snappy => {
            let bound = snap::raw::max_compress_len(records.len());
            out.resize(start + bound, 0);
            let n = snap::raw::Encoder::new()
                .compress(records, &mut out[start..])
                .expect("snappy output sized by max_compress_len");
            out.truncate(start + n);
        }
        Compression::Lz4 => {
            let bound = lz4_flex::block::get_maximum_output_size(records.len());
            out.resize(start + bound, 0);
            let n = lz4_flex::block::compress_into(records, &mut out[start..])
                .expect("lz4 output sized by get_maximum_output_size");
            out.truncate(start + n);
        }
        Compression::Zstd => {
            out.reserve(zstd::zstd_safe::compress_bound(records.len()));
            ZSTD_COMPRESSOR.with(|cell| {
                let mut slot = cell.borrow_mut();
                let c = match &mut *slot {
                    Some(c) => c,
                    None => slot.insert(
                        zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("zstd compression context"),
                    ),
                };
                let mut cursor = std::io::Cursor::new(&mut *out);
                cursor.set_position(start as u64);
                c.compress_to_buffer(records, &mut cursor)
                    .expect("zstd output sized by compress_bound");
            });
        }
    }
    let clen = u32::try_from(out.len() - start).expect("compressed block fits in u32");
    out[frame_at + 4..frame_at + 8].copy_from_slice(&clen.to_le_bytes());
}

/// Appends `records` as one gzip member (RFC 1952): a fixed 10-byte header
/// (no name, no time, OS "unknown"), raw deflate at the default level, then
/// CRC-32 and size. The deflate state is reused per thread (it is large to
/// set up, a cost that dominated small batches with a new encoder each).
fn gzip(records: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
    GZIP_COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let c = slot
            .get_or_insert_with(|| flate2::Compress::new(flate2::Compression::default(), false));
        c.reset();
        let mut input = records;
        // Deflate's worst case is a few bytes per 16 KiB over the input.
        out.reserve(records.len() + records.len() / 1024 + 64);
        loop {
            let before = c.total_in();
            let status = c
                .compress_vec(input, out, flate2::FlushCompress::Finish)
                .expect("deflate into a Vec cannot fail");
            input = &input[(c.total_in() - before) as usize..];
            if status == flate2::Status::StreamEnd {
                break;
            }
            out.reserve(input.len() + 4096);
        }
    });
    let mut crc = flate2::Crc::new();
    crc.update(records);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
}

/// Reads the framing at the start of `section` (the bytes of a batch after
/// its header): returns `uncompressed_len` and the compressed data, checking
/// that the data lies inside `section`.
#[inline]
pub fn parse_framing(section: &[u8]) -> Result<(usize, &[u8]), &'static str> {
    let Some((head, rest)) = section.split_first_chunk::<FRAMING_LEN>() else {
        return Err("compressed block framing truncated");
    };
    let ulen = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let clen = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    match rest.get(..clen) {
        Some(data) => Ok((ulen, data)),
        None => Err("compressed block runs past the end of the batch"),
    }
}

/// Decompresses the records section of a batch compressed with `codec`.
///
/// `block` is what follows the batch header: the framing, the compressed
/// data, then any padding (ignored). `uncompressed_len` above `limit` is
/// refused before any allocation; callers pass [`MAX_UNCOMPRESSED_LEN`] (or
/// less). The output must be exactly `uncompressed_len` bytes. Malformed
/// input of any kind is an `Err` with the reason, never a panic, and at most
/// `limit` bytes (plus the codec's small fixed working state) are allocated.
///
/// For [`Compression::None`] the block is the records section itself and is
/// returned as a copy (refused if longer than `limit`).
pub fn decompress_records(
    codec: Compression,
    block: &[u8],
    limit: usize,
) -> Result<Vec<u8>, &'static str> {
    if codec == Compression::None {
        return if block.len() <= limit {
            Ok(block.to_vec())
        } else {
            Err("records section larger than the limit")
        };
    }
    let (n, data) = parse_framing(block)?;
    if n > limit {
        return Err("uncompressed size of the records above the limit");
    }
    let out = match codec {
        Compression::None => unreachable!("handled above"),
        Compression::Gzip => read_exactly(flate2::read::GzDecoder::new(data), n)?,
        Compression::Snappy => {
            match snap::raw::decompress_len(data) {
                Ok(len) if len == n => {}
                Ok(_) => return Err("snappy: decompressed size differs from the framing"),
                Err(_) => return Err("snappy: invalid compressed data"),
            }
            let mut out = vec![0u8; n];
            match snap::raw::Decoder::new().decompress(data, &mut out) {
                Ok(got) if got == n => out,
                Ok(_) => return Err("snappy: decompressed size differs from the framing"),
                Err(_) => return Err("snappy: invalid compressed data"),
            }
        }
        Compression::Lz4 => {
            let mut out = vec![0u8; n];
            match lz4_flex::block::decompress_into(data, &mut out) {
                Ok(got) if got == n => out,
                Ok(_) => return Err("lz4: decompressed size differs from the framing"),
                Err(_) => return Err("lz4: invalid compressed data"),
            }
        }
        Compression::Zstd => ZSTD_DECOMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            let d = match &mut *slot {
                Some(d) => d,
                None => slot.insert(
                    zstd::bulk::Decompressor::new()
                        .map_err(|_| "zstd: cannot create a decompression context")?,
                ),
            };
            // The capacity bounds what zstd writes: a frame that would
            // produce more fails instead of growing the buffer.
            let mut out = Vec::with_capacity(n);
            d.decompress_to_buffer(data, &mut out)
                .map_err(|_| "zstd: invalid compressed data")?;
            Ok::<_, &'static str>(out)
        })?,
    };
    if out.len() != n {
        return Err("decompressed size differs from the framing");
    }
    Ok(out)
}

/// Reads exactly `n` bytes from `r` and checks it has nothing more.
fn read_exactly(mut r: impl Read, n: usize) -> Result<Vec<u8>, &'static str> {
    const INVALID: &str = "gzip: invalid compressed data";
    let mut out = vec![0u8; n];
    let mut filled = 0;
    while filled < n {
        match r.read(&mut out[filled..]) {
            Ok(0) => return Err("gzip: decompressed size smaller than the framing says"),
            Ok(k) => filled += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err(INVALID),
        }
    }
    // One more read: the end of the stream, where the gzip trailer (CRC32
    // and size of the data) is checked.
    let mut probe = [0u8; 1];
    loop {
        match r.read(&mut probe) {
            Ok(0) => return Ok(out),
            Ok(_) => return Err("gzip: decompressed size larger than the framing says"),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err(INVALID),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 7 * 31 + i / 100) as u8).collect()
    }

    #[test]
    fn names_round_trip_and_ignore_case() {
        for c in Compression::ALL {
            assert_eq!(c.name().parse::<Compression>().unwrap(), c);
            assert_eq!(c.name().to_uppercase().parse::<Compression>().unwrap(), c);
            assert_eq!(c.to_string(), c.name());
            assert_eq!(Compression::from_bits(c.bits()), Some(c));
        }
        for bits in 5..=7 {
            assert_eq!(Compression::from_bits(bits), None);
        }
        let err = "brotli".parse::<Compression>().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)));
        assert!(err.to_string().contains("none, gzip, snappy, lz4 or zstd"));
    }

    #[test]
    fn every_codec_round_trips() {
        for c in Compression::ALL {
            for n in [0usize, 1, 7, 100, 70_000] {
                let data = sample(n);
                let mut out = vec![0xAA; 3]; // appends after what is there
                compress_records(c, &data, &mut out);
                assert_eq!(&out[..3], &[0xAA; 3]);
                let block = &out[3..];
                if c != Compression::None {
                    let (ulen, compressed) = parse_framing(block).unwrap();
                    assert_eq!(ulen, n);
                    assert_eq!(compressed.len() + FRAMING_LEN, block.len());
                }
                // Followed by padding, as in a batch.
                let mut padded = block.to_vec();
                padded.extend_from_slice(&[0; 7]);
                let back = decompress_records(c, &padded[..block.len() + 7], n + 7).unwrap();
                let want = if c == Compression::None {
                    padded.clone()
                } else {
                    data.clone()
                };
                assert_eq!(back, want, "{c}, {n} bytes");
            }
        }
    }

    #[test]
    fn size_mismatches_and_limits_are_refused() {
        let data = sample(1000);
        for c in &Compression::ALL[1..] {
            let mut block = Vec::new();
            compress_records(*c, &data, &mut block);
            assert!(decompress_records(*c, &block, 999).is_err(), "{c}");
            assert!(decompress_records(*c, &block, 1000).is_ok(), "{c}");
            for claimed in [999u32, 1001, 0, u32::MAX] {
                let mut b = block.clone();
                b[0..4].copy_from_slice(&claimed.to_le_bytes());
                assert!(
                    decompress_records(*c, &b, usize::MAX >> 1).is_err(),
                    "{c} claiming {claimed}"
                );
            }
            // compressed_len past the end, or cutting the data short.
            let mut b = block.clone();
            let clen = (block.len() - FRAMING_LEN) as u32;
            b[4..8].copy_from_slice(&(clen + 1).to_le_bytes());
            assert!(decompress_records(*c, &b, 1000).is_err());
            b[4..8].copy_from_slice(&(clen - 1).to_le_bytes());
            assert!(decompress_records(*c, &b, 1000).is_err());
            assert!(decompress_records(*c, &b[..5], 1000).is_err());
        }
    }
}
