//! Simulated power loss with several writer processes appending with
//! `acks=all` to one partition of a shared data directory.
//!
//! `kill -9` keeps the page cache, so it cannot show what `acks=all`
//! protects against. As in `power_loss.rs`, each writer process installs a
//! sync hook (`mqlite::faults`) that journals, for every file, how far each
//! completed sync made it durable (one shared journal: a sync in any
//! process makes the file's pages durable for all, the page cache being
//! one). The parent kills every writer at once at a random moment, then
//! models the power loss on the partition's files: every 4 KiB page past a
//! file's durable end that changed is kept, reverted to what it held
//! before, torn (some 512-byte sectors new, the others old) or filled with
//! garbage where it changed. Then the machine "restarts" (the process
//! takes a new boot id, see `mqlite::faults::set_boot_id`) and reopens
//! the directory in shared mode, which checks the partition as an
//! exclusive open after a crash would, and checks that
//! every record acknowledged before the power went out is there, that the
//! partition holds, per writer, an intact prefix of what it sent, that the
//! records of earlier cycles are unchanged, and that reading never returns
//! damaged data.
//!
//! It runs with one writer process and with two. Cycles: 10, or 100 under `MQLITE_SOAK=1`;
//! `MQLITE_SM_SEED` replays a printed seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mqlite::faults::{set_sync_hook, SyncKind};
use mqlite::{Acks, BorrowedRecord, Broker, ProducerConfig, Record, TopicConfig};
use shared_mode_procs::{
    check_payload, kill9_all, ok, payload, pick, read_all, read_lines, shared, spawn, ChildEnv,
    Dirs, Journal, Proc, Rng,
};

const TOPIC: &str = "power";
const READY: Duration = Duration::from_secs(30);
const PAGE: usize = 4096;
const SECTOR: usize = 512;

/// The roles of this file's child processes.
#[test]
#[ignore = "a role run in a child process by the other tests of this file"]
fn child() {
    let Some(env) = ChildEnv::get() else {
        return;
    };
    match env.role.as_str() {
        "power_writer" => power_writer(&env),
        other => panic!("unknown role {other}"),
    }
}

/// The partition's directory.
fn partition_dir(data: &Path) -> PathBuf {
    data.join("topics").join(TOPIC).join("0")
}

/// The tag of writer `i`'s records in `cycle`.
fn tag(cycle: u64, i: u64) -> String {
    format!("c{cycle}w{i}")
}

/// Writer `i` of cycle `cycle` (arg `i,cycle`): journals every completed
/// sync of a data file (`marks`: `<path>\t<durable end>`), then appends
/// its records `0, 1, 2, ...` to partition 0 with `acks=all` (one at a
/// time, and every 16th send a batch of 256, large enough to be written
/// with `pwrite`), journaling `<tag> <offset> <seq>` for each after the
/// send returned (`acked`), until killed.
fn power_writer(env: &ChildEnv) {
    let [i, cycle] = env.nums()[..] else {
        panic!("arg: i,cycle")
    };
    let marks = Mutex::new(Journal::open(&env.file("marks")));
    let topics = env.data.join("topics");
    set_sync_hook(Some(Arc::new(move |path: &Path, kind, before| {
        if before || !path.starts_with(&topics) {
            return Ok(());
        }
        let mut marks = marks.lock().unwrap();
        let mut mark = |p: &Path, end: u64| marks.line(&format!("{}\t{end}", p.display()));
        match kind {
            SyncKind::Range { end } => mark(path, end),
            SyncKind::File => mark(path, std::fs::metadata(path)?.len()),
            SyncKind::Filesystem => {
                for file in files_under(path) {
                    mark(&file, std::fs::metadata(&file)?.len());
                }
            }
            SyncKind::Dir => {}
        }
        Ok(())
    })));
    let mq = ok("open", Broker::open(&env.data, shared()));
    let p = ok(
        "producer",
        mq.producer(ProducerConfig::default().acks(Acks::All)),
    );
    let mut acked = Journal::open(&env.file("acked"));
    let tag = tag(cycle, i);
    let mut rng = Rng::new(&env.name);
    env.ready();
    let mut seq = 0u64;
    for n in 0u64.. {
        let count = if n % 16 == 15 { 256 } else { 1 };
        let values: Vec<Vec<u8>> = (seq..seq + count)
            .map(|s| payload(&tag, s, rng.range(0, 600) as usize))
            .collect();
        let offsets: Vec<u64> = if count == 1 {
            let md = ok(
                "send",
                p.send(Record::new(TOPIC).partition(0).value(values[0].clone())),
            );
            vec![md.offset]
        } else {
            let records: Vec<BorrowedRecord<'_>> = values
                .iter()
                .map(|v| BorrowedRecord {
                    topic: TOPIC,
                    partition: Some(0),
                    value: Some(v),
                    ..BorrowedRecord::default()
                })
                .collect();
            let mds = ok("send_batch", p.send_batch(&records));
            mds.iter().map(|md| md.offset).collect()
        };
        let mut lines = String::new();
        for (offset, s) in offsets.iter().zip(seq..) {
            writeln!(lines, "{tag} {offset} {s}").unwrap();
        }
        acked.lines(&lines);
        seq += count;
    }
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// The partition's files (segments, indexes, its tail page) and their
/// contents.
fn partition_files(data: &Path) -> HashMap<PathBuf, Vec<u8>> {
    files_under(&partition_dir(data))
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_default();
            (p, bytes)
        })
        .collect()
}

/// Per file, the byte up to which some process made it durable.
fn durable_marks(journal: &Path) -> HashMap<PathBuf, usize> {
    let mut m: HashMap<PathBuf, usize> = HashMap::new();
    for line in read_lines(journal) {
        if let Some((p, end)) = line.split_once('\t') {
            let e = m.entry(PathBuf::from(p)).or_default();
            *e = (*e).max(end.parse().unwrap());
        }
    }
    m
}

/// The power goes out for `path`: each 4 KiB page with bytes past
/// `durable` that differ from `before` (what the file held when the cycle
/// began, zeros past its end) reached the disk, or did not (reverted), or
/// did in part (torn per 512-byte sector), or came back as garbage where
/// it changed. Bytes below `durable` stay. Returns the pages changed.
#[allow(clippy::needless_range_loop)] // byte positions matter here
fn lose_power(path: &Path, before: &[u8], durable: usize, rng: &mut Rng) -> usize {
    let Ok(mut now) = std::fs::read(path) else {
        return 0;
    };
    let old = |i: usize| before.get(i).copied().unwrap_or(0);
    let mut changed = 0;
    let mut page = durable / PAGE * PAGE;
    while page < now.len() {
        let end = (page + PAGE).min(now.len());
        let from = page.max(durable);
        if (from..end).any(|i| now[i] != old(i)) {
            let fate = rng.range(0, 4);
            if fate != 0 {
                changed += 1;
            }
            let mut sector_reverted = false;
            for i in from..end {
                if i % SECTOR == 0 || i == from {
                    sector_reverted = rng.range(0, 2) == 0;
                }
                match fate {
                    1 => now[i] = old(i),
                    2 if sector_reverted => now[i] = old(i),
                    3 if now[i] != old(i) => now[i] = rng.next() as u8,
                    _ => {}
                }
            }
        }
        page = end;
    }
    std::fs::write(path, &now).unwrap();
    changed
}

/// `writers` writer processes, `cycles` power losses.
fn power_loss(writers: u64) {
    let cycles = pick(10, 100);
    let dirs = Dirs::new();
    {
        let mq = Broker::open(&dirs.data, shared()).unwrap();
        mq.create_topic(
            TOPIC,
            // Room for a few of the 256-record batches: segments roll.
            TopicConfig::new(1)
                .segment_bytes(256 * 1024)
                .index_interval_bytes(512),
        )
        .unwrap();
        mq.close().unwrap();
    }
    let mut rng = Rng::new("power loss");
    // The partition's records after the last cycle, as (tag, seq).
    let mut known: Vec<(String, u64)> = Vec::new();
    let (mut acked_total, mut pages) = (0usize, 0usize);
    for cycle in 0..cycles {
        let before = partition_files(&dirs.data);
        let _ = std::fs::remove_file(dirs.work.join("marks"));
        let _ = std::fs::remove_file(dirs.work.join("acked"));
        let mut procs: Vec<Proc> = (0..writers)
            .map(|i| {
                spawn(
                    "power_writer",
                    &format!("c{cycle}w{i}"),
                    &dirs,
                    &format!("{i},{cycle}"),
                )
            })
            .collect();
        for p in &mut procs {
            p.wait_ready(READY);
        }
        std::thread::sleep(Duration::from_millis(rng.range(5, 150)));
        for p in &mut procs {
            p.expect_running();
        }
        // Every writer at once.
        kill9_all(&mut procs);

        // The power goes out.
        let marks = durable_marks(&dirs.work.join("marks"));
        for (path, _) in partition_files(&dirs.data) {
            let old = before.get(&path).map(Vec::as_slice).unwrap_or_default();
            // What was durable before the cycle: everything the last
            // verification's close flushed (every non-zero byte then).
            let durable_before = old.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            let durable = marks.get(&path).copied().unwrap_or(0).max(durable_before);
            pages += lose_power(&path, old, durable, &mut rng);
        }

        // The machine restarts (a new boot id), and the directory is
        // opened again: the first process in checks every partition.
        mqlite::faults::set_boot_id(Some(1 + cycle as u128));
        let mq = Broker::open(&dirs.data, shared())
            .unwrap_or_else(|e| panic!("cycle {cycle}: reopen failed: {e}"));
        let p = mq
            .producer(ProducerConfig::default())
            .unwrap_or_else(|e| panic!("cycle {cycle}: the writer role: {e}"));
        let records = read_all(&mq, TOPIC, 0);
        let mut now: Vec<(String, u64)> = Vec::new();
        for (at, (offset, value)) in records.iter().enumerate() {
            assert_eq!(*offset, at as u64, "cycle {cycle}: offsets dense");
            let r = check_payload(value)
                .unwrap_or_else(|e| panic!("cycle {cycle}: record {offset} damaged: {e}"));
            now.push(r);
        }
        assert!(
            now.starts_with(&known),
            "cycle {cycle}: records of earlier cycles changed ({} before, {} now)",
            known.len(),
            now.len()
        );
        // This cycle's records: per writer, its records from 0 in order.
        let mut next: HashMap<String, u64> = HashMap::new();
        for (t, seq) in &now[known.len()..] {
            let want = next.entry(t.clone()).or_default();
            assert!(
                t.starts_with(&format!("c{cycle}w")),
                "cycle {cycle}: {t} {seq}: not this cycle's"
            );
            assert_eq!(
                seq, want,
                "cycle {cycle}: {t}: not a prefix of what it sent"
            );
            *want += 1;
        }
        // Every acknowledged record.
        let acked = read_lines(&dirs.work.join("acked"));
        for line in &acked {
            let v: Vec<&str> = line.split(' ').collect();
            let [t, offset, seq] = v[..] else {
                panic!("acked line {line:?}")
            };
            let offset: usize = offset.parse().unwrap();
            let got = now.get(offset);
            assert_eq!(
                got,
                Some(&(t.to_owned(), seq.parse().unwrap())),
                "cycle {cycle}: acknowledged {t} {seq} at {offset} lost"
            );
        }
        acked_total += acked.len();
        p.close().unwrap();
        mq.close().unwrap();
        known = now;
    }
    eprintln!(
        "power loss, {writers} writer process(es): {cycles} cycles, {acked_total} acks=all \
         records checked, {pages} pages lost, torn or garbled, {} records in the end",
        known.len()
    );
    assert!(acked_total > 0, "nothing was ever acknowledged");
}

#[test]
fn acks_all_survives_power_loss_one_writer_process() {
    power_loss(1);
}

#[test]
fn acks_all_survives_power_loss_two_writer_processes() {
    power_loss(2);
}

/// A power loss can leave a partition's tail page older than its files
/// (the page's last writes never reached the disk, the synced records
/// did). After the restart, the first open checks the partition and drops
/// the page: the next append goes after every record, none is written
/// over.
#[test]
fn a_tail_page_older_than_the_log_after_a_restart_is_not_trusted() {
    let dirs = Dirs::new();
    let tail = partition_dir(&dirs.data).join("tail");
    let send = |mq: &Broker, n: u64| {
        let p = mq
            .producer(ProducerConfig::default().acks(Acks::All))
            .unwrap();
        let md = p
            .send(Record::new(TOPIC).partition(0).value(payload("r", n, 100)))
            .unwrap();
        p.close().unwrap();
        md.offset
    };
    let stale = {
        let mq = Broker::open(&dirs.data, shared()).unwrap();
        mq.create_topic(TOPIC, TopicConfig::new(1)).unwrap();
        for n in 0..10 {
            assert_eq!(send(&mq, n), n);
        }
        let stale = std::fs::read(&tail).unwrap();
        for n in 10..20 {
            assert_eq!(send(&mq, n), n);
        }
        mq.close().unwrap();
        stale
    };
    // The power goes out: the tail page's last changes are lost.
    std::fs::write(&tail, stale).unwrap();
    mqlite::faults::set_boot_id(Some(0x5eed_0000_0000_0000_0000_0000_0000_0001));
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    assert_eq!(send(&mq, 20), 20, "appended after every record");
    let records = read_all(&mq, TOPIC, 0);
    assert_eq!(records.len(), 21);
    for (at, (offset, value)) in records.iter().enumerate() {
        assert_eq!(*offset, at as u64);
        assert_eq!(check_payload(value).unwrap(), ("r".to_owned(), at as u64));
    }
    mq.close().unwrap();
}
