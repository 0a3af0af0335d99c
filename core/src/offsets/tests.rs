//! The offset store over its snapshot and journal: reopens, compaction,
//! records a crash cut short, old files, and stores that follow others.
#![allow(clippy::unwrap_used)]

use super::*;

fn c(offset: u64, metadata: &str) -> CommittedOffset {
    CommittedOffset {
        offset,
        metadata: metadata.to_owned(),
        timestamp: 7,
    }
}

fn commit(s: &mut OffsetStore, t: &str, p: u32, o: u64, m: &str) {
    let pending = s.commit(&[(t.to_owned(), p, c(o, m))], true).unwrap();
    let p = pending.unwrap();
    p.syncer.wait(p.ticket, || s.sync_target()).unwrap();
}

fn offset(s: &OffsetStore, t: &str, p: u32) -> Option<u64> {
    s.get(t, p).map(|c| c.offset)
}

fn snapshot(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("groups/g.offsets")).unwrap()).unwrap()
}

#[test]
fn commits_survive_a_reopen_and_the_journal_is_folded_past_its_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    let meta = "m".repeat(500);
    // About 1.7 MB of records: folded into a snapshot at least once.
    for i in 0..3000u64 {
        commit(&mut s, "t", (i % 3) as u32, i, &meta);
    }
    let generation = snapshot(dir.path())["journal"].as_u64().unwrap();
    assert!(generation >= 2, "generation {generation}");
    let journal_len = std::fs::metadata(dir.path().join("groups/g.commits"))
        .unwrap()
        .len();
    assert!(journal_len <= COMPACT_AT + 1024, "{journal_len}");
    drop(s);
    let s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    assert_eq!(offset(&s, "t", 0), Some(2997));
    assert_eq!(offset(&s, "t", 1), Some(2998));
    assert_eq!(offset(&s, "t", 2), Some(2999));
    assert_eq!(s.get("t", 2).unwrap().metadata, meta);
}

#[test]
fn a_record_a_crash_cut_short_is_cut_off_before_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    commit(&mut s, "t", 0, 1, "");
    commit(&mut s, "t", 1, 2, "");
    drop(s);
    let journal = dir.path().join("groups/g.commits");
    let whole = std::fs::read(&journal).unwrap();
    // Half of a third record.
    let third = journal::encode(&[("t".to_owned(), 0, c(99, "x"))]).unwrap();
    let mut torn = whole.clone();
    torn.extend_from_slice(&third[..third.len() / 2]);
    std::fs::write(&journal, &torn).unwrap();
    let mut s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    assert_eq!(offset(&s, "t", 0), Some(1), "the torn record is not read");
    commit(&mut s, "t", 0, 3, "");
    drop(s);
    let s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    assert_eq!(offset(&s, "t", 0), Some(3), "the commit after it is read");
    assert_eq!(offset(&s, "t", 1), Some(2));
}

#[test]
fn a_deleted_topic_stays_deleted_even_when_a_crash_left_the_old_journal() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("groups/g.commits");
    let mut s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    commit(&mut s, "gone", 0, 5, "");
    commit(&mut s, "kept", 0, 6, "");
    let old_journal = std::fs::read(&journal).unwrap();
    s.remove_topic("gone").unwrap();
    drop(s);
    let s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    assert_eq!(offset(&s, "gone", 0), None);
    assert_eq!(offset(&s, "kept", 0), Some(6));
    drop(s);
    // A crash after the new snapshot, before the new journal: the old
    // journal's records are not applied again.
    std::fs::write(&journal, old_journal).unwrap();
    let mut s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    assert_eq!(offset(&s, "gone", 0), None);
    assert_eq!(offset(&s, "kept", 0), Some(6));
    commit(&mut s, "kept", 0, 7, "");
    drop(s);
    let s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    assert_eq!(offset(&s, "gone", 0), None);
    assert_eq!(offset(&s, "kept", 0), Some(7));
}

#[test]
fn an_offsets_file_of_version_1_is_read_and_continued() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("groups")).unwrap();
    std::fs::write(
        dir.path().join("groups/g.offsets"),
        br#"{"version":1,"offsets":{"t":{"0":{"offset":12,"metadata":"m","timestamp":3}}}}"#,
    )
    .unwrap();
    let mut s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    assert_eq!(offset(&s, "t", 0), Some(12));
    assert_eq!(s.get("t", 0).unwrap().metadata, "m");
    commit(&mut s, "t", 1, 4, "");
    drop(s);
    assert_eq!(snapshot(dir.path())["version"], 2);
    let s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    assert_eq!(offset(&s, "t", 0), Some(12));
    assert_eq!(offset(&s, "t", 1), Some(4));
}

#[test]
fn a_store_that_follows_the_files_sees_every_commit_across_foldings() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    let mut r = OffsetStore::open_read_only(dir.path(), "g", 0o600).unwrap();
    let meta = "m".repeat(2000);
    for i in 0..1200u64 {
        commit(&mut w, "t", (i % 5) as u32, i, &meta);
        if i % 97 == 0 {
            r.refresh().unwrap();
            assert_eq!(offset(&r, "t", (i % 5) as u32), Some(i), "at {i}");
        }
    }
    r.refresh().unwrap();
    assert_eq!(r.all(), w.all());
    assert!(snapshot(dir.path())["journal"].as_u64().unwrap() >= 2);
}

#[test]
fn a_commit_that_fails_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    commit(&mut s, "t", 0, 1, "");
    let huge = "h".repeat(usize::try_from(MAX_METADATA_LEN).unwrap());
    let err = s
        .commit(&[("t".to_owned(), 0, c(2, &huge))], true)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert_eq!(offset(&s, "t", 0), Some(1));
    drop(s);
    let s = OffsetStore::open(dir.path(), "g", 0o600).unwrap();
    assert_eq!(offset(&s, "t", 0), Some(1));
}

#[test]
fn durable_commits_from_many_threads_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let s = std::sync::Mutex::new(OffsetStore::open(dir.path(), "g", 0o600).unwrap());
    std::thread::scope(|scope| {
        for t in 0..8u32 {
            let s = &s;
            scope.spawn(move || {
                for i in 0..50u64 {
                    let pending = crate::sync::lock(s)
                        .commit(&[("t".to_owned(), t, c(i, ""))], true)
                        .unwrap()
                        .unwrap();
                    pending
                        .syncer
                        .wait(pending.ticket, || crate::sync::lock(s).sync_target())
                        .unwrap();
                }
            });
        }
    });
    let s = s.into_inner().unwrap();
    for t in 0..8 {
        assert_eq!(offset(&s, "t", t), Some(49));
    }
}
