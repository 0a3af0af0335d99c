//! What a transaction takes from a consumer (Kafka's
//! `sendOffsetsToTransaction` with the consumer's group metadata).

use super::{Consumer, ConsumerConfig};
use crate::error::{Error, Result};

/// What a consumer reads of transactions (Kafka's `isolation.level`).
///
/// A transaction is written only at its commit, published together with
/// its markers, and a crash in the middle of a commit leaves nothing
/// readable that did not commit (recovery cuts it): every record in a log
/// is committed, so both levels deliver the same records. Markers are
/// never delivered, at either level; positions, `lag` and `seek` step over
/// them. The setting is kept for code that sets it (and for backends where
/// the levels differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// Only committed transactions' records (the default, as librdkafka's).
    #[default]
    ReadCommitted,
    /// What the log holds.
    ReadUncommitted,
}

impl IsolationLevel {
    /// Parses `"read_committed"` or `"read_uncommitted"`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for anything else.
    pub fn parse(s: &str) -> Result<IsolationLevel> {
        match s {
            "read_committed" => Ok(IsolationLevel::ReadCommitted),
            "read_uncommitted" => Ok(IsolationLevel::ReadUncommitted),
            _ => Err(Error::InvalidArgument(format!(
                "isolation_level {s:?}: expected \"read_committed\" or \"read_uncommitted\""
            ))),
        }
    }

    /// The name [`IsolationLevel::parse`] reads.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationLevel::ReadCommitted => "read_committed",
            IsolationLevel::ReadUncommitted => "read_uncommitted",
        }
    }
}

impl ConsumerConfig {
    /// Sets the isolation level.
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.isolation_level = level;
        self
    }
}

/// A consumer's group, its member id in the group (when it is a member),
/// and `(topic, partition, next offset)` entries.
pub(crate) type GroupOffsets = (String, Option<String>, Vec<(String, u32, u64)>);

impl Consumer {
    /// The consumer's group, its member id, and the offsets
    /// [`Consumer::commit`] would commit now, `(topic, partition, next
    /// offset)`, for a transaction to commit with its records.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a consumer without a `group_id`;
    /// [`Error::Closed`].
    pub(crate) fn offsets_for_transaction(&self) -> Result<GroupOffsets> {
        self.check_open()?;
        let Some(group) = &self.offsets else {
            return Err(Error::InvalidArgument(
                "sending offsets to a transaction needs a consumer with a group_id".into(),
            ));
        };
        let offsets = self
            .positions(None)
            .into_iter()
            .map(|(t, p, c)| (t, p, c.offset))
            .collect();
        let member = self.member.as_ref().map(|m| m.id.clone());
        Ok((group.name().to_owned(), member, offsets))
    }
}
