//! Mirrors: copies of a topic between a data directory and a Kafka cluster
//! (the engine's `Mirror`), once or until stopped, with stats readable
//! from any thread while they run.

use std::ffi::{c_char, c_int};

use mqlite::{Mirror, MirrorOptions, MirrorStats};

use crate::broker::mql_broker;
use crate::error::{guard, guard_value, mql_status};
use crate::util::{arg_ref, arg_str, free_handle, into_handle, Out, TextOut};

/// A copy of one topic between a data directory and a Kafka cluster
/// (`mql_mirror_new`). Opaque.
pub struct mql_mirror {
    inner: Mirror,
}

/// What a copy did, and how far behind its destination is
/// (`mql_mirror_run`, `mql_mirror_get_stats`, `mql_mirror_status`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct mql_mirror_stats {
    /// Records written to the destination.
    pub copied: u64,
    /// Writes to the destination.
    pub batches: u64,
    /// Records of the source not copied yet (when last looked).
    pub lag: u64,
    /// Errors met (a continuous copy starts again after each; the last one
    /// in words: `mql_mirror_last_error`).
    pub errors: u64,
    /// How long the copy has run, in milliseconds.
    pub elapsed_ms: u64,
    /// Records copied per second, on average since the copy started.
    pub rate: f64,
    /// The source's partition count.
    pub partitions: u32,
}

impl From<&MirrorStats> for mql_mirror_stats {
    fn from(s: &MirrorStats) -> Self {
        mql_mirror_stats {
            copied: s.copied,
            batches: s.batches,
            lag: s.lag(),
            errors: s.errors,
            elapsed_ms: u64::try_from(s.elapsed.as_millis()).unwrap_or(u64::MAX),
            rate: s.rate(),
            partitions: u32::try_from(s.partitions.len()).unwrap_or(u32::MAX),
        }
    }
}

/// Makes a copy of `topic`, for `mql_mirror_run`. `follow` non-zero:
/// the copy keeps copying what arrives until `mql_mirror_stop`, starting
/// again after errors that may pass (the cluster out of reach, a full
/// disk, a topic not there yet), counted in the stats; 0: it stops once
/// caught up, at the first error. `max_batch`: records per write to the
/// destination, at most (0: the default, 500).
///
/// Errors: `MQL_NULL_ARGUMENT` (`topic`, `out`), `MQL_INVALID_TOPIC_NAME`.
///
/// Ownership: on `MQL_OK`, `*out` is the caller's: release it with
/// `mql_mirror_free`.
///
/// # Safety
/// `topic` is NULL or a NUL-terminated string; `out` is NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_mirror_new(
    topic: *const c_char,
    follow: c_int,
    max_batch: u64,
    out: *mut *mut mql_mirror,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let topic = unsafe { arg_str(topic, "topic") }?;
        let out = Out::new(out, "out")?;
        let defaults = MirrorOptions::default();
        let options = MirrorOptions {
            once: follow == 0,
            max_batch: match max_batch {
                0 => defaults.max_batch,
                n => usize::try_from(n).unwrap_or(usize::MAX),
            },
            ..defaults
        };
        let inner = Mirror::new(topic, options)?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(mql_mirror { inner })) };
        Ok(())
    })
}

/// Copies the mirror's topic from `source` to `destination` (one a data
/// directory, the other a Kafka cluster opened with
/// `mql_open("kafka://...")`), creating it in the destination with the
/// source's partition count when missing; blocks until caught up or,
/// with `follow`, until `mql_mirror_stop`. Nothing is lost or written
/// twice across runs: each copy carries its source offset in the header
/// `mqlite.mirror.offset`, and a run resumes after the last one the
/// destination holds. Partitions map one to one, or by key when the
/// counts differ. On `MQL_OK`, writes what the copy did to `*stats`
/// (NULL: not wanted).
///
/// Errors: `MQL_NULL_ARGUMENT`; `MQL_INVALID_ARGUMENT` (both brokers
/// directories or both clusters, or the mirror running already);
/// `MQL_CLOSED`; `MQL_UNKNOWN_TOPIC` (the source has no such topic,
/// without `follow`); errors of either side (without `follow`, the first
/// stops the copy: what it wrote stays, and the next run resumes after
/// it).
///
/// Ownership: borrows every argument for the call; the results are plain
/// values; nothing to free.
///
/// # Safety
/// `mirror`, `source` and `destination` are NULL or live handles;
/// `stats` is NULL or valid for writing an `mql_mirror_stats`.
#[no_mangle]
pub unsafe extern "C" fn mql_mirror_run(
    mirror: *const mql_mirror,
    source: *const mql_broker,
    destination: *const mql_broker,
    stats: *mut mql_mirror_stats,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all three).
        let m = unsafe { arg_ref(mirror, "mirror") }?;
        // SAFETY: as above.
        let source = unsafe { arg_ref(source, "source") }?;
        // SAFETY: as above.
        let destination = unsafe { arg_ref(destination, "destination") }?;
        let stats = Out::optional(stats, "stats")?;
        let s = m.inner.run(&source.inner, &destination.inner)?;
        if let Some(out) = stats {
            // SAFETY: valid for writes by the caller's contract.
            unsafe { out.write((&s).into()) };
        }
        Ok(())
    })
}

/// Ends a `follow` copy: its `mql_mirror_run` returns after the write in
/// progress. Safe to call from any thread while the mirror runs. A
/// stopped mirror stays stopped.
///
/// Errors: `MQL_NULL_ARGUMENT`.
///
/// Ownership: borrows `mirror` for the call; nothing to free.
///
/// # Safety
/// `mirror` is NULL or a live mirror.
#[no_mangle]
pub unsafe extern "C" fn mql_mirror_stop(mirror: *const mql_mirror) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let m = unsafe { arg_ref(mirror, "mirror") }?;
        m.inner.stop();
        Ok(())
    })
}

/// What the copy has done so far, and its lag when last looked, into
/// `*out`. Safe to call from any thread while the mirror runs.
///
/// Errors: `MQL_NULL_ARGUMENT`.
///
/// Ownership: borrows `mirror` for the call; the results are plain
/// values; nothing to free.
///
/// # Safety
/// `mirror` is NULL or a live mirror; `out` is NULL or valid for writing
/// an `mql_mirror_stats`.
#[no_mangle]
pub unsafe extern "C" fn mql_mirror_get_stats(
    mirror: *const mql_mirror,
    out: *mut mql_mirror_stats,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let m = unsafe { arg_ref(mirror, "mirror") }?;
        let out = Out::new(out, "out")?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe { out.write((&m.inner.stats()).into()) };
        Ok(())
    })
}

/// The last error the copy met, in words, into `buf` like `snprintf`
/// (an empty text when it met none); its length (without the NUL) into
/// `*len_out` when not NULL. `buf` may be NULL when `buf_len` is 0.
///
/// Errors: `MQL_NULL_ARGUMENT` (`mirror`; `buf` with a length).
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `mirror` is NULL or a live mirror; `buf` is NULL or valid for writing
/// `buf_len` bytes; `len_out` is NULL or valid for writing a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_mirror_last_error(
    mirror: *const mql_mirror,
    buf: *mut c_char,
    buf_len: usize,
    len_out: *mut usize,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let m = unsafe { arg_ref(mirror, "mirror") }?;
        let text = TextOut::new(buf, buf_len, len_out, "buf")?;
        let last = m.inner.stats().last_error.unwrap_or_default();
        // SAFETY: valid for writes by the caller's contract.
        unsafe { text.write(last.as_bytes()) };
        Ok(())
    })
}

/// How far `destination` is behind `source` on `topic`, read from what
/// copies wrote into the destination, without copying, into `*out`
/// (`lag` and `partitions`; the other counts are 0).
///
/// Errors: `MQL_NULL_ARGUMENT`, `MQL_INVALID_TOPIC_NAME`,
/// `MQL_INVALID_ARGUMENT` (both directories or both clusters),
/// `MQL_UNKNOWN_TOPIC` (the source has no such topic), `MQL_CLOSED`,
/// errors of either side.
///
/// Ownership: borrows every argument for the call; the results are plain
/// values; nothing to free.
///
/// # Safety
/// `source` and `destination` are NULL or live brokers; `topic` is NULL
/// or a NUL-terminated string; `out` is NULL or valid for writing an
/// `mql_mirror_stats`.
#[no_mangle]
pub unsafe extern "C" fn mql_mirror_status(
    source: *const mql_broker,
    destination: *const mql_broker,
    topic: *const c_char,
    out: *mut mql_mirror_stats,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all three).
        let source = unsafe { arg_ref(source, "source") }?;
        // SAFETY: as above.
        let destination = unsafe { arg_ref(destination, "destination") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        let out = Out::new(out, "out")?;
        mqlite::validate_topic_name(topic)?;
        let s = mqlite::kafka::mirror::status(&source.inner, &destination.inner, topic)?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe { out.write((&s).into()) };
        Ok(())
    })
}

/// Releases a mirror. NULL does nothing. Not while it runs: stop it and
/// wait for `mql_mirror_run` to return first.
///
/// Ownership: takes back the mirror the caller owned; do not use it
/// afterwards.
///
/// # Safety
/// `mirror` is NULL or a live mirror from `mql_mirror_new`, not running
/// and not used again.
#[no_mangle]
pub unsafe extern "C" fn mql_mirror_free(mirror: *mut mql_mirror) {
    // SAFETY: forwarded caller contract.
    guard_value((), || unsafe { free_handle(mirror) });
}
