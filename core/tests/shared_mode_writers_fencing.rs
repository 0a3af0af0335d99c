//! Named producers across processes of a shared data directory: a named
//! producer opened by a second client fences the first, which then gets
//! `ProducerFenced` and writes nothing more, while the new one keeps the
//! identity (same producer id, higher epoch) and resumes after its
//! sequences; and producer ids are unique across processes.
//!
//! The second client is a thread of the first's process in one variant,
//! another process in the other.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::time::Duration;

use mqlite::{Broker, ConsumerConfig, Error, OffsetReset, ProducerConfig, Record, TopicConfig};
use shared_mode_procs::{
    check_payload, fail, mark, ok, payload, read_all, read_lines, readonly, shared, spawn,
    wait_marker, ChildEnv, Dirs, Journal,
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
        "fence_old" => fence_old(&env),
        "fence_new" => {
            let mq = ok("open", Broker::open(&env.data, shared()));
            fence_new(&env, &mq);
        }
        "named_x" => named_x(&env),
        other => panic!("unknown role {other}"),
    }
}

fn prepare(dirs: &Dirs, topic: &str, partitions: u32) {
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    mq.create_topic(topic, TopicConfig::new(partitions))
        .unwrap();
    mq.close().unwrap();
}

// Fencing and producer ids across processes.

const FENCED: &str = "f";

/// The first instance of named producer `f` (arg: 1 when the second runs
/// as a thread of this process): sends sequences 0..100, journals
/// `old <id> <epoch>` and the id of an anonymous producer (`anon <id>`,
/// file `ids`), marks `old.sent`, waits for `new.opened`, then sends
/// sequence 100: it must fail with `ProducerFenced` (journaled `fenced`).
fn fence_old(env: &ChildEnv) {
    let with_new = env.nums()[0] == 1;
    let mq = ok("open", Broker::open(&env.data, shared()));
    std::thread::scope(|s| {
        if with_new {
            s.spawn(|| {
                let mq = ok("open", Broker::open(&env.data, shared()));
                fence_new(env, &mq);
            });
        }
        let mut ids = Journal::open(&env.file("ids"));
        let p = ok(
            "named producer",
            mq.producer(ProducerConfig::default().name("f")),
        );
        let anon = ok("producer", mq.producer(ProducerConfig::default()));
        ids.line(&format!("old {} {}", p.producer_id(), p.epoch()));
        ids.line(&format!("anon {}", anon.producer_id()));
        for seq in 0..100 {
            let r = Record::new(FENCED)
                .partition(0)
                .value(payload("old", seq, 10));
            ok("send", p.send(r.sequence(seq as i64)));
        }
        mark(&env.work, "old.sent");
        assert!(wait_marker(&env.work, "new.opened", READY), "no new.opened");
        let r = Record::new(FENCED)
            .partition(0)
            .value(payload("old", 100, 10));
        match p.send(r.sequence(100)) {
            Err(Error::ProducerFenced { .. }) => ids.line("fenced"),
            Err(e) => fail("send after fencing: not ProducerFenced", &e),
            Ok(md) => panic!("the fenced producer wrote at {}", md.offset),
        }
        mark(&env.work, "old.fenced");
    });
    ok("close", mq.close());
    println!("DONE");
}

/// The second instance of `f`: waits for `old.sent`, opens `f` (journals
/// `new <id> <epoch> <last_sequence>` and `anon <id>` of an anonymous
/// producer), marks `new.opened`, waits for `old.fenced`, sends sequences
/// 100..200.
fn fence_new(env: &ChildEnv, mq: &Broker) {
    let mut ids = Journal::open(&env.file("ids"));
    assert!(wait_marker(&env.work, "old.sent", READY), "no old.sent");
    let p = ok(
        "named producer",
        mq.producer(ProducerConfig::default().name("f")),
    );
    let anon = ok("producer", mq.producer(ProducerConfig::default()));
    let last = ok("last_sequence", p.last_sequence());
    ids.line(&format!(
        "new {} {} {}",
        p.producer_id(),
        p.epoch(),
        last.unwrap_or(-1)
    ));
    ids.line(&format!("anon {}", anon.producer_id()));
    mark(&env.work, "new.opened");
    assert!(wait_marker(&env.work, "old.fenced", READY), "no old.fenced");
    for seq in 100..200 {
        let r = Record::new(FENCED)
            .partition(0)
            .value(payload("new", seq, 10));
        let md = ok("send", p.send(r.sequence(seq as i64)));
        assert!(!md.duplicate);
    }
}

/// A named producer opened by a second client fences the first: the
/// second is a thread of the first's process (`same_process`) or another
/// process.
fn fencing(same_process: bool) {
    let dirs = Dirs::new();
    prepare(&dirs, FENCED, 1);
    let mut old = spawn(
        "fence_old",
        "old",
        &dirs,
        if same_process { "1" } else { "0" },
    );
    let mut new = (!same_process).then(|| spawn("fence_new", "new", &dirs, ""));
    if let Some(new) = &mut new {
        new.expect_success(Duration::from_secs(90));
    }
    old.expect_success(Duration::from_secs(90));
    let ids = read_lines(&dirs.work.join("ids"));
    let field = |prefix: &str| -> Vec<i64> {
        let line = ids
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {ids:?}"));
        line.split(' ')
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let (o, n) = (field("old "), field("new "));
    assert_eq!(o[0], n[0], "one name, one producer id: {ids:?}");
    assert!(
        n[1] > o[1],
        "the newer instance has the higher epoch: {ids:?}"
    );
    assert_eq!(
        n[2], 99,
        "the new instance resumes after the old one's sequences"
    );
    assert!(ids.iter().any(|l| l == "fenced"), "{ids:?}");
    let mut all: Vec<i64> = ids
        .iter()
        .filter_map(|l| l.strip_prefix("anon "))
        .map(|v| v.parse().unwrap())
        .collect();
    all.push(o[0]);
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        all.len(),
        count,
        "producer ids unique across processes: {ids:?}"
    );
    let mq = Broker::open(&dirs.data, readonly()).unwrap();
    let got: Vec<(String, u64)> = read_all(&mq, FENCED, 0)
        .iter()
        .map(|(_, v)| check_payload(v).unwrap())
        .collect();
    let want: Vec<(String, u64)> = (0..200)
        .map(|s| ((if s < 100 { "old" } else { "new" }).to_owned(), s))
        .collect();
    assert_eq!(
        got, want,
        "the fenced instance wrote nothing after the fence"
    );
}

#[test]
fn a_named_producer_in_a_second_client_of_one_process_fences_the_first() {
    fencing(true);
}

#[test]
fn a_named_producer_in_another_process_fences_the_first() {
    fencing(false);
}

/// Fields of a partition's tail page (see core/src/shared/tail.rs): the
/// sequence lock and the append lock's holder.
const TAIL_SEQ: u64 = 8;
const TAIL_OWNER: u64 = 48;

/// A writer process that died while writing a partition's tail page (its
/// sequence left odd, the append lock still its own) hides nothing from a
/// process that opens after it: one that only reads sees every record, a
/// named producer in one that writes resumes after its last sequence,
/// without a duplicate, and a consumer there reads every record.
#[test]
fn a_tail_page_left_half_written_hides_nothing_from_the_next_process() {
    use std::os::unix::fs::FileExt;
    let dirs = Dirs::new();
    prepare(&dirs, "t", 1);
    let send = |p: &mqlite::Producer, seq: u64| {
        let r = Record::new("t").partition(0).value(payload("n", seq, 10));
        p.send(r.sequence(seq as i64)).unwrap()
    };
    {
        let mq = Broker::open(&dirs.data, shared()).unwrap();
        let p = mq.producer(ProducerConfig::default().name("n")).unwrap();
        for seq in 0..5 {
            send(&p, seq);
        }
        p.close().unwrap();
        mq.close().unwrap();
    }
    let tail = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dirs.data.join("topics/t/0/tail"))
        .unwrap();
    let mut seq = [0u8; 4];
    tail.read_exact_at(&mut seq, TAIL_SEQ).unwrap();
    let odd = u32::from_le_bytes(seq) | 1;
    tail.write_all_at(&odd.to_le_bytes(), TAIL_SEQ).unwrap();
    // A token no live process holds.
    tail.write_all_at(&0x5eed_0000_0001u64.to_le_bytes(), TAIL_OWNER)
        .unwrap();

    // A process that only reads, opened first, sees every record.
    let ro = Broker::open(&dirs.data, readonly()).unwrap();
    let mut c = ro
        .consumer(ConsumerConfig::default().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seen.len() < 5 && std::time::Instant::now() < deadline {
        for m in c.poll(Duration::from_millis(50)).unwrap() {
            seen.push(check_payload(m.value().unwrap()).unwrap().1);
        }
    }
    assert_eq!(seen, (0..5).collect::<Vec<u64>>());

    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let p = mq.producer(ProducerConfig::default().name("n")).unwrap();
    assert_eq!(p.last_sequence().unwrap(), Some(4));
    assert_eq!(p.next_sequence().unwrap(), 5);
    let md = send(&p, 5);
    assert!(!md.duplicate);
    assert_eq!(md.offset, 5);
    let read = read_all(&mq, "t", 0);
    let seqs: Vec<u64> = read
        .iter()
        .map(|(_, v)| check_payload(v).unwrap().1)
        .collect();
    assert_eq!(seqs, (0..6).collect::<Vec<u64>>());
}

/// Named producer `x` sends sequences 0..10 to topic `m`, partition 0.
fn named_x(env: &ChildEnv) {
    let mq = ok("open", Broker::open(&env.data, shared()));
    let x = ok(
        "named producer",
        mq.producer(ProducerConfig::default().name("x")),
    );
    for seq in 0..10 {
        let r = Record::new("m").partition(0).value(payload("x", seq, 10));
        ok("send", x.send(r.sequence(seq as i64)));
    }
    ok("close", x.close());
    ok("close", mq.close());
    println!("DONE");
}

/// A process whose partition log loaded its producers' state (a named
/// producer of its own appended there) takes in the named-producer batches
/// another process appends after that, when it follows them (its
/// follower, or its next append under the append lock): a named producer
/// of the other process that then resumes in this one knows its last
/// sequence, and a re-sent sequence is a duplicate.
#[test]
fn a_named_producer_resumes_in_a_process_that_loaded_its_producers_before_the_other_wrote() {
    let dirs = Dirs::new();
    prepare(&dirs, "m", 1);
    let send = |p: &mqlite::Producer, who: &str, seq: u64| {
        let r = Record::new("m").partition(0).value(payload(who, seq, 10));
        p.send(r.sequence(seq as i64)).unwrap()
    };
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let own = mq.producer(ProducerConfig::default().name("own")).unwrap();
    send(&own, "own", 0);
    spawn("named_x", "x", &dirs, "").expect_success(Duration::from_secs(60));
    // Follows x's batches by now.
    send(&own, "own", 1);
    let x = mq.producer(ProducerConfig::default().name("x")).unwrap();
    assert_eq!(x.last_sequence().unwrap(), Some(9), "x resumes after 9");
    assert!(send(&x, "x", 5).duplicate, "sequence 5 was written");
    assert!(!send(&x, "x", 10).duplicate);
    let got: Vec<(String, u64)> = read_all(&mq, "m", 0)
        .iter()
        .map(|(_, v)| check_payload(v).unwrap())
        .collect();
    let mut want = vec![("own".to_owned(), 0)];
    want.extend((0..10).map(|s| ("x".to_owned(), s)));
    want.extend([("own".to_owned(), 1), ("x".to_owned(), 10)]);
    assert_eq!(got, want);
    mq.close().unwrap();
}
