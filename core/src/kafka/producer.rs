//! [`KafkaProducer`]: a [`ProducerConfig`]'s producer on a Kafka cluster.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::message::{Header as KHeader, Headers as _, Message as _, OwnedHeaders};
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer as _, ProducerContext, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use super::error::{from_code, from_kafka};
use super::KafkaBroker;
use crate::error::{Error, Result};
use crate::log::compression::Compression;
use crate::producer::{Acks, BorrowedRecord, Partitioner, ProducerConfig, Record, RecordMetadata};
use crate::sync::lock;

/// What a sent record's delivery report goes to.
pub(super) enum Waiter {
    /// Slot `i` of a synchronous send's results.
    Slot(Arc<Results>, usize),
    /// A [`KafkaProducer::send_async`] callback (behind a lock: librdkafka
    /// wants what it carries shareable, and the callback runs once).
    Callback(Mutex<Option<crate::producer::DeliveryCallback>>),
    /// Nobody: the outcome is learnt otherwise.
    Ignore,
}

/// The results of a synchronous send, filled by delivery reports.
pub(super) struct Results {
    state: Mutex<(Vec<Option<Result<RecordMetadata>>>, usize)>,
    done: Condvar,
}

impl Results {
    pub(super) fn new(n: usize) -> Arc<Results> {
        Arc::new(Results {
            state: Mutex::new(((0..n).map(|_| None).collect(), n)),
            done: Condvar::new(),
        })
    }

    pub(super) fn set(&self, i: usize, r: Result<RecordMetadata>) {
        let mut st = lock(&self.state);
        if st.0[i].is_none() {
            st.1 -= 1;
        }
        st.0[i] = Some(r);
        if st.1 == 0 {
            self.done.notify_all();
        }
    }

    /// Waits for every result.
    pub(super) fn wait(&self) -> Vec<Result<RecordMetadata>> {
        let mut st = lock(&self.state);
        while st.1 > 0 {
            st = crate::sync::wait(&self.done, st);
        }
        st.0.iter_mut()
            .map(|r| r.take().unwrap_or(Err(Error::Closed("producer"))))
            .collect()
    }
}

/// Routes delivery reports to their waiters.
pub(super) struct Reports;

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<Waiter>;

    fn delivery(&self, result: &DeliveryResult<'_>, waiter: Box<Waiter>) {
        let r = match result {
            Ok(m) => Ok(RecordMetadata {
                topic: Arc::from(m.topic()),
                partition: m.partition() as u32,
                offset: u64::try_from(m.offset()).unwrap_or(RecordMetadata::UNKNOWN_OFFSET),
                timestamp: m.timestamp().to_millis().unwrap_or(-1),
                duplicate: false,
            }),
            Err((e, m)) => Err(match e.rdkafka_error_code() {
                Some(code) => from_code(code, m.topic(), "sending to the cluster"),
                None => from_kafka(e.clone(), "sending to the cluster"),
            }),
        };
        match *waiter {
            Waiter::Slot(results, i) => results.set(i, r),
            Waiter::Ignore => {}
            Waiter::Callback(f) => {
                if let Some(f) = lock(&f).take() {
                    // A panicking callback must not unwind into
                    // librdkafka's thread.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(r)));
                }
            }
        }
    }
}

/// Sends records to the topics of a Kafka cluster, with the calls of
/// [`crate::Producer`].
///
/// How its [`ProducerConfig`] maps onto librdkafka:
/// - `acks`: `acks` (`0`, `1`, `all`). On a cluster `all` means written by
///   every in-sync replica, on a directory synced to disk.
/// - `idempotent`: `enable.idempotence`, with `acks=all` only (Kafka's
///   idempotence needs it; with `acks` 0 or 1 the producer is not
///   idempotent).
/// - `linger_ms`, `batch_size`, `buffer_memory`, `compression`:
///   `linger.ms`, `batch.size`, `queue.buffering.max.kbytes`,
///   `compression.type`.
/// - `partitioner`: records with a key go to `murmur2(key)`'s partition on
///   both (librdkafka's `murmur2_random`), so a key keeps its partition
///   when an application moves; records without one go where librdkafka's
///   sticky partitioner puts them. [`Partitioner::Custom`] is called as
///   on a directory, with the partition count the cluster reports.
/// - `transactional_id`, `transaction_timeout_ms`: `transactional.id`,
///   `transaction.timeout.ms`, with idempotence and `acks=all` whatever
///   `acks` says (Kafka's transactions need them); the producer registers
///   the id when made, fencing older producers with it. Its records go
///   through transactions only ([`KafkaTransaction`](super::KafkaTransaction)).
/// - `name`: the transactional id `mqlite.producer.<name>`, each send
///   one transaction that also records the application sequences written
///   (see [`super::named`]); `exclusive_with_fencing` access only, and not
///   with a `transactional_id`.
pub struct KafkaProducer {
    inner: ThreadedProducer<Reports>,
    config: ProducerConfig,
    timeout: Duration,
    /// Partition counts, for a custom partitioner.
    counts: Mutex<HashMap<String, u32>>,
    meta: rdkafka::consumer::BaseConsumer,
    closed: std::sync::atomic::AtomicBool,
    /// A transaction is open.
    txn_open: std::sync::atomic::AtomicBool,
    /// A named producer's sequences.
    named: Option<super::named::Named>,
}

impl std::fmt::Debug for KafkaProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaProducer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn compression_name(c: Compression) -> &'static str {
    match c {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

impl KafkaProducer {
    pub(super) fn new(broker: &KafkaBroker, config: ProducerConfig) -> Result<KafkaProducer> {
        config.validate()?;
        let txn_id = match &config.name {
            Some(name) => Some(super::named::transactional_id(name, &config)?),
            None => config.transactional_id.clone(),
        };
        let transactional = txn_id.is_some();
        // Kafka's transactions need an idempotent producer, so acks=all.
        let acks = match config.acks {
            _ if transactional => "all",
            Acks::Zero => "0",
            Acks::One => "1",
            Acks::All => "all",
        };
        let idempotent = transactional || (config.idempotent && config.acks == Acks::All);
        let mut props: Vec<(&str, String)> = vec![
            ("acks", acks.to_owned()),
            ("enable.idempotence", idempotent.to_string()),
            ("linger.ms", config.linger_ms.to_string()),
            ("batch.size", config.batch_size.to_string()),
            (
                "queue.buffering.max.kbytes",
                config.buffer_memory.div_ceil(1024).max(1).to_string(),
            ),
            (
                "compression.type",
                compression_name(config.compression).to_owned(),
            ),
            ("partitioner", "murmur2_random".to_owned()),
            (
                "message.timeout.ms",
                broker.request_timeout().as_millis().to_string(),
            ),
        ];
        if let Some(id) = txn_id {
            props.push(("transactional.id", id));
            if config.transaction_timeout_ms > 0 {
                props.push((
                    "transaction.timeout.ms",
                    config.transaction_timeout_ms.to_string(),
                ));
            }
        }
        let inner: ThreadedProducer<Reports> = broker
            .client_config(&props)
            .create_with_context(Reports)
            .map_err(|e| from_kafka(e, "making a producer"))?;
        if transactional {
            // Registers the transactional id with the cluster, fencing
            // older producers that use it.
            inner
                .init_transactions(broker.request_timeout())
                .map_err(|e| from_kafka(e, "starting a transactional producer"))?;
        }
        let meta = broker
            .client_config(&[])
            .create()
            .map_err(|e| from_kafka(e, "making a producer"))?;
        // Read after the registration above, which ended whatever the
        // older producers of the name left open.
        let named = match &config.name {
            Some(name) => Some(super::named::Named::new(broker, &inner, name, &config)?),
            None => None,
        };
        Ok(KafkaProducer {
            inner,
            config,
            timeout: broker.request_timeout(),
            counts: Mutex::new(HashMap::new()),
            meta,
            closed: std::sync::atomic::AtomicBool::new(false),
            txn_open: std::sync::atomic::AtomicBool::new(false),
            named,
        })
    }

    /// How long a call waits for the cluster.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `e`, met while `context`, as mqlite's error, or the producer's
    /// fatal error when it has one ([`Error::ProducerFenced`] once
    /// fenced).
    pub(super) fn error_of(&self, e: rdkafka::error::KafkaError, context: &str) -> Error {
        self.fatal_error().unwrap_or_else(|| from_kafka(e, context))
    }

    /// The error that ended the producer, as librdkafka holds it: after
    /// one, it can send nothing more.
    pub(super) fn fatal_error(&self) -> Option<Error> {
        let (code, what) = self.inner.client().fatal_error()?;
        Some(match code {
            RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch => {
                from_code(RDKafkaErrorCode::ProducerFenced, "", "sending")
            }
            _ => super::error::cluster_error("sending", &what),
        })
    }

    /// librdkafka's `begin_transaction`.
    pub(super) fn txn_begin(&self) -> rdkafka::error::KafkaResult<()> {
        self.inner.begin_transaction()
    }

    /// librdkafka's `send_offsets_to_transaction`.
    pub(super) fn txn_send_offsets(
        &self,
        offsets: &rdkafka::TopicPartitionList,
        group: &rdkafka::consumer::ConsumerGroupMetadata,
    ) -> rdkafka::error::KafkaResult<()> {
        self.inner
            .send_offsets_to_transaction(offsets, group, self.timeout)
    }

    /// librdkafka's `commit_transaction`.
    pub(super) fn txn_commit(&self) -> rdkafka::error::KafkaResult<()> {
        self.inner.commit_transaction(self.timeout)
    }

    /// librdkafka's `abort_transaction`.
    pub(super) fn txn_abort(&self) -> rdkafka::error::KafkaResult<()> {
        self.inner.abort_transaction(self.timeout)
    }

    /// Whether a transaction of this producer is open (set while one is).
    pub(super) fn txn_open(&self) -> &std::sync::atomic::AtomicBool {
        &self.txn_open
    }

    /// The producer's configuration.
    pub fn config(&self) -> &ProducerConfig {
        &self.config
    }

    pub(super) fn check_open(&self) -> Result<()> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            Err(Error::Closed("producer"))
        } else {
            Ok(())
        }
    }

    /// The partition count of `topic` as the cluster reports it (cached).
    pub(super) fn partitions_of(&self, topic: &str) -> Result<u32> {
        if let Some(n) = lock(&self.counts).get(topic) {
            return Ok(*n);
        }
        let n = super::partition_count(&self.meta, topic, self.timeout)?
            .ok_or_else(|| Error::UnknownTopic(topic.to_owned()))?;
        lock(&self.counts).insert(topic.to_owned(), n);
        Ok(n)
    }

    /// Checks `r` and hands it to librdkafka, waiting (up to
    /// `max_block_ms`) while its queue is full.
    pub(super) fn produce(&self, r: &BorrowedRecord<'_>, waiter: Box<Waiter>) -> Result<()> {
        crate::topic::validate_topic_name(r.topic)?;
        if r.sequence.is_some() {
            return Err(Error::InvalidArgument(
                "record sequences belong to named producers".to_owned(),
            ));
        }
        if r.headers
            .iter()
            .any(|h| h.key == crate::delayed::DELIVER_AT_HEADER)
        {
            return Err(Error::InvalidArgument(
                "delayed delivery is not available on a Kafka cluster".to_owned(),
            ));
        }
        let size = r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len);
        let partition = match (&self.config.partitioner, r.partition) {
            (_, Some(_)) | (Partitioner::Custom(_), None) => Some(self.partition_for(r, None)?),
            _ => None,
        };
        self.hand_over(r, partition, size, waiter)
    }

    /// The partition `r` goes to when this producer picks it (it has one,
    /// or a custom partitioner picks, or its key does; a record with none
    /// of these goes to `keyless` modulo the partition count, as a
    /// directory places a record by its application sequence).
    ///
    /// # Errors
    /// [`Error::UnknownPartition`]; [`Error::UnknownTopic`];
    /// [`Error::InvalidArgument`] when a custom partitioner panics.
    pub(super) fn partition_for(
        &self,
        r: &BorrowedRecord<'_>,
        keyless: Option<u64>,
    ) -> Result<u32> {
        let n = self.partitions_of(r.topic)?;
        Ok(match (&self.config.partitioner, r.partition, r.key) {
            (_, Some(p), _) => {
                if p >= n {
                    return Err(Error::UnknownPartition {
                        topic: r.topic.to_owned(),
                        partition: p,
                        count: n,
                    });
                }
                p
            }
            (Partitioner::Custom(select), None, _) => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| select(r, n)))
                    .map_err(|_| Error::InvalidArgument("the partition selector panicked".into()))?
                    % n
            }
            (_, None, Some(key)) => crate::producer::partition_for_key(key, n),
            (_, None, None) => (keyless.unwrap_or(0) % u64::from(n)) as u32,
        })
    }

    /// Hands `r` to librdkafka (to `partition`, or where its partitioner
    /// puts it), unchecked, waiting (up to `max_block_ms`) while its queue
    /// is full. `size` is for the error of a record too large.
    pub(super) fn hand_over(
        &self,
        r: &BorrowedRecord<'_>,
        partition: Option<u32>,
        size: usize,
        waiter: Box<Waiter>,
    ) -> Result<()> {
        let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
        for h in r.headers {
            headers = headers.insert(KHeader {
                key: &h.key,
                value: Some(&h.value[..]),
            });
        }
        let mut rec: BaseRecord<'_, [u8], [u8], Box<Waiter>> =
            BaseRecord::with_opaque_to(r.topic, waiter);
        if !r.headers.is_empty() {
            rec = rec.headers(headers);
        }
        if let Some(k) = r.key {
            rec = rec.key(k);
        }
        if let Some(v) = r.value {
            rec = rec.payload(v);
        }
        if let Some(p) = partition {
            rec = rec.partition(p as i32);
        }
        if let Some(ts) = r.timestamp {
            rec = rec.timestamp(ts);
        }
        let deadline = Instant::now() + Duration::from_millis(self.config.max_block_ms);
        loop {
            match self.inner.send(rec) {
                Ok(()) => return Ok(()),
                Err((e, back)) => {
                    if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull)
                        && Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(1));
                        rec = back;
                        continue;
                    }
                    return Err(match e.rdkafka_error_code() {
                        Some(RDKafkaErrorCode::QueueFull) => Error::BufferFull {
                            buffered: 0,
                            limit: self.config.buffer_memory,
                            waited_ms: self.config.max_block_ms,
                        },
                        Some(RDKafkaErrorCode::MessageSizeTooLarge) => {
                            Error::MessageTooLarge { size, max: 0 }
                        }
                        Some(code) => from_code(code, r.topic, "sending to the cluster"),
                        None => from_kafka(e, "sending to the cluster"),
                    });
                }
            }
        }
    }

    /// Sends one record and waits for the cluster's acknowledgement (as
    /// `acks` says).
    ///
    /// # Errors
    /// As [`crate::Producer::send`], from the cluster's answer.
    pub fn send(&self, record: Record) -> Result<RecordMetadata> {
        self.send_borrowed(&record.as_borrowed())
    }

    /// [`KafkaProducer::send`] of a borrowed record.
    ///
    /// # Errors
    /// As [`KafkaProducer::send`].
    pub fn send_borrowed(&self, record: &BorrowedRecord<'_>) -> Result<RecordMetadata> {
        self.check_open()?;
        if let Some(named) = &self.named {
            return named
                .send_batch(self, std::slice::from_ref(record))?
                .pop()
                .ok_or(Error::Closed("producer"));
        }
        let results = Results::new(1);
        self.produce(record, Box::new(Waiter::Slot(Arc::clone(&results), 0)))?;
        results
            .wait()
            .pop()
            .unwrap_or(Err(Error::Closed("producer")))
    }

    /// Sends `records` and waits for all of them; the results in order.
    /// Unlike a directory's `send_batch`, a cluster does not take them as
    /// one atomic write: when one fails, those before it may be written
    /// (except for a named producer, whose batch is one transaction).
    ///
    /// # Errors
    /// The first record's error.
    pub fn send_batch(&self, records: &[BorrowedRecord<'_>]) -> Result<Vec<RecordMetadata>> {
        self.check_open()?;
        if let Some(named) = &self.named {
            return named.send_batch(self, records);
        }
        let results = Results::new(records.len());
        let mut handed = 0;
        let mut failed = None;
        for (i, r) in records.iter().enumerate() {
            match self.produce(r, Box::new(Waiter::Slot(Arc::clone(&results), i))) {
                Ok(()) => handed += 1,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        for i in handed..records.len() {
            results.set(i, Err(Error::InvalidArgument("not sent".to_owned())));
        }
        let out = results.wait();
        if let Some(e) = failed {
            return Err(e);
        }
        out.into_iter().collect()
    }

    /// Sends a record; `callback` gets its result from librdkafka's
    /// thread once the cluster answers. A named producer sends it as
    /// [`KafkaProducer::send`] does (one transaction) and calls `callback`
    /// before returning.
    ///
    /// # Errors
    /// As [`KafkaProducer::send`] for what fails before the record is
    /// handed over (the callback is then not called).
    pub fn send_async<F>(&self, record: Record, callback: F) -> Result<()>
    where
        F: FnOnce(Result<RecordMetadata>) + Send + 'static,
    {
        self.send_async_borrowed(&record.as_borrowed(), Box::new(callback))
    }

    /// [`KafkaProducer::send_async`] of a borrowed record (its data is
    /// copied before this returns).
    ///
    /// # Errors
    /// As [`KafkaProducer::send_async`].
    pub fn send_async_borrowed(
        &self,
        record: &BorrowedRecord<'_>,
        callback: crate::producer::DeliveryCallback,
    ) -> Result<()> {
        self.check_open()?;
        if self.named.is_some() {
            crate::topic::validate_topic_name(record.topic)?;
            callback(self.send_borrowed(record));
            return Ok(());
        }
        self.produce(
            record,
            Box::new(Waiter::Callback(Mutex::new(Some(callback)))),
        )
    }

    /// Waits until every record sent so far is acknowledged.
    ///
    /// # Errors
    /// [`Error::Timeout`] after the request timeout.
    pub fn flush(&self) -> Result<()> {
        self.flush_timeout(self.timeout)
    }

    /// [`KafkaProducer::flush`] waiting at most `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`] when records are still unacknowledged then.
    pub fn flush_timeout(&self, timeout: Duration) -> Result<()> {
        // librdkafka's flush without a wait, again every millisecond: the
        // `rdkafka` crate's own wait polls the delivery queue in tenths of
        // a second, which the producer's thread empties meanwhile, so it
        // returned a tenth of a second late.
        let deadline = Instant::now() + timeout;
        loop {
            match self.inner.flush(Duration::ZERO) {
                Ok(()) => return Ok(()),
                Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::OperationTimedOut) => {
                    if Instant::now() >= deadline {
                        return Err(Error::Timeout(timeout.as_millis() as u64));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(from_kafka(e, "flushing the producer")),
            }
        }
    }

    /// Records sent and not acknowledged yet.
    pub fn queued(&self) -> usize {
        usize::try_from(self.inner.in_flight_count()).unwrap_or(0)
    }

    /// Flushes and closes the producer; later sends fail with
    /// [`Error::Closed`].
    ///
    /// # Errors
    /// As [`KafkaProducer::flush`].
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Ok(());
        }
        self.flush()
    }

    /// The producer's name, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.config.name.as_deref()
    }

    /// A named producer's highest application sequence written to any
    /// partition, as the cluster holds it (see
    /// [`crate::Producer::last_sequence`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a producer without a name; the
    /// cluster's errors reading the sequences again after a failed send.
    pub fn last_sequence(&self) -> Result<Option<i64>> {
        self.check_open()?;
        self.named_or("last_sequence")?.last_sequence(self.timeout)
    }

    /// A named producer's first application sequence not written:
    /// [`KafkaProducer::last_sequence`] + 1 (0 when none). Sends on a
    /// cluster are committed one at a time, each before its call returns,
    /// so no sequence after the last one is written.
    ///
    /// # Errors
    /// As [`KafkaProducer::last_sequence`].
    pub fn next_sequence(&self) -> Result<i64> {
        Ok(self.last_sequence()?.map_or(0, |s| s + 1))
    }

    /// The sequence the next record sent without one gets, for a named
    /// producer with `initial_sequence`.
    pub fn next_auto_sequence(&self) -> Option<i64> {
        self.named.as_ref()?.next_auto_sequence()
    }

    fn named_or(&self, what: &str) -> Result<&super::named::Named> {
        self.named.as_ref().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{what}: on a Kafka cluster only a named producer keeps sequences"
            ))
        })
    }

    /// Whether [`KafkaProducer::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// The headers of a Kafka message as mqlite's.
pub(crate) fn headers_of(h: Option<&rdkafka::message::BorrowedHeaders>) -> Vec<crate::Header> {
    let Some(h) = h else { return Vec::new() };
    h.iter()
        .map(|kh| crate::Header::new(kh.key, kh.value.unwrap_or_default()))
        .collect()
}
