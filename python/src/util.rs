//! Argument checks shared by the classes.

use std::time::Duration;

use pyo3::prelude::*;

use crate::error::{invalid_argument, invalid_config};

/// A timeout in seconds; `None` (or `+inf`) means no limit.
///
/// Negative and NaN values raise `InvalidArgument`.
pub fn timeout(py: Python<'_>, seconds: Option<f64>) -> PyResult<Option<Duration>> {
    match seconds {
        None => Ok(None),
        Some(s) if s == f64::INFINITY => Ok(None),
        Some(s) if s.is_nan() || s < 0.0 => Err(invalid_argument(
            py,
            format!("timeout must be a non-negative number of seconds or None, got {s}"),
        )),
        // More than any real wait (~centuries) counts as no limit.
        Some(s) => Ok(Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| d.as_secs() < (1 << 40))),
    }
}

/// An argument that must fit in a `u32` (partition numbers, counts).
pub fn arg_u32(py: Python<'_>, name: &str, v: i64) -> PyResult<u32> {
    u32::try_from(v)
        .map_err(|_| invalid_argument(py, format!("{name} must be 0 to {}, got {v}", u32::MAX)))
}

/// An argument that must not be negative (offsets).
pub fn arg_u64(py: Python<'_>, name: &str, v: i64) -> PyResult<u64> {
    u64::try_from(v)
        .map_err(|_| invalid_argument(py, format!("{name} must not be negative, got {v}")))
}

/// A topic-config value that must not be negative.
pub fn config_u64(py: Python<'_>, name: &str, v: i64) -> PyResult<u64> {
    u64::try_from(v)
        .map_err(|_| invalid_config(py, format!("{name} must not be negative, got {v}")))
}

/// A topic-config value that must fit in a `u32`.
pub fn config_u32(py: Python<'_>, name: &str, v: i64) -> PyResult<u32> {
    u32::try_from(v)
        .map_err(|_| invalid_config(py, format!("{name} must be 0 to {}, got {v}", u32::MAX)))
}

/// Locks `m`, also when a panic poisoned it (the data stays consistent:
/// every holder leaves it whole).
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How often [`run_interruptible`] wakes to check for signals.
const TICK: Duration = Duration::from_millis(100);

/// Runs `work` on a thread of its own and waits for it without the GIL,
/// waking every 100 ms: `tick()` runs at each wake; the first signal
/// (Ctrl-C) calls `interrupt()`, which should make `work` return, and is
/// returned beside `work`'s result (`Err` when its thread panicked).
pub fn run_interruptible<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send,
    mut tick: impl FnMut(),
    interrupt: impl Fn(),
) -> (std::thread::Result<T>, Option<PyErr>) {
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let done_rx = std::sync::Mutex::new(done_rx);
    let mut interrupted = None;
    let result = std::thread::scope(|s| {
        let worker = s.spawn(move || {
            let r = work();
            let _ = done_tx.send(());
            r
        });
        loop {
            tick();
            let finished = py.detach(|| {
                !matches!(
                    lock(&done_rx).recv_timeout(TICK),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                )
            });
            if finished {
                break;
            }
            if interrupted.is_none() {
                if let Err(e) = py.check_signals() {
                    interrupted = Some(e);
                    interrupt();
                }
            }
        }
        py.detach(|| worker.join())
    });
    (result, interrupted)
}
