//! Configuration objects: data directory, topic, producer and consumer
//! settings. Each is made by its `_new`, changed by setters, read (copied)
//! by the functions that take it, and released by its `_free`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use mqlite::{
    Acks, AssignmentStrategy, Compression, Config, ConsumerConfig, OffsetReset, Partitioner,
    ProducerAccessMode, ProducerConfig, TopicConfig,
};

use crate::callback::{mql_interceptor, mql_partition_selector, selector, CInterceptor, UserData};
use crate::error::{guard, mql_status, Failure, FfiResult};
use crate::util::{arg, free, into_handle, out};

/// The body of a setter: checks `config` (`arg!(mut config)`) and then
/// sets its `field` to `value`, which may return early with `?`.
macro_rules! set {
    ($config:ident, $field:ident = $value:expr) => {
        guard(|| {
            // The config first: a NULL config is reported before a bad value.
            let c = arg!(mut $config);
            c.inner.$field = $value;
            Ok(())
        })
    };
}

/// `value` when `ok`, else `MQL_INVALID_ARGUMENT` with `message`.
fn valid<T, M: Into<String>>(value: T, ok: bool, message: impl FnOnce() -> M) -> FfiResult<T> {
    if ok {
        Ok(value)
    } else {
        Err(Failure::invalid(message()))
    }
}

/// Settings of a data directory handle, for `mql_open`.
pub struct mql_config {
    pub(crate) inner: Config,
}

/// Makes a data-directory config with the defaults (prefault on, file mode
/// 0600, retention checked every 60,000 ms).
///
/// Ownership: on `MQL_OK`, `*out` is a new config owned by the caller;
/// release it with `mql_config_free` (`mql_open` copies it, so it may be
/// freed right after).
///
/// # Safety
/// `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_config_new(out: *mut *mut mql_config) -> mql_status {
    guard(|| {
        let out = out!(out);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe {
            out.write(into_handle(mql_config {
                inner: Config::default(),
            }));
        };
        Ok(())
    })
}

/// Releases a config made by `mql_config_new`. NULL does nothing.
///
/// Ownership: takes back the config the caller owned; do not use it afterwards.
///
/// # Safety
/// `config` is NULL or a live config from `mql_config_new`, not used again.
#[no_mangle]
pub unsafe extern "C" fn mql_config_free(config: *mut mql_config) {
    free!(config);
}

/// Whether to fault in segment pages in the background before the writer
/// reaches them (default true). Turn off to save memory with many idle
/// topics.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_prefault(
    config: *mut mql_config,
    prefault: bool,
) -> mql_status {
    set!(config, prefault = prefault)
}

/// Unix permission bits of created data files (default 0600). At most
/// 07777, else `MQL_INVALID_ARGUMENT`.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_file_mode(
    config: *mut mql_config,
    mode: u32,
) -> mql_status {
    set!(
        config,
        file_mode = valid(mode, mode <= 0o7777, || {
            format!("file mode must be at most 07777, got {mode:#o}")
        })?
    )
}

/// How often a background thread applies retention, in milliseconds
/// (default 60,000). 0 turns the thread off: retention then runs when a
/// segment rolls.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_retention_check_interval_ms(
    config: *mut mql_config,
    interval_ms: u64,
) -> mql_status {
    set!(config, retention_check_interval_ms = interval_ms)
}

/// Largest metadata string a commit may carry, in bytes (default 4096,
/// Kafka's `offset.metadata.max.bytes`): `mql_commit_offsets` with a
/// longer one fails with `MQL_INVALID_ARGUMENT` and commits nothing.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_max_commit_metadata_bytes(
    config: *mut mql_config,
    max_bytes: usize,
) -> mql_status {
    set!(config, max_commit_metadata_bytes = max_bytes)
}

/// Most descriptors the data directory keeps open for its files (default
/// 256, like RocksDB's `max_open_files`): those of active segments and
/// recovery points, in a cache that closes the least recently used and
/// opens a file again when it is needed (data is read through memory maps,
/// which need none). At least 1: 0 fails with `MQL_INVALID_CONFIG` and
/// changes nothing.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_max_open_files(
    config: *mut mql_config,
    max_open_files: usize,
) -> mql_status {
    set!(
        config,
        max_open_files = {
            Config::default()
                .max_open_files(max_open_files)
                .validate()?;
            max_open_files
        }
    )
}

/// Shared mode (true) or exclusive mode (false), whatever the filesystem:
/// `mql_config_set_mode` with "shared" or "exclusive" (the default).
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_shared(
    config: *mut mql_config,
    shared: bool,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        c.inner = c.inner.clone().shared(shared);
        Ok(())
    })
}

/// Read-only (default false; true implies shared mode, see
/// `mql_config_set_shared`): the handle never writes the data directory's
/// logs, offsets, topics or producer state, not even recovery (it takes
/// the shared-mode lock files, `LIVE`, `INIT` and `mqlite.shm`, like every
/// shared handle). Producers, topic changes and commits fail with
/// `MQL_READ_ONLY` and change nothing; consumers, topic and group
/// descriptions work (its consumer groups are its own, unseen by other
/// processes). For tools looking at a directory an application has open
/// in shared mode. The directory must exist.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_readonly(
    config: *mut mql_config,
    readonly: bool,
) -> mql_status {
    set!(config, readonly = readonly)
}

// Topic creation on first use.
/// Create a topic on first use (default false; Kafka's
/// `auto.create.topics.enable`): a send to a missing topic, and a
/// consumer's `mql_consumer_subscribe` or `mql_consumer_assign` naming one
/// (not a pattern subscription), create it with `default_partitions`
/// partitions (`mql_config_set_default_partitions`) and the default topic
/// settings. An invalid name still fails with `MQL_INVALID_TOPIC_NAME` and
/// creates nothing. A read-only handle never creates: it keeps reporting
/// `MQL_UNKNOWN_TOPIC`.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_auto_create_topics(
    config: *mut mql_config,
    on: bool,
) -> mql_status {
    set!(config, auto_create_topics = on)
}

/// Partitions of a topic created on first use (default 1, Kafka's
/// `num.partitions`): 1 to 100,000, else `MQL_INVALID_CONFIG` and nothing
/// changes.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_default_partitions(
    config: *mut mql_config,
    partitions: u32,
) -> mql_status {
    set!(
        config,
        default_partitions = {
            Config::default()
                .default_partitions(partitions)
                .validate()?;
            partitions
        }
    )
}

/// Configuration of a topic, for `mql_topic_create`.
pub struct mql_topic_config {
    pub(crate) inner: TopicConfig,
}

/// Makes a topic config with `partitions` partitions (1 to 100,000, else
/// `MQL_INVALID_CONFIG`) and defaults for the rest: 64 MiB segments, no
/// retention limit, 1 MiB largest message. The other values are checked by
/// `mql_topic_create`.
///
/// Ownership: on `MQL_OK`, `*out` is a new config owned by the caller;
/// release it with `mql_topic_config_free` (`mql_topic_create` copies it).
///
/// # Safety
/// `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_config_new(
    partitions: u32,
    out: *mut *mut mql_topic_config,
) -> mql_status {
    guard(|| {
        let out = out!(out);
        let inner = TopicConfig::new(partitions);
        inner.validate()?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(mql_topic_config { inner })) };
        Ok(())
    })
}

/// Releases a config made by `mql_topic_config_new`. NULL does nothing.
///
/// Ownership: takes back the config the caller owned; do not use it afterwards.
///
/// # Safety
/// `config` is NULL or a live config from `mql_topic_config_new`, not used
/// again.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_config_free(config: *mut mql_topic_config) {
    free!(config);
}

/// Most bytes of log in each segment file (4 KiB to 2 GiB, checked by
/// `mql_topic_create`; the file grows in steps up to it, from 64 KiB);
/// lowers `max_message_bytes` to it if needed.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live topic config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_config_set_segment_bytes(
    config: *mut mql_topic_config,
    bytes: u64,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        c.inner = c.inner.clone().segment_bytes(bytes);
        Ok(())
    })
}

/// Deletes closed segments whose newest record is older than `ms`
/// milliseconds; -1 keeps data forever (the default). Other negative values
/// give `MQL_INVALID_ARGUMENT`.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live topic config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_config_set_retention_ms(
    config: *mut mql_topic_config,
    ms: i64,
) -> mql_status {
    set!(config, retention_ms = unlimited_or(ms, "retention_ms")?)
}

/// Deletes the oldest closed segments while a partition holds more than
/// `bytes` bytes; -1 means no limit (the default). Other negative values
/// give `MQL_INVALID_ARGUMENT`.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live topic config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_config_set_retention_bytes(
    config: *mut mql_topic_config,
    bytes: i64,
) -> mql_status {
    set!(
        config,
        retention_bytes = unlimited_or(bytes, "retention_bytes")?
    )
}

/// Largest encoded record (a record is stored as a batch of one, with 61
/// bytes of batch header); default 1 MiB, at most the segment size (checked
/// by `mql_topic_create`).
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live topic config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_config_set_max_message_bytes(
    config: *mut mql_topic_config,
    bytes: u32,
) -> mql_status {
    set!(config, max_message_bytes = bytes)
}

/// Stamps records with the time they are appended instead of the time the
/// producer gave (Kafka's `LogAppendTime`); default false (create time).
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live topic config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_config_set_log_append_time(
    config: *mut mql_topic_config,
    on: bool,
) -> mql_status {
    set!(config, log_append_time = on)
}

/// Makes time retention (`retention_ms`) keep the segments some consumer
/// group has not committed past; `retention_bytes` stays a hard cap.
/// Default false.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live topic config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_config_set_retention_respects_groups(
    config: *mut mql_topic_config,
    on: bool,
) -> mql_status {
    set!(config, retention_respects_groups = on)
}

fn unlimited_or(v: i64, what: &str) -> Result<Option<u64>, Failure> {
    match v {
        -1 => Ok(None),
        v if v >= 0 => Ok(Some(v as u64)),
        v => Err(Failure::invalid(format!(
            "{what} must be -1 (no limit) or at least 0, got {v}"
        ))),
    }
}

/// Settings of a producer, for `mql_producer_new`.
pub struct mql_producer_config {
    pub(crate) inner: ProducerConfig,
}

/// Makes a producer config with the defaults: acks 1, idempotent, no name,
/// linger_ms 0, batch_size 16384 bytes, buffer_memory 32 MiB, max_block_ms
/// 60000, compression "none", partitioner "sticky", dedup_window 5
/// batches, strict_sequences off, no interceptors, retries 2,
/// fault_backoff_ms 30000, delivery_timeout_ms 120000.
///
/// Ownership: on `MQL_OK`, `*out` is a new config owned by the caller;
/// release it with `mql_producer_config_free` (`mql_producer_new` copies
/// it).
///
/// # Safety
/// `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_new(out: *mut *mut mql_producer_config) -> mql_status {
    guard(|| {
        let out = out!(out);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe {
            out.write(into_handle(mql_producer_config {
                inner: ProducerConfig::default(),
            }));
        };
        Ok(())
    })
}

/// Releases a config made by `mql_producer_config_new`. NULL does nothing.
///
/// Ownership: takes back the config the caller owned; do not use it afterwards.
///
/// # Safety
/// `config` is NULL or a live config from `mql_producer_config_new`, not
/// used again.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_free(config: *mut mql_producer_config) {
    free!(config);
}

/// Durability of every send, as Kafka's `acks`: 0 (do not wait), 1 (the
/// default: in the memory map, survives a crash of the process) or -1 (all:
/// flushed to disk, survives power loss). Other values give
/// `MQL_INVALID_ARGUMENT`.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_acks(
    config: *mut mql_producer_config,
    acks: i32,
) -> mql_status {
    set!(config, acks = Acks::from_i32(acks)?)
}

/// Idempotence (default on): the producer gets an id and epoch, every
/// batch a sequence number per partition, and a re-sent batch or a record
/// with an already-written sequence (`mql_record.sequence`) is recognised
/// instead of written twice. A named producer must be idempotent
/// (`mql_producer_new` fails with `MQL_INVALID_ARGUMENT` otherwise).
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_idempotent(
    config: *mut mql_producer_config,
    idempotent: bool,
) -> mql_status {
    set!(config, idempotent = idempotent)
}

/// A durable name for the producer (Pulsar's producer name), or NULL for
/// none (the default: an anonymous producer). A named producer keeps its id
/// across restarts, so `mql_producer_last_sequence` and duplicate detection
/// by sequence work after reopening the data directory; making a producer
/// of the same name fences the older one (`MQL_PRODUCER_FENCED`). Names are
/// 1 to 249 characters of `[A-Za-z0-9._-]` (`MQL_INVALID_ARGUMENT`
/// otherwise).
///
/// Ownership: borrows `config` and `name` for the call (the name is
/// copied).
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_name(
    config: *mut mql_producer_config,
    name: *const c_char,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        let name = arg!(opt_str name);
        if let Some(n) = name {
            mqlite::validate_producer_name(n)?;
        }
        c.inner.name = name.map(str::to_owned);
        Ok(())
    })
}

/// How long an asynchronous send (`mql_produce`) lets its partition's batch
/// wait for more records before writing it, in milliseconds (default 0:
/// write at once). Above 0, a background thread writes the batches (and
/// runs their callbacks).
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_linger_ms(
    config: *mut mql_producer_config,
    linger_ms: u64,
) -> mql_status {
    set!(config, linger_ms = linger_ms)
}

/// A partition's batch of asynchronous sends is written once it holds this
/// many bytes (default 16384, Kafka's `batch.size`); the sticky
/// partitioner also moves on after this many bytes.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_batch_size(
    config: *mut mql_producer_config,
    bytes: usize,
) -> mql_status {
    set!(config, batch_size = bytes)
}

/// Most bytes the producer holds in batches not yet written and in batches
/// waiting for their `acks = -1` flush (default 32 MiB; at least 1, else
/// `MQL_INVALID_ARGUMENT`). A send that finds no room waits up to
/// `max_block_ms`, then fails with `MQL_BUFFER_FULL`.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_buffer_memory(
    config: *mut mql_producer_config,
    bytes: usize,
) -> mql_status {
    set!(
        config,
        buffer_memory = valid(bytes, bytes > 0, || "buffer_memory must be at least 1")?
    )
}

/// How long a send waits for room in `buffer_memory` before failing with
/// `MQL_BUFFER_FULL`, in milliseconds (default 60000).
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_max_block_ms(
    config: *mut mql_producer_config,
    max_block_ms: u64,
) -> mql_status {
    set!(config, max_block_ms = max_block_ms)
}

/// The codec of every batch the producer writes: `"none"` (the default),
/// `"gzip"`, `"snappy"`, `"lz4"` or `"zstd"` (ASCII case ignored; others
/// give `MQL_INVALID_ARGUMENT`). Consumers decompress transparently.
///
/// Ownership: borrows `config` and `codec` for the call.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile; `codec` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_compression(
    config: *mut mql_producer_config,
    codec: *const c_char,
) -> mql_status {
    set!(
        config,
        compression = arg!(str codec).parse::<Compression>()?
    )
}

/// How the producer chooses the partition of a record without a key or an
/// explicit partition: `"sticky"` (the default, Kafka's: one partition
/// until `batch_size` bytes went there or its batch was written, then
/// another at random) or `"round_robin"` (the partitions in turn); ASCII
/// case ignored, others give `MQL_INVALID_ARGUMENT`. Replaces a custom
/// selector set before. Keyed records always go to their key's partition.
///
/// Ownership: borrows `config` and `name` for the call.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_partitioner(
    config: *mut mql_producer_config,
    name: *const c_char,
) -> mql_status {
    set!(config, partitioner = arg!(str name).parse::<Partitioner>()?)
}

/// A custom partition selector (RocketMQ's `MessageQueueSelector`):
/// `select(user_data, record, partitions)` chooses the partition of every
/// record sent without an explicit one, keyed or not (see
/// `mql_partition_selector`). Replaces the partitioner set before.
///
/// Threads: `select` runs on the sending threads, possibly several at once;
/// `user_data` must be safe for that, and stay valid until this config and
/// every producer made from it are freed.
///
/// Errors: `MQL_NULL_ARGUMENT` when `select` is NULL.
///
/// Ownership: borrows `config` for the call; `user_data` stays the
/// caller's.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile; `select` is NULL or a function with the
/// `mql_partition_selector` contract, safe to call with `user_data` from
/// any thread.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_partitioner_fn(
    config: *mut mql_producer_config,
    select: mql_partition_selector,
    user_data: *mut c_void,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        let select = select.ok_or_else(|| Failure::null("select"))?;
        c.inner.partitioner = selector(select, UserData::new(user_data));
        Ok(())
    })
}

/// How many batches per partition the producer remembers to answer a
/// re-sent record (by sequence) with its original offset (default 5, 1 to
/// 1000, else `MQL_INVALID_ARGUMENT`). Older duplicates are still
/// recognised, with offset `MQL_OFFSET_UNKNOWN`.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_dedup_window(
    config: *mut mql_producer_config,
    batches: usize,
) -> mql_status {
    set!(
        config,
        dedup_window = valid(batches, (1..=1000).contains(&batches), || {
            format!("dedup_window must be between 1 and 1000 batches, got {batches}")
        })?
    )
}

/// Whether a record's sequence may skip ahead of the next one its partition
/// expects. Off (the default, Pulsar's rule): gaps are fine, as a
/// producer-wide counter leaves gaps in each partition. On (Kafka's rule):
/// a gap fails with `MQL_OUT_OF_ORDER_SEQUENCE` and nothing is written.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_strict_sequences(
    config: *mut mql_producer_config,
    strict: bool,
) -> mql_status {
    set!(config, strict_sequences = strict)
}

/// Adds an interceptor (see `mql_interceptor`); interceptors run in the
/// order they were added. `*interceptor` is copied; `on_send` and
/// `on_acknowledgement` may not both be NULL (`MQL_INVALID_ARGUMENT`).
///
/// Threads and lifetime: see `mql_interceptor`; `user_data` must stay valid
/// until this config and every producer made from it are freed.
///
/// Ownership: borrows `config` and `interceptor` for the call; `user_data`
/// stays the caller's.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile; `interceptor` is NULL or points to an `mql_interceptor` whose
/// functions follow their documented contracts and are safe to call with
/// its `user_data` from any thread.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_add_interceptor(
    config: *mut mql_producer_config,
    interceptor: *const mql_interceptor,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        let ic = arg!(ref interceptor);
        if ic.on_send.is_none() && ic.on_acknowledgement.is_none() {
            return Err(Failure::invalid(
                "the interceptor has neither on_send nor on_acknowledgement",
            ));
        }
        c.inner.interceptors.push(Arc::new(CInterceptor::new(ic)));
        Ok(())
    })
}

// Retries, fault avoidance and the delivery timeout.
/// How many times a record without a key and without an explicit partition
/// is sent again, to another partition, after a partition fault (default
/// 2, RocketMQ's `retryTimesWhenSendFailed`; 0: never). A partition fault
/// is an append that failed with `MQL_POISONED`, `MQL_DISK_FULL` or
/// `MQL_IO`, which wrote nothing; the partition is then avoided for
/// `fault_backoff_ms`. Records with a key, an explicit partition, a
/// sequence or a custom partitioner never move and fail at once. A failed
/// `acks = -1` flush is not retried (the record is in the log already).
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_retries(
    config: *mut mql_producer_config,
    retries: u32,
) -> mql_status {
    set!(config, retries = retries)
}

/// How long a partition whose append failed is avoided by this producer's
/// key-less records, in milliseconds (default 30000): skipped while other
/// partitions are available; when all are avoided, the one whose back-off
/// ends first is used.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_fault_backoff_ms(
    config: *mut mql_producer_config,
    fault_backoff_ms: u64,
) -> mql_status {
    set!(config, fault_backoff_ms = fault_backoff_ms)
}

/// How long a record may take from its send until it is appended and
/// acknowledged, in milliseconds (default 120000, Kafka's
/// `delivery.timeout.ms`; 0: no limit). A queued batch (linger,
/// `mql_producer_send_async`) older than this is not appended: its records'
/// callbacks get `MQL_TIMEOUT`. An `acks = -1` send whose flush ends past
/// the deadline fails with `MQL_TIMEOUT` too; its record is in the log
/// already (an append is never undone) and is durable once a flush
/// succeeds.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_delivery_timeout_ms(
    config: *mut mql_producer_config,
    delivery_timeout_ms: u64,
) -> mql_status {
    set!(config, delivery_timeout_ms = delivery_timeout_ms)
}

// Access modes and automatic numbering of named producers.

/// How a named producer shares its name with the other open producers of
/// that name, in this process and in the other processes of a shared-mode
/// directory (Pulsar's access modes). Exclusivity is a lock the kernel
/// releases when a process ends, so a crashed holder never keeps a name.
///
/// - `MQL_ACCESS_MODE_EXCLUSIVE_WITH_FENCING` (the default): a new producer
///   of the name gets a new epoch; older ones fail their next send with
///   `MQL_PRODUCER_FENCED`. It claims nothing: any newer producer of the
///   name fences it. It cannot open while an exclusive or shared one is
///   open (`MQL_PRODUCER_BUSY`).
/// - `MQL_ACCESS_MODE_EXCLUSIVE`: `mql_producer_new` fails with
///   `MQL_PRODUCER_BUSY` while another exclusive, wait-for-exclusive or
///   shared producer of the name is open, and changes nothing.
/// - `MQL_ACCESS_MODE_WAIT_FOR_EXCLUSIVE`: as exclusive, but
///   `mql_producer_new` waits for them to close (or their process to end),
///   at most `max_block_ms`, then `MQL_TIMEOUT`.
/// - `MQL_ACCESS_MODE_SHARED`: several producers of the name send at once
///   with one producer id and epoch; none fences another. A record's
///   sequence written by one is a duplicate when another sends it to the
///   same partition. Fails with `MQL_PRODUCER_BUSY` while an exclusive one
///   is open.
///
/// cbindgen:prefix-with-name
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mql_access_mode {
    /// The newest producer of the name fences the older ones (the default).
    ExclusiveWithFencing = 0,
    /// One producer of the name at a time; a second one fails.
    Exclusive = 1,
    /// One producer of the name at a time; a second one waits.
    WaitForExclusive = 2,
    /// Any number of producers of the name at once.
    Shared = 3,
}

/// Sets the access mode of a named producer: one of the `mql_access_mode`
/// values (others give `MQL_INVALID_ARGUMENT`). A mode other than
/// `MQL_ACCESS_MODE_EXCLUSIVE_WITH_FENCING` needs a name
/// (`mql_producer_new` fails with `MQL_INVALID_ARGUMENT` otherwise).
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_access_mode(
    config: *mut mql_producer_config,
    mode: c_int,
) -> mql_status {
    set!(
        config,
        access_mode = match mode {
            m if m == mql_access_mode::ExclusiveWithFencing as c_int => {
                ProducerAccessMode::ExclusiveWithFencing
            }
            m if m == mql_access_mode::Exclusive as c_int => ProducerAccessMode::Exclusive,
            m if m == mql_access_mode::WaitForExclusive as c_int => {
                ProducerAccessMode::WaitForExclusive
            }
            m if m == mql_access_mode::Shared as c_int => ProducerAccessMode::Shared,
            m => {
                return Err(Failure::invalid(format!(
                    "access mode must be one of the mql_access_mode values, got {m}"
                )));
            }
        }
    )
}

/// Turns on automatic numbering (Pulsar's `initialSequenceId`): every
/// record sent without a sequence (`mql_record.sequence` < 0) gets the
/// producer's next one, the first being `first` or
/// `mql_producer_last_sequence` + 1 when that is higher, so a restarted
/// producer never reuses a number and re-sent records are deduplicated. A
/// record with its own sequence keeps it and moves the counter past it.
/// Sends of such a producer are serialised (numbers reach each partition in
/// order). Needs a named producer, not in `MQL_ACCESS_MODE_SHARED`
/// (`mql_producer_new` fails with `MQL_INVALID_ARGUMENT` otherwise).
///
/// Errors: `MQL_INVALID_ARGUMENT` when `first` < 0.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_initial_sequence(
    config: *mut mql_producer_config,
    first: i64,
) -> mql_status {
    set!(
        config,
        initial_sequence = Some(valid(first, first >= 0, || {
            format!("initial_sequence must be at least 0, got {first}")
        })?)
    )
}
/// Where a consumer starts when it has no valid position (Kafka's
/// `auto.offset.reset`).
///
/// cbindgen:prefix-with-name
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mql_offset_reset {
    /// The first retained offset (the default).
    Earliest = 0,
    /// The end: only records written from now on.
    Latest = 1,
    /// Fail with `MQL_OFFSET_OUT_OF_RANGE`.
    Error = 2,
}

/// Settings of a consumer, for `mql_consumer_new`.
pub struct mql_consumer_config {
    pub(crate) inner: ConsumerConfig,
}

/// Makes a consumer config with the defaults (`MQL_OFFSET_RESET_EARLIEST`,
/// at most 500 records fetched per internal poll, client id `"consumer"`,
/// strategy `"averagely"`, auto-commit on every 5000 ms, max poll interval
/// 300,000 ms, broadcast off).
///
/// Ownership: on `MQL_OK`, `*out` is a new config owned by the caller;
/// release it with `mql_consumer_config_free` (`mql_consumer_new` copies
/// it).
///
/// # Safety
/// `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_new(out: *mut *mut mql_consumer_config) -> mql_status {
    guard(|| {
        let out = out!(out);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe {
            out.write(into_handle(mql_consumer_config {
                inner: ConsumerConfig::default(),
            }));
        };
        Ok(())
    })
}

/// Releases a config made by `mql_consumer_config_new`. NULL does nothing.
///
/// Ownership: takes back the config the caller owned; do not use it afterwards.
///
/// # Safety
/// `config` is NULL or a live config from `mql_consumer_config_new`, not
/// used again.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_free(config: *mut mql_consumer_config) {
    free!(config);
}

/// Where to start without a valid position: one of the `mql_offset_reset`
/// values (passed as `int`, so that any value is safe to pass; others give
/// `MQL_INVALID_ARGUMENT`).
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_auto_offset_reset(
    config: *mut mql_consumer_config,
    reset: c_int,
) -> mql_status {
    set!(
        config,
        auto_offset_reset = match reset {
            r if r == mql_offset_reset::Earliest as c_int => OffsetReset::Earliest,
            r if r == mql_offset_reset::Latest as c_int => OffsetReset::Latest,
            r if r == mql_offset_reset::Error as c_int => OffsetReset::Error,
            r => {
                return Err(Failure::invalid(format!(
                "auto_offset_reset must be MQL_OFFSET_RESET_EARLIEST, _LATEST or _ERROR, got {r}"
            )));
            }
        }
    )
}

/// Most records the consumer fetches from the engine at once (default 500,
/// at least 1, else `MQL_INVALID_ARGUMENT`). `mql_poll` hands them out one
/// at a time.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_max_poll_records(
    config: *mut mql_consumer_config,
    n: usize,
) -> mql_status {
    set!(
        config,
        max_poll_records = valid(n, n > 0, || "max_poll_records must be at least 1")?
    )
}

/// This consumer's name (default `"consumer"`): the start of its member id
/// in a group (`<client_id>-<number>`) and, in broadcast mode, the name its
/// offsets are stored under (`<group_id>+<client_id>`, at most 243 bytes,
/// checked by `mql_consumer_new`). 1 to 249 characters of
/// `[A-Za-z0-9._-]`, not `.` or `..` (`MQL_INVALID_ARGUMENT` otherwise).
///
/// Ownership: borrows `config` and `client_id` for the call (the name is
/// copied).
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile; `client_id` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_client_id(
    config: *mut mql_consumer_config,
    client_id: *const c_char,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        let id = arg!(str client_id);
        mqlite::validate_topic_name(id).map_err(|e| match e {
            mqlite::Error::InvalidTopicName { reason, .. } => {
                Failure::invalid(format!("client_id {id:?}: {reason}"))
            }
            other => Failure::from(other),
        })?;
        id.clone_into(&mut c.inner.client_id);
        Ok(())
    })
}

/// How a group shares partitions among its members: `"averagely"` (the
/// default; also `"range"`: each member a contiguous range per topic),
/// `"round_robin"` (also `"by_circle"`), `"consistent_hash"`, `"sticky"`
/// (moves as few partitions as possible) or `"by_config"` (each member gets
/// the partitions it asks for with `mql_consumer_config_add_wanted_partition`).
/// ASCII case is ignored and `-` reads as `_`; other names give
/// `MQL_INVALID_ARGUMENT`. Every member of a group must use the same
/// strategy (`mql_subscribe` fails with `MQL_INVALID_ARGUMENT` otherwise).
///
/// Ownership: borrows `config` and `strategy` for the call.
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile; `strategy` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_assignment_strategy(
    config: *mut mql_consumer_config,
    strategy: *const c_char,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        let name = arg!(str strategy);
        c.inner.assignment_strategy = name.parse::<AssignmentStrategy>()?;
        Ok(())
    })
}

/// Adds partition `partition` of `topic` to the partitions this member asks
/// for under the `"by_config"` strategy (ignored by the others). A
/// partition wanted by several members goes to the one with the smallest
/// member id; partitions nobody wants are read by nobody. Adding one twice
/// is harmless. The topic is not checked here (a partition of a topic the
/// member does not subscribe to, or that does not exist, is never
/// assigned).
///
/// Ownership: borrows `config` and `topic` for the call (the name is
/// copied).
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile; `topic` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_add_wanted_partition(
    config: *mut mql_consumer_config,
    topic: *const c_char,
    partition: u32,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        let topic = arg!(str topic);
        let wanted = &mut c.inner.wanted_partitions;
        if !wanted.iter().any(|(t, p)| t == topic && *p == partition) {
            wanted.push((topic.to_owned(), partition));
        }
        Ok(())
    })
}

/// Whether a group consumer commits automatically (default true): the
/// position of every partition it reads, every `auto_commit_interval_ms`
/// (checked when `mql_poll` fetches from the engine), before a partition is
/// revoked in a rebalance, and at `mql_consumer_close` /
/// `mql_consumer_free`. The position counts exactly the messages `mql_poll`
/// handed out: messages fetched but not yet handed out are not committed.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_enable_auto_commit(
    config: *mut mql_consumer_config,
    on: bool,
) -> mql_status {
    set!(config, enable_auto_commit = on)
}

/// How durable a commit is when it returns, as a producer's `acks`: -1
/// (all, the default: synced to disk, survives a crash of the machine;
/// commits made at once by several threads share one sync), 1 or 0
/// (written to the operating system: survives a crash of the process,
/// not of the machine, at the cost of a `write(2)`). Other values give
/// `MQL_INVALID_ARGUMENT`.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_commit_acks(
    config: *mut mql_consumer_config,
    acks: i32,
) -> mql_status {
    set!(config, commit_acks = Acks::from_i32(acks)?)
}

/// Interval of automatic commits in milliseconds (default 5000; 0 commits
/// at every fetch from the engine).
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_auto_commit_interval_ms(
    config: *mut mql_consumer_config,
    interval_ms: u64,
) -> mql_status {
    set!(config, auto_commit_interval_ms = interval_ms)
}

/// A group member that does not fetch from the engine for this many
/// milliseconds (default 300,000; at least 1, else `MQL_INVALID_ARGUMENT`)
/// is removed from its group and its partitions go to the others (it joins
/// again at its next `mql_poll`). `mql_poll` fetches when it has handed out
/// every message of the previous fetch (at most `max_poll_records`), so
/// this bounds the time to process one fetch.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_max_poll_interval_ms(
    config: *mut mql_consumer_config,
    interval_ms: u64,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        if interval_ms == 0 {
            return Err(Failure::invalid("max_poll_interval_ms must be at least 1"));
        }
        c.inner.max_poll_interval_ms = interval_ms;
        Ok(())
    })
}

/// Broadcast mode (RocketMQ's broadcasting; default false): every consumer
/// of the group reads every partition of its subscription, with committed
/// offsets of its own, stored under `<group_id>+<client_id>` (give each
/// consumer its own client id). Needs a group id: `mql_consumer_new` fails
/// with `MQL_INVALID_ARGUMENT` without one.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_broadcast(
    config: *mut mql_consumer_config,
    on: bool,
) -> mql_status {
    set!(config, broadcast = on)
}

/// Whether each message `mql_poll` hands out counts as processed for
/// commits (default true). Off, commits (`mql_commit`, automatic ones and
/// those on close or revoke) take only the offsets stored with
/// `mql_store_offsets`: store after processing for at-least-once delivery.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_enable_auto_offset_store(
    config: *mut mql_consumer_config,
    on: bool,
) -> mql_status {
    set!(config, enable_auto_offset_store = on)
}
