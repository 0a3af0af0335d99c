//! Flow control and stored offsets of consumers: pausing and resuming
//! partitions (`mql_pause`, `mql_resume`, `mql_paused`) and offsets stored
//! by the application for the next commit (`mql_store_offsets`, with
//! `mql_consumer_config_set_enable_auto_offset_store` off). Each forwards
//! to the engine's consumer, or to its rebalance context when called from
//! a rebalance callback. Also the listing of partitions into a caller's
//! array that `mql_paused` and `mql_assignment` share.

use std::ffi::c_char;

use crate::consumer::{mql_consumer, mql_topic_partition, Access};
use crate::error::{guard, mql_status, Failure, FfiResult};
use crate::util::{arg_ref, arg_slice, arg_str, Out, OutArray};

/// A partition and an offset, for `mql_store_offsets`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mql_partition_offset {
    /// The topic, NUL-terminated.
    pub topic: *const c_char,
    /// The partition.
    pub partition: u32,
    /// The next offset to read: the last processed plus one.
    pub offset: u64,
}

impl Access<'_> {
    fn pause(&mut self, partitions: &[(&str, u32)]) -> mqlite::Result<()> {
        match self {
            Access::Normal(s) => s.inner.pause(partitions),
            Access::Callback(c) => c.pause(partitions),
        }
    }

    fn resume(&mut self, partitions: &[(&str, u32)]) -> mqlite::Result<()> {
        match self {
            Access::Normal(s) => s.inner.resume(partitions),
            Access::Callback(c) => c.resume(partitions),
        }
    }

    fn paused(&mut self) -> Vec<(String, u32)> {
        match self {
            Access::Normal(s) => s.inner.paused(),
            Access::Callback(c) => c.paused(),
        }
    }

    fn store_offsets(&mut self, offsets: &[(&str, u32, u64)]) -> mqlite::Result<()> {
        match self {
            Access::Normal(s) => s.inner.store_offsets(offsets),
            Access::Callback(c) => c.store_offsets(offsets),
        }
    }
}

/// The `n` partitions of `partitions` as `(topic, partition)` pairs.
///
/// # Safety
/// `partitions` is NULL or points to `n` entries whose topics are NULL or
/// NUL-terminated strings.
unsafe fn pairs<'a>(
    partitions: *const mql_topic_partition,
    n: usize,
) -> FfiResult<Vec<(&'a str, u32)>> {
    // SAFETY: forwarded caller contract.
    let raw = unsafe { arg_slice(partitions, n, "partitions") }?;
    raw.iter()
        .enumerate()
        .map(|(i, e)| {
            // SAFETY: as above.
            let t = unsafe { arg_str(e.topic, &format!("partitions[{i}].topic")) }?;
            Ok((t, e.partition))
        })
        .collect()
}

/// The body of `mql_pause` and `mql_resume`.
///
/// # Safety
/// As theirs.
unsafe fn flow(
    consumer: *mut mql_consumer,
    partitions: *const mql_topic_partition,
    n: usize,
    what: &str,
    f: impl FnOnce(&mut Access<'_>, &[(&str, u32)]) -> mqlite::Result<()>,
) -> FfiResult {
    // SAFETY: forwarded caller contract (for both).
    let h = unsafe { arg_ref(consumer, "consumer") }?;
    // SAFETY: as above.
    let list = unsafe { pairs(partitions, n) }?;
    h.any(what, |mut a| {
        if a.is_closed() {
            return Err(mqlite::Error::Closed("consumer").into());
        }
        Ok(f(&mut a, &list)?)
    })
}

/// Stops reading the `n` partitions of `partitions` until `mql_resume`
/// (Kafka's `pause`): `mql_poll` and `mql_poll_batch` return nothing of
/// theirs (messages fetched for them and not handed out yet are put back),
/// but they stay assigned: a group member keeps them and their positions,
/// and commits cover them. Pausing a paused partition changes nothing; a
/// rebalance that takes a partition away forgets that it was paused. With
/// `n` 0 nothing changes (`partitions` may then be NULL). Allowed from a
/// rebalance callback.
///
/// Errors: `MQL_INVALID_ARGUMENT` (a partition is not assigned to this
/// consumer, or of a topic or partition that does not exist: nothing is
/// paused then), `MQL_NULL_ARGUMENT` (also for a NULL topic),
/// `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `partitions` is NULL or points to
/// `n` entries whose topics are NULL or NUL-terminated strings.
#[no_mangle]
// A closure: the method path does not satisfy the higher-ranked bound.
#[allow(clippy::redundant_closure_for_method_calls)]
pub unsafe extern "C" fn mql_pause(
    consumer: *mut mql_consumer,
    partitions: *const mql_topic_partition,
    n: usize,
) -> mql_status {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe { flow(consumer, partitions, n, "mql_pause", |a, l| a.pause(l)) })
}

/// Reads the `n` partitions of `partitions` again after `mql_pause`, from
/// their positions. Resuming a partition that is not paused changes
/// nothing. With `n` 0 nothing changes (`partitions` may then be NULL).
/// Allowed from a rebalance callback.
///
/// Errors: `MQL_INVALID_ARGUMENT` (a partition is not assigned: nothing is
/// resumed then), `MQL_NULL_ARGUMENT` (also for a NULL topic),
/// `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `partitions` is NULL or points to
/// `n` entries whose topics are NULL or NUL-terminated strings.
#[no_mangle]
// A closure: the method path does not satisfy the higher-ranked bound.
#[allow(clippy::redundant_closure_for_method_calls)]
pub unsafe extern "C" fn mql_resume(
    consumer: *mut mql_consumer,
    partitions: *const mql_topic_partition,
    n: usize,
) -> mql_status {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe { flow(consumer, partitions, n, "mql_resume", |a, l| a.resume(l)) })
}

/// The paused partitions, like `mql_assignment`: writes the first
/// `min(n, capacity)` of them to `partitions` and their number `n` to
/// `*count`; call with `partitions` NULL and `capacity` 0 to get the count
/// only. The topic names are owned by the consumer and stay valid until it
/// is freed. Allowed from a rebalance callback.
///
/// Errors: `MQL_CLOSED`; `MQL_NULL_ARGUMENT` for a NULL `partitions` with
/// a nonzero `capacity`. Nothing is written then.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `partitions` is NULL or valid for
/// writing `capacity` elements; `count` is NULL or valid for writing a
/// `size_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_paused(
    consumer: *mut mql_consumer,
    partitions: *mut mql_topic_partition,
    capacity: usize,
    count: *mut usize,
) -> mql_status {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe {
        write_partitions(consumer, partitions, capacity, count, "mql_paused", |a| {
            a.paused()
        })
    })
}

/// Stores the `n` entries of `offsets` as processed, for the next commit
/// (`mql_commit`, or automatic with auto-commit) to take (all or nothing):
/// each entry's `offset` is the next offset to read, the last processed
/// plus one (Kafka's `store_offsets`). With
/// `mql_consumer_config_set_enable_auto_offset_store` off, commits take
/// only what was stored: the at-least-once idiom (store after processing).
/// Nothing is written until a commit. With `n` 0 nothing changes
/// (`offsets` may then be NULL). Allowed from a rebalance callback.
///
/// Errors: `MQL_INVALID_ARGUMENT` (auto offset store is on, the consumer
/// has no group id, or a partition is not assigned: nothing is stored
/// then), `MQL_NULL_ARGUMENT` (also for a NULL topic), `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `offsets` is NULL or points to
/// `n` entries whose topics are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn mql_store_offsets(
    consumer: *mut mql_consumer,
    offsets: *const mql_partition_offset,
    n: usize,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let raw = unsafe { arg_slice(offsets, n, "offsets") }?;
        let mut list = Vec::with_capacity(raw.len());
        for (i, e) in raw.iter().enumerate() {
            // SAFETY: as above.
            let t = unsafe { arg_str(e.topic, &format!("offsets[{i}].topic")) }?;
            list.push((t, e.partition, e.offset));
        }
        h.any("mql_store_offsets", |mut a| {
            if a.is_closed() {
                return Err(mqlite::Error::Closed("consumer").into());
            }
            Ok(a.store_offsets(&list)?)
        })
    })
}

/// The body of a call that lists partitions into a caller's array
/// (`mql_assignment`, `mql_paused`): the partitions `list` gives, the first
/// `capacity` of them into `partitions`, and how many there are into
/// `*count`.
///
/// # Safety
/// As the calls': `consumer` is NULL or a live consumer; `partitions` is
/// NULL or valid for writing `capacity` elements; `count` is NULL or valid
/// for writing a `size_t`.
pub(crate) unsafe fn write_partitions(
    consumer: *mut mql_consumer,
    partitions: *mut mql_topic_partition,
    capacity: usize,
    count: *mut usize,
    what: &str,
    list: impl FnOnce(&mut Access<'_>) -> Vec<(String, u32)>,
) -> FfiResult<()> {
    // SAFETY: forwarded caller contract.
    let h = unsafe { arg_ref(consumer, "consumer") }?;
    if partitions.is_null() && capacity > 0 {
        return Err(Failure::null("partitions"));
    }
    let count = Out::new(count, "count")?;
    let all = h.any(what, |mut a| {
        if a.is_closed() {
            return Err(mqlite::Error::Closed("consumer").into());
        }
        Ok(list(&mut a))
    })?;
    let n = all.len().min(capacity);
    let out = OutArray::optional(partitions, n, "partitions")?;
    let entries: Vec<mql_topic_partition> = all[..n]
        .iter()
        .map(|(t, p)| mql_topic_partition {
            topic: h.name_ptr(t),
            partition: *p,
        })
        .collect();
    // SAFETY: both are valid for writes by the caller's contract
    // (`partitions` for `capacity` >= n elements).
    unsafe {
        if let Some(out) = out {
            out.write(&entries);
        }
        count.write(all.len());
    }
    Ok(())
}
