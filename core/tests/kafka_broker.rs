//! One program, two backends: the same calls of [`Broker`], [`Producer`]
//! and [`Consumer`] run on a data directory and on a Kafka cluster
//! (`Broker::open("kafka://...")`, the broker of `kafka_cluster/`), and
//! give the same results and the same errors.
#![cfg(feature = "kafka")]
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

mod kafka_cluster;
use kafka_cluster::{cluster, topic};

use mqlite::{
    partition_for_key, Broker, Config, ConsumerConfig, Error, Header, Message, ProducerConfig,
    Record, TopicConfig,
};

/// Polls until `n` messages came (or 30 s passed).
fn poll_n(c: &mut mqlite::Consumer, n: usize) -> Vec<Message> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < n && Instant::now() < deadline {
        got.extend(c.poll(Duration::from_millis(200)).unwrap());
    }
    got
}

/// What the scenario saw, to compare across backends.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    /// Per partition, `(offset, key, value, header)` in order.
    first_read: BTreeMap<u32, Vec<(u64, String, String, String)>>,
    /// What the group read after a restart, per partition.
    resumed: BTreeMap<u32, Vec<u64>>,
    errors: Vec<&'static str>,
}

/// The application: the same code whatever `mq` runs on.
fn scenario(mq: &Broker, t: &str, g: &str) -> Seen {
    mq.create_topic(t, TopicConfig::new(3)).unwrap();
    assert!(mq.topics().contains(&t.to_owned()));
    assert_eq!(mq.topic(t).unwrap().partitions.len(), 3);
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..30 {
        let key = format!("user-{}", i % 7);
        let md = p
            .send(
                Record::new(t)
                    .key(key.clone())
                    .value(format!("event {i}"))
                    .header("seq", i.to_string())
                    .timestamp(1_700_000_000_000 + i),
            )
            .unwrap();
        assert_eq!(md.partition, partition_for_key(key.as_bytes(), 3));
    }
    p.flush().unwrap();

    let config = || ConsumerConfig {
        enable_auto_commit: false,
        ..ConsumerConfig::group(g)
    };
    let mut c = mq.consumer(config()).unwrap();
    c.subscribe(&[t]).unwrap();
    let got = poll_n(&mut c, 30);
    let mut first_read: BTreeMap<u32, Vec<(u64, String, String, String)>> = BTreeMap::new();
    for m in &got {
        let h: Vec<Header> = m.headers();
        first_read.entry(m.partition()).or_default().push((
            m.offset(),
            String::from_utf8(m.key().unwrap().to_vec()).unwrap(),
            String::from_utf8(m.value().unwrap().to_vec()).unwrap(),
            String::from_utf8(h[0].value.clone()).unwrap(),
        ));
    }
    // Commit the first two messages of each partition, then restart.
    let commits: Vec<(String, u32, u64)> =
        first_read.keys().map(|&p| (t.to_owned(), p, 2)).collect();
    let commits: Vec<(&str, u32, u64, &str)> = commits
        .iter()
        .map(|(t, p, o)| (t.as_str(), *p, *o, ""))
        .collect();
    c.commit_offsets(&commits).unwrap();
    for &(_, p, o, _) in &commits {
        assert_eq!(c.committed(t, p).unwrap().unwrap().offset, o);
    }
    c.close();
    drop(c);
    let mut c = mq.consumer(config()).unwrap();
    c.subscribe(&[t]).unwrap();
    let again = poll_n(&mut c, 30 - 2 * first_read.len());
    let mut resumed: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for m in &again {
        resumed.entry(m.partition()).or_default().push(m.offset());
    }
    c.commit().unwrap();

    let mut errors = Vec::new();
    let e = |r: Result<(), Error>| r.unwrap_err().kind().name();
    errors.push(e(mq.create_topic(t, TopicConfig::new(3))));
    errors.push(e(mq.create_topic("bad/name", TopicConfig::new(1))));
    errors.push(e(p.send(Record::new(t).partition(7).value("x")).map(drop)));
    errors.push(e(mq.topic("missing-topic").map(drop)));
    let mut free = mq.consumer(ConsumerConfig::default()).unwrap();
    errors.push(e(free.assign(&[(t, 9)])));
    errors.push(e(free.commit()));
    p.close().unwrap();
    errors.push(e(p.send(Record::new(t).value("late")).map(drop)));
    mq.delete_topic(t).unwrap();
    assert!(!mq.topics().contains(&t.to_owned()));
    Seen {
        first_read,
        resumed,
        errors,
    }
}

#[test]
fn the_same_program_runs_on_a_directory_and_on_a_cluster() {
    let Some(url) = cluster() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = Broker::open(tmp.path(), Config::default().prefault(false)).unwrap();
    let on_dir = scenario(&dir, "events", "billing");
    let k = Broker::open(
        url,
        Config::default().kafka_property("request.timeout.ms", "20000"),
    )
    .unwrap();
    assert!(k.cluster().is_some());
    assert_eq!(k.path().to_str(), Some(url));
    let on_cluster = scenario(&k, &topic("events"), &topic("billing"));
    assert_eq!(on_dir, on_cluster);
    assert_eq!(
        on_dir.errors,
        vec![
            "TopicExists",
            "InvalidTopicName",
            "UnknownPartition",
            "UnknownTopic",
            "UnknownPartition",
            "InvalidArgument",
            "Closed",
        ]
    );
}

#[test]
fn calls_a_cluster_lacks_are_refused_plainly() {
    let Some(url) = cluster() else { return };
    let k = Broker::open(url, Config::default()).unwrap();
    assert!(matches!(
        k.share_consumer(mqlite::ShareConsumerConfig::group("jobs")),
        Err(Error::InvalidArgument(m)) if m.contains("not available on a Kafka cluster")
    ));
    let p = k.producer(ProducerConfig::default()).unwrap();
    assert!(matches!(
        p.begin_transaction(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(p.last_sequence(), Err(Error::InvalidArgument(_))));
    assert!(k.damaged().is_empty());
    assert_eq!(k.enforce_retention().unwrap(), 0);
    k.close().unwrap();
    assert!(k.is_closed());
    assert!(matches!(
        k.create_topic("after-close", TopicConfig::new(1)),
        Err(Error::Closed(_))
    ));
}

/// Records a member's group changes; commits what it read when partitions
/// are taken, through its context.
struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl mqlite::RebalanceListener for Recorder {
    fn on_assign(&mut self, _ctx: &mut mqlite::RebalanceContext<'_>, parts: &[(String, u32)]) {
        self.0.lock().unwrap().push(format!("assign {parts:?}"));
    }
    fn on_revoke(&mut self, ctx: &mut mqlite::RebalanceContext<'_>, parts: &[(String, u32)]) {
        let r = ctx.commit();
        self.0.lock().unwrap().push(format!(
            "revoke {parts:?} commit {}",
            if r.is_ok() { "ok" } else { "failed" }
        ));
    }
}

#[test]
fn a_listener_commits_before_its_partitions_go() {
    let Some(url) = cluster() else { return };
    let k = Broker::open(url, Config::default()).unwrap();
    let t = topic("listener");
    let g = topic("listener-group");
    k.create_topic(&t, TopicConfig::new(2)).unwrap();
    let p = k.producer(ProducerConfig::default()).unwrap();
    for i in 0..20u32 {
        p.send(Record::new(&t).partition(i % 2).value(i.to_string()))
            .unwrap();
    }
    let config = || ConsumerConfig {
        enable_auto_commit: false,
        ..ConsumerConfig::group(g.clone())
    };
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut a = k.consumer(config()).unwrap();
    a.subscribe_with(&[&t], Box::new(Recorder(events.clone())))
        .unwrap();
    assert_eq!(poll_n(&mut a, 20).len(), 20);
    let got_b = std::thread::scope(|s| {
        let a_polls = s.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(8);
            while Instant::now() < deadline {
                a.poll(Duration::from_millis(100)).unwrap();
            }
        });
        let mut b = k.consumer(config()).unwrap();
        b.subscribe(&[&t]).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(8);
        while Instant::now() < deadline {
            got.extend(b.poll(Duration::from_millis(100)).unwrap());
        }
        a_polls.join().unwrap();
        got.len()
    });
    let events = events.lock().unwrap().clone();
    assert_eq!(events[0], format!("assign [(\"{t}\", 0), (\"{t}\", 1)]"));
    assert_eq!(
        events[1],
        format!("revoke [(\"{t}\", 0), (\"{t}\", 1)] commit ok"),
        "{events:?}"
    );
    assert!(events[2].starts_with("assign ["), "{events:?}");
    // What A read was committed on revoke: B reads none of it again.
    assert_eq!(got_b, 0, "{events:?}");
}

#[test]
fn a_commit_covers_what_was_handed_out_not_what_was_fetched() {
    let Some(url) = cluster() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = Broker::open(tmp.path(), Config::default().prefault(false)).unwrap();
    let k = Broker::open(url, Config::default()).unwrap();
    let mut seen = Vec::new();
    for (mq, t, g) in [
        (&dir, "handed".to_owned(), "h".to_owned()),
        (&k, topic("handed"), topic("h")),
    ] {
        mq.create_topic(&t, TopicConfig::new(1)).unwrap();
        let p = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..10 {
            p.send(Record::new(&t).value(format!("{i}"))).unwrap();
        }
        let config = || ConsumerConfig {
            enable_auto_commit: false,
            ..ConsumerConfig::group(g.clone())
        };
        let mut c = mq.consumer(config()).unwrap();
        c.subscribe(&[&t]).unwrap();
        // One fetch takes all 10; the application gets 3 of them.
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.len() < 3 && Instant::now() < deadline {
            if let Some(m) = c.poll_one(Duration::from_millis(200)).unwrap() {
                got.push(m.offset());
            }
        }
        assert_eq!(c.position(&t, 0).unwrap(), 3);
        c.commit().unwrap();
        let committed = c.committed(&t, 0).unwrap().unwrap().offset;
        c.close();
        drop(c);
        let mut c = mq.consumer(config()).unwrap();
        c.subscribe(&[&t]).unwrap();
        let rest = poll_n(&mut c, 7);
        seen.push((
            got,
            committed,
            rest.first().map(Message::offset),
            rest.len(),
        ));
    }
    assert_eq!(seen[0], (vec![0, 1, 2], 3, Some(3), 7));
    assert_eq!(seen[0], seen[1]);
}

#[test]
fn a_group_is_described_with_its_members_and_commits() {
    let Some(url) = cluster() else { return };
    let k = Broker::open(url, Config::default()).unwrap();
    let t = topic("described");
    let g = topic("described-group");
    k.create_topic(&t, TopicConfig::new(2)).unwrap();
    let p = k.producer(ProducerConfig::default()).unwrap();
    for part in 0..2 {
        p.send(Record::new(&t).partition(part).value("v")).unwrap();
    }
    let mut c = k
        .consumer(ConsumerConfig {
            auto_offset_reset: mqlite::OffsetReset::Earliest,
            enable_auto_commit: false,
            ..ConsumerConfig::group(&g)
        })
        .unwrap();
    c.subscribe(&[t.as_str()]).unwrap();
    let mut n = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while n < 2 && std::time::Instant::now() < deadline {
        n += c.poll(Duration::from_millis(100)).unwrap().len();
    }
    assert_eq!(n, 2);
    c.commit().unwrap();
    let info = k.describe_group(&g).unwrap();
    assert_eq!(info.name, g);
    assert_eq!(info.members.len(), 1, "{info:?}");
    // tansu 0.6 describes members without their assignments (Kafka sends
    // them; the unit tests of `kafka/groups.rs` read them).
    let owned = &info.members[0].partitions;
    assert!(
        owned.is_empty() || *owned == vec![(t.clone(), 0), (t.clone(), 1)],
        "{owned:?}"
    );
    assert!(!info.members[0].id.is_empty());
    let committed: Vec<(String, u32, u64)> = info
        .committed
        .iter()
        .map(|(t, p, c)| (t.clone(), *p, c.offset))
        .collect();
    assert_eq!(committed, vec![(t.clone(), 0, 1), (t.clone(), 1, 1)]);
    c.close();
    let nobody = k.describe_group(&topic("nobody")).unwrap();
    assert!(nobody.members.is_empty() && nobody.committed.is_empty());
    assert!(matches!(
        k.describe_group(""),
        Err(Error::InvalidArgument(_))
    ));
}
