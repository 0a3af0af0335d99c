//! `mqlite.Transaction`: an open transaction of a producer with a
//! `transactional_id`, over the engine's `Transaction`, and the producer's
//! confluent-kafka style calls (`begin_transaction()` ...
//! `commit_transaction()`), which keep the open one in the producer.
//!
//! The records are buffered by the engine and written only at the commit,
//! together with the consumer offsets sent into the transaction.

use std::sync::{Mutex, RwLock, TryLockError};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::callback;
use crate::consumer::Consumer;
use crate::data::Fields;
use crate::error::{invalid_argument, IntoPy};
use crate::fork::Local;
use crate::producer::{Producer, RecordMetadata};
use crate::util::lock;
use crate::util::{arg_u32, arg_u64};

/// An open transaction (Kafka's transactional producer), made by
/// `Producer.transaction()` or `Producer.begin_transaction()`.
///
/// Records sent into it are buffered and written only by `commit()`, all
/// together with the consumer offsets sent into it, atomically across
/// topics and partitions; `abort()` (or leaving a `with` block by an
/// exception) writes nothing. While it is open, the producer's own
/// `send()` and `produce()` add to it too. Safe to share between threads:
/// sends from several threads go into the one transaction.
///
/// A context manager: leaving the block normally commits (unless the block
/// already committed or aborted), leaving it by an exception aborts and
/// lets the exception through.
//
// Locks: `callbacks` before `inner`; both are waited for without the GIL,
// because a holder may need the GIL (a custom partitioner runs Python
// inside a send, a consumer's offsets are read without the GIL).
#[pyclass(frozen, module = "mqlite")]
pub struct Transaction {
    /// `None` once committed or aborted. Leaked, not dropped, in a forked
    /// child (`fork.rs`): a parent's thread may have held its locks.
    inner: Local<RwLock<Option<mqlite::Transaction>>>,
    producer: Py<Producer>,
    /// The `on_delivery` callbacks of records sent with `produce()`, by the
    /// record's index in the transaction. Held while a record is added, so
    /// that the index is the record's.
    callbacks: Mutex<Vec<(usize, Py<PyAny>)>>,
}

fn done(py: Python<'_>) -> PyErr {
    invalid_argument(py, "the transaction is already committed or aborted")
}

impl Transaction {
    /// Begins a transaction of `producer`.
    pub(crate) fn begin(producer: &Bound<'_, Producer>) -> PyResult<Transaction> {
        let py = producer.py();
        let p = producer.get();
        p.check_open(py)?;
        let inner = p.engine().begin_transaction().py_err(py)?;
        Ok(Transaction {
            inner: Local::new(RwLock::new(Some(inner))),
            producer: producer.clone().unbind(),
            callbacks: Mutex::new(Vec::new()),
        })
    }

    /// Runs `f` with the open transaction.
    fn with<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mqlite::Transaction) -> PyResult<R>,
    ) -> PyResult<R> {
        self.producer.get().check_open(py)?;
        // Waited for without the GIL (see the type's lock notes).
        let guard = self.read(py);
        match guard.as_ref() {
            Some(t) => f(t),
            None => Err(done(py)),
        }
    }

    /// Takes the transaction out to end it, and lets the producer forget
    /// it (when it holds it).
    fn take(&self, py: Python<'_>) -> PyResult<mqlite::Transaction> {
        self.check_forked(py)?;
        let t = loop {
            match self.inner.try_write() {
                Ok(mut g) => break g.take(),
                Err(TryLockError::Poisoned(p)) => break p.into_inner().take(),
                Err(TryLockError::WouldBlock) => py.detach(|| drop(self.inner.write())),
            }
        }
        .ok_or_else(|| done(py))?;
        self.producer.get().forget_transaction(self);
        Ok(t)
    }

    /// The callbacks, waited for without the GIL (see the type's lock
    /// notes); taken before `inner`, always.
    fn lock_callbacks(&self, py: Python<'_>) -> std::sync::MutexGuard<'_, Vec<(usize, Py<PyAny>)>> {
        loop {
            match self.callbacks.try_lock() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => py.detach(|| drop(self.callbacks.lock())),
            }
        }
    }

    /// Whether it was committed or aborted (true in a forked child, where
    /// it cannot be used).
    pub(crate) fn is_done(&self, py: Python<'_>) -> bool {
        self.inner.forked() || self.read(py).is_none()
    }

    /// Fails with `mqlite.Closed` in a process forked from the one that
    /// made the transaction, before any lock is taken.
    fn check_forked(&self, py: Python<'_>) -> PyResult<()> {
        if self.inner.forked() {
            // The producer's check names both processes.
            self.producer.get().check_open(py)?;
        }
        Ok(())
    }

    /// The transaction slot, waited for without the GIL.
    fn read(&self, py: Python<'_>) -> std::sync::RwLockReadGuard<'_, Option<mqlite::Transaction>> {
        loop {
            match self.inner.try_read() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => py.detach(|| drop(self.inner.read())),
            }
        }
    }

    /// Adds one record (the arguments of `Producer.send()`), with an
    /// `on_delivery` callback to run at the commit.
    #[allow(clippy::too_many_arguments)] // one per argument of the Python signature
    pub(crate) fn add(
        &self,
        py: Python<'_>,
        topic: &str,
        value: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        partition: Option<i64>,
        hdrs: Option<&Bound<'_, PyAny>>,
        timestamp: Option<i64>,
        on_delivery: Option<&Bound<'_, PyAny>>,
        (delay_ms, deliver_at): (Option<i64>, Option<i64>),
    ) -> PyResult<()> {
        self.check_forked(py)?;
        let on_delivery = match on_delivery.filter(|c| !c.is_none()) {
            Some(c) if !c.is_callable() => {
                return Err(PyTypeError::new_err(format!(
                    "on_delivery must be callable, not {}",
                    c.get_type().name()?
                )))
            }
            c => c.map(|c| c.clone().unbind()),
        };
        let mut fields = Fields::new(py, value, key, partition, hdrs)?;
        crate::data::add_delivery_time(py, &mut fields.headers, delay_ms, deliver_at)?;
        let record = fields.record(topic, timestamp, None).to_record();
        if let Some(t) = timestamp.filter(|t| *t < 0) {
            return Err(invalid_argument(
                py,
                format!("timestamp must not be negative, got {t}"),
            ));
        }
        let mut callbacks = self.lock_callbacks(py);
        self.with(py, |t| {
            let res = t.send(record);
            if let Some(e) = callback::take_partitioner_error() {
                return Err(e);
            }
            res.py_err(py)?;
            if let Some(cb) = on_delivery {
                callbacks.push((t.len() - 1, cb));
            }
            Ok(())
        })
    }

    /// Adds `(topic, partition, offset[, metadata])` entries for `group`.
    pub(crate) fn add_offsets(
        &self,
        py: Python<'_>,
        group: &str,
        offsets: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let list = offsets_arg(py, offsets)?;
        let entries: Vec<(&str, u32, u64, &str)> = list
            .iter()
            .map(|(t, p, o, m)| (t.as_str(), *p, *o, m.as_str()))
            .collect();
        self.with(py, |t| t.send_offsets_to(group, &entries).py_err(py))
    }

    /// Commits; runs the `on_delivery` callbacks of `produce()`d records.
    pub(crate) fn finish_commit(&self, py: Python<'_>) -> PyResult<Vec<RecordMetadata>> {
        self.producer.get().check_open(py)?;
        let mut held = self.lock_callbacks(py);
        let t = self.take(py)?;
        let callbacks = std::mem::take(&mut *held);
        drop(held);
        let mds = py.detach(|| t.commit()).py_err(py)?;
        let mut first = None;
        for (i, cb) in callbacks {
            if let Some(md) = mds.get(i) {
                let md = Py::new(py, RecordMetadata::from(md.clone()))?;
                if let Err(e) = cb.call1(py, (py.None(), md)) {
                    first.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first {
            return Err(e);
        }
        Ok(mds.into_iter().map(RecordMetadata::from).collect())
    }

    /// Aborts.
    pub(crate) fn finish_abort(&self, py: Python<'_>) -> PyResult<()> {
        self.check_forked(py)?;
        let mut held = self.lock_callbacks(py);
        let t = self.take(py)?;
        held.clear();
        drop(held);
        t.abort().py_err(py)
    }
}

/// `(topic, partition, offset[, metadata])` tuples, or objects with
/// `.topic`, `.partition` and `.offset` (confluent-kafka's
/// `TopicPartition`; `.metadata` when they have one).
fn offsets_arg(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
) -> PyResult<Vec<(String, u32, u64, String)>> {
    let err = || {
        PyTypeError::new_err(
            "offsets must be a list of (topic, partition, offset[, metadata]) tuples \
             or of objects with .topic, .partition and .offset",
        )
    };
    if obj.is_instance_of::<PyString>() {
        return Err(err());
    }
    let mut out = Vec::new();
    for item in obj.try_iter().map_err(|_| err())? {
        let item = item?;
        let (t, p, o, m) = if let Ok(tuple) = item.cast::<PyTuple>() {
            if let Ok((t, p, o)) = tuple.extract::<(String, i64, i64)>() {
                (t, p, o, String::new())
            } else {
                tuple
                    .extract::<(String, i64, i64, Option<String>)>()
                    .map_err(|_| err())
                    .map(|(t, p, o, m)| (t, p, o, m.unwrap_or_default()))?
            }
        } else if item.hasattr("topic")? && item.hasattr("partition")? && item.hasattr("offset")? {
            let m = if item.hasattr("metadata")? {
                item.getattr("metadata")?.extract::<Option<String>>()?
            } else {
                None
            };
            (
                item.getattr("topic")?.extract()?,
                item.getattr("partition")?.extract()?,
                item.getattr("offset")?.extract()?,
                m.unwrap_or_default(),
            )
        } else {
            return Err(err());
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

/// The group of `group_metadata`: a group id string, or what
/// `Consumer.consumer_group_metadata()` returns (the same string), or an
/// object with a `group_id` attribute.
pub(crate) fn group_of(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.to_owned());
    }
    if obj.hasattr("group_id")? {
        return obj.getattr("group_id")?.extract();
    }
    Err(PyTypeError::new_err(format!(
        "group_metadata must be a group id (str) or what Consumer.consumer_group_metadata() returns, not {}",
        obj.get_type().name()?
    )))
}

#[pymethods]
impl Transaction {
    /// Adds one record to the transaction; it is written at the commit.
    ///
    /// Its partition is chosen now (explicit, by its key, or by the
    /// producer's partitioner). Records of a transaction take no sequence.
    ///
    /// Args:
    ///     topic: The topic.
    ///     value: As for `Producer.send()`.
    ///     key: As for `Producer.send()`.
    ///     partition: As for `Producer.send()`.
    ///     headers: As for `Producer.send()`.
    ///     timestamp: As for `Producer.send()`.
    ///     delay_ms: As for `Producer.send()`: the record waits in
    ///         `__delayed` as part of the transaction, delivered only if it
    ///         commits.
    ///     deliver_at: As for `Producer.send()`.
    ///
    /// Raises:
    ///     mqlite.TransactionTooLarge: Past the producer's
    ///         `max_transaction_bytes` (the record is not added; the
    ///         transaction stays open).
    ///     mqlite.Timeout: Open longer than `transaction_timeout_ms` (the
    ///         transaction is aborted).
    ///     mqlite.InvalidArgument: Already committed or aborted, or a value
    ///         out of range.
    ///     mqlite.UnknownTopic, mqlite.UnknownPartition,
    ///         mqlite.MessageTooLarge, mqlite.ProducerFenced, mqlite.Closed,
    ///         TypeError: As for `Producer.send()`.
    #[pyo3(signature = (topic, value, key = None, partition = None, headers = None, timestamp = None, delay_ms = None, deliver_at = None))]
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
        delay_ms: Option<i64>,
        deliver_at: Option<i64>,
    ) -> PyResult<()> {
        let when = (delay_ms, deliver_at);
        self.add(
            py, topic, value, key, partition, headers, timestamp, None, when,
        )
    }

    /// Adds the positions of `consumer` (what its `commit()` would commit
    /// now) for its group: they are committed with the records, and only
    /// then (Kafka's `sendOffsetsToTransaction`).
    ///
    /// Args:
    ///     consumer: A `Consumer` with a `group_id`.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The consumer has no group, or the
    ///         transaction is already committed or aborted.
    ///     mqlite.Closed: The consumer, producer or broker is closed.
    fn send_offsets(&self, py: Python<'_>, consumer: &Bound<'_, Consumer>) -> PyResult<()> {
        self.with(py, |t| consumer.get().send_offsets_into(py, t))
    }

    /// Adds offsets to commit for consumer group `group` with the
    /// transaction (as `Consumer.commit(offsets=...)` takes them).
    ///
    /// Args:
    ///     group: The consumer group.
    ///     offsets: A list of `(topic, partition, offset)` or
    ///         `(topic, partition, offset, metadata)` tuples, or of objects
    ///         with `.topic`, `.partition` and `.offset`; `offset` is the
    ///         next one to read. A later entry for the same partition
    ///         replaces an earlier one. All or nothing.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic, mqlite.UnknownPartition: No such partition.
    ///     mqlite.OffsetOutOfRange: An offset past the partition's end.
    ///     mqlite.InvalidArgument: An empty group, metadata too long, or
    ///         the transaction already committed or aborted.
    ///     TypeError: `offsets` has the wrong shape.
    fn send_offsets_to(
        &self,
        py: Python<'_>,
        group: &str,
        offsets: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.add_offsets(py, group, offsets)
    }

    /// Commits: every record and offset becomes visible together, or, on
    /// an error, none does. With `acks="all"` it is on disk when this
    /// returns. Releases the GIL while it writes. Then runs the
    /// `on_delivery` callbacks of records sent with `Producer.produce()`
    /// (in send order).
    ///
    /// Returns:
    ///     list[RecordMetadata]: Where each record was written, in the
    ///     order they were sent.
    ///
    /// Raises:
    ///     mqlite.ProducerFenced: A newer producer took the transactional
    ///         id.
    ///     mqlite.Timeout: Open longer than `transaction_timeout_ms`.
    ///     mqlite.TransactionTooLarge: Its part in one partition is larger
    ///         than a segment.
    ///     mqlite.InvalidArgument: Already committed or aborted.
    ///     mqlite.Closed, mqlite.IoError: As for sends. Nothing is
    ///         written then, and the transaction is over.
    fn commit(&self, py: Python<'_>) -> PyResult<Vec<RecordMetadata>> {
        self.finish_commit(py)
    }

    /// Aborts: nothing of the transaction is written.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: Already committed or aborted.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.finish_abort(py)
    }

    /// bool: Whether it was committed or aborted.
    #[getter]
    fn done(&self, py: Python<'_>) -> bool {
        self.is_done(py)
    }

    /// The number of records added so far (0 once it is over).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.check_forked(py)?;
        Ok(self.read(py).as_ref().map_or(0, mqlite::Transaction::len))
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (exc_type, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if self.is_done(py) {
            return Ok(false);
        }
        if exc_type.is_some_and(|e| !e.is_none()) {
            // The block's exception goes on; an abort cannot fail here but
            // for a race with another thread ending it.
            let _ = self.finish_abort(py);
            return Ok(false);
        }
        self.finish_commit(py)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        if self.inner.forked() {
            return "<mqlite.Transaction of the parent process>".to_owned();
        }
        match &*self.read(py) {
            Some(t) => format!("<mqlite.Transaction open, {} records>", t.len()),
            None => "<mqlite.Transaction done>".to_owned(),
        }
    }
}

/// The producer's open transaction (`begin_transaction()` ...
/// `commit_transaction()`).
impl Producer {
    /// The open transaction, if any.
    pub(crate) fn open_transaction(&self, py: Python<'_>) -> Option<Py<Transaction>> {
        // A producer without a transactional id (the usual send path) takes
        // no lock here.
        self.engine().transactional_id()?;
        // Cloned out first: `is_done` waits without the GIL, which must
        // not happen while this mutex is held.
        let tx = lock(&self.txn).as_ref().map(|t| t.clone_ref(py))?;
        (!tx.get().is_done(py)).then_some(tx)
    }

    /// The open transaction, or `InvalidArgument`.
    pub(crate) fn require_transaction(&self, py: Python<'_>) -> PyResult<Py<Transaction>> {
        self.check_open(py)?;
        self.open_transaction(py)
            .ok_or_else(|| invalid_argument(py, "no transaction is open (begin_transaction())"))
    }

    /// Forgets `t` once it is committed or aborted.
    pub(crate) fn forget_transaction(&self, t: &Transaction) {
        let mut slot = lock(&self.txn);
        if slot.as_ref().is_some_and(|p| std::ptr::eq(p.get(), t)) {
            *slot = None;
        }
    }
}
