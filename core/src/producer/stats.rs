//! Producer counters.

use crate::sync;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

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
    // Retries and fault avoidance.
    /// Sends of key-less records (or batches of them) tried again on
    /// another partition after a partition fault.
    pub retries: u64,
    /// Times a partition was put on the producer's avoid list after a
    /// fault (see `ProducerConfig::fault_backoff_ms`).
    pub avoided_partitions: u64,
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
///
/// A thread that owns a slot (see [`thread_slot`]) is the only writer of
/// its shard in every producer and adds with plain loads and stores: no
/// atomic read-modify-write on the send path. The shared shard, for threads
/// without a slot, is written under `busy` (one atomic swap). Readers load
/// without either.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    busy: AtomicBool,
    records: AtomicU64,
    bytes: AtomicU64,
    batches: AtomicU64,
    errors: AtomicU64,
    duplicates: AtomicU64,
    retries: AtomicU64,
    avoided: AtomicU64,
}

impl Shard {
    /// Runs `f` as this shard's only writer, taking `busy` first.
    #[inline]
    fn update_shared(&self, f: impl FnOnce(&Shard)) {
        let mut spins = 0u32;
        while self.busy.swap(true, Ordering::Acquire) {
            // Held for a few instructions by another thread; yield if that
            // thread was descheduled while holding it.
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

/// Adds `n` to a counter only the caller writes (it owns or holds the
/// shard).
#[inline]
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// Shards per block of owned shards.
const BLOCK: usize = 32;
/// Blocks of owned shards: threads with a slot number past
/// `BLOCK * BLOCKS` share the locked shard.
const BLOCKS: usize = 32;

/// The producer's counters: one shard per thread that sent through it, so
/// that senders neither contend for a cache line nor pay an atomic add.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Owned shards by thread slot, a block allocated when a thread of that
    /// block first writes.
    owned: [OnceLock<Box<[Shard; BLOCK]>>; BLOCKS],
    /// For threads without a slot (too many threads, or a thread already
    /// being torn down).
    shared: Shard,
    buffered: AtomicU64,
    peak_buffered: AtomicU64,
}

impl Counters {
    /// Runs `f` on this thread's shard as its only writer.
    #[inline]
    fn update(&self, f: impl FnOnce(&Shard)) {
        self.update_as(thread_slot(), f);
    }

    /// Runs `f` on the shard of the thread holding `slot` (`None`: the
    /// shared one).
    #[inline]
    fn update_as(&self, slot: Option<usize>, f: impl FnOnce(&Shard)) {
        match slot {
            Some(slot) if slot < BLOCK * BLOCKS => {
                let block = self.owned[slot / BLOCK]
                    .get_or_init(|| Box::new(std::array::from_fn(|_| Shard::default())));
                f(&block[slot % BLOCK]);
            }
            _ => self.shared.update_shared(f),
        }
    }

    /// Counts one batch of `records` records and `bytes` bytes written.
    #[inline]
    pub(crate) fn written(&self, records: u64, bytes: u64) {
        self.update(|s| {
            bump(&s.records, records);
            bump(&s.bytes, bytes);
            bump(&s.batches, 1);
        });
    }

    /// Counts `n` records that failed.
    pub(crate) fn errors(&self, n: u64) {
        self.update(|s| bump(&s.errors, n));
    }

    /// Counts `n` records dropped as duplicates.
    pub(crate) fn duplicates(&self, n: u64) {
        self.update(|s| bump(&s.duplicates, n));
    }

    /// Counts `n` sends tried again on another partition.
    pub(crate) fn retries(&self, n: u64) {
        self.update(|s| bump(&s.retries, n));
    }

    /// Counts one partition put on the avoid list.
    pub(crate) fn avoided(&self) {
        self.update(|s| bump(&s.avoided, 1));
    }

    pub(crate) fn set_buffered(&self, bytes: usize) {
        self.buffered.store(bytes as u64, Ordering::Relaxed);
        self.peak_buffered
            .fetch_max(bytes as u64, Ordering::Relaxed);
    }

    /// Bytes held now.
    pub(crate) fn buffered(&self) -> u64 {
        self.buffered.load(Ordering::Relaxed)
    }

    pub(crate) fn snapshot(&self) -> ProducerStats {
        let mut st = ProducerStats {
            buffered_bytes: self.buffered(),
            peak_buffered_bytes: self.peak_buffered.load(Ordering::Relaxed),
            ..ProducerStats::default()
        };
        let owned = self
            .owned
            .iter()
            .filter_map(OnceLock::get)
            .flat_map(|b| b.iter());
        for s in owned.chain(std::iter::once(&self.shared)) {
            st.records += s.records.load(Ordering::Relaxed);
            st.bytes += s.bytes.load(Ordering::Relaxed);
            st.batches += s.batches.load(Ordering::Relaxed);
            st.errors += s.errors.load(Ordering::Relaxed);
            st.duplicates += s.duplicates.load(Ordering::Relaxed);
            st.retries += s.retries.load(Ordering::Relaxed);
            st.avoided_partitions += s.avoided.load(Ordering::Relaxed);
        }
        st
    }
}

/// No slot taken yet.
const NO_SLOT: usize = usize::MAX;
/// The thread gave its slot back (it is exiting) or could not keep one.
const SLOT_GONE: usize = usize::MAX - 1;

/// Slot numbers given back by exited threads.
static FREE_SLOTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// The next slot number never handed out.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot (const-initialised: one load to read).
    static SLOT: Cell<usize> = const { Cell::new(NO_SLOT) };
    /// Gives the slot back when the thread exits.
    static SLOT_RETURN: SlotReturn = const { SlotReturn(Cell::new(NO_SLOT)) };
}

/// Returns its slot to [`FREE_SLOTS`] when the thread's locals are dropped.
struct SlotReturn(Cell<usize>);

impl Drop for SlotReturn {
    fn drop(&mut self) {
        let slot = self.0.get();
        if slot == NO_SLOT {
            return;
        }
        // Sends made by later thread-local destructors go to the shared
        // shard: the slot may already belong to another thread.
        let _ = SLOT.try_with(|s| s.set(SLOT_GONE));
        sync::lock(&FREE_SLOTS).push(slot);
    }
}

/// A number no other live thread holds, taken on this thread's first call
/// and held until it exits. `None` when the thread is exiting.
#[inline]
fn thread_slot() -> Option<usize> {
    match SLOT.try_with(Cell::get) {
        Ok(NO_SLOT) => take_slot(),
        Ok(SLOT_GONE) | Err(_) => None,
        Ok(slot) => Some(slot),
    }
}

#[cold]
#[inline(never)]
fn take_slot() -> Option<usize> {
    let slot = sync::lock(&FREE_SLOTS)
        .pop()
        .unwrap_or_else(|| NEXT_SLOT.fetch_add(1, Ordering::Relaxed));
    // The slot is owned only once its return is registered; a thread whose
    // locals are already being dropped gives it back at once.
    let kept = SLOT_RETURN.try_with(|r| r.0.set(slot)).is_ok();
    if !kept {
        sync::lock(&FREE_SLOTS).push(slot);
        let _ = SLOT.try_with(|s| s.set(SLOT_GONE));
        return None;
    }
    let _ = SLOT.try_with(|s| s.set(slot));
    Some(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up() {
        let counters = Counters::default();
        // More threads than a block of shards, in two waves, so that the
        // second wave reuses slots the first gave back.
        for _ in 0..2 {
            std::thread::scope(|s| {
                for _ in 0..40 {
                    s.spawn(|| {
                        for _ in 0..1000 {
                            counters.written(2, 10);
                        }
                        counters.errors(1);
                        counters.duplicates(3);
                    });
                }
            });
        }
        let st = counters.snapshot();
        assert_eq!(st.records, 2 * 40 * 1000 * 2);
        assert_eq!(st.bytes, 2 * 40 * 1000 * 10);
        assert_eq!(st.batches, 2 * 40 * 1000);
        assert_eq!(st.errors, 2 * 40);
        assert_eq!(st.duplicates, 2 * 40 * 3);
    }

    #[test]
    fn exited_threads_give_their_slots_back() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let slot = std::thread::spawn(thread_slot).join().expect("thread");
            seen.insert(slot.expect("a slot"));
        }
        // Without reuse every thread would take a new number; other tests
        // running at once hold a few.
        assert!(seen.len() < 50, "{} slots for 200 threads", seen.len());
    }

    #[test]
    fn threads_without_an_owned_shard_share_the_locked_one() {
        let counters = Counters::default();
        std::thread::scope(|s| {
            for slot in [None, Some(BLOCK * BLOCKS), Some(usize::MAX / 2)] {
                let counters = &counters;
                s.spawn(move || {
                    for _ in 0..10_000 {
                        counters.update_as(slot, |s| bump(&s.records, 1));
                    }
                });
            }
        });
        assert_eq!(counters.snapshot().records, 30_000);
        assert_eq!(counters.shared.records.load(Ordering::Relaxed), 30_000);
        assert!(counters.owned.iter().all(|b| b.get().is_none()));
    }
}
