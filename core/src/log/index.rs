//! Sparse per-segment indexes: offset -> file position, and timestamp ->
//! offset/position.
//!
//! Both are files of fixed-size little-endian entries, created empty, grown
//! in small chunks as entries are added (mapped up to the most entries a
//! segment can need) and trimmed when the segment rolls. An entry is added when at least
//! `index_interval_bytes` of log were written since the previous one, so the
//! first entry never points at position 0 and an all-zero entry marks the
//! end. Entries are hints: every lookup result is checked against the log.

use std::path::Path;

use crate::error::Result;
use crate::log::mmap::{MappedFile, WriteToken};
use crate::log::segment::INDEX_FIRST_STEP;

/// Offset index entry: `relative_offset: u32, position: u32`.
pub(crate) const OFFSET_ENTRY: usize = 8;
/// Time index entry: `timestamp: i64, relative_offset: u32, position: u32`,
/// where `timestamp` is the largest timestamp of every record *before*
/// `position` in the segment.
pub(crate) const TIME_ENTRY: usize = 16;

/// A sparse index file of fixed-width entries.
#[derive(Debug)]
pub(crate) struct IndexFile {
    file: MappedFile,
    width: usize,
}

/// An offset index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffsetEntry {
    /// Offset relative to the segment base.
    pub rel: u32,
    /// Byte position of the batch in the segment.
    pub pos: u32,
}

/// A time index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    /// Largest timestamp of the records before `pos`.
    pub ts: i64,
    /// Offset relative to the segment base.
    pub rel: u32,
    /// Byte position of the batch in the segment.
    pub pos: u32,
}

/// The little-endian `u32` at byte `at` of `b`.
pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl IndexFile {
    /// Creates an empty index able to hold `entries` entries: an empty
    /// file, mapped for that many, its descriptor closed. Entries are
    /// written through the map; a growth (see [`IndexFile::push_offset`])
    /// and the trim on roll open the file by path.
    pub(crate) fn create(
        path: &Path,
        width: usize,
        entries: usize,
        mode: u32,
    ) -> Result<(Self, WriteToken)> {
        let (file, token) =
            MappedFile::create(path, width * entries, 0, INDEX_FIRST_STEP, mode, None)?;
        file.release_file();
        Ok((IndexFile { file, width }, token))
    }

    /// An index with nothing mapped (see [`MappedFile::empty`]).
    pub(crate) fn empty(path: &Path, width: usize) -> Self {
        IndexFile {
            file: MappedFile::empty(path),
            width,
        }
    }

    /// Opens the index of a sealed segment, read-only.
    pub(crate) fn open_sealed(path: &Path, width: usize) -> Result<Self> {
        Ok(IndexFile {
            file: MappedFile::open_read_only(path)?,
            width,
        })
    }

    /// Opens the index of the active segment for appending; nothing is
    /// published until [`IndexFile::recover`]. Holds no descriptor, as
    /// after [`IndexFile::create`].
    pub(crate) fn open_active(
        path: &Path,
        width: usize,
        entries: usize,
    ) -> Result<(Self, WriteToken)> {
        let (file, token, _) =
            MappedFile::open_writable(path, width * entries, INDEX_FIRST_STEP, None)?;
        file.release_file();
        Ok((IndexFile { file, width }, token))
    }

    /// Wraps an already created file (prepared segments).
    pub(crate) fn file_mut(&mut self) -> &mut MappedFile {
        &mut self.file
    }

    /// The underlying mapped file.
    pub(crate) fn file(&self) -> &MappedFile {
        &self.file
    }

    /// Number of published entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.file.published() / self.width
    }

    /// Whether another entry fits.
    pub(crate) fn has_room(&self) -> bool {
        self.file.published() + self.width <= self.file.capacity()
    }

    fn raw(&self, i: usize) -> &[u8] {
        self.file.bytes(i * self.width, (i + 1) * self.width)
    }

    /// Offset entry `i` (of a published range).
    pub(crate) fn offset_entry(&self, i: usize) -> OffsetEntry {
        let b = self.raw(i);
        OffsetEntry {
            rel: u32_at(b, 0),
            pos: u32_at(b, 4),
        }
    }

    /// Time entry `i` (of a published range).
    pub(crate) fn time_entry(&self, i: usize) -> TimeEntry {
        let b = self.raw(i);
        TimeEntry {
            ts: i64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            rel: u32_at(b, 8),
            pos: u32_at(b, 12),
        }
    }

    /// Appends an offset entry, growing the file when it is full. Writer
    /// only. An entry that does not fit (the index is full, or the disk: a
    /// failed growth) is left out: the index is sparse, a missing entry
    /// only costs a longer scan.
    pub(crate) fn push_offset(&self, token: &mut WriteToken, e: OffsetEntry) {
        let mut b = [0u8; OFFSET_ENTRY];
        b[0..4].copy_from_slice(&e.rel.to_le_bytes());
        b[4..8].copy_from_slice(&e.pos.to_le_bytes());
        self.push(token, &b);
    }

    /// Appends a time entry, as [`IndexFile::push_offset`]. Writer only.
    pub(crate) fn push_time(&self, token: &mut WriteToken, e: TimeEntry) {
        let mut b = [0u8; TIME_ENTRY];
        b[0..8].copy_from_slice(&e.ts.to_le_bytes());
        b[8..12].copy_from_slice(&e.rel.to_le_bytes());
        b[12..16].copy_from_slice(&e.pos.to_le_bytes());
        self.push(token, &b);
    }

    fn push(&self, token: &mut WriteToken, entry: &[u8]) {
        let at = self.file.published();
        if at + self.width > self.file.capacity() || self.file.grow_for(at + self.width).is_err() {
            return; // full: the index is sparse, a missing entry only costs a longer scan
        }
        self.file
            .unpublished_mut(token, at, self.width)
            .copy_from_slice(entry);
        self.file.publish(token, at + self.width);
    }

    /// The last offset entry whose `rel` is at most `rel` (binary search).
    pub(crate) fn floor_offset(&self, rel: u32) -> Option<OffsetEntry> {
        let n = self.len();
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = usize::midpoint(lo, hi);
            if self.offset_entry(mid).rel <= rel {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo > 0).then(|| self.offset_entry(lo - 1))
    }

    /// The last time entry whose `ts` is below `ts` (binary search).
    pub(crate) fn floor_time(&self, ts: i64) -> Option<TimeEntry> {
        let n = self.len();
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = usize::midpoint(lo, hi);
            if self.time_entry(mid).ts < ts {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo > 0).then(|| self.time_entry(lo - 1))
    }

    /// The last entry, if any.
    pub(crate) fn last_time(&self) -> Option<TimeEntry> {
        let n = self.len();
        (n > 0).then(|| self.time_entry(n - 1))
    }

    /// Recovery of an active segment's index: publishes the leading run of
    /// well-formed entries (non-zero, increasing, pointing below `limit`) and
    /// zeroes everything after it.
    pub(crate) fn recover(&mut self, limit: usize) {
        let width = self.width;
        let bytes = self.file.all_mut();
        let cap = bytes.len() / width;
        let mut n = 0;
        let mut prev: Option<(i64, u32, u32)> = None;
        while n < cap {
            let b = &bytes[n * width..(n + 1) * width];
            let (ts, rel, pos) = if width == OFFSET_ENTRY {
                (0, u32_at(b, 0), u32_at(b, 4))
            } else {
                (
                    i64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
                    u32_at(b, 8),
                    u32_at(b, 12),
                )
            };
            let ok = pos != 0
                && (pos as usize) < limit
                && prev.is_none_or(|(pts, prel, ppos)| pos > ppos && rel > prel && ts >= pts);
            if !ok {
                break;
            }
            prev = Some((ts, rel, pos));
            n += 1;
        }
        zero_nonzero(&mut bytes[n * width..]);
        self.file.set_published(n * width);
    }

    /// Shared mode, several writers, under the partition's append lock:
    /// publishes the well-formed entries (as in [`IndexFile::recover`])
    /// that another process appended after the last published one, up to
    /// the file's length (read again only when the entries reach the
    /// length this process knew). Writes nothing.
    pub(crate) fn adopt(&self, token: &mut WriteToken, limit: usize) {
        let width = self.width;
        let mut n = self.len();
        // Within the length this process knows first (no `stat`); the
        // file's length is read again only when the entries reach it.
        let mut cap = self.file.allocated().min(self.file.capacity()) / width;
        let mut stat_done = false;
        let parse = |b: &[u8]| {
            if width == OFFSET_ENTRY {
                (0, u32_at(b, 0), u32_at(b, 4))
            } else {
                (
                    i64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
                    u32_at(b, 8),
                    u32_at(b, 12),
                )
            }
        };
        let mut prev = (n > 0).then(|| parse(self.raw(n - 1)));
        let start = n;
        loop {
            if n >= cap {
                if stat_done {
                    break;
                }
                stat_done = true;
                let Some(len) = self.file.refresh_allocated() else {
                    break;
                };
                cap = len.min(self.file.capacity()) / width;
                continue;
            }
            let (ts, rel, pos) = parse(self.file.unpublished(n * width, (n + 1) * width));
            let ok = pos != 0
                && (pos as usize) < limit
                && prev.is_none_or(|(pts, prel, ppos)| pos > ppos && rel > prel && ts >= pts);
            if !ok {
                break;
            }
            prev = Some((ts, rel, pos));
            n += 1;
        }
        if n > start {
            self.file.publish(token, n * width);
        }
    }

    /// For a sealed index: when the last entry is all zeros (the file was
    /// never trimmed), keeps only the leading entries before the first
    /// all-zero one. Cheap when the file was trimmed.
    pub(crate) fn drop_zero_tail(&mut self) {
        let n = self.len();
        if n == 0 || self.raw(n - 1).iter().any(|&b| b != 0) {
            return;
        }
        let keep = (0..n)
            .position(|i| self.raw(i).iter().all(|&b| b == 0))
            .unwrap_or(n);
        self.file.set_published(keep * self.width);
    }

    /// Drops entries at index `n` and after (recovery only).
    pub(crate) fn truncate(&mut self, n: usize) {
        let width = self.width;
        if n * width < self.file.published() {
            zero_nonzero(&mut self.file.all_mut()[n * width..]);
            self.file.set_published(n * width);
        }
    }
}

/// Position of the last non-zero byte of `b`. Scans 64 bytes at a time
/// (an OR the compiler vectorises): recovery runs it over the zeroed tail
/// of every active segment at open, so it is what opening many
/// partitions costs.
pub(crate) fn last_nonzero(b: &[u8]) -> Option<usize> {
    const CHUNK: usize = 64;
    let whole = b.len() - b.len() % CHUNK;
    if let Some(i) = b[whole..].iter().rposition(|&x| x != 0) {
        return Some(whole + i);
    }
    let mut end = whole;
    while end > 0 {
        let chunk = &b[end - CHUNK..end];
        if chunk.iter().fold(0u8, |acc, &x| acc | x) != 0 {
            return chunk.iter().rposition(|&x| x != 0).map(|i| end - CHUNK + i);
        }
        end -= CHUNK;
    }
    None
}

/// Zeroes the bytes of `b` up to its last non-zero byte (leaves already-zero
/// pages untouched, so they are not dirtied).
pub(crate) fn zero_nonzero(b: &mut [u8]) {
    if let Some(last) = last_nonzero(b) {
        b[..=last].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunked scan finds what a byte-by-byte one finds.
    #[test]
    fn last_nonzero_matches_a_plain_scan() {
        for len in [0usize, 1, 63, 64, 65, 130, 4096] {
            for at in [None, Some(0), Some(len / 2), Some(len.saturating_sub(1))] {
                let mut b = vec![0u8; len];
                if let Some(at) = at.filter(|&a| a < len) {
                    b[at] = 3;
                }
                assert_eq!(
                    last_nonzero(&b),
                    b.iter().rposition(|&x| x != 0),
                    "{len} {at:?}"
                );
            }
        }
    }
}
