//! Producers and the records they send.

use std::ffi::{c_char, c_void};

use mqlite::{BorrowedRecord, Header, Producer, ProducerConfig, RecordMetadata};

use crate::broker::mql_broker;
use crate::config::mql_producer_config;
use crate::error::{guard, guard_value, mql_status, Failure, FfiResult};
use crate::util::{arg_bytes, arg_ref, arg_slice, arg_str, free_handle, into_handle, opt_ref, Out};

/// Sends records to the topics of one data directory. Made by
/// `mql_producer_new`, released by `mql_producer_free`. Safe to use from
/// several threads at once.
pub struct mql_producer {
    inner: Producer,
}

/// `mql_record.partition` value: choose the partition from the key's hash
/// (as Kafka's default partitioner), or round-robin when there is no key.
pub const MQL_PARTITION_ANY: i64 = -1;

/// `mql_record.timestamp` value: stamp the record with the current time.
pub const MQL_TIMESTAMP_NOW: i64 = -1;

/// One record header, borrowed from the caller for the duration of the call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mql_header {
    /// The header name: `name_len` bytes of UTF-8 (no NUL needed; must not
    /// be NULL).
    pub name: *const c_char,
    /// Length of `name` in bytes.
    pub name_len: usize,
    /// The header value: `value_len` bytes (may be NULL when `value_len` is
    /// 0).
    pub value: *const c_void,
    /// Length of `value` in bytes.
    pub value_len: usize,
}

/// A record to send with `mql_send_record`. Every pointer is borrowed for
/// the duration of the call only. Initialise with `MQL_RECORD_INIT`, which
/// sets `partition` to `MQL_PARTITION_ANY` and `timestamp` to
/// `MQL_TIMESTAMP_NOW`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mql_record {
    /// Destination topic, NUL-terminated (required).
    pub topic: *const c_char,
    /// Partition, or `MQL_PARTITION_ANY` (-1) to choose by the key's hash,
    /// or round-robin without a key.
    pub partition: i64,
    /// The key, or NULL for none (then `key_len` must be 0).
    pub key: *const c_void,
    /// Length of `key` in bytes.
    pub key_len: usize,
    /// The value, or NULL for a null value (a tombstone; then `value_len`
    /// must be 0). Non-NULL with length 0 is an empty value.
    pub value: *const c_void,
    /// Length of `value` in bytes.
    pub value_len: usize,
    /// `header_count` headers, in order (names may repeat); NULL when
    /// `header_count` is 0.
    pub headers: *const mql_header,
    /// Number of headers.
    pub header_count: usize,
    /// Create time in milliseconds since the Unix epoch, or
    /// `MQL_TIMESTAMP_NOW` (-1).
    pub timestamp: i64,
}

/// Where a record was written.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mql_metadata {
    /// The partition.
    pub partition: u32,
    /// The record's offset in the partition.
    pub offset: u64,
    /// The record's timestamp (ms since the Unix epoch).
    pub timestamp: i64,
}

impl From<&RecordMetadata> for mql_metadata {
    fn from(md: &RecordMetadata) -> Self {
        mql_metadata {
            partition: md.partition,
            offset: md.offset,
            timestamp: md.timestamp,
        }
    }
}

/// Makes a producer. `config` may be NULL for the defaults (acks = 1); it is
/// copied.
///
/// Ownership: on `MQL_OK`, `*out` is a new producer owned by the caller;
/// release it with `mql_producer_free` (before or after `mql_close` of its
/// broker).
///
/// # Safety
/// `broker` is NULL or a live broker; `config` is NULL or a live producer
/// config; `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_new(
    broker: *mut mql_broker,
    config: *const mql_producer_config,
    out: *mut *mut mql_producer,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all three).
        let b = unsafe { arg_ref(broker, "broker") }?;
        // SAFETY: as above.
        let config = unsafe { opt_ref(config, "config") }?;
        let out = Out::new(out, "out")?;
        let config = config.map_or_else(ProducerConfig::default, |c| c.inner.clone());
        let inner = b.inner.producer(config)?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(mql_producer { inner })) };
        Ok(())
    })
}

/// Releases a producer. NULL does nothing.
///
/// Ownership: takes back the producer the caller owned; do not use it afterwards.
///
/// # Safety
/// `producer` is NULL or a live producer from `mql_producer_new`, not used
/// again (by any thread).
#[no_mangle]
pub unsafe extern "C" fn mql_producer_free(producer: *mut mql_producer) {
    // SAFETY: forwarded caller contract.
    guard_value((), || unsafe { free_handle(producer) })
}

fn send(
    p: &mql_producer,
    record: &BorrowedRecord<'_>,
    out: Option<Out<mql_metadata>>,
) -> FfiResult {
    let md = p.inner.send_borrowed(record)?;
    if let Some(out) = out {
        // SAFETY: `out` was checked by the caller of this function and is
        // valid for writes by its caller's contract.
        unsafe { out.write(mql_metadata::from(&md)) };
    }
    Ok(())
}

/// Sends one record to `topic` and returns once it is as durable as the
/// producer's acks level asks. `key` NULL means no key (then `key_len` must
/// be 0); `value` NULL means a null value, a tombstone (then `value_len`
/// must be 0); non-NULL with length 0 is an empty key or value. Same key,
/// same partition (Kafka's murmur2 partitioner); no key, round-robin.
///
/// `out` may be NULL when the caller does not want the metadata; otherwise
/// it receives where the record was written.
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_MESSAGE_TOO_LARGE`, `MQL_CLOSED`
/// (after `mql_close` of the broker), I/O errors.
///
/// Ownership: everything is borrowed for the duration of the call.
///
/// # Safety
/// `producer` is NULL or a live producer; `topic` is NULL or a
/// NUL-terminated string; `key` and `value` are NULL or readable for
/// `key_len` and `value_len` bytes; `out` is NULL or valid for writing an
/// `mql_metadata`.
#[no_mangle]
pub unsafe extern "C" fn mql_send(
    producer: *mut mql_producer,
    topic: *const c_char,
    key: *const c_void,
    key_len: usize,
    value: *const c_void,
    value_len: usize,
    out: *mut mql_metadata,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all the pointers).
        let p = unsafe { arg_ref(producer, "producer") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        // SAFETY: as above.
        let key = unsafe { arg_bytes(key, key_len, "key") }?;
        // SAFETY: as above.
        let value = unsafe { arg_bytes(value, value_len, "value") }?;
        let out = Out::optional(out, "out")?;
        let record = BorrowedRecord {
            topic,
            partition: None,
            key,
            value,
            headers: &[],
            timestamp: None,
        };
        send(p, &record, out)
    })
}

/// Sends one record described by `record` (partition, headers, timestamp
/// included), like `mql_send`. Header names must be UTF-8
/// (`MQL_INVALID_UTF8`). `out` may be NULL.
///
/// Errors: as `mql_send`, plus `MQL_UNKNOWN_PARTITION` and
/// `MQL_INVALID_ARGUMENT` (a partition below -1 or above `UINT32_MAX`, a
/// timestamp below -1).
///
/// Ownership: everything is borrowed for the duration of the call.
///
/// # Safety
/// `producer` is NULL or a live producer; `record` is NULL or points to an
/// `mql_record` whose pointers satisfy what its fields' docs say; `out` is
/// NULL or valid for writing an `mql_metadata`.
#[no_mangle]
pub unsafe extern "C" fn mql_send_record(
    producer: *mut mql_producer,
    record: *const mql_record,
    out: *mut mql_metadata,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all three).
        let p = unsafe { arg_ref(producer, "producer") }?;
        // SAFETY: as above.
        let r = unsafe { arg_ref(record, "record") }?;
        let out = Out::optional(out, "out")?;
        // SAFETY: the record's pointers satisfy its field docs by the
        // caller's contract.
        let topic = unsafe { arg_str(r.topic, "record->topic") }?;
        // SAFETY: as above.
        let key = unsafe { arg_bytes(r.key, r.key_len, "record->key") }?;
        // SAFETY: as above.
        let value = unsafe { arg_bytes(r.value, r.value_len, "record->value") }?;
        // SAFETY: as above.
        let raw_headers = unsafe { arg_slice(r.headers, r.header_count, "record->headers") }?;
        let partition = match r.partition {
            MQL_PARTITION_ANY => None,
            p => Some(u32::try_from(p).map_err(|_| {
                Failure::invalid(format!(
                    "record->partition must be -1 (any) or 0 to 4294967295, got {p}"
                ))
            })?),
        };
        let timestamp = match r.timestamp {
            MQL_TIMESTAMP_NOW => None,
            t if t >= 0 => Some(t),
            t => {
                return Err(Failure::invalid(format!(
                    "record->timestamp must be -1 (now) or at least 0, got {t}"
                )))
            }
        };
        // The engine takes owned header names and values.
        let mut headers = Vec::with_capacity(raw_headers.len());
        for (i, h) in raw_headers.iter().enumerate() {
            if h.name.is_null() {
                return Err(Failure::null(&format!("record->headers[{i}].name")));
            }
            // SAFETY: the header's pointers satisfy mql_header's docs by the
            // caller's contract.
            let name =
                unsafe { arg_bytes(h.name.cast(), h.name_len, "header name") }?.unwrap_or_default();
            let name = std::str::from_utf8(name).map_err(|e| {
                Failure::new(
                    mql_status::MQL_INVALID_UTF8,
                    format!(
                        "record->headers[{i}].name is not valid UTF-8 (bad byte at position {})",
                        e.valid_up_to()
                    ),
                )
            })?;
            // SAFETY: as above.
            let value =
                unsafe { arg_bytes(h.value, h.value_len, &format!("record->headers[{i}].value")) }?
                    .unwrap_or_default();
            headers.push(Header::new(name, value));
        }
        let record = BorrowedRecord {
            topic,
            partition,
            key,
            value,
            headers: &headers,
            timestamp,
        };
        send(p, &record, out)
    })
}

/// Waits until every record sent so far is as durable as the producer's
/// acks level promises.
///
/// Errors: `MQL_CLOSED` after `mql_close` of the broker, I/O errors.
///
/// Ownership: borrows `producer` for the call; nothing to free.
///
/// # Safety
/// `producer` is NULL or a live producer.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_flush(producer: *mut mql_producer) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = unsafe { arg_ref(producer, "producer") }?;
        p.inner.flush()?;
        Ok(())
    })
}
