//! The accumulator (Kafka's `RecordAccumulator`): per-partition batches of
//! asynchronous sends, the memory bound, the background thread that appends
//! lingering batches and flushes `acks=all` ones, and delivery callbacks.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::{interceptor, lock, Acks, DeliveryCallback, Inner, RecordMetadata, IN_CALLBACK};
use crate::error::{Error, Result};
use crate::log::batch::EncodedRecords;
use crate::log::{PartitionLog, UNKNOWN_OFFSET};
use crate::sync;

/// A queued record's delivery report.
pub(crate) struct Pending {
    pub cb: Option<DeliveryCallback>,
    pub timestamp: i64,
}

/// A finished record whose callback is due.
pub(crate) struct Done {
    pub cb: Option<DeliveryCallback>,
    pub result: Result<RecordMetadata>,
}

/// One partition's open batch.
pub(crate) struct PartBatch {
    pub log: Arc<PartitionLog>,
    pub partition: u32,
    pub enc: EncodedRecords,
    pub pending: Vec<Pending>,
    pub created: Instant,
    /// The application's sequence of the first record, if any.
    pub first_seq: Option<i64>,
    /// Bytes counted against `buffer_memory`.
    pub bytes: usize,
    /// Every record may go to another partition after a fault (see
    /// `Inner::movable`).
    pub movable: bool,
}

impl PartBatch {
    pub(crate) fn new(log: Arc<PartitionLog>, partition: u32, first_seq: Option<i64>) -> Self {
        PartBatch {
            log,
            partition,
            enc: EncodedRecords::default(),
            pending: Vec::new(),
            created: Instant::now(),
            first_seq,
            bytes: 0,
            movable: true,
        }
    }
}

/// Appended `acks=all` records waiting for their flush.
pub(crate) struct Durable {
    log: Arc<PartitionLog>,
    target: u64,
    done: Vec<Done>,
    bytes: usize,
    /// When its batch was started (for `delivery_timeout_ms`).
    created: Instant,
}

/// Everything behind the accumulator lock.
#[derive(Default)]
pub(crate) struct AccState {
    /// Open batches by partition (keyed by the log's address).
    pub batches: HashMap<usize, PartBatch>,
    /// Lingering batches in the order they were started: `(created, key)`
    /// (an entry whose batch was appended meanwhile is skipped when its
    /// time comes). The background thread finds the due batches at the
    /// front, without going through every open batch (1,000 open batches
    /// for keys spread over 1,000 partitions).
    pub lingering: VecDeque<(Instant, usize)>,
    /// Bytes held: open batches plus records awaiting their flush.
    pub buffered: usize,
    durable: Vec<Durable>,
    /// Durable items taken by the background thread, not yet done.
    flushing: usize,
    /// Threads waiting on the `space` condition variable.
    pub space_waiters: usize,
    stop: bool,
    sender_started: bool,
}

impl Inner {
    fn release(&self, st: &mut AccState, bytes: usize) {
        st.buffered -= bytes.min(st.buffered);
        self.stats.set_buffered(st.buffered);
        if st.space_waiters > 0 {
            self.space.notify_all();
        }
    }

    /// Whether a record sent at `since` is past its `delivery_timeout_ms`.
    pub(crate) fn expired(&self, since: Instant) -> bool {
        let t = self.config.delivery_timeout_ms;
        t > 0 && since.elapsed() >= Duration::from_millis(t)
    }

    /// Appends the open batch of `log`, if any.
    pub(crate) fn append_pending_of(&self, st: &mut AccState, log: &Arc<PartitionLog>) {
        self.append_pending(st, Arc::as_ptr(log) as usize);
    }

    /// Appends the open batch at `key` and routes its delivery reports.
    pub(crate) fn append_pending(&self, st: &mut AccState, key: usize) {
        let Some(b) = st.batches.remove(&key) else {
            return;
        };
        let n = b.enc.count as usize;
        self.chooser.batch_sent(b.log.topic(), b.partition);
        let topic = Arc::clone(b.log.topic());
        // Without linger a batch is appended as it is started: never late.
        if self.config.linger_ms > 0 && self.expired(b.created) {
            // Never appended once its records were reported timed out.
            self.pending.fetch_sub(n, Ordering::Release);
            self.stats.errors(n as u64);
            let e = Error::Timeout(self.config.delivery_timeout_ms);
            let mut c = lock(&self.completions);
            for p in b.pending {
                c.push_back(Done {
                    cb: p.cb,
                    result: Err(e.duplicate()),
                });
            }
            drop(c);
            self.release(st, b.bytes);
            return;
        }
        let mut log = Arc::clone(&b.log);
        let mut partition = b.partition;
        let res = match self.append_encoded(&b.log, &b.enc, b.first_seq) {
            Err(e) if b.movable && b.first_seq.is_none() => {
                // Key-less records go to another partition.
                match self.broker.topic(&topic) {
                    Ok(t) => {
                        let parts = Arc::new(super::route::TopicLogs::of(t));
                        self.move_after_fault(&parts, b.partition, true, e, |l| {
                            self.append_encoded(l, &b.enc, None)
                        })
                        .and_then(|(a, p)| {
                            partition = p;
                            log = Arc::clone(parts.get(p)?);
                            Ok(a)
                        })
                    }
                    Err(_) => Err(e),
                }
            }
            r => r,
        };
        // Only now (still under the accumulator lock): a blocking send that
        // sees no pending records skips the lock and appends at once, so
        // lowering the count before the append let it overtake this batch
        // (found by tests/stress).
        self.pending.fetch_sub(n, Ordering::Release);
        let md = |i: usize, p: &Pending, a: &crate::log::Appended| RecordMetadata {
            topic: Arc::clone(&topic),
            partition,
            offset: if a.base_offset == UNKNOWN_OFFSET {
                UNKNOWN_OFFSET
            } else {
                a.base_offset + i as u64
            },
            timestamp: a.log_append_time.unwrap_or(p.timestamp),
            duplicate: a.duplicate,
        };
        match res {
            Ok((a, len)) => {
                if a.duplicate {
                    self.stats.duplicates(n as u64);
                } else {
                    self.stats.written(n as u64, len as u64);
                }
                let done: Vec<Done> = b
                    .pending
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| Done {
                        result: Ok(md(i, &p, &a)),
                        cb: p.cb,
                    })
                    .collect();
                if self.config.acks == Acks::All {
                    // A duplicate too: its original may have been written
                    // with a lower `acks`.
                    let target = if a.base_offset == UNKNOWN_OFFSET {
                        log.end_offset()
                    } else {
                        a.base_offset + n as u64
                    };
                    st.durable.push(Durable {
                        log,
                        target,
                        done,
                        bytes: b.bytes,
                        created: b.created,
                    });
                    self.ensure_sender(st);
                    self.work.notify_one();
                    return;
                }
                lock(&self.completions).extend(done);
            }
            Err(e) => {
                self.stats.errors(n as u64);
                ::log::warn!("sending a batch of {n} records to {topic}/{partition} failed: {e}");
                let mut c = lock(&self.completions);
                for p in b.pending {
                    c.push_back(Done {
                        cb: p.cb,
                        result: Err(e.duplicate()),
                    });
                }
            }
        }
        self.release(st, b.bytes);
    }

    /// Starts the background thread if it is not running.
    pub(crate) fn ensure_sender(&self, st: &mut AccState) {
        if st.sender_started || st.stop {
            return;
        }
        st.sender_started = true;
        let this = self.self_arc();
        let handle = std::thread::Builder::new()
            .name("mqlite-producer".into())
            .spawn(move || this.sender_loop());
        match handle {
            Ok(h) => *lock(&self.sender) = Some(h),
            Err(e) => {
                st.sender_started = false;
                ::log::warn!("starting the producer thread failed: {e}");
            }
        }
    }

    fn self_arc(&self) -> Arc<Inner> {
        self.me
            .upgrade()
            .expect("the producer is alive while it sends")
    }

    /// The background thread: appends batches whose `linger_ms` passed and
    /// flushes `acks=all` batches, many per flush.
    fn sender_loop(self: Arc<Inner>) {
        let linger = Duration::from_millis(self.config.linger_ms);
        let mut st = lock(&self.acc);
        loop {
            if !st.durable.is_empty() {
                let items = std::mem::take(&mut st.durable);
                st.flushing += items.len();
                drop(st);
                self.complete_durable(items);
                self.fire();
                st = lock(&self.acc);
                continue;
            }
            let now = Instant::now();
            let due: Vec<usize> = if st.stop {
                st.lingering.clear();
                st.batches.keys().copied().collect()
            } else {
                let mut due = Vec::new();
                while let Some(&(created, key)) = st.lingering.front() {
                    if now < created + linger {
                        break;
                    }
                    st.lingering.pop_front();
                    // The batch now at `key` may be a later one, with its
                    // own entry.
                    if st
                        .batches
                        .get(&key)
                        .is_some_and(|b| now >= b.created + linger)
                    {
                        due.push(key);
                    }
                }
                due
            };
            if !due.is_empty() {
                // Due batches are often of as many partitions (keys spread
                // over them): the next ones' cache lines are asked for
                // ahead, as in `send_many`.
                for (i, &k) in due.iter().enumerate() {
                    if let Some(b) = due.get(i + 2).and_then(|k| st.batches.get(k)) {
                        b.log.prefetch_writer();
                    }
                    if let Some(b) = due.get(i + 1).and_then(|k| st.batches.get(k)) {
                        b.log.prefetch_tail();
                    }
                    self.append_pending(&mut st, k);
                }
                drop(st);
                self.fire();
                st = lock(&self.acc);
                continue;
            }
            if st.stop {
                return;
            }
            let next = st.lingering.front().map(|&(created, _)| created + linger);
            st = match next {
                Some(t) => sync::wait_timeout(&self.work, st, t.saturating_duration_since(now)).0,
                None => sync::wait(&self.work, st),
            };
        }
    }

    /// Completes `done`, the report of a duplicate under `acks=all`, once
    /// `log` is durable up to `target` (its original may have been written
    /// with a lower `acks`), by the sender like any durable batch.
    pub(crate) fn complete_when_durable(
        &self,
        st: &mut AccState,
        log: Arc<PartitionLog>,
        target: u64,
        done: Done,
    ) {
        st.durable.push(Durable {
            log,
            target,
            done: vec![done],
            bytes: 0,
            created: Instant::now(),
        });
        self.ensure_sender(st);
        self.work.notify_one();
    }

    /// One flush per partition covers every item of it.
    fn complete_durable(&self, items: Vec<Durable>) {
        let mut targets: Vec<(Arc<PartitionLog>, u64, Option<Error>)> = Vec::new();
        for it in &items {
            match targets.iter_mut().find(|(l, _, _)| Arc::ptr_eq(l, &it.log)) {
                Some((_, t, _)) => *t = (*t).max(it.target),
                None => targets.push((Arc::clone(&it.log), it.target, None)),
            }
        }
        for (log, target, err) in &mut targets {
            if let Err(e) = log.flush_to(*target) {
                *err = Some(e);
            }
        }
        let mut st = lock(&self.acc);
        let n = items.len();
        let mut bytes = 0;
        {
            let mut c = lock(&self.completions);
            for it in items {
                bytes += it.bytes;
                let err = targets
                    .iter()
                    .find(|(l, _, _)| Arc::ptr_eq(l, &it.log))
                    .and_then(|(_, _, e)| e.as_ref());
                // Appended, but acknowledged after the deadline.
                let late = self
                    .expired(it.created)
                    .then_some(Error::Timeout(self.config.delivery_timeout_ms));
                for d in it.done {
                    c.push_back(match err.or(late.as_ref()) {
                        None => d,
                        Some(e) => {
                            self.stats.errors(1);
                            Done {
                                cb: d.cb,
                                result: Err(e.duplicate()),
                            }
                        }
                    });
                }
            }
        }
        st.flushing -= n;
        self.release(&mut st, bytes);
    }

    /// Runs due delivery callbacks, in order, one thread at a time.
    pub(crate) fn fire(&self) {
        loop {
            let guard = match self.firing.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return,
            };
            IN_CALLBACK.with(|c| c.set(true));
            loop {
                let next = lock(&self.completions).pop_front();
                let Some(d) = next else { break };
                interceptor::run_on_ack(&self.config.interceptors, d.result.as_ref());
                if let Some(cb) = d.cb {
                    let r = d.result;
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || cb(r)))
                        .is_err()
                    {
                        ::log::warn!("a delivery callback panicked");
                    }
                }
                // Every completion is of a record `enqueue` counted.
                self.queued.fetch_sub(1, Ordering::AcqRel);
            }
            IN_CALLBACK.with(|c| c.set(false));
            drop(guard);
            if lock(&self.completions).is_empty() {
                return;
            }
        }
    }

    /// Appends every open batch and waits for every flush and callback.
    pub(crate) fn flush(&self, timeout: Option<Duration>) -> Result<()> {
        self.broker.check_open()?;
        self.drain(timeout)
    }

    fn drain(&self, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st: MutexGuard<'_, AccState> = lock(&self.acc);
        let keys: Vec<usize> = st.batches.keys().copied().collect();
        for k in keys {
            self.append_pending(&mut st, k);
        }
        while !st.durable.is_empty() || st.flushing > 0 {
            st = if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    return Err(Error::Timeout(timeout.map_or(0, |t| t.as_millis() as u64)));
                }
                st.space_waiters += 1;
                let mut g = sync::wait_timeout(&self.space, st, d - now).0;
                g.space_waiters -= 1;
                g
            } else {
                st.space_waiters += 1;
                let mut g = sync::wait(&self.space, st);
                g.space_waiters -= 1;
                g
            };
        }
        drop(st);
        self.fire();
        if !IN_CALLBACK.with(std::cell::Cell::get) {
            // Another thread may be running callbacks: wait for it.
            drop(lock(&self.firing));
            self.fire();
        }
        Ok(())
    }

    /// Flushes, stops the background thread and refuses further sends.
    pub(crate) fn close(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let res = self.drain(None);
        self.closed.store(true, Ordering::Release);
        {
            let mut st = lock(&self.acc);
            st.stop = true;
            self.work.notify_all();
            self.space.notify_all();
        }
        if let Some(h) = lock(&self.sender).take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        // Anything queued after the flush (a racing sender) is done now.
        let mut st = lock(&self.acc);
        let keys: Vec<usize> = st.batches.keys().copied().collect();
        for k in keys {
            self.append_pending(&mut st, k);
        }
        let items = std::mem::take(&mut st.durable);
        st.flushing += items.len();
        drop(st);
        if !items.is_empty() {
            self.complete_durable(items);
        }
        self.fire();
        res
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::{Broker, Config, ProducerConfig, Record, TopicConfig};

    /// Lingering batches over many partitions are each appended once their
    /// linger has passed (never before), found through the queue of
    /// lingering batches.
    #[test]
    fn lingering_batches_over_many_partitions_are_appended_after_their_linger() {
        let tmp = tempfile::tempdir().unwrap();
        let mq = Broker::open(tmp.path(), Config::default()).unwrap();
        mq.create_topic("t", TopicConfig::new(500)).unwrap();
        let p = mq
            .producer(ProducerConfig::default().linger_ms(300))
            .unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        for i in 0..3000u32 {
            let done = Arc::clone(&done);
            p.send_async(
                Record::new("t").key(i.to_le_bytes()).value(vec![1u8; 10]),
                move |r| {
                    r.unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                },
            )
            .unwrap();
        }
        // A slow machine only delays the appends.
        if start.elapsed() < Duration::from_millis(250) {
            assert_eq!(
                done.load(Ordering::Relaxed),
                0,
                "appended before the linger"
            );
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while done.load(Ordering::Relaxed) < 3000 {
            assert!(
                Instant::now() < deadline,
                "lingering batches never appended"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(crate::sync::lock(&p.inner().acc).batches.len(), 0);
    }

    /// Batches appended before their linger (filled) leave entries in the
    /// queue; with a long linger they are dropped as they pile up.
    #[test]
    fn entries_of_batches_appended_early_do_not_pile_up() {
        let tmp = tempfile::tempdir().unwrap();
        let mq = Broker::open(tmp.path(), Config::default()).unwrap();
        mq.create_topic("t", TopicConfig::new(1)).unwrap();
        // Two records fill a batch: every second send appends it.
        let p = mq
            .producer(ProducerConfig::default().linger_ms(60_000).batch_size(150))
            .unwrap();
        for _ in 0..6000 {
            p.send_async(Record::new("t").value(vec![1u8; 100]), |r| {
                r.unwrap();
            })
            .unwrap();
        }
        let left = crate::sync::lock(&p.inner().acc).lingering.len();
        assert!(left <= 1026, "{left} entries kept");
        p.flush().unwrap();
        assert_eq!(p.stats().records, 6000);
    }
}
