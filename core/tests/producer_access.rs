//! Access modes of named producers (`ProducerAccessMode`) and automatic
//! numbering (`ProducerConfig::initial_sequence`), in one process and
//! across processes of a shared-mode directory.
#![allow(clippy::unwrap_used)]

mod common;
mod shared_mode_procs;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqlite::{
    Broker, Error, ErrorKind, Producer, ProducerAccessMode as Mode, ProducerConfig, Record,
    TopicConfig,
};
use shared_mode_procs::{shared, spawn, ChildEnv, Dirs};

fn open(dir: &std::path::Path) -> Broker {
    let mq = Broker::open(dir, common::cfg()).unwrap();
    if mq.topic("t").is_err() {
        mq.create_topic("t", TopicConfig::new(2)).unwrap();
    }
    mq
}

fn named(name: &str, mode: Mode) -> ProducerConfig {
    ProducerConfig::default().name(name).access_mode(mode)
}

fn send(p: &Producer) -> mqlite::Result<mqlite::RecordMetadata> {
    p.send(Record::new("t").partition(0).value(b"v".to_vec()))
}

fn busy<T: std::fmt::Debug>(r: mqlite::Result<T>) {
    match r {
        Err(e @ Error::ProducerBusy { .. }) => {
            assert_eq!(e.kind(), ErrorKind::ProducerBusy);
            assert_eq!(e.code(), 404);
        }
        other => panic!("expected ProducerBusy, got {other:?}"),
    }
}

#[test]
fn a_second_exclusive_producer_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mq = open(dir.path());
    let a = mq.producer(named("x", Mode::Exclusive)).unwrap();
    let epoch = a.epoch();
    busy(mq.producer(named("x", Mode::Exclusive)));
    assert!(matches!(
        mq.producer(named("x", Mode::WaitForExclusive).max_block_ms(0)),
        Err(Error::Timeout(0))
    ));
    // Neither the default (fencing) mode nor a shared producer gets in.
    busy(mq.producer(named("x", Mode::ExclusiveWithFencing)));
    busy(mq.producer(named("x", Mode::Shared)));
    // The open one was not fenced: its epoch is still the newest.
    send(&a).unwrap();
    assert_eq!(a.epoch(), epoch);
    // Another name is free.
    mq.producer(named("y", Mode::Exclusive)).unwrap();
    // Closing lets the next one in, with a new epoch.
    a.close().unwrap();
    let b = mq.producer(named("x", Mode::Exclusive)).unwrap();
    assert_eq!(b.epoch(), epoch + 1);
    assert_eq!(b.producer_id(), a.producer_id());
    drop(b); // dropping releases it too
    let c = mq.producer(named("x", Mode::Exclusive)).unwrap();
    send(&c).unwrap();
}

#[test]
fn wait_for_exclusive_waits_for_the_holder_to_close_or_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let mq = Arc::new(open(dir.path()));
    let a = mq.producer(named("x", Mode::Exclusive)).unwrap();
    let t = Instant::now();
    match mq.producer(named("x", Mode::WaitForExclusive).max_block_ms(150)) {
        Err(e @ Error::Timeout(_)) => assert_eq!(e.kind(), ErrorKind::Timeout),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(t.elapsed() >= Duration::from_millis(150));
    send(&a).unwrap();
    let (tx, rx) = mpsc::channel();
    let mq2 = Arc::clone(&mq);
    let waiter = std::thread::spawn(move || {
        let p = mq2
            .producer(named("x", Mode::WaitForExclusive).max_block_ms(30_000))
            .unwrap();
        tx.send(p.epoch()).unwrap();
        p
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "got the name while the exclusive producer was open"
    );
    send(&a).unwrap();
    let old = a.epoch();
    a.close().unwrap();
    let epoch = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(epoch, old + 1);
    let b = waiter.join().unwrap();
    send(&b).unwrap();
}

#[test]
fn shared_producers_send_together_share_the_epoch_and_dedup_across() {
    let dir = tempfile::tempdir().unwrap();
    let mq = open(dir.path());
    let a = mq.producer(named("s", Mode::Shared)).unwrap();
    let b = mq.producer(named("s", Mode::Shared)).unwrap();
    assert_eq!(a.producer_id(), b.producer_id());
    assert_eq!(a.epoch(), b.epoch());
    for _ in 0..3 {
        send(&a).unwrap();
        send(&b).unwrap();
    }
    // An application sequence written by one is a duplicate from the other.
    let first = a
        .send(
            Record::new("t")
                .partition(1)
                .value(b"x".to_vec())
                .sequence(7),
        )
        .unwrap();
    assert!(!first.duplicate);
    let again = b
        .send(
            Record::new("t")
                .partition(1)
                .value(b"x".to_vec())
                .sequence(7),
        )
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.offset, first.offset);
    // Exclusive modes and the fencing mode are refused while they are open.
    busy(mq.producer(named("s", Mode::Exclusive)));
    busy(mq.producer(named("s", Mode::ExclusiveWithFencing)));
    send(&a).unwrap();
    send(&b).unwrap();
    drop(a);
    busy(mq.producer(named("s", Mode::Exclusive)));
    b.close().unwrap();
    let e = mq.producer(named("s", Mode::Exclusive)).unwrap();
    busy(mq.producer(named("s", Mode::Shared)));
    send(&e).unwrap();
}

#[test]
fn producers_of_the_fencing_mode_are_fenced_by_any_newer_producer() {
    let dir = tempfile::tempdir().unwrap();
    let mq = open(dir.path());
    for mode in [
        Mode::ExclusiveWithFencing,
        Mode::Exclusive,
        Mode::WaitForExclusive,
        Mode::Shared,
    ] {
        let old = mq.producer(ProducerConfig::default().name("f")).unwrap();
        send(&old).unwrap();
        let new = mq.producer(named("f", mode)).unwrap();
        assert_eq!(new.epoch(), old.epoch() + 1, "{mode}");
        assert!(
            matches!(send(&old), Err(Error::ProducerFenced { .. })),
            "{mode}"
        );
        send(&new).unwrap();
    }
}

#[test]
fn bad_access_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mq = open(dir.path());
    for mode in [Mode::Exclusive, Mode::WaitForExclusive, Mode::Shared] {
        let r = mq.producer(ProducerConfig::default().access_mode(mode));
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{mode}");
    }
    mq.producer(ProducerConfig::default().access_mode(Mode::ExclusiveWithFencing))
        .unwrap();
    for cfg in [
        ProducerConfig::default().initial_sequence(0),
        named("n", Mode::Shared).initial_sequence(0),
        named("n", Mode::Exclusive).initial_sequence(-1),
    ] {
        assert!(matches!(mq.producer(cfg), Err(Error::InvalidArgument(_))));
    }
    // Nothing was claimed by the refused ones.
    mq.producer(named("n", Mode::Exclusive)).unwrap();
    for (s, m) in [
        ("shared", Mode::Shared),
        ("exclusive", Mode::Exclusive),
        ("exclusive_with_fencing", Mode::ExclusiveWithFencing),
        ("wait_for_exclusive", Mode::WaitForExclusive),
    ] {
        assert_eq!(s.parse::<Mode>().unwrap(), m);
        assert_eq!(m.to_string(), s);
    }
    assert!(matches!(
        "Exclusive".parse::<Mode>(),
        Err(Error::InvalidArgument(_))
    ));
}

// ------------------------------------------------- automatic numbering

fn auto(first: i64) -> ProducerConfig {
    ProducerConfig::default().name("n").initial_sequence(first)
}

fn value(p: &Producer) -> mqlite::RecordMetadata {
    send(p).unwrap()
}

#[test]
fn numbering_starts_at_initial_sequence_and_never_reuses_a_number() {
    let dir = tempfile::tempdir().unwrap();
    let mq = open(dir.path());
    let p = mq.producer(auto(100)).unwrap();
    assert_eq!(p.next_auto_sequence(), Some(100));
    for _ in 0..3 {
        assert!(!value(&p).duplicate);
    }
    assert_eq!(p.last_sequence().unwrap(), Some(102));
    drop(p);
    // Reopened with a lower start: continues after the last one.
    let p = mq.producer(auto(0)).unwrap();
    assert_eq!(p.next_auto_sequence(), Some(103));
    assert!(!value(&p).duplicate);
    assert_eq!(p.last_sequence().unwrap(), Some(103));
    drop(p);
    // With a higher one: starts there.
    let p = mq.producer(auto(1000)).unwrap();
    assert_eq!(p.next_auto_sequence(), Some(1000));
    assert!(!value(&p).duplicate);
    drop(p);
    mq.close().unwrap();
    // The directory reopened: still after the last one.
    let mq = open(dir.path());
    let p = mq.producer(auto(5)).unwrap();
    assert_eq!(p.next_auto_sequence(), Some(1001));
    let md = value(&p);
    assert!(!md.duplicate);
    assert_eq!(p.last_sequence().unwrap(), Some(1001));
    // Every record written, none dropped.
    let n: usize = (0..2)
        .map(|part| common::read_partition(&mq, "t", part).unwrap().len())
        .sum();
    assert_eq!(n, 6);
    // A producer without the setting is unchanged: no numbering.
    drop(p);
    let plain = mq.producer(ProducerConfig::default().name("n")).unwrap();
    assert_eq!(plain.next_auto_sequence(), None);
    value(&plain);
    assert_eq!(plain.last_sequence().unwrap(), Some(1001));
}

#[test]
fn explicit_sequences_move_the_counter_past_them() {
    let dir = tempfile::tempdir().unwrap();
    let mq = open(dir.path());
    let p = mq.producer(auto(10)).unwrap();
    value(&p); // 10
    let md = p
        .send(
            Record::new("t")
                .partition(0)
                .value(b"e".to_vec())
                .sequence(50),
        )
        .unwrap();
    assert!(!md.duplicate);
    assert_eq!(p.next_auto_sequence(), Some(51));
    value(&p); // 51
    assert_eq!(p.last_sequence().unwrap(), Some(51));
    // A lower explicit one is a duplicate and leaves the counter alone.
    let dup = p
        .send(
            Record::new("t")
                .partition(0)
                .value(b"e".to_vec())
                .sequence(10),
        )
        .unwrap();
    assert!(dup.duplicate);
    assert_eq!(p.next_auto_sequence(), Some(52));
    // A failed send gives its number back.
    assert!(p.send(Record::new("nope").value(b"x".to_vec())).is_err());
    assert_eq!(p.next_auto_sequence(), Some(52));
    // Batches and asynchronous sends are numbered too.
    let recs = [
        Record::new("t").partition(1).value(b"a".to_vec()),
        Record::new("t")
            .partition(1)
            .value(b"b".to_vec())
            .sequence(60),
        Record::new("t").partition(1).value(b"c".to_vec()),
    ];
    let borrowed: Vec<_> = recs.iter().map(Record::as_borrowed).collect();
    let mds = p.send_batch(&borrowed).unwrap();
    assert!(mds.iter().all(|m| !m.duplicate));
    assert_eq!(p.next_auto_sequence(), Some(62));
    let (tx, rx) = mpsc::channel();
    p.send_async(
        Record::new("t").partition(0).value(b"z".to_vec()),
        move |r| {
            tx.send(r.map(|m| m.duplicate)).unwrap();
        },
    )
    .unwrap();
    p.flush().unwrap();
    assert!(!rx.recv().unwrap().unwrap());
    assert_eq!(p.last_sequence().unwrap(), Some(62));
}

/// Numbers reach each partition in order whatever the threads do: a lower
/// one arriving after a higher one would be dropped as a duplicate.
#[test]
fn concurrent_numbered_sends_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mq = open(dir.path());
    let p = Arc::new(mq.producer(auto(0)).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                for i in 0..300 {
                    let r = Record::new("t").partition(0).value(vec![t, i as u8]);
                    if i % 3 == 0 {
                        let (tx, rx) = mpsc::channel();
                        p.send_async(r, move |res| tx.send(res.unwrap().duplicate).unwrap())
                            .unwrap();
                        p.flush().unwrap();
                        assert!(!rx.recv().unwrap());
                    } else {
                        assert!(!p.send(r).unwrap().duplicate);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(p.stats().duplicates, 0);
    assert_eq!(common::read_partition(&mq, "t", 0).unwrap().len(), 1200);
    assert_eq!(p.last_sequence().unwrap(), Some(1199));
}

// ------------------------------------------------- several processes

/// Not a test on its own: the child processes of the tests below.
#[test]
#[ignore = "run as a child process by the tests of this file"]
fn child() {
    let Some(env) = ChildEnv::get() else {
        return;
    };
    let mq = Broker::open(&env.data, shared()).unwrap();
    let mode: Mode = env.arg.parse().unwrap();
    match env.role.as_str() {
        // Opens producer "x" in the mode given, says so, and waits to be
        // stopped or killed.
        "hold" => {
            let p = mq.producer(named("x", mode)).unwrap();
            p.send(Record::new("t").partition(0).value(b"c".to_vec()))
                .unwrap();
            env.ready();
            let t = Instant::now();
            while !env.stopping() && t.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(5));
            }
            p.send(Record::new("t").partition(0).value(b"c".to_vec()))
                .unwrap();
        }
        other => panic!("unknown role {other}"),
    }
}

fn prepare(dirs: &Dirs) {
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    mq.close().unwrap();
}

#[test]
fn exclusivity_holds_across_processes_and_ends_with_the_holder() {
    let dirs = Dirs::new();
    prepare(&dirs);
    let mut kid = spawn("hold", "holder", &dirs, "exclusive");
    kid.wait_ready(Duration::from_secs(60));
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    busy(mq.producer(named("x", Mode::Exclusive)));
    busy(mq.producer(named("x", Mode::Shared)));
    busy(mq.producer(named("x", Mode::ExclusiveWithFencing)));
    assert!(matches!(
        mq.producer(named("x", Mode::WaitForExclusive).max_block_ms(100)),
        Err(Error::Timeout(_))
    ));
    // A waiter gets the name once the holder's process is killed: the
    // kernel lets go of its lock.
    let mq = Arc::new(mq);
    let mq2 = Arc::clone(&mq);
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let p = mq2
            .producer(named("x", Mode::WaitForExclusive).max_block_ms(60_000))
            .unwrap();
        tx.send(()).unwrap();
        p
    });
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    assert!(kid.exited().is_none(), "{}", kid.output());
    kid.kill9();
    rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let p = waiter.join().unwrap();
    p.send(Record::new("t").partition(0).value(b"p".to_vec()))
        .unwrap();
    busy(mq.producer(named("x", Mode::Exclusive)));
}

#[test]
fn shared_producers_in_two_processes_do_not_fence_each_other() {
    let dirs = Dirs::new();
    prepare(&dirs);
    let mut kid = spawn("hold", "sharer", &dirs, "shared");
    kid.wait_ready(Duration::from_secs(60));
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let p = mq.producer(named("x", Mode::Shared)).unwrap();
    busy(mq.producer(named("x", Mode::Exclusive)));
    p.send(Record::new("t").partition(0).value(b"p".to_vec()))
        .unwrap();
    shared_mode_procs::request_stop(&dirs.work);
    let status = kid.wait_for(Duration::from_secs(60)).unwrap();
    assert!(status.success(), "{}", kid.output());
    p.send(Record::new("t").partition(0).value(b"p".to_vec()))
        .unwrap();
    drop(p);
    mq.producer(named("x", Mode::Exclusive)).unwrap();
}

/// A delivery callback that sends on the same numbering producer, on the
/// thread that holds the numbering lock: numbered without waiting for the
/// lock (no deadlock), after the record whose callback it is.
#[test]
fn a_callback_sending_on_its_numbering_producer_neither_blocks_nor_reuses() {
    let dir = tempfile::tempdir().unwrap();
    let mq = open(dir.path());
    let p = Arc::new(mq.producer(auto(0)).unwrap());
    let (tx, rx) = mpsc::channel();
    for _ in 0..20 {
        let weak = Arc::downgrade(&p);
        let tx = tx.clone();
        p.send_async(
            Record::new("t").partition(0).value(b"a".to_vec()),
            move |r| {
                let outer = r.unwrap();
                let p = weak.upgrade().unwrap();
                let inner = p
                    .send(Record::new("t").partition(0).value(b"b".to_vec()))
                    .unwrap();
                tx.send((outer.duplicate, inner.duplicate)).unwrap();
            },
        )
        .unwrap();
    }
    p.flush().unwrap();
    for _ in 0..20 {
        let (a, b) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(!a && !b);
    }
    assert_eq!(p.stats().duplicates, 0);
    assert_eq!(common::read_partition(&mq, "t", 0).unwrap().len(), 40);
    assert_eq!(p.last_sequence().unwrap(), Some(39));
}
