//! Parsing of the arguments of `Consumer` methods: partition lists, commit
//! offsets, time queries, subscriptions and callbacks.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::util::{arg_u32, arg_u64};

/// `(topic, partition)` pairs from a Python list, for `what()`.
pub(crate) fn topic_partitions(
    py: Python<'_>,
    what: &str,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Vec<(String, u32)>> {
    let err = || PyTypeError::new_err(format!("{what} takes a list of (topic, partition) pairs"));
    if obj.is_instance_of::<PyString>() {
        return Err(err());
    }
    let pairs: Vec<(String, i64)> = obj.extract().map_err(|_| err())?;
    pairs
        .into_iter()
        .map(|(t, p)| Ok((t, arg_u32(py, "partition", p)?)))
        .collect()
}

/// `commit(offsets=...)`: `(topic, partition, offset[, metadata])` tuples.
pub(super) fn commit_offsets_arg(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Vec<(String, u32, u64, String)>> {
    let err = || {
        PyTypeError::new_err(
            "commit() offsets must be a list of (topic, partition, offset) or \
             (topic, partition, offset, metadata) tuples",
        )
    };
    if obj.is_instance_of::<PyString>() {
        return Err(err());
    }
    let items: Vec<Bound<'_, PyAny>> = obj.extract().map_err(|_| err())?;
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        let (t, p, o, m) = if let Ok((t, p, o)) = it.extract::<(String, i64, i64)>() {
            (t, p, o, String::new())
        } else {
            it.extract::<(String, i64, i64, String)>()
                .map_err(|_| err())?
        };
        out.push((
            t,
            arg_u32(py, "partition", p)?,
            arg_u64(py, "offset", o)?,
            m,
        ));
    }
    Ok(out)
}

/// `(topic, partition, timestamp)` tuples for `offsets_for_times()`.
pub(super) fn time_queries(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Vec<(String, u32, i64)>> {
    let err = || {
        PyTypeError::new_err(
            "offsets_for_times() takes a list of (topic, partition, timestamp_ms) tuples",
        )
    };
    if obj.is_instance_of::<PyString>() {
        return Err(err());
    }
    let items: Vec<(String, i64, i64)> = obj.extract().map_err(|_| err())?;
    items
        .into_iter()
        .map(|(t, p, ts)| Ok((t, arg_u32(py, "partition", p)?, ts)))
        .collect()
}

/// What `subscribe()` was given.
pub(super) struct Subscription {
    /// Topic names.
    pub(super) names: Vec<String>,
    /// Regular expressions (Rust `regex` syntax), each matching whole names.
    pub(super) patterns: Vec<String>,
}

/// A compiled Python `re.Pattern` as a Rust `regex` expression: its text,
/// with the flags that matter for topic names as inline flags.
fn pattern_of(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    let text = obj.getattr("pattern")?;
    let text = text
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err("subscribe() takes str patterns, not bytes"))?
        .to_str()?
        .to_owned();
    let flags: i64 = obj.getattr("flags")?.extract()?;
    // re.IGNORECASE, re.MULTILINE, re.DOTALL, re.VERBOSE. re.ASCII and
    // re.UNICODE make no difference on topic names (ASCII).
    let inline: String = [(2, 'i'), (8, 'm'), (16, 's'), (64, 'x')]
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|&(_, c)| c)
        .collect();
    Ok(if inline.is_empty() {
        text
    } else if flags & 64 != 0 {
        // The newline ends a trailing comment in verbose mode, which would
        // swallow the groups the expression is wrapped in.
        format!("(?{inline}){text}\n")
    } else {
        format!("(?{inline}){text}")
    })
}

pub(super) fn subscription(py: Python<'_>, topics: &Bound<'_, PyAny>) -> PyResult<Subscription> {
    let re_pattern = py.import("re")?.getattr("Pattern")?;
    let mut sub = Subscription {
        names: Vec::new(),
        patterns: Vec::new(),
    };
    let mut add = |item: &Bound<'_, PyAny>| -> PyResult<bool> {
        if let Ok(s) = item.cast::<PyString>() {
            let s = s.to_str()?;
            if s.starts_with('^') {
                sub.patterns.push(s.to_owned());
            } else {
                sub.names.push(s.to_owned());
            }
            Ok(true)
        } else if item.is_instance(&re_pattern)? {
            sub.patterns.push(pattern_of(item)?);
            Ok(true)
        } else {
            Ok(false)
        }
    };
    if add(topics)? {
        return Ok(sub);
    }
    let err = || {
        PyTypeError::new_err(
            "subscribe() takes a topic name, a regular expression (a str starting with '^' \
             or an re.Pattern), or a list of them",
        )
    };
    let items: Vec<Bound<'_, PyAny>> = if topics.is_instance_of::<PyBytes>() {
        return Err(err());
    } else {
        topics.extract().map_err(|_| err())?
    };
    for it in &items {
        if !add(it)? {
            return Err(err());
        }
    }
    Ok(sub)
}

/// A callback argument: callable or None.
pub(super) fn callback(obj: Option<Bound<'_, PyAny>>, name: &str) -> PyResult<Option<Py<PyAny>>> {
    match obj {
        Some(o) if o.is_none() => Ok(None),
        Some(o) if o.is_callable() => Ok(Some(o.unbind())),
        Some(o) => Err(PyTypeError::new_err(format!(
            "{name} must be callable or None, not {}",
            o.get_type().name()?
        ))),
        None => Ok(None),
    }
}
