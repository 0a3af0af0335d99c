//! The engine's log records (recovery cuts, corruption found, committed
//! offsets reset, failed background work), handed to a C callback.
//!
//! The engine reports through the `log` crate; this module installs the
//! library's logger the first time `mql_set_log_callback` is called and
//! forwards the records at or above the level of `mql_set_log_level` to the
//! callback, on whichever thread logged them. Records below the level cost
//! one atomic load (the `log` crate's global maximum level).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, RwLock};

use ::log::{Level, LevelFilter, Log, Metadata, Record};

use crate::error::{c_text, guard, mql_status, Failure, FfiResult};
use mqlite::sync;

/// How severe a log record is, as in Rust's `log` crate (and in the same
/// order: a larger value is more verbose). `MQL_LOG_OFF` is for
/// `mql_set_log_level` only; a callback never receives it.
///
/// cbindgen:prefix-with-name=false
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mql_log_level {
    /// No records at all (`mql_set_log_level` only).
    MQL_LOG_OFF = 0,
    /// Something failed: data could not be read or written as asked.
    MQL_LOG_ERROR = 1,
    /// Something was repaired or given up: recovery cut a damaged log,
    /// a committed offset was reset, background work failed (the default
    /// level).
    MQL_LOG_WARN = 2,
    /// Notable events of normal operation.
    MQL_LOG_INFO = 3,
    /// Details for debugging.
    MQL_LOG_DEBUG = 4,
    /// Very detailed tracing.
    MQL_LOG_TRACE = 5,
}

/// A log callback: receives each record at or above the level set with
/// `mql_set_log_level`. `level` is never `MQL_LOG_OFF`; `target` names the
/// part of the engine that logged (a Rust module path such as
/// `"mqlite::log::segment"`); `message` is the text, without a trailing
/// newline. Both strings are NUL-terminated UTF-8, valid during the call
/// only.
///
/// It runs on the thread that logged, which may be one of the library's
/// background threads, and on several threads at once: it must be
/// thread-safe, and so must `user_data`. It runs while the engine may hold
/// internal locks, so it must return promptly and must not call any
/// `mql_` function (records logged on its thread while it runs are
/// dropped, and `mql_set_log_callback` called from it fails).
pub type mql_log_callback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        level: mql_log_level,
        target: *const c_char,
        message: *const c_char,
    ),
>;

/// The installed callback and its user data.
#[derive(Clone, Copy)]
struct Sink {
    f: unsafe extern "C" fn(*mut c_void, mql_log_level, *const c_char, *const c_char),
    user_data: *mut c_void,
}

// SAFETY: the library never dereferences `user_data`; it only hands it back
// to the callback, on any thread. `mql_set_log_callback`'s contract makes
// the caller responsible for the pointer being usable from every thread.
unsafe impl Send for Sink {}
// SAFETY: as above: shared access only copies the pointer.
unsafe impl Sync for Sink {}

/// The callback, if any. Read-locked while a callback runs, so that
/// `mql_set_log_callback` (which write-locks it) returns only once no call
/// of the previous callback is running.
static SINK: RwLock<Option<Sink>> = RwLock::new(None);

/// The level set by `mql_set_log_level`, as a `LevelFilter` (`usize`);
/// what the `log` crate's maximum level is while a callback is installed.
static LEVEL: AtomicUsize = AtomicUsize::new(LevelFilter::Warn as usize);

/// Whether installing the library's logger worked (once per process).
static INSTALLED: OnceLock<bool> = OnceLock::new();

thread_local! {
    /// Set while this thread runs the callback.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// The library's `log::Log`: forwards to [`SINK`].
struct CallbackLogger;

static LOGGER: CallbackLogger = CallbackLogger;

fn level_filter(n: usize) -> LevelFilter {
    match n {
        1 => LevelFilter::Error,
        2 => LevelFilter::Warn,
        3 => LevelFilter::Info,
        4 => LevelFilter::Debug,
        5 => LevelFilter::Trace,
        _ => LevelFilter::Off,
    }
}

fn c_level(level: Level) -> mql_log_level {
    match level {
        Level::Error => mql_log_level::MQL_LOG_ERROR,
        Level::Warn => mql_log_level::MQL_LOG_WARN,
        Level::Info => mql_log_level::MQL_LOG_INFO,
        Level::Debug => mql_log_level::MQL_LOG_DEBUG,
        Level::Trace => mql_log_level::MQL_LOG_TRACE,
    }
}

/// Whether this thread is running the callback (false while the thread is
/// being torn down).
fn in_callback() -> bool {
    IN_CALLBACK.try_with(Cell::get).unwrap_or(false)
}

/// Resets [`IN_CALLBACK`] when the callback returns.
struct InCallback;

impl InCallback {
    fn enter() -> Option<InCallback> {
        IN_CALLBACK
            .try_with(|c| c.set(true))
            .ok()
            .map(|()| InCallback)
    }
}

impl Drop for InCallback {
    fn drop(&mut self) {
        let _ = IN_CALLBACK.try_with(|c| c.set(false));
    }
}

impl CallbackLogger {
    fn forward(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) || in_callback() {
            return;
        }
        let sink = sync::read(&SINK);
        let Some(s) = *sink else {
            return;
        };
        let target = c_text(record.target().to_owned());
        let message = c_text(record.args().to_string());
        let Some(_entered) = InCallback::enter() else {
            return; // the thread is being torn down
        };
        // SAFETY: `f` and `user_data` were given together to
        // mql_set_log_callback, whose contract makes the callback callable
        // from any thread with that user data until it is replaced (which
        // waits for this read lock). Both strings are NUL-terminated and
        // live until after the call.
        unsafe {
            (s.f)(
                s.user_data,
                c_level(record.level()),
                target.as_ptr(),
                message.as_ptr(),
            );
        };
    }
}

impl Log for CallbackLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= level_filter(LEVEL.load(Ordering::Relaxed))
    }

    fn log(&self, record: &Record<'_>) {
        // Logging must never unwind into the engine (a Display impl that
        // panics, say): the record is dropped instead.
        let _ = catch_unwind(AssertUnwindSafe(|| self.forward(record)));
    }

    fn flush(&self) {}
}

/// Sets the `log` crate's maximum level from [`LEVEL`] and whether a
/// callback is installed (call with [`SINK`] write-locked).
fn apply_max_level(installed: bool) {
    ::log::set_max_level(if installed {
        level_filter(LEVEL.load(Ordering::Relaxed))
    } else {
        LevelFilter::Off
    });
}

/// Installs the library's logger, once per process.
fn install() -> FfiResult {
    let ok = *INSTALLED.get_or_init(|| ::log::set_logger(&LOGGER).is_ok());
    if ok {
        Ok(())
    } else {
        Err(Failure::invalid(
            "another logger of the `log` crate is installed in this process",
        ))
    }
}

/// Sends the engine's log records (recovery cuts, corruption found,
/// committed offsets reset, failed background work) at or above the level
/// of `mql_set_log_level` (default `MQL_LOG_WARN`) to `callback`, with
/// `user_data`, replacing any previous callback. NULL turns logging off
/// (the default).
///
/// The callback runs on the thread that logged, often one of the library's
/// background threads, and on several at once; see `mql_log_callback` for
/// what it may do. When this function returns, no call of the previous
/// callback is still running, so its `user_data` may be freed. Logging is
/// one setting for the whole process.
///
/// Errors: `MQL_INVALID_ARGUMENT` when called from a log callback, or when
/// another logger of Rust's `log` crate already owns this process's
/// records (a Rust program linking the static library with a logger of its
/// own).
///
/// Ownership: the library keeps `callback` and `user_data` until they are
/// replaced; it never frees `user_data`.
///
/// # Safety
/// `callback` is NULL or a function of this type that may be called, with
/// `user_data`, from any thread until it is replaced.
#[no_mangle]
pub unsafe extern "C" fn mql_set_log_callback(
    callback: mql_log_callback,
    user_data: *mut c_void,
) -> mql_status {
    guard(|| {
        if in_callback() {
            return Err(Failure::invalid(
                "mql_set_log_callback cannot be called from a log callback",
            ));
        }
        let sink = callback.map(|f| Sink { f, user_data });
        if sink.is_some() {
            install()?;
        }
        let mut current = sync::write(&SINK);
        *current = sink;
        apply_max_level(current.is_some());
        Ok(())
    })
}

/// The most verbose level of the records the log callback receives: one
/// of the `mql_log_level` values (passed as `int`, so that any value is
/// safe to pass; others give `MQL_INVALID_ARGUMENT`). `MQL_LOG_OFF` drops
/// every record; the default is `MQL_LOG_WARN`. Records above the level
/// cost one atomic load. May be called at any time, before or after
/// `mql_set_log_callback`, from any thread but a log callback.
///
/// Errors: `MQL_INVALID_ARGUMENT` for a value that is no level, or when
/// called from a log callback.
#[no_mangle]
pub extern "C" fn mql_set_log_level(level: c_int) -> mql_status {
    guard(|| {
        let n = usize::try_from(level)
            .ok()
            .filter(|&n| n <= mql_log_level::MQL_LOG_TRACE as usize)
            .ok_or_else(|| {
                Failure::invalid(format!(
                    "level must be MQL_LOG_OFF (0) to MQL_LOG_TRACE (5), got {level}"
                ))
            })?;
        if in_callback() {
            return Err(Failure::invalid(
                "mql_set_log_level cannot be called from a log callback",
            ));
        }
        let current = sync::write(&SINK);
        LEVEL.store(n, Ordering::Relaxed);
        apply_max_level(current.is_some());
        Ok(())
    })
}
