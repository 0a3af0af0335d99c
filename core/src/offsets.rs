//! Committed offsets of a consumer group: `<dir>/groups/<name>.offsets`,
//! replaced atomically (write to a temporary file, fsync, rename, fsync of
//! the directory) on every commit, so a commit that returned survives
//! `kill -9` and power loss.
//!
//! A broadcast consumer (group `g`, client `c`) keeps its own offsets in
//! `<dir>/groups/g+c.offsets`: `+` is not allowed in a group or client
//! name, so no group's file and no other broadcast consumer's can be the
//! same file. Directories written when broadcast offsets were stored as the
//! group `g.c` are read on first use: the new file starts as a copy of
//! `g.c.offsets` (which stays, as group `g.c`'s).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic_file::{write_atomic, MAX_METADATA_LEN};
use crate::error::{Error, Result};

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

const VERSION: u32 = 1;

#[derive(Debug, Default, Serialize, Deserialize)]
struct OffsetsFile {
    version: u32,
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

/// Whether `key` is a valid storage name: a group name, or a broadcast
/// consumer's `<group>+<client>`.
pub(crate) fn is_valid_key(key: &str) -> bool {
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
    mode: u32,
    file: OffsetsFile,
    /// The identity of the file `file` was read from or written to (see
    /// [`OffsetStore::refresh`]); `None` when there was none.
    seen: Option<FileId>,
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
            if f.version != VERSION {
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
    crate::topic::validate_topic_name(name).map_err(|e| match e {
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

    /// The store of the offsets file at `path`, read now.
    fn read(path: PathBuf, mode: u32) -> Result<OffsetStore> {
        let seen = file_id(&path)?;
        let file = read_file(&path)?;
        Ok(OffsetStore {
            path,
            mode,
            file,
            seen,
        })
    }

    /// Reads the file again if another process replaced it since this
    /// store last read or wrote it (several processes on one directory;
    /// called under the group's lock before a read-modify-write).
    ///
    /// # Errors
    /// I/O errors; [`Error::Corrupt`] or [`Error::UnsupportedVersion`] for
    /// a file that cannot be read (the store keeps what it had).
    pub(crate) fn refresh(&mut self) -> Result<()> {
        let id = file_id(&self.path)?;
        if id == self.seen {
            return Ok(());
        }
        self.file = read_file(&self.path)?;
        self.seen = id;
        Ok(())
    }

    /// Writes the offsets (durably) and remembers the file written.
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        write_atomic(&self.path, bytes, self.mode, true)?;
        self.seen = file_id(&self.path)?;
        Ok(())
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
        for (t, p, _, end) in &marked {
            self.file
                .out_of_range
                .entry(t.clone())
                .or_default()
                .insert(*p, *end);
        }
        let bytes = serde_json::to_vec_pretty(&self.file).expect("offsets serialise");
        self.write(&bytes)?;
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
        let marked = self.file.out_of_range.remove(topic).is_some();
        if self.file.offsets.remove(topic).is_none() && !marked {
            return Ok(());
        }
        let bytes = serde_json::to_vec_pretty(&self.file).expect("offsets serialise");
        self.write(&bytes)
    }

    /// Commits `offsets` (all or nothing) and returns once they are on disk.
    pub(crate) fn commit(&mut self, offsets: &[(String, u32, CommittedOffset)]) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let before = self.file.offsets.clone();
        let before_marks = self.file.out_of_range.clone();
        for (t, p, c) in offsets {
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
        let bytes = serde_json::to_vec_pretty(&self.file).expect("offsets serialise");
        if bytes.len() as u64 > MAX_METADATA_LEN {
            // Written, the file could not be read back: refuse the commit.
            self.file.offsets = before;
            self.file.out_of_range = before_marks;
            return Err(Error::InvalidArgument(format!(
                "the committed offsets of {} would take {} bytes, more than the {MAX_METADATA_LEN} an \
                 offsets file may hold; commit shorter metadata",
                self.path.display(),
                bytes.len()
            )));
        }
        if let Err(e) = self.write(&bytes) {
            self.file.offsets = before;
            self.file.out_of_range = before_marks;
            return Err(e);
        }
        Ok(())
    }
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
