//! The copy loop: read the source, map each record to its destination
//! partition, write with the copy's headers, wait for the destination,
//! repeat.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::resume::ByKey;
use super::{
    Live, MirrorOptions, MIRROR_COPIED_HEADER, MIRROR_OFFSET_HEADER, MIRROR_PARTITION_HEADER,
    MIRROR_PROGRESS_HEADER,
};
use crate::error::{Error, Result};
use crate::kafka::{KafkaBroker, KafkaConsumer};
use crate::log::batch::Header;
use crate::message::Message;
use crate::producer::{partition_for_key, BorrowedRecord};
use crate::sync::lock;
use crate::{Broker, ConsumerConfig};

/// How often a continuous copy asks the source for its partitions' ends
/// (for the lag in its stats) while records keep coming.
const ENDS_EVERY: Duration = Duration::from_secs(1);

/// How records find their destination partition.
#[derive(Debug, Clone)]
pub(super) enum Mapping {
    /// Each record to the partition of its own number.
    OneToOne,
    /// Counts differ: a record with a key to its key's partition among
    /// `partitions` (murmur2, as producers place keys, so each key keeps
    /// its order), one without to its source partition's number modulo
    /// `partitions` (so such records of one source partition keep their
    /// order); `resume` says what is in the destination already.
    ByKey {
        /// The destination's partition count.
        partitions: u32,
        /// What earlier copies wrote.
        resume: ByKey,
    },
}

impl Mapping {
    /// The destination partition of `m`.
    pub fn dest(&self, m: &Message) -> u32 {
        match self {
            Mapping::OneToOne => m.partition(),
            Mapping::ByKey { partitions, .. } => m.key().map_or_else(
                || m.partition() % partitions,
                |k| partition_for_key(k, *partitions),
            ),
        }
    }
}

/// Where a copy starts: what to read and how to write it.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    /// Per source partition, the next offset to copy.
    pub next: Vec<u64>,
    /// Per source partition, its end offset when the copy started.
    pub ends: Vec<u64>,
    /// Where records go.
    pub mapping: Mapping,
}

/// What the copy loop reads from.
pub(super) trait Source {
    /// The next messages, in order per partition.
    fn poll(&mut self, timeout: Duration) -> Result<Vec<Message>>;
    /// The next offset this source will read from partition `p`.
    fn position(&mut self, p: u32) -> Result<u64>;
    /// The partition's end offset now (as far as the source can tell).
    fn end(&mut self, p: u32) -> Result<u64>;
    /// Whether a copy `once` is done with partition `p`.
    fn done(&mut self, p: u32) -> Result<bool>;
}

/// A topic of a data directory, read by a consumer of no group.
pub(super) struct DirSource<'a> {
    pub dir: &'a Broker,
    pub topic: &'a str,
    pub consumer: crate::Consumer,
    /// Each partition's end when the copy started.
    pub ends: Vec<u64>,
}

impl Source for DirSource<'_> {
    fn poll(&mut self, timeout: Duration) -> Result<Vec<Message>> {
        self.consumer.poll(timeout)
    }
    fn position(&mut self, p: u32) -> Result<u64> {
        self.consumer.position(self.topic, p)
    }
    fn end(&mut self, p: u32) -> Result<u64> {
        let info = self.dir.topic(self.topic)?;
        Ok(info
            .partitions
            .get(p as usize)
            .map_or(0, |pi| pi.end_offset))
    }
    fn done(&mut self, p: u32) -> Result<bool> {
        Ok(self.consumer.position(self.topic, p)? >= self.ends[p as usize])
    }
}

/// A topic of a cluster, read by a consumer of no group that knows when
/// it reached each partition's end.
pub(super) struct ClusterSource<'a> {
    pub topic: &'a str,
    pub consumer: KafkaConsumer,
    /// Each partition's end offset when last asked (asking the cluster
    /// takes a round trip per partition: [`watch_ends`] does it on a
    /// thread of its own).
    pub ends: &'a Mutex<Vec<u64>>,
}

impl Source for ClusterSource<'_> {
    fn poll(&mut self, timeout: Duration) -> Result<Vec<Message>> {
        self.consumer.poll(timeout)
    }
    fn position(&mut self, p: u32) -> Result<u64> {
        self.consumer.position(self.topic, p)
    }
    fn end(&mut self, p: u32) -> Result<u64> {
        if self.consumer.at_end(p) {
            // Read to its end: nothing left, whatever the last answer said.
            return Ok(0);
        }
        Ok(lock(self.ends).get(p as usize).copied().unwrap_or(0))
    }
    fn done(&mut self, p: u32) -> Result<bool> {
        Ok(self.consumer.at_end(p))
    }
}

/// Asks `cluster` for the end offsets of `topic`'s partitions about every
/// [`ENDS_EVERY`] into `ends`, until `stop` is set.
pub(super) fn watch_ends(
    cluster: &KafkaBroker,
    topic: &str,
    ends: &Mutex<Vec<u64>>,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Acquire) {
        if let Ok(info) = cluster.topic(topic) {
            *lock(ends) = info.partitions.iter().map(|p| p.end_offset).collect();
        }
        let until = Instant::now() + ENDS_EVERY;
        while Instant::now() < until && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The messages of `topic`/`partition` of a directory from `from` up to
/// `end`.
pub(super) fn read_dir(
    dir: &Broker,
    topic: &str,
    partition: u32,
    from: u64,
    end: u64,
) -> Result<Vec<Message>> {
    let mut c = dir.consumer(ConsumerConfig::default())?;
    c.assign(&[(topic, partition)])?;
    c.seek(topic, partition, from)?;
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.position(topic, partition)? < end {
        out.extend(c.poll(Duration::from_millis(100))?);
        if Instant::now() > deadline {
            return Err(Error::Timeout(30_000));
        }
    }
    Ok(out)
}

/// The messages of `topic`/`partition` of a cluster from `from` to its
/// end (as its fetch answers say: see [`KafkaConsumer::reading_to_end`]).
pub(super) fn read_cluster(
    cluster: &KafkaBroker,
    topic: &str,
    partition: u32,
    from: u64,
) -> Result<Vec<Message>> {
    let mut c = KafkaConsumer::reading_to_end(cluster, 500)?;
    c.assign_from(&[(topic, partition, Some(from))])?;
    let mut out = Vec::new();
    let deadline = Instant::now() + cluster.request_timeout();
    while !c.at_end(partition) {
        out.extend(c.poll(Duration::from_millis(100))?);
        if Instant::now() > deadline {
            return Err(Error::Timeout(cluster.request_timeout().as_millis() as u64));
        }
    }
    Ok(out)
}

/// The records of one write: the messages of `msgs` that are not in the
/// destination yet, each with its destination partition and the copy's
/// headers (`low` is every source partition's next offset to copy before
/// this write: the progress the last record of each destination
/// partition carries when partitions map by key).
fn write_of(msgs: &[Message], mapping: &Mapping, low: &[u64]) -> Vec<(u32, Vec<Header>)> {
    let mut out: Vec<(u32, Vec<Header>)> = Vec::with_capacity(msgs.len());
    for m in msgs {
        let d = mapping.dest(m);
        let mut h = m.headers();
        h.retain(|h| !super::replaced_header(&h.key));
        h.push(Header::new(MIRROR_OFFSET_HEADER, m.offset().to_string()));
        if let Mapping::ByKey { resume, .. } = mapping {
            if resume.copied(m.partition(), d, m.offset()) {
                // Written by a copy cut short; keep the slot so the run's
                // indexes still match.
                out.push((u32::MAX, Vec::new()));
                continue;
            }
            h.push(Header::new(
                MIRROR_PARTITION_HEADER,
                m.partition().to_string(),
            ));
        }
        out.push((d, h));
    }
    if let Mapping::ByKey { resume, .. } = mapping {
        let progress = low.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let mut seen = std::collections::HashSet::new();
        for (d, h) in out.iter_mut().rev() {
            if *d != u32::MAX && seen.insert(*d) {
                h.push(Header::new(MIRROR_PROGRESS_HEADER, progress.clone()));
                if let Some(copied) = resume.copied_above(*d, low) {
                    h.push(Header::new(MIRROR_COPIED_HEADER, copied));
                }
            }
        }
    }
    out
}

/// Whether a copy `once` is done with every partition of `source`.
fn all_done(source: &mut dyn Source, n: u32) -> Result<bool> {
    for p in 0..n {
        if !source.done(p)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Copies from `source` to `send` (a write to the destination that
/// returns once acknowledged) from `plan` until `options` says to stop,
/// keeping `live` up to date.
pub(super) fn copy(
    topic: &str,
    source: &mut dyn Source,
    send: &mut dyn FnMut(&[BorrowedRecord<'_>]) -> Result<()>,
    plan: Plan,
    options: &MirrorOptions,
    live: &Live,
) -> Result<()> {
    let Plan {
        mut next,
        ends,
        mapping,
    } = plan;
    let n = next.len() as u32;
    live.begin(&next, &ends);
    let mut looked = Instant::now();
    loop {
        if options.stop.load(Ordering::Acquire) {
            break;
        }
        if options.once && all_done(source, n)? {
            break;
        }
        let msgs = source.poll(options.poll_timeout)?;
        // One write per chunk of the poll, whatever its partitions: each
        // waits for the destination once.
        for chunk in msgs.chunks(options.max_batch.max(1)) {
            let write = write_of(chunk, &mapping, &next);
            let records: Vec<BorrowedRecord<'_>> = chunk
                .iter()
                .zip(&write)
                .filter(|(_, (d, _))| *d != u32::MAX)
                .map(|(m, (d, h))| BorrowedRecord {
                    topic,
                    partition: Some(*d),
                    key: m.key(),
                    value: m.value(),
                    headers: h,
                    timestamp: Some(m.timestamp()),
                    sequence: None,
                })
                .collect();
            if !records.is_empty() {
                send(&records)?;
            }
            for m in chunk {
                next[m.partition() as usize] = m.offset() + 1;
            }
            live.wrote(records.len() as u64, &next);
        }
        if msgs.is_empty() || looked.elapsed() >= ENDS_EVERY {
            for p in 0..n {
                live.end(p, source.end(p)?);
            }
            looked = Instant::now();
        }
    }
    for p in 0..n {
        // Offsets without records (transaction markers) move the position
        // past the last copied record.
        next[p as usize] = next[p as usize].max(source.position(p)?);
    }
    live.wrote(0, &next);
    for p in 0..n {
        live.end(p, source.end(p)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn msg(p: u32, offset: u64, key: Option<&[u8]>) -> Message {
        let topic: Arc<str> = "t".into();
        Message::from_fields(&topic, p, offset, 0, key, Some(b"v"), &[])
    }

    #[test]
    fn by_key_each_destination_partition_ends_with_the_progress() {
        let mapping = Mapping::ByKey {
            partitions: 2,
            resume: ByKey::new(3),
        };
        // Source partition 2, three records: two without a key (to 0),
        // and one with a key.
        let key = b"k1";
        let kd = partition_for_key(key, 2);
        let run = [msg(2, 10, None), msg(2, 11, Some(key)), msg(2, 12, None)];
        let w = write_of(&run, &mapping, &[5, 6, 10]);
        let ds: Vec<u32> = w.iter().map(|(d, _)| *d).collect();
        assert_eq!(ds, vec![0, kd, 0]);
        let has_progress = |h: &[Header]| {
            h.iter()
                .any(|h| h.key == MIRROR_PROGRESS_HEADER && h.value == b"5,6,10")
        };
        assert_eq!(
            w.iter().map(|(_, h)| has_progress(h)).collect::<Vec<_>>(),
            if kd == 0 {
                vec![false, false, true]
            } else {
                vec![false, true, true]
            }
        );
        assert!(w.iter().all(|(_, h)| h
            .iter()
            .any(|h| h.key == MIRROR_PARTITION_HEADER && h.value == b"2")));
    }

    #[test]
    fn by_key_skips_what_a_cut_copy_wrote() {
        let mut resume = ByKey::new(1);
        resume.last.insert((0, 0), 11);
        let mapping = Mapping::ByKey {
            partitions: 1,
            resume,
        };
        let run = [msg(0, 11, None), msg(0, 12, None)];
        let w = write_of(&run, &mapping, &[11]);
        assert_eq!(w[0].0, u32::MAX);
        assert_eq!(w[1].0, 0);
    }

    #[test]
    fn a_resumed_copy_keeps_saying_what_a_cut_copy_left_until_it_passes_it() {
        // A copy cut short left source 0's records up to 97 in
        // destination partition 0, above its starting point 92.
        let mut resume = ByKey::new(3);
        resume.last.insert((0, 0), 97);
        let mapping = Mapping::ByKey {
            partitions: 2,
            resume,
        };
        // The resumed copy writes 20 runs of source 2 (no key: to 0)
        // before it reads source 0 again, each a write of its own.
        let topic: Arc<str> = "t".into();
        let mut dest: Vec<Message> = vec![Message::from_fields(
            &topic,
            0,
            0,
            0,
            None,
            Some(b"v"),
            &[
                Header::new(MIRROR_OFFSET_HEADER, "97"),
                Header::new(MIRROR_PARTITION_HEADER, "0"),
                Header::new(MIRROR_PROGRESS_HEADER, "92,0,0"),
            ],
        )];
        for i in 0..20 {
            let w = write_of(&[msg(2, i, None)], &mapping, &[92, 0, i]);
            assert_eq!(w[0].0, 0);
            let copied = w[0].1.iter().find(|h| h.key == MIRROR_COPIED_HEADER);
            assert_eq!(copied.map(|h| h.value.as_slice()), Some(&b"0:97"[..]));
            let at = dest.len() as u64;
            dest.push(Message::from_fields(
                &topic,
                0,
                at,
                0,
                None,
                Some(b"v"),
                &w[0].1,
            ));
        }
        // The next copy that resumes reads the partition's last writes only.
        let mut next = ByKey::new(3);
        next.learn(0, 0, dest.len() as u64, &mut |from, _| {
            Ok(dest
                .iter()
                .filter(|m| m.offset() >= from)
                .cloned()
                .collect())
        })
        .unwrap();
        assert_eq!(next.low, vec![92, 0, 19]);
        assert!(next.copied(0, 0, 92), "source 0's 92 would be copied twice");
        assert!(next.copied(0, 0, 97));
        assert!(!next.copied(0, 0, 98));
        assert!(!next.copied(0, 1, 94));
        // Once the starting point passes them, the header goes.
        let w = write_of(&[msg(2, 30, None)], &mapping, &[98, 0, 30]);
        assert!(w[0].1.iter().all(|h| h.key != MIRROR_COPIED_HEADER));
    }

    #[test]
    fn one_to_one_adds_the_offset_alone() {
        let w = write_of(&[msg(3, 7, Some(b"k"))], &Mapping::OneToOne, &[0; 4]);
        assert_eq!(w[0].0, 3);
        assert_eq!(w[0].1, vec![Header::new(MIRROR_OFFSET_HEADER, "7")]);
    }
}
