//! The `mqlite.Message` and `mqlite.ConsumerStats` pyclasses.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A consumed record (a share consumer's `ShareMessage` is one too).
///
/// Attributes are read-only. `key`, `value` and `headers` are copied out of
/// the log each time they are read: keep the result in a variable if you use
/// it several times. A message keeps its segment file mapped while it lives.
///
/// Attributes:
///     topic (str): The topic.
///     partition (int): The partition.
///     offset (int): The offset in the partition.
///     id (str): The message's unique id, `"<topic>:<partition>:<offset>"`
///         (`Consumer.seek(id)` goes back to it).
///     timestamp (int): The record's timestamp, ms since the Unix epoch.
///     key (bytes | None): The key.
///     value (bytes | None): The value; None for a tombstone.
///     headers (list[tuple[str, bytes]]): The headers, in order.
#[pyclass(frozen, subclass, module = "mqlite")]
pub struct Message {
    pub(super) inner: mqlite::Message,
}

impl Message {
    /// The engine's message.
    pub(crate) fn engine(&self) -> &mqlite::Message {
        &self.inner
    }
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

    /// str: The message's unique id, `"<topic>:<partition>:<offset>"`.
    #[getter]
    fn id(&self) -> String {
        self.inner.id().to_string()
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
    #[allow(clippy::unused_self)]
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

/// What a consumer did so far, as returned by `Consumer.stats()`.
///
/// Attributes:
///     records (int): Messages handed out to Python (by `poll()`,
///         `consume()` and iteration).
///     bytes (int): Bytes of the keys and values of those messages.
///     polls (int): Calls of `poll()`, `consume()` and iteration steps.
///     rebalances (int): Group rebalances this consumer took part in.
///     skipped (int): Messages retention deleted before they were read
///         (`auto_offset_reset` moved the position past them).
///     commits (int): Commits made, manual and automatic.
///     offset_resets (int): Committed offsets found beyond the end of their
///         partition's log (recovery cut the log below them) and reset by
///         `auto_offset_reset`.
#[pyclass(frozen, get_all, module = "mqlite")]
pub struct ConsumerStats {
    /// int: Messages handed out to Python (by `poll()`, `consume()` and iteration).
    pub(super) records: u64,
    /// int: Bytes of the keys and values of those messages.
    pub(super) bytes: u64,
    /// int: Calls of `poll()`, `consume()` and iteration steps.
    pub(super) polls: u64,
    /// int: Group rebalances this consumer took part in.
    pub(super) rebalances: u64,
    /// int: Messages retention deleted before they were read.
    pub(super) skipped: u64,
    /// int: Commits made, manual and automatic.
    pub(super) commits: u64,
    /// int: Committed offsets found beyond the end of their partition's log
    /// (recovery cut the log below them) and reset by `auto_offset_reset`.
    pub(super) offset_resets: u64,
}

#[pymethods]
impl ConsumerStats {
    fn __repr__(&self) -> String {
        format!(
            "ConsumerStats(records={}, bytes={}, polls={}, rebalances={}, skipped={}, commits={}, \
             offset_resets={})",
            self.records,
            self.bytes,
            self.polls,
            self.rebalances,
            self.skipped,
            self.commits,
            self.offset_resets
        )
    }
}
