//! The processor: orderly and concurrent handling on worker threads, and
//! commits that never pass a message not yet processed.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::cfg;
use mqlite::{
    Broker, ConsumerConfig, Error, ProcessingMode, Processor, ProcessorConfig, ProducerConfig,
    RebalanceContext, RebalanceListener, Record, TopicConfig,
};

fn setup(partitions: u32, per_partition: u64) -> (tempfile::TempDir, Broker) {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(partitions)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..per_partition {
        for part in 0..partitions {
            p.send(
                Record::new("t")
                    .partition(part)
                    .value(i.to_le_bytes().to_vec()),
            )
            .unwrap();
        }
    }
    (tmp, mq)
}

fn processor(mq: &Broker, mode: ProcessingMode) -> Processor {
    let mut c = mq
        .consumer(
            ConsumerConfig::group("g")
                .enable_auto_commit(false)
                .max_poll_records(64),
        )
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    Processor::new(
        c,
        ProcessorConfig {
            threads: 3,
            mode,
            commit_interval_ms: 5,
            max_in_flight: 100,
            retry_backoff_ms: 5,
            ..ProcessorConfig::default()
        },
    )
    .unwrap()
}

fn committed(mq: &Broker, partition: u32) -> u64 {
    mq.describe_group("g")
        .unwrap()
        .committed
        .iter()
        .find(|(t, p, _)| t == "t" && *p == partition)
        .map_or(0, |(_, _, c)| c.offset)
}

#[test]
fn orderly_keeps_each_partition_in_order() {
    let (_tmp, mq) = setup(4, 300);
    let mut proc = processor(&mq, ProcessingMode::Orderly);
    let stop = proc.stopper();
    let seen: Mutex<HashMap<u32, Vec<u64>>> = Mutex::new(HashMap::new());
    let count = AtomicU64::new(0);
    let stats = proc
        .run(|m| {
            seen.lock()
                .unwrap()
                .entry(m.partition())
                .or_default()
                .push(m.offset());
            if count.fetch_add(1, Ordering::SeqCst) + 1 == 1200 {
                stop.stop();
            }
            true
        })
        .unwrap();
    assert_eq!(stats.processed, 1200);
    for (p, offsets) in seen.into_inner().unwrap() {
        assert_eq!(offsets, (0..300).collect::<Vec<_>>(), "partition {p}");
    }
    for p in 0..4 {
        assert_eq!(committed(&mq, p), 300);
    }
}

/// A message that keeps failing holds the committed offset of its
/// partition back, while the others go on; once it succeeds, everything is
/// committed.
#[test]
fn concurrent_commits_stop_at_the_first_unprocessed_message() {
    let (_tmp, mq) = setup(2, 200);
    let mut proc = processor(&mq, ProcessingMode::Concurrently);
    let stop = proc.stopper();
    let failures = AtomicU64::new(0);
    let released = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let max_seen_while_stuck = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !released.load(Ordering::SeqCst) {
                let c = committed(&mq, 0);
                max_seen_while_stuck.fetch_max(c, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let stats = proc
            .run(|m| {
                if m.partition() == 0 && m.offset() == 50 {
                    // Fail until everything else of the partition is done.
                    if failures.fetch_add(1, Ordering::SeqCst) < 20 {
                        return false;
                    }
                    released.store(true, Ordering::SeqCst);
                }
                if done.fetch_add(1, Ordering::SeqCst) + 1 == 400 {
                    stop.stop();
                }
                true
            })
            .unwrap();
        assert_eq!(stats.processed, 400);
        assert!(stats.retries >= 20);
    });
    let stuck = max_seen_while_stuck.load(Ordering::SeqCst);
    assert!(stuck > 0, "commits went on while the message was stuck");
    assert!(
        stuck <= 50,
        "committed past a message not yet processed: {}",
        max_seen_while_stuck.load(Ordering::SeqCst)
    );
    assert_eq!(committed(&mq, 0), 200);
    assert_eq!(committed(&mq, 1), 200);
}

#[test]
fn a_processor_needs_a_group() {
    let (_tmp, mq) = setup(1, 1);
    let c = mq.consumer(ConsumerConfig::default()).unwrap();
    assert!(Processor::new(c, ProcessorConfig::default()).is_err());
    assert!("bogus".parse::<ProcessingMode>().is_err());
}

/// `try_new` hands the consumer back with the error, where it was.
#[test]
fn try_new_gives_the_consumer_back_on_error() {
    let (_tmp, mq) = setup(1, 5);
    let mut c = mq.consumer(ConsumerConfig::group("g")).unwrap();
    c.subscribe(&["t"]).unwrap();
    let first = c.poll(Duration::from_secs(1)).unwrap();
    assert!(!first.is_empty());
    let position = c.position("t", 0).unwrap();
    let config = ProcessorConfig {
        threads: 0,
        ..ProcessorConfig::default()
    };
    let (e, mut c) = Processor::try_new(c, config).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert_eq!(c.position("t", 0).unwrap(), position);
    assert_eq!(c.assignment(), vec![("t".to_string(), 0)]);
    // Still a working consumer: it commits and goes on polling.
    c.commit().unwrap();
    let p = Processor::try_new(*c, ProcessorConfig::default()).unwrap();
    let mut c = p.into_consumer();
    assert_eq!(c.position("t", 0).unwrap(), position);
}

/// Stopping while a message keeps failing returns, without committing it.
#[test]
fn stop_gives_up_on_a_failing_message_without_committing_it() {
    let (_tmp, mq) = setup(1, 20);
    let mut proc = processor(&mq, ProcessingMode::Concurrently);
    let stop = proc.stopper();
    let ok = AtomicU64::new(0);
    let stats = proc
        .run(|m| {
            if m.offset() == 7 {
                stop.stop();
                return false;
            }
            ok.fetch_add(1, Ordering::SeqCst);
            true
        })
        .unwrap();
    assert_eq!(stats.failed, 0);
    assert!(committed(&mq, 0) <= 7, "never past the unprocessed message");
}

/// Records the rebalance events a processor passes on to its user.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<String>>>);

impl RebalanceListener for Events {
    fn on_revoke(&mut self, _: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.0
            .lock()
            .unwrap()
            .push(format!("revoke {partitions:?}"));
    }
    fn on_lost(&mut self, _: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.0.lock().unwrap().push(format!("lost {partitions:?}"));
    }
}

/// A handler slower than `max_poll_interval_ms` (with one message in
/// flight the processor stops polling) gets the member expelled: the
/// processor forgets the partition without committing it and passes
/// `on_lost`, not `on_revoke`, to the user's listener.
#[test]
fn an_expelled_processor_passes_on_lost() {
    let (_tmp, mq) = setup(2, 3);
    let config = ConsumerConfig::group("g")
        .enable_auto_commit(false)
        .max_poll_interval_ms(200);
    let mut a = mq.consumer(config.clone()).unwrap();
    let events = Events::default();
    a.subscribe_with(&["t"], Box::new(events.clone())).unwrap();
    let mut b = mq.consumer(config).unwrap();
    b.subscribe(&["t"]).unwrap();
    let mut p = Processor::new(
        a,
        ProcessorConfig {
            threads: 1,
            max_in_flight: 1,
            commit_interval_ms: 5,
            ..ProcessorConfig::default()
        },
    )
    .unwrap();
    let stop = p.stopper();
    let slow_once = AtomicBool::new(true);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // b polls all along: it notices a's silence and takes over.
            let t = std::time::Instant::now();
            while !done.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(20) {
                b.poll(Duration::from_millis(20)).unwrap();
                if events
                    .0
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|e| e.starts_with("lost"))
                {
                    stop.stop();
                }
            }
            stop.stop();
        });
        p.run(|_| {
            if slow_once.swap(false, Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(700));
            }
            true
        })
        .unwrap();
        done.store(true, Ordering::SeqCst);
    });
    let events = events.0.lock().unwrap().clone();
    let lost: Vec<&String> = events.iter().filter(|e| e.starts_with("lost")).collect();
    assert_eq!(lost.len(), 1, "{events:?}");
    // Whatever a held when it was expelled was lost, not revoked.
    let last_revoke = events.iter().rposition(|e| e.starts_with("revoke"));
    let lost_at = events.iter().position(|e| e.starts_with("lost")).unwrap();
    assert!(last_revoke.is_none_or(|r| r < lost_at), "{events:?}");
}

/// `run_batches` hands the handler runs of one partition's messages in
/// offset order; a failure at a message retries from that message, not
/// from the start of its batch.
#[test]
fn batches_are_runs_of_one_partition_retried_from_the_failing_message() {
    for mode in [ProcessingMode::Orderly, ProcessingMode::Concurrently] {
        let (_tmp, mq) = setup(2, 300);
        let mut proc = processor(&mq, mode);
        let stop = proc.stopper();
        let calls: Mutex<HashMap<(u32, u64), u32>> = Mutex::new(HashMap::new());
        let order: Mutex<HashMap<u32, Vec<u64>>> = Mutex::new(HashMap::new());
        let longest = AtomicU64::new(0);
        let failures = AtomicU64::new(0);
        let stats = proc
            .run_batches(|batch| {
                longest.fetch_max(batch.len() as u64, Ordering::SeqCst);
                let p = batch[0].partition();
                for (i, m) in batch.iter().enumerate() {
                    assert_eq!(m.partition(), p, "one partition per batch");
                    assert_eq!(m.offset(), batch[0].offset() + i as u64, "in offset order");
                    *calls.lock().unwrap().entry((p, m.offset())).or_default() += 1;
                    if p == 0 && m.offset() == 10 && failures.fetch_add(1, Ordering::SeqCst) < 2 {
                        return i;
                    }
                    let mut o = order.lock().unwrap();
                    o.entry(p).or_default().push(m.offset());
                    if o.values().map(Vec::len).sum::<usize>() == 600 {
                        stop.stop();
                    }
                }
                batch.len()
            })
            .unwrap();
        assert_eq!(stats.processed, 600, "{mode:?}");
        assert_eq!(stats.retries, 2, "{mode:?}");
        assert!(
            longest.load(Ordering::SeqCst) > 1,
            "{mode:?}: batches, not messages"
        );
        for ((p, o), n) in calls.into_inner().unwrap() {
            let want = if (p, o) == (0, 10) { 3 } else { 1 };
            assert_eq!(n, want, "{mode:?}: {p}/{o} handled {n} times");
        }
        if mode == ProcessingMode::Orderly {
            for (p, offsets) in order.into_inner().unwrap() {
                assert_eq!(offsets, (0..300).collect::<Vec<_>>(), "partition {p}");
            }
        }
        for p in 0..2 {
            assert_eq!(committed(&mq, p), 300, "{mode:?}");
        }
    }
}

/// A processor over `t` in group `g` giving up after `retries` retries,
/// dead-lettering into `dlt`.
fn dead_lettering(mq: &Broker, retries: u32, dlt: &str) -> Processor {
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.assign(&[("t", 0), ("t", 1)]).unwrap();
    Processor::new(
        c,
        ProcessorConfig {
            threads: 2,
            commit_interval_ms: 5,
            retry_backoff_ms: 1,
            ..ProcessorConfig::default()
        }
        .max_retries(retries)
        .dead_letter_topic(dlt),
    )
    .unwrap()
}

/// Every record of `topic`, partition 0, with its headers.
fn dead_letters(mq: &Broker, topic: &str) -> Vec<mqlite::Message> {
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[(topic, 0)]).unwrap();
    let end = mq.topic(topic).unwrap().partitions[0].end_offset;
    let mut out = Vec::new();
    while (out.len() as u64) < end {
        out.extend(c.poll(Duration::from_millis(200)).unwrap());
    }
    out
}

fn header(m: &mqlite::Message, key: &str) -> String {
    let h = m.headers();
    let v = h.iter().find(|h| h.key == key).map(|h| h.value.clone());
    String::from_utf8(v.unwrap_or_default()).unwrap()
}

#[test]
fn a_message_that_keeps_failing_goes_to_the_dead_letter_topic_once() {
    let (_tmp, mq) = setup(2, 20);
    let fails = |m: &mqlite::Message| m.partition() == 1 && m.offset() == 7;
    let mut proc = dead_lettering(&mq, 2, "t.dlq");
    let stop = proc.stopper();
    let calls = AtomicU64::new(0);
    let stats = proc
        .run(|m| {
            if calls.fetch_add(1, Ordering::SeqCst) + 1 >= 40 + 2 {
                stop.stop();
            }
            !fails(m)
        })
        .unwrap();
    assert_eq!(stats.processed, 39);
    assert_eq!(
        (stats.failed, stats.dead_lettered, stats.retries),
        (1, 1, 2)
    );
    // Committed past it: the processor counts it as done.
    assert_eq!(committed(&mq, 1), 20);
    let dl = dead_letters(&mq, "t.dlq");
    assert_eq!(dl.len(), 1);
    let m = &dl[0];
    assert_eq!(m.value().unwrap(), 7u64.to_le_bytes());
    assert_eq!(header(m, mqlite::dead_letters::TOPIC_HEADER), "t");
    assert_eq!(header(m, mqlite::dead_letters::PARTITION_HEADER), "1");
    assert_eq!(header(m, mqlite::dead_letters::OFFSET_HEADER), "7");
    assert_eq!(header(m, mqlite::dead_letters::DELIVERIES_HEADER), "3");
    assert!(header(m, mqlite::dead_letters::REASON_HEADER).contains("3 times"));

    // The source read again from the start (as after a crash before the
    // commit): the message fails again and is dead-lettered again, but
    // the dead-letter topic gets it once.
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.assign(&[("t", 1)]).unwrap();
    c.commit_offsets(&[("t", 1, 0, "")]).unwrap();
    drop(c);
    let mut proc = dead_lettering(&mq, 0, "t.dlq");
    let stop = proc.stopper();
    let calls = AtomicU64::new(0);
    let stats = proc
        .run(|m| {
            if calls.fetch_add(1, Ordering::SeqCst) + 1 >= 20 {
                stop.stop();
            }
            !fails(m)
        })
        .unwrap();
    assert_eq!(stats.dead_lettered, 1);
    assert_eq!(dead_letters(&mq, "t.dlq").len(), 1, "no second copy");
    assert_eq!(committed(&mq, 1), 20);
}

#[test]
fn a_bad_dead_letter_topic_is_refused_and_nothing_is_created() {
    let (_tmp, mq) = setup(1, 1);
    let c = mq.consumer(ConsumerConfig::group("g")).unwrap();
    let err = Processor::try_new(
        c,
        ProcessorConfig::default()
            .max_retries(1)
            .dead_letter_topic("no/such name"),
    )
    .unwrap_err();
    assert!(matches!(err.0, Error::InvalidTopicName { .. }), "{}", err.0);
    assert_eq!(mq.topics().len(), 1);
}
