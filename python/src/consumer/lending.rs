//! The rebalance listener and the lending of the engine consumer to calls
//! made from its Python callbacks (module documentation of `consumer`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, ThreadId};

use pyo3::prelude::*;
use pyo3::types::{PyWeakrefMethods, PyWeakrefReference};

use super::state::State;
use super::{lock, warn};

/// `on_assign`, `on_revoke` and `on_lost` of one subscription.
#[derive(Default)]
pub(super) struct Callbacks {
    pub(super) fns: Mutex<[Option<Py<PyAny>>; 3]>,
}

pub(super) const ON_ASSIGN: usize = 0;
pub(super) const ON_REVOKE: usize = 1;
pub(super) const ON_LOST: usize = 2;

/// An engine consumer lent to calls made from a callback.
pub(super) struct Lent {
    pub(super) thread: ThreadId,
    /// `None` while such a call uses it.
    pub(super) consumer: Option<Box<mqlite::Consumer>>,
}

pub(super) struct Slot {
    /// An idle engine consumer (no group, nothing assigned) that stands in
    /// for the real one while it is lent.
    pub(super) spare: Option<mqlite::Consumer>,
    pub(super) lent: Option<Lent>,
}

/// The part of a consumer its rebalance listener shares.
pub(super) struct Shared {
    /// Whether `slot.lent` is set; read without the lock by every call.
    pub(super) lending: AtomicBool,
    pub(super) slot: Mutex<Slot>,
    /// Whether `error` holds an exception.
    pub(super) failed: AtomicBool,
    /// The first exception a callback raised, for the call that ran it.
    pub(super) error: Mutex<Option<PyErr>>,
    /// Callbacks held by the engine consumer's listeners (the current one;
    /// briefly also the one a `subscribe()` replaces), for the garbage
    /// collector.
    pub(super) callbacks: Mutex<Vec<Arc<Callbacks>>>,
    /// `on_commit`, given to `Broker.consumer()`.
    pub(super) on_commit: Mutex<Option<Py<PyAny>>>,
}

impl Shared {
    pub(super) fn set_error(&self, py: Python<'_>, e: PyErr) {
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

    pub(super) fn take_error(&self) -> Option<PyErr> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        let e = lock(&self.error).take();
        self.failed.store(false, Ordering::Release);
        e
    }

    /// Runs `f` with `consumer` lent to calls made on this thread (module
    /// documentation).
    pub(super) fn lend<R>(&self, consumer: &mut mqlite::Consumer, f: impl FnOnce() -> R) -> R {
        let _lend = Lend::new(self, consumer);
        f()
    }

    /// Drops every callback: none runs after this.
    pub(super) fn clear_callbacks(&self) -> Vec<Py<PyAny>> {
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
pub(super) struct Borrowed<'a> {
    pub(super) shared: &'a Shared,
    pub(super) consumer: Option<Box<mqlite::Consumer>>,
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        if let Some(lent) = lock(&self.shared.slot).lent.as_mut() {
            lent.consumer = self.consumer.take();
        }
    }
}

/// The engine consumer, as a call reaches it.
pub(super) enum Access<'a> {
    /// Through the state mutex.
    Outer(MutexGuard<'a, State>),
    /// Lent to a callback on this thread.
    Lent(Borrowed<'a>),
}

impl Access<'_> {
    pub(super) fn consumer(&mut self) -> &mut mqlite::Consumer {
        match self {
            Access::Outer(st) => &mut st.consumer,
            Access::Lent(b) => b.consumer.as_mut().expect("held until dropped"),
        }
    }

    /// The buffer and the rest, outside callbacks. (Inside one the buffer
    /// is empty: module documentation.)
    pub(super) fn state(&mut self) -> Option<&mut State> {
        match self {
            Access::Outer(st) => Some(st),
            Access::Lent(_) => None,
        }
    }
}

/// Runs the Python callbacks of a subscription for the engine, and commits
/// after `on_revoke` with auto-commit.
pub(super) struct Listener {
    pub(super) shared: Arc<Shared>,
    pub(super) callbacks: Arc<Callbacks>,
    /// The Python consumer (weak: it owns the engine consumer, which owns
    /// this listener).
    pub(super) this: Py<PyWeakrefReference>,
    pub(super) auto_commit: bool,
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
