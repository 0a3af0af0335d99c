//! The broker's cache of open descriptors, with a limit
//! ([`Config::max_open_files`](crate::Config::max_open_files)).
//!
//! A mapped file needs no descriptor: the mapping stays valid once it is
//! closed. Descriptors are needed only to grow a file, write it with
//! `pwrite`, cut it or sync it: the active segment's log and a partition's
//! recovery point. Those are kept here, under the file's id, and the least
//! recently used is closed when more than the limit are open; the next use
//! opens the file again by path. A descriptor in use when it is evicted is
//! closed when that use ends (the cache hands out shared handles), so the
//! limit may be passed by the number of calls in flight.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync;

/// Default of [`Config::max_open_files`](crate::Config::max_open_files):
/// a quarter of the usual default descriptor limit (`ulimit -n` 1,024),
/// leaving the rest to the application.
pub const DEFAULT_MAX_OPEN_FILES: usize = 256;

/// Identifies files for the cache (and writable mapped files for their
/// write tokens).
static NEXT_FILE_ID: AtomicU64 = AtomicU64::new(1);

/// A new, process-unique file id (never 0).
pub(crate) fn new_file_id() -> u64 {
    NEXT_FILE_ID.fetch_add(1, Ordering::Relaxed)
}

#[derive(Debug, Default)]
struct Lru {
    /// Open files by id: the descriptor and its last use.
    open: HashMap<u64, (Arc<File>, u64)>,
    /// Ids by last use (oldest first).
    order: BTreeMap<u64, u64>,
    tick: u64,
}

impl Lru {
    fn touch(&mut self, id: u64) -> Option<Arc<File>> {
        self.tick += 1;
        let tick = self.tick;
        let (file, used) = self.open.get_mut(&id)?;
        self.order.remove(used);
        *used = tick;
        self.order.insert(tick, id);
        Some(Arc::clone(file))
    }

    fn remove(&mut self, id: u64) -> Option<Arc<File>> {
        let (file, used) = self.open.remove(&id)?;
        self.order.remove(&used);
        Some(file)
    }

    /// Takes out the least recently used entries until at most `keep`
    /// remain; returns them, to be closed outside the lock.
    fn shrink_to(&mut self, keep: usize) -> Vec<Arc<File>> {
        let mut closed = Vec::new();
        while self.open.len() > keep {
            let Some((_, id)) = self.order.pop_first() else {
                break;
            };
            if let Some((f, _)) = self.open.remove(&id) {
                closed.push(f);
            }
        }
        closed
    }
}

/// Open descriptors of a broker's files, at most `limit` of them.
#[derive(Debug)]
pub(crate) struct FileCache {
    limit: usize,
    lru: Mutex<Lru>,
}

impl FileCache {
    /// A cache keeping at most `limit` descriptors open (at least 1).
    pub(crate) fn new(limit: usize) -> FileCache {
        FileCache {
            limit: limit.max(1),
            lru: Mutex::new(Lru::default()),
        }
    }

    /// The descriptor of file `id`, opened with `open` when it is not in
    /// the cache. When the process is out of descriptors (`EMFILE`,
    /// `ENFILE`), the cache closes every descriptor it holds and tries once
    /// more; the error is returned if that fails too.
    pub(crate) fn get(
        &self,
        id: u64,
        open: impl Fn() -> std::io::Result<File>,
    ) -> std::io::Result<Arc<File>> {
        if let Some(f) = sync::lock(&self.lru).touch(id) {
            return Ok(f);
        }
        let file = match open() {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                let closed = sync::lock(&self.lru).shrink_to(0);
                drop(closed);
                open()?
            }
            r => r?,
        };
        Ok(self.insert(id, file))
    }

    /// Puts an open descriptor of file `id` in the cache (replacing any
    /// other for it), closing the least recently used beyond the limit.
    pub(crate) fn insert(&self, id: u64, file: File) -> Arc<File> {
        let file = Arc::new(file);
        let closed = {
            let mut lru = sync::lock(&self.lru);
            let old = lru.remove(id);
            lru.tick += 1;
            let tick = lru.tick;
            lru.open.insert(id, (Arc::clone(&file), tick));
            lru.order.insert(tick, id);
            let mut closed = lru.shrink_to(self.limit);
            closed.extend(old);
            closed
        };
        drop(closed);
        file
    }

    /// Closes file `id`'s descriptor, if the cache holds one.
    pub(crate) fn remove(&self, id: u64) {
        let closed = sync::lock(&self.lru).remove(id);
        drop(closed);
    }

    /// Descriptors held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        sync::lock(&self.lru).open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The least recently used descriptor goes first, and comes back by
    /// reopening.
    #[test]
    fn evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(2);
        let opened = std::sync::atomic::AtomicUsize::new(0);
        let ids: Vec<u64> = (0..3).map(|_| new_file_id()).collect();
        let open = |i: usize| {
            let path = dir.path().join(format!("f{i}"));
            let opened = &opened;
            move || {
                opened.fetch_add(1, Ordering::Relaxed);
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
            }
        };
        cache.get(ids[0], open(0)).unwrap();
        cache.get(ids[1], open(1)).unwrap();
        cache.get(ids[0], open(0)).unwrap(); // 1 is now the oldest
        cache.get(ids[2], open(2)).unwrap();
        assert_eq!(cache.len(), 2);
        assert_eq!(opened.load(Ordering::Relaxed), 3);
        cache.get(ids[0], open(0)).unwrap(); // still cached
        assert_eq!(opened.load(Ordering::Relaxed), 3);
        cache.get(ids[1], open(1)).unwrap(); // reopened
        assert_eq!(opened.load(Ordering::Relaxed), 4);
        cache.remove(ids[1]);
        assert_eq!(cache.len(), 1);
        // An open that fails is an error, not a panic, and caches nothing.
        let missing = dir.path().join("missing/file");
        let err = cache
            .get(new_file_id(), || std::fs::File::open(&missing))
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(cache.len(), 1);
    }
}
