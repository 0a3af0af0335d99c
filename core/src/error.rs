//! The crate's one error type.
//!
//! Every variant has a stable numeric [`Error::code`], shared with the C ABI
//! (`MQL_*` status codes) and the Python exception classes. Codes are
//! allocated in blocks per domain and never reused:
//!
//! | block | domain |
//! |-------|--------|
//! | 1-99 | general: I/O, locking, arguments, closed handles |
//! | 100-199 | topics |
//! | 200-299 | partitions |
//! | 300-399 | segments and the on-disk format |
//! | 400-499 | producers |
//! | 500-599 | consumers and groups |

use std::io;
use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in mqlite.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with what was being done.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What mqlite was doing when the error happened.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The disk (or the process's file-size limit) has no room for the write.
    #[error("no space left while {context}: {source}")]
    DiskFull {
        /// What mqlite was doing when the error happened.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The data directory is held by another handle (in this process or another).
    #[error("data directory {path} is locked by {holder}")]
    Locked {
        /// The data directory.
        path: PathBuf,
        /// Who holds it, e.g. `process 1234`.
        holder: String,
    },
    /// An argument was out of its allowed range or malformed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The handle (broker, producer, consumer) was closed.
    #[error("{0} is closed")]
    Closed(&'static str),
    /// An operation waited longer than allowed.
    #[error("timed out after {0} ms")]
    Timeout(u64),

    /// A topic name broke one of the naming rules.
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopicName {
        /// The rejected name.
        name: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// The topic already exists.
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    /// No topic of that name.
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    /// A topic configuration value is invalid.
    #[error("invalid topic config: {0}")]
    InvalidConfig(String),

    /// The partition does not exist in the topic.
    #[error("unknown partition {partition} of topic {topic:?} (it has {count})")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The requested partition.
        partition: u32,
        /// How many partitions the topic has.
        count: u32,
    },
    /// The requested offset is outside the partition's retained range.
    #[error("offset {offset} out of range for {topic}/{partition} (valid {start}..={end})")]
    OffsetOutOfRange {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The requested offset.
        offset: u64,
        /// First retained offset.
        start: u64,
        /// Next offset to be written.
        end: u64,
    },
    /// A previous fsync failed; the partition refuses writes until reopened.
    #[error("partition {topic}/{partition} is poisoned by an earlier write or fsync failure; reopen the data directory")]
    Poisoned {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
    },

    /// Data on disk failed a length or CRC check.
    #[error("corrupt data in {path} at byte {position}: {reason}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte position of the damage.
        position: u64,
        /// What check failed.
        reason: String,
    },
    /// The data was written by a format version this build cannot read.
    #[error("unsupported format version {found} in {path} (this build reads {supported})")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The version this build supports.
        supported: u32,
    },

    /// A record or batch is larger than the topic's `max_message_bytes`.
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// Encoded size of the batch.
        size: usize,
        /// The topic's limit.
        max: usize,
    },
    /// The producer's `buffer_memory` stayed full for `max_block_ms`.
    #[error(
        "producer buffer full: {buffered} of {limit} bytes still held after waiting {waited_ms} ms"
    )]
    BufferFull {
        /// Bytes held when giving up.
        buffered: usize,
        /// The producer's `buffer_memory`.
        limit: usize,
        /// How long the send waited.
        waited_ms: u64,
    },
    /// A sequence number skipped ahead of the next expected one (a gap: some
    /// records in between were never written).
    #[error(
        "out-of-order sequence for {topic}/{partition}: expected {expected}, received {received}"
    )]
    OutOfOrderSequence {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The next sequence the partition expected.
        expected: i64,
        /// The sequence that came.
        received: i64,
    },
    /// A commit was refused: the member no longer owns a partition it
    /// commits (a rebalance gave it to another member).
    #[error("commit failed: {0}")]
    CommitFailed(String),
    /// A newer producer with the same name (a higher epoch) exists; this one
    /// may no longer write.
    #[error("producer {producer_id} with epoch {epoch} is fenced by epoch {current_epoch}")]
    ProducerFenced {
        /// The producer id.
        producer_id: i64,
        /// This producer's epoch.
        epoch: i16,
        /// The newest epoch.
        current_epoch: i16,
    },
}

impl Error {
    /// The stable numeric code of this error kind, shared with C and Python.
    pub fn code(&self) -> i32 {
        match self {
            Error::Io { .. } => 1,
            Error::DiskFull { .. } => 2,
            Error::Locked { .. } => 3,
            Error::InvalidArgument(_) => 4,
            Error::Closed(_) => 5,
            Error::Timeout(_) => 6,
            Error::InvalidTopicName { .. } => 100,
            Error::TopicExists(_) => 101,
            Error::UnknownTopic(_) => 102,
            Error::InvalidConfig(_) => 103,
            Error::UnknownPartition { .. } => 200,
            Error::OffsetOutOfRange { .. } => 201,
            Error::Poisoned { .. } => 202,
            Error::Corrupt { .. } => 300,
            Error::UnsupportedVersion { .. } => 301,
            Error::MessageTooLarge { .. } => 400,
            Error::BufferFull { .. } => 401,
            Error::OutOfOrderSequence { .. } => 402,
            Error::ProducerFenced { .. } => 403,
            Error::CommitFailed(_) => 500,
        }
    }

    /// A copy of this error for a second receiver (several delivery
    /// callbacks of one failed batch). I/O sources keep their kind and text.
    pub fn duplicate(&self) -> Error {
        let io = |s: &io::Error| io::Error::new(s.kind(), s.to_string());
        match self {
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: io(source),
            },
            Error::DiskFull { context, source } => Error::DiskFull {
                context: context.clone(),
                source: io(source),
            },
            Error::Locked { path, holder } => Error::Locked {
                path: path.clone(),
                holder: holder.clone(),
            },
            Error::InvalidArgument(s) => Error::InvalidArgument(s.clone()),
            Error::Closed(s) => Error::Closed(s),
            Error::Timeout(ms) => Error::Timeout(*ms),
            Error::InvalidTopicName { name, reason } => Error::InvalidTopicName {
                name: name.clone(),
                reason,
            },
            Error::TopicExists(s) => Error::TopicExists(s.clone()),
            Error::UnknownTopic(s) => Error::UnknownTopic(s.clone()),
            Error::InvalidConfig(s) => Error::InvalidConfig(s.clone()),
            Error::UnknownPartition {
                topic,
                partition,
                count,
            } => Error::UnknownPartition {
                topic: topic.clone(),
                partition: *partition,
                count: *count,
            },
            Error::OffsetOutOfRange {
                topic,
                partition,
                offset,
                start,
                end,
            } => Error::OffsetOutOfRange {
                topic: topic.clone(),
                partition: *partition,
                offset: *offset,
                start: *start,
                end: *end,
            },
            Error::Poisoned { topic, partition } => Error::Poisoned {
                topic: topic.clone(),
                partition: *partition,
            },
            Error::Corrupt {
                path,
                position,
                reason,
            } => Error::Corrupt {
                path: path.clone(),
                position: *position,
                reason: reason.clone(),
            },
            Error::UnsupportedVersion {
                path,
                found,
                supported,
            } => Error::UnsupportedVersion {
                path: path.clone(),
                found: *found,
                supported: *supported,
            },
            Error::MessageTooLarge { size, max } => Error::MessageTooLarge {
                size: *size,
                max: *max,
            },
            Error::BufferFull {
                buffered,
                limit,
                waited_ms,
            } => Error::BufferFull {
                buffered: *buffered,
                limit: *limit,
                waited_ms: *waited_ms,
            },
            Error::OutOfOrderSequence {
                topic,
                partition,
                expected,
                received,
            } => Error::OutOfOrderSequence {
                topic: topic.clone(),
                partition: *partition,
                expected: *expected,
                received: *received,
            },
            Error::ProducerFenced {
                producer_id,
                epoch,
                current_epoch,
            } => Error::ProducerFenced {
                producer_id: *producer_id,
                epoch: *epoch,
                current_epoch: *current_epoch,
            },
            Error::CommitFailed(s) => Error::CommitFailed(s.clone()),
        }
    }

    /// Wraps an I/O error with what was being done; `ENOSPC` and `EFBIG`
    /// become [`Error::DiskFull`].
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        let context = context.into();
        match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EFBIG) | Some(libc::EDQUOT) => {
                Error::DiskFull { context, source }
            }
            _ => Error::Io { context, source },
        }
    }
}

/// Adds context to `io::Result`s.
pub(crate) trait IoContext<T> {
    /// Converts the error with [`Error::io`], computing the context lazily.
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(context(), e))
    }
}
