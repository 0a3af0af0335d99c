//! The coordinator in shared mode: every process that may write commits
//! through the data directory's one transaction log.
//!
//! A commit holds the directory's transaction lock (`TXN`, an exclusive
//! `flock` the kernel releases when its holder dies) from before it looks
//! at the log to after its offsets are committed, so whoever holds the
//! lock knows that no commit is under way. The lock file's first page,
//! mapped by every process, says what the last holder left ([`HOLDER`],
//! [`LOG_LEN`], [`CLEAN`]):
//!
//! - a holder that let go properly cleared `HOLDER` and wrote the log's
//!   length; when that is the length this process last saw, of the same
//!   file, nobody committed since and nothing is read;
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

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::journal::{CommitRecord, Entry, Journal, LogIdent};
use super::{apply_offsets, write_missing_markers, Coordinator, State};
use crate::broker::BrokerInner;
use crate::error::{IoContext, Result};
use crate::shared::{SharedPage, Word64};

/// The directory's transaction lock file.
pub(crate) const LOCK_FILE: &str = "TXN";

/// The magic of the lock file's page.
const MAGIC: [u8; 8] = *b"MQLTXN01";
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
        Some(ident) if page.has_magic(MAGIC) && page_ident(page) == ident => {
            page.load64(CLEAN).min(len)
        }
        _ => 0,
    }
}

/// The directory's transaction lock, held; let go when dropped (leaving
/// the page saying that its holder died: the next holder reads the log)
/// or with [`Held::release`].
pub(super) struct Held(Arc<SharedPage>);

impl Drop for Held {
    fn drop(&mut self) {
        // Closing the file (at the engine's close, or the process's end)
        // lets go too.
        let _ = self.0.file().unlock();
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
        page.set_magic(MAGIC);
        page.store64(HOLDER, 0);
    }
}

/// [`clean_in`] the lock file's page of data directory `dir` (mapped
/// read-only; 0 when there is no whole page).
pub(super) fn clean_bytes(dir: &Path, ident: Option<LogIdent>, len: u64) -> u64 {
    SharedPage::open_read_only(&dir.join(LOCK_FILE)).map_or(0, |p| clean_in(&p, ident, len))
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
    /// Shared mode: the coordinator of data directory `dir` for a process
    /// that may write. The log is read under the lock, at each commit and
    /// at [`Coordinator::finish_at_open`].
    pub(crate) fn open_shared(dir: &Path, mode: u32) -> Coordinator {
        Coordinator {
            state: Mutex::new(State {
                journal: Journal::unread(dir, mode),
                next_txn: 0,
                loaded: Vec::new(),
                applied: HashSet::new(),
                pending: Vec::new(),
                touched: HashSet::new(),
                lock_page: None,
            }),
            committed: Arc::new(HashMap::new()),
            lock_path: Some(dir.join(LOCK_FILE)),
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
        let res = if st.journal.len() > self.compact_at() {
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
        let Some(path) = &self.lock_path else {
            return Ok(None);
        };
        // Opened once, locked for each commit.
        let page = if let Some(p) = &st.lock_page {
            Arc::clone(p)
        } else {
            let p = SharedPage::open(path, self.mode)?;
            Arc::clone(st.lock_page.insert(Arc::new(p)))
        };
        page.file()
            .lock()
            .ctx(|| format!("locking {}", path.display()))?;
        let held = Held(page);
        let page = &held.0;
        let proper = page.has_magic(MAGIC) && page.load64(HOLDER) == 0;
        let seen = st.journal.ident().unwrap_or(NO_LOG);
        let unchanged =
            proper && page_ident(page) == seen && page.load64(LOG_LEN) == st.journal.len();
        page.store64(HOLDER, holder_id());
        if unchanged && !all && st.loaded.is_empty() {
            return Ok(Some(held));
        }
        let (new, replaced) = st.journal.refresh()?;
        if replaced {
            // Emptied by another process: everything in it was finished.
            st.touched.clear();
            st.loaded.clear();
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
        self.lock_path.is_some()
    }

    /// Bytes of log after which a commit first empties it: smaller in
    /// shared mode, where every process reads the whole log at its first
    /// commit.
    pub(super) fn compact_at(&self) -> u64 {
        if self.is_shared() {
            super::COMPACT_AT_SHARED
        } else {
            super::COMPACT_AT
        }
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
}
