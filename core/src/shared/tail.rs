//! The end of one partition's log as other processes see it: a shared page
//! in the partition's directory (`tail`) that the writer updates after each
//! publish, and readers in other processes read to learn how far they may
//! read.
//!
//! A reader needs the active segment's base offset and its published
//! length together (a length from one segment applied to another could
//! send it past the end of the file), so the writer updates the fields
//! under a sequence lock: the sequence is odd while it writes, and a
//! reader that sees it odd, or changed across its reads, reads again. A
//! writer killed half-way leaves the sequence odd: readers give up after a
//! few tries and keep what they knew, until the next writer resets the
//! page.
//!
//! Like every shared page, the values are untrusted: a reader checks the
//! published length against the segment file it maps before using it.
//!
//! The page also holds the partition's append lock (see `append_lock`),
//! which lets the writers of several processes take turns.

use std::path::{Path, PathBuf};

use super::append_lock::{AppendGuard, LockLayout, LockWords, Processes};
use super::{LiveLock, SharedPage, Word32, Word64};
use crate::error::{Error, Result};

/// The tail page's file name, in the partition's directory.
pub(crate) const TAIL_FILE: &str = "tail";

const MAGIC: [u8; 8] = *b"MQTAIL01";
const SEQ: Word32 = Word32::at(8);
/// Bumped when a writer cut the log below what had been published (repair
/// after its predecessor died): readers position themselves again.
const CUTS: Word32 = Word32::at(12);
const NEXT_OFFSET: Word64 = Word64::at(16);
const ACTIVE_BASE: Word64 = Word64::at(24);
const PUBLISHED: Word64 = Word64::at(32);
const LOG_START: Word64 = Word64::at(40);
/// The append lock's holder: 0 when free, else its process token.
const OWNER: Word64 = Word64::at(48);
/// How many lockers sleep on [`RELEASES`].
const WAITERS: Word32 = Word32::at(56);
/// The futex word of the append lock: bumped by an unlock that saw
/// sleepers.
const RELEASES: Word32 = Word32::at(60);
/// The end, in the active segment, of the write the holder is doing past
/// the published length; 0 when none.
const IN_PROGRESS: Word64 = Word64::at(64);
/// The append lock's words.
const LOCK: LockLayout = LockLayout {
    owner: OWNER,
    in_progress: IN_PROGRESS,
    waiters: WAITERS,
    releases: RELEASES,
};

/// Where the last batch published in the active segment starts.
const LAST_POS: Word64 = Word64::at(104);
/// The active segment's largest record timestamp, as its last publisher
/// knew it.
const MAX_TS: Word64 = Word64::at(112);
/// The sequence [`LAST_POS`] and [`MAX_TS`] belong to: a write that does
/// not know them (or a writer of a version that did not keep them) leaves
/// a value the sequence never takes after a whole write.
const LAST_TAG: Word32 = Word32::at(100);

/// How many times a reader tries to read a consistent tail.
const READ_TRIES: usize = 64;

/// The end of a partition's log, read consistently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tail {
    /// The next offset the log will give.
    pub next_offset: u64,
    /// The base offset of the active segment.
    pub active_base: u64,
    /// Bytes of the active segment that are published.
    pub published: u64,
    /// The log's first offset (retention moves it).
    pub log_start: u64,
    /// How many times a writer cut the log below published data.
    pub cuts: u32,
    /// The last batch the publisher appended, when it knows it (an
    /// append's publish, not a roll's or a repair's).
    pub last_batch: Option<LastBatch>,
}

/// The last batch of the active segment, as the process that appended it
/// published it: lets a writer that takes the append lock next believe the
/// published end after checking one batch header rather than every new
/// one (see `log::shared_writer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastBatch {
    /// Where it starts in the active segment (it ends at the published
    /// length).
    pub pos: u64,
    /// The active segment's largest record timestamp, this batch's
    /// included.
    pub max_timestamp: i64,
}

/// A partition's tail page.
#[derive(Debug)]
pub(crate) struct TailPage {
    page: SharedPage,
    /// The tail file (locked by [`TailPage::init_if_new`]).
    path: PathBuf,
}

impl TailPage {
    /// Opens (creating) the tail page of the partition in `dir`, for the
    /// writer or for readers that may count themselves in.
    pub(crate) fn open(dir: &Path, mode: u32) -> Result<TailPage> {
        let path = dir.join(TAIL_FILE);
        Ok(TailPage {
            page: SharedPage::open(&path, mode)?,
            path,
        })
    }

    /// Makes the tail page of a partition just created in `dir` (nothing
    /// appended to it yet), so that its first use creates no file: an
    /// empty log, unless a process that opened it meanwhile made the page
    /// first.
    pub(crate) fn create_empty(dir: &Path, mode: u32) -> Result<()> {
        TailPage::open(dir, mode)?
            .init_if_new(|| Tail {
                next_offset: 0,
                active_base: 0,
                published: 0,
                log_start: 0,
                cuts: 0,
                last_batch: None,
            })
            .map(drop)
    }

    /// Opens the tail page of the partition in `dir` for reading only
    /// (its append lock cannot be taken: [`TailPage::lock_append`] fails
    /// with [`Error::ReadOnly`]).
    pub(crate) fn open_read_only(dir: &Path) -> Result<TailPage> {
        let path = dir.join(TAIL_FILE);
        Ok(TailPage {
            page: SharedPage::open_read_only(&path)?,
            path,
        })
    }

    /// Sets every field, and frees the append lock (the writer, when it
    /// takes the partition over: the page may hold anything before). Only
    /// for a process that knows no other one may hold the append lock; see
    /// [`TailPage::init_if_new`].
    pub(crate) fn reset(&self, tail: Tail) {
        self.page.reset(MAGIC);
        self.write(tail);
    }

    /// Makes the page a tail page if it is not one yet (no magic: a new
    /// file, or one something else overwrote), with `tail()`'s fields and
    /// a free append lock, and returns whether this call did it. A page
    /// that is a tail page already is left as it is (its lock may be
    /// held). Callers in several processes and threads at once are
    /// serialised by an exclusive `flock` on the tail file, taken through
    /// a descriptor of its own (so threads of one process exclude each
    /// other too), and only when the magic is missing.
    pub(crate) fn init_if_new(&self, tail: impl FnOnce() -> Tail) -> Result<bool> {
        if !self.page.is_writable() {
            return Err(Error::ReadOnly(format!(
                "initialising {}",
                self.path.display()
            )));
        }
        if self.page.has_magic(MAGIC) {
            return Ok(false);
        }
        let _init = LiveLock::hold(&self.path, 0o600)?;
        if self.page.has_magic(MAGIC) {
            return Ok(false);
        }
        let tail = tail();
        self.page.reset_with(MAGIC, || self.write_fields(tail));
        Ok(true)
    }

    /// Takes the partition's append lock for the process `me` (its nonzero
    /// token; see `procs`), waiting while another process holds it: spins
    /// briefly, then sleeps on a futex in slices of 10 ms, asking
    /// `alive(holder)` before each sleep. Takes the lock from a holder
    /// only when `alive` says it is dead (then [`AppendGuard::stolen`]
    /// says what it left). Never gives up because of time alone. Not
    /// reentrant.
    ///
    /// Fails with [`Error::ReadOnly`] on a page opened read-only and
    /// [`Error::InvalidArgument`] for the token 0, changing nothing.
    #[inline]
    pub(crate) fn lock_append<'a>(
        &'a self,
        me: u64,
        alive: &dyn Fn(u64) -> bool,
    ) -> Result<AppendGuard<'a>> {
        if me == 0 {
            return Err(Error::InvalidArgument(
                "the append lock's owner token must not be 0".into(),
            ));
        }
        let words = self.lock_words().ok_or_else(|| {
            Error::ReadOnly(format!("taking the append lock of {}", self.path.display()))
        })?;
        Ok(AppendGuard::lock(words, me, alive))
    }

    /// The append lock's holder as the page says (0: free); for
    /// diagnostics, since it may change at once.
    #[cfg(test)]
    pub(crate) fn append_owner(&self) -> u64 {
        self.page.load64(OWNER)
    }

    /// The append lock's words; `None` on a read-only page.
    fn lock_words(&self) -> Option<LockWords<'_, Processes>> {
        LockWords::in_page(&self.page, LOCK, &Processes::APPEND_NAPS)
    }

    /// Publishes the log's end (the writer, after each append it
    /// published in the log itself), and restores the page's magic if
    /// something overwrote it (leaving the append lock's words as they
    /// are: they may be held).
    pub(crate) fn write(&self, tail: Tail) {
        self.write_fields(tail);
        if !self.page.has_magic(MAGIC) {
            // Overwritten by something else: readers ignored the page
            // until now, that its fields are whole again.
            self.page.set_magic(MAGIC);
        }
    }

    /// Writes the tail's fields under the sequence lock.
    fn write_fields(&self, tail: Tail) {
        let seq = self.page.load32(SEQ);
        // Even when a writer died half-way: start from an even value.
        let start = seq | 1;
        self.page.store32(SEQ, start);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.page.store64(NEXT_OFFSET, tail.next_offset);
        self.page.store64(ACTIVE_BASE, tail.active_base);
        self.page.store64(PUBLISHED, tail.published);
        self.page.store64(LOG_START, tail.log_start);
        self.page.store32(CUTS, tail.cuts);
        match tail.last_batch {
            Some(last) => {
                self.page.store64(LAST_POS, last.pos);
                self.page.store64(MAX_TS, last.max_timestamp as u64);
                self.page.store32(LAST_TAG, start.wrapping_add(1));
            }
            // Odd: no whole write leaves the sequence there.
            None => self.page.store32(LAST_TAG, start),
        }
        self.page.store32(SEQ, start.wrapping_add(1));
    }

    /// Reads the tail consistently; `None` when the page is not a tail
    /// page or no consistent read succeeded (a writer died while writing
    /// it, or writes it without pause).
    pub(crate) fn read(&self) -> Option<Tail> {
        self.read_with_seq().map(|(tail, _)| tail)
    }

    /// [`TailPage::read`], with the sequence the fields were read under.
    pub(crate) fn read_with_seq(&self) -> Option<(Tail, u32)> {
        if !self.page.has_magic(MAGIC) {
            return None;
        }
        for _ in 0..READ_TRIES {
            let s1 = self.page.load32(SEQ);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let tail = Tail {
                next_offset: self.page.load64(NEXT_OFFSET),
                active_base: self.page.load64(ACTIVE_BASE),
                published: self.page.load64(PUBLISHED),
                log_start: self.page.load64(LOG_START),
                cuts: self.page.load32(CUTS),
                last_batch: (self.page.load32(LAST_TAG) == s1).then(|| LastBatch {
                    pos: self.page.load64(LAST_POS),
                    max_timestamp: self.page.load64(MAX_TS) as i64,
                }),
            };
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            if self.page.load32(SEQ) == s1 {
                return Some((tail, s1));
            }
        }
        None
    }

    /// Whether the page still holds what was written or read under
    /// sequence `seq` with next offset `next_offset` (two loads): for a
    /// process that appends, that no other process wrote since. Both must
    /// match: the sequence alone could have wrapped around.
    #[inline]
    pub(crate) fn unchanged_since(&self, seq: u32, next_offset: u64) -> bool {
        self.page.load32(SEQ) == seq && self.page.load64(NEXT_OFFSET) == next_offset
    }

    /// The sequence now (even once a write is complete).
    #[inline]
    pub(crate) fn seq(&self) -> u32 {
        self.page.load32(SEQ)
    }
}

// ------------------------------------------------------------ flushes
// Shared by the processes appending to the partition (`acks=all`): the
// offset below which everything is on disk, the end the flush under way
// covers, and a futex word bumped when a flush ends.

/// Every offset below this is on disk (a process's flush that covered it).
const FLUSHED: Word64 = Word64::at(80);
/// The end offset a flush under way in some process covers.
const FLUSHING_TO: Word64 = Word64::at(88);
/// Bumped when a flush ends (futex word).
const FLUSH_ENDS: Word32 = Word32::at(96);

impl TailPage {
    /// The offset below which every record is on disk, as the processes
    /// flushing the partition last published it (untrusted: the caller
    /// checks it against its own end).
    pub(crate) fn flushed(&self) -> u64 {
        self.page.load64(FLUSHED)
    }

    /// The end offset a flush under way covers (0: none known).
    pub(crate) fn flushing_to(&self) -> u64 {
        self.page.load64(FLUSHING_TO)
    }

    /// A flush covering every offset below `end` starts.
    pub(crate) fn note_flushing(&self, end: u64) {
        self.page.max64(FLUSHING_TO, end);
    }

    /// A flush covering every offset below `end` ended: raises
    /// [`TailPage::flushed`] and wakes the processes waiting for it.
    pub(crate) fn note_flushed(&self, end: u64) {
        self.page.max64(FLUSHED, end);
        self.page.add32(FLUSH_ENDS, 1);
        self.page.wake32(FLUSH_ENDS);
    }

    /// The flush-end counter, read before [`TailPage::wait_flush_end`].
    pub(crate) fn flush_ends(&self) -> u32 {
        self.page.load32(FLUSH_ENDS)
    }

    /// Waits until a flush ends (the counter moves from `seen`), at most
    /// `timeout`.
    pub(crate) fn wait_flush_end(&self, seen: u32, timeout: std::time::Duration) {
        let _ = self.page.wait32(FLUSH_ENDS, seen, timeout);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::shared::Stolen;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    fn tail(n: u64) -> Tail {
        Tail {
            next_offset: n,
            active_base: n / 100 * 100,
            published: n * 7,
            log_start: n / 2,
            cuts: 0,
            last_batch: None,
        }
    }

    #[test]
    fn a_reader_sees_what_the_writer_published() {
        let dir = tempfile::tempdir().unwrap();
        let w = TailPage::open(dir.path(), 0o600).unwrap();
        let r = TailPage::open_read_only(dir.path()).unwrap();
        assert_eq!(r.read(), None, "not a tail page yet");
        w.reset(tail(0));
        assert_eq!(r.read(), Some(tail(0)));
        w.write(tail(250));
        assert_eq!(r.read(), Some(tail(250)));
    }

    #[test]
    fn reads_during_writes_are_never_mixed() {
        let dir = tempfile::tempdir().unwrap();
        let w = TailPage::open(dir.path(), 0o600).unwrap();
        w.reset(tail(0));
        let r = TailPage::open(dir.path(), 0o600).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    w.write(tail(n));
                }
            })
        };
        let mut seen = 0;
        for _ in 0..200_000 {
            if let Some(t) = r.read() {
                assert_eq!(t, tail(t.next_offset), "a mixed read: {t:?}");
                assert!(t.next_offset >= seen);
                seen = t.next_offset;
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    }

    #[test]
    fn the_last_batch_is_read_only_with_the_write_that_named_it() {
        let dir = tempfile::tempdir().unwrap();
        let w = TailPage::open(dir.path(), 0o600).unwrap();
        let r = TailPage::open_read_only(dir.path()).unwrap();
        w.reset(tail(5));
        assert_eq!(r.read().unwrap().last_batch, None);
        let last = LastBatch {
            pos: 300,
            max_timestamp: -7,
        };
        let named = Tail {
            last_batch: Some(last),
            ..tail(6)
        };
        w.write(named);
        assert_eq!(r.read(), Some(named));
        // A write that does not know it (a roll, a repair) leaves none.
        w.write(tail(7));
        assert_eq!(r.read(), Some(tail(7)));
        w.write(named);
        // A writer that does not keep the last batch (an older version)
        // writes the other fields under a new sequence: the stale words
        // are not read.
        let seq = w.page.load32(SEQ);
        w.page.store32(SEQ, seq + 1);
        w.page.store64(NEXT_OFFSET, 8);
        w.page.store32(SEQ, seq + 2);
        let read = r.read().unwrap();
        assert_eq!(read.next_offset, 8);
        assert_eq!(read.last_batch, None);
    }

    #[test]
    fn a_writer_that_died_half_way_leaves_no_read_until_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let w = TailPage::open(dir.path(), 0o600).unwrap();
        w.reset(tail(5));
        w.page.store32(SEQ, 7); // odd: a write that never finished
        assert_eq!(w.read(), None);
        w.write(tail(9));
        assert_eq!(w.read(), Some(tail(9)));
    }

    #[test]
    fn the_next_write_restores_an_overwritten_page() {
        let dir = tempfile::tempdir().unwrap();
        let w = TailPage::open(dir.path(), 0o600).unwrap();
        w.reset(tail(5));
        std::fs::write(dir.path().join(TAIL_FILE), vec![0xA5u8; 4096]).unwrap();
        let r = TailPage::open_read_only(dir.path()).unwrap();
        assert_eq!(r.read(), None);
        w.write(tail(6));
        assert_eq!(r.read(), Some(tail(6)));
    }

    fn never_alive(_: u64) -> bool {
        false
    }

    #[test]
    fn init_if_new_initialises_once_and_keeps_a_held_lock() {
        let dir = tempfile::tempdir().unwrap();
        let a = TailPage::open(dir.path(), 0o600).unwrap();
        assert!(a.init_if_new(|| tail(7)).unwrap());
        assert_eq!(a.read(), Some(tail(7)));
        let guard = a.lock_append(42, &never_alive).unwrap();
        let b = TailPage::open(dir.path(), 0o600).unwrap();
        assert!(!b
            .init_if_new(|| unreachable!("already a tail page"))
            .unwrap());
        assert_eq!(b.append_owner(), 42);
        drop(guard);
        assert_eq!(b.append_owner(), 0);
    }

    #[test]
    fn concurrent_init_if_new_initialises_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let inits: usize = (0..8)
            .map(|i| {
                let dir = dir.path().to_owned();
                std::thread::spawn(move || {
                    let page = TailPage::open(&dir, 0o600).unwrap();
                    usize::from(page.init_if_new(|| tail(i)).unwrap())
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(inits, 1);
        let t = TailPage::open_read_only(dir.path())
            .unwrap()
            .read()
            .unwrap();
        assert_eq!(t, tail(t.next_offset));
    }

    #[test]
    fn a_read_only_page_refuses_the_lock_and_init() {
        let dir = tempfile::tempdir().unwrap();
        TailPage::open(dir.path(), 0o600)
            .unwrap()
            .init_if_new(|| tail(1))
            .unwrap();
        let r = TailPage::open_read_only(dir.path()).unwrap();
        assert!(matches!(
            r.lock_append(5, &never_alive),
            Err(Error::ReadOnly(_))
        ));
        assert!(matches!(r.init_if_new(|| tail(2)), Err(Error::ReadOnly(_))));
        assert_eq!(r.append_owner(), 0);
        assert_eq!(r.read(), Some(tail(1)));
    }

    #[test]
    fn the_token_zero_cannot_lock() {
        let dir = tempfile::tempdir().unwrap();
        let w = TailPage::open(dir.path(), 0o600).unwrap();
        assert!(matches!(
            w.lock_append(0, &never_alive),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(w.append_owner(), 0);
    }

    #[test]
    fn an_uncontended_unlock_wakes_nobody_and_clears_the_write_in_progress() {
        let dir = tempfile::tempdir().unwrap();
        let w = TailPage::open(dir.path(), 0o600).unwrap();
        w.init_if_new(|| tail(0)).unwrap();
        for _ in 0..3 {
            let g = w.lock_append(9, &never_alive).unwrap();
            assert_eq!((g.stolen(), g.unfinished()), (None, 0));
            assert_eq!(w.append_owner(), 9);
            g.set_in_progress(64);
            assert_eq!(w.page.load64(IN_PROGRESS), 64);
        }
        assert_eq!(w.page.load64(IN_PROGRESS), 0);
        assert_eq!(w.page.load32(WAITERS), 0);
        assert_eq!(w.page.load32(RELEASES), 0, "no waiter: no bump, no wake");
    }

    #[test]
    fn an_unfinished_release_is_repaired_by_the_next_holder() {
        let dir = tempfile::tempdir().unwrap();
        let w = TailPage::open(dir.path(), 0o600).unwrap();
        w.init_if_new(|| tail(0)).unwrap();
        let g = w.lock_append(3, &never_alive).unwrap();
        g.set_in_progress(200);
        g.release_unfinished();
        assert_eq!(w.append_owner(), 0);
        let g = w.lock_append(4, &never_alive).unwrap();
        assert_eq!((g.stolen(), g.unfinished()), (None, 200));
    }

    #[test]
    fn a_garbage_owner_is_stolen_and_an_overwritten_page_keeps_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let w = TailPage::open(dir.path(), 0o600).unwrap();
        std::fs::write(dir.path().join(TAIL_FILE), vec![0xA5u8; 4096]).unwrap();
        let g = w.lock_append(11, &never_alive).unwrap();
        let garbage = 0xA5A5_A5A5_A5A5_A5A5;
        assert_eq!(
            g.stolen(),
            Some(Stolen {
                from: garbage,
                in_progress_end: garbage
            })
        );
        // Restoring the header while the lock is held leaves it held.
        w.write(tail(3));
        assert_eq!(w.read(), Some(tail(3)));
        assert_eq!(w.append_owner(), 11);
        drop(g);
        assert_eq!(w.append_owner(), 0);
    }

    #[test]
    fn a_waiter_sleeps_until_the_live_holder_unlocks() {
        let dir = tempfile::tempdir().unwrap();
        let a = TailPage::open(dir.path(), 0o600).unwrap();
        a.init_if_new(|| tail(0)).unwrap();
        let held = a.lock_append(1, &|_| true).unwrap();
        let waiter = {
            let dir = dir.path().to_owned();
            std::thread::spawn(move || {
                let b = TailPage::open(&dir, 0o600).unwrap();
                let g = b.lock_append(2, &|_| true).unwrap();
                g.stolen()
            })
        };
        // Many 10 ms slices pass: still waiting, and counted as a waiter.
        std::thread::sleep(Duration::from_millis(200));
        assert!(!waiter.is_finished());
        assert_eq!(a.append_owner(), 1);
        drop(held);
        assert_eq!(waiter.join().unwrap(), None);
        assert!(a.page.load32(RELEASES) >= 1, "the unlock saw the waiter");
        assert_eq!(a.page.load32(WAITERS), 0);
    }
}
