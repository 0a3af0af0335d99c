//! The current epoch of each named producer, in a page that every process
//! of a shared-mode directory maps (`<dir>/producers/epochs.shm`), so that
//! a producer learns it was fenced by a newer one in another process with
//! one load per send instead of a read of the registry file.
//!
//! The page is a cache of `registry.json`: every write to it is made under
//! the registry lock (`registry.lock`), and a reader that finds anything
//! other than what it expects settles the question by reading the file
//! under that lock (see `NamedIdentity::current_epoch`). Its words are
//! untrusted: a garbage slot only costs a read of the file, never a fence
//! the file does not confirm.
//!
//! Layout (little-endian words, a [`SharedPage`]):
//! - bytes 0..8: the magic `MQEPOCH1`;
//! - bytes 8..16: the version, bumped by every change of a named
//!   producer's epoch (what a producer without a slot watches);
//! - from byte 64, [`SLOTS`] slots of 16 bytes: the id word (the producer
//!   id plus one; 0 for a free slot) and the state word ([`pack`]: a set
//!   top bit, the id's low 47 bits and the epoch), which a reader compares
//!   in one load with what it expects.

use std::path::Path;

use crate::error::Result;
use crate::shared::{SharedPage, Word64, PAGE_LEN};

/// The page's magic (its kind and version).
const MAGIC: [u8; 8] = *b"MQEPOCH1";

/// The version word.
const VERSION: Word64 = Word64::at(8);

/// Where the slots start.
const FIRST_SLOT: usize = 64;

/// Bytes per slot: the id word and the state word.
const SLOT_LEN: usize = 16;

/// Number of slots in the page.
pub(crate) const SLOTS: usize = (PAGE_LEN - FIRST_SLOT) / SLOT_LEN;

/// Marks a state word as written (a zeroed slot never matches).
const WRITTEN: u64 = 1 << 63;

/// Bits of the producer id kept in a state word.
const ID_BITS: u32 = 47;

/// The state word of producer `id` at `epoch`: the top bit set, the id's
/// low 47 bits, the epoch's 16 bits.
pub(crate) fn pack(id: i64, epoch: i16) -> u64 {
    let id_bits = (id as u64) & ((1 << ID_BITS) - 1);
    WRITTEN | (id_bits << 16) | u64::from(epoch as u16)
}

/// The id bits of a state word (what [`pack`] kept of the id).
fn id_bits_of(state: u64) -> u64 {
    (state & !WRITTEN) >> 16
}

/// The id word of a slot holding producer `id`.
fn id_tag(id: i64) -> u64 {
    (id as u64).wrapping_add(1)
}

fn id_word(slot: usize) -> Option<Word64> {
    if slot >= SLOTS {
        return None;
    }
    Word64::checked(FIRST_SLOT + slot * SLOT_LEN)
}

fn state_word(slot: usize) -> Option<Word64> {
    if slot >= SLOTS {
        return None;
    }
    Word64::checked(FIRST_SLOT + slot * SLOT_LEN + 8)
}

/// The mapped epochs page of a data directory.
#[derive(Debug)]
pub(crate) struct EpochPage {
    page: SharedPage,
}

impl EpochPage {
    /// Maps the page at `path` (created with permission bits `mode` if
    /// missing). Its header is checked by [`EpochPage::ensure`].
    pub(crate) fn open(path: &Path, mode: u32) -> Result<EpochPage> {
        Ok(EpochPage {
            page: SharedPage::open(path, mode)?,
        })
    }

    /// Resets the page if it does not carry the magic. Only under the
    /// registry lock: every writer of the page holds it, and readers take
    /// a zeroed slot for a mismatch.
    pub(crate) fn ensure(&self) {
        if !self.page.has_magic(MAGIC) {
            // A page just created is zeroed: set up without a word.
            if !self.page.is_blank() {
                ::log::warn!("the producer epochs page was damaged: rebuilding it");
            }
            self.page.reset(MAGIC);
        }
    }

    /// The version word.
    #[inline]
    pub(crate) fn version(&self) -> u64 {
        self.page.load64(VERSION)
    }

    /// Bumps the version word (under the registry lock); returns the new
    /// value.
    pub(crate) fn bump_version(&self) -> u64 {
        self.page
            .add64(VERSION, 1)
            .map_or_else(|| self.version(), |v| v.wrapping_add(1))
    }

    /// Whether slot `slot` says that producer `id` is at `epoch` (one
    /// load; false for a slot out of range).
    #[inline]
    pub(crate) fn holds(&self, slot: usize, id: i64, epoch: i16) -> bool {
        state_word(slot).is_some_and(|w| self.page.load64(w) == pack(id, epoch))
    }

    /// The slot whose id word names producer `id`, if any.
    pub(crate) fn find(&self, id: i64) -> Option<usize> {
        let tag = id_tag(id);
        (0..SLOTS).find(|&s| id_word(s).is_some_and(|w| self.page.load64(w) == tag))
    }

    /// A slot for producer `id` (under the registry lock): its own, else a
    /// free one, else (when `evict`) one taken from another producer, who
    /// notices on its next check and falls back to watching the version.
    pub(crate) fn slot_for(&self, id: i64, evict: bool) -> Option<usize> {
        if let Some(s) = self.find(id) {
            return Some(s);
        }
        let free = (0..SLOTS).find(|&s| id_word(s).is_some_and(|w| self.page.load64(w) == 0));
        if free.is_some() || !evict {
            return free;
        }
        // Round robin over the slots, by the version (which moves with
        // every change).
        Some((self.version() % SLOTS as u64) as usize)
    }

    /// Writes producer `id` at `epoch` into `slot` (under the registry
    /// lock), and clears every other slot that names the producer or whose
    /// state word carries its id bits: a reader watching one of those
    /// would otherwise not see the change.
    pub(crate) fn write(&self, slot: usize, id: i64, epoch: i16) {
        let (Some(idw), Some(stw)) = (id_word(slot), state_word(slot)) else {
            return;
        };
        let tag = id_tag(id);
        let bits = id_bits_of(pack(id, epoch));
        for s in (0..SLOTS).filter(|&s| s != slot) {
            let (Some(i), Some(st)) = (id_word(s), state_word(s)) else {
                continue;
            };
            let state = self.page.load64(st);
            if self.page.load64(i) == tag || (state != 0 && id_bits_of(state) == bits) {
                self.page.store64(st, 0);
                self.page.store64(i, 0);
            }
        }
        if self.page.load64(idw) != tag {
            // Taken from another producer: invalidate its state first.
            self.page.store64(stw, 0);
            self.page.store64(idw, tag);
        }
        self.page.store64(stw, pack(id, epoch));
    }

    /// Writes raw words (tests: garbage from another process).
    #[cfg(test)]
    pub(crate) fn poke(&self, offset: usize, value: u64) {
        if let Some(w) = Word64::checked(offset) {
            self.page.store64(w, value);
        }
    }

    /// The byte offset of a slot's state word (tests).
    #[cfg(test)]
    pub(crate) fn state_offset(slot: usize) -> usize {
        FIRST_SLOT + slot * SLOT_LEN + 8
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn packed_states_tell_producers_and_epochs_apart() {
        assert_ne!(pack(0, 0), 0, "a zeroed slot never matches");
        assert_ne!(pack(1, 0), pack(0, 0));
        assert_ne!(pack(1, 1), pack(1, 0));
        assert_ne!(pack(1, -1), pack(1, i16::MAX));
        assert_eq!(id_bits_of(pack(12345, 7)), 12345);
        assert_eq!(SLOTS, 252);
    }

    #[test]
    fn slots_are_found_claimed_evicted_and_kept_unique() {
        let dir = tempfile::tempdir().unwrap();
        let p = EpochPage::open(&dir.path().join("e.shm"), 0o600).unwrap();
        p.ensure();
        assert_eq!(p.find(5), None);
        let s = p.slot_for(5, false).unwrap();
        p.write(s, 5, 3);
        assert!(p.holds(s, 5, 3));
        assert!(!p.holds(s, 5, 2));
        assert!(!p.holds(SLOTS, 5, 3));
        assert_eq!(p.find(5), Some(s));
        // A stray copy of producer 5 elsewhere (garbage) is cleared by the
        // next write, so nobody watching it misses the change.
        let other = (s + 1) % SLOTS;
        p.poke(EpochPage::state_offset(other), pack(5, 3));
        p.write(s, 5, 4);
        assert!(!p.holds(other, 5, 3));
        assert!(p.holds(s, 5, 4));
        // Fill the table: no free slot, eviction only when asked.
        for id in 100..100 + SLOTS as i64 - 1 {
            let s = p.slot_for(id, false).unwrap();
            p.write(s, id, 0);
        }
        assert_eq!(p.slot_for(9999, false), None);
        let v = p.bump_version();
        assert_eq!(p.version(), v);
        let e = p.slot_for(9999, true).unwrap();
        let victim = (0..SLOTS)
            .map(|s| (s, p.page.load64(id_word(s).unwrap())))
            .find(|&(x, _)| x == e)
            .unwrap()
            .1 as i64
            - 1;
        p.write(e, 9999, 1);
        assert!(p.holds(e, 9999, 1));
        assert_eq!(p.find(victim), None);
    }
}
