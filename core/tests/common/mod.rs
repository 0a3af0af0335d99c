//! Helpers shared by the integration tests (each test file is its own crate
//! and uses a different subset, hence the `dead_code` allowance).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use mqlite::{Broker, Config, ConsumerConfig, Header, Message, MessageRef, OffsetReset, Result};

/// A broker config for tests: no prefaulting (it only costs time here) and no
/// background retention thread (tests call `enforce_retention` or rely on
/// rolls, so runs are deterministic).
pub fn cfg() -> Config {
    Config::default()
        .prefault(false)
        .retention_check_interval_ms(0)
}

/// An owned copy of a consumed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub partition: u32,
    pub offset: u64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
}

impl From<&Message> for Msg {
    fn from(m: &Message) -> Msg {
        Msg {
            partition: m.partition(),
            offset: m.offset(),
            timestamp: m.timestamp(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.value().map(<[u8]>::to_vec),
            headers: m.headers(),
        }
    }
}

impl From<MessageRef<'_>> for Msg {
    fn from(m: MessageRef<'_>) -> Msg {
        Msg {
            partition: m.partition(),
            offset: m.offset(),
            timestamp: m.timestamp(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.value().map(<[u8]>::to_vec),
            headers: m.headers(),
        }
    }
}

/// Every message of `topic`/`partition` from its start to its current end,
/// read through a fresh consumer. Fails on any consumer error (for example
/// [`mqlite::Error::Corrupt`]).
pub fn read_partition(mq: &Broker, topic: &str, partition: u32) -> Result<Vec<Msg>> {
    let end = mq.topic(topic)?.partitions[partition as usize].end_offset;
    let mut c = mq.consumer(
        ConsumerConfig::default()
            .auto_offset_reset(OffsetReset::Earliest)
            .max_poll_records(100_000),
    )?;
    c.assign(&[(topic, partition)])?;
    let mut out: Vec<Msg> = Vec::new();
    while out.last().map_or(0, |m| m.offset + 1) < end {
        let batch = c.poll(Duration::ZERO)?;
        if batch.is_empty() {
            break; // the caller's comparison reports what is missing
        }
        out.extend(batch.iter().map(Msg::from));
    }
    Ok(out)
}

/// The directory of one partition's segment files.
pub fn partition_dir(data: &Path, topic: &str, partition: u32) -> PathBuf {
    data.join("topics").join(topic).join(partition.to_string())
}

/// Paths of the `.log` files of a partition, oldest first.
pub fn segment_logs(data: &Path, topic: &str, partition: u32) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(partition_dir(data, topic, partition))
        .expect("partition directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

/// Files in a partition directory whose name ends with `suffix`.
pub fn files_ending(data: &Path, topic: &str, partition: u32, suffix: &str) -> Vec<PathBuf> {
    match std::fs::read_dir(partition_dir(data, topic, partition)) {
        Ok(rd) => rd
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.to_string_lossy().ends_with(suffix))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// A batch found by walking a segment file: `(position, base_offset,
/// next_offset, total_len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub pos: usize,
    pub base: u64,
    pub next: u64,
    pub len: usize,
}

impl Span {
    pub fn end(&self) -> usize {
        self.pos + self.len
    }
}

/// Walks the valid batches at the start of `bytes` (a segment file's
/// content) with the public format checker.
pub fn batches(bytes: &[u8]) -> Vec<Span> {
    use mqlite::log::batch::{check, Check};
    let mut v = Vec::new();
    let mut pos = 0;
    while let Check::Valid(h) = check(&bytes[pos..]) {
        v.push(Span {
            pos,
            base: h.base_offset,
            next: h.next_offset(),
            len: h.total_len(),
        });
        pos += h.total_len();
    }
    v
}

/// A small deterministic PRNG (splitmix64), so failures can be replayed from
/// a printed seed without extra dependencies.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A seed from the environment variable `var`, or from the clock.
    pub fn seed_from_env(var: &str) -> u64 {
        std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            })
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}
