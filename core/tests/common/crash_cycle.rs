//! `kill -9` cycles. Each cycle starts a child process that appends records
//! while a consumer group in the same process polls and commits; the parent
//! kills it at a random moment, reopens the data directory and checks what
//! the child acknowledged against what is on disk.
//!
//! The cycles rotate through the three durability levels (`acks=0`, `1`,
//! `all`) times two kinds of producer:
//! - an anonymous idempotent producer, run by an "application" that resumes
//!   after a crash from its first unacknowledged record (so a record written
//!   but not acknowledged before the crash is written again: duplicates are
//!   not promised across a crash for anonymous producers, they are counted);
//! - a named producer (`soak-0`, `soak-1`, alternating) sending application
//!   sequences, whose application resumes like a real one: it reads
//!   `last_sequence()`, re-sends a window of sequences at or below it (each
//!   must come back `duplicate` with nothing written) and carries on.
//!
//! A record counts as acknowledged once `send` returned (`acks=1`, `all`) or,
//! with `acks=0`, once a later `flush` returned. After every cycle:
//! - every record on disk is intact (its content is derived from the id it
//!   starts with) and the records of earlier cycles are unchanged;
//! - per partition, the records new in this cycle are a prefix of what the
//!   child sent there (order, no gap), and hold every acknowledged record:
//!   with `acks=1`/`all` at most the one record in flight beyond, with
//!   `acks=0` any number of unflushed ones;
//! - acknowledged records are at the offsets reported, the `duplicate` flag
//!   is what the sequences on disk call for, and no sequence of a named
//!   producer is ever written twice; `last_sequence()` matches the disk;
//! - the group's committed offsets are never ahead of a partition's end,
//!   nor behind the last commit the child reported (or saw) as done;
//! - the child's consumer saw only intact records, without gaps.
//!
//! Shared by `tests/crash.rs` and `examples/crash_soak.rs` (included with
//! `#[path]`), so it depends on nothing but `mqlite` and `std`.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mqlite::{
    partition_for_key, Acks, Broker, Config, ConsumerConfig, Error, Header, Message,
    ProducerConfig, Record, RecordMetadata, TopicConfig,
};

/// The topic the cycles write to.
pub const TOPIC: &str = "crash";
/// Its partition count.
pub const PARTITIONS: u32 = 3;
/// The consumer group of the children.
pub const GROUP: &str = "soak-group";
/// Named producers (`soak-0`...), used in turn by the named cycles.
pub const NAMED: u64 = 2;
/// Streams of records: 0 is the anonymous application's, `1..=NAMED` the
/// named producers'.
const STREAMS: usize = 1 + NAMED as usize;
/// A record id is `stream << STREAM_SHIFT | n`.
const STREAM_SHIFT: u32 = 40;
/// How long a child appends at most if nobody kills it (no orphans).
const CHILD_LIFETIME: Duration = Duration::from_secs(60);
/// Records before the previous end re-read and compared every cycle.
const OVERLAP: usize = 8;
/// Every this many cycles the whole topic is re-read and compared.
const FULL_CHECK_EVERY: u64 = 100;
/// One cycle in this many kills the child without waiting for it to be
/// ready (during recovery, producer registration or the first sends).
const EARLY_KILL_ONE_IN: u64 = 8;

/// Small segments, so that cycles often kill during a roll (but not so
/// small that the cycles need more file descriptors than `ulimit -n`).
pub fn topic_config() -> TopicConfig {
    TopicConfig::new(PARTITIONS)
        .segment_bytes(256 * 1024)
        .index_interval_bytes(1024)
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The id of record `n` of `stream`.
pub fn record_id(stream: u64, n: u64) -> u64 {
    stream << STREAM_SHIFT | n
}

/// The stream of a record id.
pub fn stream_of(id: u64) -> u64 {
    id >> STREAM_SHIFT
}

/// The number of a record id within its stream (a named producer's
/// application sequence).
pub fn n_of(id: u64) -> u64 {
    id & ((1 << STREAM_SHIFT) - 1)
}

/// The key, explicit partition and resulting partition of record `id`.
/// Some records of named producers have no key: the producer then places
/// them by their application sequence.
fn placement(id: u64) -> (Option<String>, Option<u32>, u32) {
    let h = mix(id);
    let key = (stream_of(id) == 0 || h & (1 << 41) == 0).then(|| format!("key-{id}"));
    if h & (1 << 40) != 0 {
        let p = ((h >> 20) % u64::from(PARTITIONS)) as u32;
        return (key, Some(p), p);
    }
    let p = match &key {
        Some(k) => partition_for_key(k.as_bytes(), PARTITIONS),
        None => (n_of(id) % u64::from(PARTITIONS)) as u32,
    };
    (key, None, p)
}

/// The partition record `id` lands in.
pub fn partition_of(id: u64) -> u32 {
    placement(id).2
}

/// The record with id `id`, and the partition it must land in. Everything
/// is derived from the id, which the value starts with, so any record found
/// on disk can be checked.
pub fn record_for(id: u64) -> (Record, u32) {
    let h = mix(id);
    let (key, explicit, partition) = placement(id);
    let len = match h % 16 {
        0 => (h >> 8) % 3000,
        1 => 0,
        _ => (h >> 8) % 200,
    } as usize;
    let mut value = id.to_le_bytes().to_vec();
    value.extend((0..len).map(|i| (mix(h ^ i as u64) >> 7) as u8));
    let mut r = Record::new(TOPIC)
        .value(value)
        .timestamp(1_700_000_000_000 + (id & 0xffff_ffff) as i64);
    if let Some(k) = key {
        r = r.key(k);
    }
    if let Some(p) = explicit {
        r = r.partition(p);
    }
    if stream_of(id) > 0 {
        r = r.sequence(n_of(id) as i64);
    }
    if id.is_multiple_of(5) {
        r = r
            .header("seq", id.to_string())
            .header("ü-name", (h % 251).to_le_bytes().to_vec());
    }
    (r, partition)
}

/// Checks a record read back against the one its id stands for; returns
/// the id.
pub fn check_message(m: &Message) -> Result<u64, String> {
    let Some(id) = m
        .value()
        .and_then(|v| v.get(..8))
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    else {
        return Err(format!("record {}/{} has no id", m.partition(), m.offset()));
    };
    let (want, partition) = record_for(id);
    let headers: Vec<Header> = m.headers();
    if partition != m.partition()
        || m.key() != want.key.as_deref()
        || m.value() != want.value.as_deref()
        || headers != want.headers
        || Some(m.timestamp()) != want.timestamp
    {
        return Err(format!(
            "record {}/{} (id {id:#x}) differs from what was sent",
            m.partition(),
            m.offset()
        ));
    }
    Ok(id)
}

fn acks_name(acks: Acks) -> &'static str {
    match acks {
        Acks::Zero => "0",
        Acks::One => "1",
        Acks::All => "all",
    }
}

fn acks_index(acks: Acks) -> usize {
    match acks {
        Acks::Zero => 0,
        Acks::One => 1,
        Acks::All => 2,
    }
}

/// What one child does; passed to it as text (see [`Plan::encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The cycle number (for messages).
    pub cycle: u64,
    /// Durability level of the producer.
    pub acks: Acks,
    /// 0: the anonymous application; `k >= 1`: the named producer
    /// `soak-{k-1}`.
    pub stream: u64,
    /// Anonymous: the first record to send (the first unacknowledged one).
    pub start: u64,
    /// Named: how many sequences at or below `last_sequence()` to re-send.
    pub window: u64,
    /// `acks=0`: flush after every this many sends.
    pub flush_every: u64,
    /// The producer's `linger_ms` (with `acks=0`, records wait in the
    /// producer's batches until then, a full batch or a flush).
    pub linger_ms: u64,
    /// The producer's `batch_size` (bytes).
    pub batch_size: u64,
    /// The consumer's `max_poll_records`.
    pub poll_max: u64,
}

impl Plan {
    /// The plan as one argument: `key=value` pairs.
    pub fn encode(&self) -> String {
        format!(
            "cycle={} acks={} stream={} start={} window={} flush={} linger={} batch={} poll={}",
            self.cycle,
            acks_name(self.acks),
            self.stream,
            self.start,
            self.window,
            self.flush_every,
            self.linger_ms,
            self.batch_size,
            self.poll_max
        )
    }

    /// Reads [`Plan::encode`]'s output.
    pub fn decode(s: &str) -> Option<Plan> {
        let mut plan = Plan {
            cycle: 0,
            acks: Acks::One,
            stream: 0,
            start: 0,
            window: 0,
            flush_every: 1,
            linger_ms: 0,
            batch_size: 16 * 1024,
            poll_max: 500,
        };
        for kv in s.split_whitespace() {
            let (k, v) = kv.split_once('=')?;
            match k {
                "cycle" => plan.cycle = v.parse().ok()?,
                "acks" => {
                    plan.acks = match v {
                        "0" => Acks::Zero,
                        "1" => Acks::One,
                        "all" => Acks::All,
                        _ => return None,
                    }
                }
                "stream" => plan.stream = v.parse().ok()?,
                "start" => plan.start = v.parse().ok()?,
                "window" => plan.window = v.parse().ok()?,
                "flush" => plan.flush_every = v.parse().ok()?,
                "linger" => plan.linger_ms = v.parse().ok()?,
                "batch" => plan.batch_size = v.parse().ok()?,
                "poll" => plan.poll_max = v.parse().ok()?,
                _ => return None,
            }
        }
        (plan.stream <= NAMED && plan.flush_every > 0 && plan.poll_max > 0).then_some(plan)
    }

    /// The producer's name, if named.
    pub fn producer_name(&self) -> Option<String> {
        (self.stream > 0).then(|| format!("soak-{}", self.stream - 1))
    }

    /// A short description: `acks=1 soak-0`.
    pub fn describe(&self) -> String {
        format!(
            "acks={} {}",
            acks_name(self.acks),
            self.producer_name()
                .unwrap_or_else(|| "anonymous".to_owned())
        )
    }
}

/// Where a named producer's application resumes: `window` sequences at or
/// below the last one written, then on.
pub fn resume_start(last: i64, window: u64) -> u64 {
    ((last + 1).max(0) as u64).saturating_sub(window)
}

/// Prints one line of the child protocol and flushes it (one `write` to the
/// pipe, so a kill never tears a line).
fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    out.write_fmt(line)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .expect("child: stdout");
}

/// The child: opens `dir`, starts its consumer, prints `READY`, then sends
/// the plan's records until killed. Lines printed (after the event they
/// report is done):
/// - `LAST <l>`: a named producer's `last_sequence()` (-1 for none);
/// - `ACK <partition> <offset> <id> <duplicate 0|1>` after each send
///   returns (`acks=1`/`all`);
/// - `FLUSHED <count>` after a `flush` returned, `count` sends before it
///   (`acks=0`);
/// - `COMMIT <p>:<offset>...` after a commit of these positions returned;
/// - `BAD <what>` when the child sees something wrong.
pub fn child(dir: &Path, plan: &str) {
    let plan = Plan::decode(plan).expect("child: plan");
    let mq =
        Broker::open(dir, Config::default().retention_check_interval_ms(0)).expect("child: open");
    let mut config = ProducerConfig::default()
        .acks(plan.acks)
        .linger_ms(plan.linger_ms)
        .batch_size(plan.batch_size as usize);
    if let Some(name) = plan.producer_name() {
        config = config.name(name);
    }
    let producer = mq.producer(config).expect("child: producer");
    // Ends libtest's `test crash_child ... ` line, if any.
    say(format_args!(""));
    let start = if plan.stream > 0 {
        let last = producer
            .last_sequence()
            .expect("child: last_sequence")
            .unwrap_or(-1);
        say(format_args!("LAST {last}"));
        resume_start(last, plan.window)
    } else {
        plan.start
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| consume(&mq, &plan, &stop));
        say(format_args!("READY"));
        let started = Instant::now();
        for (i, n) in (start..).enumerate() {
            let id = record_id(plan.stream, n);
            let (record, partition) = record_for(id);
            let md = producer.send(record).expect("child: send");
            if md.partition != partition {
                say(format_args!(
                    "BAD record {id:#x} went to partition {} instead of {partition}",
                    md.partition
                ));
            }
            if plan.acks == Acks::Zero {
                let sent = i as u64 + 1;
                if sent.is_multiple_of(plan.flush_every) {
                    producer.flush().expect("child: flush");
                    let errors = producer.stats().errors;
                    if errors != 0 {
                        say(format_args!("BAD {errors} acks=0 sends failed"));
                    }
                    say(format_args!("FLUSHED {sent}"));
                }
            } else {
                say(format_args!(
                    "ACK {} {} {id} {}",
                    md.partition,
                    md.offset,
                    u8::from(md.duplicate)
                ));
            }
            if started.elapsed() > CHILD_LIFETIME {
                break;
            }
        }
        stop.store(true, Ordering::Release);
    });
}

/// The child's consumer: polls the topic in the group, checks every record,
/// commits after each non-empty poll and reports the committed positions.
fn consume(mq: &Broker, plan: &Plan, stop: &AtomicBool) {
    let mut c = mq
        .consumer(
            ConsumerConfig::group(GROUP)
                .enable_auto_commit(false)
                .max_poll_records(plan.poll_max as usize),
        )
        .expect("child: consumer");
    c.subscribe(&[TOPIC]).expect("child: subscribe");
    let mut next: Vec<Option<u64>> = vec![None; PARTITIONS as usize];
    while !stop.load(Ordering::Acquire) {
        let batch = c.poll(Duration::from_millis(10)).expect("child: poll");
        if batch.is_empty() {
            continue;
        }
        for m in &batch {
            let p = m.partition() as usize;
            match next.get(p) {
                None => say(format_args!("BAD consumed unknown partition {p}")),
                Some(Some(want)) if *want != m.offset() => say(format_args!(
                    "BAD consumer read {p}/{} after {p}/{}",
                    m.offset(),
                    want - 1
                )),
                _ => {}
            }
            if let Some(n) = next.get_mut(p) {
                *n = Some(m.offset() + 1);
            }
            if let Err(e) = check_message(m) {
                say(format_args!("BAD consumer: {e}"));
            }
        }
        let mut positions = Vec::new();
        for (t, p) in c.assignment() {
            positions.push((p, c.position(&t, p).expect("child: position")));
        }
        c.commit().expect("child: commit");
        let mut line = String::from("COMMIT");
        for (p, o) in positions {
            let _ = write!(line, " {p}:{o}");
        }
        say(format_args!("{line}"));
    }
}

/// A small PRNG for the kill delays and plans (splitmix64).
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self.0.wrapping_add(1);
        lo + mix(self.0) % (hi - lo)
    }
}

/// A growable bit set.
#[derive(Debug, Default, Clone)]
struct Bits(Vec<u64>);

impl Bits {
    fn get(&self, i: u64) -> bool {
        self.0
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn set(&mut self, i: u64) {
        let w = (i / 64) as usize;
        if w >= self.0.len() {
            self.0.resize(w + 1, 0);
        }
        self.0[w] |= 1 << (i % 64);
    }
}

/// What is known of one stream's records on disk.
#[derive(Debug, Default, Clone)]
struct Stream {
    /// Record numbers present on disk.
    present: Bits,
    /// Per partition, the highest record number on disk.
    max_in: Vec<Option<u64>>,
    /// Anonymous: where the application resumes (its first record not
    /// acknowledged).
    next: u64,
}

impl Stream {
    /// Whether a re-send of `n` to partition `p` is a duplicate: at or below
    /// the stream's last sequence there.
    fn is_dup(&self, p: u32, n: u64) -> bool {
        self.max_in[p as usize].is_some_and(|m| n <= m)
    }
}

/// What a child printed.
#[derive(Debug, Default)]
struct Report {
    last: Option<i64>,
    acks: Vec<(u32, u64, u64, bool)>,
    flushed: u64,
    /// Per partition, the highest offset a returned commit covered.
    committed: Vec<Option<u64>>,
    commit_entries: u64,
    bad: Vec<String>,
}

impl Report {
    fn parse(lines: &[String]) -> Result<Report, String> {
        let mut r = Report {
            committed: vec![None; PARTITIONS as usize],
            ..Report::default()
        };
        for line in lines {
            let l = line.trim_start_matches("test crash_child ... ");
            let bad = || format!("bad line {line:?}");
            let nums = |rest: &str| -> Result<Vec<u64>, String> {
                rest.split(' ')
                    .map(|x| x.parse::<u64>().map_err(|_| bad()))
                    .collect()
            };
            if let Some(rest) = l.strip_prefix("LAST ") {
                r.last = Some(rest.parse().map_err(|_| bad())?);
            } else if let Some(rest) = l.strip_prefix("ACK ") {
                match nums(rest)?[..] {
                    [p, o, id, dup] if dup <= 1 => r.acks.push((p as u32, o, id, dup == 1)),
                    _ => return Err(bad()),
                }
            } else if let Some(rest) = l.strip_prefix("FLUSHED ") {
                let n: u64 = rest.parse().map_err(|_| bad())?;
                if n < r.flushed {
                    return Err(format!("flush counts went back: {line:?}"));
                }
                r.flushed = n;
            } else if let Some(rest) = l.strip_prefix("COMMIT") {
                for entry in rest.split_whitespace() {
                    let (p, o) = entry.split_once(':').ok_or_else(bad)?;
                    let (p, o): (usize, u64) =
                        (p.parse().map_err(|_| bad())?, o.parse().map_err(|_| bad())?);
                    let slot = r.committed.get_mut(p).ok_or_else(bad)?;
                    *slot = Some(slot.map_or(o, |c| c.max(o)));
                    r.commit_entries += 1;
                }
            } else if let Some(rest) = l.strip_prefix("BAD ") {
                r.bad.push(rest.to_owned());
            }
        }
        Ok(r)
    }
}

/// What the parent knows about the directory between cycles, and the
/// tallies of the soak.
#[derive(Debug, Default)]
pub struct Soak {
    /// Per partition, the record id at each offset.
    ids: Vec<Vec<u64>>,
    streams: Vec<Stream>,
    /// Per partition, the lowest offset the group's commit may have:
    /// the highest commit reported done or seen on disk.
    commit_floor: Vec<u64>,
    /// Cycles run.
    pub cycles: u64,
    /// Cycles per durability level (`acks=0`, `1`, `all`) and producer
    /// (anonymous, named).
    pub by_mode: [[u64; 2]; 3],
    /// Cycles killed without waiting for the child to be ready.
    pub early_kills: u64,
    /// Acknowledged records checked, summed over cycles.
    pub acked_checked: u64,
    /// Records of the anonymous application found twice (re-sent after a
    /// crash though written before it: allowed, counted).
    pub anon_duplicates: u64,
    /// Re-sent sequences of named producers dropped as duplicates (checked
    /// not to be written).
    pub dropped: u64,
    /// Committed offsets reported by children and checked on disk.
    pub commits_checked: u64,
    /// Everything that was wrong.
    pub violations: Vec<String>,
    /// Violations beyond the 1,000 kept.
    pub violations_dropped: u64,
}

impl Soak {
    /// Prepares `dir` (creating the topic, or checking what an earlier soak
    /// left there and resuming after it).
    pub fn new(dir: &Path) -> Soak {
        let mut soak = Soak {
            ids: vec![Vec::new(); PARTITIONS as usize],
            streams: vec![
                Stream {
                    max_in: vec![None; PARTITIONS as usize],
                    ..Stream::default()
                };
                STREAMS
            ],
            commit_floor: vec![0; PARTITIONS as usize],
            ..Soak::default()
        };
        {
            let mq = Broker::open(dir, verify_config()).expect("open the soak directory");
            match mq.create_topic(TOPIC, topic_config()) {
                Ok(()) | Err(Error::TopicExists(_)) => {}
                Err(e) => panic!("creating the topic: {e}"),
            }
            mq.close().expect("close");
        }
        soak.full_check(dir, "start", true);
        // The anonymous application resumes after everything there.
        let anon = &mut soak.streams[0];
        anon.next = anon.max_in.iter().flatten().max().map_or(0, |m| m + 1);
        soak
    }

    fn violation(&mut self, what: String) {
        if self.violations.len() < 1000 {
            eprintln!("violation: {what}");
            self.violations.push(what);
        } else {
            self.violations_dropped += 1;
        }
    }

    /// Violations found, including those not kept.
    pub fn violation_count(&self) -> u64 {
        self.violations.len() as u64 + self.violations_dropped
    }

    /// The plan of cycle `index`: the durability levels and producers
    /// rotate (acks=0, 1, all with the anonymous producer, then with a
    /// named one, `soak-0` and `soak-1` in turn); the rest comes from `rng`.
    fn plan(&self, index: u64, rng: &mut Rng) -> Plan {
        let combo = index % 6;
        let acks = [Acks::Zero, Acks::One, Acks::All][(combo % 3) as usize];
        let stream = if combo < 3 {
            0
        } else {
            1 + (index / 6) % NAMED
        };
        Plan {
            cycle: index,
            acks,
            stream,
            start: self.streams[0].next,
            window: rng.range(0, 13),
            flush_every: rng.range(1, 65),
            linger_ms: rng.range(0, 4) * 5,
            batch_size: rng.range(1, 33) * 1024,
            poll_max: rng.range(1, 500),
        }
    }

    /// One cycle: start a child from `spawn(dir, plan)`, let it work for a
    /// random 1-50 ms after it is ready (or kill it during start-up, one
    /// cycle in 8), kill it, check the directory.
    pub fn cycle(&mut self, dir: &Path, rng: &mut Rng, spawn: &dyn Fn(&Path, &str) -> Command) {
        let index = self.cycles;
        self.cycles += 1;
        let plan = self.plan(index, rng);
        self.by_mode[acks_index(plan.acks)][usize::from(plan.stream > 0)] += 1;
        let early = rng.range(0, EARLY_KILL_ONE_IN) == 0;
        let delay = if early {
            rng.range(0, 30)
        } else {
            rng.range(1, 51)
        };
        let label = format!("cycle {index} ({})", plan.describe());
        let mut child = spawn(dir, &plan.encode())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawning the child");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut lines = Vec::new();
        let ready = if early {
            self.early_kills += 1;
            std::thread::sleep(Duration::from_millis(delay));
            true
        } else {
            let deadline = Instant::now() + Duration::from_secs(120);
            let ready = loop {
                match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(l) => {
                        let done = l.ends_with("READY");
                        lines.push(l);
                        if done {
                            break true;
                        }
                    }
                    Err(_) => break false,
                }
            };
            if ready {
                std::thread::sleep(Duration::from_millis(delay));
            }
            ready
        };
        // Child::kill sends SIGKILL.
        let _ = child.kill();
        let status = child.wait().expect("waiting for the child");
        reader.join().expect("reader thread");
        lines.extend(rx.try_iter());
        if status.signal() != Some(SIGKILL) {
            self.violation(format!(
                "{label}: the child ended by itself ({status}) before the kill"
            ));
        }
        if !ready {
            self.violation(format!("{label}: the child never got ready"));
        }
        match Report::parse(&lines) {
            Ok(report) => self.verify_cycle(dir, &plan, &label, &report),
            Err(e) => self.violation(format!("{label}: {e}")),
        }
        if self.cycles.is_multiple_of(FULL_CHECK_EVERY) {
            self.full_check(dir, &label, false);
        }
    }

    /// Checks the directory after a cycle run by `plan`, whose child
    /// printed `report`.
    fn verify_cycle(&mut self, dir: &Path, plan: &Plan, label: &str, report: &Report) {
        for b in &report.bad {
            self.violation(format!("{label}: the child saw: {b}"));
        }
        let mq = match Broker::open(dir, verify_config()) {
            Ok(mq) => mq,
            Err(e) => return self.violation(format!("{label}: reopen failed: {e}")),
        };
        let info = match mq.topic(TOPIC) {
            Ok(i) => i,
            Err(e) => return self.violation(format!("{label}: topic: {e}")),
        };
        // The records written during the cycle, per partition.
        let mut new: Vec<Vec<u64>> = vec![Vec::new(); PARTITIONS as usize];
        for p in 0..PARTITIONS {
            let pi = &info.partitions[p as usize];
            if pi.recovery.corruptions != 0 {
                self.violation(format!(
                    "{label}: partition {p}: a crash left corruption: {:?}",
                    pi.recovery
                ));
            }
            let old_len = self.ids[p as usize].len();
            let from = old_len.saturating_sub(OVERLAP);
            let (read, err) = read_ids(&mq, p, from as u64, pi.end_offset);
            if let Some(e) = err {
                self.violation(format!("{label}: partition {p}: {e}"));
            }
            let kept = read.len().min(old_len - from);
            if read[..kept] != self.ids[p as usize][from..from + kept]
                || pi.end_offset < old_len as u64
            {
                self.violation(format!(
                    "{label}: partition {p}: earlier records changed ({old_len} before, end {} now)",
                    pi.end_offset
                ));
            }
            new[p as usize] = read.get(old_len - from..).unwrap_or_default().to_vec();
        }

        let stream = plan.stream;
        let st = self.streams[stream as usize].clone();
        // Where the child started sending, if it got that far.
        let start = if stream == 0 {
            Some(plan.start)
        } else {
            match report.last {
                Some(last) => {
                    let on_disk = st.max_in.iter().flatten().max().map_or(-1, |&m| m as i64);
                    if last != on_disk {
                        self.violation(format!(
                            "{label}: last_sequence() was {last}, the disk holds up to {on_disk}"
                        ));
                    }
                    Some(resume_start(last, plan.window))
                }
                None => None,
            }
        };
        // The i-th record sent, and whether it is written (not a duplicate).
        let sent = |i: u64| start.map(|s| s + i);
        let written = |n: u64| stream == 0 || !st.is_dup(partition_of(record_id(stream, n)), n);

        // Per partition, the new records must be a prefix of what was sent
        // there (duplicates left out).
        for p in 0..PARTITIONS {
            let found = &new[p as usize];
            let mut expected = start
                .into_iter()
                .flat_map(|s| s..)
                .filter(|&n| partition_of(record_id(stream, n)) == p && written(n));
            for (k, &id) in found.iter().enumerate() {
                let want = expected.next();
                if want.map(|n| record_id(stream, n)) != Some(id) {
                    self.violation(format!(
                        "{label}: partition {p}: new record {k} is {id:#x} where {} was due \
                         (not the order sent, or written twice)",
                        want.map_or("nothing".to_owned(), |n| format!(
                            "{:#x}",
                            record_id(stream, n)
                        ))
                    ));
                    break;
                }
            }
        }

        // How many records each partition must hold: the acknowledged ones,
        // plus (acks=1/all) maybe the one in flight.
        let acked = if plan.acks == Acks::Zero {
            if !report.acks.is_empty() {
                self.violation(format!("{label}: ACK lines with acks=0"));
            }
            report.flushed
        } else {
            if report.flushed != 0 {
                self.violation(format!(
                    "{label}: FLUSHED lines with acks={}",
                    acks_name(plan.acks)
                ));
            }
            report.acks.len() as u64
        };
        if acked > 0 && start.is_none() {
            self.violation(format!("{label}: records acknowledged without a LAST line"));
        }
        let mut must = vec![0usize; PARTITIONS as usize];
        for n in (0..acked).filter_map(sent) {
            let p = partition_of(record_id(stream, n));
            if written(n) {
                must[p as usize] += 1;
            } else {
                self.dropped += 1;
            }
        }
        let in_flight = sent(acked)
            .filter(|&n| written(n))
            .map(|n| partition_of(record_id(stream, n)));
        for p in 0..PARTITIONS {
            let (found, must) = (new[p as usize].len(), must[p as usize]);
            let ok = if plan.acks == Acks::Zero {
                found >= must
            } else {
                found == must || (found == must + 1 && in_flight == Some(p))
            };
            if !ok {
                self.violation(format!(
                    "{label}: partition {p}: {must} acknowledged records due, {found} written"
                ));
            }
        }

        // Update what is known, then check the acknowledgements against it.
        for p in 0..PARTITIONS {
            for &id in &new[p as usize] {
                self.ids[p as usize].push(id);
                let s = stream_of(id);
                let Some(rec) = self.streams.get_mut(s as usize) else {
                    self.violation(format!("{label}: partition {p}: unknown record {id:#x}"));
                    continue;
                };
                let n = n_of(id);
                let seen = rec.present.get(n);
                rec.present.set(n);
                let m = &mut rec.max_in[p as usize];
                *m = Some(m.map_or(n, |m| m.max(n)));
                if seen {
                    if s == 0 {
                        self.anon_duplicates += 1;
                    } else {
                        self.violation(format!(
                            "{label}: sequence {n} of soak-{} is written twice",
                            s - 1
                        ));
                    }
                }
            }
        }
        self.acked_checked += acked;
        for (i, &(p, o, id, dup)) in report.acks.iter().enumerate() {
            if sent(i as u64).map(|n| record_id(stream, n)) != Some(id) {
                self.violation(format!(
                    "{label}: acknowledgement {i} is for {id:#x}, not the record sent"
                ));
                break;
            }
            let n = n_of(id);
            if p != partition_of(id) {
                self.violation(format!("{label}: {id:#x} acknowledged in partition {p}"));
            }
            if dup == written(n) {
                self.violation(format!(
                    "{label}: {id:#x} acknowledged with duplicate={dup}, sequences on disk call for {}",
                    !dup
                ));
            }
            let got = self.ids.get(p as usize).and_then(|s| s.get(o as usize));
            if (!dup || o != RecordMetadata::UNKNOWN_OFFSET) && got != Some(&id) {
                self.violation(format!(
                    "{label}: acknowledged record {id:#x} (duplicate={dup}) at {p}/{o} not found \
                     (found {got:?})"
                ));
            }
        }
        if stream == 0 {
            if let Some(s) = start {
                self.streams[0].next = s + acked;
            }
        }

        // The group's committed offsets.
        match mq.describe_group(GROUP) {
            Ok(g) => {
                let mut on_disk = vec![None; PARTITIONS as usize];
                for (t, p, c) in &g.committed {
                    match on_disk.get_mut(*p as usize) {
                        Some(slot) if t == TOPIC => *slot = Some(c.offset),
                        _ => self.violation(format!("{label}: commit for unknown {t}/{p}")),
                    }
                }
                self.commits_checked += report.commit_entries;
                for (p, &on_disk) in on_disk.iter().enumerate() {
                    let end = info.partitions[p].end_offset;
                    let floor = self.commit_floor[p].max(report.committed[p].unwrap_or(0));
                    let reported = report.committed[p].is_some() || self.commit_floor[p] > 0;
                    match on_disk {
                        Some(c) if c > end => self.violation(format!(
                            "{label}: partition {p}: committed offset {c} is ahead of the end {end}"
                        )),
                        Some(c) if c < floor => self.violation(format!(
                            "{label}: partition {p}: committed offset {c} is behind {floor}, \
                             committed before"
                        )),
                        None if reported => self.violation(format!(
                            "{label}: partition {p}: the committed offset ({floor}) is gone"
                        )),
                        _ => {}
                    }
                    self.commit_floor[p] = floor.max(on_disk.unwrap_or(0));
                }
            }
            Err(e) => self.violation(format!("{label}: describe_group: {e}")),
        }
        if let Err(e) = mq.close() {
            self.violation(format!("{label}: close: {e}"));
        }
    }

    /// Re-reads the whole topic: every record intact, the ones known
    /// unchanged, each named producer's sequences increasing per partition
    /// (so never written twice). With `rebuild`, learns what is there
    /// instead of comparing (at the start).
    fn full_check(&mut self, dir: &Path, label: &str, rebuild: bool) {
        let mq = match Broker::open(dir, verify_config()) {
            Ok(mq) => mq,
            Err(e) => return self.violation(format!("{label}: full check: reopen failed: {e}")),
        };
        let info = match mq.topic(TOPIC) {
            Ok(i) => i,
            Err(e) => return self.violation(format!("{label}: full check: topic: {e}")),
        };
        for p in 0..PARTITIONS {
            let end = info.partitions[p as usize].end_offset;
            let (read, err) = read_ids(&mq, p, 0, end);
            if let Some(e) = err {
                self.violation(format!("{label}: full check: partition {p}: {e}"));
            }
            let mut last = [None; STREAMS];
            for (o, &id) in read.iter().enumerate() {
                let s = stream_of(id) as usize;
                if s == 0 {
                    continue;
                }
                let Some(prev) = last.get_mut(s) else {
                    self.violation(format!(
                        "{label}: full check: unknown record {id:#x} at {p}/{o}"
                    ));
                    continue;
                };
                if prev.is_some_and(|m| m >= n_of(id)) {
                    self.violation(format!(
                        "{label}: full check: partition {p}: sequence {} of soak-{} at offset {o} \
                         after {}",
                        n_of(id),
                        s - 1,
                        prev.unwrap_or_default()
                    ));
                }
                *prev = Some(n_of(id));
            }
            if rebuild {
                for &id in &read {
                    if let Some(st) = self.streams.get_mut(stream_of(id) as usize) {
                        st.present.set(n_of(id));
                        let m = &mut st.max_in[p as usize];
                        *m = Some(m.map_or(n_of(id), |m| m.max(n_of(id))));
                    }
                }
                self.ids[p as usize] = read;
            } else if read != self.ids[p as usize] {
                let at = read
                    .iter()
                    .zip(&self.ids[p as usize])
                    .position(|(a, b)| a != b)
                    .unwrap_or(read.len().min(self.ids[p as usize].len()));
                self.violation(format!(
                    "{label}: full check: partition {p} differs from offset {at} ({} records, {} \
                     known)",
                    read.len(),
                    self.ids[p as usize].len()
                ));
            }
        }
        if rebuild {
            if let Ok(g) = mq.describe_group(GROUP) {
                for (t, p, c) in g.committed {
                    if let Some(f) = self.commit_floor.get_mut(p as usize).filter(|_| t == TOPIC) {
                        *f = c.offset;
                    }
                }
            }
        }
        if let Err(e) = mq.close() {
            self.violation(format!("{label}: full check: close: {e}"));
        }
    }

    /// The final check: re-reads the whole topic once more.
    pub fn finish(&mut self, dir: &Path) {
        if !self.cycles.is_multiple_of(FULL_CHECK_EVERY) {
            self.full_check(dir, "end", false);
        }
    }

    /// Records on disk.
    pub fn records(&self) -> u64 {
        self.ids.iter().map(|p| p.len() as u64).sum()
    }

    /// The summary line.
    pub fn summary(&self) -> String {
        let mode = |a: usize| {
            format!(
                "acks={} {}+{}",
                ["0", "1", "all"][a],
                self.by_mode[a][0],
                self.by_mode[a][1]
            )
        };
        format!(
            "crash soak: {} cycles ({}, {}, {} anonymous+named; {} killed during start-up), \
             {} acknowledged records checked, {} records on disk, duplicates: {} seen \
             (anonymous, allowed) / {} dropped (named), {} commits checked, {} violations",
            self.cycles,
            mode(0),
            mode(1),
            mode(2),
            self.early_kills,
            self.acked_checked,
            self.records(),
            self.anon_duplicates,
            self.dropped,
            self.commits_checked,
            self.violation_count()
        )
    }
}

/// SIGKILL's number (9 on every Unix).
const SIGKILL: i32 = 9;

fn verify_config() -> Config {
    Config::default()
        .prefault(false)
        .retention_check_interval_ms(0)
}

/// The record ids of partition `p` from offset `from` to `end`, each record
/// checked against the one its id stands for; with the first problem met.
fn read_ids(mq: &Broker, p: u32, from: u64, end: u64) -> (Vec<u64>, Option<String>) {
    let mut ids: Vec<u64> = Vec::new();
    let res = (|| {
        let mut c = mq
            .consumer(ConsumerConfig::default().max_poll_records(100_000))
            .map_err(|e| e.to_string())?;
        c.assign(&[(TOPIC, p)]).map_err(|e| e.to_string())?;
        c.seek(TOPIC, p, from).map_err(|e| e.to_string())?;
        while from + (ids.len() as u64) < end {
            let at = from + ids.len() as u64;
            let batch = c
                .poll(Duration::ZERO)
                .map_err(|e| format!("read at offset {at}: {e}"))?;
            if batch.is_empty() {
                return Err(format!("read stopped at {at} of {end}"));
            }
            for m in &batch {
                let at = from + ids.len() as u64;
                if m.offset() != at {
                    return Err(format!("offset {} where {at} was expected", m.offset()));
                }
                ids.push(check_message(m)?);
            }
        }
        Ok(())
    })();
    (ids, res.err())
}
