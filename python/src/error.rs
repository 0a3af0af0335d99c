//! The exception tree: `mqlite.Error` and one subclass per core error kind.
//!
//! The classes are made at module init from the core's list of error kinds
//! ([`mqlite::ErrorKind`]): its class names, parents and built-in bases, so
//! that a kind added to the core gets its class here. Every exception raised
//! by the engine carries the core's stable numeric [`mqlite::Error::code`]
//! as its `code` attribute (also set on each class).
//!
//! Some classes are also built-in exceptions, so that code catching those
//! catches them: `InvalidArgument` (and so its subclasses
//! `InvalidTopicName` and `InvalidConfig`) is a `ValueError`, `Timeout` a
//! `TimeoutError`, `BufferFull` a `BufferError`. `create_exception!` gives a
//! class one base, so the classes are made by calling `type(name, bases,
//! namespace)`, and raised from the class objects kept then.

use mqlite::ErrorKind;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple, PyType};

create_exception!(
    mqlite,
    Error,
    PyException,
    "Base class of every mqlite error; `code` holds the engine's stable numeric error code."
);

/// The class objects of the core's error kinds, in [`ErrorKind::ALL`]
/// order, made once.
static CLASSES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

/// What a class's docstring says beyond the core's description of its kind.
fn notes(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Timeout => {
            " It is raised by no call of this module: Producer.flush(timeout) returns the \
             number of records still queued instead; the class stays, with the code shared \
             with the C and Rust APIs."
        }
        ErrorKind::BufferFull => " Attributes: buffered, limit, waited_ms.",
        ErrorKind::OutOfOrderSequence => {
            " Raised with strict_sequences. Attributes: topic, partition, expected, received. \
             A re-sent sequence (at or below the last written) is not an error: send() returns \
             metadata with duplicate=True."
        }
        ErrorKind::ProducerFenced => " Attributes: producer_id, epoch, current_epoch.",
        _ => "",
    }
}

/// The docstring of `kind`'s class.
fn doc(kind: ErrorKind) -> String {
    let also = kind
        .builtin_base()
        .map(|b| format!(" Also a {b}."))
        .unwrap_or_default();
    format!(
        "{} (code {}).{also}{}",
        kind.description().trim_end_matches('.'),
        kind.code(),
        notes(kind)
    )
}

/// Every kind's class, made on first use with `type(name, bases,
/// namespace)`: bases are the parent's class (the root `Error` when the
/// kind has no parent), then the built-in base if the kind has one.
fn classes(py: Python<'_>) -> PyResult<&Vec<Py<PyType>>> {
    CLASSES.get_or_try_init(py, || {
        let builtins = PyModule::import(py, "builtins")?;
        let mut made: Vec<Py<PyType>> = Vec::with_capacity(ErrorKind::ALL.len());
        for &kind in ErrorKind::ALL {
            // The core's test checks that parents come first in the list.
            let parent = match kind.class_parent().and_then(position) {
                Some(i) if i < made.len() => made[i].bind(py).clone(),
                _ => py.get_type::<Error>(),
            };
            let mut bases = vec![parent.into_any()];
            if let Some(base) = kind.builtin_base() {
                bases.push(builtins.getattr(base)?);
            }
            let namespace = PyDict::new(py);
            namespace.set_item("__module__", "mqlite")?;
            namespace.set_item("__qualname__", kind.class_name())?;
            namespace.set_item("__doc__", doc(kind))?;
            namespace.set_item("code", kind.code())?;
            let class = py.get_type::<PyType>().call1((
                kind.class_name(),
                PyTuple::new(py, bases)?,
                namespace,
            ))?;
            made.push(class.cast_into::<PyType>()?.unbind());
        }
        Ok(made)
    })
}

/// Where `kind` is in [`ErrorKind::ALL`].
fn position(kind: ErrorKind) -> Option<usize> {
    ErrorKind::ALL.iter().position(|&k| k == kind)
}

/// The class of `kind` (the root `Error` for a kind without one, which
/// cannot happen: every kind gets its class).
fn class_of(py: Python<'_>, kind: ErrorKind) -> PyResult<Bound<'_, PyType>> {
    let classes = classes(py)?;
    Ok(position(kind)
        .and_then(|i| classes.get(i))
        .map_or_else(|| py.get_type::<Error>(), |c| c.bind(py).clone()))
}

/// Builds an exception of `kind`'s class with `message` and the `code`
/// attribute (or, if the class could not be made, the error that
/// prevented it).
fn make(py: Python<'_>, kind: ErrorKind, message: String) -> PyErr {
    match class_of(py, kind) {
        Ok(ty) => with_code(py, PyErr::from_type(ty, (message,)), kind.code()),
        Err(e) => e,
    }
}

/// Whether `err` is an exception of `kind`'s class (or a subclass).
pub fn is_kind(py: Python<'_>, err: &PyErr, kind: ErrorKind) -> bool {
    class_of(py, kind).is_ok_and(|ty| err.is_instance(py, &ty))
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

/// Converts a core error into the matching Python exception: the class of
/// its kind, with the error's fields as attributes where callers need them.
pub fn to_py(py: Python<'_>, e: mqlite::Error) -> PyErr {
    use mqlite::Error as E;
    let err = make(py, e.kind(), e.to_string());
    match e {
        E::BufferFull {
            buffered,
            limit,
            waited_ms,
        } => with_attrs(
            py,
            err,
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
            err,
            &[
                ("producer_id", producer_id),
                ("epoch", i64::from(epoch)),
                ("current_epoch", i64::from(current_epoch)),
            ],
        ),
        _ => err,
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
    make(
        py,
        ErrorKind::Closed,
        format!(
            "this {what} belongs to process {owner_pid}; this process ({}) was forked from it, \
             and a {what} made before os.fork() cannot be used in the child: open a new broker \
             in the child instead",
            std::process::id()
        ),
    )
}

/// The core's list of error kinds as `(code, class name, C status name)`
/// tuples, for the tests that check the classes against it.
#[pyfunction]
pub fn _error_kinds(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    PyList::new(
        py,
        ErrorKind::ALL
            .iter()
            .map(|k| (k.code(), k.class_name(), k.status_name())),
    )
}

/// Adds the exception classes to the module: the root `Error` (class-level
/// `code` 0; instances raised by the engine always carry their own) and one
/// class per core error kind, made now so that a failure fails the import
/// instead of a raise.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let root = py.get_type::<Error>();
    root.setattr("code", 0)?;
    m.add("Error", root)?;
    for (&kind, class) in ErrorKind::ALL.iter().zip(classes(py)?) {
        m.add(kind.class_name(), class.bind(py))?;
    }
    // Private (for tests): set as an attribute, so not in `__all__`.
    m.setattr("_error_kinds", wrap_pyfunction!(_error_kinds, m)?)?;
    Ok(())
}
