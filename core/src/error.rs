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
//!
//! The list of kinds ([`ErrorKind`]) is written once, below: the C status
//! names (`mql_status`) and the Python exception classes (their names,
//! parents and built-in bases) are read from it.

use std::ffi::CStr;
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
    /// A write through a handle opened read-only (`Config::readonly`).
    #[error("{0}: the data directory is opened read-only")]
    ReadOnly(String),

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
    /// An acknowledgement of a share consumer's message was refused: the
    /// message's acquisition lock expired (it may have been delivered
    /// again), or it was acknowledged already.
    #[error("invalid record state: {0}")]
    InvalidRecordState(String),
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
    /// A producer of this name is open in a mode that excludes the new one
    /// (see `ProducerAccessMode`).
    #[error("producer name {name:?} is busy: {reason}")]
    ProducerBusy {
        /// The producer name.
        name: String,
        /// Which open producer excludes the new one.
        reason: String,
    },
    /// A transaction holds more bytes than the producer's
    /// `max_transaction_bytes`, or its part in one partition more than a
    /// segment can.
    #[error("transaction of {size} bytes is larger than the limit of {max}")]
    TransactionTooLarge {
        /// Its size in bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
}

/// Defines [`ErrorKind`] and [`Error::kind`] from the one list of kinds:
/// `Variant = code, C status name, Python class name` and optionally the
/// Python parent kind and built-in base class. Every [`Error`] variant must
/// be listed (`Error::kind` does not compile otherwise).
macro_rules! error_kinds {
    (@opt) => { None };
    (@opt $x:expr) => { Some($x) };
    ($(
        $(#[doc = $doc:literal])+
        $kind:ident = $code:literal, $status:ident, $class:ident
            $(, parent $parent:ident)? $(, also $builtin:ident)?;
    )+) => {
        /// What kind of error an [`Error`] is: its stable code, its name in
        /// C (the `mql_status` value) and in Python (the exception class).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorKind {
            $($(#[doc = $doc])+ $kind = $code,)+
        }

        impl ErrorKind {
            /// Every kind, in code order.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$kind),+];

            /// The stable numeric code, shared with C and Python.
            pub fn code(self) -> i32 {
                self as i32
            }

            /// The kind with the stable code `code`, if there is one.
            pub fn from_code(code: i32) -> Option<ErrorKind> {
                match code {
                    $($code => Some(ErrorKind::$kind),)+
                    _ => None,
                }
            }

            /// The name of the [`Error`] variant, e.g. `"UnknownTopic"`.
            pub fn name(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => stringify!($kind),)+
                }
            }

            /// The C status name, e.g. `"MQL_UNKNOWN_TOPIC"`.
            pub fn status_name(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => stringify!($status),)+
                }
            }

            /// [`ErrorKind::status_name`] as a static C string.
            pub fn status_cstr(self) -> &'static CStr {
                match self {
                    $(ErrorKind::$kind => const {
                        match CStr::from_bytes_with_nul(
                            concat!(stringify!($status), "\0").as_bytes(),
                        ) {
                            Ok(c) => c,
                            Err(_) => panic!("status names have no NUL"),
                        }
                    },)+
                }
            }

            /// The Python exception class name, e.g. `"UnknownTopic"`.
            pub fn class_name(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => stringify!($class),)+
                }
            }

            /// The kind whose Python class is the parent of this one's
            /// (`None`: the root class `mqlite.Error`).
            pub fn class_parent(self) -> Option<ErrorKind> {
                match self {
                    $(ErrorKind::$kind => error_kinds!(@opt $(ErrorKind::$parent)?),)+
                }
            }

            /// The Python built-in exception this kind's class also derives
            /// from, e.g. `"ValueError"`, so that code catching it catches
            /// this kind too.
            pub fn builtin_base(self) -> Option<&'static str> {
                match self {
                    $(ErrorKind::$kind => error_kinds!(@opt $(stringify!($builtin))?),)+
                }
            }

            /// One sentence saying what the kind means.
            pub fn description(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => concat!($($doc),+).trim_ascii(),)+
                }
            }
        }

        impl Error {
            /// The kind of this error.
            pub fn kind(&self) -> ErrorKind {
                match self {
                    $(Error::$kind { .. } => ErrorKind::$kind,)+
                }
            }
        }
    };
}

error_kinds! {
    /// An operating-system I/O error.
    Io = 1, MQL_IO, IoError;
    /// No space left on the disk, or over the file-size limit.
    DiskFull = 2, MQL_DISK_FULL, DiskFull, parent Io;
    /// The data directory is held by another handle, in this process or another.
    Locked = 3, MQL_LOCKED, Locked;
    /// An argument was out of its allowed range or malformed.
    InvalidArgument = 4, MQL_INVALID_ARGUMENT, InvalidArgument, also ValueError;
    /// The handle (broker, producer, consumer) is closed.
    Closed = 5, MQL_CLOSED, Closed;
    /// An operation waited longer than allowed.
    Timeout = 6, MQL_TIMEOUT, Timeout, also TimeoutError;
    /// A write through a handle opened read-only.
    ReadOnly = 7, MQL_READ_ONLY, ReadOnly;
    /// A topic name broke one of the naming rules.
    InvalidTopicName = 100, MQL_INVALID_TOPIC_NAME, InvalidTopicName, parent InvalidArgument;
    /// The topic already exists.
    TopicExists = 101, MQL_TOPIC_EXISTS, TopicExists;
    /// No topic of that name.
    UnknownTopic = 102, MQL_UNKNOWN_TOPIC, UnknownTopic;
    /// A topic configuration value is invalid.
    InvalidConfig = 103, MQL_INVALID_CONFIG, InvalidConfig, parent InvalidArgument;
    /// The partition does not exist in the topic.
    UnknownPartition = 200, MQL_UNKNOWN_PARTITION, UnknownPartition;
    /// The offset is outside the partition's retained range.
    OffsetOutOfRange = 201, MQL_OFFSET_OUT_OF_RANGE, OffsetOutOfRange;
    /// An earlier write or fsync failed; the partition refuses writes until reopened.
    Poisoned = 202, MQL_POISONED, Poisoned;
    /// Data on disk failed a length or CRC check.
    Corrupt = 300, MQL_CORRUPT, Corrupt;
    /// The data was written by a format version this build cannot read.
    UnsupportedVersion = 301, MQL_UNSUPPORTED_VERSION, UnsupportedVersion;
    /// A record is larger than the topic's max_message_bytes.
    MessageTooLarge = 400, MQL_MESSAGE_TOO_LARGE, MessageTooLarge;
    /// The producer's buffer_memory stayed full for max_block_ms.
    BufferFull = 401, MQL_BUFFER_FULL, BufferFull, also BufferError;
    /// A sequence number skipped ahead of the next expected one: records in between were never written.
    OutOfOrderSequence = 402, MQL_OUT_OF_ORDER_SEQUENCE, OutOfOrderSequence;
    /// A newer producer of the same name exists; this one may no longer write.
    ProducerFenced = 403, MQL_PRODUCER_FENCED, ProducerFenced;
    /// A producer of this name is open in a mode that excludes the new one.
    ProducerBusy = 404, MQL_PRODUCER_BUSY, ProducerBusy;
    /// A transaction is larger than max_transaction_bytes, or its part in one partition larger than a segment.
    TransactionTooLarge = 410, MQL_TRANSACTION_TOO_LARGE, TransactionTooLarge;
    /// A commit was refused: a partition is not owned by this group member, because a rebalance gave it to another.
    CommitFailed = 500, MQL_COMMIT_FAILED, CommitFailed;
    /// A share consumer's acknowledgement was refused: the message's lock expired, or it was acknowledged already.
    InvalidRecordState = 501, MQL_INVALID_RECORD_STATE, InvalidRecordState;
}

impl Error {
    /// The stable numeric code of this error kind, shared with C and Python.
    pub fn code(&self) -> i32 {
        self.kind().code()
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
            Error::ReadOnly(s) => Error::ReadOnly(s.clone()),
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
            Error::InvalidRecordState(s) => Error::InvalidRecordState(s.clone()),
            Error::ProducerBusy { name, reason } => Error::ProducerBusy {
                name: name.clone(),
                reason: reason.clone(),
            },
            Error::TransactionTooLarge { size, max } => Error::TransactionTooLarge {
                size: *size,
                max: *max,
            },
        }
    }

    /// Wraps an I/O error with what was being done; `ENOSPC` and `EFBIG`
    /// become [`Error::DiskFull`].
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        let context = context.into();
        match source.raw_os_error() {
            Some(libc::ENOSPC | libc::EFBIG | libc::EDQUOT) => Error::DiskFull { context, source },
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Codes, C names and Python class names are each distinct, every code
    /// finds its kind back, and parents come before their children (so
    /// that bindings can make the classes in list order).
    #[test]
    fn kinds_are_distinct_and_found_back() {
        let mut codes = std::collections::HashSet::new();
        let mut statuses = std::collections::HashSet::new();
        let mut classes = std::collections::HashSet::new();
        for (i, &k) in ErrorKind::ALL.iter().enumerate() {
            assert!(codes.insert(k.code()), "{k:?}");
            assert!(statuses.insert(k.status_name()), "{k:?}");
            assert!(classes.insert(k.class_name()), "{k:?}");
            assert_eq!(ErrorKind::from_code(k.code()), Some(k));
            assert_eq!(k.status_cstr().to_str(), Ok(k.status_name()));
            assert!(k.status_name().starts_with("MQL_"), "{k:?}");
            assert!(!k.description().is_empty() && !k.description().starts_with(' '));
            if let Some(p) = k.class_parent() {
                assert!(ErrorKind::ALL[..i].contains(&p), "{k:?} before its parent");
            }
        }
        assert_eq!(ErrorKind::from_code(0), None);
        assert_eq!(ErrorKind::from_code(8), None);
    }

    #[test]
    fn errors_know_their_kind() {
        let e = Error::UnknownTopic("t".into());
        assert_eq!(e.kind(), ErrorKind::UnknownTopic);
        assert_eq!(e.code(), 102);
        let e = Error::io("x", io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(e.kind(), ErrorKind::DiskFull);
        assert_eq!(e.code(), 2);
        assert_eq!(ErrorKind::DiskFull.class_parent(), Some(ErrorKind::Io));
        assert_eq!(ErrorKind::BufferFull.builtin_base(), Some("BufferError"));
        assert_eq!(ErrorKind::Io.class_name(), "IoError");
    }
}
