//! Settings of a data directory handle, and how processes share it.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::topic::TopicConfig;

/// How processes share a data directory ([`Config::mode`]).
///
/// In shared mode any number of processes open the directory at once and
/// every one of them produces, consumes, joins consumer groups and changes
/// topics; handles on it in one process share one engine. In exclusive
/// mode one handle owns the directory: every other open, in this process
/// or another, fails with [`Error::Locked`]. Shared mode needs locks and
/// memory maps that work between processes, which network filesystems do
/// not give: a shared open of a directory on NFS, CIFS, 9p, FUSE and the
/// like fails with [`Error::InvalidConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Shared mode on a local filesystem, exclusive mode on a network or
    /// user-space one.
    Auto,
    /// Shared mode.
    Shared,
    /// Exclusive mode.
    Exclusive,
}

impl OpenMode {
    /// Every mode, in declaration order.
    pub const ALL: [OpenMode; 3] = [OpenMode::Auto, OpenMode::Shared, OpenMode::Exclusive];

    /// The mode's name: `auto`, `shared` or `exclusive`.
    pub fn name(self) -> &'static str {
        match self {
            OpenMode::Auto => "auto",
            OpenMode::Shared => "shared",
            OpenMode::Exclusive => "exclusive",
        }
    }
}

impl fmt::Display for OpenMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OpenMode {
    type Err = Error;

    /// Parses a mode's name, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self> {
        OpenMode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::InvalidArgument(format!("mode must be auto, shared or exclusive, got {s:?}"))
            })
    }
}

/// Settings of a data directory handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Fault in segment pages in the background before the writer reaches
    /// them (default true): the active segment once it holds 16 KiB, the
    /// next one once the active one is half full. The work runs on the
    /// broker's two background threads, shared by every partition.
    pub prefault: bool,
    /// Unix permission bits of created data files (default `0o600`).
    pub file_mode: u32,
    /// How often a background thread applies retention, in ms (default
    /// 60,000; 0 turns the thread off, retention then runs on segment roll
    /// and on [`Broker::enforce_retention`]).
    pub retention_check_interval_ms: u64,
    /// Largest metadata string a commit may carry, in bytes (default
    /// [`DEFAULT_MAX_COMMIT_METADATA_BYTES`], Kafka's
    /// `offset.metadata.max.bytes`); a longer one is refused with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub max_commit_metadata_bytes: usize,
    /// Most descriptors the broker keeps open for its files (default
    /// [`DEFAULT_MAX_OPEN_FILES`], like RocksDB's `max_open_files`): those
    /// of active segments and recovery points, in a cache that closes the
    /// least recently used and opens a file again when it is needed. Data
    /// is read through memory maps, which need none. At least 1; 0 is
    /// refused by [`Broker::open`] with [`Error::InvalidConfig`].
    pub max_open_files: usize,
    /// How processes share the directory (default
    /// [`OpenMode::Exclusive`]): one handle alone (exclusive mode), or any
    /// number of processes at once, each of them reading and writing
    /// (shared mode); [`OpenMode::Auto`] takes shared mode where the
    /// filesystem allows it. See docs/shared-mode.md.
    pub mode: OpenMode,
    /// Shared mode whatever `mode` says (default false; `true` is
    /// [`OpenMode::Shared`]). Kept for the code written before `mode`:
    /// [`Config::shared`] sets `mode` too, so `.shared(false)` asks for
    /// exclusive mode, and [`Config::mode`] clears it.
    pub shared: bool,
    /// Read-only (default false, implies shared mode): the handle never
    /// writes a file of the directory, not even recovery; producers, topic
    /// changes and commits are refused with [`Error::ReadOnly`]. For tools
    /// looking at a directory an application has open.
    pub readonly: bool,
    // Topic creation on first use.
    /// Create a topic on first use (default false; Kafka's
    /// `auto.create.topics.enable`, Pulsar's `allowAutoTopicCreation`): a
    /// send to a missing topic, and a consumer's `subscribe` or `assign`
    /// naming one (not a pattern subscription), create it with
    /// [`Config::default_partitions`] partitions and the default
    /// [`TopicConfig`]. An invalid name still fails with
    /// [`Error::InvalidTopicName`] and creates nothing. A read-only handle
    /// never creates: it keeps reporting [`Error::UnknownTopic`].
    pub auto_create_topics: bool,
    /// Partitions of a topic created on first use (default 1, Kafka's
    /// `num.partitions`).
    pub default_partitions: u32,
    /// librdkafka properties for a broker on a Kafka cluster (opened with a
    /// `kafka://host:port,...` address; see [`crate::kafka::KafkaBroker::open`]);
    /// a data directory ignores them.
    pub kafka_properties: Vec<(String, String)>,
}

pub use crate::files::DEFAULT_MAX_OPEN_FILES;

/// Default of [`Config::max_commit_metadata_bytes`]: 4 KiB, as in Kafka.
pub const DEFAULT_MAX_COMMIT_METADATA_BYTES: usize = 4096;

impl Default for Config {
    fn default() -> Self {
        Config {
            prefault: true,
            file_mode: 0o600,
            retention_check_interval_ms: 60_000,
            max_commit_metadata_bytes: DEFAULT_MAX_COMMIT_METADATA_BYTES,
            max_open_files: DEFAULT_MAX_OPEN_FILES,
            mode: OpenMode::Exclusive,
            shared: false,
            readonly: false,
            // Topic creation on first use.
            auto_create_topics: false,
            default_partitions: 1,
            kafka_properties: Vec::new(),
        }
    }
}

impl Config {
    /// Adds a librdkafka property for a broker on a Kafka cluster
    /// ([`Config::kafka_properties`]).
    pub fn kafka_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.kafka_properties.push((key.into(), value.into()));
        self
    }

    /// Sets `prefault`.
    pub fn prefault(mut self, on: bool) -> Self {
        self.prefault = on;
        self
    }

    /// Sets `file_mode`.
    pub fn file_mode(mut self, mode: u32) -> Self {
        self.file_mode = mode;
        self
    }

    /// Sets `retention_check_interval_ms`.
    pub fn retention_check_interval_ms(mut self, ms: u64) -> Self {
        self.retention_check_interval_ms = ms;
        self
    }

    /// Sets `max_commit_metadata_bytes`.
    pub fn max_commit_metadata_bytes(mut self, bytes: usize) -> Self {
        self.max_commit_metadata_bytes = bytes;
        self
    }

    /// Sets `max_open_files` (checked by [`Broker::open`]: 0 is an
    /// [`Error::InvalidConfig`]).
    pub fn max_open_files(mut self, n: usize) -> Self {
        self.max_open_files = n;
        self
    }

    /// Sets `mode` (and clears `shared`: the last of the two calls wins).
    pub fn mode(mut self, mode: OpenMode) -> Self {
        self.mode = mode;
        self.shared = false;
        self
    }

    /// Sets `shared`, and `mode` to [`OpenMode::Shared`] or
    /// [`OpenMode::Exclusive`].
    pub fn shared(mut self, on: bool) -> Self {
        self.shared = on;
        self.mode = if on {
            OpenMode::Shared
        } else {
            OpenMode::Exclusive
        };
        self
    }

    /// Sets `readonly` (which implies shared mode).
    pub fn readonly(mut self, on: bool) -> Self {
        self.readonly = on;
        self
    }

    /// The mode asked for: [`OpenMode::Shared`] when `shared` or
    /// `readonly` is set, else `mode`.
    pub fn open_mode(&self) -> OpenMode {
        if self.shared || self.readonly {
            OpenMode::Shared
        } else {
            self.mode
        }
    }

    /// Whether the directory is opened in shared mode whatever it is on
    /// (`shared`, `readonly` or `mode` [`OpenMode::Shared`]). With
    /// [`OpenMode::Auto`] the open decides: see [`crate::Broker::mode`].
    pub fn is_shared(&self) -> bool {
        self.open_mode() == OpenMode::Shared
    }

    // Topic creation on first use.
    /// Sets `auto_create_topics`.
    pub fn auto_create_topics(mut self, on: bool) -> Self {
        self.auto_create_topics = on;
        self
    }

    /// Sets `default_partitions` (checked by [`Broker::open`]: 0 or more
    /// than a topic may have is an [`Error::InvalidConfig`]).
    pub fn default_partitions(mut self, n: u32) -> Self {
        self.default_partitions = n;
        self
    }

    /// Checks every value against its allowed range.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first value out of range.
    pub fn validate(&self) -> Result<()> {
        if self.max_open_files == 0 {
            return Err(Error::InvalidConfig(
                "max_open_files must be at least 1, got 0".into(),
            ));
        }
        if TopicConfig::new(self.default_partitions)
            .validate()
            .is_err()
        {
            return Err(Error::InvalidConfig(format!(
                "default_partitions must be 1 to 100000, got {}",
                self.default_partitions
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_round_trip_and_ignore_case() {
        for m in OpenMode::ALL {
            assert_eq!(m.name().parse::<OpenMode>().unwrap(), m);
            assert_eq!(m.to_string().to_uppercase().parse::<OpenMode>().unwrap(), m);
        }
        assert!(matches!(
            "both".parse::<OpenMode>(),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn shared_and_readonly_ask_for_shared_mode_and_shared_false_for_exclusive() {
        assert_eq!(Config::default().open_mode(), OpenMode::Exclusive);
        assert_eq!(
            Config::default().mode(OpenMode::Auto).open_mode(),
            OpenMode::Auto
        );
        assert_eq!(Config::default().shared(true).open_mode(), OpenMode::Shared);
        assert_eq!(
            Config::default().shared(false).open_mode(),
            OpenMode::Exclusive
        );
        assert_eq!(
            Config::default().readonly(true).open_mode(),
            OpenMode::Shared
        );
        let last_wins = Config::default().shared(true).mode(OpenMode::Exclusive);
        assert_eq!(last_wins.open_mode(), OpenMode::Exclusive);
        let last_wins = Config::default().mode(OpenMode::Exclusive).shared(true);
        assert_eq!(last_wins.open_mode(), OpenMode::Shared);
        let literal = Config {
            shared: true,
            mode: OpenMode::Exclusive,
            ..Config::default()
        };
        assert_eq!(literal.open_mode(), OpenMode::Shared);
        assert!(literal.is_shared());
        assert!(!Config::default().is_shared());
    }
}
