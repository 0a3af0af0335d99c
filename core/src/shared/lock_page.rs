//! A lock of some shared state (a share group's, a consumer group's) held
//! as words in one mapped page, by every process that uses the state.
//!
//! The page holds the same lock words as a partition's append lock (see
//! `append_lock`: a compare-and-swap on the holder's process token,
//! waiters asleep on a futex, a dead holder's lock taken over once its
//! process's `.live` lock is gone), at offsets 8-31. The owner of the
//! page gives it its magic (offset 0) and keeps what it wants beside the
//! lock from [`FREE_AT`] on: typically what the state's files were when
//! the last holder let go, so that a holder that finds them as its
//! process last saw them reads nothing. Those words are written only
//! under the lock; they are untrusted, only ever compared.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{process_alive, LockLayout, LockWords, Processes, SharedPage, Word32, Word64};
use crate::error::Result;

/// The holder's process token (0: free).
const OWNER: Word64 = Word64::at(8);
const LOCK: LockLayout = LockLayout {
    owner: OWNER,
    in_progress: Word64::at(16),
    waiters: Word32::at(24),
    releases: Word32::at(28),
};

/// The first byte of the page after the lock's words.
pub(crate) const FREE_AT: usize = 32;

/// A mapped lock page (see the module doc).
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
            w.unlock(self.0.token, true);
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
                "a shared lock needs a nonzero process token".into(),
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
    /// and whether it was taken from a dead holder (who may have changed
    /// the state without saying so in the page). Not reentrant.
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

    /// Whether the page's magic is `magic`.
    pub(crate) fn has_magic(&self, magic: [u8; 8]) -> bool {
        self.page.has_magic(magic)
    }

    /// Writes the page's magic (the lock held).
    pub(crate) fn set_magic(&self, magic: [u8; 8]) {
        self.page.set_magic(magic);
    }

    /// The word at `w` (at or after [`FREE_AT`]).
    pub(crate) fn load64(&self, w: Word64) -> u64 {
        self.page.load64(w)
    }

    /// Writes the word at `w` (at or after [`FREE_AT`]; the lock held).
    pub(crate) fn store64(&self, w: Word64, v: u64) {
        self.page.store64(w, v);
    }

    /// Marks the lock held by `token`, as a process that died holding it
    /// leaves it.
    #[cfg(test)]
    pub(crate) fn leave_held_by(&self, token: u64) {
        self.page.store64(OWNER, token);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_dead_holder_is_robbed_and_a_live_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.lock");
        let slot = crate::shared::ProcessSlot::register(dir.path(), 0o600).unwrap();
        let a = LockPage::open(&path, 0o600, dir.path(), slot.token()).unwrap();
        {
            let (_held, stolen) = a.lock();
            assert!(!stolen);
        }
        // A holder whose process is gone (no live token) is robbed.
        let b = LockPage::open(&path, 0o600, dir.path(), slot.token()).unwrap();
        b.leave_held_by(0xdead);
        let (_held, stolen) = a.lock();
        assert!(stolen);
        assert!(LockPage::open(&path, 0o600, dir.path(), 0).is_err());
    }
}
