//! Named producers on a Kafka cluster.
//!
//! A producer's name is a transactional id on a cluster,
//! `mqlite.producer.<name>`. Making the producer registers it with the
//! cluster, which fences the older producers of the name (they fail with
//! [`Error::ProducerFenced`], the directory's `ExclusiveWithFencing`) and
//! ends what they left open.
//!
//! Every `send` or `send_batch` of a named producer is one Kafka
//! transaction. It holds the records and, for each partition that a record
//! with an application sequence went to, a record in the compacted topic
//! [`SEQUENCES_TOPIC`]: key `name \0 topic \0 partition`, value the highest
//! sequence the name has written there (8 bytes, big-endian). The records
//! and their sequences become visible together or not at all. A producer
//! made later reads that topic (`read_committed`, after registering) to
//! learn where the name stands: [`crate::Producer::last_sequence`]
//! survives restarts, and a record re-sent with a sequence at or below its
//! partition's last is dropped as a duplicate, as on a directory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};

use super::error::from_kafka;
use rdkafka::producer::{BaseRecord, Producer as _, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;

use super::producer::{Reports, Results, Waiter};
use super::{KafkaBroker, KafkaProducer};
use crate::error::{Error, Result};
use crate::producer::{BorrowedRecord, ProducerAccessMode, ProducerConfig, RecordMetadata};
use crate::sync::lock;

/// The compacted topic holding the application sequences named producers
/// wrote, one record per name and partition written.
pub(crate) const SEQUENCES_TOPIC: &str = "__mqlite_sequences";

/// The transactional id of a producer named `name`, after checking that
/// `config` can be honoured on a cluster.
///
/// # Errors
/// [`Error::InvalidConfig`] for an access mode other than
/// `exclusive_with_fencing` (Kafka fences by transactional id and has no
/// other mode) or a `transactional_id` besides the name.
pub(super) fn transactional_id(name: &str, config: &ProducerConfig) -> Result<String> {
    if config.access_mode != ProducerAccessMode::ExclusiveWithFencing {
        return Err(Error::InvalidConfig(format!(
            "access mode {}: a named producer on a Kafka cluster is exclusive_with_fencing \
             (Kafka fences by transactional id and has no other mode)",
            config.access_mode.as_str()
        )));
    }
    if config.transactional_id.is_some() {
        return Err(Error::InvalidConfig(
            "a named producer on a Kafka cluster uses its name as its transactional id: \
             give it a name or a transactional_id, not both"
                .to_owned(),
        ));
    }
    Ok(format!("mqlite.producer.{name}"))
}

/// The key of the sequence record of `name` in `topic`'s `partition`.
fn state_key(name: &str, topic: &str, partition: u32) -> Vec<u8> {
    format!("{name}\0{topic}\0{partition}").into_bytes()
}

/// The topic, partition and sequence of a sequence record of `name`;
/// `None` for another name's or a record that is not one.
fn parse_state<'a>(name: &str, key: &'a [u8], value: &[u8]) -> Option<(&'a str, u32, i64)> {
    let key = std::str::from_utf8(key).ok()?;
    let mut parts = key.split('\0');
    if parts.next()? != name {
        return None;
    }
    let topic = parts.next()?;
    let partition = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    let seq = i64::from_be_bytes(value.try_into().ok()?);
    Some((topic, partition, seq))
}

/// Where a named producer stands.
#[derive(Debug, Default)]
struct State {
    /// The highest sequence written to each (topic, partition).
    last: HashMap<(String, u32), i64>,
    /// The next automatic sequence (`initial_sequence`).
    next_auto: Option<i64>,
    /// `last` is not known (not read yet, or a send failed in a way that
    /// leaves its outcome unknown): it is read from the cluster before it
    /// is used.
    stale: bool,
}

/// What a send does with one record.
enum Step<'a> {
    /// Drop it: a duplicate of one written before.
    Duplicate(RecordMetadata),
    /// Write it (its partition set when the producer picked one).
    Write(BorrowedRecord<'a>),
}

/// A named producer's sequences (see the module's documentation).
pub(super) struct Named {
    name: String,
    /// Reads [`SEQUENCES_TOPIC`] (`read_committed`).
    reader: BaseConsumer,
    /// Held for the whole of a send: one transaction at a time.
    state: Mutex<State>,
}

impl std::fmt::Debug for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Named")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Named {
    /// The sequences of producer `name`, read from the cluster (which must
    /// have registered the name's transactional id already), making
    /// [`SEQUENCES_TOPIC`] when the cluster lacks it.
    pub(super) fn new(
        broker: &KafkaBroker,
        producer: &ThreadedProducer<Reports>,
        name: &str,
        config: &ProducerConfig,
    ) -> Result<Named> {
        if broker.partition_count(SEQUENCES_TOPIC)?.is_none() {
            match broker.create_topic_with(
                SEQUENCES_TOPIC,
                1,
                &[("cleanup.policy", "compact".to_owned())],
            ) {
                Ok(()) | Err(Error::TopicExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let reader: BaseConsumer = broker
            .client_config(&[
                ("isolation.level", "read_committed".to_owned()),
                ("enable.partition.eof", "true".to_owned()),
                ("enable.auto.commit", "false".to_owned()),
                // librdkafka wants a group even to assign; nothing is
                // committed to it.
                ("group.id", format!("mqlite.producer.{name}.reader")),
            ])
            .create()
            .map_err(|e| from_kafka(e, "reading a named producer's sequences"))?;
        let named = Named {
            name: name.to_owned(),
            reader,
            // Read by the first use of the state, below.
            state: Mutex::new(State {
                next_auto: config.initial_sequence,
                stale: true,
                ..State::default()
            }),
        };
        named.probe(producer, broker.request_timeout())?;
        drop(named.current(broker.request_timeout())?);
        Ok(named)
    }

    /// Runs one transaction writing a record of the name that states no
    /// sequence, so a cluster without transactions (some Kafka-compatible
    /// brokers answer the registration but not the writes) is found now.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the cluster has no transactions; the
    /// cluster's errors.
    fn probe(&self, producer: &ThreadedProducer<Reports>, timeout: Duration) -> Result<()> {
        let context = "starting a named producer";
        producer
            .begin_transaction()
            .map_err(|e| from_kafka(e, context))?;
        let key = format!("{}\0", self.name);
        let record: BaseRecord<'_, str, [u8], Box<Waiter>> =
            BaseRecord::with_opaque_to(SEQUENCES_TOPIC, Box::new(Waiter::Ignore))
                .partition(0)
                .key(&key[..])
                .payload(&[][..]);
        let sent = producer.send(record).map_err(|(e, _)| e);
        let committed = sent.and_then(|()| producer.commit_transaction(timeout));
        match committed {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = producer.abort_transaction(timeout);
                Err(match e.rdkafka_error_code() {
                    Some(RDKafkaErrorCode::UnsupportedFeature) => Error::InvalidConfig(
                        "named producers need Kafka's transactions, which this cluster does \
                         not support"
                            .to_owned(),
                    ),
                    _ => from_kafka(e, context),
                })
            }
        }
    }

    /// The name's highest sequence in every partition, read to the end of
    /// [`SEQUENCES_TOPIC`].
    fn load(&self, timeout: Duration) -> Result<HashMap<(String, u32), i64>> {
        let context = "reading a named producer's sequences";
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(SEQUENCES_TOPIC, 0, Offset::Beginning)
            .map_err(|e| from_kafka(e, context))?;
        self.reader
            .assign(&tpl)
            .map_err(|e| from_kafka(e, context))?;
        let deadline = Instant::now() + timeout;
        let mut last = HashMap::new();
        let outcome = loop {
            match self.reader.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    let parsed = parse_state(
                        &self.name,
                        m.key().unwrap_or_default(),
                        m.payload().unwrap_or_default(),
                    );
                    if let Some((topic, partition, seq)) = parsed {
                        let e = last.entry((topic.to_owned(), partition)).or_insert(seq);
                        *e = (*e).max(seq);
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => break Ok(last),
                Some(Err(e)) => break Err(from_kafka(e, context)),
                None if Instant::now() >= deadline => {
                    break Err(Error::Timeout(timeout.as_millis() as u64));
                }
                None => {}
            }
        };
        let _ = self.reader.unassign();
        outcome
    }

    /// The state, read from the cluster first when it is not known yet
    /// (a new producer, or a failed send that left its outcome unknown).
    fn current(&self, timeout: Duration) -> Result<std::sync::MutexGuard<'_, State>> {
        let mut st = lock(&self.state);
        if st.stale {
            st.last = self.load(timeout)?;
            let after = st.last.values().max().map_or(0, |s| s + 1);
            if let Some(auto) = st.next_auto.as_mut() {
                *auto = (*auto).max(after);
            }
            st.stale = false;
        }
        Ok(st)
    }

    /// The highest sequence written to any partition.
    pub(super) fn last_sequence(&self, timeout: Duration) -> Result<Option<i64>> {
        Ok(self.current(timeout)?.last.values().max().copied())
    }

    /// The next automatic sequence.
    pub(super) fn next_auto_sequence(&self) -> Option<i64> {
        lock(&self.state).next_auto
    }

    /// Sends `records` in one transaction of `p`, with the sequences they
    /// carry (or that automatic numbering gives them); a record whose
    /// sequence is at or below its partition's last is a duplicate, not
    /// written. The results in order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative sequence;
    /// [`Error::OutOfOrderSequence`] with `strict_sequences`;
    /// [`Error::ProducerFenced`] when a newer producer of the name exists;
    /// what sending each record can fail with. Nothing is written then.
    pub(super) fn send_batch(
        &self,
        p: &KafkaProducer,
        records: &[BorrowedRecord<'_>],
    ) -> Result<Vec<RecordMetadata>> {
        if let Some(e) = p.fatal_error() {
            return Err(e);
        }
        let mut st = self.current(p.timeout())?;
        let mut auto = st.next_auto;
        // The partitions' new last sequences.
        let mut written: HashMap<(String, u32), i64> = HashMap::new();
        let mut steps = Vec::with_capacity(records.len());
        for r in records {
            crate::topic::validate_topic_name(r.topic)?;
            let seq = match (r.sequence, auto.as_mut()) {
                (Some(s), _) => Some(s),
                (None, Some(next)) => {
                    *next += 1;
                    Some(*next - 1)
                }
                (None, None) => None,
            };
            let plain = BorrowedRecord {
                sequence: None,
                ..*r
            };
            let Some(seq) = seq else {
                steps.push(Step::Write(plain));
                continue;
            };
            if seq < 0 {
                return Err(Error::InvalidArgument(format!(
                    "sequence numbers start at 0, got {seq}"
                )));
            }
            // Without a key or a partition, a record goes where a re-send
            // of it goes too: by its sequence, as on a directory.
            let partition = p.partition_for(r, Some(seq.unsigned_abs()))?;
            let at = (r.topic.to_owned(), partition);
            let last = written
                .get(&at)
                .or_else(|| st.last.get(&at))
                .copied()
                .unwrap_or(-1);
            if seq <= last {
                steps.push(Step::Duplicate(RecordMetadata {
                    topic: Arc::from(r.topic),
                    partition,
                    offset: RecordMetadata::UNKNOWN_OFFSET,
                    timestamp: r.timestamp.unwrap_or(-1),
                    duplicate: true,
                }));
                continue;
            }
            if p.config().strict_sequences && seq != last + 1 {
                return Err(Error::OutOfOrderSequence {
                    topic: r.topic.to_owned(),
                    partition,
                    expected: last + 1,
                    received: seq,
                });
            }
            written.insert(at, seq);
            steps.push(Step::Write(BorrowedRecord {
                partition: Some(partition),
                ..plain
            }));
        }
        let writes = steps.iter().filter(|s| matches!(s, Step::Write(_))).count();
        let mut reports = if writes == 0 {
            Vec::new()
        } else {
            match self.transact(p, &steps, writes, &written) {
                Ok(reports) => reports,
                Err((e, aborted)) => {
                    st.stale |= !aborted;
                    return Err(e);
                }
            }
        }
        .into_iter();
        st.last.extend(written);
        st.next_auto = auto;
        drop(st);
        steps
            .into_iter()
            .map(|s| match s {
                Step::Duplicate(md) => Ok(md),
                Step::Write(_) => reports.next().unwrap_or(Err(Error::Closed("producer"))),
            })
            .collect()
    }

    /// Writes the `writes` records of `steps` and the sequence records of
    /// `written` in one transaction of `p`; the records' reports in order.
    /// On an error, whether the transaction was aborted (else its outcome
    /// is unknown).
    fn transact(
        &self,
        p: &KafkaProducer,
        steps: &[Step<'_>],
        writes: usize,
        written: &HashMap<(String, u32), i64>,
    ) -> std::result::Result<Vec<Result<RecordMetadata>>, (Error, bool)> {
        let context = "sending as a named producer";
        p.txn_begin().map_err(|e| (p.error_of(e, context), true))?;
        let abort = |e: Error| {
            let aborted = p.txn_abort().is_ok();
            (e, aborted)
        };
        // Nobody waits for the reports after an error: the slots of the
        // records not handed over stay empty.
        let results = Results::new(writes);
        let records = steps.iter().filter_map(|s| match s {
            Step::Write(r) => Some(r),
            Step::Duplicate(_) => None,
        });
        for (i, r) in records.enumerate() {
            let waiter = Box::new(Waiter::Slot(Arc::clone(&results), i));
            p.produce(r, waiter).map_err(abort)?;
        }
        let marks = Results::new(written.len());
        for (j, ((topic, partition), seq)) in written.iter().enumerate() {
            let key = state_key(&self.name, topic, *partition);
            let value = seq.to_be_bytes();
            let mark = BorrowedRecord {
                topic: SEQUENCES_TOPIC,
                partition: Some(0),
                key: Some(&key),
                value: Some(&value),
                ..BorrowedRecord::default()
            };
            let waiter = Box::new(Waiter::Slot(Arc::clone(&marks), j));
            p.hand_over(&mark, Some(0), key.len() + value.len(), waiter)
                .map_err(abort)?;
        }
        if let Err(e) = p.txn_commit() {
            let e = p.error_of(e, context);
            return Err(abort(e));
        }
        if let Some(Err(e)) = marks.wait().into_iter().find(Result::is_err) {
            // Committed, yet a sequence record failed: not expected of a
            // cluster; the sequences are read again before the next send.
            return Err((e, false));
        }
        Ok(results.wait())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_records_read_back_for_their_name_only() {
        let key = state_key("orders", "t.1", 7);
        let value = 42i64.to_be_bytes();
        assert_eq!(parse_state("orders", &key, &value), Some(("t.1", 7, 42)));
        assert_eq!(parse_state("order", &key, &value), None);
        assert_eq!(parse_state("orders", &key, &value[..7]), None);
        assert_eq!(parse_state("orders", b"orders\0t", &value), None);
        assert_eq!(parse_state("orders", b"orders\0t\0x", &value), None);
        assert_eq!(parse_state("orders", b"orders\0t\x001\0", &value), None);
        assert_eq!(parse_state("orders", &[0xff, 0, 1], &value), None);
        for cut in 0..key.len() {
            assert_eq!(parse_state("orders", &key[..cut], &value), None);
        }
    }
}
