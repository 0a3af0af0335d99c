//! Decompression bombs: a compressed batch whose framing claims a huge
//! uncompressed size, or whose data expands far beyond the size it claims,
//! is refused without allocating anything like that size.
//!
//! Allocation is measured with the process's peak virtual size (`VmPeak`,
//! Linux): a large allocation maps memory and raises it even when the pages
//! are never touched. Its own test binary, so no other test allocates
//! meanwhile.
#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

use std::io::Write;

use mqlite::log::batch::{
    batch_len, check, encode_batch, records_section, Check, ProducerFields, RecordRef, ALIGN,
    CODEC_MASK, HEADER_LEN, LENGTH_PREFIX,
};
use mqlite::log::compression::{decompress_records, MAX_UNCOMPRESSED_LEN};
use mqlite::Compression;

/// Peak virtual memory of this process, in bytes.
fn vm_peak() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmPeak:"))
        .expect("VmPeak line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmPeak in kB");
    kb * 1024
}

/// `data` compressed with `codec`, by the codec crates directly.
fn compress(codec: Compression, data: &[u8]) -> Vec<u8> {
    match codec {
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        Compression::Snappy => snap::raw::Encoder::new().compress_vec(data).unwrap(),
        Compression::Lz4 => lz4_flex::block::compress(data),
        Compression::Zstd => zstd::bulk::compress(data, 1).unwrap(),
        Compression::None => unreachable!(),
    }
}

/// A one-record batch whose records block is `data` framed with the given
/// (possibly lying) uncompressed length, with a valid CRC.
fn batch(codec: Compression, claimed: u32, data: &[u8]) -> Vec<u8> {
    let r = RecordRef {
        key: None,
        value: Some(b"v"),
        headers: &[],
        timestamp: 0,
    };
    let mut b = vec![0u8; batch_len(&[r])];
    encode_batch(&mut b, 0, &[r], ProducerFields::default(), 0);
    b.truncate(HEADER_LEN);
    b.extend_from_slice(&claimed.to_le_bytes());
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(data);
    b.resize(b.len().next_multiple_of(ALIGN), 0);
    let attributes = codec.bits() & CODEC_MASK;
    b[17..19].copy_from_slice(&attributes.to_le_bytes());
    let length = (b.len() - LENGTH_PREFIX) as u32;
    b[8..12].copy_from_slice(&length.to_le_bytes());
    let crc = crc32c::crc32c(&b[16..]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn bombs_are_refused_without_allocating() {
    const SLACK: u64 = 32 << 20;
    // 80 MiB of zeros, over the 64 MiB cap, compresses to very little.
    let zeros = vec![0u8; MAX_UNCOMPRESSED_LEN + (16 << 20)];
    let codecs = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let bombs: Vec<(Compression, Vec<u8>)> =
        codecs.iter().map(|&c| (c, compress(c, &zeros))).collect();
    drop(zeros);
    let before = vm_peak();
    for (codec, data) in &bombs {
        // Honest framing: the size is over the cap. The batch checks out
        // (recovery keeps it); reading its records is refused.
        let honest = batch(*codec, (MAX_UNCOMPRESSED_LEN + (16 << 20)) as u32, data);
        // The largest claim of all.
        let huge = batch(*codec, u32::MAX, data);
        for b in [&honest, &huge] {
            let h = match check(b) {
                Check::Valid(h) => h,
                other => panic!("{codec}: {other:?}"),
            };
            assert!(records_section(b, &h, MAX_UNCOMPRESSED_LEN).is_err());
            assert!(decompress_records(*codec, &b[HEADER_LEN..], MAX_UNCOMPRESSED_LEN).is_err());
        }
        // Lying framing: claims 1000 bytes, expands to 80 MiB. The batch
        // checks out (only decompression can tell), and decompression
        // stops at the claimed size.
        let lying = batch(*codec, 1000, data);
        let h = match check(&lying) {
            Check::Valid(h) => h,
            other => panic!("{codec}: {other:?}"),
        };
        assert!(
            records_section(&lying, &h, MAX_UNCOMPRESSED_LEN).is_err(),
            "{codec}"
        );
        // A claim within the cap, but above the caller's limit.
        let over_limit = batch(*codec, 2 << 20, data);
        assert!(decompress_records(*codec, &over_limit[HEADER_LEN..], 1 << 20).is_err());
    }
    let grown = vm_peak().saturating_sub(before);
    assert!(
        grown < SLACK,
        "peak virtual memory grew by {} MiB while refusing bombs",
        grown >> 20
    );
}
