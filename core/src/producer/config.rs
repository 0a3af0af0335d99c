//! Producer settings.

use std::sync::Arc;

use super::{Partitioner, ProducerInterceptor};
use crate::dedup::DEFAULT_DEDUP_WINDOW;
use crate::error::{Error, Result};
use crate::log::compression::Compression;

/// How durable a record must be before it counts as sent (Kafka's `acks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    /// `acks=0`: fire and forget. `send` queues the record and returns at
    /// once, without its offset; it is appended with its batch (at
    /// `batch_size`, after `linger_ms`, or at `flush`). Errors only show in
    /// [`ProducerStats::errors`](super::ProducerStats) and the log.
    Zero,
    /// `acks=1` (default): done once the record is in the memory map and
    /// visible to consumers. Survives a crash of this process, not a power
    /// loss or kernel crash.
    #[default]
    One,
    /// `acks=all`: done once the record is flushed to disk (msync, which
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

/// Settings of a producer. The defaults follow Kafka 3.x where they apply.
#[derive(Clone)]
pub struct ProducerConfig {
    /// Durability level of every send (default `acks=1`).
    pub acks: Acks,
    /// Idempotence (default on): the producer gets an id and epoch, every
    /// batch a sequence number per partition, and a re-sent batch is
    /// recognised instead of written twice.
    pub idempotent: bool,
    /// A durable name (Pulsar's producer name): the producer keeps its id
    /// across restarts, can resume with [`Producer::last_sequence`], and a
    /// newer producer of the same name fences this one.
    ///
    /// [`Producer::last_sequence`]: super::Producer::last_sequence
    pub name: Option<String>,
    /// How long `send_async` lets a partition's batch wait for more records
    /// before appending it (default 0: append at once).
    pub linger_ms: u64,
    /// A partition's batch is appended once it holds this many bytes
    /// (default 16 KiB, Kafka's `batch.size`).
    pub batch_size: usize,
    /// Most bytes the producer holds in unsent batches and in batches
    /// waiting for their `acks=all` flush (default 32 MiB).
    pub buffer_memory: usize,
    /// How long a send waits for room in `buffer_memory` before failing with
    /// [`Error::BufferFull`] (default 60 s).
    pub max_block_ms: u64,
    /// Codec of every batch (default none).
    pub compression: Compression,
    /// Choice of partition for records without one (default sticky).
    pub partitioner: Partitioner,
    /// Batches per partition remembered to answer a re-send with its
    /// original offsets (default 5).
    pub dedup_window: usize,
    /// Reject application sequences that skip ahead of the partition's next
    /// one with [`Error::OutOfOrderSequence`] (Kafka's rule), instead of
    /// allowing gaps (Pulsar's rule, the default: a producer-wide counter
    /// leaves gaps in each partition).
    pub strict_sequences: bool,
    /// Interceptors, called in order.
    pub interceptors: Vec<Arc<dyn ProducerInterceptor>>,
    // Transactions.
    /// The transactional id (Kafka's `transactional.id`): the producer may
    /// run transactions ([`Producer::begin_transaction`]), and a newer
    /// producer with the same transactional id fences this one (its open
    /// transaction is aborted). Same naming rules as `name`.
    ///
    /// [`Producer::begin_transaction`]: super::Producer::begin_transaction
    pub transactional_id: Option<String>,
    /// Most bytes of records one transaction may buffer (default 64 MiB);
    /// a send past it fails with [`Error::TransactionTooLarge`].
    pub max_transaction_bytes: usize,
    /// How long a transaction may stay open (default 60 s, Kafka's
    /// `transaction.timeout.ms`; 0: no limit): past it, the transaction
    /// is aborted and its next call fails with [`Error::Timeout`].
    pub transaction_timeout_ms: u64,
    // Retries, fault avoidance and the delivery timeout.
    /// How many times a record without a key and without an explicit
    /// partition is sent again, to another partition, after a partition
    /// fault (default 2, RocketMQ's `retryTimesWhenSendFailed`; 0: never).
    /// A partition fault is an append that failed with
    /// [`Error::Poisoned`], [`Error::DiskFull`] or [`Error::Io`]: such an
    /// append wrote nothing. Records with a key, an explicit partition, an
    /// application sequence or a custom partitioner never move (their
    /// partition is chosen for order or by the application) and fail at
    /// once. A failed `acks=all` flush is not retried: the record is in
    /// the log already.
    pub retries: u32,
    /// How long a partition whose append failed is avoided by this
    /// producer's key-less records, in ms (default 30,000). A poisoned
    /// partition stays broken until the directory is reopened and a full
    /// disk until space is freed: 30 s costs one failed attempt per
    /// partition every 30 s instead of one per send, and a partition whose
    /// disk has room again is back in use within half a minute. While
    /// other partitions are available an avoided one is skipped; when all
    /// are avoided, the one whose back-off ends first is used.
    pub fault_backoff_ms: u64,
    /// How long a record may take from its send until it is appended and
    /// acknowledged, in ms (default 120,000, Kafka's
    /// `delivery.timeout.ms`; 0: no limit). A queued batch (linger,
    /// `send_async`) whose first record was sent longer ago than this is
    /// not appended: each of its records fails with [`Error::Timeout`]. An
    /// `acks=all` send whose flush ends after the deadline (counted from
    /// the append for a blocking send, which does not queue) fails with
    /// [`Error::Timeout`] too; its record is in the log already (an append
    /// is never undone, Kafka's rule that a batch already sent is not
    /// expired), so it may be read, and is durable once a flush succeeds.
    pub delivery_timeout_ms: u64,
    // Access modes and automatic numbering of named producers.
    /// How a named producer shares its name with other open producers of
    /// that name, in this process and others (default
    /// [`ProducerAccessMode::ExclusiveWithFencing`]). Only the default is
    /// allowed without a [`name`](Self::name).
    pub access_mode: ProducerAccessMode,
    /// Automatic numbering (Pulsar's `initialSequenceId`): a named producer
    /// gives every record sent without [`Record::sequence`] an application
    /// sequence of its own, the first being this value or
    /// [`Producer::last_sequence`] + 1 when that is higher (so a restarted
    /// producer never reuses a number). `None` (default): records without a
    /// sequence get one the partition assigns, which is never checked for
    /// duplicates. See [`ProducerConfig::initial_sequence`].
    ///
    /// [`Record::sequence`]: super::Record::sequence
    /// [`Producer::last_sequence`]: super::Producer::last_sequence
    pub initial_sequence: Option<i64>,
}

impl std::fmt::Debug for ProducerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerConfig")
            .field("acks", &self.acks)
            .field("idempotent", &self.idempotent)
            .field("name", &self.name)
            .field("linger_ms", &self.linger_ms)
            .field("batch_size", &self.batch_size)
            .field("buffer_memory", &self.buffer_memory)
            .field("max_block_ms", &self.max_block_ms)
            .field("compression", &self.compression)
            .field("partitioner", &self.partitioner)
            .field("dedup_window", &self.dedup_window)
            .field("strict_sequences", &self.strict_sequences)
            .field("interceptors", &self.interceptors.len())
            .field("transactional_id", &self.transactional_id)
            .field("max_transaction_bytes", &self.max_transaction_bytes)
            .field("transaction_timeout_ms", &self.transaction_timeout_ms)
            .field("retries", &self.retries)
            .field("fault_backoff_ms", &self.fault_backoff_ms)
            .field("delivery_timeout_ms", &self.delivery_timeout_ms)
            .field("access_mode", &self.access_mode)
            .field("initial_sequence", &self.initial_sequence)
            .finish()
    }
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: Acks::One,
            idempotent: true,
            name: None,
            linger_ms: 0,
            batch_size: 16 * 1024,
            buffer_memory: 32 * 1024 * 1024,
            max_block_ms: 60_000,
            compression: Compression::None,
            partitioner: Partitioner::Sticky,
            dedup_window: DEFAULT_DEDUP_WINDOW,
            strict_sequences: false,
            interceptors: Vec::new(),
            transactional_id: None,
            max_transaction_bytes: 64 << 20,
            transaction_timeout_ms: 60_000,
            // Retries, fault avoidance and the delivery timeout.
            retries: 2,
            fault_backoff_ms: 30_000,
            delivery_timeout_ms: 120_000,
            access_mode: ProducerAccessMode::ExclusiveWithFencing,
            initial_sequence: None,
        }
    }
}

impl ProducerConfig {
    /// Sets the durability level.
    pub fn acks(mut self, acks: Acks) -> Self {
        self.acks = acks;
        self
    }

    /// Turns idempotence on or off.
    pub fn idempotent(mut self, on: bool) -> Self {
        self.idempotent = on;
        self
    }

    /// Gives the producer a durable name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets `linger_ms`.
    pub fn linger_ms(mut self, ms: u64) -> Self {
        self.linger_ms = ms;
        self
    }

    /// Sets `batch_size` (bytes).
    pub fn batch_size(mut self, bytes: usize) -> Self {
        self.batch_size = bytes;
        self
    }

    /// Sets `buffer_memory` (bytes).
    pub fn buffer_memory(mut self, bytes: usize) -> Self {
        self.buffer_memory = bytes;
        self
    }

    /// Sets `max_block_ms`.
    pub fn max_block_ms(mut self, ms: u64) -> Self {
        self.max_block_ms = ms;
        self
    }

    /// Sets the codec.
    pub fn compression(mut self, codec: Compression) -> Self {
        self.compression = codec;
        self
    }

    /// Sets the partitioner.
    pub fn partitioner(mut self, partitioner: Partitioner) -> Self {
        self.partitioner = partitioner;
        self
    }

    /// Sets the dedup window (batches per partition).
    pub fn dedup_window(mut self, batches: usize) -> Self {
        self.dedup_window = batches;
        self
    }

    /// Sets `strict_sequences`.
    pub fn strict_sequences(mut self, on: bool) -> Self {
        self.strict_sequences = on;
        self
    }

    /// Adds an interceptor.
    pub fn interceptor(mut self, i: Arc<dyn ProducerInterceptor>) -> Self {
        self.interceptors.push(i);
        self
    }

    // Transactions.
    /// Sets the transactional id (see [`ProducerConfig::transactional_id`]).
    pub fn transactional_id(mut self, id: impl Into<String>) -> Self {
        self.transactional_id = Some(id.into());
        self
    }

    /// Sets the most bytes of records one transaction may buffer.
    pub fn max_transaction_bytes(mut self, bytes: usize) -> Self {
        self.max_transaction_bytes = bytes;
        self
    }

    /// Sets how long a transaction may stay open (0: no limit).
    pub fn transaction_timeout_ms(mut self, ms: u64) -> Self {
        self.transaction_timeout_ms = ms;
        self
    }

    // Retries, fault avoidance and the delivery timeout.
    /// Sets `retries` (sends of a key-less record to another partition
    /// after a partition fault).
    pub fn retries(mut self, n: u32) -> Self {
        self.retries = n;
        self
    }

    /// Sets `fault_backoff_ms` (how long a failed partition is avoided).
    pub fn fault_backoff_ms(mut self, ms: u64) -> Self {
        self.fault_backoff_ms = ms;
        self
    }

    /// Sets `delivery_timeout_ms` (0: no limit).
    pub fn delivery_timeout_ms(mut self, ms: u64) -> Self {
        self.delivery_timeout_ms = ms;
        self
    }

    /// Checks the settings.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.name.is_some() && !self.idempotent {
            return Err(Error::InvalidArgument(
                "a named producer must be idempotent".into(),
            ));
        }
        if self.buffer_memory == 0 {
            return Err(Error::InvalidArgument(
                "buffer_memory must be above 0".into(),
            ));
        }
        if self.dedup_window == 0 || self.dedup_window > 1000 {
            return Err(Error::InvalidArgument(
                "dedup_window must be between 1 and 1000 batches".into(),
            ));
        }
        if let Some(n) = &self.name {
            crate::dedup::validate_producer_name(n)?;
        }
        if self.max_transaction_bytes == 0 {
            return Err(Error::InvalidArgument(
                "max_transaction_bytes must be above 0".into(),
            ));
        }
        self.validate_access()
    }

    // Access modes and automatic numbering of named producers.

    /// Sets how a named producer shares its name (see
    /// [`ProducerAccessMode`]).
    pub fn access_mode(mut self, mode: ProducerAccessMode) -> Self {
        self.access_mode = mode;
        self
    }

    /// Turns on automatic numbering from `first` (at least 0): records sent
    /// without [`Record::sequence`] get consecutive application sequences
    /// from `max(first, last_sequence() + 1)`, counted by the producer
    /// object, so they are deduplicated like the application's own.
    ///
    /// A record that carries its own sequence keeps it, and the counter
    /// moves past it (to `sequence + 1` when that is higher), so an
    /// automatic number never repeats an explicit one; an explicit
    /// sequence at or below one already written is a duplicate, as always.
    /// Numbers are taken in send order under a producer-wide lock, so the
    /// sends of one such producer are serialised. Only for a named producer
    /// in a mode other than [`ProducerAccessMode::Shared`] (two producers
    /// counting alone would hand out one number twice, and the second
    /// record would be dropped as a duplicate).
    ///
    /// [`Record::sequence`]: super::Record::sequence
    pub fn initial_sequence(mut self, first: i64) -> Self {
        self.initial_sequence = Some(first);
        self
    }

    /// Checks `access_mode` and `initial_sequence`.
    fn validate_access(&self) -> Result<()> {
        if self.name.is_none() && self.access_mode != ProducerAccessMode::ExclusiveWithFencing {
            return Err(Error::InvalidArgument(format!(
                "access mode {} needs a named producer",
                self.access_mode
            )));
        }
        if let Some(first) = self.initial_sequence {
            if self.name.is_none() {
                return Err(Error::InvalidArgument(
                    "initial_sequence needs a named producer".into(),
                ));
            }
            if first < 0 {
                return Err(Error::InvalidArgument(format!(
                    "initial_sequence must be at least 0, got {first}"
                )));
            }
            if self.access_mode == ProducerAccessMode::Shared {
                return Err(Error::InvalidArgument(
                    "initial_sequence cannot be used in the shared access mode: each producer \
                     would count alone and hand out the same numbers"
                        .into(),
                ));
            }
        }
        Ok(())
    }
}

/// How a named producer shares its name with the other open producers of
/// that name (Pulsar's `ProducerAccessMode`), in this process and, in
/// shared mode, in every process of the directory.
///
/// Exclusivity is a `flock` on `<dir>/producers/names/<name>.lock`, held
/// while the producer is open and released by the kernel when its process
/// ends, so a crashed holder never blocks the name. Producers of the
/// exclusive modes hold it exclusively, shared producers hold it shared,
/// and [`ExclusiveWithFencing`](Self::ExclusiveWithFencing) producers hold
/// nothing. The rules when modes meet:
///
/// | open producer(s) | new `ExclusiveWithFencing` | new `Exclusive` | new `WaitForExclusive` | new `Shared` |
/// |---|---|---|---|---|
/// | none | new epoch | new epoch | new epoch | new epoch |
/// | `ExclusiveWithFencing` | fences it | fences it | fences it | fences it |
/// | `Exclusive` / `WaitForExclusive` | `ProducerBusy` | `ProducerBusy` | waits | `ProducerBusy` |
/// | `Shared` | `ProducerBusy` | `ProducerBusy` | waits | joins (same epoch) |
///
/// A producer that failed with [`Error::ProducerBusy`] changed nothing:
/// the open ones keep their epoch and keep working.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProducerAccessMode {
    /// The newest producer of the name wins (the default): creating one
    /// gives the name a new epoch, and the older ones fail their next send
    /// with [`Error::ProducerFenced`]. It claims nothing, so any newer
    /// producer of the name fences it, whatever its mode; it cannot be
    /// created while an `Exclusive`, `WaitForExclusive` or `Shared` one is
    /// open ([`Error::ProducerBusy`]).
    #[default]
    ExclusiveWithFencing,
    /// Only one producer of the name at a time: creating one while another
    /// `Exclusive`, `WaitForExclusive` or `Shared` producer of the name is
    /// open fails with [`Error::ProducerBusy`] and changes nothing.
    Exclusive,
    /// As `Exclusive`, but creating one waits until the open producers of
    /// the name close (or their processes end), for at most the producer's
    /// `max_block_ms`; then [`Error::Timeout`].
    WaitForExclusive,
    /// Several producers of the name send at once and none fences another.
    /// They share the name's producer id and epoch (the first one open gets
    /// a new epoch, which fences any `ExclusiveWithFencing` producer; later
    /// ones join it), so the application's sequences
    /// ([`Record::sequence`](super::Record::sequence)) are deduplicated
    /// across all of them: a sequence one of them wrote to a partition is
    /// a duplicate when another sends it there. Records sent without a
    /// sequence get the partition's next number, never a duplicate;
    /// [`ProducerConfig::initial_sequence`] is refused in this mode.
    Shared,
}

impl ProducerAccessMode {
    /// The mode's name: `"exclusive_with_fencing"`, `"exclusive"`,
    /// `"wait_for_exclusive"` or `"shared"` (as Python takes it).
    pub fn as_str(self) -> &'static str {
        match self {
            ProducerAccessMode::ExclusiveWithFencing => "exclusive_with_fencing",
            ProducerAccessMode::Exclusive => "exclusive",
            ProducerAccessMode::WaitForExclusive => "wait_for_exclusive",
            ProducerAccessMode::Shared => "shared",
        }
    }
}

impl std::fmt::Display for ProducerAccessMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ProducerAccessMode {
    type Err = Error;

    /// Parses a name given by [`ProducerAccessMode::as_str`];
    /// [`Error::InvalidArgument`] for anything else.
    fn from_str(s: &str) -> Result<Self> {
        [
            ProducerAccessMode::ExclusiveWithFencing,
            ProducerAccessMode::Exclusive,
            ProducerAccessMode::WaitForExclusive,
            ProducerAccessMode::Shared,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unknown access mode {s:?}: expected \"shared\", \"exclusive\", \
                 \"exclusive_with_fencing\" or \"wait_for_exclusive\""
            ))
        })
    }
}
