//! A memory-mapped file with one writer and many readers.
//!
//! This is the only module of the engine with `unsafe` code; what it
//! exports is safe. The contract that makes it sound:
//! - bytes below [`MappedFile::published`] are never written again while the
//!   file is shared (they are only rewritten through `&mut self`, during
//!   recovery, before anyone else can see the file);
//! - bytes at or above it are written only through
//!   [`MappedFile::unpublished_mut`] (or with `pwrite`,
//!   [`MappedFile::write_unpublished_vectored`]), which needs the file's [`WriteToken`]
//!   borrowed mutably: there is one token per writable file, so there is
//!   one writer, holding at most one view, and nothing moves `published`
//!   (or cuts the file) while a view lives, since that needs the token too;
//! - readers only ever form slices below `published`, loaded with `Acquire`
//!   after the writer stored it with `Release`;
//! - the file is never shrunk below `published` while mapped.
//!
//! The map covers the whole capacity (a segment's full size), but the file
//! behind it is only as long as [`MappedFile::allocated`]: it grows in
//! chunks ahead of the writer ([`MappedFile::grow_for`]). A page of the map
//! past the end of the file raises `SIGBUS` when touched, so every access
//! stays below `allocated` (writes, recovery's views, page faulting) or
//! below `published`, which never exceeds it (reads). Growing reserves the
//! blocks first, so a full disk is an error at growth time, never a fault
//! in the map.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use memmap2::{Advice, MmapOptions, MmapRaw, UncheckedAdvice};

use crate::error::{Error, IoContext, Result};
use crate::faults::{self, SyncKind};
use crate::files::{new_file_id, FileCache};

/// The right to write a [`MappedFile`]'s unpublished bytes, publish them
/// and cut the file: made once, with the writable file, and checked
/// against it at every use. Whoever holds it mutably is the file's only
/// writer (the partition keeps its segments' tokens under its writer lock).
#[derive(Debug)]
pub(crate) struct WriteToken {
    file: u64,
}

impl WriteToken {
    /// A token for no file: every use of it panics. Stands in for the
    /// writer's tokens in a log this process only reads, whose append path
    /// refuses before it would use one.
    pub(crate) fn none() -> WriteToken {
        WriteToken { file: 0 }
    }
}

/// A file mapped into memory, readable up to an atomically published length.
#[derive(Debug)]
pub(crate) struct MappedFile {
    path: PathBuf,
    /// Matches the file's [`WriteToken`] (0: no token, read-only).
    id: u64,
    /// The broker's descriptor cache, for a file its writer writes with
    /// system calls (an active segment's log: growth, `pwrite`, trim,
    /// fsync): its descriptor is kept there under `id`, and opened again
    /// by path when the cache closed it, until
    /// [`MappedFile::release_file`]. A mapping stays valid once its
    /// descriptor is closed, so read-only files, indexes and sealed
    /// segments hold none, and what needs one (an index's growth, a trim,
    /// an fsync) opens the file by path for the call.
    files: Option<Arc<FileCache>>,
    /// Set by [`MappedFile::release_file`]: no descriptor is kept again.
    released: AtomicBool,
    map: Option<MmapRaw>,
    /// Mapped length: the most the file may grow to.
    capacity: usize,
    /// Length of the file, blocks reserved: the end of what the map may
    /// touch. Only grows while the file is written (see
    /// [`MappedFile::grow_for`]).
    allocated: AtomicUsize,
    /// The first growth step ([`MappedFile::grow_for`]).
    first_step: usize,
    published: AtomicUsize,
    flushed: AtomicUsize,
}

/// Growth steps double from a file's first step up to this. Large, because
/// a writer's page faults get the kernel's large page-cache folios only
/// when its readahead window (8 MiB on this project's VM) fits below the
/// file's end: with 8 MiB steps, taken 4 MiB ahead, a writer faulting its
/// own pages took 15 times as many faults (105,099 against 6,782 for the
/// `cold segment` bench rows) and ran about a third slower; with 32 MiB
/// steps, 9,839 (see docs/decisions.md).
pub(crate) const MAX_GROWTH_STEP: usize = 32 << 20;
const PAGE: usize = 4096;

/// Reserves disk blocks for `[0, len)` (and sets the file's length to at
/// least `len`) so that writes through the map cannot hit a full disk
/// (which would raise SIGBUS instead of an error).
fn allocate(file: &File, len: u64) -> std::io::Result<()> {
    if len == 0 {
        return Ok(()); // posix_fallocate rejects an empty range (EINVAL)
    }
    let len =
        libc::off_t::try_from(len).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain syscall on a file descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match rc {
        0 => Ok(()),
        // Filesystems without fallocate support: fall back to a sparse file.
        libc::EOPNOTSUPP | libc::ENOSYS => file.set_len(len as u64),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

/// The length of `file`, opened from `path` with `O_NONBLOCK` (so a FIFO
/// put in a segment's place cannot block the open): anything but a regular
/// file is corrupt data, never mapped.
fn regular_file_len(path: &Path, file: &File) -> Result<u64> {
    let meta = file
        .metadata()
        .ctx(|| format!("reading the size of {}", path.display()))?;
    if !meta.is_file() {
        return Err(crate::error::Error::Corrupt {
            path: path.to_owned(),
            position: 0,
            reason: "not a regular file".to_owned(),
        });
    }
    Ok(meta.len())
}

impl MappedFile {
    /// Creates (or truncates) `path`, maps `capacity` bytes writable and
    /// reserves the first `initial` of them (the file grows from there in
    /// steps starting at `first_step`, see [`MappedFile::grow_for`]).
    /// Nothing is published. With `files`, its descriptor is kept in that
    /// cache (see [`MappedFile::files`]); without, it is closed at once.
    pub(crate) fn create(
        path: &Path,
        capacity: usize,
        initial: usize,
        first_step: usize,
        mode: u32,
        files: Option<&Arc<FileCache>>,
    ) -> Result<(MappedFile, WriteToken)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)
            .ctx(|| format!("creating {}", path.display()))?;
        let initial = initial.min(capacity);
        allocate(&file, initial as u64).ctx(|| format!("allocating {}", path.display()))?;
        MappedFile::map_writable(path, file, capacity, initial, first_step, files)
    }

    /// Opens an existing file for appending and maps `capacity` bytes of it
    /// writable (more if the file is longer, as one written by a version
    /// that preallocated whole segments). The file keeps its length, which
    /// may be anything (a crash in the middle of a growth): it grows again
    /// at the next write past it. Returns the file, its token and its
    /// length; nothing is published. `files` as for [`MappedFile::create`].
    pub(crate) fn open_writable(
        path: &Path,
        capacity: usize,
        first_step: usize,
        files: Option<&Arc<FileCache>>,
    ) -> Result<(MappedFile, WriteToken, u64)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .ctx(|| format!("opening {}", path.display()))?;
        let len = regular_file_len(path, &file)?;
        let len = usize::try_from(len).map_err(|_| Error::Corrupt {
            path: path.to_owned(),
            position: 0,
            reason: "file too large to map".to_owned(),
        })?;
        // Its blocks reserved, holes included (cheap where they are): a
        // write through the map into a hole of a full disk would be a
        // SIGBUS. A huge sparse file fails here instead of being scanned.
        allocate(&file, len as u64).ctx(|| format!("allocating {}", path.display()))?;
        let capacity = capacity.max(len);
        let (file, token) = MappedFile::map_writable(path, file, capacity, len, first_step, files)?;
        Ok((file, token, len as u64))
    }

    fn map_writable(
        path: &Path,
        file: File,
        capacity: usize,
        allocated: usize,
        first_step: usize,
        files: Option<&Arc<FileCache>>,
    ) -> Result<(Self, WriteToken)> {
        let map = if capacity == 0 {
            None
        } else {
            Some(
                MmapOptions::new()
                    .len(capacity)
                    .map_raw(&file)
                    .ctx(|| format!("mapping {}", path.display()))?,
            )
        };
        let id = new_file_id();
        match files {
            Some(c) => drop(c.insert(id, file)),
            None => drop(file),
        }
        let file = MappedFile {
            path: path.to_owned(),
            id,
            files: files.cloned(),
            released: AtomicBool::new(false),
            map,
            capacity,
            allocated: AtomicUsize::new(allocated),
            first_step,
            published: AtomicUsize::new(0),
            flushed: AtomicUsize::new(0),
        };
        Ok((file, WriteToken { file: id }))
    }

    /// Opens an existing file read-only, with its whole length published.
    pub(crate) fn open_read_only(path: &Path) -> Result<MappedFile> {
        Self::open_mapped_read_only(path, 0, true)
    }

    /// Opens an existing file read-only for a process that does not write
    /// it (shared mode): maps `capacity` bytes (more than the file may hold
    /// now: the writer grows it), publishes nothing. The reader advances
    /// the published length with [`MappedFile::advance_published`] after
    /// checking it against the file's length ([`MappedFile::file_len`]).
    pub(crate) fn open_for_reader(path: &Path, capacity: usize) -> Result<MappedFile> {
        Self::open_mapped_read_only(path, capacity, false)
    }

    /// Opens `path` read-only and maps `capacity` bytes, or the whole file
    /// when it is longer (one written by a version that preallocated whole
    /// segments); with `whole`, its length is published, else nothing.
    fn open_mapped_read_only(path: &Path, capacity: usize, whole: bool) -> Result<MappedFile> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .ctx(|| format!("opening {}", path.display()))?;
        let len = usize::try_from(regular_file_len(path, &file)?).map_err(|_| Error::Corrupt {
            path: path.to_owned(),
            position: 0,
            reason: "file too large to map".to_owned(),
        })?;
        let capacity = capacity.max(len);
        let map = if capacity == 0 {
            None
        } else {
            Some(
                MmapOptions::new()
                    .len(capacity)
                    .map_raw_read_only(&file)
                    .ctx(|| format!("mapping {}", path.display()))?,
            )
        };
        let published = if whole { len } else { 0 };
        Ok(MappedFile {
            path: path.to_owned(),
            id: 0,
            files: None,
            released: AtomicBool::new(true),
            map,
            capacity,
            allocated: AtomicUsize::new(len),
            first_step: 0,
            published: AtomicUsize::new(published),
            flushed: AtomicUsize::new(published),
        })
    }

    /// The file's length now, read again from the file system (`stat`),
    /// for a reader that learns the writer grew it; `None` when it cannot
    /// be read (the file is gone). Updates what [`MappedFile::allocated`]
    /// says, never downwards, and never past the mapping.
    pub(crate) fn file_len(&self) -> Option<usize> {
        let len = std::fs::metadata(&self.path).ok()?.len();
        let len = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(self.capacity);
        self.allocated.fetch_max(len, Ordering::AcqRel);
        Some(len)
    }

    /// Moves the published length forward to `len` (never back) over bytes
    /// another process wrote: in a file this process only reads, or in one
    /// it also writes while its log's writer lock keeps its own writes out
    /// (shared mode, catching up). With `flushed`, the bytes count as
    /// flushed (a reader that never flushes); without, this process's next
    /// flush covers them (a writer whose `acks=all` must make everything
    /// before its own batches durable).
    ///
    /// # Panics
    /// If `len` is past the mapping.
    pub(crate) fn advance_published(&self, len: usize, flushed: bool) {
        assert!(len <= self.capacity, "publishing past the mapping");
        self.published.fetch_max(len, Ordering::AcqRel);
        if flushed {
            self.flushed.fetch_max(len, Ordering::AcqRel);
        }
    }

    /// Sets what [`MappedFile::allocated`] says to the file's length now
    /// (at most the mapping), up or down: for a writer in shared mode
    /// taking over a file that another process grew or trimmed. Returns
    /// the length; `None` (nothing changed) when it cannot be read.
    pub(crate) fn refresh_allocated(&self) -> Option<usize> {
        let len = std::fs::metadata(&self.path).ok()?.len();
        let len = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(self.capacity);
        self.allocated.store(len, Ordering::Release);
        Some(len)
    }

    /// Bytes `[start, end)` above the published length of a file another
    /// process writes: what it may be writing right now. For a process
    /// checking batches (CRC included) before it publishes them to itself;
    /// `end` must be within the file (checked by the caller against
    /// [`MappedFile::file_len`]). The caller keeps this process's own
    /// writer out meanwhile (the file has no [`WriteToken`] here, or the
    /// caller holds its log's writer lock).
    ///
    /// # Panics
    /// If the range is not within the mapping.
    pub(crate) fn unpublished(&self, start: usize, end: usize) -> &[u8] {
        assert!(
            start <= end && end <= self.capacity,
            "range past the mapping"
        );
        match &self.map {
            // SAFETY: the range lies within the mapping (checked above) and,
            // by the caller's check, within the file, so no page past the
            // file's end is touched. Nothing in this process writes these
            // bytes meanwhile (no token exists for the file here, or the
            // caller holds the log's writer lock, which every writer here
            // takes); another process may, and what is read may then be
            // torn: every batch read here is checked (length, offsets,
            // CRC32C) before it is published.
            Some(m) => unsafe { std::slice::from_raw_parts(m.as_ptr().add(start), end - start) },
            None => &[],
        }
    }

    /// A file with nothing mapped and no descriptor, standing in for a
    /// closed log's active segment: every read of it is empty.
    pub(crate) fn empty(path: &Path) -> MappedFile {
        MappedFile {
            path: path.to_owned(),
            id: 0,
            files: None,
            released: AtomicBool::new(true),
            map: None,
            capacity: 0,
            allocated: AtomicUsize::new(0),
            first_step: 0,
            published: AtomicUsize::new(0),
            flushed: AtomicUsize::new(0),
        }
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Mapped length.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Length of the file, blocks reserved: the end of what the map may
    /// touch (see the module contract).
    #[inline]
    pub(crate) fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Acquire)
    }

    /// The length the next growth would give the file: the step doubles
    /// with the file, from its first step up to [`MAX_GROWTH_STEP`], and
    /// never past the capacity.
    pub(crate) fn next_growth(&self) -> usize {
        let allocated = self.allocated();
        let step = allocated.clamp(self.first_step.max(PAGE), MAX_GROWTH_STEP);
        (allocated + step).next_multiple_of(PAGE).min(self.capacity)
    }

    /// Grows the file, in steps (see [`MappedFile::next_growth`]), until
    /// `[0, needed)` is allocated; nothing when it already is. The new
    /// blocks are reserved before any page of them can be touched, so a
    /// full disk fails here, as [`Error::DiskFull`], and leaves the file
    /// usable up to its old length. Writer only (or before the file is
    /// shared). A file without a descriptor is opened again by path.
    ///
    /// # Panics
    /// If `needed` exceeds the capacity.
    pub(crate) fn grow_for(&self, needed: usize) -> Result<()> {
        assert!(needed <= self.capacity, "growth past the mapping");
        let allocated = self.allocated();
        if needed <= allocated {
            return Ok(());
        }
        let mut len = self.next_growth();
        while len < needed {
            let step = len.clamp(self.first_step.max(PAGE), MAX_GROWTH_STEP);
            len = (len + step).next_multiple_of(PAGE).min(self.capacity);
        }
        let len = len.max(needed);
        match self.descriptor() {
            Ok(Some(f)) => allocate(&f, len as u64),
            Ok(None) => OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path)
                .and_then(|f| allocate(&f, len as u64)),
            Err(e) => Err(e),
        }
        .ctx(|| format!("growing {} to {len} bytes", self.path.display()))?;
        self.allocated.fetch_max(len, Ordering::AcqRel);
        Ok(())
    }

    /// Bytes readers may see.
    #[inline]
    pub(crate) fn published(&self) -> usize {
        self.published.load(Ordering::Acquire)
    }

    /// Makes `[0, len)` visible to readers, after the writer filled the
    /// bytes through [`MappedFile::unpublished_mut`] or
    /// [`MappedFile::write_unpublished`].
    ///
    /// # Panics
    /// If `token` is another file's, or `len` is past the allocated length.
    #[inline]
    pub(crate) fn publish(&self, token: &mut WriteToken, len: usize) {
        self.check_token(token);
        assert!(len <= self.allocated(), "publishing past the file");
        self.published.store(len, Ordering::Release);
    }

    #[inline]
    fn check_token(&self, token: &WriteToken) {
        assert!(
            token.file == self.id && self.id != 0,
            "another file's token"
        );
    }

    /// A published range of the file.
    ///
    /// # Panics
    /// If the range reaches past the published length.
    #[inline]
    pub(crate) fn bytes(&self, start: usize, end: usize) -> &[u8] {
        assert!(
            start <= end && end <= self.published(),
            "read past published end"
        );
        match &self.map {
            // SAFETY: `[start, end)` lies below `published` (checked above),
            // within the mapping (published <= capacity), and published bytes
            // are never written while the file is shared (module contract).
            Some(m) => unsafe { std::slice::from_raw_parts(m.as_ptr().add(start), end - start) },
            None => &[],
        }
    }

    /// A writable view of `[start, start + len)`, above the published length
    /// and below the allocated one (grow the file first). It borrows the
    /// file's token: while it lives, nothing publishes, cuts the file or
    /// makes another view.
    ///
    /// # Panics
    /// If `token` is another file's, or the range starts below the
    /// published length or ends past the allocated length.
    #[inline]
    pub(crate) fn unpublished_mut<'a>(
        &'a self,
        token: &'a mut WriteToken,
        start: usize,
        len: usize,
    ) -> &'a mut [u8] {
        self.check_token(token);
        assert!(start >= self.published() && start + len <= self.allocated());
        let m = self.map.as_ref().expect("non-empty mapping");
        // SAFETY: the range is inside the mapping and the file (below
        // `allocated`, which is at most the capacity, and the file is not
        // cut while the token is borrowed), and at or above `published`,
        // which cannot move while the token is borrowed, so no reader forms
        // a slice over it; the token is unique to this file and borrowed
        // mutably for the view's lifetime, so no other view overlaps it.
        unsafe { std::slice::from_raw_parts_mut(m.as_mut_ptr().add(start), len) }
    }

    /// Writes the concatenation of `parts` at `start`, above the published
    /// length, with `pwritev` on the file instead of through the mapping
    /// (the page cache is the same, so readers see it once published). For
    /// large batches: no page faults, no zeroed pages, nothing for a sync to
    /// write-protect in this process's page tables, and the pieces are
    /// written from where they are, with no copy into one buffer first.
    ///
    /// # Panics
    /// If `token` is another file's, or the range starts below the
    /// published length or ends past the allocated length.
    pub(crate) fn write_unpublished_vectored(
        &self,
        token: &mut WriteToken,
        start: usize,
        parts: &[&[u8]],
    ) -> Result<()> {
        self.check_token(token);
        let len: usize = parts.iter().map(|p| p.len()).sum();
        assert!(start >= self.published() && start + len <= self.allocated());
        let file = self
            .descriptor()
            .ctx(|| format!("opening {}", self.path.display()))?
            .ok_or(Error::Closed("segment file without a descriptor"))?;
        pwritev_all(&file, parts, start as u64).ctx(|| format!("writing {}", self.path.display()))
    }

    /// Exclusive view of the whole file (the mapping up to the allocated
    /// length), for recovery before sharing.
    pub(crate) fn all_mut(&mut self) -> &mut [u8] {
        let len = (*self.allocated.get_mut()).min(self.capacity);
        match &self.map {
            // SAFETY: `&mut self` proves no reader or writer holds a view; the
            // range lies within both the mapping and the file.
            Some(m) => unsafe { std::slice::from_raw_parts_mut(m.as_mut_ptr(), len) },
            None => &mut [],
        }
    }

    /// Sets the published length before the file is shared (recovery).
    pub(crate) fn set_published(&mut self, len: usize) {
        *self.published.get_mut() = len;
        *self.flushed.get_mut() = len;
    }

    /// Unmaps the file's pages from this process (they stay in the page
    /// cache, dirty ones written back as before, and the next access maps
    /// them again): what recovery read at open does not stay in the
    /// process's resident set, so an idle partition costs little memory.
    /// Best effort.
    pub(crate) fn drop_pages(&self) {
        let len = self.allocated().min(self.capacity);
        if let (Some(m), true) = (&self.map, len > 0) {
            // SAFETY: a shared file mapping: MADV_DONTNEED only removes the
            // pages from this process's page tables; their contents stay
            // in the page cache and the next access maps them again, so no
            // byte any reader or writer sees changes (unlike a private
            // mapping, which it would reset to the file's contents).
            let _ = unsafe { m.unchecked_advise_range(UncheckedAdvice::DontNeed, 0, len) };
        }
    }

    /// Asks the kernel to fault in every page of the file (as allocated
    /// now) for writing, so the writer does not pay page faults later.
    /// Errors are ignored (best effort).
    pub(crate) fn populate(&self) {
        self.populate_range(0, self.allocated());
    }

    /// [`populate`](Self::populate) for the pages of `[start, end)` only
    /// (cut at the allocated length: the file is never grown here).
    pub(crate) fn populate_range(&self, start: usize, end: usize) {
        let end = end.min(self.allocated());
        if let (Some(m), true) = (&self.map, start < end) {
            #[cfg(target_os = "linux")]
            let _ = m.advise_range(Advice::PopulateWrite, start, end - start);
            #[cfg(not(target_os = "linux"))]
            let _ = m.advise_range(Advice::WillNeed, start, end - start);
        }
    }

    /// Writes the pages of `[start, end)` back to disk as they are (zeros,
    /// ahead of the writer) and waits, so that the file's blocks there are
    /// written before the writer's own flushes reach them. In steps of 256
    /// KiB: each step converts its blocks and writes the inode once, and a
    /// sender's flush that runs meanwhile may have to write that inode
    /// itself, so smaller steps cost the senders more of those writes,
    /// larger ones a longer wait behind the step's write. Writes no byte of
    /// the map, and is no durability point for any record: a record the
    /// writer puts there meanwhile is written again by its own flush. Best
    /// effort; cut at the allocated length.
    pub(crate) fn write_back_ahead(&self, start: usize, end: usize) {
        const STEP: usize = 256 << 10;
        let end = end.min(self.allocated());
        if let (Some(m), true) = (&self.map, start < end) {
            let mut at = start;
            while at < end {
                let to = (at + STEP).min(end);
                self.populate_range(at, to);
                let _ = m.flush_range(at, to - at);
                at = to;
            }
        }
    }

    /// Asks the kernel to map the pages of `[start, end)` (published bytes)
    /// for reading now, in one call rather than a page fault per few pages.
    /// Best effort: errors (an old kernel) are ignored.
    pub(crate) fn populate_read(&self, start: usize, end: usize) {
        let end = end.min(self.published());
        if let (Some(m), true) = (&self.map, start < end) {
            #[cfg(target_os = "linux")]
            let _ = m.advise_range(Advice::PopulateRead, start, end - start);
            #[cfg(not(target_os = "linux"))]
            let _ = m.advise_range(Advice::WillNeed, start, end - start);
        }
    }

    /// Writes published bytes not yet flushed to disk and waits for them
    /// (msync, which on Linux also syncs the data like fdatasync).
    pub(crate) fn flush(&self) -> Result<()> {
        let end = self.published();
        let start = self.flushed.load(Ordering::Acquire);
        if end <= start {
            return Ok(());
        }
        if self.id == 0 {
            // Mapped read-only here (written by another process): an msync
            // of such a map syncs nothing, the file's own sync does.
            self.sync_file()?;
            self.flushed.fetch_max(end, Ordering::AcqRel);
            return Ok(());
        }
        let kind = SyncKind::Range { end: end as u64 };
        if let Some(m) = &self.map {
            faults::before_sync(&self.path, kind)
                .and_then(|()| m.flush_range(start, end - start))
                .ctx(|| format!("flushing {}", self.path.display()))?;
        }
        self.flushed.fetch_max(end, Ordering::AcqRel);
        faults::after_sync(&self.path, kind);
        Ok(())
    }

    /// Writes the bytes from the flushed end through `end` (at or past the
    /// published length: written but not yet published data) to disk and
    /// waits for them; the published ones count as flushed after it.
    pub(crate) fn flush_through(&self, end: usize) -> Result<()> {
        let published = self.published();
        let start = self.flushed.load(Ordering::Acquire);
        self.sync_unpublished(start, end.max(published))?;
        self.flushed.fetch_max(published, Ordering::AcqRel);
        Ok(())
    }

    /// Writes bytes `[start, end)` above the published length (written but
    /// not yet published: a transaction's data before its commit point)
    /// to disk and waits for them.
    pub(crate) fn sync_unpublished(&self, start: usize, end: usize) -> Result<()> {
        let end = end.min(self.allocated());
        let (Some(m), true) = (&self.map, start < end) else {
            return Ok(());
        };
        let kind = SyncKind::Range { end: end as u64 };
        faults::before_sync(&self.path, kind)
            .and_then(|()| m.flush_range(start, end - start))
            .ctx(|| format!("flushing {}", self.path.display()))?;
        faults::after_sync(&self.path, kind);
        Ok(())
    }

    /// Whether every published byte has been flushed.
    pub(crate) fn is_flushed(&self) -> bool {
        self.flushed.load(Ordering::Acquire) >= self.published()
    }

    /// Shrinks the file to the published length (on roll). The mapping stays
    /// as it is; nothing at or above `published` is read again. A file
    /// without a descriptor is opened again by path for this.
    pub(crate) fn trim(&self, token: &mut WriteToken) -> Result<()> {
        let len = self.published();
        self.trim_to(token, len)
    }

    /// Sets the file's length to `len`, at least the published length (on
    /// roll: see `shared_sealed_len` for shared mode, where it is longer).
    /// Bytes past the published length are zeros (recovery and the append
    /// path keep them so), and a file grown by this reads zeros there.
    ///
    /// # Panics
    /// If `token` is another file's or `len` is below the published length.
    pub(crate) fn trim_to(&self, token: &mut WriteToken, len: usize) -> Result<()> {
        self.check_token(token);
        assert!(len >= self.published(), "trimming published bytes");
        // Nothing (page faulting ahead, say) touches the cut part again.
        self.allocated
            .store(len.min(self.capacity), Ordering::Release);
        let len = len as u64;
        match self.descriptor() {
            Ok(Some(f)) => f.set_len(len),
            Ok(None) => OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path)
                .and_then(|f| f.set_len(len)),
            Err(e) => Err(e),
        }
        .ctx(|| format!("trimming {}", self.path.display()))
    }

    /// fsyncs the file itself (size changes included). A file without a
    /// descriptor is opened again by path (read-only: `fsync` syncs the
    /// inode, whichever descriptor names it); when it is no longer there
    /// the error is an [`Error::Io`] of kind `NotFound`
    /// (see [`is_not_found`]).
    pub(crate) fn sync_file(&self) -> Result<()> {
        faults::before_sync(&self.path, SyncKind::File)
            .and_then(|()| self.descriptor())
            .and_then(|f| match f {
                Some(f) => f.sync_all(),
                None => OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&self.path)
                    .and_then(|f| f.sync_all()),
            })
            .ctx(|| format!("syncing {}", self.path.display()))?;
        faults::after_sync(&self.path, SyncKind::File);
        Ok(())
    }

    /// Closes the file's descriptor, if it still has one; the mapping stays
    /// valid. Afterwards [`MappedFile::write_unpublished`] fails, and trims
    /// and syncs open the file by path.
    pub(crate) fn release_file(&self) {
        self.released.store(true, Ordering::Release);
        if let Some(c) = &self.files {
            // Closed now, or when a call in progress lets go of it.
            c.remove(self.id);
        }
    }

    /// The descriptor kept for the writer (from the cache, opened again by
    /// path when the cache closed it); `None` for a file that keeps none.
    /// Shared, so that a slow call on it (an fsync) holds no lock.
    fn descriptor(&self) -> std::io::Result<Option<Arc<File>>> {
        match &self.files {
            Some(c) if !self.released.load(Ordering::Acquire) => c
                .get(self.id, || {
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(&self.path)
                })
                .map(Some),
            _ => Ok(None),
        }
    }

    /// Renames the file, keeping the mapping.
    pub(crate) fn rename(&mut self, to: &Path) -> Result<()> {
        std::fs::rename(&self.path, to)
            .ctx(|| format!("renaming {} to {}", self.path.display(), to.display()))?;
        to.clone_into(&mut self.path);
        Ok(())
    }

    /// Path-only rename for a file that may be shared (deletion marking).
    pub(crate) fn rename_shared(&self, to: &Path) -> Result<()> {
        std::fs::rename(&self.path, to)
            .ctx(|| format!("renaming {} to {}", self.path.display(), to.display()))
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        self.release_file();
    }
}

/// Whether `e` says a file was not found (it was renamed or removed).
pub(crate) fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// fsyncs a directory, so that created, renamed and removed entries persist.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    faults::before_sync(dir, SyncKind::Dir)
        .and_then(|()| File::open(dir))
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("syncing directory {}", dir.display()), e))?;
    faults::after_sync(dir, SyncKind::Dir);
    Ok(())
}

/// Writes the concatenation of `parts` at `offset` of `file`, with as few
/// `pwritev` calls as the kernel allows (at most `IOV_MAX` pieces each;
/// a short write goes on from where it stopped).
fn pwritev_all(file: &File, parts: &[&[u8]], mut offset: u64) -> std::io::Result<()> {
    const IOV_MAX: usize = 1024;
    let mut i = 0; // first piece not fully written
    let mut skip = 0; // bytes of it already written
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(parts.len().min(IOV_MAX));
    while i < parts.len() {
        iov.clear();
        for (k, p) in parts[i..].iter().take(IOV_MAX).enumerate() {
            let p = if k == 0 { &p[skip..] } else { p };
            iov.push(libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            });
        }
        // SAFETY: every iovec points into a live slice of `parts`, which
        // outlives the call, and the kernel only reads them.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset as libc::off_t,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 && iov.iter().any(|v| v.iov_len > 0) {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let mut n = n as usize;
        offset += n as u64;
        while i < parts.len() && n >= parts[i].len() - skip {
            n -= parts[i].len() - skip;
            skip = 0;
            i += 1;
        }
        skip += n;
    }
    Ok(())
}
