//! The lock of a share group's state in shared mode:
//! `<dir>/groups/<group>.share.lock`, one page mapped by every process
//! that uses the group.
//!
//! The page holds the same lock words as a partition's append lock (see
//! `shared::append_lock`: a compare-and-swap on the holder's process
//! token, waiters asleep on a futex, a dead holder's lock taken over once
//! its process's `.live` lock is gone), and what the last holder left the
//! state file as: its inode, generation and length ([`View`]). A process
//! that takes the lock and finds the page describing the file exactly as
//! it last saw it has nothing to read; otherwise (another process appended
//! or rewrote, a holder died, the page is new or foreign) it reads the
//! file as before. Every change to the file is recorded in the page by
//! its writer while it holds the lock, so a page that matches is never
//! stale; the words are still untrusted, only ever compared.
//!
//! Layout (little-endian): magic `MQSHRL01`; u64 at 8, the holder's
//! process token (0: free); u64 at 16, unused (the append lock's
//! in-progress word); u32 at 24, the sleeping lockers; u32 at 28, the
//! futex word bumped at unlock; u64 at 32, 40 and 48, the state file's
//! inode, generation and length as the last holder left them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;
use crate::shared::{process_alive, LockLayout, LockWords, Processes, SharedPage, Word32, Word64};

const MAGIC: [u8; 8] = *b"MQSHRL01";
const OWNER: Word64 = Word64::at(8);
const LOCK: LockLayout = LockLayout {
    owner: OWNER,
    in_progress: Word64::at(16),
    waiters: Word32::at(24),
    releases: Word32::at(28),
};
const INO: Word64 = Word64::at(32);
const GENERATION: Word64 = Word64::at(40);
const END: Word64 = Word64::at(48);

/// The state file as one process saw or left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    pub ino: u64,
    pub generation: u64,
    pub end: u64,
}

/// The mapped lock page of one share group (see the module doc).
#[derive(Debug)]
pub(crate) struct LockPage {
    page: SharedPage,
    /// The data directory (where processes' liveness is looked up).
    root: PathBuf,
    /// This process's token (nonzero).
    token: u64,
}

/// The lock, held for one operation; let go when dropped.
#[derive(Debug)]
pub(crate) struct OpLock(Arc<LockPage>);

impl Drop for OpLock {
    fn drop(&mut self) {
        if let Some(w) = self.0.words() {
            w.unlock(true);
        }
    }
}

impl LockPage {
    /// Opens (creating it if needed) the lock page at `path`, for the
    /// process of token `token` in data directory `root`.
    ///
    /// # Errors
    /// I/O errors; [`crate::Error::InvalidArgument`] for the token 0.
    pub(crate) fn open(path: &Path, mode: u32, root: &Path, token: u64) -> Result<Arc<LockPage>> {
        if token == 0 {
            return Err(crate::Error::InvalidArgument(
                "a share group's lock needs a nonzero process token".into(),
            ));
        }
        Ok(Arc::new(LockPage {
            page: SharedPage::open(path, mode)?,
            root: root.to_owned(),
            token,
        }))
    }

    /// This process's token.
    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    /// The data directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    fn words(&self) -> Option<LockWords<'_, Processes>> {
        LockWords::in_page(&self.page, LOCK, &Processes::SHORT_NAPS)
    }

    /// Takes the lock, waiting while a live process holds it; returns it
    /// and whether it was taken from a dead holder. Not reentrant.
    pub(crate) fn lock(self: &Arc<Self>) -> (OpLock, bool) {
        let root = &self.root;
        let alive = |t: u64| process_alive(root, t);
        let stolen = match self.words() {
            Some(w) => w.lock(self.token, &alive).stolen.is_some(),
            // Opened read-write: never.
            None => true,
        };
        (OpLock(Arc::clone(self)), stolen)
    }

    /// Whether the page says the state file is exactly `view` (the lock
    /// held).
    pub(crate) fn says(&self, view: View) -> bool {
        self.page.has_magic(MAGIC)
            && View {
                ino: self.page.load64(INO),
                generation: self.page.load64(GENERATION),
                end: self.page.load64(END),
            } == view
    }

    /// Records that the state file is `view` (the lock held).
    pub(crate) fn record(&self, view: View) {
        self.page.store64(INO, view.ino);
        self.page.store64(GENERATION, view.generation);
        self.page.store64(END, view.end);
        self.page.set_magic(MAGIC);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_dead_holder_is_robbed_and_the_view_is_only_compared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.share.lock");
        let slot = crate::shared::ProcessSlot::register(dir.path(), 0o600).unwrap();
        let a = LockPage::open(&path, 0o600, dir.path(), slot.token()).unwrap();
        let view = View {
            ino: 5,
            generation: 2,
            end: 100,
        };
        {
            let (_held, stolen) = a.lock();
            assert!(!stolen);
            assert!(!a.says(view), "a new page says nothing");
            a.record(view);
            assert!(a.says(view));
            assert!(!a.says(View { end: 101, ..view }));
        }
        // A holder whose process is gone (no live token) is robbed.
        let b = LockPage::open(&path, 0o600, dir.path(), slot.token()).unwrap();
        b.page.store64(OWNER, 0xdead);
        let (_held, stolen) = a.lock();
        assert!(stolen);
        assert!(LockPage::open(&path, 0o600, dir.path(), 0).is_err());
    }
}
