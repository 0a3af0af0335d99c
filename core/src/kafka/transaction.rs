//! [`KafkaTransaction`]: a transaction on a Kafka cluster, Kafka's own,
//! through librdkafka's transactional producer.
//!
//! Records go to the cluster as they are added (the cluster keeps them from
//! `read_committed` readers until the commit); the commit flushes them and
//! writes the commit markers; an abort, or a drop without a commit, writes
//! abort markers. Offsets sent to the transaction are committed for their
//! group with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerGroupMetadata};
use rdkafka::{Offset, TopicPartitionList};

use super::error::from_kafka;
use super::KafkaProducer;
use crate::error::{Error, Result};
use crate::producer::{Record, RecordMetadata};
use crate::sync::lock;

/// A record of a transaction, by the order it was added.
#[derive(Debug)]
enum Slot {
    /// Handed to librdkafka; its delivery report has not come yet.
    Pending,
    /// Its delivery report.
    Done(Result<RecordMetadata>),
    /// librdkafka refused it (the caller got the error): not part of the
    /// transaction.
    Refused,
}

/// The transaction's records, in the order added (several threads may add
/// at once, so a slot is never removed: a refused one is marked).
type Results = Arc<Mutex<Vec<Slot>>>;

/// A transaction of a [`KafkaProducer`] with a transactional id (see
/// [`crate::Transaction`], which holds one on a cluster).
#[derive(Debug)]
pub(crate) struct KafkaTransaction {
    producer: Arc<KafkaProducer>,
    results: Results,
    done: AtomicBool,
}

impl KafkaTransaction {
    /// Begins a transaction of `producer` (Kafka's `beginTransaction`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a transactional id or while
    /// another transaction of the producer is open; [`Error::Closed`];
    /// [`Error::ProducerFenced`].
    pub(crate) fn begin(producer: &Arc<KafkaProducer>) -> Result<KafkaTransaction> {
        if producer.is_closed() {
            return Err(Error::Closed("producer"));
        }
        if producer.config().transactional_id.is_none() {
            return Err(Error::InvalidArgument(
                "transactions need a producer with a transactional_id".into(),
            ));
        }
        if producer.txn_open().swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidArgument(
                "a transaction of this producer is already open".into(),
            ));
        }
        if let Err(e) = producer.txn_begin() {
            producer.txn_open().store(false, Ordering::Release);
            return Err(from_kafka(e, "beginning a transaction"));
        }
        Ok(KafkaTransaction {
            producer: Arc::clone(producer),
            results: Arc::new(Mutex::new(Vec::new())),
            done: AtomicBool::new(false),
        })
    }

    fn check_open(&self) -> Result<()> {
        if self.done.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(
                "the transaction is already committed or aborted".into(),
            ));
        }
        if self.producer.is_closed() {
            return Err(Error::Closed("producer"));
        }
        Ok(())
    }

    /// Sends `record` as part of the transaction.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a record with a `sequence`; as
    /// [`KafkaProducer::send_async`].
    pub(crate) fn send(&self, record: Record) -> Result<()> {
        self.check_open()?;
        if record.sequence.is_some() {
            return Err(Error::InvalidArgument(
                "records of a transaction take no sequence".into(),
            ));
        }
        let i = {
            let mut r = lock(&self.results);
            r.push(Slot::Pending);
            r.len() - 1
        };
        let results = Arc::clone(&self.results);
        let sent = self.producer.send_async(record, move |r| {
            lock(&results)[i] = Slot::Done(r);
        });
        if sent.is_err() {
            lock(&self.results)[i] = Slot::Refused;
        }
        sent
    }

    /// Records added so far.
    pub(crate) fn len(&self) -> usize {
        lock(&self.results)
            .iter()
            .filter(|s| !matches!(s, Slot::Refused))
            .count()
    }

    /// Adds `offsets` (topic, partition, next offset, metadata) for the
    /// group `meta` stands for.
    fn add_offsets(
        &self,
        entries: &[(&str, u32, u64, &str)],
        meta: &ConsumerGroupMetadata,
    ) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for &(topic, partition, offset, metadata) in entries {
            crate::topic::validate_topic_name(topic)?;
            let offset = i64::try_from(offset)
                .map_err(|_| Error::InvalidArgument(format!("offset {offset} is too large")))?;
            let mut e = tpl.add_partition(topic, partition as i32);
            e.set_offset(Offset::Offset(offset))
                .map_err(|e| from_kafka(e, "sending offsets to a transaction"))?;
            e.set_metadata(metadata);
        }
        self.producer
            .txn_send_offsets(&tpl, meta)
            .map_err(|e| from_kafka(e, "sending offsets to a transaction"))
    }

    /// Commits the positions of `consumer` (a consumer of the cluster
    /// with a group) with the transaction.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a consumer without a group; the
    /// cluster's errors.
    pub(crate) fn send_offsets(&self, consumer: &super::KafkaConsumer) -> Result<()> {
        self.check_open()?;
        let (tpl, meta) = consumer.transaction_offsets()?;
        self.producer
            .txn_send_offsets(&tpl, &meta)
            .map_err(|e| from_kafka(e, "sending offsets to a transaction"))
    }

    /// Commits `offsets` (topic, partition, next offset, metadata) for
    /// `group` with the transaction.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty group name; the cluster's
    /// errors.
    pub(crate) fn send_offsets_to(
        &self,
        group: &str,
        offsets: &[(&str, u32, u64, &str)],
    ) -> Result<()> {
        self.check_open()?;
        if group.is_empty() {
            return Err(Error::InvalidArgument("the group name is empty".into()));
        }
        // librdkafka states a group by a consumer's metadata; a consumer
        // that never joins stands for the group by its name alone.
        let stand_in: BaseConsumer = ClientConfig::new()
            .set("group.id", group)
            .create()
            .map_err(|e| from_kafka(e, "sending offsets to a transaction"))?;
        let meta = stand_in.group_metadata().ok_or_else(|| {
            Error::InvalidArgument(format!("no group metadata for group {group:?}"))
        })?;
        self.add_offsets(offsets, &meta)
    }

    /// Ends the transaction here: nothing more may be done with it.
    fn finish(&self) -> bool {
        let first = !self.done.swap(true, Ordering::AcqRel);
        if first {
            self.producer.txn_open().store(false, Ordering::Release);
        }
        first
    }

    /// Commits: the records and offsets become visible together, or, on
    /// an error, none does (the transaction is aborted). Returns each
    /// record's metadata, in the order they were sent.
    ///
    /// # Errors
    /// [`Error::ProducerFenced`]; [`Error::Timeout`]; a record the
    /// cluster refused (the transaction is aborted).
    pub(crate) fn commit(&self) -> Result<Vec<RecordMetadata>> {
        self.check_open()?;
        let committed = self.producer.txn_commit();
        self.finish();
        if let Err(e) = committed {
            if let Err(a) = self.producer.txn_abort() {
                // The cluster aborts it when `transaction.timeout.ms` ends.
                ::log::warn!("aborting a transaction whose commit failed: {a}");
            }
            return Err(from_kafka(e, "committing a transaction"));
        }
        let results = std::mem::take(&mut *lock(&self.results));
        results
            .into_iter()
            .filter_map(|s| match s {
                Slot::Done(r) => Some(r),
                // The commit flushed every record: none is left pending.
                Slot::Pending => Some(Err(Error::Closed("producer"))),
                Slot::Refused => None,
            })
            .collect()
    }

    /// Aborts: nothing of the transaction becomes visible to
    /// `read_committed` readers.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when it was already committed or
    /// aborted; the cluster's errors.
    pub(crate) fn abort(&self) -> Result<()> {
        self.check_open()?;
        self.finish();
        self.producer
            .txn_abort()
            .map_err(|e| from_kafka(e, "aborting a transaction"))
    }
}

impl Drop for KafkaTransaction {
    fn drop(&mut self) {
        if self.finish() && !self.producer.is_closed() {
            let _ = self.producer.txn_abort();
        }
    }
}
