//! Committed offsets never make a consumer skip what it has not read: an
//! offset beyond a log that recovery cut is out of range and reset, group
//! and broadcast offsets never share a file, and a commit too large to read
//! back is refused instead of bricking the directory.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::{batches, cfg, partition_dir, segment_logs};
use mqlite::{
    Broker, Config, Consumer, ConsumerConfig, Error, OffsetReset, OpenMode, ProducerConfig, Record,
    TopicConfig, DEFAULT_MAX_COMMIT_METADATA_BYTES,
};

/// Exclusive mode, by name: for the tests whose log is cut by its open's
/// recovery (docs/decisions.md, "A data directory's mode by name").
fn exclusive() -> Config {
    cfg().mode(OpenMode::Exclusive)
}

/// Sends `n` records to `t`/0 one batch each, values `"{tag}-{i}"`.
fn send(mq: &Broker, tag: &str, n: usize) {
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..n {
        p.send(Record::new("t").partition(0).value(format!("{tag}-{i}")))
            .unwrap();
    }
}

/// Everything `c` polls until `n` messages came or polls come back empty.
fn drain(c: &mut Consumer, n: usize) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    while out.len() < n {
        let msgs = c.poll(Duration::from_millis(200)).unwrap();
        if msgs.is_empty() {
            break;
        }
        out.extend(msgs.iter().map(|m| {
            (
                m.offset(),
                String::from_utf8(m.value().unwrap().to_vec()).unwrap(),
            )
        }));
    }
    out
}

fn reader(group: &str, reset: OffsetReset, broadcast: bool) -> ConsumerConfig {
    ConsumerConfig::group(group)
        .client_id("node")
        .broadcast(broadcast)
        .auto_offset_reset(reset)
        .enable_auto_commit(false)
        .max_poll_records(10_000)
}

/// 1,200 one-record batches over small segments, offset 600 committed by
/// group `g` and by broadcast consumer `node` of group `b`; then a crash
/// (the recovery point says unclean) with one damaged batch in the second
/// segment. Returns where recovery will cut the log.
fn committed_then_damaged(dir: &Path) -> u64 {
    {
        let mq = Broker::open(dir, cfg()).unwrap();
        mq.create_topic("t", TopicConfig::new(1).segment_bytes(8 * 1024))
            .unwrap();
        send(&mq, "old", 1200);
        for (group, broadcast) in [("g", false), ("b", true)] {
            let mut c = mq
                .consumer(reader(group, OffsetReset::Earliest, broadcast))
                .unwrap();
            c.assign(&[("t", 0)]).unwrap();
            c.commit_offsets(&[("t", 0, 600, "")]).unwrap();
        }
    }
    let logs = segment_logs(dir, "t", 0);
    assert!(logs.len() > 3, "{} segments", logs.len());
    let bytes = std::fs::read(&logs[1]).unwrap();
    let spans = batches(&bytes);
    let bad = spans[spans.len() / 2];
    assert!(bad.base < 600);
    let mut damaged = bytes.clone();
    damaged[bad.pos + 30] ^= 0x40;
    std::fs::write(&logs[1], damaged).unwrap();
    // A crash: the next open checks every batch and cuts at the damage.
    std::fs::remove_file(partition_dir(dir, "t", 0).join("recovery.point")).unwrap();
    bad.base
}

#[test]
fn a_committed_offset_beyond_a_cut_log_resumes_at_the_cut() {
    for broadcast in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let cut = committed_then_damaged(tmp.path());
        let group = if broadcast { "b" } else { "g" };
        {
            let mq = Broker::open(tmp.path(), exclusive()).unwrap();
            let info = &mq.topic("t").unwrap().partitions[0];
            assert_eq!(info.end_offset, cut);
            // Every one-record batch cut counts, those of the segments
            // removed after the damaged one included.
            assert_eq!(info.recovery.dropped_batches, 1200 - cut);
            assert_eq!(info.recovery.corruptions, 1);
            // New acknowledged records get the offsets the cut freed,
            // below and above the old committed offset.
            send(&mq, "new", 700);
            // The group reads every one of them (none is skipped because
            // the stale committed offset 600 now lies inside the log).
            let mut c = mq
                .consumer(reader(group, OffsetReset::Latest, broadcast))
                .unwrap();
            c.assign(&[("t", 0)]).unwrap();
            assert_eq!(c.lag().unwrap()[0].2, 700);
            let got = drain(&mut c, 700);
            assert_eq!(got.len(), 700, "broadcast={broadcast}");
            assert_eq!(got[0], (cut, "new-0".to_owned()));
            assert_eq!(got[699], (cut + 699, "new-699".to_owned()));
            assert_eq!(c.stats().offset_resets, 1);
            c.commit().unwrap();
        }
        // Committed again: nothing is out of range any more.
        let mq = Broker::open(tmp.path(), exclusive()).unwrap();
        let mut c = mq
            .consumer(reader(group, OffsetReset::Error, broadcast))
            .unwrap();
        c.assign(&[("t", 0)]).unwrap();
        assert_eq!(c.position("t", 0).unwrap(), cut + 700);
        assert_eq!(c.stats().offset_resets, 0);
    }
}

#[test]
fn the_out_of_range_mark_survives_reopens_and_subscriptions() {
    let tmp = tempfile::tempdir().unwrap();
    let cut = committed_then_damaged(tmp.path());
    {
        // Recovery cuts; the process writes past 600 and closes before any
        // consumer of `g` comes back.
        let mq = Broker::open(tmp.path(), exclusive()).unwrap();
        send(&mq, "new", 700);
    }
    let mq = Broker::open(tmp.path(), exclusive()).unwrap();
    // With the reset policy `error`, the stale offset is reported, not used.
    let mut strict = mq.consumer(reader("g", OffsetReset::Error, false)).unwrap();
    strict.assign(&[("t", 0)]).unwrap();
    for _ in 0..2 {
        match strict.poll(Duration::ZERO) {
            Err(Error::OffsetOutOfRange { offset, end, .. }) => {
                assert_eq!((offset, end), (600, cut));
            }
            other => panic!("{other:?}"),
        }
    }
    drop(strict);
    // A group member that subscribes resumes at the cut.
    let mut member = mq
        .consumer(reader("g", OffsetReset::Earliest, false))
        .unwrap();
    member.subscribe(&["t"]).unwrap();
    let got = drain(&mut member, 700);
    assert_eq!(got.len(), 700);
    assert_eq!(got[0], (cut, "new-0".to_owned()));
    assert_eq!(member.stats().offset_resets, 1);
}

#[test]
fn group_and_broadcast_offsets_never_collide() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    send(&mq, "v", 10);
    // Group `a.b` and broadcast consumer `b` of group `a`: names that the
    // old storage mapped onto one file.
    let mut member = mq
        .consumer(
            ConsumerConfig::group("a.b")
                .enable_auto_commit(false)
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    member.assign(&[("t", 0)]).unwrap();
    let mut broadcast = mq
        .consumer(
            ConsumerConfig::group("a")
                .client_id("b")
                .broadcast(true)
                .enable_auto_commit(false)
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    broadcast.assign(&[("t", 0)]).unwrap();
    member.commit_offsets(&[("t", 0, 3, "")]).unwrap();
    broadcast.commit_offsets(&[("t", 0, 8, "")]).unwrap();
    assert_eq!(member.committed("t", 0).unwrap().unwrap().offset, 3);
    assert_eq!(broadcast.committed("t", 0).unwrap().unwrap().offset, 8);
    assert_eq!(mq.groups(), vec!["a".to_owned(), "a.b".to_owned()]);
    drop((member, broadcast));
    drop(mq);
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut member = mq
        .consumer(ConsumerConfig::group("a.b").enable_auto_commit(false))
        .unwrap();
    member.assign(&[("t", 0)]).unwrap();
    assert_eq!(member.position("t", 0).unwrap(), 3);
    let mut broadcast = mq
        .consumer(
            ConsumerConfig::group("a")
                .client_id("b")
                .broadcast(true)
                .enable_auto_commit(false),
        )
        .unwrap();
    broadcast.assign(&[("t", 0)]).unwrap();
    assert_eq!(broadcast.position("t", 0).unwrap(), 8);
}

#[test]
fn broadcast_offsets_stored_under_the_old_name_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", TopicConfig::new(1)).unwrap();
        send(&mq, "v", 10);
    }
    // What an older engine wrote for broadcast consumer `node` of `orders`.
    std::fs::create_dir_all(tmp.path().join("groups")).unwrap();
    std::fs::write(
        tmp.path().join("groups/orders.node.offsets"),
        br#"{"version":1,"offsets":{"t":{"0":{"offset":6,"metadata":"","timestamp":0}}}}"#,
    )
    .unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut c = mq
        .consumer(
            ConsumerConfig::group("orders")
                .client_id("node")
                .broadcast(true)
                .enable_auto_commit(false),
        )
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    assert_eq!(c.position("t", 0).unwrap(), 6);
    c.commit_offsets(&[("t", 0, 9, "")]).unwrap();
    assert!(tmp.path().join("groups/orders+node.offsets").exists());
}

#[test]
fn commit_metadata_is_bounded_and_a_refused_commit_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", TopicConfig::new(1)).unwrap();
        send(&mq, "v", 10);
        let mut c = mq
            .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
            .unwrap();
        c.assign(&[("t", 0)]).unwrap();
        c.commit_offsets(&[("t", 0, 2, "ok")]).unwrap();
        let at_limit = "m".repeat(DEFAULT_MAX_COMMIT_METADATA_BYTES);
        c.commit_offsets(&[("t", 0, 3, &at_limit)]).unwrap();
        for len in [DEFAULT_MAX_COMMIT_METADATA_BYTES + 1, 70 << 20] {
            let big = "m".repeat(len);
            let e = c.commit_offsets(&[("t", 0, 5, &big)]).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
        assert_eq!(c.committed("t", 0).unwrap().unwrap().offset, 3);
    }
    // The directory still opens, with the last commit that succeeded.
    let mq = Broker::open(tmp.path(), cfg().max_commit_metadata_bytes(16)).unwrap();
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    assert_eq!(c.position("t", 0).unwrap(), 3);
    assert!(matches!(
        c.commit_offsets(&[("t", 0, 4, "seventeen bytes!!")]),
        Err(Error::InvalidArgument(_))
    ));
    c.commit_offsets(&[("t", 0, 4, "sixteen bytes!!!")])
        .unwrap();
}
