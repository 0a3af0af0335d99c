//! The Rust side of `Consumer`: construction, locking, access to the engine
//! consumer (through the state mutex, or the rebalance context lent to a
//! callback), polling and closing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use super::rebalance::{Borrow, Borrowed, Shared};
use super::state::{Counters, State};
use super::{lock, Consumer, Message, NewConsumer, WAIT_SLICE};
use crate::broker::Broker;
use crate::error::{closed, to_py, IntoPy};
use crate::fork::Local;

/// The engine consumer, as a call reaches it.
pub(super) enum Access<'a> {
    /// Through the state mutex.
    Outer(MutexGuard<'a, State>),
    /// The rebalance context lent to a callback on this thread.
    Lent(Borrowed<'a>),
}

/// Runs `$body` with `$c` bound to the engine consumer or the lent
/// rebalance context: the calls allowed inside a callback have the same
/// names on both.
macro_rules! on_either {
    ($acc:expr, |$c:ident| $body:expr) => {
        match &mut $acc {
            $crate::consumer::inner::Access::Outer(st) => {
                let $c = &mut st.consumer;
                $body
            }
            $crate::consumer::inner::Access::Lent(b) => {
                let $c = b.ctx();
                $body
            }
        }
    };
}
pub(super) use on_either;

impl Consumer {
    pub(crate) fn new(n: NewConsumer, broker: Py<Broker>) -> Self {
        let config = n.inner.config();
        let group_id = config.group_id.clone();
        let clustering = group_id.is_some() && !config.broadcast;
        Consumer {
            waker: n.inner.waker(),
            group_id,
            clustering,
            state: Local::new(Mutex::new(State {
                consumer: n.inner,
                shut: false,
            })),
            shared: Local::new(Arc::new(Shared::new(n.on_commit))),
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

    /// Takes the engine consumer out for a processor (the messages it holds
    /// go with it), leaves an idle stand-in, and makes calls raise until
    /// [`Consumer::give_back`].
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
        let real = std::mem::replace(&mut st.consumer, stand_in);
        self.processing.store(true, Ordering::Release);
        Ok(real)
    }

    /// Puts back the engine consumer taken by [`Consumer::take_engine`].
    pub(crate) fn give_back(&self, py: Python<'_>, consumer: mqlite::Consumer) {
        let mut st = self.lock(py);
        let stand_in = std::mem::replace(&mut st.consumer, consumer);
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

    /// Whether a rebalance callback runs on this thread.
    #[inline]
    pub(super) fn lent_here(&self) -> bool {
        self.shared.lent_here()
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
    pub(super) fn outer<'a>(
        &'a self,
        py: Python<'_>,
        what: &str,
    ) -> PyResult<MutexGuard<'a, State>> {
        if self.lent_here() {
            return Err(PyRuntimeError::new_err(format!(
                "{what}() cannot be called inside on_assign or on_revoke"
            )));
        }
        self.open_state(py)
    }

    /// The engine consumer: the context lent to this thread's callback, or
    /// through the state mutex (checking the consumer is open if `open`).
    pub(super) fn access_with(&self, py: Python<'_>, open: bool) -> PyResult<Access<'_>> {
        self.check_forked(py)?;
        match self.shared.borrow() {
            Borrow::Lent(b) => return Ok(Access::Lent(b)),
            Borrow::Busy => {
                return Err(PyRuntimeError::new_err(
                    "the consumer is busy (a call from a callback is using it)",
                ))
            }
            Borrow::None => {}
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
        if self.group_id.is_some() {
            py.detach(|| st.shut_down());
        } else {
            st.shut_down();
        }
    }

    /// After a call into the engine that may have run callbacks: completes a
    /// `close()` made in one, raises what one raised.
    pub(super) fn after_call(&self, py: Python<'_>, st: &mut State) -> PyResult<()> {
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

    /// The next message, waiting up to `timeout` (`None`: no limit); None
    /// when the timeout passed or `wakeup()` was called.
    ///
    /// A message the engine holds is handed out with the GIL held; a poll
    /// that does not wait keeps it too, but for a consumer with a group
    /// (which may commit or rebalance there); waits are without it, in
    /// slices of at most [`WAIT_SLICE`], checking for signals between them.
    pub(super) fn next_message(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> PyResult<Option<mqlite::Message>> {
        {
            let mut st = self.outer(py, "poll")?;
            if let Some(m) = st.consumer.next_held() {
                return Ok(Some(m));
            }
            if self.woken.swap(false, Ordering::AcqRel) {
                return Ok(None);
            }
            let c = &mut st.consumer;
            let res = if self.group_id.is_some() {
                py.detach(|| self.poll_engine(c, Duration::ZERO))
            } else {
                self.poll_engine(c, Duration::ZERO)
            };
            match res {
                Ok(Some(m)) => return Ok(Some(m)),
                Ok(None) => self.after_call(py, &mut st)?,
                Err(e) => {
                    self.after_call(py, &mut st)?;
                    return Err(to_py(py, e));
                }
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
            let got = py.detach(|| {
                let mut st = lock(&self.state);
                // A close or a callback's exception is dealt with below.
                if self.closed.load(Ordering::Acquire)
                    || self.shared.failed.load(Ordering::Acquire)
                    || self.processing.load(Ordering::Acquire)
                {
                    return Ok(None);
                }
                self.poll_engine(&mut st.consumer, slice)
            });
            // A message handed out is returned, whatever happened meanwhile
            // (a close from another thread counts it as read).
            let got = match got {
                Ok(Some(m)) => return Ok(Some(m)),
                Ok(None) => None,
                Err(e) => Some(e),
            };
            if self.processing.load(Ordering::Acquire) {
                return Err(Self::busy());
            }
            if self.closed.load(Ordering::Acquire) || self.shared.failed.load(Ordering::Acquire) {
                let mut st = self.lock(py);
                self.after_call(py, &mut st)?;
            }
            if let Some(e) = got {
                return Err(to_py(py, e));
            }
            py.check_signals()?;
        }
    }

    /// The engine's `poll_one`. When a rebalance callback raised in it, the
    /// message it returned goes back (the partition is sought back to it,
    /// to be read again) and the call raises the callback's exception.
    fn poll_engine(
        &self,
        c: &mut mqlite::Consumer,
        timeout: Duration,
    ) -> mqlite::Result<Option<mqlite::Message>> {
        let got = c.poll_one(timeout)?;
        if self.shared.failed.load(Ordering::Acquire) {
            if let Some(m) = got {
                // Fails only when the partition went away meanwhile (its
                // new owner reads it) or retention removed the message.
                let _ = c.seek(m.topic(), m.partition(), m.offset());
            }
            return Ok(None);
        }
        Ok(got)
    }

    /// Runs `f` on the engine consumer, without the GIL for a consumer with
    /// a group (it may commit), then deals with what callbacks did.
    pub(super) fn with_engine<R: Send>(
        &self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(&mut mqlite::Consumer) -> mqlite::Result<R> + Send,
    ) -> PyResult<R> {
        let mut st = self.outer(py, what)?;
        let c = &mut st.consumer;
        let res = if self.group_id.is_some() {
            py.detach(|| f(c))
        } else {
            f(c)
        };
        self.after_call(py, &mut st)?;
        res.py_err(py)
    }

    /// Raises unless `(topic, partition)` exists (with `creates`, a missing
    /// topic passes when the broker creates topics on first use).
    pub(super) fn check_partition(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: u32,
        creates: bool,
    ) -> PyResult<()> {
        let broker = &self.broker.get().inner;
        let info = match broker.topic(topic) {
            // `creates`: the engine's call creates it (`auto_create_topics`).
            Err(mqlite::Error::UnknownTopic(_)) if creates && broker.auto_creates_topics() => {
                return Ok(())
            }
            r => r.py_err(py)?,
        };
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
