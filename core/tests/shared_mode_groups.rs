//! A consumer group whose members are in different processes, under
//! `kill -9`: one writer process produces a known sequence, four member
//! processes consume it in one group and commit, a broadcast consumer
//! process reads everything, and the test kills members at random moments
//! and starts new ones. Checks: every offset consumed at least once by the
//! group; committed offsets (sampled from a read-only handle) never go
//! back; never two live owners of one partition (each owner appends to an
//! ownership journal when it gets and gives up a partition, the test
//! appends there before each kill); the group's lag reaches 0; the
//! broadcast consumer got every record once, in order.
//!
//! A few seconds of kills in an ordinary run; `MQLITE_SOAK=1` (`make
//! soak`) kills for 60 s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqlite::{
    Broker, ConsumerConfig, ProducerConfig, RebalanceContext, RebalanceListener, Record,
    TopicConfig,
};
use shared_mode_procs::{
    check_payload, end_offset, payload, pick, read_lines, readonly, request_stop, shared, spawn,
    ChildEnv, Dirs, Journal, Proc, Rng,
};

const PARTITIONS: u64 = 6;
const MEMBERS: usize = 4;
const READY: Duration = Duration::from_secs(30);

/// The roles of this file's child processes.
#[test]
#[ignore = "a role run in a child process by the other tests of this file"]
fn child() {
    let Some(env) = ChildEnv::get() else {
        return;
    };
    match env.role.as_str() {
        "writer" => writer(&env),
        "member" => member(&env),
        "broadcast" => broadcast(&env),
        other => panic!("unknown role {other}"),
    }
}

/// Record `i` goes to partition `i % PARTITIONS` at offset `i / PARTITIONS`.
fn check_record(m: &mqlite::Message) {
    match check_payload(m.value().unwrap_or_default()) {
        Ok((tag, i))
            if tag == "s"
                && i % PARTITIONS == u64::from(m.partition())
                && i / PARTITIONS == m.offset() => {}
        other => {
            println!("BAD record at {}/{}: {other:?}", m.partition(), m.offset());
            std::process::exit(3);
        }
    }
}

/// Writes records `0..total` to `t`, spread evenly over `ms`, then closes.
fn writer(env: &ChildEnv) {
    let [total, ms] = env.nums()[..] else {
        panic!("arg: total,ms")
    };
    let mq = Broker::open(&env.data, shared()).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    env.ready();
    let start = Instant::now();
    for i in 0..total {
        let md = p
            .send(
                Record::new("t")
                    .partition((i % PARTITIONS) as u32)
                    .value(payload("s", i, (i % 30) as usize)),
            )
            .unwrap();
        assert_eq!(md.offset, i / PARTITIONS, "record {i}");
        if i % 100 == 99 {
            let due = start + Duration::from_millis(ms * (i + 1) / total);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
    }
    p.close().unwrap();
    mq.close().unwrap();
    println!("WROTE {total}");
}

/// Appends `generation partition member pid event` to the ownership
/// journal when the member gets, gives up or loses a partition.
struct Owner {
    journal: Journal,
    member: String,
    generation: Arc<AtomicU64>,
}

impl Owner {
    fn log(&mut self, event: &str, partitions: &[(String, u32)]) {
        let gen = self.generation.load(Ordering::Relaxed);
        let pid = std::process::id();
        for (_, p) in partitions {
            self.journal
                .line(&format!("{gen} {p} {} {pid} {event}", self.member));
        }
    }
}

impl RebalanceListener for Owner {
    fn on_assign(&mut self, _: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.log("assign", partitions);
    }

    fn on_revoke(&mut self, _: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.log("revoke", partitions);
    }

    fn on_lost(&mut self, _: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.log("lost", partitions);
    }
}

/// A member of group `g`: consumes `t`, appends `partition offset` of each
/// record to `consumed.<name>` (before committing it), commits after each
/// poll; at `STOP`, prints its lag and closes.
fn member(env: &ChildEnv) {
    let slot = env.arg.clone();
    let mq = Broker::open(&env.data, shared()).unwrap();
    let mut c = mq
        .consumer(
            ConsumerConfig::group("g")
                .client_id(format!("m{slot}"))
                .enable_auto_commit(false)
                .max_poll_interval_ms(120_000)
                .max_poll_records(300),
        )
        .unwrap();
    let generation = Arc::new(AtomicU64::new(0));
    c.set_rebalance_listener(Some(Box::new(Owner {
        journal: Journal::open(&env.file("journal")),
        member: env.name.clone(),
        generation: Arc::clone(&generation),
    })));
    c.subscribe(&["t"]).unwrap();
    let mut consumed = Journal::open(&env.file(&format!("consumed.{}", env.name)));
    env.ready();
    loop {
        let msgs = c.poll(Duration::from_millis(100)).unwrap();
        let mut text = String::new();
        for m in &msgs {
            check_record(m);
            let _ = writeln!(text, "{} {}", m.partition(), m.offset());
        }
        consumed.lines(&text);
        if !msgs.is_empty() {
            if let Err(e) = c.commit() {
                println!("COMMIT_ERR {e}");
            }
        }
        if let Ok(info) = mq.describe_group("g") {
            generation.store(info.generation, Ordering::Relaxed);
        }
        if env.stopping() {
            println!("LAG {:?}", c.lag().unwrap());
            c.close();
            mq.close().unwrap();
            return;
        }
    }
}

/// A broadcast consumer of group `g`: reads every record of `t` once, in
/// order (status 3 on a gap), commits after each poll; at `STOP`, once it
/// has read to the end, prints `READ p:n ...` and closes.
fn broadcast(env: &ChildEnv) {
    let mq = Broker::open(&env.data, shared()).unwrap();
    let mut c = mq
        .consumer(
            ConsumerConfig::group("g")
                .client_id("b")
                .broadcast(true)
                .enable_auto_commit(false),
        )
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    env.ready();
    let mut next = vec![0u64; PARTITIONS as usize];
    loop {
        let msgs = c.poll(Duration::from_millis(100)).unwrap();
        for m in &msgs {
            check_record(m);
            let p = m.partition() as usize;
            if m.offset() != next[p] {
                println!("GAP at {p}: {} after {}", m.offset(), next[p]);
                std::process::exit(3);
            }
            next[p] += 1;
        }
        if !msgs.is_empty() {
            c.commit().unwrap();
        }
        if env.stopping()
            && (0..PARTITIONS as u32).all(|p| next[p as usize] >= end_offset(&mq, "t", p))
        {
            let counts: Vec<String> = next
                .iter()
                .enumerate()
                .map(|(p, n)| format!("{p}:{n}"))
                .collect();
            println!("READ {}", counts.join(" "));
            c.close();
            mq.close().unwrap();
            return;
        }
    }
}

/// Checks the ownership journal: a partition is given to a member only
/// when no live member owns it (its owner revoked or lost it, or was
/// killed: the test writes `kill` before the signal). Returns the number
/// of hand-outs.
fn check_journal(lines: &[String]) -> usize {
    let mut owner: HashMap<u32, (String, String)> = HashMap::new();
    let mut assigns = 0;
    for (n, line) in lines.iter().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 5, "journal line {n}: {line:?}");
        let (member, pid, event) = (f[2], f[3], f[4]);
        if event == "kill" {
            owner.retain(|_, (_, owner_pid)| owner_pid != pid);
            continue;
        }
        let p: u32 = f[1].parse().unwrap();
        match event {
            "assign" => {
                if let Some((m, op)) = owner.get(&p).filter(|(m, _)| m != member) {
                    panic!(
                        "journal line {n}: {member} (pid {pid}) got partition {p} \
                         while {m} (pid {op}) owned it\n{}",
                        lines[n.saturating_sub(30)..=n].join("\n")
                    );
                }
                owner.insert(p, (member.to_owned(), pid.to_owned()));
                assigns += 1;
            }
            "revoke" | "lost" => {
                let held = owner.get(&p).is_some_and(|(m, _)| m == member);
                assert!(
                    held,
                    "journal line {n}: {member} gave up partition {p} it did not own ({:?})",
                    owner.get(&p)
                );
                owner.remove(&p);
            }
            other => panic!("journal line {n}: unknown event {other}"),
        }
    }
    assigns
}

/// Samples the group's committed offsets through `mq`: none goes back.
fn sample(mq: &Broker, last: &mut [u64]) {
    let Ok(info) = mq.describe_group("g") else {
        return;
    };
    for (t, p, c) in info.committed {
        if t == "t" {
            let p = p as usize;
            assert!(
                c.offset >= last[p],
                "committed offset of partition {p} went back: {} after {}",
                c.offset,
                last[p]
            );
            last[p] = c.offset;
        }
    }
}

#[test]
fn group_members_in_processes_killed_at_random_lose_nothing_and_never_share_a_partition() {
    let dirs = Dirs::new();
    {
        let mq = Broker::open(&dirs.data, shared()).unwrap();
        mq.create_topic("t", TopicConfig::new(PARTITIONS as u32))
            .unwrap();
        mq.close().unwrap();
    }
    let kill_for = pick(Duration::from_secs(5), Duration::from_secs(60));
    let total: u64 = pick(24_000, 240_000);
    let mut writer = spawn(
        "writer",
        "writer",
        &dirs,
        &format!("{total},{}", kill_for.as_millis() + 1000),
    );
    writer.wait_ready(READY);
    let start_member = |slot: usize, incarnation: u32| -> Proc {
        spawn(
            "member",
            &format!("m{slot}.{incarnation}"),
            &dirs,
            &slot.to_string(),
        )
    };
    let mut incarnations = [0u32; MEMBERS];
    let mut members: Vec<Proc> = (0..MEMBERS).map(|s| start_member(s, 0)).collect();
    let mut bcast = spawn("broadcast", "broadcast", &dirs, "");
    for m in &mut members {
        m.wait_ready(READY);
    }
    bcast.wait_ready(READY);
    let ro = Broker::open(&dirs.data, readonly()).unwrap();
    let mut journal = Journal::open(&dirs.work.join("journal"));
    let mut last = vec![0u64; PARTITIONS as usize];
    let mut rng = Rng::new("group storm");
    let end = Instant::now() + kill_for;
    let mut kills = 0;
    while Instant::now() < end {
        let pause = Instant::now() + Duration::from_millis(rng.range(100, 700));
        while Instant::now() < pause {
            sample(&ro, &mut last);
            for m in members.iter_mut().chain([&mut bcast]) {
                if let Some(s) = m.exited() {
                    panic!("{} ended by itself ({s}):\n{}", m.name, m.output());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let slot = rng.range(0, MEMBERS as u64) as usize;
        journal.line(&format!("- - parent {} kill", members[slot].pid()));
        members[slot].kill9();
        kills += 1;
        incarnations[slot] += 1;
        members[slot] = start_member(slot, incarnations[slot]);
    }
    writer.expect_success(Duration::from_secs(120));
    let ends: Vec<u64> = (0..PARTITIONS as u32)
        .map(|p| end_offset(&ro, "t", p))
        .collect();
    assert!(
        ends.iter().all(|&e| e == total / PARTITIONS),
        "the read-only handle sees every record: {ends:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while last != ends {
        sample(&ro, &mut last);
        if Instant::now() > deadline {
            let mut fresh = vec![0u64; PARTITIONS as usize];
            sample(&Broker::open(&dirs.data, readonly()).unwrap(), &mut fresh);
            let journal = read_lines(&dirs.work.join("journal"));
            let mut outputs: Vec<String> = members.iter().map(Proc::output).collect();
            for e in std::fs::read_dir(&dirs.work).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                if name.starts_with("consumed.") {
                    let lines = read_lines(&dirs.work.join(&name));
                    outputs.push(format!(
                        "{name}: {} records, last {:?}",
                        lines.len(),
                        lines.last()
                    ));
                }
            }
            panic!(
                "the group's lag did not reach 0: ends {ends:?}, committed {last:?} \
                 (a new read-only handle: {fresh:?}), {:?}\njournal's end:\n{}\n{}",
                ro.describe_group("g").map(|i| i.members),
                journal[journal.len().saturating_sub(40)..].join("\n"),
                outputs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    request_stop(&dirs.work);
    for m in members.iter_mut().chain([&mut bcast]) {
        m.expect_success(Duration::from_secs(30));
    }
    // Every offset consumed at least once by the group, by the members
    // alive now and those killed.
    let mut seen: HashSet<(u32, u64)> = HashSet::new();
    for e in std::fs::read_dir(&dirs.work).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("consumed.") {
            for l in read_lines(&dirs.work.join(&name)) {
                let (p, o) = l.split_once(' ').unwrap();
                seen.insert((p.parse().unwrap(), o.parse().unwrap()));
            }
        }
    }
    for p in 0..PARTITIONS as u32 {
        let missing: Vec<u64> = (0..ends[p as usize])
            .filter(|o| !seen.contains(&(p, *o)))
            .take(10)
            .collect();
        assert!(
            missing.is_empty(),
            "partition {p}: never consumed: {missing:?}..."
        );
    }
    for m in &members {
        assert!(!m.stdout().contains("COMMIT_ERR"), "{}", m.output());
        // Each member's own lag() is 0 on every partition it owns.
        let lag = m.line("LAG ").unwrap_or_else(|| panic!("{}", m.output()));
        let tuples = lag.trim_start_matches("LAG [").trim_end_matches(']');
        for t in tuples.split("), ").filter(|t| !t.is_empty()) {
            assert!(
                t.trim_end_matches(')').ends_with(", 0"),
                "{}: {lag}",
                m.name
            );
        }
    }
    let assigns = check_journal(&read_lines(&dirs.work.join("journal")));
    let want: Vec<String> = ends
        .iter()
        .enumerate()
        .map(|(p, n)| format!("{p}:{n}"))
        .collect();
    assert!(
        bcast.stdout().contains(&format!("READ {}", want.join(" "))),
        "the broadcast consumer read everything:\n{}",
        bcast.output()
    );
    // A read-only handle opened now sees the same committed offsets.
    ro.close().unwrap();
    drop(ro);
    let fresh = Broker::open(&dirs.data, readonly()).unwrap();
    let mut committed = vec![0u64; PARTITIONS as usize];
    sample(&fresh, &mut committed);
    assert_eq!(committed, ends);
    eprintln!("{kills} kills, {assigns} partition hand-outs, {total} records");
}

#[test]
fn the_ownership_check_finds_two_live_owners_of_a_partition() {
    let lines = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let fine = lines(&[
        "1 0 a 10 assign",
        "1 1 a 10 assign",
        "2 0 a 10 revoke",
        "2 0 b 11 assign",
        "- - parent 11 kill",
        "3 0 c 12 assign",
        "3 1 a 10 lost",
        "4 1 c 12 assign",
    ]);
    assert_eq!(check_journal(&fine), 5);
    for bad in [
        &["1 0 a 10 assign", "1 0 b 11 assign"][..],
        &["1 0 a 10 assign", "- - parent 11 kill", "2 0 b 11 assign"],
        &["1 0 a 10 assign", "2 0 b 11 revoke"],
    ] {
        let bad = lines(bad);
        assert!(
            std::panic::catch_unwind(|| check_journal(&bad)).is_err(),
            "{bad:?} passed"
        );
    }
}
