//! `mqlite.Mirror`, `mqlite.MirrorStats`, `mqlite.mirror()` and
//! `mqlite.mirror_status()`: copies of a topic between a data directory
//! and a Kafka cluster (the engine's [`mqlite::Mirror`]).
//!
//! `Mirror.run()` runs the engine's copy on a thread of its own and waits
//! for it without the GIL, waking every 100 ms for signals: Ctrl-C stops
//! the copy (after the write in progress), then raises.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::broker::Broker;
use crate::error::{invalid_argument, IntoPy};
use crate::util::run_interruptible;

/// What a copy did, and how far behind its destination is.
///
/// Attributes:
///     copied (int): Records written to the destination.
///     batches (int): Writes to the destination.
///     lag (int): Records of the source not copied yet (when last looked).
///     partitions (list[tuple[int, int, int]]): Per source partition,
///         `(partition, next offset to copy, end offset when last looked)`.
///     errors (int): Errors met (a continuous copy starts again after each).
///     last_error (str | None): The last error met, in words.
///     elapsed (float): Seconds the copy has run.
///     rate (float): Records copied per second, on average.
#[pyclass(frozen, get_all, module = "mqlite")]
pub struct MirrorStats {
    /// int: Records written to the destination.
    copied: u64,
    /// int: Writes to the destination.
    batches: u64,
    /// int: Records of the source not copied yet.
    lag: u64,
    /// list[tuple[int, int, int]]: Per source partition, next offset and end.
    partitions: Vec<(u32, u64, u64)>,
    /// int: Errors met.
    errors: u64,
    /// str | None: The last error met.
    last_error: Option<String>,
    /// float: Seconds the copy has run.
    elapsed: f64,
    /// float: Records copied per second, on average.
    rate: f64,
}

impl From<mqlite::MirrorStats> for MirrorStats {
    fn from(s: mqlite::MirrorStats) -> Self {
        MirrorStats {
            copied: s.copied,
            batches: s.batches,
            lag: s.lag(),
            rate: s.rate(),
            elapsed: s.elapsed.as_secs_f64(),
            partitions: s.partitions,
            errors: s.errors,
            last_error: s.last_error,
        }
    }
}

#[pymethods]
impl MirrorStats {
    fn __repr__(&self) -> String {
        format!(
            "MirrorStats(copied={}, batches={}, lag={}, errors={}, elapsed={:.3}, rate={:.1})",
            self.copied, self.batches, self.lag, self.errors, self.elapsed, self.rate
        )
    }
}

/// A copy of one topic between a data directory and a Kafka cluster, either
/// way, with no record lost or written twice across restarts (each copy
/// carries its source offset in the header `mqlite.mirror.offset`; a copy
/// resumes after the last one the destination holds). Partitions map one
/// to one, or by key when the counts differ.
///
/// Args:
///     source: The broker to copy from.
///     destination: The broker to copy to (one of the two a data
///         directory, the other a cluster: `mqlite.open("kafka://...")`).
///     topic: The topic (created in the destination with the source's
///         partition count when missing).
///     follow: Keep copying what arrives until `stop()`, starting again
///         after errors that may pass (counted in `stats().errors`);
///         default False: stop once caught up.
///     batch: Records per write to the destination, at most (default 500).
///
/// Raises:
///     mqlite.InvalidTopicName: `topic` is not a valid name.
///     mqlite.InvalidArgument: `batch` below 1, or source and destination
///         both directories or both clusters.
///     mqlite.Closed: Either broker is closed.
#[pyclass(frozen, module = "mqlite")]
pub struct Mirror {
    source: Py<Broker>,
    destination: Py<Broker>,
    inner: mqlite::Mirror,
}

/// The engine's options for `follow` and `batch`.
fn options(py: Python<'_>, follow: bool, batch: i64) -> PyResult<mqlite::MirrorOptions> {
    if batch < 1 {
        return Err(invalid_argument(
            py,
            format!("batch must be at least 1, got {batch}"),
        ));
    }
    Ok(mqlite::MirrorOptions {
        once: !follow,
        max_batch: usize::try_from(batch).unwrap_or(usize::MAX),
        ..mqlite::MirrorOptions::default()
    })
}

fn check_ends(py: Python<'_>, source: &Broker, destination: &Broker) -> PyResult<()> {
    source.check_open(py)?;
    destination.check_open(py)?;
    mqlite::kafka::mirror::check_pair(&source.inner, &destination.inner).py_err(py)
}

#[pymethods]
impl Mirror {
    #[new]
    #[pyo3(signature = (source, destination, topic, *, follow = false, batch = 500))]
    fn new(
        py: Python<'_>,
        source: Py<Broker>,
        destination: Py<Broker>,
        topic: &str,
        follow: bool,
        batch: i64,
    ) -> PyResult<Self> {
        let options = options(py, follow, batch)?;
        let inner = mqlite::Mirror::new(topic, options).py_err(py)?;
        check_ends(py, source.get(), destination.get())?;
        Ok(Mirror {
            source,
            destination,
            inner,
        })
    }

    /// Copies until caught up (or, with `follow`, until `stop()`); blocks
    /// meanwhile, without the GIL.
    ///
    /// Returns:
    ///     MirrorStats: What the copy did.
    ///
    /// Raises:
    ///     mqlite.Closed: Either broker is (or got) closed.
    ///     mqlite.UnknownTopic: The source has no such topic (without
    ///         `follow`; with it, the copy waits for the topic).
    ///     mqlite.InvalidArgument: The mirror is running already.
    ///     KeyboardInterrupt: Ctrl-C (the copy stopped first).
    ///     mqlite.Error: An error of either side (without `follow`, the
    ///         first one stops the copy: what it wrote stays, and the next
    ///         copy resumes after it).
    fn run(&self, py: Python<'_>) -> PyResult<MirrorStats> {
        let (source, destination) = (self.source.get(), self.destination.get());
        check_ends(py, source, destination)?;
        let (result, interrupted) = run_interruptible(
            py,
            || self.inner.run(&source.inner, &destination.inner),
            || {},
            || self.inner.stop(),
        );
        let stats = match result {
            Ok(r) => r.py_err(py)?,
            Err(_) => return Err(PyRuntimeError::new_err("the mirror thread panicked")),
        };
        if let Some(e) = interrupted {
            return Err(e);
        }
        Ok(stats.into())
    }

    /// Ends a `follow` copy: `run()` returns after the write in progress.
    /// May be called from any thread. A stopped mirror stays stopped.
    fn stop(&self) {
        self.inner.stop();
    }

    /// What the copy has done so far, and its lag when last looked; may be
    /// called from any thread while `run()` runs.
    ///
    /// Returns:
    ///     MirrorStats: The copy's stats.
    fn stats(&self) -> MirrorStats {
        self.inner.stats().into()
    }

    /// str: The topic it copies.
    #[getter]
    fn topic(&self) -> &str {
        self.inner.topic()
    }

    fn __repr__(&self) -> String {
        format!("<mqlite.Mirror topic={:?}>", self.inner.topic())
    }
}

/// Copies `topic` from `source` to `destination` (one a data directory, the
/// other a Kafka cluster) until caught up: `Mirror(...).run()`.
///
/// Args:
///     source: The broker to copy from.
///     destination: The broker to copy to.
///     topic: The topic.
///     batch: Records per write to the destination, at most (default 500).
///
/// Returns:
///     MirrorStats: What the copy did.
///
/// Raises:
///     As `Mirror()` and `Mirror.run()`.
#[pyfunction]
#[pyo3(signature = (source, destination, topic, *, batch = 500))]
pub fn mirror(
    py: Python<'_>,
    source: Py<Broker>,
    destination: Py<Broker>,
    topic: &str,
    batch: i64,
) -> PyResult<MirrorStats> {
    Mirror::new(py, source, destination, topic, false, batch)?.run(py)
}

/// How far `destination` is behind `source` on `topic`, read from what
/// copies wrote into the destination, without copying.
///
/// Args:
///     source: The broker copied from.
///     destination: The broker copied to.
///     topic: The topic.
///
/// Returns:
///     MirrorStats: `partitions` and `lag` (the other counts are 0).
///
/// Raises:
///     mqlite.InvalidTopicName: `topic` is not a valid name.
///     mqlite.InvalidArgument: Both directories or both clusters.
///     mqlite.UnknownTopic: The source has no such topic.
///     mqlite.Closed: Either broker is closed.
#[pyfunction]
pub fn mirror_status(
    py: Python<'_>,
    source: &Broker,
    destination: &Broker,
    topic: &str,
) -> PyResult<MirrorStats> {
    mqlite::validate_topic_name(topic).py_err(py)?;
    check_ends(py, source, destination)?;
    let s = py
        .detach(|| mqlite::kafka::mirror::status(&source.inner, &destination.inner, topic))
        .py_err(py)?;
    Ok(s.into())
}
