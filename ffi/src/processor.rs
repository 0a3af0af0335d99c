//! Processors: a C handler run over a consumer's messages on worker threads
//! (the engine's `Processor`), committing only what was processed.
//!
//! The engine's `Processor` owns its consumer, so `mql_processor_new` takes
//! the engine's consumer out of the `mql_consumer` handle (with the
//! messages it fetched and did not hand out yet) and
//! `mql_processor_free` puts it back; in between, calls on the consumer
//! handle fail with `MQL_INVALID_ARGUMENT` ("lent to a processor"), except
//! from its rebalance callback, which still runs during
//! `mql_processor_run` and uses the lent consumer as usual.

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_char, c_int, c_void};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use mqlite::sync;
use mqlite::{Message, ProcessingMode, Processor, ProcessorConfig, ProcessorStop};

use crate::callback::{contained, UserData};
use crate::consumer::{mql_consumer, State, Subscription};
use crate::error::{guard, guard_value, mql_status, record_failure, Failure, FfiResult};
use crate::message::mql_message;
use crate::util::{arg_ref, free_handle, into_handle, opt_ref, opt_str, Out};

/// How a processor hands messages to its worker threads
/// (`mql_processor_config.mode`).
///
/// cbindgen:prefix-with-name
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mql_processing_mode {
    /// Every partition goes to one worker: its messages are handled one at
    /// a time, in offset order (the default). A failed message holds its
    /// partition back until it succeeds (or is given up on).
    Orderly = 0,
    /// Any worker takes any message as soon as it is free.
    Concurrently = 1,
}

/// Settings of a processor, for `mql_processor_new`. A plain value:
/// initialise it with `MQL_PROCESSOR_CONFIG_INIT` (the defaults) and change
/// fields.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct mql_processor_config {
    /// Worker threads running the handler (default 4; at least 1).
    pub threads: u32,
    /// An `mql_processing_mode` (default `MQL_PROCESSING_MODE_ORDERLY`).
    pub mode: c_int,
    /// How often processed offsets are committed, in milliseconds (default
    /// 1000; at least 1). They are also committed before a partition is
    /// revoked and when a run ends.
    pub commit_interval_ms: u64,
    /// Most messages handed to workers and not yet processed (default
    /// 10,000; at least 1).
    pub max_in_flight: u64,
    /// Wait before retrying a message whose handler returned false, in
    /// milliseconds (default 100).
    pub retry_backoff_ms: u64,
    /// Give up on a message after this many retries (it then counts in
    /// `failed` and as processed, so its offset gets committed); -1 (the
    /// default) retries forever, so nothing is ever skipped. At most
    /// `UINT32_MAX`.
    pub max_retries: i64,
    /// Where a message given up on after `max_retries` goes (RocketMQ's
    /// dead-letter queue): a topic name, NUL-terminated, read by
    /// `mql_processor_new` (created with one partition if it does not
    /// exist). The dead letter keeps the message's key, value, headers and
    /// timestamp and gains headers saying where it came from and why
    /// (`mqlite.dlq.topic`, `.partition`, `.offset`, `.deliveries`,
    /// `.reason`); it is written durably and once before the message's
    /// offset is committed past. NULL (the default): such a message is
    /// only counted in `failed`.
    pub dead_letter_topic: *const c_char,
}

/// The defaults, as `MQL_PROCESSOR_CONFIG_INIT` in the header (written in
/// `cbindgen.toml`; a test checks the two agree with the engine).
pub(crate) const PROCESSOR_CONFIG_DEFAULT: mql_processor_config = mql_processor_config {
    threads: 4,
    mode: mql_processing_mode::Orderly as c_int,
    commit_interval_ms: 1000,
    max_in_flight: 10_000,
    retry_backoff_ms: 100,
    max_retries: -1,
    dead_letter_topic: std::ptr::null(),
};

impl mql_processor_config {
    fn to_core(self) -> FfiResult<ProcessorConfig> {
        if self.threads == 0 {
            return Err(Failure::invalid(
                "processor config: threads must be at least 1",
            ));
        }
        let mode = match self.mode {
            m if m == mql_processing_mode::Orderly as c_int => ProcessingMode::Orderly,
            m if m == mql_processing_mode::Concurrently as c_int => ProcessingMode::Concurrently,
            m => {
                return Err(Failure::invalid(format!(
                "processor config: mode must be MQL_PROCESSING_MODE_ORDERLY or _CONCURRENTLY, got {m}"
            )))
            }
        };
        if self.commit_interval_ms == 0 {
            return Err(Failure::invalid(
                "processor config: commit_interval_ms must be at least 1",
            ));
        }
        let max_in_flight = usize::try_from(self.max_in_flight)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                Failure::invalid(format!(
                    "processor config: max_in_flight must be at least 1 (and fit in size_t), got {}",
                    self.max_in_flight
                ))
            })?;
        let max_retries = match self.max_retries {
            -1 => None,
            n => Some(u32::try_from(n).map_err(|_| {
                Failure::invalid(format!(
                    "processor config: max_retries must be -1 (forever) or 0 to UINT32_MAX, got {n}"
                ))
            })?),
        };
        Ok(ProcessorConfig {
            threads: self.threads as usize,
            mode,
            commit_interval_ms: self.commit_interval_ms,
            max_in_flight,
            retry_backoff_ms: self.retry_backoff_ms,
            max_retries,
            // Read by `mql_processor_new` (a pointer to read under its
            // caller's contract).
            dead_letter_topic: None,
        })
    }
}

/// What a run of a processor did (`mql_processor_run`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct mql_processor_stats {
    /// Messages the handler processed (returned true for).
    pub processed: u64,
    /// Handler failures (false returned) that were retried.
    pub retries: u64,
    /// Messages given up on after `max_retries` retries.
    pub failed: u64,
    /// Commits of processed offsets.
    pub commits: u64,
    /// Of the messages given up on, those sent to `dead_letter_topic`.
    pub dead_lettered: u64,
}

/// A message handler: handles `message` and returns true when it is
/// processed, false to have it retried after `retry_backoff_ms`.
///
/// Runs on the processor's worker threads, several at once (in orderly
/// mode, one at a time per partition): `user_data` must be safe to use that
/// way. `message` is borrowed for the call: read it with the
/// `mql_message_*` accessors, do not free it, and do not keep it or the
/// pointers they return after the call. The handler may call
/// `mql_stopper_stop`; it must not call functions on the processor's
/// consumer or on the processor (other than `mql_processor_stopper`).
pub type mql_message_handler =
    Option<unsafe extern "C" fn(user_data: *mut c_void, message: *const mql_message) -> bool>;

/// A batch handler (`mql_processor_run_batches`): handles the `n` messages
/// of `messages`, a run of one partition's messages in offset order, and
/// returns how many it processed: `n` when all were, or `k < n` when the
/// first `k` were and `messages[k]` failed, which is then retried after
/// `retry_backoff_ms` (the handler getting the messages from it on). A
/// value above `n` counts as `n`.
///
/// Threads and borrowing as for `mql_message_handler`: the array and the
/// messages are borrowed for the call.
pub type mql_batch_handler = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        messages: *const *const mql_message,
        n: usize,
    ) -> usize,
>;

/// Runs a handler over a consumer's messages on worker threads. Made by
/// `mql_processor_new`, released by `mql_processor_free` (which gives the
/// consumer back). Use it from one thread at a time, like its consumer;
/// only `mql_processor_stopper` may be called from any thread.
pub struct mql_processor {
    /// The handle the consumer came from and goes back to.
    consumer: NonNull<mql_consumer>,
    /// What the consumer handle keeps for when the consumer comes back.
    sub: Subscription,
    /// The engine's processor; used mutably only inside
    /// `mql_processor_run`, which `running` keeps from nesting.
    inner: UnsafeCell<Processor>,
    /// Whether `mql_processor_run` is running.
    running: Cell<bool>,
    /// What the stoppers share, read from any thread.
    stop: Arc<Stop>,
}

/// The engine's stop handle, shared by a processor and its stoppers.
struct Stop {
    inner: ProcessorStop,
    state: Mutex<StopState>,
}

struct StopState {
    /// Until `mql_processor_free`: afterwards a stop does nothing (it
    /// would wake the consumer's next `mql_poll`).
    alive: bool,
    /// Whether a stop was asked: the engine's stop also wakes the
    /// consumer, and a wakeup its run did not use is cleared when the
    /// consumer is given back.
    asked: bool,
}

impl Stop {
    fn stop(&self) {
        let mut s = sync::lock(&self.state);
        if s.alive {
            s.asked = true;
            self.inner.stop();
        }
    }

    /// Makes later stops do nothing; returns whether one was asked.
    fn retire(&self) -> bool {
        let mut s = sync::lock(&self.state);
        s.alive = false;
        s.asked
    }
}

// SAFETY: the consumer handle behind `consumer` is lent to the processor
// entirely (its calls are refused until `mql_processor_free`), and is used
// through the pointer only on the thread using the processor (its rebalance
// callback during a run, and `mql_processor_free`); the engine's consumer
// inside the processor is `Send`. Moving the processor between threads
// between calls therefore moves the whole consumer with it, as moving the
// consumer handle itself would.
unsafe impl Send for mql_processor {}

/// Stops a processor's run from any thread, also from inside its handler.
/// Made by `mql_processor_stopper`, released by `mql_stopper_free`. Safe to
/// use from several threads at once, and after its processor was freed
/// (it then does nothing).
pub struct mql_stopper {
    inner: Arc<Stop>,
}

/// Makes a processor over `consumer`, which needs a group id (the processor
/// commits what it processed) and a subscription or assignment. `config`
/// may be NULL for the defaults (it is copied).
///
/// The consumer is lent to the processor until `mql_processor_free`:
/// messages it fetched but did not hand out yet are given back to the
/// engine (nothing is skipped), and calls on it fail with
/// `MQL_INVALID_ARGUMENT` meanwhile (it cannot be freed either). Its
/// rebalance callback still runs, during `mql_processor_run`, after the
/// processor committed what it processed of the revoked partitions; do not
/// call `mql_commit` from it then (it would commit what was fetched, not
/// what was processed).
///
/// Turn the consumer's auto-commit off (`mql_consumer_config_set_enable_auto_commit`):
/// the engine's auto-commit counts fetched messages, so with it on a
/// commit may run ahead of what the handler processed until the
/// processor's next commit.
///
/// Errors: `MQL_INVALID_ARGUMENT` (no group id, no subscription or
/// assignment, already lent to a processor, an invalid config, from a
/// rebalance callback), `MQL_CLOSED`.
///
/// Ownership: on `MQL_OK`, `*out` is a new processor owned by the caller;
/// release it with `mql_processor_free` (before `mql_consumer_free`).
///
/// # Safety
/// `consumer` is NULL or a live consumer; `config` is NULL or valid for
/// reading an `mql_processor_config`; `out` is NULL or valid for writing a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_processor_new(
    consumer: *mut mql_consumer,
    config: *const mql_processor_config,
    out: *mut *mut mql_processor,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all three).
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let config = unsafe { opt_ref(config, "config") }?;
        let out = Out::new(out, "out")?;
        let raw = config.copied().unwrap_or(PROCESSOR_CONFIG_DEFAULT);
        let mut config = raw.to_core()?;
        // SAFETY: a NUL-terminated string or NULL, by the caller's
        // contract on `config`.
        config.dead_letter_topic =
            unsafe { opt_str(raw.dead_letter_topic, "config.dead_letter_topic") }?
                .map(str::to_owned);
        let (inner, sub) = h.slot("mql_processor_new", |slot| {
            let state = slot.as_ref().ok_or_else(|| {
                Failure::invalid("mql_processor_new: the consumer is already lent to a processor")
            })?;
            if state.inner.is_closed() {
                return Err(mqlite::Error::Closed("consumer").into());
            }
            if state.inner.config().group_id.is_none() {
                return Err(Failure::invalid(
                    "a processor commits what it processed: the consumer needs a group_id",
                ));
            }
            if !state.subscribed() {
                return Err(Failure::invalid(
                    "the consumer has no subscription or assignment (call mql_subscribe or mql_assign first)",
                ));
            }
            let state = slot.take().ok_or_else(|| Failure::invalid("no consumer"))?;
            Ok(state.lend_out())
        })?;
        // The engine fails for what was checked above (group id, threads,
        // max_in_flight) and for a dead-letter topic it cannot use; the
        // consumer then goes back to the handle as it was (its
        // fetched-ahead messages rewound).
        let inner = match Processor::try_new(inner, config) {
            Ok(p) => p,
            Err((e, consumer)) => {
                h.slot("mql_processor_new", |slot| {
                    *slot = Some(State::give_back(*consumer, sub));
                    Ok(())
                })?;
                return Err(e.into());
            }
        };
        let processor = mql_processor {
            consumer: NonNull::from(h),
            sub,
            stop: Arc::new(Stop {
                inner: inner.stopper(),
                state: Mutex::new(StopState {
                    alive: true,
                    asked: false,
                }),
            }),
            inner: UnsafeCell::new(inner),
            running: Cell::new(false),
        };
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(processor)) };
        Ok(())
    })
}

/// Clears a flag when dropped (also on a panic).
struct Unset<'a>(&'a Cell<bool>);

impl Drop for Unset<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Polls the consumer and runs `handler` over its messages on the worker
/// threads until stopped (`mql_stopper_stop`), blocking the calling
/// thread, which polls, dispatches and commits. Per partition, the
/// committed offset is the first offset not yet processed: committed every
/// `commit_interval_ms`, before a partition is revoked (once its messages
/// in flight are done) and at the end of the run, after the workers
/// finished what they held. `user_data` is handed to every call of
/// `handler` and must stay valid until this returns. A processor may run
/// again after a run ends.
///
/// On `MQL_OK`, writes what the run did to `*stats` (NULL: not wanted).
///
/// Errors: `MQL_NULL_ARGUMENT` (`processor`, `handler`),
/// `MQL_INVALID_ARGUMENT` (already running), errors of polling
/// (`MQL_CLOSED`, `MQL_CORRUPT`, I/O errors) or of the final commit
/// (`MQL_COMMIT_FAILED`); the workers finish what they hold first.
///
/// Ownership: borrows every argument for the call; the results are plain
/// values; nothing to free.
///
/// # Safety
/// `processor` is NULL or a live processor; `handler` is NULL or a function
/// with the `mql_message_handler` contract; `stats` is NULL or valid for
/// writing an `mql_processor_stats`.
#[no_mangle]
pub unsafe extern "C" fn mql_processor_run(
    processor: *mut mql_processor,
    handler: mql_message_handler,
    user_data: *mut c_void,
    stats: *mut mql_processor_stats,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = unsafe { arg_ref(processor, "processor") }?;
        let handler = handler.ok_or_else(|| Failure::null("handler"))?;
        let stats = Out::optional(stats, "stats")?;
        if p.running.replace(true) {
            return Err(Failure::invalid(
                "mql_processor_run: the processor is already running",
            ));
        }
        let _ran = Unset(&p.running);
        // SAFETY: no other reference to the engine's processor exists: it
        // is used mutably only here, `running` keeps this from nesting, and
        // the processor is used from one thread at a time (documented
        // contract; `mql_processor_stopper` reads `stop` only).
        let inner = unsafe { &mut *p.inner.get() };
        let ud = UserData::new(user_data);
        let s = inner.run(move |m: &Message| {
            // The engine's messages are reference-counted views of the
            // memory map: the clone copies no record data.
            let view = mql_message::new(m.clone());
            contained(false, || {
                // SAFETY: `handler` has the mql_message_handler contract
                // and `user_data` is the caller's, made safe for calls from
                // several threads at once by that contract; `view` outlives
                // the call.
                unsafe { handler(ud.get(), &raw const view) }
            })
        });
        write_stats(stats, s?);
        Ok(())
    })
}

/// Writes a run's stats to the optional out-parameter.
fn write_stats(out: Option<Out<mql_processor_stats>>, s: mqlite::ProcessorStats) {
    if let Some(out) = out {
        // SAFETY: valid for writes by the caller's contract.
        unsafe {
            out.write(mql_processor_stats {
                processed: s.processed,
                retries: s.retries,
                failed: s.failed,
                commits: s.commits,
                dead_lettered: s.dead_lettered,
            });
        };
    }
}

/// Checks the arguments of a run and marks the processor running while `f`
/// runs the engine's processor.
///
/// # Safety
/// `processor` is NULL or a live processor.
unsafe fn running<R>(
    processor: *mut mql_processor,
    what: &str,
    f: impl FnOnce(&mut Processor) -> FfiResult<R>,
) -> FfiResult<R> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { arg_ref(processor, "processor") }?;
    if p.running.replace(true) {
        return Err(Failure::invalid(format!(
            "{what}: the processor is already running"
        )));
    }
    let _ran = Unset(&p.running);
    // SAFETY: no other reference to the engine's processor exists: it is
    // used mutably only here, `running` keeps this from nesting, and the
    // processor is used from one thread at a time (documented contract;
    // `mql_processor_stopper` reads `stop` only).
    f(unsafe { &mut *p.inner.get() })
}

/// As `mql_processor_run`, with a handler given a batch at a time (see
/// `mql_batch_handler`): runs of one partition's messages in offset order,
/// the batches `mql_processor_run` goes through one message at a time.
///
/// On `MQL_OK`, writes what the run did to `*stats` (NULL: not wanted).
///
/// Errors: as `mql_processor_run`.
///
/// Ownership: borrows every argument for the call; the results are plain
/// values; nothing to free.
///
/// # Safety
/// `processor` is NULL or a live processor; `handler` is NULL or a function
/// with the `mql_batch_handler` contract; `stats` is NULL or valid for
/// writing an `mql_processor_stats`.
#[no_mangle]
pub unsafe extern "C" fn mql_processor_run_batches(
    processor: *mut mql_processor,
    handler: mql_batch_handler,
    user_data: *mut c_void,
    stats: *mut mql_processor_stats,
) -> mql_status {
    guard(|| {
        let handler = handler.ok_or_else(|| Failure::null("handler"))?;
        let stats = Out::optional(stats, "stats")?;
        let ud = UserData::new(user_data);
        let work = move |batch: &[Message]| {
            // Reference-counted views: no record data is copied.
            let views: Vec<mql_message> =
                batch.iter().map(|m| mql_message::new(m.clone())).collect();
            let ptrs: Vec<*const mql_message> = views
                .iter()
                .map(std::ptr::from_ref::<mql_message>)
                .collect();
            contained(0, || {
                // SAFETY: `handler` has the mql_batch_handler contract and
                // `user_data` is the caller's, made safe for calls from
                // several threads at once by that contract; `ptrs` and
                // `views` outlive the call.
                unsafe { handler(ud.get(), ptrs.as_ptr(), ptrs.len()) }
            })
        };
        // SAFETY: forwarded caller contract.
        let s = unsafe {
            running(processor, "mql_processor_run_batches", |inner| {
                Ok(inner.run_batches(work))
            })
        }?;
        write_stats(stats, s?);
        Ok(())
    })
}

/// A stopper for this processor: `mql_stopper_stop` on it, from any thread
/// or from the handler, ends the processor's `mql_processor_run`. May be
/// called from any thread, also while the processor runs.
///
/// Ownership: on `MQL_OK`, `*out` is a new stopper owned by the caller;
/// release it with `mql_stopper_free` (before or after the processor).
///
/// # Safety
/// `processor` is NULL or a live processor; `out` is NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_processor_stopper(
    processor: *const mql_processor,
    out: *mut *mut mql_stopper,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract. Only the `stop` field is read,
        // which nothing changes after `mql_processor_new` (`ProcessorStop`
        // is safe to share between threads).
        let p = unsafe { arg_ref(processor, "processor") }?;
        let out = Out::new(out, "out")?;
        let inner = Arc::clone(&p.stop);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(mql_stopper { inner })) };
        Ok(())
    })
}

/// Asks the processor's run to stop: it dispatches nothing more, lets the
/// workers finish the messages they hold (a message whose handler fails
/// then is not retried: it stays unprocessed and uncommitted, for a later
/// run or another member), commits what was processed and returns. Safe to
/// call from any thread, also from the handler, several times, and after
/// the processor was freed (it then does nothing).
///
/// A stop is used up by the run it ends. A stop asked while no run is
/// going on (before the first, or between two) ends the next run at once,
/// before it polls: so a stop from another thread is never lost, however
/// it races with the start of the run.
///
/// Errors: `MQL_NULL_ARGUMENT`.
///
/// Ownership: borrows `stopper` for the call; nothing to free.
///
/// # Safety
/// `stopper` is NULL or a live stopper.
#[no_mangle]
pub unsafe extern "C" fn mql_stopper_stop(stopper: *const mql_stopper) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let s = unsafe { arg_ref(stopper, "stopper") }?;
        s.inner.stop();
        Ok(())
    })
}

/// Releases a stopper. NULL does nothing.
///
/// Ownership: takes back the stopper the caller owned; do not use it
/// afterwards (no other thread may be using it).
///
/// # Safety
/// `stopper` is NULL or a live stopper from `mql_processor_stopper`, not
/// used again.
#[no_mangle]
pub unsafe extern "C" fn mql_stopper_free(stopper: *mut mql_stopper) {
    // SAFETY: forwarded caller contract.
    guard_value((), || unsafe { free_handle(stopper) });
}

/// Releases a processor and gives its consumer back: calls on the consumer
/// work again, reading on from where the processor stopped (after the
/// messages it dispatched). NULL does nothing.
///
/// Not allowed while the processor runs (e.g. from the consumer's
/// rebalance callback): the call then does nothing (the last error says
/// so).
///
/// Ownership: takes back the processor the caller owned; do not use it
/// afterwards. The consumer stays the caller's.
///
/// # Safety
/// `processor` is NULL or a live processor from `mql_processor_new`, not
/// used again, whose consumer was not freed.
#[no_mangle]
pub unsafe extern "C" fn mql_processor_free(processor: *mut mql_processor) {
    guard_value((), || {
        if processor.is_null() {
            return;
        }
        // SAFETY: forwarded caller contract.
        if let Err(f) = unsafe { give_back(processor) } {
            record_failure(f);
        }
    });
}

/// The body of `mql_processor_free`.
///
/// # Safety
/// As `mql_processor_free`, with `processor` not NULL.
unsafe fn give_back(processor: *mut mql_processor) -> FfiResult {
    let consumer = {
        // SAFETY: forwarded caller contract. The reference ends in this
        // block, before the processor is released.
        let p = unsafe { arg_ref(processor, "processor") }?;
        if p.running.get() {
            return Err(Failure::invalid(
                "mql_processor_free may not be called while the processor runs",
            ));
        }
        p.consumer
    };
    // SAFETY: the consumer handle outlives the processor: it refuses to be
    // freed while lent (forwarded caller contract).
    let h = unsafe { consumer.as_ref() };
    h.slot("mql_processor_free", |slot| {
        // SAFETY: forwarded caller contract: `processor` came from
        // into_handle and is not used again; no call on it runs (checked
        // above) and no reference to it is live.
        let p = unsafe { Box::from_raw(processor) };
        let mql_processor {
            sub, inner, stop, ..
        } = *p;
        let consumer = inner.into_inner().into_consumer();
        if stop.retire() {
            // The wakeup of the stop, if the run did not use it, would end
            // the next `mql_poll` at once.
            consumer.waker().clear();
        }
        *slot = Some(State::give_back(consumer, sub));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_the_engines() {
        assert_eq!(
            PROCESSOR_CONFIG_DEFAULT.to_core().ok(),
            Some(ProcessorConfig::default())
        );
        // The header's MQL_PROCESSOR_CONFIG_INIT spells the same values.
        let toml = include_str!("../cbindgen.toml");
        assert!(toml.contains(
            "#define MQL_PROCESSOR_CONFIG_INIT { 4, MQL_PROCESSING_MODE_ORDERLY, 1000, 10000, 100, -1, NULL }"
        ));
    }

    #[test]
    fn invalid_configs_are_refused() {
        let bad = |f: fn(&mut mql_processor_config)| {
            let mut c = PROCESSOR_CONFIG_DEFAULT;
            f(&mut c);
            c.to_core().is_err()
        };
        assert!(bad(|c| c.threads = 0));
        assert!(bad(|c| c.mode = 2));
        assert!(bad(|c| c.commit_interval_ms = 0));
        assert!(bad(|c| c.max_in_flight = 0));
        assert!(bad(|c| c.max_retries = -2));
        assert!(bad(|c| c.max_retries = i64::from(u32::MAX) + 1));
        let mut c = PROCESSOR_CONFIG_DEFAULT;
        c.max_retries = 3;
        c.mode = mql_processing_mode::Concurrently as c_int;
        let core = c.to_core().ok().map(|c| (c.max_retries, c.mode));
        assert_eq!(core, Some((Some(3), ProcessingMode::Concurrently)));
    }
}
