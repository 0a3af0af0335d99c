//! Transactions with `acks=all` under simulated power loss.
//!
//! A child process runs transactions from two threads (two transactional
//! producers, `acks=all`), each over the partitions of two topics, some
//! aborted, while a sync hook records how far every file was made durable
//! (segment logs by `msync` range, the transaction log by `fsync` of its
//! length). The parent kills the child at a random moment, models the
//! power loss on every file (`common/power.rs`: pages past the durable end
//! kept, reverted, torn or garbled), reopens and checks that every
//! transaction is whole or absent, no aborted one is visible, and every
//! acknowledged commit is there.
//!
//! Cycles: 20 by default, `MQLITE_TXN_POWER_CYCLES=N` for more;
//! `MQLITE_TXN_POWER_SEED` replays a printed seed.
#![allow(clippy::unwrap_used)]

#[path = "common/power.rs"]
mod power;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mqlite::{Acks, Broker, Config, ConsumerConfig, ProducerConfig, Record, TopicConfig};
use power::{
    child_setup, durable_marks, env_or, mix, power_out, run_and_kill, say_ready, seed, Rng,
};

const CHILD_DIR: &str = "MQLITE_TXN_POWER_DIR";
const CHILD_CYCLE: &str = "MQLITE_TXN_POWER_CYCLE";
const MARKS: &str = "sync-marks.txt";
const PARTS: [(&str, u32); 3] = [("a", 0), ("a", 1), ("b", 0)];
const WRITERS: u64 = 2;

fn config() -> Config {
    Config::default()
        .prefault(false)
        .retention_check_interval_ms(0)
}

/// How many records transaction `n` of writer `w` in `cycle` has (1-8),
/// and whether it is aborted.
fn shape(cycle: u64, w: u64, n: u64) -> (u64, bool) {
    let h = mix(cycle << 40 | w << 32 | n);
    (1 + h % 8, n % 5 == 4)
}

fn value(cycle: u64, w: u64, n: u64, i: u64, k: u64) -> Vec<u8> {
    let mut v = format!("{cycle}:{w}:{n}:{i}/{k}:").into_bytes();
    v.resize(v.len() + (mix(cycle ^ n << 8 ^ i) % 400) as usize, b'x');
    v
}

/// The child; a no-op in a normal test run.
#[test]
fn txn_power_child() {
    let Some((dir, cycle)) = child_setup(CHILD_DIR, CHILD_CYCLE, MARKS) else {
        return;
    };
    let mq = Broker::open(&dir, config()).unwrap();
    say_ready();
    let started = Instant::now();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let mq = &mq;
            s.spawn(move || {
                let p = mq
                    .producer(
                        ProducerConfig::default()
                            .transactional_id(format!("w{w}"))
                            .acks(Acks::All),
                    )
                    .unwrap();
                for n in 0.. {
                    let (k, aborted) = shape(cycle, w, n);
                    let tx = p.begin_transaction().unwrap();
                    for i in 0..k {
                        let (t, part) = PARTS[(mix(n ^ i << 16 ^ w) % 3) as usize];
                        tx.send(
                            Record::new(t)
                                .partition(part)
                                .value(value(cycle, w, n, i, k)),
                        )
                        .unwrap();
                    }
                    if aborted {
                        tx.abort().unwrap();
                    } else {
                        tx.commit().unwrap();
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "ACK {w} {n}").unwrap();
                        out.flush().unwrap();
                    }
                    if started.elapsed() > Duration::from_secs(60) {
                        break;
                    }
                }
            });
        }
    });
}

/// Every file of the data directory the model applies to: segment files
/// and the transaction log.
fn data_files(dir: &Path) -> HashMap<PathBuf, Vec<u8>> {
    let mut out = HashMap::new();
    let log = dir.join("transactions.log");
    if let Ok(b) = std::fs::read(&log) {
        out.insert(log, b);
    }
    for (t, p) in PARTS {
        let pdir = dir.join("topics").join(t).join(p.to_string());
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

/// `(cycle, writer, n) -> (records seen, k)`.
type Seen = HashMap<(u64, u64, u64), (u64, u64)>;

/// What every partition holds of each transaction; damage or an
/// unparsable value is an error.
fn visible(mq: &Broker) -> Result<Seen, String> {
    let mut out: HashMap<(u64, u64, u64), (u64, u64)> = HashMap::new();
    for (t, p) in PARTS {
        let mut c = mq
            .consumer(ConsumerConfig::default().max_poll_records(10_000))
            .map_err(|e| e.to_string())?;
        c.assign(&[(t, p)]).map_err(|e| e.to_string())?;
        loop {
            let msgs = c
                .poll(Duration::ZERO)
                .map_err(|e| format!("{t}/{p}: {e}"))?;
            if msgs.is_empty() {
                break;
            }
            for m in msgs {
                let v = m.value().unwrap_or_default();
                let text = String::from_utf8_lossy(v);
                let f: Vec<&str> = text.splitn(5, ':').collect();
                let parse = |s: &str| s.parse::<u64>().map_err(|_| format!("bad value {text:?}"));
                let (cycle, w, n) = (parse(f[0])?, parse(f[1])?, parse(f[2])?);
                let (i, k) = f[3].split_once('/').ok_or("bad value")?;
                let (i, k) = (parse(i)?, parse(k)?);
                if v != value(cycle, w, n, i, k) {
                    return Err(format!("{t}/{p}@{}: damaged record", m.offset()));
                }
                let e = out.entry((cycle, w, n)).or_insert((0, k));
                e.0 += 1;
            }
        }
    }
    Ok(out)
}

#[test]
fn transactions_with_acks_all_survive_simulated_power_loss() {
    let cycles = env_or("MQLITE_TXN_POWER_CYCLES", 20);
    let seed = seed("MQLITE_TXN_POWER_SEED", "transaction power-loss");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    {
        let mq = Broker::open(&dir, config()).unwrap();
        for (t, n) in [("a", 2), ("b", 1)] {
            mq.create_topic(
                t,
                TopicConfig::new(n)
                    .segment_bytes(64 * 1024)
                    .index_interval_bytes(512),
            )
            .unwrap();
        }
        mq.close().unwrap();
    }
    let mut acked: HashSet<(u64, u64, u64)> = HashSet::new();
    let (mut pages, mut seen_total) = (0usize, 0usize);
    let mut violations = Vec::new();
    for cycle in 0..cycles {
        let before = data_files(&dir);
        let _ = std::fs::remove_file(tmp.path().join(MARKS));
        let lines = run_and_kill(
            "txn_power_child",
            &[
                (CHILD_DIR, dir.display().to_string()),
                (CHILD_CYCLE, cycle.to_string()),
            ],
            Duration::from_millis(10 + rng.below(120)),
        );
        for l in lines.iter().filter_map(|l| l.strip_prefix("ACK ")) {
            let f: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            acked.insert((cycle, f[0], f[1]));
        }

        // The power goes out.
        let marks = durable_marks(&tmp.path().join(MARKS));
        pages += power_out(data_files(&dir).keys(), &before, &marks, &mut rng);

        let mq = match Broker::open(&dir, config()) {
            Ok(mq) => mq,
            Err(e) => {
                violations.push(format!("cycle {cycle}: reopen failed: {e}"));
                break;
            }
        };
        match visible(&mq) {
            Err(e) => violations.push(format!("cycle {cycle}: {e}")),
            Ok(seen) => {
                seen_total = seen.len();
                for (&(c, w, n), &(got, k)) in &seen {
                    let (shape_k, aborted) = shape(c, w, n);
                    if got != k || k != shape_k {
                        violations.push(format!(
                            "cycle {cycle}: transaction {c}:{w}:{n} has {got} of {shape_k} records"
                        ));
                    }
                    if aborted {
                        violations.push(format!(
                            "cycle {cycle}: aborted transaction {c}:{w}:{n} is visible"
                        ));
                    }
                }
                for a in &acked {
                    if !seen.contains_key(a) {
                        violations.push(format!(
                            "cycle {cycle}: acknowledged transaction {}:{}:{} is lost",
                            a.0, a.1, a.2
                        ));
                    }
                }
            }
        }
        mq.close().unwrap();
    }
    println!(
        "transaction power loss: {cycles} cycles, {} acknowledged commits checked, {seen_total} \
         transactions visible at the end, {pages} pages lost/torn/garbled, {} violations",
        acked.len(),
        violations.len()
    );
    assert!(
        violations.is_empty(),
        "seed {seed}:\n{}",
        violations.join("\n")
    );
    assert!(!acked.is_empty(), "no commit was ever acknowledged");
}
