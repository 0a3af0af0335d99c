//! mqlite: an embeddable, in-process, persistent message-queue engine.
//!
//! Topics split into partitions; each partition is an append-only commit log
//! of memory-mapped segment files, every record batch checked with CRC32C.
//! There is no server: open a data directory and produce and consume in your
//! own process.
//!
//! ```no_run
//! use std::time::Duration;
//! use mqlite::{Broker, Config, ConsumerConfig, ProducerConfig, Record, TopicConfig};
//!
//! # fn main() -> mqlite::Result<()> {
//! let mq = Broker::open("data", Config::default())?;
//! mq.create_topic("orders", TopicConfig::new(4))?;
//! let producer = mq.producer(ProducerConfig::default())?;
//! let md = producer.send(Record::new("orders").key("o-1").value("paid"))?;
//! println!("written at {}/{}", md.partition, md.offset);
//!
//! let mut consumer = mq.consumer(ConsumerConfig::group("billing"))?;
//! consumer.subscribe(&["orders"])?;
//! for msg in consumer.poll(Duration::from_millis(100))? {
//!     println!("{:?} = {:?} at {}", msg.key(), msg.value(), msg.offset());
//! }
//! # Ok(())
//! # }
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod assign;
mod atomic_file;
mod background;
mod broker;
mod clock;
mod consumer;
mod dead_letter;
mod dedup;
pub mod delayed;
mod error;
#[doc(hidden)]
pub mod faults;
mod files;
mod group;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kafka")]
pub use kafka::mirror::{Mirror, MirrorOptions, MirrorStats};
mod le_reader;
pub mod log;
mod message;
mod message_id;
mod offsets;
mod partition_handle;
mod private_dir;
mod processor;
mod producer;
#[doc(hidden)]
pub mod raw;
mod seqranges;
mod share_group;
mod shared;
#[doc(hidden)]
pub mod sync;
mod topic;
mod txn;

pub use assign::{
    assign, assign_consistent_hash, moved, Assignment, AssignmentStrategy, MemberInfo,
    TopicPartition, DEFAULT_VIRTUAL_NODES,
};
pub use broker::{
    Broker, Config, GroupInfo, GroupMember, OpenMode, DEFAULT_MAX_COMMIT_METADATA_BYTES,
    DEFAULT_MAX_OPEN_FILES, LOCK_FILE,
};
pub use consumer::{
    Consumer, ConsumerConfig, ConsumerStats, ConsumerWaker, IsolationLevel, OffsetReset,
    RebalanceContext, RebalanceListener,
};
pub use dedup::{validate_producer_name, DEFAULT_DEDUP_WINDOW, MAX_PRODUCER_NAME_LEN};
pub use error::{Error, ErrorKind, Result};
pub use log::batch::Header;
pub use log::compression::Compression;
pub use log::RecoveryStats;
pub use message::{Message, MessageBatch, MessageIter, MessageRef};
pub use message_id::{MessageId, MAX_MESSAGE_ID_LEN};
pub use offsets::{read_committed_offsets, CommittedOffset, MAX_GROUP_NAME_LEN};
pub use processor::{ProcessingMode, Processor, ProcessorConfig, ProcessorStats, ProcessorStop};
/// The headers a dead letter gains (see [`ProcessorConfig::dead_letter_topic`]).
pub mod dead_letters {
    pub use crate::dead_letter::{
        DELIVERIES_HEADER, OFFSET_HEADER, PARTITION_HEADER, REASON_HEADER, TOPIC_HEADER,
    };
}
pub use producer::ProducerAccessMode;
pub use producer::{
    murmur2, partition_for_key, Acks, BorrowedRecord, DeliveryCallback, Partitioner, Producer,
    ProducerConfig, ProducerInterceptor, ProducerStats, Record, RecordMetadata, Selector,
    Transaction,
};
pub use share_group::{
    default_dead_letter_topic, ShareBacklog, ShareConsumer, ShareConsumerConfig,
    ShareConsumerStats, ShareMessage,
};
pub use topic::{validate_topic_name, PartitionInfo, TopicConfig, TopicInfo, MAX_TOPIC_NAME_LEN};
