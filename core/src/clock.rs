//! Wall-clock milliseconds for record timestamps, read without a system call
//! on most sends.
//!
//! A record's create time is the wall clock in milliseconds, as Kafka's. A
//! `SystemTime` read costs about 30 ns, a fifth of a whole `send`; reading
//! the CPU's cycle counter (through `quanta`) costs about 9. So each thread
//! keeps the millisecond it last read from the system clock, with the
//! counter value taken just before that read, and hands the same
//! millisecond out again while the counter says the next millisecond
//! boundary cannot have been reached yet. The answer is the one the system
//! clock would give: never earlier than a `SystemTime` read made before the
//! call (tests and time-index lookups rely on that), never later than one
//! made after.
//!
//! The counter's rate comes from `quanta`'s calibration, which takes tens
//! of milliseconds (up to 200 on a loaded machine): it runs on the broker's
//! background pool when a broker opens ([`calibrate`]), never in a send;
//! until it is done every read is a system-clock read. The window is cut
//! to 99 % of the time left to the boundary, less 2 us, so a rate error under
//! 1 % or a small skew between cores stays inside it. Each fresh read checks
//! the counter against the clock since the thread's previous read; if they
//! disagree by more than 0.5 % (a bad calibration, a stepped clock), every
//! thread goes back to reading the system clock every time.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

const NANOS_PER_MS: u64 = 1_000_000;
/// Slack kept before each millisecond boundary, in nanoseconds.
const MARGIN_NS: u64 = 2_000;

/// The last system-clock read of this thread.
#[derive(Clone, Copy)]
struct Window {
    /// Counter value taken just before the read.
    raw: u64,
    /// Counter value taken just after the read.
    raw_after: u64,
    /// The read, in nanoseconds since the epoch (0 before any read).
    ns: u64,
    /// Nanoseconds after `raw` during which `ns`'s millisecond still holds.
    valid_ns: u64,
}

thread_local! {
    static LAST: Cell<Window> = const {
        Cell::new(Window { raw: 0, raw_after: 0, ns: 0, valid_ns: 0 })
    };
}

/// Set when the counter was found to disagree with the system clock.
static DISTRUSTED: AtomicBool = AtomicBool::new(false);

/// The cycle counter, usable once calibrated.
struct Counter {
    clock: OnceLock<quanta::Clock>,
    /// Whether a calibration was started.
    started: AtomicBool,
}

impl Counter {
    const fn new() -> Counter {
        Counter {
            clock: OnceLock::new(),
            started: AtomicBool::new(false),
        }
    }

    /// The calibrated counter; `None` until [`Counter::calibrate`] is done.
    fn get(&self) -> Option<&quanta::Clock> {
        self.clock.get()
    }

    /// Calibrates the counter in the calling thread, unless a calibration
    /// was already started.
    fn calibrate(&self) {
        if !self.started.swap(true, Ordering::AcqRel) {
            self.clock.get_or_init(quanta::Clock::new);
        }
    }
}

static COUNTER: Counter = Counter::new();

/// Calibrates the cycle counter [`now_ms`] reads, in the calling thread (a
/// background one: it takes tens of milliseconds), unless that was already
/// started.
pub(crate) fn calibrate() {
    COUNTER.calibrate();
}

/// Calibrates the counter on `pool` unless that was already started (the
/// broker calls it when it opens: the first broker of a process queues it).
pub(crate) fn calibrate_on(pool: &crate::background::Pool) {
    if !COUNTER.started.load(Ordering::Acquire) {
        pool.submit(calibrate);
    }
}

/// Nanoseconds since the Unix epoch from the system clock (0 before it).
fn system_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The wall clock in milliseconds since the Unix epoch (0 if the clock is set
/// before it).
pub(crate) fn now_ms() -> i64 {
    now_ms_with(&COUNTER)
}

/// [`now_ms`] reading `counter`: the system clock while it is not
/// calibrated (or distrusted).
#[inline]
fn now_ms_with(counter: &Counter) -> i64 {
    let clock = match counter.get() {
        Some(c) if !DISTRUSTED.load(Ordering::Relaxed) => c,
        _ => return (system_ns() / NANOS_PER_MS) as i64,
    };
    let raw = clock.raw();
    let last = LAST.get();
    if last.ns != 0 && raw >= last.raw && clock.delta_as_nanos(last.raw, raw) < last.valid_ns {
        return (last.ns / NANOS_PER_MS) as i64;
    }
    fresh(clock, raw, last)
}

/// Reads the system clock, opens this thread's next window and checks the
/// counter against the clock since the previous one.
#[cold]
fn fresh(clock: &quanta::Clock, raw: u64, last: Window) -> i64 {
    let ns = system_ns();
    let raw_after = clock.raw();
    #[cfg(test)]
    tests::FRESH_READS.with(|n| n.set(n.get() + 1));
    if last.ns != 0 && raw >= last.raw_after && ns >= last.ns {
        // Each read happened somewhere between its two counter values, so
        // the counter puts the time between them in [shortest, longest].
        let shortest = clock.delta_as_nanos(last.raw_after, raw);
        let longest = clock.delta_as_nanos(last.raw, raw_after);
        let by_clock = ns - last.ns;
        let slack = by_clock / 200 + 1_000;
        if by_clock + slack < shortest || by_clock > longest + slack {
            DISTRUSTED.store(true, Ordering::Relaxed);
        }
    }
    let left = NANOS_PER_MS - ns % NANOS_PER_MS;
    let valid_ns = (left - left / 100).saturating_sub(MARGIN_NS);
    LAST.set(Window {
        raw,
        raw_after,
        ns,
        valid_ns,
    });
    (ns / NANOS_PER_MS) as i64
}

/// Milliseconds of the system's monotonic clock (`CLOCK_MONOTONIC`): the
/// same clock in every process of the machine, never set back, so that
/// processes can compare the poll times they record for each other.
#[allow(unsafe_code)]
pub(crate) fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call; CLOCK_MONOTONIC always exists on the platforms mqlite builds
    // for, and on failure `ts` keeps its zeroes.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    thread_local! {
        pub(super) static FRESH_READS: Cell<u64> = const { Cell::new(0) };
    }

    fn system_ms() -> i64 {
        (system_ns() / NANOS_PER_MS) as i64
    }

    #[test]
    fn never_before_an_earlier_read_nor_after_a_later_one() {
        calibrate();
        let start = Instant::now();
        let mut calls = 0u64;
        while start.elapsed() < Duration::from_millis(300) {
            let before = system_ms();
            let t = now_ms();
            let after = system_ms();
            assert!(before <= t && t <= after, "{before} <= {t} <= {after}");
            calls += 1;
        }
        let fresh = FRESH_READS.with(Cell::get);
        assert!(
            !DISTRUSTED.load(Ordering::Relaxed),
            "the counter was distrusted"
        );
        // Most calls are answered without a system-clock read.
        assert!(fresh * 4 < calls, "{fresh} fresh reads for {calls} calls");
    }

    #[test]
    fn each_thread_keeps_its_own_window() {
        calibrate();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..200_000 {
                        let before = system_ms();
                        let t = now_ms();
                        assert!(before <= t && t <= system_ms());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
    }

    /// A counter not yet calibrated is not calibrated by a read (that
    /// would cost the read tens of milliseconds): the read comes from the
    /// system clock. Once calibrated, it is used.
    #[test]
    fn reads_never_calibrate_the_counter() {
        let counter = Counter::new();
        for _ in 0..1000 {
            let before = system_ms();
            let t = now_ms_with(&counter);
            assert!(before <= t && t <= system_ms());
        }
        assert!(counter.get().is_none(), "a read calibrated the counter");
        counter.calibrate();
        assert!(counter.get().is_some());
        let fresh = FRESH_READS.with(Cell::get);
        for _ in 0..1000 {
            let before = system_ms();
            let t = now_ms_with(&counter);
            assert!(before <= t && t <= system_ms());
        }
        if !DISTRUSTED.load(Ordering::Relaxed) {
            assert!(
                FRESH_READS.with(Cell::get) > fresh,
                "the calibrated counter is not read"
            );
        }
    }
}
