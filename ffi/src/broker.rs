//! The data-directory handle and topic administration.

use std::ffi::c_char;

use mqlite::{Broker, Config, OpenMode, PartitionInfo, TopicConfig};

use crate::config::{mql_config, mql_topic_config};
use crate::error::{guard, mql_status, Failure, FfiResult};
use crate::util::{arg, into_handle, out};

/// An open data directory (the engine's `Broker`). Made by `mql_open`,
/// closed and released by `mql_close`. Safe to use from several threads at
/// once.
pub struct mql_broker {
    pub(crate) inner: Broker,
}

/// Opens (creating if needed) the data directory at `path` in the mode the
/// config asks for (`mql_config_set_mode`; `mql_mode` tells which one
/// "auto" took) and recovers every topic. `config` may be NULL for the
/// defaults; it is copied, so it may be freed right after. On Unix `path`
/// may be any bytes (it is not required to be UTF-8).
///
/// With a `kafka://host:port,...` address instead of a directory, the
/// broker, its producers and its consumers are a Kafka cluster's, with the
/// same calls and statuses (docs/kafka.md says what differs); librdkafka
/// properties come from `mql_config_set_kafka_property`.
///
/// Fails with `MQL_LOCKED` in exclusive mode when another handle (in this
/// process or another) holds the directory, and in shared mode while a
/// process holds it in exclusive mode; the error text names the holder.
/// Fails with `MQL_INVALID_CONFIG` for shared mode ("shared") on a network
/// filesystem.
///
/// Ownership: on `MQL_OK`, `*out` is a new broker owned by the caller;
/// close and release it with `mql_close`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `config` is NULL or a live
/// config; `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_open(
    path: *const c_char,
    config: *const mql_config,
    out: *mut *mut mql_broker,
) -> mql_status {
    guard(|| {
        let path = arg!(path path);
        let config = arg!(opt_ref config);
        let out = out!(out);
        let config = config.map_or_else(Config::default, |c| c.inner.clone());
        let inner = Broker::open(path, config)?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(mql_broker { inner })) };
        Ok(())
    })
}

/// How processes share the data directory (the engine's `OpenMode`):
/// "exclusive" (the default), "shared", or "auto" (shared mode on a local
/// filesystem, exclusive mode on a network or user-space one such as NFS,
/// CIFS, 9p or FUSE); ASCII case is ignored.
///
/// In shared mode any number of processes open the directory at once, and
/// every one of them produces, consumes, joins consumer groups and changes
/// topics; a second `mql_open` of it in this process shares one engine with
/// the first. In exclusive mode one handle owns the directory. See
/// docs/shared-mode.md.
///
/// Errors: `MQL_INVALID_ARGUMENT` for another name (the config is left as
/// it was).
///
/// Ownership: borrows `config` and `mode` for the call.
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile;
/// `mode` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_mode(
    config: *mut mql_config,
    mode: *const c_char,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        let mode = arg!(str mode).parse::<OpenMode>()?;
        c.inner = c.inner.clone().mode(mode);
        Ok(())
    })
}

/// The mode the directory is open in, "shared" or "exclusive" (never
/// "auto": what it took), to `*mode`: a static string, valid for the life
/// of the program. A broker on a Kafka cluster is "shared".
///
/// Ownership: borrows `broker` for the call; `*mode` is not to be freed.
///
/// # Safety
/// `broker` is NULL or a live broker; `mode` is NULL or valid for writing
/// a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_mode(
    broker: *const mql_broker,
    mode: *mut *const c_char,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let out = out!(mode);
        let name = match b.inner.mode() {
            OpenMode::Shared => c"shared",
            OpenMode::Exclusive => c"exclusive",
            OpenMode::Auto => c"auto",
        };
        // SAFETY: `mode` is valid for writes by the caller's contract.
        unsafe { out.write(name.as_ptr()) };
        Ok(())
    })
}

/// Adds a librdkafka property (`key` = `value`, for example
/// `security.protocol` = `SSL`) for a broker opened on a Kafka cluster
/// address, plus `replication.factor` of the topics it creates and
/// `request.timeout.ms`; a data directory ignores them. Properties
/// librdkafka refuses fail `mql_open` with `MQL_INVALID_CONFIG`.
///
/// Ownership: borrows `config`, `key` and `value` for the call (they are
/// copied).
///
/// # Safety
/// `config` is NULL or a live config not used by another thread meanwhile;
/// `key` and `value` are NULL or NUL-terminated UTF-8 strings.
#[no_mangle]
pub unsafe extern "C" fn mql_config_set_kafka_property(
    config: *mut mql_config,
    key: *const c_char,
    value: *const c_char,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        let key = arg!(str key);
        let value = arg!(str value);
        c.inner
            .kafka_properties
            .push((key.to_owned(), value.to_owned()));
        Ok(())
    })
}

/// Flushes everything to disk, stops background work, releases the
/// directory lock and frees the broker, whatever the flush returned. NULL
/// does nothing and returns `MQL_OK`. Producers and consumers made from this
/// broker stay valid handles (free them as usual) but their calls fail with
/// `MQL_CLOSED`; messages already received stay readable.
///
/// Every file descriptor and memory mapping of the data directory is
/// released before this returns, whatever producers and consumers are
/// still alive; a message still alive (or fetched by a consumer and not
/// yet handed out by `mql_poll`) keeps its segment mapped, so its bytes
/// stay readable, until it is freed.
///
/// Returns the status of the final flush.
///
/// Ownership: takes back and frees `broker` whatever the status; do not use it afterwards.
///
/// # Safety
/// `broker` is NULL or a live broker from `mql_open`, not used again (by any
/// thread) once this is called.
#[no_mangle]
pub unsafe extern "C" fn mql_close(broker: *mut mql_broker) -> mql_status {
    guard(|| {
        if broker.is_null() {
            return Ok(());
        }
        if !broker.is_aligned() {
            return Err(Failure::invalid("argument `broker` is misaligned"));
        }
        // SAFETY: a live broker from mql_open (Box::into_raw), released
        // exactly once by the caller's contract.
        let broker = unsafe { Box::from_raw(broker) };
        let result = broker.inner.close();
        drop(broker);
        result.map_err(Failure::from)
    })
}

/// Flushes every partition of every topic to disk (the engine's
/// `Broker::flush`): once it returns, everything written so far survives a
/// crash of the machine, whatever `acks` it was sent with.
///
/// Errors: `MQL_CLOSED`, I/O errors (`MQL_IO`, `MQL_DISK_FULL`), and
/// `MQL_POISONED` for a partition an earlier failed write or flush
/// poisoned.
///
/// Ownership: borrows `broker` for the call; nothing to free.
///
/// # Safety
/// `broker` is NULL or a live broker.
#[no_mangle]
pub unsafe extern "C" fn mql_flush(broker: *mut mql_broker) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        b.inner.flush()?;
        Ok(())
    })
}

/// Applies every topic's retention now (the engine's
/// `Broker::enforce_retention`; the background thread does it every
/// `retention_check_interval_ms`, segment rolls too): deletes the closed
/// segments older than `retention_ms` or beyond `retention_bytes`. The
/// number of segments deleted goes to `*deleted`.
///
/// Errors: `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; the result is a plain
/// value; nothing to free.
///
/// # Safety
/// `broker` is NULL or a live broker; `deleted` is NULL or valid for
/// writing a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_enforce_retention(
    broker: *mut mql_broker,
    deleted: *mut usize,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let deleted = out!(deleted);
        let n = b.inner.enforce_retention()?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe { deleted.write(n) };
        Ok(())
    })
}

/// Creates a topic. `config` may be NULL for one partition and the default
/// settings; it is copied.
///
/// Errors: `MQL_INVALID_TOPIC_NAME`, `MQL_INVALID_CONFIG`,
/// `MQL_TOPIC_EXISTS`, `MQL_CLOSED`, I/O errors.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `broker` is NULL or a live broker; `name` is NULL or a NUL-terminated
/// string; `config` is NULL or a live topic config.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_create(
    broker: *mut mql_broker,
    name: *const c_char,
    config: *const mql_topic_config,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let name = arg!(str name);
        let config = arg!(opt_ref config);
        let config = config.map_or_else(TopicConfig::default, |c| c.inner.clone());
        b.inner.create_topic(name, config)?;
        Ok(())
    })
}

/// Deletes a topic and its data. Messages already received from it stay
/// readable until freed.
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_CLOSED`, I/O errors.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `broker` is NULL or a live broker; `name` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_delete(
    broker: *mut mql_broker,
    name: *const c_char,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let name = arg!(str name);
        b.inner.delete_topic(name)?;
        Ok(())
    })
}

/// Grows topic `name` to `total` partitions in all, keeping existing data.
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_INVALID_CONFIG` (fewer partitions than
/// now, or too many), `MQL_CLOSED`, I/O errors.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `broker` is NULL or a live broker; `name` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_add_partitions(
    broker: *mut mql_broker,
    name: *const c_char,
    total: u32,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let name = arg!(str name);
        b.inner.add_partitions(name, total)?;
        Ok(())
    })
}

/// Number of partitions of topic `name`, into `*out`.
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; the results are plain values; nothing to free.
///
/// # Safety
/// `broker` is NULL or a live broker; `name` is NULL or a NUL-terminated
/// string; `out` is NULL or valid for writing a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_partition_count(
    broker: *mut mql_broker,
    name: *const c_char,
    out: *mut u32,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let name = arg!(str name);
        let out = out!(out);
        let n = b.inner.topic(name)?.partitions.len() as u32;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// The offsets of one partition: `*start` gets the first retained offset,
/// `*end` the offset the next record will get (so `end - start` records
/// are retained).
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION`, `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; the results are plain values; nothing to free.
///
/// # Safety
/// `broker` is NULL or a live broker; `name` is NULL or a NUL-terminated
/// string; `start` and `end` are NULL or valid for writing a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_offsets(
    broker: *mut mql_broker,
    name: *const c_char,
    partition: u32,
    start: *mut u64,
    end: *mut u64,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let name = arg!(str name);
        let start = out!(start);
        let end = out!(end);
        let p = partition_info(b, name, partition)?;
        // SAFETY: both are valid for writes by the caller's contract.
        unsafe {
            start.write(p.start_offset);
            end.write(p.end_offset);
        }
        Ok(())
    })
}

/// The description of one partition of topic `name`.
fn partition_info(b: &mql_broker, name: &str, partition: u32) -> FfiResult<PartitionInfo> {
    let info = b.inner.topic(name)?;
    let count = info.partitions.len() as u32;
    info.partitions
        .into_iter()
        .find(|p| p.partition == partition)
        .ok_or_else(|| {
            mqlite::Error::UnknownPartition {
                topic: name.to_owned(),
                partition,
                count,
            }
            .into()
        })
}

/// What recovery found and repaired in one partition when the data
/// directory was opened (`mql_partition_recovery`). All zero for a
/// partition whose log was intact.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct mql_recovery_stats {
    /// Bytes removed from the tail of the active segment.
    pub truncated_bytes: u64,
    /// Batches removed (damaged or partial ones and any valid ones after
    /// them).
    pub dropped_batches: u64,
    /// Truncations of a torn tail (a partial last write).
    pub torn_tails: u64,
    /// Damage found where no torn write can be: followed by more data, in
    /// a log closed cleanly, or in a sealed segment.
    pub corruptions: u64,
    /// Records below the recovery point (acknowledged as written) that the
    /// log no longer holds: a cut, emptied or missing segment file.
    pub lost_records: u64,
    /// Bytes of damaged log moved aside for inspection (next to the
    /// segment, as `<base>.log.damaged-<position>`) instead of dropped.
    pub quarantined_bytes: u64,
    /// Transactions whose records a crash left before their commit point:
    /// cut (they were never readable).
    pub abandoned_transactions: u64,
}

impl From<mqlite::RecoveryStats> for mql_recovery_stats {
    fn from(r: mqlite::RecoveryStats) -> Self {
        mql_recovery_stats {
            truncated_bytes: r.truncated_bytes,
            dropped_batches: r.dropped_batches,
            torn_tails: r.torn_tails,
            corruptions: r.corruptions,
            lost_records: r.lost_records,
            quarantined_bytes: r.quarantined_bytes,
            abandoned_transactions: r.abandoned_transactions,
        }
    }
}

/// What recovery found and repaired in partition `partition` of topic
/// `name` when the data directory was opened, into `*out` (the engine also
/// logs each repair; see `mql_set_log_callback`).
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION`, `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; the results are plain values; nothing to free.
///
/// # Safety
/// `broker` is NULL or a live broker; `name` is NULL or a NUL-terminated
/// string; `out` is NULL or valid for writing an `mql_recovery_stats`.
#[no_mangle]
pub unsafe extern "C" fn mql_partition_recovery(
    broker: *mut mql_broker,
    name: *const c_char,
    partition: u32,
    out: *mut mql_recovery_stats,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let name = arg!(str name);
        let out = out!(out);
        let p = partition_info(b, name, partition)?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(p.recovery.into()) };
        Ok(())
    })
}
