//! `mqlite.Consumer`, `mqlite.Message` and `mqlite.ConsumerStats`.
//!
//! # Buffering and commits
//!
//! The engine's `poll` returns up to `max_poll_records` messages at once; the
//! binding keeps them in a buffer and hands them out one at a time (or a list
//! at a time with `consume()`). The engine's positions are then ahead of what
//! Python has seen, and the engine commits positions. So that a commit covers
//! exactly the messages handed out to Python:
//!
//! - the engine is polled only when the buffer is empty. A consumer with a
//!   `group_id` that still has buffered messages after [`REFRESH`] puts them
//!   back first, so that it keeps taking part in its group (rebalances,
//!   `max_poll_interval_ms`, auto-commits) while it hands out buffered
//!   messages. The rebalances that run inside the engine's poll thus never
//!   find a buffered message: a revoked partition has none to hand out after
//!   the revoke, and a commit in `on_revoke` commits what was handed out;
//! - calls that commit or move positions outside a poll (`commit()`, `seek()`,
//!   `assign()`, `subscribe()`, `unsubscribe()`, `close()`) first put
//!   buffered messages back ([`State::unbuffer`]: each partition is sought
//!   back to its first buffered offset, and read again later);
//! - a consumer without a `group_id` commits nothing, so `consume()` may poll
//!   the engine again while it holds messages for the caller.
//!
//! Auto-commit is done here, not by the engine (which is given
//! `enable_auto_commit = false`): every `auto_commit_interval_ms`, just before
//! an engine poll and without the GIL; after the `on_revoke` callback when a
//! rebalance or `unsubscribe()` takes partitions away; and at `close()`.
//!
//! # Rebalance callbacks and re-entrancy
//!
//! The engine runs a group member's [`mqlite::RebalanceListener`] inside
//! `poll` (and `subscribe`, `unsubscribe`, `assign`, `close`) on the calling
//! thread, passing it the engine consumer as `&mut`, while the call that
//! reached the engine holds this object's state mutex. The Python callbacks
//! get this object and may call `commit()`, `seek()`, `position()` and the
//! like on it, which cannot take the mutex (the same thread holds it).
//!
//! So the listener lends the engine consumer out for the duration of the
//! callback: it swaps it with a spare, idle engine consumer
//! (`std::mem::replace` on the `&mut` it was given), parks the real one in
//! [`Shared::slot`] tagged with the current thread, calls Python, and swaps
//! back before returning to the engine. A call made on that thread while the
//! consumer is lent takes it from the slot and puts it back when done; a call
//! from another thread waits for the mutex as usual. The engine is suspended
//! in the listener call while the spare stands in for it, so it never sees
//! the spare. No `unsafe` is needed. Calls that would run the engine's group
//! logic again (`poll`, `consume`, iteration, `subscribe`, `unsubscribe`,
//! `assign`) raise `RuntimeError` inside a callback; `close()` there closes
//! the consumer once the call that ran the callback is done.
//!
//! An exception raised by a callback is kept and raised by the call that ran
//! the callback, once the engine is done (the rebalance itself goes on).
//!
//! # The GIL
//!
//! A poll that finds buffered or available messages keeps the GIL. Waits,
//! commits (an fsync), and `subscribe`/`unsubscribe`/`assign`/`close` of a
//! consumer with a `group_id` (which may commit) release it. The listener
//! attaches to Python for the callbacks, whichever way it was reached; the
//! auto-commit after `on_revoke` runs on whichever side of the GIL the
//! engine call was (the listener cannot tell without `unsafe`): a rebalance
//! met by a poll that did not have to wait commits with the GIL held.
//!
//! The engine holds none of its own locks while it runs the listener, and
//! no thread waits for this object's state mutex with the GIL held
//! ([`Consumer::lock`]), so attaching there cannot deadlock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::pyclass::{PyTraverseError, PyVisit};
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple, PyWeakrefMethods, PyWeakrefReference};

use crate::broker::Broker;
use crate::errors::{closed, invalid_argument, to_py, Closed, IntoPy};
use crate::fork::Local;
use crate::util::{arg_u32, arg_u64};

/// A consumed record.
///
/// Attributes are read-only. `key`, `value` and `headers` are copied out of
/// the log each time they are read: keep the result in a variable if you use
/// it several times. A message keeps its segment file mapped while it lives.
///
/// Attributes:
///     topic (str): The topic.
///     partition (int): The partition.
///     offset (int): The offset in the partition.
///     timestamp (int): The record's timestamp, ms since the Unix epoch.
///     key (bytes | None): The key.
///     value (bytes | None): The value; None for a tombstone.
///     headers (list[tuple[str, bytes]]): The headers, in order.
#[pyclass(frozen, module = "mqlite")]
pub struct Message {
    inner: mqlite::Message,
}

#[pymethods]
impl Message {
    /// str: The topic.
    #[getter]
    fn topic(&self) -> &str {
        self.inner.topic()
    }

    /// int: The partition.
    #[getter]
    fn partition(&self) -> u32 {
        self.inner.partition()
    }

    /// int: The offset in the partition.
    #[getter]
    fn offset(&self) -> u64 {
        self.inner.offset()
    }

    /// int: The record's timestamp, ms since the Unix epoch.
    #[getter]
    fn timestamp(&self) -> i64 {
        self.inner.timestamp()
    }

    /// bytes | None: The key.
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.inner.key().map(|k| PyBytes::new(py, k))
    }

    /// bytes | None: The value; None for a tombstone.
    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.inner.value().map(|v| PyBytes::new(py, v))
    }

    /// list[tuple[str, bytes]]: The headers, in order (names may repeat).
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> Vec<(String, Bound<'py, PyBytes>)> {
        self.inner
            .headers()
            .into_iter()
            .map(|h| (h.key, PyBytes::new(py, &h.value)))
            .collect()
    }

    /// The length of the value (0 for a tombstone).
    fn __len__(&self) -> usize {
        self.inner.value().map_or(0, <[u8]>::len)
    }

    /// Always true, even for an empty value (so `if msg:` tests presence).
    fn __bool__(&self) -> bool {
        true
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        fn short(py: Python<'_>, b: Option<&[u8]>) -> PyResult<String> {
            const MAX: usize = 40;
            Ok(match b {
                None => "None".to_owned(),
                Some(b) => {
                    let r = PyBytes::new(py, &b[..b.len().min(MAX)]).repr()?.to_string();
                    if b.len() > MAX {
                        format!("{r}...")
                    } else {
                        r
                    }
                }
            })
        }
        Ok(format!(
            "Message(topic='{}', partition={}, offset={}, timestamp={}, key={}, value={})",
            self.inner.topic(),
            self.inner.partition(),
            self.inner.offset(),
            self.inner.timestamp(),
            short(py, self.inner.key())?,
            short(py, self.inner.value())?
        ))
    }
}

/// Longest wait without the GIL before checking for signals (Ctrl-C) and
/// for `close()` from another thread.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// How long a consumer with a `group_id` hands out buffered messages before
/// it puts them back and polls the engine again (module documentation): the
/// longest a rebalance or an auto-commit waits for a consumer that keeps
/// polling.
const REFRESH: Duration = Duration::from_millis(100);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Logs a failed automatic commit on the "mqlite" logger.
fn warn(py: Python<'_>, what: &str, e: &mqlite::Error) {
    let _ = (|| -> PyResult<()> {
        py.import("logging")?
            .call_method1("getLogger", ("mqlite",))?
            .call_method1("warning", ("%s: %s", what, e.to_string()))?;
        Ok(())
    })();
}

/// What a consumer did so far, as returned by `Consumer.stats()`.
///
/// Attributes:
///     records (int): Messages handed out to Python (by `poll()`,
///         `consume()` and iteration).
///     bytes (int): Bytes of the keys and values of those messages.
///     polls (int): Calls of `poll()`, `consume()` and iteration steps.
///     rebalances (int): Group rebalances this consumer took part in.
///     skipped (int): Messages retention deleted before they were read
///         (`auto_offset_reset` moved the position past them).
///     commits (int): Commits made, manual and automatic.
///     offset_resets (int): Committed offsets found beyond the end of their
///         partition's log (recovery cut the log below them) and reset by
///         `auto_offset_reset`.
#[pyclass(frozen, get_all, module = "mqlite")]
pub struct ConsumerStats {
    /// int: Messages handed out to Python (by `poll()`, `consume()` and iteration).
    records: u64,
    /// int: Bytes of the keys and values of those messages.
    bytes: u64,
    /// int: Calls of `poll()`, `consume()` and iteration steps.
    polls: u64,
    /// int: Group rebalances this consumer took part in.
    rebalances: u64,
    /// int: Messages retention deleted before they were read.
    skipped: u64,
    /// int: Commits made, manual and automatic.
    commits: u64,
    /// int: Committed offsets found beyond the end of their partition's log
    /// (recovery cut the log below them) and reset by `auto_offset_reset`.
    offset_resets: u64,
}

#[pymethods]
impl ConsumerStats {
    fn __repr__(&self) -> String {
        format!(
            "ConsumerStats(records={}, bytes={}, polls={}, rebalances={}, skipped={}, commits={}, \
             offset_resets={})",
            self.records,
            self.bytes,
            self.polls,
            self.rebalances,
            self.skipped,
            self.commits,
            self.offset_resets
        )
    }
}

struct State {
    consumer: mqlite::Consumer,
    /// Messages fetched from the engine but not yet handed out, in order.
    buffer: VecDeque<mqlite::Message>,
    /// When the engine was last polled.
    last_fetch: Instant,
    /// The auto-commit interval, for a consumer with a `group_id` and
    /// `enable_auto_commit`.
    auto_commit: Option<Duration>,
    last_auto_commit: Instant,
    /// The engine consumer was closed.
    shut: bool,
}

impl State {
    /// Puts buffered messages back: seeks each partition to its first
    /// buffered offset, so the engine's positions match what was handed out.
    fn unbuffer(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let mut firsts: Vec<(&str, u32, u64)> = Vec::new();
        for m in &self.buffer {
            if !firsts
                .iter()
                .any(|&(t, p, _)| p == m.partition() && t == m.topic())
            {
                firsts.push((m.topic(), m.partition(), m.offset()));
            }
        }
        let firsts: Vec<(String, u32, u64)> = firsts
            .into_iter()
            .map(|(t, p, o)| (t.to_owned(), p, o))
            .collect();
        self.buffer.clear();
        for (t, p, o) in firsts {
            // Fails only if retention removed the offset or the partition
            // went away; the engine then resets the position itself.
            let _ = self.consumer.seek(&t, p, o);
        }
    }

    /// Drops the buffered messages of one partition (before a seek of it).
    fn drop_partition(&mut self, topic: &str, partition: u32) {
        self.buffer
            .retain(|m| m.partition() != partition || m.topic() != topic);
    }

    /// The first buffered offset of a partition, if any.
    fn first_buffered(&self, topic: &str, partition: u32) -> Option<u64> {
        self.buffer
            .iter()
            .find(|m| m.partition() == partition && m.topic() == topic)
            .map(mqlite::Message::offset)
    }

    /// Whether an automatic commit is due (and if so restarts its clock).
    fn auto_commit_due(&mut self) -> bool {
        match self.auto_commit {
            Some(every) if self.last_auto_commit.elapsed() >= every => {
                self.last_auto_commit = Instant::now();
                true
            }
            _ => false,
        }
    }

    /// Polls the engine into the (empty) buffer.
    fn fetch(&mut self, timeout: Duration) -> mqlite::Result<()> {
        let got = self.consumer.poll(timeout);
        self.last_fetch = Instant::now();
        self.buffer.extend(got?);
        Ok(())
    }

    /// Closes the engine consumer, once: puts buffered messages back,
    /// commits (auto-commit; a group member commits in its `on_revoke`
    /// instead, as it leaves), leaves the group. Returns a failed commit.
    fn shut_down(&mut self, broker_open: bool) -> Option<mqlite::Error> {
        if self.shut {
            return None;
        }
        self.shut = true;
        self.unbuffer();
        let commit =
            broker_open && self.auto_commit.is_some() && self.consumer.member_id().is_none();
        let err = if commit {
            self.consumer.commit().err()
        } else {
            None
        };
        self.consumer.close();
        err
    }
}

/// Counters of what was handed out to Python (the engine counts what it
/// fetched, buffered messages and re-reads included).
#[derive(Default)]
struct Counters {
    records: AtomicU64,
    bytes: AtomicU64,
    polls: AtomicU64,
}

/// Adds `n` to a counter written only with the state locked: a load and a
/// store (no atomic read-modify-write) cannot lose an update.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl Counters {
    /// Counts a message handed out (with the state locked).
    #[inline]
    fn handed(&self, m: &mqlite::Message) {
        bump(&self.records, 1);
        let len = m.key().map_or(0, <[u8]>::len) + m.value().map_or(0, <[u8]>::len);
        bump(&self.bytes, len as u64);
    }
}

/// `on_assign`, `on_revoke` and `on_lost` of one subscription.
#[derive(Default)]
struct Callbacks {
    fns: Mutex<[Option<Py<PyAny>>; 3]>,
}

const ON_ASSIGN: usize = 0;
const ON_REVOKE: usize = 1;
const ON_LOST: usize = 2;

/// An engine consumer lent to calls made from a callback.
struct Lent {
    thread: ThreadId,
    /// `None` while such a call uses it.
    consumer: Option<Box<mqlite::Consumer>>,
}

struct Slot {
    /// An idle engine consumer (no group, nothing assigned) that stands in
    /// for the real one while it is lent.
    spare: Option<mqlite::Consumer>,
    lent: Option<Lent>,
}

/// The part of a consumer its rebalance listener shares.
struct Shared {
    /// Whether `slot.lent` is set; read without the lock by every call.
    lending: AtomicBool,
    slot: Mutex<Slot>,
    /// Whether `error` holds an exception.
    failed: AtomicBool,
    /// The first exception a callback raised, for the call that ran it.
    error: Mutex<Option<PyErr>>,
    /// Callbacks held by the engine consumer's listeners (the current one;
    /// briefly also the one a `subscribe()` replaces), for the garbage
    /// collector.
    callbacks: Mutex<Vec<Arc<Callbacks>>>,
    /// `on_commit`, given to `Broker.consumer()`.
    on_commit: Mutex<Option<Py<PyAny>>>,
}

impl Shared {
    fn set_error(&self, py: Python<'_>, e: PyErr) {
        let mut slot = lock(&self.error);
        if slot.is_none() {
            *slot = Some(e);
            self.failed.store(true, Ordering::Release);
        } else {
            // A second one in the same call: reported like an exception in
            // a `__del__`.
            e.write_unraisable(py, None);
        }
    }

    fn take_error(&self) -> Option<PyErr> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        let e = lock(&self.error).take();
        self.failed.store(false, Ordering::Release);
        e
    }

    /// Runs `f` with `consumer` lent to calls made on this thread (module
    /// documentation).
    fn lend<R>(&self, consumer: &mut mqlite::Consumer, f: impl FnOnce() -> R) -> R {
        let _lend = Lend::new(self, consumer);
        f()
    }

    /// Drops every callback: none runs after this.
    fn clear_callbacks(&self) -> Vec<Py<PyAny>> {
        let mut out = Vec::new();
        for c in lock(&self.callbacks).drain(..) {
            out.extend(lock(&c.fns).iter_mut().filter_map(Option::take));
        }
        out.extend(lock(&self.on_commit).take());
        out
    }
}

/// Lends an engine consumer while it lives: swaps it with the spare on
/// creation and back on drop.
struct Lend<'a> {
    shared: &'a Shared,
    consumer: &'a mut mqlite::Consumer,
    /// This guard set `slot.lent`.
    owns: bool,
}

impl<'a> Lend<'a> {
    fn new(shared: &'a Shared, consumer: &'a mut mqlite::Consumer) -> Self {
        let mut slot = lock(&shared.slot);
        let owns = slot.lent.is_none();
        if owns {
            // Without a spare (never: only one lend at a time), calls from
            // the callback fail instead of waiting for the state mutex.
            let real = slot
                .spare
                .take()
                .map(|spare| Box::new(std::mem::replace(consumer, spare)));
            slot.lent = Some(Lent {
                thread: thread::current().id(),
                consumer: real,
            });
            shared.lending.store(true, Ordering::Release);
        }
        drop(slot);
        Lend {
            shared,
            consumer,
            owns,
        }
    }
}

impl Drop for Lend<'_> {
    fn drop(&mut self) {
        if !self.owns {
            return;
        }
        let mut slot = lock(&self.shared.slot);
        self.shared.lending.store(false, Ordering::Release);
        // Calls from the callback put the consumer back before they return,
        // and they return before the callback does: it is in the slot.
        if let Some(Lent {
            consumer: Some(real),
            ..
        }) = slot.lent.take()
        {
            slot.spare = Some(std::mem::replace(self.consumer, *real));
        }
    }
}

/// The engine consumer taken from the slot by a call made from a callback;
/// put back on drop.
struct Borrowed<'a> {
    shared: &'a Shared,
    consumer: Option<Box<mqlite::Consumer>>,
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        if let Some(lent) = lock(&self.shared.slot).lent.as_mut() {
            lent.consumer = self.consumer.take();
        }
    }
}

/// The engine consumer, as a call reaches it.
enum Access<'a> {
    /// Through the state mutex.
    Outer(MutexGuard<'a, State>),
    /// Lent to a callback on this thread.
    Lent(Borrowed<'a>),
}

impl Access<'_> {
    fn consumer(&mut self) -> &mut mqlite::Consumer {
        match self {
            Access::Outer(st) => &mut st.consumer,
            Access::Lent(b) => b.consumer.as_mut().expect("held until dropped"),
        }
    }

    /// The buffer and the rest, outside callbacks. (Inside one the buffer
    /// is empty: module documentation.)
    fn state(&mut self) -> Option<&mut State> {
        match self {
            Access::Outer(st) => Some(st),
            Access::Lent(_) => None,
        }
    }
}

/// Runs the Python callbacks of a subscription for the engine, and commits
/// after `on_revoke` with auto-commit.
struct Listener {
    shared: Arc<Shared>,
    callbacks: Arc<Callbacks>,
    /// The Python consumer (weak: it owns the engine consumer, which owns
    /// this listener).
    this: Py<PyWeakrefReference>,
    auto_commit: bool,
}

impl Listener {
    fn call(&self, which: usize, consumer: &mut mqlite::Consumer, partitions: &[(String, u32)]) {
        if lock(&self.callbacks.fns)[which].is_none() {
            return;
        }
        // The engine holds no lock of its own here (only this consumer's
        // state mutex is held, and nothing waits for it with the GIL).
        Python::attach(|py| {
            let Some(cb) = lock(&self.callbacks.fns)[which]
                .as_ref()
                .map(|c| c.clone_ref(py))
            else {
                return;
            };
            // None while the consumer is being destroyed: no callbacks then.
            let Some(this) = self.this.bind(py).upgrade() else {
                return;
            };
            let result = self
                .shared
                .lend(consumer, || cb.bind(py).call1((this, partitions.to_vec())));
            if let Err(e) = result {
                self.shared.set_error(py, e);
            }
        });
    }
}

impl mqlite::RebalanceListener for Listener {
    fn on_assign(&mut self, consumer: &mut mqlite::Consumer, partitions: &[(String, u32)]) {
        self.call(ON_ASSIGN, consumer, partitions);
    }

    fn on_revoke(&mut self, consumer: &mut mqlite::Consumer, partitions: &[(String, u32)]) {
        self.call(ON_REVOKE, consumer, partitions);
        if self.auto_commit {
            // The buffer is empty (module documentation): the positions are
            // what was handed out. The partitions are still this member's.
            if let Err(e) = consumer.commit() {
                if !matches!(e, mqlite::Error::Closed(_)) {
                    Python::try_attach(|py| warn(py, "auto-commit before a rebalance failed", &e));
                }
            }
        }
    }

    fn on_lost(&mut self, consumer: &mut mqlite::Consumer, partitions: &[(String, u32)]) {
        // As confluent-kafka: on_revoke stands in when on_lost is not set.
        // No auto-commit: the partitions are no longer this member's.
        let which = if lock(&self.callbacks.fns)[ON_LOST].is_some() {
            ON_LOST
        } else {
            ON_REVOKE
        };
        self.call(which, consumer, partitions);
    }
}

/// Reads records from assigned partitions or subscribed topics.
///
/// Made by `Broker.consumer()`. An iterator: `for msg in consumer` blocks for
/// the next message and stops when the consumer (or its broker) is closed or
/// `wakeup()` is called. A context manager: leaving the `with` block closes
/// it.
///
/// With a `group_id` (and not `broadcast`), `subscribe()` joins the consumer
/// group: the members share the partitions of the topics, each partition
/// read by one member at a time, and a new owner starts at the offset the
/// previous one committed. Partitions move between members (a rebalance)
/// inside `poll()`, `consume()` and iteration, where the `on_assign` and
/// `on_revoke` callbacks run. A member that does not poll within
/// `max_poll_interval_ms` loses its partitions.
///
/// Messages are fetched from the engine in batches (`max_poll_records`) and
/// handed out one at a time; a commit covers only messages handed out. A
/// consumer with a `group_id` goes back to the engine when it has not for
/// 100 ms, at its next poll, so a rebalance or an auto-commit waits at most
/// that long for a consumer that keeps polling.
///
/// Blocking waits release the GIL and wake up at least every 100 ms to
/// check for signals, so Ctrl-C interrupts them. A consumer may be used from
/// several threads (calls are serialised), though one consumer per thread is
/// the usual pattern; `wakeup()` and `close()` from another thread end a
/// blocked `poll()` at once.
#[pyclass(frozen, weakref, module = "mqlite")]
pub struct Consumer {
    /// Leaked instead of closed in a forked child (`fork.rs`), like
    /// `shared`, which holds an engine consumer too (the spare).
    state: Local<Mutex<State>>,
    shared: Local<Arc<Shared>>,
    closed: AtomicBool,
    /// `wakeup()` was called and no poll returned None for it yet.
    woken: AtomicBool,
    waker: mqlite::ConsumerWaker,
    counters: Counters,
    broker: Py<Broker>,
    group_id: Option<String>,
    /// A group member shares partitions (`group_id`, not broadcast).
    clustering: bool,
    /// Commits automatically (`group_id` and `enable_auto_commit`).
    auto_commit: bool,
    /// An `mqlite.Processor` holds the engine consumer (`processor.rs`):
    /// `state.consumer` is an idle stand-in and calls raise.
    processing: AtomicBool,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if self.state.forked() {
            // The parent's: touch nothing (its locks may be held forever).
            return;
        }
        // No callback runs for a consumer being destroyed.
        let _dropped = self.shared.clear_callbacks();
        let broker_open = !self.broker.get().inner.is_closed();
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = st.shut_down(broker_open) {
            Python::try_attach(|py| warn(py, "auto-commit at close failed", &e));
        }
    }
}

/// Builds the Python consumer over engine consumer `inner`.
pub(crate) struct NewConsumer {
    pub inner: mqlite::Consumer,
    /// An idle engine consumer of the same broker (see [`Slot::spare`]).
    pub spare: mqlite::Consumer,
    pub auto_commit: Option<Duration>,
    pub on_commit: Option<Py<PyAny>>,
}

impl Consumer {
    pub(crate) fn new(n: NewConsumer, broker: Py<Broker>) -> Self {
        let config = n.inner.config();
        let group_id = config.group_id.clone();
        let clustering = group_id.is_some() && !config.broadcast;
        let now = Instant::now();
        Consumer {
            waker: n.inner.waker(),
            group_id,
            clustering,
            auto_commit: n.auto_commit.is_some(),
            state: Local::new(Mutex::new(State {
                consumer: n.inner,
                buffer: VecDeque::new(),
                last_fetch: now,
                auto_commit: n.auto_commit,
                last_auto_commit: now,
                shut: false,
            })),
            shared: Local::new(Arc::new(Shared {
                lending: AtomicBool::new(false),
                slot: Mutex::new(Slot {
                    spare: Some(n.spare),
                    lent: None,
                }),
                failed: AtomicBool::new(false),
                error: Mutex::new(None),
                callbacks: Mutex::new(Vec::new()),
                on_commit: Mutex::new(n.on_commit),
            })),
            closed: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            counters: Counters::default(),
            broker,
            processing: AtomicBool::new(false),
        }
    }

    /// The error of a call made while a processor runs.
    fn busy() -> PyErr {
        PyRuntimeError::new_err(
            "the consumer is in use by a running mqlite.Processor: \
             use it again once Processor.run() has returned",
        )
    }

    /// Fails with `mqlite.Closed` in a process forked from the one that
    /// made the consumer: checked before anything takes a lock.
    #[inline]
    pub(crate) fn check_forked(&self, py: Python<'_>) -> PyResult<()> {
        if self.state.forked() {
            Err(self.broker.get().forked_error(py, "consumer"))
        } else {
            Ok(())
        }
    }

    /// Whether this is a process forked from the one that made the
    /// consumer.
    #[inline]
    pub(crate) fn forked(&self) -> bool {
        self.state.forked()
    }

    /// Fails with `mqlite.Closed` once the consumer or its broker is closed
    /// (without taking a lock).
    pub(crate) fn check_not_closed(&self, py: Python<'_>) -> PyResult<()> {
        self.check_forked(py)?;
        if self.closed.load(Ordering::Acquire) {
            return Err(closed(py, "consumer"));
        }
        self.broker.get().check_open(py)
    }

    /// Whether the consumer has a `group_id`.
    pub(crate) fn has_group(&self) -> bool {
        self.group_id.is_some()
    }

    /// Wraps a message for Python.
    pub(crate) fn message(inner: mqlite::Message) -> Message {
        Message { inner }
    }

    /// Takes the engine consumer out for a processor: puts buffered
    /// messages back (nothing is skipped), leaves an idle stand-in, and
    /// makes calls raise until [`Consumer::give_back`].
    pub(crate) fn take_engine(&self, py: Python<'_>) -> PyResult<mqlite::Consumer> {
        if self.lent_here() {
            return Err(PyRuntimeError::new_err(
                "a processor cannot run inside on_assign or on_revoke",
            ));
        }
        let mut st = self.open_state(py)?;
        let stand_in = self
            .broker
            .get()
            .inner
            .consumer(mqlite::ConsumerConfig::default())
            .py_err(py)?;
        st.unbuffer();
        let real = std::mem::replace(&mut st.consumer, stand_in);
        self.processing.store(true, Ordering::Release);
        Ok(real)
    }

    /// Puts back the engine consumer taken by [`Consumer::take_engine`].
    pub(crate) fn give_back(&self, py: Python<'_>, consumer: mqlite::Consumer) {
        let mut st = self.lock(py);
        let stand_in = std::mem::replace(&mut st.consumer, consumer);
        st.last_fetch = Instant::now();
        self.processing.store(false, Ordering::Release);
        // A `close()` made in a rebalance callback meanwhile.
        if self.closed.load(Ordering::Acquire) {
            self.shut_down(py, &mut st);
        }
        drop(st);
        drop(stand_in);
    }

    /// Locks the state. When another thread holds it (perhaps waiting in
    /// `poll`), waits without the GIL so that thread can go on.
    fn lock<'a>(&'a self, py: Python<'_>) -> MutexGuard<'a, State> {
        loop {
            match self.state.try_lock() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => py.detach(|| drop(self.state.lock())),
            }
        }
    }

    /// Whether the engine consumer is lent to a callback on this thread.
    #[inline]
    fn lent_here(&self) -> bool {
        self.shared.lending.load(Ordering::Acquire)
            && lock(&self.shared.slot)
                .lent
                .as_ref()
                .is_some_and(|l| l.thread == thread::current().id())
    }

    /// Locks the state and checks the consumer is open. A `close()` made in
    /// a callback is completed here.
    fn open_state<'a>(&'a self, py: Python<'_>) -> PyResult<MutexGuard<'a, State>> {
        self.check_forked(py)?;
        let mut st = self.lock(py);
        if self.closed.load(Ordering::Acquire) {
            self.shut_down(py, &mut st);
            if let Some(e) = self.shared.take_error() {
                return Err(e);
            }
            return Err(closed(py, "consumer"));
        }
        if self.processing.load(Ordering::Acquire) {
            return Err(Self::busy());
        }
        self.broker.get().check_open(py)?;
        Ok(st)
    }

    /// The state, for a call that may not run inside a callback.
    fn outer<'a>(&'a self, py: Python<'_>, what: &str) -> PyResult<MutexGuard<'a, State>> {
        if self.lent_here() {
            return Err(PyRuntimeError::new_err(format!(
                "{what}() cannot be called inside on_assign or on_revoke"
            )));
        }
        self.open_state(py)
    }

    /// The engine consumer: lent to this thread's callback, or through the
    /// state mutex (checking the consumer is open if `open`).
    fn access_with(&self, py: Python<'_>, open: bool) -> PyResult<Access<'_>> {
        self.check_forked(py)?;
        if self.shared.lending.load(Ordering::Acquire) {
            let mut slot = lock(&self.shared.slot);
            if let Some(l) = slot
                .lent
                .as_mut()
                .filter(|l| l.thread == thread::current().id())
            {
                return match l.consumer.take() {
                    Some(c) => Ok(Access::Lent(Borrowed {
                        shared: &self.shared,
                        consumer: Some(c),
                    })),
                    None => Err(PyRuntimeError::new_err(
                        "the consumer is busy (a call from a callback is using it)",
                    )),
                };
            }
        }
        if self.processing.load(Ordering::Acquire) {
            return Err(Self::busy());
        }
        if open {
            self.open_state(py).map(Access::Outer)
        } else {
            Ok(Access::Outer(self.lock(py)))
        }
    }

    fn access(&self, py: Python<'_>) -> PyResult<Access<'_>> {
        self.access_with(py, true)
    }

    /// Closes the engine consumer (once), without the GIL if that may commit.
    fn shut_down(&self, py: Python<'_>, st: &mut State) {
        let broker_open = !self.broker.get().inner.is_closed();
        let err = if self.group_id.is_some() {
            py.detach(|| st.shut_down(broker_open))
        } else {
            st.shut_down(broker_open)
        };
        if let Some(e) = err {
            warn(py, "auto-commit at close failed", &e);
        }
    }

    /// After a call into the engine that may have run callbacks: completes a
    /// `close()` made in one, raises what one raised.
    fn after_call(&self, py: Python<'_>, st: &mut State) -> PyResult<()> {
        let was_closed = self.closed.load(Ordering::Acquire);
        if was_closed {
            self.shut_down(py, st);
        }
        if let Some(e) = self.shared.take_error() {
            return Err(e);
        }
        if was_closed {
            return Err(closed(py, "consumer"));
        }
        Ok(())
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.broker.get().is_closed()
    }

    /// Pops the next buffered message, or puts the buffer back when a
    /// consumer with a group has not polled the engine for [`REFRESH`].
    ///
    /// The clock is read at every message (about 25 ns, some 20% of the
    /// cost of handing out a message): reading it every N messages only
    /// would let a consumer that slows down after a burst go N slow
    /// messages without noticing.
    #[inline]
    fn take_buffered(&self, st: &mut State) -> Option<mqlite::Message> {
        if st.buffer.is_empty() {
            return None;
        }
        if self.group_id.is_some() && st.last_fetch.elapsed() >= REFRESH {
            st.unbuffer();
            return None;
        }
        let m = st.buffer.pop_front()?;
        self.counters.handed(&m);
        Some(m)
    }

    /// Commits if an automatic commit is due, without the GIL.
    fn auto_commit(&self, py: Python<'_>, st: &mut State) {
        if st.auto_commit_due() {
            if let Some(e) = py.detach(|| st.consumer.commit().err()) {
                warn(py, "auto-commit failed", &e);
            }
        }
    }

    /// Polls the engine without waiting, keeping the GIL.
    fn fetch_now(&self, py: Python<'_>, st: &mut State) -> PyResult<()> {
        self.auto_commit(py, st);
        let res = st.fetch(Duration::ZERO);
        self.after_call(py, st)?;
        res.py_err(py)
    }

    /// The next message, waiting up to `timeout` (`None`: no limit); None
    /// when the timeout passed or `wakeup()` was called.
    ///
    /// Tries with the GIL held first; waits without it, in slices of at most
    /// [`WAIT_SLICE`], checking for signals between slices.
    fn next_message(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> PyResult<Option<mqlite::Message>> {
        {
            let mut st = self.outer(py, "poll")?;
            if let Some(m) = self.take_buffered(&mut st) {
                return Ok(Some(m));
            }
            if self.woken.swap(false, Ordering::AcqRel) {
                return Ok(None);
            }
            self.fetch_now(py, &mut st)?;
            if let Some(m) = self.take_buffered(&mut st) {
                return Ok(Some(m));
            }
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if self.woken.swap(false, Ordering::AcqRel) {
                return Ok(None);
            }
            let slice = match deadline {
                // No limit, or one too far away to represent.
                None => WAIT_SLICE,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(None);
                    }
                    (d - now).min(WAIT_SLICE)
                }
            };
            let (got, auto_err) = py.detach(|| {
                let mut st = lock(&self.state);
                // A close or a callback's exception is dealt with below.
                let settle = || {
                    self.closed.load(Ordering::Acquire)
                        || self.shared.failed.load(Ordering::Acquire)
                        || self.processing.load(Ordering::Acquire)
                };
                if settle() {
                    return (Ok(None), None);
                }
                if self.broker.get().inner.is_closed() {
                    return (Err(mqlite::Error::Closed("broker")), None);
                }
                if let Some(m) = self.take_buffered(&mut st) {
                    return (Ok(Some(m)), None);
                }
                let auto_err = if st.auto_commit_due() {
                    st.consumer.commit().err()
                } else {
                    None
                };
                let res = st.fetch(slice);
                let m = if settle() {
                    None
                } else {
                    self.take_buffered(&mut st)
                };
                (res.map(|()| m), auto_err)
            });
            if let Some(e) = auto_err {
                warn(py, "auto-commit failed", &e);
            }
            if self.processing.load(Ordering::Acquire) {
                return Err(Self::busy());
            }
            if self.closed.load(Ordering::Acquire) || self.shared.failed.load(Ordering::Acquire) {
                let mut st = self.lock(py);
                self.after_call(py, &mut st)?;
            }
            if let Some(m) = got.py_err(py)? {
                return Ok(Some(m));
            }
            py.check_signals()?;
        }
    }

    /// Runs `f` on the state with the buffer put back, without the GIL for
    /// a consumer with a group (it may commit), then deals with what
    /// callbacks did.
    fn with_unbuffered<R: Send>(
        &self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(&mut mqlite::Consumer) -> mqlite::Result<R> + Send,
    ) -> PyResult<R> {
        let mut st = self.outer(py, what)?;
        st.unbuffer();
        let c = &mut st.consumer;
        let res = if self.group_id.is_some() {
            py.detach(|| f(c))
        } else {
            f(c)
        };
        self.after_call(py, &mut st)?;
        res.py_err(py)
    }

    /// Raises unless `(topic, partition)` exists.
    fn check_partition(&self, py: Python<'_>, topic: &str, partition: u32) -> PyResult<()> {
        let info = self.broker.get().inner.topic(topic).py_err(py)?;
        if partition as usize >= info.partitions.len() {
            return Err(to_py(
                py,
                mqlite::Error::UnknownPartition {
                    topic: topic.to_owned(),
                    partition,
                    count: info.partitions.len() as u32,
                },
            ));
        }
        Ok(())
    }
}

/// `(topic, partition)` pairs from a Python list, for `what()`.
pub(crate) fn topic_partitions(
    py: Python<'_>,
    what: &str,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Vec<(String, u32)>> {
    let err = || PyTypeError::new_err(format!("{what} takes a list of (topic, partition) pairs"));
    if obj.is_instance_of::<PyString>() {
        return Err(err());
    }
    let pairs: Vec<(String, i64)> = obj.extract().map_err(|_| err())?;
    pairs
        .into_iter()
        .map(|(t, p)| Ok((t, arg_u32(py, "partition", p)?)))
        .collect()
}

/// `commit(offsets=...)`: `(topic, partition, offset[, metadata])` tuples.
fn commit_offsets_arg(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Vec<(String, u32, u64, String)>> {
    let err = || {
        PyTypeError::new_err(
            "commit() offsets must be a list of (topic, partition, offset) or \
             (topic, partition, offset, metadata) tuples",
        )
    };
    if obj.is_instance_of::<PyString>() {
        return Err(err());
    }
    let items: Vec<Bound<'_, PyAny>> = obj.extract().map_err(|_| err())?;
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        let (t, p, o, m) = if let Ok((t, p, o)) = it.extract::<(String, i64, i64)>() {
            (t, p, o, String::new())
        } else {
            it.extract::<(String, i64, i64, String)>()
                .map_err(|_| err())?
        };
        out.push((
            t,
            arg_u32(py, "partition", p)?,
            arg_u64(py, "offset", o)?,
            m,
        ));
    }
    Ok(out)
}

/// `(topic, partition, timestamp)` tuples for `offsets_for_times()`.
fn time_queries(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Vec<(String, u32, i64)>> {
    let err = || {
        PyTypeError::new_err(
            "offsets_for_times() takes a list of (topic, partition, timestamp_ms) tuples",
        )
    };
    if obj.is_instance_of::<PyString>() {
        return Err(err());
    }
    let items: Vec<(String, i64, i64)> = obj.extract().map_err(|_| err())?;
    items
        .into_iter()
        .map(|(t, p, ts)| Ok((t, arg_u32(py, "partition", p)?, ts)))
        .collect()
}

/// What `subscribe()` was given.
struct Subscription {
    /// Topic names.
    names: Vec<String>,
    /// Regular expressions (Rust `regex` syntax), each matching whole names.
    patterns: Vec<String>,
}

/// A compiled Python `re.Pattern` as a Rust `regex` expression: its text,
/// with the flags that matter for topic names as inline flags.
fn pattern_of(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    let text = obj.getattr("pattern")?;
    let text = text
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err("subscribe() takes str patterns, not bytes"))?
        .to_str()?
        .to_owned();
    let flags: i64 = obj.getattr("flags")?.extract()?;
    // re.IGNORECASE, re.MULTILINE, re.DOTALL, re.VERBOSE. re.ASCII and
    // re.UNICODE make no difference on topic names (ASCII).
    let inline: String = [(2, 'i'), (8, 'm'), (16, 's'), (64, 'x')]
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|&(_, c)| c)
        .collect();
    Ok(if inline.is_empty() {
        text
    } else if flags & 64 != 0 {
        // The newline ends a trailing comment in verbose mode, which would
        // swallow the groups the expression is wrapped in.
        format!("(?{inline}){text}\n")
    } else {
        format!("(?{inline}){text}")
    })
}

fn subscription(py: Python<'_>, topics: &Bound<'_, PyAny>) -> PyResult<Subscription> {
    let re_pattern = py.import("re")?.getattr("Pattern")?;
    let mut sub = Subscription {
        names: Vec::new(),
        patterns: Vec::new(),
    };
    let mut add = |item: &Bound<'_, PyAny>| -> PyResult<bool> {
        if let Ok(s) = item.cast::<PyString>() {
            let s = s.to_str()?;
            if s.starts_with('^') {
                sub.patterns.push(s.to_owned());
            } else {
                sub.names.push(s.to_owned());
            }
            Ok(true)
        } else if item.is_instance(&re_pattern)? {
            sub.patterns.push(pattern_of(item)?);
            Ok(true)
        } else {
            Ok(false)
        }
    };
    if add(topics)? {
        return Ok(sub);
    }
    let err = || {
        PyTypeError::new_err(
            "subscribe() takes a topic name, a regular expression (a str starting with '^' \
             or an re.Pattern), or a list of them",
        )
    };
    let items: Vec<Bound<'_, PyAny>> = if topics.is_instance_of::<PyBytes>() {
        return Err(err());
    } else {
        topics.extract().map_err(|_| err())?
    };
    for it in &items {
        if !add(it)? {
            return Err(err());
        }
    }
    Ok(sub)
}

/// A callback argument: callable or None.
fn callback(obj: Option<Bound<'_, PyAny>>, name: &str) -> PyResult<Option<Py<PyAny>>> {
    match obj {
        Some(o) if o.is_none() => Ok(None),
        Some(o) if o.is_callable() => Ok(Some(o.unbind())),
        Some(o) => Err(PyTypeError::new_err(format!(
            "{name} must be callable or None, not {}",
            o.get_type().name()?
        ))),
        None => Ok(None),
    }
}

#[pymethods]
impl Consumer {
    /// Reads exactly these partitions, replacing any assignment or
    /// subscription (a group member revokes all its partitions, with
    /// `on_revoke`, and leaves its group). Nothing changes if any partition
    /// is unknown. Positions start at the group's committed offsets, if any
    /// (or the positions already held, for partitions read before without a
    /// group membership).
    ///
    /// Args:
    ///     partitions: A list of (topic, partition) pairs.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.UnknownPartition: A partition does not exist.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `partitions` is not a list of pairs.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    fn assign(&self, py: Python<'_>, partitions: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_forked(py)?;
        let parts = topic_partitions(py, "assign()", partitions)?;
        if self.lent_here() {
            return Err(PyRuntimeError::new_err(
                "assign() cannot be called inside on_assign or on_revoke",
            ));
        }
        for (t, p) in &parts {
            self.check_partition(py, t, *p)?;
        }
        let refs: Vec<(&str, u32)> = parts.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        self.with_unbuffered(py, "assign", |c| {
            // The engine's assign() leaves the group after taking the
            // partitions it keeps out of the assignment, so those would miss
            // on_revoke and the commit: leave first.
            if c.member_id().is_some() {
                c.unsubscribe();
            }
            c.assign(&refs)
        })
    }

    /// Reads every partition of these topics, including partitions added
    /// later, replacing any assignment or subscription. Nothing changes if
    /// any topic is unknown or the expression is invalid.
    ///
    /// With a `group_id` (and not `broadcast`) the consumer joins the group
    /// and reads its share of the partitions, which changes as members come
    /// and go. The callbacks run inside `poll()`, `consume()`, iteration,
    /// `subscribe()`, `unsubscribe()`, `assign()` and `close()`, on the
    /// thread that called it, as `on_assign(consumer, partitions)` and
    /// `on_revoke(consumer, partitions)`, `partitions` being a list of
    /// (topic, partition) pairs. `on_revoke` runs before partitions go to
    /// another member: commit there to hand over exactly what was processed
    /// (with `enable_auto_commit` a commit follows it anyway). `on_assign`
    /// runs once new partitions are owned; their positions are the group's
    /// committed offsets, and `seek()` may change them. `on_lost(consumer,
    /// partitions)` runs instead of `on_revoke` when the member was removed
    /// from the group for not polling within `max_poll_interval_ms`: the
    /// partitions may belong to another member already and are no longer
    /// assigned, so `commit()` has nothing to commit, `commit(offsets)` for
    /// them raises `mqlite.CommitFailed`, and no auto-commit runs; without
    /// `on_lost`, `on_revoke` is called then (as in confluent-kafka). The
    /// consumer then joins the group again. Inside a callback
    /// the consumer accepts every call but `poll()`, `consume()`,
    /// iteration, `subscribe()`, `unsubscribe()` and `assign()`
    /// (RuntimeError); `close()` there takes effect once the call that ran
    /// the callback is done. An exception raised by a callback propagates
    /// out of that call, after the rebalance is complete (the partitions
    /// are assigned or revoked anyway).
    ///
    /// Args:
    ///     topics: A topic name, a regular expression (a str starting with
    ///         "^", as in confluent-kafka, or a compiled `re.Pattern`), or a
    ///         list of them. An expression must match a whole topic name,
    ///         uses the syntax of Rust's `regex` crate (no look-around or
    ///         back-references; the flags `re.IGNORECASE`, `re.VERBOSE`,
    ///         `re.DOTALL` and `re.MULTILINE` are kept), and also picks up topics created
    ///         later.
    ///     on_assign: Called with (consumer, partitions) when partitions
    ///         are assigned to this member.
    ///     on_revoke: Called with (consumer, partitions) before partitions
    ///         are taken away from this member.
    ///     on_lost: Called with (consumer, partitions) after this member
    ///         lost its partitions by being removed from the group;
    ///         `on_revoke` is called instead when not given.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.InvalidArgument: An empty list, an invalid or
    ///         unsupported expression, a strategy other than the group's, or
    ///         callbacks without a `group_id` (or with `broadcast`).
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `topics` is of the wrong type, or a callback is not
    ///         callable.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    #[pyo3(signature = (topics, on_assign = None, on_revoke = None, on_lost = None))]
    fn subscribe(
        slf: &Bound<'_, Self>,
        topics: &Bound<'_, PyAny>,
        on_assign: Option<Bound<'_, PyAny>>,
        on_revoke: Option<Bound<'_, PyAny>>,
        on_lost: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        slf.get().check_forked(slf.py())?;
        let py = slf.py();
        let this = slf.get();
        if this.lent_here() {
            // Before anything that takes the state mutex.
            return Err(PyRuntimeError::new_err(
                "subscribe() cannot be called inside on_assign or on_revoke",
            ));
        }
        let sub = subscription(py, topics)?;
        let on_assign = callback(on_assign, "on_assign")?;
        let on_revoke = callback(on_revoke, "on_revoke")?;
        let on_lost = callback(on_lost, "on_lost")?;
        if (on_assign.is_some() || on_revoke.is_some() || on_lost.is_some()) && !this.clustering {
            return Err(invalid_argument(
                py,
                "on_assign, on_revoke and on_lost need a consumer with a group_id (not broadcast)",
            ));
        }
        let callbacks = Arc::new(Callbacks {
            fns: Mutex::new([on_assign, on_revoke, on_lost]),
        });
        let listener = Box::new(Listener {
            shared: Arc::clone(&this.shared),
            callbacks: Arc::clone(&callbacks),
            this: PyWeakrefReference::new(slf.as_any())?.unbind(),
            auto_commit: this.auto_commit,
        });
        let pattern = if sub.patterns.is_empty() {
            None
        } else {
            // Names beside expressions join the expression, so they must
            // exist now.
            for n in &sub.names {
                this.broker.get().inner.topic(n).py_err(py)?;
            }
            let mut parts: Vec<String> = sub.patterns.iter().map(|p| format!("(?:{p})")).collect();
            // Topic names are [A-Za-z0-9._-]: only '.' is special.
            parts.extend(sub.names.iter().map(|n| n.replace('.', "\\.")));
            Some(parts.join("|"))
        };
        lock(&this.shared.callbacks).push(callbacks);
        let names: Vec<&str> = sub.names.iter().map(String::as_str).collect();
        let res = this.with_unbuffered(py, "subscribe", move |c| match pattern {
            None => c.subscribe_with(&names, listener),
            Some(p) => c.subscribe_pattern(&p, Some(listener)),
        });
        // Keep the callbacks a listener still holds: the new one, or the
        // old one if the engine refused the subscription. The others are
        // dropped after the lock is released (dropping a callable may run
        // Python code).
        let unused: Vec<Arc<Callbacks>> = {
            let mut all = lock(&this.shared.callbacks);
            let (keep, unused) = all.drain(..).partition(|c| Arc::strong_count(c) > 1);
            *all = keep;
            unused
        };
        drop(unused);
        res
    }

    /// Drops the subscription or assignment: the consumer reads nothing
    /// until the next `subscribe()` or `assign()`. A group member revokes
    /// its partitions (`on_revoke`, then a commit with auto-commit) and
    /// leaves its group.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    fn unsubscribe(&self, py: Python<'_>) -> PyResult<()> {
        self.check_forked(py)?;
        self.with_unbuffered(py, "unsubscribe", |c| {
            c.unsubscribe();
            Ok(())
        })
    }

    /// The partitions this consumer reads now.
    ///
    /// Returns:
    ///     list[tuple[str, int]]: (topic, partition) pairs.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer is closed.
    fn assignment(&self, py: Python<'_>) -> PyResult<Vec<(String, u32)>> {
        self.check_forked(py)?;
        Ok(self.access(py)?.consumer().assignment())
    }

    /// Sets the next offset to read from an assigned partition.
    ///
    /// Args:
    ///     topic: The topic.
    ///     partition: The partition; must be assigned.
    ///     offset: From the first retained offset to the end offset,
    ///         inclusive.
    ///
    /// Raises:
    ///     mqlite.OffsetOutOfRange: `offset` is outside the retained range.
    ///     mqlite.InvalidArgument: The partition is not assigned, or
    ///         `offset` is negative.
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn seek(&self, py: Python<'_>, topic: &str, partition: i64, offset: i64) -> PyResult<()> {
        self.check_forked(py)?;
        let partition = arg_u32(py, "partition", partition)?;
        let offset = arg_u64(py, "offset", offset)?;
        let mut acc = self.access(py)?;
        // The buffer is dropped only once the seek succeeded: a seek that
        // fails changes nothing, the buffered messages included.
        acc.consumer().seek(topic, partition, offset).py_err(py)?;
        if let Some(st) = acc.state() {
            st.drop_partition(topic, partition);
        }
        Ok(())
    }

    /// Moves to the first retained offset of an assigned partition.
    ///
    /// Args:
    ///     topic: The topic.
    ///     partition: The partition; must be assigned.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: The topic does not exist.
    ///     mqlite.UnknownPartition: The partition does not exist.
    ///     mqlite.InvalidArgument: The partition is not assigned.
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn seek_to_beginning(&self, py: Python<'_>, topic: &str, partition: i64) -> PyResult<()> {
        self.check_forked(py)?;
        let partition = arg_u32(py, "partition", partition)?;
        let mut acc = self.access(py)?;
        acc.consumer()
            .seek_to_beginning(topic, partition)
            .py_err(py)?;
        if let Some(st) = acc.state() {
            st.drop_partition(topic, partition);
        }
        Ok(())
    }

    /// Moves to the end of an assigned partition: only records written from
    /// now on are read.
    ///
    /// Args:
    ///     topic: The topic.
    ///     partition: The partition; must be assigned.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: The topic does not exist.
    ///     mqlite.UnknownPartition: The partition does not exist.
    ///     mqlite.InvalidArgument: The partition is not assigned.
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn seek_to_end(&self, py: Python<'_>, topic: &str, partition: i64) -> PyResult<()> {
        self.check_forked(py)?;
        let partition = arg_u32(py, "partition", partition)?;
        let mut acc = self.access(py)?;
        acc.consumer().seek_to_end(topic, partition).py_err(py)?;
        if let Some(st) = acc.state() {
            st.drop_partition(topic, partition);
        }
        Ok(())
    }

    /// The next offset this consumer will return from a partition.
    ///
    /// Args:
    ///     topic: The topic.
    ///     partition: The partition; must be assigned.
    ///
    /// Returns:
    ///     int: The offset of the next message `poll()` returns from it.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The partition is not assigned.
    ///     mqlite.OffsetOutOfRange: No valid position and
    ///         `auto_offset_reset="error"`.
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn position(&self, py: Python<'_>, topic: &str, partition: i64) -> PyResult<u64> {
        self.check_forked(py)?;
        let partition = arg_u32(py, "partition", partition)?;
        let mut acc = self.access(py)?;
        if let Some(o) = acc
            .state()
            .and_then(|st| st.first_buffered(topic, partition))
        {
            return Ok(o);
        }
        acc.consumer().position(topic, partition).py_err(py)
    }

    /// For each (topic, partition, timestamp_ms), the earliest offset whose
    /// record timestamp is at or after the timestamp.
    ///
    /// Args:
    ///     partitions: A list of (topic, partition, timestamp_ms) tuples
    ///         (milliseconds since the Unix epoch).
    ///
    /// Returns:
    ///     list[int | None]: One offset per tuple, in order; None when every
    ///     record of the partition is older.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.UnknownPartition: A partition does not exist.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `partitions` is not a list of such tuples.
    fn offsets_for_times(
        &self,
        py: Python<'_>,
        partitions: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<u64>>> {
        self.check_forked(py)?;
        let q = time_queries(py, partitions)?;
        let refs: Vec<(&str, u32, i64)> =
            q.iter().map(|(t, p, ts)| (t.as_str(), *p, *ts)).collect();
        self.access(py)?
            .consumer()
            .offsets_for_times(&refs)
            .py_err(py)
    }

    /// Commits offsets to the group, durably: the commit is on disk when
    /// this returns (commits are always synchronous; `asynchronous` only
    /// changes how a failure is reported).
    ///
    /// Without `offsets`, commits the position of every partition read:
    /// the offset after the last message handed out by `poll()`,
    /// `consume()` or iteration (messages fetched but not yet handed out do
    /// not count). A group member can commit only partitions it owns now.
    ///
    /// The `on_commit` callback given to `Broker.consumer()`, if any, is
    /// called after every commit made here, as `on_commit(err, offsets)`:
    /// `err` None or the exception, `offsets` a list of (topic, partition,
    /// offset) committed (on failure: the explicit offsets, or an empty
    /// list).
    ///
    /// Args:
    ///     offsets: None, or a list of (topic, partition, offset) or
    ///         (topic, partition, offset, metadata) tuples; `offset` is the
    ///         next offset to read (the last processed plus one), at most
    ///         the partition's end offset; `metadata` is stored with it.
    ///     asynchronous: With an `on_commit` callback, report a failure only
    ///         to it instead of raising it (confluent-kafka's
    ///         `asynchronous=True`); returns None.
    ///
    /// Returns:
    ///     list[tuple[str, int, int]] | None: What was committed, as
    ///     (topic, partition, offset); None when `asynchronous`.
    ///
    /// Raises:
    ///     mqlite.CommitFailed: A partition is not owned by this member (a
    ///         rebalance gave it to another).
    ///     mqlite.InvalidArgument: The consumer has no `group_id`, or an
    ///         offset or partition is negative.
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.UnknownPartition: A partition does not exist.
    ///     mqlite.OffsetOutOfRange: An offset is past the partition's end.
    ///     mqlite.IoError: The offsets could not be written.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `offsets` is of the wrong type.
    #[pyo3(signature = (offsets = None, asynchronous = false))]
    fn commit(
        &self,
        py: Python<'_>,
        offsets: Option<&Bound<'_, PyAny>>,
        asynchronous: bool,
    ) -> PyResult<Option<Vec<(String, u32, u64)>>> {
        self.check_forked(py)?;
        let explicit = match offsets {
            Some(o) if !o.is_none() => Some(commit_offsets_arg(py, o)?),
            _ => None,
        };
        if let Some(ex) = &explicit {
            for (t, p, o, _) in ex {
                let info = self.broker.get().inner.topic(t).py_err(py)?;
                let Some(part) = info.partitions.get(*p as usize) else {
                    return Err(to_py(
                        py,
                        mqlite::Error::UnknownPartition {
                            topic: t.clone(),
                            partition: *p,
                            count: info.partitions.len() as u32,
                        },
                    ));
                };
                if *o > part.end_offset {
                    return Err(to_py(
                        py,
                        mqlite::Error::OffsetOutOfRange {
                            topic: t.clone(),
                            partition: *p,
                            offset: *o,
                            start: part.start_offset,
                            end: part.end_offset,
                        },
                    ));
                }
            }
        }
        let (res, done) = {
            let mut acc = self.access(py)?;
            if explicit.is_none() {
                if let Some(st) = acc.state() {
                    st.unbuffer();
                }
            }
            let c = acc.consumer();
            let res = py.detach(|| match &explicit {
                Some(ex) => {
                    let refs: Vec<(&str, u32, u64, &str)> = ex
                        .iter()
                        .map(|(t, p, o, m)| (t.as_str(), *p, *o, m.as_str()))
                        .collect();
                    c.commit_offsets(&refs)
                }
                None => c.commit(),
            });
            let done: Vec<(String, u32, u64)> = match (&explicit, &res) {
                (Some(ex), _) => ex.iter().map(|(t, p, o, _)| (t.clone(), *p, *o)).collect(),
                (None, Ok(())) => c
                    .assignment()
                    .into_iter()
                    .filter_map(|(t, p)| {
                        let o = c.committed(&t, p).ok()??.offset;
                        Some((t, p, o))
                    })
                    .collect(),
                (None, Err(_)) => Vec::new(),
            };
            (res, done)
        }; // The consumer is free again: on_commit may use it.
        let err = res.err().map(|e| to_py(py, e));
        let on_commit = lock(&self.shared.on_commit)
            .as_ref()
            .map(|c| c.clone_ref(py));
        let reported = on_commit.is_some();
        if let Some(cb) = on_commit {
            let e = err.as_ref().map(|e| e.value(py).clone());
            cb.bind(py).call1((e, done.clone()))?;
        }
        match err {
            Some(e) if !(asynchronous && reported) => Err(e),
            _ => Ok((!asynchronous).then_some(done)),
        }
    }

    /// The group's committed offsets.
    ///
    /// Args:
    ///     partitions: A list of (topic, partition) pairs; None for the
    ///         partitions read now.
    ///
    /// Returns:
    ///     dict[tuple[str, int], tuple[int, str]]: (offset, metadata) by
    ///     (topic, partition), for the partitions with a committed offset.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The consumer has no `group_id`.
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.UnknownPartition: A partition does not exist.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `partitions` is not a list of pairs.
    #[pyo3(signature = (partitions = None))]
    fn committed<'py>(
        &self,
        py: Python<'py>,
        partitions: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.check_forked(py)?;
        let wanted = match partitions {
            Some(p) if !p.is_none() => {
                let v = topic_partitions(py, "committed()", p)?;
                for (t, p) in &v {
                    self.check_partition(py, t, *p)?;
                }
                Some(v)
            }
            _ => None,
        };
        let mut acc = self.access(py)?;
        let c = acc.consumer();
        let wanted = wanted.unwrap_or_else(|| c.assignment());
        let out = PyDict::new(py);
        if wanted.is_empty() {
            // Still raises without a group_id.
            c.committed("", 0).py_err(py)?;
        }
        for (t, p) in wanted {
            if let Some(co) = c.committed(&t, p).py_err(py)? {
                out.set_item((t, p), (co.offset, co.metadata))?;
            }
        }
        Ok(out)
    }

    /// How far behind each partition read is: its end offset minus the
    /// committed offset (minus the position when nothing is committed).
    ///
    /// Returns:
    ///     dict[tuple[str, int], int]: The lag by (topic, partition).
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn lag<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check_forked(py)?;
        let mut acc = self.access(py)?;
        let lags = acc.consumer().lag().py_err(py)?;
        let out = PyDict::new(py);
        for (t, p, mut lag) in lags {
            // Buffered messages were not handed out: the position counts
            // from the first of them.
            if let Some(first) = acc.state().and_then(|st| st.first_buffered(&t, p)) {
                let c = acc.consumer();
                if c.committed(&t, p).ok().flatten().is_none() {
                    if let Ok(pos) = c.position(&t, p) {
                        lag += pos.saturating_sub(first);
                    }
                }
            }
            out.set_item((t, p), lag)?;
        }
        Ok(out)
    }

    /// Counters of what this consumer did so far (also once closed).
    ///
    /// Returns:
    ///     ConsumerStats: A snapshot.
    ///
    /// Raises:
    ///     mqlite.Closed: In a process forked from the one that made the
    ///         consumer.
    fn stats(&self, py: Python<'_>) -> PyResult<ConsumerStats> {
        self.check_forked(py)?;
        let s = self.access_with(py, false)?.consumer().stats();
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Ok(ConsumerStats {
            records: get(&self.counters.records),
            bytes: get(&self.counters.bytes),
            polls: get(&self.counters.polls),
            rebalances: s.rebalances,
            skipped: s.skipped,
            commits: s.commits,
            offset_resets: s.offset_resets,
        })
    }

    /// str | None: This consumer's member id in its group
    /// (`<client_id>-<number>`), while it is a member; else None.
    #[getter]
    fn member_id(&self, py: Python<'_>) -> PyResult<Option<String>> {
        if self.is_closed() {
            return Ok(None);
        }
        Ok(self
            .access_with(py, false)?
            .consumer()
            .member_id()
            .map(str::to_owned))
    }

    /// Makes a `poll()` (or `consume()`, or iteration) blocked in another
    /// thread return at once: None (an empty list; iteration stops). If no
    /// poll is waiting, the next one that would wait returns at once
    /// instead. Safe to call from any thread, and from signal handlers.
    /// Does nothing once the consumer is closed, or in a forked child.
    fn wakeup(&self) {
        if self.is_closed() {
            // Polls raise now anyway; in a forked child no poll can be
            // waiting on the parent's consumer.
            return;
        }
        self.woken.store(true, Ordering::Release);
        self.waker.wakeup();
    }

    /// Returns the next message, waiting up to `timeout` seconds for one.
    ///
    /// Group rebalances (and their callbacks) and auto-commits happen here.
    ///
    /// Args:
    ///     timeout: Seconds to wait (float); None waits until a message
    ///         arrives; 0 does not wait.
    ///
    /// Returns:
    ///     Message | None: The message, or None if the timeout passed or
    ///     `wakeup()` was called.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `timeout` is negative or NaN.
    ///     KeyboardInterrupt: Ctrl-C during the wait.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    ///     Exception: What an `on_assign` or `on_revoke` callback raised.
    #[pyo3(signature = (timeout = None))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Message>> {
        self.check_forked(py)?;
        let timeout = crate::util::timeout(py, timeout)?;
        self.counters.polls.fetch_add(1, Ordering::Relaxed);
        Ok(self
            .next_message(py, timeout)?
            .map(|inner| Message { inner }))
    }

    /// Returns up to `num_messages` messages, waiting up to `timeout` seconds
    /// for the first one; it does not wait for more once one is there. A
    /// consumer with a `group_id` returns at most what one engine fetch
    /// brought (`max_poll_records`).
    ///
    /// Args:
    ///     num_messages: Most messages to return, 1 to 1,000,000.
    ///     timeout: Seconds to wait for the first message (float); None
    ///         waits until one arrives; 0 does not wait.
    ///
    /// Returns:
    ///     list[Message]: The messages, in order per partition; empty if the
    ///     timeout passed or `wakeup()` was called.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `num_messages` or `timeout` is out of
    ///         range.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    ///     Exception: What an `on_assign` or `on_revoke` callback raised.
    #[pyo3(signature = (num_messages = 1, timeout = None))]
    fn consume(
        &self,
        py: Python<'_>,
        num_messages: i64,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Message>> {
        self.check_forked(py)?;
        if !(1..=1_000_000).contains(&num_messages) {
            return Err(invalid_argument(
                py,
                format!("num_messages must be 1 to 1000000, got {num_messages}"),
            ));
        }
        let timeout = crate::util::timeout(py, timeout)?;
        self.counters.polls.fetch_add(1, Ordering::Relaxed);
        let Some(first) = self.next_message(py, timeout)? else {
            return Ok(Vec::new());
        };
        let n = num_messages as usize;
        let mut out = Vec::with_capacity(n.min(1024));
        out.push(first);
        // Closed meanwhile: return what was taken; the next call raises.
        if let Ok(mut st) = self.open_state(py) {
            while out.len() < n {
                if st.buffer.is_empty() {
                    // Only a consumer without a group may poll the engine
                    // while it holds messages for the caller (module
                    // documentation). An error comes back next poll.
                    if self.group_id.is_some()
                        || st.fetch(Duration::ZERO).is_err()
                        || st.buffer.is_empty()
                    {
                        break;
                    }
                }
                if self.group_id.is_some() && st.last_fetch.elapsed() >= REFRESH {
                    st.unbuffer();
                    break;
                }
                let k = (n - out.len()).min(st.buffer.len());
                for m in st.buffer.drain(..k) {
                    self.counters.handed(&m);
                    out.push(m);
                }
            }
        }
        Ok(out.into_iter().map(|inner| Message { inner }).collect())
    }

    /// Returns the messages of one fetch at once: those fetched earlier
    /// and not returned yet if there are any (no new fetch), otherwise one
    /// fetch from the engine (up to `max_poll_records`), waiting up to
    /// `timeout` seconds for it. Afterwards nothing is held back: positions
    /// and commits count every message returned. The same as the Rust
    /// `Consumer::poll_batch` and C `mql_poll_batch`.
    ///
    /// Args:
    ///     timeout: Seconds to wait (float); None waits until messages
    ///         arrive; 0 does not wait.
    ///
    /// Returns:
    ///     list[Message]: The messages, in order per partition; empty if the
    ///     timeout passed or `wakeup()` was called.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `timeout` is negative or NaN.
    ///     KeyboardInterrupt: Ctrl-C during the wait.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    ///     Exception: What an `on_assign` or `on_revoke` callback raised.
    #[pyo3(signature = (timeout = None))]
    fn poll_batch(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Vec<Message>> {
        self.check_forked(py)?;
        let timeout = crate::util::timeout(py, timeout)?;
        self.counters.polls.fetch_add(1, Ordering::Relaxed);
        let Some(first) = self.next_message(py, timeout)? else {
            return Ok(Vec::new());
        };
        let mut out = vec![first];
        // Closed meanwhile: return what was taken; the next call raises.
        if let Ok(mut st) = self.open_state(py) {
            out.reserve(st.buffer.len());
            for m in st.buffer.drain(..) {
                self.counters.handed(&m);
                out.push(m);
            }
        }
        Ok(out.into_iter().map(|inner| Message { inner }).collect())
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Message>> {
        self.check_forked(py)?;
        if self.is_closed() {
            return Ok(None);
        }
        self.counters.polls.fetch_add(1, Ordering::Relaxed);
        match self.next_message(py, None) {
            Ok(m) => Ok(m.map(|inner| Message { inner })),
            Err(e) if e.is_instance_of::<Closed>(py) && self.is_closed() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stops the consumer: puts back buffered messages, commits what was
    /// handed out (with `enable_auto_commit`), and leaves the group (after
    /// `on_revoke`), so its partitions go to the other members at once.
    /// Later calls raise `mqlite.Closed` and iteration ends. A `poll()`
    /// waiting in another thread returns at once. Closing twice is fine.
    /// In a process forked from the one that made the consumer this does
    /// nothing.
    ///
    /// Raises:
    ///     Exception: What an `on_revoke` callback raised (the consumer is
    ///         closed anyway).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.state.forked() {
            return Ok(());
        }
        if self.processing.load(Ordering::Acquire) && !self.lent_here() {
            return Err(Self::busy());
        }
        self.closed.store(true, Ordering::Release);
        self.waker.wakeup();
        if self.lent_here() {
            // Inside a callback: completed by the call that ran it.
            return Ok(());
        }
        let mut st = self.lock(py);
        self.shut_down(py, &mut st);
        match self.shared.take_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// bool: Whether the consumer, or the broker it came from, is closed
    /// (always True in a forked child).
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// str | None: The consumer group, or None.
    #[getter]
    fn group_id(&self) -> Option<&str> {
        self.group_id.as_deref()
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().check_not_closed(slf.py())?;
        Ok(slf)
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.is_closed() { "closed" } else { "open" };
        match &self.group_id {
            Some(g) => format!("<mqlite.Consumer group_id={g:?} {state}>"),
            None => format!("<mqlite.Consumer {state}>"),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Never block here: skip what is locked right now.
        if let Ok(all) = self.shared.callbacks.try_lock() {
            for c in all.iter() {
                if let Ok(fns) = c.fns.try_lock() {
                    for f in fns.iter() {
                        visit.call(f)?;
                    }
                }
            }
        }
        if let Ok(f) = self.shared.on_commit.try_lock() {
            visit.call(&*f)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        if self.state.forked() {
            return;
        }
        let _dropped = self.shared.clear_callbacks();
    }
}
