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
//! made after. The one exception is the system clock being set (stepped)
//! while a window is open: no reading of the counter can see that.
//!
//! The counter's rate is measured here against the system clock, over
//! 20 ms between two reads each bracketed by counter reads no more than
//! a few microseconds apart ([`measure_rate`]), not taken from `quanta`'s
//! own calibration: that one spans well under a millisecond, so a thread
//! preempted in its last sample skews it by percents. The measurement runs
//! on the broker's background pool when a broker opens ([`calibrate`]),
//! never in a send; until it is done every read is a system-clock read. The
//! window is cut to 90 % of the time left to the boundary, less 2 us, so
//! that a rate disagreement under 10 % (the 8.3 % at which chrony slews the
//! clock by default, a measurement error) or a small skew between cores
//! stays inside it. Each fresh read checks the counter against the clock
//! since the thread's previous read; if they disagree by more than 0.5 %
//! (a bad measurement, a stepped or fast-slewed clock), every thread goes
//! back to reading the system clock every time.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const NANOS_PER_MS: u64 = 1_000_000;
/// Slack kept before each millisecond boundary, in nanoseconds.
const MARGIN_NS: u64 = 2_000;
/// How long the counter's rate is measured over.
const RATE_SPAN: Duration = Duration::from_millis(20);
/// The largest error a rate measurement may carry, as a fraction of it.
const RATE_TOLERANCE: f64 = 1e-4;

/// The last system-clock read of this thread.
#[derive(Clone, Copy)]
struct Window {
    /// Counter value taken just before the read.
    raw: u64,
    /// Counter value taken just after the read.
    raw_after: u64,
    /// The read, in nanoseconds since the epoch (0 before any read).
    ns: u64,
    /// Counter ticks after `raw` during which `ns`'s millisecond still holds.
    valid_ticks: u64,
}

thread_local! {
    static LAST: Cell<Window> = const {
        Cell::new(Window { raw: 0, raw_after: 0, ns: 0, valid_ticks: 0 })
    };
}

/// Set when the counter was found to disagree with the system clock.
static DISTRUSTED: AtomicBool = AtomicBool::new(false);

/// The cycle counter and its rate, measured against the system clock.
struct Rate {
    clock: quanta::Clock,
    /// Counter ticks per nanosecond of the system clock.
    ticks_per_ns: f64,
}

impl Rate {
    /// Nanoseconds that `ticks` of the counter stand for.
    fn nanos(&self, ticks: u64) -> u64 {
        (ticks as f64 / self.ticks_per_ns) as u64
    }

    /// Counter ticks in `ns` nanoseconds.
    fn ticks(&self, ns: u64) -> u64 {
        (ns as f64 * self.ticks_per_ns) as u64
    }
}

/// The cycle counter, usable once its rate is measured.
struct Counter {
    rate: OnceLock<Rate>,
    /// Whether a calibration was started.
    started: AtomicBool,
}

impl Counter {
    const fn new() -> Counter {
        Counter {
            rate: OnceLock::new(),
            started: AtomicBool::new(false),
        }
    }

    /// The calibrated counter; `None` until [`Counter::calibrate`] is done,
    /// and for good if it could not measure the rate.
    fn get(&self) -> Option<&Rate> {
        self.rate.get()
    }

    /// Calibrates the counter in the calling thread, unless a calibration
    /// was already started.
    fn calibrate(&self) {
        if !self.started.swap(true, Ordering::AcqRel) {
            let clock = quanta::Clock::new();
            if let Some(ticks_per_ns) = measure_rate(&clock) {
                let _ = self.rate.set(Rate {
                    clock,
                    ticks_per_ns,
                });
            }
        }
    }
}

static COUNTER: Counter = Counter::new();

/// A system-clock read bracketed by two counter reads: the counter value
/// halfway between them, the read, and the ticks between them.
fn bracketed_read(clock: &quanta::Clock) -> (u64, u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..32 {
        let before = clock.raw();
        let ns = system_ns();
        let after = clock.raw();
        if after >= before && after - before < best.2 {
            best = (before + (after - before) / 2, ns, after - before);
        }
    }
    best
}

/// The counter's ticks per nanosecond of the system clock, from two
/// bracketed reads [`RATE_SPAN`] apart; `None` if three tries found no pair
/// of reads close enough to their counter values to measure within
/// [`RATE_TOLERANCE`] (a machine too loaded), or the clocks going backwards.
fn measure_rate(clock: &quanta::Clock) -> Option<f64> {
    for _ in 0..3 {
        let (raw0, ns0, width0) = bracketed_read(clock);
        std::thread::sleep(RATE_SPAN);
        let (raw1, ns1, width1) = bracketed_read(clock);
        if raw1 <= raw0 || ns1 <= ns0 || width0 == u64::MAX || width1 == u64::MAX {
            continue;
        }
        let ticks = raw1 - raw0;
        if (width0 + width1) as f64 <= ticks as f64 * RATE_TOLERANCE {
            return Some(ticks as f64 / (ns1 - ns0) as f64);
        }
    }
    None
}

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
    let rate = match counter.get() {
        Some(r) if !DISTRUSTED.load(Ordering::Relaxed) => r,
        _ => return (system_ns() / NANOS_PER_MS) as i64,
    };
    let raw = rate.clock.raw();
    let last = LAST.get();
    if last.ns != 0 && raw >= last.raw && raw - last.raw < last.valid_ticks {
        return (last.ns / NANOS_PER_MS) as i64;
    }
    fresh(rate, raw, last)
}

/// Reads the system clock, opens this thread's next window and checks the
/// counter against the clock since the previous one.
#[cold]
fn fresh(rate: &Rate, raw: u64, last: Window) -> i64 {
    let ns = system_ns();
    let raw_after = rate.clock.raw();
    #[cfg(test)]
    tests::FRESH_READS.with(|n| n.set(n.get() + 1));
    if last.ns != 0 && raw >= last.raw_after && raw_after >= last.raw && ns >= last.ns {
        // Each read happened somewhere between its two counter values, so
        // the counter puts the time between them in [shortest, longest].
        let shortest = rate.nanos(raw - last.raw_after);
        let longest = rate.nanos(raw_after - last.raw);
        let by_clock = ns - last.ns;
        let slack = by_clock / 200 + 1_000;
        if by_clock + slack < shortest || by_clock > longest + slack {
            DISTRUSTED.store(true, Ordering::Relaxed);
        }
    }
    let left = NANOS_PER_MS - ns % NANOS_PER_MS;
    let valid_ns = (left - left / 10).saturating_sub(MARGIN_NS);
    LAST.set(Window {
        raw,
        raw_after,
        ns,
        valid_ticks: rate.ticks(valid_ns),
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
    use std::time::Instant;

    thread_local! {
        pub(super) static FRESH_READS: Cell<u64> = const { Cell::new(0) };
    }

    fn system_ms() -> i64 {
        (system_ns() / NANOS_PER_MS) as i64
    }

    /// The system clock minus the monotonic one (from `origin`), in
    /// nanoseconds: it moves when the system clock is set. `None` when the
    /// two reads were too far apart to tell (a preempted thread).
    fn clock_offset(origin: Instant) -> Option<i128> {
        let before = origin.elapsed().as_nanos() as i128;
        let ns = i128::from(system_ns());
        let after = origin.elapsed().as_nanos() as i128;
        (after - before < 20_000).then(|| ns - i128::midpoint(before, after))
    }

    /// Every read lies between a system read made before it and one made
    /// after, except where the system clock was set meanwhile (which the
    /// module does not promise to follow, and which this test skips and
    /// counts).
    #[test]
    fn never_before_an_earlier_read_nor_after_a_later_one() {
        calibrate();
        let origin = Instant::now();
        let start = Instant::now();
        let (mut calls, mut set) = (0u64, 0u64);
        while start.elapsed() < Duration::from_millis(300) {
            let offset = clock_offset(origin);
            let before = system_ms();
            let t = now_ms();
            let after = system_ms();
            let moved = match (offset, clock_offset(origin)) {
                (Some(a), Some(b)) => (b - a).abs() > 50_000,
                _ => true,
            };
            let within = before <= t && t <= after;
            if moved && !within {
                set += 1;
                continue;
            }
            assert!(
                within,
                "{before} <= {t} <= {after}, window from {} ns for {} ticks",
                LAST.get().ns,
                LAST.get().valid_ticks
            );
            calls += 1;
        }
        assert!(set * 100 <= calls, "{set} calls skipped of {calls}");
        let fresh = FRESH_READS.with(Cell::get);
        assert!(
            !DISTRUSTED.load(Ordering::Relaxed),
            "the counter was distrusted"
        );
        // Most calls are answered without a system-clock read.
        assert!(fresh * 4 < calls, "{fresh} fresh reads for {calls} calls");
    }

    /// The measured rate turns a span of the counter into the system
    /// clock's span within a hundredth of a percent (plus the reads' own
    /// width), over a span longer than the one it was measured on.
    #[test]
    fn the_measured_rate_agrees_with_the_system_clock() {
        let clock = quanta::Clock::new();
        let ticks_per_ns = measure_rate(&clock).expect("a rate");
        let (raw0, ns0, w0) = bracketed_read(&clock);
        std::thread::sleep(Duration::from_millis(50));
        let (raw1, ns1, w1) = bracketed_read(&clock);
        let by_counter = (raw1 - raw0) as f64 / ticks_per_ns;
        let by_clock = (ns1 - ns0) as f64;
        let width = (w0 + w1) as f64 / ticks_per_ns;
        assert!(
            (by_counter - by_clock).abs() <= by_clock * 1e-4 + width + 1_000.0,
            "counter {by_counter} ns, clock {by_clock} ns"
        );
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
