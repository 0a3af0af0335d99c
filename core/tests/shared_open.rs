//! Shared mode within one process: a writer handle, a read-only handle
//! (a separate engine, as another process would have), a second shared
//! handle on the same engine, and what each may and may not do. Tests
//! with several processes are in `shared_mode*.rs`.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use mqlite::{
    Broker, Config, ConsumerConfig, Error, ErrorKind, OpenMode, ProducerConfig, Record, TopicConfig,
};

fn shared() -> Config {
    Config::default().shared(true)
}

fn readonly() -> Config {
    Config::default().readonly(true)
}

fn send(b: &Broker, topic: &str, partition: u32, values: &[&str]) {
    let p = b.producer(ProducerConfig::default()).unwrap();
    for v in values {
        p.send(Record::new(topic).partition(partition).value(v.as_bytes()))
            .unwrap();
    }
    p.flush().unwrap();
}

fn read_all(b: &Broker, topic: &str, partition: u32, want: usize) -> Vec<String> {
    let mut c = b.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[(topic, partition)]).unwrap();
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while got.len() < want && Instant::now() < until {
        for m in c.poll(Duration::from_millis(200)).unwrap() {
            got.push(String::from_utf8(m.value().unwrap().to_vec()).unwrap());
        }
    }
    got
}

/// A data directory, written with `config`, whose topic `t` holds
/// `value-00000` to `value-00199` in 4 KiB segments, a record a batch.
fn sealed_values(config: Config) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let x = Broker::open(dir.path(), config).unwrap();
    x.create_topic("t", TopicConfig::new(1).segment_bytes(4096))
        .unwrap();
    let values: Vec<String> = (0..200).map(|i| format!("value-{i:05}")).collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    send(&x, "t", 0, &refs);
    x.close().unwrap();
    dir
}

/// Polls `partition` of `topic` from its start, through a consumer of
/// `b`, until a poll fails or `polls` polls went by: the messages
/// delivered before, and the error.
fn poll_until_error(
    b: &Broker,
    topic: &str,
    partition: u32,
    polls: usize,
) -> (Vec<mqlite::Message>, Option<Error>) {
    let mut c = b.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[(topic, partition)]).unwrap();
    let mut got = Vec::new();
    for _ in 0..polls {
        match c.poll(Duration::from_millis(100)) {
            Ok(ms) => got.extend(ms),
            Err(e) => return (got, Some(e)),
        }
    }
    (got, None)
}

#[test]
fn a_reader_sees_what_the_writer_appends_and_creates() {
    let dir = tempfile::tempdir().unwrap();
    let w = Broker::open(dir.path(), shared()).unwrap();
    w.create_topic("t", TopicConfig::new(2)).unwrap();
    send(&w, "t", 0, &["a", "b", "c"]);
    let r = Broker::open(dir.path(), readonly()).unwrap();
    assert_eq!(r.topics(), vec!["t".to_owned()]);
    assert_eq!(read_all(&r, "t", 0, 3), ["a", "b", "c"]);
    // Appended after the reader opened, and a topic created since.
    send(&w, "t", 0, &["d"]);
    w.create_topic("u", TopicConfig::new(1)).unwrap();
    send(&w, "u", 0, &["x"]);
    assert_eq!(read_all(&r, "t", 0, 4), ["a", "b", "c", "d"]);
    assert_eq!(r.topics(), vec!["t".to_owned(), "u".to_owned()]);
    assert_eq!(read_all(&r, "u", 0, 1), ["x"]);
    assert_eq!(r.topic("u").unwrap().partitions[0].end_offset, 1);
    // Grown and deleted by the writer.
    w.add_partitions("t", 3).unwrap();
    assert_eq!(r.topic("t").unwrap().partitions.len(), 3);
    w.delete_topic("u").unwrap();
    assert_eq!(r.topics(), vec!["t".to_owned()]);
    assert_eq!(r.topic("u").unwrap_err().kind(), ErrorKind::UnknownTopic);
}

#[test]
fn a_poll_parked_in_a_reader_is_woken_by_an_append() {
    let dir = tempfile::tempdir().unwrap();
    let w = Broker::open(dir.path(), shared()).unwrap();
    w.create_topic("t", TopicConfig::new(1)).unwrap();
    let r = Broker::open(dir.path(), readonly()).unwrap();
    let mut c = r.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[("t", 0)]).unwrap();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        send(&w, "t", 0, &["late"]);
        w
    });
    let start = Instant::now();
    let got = c.poll(Duration::from_secs(20)).unwrap();
    assert_eq!(got.len(), 1);
    assert!(start.elapsed() < Duration::from_secs(10));
    drop(writer.join().unwrap());
}

#[test]
fn read_only_handles_refuse_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let w = Broker::open(dir.path(), shared()).unwrap();
    w.create_topic("t", TopicConfig::new(1)).unwrap();
    send(&w, "t", 0, &["a"]);
    let r = Broker::open(dir.path(), readonly()).unwrap();
    let kind = |e: Error| e.kind();
    assert_eq!(
        kind(r.producer(ProducerConfig::default()).unwrap_err()),
        ErrorKind::ReadOnly
    );
    assert_eq!(
        kind(r.create_topic("v", TopicConfig::new(1)).unwrap_err()),
        ErrorKind::ReadOnly
    );
    assert_eq!(kind(r.delete_topic("t").unwrap_err()), ErrorKind::ReadOnly);
    assert_eq!(
        kind(r.add_partitions("t", 2).unwrap_err()),
        ErrorKind::ReadOnly
    );
    let mut c = r.consumer(ConsumerConfig::group("g")).unwrap();
    c.assign(&[("t", 0)]).unwrap();
    assert_eq!(c.poll(Duration::from_secs(5)).unwrap().len(), 1);
    assert_eq!(kind(c.commit().unwrap_err()), ErrorKind::ReadOnly);
    r.describe_group("g").unwrap();
    assert!(
        !dir.path().join("groups").exists(),
        "a read-only group wrote"
    );
    // Nothing changed.
    assert_eq!(w.topics(), vec!["t".to_owned()]);
    assert_eq!(w.topic("t").unwrap().partitions.len(), 1);
}

#[test]
fn a_read_only_open_of_a_missing_directory_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing");
    let e = Broker::open(&missing, readonly()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(!missing.exists());
}

#[test]
fn exclusive_and_shared_opens_exclude_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let s = Broker::open(dir.path(), shared()).unwrap();
    let e = Broker::open(dir.path(), Config::default().mode(OpenMode::Exclusive)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked);
    s.close().unwrap();
    let x = Broker::open(dir.path(), Config::default().mode(OpenMode::Exclusive)).unwrap();
    let e = Broker::open(dir.path(), shared()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked);
    let pid = std::process::id().to_string();
    assert!(e.to_string().contains(&pid), "{e}");
    let e = Broker::open(dir.path(), readonly()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked);
    drop(x);
    Broker::open(dir.path(), shared()).unwrap();
}

#[test]
fn auto_mode_is_shared_mode_on_a_local_filesystem_and_mode_says_which_was_taken() {
    let dir = tempfile::tempdir().unwrap();
    let auto = || Config::default().mode(OpenMode::Auto);
    let a = Broker::open(dir.path(), auto()).unwrap();
    assert_eq!(a.mode(), OpenMode::Shared);
    a.create_topic("t", TopicConfig::new(1)).unwrap();
    // A shared open in this process shares the engine the auto open made.
    let b = Broker::open(dir.path(), shared()).unwrap();
    assert_eq!(b.mode(), OpenMode::Shared);
    assert_eq!(b.topics(), vec!["t".to_owned()]);
    let exclusive = || Config::default().mode(OpenMode::Exclusive);
    let e = Broker::open(dir.path(), exclusive()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked);
    a.close().unwrap();
    b.close().unwrap();
    let x = Broker::open(dir.path(), exclusive()).unwrap();
    assert_eq!(x.mode(), OpenMode::Exclusive);
    let e = Broker::open(dir.path(), auto()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked);
    x.close().unwrap();
    // `shared(false)` asks for exclusive mode; the default is exclusive.
    let y = Broker::open(dir.path(), auto().shared(false)).unwrap();
    assert_eq!(y.mode(), OpenMode::Exclusive);
    y.close().unwrap();
    assert_eq!(
        Broker::open(dir.path(), Config::default()).unwrap().mode(),
        OpenMode::Exclusive
    );
    // A directory that does not exist yet: its parent's filesystem decides.
    let nested = dir.path().join("a/b");
    let n = Broker::open(&nested, auto()).unwrap();
    assert_eq!(n.mode(), OpenMode::Shared);
    assert!(nested.is_dir());
}

#[test]
fn a_second_shared_open_in_a_process_shares_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let a = Broker::open(dir.path(), shared()).unwrap();
    a.create_topic("t", TopicConfig::new(1)).unwrap();
    let b = Broker::open(dir.path(), shared()).unwrap();
    assert_eq!(b.topics(), vec!["t".to_owned()]);
    // Both write through the one engine.
    send(&b, "t", 0, &["from b"]);
    send(&a, "t", 0, &["from a"]);
    b.close().unwrap();
    assert!(b.is_closed());
    assert_eq!(
        b.producer(ProducerConfig::default()).unwrap_err().kind(),
        ErrorKind::Closed
    );
    assert!(!a.is_closed());
    assert_eq!(read_all(&a, "t", 0, 2), ["from b", "from a"]);
    a.close().unwrap();
    // The last close closed the engine: an exclusive open works.
    Broker::open(dir.path(), Config::default()).unwrap();
}

#[test]
fn data_written_in_exclusive_mode_reads_in_shared_mode_and_back() {
    let dir = tempfile::tempdir().unwrap();
    {
        let x = Broker::open(dir.path(), Config::default()).unwrap();
        x.create_topic("t", TopicConfig::new(1)).unwrap();
        send(&x, "t", 0, &["1", "2"]);
    }
    {
        // No tail pages yet: a reader reads the log to its end.
        let r = Broker::open(dir.path(), readonly()).unwrap();
        assert_eq!(read_all(&r, "t", 0, 2), ["1", "2"]);
        let w = Broker::open(dir.path(), shared()).unwrap();
        send(&w, "t", 0, &["3"]);
        assert_eq!(read_all(&r, "t", 0, 3), ["1", "2", "3"]);
    }
    let x = Broker::open(dir.path(), Config::default()).unwrap();
    send(&x, "t", 0, &["4"]);
    assert_eq!(read_all(&x, "t", 0, 4), ["1", "2", "3", "4"]);
}

#[test]
fn groups_committed_elsewhere_are_listed_and_described() {
    let dir = tempfile::tempdir().unwrap();
    let w = Broker::open(dir.path(), shared()).unwrap();
    w.create_topic("t", TopicConfig::new(1)).unwrap();
    send(&w, "t", 0, &["a", "b"]);
    let r = Broker::open(dir.path(), readonly()).unwrap();
    assert!(r.groups().is_empty());
    let mut c = w.consumer(ConsumerConfig::group("g")).unwrap();
    c.assign(&[("t", 0)]).unwrap();
    assert_eq!(c.poll(Duration::from_secs(5)).unwrap().len(), 2);
    c.commit().unwrap();
    assert_eq!(r.groups(), vec!["g".to_owned()]);
    let info = r.describe_group("g").unwrap();
    assert_eq!(info.committed.len(), 1);
    assert_eq!(info.committed[0].2.offset, 2);
    // Later commits are seen too.
    send(&w, "t", 0, &["c"]);
    assert_eq!(c.poll(Duration::from_secs(5)).unwrap().len(), 1);
    c.commit().unwrap();
    assert_eq!(r.describe_group("g").unwrap().committed[0].2.offset, 3);
}

#[test]
fn a_reader_never_delivers_a_damaged_batch_of_a_sealed_segment() {
    let dir = sealed_values(Config::default());
    // A payload byte of the first (sealed) segment's third batch.
    let seg = dir.path().join("topics/t/0/00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.windows(11).position(|w| w == b"value-00002").unwrap();
    bytes[at + 10] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let r = Broker::open(dir.path(), readonly()).unwrap();
    let (got, err) = poll_until_error(&r, "t", 0, 10);
    let got: Vec<&[u8]> = got.iter().map(|m| m.value().unwrap()).collect();
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::Corrupt));
    assert!(got
        .iter()
        .all(|v| v.starts_with(b"value-0000") && *v != b"value-00002"));
    assert!(got.len() <= 2, "{} delivered", got.len());
}

/// A damaged batch header in a sealed segment (its length field) is an
/// error for a reader in another engine, never a skip to the next segment.
#[test]
fn a_reader_meets_a_damaged_header_of_a_sealed_segment_as_an_error() {
    let dir = sealed_values(shared());
    // The third batch of the first (sealed) segment claims more bytes than
    // the segment holds.
    let seg = dir.path().join("topics/t/0/00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    let mut at = 0;
    for _ in 0..2 {
        at += 12 + u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
    }
    bytes[at + 8..at + 12].copy_from_slice(&0x00ff_fff0_u32.to_le_bytes());
    std::fs::write(&seg, &bytes).unwrap();
    for config in [readonly(), shared()] {
        let r = Broker::open(dir.path(), config).unwrap();
        let (got, err) = poll_until_error(&r, "t", 0, 10);
        let got: Vec<u64> = got.iter().map(mqlite::Message::offset).collect();
        assert_eq!(got, [0, 1], "only the batches before the damage");
        match err {
            Some(Error::Corrupt { position, .. }) => assert_eq!(position, at as u64),
            other => panic!("{other:?}"),
        }
        r.close().unwrap();
    }
}

/// A damaged batch in the middle of the active segment, under what the
/// tail page says was published: a reader that opens then meets it as an
/// error, never as the end of the log.
#[test]
fn a_reader_meets_a_damaged_batch_of_the_active_segment_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let w = Broker::open(dir.path(), shared()).unwrap();
    w.create_topic("t", TopicConfig::new(1)).unwrap();
    let values: Vec<String> = (0..20).map(|i| format!("value-{i:05}")).collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    send(&w, "t", 0, &refs);
    let seg = dir.path().join("topics/t/0/00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.windows(11).position(|v| v == b"value-00005").unwrap();
    bytes[at + 10] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let r = Broker::open(dir.path(), readonly()).unwrap();
    let (got, err) = poll_until_error(&r, "t", 0, 20);
    let got: Vec<u64> = got.iter().map(mqlite::Message::offset).collect();
    assert_eq!(got, [0, 1, 2, 3, 4], "only the batches before the damage");
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::Corrupt));
    r.close().unwrap();
    w.close().unwrap();
}

/// A topic created in shared mode has its partitions' tail pages from the
/// start: their first use creates no file.
#[test]
fn a_topic_created_in_shared_mode_has_its_tail_pages() {
    let dir = tempfile::tempdir().unwrap();
    let w = Broker::open(dir.path(), shared()).unwrap();
    w.create_topic("t", TopicConfig::new(3)).unwrap();
    for p in 0..3 {
        let page = dir.path().join(format!("topics/t/{p}/tail"));
        assert_eq!(std::fs::metadata(&page).unwrap().len(), 4096, "{p}");
    }
    send(&w, "t", 2, &["a", "b"]);
    let r = Broker::open(dir.path(), readonly()).unwrap();
    assert_eq!(read_all(&r, "t", 2, 2), ["a", "b"]);
    r.close().unwrap();
    w.close().unwrap();
}

/// A member of group `g` on `t` that polls once and commits `at`.
fn member_committing(b: &Broker, at: u64) -> mqlite::Consumer {
    let mut c = b
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while c.poll(Duration::from_millis(100)).unwrap().is_empty() {
        assert!(Instant::now() < until, "the member got nothing");
    }
    c.commit_offsets(&[("t", 0, at, "")]).unwrap();
    c
}

#[test]
fn consumers_left_open_past_their_brokers_close_leave_their_groups() {
    let dir = tempfile::tempdir().unwrap();
    let values: Vec<String> = (0..50).map(|i| format!("v{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    {
        let mq = Broker::open(dir.path(), shared()).unwrap();
        mq.create_topic("t", TopicConfig::new(1)).unwrap();
        send(&mq, "t", 0, &values);
        // Never closed nor dropped, as if its thread were stuck.
        std::mem::forget(member_committing(&mq, 20));
        mq.close().unwrap();
    }
    // Another broker in this process (the process lives on): the leaked
    // member is no longer in the group, so a new one gets the partition
    // at once instead of after the leaked one's max_poll_interval_ms.
    let mq = Broker::open(dir.path(), shared()).unwrap();
    assert!(mq.describe_group("g").unwrap().members.is_empty());
    let kept = member_committing(&mq, 30);
    assert_eq!(mq.describe_group("g").unwrap().members.len(), 1);
    // The same with a consumer still held, closed only after its broker.
    mq.close().unwrap();
    let mq = Broker::open(dir.path(), shared()).unwrap();
    assert!(mq.describe_group("g").unwrap().members.is_empty());
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    let got = c.poll(Duration::from_secs(10)).unwrap();
    assert_eq!(got.first().map(mqlite::Message::offset), Some(30));
    drop(kept); // its leave, after the broker's, changes nothing
    assert_eq!(mq.describe_group("g").unwrap().members.len(), 1);
    assert_eq!(c.assignment(), vec![("t".to_owned(), 0)]);
}
