//! Producer behaviour: send modes, ordering, batching and the memory bound,
//! partitioners, interceptors, stats.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{cfg, read_partition};
use mqlite::{
    Acks, BorrowedRecord, Broker, Error, Partitioner, ProducerConfig, ProducerInterceptor, Record,
    RecordMetadata, TopicConfig,
};

fn setup(partitions: u32) -> (tempfile::TempDir, Broker) {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(partitions)).unwrap();
    (tmp, mq)
}

type Reports = Arc<Mutex<Vec<(String, mqlite::Result<RecordMetadata>)>>>;

fn collector() -> Reports {
    Arc::new(Mutex::new(Vec::new()))
}

fn send_tagged(p: &mqlite::Producer, reports: &Reports, tag: String, record: Record) {
    let r = Arc::clone(reports);
    p.send_async(record, move |res| r.lock().unwrap().push((tag, res)))
        .unwrap();
}

/// Every async send is reported once, in send order per partition, with the
/// offset the record really has.
#[test]
fn async_sends_report_in_order_with_true_offsets() {
    for linger in [0, 5] {
        let (_tmp, mq) = setup(3);
        let p = mq
            .producer(ProducerConfig::default().linger_ms(linger).batch_size(2048))
            .unwrap();
        let reports = collector();
        std::thread::scope(|s| {
            for t in 0..3 {
                let (p, reports) = (&p, &reports);
                s.spawn(move || {
                    for i in 0..500 {
                        let tag = format!("{t}-{i}");
                        let rec = Record::new("t")
                            .key(format!("k{}", (t * 7 + i) % 11))
                            .value(tag.clone());
                        send_tagged(p, reports, tag, rec);
                    }
                });
            }
        });
        p.flush().unwrap();
        let reports = reports.lock().unwrap();
        assert_eq!(reports.len(), 1500, "one report per record");
        let mut last = [None::<u64>; 3];
        let parts: Vec<_> = (0..3)
            .map(|p| read_partition(&mq, "t", p).unwrap())
            .collect();
        for (tag, res) in reports.iter() {
            let md = res.as_ref().unwrap();
            let part = md.partition as usize;
            assert!(last[part].is_none_or(|l| md.offset > l), "order in {part}");
            last[part] = Some(md.offset);
            let msgs = &parts[part];
            assert_eq!(
                msgs[md.offset as usize].value.as_deref(),
                Some(tag.as_bytes())
            );
        }
    }
}

#[test]
fn linger_and_batch_size_shape_batches() {
    let (_tmp, mq) = setup(1);
    let p = mq
        .producer(ProducerConfig::default().linger_ms(200).batch_size(1 << 20))
        .unwrap();
    let n = Arc::new(AtomicU64::new(0));
    for i in 0..10 {
        let n = Arc::clone(&n);
        p.send_async(Record::new("t").value(format!("v{i}")), move |r| {
            r.unwrap();
            n.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    assert_eq!(n.load(Ordering::SeqCst), 0, "still lingering");
    assert_eq!(mq.topic("t").unwrap().partitions[0].end_offset, 0);
    assert!(p.buffered_bytes() > 0);
    assert_eq!(p.buffered_bytes(), p.stats().buffered_bytes);
    p.flush().unwrap();
    assert_eq!(p.buffered_bytes(), 0);
    assert_eq!(n.load(Ordering::SeqCst), 10);
    let st = p.stats();
    assert_eq!((st.records, st.batches), (10, 1), "{st:?}");
    assert!((st.average_batch_records() - 10.0).abs() < 1e-9);
    assert_eq!(st.buffered_bytes, 0);

    // Linger expiry alone sends a batch (the background thread).
    let p2 = mq
        .producer(ProducerConfig::default().linger_ms(20))
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    p2.send_async(Record::new("t").value("late"), move |r| {
        tx.send(r.unwrap().offset).unwrap();
    })
    .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 10);

    // batch_size closes batches early.
    let p3 = mq
        .producer(ProducerConfig::default().linger_ms(10_000).batch_size(300))
        .unwrap();
    for _ in 0..100 {
        p3.send_async(Record::new("t").value([7u8; 50]), |r| {
            r.unwrap();
        })
        .unwrap();
    }
    p3.flush().unwrap();
    let st = p3.stats();
    assert_eq!(st.records, 100);
    assert!((15..=25).contains(&st.batches), "{st:?}");
}

#[test]
fn acks_zero_is_fire_and_forget() {
    let (_tmp, mq) = setup(1);
    let p = mq
        .producer(ProducerConfig::default().acks(Acks::Zero).linger_ms(10_000))
        .unwrap();
    let md = p.send(Record::new("t").value("x")).unwrap();
    assert_eq!(md.known_offset(), None);
    assert_eq!(mq.topic("t").unwrap().partitions[0].end_offset, 0);
    p.flush().unwrap();
    assert_eq!(mq.topic("t").unwrap().partitions[0].end_offset, 1);
    // A record refused before it is queued counts as one error.
    assert!(p.send(Record::new("t").partition(3).value("x")).is_err());
    assert_eq!(p.stats().errors, 1);
}

/// `acks=all` async sends share flushes: far fewer flushes than records.
#[test]
fn async_acks_all_share_flushes() {
    let (_tmp, mq) = setup(1);
    let p = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    let done = Arc::new(AtomicU64::new(0));
    for i in 0..2000 {
        let done = Arc::clone(&done);
        p.send_async(Record::new("t").value(format!("{i}")), move |r| {
            r.unwrap();
            done.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    p.flush().unwrap();
    assert_eq!(done.load(Ordering::SeqCst), 2000);
    let flushes = mq.topic("t").unwrap().partitions[0].flushes;
    assert!((1..500).contains(&flushes), "{flushes} flushes");
}

/// However fast records come, the bytes held stay under `buffer_memory`.
#[test]
fn buffer_memory_bounds_what_is_held() {
    let (_tmp, mq) = setup(2);
    let limit = 64 * 1024;
    let p = mq
        .producer(
            ProducerConfig::default()
                .acks(Acks::All)
                .linger_ms(5)
                .buffer_memory(limit),
        )
        .unwrap();
    let done = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        for t in 0..2 {
            let (p, done) = (&p, &done);
            s.spawn(move || {
                for i in 0..5000 {
                    let done = Arc::clone(done);
                    p.send_async(
                        Record::new("t").partition(t).value(vec![i as u8; 200]),
                        move |r| {
                            r.unwrap();
                            done.fetch_add(1, Ordering::SeqCst);
                        },
                    )
                    .unwrap();
                }
            });
        }
    });
    p.flush().unwrap();
    assert_eq!(done.load(Ordering::SeqCst), 10_000);
    let st = p.stats();
    assert!(st.peak_buffered_bytes <= limit as u64, "{st:?}");
    assert!(st.peak_buffered_bytes > 0);
}

/// When the buffer stays full for `max_block_ms`, the send fails with
/// `BufferFull` and the producer stays usable.
#[test]
fn a_full_buffer_times_out() {
    let (_tmp, mq) = setup(1);
    let p = mq
        .producer(
            ProducerConfig::default()
                .acks(Acks::All)
                .buffer_memory(1000)
                .max_block_ms(50),
        )
        .unwrap();
    // The first delivery callback holds the background thread, so flushed
    // batches are not released while it runs.
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    p.send_async(Record::new("t").value([1u8; 100]), move |r| {
        r.unwrap();
        started_tx.send(()).unwrap();
        let _ = hold_rx.recv_timeout(Duration::from_secs(10));
    })
    .unwrap();
    started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let mut full = None;
    for _ in 0..100 {
        match p.send_async(Record::new("t").value([2u8; 100]), |_| {}) {
            Ok(()) => {}
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    match full {
        Some(e @ Error::BufferFull { .. }) => assert_eq!(e.code(), 401),
        other => panic!("expected BufferFull, got {other:?}"),
    }
    hold_tx.send(()).unwrap();
    p.flush().unwrap();
    p.send(Record::new("t").value("after")).unwrap();
}

#[test]
fn custom_selector_and_its_errors() {
    let (_tmp, mq) = setup(4);
    let p = mq
        .producer(
            ProducerConfig::default().partitioner(Partitioner::custom(|r, n| {
                assert_eq!(n, 4);
                r.value.map_or(0, |v| v.len() as u32 % n)
            })),
        )
        .unwrap();
    for len in 0..8usize {
        let md = p.send(Record::new("t").value(vec![0u8; len])).unwrap();
        assert_eq!(md.partition, len as u32 % 4);
    }
    // An explicit partition wins; the selector also sees keyed records.
    assert_eq!(
        p.send(Record::new("t").partition(3).value(""))
            .unwrap()
            .partition,
        3
    );
    assert_eq!(
        p.send(Record::new("t").key("k").value("ab"))
            .unwrap()
            .partition,
        2
    );

    let bad = mq
        .producer(ProducerConfig::default().partitioner(Partitioner::custom(|_, n| n)))
        .unwrap();
    assert!(matches!(
        bad.send(Record::new("t").value("x")),
        Err(Error::UnknownPartition { partition: 4, .. })
    ));
    let panicky = mq
        .producer(ProducerConfig::default().partitioner(Partitioner::custom(|_, _| panic!("no"))))
        .unwrap();
    assert!(matches!(
        panicky.send(Record::new("t").value("x")),
        Err(Error::InvalidArgument(_))
    ));
    assert!("bogus".parse::<Partitioner>().is_err());
    assert!(matches!(
        "round_robin".parse::<Partitioner>(),
        Ok(Partitioner::RoundRobin)
    ));
}

#[derive(Default)]
struct Counting {
    acks: AtomicU64,
    errors: AtomicU64,
}

impl ProducerInterceptor for Counting {
    fn on_send(&self, record: &Record) -> Result<Option<Record>, String> {
        let mut r = record.clone();
        let mut v = b"seen:".to_vec();
        v.extend(r.value.unwrap_or_default());
        r.value = Some(v);
        Ok(Some(r))
    }

    fn on_acknowledgement(&self, result: Result<&RecordMetadata, &Error>) {
        match result {
            Ok(_) => self.acks.fetch_add(1, Ordering::SeqCst),
            Err(_) => self.errors.fetch_add(1, Ordering::SeqCst),
        };
    }
}

struct Failing;

impl ProducerInterceptor for Failing {
    fn on_send(&self, _: &Record) -> Result<Option<Record>, String> {
        Err("nope".into())
    }
}

struct Panicking;

impl ProducerInterceptor for Panicking {
    fn on_send(&self, _: &Record) -> Result<Option<Record>, String> {
        panic!("interceptor bug")
    }
    fn on_acknowledgement(&self, _: Result<&RecordMetadata, &Error>) {
        panic!("interceptor bug")
    }
}

#[test]
fn interceptors_change_records_and_failures_are_skipped() {
    let (_tmp, mq) = setup(1);
    let counting = Arc::new(Counting::default());
    let p = mq
        .producer(
            ProducerConfig::default()
                .interceptor(Arc::new(Failing))
                .interceptor(Arc::new(Panicking))
                .interceptor(counting.clone()),
        )
        .unwrap();
    p.send(Record::new("t").value("a")).unwrap();
    p.send_async(Record::new("t").value("b"), |r| {
        r.unwrap();
    })
    .unwrap();
    p.send_batch(&[BorrowedRecord {
        topic: "t",
        value: Some(b"c"),
        ..Default::default()
    }])
    .unwrap();
    assert!(p.send(Record::new("nope").value("x")).is_err());
    p.flush().unwrap();
    let values: Vec<_> = read_partition(&mq, "t", 0)
        .unwrap()
        .into_iter()
        .map(|m| m.value.unwrap())
        .collect();
    assert_eq!(
        values,
        [b"seen:a".to_vec(), b"seen:b".to_vec(), b"seen:c".to_vec()]
    );
    assert_eq!(counting.acks.load(Ordering::SeqCst), 3);
    assert_eq!(counting.errors.load(Ordering::SeqCst), 1);
    // The failed send is counted once, with interceptors as without.
    assert_eq!(p.stats().errors, 1);
    assert_eq!(p.stats().records, 3);
}

#[test]
fn stats_count_records_batches_and_errors() {
    let (_tmp, mq) = setup(2);
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..10 {
        p.send(Record::new("t").partition(i % 2).value("0123456789"))
            .unwrap();
    }
    let recs: Vec<BorrowedRecord<'_>> = (0..100)
        .map(|i| BorrowedRecord {
            topic: "t",
            partition: Some(i % 2),
            value: Some(b"x"),
            ..Default::default()
        })
        .collect();
    let mds = p.send_batch(&recs).unwrap();
    assert_eq!(mds.len(), 100);
    assert!(p.send(Record::new("t").partition(9).value("x")).is_err());
    let st = p.stats();
    assert_eq!(st.records, 110);
    assert_eq!(st.batches, 12, "10 single sends, one batch per partition");
    assert_eq!(st.errors, 1);
    assert!(st.bytes > 110);
    // send_batch metadata: in input order, consecutive per partition.
    for (i, md) in mds.iter().enumerate() {
        assert_eq!(md.partition, i as u32 % 2);
        assert_eq!(md.offset, 5 + i as u64 / 2);
    }
}

/// Concurrent senders: each sender's records keep their order within a
/// partition.
#[test]
fn order_per_partition_under_concurrent_senders() {
    let (_tmp, mq) = setup(2);
    let p = mq.producer(ProducerConfig::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let p = &p;
            s.spawn(move || {
                for i in 0..2000u32 {
                    let rec = Record::new("t")
                        .partition(i % 2)
                        .value([t.to_le_bytes(), i.to_le_bytes()].concat());
                    p.send(rec).unwrap();
                }
            });
        }
    });
    for part in 0..2 {
        let mut last = [None::<u32>; 4];
        let msgs = read_partition(&mq, "t", part).unwrap();
        assert_eq!(msgs.len(), 4000);
        for m in msgs {
            let v = m.value.unwrap();
            let t = u32::from_le_bytes(v[..4].try_into().unwrap()) as usize;
            let i = u32::from_le_bytes(v[4..].try_into().unwrap());
            assert!(last[t].is_none_or(|l| i > l));
            last[t] = Some(i);
        }
    }
}

#[test]
fn closed_producers_refuse_sends() {
    let (_tmp, mq) = setup(1);
    let p = mq
        .producer(ProducerConfig::default().linger_ms(10_000))
        .unwrap();
    p.send_async(Record::new("t").value("pending"), |r| {
        r.unwrap();
    })
    .unwrap();
    p.close().unwrap();
    assert_eq!(
        mq.topic("t").unwrap().partitions[0].end_offset,
        1,
        "close flushed"
    );
    assert!(p.is_closed());
    assert!(matches!(
        p.send(Record::new("t").value("x")),
        Err(Error::Closed(_))
    ));
    assert!(matches!(
        p.send_async(Record::new("t").value("x"), |_| {}),
        Err(Error::Closed(_))
    ));
    p.close().unwrap();
}

#[test]
fn invalid_producer_settings_and_records() {
    let (_tmp, mq) = setup(1);
    for bad in [
        ProducerConfig::default().buffer_memory(0),
        ProducerConfig::default().dedup_window(0),
        ProducerConfig::default().name("a/b"),
        ProducerConfig::default().name(""),
        ProducerConfig::default().name("x").idempotent(false),
    ] {
        assert!(
            matches!(mq.producer(bad.clone()), Err(Error::InvalidArgument(_))),
            "{bad:?}"
        );
    }
    let plain = mq
        .producer(ProducerConfig::default().idempotent(false))
        .unwrap();
    assert_eq!(plain.producer_id(), -1);
    assert!(matches!(
        plain.send(Record::new("t").value("x").sequence(1)),
        Err(Error::InvalidArgument(_))
    ));
    let p = mq.producer(ProducerConfig::default()).unwrap();
    assert!(p.producer_id() >= 0);
    assert!(matches!(
        p.send(Record::new("t").value("x").sequence(-1)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        p.send_async(Record::new("t").value(vec![0u8; 2 << 20]), |_| {}),
        Err(Error::MessageTooLarge { .. })
    ));
    assert!(matches!(
        p.send_async(Record::new("missing").value("x"), |_| {}),
        Err(Error::UnknownTopic(_))
    ));
    assert_eq!(mq.topic("t").unwrap().partitions[0].end_offset, 0);
    p.send(Record::new("t").value("still usable")).unwrap();
}

#[test]
fn a_topic_can_stamp_log_append_time() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    mq.create_topic("t", TopicConfig::new(1).log_append_time(true))
        .unwrap();
    mq.create_topic("c", TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let md = p.send(Record::new("t").value("a").timestamp(1000)).unwrap();
    assert!(md.timestamp >= before, "{} < {before}", md.timestamp);
    let mds = p
        .send_batch(&[
            BorrowedRecord {
                topic: "t",
                timestamp: Some(5),
                ..Default::default()
            },
            BorrowedRecord {
                topic: "t",
                timestamp: Some(7),
                ..Default::default()
            },
        ])
        .unwrap();
    assert_eq!(mds[0].timestamp, mds[1].timestamp);
    let msgs = read_partition(&mq, "t", 0).unwrap();
    assert_eq!(msgs[0].timestamp, md.timestamp);
    assert_eq!(msgs[1].timestamp, mds[0].timestamp);
    assert_eq!(mq.offset_for_timestamp("t", 0, before).unwrap(), Some(0));
    // A create-time topic keeps the producer's timestamps.
    assert_eq!(
        p.send(Record::new("c").value("a").timestamp(1000))
            .unwrap()
            .timestamp,
        1000
    );
    assert_eq!(read_partition(&mq, "c", 0).unwrap()[0].timestamp, 1000);
    drop(p);
    drop(mq);
    let mq = Broker::open(tmp.path(), cfg()).unwrap();
    assert!(mq.topic("t").unwrap().config.log_append_time, "persisted");
}

/// A blocking send right after asynchronous sends that are still lingering
/// lands after them: the background thread appending the lingering batch
/// must not let the blocking send overtake it (tests/stress.rs found that
/// it could, when the pending count dropped before the batch was written).
#[test]
fn a_blocking_send_never_overtakes_a_lingering_batch() {
    let (_tmp, mq) = setup(1);
    let p = mq
        .producer(
            ProducerConfig::default()
                .linger_ms(1)
                .compression(mqlite::Compression::Lz4),
        )
        .unwrap();
    let started = std::time::Instant::now();
    let mut n = 0u64;
    let mut round = 0u64;
    while started.elapsed() < Duration::from_secs(3) {
        for _ in 0..40 {
            p.send_async(
                Record::new("t")
                    .partition(0)
                    .value(n.to_be_bytes().to_vec()),
                |r| {
                    r.unwrap();
                },
            )
            .unwrap();
            n += 1;
        }
        // Around the linger time, so the background thread is often busy
        // appending the batch when the blocking send comes.
        std::thread::sleep(Duration::from_micros((round * 97) % 2100));
        round += 1;
        p.send(
            Record::new("t")
                .partition(0)
                .value(n.to_be_bytes().to_vec()),
        )
        .unwrap();
        n += 1;
    }
    p.flush().unwrap();
    let values: Vec<u64> = read_partition(&mq, "t", 0)
        .unwrap()
        .iter()
        .map(|m| u64::from_be_bytes(m.value.as_deref().unwrap().try_into().unwrap()))
        .collect();
    assert_eq!(values.len() as u64, n);
    let inversions = values.windows(2).filter(|w| w[1] < w[0]).count();
    assert_eq!(inversions, 0, "records out of send order in {round} rounds");
}

/// Each thread keeps the partitions of the last topic it sent to: a topic
/// deleted and created again (with more partitions) by another thread is
/// looked up again, and the old one's partitions are not written.
#[test]
fn a_topic_replaced_by_another_thread_is_looked_up_again() {
    let (_tmp, mq) = setup(1);
    let producer = mq.producer(ProducerConfig::default()).unwrap();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let producer = &producer;
        s.spawn(move || {
            producer.send(Record::new("t").value("old")).unwrap();
            done.send(()).unwrap();
            wait.recv().unwrap();
            let md = producer
                .send(Record::new("t").partition(2).value("new"))
                .unwrap();
            assert_eq!((md.partition, md.offset), (2, 0));
            done.send(()).unwrap();
        });
        finished.recv().unwrap();
        mq.delete_topic("t").unwrap();
        mq.create_topic("t", TopicConfig::new(3)).unwrap();
        go.send(()).unwrap();
        finished.recv().unwrap();
    });
    let info = mq.topic("t").unwrap();
    let ends: Vec<u64> = info.partitions.iter().map(|p| p.end_offset).collect();
    assert_eq!(ends, vec![0, 0, 1]);
}

/// A send made from inside another send on the same thread (here from a
/// partition selector, to another topic) finds its own topic and leaves the
/// outer send's topic to it.
#[test]
fn a_send_inside_a_send_routes_both() {
    let (_tmp, mq) = setup(2);
    mq.create_topic("audit", TopicConfig::new(1)).unwrap();
    let audit = Arc::new(mq.producer(ProducerConfig::default()).unwrap());
    let inner = Arc::clone(&audit);
    let producer = mq
        .producer(
            ProducerConfig::default().partitioner(Partitioner::custom(move |r, n| {
                inner
                    .send(Record::new("audit").value(r.value.unwrap_or_default().to_vec()))
                    .unwrap();
                n - 1
            })),
        )
        .unwrap();
    for i in 0..5 {
        let md = producer
            .send(Record::new("t").value(format!("v{i}")))
            .unwrap();
        assert_eq!((md.partition, md.offset), (1, i));
        let md = audit
            .send(Record::new("t").partition(0).value("a"))
            .unwrap();
        assert_eq!((md.partition, md.offset), (0, i));
    }
    assert_eq!(mq.topic("audit").unwrap().partitions[0].end_offset, 5);
}

/// `queued()` counts asynchronous records until their callback ran: in an
/// open batch, waiting for the flush of `acks=all`, and during the
/// callback itself; synchronous sends never count.
#[test]
fn queued_counts_async_records_until_their_callbacks_ran() {
    let (_tmp, mq) = setup(2);
    let p = Arc::new(
        mq.producer(ProducerConfig::default().linger_ms(60_000))
            .unwrap(),
    );
    assert_eq!(p.queued(), 0);
    let seen = Arc::new(Mutex::new(Vec::new()));
    for i in 0..10 {
        let (seen, me) = (Arc::clone(&seen), Arc::downgrade(&p));
        let rec = Record::new("t").partition(0).value(format!("v{i}"));
        p.send_async(rec, move |r| {
            r.unwrap();
            let q = me.upgrade().map(|p| p.queued());
            seen.lock().unwrap().push(q);
        })
        .unwrap();
        assert_eq!(p.queued(), i + 1);
    }
    // A synchronous send to the other partition neither counts nor drains.
    p.send(Record::new("t").partition(1).value("sync")).unwrap();
    assert_eq!(p.queued(), 10);
    p.flush().unwrap();
    assert_eq!(p.queued(), 0);
    let seen: Vec<Option<usize>> = seen.lock().unwrap().clone();
    // Each callback still counts itself and those after it.
    assert_eq!(seen, (1..=10).rev().map(Some).collect::<Vec<_>>());

    // acks=all: a flush that times out leaves them counted; a full flush
    // delivers them.
    let p = mq
        .producer(ProducerConfig::default().acks(Acks::All).linger_ms(60_000))
        .unwrap();
    let delivered = Arc::new(AtomicU64::new(0));
    for _ in 0..50 {
        let delivered = Arc::clone(&delivered);
        p.send_async(Record::new("t").value([1u8; 100]), move |r| {
            r.unwrap();
            delivered.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    assert_eq!(p.queued(), 50);
    assert!(matches!(
        p.flush_timeout(Duration::ZERO),
        Err(Error::Timeout(0))
    ));
    assert_eq!(
        p.queued() as u64 + delivered.load(Ordering::SeqCst),
        50,
        "each record is queued or delivered"
    );
    p.flush().unwrap();
    assert_eq!((p.queued(), delivered.load(Ordering::SeqCst)), (0, 50));

    // A duplicate (by sequence) is reported too, and counted until then; a
    // refused send is not counted.
    let p = mq.producer(ProducerConfig::default()).unwrap();
    p.send(Record::new("t").partition(0).sequence(0).value("s0"))
        .unwrap();
    let dup = Arc::new(Mutex::new(None));
    let d = Arc::clone(&dup);
    p.send_async(
        Record::new("t").partition(0).sequence(0).value("s0"),
        move |r| *d.lock().unwrap() = Some(r.unwrap().duplicate),
    )
    .unwrap();
    p.flush().unwrap();
    assert_eq!((*dup.lock().unwrap(), p.queued()), (Some(true), 0));
    assert!(p
        .send_async(Record::new("nope").value("x"), |_| {})
        .is_err());
    assert_eq!(p.queued(), 0);
}

/// `send_batch` with records whose topics take turns, named by the same
/// `&str` and by equal strings elsewhere in memory: each record lands in
/// its own topic, in order.
#[test]
fn send_batch_keeps_each_record_in_its_topic_when_topics_take_turns() {
    let (_tmp, mq) = setup(1);
    mq.create_topic("u", TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let u_elsewhere = String::from("u");
    let values: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i]).collect();
    let topics = ["t", "t", "u", u_elsewhere.as_str(), "t", "u"];
    let records: Vec<BorrowedRecord<'_>> = topics
        .iter()
        .zip(&values)
        .map(|(&topic, v)| BorrowedRecord {
            topic,
            partition: None,
            key: None,
            value: Some(v),
            headers: &[],
            timestamp: None,
            sequence: None,
        })
        .collect();
    let mds = p.send_batch(&records).unwrap();
    for (md, topic) in mds.iter().zip(topics) {
        assert_eq!(&*md.topic, topic);
    }
    let values_in = |topic: &str| -> Vec<u8> {
        read_partition(&mq, topic, 0)
            .unwrap()
            .iter()
            .map(|m| m.value.as_ref().unwrap()[0])
            .collect()
    };
    assert_eq!(values_in("t"), [0, 1, 4]);
    assert_eq!(values_in("u"), [2, 3, 5]);
}
