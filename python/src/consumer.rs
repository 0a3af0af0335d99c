//! `mqlite.Consumer` and `mqlite.Message`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::broker::Broker;
use crate::errors::{closed, invalid_argument, Closed, IntoPy};
use crate::util::{arg_u32, arg_u64};

/// Longest wait without the GIL before checking for signals (Ctrl-C) and
/// for `close()` from another thread.
const WAIT_SLICE: Duration = Duration::from_millis(100);

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

struct State {
    consumer: mqlite::Consumer,
    /// Messages fetched from the engine but not yet handed out, in order.
    buffer: VecDeque<mqlite::Message>,
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

    /// Moves up to `n` buffered messages to `out`, fetching more without
    /// waiting while the buffer runs dry.
    fn drain_into(&mut self, n: usize, out: &mut Vec<mqlite::Message>) -> mqlite::Result<()> {
        while out.len() < n {
            if self.buffer.is_empty() {
                let more = self.consumer.poll(Duration::ZERO)?;
                if more.is_empty() {
                    break;
                }
                self.buffer.extend(more);
            }
            let k = (n - out.len()).min(self.buffer.len());
            out.extend(self.buffer.drain(..k));
        }
        Ok(())
    }
}

/// Reads records from assigned partitions or subscribed topics.
///
/// Made by `Broker.consumer()`. An iterator: `for msg in consumer` blocks for
/// the next message and stops only when the consumer (or its broker) is
/// closed. A context manager: leaving the `with` block closes it.
///
/// Blocking waits release the GIL and wake up at least every 100 ms to
/// check for signals, so Ctrl-C interrupts them. A consumer may be used from
/// several threads (calls are serialised), though one consumer per thread is
/// the usual pattern.
#[pyclass(frozen, module = "mqlite")]
pub struct Consumer {
    state: Mutex<State>,
    closed: AtomicBool,
    broker: Py<Broker>,
    group_id: Option<String>,
}

impl Consumer {
    pub(crate) fn new(inner: mqlite::Consumer, broker: Py<Broker>) -> Self {
        Consumer {
            group_id: inner.config().group_id.clone(),
            state: Mutex::new(State {
                consumer: inner,
                buffer: VecDeque::new(),
            }),
            closed: AtomicBool::new(false),
            broker,
        }
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

    /// Locks the state and checks the consumer is open.
    fn open_state<'a>(&'a self, py: Python<'_>) -> PyResult<MutexGuard<'a, State>> {
        let st = self.lock(py);
        if self.closed.load(Ordering::Acquire) {
            return Err(closed(py, "consumer"));
        }
        self.broker.get().check_open(py)?;
        Ok(st)
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.broker.get().inner.is_closed()
    }

    /// The next message, waiting up to `timeout` (`None`: no limit).
    ///
    /// Tries with the GIL held first; waits without it, in slices of at most
    /// [`WAIT_SLICE`], checking for signals between slices.
    fn next_message(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> PyResult<Option<mqlite::Message>> {
        {
            let mut st = self.open_state(py)?;
            if let Some(m) = st.buffer.pop_front() {
                return Ok(Some(m));
            }
            let got = st.consumer.poll(Duration::ZERO).py_err(py)?;
            st.buffer.extend(got);
            if let Some(m) = st.buffer.pop_front() {
                return Ok(Some(m));
            }
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
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
            let got = py.detach(|| -> mqlite::Result<Option<mqlite::Message>> {
                let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if self.closed.load(Ordering::Acquire) {
                    return Err(mqlite::Error::Closed("consumer"));
                }
                if self.broker.get().inner.is_closed() {
                    return Err(mqlite::Error::Closed("broker"));
                }
                if let Some(m) = st.buffer.pop_front() {
                    return Ok(Some(m));
                }
                let mut got = st.consumer.poll(slice)?.into_iter();
                let first = got.next();
                st.buffer.extend(got);
                Ok(first)
            });
            if let Some(m) = got.py_err(py)? {
                return Ok(Some(m));
            }
            py.check_signals()?;
        }
    }
}

/// `(topic, partition)` pairs from a Python list.
fn topic_partitions(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Vec<(String, u32)>> {
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "assign() takes a list of (topic, partition) pairs",
        ));
    }
    let pairs: Vec<(String, i64)> = obj
        .extract()
        .map_err(|_| PyTypeError::new_err("assign() takes a list of (topic, partition) pairs"))?;
    pairs
        .into_iter()
        .map(|(t, p)| Ok((t, arg_u32(py, "partition", p)?)))
        .collect()
}

#[pymethods]
impl Consumer {
    /// Reads exactly these partitions, replacing any assignment or
    /// subscription. Nothing changes if any partition is unknown.
    ///
    /// Args:
    ///     partitions: A list of (topic, partition) pairs.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.UnknownPartition: A partition does not exist.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `partitions` is not a list of pairs.
    fn assign(&self, py: Python<'_>, partitions: &Bound<'_, PyAny>) -> PyResult<()> {
        let parts = topic_partitions(py, partitions)?;
        let refs: Vec<(&str, u32)> = parts.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let mut st = self.open_state(py)?;
        st.unbuffer();
        st.consumer.assign(&refs).py_err(py)
    }

    /// Reads every partition of these topics, including partitions added
    /// later, replacing any assignment. Nothing changes if any topic is
    /// unknown.
    ///
    /// Args:
    ///     topics: A topic name or a list of topic names.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `topics` is not a str or a list of str.
    fn subscribe(&self, py: Python<'_>, topics: &Bound<'_, PyAny>) -> PyResult<()> {
        let names: Vec<String> = if let Ok(s) = topics.cast::<PyString>() {
            vec![s.to_str()?.to_owned()]
        } else {
            topics.extract().map_err(|_| {
                PyTypeError::new_err("subscribe() takes a topic name or a list of topic names")
            })?
        };
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut st = self.open_state(py)?;
        st.unbuffer();
        st.consumer.subscribe(&refs).py_err(py)
    }

    /// The partitions this consumer reads.
    ///
    /// Returns:
    ///     list[tuple[str, int]]: (topic, partition) pairs.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer is closed.
    fn assignment(&self, py: Python<'_>) -> PyResult<Vec<(String, u32)>> {
        let st = self.open_state(py)?;
        Ok(st.consumer.assignment())
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
        let partition = arg_u32(py, "partition", partition)?;
        let offset = arg_u64(py, "offset", offset)?;
        let mut st = self.open_state(py)?;
        st.unbuffer();
        st.consumer.seek(topic, partition, offset).py_err(py)
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
        let partition = arg_u32(py, "partition", partition)?;
        let mut st = self.open_state(py)?;
        if let Some(m) = st
            .buffer
            .iter()
            .find(|m| m.partition() == partition && m.topic() == topic)
        {
            return Ok(m.offset());
        }
        st.consumer.position(topic, partition).py_err(py)
    }

    /// Returns the next message, waiting up to `timeout` seconds for one.
    ///
    /// Args:
    ///     timeout: Seconds to wait (float); None waits until a message
    ///         arrives; 0 does not wait.
    ///
    /// Returns:
    ///     Message | None: The message, or None if the timeout passed.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `timeout` is negative or NaN.
    ///     KeyboardInterrupt: Ctrl-C during the wait.
    #[pyo3(signature = (timeout = None))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Message>> {
        let timeout = crate::util::timeout(py, timeout)?;
        Ok(self
            .next_message(py, timeout)?
            .map(|inner| Message { inner }))
    }

    /// Returns up to `num_messages` messages, waiting up to `timeout` seconds
    /// for the first one; it does not wait for more once one is there.
    ///
    /// Args:
    ///     num_messages: Most messages to return, 1 to 1,000,000.
    ///     timeout: Seconds to wait for the first message (float); None
    ///         waits until one arrives; 0 does not wait.
    ///
    /// Returns:
    ///     list[Message]: The messages, in order per partition; empty if the
    ///     timeout passed.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `num_messages` or `timeout` is out of
    ///         range.
    #[pyo3(signature = (num_messages = 1, timeout = None))]
    fn consume(
        &self,
        py: Python<'_>,
        num_messages: i64,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Message>> {
        if !(1..=1_000_000).contains(&num_messages) {
            return Err(invalid_argument(
                py,
                format!("num_messages must be 1 to 1000000, got {num_messages}"),
            ));
        }
        let timeout = crate::util::timeout(py, timeout)?;
        let Some(first) = self.next_message(py, timeout)? else {
            return Ok(Vec::new());
        };
        let n = num_messages as usize;
        let mut out = Vec::with_capacity(n.min(1024));
        out.push(first);
        {
            let mut st = self.open_state(py)?;
            st.drain_into(n, &mut out).py_err(py)?;
        }
        Ok(out.into_iter().map(|inner| Message { inner }).collect())
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Message>> {
        if self.is_closed() {
            return Ok(None);
        }
        match self.next_message(py, None) {
            Ok(m) => Ok(m.map(|inner| Message { inner })),
            Err(e) if e.is_instance_of::<Closed>(py) && self.is_closed() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stops the consumer; later calls raise `mqlite.Closed` and iteration
    /// ends. A `poll()` waiting in another thread returns within 100 ms.
    /// Closing twice is fine.
    fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        let mut st = self.lock(py);
        st.buffer.clear();
        st.consumer.close();
    }

    /// bool: Whether the consumer, or the broker it came from, is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// str | None: The consumer group, or None.
    #[getter]
    fn group_id(&self) -> Option<&str> {
        self.group_id.as_deref()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        let state = if self.is_closed() { "closed" } else { "open" };
        match &self.group_id {
            Some(g) => format!("<mqlite.Consumer group_id={g:?} {state}>"),
            None => format!("<mqlite.Consumer {state}>"),
        }
    }
}
