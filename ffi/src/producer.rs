//! Producers and the records they send: blocking, asynchronous and batch
//! sends, flushing, closing, sequences and statistics.

use std::ffi::{c_char, c_void};
use std::time::Duration;

use mqlite::{BorrowedRecord, Header, Producer, ProducerConfig, Record, RecordMetadata};

use crate::broker::mql_broker;
use crate::callback::{deliver, mql_delivery_callback, UserData};
use crate::config::mql_producer_config;
use crate::error::{guard, mql_status, Failure, FfiResult};
use crate::util::{arg, arg_bytes, arg_slice, arg_str, free, into_handle, out, Out};

/// Sends records to the topics of one data directory. Made by
/// `mql_producer_new`, released by `mql_producer_free`. Safe to use from
/// several threads at once.
pub struct mql_producer {
    pub(crate) inner: Producer,
}

/// `mql_record.partition` value: let the producer choose. A record with a
/// key goes to the partition of the key's hash (Kafka's murmur2
/// partitioner); a record without one goes where the producer's partitioner
/// puts it (sticky by default, see `mql_producer_config_set_partitioner`).
/// A custom selector (`mql_producer_config_set_partitioner_fn`) sees every
/// record whose partition is `MQL_PARTITION_ANY`, keyed or not.
pub const MQL_PARTITION_ANY: i64 = -1;

/// `mql_record.timestamp` value: stamp the record with the current time.
pub const MQL_TIMESTAMP_NOW: i64 = -1;

/// `mql_metadata.offset` value when the offset is not known: a send with
/// `acks = 0` (the record is not written yet when the call returns), or a
/// duplicate whose original is older than the producer's dedup window.
pub const MQL_OFFSET_UNKNOWN: u64 = u64::MAX;

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

/// A record to send with `mql_send_record`, `mql_produce` or
/// `mql_send_batch`. Every pointer is borrowed for the duration of the call
/// only (`mql_produce` copies the data before it returns). Initialise with
/// `MQL_RECORD_INIT`, which sets `partition` to `MQL_PARTITION_ANY`,
/// `timestamp` to `MQL_TIMESTAMP_NOW` and `has_sequence` to false; a
/// zero-filled record (`memset`, `= {0}`) has no sequence either.
///
/// The library also shows records to callbacks in this form (as
/// `mql_record_view`, the same struct): then every pointer is valid only
/// during the callback.
///
/// Compatibility: `sequence` and `has_sequence` were added at the end. Code
/// that initialises records with `MQL_RECORD_INIT`, a zero fill or
/// designated initialisers compiles unchanged; code compiled against the
/// older, shorter struct must be recompiled (no release had it).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct mql_record {
    /// Destination topic, NUL-terminated (required).
    pub topic: *const c_char,
    /// Partition, or `MQL_PARTITION_ANY` (-1) to let the producer choose
    /// (by the key's hash, else by its partitioner).
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
    /// The application's own sequence number (0 or more), used when
    /// `has_sequence` is true; needs an idempotent producer (the default),
    /// and is meant for named ones (`mql_producer_config_set_name`). A
    /// record whose sequence is at or below the last one this producer
    /// wrote to the record's partition is not written again: it is reported
    /// as a duplicate (`mql_metadata.duplicate`) with the original's
    /// offset. Without a key or an explicit partition, a sequenced record
    /// goes to partition `sequence % partitions` (so that a re-send lands
    /// where the original did), unless a custom selector is set. Records
    /// sent without a sequence are numbered by their partition in a space
    /// of their own, so mixing both kinds never drops a record. Records
    /// shown to callbacks without a sequence have -1 here.
    pub sequence: i64,
    /// Whether `sequence` is set.
    pub has_sequence: bool,
}

/// A record shown to a callback (a custom partition selector, an
/// interceptor's `on_send`): the same struct as `mql_record`. Every pointer
/// in it is valid only during the callback; the topic is NUL-terminated.
pub type mql_record_view = mql_record;

/// Where a record was written.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mql_metadata {
    /// The partition.
    pub partition: u32,
    /// The record's offset in the partition, or `MQL_OFFSET_UNKNOWN` when
    /// not known (an `acks = 0` send, or a duplicate whose original is
    /// older than the dedup window).
    pub offset: u64,
    /// The record's timestamp (ms since the Unix epoch).
    pub timestamp: i64,
    /// True when the record was a duplicate (by its sequence) of one already
    /// written, and was not written again; `offset` is then the original's
    /// (or `MQL_OFFSET_UNKNOWN`).
    pub duplicate: bool,
}

impl From<&RecordMetadata> for mql_metadata {
    fn from(md: &RecordMetadata) -> Self {
        mql_metadata {
            partition: md.partition,
            offset: md.offset,
            timestamp: md.timestamp,
            duplicate: md.duplicate,
        }
    }
}

/// What a producer did so far (`mql_producer_get_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct mql_producer_stats {
    /// Records written (duplicates not counted).
    pub records: u64,
    /// Bytes of batches written (batch headers included, after compression).
    pub bytes: u64,
    /// Batches written.
    pub batches: u64,
    /// Records that failed.
    pub errors: u64,
    /// Records dropped as duplicates (by sequence).
    pub duplicates: u64,
    /// Bytes held now: in batches not yet written and in batches waiting
    /// for their `acks = -1` flush.
    pub buffered_bytes: u64,
    /// The most bytes ever held at once (at most `buffer_memory`, unless a
    /// single record is larger: it is let through when nothing else is
    /// held).
    pub peak_buffered_bytes: u64,
    /// `records / batches` (0 when no batch was written).
    pub average_batch_records: f64,
    /// `bytes / batches` (0 when no batch was written).
    pub average_batch_bytes: f64,
    // Retries and fault avoidance.
    /// Sends of key-less records (or batches of them) tried again on
    /// another partition after a partition fault.
    pub retries: u64,
    /// Times a partition was put on the producer's avoid list after a fault
    /// (see `mql_producer_config_set_fault_backoff_ms`).
    pub avoided_partitions: u64,
}

/// A checked `mql_record`, ready to become a `BorrowedRecord` (which
/// borrows its headers, owned here).
pub(crate) struct RecordArgs<'a> {
    topic: &'a str,
    partition: Option<u32>,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Vec<Header>,
    timestamp: Option<i64>,
    sequence: Option<i64>,
}

impl RecordArgs<'_> {
    pub(crate) fn borrowed(&self) -> BorrowedRecord<'_> {
        BorrowedRecord {
            topic: self.topic,
            partition: self.partition,
            key: self.key,
            value: self.value,
            headers: &self.headers,
            timestamp: self.timestamp,
            sequence: self.sequence,
        }
    }

    /// An owned copy of the record.
    pub(crate) fn into_record(self) -> Record {
        Record {
            topic: self.topic.to_owned(),
            partition: self.partition,
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.map(<[u8]>::to_vec),
            headers: self.headers,
            timestamp: self.timestamp,
            sequence: self.sequence,
        }
    }
}

/// Renames the argument in a failure of the `util::arg_*` helpers, which
/// all say "argument `NAME`...": `NAME` becomes `{place}NAME`. Done only on
/// failure, so that a successful send formats nothing.
fn at(place: &dyn Fn() -> String) -> impl Fn(Failure) -> Failure + '_ {
    move |mut f| {
        f.message = f
            .message
            .replacen("argument `", &format!("argument `{}", place()), 1);
        f
    }
}

/// Checks and converts `r`. `place` names the record in error texts
/// (`record->`, `records[3].`), produced only on failure.
///
/// # Safety
/// `r`'s pointers satisfy its field docs and what they point to stays
/// unchanged during `'a`.
pub(crate) unsafe fn record_args<'a>(
    r: &mql_record,
    place: &dyn Fn() -> String,
) -> FfiResult<RecordArgs<'a>> {
    // SAFETY: the record's pointers satisfy its field docs and stay
    // unchanged during 'a, by the caller's contract.
    let topic = unsafe { arg_str(r.topic, "topic") }.map_err(at(place))?;
    // SAFETY: as above.
    let key = unsafe { arg_bytes(r.key, r.key_len, "key") }.map_err(at(place))?;
    // SAFETY: as above.
    let value = unsafe { arg_bytes(r.value, r.value_len, "value") }.map_err(at(place))?;
    // SAFETY: as above.
    let raw_headers =
        unsafe { arg_slice(r.headers, r.header_count, "headers") }.map_err(at(place))?;
    let partition = match r.partition {
        MQL_PARTITION_ANY => None,
        p => Some(u32::try_from(p).map_err(|_| {
            Failure::invalid(format!(
                "{}partition must be -1 (any) or 0 to 4294967295, got {p}",
                place()
            ))
        })?),
    };
    let timestamp = match r.timestamp {
        MQL_TIMESTAMP_NOW => None,
        t if t >= 0 => Some(t),
        t => {
            return Err(Failure::invalid(format!(
                "{}timestamp must be -1 (now) or at least 0, got {t}",
                place()
            )))
        }
    };
    let sequence = match (r.has_sequence, r.sequence) {
        (false, _) => None,
        (true, s) if s >= 0 => Some(s),
        (true, s) => {
            return Err(Failure::invalid(format!(
                "{}sequence must be at least 0, got {s}",
                place()
            )))
        }
    };
    // The engine takes owned header names and values.
    let mut headers = Vec::with_capacity(raw_headers.len());
    for (i, h) in raw_headers.iter().enumerate() {
        let header = || format!("{}headers[{i}].", place());
        if h.name.is_null() {
            return Err(Failure::null(&format!("{}name", header())));
        }
        // SAFETY: the header's pointers satisfy mql_header's docs by the
        // caller's contract.
        let name = unsafe { arg_bytes(h.name.cast(), h.name_len, "name") }
            .map_err(at(&header))?
            .unwrap_or_default();
        let name = std::str::from_utf8(name).map_err(|e| {
            Failure::new(
                mql_status::MQL_INVALID_UTF8,
                format!(
                    "{}name is not valid UTF-8 (bad byte at position {})",
                    header(),
                    e.valid_up_to()
                ),
            )
        })?;
        // SAFETY: as above.
        let value = unsafe { arg_bytes(h.value, h.value_len, "value") }
            .map_err(at(&header))?
            .unwrap_or_default();
        headers.push(Header::new(name, value));
    }
    Ok(RecordArgs {
        topic,
        partition,
        key,
        value,
        headers,
        timestamp,
        sequence,
    })
}

/// Names of the single record argument of `mql_send_record` and
/// `mql_produce`.
fn record_place() -> String {
    "record->".to_owned()
}

/// Makes a producer. `config` may be NULL for the defaults (see
/// `mql_producer_config_new`); it is copied, callbacks included.
///
/// Errors: `MQL_INVALID_ARGUMENT` (a named producer that is not
/// idempotent, a name that every epoch has used), `MQL_CLOSED`, I/O errors
/// (a named or idempotent producer records its id in the data directory).
/// Making a producer with the name of a live one fences that one (its later
/// sends fail with `MQL_PRODUCER_FENCED`).
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
        let b = arg!(ref broker);
        let config = arg!(opt_ref config);
        let out = out!(out);
        let config = config.map_or_else(ProducerConfig::default, |c| c.inner.clone());
        let inner = b.inner.producer(config)?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(mql_producer { inner })) };
        Ok(())
    })
}

/// Closes (as `mql_producer_close`: pending records are written and their
/// callbacks run, on this thread) and releases a producer. NULL does
/// nothing.
///
/// Ownership: takes back the producer the caller owned; do not use it
/// afterwards.
///
/// # Safety
/// `producer` is NULL or a live producer from `mql_producer_new`, not used
/// again (by any thread), and not called from one of its own callbacks.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_free(producer: *mut mql_producer) {
    free!(producer);
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
/// producer's acks level asks (with `acks = 0`: at once, with offset
/// `MQL_OFFSET_UNKNOWN`). `key` NULL means no key (then `key_len` must be
/// 0); `value` NULL means a null value, a tombstone (then `value_len` must
/// be 0); non-NULL with length 0 is an empty key or value. Same key, same
/// partition (Kafka's murmur2 partitioner); without a key, the producer's
/// partitioner chooses (sticky by default).
///
/// `out` may be NULL when the caller does not want the metadata; otherwise
/// it receives where the record was written.
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_MESSAGE_TOO_LARGE`, `MQL_CLOSED`
/// (after `mql_close` of the broker or `mql_producer_close`),
/// `MQL_PRODUCER_FENCED`, `MQL_BUFFER_FULL` (`acks = 0` only), I/O errors.
/// Nothing is written when an error is returned.
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
        let p = arg!(ref producer);
        let topic = arg!(str topic);
        let key = arg!(bytes key, key_len);
        let value = arg!(bytes value, value_len);
        let out = out!(opt out);
        let record = BorrowedRecord {
            topic,
            partition: None,
            key,
            value,
            headers: &[],
            timestamp: None,
            sequence: None,
        };
        send(p, &record, out)
    })
}

/// Sends one record described by `record` (partition, headers, timestamp,
/// sequence included), like `mql_send`. Header names must be UTF-8
/// (`MQL_INVALID_UTF8`). `out` may be NULL.
///
/// A record with a sequence that was already written comes back with
/// `out->duplicate` set and the original's offset; it is not written again.
///
/// Errors: as `mql_send`, plus `MQL_UNKNOWN_PARTITION`,
/// `MQL_OUT_OF_ORDER_SEQUENCE` (with `strict_sequences`) and
/// `MQL_INVALID_ARGUMENT` (a partition below -1 or above `UINT32_MAX`, a
/// timestamp below -1, a negative sequence, a sequence on a producer that
/// is not idempotent).
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
        let p = arg!(ref producer);
        let r = arg!(ref record);
        let out = out!(opt out);
        // SAFETY: the record's pointers satisfy its field docs by the
        // caller's contract, for the duration of this call.
        let args = unsafe { record_args(r, &record_place) }?;
        send(p, &args.borrowed(), out)
    })
}

/// Sends one record without waiting: the record joins its partition's
/// batch and `callback` later gets where it was written, or why it failed.
/// The record's data is copied before this returns.
///
/// `callback(user_data, md, status, error_message)` runs exactly once per
/// record this call accepted (returned `MQL_OK` for): on success with `md`
/// (valid during the callback only), `status` `MQL_OK` and `error_message`
/// NULL; on failure with `md` NULL, the failure's status and its text
/// (valid during the callback only). A duplicate (by sequence) is a success
/// with `md->duplicate` set. Callbacks of one partition run in send order.
/// `callback` may be NULL when no report is wanted (`user_data` is then
/// ignored).
///
/// Threads: the callback runs on whichever thread completes the record's
/// batch: this one (often before `mql_produce` returns; always so with the
/// defaults `linger_ms` 0 and `acks` 1), the producer's background thread
/// (with `linger_ms` above 0, or `acks = -1`), or a thread inside
/// `mql_producer_flush`, `mql_producer_close` or `mql_producer_free`. So
/// `user_data` must be safe to use from another thread, and must stay valid
/// until the callback ran (at the latest when `mql_producer_free`
/// returns). Keep callbacks short: they delay other deliveries. A callback
/// may send with the same producer, but must not free it.
///
/// When the batch is written: at once with `linger_ms` 0; else when it
/// holds `batch_size` bytes, after `linger_ms`, or at a flush. With
/// `acks = -1` the record is also flushed to disk (shared with other
/// records) before its callback runs.
///
/// Errors (the callback is then not called, nothing is queued):
/// `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION`, `MQL_MESSAGE_TOO_LARGE`,
/// `MQL_CLOSED`, `MQL_PRODUCER_FENCED`, `MQL_BUFFER_FULL` (no room in
/// `buffer_memory` after waiting `max_block_ms`), `MQL_INVALID_ARGUMENT`
/// and `MQL_INVALID_UTF8` as for `mql_send_record`.
///
/// Ownership: `record` and what it points to are borrowed for the call;
/// `user_data` stays the caller's.
///
/// # Safety
/// `producer` is NULL or a live producer; `record` is NULL or points to an
/// `mql_record` whose pointers satisfy what its fields' docs say;
/// `callback` is NULL or a function with the `mql_delivery_callback`
/// contract, safe to call with `user_data` from any thread.
#[no_mangle]
pub unsafe extern "C" fn mql_produce(
    producer: *mut mql_producer,
    record: *const mql_record,
    callback: mql_delivery_callback,
    user_data: *mut c_void,
) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        let r = arg!(ref record);
        // SAFETY: the record's pointers satisfy its field docs by the
        // caller's contract, for the duration of this call (the engine
        // copies the data before send_async_borrowed returns).
        let args = unsafe { record_args(r, &record_place) }?;
        let ud = UserData::new(user_data);
        let report: mqlite::DeliveryCallback = match callback {
            Some(cb) => Box::new(move |result: mqlite::Result<RecordMetadata>| {
                deliver(cb, ud, result.as_ref());
            }),
            None => Box::new(|_| {}),
        };
        p.inner.send_async_borrowed(&args.borrowed(), report)?;
        Ok(())
    })
}

/// Sends `count` records at once: the records of each partition become as
/// few batches as fit the topic's `max_message_bytes` (faster than one
/// `mql_send_record` each), and the call returns once all are as durable as
/// the acks level asks. `records` may be NULL when `count` is 0.
///
/// `out` may be NULL; otherwise it must hold `count` entries and receives
/// each record's metadata, in the order of `records` (duplicates by
/// sequence have `duplicate` set).
///
/// Every record is checked before anything is sent (an invalid one sends
/// nothing). Errors: as `mql_send_record`. On an error found while writing
/// (I/O), the batches written before it stay written; `out` is written only
/// on `MQL_OK`.
///
/// Ownership: everything is borrowed for the duration of the call.
///
/// # Safety
/// `producer` is NULL or a live producer; `records` is NULL or points to
/// `count` `mql_record`s whose pointers satisfy what their fields' docs
/// say; `out` is NULL or valid for writing `count` `mql_metadata`s.
#[no_mangle]
pub unsafe extern "C" fn mql_send_batch(
    producer: *mut mql_producer,
    records: *const mql_record,
    count: usize,
    out: *mut mql_metadata,
) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        let raw = arg!(slice records, count);
        let out = out!(array out, count);
        let mut args = Vec::with_capacity(raw.len());
        for (i, r) in raw.iter().enumerate() {
            // SAFETY: each record's pointers satisfy its field docs by the
            // caller's contract, for the duration of this call.
            args.push(unsafe { record_args(r, &|| format!("records[{i}].")) }?);
        }
        let borrowed: Vec<BorrowedRecord<'_>> = args.iter().map(RecordArgs::borrowed).collect();
        match out {
            None => {
                p.inner.send_batch_with(&borrowed, &mut |_, _| {})?;
            }
            Some(out) => {
                let mut mds = vec![mql_metadata::default(); count];
                p.inner.send_batch_with(&borrowed, &mut |i, md| {
                    if let Some(slot) = mds.get_mut(i) {
                        *slot = mql_metadata::from(md);
                    }
                })?;
                // SAFETY: `out` is valid for writing `count` entries by the
                // caller's contract, and `mds` has `count`.
                unsafe { out.write(&mds) };
            }
        }
        Ok(())
    })
}

/// Waits until every record sent so far is done: written, flushed to disk
/// for `acks = -1`, and its callback run. Called from a delivery callback,
/// it does not wait for the callbacks still running. On a producer closed
/// with `mql_producer_close` it returns `MQL_OK` at once: nothing is
/// pending then.
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
        let p = arg!(ref producer);
        p.inner.flush()?;
        Ok(())
    })
}

/// Like `mql_producer_flush`, giving up with `MQL_TIMEOUT` after
/// `timeout_ms` milliseconds (the records stay queued and are still
/// delivered later). Like it, `MQL_OK` at once on a closed producer.
///
/// On `MQL_TIMEOUT` the error text ends with how many records are still
/// queued ("...: N records still queued"), and `mql_producer_queued` gives
/// the number.
///
/// Errors: `MQL_TIMEOUT`, `MQL_CLOSED` after `mql_close` of the broker, I/O
/// errors.
///
/// Ownership: borrows `producer` for the call; nothing to free.
///
/// # Safety
/// `producer` is NULL or a live producer.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_flush_timeout(
    producer: *mut mql_producer,
    timeout_ms: u64,
) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        match p.inner.flush_timeout(Duration::from_millis(timeout_ms)) {
            Ok(()) => Ok(()),
            Err(e @ mqlite::Error::Timeout(_)) => Err(Failure::new(
                mql_status::MQL_TIMEOUT,
                format!("{e}: {} records still queued", p.inner.queued()),
            )),
            Err(e) => Err(e.into()),
        }
    })
}

/// Number of records sent with `mql_produce` whose delivery callback has
/// not run yet (queued in a batch, being written, waiting for the flush of
/// `acks = -1`, or with the callback still to run), into `*out`:
/// confluent-kafka's `len(producer)`. 0 once `mql_producer_flush` returned
/// (unless other threads sent meanwhile). Records sent with `mql_send*`
/// are done when the call returns and never count. Works on a closed
/// producer (0: closing delivered everything).
///
/// Ownership: borrows every argument for the call; the result is a plain
/// value; nothing to free.
///
/// # Safety
/// `producer` is NULL or a live producer; `out` is NULL or valid for
/// writing a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_queued(
    producer: *mut mql_producer,
    out: *mut usize,
) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        let out = out!(out);
        // SAFETY: valid for writes by the caller's contract.
        unsafe { out.write(p.inner.queued()) };
        Ok(())
    })
}

/// Closes the producer: writes and flushes what is pending, runs the
/// remaining delivery callbacks (on this thread), stops the background
/// thread, and makes every later send fail with `MQL_CLOSED`. Closing twice
/// is fine. The handle stays valid (stats, ids, `mql_producer_last_sequence`,
/// `mql_producer_next_sequence` still work) and must still be released with `mql_producer_free`.
///
/// Returns the status of the final flush.
///
/// Ownership: borrows `producer` for the call; nothing to free.
///
/// # Safety
/// `producer` is NULL or a live producer.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_close(producer: *mut mql_producer) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        p.inner.close()?;
        Ok(())
    })
}

/// The highest sequence this producer has written to any partition, into
/// `*out`; -1 when none yet. For a named producer this survives restarts
/// (reopening the data directory): resume your source after it, and re-send
/// from there with the same sequences; whatever was already written comes
/// back as a duplicate. Records sent without a sequence do not count (the
/// partition numbers them in a sequence space of their own); -1 when the
/// producer has written no record with a sequence.
///
/// Errors: `MQL_INVALID_ARGUMENT` (the producer is not idempotent),
/// `MQL_CLOSED` after `mql_close` of the broker, I/O errors.
///
/// Ownership: borrows `producer` for the call; the result is a plain value.
///
/// # Safety
/// `producer` is NULL or a live producer; `out` is NULL or valid for
/// writing an `int64_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_last_sequence(
    producer: *mut mql_producer,
    out: *mut i64,
) -> mql_status {
    // SAFETY: forwarded caller contract.
    unsafe { sequence_into(producer, out, |p| Ok(p.last_sequence()?.unwrap_or(-1))) }
}

/// Writes what `get` says of the producer to `*out`.
///
/// # Safety
/// As for `mql_producer_last_sequence`.
unsafe fn sequence_into(
    producer: *mut mql_producer,
    out: *mut i64,
    get: impl FnOnce(&mqlite::Producer) -> mqlite::Result<i64>,
) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        let out = out!(out);
        let value = get(&p.inner)?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(value) };
        Ok(())
    })
}

/// The first application sequence this producer has not written to any
/// partition, into `*out`: where an application numbering its records 0,
/// 1, 2, ... resumes after a crash, re-sending with the same sequences and
/// to the same partitions (by key or explicit partition). Unlike
/// `mql_producer_last_sequence` + 1 it is safe after asynchronous sends
/// (`mql_produce`): a higher sequence may have been written to one
/// partition while lower ones queued for another were lost. When the
/// application skipped sequences, this is the first one skipped. 0 when
/// nothing was written.
///
/// Errors: `MQL_INVALID_ARGUMENT` (the producer is not idempotent),
/// `MQL_CLOSED` after `mql_close` of the broker, I/O errors.
///
/// Ownership: borrows `producer` for the call; the result is a plain value.
///
/// # Safety
/// `producer` is NULL or a live producer; `out` is NULL or valid for
/// writing an `int64_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_next_sequence(
    producer: *mut mql_producer,
    out: *mut i64,
) -> mql_status {
    // SAFETY: forwarded caller contract.
    unsafe { sequence_into(producer, out, mqlite::Producer::next_sequence) }
}

/// Counters of what the producer did so far, into `*out`.
///
/// Ownership: borrows `producer` for the call; the result is a plain value.
///
/// # Safety
/// `producer` is NULL or a live producer; `out` is NULL or valid for
/// writing an `mql_producer_stats`.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_get_stats(
    producer: *mut mql_producer,
    out: *mut mql_producer_stats,
) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        let out = out!(out);
        let s = p.inner.stats();
        let stats = mql_producer_stats {
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
        };
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(stats) };
        Ok(())
    })
}

/// The producer's id, into `*out`: -1 when it is not idempotent. A named
/// producer keeps its id across restarts.
///
/// Ownership: borrows `producer` for the call; the result is a plain value.
///
/// # Safety
/// `producer` is NULL or a live producer; `out` is NULL or valid for
/// writing an `int64_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_id(producer: *mut mql_producer, out: *mut i64) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        let out = out!(out);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(p.inner.producer_id()) };
        Ok(())
    })
}

/// The producer's epoch, into `*out`: -1 when it is not idempotent, 0 for
/// an anonymous idempotent producer. Each new producer of a name gets the
/// next epoch, which fences the older ones.
///
/// Ownership: borrows `producer` for the call; the result is a plain value.
///
/// # Safety
/// `producer` is NULL or a live producer; `out` is NULL or valid for
/// writing an `int16_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_epoch(
    producer: *mut mql_producer,
    out: *mut i16,
) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        let out = out!(out);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(p.inner.epoch()) };
        Ok(())
    })
}

/// The bytes the producer holds now (unsent batches and records awaiting
/// their `acks=all` flush), into `*out`: the `buffered_bytes` of
/// `mql_producer_get_stats`, read without summing the other counters.
///
/// Ownership: borrows `producer` for the call; the result is a plain value.
///
/// # Safety
/// `producer` is NULL or a live producer; `out` is NULL or valid for
/// writing a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_buffered_bytes(
    producer: *mut mql_producer,
    out: *mut u64,
) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        let out = out!(out);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(p.inner.buffered_bytes()) };
        Ok(())
    })
}

// Automatic numbering of named producers.

/// The sequence the next record sent without one gets, into `*out`, when
/// the producer numbers its records itself
/// (`mql_producer_config_set_initial_sequence`); -1 when it does not.
///
/// Errors: `MQL_CLOSED` after `mql_producer_close`.
///
/// Ownership: borrows `producer` for the call; the result is a plain value.
///
/// # Safety
/// `producer` is NULL or a live producer; `out` is NULL or valid for
/// writing an `int64_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_next_auto_sequence(
    producer: *mut mql_producer,
    out: *mut i64,
) -> mql_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        sequence_into(producer, out, |p| {
            if p.is_closed() {
                return Err(mqlite::Error::Closed("producer"));
            }
            Ok(p.next_auto_sequence().unwrap_or(-1))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> mql_record {
        mql_record {
            topic: c"t".as_ptr(),
            partition: MQL_PARTITION_ANY,
            key: ptr_null(),
            key_len: 0,
            value: ptr_null(),
            value_len: 0,
            headers: std::ptr::null(),
            header_count: 0,
            timestamp: MQL_TIMESTAMP_NOW,
            sequence: -1,
            has_sequence: false,
        }
    }

    fn ptr_null() -> *const c_void {
        std::ptr::null()
    }

    fn error_of(r: &mql_record) -> Failure {
        // SAFETY: the test records' pointers are NULL or static.
        match unsafe { record_args(r, &|| "records[7].".to_owned()) } {
            Ok(_) => panic!("accepted"),
            Err(f) => f,
        }
    }

    #[test]
    fn errors_name_the_field() {
        let mut r = record();
        r.topic = std::ptr::null();
        let f = error_of(&r);
        assert_eq!(f.status, mql_status::MQL_NULL_ARGUMENT);
        assert_eq!(f.message, "argument `records[7].topic` is NULL");
        let mut r = record();
        r.value_len = 3;
        assert!(error_of(&r).message.contains("`records[7].value`"));
        let h = mql_header {
            name: c"n".as_ptr(),
            name_len: 1,
            value: ptr_null(),
            value_len: 2,
        };
        let mut r = record();
        r.headers = &raw const h;
        r.header_count = 1;
        assert!(error_of(&r)
            .message
            .contains("`records[7].headers[0].value` is NULL"));
        let mut r = record();
        r.has_sequence = true;
        assert!(error_of(&r)
            .message
            .contains("records[7].sequence must be at least 0"));
        let mut r = record();
        r.sequence = -5; // ignored without has_sequence
                         // SAFETY: as in error_of.
        let args = unsafe { record_args(&r, &record_place) }.unwrap();
        assert_eq!(args.borrowed().sequence, None);
    }
}
