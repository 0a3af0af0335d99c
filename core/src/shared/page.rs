//! One page of a file, mapped shared by every process that opens it, read
//! and written as atomic words at fixed offsets.
//!
//! The page holds state that is a cache of what the data directory's
//! durable files say (like SQLite's wal-index or LMDB's lock file): it is
//! never synced, and an opener that finds it missing, short or with a
//! foreign header rebuilds it. Its words are untrusted: the caller checks
//! every value it reads against what it can check it with.
//!
//! Offsets are [`Word32`] and [`Word64`] constants, whose alignment and
//! bounds are checked when they are defined (at compile time, in a `const`
//! item), so access needs no check at run time. A page opened read-only is
//! mapped without write permission, and its store methods do nothing.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::error::{Error, IoContext, Result};
use crate::shared::futex::{self, WaitOutcome};

/// Size of a shared page, and of its file.
pub(crate) const PAGE_LEN: usize = 4096;

/// Where the 8-byte magic (the page's kind and version) is.
const MAGIC_AT: usize = 0;

/// A 32-bit word of a page, at a checked offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word32(usize);

impl Word32 {
    /// The word at byte `offset`: 4-aligned, within the page, past the
    /// magic. Used in `const` items, where a bad offset fails the build.
    pub(crate) const fn at(offset: usize) -> Word32 {
        assert!(offset.is_multiple_of(4) && offset >= 8 && offset + 4 <= PAGE_LEN);
        Word32(offset)
    }
}

/// A 64-bit word of a page, at a checked offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word64(usize);

impl Word64 {
    /// The word at byte `offset`: 8-aligned, within the page, past the
    /// magic. Used in `const` items, where a bad offset fails the build.
    pub(crate) const fn at(offset: usize) -> Word64 {
        assert!(offset.is_multiple_of(8) && offset >= 8 && offset + 8 <= PAGE_LEN);
        Word64(offset)
    }

    /// The word at byte `offset` computed at run time (a slot of a table):
    /// `None` unless 8-aligned, within the page and past the magic.
    pub(crate) const fn checked(offset: usize) -> Option<Word64> {
        if offset.is_multiple_of(8) && offset >= 8 && offset <= PAGE_LEN - 8 {
            Some(Word64(offset))
        } else {
            None
        }
    }
}

#[derive(Debug)]
enum Map {
    ReadWrite(MmapMut),
    ReadOnly(Mmap),
}

/// A mapped shared page (see the module documentation).
#[derive(Debug)]
pub(crate) struct SharedPage {
    /// The map (it outlives the descriptor it was made from, closed once
    /// mapped).
    map: Map,
}

impl SharedPage {
    /// Opens the page file at `path` for reading and writing, creating it
    /// (zero-filled, permission bits `mode`) or growing it to a page if it
    /// is shorter. A file longer than a page keeps its length; only its
    /// first page is used. The header is not checked: see
    /// [`SharedPage::has_magic`] and [`SharedPage::reset`].
    pub(crate) fn open(path: &Path, mode: u32) -> Result<SharedPage> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(mode)
            .open(path)
            .ctx(|| format!("opening {}", path.display()))?;
        let len = file
            .metadata()
            .ctx(|| format!("reading the size of {}", path.display()))?
            .len();
        if len < PAGE_LEN as u64 {
            file.set_len(PAGE_LEN as u64)
                .ctx(|| format!("sizing {}", path.display()))?;
        }
        let map = map_read_write(&file).ctx(|| format!("mapping {}", path.display()))?;
        Ok(SharedPage {
            map: Map::ReadWrite(map),
        })
    }

    /// Opens the page file at `path` for reading only (it must exist and
    /// hold a whole page: a shorter one is [`Error::Corrupt`], since
    /// mapping past the end of a file faults on access).
    pub(crate) fn open_read_only(path: &Path) -> Result<SharedPage> {
        // Not blocking: a FIFO in the page's place is refused, not waited on.
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .ctx(|| format!("opening {}", path.display()))?;
        let meta = file
            .metadata()
            .ctx(|| format!("reading the size of {}", path.display()))?;
        let len = meta.len();
        if !meta.is_file() {
            return Err(Error::Corrupt {
                path: path.to_owned(),
                position: 0,
                reason: "not a regular file".to_owned(),
            });
        }
        if len < PAGE_LEN as u64 {
            return Err(Error::Corrupt {
                path: path.to_owned(),
                position: len,
                reason: format!("shared page of {len} bytes, shorter than {PAGE_LEN}"),
            });
        }
        let map = map_read_only(&file).ctx(|| format!("mapping {}", path.display()))?;
        Ok(SharedPage {
            map: Map::ReadOnly(map),
        })
    }

    /// Whether this page can be written.
    pub(crate) fn is_writable(&self) -> bool {
        matches!(self.map, Map::ReadWrite(_))
    }

    fn base(&self) -> *const u8 {
        match &self.map {
            Map::ReadWrite(m) => m.as_ptr(),
            Map::ReadOnly(m) => m.as_ptr(),
        }
    }

    #[allow(unsafe_code, clippy::cast_ptr_alignment)] // aligned: see SAFETY
    fn atomic32(&self, w: Word32) -> &AtomicU32 {
        // SAFETY: the map is at least PAGE_LEN bytes and page-aligned;
        // `Word32::at` checked that the offset is 4-aligned and the word
        // lies within the page. AtomicU32 has the size and alignment of
        // u32, and every bit pattern is valid. The reference lives no
        // longer than `self`, which owns the map. Other processes write
        // the same memory only through atomics too (or are foreign
        // writers, whose values are untrusted but cannot break atomicity
        // of aligned word accesses).
        unsafe { &*self.base().add(w.0).cast::<AtomicU32>() }
    }

    #[allow(unsafe_code, clippy::cast_ptr_alignment)] // aligned: see SAFETY
    fn atomic64(&self, w: Word64) -> &AtomicU64 {
        // SAFETY: as in `atomic32`, with `Word64::at` checking 8-byte
        // alignment and bounds.
        unsafe { &*self.base().add(w.0).cast::<AtomicU64>() }
    }

    #[allow(unsafe_code, clippy::cast_ptr_alignment)] // aligned: see SAFETY
    fn magic_word(&self) -> &AtomicU64 {
        // SAFETY: offset 0 of a page-aligned map of at least PAGE_LEN
        // bytes: aligned and in bounds; see `atomic32`.
        unsafe { &*self.base().add(MAGIC_AT).cast::<AtomicU64>() }
    }

    /// Whether the page starts with `magic`.
    pub(crate) fn has_magic(&self, magic: [u8; 8]) -> bool {
        self.magic_word().load(Ordering::Acquire) == u64::from_le_bytes(magic)
    }

    /// Whether the page's magic is zero (a page just created).
    pub(crate) fn is_blank(&self) -> bool {
        self.magic_word().load(Ordering::Acquire) == 0
    }

    /// Zeroes every word of the page and then writes `magic`, so that a
    /// reader that sees the magic sees the zeroed words. Only for a process
    /// that knows no other one uses the page (it holds the directory's
    /// initialisation lock alone). Does nothing on a read-only page.
    pub(crate) fn reset(&self, magic: [u8; 8]) {
        self.reset_with(magic, || {});
    }

    /// Like [`SharedPage::reset`], with `fill` run between the zeroing
    /// and the writing of `magic`: a reader that sees the magic sees what
    /// `fill` stored. Does nothing (not even `fill`) on a read-only page.
    pub(crate) fn reset_with(&self, magic: [u8; 8], fill: impl FnOnce()) {
        if !self.is_writable() {
            return;
        }
        self.magic_word().store(0, Ordering::Release);
        for off in (8..PAGE_LEN).step_by(8) {
            self.atomic64(Word64(off)).store(0, Ordering::Relaxed);
        }
        fill();
        self.set_magic(magic);
    }

    /// Writes `magic`, leaving every other word as it is (nothing on a
    /// read-only page).
    pub(crate) fn set_magic(&self, magic: [u8; 8]) {
        if self.is_writable() {
            self.magic_word()
                .store(u64::from_le_bytes(magic), Ordering::Release);
        }
    }

    /// The atomic behind a 32-bit word, for a protocol that chooses its
    /// own memory orderings; `None` on a read-only page (whose map faults
    /// on a store).
    pub(crate) fn writable32(&self, w: Word32) -> Option<&AtomicU32> {
        self.is_writable().then(|| self.atomic32(w))
    }

    /// The atomic behind a 64-bit word, as [`SharedPage::writable32`].
    pub(crate) fn writable64(&self, w: Word64) -> Option<&AtomicU64> {
        self.is_writable().then(|| self.atomic64(w))
    }

    /// Loads a 32-bit word.
    pub(crate) fn load32(&self, w: Word32) -> u32 {
        self.atomic32(w).load(Ordering::Acquire)
    }

    /// Loads a 64-bit word.
    pub(crate) fn load64(&self, w: Word64) -> u64 {
        self.atomic64(w).load(Ordering::Acquire)
    }

    /// Stores a 32-bit word (nothing on a read-only page).
    pub(crate) fn store32(&self, w: Word32, v: u32) {
        if self.is_writable() {
            self.atomic32(w).store(v, Ordering::Release);
        }
    }

    /// Stores a 64-bit word (nothing on a read-only page).
    pub(crate) fn store64(&self, w: Word64, v: u64) {
        if self.is_writable() {
            self.atomic64(w).store(v, Ordering::Release);
        }
    }

    /// Adds to a 32-bit word, wrapping; returns the previous value (`None`
    /// on a read-only page, which is not changed).
    pub(crate) fn add32(&self, w: Word32, v: u32) -> Option<u32> {
        self.is_writable()
            .then(|| self.atomic32(w).fetch_add(v, Ordering::AcqRel))
    }

    /// Subtracts from a 32-bit word, wrapping; returns the previous value
    /// (`None` on a read-only page, which is not changed).
    pub(crate) fn sub32(&self, w: Word32, v: u32) -> Option<u32> {
        self.is_writable()
            .then(|| self.atomic32(w).fetch_sub(v, Ordering::AcqRel))
    }

    /// Adds to a 64-bit word, wrapping; returns the previous value (`None`
    /// on a read-only page, which is not changed).
    pub(crate) fn add64(&self, w: Word64, v: u64) -> Option<u64> {
        self.is_writable()
            .then(|| self.atomic64(w).fetch_add(v, Ordering::AcqRel))
    }

    /// Raises a 64-bit word to `v` if it is lower (nothing on a read-only
    /// page).
    pub(crate) fn max64(&self, w: Word64, v: u64) {
        if self.is_writable() {
            self.atomic64(w).fetch_max(v, Ordering::AcqRel);
        }
    }

    /// Waits while the word holds `expected`, at most `timeout` (see
    /// [`futex::wait`]); works on a read-only page too.
    pub(crate) fn wait32(&self, w: Word32, expected: u32, timeout: Duration) -> WaitOutcome {
        futex::wait(self.atomic32(w), expected, timeout)
    }

    /// Wakes every waiter on the word, in every process.
    pub(crate) fn wake32(&self, w: Word32) {
        futex::wake_all(self.atomic32(w));
    }

    /// The address of a word in this process (tests: two maps of one file
    /// have different addresses).
    #[cfg(test)]
    pub(crate) fn address_of(&self, w: Word32) -> usize {
        self.base() as usize + w.0
    }
}

#[allow(unsafe_code)]
fn map_read_write(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: the file is at least PAGE_LEN bytes (checked or grown by the
    // caller) and page files are never shrunk by mqlite, so the mapped
    // page stays backed. The map is only accessed through aligned atomics
    // (`SharedPage::atomic32/64`), never as plain Rust references to its
    // bytes, so concurrent writes by other processes are not data races
    // in the Rust sense.
    unsafe { MmapOptions::new().len(PAGE_LEN).map_mut(file) }
}

#[allow(unsafe_code)]
fn map_read_only(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: as in `map_read_write`; the caller checked the length.
    unsafe { MmapOptions::new().len(PAGE_LEN).map(file) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MAGIC: [u8; 8] = *b"MQTEST01";
    const A: Word32 = Word32::at(8);
    const B: Word64 = Word64::at(16);
    const LAST: Word64 = Word64::at(PAGE_LEN - 8);

    #[test]
    fn two_maps_of_one_file_see_each_others_words() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let a = SharedPage::open(&path, 0o600).unwrap();
        assert!(!a.has_magic(MAGIC));
        a.reset(MAGIC);
        let b = SharedPage::open(&path, 0o600).unwrap();
        assert!(b.has_magic(MAGIC));
        assert_ne!(a.address_of(A), b.address_of(A));
        a.store32(A, 7);
        a.store64(LAST, u64::MAX);
        assert_eq!(b.load32(A), 7);
        assert_eq!(b.load64(LAST), u64::MAX);
        assert_eq!(b.add64(B, 3), Some(0));
        assert_eq!(a.load64(B), 3);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), PAGE_LEN as u64);
    }

    #[test]
    fn reset_zeroes_the_page() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        std::fs::write(&path, vec![0xAB; PAGE_LEN]).unwrap();
        let p = SharedPage::open(&path, 0o600).unwrap();
        assert!(!p.has_magic(MAGIC));
        assert_eq!(p.load32(A), 0xABAB_ABAB);
        p.reset(MAGIC);
        assert!(p.has_magic(MAGIC));
        assert_eq!(p.load32(A), 0);
        assert_eq!(p.load64(LAST), 0);
    }

    #[test]
    fn reset_with_fills_before_the_magic_and_set_magic_keeps_the_words() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        std::fs::write(&path, vec![0xAB; PAGE_LEN]).unwrap();
        let p = SharedPage::open(&path, 0o600).unwrap();
        p.reset_with(MAGIC, || {
            assert!(!p.has_magic(MAGIC), "the magic comes last");
            assert_eq!(p.load64(LAST), 0, "zeroed before the fill");
            p.store32(A, 9);
        });
        assert!(p.has_magic(MAGIC));
        assert_eq!(p.load32(A), 9);
        p.writable64(B).unwrap().store(5, Ordering::Relaxed);
        // The magic overwritten in place (the file keeps its length).
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[0u8; 8], 0).unwrap();
        assert!(!p.has_magic(MAGIC));
        p.set_magic(MAGIC);
        assert!(p.has_magic(MAGIC));
        assert_eq!(p.load64(B), 5);
        assert_eq!(p.writable32(A).unwrap().load(Ordering::Relaxed), 9);
    }

    #[test]
    fn a_read_only_page_is_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let rw = SharedPage::open(&path, 0o600).unwrap();
        rw.reset(MAGIC);
        rw.store32(A, 1);
        let ro = SharedPage::open_read_only(&path).unwrap();
        assert!(!ro.is_writable());
        ro.store32(A, 2);
        ro.store64(B, 2);
        assert_eq!(ro.add32(A, 1), None);
        assert_eq!(ro.sub32(A, 1), None);
        ro.reset(*b"OTHERMAG");
        ro.set_magic(*b"OTHERMAG");
        assert!(ro.has_magic(MAGIC));
        assert!(ro.writable32(A).is_none());
        assert!(ro.writable64(B).is_none());
        assert_eq!(rw.load32(A), 1);
        assert_eq!(rw.load64(B), 0);
    }

    #[test]
    fn a_short_file_is_grown_for_writers_and_refused_for_readers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        std::fs::write(&path, [1u8; 10]).unwrap();
        assert!(matches!(
            SharedPage::open_read_only(&path),
            Err(Error::Corrupt { .. })
        ));
        let p = SharedPage::open(&path, 0o600).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), PAGE_LEN as u64);
        assert!(!p.has_magic(MAGIC));
        assert_eq!(p.load64(LAST), 0);
        assert!(SharedPage::open_read_only(&path).is_ok());
    }
}
