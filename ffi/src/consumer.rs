//! Consumers: subscription, manual assignment, positions and polling.

use std::collections::VecDeque;
use std::ffi::c_char;
use std::time::Duration;

use mqlite::{Consumer, ConsumerConfig, Message};

use crate::broker::mql_broker;
use crate::config::mql_consumer_config;
use crate::error::{guard, guard_value, mql_status, Failure, FfiResult};
use crate::message::mql_message;
use crate::util::{
    arg_mut, arg_ref, arg_slice, arg_str, free_handle, into_handle, opt_ref, opt_str, Out,
};

/// Reads records from subscribed topics or assigned partitions. Made by
/// `mql_consumer_new`, released by `mql_consumer_free`. Use it from one
/// thread at a time (it may move between threads).
pub struct mql_consumer {
    inner: Consumer,
    /// Subscribed topics (the engine's subscribe takes the whole list).
    topics: Vec<String>,
    /// Manually assigned partitions (likewise for assign).
    partitions: Vec<(String, u32)>,
    /// Messages fetched from the engine but not yet handed out by
    /// `mql_poll`, in order.
    buffer: VecDeque<Message>,
}

impl mql_consumer {
    /// Drops buffered messages of partitions no longer assigned.
    fn prune_buffer(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let assigned = self.inner.assignment();
        self.buffer.retain(|m| {
            assigned
                .iter()
                .any(|(t, p)| t == m.topic() && *p == m.partition())
        });
    }

    fn subscribe_more(&mut self, more: &[&str]) -> FfiResult {
        if more.is_empty() {
            return Ok(());
        }
        let mut topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        for t in more {
            if !topics.contains(t) {
                topics.push(t);
            }
        }
        // The engine changes nothing when it fails (e.g. an unknown topic).
        self.inner.subscribe(&topics)?;
        self.topics = topics.into_iter().map(str::to_owned).collect();
        self.partitions.clear();
        self.prune_buffer();
        Ok(())
    }
}

/// Makes a consumer. `group_id` may be NULL for a standalone consumer;
/// `config` may be NULL for the defaults (it is copied). It reads nothing
/// until `mql_subscribe` or `mql_assign`.
///
/// Ownership: on `MQL_OK`, `*out` is a new consumer owned by the caller;
/// release it with `mql_consumer_free` (before or after `mql_close` of its
/// broker).
///
/// # Safety
/// `broker` is NULL or a live broker; `group_id` is NULL or a
/// NUL-terminated string; `config` is NULL or a live consumer config; `out`
/// is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_new(
    broker: *mut mql_broker,
    group_id: *const c_char,
    config: *const mql_consumer_config,
    out: *mut *mut mql_consumer,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all four).
        let b = unsafe { arg_ref(broker, "broker") }?;
        // SAFETY: as above.
        let group_id = unsafe { opt_str(group_id, "group_id") }?;
        // SAFETY: as above.
        let config = unsafe { opt_ref(config, "config") }?;
        let out = Out::new(out, "out")?;
        let mut config = config.map_or_else(ConsumerConfig::default, |c| c.inner.clone());
        config.group_id = group_id.map(str::to_owned);
        let inner = b.inner.consumer(config)?;
        let handle = mql_consumer {
            inner,
            topics: Vec::new(),
            partitions: Vec::new(),
            buffer: VecDeque::new(),
        };
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(handle)) };
        Ok(())
    })
}

/// Stops and releases a consumer. NULL does nothing. Messages it returned
/// stay valid until they are freed.
///
/// Ownership: takes back the consumer the caller owned; do not use it afterwards.
///
/// # Safety
/// `consumer` is NULL or a live consumer from `mql_consumer_new`, not used
/// again.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_free(consumer: *mut mql_consumer) {
    guard_value((), || {
        // SAFETY: forwarded caller contract.
        if let Ok(c) = unsafe { arg_mut(consumer, "consumer") } {
            c.inner.close();
        }
        // SAFETY: forwarded caller contract.
        unsafe { free_handle(consumer) }
    })
}

/// Adds `topic` to the consumer's subscription: it reads every partition of
/// the subscribed topics, including partitions added later. A manual
/// assignment (`mql_assign`) is replaced by the subscription. Subscribing
/// to a topic twice is harmless.
///
/// Errors: `MQL_UNKNOWN_TOPIC` (nothing changes then), `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call (the consumer copies the names it keeps); nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `topic` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_subscribe(
    consumer: *mut mql_consumer,
    topic: *const c_char,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let c = unsafe { arg_mut(consumer, "consumer") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        c.subscribe_more(&[topic])
    })
}

/// Adds the `n` topics of the array `topics` to the subscription, all or
/// none, like `mql_subscribe`. With `n` 0 nothing changes (`topics` may
/// then be NULL).
///
/// Errors: `MQL_UNKNOWN_TOPIC` (nothing changes then), `MQL_CLOSED`,
/// `MQL_NULL_ARGUMENT` (also for a NULL element).
///
/// Ownership: borrows every argument for the call (the consumer copies the names it keeps); nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `topics` is NULL or points to `n`
/// pointers, each NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_subscribe_many(
    consumer: *mut mql_consumer,
    topics: *const *const c_char,
    n: usize,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let c = unsafe { arg_mut(consumer, "consumer") }?;
        // SAFETY: as above.
        let raw = unsafe { arg_slice(topics, n, "topics") }?;
        let mut names = Vec::with_capacity(raw.len());
        for (i, &t) in raw.iter().enumerate() {
            // SAFETY: as above.
            names.push(unsafe { arg_str(t, &format!("topics[{i}]")) }?);
        }
        c.subscribe_more(&names)
    })
}

/// Adds partition `partition` of `topic` to the consumer's manual
/// assignment (replacing a subscription made with `mql_subscribe`). A
/// partition kept across calls keeps its position.
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION` (nothing changes
/// then), `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call (the consumer copies the names it keeps); nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `topic` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_assign(
    consumer: *mut mql_consumer,
    topic: *const c_char,
    partition: u32,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let c = unsafe { arg_mut(consumer, "consumer") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        let mut list: Vec<(&str, u32)> =
            c.partitions.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        if !list.contains(&(topic, partition)) {
            list.push((topic, partition));
        }
        c.inner.assign(&list)?;
        c.partitions = list.into_iter().map(|(t, p)| (t.to_owned(), p)).collect();
        c.topics.clear();
        c.prune_buffer();
        Ok(())
    })
}

/// Drops the consumer's whole subscription and assignment; it reads nothing
/// until the next `mql_subscribe` or `mql_assign`.
///
/// Errors: `MQL_CLOSED`.
///
/// Ownership: borrows `consumer` for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer.
#[no_mangle]
pub unsafe extern "C" fn mql_unsubscribe(consumer: *mut mql_consumer) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let c = unsafe { arg_mut(consumer, "consumer") }?;
        c.inner.assign(&[])?;
        c.topics.clear();
        c.partitions.clear();
        c.buffer.clear();
        Ok(())
    })
}

/// Sets the next offset `mql_poll` returns from an assigned partition (one
/// of a subscribed topic, or one added with `mql_assign`).
///
/// Errors: `MQL_OFFSET_OUT_OF_RANGE` (the offset is not between the first
/// retained offset and the end, inclusive), `MQL_INVALID_ARGUMENT` (the
/// partition is not assigned to this consumer), `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `topic` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_seek(
    consumer: *mut mql_consumer,
    topic: *const c_char,
    partition: u32,
    offset: u64,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let c = unsafe { arg_mut(consumer, "consumer") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        c.inner.seek(topic, partition, offset)?;
        c.buffer
            .retain(|m| !(m.partition() == partition && m.topic() == topic));
        Ok(())
    })
}

/// The offset of the next message `mql_poll` will return from an assigned
/// partition, into `*out`.
///
/// Errors: `MQL_INVALID_ARGUMENT` (the partition is not assigned),
/// `MQL_OFFSET_OUT_OF_RANGE` (no valid position and the reset policy is
/// `MQL_OFFSET_RESET_ERROR`), `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; the results are plain values; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `topic` is NULL or a
/// NUL-terminated string; `out` is NULL or valid for writing a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_position(
    consumer: *mut mql_consumer,
    topic: *const c_char,
    partition: u32,
    out: *mut u64,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all three).
        let c = unsafe { arg_mut(consumer, "consumer") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        let out = Out::new(out, "out")?;
        let engine = c.inner.position(topic, partition)?;
        // Fetched but not yet handed out: still ahead of the application.
        let position = c
            .buffer
            .iter()
            .find(|m| m.partition() == partition && m.topic() == topic)
            .map_or(engine, Message::offset);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(position) };
        Ok(())
    })
}

/// Returns the next message in `*out`, waiting up to `timeout_ms`
/// milliseconds for one to arrive (0: do not wait; negative: wait as long
/// as it takes). Messages come in offset order per partition, fairly across
/// partitions.
///
/// Returns `MQL_TIMEOUT`, with `*out` untouched, when nothing arrived in
/// time.
///
/// Errors: `MQL_INVALID_ARGUMENT` (nothing subscribed or assigned),
/// `MQL_OFFSET_OUT_OF_RANGE` (with `MQL_OFFSET_RESET_ERROR`), `MQL_CLOSED`,
/// `MQL_CORRUPT`, I/O errors.
///
/// Ownership: on `MQL_OK`, `*out` is a new message owned by the caller;
/// release it with `mql_message_free`.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `out` is NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_poll(
    consumer: *mut mql_consumer,
    timeout_ms: i32,
    out: *mut *mut mql_message,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let c = unsafe { arg_mut(consumer, "consumer") }?;
        let out = Out::new(out, "out")?;
        if c.inner.is_closed() {
            // Messages fetched before the close are not handed out.
            c.buffer.clear();
            return Err(mqlite::Error::Closed("consumer").into());
        }
        if c.buffer.is_empty() {
            if c.topics.is_empty() && c.partitions.is_empty() {
                return Err(Failure::invalid(
                    "the consumer has no subscription or assignment (call mql_subscribe or mql_assign first)",
                ));
            }
            let fetched = if timeout_ms < 0 {
                loop {
                    let v = c.inner.poll(Duration::from_secs(3600))?;
                    if !v.is_empty() {
                        break v;
                    }
                }
            } else {
                c.inner.poll(Duration::from_millis(timeout_ms as u64))?
            };
            if fetched.is_empty() {
                return Err(mqlite::Error::Timeout(timeout_ms as u64).into());
            }
            c.buffer.extend(fetched);
        }
        let m = c
            .buffer
            .pop_front()
            .ok_or_else(|| Failure::invalid("no message"))?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(mql_message::new(m))) };
        Ok(())
    })
}
