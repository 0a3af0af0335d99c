//! Topic changes from several processes of a shared data directory:
//!
//! - **concurrent topic creation**: racers released at once by a marker
//!   file create the same topic: one wins, the others get `TopicExists`,
//!   and the topic is usable by all of them;
//! - **delete while writing**: a topic deleted under a producer gives that
//!   producer a typed error (`UnknownTopic`, never a crash), and a new
//!   producer writes to the topic created again.
//!
//! Each runs with its racers or its deleter as threads of one process, and
//! as separate processes. `MQLITE_SOAK=1` runs 200 creation rounds instead of 20.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::time::{Duration, Instant};

use mqlite::{Broker, ConsumerConfig, Error, OffsetReset, ProducerConfig, Record, TopicConfig};
use shared_mode_procs::{
    check_payload, fail, mark, ok, payload, pick, read_all, read_lines, readonly, shared,
    signal_of, spawn, wait_marker, wait_until, ChildEnv, Dirs, Journal, Proc,
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
        "creator" => creator(&env),
        "delete_producer" => delete_producer(&env),
        "deleter" => {
            let mq = ok("open", Broker::open(&env.data, shared()));
            env.ready();
            deleter(&env, &mq);
        }
        other => panic!("unknown role {other}"),
    }
}

fn prepare(dirs: &Dirs, topic: &str, partitions: u32) {
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    mq.create_topic(topic, TopicConfig::new(partitions))
        .unwrap();
    mq.close().unwrap();
}

// Concurrent topic creation.

/// A process of racers (arg `rounds,threads`): each thread, named
/// `<name>.<t>`, for each round `r` creates `ready.<r>.<racer>`, waits for
/// `GO.<r>`, calls `create_topic("c<r>")`, journals `<r> <racer> ok` or
/// `<r> <racer> exists` (`results`), then sends one record holding its
/// name to `c<r>` and reads the topic until it has seen one record from
/// each of the round's `racers` (`<r> <racer> used`). Any other error ends
/// the process through [`fail`].
fn creator(env: &ChildEnv) {
    let [rounds, threads, racers] = env.nums()[..] else {
        panic!("arg: rounds,threads,racers")
    };
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let racer = format!("{}.{t}", env.name);
                // Each thread is a client of its own (a second open in one
                // process shares the engine).
                let mq = ok("open", Broker::open(&env.data, shared()));
                let mut results = Journal::open(&env.file("results"));
                for r in 0..rounds {
                    let topic = format!("c{r}");
                    mark(&env.work, &format!("ready.{r}.{racer}"));
                    assert!(
                        wait_marker(&env.work, &format!("GO.{r}"), READY),
                        "no GO.{r}"
                    );
                    match mq.create_topic(&topic, TopicConfig::new(1)) {
                        Ok(()) => results.line(&format!("{r} {racer} ok")),
                        Err(Error::TopicExists(name)) => {
                            assert_eq!(name, topic);
                            results.line(&format!("{r} {racer} exists"));
                        }
                        Err(e) => fail(&format!("create_topic {topic}"), &e),
                    }
                    use_topic(&mq, &topic, &racer, racers);
                    results.line(&format!("{r} {racer} used"));
                }
                ok("close", mq.close());
            });
        }
    });
    println!("RACED");
}

/// Sends one record holding `racer` to `topic` and reads it until it has
/// seen `racers` records (each racer's one).
fn use_topic(mq: &Broker, topic: &str, racer: &str, racers: u64) {
    let p = ok("producer", mq.producer(ProducerConfig::default()));
    ok(
        &format!("send to {topic}"),
        p.send(
            Record::new(topic)
                .partition(0)
                .value(racer.as_bytes().to_vec()),
        ),
    );
    let mut c = ok(
        "consumer",
        mq.consumer(ConsumerConfig::default().auto_offset_reset(OffsetReset::Earliest)),
    );
    ok("assign", c.assign(&[(topic, 0)]));
    let mut seen = Vec::new();
    let end = Instant::now() + Duration::from_secs(30);
    while (seen.len() as u64) < racers {
        assert!(Instant::now() < end, "{racer}: {topic} shows only {seen:?}");
        for m in ok("poll", c.poll(Duration::from_millis(50))) {
            seen.push(String::from_utf8(m.value().unwrap_or_default().to_vec()).unwrap());
        }
    }
    assert!(
        seen.iter().any(|s| s == racer),
        "{racer}: own record missing"
    );
}

/// `processes` processes of `threads` racers each race to create the same
/// topic, `rounds` times with fresh names.
fn creation_race(processes: u64, threads: u64) {
    let dirs = Dirs::new();
    let rounds = pick(20, 200);
    let racers = processes * threads;
    let mut procs: Vec<Proc> = (0..processes)
        .map(|n| {
            spawn(
                "creator",
                &format!("p{n}"),
                &dirs,
                &format!("{rounds},{threads},{racers}"),
            )
        })
        .collect();
    let names: Vec<String> = (0..processes)
        .flat_map(|n| (0..threads).map(move |t| format!("p{n}.{t}")))
        .collect();
    for r in 0..rounds {
        wait_until(READY, &format!("every racer at round {r}"), || {
            for p in &mut procs {
                if let Some(s) = p.exited() {
                    panic!("{} ended ({s}):\n{}", p.name, p.output());
                }
            }
            names
                .iter()
                .all(|n| dirs.work.join(format!("ready.{r}.{n}")).exists())
        });
        mark(&dirs.work, &format!("GO.{r}"));
    }
    for p in &mut procs {
        p.expect_success(Duration::from_secs(120));
    }
    let lines = read_lines(&dirs.work.join("results"));
    for r in 0..rounds {
        let of_round: Vec<Vec<&str>> = lines
            .iter()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .filter(|v| v[0] == r.to_string())
            .collect();
        let count = |what: &str| of_round.iter().filter(|v| v[2] == what).count() as u64;
        assert_eq!(count("ok"), 1, "round {r}: one creator wins: {of_round:?}");
        assert_eq!(count("exists"), racers - 1, "round {r}: {of_round:?}");
        assert_eq!(count("used"), racers, "round {r}: {of_round:?}");
    }
    let mq = Broker::open(&dirs.data, readonly()).unwrap();
    for r in 0..rounds {
        let records = read_all(&mq, &format!("c{r}"), 0);
        assert_eq!(records.len() as u64, racers, "c{r}: one record per racer");
    }
}

#[test]
fn concurrent_topic_creation_threads_of_one_process() {
    creation_race(1, 2);
}

#[test]
fn concurrent_topic_creation_two_processes() {
    creation_race(2, 1);
}

// Delete while writing.

const DELETED: &str = "d";

/// Produces to topic `d` in a loop (arg: 1 when the deleter runs as a
/// thread of this process, 0 when it is another process), journaling each
/// acknowledged offset as `old <offset>` (`produced`), and marks
/// `producing` after 200 records. When a send fails: the error must be
/// `UnknownTopic` (journaled `error <kind>`, and the marker `errored`);
/// then it waits for `d` to exist again and sends 50 records through a new
/// producer (journaled `new <offset>`), and prints `DONE`.
fn delete_producer(env: &ChildEnv) {
    let with_deleter = env.nums()[0] == 1;
    let mq = ok("open", Broker::open(&env.data, shared()));
    std::thread::scope(|s| {
        if with_deleter {
            s.spawn(|| {
                let mq = ok("open", Broker::open(&env.data, shared()));
                deleter(env, &mq);
            });
        }
        let mut journal = Journal::open(&env.file("produced"));
        let p = ok("producer", mq.producer(ProducerConfig::default()));
        env.ready();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut n = 0u64;
        let err = loop {
            assert!(Instant::now() < deadline, "the topic was never deleted");
            let value = payload("old", n, 50);
            match p.send(Record::new(DELETED).partition(0).value(value)) {
                Ok(md) => journal.line(&format!("old {}", md.offset)),
                Err(e) => break e,
            }
            n += 1;
            if n == 200 {
                mark(&env.work, "producing");
            }
        };
        journal.line(&format!("error {}", err.kind().name()));
        if !matches!(err, Error::UnknownTopic(ref t) if t == DELETED) {
            fail("send to a deleted topic: not UnknownTopic", &err);
        }
        mark(&env.work, "errored");
        wait_until(READY, "the topic created again", || {
            mq.topic(DELETED).is_ok()
        });
        let p = ok("new producer", mq.producer(ProducerConfig::default()));
        for n in 0..50 {
            let md = ok(
                "send to the new topic",
                p.send(
                    Record::new(DELETED)
                        .partition(0)
                        .value(payload("new", n, 50)),
                ),
            );
            journal.line(&format!("new {}", md.offset));
        }
    });
    ok("close", mq.close());
    println!("DONE");
}

/// Waits for `producing`, deletes `d`, marks `deleted`, waits for the
/// producer's `errored`, creates `d` again and marks `recreated`.
fn deleter(env: &ChildEnv, mq: &Broker) {
    assert!(wait_marker(&env.work, "producing", READY), "no producing");
    ok("delete_topic", mq.delete_topic(DELETED));
    mark(&env.work, "deleted");
    assert!(wait_marker(&env.work, "errored", READY), "no errored");
    ok(
        "create_topic again",
        mq.create_topic(DELETED, TopicConfig::new(1)),
    );
    mark(&env.work, "recreated");
}

/// Deleting a topic under a producer: the deleter is a thread of the
/// producer's process (`same_process`) or another process.
fn delete_while_writing(same_process: bool) {
    let dirs = Dirs::new();
    prepare(&dirs, DELETED, 1);
    let mut a = spawn(
        "delete_producer",
        "producer",
        &dirs,
        if same_process { "1" } else { "0" },
    );
    a.wait_ready(READY);
    let mut b = (!same_process).then(|| spawn("deleter", "deleter", &dirs, ""));
    if let Some(b) = &mut b {
        b.expect_success(Duration::from_secs(90));
    }
    let status = a.wait_for(Duration::from_secs(90));
    let status = status.unwrap_or_else(|| panic!("the producer hung:\n{}", a.output()));
    assert_eq!(
        signal_of(status),
        None,
        "the producer crashed:\n{}",
        a.output()
    );
    assert!(status.success(), "the producer failed:\n{}", a.output());
    assert!(a.stdout().contains("DONE"), "{}", a.output());
    let journal = read_lines(&dirs.work.join("produced"));
    assert!(
        journal.iter().any(|l| l == "error UnknownTopic"),
        "{journal:?}"
    );
    let old = journal.iter().filter(|l| l.starts_with("old ")).count();
    assert!(old >= 200, "only {old} records before the delete");
    let new: Vec<u64> = journal
        .iter()
        .filter_map(|l| l.strip_prefix("new "))
        .map(|o| o.parse().unwrap())
        .collect();
    assert_eq!(
        new,
        (0..50).collect::<Vec<u64>>(),
        "the new topic starts at 0"
    );
    // The new topic holds exactly the new producer's records.
    let mq = Broker::open(&dirs.data, readonly()).unwrap();
    let records = read_all(&mq, DELETED, 0);
    let tags: Vec<(String, u64)> = records
        .iter()
        .map(|(_, v)| check_payload(v).unwrap())
        .collect();
    let want: Vec<(String, u64)> = (0..50).map(|n| ("new".to_owned(), n)).collect();
    assert_eq!(tags, want);
}

#[test]
fn delete_while_writing_from_a_thread_of_the_writer() {
    delete_while_writing(true);
}

#[test]
fn delete_while_writing_from_another_process() {
    delete_while_writing(false);
}
