//! Share consumers: members of a share group take disjoint messages from
//! any partition, acknowledge each, get back what was released or whose
//! lock ran out, and dead-letter what was delivered too often or rejected.
//! The state survives closing and reopening.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::cfg;
use mqlite::{
    dead_letters, Acks, Broker, ConsumerConfig, Error, OpenMode, ProducerConfig, Record,
    ShareBacklog, ShareConsumer, ShareConsumerConfig, ShareMessage, TopicConfig,
};

fn produce(mq: &Broker, topic: &str, partitions: u32, n: u64) {
    match mq.create_topic(topic, TopicConfig::new(partitions)) {
        Ok(()) | Err(Error::TopicExists(_)) => {}
        Err(e) => panic!("{e}"),
    }
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..n {
        p.send(
            Record::new(topic)
                .partition((i % u64::from(partitions)) as u32)
                .value(i.to_string()),
        )
        .unwrap();
    }
}

fn share(mq: &Broker, config: ShareConsumerConfig, topic: &str) -> ShareConsumer {
    let mut c = mq.share_consumer(config).unwrap();
    c.subscribe(&[topic]).unwrap();
    c
}

fn value(m: &ShareMessage) -> u64 {
    std::str::from_utf8(m.value().unwrap())
        .unwrap()
        .parse()
        .unwrap()
}

/// Polls until `n` messages came or `within` passed.
fn poll_n(c: &mut ShareConsumer, n: usize, within: Duration) -> Vec<ShareMessage> {
    let end = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < end {
        got.extend(c.poll(Duration::from_millis(50)).unwrap());
    }
    got
}

/// One partition of small segments whose records retention deletes at
/// once by time, unless a group has not done with them.
fn kept_for_groups() -> TopicConfig {
    TopicConfig::new(1)
        .segment_bytes(4096)
        .retention_ms(1)
        .retention_respects_groups(true)
}

/// One partition of small segments, at most two of them kept.
fn capped_at_two_segments() -> TopicConfig {
    let mut config = TopicConfig::new(1).segment_bytes(4096);
    config.retention_bytes = Some(8192);
    config
}

/// Every message of a topic read by a plain consumer.
fn read_all(mq: &Broker, topic: &str) -> Vec<mqlite::Message> {
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.subscribe(&[topic]).unwrap();
    let mut out = Vec::new();
    loop {
        let got = c.poll(Duration::from_millis(200)).unwrap();
        if got.is_empty() {
            return out;
        }
        out.extend(got);
    }
}

fn header(m: &mqlite::Message, name: &str) -> String {
    let h = m.headers().into_iter().find(|h| h.key == name).unwrap();
    String::from_utf8(h.value).unwrap()
}

#[test]
fn members_take_disjoint_messages_and_acked_ones_never_come_back() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "jobs", 3, 300);
    let config = ShareConsumerConfig::group("workers").max_poll_records(7);
    let mut a = share(&mq, config.clone(), "jobs");
    let mut b = share(&mq, config, "jobs");
    let mut seen = HashSet::new();
    let mut by_member = [0usize; 2];
    let end = Instant::now() + Duration::from_secs(20);
    while seen.len() < 300 && Instant::now() < end {
        for (i, c) in [&mut a, &mut b].into_iter().enumerate() {
            let got = c.poll(Duration::from_millis(20)).unwrap();
            for m in &got {
                assert_eq!(m.delivery_count(), 1);
                assert!(seen.insert(value(m)), "{} delivered twice", value(m));
            }
            by_member[i] += got.len();
            c.ack(&got).unwrap();
        }
    }
    assert_eq!(seen.len(), 300);
    assert!(by_member.iter().all(|n| *n > 0), "{by_member:?}");
    assert!(a.poll(Duration::from_millis(100)).unwrap().is_empty());
    assert!(b.poll(Duration::from_millis(100)).unwrap().is_empty());
    assert_eq!(a.stats().acked + b.stats().acked, 300);
    // New messages keep coming to the group.
    produce(&mq, "jobs", 3, 3);
    let got = poll_n(&mut a, 3, Duration::from_secs(5));
    assert_eq!(got.len(), 3);
}

#[test]
fn a_message_whose_lock_runs_out_is_delivered_again_and_late_settling_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "t", 1, 5);
    let config = ShareConsumerConfig::group("g").lock_duration_ms(300);
    let mut a = share(&mq, config.clone(), "t");
    let mut b = share(&mq, config, "t");
    let first = poll_n(&mut a, 5, Duration::from_secs(5));
    assert_eq!(first.len(), 5);
    first[0].ack().unwrap();
    // Acknowledged twice: refused.
    assert!(matches!(first[0].ack(), Err(Error::InvalidRecordState(_))));
    // The rest is locked to `a` for now.
    assert!(b.poll(Duration::from_millis(50)).unwrap().is_empty());
    std::thread::sleep(Duration::from_millis(400));
    let again = poll_n(&mut b, 4, Duration::from_secs(5));
    let mut offsets: Vec<u64> = again.iter().map(|m| m.offset()).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, vec![1, 2, 3, 4]);
    assert!(again.iter().all(|m| m.delivery_count() == 2));
    // `a`'s deliveries ran out: its acknowledgement is refused, and
    // changes nothing (all or nothing, the valid one included).
    let err = a.ack(&first[1..]).unwrap_err();
    assert!(matches!(err, Error::InvalidRecordState(_)), "{err}");
    b.ack(&again).unwrap();
    assert!(a.poll(Duration::from_millis(100)).unwrap().is_empty());
    assert!(b.stats().expired >= 4 || a.stats().expired >= 4);
}

#[test]
fn a_renewed_lock_holds_past_its_first_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "t", 1, 1);
    let config = ShareConsumerConfig::group("g").lock_duration_ms(300);
    let mut a = share(&mq, config.clone(), "t");
    let mut b = share(&mq, config, "t");
    let m = poll_n(&mut a, 1, Duration::from_secs(5)).remove(0);
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(150));
        m.renew().unwrap();
    }
    assert!(b.poll(Duration::from_millis(50)).unwrap().is_empty());
    m.ack().unwrap();
}

#[test]
fn a_released_message_comes_back_after_its_delay_without_holding_back_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "t", 1, 3);
    let mut c = share(
        &mq,
        ShareConsumerConfig::group("g").max_poll_records(1),
        "t",
    );
    let m0 = poll_n(&mut c, 1, Duration::from_secs(5)).remove(0);
    assert_eq!(m0.offset(), 0);
    let released_at = Instant::now();
    m0.release(Duration::from_millis(500)).unwrap();
    // The messages behind it come meanwhile.
    let next = poll_n(&mut c, 2, Duration::from_secs(5));
    assert_eq!(
        next.iter().map(|m| m.offset()).collect::<Vec<_>>(),
        vec![1, 2]
    );
    c.ack(&next).unwrap();
    let back = poll_n(&mut c, 1, Duration::from_secs(5));
    assert!(released_at.elapsed() >= Duration::from_millis(500));
    assert_eq!(back[0].offset(), 0);
    assert_eq!(back[0].delivery_count(), 2);
    // Released without a delay: at once.
    back[0].release(Duration::ZERO).unwrap();
    let third = poll_n(&mut c, 1, Duration::from_secs(5));
    assert_eq!(third[0].delivery_count(), 3);
    third[0].ack().unwrap();
    assert_eq!(c.stats().released, 2);
}

#[test]
fn a_message_delivered_max_deliveries_times_goes_to_the_dead_letter_topic_once() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "orders", 1, 2);
    let mut c = share(
        &mq,
        ShareConsumerConfig::group("g").max_deliveries(2),
        "orders",
    );
    for delivery in 1..=2 {
        let got = poll_n(&mut c, 2, Duration::from_secs(5));
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|m| m.delivery_count() == delivery));
        // The first is acknowledged on its second delivery; the second
        // always fails.
        if delivery == 2 {
            got[0].ack().unwrap();
        } else {
            got[0].release(Duration::ZERO).unwrap();
        }
        got[1].release(Duration::ZERO).unwrap();
    }
    assert!(c.poll(Duration::from_millis(200)).unwrap().is_empty());
    assert_eq!(c.stats().dead_lettered, 1);
    let dlq = mqlite::default_dead_letter_topic("orders", "g");
    assert_eq!(dlq, "orders.g.dlq");
    let dead = read_all(&mq, &dlq);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].value(), Some(&b"1"[..]));
    assert_eq!(header(&dead[0], dead_letters::TOPIC_HEADER), "orders");
    assert_eq!(header(&dead[0], dead_letters::PARTITION_HEADER), "0");
    assert_eq!(header(&dead[0], dead_letters::OFFSET_HEADER), "1");
    assert_eq!(header(&dead[0], dead_letters::DELIVERIES_HEADER), "2");
}

#[test]
fn a_rejected_message_goes_to_the_configured_dead_letter_topic_with_its_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "t", 2, 4);
    let mut c = share(
        &mq,
        ShareConsumerConfig::group("g").dead_letter_topic("bad"),
        "t",
    );
    let got = poll_n(&mut c, 4, Duration::from_secs(5));
    let (bad, good): (Vec<_>, Vec<_>) = got.into_iter().partition(|m| value(m) % 2 == 1);
    c.reject(&bad, "cannot parse").unwrap();
    c.ack(&good).unwrap();
    assert!(matches!(bad[0].ack(), Err(Error::InvalidRecordState(_))));
    assert!(c.poll(Duration::from_millis(200)).unwrap().is_empty());
    let dead = read_all(&mq, "bad");
    let mut values: Vec<_> = dead.iter().map(|m| m.value().unwrap().to_vec()).collect();
    values.sort();
    assert_eq!(values, vec![b"1".to_vec(), b"3".to_vec()]);
    assert!(dead
        .iter()
        .all(|m| header(m, dead_letters::REASON_HEADER) == "cannot parse"));
    assert_eq!(c.stats().rejected, 2);
    assert_eq!(c.stats().dead_lettered, 2);
}

#[test]
fn state_survives_reopening_and_a_delivery_before_a_crash_counts() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        produce(&mq, "t", 2, 20);
        let mut c = share(
            &mq,
            ShareConsumerConfig::group("g").commit_acks(Acks::One),
            "t",
        );
        let got = poll_n(&mut c, 20, Duration::from_secs(5));
        assert_eq!(got.len(), 20);
        // Acknowledged out of order: every third.
        let acked: Vec<_> = got
            .iter()
            .filter(|m| value(m).is_multiple_of(3))
            .cloned()
            .collect();
        c.ack(&acked).unwrap();
        // The rest was delivered once: closing writes nothing more, so the
        // store says what a crash here would leave.
        drop(got);
        drop(c);
        drop(mq);
    }
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut c = share(&mq, ShareConsumerConfig::group("g"), "t");
    let got = poll_n(&mut c, 13, Duration::from_secs(5));
    let mut values: Vec<u64> = got.iter().map(value).collect();
    values.sort_unstable();
    let want: Vec<u64> = (0..20).filter(|v| v % 3 != 0).collect();
    assert_eq!(values, want);
    assert!(got.iter().all(|m| m.delivery_count() == 2));
    c.ack(&got).unwrap();
    assert!(c.poll(Duration::from_millis(100)).unwrap().is_empty());
}

#[test]
fn a_member_that_leaves_gives_its_messages_back() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "t", 1, 4);
    let config = ShareConsumerConfig::group("g");
    let mut a = share(&mq, config.clone(), "t");
    let mut b = share(&mq, config, "t");
    let held = poll_n(&mut a, 4, Duration::from_secs(5));
    assert_eq!(held.len(), 4);
    a.close();
    assert!(matches!(a.poll(Duration::ZERO), Err(Error::Closed(_))));
    assert!(matches!(held[0].ack(), Err(Error::InvalidRecordState(_))));
    let got = poll_n(&mut b, 4, Duration::from_secs(5));
    assert_eq!(got.len(), 4);
    b.ack(&got).unwrap();
}

#[test]
fn a_full_window_stops_reading_a_partition_until_messages_are_settled() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "t", 1, 50);
    let mut c = share(&mq, ShareConsumerConfig::group("g").max_in_flight(10), "t");
    let first = poll_n(&mut c, 10, Duration::from_secs(5));
    assert_eq!(first.len(), 10);
    assert!(c.poll(Duration::from_millis(100)).unwrap().is_empty());
    assert!(c.stats().window_full > 0);
    assert_eq!(c.backlog().unwrap().in_flight, 10);
    // Acknowledging the head opens the window by as much.
    c.ack(&first[..5]).unwrap();
    let more = poll_n(&mut c, 5, Duration::from_secs(5));
    assert_eq!(
        more.iter().map(|m| m.offset()).collect::<Vec<_>>(),
        (10..15).collect::<Vec<_>>()
    );
    // Acknowledging behind the head does not: the head is still held.
    c.ack(&more).unwrap();
    assert!(c.poll(Duration::from_millis(100)).unwrap().is_empty());
    c.ack(&first[5..]).unwrap();
    let mut rest = 0;
    let end = Instant::now() + Duration::from_secs(10);
    while rest < 35 && Instant::now() < end {
        let got = c.poll(Duration::from_millis(50)).unwrap();
        assert!(got.len() <= 10);
        rest += got.len();
        c.ack(&got).unwrap();
    }
    assert_eq!(rest, 35);
}

#[test]
fn members_in_one_process_must_agree_on_group_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let _a = mq
        .share_consumer(ShareConsumerConfig::group("g").max_deliveries(3))
        .unwrap();
    let err = mq
        .share_consumer(ShareConsumerConfig::group("g").max_deliveries(4))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // A consumer group of the same name is another thing.
    let mut cg = mq.consumer(ConsumerConfig::group("g")).unwrap();
    cg.subscribe(&["t"]).unwrap();
    for bad in [
        ShareConsumerConfig::group("no/slash"),
        ShareConsumerConfig::group("g2").lock_duration_ms(0),
        ShareConsumerConfig::group("g2").max_in_flight(0),
        ShareConsumerConfig::group("g2").max_poll_records(0),
        ShareConsumerConfig::group("g2").dead_letter_topic("bad topic"),
    ] {
        assert!(mq.share_consumer(bad).is_err());
    }
}

#[test]
fn a_long_history_of_acknowledgements_is_compacted_and_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 30_000u64;
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        produce(&mq, "t", 1, n);
        let mut c = share(
            &mq,
            ShareConsumerConfig::group("g")
                .commit_acks(Acks::One)
                .max_poll_records(100),
            "t",
        );
        let mut acked = 0u64;
        // One by one, in reverse order within each poll: every
        // acknowledgement is its own record.
        while acked < n - 10 {
            let got = c.poll(Duration::from_millis(100)).unwrap();
            for m in got.iter().rev() {
                if value(m) < n - 10 {
                    m.ack().unwrap();
                    acked += 1;
                }
            }
        }
        // Rewritten at least once: its generation (bytes 8..16) moved on.
        let state = std::fs::read(tmp.path().join("groups/g.share")).unwrap();
        let generation = u64::from_le_bytes(state[8..16].try_into().unwrap());
        assert!(generation >= 2, "never rewritten ({} bytes)", state.len());
    }
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut c = share(&mq, ShareConsumerConfig::group("g"), "t");
    let got = poll_n(&mut c, 10, Duration::from_secs(5));
    let values: HashSet<u64> = got.iter().map(value).collect();
    assert_eq!(values, ((n - 10)..n).collect());
    assert!(c.poll(Duration::from_millis(100)).unwrap().is_empty());
}

#[test]
fn many_members_on_many_threads_deliver_each_message_once() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "t", 4, 4000);
    let counts = std::sync::Mutex::new(HashMap::<u64, u32>::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            let mq = &mq;
            let counts = &counts;
            s.spawn(move || {
                let mut c = share(
                    mq,
                    ShareConsumerConfig::group("g")
                        .commit_acks(Acks::One)
                        .max_poll_records(50),
                    "t",
                );
                let mut idle = 0;
                while idle < 10 {
                    let got = c.poll(Duration::from_millis(50)).unwrap();
                    if got.is_empty() {
                        idle += 1;
                        continue;
                    }
                    idle = 0;
                    let mut counts = counts.lock().unwrap();
                    for m in &got {
                        *counts.entry(value(m)).or_default() += 1;
                    }
                    drop(counts);
                    c.ack(&got).unwrap();
                }
            });
        }
    });
    let counts = counts.into_inner().unwrap();
    assert_eq!(counts.len(), 4000);
    assert!(counts.values().all(|c| *c == 1));
}

#[test]
fn a_closed_broker_refuses_share_calls_and_held_messages_do_not_keep_the_group() {
    // In shared mode too: the process lives on (and its messages are
    // still referenced), yet the group gets them back at the close.
    for config in [cfg(), cfg().mode(OpenMode::Shared)] {
        let tmp = tempfile::tempdir().unwrap();
        let mq = Broker::open(tmp.path(), config.clone()).unwrap();
        produce(&mq, "t", 1, 2);
        let mut c = share(&mq, ShareConsumerConfig::group("g"), "t");
        let got = poll_n(&mut c, 2, Duration::from_secs(5));
        mq.close().unwrap();
        assert!(matches!(c.poll(Duration::ZERO), Err(Error::Closed(_))));
        assert!(matches!(got[0].ack(), Err(Error::Closed(_))));
        drop(c);
        // The messages are still referenced; the group is not.
        let mq = Broker::open(tmp.path(), config).unwrap();
        let mut c = share(&mq, ShareConsumerConfig::group("g"), "t");
        let again = poll_n(&mut c, 2, Duration::from_secs(5));
        assert_eq!(again.len(), 2);
        assert!(again.iter().all(|m| m.delivery_count() == 2));
        assert!(matches!(got[1].ack(), Err(Error::Closed(_))));
        c.ack(&again).unwrap();
    }
}

#[test]
fn the_backlog_counts_waiting_locked_and_delayed_messages() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "t", 2, 10);
    let mut c = share(
        &mq,
        ShareConsumerConfig::group("g").max_poll_records(4),
        "t",
    );
    let b = c.backlog().unwrap();
    assert_eq!((b.available, b.in_flight, b.delayed), (10, 0, 0));
    let got = poll_n(&mut c, 4, Duration::from_secs(5));
    assert_eq!(got.len(), 4);
    let b = c.backlog().unwrap();
    assert_eq!((b.available, b.in_flight, b.delayed), (6, 4, 0));
    got[0].release(Duration::from_secs(60)).unwrap();
    got[1].release(Duration::ZERO).unwrap();
    c.ack(&got[2..]).unwrap();
    let b = c.backlog().unwrap();
    assert_eq!((b.available, b.in_flight, b.delayed), (7, 0, 1));
}

#[test]
fn dead_letters_made_out_of_offset_order_are_all_written() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "t", 1, 6);
    let mut c = share(&mq, ShareConsumerConfig::group("g"), "t");
    let got = poll_n(&mut c, 6, Duration::from_secs(5));
    // Rejected from the last to the first: each dead letter's sequence
    // (its source offset) is lower than the one before.
    for m in got.iter().rev() {
        m.reject("no").unwrap();
    }
    let dead = read_all(&mq, &mqlite::default_dead_letter_topic("t", "g"));
    let mut values: Vec<u64> = dead
        .iter()
        .map(|m| {
            std::str::from_utf8(m.value().unwrap())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    values.sort_unstable();
    assert_eq!(values, (0..6).collect::<Vec<_>>());
}

#[test]
fn a_share_group_of_one_topic_does_not_hold_back_retention_of_another() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "a", 1, 1);
    mq.create_topic("b", kept_for_groups()).unwrap();
    // The group is open (on `a`) before `b` gets its records, and the
    // floors are taken in then: the retention of `b`'s rolls follows them.
    let mut c = share(&mq, ShareConsumerConfig::group("g"), "a");
    assert_eq!(poll_n(&mut c, 1, Duration::from_secs(5)).len(), 1);
    mq.enforce_retention().unwrap();
    produce(&mq, "b", 1, 500);
    std::thread::sleep(Duration::from_millis(20));
    mq.enforce_retention().unwrap();
    let info = mq.topic("b").unwrap();
    assert!(info.partitions[0].start_offset > 0, "{info:?}");
}

#[test]
fn a_share_group_holds_back_the_retention_of_rolls_from_its_first_read() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("jobs", kept_for_groups()).unwrap();
    produce(&mq, "jobs", 1, 1);
    let mut c = share(&mq, ShareConsumerConfig::group("g"), "jobs");
    let first = poll_n(&mut c, 1, Duration::from_secs(5));
    assert_eq!(first.len(), 1);
    // No retention pass in between: only the rolls' own retention runs,
    // with the floor the group's first read set.
    std::thread::sleep(Duration::from_millis(5));
    produce(&mq, "jobs", 1, 500);
    assert_eq!(mq.topic("jobs").unwrap().partitions[0].start_offset, 0);
    let rest = poll_n(&mut c, 500, Duration::from_secs(10));
    let mut values: Vec<u64> = rest.iter().map(value).collect();
    values.sort_unstable();
    assert_eq!(values, (0..500).collect::<Vec<_>>());
    c.ack(&first).unwrap();
    c.ack(&rest).unwrap();
}

#[test]
fn a_share_group_opened_again_holds_back_what_it_had_not_done_with() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("jobs", kept_for_groups()).unwrap();
        produce(&mq, "jobs", 1, 3);
        let mut c = share(&mq, ShareConsumerConfig::group("g"), "jobs");
        let got = poll_n(&mut c, 3, Duration::from_secs(5));
        assert_eq!(got.len(), 3);
        c.ack(&got[..1]).unwrap();
    }
    // Reopened: the group is not open when the broker starts; opening it
    // brings its floor back before the rolls that follow.
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let mut c = share(&mq, ShareConsumerConfig::group("g"), "jobs");
    std::thread::sleep(Duration::from_millis(5));
    produce(&mq, "jobs", 1, 500);
    assert!(mq.topic("jobs").unwrap().partitions[0].start_offset <= 1);
    let got = poll_n(&mut c, 502, Duration::from_secs(10));
    assert_eq!(got.len(), 502);
}

/// Retention (by size) deleted records the group had not read, more than a
/// window's worth: reading goes on from the log's start, the deleted ones
/// counted as skipped (a gap as wide as the window must not stall the
/// partition).
#[test]
fn a_gap_wider_than_the_window_left_by_retention_is_passed() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    let config = capped_at_two_segments();
    mq.create_topic("t", config).unwrap();
    produce(&mq, "t", 1, 5);
    let mut c = share(&mq, ShareConsumerConfig::group("g").max_in_flight(10), "t");
    let first = poll_n(&mut c, 5, Duration::from_secs(5));
    assert_eq!(first.len(), 5);
    c.ack(&first).unwrap();
    produce(&mq, "t", 1, 2000);
    mq.enforce_retention().unwrap();
    let start = mq.topic("t").unwrap().partitions[0].start_offset;
    assert!(start > 100, "retention ran: start {start}");
    let mut got = 0;
    let end = Instant::now() + Duration::from_secs(20);
    while got < 2005 - start && Instant::now() < end {
        let ms = c.poll(Duration::from_millis(50)).unwrap();
        got += ms.len() as u64;
        c.ack(&ms).unwrap();
    }
    assert_eq!(got, 2005 - start, "every record retention kept");
    assert!(c.stats().skipped > 0);
}

/// A record released with a delay, then deleted by retention before it was
/// due: the group forgets it and goes on.
#[test]
fn a_released_record_that_retention_deleted_is_forgotten() {
    let tmp = tempfile::tempdir().unwrap();
    let config = capped_at_two_segments();
    {
        let mq = Broker::open(tmp.path(), cfg()).unwrap();
        mq.create_topic("t", config).unwrap();
        produce(&mq, "t", 1, 1);
        let mut c = share(&mq, ShareConsumerConfig::group("g").max_in_flight(10), "t");
        let first = poll_n(&mut c, 1, Duration::from_secs(5));
        first[0].release(Duration::from_secs(3600)).unwrap();
    }
    // Reopened: the release is known from the state file only.
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    produce(&mq, "t", 1, 2000);
    mq.enforce_retention().unwrap();
    let start = mq.topic("t").unwrap().partitions[0].start_offset;
    assert!(start > 100, "retention ran: start {start}");
    let mut c = share(&mq, ShareConsumerConfig::group("g").max_in_flight(10), "t");
    let mut got = 0;
    let end = Instant::now() + Duration::from_secs(20);
    while got < 2001 - start && Instant::now() < end {
        let ms = c.poll(Duration::from_millis(50)).unwrap();
        got += ms.len() as u64;
        c.ack(&ms).unwrap();
    }
    assert_eq!(got, 2001 - start);
    assert_eq!(c.backlog().unwrap(), ShareBacklog::default());
}
