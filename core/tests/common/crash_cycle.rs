//! `kill -9` cycles: a child process appends with `acks=1` and reports each
//! acknowledged record; the parent kills it at a random moment, reopens the
//! data directory and checks that every acknowledged record is there, intact
//! and in order, with at most the one unacknowledged record beyond.
//!
//! Shared by `tests/crash.rs` and `examples/crash_soak.rs` (included with
//! `#[path]`), so it depends on nothing but `mqlite` and `std`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mqlite::{
    partition_for_key, Broker, Config, ConsumerConfig, Error, Header, ProducerConfig, Record,
    TopicConfig,
};

/// The topic the cycles write to.
pub const TOPIC: &str = "crash";
/// Its partition count.
pub const PARTITIONS: u32 = 3;
/// How long a child appends at most if nobody kills it (no orphans).
const CHILD_LIFETIME: Duration = Duration::from_secs(60);

/// Small segments, so that cycles often kill during a roll (but not so
/// small that 50 cycles need more file descriptors than `ulimit -n`).
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

/// The record with sequence number `seq` (`cycle << 32 | n`), and the
/// partition it must land in. Everything is derived from `seq`, which the
/// value starts with, so any record found on disk can be checked.
pub fn record_for(seq: u64) -> (Record, u32) {
    let h = mix(seq);
    let key = format!("key-{seq}");
    let len = match h % 16 {
        0 => (h >> 8) % 3000,
        1 => 0,
        _ => (h >> 8) % 200,
    } as usize;
    let mut value = seq.to_le_bytes().to_vec();
    value.extend((0..len).map(|i| (mix(h ^ i as u64) >> 7) as u8));
    let mut r = Record::new(TOPIC)
        .key(key.clone())
        .value(value)
        .timestamp(1_700_000_000_000 + (seq & 0xffff_ffff) as i64);
    if seq.is_multiple_of(5) {
        r = r
            .header("seq", seq.to_string())
            .header("ü-name", (h % 251).to_le_bytes().to_vec());
    }
    let partition = if h & (1 << 40) != 0 {
        let p = ((h >> 20) % PARTITIONS as u64) as u32;
        r = r.partition(p);
        p
    } else {
        partition_for_key(key.as_bytes(), PARTITIONS)
    };
    (r, partition)
}

/// The child: opens `dir`, prints `READY`, then appends records `cycle << 32
/// | 0, 1, 2...` and prints `ACK <partition> <offset> <seq>` after each send
/// returns, until killed.
pub fn child(dir: &Path, cycle: u64) {
    let mq =
        Broker::open(dir, Config::default().retention_check_interval_ms(0)).expect("child: open");
    let producer = mq
        .producer(ProducerConfig::default())
        .expect("child: producer");
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY")
        .and_then(|_| out.flush())
        .expect("child: stdout");
    let started = Instant::now();
    for n in 0u64.. {
        let seq = cycle << 32 | n;
        let (record, partition) = record_for(seq);
        let md = producer.send(record).expect("child: send");
        assert_eq!(md.partition, partition);
        writeln!(out, "ACK {} {} {seq}", md.partition, md.offset)
            .and_then(|_| out.flush())
            .expect("child: stdout");
        if started.elapsed() > CHILD_LIFETIME {
            break;
        }
    }
}

/// A small PRNG for the kill delays (splitmix64).
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self.0.wrapping_add(1);
        lo + mix(self.0) % (hi - lo)
    }
}

/// What the parent knows about the directory between cycles.
#[derive(Debug, Default)]
pub struct Soak {
    /// Per partition, the sequence number at each offset.
    seqs: Vec<Vec<u64>>,
    /// The next cycle number (sequence numbers never repeat).
    next_cycle: u64,
    /// Cycles run.
    pub cycles: u64,
    /// Acknowledged records checked, summed over cycles.
    pub acked_checked: u64,
    /// Everything that was wrong.
    pub violations: Vec<String>,
}

impl Soak {
    /// Prepares `dir` (creating the topic, or checking what an earlier soak
    /// left there).
    pub fn new(dir: &Path) -> Soak {
        let mut soak = Soak {
            seqs: vec![Vec::new(); PARTITIONS as usize],
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
        soak.verify(dir, u64::MAX, &[]);
        soak.next_cycle = soak
            .seqs
            .iter()
            .flatten()
            .map(|s| (s >> 32) + 1)
            .max()
            .unwrap_or(0);
        soak
    }

    fn violation(&mut self, what: String) {
        if self.violations.len() < 1000 {
            eprintln!("violation: {what}");
            self.violations.push(what);
        }
    }

    /// One cycle: start a child from `spawn(dir, cycle)`, let it append for
    /// a random 5-50 ms after it is ready, kill it, check the directory.
    pub fn cycle(&mut self, dir: &Path, rng: &mut Rng, spawn: &dyn Fn(&Path, u64) -> Command) {
        let cycle = self.next_cycle;
        self.next_cycle += 1;
        self.cycles += 1;
        let mut child = spawn(dir, cycle)
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
        let deadline = Instant::now() + Duration::from_secs(120);
        let ready = loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                // libtest may print `test crash_child ... ` before it.
                Ok(l) if l.ends_with("READY") => break true,
                Ok(l) => lines.push(l),
                Err(_) => break false,
            }
        };
        if ready {
            std::thread::sleep(Duration::from_millis(rng.range(5, 51)));
        }
        // Child::kill sends SIGKILL.
        let _ = child.kill();
        let status = child.wait().expect("waiting for the child");
        reader.join().expect("reader thread");
        lines.extend(rx.try_iter());
        if !ready {
            self.violation(format!(
                "cycle {cycle}: the child never got ready ({status})"
            ));
            return;
        }
        let mut acks = Vec::new();
        for l in lines.iter().filter(|l| l.starts_with("ACK ")) {
            let f: Vec<u64> = l[4..].split(' ').filter_map(|x| x.parse().ok()).collect();
            match f[..] {
                [p, o, seq] => acks.push((p as u32, o, seq)),
                _ => self.violation(format!("cycle {cycle}: bad line {l:?}")),
            }
        }
        self.verify(dir, cycle, &acks);
    }

    /// Reads the whole topic and checks it against what is known.
    fn verify(&mut self, dir: &Path, cycle: u64, acks: &[(u32, u64, u64)]) {
        let mq = match Broker::open(dir, verify_config()) {
            Ok(mq) => mq,
            Err(e) => return self.violation(format!("cycle {cycle}: reopen failed: {e}")),
        };
        let info = match mq.topic(TOPIC) {
            Ok(i) => i,
            Err(e) => return self.violation(format!("cycle {cycle}: topic: {e}")),
        };
        let mut found_this_cycle = Vec::new();
        for p in 0..PARTITIONS {
            let pi = &info.partitions[p as usize];
            if pi.recovery.corruptions != 0 {
                self.violation(format!(
                    "cycle {cycle}: partition {p}: a crash left corruption: {:?}",
                    pi.recovery
                ));
            }
            let seqs = match read_seqs(&mq, p, pi.end_offset) {
                Ok(s) => s,
                Err(e) => {
                    self.violation(format!("cycle {cycle}: partition {p}: {e}"));
                    continue;
                }
            };
            let old = std::mem::take(&mut self.seqs[p as usize]);
            if !seqs.starts_with(&old) {
                self.violation(format!(
                    "cycle {cycle}: partition {p}: earlier records changed ({} before, {} now)",
                    old.len(),
                    seqs.len()
                ));
            }
            for &seq in seqs.get(old.len()..).unwrap_or_default() {
                if cycle != u64::MAX && seq >> 32 != cycle {
                    self.violation(format!("cycle {cycle}: partition {p}: new record {seq:#x}"));
                }
                found_this_cycle.push(seq & 0xffff_ffff);
            }
            self.seqs[p as usize] = seqs;
        }
        for &(p, o, seq) in acks {
            self.acked_checked += 1;
            let got = self.seqs.get(p as usize).and_then(|s| s.get(o as usize));
            if got != Some(&seq) {
                self.violation(format!(
                    "cycle {cycle}: acknowledged record {seq:#x} at {p}/{o} not found (found {got:?})"
                ));
            }
        }
        if cycle != u64::MAX {
            // This cycle's records are 0..k in send order; k is the number of
            // acknowledged ones, or one more (sent but killed before its ACK).
            found_this_cycle.sort_unstable();
            let k = found_this_cycle.len() as u64;
            let contiguous = found_this_cycle.iter().copied().eq(0..k);
            let n = acks.len() as u64;
            if !contiguous || !(k == n || k == n + 1) {
                self.violation(format!(
                    "cycle {cycle}: {n} acknowledged, {k} found on disk, contiguous: {contiguous}"
                ));
            }
        }
        if let Err(e) = mq.close() {
            self.violation(format!("cycle {cycle}: close: {e}"));
        }
    }

    /// The summary line.
    pub fn summary(&self) -> String {
        format!(
            "crash soak: {} cycles, {} acknowledged messages checked, {} violations",
            self.cycles,
            self.acked_checked,
            self.violations.len()
        )
    }
}

fn verify_config() -> Config {
    Config::default()
        .prefault(false)
        .retention_check_interval_ms(0)
}

/// The sequence numbers of partition `p`, offset by offset, each record
/// checked against the one its sequence number stands for.
fn read_seqs(mq: &Broker, p: u32, end: u64) -> Result<Vec<u64>, String> {
    let mut c = mq
        .consumer(ConsumerConfig::default().max_poll_records(100_000))
        .map_err(|e| e.to_string())?;
    c.assign(&[(TOPIC, p)]).map_err(|e| e.to_string())?;
    let mut seqs: Vec<u64> = Vec::new();
    while (seqs.len() as u64) < end {
        let batch = c
            .poll(Duration::ZERO)
            .map_err(|e| format!("read at offset {}: {e}", seqs.len()))?;
        if batch.is_empty() {
            return Err(format!("read stopped at {} of {end}", seqs.len()));
        }
        for m in &batch {
            let at = seqs.len() as u64;
            if m.offset() != at {
                return Err(format!("offset {} where {at} was expected", m.offset()));
            }
            let Some(seq) = m
                .value()
                .and_then(|v| v.get(..8))
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            else {
                return Err(format!("record {at} has no sequence number"));
            };
            let (want, partition) = record_for(seq);
            let headers: Vec<Header> = m.headers();
            if partition != p
                || m.key() != want.key.as_deref()
                || m.value() != want.value.as_deref()
                || headers != want.headers
                || Some(m.timestamp()) != want.timestamp
            {
                return Err(format!(
                    "record {at} (seq {seq:#x}) differs from what was sent"
                ));
            }
            if seqs.last().is_some_and(|&last| last >= seq) {
                return Err(format!("record {at} (seq {seq:#x}) is out of order"));
            }
            seqs.push(seq);
        }
    }
    Ok(seqs)
}
