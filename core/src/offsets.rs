//! Committed offsets of a consumer group: `<dir>/groups/<name>.offsets`,
//! replaced atomically (write to a temporary file, fsync, rename, fsync of
//! the directory) on every commit, so a commit that returned survives
//! `kill -9` and power loss.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic_file::write_atomic;
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
}

/// The committed offsets of one group (or one broadcast consumer).
#[derive(Debug)]
pub(crate) struct OffsetStore {
    path: PathBuf,
    mode: u32,
    file: OffsetsFile,
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
        let file = match crate::atomic_file::read_small(&path)? {
            Some(bytes) => {
                let f: OffsetsFile =
                    serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
                        path: path.clone(),
                        position: e.column() as u64,
                        reason: format!("committed offsets are not valid: {e}"),
                    })?;
                if f.version != VERSION {
                    return Err(Error::UnsupportedVersion {
                        path,
                        found: f.version,
                        supported: VERSION,
                    });
                }
                f
            }
            None => OffsetsFile {
                version: VERSION,
                offsets: BTreeMap::new(),
            },
        };
        Ok(OffsetStore { path, mode, file })
    }

    /// The committed offset of a partition.
    pub(crate) fn get(&self, topic: &str, partition: u32) -> Option<&CommittedOffset> {
        self.file.offsets.get(topic)?.get(&partition)
    }

    /// Whether nothing is committed.
    pub(crate) fn is_empty(&self) -> bool {
        self.file.offsets.values().all(|ps| ps.is_empty())
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
        if self.file.offsets.remove(topic).is_none() {
            return Ok(());
        }
        let bytes = serde_json::to_vec_pretty(&self.file).expect("offsets serialise");
        write_atomic(&self.path, &bytes, self.mode, true)
    }

    /// Commits `offsets` (all or nothing) and returns once they are on disk.
    pub(crate) fn commit(&mut self, offsets: &[(String, u32, CommittedOffset)]) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let before = self.file.offsets.clone();
        for (t, p, c) in offsets {
            self.file
                .offsets
                .entry(t.clone())
                .or_default()
                .insert(*p, c.clone());
        }
        let bytes = serde_json::to_vec_pretty(&self.file).expect("offsets serialise");
        if let Err(e) = write_atomic(&self.path, &bytes, self.mode, true) {
            self.file.offsets = before;
            return Err(e);
        }
        Ok(())
    }
}
