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
