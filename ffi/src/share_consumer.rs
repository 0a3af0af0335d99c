//! Share consumers: job-queue consumption (the engine's `ShareConsumer`).
//! The members of a share group take messages from any partition of the
//! topics they subscribe to, each message to one member at a time, and
//! settle each one: acknowledge, release, reject or renew.
//!
//! `mql_share_poll` is the engine's `ShareConsumer::poll_one`: one message
//! per call from what one engine poll took (up to `max_poll_records`
//! messages, all locked to the consumer at once).

use std::ffi::{c_char, c_int};
use std::time::Duration;

use mqlite::{Acks, OffsetReset, ShareConsumer, ShareConsumerConfig, ShareMessage};

use crate::broker::mql_broker;
use crate::config::mql_offset_reset;
use crate::error::{guard, guard_value, mql_status, Failure, FfiResult};
use crate::message::mql_message;
use crate::util::{arg, free, into_handle, out};

/// Settings of a share consumer, for `mql_share_consumer_new`. A plain
/// value: initialise it with `MQL_SHARE_CONSUMER_CONFIG_INIT` (the
/// defaults) and change fields. The strings are read (copied) by
/// `mql_share_consumer_new`.
///
/// The members of one share group in a process must agree on
/// `max_deliveries`, `max_in_flight` and `dead_letter_topic`
/// (`mql_share_consumer_new` fails with `MQL_INVALID_ARGUMENT` otherwise);
/// the other settings are each member's own.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct mql_share_consumer_config {
    /// This consumer's name, NUL-terminated: 1 to 249 characters of
    /// `[A-Za-z0-9._-]`, not `.` or `..`. NULL (the default): `"consumer"`.
    pub client_id: *const c_char,
    /// How long a message handed out stays locked to this consumer, in
    /// milliseconds (default 30000; at least 1). A message not settled by
    /// then is delivered again (to any member); `mql_share_ack` with
    /// `MQL_ACK_RENEW` extends the lock.
    pub lock_duration_ms: u64,
    /// Deliveries after which a message that was not acknowledged goes to
    /// the dead-letter topic (default 5; 0: no limit).
    pub max_deliveries: u32,
    /// Most offsets per partition read ahead of the first one not settled
    /// (default 2000; at least 1): past that, a partition is not read until
    /// messages are settled.
    pub max_in_flight: u32,
    /// Where dead letters go, NUL-terminated (created with one partition
    /// when missing). NULL (the default): `<topic>.<group>.dlq` for each
    /// source topic. A dead letter keeps the message's key, value, headers
    /// and timestamp and gains headers saying where it came from and why
    /// (`mqlite.dlq.topic`, `.partition`, `.offset`, `.deliveries`,
    /// `.reason`).
    pub dead_letter_topic: *const c_char,
    /// Most messages one fetch from the engine delivers (default 500; at
    /// least 1). `mql_share_poll` hands them out one per call; they are all
    /// locked to this consumer from the fetch on, so a small value leaves
    /// more messages to the other members.
    pub max_poll_records: usize,
    /// Where a partition the group never read starts: an `mql_offset_reset`
    /// value, `MQL_OFFSET_RESET_EARLIEST` (the default: messages produced
    /// before the first member are delivered) or `MQL_OFFSET_RESET_LATEST`.
    pub auto_offset_reset: c_int,
    /// How durable acknowledgements are when they return, as a producer's
    /// `acks`: -1 (all, the default: synced to disk; calls made at once
    /// share a sync), 1 or 0 (written to the operating system: they survive
    /// a crash of the process, not of the machine).
    pub commit_acks: c_int,
}

/// The defaults, as `MQL_SHARE_CONSUMER_CONFIG_INIT` in the header (written
/// in `cbindgen.toml`; a test checks the two agree with the engine).
pub(crate) const SHARE_CONSUMER_CONFIG_DEFAULT: mql_share_consumer_config =
    mql_share_consumer_config {
        client_id: std::ptr::null(),
        lock_duration_ms: 30_000,
        max_deliveries: 5,
        max_in_flight: 2000,
        dead_letter_topic: std::ptr::null(),
        max_poll_records: 500,
        auto_offset_reset: mql_offset_reset::Earliest as c_int,
        commit_acks: -1,
    };

impl mql_share_consumer_config {
    /// The engine's config for share group `group`, the strings given
    /// (read by the caller from the pointers). The engine checks the rest
    /// (names, ranges) when the consumer is made.
    fn to_core(
        self,
        group: &str,
        client_id: Option<&str>,
        dead_letter_topic: Option<&str>,
    ) -> FfiResult<ShareConsumerConfig> {
        let reset = match self.auto_offset_reset {
            r if r == mql_offset_reset::Earliest as c_int => OffsetReset::Earliest,
            r if r == mql_offset_reset::Latest as c_int => OffsetReset::Latest,
            r => {
                return Err(Failure::invalid(format!(
                    "share consumer config: auto_offset_reset must be MQL_OFFSET_RESET_EARLIEST or _LATEST, got {r}"
                )))
            }
        };
        let mut c = ShareConsumerConfig::group(group)
            .lock_duration_ms(self.lock_duration_ms)
            .max_deliveries(self.max_deliveries)
            .max_in_flight(self.max_in_flight)
            .max_poll_records(self.max_poll_records)
            .auto_offset_reset(reset)
            .commit_acks(Acks::from_i32(self.commit_acks)?);
        if let Some(id) = client_id {
            c = c.client_id(id);
        }
        if let Some(t) = dead_letter_topic {
            c = c.dead_letter_topic(t);
        }
        Ok(c)
    }
}

/// How `mql_share_ack` and `mql_share_ack_many` settle messages (passed as
/// `int`, so that any value is safe to pass; others give
/// `MQL_INVALID_ARGUMENT`).
///
/// cbindgen:prefix-with-name=false
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mql_ack_type {
    /// Done with: the message is never delivered again.
    MQL_ACK_ACCEPT = 0,
    /// Given back at once: delivered again (to any member), without holding
    /// back the messages behind it (`mql_share_release` with a delay).
    MQL_ACK_RELEASE = 1,
    /// Sent to the dead-letter topic now, with the reason `"rejected"`
    /// (`mql_share_reject` gives a reason of your own); never delivered
    /// again.
    MQL_ACK_REJECT = 2,
    /// The lock extended by `lock_duration_ms` from now.
    MQL_ACK_RENEW = 3,
}

/// What a settlement does.
enum Settle<'a> {
    Accept,
    Release(u64),
    Reject(&'a str),
    Renew,
}

impl Settle<'_> {
    fn from_ack_type(t: c_int) -> FfiResult<Settle<'static>> {
        Ok(match t {
            t if t == mql_ack_type::MQL_ACK_ACCEPT as c_int => Settle::Accept,
            t if t == mql_ack_type::MQL_ACK_RELEASE as c_int => Settle::Release(0),
            t if t == mql_ack_type::MQL_ACK_REJECT as c_int => Settle::Reject("rejected"),
            t if t == mql_ack_type::MQL_ACK_RENEW as c_int => Settle::Renew,
            t => {
                return Err(Failure::invalid(format!(
                    "the ack type must be one of the mql_ack_type values, got {t}"
                )))
            }
        })
    }
}

/// What a share consumer did so far (`mql_share_consumer_stats_get`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct mql_share_consumer_stats {
    /// Messages delivered to this consumer (deliveries again included):
    /// those `mql_share_poll` handed out and those it fetched and holds
    /// for its next calls.
    pub records: u64,
    /// Of those, deliveries of a message delivered before.
    pub redelivered: u64,
    /// Fetches from the engine (`mql_share_poll` fetches when it has
    /// handed out every message of the previous fetch).
    pub polls: u64,
    /// Messages acknowledged.
    pub acked: u64,
    /// Messages released.
    pub released: u64,
    /// Messages rejected.
    pub rejected: u64,
    /// Messages this consumer sent to the dead-letter topic (rejected, or
    /// delivered `max_deliveries` times).
    pub dead_lettered: u64,
    /// Locks found run out by this consumer's fetches.
    pub expired: u64,
    /// Fetches that found a partition's window full (`max_in_flight`
    /// offsets read ahead of the first not settled) and did not read it.
    pub window_full: u64,
    /// Messages skipped because retention deleted them before they were
    /// delivered.
    pub skipped: u64,
}

/// A member of a share group. Made by `mql_share_consumer_new`, released
/// by `mql_share_consumer_free`. Use it from one thread at a time (it may
/// move between threads).
pub struct mql_share_consumer {
    inner: ShareConsumer,
    /// The subscribed topics (the engine's subscribe takes the whole list).
    topics: Vec<String>,
}

/// A message delivered to a share consumer. Made by `mql_share_poll`,
/// released by `mql_share_message_free`; it may outlive its consumer
/// (settling it then fails). Immutable: safe to read from several threads
/// at once.
pub struct mql_share_message {
    inner: ShareMessage,
    /// The message, for the `mql_message_*` accessors.
    view: mql_message,
}

impl mql_share_consumer {
    fn check_open(&self) -> FfiResult {
        // Closed by `mql_share_consumer_close` or with its broker.
        if self.inner.is_closed() {
            return Err(mqlite::Error::Closed("share consumer").into());
        }
        Ok(())
    }

    fn subscribe_more(&mut self, more: &[&str]) -> FfiResult {
        self.check_open()?;
        if more.is_empty() {
            return Ok(());
        }
        let mut topics = self.topics.clone();
        for &t in more {
            if !topics.iter().any(|s| s == t) {
                topics.push(t.to_owned());
            }
        }
        // The engine changes nothing when it fails (e.g. an invalid name).
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        self.inner.subscribe(&names)?;
        self.topics = topics;
        Ok(())
    }

    /// The next message, waiting up to `timeout_ms` (negative: no limit).
    fn next(&mut self, timeout_ms: i32) -> FfiResult<ShareMessage> {
        self.check_open()?;
        if self.topics.is_empty() {
            return Err(Failure::invalid(
                "the share consumer has no subscription (call mql_share_subscribe first)",
            ));
        }
        let wait = if timeout_ms < 0 {
            Duration::from_secs(3600)
        } else {
            Duration::from_millis(timeout_ms.unsigned_abs().into())
        };
        loop {
            if let Some(m) = self.inner.poll_one(wait)? {
                return Ok(m);
            }
            if timeout_ms >= 0 {
                return Err(mqlite::Error::Timeout(wait.as_millis() as u64).into());
            }
        }
    }

    /// Settles `messages` at once, all or nothing.
    fn settle(&self, messages: &[ShareMessage], how: &Settle<'_>) -> FfiResult {
        self.check_open()?;
        match *how {
            Settle::Accept => self.inner.ack(messages)?,
            Settle::Release(ms) => self.inner.release(messages, Duration::from_millis(ms))?,
            Settle::Reject(reason) => self.inner.reject(messages, reason)?,
            Settle::Renew => self.inner.renew(messages)?,
        }
        Ok(())
    }
}

/// Makes a member of share group `group` (1 to 243 characters of
/// `[A-Za-z0-9._-]`, not `.` or `..`; its state is kept in the data
/// directory's `groups/<group>.share`, apart from consumer groups of the
/// same name). `config` may be NULL for the defaults (it is copied). It
/// reads nothing until `mql_share_subscribe`.
///
/// A share group is used by one process at a time; in it, by any number of
/// members, which share its messages: each message goes to one member at a
/// time, until it is settled or its lock runs out.
///
/// Errors: `MQL_INVALID_ARGUMENT` (a group or client id breaking the naming
/// rules, a setting out of range, settings other than those of the group's
/// members open in this process), `MQL_INVALID_TOPIC_NAME` (the
/// dead-letter topic), `MQL_LOCKED` (another process uses the group; exclusive mode only),
/// `MQL_READ_ONLY`, `MQL_CLOSED`, I/O errors (reading the group's state).
///
/// Ownership: on `MQL_OK`, `*out` is a new share consumer owned by the
/// caller; release it with `mql_share_consumer_free` (before or after
/// `mql_close` of its broker).
///
/// # Safety
/// `broker` is NULL or a live broker; `group` is NULL or a NUL-terminated
/// string; `config` is NULL or valid for reading an
/// `mql_share_consumer_config` whose strings are NULL or NUL-terminated;
/// `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_share_consumer_new(
    broker: *mut mql_broker,
    group: *const c_char,
    config: *const mql_share_consumer_config,
    out: *mut *mut mql_share_consumer,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let group = arg!(str group);
        let config = arg!(opt_ref config);
        let out = out!(out);
        let raw = config.copied().unwrap_or(SHARE_CONSUMER_CONFIG_DEFAULT);
        let client_id = raw.client_id;
        let dead_letter_topic = raw.dead_letter_topic;
        // The fields are named as the argument's (`config->client_id`).
        let client_id = arg!(@call opt_str(client_id, "config->client_id"))?;
        let dead_letter_topic =
            arg!(@call opt_str(dead_letter_topic, "config->dead_letter_topic"))?;
        let config = raw.to_core(group, client_id, dead_letter_topic)?;
        let inner = b.inner.share_consumer(config)?;
        let handle = mql_share_consumer {
            inner,
            topics: Vec::new(),
        };
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(handle)) };
        Ok(())
    })
}

/// Adds `topic` to the share consumer's subscription: it takes messages
/// from every partition of the subscribed topics, including partitions
/// added later. A topic that does not exist yet is read once it is
/// created. Subscribing to a topic twice is harmless. Messages already
/// fetched are still handed out.
///
/// Errors: `MQL_INVALID_TOPIC_NAME` (nothing changes then), `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call (the consumer copies the
/// names it keeps); nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live share consumer; `topic` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_share_subscribe(
    consumer: *mut mql_share_consumer,
    topic: *const c_char,
) -> mql_status {
    guard(|| {
        let sc = arg!(mut consumer);
        let topic = arg!(str topic);
        sc.subscribe_more(&[topic])
    })
}

/// Adds the `n` topics of the array `topics` to the subscription, all or
/// none, like `mql_share_subscribe`. With `n` 0 nothing changes (`topics`
/// may then be NULL).
///
/// Errors: `MQL_INVALID_TOPIC_NAME` (nothing changes then), `MQL_CLOSED`,
/// `MQL_NULL_ARGUMENT` (also for a NULL element).
///
/// Ownership: borrows every argument for the call (the consumer copies the
/// names it keeps); nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live share consumer; `topics` is NULL or points
/// to `n` pointers, each NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_share_subscribe_many(
    consumer: *mut mql_share_consumer,
    topics: *const *const c_char,
    n: usize,
) -> mql_status {
    guard(|| {
        let sc = arg!(mut consumer);
        let raw = arg!(slice topics, n);
        let mut names = Vec::with_capacity(raw.len());
        for (i, &t) in raw.iter().enumerate() {
            names.push(arg!(@call arg_str(t, &format!("topics[{i}]")))?);
        }
        sc.subscribe_more(&names)
    })
}

/// Returns the next message in `*out`, locked to this consumer for
/// `lock_duration_ms` from now, waiting up to `timeout_ms` milliseconds for
/// one (0: do not wait; negative: wait as long as it takes). Messages due
/// again (released, or whose lock ran out) come first, then new ones.
/// Settle each with `mql_share_ack` (or `mql_share_release`,
/// `mql_share_reject`) before its lock runs out; `mql_share_message_delivery_count`
/// says how often it was delivered.
///
/// The consumer takes up to `max_poll_records` messages at once and hands
/// them out one per call. They are locked to it from the moment it took
/// them; one is handed out only while at least half of its lock is left:
/// after that the consumer gives the rest back to the group (delivered
/// again, to any member, their delivery not counted) and takes anew. A
/// consumer that needs more than half a lock per message should lower
/// `max_poll_records`.
///
/// Returns `MQL_TIMEOUT`, with `*out` untouched, when nothing arrived in
/// time.
///
/// Errors: `MQL_INVALID_ARGUMENT` (nothing subscribed), `MQL_CLOSED` (the
/// share consumer or its broker was closed), `MQL_CORRUPT`, I/O errors (reading the log, writing the group's state:
/// nothing is delivered then).
///
/// Ownership: on `MQL_OK`, `*out` is a new message owned by the caller;
/// release it with `mql_share_message_free` (settling it does not).
///
/// # Safety
/// `consumer` is NULL or a live share consumer; `out` is NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_share_poll(
    consumer: *mut mql_share_consumer,
    timeout_ms: i32,
    out: *mut *mut mql_share_message,
) -> mql_status {
    guard(|| {
        let sc = arg!(mut consumer);
        let out = out!(out);
        let m = sc.next(timeout_ms)?;
        let view = mql_message::new(m.message().clone());
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(mql_share_message { inner: m, view })) };
        Ok(())
    })
}

/// Settles message `message` of this consumer as `type` says (an
/// `mql_ack_type`): `MQL_ACK_ACCEPT` (done with), `MQL_ACK_RELEASE`
/// (delivered again now), `MQL_ACK_REJECT` (to the dead-letter topic, with
/// the reason `"rejected"`) or `MQL_ACK_RENEW` (its lock extended). An
/// acknowledgement is durable as `commit_acks` says when this returns.
///
/// Errors: `MQL_INVALID_RECORD_STATE` (this delivery of the message is not
/// held by this consumer: its lock ran out, it was settled already, or it
/// came from another consumer; nothing changes), `MQL_INVALID_ARGUMENT`
/// (an unknown `type`), `MQL_CLOSED` (the share consumer or its broker was
/// closed), I/O errors; for a rejection, errors
/// of the send to the dead-letter topic (the message is then still to be
/// dead-lettered: the next fetch tries again).
///
/// Ownership: borrows every argument for the call; the message stays the
/// caller's (free it with `mql_share_message_free`).
///
/// # Safety
/// `consumer` is NULL or a live share consumer; `message` is NULL or a live
/// share message.
#[no_mangle]
pub unsafe extern "C" fn mql_share_ack(
    consumer: *mut mql_share_consumer,
    message: *const mql_share_message,
    r#type: c_int,
) -> mql_status {
    guard(|| {
        let sc = arg!(ref consumer);
        let m = arg!(ref message);
        let how = Settle::from_ack_type(r#type)?;
        sc.settle(std::slice::from_ref(&m.inner), &how)
    })
}

/// Gives message `message` back: it is delivered again (to any member)
/// once `delay_ms` milliseconds have passed (0: now). The messages behind
/// it are delivered meanwhile.
///
/// Errors: as `mql_share_ack`.
///
/// Ownership: borrows every argument for the call; the message stays the
/// caller's.
///
/// # Safety
/// `consumer` is NULL or a live share consumer; `message` is NULL or a live
/// share message.
#[no_mangle]
pub unsafe extern "C" fn mql_share_release(
    consumer: *mut mql_share_consumer,
    message: *const mql_share_message,
    delay_ms: u64,
) -> mql_status {
    guard(|| {
        let sc = arg!(ref consumer);
        let m = arg!(ref message);
        sc.settle(std::slice::from_ref(&m.inner), &Settle::Release(delay_ms))
    })
}

/// Sends message `message` to the dead-letter topic now, with `reason`
/// (UTF-8) in its `mqlite.dlq.reason` header; it is never delivered again.
///
/// Errors: as `mql_share_ack`.
///
/// Ownership: borrows every argument for the call; the message stays the
/// caller's.
///
/// # Safety
/// `consumer` is NULL or a live share consumer; `message` is NULL or a live
/// share message; `reason` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_share_reject(
    consumer: *mut mql_share_consumer,
    message: *const mql_share_message,
    reason: *const c_char,
) -> mql_status {
    guard(|| {
        let sc = arg!(ref consumer);
        let m = arg!(ref message);
        let reason = arg!(str reason);
        sc.settle(std::slice::from_ref(&m.inner), &Settle::Reject(reason))
    })
}

/// Settles the `n` messages of the array `messages` at once, as `type`
/// says (see `mql_share_ack`): one write and one sync for all of them,
/// all or nothing. With `n` 0 nothing changes (`messages` may then be
/// NULL).
///
/// Errors: as `mql_share_ack`; `MQL_INVALID_RECORD_STATE` if any of them is
/// not held by this consumer (none is settled then); `MQL_NULL_ARGUMENT`
/// (also for a NULL element).
///
/// Ownership: borrows every argument for the call; the messages stay the
/// caller's.
///
/// # Safety
/// `consumer` is NULL or a live share consumer; `messages` is NULL or
/// points to `n` pointers, each NULL or a live share message.
#[no_mangle]
pub unsafe extern "C" fn mql_share_ack_many(
    consumer: *mut mql_share_consumer,
    messages: *const *const mql_share_message,
    n: usize,
    r#type: c_int,
) -> mql_status {
    guard(|| {
        let sc = arg!(ref consumer);
        let raw = arg!(slice messages, n);
        let mut batch = Vec::with_capacity(raw.len());
        for (i, &p) in raw.iter().enumerate() {
            let m = arg!(@call arg_ref(p, &format!("messages[{i}]")))?;
            // A reference-counted view: no record data is copied.
            batch.push(m.inner.clone());
        }
        let how = Settle::from_ack_type(r#type)?;
        sc.settle(&batch, &how)
    })
}

/// What the share consumer did so far, into `*out`. Allowed on a closed
/// share consumer, and after its broker was closed.
///
/// Ownership: borrows `consumer` for the call; the results are plain
/// values; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live share consumer; `out` is NULL or valid for
/// writing an `mql_share_consumer_stats`.
#[no_mangle]
pub unsafe extern "C" fn mql_share_consumer_stats_get(
    consumer: *mut mql_share_consumer,
    out: *mut mql_share_consumer_stats,
) -> mql_status {
    guard(|| {
        let sc = arg!(ref consumer);
        let out = out!(out);
        let s = sc.inner.stats();
        let stats = mql_share_consumer_stats {
            records: s.records,
            redelivered: s.redelivered,
            polls: s.polls,
            acked: s.acked,
            released: s.released,
            rejected: s.rejected,
            dead_lettered: s.dead_lettered,
            expired: s.expired,
            window_full: s.window_full,
            skipped: s.skipped,
        };
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(stats) };
        Ok(())
    })
}

/// Closes a share consumer: it leaves its group, and the messages it holds
/// (handed out and not settled, or fetched and not handed out yet) are
/// delivered again to the other members. Later calls fail with
/// `MQL_CLOSED` (settling included); closing again does nothing. The handle
/// must still be released with `mql_share_consumer_free`.
///
/// Ownership: borrows `consumer` for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live share consumer.
#[no_mangle]
pub unsafe extern "C" fn mql_share_consumer_close(consumer: *mut mql_share_consumer) -> mql_status {
    guard(|| {
        let sc = arg!(mut consumer);
        sc.inner.close();
        Ok(())
    })
}

/// Closes (like `mql_share_consumer_close`) and releases a share consumer.
/// NULL does nothing. Messages it returned stay valid until they are
/// freed (settling them fails).
///
/// Ownership: takes back the share consumer the caller owned; do not use
/// it afterwards.
///
/// # Safety
/// `consumer` is NULL or a live share consumer from
/// `mql_share_consumer_new`, not used again.
#[no_mangle]
pub unsafe extern "C" fn mql_share_consumer_free(consumer: *mut mql_share_consumer) {
    free!(consumer);
}

/// The message itself, for the `mql_message_*` accessors (topic,
/// partition, offset, timestamp, key, value, headers, id); NULL if
/// `message` is NULL.
///
/// Ownership: borrowed from the share message, valid (as is every pointer
/// its accessors return) until `mql_share_message_free`; do not pass it to
/// `mql_message_free`.
///
/// # Safety
/// `message` is NULL or a live share message.
#[no_mangle]
pub unsafe extern "C" fn mql_share_message_message(
    message: *const mql_share_message,
) -> *const mql_message {
    guard_value(std::ptr::null(), || {
        let m = arg!(ref message else std::ptr::null());
        std::ptr::from_ref(&m.view)
    })
}

/// How many times the message was delivered, this delivery included (1
/// the first time); 0 if `message` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `message` is NULL or a live share message.
#[no_mangle]
pub unsafe extern "C" fn mql_share_message_delivery_count(
    message: *const mql_share_message,
) -> u32 {
    guard_value(0, || {
        let m = arg!(ref message else 0);
        m.inner.delivery_count()
    })
}

/// Releases a share message (settled or not: freeing settles nothing). NULL
/// does nothing.
///
/// Ownership: takes back the message the caller owned; every pointer its
/// accessors returned dies with it.
///
/// # Safety
/// `message` is NULL or a live share message from `mql_share_poll`, not
/// used again (nor any pointer its accessors returned).
#[no_mangle]
pub unsafe extern "C" fn mql_share_message_free(message: *mut mql_share_message) {
    free!(message);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(c: mql_share_consumer_config) -> Option<ShareConsumerConfig> {
        c.to_core("g", None, None).ok()
    }

    #[test]
    fn default_config_is_the_engines() {
        assert_eq!(
            core(SHARE_CONSUMER_CONFIG_DEFAULT),
            Some(ShareConsumerConfig::group("g"))
        );
        // The header's MQL_SHARE_CONSUMER_CONFIG_INIT spells the same values.
        let toml = include_str!("../cbindgen.toml");
        assert!(toml.contains(
            "#define MQL_SHARE_CONSUMER_CONFIG_INIT { NULL, 30000, 5, 2000, NULL, 500, MQL_OFFSET_RESET_EARLIEST, -1 }"
        ));
    }

    #[test]
    fn config_values_are_converted_or_refused() {
        let mut c = SHARE_CONSUMER_CONFIG_DEFAULT;
        c.auto_offset_reset = mql_offset_reset::Latest as c_int;
        c.commit_acks = 0;
        let got = c.to_core("g", Some("me"), Some("dead")).ok().map(|c| {
            (
                c.auto_offset_reset,
                c.commit_acks,
                c.client_id,
                c.dead_letter_topic,
            )
        });
        assert_eq!(
            got,
            Some((
                OffsetReset::Latest,
                Acks::Zero,
                "me".to_owned(),
                Some("dead".to_owned())
            ))
        );
        let bad = |f: fn(&mut mql_share_consumer_config)| {
            let mut c = SHARE_CONSUMER_CONFIG_DEFAULT;
            f(&mut c);
            core(c).is_none()
        };
        assert!(bad(
            |c| c.auto_offset_reset = mql_offset_reset::Error as c_int
        ));
        assert!(bad(|c| c.auto_offset_reset = 7));
        assert!(bad(|c| c.commit_acks = 2));
    }

    #[test]
    fn ack_types_are_checked() {
        assert!(matches!(Settle::from_ack_type(0), Ok(Settle::Accept)));
        assert!(matches!(Settle::from_ack_type(1), Ok(Settle::Release(0))));
        assert!(matches!(
            Settle::from_ack_type(2),
            Ok(Settle::Reject("rejected"))
        ));
        assert!(matches!(Settle::from_ack_type(3), Ok(Settle::Renew)));
        let e = Settle::from_ack_type(4).err().map(|f| f.status);
        assert_eq!(e, Some(mql_status::MQL_INVALID_ARGUMENT));
    }
}
