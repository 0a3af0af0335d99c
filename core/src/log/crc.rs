//! CRC32C (Castagnoli, CRC-32/ISCSI), the checksum of every record batch
//! and of the recovery point file.
//!
//! Computed with `crc-fast`, which folds with carry-less multiplication
//! (PCLMULQDQ / VPCLMULQDQ) beside the CRC32 instruction: about twice the
//! speed of the `crc32c` crate's three-way CRC32 loop on large batches, which
//! readers check on every fetch (see docs/decisions.md). The value is the
//! same; the tests check it against `crc32c`.

use crc_fast::CrcAlgorithm;

/// The CRC32C of `bytes`.
#[inline]
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    // CRC-32/ISCSI is a 32-bit CRC: the high half is always zero.
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
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
            1, 7, 8, 15, 16, 31, 63, 64, 127, 128, 255, 256, 511, 1024, 4095, 4096, 65_537, 70_000,
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
