//! Consumers: subscription, manual assignment, positions and polling.
//! (Commits, rebalance callbacks and group descriptions are in `group.rs`.)
//!
//! `mql_poll` forwards to the engine's `poll_one`, which hands out one
//! message at a time from what one fetch brought, with exact positions,
//! commits and rebalances; `mql_poll_batch` to its `poll`. The handle keeps
//! only what C's calls need and the engine's do not take: the subscription
//! built up one `mql_subscribe`/`mql_assign` at a time, and the topic
//! names handed to C.
//!
//! # Calls from a rebalance callback
//!
//! The engine runs the rebalance listener inside `poll_one`, `subscribe`
//! and `close`, with a `RebalanceContext` (commit, seek, position,
//! assignment...). The glue stores a pointer to it in
//! [`mql_consumer::lent`] for the duration of the C callback; a call the
//! callback makes on the same handle uses the context instead of the
//! handle's state (which the outer call holds mutably and which is never
//! touched meanwhile). Calls the context does not offer (`mql_poll`,
//! `mql_subscribe*`, `mql_assign`, `mql_unsubscribe`,
//! `mql_consumer_close`, `mql_consumer_free`) are refused there with
//! `MQL_INVALID_ARGUMENT`.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use mqlite::{Consumer, ConsumerConfig, ConsumerWaker, RebalanceContext};

use crate::broker::mql_broker;
use crate::config::mql_consumer_config;
use crate::error::{c_text, guard, guard_value, mql_status, record_failure, Failure, FfiResult};
use crate::flow::write_partitions;
use crate::group::{CListener, RebalanceCallback};
use crate::message::{mql_message, mql_message_batch};
use crate::producer::MQL_OFFSET_UNKNOWN;
use crate::util::{
    arg_ref, arg_slice, arg_str, free_handle, into_handle, opt_ref, opt_str, Out, OutArray,
};

/// Reads records from subscribed topics or assigned partitions. Made by
/// `mql_consumer_new`, released by `mql_consumer_free`. Use it from one
/// thread at a time (it may move between threads).
pub struct mql_consumer {
    /// What ordinary calls use (see [`mql_consumer::normal`]); `None`
    /// while the engine's consumer is lent to a processor
    /// (`mql_processor_new` to `mql_processor_free`).
    state: UnsafeCell<Option<State>>,
    /// While a rebalance callback runs: the consumer the engine lent to the
    /// listener (see the module docs).
    lent: Cell<Lending>,
    /// The C rebalance callback, read by the listener glue at each event.
    pub(crate) rebalance: Cell<Option<RebalanceCallback>>,
    /// NUL-terminated topic names handed to C. Entries are never removed
    /// and a `CString`'s bytes never move, so the pointers stay valid until
    /// the consumer is freed.
    names: RefCell<HashMap<Box<str>, CString>>,
    /// Wakes the engine's `poll` (for `mql_consumer_waker`).
    waker: ConsumerWaker,
}

/// The state of ordinary calls.
pub(crate) struct State {
    pub(crate) inner: Consumer,
    /// What the consumer reads (the engine's subscribe and assign take
    /// whole lists).
    sub: Subscription,
}

pub(crate) enum Subscription {
    None,
    Topics(Vec<String>),
    Pattern,
    Partitions(Vec<(String, u32)>),
}

/// Whether the engine lent its rebalance context to the listener.
#[derive(Clone, Copy)]
pub(crate) enum Lending {
    /// No rebalance callback runs.
    Idle,
    /// A rebalance callback runs; calls it makes use this context.
    Lent(NonNull<RebalanceContext<'static>>),
    /// A call made from a rebalance callback is using the lent consumer.
    InUse,
}

// SAFETY: the pointer exists only while a rebalance callback runs, which
// is inside a call on the consumer on the current thread; a handle is
// never used by two threads at once (documented contract), so the pointer
// is never used from another thread. Moving the handle between threads
// between calls moves no live pointer.
unsafe impl Send for Lending {}

/// Calls into a consumer: an ordinary one (the whole state), or one from a
/// rebalance callback (the engine's rebalance context).
pub(crate) enum Access<'a> {
    Normal(&'a mut State),
    Callback(&'a mut RebalanceContext<'static>),
}

/// Methods of [`Access`] that forward to the engine's consumer or to the
/// rebalance context, which have them under the same names.
macro_rules! forward {
    ($($(#[$doc:meta])* fn $name:ident(&mut self $(, $a:ident: $t:ty)*) -> $r:ty;)*) => {
        impl Access<'_> {
            $(
                $(#[$doc])*
                pub(crate) fn $name(&mut self $(, $a: $t)*) -> $r {
                    match self {
                        Access::Normal(s) => s.inner.$name($($a),*),
                        Access::Callback(c) => c.$name($($a),*),
                    }
                }
            )*
        }
    };
}

forward! {
    /// The partitions read.
    fn assignment(&mut self) -> Vec<(String, u32)>;
    /// `seek`.
    fn seek(&mut self, topic: &str, partition: u32, offset: u64) -> mqlite::Result<()>;
    /// `seek_to_beginning`.
    fn seek_to_beginning(&mut self, topic: &str, partition: u32) -> mqlite::Result<()>;
    /// `seek_to_end`.
    fn seek_to_end(&mut self, topic: &str, partition: u32) -> mqlite::Result<()>;
    /// `position`.
    fn position(&mut self, topic: &str, partition: u32) -> mqlite::Result<u64>;
    /// `offsets_for_times`.
    fn offsets_for_times(&mut self, query: &[(&str, u32, i64)]) -> mqlite::Result<Vec<Option<u64>>>;
    /// `commit`.
    fn commit(&mut self) -> mqlite::Result<()>;
    /// `commit_offsets`.
    fn commit_offsets(&mut self, offsets: &[(&str, u32, u64, &str)]) -> mqlite::Result<()>;
    /// `committed`.
    fn committed(&mut self, topic: &str, partition: u32) -> mqlite::Result<Option<mqlite::CommittedOffset>>;
    /// `lag`.
    fn lag(&mut self) -> mqlite::Result<Vec<(String, u32, u64)>>;
    /// `stats`.
    fn stats(&mut self) -> mqlite::ConsumerStats;
}

impl Access<'_> {
    /// The member id, empty when not a member.
    pub(crate) fn member_id(&mut self) -> String {
        match self {
            Access::Normal(s) => s.inner.member_id(),
            Access::Callback(c) => c.member_id(),
        }
        .unwrap_or("")
        .to_owned()
    }

    /// Whether the consumer was closed (never while a callback runs).
    pub(crate) fn is_closed(&mut self) -> bool {
        match self {
            Access::Normal(s) => s.inner.is_closed(),
            Access::Callback(_) => false,
        }
    }
}

/// Puts a value back into a cell when dropped (also on a panic).
struct Restore<'a, T: Copy>(&'a Cell<T>, T);

impl<T: Copy> Drop for Restore<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.0.set(self.1);
    }
}

impl mql_consumer {
    /// Runs `f` for a call allowed everywhere, including from a rebalance
    /// callback.
    pub(crate) fn any<R>(
        &self,
        what: &str,
        f: impl FnOnce(Access<'_>) -> FfiResult<R>,
    ) -> FfiResult<R> {
        match self.lent.get() {
            Lending::Idle => self.normal(what, |s| f(Access::Normal(s))),
            Lending::InUse => Err(busy(what)),
            Lending::Lent(p) => {
                // While `f` runs the pointer is marked in use, so that a
                // nested call (none is expected: `f` calls no C code)
                // would be refused rather than make a second `&mut`.
                self.lent.set(Lending::InUse);
                let _back = Restore(&self.lent, Lending::Lent(p));
                // SAFETY: `p` was made from the `&mut RebalanceContext` the
                // engine passed to the listener, which is still running (it
                // is lent only for the duration of the C callback); neither
                // the engine nor the outer call uses the context until the
                // callback returns, and no other reference made from `p`
                // is live (it is marked in use above). The reference does
                // not outlive `f` (the `'static` is never observable: the
                // context's methods return owned values).
                let c = unsafe { &mut *p.as_ptr() };
                f(Access::Callback(c))
            }
        }
    }

    /// Runs `f` for an ordinary call, with the whole state; refused inside
    /// a rebalance callback and while the consumer is lent to a processor.
    #[inline]
    pub(crate) fn normal<R>(
        &self,
        what: &str,
        f: impl FnOnce(&mut State) -> FfiResult<R>,
    ) -> FfiResult<R> {
        self.slot(what, |slot| match slot {
            Some(state) => f(state),
            None => Err(Failure::invalid(format!(
                "{what}: the consumer is lent to a processor (free the processor with mql_processor_free to get it back)"
            ))),
        })
    }

    /// Runs `f` with the state slot (empty while lent to a processor);
    /// refused inside a rebalance callback.
    pub(crate) fn slot<R>(
        &self,
        what: &str,
        f: impl FnOnce(&mut Option<State>) -> FfiResult<R>,
    ) -> FfiResult<R> {
        match self.lent.get() {
            Lending::Idle => {}
            Lending::Lent(_) => {
                return Err(Failure::invalid(format!(
                    "{what} may not be called from a rebalance callback"
                )))
            }
            Lending::InUse => return Err(busy(what)),
        }
        // SAFETY: no other reference to the state exists: calls come from
        // one thread at a time (documented contract), and the only calls
        // that can start while another runs are those of a rebalance
        // callback (the one way C code runs inside a call on a consumer, or
        // inside `mql_processor_run` of a processor it is lent to, on the
        // same thread), during which `lent` is not `Idle`, so they never
        // get here. The reference lives only while `f` runs.
        let state = unsafe { &mut *self.state.get() };
        f(state)
    }

    /// Lends `ctx` to calls from a rebalance callback until the returned
    /// guard is dropped.
    pub(crate) fn lend<'a>(&'a self, ctx: &mut RebalanceContext<'_>) -> impl Drop + 'a {
        let before = self.lent.replace(Lending::Lent(NonNull::from(ctx).cast()));
        Restore(&self.lent, before)
    }

    /// `topic` as a NUL-terminated string owned by the consumer, valid
    /// until it is freed.
    pub(crate) fn name_ptr(&self, topic: &str) -> *const c_char {
        let mut names = self.names.borrow_mut();
        if let Some(c) = names.get(topic) {
            return c.as_ptr();
        }
        let c = c_text(topic.to_owned());
        let p = c.as_ptr();
        names.insert(topic.into(), c);
        p
    }
}

fn busy(what: &str) -> Failure {
    Failure::invalid(format!(
        "{what} was called on a consumer already inside another call"
    ))
}

impl State {
    /// Takes the state apart for a processor: the engine's consumer (with
    /// the messages it holds) and what stays behind.
    pub(crate) fn lend_out(self) -> (Consumer, Subscription) {
        (self.inner, self.sub)
    }

    /// The state again, from what [`State::lend_out`] returned.
    pub(crate) fn give_back(inner: Consumer, sub: Subscription) -> State {
        State { inner, sub }
    }

    /// Whether the consumer has a subscription or assignment.
    pub(crate) fn subscribed(&self) -> bool {
        !matches!(self.sub, Subscription::None)
    }

    /// Whether subscriptions join a group that shares partitions.
    fn clustering(&self) -> bool {
        let config = self.inner.config();
        config.group_id.is_some() && !config.broadcast
    }

    /// Works around a gap of the engine for consumers outside a group's
    /// sharing (standalone or broadcast), after a successful `subscribe` or
    /// `assign` (`redo`): it keeps an earlier pattern subscription, which
    /// then overrides the new topics or partitions, so that is dropped
    /// (`unsubscribe`) and the call repeated.
    fn drop_old_pattern(
        &mut self,
        redo: impl Fn(&mut Consumer) -> mqlite::Result<()>,
    ) -> FfiResult {
        if self.clustering() || !matches!(self.sub, Subscription::Pattern) {
            return Ok(());
        }
        self.inner.unsubscribe();
        Ok(redo(&mut self.inner)?)
    }

    /// Moves a broadcast consumer's subscribed partitions to its committed
    /// offsets (where they are still retained): the engine starts them at
    /// the reset policy.
    fn resume_broadcast(&mut self) {
        if !self.inner.config().broadcast {
            return;
        }
        for (t, p) in self.inner.assignment() {
            if let Ok(Some(c)) = self.inner.committed(&t, p) {
                // Out of range (retention removed it): the reset policy
                // applies, as for any position that is gone.
                let _ = self.inner.seek(&t, p, c.offset);
            }
        }
    }

    fn subscribe_more(&mut self, more: &[&str]) -> FfiResult {
        if more.is_empty() {
            return Ok(());
        }
        let mut topics: Vec<String> = match &self.sub {
            Subscription::Topics(t) => t.clone(),
            _ => Vec::new(),
        };
        for &t in more {
            if !topics.iter().any(|s| s == t) {
                topics.push(t.to_owned());
            }
        }
        // The engine changes nothing when it fails (e.g. an invalid name).
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        self.inner.subscribe(&names)?;
        self.drop_old_pattern(|c| c.subscribe(&names))?;
        self.sub = Subscription::Topics(topics);
        self.resume_broadcast();
        Ok(())
    }
}

/// A topic and one of its partitions.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mql_topic_partition {
    /// The topic, NUL-terminated.
    pub topic: *const c_char,
    /// The partition.
    pub partition: u32,
}

/// A partition and a time, for `mql_offsets_for_times`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mql_partition_timestamp {
    /// The topic, NUL-terminated.
    pub topic: *const c_char,
    /// The partition.
    pub partition: u32,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
}

/// What a consumer did so far (`mql_consumer_get_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct mql_consumer_stats {
    /// Messages `mql_poll` handed out.
    pub records: u64,
    /// Bytes of keys and values of those messages.
    pub bytes: u64,
    /// Polls: calls to `mql_poll` and `mql_poll_batch` (a call that waits
    /// without a limit counts once per hour of waiting).
    pub polls: u64,
    /// Group rebalances this consumer took part in.
    pub rebalances: u64,
    /// Messages skipped because retention deleted them before they were
    /// read (the reset policy moved the position past them).
    pub skipped: u64,
    /// Commits made (manual and automatic).
    pub commits: u64,
    /// Committed offsets found beyond the end of their partition's log
    /// (recovery cut the log below them) and reset by the reset policy.
    pub offset_resets: u64,
}

/// Wakes a consumer blocked in `mql_poll` from another thread. Made by
/// `mql_consumer_waker`, released by `mql_waker_free`. Safe to use from
/// several threads at once, and after its consumer was freed (it then
/// does nothing).
pub struct mql_waker {
    inner: ConsumerWaker,
}

/// Makes a consumer. `group_id` may be NULL for a standalone consumer (it
/// cannot commit); `config` may be NULL for the defaults (it is copied).
/// It reads nothing until `mql_subscribe` or `mql_assign`.
///
/// Errors: `MQL_INVALID_ARGUMENT` (a group id or client id breaking the
/// naming rules, a group id of more than 243 bytes, or in broadcast mode
/// group id, `+` and client id of more than 243 together; broadcast mode
/// without a group id), `MQL_CLOSED`, I/O errors (reading the group's
/// committed offsets).
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
            waker: inner.waker(),
            state: UnsafeCell::new(Some(State {
                inner,
                sub: Subscription::None,
            })),
            lent: Cell::new(Lending::Idle),
            rebalance: Cell::new(None),
            names: RefCell::new(HashMap::new()),
        };
        let raw = into_handle(handle);
        // The engine's listener for every subscription: it calls the C
        // callback set at the time of each rebalance, if any.
        let handle = NonNull::new(raw).expect("Box::into_raw is never NULL");
        let listener = Box::new(CListener::new(handle));
        // SAFETY: as above; nothing else uses the handle yet.
        let set = unsafe { &*raw }.normal("mql_consumer_new", |c| {
            c.inner.set_rebalance_listener(Some(listener));
            Ok(())
        });
        if let Err(f) = set {
            // SAFETY: `raw` came from into_handle and is not used again.
            unsafe { free_handle(raw) };
            return Err(f);
        }
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(raw) };
        Ok(())
    })
}

/// Closes (like `mql_consumer_close`) and releases a consumer. NULL does
/// nothing. Messages it returned stay valid until they are freed.
///
/// Not allowed from the consumer's own rebalance callback: the call then
/// does nothing (the last error says so).
///
/// Ownership: takes back the consumer the caller owned; do not use it
/// afterwards.
///
/// # Safety
/// `consumer` is NULL or a live consumer from `mql_consumer_new`, not used
/// again.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_free(consumer: *mut mql_consumer) {
    guard_value((), || {
        if consumer.is_null() {
            return;
        }
        // SAFETY: forwarded caller contract.
        let closed = unsafe { arg_ref(consumer, "consumer") }.and_then(|h| {
            h.normal("mql_consumer_free", |c| {
                c.inner.close();
                Ok(())
            })
        });
        match closed {
            // SAFETY: forwarded caller contract; no call on it is running
            // (`normal` refused the one way a call could be: from its
            // rebalance callback), and `h` is not used any more.
            Ok(()) => unsafe { free_handle(consumer) },
            Err(f) => record_failure(f),
        }
    });
}

/// Closes a consumer: a group member commits (with auto-commit; exactly
/// the messages `mql_poll` handed out) and leaves its group, running its
/// rebalance callback's revoke, so its partitions go to the other members
/// at once. Later calls fail with `MQL_CLOSED`; closing again does nothing.
/// The handle must still be released with `mql_consumer_free`.
///
/// Errors: `MQL_INVALID_ARGUMENT` from the consumer's own rebalance
/// callback.
///
/// Ownership: borrows `consumer` for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_close(consumer: *mut mql_consumer) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        h.normal("mql_consumer_close", |c| {
            c.inner.close();
            Ok(())
        })
    })
}

/// Adds `topic` to the consumer's subscription: it reads every partition of
/// the subscribed topics, including partitions added later. A manual
/// assignment (`mql_assign`) or pattern subscription is replaced.
/// Subscribing to a topic twice is harmless.
///
/// With a group id (and not in broadcast mode) the consumer joins the
/// group: its members share the partitions, and the share changes as
/// members come and go (see `mql_consumer_set_rebalance_callback`). A
/// member that changes its subscription leaves and joins again (revoking
/// what it owned, with a commit when auto-commit is on). A topic that does
/// not exist yet is read once it is created (as Kafka's consumer waits for
/// it).
///
/// Errors: `MQL_INVALID_TOPIC_NAME` (nothing changes then),
/// `MQL_INVALID_ARGUMENT` (the group uses another assignment strategy, or
/// from a rebalance callback), `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call (the consumer copies the
/// names it keeps); nothing to free.
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
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        h.normal("mql_subscribe", |c| c.subscribe_more(&[topic]))
    })
}

/// Adds the `n` topics of the array `topics` to the subscription, all or
/// none, like `mql_subscribe`. With `n` 0 nothing changes (`topics` may
/// then be NULL).
///
/// Errors: `MQL_INVALID_TOPIC_NAME` (nothing changes then), `MQL_CLOSED`,
/// `MQL_NULL_ARGUMENT` (also for a NULL element), `MQL_INVALID_ARGUMENT`
/// (as for `mql_subscribe`).
///
/// Ownership: borrows every argument for the call (the consumer copies the
/// names it keeps); nothing to free.
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
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let raw = unsafe { arg_slice(topics, n, "topics") }?;
        let mut names = Vec::with_capacity(raw.len());
        for (i, &t) in raw.iter().enumerate() {
            // SAFETY: as above.
            names.push(unsafe { arg_str(t, &format!("topics[{i}]")) }?);
        }
        h.normal("mql_subscribe_many", |c| c.subscribe_more(&names))
    })
}

/// Subscribes to every topic whose whole name matches the regular
/// expression `pattern` (Rust `regex` syntax, anchored at both ends), now
/// and as matching topics are created (noticed at the start of each fetch
/// from the engine). Replaces any earlier subscription or assignment; with
/// a group id (not broadcast) the consumer joins the group as with
/// `mql_subscribe`.
///
/// Errors: `MQL_INVALID_ARGUMENT` (an invalid expression: nothing changes
/// then; from a rebalance callback), `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `pattern` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_subscribe_pattern(
    consumer: *mut mql_consumer,
    pattern: *const c_char,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let pattern = unsafe { arg_str(pattern, "pattern") }?;
        h.normal("mql_subscribe_pattern", |c| {
            if c.inner.is_closed() {
                return Err(mqlite::Error::Closed("consumer").into());
            }
            c.inner.subscribe_pattern(pattern, None)?;
            c.sub = Subscription::Pattern;
            c.resume_broadcast();
            Ok(())
        })
    })
}

/// Adds partition `partition` of `topic` to the consumer's manual
/// assignment (replacing a subscription; a group member leaves its group).
/// A partition kept across calls keeps its position. A consumer with a
/// group id starts a newly assigned partition at the group's committed
/// offset, if any.
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION` (nothing changes
/// then), `MQL_CLOSED`, `MQL_INVALID_ARGUMENT` (from a rebalance callback).
///
/// Ownership: borrows every argument for the call (the consumer copies the
/// names it keeps); nothing to free.
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
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        h.normal("mql_assign", |c| {
            let mut list: Vec<(String, u32)> = match &c.sub {
                Subscription::Partitions(l) => l.clone(),
                _ => Vec::new(),
            };
            if !list.iter().any(|(t, p)| t == topic && *p == partition) {
                list.push((topic.to_owned(), partition));
            }
            let pairs: Vec<(&str, u32)> = list.iter().map(|(t, p)| (t.as_str(), *p)).collect();
            c.inner.assign(&pairs)?;
            c.drop_old_pattern(|c| c.assign(&pairs))?;
            c.sub = Subscription::Partitions(list);
            Ok(())
        })
    })
}

/// Drops the consumer's whole subscription and assignment; it reads nothing
/// until the next `mql_subscribe` or `mql_assign`. A group member leaves
/// its group (revoking, and committing with auto-commit, first).
///
/// Errors: `MQL_CLOSED`, `MQL_INVALID_ARGUMENT` (from a rebalance
/// callback).
///
/// Ownership: borrows `consumer` for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer.
#[no_mangle]
pub unsafe extern "C" fn mql_unsubscribe(consumer: *mut mql_consumer) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        h.normal("mql_unsubscribe", |c| {
            if c.inner.is_closed() {
                return Err(mqlite::Error::Closed("consumer").into());
            }
            c.inner.unsubscribe();
            c.sub = Subscription::None;
            Ok(())
        })
    })
}

/// The partitions the consumer reads now (for a group member: the ones it
/// owns). Writes the first `min(n, capacity)` of them to `partitions` and
/// their number `n` to `*count`; call with `partitions` NULL and
/// `capacity` 0 to get the count only. The topic names are owned by the
/// consumer and stay valid until it is freed.
///
/// Errors: `MQL_CLOSED`; `MQL_NULL_ARGUMENT` for a NULL `partitions` with
/// a nonzero `capacity`. Allowed from a rebalance callback.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `partitions` is NULL or valid for
/// writing `capacity` elements; `count` is NULL or valid for writing a
/// `size_t`.
#[no_mangle]
// A closure: the method path does not satisfy the higher-ranked bound.
#[allow(clippy::redundant_closure_for_method_calls)]
pub unsafe extern "C" fn mql_assignment(
    consumer: *mut mql_consumer,
    partitions: *mut mql_topic_partition,
    capacity: usize,
    count: *mut usize,
) -> mql_status {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe {
        write_partitions(
            consumer,
            partitions,
            capacity,
            count,
            "mql_assignment",
            |a| a.assignment(),
        )
    })
}

/// Sets the next offset `mql_poll` returns from an assigned partition (one
/// of a subscribed topic, or one added with `mql_assign`). Allowed from a
/// rebalance callback (e.g. on assign).
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
    // SAFETY: forwarded caller contract.
    guard(|| unsafe {
        seek_with(consumer, topic, partition, "mql_seek", |c, t, p| {
            c.seek(t, p, offset)
        })
    })
}

/// Sets the next message `mql_poll` returns to the one a message id names
/// (`<topic>:<partition>:<offset>`, see `mql_message_id`), as `mql_seek`
/// does. Allowed from a rebalance callback.
///
/// Errors: `MQL_INVALID_ARGUMENT` (a malformed id, or its partition is not
/// assigned to this consumer: the same error as `mql_seek`),
/// `MQL_OFFSET_OUT_OF_RANGE`, `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `id` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn mql_seek_to_id(
    consumer: *mut mql_consumer,
    id: *const c_char,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let id: mqlite::MessageId = unsafe { arg_str(id, "id") }?.parse()?;
        h.any("mql_seek_to_id", |mut a| {
            Ok(a.seek(&id.topic, id.partition, id.offset)?)
        })
    })
}

/// Moves an assigned partition to its first retained offset, like
/// `mql_seek`.
///
/// Errors: `MQL_INVALID_ARGUMENT` (the partition is not assigned),
/// `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION`, `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `topic` is NULL or a
/// NUL-terminated string.
// The closure stays: the method path is not general over the lifetimes.
#[allow(clippy::redundant_closure_for_method_calls)]
#[no_mangle]
pub unsafe extern "C" fn mql_seek_to_beginning(
    consumer: *mut mql_consumer,
    topic: *const c_char,
    partition: u32,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        unsafe {
            seek_with(
                consumer,
                topic,
                partition,
                "mql_seek_to_beginning",
                |c, t, p| c.seek_to_beginning(t, p),
            )
        }
    })
}

/// Moves an assigned partition to its end (only records written from now
/// on), like `mql_seek`.
///
/// Errors: `MQL_INVALID_ARGUMENT` (the partition is not assigned),
/// `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION`, `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `topic` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_seek_to_end(
    consumer: *mut mql_consumer,
    topic: *const c_char,
    partition: u32,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        unsafe {
            seek_with(consumer, topic, partition, "mql_seek_to_end", |c, t, p| {
                c.seek_to_end(t, p)
            })
        }
    })
}

/// The body of the seek functions.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `topic` is NULL or a
/// NUL-terminated string.
unsafe fn seek_with(
    consumer: *mut mql_consumer,
    topic: *const c_char,
    partition: u32,
    what: &str,
    seek: impl FnOnce(&mut Access<'_>, &str, u32) -> mqlite::Result<()>,
) -> FfiResult {
    // SAFETY: forwarded caller contract (for both).
    let h = unsafe { arg_ref(consumer, "consumer") }?;
    // SAFETY: as above.
    let topic = unsafe { arg_str(topic, "topic") }?;
    h.any(what, |mut a| Ok(seek(&mut a, topic, partition)?))
}

/// The offset of the next message `mql_poll` will return from an assigned
/// partition, into `*out`. Messages fetched from the engine but not yet
/// handed out are not counted as read. Allowed from a rebalance callback.
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
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        let out = Out::new(out, "out")?;
        let position = h.any("mql_position", |mut a| Ok(a.position(topic, partition)?))?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(position) };
        Ok(())
    })
}

/// For each of the `n` entries of `query`, the earliest offset of its
/// partition whose timestamp is at or after its `timestamp`, into
/// `offsets[i]`; `MQL_OFFSET_UNKNOWN` when every record is older. Any
/// partition may be asked, assigned or not. With `n` 0 both arrays may be
/// NULL. Allowed from a rebalance callback.
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION`, `MQL_CLOSED`
/// (`offsets` is then untouched).
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `query` is NULL or points to `n`
/// entries whose topics are NULL or NUL-terminated strings; `offsets` is
/// NULL or valid for writing `n` `uint64_t`s.
#[no_mangle]
pub unsafe extern "C" fn mql_offsets_for_times(
    consumer: *mut mql_consumer,
    query: *const mql_partition_timestamp,
    n: usize,
    offsets: *mut u64,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all three).
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let raw = unsafe { arg_slice(query, n, "query") }?;
        if offsets.is_null() && n > 0 {
            return Err(Failure::null("offsets"));
        }
        let out = OutArray::optional(offsets, n, "offsets")?;
        let mut q = Vec::with_capacity(n);
        for (i, e) in raw.iter().enumerate() {
            // SAFETY: as above.
            let t = unsafe { arg_str(e.topic, &format!("query[{i}].topic")) }?;
            q.push((t, e.partition, e.timestamp));
        }
        let found = h.any(
            "mql_offsets_for_times",
            |mut a| Ok(a.offsets_for_times(&q)?),
        )?;
        let found: Vec<u64> = found
            .into_iter()
            .map(|o| o.unwrap_or(MQL_OFFSET_UNKNOWN))
            .collect();
        if let Some(out) = out {
            // SAFETY: valid for writing `n` elements by the caller's
            // contract; `found` has one per query entry.
            unsafe { out.write(&found) };
        }
        Ok(())
    })
}

/// Returns the next message in `*out`, waiting up to `timeout_ms`
/// milliseconds for one to arrive (0: do not wait; negative: wait as long
/// as it takes). Messages come in offset order per partition, fairly across
/// partitions.
///
/// The consumer fetches up to `max_poll_records` messages at once and
/// hands them out one per call; positions, commits and statistics count
/// only what was handed out. A group member takes part in rebalances
/// (running its rebalance callback) at every call, whatever it fetched:
/// messages fetched for a partition it gives up are dropped, and the new
/// owner reads them from the committed offset.
///
/// Returns `MQL_TIMEOUT`, with `*out` untouched, when nothing arrived in
/// time, or at once when `mql_waker_wakeup` was called during the wait or
/// before it (the error text then says "woken up").
///
/// Errors: `MQL_INVALID_ARGUMENT` (nothing subscribed or assigned; from a
/// rebalance callback), `MQL_OFFSET_OUT_OF_RANGE` (with
/// `MQL_OFFSET_RESET_ERROR`), `MQL_CLOSED`, `MQL_CORRUPT`, I/O errors.
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
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        let out = Out::new(out, "out")?;
        h.normal("mql_poll", |c| {
            c.check_pollable()?;
            let m = poll_until(timeout_ms, |wait| Ok(c.inner.poll_one(wait)?))?;
            // SAFETY: `out` is valid for writes by the caller's contract.
            unsafe { out.write(into_handle(mql_message::new(m))) };
            Ok(())
        })
    })
}

/// `mql_poll`, handing out every message of one fetch at once: the messages
/// fetched earlier and not handed out yet if there are any (no new fetch),
/// otherwise a fetch (up to `max_poll_records` messages, waiting up to
/// `timeout_ms` like `mql_poll`). Positions, commits and statistics count
/// every message of the batch as handed out. Cheaper per message than `mql_poll`, which
/// allocates each message on its own.
///
/// Returns `MQL_TIMEOUT`, with `*out` untouched, as `mql_poll` does.
///
/// Errors: those of `mql_poll`.
///
/// Ownership: on `MQL_OK`, `*out` is a new, non-empty batch owned by the
/// caller; release it with `mql_message_batch_free`.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `out` is NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_poll_batch(
    consumer: *mut mql_consumer,
    timeout_ms: i32,
    out: *mut *mut mql_message_batch,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        let out = Out::new(out, "out")?;
        h.normal("mql_poll_batch", |c| {
            c.check_pollable()?;
            let got = poll_until(timeout_ms, |wait| {
                let v = c.inner.poll(wait)?;
                Ok((!v.is_empty()).then_some(v))
            })?;
            let batch = mql_message_batch::new(got);
            // SAFETY: `out` is valid for writes by the caller's contract.
            unsafe { out.write(into_handle(batch)) };
            Ok(())
        })
    })
}

impl State {
    /// Fails unless a poll can read: the consumer is open and has a
    /// subscription or assignment.
    fn check_pollable(&self) -> FfiResult {
        if self.inner.is_closed() {
            return Err(mqlite::Error::Closed("consumer").into());
        }
        if let Subscription::None = self.sub {
            return Err(Failure::invalid(
                "the consumer has no subscription or assignment (call mql_subscribe or mql_assign first)",
            ));
        }
        Ok(())
    }
}

/// Calls `poll` (an engine poll waiting up to its argument) until it gives
/// something, for up to `timeout_ms` (negative: no limit); `MQL_TIMEOUT`
/// when the time is up or a wakeup came first.
fn poll_until<T>(
    timeout_ms: i32,
    mut poll: impl FnMut(Duration) -> FfiResult<Option<T>>,
) -> FfiResult<T> {
    // The engine's poll returns nothing both when the time is up and when
    // it was woken; before the deadline it can only have been woken.
    let woken = || {
        Failure::new(
            mql_status::MQL_TIMEOUT,
            "woken up by mql_waker_wakeup before anything arrived",
        )
    };
    let wait = if timeout_ms < 0 {
        Duration::from_secs(3600)
    } else {
        Duration::from_millis(timeout_ms as u64)
    };
    loop {
        let start = Instant::now();
        if let Some(v) = poll(wait)? {
            return Ok(v);
        }
        if start.elapsed() < wait {
            return Err(woken());
        }
        if timeout_ms >= 0 {
            return Err(mqlite::Error::Timeout(timeout_ms as u64).into());
        }
    }
}

/// A waker for this consumer: `mql_waker_wakeup` on it, from any thread,
/// makes a `mql_poll` blocked on this consumer return `MQL_TIMEOUT` at
/// once (or the next one, if none is waiting). Allowed from a rebalance
/// callback, and on a closed consumer (whose waker then wakes nothing).
///
/// Ownership: on `MQL_OK`, `*out` is a new waker owned by the caller;
/// release it with `mql_waker_free` (before or after the consumer).
///
/// # Safety
/// `consumer` is NULL or a live consumer; `out` is NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_waker(
    consumer: *mut mql_consumer,
    out: *mut *mut mql_waker,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        let out = Out::new(out, "out")?;
        let inner = h.waker.clone();
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(mql_waker { inner })) };
        Ok(())
    })
}

/// Wakes the consumer's `mql_poll`: the one blocked now, or else the next
/// one, returns `MQL_TIMEOUT` at once (a wakeup while `mql_poll` still has
/// fetched messages to hand out takes effect once they are handed out). Safe to
/// call from any thread, also while the consumer's thread is inside
/// `mql_poll`, and after the consumer was freed (then it does nothing).
///
/// Errors: `MQL_NULL_ARGUMENT`.
///
/// Ownership: borrows `waker` for the call; nothing to free.
///
/// # Safety
/// `waker` is NULL or a live waker.
#[no_mangle]
pub unsafe extern "C" fn mql_waker_wakeup(waker: *const mql_waker) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let w = unsafe { arg_ref(waker, "waker") }?;
        w.inner.wakeup();
        Ok(())
    })
}

/// Releases a waker. NULL does nothing.
///
/// Ownership: takes back the waker the caller owned; do not use it
/// afterwards (no other thread may be using it).
///
/// # Safety
/// `waker` is NULL or a live waker from `mql_consumer_waker`, not used
/// again.
#[no_mangle]
pub unsafe extern "C" fn mql_waker_free(waker: *mut mql_waker) {
    // SAFETY: forwarded caller contract.
    guard_value((), || unsafe { free_handle(waker) });
}

/// What the consumer did so far, into `*out`. Allowed from a rebalance
/// callback, and on a closed consumer.
///
/// Ownership: borrows `consumer` for the call; the results are plain
/// values; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `out` is NULL or valid for
/// writing an `mql_consumer_stats`.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_get_stats(
    consumer: *mut mql_consumer,
    out: *mut mql_consumer_stats,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        let out = Out::new(out, "out")?;
        let stats = h.any("mql_consumer_get_stats", |mut a| {
            let s = a.stats();
            Ok(mql_consumer_stats {
                records: s.records,
                bytes: s.bytes,
                polls: s.polls,
                rebalances: s.rebalances,
                skipped: s.skipped,
                commits: s.commits,
                offset_resets: s.offset_resets,
            })
        })?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(stats) };
        Ok(())
    })
}
