//! What the fuzz targets check on arbitrary bytes. Shared, by `#[path]`,
//! between the cargo-fuzz targets (`fuzz/fuzz_targets/*.rs`) and the
//! regression test (`core/tests/fuzz_regressions.rs`) that replays every
//! input under `fuzz/regressions/<target>/` on each `make test`.
//!
//! Each check panics when the engine misbehaves on the input: a panic
//! inside the engine, a read that disagrees with another read path, a
//! record handed back that was never written, a loop that does not end.
//! Errors returned by the engine (`Corrupt`, `Io`, ...) are fine: refusing a
//! damaged file is the right answer.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use mqlite::log::batch::{self, Check, Records, LENGTH_PREFIX, MIN_LENGTH};
use mqlite::{Broker, Config, ConsumerConfig, ProducerConfig, Record, TopicConfig};

/// Uncompressed bytes a fuzzed compressed batch may expand to (the engine's
/// own limit is 64 MiB; a smaller one keeps the fuzzer fast).
const DECOMPRESS_LIMIT: usize = 1 << 20;

/// Poll rounds after which a consumer that keeps returning data is stuck.
const MAX_POLLS: usize = 100_000;

const TOPIC: &str = "t";

/// Offset 12 of a batch: its CRC32C, over the bytes from offset 16 on
/// (docs/FORMAT.md).
const CRC_AT: usize = 12;
const CRC_FROM: usize = 16;

/// The smallest batch of any layout (a compact one).
const MIN_BATCH: usize = LENGTH_PREFIX + MIN_LENGTH as usize;

/// Makes `buf` one batch whose length field and CRC fit its bytes, so the
/// fuzzer reaches the record decoder instead of stopping at the CRC.
fn seal(buf: &mut [u8]) {
    if buf.len() < MIN_BATCH {
        return;
    }
    let length = (buf.len() - LENGTH_PREFIX) as u32;
    buf[8..12].copy_from_slice(&length.to_le_bytes());
    let crc = crc32c::crc32c(&buf[CRC_FROM..]);
    buf[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The batch decoder on arbitrary bytes: `check`, then every record and
/// header of every batch that passes it, compressed or not. The first byte
/// chooses whether the rest is taken as it is or sealed with a fitting
/// length and CRC first.
pub fn batch_decode(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    if mode & 1 == 1 {
        seal(&mut buf);
    }
    let mut pos = 0;
    while pos < buf.len() {
        let h = match batch::check(&buf[pos..]) {
            Check::Valid(h) => h,
            Check::End | Check::Invalid(_) => break,
        };
        let bytes = &buf[pos..pos + h.total_len()];
        assert!(
            h.total_len() >= h.records_at().max(MIN_BATCH),
            "a valid batch shorter than its header"
        );
        if h.attributes & batch::CODEC_MASK == 0 {
            for r in Records::new(bytes, &h).flatten() {
                touch_record(bytes, &r);
            }
        }
        if let Ok(section) = batch::records_section(bytes, &h, DECOMPRESS_LIMIT) {
            assert!(section.len() <= DECOMPRESS_LIMIT.max(bytes.len()));
            let mut seen = 0u32;
            for r in Records::in_section(&section, &h) {
                let Ok(r) = r else { break };
                touch_record(&section, &r);
                seen += 1;
            }
            assert!(
                seen <= h.record_count,
                "more records than the header counts"
            );
        }
        pos += h.total_len();
    }
}

/// Every range of a decoded record lies inside its bytes, and its headers
/// decode.
fn touch_record(bytes: &[u8], r: &batch::RecordView) {
    for range in [r.key.clone(), r.value.clone(), Some(r.headers.clone())]
        .into_iter()
        .flatten()
    {
        assert!(
            range.start <= range.end && range.end <= bytes.len(),
            "record range out of bounds"
        );
    }
    let headers = batch::decode_headers(&bytes[r.headers.clone()], r.header_count);
    assert!(headers.len() <= r.header_count as usize);
}

/// A scratch data directory, in memory where the machine has /dev/shm.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new()
            .prefix("mqlite-fuzz")
            .tempdir_in(shm)
        {
            return d;
        }
    }
    tempfile::Builder::new()
        .prefix("mqlite-fuzz")
        .tempdir()
        .expect("temp dir")
}

fn config() -> Config {
    Config::default()
        .prefault(false)
        .retention_check_interval_ms(0)
}

fn partition_dir(root: &Path) -> PathBuf {
    root.join("topics").join(TOPIC).join("0")
}

fn segment_file(root: &Path, base: u64, ext: &str) -> PathBuf {
    partition_dir(root).join(format!("{base:020}.{ext}"))
}

/// Creates topic `t` (one partition, 4 KiB segments, an index entry every
/// 64 bytes) in `root` and closes the broker: the files around a fuzzed one.
fn make_topic(root: &Path) {
    let mq = Broker::open(root, config()).expect("open a fresh directory");
    mq.create_topic(
        TOPIC,
        TopicConfig::new(1)
            .segment_bytes(4096)
            .index_interval_bytes(64),
    )
    .expect("create topic");
    mq.close().expect("close");
}

/// What a consumer reads from the start of partition 0: (offset, value).
/// Panics if offsets do not increase or the consumer never runs dry.
fn read_all(mq: &Broker) -> mqlite::Result<Vec<(u64, Vec<u8>)>> {
    let mut c = mq.consumer(ConsumerConfig::default())?;
    c.assign(&[(TOPIC, 0)])?;
    c.seek_to_beginning(TOPIC, 0)?;
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for _ in 0..MAX_POLLS {
        let msgs = c.poll(Duration::ZERO)?;
        if msgs.is_empty() {
            return Ok(out);
        }
        for m in msgs {
            if let Some(&(last, _)) = out.last() {
                assert!(m.offset() > last, "offset {} after {last}", m.offset());
            }
            out.push((m.offset(), m.value().unwrap_or_default().to_vec()));
        }
    }
    panic!("the consumer was still returning records after {MAX_POLLS} polls");
}

/// What the raw scan reads from the start of partition 0.
fn scan_all(mq: &Broker) -> mqlite::Result<Vec<(u64, Vec<u8>)>> {
    let log = mqlite::raw::partition_log(mq, TOPIC, 0)?;
    let mut out = Vec::new();
    log.scan(0, |offset, _, v| {
        out.push((offset, v.unwrap_or_default().to_vec()));
    })?;
    Ok(out)
}

/// Opens `root`, reads everything two ways, then proves the recovered log
/// takes and returns a new record. `None` if the engine refused the
/// directory (an error, which is allowed).
fn open_read_append(root: &Path) -> Option<Vec<(u64, Vec<u8>)>> {
    let mq = Broker::open(root, config()).ok()?;
    let polled = read_all(&mq);
    let scanned = scan_all(&mq);
    if let (Ok(p), Ok(s)) = (&polled, &scanned) {
        assert_eq!(p, s, "the consumer and the raw scan disagree");
    }
    let read = polled.ok();
    let producer = mq.producer(ProducerConfig::default()).ok()?;
    if let Ok(md) = producer.send(Record::new(TOPIC).partition(0).value("after-recovery")) {
        let log = mqlite::raw::partition_log(&mq, TOPIC, 0).expect("partition");
        let mut found = false;
        let _ = log.scan(md.offset, |o, _, v| {
            found |= o == md.offset && v == Some(b"after-recovery".as_slice());
        });
        assert!(
            found,
            "a record acknowledged after recovery cannot be read back"
        );
    }
    drop(producer);
    let _ = mq.close();
    read
}

/// Segment recovery on arbitrary bytes: the input becomes the segment
/// file(s) of a topic's partition (one active segment, or a sealed one and
/// an active one, chosen by the first byte), then the directory is opened,
/// read by a consumer and by the raw scan (which must agree), and appended
/// to.
pub fn segment_recovery(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let dir = scratch();
    make_topic(dir.path());
    let part = partition_dir(dir.path());
    for e in std::fs::read_dir(&part).expect("partition dir").flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    let sealed_fix = mode & 2 != 0;
    if mode & 1 == 0 || rest.len() < 6 {
        let mut seg = rest.to_vec();
        if sealed_fix {
            seal_each(&mut seg);
        }
        std::fs::write(segment_file(dir.path(), 0, "log"), seg).expect("write");
    } else {
        let split = (u16::from_le_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
        let base = u64::from(u32::from_le_bytes([rest[2], rest[3], rest[4], rest[5]])) % 4096;
        let body = &rest[6..];
        let split = split.min(body.len());
        let (a, b) = body.split_at(split);
        let (mut a, mut b) = (a.to_vec(), b.to_vec());
        if sealed_fix {
            seal_each(&mut a);
            seal_each(&mut b);
        }
        std::fs::write(segment_file(dir.path(), 0, "log"), a).expect("write");
        std::fs::write(segment_file(dir.path(), base, "log"), b).expect("write");
    }
    open_read_append(dir.path());
}

/// Seals every batch that `seal` would accept along `buf`, walking by each
/// header's own length, so that a fuzzed segment holds valid-CRC batches
/// with arbitrary contents.
fn seal_each(buf: &mut [u8]) {
    let mut pos = 0;
    while buf.len() - pos >= MIN_BATCH {
        let length = u32::from_le_bytes(buf[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let total = (LENGTH_PREFIX + length).clamp(MIN_BATCH, buf.len() - pos);
        let end = pos + total;
        seal(&mut buf[pos..end]);
        pos = end;
    }
}

/// A partition written by the engine and its expected records, made once.
struct Template {
    /// (file name, contents) of every file under the partition directory.
    files: Vec<(String, Vec<u8>)>,
    /// topic.json and the other files of the directory, by relative path.
    others: Vec<(PathBuf, Vec<u8>)>,
    /// (offset, value, timestamp) of every record written.
    records: Vec<(u64, Vec<u8>, i64)>,
}

fn template() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| {
        let dir = scratch();
        make_topic(dir.path());
        let mq = Broker::open(dir.path(), config()).expect("open");
        let producer = mq.producer(ProducerConfig::default()).expect("producer");
        let mut records = Vec::new();
        for i in 0..300u32 {
            let value = vec![b'a' + (i % 26) as u8; 1 + (i as usize * 7) % 90];
            let ts = 1_000_000 + i64::from(i) * 10;
            let md = producer
                .send(
                    Record::new(TOPIC)
                        .partition(0)
                        .value(value.clone())
                        .timestamp(ts),
                )
                .expect("send");
            records.push((md.offset, value, ts));
        }
        drop(producer);
        mq.close().expect("close");
        let mut files = Vec::new();
        let mut others = Vec::new();
        collect(
            dir.path(),
            dir.path(),
            &partition_dir(dir.path()),
            &mut files,
            &mut others,
        );
        files.sort();
        Template {
            files,
            others,
            records,
        }
    })
}

fn collect(
    root: &Path,
    at: &Path,
    part: &Path,
    files: &mut Vec<(String, Vec<u8>)>,
    others: &mut Vec<(PathBuf, Vec<u8>)>,
) {
    for e in std::fs::read_dir(at).expect("read dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, part, files, others);
        } else if p.parent() == Some(part) {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            files.push((name, std::fs::read(&p).expect("read")));
        } else if p.file_name() != Some(std::ffi::OsStr::new(mqlite::LOCK_FILE)) {
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            others.push((rel, std::fs::read(&p).expect("read")));
        }
    }
}

/// Index loading on arbitrary bytes: a partition the engine wrote (several
/// segments, dense offset and time indexes) gets one of its index files
/// replaced by the input (the first byte picks which). A damaged index must
/// not change what is read: every record comes back, the same, by a full
/// read, by seeking to each of a sample of offsets and by timestamp lookup.
pub fn index_load(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let t = template();
    let dir = scratch();
    let part = partition_dir(dir.path());
    std::fs::create_dir_all(&part).expect("partition dir");
    for (rel, bytes) in &t.others {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).expect("dir");
        std::fs::write(p, bytes).expect("write");
    }
    let indexes: Vec<&String> = t
        .files
        .iter()
        .map(|(n, _)| n)
        .filter(|n| {
            std::path::Path::new(n.as_str())
                .extension()
                .is_some_and(|e| e == "idx" || e == "tix")
        })
        .collect();
    let victim = indexes[pick as usize % indexes.len()];
    for (name, bytes) in &t.files {
        let contents = if name == victim {
            rest
        } else {
            bytes.as_slice()
        };
        std::fs::write(part.join(name), contents).expect("write");
    }

    let mq = Broker::open(dir.path(), config()).expect("a damaged index must not stop open");
    let expected: Vec<(u64, Vec<u8>)> = t.records.iter().map(|(o, v, _)| (*o, v.clone())).collect();
    let got = read_all(&mq).expect("read with a damaged index");
    assert_eq!(
        got, expected,
        "a damaged index changed what a full read returns"
    );
    let log = mqlite::raw::partition_log(&mq, TOPIC, 0).expect("partition");
    let mut c = mq.consumer(ConsumerConfig::default()).expect("consumer");
    c.assign(&[(TOPIC, 0)]).expect("assign");
    let step = 7 + usize::from(pick) % 13;
    for (offset, value, _) in t.records.iter().step_by(step) {
        c.seek(TOPIC, 0, *offset).expect("seek");
        let msgs = c.poll(Duration::ZERO).expect("poll after seek");
        let first = msgs
            .first()
            .expect("no record after a seek to a written offset");
        assert_eq!(first.offset(), *offset, "seek landed on another offset");
        assert_eq!(
            first.value(),
            Some(value.as_slice()),
            "seek read another value"
        );
        let mut n = 0u64;
        log.scan(*offset, |o, _, _| {
            assert!(o >= *offset);
            n += 1;
        })
        .expect("scan from an offset");
        assert_eq!(
            n,
            t.records.len() as u64 - offset,
            "scan from {offset} skipped records"
        );
    }
    for (offset, _, ts) in t.records.iter().step_by(step) {
        let found = c
            .offsets_for_times(&[(TOPIC, 0, *ts)])
            .expect("offsets_for_times")[0];
        assert_eq!(
            found,
            Some(*offset),
            "time lookup of {ts} with a damaged index"
        );
    }
    drop(c);
    let _ = mq.close();
}
