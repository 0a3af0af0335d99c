//! Transactions: the `mql_txn` handle of a producer with a transactional
//! id, the producer settings they need, and the consumer's isolation
//! level.
//!
//! A transaction's records are buffered by the engine and written only by
//! `mql_txn_commit`, all together with the consumer offsets sent into it,
//! or not at all. The handle holds the engine's transaction, which keeps
//! the producer's state alive (`Arc`): freeing the producer first is safe
//! (the transaction's later calls fail with `MQL_CLOSED`).

use std::ffi::{c_char, c_int};
use std::sync::{PoisonError, RwLock};

use mqlite::{IsolationLevel, Transaction};

use crate::config::{mql_consumer_config, mql_producer_config};
use crate::consumer::mql_consumer;
use crate::error::{guard, mql_status, Failure, FfiResult};
use crate::group::mql_committed_offset;
use crate::producer::{mql_metadata, mql_producer, mql_record, record_args};
use crate::util::{arg, arg_ref, arg_slice, arg_str, free, into_handle, opt_str, out, OutArray};

/// An open transaction of a producer with a transactional id
/// (`mql_producer_config_set_transactional_id`). Made by `mql_txn_begin`,
/// ended by `mql_txn_commit` or `mql_txn_abort`, released by
/// `mql_txn_free` (which aborts it if it is still open). Safe to use from
/// several threads at once (`mql_txn_send` from many threads adds to the
/// one transaction).
pub struct mql_txn {
    /// `None` once committed or aborted through this handle.
    inner: RwLock<Option<Transaction>>,
}

/// What a consumer reads of transactions (Kafka's `isolation.level`), for
/// `mql_consumer_config_set_isolation_level`. A transaction is written only
/// at its commit, so no log ever holds records of an open or aborted
/// transaction: both levels deliver the same records. Transaction markers
/// are never delivered at either level; positions and `mql_lag` step over
/// them.
///
/// cbindgen:prefix-with-name=false
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mql_isolation_level {
    /// Only committed transactions' records (the default).
    MQL_READ_COMMITTED = 0,
    /// Whatever the log holds.
    MQL_READ_UNCOMMITTED = 1,
}

fn done() -> Failure {
    Failure::invalid("the transaction is already committed or aborted")
}

impl mql_txn {
    /// Runs `f` with the open transaction (shared: other threads may send
    /// meanwhile).
    fn with<R>(&self, f: impl FnOnce(&Transaction) -> FfiResult<R>) -> FfiResult<R> {
        let guard = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        match guard.as_ref() {
            Some(t) => f(t),
            None => Err(done()),
        }
    }

    /// Takes the transaction out to end it; later calls fail.
    fn take(&self) -> FfiResult<Transaction> {
        self.inner
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or_else(done)
    }
}

/// Gives the producer a transactional id (Kafka's `transactional.id`), or
/// NULL for none (the default). Such a producer may run transactions
/// (`mql_txn_begin`); making a producer with the same transactional id
/// fences this one: its open transaction is aborted and its next call
/// fails with `MQL_PRODUCER_FENCED`. 1 to 249 characters of
/// `[A-Za-z0-9._-]` (`MQL_INVALID_ARGUMENT` otherwise). In shared mode,
/// transactions commit from any process that may write.
///
/// Ownership: borrows `config` and `id` for the call (the id is copied).
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile; `id` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_transactional_id(
    config: *mut mql_producer_config,
    id: *const c_char,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        let id = arg!(opt_str id);
        if let Some(id) = id {
            mqlite::validate_producer_name(id)
                .map_err(|e| Failure::invalid(format!("transactional_id: {e}")))?;
        }
        c.inner.transactional_id = id.map(str::to_owned);
        Ok(())
    })
}

/// Most bytes of records one transaction may buffer (default 64 MiB, at
/// least 1, else `MQL_INVALID_ARGUMENT`). A send past it fails with
/// `MQL_TRANSACTION_TOO_LARGE`; the record is not added and the
/// transaction stays open.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_max_transaction_bytes(
    config: *mut mql_producer_config,
    bytes: usize,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        if bytes == 0 {
            return Err(Failure::invalid("max_transaction_bytes must be at least 1"));
        }
        c.inner.max_transaction_bytes = bytes;
        Ok(())
    })
}

/// How long a transaction may stay open, in milliseconds (default 60000,
/// Kafka's `transaction.timeout.ms`; 0: no limit). Past it the transaction
/// is aborted and its next call fails with `MQL_TIMEOUT`.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live producer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_producer_config_set_transaction_timeout_ms(
    config: *mut mql_producer_config,
    timeout_ms: u64,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        c.inner.transaction_timeout_ms = timeout_ms;
        Ok(())
    })
}

/// The consumer's isolation level: one of the `mql_isolation_level` values
/// (passed as `int`, so that any value is safe to pass; others give
/// `MQL_INVALID_ARGUMENT`). Default `MQL_READ_COMMITTED`.
///
/// Ownership: borrows `config` for the call; the caller still owns it.
///
/// # Safety
/// `config` is NULL or a live consumer config not used by another thread
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_config_set_isolation_level(
    config: *mut mql_consumer_config,
    level: c_int,
) -> mql_status {
    guard(|| {
        let c = arg!(mut config);
        c.inner.isolation_level = match level {
            l if l == mql_isolation_level::MQL_READ_COMMITTED as c_int => {
                IsolationLevel::ReadCommitted
            }
            l if l == mql_isolation_level::MQL_READ_UNCOMMITTED as c_int => {
                IsolationLevel::ReadUncommitted
            }
            l => {
                return Err(Failure::invalid(format!(
                    "isolation level must be MQL_READ_COMMITTED or MQL_READ_UNCOMMITTED, got {l}"
                )))
            }
        };
        Ok(())
    })
}

/// Begins a transaction of `producer` (Kafka's `beginTransaction`). A
/// producer runs one transaction at a time.
///
/// Errors: `MQL_INVALID_ARGUMENT` (the producer has no transactional id,
/// or another of its transactions is open: commit, abort or free it
/// first), `MQL_PRODUCER_FENCED` (a newer producer took the transactional
/// id), `MQL_CLOSED`.
///
/// Ownership: on `MQL_OK`, `*out` is a new transaction owned by the
/// caller; release it with `mql_txn_free` (before or after the producer).
///
/// # Safety
/// `producer` is NULL or a live producer; `out` is NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_txn_begin(
    producer: *mut mql_producer,
    out: *mut *mut mql_txn,
) -> mql_status {
    guard(|| {
        let p = arg!(ref producer);
        let out = out!(out);
        let t = p.inner.begin_transaction()?;
        let handle = into_handle(mql_txn {
            inner: RwLock::new(Some(t)),
        });
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Adds one record, described as for `mql_send_record`, to the
/// transaction. Its partition is chosen now (explicit, by its key, or by
/// the producer's partitioner); it is written at `mql_txn_commit`, so no
/// metadata is known yet. Records of a transaction take no sequence
/// (`has_sequence` must be false).
///
/// Errors (the record is not added; the transaction stays open unless
/// said): `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION`,
/// `MQL_MESSAGE_TOO_LARGE`, `MQL_TRANSACTION_TOO_LARGE` (past
/// `max_transaction_bytes`), `MQL_INVALID_ARGUMENT` (a bad field as for
/// `mql_send_record`, a sequence, or a transaction already committed or
/// aborted), `MQL_INVALID_UTF8`, `MQL_TIMEOUT` (open longer than
/// `transaction_timeout_ms`: the transaction is aborted),
/// `MQL_PRODUCER_FENCED`, `MQL_CLOSED`.
///
/// Ownership: `record` and what it points to are borrowed for the call
/// (the data is copied).
///
/// # Safety
/// `txn` is NULL or a live transaction; `record` is NULL or points to an
/// `mql_record` whose pointers satisfy what its fields' docs say.
#[no_mangle]
pub unsafe extern "C" fn mql_txn_send(txn: *mut mql_txn, record: *const mql_record) -> mql_status {
    guard(|| {
        let t = arg!(ref txn);
        let r = arg!(ref record);
        // SAFETY: the record's pointers satisfy its field docs by the
        // caller's contract, for the duration of this call; the data is
        // copied (into_record) before it returns.
        let args = unsafe { record_args(r, &|| "record->".to_owned()) }?;
        t.with(|t| Ok(t.send(args.into_record())?))
    })
}

/// Adds the positions of `consumer` (what `mql_commit` would commit now:
/// the offset after the last message `mql_poll` handed out, for every
/// partition it reads) to the transaction: they are committed for the
/// consumer's group with the records, and only then (Kafka's
/// `sendOffsetsToTransaction`), so that consume-transform-produce runs
/// exactly once. Not allowed from a rebalance callback.
///
/// Errors: `MQL_INVALID_ARGUMENT` (a consumer without a group id, a
/// transaction already committed or aborted), `MQL_CLOSED`,
/// `MQL_TIMEOUT`, `MQL_PRODUCER_FENCED`.
///
/// Ownership: borrows both handles for the call.
///
/// # Safety
/// `txn` is NULL or a live transaction; `consumer` is NULL or a live
/// consumer not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mql_txn_send_offsets(
    txn: *mut mql_txn,
    consumer: *mut mql_consumer,
) -> mql_status {
    guard(|| {
        let t = arg!(ref txn);
        // SAFETY: forwarded caller contract.
        let c = unsafe { arg_ref(consumer, "consumer") }?;
        t.with(|t| c.normal("mql_txn_send_offsets", |s| Ok(t.send_offsets(&s.inner)?)))
    })
}

/// Adds `n` offsets to commit for consumer group `group` with the
/// transaction (entries as for `mql_commit_offsets`: `offset` is the next
/// offset to read, `metadata` NULL for none; `timestamp` is ignored). A
/// later entry for the same partition replaces an earlier one. With `n` 0
/// nothing is added (`offsets` may then be NULL). All or nothing: a bad
/// entry adds none.
///
/// Errors: `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION`,
/// `MQL_OFFSET_OUT_OF_RANGE` (an offset past the partition's end),
/// `MQL_INVALID_ARGUMENT` (an empty group, metadata longer than
/// `max_commit_metadata_bytes`, a transaction already committed or
/// aborted), `MQL_NULL_ARGUMENT` (also for a NULL topic),
/// `MQL_INVALID_UTF8`, `MQL_TIMEOUT`, `MQL_PRODUCER_FENCED`, `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call.
///
/// # Safety
/// `txn` is NULL or a live transaction; `group` is NULL or a
/// NUL-terminated string; `offsets` is NULL or points to `n` entries whose
/// strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn mql_txn_send_offsets_to(
    txn: *mut mql_txn,
    group: *const c_char,
    offsets: *const mql_committed_offset,
    n: usize,
) -> mql_status {
    guard(|| {
        let t = arg!(ref txn);
        let group = arg!(str group);
        // SAFETY: forwarded caller contract.
        let raw = unsafe { arg_slice(offsets, n, "offsets") }?;
        let mut list = Vec::with_capacity(raw.len());
        for (i, e) in raw.iter().enumerate() {
            // SAFETY: as above.
            let topic = unsafe { arg_str(e.topic, &format!("offsets[{i}].topic")) }?;
            // SAFETY: as above.
            let meta = unsafe { opt_str(e.metadata, &format!("offsets[{i}].metadata")) }?;
            list.push((topic, e.partition, e.offset, meta.unwrap_or("")));
        }
        t.with(|t| Ok(t.send_offsets_to(group, &list)?))
    })
}

/// The number of records added to the transaction so far, into `*out`
/// (0 once it was committed or aborted).
///
/// Ownership: borrows every argument for the call.
///
/// # Safety
/// `txn` is NULL or a live transaction; `out` is NULL or valid for writing
/// a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_txn_len(txn: *mut mql_txn, out: *mut usize) -> mql_status {
    guard(|| {
        let t = arg!(ref txn);
        let out = out!(out);
        let n = t
            .inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(0, Transaction::len);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// Commits the transaction: every record and offset in it becomes visible
/// together (to consumers at either isolation level), or, on an error,
/// none does. With `acks = -1` the commit is on disk (survives power loss)
/// when it returns; at any acks level a killed process leaves either all
/// or nothing of it.
///
/// `out` may be NULL; otherwise it must hold `out_count` entries, at least
/// the number of records (`mql_txn_len`, else `MQL_INVALID_ARGUMENT` and
/// nothing is done), and receives each record's metadata in the order they
/// were sent (the entries after them are left alone).
///
/// The transaction is over when this returns, committed or not: later
/// calls on the handle fail with `MQL_INVALID_ARGUMENT`; free it with
/// `mql_txn_free`.
///
/// Errors: `MQL_PRODUCER_FENCED` (a newer producer took the transactional
/// id), `MQL_TIMEOUT` (open longer than `transaction_timeout_ms`),
/// `MQL_TRANSACTION_TOO_LARGE` (its part in one partition is larger than a
/// segment), `MQL_INVALID_ARGUMENT` (already committed or aborted),
/// `MQL_CLOSED`, I/O errors (a full disk). Nothing is written then.
///
/// Ownership: borrows every argument for the call.
///
/// # Safety
/// `txn` is NULL or a live transaction; `out` is NULL or valid for writing
/// `out_count` `mql_metadata`s.
#[no_mangle]
pub unsafe extern "C" fn mql_txn_commit(
    txn: *mut mql_txn,
    out: *mut mql_metadata,
    out_count: usize,
) -> mql_status {
    guard(|| {
        let t = arg!(ref txn);
        // Checked for all `out_count` entries before anything is done.
        let wanted = out!(array out, out_count).is_some();
        let mut slot = t.inner.write().unwrap_or_else(PoisonError::into_inner);
        let n = slot.as_ref().ok_or_else(done)?.len();
        if wanted && out_count < n {
            return Err(Failure::invalid(format!(
                "argument `out` holds {out_count} entries for {n} records"
            )));
        }
        let open = slot.take().ok_or_else(done)?;
        drop(slot);
        let mds = open.commit()?;
        let n = mds.len();
        if let Some(first) = OutArray::optional(out, n, "out")? {
            let all: Vec<mql_metadata> = mds.iter().map(mql_metadata::from).collect();
            // SAFETY: `out` is valid for writing `out_count` entries by the
            // caller's contract, and `n <= out_count` (checked above).
            unsafe { first.write(&all) };
        }
        Ok(())
    })
}

/// Aborts the transaction: nothing of it is written. The handle stays
/// valid until `mql_txn_free`; later calls fail with
/// `MQL_INVALID_ARGUMENT`.
///
/// Errors: `MQL_INVALID_ARGUMENT` (already committed or aborted).
///
/// Ownership: borrows `txn` for the call.
///
/// # Safety
/// `txn` is NULL or a live transaction.
#[no_mangle]
pub unsafe extern "C" fn mql_txn_abort(txn: *mut mql_txn) -> mql_status {
    guard(|| {
        let t = arg!(ref txn);
        Ok(t.take()?.abort()?)
    })
}

/// Releases a transaction, aborting it when it is still open. NULL does
/// nothing.
///
/// Ownership: takes back the transaction the caller owned; do not use it
/// afterwards.
///
/// # Safety
/// `txn` is NULL or a live transaction from `mql_txn_begin`, not used
/// again (by any thread).
#[no_mangle]
pub unsafe extern "C" fn mql_txn_free(txn: *mut mql_txn) {
    free!(txn);
}
