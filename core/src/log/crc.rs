//! CRC32C (Castagnoli, CRC-32/ISCSI), the checksum of every record batch
//! and of the recovery point file.
//!
//! Computed with `crc-fast`, which folds with carry-less multiplication
//! (PCLMULQDQ / VPCLMULQDQ) beside the CRC32 instruction: about twice the
//! speed of the `crc32c` crate's three-way CRC32 loop on large batches, which
//! readers check on every fetch (see docs/decisions.md). The value is the
//! same; the tests check it against `crc32c`.

use crc_fast::CrcAlgorithm;

/// Inputs up to this size are checked with a plain loop of CRC32
/// instructions: `crc-fast`'s dispatch and folding setup cost more than the
/// whole CRC of a small batch (see docs/decisions.md).
const SMALL: usize = 512;

/// The CRC32C of `bytes`.
#[inline]
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if bytes.len() <= SMALL && std::arch::is_x86_feature_detected!("sse4.2") {
        #[allow(unsafe_code)]
        // SAFETY: the CPU has SSE4.2 (checked just above), the only target
        // feature `crc32c_sse42` enables.
        return unsafe { crc32c_sse42(bytes) };
    }
    // CRC-32/ISCSI is a 32-bit CRC: the high half is always zero.
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// CRC32C with the SSE4.2 CRC32 instruction: 32 bytes per loop turn (four
/// instructions on one dependency chain, so the loop costs a compare and a
/// branch per 32 bytes rather than per 8), then the last 0-31 bytes in at
/// most six instructions (8, 8, 8, 4, 2 and 1 bytes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
#[allow(unsafe_code)]
unsafe fn crc32c_sse42(bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut c = u64::from(u32::MAX);
    let (blocks, rest) = bytes.as_chunks::<32>();
    for b in blocks {
        let (w, _) = b.as_chunks::<8>();
        c = _mm_crc32_u64(c, u64::from_le_bytes(w[0]));
        c = _mm_crc32_u64(c, u64::from_le_bytes(w[1]));
        c = _mm_crc32_u64(c, u64::from_le_bytes(w[2]));
        c = _mm_crc32_u64(c, u64::from_le_bytes(w[3]));
    }
    let (words, mut rest) = rest.as_chunks::<8>();
    for w in words {
        c = _mm_crc32_u64(c, u64::from_le_bytes(*w));
    }
    let mut c = c as u32;
    if let Some((w, r)) = rest.split_first_chunk::<4>() {
        c = _mm_crc32_u32(c, u32::from_le_bytes(*w));
        rest = r;
    }
    if let Some((w, r)) = rest.split_first_chunk::<2>() {
        c = _mm_crc32_u16(c, u16::from_le_bytes(*w));
        rest = r;
    }
    if let Some(&b) = rest.first() {
        c = _mm_crc32_u8(c, b);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::crc32c;

    #[test]
    fn matches_the_reference() {
        // The catalogue's check value, then the `crc32c` crate on sizes
        // around the implementation's block thresholds.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [
            1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 15, 16, 30, 31, 32, 33, 63, 64, 114, 127, 128, 255, 256,
            511, 512, 513, 1024, 4095, 4096, 65_537, 70_000,
        ] {
            for start in [0, 1, 3] {
                let d = &data[start..len.max(start)];
                assert_eq!(
                    crc32c(d),
                    ::crc32c::crc32c(d),
                    "len {} from {start}",
                    d.len()
                );
            }
        }
    }
}
