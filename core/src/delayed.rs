//! Delayed delivery: a record sent with a delivery time
//! ([`Record::deliver_at`](crate::Record::deliver_at),
//! [`Record::delay`](crate::Record::delay), or the header
//! [`DELIVER_AT_HEADER`] from any language) reaches its topic, and so
//! consumers of every kind, when it is due.
//!
//! As RocketMQ's scheduled messages (and its 5.x timer), a delayed record
//! is first written to the internal topic [`TOPIC`] (`__delayed`), with
//! headers naming its destination. A mover, a background thread of the
//! broker, consumes `__delayed` as the share group `__delay-mover`: a
//! record not due yet is released until its time (the share group keeps
//! it, durably, and its poll wakes when the earliest is due); a due record
//! is sent to its topic (with `acks=all`, by the named producer
//! `delay-mover.<p>` of its `__delayed` partition, the `__delayed` offset
//! as its sequence, so that moving it again after a crash writes it once)
//! and then acknowledged. A record whose topic or partition no longer
//! exists is rejected to `__delayed.dlq`.
//!
//! Time retention of `__delayed` (one hour after a record was moved) never
//! deletes what the mover has not moved: the topic respects groups, and
//! its floor is the mover's first offset not done (nothing is deleted
//! while no mover runs in the process). In shared mode, one process moves
//! at a time (the share group's lock); the others take over if it exits.
//!
//! Limits: at most [`MAX_WAITING`] delayed records past the first one not
//! moved are read ahead; a record sent without an explicit partition is
//! placed by the default partitioner when it is moved; the record's offset
//! is the one it gets when moved (its metadata at send time is that of its
//! `__delayed` copy).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::broker::BrokerInner;
use crate::consumer::ConsumerWaker;
use crate::error::{Error, Result};
use crate::log::batch::Header;
use crate::producer::{Acks, BorrowedRecord, Producer, ProducerConfig, Record};
use crate::share_group::{ShareConsumer, ShareConsumerConfig, ShareMessage};
use crate::shared::LiveLock;
use crate::sync::lock;
use crate::topic::TopicConfig;

/// The header holding a record's delivery time: milliseconds since the
/// epoch, in decimal.
pub const DELIVER_AT_HEADER: &str = "mqlite.deliver_at";
/// The internal topic delayed records wait in.
pub const TOPIC: &str = "__delayed";
/// On a waiting record: the topic it goes to.
pub const TARGET_TOPIC_HEADER: &str = "mqlite.delayed.topic";
/// On a waiting record: the partition it goes to (decimal), if one was
/// given.
pub const TARGET_PARTITION_HEADER: &str = "mqlite.delayed.partition";
/// Where records whose topic is gone when they are due go.
pub const DEAD_LETTER_TOPIC: &str = "__delayed.dlq";
/// The mover's share group.
pub const MOVER_GROUP: &str = "__delay-mover";
/// Most delayed records read ahead of the first one not moved.
pub const MAX_WAITING: u32 = 1_000_000;

/// Time retention of moved records in [`TOPIC`].
const RETENTION_MS: u64 = 3_600_000;

/// The header that asks for delivery at `ms_since_epoch`.
pub fn deliver_at_header(ms_since_epoch: i64) -> Header {
    Header::new(DELIVER_AT_HEADER, ms_since_epoch.to_string().into_bytes())
}

/// The delivery time of a record to be delivered once `delay` has passed
/// (ms since the epoch, rounded up: the clock reads whole milliseconds).
pub fn due_in(delay: Duration) -> i64 {
    let ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    crate::clock::now_ms().saturating_add(ms).saturating_add(1)
}

/// The delivery time a record's header asks for, if it has one.
///
/// # Errors
/// [`Error::InvalidArgument`] for a header that is not a decimal number.
fn deliver_at(headers: &[Header]) -> Result<Option<i64>> {
    let Some(h) = headers.iter().find(|h| h.key == DELIVER_AT_HEADER) else {
        return Ok(None);
    };
    std::str::from_utf8(&h.value)
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .map(Some)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "header {DELIVER_AT_HEADER} must be a time in ms since the epoch, in decimal"
            ))
        })
}

/// The record to write instead of `r` when `r` asks for a delivery time
/// still to come: its copy in [`TOPIC`], naming its destination. `None`
/// when it is to be sent as it is. Starts the mover if it does not run.
///
/// # Errors
/// An invalid delivery-time header; an unknown destination topic (unless
/// topics are created automatically) or partition; errors creating
/// [`TOPIC`].
pub(crate) fn redirect(
    broker: &Arc<BrokerInner>,
    r: &BorrowedRecord<'_>,
) -> Result<Option<Record>> {
    if r.headers.is_empty() || r.topic == TOPIC {
        return Ok(None);
    }
    let Some(at) = deliver_at(r.headers)? else {
        return Ok(None);
    };
    if at <= crate::clock::now_ms() {
        return Ok(None);
    }
    match broker.partition_count(r.topic) {
        Some(n) => {
            if let Some(p) = r.partition.filter(|p| *p >= n) {
                return Err(Error::UnknownPartition {
                    topic: r.topic.to_owned(),
                    partition: p,
                    count: n,
                });
            }
        }
        None if broker.auto_creates() => {}
        None => return Err(Error::UnknownTopic(r.topic.to_owned())),
    }
    ensure_topic(broker)?;
    start_mover(broker);
    let mut headers = r.headers.to_vec();
    headers.push(Header::new(
        TARGET_TOPIC_HEADER,
        r.topic.as_bytes().to_vec(),
    ));
    if let Some(p) = r.partition {
        headers.push(Header::new(
            TARGET_PARTITION_HEADER,
            p.to_string().into_bytes(),
        ));
    }
    Ok(Some(Record {
        topic: TOPIC.to_owned(),
        partition: None,
        key: r.key.map(<[u8]>::to_vec),
        value: r.value.map(<[u8]>::to_vec),
        headers,
        timestamp: r.timestamp,
        sequence: r.sequence,
    }))
}

/// Creates [`TOPIC`] if it does not exist.
fn ensure_topic(broker: &Arc<BrokerInner>) -> Result<()> {
    if broker.partition_count(TOPIC).is_some() {
        return Ok(());
    }
    let config = TopicConfig::new(1)
        .retention_ms(RETENTION_MS)
        .retention_respects_groups(true);
    match broker.create_topic(TOPIC, config) {
        Ok(()) | Err(Error::TopicExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The mover of a broker: its thread, and how to stop it.
#[derive(Debug, Default)]
pub(crate) struct MoverSlot {
    running: Mutex<Option<Mover>>,
}

#[derive(Debug)]
struct Mover {
    handle: JoinHandle<()>,
    stop: Arc<AtomicBool>,
    waker: Arc<Mutex<Option<ConsumerWaker>>>,
}

impl MoverSlot {
    /// Stops the mover (at the broker's close) and waits for its thread.
    pub(crate) fn stop(&self) {
        let Some(m) = lock(&self.running).take() else {
            return;
        };
        m.stop.store(true, Ordering::Release);
        if let Some(w) = &*lock(&m.waker) {
            w.wakeup();
        }
        if m.handle.thread().id() != std::thread::current().id() {
            let _ = m.handle.join();
        }
    }
}

/// Starts the broker's mover unless it runs (or the broker is read-only or
/// closed).
pub(crate) fn start_mover(broker: &Arc<BrokerInner>) {
    if broker.is_closed() || broker.check_writable("delayed delivery").is_err() {
        return;
    }
    let mut slot = lock(&broker.mover().running);
    if slot.is_some() {
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let waker = Arc::new(Mutex::new(None));
    let weak = Arc::downgrade(broker);
    let (s, w) = (Arc::clone(&stop), Arc::clone(&waker));
    let handle = std::thread::Builder::new()
        .name("mqlite-delayed".into())
        .spawn(move || run(&weak, &s, &w));
    match handle {
        Ok(handle) => {
            *slot = Some(Mover {
                handle,
                stop,
                waker,
            });
        }
        Err(e) => ::log::error!("delayed delivery: cannot start the mover thread: {e}"),
    }
}

/// The mover's thread: takes the mover group (waiting while another
/// process has it), then moves due records until stopped.
fn run(broker: &Weak<BrokerInner>, stop: &AtomicBool, waker: &Mutex<Option<ConsumerWaker>>) {
    let stopped = || stop.load(Ordering::Acquire);
    while !stopped() {
        let Some(b) = broker.upgrade().filter(|b| !b.is_closed()) else {
            return;
        };
        match Moving::open(&b) {
            Ok(mut m) => {
                *lock(waker) = Some(m.consumer.waker());
                drop(b);
                while !stopped() {
                    if let Err(e) = m.step() {
                        if matches!(e, Error::Closed(_)) {
                            return;
                        }
                        ::log::warn!("delayed delivery: {e}");
                        pause(stop, Duration::from_millis(500));
                    }
                }
                return;
            }
            // Another process moves; take over if it exits.
            Err(Error::Locked { .. }) => {}
            Err(e) => ::log::warn!("delayed delivery: starting the mover: {e}"),
        }
        drop(b);
        pause(stop, Duration::from_secs(2));
    }
}

/// Sleeps for `d`, or less if stopped.
fn pause(stop: &AtomicBool, d: Duration) {
    let end = std::time::Instant::now() + d;
    while !stop.load(Ordering::Acquire) && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The mover at work.
struct Moving {
    /// The mover's lock (one mover per data directory).
    _held: LiveLock,
    broker: Arc<BrokerInner>,
    consumer: ShareConsumer,
    /// Named producers by `__delayed` partition.
    producers: std::collections::HashMap<u32, Producer>,
}

impl Moving {
    fn open(broker: &Arc<BrokerInner>) -> Result<Moving> {
        // One mover for the data directory: other processes of a shared
        // directory may use the mover's share group, only one moves.
        let gdir = broker.dir().join("groups");
        crate::private_dir::create_dir_all(&gdir, broker.file_mode())?;
        let lock_path = gdir.join(format!("{MOVER_GROUP}.mover.lock"));
        let Some(held) = LiveLock::try_hold(&lock_path, broker.file_mode())? else {
            return Err(Error::Locked {
                path: lock_path,
                holder: "the delayed records' mover of another process".into(),
            });
        };
        let config = ShareConsumerConfig::group(MOVER_GROUP)
            .max_deliveries(0)
            .max_in_flight(MAX_WAITING)
            .lock_duration_ms(60_000)
            .max_poll_records(1000)
            .dead_letter_topic(DEAD_LETTER_TOPIC)
            .commit_acks(Acks::One);
        let mut consumer = ShareConsumer::new(Arc::clone(broker), config)?;
        consumer.subscribe(&[TOPIC])?;
        Ok(Moving {
            _held: held,
            broker: Arc::clone(broker),
            consumer,
            producers: std::collections::HashMap::new(),
        })
    }

    /// One poll: releases what is not due until it is, moves what is.
    fn step(&mut self) -> Result<()> {
        let got = self.consumer.poll(Duration::from_millis(200))?;
        if got.is_empty() {
            return Ok(());
        }
        let now = crate::clock::now_ms();
        let mut due: std::collections::HashMap<u32, Vec<(i64, ShareMessage)>> =
            std::collections::HashMap::new();
        for m in got {
            match deliver_at(&m.headers()) {
                Ok(Some(at)) if at > now => {
                    // Moved once the wall clock reaches `at`.
                    m.release_until(at)?;
                }
                at => {
                    let at = at.ok().flatten().unwrap_or(i64::MIN);
                    due.entry(m.partition()).or_default().push((at, m));
                }
            }
        }
        for (p, mut msgs) in due {
            // In the order of their delivery times, then of sending.
            msgs.sort_by_key(|(at, m)| (*at, m.offset()));
            let msgs: Vec<ShareMessage> = msgs.into_iter().map(|(_, m)| m).collect();
            self.move_due(p, &msgs)?;
        }
        self.broker.refresh_retention_floors(TOPIC);
        Ok(())
    }

    /// Sends due records of `__delayed` partition `p` to their topics, then
    /// acknowledges them; those whose destination is gone are rejected.
    fn move_due(&mut self, p: u32, msgs: &[ShareMessage]) -> Result<()> {
        let mut records = Vec::with_capacity(msgs.len());
        let mut sent = Vec::with_capacity(msgs.len());
        let mut gone = Vec::new();
        for m in msgs {
            let headers = m.headers();
            let target = headers
                .iter()
                .find(|h| h.key == TARGET_TOPIC_HEADER)
                .and_then(|h| String::from_utf8(h.value.clone()).ok());
            let partition = headers
                .iter()
                .find(|h| h.key == TARGET_PARTITION_HEADER)
                .and_then(|h| std::str::from_utf8(&h.value).ok()?.parse::<u32>().ok());
            let Some(target) = target
                .filter(|t| self.broker.partition_count(t).is_some() || self.broker.auto_creates())
            else {
                gone.push(m.clone());
                continue;
            };
            if partition
                .is_some_and(|q| self.broker.partition_count(&target).is_some_and(|n| q >= n))
            {
                gone.push(m.clone());
                continue;
            }
            let mut r = Record::new(target)
                .timestamp(m.timestamp())
                .sequence(i64::try_from(m.offset()).unwrap_or(i64::MAX));
            r.partition = partition;
            r.key = m.key().map(<[u8]>::to_vec);
            r.value = m.value().map(<[u8]>::to_vec);
            r.headers = headers
                .into_iter()
                .filter(|h| h.key != TARGET_TOPIC_HEADER && h.key != TARGET_PARTITION_HEADER)
                .collect();
            records.push(r);
            sent.push(m.clone());
        }
        if !gone.is_empty() {
            self.consumer
                .reject(&gone, "the destination topic or partition no longer exists")?;
        }
        if records.is_empty() {
            return Ok(());
        }
        let producer = self.producer(p)?;
        let borrowed: Vec<BorrowedRecord<'_>> = records.iter().map(Record::as_borrowed).collect();
        match producer.send_batch(&borrowed) {
            Ok(_) => self.consumer.ack(&sent),
            Err(e) => {
                // Moved again later; what was written is a duplicate then.
                self.producers.remove(&p);
                self.consumer.release(&sent, Duration::from_secs(1))?;
                Err(e)
            }
        }
    }

    fn producer(&mut self, p: u32) -> Result<&Producer> {
        if !self.producers.contains_key(&p) {
            let producer = Producer::sparse(
                Arc::clone(&self.broker),
                ProducerConfig::default()
                    .name(format!("delay-mover.{p}"))
                    .acks(Acks::All),
            )?;
            self.producers.insert(p, producer);
        }
        self.producers
            .get(&p)
            .ok_or(Error::Closed("delayed delivery producer"))
    }
}
