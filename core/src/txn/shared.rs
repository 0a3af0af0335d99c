//! The coordinator in shared mode: every process that may write commits
//! through the data directory's one transaction log.
//!
//! A commit holds the directory's transaction lock from before it looks
//! at the log to after its offsets are committed, so whoever holds the
//! lock knows that no commit is under way. The lock is held in the first
//! page of the file `TXN`, mapped by every process: the same lock words as
//! a partition's append lock (see `shared::append_lock`: a
//! compare-and-swap on the holder's process token, waiters napping then
//! asleep on a futex, a lock whose holder's process is gone taken over),
//! so that a commit costs no system call for the lock. The page also says
//! what the last holder left ([`HOLDER`], [`LOG_LEN`], [`CLEAN`]):
//!
//! - a holder that let go properly cleared `HOLDER` and wrote the log's
//!   length; when that is the length this process last saw, of the same
//!   file, and the lock was not taken from a dead holder, nobody committed
//!   since and nothing is read;
//! - otherwise the holder takes in what the others appended to the log
//!   since it last looked (all of it again when one of them emptied it: a
//!   new file), and finishes every commit record that is neither within
//!   the first `CLEAN` bytes of the log nor noted applied: its committer
//!   died after the commit point (`HOLDER` left set), or could not commit
//!   the offsets. Finishing one writes its markers (taking a partition's
//!   append lock over from a dead committer restores its part, see
//!   `log/txn_part.rs`), commits its offsets and notes it applied.
//!
//! A holder that lets go with nothing left to finish sets `CLEAN` to the
//! log's length, so a commit that ends properly writes one entry to the
//! log, its commit record. The page is a cache of the log and the notes:
//! a page that is missing, foreign or describes another file (see
//! [`LogIdent`]) makes the next holder read the log and rely on the notes
//! only. An exclusive open takes `CLEAN` in for the shared commits of the
//! log it describes, then forgets the page. The log is emptied only when
//! nothing is left to finish.
//!
//! A holder reads no commit record within the first `CLEAN` bytes that it
//! had not read before ([`NEXT_TXN`] says what to number from instead), so
//! a process's first look costs what is left to finish, not the log; it
//! reads the log whole only before emptying it, to learn which partitions
//! those skipped commits wrote.
//!
//! Layout (little-endian): magic `MQLTXN02`; u64 at 8 [`HOLDER`]; u64 at
//! 16, 24 and 48, the log's device, inode and birth time; u64 at 32
//! [`LOG_LEN`]; u64 at 40 [`CLEAN`]; u64 at 56 [`NEXT_TXN`]; the lock
//! words: u64 at 64, the holder's process token (0: free); u64 at 72,
//! unused (the append lock's in-progress word); u32 at 80, the sleeping
//! lockers; u32 at 84, the futex word bumped at unlock.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::journal::{CommitRecord, Entry, Journal, LogIdent};
use super::{apply_offsets, write_missing_markers, Coordinator, State};
use crate::broker::BrokerInner;
use crate::error::{Error, Result};
use crate::shared::{
    process_alive, LockLayout, LockWords, ProcessSlot, Processes, SharedPage, Word32, Word64,
};

/// The directory's transaction lock file.
pub(crate) const LOCK_FILE: &str = "TXN";

/// The magic of the lock file's page.
const MAGIC: [u8; 8] = *b"MQLTXN02";
/// The magic of a page written before [`NEXT_TXN`] (its other words mean
/// the same).
const MAGIC_1: [u8; 8] = *b"MQLTXN01";
/// The process id of the holder while it holds the lock; 0 once it let go
/// properly (found set by the next holder: the last one died holding it).
const HOLDER: Word64 = Word64::at(8);
/// Device, inode and birth time of the log that [`LOG_LEN`] and
/// [`CLEAN`] describe (see [`LogIdent`]).
const LOG_DEV: Word64 = Word64::at(16);
const LOG_INO: Word64 = Word64::at(24);
const LOG_BORN: Word64 = Word64::at(48);
/// The log's length when the last holder let go.
const LOG_LEN: Word64 = Word64::at(32);
/// Every commit record within the log's first `CLEAN` bytes is finished.
const CLEAN: Word64 = Word64::at(40);
/// Greater than the number of every transaction within the log's first
/// [`LOG_LEN`] bytes: what a process that skips them numbers from.
const NEXT_TXN: Word64 = Word64::at(56);

/// The lock's words.
const LOCK: LockLayout = LockLayout {
    owner: Word64::at(64),
    in_progress: Word64::at(72),
    waiters: Word32::at(80),
    releases: Word32::at(84),
};

/// Where a shared-mode coordinator's lock is, and whom it is taken for.
#[derive(Debug)]
pub(super) struct LockSite {
    /// The data directory: its [`LOCK_FILE`] holds the lock, its
    /// processes' files say whether a holder lives.
    root: PathBuf,
    /// This process's registration: the token the lock is held under,
    /// kept alive while the coordinator may hold the lock.
    slot: Arc<ProcessSlot>,
}

/// The lock's words in `page` (mapped read-write: never `None` there).
fn lock_words(page: &SharedPage) -> Option<LockWords<'_, Processes>> {
    LockWords::in_page(page, LOCK, &Processes::SHORT_NAPS)
}

/// What the page says for "no log".
const NO_LOG: LogIdent = LogIdent {
    dev: 0,
    ino: 0,
    born: 0,
};

/// The identity of the log the page describes.
fn page_ident(page: &SharedPage) -> LogIdent {
    LogIdent {
        dev: page.load64(LOG_DEV),
        ino: page.load64(LOG_INO),
        born: page.load64(LOG_BORN),
    }
}

/// The bytes at the start of the log `ident` (of `len` bytes) within which
/// the page says every commit record is finished; 0 unless the page
/// describes that log.
fn clean_in(page: &SharedPage, ident: Option<LogIdent>, len: u64) -> u64 {
    match ident {
        Some(ident)
            if (page.has_magic(MAGIC) || page.has_magic(MAGIC_1)) && page_ident(page) == ident =>
        {
            page.load64(CLEAN).min(len)
        }
        _ => 0,
    }
}

/// The directory's transaction lock, held; let go when dropped (leaving
/// the page saying that its holder died: the next holder reads the log)
/// or with [`Held::release`]. A process that ends holding it leaves its
/// token in the lock word, and the next locker takes it over once the
/// token's `.live` lock is free. Holds the page and this process's token.
pub(super) struct Held(Arc<SharedPage>, u64);

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(w) = lock_words(&self.0) {
            w.unlock(self.1, true);
        }
    }
}

impl Held {
    /// Lets go, first writing in the page what the log holds as this
    /// process leaves it: nothing left to finish (`CLEAN` its length) when
    /// `st` knows of no unfinished commit.
    pub(super) fn release(self, st: &State) {
        let page = &self.0;
        let len = st.journal.len();
        let clean = if st.loaded.is_empty() {
            len
        } else {
            clean_in(page, st.journal.ident(), len)
        };
        let ident = st.journal.ident().unwrap_or(NO_LOG);
        page.store64(LOG_DEV, ident.dev);
        page.store64(LOG_INO, ident.ino);
        page.store64(LOG_BORN, ident.born);
        page.store64(LOG_LEN, len);
        page.store64(CLEAN, clean);
        page.store64(NEXT_TXN, st.next_txn);
        page.set_magic(MAGIC);
        page.store64(HOLDER, 0);
    }
}

/// [`clean_in`] the lock file's page of data directory `dir` (mapped
/// read-only; 0 when there is no whole page).
pub(super) fn clean_bytes(dir: &Path, ident: Option<LogIdent>, len: u64) -> u64 {
    SharedPage::open_read_only(&dir.join(LOCK_FILE)).map_or(0, |p| clean_in(&p, ident, len))
}

/// Whether the log of data directory `dir` is exactly the file, of the
/// length, that the lock file's page says the last holder left: then no
/// exclusive session wrote to it since (an exclusive session's appends
/// lengthen it, and its emptying makes a new file), and a shared open
/// need not read it to learn so. `false` when either is missing.
pub(super) fn log_as_page_left(dir: &Path) -> bool {
    let Ok(page) = SharedPage::open_read_only(&dir.join(LOCK_FILE)) else {
        return false;
    };
    let Ok(m) = std::fs::metadata(dir.join(super::journal::FILE_NAME)) else {
        return false;
    };
    (page.has_magic(MAGIC) || page.has_magic(MAGIC_1))
        && page_ident(&page) == LogIdent::of(&m)
        && page.load64(LOG_LEN) == m.len()
}

/// Exclusive mode, once the log was taken in and emptied: empties the
/// lock file, so that no page outlives the log it describes.
pub(super) fn forget_page(dir: &Path) {
    let path = dir.join(LOCK_FILE);
    if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) {
        if let Err(e) = f.set_len(0) {
            ::log::warn!("emptying {}: {e}", path.display());
        }
    }
}

/// What this process writes in [`HOLDER`]: its process id (read once:
/// each read is a system call).
fn holder_id() -> u64 {
    static ID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *ID.get_or_init(|| u64::from(std::process::id()).max(1))
}

impl Coordinator {
    /// Shared mode: the coordinator of data directory `dir` for the
    /// process registered there as `slot`, which may write. The log is
    /// read under the lock, at each commit and at
    /// [`Coordinator::finish_at_open`].
    pub(crate) fn open_shared(dir: &Path, mode: u32, slot: Arc<ProcessSlot>) -> Coordinator {
        Coordinator {
            state: Mutex::new(State {
                journal: Journal::unread(dir, mode),
                next_txn: 0,
                loaded: Vec::new(),
                applied: HashSet::new(),
                pending: Vec::new(),
                touched: HashSet::new(),
                touched_partly: false,
                lock_page: None,
            }),
            committed: Arc::new(HashMap::new()),
            lock_site: Some(LockSite {
                root: dir.to_owned(),
                slot,
            }),
            mode,
        }
    }

    /// Shared mode, once the engine is open: finishes the commits whose
    /// committer died after their commit point; with `restarted` (the
    /// first open after a restart of the machine) writes the markers of
    /// every commit in the log, since a power loss may have taken markers
    /// that were never synced.
    pub(crate) fn finish_at_open(&self, broker: &BrokerInner, restarted: bool) -> Result<()> {
        let mut st = crate::sync::lock(&self.state);
        let held = self.hold(&mut st, broker, restarted)?;
        let res = if st.journal.len() > super::compact_at() {
            super::compact(&mut st, broker)
        } else {
            Ok(())
        };
        if let Some(h) = held {
            h.release(&st);
        }
        res
    }

    /// Shared mode: takes the transaction lock and catches up with the log
    /// (see the module doc); `all`: every commit's markers. `None` in
    /// exclusive mode.
    pub(super) fn hold(
        &self,
        st: &mut State,
        broker: &BrokerInner,
        all: bool,
    ) -> Result<Option<Held>> {
        let Some(site) = &self.lock_site else {
            return Ok(None);
        };
        // Mapped once, locked for each commit.
        let page = if let Some(p) = &st.lock_page {
            Arc::clone(p)
        } else {
            let p = SharedPage::open(&site.root.join(LOCK_FILE), self.mode)?;
            Arc::clone(st.lock_page.insert(Arc::new(p)))
        };
        let Some(words) = lock_words(&page) else {
            return Err(Error::ReadOnly(format!(
                "{} is mapped read-only",
                site.root.join(LOCK_FILE).display()
            )));
        };
        let root = &site.root;
        let me = site.slot.token();
        let taken = words.lock(me, &|t| process_alive(root, t));
        let held = Held(page, me);
        let page = &held.0;
        // A holder that died may have appended without writing the page.
        let proper = taken.stolen.is_none() && page.has_magic(MAGIC) && page.load64(HOLDER) == 0;
        let seen = st.journal.ident().unwrap_or(NO_LOG);
        let unchanged =
            proper && page_ident(page) == seen && page.load64(LOG_LEN) == st.journal.len();
        page.store64(HOLDER, holder_id());
        if unchanged && !all && st.loaded.is_empty() {
            return Ok(Some(held));
        }
        // The bytes the page says are finished are not read (unless every
        // commit is wanted): nothing there is left to do, and the page
        // says what to number from.
        let skip = (!all && page.has_magic(MAGIC)).then(|| (page_ident(page), page.load64(CLEAN)));
        let (new, replaced, skipped) = st.journal.refresh_skipping(skip)?;
        if replaced {
            // Emptied by another process: everything in it was finished.
            st.touched.clear();
            st.loaded.clear();
            st.touched_partly = false;
        }
        if skipped {
            st.next_txn = st.next_txn.max(page.load64(NEXT_TXN));
            st.touched_partly = true;
        }
        let clean = clean_in(page, st.journal.ident(), st.journal.len());
        let done = |c: &CommitRecord| new.applied.contains(&c.txn) || (c.end > 0 && c.end <= clean);
        st.next_txn = st.next_txn.max(new.next_txn);
        let mut left_over = Vec::new();
        for c in new.commits {
            for p in &c.parts {
                st.touched.insert((p.topic.clone(), p.partition));
            }
            if all || !done(&c) {
                left_over.push(c);
            }
        }
        st.loaded.retain(|c| all || !new.applied.contains(&c.txn));
        st.loaded.extend(left_over);
        let mut left = Vec::new();
        for c in std::mem::take(&mut st.loaded) {
            let applied = done(&c);
            if let Err(e) = finish(st, broker, &c, applied) {
                ::log::warn!(
                    "finishing transaction {} ({:?}), whose committer died or could not \
                     commit its offsets: {e}",
                    c.txn,
                    c.transactional_id
                );
                left.push(c);
            }
        }
        st.loaded = left;
        Ok(Some(held))
    }

    /// Whether this is a shared-mode coordinator.
    pub(super) fn is_shared(&self) -> bool {
        self.lock_site.is_some()
    }
}

/// Writes the markers of `c` where they are missing and, unless it is
/// noted `applied`, commits its offsets and notes it so.
fn finish(st: &mut State, broker: &BrokerInner, c: &CommitRecord, applied: bool) -> Result<()> {
    write_missing_markers(broker, c)?;
    if applied {
        return Ok(());
    }
    if !c.offsets.is_empty() {
        apply_offsets(broker, &c.offsets)?;
    }
    st.journal.append(&Entry::Applied { txn: c.txn }, false)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_page_is_trusted_only_for_the_log_it_describes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let log = LogIdent {
            dev: 3,
            ino: 7,
            born: 11,
        };
        let ident = Some(log);
        assert_eq!(clean_bytes(dir, ident, 100), 0, "no lock file");
        let page = SharedPage::open(&dir.join(LOCK_FILE), 0o600).unwrap();
        assert_eq!(clean_bytes(dir, ident, 100), 0, "a blank page");
        page.store64(LOG_DEV, 3);
        page.store64(LOG_INO, 7);
        page.store64(LOG_BORN, 11);
        page.store64(CLEAN, 80);
        page.set_magic(MAGIC);
        assert_eq!(clean_bytes(dir, ident, 100), 80);
        assert_eq!(clean_bytes(dir, ident, 50), 50, "never past the log's end");
        let other = LogIdent { ino: 8, ..log };
        assert_eq!(clean_bytes(dir, Some(other), 100), 0, "another file");
        let reborn = LogIdent { born: 12, ..log };
        assert_eq!(clean_bytes(dir, Some(reborn), 100), 0, "its inode reused");
        assert_eq!(clean_bytes(dir, None, 100), 0, "no log");
        page.set_magic(*b"SOMETHIN");
        assert_eq!(clean_bytes(dir, ident, 100), 0, "a foreign page");
        page.set_magic(MAGIC);
        forget_page(dir);
        assert_eq!(std::fs::metadata(dir.join(LOCK_FILE)).unwrap().len(), 0);
        assert_eq!(clean_bytes(dir, ident, 100), 0, "an emptied lock file");
    }

    #[test]
    fn a_log_is_vouched_for_only_as_the_page_left_it() {
        use std::io::Write;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let log = dir.join(super::super::journal::FILE_NAME);
        std::fs::write(&log, b"0123456789").unwrap();
        assert!(!log_as_page_left(dir), "no page");
        let page = SharedPage::open(&dir.join(LOCK_FILE), 0o600).unwrap();
        let ident = LogIdent::of(&std::fs::metadata(&log).unwrap());
        page.store64(LOG_DEV, ident.dev);
        page.store64(LOG_INO, ident.ino);
        page.store64(LOG_BORN, ident.born);
        page.store64(LOG_LEN, 10);
        assert!(!log_as_page_left(dir), "a blank page");
        page.set_magic(MAGIC);
        assert!(log_as_page_left(dir));
        // Appended to since (an exclusive session's commit, say).
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"x").unwrap();
        assert!(!log_as_page_left(dir), "longer");
        page.store64(LOG_LEN, 11);
        assert!(log_as_page_left(dir));
        // Replaced by another file of the same length.
        std::fs::remove_file(&log).unwrap();
        std::fs::write(&log, b"01234567890").unwrap();
        let now = LogIdent::of(&std::fs::metadata(&log).unwrap());
        assert_eq!(log_as_page_left(dir), now == ident, "another file");
        std::fs::remove_file(&log).unwrap();
        assert!(!log_as_page_left(dir), "no log");
    }
}
