//! A topic's directory read without opening the data directory (no lock):
//! for `tail` and `dump`, which work while another process owns it.

use std::path::{Path, PathBuf};

use mqlite::{validate_topic_name, Error, TopicConfig};
use serde_json::Value;

use crate::CliResult;

/// The `topic.json` version this tool reads.
const TOPIC_FILE_VERSION: u64 = 1;

/// A topic as found on disk.
pub struct TopicDir {
    pub name: String,
    pub dir: PathBuf,
    pub config: TopicConfig,
}

impl TopicDir {
    /// Reads `<data>/topics/<name>/topic.json`.
    pub fn open(data: &Path, name: &str) -> CliResult<TopicDir> {
        validate_topic_name(name)?;
        let dir = data.join("topics").join(name);
        let path = dir.join("topic.json");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::UnknownTopic(name.to_owned()).into())
            }
            Err(e) => return Err(format!("reading {}: {e}", path.display()).into()),
        };
        let bad = |what: String| format!("{}: {what}", path.display());
        let file: Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        let version = file["version"].as_u64();
        if version != Some(TOPIC_FILE_VERSION) {
            return Err(bad(format!(
                "unsupported version {version:?} (this tool reads {TOPIC_FILE_VERSION})"
            ))
            .into());
        }
        let config: TopicConfig =
            serde_json::from_value(file["config"].clone()).map_err(|e| bad(e.to_string()))?;
        Ok(TopicDir {
            name: name.to_owned(),
            dir,
            config,
        })
    }

    /// The directory of `partition`, which must exist in the topic.
    pub fn partition_dir(&self, partition: u32) -> CliResult<PathBuf> {
        if partition >= self.config.partitions {
            return Err(Error::UnknownPartition {
                topic: self.name.clone(),
                partition,
                count: self.config.partitions,
            }
            .into());
        }
        Ok(self.dir.join(partition.to_string()))
    }
}
