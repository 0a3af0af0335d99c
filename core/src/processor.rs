//! Running a handler over a consumer's messages on worker threads
//! (RocketMQ's `MessageListenerOrderly` and `MessageListenerConcurrently`),
//! committing only offsets whose messages, and all before them, were
//! processed.
//!
//! The calling thread polls and dispatches; `threads` workers run the
//! handler. In [`ProcessingMode::Orderly`] every partition goes to one
//! worker, so its messages are handled one at a time, in order; in
//! [`ProcessingMode::Concurrently`] any worker takes any message. A message
//! whose handler returns `false` is retried after `retry_backoff_ms` (in
//! orderly mode its partition waits for it). Per partition, the committed
//! offset is the first offset not yet processed, committed every
//! `commit_interval_ms`, before a partition is revoked in a rebalance (after
//! its messages in flight are done) and when the processor stops.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::consumer::{Consumer, ConsumerWaker, RebalanceContext, RebalanceListener};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::sync;

/// How a [`Processor`] hands messages to its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProcessingMode {
    /// One partition's messages one at a time, in offset order.
    #[default]
    Orderly,
    /// Any message on any worker, as soon as one is free.
    Concurrently,
}

impl std::str::FromStr for ProcessingMode {
    type Err = Error;

    /// `orderly` or `concurrently` (`concurrent` too).
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "orderly" | "ordered" => Ok(ProcessingMode::Orderly),
            "concurrently" | "concurrent" => Ok(ProcessingMode::Concurrently),
            _ => Err(Error::InvalidArgument(format!(
                "processing mode must be orderly or concurrently, got {s:?}"
            ))),
        }
    }
}

/// Settings of a [`Processor`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessorConfig {
    /// Worker threads (default 4).
    pub threads: usize,
    /// Orderly (default) or concurrent processing.
    pub mode: ProcessingMode,
    /// How often processed offsets are committed (default 1000 ms).
    pub commit_interval_ms: u64,
    /// Most messages dispatched and not yet processed (default 10,000).
    pub max_in_flight: usize,
    /// Wait before retrying a message whose handler failed (default 100 ms).
    pub retry_backoff_ms: u64,
    /// Give up on a message after this many failed retries (counted in
    /// `failed`, and then treated as processed); `None` (default) retries
    /// forever, so nothing is ever skipped.
    pub max_retries: Option<u32>,
}

impl Default for ProcessorConfig {
    fn default() -> Self {
        ProcessorConfig {
            threads: 4,
            mode: ProcessingMode::Orderly,
            commit_interval_ms: 1000,
            max_in_flight: 10_000,
            retry_backoff_ms: 100,
            max_retries: None,
        }
    }
}

/// What a processor did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessorStats {
    /// Messages handled successfully.
    pub processed: u64,
    /// Handler failures that were retried.
    pub retries: u64,
    /// Messages given up on after `max_retries`.
    pub failed: u64,
    /// Commits of processed offsets.
    pub commits: u64,
}

/// Stops a running [`Processor`] from another thread (or from the handler).
#[derive(Debug, Clone)]
pub struct ProcessorStop {
    flag: Arc<AtomicBool>,
    waker: ConsumerWaker,
}

impl ProcessorStop {
    /// Asks the processor to stop: it dispatches nothing more, lets the
    /// workers finish what they hold (a message whose handler fails is left
    /// for later instead of being retried), commits what was processed and
    /// returns.
    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.waker.wakeup();
    }
}

type Key = (String, u32);

/// Per-partition bookkeeping of dispatched and finished offsets.
#[derive(Debug, Default)]
struct Tracker {
    /// Offsets dispatched and not yet finished.
    in_flight: HashMap<Key, BTreeSet<u64>>,
    /// The offset after the last dispatched one.
    next: HashMap<Key, u64>,
    /// The last offset committed.
    committed: HashMap<Key, u64>,
}

impl Tracker {
    fn total_in_flight(&self) -> usize {
        self.in_flight.values().map(BTreeSet::len).sum()
    }

    /// The first offset of `k` not processed yet.
    fn watermark(&self, k: &Key) -> Option<u64> {
        let next = *self.next.get(k)?;
        Some(
            self.in_flight
                .get(k)
                .and_then(|s| s.iter().next().copied())
                .unwrap_or(next),
        )
    }

    /// Offsets to commit for `keys` (those that moved).
    fn due(&self, keys: &[Key]) -> Vec<(Key, u64)> {
        keys.iter()
            .filter_map(|k| {
                let w = self.watermark(k)?;
                (self.committed.get(k) != Some(&w)).then(|| (k.clone(), w))
            })
            .collect()
    }
}

struct Done {
    key: Key,
    offset: u64,
}

/// State shared by the polling loop and the rebalance listener.
struct Shared {
    tracker: Mutex<Tracker>,
    done: Mutex<mpsc::Receiver<Done>>,
    commits: AtomicU64,
}

impl Shared {
    fn finish(&self, d: Done) {
        let mut t = sync::lock(&self.tracker);
        if let Some(s) = t.in_flight.get_mut(&d.key) {
            s.remove(&d.offset);
        }
    }

    /// Takes in every completion reported so far; with `wait_for`, blocks
    /// until none of those partitions has a message in flight.
    fn drain(&self, wait_for: &[Key]) {
        let rx = sync::lock(&self.done);
        while let Ok(d) = rx.try_recv() {
            self.finish(d);
        }
        loop {
            let busy = {
                let t = sync::lock(&self.tracker);
                wait_for
                    .iter()
                    .any(|k| t.in_flight.get(k).is_some_and(|s| !s.is_empty()))
            };
            if !busy {
                return;
            }
            match rx.recv() {
                Ok(d) => self.finish(d),
                Err(_) => return,
            }
        }
    }

    /// Commits the watermark of `keys`.
    fn commit(&self, consumer: &mut Consumer, keys: &[Key]) -> Result<()> {
        let due = sync::lock(&self.tracker).due(keys);
        if due.is_empty() {
            return Ok(());
        }
        let offsets: Vec<(&str, u32, u64, &str)> = due
            .iter()
            .map(|((t, p), o)| (t.as_str(), *p, *o, ""))
            .collect();
        consumer.commit_offsets(&offsets)?;
        self.commits.fetch_add(1, Ordering::Relaxed);
        let mut t = sync::lock(&self.tracker);
        for (k, o) in due {
            t.committed.insert(k, o);
        }
        Ok(())
    }

    fn forget(&self, keys: &[Key]) {
        let mut t = sync::lock(&self.tracker);
        for k in keys {
            t.in_flight.remove(k);
            t.next.remove(k);
            t.committed.remove(k);
        }
    }
}

/// The processor's rebalance listener: before a partition goes, waits for
/// its messages in flight and commits them (not when the partition was
/// lost: see [`RebalanceListener::on_lost`]); then calls the user's
/// listener.
struct Guard {
    shared: Arc<Shared>,
    user: Arc<Mutex<Option<Box<dyn RebalanceListener>>>>,
}

impl RebalanceListener for Guard {
    fn on_assign(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        if let Some(u) = &mut *sync::lock(&self.user) {
            u.on_assign(ctx, partitions);
        }
    }

    fn on_revoke(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.shared.drain(partitions);
        if let Err(e) = self.shared.commit(ctx.consumer(), partitions) {
            ::log::warn!("committing processed offsets before a rebalance failed: {e}");
        }
        self.shared.forget(partitions);
        if let Some(u) = &mut *sync::lock(&self.user) {
            u.on_revoke(ctx, partitions);
        }
    }

    fn on_lost(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        // The workers finish what they hold (it was handed out), but
        // nothing is committed: another member may own the partitions now.
        self.shared.drain(partitions);
        self.shared.forget(partitions);
        if let Some(u) = &mut *sync::lock(&self.user) {
            u.on_lost(ctx, partitions);
        }
    }
}

/// Runs a handler over the messages of a consumer on worker threads.
pub struct Processor {
    consumer: Consumer,
    config: ProcessorConfig,
    stop: ProcessorStop,
}

impl std::fmt::Debug for Processor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processor")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Processor {
    /// A processor over `consumer`, which must be subscribed or assigned
    /// and have a `group_id` (to commit).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a group or with 0 threads; the
    /// consumer is dropped then (see [`Processor::try_new`] to keep it).
    pub fn new(consumer: Consumer, config: ProcessorConfig) -> Result<Processor> {
        Processor::try_new(consumer, config).map_err(|(e, _)| e)
    }

    /// As [`Processor::new`], but an error gives the consumer back,
    /// unchanged (boxed: it is large), beside the error.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a group or with 0 threads.
    pub fn try_new(
        consumer: Consumer,
        config: ProcessorConfig,
    ) -> std::result::Result<Processor, (Error, Box<Consumer>)> {
        if consumer.config().group_id.is_none() {
            return Err((
                Error::InvalidArgument(
                    "a processor commits what it processed: the consumer needs a group_id".into(),
                ),
                Box::new(consumer),
            ));
        }
        if config.threads == 0 || config.max_in_flight == 0 || config.commit_interval_ms == 0 {
            return Err((
                Error::InvalidArgument(
                    "a processor needs at least one thread, max_in_flight of at least 1 and a commit_interval_ms of at least 1".into(),
                ),
                Box::new(consumer),
            ));
        }
        let stop = ProcessorStop {
            flag: Arc::new(AtomicBool::new(false)),
            waker: consumer.waker(),
        };
        Ok(Processor {
            consumer,
            config,
            stop,
        })
    }

    /// A handle that stops [`Processor::run`].
    pub fn stopper(&self) -> ProcessorStop {
        self.stop.clone()
    }

    /// Gives the consumer back.
    pub fn into_consumer(self) -> Consumer {
        self.consumer
    }

    /// Polls and processes until stopped (see [`Processor::stopper`]):
    /// `handler` returns `true` when a message is processed, `false` to have
    /// it retried. Commits what was processed before returning.
    ///
    /// # Errors
    /// Errors of `poll` or of a commit; the workers finish what they hold
    /// first.
    pub fn run<F>(&mut self, handler: F) -> Result<ProcessorStats>
    where
        F: Fn(&Message) -> bool + Send + Sync,
    {
        // The consumer's own auto-commit would commit what was fetched, not
        // what was processed: off while the processor runs.
        let auto_commit = self.consumer.set_auto_commit(false);
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        let shared = Arc::new(Shared {
            tracker: Mutex::new(Tracker::default()),
            done: Mutex::new(done_rx),
            commits: AtomicU64::new(0),
        });
        let user = Arc::new(Mutex::new(self.consumer.set_rebalance_listener(None)));
        self.consumer.set_rebalance_listener(Some(Box::new(Guard {
            shared: Arc::clone(&shared),
            user: Arc::clone(&user),
        })));
        let processed = AtomicU64::new(0);
        let retries = AtomicU64::new(0);
        let failed = AtomicU64::new(0);
        let config = self.config.clone();
        let result = std::thread::scope(|s| {
            let mut senders = Vec::with_capacity(config.threads);
            for _ in 0..config.threads {
                let (tx, rx) = mpsc::channel::<Message>();
                senders.push(tx);
                let done_tx = done_tx.clone();
                let (handler, processed, retries, failed, config) =
                    (&handler, &processed, &retries, &failed, &config);
                let stopping = Arc::clone(&self.stop.flag);
                s.spawn(move || {
                    'messages: for m in rx {
                        let mut tries = 0u32;
                        loop {
                            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                handler(&m)
                            }))
                            .unwrap_or(false);
                            if ok {
                                processed.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            if config.max_retries.is_some_and(|max| tries >= max) {
                                ::log::warn!(
                                    "giving up on {}/{} offset {} after {tries} retries",
                                    m.topic(),
                                    m.partition(),
                                    m.offset()
                                );
                                failed.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            if stopping.load(Ordering::SeqCst) {
                                // Stopping: leave it unprocessed (never
                                // reported done, so never committed); the
                                // next run or member gets it again.
                                continue 'messages;
                            }
                            tries += 1;
                            retries.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(config.retry_backoff_ms));
                        }
                        let key = (m.topic().to_owned(), m.partition());
                        let _ = done_tx.send(Done {
                            key,
                            offset: m.offset(),
                        });
                    }
                });
            }
            drop(done_tx);
            let res = self.poll_loop(&shared, &senders);
            drop(senders); // workers finish what they hold and exit
            res
        });
        // Everything dispatched is done now: commit it.
        shared.drain(&[]);
        let keys: Vec<Key> = sync::lock(&shared.tracker).next.keys().cloned().collect();
        let final_commit = shared.commit(&mut self.consumer, &keys);
        // Put the user's listener and settings back; a stop is used up (and
        // so is the wake-up it gave the consumer).
        let user = sync::lock(&user).take();
        self.consumer.set_rebalance_listener(user);
        self.consumer.set_auto_commit(auto_commit);
        self.stop.flag.store(false, Ordering::SeqCst);
        self.stop.waker.clear();
        result?;
        final_commit?;
        Ok(ProcessorStats {
            processed: processed.load(Ordering::Relaxed),
            retries: retries.load(Ordering::Relaxed),
            failed: failed.load(Ordering::Relaxed),
            commits: shared.commits.load(Ordering::Relaxed),
        })
    }

    fn poll_loop(&mut self, shared: &Arc<Shared>, senders: &[mpsc::Sender<Message>]) -> Result<()> {
        let n = senders.len();
        let mut next_worker = 0usize;
        let mut last_commit = Instant::now();
        let every = Duration::from_millis(self.config.commit_interval_ms);
        while !self.stop.flag.load(Ordering::SeqCst) {
            shared.drain(&[]);
            if last_commit.elapsed() >= every {
                let keys: Vec<Key> = self.consumer.assignment();
                if let Err(e) = shared.commit(&mut self.consumer, &keys) {
                    ::log::warn!("committing processed offsets failed: {e}");
                }
                last_commit = Instant::now();
            }
            let in_flight = sync::lock(&shared.tracker).total_in_flight();
            if in_flight >= self.config.max_in_flight {
                // Wait for a worker to finish something.
                let rx = sync::lock(&shared.done);
                if let Ok(d) = rx.recv_timeout(Duration::from_millis(100)) {
                    drop(rx);
                    shared.finish(d);
                }
                continue;
            }
            let msgs = self.consumer.poll(every.min(Duration::from_millis(200)))?;
            if msgs.is_empty() {
                continue;
            }
            {
                let mut t = sync::lock(&shared.tracker);
                for m in &msgs {
                    let key = (m.topic().to_owned(), m.partition());
                    t.in_flight
                        .entry(key.clone())
                        .or_default()
                        .insert(m.offset());
                    let next = t.next.entry(key).or_insert(0);
                    *next = (*next).max(m.offset() + 1);
                }
            }
            for m in msgs {
                let w = match self.config.mode {
                    ProcessingMode::Orderly => {
                        let h = crate::producer::murmur2(m.topic().as_bytes()) as u32;
                        (h.wrapping_add(m.partition().wrapping_mul(0x9e37_79b9)) as usize) % n
                    }
                    ProcessingMode::Concurrently => {
                        next_worker = (next_worker + 1) % n;
                        next_worker
                    }
                };
                if senders[w].send(m).is_err() {
                    return Err(Error::Closed("processor worker"));
                }
            }
        }
        Ok(())
    }
}
