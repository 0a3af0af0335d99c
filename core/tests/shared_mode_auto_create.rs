//! Topic creation on first use from several processes of a shared data
//! directory: racers released at once by a marker file each send to, or
//! assign, the same missing topic; every one succeeds on the one topic,
//! created with `default_partitions`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::time::Duration;

use mqlite::{Broker, ProducerConfig, Record};
use shared_mode_procs::{
    mark, ok, read_all, readonly, shared, spawn, wait_marker, wait_until, ChildEnv, Dirs, Proc,
};

const READY: Duration = Duration::from_secs(30);
const ROUNDS: u64 = 10;
const PARTITIONS: u32 = 3;

/// The roles of this file's child processes.
#[test]
#[ignore = "a role run in a child process by the other tests of this file"]
fn child() {
    let Some(env) = ChildEnv::get() else {
        return;
    };
    assert_eq!(env.role, "racer");
    let config = shared()
        .auto_create_topics(true)
        .default_partitions(PARTITIONS);
    let mq = ok("open", Broker::open(&env.data, config));
    let p = ok("producer", mq.producer(ProducerConfig::default()));
    let mut c = ok("consumer", mq.consumer(mqlite::ConsumerConfig::default()));
    for r in 0..ROUNDS {
        mark(&env.work, &format!("ready.{r}.{}", env.name));
        assert!(
            wait_marker(&env.work, &format!("GO.{r}"), READY),
            "no GO.{r}"
        );
        let topic = format!("auto{r}");
        // Racers alternate between a send and an assign first.
        if (r + u64::from(env.name == "b")) % 2 == 0 {
            ok("assign", c.assign(&[(&topic, PARTITIONS - 1)]));
        }
        ok(
            "send",
            p.send(Record::new(&topic).partition(0).value(env.name.clone())),
        );
    }
    drop((p, c));
    ok("close", mq.close());
    println!("RACED");
}

#[test]
fn processes_auto_creating_one_topic_at_once_share_it() {
    let dirs = Dirs::new();
    Broker::open(&dirs.data, shared()).unwrap().close().unwrap();
    let names = ["a", "b"];
    let mut procs: Vec<Proc> = names.iter().map(|n| spawn("racer", n, &dirs, "")).collect();
    for r in 0..ROUNDS {
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
    let mq = Broker::open(&dirs.data, readonly()).unwrap();
    for r in 0..ROUNDS {
        let topic = format!("auto{r}");
        assert_eq!(
            mq.topic(&topic).unwrap().partitions.len(),
            PARTITIONS as usize
        );
        let mut got: Vec<Vec<u8>> = read_all(&mq, &topic, 0)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        got.sort();
        assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec()], "{topic}");
    }
    assert_eq!(mq.topics().len() as u64, ROUNDS);
}
