//! Writer processes taking turns on one partition. The process that takes
//! the append lock after another one appended learns the log's end from
//! the partition's tail page: it believes the published end there once
//! the last batch the page names checks out (it ends exactly there, and
//! its offsets end at the page's next offset), and otherwise walks the new
//! batches' headers. Either way its own append lands at the true end,
//! offsets stay dense, and the segment's largest timestamp includes the
//! other process's records.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared_mode_procs;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mqlite::{Broker, ProducerConfig, Record, TopicConfig};
use shared_mode_procs::{
    check_payload, exclusive, ok, payload, read_all, shared, spawn, ChildEnv, Dirs,
};

const WAIT: Duration = Duration::from_secs(60);

/// The roles of this file's child processes.
#[test]
#[ignore = "a role run in a child process by the other tests of this file"]
fn child() {
    let Some(env) = ChildEnv::get() else {
        return;
    };
    match env.role.as_str() {
        "turn" => turn(&env),
        "late" => late(&env),
        other => panic!("unknown role {other}"),
    }
}

/// Opens the directory and sends `count` records (arg `ts,first,count`)
/// to `t`/0 one at a time with an anonymous producer, record `i` with
/// timestamp `ts + i` and payload `("turn", first + i)`; closes.
fn turn(env: &ChildEnv) {
    let [ts, first, count] = env.nums()[..] else {
        panic!("arg: ts,first,count");
    };
    let mq = ok("open", Broker::open(&env.data, shared()));
    let p = ok("producer", mq.producer(ProducerConfig::default()));
    for i in 0..count {
        let r = Record::new("t")
            .partition(0)
            .timestamp((ts + i) as i64)
            .value(payload("turn", first + i, 10));
        ok("send", p.send(r));
    }
    drop(p);
    ok("close", mq.close());
    println!("DONE");
}

/// Opens the directory after the parent wrote records with timestamps
/// 9,000-9,002 at offsets 0-2, sends one record (timestamp 5,000), then
/// looks up timestamp 9,001 in its own view of the log: prints
/// `FOUND <offset>` or `FOUND none`.
fn late(env: &ChildEnv) {
    let mq = ok("open", Broker::open(&env.data, shared()));
    let p = ok("producer", mq.producer(ProducerConfig::default()));
    let r = Record::new("t")
        .partition(0)
        .timestamp(5_000)
        .value(payload("late", 3, 10));
    let md = ok("send", p.send(r));
    assert_eq!(md.offset, 3);
    match ok("lookup", mq.offset_for_timestamp("t", 0, 9_001)) {
        Some(o) => println!("FOUND {o}"),
        None => println!("FOUND none"),
    }
    drop(p);
    ok("close", mq.close());
}

/// Sends records `first..first + count` of `tag` to `t`/0, timestamps from
/// `ts` on; returns their offsets.
fn send(mq: &Broker, tag: &str, first: u64, count: u64, ts: i64) -> Vec<u64> {
    let p = mq.producer(ProducerConfig::default()).unwrap();
    (0..count)
        .map(|i| {
            let r = Record::new("t")
                .partition(0)
                .timestamp(ts + i as i64)
                .value(payload(tag, first + i, 10));
            p.send(r).unwrap().offset
        })
        .collect()
}

/// Runs a `turn` child to its end (arg `ts,first,count`).
fn child_turn(dirs: &Dirs, name: &str, arg: &str) {
    let mut c = spawn("turn", name, dirs, arg);
    let status = c.wait_for(WAIT);
    assert!(
        status.is_some_and(|s| s.success()),
        "{name}: {status:?}\n{}",
        c.output()
    );
}

/// Every record of `t`/0, read back as (offset, tag, number).
fn records(mq: &Broker) -> Vec<(u64, String, u64)> {
    read_all(mq, "t", 0)
        .into_iter()
        .map(|(o, v)| {
            let (tag, n) = check_payload(&v).unwrap();
            (o, tag, n)
        })
        .collect()
}

/// What the parent, the child and the parent again wrote, in order.
fn expected() -> Vec<(u64, String, u64)> {
    let mut e: Vec<(u64, String, u64)> = (0..3).map(|i| (i, "main".to_owned(), i)).collect();
    e.extend((3..6).map(|i| (i, "turn".to_owned(), i)));
    e.push((6, "main".to_owned(), 6));
    e
}

#[test]
fn a_writer_taking_its_turn_after_another_process_keeps_offsets_dense_and_the_largest_timestamp() {
    let dirs = Dirs::new();
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    assert_eq!(send(&mq, "main", 0, 3, 1_000), [0, 1, 2]);
    // The first lookup checks the segment's time index once; later ones
    // rely on the largest timestamp the log keeps up to date.
    assert_eq!(mq.offset_for_timestamp("t", 0, 1_001).unwrap(), Some(1));
    assert_eq!(mq.offset_for_timestamp("t", 0, 5_000).unwrap(), None);
    child_turn(&dirs, "turn", "5000,3,3");
    // This append takes the lock after the child's: it catches up first.
    assert_eq!(send(&mq, "main", 6, 1, 1_003), [6]);
    assert_eq!(mq.offset_for_timestamp("t", 0, 5_001).unwrap(), Some(4));
    assert_eq!(mq.offset_for_timestamp("t", 0, 5_003).unwrap(), None);
    assert_eq!(records(&mq), expected());
    mq.close().unwrap();
    // What is on disk reads the same alone.
    let mq = Broker::open(&dirs.data, exclusive()).unwrap();
    assert_eq!(records(&mq), expected());
    assert_eq!(mq.offset_for_timestamp("t", 0, 5_002).unwrap(), Some(5));
}

#[test]
fn a_process_that_opens_after_others_wrote_finds_their_timestamps() {
    let dirs = Dirs::new();
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    assert_eq!(send(&mq, "main", 0, 3, 9_000), [0, 1, 2]);
    let mut c = spawn("late", "late", &dirs, "");
    let status = c.wait_for(WAIT);
    assert!(status.is_some_and(|s| s.success()), "{}", c.output());
    assert!(c.output().contains("FOUND 1"), "{}", c.output());
    assert_eq!(mq.offset_for_timestamp("t", 0, 9_001).unwrap(), Some(1));
    assert_eq!(mq.offset_for_timestamp("t", 0, 4_000).unwrap(), Some(0));
}

/// The partition's tail page: the only file named `tail` under `dir`.
fn tail_file(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir).unwrap().find_map(|entry| {
        let path = entry.unwrap().path();
        if path.is_dir() {
            tail_file(&path)
        } else {
            path.file_name()
                .is_some_and(|n| n == "tail")
                .then_some(path)
        }
    })
}

// Words of the tail page (see `core/src/shared/tail.rs`).
const SEQ: u64 = 8;
const NEXT_OFFSET: u64 = 16;
const ACTIVE_BASE: u64 = 24;
const PUBLISHED: u64 = 32;
const OWNER: u64 = 48;
const IN_PROGRESS: u64 = 64;
const LAST_TAG: u64 = 100;
const LAST_POS: u64 = 104;

fn read_u32(f: &std::fs::File, at: u64) -> u32 {
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, at).unwrap();
    u32::from_le_bytes(b)
}

fn read_u64(f: &std::fs::File, at: u64) -> u64 {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, at).unwrap();
    u64::from_le_bytes(b)
}

/// Damages an open tail page in place.
type Damage = fn(&std::fs::File);

/// The parent sends offsets 0-2 and a child 3-5 to `t`/0; `look` checks
/// the tail page, `damage` damages it; the parent's next send must get
/// offset 6, and the log read back (in shared mode, then alone) what
/// [`expected`] says.
fn after_damage(what: &str, look: impl Fn(&std::fs::File), damage: Damage) {
    let dirs = Dirs::new();
    let mq = Broker::open(&dirs.data, shared()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    assert_eq!(send(&mq, "main", 0, 3, 1_000), [0, 1, 2], "{what}");
    child_turn(&dirs, "turn", "5000,3,3");
    {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(tail_file(&dirs.data).expect("no tail page"))
            .unwrap();
        look(&f);
        damage(&f);
    }
    assert_eq!(send(&mq, "main", 6, 1, 1_003), [6], "{what}");
    assert_eq!(records(&mq), expected(), "{what}");
    mq.close().unwrap();
    let mq = Broker::open(&dirs.data, exclusive()).unwrap();
    assert_eq!(records(&mq), expected(), "{what}: on disk");
    mq.close().unwrap();
}

#[test]
fn a_tail_page_whose_last_batch_does_not_check_out_is_walked_instead() {
    // Each damage keeps the page's sequence and the last batch's tag
    // whole, so that only the batch check can tell.
    let damages: [(&str, Damage); 3] = [
        ("a published end past the true one", |f| {
            let end = read_u64(f, PUBLISHED);
            f.write_all_at(&(end + 4096).to_le_bytes(), PUBLISHED)
                .unwrap();
        }),
        ("a next offset past the true one", |f| {
            let next = read_u64(f, NEXT_OFFSET);
            f.write_all_at(&(next + 10).to_le_bytes(), NEXT_OFFSET)
                .unwrap();
        }),
        ("a last batch inside another batch", |f| {
            let pos = read_u64(f, LAST_POS);
            f.write_all_at(&(pos + 1).to_le_bytes(), LAST_POS).unwrap();
        }),
    ];
    for (what, damage) in damages {
        after_damage(
            what,
            |f| {
                let seq = read_u32(f, SEQ);
                assert_eq!(seq % 2, 0, "{what}: a write under way");
                assert_eq!(read_u32(f, LAST_TAG), seq, "{what}: no last batch");
            },
            damage,
        );
    }
}

#[test]
fn a_tail_page_that_cannot_be_believed_is_rebuilt_from_the_files_losing_nothing_published() {
    // The parent last looked at the log when it ended at offset 3; a child
    // then appended offsets 3-5 and published them; then the page is
    // damaged. The parent's next append must find the true end in the
    // files, not start from where it last looked (which would clear or
    // overwrite the child's records).
    let damages: [(&str, Damage); 4] = [
        (
            "an active segment past the next offset, held by a dead process",
            |f| {
                f.write_all_at(&(1u64 << 40).to_le_bytes(), ACTIVE_BASE)
                    .unwrap();
                f.write_all_at(&0x5eed_dead_beef_u64.to_le_bytes(), OWNER)
                    .unwrap();
                f.write_all_at(&(1u64 << 20).to_le_bytes(), IN_PROGRESS)
                    .unwrap();
            },
        ),
        (
            "an active segment past the next offset, the lock free",
            |f| {
                f.write_all_at(&(1u64 << 40).to_le_bytes(), ACTIVE_BASE)
                    .unwrap();
            },
        ),
        (
            "every word after the next offset zeroed (a cut file)",
            |f| {
                f.write_all_at(&[0; 4096 - 24], 24).unwrap();
            },
        ),
        (
            "a published end inside a batch, held by a dead process",
            |f| {
                let end = read_u64(f, PUBLISHED);
                f.write_all_at(&(end - 3).to_le_bytes(), PUBLISHED).unwrap();
                f.write_all_at(&0x5eed_dead_beef_u64.to_le_bytes(), OWNER)
                    .unwrap();
            },
        ),
    ];
    for (what, damage) in damages {
        after_damage(
            what,
            |f| assert_eq!(read_u64(f, NEXT_OFFSET), 6, "{what}"),
            damage,
        );
    }
}
