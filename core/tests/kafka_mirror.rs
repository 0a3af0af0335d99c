//! Copies between a data directory and a Kafka cluster
//! (`mqlite::kafka::mirror`), against the broker of `kafka_cluster/`:
//! whole records in both directions, a copy resuming where the last one
//! stopped, and copies killed with `kill -9` at random moments and run
//! again, with nothing lost and nothing written twice.
#![cfg(feature = "kafka")]
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod kafka_cluster;
use kafka_cluster::{broker, cluster, topic, URL_VAR};

use mqlite::kafka::mirror::{
    self, Mirror, MirrorOptions, MIRROR_OFFSET_HEADER, MIRROR_PARTITION_HEADER,
};
use mqlite::kafka::KafkaBroker;
use mqlite::{
    partition_for_key, BorrowedRecord, Broker, Config, ConsumerConfig, Header, Message,
    ProducerConfig, TopicConfig,
};

const PARTITIONS: u32 = 3;

/// What a record of the source holds, to compare with its copy.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    partition: u32,
    offset: u64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<Header>,
    timestamp: i64,
}

impl Rec {
    fn of(m: &Message) -> Rec {
        Rec {
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.value().map(<[u8]>::to_vec),
            headers: m.headers(),
            timestamp: m.timestamp(),
        }
    }

    /// The source record a copy stands for: its partition and offset
    /// from the mirror headers, which are taken off.
    fn source_of(m: &Message) -> Rec {
        let mut r = Rec::of(m);
        let header = |k: &str| {
            r.headers
                .iter()
                .find(|h| h.key == k)
                .map(|h| std::str::from_utf8(&h.value).unwrap().to_owned())
        };
        r.offset = header(MIRROR_OFFSET_HEADER).unwrap().parse().unwrap();
        if let Some(p) = header(MIRROR_PARTITION_HEADER) {
            r.partition = p.parse().unwrap();
        }
        r.headers.retain(|h| !h.key.starts_with("mqlite.mirror."));
        r
    }
}

fn open_dir(dir: &Path) -> Broker {
    Broker::open(dir, Config::default().prefault(false)).unwrap()
}

/// The key of record `i`: none for one in five.
fn key_of(i: u32) -> Option<String> {
    (i % 5 != 4).then(|| format!("k{i}"))
}

/// Writes `n` records to `topic` of `dir`, starting at record `from`:
/// keys (most), a header, a timestamp, spread over the partitions.
fn fill_dir(dir: &Broker, topic: &str, from: u32, n: u32) {
    let p = dir.producer(ProducerConfig::default()).unwrap();
    let values: Vec<(Option<String>, String, Vec<Header>)> = (from..from + n)
        .map(|i| {
            (
                key_of(i),
                format!("value {i}"),
                vec![Header::new("i", i.to_string())],
            )
        })
        .collect();
    let recs: Vec<BorrowedRecord<'_>> = values
        .iter()
        .enumerate()
        .map(|(j, (k, v, h))| BorrowedRecord {
            topic,
            partition: Some((from + j as u32) % PARTITIONS),
            key: k.as_deref().map(str::as_bytes),
            value: Some(v.as_bytes()),
            headers: h,
            timestamp: Some(1_700_000_000_000 + i64::from(from) + j as i64),
            sequence: None,
        })
        .collect();
    for chunk in recs.chunks(97) {
        p.send_batch(chunk).unwrap();
    }
}

/// Writes `n` records to `topic` of the cluster as [`fill_dir`] does, one
/// batch each: tansu 0.6 cannot fetch from an offset inside a batch (it
/// skips to the next batch), which a copy resuming after a kill does.
fn fill_cluster(k: &KafkaBroker, topic: &str, from: u32, n: u32) {
    let p = k.producer(ProducerConfig::default()).unwrap();
    for i in from..from + n {
        p.send_borrowed(&BorrowedRecord {
            topic,
            partition: Some(i % PARTITIONS),
            key: key_of(i).as_deref().map(str::as_bytes),
            value: Some(format!("value {i}").as_bytes()),
            headers: &[Header::new("i", i.to_string())],
            timestamp: Some(1_700_000_000_000 + i64::from(i)),
            sequence: None,
        })
        .unwrap();
    }
}

/// Every record of `topic` in the directory.
fn read_dir(dir: &Broker, topic: &str) -> Vec<Message> {
    let info = dir.topic(topic).unwrap();
    let mut c = dir.consumer(ConsumerConfig::default()).unwrap();
    let parts: Vec<(&str, u32)> = (0..info.partitions.len() as u32)
        .map(|p| (topic, p))
        .collect();
    c.assign(&parts).unwrap();
    let total: u64 = info
        .partitions
        .iter()
        .map(|p| p.end_offset - p.start_offset)
        .sum();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (out.len() as u64) < total && Instant::now() < deadline {
        out.extend(c.poll(Duration::from_millis(100)).unwrap());
    }
    out
}

/// Every record of `topic` on the cluster: read until `expect` came, then
/// for half a second more (so extra copies show). The cluster's end
/// offsets are not used: tansu 0.6 answers `ListOffsets` with the base
/// offset of the last batch.
fn read_cluster(k: &KafkaBroker, topic: &str, expect: usize) -> Vec<Message> {
    let info = k.topic(topic).unwrap();
    let mut c = k.consumer(ConsumerConfig::default()).unwrap();
    let parts: Vec<(&str, u32)> = (0..info.partitions.len() as u32)
        .map(|p| (topic, p))
        .collect();
    c.assign(&parts).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < expect && Instant::now() < deadline {
        out.extend(c.poll(Duration::from_millis(100)).unwrap());
    }
    let more = Instant::now() + Duration::from_millis(500);
    while Instant::now() < more {
        out.extend(c.poll(Duration::from_millis(100)).unwrap());
    }
    out
}

/// `copies` stand for exactly `source`, none twice, the copies of each
/// source partition in one destination partition in source order; with
/// `by_key` destination partitions, each copy where its key (or, without
/// one, its source partition) puts it.
fn assert_exact_copy(source: &[Message], copies: &[Message], by_key: Option<u32>) {
    let mut want: Vec<Rec> = source.iter().map(Rec::of).collect();
    want.sort_by_key(|r| (r.partition, r.offset));
    let mut got: Vec<Rec> = copies.iter().map(Rec::source_of).collect();
    let dests: Vec<u32> = copies.iter().map(Message::partition).collect();
    for d in 0..by_key.unwrap_or(PARTITIONS) {
        for p in 0..PARTITIONS {
            let offsets: Vec<u64> = got
                .iter()
                .zip(&dests)
                .filter(|(r, &dd)| r.partition == p && dd == d)
                .map(|(r, _)| r.offset)
                .collect();
            assert!(
                offsets.windows(2).all(|w| w[0] < w[1]),
                "source {p} in {d}: copies out of order or doubled: {offsets:?}"
            );
        }
    }
    if let Some(m) = by_key {
        for (r, &d) in got.iter().zip(&dests) {
            let want_d = r
                .key
                .as_deref()
                .map_or(r.partition % m, |k| partition_for_key(k, m));
            assert_eq!(d, want_d, "{r:?}");
        }
    }
    got.sort_by_key(|r| (r.partition, r.offset));
    assert_eq!(
        got.len(),
        want.len(),
        "copies: {} of {}",
        got.len(),
        want.len()
    );
    assert_eq!(got, want);
}

#[test]
fn a_directory_topic_is_copied_to_the_cluster_and_resumed() {
    let Some(k) = broker() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = open_dir(tmp.path());
    let t = topic("to-cluster");
    dir.create_topic(&t, TopicConfig::new(PARTITIONS)).unwrap();
    fill_dir(&dir, &t, 0, 300);
    let stats = mirror::to_cluster(&dir, &k, &t, &MirrorOptions::default()).unwrap();
    assert_eq!(stats.copied, 300);
    assert_eq!(stats.lag(), 0);
    let src = read_dir(&dir, &t);
    assert_exact_copy(&src, &read_cluster(&k, &t, src.len()), None);

    // A second copy writes only what came since.
    fill_dir(&dir, &t, 300, 90);
    let stats = mirror::to_cluster(&dir, &k, &t, &MirrorOptions::default()).unwrap();
    assert_eq!(stats.copied, 90);
    let src = read_dir(&dir, &t);
    assert_exact_copy(&src, &read_cluster(&k, &t, src.len()), None);
    // And one with nothing new writes nothing.
    let stats = mirror::to_cluster(&dir, &k, &t, &MirrorOptions::default()).unwrap();
    assert_eq!(stats.copied, 0);
}

#[test]
fn a_cluster_topic_is_copied_to_a_directory_and_resumed() {
    let Some(k) = broker() else { return };
    let t = topic("from-cluster");
    k.create_topic(&t, TopicConfig::new(PARTITIONS)).unwrap();
    fill_cluster(&k, &t, 0, 200);
    let tmp = tempfile::tempdir().unwrap();
    let dir = open_dir(tmp.path());
    let stats = mirror::from_cluster(&k, &dir, &t, &MirrorOptions::default()).unwrap();
    assert_eq!(stats.copied, 200);
    assert_exact_copy(&read_cluster(&k, &t, 200), &read_dir(&dir, &t), None);
    fill_cluster(&k, &t, 200, 40);
    let stats = mirror::from_cluster(&k, &dir, &t, &MirrorOptions::default()).unwrap();
    assert_eq!(stats.copied, 40);
    assert_exact_copy(&read_cluster(&k, &t, 240), &read_dir(&dir, &t), None);
    let stats = mirror::from_cluster(&k, &dir, &t, &MirrorOptions::default()).unwrap();
    assert_eq!(stats.copied, 0);
}

#[test]
fn partition_counts_that_differ_map_by_key() {
    let Some(k) = broker() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = open_dir(tmp.path());
    // A directory of 3 partitions to a cluster of 2.
    let t = topic("by-key-to");
    k.create_topic(&t, TopicConfig::new(2)).unwrap();
    dir.create_topic(&t, TopicConfig::new(PARTITIONS)).unwrap();
    fill_dir(&dir, &t, 0, 300);
    let stats = mirror::to_cluster(&dir, &k, &t, &MirrorOptions::default()).unwrap();
    assert_eq!((stats.copied, stats.lag()), (300, 0));
    fill_dir(&dir, &t, 300, 50);
    let stats = mirror::to_cluster(&dir, &k, &t, &MirrorOptions::default()).unwrap();
    assert_eq!(stats.copied, 50);
    let src = read_dir(&dir, &t);
    assert_exact_copy(&src, &read_cluster(&k, &t, src.len()), Some(2));

    // A cluster of 3 partitions to a directory of 4.
    let t = topic("by-key-from");
    k.create_topic(&t, TopicConfig::new(PARTITIONS)).unwrap();
    fill_cluster(&k, &t, 0, 120);
    dir.create_topic(&t, TopicConfig::new(4)).unwrap();
    let stats = mirror::from_cluster(&k, &dir, &t, &MirrorOptions::default()).unwrap();
    assert_eq!(stats.copied, 120);
    fill_cluster(&k, &t, 120, 30);
    let stats = mirror::from_cluster(&k, &dir, &t, &MirrorOptions::default()).unwrap();
    assert_eq!(stats.copied, 30);
    let stats = mirror::from_cluster(&k, &dir, &t, &MirrorOptions::default()).unwrap();
    assert_eq!(stats.copied, 0);
    assert_exact_copy(&read_cluster(&k, &t, 150), &read_dir(&dir, &t), Some(4));

    assert!(matches!(
        mirror::from_cluster(&k, &dir, &topic("nowhere"), &MirrorOptions::default()),
        Err(mqlite::Error::UnknownTopic(_))
    ));
}

/// The copy run by the kill tests in a child process: `MQLITE_MIRROR`
/// is `to <dir> <topic>` or `from <dir> <topic>`; small batches, so a kill
/// lands between and inside writes.
#[test]
#[ignore = "run in a child process by the kill tests of this file"]
fn child_copy() {
    let Ok(spec) = std::env::var("MQLITE_MIRROR") else {
        return;
    };
    let parts: Vec<&str> = spec.splitn(3, ' ').collect();
    let k = broker().unwrap();
    let dir = open_dir(Path::new(parts[1]));
    let options = MirrorOptions {
        max_batch: 7,
        ..MirrorOptions::default()
    };
    match parts[0] {
        "to" => mirror::to_cluster(&dir, &k, parts[2], &options).unwrap(),
        _ => mirror::from_cluster(&k, &dir, parts[2], &options).unwrap(),
    };
}

/// Runs [`child_copy`] with `spec` `rounds` times, killing it with
/// `kill -9` after a pseudo-random 30-400 ms (the first copy of a round
/// may have finished by then: a kill of nothing).
fn kill_copies(spec: &str, rounds: u32) {
    let url = cluster().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut seed = u64::from(std::process::id());
    for _ in 0..rounds {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let ms = 30 + (seed >> 33) % 370;
        let mut child = Command::new(&exe)
            .args(["--exact", "child_copy", "--ignored", "--nocapture"])
            .env("MQLITE_MIRROR", spec)
            .env(URL_VAR, url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(ms));
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn copies_to_the_cluster_killed_midway_lose_and_double_nothing() {
    let Some(k) = broker() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let t = topic("kill-to");
    {
        let dir = open_dir(tmp.path());
        dir.create_topic(&t, TopicConfig::new(PARTITIONS)).unwrap();
        fill_dir(&dir, &t, 0, 1500);
    }
    kill_copies(&format!("to {} {t}", tmp.path().display()), 8);
    let dir = open_dir(tmp.path());
    mirror::to_cluster(&dir, &k, &t, &MirrorOptions::default()).unwrap();
    let src = read_dir(&dir, &t);
    assert_exact_copy(&src, &read_cluster(&k, &t, src.len()), None);
}

#[test]
fn copies_from_the_cluster_killed_midway_lose_and_double_nothing() {
    let Some(k) = broker() else { return };
    let t = topic("kill-from");
    k.create_topic(&t, TopicConfig::new(PARTITIONS)).unwrap();
    fill_cluster(&k, &t, 0, 1500);

    let tmp = tempfile::tempdir().unwrap();
    kill_copies(&format!("from {} {t}", tmp.path().display()), 8);
    let dir = open_dir(tmp.path());
    mirror::from_cluster(&k, &dir, &t, &MirrorOptions::default()).unwrap();
    assert_exact_copy(&read_cluster(&k, &t, 1500), &read_dir(&dir, &t), None);
}

#[test]
fn copies_by_key_killed_midway_lose_and_double_nothing() {
    let Some(k) = broker() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let t = topic("kill-by-key-to");
    k.create_topic(&t, TopicConfig::new(2)).unwrap();
    {
        let dir = open_dir(tmp.path());
        dir.create_topic(&t, TopicConfig::new(PARTITIONS)).unwrap();
        fill_dir(&dir, &t, 0, 1200);
    }
    kill_copies(&format!("to {} {t}", tmp.path().display()), 6);
    let dir = open_dir(tmp.path());
    mirror::to_cluster(&dir, &k, &t, &MirrorOptions::default()).unwrap();
    let src = read_dir(&dir, &t);
    assert_exact_copy(&src, &read_cluster(&k, &t, src.len()), Some(2));
    drop(dir);

    let t = topic("kill-by-key-from");
    k.create_topic(&t, TopicConfig::new(PARTITIONS)).unwrap();
    fill_cluster(&k, &t, 0, 1200);
    open_dir(tmp.path())
        .create_topic(&t, TopicConfig::new(5))
        .unwrap();
    kill_copies(&format!("from {} {t}", tmp.path().display()), 6);
    let dir = open_dir(tmp.path());
    mirror::from_cluster(&k, &dir, &t, &MirrorOptions::default()).unwrap();
    assert_exact_copy(&read_cluster(&k, &t, 1200), &read_dir(&dir, &t), Some(5));
}

/// Waits up to 30 s for `cond`.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn continuous() -> MirrorOptions {
    MirrorOptions {
        once: false,
        poll_timeout: Duration::from_millis(50),
        ..MirrorOptions::default()
    }
}

#[test]
fn a_mirror_copies_until_stopped_and_reports_as_it_runs() {
    let Some(url) = cluster() else { return };
    let k = broker().unwrap();
    let kb = Broker::open(url, Config::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = open_dir(tmp.path());
    let t = topic("follow");
    dir.create_topic(&t, TopicConfig::new(PARTITIONS)).unwrap();
    fill_dir(&dir, &t, 0, 100);
    let m = Mirror::new(&t, continuous()).unwrap();
    std::thread::scope(|s| {
        let run = s.spawn(|| m.run(&dir, &kb));
        wait_for("the first 100", || m.stats().copied == 100);
        fill_dir(&dir, &t, 100, 50);
        wait_for("150 copied, no lag", || {
            let st = m.stats();
            st.copied == 150 && st.lag() == 0
        });
        let outside = mirror::status(&dir, &kb, &t).unwrap();
        assert_eq!((outside.lag(), outside.copied), (0, 0));
        assert!(matches!(
            m.run(&dir, &kb),
            Err(mqlite::Error::InvalidArgument(_))
        ));
        m.stop();
        let stats = run.join().unwrap().unwrap();
        assert_eq!(
            (stats.copied, stats.errors, &stats.last_error),
            (150, 0, &None)
        );
        assert!(stats.batches >= 2 && stats.elapsed > Duration::ZERO);
        assert!(stats.rate() > 0.0);
    });
    let src = read_dir(&dir, &t);
    assert_exact_copy(&src, &read_cluster(&k, &t, 150), None);
    fill_dir(&dir, &t, 150, 20);
    let behind = mirror::status(&dir, &kb, &t).unwrap();
    assert_eq!(behind.lag(), 20);
    assert_eq!(behind.partitions.len(), PARTITIONS as usize);
}

#[test]
fn a_continuous_copy_waits_for_its_topic_and_counts_the_errors() {
    let Some(url) = cluster() else { return };
    let k = broker().unwrap();
    let kb = Broker::open(url, Config::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = open_dir(tmp.path());
    let t = topic("later");
    let m = Mirror::new(&t, continuous()).unwrap();
    std::thread::scope(|s| {
        let run = s.spawn(|| m.run(&kb, &dir));
        wait_for("an error", || m.stats().errors >= 2);
        let why = m.stats().last_error.unwrap();
        assert!(why.contains("unknown topic"), "{why}");
        k.create_topic(&t, TopicConfig::new(PARTITIONS)).unwrap();
        fill_cluster(&k, &t, 0, 30);
        wait_for("30 copied", || m.stats().copied == 30);
        m.stop();
        run.join().unwrap().unwrap();
    });
    assert_exact_copy(&read_cluster(&k, &t, 30), &read_dir(&dir, &t), None);
}

#[test]
fn a_mirror_refuses_what_it_cannot_copy() {
    let Some(url) = cluster() else { return };
    let kb = Broker::open(url, Config::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = open_dir(tmp.path());
    let tmp2 = tempfile::tempdir().unwrap();
    let dir2 = open_dir(tmp2.path());
    let m = Mirror::new("t", MirrorOptions::default()).unwrap();
    for (a, b) in [(&dir, &dir2), (&kb, &kb)] {
        assert!(matches!(
            m.run(a, b),
            Err(mqlite::Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        Mirror::new("bad/name", MirrorOptions::default()),
        Err(mqlite::Error::InvalidTopicName { .. })
    ));
    assert!(matches!(
        Mirror::new(
            "t",
            MirrorOptions {
                max_batch: 0,
                ..MirrorOptions::default()
            }
        ),
        Err(mqlite::Error::InvalidArgument(_))
    ));
    // A copy `once` of a topic the source lacks fails at once.
    assert!(matches!(
        m.run(&dir, &kb),
        Err(mqlite::Error::UnknownTopic(_))
    ));
    assert_eq!(m.stats().errors, 1);
    dir2.close().unwrap();
    assert!(matches!(m.run(&dir2, &kb), Err(mqlite::Error::Closed(_))));
}
