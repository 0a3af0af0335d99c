//! Flow control and what commits take: pausing and resuming partitions
//! (Kafka's `pause`/`resume`), and offsets stored by the application
//! (`store_offsets` with `enable_auto_offset_store` off).

use super::Consumer;
use crate::error::{Error, Result};
use crate::message::Message;

impl Consumer {
    /// Indexes of the assigned partitions `partitions`, or an error naming
    /// the first that is not assigned (nothing is changed then).
    fn indexes(&mut self, partitions: &[(&str, u32)]) -> Result<Vec<usize>> {
        self.check_open()?;
        self.refresh_subscription()?;
        partitions.iter().map(|&(t, p)| self.find(t, p)).collect()
    }

    /// Stops reading `partitions` until [`resume`](Self::resume): polls
    /// return nothing of theirs (messages fetched for them and not handed
    /// out are put back), but they stay assigned, so a group member keeps
    /// them and their positions, and commits cover them. Pausing a paused
    /// partition changes nothing; a rebalance that revokes a partition
    /// forgets that it was paused.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if a partition is not assigned (nothing
    /// is paused then).
    pub fn pause(&mut self, partitions: &[(&str, u32)]) -> Result<()> {
        on_cluster!(self, k => k.pause(partitions, true));
        for i in self.indexes(partitions)? {
            self.put_back_partition(i);
            self.assigned[i].paused = true;
        }
        Ok(())
    }

    /// Reads `partitions` again after [`pause`](Self::pause).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if a partition is not assigned (nothing
    /// is resumed then).
    pub fn resume(&mut self, partitions: &[(&str, u32)]) -> Result<()> {
        on_cluster!(self, k => k.pause(partitions, false));
        for i in self.indexes(partitions)? {
            self.assigned[i].paused = false;
        }
        Ok(())
    }

    /// The paused partitions, as `(topic, partition)` pairs.
    pub fn paused(&self) -> Vec<(String, u32)> {
        on_cluster!(ref self, k => k.paused());
        self.assigned
            .iter()
            .filter(|a| a.paused)
            .map(|a| (a.topic.name().to_string(), a.log.partition()))
            .collect()
    }

    /// Stores `(topic, partition, offset)` entries as processed, for the
    /// next commit (manual or automatic) to take: `offset` is the next
    /// offset to read, the last processed plus one (Kafka's
    /// `store_offsets`). Needs `enable_auto_offset_store` off; nothing is
    /// written until a commit.
    ///
    /// # Errors
    /// [`Error::Closed`] once closed; [`Error::InvalidArgument`] with
    /// `enable_auto_offset_store` on, without a `group_id`, or for a
    /// partition not assigned (nothing is stored then).
    pub fn store_offsets(&mut self, offsets: &[(&str, u32, u64)]) -> Result<()> {
        on_cluster!(self, k => k.store_offsets(offsets));
        self.check_open()?;
        if self.config.enable_auto_offset_store {
            return Err(Error::InvalidArgument(
                "store_offsets needs enable_auto_offset_store off".into(),
            ));
        }
        if self.offsets.is_none() {
            return Err(Error::InvalidArgument(
                "store_offsets needs a consumer with a group_id".into(),
            ));
        }
        let parts: Vec<(&str, u32)> = offsets.iter().map(|&(t, p, _)| (t, p)).collect();
        let at = self.indexes(&parts)?;
        for (i, &(_, _, o)) in at.into_iter().zip(offsets) {
            self.assigned[i].stored = Some(o);
        }
        Ok(())
    }

    /// Stores `message` as processed: [`store_offsets`](Self::store_offsets)
    /// of its offset plus one.
    pub fn store_offset(&mut self, message: &Message) -> Result<()> {
        self.store_offsets(&[(message.topic(), message.partition(), message.offset() + 1)])
    }
}
