//! `mqlite.Consumer`, `mqlite.Message` and `mqlite.ConsumerStats`.
//!
//! The consumer forwards to the engine's: `poll()` and iteration to
//! `poll_one` (which hands out one message at a time from what one fetch
//! brought, with exact positions, commits and rebalances), `poll_batch()`
//! to `poll_one` and the messages held after it. Rebalance callbacks get
//! this object; the calls they make on it reach the engine's rebalance
//! context (`rebalance.rs`).
//!
//! # The GIL
//!
//! Handing out a message the engine holds keeps the GIL, and so does a
//! poll that does not wait, but for a consumer with a group (which may
//! commit or rebalance there). Waits, commits (an fsync), and
//! `subscribe`/`unsubscribe`/`assign`/`close` of a consumer with a
//! `group_id` release it. The listener attaches to Python for the
//! callbacks, whichever way it was reached.
//!
//! The engine holds none of its own locks while it runs the listener, and
//! no thread waits for this object's state mutex with the GIL held
//! ([`Consumer::lock`]), so attaching there cannot deadlock.

mod args;
mod inner;
mod message;
#[allow(unsafe_code)] // lends a context pointer to callbacks (module docs)
mod rebalance;
mod state;
// Transactions.
mod transactional;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::pyclass::{PyTraverseError, PyVisit};
use pyo3::types::{PyDict, PyTuple, PyWeakrefReference};

pub(crate) use args::topic_partitions;
use args::{callback, commit_offsets_arg, subscription, time_queries};
use inner::on_either;
pub use message::{ConsumerStats, Message};
use rebalance::{Callbacks, Listener, Shared};
use state::{Counters, State};

use crate::broker::Broker;
use crate::error::{invalid_argument, is_kind, to_py, IntoPy};
use crate::fork::Local;
use crate::util::{arg_u32, arg_u64};

/// Longest wait without the GIL before checking for signals (Ctrl-C) and
/// for `close()` from another thread.
const WAIT_SLICE: Duration = Duration::from_millis(100);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads records from assigned partitions or subscribed topics.
///
/// Made by `Broker.consumer()`. An iterator: `for msg in consumer` blocks for
/// the next message and stops when the consumer (or its broker) is closed or
/// `wakeup()` is called. A context manager: leaving the `with` block closes
/// it.
///
/// With a `group_id` (and not `broadcast`), `subscribe()` joins the consumer
/// group: the members share the partitions of the topics, each partition
/// read by one member at a time, and a new owner starts at the offset the
/// previous one committed. Partitions move between members (a rebalance)
/// inside `poll()`, `consume()` and iteration, where the `on_assign` and
/// `on_revoke` callbacks run. A member that does not poll within
/// `max_poll_interval_ms` loses its partitions.
///
/// Messages are fetched in batches (`max_poll_records`) and handed out one
/// at a time; positions and commits cover only messages handed out. A
/// member takes part in rebalances at every poll, whatever was fetched:
/// messages fetched for a partition it gives up are dropped, and the new
/// owner reads them from the committed offset.
///
/// Blocking waits release the GIL and wake up at least every 100 ms to
/// check for signals, so Ctrl-C interrupts them. A consumer may be used from
/// several threads (calls are serialised), though one consumer per thread is
/// the usual pattern; `wakeup()` and `close()` from another thread end a
/// blocked `poll()` at once.
#[pyclass(frozen, weakref, module = "mqlite")]
pub struct Consumer {
    /// Leaked instead of closed in a forked child (`fork.rs`), like
    /// `shared`.
    state: Local<Mutex<State>>,
    shared: Local<Arc<Shared>>,
    closed: AtomicBool,
    /// `wakeup()` was called and no poll returned None for it yet.
    woken: AtomicBool,
    waker: mqlite::ConsumerWaker,
    counters: Counters,
    broker: Py<Broker>,
    group_id: Option<String>,
    /// A group member shares partitions (`group_id`, not broadcast).
    clustering: bool,
    /// An `mqlite.Processor` holds the engine consumer (`processor.rs`):
    /// `state.consumer` is an idle stand-in and calls raise.
    processing: AtomicBool,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if self.state.forked() {
            // The parent's: touch nothing (its locks may be held forever).
            return;
        }
        // No callback runs for a consumer being destroyed.
        let _dropped = self.shared.clear_callbacks();
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        st.shut_down();
    }
}

/// Builds the Python consumer over engine consumer `inner`.
pub(crate) struct NewConsumer {
    pub inner: mqlite::Consumer,
    pub on_commit: Option<Py<PyAny>>,
}

#[pymethods]
impl Consumer {
    /// Reads exactly these partitions, replacing any assignment or
    /// subscription (a group member revokes all its partitions, with
    /// `on_revoke`, and leaves its group). Nothing changes if any partition
    /// is unknown. Positions start at the group's committed offsets, if any
    /// (or the positions already held, for partitions read before without a
    /// group membership).
    ///
    /// Args:
    ///     partitions: A list of (topic, partition) pairs.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.UnknownPartition: A partition does not exist.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `partitions` is not a list of pairs.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    fn assign(&self, py: Python<'_>, partitions: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_forked(py)?;
        let parts = topic_partitions(py, "assign()", partitions)?;
        if self.lent_here() {
            return Err(PyRuntimeError::new_err(
                "assign() cannot be called inside on_assign or on_revoke",
            ));
        }
        for (t, p) in &parts {
            self.check_partition(py, t, *p, true)?;
        }
        let refs: Vec<(&str, u32)> = parts.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        self.with_engine(py, "assign", |c| {
            // The engine's assign() leaves the group after taking the
            // partitions it keeps out of the assignment, so those would miss
            // on_revoke and the commit: leave first.
            if c.member_id().is_some() {
                c.unsubscribe();
            }
            c.assign(&refs)
        })
    }

    /// Reads every partition of these topics, including partitions added
    /// later, replacing any assignment or subscription. Nothing changes if
    /// any topic is unknown or the expression is invalid.
    ///
    /// With a `group_id` (and not `broadcast`) the consumer joins the group
    /// and reads its share of the partitions, which changes as members come
    /// and go. The callbacks run inside `poll()`, `consume()`, iteration,
    /// `subscribe()`, `unsubscribe()`, `assign()` and `close()`, on the
    /// thread that called it, as `on_assign(consumer, partitions)` and
    /// `on_revoke(consumer, partitions)`, `partitions` being a list of
    /// (topic, partition) pairs. `on_revoke` runs before partitions go to
    /// another member: commit there to hand over exactly what was processed
    /// (with `enable_auto_commit` a commit follows it anyway). `on_assign`
    /// runs once new partitions are owned; their positions are the group's
    /// committed offsets, and `seek()` may change them. `on_lost(consumer,
    /// partitions)` runs instead of `on_revoke` when the member was removed
    /// from the group for not polling within `max_poll_interval_ms`: the
    /// partitions may belong to another member already and are no longer
    /// assigned, so `commit()` has nothing to commit, `commit(offsets)` for
    /// them raises `mqlite.CommitFailed`, and no auto-commit runs; without
    /// `on_lost`, `on_revoke` is called then (as in confluent-kafka). The
    /// consumer then joins the group again. Inside a callback
    /// the consumer accepts every call but `poll()`, `consume()`,
    /// iteration, `subscribe()`, `unsubscribe()` and `assign()`
    /// (RuntimeError); `close()` there takes effect once the call that ran
    /// the callback is done. An exception raised by a callback propagates
    /// out of that call, after the rebalance is complete (the partitions
    /// are assigned or revoked anyway).
    ///
    /// Args:
    ///     topics: A topic name, a regular expression (a str starting with
    ///         "^", as in confluent-kafka, or a compiled `re.Pattern`), or a
    ///         list of them. An expression must match a whole topic name,
    ///         uses the syntax of Rust's `regex` crate (no look-around or
    ///         back-references; the flags `re.IGNORECASE`, `re.VERBOSE`,
    ///         `re.DOTALL` and `re.MULTILINE` are kept), and also picks up topics created
    ///         later.
    ///     on_assign: Called with (consumer, partitions) when partitions
    ///         are assigned to this member.
    ///     on_revoke: Called with (consumer, partitions) before partitions
    ///         are taken away from this member.
    ///     on_lost: Called with (consumer, partitions) after this member
    ///         lost its partitions by being removed from the group;
    ///         `on_revoke` is called instead when not given.
    ///
    /// A topic that does not exist yet is read once it is created (as
    /// Kafka's consumer waits for it); names beside an expression must
    /// exist.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: A name given beside an expression does not
    ///         exist.
    ///     mqlite.InvalidTopicName: A topic name is invalid.
    ///     mqlite.InvalidArgument: An empty list, an invalid or
    ///         unsupported expression, a strategy other than the group's, or
    ///         callbacks without a `group_id` (or with `broadcast`).
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `topics` is of the wrong type, or a callback is not
    ///         callable.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    #[pyo3(signature = (topics, on_assign = None, on_revoke = None, on_lost = None))]
    fn subscribe(
        slf: &Bound<'_, Self>,
        topics: &Bound<'_, PyAny>,
        on_assign: Option<Bound<'_, PyAny>>,
        on_revoke: Option<Bound<'_, PyAny>>,
        on_lost: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        slf.get().check_forked(slf.py())?;
        let py = slf.py();
        let this = slf.get();
        if this.lent_here() {
            // Before anything that takes the state mutex.
            return Err(PyRuntimeError::new_err(
                "subscribe() cannot be called inside on_assign or on_revoke",
            ));
        }
        let sub = subscription(py, topics)?;
        let on_assign = callback(on_assign, "on_assign")?;
        let on_revoke = callback(on_revoke, "on_revoke")?;
        let on_lost = callback(on_lost, "on_lost")?;
        if (on_assign.is_some() || on_revoke.is_some() || on_lost.is_some()) && !this.clustering {
            return Err(invalid_argument(
                py,
                "on_assign, on_revoke and on_lost need a consumer with a group_id (not broadcast)",
            ));
        }
        let callbacks = Arc::new(Callbacks {
            fns: Mutex::new([on_assign, on_revoke, on_lost]),
        });
        let listener = Box::new(Listener {
            shared: Arc::clone(&this.shared),
            callbacks: Arc::clone(&callbacks),
            this: PyWeakrefReference::new(slf.as_any())?.unbind(),
        });
        let pattern = if sub.patterns.is_empty() {
            None
        } else {
            // Names beside expressions join the expression, so they must
            // exist now.
            for n in &sub.names {
                this.broker.get().inner.topic(n).py_err(py)?;
            }
            let mut parts: Vec<String> = sub.patterns.iter().map(|p| format!("(?:{p})")).collect();
            // Topic names are [A-Za-z0-9._-]: only '.' is special.
            parts.extend(sub.names.iter().map(|n| n.replace('.', "\\.")));
            Some(parts.join("|"))
        };
        lock(&this.shared.callbacks).push(callbacks);
        let names: Vec<&str> = sub.names.iter().map(String::as_str).collect();
        let res = this.with_engine(py, "subscribe", move |c| match pattern {
            None => c.subscribe_with(&names, listener),
            Some(p) => c.subscribe_pattern(&p, Some(listener)),
        });
        // Keep the callbacks a listener still holds: the new one, or the
        // old one if the engine refused the subscription. The others are
        // dropped after the lock is released (dropping a callable may run
        // Python code).
        let unused: Vec<Arc<Callbacks>> = {
            let mut all = lock(&this.shared.callbacks);
            let (keep, unused) = all.drain(..).partition(|c| Arc::strong_count(c) > 1);
            *all = keep;
            unused
        };
        drop(unused);
        res
    }

    /// Drops the subscription or assignment: the consumer reads nothing
    /// until the next `subscribe()` or `assign()`. A group member revokes
    /// its partitions (`on_revoke`, then a commit with auto-commit) and
    /// leaves its group.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    fn unsubscribe(&self, py: Python<'_>) -> PyResult<()> {
        self.check_forked(py)?;
        self.with_engine(py, "unsubscribe", |c| {
            c.unsubscribe();
            Ok(())
        })
    }

    /// The partitions this consumer reads now.
    ///
    /// Returns:
    ///     list[tuple[str, int]]: (topic, partition) pairs.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer is closed.
    fn assignment(&self, py: Python<'_>) -> PyResult<Vec<(String, u32)>> {
        self.check_forked(py)?;
        let mut acc = self.access(py)?;
        Ok(on_either!(acc, |c| c.assignment()))
    }

    /// Sets the next offset to read from an assigned partition:
    /// `seek(topic, partition, offset)`, or `seek(id)` with a message id
    /// (`Message.id`, `RecordMetadata.id`).
    ///
    /// Args:
    ///     topic: The topic, or a message id `"<topic>:<partition>:<offset>"`
    ///         when `partition` and `offset` are left out.
    ///     partition: The partition; must be assigned.
    ///     offset: From the first retained offset to the end offset,
    ///         inclusive.
    ///
    /// Raises:
    ///     mqlite.OffsetOutOfRange: `offset` is outside the retained range.
    ///     mqlite.InvalidArgument: The partition is not assigned, `offset`
    ///         is negative, or the id is malformed.
    ///     TypeError: Only one of `partition` and `offset` is given.
    ///     mqlite.Closed: The consumer or its broker is closed.
    #[pyo3(signature = (topic, partition = None, offset = None))]
    fn seek(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: Option<i64>,
        offset: Option<i64>,
    ) -> PyResult<()> {
        let (partition, offset) = match (partition, offset) {
            (Some(p), Some(o)) => (p, o),
            (None, None) => return self.seek_to_id(py, topic),
            _ => {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "seek() takes a topic, a partition and an offset, or one message id",
                ));
            }
        };
        self.check_forked(py)?;
        let partition = arg_u32(py, "partition", partition)?;
        let offset = arg_u64(py, "offset", offset)?;
        let mut acc = self.access(py)?;
        on_either!(acc, |c| c.seek(topic, partition, offset)).py_err(py)
    }

    /// Sets the next message to read to the one a message id names
    /// (`"<topic>:<partition>:<offset>"`, see `Message.id`), as `seek`.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The id is malformed, or its partition is
    ///         not assigned.
    ///     mqlite.OffsetOutOfRange: The offset is outside the retained range.
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn seek_to_id(&self, py: Python<'_>, id: &str) -> PyResult<()> {
        self.check_forked(py)?;
        let id: mqlite::MessageId = id.parse().py_err(py)?;
        let mut acc = self.access(py)?;
        on_either!(acc, |c| c.seek(&id.topic, id.partition, id.offset)).py_err(py)
    }

    /// Moves to the first retained offset of an assigned partition.
    ///
    /// Args:
    ///     topic: The topic.
    ///     partition: The partition; must be assigned.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: The topic does not exist.
    ///     mqlite.UnknownPartition: The partition does not exist.
    ///     mqlite.InvalidArgument: The partition is not assigned.
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn seek_to_beginning(&self, py: Python<'_>, topic: &str, partition: i64) -> PyResult<()> {
        self.check_forked(py)?;
        let partition = arg_u32(py, "partition", partition)?;
        let mut acc = self.access(py)?;
        on_either!(acc, |c| c.seek_to_beginning(topic, partition)).py_err(py)
    }

    /// Moves to the end of an assigned partition: only records written from
    /// now on are read.
    ///
    /// Args:
    ///     topic: The topic.
    ///     partition: The partition; must be assigned.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: The topic does not exist.
    ///     mqlite.UnknownPartition: The partition does not exist.
    ///     mqlite.InvalidArgument: The partition is not assigned.
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn seek_to_end(&self, py: Python<'_>, topic: &str, partition: i64) -> PyResult<()> {
        self.check_forked(py)?;
        let partition = arg_u32(py, "partition", partition)?;
        let mut acc = self.access(py)?;
        on_either!(acc, |c| c.seek_to_end(topic, partition)).py_err(py)
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
        self.check_forked(py)?;
        let partition = arg_u32(py, "partition", partition)?;
        let mut acc = self.access(py)?;
        on_either!(acc, |c| c.position(topic, partition)).py_err(py)
    }

    /// For each (topic, partition, timestamp_ms), the earliest offset whose
    /// record timestamp is at or after the timestamp.
    ///
    /// Args:
    ///     partitions: A list of (topic, partition, timestamp_ms) tuples
    ///         (milliseconds since the Unix epoch).
    ///
    /// Returns:
    ///     list[int | None]: One offset per tuple, in order; None when every
    ///     record of the partition is older.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.UnknownPartition: A partition does not exist.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `partitions` is not a list of such tuples.
    fn offsets_for_times(
        &self,
        py: Python<'_>,
        partitions: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<u64>>> {
        self.check_forked(py)?;
        let q = time_queries(py, partitions)?;
        let refs: Vec<(&str, u32, i64)> =
            q.iter().map(|(t, p, ts)| (t.as_str(), *p, *ts)).collect();
        let mut acc = self.access(py)?;
        on_either!(acc, |c| c.offsets_for_times(&refs)).py_err(py)
    }

    /// Commits offsets to the group, durably: the commit is on disk when
    /// this returns (commits are always synchronous; `asynchronous` only
    /// changes how a failure is reported).
    ///
    /// Without `offsets`, commits the position of every partition read:
    /// the offset after the last message handed out by `poll()`,
    /// `consume()` or iteration (messages fetched but not yet handed out do
    /// not count). A group member can commit only partitions it owns now.
    ///
    /// The `on_commit` callback given to `Broker.consumer()`, if any, is
    /// called after every commit made here, as `on_commit(err, offsets)`:
    /// `err` None or the exception, `offsets` a list of (topic, partition,
    /// offset) committed (on failure: the explicit offsets, or an empty
    /// list).
    ///
    /// Args:
    ///     offsets: None, or a list of (topic, partition, offset) or
    ///         (topic, partition, offset, metadata) tuples; `offset` is the
    ///         next offset to read (the last processed plus one), at most
    ///         the partition's end offset; `metadata` is stored with it.
    ///     asynchronous: With an `on_commit` callback, report a failure only
    ///         to it instead of raising it (confluent-kafka's
    ///         `asynchronous=True`); returns None.
    ///
    /// Returns:
    ///     list[tuple[str, int, int]] | None: What was committed, as
    ///     (topic, partition, offset); None when `asynchronous`.
    ///
    /// Raises:
    ///     mqlite.CommitFailed: A partition is not owned by this member (a
    ///         rebalance gave it to another).
    ///     mqlite.InvalidArgument: The consumer has no `group_id`, or an
    ///         offset or partition is negative.
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.UnknownPartition: A partition does not exist.
    ///     mqlite.OffsetOutOfRange: An offset is past the partition's end.
    ///     mqlite.IoError: The offsets could not be written.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `offsets` is of the wrong type.
    #[pyo3(signature = (offsets = None, asynchronous = false))]
    fn commit(
        &self,
        py: Python<'_>,
        offsets: Option<&Bound<'_, PyAny>>,
        asynchronous: bool,
    ) -> PyResult<Option<Vec<(String, u32, u64)>>> {
        self.check_forked(py)?;
        let explicit = match offsets {
            Some(o) if !o.is_none() => Some(commit_offsets_arg(py, o)?),
            _ => None,
        };
        if let Some(ex) = &explicit {
            for (t, p, o, _) in ex {
                let info = self.broker.get().inner.topic(t).py_err(py)?;
                let Some(part) = info.partitions.get(*p as usize) else {
                    return Err(to_py(
                        py,
                        mqlite::Error::UnknownPartition {
                            topic: t.clone(),
                            partition: *p,
                            count: info.partitions.len() as u32,
                        },
                    ));
                };
                if *o > part.end_offset {
                    return Err(to_py(
                        py,
                        mqlite::Error::OffsetOutOfRange {
                            topic: t.clone(),
                            partition: *p,
                            offset: *o,
                            start: part.start_offset,
                            end: part.end_offset,
                        },
                    ));
                }
            }
        }
        let (res, done) = {
            let mut acc = self.access(py)?;
            on_either!(acc, |c| {
                let res = py.detach(|| match &explicit {
                    Some(ex) => {
                        let refs: Vec<(&str, u32, u64, &str)> = ex
                            .iter()
                            .map(|(t, p, o, m)| (t.as_str(), *p, *o, m.as_str()))
                            .collect();
                        c.commit_offsets(&refs)
                    }
                    None => c.commit(),
                });
                let done: Vec<(String, u32, u64)> = match (&explicit, &res) {
                    (Some(ex), _) => ex.iter().map(|(t, p, o, _)| (t.clone(), *p, *o)).collect(),
                    (None, Ok(())) => c
                        .assignment()
                        .into_iter()
                        .filter_map(|(t, p)| {
                            let o = c.committed(&t, p).ok()??.offset;
                            Some((t, p, o))
                        })
                        .collect(),
                    (None, Err(_)) => Vec::new(),
                };
                (res, done)
            })
        }; // The consumer is free again: on_commit may use it.
        let err = res.err().map(|e| to_py(py, e));
        let on_commit = lock(&self.shared.on_commit)
            .as_ref()
            .map(|c| c.clone_ref(py));
        let reported = on_commit.is_some();
        if let Some(cb) = on_commit {
            let e = err.as_ref().map(|e| e.value(py).clone());
            cb.bind(py).call1((e, done.clone()))?;
        }
        match err {
            Some(e) if !(asynchronous && reported) => Err(e),
            _ => Ok((!asynchronous).then_some(done)),
        }
    }

    /// The group's committed offsets.
    ///
    /// Args:
    ///     partitions: A list of (topic, partition) pairs; None for the
    ///         partitions read now.
    ///
    /// Returns:
    ///     dict[tuple[str, int], tuple[int, str]]: (offset, metadata) by
    ///     (topic, partition), for the partitions with a committed offset.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The consumer has no `group_id`.
    ///     mqlite.UnknownTopic: A topic does not exist.
    ///     mqlite.UnknownPartition: A partition does not exist.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `partitions` is not a list of pairs.
    #[pyo3(signature = (partitions = None))]
    fn committed<'py>(
        &self,
        py: Python<'py>,
        partitions: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.check_forked(py)?;
        let wanted = match partitions {
            Some(p) if !p.is_none() => {
                let v = topic_partitions(py, "committed()", p)?;
                for (t, p) in &v {
                    self.check_partition(py, t, *p, false)?;
                }
                Some(v)
            }
            _ => None,
        };
        let mut acc = self.access(py)?;
        let out = PyDict::new(py);
        on_either!(acc, |c| {
            let wanted = wanted.unwrap_or_else(|| c.assignment());
            if wanted.is_empty() {
                // Still raises without a group_id.
                c.committed("", 0).py_err(py)?;
            }
            for (t, p) in wanted {
                if let Some(co) = c.committed(&t, p).py_err(py)? {
                    out.set_item((t, p), (co.offset, co.metadata))?;
                }
            }
        });
        Ok(out)
    }

    /// How far behind each partition read is: its end offset minus the
    /// committed offset (minus the position when nothing is committed).
    ///
    /// Returns:
    ///     dict[tuple[str, int], int]: The lag by (topic, partition).
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn lag<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check_forked(py)?;
        let mut acc = self.access(py)?;
        let lags = on_either!(acc, |c| c.lag()).py_err(py)?;
        let out = PyDict::new(py);
        for (t, p, lag) in lags {
            out.set_item((t, p), lag)?;
        }
        Ok(out)
    }

    /// Stops reading these partitions until `resume()`: polls return
    /// nothing of theirs (messages fetched for them and not returned yet are
    /// put back), but they stay assigned: a group member keeps them, and
    /// commits cover them. A rebalance that takes a partition away forgets
    /// that it was paused.
    ///
    /// Args:
    ///     partitions: A list of (topic, partition) pairs, each assigned.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: A partition is not assigned (nothing is
    ///         paused then).
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `partitions` is not a list of pairs.
    fn pause(&self, py: Python<'_>, partitions: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_forked(py)?;
        let parts = topic_partitions(py, "pause()", partitions)?;
        let refs: Vec<(&str, u32)> = parts.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let mut acc = self.access(py)?;
        on_either!(acc, |c| c.pause(&refs)).py_err(py)
    }

    /// Reads these partitions again after `pause()`, from where they were.
    ///
    /// Args:
    ///     partitions: A list of (topic, partition) pairs, each assigned.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: A partition is not assigned (nothing is
    ///         resumed then).
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `partitions` is not a list of pairs.
    fn resume(&self, py: Python<'_>, partitions: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_forked(py)?;
        let parts = topic_partitions(py, "resume()", partitions)?;
        let refs: Vec<(&str, u32)> = parts.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let mut acc = self.access(py)?;
        on_either!(acc, |c| c.resume(&refs)).py_err(py)
    }

    /// The paused partitions.
    ///
    /// Returns:
    ///     list[tuple[str, int]]: (topic, partition) pairs.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn paused(&self, py: Python<'_>) -> PyResult<Vec<(String, u32)>> {
        self.check_forked(py)?;
        let mut acc = self.access(py)?;
        Ok(on_either!(acc, |c| c.paused()))
    }

    /// Stores offsets as processed, for the next commit (manual, or
    /// automatic with `enable_auto_commit`) to take: with
    /// `enable_auto_offset_store=False`, commits take only what was stored
    /// (confluent-kafka's `store_offsets`, the at-least-once idiom: store
    /// after processing). Nothing is written until a commit. Give exactly
    /// one of `offsets` and `message`.
    ///
    /// Args:
    ///     offsets: A list of (topic, partition, offset) tuples, `offset`
    ///         the next offset to read (the last processed plus one:
    ///         `message.offset + 1`).
    ///     message: A processed message: stores its offset plus one.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: `enable_auto_offset_store` is on, the
    ///         consumer has no `group_id`, a partition is not assigned
    ///         (nothing is stored then), or neither or both of `offsets` and
    ///         `message` were given.
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     TypeError: `offsets` or `message` is of the wrong type.
    #[pyo3(signature = (offsets = None, message = None))]
    fn store_offsets(
        &self,
        py: Python<'_>,
        offsets: Option<&Bound<'_, PyAny>>,
        message: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.check_forked(py)?;
        let offsets = offsets.filter(|o| !o.is_none());
        let message = match message.filter(|m| !m.is_none()) {
            Some(m) => {
                let m = m.cast::<Message>().map_err(|_| {
                    pyo3::exceptions::PyTypeError::new_err(
                        "store_offsets() message must be an mqlite.Message",
                    )
                })?;
                let m = &m.get().inner;
                Some((m.topic().to_owned(), m.partition(), m.offset() + 1))
            }
            None => None,
        };
        let entries: Vec<(String, u32, u64)> = match (offsets, message) {
            (Some(o), None) => commit_offsets_arg(py, o)?
                .into_iter()
                .map(|(t, p, o, _)| (t, p, o))
                .collect(),
            (None, Some(m)) => vec![m],
            _ => {
                return Err(invalid_argument(
                    py,
                    "store_offsets() takes exactly one of offsets and message",
                ))
            }
        };
        let refs: Vec<(&str, u32, u64)> = entries
            .iter()
            .map(|(t, p, o)| (t.as_str(), *p, *o))
            .collect();
        let mut acc = self.access(py)?;
        on_either!(acc, |c| c.store_offsets(&refs)).py_err(py)
    }

    /// Counters of what this consumer did so far (also once closed).
    ///
    /// Returns:
    ///     ConsumerStats: A snapshot.
    ///
    /// Raises:
    ///     mqlite.Closed: In a process forked from the one that made the
    ///         consumer.
    fn stats(&self, py: Python<'_>) -> PyResult<ConsumerStats> {
        self.check_forked(py)?;
        let mut acc = self.access_with(py, false)?;
        let s = on_either!(acc, |c| c.stats());
        Ok(ConsumerStats {
            records: s.records,
            bytes: s.bytes,
            polls: self.counters.polls.load(Ordering::Relaxed),
            rebalances: s.rebalances,
            skipped: s.skipped,
            commits: s.commits,
            offset_resets: s.offset_resets,
        })
    }

    /// str | None: This consumer's member id in its group
    /// (`<client_id>-<number>`), while it is a member; else None.
    #[getter]
    fn member_id(&self, py: Python<'_>) -> PyResult<Option<String>> {
        if self.is_closed() {
            return Ok(None);
        }
        let mut acc = self.access_with(py, false)?;
        Ok(on_either!(acc, |c| c.member_id().map(str::to_owned)))
    }

    /// Makes a `poll()` (or `consume()`, or iteration) blocked in another
    /// thread return at once: None (an empty list; iteration stops). If no
    /// poll is waiting, the next one that would wait returns at once
    /// instead. Safe to call from any thread, and from signal handlers.
    /// Does nothing once the consumer is closed, or in a forked child.
    fn wakeup(&self) {
        if self.is_closed() {
            // Polls raise now anyway; in a forked child no poll can be
            // waiting on the parent's consumer.
            return;
        }
        self.woken.store(true, Ordering::Release);
        self.waker.wakeup();
    }

    /// Returns the next message, waiting up to `timeout` seconds for one.
    ///
    /// Group rebalances (and their callbacks) and auto-commits happen here.
    ///
    /// Args:
    ///     timeout: Seconds to wait (float); None waits until a message
    ///         arrives; 0 does not wait.
    ///
    /// Returns:
    ///     Message | None: The message, or None if the timeout passed or
    ///     `wakeup()` was called.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `timeout` is negative or NaN.
    ///     KeyboardInterrupt: Ctrl-C during the wait.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    ///     Exception: What an `on_assign` or `on_revoke` callback raised.
    #[pyo3(signature = (timeout = None))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Message>> {
        self.check_forked(py)?;
        let timeout = crate::util::timeout(py, timeout)?;
        self.counters.polls.fetch_add(1, Ordering::Relaxed);
        Ok(self
            .next_message(py, timeout)?
            .map(|inner| Message { inner }))
    }

    /// Returns up to `num_messages` messages, waiting up to `timeout` seconds
    /// for the first one; it does not wait for more once one is there. A
    /// consumer with a `group_id` returns at most what one engine fetch
    /// brought (`max_poll_records`).
    ///
    /// Args:
    ///     num_messages: Most messages to return, 1 to 1,000,000.
    ///     timeout: Seconds to wait for the first message (float); None
    ///         waits until one arrives; 0 does not wait.
    ///
    /// Returns:
    ///     list[Message]: The messages, in order per partition; empty if the
    ///     timeout passed or `wakeup()` was called.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `num_messages` or `timeout` is out of
    ///         range.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    ///     Exception: What an `on_assign` or `on_revoke` callback raised.
    #[pyo3(signature = (num_messages = 1, timeout = None))]
    fn consume(
        &self,
        py: Python<'_>,
        num_messages: i64,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Message>> {
        self.check_forked(py)?;
        if !(1..=1_000_000).contains(&num_messages) {
            return Err(invalid_argument(
                py,
                format!("num_messages must be 1 to 1000000, got {num_messages}"),
            ));
        }
        let timeout = crate::util::timeout(py, timeout)?;
        self.counters.polls.fetch_add(1, Ordering::Relaxed);
        let Some(first) = self.next_message(py, timeout)? else {
            return Ok(Vec::new());
        };
        let n = num_messages as usize;
        let mut out = Vec::with_capacity(n.min(1024));
        out.push(first);
        // Closed meanwhile: return what was taken; the next call raises.
        if let Ok(mut st) = self.open_state(py) {
            while out.len() < n {
                // A consumer with a group takes what the engine holds (more
                // could commit or rebalance, with the GIL held); one without
                // fetches again. An error comes back next poll.
                let next = match st.consumer.next_held() {
                    Some(m) => Some(m),
                    None if self.group_id.is_none() => {
                        st.consumer.poll_one(Duration::ZERO).ok().flatten()
                    }
                    None => None,
                };
                let Some(m) = next else { break };
                out.push(m);
            }
        }
        Ok(out.into_iter().map(|inner| Message { inner }).collect())
    }

    /// Returns the messages of one fetch at once: those fetched earlier
    /// and not returned yet if there are any (no new fetch), otherwise one
    /// fetch from the engine (up to `max_poll_records`), waiting up to
    /// `timeout` seconds for it. Afterwards nothing is held back: positions
    /// and commits count every message returned. The same as the Rust
    /// `Consumer::poll_batch` and C `mql_poll_batch`.
    ///
    /// Args:
    ///     timeout: Seconds to wait (float); None waits until messages
    ///         arrive; 0 does not wait.
    ///
    /// Returns:
    ///     list[Message]: The messages, in order per partition; empty if the
    ///     timeout passed or `wakeup()` was called.
    ///
    /// Raises:
    ///     mqlite.Closed: The consumer or its broker is closed.
    ///     mqlite.InvalidArgument: `timeout` is negative or NaN.
    ///     KeyboardInterrupt: Ctrl-C during the wait.
    ///     RuntimeError: Called inside `on_assign` or `on_revoke`.
    ///     Exception: What an `on_assign` or `on_revoke` callback raised.
    #[pyo3(signature = (timeout = None))]
    fn poll_batch(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Vec<Message>> {
        self.check_forked(py)?;
        let timeout = crate::util::timeout(py, timeout)?;
        self.counters.polls.fetch_add(1, Ordering::Relaxed);
        let Some(first) = self.next_message(py, timeout)? else {
            return Ok(Vec::new());
        };
        let mut out = vec![first];
        // Closed meanwhile: return what was taken; the next call raises.
        if let Ok(mut st) = self.open_state(py) {
            while let Some(m) = st.consumer.next_held() {
                out.push(m);
            }
        }
        Ok(out.into_iter().map(|inner| Message { inner }).collect())
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Message>> {
        self.check_forked(py)?;
        if self.is_closed() {
            return Ok(None);
        }
        self.counters.polls.fetch_add(1, Ordering::Relaxed);
        match self.next_message(py, None) {
            Ok(m) => Ok(m.map(|inner| Message { inner })),
            Err(e) if is_kind(py, &e, mqlite::ErrorKind::Closed) && self.is_closed() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stops the consumer: commits what was handed out (with
    /// `enable_auto_commit`), and leaves the group (after
    /// `on_revoke`), so its partitions go to the other members at once.
    /// Later calls raise `mqlite.Closed` and iteration ends. A `poll()`
    /// waiting in another thread returns at once. Closing twice is fine.
    /// In a process forked from the one that made the consumer this does
    /// nothing.
    ///
    /// Raises:
    ///     Exception: What an `on_revoke` callback raised (the consumer is
    ///         closed anyway).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.state.forked() {
            return Ok(());
        }
        if self.processing.load(Ordering::Acquire) && !self.lent_here() {
            return Err(Self::busy());
        }
        self.closed.store(true, Ordering::Release);
        self.waker.wakeup();
        if self.lent_here() {
            // Inside a callback: completed by the call that ran it.
            return Ok(());
        }
        let mut st = self.lock(py);
        self.shut_down(py, &mut st);
        match self.shared.take_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// bool: Whether the consumer, or the broker it came from, is closed
    /// (always True in a forked child).
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// str | None: The consumer group, or None.
    #[getter]
    fn group_id(&self) -> Option<&str> {
        self.group_id.as_deref()
    }

    // Transactions.

    /// confluent-kafka's `consumer_group_metadata()`: what
    /// `Producer.send_offsets_to_transaction()` takes to name this
    /// consumer's group (here: the group id).
    ///
    /// Returns:
    ///     str: The group id.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The consumer has no `group_id`.
    ///     mqlite.Closed: The consumer or its broker is closed.
    fn consumer_group_metadata(&self, py: Python<'_>) -> PyResult<String> {
        self.check_not_closed(py)?;
        self.group_id.clone().ok_or_else(|| {
            invalid_argument(py, "the consumer has no group_id: it has no group metadata")
        })
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().check_not_closed(slf.py())?;
        Ok(slf)
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.is_closed() { "closed" } else { "open" };
        match &self.group_id {
            Some(g) => format!("<mqlite.Consumer group_id={g:?} {state}>"),
            None => format!("<mqlite.Consumer {state}>"),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Never block here: skip what is locked right now.
        if let Ok(all) = self.shared.callbacks.try_lock() {
            for c in all.iter() {
                if let Ok(fns) = c.fns.try_lock() {
                    for f in fns.iter() {
                        visit.call(f)?;
                    }
                }
            }
        }
        if let Ok(f) = self.shared.on_commit.try_lock() {
            visit.call(&*f)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        if self.state.forked() {
            return;
        }
        let _dropped = self.shared.clear_callbacks();
    }
}
