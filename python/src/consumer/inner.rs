//! The Rust side of `Consumer`: construction, locking, access to the engine
//! consumer (lent or through the state mutex), polling and closing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use super::lending::{Access, Borrowed, Shared, Slot};
use super::state::{Counters, State};
use super::{lock, warn, Consumer, Message, NewConsumer, REFRESH, WAIT_SLICE};
use crate::broker::Broker;
use crate::errors::{closed, to_py, IntoPy};
use crate::fork::Local;

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
    pub(super) fn busy() -> PyErr {
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
    pub(super) fn lock<'a>(&'a self, py: Python<'_>) -> MutexGuard<'a, State> {
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
    pub(super) fn lent_here(&self) -> bool {
        self.shared.lending.load(Ordering::Acquire)
            && lock(&self.shared.slot)
                .lent
                .as_ref()
                .is_some_and(|l| l.thread == thread::current().id())
    }

    /// Locks the state and checks the consumer is open. A `close()` made in
    /// a callback is completed here.
    pub(super) fn open_state<'a>(&'a self, py: Python<'_>) -> PyResult<MutexGuard<'a, State>> {
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
    pub(super) fn access_with(&self, py: Python<'_>, open: bool) -> PyResult<Access<'_>> {
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

    pub(super) fn access(&self, py: Python<'_>) -> PyResult<Access<'_>> {
        self.access_with(py, true)
    }

    /// Closes the engine consumer (once), without the GIL if that may commit.
    pub(super) fn shut_down(&self, py: Python<'_>, st: &mut State) {
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

    pub(super) fn is_closed(&self) -> bool {
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
    pub(super) fn next_message(
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
    pub(super) fn with_unbuffered<R: Send>(
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
    pub(super) fn check_partition(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: u32,
    ) -> PyResult<()> {
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
