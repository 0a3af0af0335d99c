//! `mqlite verify` and `mqlite repair` on damaged data directories:
//! verify never changes anything, repair says what it cuts before it cuts.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use common::{fails, ok, run};
use serde_json::Value;

#[test]
fn verify_reports_corruption_with_its_place() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(
        dir,
        &[
            "topic",
            "create",
            "t",
            "--partitions",
            "1",
            "--segment-bytes",
            "4096",
        ],
        None,
    );
    let lines = (0..400)
        .map(|i| format!("value-{i:04}-padding\n"))
        .collect::<Vec<_>>()
        .concat();
    ok(dir, &["produce", "t"], Some(&lines));
    let text = ok(dir, &["verify"], None);
    assert!(text.contains("t/0: 400 messages, ok"), "{text}");
    let v: Value = serde_json::from_str(&ok(dir, &["verify", "t", "--json"], None)).unwrap();
    assert_eq!(v[0]["messages"], 400);
    assert!(v[0]["error"].is_null());
    assert_eq!(v[0]["status"], "ok");
    assert_eq!(v[0]["shutdown"], "clean");
    assert_eq!(v[0]["end_offset"], 400);
    assert_eq!(v[0]["recovery"]["truncated_bytes"], 0);

    // Damage a byte inside the first (sealed) segment's first batch.
    let seg = dir.join("topics/t/0/00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[70] ^= 0xff;
    std::fs::write(&seg, bytes).unwrap();
    let out = run(dir, &["verify"], None);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("CORRUPT"), "{stdout}");
    assert!(
        stdout.contains("topics/t/0/00000000000000000000.log at byte 0"),
        "names the file and the place: {stdout}"
    );
    assert!(stdout.contains("CRC32C mismatch"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr, "mqlite: 1 partition(s) with corruption\n");

    let out = run(dir, &["verify", "--json"], None);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v[0];
    assert_eq!(p["status"], "corrupt");
    assert!(
        p["error"].as_str().unwrap().contains("CRC32C mismatch"),
        "{p}"
    );
    let problem = &p["problems"][0];
    assert_eq!(problem["severity"], "error");
    assert_eq!(problem["kind"], "batch");
    assert_eq!(problem["file"], "topics/t/0/00000000000000000000.log");
    assert_eq!(problem["position"], 0);
    assert_eq!(problem["expected_offset"], 0);
    assert!(problem["bytes"].as_u64().unwrap() > 0);
    // The walk went on after the damaged batch.
    let messages = p["messages"].as_u64().unwrap();
    assert!(messages > 0 && messages < 400, "{p}");
    assert_eq!(p["end_offset"], 400);
    assert_eq!(p["recovery"]["position"], 0);
    assert!(p["recovery"]["truncated_bytes"].as_u64().unwrap() > 0);
}

/// Every file and directory under `dir`, with a hash of each file's bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<u64>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.insert(p.clone(), None);
                stack.push(p);
            } else {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&p).unwrap().hash(&mut h);
                out.insert(p, Some(h.finish()));
            }
        }
    }
    out
}

/// Copies a directory tree: taken while a broker is open, the image a
/// `kill -9` leaves.
fn copy_tree(from: &Path, to: &Path) {
    for (p, file) in tree(from) {
        let dest = to.join(p.strip_prefix(from).unwrap());
        if file.is_none() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

/// A topic `t` of small segments holding 300 records, written by this
/// process; the broker is returned open.
fn filled(dir: &Path) -> mqlite::Broker {
    let b = mqlite::Broker::open(dir, mqlite::Config::default()).unwrap();
    b.create_topic("t", mqlite::TopicConfig::new(1).segment_bytes(4096))
        .unwrap();
    let p = b.producer(mqlite::ProducerConfig::default()).unwrap();
    for i in 0..300 {
        p.send(mqlite::Record::new("t").value(format!("value-{i:04}-padding")))
            .unwrap();
    }
    p.close().unwrap();
    b
}

#[test]
fn verify_changes_nothing_and_says_the_same_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    drop(filled(dir));
    // Without LOCK (and without groups/): verify must create neither.
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    let seg = dir.join("topics/t/0/00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[200] ^= 0x01;
    std::fs::write(&seg, bytes).unwrap();
    let before = tree(dir);
    let first = run(dir, &["verify"], None);
    let second = run(dir, &["verify"], None);
    assert_eq!(first.status.code(), Some(1));
    assert_eq!(second.status.code(), Some(1));
    assert_eq!(first.stdout, second.stdout, "the same report twice");
    assert_eq!(first.stderr, second.stderr);
    let json = run(dir, &["verify", "--json"], None);
    assert_eq!(json.status.code(), Some(1));
    assert_eq!(tree(dir), before, "verify changed the directory");
    assert!(!dir.join("LOCK").exists() && !dir.join("groups").exists());

    // A directory that does not exist is not created.
    let missing = dir.join("nope");
    let err = fails(&missing, &["verify"], 1);
    assert!(err.contains("no such data directory"), "{err}");
    assert!(!missing.exists());
}

#[test]
fn verify_works_while_the_owner_holds_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let b = filled(dir);
    // The lock is held by this process: commands that open the directory
    // fail, verify does not.
    assert!(fails(dir, &["topics"], 1).contains("locked"));
    let before = tree(dir);
    let text = ok(dir, &["verify"], None);
    assert_eq!(text, "t/0: 300 messages, ok\n");
    assert_eq!(tree(dir), before);
    // Nothing to repair: repair stops after its check, without the lock.
    let text = ok(dir, &["repair", "--yes"], None);
    assert!(text.starts_with("nothing to repair"), "{text}");
    // Damage to repair: it stops at the lock, having changed nothing.
    let seg = dir.join("topics/t/0/00000000000000000000.log");
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"XX", 100).unwrap();
    let out = run(dir, &["verify"], None);
    assert_eq!(out.status.code(), Some(1));
    let before = tree(dir);
    let err = fails(dir, &["repair", "--yes"], 1);
    assert!(err.contains("locked"), "{err}");
    assert_eq!(tree(dir), before);
    drop(b);
}

#[test]
fn a_torn_tail_after_a_crash_is_a_warning() {
    let live = tempfile::tempdir().unwrap();
    let b = filled(live.path());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    copy_tree(live.path(), dir);
    drop(b);
    // Half a batch after the last one of the active segment.
    let v: Value = serde_json::from_str(&ok(dir, &["verify", "--json"], None)).unwrap();
    assert_eq!(v[0]["shutdown"], "unclean");
    let active = std::fs::read_dir(dir.join("topics/t/0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .filter(|p| p.file_stem().unwrap().len() == 20) // not next.log
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&active).unwrap();
    // (The active segment may be empty: a roll just happened.) The end of
    // the data: walk the batches by their length fields.
    let mut end = 0;
    while let Some(l) = bytes.get(end + 8..end + 12) {
        let length = u32::from_le_bytes(l.try_into().unwrap()) as usize;
        if length == 0 {
            break;
        }
        end += 12 + length;
    }
    bytes[end..end + 40].copy_from_slice(&[0x5a; 40]);
    std::fs::write(&active, bytes).unwrap();
    let out = run(dir, &["verify"], None);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("t/0: 300 messages, ok, 1 warning(s)"),
        "{text}"
    );
    assert!(text.contains("torn tail"), "{text}");
    let v: Value = serde_json::from_str(&ok(dir, &["verify", "--json"], None)).unwrap();
    assert_eq!(v[0]["status"], "warning");
    assert_eq!(v[0]["problems"][0]["kind"], "torn_tail");
    assert_eq!(v[0]["recovery"]["torn_tails"], 1);
    // repair cuts it.
    let text = ok(dir, &["repair", "--yes"], None);
    assert!(text.contains("recovery will cut"), "{text}");
    assert!(text.contains("repaired"), "{text}");
    assert_eq!(ok(dir, &["verify"], None), "t/0: 300 messages, ok\n");
}

#[test]
fn repair_says_what_it_cuts_then_cuts_on_confirmation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    drop(filled(dir));
    ok(dir, &["consume", "t", "--group", "g", "--max", "280"], None);
    // Damage in the middle of a sealed segment, after a clean close.
    let seg = dir.join("topics/t/0/00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&seg, bytes).unwrap();
    let before = tree(dir);
    let report = run(dir, &["verify"], None);
    assert_eq!(report.status.code(), Some(1));

    // Not a terminal and no --yes: refused, nothing changed.
    let err = fails(dir, &["repair"], 2);
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(tree(dir), before);
    let out = run(dir, &["repair"], None);
    let preview = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(preview.contains("recovery will cut"), "{preview}");
    assert!(
        preview.contains("t/0: recovery cuts from byte")
            && preview.contains("of topics/t/0/00000000000000000000.log"),
        "{preview}"
    );
    // The same report as before: verify twice gives the same answer.
    let again = run(dir, &["verify"], None);
    assert_eq!(again.stdout, report.stdout);

    let text = ok(dir, &["repair", "--yes"], None);
    assert!(text.contains("recovery will cut"), "{text}");
    assert!(text.contains("t/0: recovery cut "), "{text}");
    assert!(text.contains("repaired: verify finds no damage"), "{text}");
    assert_ne!(tree(dir), before);
    let out = run(dir, &["verify", "--json"], None);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["status"], "ok");
    let left = v[0]["messages"].as_u64().unwrap();
    assert!(left < 300, "{v}");
    // The group's committed offset is now past the end: a warning.
    assert_eq!(v[1]["kind"], "group");
    assert_eq!(v[1]["status"], "warning");
    // Nothing left to cut.
    let text = ok(dir, &["repair"], None);
    assert!(text.starts_with("nothing to repair"), "{text}");
}

#[test]
fn verify_reads_topic_and_group_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    drop(filled(dir));
    ok(dir, &["topic", "create", "u", "--partitions", "2"], None);
    ok(dir, &["consume", "t", "--group", "g", "--max", "5"], None);
    ok(dir, &["consume", "t", "--group", "h", "--max", "5"], None);
    let text = ok(dir, &["verify"], None);
    assert!(
        text.contains("group g: 1 committed offset(s), ok"),
        "{text}"
    );
    std::fs::write(dir.join("topics/u/topic.json"), "{\"version\": 1, \"conf").unwrap();
    std::fs::write(dir.join("groups/h.offsets"), "[1, 2").unwrap();
    let out = run(dir, &["verify"], None);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    // The damaged topic file does not stop the check of its partitions.
    assert!(text.contains("t/0: 300 messages, ok"), "{text}");
    assert!(text.contains("u/0: 0 messages, ok"), "{text}");
    assert!(text.contains("u/1: 0 messages, ok"), "{text}");
    assert!(text.contains("topic u: CORRUPT"), "{text}");
    assert!(text.contains("topics/u/topic.json"), "{text}");
    assert!(
        text.contains("group h: 0 committed offset(s), CORRUPT"),
        "{text}"
    );
    assert!(
        text.contains("groups/h.offsets: not valid committed offsets"),
        "{text}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "mqlite: 1 damaged topic file(s), 1 damaged group offsets file(s)\n"
    );
    let out = run(dir, &["verify", "--json"], None);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "partition",
            "partition",
            "partition",
            "topic",
            "group",
            "group"
        ]
    );
    assert_eq!(v[3]["status"], "corrupt");
    assert_eq!(v[3]["file"], "topics/u/topic.json");
    assert_eq!(v[5]["group"], "h");
    assert!(v[5]["error"].as_str().unwrap().contains("not valid"));
    // Only one topic.
    assert_eq!(
        ok(dir, &["verify", "t"], None).lines().next(),
        Some("t/0: 300 messages, ok")
    );
    assert!(fails(dir, &["verify", "nope"], 1).contains("unknown topic"));
}

// ------------------------------------------------------------------ helpers
