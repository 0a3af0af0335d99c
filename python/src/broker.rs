//! `mqlite.Broker` and the topic descriptions it returns.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString, PyTuple};

use crate::consumer::{topic_partitions, Consumer, NewConsumer};
use crate::error::{closed, forked, invalid_argument, invalid_config, IntoPy};
use crate::fork::{self, Local};
use crate::info::{GroupInfo, TopicInfo};
use crate::producer::{Options, Producer};
use crate::share_consumer::{topic_names, NewShareConsumer, ShareConsumer};
use crate::util::{arg_u32, arg_u64, config_u32, config_u64};

/// An open data directory: the entry point of the engine.
///
/// Made by `mqlite.open(path)`. Holds the directory until `close()` (or the
/// end of a `with` block, or garbage collection): alone by default, or
/// shared with other processes (`mode`). Producers and
/// consumers made from it keep it alive, and fail with `mqlite.Closed` once
/// it is closed.
///
/// Args:
///     path: The data directory (str or os.PathLike); created if missing.
///         Or a `kafka://host:port,...` cluster address: the broker, its
///         producers and consumers are then the cluster's, with the same
///         calls and errors (docs/kafka.md says what differs).
///     prefault: Fault in segment pages in the background before the writer
///         reaches them. Turn off to save memory with many idle topics.
///     file_mode: Unix permission bits of created data files.
///     retention_check_interval_ms: How often a background thread applies
///         retention; 0 turns the thread off (retention then runs on segment
///         roll and on `enforce_retention()`).
///     max_commit_metadata_bytes: Largest metadata string a commit may
///         carry (Kafka's `offset.metadata.max.bytes`); a longer one raises
///         `mqlite.InvalidArgument` and commits nothing.
///     max_open_files: Most descriptors the broker keeps open for its files
///         (like RocksDB's `max_open_files`): active segments and recovery
///         points, in a cache that closes the least recently used and opens
///         a file again when it is needed. At least 1.
///     mode: How processes share the directory: "exclusive" (the
///         default), "shared", or "auto" (shared mode on a local
///         filesystem, exclusive mode on a network or user-space one such
///         as NFS, CIFS, 9p or FUSE). In shared mode any number of
///         processes open the directory at once, and every one of them
///         produces, consumes, joins consumer groups and changes topics; a
///         second `open()` of it in this process shares one engine with
///         the first. In exclusive mode one handle owns the directory.
///         `Broker.mode` says which one was taken. See
///         docs/shared-mode.md.
///     shared: True for shared mode and False for exclusive mode, whatever
///         the filesystem (`mode="shared"` or `mode="exclusive"`).
///     readonly: Never write the directory's logs, offsets, topics or
///         producer state, not even recovery (implies shared mode; like every
///         shared handle it takes the shared-mode lock files): `producer()`,
///         topic changes and commits raise `mqlite.ReadOnly`. For tools
///         looking at a directory an application has open. The directory
///         must exist.
///     auto_create_topics: Create a topic on first use (Kafka's
///         `auto.create.topics.enable`): a send to a missing topic, and a
///         consumer's `subscribe()` or `assign()` naming one (not a
///         pattern), create it with `default_partitions` partitions and the
///         default topic settings. Invalid names still raise
///         `mqlite.InvalidTopicName` and create nothing; a read-only handle
///         never creates (`mqlite.UnknownTopic` as without it).
///     default_partitions: Partitions of a topic created on first use
///         (Kafka's `num.partitions`), 1 to 100000.
///     kafka: librdkafka properties for a cluster address (a dict of str),
///         plus `replication.factor` of the topics `create_topic()` makes
///         and `request.timeout.ms`; a directory ignores them.
///
/// Raises:
///     mqlite.Locked: Another handle holds the directory in the other mode
///         (exclusive against shared), or any handle does in exclusive mode;
///         the message names the holder.
///     mqlite.InvalidArgument: `path` is empty or holds a NUL byte, or
///         `file_mode` or the interval is out of range, or `mode` is not a
///         mode's name or disagrees with `shared`, or `readonly` is set
///         and `path` is not a data directory.
///     mqlite.InvalidConfig: `max_open_files` is 0, or `default_partitions`
///         is out of range, or shared mode was asked for on a network
///         filesystem.
///     mqlite.IoError: The directory cannot be created or read.
///     mqlite.Corrupt: A topic's metadata is unreadable.
///
/// What recovery repairs on open (a damaged or torn log tail cut) is logged
/// as a warning on the `mqlite` logger before the broker is returned, and
/// counted in `topic(name).partitions`.
///
/// A broker belongs to the process that opened it. In a child forked with
/// `os.fork()`, the broker and everything made from it report `closed`,
/// their methods raise `mqlite.Closed` (`close()` does nothing), and the
/// child may open brokers of its own: on another directory, on this one
/// once the parent has closed it, or on this one at once in shared mode
/// when this broker is shared.
#[pyclass(frozen, module = "mqlite")]
pub struct Broker {
    /// Leaked instead of closed in a forked child (`fork.rs`).
    pub(crate) inner: Local<mqlite::Broker>,
    path: String,
    /// The mode the directory is open in.
    mode: mqlite::OpenMode,
    /// The directory lock's entry in `fork::LOCKS`.
    lock_token: Option<u64>,
    /// Closed by `close()`: they hold their share groups open.
    pub(crate) share_consumers: crate::share_consumer::Registry,
}

impl Broker {
    /// Fails with `mqlite.Closed` once closed, or in a forked child.
    #[inline]
    pub(crate) fn check_open(&self, py: Python<'_>) -> PyResult<()> {
        if self.inner.forked() {
            Err(self.forked_error(py, "broker"))
        } else if self.inner.is_closed() {
            Err(closed(py, "broker"))
        } else {
            Ok(())
        }
    }

    /// The error of a `what` of this broker used in a forked child.
    pub(crate) fn forked_error(&self, py: Python<'_>, what: &'static str) -> PyErr {
        forked(py, what, self.inner.owner().pid())
    }

    /// Whether closed, or unusable in a forked child.
    pub(crate) fn is_closed(&self) -> bool {
        self.inner.forked() || self.inner.is_closed()
    }
}

/// `open()`'s mode from its `mode` and `shared` arguments.
fn open_mode(
    py: Python<'_>,
    mode: Option<&str>,
    shared: Option<bool>,
) -> PyResult<mqlite::OpenMode> {
    let named = mode
        .map(str::parse::<mqlite::OpenMode>)
        .transpose()
        .py_err(py)?;
    let forced = shared.map(|on| {
        if on {
            mqlite::OpenMode::Shared
        } else {
            mqlite::OpenMode::Exclusive
        }
    });
    match (named, forced) {
        (Some(m), Some(f)) if m != f => Err(invalid_argument(
            py,
            format!(
                "mode={:?} disagrees with shared={}",
                m.name(),
                f == mqlite::OpenMode::Shared
            ),
        )),
        (m, f) => Ok(f.or(m).unwrap_or(mqlite::Config::default().mode)),
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // The GIL is held (tp_dealloc). The engine's broker closes right
        // after this, as its field is dropped (not in a forked child).
        if let Some(t) = self.lock_token {
            fork::unregister_lock(t);
        }
    }
}

/// `acks` from 0, 1, -1 or "all".
fn parse_acks(py: Python<'_>, acks: &Bound<'_, PyAny>) -> PyResult<mqlite::Acks> {
    if let Ok(s) = acks.cast::<PyString>() {
        let s = s.to_str()?;
        return match s {
            "all" | "-1" => Ok(mqlite::Acks::All),
            "0" => Ok(mqlite::Acks::Zero),
            "1" => Ok(mqlite::Acks::One),
            _ => Err(invalid_argument(
                py,
                format!("acks must be 0, 1, -1 or \"all\", got {s:?}"),
            )),
        };
    }
    if acks.is_instance_of::<PyInt>() && !acks.is_instance_of::<PyBool>() {
        let v: i64 = acks.extract()?;
        let v = i32::try_from(v).unwrap_or(i32::MAX);
        return mqlite::Acks::from_i32(v).py_err(py);
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "acks must be 0, 1, -1 or \"all\", not {}",
        acks.get_type().name()?
    )))
}

#[pymethods]
impl Broker {
    #[new]
    #[pyo3(
        signature = (path, *, prefault = true, file_mode = 0o600, retention_check_interval_ms = 60_000,
                     max_commit_metadata_bytes = mqlite::DEFAULT_MAX_COMMIT_METADATA_BYTES as i64,
                     max_open_files = mqlite::DEFAULT_MAX_OPEN_FILES as i64, mode = None,
                     shared = None, readonly = false, auto_create_topics = false, default_partitions = 1, kafka = None),
        text_signature = "(path, *, prefault=True, file_mode=0o600, retention_check_interval_ms=60000, max_commit_metadata_bytes=4096, max_open_files=256, mode=None, shared=None, readonly=False, auto_create_topics=False, default_partitions=1, kafka=None)"
    )]
    #[allow(clippy::too_many_arguments, clippy::fn_params_excessive_bools)] // the keyword arguments of `open()`
    fn new(
        py: Python<'_>,
        path: PathBuf,
        prefault: bool,
        file_mode: i64,
        retention_check_interval_ms: i64,
        max_commit_metadata_bytes: i64,
        max_open_files: i64,
        mode: Option<&str>,
        shared: Option<bool>,
        readonly: bool,
        auto_create_topics: bool,
        default_partitions: i64,
        kafka: Option<std::collections::BTreeMap<String, String>>,
    ) -> PyResult<Self> {
        if path.as_os_str().is_empty() {
            return Err(invalid_argument(py, "path must not be empty"));
        }
        if path.as_os_str().as_bytes().contains(&0) {
            return Err(invalid_argument(
                py,
                format!(
                    "path must not contain NUL bytes, got {:?}",
                    path.to_string_lossy()
                ),
            ));
        }
        if !(0..=0o7777).contains(&file_mode) {
            return Err(invalid_argument(
                py,
                format!("file_mode must be 0 to 0o7777, got {file_mode:#o}"),
            ));
        }
        let interval = u64::try_from(retention_check_interval_ms).map_err(|_| {
            invalid_argument(
                py,
                format!(
                    "retention_check_interval_ms must not be negative, got {retention_check_interval_ms}"
                ),
            )
        })?;
        let max_metadata = usize::try_from(max_commit_metadata_bytes).map_err(|_| {
            invalid_argument(
                py,
                format!(
                    "max_commit_metadata_bytes must not be negative, got {max_commit_metadata_bytes}"
                ),
            )
        })?;
        let max_open_files = usize::try_from(max_open_files).map_err(|_| {
            invalid_argument(
                py,
                format!("max_open_files must not be negative, got {max_open_files}"),
            )
        })?;
        let mode = open_mode(py, mode, shared)?;
        let config = mqlite::Config::default()
            .mode(mode)
            .prefault(prefault)
            .file_mode(file_mode as u32)
            .retention_check_interval_ms(interval)
            .max_commit_metadata_bytes(max_metadata)
            .max_open_files(max_open_files)
            .readonly(readonly)
            // Topic creation on first use (out of range: checked by open).
            .auto_create_topics(auto_create_topics)
            .default_partitions(u32::try_from(default_partitions).map_err(|_| {
                invalid_config(
                    py,
                    format!("default_partitions must be 1 to 100000, got {default_partitions}"),
                )
            })?);
        let config = kafka
            .unwrap_or_default()
            .into_iter()
            .fold(config, |c, (k, v)| c.kafka_property(k, v));
        // Recovery logs what it repairs: with the level configured now,
        // and delivered to `logging` before the broker is returned.
        crate::log::refresh_level(py);
        let opened = py.detach(|| mqlite::Broker::open(&path, config));
        crate::log::flush(py);
        let inner = opened.py_err(py)?;
        Ok(Broker {
            lock_token: fork::register_lock(&path),
            path: path.to_string_lossy().into_owned(),
            mode: inner.mode(),
            inner: Local::new(inner),
            share_consumers: crate::share_consumer::Registry::default(),
        })
    }

    /// str: The data directory, as given to `open()`.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// str: The mode the directory is open in, "shared" or "exclusive"
    /// (never "auto": the one it took).
    #[getter]
    fn mode(&self) -> &'static str {
        self.mode.name()
    }

    /// bool: Whether `close()` was called (always True in a process forked
    /// from the one that opened the broker).
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// Creates a topic.
    ///
    /// Args:
    ///     name: 1 to 249 characters of ASCII letters, digits, `.`, `_` and
    ///         `-`; not `.` or `..`; not starting with `__`.
    ///     partitions: Number of partitions, 1 to 100,000.
    ///     segment_bytes: Size of each segment file, 4096 to 2 GiB (default
    ///         64 MiB). Lowers `max_message_bytes` to it if needed.
    ///     retention_ms: Delete closed segments whose newest record is older
    ///         than this (default: keep forever).
    ///     retention_bytes: Delete the oldest closed segments while a
    ///         partition holds more than this (default: no limit).
    ///     max_message_bytes: Largest encoded record, 61 bytes of batch header
    ///         included (default 1 MiB, at most `segment_bytes`).
    ///     log_append_time: Stamp records with the time they are appended
    ///         instead of the producer's timestamp (Kafka's LogAppendTime);
    ///         default False.
    ///     retention_respects_groups: Time retention (`retention_ms`) keeps
    ///         a segment until every consumer group committed past it
    ///         (`retention_bytes` stays a hard cap); default False.
    ///
    /// Raises:
    ///     mqlite.InvalidTopicName: The name breaks a naming rule.
    ///     mqlite.InvalidConfig: A value is out of range.
    ///     mqlite.TopicExists: A topic of that name exists.
    ///     mqlite.Closed: The broker is closed.
    #[pyo3(signature = (name, partitions = 1, *, segment_bytes = None, retention_ms = None, retention_bytes = None, max_message_bytes = None, log_append_time = false, retention_respects_groups = false))]
    #[allow(clippy::too_many_arguments)] // one per argument of the Python signature
    fn create_topic(
        &self,
        py: Python<'_>,
        name: &str,
        partitions: i64,
        segment_bytes: Option<i64>,
        retention_ms: Option<i64>,
        retention_bytes: Option<i64>,
        max_message_bytes: Option<i64>,
        log_append_time: bool,
        retention_respects_groups: bool,
    ) -> PyResult<()> {
        self.check_open(py)?;
        let mut config = mqlite::TopicConfig::new(config_u32(py, "partitions", partitions)?);
        if let Some(v) = segment_bytes {
            config = config.segment_bytes(config_u64(py, "segment_bytes", v)?);
        }
        if let Some(v) = retention_ms {
            config = config.retention_ms(config_u64(py, "retention_ms", v)?);
        }
        if let Some(v) = retention_bytes {
            config = config.retention_bytes(config_u64(py, "retention_bytes", v)?);
        }
        if let Some(v) = max_message_bytes {
            config = config.max_message_bytes(config_u32(py, "max_message_bytes", v)?);
        }
        config = config
            .log_append_time(log_append_time)
            .retention_respects_groups(retention_respects_groups);
        py.detach(|| self.inner.create_topic(name, config))
            .py_err(py)
    }

    /// Deletes a topic and all its data.
    ///
    /// Messages already consumed stay readable while they are referenced.
    ///
    /// Args:
    ///     name: The topic.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: No topic of that name.
    ///     mqlite.Closed: The broker is closed.
    fn delete_topic(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.check_open(py)?;
        py.detach(|| self.inner.delete_topic(name)).py_err(py)
    }

    /// Grows a topic to `partitions` partitions, keeping existing data.
    ///
    /// Keys map to partitions by count, so growing a topic moves where new
    /// records of a key go (as in Kafka).
    ///
    /// Args:
    ///     name: The topic.
    ///     partitions: The new total, larger than the current count.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: No topic of that name.
    ///     mqlite.InvalidArgument: `partitions` is not larger than now.
    ///     mqlite.InvalidConfig: `partitions` is over 100,000.
    ///     mqlite.Closed: The broker is closed.
    fn add_partitions(&self, py: Python<'_>, name: &str, partitions: i64) -> PyResult<()> {
        self.check_open(py)?;
        let partitions = config_u32(py, "partitions", partitions)?;
        py.detach(|| self.inner.add_partitions(name, partitions))
            .py_err(py)
    }

    /// Names of all topics, sorted (damaged ones included: see
    /// `damaged()`).
    ///
    /// Returns:
    ///     list[str]: The topic names.
    ///
    /// Raises:
    ///     mqlite.Closed: The broker is closed.
    fn topics(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.check_open(py)?;
        Ok(self.inner.topics())
    }

    /// Names of the consumer groups, sorted (Kafka's
    /// `list_consumer_groups`): those with committed offsets in the data
    /// directory (the offsets of broadcast consumers count for their
    /// `group_id`), damaged ones included, and those with members in this
    /// process. A group that was only described is not listed.
    ///
    /// Returns:
    ///     list[str]: The group names.
    ///
    /// Raises:
    ///     mqlite.Closed: The broker is closed.
    fn groups(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.check_open(py)?;
        Ok(self.inner.groups())
    }

    /// What could not be opened because its files are damaged: each use of
    /// it raises `mqlite.Corrupt` (or `mqlite.UnsupportedVersion`) while
    /// the rest of the directory works. `kind` is `"topic"`, `"group"` or
    /// `"producers"` (the producer registry: idempotent producers are
    /// refused). A damaged topic can be removed with `delete_topic`.
    ///
    /// Returns:
    ///     list[tuple[str, str, str]]: `(kind, name, error message)`.
    ///
    /// Raises:
    ///     mqlite.Closed: The broker is closed.
    fn damaged(&self, py: Python<'_>) -> PyResult<Vec<(String, String, String)>> {
        self.check_open(py)?;
        Ok(self
            .inner
            .damaged()
            .into_iter()
            .map(|(k, n, e)| (k, n, e.to_string()))
            .collect())
    }

    /// Describes a topic: its config and each partition's offsets and size.
    ///
    /// Args:
    ///     name: The topic.
    ///
    /// Returns:
    ///     TopicInfo: A snapshot taken now.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: No topic of that name.
    ///     mqlite.Closed: The broker is closed.
    fn topic(&self, py: Python<'_>, name: &str) -> PyResult<TopicInfo> {
        self.check_open(py)?;
        let info = self.inner.topic(name).py_err(py)?;
        Ok(TopicInfo::from(info))
    }

    /// The earliest offset whose record timestamp is at or after `timestamp_ms`.
    ///
    /// Args:
    ///     topic: The topic.
    ///     partition: The partition.
    ///     timestamp_ms: Milliseconds since the Unix epoch.
    ///
    /// Returns:
    ///     int | None: The offset, or None when every record is older.
    ///
    /// Raises:
    ///     mqlite.UnknownTopic: No topic of that name.
    ///     mqlite.UnknownPartition: The topic has no such partition.
    ///     mqlite.Closed: The broker is closed.
    fn offset_for_timestamp(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i64,
        timestamp_ms: i64,
    ) -> PyResult<Option<u64>> {
        self.check_open(py)?;
        let partition = arg_u32(py, "partition", partition)?;
        self.inner
            .offset_for_timestamp(topic, partition, timestamp_ms)
            .py_err(py)
    }

    /// Makes a producer.
    ///
    /// Args:
    ///     name: A durable name (letters, digits, `.`, `_`, `-`), or None
    ///         for an anonymous producer. A named producer keeps its id
    ///         across restarts, resumes with `last_sequence()`, and making a
    ///         new producer of the same name fences this one
    ///         (`ProducerFenced`). Needs `idempotent`.
    ///     idempotent: Give the producer an id and number its batches, so a
    ///         re-sent batch or `sequence` is recognised instead of written
    ///         twice (default on).
    ///     acks: Durability of every send: 0 (fire and forget: sends return
    ///         before the record is written, offsets unknown), 1 (default:
    ///         in the memory map and visible to consumers; survives a crash
    ///         of this process), or -1 / "all" (flushed to disk; survives
    ///         power loss).
    ///     linger_ms: How long `produce()` lets a partition's batch wait
    ///         for more records before writing it (default 0: at once).
    ///     batch_size: A partition's batch is written once it holds this
    ///         many bytes (default 16384).
    ///     buffer_memory: Most bytes held in unsent batches and batches
    ///         awaiting their `acks="all"` flush (default 32 MiB).
    ///     max_block_ms: How long a send waits for room in `buffer_memory`
    ///         before raising `BufferFull` (default 60000).
    ///     compression: Codec of every batch: "none" (default), "gzip",
    ///         "snappy", "lz4" or "zstd". Consumers read any mix.
    ///     partitioner: For records without partition or key: "sticky"
    ///         (default; one partition until `batch_size` bytes went there),
    ///         "round_robin", or a callable `f(record, partitions) -> int`
    ///         given an `mqlite.ProducerRecord` and the topic's partition
    ///         count, called for every record without an explicit partition
    ///         (keyed ones too), on the sending thread. What it raises
    ///         propagates out of the send, and nothing is written.
    ///     dedup_window: Batches per partition remembered to answer a
    ///         re-send with the original offsets (1 to 1000, default 5).
    ///     strict_sequences: Raise `OutOfOrderSequence` for a `sequence`
    ///         that skips ahead of the partition's next one (Kafka's rule)
    ///         instead of allowing gaps (default off). Sequences are checked
    ///         per partition, so with this on, number each partition's
    ///         records 0, 1, 2, ... (explicit partitions, or a one-partition
    ///         topic): a producer-wide counter spread over several
    ///         partitions leaves gaps in each.
    ///     interceptors: Objects with an `on_send(record)` method, returning
    ///         a changed `ProducerRecord` or None to keep it, called before
    ///         each record is routed, and/or an
    ///         `on_acknowledgement(err, metadata)` method, called when it is
    ///         done (like `on_delivery`, on a thread serving callbacks). An
    ///         interceptor that raises is logged (logger "mqlite") and
    ///         skipped; the record goes on.
    ///     retries: How many times a record without a key and without an
    ///         explicit partition is sent again, to another partition, after
    ///         a partition fault (`mqlite.Poisoned`, `mqlite.DiskFull` or
    ///         `mqlite.IoError` from its append, which wrote nothing;
    ///         RocketMQ's `retryTimesWhenSendFailed`). Records with a key,
    ///         a partition, a sequence or a custom partitioner never move.
    ///     fault_backoff_ms: How long a partition whose append failed is
    ///         avoided by key-less records (skipped while other partitions
    ///         are available).
    ///     delivery_timeout_ms: How long a record may take from its send
    ///         until it is appended and acknowledged (Kafka's
    ///         `delivery.timeout.ms`; 0: no limit). A queued batch older
    ///         than this is not appended: its callbacks get
    ///         `mqlite.Timeout`. An `acks="all"` send whose flush ends past
    ///         it raises `mqlite.Timeout`; its record is in the log already.
    ///     transactional_id: Makes a transactional producer (Kafka's
    ///         `transactional.id`, the naming rules of `name`): it may run
    ///         transactions (`transaction()`, `begin_transaction()`), and
    ///         making one with the same id fences this one (its open
    ///         transaction is aborted; its calls raise `ProducerFenced`),
    ///         in this process or, in shared mode, another.
    ///     max_transaction_bytes: Most bytes of records one transaction may
    ///         buffer (default 64 MiB); past it a send raises
    ///         `TransactionTooLarge`.
    ///     transaction_timeout_ms: How long a transaction may stay open
    ///         (default 60000; 0: no limit); past it the transaction is
    ///         aborted and its next call raises `Timeout`.
    ///     access_mode: How a named producer shares its name with other
    ///         open producers of it, in this process and in the other
    ///         processes of a shared-mode directory:
    ///         "exclusive_with_fencing" (default: the newest fences the
    ///         older ones), "exclusive" (raise `ProducerBusy` while another
    ///         exclusive or shared one is open), "wait_for_exclusive" (wait
    ///         for them to close, at most `max_block_ms`, then `Timeout`)
    ///         or "shared" (several at once, one id and epoch, sequences
    ///         deduplicated across them). Needs a `name` unless the default.
    ///     initial_sequence: Number records sent without `sequence` from
    ///         this value (or `last_sequence() + 1` when higher), so they
    ///         are deduplicated on re-send and a restarted producer never
    ///         reuses a number; an explicit `sequence` moves the counter
    ///         past it. Needs a `name`, not with "shared"; sends of the
    ///         producer are serialised.
    ///
    /// Returns:
    ///     Producer: A new producer.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: A value is out of range or unknown
    ///         (`acks`, `compression`, `partitioner`, a negative size, a bad
    ///         name, a name without idempotence).
    ///     TypeError: An argument has the wrong type, or an interceptor has
    ///         neither method.
    ///     mqlite.ProducerBusy: `access_mode` excludes an open producer of
    ///         the name.
    ///     mqlite.Timeout: "wait_for_exclusive" waited `max_block_ms`.
    ///     mqlite.Closed: The broker is closed.
    #[pyo3(
        signature = (
            name = None,
            *,
            idempotent = true,
            acks = None,
            linger_ms = 0,
            batch_size = 16384,
            buffer_memory = 33_554_432,
            max_block_ms = 60_000,
            compression = None,
            partitioner = None,
            dedup_window = 5,
            strict_sequences = false,
            interceptors = None,
            retries = 2,
            fault_backoff_ms = 30_000,
            delivery_timeout_ms = 120_000,
            transactional_id = None,
            max_transaction_bytes = 67_108_864,
            transaction_timeout_ms = 60_000,
            access_mode = None,
            initial_sequence = None
        ),
        text_signature = "($self, name=None, *, idempotent=True, acks=1, linger_ms=0, batch_size=16384, \
                          buffer_memory=33554432, max_block_ms=60000, compression='none', \
                          partitioner='sticky', dedup_window=5, strict_sequences=False, interceptors=None, \
                          retries=2, fault_backoff_ms=30000, delivery_timeout_ms=120000, \
                          transactional_id=None, max_transaction_bytes=67108864, transaction_timeout_ms=60000, \
                          access_mode='exclusive_with_fencing', initial_sequence=None)"
    )]
    #[allow(clippy::too_many_arguments)] // one per argument of the Python signature
    fn producer(
        slf: &Bound<'_, Self>,
        name: Option<String>,
        idempotent: bool,
        acks: Option<&Bound<'_, PyAny>>,
        linger_ms: i64,
        batch_size: i64,
        buffer_memory: i64,
        max_block_ms: i64,
        compression: Option<&str>,
        partitioner: Option<&Bound<'_, PyAny>>,
        dedup_window: i64,
        strict_sequences: bool,
        interceptors: Option<&Bound<'_, PyAny>>,
        retries: i64,
        fault_backoff_ms: i64,
        delivery_timeout_ms: i64,
        transactional_id: Option<String>,
        max_transaction_bytes: i64,
        transaction_timeout_ms: i64,
        access_mode: Option<&str>,
        initial_sequence: Option<i64>,
    ) -> PyResult<Producer> {
        let py = slf.py();
        slf.get().check_open(py)?;
        let acks = match acks {
            Some(a) => parse_acks(py, a)?,
            None => mqlite::Acks::One,
        };
        Producer::open(
            slf,
            Options {
                name,
                idempotent,
                acks,
                linger_ms,
                batch_size,
                buffer_memory,
                max_block_ms,
                compression,
                partitioner,
                dedup_window,
                strict_sequences,
                interceptors,
                retries,
                fault_backoff_ms,
                delivery_timeout_ms,
                transactional_id,
                max_transaction_bytes,
                transaction_timeout_ms,
                access_mode,
                initial_sequence,
            },
        )
    }

    /// Makes a consumer.
    ///
    /// Args:
    ///     group_id: Consumer group name (the topic-name rules, at most 243
    ///         bytes; with `broadcast`, group id, `+` and client id
    ///         together), or None for a standalone consumer, which cannot
    ///         commit.
    ///     client_id: This consumer's name: the start of its member id, and
    ///         with `broadcast` the name its offsets are kept under.
    ///     assignment_strategy: How a group shares partitions: "averagely"
    ///         (default; alias "range"), "round_robin" ("by_circle"),
    ///         "consistent_hash", "sticky" or "by_config"
    ///         (`wanted_partitions`). Every member of a group must use the
    ///         same one.
    ///     auto_offset_reset: Where to start without a valid position:
    ///         "earliest" (default), "latest", or "error" (raise
    ///         `mqlite.OffsetOutOfRange`).
    ///     enable_auto_commit: Commit what was handed out every
    ///         `auto_commit_interval_ms` (inside polls), after `on_revoke`
    ///         and at `close()` (default on; needs a `group_id`).
    ///     auto_commit_interval_ms: Interval of automatic commits (default
    ///         5000).
    ///     max_poll_interval_ms: A member that does not poll for this long
    ///         is removed from its group and its partitions go to the
    ///         others (default 300000).
    ///     broadcast: Every consumer of the group reads every partition,
    ///         with offsets of its own, kept under `<group_id>+<client_id>`
    ///         (RocketMQ's broadcasting; needs a `group_id`).
    ///     max_poll_records: Most messages fetched from the engine at once
    ///         (default 500).
    ///     wanted_partitions: With `assignment_strategy="by_config"`, the
    ///         (topic, partition) pairs this member asks for.
    ///     on_commit: Called as `on_commit(err, offsets)` after each
    ///         `Consumer.commit()` (see there); not for automatic commits.
    ///     isolation_level: "read_committed" (default) or
    ///         "read_uncommitted" (Kafka's `isolation.level`). Both read
    ///         the same records: a transaction is written only at its
    ///         commit, so nothing uncommitted is ever in a log.
    ///     commit_acks: How durable a commit is when it returns, as a
    ///         producer's `acks`: "all" or -1 (default: synced to disk,
    ///         survives a crash of the machine; commits made at once by
    ///         several threads share one sync), 1 or 0 (written to the
    ///         operating system: survives a crash of the process, not of
    ///         the machine, at the cost of a `write(2)`).
    ///
    /// Returns:
    ///     Consumer: A new consumer with nothing assigned.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: A value is out of range or unknown (a bad
    ///         name, strategy, reset, interval; `broadcast` without a
    ///         `group_id`; `wanted_partitions` without "by_config").
    ///     mqlite.Closed: The broker is closed.
    ///     TypeError: An argument has the wrong type.
    #[pyo3(
        signature = (
            group_id = None,
            *,
            client_id = "consumer",
            assignment_strategy = "averagely",
            auto_offset_reset = "earliest",
            enable_auto_commit = true,
            auto_commit_interval_ms = 5000,
            max_poll_interval_ms = 300_000,
            broadcast = false,
            max_poll_records = 500,
            wanted_partitions = None,
            on_commit = None,
            enable_auto_offset_store = true,
            isolation_level = "read_committed",
            commit_acks = None
        ),
        text_signature = "($self, group_id=None, *, client_id='consumer', assignment_strategy='averagely', \
                          auto_offset_reset='earliest', enable_auto_commit=True, auto_commit_interval_ms=5000, \
                          max_poll_interval_ms=300000, broadcast=False, max_poll_records=500, \
                          wanted_partitions=None, on_commit=None, enable_auto_offset_store=True, \
                          isolation_level='read_committed', commit_acks='all')"
    )]
    #[allow(clippy::too_many_arguments)] // one per argument of the Python signature
    fn consumer(
        slf: &Bound<'_, Self>,
        group_id: Option<String>,
        client_id: &str,
        assignment_strategy: &str,
        auto_offset_reset: &str,
        enable_auto_commit: bool,
        auto_commit_interval_ms: i64,
        max_poll_interval_ms: i64,
        broadcast: bool,
        max_poll_records: i64,
        wanted_partitions: Option<&Bound<'_, PyAny>>,
        on_commit: Option<Bound<'_, PyAny>>,
        enable_auto_offset_store: bool,
        isolation_level: &str,
        commit_acks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Consumer> {
        let py = slf.py();
        slf.get().check_open(py)?;
        let commit_acks = match commit_acks {
            Some(a) if !a.is_none() => parse_acks(py, a)?,
            _ => mqlite::Acks::All,
        };
        let isolation = mqlite::IsolationLevel::parse(isolation_level).py_err(py)?;
        let reset: mqlite::OffsetReset = auto_offset_reset.parse().py_err(py)?;
        let strategy: mqlite::AssignmentStrategy = assignment_strategy.parse().py_err(py)?;
        if !(1..=1_000_000).contains(&max_poll_records) {
            return Err(invalid_argument(
                py,
                format!("max_poll_records must be 1 to 1000000, got {max_poll_records}"),
            ));
        }
        let interval = u64::try_from(auto_commit_interval_ms).map_err(|_| {
            invalid_argument(
                py,
                format!(
                    "auto_commit_interval_ms must not be negative, got {auto_commit_interval_ms}"
                ),
            )
        })?;
        let max_poll_interval = u64::try_from(max_poll_interval_ms)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| {
                invalid_argument(
                    py,
                    format!("max_poll_interval_ms must be positive, got {max_poll_interval_ms}"),
                )
            })?;
        let wanted = match wanted_partitions {
            Some(w) if !w.is_none() => {
                if strategy != mqlite::AssignmentStrategy::ByConfig {
                    return Err(invalid_argument(
                        py,
                        "wanted_partitions needs assignment_strategy=\"by_config\"",
                    ));
                }
                topic_partitions(py, "wanted_partitions", w)?
            }
            _ => Vec::new(),
        };
        let on_commit = match on_commit {
            Some(f) if f.is_none() => None,
            Some(f) if f.is_callable() => Some(f.unbind()),
            Some(f) => {
                return Err(PyTypeError::new_err(format!(
                    "on_commit must be callable or None, not {}",
                    f.get_type().name()?
                )))
            }
            None => None,
        };
        let mut config = mqlite::ConsumerConfig::default()
            .client_id(client_id)
            .assignment_strategy(strategy)
            .auto_offset_reset(reset)
            .max_poll_records(max_poll_records as usize)
            .wanted_partitions(wanted)
            .enable_auto_commit(enable_auto_commit)
            .enable_auto_offset_store(enable_auto_offset_store)
            .auto_commit_interval_ms(interval)
            .max_poll_interval_ms(max_poll_interval)
            .broadcast(broadcast)
            .isolation_level(isolation)
            .commit_acks(commit_acks);
        config.group_id = group_id;
        let broker = &slf.get().inner;
        let inner = broker.consumer(config).py_err(py)?;
        Ok(Consumer::new(
            NewConsumer { inner, on_commit },
            slf.clone().unbind(),
        ))
    }

    /// Makes a share consumer: a member of share group `group`, which takes
    /// any message of the topics it subscribes to and acknowledges each
    /// (job-queue consumption; see `ShareConsumer`).
    ///
    /// Args:
    ///     group: The share group (the topic-name rules). Its state is kept
    ///         in the data directory; one process at a time uses it.
    ///     topics: A topic name or a list of them, subscribed at once
    ///         (see `ShareConsumer.subscribe()`); None subscribes nothing.
    ///     lock_duration_ms: How long a delivered message stays locked to
    ///         its consumer before it is delivered again (default 30000, as
    ///         Kafka's `group.share.record.lock.duration.ms`); at least 1.
    ///     max_deliveries: Deliveries after which a message not
    ///         acknowledged goes to the dead-letter topic (default 5, as
    ///         Kafka's `group.share.delivery.count.limit`); None or 0: no
    ///         limit.
    ///     dead_letter_topic: Where dead letters go; None (default):
    ///         `<topic>.<group>.dlq` for each source topic. Created with one
    ///         partition when missing.
    ///     max_in_flight: Most offsets per partition read ahead of the
    ///         first one not done (default 2000): past that the partition is
    ///         not read until messages are settled.
    ///     max_poll_records: Most messages one engine poll delivers (and
    ///         locks) at once (default 500), 1 to 1,000,000.
    ///     auto_offset_reset: Where a partition the group never read starts:
    ///         "earliest" (default: messages produced before the first
    ///         consumer are delivered) or "latest".
    ///     commit_acks: How durable acknowledgements are when they return,
    ///         as a producer's `acks`: "all" or -1 (default: synced to disk;
    ///         calls made at once share a sync), 1 or 0 (written to the
    ///         operating system: survives a crash of the process, not of the
    ///         machine).
    ///     client_id: This consumer's name (default "consumer").
    ///
    /// Every member of a group in one process must use the same
    /// `max_deliveries`, `max_in_flight` and `dead_letter_topic`.
    ///
    /// Returns:
    ///     ShareConsumer: A new member of the group.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: A bad group or client name, a value out
    ///         of range, an unknown `auto_offset_reset` (or "error"), or
    ///         settings that differ from those of the group's members open
    ///         in this process.
    ///     mqlite.InvalidTopicName: A topic or `dead_letter_topic` is not a
    ///         valid name.
    ///     mqlite.Locked: Another process uses the share group (a broker
    ///         not opened with `shared=True`).
    ///     mqlite.ReadOnly: The broker is read-only.
    ///     mqlite.Closed: The broker is closed.
    ///     TypeError: An argument has the wrong type.
    #[pyo3(
        signature = (
            group,
            topics = None,
            *,
            lock_duration_ms = 30_000,
            max_deliveries = Some(5),
            dead_letter_topic = None,
            max_in_flight = 2000,
            max_poll_records = 500,
            auto_offset_reset = "earliest",
            commit_acks = None,
            client_id = None
        ),
        text_signature = "($self, group, topics=None, *, lock_duration_ms=30000, max_deliveries=5, \
                          dead_letter_topic=None, max_in_flight=2000, max_poll_records=500, \
                          auto_offset_reset='earliest', commit_acks='all', client_id=None)"
    )]
    #[allow(clippy::too_many_arguments)] // one per argument of the Python signature
    fn share_consumer(
        slf: &Bound<'_, Self>,
        group: &str,
        topics: Option<&Bound<'_, PyAny>>,
        lock_duration_ms: i64,
        max_deliveries: Option<i64>,
        dead_letter_topic: Option<String>,
        max_in_flight: i64,
        max_poll_records: i64,
        auto_offset_reset: &str,
        commit_acks: Option<&Bound<'_, PyAny>>,
        client_id: Option<String>,
    ) -> PyResult<ShareConsumer> {
        let py = slf.py();
        slf.get().check_open(py)?;
        let topics = match topics {
            Some(t) if !t.is_none() => Some(topic_names(t)?),
            _ => None,
        };
        let commit_acks = match commit_acks {
            Some(a) if !a.is_none() => parse_acks(py, a)?,
            _ => mqlite::Acks::All,
        };
        let reset: mqlite::OffsetReset = auto_offset_reset.parse().py_err(py)?;
        if !(1..=1_000_000).contains(&max_poll_records) {
            return Err(invalid_argument(
                py,
                format!("max_poll_records must be 1 to 1000000, got {max_poll_records}"),
            ));
        }
        let max_deliveries = match max_deliveries {
            Some(n) => arg_u32(py, "max_deliveries", n)?,
            None => 0,
        };
        let mut config = mqlite::ShareConsumerConfig::group(group)
            .lock_duration_ms(arg_u64(py, "lock_duration_ms", lock_duration_ms)?)
            .max_deliveries(max_deliveries)
            .max_in_flight(arg_u32(py, "max_in_flight", max_in_flight)?)
            .max_poll_records(max_poll_records as usize)
            .auto_offset_reset(reset)
            .commit_acks(commit_acks);
        if let Some(t) = dead_letter_topic {
            config = config.dead_letter_topic(t);
        }
        if let Some(c) = client_id {
            config = config.client_id(c);
        }
        ShareConsumer::new(py, slf, NewShareConsumer { config, topics })
    }

    /// Describes a consumer group: its members in this process, with the
    /// partitions each owns now, and its committed offsets.
    ///
    /// Args:
    ///     name: The group, or `<group_id>+<client_id>` for the offsets of
    ///         a broadcast consumer.
    ///
    /// Returns:
    ///     GroupInfo: A snapshot taken now.
    ///
    /// Raises:
    ///     mqlite.InvalidArgument: `name` is not a valid group name.
    ///     mqlite.Closed: The broker is closed.
    fn describe_group(&self, py: Python<'_>, name: &str) -> PyResult<GroupInfo> {
        self.check_open(py)?;
        let g = self.inner.describe_group(name).py_err(py)?;
        Ok(g.into())
    }

    /// Flushes every partition to disk (releases the GIL while it waits).
    ///
    /// Raises:
    ///     mqlite.IoError: A flush failed (the partition is then poisoned).
    ///     mqlite.Closed: The broker is closed.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.check_open(py)?;
        py.detach(|| self.inner.flush()).py_err(py)
    }

    /// Applies retention to every topic now.
    ///
    /// Returns:
    ///     int: The number of segments deleted.
    ///
    /// Raises:
    ///     mqlite.Closed: The broker is closed.
    fn enforce_retention(&self, py: Python<'_>) -> PyResult<usize> {
        self.check_open(py)?;
        py.detach(|| self.inner.enforce_retention()).py_err(py)
    }

    /// Flushes everything, stops background work and releases the lock.
    ///
    /// Producers and consumers made from this broker raise `mqlite.Closed`
    /// afterwards; its share consumers are closed first (the messages they
    /// hold are given back). Closing twice is fine. Every file descriptor and memory
    /// mapping of the data directory is released at once, whatever
    /// producers and consumers are still referenced; a `Message` still
    /// referenced (or fetched by a consumer and not yet returned by its
    /// `poll`) keeps its segment mapped, so its bytes stay readable, until
    /// it is released. In a process forked from the one
    /// that opened the broker this does nothing: the broker is the
    /// parent's.
    ///
    /// Raises:
    ///     mqlite.IoError: A final flush failed (the broker is closed anyway).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.inner.forked() {
            return Ok(());
        }
        let res = py.detach(|| {
            self.share_consumers.shut_down_all();
            self.inner.close()
        });
        crate::log::flush(py);
        if let Some(t) = self.lock_token {
            fork::unregister_lock(t);
        }
        res.py_err(py)
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
        let state = if self.is_closed() { "closed" } else { "open" };
        format!("<mqlite.Broker path={:?} {state}>", self.path)
    }
}
