//! The conversion of Python keys, values and headers into bytes, the fields
//! of a record to send and the per-record arguments of `send_batch()`, and
//! the module functions over keys (`murmur2`, `partition_for_key`).

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::error::invalid_argument;

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
pub(crate) fn headers(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<mqlite::Header>> {
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
        return Err(crate::error::invalid_argument(
            py,
            "partitions must be at least 1, got 0",
        ));
    }
    Ok(mqlite::partition_for_key(
        data_required(key, "key")?.as_slice(),
        n,
    ))
}

/// The delivery time `delay_ms` or `deliver_at` asks for (at most one of
/// them), as the header that asks for it, added to `headers`.
pub(crate) fn add_delivery_time(
    py: Python<'_>,
    headers: &mut Vec<mqlite::Header>,
    delay_ms: Option<i64>,
    deliver_at: Option<i64>,
) -> PyResult<()> {
    let at = match (delay_ms, deliver_at) {
        (None, None) => return Ok(()),
        (Some(_), Some(_)) => {
            return Err(crate::error::invalid_argument(
                py,
                "give delay_ms or deliver_at, not both",
            ))
        }
        (Some(d), None) => {
            let d = u64::try_from(d).map_err(|_| {
                crate::error::invalid_argument(
                    py,
                    format!("delay_ms must not be negative, got {d}"),
                )
            })?;
            mqlite::delayed::due_in(std::time::Duration::from_millis(d))
        }
        (None, Some(at)) => at,
    };
    headers.push(mqlite::delayed::deliver_at_header(at));
    Ok(())
}

/// The fields of one record, checked and borrowed from Python objects.
pub(crate) struct Fields<'a> {
    pub(crate) value: Option<Data<'a>>,
    pub(crate) key: Option<Data<'a>>,
    pub(crate) partition: Option<u32>,
    pub(crate) headers: Vec<mqlite::Header>,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(
        py: Python<'_>,
        value: &'a Bound<'_, PyAny>,
        key: Option<&'a Bound<'_, PyAny>>,
        partition: Option<i64>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        Ok(Fields {
            value: data(value, "value")?,
            key: match key {
                Some(k) => data(k, "key")?,
                None => None,
            },
            partition: partition.map(|p| arg_u32(py, "partition", p)).transpose()?,
            headers: self::headers(headers)?,
        })
    }

    pub(crate) fn record<'r>(
        &'r self,
        topic: &'r str,
        timestamp: Option<i64>,
        sequence: Option<i64>,
    ) -> mqlite::BorrowedRecord<'r> {
        mqlite::BorrowedRecord {
            topic,
            partition: self.partition,
            key: self.key.as_ref().map(Data::as_slice),
            value: self.value.as_ref().map(Data::as_slice),
            headers: &self.headers,
            timestamp,
            sequence,
        }
    }

    pub(crate) fn size(&self) -> usize {
        self.value.as_ref().map_or(0, |v| v.as_slice().len())
            + self.key.as_ref().map_or(0, |k| k.as_slice().len())
    }
}

/// The items of a list, tuple or other iterable (not str or bytes).
pub(crate) fn items<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(l) = obj.cast::<PyList>() {
        return Ok(l.iter().collect());
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return Ok(t.iter().collect());
    }
    let bad = || {
        PyTypeError::new_err(format!(
            "{what} must be a list, not {}",
            obj.get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string())
        ))
    };
    if obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyByteArray>()
    {
        return Err(bad());
    }
    obj.try_iter().map_err(|_| bad())?.collect()
}

/// A per-record int argument of `send_batch()`: None, one int for every
/// record (`consecutive`: the first of consecutive ones), or a list.
pub(crate) fn per_record(
    py: Python<'_>,
    obj: Option<&Bound<'_, PyAny>>,
    n: usize,
    what: &str,
    consecutive: bool,
) -> PyResult<Option<Vec<Option<i64>>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if obj.is_instance_of::<PyInt>() {
        let v: i64 = obj.extract()?;
        if !consecutive {
            return Ok(Some(vec![Some(v); n]));
        }
        if v.checked_add((n as i64 - 1).max(0)).is_none() {
            return Err(invalid_argument(
                py,
                format!("{what} starting at {v} overflow for {n} values"),
            ));
        }
        return Ok(Some((0..n as i64).map(|i| Some(v + i)).collect()));
    }
    let list = items(obj, what)?;
    if list.len() != n {
        return Err(invalid_argument(
            py,
            format!("{what} has {} items for {n} values", list.len()),
        ));
    }
    list.iter()
        .map(pyo3::types::PyAnyMethods::extract::<Option<i64>>)
        .collect::<PyResult<Vec<_>>>()
        .map(Some)
}
