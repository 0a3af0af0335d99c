//! Producer counters.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a producer did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Records written.
    pub records: u64,
    /// Bytes of batches written (headers included, after compression).
    pub bytes: u64,
    /// Batches written.
    pub batches: u64,
    /// Records that failed.
    pub errors: u64,
    /// Records dropped as duplicates (by sequence).
    pub duplicates: u64,
    /// Bytes held now: in unsent batches and awaiting `acks=all` flushes.
    pub buffered_bytes: u64,
    /// The most bytes ever held at once.
    pub peak_buffered_bytes: u64,
}

impl ProducerStats {
    /// Average records per batch.
    pub fn average_batch_records(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.records as f64 / self.batches as f64
        }
    }

    /// Average bytes per batch.
    pub fn average_batch_bytes(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.bytes as f64 / self.batches as f64
        }
    }
}

/// One set of counters, alone on its cache line. Its writers take `busy`
/// (one atomic swap) and then add with plain loads and stores, instead of
/// paying an atomic add per counter; readers load without it.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    busy: AtomicBool,
    records: AtomicU64,
    bytes: AtomicU64,
    batches: AtomicU64,
    errors: AtomicU64,
    duplicates: AtomicU64,
}

impl Shard {
    /// Runs `f` as this shard's only writer.
    #[inline]
    fn update(&self, f: impl FnOnce(&Shard)) {
        let mut spins = 0u32;
        while self.busy.swap(true, Ordering::Acquire) {
            // Held for a few instructions by another thread of this shard;
            // yield if that thread was descheduled while holding it.
            while self.busy.load(Ordering::Relaxed) {
                spins += 1;
                if spins.is_multiple_of(64) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        f(self);
        self.busy.store(false, Ordering::Release);
    }
}

/// Adds `n` to a counter only the caller writes (it holds the shard).
#[inline]
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

const SHARDS: usize = 8;

/// The producer's counters, sharded by thread so that threads sharing a
/// producer do not fight over one cache line on every send.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    shards: [Shard; SHARDS],
    buffered: AtomicU64,
    peak_buffered: AtomicU64,
}

/// This thread's shard: threads are dealt shards in turn.
fn shard_index() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
    }
    INDEX.with(|i| match i.get() {
        usize::MAX => {
            let n = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            i.set(n);
            n
        }
        n => n,
    })
}

impl Counters {
    #[inline]
    fn mine(&self) -> &Shard {
        &self.shards[shard_index()]
    }

    /// Counts one batch of `records` records and `bytes` bytes written.
    #[inline]
    pub(crate) fn written(&self, records: u64, bytes: u64) {
        self.mine().update(|s| {
            bump(&s.records, records);
            bump(&s.bytes, bytes);
            bump(&s.batches, 1);
        });
    }

    /// Counts `n` records that failed.
    pub(crate) fn errors(&self, n: u64) {
        self.mine().update(|s| bump(&s.errors, n));
    }

    /// Counts `n` records dropped as duplicates.
    pub(crate) fn duplicates(&self, n: u64) {
        self.mine().update(|s| bump(&s.duplicates, n));
    }

    pub(crate) fn set_buffered(&self, bytes: usize) {
        self.buffered.store(bytes as u64, Ordering::Relaxed);
        self.peak_buffered
            .fetch_max(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ProducerStats {
        let sum = |f: fn(&Shard) -> &AtomicU64| {
            self.shards
                .iter()
                .map(|s| f(s).load(Ordering::Relaxed))
                .sum()
        };
        ProducerStats {
            records: sum(|s| &s.records),
            bytes: sum(|s| &s.bytes),
            batches: sum(|s| &s.batches),
            errors: sum(|s| &s.errors),
            duplicates: sum(|s| &s.duplicates),
            buffered_bytes: self.buffered.load(Ordering::Relaxed),
            peak_buffered_bytes: self.peak_buffered.load(Ordering::Relaxed),
        }
    }
}
