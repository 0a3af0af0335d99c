//! Producers: records, partition choice and durability levels.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::broker::BrokerInner;
use crate::error::{Error, Result};
use crate::log::batch::{Header, ProducerFields, RecordRef};
use crate::log::now_ms;

/// How durable a record must be before `send` returns (Kafka's `acks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    /// `acks=0`: do not wait for anything. Today the append is still done
    /// before `send` returns, so this behaves like [`Acks::One`].
    Zero,
    /// `acks=1` (default): return once the record is in the memory map and
    /// visible to consumers. Survives a crash of this process, not a power
    /// loss or kernel crash.
    #[default]
    One,
    /// `acks=all`: return once the record is flushed to disk (msync, which
    /// syncs like fdatasync). Survives power loss. Concurrent senders share
    /// one flush (group commit).
    All,
}

impl Acks {
    /// From Kafka's numeric form: 0, 1, or -1 for "all".
    pub fn from_i32(v: i32) -> Result<Acks> {
        match v {
            0 => Ok(Acks::Zero),
            1 => Ok(Acks::One),
            -1 => Ok(Acks::All),
            _ => Err(Error::InvalidArgument(format!(
                "acks must be 0, 1 or -1 (all), got {v}"
            ))),
        }
    }
}

/// Settings of a producer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerConfig {
    /// Durability level of every send.
    pub acks: Acks,
}

impl ProducerConfig {
    /// Sets the durability level.
    pub fn acks(mut self, acks: Acks) -> Self {
        self.acks = acks;
        self
    }
}

/// A record to send, owning its data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// Destination topic.
    pub topic: String,
    /// Explicit partition; otherwise chosen from the key, or round-robin.
    pub partition: Option<u32>,
    /// Optional key; records with the same key go to the same partition.
    pub key: Option<Vec<u8>>,
    /// Optional value (`None` is a tombstone).
    pub value: Option<Vec<u8>>,
    /// Headers, in order; names may repeat.
    pub headers: Vec<Header>,
    /// Create time in ms since the epoch; now when `None`.
    pub timestamp: Option<i64>,
}

impl Record {
    /// An empty record for `topic`.
    pub fn new(topic: impl Into<String>) -> Record {
        Record {
            topic: topic.into(),
            ..Record::default()
        }
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

    /// A borrowed view of this record.
    pub fn as_borrowed(&self) -> BorrowedRecord<'_> {
        BorrowedRecord {
            topic: &self.topic,
            partition: self.partition,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: &self.headers,
            timestamp: self.timestamp,
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
}

/// Where a record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: u32,
    /// The record's offset in the partition.
    pub offset: u64,
    /// The record's timestamp (ms since the epoch).
    pub timestamp: i64,
}

/// Kafka's murmur2 hash (the 32-bit MurmurHash2 variant with seed
/// `0x9747b28c` used by Kafka's default partitioner).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for `key` among
/// `partitions`: `(murmur2(key) & 0x7fffffff) % partitions`.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions
}

/// Sends records to the topics of one data directory.
#[derive(Debug)]
pub struct Producer {
    broker: Arc<BrokerInner>,
    config: ProducerConfig,
    round_robin: AtomicU32,
}

impl Producer {
    pub(crate) fn new(broker: Arc<BrokerInner>, config: ProducerConfig) -> Producer {
        Producer {
            broker,
            config,
            round_robin: AtomicU32::new(0),
        }
    }

    /// This producer's settings.
    pub fn config(&self) -> &ProducerConfig {
        &self.config
    }

    /// Sends one record and returns where it was written, once it is as
    /// durable as the producer's [`Acks`] level asks.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`],
    /// [`Error::MessageTooLarge`], [`Error::Closed`], I/O errors. Nothing is
    /// written when an error is returned before the append.
    pub fn send(&self, record: Record) -> Result<RecordMetadata> {
        self.send_borrowed(&record.as_borrowed())
    }

    /// Like [`Producer::send`], without copying the record's data first.
    pub fn send_borrowed(&self, r: &BorrowedRecord<'_>) -> Result<RecordMetadata> {
        let topic = self.broker.topic(r.topic)?;
        let parts = topic.partitions();
        let count = parts.len() as u32;
        let partition = match (r.partition, r.key) {
            (Some(p), _) => p,
            (None, Some(key)) => partition_for_key(key, count),
            (None, None) => self.round_robin.fetch_add(1, Ordering::Relaxed) % count,
        };
        let log = parts
            .get(partition as usize)
            .ok_or_else(|| Error::UnknownPartition {
                topic: r.topic.to_owned(),
                partition,
                count,
            })?;
        let timestamp = r.timestamp.unwrap_or_else(now_ms);
        let rec = RecordRef {
            key: r.key,
            value: r.value,
            headers: r.headers,
            timestamp,
        };
        let appended = log.append(std::slice::from_ref(&rec), ProducerFields::default())?;
        if self.config.acks == Acks::All {
            log.flush_to(appended.base_offset + 1)?;
        }
        Ok(RecordMetadata {
            topic: Arc::clone(log.topic()),
            partition,
            offset: appended.base_offset,
            timestamp,
        })
    }

    /// Waits until every record sent so far is as durable as the producer's
    /// [`Acks`] level promises. Sends complete before they return today, so
    /// this only checks that the data directory is still open.
    pub fn flush(&self) -> Result<()> {
        self.broker.check_open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's own vectors (`UtilsTest.testMurmur2`).
    #[test]
    fn murmur2_matches_kafka() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key), want, "{:?}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn acks_from_kafka_numbers() {
        assert_eq!(Acks::from_i32(0).unwrap(), Acks::Zero);
        assert_eq!(Acks::from_i32(1).unwrap(), Acks::One);
        assert_eq!(Acks::from_i32(-1).unwrap(), Acks::All);
        assert!(Acks::from_i32(2).is_err());
    }
}
