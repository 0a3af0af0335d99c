//! Shared mode across processes: who may open a data directory while
//! another process holds it (exclusive and shared opens exclude each other;
//! one writer at a time, `Locked` naming it), topic changes of a writer
//! process seen by the others, read-only handles that refuse every write
//! and change no file, and random bytes written into every
//! shared file while a writer and a reader process run.
//!
//! The other processes are this test binary run again in a role (see
//! `shared_mode_procs`). `MQLITE_SOAK=1` makes the random-bytes tests run
//! longer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mqlite::{Broker, ConsumerConfig, Error, ErrorKind, ProducerConfig, Record, TopicConfig};
use shared_mode_procs::{
    check_payload, exclusive, payload, pick, read_all, readonly, request_stop, shared, signal_of,
    spawn, wait_until, ChildEnv, Dirs, Rng,
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
        "hold_shared" => hold(&env, &shared(), false),
        "hold_exclusive" => hold(&env, &exclusive(), false),
        "hold_writer" => hold(&env, &shared(), true),
        "appender" => appender(&env),
        "topic_changer" => topic_changer(&env),
        "rb_writer" => random_bytes_writer(&env),
        "rb_reader" => random_bytes_reader(&env),
        other => panic!("unknown role {other}"),
    }
}

/// Opens the directory (and, if `write`, sends one record to `t`), then
/// holds it until asked to stop.
fn hold(env: &ChildEnv, config: &mqlite::Config, write: bool) {
    let mq = Broker::open(&env.data, config.clone()).unwrap();
    let producer = write.then(|| {
        let p = mq.producer(ProducerConfig::default()).unwrap();
        p.send(Record::new("t").partition(0).value(payload("held", 0, 3)))
            .unwrap();
        p
    });
    env.ready();
    while !env.stopping() {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(producer);
    mq.close().unwrap();
}

/// Creates topic `t` (`partitions`) in a shared open that is closed again.
fn prepare(data: &Path, partitions: u32) {
    let mq = Broker::open(data, shared()).unwrap();
    mq.create_topic("t", TopicConfig::new(partitions)).unwrap();
    mq.close().unwrap();
}

fn expect_locked(r: mqlite::Result<impl std::fmt::Debug>, holder_pid: Option<u32>, what: &str) {
    match r {
        Err(e @ Error::Locked { .. }) => {
            assert_eq!(e.kind(), ErrorKind::Locked, "{what}");
            if let Some(pid) = holder_pid {
                assert!(
                    e.to_string().contains(&pid.to_string()),
                    "{what}: {e} does not name the holder's pid {pid}"
                );
            }
        }
        other => panic!("{what}: expected Locked, got {other:?}"),
    }
}

fn expect_read_only(r: mqlite::Result<impl std::fmt::Debug>, what: &str) {
    match r {
        Err(e @ Error::ReadOnly(_)) => {
            assert_eq!(e.code(), 7, "{what}");
            assert_eq!(e.kind(), ErrorKind::ReadOnly, "{what}");
        }
        other => panic!("{what}: expected ReadOnly, got {other:?}"),
    }
}

#[test]
fn an_exclusive_open_is_locked_while_shared_handles_exist() {
    let dirs = Dirs::new();
    prepare(&dirs.data, 1);
    let mut holder = spawn("hold_shared", "holder", &dirs, "");
    holder.wait_ready(READY);
    expect_locked(
        Broker::open(&dirs.data, exclusive()),
        None,
        "exclusive open while another process has it shared",
    );
    // A shared open beside it works, and an exclusive one in this process
    // is refused while this process holds it shared too.
    let mine = Broker::open(&dirs.data, shared()).unwrap();
    assert_eq!(mine.topics(), vec!["t".to_owned()]);
    request_stop(&dirs.work);
    holder.expect_success(READY);
    expect_locked(
        Broker::open(&dirs.data, exclusive()),
        None,
        "exclusive open while this process has it shared",
    );
    mine.close().unwrap();
    drop(mine);
    // Nobody has it any more: the exclusive open works.
    let mq = Broker::open(&dirs.data, exclusive()).unwrap();
    assert_eq!(mq.topics(), vec!["t".to_owned()]);
}

#[test]
fn a_shared_open_is_locked_while_an_exclusive_handle_exists() {
    let dirs = Dirs::new();
    prepare(&dirs.data, 1);
    let mut holder = spawn("hold_exclusive", "holder", &dirs, "");
    holder.wait_ready(READY);
    expect_locked(
        Broker::open(&dirs.data, shared()),
        None,
        "shared open while another process has it exclusively",
    );
    expect_locked(
        Broker::open(&dirs.data, readonly()),
        None,
        "read-only open while another process has it exclusively",
    );
    request_stop(&dirs.work);
    holder.expect_success(READY);
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    assert_eq!(mq.topics(), vec!["t".to_owned()]);
}

#[test]
fn a_shared_open_waits_out_a_child_that_holds_a_copy_of_this_process_s_exclusive_lock() {
    // A child forked while this process had the directory open in
    // exclusive mode holds copies of its locks' descriptors until its
    // exec (here: until it exits, 100 ms on); a shared open right after
    // the exclusive handle closed waits for it, as an exclusive open does.
    let dirs = Dirs::new();
    prepare(&dirs.data, 1);
    let mq = Broker::open(&dirs.data, exclusive()).unwrap();
    // SAFETY: the child calls only async-signal-safe functions
    // (`nanosleep`, `_exit`) before it ends.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let nap = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        // SAFETY: as above.
        unsafe {
            libc::nanosleep(&raw const nap, std::ptr::null_mut());
            libc::_exit(0);
        }
    }
    assert!(pid > 0, "fork failed");
    mq.close().unwrap();
    let opened = Broker::open(&dirs.data, shared());
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &raw mut status, 0) };
    let mq = opened.unwrap();
    assert_eq!(mq.topics(), vec!["t".to_owned()]);
}

#[test]
fn writer_processes_append_and_change_topics_beside_each_other() {
    let dirs = Dirs::new();
    prepare(&dirs.data, 2);
    let mut writer = spawn("hold_writer", "writer", &dirs, "");
    writer.wait_ready(READY);
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let got = read_all(&mq, "t", 0);
    assert_eq!(got.len(), 1);
    assert_eq!(check_payload(&got[0].1).unwrap(), ("held".to_owned(), 0));
    // This process writes beside the other one, to the same partition.
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let md = p
        .send(Record::new("t").partition(0).value(payload("next", 1, 0)))
        .unwrap();
    assert_eq!(md.offset, 1);
    mq.create_topic("u", TopicConfig::new(1)).unwrap();
    expect_exists(mq.create_topic("u", TopicConfig::new(1)));
    mq.add_partitions("t", 3).unwrap();
    assert_eq!(mq.topic("t").unwrap().partitions.len(), 3);
    // The other writer dies holding nothing: appends go on.
    writer.kill9();
    let md = p
        .send(Record::new("t").partition(0).value(payload("next", 2, 0)))
        .unwrap();
    assert_eq!(md.offset, 2);
    // A new writer process appends after this one's records.
    let mut w2 = spawn("hold_writer", "writer2", &dirs, "");
    w2.wait_ready(READY);
    let got = read_all(&mq, "t", 0);
    let seen: Vec<(String, u64)> = got.iter().map(|(_, v)| check_payload(v).unwrap()).collect();
    assert_eq!(
        seen,
        vec![
            ("held".to_owned(), 0),
            ("next".to_owned(), 1),
            ("next".to_owned(), 2),
            ("held".to_owned(), 0)
        ]
    );
    assert_eq!(
        got.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    mq.delete_topic("u").unwrap();
    assert_eq!(mq.topics(), vec!["t".to_owned()]);
    request_stop(&dirs.work);
    w2.expect_success(READY);
}

fn expect_exists(r: mqlite::Result<()>) {
    match r {
        Err(Error::TopicExists(_)) => {}
        other => panic!("expected TopicExists, got {other:?}"),
    }
}

/// In a child: once `go` exists, appends `arg` records to partition 0 of
/// `t`, one per send (batches of one), each tagged with the child's name
/// and its sequence; roll-sized segments make the appenders roll often.
/// `arg` "N,PAD,1": values padded by PAD bytes, pages faulted in ahead of
/// the writer (`prefault`).
fn appender(env: &ChildEnv) {
    let nums = env.nums();
    let n = nums[0];
    let pad = |i: u64| nums.get(1).map_or((i % 7) as usize * 40, |&p| p as usize);
    let config = shared().prefault(nums.get(2) == Some(&1));
    let mq = Broker::open(&env.data, config).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    env.ready();
    while !env.file("go").exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 0..n {
        p.send(
            Record::new("t")
                .partition(0)
                .value(payload(&env.name, i, pad(i))),
        )
        .unwrap();
    }
    drop(p);
    mq.close().unwrap();
}

#[test]
fn appends_from_several_processes_interleave_whole_and_dense() {
    appenders_run(64 << 10, pick(3_000u64, 50_000), "");
}

/// Writers that fault pages in ahead of themselves (`prefault`, on the
/// broker's pool) while the others roll and trim the segments those pages
/// belong to: every record whole, dense and in order, and no process
/// killed (a page touched past the end of a file another process trimmed
/// would raise `SIGBUS`; the faulting in fails instead).
#[test]
fn appenders_faulting_pages_in_ahead_roll_beside_each_other() {
    appenders_run(1 << 20, pick(600u64, 6_000), ",6000,1");
}

/// Three appender processes (`n` records each, `how` appended to the
/// count in their argument) on partition 0 of a topic of `segment_bytes`
/// segments, started together; then checks what they wrote.
fn appenders_run(segment_bytes: u64, n: u64, how: &str) {
    let dirs = Dirs::new();
    {
        let mq = Broker::open(&dirs.data, shared()).unwrap();
        // Small segments: the processes roll often, each after another.
        mq.create_topic("t", TopicConfig::new(1).segment_bytes(segment_bytes))
            .unwrap();
        mq.close().unwrap();
    }
    let mut kids: Vec<_> = (0..3)
        .map(|i| spawn("appender", &format!("a{i}"), &dirs, &format!("{n}{how}")))
        .collect();
    for k in &mut kids {
        k.wait_ready(READY);
    }
    shared_mode_procs::mark(&dirs.work, "go");
    for k in &mut kids {
        k.expect_success(Duration::from_secs(120));
    }
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let got = read_all(&mq, "t", 0);
    assert_eq!(got.len() as u64, 3 * n);
    let mut next: BTreeMap<String, u64> = BTreeMap::new();
    for (i, (offset, v)) in got.iter().enumerate() {
        assert_eq!(*offset, i as u64, "offsets dense");
        let (tag, seq) = check_payload(v).unwrap();
        let want = next.entry(tag.clone()).or_insert(0);
        assert_eq!(seq, *want, "{tag}: in order, none lost or repeated");
        *want += 1;
    }
    assert!(mq.topic("t").unwrap().partitions[0].segments > 3);
}

#[test]
fn appenders_killed_at_random_never_block_the_others_or_tear_a_batch() {
    appenders_killed(64 << 10, "");
}

/// The same with writers that fault pages in and prepare their next
/// segment ahead of them (`prefault`, 1 MiB segments, 6 KB values), each
/// under its own name: besides, what the killed ones prepared is removed
/// by the next process that prepares a segment, while the directory stays
/// open (no lone open sweeps it), and nothing prepared is left once that
/// one closes.
#[test]
fn appenders_killed_while_preparing_segments_leave_nothing_behind() {
    let (dirs, mq) = appenders_killed(1 << 20, ",6000,1");
    let mut last = spawn("appender", "last", &dirs, "400,6000,1");
    last.wait_ready(READY);
    last.expect_success(Duration::from_secs(120));
    let left = prepared_files(&dirs.data);
    assert!(left.is_empty(), "left behind: {left:?}");
    mq.close().unwrap();
}

/// The names of the files of prepared segments (`next.*`) anywhere in the
/// data directory `data`.
fn prepared_files(data: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![data.to_owned()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            } else if name.starts_with("next.") {
                found.push(name);
            }
        }
    }
    found
}

/// Three appender processes (`how` appended to their argument, as in
/// [`appenders_run`]) on partition 0 of a topic of `segment_bytes`
/// segments, one of them killed with `-9` at random moments and started
/// again, for a few seconds; then checks that the survivors still append
/// and what every process wrote, and kills them. Returns the directories
/// and a shared handle, still open.
fn appenders_killed(segment_bytes: u64, how: &str) -> (Dirs, Broker) {
    let dirs = Dirs::new();
    {
        let mq = Broker::open(&dirs.data, shared()).unwrap();
        mq.create_topic("t", TopicConfig::new(1).segment_bytes(segment_bytes))
            .unwrap();
        mq.close().unwrap();
    }
    shared_mode_procs::mark(&dirs.work, "go");
    let mut rng = shared_mode_procs::Rng::new("appender kills");
    let until = Instant::now() + pick(Duration::from_secs(4), Duration::from_secs(60));
    let mut generation = 0;
    let start = |slot: usize, generation: &mut u32| {
        *generation += 1;
        let mut k = spawn(
            "appender",
            &format!("k{slot}g{generation}"),
            &dirs,
            &format!("100000000{how}"),
        );
        k.wait_ready(READY);
        k
    };
    let mut kids: Vec<_> = (0..3).map(|i| start(i, &mut generation)).collect();
    let mut kills = 0;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(rng.range(5, 60)));
        let i = rng.range(0, 3) as usize;
        let status = kids[i].kill9();
        assert_eq!(
            signal_of(status),
            Some(9),
            "{} ended on its own:\n{}",
            kids[i].name,
            kids[i].output()
        );
        kills += 1;
        kids[i] = start(i, &mut generation);
    }
    // The survivors still append: none is stuck behind a dead holder.
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let before = shared_mode_procs::end_offset(&mq, "t", 0);
    shared_mode_procs::wait_until(Duration::from_secs(10), "appends after the kills", || {
        shared_mode_procs::end_offset(&mq, "t", 0) > before + 1000
    });
    for k in &mut kids {
        k.kill9();
    }
    let got = read_all(&mq, "t", 0);
    let mut next: BTreeMap<String, u64> = BTreeMap::new();
    for (i, (offset, v)) in got.iter().enumerate() {
        assert_eq!(*offset, i as u64, "offsets dense");
        let (tag, seq) = check_payload(v).unwrap_or_else(|e| panic!("offset {offset}: {e}"));
        let want = next.entry(tag.clone()).or_insert(0);
        assert_eq!(seq, *want, "{tag}: in order, none lost or repeated");
        *want += 1;
    }
    println!(
        "{kills} kills, {} records from {} processes",
        got.len(),
        next.len()
    );
    (dirs, mq)
}

/// In a child: creates topic `late` (2 partitions) with 5 records in
/// partition 1, then, one step per `step.N` marker from the test: grows
/// it to 3 partitions; deletes `t`.
fn topic_changer(env: &ChildEnv) {
    let mq = Broker::open(&env.data, shared()).unwrap();
    mq.create_topic("late", TopicConfig::new(2)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..5 {
        p.send(
            Record::new("late")
                .partition(1)
                .value(payload("late", i, 0)),
        )
        .unwrap();
    }
    env.ready();
    let step = |n: u32| {
        let marker = env.file(&format!("step.{n}"));
        while !marker.exists() {
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    step(1);
    mq.add_partitions("late", 3).unwrap();
    step(2);
    mq.delete_topic("t").unwrap();
    while !env.stopping() {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(p);
    mq.close().unwrap();
}

#[test]
fn topic_changes_of_a_writer_process_become_visible_to_other_processes() {
    let dirs = Dirs::new();
    prepare(&dirs.data, 1);
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let ro = Broker::open(&dirs.data, readonly()).unwrap();
    // A consumer subscribed before the topic exists reads it once it does.
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.subscribe(&["late"]).unwrap();
    assert!(c.poll(Duration::from_millis(10)).unwrap().is_empty());
    let mut writer = spawn("topic_changer", "writer", &dirs, "");
    writer.wait_ready(READY);
    let secs = Duration::from_secs(10);
    for h in [&mq, &ro] {
        wait_until(secs, "topic late appearing", || {
            h.topic("late").is_ok_and(|t| t.partitions.len() == 2)
        });
        assert_eq!(h.topics(), vec!["late".to_owned(), "t".to_owned()]);
        let got = read_all(h, "late", 1);
        assert_eq!(got.len(), 5);
        assert_eq!(check_payload(&got[4].1).unwrap(), ("late".to_owned(), 4));
    }
    let mut got = Vec::new();
    wait_until(secs, "the subscriber reading late", || {
        got.extend(c.poll(Duration::from_millis(20)).unwrap());
        got.len() == 5
    });
    shared_mode_procs::mark(&dirs.work, "step.1");
    for h in [&mq, &ro] {
        wait_until(secs, "late growing to 3 partitions", || {
            h.topic("late").is_ok_and(|t| t.partitions.len() == 3)
        });
    }
    shared_mode_procs::mark(&dirs.work, "step.2");
    for h in [&mq, &ro] {
        wait_until(secs, "t disappearing", || h.topic("t").is_err());
        assert_eq!(h.topics(), vec!["late".to_owned()]);
        assert!(matches!(h.topic("t"), Err(Error::UnknownTopic(_))));
    }
    request_stop(&dirs.work);
    writer.expect_success(READY);
}

/// Every file under `dir`: its length, modification time and contents.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = e.metadata().unwrap();
            if md.is_dir() {
                todo.push(e.path());
                out.insert(e.path(), (0, md.modified().unwrap(), Vec::new()));
            } else {
                let bytes = std::fs::read(e.path()).unwrap();
                out.insert(e.path(), (md.len(), md.modified().unwrap(), bytes));
            }
        }
    }
    out
}

/// A directory with topic `t` (2 partitions, 10 records in partition 0)
/// and group `g`'s commit of offset 4 there, closed again.
fn prepare_for_read_only(data: &Path) {
    let mq = Broker::open(data, shared()).unwrap();
    mq.create_topic("t", TopicConfig::new(2)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    for i in 0..10 {
        p.send(Record::new("t").partition(0).value(payload("ro", i, 1)))
            .unwrap();
    }
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    c.commit_offsets(&[("t", 0, 4, "four")]).unwrap();
    c.close();
    mq.close().unwrap();
}

/// Opens the directory of [`prepare_for_read_only`] read-only: reads
/// everything there is, and is refused every write.
fn read_only_session(data: &Path) {
    let mq = Broker::open(data, readonly()).unwrap();
    assert_eq!(mq.topics(), vec!["t".to_owned()]);
    assert_eq!(mq.topic("t").unwrap().partitions[0].end_offset, 10);
    let got = read_all(&mq, "t", 0);
    assert_eq!(got.len(), 10);
    for (o, v) in &got {
        assert_eq!(check_payload(v).unwrap(), ("ro".to_owned(), *o));
    }
    let info = mq.describe_group("g").unwrap();
    assert!(
        info.committed
            .iter()
            .any(|(t, p, c)| t == "t" && *p == 0 && c.offset == 4),
        "{info:?}"
    );
    expect_read_only(mq.producer(ProducerConfig::default()), "producer");
    expect_read_only(mq.create_topic("u", TopicConfig::new(1)), "create_topic");
    expect_read_only(mq.delete_topic("t"), "delete_topic");
    expect_read_only(mq.add_partitions("t", 4), "add_partitions");
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    assert_eq!(c.poll(Duration::from_millis(500)).unwrap().len(), 6);
    expect_read_only(c.commit(), "commit");
    expect_read_only(c.commit_offsets(&[("t", 0, 9, "")]), "commit_offsets");
    assert_eq!(c.committed("t", 0).unwrap().unwrap().offset, 4);
    // Nothing more arrives: the wait for it parks and returns empty.
    assert!(c.poll(Duration::from_millis(50)).unwrap().is_empty());
    c.close();
    assert_eq!(mq.topics(), vec!["t".to_owned()]);
    assert_eq!(mq.topic("t").unwrap().partitions.len(), 2);
    mq.close().unwrap();
}

#[test]
fn a_read_only_handle_refuses_every_write() {
    let dirs = Dirs::new();
    prepare_for_read_only(&dirs.data);
    read_only_session(&dirs.data);
    // What it refused did not happen: a writable handle sees the same.
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    assert_eq!(mq.topics(), vec!["t".to_owned()]);
    assert_eq!(read_all(&mq, "t", 0).len(), 10);
    let c = mq.consumer(ConsumerConfig::group("g")).unwrap();
    assert_eq!(c.committed("t", 0).unwrap().unwrap().offset, 4);
}

#[test]
fn a_read_only_handle_sees_commits_made_after_its_open() {
    let dirs = Dirs::new();
    prepare_for_read_only(&dirs.data);
    let ro = Broker::open(&dirs.data, readonly()).unwrap();
    let committed = |mq: &Broker| {
        mq.describe_group("g")
            .unwrap()
            .committed
            .iter()
            .find(|(t, p, _)| t == "t" && *p == 0)
            .map(|(_, _, c)| c.offset)
    };
    assert_eq!(committed(&ro), Some(4));
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.assign(&[("t", 0)]).unwrap();
    c.commit_offsets(&[("t", 0, 7, "")]).unwrap();
    assert_eq!(committed(&mq), Some(7));
    assert_eq!(committed(&ro), Some(7), "the read-only handle's view");
    let mut reader = ro
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    reader.assign(&[("t", 0)]).unwrap();
    assert_eq!(reader.committed("t", 0).unwrap().unwrap().offset, 7);
}

/// The shared-mode lock files every shared handle takes, a read-only one
/// too (docs/shared-mode.md): `mqlite.shm` is a cache a process opening
/// alone resets.
const LOCK_FILES: [&str; 3] = ["LIVE", "INIT", "mqlite.shm"];

#[test]
fn a_read_only_handle_changes_no_file_but_the_shared_mode_lock_files() {
    let dirs = Dirs::new();
    prepare_for_read_only(&dirs.data);
    let before = snapshot(&dirs.data);
    // mtimes have a granularity: a write in the same tick could hide.
    std::thread::sleep(Duration::from_millis(20));
    read_only_session(&dirs.data);
    let after = snapshot(&dirs.data);
    let names = |s: &BTreeMap<PathBuf, _>| s.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&after), names(&before), "files added or removed");
    let mut changed = Vec::new();
    for (path, (len, mtime, bytes)) in &before {
        let (len2, mtime2, bytes2) = &after[path];
        let name = path.file_name().unwrap().to_string_lossy();
        if path.parent() == Some(dirs.data.as_path()) && LOCK_FILES.contains(&name.as_ref()) {
            assert_eq!(len, len2, "{} changed length", path.display());
            continue;
        }
        if len != len2 || mtime != mtime2 || bytes != bytes2 {
            changed.push(format!(
                "{}: length {len} -> {len2}, mtime {mtime:?} -> {mtime2:?}, contents {}",
                path.display(),
                if bytes == bytes2 { "same" } else { "changed" }
            ));
        }
    }
    assert!(
        changed.is_empty(),
        "a read-only handle wrote:\n{}",
        changed.join("\n")
    );
}

// Random bytes in every shared file while a writer and a reader run.

/// In a child: sends self-checking records to `t` until asked to stop,
/// carrying on through errors (reopening the directory after many in a
/// row). Prints `SENT n ERRORS e`.
fn random_bytes_writer(env: &ChildEnv) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut mq = Broker::open(&env.data, shared()).unwrap();
    let mut producer = Some(mq.producer(ProducerConfig::default()).unwrap());
    env.ready();
    let (mut sent, mut errors, mut in_a_row) = (0u64, 0u64, 0u32);
    let mut last_error = String::new();
    while !env.stopping() && Instant::now() < deadline {
        let r = match &producer {
            Some(p) => p
                .send(Record::new("t").partition((sent % 2) as u32).value(payload(
                    "rb",
                    sent,
                    (sent % 40) as usize,
                )))
                .map(|_| ()),
            None => mq
                .producer(ProducerConfig::default())
                .map(|p| producer = Some(p)),
        };
        match r {
            Ok(()) => {
                sent += 1;
                in_a_row = 0;
            }
            Err(e) => {
                errors += 1;
                in_a_row += 1;
                last_error = e.to_string();
                producer = None;
                if in_a_row % 50 == 0 {
                    drop(mq);
                    match Broker::open(&env.data, shared()) {
                        Ok(m) => mq = m,
                        Err(e) => {
                            println!("REOPEN FAILED {e}");
                            mq = loop {
                                std::thread::sleep(Duration::from_millis(20));
                                if let Ok(m) = Broker::open(&env.data, shared()) {
                                    break m;
                                }
                                if env.stopping() || Instant::now() > deadline {
                                    println!("SENT {sent} ERRORS {errors} LAST {last_error}");
                                    return;
                                }
                            };
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        if sent % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    println!("SENT {sent} ERRORS {errors} LAST {last_error}");
}

/// In a child: consumes `t` in group `g`, committing, until asked to stop;
/// errors are counted and it carries on. A record that is not one the
/// writer made ends it with status 3 (`BAD` on standard output). Prints
/// `GOT n ERRORS e`.
fn random_bytes_reader(env: &ChildEnv) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mq = Broker::open(&env.data, shared()).unwrap();
    let mut c = mq
        .consumer(ConsumerConfig::group("g").enable_auto_commit(false))
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    let mut observer = mq.consumer(ConsumerConfig::default()).unwrap();
    observer.assign(&[("t", 0), ("t", 1)]).unwrap();
    env.ready();
    let (mut got, mut errors) = (0u64, 0u64);
    let mut last_error = String::new();
    let mut last_progress = Instant::now();
    let check = |msgs: Vec<mqlite::Message>, got: &mut u64| {
        for m in msgs {
            match check_payload(m.value().unwrap_or_default()) {
                Ok((tag, seq)) if tag == "rb" && seq % 2 == u64::from(m.partition()) => {}
                other => {
                    println!("BAD record at {}/{}: {other:?}", m.partition(), m.offset());
                    std::process::exit(3);
                }
            }
            *got += 1;
        }
    };
    while !env.stopping() && Instant::now() < deadline {
        match c.poll(Duration::from_millis(50)) {
            Ok(msgs) => {
                let any = !msgs.is_empty();
                check(msgs, &mut got);
                if any {
                    if let Err(e) = c.commit() {
                        errors += 1;
                        last_error = e.to_string();
                    }
                }
            }
            Err(e) => {
                errors += 1;
                last_error = e.to_string();
                // As an application would: join again if it was dropped.
                let _ = c.subscribe(&["t"]);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        match observer.poll(Duration::ZERO) {
            Ok(msgs) => check(msgs, &mut got),
            Err(e) => {
                errors += 1;
                last_error = e.to_string();
            }
        }
        let _ = mq.describe_group("g");
        let _ = mq.topics();
        let _ = mq.topic("t");
        if last_progress.elapsed() > Duration::from_millis(20) {
            // Renamed into place: the parent never reads a half-written count.
            std::fs::write(env.file("reader.progress.tmp"), got.to_string()).unwrap();
            std::fs::rename(env.file("reader.progress.tmp"), env.file("reader.progress")).unwrap();
            last_progress = Instant::now();
        }
    }
    println!("GOT {got} ERRORS {errors} LAST {last_error}");
}

/// The shared files of a data directory: the directory's own, each
/// partition's tail page and each group's files.
fn shared_files(data: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![data.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                todo.push(path);
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let parent = d.file_name().unwrap_or_default().to_string_lossy();
            let in_groups = d.parent().is_some_and(|p| p == data) && parent == "groups";
            let ours = matches!(
                name.as_str(),
                "mqlite.shm" | "LIVE" | "INIT" | "LOCK" | "tail"
            ) && (d == data || name == "tail")
                || in_groups
                    && [".shm", ".state", ".lock"]
                        .iter()
                        .any(|x| name.ends_with(x))
                || parent.ends_with(".members");
            if ours {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// How [`damage`] hits a file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// Random bytes over the whole length.
    Overwrite,
    /// Random bytes, or grown with random bytes, or cut: a file that
    /// processes map (`mqlite.shm`, `tail`, `*.shm`, a group's lock page
    /// `*.lock`) only inside its last
    /// page, so that every page mapped stays backed; the others to 0 or an
    /// odd length.
    Cut,
    /// Mapped files cut to 0 bytes.
    CutMapped,
}

/// Whether processes map `path` (a shared page).
fn is_mapped(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy();
    name == "tail" || name.ends_with(".shm") || name.ends_with(".lock")
}

/// Damages every shared file once (see [`Damage`]).
fn damage(files: &[PathBuf], rng: &mut Rng, how: Damage) {
    for path in files {
        let Ok(f) = std::fs::OpenOptions::new().write(true).open(path) else {
            continue; // removed meanwhile
        };
        let len = f.metadata().map_or(0, |m| m.len());
        let mapped = is_mapped(path);
        let choice = match how {
            Damage::Cut => rng.range(0, 4),
            Damage::CutMapped if mapped => 0,
            Damage::Overwrite | Damage::CutMapped => 3,
        };
        match choice {
            0 if !mapped || how == Damage::CutMapped => {
                let _ = f.set_len(0);
            }
            0 | 1 if mapped => {
                // Inside the last page: (full, len].
                let full = len.saturating_sub(1) / 4096 * 4096;
                let _ = f.set_len((full + 1 + rng.range(0, len - full)).max(1));
            }
            1 => {
                let _ = f.set_len(rng.range(0, len.max(2)) | 1);
            }
            2 => {
                let extra = rng.range(1, 5000) as usize;
                let _ = f.write_all_at(&rng.bytes(extra), len);
            }
            _ => {
                let _ = f.write_all_at(&rng.bytes(len.max(8) as usize), 0);
            }
        }
    }
}

/// Runs a writer and a reader process while `damage` hits every shared
/// file, then checks: neither crashed (no signal) nor hung, both carry on
/// once the damage stops (the reader reads new records), neither ended
/// with an error status, and the reader never got a record the writer did
/// not make.
fn random_bytes_run(how: Damage) {
    let dirs = Dirs::new();
    prepare(&dirs.data, 2);
    let mut writer = spawn("rb_writer", "writer", &dirs, "");
    writer.wait_ready(READY);
    let mut reader = spawn("rb_reader", "reader", &dirs, "");
    reader.wait_ready(READY);
    // Some traffic first, so that the group files exist.
    std::thread::sleep(Duration::from_millis(300));
    let mut rng = Rng::new("random bytes");
    let end = Instant::now() + pick(Duration::from_secs(3), Duration::from_secs(30));
    let mut rounds = 0;
    let mut hit = std::collections::BTreeSet::new();
    while Instant::now() < end {
        let files = shared_files(&dirs.data);
        hit.extend(
            files
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned()),
        );
        damage(&files, &mut rng, how);
        rounds += 1;
        std::thread::sleep(Duration::from_millis(rng.range(5, 80)));
        for p in [&mut writer, &mut reader] {
            if let Some(s) = p.exited() {
                panic!("{} ended during the damage ({s}):\n{}", p.name, p.output());
            }
        }
    }
    for want in [
        "mqlite.shm",
        "LIVE",
        "INIT",
        "tail",
        "g.state",
        "g.lock",
        "g.shm",
    ] {
        assert!(hit.contains(want), "{want} was never damaged: {hit:?}");
    }
    // Once the damage stops, both carry on: the reader gets new records.
    let progress = || {
        std::fs::read_to_string(dirs.work.join("reader.progress"))
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let at_end = progress();
    let deadline = Instant::now() + Duration::from_secs(20);
    while progress() < at_end + 100 {
        assert!(
            Instant::now() < deadline,
            "no progress 20 s after the damage ({at_end} records read):\n{}\n{}",
            writer.output(),
            reader.output()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    request_stop(&dirs.work);
    for p in [&mut writer, &mut reader] {
        match p.wait_for(Duration::from_secs(30)) {
            None => panic!("{} hung after the damage:\n{}", p.name, p.output()),
            Some(s) => {
                assert_eq!(signal_of(s), None, "{} crashed:\n{}", p.name, p.output());
                assert!(s.success(), "{} failed ({s}):\n{}", p.name, p.output());
            }
        }
    }
    let sent = writer.line("SENT ").unwrap_or_default();
    let got = reader.line("GOT ").unwrap_or_default();
    eprintln!("{rounds} rounds of damage; writer: {sent}; reader: {got}");
    assert!(!reader.stdout().contains("BAD"), "{}", reader.output());
}

#[test]
fn random_bytes_in_every_shared_file_give_errors_or_fallbacks_never_a_crash() {
    random_bytes_run(Damage::Overwrite);
}

#[test]
fn shared_files_cut_or_grown_give_errors_or_fallbacks_never_a_crash() {
    random_bytes_run(Damage::Cut);
}

#[test]
#[ignore = "a documented limit (docs/shared-mode.md): a process using mqlite.shm, a tail \
            page or a group's .shm or .lock dies of SIGBUS when something else cuts that file to \
            0 bytes"]
fn shared_pages_cut_to_nothing_give_errors_or_fallbacks_never_a_crash() {
    random_bytes_run(Damage::CutMapped);
}
