//! `mqlite.ShareConsumer`, `mqlite.ShareMessage`,
//! `mqlite.ShareConsumerStats` and `mqlite.ShareBacklog`: the engine's share consumers (job-queue
//! consumption: the members of a share group take any message and
//! acknowledge each).
//!
//! One engine poll delivers up to `max_poll_records` messages, each locked
//! to this consumer from then on; `poll()` and iteration hand them out one
//! at a time (the engine's `poll_one`, which holds the rest and gives them
//! back to the group once half their lock has run), `poll_batch()` and
//! `consume()` hand out several.
//!
//! # The GIL
//!
//! Every engine poll writes the group's state, so polls run without the
//! GIL, in slices of at most [`WAIT_SLICE`] that check for signals, a
//! `wakeup()` and a `close()` from another thread. Settling calls
//! (`ack`, `release`, `reject`, `renew`) release it when they sync
//! (`commit_acks="all"`) or send to the dead-letter topic (`reject`).
//! No thread waits for the state mutex with the GIL held.
//!
//! # Closing releases the group
//!
//! The engine's consumer and every engine message it delivered hold the
//! share group open (its state file and its lock, which another broker of
//! the directory, in this process too, needs). So `close()`, and the
//! broker's `close()` (through [`Registry`]), drop the engine consumer and
//! empty the [`Slot`] of every message handed out, whatever Python objects
//! still refer to them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use pyo3::PyClassInitializer;

use crate::broker::Broker;
use crate::consumer::{Consumer, Message};
use crate::error::{closed, invalid_argument, is_kind, to_py, IntoPy};
use crate::fork::Local;
use crate::util::{arg_u64, lock};

/// Longest wait without the GIL before checking for signals (Ctrl-C), for
/// `wakeup()` and for `close()` from another thread.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// The engine message of a `ShareMessage`; emptied when its consumer
/// closes.
type Slot = Mutex<Option<mqlite::ShareMessage>>;

/// What the state mutex guards: the engine consumer and the messages of its
/// last poll not handed out yet.
struct State {
    /// None once closed (dropped: see the module documentation).
    consumer: Option<mqlite::ShareConsumer>,
    /// The messages handed out, emptied at close.
    handed: Vec<Weak<Slot>>,
    /// Length of `handed` after its last pruning.
    pruned_len: usize,
    /// The engine's counters when it was closed.
    final_stats: mqlite::ShareConsumerStats,
}

impl State {
    /// The next message the engine consumer holds, if it can hand one out
    /// at once (see `mqlite::ShareConsumer::next_held`).
    fn next_held(&mut self) -> Option<mqlite::ShareMessage> {
        self.consumer.as_mut()?.next_held()
    }

    /// Leaves the group (once): the messages this consumer holds, handed
    /// out or not, are delivered again; the engine consumer and messages
    /// are dropped.
    fn shut_down(&mut self) {
        if let Some(mut c) = self.consumer.take() {
            c.close();
            self.final_stats = c.stats();
        }
        for w in self.handed.drain(..) {
            if let Some(slot) = w.upgrade() {
                lock(&slot).take();
            }
        }
        self.pruned_len = 0;
    }

    /// A slot for a message handed out now (empty once closed).
    fn hand_out(&mut self, m: mqlite::ShareMessage) -> Arc<Slot> {
        let open = self.consumer.is_some();
        let slot = Arc::new(Mutex::new(open.then_some(m)));
        if open {
            self.handed.push(Arc::downgrade(&slot));
            if self.handed.len() >= 2 * self.pruned_len.max(512) {
                self.handed.retain(|w| w.strong_count() > 0);
                self.pruned_len = self.handed.len();
            }
        }
        slot
    }
}

/// The share consumers of a broker, closed by its `close()`.
#[derive(Default)]
pub(crate) struct Registry {
    states: Mutex<Vec<Weak<Mutex<State>>>>,
}

impl Registry {
    fn add(&self, state: &Arc<Mutex<State>>) {
        let mut all = lock(&self.states);
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(state));
    }

    /// Closes every share consumer of the broker (call without the GIL: it
    /// may wait for a poll's slice to end).
    pub(crate) fn shut_down_all(&self) {
        let all: Vec<_> = lock(&self.states).drain(..).collect();
        for w in all {
            if let Some(state) = w.upgrade() {
                lock(&state).shut_down();
            }
        }
    }
}

/// A member of a share group: job-queue consumption of topics (Kafka's
/// share groups, Pulsar's shared subscriptions, SQS).
///
/// Made by `Broker.share_consumer()`. The members of a share group take
/// messages from any partition of the topics they subscribe to, each
/// message to one member at a time; there is no partition ownership and no
/// rebalance. A delivered message is locked to its consumer for
/// `lock_duration_ms`; the consumer then acknowledges it (`ack`: never
/// delivered again), gives it back (`release`, now or after a delay,
/// without holding back the messages behind it), rejects it to the
/// dead-letter topic (`reject`) or extends its lock (`renew`). A message
/// whose lock runs out (its consumer died, hung or closed) is delivered
/// again, with `delivery_count` one higher; one delivered `max_deliveries`
/// times without an acknowledgement goes to the dead-letter topic.
///
/// The group's state is kept in the data directory and survives `kill -9`
/// and reopening: acknowledged messages are never delivered again. With
/// `shared=True` its members may be in any number of processes; otherwise
/// one process uses it (another raises `mqlite.Locked`).
///
/// An iterator: `for msg in consumer` blocks for the next message and stops
/// when the consumer (or its broker) is closed or `wakeup()` is called. A
/// context manager: leaving the `with` block closes it.
///
/// Blocking waits release the GIL and wake up at least every 100 ms to
/// check for signals, so Ctrl-C interrupts them. A share consumer may be
/// used from several threads (calls are serialised); `ShareMessage`'s own
/// `ack()`, `release()`, `reject()` and `renew()` run alongside a poll.
#[pyclass(frozen, module = "mqlite")]
pub struct ShareConsumer {
    /// Leaked instead of closed in a forked child (`fork.rs`).
    state: Local<Arc<Mutex<State>>>,
    closed: AtomicBool,
    /// `wakeup()` was called and no poll returned None for it yet.
    woken: AtomicBool,
    waker: mqlite::ConsumerWaker,
    /// Calls of `poll()`, `poll_batch()`, `consume()` and iteration steps.
    polls: AtomicU64,
    broker: Py<Broker>,
    group_id: String,
    /// Acknowledgements are synced (`commit_acks="all"`).
    syncs: bool,
}

/// Settings of `Broker.share_consumer()`, checked.
pub(crate) struct NewShareConsumer {
    pub config: mqlite::ShareConsumerConfig,
    pub topics: Option<Vec<String>>,
}

/// Topic names: a str or an iterable of str.
pub(crate) fn topic_names(obj: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let err = || PyTypeError::new_err("topics must be a topic name or a list of topic names");
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(vec![s.to_str()?.to_owned()]);
    }
    if obj.is_instance_of::<PyBytes>() {
        return Err(err());
    }
    let mut out = Vec::new();
    for item in obj.try_iter().map_err(|_| err())? {
        let item = item?;
        let s = item.cast::<PyString>().map_err(|_| err())?;
        out.push(s.to_str()?.to_owned());
    }
    Ok(out)
}

/// One `ShareMessage` or an iterable of them, as the engine's messages.
fn share_messages(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<mqlite::ShareMessage>> {
    let py = obj.py();
    let err = || {
        PyTypeError::new_err(format!(
            "{what}() takes an mqlite.ShareMessage or a list of them"
        ))
    };
    if let Ok(m) = obj.cast::<ShareMessage>() {
        return Ok(vec![m.get().engine(py)?]);
    }
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(err());
    }
    let mut out = Vec::new();
    for item in obj.try_iter().map_err(|_| err())? {
        let item = item?;
        let m = item.cast::<ShareMessage>().map_err(|_| err())?;
        out.push(m.get().engine(py)?);
    }
    Ok(out)
}

/// A delay in milliseconds as a `Duration`.
fn delay(py: Python<'_>, delay_ms: i64) -> PyResult<Duration> {
    Ok(Duration::from_millis(arg_u64(py, "delay_ms", delay_ms)?))
}

impl ShareConsumer {
    pub(crate) fn new(
        py: Python<'_>,
        broker: &Bound<'_, Broker>,
        n: NewShareConsumer,
    ) -> PyResult<Self> {
        let syncs = n.config.commit_acks == mqlite::Acks::All;
        let engine = &broker.get().inner;
        let config = n.config;
        let mut inner = py.detach(|| engine.share_consumer(config)).py_err(py)?;
        if let Some(topics) = &n.topics {
            let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
            // On failure the engine consumer is dropped: it leaves the group.
            py.detach(|| inner.subscribe(&refs)).py_err(py)?;
        }
        let waker = inner.waker();
        let group_id = inner.group_id().to_owned();
        let state = Arc::new(Mutex::new(State {
            consumer: Some(inner),
            handed: Vec::new(),
            pruned_len: 0,
            final_stats: mqlite::ShareConsumerStats::default(),
        }));
        broker.get().share_consumers.add(&state);
        Ok(ShareConsumer {
            waker,
            group_id,
            state: Local::new(state),
            closed: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            polls: AtomicU64::new(0),
            broker: broker.clone().unbind(),
            syncs,
        })
    }

    /// Fails with `mqlite.Closed` in a process forked from the one that
    /// made the consumer: checked before anything takes a lock.
    #[inline]
    fn check_forked(&self, py: Python<'_>) -> PyResult<()> {
        if self.state.forked() {
            Err(self.broker.get().forked_error(py, "share consumer"))
        } else {
            Ok(())
        }
    }

    /// Fails with `mqlite.Closed` once the consumer or its broker is closed
    /// (without taking a lock).
    fn check_not_closed(&self, py: Python<'_>) -> PyResult<()> {
        self.check_forked(py)?;
        if self.closed.load(Ordering::Acquire) {
            return Err(closed(py, "share consumer"));
        }
        self.broker.get().check_open(py)
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.broker.get().is_closed()
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

    /// Locks the state and checks the consumer and its broker are open. A
    /// consumer whose broker was closed leaves its group here.
    fn open_state<'a>(&'a self, py: Python<'_>) -> PyResult<MutexGuard<'a, State>> {
        self.check_forked(py)?;
        let mut st = self.lock(py);
        if self.closed.load(Ordering::Acquire) {
            return Err(closed(py, "share consumer"));
        }
        if let Err(e) = self.broker.get().check_open(py) {
            st.shut_down();
            return Err(e);
        }
        if st.consumer.is_none() {
            return Err(closed(py, "share consumer"));
        }
        Ok(st)
    }

    /// The next message, waiting up to `timeout` (`None`: no limit); None
    /// when the timeout passed or `wakeup()` was called.
    fn next_message(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> PyResult<Option<mqlite::ShareMessage>> {
        {
            let mut st = self.open_state(py)?;
            if let Some(m) = st.next_held() {
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
                Some(d) => d.saturating_duration_since(Instant::now()).min(WAIT_SLICE),
            };
            let got = py.detach(|| {
                let mut st = lock(&self.state);
                if self.closed.load(Ordering::Acquire) {
                    return Ok(None);
                }
                let Some(c) = st.consumer.as_mut() else {
                    return Ok(None);
                };
                c.poll_one(slice)
            });
            match got {
                Ok(Some(m)) => return Ok(Some(m)),
                Ok(None) => {}
                Err(e) => {
                    // Closed meanwhile: raise Closed instead.
                    drop(self.open_state(py)?);
                    return Err(to_py(py, e));
                }
            }
            // Closed meanwhile; a closed broker's consumer leaves its group.
            drop(self.open_state(py)?);
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    /// The held messages, up to `max` in all with those in `out`.
    fn take_held(&self, py: Python<'_>, out: &mut Vec<mqlite::ShareMessage>, max: usize) {
        // Closed meanwhile: return what was taken; the next call raises.
        if let Ok(mut st) = self.open_state(py) {
            while out.len() < max {
                let Some(m) = st.next_held() else {
                    break;
                };
                out.push(m);
            }
        }
    }

    /// Wraps engine messages for Python.
    fn wrap(
        slf: &Bound<'_, Self>,
        messages: Vec<mqlite::ShareMessage>,
    ) -> PyResult<Vec<Py<ShareMessage>>> {
        let py = slf.py();
        let made: Vec<(mqlite::Message, u32, Arc<Slot>)> = {
            let mut st = slf.get().lock(py);
            messages
                .into_iter()
                .map(|m| (m.message().clone(), m.delivery_count(), st.hand_out(m)))
                .collect()
        };
        made.into_iter()
            .map(|(message, delivery_count, slot)| {
                let base = Consumer::message(message);
                let sub = ShareMessage {
                    slot,
                    delivery_count,
                    consumer: slf.clone().unbind(),
                };
                Py::new(py, PyClassInitializer::from(base).add_subclass(sub))
            })
            .collect()
    }

    /// Wraps one engine message for Python.
    fn wrap_one(slf: &Bound<'_, Self>, m: mqlite::ShareMessage) -> PyResult<Py<ShareMessage>> {
        let mut v = Self::wrap(slf, vec![m])?;
        v.pop()
            .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("no message wrapped"))
    }

    /// Runs a settling call of the engine consumer on `messages`, without
    /// the GIL when `detach`.
    fn settle<F>(&self, py: Python<'_>, detach: bool, f: F) -> PyResult<()>
    where
        F: FnOnce(&mut mqlite::ShareConsumer) -> mqlite::Result<()> + Send,
    {
        let mut st = self.open_state(py)?;
        let Some(c) = st.consumer.as_mut() else {
            return Err(closed(py, "share consumer"));
        };
        let res = if detach { py.detach(|| f(c)) } else { f(c) };
        drop(st);
        res.py_err(py)
    }
}

#[pymethods]
impl ShareConsumer {
    /// Takes messages from every partition of these topics, including
    /// partitions added later, replacing the previous subscription. A topic
    /// that does not exist yet is read once it is created.
    ///
    /// Args:
    ///     topics: A topic name or a list of them (no patterns).
    ///
    /// Raises:
    ///     mqlite.InvalidTopicName: A topic name is invalid (nothing
    ///         changes then).
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `topics` is of the wrong type.
    fn subscribe(&self, py: Python<'_>, topics: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_forked(py)?;
        let names = topic_names(topics)?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut st = self.open_state(py)?;
        let Some(c) = st.consumer.as_mut() else {
            return Err(closed(py, "share consumer"));
        };
        py.detach(|| c.subscribe(&refs)).py_err(py)
    }

    /// Returns the next message, waiting up to `timeout` seconds for one.
    ///
    /// One engine poll delivers up to `max_poll_records` messages, each
    /// locked to this consumer from then on: messages due again (released,
    /// or whose lock ran out) first, then new ones. `poll()` hands them out
    /// one at a time while at least half of their lock is left; after
    /// that the consumer gives the rest back to the group (delivered
    /// again, to any member, their delivery not counted) and polls anew.
    /// If handling a message takes more than half a lock, lower
    /// `max_poll_records`.
    ///
    /// Args:
    ///     timeout: Seconds to wait (float); None waits until a message
    ///         arrives; 0 does not wait.
    ///
    /// Returns:
    ///     ShareMessage | None: The message, or None if the timeout passed
    ///     or `wakeup()` was called.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `timeout` is negative or NaN.
    ///     mqlite.IoError: Reading the log or writing the group's state
    ///         failed (nothing is delivered then).
    ///     KeyboardInterrupt: Ctrl-C during the wait.
    #[pyo3(signature = (timeout = None))]
    fn poll(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<Option<Py<ShareMessage>>> {
        let py = slf.py();
        let this = slf.get();
        this.check_forked(py)?;
        let timeout = crate::util::timeout(py, timeout)?;
        this.polls.fetch_add(1, Ordering::Relaxed);
        match this.next_message(py, timeout)? {
            Some(m) => Ok(Some(Self::wrap_one(slf, m)?)),
            None => Ok(None),
        }
    }

    /// Returns up to `num_messages` messages, waiting up to `timeout`
    /// seconds for the first one; it does not wait for more once one is
    /// there, and returns at most what one engine poll delivered
    /// (`max_poll_records`).
    ///
    /// Args:
    ///     num_messages: Most messages to return, 1 to 1,000,000.
    ///     timeout: Seconds to wait for the first message (float); None
    ///         waits until one arrives; 0 does not wait.
    ///
    /// Returns:
    ///     list[ShareMessage]: The messages; empty if the timeout passed or
    ///     `wakeup()` was called.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `num_messages` or `timeout` is out of
    ///         range.
    ///     mqlite.IoError: Reading the log or writing the group's state
    ///         failed.
    #[pyo3(signature = (num_messages = 1, timeout = None))]
    fn consume(
        slf: &Bound<'_, Self>,
        num_messages: i64,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<ShareMessage>>> {
        let py = slf.py();
        let this = slf.get();
        this.check_forked(py)?;
        if !(1..=1_000_000).contains(&num_messages) {
            return Err(invalid_argument(
                py,
                format!("num_messages must be 1 to 1000000, got {num_messages}"),
            ));
        }
        let timeout = crate::util::timeout(py, timeout)?;
        this.polls.fetch_add(1, Ordering::Relaxed);
        let Some(first) = this.next_message(py, timeout)? else {
            return Ok(Vec::new());
        };
        let n = num_messages as usize;
        let mut out = Vec::with_capacity(n.min(1024));
        out.push(first);
        this.take_held(py, &mut out, n);
        Self::wrap(slf, out)
    }

    /// Returns the messages of one engine poll at once: those delivered
    /// earlier and not returned yet if there are any (no new poll),
    /// otherwise one engine poll (up to `max_poll_records` messages),
    /// waiting up to `timeout` seconds for it.
    ///
    /// Args:
    ///     timeout: Seconds to wait (float); None waits until messages
    ///         arrive; 0 does not wait.
    ///
    /// Returns:
    ///     list[ShareMessage]: The messages; empty if the timeout passed or
    ///     `wakeup()` was called.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `timeout` is negative or NaN.
    ///     mqlite.IoError: Reading the log or writing the group's state
    ///         failed.
    ///     KeyboardInterrupt: Ctrl-C during the wait.
    #[pyo3(signature = (timeout = None))]
    fn poll_batch(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<Vec<Py<ShareMessage>>> {
        let py = slf.py();
        let this = slf.get();
        this.check_forked(py)?;
        let timeout = crate::util::timeout(py, timeout)?;
        this.polls.fetch_add(1, Ordering::Relaxed);
        let Some(first) = this.next_message(py, timeout)? else {
            return Ok(Vec::new());
        };
        let mut out = vec![first];
        this.take_held(py, &mut out, usize::MAX);
        Self::wrap(slf, out)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Option<Py<ShareMessage>>> {
        let py = slf.py();
        let this = slf.get();
        this.check_forked(py)?;
        if this.is_closed() {
            return Ok(None);
        }
        this.polls.fetch_add(1, Ordering::Relaxed);
        match this.next_message(py, None) {
            Ok(Some(m)) => Ok(Some(Self::wrap_one(slf, m)?)),
            Ok(None) => Ok(None),
            Err(e) if is_kind(py, &e, mqlite::ErrorKind::Closed) && this.is_closed() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Acknowledges messages: they are never delivered again. Several are
    /// acknowledged at once (one write, one sync), all or nothing. With
    /// `commit_acks="all"` they are on disk when this returns.
    ///
    /// Args:
    ///     messages: A `ShareMessage` of this consumer, or a list of them.
    ///
    /// Raises:
    ///     mqlite.InvalidRecordState: A message is no longer held by this
    ///         delivery (its lock ran out, or it was settled already):
    ///         none is acknowledged then.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.IoError: Writing the group's state failed.
    ///     TypeError: `messages` is of the wrong type.
    fn ack(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_forked(py)?;
        let ms = share_messages("ack", messages)?;
        self.settle(py, self.syncs, |c| c.ack(&ms))
    }

    /// Gives messages back: delivered again (to any member) now, or once
    /// `delay_ms` has passed; the messages behind them are delivered
    /// meanwhile. The delivery counts toward `max_deliveries`.
    ///
    /// Args:
    ///     messages: A `ShareMessage` of this consumer, or a list of them.
    ///     delay_ms: Milliseconds before they are delivered again (0: at
    ///         once).
    ///
    /// Raises:
    ///     mqlite.InvalidRecordState: As `ack()`.
    ///     mqlite.InvalidArgument: `delay_ms` is negative.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: An argument is of the wrong type.
    #[pyo3(signature = (messages, delay_ms = 0))]
    fn release(&self, py: Python<'_>, messages: &Bound<'_, PyAny>, delay_ms: i64) -> PyResult<()> {
        self.check_forked(py)?;
        let ms = share_messages("release", messages)?;
        let d = delay(py, delay_ms)?;
        self.settle(py, self.syncs, |c| c.release(&ms, d))
    }

    /// Sends messages to the dead-letter topic now, with `reason` in their
    /// `mqlite.dlq.reason` header (and `mqlite.dlq.topic`, `.partition`,
    /// `.offset`, `.deliveries` saying where they came from); they are
    /// never delivered again.
    ///
    /// Args:
    ///     messages: A `ShareMessage` of this consumer, or a list of them.
    ///     reason: Why, for the `mqlite.dlq.reason` header.
    ///
    /// Raises:
    ///     mqlite.InvalidRecordState: As `ack()`.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.Error: The send to the dead-letter topic failed (the
    ///         messages are dead-lettered by a later poll).
    ///     TypeError: An argument is of the wrong type.
    #[pyo3(signature = (messages, reason = "rejected"))]
    fn reject(&self, py: Python<'_>, messages: &Bound<'_, PyAny>, reason: &str) -> PyResult<()> {
        self.check_forked(py)?;
        let ms = share_messages("reject", messages)?;
        self.settle(py, true, |c| c.reject(&ms, reason))
    }

    /// Extends the locks of messages by `lock_duration_ms` from now, for
    /// processing that takes longer than the lock.
    ///
    /// Args:
    ///     messages: A `ShareMessage` of this consumer, or a list of them.
    ///
    /// Raises:
    ///     mqlite.InvalidRecordState: As `ack()`.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `messages` is of the wrong type.
    fn renew(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_forked(py)?;
        let ms = share_messages("renew", messages)?;
        self.settle(py, false, |c| c.renew(&ms))
    }

    /// Counters of what this consumer did so far (also once closed).
    ///
    /// Returns:
    ///     ShareConsumerStats: A snapshot.
    ///
    /// Raises:
    ///     mqlite.Closed: In a process forked from the one that made the
    ///         consumer.
    fn stats(&self, py: Python<'_>) -> PyResult<ShareConsumerStats> {
        self.check_forked(py)?;
        let s = {
            let st = self.lock(py);
            st.consumer
                .as_ref()
                .map_or(st.final_stats, mqlite::ShareConsumer::stats)
        };
        Ok(ShareConsumerStats {
            records: s.records,
            redelivered: s.redelivered,
            polls: self.polls.load(Ordering::Relaxed),
            acked: s.acked,
            released: s.released,
            rejected: s.rejected,
            dead_lettered: s.dead_lettered,
            expired: s.expired,
            window_full: s.window_full,
            skipped: s.skipped,
        })
    }

    /// Messages of the subscribed topics the group is not done with: the
    /// size of the job queue. Counts the whole group (every member in this
    /// process), as the group knows it now; messages never read yet count
    /// as available.
    ///
    /// Returns:
    ///     ShareBacklog: `available` (deliverable now), `in_flight` (locked
    ///     to a consumer, including those an engine poll delivered that
    ///     `poll()` has not handed out yet) and `delayed` (released with a
    ///     delay that has not passed).
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.UnknownTopic: A subscribed topic was deleted meanwhile.
    fn backlog(&self, py: Python<'_>) -> PyResult<ShareBacklog> {
        self.check_forked(py)?;
        let mut st = self.open_state(py)?;
        let Some(c) = st.consumer.as_mut() else {
            return Err(closed(py, "share consumer"));
        };
        let b = py.detach(|| c.backlog());
        drop(st);
        let b = b.py_err(py)?;
        Ok(ShareBacklog {
            available: b.available,
            in_flight: b.in_flight,
            delayed: b.delayed,
        })
    }

    /// Makes a `poll()` (or `consume()`, `poll_batch()`, or iteration)
    /// blocked in another thread return at once: None (an empty list;
    /// iteration stops). If no poll is waiting, the next one that would
    /// wait returns at once instead. Safe to call from any thread. Does
    /// nothing once the consumer is closed, or in a forked child.
    fn wakeup(&self) {
        if self.is_closed() {
            return;
        }
        self.woken.store(true, Ordering::Release);
        self.waker.wakeup();
    }

    /// Leaves the group: the messages this consumer holds (handed out and
    /// not settled, or not handed out yet) are delivered again, to other
    /// members. Later calls raise `mqlite.Closed` (a `ShareMessage`'s too)
    /// and iteration ends. A `poll()` waiting in another thread returns at
    /// once. Closing twice is fine. In a process forked from the one that
    /// made the consumer this does nothing.
    fn close(&self, py: Python<'_>) {
        if self.state.forked() {
            return;
        }
        self.closed.store(true, Ordering::Release);
        self.waker.wakeup();
        self.lock(py).shut_down();
    }

    /// bool: Whether the consumer, or the broker it came from, is closed
    /// (always True in a forked child).
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// str: The share group.
    #[getter]
    fn group_id(&self) -> &str {
        &self.group_id
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().check_not_closed(slf.py())?;
        Ok(slf)
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        let state = if self.is_closed() { "closed" } else { "open" };
        format!(
            "<mqlite.ShareConsumer group_id={:?} {state}>",
            self.group_id
        )
    }
}

/// A message delivered to a share consumer: an `mqlite.Message` (every
/// attribute of one), how often it was delivered, and the calls that
/// settle it. Settle each message once: `ack()`, `release()` or
/// `reject()` (or the consumer's calls of those names, for several at
/// once); `renew()` extends its lock meanwhile.
///
/// Attributes:
///     delivery_count (int): How many times it was delivered, this
///         delivery included (1 the first time).
#[pyclass(frozen, extends = Message, module = "mqlite")]
pub struct ShareMessage {
    slot: Arc<Slot>,
    delivery_count: u32,
    consumer: Py<ShareConsumer>,
}

impl ShareMessage {
    /// The engine message, while its consumer is open.
    fn engine(&self, py: Python<'_>) -> PyResult<mqlite::ShareMessage> {
        lock(&self.slot)
            .clone()
            .ok_or_else(|| closed(py, "share consumer"))
    }

    /// Runs a settling call without the GIL when `detach`, once the
    /// consumer is checked open.
    fn settle<F>(&self, py: Python<'_>, detach: bool, f: F) -> PyResult<()>
    where
        F: FnOnce(&mqlite::ShareMessage) -> mqlite::Result<()> + Send,
    {
        self.consumer.get().check_not_closed(py)?;
        let m = self.engine(py)?;
        let res = if detach { py.detach(|| f(&m)) } else { f(&m) };
        res.py_err(py)
    }
}

#[pymethods]
impl ShareMessage {
    /// int: How many times it was delivered, this delivery included (1 the
    /// first time).
    #[getter]
    fn delivery_count(&self) -> u32 {
        self.delivery_count
    }

    /// Done with: it is never delivered again (see `ShareConsumer.ack()`).
    ///
    /// Raises:
    ///     mqlite.InvalidRecordState: This delivery no longer holds it (its
    ///         lock ran out, or it was settled already).
    ///     mqlite.Closed: Its consumer or the broker is closed.
    fn ack(&self, py: Python<'_>) -> PyResult<()> {
        let syncs = self.consumer.get().syncs;
        self.settle(py, syncs, mqlite::ShareMessage::ack)
    }

    /// Gives it back: delivered again (to any member) now, or once
    /// `delay_ms` has passed.
    ///
    /// Args:
    ///     delay_ms: Milliseconds before it is delivered again (0: at
    ///         once).
    ///
    /// Raises:
    ///     mqlite.InvalidRecordState: As `ack()`.
    ///     mqlite.InvalidArgument: `delay_ms` is negative.
    ///     mqlite.Closed: Its consumer or the broker is closed.
    #[pyo3(signature = (delay_ms = 0))]
    fn release(&self, py: Python<'_>, delay_ms: i64) -> PyResult<()> {
        let d = delay(py, delay_ms)?;
        let syncs = self.consumer.get().syncs;
        self.settle(py, syncs, |m| m.release(d))
    }

    /// Sends it to the dead-letter topic now, with `reason` in its
    /// `mqlite.dlq.reason` header; it is never delivered again.
    ///
    /// Args:
    ///     reason: Why, for the `mqlite.dlq.reason` header.
    ///
    /// Raises:
    ///     mqlite.InvalidRecordState: As `ack()`.
    ///     mqlite.Closed: Its consumer or the broker is closed.
    #[pyo3(signature = (reason = "rejected"))]
    fn reject(&self, py: Python<'_>, reason: &str) -> PyResult<()> {
        self.settle(py, true, |m| m.reject(reason))
    }

    /// Extends its lock by the consumer's `lock_duration_ms` from now.
    ///
    /// Raises:
    ///     mqlite.InvalidRecordState: As `ack()`.
    ///     mqlite.Closed: Its consumer or the broker is closed.
    fn renew(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, false, mqlite::ShareMessage::renew)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let m = slf.as_super().get().engine();
        format!(
            "ShareMessage(topic='{}', partition={}, offset={}, delivery_count={})",
            m.topic(),
            m.partition(),
            m.offset(),
            slf.get().delivery_count
        )
    }
}

/// What a share consumer did so far, as returned by `ShareConsumer.stats()`.
///
/// Attributes:
///     records (int): Messages delivered by engine polls (deliveries again
///         included).
///     redelivered (int): Of those, deliveries of a message delivered
///         before.
///     polls (int): Calls of `poll()`, `poll_batch()`, `consume()` and
///         iteration steps.
///     acked (int): Messages acknowledged.
///     released (int): Messages released.
///     rejected (int): Messages rejected.
///     dead_lettered (int): Messages this consumer sent to the dead-letter
///         topic (rejected, or delivered `max_deliveries` times).
///     expired (int): Locks found run out by this consumer's polls.
///     window_full (int): Polls that found a partition's window full
///         (`max_in_flight` offsets read ahead of the first not done) and
///         did not read it.
///     skipped (int): Messages retention deleted before they were
///         delivered.
#[pyclass(frozen, get_all, module = "mqlite")]
pub struct ShareConsumerStats {
    /// int: Messages delivered by engine polls (deliveries again included).
    records: u64,
    /// int: Of those, deliveries of a message delivered before.
    redelivered: u64,
    /// int: Calls of `poll()`, `poll_batch()`, `consume()` and iteration steps.
    polls: u64,
    /// int: Messages acknowledged.
    acked: u64,
    /// int: Messages released.
    released: u64,
    /// int: Messages rejected.
    rejected: u64,
    /// int: Messages sent to the dead-letter topic (rejected, or delivered
    /// `max_deliveries` times).
    dead_lettered: u64,
    /// int: Locks found run out by this consumer's polls.
    expired: u64,
    /// int: Polls that found a partition's window full and did not read it.
    window_full: u64,
    /// int: Messages retention deleted before they were delivered.
    skipped: u64,
}

#[pymethods]
impl ShareConsumerStats {
    fn __repr__(&self) -> String {
        format!(
            "ShareConsumerStats(records={}, redelivered={}, polls={}, acked={}, released={}, \
             rejected={}, dead_lettered={}, expired={}, window_full={}, skipped={})",
            self.records,
            self.redelivered,
            self.polls,
            self.acked,
            self.released,
            self.rejected,
            self.dead_lettered,
            self.expired,
            self.window_full,
            self.skipped
        )
    }
}

/// Messages of a share group not done yet, as returned by
/// `ShareConsumer.backlog()`.
///
/// Attributes:
///     available (int): Deliverable now: never delivered, released, or
///         whose lock ran out.
///     in_flight (int): Locked to a consumer.
///     delayed (int): Released with a delay that has not passed yet.
#[pyclass(frozen, get_all, module = "mqlite")]
pub struct ShareBacklog {
    /// int: Deliverable now: never delivered, released, or whose lock ran
    /// out.
    available: u64,
    /// int: Locked to a consumer.
    in_flight: u64,
    /// int: Released with a delay that has not passed yet.
    delayed: u64,
}

#[pymethods]
impl ShareBacklog {
    fn __repr__(&self) -> String {
        format!(
            "ShareBacklog(available={}, in_flight={}, delayed={})",
            self.available, self.in_flight, self.delayed
        )
    }
}
