//! Unit tests of the partition log's internals: blocks written ahead of
//! small flushes, and group commit's hand-over of a round.

use std::path::Path;

use super::batch::{ProducerFields, RecordRef};
use super::segment::PREPARED_STEM;
use super::*;
use crate::faults::SyncKind;
use crate::{Broker, Config, TopicConfig};

fn open(dir: &Path, segment_bytes: u64) -> (Broker, Arc<PartitionLog>) {
    open_in(dir, segment_bytes, Config::default())
}

fn open_in(dir: &Path, segment_bytes: u64, config: Config) -> (Broker, Arc<PartitionLog>) {
    let mq = Broker::open(dir, config.prefault(false)).unwrap();
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(segment_bytes))
        .unwrap();
    let log = mq.inner().topic("t").unwrap().partition(0).unwrap();
    (mq, log)
}

fn append(log: &PartitionLog, value: &[u8], count: usize) -> u64 {
    let recs: Vec<RecordRef<'_>> = (0..count)
        .map(|_| RecordRef {
            key: None,
            value: Some(value),
            headers: &[],
            timestamp: 1,
        })
        .collect();
    log.append(&recs, ProducerFields::default())
        .unwrap()
        .base_offset
}

/// Reads the log's batches from offset 0, each of one record following on
/// (base offsets 0, 1, 2, ...); returns how many there are.
fn one_record_batches(log: &PartitionLog) -> u64 {
    let mut c = log.cursor(0).unwrap();
    let mut n = 0;
    while let Some((_, h)) = log.next_batch(&mut c).unwrap() {
        assert_eq!(h.base_offset, n);
        n += 1;
    }
    n
}

fn written_ahead(log: &PartitionLog) -> usize {
    while log.populating.load(Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    lock(&log.group.written_ahead).to
}

/// Small flushes get the blocks ahead of the writer written (so that
/// their own msyncs overwrite written blocks); the written-ahead zeros
/// never show through what the writer put there; large flushes do not
/// write ahead.
#[test]
fn small_flushes_write_blocks_ahead_and_large_ones_do_not() {
    writes_blocks_ahead_of_small_flushes(Config::default());
}

/// The same in shared mode: the write-ahead writes no byte of the map, so
/// another process's appends there are never overwritten.
#[test]
fn small_flushes_write_blocks_ahead_in_shared_mode_too() {
    writes_blocks_ahead_of_small_flushes(Config::default().shared(true));
}

fn writes_blocks_ahead_of_small_flushes(config: Config) {
    let dir = tempfile::tempdir().unwrap();
    let (_mq, log) = open_in(dir.path(), 8 << 20, config.clone());
    let value = [7u8; 100];
    for _ in 0..3 {
        append(&log, &value, 1);
        log.flush().unwrap();
    }
    let ahead = written_ahead(&log);
    let active = Arc::clone(log.segments.read().unwrap().last().unwrap());
    let (end, allocated) = (active.end(), active.allocated());
    // As far as the file goes (it grows in steps ahead of the writer), and
    // never past it.
    assert!(
        ahead >= (end + WRITE_AHEAD_WINDOW / 2).min(allocated) && ahead > end,
        "{ahead} <= {end}"
    );
    assert!(ahead <= allocated, "{ahead} past the file ({allocated})");
    // The writer goes on through the written-ahead window and past it;
    // every record reads back.
    let per_window = WRITE_AHEAD_WINDOW / 150;
    for i in 0..per_window * 2 {
        append(&log, &value, 1);
        if i % 50 == 0 {
            log.flush().unwrap();
        }
    }
    log.flush().unwrap();
    let again = written_ahead(&log);
    assert!(again > ahead, "no second window");
    assert!(again <= active.allocated(), "written ahead past the file");
    let mut c = log.cursor(0).unwrap();
    let mut records = 0u64;
    while let Some((at, h)) = log.next_batch(&mut c).unwrap() {
        assert_eq!(h.base_offset, records);
        let bytes = c.seg.bytes(at, at + h.total_len());
        assert!(bytes.windows(value.len()).any(|w| w == value));
        records += u64::from(h.record_count);
    }
    assert_eq!(records, log.end_offset());

    let dir = tempfile::tempdir().unwrap();
    let (_mq, log) = open_in(dir.path(), 8 << 20, config);
    for _ in 0..8 {
        append(&log, &[1u8; 1000], 100);
        log.flush().unwrap();
    }
    assert_eq!(written_ahead(&log), 0, "large flushes wrote ahead");
}

/// The caller that completes the collection a leader waits for flushes
/// in its place (on its own thread, not waking the leader first); the
/// leader returns once that flush covers it.
#[test]
fn the_caller_completing_a_round_flushes_for_the_leader() {
    // The leader collects for at most 2 ms before it flushes alone; on a
    // loaded machine this thread may not see it collecting in time, so the
    // scene is set again (a fresh log) until it does.
    for _attempt in 0..100 {
        let dir = tempfile::tempdir().unwrap();
        let (_mq, log) = open(dir.path(), 1 << 20);
        let syncs = Arc::new(Mutex::new(Vec::new()));
        let (root, seen) = (dir.path().to_owned(), Arc::clone(&syncs));
        crate::faults::set_sync_hook(Some(Arc::new(move |path: &Path, kind, before| {
            if before && path.starts_with(&root) && matches!(kind, SyncKind::Range { .. }) {
                lock(&seen).push(std::thread::current().id());
            }
            Ok(())
        })));
        {
            let mut st = lock(&log.group.state);
            st.expected = 2;
            st.last_flush = std::time::Duration::from_secs(10);
        }
        let first = append(&log, b"a", 1);
        let took_over = std::thread::scope(|s| {
            let leader = s.spawn(|| log.flush_to(first + 1));
            while !lock(&log.group.state).collecting {
                if leader.is_finished() {
                    // It flushed alone before this thread came.
                    leader.join().unwrap().unwrap();
                    return false;
                }
                std::thread::yield_now();
            }
            assert_eq!(log.flushes(), 0);
            let second = append(&log, b"b", 1);
            log.flush_to(second + 1).unwrap();
            leader.join().unwrap().unwrap();
            true
        });
        crate::faults::set_sync_hook(None);
        if !took_over {
            continue;
        }
        assert_eq!(*lock(&syncs), vec![std::thread::current().id()]);
        assert_eq!(log.flushes(), 1);
        assert!(log.flushed_fast.load(Ordering::Acquire) >= 2);
        let st = lock(&log.group.state);
        assert_eq!(st.expected, 2);
        assert!(!st.collecting && !st.in_progress && !st.leader_waiting);
        return;
    }
    panic!("the leader never waited long enough for a second caller");
}

/// The prefetch hints follow the writer: the tail moves by each batch
/// written through the map, and the segment is the active one, a new one
/// after a roll.
#[test]
fn prefetch_hints_follow_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let (_mq, log) = open(dir.path(), 64 << 10);
    let active = || Arc::clone(log.segments.read().unwrap().last().unwrap());
    let value = [7u8; 100];
    assert_eq!(log.hints.tail.load(Ordering::Relaxed), 0);
    append(&log, &value, 1);
    let first = log.hints.tail.load(Ordering::Relaxed);
    let end = active().end();
    append(&log, &value, 1);
    let second = log.hints.tail.load(Ordering::Relaxed);
    assert_eq!(second - first, active().end() - end);
    let seg = Arc::as_ptr(&active()) as usize;
    assert_eq!(log.hints.segment.load(Ordering::Relaxed), seg);
    // Prefetching reads the hints only.
    log.prefetch_writer();
    log.prefetch_tail();
    assert_eq!(log.hints.tail.load(Ordering::Relaxed), second);
    while log.segments.read().unwrap().len() < 2 {
        append(&log, &value, 1);
    }
    let rolled = Arc::as_ptr(&active()) as usize;
    assert_ne!(rolled, seg);
    assert_eq!(log.hints.segment.load(Ordering::Relaxed), rolled);
}

/// Records written with `pwritev` (values of 512 KiB) have the next
/// segment prepared on the pool once the active one is half full, and the
/// roll takes it (its `next.*` files are renamed, none is left).
#[test]
fn pwritev_batches_have_the_next_segment_prepared() {
    let dir = tempfile::tempdir().unwrap();
    // Exclusive mode, by name: its prepared files are `next.*` (shared
    // mode names them per process).
    let config = Config::default().mode(crate::OpenMode::Exclusive);
    let mq = Broker::open(dir.path(), config).unwrap();
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(4 << 20))
        .unwrap();
    let log = mq.inner().topic("t").unwrap().partition(0).unwrap();
    let value = vec![5u8; 512 << 10];
    let records = [RecordRef {
        key: None,
        value: Some(&value),
        headers: &[],
        timestamp: 1,
    }];
    let prepared = log.dir.join(format!("{PREPARED_STEM}.log"));
    let mut appended = 0;
    while log.segment_count() == 1 {
        let a = log.append(&records, ProducerFields::default()).unwrap();
        assert_eq!(a.base_offset, appended);
        appended += 1;
        if appended == 5 {
            // Past half of the first segment: the next one is being made.
            let deadline = Instant::now() + std::time::Duration::from_secs(30);
            while !prepared.exists() && Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert!(prepared.exists(), "no segment prepared after 5 appends");
        }
    }
    assert!(appended > 5);
    assert!(
        !prepared.exists(),
        "the roll did not take the prepared segment"
    );
    assert_eq!(one_record_batches(&log), appended);
}

/// A broker opened in shared mode with `prefault` in `dir`, and partition
/// 0 of its topic `t` of 1 MiB segments.
fn shared_prefaulting_log(dir: &Path) -> (Broker, Arc<PartitionLog>) {
    let config = Config::default()
        .mode(crate::OpenMode::Shared)
        .prefault(true);
    let mq = Broker::open(dir, config).unwrap();
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(1 << 20))
        .unwrap();
    let log = mq.inner().topic("t").unwrap().partition(0).unwrap();
    (mq, log)
}

/// Whether `path` exists, waiting up to 30 s for a background job to
/// create it.
fn appears(path: &Path) -> bool {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while !path.exists() && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    path.exists()
}

/// In shared mode too, pages are faulted in ahead of the writer, a window
/// at a time, on the broker's pool, and the next segment is prepared once
/// the active one is half full, under this process's own name
/// (`next.<token>.*`, never exclusive mode's `next.*`): the roll takes it,
/// every batch appended reads back, in order, across the rolls, and the
/// close leaves no prepared file.
#[test]
fn shared_mode_faults_pages_in_ahead_and_prepares_its_own_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (mq, log) = shared_prefaulting_log(dir.path());
    let value = |i: u64| vec![(i % 251) as u8; 4096];
    let stem = log.prepared_stem();
    assert!(stem.starts_with(&format!("{PREPARED_STEM}.")), "{stem}");
    let (ours, exclusive) = (
        log.dir.join(format!("{stem}.log")),
        log.dir.join(format!("{PREPARED_STEM}.log")),
    );
    let (mut populated, mut ready, mut taken) = (false, false, 0);
    let mut i = 0u64;
    while log.segment_count() < 4 {
        let segments = log.segment_count();
        assert_eq!(append(&log, &value(i), 1), i);
        i += 1;
        while log.populating.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        populated |= lock(&log.writer).populated_to > 0;
        if log.segment_count() > segments {
            // Rolled: the prepared segment's files were renamed.
            assert!(ready, "rolled before a segment was prepared");
            taken += u32::from(!ours.exists());
            ready = false;
        } else if lock(&log.writer).prepare_requested && !ready {
            assert!(appears(&ours), "no segment prepared past half of one");
            ready = true;
        }
        assert!(!exclusive.exists());
    }
    assert!(populated, "no window faulted in ahead of the writer");
    assert_eq!(taken, 3, "rolls that took the prepared segment");
    assert_eq!(one_record_batches(&log), i);
    let pdir = log.dir.clone();
    drop(log);
    mq.close().unwrap();
    let left: Vec<String> = std::fs::read_dir(&pdir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(PREPARED_STEM))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A shared-mode writer preparing its next segment first removes what
/// processes that ended without closing the directory prepared in the
/// partition directory; what a live process prepared, and other names,
/// stay.
#[test]
fn preparing_in_shared_mode_removes_what_dead_processes_prepared() {
    let dir = tempfile::tempdir().unwrap();
    let (_mq, log) = shared_prefaulting_log(dir.path());
    // Another process's registration, alive (held here), and a token no
    // process holds.
    let live = crate::shared::ProcessSlot::register(dir.path(), 0o700).unwrap();
    let dead = 0x0123_4567_89ab_cdef_u64;
    let name = |token: u64, ext: &str| format!("{PREPARED_STEM}.{token:016x}.{ext}");
    let mut gone = vec![name(dead, "log"), name(dead, "idx"), name(dead, "tix")];
    let stay = vec![
        name(live.token(), "log"),
        name(live.token(), "tix"),
        name(dead, "bak"),
        format!("{PREPARED_STEM}.0123.log"),
        format!("{PREPARED_STEM}.{dead:016x}"),
    ];
    for n in gone.iter().chain(&stay) {
        std::fs::write(log.dir.join(n), b"x").unwrap();
    }
    let ours = log.dir.join(format!("{}.log", log.prepared_stem()));
    let mut i = 0;
    while !ours.exists() {
        assert!(i < 1000, "no segment prepared");
        append(&log, &[1u8; 4096], 1);
        i += 1;
        if lock(&log.writer).prepare_requested {
            appears(&ours);
        }
    }
    for n in &stay {
        assert!(log.dir.join(n).exists(), "{n} was removed");
    }
    gone.retain(|n| log.dir.join(n).exists());
    assert!(gone.is_empty(), "left: {gone:?}");
    drop(live);
}
