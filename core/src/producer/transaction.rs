//! Transactions of a producer with a transactional id: records to several
//! topics and partitions, and consumer offsets, that become visible all
//! together at the commit or not at all.
//!
//! The records are buffered here (up to `max_transaction_bytes`) and
//! written only by the commit, through the data directory's coordinator
//! (`txn/mod.rs`): readers never wait behind an open transaction, and an
//! abort has nothing to undo.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{Inner, Producer, Record, RecordMetadata};
use crate::consumer::Consumer;
use crate::dedup::NamedIdentity;
use crate::error::{Error, Result};
use crate::log::batch::{self, RecordRef};
use crate::log::{now_ms, PartitionLog};
use crate::sync::lock;
use crate::txn::{Commit, OffsetRecord};

/// A producer's transactional identity: its transactional id, the id and
/// epoch the registry gave it (a newer producer with the same
/// transactional id fences this one), and whether a transaction is open.
#[derive(Debug)]
pub(crate) struct TxnIdentity {
    pub(crate) transactional_id: String,
    pub(crate) ident: Arc<NamedIdentity>,
    pub(crate) epoch: i16,
    open: AtomicBool,
}

impl TxnIdentity {
    pub(crate) fn new(transactional_id: String, ident: Arc<NamedIdentity>, epoch: i16) -> Self {
        TxnIdentity {
            transactional_id,
            ident,
            epoch,
            open: AtomicBool::new(false),
        }
    }

    /// The transactional identity of a producer made with `config`, if it
    /// has a transactional id: a new epoch, which fences older producers
    /// with that id. Transactions need exclusive mode.
    pub(crate) fn acquire(
        broker: &crate::broker::BrokerInner,
        config: &super::ProducerConfig,
    ) -> Result<Option<Self>> {
        let Some(id) = &config.transactional_id else {
            return Ok(None);
        };
        broker.coordinator()?;
        let (ident, epoch) = broker.registry()?.acquire_transactional(id)?;
        Ok(Some(TxnIdentity::new(id.clone(), ident, epoch)))
    }

    fn check_fenced(&self) -> Result<()> {
        let current = self.ident.current_epoch();
        if current != self.epoch {
            return Err(Error::ProducerFenced {
                producer_id: self.ident.id,
                epoch: self.epoch,
                current_epoch: current,
            });
        }
        Ok(())
    }
}

/// A partition's log and the indexes of the records going there.
type PartRecords = (Arc<PartitionLog>, Vec<usize>);

/// One buffered record and where it goes.
struct Buffered {
    log: Arc<PartitionLog>,
    record: Record,
    timestamp: i64,
}

#[derive(Default)]
struct Buffer {
    records: Vec<Buffered>,
    bytes: usize,
    offsets: Vec<OffsetRecord>,
    /// Committed, aborted or timed out: nothing more may be done.
    done: bool,
}

/// An open transaction (see [`Producer::begin_transaction`]). Methods take
/// `&self`: a transaction may be shared between threads. Dropping it
/// without [`Transaction::commit`] aborts it.
///
/// On a Kafka cluster it is Kafka's transaction: records go to the cluster
/// as they are added (hidden from `read_committed` readers until the
/// commit), and the producer's `acks` is `all` (see
/// [`crate::kafka::KafkaProducer`]).
pub struct Transaction(Txn);

/// A transaction of either backend.
#[derive(Debug)]
enum Txn {
    /// On a data directory: buffered here, written by the commit.
    Dir(DirTransaction),
    /// On a Kafka cluster.
    #[cfg(feature = "kafka")]
    Kafka(crate::kafka::KafkaTransaction),
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A transaction on a data directory.
struct DirTransaction {
    inner: Arc<Inner>,
    buffer: Mutex<Buffer>,
    started: Instant,
}

impl std::fmt::Debug for DirTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = lock(&self.buffer);
        f.debug_struct("Transaction")
            .field("records", &b.records.len())
            .field("bytes", &b.bytes)
            .field("offsets", &b.offsets.len())
            .field("done", &b.done)
            .finish_non_exhaustive()
    }
}

impl Producer {
    /// Begins a transaction (Kafka's `beginTransaction`). The producer needs
    /// a [`transactional_id`](super::ProducerConfig::transactional_id); it
    /// runs one transaction at a time.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a transactional id, while another
    /// transaction of this producer is open;
    /// [`Error::ProducerFenced`] when a newer producer took the
    /// transactional id; [`Error::Closed`] (the producer or its broker).
    pub fn begin_transaction(&self) -> Result<Transaction> {
        on_cluster!(self, k => Ok(Transaction(Txn::Kafka(crate::kafka::KafkaTransaction::begin(k)?))));
        let inner = self.inner();
        if inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("producer"));
        }
        inner.broker.check_open()?;
        let txn = inner.txn_identity()?;
        txn.check_fenced()?;
        if txn.open.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidArgument(
                "a transaction of this producer is already open".into(),
            ));
        }
        Ok(Transaction(Txn::Dir(DirTransaction {
            inner: Arc::clone(inner),
            buffer: Mutex::new(Buffer::default()),
            started: Instant::now(),
        })))
    }

    /// The transactional id, if the producer has one.
    pub fn transactional_id(&self) -> Option<&str> {
        on_cluster!(self, k => k.config().transactional_id.as_deref());
        self.inner()
            .txn
            .as_ref()
            .map(|t| t.transactional_id.as_str())
    }
}

impl Inner {
    fn txn_identity(&self) -> Result<&TxnIdentity> {
        self.txn.as_ref().ok_or_else(|| {
            Error::InvalidArgument("transactions need a producer with a transactional_id".into())
        })
    }
}

impl DirTransaction {
    /// The open buffer, or why it cannot be used: done, fenced, closed, or
    /// open longer than `transaction_timeout_ms` (which aborts it).
    fn open_buffer(&self) -> Result<std::sync::MutexGuard<'_, Buffer>> {
        let mut b = lock(&self.buffer);
        if b.done {
            return Err(Error::InvalidArgument(
                "the transaction is already committed or aborted".into(),
            ));
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("producer"));
        }
        let timeout = self.inner.config.transaction_timeout_ms;
        if timeout > 0 && self.started.elapsed().as_millis() > u128::from(timeout) {
            self.finish(&mut b);
            return Err(Error::Timeout(timeout));
        }
        self.inner.txn_identity()?.check_fenced()?;
        Ok(b)
    }

    /// Ends the transaction: nothing more is done with it.
    fn finish(&self, b: &mut Buffer) {
        if !b.done {
            b.done = true;
            b.records = Vec::new();
            b.offsets = Vec::new();
            if let Some(t) = &self.inner.txn {
                t.open.store(false, Ordering::Release);
            }
        }
    }

    /// [`Transaction::send`] on a directory: buffered, written by the commit.
    fn send(&self, record: Record) -> Result<()> {
        // A delayed record waits in `__delayed` as part of the transaction:
        // moved only if it commits (the mover reads committed records).
        let record = match crate::delayed::redirect(&self.inner.broker, &record.as_borrowed())? {
            Some(d) => d,
            None => record,
        };
        let mut b = self.open_buffer()?;
        if record.sequence.is_some() {
            return Err(Error::InvalidArgument(
                "records of a transaction take no sequence".into(),
            ));
        }
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let rref = RecordRef {
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &record.headers,
            timestamp,
        };
        let size = batch::batch_len(std::slice::from_ref(&rref));
        let borrowed = record.as_borrowed();
        let route = self.inner.route(&borrowed, || size)?;
        let log = Arc::clone(route.log()?);
        drop(route);
        if size > log.max_batch_bytes() {
            return Err(Error::MessageTooLarge {
                size,
                max: log.max_batch_bytes(),
            });
        }
        let max = self.inner.config.max_transaction_bytes;
        if b.bytes + size > max {
            return Err(Error::TransactionTooLarge {
                size: b.bytes + size,
                max,
            });
        }
        b.bytes += size;
        b.records.push(Buffered {
            log,
            record,
            timestamp,
        });
        Ok(())
    }

    /// [`Transaction::send_offsets`] on a directory.
    fn send_offsets(&self, consumer: &Consumer) -> Result<()> {
        let (group, member, offsets) = consumer.offsets_for_transaction()?;
        let entries: Vec<(&str, u32, u64, &str)> = offsets
            .iter()
            .map(|(t, p, o)| (t.as_str(), *p, *o, ""))
            .collect();
        self.add_offsets(&group, member, &entries)
    }

    /// [`Transaction::send_offsets_to`] on a directory.
    fn send_offsets_to(&self, group: &str, offsets: &[(&str, u32, u64, &str)]) -> Result<()> {
        self.add_offsets(group, None, offsets)
    }

    /// [`Transaction::send_offsets_to`], checked at the commit against
    /// `member`'s ownership of the partitions when given.
    fn add_offsets(
        &self,
        group: &str,
        member: Option<String>,
        offsets: &[(&str, u32, u64, &str)],
    ) -> Result<()> {
        let mut b = self.open_buffer()?;
        if group.is_empty() {
            return Err(Error::InvalidArgument("the group name is empty".into()));
        }
        let broker = &self.inner.broker;
        let max = broker.max_commit_metadata_bytes();
        let mut checked = Vec::with_capacity(offsets.len());
        for &(topic, partition, offset, metadata) in offsets {
            if metadata.len() > max {
                return Err(Error::InvalidArgument(format!(
                    "commit metadata of {topic}/{partition} is {} bytes, more than max_commit_metadata_bytes ({max})",
                    metadata.len()
                )));
            }
            let log = broker.topic(topic)?.partition(partition)?;
            if offset > log.end_offset() {
                return Err(Error::OffsetOutOfRange {
                    topic: topic.to_owned(),
                    partition,
                    offset,
                    start: log.start_offset(),
                    end: log.end_offset(),
                });
            }
            checked.push(OffsetRecord {
                group: group.to_owned(),
                topic: topic.to_owned(),
                partition,
                offset,
                metadata: metadata.to_owned(),
                member: member.clone(),
            });
        }
        for o in checked {
            b.offsets
                .retain(|x| (&x.group, &x.topic, x.partition) != (&o.group, &o.topic, o.partition));
            b.offsets.push(o);
        }
        Ok(())
    }

    /// [`Transaction::len`] on a directory.
    fn len(&self) -> usize {
        lock(&self.buffer).records.len()
    }

    /// [`Transaction::commit`] on a directory, through its coordinator.
    fn commit(self) -> Result<Vec<RecordMetadata>> {
        let mut b = self.open_buffer()?;
        let records = std::mem::take(&mut b.records);
        let offsets = std::mem::take(&mut b.offsets);
        self.finish(&mut b);
        drop(b);
        if records.is_empty() && offsets.is_empty() {
            return Ok(Vec::new());
        }
        let txn = self.inner.txn_identity()?;
        // Grouped by partition, in (topic, partition) order: the order in
        // which the coordinator takes their locks.
        let mut by_part: BTreeMap<(Arc<str>, u32), PartRecords> = BTreeMap::new();
        for (i, r) in records.iter().enumerate() {
            let key = (Arc::clone(r.log.topic()), r.log.partition());
            by_part
                .entry(key)
                .or_insert_with(|| (Arc::clone(&r.log), Vec::new()))
                .1
                .push(i);
        }
        let parts: Vec<(Arc<PartitionLog>, Vec<RecordRef<'_>>)> = by_part
            .values()
            .map(|(log, idx)| {
                let refs = idx
                    .iter()
                    .map(|&i| {
                        let r = &records[i];
                        RecordRef {
                            key: r.record.key.as_deref(),
                            value: r.record.value.as_deref(),
                            headers: &r.record.headers,
                            timestamp: r.timestamp,
                        }
                    })
                    .collect();
                (Arc::clone(log), refs)
            })
            .collect();
        let firsts = self.inner.broker.coordinator()?.commit(
            &self.inner.broker,
            Commit {
                transactional_id: &txn.transactional_id,
                identity: &txn.ident,
                producer_id: txn.ident.id,
                epoch: txn.epoch,
                parts,
                offsets,
                sync: self.inner.config.acks == super::Acks::All,
            },
        )?;
        let mut out: Vec<Option<RecordMetadata>> = vec![None; records.len()];
        for ((log, idx), first) in by_part.values().zip(firsts) {
            for (k, &i) in idx.iter().enumerate() {
                out[i] = Some(RecordMetadata {
                    topic: Arc::clone(log.topic()),
                    partition: log.partition(),
                    offset: first + k as u64,
                    timestamp: records[i].timestamp,
                    duplicate: false,
                });
            }
        }
        let bytes = records
            .iter()
            .map(|r| r.record.value.as_ref().map_or(0, Vec::len) as u64)
            .sum();
        self.inner.stats.written(records.len() as u64, bytes);
        Ok(out.into_iter().flatten().collect())
    }

    /// [`Transaction::abort`] on a directory: the buffer is dropped.
    fn abort(self) -> Result<()> {
        let mut b = lock(&self.buffer);
        if b.done {
            return Err(Error::InvalidArgument(
                "the transaction is already committed or aborted".into(),
            ));
        }
        self.finish(&mut b);
        Ok(())
    }
}

impl Drop for DirTransaction {
    fn drop(&mut self) {
        let mut b = lock(&self.buffer);
        self.finish(&mut b);
    }
}

/// Forwards a call to the transaction's backend.
macro_rules! forward {
    ($self:ident, $t:ident => $e:expr) => {
        match &$self.0 {
            Txn::Dir($t) => $e,
            #[cfg(feature = "kafka")]
            Txn::Kafka($t) => $e,
        }
    };
}

impl Transaction {
    /// Adds `record` to the transaction. Its partition is chosen now (as
    /// by [`Producer::send`]); on a directory it is written at the commit,
    /// on a cluster sent now.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`],
    /// [`Error::MessageTooLarge`]; [`Error::TransactionTooLarge`] past
    /// `max_transaction_bytes` (the record is not added; the transaction
    /// stays open); [`Error::InvalidArgument`] for a record with a
    /// `sequence` (transactions do not use them); [`Error::Timeout`] past
    /// `transaction_timeout_ms` (the transaction is aborted);
    /// [`Error::ProducerFenced`].
    pub fn send(&self, record: Record) -> Result<()> {
        forward!(self, t => t.send(record))
    }

    /// Adds the positions of `consumer` (the next offset of every partition
    /// it reads, what [`Consumer::commit`] would commit) to the
    /// transaction: they are committed for its group with the records
    /// (Kafka's `sendOffsetsToTransaction`), so that consume-transform-
    /// produce runs exactly once. When the consumer is a group member, the
    /// commit fails with [`Error::CommitFailed`] (and writes nothing) if a
    /// rebalance took one of those partitions from it meanwhile: another
    /// member reads them now. The consumer reads the same directory or
    /// cluster as the producer.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a consumer without a group, or of
    /// the other backend; as [`Transaction::send`].
    pub fn send_offsets(&self, consumer: &Consumer) -> Result<()> {
        match &self.0 {
            Txn::Dir(t) => t.send_offsets(consumer),
            #[cfg(feature = "kafka")]
            Txn::Kafka(t) => t.send_offsets(consumer.cluster_consumer().ok_or_else(|| {
                Error::InvalidArgument(
                    "the consumer reads a data directory, the transaction is a cluster's".into(),
                )
            })?),
        }
    }

    /// Adds `(topic, partition, offset, metadata)` entries to commit for
    /// consumer group `group` with the transaction (`offset`: the next
    /// offset to read). A later entry for the same group and partition
    /// replaces an earlier one.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`],
    /// [`Error::OffsetOutOfRange`] for an offset past the partition's end;
    /// [`Error::InvalidArgument`] for an empty group name or metadata
    /// longer than `max_commit_metadata_bytes`; as [`Transaction::send`].
    pub fn send_offsets_to(&self, group: &str, offsets: &[(&str, u32, u64, &str)]) -> Result<()> {
        forward!(self, t => t.send_offsets_to(group, offsets))
    }

    /// Records added so far.
    pub fn len(&self) -> usize {
        forward!(self, t => t.len())
    }

    /// Whether no record was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Commits: every record and offset becomes visible together, or, on an
    /// error, none does. With `acks=all` the commit is on disk when it
    /// returns (on a cluster: replicated). Returns each record's metadata,
    /// in the order they were sent.
    ///
    /// # Errors
    /// [`Error::ProducerFenced`]; [`Error::Timeout`] past
    /// `transaction_timeout_ms`; what writing returns (a full disk, a
    /// poisoned partition, [`Error::TransactionTooLarge`] for a partition's
    /// part larger than a segment). The transaction is aborted then (the
    /// records are not written), except for an error committing the
    /// offsets after the records were committed: the offsets are committed
    /// again at the next open.
    pub fn commit(self) -> Result<Vec<RecordMetadata>> {
        match self.0 {
            Txn::Dir(t) => t.commit(),
            #[cfg(feature = "kafka")]
            Txn::Kafka(t) => t.commit(),
        }
    }

    /// Aborts: nothing of the transaction is written (on a cluster:
    /// nothing becomes visible to `read_committed` readers).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when it was already committed or aborted.
    pub fn abort(self) -> Result<()> {
        match self.0 {
            Txn::Dir(t) => t.abort(),
            #[cfg(feature = "kafka")]
            Txn::Kafka(t) => t.abort(),
        }
    }
}
