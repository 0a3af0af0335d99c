//! Several writer processes on one shared data directory: the **writer
//! storm**. Writer processes with named producers append batches with
//! their own application sequences to one topic (one partition, or four
//! with keys), some with `acks=all`, some with `acks=1`, while the parent
//! kills them with `-9` at random moments and restarts them (each resumes
//! after its `last_sequence()`), and reader processes check every batch as
//! they read it; at the end every producer's sequences are there once
//! each, from 0 to its last, the offsets are dense and every acknowledged
//! record is present and intact.
//!
//! The other scenarios of several writers: `shared_mode_writers_topics.rs`
//! (concurrent topic creation, delete while writing),
//! `shared_mode_writers_fencing.rs` (named producers across processes) and
//! `shared_mode_writers_power.rs` (simulated power loss).
//!
//! Each scenario takes the number of writer processes as a parameter and
//! runs with one and with several. Short in an ordinary run (the storm runs about
//! 5 s with one writer, 10 s with several); `MQLITE_SOAK=1` (`make soak`)
//! runs more writers for minutes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use mqlite::{Acks, BorrowedRecord, Broker, ConsumerConfig, ProducerConfig, TopicConfig};
use shared_mode_procs::{
    check_payload, end_offset, ok, payload, pick, read_all, read_lines, readonly, request_stop,
    shared, signal_of, spawn, ChildEnv, Dirs, Journal, Proc, Rng,
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
        "storm_writer" => storm_writer(&env),
        "storm_reader" => storm_reader(&env),
        other => panic!("unknown role {other}"),
    }
}

fn prepare(dirs: &Dirs, topic: &str, partitions: u32) {
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    mq.create_topic(topic, TopicConfig::new(partitions))
        .unwrap();
    mq.close().unwrap();
}

// The writer storm.

const STORM: &str = "storm";
/// In the keyed variant, records `5n..5n+5` of a producer share a key (so
/// a partition), and a batch never crosses such a group.
const KEY_GROUP: i64 = 5;

/// The tag of the records of the batch `first..first+count` of producer
/// `w<i>`.
fn storm_tag(i: u64, first: i64, count: i64) -> String {
    format!("w{i}:{first}:{count}")
}

/// `(producer index, first, count)` of a tag made by [`storm_tag`].
fn parse_storm_tag(tag: &str) -> Option<(u64, i64, i64)> {
    let mut it = tag.split(':');
    let i = it.next()?.strip_prefix('w')?.parse().ok()?;
    let first = it.next()?.parse().ok()?;
    let count = it.next()?.parse().ok()?;
    it.next().is_none().then_some((i, first, count))
}

/// Anonymous writers' numbers: incarnation `k` of writer `i` is writer
/// `k * ANONYMOUS + i` (see [`storm_writer`]).
const ANONYMOUS: u64 = 1000;

/// The key of application sequence `seq` in the keyed variant.
fn storm_key(seq: i64) -> Vec<u8> {
    format!("k{}", seq / KEY_GROUP).into_bytes()
}

/// Writer `w<i>`, incarnation `k` (arg `i,k,keyed,anonymous`): a named
/// producer (`w<i>`), `acks=all` when `i + k` is even and `acks=1`
/// otherwise, that resumes after its `last_sequence()` and sends batches
/// of consecutive sequences (1 to 8 records to partition 0, or in the
/// keyed variant 1 to 5 records of one key group) until `STOP`; after each
/// batch is acknowledged it journals `w<i> seq partition offset` for each
/// record (`acked`, one write per batch). With `anonymous`, the producer
/// has no name and no application sequences, so nothing carries over from
/// a killed incarnation: each one is a writer of its own, numbered
/// `k * ANONYMOUS + i` in place of `i`, whose sequences start at 0 (its
/// last batch may be in the log unacknowledged, and never in part).
fn storm_writer(env: &ChildEnv) {
    let [i, k, keyed, anonymous] = env.nums()[..] else {
        panic!("arg: i,k,keyed,anonymous")
    };
    let keyed = keyed == 1;
    let anonymous = anonymous == 1;
    let acks = if (i + k) % 2 == 0 {
        Acks::All
    } else {
        Acks::One
    };
    let mq = ok("open", Broker::open(&env.data, shared()));
    let (p, mut seq, i) = if anonymous {
        let p = ok(
            "producer",
            mq.producer(ProducerConfig::default().acks(acks)),
        );
        (p, 0, k * ANONYMOUS + i)
    } else {
        let p = ok(
            "producer",
            mq.producer(ProducerConfig::default().name(format!("w{i}")).acks(acks)),
        );
        let last = ok("last_sequence", p.last_sequence());
        let seq = last.map_or(0, |l| l + 1);
        // Sends are synchronous and never skip, so the first missing
        // sequence is the one after the last.
        let next = ok("next_sequence", p.next_sequence());
        assert_eq!(next, seq, "next_sequence against last_sequence + 1");
        (p, seq, i)
    };
    println!("RESUME w{i} incarnation {k} ({acks:?}) from {seq}");
    let mut acked = Journal::open(&env.file("acked"));
    let mut rng = Rng::new(&env.name);
    env.ready();
    while !env.stopping() {
        let count = if keyed {
            (rng.range(1, 6) as i64).min(KEY_GROUP - seq % KEY_GROUP)
        } else {
            rng.range(1, 9) as i64
        };
        let tag = storm_tag(i, seq, count);
        let values: Vec<Vec<u8>> = (seq..seq + count)
            .map(|s| payload(&tag, s as u64, rng.range(0, 200) as usize))
            .collect();
        let key = storm_key(seq);
        let records: Vec<BorrowedRecord<'_>> = values
            .iter()
            .zip(seq..)
            .map(|(v, s)| BorrowedRecord {
                topic: STORM,
                partition: (!keyed).then_some(0),
                key: keyed.then_some(key.as_slice()),
                value: Some(v),
                sequence: (!anonymous).then_some(s),
                ..BorrowedRecord::default()
            })
            .collect();
        let mds = ok("send_batch", p.send_batch(&records));
        let mut lines = String::new();
        for (j, md) in mds.iter().enumerate() {
            assert!(!md.duplicate, "w{i} {}: a duplicate", seq + j as i64);
            assert_eq!(md.partition, mds[0].partition, "one batch, one partition");
            assert_eq!(md.offset, mds[0].offset + j as u64, "one batch, contiguous");
            writeln!(
                lines,
                "w{i} {} {} {}",
                seq + j as i64,
                md.partition,
                md.offset
            )
            .unwrap();
        }
        acked.lines(&lines);
        seq += count;
        std::thread::sleep(Duration::from_micros(rng.range(0, 1500)));
    }
    ok("close producer", p.close());
    ok("close", mq.close());
    println!("WROTE w{i} up to {}", seq - 1);
}

/// What a reader knows of one partition.
#[derive(Default)]
struct Follow {
    /// The next offset.
    next: u64,
    /// The batch it is inside of: `(producer, first, count, last seq)`.
    open: Option<(u64, i64, i64, i64)>,
    /// Per producer, the last sequence seen.
    last: HashMap<u64, i64>,
}

impl Follow {
    /// Checks the record at `offset`; `Err` says what is wrong.
    fn take(&mut self, offset: u64, value: &[u8]) -> Result<(), String> {
        if offset != self.next {
            return Err(format!("offset {offset} after {}", self.next));
        }
        let (tag, seq) = check_payload(value)?;
        let seq = seq as i64;
        let (w, first, count) = parse_storm_tag(&tag).ok_or(format!("tag {tag:?}"))?;
        if !(first..first + count).contains(&seq) {
            return Err(format!("sequence {seq} outside its batch {tag}"));
        }
        match self.open {
            Some((ow, ofirst, ocount, olast))
                if (ow, ofirst, ocount, olast + 1) != (w, first, count, seq) =>
            {
                return Err(format!(
                    "torn batch: w{w} {seq} ({tag}) inside w{ow}:{ofirst}:{ocount} after {olast}"
                ));
            }
            None if seq != first => {
                return Err(format!("batch {tag} starts at {seq}"));
            }
            _ => {}
        }
        if let Some(&l) = self.last.get(&w) {
            if seq <= l {
                return Err(format!("w{w}: sequence {seq} after {l}"));
            }
        }
        self.last.insert(w, seq);
        self.open = (seq + 1 < first + count).then_some((w, first, count, seq));
        self.next += 1;
        Ok(())
    }
}

/// A reader (arg: the partition count): follows every partition of the
/// storm topic from the start, checking every record as it reads (status 3
/// and `BAD ...` on a damaged, torn or reordered one); at `STOP`, reads to
/// the end, checks that each partition ends on a batch boundary and prints
/// `READ n`.
fn storm_reader(env: &ChildEnv) {
    let partitions = env.nums()[0] as u32;
    let mq = ok("open", Broker::open(&env.data, shared()));
    let mut c = ok(
        "consumer",
        mq.consumer(ConsumerConfig::default().max_poll_records(200)),
    );
    let tps: Vec<(&str, u32)> = (0..partitions).map(|p| (STORM, p)).collect();
    ok("assign", c.assign(&tps));
    env.ready();
    let mut f: Vec<Follow> = (0..partitions).map(|_| Follow::default()).collect();
    let mut read = 0u64;
    let mut stopping_since: Option<Instant> = None;
    loop {
        for m in ok("poll", c.poll(Duration::from_millis(50))) {
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
        let Some(since) = stopping_since else {
            continue;
        };
        if (0..partitions).all(|p| f[p as usize].next >= end_offset(&mq, STORM, p)) {
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
            since.elapsed() < Duration::from_secs(60),
            "not at the end 60 s after STOP"
        );
    }
}

/// The writer storm with `writers` writer processes on the storm topic
/// (one partition, or `partitions` with keys), two reader processes, and
/// kills at random moments for `secs` seconds. With `some_anonymous`, the
/// writers of odd index use anonymous producers (see [`storm_writer`]).
fn storm(writers: u64, partitions: u32, keyed: bool, some_anonymous: bool, run: Duration) {
    let dirs = Dirs::new();
    prepare(&dirs, STORM, partitions);
    let mut readers: Vec<Proc> = (0..2)
        .map(|r| {
            spawn(
                "storm_reader",
                &format!("reader{r}"),
                &dirs,
                &partitions.to_string(),
            )
        })
        .collect();
    for r in &mut readers {
        r.wait_ready(READY);
    }
    let start_writer = |i: u64, k: u64| {
        let mut w = spawn(
            "storm_writer",
            &format!("w{i}-{k}"),
            &dirs,
            &format!(
                "{i},{k},{},{}",
                u8::from(keyed),
                u8::from(some_anonymous && i % 2 == 1)
            ),
        );
        w.wait_ready(READY);
        w
    };
    let mut incarnation = vec![0u64; writers as usize];
    let mut procs: Vec<Proc> = (0..writers).map(|i| start_writer(i, 0)).collect();
    let mut rng = Rng::new("writer storm");
    let end = Instant::now() + run;
    let mut kills = 0;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(rng.range(20, 400)));
        for p in procs.iter_mut().chain(readers.iter_mut()) {
            p.expect_running();
        }
        let i = rng.range(0, writers) as usize;
        let status = procs[i].kill9();
        assert_eq!(signal_of(status), Some(9), "{}", procs[i].output());
        kills += 1;
        incarnation[i] += 1;
        procs[i] = start_writer(i as u64, incarnation[i]);
    }
    request_stop(&dirs.work);
    for p in procs.iter_mut().chain(readers.iter_mut()) {
        p.expect_success(Duration::from_secs(90));
    }
    for r in &readers {
        assert!(r.stdout().contains("READ "), "{}", r.output());
    }

    // Everything, read with a fresh handle.
    let mq = Broker::open(&dirs.data, readonly()).unwrap();
    let mut logs: Vec<HashMap<u64, Vec<u8>>> = Vec::new();
    // Per producer, every sequence found, with where.
    let mut found: BTreeMap<u64, Vec<(i64, u32, u64)>> = BTreeMap::new();
    for p in 0..partitions {
        let records = read_all(&mq, STORM, p);
        let end = end_offset(&mq, STORM, p);
        assert_eq!(
            records.len() as u64,
            end,
            "partition {p}: read up to its end"
        );
        let mut follow = Follow::default();
        for (at, (offset, value)) in records.iter().enumerate() {
            assert_eq!(*offset, at as u64, "partition {p}: offsets dense");
            follow
                .take(*offset, value)
                .unwrap_or_else(|e| panic!("partition {p} at {offset}: {e}"));
            let (tag, seq) = check_payload(value).unwrap();
            let (w, _, _) = parse_storm_tag(&tag).unwrap();
            found.entry(w).or_default().push((seq as i64, p, *offset));
        }
        assert!(follow.open.is_none(), "partition {p} ends inside a batch");
        logs.push(records.into_iter().collect());
    }
    let wrote: BTreeSet<u64> = found.keys().map(|w| w % ANONYMOUS).collect();
    assert_eq!(
        wrote.len() as u64,
        writers,
        "every writer wrote: {:?}",
        found.keys()
    );
    for (w, seqs) in &mut found {
        seqs.sort_unstable();
        let mut group_partition: HashMap<i64, u32> = HashMap::new();
        for (n, (seq, p, offset)) in seqs.iter().enumerate() {
            assert_eq!(
                *seq, n as i64,
                "w{w}: sequence {seq} at {p}/{offset} where {n} was due (a gap or a duplicate)"
            );
            if keyed {
                let want = *group_partition.entry(seq / KEY_GROUP).or_insert(*p);
                assert_eq!(*p, want, "w{w}: sequence {seq} left its key's partition");
            }
        }
    }
    let acked = read_lines(&dirs.work.join("acked"));
    for line in &acked {
        let v: Vec<&str> = line.split(' ').collect();
        let [w, seq, p, offset] = v[..] else {
            panic!("acked line {line:?}")
        };
        let (p, offset): (usize, u64) = (p.parse().unwrap(), offset.parse().unwrap());
        let value = logs[p]
            .get(&offset)
            .unwrap_or_else(|| panic!("acknowledged {w} {seq} at {p}/{offset} is gone"));
        let (tag, got) = check_payload(value).unwrap();
        assert!(
            tag.starts_with(&format!("{w}:")) && got.to_string() == seq,
            "at {p}/{offset}: {tag} {got} where {w} {seq} was acknowledged"
        );
    }
    assert!(
        acked.len() > 100,
        "too few records acknowledged to mean much: {}",
        acked.len()
    );
    eprintln!(
        "writer storm: {writers} writers, {partitions} partition(s), {kills} kills, {} records \
         acknowledged, {} in the log",
        acked.len(),
        logs.iter().map(HashMap::len).sum::<usize>()
    );
}

fn storm_secs() -> Duration {
    pick(Duration::from_secs(10), Duration::from_secs(180))
}

fn storm_writers() -> u64 {
    pick(3, 8)
}

#[test]
fn writer_storm_one_writer_one_partition() {
    storm(
        1,
        1,
        false,
        false,
        pick(Duration::from_secs(5), Duration::from_secs(60)),
    );
}

#[test]
fn writer_storm_one_writer_four_keyed_partitions() {
    storm(
        1,
        4,
        true,
        false,
        pick(Duration::from_secs(5), Duration::from_secs(60)),
    );
}

#[test]
fn writer_storm_several_writers_one_partition() {
    storm(storm_writers(), 1, false, false, storm_secs());
}

/// Writers of anonymous producers catch up from the tail page's last
/// batch (they keep no producer state), named ones by the batches'
/// headers: both kinds on one partition under the storm.
#[test]
fn writer_storm_named_and_anonymous_writers_one_partition() {
    storm(storm_writers(), 1, false, true, storm_secs());
}

#[test]
fn writer_storm_several_writers_four_keyed_partitions() {
    storm(storm_writers(), 4, true, false, storm_secs());
}
