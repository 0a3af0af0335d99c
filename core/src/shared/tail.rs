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

use std::path::Path;

use super::{SharedPage, Word32, Word64};
use crate::error::Result;

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
}

/// A partition's tail page.
#[derive(Debug)]
pub(crate) struct TailPage {
    page: SharedPage,
}

impl TailPage {
    /// Opens (creating) the tail page of the partition in `dir`, for the
    /// writer or for readers that may count themselves in.
    pub(crate) fn open(dir: &Path, mode: u32) -> Result<TailPage> {
        Ok(TailPage {
            page: SharedPage::open(&dir.join(TAIL_FILE), mode)?,
        })
    }

    /// Opens the tail page of the partition in `dir` for reading only.
    pub(crate) fn open_read_only(dir: &Path) -> Result<TailPage> {
        Ok(TailPage {
            page: SharedPage::open_read_only(&dir.join(TAIL_FILE))?,
        })
    }

    /// Sets every field (the writer, when it takes the partition over:
    /// the page may hold anything before).
    pub(crate) fn reset(&self, tail: Tail) {
        self.page.reset(MAGIC);
        self.write(tail);
    }

    /// Publishes the log's end (the writer, after each append it
    /// published in the log itself), first restoring the page's header if
    /// something overwrote it.
    pub(crate) fn write(&self, tail: Tail) {
        if !self.page.has_magic(MAGIC) {
            // Overwritten by something else: readers ignore the page until
            // it is a tail page again.
            self.page.reset(MAGIC);
        }
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
        self.page.store32(SEQ, start.wrapping_add(1));
    }

    /// Reads the tail consistently; `None` when the page is not a tail
    /// page or no consistent read succeeded (a writer died while writing
    /// it, or writes it without pause).
    pub(crate) fn read(&self) -> Option<Tail> {
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
            };
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            if self.page.load32(SEQ) == s1 {
                return Some(tail);
            }
        }
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn tail(n: u64) -> Tail {
        Tail {
            next_offset: n,
            active_base: n / 100 * 100,
            published: n * 7,
            log_start: n / 2,
            cuts: 0,
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

// ------------------------------------------------------------ append lock
// (interim version: replaced by the full protocol module)

const OWNER: Word64 = Word64::at(48);
const IN_PROGRESS: Word64 = Word64::at(64);

/// The lock was taken from a dead holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stolen {
    /// The dead holder's token.
    pub from: u64,
    /// The end of the write it had in progress (0: none).
    pub in_progress_end: u64,
}

/// A held append lock (released on drop).
#[derive(Debug)]
pub(crate) struct AppendGuard<'a> {
    page: &'a TailPage,
    me: u64,
    stolen: Option<Stolen>,
}

impl AppendGuard<'_> {
    /// `Some` when the lock was taken from a dead holder.
    pub(crate) fn stolen(&self) -> Option<Stolen> {
        self.stolen
    }

    /// Records the end of the write about to be done.
    pub(crate) fn set_in_progress(&self, end: u64) {
        self.page.page.store64(IN_PROGRESS, end);
    }
}

impl Drop for AppendGuard<'_> {
    fn drop(&mut self) {
        self.page.page.store64(IN_PROGRESS, 0);
        let _ = self.page.page.cas64(OWNER, self.me, 0);
    }
}

impl TailPage {
    /// Takes the append lock for `me`.
    pub(crate) fn lock_append<'a>(
        &'a self,
        me: u64,
        alive: &dyn Fn(u64) -> bool,
    ) -> AppendGuard<'a> {
        let mut spins = 0u32;
        loop {
            match self.page.cas64(OWNER, 0, me) {
                Ok(_) => {
                    return AppendGuard {
                        page: self,
                        me,
                        stolen: None,
                    }
                }
                Err(owner) if owner != me && spins > 100 && !alive(owner) => {
                    let in_progress_end = self.page.load64(IN_PROGRESS);
                    if self.page.cas64(OWNER, owner, me).is_ok() {
                        return AppendGuard {
                            page: self,
                            me,
                            stolen: Some(Stolen {
                                from: owner,
                                in_progress_end,
                            }),
                        };
                    }
                }
                Err(_) => {}
            }
            spins += 1;
            if spins < 100 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }

    /// Initialises the page if it is not a tail page yet.
    pub(crate) fn init_if_new(&self, tail: impl FnOnce() -> Tail) -> bool {
        if self.page.has_magic(MAGIC) {
            return false;
        }
        self.reset(tail());
        true
    }
}
