//! Committed offsets of a consumer group: a snapshot,
//! `<dir>/groups/<name>.offsets` (JSON, replaced atomically: written to a
//! temporary file, synced, renamed, the directory synced), and the
//! journal of the commits made since, `<name>.commits` (see
//! [`journal`]): a commit appends one record, and with `commit_acks=all`
//! waits for a sync of the journal that commits made meanwhile share. A
//! commit that returned survives `kill -9`; with `commit_acks=all`, power
//! loss too. When the journal has grown past its threshold, the state is
//! written into a new snapshot, which names the next journal generation,
//! and a new journal of that generation replaces the old one: a journal
//! whose generation is not the snapshot's (a crash between the two steps)
//! holds nothing the snapshot lacks, and is ignored.
//!
//! A broadcast consumer (group `g`, client `c`) keeps its own offsets in
//! `<dir>/groups/g+c.offsets`: `+` is not allowed in a group or client
//! name, so no group's file and no other broadcast consumer's can be the
//! same file. Directories written when broadcast offsets were stored as the
//! group `g.c` are read on first use: the new file starts as a copy of
//! `g.c.offsets` (which stays, as group `g.c`'s).

pub(crate) mod journal;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::atomic_file::{write_atomic, MAX_METADATA_LEN};
use crate::error::{Error, Result};
pub(crate) use journal::Pending;
use journal::{Entry, Syncer, HEADER_LEN};

/// A committed offset: the next offset the group will read, and optional
/// application metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    /// The next offset to read.
    pub offset: u64,
    /// Free-form text stored with the commit.
    #[serde(default)]
    pub metadata: String,
    /// When it was committed (ms since the epoch).
    #[serde(default)]
    pub timestamp: i64,
}

/// The version written; version 1 (no journal) is read too.
const VERSION: u32 = 2;

/// The journal grows to this many bytes, or to twice the snapshot's
/// size if that is more, before it is folded into a new snapshot.
const COMPACT_AT: u64 = 1 << 20;

#[derive(Debug, Default, Serialize, Deserialize)]
struct OffsetsFile {
    version: u32,
    /// The generation of the journal that continues this snapshot (0:
    /// none).
    #[serde(default)]
    journal: u64,
    /// topic -> partition -> committed offset
    offsets: BTreeMap<String, BTreeMap<u32, CommittedOffset>>,
    /// topic -> partition -> where the log ended when its committed offset
    /// was found beyond that end (recovery had cut the log below it): the
    /// committed offset is out of range until the next commit of that
    /// partition, and a consumer resumes by its `auto_offset_reset`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    out_of_range: BTreeMap<String, BTreeMap<u32, u64>>,
}

/// Separates the group and the client in a broadcast consumer's storage
/// name (a character no group or client name may hold).
pub(crate) const BROADCAST_SEPARATOR: char = '+';

/// The storage name of the offsets of broadcast consumer `client` of
/// `group`.
pub(crate) fn broadcast_key(group: &str, client: &str) -> String {
    format!("{group}{BROADCAST_SEPARATOR}{client}")
}

/// The group of a storage name: the name itself, or the group part of a
/// broadcast consumer's.
pub(crate) fn group_of_key(key: &str) -> &str {
    key.split_once(BROADCAST_SEPARATOR).map_or(key, |(g, _)| g)
}

/// The longest group id, and the longest `<group_id>+<client_id>` of a
/// broadcast consumer, in bytes: a group's files are named after it, with
/// suffixes of up to 12 bytes (`.offsets.tmp`), and a file name has at
/// most 255 bytes.
pub const MAX_GROUP_NAME_LEN: usize = 243;

/// Checks a group id: the rules of a topic name (see
/// [`validate_group_name`]) and at most [`MAX_GROUP_NAME_LEN`] bytes.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `what` and the rule broken.
pub(crate) fn validate_group_id(what: &str, name: &str) -> Result<()> {
    validate_group_name(what, name)?;
    if name.len() > MAX_GROUP_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "{what} of {} bytes: at most {MAX_GROUP_NAME_LEN} (a group's files are named after it)",
            name.len()
        )));
    }
    Ok(())
}

/// Checks the storage name of broadcast consumer `client` of `group`
/// (both valid names): at most [`MAX_GROUP_NAME_LEN`] bytes.
///
/// # Errors
/// [`Error::InvalidArgument`] for a longer one.
pub(crate) fn validate_broadcast_key(group: &str, client: &str) -> Result<()> {
    let len = broadcast_key(group, client).len();
    if len > MAX_GROUP_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "a broadcast consumer's offsets are stored under <group_id>+<client_id>, {len} bytes \
             here: at most {MAX_GROUP_NAME_LEN}"
        )));
    }
    Ok(())
}

/// Whether `key` is a valid storage name: a group name, or a broadcast
/// consumer's `<group>+<client>`.
pub(crate) fn is_valid_key(key: &str) -> bool {
    if key.len() > MAX_GROUP_NAME_LEN {
        return false;
    }
    match key.split_once(BROADCAST_SEPARATOR) {
        Some((g, c)) => {
            validate_group_name("group", g).is_ok() && validate_group_name("client", c).is_ok()
        }
        None => validate_group_name("group", key).is_ok(),
    }
}

/// The committed offsets of one group (or one broadcast consumer).
#[derive(Debug)]
pub(crate) struct OffsetStore {
    path: PathBuf,
    /// The journal's path, `<name>.commits`.
    journal_path: PathBuf,
    mode: u32,
    /// The snapshot with every journal record read so far applied.
    file: OffsetsFile,
    /// The identity of the snapshot `file` was read from or written to
    /// (see [`OffsetStore::refresh`]); `None` when there was none.
    seen: Option<FileId>,
    /// The journal as last read or written.
    journal: JournalView,
    /// This store's descriptor of the journal, for appending (opened by
    /// the first commit, dropped when the journal is replaced).
    writer: Option<Arc<File>>,
    /// Bytes the snapshot took when last written or read.
    snapshot_len: u64,
    /// Bytes a snapshot of the offsets would take, about (the limit on
    /// the metadata committed).
    approx_len: u64,
    /// Bytes this store appended over its life (the tickets of
    /// [`Syncer`]).
    appended: u64,
    syncer: Arc<Syncer>,
}

/// What a store knows of the journal.
#[derive(Debug, Default, Clone, Copy)]
struct JournalView {
    /// Its inode, when one of the snapshot's generation was read.
    ino: Option<u64>,
    /// Where its last whole, valid record read ends: the next one goes
    /// there.
    end: u64,
    /// The file's length when last looked at (more than `end`: a record
    /// a crash cut short, cut off before the next append).
    len: u64,
}

/// What tells one version of an offsets file from another: every write
/// replaces the file (a new inode), so the inode and the change time
/// differ after another process's commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    ctime_ns: i128,
    len: u64,
}

fn file_id(path: &Path) -> Result<Option<FileId>> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(FileId {
            dev: m.dev(),
            ino: m.ino(),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
            len: m.len(),
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
    }
}

/// Reads an offsets file (an empty set when there is none).
fn read_file(path: &Path) -> Result<OffsetsFile> {
    Ok(match crate::atomic_file::read_small(path)? {
        Some(bytes) => {
            let f: OffsetsFile = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
                path: path.to_owned(),
                position: e.column() as u64,
                reason: format!("committed offsets are not valid: {e}"),
            })?;
            if f.version != 1 && f.version != VERSION {
                return Err(Error::UnsupportedVersion {
                    path: path.to_owned(),
                    found: f.version,
                    supported: VERSION,
                });
            }
            f
        }
        None => OffsetsFile {
            version: VERSION,
            ..OffsetsFile::default()
        },
    })
}

/// Checks a group or client name: the topic-name rules (1 to 249 of
/// `[A-Za-z0-9._-]`, not `.` or `..`), so it can never name a path outside
/// the data directory.
pub(crate) fn validate_group_name(what: &str, name: &str) -> Result<()> {
    crate::topic::validate_name_or_internal(name).map_err(|e| match e {
        Error::InvalidTopicName { reason, .. } => {
            Error::InvalidArgument(format!("{what} {name:?}: {reason}"))
        }
        other => other,
    })
}

impl OffsetStore {
    /// Opens the offsets of `name` under `<dir>/groups/`.
    pub(crate) fn open(dir: &Path, name: &str, mode: u32) -> Result<OffsetStore> {
        let gdir = dir.join("groups");
        crate::private_dir::create_dir_all(&gdir, mode)?;
        let path = gdir.join(format!("{name}.offsets"));
        if let Some((group, client)) = name.split_once(BROADCAST_SEPARATOR) {
            migrate_legacy_broadcast(&gdir, &path, group, client, mode)?;
        }
        Self::read(path, mode)
    }

    /// Opens the offsets of group `name` in data directory `dir` for
    /// reading only: creates nothing (no file yet reads as no offsets).
    pub(crate) fn open_read_only(dir: &Path, name: &str, mode: u32) -> Result<OffsetStore> {
        Self::read(dir.join("groups").join(format!("{name}.offsets")), mode)
    }

    /// The store of the offsets file at `path`, read now with its journal.
    fn read(path: PathBuf, mode: u32) -> Result<OffsetStore> {
        let mut journal_path = path.clone();
        journal_path.set_extension("commits");
        let mut store = OffsetStore {
            path,
            journal_path,
            mode,
            file: OffsetsFile::default(),
            seen: None,
            journal: JournalView::default(),
            writer: None,
            snapshot_len: 0,
            approx_len: 0,
            appended: 0,
            syncer: Arc::new(Syncer::default()),
        };
        store.load()?;
        Ok(store)
    }

    /// Reads the snapshot and its journal whole.
    fn load(&mut self) -> Result<()> {
        let seen = file_id(&self.path)?;
        let file = read_file(&self.path)?;
        self.file = file;
        self.seen = seen;
        self.snapshot_len = seen.map_or(0, |id| id.len);
        self.writer = None;
        self.journal = JournalView::default();
        self.approx_len = self.measure();
        if self.file.journal != 0 {
            if let Some(r) = journal::read(&self.journal_path, HEADER_LEN)? {
                if r.generation == self.file.journal {
                    for c in &r.commits {
                        self.apply(c, self.grown_by(c));
                    }
                    self.journal = JournalView {
                        ino: Some(r.ino),
                        end: r.end,
                        len: r.len,
                    };
                }
            }
        }
        Ok(())
    }

    /// Reads what another process committed since this store last read
    /// or wrote (several processes on one directory; called under the
    /// group's lock before a commit): the new journal records, or
    /// everything when the snapshot or the journal was replaced.
    ///
    /// # Errors
    /// I/O errors; [`Error::Corrupt`] or [`Error::UnsupportedVersion`] for
    /// a snapshot that cannot be read (the store keeps what it had).
    pub(crate) fn refresh(&mut self) -> Result<()> {
        let id = file_id(&self.path)?;
        if id != self.seen {
            return self.reload();
        }
        let Some(ino) = self.journal.ino else {
            if self.file.journal != 0 && self.journal_path.exists() {
                return self.reload();
            }
            return Ok(());
        };
        match journal::read(&self.journal_path, self.journal.end)? {
            Some(r) if r.ino == ino && r.generation == self.file.journal => {
                for c in &r.commits {
                    self.apply(c, self.grown_by(c));
                }
                self.journal.end = r.end;
                self.journal.len = r.len;
                Ok(())
            }
            _ => self.reload(),
        }
    }

    /// [`OffsetStore::load`], keeping what the store had when it fails.
    fn reload(&mut self) -> Result<()> {
        let before = (
            std::mem::take(&mut self.file),
            self.seen,
            self.journal,
            self.writer.clone(),
        );
        if let Err(e) = self.load() {
            (self.file, self.seen, self.journal, self.writer) = before;
            return Err(e);
        }
        Ok(())
    }

    /// Sets the offsets of one commit in the state, which then takes
    /// about `approx_len` bytes (see [`OffsetStore::grown_by`]).
    fn apply(&mut self, entries: &[Entry], approx_len: u64) {
        self.approx_len = approx_len;
        for (t, p, c) in entries {
            self.file
                .offsets
                .entry(t.clone())
                .or_default()
                .insert(*p, c.clone());
            // A new commit replaces an offset that was out of range.
            if let Some(ps) = self.file.out_of_range.get_mut(t) {
                ps.remove(p);
                if ps.is_empty() {
                    self.file.out_of_range.remove(t);
                }
            }
        }
    }

    /// About how many bytes a snapshot of the state would take with
    /// `entries` applied.
    fn grown_by(&self, entries: &[Entry]) -> u64 {
        let mut len = self.approx_len;
        for (t, p, c) in entries {
            if let Some(old) = self.get(t, *p) {
                len = len.saturating_sub(entry_len(t, old));
            }
            len += entry_len(t, c);
        }
        len
    }

    /// About how many bytes a snapshot of the state takes.
    fn measure(&self) -> u64 {
        self.file
            .offsets
            .iter()
            .map(|(t, ps)| ps.values().map(|c| entry_len(t, c)).sum::<u64>())
            .sum()
    }

    /// Writes the state as a new snapshot that names the next journal
    /// generation, then starts that journal (see the module doc). Every
    /// commit appended so far is durable after it.
    fn compact(&mut self) -> Result<()> {
        let generation = self.file.journal + 1;
        let before = (self.file.version, self.file.journal);
        self.file.version = VERSION;
        self.file.journal = generation;
        let bytes = serde_json::to_vec_pretty(&self.file).expect("offsets serialise");
        if let Err(e) = write_atomic(&self.path, &bytes, self.mode, true) {
            (self.file.version, self.file.journal) = before;
            return Err(e);
        }
        self.seen = file_id(&self.path)?;
        self.snapshot_len = bytes.len() as u64;
        self.syncer.covered(self.appended);
        // Until the new journal is there, commits start it again.
        self.writer = None;
        self.journal = JournalView::default();
        let f = journal::create(&self.journal_path, generation, self.mode)?;
        let ino = {
            use std::os::unix::fs::MetadataExt;
            f.metadata().map(|m| m.ino()).ok()
        };
        self.writer = Some(Arc::new(f));
        self.journal = JournalView {
            ino,
            end: HEADER_LEN,
            len: HEADER_LEN,
        };
        Ok(())
    }

    /// The descriptor to append to, opening the journal (or starting one,
    /// see [`OffsetStore::compact`]) on first use, and cutting off a
    /// record a crash left cut short.
    fn writer(&mut self) -> Result<Arc<File>> {
        if self.journal.ino.is_none() {
            self.compact()?;
        }
        let f = if let Some(f) = &self.writer {
            Arc::clone(f)
        } else {
            let f = Arc::new(journal::open_append(&self.journal_path)?);
            self.writer = Some(Arc::clone(&f));
            f
        };
        if self.journal.len > self.journal.end {
            f.set_len(self.journal.end)
                .map_err(|e| Error::io(format!("truncating {}", self.journal_path.display()), e))?;
            self.journal.len = self.journal.end;
        }
        Ok(f)
    }

    /// What to wait for to have every commit of this store synced (`None`
    /// when it appended nothing).
    pub(crate) fn pending(&self) -> Option<Pending> {
        (self.appended > 0).then(|| Pending {
            syncer: Arc::clone(&self.syncer),
            ticket: self.appended,
        })
    }

    /// The journal to sync and the bytes appended so far (see
    /// [`Syncer::wait`]).
    pub(crate) fn sync_target(&self) -> (Option<Arc<File>>, PathBuf, u64) {
        (
            self.writer.clone(),
            self.journal_path.clone(),
            self.appended,
        )
    }

    /// The committed offset of a partition.
    pub(crate) fn get(&self, topic: &str, partition: u32) -> Option<&CommittedOffset> {
        self.file.offsets.get(topic)?.get(&partition)
    }

    /// Where the log of a partition ended when its committed offset was
    /// found beyond the end (see `OffsetsFile::out_of_range`).
    pub(crate) fn out_of_range(&self, topic: &str, partition: u32) -> Option<u64> {
        self.file.out_of_range.get(topic)?.get(&partition).copied()
    }

    /// Marks committed offsets that lie beyond their partition's log end
    /// (`end_of` gives the end, `None` for a partition that does not
    /// exist) as out of range, durably. Returns the `(topic, partition,
    /// committed, end)` marked now.
    pub(crate) fn mark_beyond_end(
        &mut self,
        end_of: &dyn Fn(&str, u32) -> Option<u64>,
    ) -> Result<Vec<(String, u32, u64, u64)>> {
        let mut marked = Vec::new();
        for (t, ps) in &self.file.offsets {
            for (&p, c) in ps {
                let Some(end) = end_of(t, p) else { continue };
                if c.offset > end && self.out_of_range(t, p).is_none() {
                    marked.push((t.clone(), p, c.offset, end));
                }
            }
        }
        if marked.is_empty() {
            return Ok(marked);
        }
        let before = self.file.out_of_range.clone();
        for (t, p, _, end) in &marked {
            self.file
                .out_of_range
                .entry(t.clone())
                .or_default()
                .insert(*p, *end);
        }
        if let Err(e) = self.compact() {
            self.file.out_of_range = before;
            return Err(e);
        }
        Ok(marked)
    }

    /// Whether nothing is committed.
    pub(crate) fn is_empty(&self) -> bool {
        self.file
            .offsets
            .values()
            .all(std::collections::BTreeMap::is_empty)
    }

    /// Every committed offset, by topic then partition.
    pub(crate) fn all(&self) -> Vec<(String, u32, CommittedOffset)> {
        self.file
            .offsets
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |(p, c)| (t.clone(), *p, c.clone())))
            .collect()
    }

    /// Forgets every committed offset of `topic` (it was deleted).
    pub(crate) fn remove_topic(&mut self, topic: &str) -> Result<()> {
        let marks = self.file.out_of_range.remove(topic);
        let offsets = self.file.offsets.remove(topic);
        if offsets.is_none() && marks.is_none() {
            return Ok(());
        }
        if let Err(e) = self.compact() {
            if let Some(o) = offsets {
                self.file.offsets.insert(topic.to_owned(), o);
            }
            if let Some(m) = marks {
                self.file.out_of_range.insert(topic.to_owned(), m);
            }
            return Err(e);
        }
        self.approx_len = self.measure();
        Ok(())
    }

    /// Commits `offsets` (all or nothing): appends their record to the
    /// journal. With `durable`, returns what to wait for before the
    /// commit counts as on disk ([`Pending`]: wait without holding the
    /// store, so that commits made meanwhile share the sync).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the offsets with their metadata
    /// would take more than an offsets file may hold; I/O errors. Nothing
    /// changes then.
    pub(crate) fn commit(
        &mut self,
        offsets: &[(String, u32, CommittedOffset)],
        durable: bool,
    ) -> Result<Option<Pending>> {
        if offsets.is_empty() {
            return Ok(None);
        }
        let grown = self.grown_by(offsets);
        if grown > MAX_METADATA_LEN {
            return Err(Error::InvalidArgument(format!(
                "the committed offsets of {} would take about {grown} bytes, more than the \
                 {MAX_METADATA_LEN} an offsets file may hold; commit shorter metadata",
                self.path.display(),
            )));
        }
        let record = journal::encode(offsets)?;
        let f = self.writer()?;
        journal::append(&f, &self.journal_path, self.journal.end, &record)?;
        self.apply(offsets, grown);
        self.journal.end += record.len() as u64;
        self.journal.len = self.journal.end;
        self.appended += record.len() as u64;
        if self.journal.end > COMPACT_AT.max(2 * self.snapshot_len) {
            // The record is in the journal: the commit stands even if
            // this fails (the next commit tries again).
            if let Err(e) = self.compact() {
                ::log::warn!(
                    "folding {} into a snapshot: {e}",
                    self.journal_path.display()
                );
            }
        }
        Ok(durable.then(|| Pending {
            syncer: Arc::clone(&self.syncer),
            ticket: self.appended,
        }))
    }
}

/// The committed offsets kept in the offsets file at `path`
/// (`<dir>/groups/<group>.offsets`) and its journal, by topic then
/// partition, read without opening the data directory and without
/// changing anything (for tools that check a directory another process
/// may have open).
///
/// # Errors
/// [`Error::Corrupt`] or [`Error::UnsupportedVersion`] for an offsets
/// file that cannot be read; I/O errors.
pub fn read_committed_offsets(
    path: &Path,
) -> Result<BTreeMap<String, BTreeMap<u32, CommittedOffset>>> {
    Ok(OffsetStore::read(path.to_owned(), 0o600)?.file.offsets)
}

/// About how many bytes the snapshot spends on one committed offset.
fn entry_len(topic: &str, c: &CommittedOffset) -> u64 {
    (topic.len() + c.metadata.len() + 96) as u64
}

/// Gives a broadcast consumer the offsets it stored under the group name
/// `<group>.<client>` before broadcast offsets had a name of their own:
/// copies that file to `path` when `path` does not exist yet.
fn migrate_legacy_broadcast(
    gdir: &Path,
    path: &Path,
    group: &str,
    client: &str,
    mode: u32,
) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    let legacy = gdir.join(format!("{group}.{client}.offsets"));
    if let Some(bytes) = crate::atomic_file::read_small(&legacy)? {
        write_atomic(path, &bytes, mode, true)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
