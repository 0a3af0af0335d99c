//! Topics: create, describe, delete, grow, persist; keys to partitions;
//! waking consumers; finding offsets by timestamp.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Barrier;
use std::time::{Duration, Instant};

use common::{cfg, read_partition, Msg, Rng};
use mqlite::{
    murmur2, partition_for_key, Broker, Config, ConsumerConfig, Error, Header, OpenMode,
    PartitionInfo, ProducerConfig, Record, RecoveryStats, TopicConfig,
};

/// Exclusive mode, by name: for the tests that check what its open does with a
/// half-created topic (shared mode leaves it until the name is created again).
fn exclusive() -> Config {
    cfg().mode(OpenMode::Exclusive)
}

fn send(mq: &Broker, topic: &str, p: u32, n: u64) -> Vec<Msg> {
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    (0..n)
        .map(|i| {
            let r = Record::new(topic)
                .partition(p)
                .value(format!("{topic}/{p}/{i}"))
                .timestamp(1_000 + i as i64);
            let md = producer.send(r.clone()).unwrap();
            Msg {
                partition: p,
                offset: md.offset,
                timestamp: md.timestamp,
                key: None,
                value: r.value,
                headers: vec![],
            }
        })
        .collect()
}

/// No `*.tmp` file anywhere under `dir`.
fn assert_no_tmp_files(dir: &std::path::Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        assert!(
            !path.to_string_lossy().ends_with(".tmp"),
            "leftover {}",
            path.display()
        );
        if path.is_dir() {
            assert_no_tmp_files(&path);
        }
    }
}

#[test]
fn create_describe_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert!(mq.topics().is_empty());
    let config = TopicConfig::new(2)
        .segment_bytes(8192)
        .retention_bytes(1 << 20);
    mq.create_topic("b", config.clone()).unwrap();
    mq.create_topic("a", TopicConfig::new(1)).unwrap();
    assert_eq!(mq.topics(), ["a", "b"], "sorted");

    let info = mq.topic("b").unwrap();
    assert_eq!(info.name, "b");
    assert_eq!(info.config, config);
    let empty = |p| PartitionInfo {
        partition: p,
        start_offset: 0,
        end_offset: 0,
        size_bytes: 0,
        segments: 1,
        recovery: RecoveryStats::default(),
        ..info.partitions[p as usize].clone()
    };
    assert_eq!(info.partitions, [empty(0), empty(1)]);

    send(&mq, "b", 1, 300);
    let info = mq.topic("b").unwrap();
    assert_eq!(info.partitions[0], empty(0));
    let p1 = &info.partitions[1];
    assert_eq!((p1.start_offset, p1.end_offset), (0, 300));
    assert!(p1.segments > 1, "300 records over 8 KiB segments roll");
    // Every batch: its value and at least 24 bytes of header, whatever
    // its encoding.
    let values: u64 = (0..300).map(|i| format!("b/1/{i}").len() as u64).sum();
    assert!(
        p1.size_bytes >= values + 300 * 24,
        "size counts every batch"
    );

    mq.delete_topic("b").unwrap();
    assert_eq!(mq.topics(), ["a"]);
    assert!(!tmp.path().join("topics/b").exists(), "files removed");
    assert!(matches!(mq.topic("b"), Err(Error::UnknownTopic(_))));
    assert_no_tmp_files(tmp.path());
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert_eq!(mq.topics(), ["a"], "deletion persists");
}

#[test]
fn delete_then_recreate_starts_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(2).segment_bytes(4096))
        .unwrap();
    let sent = send(&mq, "t", 0, 100);
    let mut old_reader = mq.consumer(ConsumerConfig::default()).unwrap();
    old_reader.subscribe(&["t"]).unwrap();
    let held = old_reader.poll(Duration::ZERO).unwrap();
    assert_eq!(Msg::from(&held[0]), sent[0]);
    mq.delete_topic("t").unwrap();
    // A message held across the deletion stays readable.
    assert_eq!(Msg::from(&held[0]), sent[0]);
    mq.create_topic("t", TopicConfig::new(3).segment_bytes(4096))
        .unwrap();
    let info = mq.topic("t").unwrap();
    assert_eq!(info.config.partitions, 3);
    assert!(info
        .partitions
        .iter()
        .all(|p| p.end_offset == 0 && p.start_offset == 0));
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.subscribe(&["t"]).unwrap();
    assert!(
        c.poll(Duration::ZERO).unwrap().is_empty(),
        "nothing of the old topic"
    );
    let new = send(&mq, "t", 0, 1);
    assert_eq!(new[0].offset, 0);
    assert_eq!(read_partition(&mq, "t", 0).unwrap(), new);
    drop(held);
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert_eq!(read_partition(&mq, "t", 0).unwrap(), new);
}

#[test]
fn add_partitions_keeps_data_and_new_partitions_work() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(2).segment_bytes(4096))
        .unwrap();
    let p0 = send(&mq, "t", 0, 50);
    let p1 = send(&mq, "t", 1, 70);
    let mut c = mq
        .consumer(ConsumerConfig::default().max_poll_records(10_000))
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    let first = c.poll(Duration::ZERO).unwrap();
    assert_eq!(first.len(), 120);
    assert_eq!(c.assignment().len(), 2);

    mq.add_partitions("t", 5).unwrap();
    let info = mq.topic("t").unwrap();
    assert_eq!(info.config.partitions, 5);
    assert_eq!(info.partitions.len(), 5);
    assert_eq!(
        info.partitions
            .iter()
            .map(|p| p.end_offset)
            .collect::<Vec<_>>(),
        [50, 70, 0, 0, 0]
    );
    assert_eq!(read_partition(&mq, "t", 0).unwrap(), p0);
    assert_eq!(read_partition(&mq, "t", 1).unwrap(), p1);
    let p4 = send(&mq, "t", 4, 3);
    assert_eq!(read_partition(&mq, "t", 4).unwrap(), p4);
    // A subscriber picks up the new partitions.
    let more = c.poll(Duration::ZERO).unwrap();
    assert_eq!(c.assignment().len(), 5);
    assert_eq!(more.iter().map(Msg::from).collect::<Vec<_>>(), p4);
    // Keys now spread over five partitions.
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    for k in 0..50 {
        let key = format!("key {k}");
        let md = producer
            .send(Record::new("t").key(key.clone()).value("v"))
            .unwrap();
        assert_eq!(md.partition, partition_for_key(key.as_bytes(), 5));
    }
    assert_no_tmp_files(tmp.path());
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert_eq!(
        mq.topic("t").unwrap().partitions.len(),
        5,
        "growth persists"
    );
    assert_eq!(read_partition(&mq, "t", 0).unwrap()[..50], p0[..]);
    assert_eq!(read_partition(&mq, "t", 4).unwrap()[..3], p4[..]);
}

#[test]
fn config_persists_in_topic_json() {
    let tmp = tempfile::tempdir().unwrap();
    let config = TopicConfig::new(3)
        .segment_bytes(8192)
        .retention_ms(123_456)
        .retention_bytes(999_999)
        .max_message_bytes(4000)
        .index_interval_bytes(300);
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", config.clone()).unwrap();
        assert_no_tmp_files(tmp.path());
    }
    let path = tmp.path().join("topics/t/topic.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(json["name"], "t");
    assert_eq!(json["config"]["partitions"], 3);
    assert_eq!(json["config"]["segment_bytes"], 8192);
    assert_eq!(json["config"]["retention_ms"], 123_456);
    assert_eq!(json["config"]["retention_bytes"], 999_999);
    assert_eq!(json["config"]["max_message_bytes"], 4000);
    assert_eq!(json["config"]["index_interval_bytes"], 300);
    assert!(json["version"].is_u64());

    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert_eq!(mq.topic("t").unwrap().config, config);
    // The limits apply after the reopen too.
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    assert!(matches!(
        producer.send(Record::new("t").partition(0).value(vec![0u8; 4000])),
        Err(Error::MessageTooLarge { max: 4000, .. })
    ));
}

/// A topic directory without `topic.json` (a creation interrupted before
/// its last step) is discarded at open; its name can be used again.
#[test]
fn unfinished_topic_creation_is_discarded() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), exclusive()).unwrap();
        mq.create_topic("kept", TopicConfig::new(1)).unwrap();
    }
    let half = tmp.path().join("topics/half");
    std::fs::create_dir_all(half.join("0")).unwrap();
    std::fs::write(half.join("0/00000000000000000000.log"), b"junk").unwrap();
    std::fs::write(half.join("topic.json.tmp"), b"{").unwrap();
    let mq = Broker::open(tmp.path(), exclusive()).unwrap();
    assert_eq!(mq.topics(), ["kept"]);
    assert!(!half.exists());
    mq.create_topic("half", TopicConfig::new(1)).unwrap();
    assert_eq!(mq.topic("half").unwrap().partitions[0].end_offset, 0);
}

#[test]
fn keys_map_to_partitions_by_murmur2() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(7)).unwrap();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    // Kafka's vector: murmur2("foobar") = -790332482.
    assert_eq!(murmur2(b"foobar"), -790_332_482);
    assert_eq!(
        partition_for_key(b"foobar", 7),
        ((-0x2F1B_8442_i32 & 0x7fff_ffff) as u32) % 7
    );
    let mut rng = Rng::new(5);
    let mut seen = [0u32; 7];
    for i in 0..300 {
        let key = if i % 3 == 0 {
            rng.bytes((i % 40) as usize)
        } else {
            format!("user-{i}").into_bytes()
        };
        let md = producer
            .send(Record::new("t").key(key.clone()).value("v"))
            .unwrap();
        assert_eq!(md.partition, partition_for_key(&key, 7), "key {key:?}");
        seen[md.partition as usize] += 1;
        // The same key always lands in the same partition.
        let again = producer
            .send(Record::new("t").key(key.clone()).value("w"))
            .unwrap();
        assert_eq!(again.partition, md.partition);
    }
    assert!(
        seen.iter().all(|&n| n > 0),
        "keys spread over all partitions: {seen:?}"
    );
    // An explicit partition wins over the key.
    let md = producer
        .send(Record::new("t").key("foobar").partition(6).value("v"))
        .unwrap();
    assert_eq!(md.partition, 6);
    // No key, default (sticky): one partition until batch_size bytes.
    let sticky: Vec<u32> = (0..10)
        .map(|_| {
            producer
                .send(Record::new("t").value("s"))
                .unwrap()
                .partition
        })
        .collect();
    assert!(sticky.iter().all(|&p| p == sticky[0]), "{sticky:?}");
    // No key, round-robin: the partitions in turn.
    let rr = mq
        .producer(ProducerConfig::default().partitioner(mqlite::Partitioner::RoundRobin))
        .unwrap();
    let parts: Vec<u32> = (0..14)
        .map(|_| rr.send(Record::new("t").value("rr")).unwrap().partition)
        .collect();
    let mut counts = [0; 7];
    for &p in &parts {
        counts[p as usize] += 1;
    }
    assert_eq!(counts, [2; 7], "{parts:?}");
}

#[test]
fn records_round_trip_with_keys_values_and_headers() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let records = [
        Record::new("t").timestamp(-5),
        Record::new("t")
            .key(Vec::new())
            .value(Vec::new())
            .timestamp(0),
        Record::new("t").key("k").timestamp(i64::MAX),
        Record::new("t")
            .value(vec![0u8; 1000])
            .header("a", "1")
            .header("a", Vec::new())
            .header("ünïcode", vec![0xff, 0])
            .timestamp(i64::MIN),
    ];
    for r in &records {
        producer.send(r.clone()).unwrap();
    }
    let got = read_partition(&mq, "t", 0).unwrap();
    assert_eq!(got.len(), records.len());
    for (m, r) in got.iter().zip(&records) {
        assert_eq!(m.key, r.key, "None and empty keys differ");
        assert_eq!(
            m.value, r.value,
            "tombstones (None) and empty values differ"
        );
        assert_eq!(m.headers, r.headers);
        assert_eq!(Some(m.timestamp), r.timestamp);
    }
    assert_eq!(got[3].headers[2], Header::new("ünïcode", vec![0xff, 0]));
    // A record without a timestamp gets the current time.
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let md = producer.send(Record::new("t").value("now")).unwrap();
    assert!(md.timestamp >= before);
}

#[test]
fn poll_wakes_on_append_from_another_thread() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(2)).unwrap();
    mq.create_topic("other", TopicConfig::new(1)).unwrap();
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.subscribe(&["t"]).unwrap();
    assert!(c.poll(Duration::ZERO).unwrap().is_empty());
    // An empty poll waits for its whole timeout.
    let t0 = Instant::now();
    assert!(c.poll(Duration::from_millis(30)).unwrap().is_empty());
    assert!(t0.elapsed() >= Duration::from_millis(30));

    let barrier = Barrier::new(2);
    let long = Duration::from_secs(60);
    std::thread::scope(|s| {
        s.spawn(|| {
            let producer = mq.producer(ProducerConfig::default()).unwrap();
            barrier.wait();
            // Give the consumer time to park: the append has to wake it.
            std::thread::sleep(Duration::from_millis(50));
            // An append elsewhere does not count.
            producer
                .send(Record::new("other").value("elsewhere"))
                .unwrap();
            producer
                .send(Record::new("t").partition(1).value("wake up"))
                .unwrap();
        });
        barrier.wait();
        let t0 = Instant::now();
        let got = c.poll(long).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].value(), Some(&b"wake up"[..]));
        assert_eq!((got[0].partition(), got[0].offset()), (1, 0));
        assert!(t0.elapsed() < long / 2, "the append did not wake the poll");
    });
}

#[test]
fn offset_for_timestamp_across_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let config = TopicConfig::new(1)
        .segment_bytes(4096)
        .index_interval_bytes(200);
    mq.create_topic("t", config).unwrap();
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    // Mostly rising timestamps, with repeats and steps back.
    let mut rng = Rng::new(9);
    let mut ts = Vec::new();
    let mut t = 1_000_000i64;
    for _ in 0..600 {
        t += rng.range(0, 20) as i64 - 4;
        ts.push(t);
        let len = rng.range(1, 60) as usize;
        producer
            .send(Record::new("t").value(rng.bytes(len)).timestamp(t))
            .unwrap();
    }
    assert!(mq.topic("t").unwrap().partitions[0].segments > 3);
    let expect = |q: i64| ts.iter().position(|&x| x >= q).map(|i| i as u64);
    let lo = *ts.iter().min().unwrap();
    let hi = *ts.iter().max().unwrap();
    let check = |mq: &Broker| {
        for q in (lo - 3..=hi + 3).chain([i64::MIN, i64::MAX, 0]) {
            assert_eq!(
                mq.offset_for_timestamp("t", 0, q).unwrap(),
                expect(q),
                "timestamp {q}"
            );
        }
    };
    check(&mq);
    // The same after a reopen (sealed segments' time indexes from disk).
    mq.close().unwrap();
    drop(mq);
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    check(&mq);
}
