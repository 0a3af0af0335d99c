//! Dead letters: a message a [`Processor`](crate::Processor) gave up on
//! (its handler failed `max_retries` retries) is sent to the processor's
//! dead-letter topic before its offset is committed past, rather than
//! dropped; a share group's message delivered `max_deliveries` times, or
//! rejected, is sent to its dead-letter topic before it is archived.
//!
//! A dead letter keeps the message's key, value, headers and timestamp and
//! gains headers saying where it came from and why: `mqlite.dlq.topic`,
//! `mqlite.dlq.partition`, `mqlite.dlq.offset`, `mqlite.dlq.deliveries`
//! (how many times the handler got it) and `mqlite.dlq.reason`. It is sent
//! with `acks=all` (durable before the source is committed past) by a
//! named producer of its source partition (`dlq.<group>.<topic>.<p>`, for
//! a share group `share-dlq.<group>.<topic>.<p>`, or a hash of that when
//! longer than a producer name may be) with the source offset as its
//! sequence: sent again after a crash (the source was not committed past or
//! archived yet), it is recognised as a duplicate and not written twice. The dead letter goes
//! to the partition of the dead-letter topic with the source partition's
//! number, modulo its partition count.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::broker::BrokerInner;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::producer::{Acks, Producer, ProducerAccessMode, ProducerConfig, Record};
use crate::sync::lock;
use crate::topic::TopicConfig;

/// Header names of a dead letter.
pub const TOPIC_HEADER: &str = "mqlite.dlq.topic";
/// The source partition (decimal).
pub const PARTITION_HEADER: &str = "mqlite.dlq.partition";
/// The source offset (decimal).
pub const OFFSET_HEADER: &str = "mqlite.dlq.offset";
/// How many times the handler got the message (decimal).
pub const DELIVERIES_HEADER: &str = "mqlite.dlq.deliveries";
/// Why it was dead-lettered.
pub const REASON_HEADER: &str = "mqlite.dlq.reason";

/// The dead-letter topic of a processor and the producers that write it.
pub(crate) struct DeadLetters {
    broker: Arc<BrokerInner>,
    topic: String,
    group: String,
    /// First part of its producers' names.
    prefix: &'static str,
    /// Partitions of the dead-letter topic.
    partitions: u32,
    /// One named producer per source partition.
    producers: Mutex<HashMap<(String, u32), Arc<Producer>>>,
}

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters")
            .field("topic", &self.topic)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl DeadLetters {
    /// The dead letters of group `group` into `topic`, created (one
    /// partition) if it does not exist, sent by producers named
    /// `<prefix>.<group>.<source topic>.<partition>` (`prefix` tells the
    /// kinds of group apart: a processor's `dlq`, a share group's
    /// `share-dlq`).
    ///
    /// # Errors
    /// An invalid topic name; errors creating it.
    pub(crate) fn open(
        broker: Arc<BrokerInner>,
        topic: &str,
        group: &str,
        prefix: &'static str,
    ) -> Result<DeadLetters> {
        crate::topic::validate_name_or_internal(topic)?;
        let partitions = match broker.topic(topic) {
            Ok(t) => t.partition_count(),
            Err(Error::UnknownTopic(_)) => {
                match broker.create_topic(topic, TopicConfig::new(1)) {
                    Ok(()) | Err(Error::TopicExists(_)) => {}
                    Err(e) => return Err(e),
                }
                broker.topic(topic)?.partition_count()
            }
            Err(e) => return Err(e),
        };
        Ok(DeadLetters {
            broker,
            topic: topic.to_owned(),
            group: group.to_owned(),
            prefix,
            partitions: partitions.max(1),
            producers: Mutex::new(HashMap::new()),
        })
    }

    /// Sends `m`, which the handler got `deliveries` times, to the
    /// dead-letter topic, durably; a copy sent before (same source offset)
    /// is not written again.
    ///
    /// # Errors
    /// Errors of the send (the message is then not dead-lettered).
    pub(crate) fn send(&self, m: &Message, deliveries: u32, reason: &str) -> Result<()> {
        let producer = self.producer(m.topic(), m.partition())?;
        let mut record = Record::new(self.topic.as_str())
            .partition(m.partition() % self.partitions)
            .timestamp(m.timestamp())
            .sequence(i64::try_from(m.offset()).unwrap_or(i64::MAX));
        if let Some(k) = m.key() {
            record = record.key(k.to_vec());
        }
        if let Some(v) = m.value() {
            record = record.value(v.to_vec());
        }
        for h in m.headers() {
            record = record.header(h.key, h.value);
        }
        record = record
            .header(TOPIC_HEADER, m.topic().as_bytes().to_vec())
            .header(PARTITION_HEADER, m.partition().to_string().into_bytes())
            .header(OFFSET_HEADER, m.offset().to_string().into_bytes())
            .header(DELIVERIES_HEADER, deliveries.to_string().into_bytes())
            .header(REASON_HEADER, reason.as_bytes().to_vec());
        // A copy sent before comes back as a duplicate, written once.
        match producer.send(record) {
            Ok(_) => Ok(()),
            Err(e) => {
                // A fenced or broken producer is made again next time.
                lock(&self.producers).remove(&(m.topic().to_owned(), m.partition()));
                Err(e)
            }
        }
    }

    /// The named producer of source partition `topic`/`partition`.
    fn producer(&self, topic: &str, partition: u32) -> Result<Arc<Producer>> {
        let key = (topic.to_owned(), partition);
        if let Some(p) = lock(&self.producers).get(&key) {
            return Ok(Arc::clone(p));
        }
        let name = producer_name(self.prefix, &self.group, topic, partition);
        let p = Arc::new(Producer::sparse(
            Arc::clone(&self.broker),
            // Processes sharing the directory may dead-letter the same
            // partition's records: none fences another, and the sequence
            // (the source offset) drops what was sent already.
            ProducerConfig::default()
                .name(name)
                .acks(Acks::All)
                .access_mode(ProducerAccessMode::Shared),
        )?);
        lock(&self.producers).insert(key, Arc::clone(&p));
        Ok(p)
    }
}

/// The producer name of the dead letters of `topic`/`partition` in
/// `group`: readable when it fits the rules of a producer name, else
/// derived from a hash of the three.
fn producer_name(prefix: &str, group: &str, topic: &str, partition: u32) -> String {
    let name = format!("{prefix}.{group}.{topic}.{partition}");
    if crate::dedup::validate_producer_name(&name).is_ok() {
        return name;
    }
    let id = format!("{group}\0{topic}\0{partition}");
    let h = crate::log::crc::crc32c(id.as_bytes());
    let h2 = crate::log::crc::crc32c(&[id.as_bytes(), b"\x01"].concat());
    format!("{prefix}.{h:08x}{h2:08x}.{partition}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_names_are_valid_and_distinct() {
        let long = "g".repeat(249);
        let names = [
            producer_name("dlq", "g", "t", 0),
            producer_name("dlq", "g", "t", 1),
            producer_name("dlq", "g", "u", 0),
            producer_name("dlq", &long, "t", 0),
            producer_name("dlq", &long, "t", 1),
            producer_name("dlq", &long, "u", 0),
            producer_name("share-dlq", "g", "t", 0),
            producer_name("share-dlq", &long, "t", 0),
        ];
        for n in &names {
            assert!(crate::dedup::validate_producer_name(n).is_ok(), "{n}");
        }
        let distinct: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), names.len());
        assert_eq!(names[0], "dlq.g.t.0");
    }
}
