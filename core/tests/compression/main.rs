//! Compressed batches (codecs gzip, snappy, lz4 and zstd): the framed block
//! round-trips through `check`, `records_section` and the record decoder;
//! the CRC catches every flip; damaged or lying blocks with a valid CRC are
//! errors, never panics; and whole partitions of compressed batches read
//! back through the consumer, the time search and the raw scan, across a
//! reopen.
//!
//! The format (see `docs/FORMAT.md`, "Compressed batches"): attribute bits
//! 0-2 name the codec; the records section is stored right after the 61-byte
//! header as `uncompressed_len u32 LE, compressed_len u32 LE, data`, then
//! zero padding to a multiple of 8 bytes; `length` and the CRC cover it all.
#![allow(clippy::unwrap_used)]

#[path = "../common/mod.rs"]
mod common;
mod framing;
mod partitions;
mod producers;

use std::io::{Read, Write};
use std::time::Duration;

use common::{batches, cfg, read_partition, segment_logs, Msg, Rng};
use framing::*;
use mqlite::log::batch::{
    batch_len, check, decode_headers, encode_batch, records_section, BatchHeader, Check,
    ProducerFields, RecordRef, Records, ALIGN, CODEC_MASK, HEADER_LEN, LENGTH_PREFIX,
    MAGIC_COMPACT,
};
use mqlite::log::compression::{
    compress_records, decompress_records, parse_framing, FRAMING_LEN, MAX_UNCOMPRESSED_LEN,
};
use mqlite::{
    Broker, Compression, Config, ConsumerConfig, Error, Header, OffsetReset, OpenMode, TopicConfig,
};
use partitions::*;
use proptest::prelude::*;

/// Exclusive mode, by name: for the tests that rewrite or damage segment files
/// as that mode lays them out, and check what its open makes of them
/// (docs/decisions.md, "A data directory's mode by name").
fn exclusive() -> Config {
    cfg().mode(OpenMode::Exclusive)
}

pub(crate) const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];
