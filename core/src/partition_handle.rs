//! Partitions opened on first use after a clean close.
//!
//! A clean close of the broker writes one file in the data directory,
//! `partitions.summary`: the directory's session (see `log/unclean.rs`) and,
//! for every partition of every topic, what describing it needs (first and
//! end offsets, bytes, segments). The next open reads it and removes it
//! (synced, before anything can change a partition): when its session is
//! the one the directory's unclean mark holds, no partition was written to
//! since that close, so each partition is held as a [`PartitionHandle`]
//! that knows its summary and opens its files (segments, maps, indexes,
//! recovery point) only when something first uses it. Without a trusted
//! summary (after a crash, a damaged or missing file) every partition is
//! opened, and checked as the recovery point says, at the broker's open.
//!
//! Layout (little-endian): magic `MQPS`, version 1 (u8), three zero bytes,
//! session (u32), topic count (u32); for each topic its name's length
//! (u16), the name, the partition count (u32) and per partition five u64:
//! start offset, end offset, bytes, segments, flags (1: open with the
//! broker); then the CRC32C of everything before it (u32). A file that does
//! not check out is ignored.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crc_fast::CrcAlgorithm;

use crate::error::{Error, IoContext, Result};
use crate::le_reader::LeReader;
use crate::log::PartitionLog;
use crate::sync;

/// File name, in the data directory.
pub(crate) const SUMMARY_FILE: &str = "partitions.summary";
const MAGIC: &[u8; 4] = b"MQPS";
const VERSION: u8 = 1;
const HEADER: usize = 16;
/// Bytes per partition.
const PER_PARTITION: usize = 40;

/// What a clean close recorded of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Summary {
    /// First retained offset.
    pub start_offset: u64,
    /// Offset the next record gets.
    pub end_offset: u64,
    /// Bytes of log.
    pub size_bytes: u64,
    /// Segment files.
    pub segments: u64,
    /// Open the partition with the broker (retention removed segments in
    /// the session that wrote the summary: the open removes what is left
    /// of their files).
    pub eager: bool,
}

impl Summary {
    /// The summary of an open log, as it is now.
    pub(crate) fn of(log: &PartitionLog) -> Summary {
        Summary {
            start_offset: log.start_offset(),
            end_offset: log.end_offset(),
            size_bytes: log.size_bytes(),
            segments: log.segment_count() as u64,
            eager: false,
        }
    }
}

fn crc32c(bytes: &[u8]) -> u32 {
    // CRC-32/ISCSI is a 32-bit CRC: the high half is always zero.
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// The file's bytes for `topics` (name, partitions' summaries) written in
/// directory session `session`.
pub(crate) fn encode(session: u32, topics: &[(String, Vec<Summary>)]) -> Vec<u8> {
    let parts: usize = topics.iter().map(|(_, s)| s.len()).sum();
    let mut b = Vec::with_capacity(HEADER + 4 + topics.len() * 300 + parts * PER_PARTITION);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&[VERSION, 0, 0, 0]);
    b.extend_from_slice(&session.to_le_bytes());
    b.extend_from_slice(&(topics.len() as u32).to_le_bytes());
    for (name, summaries) in topics {
        // Topic names are at most 249 bytes.
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&(summaries.len() as u32).to_le_bytes());
        for s in summaries {
            let flags = u64::from(s.eager);
            for v in [
                s.start_offset,
                s.end_offset,
                s.size_bytes,
                s.segments,
                flags,
            ] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    let crc = crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// The session and the topics' summaries held in the file's bytes; `None`
/// unless they check out (magic, version, CRC, lengths).
pub(crate) fn decode(b: &[u8]) -> Option<(u32, HashMap<String, Vec<Summary>>)> {
    let (body, crc) = b.split_at_checked(b.len().checked_sub(4)?)?;
    if crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut r = LeReader::new(body);
    if r.take(4)? != MAGIC || r.take(4)? != [VERSION, 0, 0, 0] {
        return None;
    }
    let session = r.u32()?;
    let count = r.u32()?;
    let mut topics = HashMap::new();
    for _ in 0..count {
        let len = r.u16()? as usize;
        let name = r.text(len)?.to_owned();
        let parts = r.u32()? as usize;
        if r.rest().len() < parts.checked_mul(PER_PARTITION)? {
            return None;
        }
        let mut summaries = Vec::with_capacity(parts);
        for _ in 0..parts {
            summaries.push(Summary {
                start_offset: r.u64()?,
                end_offset: r.u64()?,
                size_bytes: r.u64()?,
                segments: r.u64()?,
                eager: match r.u64()? {
                    0 => false,
                    1 => true,
                    _ => return None,
                },
            });
        }
        topics.insert(name, summaries);
    }
    r.rest().is_empty().then_some((session, topics))
}

/// Reads the summary file of data directory `dir` and removes it, synced,
/// so that it describes the partitions only until this broker may change
/// them. Returns the topics' summaries when the file checks out and
/// `trusted` holds for the session it was written in (the one the unclean
/// mark holds: nothing was appended since), an empty map otherwise.
pub(crate) fn take(
    dir: &Path,
    trusted: impl Fn(u32) -> bool,
) -> Result<HashMap<String, Vec<Summary>>> {
    let path = dir.join(SUMMARY_FILE);
    // Bounded, and never a FIFO or a device: such a file is ignored.
    let bytes = match crate::atomic_file::read_small(&path) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(HashMap::new()),
        Err(e @ Error::Corrupt { .. }) => {
            ::log::warn!("{e}: every partition is opened now");
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    std::fs::remove_file(&path).ctx(|| format!("removing {}", path.display()))?;
    PartitionLog::sync_dir(dir)?;
    match decode(&bytes) {
        Some((session, topics)) if trusted(session) => Ok(topics),
        Some(_) => Ok(HashMap::new()),
        None => {
            ::log::warn!(
                "{} does not check out: every partition is opened now",
                path.display()
            );
            Ok(HashMap::new())
        }
    }
}

/// Removes the summary file of data directory `dir` (synced), if any: the
/// next open opens every partition and reads its recovery point.
pub(crate) fn forget(dir: &Path) -> Result<()> {
    let path = dir.join(SUMMARY_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => PartitionLog::sync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("removing {}", path.display()), e)),
    }
}

/// Writes the summary file of data directory `dir` (created with `mode`),
/// replacing any other.
pub(crate) fn write(
    dir: &Path,
    mode: u32,
    session: u32,
    topics: &[(String, Vec<Summary>)],
) -> Result<()> {
    crate::atomic_file::write_atomic(
        &dir.join(SUMMARY_FILE),
        &encode(session, topics),
        mode,
        false,
    )
}

/// What a partition not yet opened knows.
#[derive(Debug)]
struct Closed {
    summary: Summary,
    /// The retention floor to give the log when it opens (`None`: the one
    /// it starts with).
    retention_floor: Option<u64>,
}

/// One partition of a topic: its log once opened, its summary before.
#[derive(Debug)]
pub(crate) struct PartitionHandle {
    log: OnceLock<Arc<PartitionLog>>,
    /// `Some` until the log is opened; its lock serialises the open.
    closed: Mutex<Option<Closed>>,
    /// Opens tried through this handle (none for a log opened with the
    /// topic).
    opens: AtomicU64,
    /// The log's first offset when it was opened.
    start_at_open: AtomicU64,
}

impl PartitionHandle {
    /// A handle on a log already open.
    pub(crate) fn opened(log: Arc<PartitionLog>) -> PartitionHandle {
        let h = PartitionHandle {
            log: OnceLock::new(),
            closed: Mutex::new(None),
            opens: AtomicU64::new(0),
            start_at_open: AtomicU64::new(log.start_offset()),
        };
        let _ = h.log.set(log);
        h
    }

    /// A handle on a partition to open on first use, described by `summary`
    /// until then.
    pub(crate) fn lazy(summary: Summary) -> PartitionHandle {
        PartitionHandle {
            log: OnceLock::new(),
            closed: Mutex::new(Some(Closed {
                summary,
                retention_floor: None,
            })),
            opens: AtomicU64::new(0),
            start_at_open: AtomicU64::new(0),
        }
    }

    /// The log, if it is open.
    #[inline]
    pub(crate) fn log(&self) -> Option<&Arc<PartitionLog>> {
        self.log.get()
    }

    /// The log, opened with `open` when this is its first use. Callers on
    /// several threads at once wait for one open; an open that fails
    /// returns its error (to this caller, and the next use tries again).
    pub(crate) fn get_or_open(
        &self,
        open: impl FnOnce() -> Result<Arc<PartitionLog>>,
    ) -> Result<Arc<PartitionLog>> {
        if let Some(log) = self.log.get() {
            return Ok(Arc::clone(log));
        }
        let mut closed = sync::lock(&self.closed);
        if let Some(log) = self.log.get() {
            return Ok(Arc::clone(log));
        }
        let floor = closed.as_ref().and_then(|c| c.retention_floor);
        self.opens.fetch_add(1, Ordering::Relaxed);
        let log = open()?;
        if let Some(floor) = floor {
            log.set_retention_floor(floor);
        }
        self.start_at_open
            .store(log.start_offset(), Ordering::Relaxed);
        let _ = self.log.set(Arc::clone(&log));
        *closed = None;
        Ok(log)
    }

    /// Opens tried through this handle.
    #[cfg(test)]
    pub(crate) fn opens(&self) -> u64 {
        self.opens.load(Ordering::Relaxed)
    }

    /// The summary of a partition not opened yet.
    pub(crate) fn summary(&self) -> Option<Summary> {
        if self.log.get().is_some() {
            return None;
        }
        sync::lock(&self.closed).as_ref().map(|c| c.summary)
    }

    /// The end offset, from the log or the summary.
    pub(crate) fn end_offset(&self) -> u64 {
        if let Some(log) = self.log.get() {
            return log.end_offset();
        }
        match sync::lock(&self.closed).as_ref() {
            Some(c) => c.summary.end_offset,
            None => self.log.get().map_or(0, |l| l.end_offset()),
        }
    }

    /// Sets the retention floor (see `PartitionLog::set_retention_floor`),
    /// kept for the open when the log is not open yet.
    pub(crate) fn set_retention_floor(&self, floor: u64) {
        let mut closed = sync::lock(&self.closed);
        match (closed.as_mut(), self.log.get()) {
            (_, Some(log)) => log.set_retention_floor(floor),
            (Some(c), None) => c.retention_floor = Some(floor),
            (None, None) => {}
        }
    }

    /// Closes the log if it is open (waiting for an open under way) and
    /// returns its summary when it closed cleanly with nothing appended
    /// meanwhile; a partition never opened keeps the summary it had.
    pub(crate) fn close(&self) -> (Result<()>, Option<Summary>) {
        let closed = sync::lock(&self.closed);
        if let Some(c) = closed.as_ref() {
            return (Ok(()), Some(c.summary));
        }
        let Some(log) = self.log.get() else {
            return (Ok(()), None);
        };
        let mut before = Summary::of(log);
        before.eager = before.start_offset != self.start_at_open.load(Ordering::Relaxed);
        let r = log.close();
        let clean = r.is_ok() && log.end_offset() == before.end_offset;
        (r, clean.then_some(before))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let s = |n: u64| Summary {
            start_offset: n,
            end_offset: n + 10,
            size_bytes: n * 100,
            segments: 1 + n % 3,
            eager: n == 1,
        };
        let topics = vec![
            ("a".to_owned(), vec![s(0), s(1), s(2)]),
            ("b.c".to_owned(), vec![]),
        ];
        let bytes = encode(7, &topics);
        let (session, back) = decode(&bytes).unwrap();
        assert_eq!(session, 7);
        assert_eq!(back.len(), 2);
        assert_eq!(back["a"], topics[0].1);
        assert!(back["b.c"].is_empty());
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(decode(&b).is_none(), "flipped byte {i}");
        }
        assert!(decode(&bytes[..bytes.len() - 1]).is_none());
        assert!(decode(&[]).is_none());
    }

    /// `take` trusts a summary of the given session only, ignores a
    /// damaged one or one that is not a regular file, and removes it in
    /// every case.
    #[test]
    fn take_trusts_its_session_and_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SUMMARY_FILE);
        let topics = vec![("a".to_owned(), vec![Summary::default(); 3])];
        write(dir.path(), 0o600, 5, &topics).unwrap();
        assert_eq!(take(dir.path(), |s| s == 5).unwrap()["a"].len(), 3);
        assert!(!path.exists());
        assert!(take(dir.path(), |_| true).unwrap().is_empty());
        write(dir.path(), 0o600, 5, &topics).unwrap();
        assert!(take(dir.path(), |s| s == 6).unwrap().is_empty());
        assert!(!path.exists());
        std::fs::write(&path, b"junk").unwrap();
        assert!(take(dir.path(), |_| true).unwrap().is_empty());
        assert!(!path.exists());
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        #[allow(unsafe_code)]
        let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
        assert_eq!(made, 0);
        assert!(take(dir.path(), |_| true).unwrap().is_empty());
        assert!(!path.exists());
    }
}
