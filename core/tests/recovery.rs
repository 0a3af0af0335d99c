//! Recovery on open: the active segment's tail is scanned and cut at the
//! first bad batch. The damage here is done to closed directories, either
//! as they were closed (cleanly: a bad batch is corruption, never a torn
//! write, and what is cut is kept aside) or made to look crashed (the
//! recovery point removed: a partial last batch is a torn tail). After a
//! clean close sealed segments are not scanned, and damage in them is
//! refused when read instead of delivered; after an unclean shutdown they
//! are checked from the recovery point on (tests/power_loss.rs).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{batches, read_partition, segment_logs, Msg, Rng, Span};
use mqlite::log::batch::HEADER_LEN;
use mqlite::{
    Broker, Config, ConsumerConfig, Error, OffsetReset, OpenMode, ProducerConfig, Record,
    RecoveryStats, TopicConfig,
};

/// Exclusive mode, by name: these tests check how its open recovers a log made
/// to look crashed (no recovery point), which shared mode checks only after a
/// process's crash or a restart (docs/decisions.md, "A data directory's mode by
/// name").
fn cfg() -> Config {
    common::cfg().mode(OpenMode::Exclusive)
}

const TOPIC: &str = "t";
/// The partition under test; partition 0 gets a little data too and must
/// never be affected.
const P: u32 = 1;
const SEGMENT: u64 = 16 * 1024;
const MAX_MESSAGE: u32 = 2048;

fn topic_config(index_interval: u32) -> TopicConfig {
    TopicConfig::new(2)
        .segment_bytes(SEGMENT)
        .max_message_bytes(MAX_MESSAGE)
        .index_interval_bytes(index_interval)
}

/// The `i`-th test record for partition `p`: sizes, keys, headers and
/// timestamps vary deterministically.
fn record(p: u32, i: u64, fixed_size: Option<usize>) -> Record {
    let mut rng = Rng::new(i * 31 + u64::from(p));
    let len = fixed_size.unwrap_or_else(|| rng.range(1, 400) as usize);
    let mut r = Record::new(TOPIC)
        .partition(p)
        .value(rng.bytes(len))
        .timestamp(1_700_000_000_000 + i as i64 * 10);
    if fixed_size.is_none() && !i.is_multiple_of(3) {
        r = r.key(format!("key-{i}"));
    }
    if fixed_size.is_none() && i % 4 == 1 {
        r = r
            .header("n", i.to_le_bytes().to_vec())
            .header("ü", Vec::new());
    }
    r
}

fn expected(r: &Record, offset: u64) -> Msg {
    Msg {
        partition: r.partition.unwrap(),
        offset,
        timestamp: r.timestamp.unwrap(),
        key: r.key.clone(),
        value: r.value.clone(),
        headers: r.headers.clone(),
    }
}

/// A data directory with a closed topic, and what was written to it.
struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    /// What partition `P` holds, in offset order.
    sent: Vec<Msg>,
    sent0: Vec<Msg>,
    /// The active segment of `P`: its files' original bytes.
    log_path: PathBuf,
    log: Vec<u8>,
    idx: Vec<u8>,
    tix: Vec<u8>,
    /// The partition's recovery point file as the clean close left it.
    point: Vec<u8>,
    /// The data directory's session file (`recovery.session`) as the clean
    /// close left it: a clean point counts only in the session it names.
    session: Vec<u8>,
    /// The batches of the active segment.
    spans: Vec<Span>,
}

impl Fixture {
    fn new(index_interval: u32, count: u64, fixed_size: Option<usize>) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        let mq = Broker::open(&dir, cfg()).unwrap();
        mq.create_topic(TOPIC, topic_config(index_interval))
            .unwrap();
        let producer = mq.producer(ProducerConfig::default()).unwrap();
        let mut sent = Vec::new();
        let mut sent0 = Vec::new();
        for i in 0..count {
            let r = record(P, i, fixed_size);
            let md = producer.send(r.clone()).unwrap();
            assert_eq!((md.partition, md.offset), (P, i));
            sent.push(expected(&r, i));
            if i % 5 == 0 {
                let r = record(0, i / 5, None);
                let md = producer.send(r.clone()).unwrap();
                sent0.push(expected(&r, md.offset));
            }
        }
        mq.close().unwrap();
        drop(mq);
        let logs = segment_logs(&dir, TOPIC, P);
        assert!(logs.len() >= 3, "the fixture should have sealed segments");
        let log_path = logs.last().unwrap().clone();
        let log = std::fs::read(&log_path).unwrap();
        let spans = batches(&log);
        assert!(
            spans.len() >= 8,
            "the active segment should hold several batches"
        );
        assert_eq!(spans.last().unwrap().next, count);
        let session = std::fs::read(dir.join("recovery.session")).unwrap();
        Fixture {
            _tmp: tmp,
            dir,
            sent,
            sent0,
            idx: std::fs::read(log_path.with_extension("idx")).unwrap(),
            tix: std::fs::read(log_path.with_extension("tix")).unwrap(),
            point: std::fs::read(log_path.with_file_name("recovery.point")).unwrap(),
            session,
            log_path,
            log,
            spans,
        }
    }

    fn data_end(&self) -> usize {
        self.spans.last().unwrap().end()
    }

    /// Puts the active segment's files and the recovery point back as the
    /// clean close left them, with `log` as the log's content, and removes
    /// what an earlier recovery moved aside.
    fn restore(&self, log: &[u8]) {
        std::fs::write(&self.log_path, log).unwrap();
        std::fs::write(self.log_path.with_extension("idx"), &self.idx).unwrap();
        std::fs::write(self.log_path.with_extension("tix"), &self.tix).unwrap();
        std::fs::write(self.log_path.with_file_name("recovery.point"), &self.point).unwrap();
        std::fs::write(self.dir.join("recovery.session"), &self.session).unwrap();
        for q in self.quarantined() {
            std::fs::remove_file(q).unwrap();
        }
    }

    /// [`Fixture::restore`], then the directory made to look crashed before
    /// anything was flushed (no recovery point: every batch is checked).
    fn restore_crashed(&self, log: &[u8]) {
        self.restore(log);
        std::fs::remove_file(self.log_path.with_file_name("recovery.point")).unwrap();
    }

    /// The quarantine files next to the active segment.
    fn quarantined(&self) -> Vec<PathBuf> {
        let name = self
            .log_path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.log_path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("{name}.damaged-"))
            })
            .collect();
        v.sort();
        v
    }

    /// Opens the directory and checks the partition ends at `end`, recovery
    /// reported `stats`, and every message before `end` is intact.
    fn open_and_check(&self, end: u64, stats: RecoveryStats, what: &str) -> Broker {
        let mq =
            Broker::open(&self.dir, cfg()).unwrap_or_else(|e| panic!("{what}: open failed: {e}"));
        let info = mq.topic(TOPIC).unwrap();
        let p = &info.partitions[P as usize];
        assert_eq!(p.end_offset, end, "{what}: end offset");
        assert_eq!(p.recovery, stats, "{what}: recovery stats");
        assert_eq!(
            info.partitions[0].recovery,
            RecoveryStats::default(),
            "{what}: partition 0"
        );
        let got = read_partition(&mq, TOPIC, P).unwrap_or_else(|e| panic!("{what}: read: {e}"));
        assert!(
            got == self.sent[..end as usize],
            "{what}: content differs after recovery"
        );
        assert_eq!(
            read_partition(&mq, TOPIC, 0).unwrap(),
            self.sent0,
            "{what}: partition 0"
        );
        mq
    }

    /// Appends `n` new records after recovery to the open `mq`, closes,
    /// reopens and checks the new records follow the recovered ones directly
    /// (no old data comes back).
    fn append_and_reopen(&self, mq: Broker, end: u64, n: u64, what: &str) {
        let producer = mq.producer(ProducerConfig::default()).unwrap();
        let mut want: Vec<Msg> = self.sent[..end as usize].to_vec();
        for j in 0..n {
            let r = Record::new(TOPIC)
                .partition(P)
                .value(format!("new record {j} after recovery"))
                .timestamp(1_800_000_000_000 + j as i64);
            let md = producer.send(r.clone()).unwrap();
            assert_eq!(md.offset, end + j, "{what}: offset of a new record");
            want.push(expected(&r, md.offset));
        }
        mq.close().unwrap();
        drop(mq);
        let mq = Broker::open(&self.dir, cfg()).unwrap();
        let p = &mq.topic(TOPIC).unwrap().partitions[P as usize];
        assert_eq!(p.end_offset, end + n, "{what}: end after append and reopen");
        assert_eq!(
            p.recovery,
            RecoveryStats::default(),
            "{what}: second open is clean"
        );
        let got = read_partition(&mq, TOPIC, P).unwrap();
        assert!(
            got == want,
            "{what}: content after append and reopen differs"
        );
        mq.close().unwrap();
    }
}

/// Stats for a torn tail of `bytes` removed bytes.
fn torn(bytes: usize) -> RecoveryStats {
    RecoveryStats {
        truncated_bytes: bytes as u64,
        dropped_batches: 1,
        torn_tails: 1,
        ..RecoveryStats::default()
    }
}

fn clean() -> RecoveryStats {
    RecoveryStats::default()
}

/// Bytes from `from` to the last non-zero byte of `log[from..to]` (0 when
/// all are zero): what recovery has to remove.
fn nonzero_extent(log: &[u8], from: usize, to: usize) -> usize {
    log[from..to]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i + 1)
}

#[test]
fn truncation_at_every_byte_of_the_tail() {
    let f = Fixture::new(256, 150, None);
    let first = f.spans.len() - 4;
    let from = f.spans[first].pos;
    for t in from..=f.data_end() {
        // The last whole batch ending at or before `t`.
        let whole = f.spans.iter().take_while(|s| s.end() <= t).last().copied();
        let boundary = whole.map_or(0, |s| s.end());
        let end = whole.map_or(f.spans[0].base, |s| s.next);
        // A cut exactly at a boundary is a clean end. Inside a batch the
        // partial batch is removed and reported; only a partial batch that is
        // all zero bytes so far is indistinguishable from unwritten space.
        let removed = nonzero_extent(&f.log, boundary, t);
        let stats = if removed == 0 { clean() } else { torn(removed) };
        f.restore_crashed(&f.log[..t]);
        let what = format!("log truncated to {t} bytes");
        let mq = f.open_and_check(end, stats, &what);
        if t == boundary || (t - from).is_multiple_of(7) {
            f.append_and_reopen(mq, end, 2, &what);
        } else {
            mq.close().unwrap();
        }
    }
}

#[test]
fn garbage_after_the_last_batch_is_a_torn_tail() {
    let f = Fixture::new(256, 150, None);
    let end = f.spans.last().unwrap().next;
    let mut rng = Rng::new(7);
    for len in [1usize, 5, 11, 12, 13, 60, 61, 300, MAX_MESSAGE as usize] {
        let mut log = f.log.clone();
        for b in &mut log[f.data_end()..f.data_end() + len] {
            *b = rng.range(1, 256) as u8;
        }
        f.restore_crashed(&log);
        let what = format!("{len} bytes of garbage");
        let mq = f.open_and_check(end, torn(len), &what);
        f.append_and_reopen(mq, end, 3, &what);
    }
}

/// Garbage reaching further than the largest possible batch: the data is
/// still right, and appending afterwards never brings garbage back.
#[test]
fn long_garbage_after_the_last_batch() {
    let f = Fixture::new(256, 150, None);
    let end = f.spans.last().unwrap().next;
    let mut log = f.log.clone();
    let len = (3 * MAX_MESSAGE as usize).min(log.len() - f.data_end());
    let mut rng = Rng::new(11);
    for b in &mut log[f.data_end()..f.data_end() + len] {
        *b = rng.range(1, 256) as u8;
    }
    f.restore_crashed(&log);
    let mq = Broker::open(&f.dir, cfg()).unwrap();
    let p = &mq.topic(TOPIC).unwrap().partitions[P as usize];
    assert_eq!(p.end_offset, end);
    assert_eq!(p.recovery.torn_tails, 1);
    assert_eq!(p.recovery.corruptions, 0);
    assert!(p.recovery.truncated_bytes > 0);
    assert_eq!(read_partition(&mq, TOPIC, P).unwrap(), f.sent);
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(&f.dir, cfg()).unwrap();
    assert_eq!(
        mq.topic(TOPIC).unwrap().partitions[P as usize].end_offset,
        end
    );
    f.append_and_reopen(mq, end, 3, "after long garbage");
}

#[test]
fn zeroed_tail() {
    let f = Fixture::new(256, 150, None);
    let last = *f.spans.last().unwrap();

    // The whole last batch zeroed: it looks never written. Nothing to report.
    let mut log = f.log.clone();
    log[last.pos..last.end()].fill(0);
    f.restore_crashed(&log);
    let mq = f.open_and_check(last.base, clean(), "last batch zeroed");
    f.append_and_reopen(mq, last.base, 2, "last batch zeroed");

    // Its second half zeroed (a page that never reached the disk): the
    // header and first half are a torn tail.
    let mut log = f.log.clone();
    log[last.pos + last.len / 2..last.end()].fill(0);
    f.restore_crashed(&log);
    // Its length field is intact, so the whole batch it claims is removed.
    let mq = f.open_and_check(
        last.base,
        torn(last.len),
        "second half of last batch zeroed",
    );
    f.append_and_reopen(mq, last.base, 2, "second half of last batch zeroed");

    // Its header zeroed, the records left: the length reads as the end
    // marker, and the leftover bytes after it are removed.
    let mut log = f.log.clone();
    log[last.pos..last.pos + HEADER_LEN].fill(0);
    f.restore_crashed(&log);
    let stats = torn(nonzero_extent(&log, last.pos, last.end()));
    assert!(stats.truncated_bytes > 0);
    let mq = f.open_and_check(last.base, stats, "header of last batch zeroed");
    f.append_and_reopen(mq, last.base, 2, "header of last batch zeroed");
}

/// A damaged batch followed by valid ones (no index entry after it, so the
/// scan sees it): everything from it on is dropped and it counts as a
/// corruption, not a torn tail; the dropped batches never come back.
#[test]
fn corrupted_middle_batch_in_active_segment() {
    // An index interval beyond the segment size: no index entries at all.
    let f = Fixture::new(1 << 20, 150, None);
    assert!(f.idx.iter().all(|&b| b == 0), "no index entries expected");
    let n = f.spans.len();
    for k in [n - 4, n - 2, 1] {
        let bad = f.spans[k];
        for at in [bad.pos + 20, bad.pos + 13, bad.end() - 1] {
            let mut log = f.log.clone();
            log[at] ^= 0x10;
            f.restore(&log);
            let stats = RecoveryStats {
                truncated_bytes: (f.data_end() - bad.pos) as u64,
                dropped_batches: (n - k) as u64,
                corruptions: 1,
                lost_records: f.sent.len() as u64 - bad.base,
                quarantined_bytes: (f.data_end() - bad.pos) as u64,
                ..RecoveryStats::default()
            };
            let what = format!("byte {at} of batch {k} flipped");
            let mq = f.open_and_check(bad.base, stats, &what);
            // What was cut is kept, byte for byte, beside the segment.
            let kept = f.quarantined();
            assert_eq!(kept.len(), 1, "{what}");
            assert!(kept[0]
                .to_string_lossy()
                .ends_with(&format!(".damaged-{}", bad.pos)));
            assert_eq!(
                std::fs::read(&kept[0]).unwrap(),
                log[bad.pos..f.data_end()],
                "{what}"
            );
            // Fewer, smaller records than were dropped: if recovery had left
            // the old batches in place, they would follow the new ones.
            f.append_and_reopen(mq, bad.base, 1, &what);
        }
    }
}

/// A damaged length field in the middle of the active segment.
#[test]
fn corrupted_length_in_active_segment() {
    let f = Fixture::new(1 << 20, 150, None);
    let k = f.spans.len() - 3;
    let bad = f.spans[k];
    for bit in 0..32 {
        let mut log = f.log.clone();
        log[bad.pos + 8 + bit / 8] ^= 1 << (bit % 8);
        f.restore(&log);
        let what = format!("length bit {bit} of batch {k} flipped");
        let mq = Broker::open(&f.dir, cfg()).unwrap();
        let p = &mq.topic(TOPIC).unwrap().partitions[P as usize];
        assert_eq!(p.end_offset, bad.base, "{what}");
        assert_eq!(p.recovery.torn_tails + p.recovery.corruptions, 1, "{what}");
        assert!(p.recovery.truncated_bytes > 0, "{what}");
        let got = read_partition(&mq, TOPIC, P).unwrap();
        assert!(got == f.sent[..bad.base as usize], "{what}");
        f.append_and_reopen(mq, bad.base, 2, &what);
    }
}

/// A hole of zeros over the start of a middle batch of the active segment
/// (a page that never reached the disk while later ones did), with more
/// valid batches after it than the largest batch size. Records of the same
/// size are then appended, so new batches line up with the old ones: old
/// data must still never come back after the new records.
#[test]
fn zero_hole_in_active_segment_never_resurrects_old_batches() {
    let f = Fixture::new(1 << 20, 800, Some(40));
    let n = f.spans.len();
    let len = f.spans[0].len;
    assert!(f.spans.iter().all(|s| s.len == len));
    // The hole: one batch's header, far enough from the end that valid
    // batches remain beyond the largest-batch window.
    let k = n - 2 * (MAX_MESSAGE as usize / len) - 4;
    let hole = f.spans[k];
    let mut log = f.log.clone();
    log[hole.pos..hole.pos + 16].fill(0);
    f.restore(&log);
    let mq = Broker::open(&f.dir, cfg()).unwrap();
    let p = &mq.topic(TOPIC).unwrap().partitions[P as usize];
    assert_eq!(p.end_offset, hole.base);
    assert!(p.recovery.truncated_bytes > 0);
    assert_eq!(
        read_partition(&mq, TOPIC, P).unwrap(),
        f.sent[..hole.base as usize]
    );
    // Re-send same-sized records up to just past the window.
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let resend = (MAX_MESSAGE as usize / len + 2) as u64;
    let mut want = f.sent[..hole.base as usize].to_vec();
    for j in 0..resend {
        let r = Record::new(TOPIC)
            .partition(P)
            .value(vec![0xAB; 40])
            .timestamp(1_800_000_000_000 + j as i64);
        let md = producer.send(r.clone()).unwrap();
        want.push(expected(&r, md.offset));
    }
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(&f.dir, cfg()).unwrap();
    let p = &mq.topic(TOPIC).unwrap().partitions[P as usize];
    assert_eq!(
        p.end_offset,
        hole.base + resend,
        "old batches came back after the new ones"
    );
    assert_eq!(read_partition(&mq, TOPIC, P).unwrap(), want);
}

/// Damage within the last 12 bytes of a full active segment (where not even
/// a length field fits) must not crash the open.
#[test]
fn garbage_in_the_last_bytes_of_a_full_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let config = TopicConfig::new(1)
        .segment_bytes(4096)
        .index_interval_bytes(512);
    mq.create_topic(TOPIC, config).unwrap();
    // Not idempotent: a batch's size depends on its record alone.
    let producer = mq
        .producer(ProducerConfig::default().idempotent(false))
        .unwrap();
    // Fill the first segment to exactly 8 bytes short of its size.
    let probe = |n: usize| {
        let v = vec![7u8; n];
        let r = mqlite::log::batch::RecordRef {
            key: None,
            value: Some(&v),
            headers: &[],
            timestamp: 1,
        };
        mqlite::log::batch::encoded_len(&[r], &mqlite::log::batch::ProducerFields::default(), 0)
    };
    let mut used = 0;
    let mut sent = Vec::new();
    loop {
        let left = 4096 - 8 - used;
        let n = if left >= probe(300) + probe(100) {
            300
        } else {
            (0..1000).find(|&n| probe(n) == left).unwrap()
        };
        let r = Record::new(TOPIC)
            .partition(0)
            .value(vec![7u8; n])
            .timestamp(1);
        let md = producer.send(r.clone()).unwrap();
        sent.push(md.offset);
        used += probe(n);
        if used == 4096 - 8 {
            break;
        }
    }
    mq.close().unwrap();
    drop(mq);
    let logs = segment_logs(tmp.path(), TOPIC, 0);
    assert_eq!(logs.len(), 1);
    let mut log = std::fs::read(&logs[0]).unwrap();
    assert_eq!(log.len(), 4096);
    assert_eq!(batches(&log).last().unwrap().end(), 4096 - 8);
    log[4095] = 0xff;
    std::fs::write(&logs[0], &log).unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let p = &mq.topic(TOPIC).unwrap().partitions[0];
    assert_eq!(p.end_offset, sent.len() as u64);
    // Closed cleanly, so not a torn write: corruption, the byte kept aside.
    let damage = RecoveryStats {
        torn_tails: 0,
        corruptions: 1,
        quarantined_bytes: 8,
        ..torn(8)
    };
    assert_eq!(p.recovery, damage);
    assert!(logs[0].with_extension("log.damaged-4088").exists());
    assert_eq!(read_partition(&mq, TOPIC, 0).unwrap().len(), sent.len());
    // The next record rolls to a new segment; reopening is clean.
    producer_send_and_reopen(mq, tmp.path(), sent.len() as u64);
}

fn producer_send_and_reopen(mq: Broker, dir: &Path, end: u64) {
    let md = mq
        .producer(ProducerConfig::default())
        .unwrap()
        .send(Record::new(TOPIC).partition(0).value("after"))
        .unwrap();
    assert_eq!(md.offset, end);
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(dir, cfg()).unwrap();
    let p = &mq.topic(TOPIC).unwrap().partitions[0];
    assert_eq!((p.end_offset, p.recovery), (end + 1, clean()));
}

/// Polls everything it can from `topic` partitions `parts` until an error
/// or the end. Returns the messages and the error, if any.
fn poll_until_error(mq: &Broker, parts: &[u32]) -> (Vec<Msg>, Option<Error>) {
    let mut c = mq
        .consumer(
            ConsumerConfig::default()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(7),
        )
        .unwrap();
    let assign: Vec<(&str, u32)> = parts.iter().map(|&p| (TOPIC, p)).collect();
    c.assign(&assign).unwrap();
    let mut got = Vec::new();
    loop {
        match c.poll(Duration::ZERO) {
            Ok(batch) if batch.is_empty() => return (got, None),
            Ok(batch) => got.extend(batch.iter().map(Msg::from)),
            Err(e) => {
                // The error persists: the damaged record is never delivered
                // by a later poll either.
                for _ in 0..3 {
                    match c.poll(Duration::ZERO) {
                        Err(Error::Corrupt { .. }) => {}
                        Ok(more) => {
                            for m in &more {
                                assert_ne!(
                                    m.partition(),
                                    P,
                                    "a poll after the error delivered {m:?}"
                                );
                            }
                            got.extend(more.iter().map(Msg::from));
                        }
                        Err(other) => panic!("unexpected error {other}"),
                    }
                }
                return (got, Some(e));
            }
        }
    }
}

/// Damage in a sealed segment (not scanned at open): the open is clean and
/// fast, and readers get `Error::Corrupt` instead of the damaged record, but
/// every record before it.
#[test]
fn corruption_in_a_sealed_segment_is_never_delivered() {
    let f = Fixture::new(256, 150, None);
    let sealed = segment_logs(&f.dir, TOPIC, P)[0].clone();
    let original = std::fs::read(&sealed).unwrap();
    let spans = batches(&original);
    assert_eq!(
        spans.last().unwrap().end(),
        original.len(),
        "sealed segments are trimmed"
    );
    let k = spans.len() / 2;
    let bad = spans[k];
    // A covered byte, the CRC, the length, and the base offset (outside the
    // CRC: a reader must notice the offsets no longer follow on).
    for (at, mask) in [
        (bad.pos + 30, 0x01u8),
        (bad.end() - 1, 0x80),
        (bad.pos + 13, 0x04),
        (bad.pos + 9, 0x02),
        (bad.pos, 0x01),
        (bad.pos + 2, 0x10),
        (bad.pos + 7, 0x80),
    ] {
        let mut damaged = original.clone();
        damaged[at] ^= mask;
        std::fs::write(&sealed, &damaged).unwrap();
        let what = format!("byte {at} of a sealed segment flipped");
        let mq = Broker::open(&f.dir, cfg()).unwrap();
        let info = mq.topic(TOPIC).unwrap();
        assert_eq!(info.partitions[P as usize].recovery, clean(), "{what}");
        assert_eq!(
            info.partitions[P as usize].end_offset,
            f.sent.len() as u64,
            "{what}"
        );
        let (got, err) = poll_until_error(&mq, &[P]);
        assert!(
            matches!(err, Some(Error::Corrupt { .. })),
            "{what}: expected Corrupt, got {err:?}"
        );
        assert!(
            got == f.sent[..bad.base as usize],
            "{what}: records before the damage"
        );
        // Reading both partitions: the healthy one is delivered in full.
        let (got, err) = poll_until_error(&mq, &[0, P]);
        assert!(matches!(err, Some(Error::Corrupt { .. })), "{what}");
        let (p0, p1): (Vec<Msg>, Vec<Msg>) = got.into_iter().partition(|m| m.partition == 0);
        assert!(
            p1 == f.sent[..bad.base as usize],
            "{what}: partition {P} with two assigned"
        );
        assert!(f.sent0.starts_with(&p0), "{what}: partition 0 content");
        // Seeking past the damaged batch into a later segment still works.
        let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
        c.assign(&[(TOPIC, P)]).unwrap();
        let later = f.spans[0].base;
        c.seek(TOPIC, P, later).unwrap();
        let m = c.poll(Duration::ZERO).unwrap();
        assert_eq!(Msg::from(&m[0]), f.sent[later as usize], "{what}");
        mq.close().unwrap();
    }
}

/// Without its indexes (deleted, truncated or garbage) the active segment
/// still recovers exactly, and lookups by offset and time still work.
#[test]
fn damaged_active_indexes_still_recover() {
    let f = Fixture::new(128, 150, None);
    assert!(f.idx.iter().any(|&b| b != 0), "index entries expected");
    let end = f.sent.len() as u64;
    type Damage = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Damage)> = vec![
        (
            "idx deleted",
            Box::new(|p: &Path| std::fs::remove_file(p.with_extension("idx")).unwrap()),
        ),
        (
            "tix deleted",
            Box::new(|p: &Path| std::fs::remove_file(p.with_extension("tix")).unwrap()),
        ),
        (
            "both deleted",
            Box::new(|p: &Path| {
                std::fs::remove_file(p.with_extension("idx")).unwrap();
                std::fs::remove_file(p.with_extension("tix")).unwrap();
            }),
        ),
        (
            "idx truncated to 3 bytes",
            Box::new(|p: &Path| truncate(&p.with_extension("idx"), 3)),
        ),
        (
            "idx truncated to 12 bytes",
            Box::new(|p: &Path| truncate(&p.with_extension("idx"), 12)),
        ),
        (
            "tix truncated to 20 bytes",
            Box::new(|p: &Path| truncate(&p.with_extension("tix"), 20)),
        ),
        (
            "idx emptied",
            Box::new(|p: &Path| truncate(&p.with_extension("idx"), 0)),
        ),
        (
            "idx garbage",
            Box::new(|p: &Path| {
                let path = p.with_extension("idx");
                let len = std::fs::metadata(&path).unwrap().len() as usize;
                std::fs::write(&path, Rng::new(3).bytes(len)).unwrap();
            }),
        ),
        (
            "tix garbage",
            Box::new(|p: &Path| {
                let path = p.with_extension("tix");
                let len = std::fs::metadata(&path).unwrap().len() as usize;
                std::fs::write(&path, Rng::new(4).bytes(len)).unwrap();
            }),
        ),
        (
            "idx entries point past the data",
            Box::new(|p: &Path| {
                let path = p.with_extension("idx");
                let mut idx = std::fs::read(&path).unwrap();
                for e in idx.chunks_mut(8) {
                    if e.iter().any(|&b| b != 0) {
                        e[4..8].copy_from_slice(&(SEGMENT as u32 - 9).to_le_bytes());
                    }
                }
                std::fs::write(&path, idx).unwrap();
            }),
        ),
    ];
    for (what, damage) in cases {
        f.restore(&f.log);
        damage(&f.log_path);
        let mq = f.open_and_check(end, clean(), what);
        // Offset lookups through the (rebuilt or missing) index.
        let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
        c.assign(&[(TOPIC, P)]).unwrap();
        for s in f.spans.iter().step_by(3) {
            for o in [s.base, s.next - 1] {
                c.seek(TOPIC, P, o).unwrap();
                let m = c.poll(Duration::ZERO).unwrap();
                assert_eq!(Msg::from(&m[0]), f.sent[o as usize], "{what}: seek to {o}");
            }
        }
        // Time lookups: timestamps grow with the offset.
        for s in f.spans.iter().step_by(5) {
            let ts = f.sent[s.base as usize].timestamp;
            assert_eq!(
                mq.offset_for_timestamp(TOPIC, P, ts).unwrap(),
                Some(s.base),
                "{what}"
            );
            assert_eq!(
                mq.offset_for_timestamp(TOPIC, P, ts - 5).unwrap(),
                Some(s.base),
                "{what}"
            );
        }
        f.append_and_reopen(mq, end, 2, what);
    }
}

fn truncate(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// A sealed segment whose indexes are gone is still read in full, and time
/// lookups still find its records.
#[test]
fn sealed_segment_without_indexes() {
    let f = Fixture::new(128, 150, None);
    let sealed = segment_logs(&f.dir, TOPIC, P);
    for s in &sealed[..sealed.len() - 1] {
        std::fs::remove_file(s.with_extension("idx")).unwrap();
        std::fs::remove_file(s.with_extension("tix")).unwrap();
    }
    let mq = Broker::open(&f.dir, cfg()).unwrap();
    assert_eq!(read_partition(&mq, TOPIC, P).unwrap(), f.sent);
    for i in (0..f.sent.len()).step_by(11) {
        let ts = f.sent[i].timestamp;
        assert_eq!(
            mq.offset_for_timestamp(TOPIC, P, ts).unwrap(),
            Some(i as u64),
            "offset {i}"
        );
    }
}

/// Recovery of an empty partition and of a log truncated to nothing.
#[test]
fn empty_and_fully_truncated_logs() {
    let f = Fixture::new(256, 150, None);
    let base = f.spans[0].base;
    let missing = RecoveryStats {
        corruptions: 1,
        lost_records: f.sent.len() as u64 - base,
        ..clean()
    };
    // After a clean close the recovery point knows where the log ended:
    // an emptied active segment is reported, not taken for a short log.
    f.restore(&[]);
    let mq = f.open_and_check(base, missing, "active log emptied");
    f.append_and_reopen(mq, base, 2, "active log emptied");
    // The same after a crash, where the point knows less: nothing flushed.
    f.restore_crashed(&[]);
    let mq = f.open_and_check(base, clean(), "active log emptied after a crash");
    mq.close().unwrap();
    drop(mq);
    // A removed active segment: the last sealed one becomes active again.
    f.restore(&f.log);
    for ext in ["log", "idx", "tix"] {
        std::fs::remove_file(f.log_path.with_extension(ext)).unwrap();
    }
    let mq = f.open_and_check(base, missing, "active log removed");
    f.append_and_reopen(mq, base, 2, "active log removed");

    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("e", TopicConfig::new(1).segment_bytes(4096))
        .unwrap();
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let p = &mq.topic("e").unwrap().partitions[0];
    assert_eq!((p.start_offset, p.end_offset, p.recovery), (0, 0, clean()));
}

/// Multi-record batches (appended below the producer) in a sealed segment,
/// one with a damaged base offset (outside the CRC): no record may be
/// delivered under a wrong offset, whatever the poll size or start position.
#[test]
fn damaged_base_offset_of_a_multi_record_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    {
        let mq = Broker::open(dir, cfg()).unwrap();
        mq.create_topic("m", TopicConfig::new(1).segment_bytes(4096))
            .unwrap();
        let log = mqlite::raw::partition_log(&mq, "m", 0).unwrap();
        for b in 0..40u64 {
            let values: Vec<Vec<u8>> = (0..10)
                .map(|i| format!("r{}", b * 10 + i).into_bytes())
                .collect();
            let records: Vec<mqlite::log::batch::RecordRef<'_>> = values
                .iter()
                .map(|v| mqlite::log::batch::RecordRef {
                    key: None,
                    value: Some(v),
                    headers: &[],
                    timestamp: 1,
                })
                .collect();
            assert_eq!(log.append(&records).unwrap(), b * 10);
        }
        mq.close().unwrap();
    }
    let sealed = segment_logs(dir, "m", 0)[0].clone();
    let original = std::fs::read(&sealed).unwrap();
    let spans = batches(&original);
    assert!(spans.len() > 4);
    let bad = spans[3]; // base 30 = 0b11110
    assert_eq!(bad.base, 30);
    for bit in 0..8 {
        let mut damaged = original.clone();
        damaged[bad.pos] ^= 1 << bit;
        std::fs::write(&sealed, &damaged).unwrap();
        let mq = Broker::open(dir, cfg()).unwrap();
        for (max_poll, from) in [
            (1, 0),
            (3, 0),
            (7, 0),
            (500, 0),
            (4, 25),
            (500, 29),
            (2, 35),
            (500, 30),
        ] {
            let what = format!("base bit {bit}, max_poll_records {max_poll}, from {from}");
            let mut c = mq
                .consumer(ConsumerConfig::default().max_poll_records(max_poll))
                .unwrap();
            c.assign(&[("m", 0)]).unwrap();
            match c.seek("m", 0, from) {
                Ok(()) => {}
                // Positioning inside the damaged batch finds the damage.
                Err(Error::Corrupt { .. }) if from >= bad.base => continue,
                Err(e) => panic!("{what}: seek: {e}"),
            }
            let mut next = from;
            let err = loop {
                match c.poll(Duration::ZERO) {
                    Ok(got) if got.is_empty() => break None,
                    Ok(got) => {
                        for m in got {
                            assert_eq!(m.offset(), next, "{what}: offsets run on");
                            let want = format!("r{}", m.offset());
                            assert_eq!(m.value(), Some(want.as_bytes()), "{what}: wrong record");
                            next += 1;
                        }
                    }
                    Err(e) => break Some(e),
                }
            };
            assert!(
                matches!(err, Some(Error::Corrupt { .. })),
                "{what}: got {err:?}"
            );
            assert_eq!(
                next,
                bad.base.max(from),
                "{what}: every record before the damage"
            );
        }
        mq.close().unwrap();
    }
}

/// A crash between starting the next segment and trimming the old one
/// leaves a sealed segment at its preallocated size, zeros after its data
/// (and zero entries after its index entries): it reads as if trimmed.
#[test]
fn untrimmed_sealed_segment_reads_as_trimmed() {
    let f = Fixture::new(256, 150, None);
    let sealed = segment_logs(&f.dir, TOPIC, P);
    for s in &sealed[..sealed.len() - 1] {
        for (ext, len) in [("log", SEGMENT), ("idx", 8 * 64), ("tix", 16 * 64)] {
            std::fs::OpenOptions::new()
                .write(true)
                .open(s.with_extension(ext))
                .unwrap()
                .set_len(len)
                .unwrap();
        }
    }
    let mq = f.open_and_check(f.sent.len() as u64, clean(), "untrimmed sealed segments");
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[(TOPIC, P)]).unwrap();
    for o in (0..f.sent.len() as u64).step_by(13) {
        c.seek(TOPIC, P, o).unwrap();
        let m = c.poll(Duration::ZERO).unwrap();
        assert_eq!(Msg::from(&m[0]), f.sent[o as usize], "seek to {o}");
        let ts = f.sent[o as usize].timestamp;
        assert_eq!(mq.offset_for_timestamp(TOPIC, P, ts).unwrap(), Some(o));
    }
    f.append_and_reopen(mq, f.sent.len() as u64, 2, "untrimmed sealed segments");
}
