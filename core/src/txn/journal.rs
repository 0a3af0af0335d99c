//! The transaction log, `<dir>/transactions.log`: one commit record per
//! committed transaction (the commit point), and a note once its markers
//! and offsets are all in place.
//!
//! Each entry is a frame: `length` u32 (bytes of the payload), `crc` u32
//! (CRC32C of the payload), then the payload, a JSON [`Entry`]. An entry is
//! written with one `write` at the end of the file; a frame that is cut
//! short or fails its CRC ends the log (a crash during its write: that
//! transaction did not commit) and is cut at the next open.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::faults::{self, SyncKind};
use crate::log::batch::{Marker, MarkerKind};

/// The transaction log's file name in the data directory.
pub(crate) const FILE_NAME: &str = "transactions.log";
/// The largest payload read back (a bigger length is damage).
const MAX_PAYLOAD: u32 = 64 << 20;

/// A transaction's data in one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartRecord {
    pub topic: String,
    pub partition: u32,
    /// Offset of its first record.
    pub first: u64,
    /// Offset of its commit marker (one past its last record).
    pub marker: u64,
    /// The `length` field of its first batch, written in the log only after
    /// this record (recovery puts it back).
    pub first_len: u32,
    /// The CRC32C field of its first batch (shared mode: a process that
    /// finishes the part after its committer died checks that the data
    /// is this part's, not one written at the same offset after the
    /// topic was deleted and created again). Absent in older logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_crc: Option<u32>,
}

/// A consumer group offset committed by a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OffsetRecord {
    pub group: String,
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub metadata: String,
    /// The group member that sent it, when it came from a consumer: the
    /// commit fails (`CommitFailed`) unless it still owns the partition.
    /// Not written to the log.
    #[serde(skip)]
    pub member: Option<String>,
}

/// A committed transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CommitRecord {
    /// The transaction's number (increasing in the data directory).
    pub txn: u64,
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    /// When it committed (ms since the epoch): its markers' timestamp.
    pub timestamp: i64,
    pub parts: Vec<PartRecord>,
    pub offsets: Vec<OffsetRecord>,
    /// Committed by a process in shared mode: any process that may write
    /// finishes it if its committer died (an exclusive session's are
    /// finished by the next exclusive open).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    /// Where it was read: the bytes of the log up to its end (0 for a
    /// record made in this process). Not written to the log.
    #[serde(skip)]
    pub end: u64,
}

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Entry {
    /// The first entry after the log was emptied: transaction numbers go on
    /// from `next`.
    Start { next: u64 },
    /// The commit point of a transaction.
    Commit(CommitRecord),
    /// Every marker and offset of transaction `txn` is in place.
    Applied { txn: u64 },
}

/// What the log held at open.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    /// Every commit record, in order.
    pub commits: Vec<CommitRecord>,
    /// The numbers of those whose markers and offsets are all in place.
    pub applied: std::collections::HashSet<u64>,
    /// The next transaction number.
    pub next_txn: u64,
}

impl CommitRecord {
    /// Its commit marker (the same in each of its partitions).
    pub(crate) fn marker(&self) -> Marker {
        Marker {
            kind: MarkerKind::Commit,
            timestamp: self.timestamp,
            producer_id: self.producer_id,
            producer_epoch: self.epoch,
            transaction: self.txn,
        }
    }
}

impl Loaded {
    /// Takes in `entries`, read in the log's order, each with where it
    /// ends counted from byte `from` of the log.
    fn take(&mut self, entries: Vec<(Entry, usize)>, from: u64) {
        for (e, end) in entries {
            match e {
                Entry::Start { next } => self.next_txn = self.next_txn.max(next),
                Entry::Commit(mut c) => {
                    self.next_txn = self.next_txn.max(c.txn + 1);
                    c.end = from + end as u64;
                    self.commits.push(c);
                }
                Entry::Applied { txn } => {
                    self.applied.insert(txn);
                }
            }
        }
    }
}

/// The log at `path` opened for reading and appending, with its identity;
/// `None` when there is none.
fn open_log(path: &Path) -> Result<Option<(File, LogIdent)>> {
    let file = match OpenOptions::new().read(true).append(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
    };
    let ident =
        file_ident(&file).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    Ok(Some((file, ident)))
}

/// Which file a log is: its device, inode and birth time (nanoseconds
/// since the epoch, 0 where the filesystem does not keep it), so that an
/// inode number reused by a later file is told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogIdent {
    pub dev: u64,
    pub ino: u64,
    pub born: u64,
}

impl LogIdent {
    /// The identity of the file `m` describes.
    pub(super) fn of(m: &std::fs::Metadata) -> LogIdent {
        let born = m
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        LogIdent {
            dev: m.dev(),
            ino: m.ino(),
            born,
        }
    }
}

/// The identity of `file`.
fn file_ident(file: &File) -> std::io::Result<LogIdent> {
    Ok(LogIdent::of(&file.metadata()?))
}

/// The commit record of the transaction whose data in `topic`/`partition`
/// starts at offset `first`, if the log of data directory `dir` holds one
/// (read without changing anything).
pub(crate) fn find_commit(
    dir: &Path,
    topic: &str,
    partition: u32,
    first: u64,
) -> Result<Option<CommitRecord>> {
    Ok(Journal::open_read(dir)?
        .commits
        .into_iter()
        .rev()
        .find(|c| {
            c.parts
                .iter()
                .any(|p| p.topic == topic && p.partition == partition && p.first == first)
        }))
}

/// The open transaction log.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    /// `None` until the first entry (see [`Journal::open`]).
    file: Option<File>,
    /// Identity of `file` (shared mode: whether another process replaced
    /// the log since).
    ident: Option<LogIdent>,
    /// Bytes of whole entries.
    len: u64,
    mode: u32,
}

fn frame(entry: &Entry) -> Vec<u8> {
    let payload = serde_json::to_vec(entry).expect("entries serialize");
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crate::log::crc::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Parses the whole entries at the start of `bytes`; returns them, each
/// with where it ends in `bytes`, and the bytes they take.
fn parse(bytes: &[u8]) -> (Vec<(Entry, usize)>, usize) {
    let mut entries = Vec::new();
    let mut pos = 0;
    while let Some(head) = bytes.get(pos..pos + 8) {
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if len == 0 || len > MAX_PAYLOAD {
            break;
        }
        let Some(payload) = bytes.get(pos + 8..pos + 8 + len as usize) else {
            break;
        };
        if crate::log::crc::crc32c(payload) != crc {
            break;
        }
        let Ok(entry) = serde_json::from_slice::<Entry>(payload) else {
            break;
        };
        pos += 8 + len as usize;
        entries.push((entry, pos));
    }
    (entries, pos)
}

impl Journal {
    /// Opens the log of data directory `dir`, cutting a torn last entry,
    /// and returns what it holds. A directory that never ran a transaction
    /// has no log: it is created by the first commit.
    pub(crate) fn open(dir: &Path, mode: u32) -> Result<(Journal, Loaded)> {
        let mut journal = Journal::unread(dir, mode);
        let (loaded, _) = journal.refresh()?;
        Ok((journal, loaded))
    }

    /// What was appended since this handle last read or wrote the log (all
    /// of it on the first call; in shared mode, under the directory's
    /// transaction lock, what other processes appended, reading it again
    /// from the start when one of them emptied it: a new file). A torn
    /// last entry (its writer died) is cut.
    /// Returns what they appended, and whether the file was replaced.
    pub(crate) fn refresh(&mut self) -> Result<(Loaded, bool)> {
        let (loaded, replaced, _) = self.refresh_skipping(None)?;
        Ok((loaded, replaced))
    }

    /// [`Journal::refresh`], not reading the first `n` bytes of the log
    /// when `skip` is `Some((ident, n))` and the log is still the file
    /// `ident` (shared mode: bytes the transaction lock's page says hold
    /// only finished commits, which this process needs nothing from).
    /// Returns also whether bytes this handle had not read were skipped.
    /// Should the entries not parse from there to the end, the log is read
    /// from where this handle was instead, and nothing is skipped (a
    /// skip that is not an entry's end must never cut the log).
    pub(crate) fn refresh_skipping(
        &mut self,
        skip: Option<(LogIdent, u64)>,
    ) -> Result<(Loaded, bool, bool)> {
        let path = self.path.clone();
        let mut loaded = Loaded::default();
        // Most often nobody else committed since: one stat says so. The
        // same file grown is read on from the open handle.
        let same_file = match std::fs::metadata(&path) {
            Ok(m) if self.ident == Some(LogIdent::of(&m)) => {
                if m.len() == self.len {
                    return Ok((loaded, false, false));
                }
                self.file.take().zip(self.ident)
            }
            _ => None,
        };
        let Some((mut file, ident)) = same_file.map_or_else(|| open_log(&path), |k| Ok(Some(k)))?
        else {
            let replaced = self.file.is_some();
            self.file = None;
            self.ident = None;
            self.len = 0;
            return Ok((loaded, replaced, false));
        };
        let same = self.ident == Some(ident);
        let own = if same { self.len } else { 0 };
        let mut from = match skip {
            Some((at, n)) if at == ident && n > own => {
                let len = file
                    .metadata()
                    .map_err(|e| Error::io(format!("reading the size of {}", path.display()), e))?
                    .len();
                n.min(len).max(own)
            }
            _ => own,
        };
        let (entries, good) = loop {
            let mut bytes = Vec::new();
            file.seek(SeekFrom::Start(from))
                .and_then(|_| file.read_to_end(&mut bytes))
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            let (entries, good) = parse(&bytes);
            if good < bytes.len() && from > own {
                // Not an entry's end after all: read as without a skip.
                from = own;
                continue;
            }
            if good < bytes.len() {
                ::log::warn!(
                    "{}: cutting {} bytes of a transaction entry left incomplete by a crash",
                    path.display(),
                    bytes.len() - good
                );
                file.set_len(from + good as u64)
                    .map_err(|e| Error::io(format!("truncating {}", path.display()), e))?;
            }
            break (entries, good);
        };
        loaded.take(entries, from);
        let replaced = !same && self.file.is_some();
        self.file = Some(file);
        self.ident = Some(ident);
        self.len = from + good as u64;
        Ok((loaded, replaced, from > own))
    }

    /// Makes `file` the open log.
    fn set_file(&mut self, file: File) {
        self.ident = file_ident(&file).ok();
        self.file = Some(file);
    }

    /// The log of data directory `dir`, not read yet (shared mode: the
    /// first [`Journal::refresh`] reads it all).
    pub(crate) fn unread(dir: &Path, mode: u32) -> Journal {
        Journal {
            path: dir.join(FILE_NAME),
            file: None,
            ident: None,
            len: 0,
            mode,
        }
    }

    /// What the log of data directory `dir` holds, read without changing
    /// anything (a torn last entry is left as it is).
    pub(crate) fn open_read(dir: &Path) -> Result<Loaded> {
        let path = dir.join(FILE_NAME);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        };
        let mut loaded = Loaded::default();
        for (e, end) in parse(&bytes).0 {
            if let Entry::Commit(mut c) = e {
                c.end = end as u64;
                loaded.commits.push(c);
            }
        }
        Ok(loaded)
    }

    /// The open file, created (and its name made durable) on first use.
    fn file(&mut self) -> Result<&mut File> {
        if self.file.is_none() {
            let f = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .mode(self.mode)
                .open(&self.path)
                .map_err(|e| Error::io(format!("creating {}", self.path.display()), e))?;
            // Its name on disk before a commit point is written in it.
            sync_file(&f, &self.path)?;
            if let Some(dir) = self.path.parent() {
                crate::log::PartitionLog::sync_dir(dir)?;
            }
            self.set_file(f);
        }
        Ok(self.file.as_mut().expect("just opened"))
    }

    /// Appends `entry`, synced to disk with `sync`. On an error the log is
    /// as before (a partial write is cut off again).
    pub(crate) fn append(&mut self, entry: &Entry, sync: bool) -> Result<()> {
        let bytes = frame(entry);
        let len = self.len;
        let path = self.path.clone();
        let file = self.file()?;
        let res = file
            .write_all(&bytes)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))
            .and_then(|()| if sync { sync_file(file, &path) } else { Ok(()) });
        match res {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                let _ = file.set_len(len);
                Err(e)
            }
        }
    }

    /// Bytes of the log.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The identity of the log as this handle last read or wrote it;
    /// `None` before it read a log that exists.
    pub(crate) fn ident(&self) -> Option<LogIdent> {
        self.ident
    }

    /// Replaces the log by one `Start { next }` entry, atomically (every
    /// commit record in it must be applied and its markers on disk).
    pub(crate) fn reset(&mut self, next: u64) -> Result<()> {
        let bytes = frame(&Entry::Start { next });
        crate::atomic_file::write_atomic(&self.path, &bytes, self.mode, true)?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| Error::io(format!("opening {}", self.path.display()), e))?;
        self.set_file(file);
        self.len = bytes.len() as u64;
        Ok(())
    }
}

/// fsyncs the log file `f` (at `path`), through the fault hooks.
fn sync_file(f: &File, path: &Path) -> Result<()> {
    faults::before_sync(path, SyncKind::File)
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io(format!("syncing {}", path.display()), e))?;
    faults::after_sync(path, SyncKind::File);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn commit(txn: u64) -> Entry {
        Entry::Commit(CommitRecord {
            txn,
            transactional_id: "etl".into(),
            producer_id: 7,
            epoch: 1,
            timestamp: 5,
            parts: vec![PartRecord {
                topic: "t".into(),
                partition: 0,
                first: 10,
                marker: 12,
                first_len: 80,
                first_crc: Some(5),
            }],
            offsets: vec![],
            shared: false,
            end: 0,
        })
    }

    #[test]
    fn entries_round_trip_and_a_torn_one_is_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut j, l) = Journal::open(tmp.path(), 0o600).unwrap();
        assert_eq!((l.commits.len(), l.next_txn), (0, 0));
        j.append(&commit(0), false).unwrap();
        let first_end = j.len();
        j.append(&Entry::Applied { txn: 0 }, true).unwrap();
        j.append(&commit(1), false).unwrap();
        let whole = j.len();
        drop(j);
        // A torn third entry.
        let path = tmp.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        let torn = frame(&commit(2));
        bytes.extend_from_slice(&torn[..torn.len() - 3]);
        std::fs::write(&path, &bytes).unwrap();
        let (j, l) = Journal::open(tmp.path(), 0o600).unwrap();
        assert_eq!(j.len(), whole);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        assert_eq!(l.commits.len(), 2);
        // Each commit record knows where it ends.
        let ends: Vec<u64> = l.commits.iter().map(|c| c.end).collect();
        assert_eq!(ends, [first_end, whole]);
        assert!(l.applied.contains(&0) && !l.applied.contains(&1));
        assert_eq!(l.next_txn, 2);
    }

    #[test]
    fn reset_keeps_the_numbering() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut j, _) = Journal::open(tmp.path(), 0o600).unwrap();
        j.append(&commit(41), false).unwrap();
        j.reset(42).unwrap();
        j.append(&Entry::Applied { txn: 41 }, false).unwrap();
        drop(j);
        let (_, l) = Journal::open(tmp.path(), 0o600).unwrap();
        assert_eq!((l.commits.len(), l.next_txn), (0, 42));
    }

    #[test]
    fn refresh_takes_in_what_another_writer_appended_or_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let mut mine = Journal::unread(tmp.path(), 0o600);
        let mut other = Journal::unread(tmp.path(), 0o600);
        assert_eq!(mine.refresh().unwrap().0.commits.len(), 0);
        other.append(&commit(0), false).unwrap();
        other.append(&Entry::Applied { txn: 0 }, false).unwrap();
        let (l, replaced) = mine.refresh().unwrap();
        assert!(!replaced);
        assert_eq!((l.commits.len(), l.next_txn), (1, 1));
        assert!(l.applied.contains(&0));
        // Nothing new: nothing read.
        let (l, _) = mine.refresh().unwrap();
        assert!(l.commits.is_empty() && l.applied.is_empty());
        // Its own entries are not read back.
        mine.append(&commit(1), false).unwrap();
        assert!(mine.refresh().unwrap().0.commits.is_empty());
        // The other empties the log (a new file) and commits again.
        other.refresh().unwrap();
        other.reset(2).unwrap();
        other.append(&commit(2), false).unwrap();
        let (l, replaced) = mine.refresh().unwrap();
        assert!(replaced);
        assert_eq!(l.commits.iter().map(|c| c.txn).collect::<Vec<_>>(), [2]);
        assert_eq!(l.next_txn, 3);
        // A writer that died mid-entry: the torn entry is cut.
        let path = tmp.path().join(FILE_NAME);
        let whole = std::fs::metadata(&path).unwrap().len();
        let torn = frame(&commit(3));
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&torn[..torn.len() / 2]).unwrap();
        assert!(mine.refresh().unwrap().0.commits.is_empty());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        mine.append(&commit(3), false).unwrap();
        other.refresh().unwrap();
        let (_, l) = Journal::open(tmp.path(), 0o600).unwrap();
        assert_eq!(l.commits.iter().map(|c| c.txn).collect::<Vec<_>>(), [2, 3]);
    }

    #[test]
    fn a_skip_reads_on_from_an_entry_end_and_never_cuts_elsewhere() {
        let tmp = tempfile::tempdir().unwrap();
        let mut other = Journal::unread(tmp.path(), 0o600);
        other.append(&commit(0), false).unwrap();
        let first_end = other.len();
        other.append(&commit(1), false).unwrap();
        other.append(&commit(2), false).unwrap();
        let whole = other.len();
        let ident = other.ident().unwrap();
        let txns = |l: &Loaded| l.commits.iter().map(|c| c.txn).collect::<Vec<_>>();
        // From an entry's end: what comes after only.
        let mut j = Journal::unread(tmp.path(), 0o600);
        let (l, replaced, skipped) = j.refresh_skipping(Some((ident, first_end))).unwrap();
        assert_eq!((txns(&l), replaced, skipped), (vec![1, 2], false, true));
        assert_eq!(j.len(), whole);
        // Not an entry's end: read from the start, nothing cut.
        let mut j = Journal::unread(tmp.path(), 0o600);
        let (l, _, skipped) = j.refresh_skipping(Some((ident, first_end + 3))).unwrap();
        assert_eq!((txns(&l), skipped), (vec![0, 1, 2], false));
        let path = tmp.path().join(FILE_NAME);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        // Past the end: nothing to read, and the handle at the end.
        let mut j = Journal::unread(tmp.path(), 0o600);
        let (l, _, skipped) = j.refresh_skipping(Some((ident, whole + 100))).unwrap();
        assert_eq!((txns(&l), skipped, j.len()), (vec![], true, whole));
        // Of another file: ignored.
        let mut j = Journal::unread(tmp.path(), 0o600);
        let other_file = LogIdent {
            ino: ident.ino + 1,
            ..ident
        };
        let (l, _, skipped) = j.refresh_skipping(Some((other_file, first_end))).unwrap();
        assert_eq!((txns(&l), skipped), (vec![0, 1, 2], false));
        // Never back before what this handle read.
        let (l, _, skipped) = j.refresh_skipping(Some((ident, first_end))).unwrap();
        assert_eq!((txns(&l), skipped), (vec![], false));
    }
}
