//! What a transaction takes from a consumer (Kafka's
//! `sendOffsetsToTransaction` with the consumer's group metadata).

use super::Consumer;
use crate::error::{Error, Result};

/// `(topic, partition, next offset)` entries of one group.
pub(crate) type GroupOffsets = (String, Vec<(String, u32, u64)>);

impl Consumer {
    /// The consumer's group and the offsets [`Consumer::commit`] would
    /// commit now, `(topic, partition, next offset)`, for a transaction to
    /// commit with its records.
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
        Ok((group.name().to_owned(), offsets))
    }
}
