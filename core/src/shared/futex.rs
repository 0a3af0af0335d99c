//! Waiting on a 32-bit word in a shared mapping until another process
//! changes it.
//!
//! On Linux this is a futex without `FUTEX_PRIVATE_FLAG`: the kernel keys a
//! shared futex on the page's file and offset, not on the waiter's virtual
//! address, so a process that maps the same file at another address wakes
//! it. Every wait has a timeout, so a lost wake-up (a writer killed between
//! its store and its wake) costs at most that long. Where there is no
//! shared futex the wait sleeps for the shorter of the timeout and
//! [`POLL_INTERVAL`], and the caller looks again.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How long a wait sleeps where the platform has no shared futex.
#[cfg_attr(target_os = "linux", allow(dead_code))]
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Why [`wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitOutcome {
    /// The word no longer held the expected value (before or during the
    /// wait), or a wake-up came (possibly a spurious one).
    Changed,
    /// The timeout passed with the word unchanged, as far as the wait saw.
    TimedOut,
}

/// Waits while `word` holds `expected`, for at most `timeout`.
///
/// Returns at once with [`WaitOutcome::Changed`] when the word differs.
/// Callers re-read what the word guards in every case: a return says only
/// that it is worth looking again.
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> WaitOutcome {
    if word.load(Ordering::Acquire) != expected {
        return WaitOutcome::Changed;
    }
    platform::wait(word, expected, timeout)
}

/// Wakes every process and thread waiting on `word`.
pub(crate) fn wake_all(word: &AtomicU32) {
    platform::wake_all(word);
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod platform {
    use super::WaitOutcome;
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> WaitOutcome {
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos().cast_signed()),
        };
        // SAFETY: `word` is a live, aligned 32-bit atomic for the duration
        // of the call (the borrow keeps its mapping alive); FUTEX_WAIT only
        // reads it, compares it with `expected` atomically in the kernel
        // and sleeps; `ts` outlives the call; the last two arguments are
        // unused by FUTEX_WAIT.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                &raw const ts,
                std::ptr::null::<u32>(),
                0u32,
            )
        };
        if rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
            WaitOutcome::TimedOut
        } else {
            // 0 (woken or spurious), EAGAIN (the value differed), EINTR.
            WaitOutcome::Changed
        }
    }

    pub(super) fn wake_all(word: &AtomicU32) {
        // SAFETY: as in `wait`; FUTEX_WAKE does not access the word's
        // memory beyond using its address as the key.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE,
                i32::MAX,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod platform {
    use super::{WaitOutcome, POLL_INTERVAL};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> WaitOutcome {
        std::thread::sleep(timeout.min(POLL_INTERVAL));
        if word.load(Ordering::Acquire) == expected {
            WaitOutcome::TimedOut
        } else {
            WaitOutcome::Changed
        }
    }

    pub(super) fn wake_all(_word: &AtomicU32) {}
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::shared::page::{SharedPage, Word32};
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_changed_word_returns_at_once() {
        let w = AtomicU32::new(5);
        let t = Instant::now();
        assert_eq!(wait(&w, 4, Duration::from_secs(5)), WaitOutcome::Changed);
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn an_unchanged_word_times_out() {
        let w = AtomicU32::new(5);
        let t = Instant::now();
        let mut outcome = WaitOutcome::Changed;
        // Spurious wake-ups are allowed; a few tries must see the timeout.
        for _ in 0..5 {
            outcome = wait(&w, 5, Duration::from_millis(20));
            if outcome == WaitOutcome::TimedOut {
                break;
            }
        }
        assert_eq!(outcome, WaitOutcome::TimedOut);
        assert!(t.elapsed() >= Duration::from_millis(10));
    }

    /// Two maps of one file are two virtual addresses of one page: a
    /// private futex (keyed on the address) would never wake across them,
    /// so this fails unless the futex is shared (on Linux the wait would
    /// end by its 30 s timeout, not by the wake-up).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_wake_through_another_map_of_the_file_ends_the_wait() {
        const WORD: Word32 = Word32::at(64);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("page");
        let a = Arc::new(SharedPage::open(&path, 0o600).unwrap());
        let b = SharedPage::open(&path, 0o600).unwrap();
        assert_ne!(a.address_of(WORD), b.address_of(WORD));
        let waiter = {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                let t = Instant::now();
                while a.load32(WORD) == 0 {
                    a.wait32(WORD, 0, Duration::from_secs(30));
                }
                t.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        b.store32(WORD, 1);
        b.wake32(WORD);
        let waited = waiter.join().unwrap();
        assert!(waited < Duration::from_secs(10), "woken after {waited:?}");
    }
}
