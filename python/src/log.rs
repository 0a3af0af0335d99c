//! The engine's log records (recovery cuts, corruption found, committed
//! offsets reset, failed background work) on Python's `logging`, logger
//! `mqlite`.
//!
//! # Never calling Python where the engine logs
//!
//! The engine logs from its own background threads and from calls made by
//! Python threads, sometimes while it holds internal locks. Taking the GIL
//! there could deadlock: a Python thread holding the GIL may be waiting for
//! that very lock (non-blocking calls keep the GIL, see `lib.rs`), and a
//! Python handler may release the GIL or call back into mqlite. So
//! [`Bridge::log`] never touches Python: it formats the record and queues
//! it ([`QUEUE`], bounded). The records reach `logging` from places where
//! the GIL can be taken safely:
//!
//! - a delivery thread of this module (started with the first broker),
//!   woken by each queued record, which takes the GIL (blocking only
//!   itself) and emits what is queued;
//! - the bindings' own calls at points where they hold the GIL and no
//!   engine lock ([`flush`]): `open()` and `Broker.close()` deliver what
//!   they logged before they return, so recovery warnings are in the logs
//!   by the time the broker is usable.
//!
//! Records keep their order; their `pathname` and `lineno` are the Rust
//! code's, the thread fields those of the thread that emitted
//! them, and `mqlite_target` holds the Rust module path that logged.
//! Records queued past [`CAPACITY`] are dropped and counted, and the count
//! is logged with the next delivery.
//!
//! # Levels
//!
//! Records the `mqlite` logger would drop cost one atomic load: the most
//! verbose level it is enabled for (`isEnabledFor`, so `logging.disable`
//! counts) is cached as the `log` crate's maximum level, refreshed at
//! import, at every `open()`, with every delivery and at least once a
//! second by the delivery thread.
//!
//! # Interpreter shutdown and fork
//!
//! An `atexit` hook delivers what is queued and stops the delivery thread
//! before the interpreter finalizes; records logged later are dropped (no
//! thread attaches to a finalizing interpreter). Hooks of
//! `os.register_at_fork` hold the queue's lock across `fork()`, so a child
//! never inherits it locked, and give the child its own delivery thread
//! when it opens a broker (records queued in the parent are the parent's
//! to deliver).

use mqlite::sync;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use log::{Level, LevelFilter, Log, Metadata, Record};
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};

/// The Python logger of every record.
const LOGGER: &str = "mqlite";

/// Most records queued at once; more are dropped (and counted).
const CAPACITY: usize = 10_000;

/// Longest the delivery thread sleeps between two refreshes of the level.
const REFRESH: Duration = Duration::from_secs(1);

/// Rounds of delivery one drain runs at most: a handler that logs through
/// mqlite queues new records while it runs, which the next round (or the
/// delivery thread) takes.
const ROUNDS: usize = 16;

/// One record, formatted where it was logged.
struct Entry {
    level: Level,
    target: String,
    message: String,
    file: Option<String>,
    line: u32,
}

/// The queue between the threads that log and those that deliver.
struct Queue {
    entries: VecDeque<Entry>,
    /// Records dropped because the queue was full, not reported yet.
    dropped: u64,
    /// A thread is emitting records (with the GIL, which a handler may
    /// release meanwhile): others wait for it rather than reorder them.
    delivering: bool,
    /// The interpreter is shutting down: nothing is queued any more.
    stopped: bool,
    /// The delivery thread, once started.
    thread: Option<JoinHandle<()>>,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    entries: VecDeque::new(),
    dropped: 0,
    delivering: false,
    stopped: false,
    thread: None,
});

/// Signalled when a record is queued or the interpreter shuts down.
static WORK: Condvar = Condvar::new();

/// Signalled when a delivery ends.
static IDLE: Condvar = Condvar::new();

/// The cached level: a `LevelFilter` as `usize`.
static GATE: AtomicUsize = AtomicUsize::new(LevelFilter::Warn as usize);

fn queue() -> MutexGuard<'static, Queue> {
    sync::lock(&QUEUE)
}

fn gate_filter(n: usize) -> LevelFilter {
    match n {
        1 => LevelFilter::Error,
        2 => LevelFilter::Warn,
        3 => LevelFilter::Info,
        4 => LevelFilter::Debug,
        5 => LevelFilter::Trace,
        _ => LevelFilter::Off,
    }
}

/// A Rust level as a Python `logging` level (TRACE is 5, below DEBUG).
fn python_level(level: Level) -> u32 {
    match level {
        Level::Error => 40,
        Level::Warn => 30,
        Level::Info => 20,
        Level::Debug => 10,
        Level::Trace => 5,
    }
}

/// The `log::Log` of the module: queues records for [`deliver`].
struct Bridge;

static BRIDGE: Bridge = Bridge;

impl Bridge {
    fn enqueue(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let entry = Entry {
            level: record.level(),
            target: record.target().to_owned(),
            message: record.args().to_string(),
            file: record.file().map(str::to_owned),
            line: record.line().unwrap_or(0),
        };
        let mut q = queue();
        if q.stopped {
            return;
        }
        if q.entries.len() >= CAPACITY {
            q.dropped += 1;
            return;
        }
        q.entries.push_back(entry);
        drop(q);
        WORK.notify_one();
    }
}

impl Log for Bridge {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= gate_filter(GATE.load(Ordering::Relaxed))
    }

    fn log(&self, record: &Record<'_>) {
        // Never unwind into the engine (a Display impl that panics, say).
        let _ = catch_unwind(AssertUnwindSafe(|| self.enqueue(record)));
    }

    fn flush(&self) {}
}

/// Reads the level of the `mqlite` logger into the cache.
fn refresh(py: Python<'_>) -> PyResult<()> {
    let logger = py.import("logging")?.call_method1("getLogger", (LOGGER,))?;
    let mut gate = LevelFilter::Off;
    for level in [
        Level::Trace,
        Level::Debug,
        Level::Info,
        Level::Warn,
        Level::Error,
    ] {
        if logger
            .call_method1("isEnabledFor", (python_level(level),))?
            .is_truthy()?
        {
            gate = level.to_level_filter();
            break;
        }
    }
    GATE.store(gate as usize, Ordering::Relaxed);
    log::set_max_level(gate);
    Ok(())
}

/// Emits one record on the `mqlite` logger, as `Logger.log` would (level
/// check, filters, handlers) but with the Rust code's file and line.
fn emit(py: Python<'_>, logger: &Bound<'_, PyAny>, e: Entry) -> PyResult<()> {
    let level = python_level(e.level);
    if !logger.call_method1("isEnabledFor", (level,))?.is_truthy()? {
        return Ok(());
    }
    let extra = PyDict::new(py);
    extra.set_item("mqlite_target", &e.target)?;
    let record = logger.call_method1(
        "makeRecord",
        (
            LOGGER,
            level,
            e.file.as_deref().unwrap_or("<unknown>"),
            e.line,
            e.message,
            PyTuple::empty(py),
            py.None(),
            py.None(),
            extra,
        ),
    )?;
    logger.call_method1("handle", (record,))?;
    Ok(())
}

/// Ends a claimed delivery, even if emitting panicked.
struct Delivering;

impl Drop for Delivering {
    fn drop(&mut self) {
        queue().delivering = false;
        IDLE.notify_all();
    }
}

/// Emits what is queued. With `wait`, first waits (with the GIL released)
/// for a delivery running on another thread, so that everything queued
/// before the call is emitted when it returns; without, leaves the work to
/// that delivery. Never fails: a record that cannot be emitted is dropped.
fn deliver(py: Python<'_>, wait: bool) {
    {
        let mut q = queue();
        if q.delivering {
            if !wait {
                return;
            }
            drop(q);
            py.detach(|| {
                let mut q = queue();
                while q.delivering {
                    q = sync::wait(&IDLE, q);
                }
                q.delivering = true;
            });
        } else {
            q.delivering = true;
        }
    }
    let _claim = Delivering;
    let _ = refresh(py);
    let Ok(logger) = py
        .import("logging")
        .and_then(|l| l.call_method1("getLogger", (LOGGER,)))
    else {
        return;
    };
    for _ in 0..ROUNDS {
        let (entries, dropped) = {
            let mut q = queue();
            (
                std::mem::take(&mut q.entries),
                std::mem::take(&mut q.dropped),
            )
        };
        if entries.is_empty() && dropped == 0 {
            break;
        }
        for e in entries {
            let _ = emit(py, &logger, e);
        }
        if dropped > 0 {
            let _ = logger.call_method1(
                "warning",
                (
                    "%d log records of the engine were dropped (more than %d queued)",
                    dropped,
                    CAPACITY,
                ),
            );
        }
    }
}

/// Delivers what the engine logged so far, before a binding's call returns
/// (call with no engine lock held).
pub(crate) fn flush(py: Python<'_>) {
    let _ = catch_unwind(AssertUnwindSafe(|| deliver(py, true)));
}

/// Refreshes the cached level of the `mqlite` logger and makes sure the
/// delivery thread runs (call before opening a broker, whose records should
/// follow the current configuration).
pub(crate) fn refresh_level(py: Python<'_>) {
    let _ = refresh(py);
    let mut q = queue();
    if q.thread.is_none() && !q.stopped {
        start(&mut q);
    }
}

/// The delivery thread: emits queued records and refreshes the level until
/// the interpreter shuts down.
fn run() {
    loop {
        let stopped = {
            let mut q = queue();
            if q.entries.is_empty() && q.dropped == 0 && !q.stopped {
                q = sync::wait_timeout(&WORK, q, REFRESH).0;
            }
            q.stopped
        };
        // `stopped` is set by the atexit hook, which then waits for this
        // thread with the GIL released: attaching is safe until then.
        let attached = Python::try_attach(|py| {
            let _ = catch_unwind(AssertUnwindSafe(|| deliver(py, stopped)));
        });
        if stopped || attached.is_none() {
            return;
        }
    }
}

/// Starts the delivery thread (with [`QUEUE`] locked by the caller).
fn start(q: &mut Queue) {
    q.thread = std::thread::Builder::new()
        .name("mqlite-log".into())
        .spawn(run)
        .ok();
}

/// `atexit`: delivers what is queued, then stops the delivery thread.
fn shutdown(py: Python<'_>) {
    let thread = {
        let mut q = queue();
        q.stopped = true;
        q.thread.take()
    };
    WORK.notify_all();
    if let Some(t) = thread {
        py.detach(move || {
            let _ = t.join();
        });
    }
    deliver(py, true);
}

thread_local! {
    /// The queue's lock, held by the forking thread across `fork()`.
    static FORK_GUARD: std::cell::RefCell<Option<MutexGuard<'static, Queue>>> =
        const { std::cell::RefCell::new(None) };
}

/// `os.register_at_fork(before=...)`.
fn before_fork() {
    // Other threads hold the lock only briefly and never while waiting for
    // the GIL, which this thread holds.
    let g = queue();
    FORK_GUARD.with(|f| *f.borrow_mut() = Some(g));
}

/// `after_in_parent`: releases the lock.
fn after_fork_in_parent() {
    FORK_GUARD.with(|f| f.borrow_mut().take());
}

/// `after_in_child`: the only thread; the delivery thread is gone.
fn after_fork_in_child() {
    FORK_GUARD.with(|f| {
        if let Some(mut q) = f.borrow_mut().take() {
            q.entries.clear();
            q.dropped = 0;
            q.delivering = false;
            // The handle is the parent's thread: never join it here. The
            // child's starts with its first broker.
            std::mem::forget(q.thread.take());
        }
    });
}

/// Registers a Rust function as a Python callable without arguments.
fn hook(py: Python<'_>, f: fn()) -> PyResult<Bound<'_, PyCFunction>> {
    PyCFunction::new_closure(
        py,
        None,
        None,
        move |_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            f();
            Ok(())
        },
    )
}

/// Installs the bridge (at import): the `log` crate's logger, the level
/// and the atexit and fork hooks. The delivery thread starts with the first
/// broker (importing the module starts no thread, so that `fork()` before
/// any broker is opened forks a single-threaded process).
pub fn install(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    if log::set_logger(&BRIDGE).is_err() {
        return Ok(()); // imported before in this process
    }
    refresh(py)?;
    let shutdown_hook = PyCFunction::new_closure(
        py,
        None,
        None,
        |args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            shutdown(args.py());
            Ok(())
        },
    )?;
    py.import("atexit")?
        .call_method1("register", (shutdown_hook,))?;
    let os = py.import("os")?;
    if os.hasattr("register_at_fork")? {
        let kwargs = PyDict::new(py);
        kwargs.set_item("before", hook(py, before_fork)?)?;
        kwargs.set_item("after_in_parent", hook(py, after_fork_in_parent)?)?;
        kwargs.set_item("after_in_child", hook(py, after_fork_in_child)?)?;
        os.call_method("register_at_fork", (), Some(&kwargs))?;
    }
    Ok(())
}

/// The cached level of the `mqlite` logger, as a Python level (0 when
/// nothing passes): what the engine's records are filtered by before they
/// are queued. For tests.
#[pyfunction]
pub fn _log_level() -> u32 {
    match gate_filter(GATE.load(Ordering::Relaxed)).to_level() {
        Some(l) => python_level(l),
        None => 0,
    }
}
