//! Choosing a partition: explicit, by key (Kafka's murmur2), sticky,
//! round-robin, or a custom selector.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::BorrowedRecord;
use crate::sync;

/// A custom partition selector (RocketMQ's `MessageQueueSelector`): given the
/// record and the topic's partition count, returns the partition.
pub type Selector = Arc<dyn Fn(&BorrowedRecord<'_>, u32) -> u32 + Send + Sync>;

/// How a producer picks the partition of a record that names none.
///
/// Records with a key always go to `murmur2(key)`'s partition (Kafka's
/// default partitioner), except with [`Partitioner::Custom`], which sees
/// every record without an explicit partition.
#[derive(Clone, Default)]
pub enum Partitioner {
    /// Kafka 3.3+'s sticky partitioner: records without a key stay on one
    /// partition until `batch_size` bytes went there (or its batch was
    /// sent), then move to another one at random.
    #[default]
    Sticky,
    /// RocketMQ's default: records without a key take the partitions in turn.
    RoundRobin,
    /// A custom selector.
    Custom(Selector),
}

impl fmt::Debug for Partitioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partitioner::Sticky => f.write_str("Sticky"),
            Partitioner::RoundRobin => f.write_str("RoundRobin"),
            Partitioner::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl Partitioner {
    /// A custom selector from a closure.
    pub fn custom(f: impl Fn(&BorrowedRecord<'_>, u32) -> u32 + Send + Sync + 'static) -> Self {
        Partitioner::Custom(Arc::new(f))
    }

    /// The name used in configuration: `sticky`, `round_robin` or `custom`.
    pub fn name(&self) -> &'static str {
        match self {
            Partitioner::Sticky => "sticky",
            Partitioner::RoundRobin => "round_robin",
            Partitioner::Custom(_) => "custom",
        }
    }
}

impl std::str::FromStr for Partitioner {
    type Err = crate::Error;

    /// `sticky` or `round_robin` (`round-robin` and `roundrobin` too).
    fn from_str(s: &str) -> crate::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "sticky" => Ok(Partitioner::Sticky),
            "round_robin" | "round-robin" | "roundrobin" => Ok(Partitioner::RoundRobin),
            _ => Err(crate::Error::InvalidArgument(format!(
                "unknown partitioner {s:?}: use \"sticky\", \"round_robin\" or a custom selector"
            ))),
        }
    }
}

/// Kafka's murmur2 hash (the 32-bit MurmurHash2 variant with seed
/// `0x9747b28c` used by Kafka's default partitioner).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for `key` among
/// `partitions`: `(murmur2(key) & 0x7fffffff) % partitions`.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions
}

/// Per-producer state of the key-less choices.
#[derive(Debug, Default)]
pub(crate) struct PartitionChooser {
    round_robin: AtomicU32,
    rng: AtomicU64,
    /// Sticky choice per topic: (partition, bytes sent to it).
    sticky: Mutex<HashMap<Arc<str>, (u32, usize)>>,
}

impl PartitionChooser {
    fn random(&self) -> u32 {
        // xorshift64*, seeded lazily from the clock; quality is not critical.
        let mut x = self.rng.load(Ordering::Relaxed);
        if x == 0 {
            x = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64)
                | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    /// The next round-robin partition.
    pub(crate) fn round_robin(&self, count: u32) -> u32 {
        self.round_robin.fetch_add(1, Ordering::Relaxed) % count
    }

    /// The sticky partition of `topic`, counting `bytes` against it; moves
    /// on once `batch_size` bytes went there.
    pub(crate) fn sticky(
        &self,
        topic: &Arc<str>,
        count: u32,
        bytes: usize,
        batch_size: usize,
    ) -> u32 {
        let mut map = sync::lock(&self.sticky);
        if let Some((p, sent)) = map.get_mut(&**topic) {
            if *p < count && *sent < batch_size {
                *sent += bytes;
                return *p;
            }
            let old = *p;
            let mut next = self.random() % count;
            if count > 1 && next == old {
                next = (next + 1) % count;
            }
            *p = next;
            *sent = bytes;
            return next;
        }
        let p = self.random() % count;
        map.insert(Arc::clone(topic), (p, bytes));
        p
    }

    /// Forgets the sticky choice of `topic` if it is `partition` (its batch
    /// was sent), so the next key-less record picks a new one.
    pub(crate) fn batch_sent(&self, topic: &str, partition: u32) {
        let mut map = sync::lock(&self.sticky);
        if let Some((p, sent)) = map.get_mut(topic) {
            if *p == partition {
                *sent = usize::MAX;
            }
        }
    }
}

/// Partitions a producer avoids after a fault (RocketMQ's latency fault
/// tolerance): key-less records are sent elsewhere until the partition's
/// back-off ends.
#[derive(Debug, Default)]
pub(crate) struct Avoided {
    /// Entries in `until` (a cheap check on every key-less send).
    count: std::sync::atomic::AtomicUsize,
    /// When each avoided partition may be used again.
    until: Mutex<HashMap<(Arc<str>, u32), std::time::Instant>>,
}

impl Avoided {
    /// Avoids `partition` of `topic` for `backoff`. Returns whether it was
    /// not avoided already.
    pub(crate) fn avoid(&self, topic: &Arc<str>, partition: u32, backoff: Duration) -> bool {
        let now = Instant::now();
        let mut m = sync::lock(&self.until);
        m.retain(|_, t| *t > now);
        let fresh = m
            .insert((Arc::clone(topic), partition), now + backoff)
            .is_none_or(|t| t <= now);
        self.count.store(m.len(), Ordering::Release);
        fresh
    }

    /// `partition`, or when it is avoided the next partition of `topic`
    /// that is not (the one whose back-off ends first if all are).
    #[inline]
    pub(crate) fn steer(&self, topic: &str, count: u32, partition: u32) -> u32 {
        if self.count.load(Ordering::Acquire) == 0 {
            return partition;
        }
        self.steer_slow(topic, count, partition)
    }

    #[cold]
    fn steer_slow(&self, topic: &str, count: u32, partition: u32) -> u32 {
        let now = Instant::now();
        let m = sync::lock(&self.until);
        let until = |p: u32| {
            m.iter()
                .find(|((t, q), _)| *q == p && &**t == topic)
                .map(|(_, u)| *u)
                .filter(|u| *u > now)
        };
        let mut best: Option<(Instant, u32)> = None;
        for i in 0..count {
            let p = (partition + i) % count;
            match until(p) {
                None => return p,
                Some(u) => {
                    if best.is_none_or(|(b, _)| u < b) {
                        best = Some((u, p));
                    }
                }
            }
        }
        best.map_or(partition, |(_, p)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's own vectors (`UtilsTest.testMurmur2`).
    #[test]
    fn murmur2_matches_kafka() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key), want, "{:?}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn sticky_stays_until_batch_size_then_moves() {
        let c = PartitionChooser::default();
        let t: Arc<str> = Arc::from("t");
        let first = c.sticky(&t, 8, 100, 1000);
        for _ in 0..9 {
            assert_eq!(c.sticky(&t, 8, 100, 1000), first);
        }
        let next = c.sticky(&t, 8, 100, 1000);
        assert_ne!(next, first, "moves once batch_size bytes went there");
        c.batch_sent("t", next);
        assert_ne!(
            c.sticky(&t, 8, 100, 1000),
            next,
            "moves when its batch is sent"
        );
    }

    #[test]
    fn round_robin_takes_turns() {
        let c = PartitionChooser::default();
        let got: Vec<u32> = (0..6).map(|_| c.round_robin(3)).collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn avoided_partitions_are_skipped_until_their_back_off_ends() {
        let a = Avoided::default();
        let t: Arc<str> = Arc::from("t");
        assert_eq!(a.steer("t", 3, 1), 1);
        assert!(a.avoid(&t, 1, Duration::from_secs(60)));
        assert!(!a.avoid(&t, 1, Duration::from_secs(60)), "already avoided");
        assert_eq!(a.steer("t", 3, 1), 2);
        assert_eq!(a.steer("t", 3, 0), 0);
        assert_eq!(a.steer("u", 3, 1), 1, "another topic's partition 1");
        assert!(a.avoid(&t, 2, Duration::from_secs(30)));
        assert!(a.avoid(&t, 0, Duration::from_secs(90)));
        // All avoided: the one whose back-off ends first.
        assert_eq!(a.steer("t", 3, 1), 2);
        a.avoid(&t, 2, Duration::ZERO);
        assert_eq!(a.steer("t", 3, 1), 2, "back-off over");
    }
}
