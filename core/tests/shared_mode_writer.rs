//! The writer of a shared directory seen from other processes: killed with
//! `-9` at random moments while reader processes read (readers never see a
//! torn or reordered batch, a new writer process takes the role over, and
//! every acknowledged record is there afterwards), and appends waking a
//! consumer parked in `poll` in another process (no wake-up lost: the
//! consumer never sleeps through available data past the 100 ms safety
//! timeout).
//!
//! Short in an ordinary run; `MQLITE_SOAK=1` (`make soak`) kills writers
//! for 60 s and appends a million one-record batches.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use mqlite::{Acks, BorrowedRecord, Broker, ConsumerConfig, ProducerConfig, Record, TopicConfig};
use shared_mode_procs::{
    check_payload, end_offset, now_us, payload, pick, read_all, read_lines, readonly, request_stop,
    shared, spawn, ChildEnv, Dirs, Journal, Rng,
};

const READY: Duration = Duration::from_secs(30);

/// The roles of this file's child processes.
#[test]
#[ignore = "a role run in a child process by the other tests of this file"]
fn child() {
    let Some(env) = ChildEnv::get() else {
        return;
    };
    match env.role.as_str() {
        "batch_writer" => batch_writer(&env),
        "batch_reader" => batch_reader(&env),
        "wake_writer" => wake_writer(&env),
        "wake_consumer" => wake_consumer(&env),
        other => panic!("unknown role {other}"),
    }
}

fn prepare(dirs: &Dirs, topic: &str, partitions: u32) {
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    mq.create_topic(topic, TopicConfig::new(partitions))
        .unwrap();
    mq.close().unwrap();
}

// A writer killed at random moments.

/// The tag of record `idx` of batch `batch` (of `count` records) of writer
/// incarnation `k`.
fn batch_tag(k: u64, batch: u64, idx: u64, count: u64) -> String {
    format!("{k}.{batch}.{idx}.{count}")
}

fn parse_tag(tag: &str) -> Option<[u64; 4]> {
    let v: Vec<u64> = tag
        .split('.')
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

/// Writer incarnation `k` (arg `k,batches`): sends batches of 1 to 8
/// records to one of `w`'s two partitions with `acks=all` and, after each
/// acknowledgement, appends `k batch partition first_offset count` to
/// `acked` (one write per line). Sends `batches` batches and closes (0:
/// until killed).
fn batch_writer(env: &ChildEnv) {
    let [k, batches] = env.nums()[..] else {
        panic!("arg: k,batches")
    };
    let mq = Broker::open(&env.data, shared()).unwrap();
    let p = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    let mut acked = Journal::open(&env.file("acked"));
    let mut rng = Rng::new(&env.name);
    env.ready();
    let mut b = 0;
    while batches == 0 || b < batches {
        let count = rng.range(1, 9);
        let partition = rng.range(0, 2) as u32;
        let values: Vec<Vec<u8>> = (0..count)
            .map(|i| payload(&batch_tag(k, b, i, count), b, rng.range(0, 200) as usize))
            .collect();
        let records: Vec<BorrowedRecord<'_>> = values
            .iter()
            .map(|v| BorrowedRecord {
                topic: "w",
                partition: Some(partition),
                value: Some(v),
                ..BorrowedRecord::default()
            })
            .collect();
        let mds = p.send_batch(&records).unwrap();
        let first = mds[0].offset;
        for (i, md) in mds.iter().enumerate() {
            assert_eq!(md.offset, first + i as u64, "one batch, contiguous");
        }
        acked.line(&format!("{k} {b} {partition} {first} {count}"));
        b += 1;
    }
    p.close().unwrap();
    mq.close().unwrap();
    println!("WROTE {b} batches");
}

/// What a reader knows of one partition: the next offset, and the batch
/// it is in the middle of.
#[derive(Default)]
struct Follow {
    next: u64,
    open: Option<[u64; 4]>,
    last: Option<(u64, u64)>,
}

impl Follow {
    /// Checks the record at `offset` with `value`; `Err` says what is wrong.
    fn take(&mut self, offset: u64, value: &[u8]) -> Result<(), String> {
        if offset != self.next {
            return Err(format!("offset {offset} after {}", self.next));
        }
        let (tag, _) = check_payload(value)?;
        let [k, b, idx, count] = parse_tag(&tag).ok_or(format!("tag {tag}"))?;
        if let Some([ok, ob, oidx, ocount]) = self.open {
            if (ok, ob, ocount, oidx + 1) != (k, b, count, idx) {
                return Err(format!(
                    "torn batch: {k}.{b} record {idx} of {count} after {ok}.{ob} record {oidx} of {ocount}"
                ));
            }
        } else {
            if idx != 0 {
                return Err(format!("batch {k}.{b} starts at record {idx}"));
            }
            if let Some(last) = self.last {
                if (k, b) <= last {
                    return Err(format!("batch {k}.{b} after {last:?}: out of order"));
                }
            }
        }
        self.next += 1;
        if idx + 1 == count {
            self.open = None;
            self.last = Some((k, b));
        } else {
            self.open = Some([k, b, idx, count]);
        }
        Ok(())
    }
}

/// A reader: follows both partitions of `w` from the start, checking every
/// record (status 3 and `BAD ...` on a torn, reordered or unknown one); at
/// `STOP`, reads to the end, checks that it ends on a batch boundary and
/// prints `READ n`.
fn batch_reader(env: &ChildEnv) {
    let mq = Broker::open(&env.data, shared()).unwrap();
    let mut c = mq
        .consumer(ConsumerConfig::default().max_poll_records(50))
        .unwrap();
    c.assign(&[("w", 0), ("w", 1)]).unwrap();
    env.ready();
    let mut f = [Follow::default(), Follow::default()];
    let mut read = 0u64;
    let mut stopping_since: Option<Instant> = None;
    loop {
        let msgs = c.poll(Duration::from_millis(50)).unwrap();
        for m in &msgs {
            let p = m.partition() as usize;
            if let Err(e) = f[p].take(m.offset(), m.value().unwrap_or_default()) {
                println!("BAD at {p}/{}: {e}", m.offset());
                std::process::exit(3);
            }
            read += 1;
        }
        if stopping_since.is_none() && env.stopping() {
            stopping_since = Some(Instant::now());
        }
        if let Some(since) = stopping_since {
            let at_end = (0..2).all(|p| f[p].next >= end_offset(&mq, "w", p as u32));
            if at_end {
                for (p, fp) in f.iter().enumerate() {
                    if let Some(open) = fp.open {
                        println!("BAD at {p}: the log ends inside batch {open:?}");
                        std::process::exit(3);
                    }
                }
                println!("READ {read}");
                return;
            }
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "not at the end 30 s after STOP: {} {}",
                f[0].next,
                f[1].next
            );
        }
    }
}

#[test]
fn a_writer_killed_at_random_moments_loses_no_acknowledged_record_and_tears_no_batch() {
    let dirs = Dirs::new();
    prepare(&dirs, "w", 2);
    let mut readers: Vec<_> = (0..2)
        .map(|i| spawn("batch_reader", &format!("reader{i}"), &dirs, ""))
        .collect();
    for r in &mut readers {
        r.wait_ready(READY);
    }
    let mut rng = Rng::new("writer kill");
    let end = Instant::now() + pick(Duration::from_secs(5), Duration::from_secs(60));
    let mut k = 0;
    while Instant::now() < end {
        let mut w = spawn(
            "batch_writer",
            &format!("writer{k}"),
            &dirs,
            &format!("{k},0"),
        );
        w.wait_ready(READY);
        std::thread::sleep(Duration::from_millis(rng.range(20, 600)));
        let status = w.kill9();
        assert!(
            !status.success(),
            "writer {k} ended by itself:\n{}",
            w.output()
        );
        for r in &mut readers {
            if let Some(s) = r.exited() {
                panic!("{} ended ({s}):\n{}", r.name, r.output());
            }
        }
        k += 1;
    }
    // A last writer takes over after the last kill and ends cleanly.
    let mut last = spawn("batch_writer", "writer-last", &dirs, &format!("{k},100"));
    last.expect_success(Duration::from_secs(60));
    request_stop(&dirs.work);
    for r in &mut readers {
        r.expect_success(Duration::from_secs(60));
        assert!(r.stdout().contains("READ "), "{}", r.output());
    }
    // Every acknowledged record is there, as it was sent.
    let mq = Broker::open(&dirs.data, readonly()).unwrap();
    let logs: Vec<HashMap<u64, Vec<u8>>> = (0..2)
        .map(|p| read_all(&mq, "w", p).into_iter().collect())
        .collect();
    let acked = read_lines(&dirs.work.join("acked"));
    for line in &acked {
        let v: Vec<u64> = line.split(' ').map(|s| s.parse().unwrap()).collect();
        let [wk, b, p, first, count] = v[..] else {
            panic!("acked line {line:?}")
        };
        for i in 0..count {
            let value = logs[p as usize]
                .get(&(first + i))
                .unwrap_or_else(|| panic!("acknowledged {p}/{} is gone", first + i));
            let (tag, _) = check_payload(value).unwrap();
            assert_eq!(tag, batch_tag(wk, b, i, count), "at {p}/{}", first + i);
        }
    }
    assert!(
        acked.len() > 100,
        "too few batches acknowledged to mean much"
    );
    eprintln!(
        "{k} writers killed, {} batches acknowledged, {} records",
        acked.len(),
        logs[0].len() + logs[1].len()
    );
}

// Wake-ups across processes.

/// Appends `n` one-record batches to `z` (arg `n`), pausing at random;
/// after each send returns, writes the time (µs) into `acks.bin` at
/// `8 * offset`.
fn wake_writer(env: &ChildEnv) {
    let n = env.nums()[0];
    let mq = Broker::open(&env.data, shared()).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let acks = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(env.file("acks.bin"))
        .unwrap();
    let mut rng = Rng::new(&env.name);
    env.ready();
    for i in 0..n {
        let md = p
            .send(
                Record::new("z")
                    .partition(0)
                    .value(i.to_le_bytes().to_vec()),
            )
            .unwrap();
        assert_eq!(md.offset, i);
        acks.write_all_at(&now_us().to_le_bytes(), 8 * i).unwrap();
        match rng.next() % 2000 {
            // Now and then a pause long enough for the consumer to park.
            0..=1 => std::thread::sleep(Duration::from_micros(rng.range(100, 20_000))),
            2..=9 => std::thread::yield_now(),
            _ => {}
        }
    }
    p.close().unwrap();
    mq.close().unwrap();
    println!("WROTE {n}");
}

/// Consumes `n` records of `z` (arg `n`) with a long poll timeout, noting
/// when each poll began and returned. Then, with the writer's times:
/// a record counts as slept through when the poll that returned it came
/// back more than 100 ms after both the record was acknowledged and the
/// poll began. Prints `SLEPT_THROUGH s MAX_US m P50_US a P99_US b
/// OVER_10MS c EMPTY_POLLS e` (latencies from acknowledgement to receipt;
/// `c` records waited for more than 10 ms, for information: a lost
/// wake-up caught by the safety timeout shows there).
fn wake_consumer(env: &ChildEnv) {
    let n = env.nums()[0];
    let mq = Broker::open(&env.data, shared()).unwrap();
    let mut c = mq
        .consumer(ConsumerConfig::default().max_poll_records(10_000))
        .unwrap();
    c.assign(&[("z", 0)]).unwrap();
    env.ready();
    let mut began = vec![0u64; n as usize];
    let mut returned = vec![0u64; n as usize];
    let mut got = 0u64;
    let mut empty_polls = 0u64;
    while got < n {
        let s = now_us();
        let batch = c.poll_batch(Duration::from_secs(10)).unwrap();
        let r = now_us();
        if batch.is_empty() {
            empty_polls += 1;
        }
        for m in &batch {
            assert_eq!(m.offset(), got, "in order");
            assert_eq!(m.value().unwrap(), &got.to_le_bytes()[..]);
            began[got as usize] = s;
            returned[got as usize] = r;
            got += 1;
        }
    }
    // The writer's last times are written once its sends return.
    let done = env.file("writer.done");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done.exists() {
        assert!(Instant::now() < deadline, "the writer did not finish");
        std::thread::sleep(Duration::from_millis(5));
    }
    let acks = std::fs::read(env.file("acks.bin")).unwrap();
    let (mut slept, mut over_10ms) = (0u64, 0u64);
    let mut lat: Vec<u64> = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        let a = u64::from_le_bytes(acks[8 * i..8 * i + 8].try_into().unwrap());
        assert!(a > 0, "no time for {i}");
        lat.push(returned[i].saturating_sub(a));
        let waited = returned[i].saturating_sub(a.max(began[i]));
        over_10ms += u64::from(waited > 10_000);
        if waited > 100_000 {
            slept += 1;
            if slept <= 10 {
                println!(
                    "late: record {i} acknowledged at {a}, poll began {}, returned {}",
                    began[i], returned[i]
                );
            }
        }
    }
    lat.sort_unstable();
    println!(
        "SLEPT_THROUGH {slept} MAX_US {} P50_US {} P99_US {} OVER_10MS {over_10ms} EMPTY_POLLS {empty_polls}",
        lat[lat.len() - 1],
        lat[lat.len() / 2],
        lat[lat.len() * 99 / 100]
    );
}

#[test]
fn a_consumer_in_another_process_never_sleeps_through_an_append() {
    let dirs = Dirs::new();
    prepare(&dirs, "z", 1);
    let n: u64 = pick(100_000, 1_000_000);
    let mut consumer = spawn("wake_consumer", "consumer", &dirs, &n.to_string());
    consumer.wait_ready(READY);
    let mut writer = spawn("wake_writer", "writer", &dirs, &n.to_string());
    writer.expect_success(Duration::from_secs(pick(120, 600)));
    shared_mode_procs::mark(&dirs.work, "writer.done");
    consumer.expect_success(Duration::from_secs(60));
    let out = consumer.stdout();
    let line = consumer
        .line("SLEPT_THROUGH ")
        .unwrap_or_else(|| panic!("{}", consumer.output()));
    eprintln!("{n} appends: {line}");
    assert!(
        line.starts_with("SLEPT_THROUGH 0 "),
        "the consumer slept through available data:\n{out}"
    );
}

#[test]
fn the_batch_check_finds_torn_and_reordered_batches() {
    let rec = |k, b, idx, count| payload(&batch_tag(k, b, idx, count), b, 3);
    let mut f = Follow::default();
    for (o, v) in [
        rec(0, 0, 0, 2),
        rec(0, 0, 1, 2),
        rec(0, 1, 0, 1),
        rec(1, 0, 0, 1),
    ]
    .iter()
    .enumerate()
    {
        f.take(o as u64, v).unwrap();
    }
    assert!(f.open.is_none());
    let cases: [&[Vec<u8>]; 5] = [
        // A batch cut short, then the next writer's batch.
        &[rec(0, 0, 0, 3), rec(0, 0, 1, 3), rec(1, 0, 0, 1)],
        // A batch starting in its middle.
        &[rec(0, 0, 1, 2)],
        // An older batch after a newer one.
        &[rec(1, 0, 0, 1), rec(0, 5, 0, 1)],
        // The same batch twice.
        &[rec(0, 0, 0, 1), rec(0, 0, 0, 1)],
        // A record that is not one of the writer's.
        &[b"garbage-garbage".to_vec()],
    ];
    for case in cases {
        let mut f = Follow::default();
        let r: Result<Vec<()>, String> = case
            .iter()
            .enumerate()
            .map(|(o, v)| f.take(o as u64, v))
            .collect();
        assert!(r.is_err(), "{case:?} passed");
    }
    // A gap in offsets.
    let mut f = Follow::default();
    assert!(f.take(1, &rec(0, 0, 0, 1)).is_err());
}
