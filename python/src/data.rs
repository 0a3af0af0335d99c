//! The conversion of Python keys, values and headers into bytes, and the
//! module functions over keys (`murmur2`, `partition_for_key`).

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString, PyTuple};

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
