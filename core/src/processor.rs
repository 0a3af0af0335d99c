//! Running a handler over a consumer's messages on worker threads
//! (RocketMQ's `MessageListenerOrderly` and `MessageListenerConcurrently`),
//! committing only offsets whose messages, and all before them, were
//! processed.
//!
//! The calling thread polls and dispatches; `threads` workers run the
//! handler. What one poll returned is dispatched in batches, each a run of
//! one partition's messages in offset order, so that the bookkeeping (and a
//! binding's entry into its language, such as taking Python's GIL) is paid
//! once per batch rather than once per message. In
//! [`ProcessingMode::Orderly`] every partition goes to one worker, so its
//! messages are handled one at a time, in order; in
//! [`ProcessingMode::Concurrently`] a poll's messages are split into about
//! one batch per worker and any worker takes any batch. A message
//! whose handler returns `false` is retried after `retry_backoff_ms` (in
//! orderly mode its partition waits for it). Per partition, the committed
//! offset is the first offset not yet processed, committed every
//! `commit_interval_ms`, before a partition is revoked in a rebalance (after
//! its messages in flight are done) and when the processor stops. A message
//! given up on after `max_retries` goes to the `dead_letter_topic`, if one
//! is set, before it counts as processed (see `dead_letter.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::consumer::{Consumer, ConsumerWaker, RebalanceContext, RebalanceListener};
use crate::dead_letter::DeadLetters;
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
    /// Where a message given up on goes (RocketMQ's dead-letter queue),
    /// with headers saying where it came from and why (see
    /// [`crate::dead_letters`]), durably and once, before its offset is
    /// committed past; created with one partition if it does not exist.
    /// `None` (default): such a message is only counted in `failed`.
    pub dead_letter_topic: Option<String>,
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
            dead_letter_topic: None,
        }
    }
}

impl ProcessorConfig {
    /// Sets `max_retries`.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = Some(n);
        self
    }

    /// Sets `retry_backoff_ms`.
    pub fn retry_backoff_ms(mut self, ms: u64) -> Self {
        self.retry_backoff_ms = ms;
        self
    }

    /// Sets `dead_letter_topic`.
    pub fn dead_letter_topic(mut self, topic: impl Into<String>) -> Self {
        self.dead_letter_topic = Some(topic.into());
        self
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
    /// Of those, the messages sent to the dead-letter topic.
    pub dead_lettered: u64,
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
    /// for later instead of being retried, with the rest of its batch),
    /// commits what was processed and returns.
    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.waker.wakeup();
    }
}

type Key = (String, u32);

/// Per-partition bookkeeping of dispatched and finished batches.
#[derive(Debug, Default)]
struct Tracker {
    /// Batches dispatched and not yet finished, per partition: the first
    /// offset each has not processed, and how many messages it has left.
    in_flight: HashMap<Key, BTreeMap<u64, usize>>,
    /// Messages dispatched and not yet finished, over all partitions.
    total: usize,
    /// The offset after the last dispatched one.
    next: HashMap<Key, u64>,
    /// The last offset committed.
    committed: HashMap<Key, u64>,
}

impl Tracker {
    /// The first offset of `k` not processed yet.
    fn watermark(&self, k: &Key) -> Option<u64> {
        let next = *self.next.get(k)?;
        Some(
            self.in_flight
                .get(k)
                .and_then(|s| s.keys().next().copied())
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

    /// Records a batch as dispatched.
    fn dispatched(&mut self, b: &Batch) {
        let (Some(first), Some(last)) = (b.messages.first(), b.messages.last()) else {
            return;
        };
        self.in_flight
            .entry(b.key.clone())
            .or_default()
            .insert(first.offset(), b.messages.len());
        self.total += b.messages.len();
        let next = self.next.entry(b.key.clone()).or_insert(0);
        *next = (*next).max(last.offset() + 1);
    }
}

/// A run of one partition's messages, in offset order, for one worker.
struct Batch {
    key: Key,
    messages: Vec<Message>,
}

/// A batch finished: every message processed (or given up on), or, when
/// the processor stopped while a message kept failing, the messages from
/// `left_at` on left unprocessed (never committed past).
struct Done {
    key: Key,
    first: u64,
    left_at: Option<u64>,
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
        let Some(s) = t.in_flight.get_mut(&d.key) else {
            return;
        };
        let Some(n) = s.remove(&d.first) else {
            return;
        };
        if let Some(at) = d.left_at {
            // Stays in flight from there on: commits never pass it.
            s.insert(at, 0);
        }
        t.total -= n;
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
                wait_for.iter().any(|k| {
                    t.in_flight
                        .get(k)
                        .is_some_and(|s| s.values().any(|&n| n > 0))
                })
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
            if let Some(s) = t.in_flight.remove(k) {
                t.total -= s.values().sum::<usize>();
            }
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
    dead_letters: Option<Arc<DeadLetters>>,
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
    /// [`Error::InvalidArgument`] without a group or with 0 threads;
    /// [`Error::InvalidTopicName`] for a bad `dead_letter_topic`, and
    /// errors creating it.
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
        let dead_letters = match &config.dead_letter_topic {
            Some(topic) => {
                let group = consumer.config().group_id.clone().unwrap_or_default();
                match DeadLetters::open(consumer.broker_inner(), topic, &group, "dlq") {
                    Ok(d) => Some(Arc::new(d)),
                    Err(e) => return Err((e, Box::new(consumer))),
                }
            }
            None => None,
        };
        let stop = ProcessorStop {
            flag: Arc::new(AtomicBool::new(false)),
            waker: consumer.waker(),
        };
        Ok(Processor {
            consumer,
            config,
            stop,
            dead_letters,
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
        self.run_batches(|batch| {
            batch
                .iter()
                .take_while(|m| {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(m)))
                        .unwrap_or(false)
                })
                .count()
        })
    }

    /// As [`Processor::run`], with a handler given a batch at a time: a run
    /// of one partition's messages in offset order. It handles them in
    /// order and returns how many it processed: all of them, or the index
    /// of the first that failed, which is then retried (after
    /// `retry_backoff_ms`, handing the handler the batch from that message
    /// on) as [`Processor::run`] retries a message. A panic counts as a
    /// failure of the first message of the slice.
    ///
    /// # Errors
    /// As [`Processor::run`].
    pub fn run_batches<F>(&mut self, handler: F) -> Result<ProcessorStats>
    where
        F: Fn(&[Message]) -> usize + Send + Sync,
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
        let counts = Counts::default();
        let config = self.config.clone();
        let result = std::thread::scope(|s| {
            let mut senders = Vec::with_capacity(config.threads);
            for _ in 0..config.threads {
                let (tx, rx) = mpsc::channel::<Batch>();
                senders.push(tx);
                let done_tx = done_tx.clone();
                let (handler, counts, config) = (&handler, &counts, &config);
                let dead_letters = self.dead_letters.clone();
                let stopping = Arc::clone(&self.stop.flag);
                s.spawn(move || {
                    for b in rx {
                        let left_at = work(
                            &b.messages,
                            handler,
                            config,
                            (counts, dead_letters.as_deref()),
                            &stopping,
                        );
                        let first = b.messages.first().map_or(0, Message::offset);
                        let _ = done_tx.send(Done {
                            key: b.key,
                            first,
                            left_at,
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
            processed: counts.processed.load(Ordering::Relaxed),
            retries: counts.retries.load(Ordering::Relaxed),
            failed: counts.failed.load(Ordering::Relaxed),
            dead_lettered: counts.dead_lettered.load(Ordering::Relaxed),
            commits: shared.commits.load(Ordering::Relaxed),
        })
    }

    fn poll_loop(&mut self, shared: &Arc<Shared>, senders: &[mpsc::Sender<Batch>]) -> Result<()> {
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
            let in_flight = sync::lock(&shared.tracker).total;
            if in_flight >= self.config.max_in_flight {
                // Wait for a worker to finish something, or until the next
                // commit is due (commits go on while a message is stuck).
                let wait = every
                    .saturating_sub(last_commit.elapsed())
                    .clamp(Duration::from_millis(1), Duration::from_millis(100));
                let rx = sync::lock(&shared.done);
                if let Ok(d) = rx.recv_timeout(wait) {
                    drop(rx);
                    shared.finish(d);
                }
                continue;
            }
            let msgs = self.consumer.poll(every.min(Duration::from_millis(200)))?;
            if msgs.is_empty() {
                continue;
            }
            let batches = match self.config.mode {
                ProcessingMode::Orderly => batches(msgs, usize::MAX),
                ProcessingMode::Concurrently => {
                    let len = msgs.len().div_ceil(n);
                    batches(msgs, len)
                }
            };
            {
                let mut t = sync::lock(&shared.tracker);
                for b in &batches {
                    t.dispatched(b);
                }
            }
            for b in batches {
                let w = match self.config.mode {
                    ProcessingMode::Orderly => {
                        let h = crate::producer::murmur2(b.key.0.as_bytes()) as u32;
                        (h.wrapping_add(b.key.1.wrapping_mul(0x9e37_79b9)) as usize) % n
                    }
                    ProcessingMode::Concurrently => {
                        next_worker = (next_worker + 1) % n;
                        next_worker
                    }
                };
                if senders[w].send(b).is_err() {
                    return Err(Error::Closed("processor worker"));
                }
            }
        }
        Ok(())
    }
}

/// What the workers did, counted as they go.
#[derive(Default)]
struct Counts {
    processed: AtomicU64,
    retries: AtomicU64,
    failed: AtomicU64,
    dead_lettered: AtomicU64,
}

/// Splits what one poll returned into runs of one partition's messages in
/// offset order (a poll's messages of one partition are in offset order),
/// each of at most `max_len` messages.
fn batches(msgs: Vec<Message>, max_len: usize) -> Vec<Batch> {
    let mut out: Vec<Batch> = Vec::new();
    // Per partition, the index in `out` of its batch being filled.
    let mut open: Vec<usize> = Vec::new();
    for m in msgs {
        let found = open.iter().position(|&i| {
            let k = &out[i].key;
            k.1 == m.partition() && k.0 == m.topic()
        });
        match found {
            Some(j) if out[open[j]].messages.len() < max_len => out[open[j]].messages.push(m),
            found => {
                let key = (m.topic().to_owned(), m.partition());
                out.push(Batch {
                    key,
                    messages: vec![m],
                });
                match found {
                    Some(j) => open[j] = out.len() - 1,
                    None => open.push(out.len() - 1),
                }
            }
        }
    }
    out
}

/// Runs `handler` over a batch on a worker, retrying a failing message as
/// configured, and sending one given up on to the dead letters, if any.
/// Returns the offset of a message left unprocessed because the processor
/// stopped while it kept failing, or while its dead letter could not be
/// sent (the rest of the batch is left with it).
fn work<F>(
    batch: &[Message],
    handler: &F,
    config: &ProcessorConfig,
    (counts, dead_letters): (&Counts, Option<&DeadLetters>),
    stopping: &AtomicBool,
) -> Option<u64>
where
    F: Fn(&[Message]) -> usize,
{
    let mut i = 0;
    let mut tries = 0u32;
    while i < batch.len() {
        let rest = &batch[i..];
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(rest)))
            .unwrap_or(0)
            .min(rest.len());
        counts.processed.fetch_add(ok as u64, Ordering::Relaxed);
        i += ok;
        if i == batch.len() {
            break;
        }
        if ok > 0 {
            tries = 0;
        }
        // batch[i] failed.
        let m = &batch[i];
        if config.max_retries.is_some_and(|max| tries >= max) {
            if !give_up(m, tries + 1, config, (counts, dead_letters), stopping) {
                return Some(m.offset());
            }
            i += 1;
            tries = 0;
            continue;
        }
        if stopping.load(Ordering::SeqCst) {
            // Stopping: leave it unprocessed (never committed past); the
            // next run or member gets it again.
            return Some(m.offset());
        }
        tries += 1;
        counts.retries.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(config.retry_backoff_ms));
    }
    None
}

/// Gives up on `m`, which the handler got `deliveries` times: sends it to
/// the dead letters, if any, trying again after `retry_backoff_ms` until
/// it is sent (it is never skipped unsent), and counts it. Returns `false`
/// when the processor stops before it is sent: `m` is then left
/// unprocessed (never committed past).
fn give_up(
    m: &Message,
    deliveries: u32,
    config: &ProcessorConfig,
    (counts, dead_letters): (&Counts, Option<&DeadLetters>),
    stopping: &AtomicBool,
) -> bool {
    match dead_letters {
        None => ::log::warn!(
            "giving up on {}/{} offset {} after {} retries",
            m.topic(),
            m.partition(),
            m.offset(),
            deliveries - 1
        ),
        Some(d) => {
            let reason = format!("the handler failed {deliveries} times");
            while let Err(e) = d.send(m, deliveries, &reason) {
                ::log::error!(
                    "dead-lettering {}/{} offset {}: {e}",
                    m.topic(),
                    m.partition(),
                    m.offset()
                );
                if stopping.load(Ordering::SeqCst) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(config.retry_backoff_ms));
            }
            counts.dead_lettered.fetch_add(1, Ordering::Relaxed);
        }
    }
    counts.failed.fetch_add(1, Ordering::Relaxed);
    true
}
