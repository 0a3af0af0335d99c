//! Tests of the read-only partition check, on directories written by a
//! real broker and damaged by hand.

use std::collections::BTreeMap;

use super::*;
use crate::log::batch::BatchHeader;
use crate::log::test_util::{batch_bytes, write_at};
use crate::{BorrowedRecord, Broker, Config, OpenMode, ProducerConfig, TopicConfig};

/// Exclusive mode, by name: the tests damage the files as that mode lays
/// them out and compare the check with what its open does.
fn broker(dir: &Path) -> Broker {
    let config = Config::default().retention_check_interval_ms(0);
    Broker::open(dir, config.mode(OpenMode::Exclusive)).unwrap()
}

fn pdir(dir: &Path) -> PathBuf {
    dir.join("topics").join("t").join("0")
}

/// `n` records in batches of `per`.
fn produce(b: &Broker, n: usize, per: usize) {
    let p = b.producer(ProducerConfig::default()).unwrap();
    let values: Vec<String> = (0..n).map(|i| format!("value-{i:05}-padding")).collect();
    for chunk in values.chunks(per) {
        let recs: Vec<BorrowedRecord<'_>> = chunk
            .iter()
            .map(|v| BorrowedRecord {
                topic: "t",
                partition: None,
                key: None,
                value: Some(v.as_bytes()),
                headers: &[],
                timestamp: None,
                sequence: None,
            })
            .collect();
        p.send_batch(&recs).unwrap();
    }
    p.close().unwrap();
}

/// A directory with topic `t` (small segments) holding `n` records.
fn filled(dir: &Path, n: usize) -> Broker {
    let b = broker(dir);
    b.create_topic("t", TopicConfig::new(1).segment_bytes(4096))
        .unwrap();
    produce(&b, n, 10);
    b
}

fn check(dir: &Path) -> PartitionCheck {
    check_partition(&pdir(dir), CheckOptions::default(), &mut |_| {}).unwrap()
}

/// Every file and directory under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.insert(p.clone(), None);
                stack.push(p);
            } else {
                out.insert(p.clone(), Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// Copies `from` (a directory tree) to `to`: the image a `kill -9`
/// leaves when taken while the broker is open.
fn copy_tree(from: &Path, to: &Path) {
    for (p, bytes) in snapshot(from) {
        let dest = to.join(p.strip_prefix(from).unwrap());
        match bytes {
            None => std::fs::create_dir_all(&dest).unwrap(),
            Some(b) => {
                std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                std::fs::write(&dest, b).unwrap();
            }
        }
    }
}

fn flip(path: &Path, pos: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[pos as usize] ^= 0x20;
    std::fs::write(path, b).unwrap();
}

#[test]
fn a_healthy_log_checks_out_while_its_owner_holds_the_lock_and_nothing_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let b = filled(tmp.path(), 500);
    // The broker is open (it holds LOCK) and has appended: unclean.
    let before = snapshot(tmp.path());
    let c = check(tmp.path());
    assert_eq!(
        snapshot(tmp.path()),
        before,
        "the check changed the directory"
    );
    assert!(c.issues.is_empty(), "{:?}", c.issues);
    assert!(
        matches!(c.shutdown, Shutdown::Unclean { .. }),
        "{:?}",
        c.shutdown
    );
    assert_eq!(c.records(), 500);
    assert_eq!(c.batches(), 50);
    assert_eq!((c.start_offset, c.end_offset), (0, 500));
    assert!(c.segments.len() > 3);
    assert!(c.cut.is_none());
    b.close().unwrap();
    drop(b);
    let c = check(tmp.path());
    assert!(c.issues.is_empty(), "{:?}", c.issues);
    assert_eq!(c.shutdown, Shutdown::Clean { offset: 500 });
}

#[test]
fn damage_in_a_sealed_segment_is_reported_and_the_walk_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    drop(filled(tmp.path(), 500));
    let healthy = check(tmp.path());
    let first = &healthy.segments[0];
    // The third batch of the first segment: find its position by
    // walking the healthy log's batch sizes.
    let bytes = std::fs::read(&first.path).unwrap();
    let mut pos = 0usize;
    for _ in 0..2 {
        pos += BatchHeader::parse(&bytes[pos..]).unwrap().total_len();
    }
    let h = BatchHeader::parse(&bytes[pos..]).unwrap();
    flip(&first.path, pos as u64 + 70);
    let before = snapshot(tmp.path());
    let c = check(tmp.path());
    assert_eq!(check(tmp.path()), c, "the same report every time");
    assert_eq!(snapshot(tmp.path()), before);
    assert_eq!(c.issues.len(), 1, "{:?}", c.issues);
    let i = &c.issues[0];
    assert_eq!((i.severity, i.kind), (Severity::Error, IssueKind::Batch));
    assert_eq!(i.path, first.path);
    assert_eq!(i.position, pos as u64);
    assert_eq!(i.reason, "CRC32C mismatch");
    assert_eq!(i.expected_offset, Some(20));
    assert_eq!(i.stored_offsets, Some((20, 29)));
    assert_eq!(i.len, h.total_len() as u64);
    assert_eq!(i.resumed, Some((pos as u64 + h.total_len() as u64, 30)));
    // Everything after it was still read.
    assert_eq!(c.records(), 490);
    assert_eq!(c.end_offset, 500);
    // Recovery cuts from there: the damaged batch and all after it.
    let cut = c.cut.as_ref().unwrap();
    assert_eq!((cut.position, cut.offset), (pos as u64, Some(20)));
    assert_eq!(cut.batches, 48);
    let total: u64 = c.segments.iter().map(|s| s.data_end).sum();
    assert_eq!(cut.bytes, total - pos as u64);
}

#[test]
fn a_broken_length_field_resyncs_by_scanning() {
    let tmp = tempfile::tempdir().unwrap();
    drop(filled(tmp.path(), 500));
    let seg = check(tmp.path()).segments[1].path.clone();
    // The length field of the segment's first batch.
    write_at(&seg, 8, &0xffff_fff0u32.to_le_bytes());
    let c = check(tmp.path());
    assert_eq!(c.issues.len(), 1, "{:?}", c.issues);
    let i = &c.issues[0];
    assert_eq!((i.path.as_path(), i.position), (seg.as_path(), 0));
    assert!(i.reason.contains("length"), "{}", i.reason);
    let (at, offset) = i.resumed.unwrap();
    assert_eq!(i.len, at);
    assert_eq!(offset, c.segments[1].base + 10);
    assert_eq!(c.records(), 490);
}

#[test]
fn segments_that_do_not_follow_on_are_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    drop(filled(tmp.path(), 500));
    let healthy = check(tmp.path());
    let gone = &healthy.segments[2];
    std::fs::remove_file(&gone.path).unwrap();
    let c = check(tmp.path());
    assert_eq!(c.issues.len(), 1, "{:?}", c.issues);
    let i = &c.issues[0];
    assert_eq!(i.kind, IssueKind::Chain);
    assert_eq!(i.path, healthy.segments[1].path);
    assert_eq!(i.position, healthy.segments[1].data_end);
    assert!(
        i.reason
            .contains(&format!("ends at offset {} but the next one", gone.base)),
        "{}",
        i.reason
    );
    // Recovery removes the segments after the gap.
    let later: u64 = c.segments[2..].iter().map(|s| s.batches).sum();
    assert_eq!(c.cut.as_ref().unwrap().batches, later);
}

#[test]
fn a_torn_tail_is_a_warning_after_a_crash_and_an_error_after_a_clean_close() {
    let live = tempfile::tempdir().unwrap();
    let b = filled(live.path(), 500);
    let crashed = tempfile::tempdir().unwrap();
    copy_tree(live.path(), crashed.path());
    b.close().unwrap();
    drop(b);
    for (dir, clean) in [(crashed.path(), false), (live.path(), true)] {
        let c = check(dir);
        assert!(c.issues.is_empty(), "{:?}", c.issues);
        let last = c.segments.last().unwrap().clone();
        // Half of a next batch: a partial write at the end.
        let torn = batch_bytes(500, &["a torn write of some length"]);
        write_at(&last.path, last.data_end, &torn[..torn.len() / 2]);
        let c = check(dir);
        assert_eq!(c.issues.len(), 1, "{:?}", c.issues);
        let i = &c.issues[0];
        assert_eq!(i.position, last.data_end);
        assert_eq!(i.expected_offset, Some(500));
        assert_eq!(i.len, (torn.len() / 2) as u64);
        assert!(i.resumed.is_none());
        if clean {
            assert_eq!((i.kind, i.severity), (IssueKind::Batch, Severity::Error));
            assert!(!c.is_ok());
        } else {
            assert_eq!(
                (i.kind, i.severity),
                (IssueKind::TornTail, Severity::Warning)
            );
            assert!(c.is_ok());
        }
        let cut = c.cut.unwrap();
        assert_eq!((cut.batches, cut.bytes), (1, i.len));
    }
}

#[test]
fn bytes_after_the_end_marker() {
    let live = tempfile::tempdir().unwrap();
    let b = filled(live.path(), 15);
    let dir = tempfile::tempdir().unwrap();
    copy_tree(live.path(), dir.path());
    drop(b);
    let c = check(dir.path());
    assert!(c.issues.is_empty(), "{:?}", c.issues);
    let seg = c.segments.last().unwrap().clone();
    // Stray bytes past the end marker: a partial write (torn tail).
    write_at(&seg.path, seg.data_end + 40, b"xyz");
    let c = check(dir.path());
    assert_eq!(c.issues.len(), 1, "{:?}", c.issues);
    assert_eq!(c.issues[0].kind, IssueKind::TornTail);
    assert_eq!(c.issues[0].position, seg.data_end);
    assert_eq!(c.issues[0].len, 43);
    // A valid batch after a zeroed length field: damage, and the batch
    // after it is still read.
    let next = batch_bytes(15, &["x"]);
    let later = batch_bytes(16, &["y"]);
    write_at(&seg.path, seg.data_end + 40, &[0; 3]);
    let mut both = next.clone();
    both.extend_from_slice(&later);
    write_at(&seg.path, seg.data_end, &both);
    write_at(&seg.path, seg.data_end + 8, &[0; 4]);
    let c = check(dir.path());
    assert_eq!(c.issues.len(), 1, "{:?}", c.issues);
    let i = &c.issues[0];
    assert_eq!((i.kind, i.severity), (IssueKind::Batch, Severity::Error));
    assert!(i.reason.contains("after the end marker"), "{}", i.reason);
    assert_eq!(i.resumed, Some((seg.data_end + next.len() as u64, 16)));
    assert_eq!(c.end_offset, 17);
}

#[test]
fn the_recovery_point_and_lost_records() {
    let tmp = tempfile::tempdir().unwrap();
    drop(filled(tmp.path(), 50));
    let point = pdir(tmp.path()).join(checkpoint::FILE);
    let good = std::fs::read(&point).unwrap();
    std::fs::write(&point, b"garbage").unwrap();
    let c = check(tmp.path());
    assert_eq!(c.shutdown, Shutdown::Damaged);
    assert_eq!(c.issues.len(), 1);
    assert_eq!(
        (c.issues[0].kind, c.issues[0].severity),
        (IssueKind::RecoveryPoint, Severity::Warning)
    );
    std::fs::remove_file(&point).unwrap();
    let c = check(tmp.path());
    assert_eq!((c.shutdown, c.issues.len()), (Shutdown::Unknown, 0));
    // A log shorter than its recovery point lost flushed records.
    std::fs::write(&point, good).unwrap();
    let seg = check(tmp.path()).segments.last().unwrap().clone();
    let len = seg.data_end;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&seg.path)
        .unwrap();
    f.set_len(0).unwrap();
    f.set_len(len).unwrap();
    let c = check(tmp.path());
    assert!(
        c.issues.iter().any(|i| i.kind == IssueKind::Lost),
        "{:?}",
        c.issues
    );
    assert!(!c.is_ok());
}

#[test]
fn a_full_recovery_cuts_damage_a_clean_open_does_not_look_for() {
    let tmp = tempfile::tempdir().unwrap();
    drop(filled(tmp.path(), 500));
    let healthy = check(tmp.path());
    // Damage in a sealed segment, after a clean close: the next open
    // trusts it.
    flip(&healthy.segments[1].path, 70);
    let damaged = check(tmp.path());
    let cut = damaged.cut.clone().unwrap();
    // Marked, the open checks every batch and cuts there.
    let b = broker(tmp.path());
    let err = request_full_recovery(tmp.path(), &[pdir(tmp.path())]).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    drop(b);
    let outside = tmp.path().join("elsewhere");
    assert!(matches!(
        request_full_recovery(tmp.path(), &[outside]),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        request_full_recovery(tmp.path(), &[pdir(tmp.path())]).unwrap(),
        1
    );
    let c = check(tmp.path());
    assert_eq!(c.shutdown, Shutdown::Unclean { offset: 0 });
    let b = broker(tmp.path());
    let info = b.topic("t").unwrap();
    assert_eq!(info.partitions[0].end_offset, healthy.segments[1].base);
    assert!(info.partitions[0].recovery.truncated_bytes > 0);
    drop(b);
    let after = check(tmp.path());
    assert!(after.issues.is_empty(), "{:?}", after.issues);
    assert_eq!(after.end_offset, cut.offset.unwrap());
}

#[test]
fn an_empty_or_missing_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let c = check_partition(tmp.path(), CheckOptions::default(), &mut |_| {}).unwrap();
    assert!(c.issues.is_empty() && c.segments.is_empty());
    assert_eq!(c.shutdown, Shutdown::Unknown);
    let missing = tmp.path().join("nope");
    assert!(check_partition(&missing, CheckOptions::default(), &mut |_| {}).is_err());
    assert!(!missing.exists());
}
