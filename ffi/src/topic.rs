//! Reading topics: a topic's description (`mql_topic_describe`: its
//! configuration and each partition's offsets, size and recovery counters),
//! the offset of a time (`mql_offset_for_timestamp`), and the key
//! partitioner (`mql_partition_for_key`, `mql_murmur2`).

use std::ffi::{c_char, c_void, CString};
use std::ptr;

use mqlite::{PartitionInfo, TopicConfig, TopicInfo};

use crate::broker::{mql_broker, mql_recovery_stats};
use crate::error::{c_text, guard, guard_value, mql_status, Failure};
use crate::producer::MQL_OFFSET_UNKNOWN;
use crate::util::{arg, free, into_handle, out};

/// A topic's configuration as plain values (`mql_topic_info_config`): what
/// `mql_topic_config_*` set when it was created, and `mql_topic_add_partitions`
/// since.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct mql_topic_settings {
    /// Number of partitions.
    pub partitions: u32,
    /// Most bytes of log in each segment file (the file grows in steps up
    /// to it, from 64 KiB), in bytes.
    pub segment_bytes: u64,
    /// Closed segments whose newest record is older than this many
    /// milliseconds are deleted; -1: kept forever.
    pub retention_ms: i64,
    /// The oldest closed segments are deleted while a partition holds more
    /// than this many bytes; -1: no limit.
    pub retention_bytes: i64,
    /// Largest encoded record (a batch of one) accepted, in bytes.
    pub max_message_bytes: u32,
    /// Bytes of log between two entries of the sparse indexes.
    pub index_interval_bytes: u32,
    /// Records are stamped with the time they are appended (Kafka's
    /// `LogAppendTime`) instead of the producer's.
    pub log_append_time: bool,
    /// Time retention keeps the segments some consumer group has not
    /// committed past.
    pub retention_respects_groups: bool,
}

/// `Some(v)` as `v` (at most `INT64_MAX`), `None` as -1.
fn limit(v: Option<u64>) -> i64 {
    v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

impl From<&TopicConfig> for mql_topic_settings {
    fn from(c: &TopicConfig) -> Self {
        mql_topic_settings {
            partitions: c.partitions,
            segment_bytes: c.segment_bytes,
            retention_ms: limit(c.retention_ms),
            retention_bytes: limit(c.retention_bytes),
            max_message_bytes: c.max_message_bytes,
            index_interval_bytes: c.index_interval_bytes,
            log_append_time: c.log_append_time,
            retention_respects_groups: c.retention_respects_groups,
        }
    }
}

/// One partition of a topic description (`mql_topic_info_partition`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct mql_partition_info {
    /// Partition number.
    pub partition: u32,
    /// First retained offset.
    pub start_offset: u64,
    /// Offset the next record will get (`end_offset - start_offset`
    /// records are retained).
    pub end_offset: u64,
    /// Bytes of log on disk.
    pub size_bytes: u64,
    /// Number of segment files.
    pub segments: u64,
    /// Flushes to disk since the data directory was opened (concurrent
    /// `acks = -1` senders share them).
    pub flushes: u64,
    /// What recovery found and repaired in it when the data directory was
    /// opened (as `mql_partition_recovery`).
    pub recovery: mql_recovery_stats,
}

impl From<&PartitionInfo> for mql_partition_info {
    fn from(p: &PartitionInfo) -> Self {
        mql_partition_info {
            partition: p.partition,
            start_offset: p.start_offset,
            end_offset: p.end_offset,
            size_bytes: p.size_bytes,
            segments: p.segments as u64,
            flushes: p.flushes,
            recovery: p.recovery.into(),
        }
    }
}

/// A snapshot of a topic (`mql_topic_describe`): its name, configuration
/// and partitions, taken at the call. Read it with the `mql_topic_info_*`
/// accessors; release it with `mql_topic_info_free`. Immutable: safe to
/// read from several threads at once.
pub struct mql_topic_info {
    name: CString,
    config: mql_topic_settings,
    partitions: Vec<mql_partition_info>,
}

impl From<TopicInfo> for mql_topic_info {
    fn from(t: TopicInfo) -> Self {
        mql_topic_info {
            config: mql_topic_settings::from(&t.config),
            partitions: t.partitions.iter().map(mql_partition_info::from).collect(),
            name: c_text(t.name),
        }
    }
}

/// Describes topic `name`: its configuration and, for each partition, its
/// offsets, size on disk, segment count, flushes and what recovery
/// repaired (the engine's `Broker::topic`, Python's `Broker.topic()`).
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_CORRUPT` or `MQL_UNSUPPORTED_VERSION`
/// (a damaged topic), `MQL_CLOSED`.
///
/// Ownership: on `MQL_OK`, `*out` is a new topic info owned by the caller;
/// release it with `mql_topic_info_free`.
///
/// # Safety
/// `broker` is NULL or a live broker; `name` is NULL or a NUL-terminated
/// string; `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_describe(
    broker: *mut mql_broker,
    name: *const c_char,
    out: *mut *mut mql_topic_info,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let name = arg!(str name);
        let out = out!(out);
        let info = mql_topic_info::from(b.inner.topic(name)?);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(info)) };
        Ok(())
    })
}

/// Releases a topic info. NULL does nothing.
///
/// Ownership: takes back the topic info the caller owned; the name its
/// accessor returned dies with it.
///
/// # Safety
/// `info` is NULL or a live topic info from `mql_topic_describe`, not used
/// again.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_info_free(info: *mut mql_topic_info) {
    free!(info);
}

/// The topic's name; NULL if `info` is NULL.
///
/// Ownership: owned by the topic info, valid until `mql_topic_info_free`.
///
/// # Safety
/// `info` is NULL or a live topic info.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_info_name(info: *const mql_topic_info) -> *const c_char {
    guard_value(ptr::null(), || {
        let t = arg!(ref info else ptr::null());
        t.name.as_ptr()
    })
}

/// The topic's configuration, into `*out`.
///
/// Ownership: borrows every argument for the call; the result is plain
/// values; nothing to free.
///
/// # Safety
/// `info` is NULL or a live topic info; `out` is NULL or valid for writing
/// an `mql_topic_settings`.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_info_config(
    info: *const mql_topic_info,
    out: *mut mql_topic_settings,
) -> mql_status {
    guard(|| {
        let t = arg!(ref info);
        let out = out!(out);
        // SAFETY: valid for writes by the caller's contract.
        unsafe { out.write(t.config) };
        Ok(())
    })
}

/// Number of partitions described; 0 if `info` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `info` is NULL or a live topic info.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_info_partition_count(info: *const mql_topic_info) -> usize {
    guard_value(0, || {
        let t = arg!(ref info else 0);
        t.partitions.len()
    })
}

/// Partition `index` (0-based: partition `index` of the topic) into `*out`.
///
/// Errors: `MQL_INVALID_ARGUMENT` when `index` is not below
/// `mql_topic_info_partition_count`.
///
/// Ownership: borrows every argument for the call; the result is plain
/// values; nothing to free.
///
/// # Safety
/// `info` is NULL or a live topic info; `out` is NULL or valid for writing
/// an `mql_partition_info`.
#[no_mangle]
pub unsafe extern "C" fn mql_topic_info_partition(
    info: *const mql_topic_info,
    index: usize,
    out: *mut mql_partition_info,
) -> mql_status {
    guard(|| {
        let t = arg!(ref info);
        let out = out!(out);
        let p = t.partitions.get(index).ok_or_else(|| {
            Failure::invalid(format!(
                "partition index {index} is out of range (the topic has {})",
                t.partitions.len()
            ))
        })?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe { out.write(*p) };
        Ok(())
    })
}

/// The earliest offset of `topic`/`partition` whose record timestamp is at
/// or after `timestamp_ms`, into `*offset`; `MQL_OFFSET_UNKNOWN` when every
/// record is older (the engine's `Broker::offset_for_timestamp`; a
/// consumer's `mql_offsets_for_times` does the same for many partitions).
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION`, `MQL_CLOSED`, I/O
/// and corruption errors reading the time index.
///
/// Ownership: borrows every argument for the call; the result is a plain
/// value; nothing to free.
///
/// # Safety
/// `broker` is NULL or a live broker; `topic` is NULL or a NUL-terminated
/// string; `offset` is NULL or valid for writing a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_offset_for_timestamp(
    broker: *mut mql_broker,
    topic: *const c_char,
    partition: u32,
    timestamp_ms: i64,
    offset: *mut u64,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let topic = arg!(str topic);
        let offset = out!(offset);
        let o = b
            .inner
            .offset_for_timestamp(topic, partition, timestamp_ms)?
            .unwrap_or(MQL_OFFSET_UNKNOWN);
        // SAFETY: valid for writes by the caller's contract.
        unsafe { offset.write(o) };
        Ok(())
    })
}

/// The partition Kafka's default partitioner picks for the `key_len` bytes
/// of `key` among `partitions`, into `*out`: `(murmur2(key) & 0x7fffffff) %
/// partitions`, where a keyed record without an explicit partition goes.
/// `key` may be NULL only with `key_len` 0 (the empty key).
///
/// Errors: `MQL_INVALID_ARGUMENT` when `partitions` is 0.
///
/// Ownership: borrows every argument for the call; the result is a plain
/// value; nothing to free.
///
/// # Safety
/// `key` is NULL or valid for reads of `key_len` bytes; `out` is NULL or
/// valid for writing a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_partition_for_key(
    key: *const c_void,
    key_len: usize,
    partitions: u32,
    out: *mut u32,
) -> mql_status {
    guard(|| {
        let key = arg!(bytes key, key_len).unwrap_or(&[]);
        let out = out!(out);
        if partitions == 0 {
            return Err(Failure::invalid("partitions must be at least 1, got 0"));
        }
        let p = mqlite::partition_for_key(key, partitions);
        // SAFETY: valid for writes by the caller's contract.
        unsafe { out.write(p) };
        Ok(())
    })
}

/// Kafka's murmur2 hash (seed `0x9747b28c`) of the `len` bytes of `data`,
/// as a signed 32-bit value, into `*out`. `data` may be NULL only with
/// `len` 0.
///
/// Ownership: borrows every argument for the call; the result is a plain
/// value; nothing to free.
///
/// # Safety
/// `data` is NULL or valid for reads of `len` bytes; `out` is NULL or valid
/// for writing an `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_murmur2(data: *const c_void, len: usize, out: *mut i32) -> mql_status {
    guard(|| {
        let data = arg!(bytes data, len).unwrap_or(&[]);
        let out = out!(out);
        let h = mqlite::murmur2(data);
        // SAFETY: valid for writes by the caller's contract.
        unsafe { out.write(h) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_map_none_to_minus_one() {
        assert_eq!(limit(None), -1);
        assert_eq!(limit(Some(0)), 0);
        assert_eq!(limit(Some(7)), 7);
        assert_eq!(limit(Some(u64::MAX)), i64::MAX);
    }
}
