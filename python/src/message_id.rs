//! The `mqlite.MessageId` pyclass: a message id parsed into its parts.

use pyo3::prelude::*;

use crate::error::IntoPy;
use crate::util::{arg_u32, arg_u64};

/// A message's unique id: its topic, partition and offset, written
/// `"<topic>:<partition>:<offset>"` (what `Message.id` and
/// `RecordMetadata.id` read). `MessageId.parse(text)` reads one back;
/// `str()` gives the text; ids compare and hash by their parts.
///
/// Attributes:
///     topic (str): The topic.
///     partition (int): The partition.
///     offset (int): The offset in the partition.
#[pyclass(frozen, eq, hash, module = "mqlite")]
#[derive(PartialEq, Eq, Hash)]
pub struct MessageId {
    inner: mqlite::MessageId,
}

#[pymethods]
impl MessageId {
    /// Makes the id of the message at `offset` of `topic`'s `partition`.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The topic is not a valid topic name, or
    ///         a number is out of range.
    #[new]
    fn new(py: Python<'_>, topic: &str, partition: i64, offset: i64) -> PyResult<Self> {
        let partition = arg_u32(py, "partition", partition)?;
        let offset = arg_u64(py, "offset", offset)?;
        // Checked as a parsed id is: the same rules for the topic.
        Self::parse(py, &format!("{topic}:{partition}:{offset}"))
    }

    /// Reads a message id written `"<topic>:<partition>:<offset>"`.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The text is malformed (a topic name,
    ///         two `:` and two decimal numbers without sign or leading
    ///         zeros are expected).
    #[staticmethod]
    fn parse(py: Python<'_>, id: &str) -> PyResult<Self> {
        Ok(MessageId {
            inner: id.parse().py_err(py)?,
        })
    }

    /// str: The topic.
    #[getter]
    fn topic(&self) -> &str {
        &self.inner.topic
    }

    /// int: The partition.
    #[getter]
    fn partition(&self) -> u32 {
        self.inner.partition
    }

    /// int: The offset in the partition.
    #[getter]
    fn offset(&self) -> u64 {
        self.inner.offset
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        format!("MessageId('{}')", self.inner)
    }
}
