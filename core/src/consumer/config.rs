//! Consumer settings: [`ConsumerConfig`] and [`OffsetReset`].

use crate::assign::AssignmentStrategy;
use crate::error::{Error, Result};
use crate::offsets::{validate_broadcast_key, validate_group_id, validate_group_name};
use crate::producer::Acks;

use super::IsolationLevel;

/// Where to start when there is no valid position (Kafka's
/// `auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffsetReset {
    /// The first retained offset (default).
    #[default]
    Earliest,
    /// The end: only records written from now on.
    Latest,
    /// Fail with [`Error::OffsetOutOfRange`].
    Error,
}

impl std::str::FromStr for OffsetReset {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "earliest" | "smallest" | "beginning" => Ok(OffsetReset::Earliest),
            "latest" | "largest" | "end" => Ok(OffsetReset::Latest),
            "error" | "none" => Ok(OffsetReset::Error),
            _ => Err(Error::InvalidArgument(format!(
                "auto_offset_reset must be earliest, latest or error, got {s:?}"
            ))),
        }
    }
}

/// Settings of a consumer. The defaults follow Kafka where they apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Consumer group; `None` for a standalone consumer (which cannot
    /// commit). The rules of a topic name, and at most
    /// [`crate::MAX_GROUP_NAME_LEN`] bytes (with broadcast, the group id, a
    /// `+` and the client id together).
    pub group_id: Option<String>,
    /// This consumer's name: part of its member id in the group, and, in
    /// broadcast mode, the name its offsets are stored under (default
    /// `"consumer"`).
    pub client_id: String,
    /// Where to start without a valid position.
    pub auto_offset_reset: OffsetReset,
    /// Most messages one `poll` returns (default 500, as Kafka).
    pub max_poll_records: usize,
    /// How the group shares partitions (default averagely / range).
    pub assignment_strategy: AssignmentStrategy,
    /// The partitions this member asks for with
    /// [`AssignmentStrategy::ByConfig`].
    pub wanted_partitions: Vec<(String, u32)>,
    /// Commit the position of every owned partition automatically, every
    /// `auto_commit_interval_ms`, before a partition is revoked and at close
    /// (default true).
    pub enable_auto_commit: bool,
    /// Interval of automatic commits (default 5000 ms).
    pub auto_commit_interval_ms: u64,
    /// A member that does not poll for this long leaves the group and its
    /// partitions go to the others (default 300000 ms).
    pub max_poll_interval_ms: u64,
    /// RocketMQ's broadcasting: every consumer gets every partition, with
    /// offsets of its own (stored under `<group_id>+<client_id>`).
    pub broadcast: bool,
    /// Kafka's `enable.auto.offset.store`: every message handed out counts
    /// as processed, and commits (manual and automatic) take the positions
    /// (default true). Off, commits take only the offsets the application
    /// stored with [`Consumer::store_offsets`] once it processed them: with
    /// auto-commit, the at-least-once idiom.
    pub enable_auto_offset_store: bool,
    /// What of transactions this consumer reads (default read committed;
    /// see [`IsolationLevel`]).
    pub isolation_level: IsolationLevel,
    /// How durable a commit is when it returns, as a producer's `acks`:
    /// [`Acks::All`] (default) synced to disk, surviving a crash of the
    /// machine (commits made at once by several threads share one sync);
    /// [`Acks::One`] or [`Acks::Zero`] written to the operating system,
    /// surviving a crash of the process (`kill -9`) but not of the
    /// machine, at the cost of a `write(2)`.
    pub commit_acks: Acks,
}

impl ConsumerConfig {
    /// Checks the settings a consumer of any backend needs right.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_poll_records == 0 {
            return Err(Error::InvalidArgument(
                "max_poll_records must be at least 1".into(),
            ));
        }
        if let Some(g) = &self.group_id {
            validate_group_id("group_id", g)?;
        }
        validate_group_name("client_id", &self.client_id)?;
        match (&self.group_id, self.broadcast) {
            (None, true) => Err(Error::InvalidArgument(
                "broadcast mode needs a group_id".into(),
            )),
            (Some(g), true) => validate_broadcast_key(g, &self.client_id),
            _ => Ok(()),
        }
    }
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            group_id: None,
            client_id: "consumer".into(),
            auto_offset_reset: OffsetReset::Earliest,
            max_poll_records: 500,
            assignment_strategy: AssignmentStrategy::Averagely,
            wanted_partitions: Vec::new(),
            enable_auto_commit: true,
            auto_commit_interval_ms: 5000,
            max_poll_interval_ms: 300_000,
            broadcast: false,
            enable_auto_offset_store: true,
            isolation_level: IsolationLevel::ReadCommitted,
            commit_acks: Acks::All,
        }
    }
}

impl ConsumerConfig {
    /// A consumer in group `id`.
    pub fn group(id: impl Into<String>) -> Self {
        ConsumerConfig {
            group_id: Some(id.into()),
            ..ConsumerConfig::default()
        }
    }

    /// Sets `auto_offset_reset`.
    pub fn auto_offset_reset(mut self, reset: OffsetReset) -> Self {
        self.auto_offset_reset = reset;
        self
    }

    /// Sets `commit_acks`: how durable a commit is when it returns.
    pub fn commit_acks(mut self, acks: Acks) -> Self {
        self.commit_acks = acks;
        self
    }

    /// Sets `max_poll_records` (at least 1).
    pub fn max_poll_records(mut self, n: usize) -> Self {
        self.max_poll_records = n.max(1);
        self
    }

    /// Sets `client_id`.
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = id.into();
        self
    }

    /// Sets the assignment strategy.
    pub fn assignment_strategy(mut self, s: AssignmentStrategy) -> Self {
        self.assignment_strategy = s;
        self
    }

    /// Sets the partitions asked for under [`AssignmentStrategy::ByConfig`].
    pub fn wanted_partitions(mut self, partitions: Vec<(String, u32)>) -> Self {
        self.wanted_partitions = partitions;
        self
    }

    /// Turns automatic commits on or off.
    pub fn enable_auto_commit(mut self, on: bool) -> Self {
        self.enable_auto_commit = on;
        self
    }

    /// Sets `auto_commit_interval_ms`.
    pub fn auto_commit_interval_ms(mut self, ms: u64) -> Self {
        self.auto_commit_interval_ms = ms;
        self
    }

    /// Sets `max_poll_interval_ms`.
    pub fn max_poll_interval_ms(mut self, ms: u64) -> Self {
        self.max_poll_interval_ms = ms;
        self
    }

    /// Sets `enable_auto_offset_store` (off: commits take only what
    /// [`Consumer::store_offsets`] stored).
    pub fn enable_auto_offset_store(mut self, on: bool) -> Self {
        self.enable_auto_offset_store = on;
        self
    }

    /// Turns broadcast mode on or off.
    pub fn broadcast(mut self, on: bool) -> Self {
        self.broadcast = on;
        self
    }
}
