//! Producers: send modes, partition choice, batching, compression,
//! idempotence, interceptors and stats.
//!
//! Three ways to send, as in Kafka and RocketMQ:
//! - [`Producer::send`] blocks until the record is as durable as `acks`
//!   asks and returns its [`RecordMetadata`];
//! - [`Producer::send_async`] returns at once; the record joins its
//!   partition's batch (the accumulator) and a callback reports the outcome,
//!   in send order per partition;
//! - with [`Acks::Zero`], `send` is fire-and-forget.
//!
//! Batches are appended by the sending thread when they fill (`batch_size`)
//! or, with `linger_ms`, by one background thread per producer, which also
//! runs the shared flushes (group commit) of `acks=all` asynchronous sends.

/// Returns from the calling method with `$e` (`$k` the cluster's
/// producer) when the producer writes to a Kafka cluster.
macro_rules! on_cluster {
    ($self:ident, $k:ident => $e:expr) => {
        #[cfg(feature = "kafka")]
        if let $crate::producer::Backend::Kafka($k) = &$self.backend {
            return $e;
        }
    };
}

mod accumulator;
mod config;
mod identity;
mod interceptor;
mod numbering;
mod partitioner;
mod record;
mod resume;
mod route;
mod send_many;
mod stats;
mod transaction;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::broker::BrokerInner;
use crate::dedup::Idempotence;
use crate::error::{Error, Result};
use crate::log::batch::{self, EncodedRecords, ProducerFields, RecordRef, SectionInfo};
use crate::log::compression::{compress_records, Compression, MAX_UNCOMPRESSED_LEN};
use crate::log::{now_ms, Appended, BatchSource, PartitionLog, UNKNOWN_OFFSET};
use crate::sync;
use crate::sync::lock;
use accumulator::{AccState, Done};
use stats::Counters;

pub use config::{Acks, ProducerAccessMode, ProducerConfig};
use identity::Identity;
pub use interceptor::ProducerInterceptor;
pub use partitioner::{murmur2, partition_for_key, Partitioner, Selector};
pub use record::{BorrowedRecord, Record, RecordMetadata};
pub(crate) use route::forget_cached_topic;
pub use stats::ProducerStats;
pub use transaction::Transaction;
use transaction::TxnIdentity;

/// A delivery report callback of [`Producer::send_async`].
pub type DeliveryCallback = Box<dyn FnOnce(Result<RecordMetadata>) + Send + 'static>;

/// Sends records to the topics of one data directory.
///
/// `Producer` is `Send + Sync`: share it between threads behind an `Arc`.
/// Dropping it flushes what is pending (see [`Producer::close`]).
pub struct Producer {
    backend: Backend,
}

/// What a producer writes to.
enum Backend {
    /// A data directory.
    Dir(Arc<Inner>),
    /// A Kafka cluster.
    #[cfg(feature = "kafka")]
    Kafka(Arc<crate::kafka::KafkaProducer>),
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        on_cluster!(self, k => k.fmt(f));
        f.debug_struct("Producer")
            .field("config", &self.inner().config)
            .field("identity", &self.inner().identity)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    /// This producer, for the background thread.
    me: std::sync::Weak<Inner>,
    broker: Arc<BrokerInner>,
    config: ProducerConfig,
    identity: Option<Identity>,
    chooser: partitioner::PartitionChooser,
    /// Partitions avoided after a fault.
    avoided: partitioner::Avoided,
    acc: Mutex<AccState>,
    /// Signalled when buffered bytes are released or async work completes.
    space: Condvar,
    /// Wakes the background thread.
    work: Condvar,
    /// Records in unsent batches (a cheap check for the direct send path).
    pending: AtomicUsize,
    /// Records accepted by an asynchronous send whose delivery report has
    /// not run yet ([`Producer::queued`]).
    queued: AtomicUsize,
    completions: Mutex<std::collections::VecDeque<Done>>,
    firing: Mutex<()>,
    stats: Counters,
    closed: AtomicBool,
    sender: Mutex<Option<JoinHandle<()>>>,
    /// The application sequences written since [`Producer::next_sequence`]
    /// was first called (`None` before): its floor is handed to the
    /// partitions, which forget what is below it.
    written: Mutex<Option<crate::seqranges::SeqRanges>>,
    /// With a transactional id: its identity.
    txn: Option<TxnIdentity>,
    /// Application sequences may come in any order: a record is a
    /// duplicate when its sequence was written, not when it is at or below
    /// the last one (the engine's own producers of dead letters and delayed
    /// records, whose sequences are source offsets taken out of order).
    sparse: bool,
}

thread_local! {
    /// Set while this thread runs delivery callbacks.
    static IN_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Counts one failed record in the producer's stats when dropped: on every
/// early return of a send. Forgotten once the send succeeds.
struct CountsFailure<'a>(&'a Counters);

impl Drop for CountsFailure<'_> {
    fn drop(&mut self) {
        self.0.errors(1);
    }
}

impl Producer {
    pub(crate) fn new(broker: Arc<BrokerInner>, config: ProducerConfig) -> Result<Producer> {
        Producer::with_sequences(broker, config, false)
    }

    /// A named producer whose application sequences may come in any order
    /// (see `Inner::sparse`): the engine's own re-publishers.
    pub(crate) fn sparse(broker: Arc<BrokerInner>, config: ProducerConfig) -> Result<Producer> {
        Producer::with_sequences(broker, config, true)
    }

    fn with_sequences(
        broker: Arc<BrokerInner>,
        config: ProducerConfig,
        sparse: bool,
    ) -> Result<Producer> {
        config.validate()?;
        broker.ensure_writer("producer")?;
        let identity = Identity::acquire(&broker, &config)?;
        let txn = TxnIdentity::acquire(&broker, &config)?;
        let producer = Producer {
            backend: Backend::Dir(Arc::new_cyclic(|me| Inner {
                me: me.clone(),
                broker,
                config,
                identity,
                chooser: partitioner::PartitionChooser::default(),
                avoided: partitioner::Avoided::default(),
                acc: Mutex::new(AccState::default()),
                space: Condvar::new(),
                work: Condvar::new(),
                pending: AtomicUsize::new(0),
                queued: AtomicUsize::new(0),
                completions: Mutex::new(std::collections::VecDeque::new()),
                firing: Mutex::new(()),
                stats: Counters::default(),
                closed: AtomicBool::new(false),
                sender: Mutex::new(None),
                written: Mutex::new(None),
                txn,
                sparse,
            })),
        };
        if let Some(n) = producer.numbering() {
            // Never a number already written, after a restart too.
            if let Some(last) = producer.last_sequence()? {
                n.raise(last.saturating_add(1));
            }
        }
        Ok(producer)
    }

    /// A producer on a Kafka cluster.
    #[cfg(feature = "kafka")]
    pub(crate) fn on_cluster(k: crate::kafka::KafkaProducer) -> Producer {
        Producer {
            backend: Backend::Kafka(Arc::new(k)),
        }
    }

    /// The directory producer. Every public call of a producer on a Kafka
    /// cluster returns before it would get here ([`on_cluster!`]).
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        match &self.backend {
            Backend::Dir(inner) => inner,
            #[cfg(feature = "kafka")]
            Backend::Kafka(_) => unreachable!("a producer on a Kafka cluster has no directory"),
        }
    }

    /// The counter of a producer numbering its records itself.
    fn numbering(&self) -> Option<&numbering::Numbering> {
        self.inner().identity.as_ref()?.numbering.as_ref()
    }

    /// The sequence the next record sent without one gets, when the
    /// producer numbers its records itself
    /// ([`ProducerConfig::initial_sequence`]); `None` otherwise.
    pub fn next_auto_sequence(&self) -> Option<i64> {
        on_cluster!(self, k => k.next_auto_sequence());
        self.numbering().map(numbering::Numbering::peek)
    }

    /// This producer's settings.
    pub fn config(&self) -> &ProducerConfig {
        on_cluster!(self, k => k.config());
        &self.inner().config
    }

    /// The producer id (-1 when not idempotent).
    pub fn producer_id(&self) -> i64 {
        on_cluster!(self, _k => -1);
        self.inner().identity.as_ref().map_or(-1, |i| i.id)
    }

    /// The producer epoch (-1 when not idempotent). A named producer's epoch
    /// goes up each time a producer of that name is created.
    pub fn epoch(&self) -> i16 {
        on_cluster!(self, _k => -1);
        self.inner().identity.as_ref().map_or(-1, |i| i.epoch)
    }

    /// The producer's durable name, if any.
    pub fn name(&self) -> Option<&str> {
        on_cluster!(self, k => k.name());
        self.inner()
            .identity
            .as_ref()
            .and_then(|i| i.named.as_ref())
            .map(|(n, _)| n.as_str())
    }

    /// Sends one record and returns where it was written, once it is as
    /// durable as the producer's [`Acks`] level asks. With [`Acks::Zero`] it
    /// returns at once, with [`RecordMetadata::UNKNOWN_OFFSET`].
    ///
    /// A record whose application sequence was already written is not
    /// written again: the metadata says `duplicate` (with the original
    /// offset while it is in the dedup window).
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`],
    /// [`Error::MessageTooLarge`], [`Error::Closed`],
    /// [`Error::ProducerFenced`], [`Error::OutOfOrderSequence`] (with
    /// `strict_sequences`), I/O errors. Nothing is written when an error is
    /// returned.
    pub fn send(&self, record: Record) -> Result<RecordMetadata> {
        self.send_borrowed(&record.as_borrowed())
    }

    /// Like [`Producer::send`], without copying the record's data first.
    pub fn send_borrowed(&self, r: &BorrowedRecord<'_>) -> Result<RecordMetadata> {
        on_cluster!(self, k => k.send_borrowed(r));
        if !r.headers.is_empty() {
            if let Some(d) = crate::delayed::redirect(&self.inner().broker, r)? {
                return self.send_borrowed(&d.as_borrowed());
            }
        }
        if let Some(n) = self.numbering() {
            if let numbering::Numbered::Sent(res) = n.one(r, |r| self.send_borrowed(r)) {
                return res;
            }
        }
        let inner = &**self.inner();
        if inner.config.interceptors.is_empty() && inner.config.acks != Acks::Zero {
            // Returned untouched, the metadata is built where the caller
            // reads it. Inspected here first, it was copied with loads wider
            // than the stores that had written it: a store-forwarding stall
            // on every send. `send_now` counts its own errors.
            return inner.send_now(r);
        }
        let owned;
        let r = if inner.config.interceptors.is_empty() {
            r
        } else {
            owned = interceptor::run_on_send(&inner.config.interceptors, r.to_record());
            &owned.as_borrowed()
        };
        let res = if inner.config.acks == Acks::Zero {
            inner
                .enqueue(r, None)
                .inspect_err(|_| inner.stats.errors(1))
        } else {
            inner.send_now(r)
        };
        match &res {
            Err(e) => interceptor::run_on_ack(&inner.config.interceptors, Err(e)),
            // acks=0 records are reported when their batch is appended.
            Ok(md) if inner.config.acks != Acks::Zero && !inner.config.interceptors.is_empty() => {
                interceptor::run_on_ack(&inner.config.interceptors, Ok(md));
            }
            Ok(_) => {}
        }
        res
    }

    /// Sends a record without waiting: `callback` gets its metadata or error
    /// once it is as durable as `acks` asks. Callbacks run in send order per
    /// partition, on the thread that completes the batch (a sender, the
    /// background thread, or [`Producer::flush`]); keep them short.
    ///
    /// # Errors
    /// Problems found before the record is queued (unknown topic or
    /// partition, too large, closed, fenced, no room in `buffer_memory`
    /// after `max_block_ms`) are returned here and the callback is not
    /// called.
    pub fn send_async<F>(&self, record: Record, callback: F) -> Result<()>
    where
        F: FnOnce(Result<RecordMetadata>) + Send + 'static,
    {
        self.send_async_borrowed(&record.as_borrowed(), Box::new(callback))
    }

    /// Like [`Producer::send_async`], for a borrowed record (its data is
    /// copied into the batch before this returns).
    pub fn send_async_borrowed(
        &self,
        r: &BorrowedRecord<'_>,
        callback: DeliveryCallback,
    ) -> Result<()> {
        on_cluster!(self, k => k.send_async_borrowed(r, callback));
        if !r.headers.is_empty() {
            if let Some(d) = crate::delayed::redirect(&self.inner().broker, r)? {
                return self.send_async_borrowed(&d.as_borrowed(), callback);
            }
        }
        let callback = match self.numbering() {
            Some(n) => {
                let mut cb = Some(callback);
                let sent = n.one(r, |r| {
                    let cb = cb.take().ok_or(Error::Closed("producer"))?;
                    self.send_async_borrowed(r, cb)
                });
                match sent {
                    numbering::Numbered::Sent(res) => return res,
                    numbering::Numbered::AsIs => match cb {
                        Some(cb) => cb,
                        None => return Err(Error::Closed("producer")),
                    },
                }
            }
            None => callback,
        };
        let inner = &**self.inner();
        let owned;
        let r = if inner.config.interceptors.is_empty() {
            r
        } else {
            owned = interceptor::run_on_send(&inner.config.interceptors, r.to_record());
            &owned.as_borrowed()
        };
        match inner.enqueue(r, Some(callback)) {
            Ok(_) => Ok(()),
            Err(e) => {
                inner.stats.errors(1);
                interceptor::run_on_ack(&inner.config.interceptors, Err(&e));
                Err(e)
            }
        }
    }

    /// Sends many records at once: the records of each partition become as
    /// few batches as fit in `max_message_bytes`. Returns their metadata in
    /// order.
    ///
    /// # Errors
    /// As [`Producer::send`]. On an error, the records of batches appended
    /// before it stay written.
    pub fn send_batch(&self, records: &[BorrowedRecord<'_>]) -> Result<Vec<RecordMetadata>> {
        on_cluster!(self, k => k.send_batch(records));
        // Reports come in input order when the records go to one partition
        // (the common case): pushed as they come. Otherwise they are placed
        // by index.
        let mut out: Vec<RecordMetadata> = Vec::with_capacity(records.len());
        let mut placed: Option<Vec<Option<RecordMetadata>>> = None;
        self.send_batch_with(records, &mut |i, md| match &mut placed {
            None if i == out.len() => out.push(md.clone()),
            None => {
                let mut v: Vec<Option<RecordMetadata>> = out.drain(..).map(Some).collect();
                v.resize(records.len(), None);
                v[i] = Some(md.clone());
                placed = Some(v);
            }
            Some(v) => v[i] = Some(md.clone()),
        })?;
        Ok(match placed {
            None => out,
            Some(v) => v
                .into_iter()
                .map(|m| m.expect("every record reported"))
                .collect(),
        })
    }

    /// Like [`Producer::send_batch`], reporting each record's metadata to
    /// `on_each(index, metadata)` instead of collecting them (in partition
    /// order, not necessarily in input order).
    pub fn send_batch_with(
        &self,
        records: &[BorrowedRecord<'_>],
        on_each: &mut dyn FnMut(usize, &RecordMetadata),
    ) -> Result<()> {
        on_cluster!(self, k => {
            for (i, md) in k.send_batch(records)?.iter().enumerate() {
                on_each(i, md);
            }
            Ok(())
        });
        if records.iter().any(|r| !r.headers.is_empty()) {
            let mut redirected = Vec::new();
            for (i, r) in records.iter().enumerate() {
                if let Some(d) = crate::delayed::redirect(&self.inner().broker, r)? {
                    redirected.push((i, d));
                }
            }
            if !redirected.is_empty() {
                let mut all: Vec<BorrowedRecord<'_>> = records.to_vec();
                for (i, d) in &redirected {
                    all[*i] = d.as_borrowed();
                }
                return self.send_batch_with(&all, on_each);
            }
        }
        if let Some(n) = self.numbering() {
            if let numbering::Numbered::Sent(res) =
                n.many(records, |rs| self.send_batch_with(rs, &mut *on_each))
            {
                return res;
            }
        }
        let inner = &**self.inner();
        let list = &inner.config.interceptors;
        let mut reported = 0usize;
        let res = if list.is_empty() {
            inner.send_many(records, &mut |i, md| {
                reported += 1;
                on_each(i, md);
            })
        } else {
            let owned: Vec<Record> = records
                .iter()
                .map(|r| interceptor::run_on_send(list, r.to_record()))
                .collect();
            let borrowed: Vec<BorrowedRecord<'_>> = owned.iter().map(Record::as_borrowed).collect();
            inner.send_many(&borrowed, &mut |i, md| {
                reported += 1;
                if inner.config.acks != Acks::Zero {
                    interceptor::run_on_ack(list, Ok(md));
                }
                on_each(i, md);
            })
        };
        if let Err(e) = &res {
            // Every record not reported was not sent.
            let failed = records.len().saturating_sub(reported);
            inner.stats.errors(failed as u64);
            for _ in 0..failed {
                interceptor::run_on_ack(list, Err(e));
            }
        }
        res
    }

    /// Waits until every record sent so far is done (written, and flushed
    /// for `acks=all`) and its callback has run.
    pub fn flush(&self) -> Result<()> {
        on_cluster!(self, k => k.flush());
        self.inner().flush(None)
    }

    /// Like [`Producer::flush`], giving up with [`Error::Timeout`] after
    /// `timeout`; the records not done by then stay queued (and are still
    /// delivered later): [`Producer::queued`] counts them.
    pub fn flush_timeout(&self, timeout: Duration) -> Result<()> {
        on_cluster!(self, k => k.flush_timeout(timeout));
        self.inner().flush(Some(timeout))
    }

    /// Number of records sent asynchronously ([`Producer::send_async`] and
    /// [`Producer::send_async_borrowed`]) whose delivery callback has not
    /// run yet: in an open batch, being written, waiting for the flush of
    /// `acks=all`, or with the callback still to run (confluent-kafka's
    /// `len(producer)`). 0 once a [`Producer::flush`] returned, unless other
    /// threads sent meanwhile. Synchronous sends are done when they return
    /// and never count.
    pub fn queued(&self) -> usize {
        on_cluster!(self, k => k.queued());
        self.inner().queued.load(Ordering::Acquire)
    }

    /// The highest application sequence ([`Record::sequence`]) this
    /// producer has written to any partition (`None` when none yet;
    /// sequences the partitions assign to records sent without one do not
    /// count). For a named producer this survives
    /// restarts: an application resumes from its own source after it and
    /// re-sends with the same sequences; whatever was already written is
    /// dropped as a duplicate.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the producer is not idempotent; I/O
    /// errors reading the state.
    pub fn last_sequence(&self) -> Result<Option<i64>> {
        on_cluster!(self, k => k.last_sequence());
        let inner = &**self.inner();
        let Some(id) = &inner.identity else {
            return Err(Error::InvalidArgument(
                "last_sequence needs an idempotent producer".into(),
            ));
        };
        inner.broker.check_open()?;
        let mut best: Option<i64> = None;
        for topic in inner.broker.all_topics() {
            for log in topic.partitions()?.iter() {
                let last = log.producer_last_seq(id.id, id.named.is_some())?;
                if last >= 0 {
                    best = Some(best.map_or(last, |b| b.max(last)));
                }
            }
        }
        Ok(best)
    }

    /// Counters of what the producer did.
    pub fn stats(&self) -> ProducerStats {
        on_cluster!(self, _k => ProducerStats::default());
        self.inner().stats.snapshot()
    }

    /// Bytes the producer holds now, as [`ProducerStats::buffered_bytes`],
    /// read without summing the other counters (cheap enough to check on
    /// every send).
    pub fn buffered_bytes(&self) -> u64 {
        on_cluster!(self, _k => 0);
        self.inner().stats.buffered()
    }

    /// Flushes what is pending, stops the background thread and refuses
    /// further sends with [`Error::Closed`]. Closing twice is fine.
    pub fn close(&self) -> Result<()> {
        on_cluster!(self, k => k.close());
        let res = self.inner().close();
        self.release_claim();
        res
    }

    /// Lets go of the claim on the name (exclusive and shared access
    /// modes), once closed.
    fn release_claim(&self) {
        #[cfg(feature = "kafka")]
        if matches!(self.backend, Backend::Kafka(_)) {
            return;
        }
        if let Some(id) = &self.inner().identity {
            lock(&id.claim).take();
        }
    }

    /// Whether [`Producer::close`] was called.
    pub fn is_closed(&self) -> bool {
        on_cluster!(self, k => k.is_closed());
        self.inner().closed.load(Ordering::Acquire)
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        on_cluster!(self, k => {
            if let Err(e) = k.close() {
                ::log::warn!("closing a producer: {e}");
            }
        });
        if let Err(e) = self.inner().close() {
            ::log::warn!("closing a producer: {e}");
        }
        self.release_claim();
    }
}

impl Inner {
    fn check_usable(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("producer"));
        }
        if let Some(Identity {
            id,
            epoch,
            named: Some((_, ident)),
            ..
        }) = &self.identity
        {
            let current = ident.current_epoch();
            if current != *epoch {
                return Err(Error::ProducerFenced {
                    producer_id: *id,
                    epoch: *epoch,
                    current_epoch: current,
                });
            }
        }
        Ok(())
    }

    fn is_named(&self) -> bool {
        self.identity.as_ref().is_some_and(|i| i.named.is_some())
    }

    fn idempotence(&self, sequence: Option<i64>) -> Option<Idempotence> {
        self.identity.as_ref().map(|id| Idempotence {
            producer_id: id.id,
            epoch: id.epoch,
            named: id.named.is_some(),
            sequence,
            strict: self.config.strict_sequences,
            sparse: self.sparse,
            window: self.config.dedup_window,
            floor: sequence.map_or(0, |_| self.written_floor()),
        })
    }

    fn check_sequence(&self, r: &BorrowedRecord<'_>) -> Result<()> {
        match r.sequence {
            Some(_) if self.identity.is_none() => Err(Error::InvalidArgument(
                "a record sequence needs an idempotent producer".into(),
            )),
            Some(s) if s < 0 => Err(Error::InvalidArgument(format!(
                "sequence numbers start at 0, got {s}"
            ))),
            _ => Ok(()),
        }
    }

    /// Appends one batch with this producer's identity. Always inlined:
    /// it is the send path's core, and left out of line it costs the
    /// one-record send about 60 instructions (callgrind).
    #[inline(always)]
    fn append(
        &self,
        log: &PartitionLog,
        src: BatchSource<'_>,
        sequence: Option<i64>,
    ) -> Result<Appended> {
        let idem = self.idempotence(sequence);
        let flush_next = self.config.acks == Acks::All;
        let a = log.append_batch(src, ProducerFields::default(), idem.as_ref(), flush_next)?;
        if let Some(seq) = sequence {
            self.note_written(seq, src.count());
        }
        Ok(a)
    }

    /// Appends `records` as one batch, compressed if configured.
    fn append_records(
        &self,
        log: &PartitionLog,
        records: &[RecordRef<'_>],
        sequence: Option<i64>,
    ) -> Result<(Appended, usize)> {
        if self.config.compression == Compression::None {
            let len = batch::batch_len(records);
            let src = BatchSource::Records(records, len);
            let a = self.append(log, src, sequence)?;
            let bytes = a.bytes;
            return Ok((a, bytes));
        }
        let mut enc = EncodedRecords::default();
        for r in records {
            enc.push(r);
        }
        self.append_encoded(log, &enc, sequence)
    }

    /// Appends records encoded beforehand, compressed if configured.
    fn append_encoded(
        &self,
        log: &PartitionLog,
        enc: &EncodedRecords,
        sequence: Option<i64>,
    ) -> Result<(Appended, usize)> {
        let info = SectionInfo {
            count: enc.count,
            first_timestamp: enc.first_timestamp,
            max_timestamp: enc.max_timestamp,
        };
        // Readers refuse to inflate more than MAX_UNCOMPRESSED_LEN: a bigger
        // batch (possible with a large max_message_bytes) is stored as it is.
        let codec = if enc.bytes.len() > MAX_UNCOMPRESSED_LEN {
            Compression::None
        } else {
            self.config.compression
        };
        let compressed;
        let (bytes, attributes) = if codec == Compression::None {
            (&enc.bytes[..], 0)
        } else {
            let mut out = Vec::with_capacity(enc.bytes.len() / 2 + 16);
            compress_records(codec, &enc.bytes, &mut out);
            compressed = out;
            (&compressed[..], codec.bits())
        };
        let a = self.append(
            log,
            BatchSource::Section {
                bytes,
                info,
                attributes,
            },
            sequence,
        )?;
        let written = a.bytes;
        Ok((a, written))
    }

    /// Checks a record about to be sent and stamps its timestamp.
    fn prepare<'a>(&self, r: &BorrowedRecord<'a>) -> Result<(RecordRef<'a>, i64)> {
        self.check_usable()?;
        self.check_sequence(r)?;
        let timestamp = r.timestamp.unwrap_or_else(now_ms);
        let rec = RecordRef {
            key: r.key,
            value: r.value,
            headers: r.headers,
            timestamp,
        };
        Ok((rec, timestamp))
    }

    /// The blocking send of one record. Counts the record in the error
    /// count when it fails.
    #[inline(always)]
    fn send_now(&self, r: &BorrowedRecord<'_>) -> Result<RecordMetadata> {
        let failure = CountsFailure(&self.stats);
        let (rec, timestamp) = self.prepare(r)?;
        // Not through `route`: the partitions stay where the cache lookup
        // put them, read by field. Moved into a `Route`, they were copied
        // with loads wider than the stores that had just written them (a
        // store-forwarding stall on every send, which came and went with
        // unrelated code changes).
        let parts = self.partitions_of(r.topic)?;
        let mut partition =
            self.partition_in(&parts, r, || batch::encoded_record_len(&rec, timestamp, 0))?;
        let log = parts.parts().get(partition)?;
        let res = if r.sequence.is_some() || self.pending.load(Ordering::Acquire) > 0 {
            // Order with queued records of this partition, and (for the
            // application's sequences) with every other write of this
            // producer's sequences.
            let mut st = lock(&self.acc);
            self.append_pending_of(&mut st, log);
            let res = match r.sequence {
                Some(seq) => self.append_sequenced(&mut st, log, &[rec], seq),
                None => self.append_records(log, &[rec], None),
            };
            drop(st);
            self.fire();
            res
        } else {
            self.append_records(log, &[rec], None)
        };
        let (appended, len) = match res {
            Ok(a) => a,
            Err(e) => {
                let rec = [rec];
                let (a, p) =
                    self.retry_elsewhere(parts.parts(), partition, self.movable(r), &rec, e)?;
                partition = p;
                a
            }
        };
        let log = parts.parts().get(partition)?;
        if appended.duplicate {
            self.stats.duplicates(1);
            if self.config.acks == Acks::All {
                // The original may have been written with a lower `acks`:
                // durable before this returns.
                let end = if appended.base_offset == UNKNOWN_OFFSET {
                    log.end_offset()
                } else {
                    appended.base_offset + 1
                };
                log.flush_to(end)?;
            }
        } else {
            if self.config.acks == Acks::All {
                // Timed from the append: a blocking send does not queue.
                let started = self.ack_deadline_start();
                log.flush_to(appended.base_offset + 1)?;
                self.check_ack_deadline(started)?;
            }
            self.stats.written(1, len as u64);
        }
        std::mem::forget(failure);
        Ok(RecordMetadata {
            topic: Arc::clone(log.topic()),
            partition,
            offset: appended.base_offset,
            timestamp: appended.log_append_time.unwrap_or(timestamp),
            duplicate: appended.duplicate,
        })
    }

    /// After the append of `records` to partition `failed` of `parts`
    /// failed with `err`: when the records may move and `err` is a
    /// partition fault, avoids that partition and appends them to another
    /// one, up to `retries` times. Returns the append and its partition, or
    /// the last error.
    #[cold]
    #[inline(never)]
    fn retry_elsewhere(
        &self,
        parts: &route::Partitions,
        failed: u32,
        movable: bool,
        records: &[RecordRef<'_>],
        err: Error,
    ) -> Result<((Appended, usize), u32)> {
        self.move_after_fault(parts, failed, movable, err, |log| {
            self.append_records(log, records, None)
        })
    }

    /// [`Inner::retry_elsewhere`] with `append` appending the records to a
    /// partition's log.
    pub(crate) fn move_after_fault(
        &self,
        parts: &route::Partitions,
        mut failed: u32,
        movable: bool,
        mut err: Error,
        mut append: impl FnMut(&PartitionLog) -> Result<(Appended, usize)>,
    ) -> Result<((Appended, usize), u32)> {
        if !movable || !route::is_partition_fault(&err) {
            return Err(err);
        }
        let topic = parts.name();
        let count = parts.len() as u32;
        for _ in 0..self.config.retries {
            self.note_fault(topic, failed);
            let next = self.avoided.steer(topic, count, (failed + 1) % count);
            self.stats.retries(1);
            match parts.get(next).and_then(|log| append(log)) {
                Ok(a) => return Ok((a, next)),
                Err(e) if route::is_partition_fault(&e) => {
                    failed = next;
                    err = e;
                }
                Err(e) => return Err(e),
            }
        }
        self.note_fault(topic, failed);
        Err(err)
    }

    /// Whether application sequence `seq` is a duplicate in `log`, where
    /// this producer's last sequence is `last`: at or below it, or, for a
    /// producer whose sequences come in any order, written before.
    fn written_before(&self, log: &PartitionLog, id: i64, seq: i64, last: i64) -> Result<bool> {
        if self.sparse {
            log.producer_has_written(id, self.is_named(), seq)
        } else {
            Ok(seq <= last)
        }
    }

    /// Appends records carrying the application's consecutive sequences
    /// `seq..`, unless they are duplicates. Called under the accumulator
    /// lock, which orders every write of this producer's sequences.
    fn append_sequenced(
        &self,
        _held: &mut AccState,
        log: &PartitionLog,
        records: &[RecordRef<'_>],
        seq: i64,
    ) -> Result<(Appended, usize)> {
        let id = self.identity.as_ref().map_or(-1, |i| i.id);
        let last = log.producer_last_seq(id, self.is_named())?;
        if self.written_before(log, id, seq, last)? {
            // The original may be what a failed sync left unsynced: no
            // duplicate is reported as written until the partition is
            // reopened (and its log checked).
            log.check_not_poisoned()?;
            self.note_written(seq, records.len());
            let original = log.producer_offset_of(id, self.is_named(), seq)?;
            return Ok((
                Appended {
                    base_offset: original.unwrap_or(UNKNOWN_OFFSET),
                    duplicate: true,
                    log_append_time: None,
                    bytes: 0,
                },
                0,
            ));
        }
        self.append_records(log, records, Some(seq))
    }

    /// When an `acks=all` send with a delivery timeout started (`None`
    /// otherwise).
    #[inline]
    fn ack_deadline_start(&self) -> Option<Instant> {
        (self.config.acks == Acks::All && self.config.delivery_timeout_ms > 0).then(Instant::now)
    }

    /// [`Error::Timeout`] when an `acks=all` send that started at
    /// `started` was acknowledged after its delivery timeout (its records
    /// are in the log: an append is never undone).
    #[inline]
    fn check_ack_deadline(&self, started: Option<Instant>) -> Result<()> {
        match started {
            Some(t) if self.expired(t) => Err(Error::Timeout(self.config.delivery_timeout_ms)),
            _ => Ok(()),
        }
    }

    /// Queues one record in its partition's batch (the asynchronous path).
    /// Returns the metadata known now (offset unknown).
    fn enqueue(
        self: &Inner,
        r: &BorrowedRecord<'_>,
        cb: Option<DeliveryCallback>,
    ) -> Result<RecordMetadata> {
        let (rec, timestamp) = self.prepare(r)?;
        let single = batch::batch_len(std::slice::from_ref(&rec));
        let route = self.route(r, || single)?;
        let log = route.log()?;
        if single > log.max_batch_bytes() {
            return Err(Error::MessageTooLarge {
                size: single,
                max: log.max_batch_bytes(),
            });
        }
        let md = RecordMetadata {
            topic: Arc::clone(log.topic()),
            partition: route.partition,
            offset: UNKNOWN_OFFSET,
            timestamp,
            duplicate: false,
        };
        let mut st = self.wait_for_room(lock(&self.acc), single)?;
        let key = Arc::as_ptr(log) as usize;
        if let Some(seq) = r.sequence {
            let pending_last = st
                .batches
                .get(&key)
                .and_then(|b| b.first_seq.map(|f| f + i64::from(b.enc.count) - 1));
            let id = self.identity.as_ref().map_or(-1, |i| i.id);
            let last = match pending_last {
                Some(l) => l,
                None => log.producer_last_seq(id, self.is_named())?,
            };
            let written = match pending_last {
                Some(_) => seq <= last,
                None => self.written_before(log, id, seq, last)?,
            };
            if written {
                log.check_not_poisoned()?;
                let original = if pending_last.is_some() {
                    None
                } else {
                    // Already in the log (a pending one is noted when its
                    // batch is appended).
                    self.note_written(seq, 1);
                    log.producer_offset_of(id, self.is_named(), seq)?
                };
                self.stats.duplicates(1);
                let dup = RecordMetadata {
                    offset: original.unwrap_or(UNKNOWN_OFFSET),
                    duplicate: true,
                    ..md.clone()
                };
                self.queued.fetch_add(1, Ordering::AcqRel);
                let done = Done {
                    cb,
                    result: Ok(dup),
                };
                if self.config.acks == Acks::All {
                    // Durable before it is reported: the original may have
                    // been written with a lower `acks` (or still be in the
                    // open batch, appended first).
                    if pending_last.is_some() {
                        self.append_pending(&mut st, key);
                    }
                    let target = original.map_or_else(|| log.end_offset(), |o| o + 1);
                    self.complete_when_durable(&mut st, Arc::clone(log), target, done);
                } else {
                    lock(&self.completions).push_back(done);
                }
                drop(st);
                self.fire();
                return Ok(md);
            }
        }
        // Close the partition's open batch if this record cannot join it.
        let linger = self.config.linger_ms > 0;
        if let Some(b) = st.batches.get(&key) {
            let n = b.enc.count;
            let consecutive = match (b.first_seq, r.sequence) {
                (None, None) => true,
                (Some(f), Some(s)) => s == f + i64::from(n),
                _ => false,
            };
            let len = b.enc.record_len(&rec);
            if !consecutive || b.enc.batch_len() + len + batch::ALIGN > log.max_batch_bytes() {
                self.append_pending(&mut st, key);
            }
        }
        let mut started = false;
        let b = st.batches.entry(key).or_insert_with(|| {
            started = true;
            accumulator::PartBatch::new(Arc::clone(log), route.partition, r.sequence)
        });
        b.movable &= self.movable(r);
        b.enc.push(&rec);
        b.pending.push(accumulator::Pending { cb, timestamp });
        b.bytes += single;
        let full = b.enc.bytes.len() >= self.config.batch_size;
        st.buffered += single;
        self.stats.set_buffered(st.buffered);
        self.pending.fetch_add(1, Ordering::Release);
        self.queued.fetch_add(1, Ordering::AcqRel);
        if full || !linger {
            self.append_pending(&mut st, key);
        } else if started {
            // The background thread sleeps until the oldest lingering
            // batch is due, which a newer one cannot precede: it needs
            // waking only when nothing was lingering.
            let created = st
                .batches
                .get(&key)
                .map_or_else(Instant::now, |b| b.created);
            let idle = st.lingering.is_empty();
            st.lingering.push_back((created, key));
            if st.lingering.len() > 2 * st.batches.len() + 1024 {
                // Entries of batches appended early (full) wait for their
                // time to be skipped; with a long linger, dropped here.
                let accumulator::AccState {
                    lingering, batches, ..
                } = &mut *st;
                lingering.retain(|(c, k)| batches.get(k).is_some_and(|b| b.created == *c));
            }
            self.ensure_sender(&mut st);
            if idle {
                self.work.notify_one();
            }
        }
        drop(st);
        self.fire();
        Ok(md)
    }

    /// Blocks until `need` more bytes fit in `buffer_memory`: first appends
    /// this producer's own open batches, then waits for `acks=all` flushes,
    /// up to `max_block_ms`.
    fn wait_for_room<'a>(
        &'a self,
        mut st: MutexGuard<'a, AccState>,
        need: usize,
    ) -> Result<MutexGuard<'a, AccState>> {
        let limit = self.config.buffer_memory;
        if st.buffered + need <= limit || st.buffered == 0 {
            return Ok(st);
        }
        let keys: Vec<usize> = st.batches.keys().copied().collect();
        for k in keys {
            self.append_pending(&mut st, k);
        }
        let start = Instant::now();
        let deadline = start + Duration::from_millis(self.config.max_block_ms);
        while st.buffered + need > limit && st.buffered > 0 {
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::BufferFull {
                    buffered: st.buffered,
                    limit,
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed("producer"));
            }
            st.space_waiters += 1;
            st = sync::wait_timeout(&self.space, st, deadline - now).0;
            st.space_waiters -= 1;
        }
        Ok(st)
    }
}
