//! Every invalid input gets its typed error, and nothing changes: no files,
//! no offsets, no configuration, no assignment.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::{cfg, read_partition};
use mqlite::log::batch::{batch_len, RecordRef};
use mqlite::{
    Acks, Broker, Config, ConsumerConfig, Error, OffsetReset, OpenMode, ProducerConfig, Record,
    TopicConfig, TopicInfo, MAX_GROUP_NAME_LEN,
};

/// Exclusive mode, by name: for the tests that compare the files before and
/// after (shared mode adds its own: process files, tail pages).
fn exclusive() -> Config {
    cfg().mode(OpenMode::Exclusive)
}

/// Everything observable about a data directory: topics, their config and
/// offsets, and every file under `topics/` with its size.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    topics: Vec<TopicInfo>,
    files: Vec<(String, u64)>,
}

fn snapshot(mq: &Broker) -> Snapshot {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, u64)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if e.file_type().unwrap().is_dir() {
                out.push((rel + "/", 0));
                walk(&path, root, out);
            } else {
                out.push((rel, e.metadata().unwrap().len()));
            }
        }
    }
    let mut files = Vec::new();
    walk(mq.path(), mq.path(), &mut files);
    files.retain(|(f, _)| f != "LOCK");
    files.sort();
    Snapshot {
        topics: mq.topics().iter().map(|t| mq.topic(t).unwrap()).collect(),
        files,
    }
}

/// A broker with topic `t` (3 partitions, a record in each).
fn setup() -> (tempfile::TempDir, Broker) {
    setup_with(cfg())
}

/// [`setup`] with `config`.
fn setup_with(config: Config) -> (tempfile::TempDir, Broker) {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), config).unwrap();
    mq.create_topic(
        "t",
        TopicConfig::new(3)
            .segment_bytes(8192)
            .max_message_bytes(200),
    )
    .unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..3 {
        p.send(Record::new("t").partition(i).value(format!("v{i}")))
            .unwrap();
    }
    (tmp, mq)
}

#[test]
fn invalid_topic_names() {
    let (_tmp, mq) = setup();
    let before = snapshot(&mq);
    let too_long = "x".repeat(250);
    // (name, a word the reason must contain): one group per rule.
    let cases: [(&str, &str); 14] = [
        ("", "empty"),
        (&too_long, "249"),
        (".", "'.'"),
        ("..", "'.'"),
        ("a/b", "letters"),
        ("../escape", "letters"),
        ("a b", "letters"),
        ("tab\t", "letters"),
        ("é", "letters"),
        ("a\0b", "letters"),
        ("a\\b", "letters"),
        ("a:b", "letters"),
        ("__internal", "reserved"),
        ("__", "reserved"),
    ];
    for (name, reason_word) in cases {
        match mq.create_topic(name, TopicConfig::new(1)) {
            Err(e @ Error::InvalidTopicName { .. }) => {
                assert_eq!(e.code(), 100);
                let Error::InvalidTopicName { name: n, reason } = &e else {
                    unreachable!()
                };
                assert_eq!(n, name);
                assert!(reason.contains(reason_word), "{name:?}: {reason}");
                assert!(mqlite::validate_topic_name(name).is_err());
            }
            other => panic!("{name:?}: expected InvalidTopicName, got {other:?}"),
        }
        assert_eq!(snapshot(&mq), before, "{name:?} changed something");
    }
    // The limits themselves are fine.
    for ok in ["x".repeat(249).as_str(), "a.b-c_D9", "_single", "...", "-"] {
        mq.create_topic(ok, TopicConfig::new(1)).unwrap();
        assert!(mq.topics().contains(&ok.to_owned()));
    }
}

#[test]
fn topic_exists() {
    let (_tmp, mq) = setup();
    let before = snapshot(&mq);
    match mq.create_topic("t", TopicConfig::new(5)) {
        Err(e @ Error::TopicExists(_)) => {
            assert_eq!(e.code(), 101);
            assert!(matches!(&e, Error::TopicExists(n) if n == "t"));
        }
        other => panic!("expected TopicExists, got {other:?}"),
    }
    assert_eq!(snapshot(&mq), before);
    assert_eq!(mq.topic("t").unwrap().config.partitions, 3);
}

#[test]
fn unknown_topic_everywhere() {
    let (_tmp, mq) = setup();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let mut consumer = mq.consumer(ConsumerConfig::default()).unwrap();
    consumer.subscribe(&["t"]).unwrap();
    let assignment = consumer.assignment();
    assert_eq!(assignment.len(), 3);
    let before = snapshot(&mq);
    let unknown = |r: mqlite::Result<()>, what: &str| match r {
        Err(e @ Error::UnknownTopic(_)) => {
            assert_eq!(e.code(), 102);
            assert!(
                matches!(&e, Error::UnknownTopic(n) if n == "nope"),
                "{what}: {e}"
            );
        }
        other => panic!("{what}: expected UnknownTopic, got {other:?}"),
    };
    unknown(mq.delete_topic("nope"), "delete_topic");
    unknown(mq.topic("nope").map(drop), "topic");
    unknown(mq.add_partitions("nope", 4), "add_partitions");
    unknown(
        mq.offset_for_timestamp("nope", 0, 0).map(drop),
        "offset_for_timestamp",
    );
    unknown(
        producer.send(Record::new("nope").value("x")).map(drop),
        "send",
    );
    unknown(
        producer
            .send(Record::new("nope").partition(0).value("x"))
            .map(drop),
        "send to a partition",
    );
    // A topic that does not exist yet is waited for (as Kafka's consumer
    // does); an invalid name is refused and changes nothing.
    assert!(matches!(
        consumer.subscribe(&["t", "bad/name"]),
        Err(Error::InvalidTopicName { .. })
    ));
    assert_eq!(
        consumer.assignment(),
        assignment,
        "a failed subscribe keeps the subscription"
    );
    unknown(consumer.assign(&[("t", 0), ("nope", 0)]), "assign");
    assert_eq!(
        consumer.assignment(),
        assignment,
        "a failed assign keeps the assignment"
    );
    assert_eq!(snapshot(&mq), before);
    // A deleted topic is unknown too.
    mq.create_topic("gone", TopicConfig::new(1)).unwrap();
    mq.delete_topic("gone").unwrap();
    assert!(matches!(mq.topic("gone"), Err(Error::UnknownTopic(_))));
    assert!(matches!(
        producer.send(Record::new("gone").value("x")),
        Err(Error::UnknownTopic(_))
    ));
    assert!(matches!(
        mq.delete_topic("gone"),
        Err(Error::UnknownTopic(_))
    ));
}

#[test]
fn unknown_partition() {
    let (_tmp, mq) = setup();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let mut consumer = mq.consumer(ConsumerConfig::default()).unwrap();
    consumer.assign(&[("t", 1)]).unwrap();
    consumer.seek("t", 1, 1).unwrap();
    let before = snapshot(&mq);
    for p in [3, 4, u32::MAX] {
        match producer.send(Record::new("t").partition(p).key("k").value("x")) {
            Err(e @ Error::UnknownPartition { .. }) => {
                assert_eq!(e.code(), 200);
                let Error::UnknownPartition {
                    topic,
                    partition,
                    count,
                } = e
                else {
                    unreachable!()
                };
                assert_eq!((topic.as_str(), partition, count), ("t", p, 3));
            }
            other => panic!("expected UnknownPartition, got {other:?}"),
        }
        for assign in [[("t", 0), ("t", p)], [("t", 1), ("t", p)]] {
            assert!(matches!(
                consumer.assign(&assign),
                Err(Error::UnknownPartition { partition, count: 3, .. }) if partition == p
            ));
            assert_eq!(
                consumer.position("t", 1).unwrap(),
                1,
                "a failed assign keeps positions"
            );
        }
        assert!(matches!(
            mq.offset_for_timestamp("t", p, 0),
            Err(Error::UnknownPartition { .. })
        ));
    }
    assert_eq!(consumer.assignment(), [("t".to_owned(), 1)]);
    assert_eq!(snapshot(&mq), before, "nothing was written");
}

#[test]
fn message_too_large_writes_nothing() {
    let (_tmp, mq) = setup();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let before = snapshot(&mq);
    let size = |n: usize| {
        let v = vec![1u8; n];
        batch_len(&[RecordRef {
            key: Some(b"k"),
            value: Some(&v),
            headers: &[],
            timestamp: 5,
        }])
    };
    // The largest value that fits max_message_bytes = 200, and one more.
    let fits = (0..200).rev().find(|&n| size(n) <= 200).unwrap();
    let too_big = fits + 1;
    let record = |n: usize| {
        Record::new("t")
            .partition(0)
            .key("k")
            .value(vec![1u8; n])
            .timestamp(5)
    };
    for n in [too_big, 1000, 100_000] {
        match producer.send(record(n)) {
            Err(e @ Error::MessageTooLarge { .. }) => {
                assert_eq!(e.code(), 400);
                let Error::MessageTooLarge { size: s, max } = e else {
                    unreachable!()
                };
                assert_eq!((s, max), (size(n), 200));
            }
            other => panic!("{n} bytes: expected MessageTooLarge, got {other:?}"),
        }
        assert_eq!(snapshot(&mq), before, "{n} bytes: nothing written");
    }
    // Exactly at the limit (or as close as sizes go) is accepted.
    let md = producer.send(record(fits)).unwrap();
    assert_eq!(md.offset, 1);
    let got = read_partition(&mq, "t", 0).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].value.as_deref(), Some(&vec![1u8; fits][..]));
}

#[test]
fn invalid_topic_configs() {
    let (_tmp, mq) = setup();
    let before = snapshot(&mq);
    let cases = [
        ("partitions 0", TopicConfig::new(0)),
        ("partitions 100001", TopicConfig::new(100_001)),
        (
            "segment_bytes 4095",
            TopicConfig::new(1).segment_bytes(4095),
        ),
        ("segment_bytes 0", TopicConfig::new(1).segment_bytes(0)),
        (
            "segment_bytes 3 GiB",
            TopicConfig::new(1).segment_bytes(3 << 30),
        ),
        (
            "max_message_bytes > segment_bytes",
            TopicConfig::new(1)
                .segment_bytes(8192)
                .max_message_bytes(8193),
        ),
        (
            "max_message_bytes tiny",
            TopicConfig::new(1).max_message_bytes(10),
        ),
        (
            "index_interval_bytes 0",
            TopicConfig::new(1).index_interval_bytes(0),
        ),
    ];
    for (what, config) in cases {
        match mq.create_topic("new", config.clone()) {
            Err(e @ Error::InvalidConfig(_)) => assert_eq!(e.code(), 103),
            other => panic!("{what}: expected InvalidConfig, got {other:?}"),
        }
        assert!(config.validate().is_err(), "{what}");
        assert_eq!(snapshot(&mq), before, "{what}: nothing created");
    }
    // Just inside the limits.
    mq.create_topic(
        "new",
        TopicConfig::new(1)
            .segment_bytes(4096)
            .max_message_bytes(4096),
    )
    .unwrap();
}

#[test]
fn add_partitions_never_shrinks() {
    let (_tmp, mq) = setup();
    let before = snapshot(&mq);
    for n in [0, 1, 2, 3] {
        match mq.add_partitions("t", n) {
            Err(e @ Error::InvalidArgument(_)) => assert_eq!(e.code(), 4),
            other => panic!("add_partitions({n}): expected InvalidArgument, got {other:?}"),
        }
        assert_eq!(snapshot(&mq), before, "add_partitions({n})");
    }
    assert!(matches!(
        mq.add_partitions("t", 100_001),
        Err(Error::InvalidConfig(_))
    ));
    assert_eq!(snapshot(&mq), before, "add_partitions(100001)");
}

#[test]
fn seek_out_of_range() {
    let (_tmp, mq) = setup();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..4 {
        p.send(Record::new("t").partition(0).value(format!("more {i}")))
            .unwrap();
    }
    let mut c = mq
        .consumer(ConsumerConfig::default().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    c.seek("t", 0, 2).unwrap();
    for offset in [6, 7, 1000, u64::MAX] {
        match c.seek("t", 0, offset) {
            Err(e @ Error::OffsetOutOfRange { .. }) => {
                assert_eq!(e.code(), 201);
                let Error::OffsetOutOfRange {
                    offset: o,
                    start,
                    end,
                    partition,
                    ..
                } = e
                else {
                    unreachable!()
                };
                assert_eq!((o, start, end, partition), (offset, 0, 5, 0));
            }
            other => panic!("seek({offset}): expected OffsetOutOfRange, got {other:?}"),
        }
        assert_eq!(
            c.position("t", 0).unwrap(),
            2,
            "a failed seek keeps the position"
        );
    }
    let got = c.poll(Duration::ZERO).unwrap();
    assert_eq!(got[0].offset(), 2);
    // The end itself is a valid position; an unassigned partition is not.
    c.seek("t", 0, 5).unwrap();
    assert!(c.poll(Duration::ZERO).unwrap().is_empty());
    assert!(matches!(c.seek("t", 1, 0), Err(Error::InvalidArgument(_))));
    assert!(matches!(c.position("t", 1), Err(Error::InvalidArgument(_))));
}

#[test]
fn everything_is_closed_after_close() {
    let (tmp, mq) = setup_with(exclusive());
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let mut consumer = mq.consumer(ConsumerConfig::default()).unwrap();
    consumer.subscribe(&["t"]).unwrap();
    let before = snapshot(&mq);
    mq.close().unwrap();
    let closed = |r: mqlite::Result<()>, what: &str| match r {
        Err(e @ Error::Closed(_)) => assert_eq!(e.code(), 5, "{what}"),
        other => panic!("{what}: expected Closed, got {other:?}"),
    };
    closed(producer.send(Record::new("t").value("x")).map(drop), "send");
    closed(producer.flush(), "producer flush");
    closed(consumer.poll(Duration::from_millis(1)).map(drop), "poll");
    closed(consumer.subscribe(&["t"]), "subscribe");
    closed(consumer.seek("t", 0, 0), "seek");
    closed(mq.create_topic("u", TopicConfig::new(1)), "create_topic");
    closed(mq.delete_topic("t"), "delete_topic");
    closed(mq.add_partitions("t", 4), "add_partitions");
    closed(mq.topic("t").map(drop), "topic");
    closed(mq.producer(ProducerConfig::default()).map(drop), "producer");
    closed(mq.consumer(ConsumerConfig::default()).map(drop), "consumer");
    closed(mq.flush(), "flush");
    closed(mq.enforce_retention().map(drop), "enforce_retention");
    drop((producer, consumer, mq));
    let mq = Broker::open(tmp.path(), exclusive()).unwrap();
    assert_eq!(snapshot(&mq), before, "nothing changed after close");

    // A closed consumer, on an open broker.
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.subscribe(&["t"]).unwrap();
    c.close();
    assert!(matches!(c.poll(Duration::ZERO), Err(Error::Closed(_))));
    assert!(matches!(c.subscribe(&["t"]), Err(Error::Closed(_))));
}

#[test]
fn invalid_settings() {
    assert!(matches!(Acks::from_i32(2), Err(Error::InvalidArgument(_))));
    assert!(matches!(Acks::from_i32(-2), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        "bogus".parse::<OffsetReset>(),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        "earliest".parse::<OffsetReset>().unwrap(),
        OffsetReset::Earliest
    );
    let (_tmp, mq) = setup();
    let zero = ConsumerConfig {
        max_poll_records: 0,
        ..ConsumerConfig::default()
    };
    assert!(matches!(mq.consumer(zero), Err(Error::InvalidArgument(_))));
    assert_eq!(
        ConsumerConfig::default()
            .max_poll_records(0)
            .max_poll_records,
        1
    );
}

#[test]
fn a_failed_seek_keeps_the_position() {
    let (_tmp, mq) = setup();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..9 {
        p.send(Record::new("t").partition(0).value(format!("w{i}")))
            .unwrap();
    }
    let mut c = mq
        .consumer(
            ConsumerConfig::group("seekers")
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(1),
        )
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    assert_eq!(c.poll(Duration::from_secs(5)).unwrap()[0].offset(), 0);
    for bad in [11, 1000, u64::MAX] {
        let e = c.seek("t", 0, bad).unwrap_err();
        assert!(matches!(e, Error::OffsetOutOfRange { .. }), "{e}");
        assert_eq!(c.position("t", 0).unwrap(), 1);
    }
    assert_eq!(c.poll(Duration::from_secs(5)).unwrap()[0].offset(), 1);
    c.commit().unwrap();
    assert_eq!(c.committed("t", 0).unwrap().unwrap().offset, 2);
}

/// A group whose files would not fit a file name (255 bytes) is refused
/// when the consumer is made, with the limit in the error, and nothing is
/// created; the longest allowed works to the end (commit, reopen, describe),
/// in both modes, as does the longest client id in a shared group (its
/// member's liveness file is named after it).
#[test]
fn group_names_longer_than_their_files_allow_are_refused_and_the_longest_work() {
    for mode in [OpenMode::Exclusive, OpenMode::Shared] {
        let tmp = tempfile::tempdir().unwrap();
        let open = || Broker::open(tmp.path(), cfg().mode(mode)).unwrap();
        let mq = open();
        mq.create_topic("t", TopicConfig::new(1)).unwrap();
        let p = mq.producer(ProducerConfig::default()).unwrap();
        p.send(Record::new("t").value("x")).unwrap();
        let longest = "g".repeat(MAX_GROUP_NAME_LEN);
        let over = "g".repeat(MAX_GROUP_NAME_LEN + 1);
        let refused = |config: ConsumerConfig| match mq.consumer(config) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("at most 243"), "{m}"),
            other => panic!("{mode}: expected InvalidArgument, got {other:?}"),
        };
        refused(ConsumerConfig::group(&over));
        let client = "c".repeat(MAX_GROUP_NAME_LEN - 2);
        refused(
            ConsumerConfig::group("gg")
                .client_id(&client)
                .broadcast(true),
        );
        assert!(matches!(
            mq.describe_group(&over),
            Err(Error::InvalidArgument(_))
        ));
        let groups = tmp.path().join("groups");
        let listed = |d: &Path| std::fs::read_dir(d).map_or(0, Iterator::count);
        assert_eq!(listed(&groups), 0, "{mode}: a refused group made files");
        // The longest name, and a member id of 260 bytes.
        let member = "m".repeat(249);
        for (group, broadcast) in [(longest.as_str(), false), ("g", true)] {
            let client = if broadcast {
                "c".repeat(MAX_GROUP_NAME_LEN - 2)
            } else {
                member.clone()
            };
            let mut c = mq
                .consumer(
                    ConsumerConfig::group(group)
                        .client_id(&client)
                        .broadcast(broadcast)
                        .enable_auto_commit(false),
                )
                .unwrap();
            c.subscribe(&["t"]).unwrap();
            let mut got = Vec::new();
            for _ in 0..50 {
                got.extend(c.poll(Duration::from_millis(100)).unwrap());
                if !got.is_empty() {
                    break;
                }
            }
            assert_eq!(got.len(), 1, "{mode} {broadcast}");
            c.commit().unwrap();
            c.close();
        }
        drop(p);
        mq.close().unwrap();
        let mq = open();
        let info = mq.describe_group(&longest).unwrap();
        assert_eq!(info.committed[0].2.offset, 1, "{mode}");
        assert!(mq.groups().contains(&longest), "{mode}");
    }
}
