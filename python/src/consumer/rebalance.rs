//! The rebalance listener: runs a subscription's Python callbacks, and
//! lends the engine's [`mqlite::RebalanceContext`] to the calls they make
//! on the consumer.
//!
//! The engine runs the listener inside a call (a poll, `subscribe`,
//! `close`...) that holds the consumer's state mutex, on that call's thread.
//! A callback gets the Python consumer and may call `commit()`, `seek()`,
//! `position()` and the like on it: those calls find the context lent to
//! their thread and use it instead of the mutex. Calls the context does not
//! offer (polls, `subscribe()`, `assign()`...) raise `RuntimeError` there.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};

use mqlite::RebalanceContext;
use pyo3::prelude::*;
use pyo3::types::{PyWeakrefMethods, PyWeakrefReference};

use super::lock;

/// `on_assign`, `on_revoke` and `on_lost` of one subscription.
#[derive(Default)]
pub(super) struct Callbacks {
    pub(super) fns: Mutex<[Option<Py<PyAny>>; 3]>,
}

pub(super) const ON_ASSIGN: usize = 0;
pub(super) const ON_REVOKE: usize = 1;
pub(super) const ON_LOST: usize = 2;

/// A context lent for the duration of one callback.
struct CtxPtr(NonNull<RebalanceContext<'static>>);

// SAFETY: the pointer is dereferenced only on the thread that lent it
// (`Lent::thread`), while the callback that lent it runs; other threads
// only move it in and out of the mutex.
unsafe impl Send for CtxPtr {}

struct Lent {
    thread: ThreadId,
    /// `None` while a call made from the callback uses it.
    ctx: Option<CtxPtr>,
}

/// The part of a consumer its rebalance listener shares.
pub(super) struct Shared {
    /// Whether `lent` is set; read without the lock by every call.
    lending: AtomicBool,
    lent: Mutex<Option<Lent>>,
    /// Whether `error` holds an exception.
    pub(super) failed: AtomicBool,
    /// The first exception a callback raised, for the call that ran it.
    error: Mutex<Option<PyErr>>,
    /// Callbacks held by the engine consumer's listeners (the current one;
    /// briefly also the one a `subscribe()` replaces), for the garbage
    /// collector.
    pub(super) callbacks: Mutex<Vec<Arc<Callbacks>>>,
    /// `on_commit`, given to `Broker.consumer()`.
    pub(super) on_commit: Mutex<Option<Py<PyAny>>>,
}

/// What [`Shared::borrow`] found.
pub(super) enum Borrow<'a> {
    /// No context is lent to this thread.
    None,
    /// A call made from a callback is already using it.
    Busy,
    Lent(Borrowed<'a>),
}

impl Shared {
    pub(super) fn new(on_commit: Option<Py<PyAny>>) -> Shared {
        Shared {
            lending: AtomicBool::new(false),
            lent: Mutex::new(None),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            callbacks: Mutex::new(Vec::new()),
            on_commit: Mutex::new(on_commit),
        }
    }

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

    /// Whether a context is lent to a callback on this thread.
    #[inline]
    pub(super) fn lent_here(&self) -> bool {
        self.lending.load(Ordering::Acquire)
            && lock(&self.lent)
                .as_ref()
                .is_some_and(|l| l.thread == thread::current().id())
    }

    /// The context lent to this thread's callback, for one call.
    pub(super) fn borrow(&self) -> Borrow<'_> {
        if !self.lending.load(Ordering::Acquire) {
            return Borrow::None;
        }
        let mut lent = lock(&self.lent);
        match lent.as_mut() {
            Some(l) if l.thread == thread::current().id() => match l.ctx.take() {
                Some(ctx) => Borrow::Lent(Borrowed {
                    shared: self,
                    ctx: Some(ctx),
                }),
                None => Borrow::Busy,
            },
            _ => Borrow::None,
        }
    }

    /// Runs `f` with `ctx` lent to calls made on this thread.
    fn lend<R>(&self, ctx: &mut RebalanceContext<'_>, f: impl FnOnce() -> R) -> R {
        struct Guard<'a>(&'a Shared, bool);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                if self.1 {
                    self.0.lending.store(false, Ordering::Release);
                    lock(&self.0.lent).take();
                }
            }
        }
        let owns = {
            let mut lent = lock(&self.lent);
            if lent.is_none() {
                *lent = Some(Lent {
                    thread: thread::current().id(),
                    ctx: Some(CtxPtr(NonNull::from(ctx).cast())),
                });
                self.lending.store(true, Ordering::Release);
                true
            } else {
                false
            }
        };
        let _guard = Guard(self, owns);
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

/// The context taken by a call made from a callback; put back on drop.
pub(super) struct Borrowed<'a> {
    shared: &'a Shared,
    ctx: Option<CtxPtr>,
}

impl Borrowed<'_> {
    /// The lent context.
    pub(super) fn ctx(&mut self) -> &mut RebalanceContext<'static> {
        let p = self.ctx.as_mut().expect("held until dropped");
        // SAFETY: the pointer came from the `&mut RebalanceContext` the
        // engine passed to the listener, whose call is still running on
        // this thread (`Shared::borrow` checked the thread, and the lend
        // guard clears the slot before that call returns). Taking it out of
        // the slot makes this the only use of it, and the reference does
        // not outlive `self` (the `'static` is never observable: the
        // context's methods return owned values).
        unsafe { p.0.as_mut() }
    }
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        if let Some(l) = lock(&self.shared.lent).as_mut() {
            l.ctx = self.ctx.take();
        }
    }
}

/// Runs the Python callbacks of a subscription for the engine.
pub(super) struct Listener {
    pub(super) shared: Arc<Shared>,
    pub(super) callbacks: Arc<Callbacks>,
    /// The Python consumer (weak: it owns the engine consumer, which owns
    /// this listener).
    pub(super) this: Py<PyWeakrefReference>,
}

impl Listener {
    fn call(&self, which: usize, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
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
                .lend(ctx, || cb.bind(py).call1((this, partitions.to_vec())));
            if let Err(e) = result {
                self.shared.set_error(py, e);
            }
        });
    }
}

impl mqlite::RebalanceListener for Listener {
    fn on_assign(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.call(ON_ASSIGN, ctx, partitions);
    }

    fn on_revoke(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.call(ON_REVOKE, ctx, partitions);
    }

    fn on_lost(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        // As confluent-kafka: on_revoke stands in when on_lost is not set.
        let which = if lock(&self.callbacks.fns)[ON_LOST].is_some() {
            ON_LOST
        } else {
            ON_REVOKE
        };
        self.call(which, ctx, partitions);
    }
}
