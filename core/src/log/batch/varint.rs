//! Zigzag varints, as Kafka's record format stores lengths, deltas and
//! counts: 7 bits a byte, low bits first, the high bit set on every byte
//! but the last. Lengths and writes take one or two compares for numbers
//! whose zigzag form is below 2^14 (nearly all in a record); the rest go
//! out of line.

/// The zigzag form of `v`: small magnitudes, either sign, to small numbers.
#[inline(always)]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Number of bytes the zigzag varint encoding of `v` takes.
///
/// The lengths, deltas and counts of a record are nearly all below
/// 2^13: those take a compare or two, the rest the general count.
#[inline(always)]
pub fn varint_len(v: i64) -> usize {
    let z = zigzag(v);
    if z < 1 << 7 {
        1
    } else if z < 1 << 14 {
        2
    } else {
        long_varint_len(z)
    }
}

/// [`varint_len`] of a zigzag form of 2^14 or more.
#[inline(never)]
fn long_varint_len(z: u64) -> usize {
    // 1 byte per 7 bits, at least one.
    let bits = 64 - (z | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Writes the zigzag varint of `v` at `pos`; returns the position after it.
#[inline(always)]
pub(super) fn put_varint(buf: &mut [u8], pos: usize, v: i64) -> usize {
    let z = zigzag(v);
    if z < 1 << 7 {
        buf[pos] = z as u8;
        pos + 1
    } else if z < 1 << 14 {
        let b = &mut buf[pos..pos + 2];
        b[0] = (z as u8) | 0x80;
        b[1] = (z >> 7) as u8;
        pos + 2
    } else {
        put_long_varint(buf, pos, z)
    }
}

/// [`put_varint`] of a zigzag form of 2^14 or more.
#[inline(never)]
fn put_long_varint(buf: &mut [u8], mut pos: usize, mut z: u64) -> usize {
    while z >= 0x80 {
        buf[pos] = (z as u8) | 0x80;
        z >>= 7;
        pos += 1;
    }
    buf[pos] = z as u8;
    pos + 1
}

/// Reads a zigzag varint at `*pos`, bounds-checked; at most 10 bytes.
#[inline(always)]
pub(super) fn get_varint(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let first = *buf.get(*pos)?;
    if first < 0x80 {
        *pos += 1;
        return Some(i64::from(first >> 1) ^ -i64::from(first & 1));
    }
    if let Some(&second) = buf.get(*pos + 1) {
        if second < 0x80 {
            *pos += 2;
            let z = u64::from(first & 0x7f) | u64::from(second) << 7;
            return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    get_varint_slow(buf, pos)
}

#[inline(never)]
fn get_varint_slow(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut z: u64 = 0;
    let mut shift = 0;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        z |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
    Some(((z >> 1) as i64) ^ -((z & 1) as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths_match_encoding() {
        for v in [
            0i64,
            1,
            -1,
            63,
            64,
            -64,
            -65,
            8191,
            8192,
            -8192,
            -8193,
            1 << 20,
            i64::MAX,
            i64::MIN,
        ] {
            let mut b = [0u8; 10];
            let n = put_varint(&mut b, 0, v);
            assert_eq!(n, varint_len(v), "{v}");
            let mut p = 0;
            assert_eq!(get_varint(&b, &mut p), Some(v));
            assert_eq!(p, n);
        }
    }
}
