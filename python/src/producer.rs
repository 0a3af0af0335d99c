//! `mqlite.Producer`, `mqlite.RecordMetadata` and `mqlite.ProducerStats`
//! (keys, values and headers become bytes in `data.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::data::add_delivery_time;
pub(crate) use crate::data::{data, headers, Data};

use crate::broker::Broker;
use crate::callback::{self, Delivery, Event, PyInterceptor};
use crate::data::{items, per_record, Fields};
use crate::error::{closed, invalid_argument, to_py, IntoPy};
use crate::fork::Local;
use crate::transaction::Transaction;
use crate::util::lock;
use crate::util::{arg_u32, arg_u64};

/// Longest wait without the GIL before checking for signals (Ctrl-C).
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Where a record was written, as returned by `Producer.send()` and given to
/// `on_delivery` callbacks.
///
/// Attributes:
///     topic (str): The topic.
///     partition (int): The partition.
///     offset (int | None): The record's offset in the partition; None when
///         unknown: with `acks=0`, or for a duplicate whose original is
///         older than the producer's `dedup_window`.
///     timestamp (int): The record's timestamp, ms since the Unix epoch.
///     duplicate (bool): The record carried a sequence already written by
///         this producer, so it was not written again; `offset` is the
///         original's (when known). Not an error.
#[pyclass(frozen, module = "mqlite")]
pub struct RecordMetadata {
    topic: Arc<str>,
    /// int: The partition.
    #[pyo3(get)]
    partition: u32,
    /// int | None: The record's offset; None when unknown (`acks=0`, or a duplicate older than the
    /// `dedup_window`).
    #[pyo3(get)]
    offset: Option<u64>,
    /// int: The record's timestamp, ms since the Unix epoch.
    #[pyo3(get)]
    timestamp: i64,
    /// bool: The record's sequence was already written; `offset` is the original's.
    #[pyo3(get)]
    duplicate: bool,
}

impl From<mqlite::RecordMetadata> for RecordMetadata {
    fn from(md: mqlite::RecordMetadata) -> Self {
        RecordMetadata {
            offset: md.known_offset(),
            topic: md.topic,
            partition: md.partition,
            timestamp: md.timestamp,
            duplicate: md.duplicate,
        }
    }
}

#[pymethods]
impl RecordMetadata {
    /// str: The topic.
    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    /// str | None: The record's unique id, `"<topic>:<partition>:<offset>"`
    /// (what `Message.id` of the record reads); None when the offset is
    /// unknown.
    #[getter]
    fn id(&self) -> Option<String> {
        self.offset
            .map(|o| mqlite::MessageId::new(&*self.topic, self.partition, o).to_string())
    }

    fn __repr__(&self) -> String {
        let offset = self
            .offset
            .map_or_else(|| "None".to_owned(), |o| o.to_string());
        let dup = if self.duplicate {
            ", duplicate=True"
        } else {
            ""
        };
        format!(
            "RecordMetadata(topic='{}', partition={}, offset={offset}, timestamp={}{dup})",
            self.topic, self.partition, self.timestamp
        )
    }
}

/// Counters of what a producer did, as returned by `Producer.stats()`.
///
/// Attributes:
///     records (int): Records written.
///     bytes (int): Bytes of batches written (headers included, after
///         compression).
///     batches (int): Batches written.
///     errors (int): Records that failed.
///     duplicates (int): Records dropped as duplicates (by sequence).
///     buffered_bytes (int): Bytes held now: in unsent batches and awaiting
///         `acks="all"` flushes.
///     peak_buffered_bytes (int): The most bytes ever held at once (at most
///         `buffer_memory`).
///     average_batch_records (float): Records per batch.
///     average_batch_bytes (float): Bytes per batch.
///     retries (int): Sends of key-less records tried again on another
///         partition after a partition fault.
///     avoided_partitions (int): Times a partition was put on the avoid
///         list after a fault (see `fault_backoff_ms`).
#[pyclass(frozen, get_all, module = "mqlite")]
pub struct ProducerStats {
    /// int: Records written.
    records: u64,
    /// int: Bytes of batches written (headers included, after compression).
    bytes: u64,
    /// int: Batches written.
    batches: u64,
    /// int: Records that failed.
    errors: u64,
    /// int: Records dropped as duplicates (by sequence).
    duplicates: u64,
    /// int: Bytes held now: in unsent batches and awaiting `acks="all"` flushes.
    buffered_bytes: u64,
    /// int: The most bytes ever held at once (at most `buffer_memory`).
    peak_buffered_bytes: u64,
    /// float: Records per batch.
    average_batch_records: f64,
    /// float: Bytes per batch.
    average_batch_bytes: f64,
    /// int: Sends of key-less records tried again on another partition
    /// after a partition fault.
    retries: u64,
    /// int: Times a partition was put on the avoid list after a fault.
    avoided_partitions: u64,
}

#[pymethods]
impl ProducerStats {
    fn __repr__(&self) -> String {
        format!(
            "ProducerStats(records={}, bytes={}, batches={}, errors={}, duplicates={}, \
             buffered_bytes={}, peak_buffered_bytes={}, average_batch_records={:.1}, \
             average_batch_bytes={:.1}, retries={}, avoided_partitions={})",
            self.records,
            self.bytes,
            self.batches,
            self.errors,
            self.duplicates,
            self.buffered_bytes,
            self.peak_buffered_bytes,
            self.average_batch_records,
            self.average_batch_bytes,
            self.retries,
            self.avoided_partitions
        )
    }
}

impl From<mqlite::ProducerStats> for ProducerStats {
    fn from(s: mqlite::ProducerStats) -> Self {
        ProducerStats {
            records: s.records,
            bytes: s.bytes,
            batches: s.batches,
            errors: s.errors,
            duplicates: s.duplicates,
            buffered_bytes: s.buffered_bytes,
            peak_buffered_bytes: s.peak_buffered_bytes,
            average_batch_records: s.average_batch_records(),
            average_batch_bytes: s.average_batch_bytes(),
            retries: s.retries,
            avoided_partitions: s.avoided_partitions,
        }
    }
}

/// `compression` from a codec name.
fn parse_compression(py: Python<'_>, name: Option<&str>) -> PyResult<mqlite::Compression> {
    match name {
        None => Ok(mqlite::Compression::None),
        Some(s) => s.parse().py_err(py),
    }
}

/// `partitioner` from a name or a callable.
fn parse_partitioner(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<mqlite::Partitioner> {
    if let Ok(s) = obj.cast::<PyString>() {
        return s.to_str()?.parse().py_err(py);
    }
    if obj.is_callable() {
        return Ok(callback::partitioner(obj.clone().unbind()));
    }
    Err(PyTypeError::new_err(format!(
        "partitioner must be \"sticky\", \"round_robin\" or a callable, not {}",
        obj.get_type().name()?
    )))
}

/// A non-negative count or size argument.
fn arg_usize(py: Python<'_>, name: &str, v: i64) -> PyResult<usize> {
    usize::try_from(v)
        .map_err(|_| invalid_argument(py, format!("{name} must not be negative, got {v}")))
}

/// The arguments of `Broker.producer()`.
pub(crate) struct Options<'a, 'py> {
    pub name: Option<String>,
    pub idempotent: bool,
    pub acks: mqlite::Acks,
    pub linger_ms: i64,
    pub batch_size: i64,
    pub buffer_memory: i64,
    pub max_block_ms: i64,
    pub compression: Option<&'a str>,
    pub partitioner: Option<&'a Bound<'py, PyAny>>,
    pub dedup_window: i64,
    pub strict_sequences: bool,
    pub interceptors: Option<&'a Bound<'py, PyAny>>,
    // Retries, fault avoidance and the delivery timeout.
    pub retries: i64,
    pub fault_backoff_ms: i64,
    pub delivery_timeout_ms: i64,
    // Transactions.
    pub transactional_id: Option<String>,
    pub max_transaction_bytes: i64,
    pub transaction_timeout_ms: i64,
    // Access modes and automatic numbering of named producers.
    pub access_mode: Option<&'a str>,
    pub initial_sequence: Option<i64>,
}

/// Sends records to the topics of one data directory.
///
/// Made by `Broker.producer()`. Safe to share between threads. A context
/// manager: leaving the `with` block closes it.
///
/// Three ways to send: `send()` returns once the record is written (as
/// durable as `acks` asks) with its `RecordMetadata`; `produce()` queues it
/// and reports to an `on_delivery(err, msg)` callback later; `send_batch()`
/// writes a whole list at once.
///
/// Callbacks (`on_delivery` and interceptors' `on_acknowledgement`) run on
/// a Python thread that calls `poll()`, `flush()` or `close()`, or at the
/// start of `produce()`, `send()` or `send_batch()`, never on the engine's
/// threads; they run one at a time, in send order per partition.
#[pyclass(frozen, module = "mqlite")]
pub struct Producer {
    /// Leaked instead of closed in a forked child (`fork.rs`).
    inner: Local<mqlite::Producer>,
    acks: mqlite::Acks,
    /// Its `send` and `send_batch` wait for the destination (`acks="all"`,
    /// or any acks on a Kafka cluster, where a send waits for the
    /// broker's answer): they release the GIL.
    waits: bool,
    closed: AtomicBool,
    broker: Py<Broker>,
    delivery: Arc<Delivery>,
    /// `buffer_memory`, and whether sends may hold bytes in it (`acks=all`
    /// or `linger_ms`): only then can a send wait for room.
    buffer_memory: usize,
    buffers: bool,
    // Transactions.
    /// The transaction begun by `begin_transaction()` or `transaction()`,
    /// until it is committed or aborted: `send()` and `produce()` add to
    /// it.
    pub(crate) txn: Mutex<Option<Py<Transaction>>>,
}

impl Producer {
    pub(crate) fn open(broker: &Bound<'_, Broker>, o: Options<'_, '_>) -> PyResult<Self> {
        let py = broker.py();
        let mut config = mqlite::ProducerConfig::default()
            .acks(o.acks)
            .idempotent(o.idempotent)
            .linger_ms(arg_u64(py, "linger_ms", o.linger_ms)?)
            .batch_size(arg_usize(py, "batch_size", o.batch_size)?)
            .buffer_memory(arg_usize(py, "buffer_memory", o.buffer_memory)?)
            .max_block_ms(arg_u64(py, "max_block_ms", o.max_block_ms)?)
            .compression(parse_compression(py, o.compression)?)
            .dedup_window(arg_usize(py, "dedup_window", o.dedup_window)?)
            .strict_sequences(o.strict_sequences)
            // Retries, fault avoidance and the delivery timeout.
            .retries(u32::try_from(o.retries).map_err(|_| {
                invalid_argument(
                    py,
                    format!("retries must be 0 to 4294967295, got {}", o.retries),
                )
            })?)
            .fault_backoff_ms(arg_u64(py, "fault_backoff_ms", o.fault_backoff_ms)?)
            .delivery_timeout_ms(arg_u64(py, "delivery_timeout_ms", o.delivery_timeout_ms)?);
        config.name = o.name;
        // Transactions.
        config.transactional_id = o.transactional_id;
        config.max_transaction_bytes =
            arg_usize(py, "max_transaction_bytes", o.max_transaction_bytes)?;
        config.transaction_timeout_ms =
            arg_u64(py, "transaction_timeout_ms", o.transaction_timeout_ms)?;
        if let Some(m) = o.access_mode {
            config.access_mode = m.parse().py_err(py)?;
        }
        config.initial_sequence = o.initial_sequence;
        if let Some(p) = o.partitioner.filter(|p| !p.is_none()) {
            config.partitioner = parse_partitioner(py, p)?;
        }
        let objs: Vec<Py<PyAny>> = match o.interceptors.filter(|i| !i.is_none()) {
            None => Vec::new(),
            Some(list) => {
                if list.is_instance_of::<PyString>() {
                    return Err(PyTypeError::new_err(
                        "interceptors must be a list of objects",
                    ));
                }
                list.try_iter()
                    .map_err(|_| PyTypeError::new_err("interceptors must be a list of objects"))?
                    .map(|i| i.map(Bound::unbind))
                    .collect::<PyResult<_>>()?
            }
        };
        let count = objs.len();
        let delivery = Arc::new(Delivery::new(objs));
        for i in 0..count {
            config
                .interceptors
                .push(Arc::new(PyInterceptor::new(py, &delivery, i)?));
        }
        let buffer_memory = config.buffer_memory;
        let buffers = o.acks == mqlite::Acks::All || config.linger_ms > 0;
        // Without the GIL: a "wait_for_exclusive" producer may wait for
        // one that a Python thread closes.
        let b = broker.get();
        let inner = py.detach(|| b.inner.producer(config)).py_err(py)?;
        Ok(Producer {
            inner: Local::new(inner),
            acks: o.acks,
            waits: o.acks == mqlite::Acks::All || b.inner.cluster().is_some(),
            closed: AtomicBool::new(false),
            broker: broker.clone().unbind(),
            delivery,
            buffer_memory,
            buffers,
            txn: Mutex::new(None),
        })
    }

    /// Fails with `mqlite.Closed` once the producer or its broker is
    /// closed, or in a forked child.
    #[inline]
    /// Records not done yet: in the engine (until its completion queued the
    /// report here) plus the reports not yet run. Read in that order, a
    /// record moving between the two is counted twice rather than missed.
    fn queued(&self) -> usize {
        let engine = self.inner.queued();
        engine + self.delivery.reports()
    }

    pub(crate) fn check_open(&self, py: Python<'_>) -> PyResult<()> {
        if self.inner.forked() {
            return Err(self.broker.get().forked_error(py, "producer"));
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(closed(py, "producer"));
        }
        if self.broker.get().inner.is_closed() {
            return Err(closed(py, "broker"));
        }
        Ok(())
    }

    /// Whether a send of about `need` bytes may wait for room in
    /// `buffer_memory`, so it should release the GIL. Checked per call
    /// instead of releasing always: releasing costs more than the send when
    /// other Python threads are busy.
    #[inline]
    fn may_wait(&self, need: usize) -> bool {
        self.buffers
            && (self.inner.buffered_bytes() as usize).saturating_add(need + 1024)
                > self.buffer_memory / 2
    }

    /// The result of a core call that may have run the custom partitioner:
    /// the partitioner's exception comes first.
    #[allow(clippy::unused_self)]
    fn finish<T>(&self, py: Python<'_>, res: mqlite::Result<T>) -> PyResult<T> {
        if let Some(e) = callback::take_partitioner_error() {
            return Err(e);
        }
        res.py_err(py)
    }
}

#[pymethods]
impl Producer {
    /// Sends one record and returns where it was written.
    ///
    /// With `acks` 1 this returns once the record is in the log and visible
    /// to consumers, without releasing the GIL (it does not wait). With
    /// `acks="all"` it releases the GIL while the record is flushed to disk;
    /// concurrent senders share one flush. With `acks=0` it queues the
    /// record and returns at once (`offset` None).
    ///
    /// A record whose `sequence` this (idempotent) producer already wrote to
    /// the partition is not written again: the metadata has
    /// `duplicate=True` and the original's offset. With `strict_sequences`,
    /// a sequence that skips ahead raises `OutOfOrderSequence` instead.
    ///
    /// Args:
    ///     topic: The topic.
    ///     value: The value: bytes, bytearray, memoryview, str (UTF-8), or
    ///         None for a tombstone.
    ///     key: Optional key, same types. Records with the same key go to the
    ///         same partition (Kafka's murmur2 partitioner).
    ///     partition: Explicit partition; otherwise chosen by the key, or the
    ///         producer's partitioner without one.
    ///     headers: A dict, or a list of (name, value) pairs, names str and
    ///         values bytes or str. Names may repeat in a list.
    ///     timestamp: Create time in ms since the Unix epoch; now if None.
    ///     sequence: The application's own sequence number (0 or more), for
    ///         deduplication of re-sends; needs an idempotent producer. A
    ///         record with a sequence and without key or partition goes to
    ///         partition `sequence % partitions`, where a re-send goes too.
    ///     delay_ms: Deliver the record once this many milliseconds have
    ///         passed: it waits in the internal topic `__delayed` until
    ///         then, and the metadata returned is that of its copy there.
    ///     deliver_at: Or deliver it at this time (ms since the Unix epoch).
    ///
    /// Returns:
    ///     RecordMetadata: Where the record was written.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: No topic of that name.
    ///     mqlite.UnknownPartition: The topic has no such partition.
    ///     mqlite.MessageTooLarge: The record exceeds the topic's
    ///         `max_message_bytes`.
    ///     mqlite.OutOfOrderSequence: With `strict_sequences`, `sequence`
    ///         skips ahead of the partition's next one.
    ///     mqlite.ProducerFenced: A newer producer of the same name exists.
    ///     mqlite.BufferFull: With `acks=0`, no room in `buffer_memory`
    ///         after `max_block_ms`.
    ///     mqlite.InvalidArgument: `partition` or `sequence` is negative, or
    ///         a sequence on a producer that is not idempotent.
    ///     mqlite.Closed: The producer or its broker is closed.
    ///     TypeError: An argument has the wrong type.
    ///     Exception: Whatever a custom partitioner raised.
    #[pyo3(signature = (topic, value, key = None, partition = None, headers = None, timestamp = None, sequence = None, delay_ms = None, deliver_at = None))]
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
        sequence: Option<i64>,
        delay_ms: Option<i64>,
        deliver_at: Option<i64>,
    ) -> PyResult<Option<RecordMetadata>> {
        self.check_open(py)?;
        self.delivery.serve(py, false)?;
        // Transactions.
        if let Some(tx) = self.open_transaction(py) {
            if sequence.is_some() {
                return Err(invalid_argument(
                    py,
                    "records of a transaction take no sequence",
                ));
            }
            let args = (topic, value, key, partition, headers, timestamp);
            let when = (delay_ms, deliver_at);
            tx.get().add(
                py, args.0, args.1, args.2, args.3, args.4, args.5, None, when,
            )?;
            return Ok(None);
        }
        let mut f = Fields::new(py, value, key, partition, headers)?;
        add_delivery_time(py, &mut f.headers, delay_ms, deliver_at)?;
        let record = f.record(topic, timestamp, sequence);
        let res = if self.waits || (self.acks == mqlite::Acks::Zero && self.may_wait(f.size())) {
            py.detach(|| self.inner.send_borrowed(&record))
        } else {
            self.inner.send_borrowed(&record)
        };
        self.finish(py, res)
            .map(|md| Some(RecordMetadata::from(md)))
    }

    /// Queues one record and returns at once; `on_delivery` hears how it
    /// went.
    ///
    /// The record joins its partition's batch, written when the batch fills
    /// (`batch_size`), after `linger_ms`, or at `flush()` (at once with the
    /// default `linger_ms=0`). The GIL is kept unless the send may have to
    /// wait for room in `buffer_memory`.
    ///
    /// Args:
    ///     topic: The topic.
    ///     value: As for `send()`.
    ///     key: As for `send()`.
    ///     partition: As for `send()`.
    ///     headers: As for `send()`.
    ///     timestamp: As for `send()`.
    ///     sequence: As for `send()`.
    ///     delay_ms: As for `send()`.
    ///     deliver_at: As for `send()`.
    ///     on_delivery: Called as `on_delivery(err, msg)` (confluent-kafka's
    ///         order) once the record is as durable as `acks` asks: `err`
    ///         None and `msg` its `RecordMetadata`, or `err` an
    ///         `mqlite.Error` and `msg` None. It runs on a thread calling
    ///         `poll()`, `flush()` or `close()` (or at the start of the next
    ///         send), once per record, in send order per partition. What it
    ///         raises propagates out of that call.
    ///
    /// Raises:
    ///     mqlite.BufferFull: No room in `buffer_memory` after
    ///         `max_block_ms`.
    ///     mqlite.UnknownTopic, mqlite.UnknownPartition,
    ///         mqlite.MessageTooLarge, mqlite.ProducerFenced,
    ///         mqlite.InvalidArgument, mqlite.Closed, TypeError: As for
    ///         `send()`; the record is not queued and `on_delivery` is not
    ///         called.
    ///     Exception: What a custom partitioner raised, or what an earlier
    ///         record's `on_delivery` raised when served here (this record
    ///         is then not queued).
    #[pyo3(signature = (topic, value, key = None, partition = None, headers = None, timestamp = None, sequence = None, on_delivery = None, delay_ms = None, deliver_at = None))]
    #[allow(clippy::too_many_arguments)] // one per argument of the Python signature
    fn produce(
        &self,
        py: Python<'_>,
        topic: &str,
        value: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        partition: Option<i64>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<i64>,
        sequence: Option<i64>,
        on_delivery: Option<&Bound<'_, PyAny>>,
        delay_ms: Option<i64>,
        deliver_at: Option<i64>,
    ) -> PyResult<()> {
        self.check_open(py)?;
        self.delivery.serve(py, false)?;
        // Transactions.
        if let Some(tx) = self.open_transaction(py) {
            if sequence.is_some() {
                return Err(invalid_argument(
                    py,
                    "records of a transaction take no sequence",
                ));
            }
            return tx.get().add(
                py,
                topic,
                value,
                key,
                partition,
                headers,
                timestamp,
                on_delivery,
                (delay_ms, deliver_at),
            );
        }
        let mut f = Fields::new(py, value, key, partition, headers)?;
        add_delivery_time(py, &mut f.headers, delay_ms, deliver_at)?;
        let callback: mqlite::DeliveryCallback = match on_delivery.filter(|c| !c.is_none()) {
            Some(c) => {
                if !c.is_callable() {
                    return Err(PyTypeError::new_err(format!(
                        "on_delivery must be callable, not {}",
                        c.get_type().name()?
                    )));
                }
                let callback = c.clone().unbind();
                let delivery = Arc::clone(&self.delivery);
                // Runs on the thread completing the batch: only queues.
                Box::new(move |result| delivery.push(Event::Delivered { callback, result }))
            }
            None => Box::new(|_| {}),
        };
        let record = f.record(topic, timestamp, sequence);
        let res = if self.may_wait(f.size()) {
            py.detach(|| self.inner.send_async_borrowed(&record, callback))
        } else {
            self.inner.send_async_borrowed(&record, callback)
        };
        self.finish(py, res)
    }

    /// Sends many records to one topic in one call.
    ///
    /// The records of each partition become as few batches as fit in the
    /// topic's `max_message_bytes`; much faster than a loop of `send()`.
    /// Values are borrowed from `bytes` and `str` without copying. Releases
    /// the GIL only with `acks="all"` (while it waits for the flush).
    ///
    /// Args:
    ///     topic: The topic of every record.
    ///     values: A list (or tuple, or iterable) of values: bytes,
    ///         bytearray, memoryview, str, or None for tombstones.
    ///     keys: None, or a list of keys (same types, or None) as long as
    ///         `values`.
    ///     partition: One explicit partition for every record; otherwise
    ///         each is chosen by its key or the producer's partitioner.
    ///     headers: Headers of every record (a dict or a list of pairs).
    ///     timestamps: None (now), one int for every record, or a list of
    ///         ints (or None) as long as `values`.
    ///     sequences: None, the int sequence of the first record (the others
    ///         get the next ones), or a list as long as `values`. Records
    ///         whose sequence was already written are skipped as duplicates.
    ///     delay_ms: Deliver every record once this many milliseconds have
    ///         passed (as for `send()`).
    ///     deliver_at: Or at this time (ms since the Unix epoch).
    ///
    /// Returns:
    ///     int: The number of records written, duplicates not counted.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: A list has the wrong length, or a value
    ///         is out of range.
    ///     mqlite.Error: As for `send()`. Nothing is written when the
    ///         records cannot be routed (unknown topic or partition, bad
    ///         sequence); an error while writing (e.g. `MessageTooLarge`)
    ///         leaves the batches before it written: the exception's
    ///         `written` attribute says how many records.
    ///     TypeError: An argument has the wrong type.
    #[pyo3(signature = (topic, values, keys = None, partition = None, headers = None, timestamps = None, sequences = None, delay_ms = None, deliver_at = None))]
    #[allow(clippy::too_many_arguments)] // one per argument of the Python signature
    fn send_batch(
        &self,
        py: Python<'_>,
        topic: &str,
        values: &Bound<'_, PyAny>,
        keys: Option<&Bound<'_, PyAny>>,
        partition: Option<i64>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamps: Option<&Bound<'_, PyAny>>,
        sequences: Option<&Bound<'_, PyAny>>,
        delay_ms: Option<i64>,
        deliver_at: Option<i64>,
    ) -> PyResult<usize> {
        self.check_open(py)?;
        self.delivery.serve(py, false)?;
        // Transactions.
        if self.open_transaction(py).is_some() {
            return Err(invalid_argument(
                py,
                "send_batch() is not available while a transaction is open: use send()",
            ));
        }
        // Owned references keep every item alive while its bytes are
        // borrowed, even if Python code (a partitioner) changes the list.
        let vals = items(values, "values")?;
        let n = vals.len();
        let mut value_data: Vec<Option<Data<'_>>> = Vec::with_capacity(n);
        for v in &vals {
            value_data.push(data(v, "value")?);
        }
        let key_objs = match keys.filter(|k| !k.is_none()) {
            Some(k) => {
                let k = items(k, "keys")?;
                if k.len() != n {
                    return Err(invalid_argument(
                        py,
                        format!("keys has {} items for {n} values", k.len()),
                    ));
                }
                Some(k)
            }
            None => None,
        };
        let key_data: Option<Vec<Option<Data<'_>>>> = key_objs
            .as_ref()
            .map(|ks| ks.iter().map(|k| data(k, "key")).collect())
            .transpose()?;
        let partition = partition.map(|p| arg_u32(py, "partition", p)).transpose()?;
        let mut headers = self::headers(headers)?;
        add_delivery_time(py, &mut headers, delay_ms, deliver_at)?;
        let timestamps = per_record(py, timestamps, n, "timestamps", false)?;
        let sequences = per_record(py, sequences, n, "sequences", true)?;
        let mut records = Vec::with_capacity(n);
        for (i, v) in value_data.iter().enumerate() {
            records.push(mqlite::BorrowedRecord {
                topic,
                partition,
                key: key_data
                    .as_ref()
                    .and_then(|k| k[i].as_ref().map(Data::as_slice)),
                value: v.as_ref().map(Data::as_slice),
                headers: &headers,
                timestamp: timestamps.as_ref().and_then(|t| t[i]),
                sequence: sequences.as_ref().and_then(|s| s[i]),
            });
        }
        let mut written = 0usize;
        let mut count = |_: usize, md: &mqlite::RecordMetadata| {
            if !md.duplicate {
                written += 1;
            }
        };
        let res = if self.waits {
            py.detach(|| self.inner.send_batch_with(&records, &mut count))
        } else {
            self.inner.send_batch_with(&records, &mut count)
        };
        match self.finish(py, res) {
            Ok(()) => Ok(written),
            Err(e) => {
                if e.is_instance_of::<crate::error::Error>(py) {
                    let _ = e.value(py).setattr("written", written);
                }
                Err(e)
            }
        }
    }

    /// Runs the callbacks of completed records (`on_delivery`, interceptors'
    /// `on_acknowledgement`) on this thread.
    ///
    /// Args:
    ///     timeout: Seconds to wait for a first completion when none is
    ///         ready (default 0: do not wait; None: no limit). Releases the
    ///         GIL while it waits.
    ///
    /// Returns:
    ///     int: The number of callbacks served.
    ///
    /// Raises:
    ///     mqlite.Closed: The producer is closed.
    ///     mqlite.InvalidArgument: `timeout` is negative or NaN.
    ///     Exception: What an `on_delivery` callback raised (the callbacks
    ///         after it stay queued for the next call).
    #[pyo3(signature = (timeout = 0.0))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        let timeout = crate::util::timeout(py, timeout)?;
        self.check_open(py)?;
        let served = self.delivery.serve(py, false)?;
        if served > 0 || timeout == Some(Duration::ZERO) {
            return Ok(served);
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let slice = match deadline {
                None => WAIT_SLICE,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(0);
                    }
                    (d - now).min(WAIT_SLICE)
                }
            };
            self.delivery.wait(py, slice);
            let served = self.delivery.serve(py, true)?;
            if served > 0 {
                return Ok(served);
            }
            py.check_signals()?;
            self.check_open(py)?;
        }
    }

    /// Writes every queued record, waits until all are as durable as `acks`
    /// asks, and runs their callbacks (on this thread). Releases the GIL
    /// while it waits.
    ///
    /// As in confluent-kafka, a flush that runs out of time is not an
    /// error: it returns how many records are still queued (they stay
    /// queued and are delivered later, by a later `flush()`, `poll()` or
    /// `close()`).
    ///
    /// Args:
    ///     timeout: Most seconds to wait (None: no limit).
    ///
    /// Returns:
    ///     int: The number of records still queued, as `len(producer)`: 0
    ///         when every record was delivered and its callback ran (unless
    ///         other threads produced meanwhile).
    ///
    /// Raises:
    ///     mqlite.Closed: The producer or its broker is closed.
    ///     mqlite.InvalidArgument: `timeout` is negative.
    ///     Exception: What an `on_delivery` callback raised.
    #[pyo3(signature = (timeout = None))]
    fn flush(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        let timeout = crate::util::timeout(py, timeout)?;
        self.check_open(py)?;
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let slice = match deadline {
                None => WAIT_SLICE,
                Some(d) => d.saturating_duration_since(Instant::now()).min(WAIT_SLICE),
            };
            match py.detach(|| self.inner.flush_timeout(slice)) {
                Ok(()) => break,
                Err(mqlite::Error::Timeout(_)) => {
                    self.delivery.serve(py, false)?;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(self.queued());
                    }
                    py.check_signals()?;
                }
                Err(e) => {
                    self.delivery.serve(py, false)?;
                    return Err(to_py(py, e));
                }
            }
        }
        self.delivery.serve(py, true)?;
        Ok(self.queued())
    }

    /// The number of records sent with `produce()` that are not done yet:
    /// queued in a batch, being written, waiting for the flush of
    /// `acks="all"`, or whose `on_delivery` callback has not run
    /// (confluent-kafka's `len(producer)`). `send()` and `send_batch()` are
    /// done when they return and never count. 0 after `close()`, which
    /// delivers everything.
    ///
    /// Raises:
    ///     mqlite.Closed: In a process forked from the one that made the
    ///         producer.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        if self.inner.forked() {
            return Err(self.broker.get().forked_error(py, "producer"));
        }
        Ok(self.queued())
    }

    /// Always True: a producer is true even when nothing is queued (its
    /// `len()` is 0), so `if producer:` tests for a producer, not for queued
    /// records.
    #[allow(clippy::unused_self)]
    fn __bool__(&self) -> bool {
        true
    }

    /// The highest sequence this producer wrote to any partition, or None.
    ///
    /// For a named producer this survives restarts: resume the
    /// application's source after it, re-sending with the same sequences;
    /// whatever was already written comes back as `duplicate=True`.
    ///
    /// Returns:
    ///     int | None: The sequence, or None when none was written yet.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The producer is not idempotent.
    ///     mqlite.Closed: The producer or its broker is closed.
    fn last_sequence(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        self.check_open(py)?;
        py.detach(|| self.inner.last_sequence()).py_err(py)
    }

    /// The first sequence this producer has not written to any partition.
    ///
    /// Where an application numbering its records 0, 1, 2, ... resumes
    /// after a crash, re-sending with the same sequences and to the same
    /// partitions (by key or explicit partition). Unlike
    /// `last_sequence() + 1` it is safe after asynchronous sends
    /// (`produce` with callbacks): a higher sequence may have been written
    /// to one partition while lower ones queued for another were lost.
    /// When the application skipped sequences, this is the first one
    /// skipped.
    ///
    /// Returns:
    ///     int: The sequence (0 when none was written yet).
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The producer is not idempotent.
    ///     mqlite.Closed: The producer or its broker is closed.
    fn next_sequence(&self, py: Python<'_>) -> PyResult<i64> {
        self.check_open(py)?;
        py.detach(|| self.inner.next_sequence()).py_err(py)
    }

    /// The sequence the next record sent without one gets, when the
    /// producer numbers its records (`initial_sequence`); None otherwise.
    ///
    /// Raises:
    ///     mqlite.Closed: The producer or its broker is closed.
    fn next_auto_sequence(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        self.check_open(py)?;
        Ok(self.inner.next_auto_sequence())
    }

    /// Counters of what the producer did so far (also once closed).
    ///
    /// Returns:
    ///     ProducerStats: A snapshot taken now.
    ///
    /// Raises:
    ///     mqlite.Closed: In a process forked from the one that made the
    ///         producer.
    fn stats(&self, py: Python<'_>) -> PyResult<ProducerStats> {
        if self.inner.forked() {
            return Err(self.broker.get().forked_error(py, "producer"));
        }
        Ok(ProducerStats::from(self.inner.stats()))
    }

    /// Flushes and closes the producer, running every remaining callback;
    /// later calls raise `mqlite.Closed`.
    ///
    /// Closing twice, or after the broker was closed, is fine. A producer
    /// garbage-collected without `close()` is flushed, but callbacks still
    /// queued then are dropped without running. In a process forked from
    /// the one that made the producer this does nothing.
    ///
    /// Raises:
    ///     mqlite.IoError: The final flush failed.
    ///     Exception: The first exception an `on_delivery` callback raised
    ///         (the other callbacks still ran; the producer is closed
    ///         anyway).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.inner.forked() || self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Transactions: an open one is aborted.
        let open = lock(&self.txn).take();
        if let Some(tx) = open {
            let _ = tx.get().finish_abort(py);
        }
        let res = match py.detach(|| self.inner.close()) {
            Err(mqlite::Error::Closed(_)) => Ok(()),
            r => r.py_err(py),
        };
        // Every remaining callback runs, even after one raised; the first
        // exception is raised at the end.
        let mut first = None;
        loop {
            match self.delivery.serve(py, true) {
                Ok(_) if !self.delivery.pending() => break,
                Ok(_) => {}
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => res,
        }
    }

    /// bool: Whether the producer, or the broker it came from, is closed
    /// (always True in a forked child).
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.broker.get().is_closed()
    }

    /// int | str: The durability level: 0, 1, or "all".
    #[getter]
    fn acks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.acks {
            mqlite::Acks::Zero => 0i32.into_pyobject(py)?.into_any(),
            mqlite::Acks::One => 1i32.into_pyobject(py)?.into_any(),
            mqlite::Acks::All => "all".into_pyobject(py)?.into_any(),
        })
    }

    /// str | None: The durable name, or None for an anonymous producer.
    #[getter]
    fn name(&self) -> Option<&str> {
        self.inner.name()
    }

    /// int | None: The producer id, or None when not idempotent. A named
    /// producer keeps its id across restarts.
    #[getter]
    fn producer_id(&self) -> Option<i64> {
        Some(self.inner.producer_id()).filter(|&id| id >= 0)
    }

    /// int | None: The epoch, or None when not idempotent. It goes up each
    /// time a producer of the same name is made; older ones are fenced.
    #[getter]
    fn epoch(&self) -> Option<i16> {
        Some(self.inner.epoch()).filter(|&e| e >= 0)
    }

    /// int: Bytes the producer holds now (unsent batches and records
    /// awaiting their `acks="all"` flush): `stats().buffered_bytes`,
    /// without taking the other counters.
    #[getter]
    fn buffered_bytes(&self) -> u64 {
        self.inner.buffered_bytes()
    }

    /// bool: Whether the producer is idempotent.
    #[getter]
    fn idempotent(&self) -> bool {
        self.inner.config().idempotent
    }

    /// str: The codec of every batch: "none", "gzip", "snappy", "lz4" or
    /// "zstd".
    #[getter]
    fn compression(&self) -> &'static str {
        self.inner.config().compression.name()
    }

    /// str: The partitioner: "sticky", "round_robin" or "custom".
    #[getter]
    fn partitioner(&self) -> &'static str {
        self.inner.config().partitioner.name()
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().check_open(slf.py())?;
        Ok(slf)
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let acks = match self.acks {
            mqlite::Acks::Zero => "0",
            mqlite::Acks::One => "1",
            mqlite::Acks::All => "'all'",
        };
        let state = if self.closed() { "closed" } else { "open" };
        match self.inner.name() {
            Some(n) => format!("<mqlite.Producer name={n:?} acks={acks} {state}>"),
            None => format!("<mqlite.Producer acks={acks} {state}>"),
        }
    }

    // Transactions.

    /// str | None: The transactional id, or None.
    #[getter]
    fn transactional_id(&self) -> Option<&str> {
        self.inner.transactional_id()
    }

    /// Begins a transaction and returns it (see `Transaction`): a context
    /// manager that commits when its block ends normally and aborts when
    /// it ends by an exception. Until it is committed or aborted, this
    /// producer's `send()` and `produce()` add to it too. One transaction
    /// at a time per producer.
    ///
    /// Returns:
    ///     Transaction: The open transaction.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The producer has no `transactional_id`,
    ///         or a transaction of it is open.
    ///     mqlite.ProducerFenced: A newer producer took the transactional
    ///         id.
    ///     mqlite.Closed: The producer or its broker is closed.
    fn transaction(slf: &Bound<'_, Self>) -> PyResult<Py<Transaction>> {
        let py = slf.py();
        let tx = Py::new(py, Transaction::begin(slf)?)?;
        *lock(&slf.get().txn) = Some(tx.clone_ref(py));
        Ok(tx)
    }

    /// confluent-kafka's `init_transactions()`: checks that the producer
    /// has a `transactional_id`. Fencing older producers with the same id
    /// already happened when this one was made; nothing else to do.
    ///
    /// Args:
    ///     timeout: Ignored (nothing waits).
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: The producer has no `transactional_id`.
    ///     mqlite.Closed: The producer or its broker is closed.
    #[pyo3(signature = (timeout = None))]
    fn init_transactions(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        crate::util::timeout(py, timeout)?;
        self.check_open(py)?;
        if self.inner.transactional_id().is_none() {
            return Err(invalid_argument(
                py,
                "transactions need a producer with a transactional_id",
            ));
        }
        Ok(())
    }

    /// confluent-kafka's `begin_transaction()`: as `transaction()`, kept by
    /// the producer for `send_offsets_to_transaction()`,
    /// `commit_transaction()` and `abort_transaction()`.
    ///
    /// Raises:
    ///     As `transaction()`.
    fn begin_transaction(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::transaction(slf).map(drop)
    }

    /// confluent-kafka's `send_offsets_to_transaction()`: adds consumer
    /// offsets to the open transaction, committed with it.
    ///
    /// Args:
    ///     offsets: A list of `(topic, partition, offset)` tuples (a
    ///         metadata string may follow), or of objects with `.topic`,
    ///         `.partition` and `.offset` (confluent-kafka's
    ///         `TopicPartition`); `offset` is the next one to read.
    ///     group_metadata: The consumer group: what
    ///         `Consumer.consumer_group_metadata()` returns, or its group
    ///         id.
    ///     timeout: Ignored (nothing waits).
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: No transaction is open; as
    ///         `Transaction.send_offsets_to()`.
    #[pyo3(signature = (offsets, group_metadata, timeout = None))]
    fn send_offsets_to_transaction(
        &self,
        py: Python<'_>,
        offsets: &Bound<'_, PyAny>,
        group_metadata: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        crate::util::timeout(py, timeout)?;
        let tx = self.require_transaction(py)?;
        let group = crate::transaction::group_of(group_metadata)?;
        tx.get().add_offsets(py, &group, offsets)
    }

    /// confluent-kafka's `commit_transaction()`: commits the open
    /// transaction (see `Transaction.commit()`).
    ///
    /// Args:
    ///     timeout: Ignored (the commit is local).
    ///
    /// Returns:
    ///     list[RecordMetadata]: Where each record was written.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: No transaction is open; as
    ///         `Transaction.commit()`.
    #[pyo3(signature = (timeout = None))]
    fn commit_transaction(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<RecordMetadata>> {
        crate::util::timeout(py, timeout)?;
        let tx = self.require_transaction(py)?;
        tx.get().finish_commit(py)
    }

    /// confluent-kafka's `abort_transaction()`: aborts the open
    /// transaction; nothing of it is written.
    ///
    /// Args:
    ///     timeout: Ignored.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: No transaction is open.
    #[pyo3(signature = (timeout = None))]
    fn abort_transaction(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        crate::util::timeout(py, timeout)?;
        let tx = self.require_transaction(py)?;
        tx.get().finish_abort(py)
    }
}
// Transactions.
impl Producer {
    /// The engine's producer.
    pub(crate) fn engine(&self) -> &mqlite::Producer {
        &self.inner
    }
}
