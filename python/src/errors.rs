//! The exception tree: `mqlite.Error` and one subclass per core error kind.
//!
//! Every exception raised by the engine carries the core's stable numeric
//! [`mqlite::Error::code`] as its `code` attribute (also set on each class).
//!
//! Three classes are also built-in exceptions, so that code catching those
//! catches them: `InvalidArgument` (and so its subclasses
//! `InvalidTopicName` and `InvalidConfig`) is a `ValueError`, `Timeout` a
//! `TimeoutError`, `BufferFull` a `BufferError`. `create_exception!` gives a
//! class one base, so these ([`Dual`]) are made at module init by calling
//! `type(name, bases, namespace)`, and raised from the class objects kept
//! then.

use pyo3::exceptions::{PyBufferError, PyException, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use pyo3::{create_exception, PyTypeInfo};

create_exception!(
    mqlite,
    Error,
    PyException,
    "Base class of every mqlite error; `code` holds the engine's stable numeric error code."
);
create_exception!(
    mqlite,
    IoError,
    Error,
    "An operating-system I/O error (code 1)."
);
create_exception!(
    mqlite,
    DiskFull,
    IoError,
    "No space left on the disk or over the file-size limit (code 2)."
);
create_exception!(
    mqlite,
    Locked,
    Error,
    "The data directory is held by another handle, in this process or another (code 3)."
);
create_exception!(
    mqlite,
    Closed,
    Error,
    "The broker, producer or consumer is closed (code 5)."
);
create_exception!(
    mqlite,
    TopicExists,
    Error,
    "The topic already exists (code 101)."
);
create_exception!(
    mqlite,
    UnknownTopic,
    Error,
    "No topic of that name (code 102)."
);
create_exception!(
    mqlite,
    UnknownPartition,
    Error,
    "The partition does not exist in the topic (code 200)."
);
create_exception!(
    mqlite,
    OffsetOutOfRange,
    Error,
    "The offset is outside the partition's retained range (code 201)."
);
create_exception!(
    mqlite,
    Poisoned,
    Error,
    "An earlier write or fsync failed; the partition refuses writes until reopened (code 202)."
);
create_exception!(
    mqlite,
    Corrupt,
    Error,
    "Data on disk failed a length or CRC check (code 300)."
);
create_exception!(
    mqlite,
    UnsupportedVersion,
    Error,
    "The data was written by a format version this build cannot read (code 301)."
);
create_exception!(
    mqlite,
    MessageTooLarge,
    Error,
    "A record is larger than the topic's max_message_bytes (code 400)."
);
create_exception!(
    mqlite,
    OutOfOrderSequence,
    Error,
    "With strict_sequences, a sequence skipped ahead of the next expected one: a gap, records in between were never written (code 402). Attributes: topic, partition, expected, received. A re-sent sequence (at or below the last written) is not an error: send() returns metadata with duplicate=True."
);
create_exception!(
    mqlite,
    ProducerFenced,
    Error,
    "A newer producer of the same name exists; this one may no longer write (code 403). Attributes: producer_id, epoch, current_epoch."
);

create_exception!(
    mqlite,
    CommitFailed,
    Error,
    "A commit was refused: a partition is not owned by this group member, because a rebalance gave it to another (code 500)."
);

/// The classes with a built-in exception among their bases (see the module
/// docs), or whose parent is one of those.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dual {
    InvalidArgument,
    Timeout,
    InvalidTopicName,
    InvalidConfig,
    BufferFull,
}

/// The class objects of [`Dual`], by its order, made once.
static DUAL: [PyOnceLock<Py<PyType>>; 5] = [
    PyOnceLock::new(),
    PyOnceLock::new(),
    PyOnceLock::new(),
    PyOnceLock::new(),
    PyOnceLock::new(),
];

impl Dual {
    /// The class name and docstring.
    fn spec(self) -> (&'static str, &'static str) {
        match self {
            Dual::InvalidArgument => (
                "InvalidArgument",
                "An argument was out of its allowed range or malformed (code 4). Also a ValueError.",
            ),
            Dual::Timeout => (
                "Timeout",
                "An operation waited longer than allowed (code 6). Also a TimeoutError. It is raised by no call of this module: Producer.flush(timeout) returns the number of records still queued instead; the class stays, with the code shared with the C and Rust APIs.",
            ),
            Dual::InvalidTopicName => (
                "InvalidTopicName",
                "A topic name broke one of the naming rules (code 100). Also a ValueError.",
            ),
            Dual::InvalidConfig => (
                "InvalidConfig",
                "A topic configuration value is invalid (code 103). Also a ValueError.",
            ),
            Dual::BufferFull => (
                "BufferFull",
                "The producer's buffer_memory stayed full for max_block_ms (code 401). Attributes: buffered, limit, waited_ms. Also a BufferError.",
            ),
        }
    }

    /// The bases, in order: the mqlite parent first, then the built-in one.
    fn bases<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let root = py.get_type::<Error>();
        match self {
            Dual::InvalidArgument => PyTuple::new(py, [root, py.get_type::<PyValueError>()]),
            Dual::Timeout => PyTuple::new(py, [root, py.get_type::<PyTimeoutError>()]),
            Dual::BufferFull => PyTuple::new(py, [root, py.get_type::<PyBufferError>()]),
            Dual::InvalidTopicName | Dual::InvalidConfig => {
                PyTuple::new(py, [Dual::InvalidArgument.class(py)?])
            }
        }
    }

    /// The class object, made on first use with `type(name, bases,
    /// namespace)`.
    fn class(self, py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
        DUAL[self as usize]
            .get_or_try_init(py, || {
                let (name, doc) = self.spec();
                let namespace = PyDict::new(py);
                namespace.set_item("__module__", "mqlite")?;
                namespace.set_item("__qualname__", name)?;
                namespace.set_item("__doc__", doc)?;
                let class = py
                    .get_type::<PyType>()
                    .call1((name, self.bases(py)?, namespace))?;
                Ok::<_, PyErr>(class.cast_into::<PyType>()?.unbind())
            })
            .map(|c| c.bind(py).clone())
    }
}

/// Builds an exception of class `T` with `message` and the `code` attribute.
fn make<T: PyTypeInfo>(py: Python<'_>, message: String, code: i32) -> PyErr {
    with_code(py, PyErr::new::<T, _>(message), code)
}

/// Builds an exception of the [`Dual`] class `class` with `message` and the
/// `code` attribute (or, if the class could not be made, the error that
/// prevented it).
fn make_dual(py: Python<'_>, class: Dual, message: String, code: i32) -> PyErr {
    match class.class(py) {
        Ok(ty) => with_code(py, PyErr::from_type(ty, (message,)), code),
        Err(e) => e,
    }
}

/// Sets `code` on the instance of `err`. Setting an attribute on a fresh
/// exception instance cannot fail in practice; if it did, the exception is
/// still raised, without `code`.
fn with_code(py: Python<'_>, err: PyErr, code: i32) -> PyErr {
    let _ = err.value(py).setattr("code", code);
    err
}

/// Sets attributes on the instance of `err`. Setting an attribute on a
/// fresh exception instance cannot fail in practice; if it did, the
/// exception is still raised, without them.
fn with_attrs<'py, V: IntoPyObject<'py> + Copy>(
    py: Python<'py>,
    err: PyErr,
    attrs: &[(&str, V)],
) -> PyErr {
    for (name, value) in attrs {
        let _ = err.value(py).setattr(*name, *value);
    }
    err
}

/// Converts a core error into the matching Python exception.
pub fn to_py(py: Python<'_>, e: mqlite::Error) -> PyErr {
    use mqlite::Error as E;
    let code = e.code();
    let msg = e.to_string();
    match e {
        E::Io { .. } => make::<IoError>(py, msg, code),
        E::DiskFull { .. } => make::<DiskFull>(py, msg, code),
        E::Locked { .. } => make::<Locked>(py, msg, code),
        E::InvalidArgument(_) => make_dual(py, Dual::InvalidArgument, msg, code),
        E::Closed(_) => make::<Closed>(py, msg, code),
        E::Timeout(_) => make_dual(py, Dual::Timeout, msg, code),
        E::InvalidTopicName { .. } => make_dual(py, Dual::InvalidTopicName, msg, code),
        E::TopicExists(_) => make::<TopicExists>(py, msg, code),
        E::UnknownTopic(_) => make::<UnknownTopic>(py, msg, code),
        E::InvalidConfig(_) => make_dual(py, Dual::InvalidConfig, msg, code),
        E::UnknownPartition { .. } => make::<UnknownPartition>(py, msg, code),
        E::OffsetOutOfRange { .. } => make::<OffsetOutOfRange>(py, msg, code),
        E::Poisoned { .. } => make::<Poisoned>(py, msg, code),
        E::Corrupt { .. } => make::<Corrupt>(py, msg, code),
        E::UnsupportedVersion { .. } => make::<UnsupportedVersion>(py, msg, code),
        E::MessageTooLarge { .. } => make::<MessageTooLarge>(py, msg, code),
        E::BufferFull {
            buffered,
            limit,
            waited_ms,
        } => with_attrs(
            py,
            make_dual(py, Dual::BufferFull, msg, code),
            &[
                ("buffered", buffered as u64),
                ("limit", limit as u64),
                ("waited_ms", waited_ms),
            ],
        ),
        E::OutOfOrderSequence {
            topic,
            partition,
            expected,
            received,
        } => {
            let err = make::<OutOfOrderSequence>(py, msg, code);
            let _ = err.value(py).setattr("topic", topic);
            let _ = err.value(py).setattr("partition", partition);
            with_attrs(py, err, &[("expected", expected), ("received", received)])
        }
        E::ProducerFenced {
            producer_id,
            epoch,
            current_epoch,
        } => with_attrs(
            py,
            make::<ProducerFenced>(py, msg, code),
            &[
                ("producer_id", producer_id),
                ("epoch", i64::from(epoch)),
                ("current_epoch", i64::from(current_epoch)),
            ],
        ),
        E::CommitFailed(_) => make::<CommitFailed>(py, msg, code),
        // A kind added to the core later: the root class, with its code.
        #[allow(unreachable_patterns)]
        _ => make::<Error>(py, msg, code),
    }
}

/// `Result` to `PyResult`, mapping the error with [`to_py`].
pub trait IntoPy<T> {
    /// Maps a core error to its Python exception.
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for mqlite::Result<T> {
    #[inline]
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// An `InvalidArgument` error (code 4) with `message`.
pub fn invalid_argument(py: Python<'_>, message: impl Into<String>) -> PyErr {
    to_py(py, mqlite::Error::InvalidArgument(message.into()))
}

/// An `InvalidConfig` error (code 103) with `message`.
pub fn invalid_config(py: Python<'_>, message: impl Into<String>) -> PyErr {
    to_py(py, mqlite::Error::InvalidConfig(message.into()))
}

/// A `Closed` error (code 5) for `what` ("broker", "producer", "consumer").
pub fn closed(py: Python<'_>, what: &'static str) -> PyErr {
    to_py(py, mqlite::Error::Closed(what))
}

/// The `Closed` error (code 5) of a `what` ("broker", "producer",
/// "consumer") used in a process forked from the one that made it (see
/// `fork.rs`).
pub fn forked(py: Python<'_>, what: &'static str, owner_pid: u32) -> PyErr {
    let code = mqlite::Error::Closed(what).code();
    make::<Closed>(
        py,
        format!(
            "this {what} belongs to process {owner_pid}; this process ({}) was forked from it, \
             and a {what} made before os.fork() cannot be used in the child: open a new broker \
             in the child instead",
            std::process::id()
        ),
        code,
    )
}

/// One instance of every core error kind, for reading its stable code.
fn samples() -> Vec<mqlite::Error> {
    use mqlite::Error as E;
    let io = || std::io::Error::other("sample");
    let s = String::new;
    vec![
        E::Io {
            context: s(),
            source: io(),
        },
        E::DiskFull {
            context: s(),
            source: io(),
        },
        E::Locked {
            path: Default::default(),
            holder: s(),
        },
        E::InvalidArgument(s()),
        E::Closed("sample"),
        E::Timeout(0),
        E::InvalidTopicName {
            name: s(),
            reason: "sample",
        },
        E::TopicExists(s()),
        E::UnknownTopic(s()),
        E::InvalidConfig(s()),
        E::UnknownPartition {
            topic: s(),
            partition: 0,
            count: 0,
        },
        E::OffsetOutOfRange {
            topic: s(),
            partition: 0,
            offset: 0,
            start: 0,
            end: 0,
        },
        E::Poisoned {
            topic: s(),
            partition: 0,
        },
        E::Corrupt {
            path: Default::default(),
            position: 0,
            reason: s(),
        },
        E::UnsupportedVersion {
            path: Default::default(),
            found: 0,
            supported: 0,
        },
        E::MessageTooLarge { size: 0, max: 0 },
        E::BufferFull {
            buffered: 0,
            limit: 0,
            waited_ms: 0,
        },
        E::OutOfOrderSequence {
            topic: s(),
            partition: 0,
            expected: 0,
            received: 0,
        },
        E::ProducerFenced {
            producer_id: 0,
            epoch: 0,
            current_epoch: 0,
        },
        E::CommitFailed(s()),
    ]
}

/// Adds the exception classes to the module. Each subclass gets a
/// class-level `code` read from the core; the root's is 0 (instances raised
/// by the engine always carry their own).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let root = py.get_type::<Error>();
    root.setattr("code", 0)?;
    m.add("Error", root)?;
    for class in [
        Dual::InvalidArgument,
        Dual::Timeout,
        Dual::InvalidTopicName,
        Dual::InvalidConfig,
        Dual::BufferFull,
    ] {
        // Made now, so that a failure fails the import instead of a raise.
        class.class(py)?;
    }
    for e in samples() {
        let code = e.code();
        let ty = to_py(py, e).get_type(py);
        ty.setattr("code", code)?;
        m.add(ty.name()?, ty)?;
    }
    Ok(())
}
