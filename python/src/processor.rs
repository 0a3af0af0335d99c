//! `mqlite.Processor` and `mqlite.ProcessorStats`: the engine's
//! [`mqlite::Processor`] over a Python consumer, calling a Python handler on
//! worker threads.
//!
//! # The consumer
//!
//! The engine processor owns its engine consumer. `run()` takes it out of
//! the Python consumer ([`Consumer::take_engine`]: buffered messages are put
//! back first, so nothing is skipped), leaving an idle stand-in there, and
//! gives it back when the run is over. Meanwhile the Python consumer's calls
//! raise `RuntimeError`; its `on_assign` and `on_revoke` callbacks still run
//! (the engine processor calls the consumer's listener after committing what
//! was processed).
//!
//! # Threads and the GIL
//!
//! The thread calling `run()` spawns one thread that runs the engine
//! processor (it polls and dispatches without the GIL) and waits for it
//! without the GIL, waking every 100 ms to check for signals (Ctrl-C stops
//! the processor, then raises) and for a `stop()` the engine processor has
//! not seen yet (it clears its stop flag when it starts). The engine's
//! worker threads attach to Python only to call the handler, once per batch
//! the engine dispatches (a run of one partition's messages): the handler
//! is called for each message of the batch with the GIL taken once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList};

use crate::consumer::Consumer;
use crate::error::{invalid_argument, IntoPy};
use crate::util::{arg_u32, arg_u64, run_interruptible};

/// What a `Processor.run()` did.
///
/// Attributes:
///     processed (int): Messages the handler processed (returned a truthy
///         value for).
///     retries (int): Handler failures (falsy return or exception) that
///         were retried.
///     failed (int): Messages given up on after `max_retries` (then
///         committed past like processed ones).
///     dead_lettered (int): Of those, the messages sent to the
///         `dead_letter_topic`.
///     commits (int): Commits of processed offsets.
#[pyclass(frozen, get_all, module = "mqlite")]
pub struct ProcessorStats {
    /// int: Messages the handler processed.
    processed: u64,
    /// int: Handler failures that were retried.
    retries: u64,
    /// int: Messages given up on after `max_retries`.
    failed: u64,
    /// int: Commits of processed offsets.
    commits: u64,
    /// int: Messages sent to the dead-letter topic.
    dead_lettered: u64,
}

#[pymethods]
impl ProcessorStats {
    fn __repr__(&self) -> String {
        format!(
            "ProcessorStats(processed={}, retries={}, failed={}, dead_lettered={}, commits={})",
            self.processed, self.retries, self.failed, self.dead_lettered, self.commits
        )
    }
}

/// Runs a handler over a consumer's messages on worker threads, committing
/// only offsets whose messages, and all before them, were processed
/// (RocketMQ's orderly and concurrent message listeners).
///
/// Args:
///     consumer: A consumer with a `group_id`, subscribed or assigned.
///     threads: Worker threads, 1 to 1024 (default 4).
///     mode: `"orderly"` (default; or `"ordered"`): each partition's
///         messages one at a time, in offset order (a failing message holds
///         its partition back); `"concurrently"` (or `"concurrent"`): any
///         message on any free worker.
///     commit_interval_ms: How often processed offsets are committed
///         (default 1000); also committed before a partition is revoked and
///         when `run()` returns.
///     max_in_flight: Most messages dispatched and not yet processed
///         (default 10,000).
///     retry_backoff_ms: Wait before retrying a failed message (default
///         100).
///     max_retries: Give up on a message after this many retries (counted
///         in `failed`, then committed past); None (default) retries
///         forever, so nothing is skipped.
///     dead_letter_topic: Where a message given up on goes (RocketMQ's
///         dead-letter queue; created with one partition if it does not
///         exist when `run()` starts): its key, value, headers and
///         timestamp, with headers saying where it came from and why
///         (`mqlite.dlq.topic`, `.partition`, `.offset`, `.deliveries`,
///         `.reason`), written durably and once before the message is
///         committed past. None (default): such a message is only counted
///         in `failed`.
///
/// Raises:
///     mqlite.InvalidArgument: No `group_id`, an unknown `mode`, or a
///         value out of range.
///     mqlite.InvalidTopicName: `dead_letter_topic` is not a valid name.
///     mqlite.Closed: The consumer or its broker is closed.
#[pyclass(frozen, module = "mqlite")]
pub struct Processor {
    consumer: Py<Consumer>,
    config: mqlite::ProcessorConfig,
    running: AtomicBool,
    /// `stop()` was called and the run it stops has not returned yet.
    stop_requested: AtomicBool,
    /// The running engine processor's stop handle.
    stopper: Mutex<Option<mqlite::ProcessorStop>>,
}

impl Processor {
    fn request_stop(&self) {
        self.stop_requested.store(true, Ordering::SeqCst);
        if let Some(s) = &*self.stopper.lock().unwrap_or_else(PoisonError::into_inner) {
            s.stop();
        }
    }

    /// Calls the handler for each message of a batch on a worker thread,
    /// attached to Python (holding the GIL) once for the whole batch.
    /// Returns how many it processed: up to the first that failed.
    #[allow(clippy::unused_self)]
    fn handle(&self, handler: &Py<PyAny>, batch: &[mqlite::Message]) -> usize {
        Python::attach(|py| {
            let handler = handler.bind(py);
            for (i, m) in batch.iter().enumerate() {
                let res = Bound::new(py, Consumer::message(m.clone()))
                    .and_then(|msg| handler.call1((msg,)))
                    .and_then(|r| r.is_truthy());
                match res {
                    Ok(true) => {}
                    Ok(false) => return i,
                    Err(e) => {
                        log_failure(py, m, &e);
                        return i;
                    }
                }
            }
            batch.len()
        })
    }
}

impl Processor {
    /// Calls a batch handler with the messages of a batch on a worker
    /// thread. Returns how many it processed (see `run_batches()`).
    #[allow(clippy::unused_self)]
    fn handle_list(&self, handler: &Py<PyAny>, batch: &[mqlite::Message]) -> usize {
        Python::attach(|py| {
            let res = (|| -> PyResult<usize> {
                let msgs = batch
                    .iter()
                    .map(|m| Bound::new(py, Consumer::message(m.clone())))
                    .collect::<PyResult<Vec<_>>>()?;
                let r = handler.bind(py).call1((PyList::new(py, msgs)?,))?;
                if r.is_none() {
                    return Ok(batch.len());
                }
                if r.is_instance_of::<PyBool>() {
                    return Ok(if r.is_truthy()? { batch.len() } else { 0 });
                }
                let k: i64 = r.extract().map_err(|_| {
                    PyTypeError::new_err(
                        "a run_batches() handler returns None, a bool or the number of messages processed",
                    )
                })?;
                Ok(usize::try_from(k).unwrap_or(0).min(batch.len()))
            })();
            match res {
                Ok(k) => k,
                Err(e) => {
                    if let Some(m) = batch.first() {
                        log_failure(py, m, &e);
                    }
                    0
                }
            }
        })
    }
}

/// Logs a handler's exception on the "mqlite" logger.
fn log_failure(py: Python<'_>, m: &mqlite::Message, e: &PyErr) {
    let logged = (|| -> PyResult<()> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("exc_info", e.value(py))?;
        py.import("logging")?
            .call_method1("getLogger", ("mqlite",))?
            .call_method(
                "warning",
                (
                    "processor handler failed on %s/%d offset %d (retried)",
                    m.topic(),
                    m.partition(),
                    m.offset(),
                ),
                Some(&kwargs),
            )?;
        Ok(())
    })();
    if let Err(le) = logged {
        le.write_unraisable(py, None);
    }
}

#[pymethods]
impl Processor {
    #[new]
    #[pyo3(signature = (consumer, threads = 4, *, mode = "orderly", commit_interval_ms = 1000, max_in_flight = 10000, retry_backoff_ms = 100, max_retries = None, dead_letter_topic = None))]
    #[allow(clippy::too_many_arguments)] // one per argument of the Python signature
    fn new(
        py: Python<'_>,
        consumer: Py<Consumer>,
        threads: i64,
        mode: &str,
        commit_interval_ms: i64,
        max_in_flight: i64,
        retry_backoff_ms: i64,
        max_retries: Option<i64>,
        dead_letter_topic: Option<String>,
    ) -> PyResult<Self> {
        if let Some(t) = &dead_letter_topic {
            mqlite::validate_topic_name(t).py_err(py)?;
        }
        consumer.get().check_not_closed(py)?;
        if !consumer.get().has_group() {
            return Err(invalid_argument(
                py,
                "a processor commits what it processed: the consumer needs a group_id",
            ));
        }
        if !(1..=1024).contains(&threads) {
            return Err(invalid_argument(
                py,
                format!("threads must be 1 to 1024, got {threads}"),
            ));
        }
        if max_in_flight < 1 {
            return Err(invalid_argument(
                py,
                format!("max_in_flight must be at least 1, got {max_in_flight}"),
            ));
        }
        let config = mqlite::ProcessorConfig {
            threads: threads as usize,
            mode: mode.parse().py_err(py)?,
            commit_interval_ms: arg_u64(py, "commit_interval_ms", commit_interval_ms)?,
            max_in_flight: usize::try_from(max_in_flight).unwrap_or(usize::MAX),
            retry_backoff_ms: arg_u64(py, "retry_backoff_ms", retry_backoff_ms)?,
            max_retries: max_retries
                .map(|v| arg_u32(py, "max_retries", v))
                .transpose()?,
            dead_letter_topic,
        };
        Ok(Processor {
            consumer,
            config,
            running: AtomicBool::new(false),
            stop_requested: AtomicBool::new(false),
            stopper: Mutex::new(None),
        })
    }

    /// Polls the consumer and calls `handler(message)` on the worker
    /// threads until `stop()` is called; blocks meanwhile.
    ///
    /// Messages reach the workers in batches (runs of one partition's
    /// messages, in offset order); a worker calls the handler for each
    /// message of its batch holding the GIL once for the batch. A truthy
    /// return marks the message processed; a falsy one, or an exception
    /// (logged on the "mqlite" logger), has it retried after
    /// `retry_backoff_ms` (the messages after it in its batch wait for
    /// it). The handler gets the same `Message` objects as the consumer
    /// yields. While `run()` runs, the consumer's own methods raise
    /// `RuntimeError`. Before returning, the workers finish the
    /// messages they hold and what was processed is committed.
    ///
    /// Args:
    ///     handler: Called as `handler(message)` on a worker thread.
    ///
    /// Returns:
    ///     ProcessorStats: What this run did.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is (or got) closed.
    ///     RuntimeError: The processor is already running, or the consumer
    ///         is busy.
    ///     KeyboardInterrupt: Ctrl-C (the processor stopped first).
    ///     mqlite.Error: A failed poll or commit.
    fn run(&self, py: Python<'_>, handler: Py<PyAny>) -> PyResult<ProcessorStats> {
        self.run_with(py, &handler, false)
    }

    /// As `run()`, with a handler given a batch at a time: a list of one
    /// partition's messages in offset order (the batches `run()` goes
    /// through one message at a time), called on a worker thread.
    ///
    /// The handler returns None or True when it processed them all; an int
    /// `k` when it processed the first `k` and `messages[k]` failed: that
    /// one is retried after `retry_backoff_ms`, the handler then getting
    /// the list from it on; False, or an exception (logged on the "mqlite"
    /// logger), fails the first message.
    ///
    /// Args:
    ///     handler: Called as `handler(messages)` on a worker thread.
    ///
    /// Returns:
    ///     ProcessorStats: What this run did.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is (or got) closed.
    ///     RuntimeError: The processor is already running, or the consumer
    ///         is busy.
    ///     KeyboardInterrupt: Ctrl-C (the processor stopped first).
    ///     mqlite.Error: A failed poll or commit.
    fn run_batches(&self, py: Python<'_>, handler: Py<PyAny>) -> PyResult<ProcessorStats> {
        self.run_with(py, &handler, true)
    }

    /// Stops `run()`: nothing more is dispatched, the workers finish what
    /// they hold (a message whose handler fails is left unprocessed and
    /// uncommitted instead of being retried, with the messages after it in
    /// its batch), what was processed is
    /// committed and `run()` returns. May
    /// be called from any thread, the handler included. Called before
    /// `run()`, it makes the next `run()` return at once. In a process
    /// forked from the one that made the processor this does nothing.
    fn stop(&self) {
        if !self.consumer.get().forked() {
            self.request_stop();
        }
    }

    /// bool: Whether `run()` is running.
    #[getter]
    fn running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// mqlite.Consumer: The consumer.
    #[getter]
    fn consumer(&self, py: Python<'_>) -> Py<Consumer> {
        self.consumer.clone_ref(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "<mqlite.Processor threads={} mode={} {}>",
            self.config.threads,
            match self.config.mode {
                mqlite::ProcessingMode::Orderly => "orderly",
                mqlite::ProcessingMode::Concurrently => "concurrently",
            },
            if self.running() { "running" } else { "idle" }
        )
    }
}

impl Processor {
    /// The body of `run()` (per message) and `run_batches()`.
    fn run_with(
        &self,
        py: Python<'_>,
        handler: &Py<PyAny>,
        batches: bool,
    ) -> PyResult<ProcessorStats> {
        if !handler.bind(py).is_callable() {
            return Err(PyTypeError::new_err("handler must be callable"));
        }
        // Before the running flag: in a forked child it may be stuck set.
        self.consumer.get().check_forked(py)?;
        if self.running.swap(true, Ordering::SeqCst) {
            return Err(PyRuntimeError::new_err("the processor is already running"));
        }
        let res = self.run_inner(py, handler, batches);
        self.stop_requested.store(false, Ordering::SeqCst);
        self.running.store(false, Ordering::SeqCst);
        res
    }

    fn run_inner(
        &self,
        py: Python<'_>,
        handler: &Py<PyAny>,
        batches: bool,
    ) -> PyResult<ProcessorStats> {
        let consumer = self.consumer.get();
        let engine = consumer.take_engine(py)?;
        let mut proc = match mqlite::Processor::try_new(engine, self.config.clone()) {
            Ok(p) => p,
            // Checked by the constructor already; the consumer goes back.
            Err((e, engine)) => {
                consumer.give_back(py, *engine);
                return Err(e).py_err(py);
            }
        };
        let stopper = proc.stopper();
        *self.stopper.lock().unwrap_or_else(PoisonError::into_inner) = Some(stopper.clone());
        let (result, interrupted) = run_interruptible(
            py,
            || {
                if batches {
                    proc.run_batches(|batch| self.handle_list(handler, batch))
                } else {
                    proc.run_batches(|batch| self.handle(handler, batch))
                }
            },
            || {
                if self.stop_requested.load(Ordering::SeqCst) {
                    // Again at every tick: the engine clears its flag when
                    // its run starts.
                    stopper.stop();
                }
            },
            || self.stop_requested.store(true, Ordering::SeqCst),
        );
        *self.stopper.lock().unwrap_or_else(PoisonError::into_inner) = None;
        consumer.give_back(py, proc.into_consumer());
        let stats = match result {
            Ok(r) => r.py_err(py)?,
            Err(_) => return Err(PyRuntimeError::new_err("the processor thread panicked")),
        };
        if let Some(e) = interrupted {
            return Err(e);
        }
        Ok(ProcessorStats {
            processed: stats.processed,
            retries: stats.retries,
            failed: stats.failed,
            dead_lettered: stats.dead_lettered,
            commits: stats.commits,
        })
    }
}
