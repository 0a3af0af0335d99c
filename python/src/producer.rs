//! `mqlite.Producer`, `mqlite.RecordMetadata` and the conversion of Python
//! keys, values and headers into bytes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString, PyTuple};

use crate::broker::Broker;
use crate::errors::{closed, IntoPy};
use crate::util::arg_u32;

/// Bytes taken from a Python object: borrowed from immutable `bytes` and
/// `str`, copied from mutable buffers (`bytearray`, `memoryview`, ...).
pub enum Data<'a> {
    /// Borrowed from a `bytes` or `str`, valid while the object lives.
    Borrowed(&'a [u8]),
    /// Copied out of a mutable buffer.
    Owned(Vec<u8>),
}

impl Data<'_> {
    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Data::Borrowed(b) => b,
            Data::Owned(v) => v,
        }
    }
}

/// Reads `obj` as bytes: `bytes`, `str` (UTF-8), `bytearray`, or any object
/// with a buffer of unsigned bytes. `None` gives `None`.
///
/// Mutable buffers are copied so that nothing can change them while the
/// engine reads them (with or without the GIL held).
pub fn data<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Option<Data<'a>>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Some(Data::Borrowed(b.as_bytes())));
    }
    if obj.is_none() {
        return Ok(None);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Some(Data::Borrowed(s.to_str()?.as_bytes())));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Some(Data::Owned(b.to_vec())));
    }
    if let Ok(buf) = PyBuffer::<u8>::get(obj) {
        return Ok(Some(Data::Owned(buf.to_vec(obj.py())?)));
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes, bytearray, memoryview, str or None, not {}",
        obj.get_type().name()?
    )))
}

/// Like [`data`], but `None` is refused.
fn data_required<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Data<'a>> {
    match data(obj, what)? {
        Some(d) => Ok(d),
        None => Err(PyTypeError::new_err(format!(
            "{what} must be bytes, bytearray, memoryview or str, not None"
        ))),
    }
}

/// One header from a name and a value.
fn header(name: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<mqlite::Header> {
    let name = name
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err("header names must be str"))?;
    let value = data_required(value, "header value")?;
    Ok(mqlite::Header::new(name.to_str()?, value.as_slice()))
}

/// Headers from a dict or an iterable of `(name, value)` pairs.
fn headers(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<mqlite::Header>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(Vec::new());
    };
    if let Ok(d) = obj.cast::<PyDict>() {
        return d.iter().map(|(k, v)| header(&k, &v)).collect();
    }
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(
            "headers must be a dict or a list of (str, bytes) pairs",
        ));
    }
    let mut out = Vec::new();
    for item in obj.try_iter().map_err(|_| {
        PyTypeError::new_err("headers must be a dict or a list of (str, bytes) pairs")
    })? {
        let item = item?;
        let pair = item
            .cast::<PyTuple>()
            .ok()
            .filter(|t| t.len() == 2)
            .ok_or_else(|| PyTypeError::new_err("each header must be a (str, bytes) pair"))?;
        out.push(header(&pair.get_item(0)?, &pair.get_item(1)?)?);
    }
    Ok(out)
}

/// Where a record was written, as returned by `Producer.send()`.
///
/// Attributes:
///     topic (str): The topic.
///     partition (int): The partition.
///     offset (int): The record's offset in the partition.
///     timestamp (int): The record's timestamp, ms since the Unix epoch.
#[pyclass(frozen, module = "mqlite")]
pub struct RecordMetadata {
    topic: Arc<str>,
    #[pyo3(get)]
    partition: u32,
    #[pyo3(get)]
    offset: u64,
    #[pyo3(get)]
    timestamp: i64,
}

#[pymethods]
impl RecordMetadata {
    /// str: The topic.
    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    fn __repr__(&self) -> String {
        format!(
            "RecordMetadata(topic='{}', partition={}, offset={}, timestamp={})",
            self.topic, self.partition, self.offset, self.timestamp
        )
    }
}

/// Sends records to the topics of one data directory.
///
/// Made by `Broker.producer()`. Safe to share between threads. A context
/// manager: leaving the `with` block closes it.
#[pyclass(frozen, module = "mqlite")]
pub struct Producer {
    inner: mqlite::Producer,
    acks: mqlite::Acks,
    closed: AtomicBool,
    broker: Py<Broker>,
}

impl Producer {
    pub(crate) fn new(inner: mqlite::Producer, acks: mqlite::Acks, broker: Py<Broker>) -> Self {
        Producer {
            inner,
            acks,
            closed: AtomicBool::new(false),
            broker,
        }
    }

    fn check_open(&self, py: Python<'_>) -> PyResult<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed(py, "producer"));
        }
        Ok(())
    }
}

#[pymethods]
impl Producer {
    /// Sends one record.
    ///
    /// With `acks` 0 or 1 this returns once the record is in the log and
    /// visible to consumers, without releasing the GIL (it does not wait).
    /// With `acks="all"` it releases the GIL while the record is flushed to
    /// disk; concurrent senders share one flush.
    ///
    /// Args:
    ///     topic: The topic.
    ///     value: The value: bytes, bytearray, memoryview, str (UTF-8), or
    ///         None for a tombstone.
    ///     key: Optional key, same types. Records with the same key go to the
    ///         same partition (Kafka's murmur2 partitioner).
    ///     partition: Explicit partition; otherwise chosen from the key, or
    ///         round-robin without a key.
    ///     headers: A dict, or a list of (name, value) pairs, names str and
    ///         values bytes or str. Names may repeat in a list.
    ///     timestamp: Create time in ms since the Unix epoch; now if None.
    ///
    /// Returns:
    ///     RecordMetadata: Where the record was written.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: No topic of that name.
    ///     mqlite.UnknownPartition: The topic has no such partition.
    ///     mqlite.MessageTooLarge: The record exceeds the topic's
    ///         `max_message_bytes`.
    ///     mqlite.InvalidArgument: `partition` is negative.
    ///     mqlite.Closed: The producer or its broker is closed.
    ///     TypeError: An argument has the wrong type.
    #[pyo3(signature = (topic, value, key = None, partition = None, headers = None, timestamp = None))]
    #[allow(clippy::too_many_arguments)] // one per argument of the Python signature
    fn send(
        &self,
        py: Python<'_>,
        topic: &str,
        value: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        partition: Option<i64>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<i64>,
    ) -> PyResult<RecordMetadata> {
        self.check_open(py)?;
        let value = data(value, "value")?;
        let key = match key {
            Some(k) => data(k, "key")?,
            None => None,
        };
        let partition = match partition {
            Some(p) => Some(arg_u32(py, "partition", p)?),
            None => None,
        };
        let headers = self::headers(headers)?;
        let record = mqlite::BorrowedRecord {
            topic,
            partition,
            key: key.as_ref().map(Data::as_slice),
            value: value.as_ref().map(Data::as_slice),
            headers: &headers,
            timestamp,
        };
        let md = if self.acks == mqlite::Acks::All {
            py.detach(|| self.inner.send_borrowed(&record))
        } else {
            self.inner.send_borrowed(&record)
        }
        .py_err(py)?;
        Ok(RecordMetadata {
            topic: md.topic,
            partition: md.partition,
            offset: md.offset,
            timestamp: md.timestamp,
        })
    }

    /// Waits until every record sent so far is as durable as `acks` promises.
    ///
    /// Sends complete before they return today, so this returns at once
    /// unless the broker is closed. Releases the GIL.
    ///
    /// Args:
    ///     timeout: Most seconds to wait (None: no limit). Accepted for
    ///         compatibility with Kafka clients.
    ///
    /// Raises:
    ///     mqlite.Closed: The producer or its broker is closed.
    ///     mqlite.InvalidArgument: `timeout` is negative.
    #[pyo3(signature = (timeout = None))]
    fn flush(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        crate::util::timeout(py, timeout)?;
        self.check_open(py)?;
        py.detach(|| self.inner.flush()).py_err(py)
    }

    /// Flushes and closes the producer; later sends raise `mqlite.Closed`.
    ///
    /// Closing twice, or after the broker was closed, is fine.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match py.detach(|| self.inner.flush()) {
            Err(mqlite::Error::Closed(_)) => Ok(()),
            r => r.py_err(py),
        }
    }

    /// bool: Whether the producer, or the broker it came from, is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.broker.get().inner.is_closed()
    }

    /// int | str: The durability level: 0, 1, or "all".
    #[getter]
    fn acks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.acks {
            mqlite::Acks::Zero => 0i32.into_pyobject(py)?.into_any(),
            mqlite::Acks::One => 1i32.into_pyobject(py)?.into_any(),
            mqlite::Acks::All => "all".into_pyobject(py)?.into_any(),
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let acks = match self.acks {
            mqlite::Acks::Zero => "0",
            mqlite::Acks::One => "1",
            mqlite::Acks::All => "'all'",
        };
        let state = if self.closed() { "closed" } else { "open" };
        format!("<mqlite.Producer acks={acks} {state}>")
    }
}

/// Kafka's murmur2 hash of `data` (seed 0x9747b28c), as a signed 32-bit int.
///
/// Args:
///     data: bytes, bytearray, memoryview or str (UTF-8).
///
/// Returns:
///     int: The hash, -2**31 to 2**31 - 1.
///
/// Raises:
///     TypeError: `data` is not bytes-like or str.
#[pyfunction]
pub fn murmur2(data: &Bound<'_, PyAny>) -> PyResult<i32> {
    Ok(mqlite::murmur2(data_required(data, "data")?.as_slice()))
}

/// The partition Kafka's default partitioner picks for `key`.
///
/// `(murmur2(key) & 0x7fffffff) % partitions`, the partition `send()` uses
/// for a keyed record without an explicit partition.
///
/// Args:
///     key: bytes, bytearray, memoryview or str (UTF-8).
///     partitions: Number of partitions, at least 1.
///
/// Returns:
///     int: 0 to `partitions` - 1.
///
/// Raises:
///     mqlite.InvalidArgument: `partitions` is below 1 or over 2**32 - 1.
///     TypeError: `key` is not bytes-like or str.
#[pyfunction]
pub fn partition_for_key(py: Python<'_>, key: &Bound<'_, PyAny>, partitions: i64) -> PyResult<u32> {
    let n = arg_u32(py, "partitions", partitions)?;
    if n == 0 {
        return Err(crate::errors::invalid_argument(
            py,
            "partitions must be at least 1, got 0",
        ));
    }
    Ok(mqlite::partition_for_key(
        data_required(key, "key")?.as_slice(),
        n,
    ))
}
