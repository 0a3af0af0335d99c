//! Producer counters.

use std::sync::atomic::{AtomicU64, Ordering};

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

/// One set of counters, alone on its cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    records: AtomicU64,
    bytes: AtomicU64,
    batches: AtomicU64,
    errors: AtomicU64,
    duplicates: AtomicU64,
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

fn shard_index() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    INDEX.with(|i| *i)
}

impl Counters {
    #[inline]
    fn mine(&self) -> &Shard {
        &self.shards[shard_index()]
    }

    /// Counts one batch of `records` records and `bytes` bytes written.
    #[inline]
    pub(crate) fn written(&self, records: u64, bytes: u64) {
        let s = self.mine();
        s.records.fetch_add(records, Ordering::Relaxed);
        s.bytes.fetch_add(bytes, Ordering::Relaxed);
        s.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts failed records.
    pub(crate) fn errors(&self, n: u64) {
        self.mine().errors.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts records dropped as duplicates.
    pub(crate) fn duplicates(&self, n: u64) {
        self.mine().duplicates.fetch_add(n, Ordering::Relaxed);
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
