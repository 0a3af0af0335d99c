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

/// CRC32C with the SSE4.2 CRC32 instruction, 8 bytes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
#[allow(unsafe_code)]
unsafe fn crc32c_sse42(bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut c = u64::from(u32::MAX);
    let (words, rest) = bytes.as_chunks::<8>();
    for w in words {
        c = _mm_crc32_u64(c, u64::from_le_bytes(*w));
    }
    let mut c = c as u32;
    for &b in rest {
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
            1, 7, 8, 15, 16, 31, 63, 64, 127, 128, 255, 256, 511, 512, 513, 1024, 4095, 4096,
            65_537, 70_000,
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
