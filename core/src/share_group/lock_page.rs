//! The lock of a share group's state in shared mode:
//! `<dir>/groups/<group>.share.lock`, a [`LockPage`] mapped by every
//! process that uses the group.
//!
//! Beside the lock, the page holds what the last holder left the state
//! file as: its inode, generation and length ([`View`]). A process that
//! takes the lock and finds the page describing the file exactly as it
//! last saw it has nothing to read; otherwise (another process appended
//! or rewrote, a holder died, the page is new or foreign) it reads the
//! file as before. Every change to the file is recorded in the page by
//! its writer while it holds the lock, so a page that matches is never
//! stale; the words are still untrusted, only ever compared.
//!
//! Layout (little-endian): magic `MQSHRL01`; the lock's words at 8-31
//! (see `shared::lock_page`); u64 at 32, 40 and 48, the state file's
//! inode, generation and length as the last holder left them.

pub(crate) use crate::shared::{LockPage, OpLock};
use crate::shared::{Word64, FREE_AT};

const MAGIC: [u8; 8] = *b"MQSHRL01";
const INO: Word64 = Word64::at(FREE_AT);
const GENERATION: Word64 = Word64::at(FREE_AT + 8);
const END: Word64 = Word64::at(FREE_AT + 16);

/// The state file as one process saw or left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    pub ino: u64,
    pub generation: u64,
    pub end: u64,
}

/// What a share group's lock page says of its state file.
pub(crate) trait StateView {
    /// Whether the page says the state file is exactly `view` (the lock
    /// held).
    fn says(&self, view: View) -> bool;
    /// Records that the state file is `view` (the lock held).
    fn record(&self, view: View);
}

impl StateView for LockPage {
    fn says(&self, view: View) -> bool {
        self.has_magic(MAGIC)
            && View {
                ino: self.load64(INO),
                generation: self.load64(GENERATION),
                end: self.load64(END),
            } == view
    }

    fn record(&self, view: View) {
        self.store64(INO, view.ino);
        self.store64(GENERATION, view.generation);
        self.store64(END, view.end);
        self.set_magic(MAGIC);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_view_is_only_compared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.share.lock");
        let slot = crate::shared::ProcessSlot::register(dir.path(), 0o600).unwrap();
        let a = LockPage::open(&path, 0o600, dir.path(), slot.token()).unwrap();
        let view = View {
            ino: 5,
            generation: 2,
            end: 100,
        };
        let (_held, _) = a.lock();
        assert!(!a.says(view), "a new page says nothing");
        a.record(view);
        assert!(a.says(view));
        assert!(!a.says(View { end: 101, ..view }));
    }
}
