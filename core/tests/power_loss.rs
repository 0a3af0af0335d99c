//! Simulated power loss, and failed fsyncs.
//!
//! `kill -9` keeps the page cache, so it cannot show what `acks=all`
//! protects against. Here a child process appends with `acks=all` to
//! partition 0 and `acks=1` to partition 1, and from four threads at once
//! with `acks=all` to partition 2 (their flushes shared), while a sync hook
//! (`mqlite::faults`) records, for every file, how far each completed
//! `msync` made it durable. The parent kills the child at a random moment,
//! then models the power loss on the files: every 4 KiB page past a file's
//! durable end that the child wrote is kept, reverted to what it held before
//! (zeros: segment and index files are allocated ahead of their data), torn (some 512-byte
//! sectors new, the others old) or filled with garbage. Then it reopens the
//! directory and checks that every record acknowledged with `acks=all` is
//! there, that each partition holds an intact prefix of what was sent, and
//! that reading never returns damaged data.
//!
//! Cycles: 30 by default, `MQLITE_POWER_CYCLES=N` for more;
//! `MQLITE_POWER_SEED` replays a printed seed.
#![allow(clippy::unwrap_used)]

#[path = "common/power.rs"]
mod power;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqlite::faults::set_sync_hook;
use mqlite::{
    Acks, BorrowedRecord, Broker, Config, ConsumerConfig, Error, ProducerConfig, Record,
    TopicConfig,
};
use power::{
    child_setup, durable_marks, env_or, mix, power_out, run_and_kill, say_ready, seed, Rng,
};

const TOPIC: &str = "power";
const CHILD_DIR: &str = "MQLITE_POWER_CHILD_DIR";
const CHILD_CYCLE: &str = "MQLITE_POWER_CHILD_CYCLE";
const MARKS: &str = "sync-marks.txt";
/// The partition four threads send to at once with `acks=all`.
const SHARED: u32 = 2;
const SHARED_SENDERS: u64 = 4;

/// The sequence number of record `i` of sender thread `t` to [`SHARED`] in
/// `cycle`.
fn shared_seq(cycle: u64, t: u64, i: u64) -> u64 {
    cycle << 32 | 1 << 31 | t << 24 | i
}

fn config() -> Config {
    Config::default()
        .prefault(false)
        .retention_check_interval_ms(0)
}

/// The value of record `seq`: its sequence number, then bytes derived from
/// it (so any record read back can be checked).
fn value_for(seq: u64) -> Vec<u8> {
    let len = (mix(seq) % 700) as usize;
    let mut v = seq.to_le_bytes().to_vec();
    v.extend((0..len).map(|i| mix(seq ^ ((i as u64) << 40)) as u8));
    v
}

/// The child's sends in order: the partition and the record numbers of each
/// (the low half of the records' sequence numbers). Sends alternate between
/// partition 0 (`acks=all`) and 1 (`acks=1`); every eighth send to each is a
/// batch of 256 records (over `FILE_WRITE_MIN`, so an `acks=all` one is
/// written with pwrite instead of through the map).
fn schedule() -> impl Iterator<Item = (u32, std::ops::Range<u64>)> {
    (0u64..).scan(0u64, |next, n| {
        let count = if n % 16 < 2 { 256 } else { 1 };
        let first = *next;
        *next += count;
        Some(((n % 2) as u32, first..first + count))
    })
}

/// The child side (a no-op in a normal test run): appends alternately to
/// partition 0 with `acks=all` and to partition 1 with `acks=1`, and from
/// [`SHARED_SENDERS`] threads to [`SHARED`] with `acks=all`, printing
/// `ACK <partition> <offset> <seq>` after each send returns, and writes a
/// line `<path>\t<end>` to the marks file after each completed msync.
#[test]
fn power_child() {
    let Some((dir, cycle)) = child_setup(CHILD_DIR, CHILD_CYCLE, MARKS) else {
        return;
    };
    let mq = Broker::open(&dir, config()).unwrap();
    let all = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    let one = mq
        .producer(ProducerConfig::default().acks(Acks::One))
        .unwrap();
    say_ready();
    let started = Instant::now();
    let ack = |p: u32, offset: u64, seq: u64| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ACK {p} {offset} {seq}").unwrap();
        out.flush().unwrap();
    };
    std::thread::scope(|s| {
        for t in 0..SHARED_SENDERS {
            let (all, ack) = (&all, &ack);
            s.spawn(move || {
                for i in 0.. {
                    let seq = shared_seq(cycle, t, i);
                    let md = all
                        .send(Record::new(TOPIC).partition(SHARED).value(value_for(seq)))
                        .unwrap();
                    ack(SHARED, md.offset, seq);
                    if started.elapsed() > Duration::from_secs(60) {
                        break;
                    }
                }
            });
        }
        for (p, range) in schedule() {
            let producer = if p == 0 { &all } else { &one };
            let seqs: Vec<u64> = range.map(|i| cycle << 32 | i).collect();
            let count = seqs.len();
            let values: Vec<Vec<u8>> = seqs.iter().map(|&s| value_for(s)).collect();
            let mds = if count == 1 {
                vec![producer
                    .send(Record::new(TOPIC).partition(p).value(values[0].clone()))
                    .unwrap()]
            } else {
                let records: Vec<BorrowedRecord<'_>> = values
                    .iter()
                    .map(|v| BorrowedRecord {
                        topic: TOPIC,
                        partition: Some(p),
                        value: Some(v),
                        ..BorrowedRecord::default()
                    })
                    .collect();
                producer.send_batch(&records).unwrap()
            };
            for (md, seq) in mds.iter().zip(&seqs) {
                ack(p, md.offset, *seq);
            }
            if started.elapsed() > Duration::from_secs(60) {
                break;
            }
        }
    });
}

/// The data files of the partitions and their contents.
fn data_files(dir: &Path) -> HashMap<PathBuf, Vec<u8>> {
    let mut out = HashMap::new();
    for p in 0..=SHARED {
        let pdir = dir.join("topics").join(TOPIC).join(p.to_string());
        for e in std::fs::read_dir(&pdir).unwrap().flatten() {
            let path = e.path();
            if path
                .extension()
                .is_some_and(|x| x == "log" || x == "idx" || x == "tix")
            {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Reads partition `p` from the start: the sequence numbers, each record
/// checked against its value.
fn read_partition(mq: &Broker, p: u32) -> Result<Vec<u64>, String> {
    let end = mq.topic(TOPIC).map_err(|e| e.to_string())?.partitions[p as usize].end_offset;
    let mut c = mq
        .consumer(ConsumerConfig::default().max_poll_records(10_000))
        .map_err(|e| e.to_string())?;
    c.assign(&[(TOPIC, p)]).map_err(|e| e.to_string())?;
    let mut seqs = Vec::new();
    while (seqs.len() as u64) < end {
        let msgs = c.poll(Duration::ZERO).map_err(|e| e.to_string())?;
        if msgs.is_empty() {
            return Err(format!("read stopped at {} of {end}", seqs.len()));
        }
        for m in msgs {
            if m.offset() != seqs.len() as u64 {
                return Err(format!(
                    "offset {} where {} was expected",
                    m.offset(),
                    seqs.len()
                ));
            }
            let v = m.value().unwrap_or_default();
            let seq = u64::from_le_bytes(v.get(..8).ok_or("short value")?.try_into().unwrap());
            if v != value_for(seq) {
                return Err(format!("record {} (seq {seq:#x}) is damaged", m.offset()));
            }
            seqs.push(seq);
        }
    }
    Ok(seqs)
}

#[test]
fn acks_all_survives_simulated_power_loss() {
    let cycles = env_or("MQLITE_POWER_CYCLES", 30);
    let seed = seed("MQLITE_POWER_SEED", "power-loss");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    {
        let mq = Broker::open(&dir, config()).unwrap();
        mq.create_topic(
            TOPIC,
            // Room for about three of the child's 256-record batches.
            TopicConfig::new(SHARED + 1)
                .segment_bytes(256 * 1024)
                .index_interval_bytes(512),
        )
        .unwrap();
        mq.close().unwrap();
    }
    let mut known: [Vec<u64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let (mut acked_all, mut acked_one, mut pages_changed, mut truncations) = (0u64, 0u64, 0, 0u64);
    let mut acked_shared = 0u64;
    let mut violations = Vec::new();
    for cycle in 0..cycles {
        let before = data_files(&dir);
        let _ = std::fs::remove_file(tmp.path().join(MARKS));
        let lines = run_and_kill(
            "power_child",
            &[
                (CHILD_DIR, dir.display().to_string()),
                (CHILD_CYCLE, cycle.to_string()),
            ],
            Duration::from_millis(5 + rng.below(60)),
        );

        // The power goes out.
        let marks = durable_marks(&tmp.path().join(MARKS));
        let after = data_files(&dir);
        pages_changed += power_out(after.keys(), &before, &marks, &mut rng);

        let acks: Vec<(u32, u64, u64)> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("ACK "))
            .map(|l| {
                let f: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
                (f[0] as u32, f[1], f[2])
            })
            .collect();
        let mq = match Broker::open(&dir, config()) {
            Ok(mq) => mq,
            Err(e) => {
                violations.push(format!("cycle {cycle}: reopen failed: {e}"));
                break;
            }
        };
        let info = mq.topic(TOPIC).unwrap();
        for p in 0..=SHARED {
            truncations += info.partitions[p as usize].recovery.torn_tails
                + info.partitions[p as usize].recovery.corruptions;
            let seqs = match read_partition(&mq, p) {
                Ok(s) => s,
                Err(e) => {
                    violations.push(format!("cycle {cycle}: partition {p}: {e}"));
                    continue;
                }
            };
            let old = &known[p as usize];
            if !seqs.starts_with(old) {
                let at = old.iter().zip(&seqs).take_while(|(a, b)| a == b).count();
                violations.push(format!(
                    "cycle {cycle}: partition {p}: records of earlier cycles changed: {} \
                     before, {} now, first difference at offset {at}: {:?} became {:?}",
                    old.len(),
                    seqs.len(),
                    old.get(at),
                    seqs.get(at)
                ));
            }
            // This cycle's records on disk: a prefix of what was sent (of
            // what each thread sent, for the shared partition).
            let new: Vec<u64> = seqs[old.len().min(seqs.len())..].to_vec();
            if p == SHARED {
                let mut next = [0u64; SHARED_SENDERS as usize];
                let in_order = new.iter().all(|&seq| {
                    let t = (seq >> 24 & 0x7f) as usize;
                    let ok = t < next.len() && seq == shared_seq(cycle, t as u64, next[t]);
                    if ok {
                        next[t] += 1;
                    }
                    ok
                });
                if !in_order {
                    violations.push(format!(
                        "cycle {cycle}: partition {p}: not a prefix of what each thread sent"
                    ));
                }
                for &(_, offset, seq) in acks.iter().filter(|a| a.0 == p) {
                    acked_shared += 1;
                    if seqs.get(offset as usize) != Some(&seq) {
                        violations.push(format!(
                            "cycle {cycle}: acks=all record {seq:#x} at {p}/{offset} lost"
                        ));
                    }
                }
                known[p as usize] = seqs;
                continue;
            }
            let sent: Vec<u64> = schedule()
                .filter(|(sp, _)| *sp == p)
                .flat_map(|(_, range)| range)
                .map(|n| cycle << 32 | n)
                .take(new.len())
                .collect();
            if new != sent {
                violations.push(format!(
                    "cycle {cycle}: partition {p}: not a prefix of what was sent"
                ));
            }
            for &(ap, offset, seq) in acks.iter().filter(|a| a.0 == p) {
                if p == 0 {
                    acked_all += 1;
                    if seqs.get(offset as usize) != Some(&seq) {
                        violations.push(format!(
                            "cycle {cycle}: acks=all record {seq:#x} at {ap}/{offset} lost"
                        ));
                    }
                } else {
                    acked_one += 1;
                }
            }
            known[p as usize] = seqs;
        }
        mq.close().unwrap();
    }
    println!(
        "power loss: {cycles} cycles, {acked_all} acks=all records checked, {acked_shared} more \
         from {SHARED_SENDERS} threads sharing flushes ({acked_one} acks=1 records sent), \
         {pages_changed} pages lost/torn/garbled, {truncations} recovery truncations, {} \
         violations",
        violations.len()
    );
    assert!(
        violations.is_empty(),
        "seed {seed}:\n{}",
        violations.join("\n")
    );
    assert!(acked_all > 0, "no acks=all record was ever acknowledged");
    assert!(
        acked_shared > 0,
        "no shared acks=all record was ever acknowledged"
    );
}

/// A failed fsync poisons the partition: the send that needed it fails
/// with the I/O error, every later append fails with `Poisoned` and writes
/// nothing, other partitions and reads go on, and a reopen clears it.
#[test]
fn failed_fsync_poisons_the_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mq = Broker::open(&dir, config()).unwrap();
    mq.create_topic("f", TopicConfig::new(2)).unwrap();
    let producer = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    for i in 0..10 {
        producer
            .send(Record::new("f").partition(0).value(format!("ok-{i}")))
            .unwrap();
    }
    let victim = dir.join("topics/f/0");
    let failing = victim.clone();
    set_sync_hook(Some(Arc::new(move |path: &Path, _, before| {
        if before && path.starts_with(&failing) {
            Err(std::io::Error::from_raw_os_error(libc::EIO))
        } else {
            Ok(())
        }
    })));
    let res = producer.send(Record::new("f").partition(0).value("lost"));
    let after = producer.send(Record::new("f").partition(0).value("refused"));
    let other = producer.send(Record::new("f").partition(1).value("fine"));
    set_sync_hook(None);
    match res {
        Err(Error::Io { .. }) => {}
        other => panic!("the send whose fsync failed returned {other:?}"),
    }
    assert!(
        matches!(after, Err(Error::Poisoned { partition: 0, .. })),
        "{after:?}"
    );
    assert_eq!(after.unwrap_err().code(), 202);
    other.expect("another partition is not poisoned");
    // Still poisoned after the disk is back: only a reopen clears it.
    assert!(matches!(
        producer.send(Record::new("f").partition(0).value("still")),
        Err(Error::Poisoned { .. })
    ));
    // Earlier data stays readable.
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[("f", 0)]).unwrap();
    let got: Vec<Vec<u8>> = c
        .poll(Duration::from_millis(100))
        .unwrap()
        .iter()
        .map(|m| m.value().unwrap().to_vec())
        .collect();
    assert!(got.len() >= 10, "earlier records unreadable: {}", got.len());
    assert!(got
        .iter()
        .all(|v| v.as_slice() != b"refused" && v.as_slice() != b"still"));
    drop(c);
    drop(producer);
    let _ = mq.close();
    drop(mq);
    // The other tests of this file spawn child processes: a child forked
    // while the directory was open shares its lock until it execs, which a
    // loaded machine can delay. Wait for that, never for more than 10 s.
    let reopened = Instant::now();
    let mq = loop {
        match Broker::open(&dir, config()) {
            Err(Error::Locked { .. }) if reopened.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(10));
            }
            r => break r.unwrap(),
        }
    };
    let producer = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    producer
        .send(Record::new("f").partition(0).value("after reopen"))
        .expect("a reopen clears the poison");
}
