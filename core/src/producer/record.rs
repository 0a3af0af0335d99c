//! Records to send and where they were written.

use std::sync::Arc;

use crate::log::batch::Header;

/// A record to send, owning its data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// Destination topic.
    pub topic: String,
    /// Explicit partition; otherwise chosen by the producer's partitioner.
    pub partition: Option<u32>,
    /// Optional key; records with the same key go to the same partition.
    pub key: Option<Vec<u8>>,
    /// Optional value (`None` is a tombstone).
    pub value: Option<Vec<u8>>,
    /// Headers, in order; names may repeat.
    pub headers: Vec<Header>,
    /// Create time in ms since the epoch; now when `None`.
    pub timestamp: Option<i64>,
    /// The application's own sequence number (named producers, Pulsar's
    /// sequence id): a record whose sequence is at or below the last one
    /// written to its partition by this producer is dropped as a duplicate.
    pub sequence: Option<i64>,
}

impl Record {
    /// An empty record for `topic`.
    pub fn new(topic: impl Into<String>) -> Record {
        Record {
            topic: topic.into(),
            ..Record::default()
        }
    }

    /// Delivers the record at `ms_since_epoch` (wall clock): until then it
    /// waits in the internal topic `__delayed` (see [`crate::delayed`]).
    /// Sets the header [`crate::delayed::DELIVER_AT_HEADER`].
    pub fn deliver_at(mut self, ms_since_epoch: i64) -> Self {
        self.headers
            .push(crate::delayed::deliver_at_header(ms_since_epoch));
        self
    }

    /// Delivers the record once `delay` has passed (see
    /// [`deliver_at`](Self::deliver_at)).
    pub fn delay(self, delay: std::time::Duration) -> Self {
        self.deliver_at(crate::delayed::due_in(delay))
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the value.
    pub fn value(mut self, value: impl Into<Vec<u8>>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Sets the partition.
    pub fn partition(mut self, partition: u32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Adds a header.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push(Header::new(key, value));
        self
    }

    /// Sets the create timestamp (ms since the epoch).
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }

    /// Sets the application's sequence number.
    pub fn sequence(mut self, sequence: i64) -> Self {
        self.sequence = Some(sequence);
        self
    }

    /// A borrowed view of this record.
    pub fn as_borrowed(&self) -> BorrowedRecord<'_> {
        BorrowedRecord {
            topic: &self.topic,
            partition: self.partition,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: &self.headers,
            timestamp: self.timestamp,
            sequence: self.sequence,
        }
    }
}

/// A record to send, borrowing its data (no copies before the append).
#[derive(Debug, Clone, Copy, Default)]
pub struct BorrowedRecord<'a> {
    /// Destination topic.
    pub topic: &'a str,
    /// Explicit partition.
    pub partition: Option<u32>,
    /// Optional key.
    pub key: Option<&'a [u8]>,
    /// Optional value.
    pub value: Option<&'a [u8]>,
    /// Headers.
    pub headers: &'a [Header],
    /// Create time in ms since the epoch; now when `None`.
    pub timestamp: Option<i64>,
    /// The application's own sequence number (see [`Record::sequence`]).
    pub sequence: Option<i64>,
}

impl BorrowedRecord<'_> {
    /// An owned copy.
    pub fn to_record(&self) -> Record {
        Record {
            topic: self.topic.to_owned(),
            partition: self.partition,
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.map(<[u8]>::to_vec),
            headers: self.headers.to_vec(),
            timestamp: self.timestamp,
            sequence: self.sequence,
        }
    }
}

/// Where a record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: u32,
    /// The record's offset in the partition; [`RecordMetadata::UNKNOWN_OFFSET`]
    /// when not known (a fire-and-forget `acks=0` send, or a duplicate whose
    /// original is older than the dedup window).
    pub offset: u64,
    /// The record's timestamp (ms since the epoch).
    pub timestamp: i64,
    /// The record was a duplicate of one already written (by sequence) and
    /// was dropped; `offset` is the original's when still known.
    pub duplicate: bool,
}

impl RecordMetadata {
    /// The `offset` of a record whose offset is not known.
    pub const UNKNOWN_OFFSET: u64 = u64::MAX;

    /// The offset, if known.
    pub fn known_offset(&self) -> Option<u64> {
        (self.offset != Self::UNKNOWN_OFFSET).then_some(self.offset)
    }

    /// The unique id of the record written (of the original, for a
    /// duplicate), when its offset is known.
    pub fn id(&self) -> Option<crate::MessageId> {
        self.known_offset()
            .map(|o| crate::MessageId::new(&*self.topic, self.partition, o))
    }
}
