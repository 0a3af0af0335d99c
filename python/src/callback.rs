//! Python code the producer calls: delivery callbacks (`on_delivery`),
//! interceptors and custom partitioners, and `mqlite.ProducerRecord`, the
//! record they see.
//!
//! # The GIL and the core's threads
//!
//! The core completes records on whatever thread finishes their batch: the
//! sending thread, the producer's background thread, or one in `flush()`,
//! and it holds internal locks while it runs completions. A Python thread may
//! hold the GIL while it waits for one of those locks (a `produce()` on the
//! fast path keeps the GIL), so a completion must never wait for the GIL.
//!
//! So completions do not call Python. They push an [`Event`] into the
//! producer's [`Delivery`] queue; Python threads serve the queue with the
//! GIL, in order, in `poll()`, `flush()`, `close()` and at the start of
//! `produce()`, `send()` and `send_batch()` (confluent-kafka's model).
//!
//! Interceptors' `on_send` and custom partitioners must run before the
//! record is queued (they change it or route it), so they are called
//! directly, on the sending thread, attaching to Python if that thread
//! released the GIL. The core calls them before it takes any lock, so a
//! thread that holds the GIL is never waiting on the thread that calls them.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::error::to_py;
use crate::producer::{data, headers, RecordMetadata};
use mqlite::sync;
use mqlite::sync::lock;

/// A completion waiting for a Python thread.
pub(crate) enum Event {
    /// A record sent with `produce(on_delivery=cb)` is done.
    Delivered {
        callback: Py<PyAny>,
        result: mqlite::Result<mqlite::RecordMetadata>,
    },
    /// Interceptor number `index` is to see a record's outcome.
    Acknowledged {
        index: usize,
        result: mqlite::Result<mqlite::RecordMetadata>,
    },
}

/// The queue of completions, served by Python threads.
pub(crate) struct Delivery {
    queue: Mutex<VecDeque<Event>>,
    /// Events in `queue`, read without the lock on the fast paths.
    len: AtomicUsize,
    /// `Delivered` events queued or being run: records whose `on_delivery`
    /// callback has not run yet (counted by `len(producer)`).
    reports: AtomicUsize,
    /// Threads waiting in [`Delivery::wait`] (notified only when some are).
    waiters: AtomicUsize,
    ready: Condvar,
    /// The thread serving the queue, so that callbacks run one at a time and
    /// in order.
    server: Mutex<Option<ThreadId>>,
    idle: Condvar,
    /// The interceptor objects, by index.
    interceptors: Vec<Py<PyAny>>,
}

/// Clears the serving thread when serving ends, even on an error.
struct Serving<'a> {
    delivery: &'a Delivery,
    nested: bool,
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        if !self.nested {
            *lock(&self.delivery.server) = None;
            self.delivery.idle.notify_all();
        }
    }
}

impl Delivery {
    pub(crate) fn new(interceptors: Vec<Py<PyAny>>) -> Self {
        Delivery {
            queue: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
            reports: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            ready: Condvar::new(),
            server: Mutex::new(None),
            idle: Condvar::new(),
            interceptors,
        }
    }

    /// Queues an event. Called by the core's threads: never touches Python.
    pub(crate) fn push(&self, event: Event) {
        if matches!(event, Event::Delivered { .. }) {
            self.reports.fetch_add(1, Ordering::AcqRel);
        }
        let mut q = lock(&self.queue);
        q.push_back(event);
        self.len.store(q.len(), Ordering::Release);
        drop(q);
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.ready.notify_all();
        }
    }

    /// Records whose `on_delivery` callback is queued here and has not run
    /// (or not finished running) yet.
    pub(crate) fn reports(&self) -> usize {
        self.reports.load(Ordering::Acquire)
    }

    /// Whether events are waiting.
    #[inline]
    pub(crate) fn pending(&self) -> bool {
        self.len.load(Ordering::Acquire) > 0
    }

    /// Waits without the GIL until an event is queued or `timeout` passes
    /// (at most `timeout`; the caller loops to check for signals).
    pub(crate) fn wait(&self, py: Python<'_>, timeout: Duration) {
        if self.pending() {
            return;
        }
        py.detach(|| {
            self.waiters.fetch_add(1, Ordering::AcqRel);
            let q = lock(&self.queue);
            let deadline = Instant::now() + timeout;
            let mut q = q;
            while q.is_empty() {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                q = sync::wait_timeout(&self.ready, q, deadline - now).0;
            }
            drop(q);
            self.waiters.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Becomes the serving thread. With `wait`, waits (without the GIL) for
    /// another thread to finish serving; without, gives up at once.
    fn begin(&self, py: Python<'_>, wait: bool) -> Option<Serving<'_>> {
        let me = std::thread::current().id();
        loop {
            let mut s = lock(&self.server);
            match *s {
                None => {
                    *s = Some(me);
                    return Some(Serving {
                        delivery: self,
                        nested: false,
                    });
                }
                // A callback that calls poll() or flush(): serve from here,
                // which keeps the order.
                Some(t) if t == me => {
                    return Some(Serving {
                        delivery: self,
                        nested: true,
                    })
                }
                Some(_) if !wait => return None,
                Some(_) => {
                    drop(s);
                    py.detach(|| {
                        let s = lock(&self.server);
                        let _unused = self
                            .idle
                            .wait_timeout_while(s, Duration::from_millis(100), |s| s.is_some())
                            .unwrap_or_else(PoisonError::into_inner);
                    });
                    // A signal stays pending for the caller (checking it
                    // here would consume it with nobody to raise it).
                }
            }
        }
    }

    /// Runs the queued callbacks on this thread, in order, and returns how
    /// many events it served.
    ///
    /// With `wait`, first waits for a thread already serving to finish (so
    /// that `flush()` returns only after every callback of what it flushed
    /// ran); without, returns 0 at once if another thread is serving.
    ///
    /// An exception raised by an `on_delivery` callback stops serving and is
    /// returned; the events after it stay queued for the next call.
    /// Exceptions of interceptors are logged and skipped.
    pub(crate) fn serve(&self, py: Python<'_>, wait: bool) -> PyResult<usize> {
        if !wait && !self.pending() {
            return Ok(0);
        }
        let Some(_serving) = self.begin(py, wait) else {
            return Ok(0);
        };
        let mut served = 0;
        loop {
            let mut batch = {
                let mut q = lock(&self.queue);
                self.len.store(0, Ordering::Release);
                std::mem::take(&mut *q)
            };
            if batch.is_empty() {
                return Ok(served);
            }
            while let Some(event) = batch.pop_front() {
                served += 1;
                let report = matches!(event, Event::Delivered { .. });
                let res = self.run(py, event);
                if report {
                    self.reports.fetch_sub(1, Ordering::AcqRel);
                }
                if let Err(e) = res {
                    // Put the rest back in front of what came since.
                    let mut q = lock(&self.queue);
                    batch.append(&mut q);
                    *q = batch;
                    self.len.store(q.len(), Ordering::Release);
                    return Err(e);
                }
            }
        }
    }

    fn run(&self, py: Python<'_>, event: Event) -> PyResult<()> {
        match event {
            Event::Delivered { callback, result } => {
                let (err, md) = outcome(py, result)?;
                callback.call1(py, (err, md))?;
            }
            Event::Acknowledged { index, result } => {
                let obj = self.interceptors[index].bind(py);
                let (err, md) = outcome(py, result)?;
                if let Err(e) = obj.call_method1("on_acknowledgement", (err, md)) {
                    log_skipped(py, obj, "on_acknowledgement", e);
                }
            }
        }
        Ok(())
    }
}

/// `(err, msg)` for a callback: the exception instance or None, and the
/// metadata or None.
fn outcome(
    py: Python<'_>,
    result: mqlite::Result<mqlite::RecordMetadata>,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    Ok(match result {
        Ok(md) => (py.None(), Py::new(py, RecordMetadata::from(md))?.into_any()),
        Err(e) => (to_py(py, e).into_value(py).into_any(), py.None()),
    })
}

/// Reports an interceptor's exception on the `mqlite` logger; the record
/// goes on as if the interceptor had not been called.
fn log_skipped(py: Python<'_>, obj: &Bound<'_, PyAny>, method: &str, e: PyErr) {
    let logged = (|| -> PyResult<()> {
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("mqlite",))?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("exc_info", e.value(py))?;
        logger.call_method(
            "warning",
            ("producer interceptor %r raised in %s; skipped", obj, method),
            Some(&kwargs),
        )?;
        Ok(())
    })();
    if logged.is_err() {
        e.write_unraisable(py, Some(obj));
    }
}

/// An interceptor object given to `Broker.producer(interceptors=...)`.
pub(crate) struct PyInterceptor {
    obj: Py<PyAny>,
    index: usize,
    on_send: bool,
    on_ack: bool,
    delivery: Arc<Delivery>,
}

impl PyInterceptor {
    /// Wraps interceptor number `index` of `delivery`. It must have an
    /// `on_send` or an `on_acknowledgement` method.
    pub(crate) fn new(py: Python<'_>, delivery: &Arc<Delivery>, index: usize) -> PyResult<Self> {
        let obj = delivery.interceptors[index].bind(py);
        let has = |name: &str| -> PyResult<bool> {
            Ok(obj.hasattr(name)? && obj.getattr(name)?.is_callable())
        };
        let (on_send, on_ack) = (has("on_send")?, has("on_acknowledgement")?);
        if !on_send && !on_ack {
            return Err(PyTypeError::new_err(format!(
                "an interceptor needs an on_send or an on_acknowledgement method, {} has neither",
                obj.get_type().name()?
            )));
        }
        Ok(PyInterceptor {
            obj: obj.clone().unbind(),
            index,
            on_send,
            on_ack,
            delivery: Arc::clone(delivery),
        })
    }
}

impl mqlite::ProducerInterceptor for PyInterceptor {
    fn on_send(&self, record: &mqlite::Record) -> Result<Option<mqlite::Record>, String> {
        if !self.on_send {
            return Ok(None);
        }
        // The sending thread, before the core takes any lock (see the module
        // documentation); attaching waits for the GIL only if this thread
        // released it.
        Python::attach(|py| {
            let obj = self.obj.bind(py);
            let call = || -> PyResult<Option<mqlite::Record>> {
                let rec = Py::new(py, ProducerRecord::from_core(py, record))?;
                let ret = obj.call_method1("on_send", (rec,))?;
                if ret.is_none() {
                    return Ok(None);
                }
                let rec = ret.cast::<ProducerRecord>().map_err(|_| {
                    PyTypeError::new_err("on_send must return an mqlite.ProducerRecord or None")
                })?;
                Ok(Some(rec.get().to_core(py)))
            };
            call().map_err(|e| {
                let text = e.to_string();
                log_skipped(py, obj, "on_send", e);
                text
            })
        })
    }

    fn on_acknowledgement(&self, result: Result<&mqlite::RecordMetadata, &mqlite::Error>) {
        if !self.on_ack {
            return;
        }
        // Any thread, perhaps holding a core lock: queue it (module docs).
        self.delivery.push(Event::Acknowledged {
            index: self.index,
            result: match result {
                Ok(md) => Ok(md.clone()),
                Err(e) => Err(e.duplicate()),
            },
        });
    }
}

thread_local! {
    /// The exception a custom partitioner raised on this thread, taken by
    /// the send that called it.
    static PARTITIONER_ERROR: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Takes the exception the custom partitioner raised during the last send
/// on this thread, if any. Every send that may call the partitioner takes
/// it, whether or not the send failed.
pub(crate) fn take_partitioner_error() -> Option<PyErr> {
    PARTITIONER_ERROR.with(|e| e.borrow_mut().take())
}

/// A partition the core refuses (`UnknownPartition`), returned when the
/// callable raised, so that nothing is written; the send then raises the
/// callable's exception instead.
const REFUSED: u32 = u32::MAX;

/// A partitioner calling `f(record, partitions)`, which returns the
/// partition as an int.
pub(crate) fn partitioner(f: Py<PyAny>) -> mqlite::Partitioner {
    mqlite::Partitioner::custom(move |r, count| {
        // The sending thread, before any core lock (module documentation).
        Python::attach(|py| {
            let call = || -> PyResult<u32> {
                let rec = Py::new(py, ProducerRecord::from_borrowed(py, r))?;
                let ret = f.bind(py).call1((rec, count))?;
                if !ret.is_instance_of::<PyInt>() {
                    return Err(PyTypeError::new_err(format!(
                        "the partitioner must return an int, not {}",
                        ret.get_type().name()?
                    )));
                }
                let p: i64 = ret.extract()?;
                u32::try_from(p).ok().filter(|&p| p < count).ok_or_else(|| {
                    crate::error::invalid_argument(
                        py,
                        format!("the partitioner returned {p}, not 0 to {}", count - 1),
                    )
                })
            };
            call().unwrap_or_else(|e| {
                PARTITIONER_ERROR.with(|slot| *slot.borrow_mut() = Some(e));
                REFUSED
            })
        })
    })
}

/// A record as interceptors and custom partitioners see it.
///
/// An interceptor's `on_send` may return a changed copy (see `replace()`),
/// or a new `ProducerRecord`, to send that instead.
///
/// Args:
///     topic: The topic.
///     value: The value (bytes, bytearray, memoryview, str), None for a
///         tombstone.
///     key: The key, same types, or None.
///     partition: Explicit partition, or None to let the partitioner choose.
///     headers: A dict or a list of (name, value) pairs.
///     timestamp: Create time in ms since the Unix epoch, or None for now.
///     sequence: The application's sequence number, or None.
///
/// Attributes:
///     topic (str): The topic.
///     value (bytes | None): The value.
///     key (bytes | None): The key.
///     partition (int | None): The explicit partition, if any.
///     headers (list[tuple[str, bytes]]): The headers, in order.
///     timestamp (int | None): The create time, if given.
///     sequence (int | None): The application's sequence number, if any.
#[pyclass(frozen, module = "mqlite")]
pub struct ProducerRecord {
    /// str: The topic.
    #[pyo3(get)]
    topic: String,
    value: Option<Py<PyBytes>>,
    key: Option<Py<PyBytes>>,
    /// int | None: The explicit partition, if any.
    #[pyo3(get)]
    partition: Option<u32>,
    headers: Vec<(String, Py<PyBytes>)>,
    /// int | None: The create time, if given.
    #[pyo3(get)]
    timestamp: Option<i64>,
    /// int | None: The application's sequence number, if any.
    #[pyo3(get)]
    sequence: Option<i64>,
}

fn bytes_of(py: Python<'_>, b: Option<&[u8]>) -> Option<Py<PyBytes>> {
    b.map(|b| PyBytes::new(py, b).unbind())
}

impl ProducerRecord {
    fn from_borrowed(py: Python<'_>, r: &mqlite::BorrowedRecord<'_>) -> Self {
        ProducerRecord {
            topic: r.topic.to_owned(),
            value: bytes_of(py, r.value),
            key: bytes_of(py, r.key),
            partition: r.partition,
            headers: r
                .headers
                .iter()
                .map(|h| (h.key.clone(), PyBytes::new(py, &h.value).unbind()))
                .collect(),
            timestamp: r.timestamp,
            sequence: r.sequence,
        }
    }

    fn from_core(py: Python<'_>, r: &mqlite::Record) -> Self {
        Self::from_borrowed(py, &r.as_borrowed())
    }

    fn to_core(&self, py: Python<'_>) -> mqlite::Record {
        mqlite::Record {
            topic: self.topic.clone(),
            partition: self.partition,
            key: self.key.as_ref().map(|b| b.as_bytes(py).to_vec()),
            value: self.value.as_ref().map(|b| b.as_bytes(py).to_vec()),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| mqlite::Header::new(k.as_str(), v.as_bytes(py)))
                .collect(),
            timestamp: self.timestamp,
            sequence: self.sequence,
        }
    }

    fn clone_ref(&self, py: Python<'_>) -> Self {
        ProducerRecord {
            topic: self.topic.clone(),
            value: self.value.as_ref().map(|b| b.clone_ref(py)),
            key: self.key.as_ref().map(|b| b.clone_ref(py)),
            partition: self.partition,
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone_ref(py)))
                .collect(),
            timestamp: self.timestamp,
            sequence: self.sequence,
        }
    }
}

/// Bytes of a `value` or `key` argument.
fn bytes_arg(py: Python<'_>, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Py<PyBytes>>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Some(b.clone().unbind()));
    }
    Ok(data(obj, what)?.map(|d| PyBytes::new(py, d.as_slice()).unbind()))
}

fn optional<T>(
    obj: Option<&Bound<'_, PyAny>>,
    f: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Option<T>> {
    match obj {
        Some(o) if !o.is_none() => f(o).map(Some),
        _ => Ok(None),
    }
}

#[pymethods]
impl ProducerRecord {
    #[new]
    #[pyo3(signature = (topic, value = None, key = None, partition = None, headers = None, timestamp = None, sequence = None))]
    #[allow(clippy::too_many_arguments)] // one per argument of the Python signature
    fn new(
        py: Python<'_>,
        topic: String,
        value: Option<&Bound<'_, PyAny>>,
        key: Option<&Bound<'_, PyAny>>,
        partition: Option<i64>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<i64>,
        sequence: Option<i64>,
    ) -> PyResult<Self> {
        Ok(ProducerRecord {
            topic,
            value: optional(value, |v| bytes_arg(py, v, "value"))?.flatten(),
            key: optional(key, |k| bytes_arg(py, k, "key"))?.flatten(),
            partition: partition
                .map(|p| crate::util::arg_u32(py, "partition", p))
                .transpose()?,
            headers: self::headers(headers)?
                .into_iter()
                .map(|h| (h.key, PyBytes::new(py, &h.value).unbind()))
                .collect(),
            timestamp,
            sequence,
        })
    }

    /// bytes | None: The value.
    #[getter]
    fn value(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.value.as_ref().map(|b| b.clone_ref(py))
    }

    /// bytes | None: The key.
    #[getter]
    fn key(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.key.as_ref().map(|b| b.clone_ref(py))
    }

    /// list[tuple[str, bytes]]: The headers, in order (names may repeat).
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(
            py,
            self.headers
                .iter()
                .map(|(k, v)| {
                    PyTuple::new(
                        py,
                        [
                            k.into_pyobject(py)?.into_any(),
                            v.bind(py).clone().into_any(),
                        ],
                    )
                })
                .collect::<PyResult<Vec<_>>>()?,
        )
    }

    /// A copy with some attributes changed, like `dataclasses.replace()`.
    ///
    /// Args:
    ///     **changes: New values for `topic`, `value`, `key`, `partition`,
    ///         `headers`, `timestamp` or `sequence` (same types as the
    ///         constructor).
    ///
    /// Returns:
    ///     ProducerRecord: The changed copy.
    ///
    /// Raises:
    ///     TypeError: An unknown attribute, or a value of the wrong type.
    #[pyo3(signature = (**changes))]
    fn replace(&self, py: Python<'_>, changes: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut out = self.clone_ref(py);
        let Some(changes) = changes else {
            return Ok(out);
        };
        for (name, v) in changes.iter() {
            let name = name.cast::<PyString>()?.to_str()?.to_owned();
            match name.as_str() {
                "topic" => out.topic = v.extract()?,
                "value" => out.value = optional(Some(&v), |v| bytes_arg(py, v, "value"))?.flatten(),
                "key" => out.key = optional(Some(&v), |k| bytes_arg(py, k, "key"))?.flatten(),
                "partition" => {
                    out.partition = v
                        .extract::<Option<i64>>()?
                        .map(|p| crate::util::arg_u32(py, "partition", p))
                        .transpose()?;
                }
                "headers" => {
                    out.headers = self::headers(Some(&v))?
                        .into_iter()
                        .map(|h| (h.key, PyBytes::new(py, &h.value).unbind()))
                        .collect();
                }
                "timestamp" => out.timestamp = v.extract()?,
                "sequence" => out.sequence = v.extract()?,
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "replace() got an unexpected keyword argument {other:?}"
                    )))
                }
            }
        }
        Ok(out)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let show = |b: &Option<Py<PyBytes>>| -> PyResult<String> {
            Ok(match b {
                None => "None".to_owned(),
                Some(b) => b.bind(py).repr()?.to_string(),
            })
        };
        let opt = |v: Option<i64>| v.map_or_else(|| "None".to_owned(), |v| v.to_string());
        Ok(format!(
            "ProducerRecord(topic={:?}, value={}, key={}, partition={}, headers={}, timestamp={}, sequence={})",
            self.topic,
            show(&self.value)?,
            show(&self.key)?,
            opt(self.partition.map(i64::from)),
            self.headers(py)?.repr()?,
            opt(self.timestamp),
            opt(self.sequence),
        ))
    }
}
