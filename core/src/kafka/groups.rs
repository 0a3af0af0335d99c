//! [`KafkaBroker::describe_group`]: a consumer group of the cluster as a
//! [`GroupInfo`], from the group coordinator's description (members and
//! their assignments) and its committed offsets.

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{Offset, TopicPartitionList};

use super::error::from_kafka;
use super::KafkaBroker;
use crate::error::{Error, Result};
use crate::offsets::CommittedOffset;
use crate::{GroupInfo, GroupMember};

/// A bounds-checked reader of big-endian protocol fields.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<&'a str> {
        let n = usize::try_from(self.i16()?).ok()?;
        std::str::from_utf8(self.take(n)?).ok()
    }
}

/// The partitions of a member's assignment in Kafka's consumer protocol
/// (`ConsumerProtocolAssignment`: a version, then per topic its name and
/// partition numbers, then user data, ignored), sorted; `None` when the
/// bytes are not one.
pub(super) fn assigned_partitions(bytes: &[u8]) -> Option<Vec<(String, u32)>> {
    let mut f = Fields(bytes);
    let _version = f.i16()?;
    let topics = f.i32()?;
    let mut out = Vec::new();
    // A negative count is a null array.
    for _ in 0..topics.max(0) {
        let topic = f.string()?;
        let partitions = f.i32()?;
        for _ in 0..partitions.max(0) {
            out.push((topic.to_owned(), u32::try_from(f.i32()?).ok()?));
        }
    }
    out.sort();
    Some(out)
}

impl KafkaBroker {
    /// Consumer group `name`: its members, the partitions each owns, and
    /// its committed offsets on every topic of the cluster. A group the
    /// cluster does not know has no members and no offsets. The
    /// generation is not part of Kafka's group description: it is 0.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name; the cluster's errors.
    pub fn describe_group(&self, name: &str) -> Result<GroupInfo> {
        if name.is_empty() {
            return Err(Error::InvalidArgument("the group name is empty".into()));
        }
        let list = self
            .meta
            .fetch_group_list(Some(name), self.timeout)
            .map_err(|e| from_kafka(e, "describing a consumer group"))?;
        let mut members: Vec<GroupMember> = list
            .groups()
            .iter()
            .filter(|g| g.name() == name)
            .flat_map(rdkafka::groups::GroupInfo::members)
            .map(|m| GroupMember {
                id: m.id().to_owned(),
                partitions: m
                    .assignment()
                    .and_then(assigned_partitions)
                    .unwrap_or_default(),
            })
            .collect();
        members.sort_by(|a, b| a.id.cmp(&b.id));

        let md = self
            .meta
            .fetch_metadata(None, self.timeout)
            .map_err(|e| from_kafka(e, "describing a consumer group"))?;
        let mut tpl = TopicPartitionList::new();
        for t in md.topics() {
            if t.error().is_some() || t.name().starts_with("__") {
                continue;
            }
            for p in t.partitions() {
                tpl.add_partition(t.name(), p.id());
            }
        }
        let reader: BaseConsumer = self
            .client_config(&[("group.id", name.to_owned())])
            .create()
            .map_err(|e| from_kafka(e, "describing a consumer group"))?;
        let offsets = reader
            .committed_offsets(tpl, self.timeout)
            .map_err(|e| from_kafka(e, "describing a consumer group"))?;
        let mut committed: Vec<(String, u32, CommittedOffset)> = offsets
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) if o >= 0 => Some((
                    e.topic().to_owned(),
                    e.partition() as u32,
                    CommittedOffset {
                        offset: o as u64,
                        metadata: e.metadata().to_owned(),
                        timestamp: 0,
                    },
                )),
                _ => None,
            })
            .collect();
        committed.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        Ok(GroupInfo {
            name: name.to_owned(),
            generation: 0,
            members,
            committed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut b = vec![0, 1];
        b.extend((topics.len() as i32).to_be_bytes());
        for (t, parts) in topics {
            b.extend((t.len() as i16).to_be_bytes());
            b.extend(t.as_bytes());
            b.extend((parts.len() as i32).to_be_bytes());
            for p in *parts {
                b.extend(p.to_be_bytes());
            }
        }
        b.extend((-1i32).to_be_bytes()); // null user data
        b
    }

    #[test]
    fn an_assignment_is_read_and_a_damaged_one_refused() {
        let bytes = assignment(&[("orders", &[2, 0]), ("audit", &[1])]);
        assert_eq!(
            assigned_partitions(&bytes),
            Some(vec![
                ("audit".to_owned(), 1),
                ("orders".to_owned(), 0),
                ("orders".to_owned(), 2)
            ])
        );
        // Cut anywhere before the user data: refused, never a panic.
        for cut in 0..bytes.len() - 4 {
            assert_eq!(assigned_partitions(&bytes[..cut]), None, "cut at {cut}");
        }
        assert_eq!(assigned_partitions(&bytes[..5]), None);
        assert_eq!(assigned_partitions(&[0, 1, 0, 0, 0, 0]), Some(Vec::new()));
        let negative = assignment(&[("t", &[-1])]);
        assert_eq!(assigned_partitions(&negative), None);
        let huge_count = [0, 1, 0x7f, 0xff, 0xff, 0xff];
        assert_eq!(assigned_partitions(&huge_count), None);
    }
}
