//! Cache-line prefetches for appends spread over many partitions.
//!
//! A key-spread batch sends one record to each of many partitions in turn:
//! each append then starts on cache lines (the partition's writer, its
//! active segment, the map page its bytes go to) last touched a thousand
//! appends ago, and waits for memory on each. The producer asks for the
//! next partitions' lines one and two appends ahead
//! ([`super::PartitionLog::prefetch_writer`],
//! [`super::PartitionLog::prefetch_tail`]), so that they arrive while the
//! current append runs. A prefetch is a hint: it never faults, whatever the
//! address (a stale or unmapped one included), and changes no data.

use std::sync::atomic::Ordering;

use super::PartitionLog;

impl PartitionLog {
    /// First of two steps warming this partition's cache lines up for an
    /// append soon (see the module documentation): its writer, and the
    /// hints [`PartitionLog::prefetch_tail`] reads. Call it two appends
    /// ahead.
    #[inline]
    pub(crate) fn prefetch_writer(&self) {
        let w = std::ptr::from_ref(&self.writer).cast::<u8>();
        read(w);
        read(w.wrapping_add(64));
        read(w.wrapping_add(128));
        // The first producer's sequence state, inline in the writer.
        read(w.wrapping_add(192));
        read(w.wrapping_add(256));
        read(std::ptr::from_ref(&self.hints).cast::<u8>());
    }

    /// Second step (see [`PartitionLog::prefetch_writer`], one append
    /// later): the active segment and the map line the next batch starts
    /// on, for writing. Reads the hints only; changes nothing.
    #[inline]
    pub(crate) fn prefetch_tail(&self) {
        let tail = self.hints.tail.load(Ordering::Relaxed);
        if tail != 0 {
            // A one-record batch of 100 B spans up to three lines.
            let tail = tail as *const u8;
            write(tail);
            write(tail.wrapping_add(64));
            write(tail.wrapping_add(128));
        }
        let seg = self.hints.segment.load(Ordering::Relaxed) as *const u8;
        if !seg.is_null() {
            read(seg);
            read(seg.wrapping_add(64));
            read(seg.wrapping_add(128));
        }
    }
}

/// Asks for the cache line holding `p`, to be read soon.
#[inline(always)]
pub(crate) fn read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch does not access memory architecturally: it cannot
    // fault and has no effect but on the caches, whatever `p` is.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for the cache line holding `p`, to be written soon (ownership of
/// the line where the processor supports it, a read prefetch otherwise).
#[inline(always)]
pub(crate) fn write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `read`: a hint that cannot fault or change memory.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0};
        _mm_prefetch::<_MM_HINT_ET0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Where a partition's next append will write first, as addresses to
/// prefetch (0: unknown). Only ever read to prefetch, never dereferenced:
/// a stale value (after a roll, a close) costs a useless prefetch, nothing
/// more.
#[derive(Debug, Default)]
pub(crate) struct Hints {
    /// The byte after the last batch written through the map.
    pub tail: std::sync::atomic::AtomicUsize,
    /// The active segment.
    pub segment: std::sync::atomic::AtomicUsize,
}
