//! What a process forked with `os.fork()` may do with the objects its parent
//! made.
//!
//! # The rule
//!
//! A broker belongs to the process that opened it, and so do the producers,
//! consumers and processors made from it. Only the thread calling `fork()`
//! survives in the child: the engine's background threads (retention,
//! prefaulting, producer linger) are gone, and a lock one of them held at
//! that instant stays locked in the child forever. So in a forked child:
//!
//! - every method that would reach the engine raises `mqlite.Closed`, with a
//!   message naming both processes, before it touches any lock;
//! - `closed` is True; `close()`, `Consumer.wakeup()` and `Processor.stop()`
//!   do nothing (there is nothing of the child's to close or stop);
//! - when the objects are garbage-collected, the engine's objects are leaked
//!   ([`Local`]) instead of closed: closing would flush and join threads that
//!   do not exist in the child, or wait for such a lock.
//!
//! Messages received before the fork stay readable (they point into shared
//! memory maps). The child may open brokers of its own, on another directory,
//! on the parent's once the parent has closed it, or on the parent's at once
//! (shared) when the parent opened it in shared mode.
//!
//! # Detection
//!
//! `os.register_at_fork(after_in_child=...)` runs [`after_fork_in_child`],
//! which bumps a process-wide generation; every object records the
//! generation at creation, so the check on each call is one atomic load (a
//! `getpid()` per call would be a system call on the hot paths). A fork that
//! bypasses Python's fork hooks (a C library calling `fork()` and going on
//! running Python) is caught by a pid comparison where it matters most, when
//! the objects are dropped.
//!
//! # The directory's locks
//!
//! The engine locks a data directory with `flock` on files in it (the
//! owner's lock, each shared-mode process's liveness file, the lock held
//! against openers of the other mode, consumer group members' liveness
//! files), and an `flock` belongs to
//! the open file description: the child's inherited descriptors keep them
//! shared with the parent. Left alone, a parent that closes its broker would
//! keep the directory locked for as long as any child lives (reopening it
//! would fail with `Locked`, a parent that died would look alive to the
//! others while a child lives, holding its partitions' append locks, a
//! group member would look alive), and a child could never open it. So the hook
//! closes, in the child, every inherited descriptor of a file in the data
//! directories of the brokers open at the fork ([`LOCKS`]); the parent's
//! locks are untouched (it holds its own descriptors), and its `close()`
//! releases the directory. (A broker still being opened by another thread
//! at the instant of the fork is not recorded yet: its descriptors stay open
//! in the child, which then keeps that directory locked until it exits.)

use mqlite::sync;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, TryLockError};

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Incremented in every forked child by [`after_fork_in_child`].
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The data directories of the brokers open in this process: `(token,
/// canonical path)`. Locked only with the GIL held and never across a
/// release of it, so the thread that forks (which holds the GIL) never
/// finds it held by a thread that is gone in the child.
static LOCKS: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());

/// Source of the tokens of [`LOCKS`].
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// The process an object belongs to.
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    generation: u64,
    pid: u32,
}

impl Owner {
    /// This process, now.
    pub fn current() -> Self {
        Owner {
            generation: GENERATION.load(Ordering::Relaxed),
            pid: std::process::id(),
        }
    }

    /// Whether this is a process forked from the owner (one atomic load).
    #[inline]
    pub fn forked(&self) -> bool {
        GENERATION.load(Ordering::Relaxed) != self.generation
    }

    /// [`Owner::forked`], or a different pid (a fork that bypassed Python's
    /// fork hooks). A system call: for the cold paths.
    fn forked_or_moved(&self) -> bool {
        self.forked() || std::process::id() != self.pid
    }

    /// The owner's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// A value that belongs to the process that made it: dropped as usual there,
/// leaked in a forked child (see the module documentation).
pub struct Local<T> {
    /// `Some` until dropped.
    value: Option<T>,
    owner: Owner,
}

impl<T> Local<T> {
    /// Wraps `value`, owned by this process.
    pub fn new(value: T) -> Self {
        Local {
            value: Some(value),
            owner: Owner::current(),
        }
    }

    /// The owning process.
    #[inline]
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// Whether this is a child forked from the owning process.
    #[inline]
    pub fn forked(&self) -> bool {
        self.owner.forked()
    }
}

impl<T> Deref for Local<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        self.value
            .as_ref()
            .expect("a Local holds its value until dropped")
    }
}

impl<T> DerefMut for Local<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        self.value
            .as_mut()
            .expect("a Local holds its value until dropped")
    }
}

impl<T> Drop for Local<T> {
    fn drop(&mut self) {
        if let Some(v) = self.value.take() {
            if self.owner.forked_or_moved() {
                std::mem::forget(v);
            }
        }
    }
}

fn locks() -> std::sync::MutexGuard<'static, Vec<(u64, PathBuf)>> {
    sync::lock(&LOCKS)
}

/// Records the data directory of a broker just opened on `dir` (call with
/// the GIL held, as the rule of [`LOCKS`] asks). Returns the token for
/// [`unregister_lock`]; None if the directory cannot be resolved (a child
/// then keeps that directory locked while it lives).
pub fn register_lock(dir: &Path) -> Option<u64> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    locks().push((token, dir));
    Some(token)
}

/// Forgets a directory recorded by [`register_lock`], once its broker is
/// closed (call with the GIL held).
pub fn unregister_lock(token: u64) {
    locks().retain(|(t, _)| *t != token);
}

/// The descriptors open in this process on a file below one of `dirs`.
fn descriptors_under(dirs: &[PathBuf]) -> Vec<i32> {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd").or_else(|_| std::fs::read_dir("/dev/fd"))
    else {
        return Vec::new();
    };
    fds.filter_map(Result::ok)
        .filter_map(|entry| {
            let fd: i32 = entry.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(entry.path()).ok()?;
            dirs.iter().any(|d| target.starts_with(d)).then_some(fd)
        })
        .collect()
}

/// Runs in a forked child, on its only thread, before any Python code: marks
/// every object of the parent as foreign and closes the inherited
/// descriptors of files in the parent's data directories.
#[pyfunction]
fn after_fork_in_child(py: Python<'_>) {
    GENERATION.fetch_add(1, Ordering::Relaxed);
    let dirs: Vec<PathBuf> = match LOCKS.try_lock() {
        Ok(mut l) => l.drain(..).map(|(_, d)| d).collect(),
        Err(TryLockError::Poisoned(p)) => p.into_inner().drain(..).map(|(_, d)| d).collect(),
        // Held by a thread that does not exist here (never, by the locking
        // rule of LOCKS): keep the descriptors rather than block.
        Err(TryLockError::WouldBlock) => return,
    };
    if dirs.is_empty() {
        return;
    }
    let Ok(os) = py.import("os") else {
        return;
    };
    for fd in descriptors_under(&dirs) {
        // The leaked engine objects never use the descriptor again. A
        // failure leaves the directory locked while the child lives.
        let _ = os.call_method1("close", (fd,));
    }
}

/// Registers [`after_fork_in_child`] with `os.register_at_fork`.
pub fn install(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let os = py.import("os")?;
    if !os.hasattr("register_at_fork")? {
        return Ok(()); // no fork() on this platform
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("after_in_child", wrap_pyfunction!(after_fork_in_child, m)?)?;
    os.call_method("register_at_fork", (), Some(&kwargs))?;
    Ok(())
}
