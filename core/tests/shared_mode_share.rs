//! A share group whose members are in different processes of a shared
//! data directory: they take disjoint messages, every message is
//! acknowledged once; the messages a killed process held go to the others
//! as soon as it is gone (long before its locks run out), counted as
//! delivered; a release in one process reaches a member of another; under
//! a storm of `kill -9` of member processes, no message is lost and a
//! message delivered again always has a higher delivery count.
//!
//! A few seconds of kills in an ordinary run; `MQLITE_SOAK=1` (`make
//! soak`) kills for 60 s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use mqlite::{Broker, ProducerConfig, Record, ShareConsumerConfig, TopicConfig};
use shared_mode_procs::{
    check_payload, payload, pick, read_lines, request_stop, shared, spawn, wait_until, ChildEnv,
    Dirs, Journal, Rng,
};

const PARTITIONS: u32 = 3;
const READY: Duration = Duration::from_secs(30);

/// The roles of this file's child processes.
#[test]
#[ignore = "a role run in a child process by the other tests of this file"]
fn child() {
    let Some(env) = ChildEnv::get() else {
        return;
    };
    match env.role.as_str() {
        "worker" => worker(&env),
        "hoarder" => hoarder(&env),
        other => panic!("unknown role {other}"),
    }
}

/// Takes messages of group `w` and acknowledges each, writing
/// `<seq> <delivery count>` to its journal before the acknowledgement,
/// until asked to stop. Argument: the lock duration in ms, and optionally
/// a pause per message in microseconds (its work).
fn worker(env: &ChildEnv) {
    let (lock_ms, pause_us) = match env.nums()[..] {
        [lock_ms] => (lock_ms, 0),
        [lock_ms, pause_us] => (lock_ms, pause_us),
        _ => panic!("arg: lock_ms[,pause_us]"),
    };
    let mq = Broker::open(&env.data, shared()).unwrap();
    let mut c = mq
        .share_consumer(
            ShareConsumerConfig::group("w")
                .lock_duration_ms(lock_ms)
                .max_poll_records(20),
        )
        .unwrap();
    c.subscribe(&["jobs"]).unwrap();
    let mut journal = Journal::open(&env.file(&format!("{}.acked", env.name)));
    env.ready();
    while !env.stopping() {
        for m in c.poll(Duration::from_millis(50)).unwrap() {
            let (_, seq) = check_payload(m.value().unwrap()).unwrap();
            std::thread::sleep(Duration::from_micros(pause_us));
            journal.line(&format!("{seq} {}", m.delivery_count()));
            m.ack().unwrap();
        }
    }
    c.close();
}

/// Takes one poll's messages of group `w` with a lock of a minute, writes
/// their sequences to its journal, and waits (to be killed).
fn hoarder(env: &ChildEnv) {
    let mq = Broker::open(&env.data, shared()).unwrap();
    let mut c = mq
        .share_consumer(
            ShareConsumerConfig::group("w")
                .lock_duration_ms(60_000)
                .max_poll_records(50),
        )
        .unwrap();
    c.subscribe(&["jobs"]).unwrap();
    let got = loop {
        let got = c.poll(Duration::from_millis(100)).unwrap();
        if !got.is_empty() {
            break got;
        }
    };
    let mut journal = Journal::open(&env.file(&format!("{}.held", env.name)));
    for m in &got {
        let (_, seq) = check_payload(m.value().unwrap()).unwrap();
        journal.line(&seq.to_string());
    }
    env.ready();
    std::thread::sleep(Duration::from_secs(120));
}

fn produce(mq: &Broker, n: u64) {
    match mq.create_topic("jobs", TopicConfig::new(PARTITIONS)) {
        Ok(()) | Err(mqlite::Error::TopicExists(_)) => {}
        Err(e) => panic!("{e}"),
    }
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..n {
        p.send(
            Record::new("jobs")
                .partition((i % u64::from(PARTITIONS)) as u32)
                .value(payload("j", i, (i % 20) as usize)),
        )
        .unwrap();
    }
    p.flush().unwrap();
}

/// Every `<seq> <count>` line of the workers' journals.
fn acked(dirs: &Dirs, workers: &[&str]) -> Vec<(u64, u32)> {
    workers
        .iter()
        .flat_map(|w| read_lines(&dirs.work.join(format!("{w}.acked"))))
        .map(|l| {
            let (s, c) = l.split_once(' ').unwrap();
            (s.parse().unwrap(), c.parse().unwrap())
        })
        .collect()
}

#[test]
fn members_in_several_processes_take_disjoint_messages() {
    let dirs = Dirs::new();
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let n = 3000;
    produce(&mq, n / 2);
    let names = ["w1", "w2", "w3"];
    let mut procs: Vec<_> = names
        .iter()
        .map(|w| spawn("worker", w, &dirs, "30000"))
        .collect();
    for p in &mut procs {
        p.wait_ready(READY);
    }
    // More while they work.
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in n / 2..n {
        p.send(
            Record::new("jobs")
                .partition((i % u64::from(PARTITIONS)) as u32)
                .value(payload("j", i, (i % 20) as usize)),
        )
        .unwrap();
    }
    wait_until(
        Duration::from_secs(60),
        "every message acknowledged",
        || acked(&dirs, &names).len() as u64 >= n,
    );
    // Nothing more comes.
    std::thread::sleep(Duration::from_millis(300));
    request_stop(&dirs.work);
    for p in &mut procs {
        p.expect_success(Duration::from_secs(30));
    }
    let got = acked(&dirs, &names);
    let mut by_seq: HashMap<u64, Vec<u32>> = HashMap::new();
    for (s, c) in &got {
        by_seq.entry(*s).or_default().push(*c);
    }
    assert_eq!(by_seq.len() as u64, n, "every message once");
    let twice: Vec<_> = by_seq.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(twice.is_empty(), "delivered to two members: {twice:?}");
    assert!(got.iter().all(|(_, c)| *c == 1), "no redelivery");
    let per_worker: Vec<usize> = names
        .iter()
        .map(|w| read_lines(&dirs.work.join(format!("{w}.acked"))).len())
        .collect();
    assert!(
        per_worker.iter().filter(|&&k| k > 0).count() >= 2,
        "shared: {per_worker:?}"
    );
    // The group's state, read by this process: nothing left.
    let mut c = mq.share_consumer(ShareConsumerConfig::group("w")).unwrap();
    c.subscribe(&["jobs"]).unwrap();
    assert_eq!(c.backlog().unwrap(), mqlite::ShareBacklog::default());
    assert!(c.poll(Duration::from_millis(200)).unwrap().is_empty());
}

#[test]
fn a_killed_processes_messages_go_to_the_others_at_once() {
    let dirs = Dirs::new();
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let n = 200;
    produce(&mq, n);
    let mut hoarder = spawn("hoarder", "h", &dirs, "");
    hoarder.wait_ready(READY);
    let held: Vec<u64> = read_lines(&dirs.work.join("h.held"))
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(!held.is_empty());
    let mut worker = spawn("worker", "w1", &dirs, "30000");
    worker.wait_ready(READY);
    // The others are taken; the hoarder's stay with it while it lives.
    wait_until(Duration::from_secs(30), "the others acknowledged", || {
        acked(&dirs, &["w1"]).len() as u64 >= n - held.len() as u64
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(acked(&dirs, &["w1"]).len() as u64, n - held.len() as u64);
    let killed = Instant::now();
    hoarder.kill9();
    // Long before the hoarder's locks (a minute) run out.
    wait_until(Duration::from_secs(20), "the hoarder's messages", || {
        acked(&dirs, &["w1"]).len() as u64 >= n
    });
    assert!(killed.elapsed() < Duration::from_secs(20));
    request_stop(&dirs.work);
    worker.expect_success(Duration::from_secs(30));
    let got = acked(&dirs, &["w1"]);
    let mut seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..n).collect::<Vec<_>>());
    for (s, c) in got {
        let expected = if held.contains(&s) { 2 } else { 1 };
        assert_eq!(c, expected, "seq {s}: the hoarder's delivery counts");
    }
}

#[test]
fn a_release_in_one_process_reaches_a_member_of_another() {
    let dirs = Dirs::new();
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    produce(&mq, 30);
    let mut mine = mq
        .share_consumer(ShareConsumerConfig::group("w").lock_duration_ms(60_000))
        .unwrap();
    mine.subscribe(&["jobs"]).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let mut held = Vec::new();
    while held.len() < 30 && Instant::now() < end {
        held.extend(mine.poll(Duration::from_millis(50)).unwrap());
    }
    assert_eq!(held.len(), 30);
    let mut worker = spawn("worker", "w1", &dirs, "30000");
    worker.wait_ready(READY);
    std::thread::sleep(Duration::from_millis(500));
    assert!(acked(&dirs, &["w1"]).is_empty(), "held here");
    // Acknowledged here: never delivered there; released: delivered there.
    mine.ack(&held[..10]).unwrap();
    mine.release(&held[10..], Duration::ZERO).unwrap();
    wait_until(Duration::from_secs(20), "the released messages", || {
        acked(&dirs, &["w1"]).len() >= 20
    });
    std::thread::sleep(Duration::from_millis(300));
    request_stop(&dirs.work);
    worker.expect_success(Duration::from_secs(30));
    let got = acked(&dirs, &["w1"]);
    assert_eq!(got.len(), 20);
    let released: Vec<u64> = held[10..]
        .iter()
        .map(|m| check_payload(m.value().unwrap()).unwrap().1)
        .collect();
    for (s, c) in got {
        assert!(released.contains(&s), "seq {s} was acknowledged here");
        assert_eq!(c, 2);
    }
}

#[test]
fn no_message_is_lost_when_member_processes_are_killed() {
    let dirs = Dirs::new();
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let n: u64 = pick(3000, 30_000);
    produce(&mq, n);
    let mut rng = Rng::new("share kill storm");
    let storm = Duration::from_secs(pick(4, 60));
    let mut names: Vec<String> = Vec::new();
    let mut live = Vec::new();
    for _ in 0..3 {
        let name = format!("w{}", names.len());
        // Short locks: what a killed worker held between the liveness
        // checks comes back soon either way.
        let mut p = spawn("worker", &name, &dirs, "1000,3000");
        p.wait_ready(READY);
        names.push(name);
        live.push(p);
    }
    let start = Instant::now();
    let mut kills = 0;
    while start.elapsed() < storm {
        std::thread::sleep(Duration::from_millis(rng.range(50, 400)));
        let i = rng.range(0, live.len() as u64) as usize;
        live[i].kill9();
        kills += 1;
        let name = format!("w{}", names.len());
        let mut p = spawn("worker", &name, &dirs, "1000,3000");
        p.wait_ready(READY);
        names.push(name);
        live[i] = p;
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    wait_until(
        Duration::from_secs(60),
        "every message acknowledged",
        || {
            let mut seqs: Vec<u64> = acked(&dirs, &refs).iter().map(|(s, _)| *s).collect();
            seqs.sort_unstable();
            seqs.dedup();
            seqs.len() as u64 >= n
        },
    );
    request_stop(&dirs.work);
    for p in &mut live {
        p.expect_success(Duration::from_secs(30));
    }
    // Journals are written before each acknowledgement: a message whose
    // worker died in between is delivered again, with a higher count.
    let mut by_seq: HashMap<u64, Vec<u32>> = HashMap::new();
    for w in &refs {
        for l in read_lines(&dirs.work.join(format!("{w}.acked"))) {
            let (s, c) = l.split_once(' ').unwrap();
            by_seq
                .entry(s.parse().unwrap())
                .or_default()
                .push(c.parse().unwrap());
        }
    }
    assert_eq!(by_seq.len() as u64, n, "every message");
    let again = by_seq.values().filter(|v| v.len() > 1).count();
    for (s, counts) in &by_seq {
        let mut sorted = counts.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            counts.len(),
            "seq {s}: one count twice {counts:?}"
        );
    }
    eprintln!("{kills} kills, {again} messages delivered again");
    let mut c = mq.share_consumer(ShareConsumerConfig::group("w")).unwrap();
    c.subscribe(&["jobs"]).unwrap();
    assert_eq!(c.backlog().unwrap(), mqlite::ShareBacklog::default());
}

/// Bytes of the record a dead holder left unfinished in the test below.
const TORN: usize = 4096;

#[test]
fn a_group_lock_left_by_a_dead_process_is_taken_over() {
    // The group's lock is a word in `groups/<g>.share.lock`'s page holding
    // the holder's process token: a process killed holding it leaves its
    // token there, and the next process takes the lock over once that
    // process's liveness lock is gone, then reads the state file again
    // (a record the dead holder cut short is dropped).
    let dirs = Dirs::new();
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    produce(&mq, 30);
    let config = ShareConsumerConfig::group("w").lock_duration_ms(60_000);
    let mut c = mq.share_consumer(config.clone()).unwrap();
    c.subscribe(&["jobs"]).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let mut held = Vec::new();
    while held.len() < 30 && Instant::now() < end {
        held.extend(c.poll(Duration::from_millis(50)).unwrap());
    }
    assert_eq!(held.len(), 30);
    c.ack(&held[..10]).unwrap();
    c.release(&held[10..], Duration::ZERO).unwrap();
    // The consumer stays: the group stays open here, and its next
    // operation takes the lock over (a group opened afresh would read the
    // file whole anyway).
    let groups = dirs.data.join("groups");
    let state = groups.join("w.share");
    let whole = std::fs::metadata(&state).unwrap().len();
    // A dead holder: a token no process holds, and the first 4 KiB of a
    // record it did not finish (its frame says 64 KiB).
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(groups.join("w.share.lock"))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&lock, &0xdead_beef_u64.to_le_bytes(), 8).unwrap();
    let torn = std::fs::OpenOptions::new()
        .append(true)
        .open(&state)
        .unwrap();
    let mut cut_short = vec![0xab_u8; TORN];
    cut_short[..4].copy_from_slice(&(64_u32 << 10).to_le_bytes());
    std::io::Write::write_all(&mut &torn, &cut_short).unwrap();
    let started = Instant::now();
    let mut again = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while again.len() < 20 && Instant::now() < end {
        again.extend(c.poll(Duration::from_millis(50)).unwrap());
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let seqs = |ms: &[mqlite::ShareMessage]| -> Vec<u64> {
        let mut v: Vec<u64> = ms
            .iter()
            .map(|m| check_payload(m.value().unwrap()).unwrap().1)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(
        seqs(&again),
        seqs(&held[10..]),
        "the released, not the acknowledged"
    );
    assert!(again.iter().all(|m| m.delivery_count() == 2));
    c.ack(&again).unwrap();
    drop(c);
    // The torn record was cut before the next append: what this process
    // appended since (a few small records) ends the file, no leftover of
    // the 4 KiB after it.
    let len = std::fs::metadata(&state).unwrap().len();
    assert!(len > whole && len < whole + TORN as u64, "{whole} -> {len}");
    mq.close().unwrap();
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let mut c = mq.share_consumer(ShareConsumerConfig::group("w")).unwrap();
    c.subscribe(&["jobs"]).unwrap();
    assert!(c.poll(Duration::from_millis(200)).unwrap().is_empty());
}
