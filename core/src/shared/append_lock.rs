//! A partition's append lock: words of its tail page that let one process
//! at a time append, and let the others take the lock over from a holder
//! that died, and repair what it left.
//!
//! The words (see `tail` for their offsets):
//!
//! - `owner`: 0 when free, else the holder's process token (see `procs`).
//!   Taken with a compare-and-swap from 0 (Acquire: the new holder sees
//!   everything earlier holders wrote), given back with a Release store
//!   of 0.
//! - `in_progress`: the end, in the active segment, of the write the
//!   holder is doing past the published length; 0 when none. The holder
//!   stores it before it writes the bytes; it is cleared when the lock is
//!   released.
//! - `waiters`: how many lockers are asleep (or about to sleep) on
//!   `releases`.
//! - `releases`: the futex word: bumped by an unlock that saw waiters.
//!
//! A locker that finds the lock held first spins a little, looking at the
//! lock word after 1, 2, 4 ... [`MAX_BACKOFF`] spin turns (a few
//! microseconds in all: long enough for a holder that appends once to let
//! go); then naps, looking again after each nap (a partition's append
//! lock: [`APPEND_NAP`], about 150 microseconds; a share group's: the
//! shortest sleep the kernel gives, about 50 microseconds with the default
//! timer slack); then sleeps on `releases` in slices of [`WAIT_SLICE`],
//! and asks whether the holder is alive before each sleep. A holder that appends
//! continuously (another process sending as fast as it can) takes the lock
//! again for its next append while the waiter naps, so the processes take
//! turns of a few hundred appends each: the lock's words and the log's
//! tail change cores once per turn, not at every append, the waiter's core
//! is free meanwhile (for the holder's kernel work), and the holder makes
//! no system call for the waiter. The cost is the waiter's latency (a
//! turn, a few hundred microseconds) under such contention. Only a
//! holder found dead (its process's lock file released by the kernel) is
//! robbed: the locker swaps the dead token for its own (a
//! compare-and-swap, so of several lockers exactly one wins) and learns
//! the `in_progress` end the dead holder left, up to which it zeroes the
//! segment from the published length before it writes.
//! Tokens are never reused, so a dead token in `owner` never comes back to
//! life, and the swap cannot take a lock from a live holder. A token no
//! process registered (a garbage word) is dead by the same test.
//!
//! An unlock wakes sleepers only when `waiters` says there are some: the
//! unlocker stores `owner`, then reads `waiters`; a sleeper adds itself to
//! `waiters`, then reads `releases` and `owner`. A sequentially consistent
//! fence between the store and the load on each side guarantees that one
//! of them sees the other's write: either the unlocker wakes the sleeper,
//! or the sleeper sees the lock free (or `releases` moved, and the futex
//! does not sleep). The uncontended path is one compare-and-swap to lock,
//! and a store, a fence and a load to unlock: no system call.
//!
//! The protocol is written once, generic over its atomics and its waits
//! ([`Platform`]), so that the same code runs on the shared page and in
//! the `loom` model check at the end of this file.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::futex;
use super::page::{SharedPage, Word32, Word64};

/// The most spin turns between two looks at the lock word (see the
/// module documentation).
pub(crate) const MAX_BACKOFF: u32 = 64;

/// The shortest nap a locker asks for: the kernel rounds it up (by the
/// thread's timer slack, 50 microseconds by default).
const NAP: Duration = Duration::from_micros(1);

/// The nap a locker of a partition's append lock asks for (about 150
/// microseconds with the default timer slack). A holder that appends
/// continuously takes the lock again for its next append while the
/// others nap, so the nap sets how often the lock is offered, that is
/// how long the turns of processes that all send as fast as they can
/// last, and how often the waiters wake on the cores the holder needs.
/// Four processes on one partition sent more with this nap than with
/// the shortest (see docs/decisions.md).
const APPEND_NAP: Duration = Duration::from_micros(100);

/// How long a locker sleeps on the futex before it looks at the holder
/// again (a dead holder is noticed within about this long).
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(10);

/// The 64-bit atomic operations the protocol uses.
pub(crate) trait Atomic64 {
    /// As [`AtomicU64::load`].
    fn load(&self, order: Ordering) -> u64;
    /// As [`AtomicU64::store`].
    fn store(&self, v: u64, order: Ordering);
    /// As [`AtomicU64::compare_exchange`].
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;
}

/// The 32-bit atomic operations the protocol uses.
pub(crate) trait Atomic32 {
    /// As [`AtomicU32::load`].
    fn load(&self, order: Ordering) -> u32;
    /// As [`AtomicU32::fetch_add`].
    fn fetch_add(&self, v: u32, order: Ordering) -> u32;
    /// As [`AtomicU32::fetch_sub`].
    fn fetch_sub(&self, v: u32, order: Ordering) -> u32;
}

macro_rules! forward_atomics {
    ($a64:ty, $a32:ty) => {
        impl Atomic64 for $a64 {
            fn load(&self, order: Ordering) -> u64 {
                <$a64>::load(self, order)
            }
            fn store(&self, v: u64, order: Ordering) {
                <$a64>::store(self, v, order);
            }
            fn compare_exchange(
                &self,
                current: u64,
                new: u64,
                success: Ordering,
                failure: Ordering,
            ) -> Result<u64, u64> {
                <$a64>::compare_exchange(self, current, new, success, failure)
            }
        }
        impl Atomic32 for $a32 {
            fn load(&self, order: Ordering) -> u32 {
                <$a32>::load(self, order)
            }
            fn fetch_add(&self, v: u32, order: Ordering) -> u32 {
                <$a32>::fetch_add(self, v, order)
            }
            fn fetch_sub(&self, v: u32, order: Ordering) -> u32 {
                <$a32>::fetch_sub(self, v, order)
            }
        }
    };
}

forward_atomics!(AtomicU64, AtomicU32);
#[cfg(test)]
forward_atomics!(loom::sync::atomic::AtomicU64, loom::sync::atomic::AtomicU32);

/// Where the protocol runs: its atomics, and how it spins, fences, sleeps
/// and wakes.
pub(crate) trait Platform {
    /// The 64-bit words.
    type A64: Atomic64;
    /// The 32-bit words.
    type A32: Atomic32;
    /// How many times a locker re-reads a held owner word before it sleeps
    /// on the futex.
    const SPINS: u32;
    /// How many of those looks come after a spin (of 1, 2, 4 ... turns);
    /// the others come after a nap.
    const SPIN_LOOKS: u32;
    /// One turn of a spin.
    fn spin(&self);
    /// A short sleep that needs nothing from the holder (no wake-up).
    fn nap(&self) {}
    /// A memory fence.
    fn fence(&self, order: Ordering);
    /// Sleeps while `word` holds `seen`, one slice at most (returning
    /// early is allowed).
    fn wait(&self, word: &Self::A32, seen: u32);
    /// Wakes every sleeper on `word`.
    fn wake(&self, word: &Self::A32);
}

/// The engine's platform: words of a shared page, futex waits between
/// processes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Processes {
    /// How long a locker asks to nap.
    nap: Duration,
}

impl Processes {
    /// For a lock held for short operations, each its own (a share
    /// group's): the shortest naps, so that the lock is not left idle
    /// long after a holder lets go.
    pub(crate) const SHORT_NAPS: Processes = Processes { nap: NAP };

    /// For a partition's append lock: naps of [`APPEND_NAP`].
    pub(crate) const APPEND_NAPS: Processes = Processes { nap: APPEND_NAP };
}

impl Platform for Processes {
    type A64 = AtomicU64;
    type A32 = AtomicU32;
    // 127 spin turns (a few microseconds), then 13 naps (most of a
    // millisecond, or two with the append lock's) before a sleep on the
    // futex.
    const SPINS: u32 = 20;
    const SPIN_LOOKS: u32 = MAX_BACKOFF.trailing_zeros() + 1;

    fn spin(&self) {
        std::hint::spin_loop();
    }

    fn nap(&self) {
        std::thread::sleep(self.nap);
    }

    fn fence(&self, order: Ordering) {
        std::sync::atomic::fence(order);
    }

    fn wait(&self, word: &AtomicU32, seen: u32) {
        futex::wait(word, seen, WAIT_SLICE);
    }

    fn wake(&self, word: &AtomicU32) {
        futex::wake_all(word);
    }
}

/// What a locker took over from a dead holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stolen {
    /// The dead holder's token (possibly a garbage word: no process had it).
    pub from: u64,
    /// The `in_progress` end it left (0: none). Untrusted: a garbage page
    /// holds anything, so the caller bounds it by the segment's length.
    pub in_progress_end: u64,
}

/// How a lock was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    /// `Some` when it was taken from a dead holder.
    pub stolen: Option<Stolen>,
    /// The `in_progress` end found on taking it (0: none): the end of a
    /// write that a previous holder left unfinished (it died, or released
    /// the lock without finishing). Untrusted, as [`Stolen::in_progress_end`].
    pub unfinished: u64,
}

/// The words of one append lock, and the protocol over them.
#[derive(Debug)]
pub(crate) struct LockWords<'a, P: Platform> {
    /// How to spin, fence, sleep and wake.
    pub platform: &'a P,
    /// The holder's token, or 0.
    pub owner: &'a P::A64,
    /// The end of the write in progress, or 0.
    pub in_progress: &'a P::A64,
    /// How many lockers sleep on `releases`.
    pub waiters: &'a P::A32,
    /// Bumped by each unlock that saw sleepers.
    pub releases: &'a P::A32,
}

/// Where a lock's words are in a shared page.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockLayout {
    pub owner: Word64,
    pub in_progress: Word64,
    pub waiters: Word32,
    pub releases: Word32,
}

impl<'a> LockWords<'a, Processes> {
    /// The lock laid out as `at` in `page`, waited for as `platform`
    /// says; `None` on a read-only page.
    pub(crate) fn in_page(
        page: &'a SharedPage,
        at: LockLayout,
        platform: &'a Processes,
    ) -> Option<Self> {
        Some(LockWords {
            platform,
            owner: page.writable64(at.owner)?,
            in_progress: page.writable64(at.in_progress)?,
            waiters: page.writable32(at.waiters)?,
            releases: page.writable32(at.releases)?,
        })
    }
}

impl<P: Platform> LockWords<'_, P> {
    /// Takes the lock for the process `me` (nonzero), stealing it from a
    /// holder only when `alive` says that holder is dead. Never gives up:
    /// it returns once it holds the lock.
    #[inline]
    pub(crate) fn lock(&self, me: u64, alive: &dyn Fn(u64) -> bool) -> Taken {
        match self
            .owner
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => self.taken(None),
            Err(owner) => self.lock_held(me, owner, alive),
        }
    }

    /// [`LockWords::lock`] once the lock was found held by `owner`.
    #[cold]
    #[inline(never)]
    fn lock_held(&self, me: u64, mut owner: u64, alive: &dyn Fn(u64) -> bool) -> Taken {
        // Looks at the owner word since the start or the last wake-up.
        let mut looks = 0u32;
        // The holder's liveness is asked after each sleep that ran out,
        // not before the first (a probe costs system calls, and most
        // waits end in an unlock) nor after one an unlock ended (that
        // holder was alive).
        let mut probe = false;
        loop {
            if owner == 0 {
                match self
                    .owner
                    .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => return self.taken(None),
                    Err(o) => owner = o,
                }
                continue;
            }
            if looks < P::SPINS {
                if looks < P::SPIN_LOOKS {
                    for _ in 0..1u32 << looks {
                        self.platform.spin();
                    }
                } else {
                    self.platform.nap();
                }
                looks += 1;
                owner = self.owner.load(Ordering::Relaxed);
                continue;
            }
            if probe && !alive(owner) {
                // Dead holders never come back, so the word still holding
                // its token means nobody took the lock since.
                match self
                    .owner
                    .compare_exchange(owner, me, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => {
                        let unfinished = self.in_progress.load(Ordering::Relaxed);
                        return Taken {
                            stolen: Some(Stolen {
                                from: owner,
                                in_progress_end: unfinished,
                            }),
                            unfinished,
                        };
                    }
                    Err(o) => {
                        owner = o;
                        continue;
                    }
                }
            }
            if self.sleep(owner) {
                // Woken by an unlock: spin again for the next one.
                looks = 0;
                probe = false;
            } else {
                probe = true;
            }
            owner = self.owner.load(Ordering::Relaxed);
        }
    }

    #[inline]
    fn taken(&self, stolen: Option<Stolen>) -> Taken {
        Taken {
            stolen,
            unfinished: self.in_progress.load(Ordering::Relaxed),
        }
    }

    /// Sleeps one slice at most while `holder` keeps the lock. Returns
    /// whether an unlock ended the sleep (or came before it), rather than
    /// the slice running out.
    fn sleep(&self, holder: u64) -> bool {
        self.waiters.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `unlock`: either that unlock sees this
        // waiter, or this waiter sees that unlock's store of the owner.
        self.platform.fence(Ordering::SeqCst);
        let seen = self.releases.load(Ordering::Acquire);
        let woken = if self.owner.load(Ordering::Relaxed) == holder {
            self.platform.wait(self.releases, seen);
            self.releases.load(Ordering::Acquire) != seen
        } else {
            true
        };
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        woken
    }

    /// Records, for a holder, the end of the write it is about to do past
    /// the published length.
    pub(crate) fn set_in_progress(&self, end: u64) {
        self.in_progress.store(end, Ordering::Release);
    }

    /// Releases the lock held by `me`, clearing `in_progress` first when
    /// `clear_in_progress`; wakes sleepers if there are any. A lock that
    /// is no longer `me`'s is left as it is: another locker took it over
    /// because something overwrote the owner word (a garbage token names
    /// no live process), and freeing it would let a third locker in
    /// beside that holder, while it repairs what it believes a dead
    /// holder left.
    pub(crate) fn unlock(&self, me: u64, clear_in_progress: bool) {
        if self.owner.load(Ordering::Relaxed) != me {
            return;
        }
        if clear_in_progress {
            self.in_progress.store(0, Ordering::Relaxed);
        }
        if self
            .owner
            .compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // Pairs with the fence in `sleep`.
        self.platform.fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::Relaxed) > 0 {
            self.releases.fetch_add(1, Ordering::Release);
            self.platform.wake(self.releases);
        }
    }
}

/// A held append lock (see the module documentation). Dropping it clears
/// `in_progress`, releases the lock and wakes waiters.
///
/// Not reentrant: taking the lock again in the process that holds it
/// waits for the holder, as any other locker.
#[derive(Debug)]
pub(crate) struct AppendGuard<'a> {
    words: LockWords<'a, Processes>,
    /// The holder's token.
    me: u64,
    taken: Taken,
    /// Whether `in_progress` may be nonzero, to be cleared at release.
    in_progress_set: Cell<bool>,
}

impl<'a> AppendGuard<'a> {
    /// Takes the lock held in `words`.
    #[inline]
    pub(crate) fn lock(
        words: LockWords<'a, Processes>,
        me: u64,
        alive: &dyn Fn(u64) -> bool,
    ) -> AppendGuard<'a> {
        let taken = words.lock(me, alive);
        AppendGuard {
            words,
            me,
            taken,
            in_progress_set: Cell::new(taken.unfinished != 0),
        }
    }

    /// `Some` when the lock was taken from a dead holder: its token and the
    /// `in_progress` end it left (0: none), up to which the new holder
    /// zeroes the segment from the published length (bounded by the
    /// segment's length: the value is untrusted).
    pub(crate) fn stolen(&self) -> Option<Stolen> {
        self.taken.stolen
    }

    /// The `in_progress` end found when the lock was taken (0: none): a
    /// write a previous holder left unfinished, dead or not (see
    /// [`AppendGuard::release_unfinished`]). The same repair applies.
    #[cfg(test)]
    pub(crate) fn unfinished(&self) -> u64 {
        self.taken.unfinished
    }

    /// Records the end of the write about to be done past the published
    /// length, before the bytes are written. After a steal, call it only
    /// once the repair is done: it replaces the end the dead holder left,
    /// which the next stealer would otherwise repair.
    pub(crate) fn set_in_progress(&self, end: u64) {
        self.words.set_in_progress(end);
        self.in_progress_set.set(true);
    }

    /// Releases the lock leaving `in_progress` as it is, for a holder
    /// whose write failed half-way and was not cut back: the next holder
    /// finds it in [`AppendGuard::unfinished`] and repairs it.
    #[cfg(test)]
    pub(crate) fn release_unfinished(self) {
        self.in_progress_set.set(false);
    }
}

impl Drop for AppendGuard<'_> {
    fn drop(&mut self) {
        self.words.unlock(self.me, self.in_progress_set.get());
    }
}

#[cfg(test)]
mod model {
    //! The protocol checked with `loom` over every interleaving (within a
    //! preemption bound) of two or three threads standing for processes.
    //! A process's death is a thread that stops (holding the lock, at a
    //! chosen step) and then marks its token dead, as the kernel releases
    //! a dead process's lock file after its last instruction.
    //!
    //! The segment is a `loom` `UnsafeCell`: loom fails the model if two
    //! threads touch it without one happening before the other, which
    //! checks both mutual exclusion and the memory orderings.

    use super::{Atomic32, LockWords, Platform};
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
    use loom::sync::{Arc, Condvar, Mutex};
    use std::sync::atomic::Ordering;

    /// Words of the segment in the model.
    const LOG_WORDS: usize = 8;
    /// Words one append writes.
    const APPEND_WORDS: u64 = 2;
    /// Tokens `1..TOKENS` may be threads; any other token has no process.
    const TOKENS: usize = 4;

    /// Sleeps as a yield: every slice ends as if its time passed. A spin
    /// does not yield (a yielding thread waits in loom until the others
    /// cannot run, which would hide the looks a waiter takes at a holder
    /// that is still running).
    struct Yielding;

    impl Platform for Yielding {
        type A64 = AtomicU64;
        type A32 = AtomicU32;
        const SPINS: u32 = 1;
        const SPIN_LOOKS: u32 = 0;

        fn spin(&self) {}
        fn fence(&self, order: Ordering) {
            loom::sync::atomic::fence(order);
        }
        fn wait(&self, word: &AtomicU32, seen: u32) {
            if Atomic32::load(word, Ordering::Acquire) == seen {
                loom::thread::yield_now();
            }
        }
        fn wake(&self, _word: &AtomicU32) {}
    }

    /// Sleeps as a futex without a timeout: the check of the word and the
    /// sleep are atomic against a wake (the kernel's hash-bucket lock is
    /// the mutex). A lost wake-up leaves a thread asleep for ever, which
    /// loom reports as a deadlock.
    struct Futex {
        bucket: Mutex<()>,
        queue: Condvar,
    }

    impl Platform for Futex {
        type A64 = AtomicU64;
        type A32 = AtomicU32;
        const SPINS: u32 = 0;
        const SPIN_LOOKS: u32 = 0;

        fn spin(&self) {}
        fn fence(&self, order: Ordering) {
            loom::sync::atomic::fence(order);
        }
        fn wait(&self, word: &AtomicU32, seen: u32) {
            let bucket = self
                .bucket
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if Atomic32::load(word, Ordering::Relaxed) == seen {
                drop(self.queue.wait(bucket));
            }
        }
        fn wake(&self, _word: &AtomicU32) {
            let _bucket = self
                .bucket
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.queue.notify_all();
        }
    }

    /// One partition: the lock's words, the published length (in words),
    /// the segment, and which tokens are dead.
    struct World<P> {
        platform: P,
        owner: AtomicU64,
        in_progress: AtomicU64,
        waiters: AtomicU32,
        releases: AtomicU32,
        published: AtomicU64,
        log: UnsafeCell<[u64; LOG_WORDS]>,
        dead: [AtomicBool; TOKENS],
        /// Whether a lock was taken from a dead holder.
        stole: AtomicBool,
    }

    impl<P: Platform<A64 = AtomicU64, A32 = AtomicU32>> World<P> {
        fn new(platform: P) -> World<P> {
            World {
                platform,
                owner: AtomicU64::new(0),
                in_progress: AtomicU64::new(0),
                waiters: AtomicU32::new(0),
                releases: AtomicU32::new(0),
                published: AtomicU64::new(0),
                log: UnsafeCell::new([0; LOG_WORDS]),
                dead: std::array::from_fn(|_| AtomicBool::new(false)),
                stole: AtomicBool::new(false),
            }
        }

        fn words(&self) -> LockWords<'_, P> {
            LockWords {
                platform: &self.platform,
                owner: &self.owner,
                in_progress: &self.in_progress,
                waiters: &self.waiters,
                releases: &self.releases,
            }
        }

        /// What the processes' lock files say: a token no thread has is
        /// dead (a garbage owner word).
        fn alive(&self, token: u64) -> bool {
            token != 0
                && usize::try_from(token)
                    .ok()
                    .and_then(|t| self.dead.get(t))
                    .is_some_and(|d| !d.load(Ordering::Acquire))
        }

        /// One append by process `me`, which dies at step `die` if it
        /// gets there (steps: 0 holding the lock, 1 after recording the
        /// write in progress, 2 half-way through the write, 3 after the
        /// write, 4 after publishing). Returns whether it published.
        fn append(&self, me: u64, die: Option<u32>) -> bool {
            let words = self.words();
            let taken = words.lock(me, &|t| self.alive(t));
            if let Some(stolen) = taken.stolen {
                assert!(!self.alive(stolen.from), "stole from a live holder");
                self.stole.store(true, Ordering::Relaxed);
                assert_eq!(stolen.in_progress_end, taken.unfinished);
            }
            let (published, died) = self.log.with_mut(|log| {
                // SAFETY: loom's cell hands out the pointer for the
                // duration of the closure, and checks that no other thread
                // accesses the cell concurrently (which is what the model
                // checks).
                #[allow(unsafe_code)]
                let log = unsafe { &mut *log };
                let start = self.published.load(Ordering::Relaxed);
                let from = usize::try_from(start).unwrap_or(LOG_WORDS);
                let to = usize::try_from(taken.unfinished)
                    .unwrap_or(LOG_WORDS)
                    .min(LOG_WORDS);
                // The repair: zero what an unfinished write left.
                for w in log.iter_mut().take(to).skip(from) {
                    *w = 0;
                }
                for (i, w) in log.iter().enumerate() {
                    if i < from {
                        assert_ne!(*w, 0, "published word {i} lost");
                    } else {
                        assert_eq!(*w, 0, "word {i} past the published end survived");
                    }
                }
                let step = |n: u32| die == Some(n);
                if step(0) {
                    return (false, true);
                }
                let end = start + APPEND_WORDS;
                words.set_in_progress(end);
                if step(1) {
                    return (false, true);
                }
                log[from] = me;
                if step(2) {
                    return (false, true);
                }
                log[from + 1] = me;
                if step(3) {
                    return (false, true);
                }
                self.published.store(end, Ordering::Release);
                (true, step(4))
            });
            if died {
                // The kernel releases the lock file after the last
                // instruction of the process.
                if let Some(d) = usize::try_from(me).ok().and_then(|m| self.dead.get(m)) {
                    d.store(true, Ordering::Release);
                }
            } else {
                words.unlock(me, true);
            }
            published
        }
    }

    fn builder(preemptions: usize) -> loom::model::Builder {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(preemptions);
        // A waiter loops (sleep, look again) while a holder runs: longer
        // executions than loom's default allows for.
        b.max_branches = 20_000;
        b
    }

    /// Two processes, one of which dies at `die` with the lock held: the
    /// other takes the lock over, repairs, and appends.
    fn a_death_at(die: u32) {
        // Executions in which the survivor took the lock over (the model
        // must reach the steal, not only the orders where it comes first).
        let steals = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&steals);
        builder(3).check(move || {
            let world = Arc::new(World::new(Yielding));
            let dying = {
                let world = Arc::clone(&world);
                loom::thread::spawn(move || world.append(1, Some(die)))
            };
            let survivor = world.append(2, None);
            let dying = dying
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
            assert!(survivor);
            let published = world.published.load(Ordering::Acquire);
            let appends = u64::from(survivor) + u64::from(dying);
            assert_eq!(published, appends * APPEND_WORDS);
            if world.stole.load(Ordering::Relaxed) {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        });
        assert!(steals.load(Ordering::Relaxed) > 0, "no steal explored");
    }

    #[test]
    fn a_holder_dead_holding_the_lock_is_replaced_and_repaired() {
        for die in 0..=4 {
            a_death_at(die);
        }
    }

    /// Three processes, one of which dies mid-write, with one preemption
    /// (with two, the state space of three threads takes loom minutes).
    #[test]
    fn three_processes_one_dying_half_way() {
        builder(1).check(|| {
            let world = Arc::new(World::new(Yielding));
            let others: Vec<_> = [(1, Some(2)), (2, None)]
                .into_iter()
                .map(|(me, die)| {
                    let world = Arc::clone(&world);
                    loom::thread::spawn(move || world.append(me, die))
                })
                .collect();
            let mut appends = u64::from(world.append(3, None));
            for t in others {
                appends += u64::from(t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
            }
            assert!(appends >= 2);
            assert_eq!(
                world.published.load(Ordering::Acquire),
                appends * APPEND_WORDS
            );
        });
    }

    /// An owner word and an `in_progress` end that no process wrote (a
    /// damaged page), over bytes past the published end: the first locker
    /// takes the lock over and zeroes them.
    #[test]
    fn a_garbage_owner_is_dead() {
        builder(3).check(|| {
            let world = Arc::new(World::new(Yielding));
            world.owner.store(0xA5A5_A5A5_A5A5_A5A5, Ordering::Relaxed);
            world.in_progress.store(5, Ordering::Relaxed);
            world.log.with_mut(|log| {
                // SAFETY: no other thread exists yet.
                #[allow(unsafe_code)]
                let log = unsafe { &mut *log };
                log[..5].fill(0xA5);
            });
            let other = {
                let world = Arc::clone(&world);
                loom::thread::spawn(move || world.append(1, None))
            };
            assert!(world.append(2, None));
            assert!(other
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e)));
            assert_eq!(world.published.load(Ordering::Acquire), 2 * APPEND_WORDS);
        });
    }

    /// Sleepers on a real futex (no timeout): every unlock that leaves
    /// someone asleep wakes them, or loom reports a deadlock.
    #[test]
    fn no_wake_up_is_lost() {
        builder(3).check(|| {
            let world = Arc::new(World::new(Futex {
                bucket: Mutex::new(()),
                queue: Condvar::new(),
            }));
            let others: Vec<_> = [1, 2]
                .into_iter()
                .map(|me| {
                    let world = Arc::clone(&world);
                    loom::thread::spawn(move || world.append(me, None))
                })
                .collect();
            let mut appends = u64::from(world.append(3, None));
            for t in others {
                appends += u64::from(t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
            }
            assert_eq!(appends, 3);
            assert_eq!(world.published.load(Ordering::Acquire), 3 * APPEND_WORDS);
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! The lock on real tail pages: threads with maps of their own standing
    //! for processes, and a real process killed while it holds the lock.

    use super::Stolen;
    use crate::shared::{process_alive, ProcessSlot, Tail, TailPage};
    use std::io::{BufRead, BufReader};
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A child process killed when the test ends, passed or failed.
    struct KillOnDrop(std::process::Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    const CHILD_ENV: &str = "MQLITE_TEST_APPEND_LOCK_CHILD";

    fn tail(published: u64) -> Tail {
        Tail {
            next_offset: published,
            active_base: 0,
            published,
            log_start: 0,
            cuts: 0,
            last_batch: None,
        }
    }

    /// Threads append one word each to a shared "segment" under the lock
    /// of their own map of one tail page; token 1 dies holding the lock
    /// (its guard leaked, its token then reported dead) after writing past
    /// the published end. Exactly one survivor steals, repairs, and no
    /// append is lost or made by two holders at once.
    #[test]
    fn threads_take_turns_and_one_steals_from_a_dead_holder() {
        const THREADS: u64 = 4;
        const APPENDS: u64 = 300;
        let dir = tempfile::tempdir().unwrap();
        TailPage::open(dir.path(), 0o600)
            .unwrap()
            .init_if_new(|| tail(0))
            .unwrap();
        let segment: Arc<Vec<AtomicU64>> = Arc::new(
            (0..(THREADS * APPENDS + 16))
                .map(|_| AtomicU64::new(0))
                .collect(),
        );
        let dead: Arc<Vec<AtomicBool>> =
            Arc::new((0..=THREADS).map(|_| AtomicBool::new(false)).collect());
        let inside = Arc::new(AtomicU32::new(0));
        let steals = Arc::new(AtomicU32::new(0));
        let dying_locked = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (1..=THREADS)
            .map(|me| {
                let (segment, dead, inside, steals, dying_locked) = (
                    Arc::clone(&segment),
                    Arc::clone(&dead),
                    Arc::clone(&inside),
                    Arc::clone(&steals),
                    Arc::clone(&dying_locked),
                );
                let dir = dir.path().to_owned();
                std::thread::spawn(move || {
                    let page = TailPage::open(&dir, 0o600).unwrap();
                    let alive = |t: u64| {
                        usize::try_from(t)
                            .ok()
                            .and_then(|t| dead.get(t))
                            .is_some_and(|d| t != 0 && !d.load(Ordering::Acquire))
                    };
                    if me == 1 {
                        let guard = page.lock_append(me, &alive).unwrap();
                        let published = page.read().unwrap().published;
                        guard.set_in_progress(published + 3);
                        for w in &segment[published as usize..published as usize + 3] {
                            w.store(0xDEAD, Ordering::Relaxed);
                        }
                        std::mem::forget(guard);
                        dying_locked.store(true, Ordering::Release);
                        std::thread::sleep(Duration::from_millis(50));
                        dead[1].store(true, Ordering::Release);
                        return 0;
                    }
                    while !dying_locked.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    for _ in 0..APPENDS {
                        let guard = page.lock_append(me, &alive).unwrap();
                        assert_eq!(inside.fetch_add(1, Ordering::AcqRel), 0, "two holders");
                        let published = page.read().unwrap().published;
                        if let Some(stolen) = guard.stolen() {
                            assert_eq!(stolen.from, 1, "stole from a live holder");
                            steals.fetch_add(1, Ordering::Relaxed);
                            for w in &segment[published as usize..stolen.in_progress_end as usize] {
                                w.store(0, Ordering::Relaxed);
                            }
                        }
                        for (i, w) in segment.iter().enumerate() {
                            let v = w.load(Ordering::Relaxed);
                            if (i as u64) < published {
                                assert_ne!(v, 0, "published word {i} lost");
                            } else {
                                assert_eq!(v, 0, "word {i} past the end survived");
                            }
                        }
                        guard.set_in_progress(published + 1);
                        segment[published as usize].store(me, Ordering::Relaxed);
                        page.write(tail(published + 1));
                        inside.fetch_sub(1, Ordering::AcqRel);
                        drop(guard);
                    }
                    APPENDS
                })
            })
            .collect();
        let appended: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(appended, (THREADS - 1) * APPENDS);
        assert_eq!(steals.load(Ordering::Relaxed), 1);
        let page = TailPage::open(dir.path(), 0o600).unwrap();
        assert_eq!(page.read().unwrap().published, appended);
        assert_eq!(page.append_owner(), 0);
    }

    /// Something overwrites the owner word of a held lock: the next locker
    /// takes the lock over (the garbage names no live process), and the
    /// first holder's release leaves it to that locker instead of freeing
    /// it under it.
    #[test]
    fn a_release_leaves_a_lock_taken_over_to_its_new_holder() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let page = TailPage::open(dir.path(), 0o600).unwrap();
        page.init_if_new(|| tail(0)).unwrap();
        let alive = |t: u64| t == 1 || t == 2;
        let first = page.lock_append(1, &alive).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(crate::shared::TAIL_FILE))
            .unwrap()
            .write_all_at(&0x5eed_u64.to_le_bytes(), 48)
            .unwrap();
        let other = TailPage::open(dir.path(), 0o600).unwrap();
        let second = other.lock_append(2, &alive).unwrap();
        assert_eq!(second.stolen().map(|s| s.from), Some(0x5eed));
        drop(first);
        assert_eq!(page.append_owner(), 2, "freed under its new holder");
        drop(second);
        assert_eq!(page.append_owner(), 0);
    }

    /// Not a test on its own: the child process of
    /// `a_killed_holder_loses_the_lock_within_a_bound`, which takes the
    /// append lock of the partition directory named in its environment,
    /// records a write in progress and waits to be killed.
    #[test]
    #[ignore = "run as a child process by a_killed_holder_loses_the_lock_within_a_bound"]
    fn append_lock_child_holds_until_killed() {
        let Some(dir) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let dir = Path::new(&dir);
        let slot = ProcessSlot::register(dir, 0o600).unwrap();
        let page = TailPage::open(dir, 0o600).unwrap();
        page.init_if_new(|| tail(0)).unwrap();
        let guard = page
            .lock_append(slot.token(), &|t| process_alive(dir, t))
            .unwrap();
        guard.set_in_progress(123);
        println!("locked {:016x}", slot.token());
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    #[test]
    fn a_killed_holder_loses_the_lock_within_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = KillOnDrop(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--ignored",
                    "--exact",
                    "shared::append_lock::tests::append_lock_child_holds_until_killed",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, dir.path())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut holder = None;
        for line in BufReader::new(child.0.stdout.take().unwrap()).lines() {
            if let Some((_, hex)) = line.unwrap().split_once("locked ") {
                holder = Some(u64::from_str_radix(hex.trim(), 16).unwrap());
                break;
            }
        }
        let holder = holder.expect("the child never locked");
        let page = Arc::new(TailPage::open(dir.path(), 0o600).unwrap());
        assert_eq!(page.append_owner(), holder);
        let me = ProcessSlot::register(dir.path(), 0o600).unwrap();
        let token = me.token();
        let locker = {
            let page = Arc::clone(&page);
            let dir = dir.path().to_owned();
            std::thread::spawn(move || {
                let guard = page
                    .lock_append(token, &|t| process_alive(&dir, t))
                    .unwrap();
                (Instant::now(), guard.stolen())
            })
        };
        // A live holder keeps it, however long.
        std::thread::sleep(Duration::from_millis(300));
        assert!(!locker.is_finished(), "took the lock of a live process");
        assert_eq!(page.append_owner(), holder);
        child.0.kill().unwrap(); // SIGKILL: the child's guard never drops
        let killed = Instant::now();
        child.0.wait().unwrap();
        let (locked, stolen) = locker.join().unwrap();
        let took = locked.saturating_duration_since(killed);
        assert!(
            took < Duration::from_secs(5),
            "took {took:?} after the kill"
        );
        assert_eq!(
            stolen,
            Some(Stolen {
                from: holder,
                in_progress_end: 123
            })
        );
        // The guard dropped in the thread: the lock is free, and clean.
        assert_eq!(page.append_owner(), 0);
        let again = page
            .lock_append(token, &|t| process_alive(dir.path(), t))
            .unwrap();
        assert_eq!(again.stolen(), None);
        assert_eq!(again.unfinished(), 0);
    }
}
