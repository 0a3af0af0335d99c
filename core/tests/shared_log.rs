//! Shared mode, log layer: a writer log keeping its tail page and reader
//! logs (separate maps, as in other processes) following it, across rolls
//! and retention, under concurrent appends, with garbage in the tail page,
//! in a child process, and after the writer's `kill -9`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqlite::log::batch::{self, Check};
use mqlite::log::shared_raw::{Options, ReaderLog, WriterLog};

/// The value of the `i`-th record written by these tests.
fn value(i: u64) -> Vec<u8> {
    format!("record-{i:08}-{}", "x".repeat((i % 97) as usize)).into_bytes()
}

/// Appends a batch of `n` records with the next values; returns the next
/// offset.
fn append(w: &WriterLog, n: u64) -> u64 {
    let start = w.end_offset();
    let values: Vec<Vec<u8>> = (start..start + n).map(value).collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    assert_eq!(w.append(&refs, 1_700_000_000_000).unwrap(), start);
    start + n
}

/// Reads everything from `from` and checks each record's value.
fn read_checked(r: &ReaderLog, from: u64) -> u64 {
    let records = r.read_from(from).unwrap();
    let mut next = from;
    for (offset, v) in records {
        assert_eq!(offset, next, "records out of order");
        assert_eq!(v, value(offset), "wrong value at {offset}");
        next += 1;
    }
    next
}

fn shared(segment_bytes: usize) -> Options {
    Options {
        shared: true,
        ..Options::new(segment_bytes)
    }
}

#[test]
fn a_reader_sees_every_batch_in_order_across_rolls_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let rings = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let opts = Options {
        retention_bytes: Some(24 << 10),
        doorbell: Some({
            let rings = Arc::clone(&rings);
            Arc::new(move || {
                rings.fetch_add(1, Ordering::Relaxed);
            })
        }),
        ..shared(16 << 10)
    };
    let w = WriterLog::open(dir.path(), &opts).unwrap();
    let r = ReaderLog::open(dir.path(), &opts).unwrap();
    assert_eq!(r.end_offset(), 0);
    let mut read = 0;
    let mut batches = 0;
    for round in 0..150 {
        for k in 0..=(round % 7) {
            append(&w, k % 3 + 1);
            batches += 1;
        }
        assert!(r.refresh(), "the reader learns of new batches");
        assert_eq!(r.end_offset(), w.end_offset());
        read = read_checked(&r, read.max(r.start_offset()));
        assert_eq!(read, w.end_offset());
        assert!(!r.refresh(), "nothing new: nothing changes");
    }
    assert!(w.segment_count() > 1, "the log rolled");
    assert!(w.start_offset() > 0, "retention removed segments");
    assert_eq!(
        r.start_offset(),
        w.start_offset(),
        "the reader dropped them too"
    );
    assert_eq!(r.segment_count(), w.segment_count());
    assert!(
        rings.load(Ordering::Relaxed) >= batches,
        "a ring per publish"
    );
    // A reader opened now starts at the log's start and reads it all.
    let late = ReaderLog::open(dir.path(), &opts).unwrap();
    assert_eq!(late.start_offset(), w.start_offset());
    assert_eq!(late.end_offset(), w.end_offset());
    assert_eq!(read_checked(&late, late.start_offset()), w.end_offset());
    // A reader never writes.
    let err = r.append(b"no").unwrap_err();
    assert!(matches!(err, mqlite::Error::InvalidArgument(_)), "{err}");
    assert_eq!(r.end_offset(), w.end_offset());
}

#[test]
fn a_reader_never_sees_a_batch_before_it_is_published() {
    let dir = tempfile::tempdir().unwrap();
    let opts = shared(64 << 10);
    let w = Arc::new(WriterLog::open(dir.path(), &opts).unwrap());
    let r = ReaderLog::open(dir.path(), &opts).unwrap();
    const TOTAL: u64 = 20_000;
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let w = Arc::clone(&w);
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            while w.end_offset() < TOTAL {
                append(&w, 1 + w.end_offset() % 4);
            }
            done.store(true, Ordering::Release);
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut read = 0;
    loop {
        let finished = done.load(Ordering::Acquire);
        r.refresh();
        let seen = r.end_offset();
        // Read after the reader's: the writer had published at least that.
        assert!(
            seen <= w.end_offset(),
            "{seen} seen before it was published"
        );
        read = read_checked(&r, read);
        assert_eq!(read, seen);
        if finished && read == w.end_offset() {
            break;
        }
        assert!(Instant::now() < deadline, "reader stuck at {read}");
    }
    writer.join().unwrap();
    assert!(read >= TOTAL);
}

/// Tail page fields (see core/src/shared/tail.rs).
const SEQ: u64 = 8;
const NEXT_OFFSET: u64 = 16;
const ACTIVE_BASE: u64 = 24;
const PUBLISHED: u64 = 32;
const LOG_START: u64 = 40;

#[test]
fn garbage_in_the_tail_page_gives_no_panic_and_no_wrong_data() {
    let dir = tempfile::tempdir().unwrap();
    let opts = shared(16 << 10);
    let w = WriterLog::open(dir.path(), &opts).unwrap();
    for _ in 0..100 {
        append(&w, 2);
    }
    let truth = w.end_offset();
    let tail = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("tail"))
        .unwrap();
    let put = |at: u64, v: u64| tail.write_all_at(&v.to_le_bytes(), at).unwrap();
    let put32 = |at: u64, v: u32| tail.write_all_at(&v.to_le_bytes(), at).unwrap();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let file_len = |base: u64| {
        std::fs::metadata(dir.path().join(format!("{base:020}.log")))
            .unwrap()
            .len()
    };
    for i in 0..400u64 {
        let r = ReaderLog::open(dir.path(), &opts).unwrap();
        // Lengths that tempt: past the data, the whole file, past the
        // file, past the mapping, huge; bases that exist or not.
        let active = w_active_base(dir.path());
        let published = match i % 6 {
            0 => next(),
            1 => file_len(active),
            2 => file_len(active) + 4096,
            3 => (16 << 10) + 1,
            4 => next() % file_len(active),
            _ => u64::MAX,
        };
        let base = match i % 4 {
            0 => active,
            1 => next() % truth,
            2 => next(),
            _ => 0,
        };
        put32(SEQ, (next() as u32) & !1);
        put(
            NEXT_OFFSET,
            if i % 3 == 0 {
                next()
            } else {
                truth + next() % 1000
            },
        );
        put(ACTIVE_BASE, base);
        put(PUBLISHED, published);
        put(LOG_START, if i % 5 == 0 { next() } else { 0 });
        r.refresh();
        r.refresh();
        assert!(
            r.end_offset() <= truth,
            "round {i}: end {} past the data",
            r.end_offset()
        );
        let from = r.start_offset();
        let got = read_checked(&r, from);
        assert_eq!(got, r.end_offset(), "round {i}");
    }
    // Random bytes all over, the magic included.
    for _ in 0..50 {
        let junk: Vec<u8> = (0..4096).map(|_| next() as u8).collect();
        tail.write_all_at(&junk, 0).unwrap();
        let r = ReaderLog::open(dir.path(), &opts).unwrap();
        r.refresh();
        assert!(r.end_offset() <= truth);
        assert_eq!(read_checked(&r, r.start_offset()), r.end_offset());
    }
    // A page that is not a tail page is ignored until the writer's next
    // publish restores it; readers then catch up.
    let r = ReaderLog::open(dir.path(), &opts).unwrap();
    r.refresh();
    assert!(r.end_offset() <= truth);
    append(&w, 1);
    r.refresh();
    assert_eq!(r.end_offset(), w.end_offset());
    assert_eq!(read_checked(&r, r.start_offset()), r.end_offset());
    // And after the writer reopens.
    w.close().unwrap();
    drop(w);
    let w = WriterLog::open(dir.path(), &opts).unwrap();
    append(&w, 1);
    r.refresh();
    assert_eq!(r.end_offset(), w.end_offset());
    assert_eq!(read_checked(&r, r.start_offset()), w.end_offset());
}

/// The base of the newest segment in `dir`.
fn w_active_base(dir: &Path) -> u64 {
    segment_bases(dir).into_iter().max().unwrap()
}

fn segment_bases(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".log")
                .filter(|s| s.len() == 20)
                .map(|s| s.parse().unwrap())
        })
        .collect();
    bases.sort_unstable();
    bases
}

/// The end of the valid batches at the start of `bytes`.
fn data_end(bytes: &[u8]) -> usize {
    let mut pos = 0;
    while let Check::Valid(h) = batch::check(&bytes[pos..]) {
        pos += h.total_len();
    }
    pos
}

#[test]
fn a_sealed_segment_in_shared_mode_ends_at_the_rounded_up_length() {
    for shared_mode in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            shared: shared_mode,
            ..Options::new(16 << 10)
        };
        let w = WriterLog::open(dir.path(), &opts).unwrap();
        while w.segment_count() < 4 {
            append(&w, 3);
        }
        let bases = segment_bases(dir.path());
        for base in &bases[..bases.len() - 1] {
            let bytes = std::fs::read(dir.path().join(format!("{base:020}.log"))).unwrap();
            let end = data_end(&bytes);
            let expected = if shared_mode {
                (end + batch::HEADER_LEN).next_multiple_of(4096)
            } else {
                end
            };
            assert_eq!(
                bytes.len(),
                expected,
                "segment {base}, shared: {shared_mode}"
            );
            assert!(bytes[end..].iter().all(|&b| b == 0));
        }
        // The log reopens (exclusive mode too) with every record.
        w.close().unwrap();
        drop(w);
        let w = WriterLog::open(dir.path(), &Options::new(16 << 10)).unwrap();
        let total = w.end_offset();
        w.close().unwrap();
        drop(w);
        let w = WriterLog::open(dir.path(), &shared(16 << 10)).unwrap();
        assert_eq!(w.end_offset(), total);
        let r = ReaderLog::open(dir.path(), &shared(16 << 10)).unwrap();
        assert_eq!(read_checked(&r, 0), total);
    }
}

const CHILD_ENV: &str = "MQLITE_SHARED_LOG_CHILD";
const CHILD_TOTAL_ENV: &str = "MQLITE_SHARED_LOG_TOTAL";

fn child(test: &str, dir: &Path, total: u64) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--ignored", "--exact", test, "--nocapture"])
        .env(CHILD_ENV, dir)
        .env(CHILD_TOTAL_ENV, total.to_string())
        .stdout(Stdio::null());
    c
}

/// In a child process: reads the log in the directory named by
/// `CHILD_ENV` until it holds `CHILD_TOTAL_ENV` records, checking each.
#[test]
#[ignore = "run by a_reader_in_a_child_process_reads_what_the_parent_writes"]
fn child_reader() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let total: u64 = std::env::var(CHILD_TOTAL_ENV).unwrap().parse().unwrap();
    let r = ReaderLog::open(Path::new(&dir), &shared(16 << 10)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut read = 0;
    while read < total {
        assert!(Instant::now() < deadline, "child reader stuck at {read}");
        if !r.refresh() {
            std::thread::sleep(Duration::from_millis(1));
        }
        read = read_checked(&r, read.max(r.start_offset()));
    }
}

#[test]
fn a_reader_in_a_child_process_reads_what_the_parent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = shared(16 << 10);
    let w = WriterLog::open(dir.path(), &opts).unwrap();
    for _ in 0..50 {
        append(&w, 2);
    }
    const TOTAL: u64 = 3000;
    let mut c = child("child_reader", dir.path(), TOTAL).spawn().unwrap();
    while w.end_offset() < TOTAL {
        append(&w, 1 + w.end_offset() % 3);
        if w.end_offset().is_multiple_of(64) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let status = c.wait().unwrap();
    assert!(status.success(), "child reader failed: {status}");
    assert!(w.segment_count() > 2, "the child followed rolls");
}

/// In a child process: appends to the log in `CHILD_ENV` without end,
/// until killed.
#[test]
#[ignore = "run by a_writer_killed_mid_append_shows_no_torn_batch"]
fn child_writer() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let w = WriterLog::open(Path::new(&dir), &shared(64 << 10)).unwrap();
    loop {
        append(&w, 1 + w.end_offset() % 5);
    }
}

#[test]
fn a_writer_killed_mid_append_shows_no_torn_batch() {
    for round in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut c = child("child_writer", dir.path(), 0).spawn().unwrap();
        let opts = shared(64 << 10);
        let deadline = Instant::now() + Duration::from_secs(30);
        let r = loop {
            if let Ok(r) = ReaderLog::open(dir.path(), &opts) {
                break r;
            }
            assert!(Instant::now() < deadline, "the child writer never started");
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut read = 0;
        while read < 2000 + round * 3000 {
            assert!(Instant::now() < deadline, "reader stuck at {read}");
            r.refresh();
            read = read_checked(&r, read);
        }
        // SIGKILL, in the middle of some append.
        c.kill().unwrap();
        c.wait().unwrap();
        r.refresh();
        read = read_checked(&r, read);
        assert_eq!(read, r.end_offset());
        // Every batch in the files up to what was published checks out;
        // a torn one, if any, lies past it.
        let fresh = ReaderLog::open(dir.path(), &opts).unwrap();
        assert!(fresh.end_offset() >= read);
        assert_eq!(read_checked(&fresh, 0), fresh.end_offset());
    }
}

/// Every file in `dir`: name, length, modification time, contents.
fn snapshot(dir: &Path) -> Vec<(String, u64, std::time::SystemTime, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            (
                e.file_name().into_string().unwrap(),
                meta.len(),
                meta.modified().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_reader_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let opts = shared(16 << 10);
    let w = WriterLog::open(dir.path(), &opts).unwrap();
    while w.segment_count() < 3 {
        append(&w, 2);
    }
    // Leftovers the writer's own open would remove.
    std::fs::write(dir.path().join("00000000000000999999.log.deleted"), b"x").unwrap();
    std::fs::write(dir.path().join("next.log"), b"").unwrap();
    let before = snapshot(dir.path());
    let r = ReaderLog::open(dir.path(), &opts).unwrap();
    r.refresh();
    assert_eq!(read_checked(&r, 0), w.end_offset());
    assert!(r.append(b"no").is_err());
    drop(r);
    assert_eq!(snapshot(dir.path()), before, "the reader changed a file");
}

/// The encoded size of a two-record batch with values of these lengths.
fn two_record_len(a: usize, b: usize) -> usize {
    let (va, vb) = (vec![1u8; a], vec![2u8; b]);
    let recs = [&va, &vb].map(|v| mqlite::log::batch::RecordRef {
        key: None,
        value: Some(v.as_slice()),
        headers: &[],
        timestamp: 5,
    });
    batch::batch_len(&recs)
}

/// The case the trim rule is for: a segment whose data ends on a page
/// boundary, sealed, while a reader that mapped it when the file was
/// longer is told (by a wrong tail page) that the whole old length is
/// published. It reads the zero header after the data, inside the file,
/// and stops; trimmed to the data exactly, that header would be on a page
/// past the end of the file (`SIGBUS`).
#[test]
fn a_lying_tail_after_a_roll_stops_at_the_zeros_after_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let opts = shared(16 << 10);
    let w = WriterLog::open(dir.path(), &opts).unwrap();
    let mut written: Vec<Vec<u8>> = Vec::new();
    let mut put = |w: &WriterLog, a: usize, b: usize| {
        let (va, vb) = (vec![b'a'; a], vec![b'b'; b]);
        w.append(&[&va, &vb], 5).unwrap();
        written.push(va);
        written.push(vb);
    };
    // Fill the first segment to exactly 12 KiB.
    let mut end = 0;
    while 12_288 - end > 1_000 {
        put(&w, 200, 200);
        end += two_record_len(200, 200);
    }
    let rest = 12_288 - end;
    let b = (0..rest)
        .find(|&b| two_record_len(100, b) == rest)
        .expect("a second value length that fills the page");
    put(&w, 100, b);
    let r = ReaderLog::open(dir.path(), &opts).unwrap(); // maps 16 KiB
    assert_eq!(r.end_offset(), w.end_offset());
    // A batch that does not fit: the roll seals the data at 12 KiB.
    put(&w, 3_000, 3_000);
    assert_eq!(w.segment_count(), 2);
    let first = dir.path().join(format!("{:020}.log", 0));
    assert_eq!(std::fs::metadata(&first).unwrap().len(), 16_384);
    // The lie: the old segment is still active, all 16 KiB published.
    let tail = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("tail"))
        .unwrap();
    tail.write_all_at(&2u32.to_le_bytes(), SEQ).unwrap();
    tail.write_all_at(&0u64.to_le_bytes(), ACTIVE_BASE).unwrap();
    tail.write_all_at(&16_384u64.to_le_bytes(), PUBLISHED)
        .unwrap();
    r.refresh();
    let got = r.read_from(0).unwrap();
    assert!(got.len() <= written.len());
    for (i, (offset, v)) in got.iter().enumerate() {
        assert_eq!(*offset, i as u64);
        assert_eq!(v, &written[i]);
    }
}
