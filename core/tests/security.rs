//! Names that try to leave the data directory, file permissions, and data
//! directories written by someone else (FIFOs, devices, huge files,
//! symlinks): errors, never a hang, a huge allocation or a write outside.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use mqlite::{
    Broker, Config, ConsumerConfig, Error, OpenMode, ProducerConfig, Record, TopicConfig,
};

const HOSTILE_NAMES: &[&str] = &[
    "",
    ".",
    "..",
    "../escape",
    "a/../../escape",
    "/tmp/absolute",
    "a/b",
    "a\\b",
    "nul\0byte",
    "t\u{043e}pic",     // Cyrillic o
    "\u{ff54}opic",     // fullwidth t
    "topic\u{200b}",    // zero-width space
    "\u{2024}\u{2024}", // one-dot leaders that look like ".."
    "ｔｏｐｉｃ",
    "__internal",
];

fn open(dir: &Path) -> Broker {
    Broker::open(dir, Config::default().retention_check_interval_ms(0)).unwrap()
}

/// Every path under `root`, itself excluded.
fn tree(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn names_cannot_leave_the_data_directory() {
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("data");
    // Exclusive mode, by name: the files it expects at the end are that
    // mode's (shared mode keeps process files and tail pages instead of the
    // partitions' summary).
    let config = Config::default().retention_check_interval_ms(0);
    let mq = Broker::open(&dir, config.mode(OpenMode::Exclusive)).unwrap();
    mq.create_topic("ok", TopicConfig::new(1)).unwrap();
    drop(
        mq.producer(ProducerConfig::default().name("warm-up"))
            .unwrap(),
    ); // the registry exists
    let before_outer = tree(outer.path());
    for name in HOSTILE_NAMES {
        assert!(
            matches!(
                mq.create_topic(name, TopicConfig::new(1)),
                Err(Error::InvalidTopicName { .. })
            ),
            "topic {name:?}"
        );
        assert!(mq.topic(name).is_err(), "topic lookup {name:?}");
        for config in [
            ConsumerConfig::group(*name),
            ConsumerConfig::group("g").client_id(*name).broadcast(true),
        ] {
            match mq.consumer(config) {
                Err(Error::InvalidArgument(_)) => {}
                Err(e) => panic!("consumer name {name:?}: unexpected error {e}"),
                Ok(_) => panic!("consumer name {name:?} was accepted"),
            }
        }
        assert!(mq.describe_group(name).is_err(), "describe_group {name:?}");
        // Producer names live inside the registry file, never in a path;
        // '__' is only reserved for topics.
        match mq.producer(ProducerConfig::default().name(*name)) {
            Ok(_) if name.starts_with("__") => {}
            Err(Error::InvalidArgument(_)) => {}
            Err(e) => panic!("producer name {name:?}: unexpected error {e}"),
            Ok(_) => panic!("producer name {name:?} was accepted"),
        }
        let p = mq.producer(ProducerConfig::default()).unwrap();
        assert!(
            p.send(Record::new(*name).value("x")).is_err(),
            "send to {name:?}"
        );
    }
    mq.close().unwrap();
    // The clean close adds the partitions' summary, nothing else.
    let mut expected = before_outer;
    expected.push(dir.join("partitions.summary"));
    expected.sort();
    assert_eq!(tree(outer.path()), expected, "files appeared or vanished");
}

/// Every file and directory under `dir` has exactly `file_mode` /
/// `dir_mode` permission bits.
fn assert_modes(dir: &Path, file_mode: u32, dir_mode: u32) {
    let root_mode = std::fs::metadata(dir).unwrap().mode() & 0o777;
    assert_eq!(root_mode, dir_mode, "{}", dir.display());
    let paths = tree(dir);
    assert!(
        paths.len() > 10,
        "too few files to prove anything: {paths:?}"
    );
    for p in paths {
        let m = std::fs::metadata(&p).unwrap();
        let want = if m.is_dir() { dir_mode } else { file_mode };
        assert_eq!(
            m.mode() & 0o777,
            want,
            "{:o} on {}",
            m.mode() & 0o777,
            p.display()
        );
    }
}

/// Produces, consumes, commits, names a producer and rolls a segment, so
/// every kind of file exists.
fn exercise(dir: &Path, config: Config) {
    let mq = Broker::open(dir, config).unwrap();
    mq.create_topic("t", TopicConfig::new(2).segment_bytes(4096))
        .unwrap();
    let p = mq
        .producer(ProducerConfig::default().name("ingest"))
        .unwrap();
    for i in 0..200 {
        p.send(Record::new("t").key(format!("k{i}")).value(vec![b'v'; 64]))
            .unwrap();
    }
    drop(p);
    let mut c = mq.consumer(ConsumerConfig::group("g")).unwrap();
    c.subscribe(&["t"]).unwrap();
    let mut n = 0;
    while n < 200 {
        n += c.poll(Duration::from_millis(200)).unwrap().len();
    }
    c.commit().unwrap();
    c.close();
    mq.add_partitions("t", 3).unwrap();
    mq.close().unwrap();
}

#[test]
fn files_are_owner_only_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    exercise(&dir, Config::default().retention_check_interval_ms(0));
    assert_modes(&dir, 0o600, 0o700);
}

#[test]
fn file_mode_is_configurable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    // The umask may clear group bits; make sure it does not.
    // SAFETY-free: umask is process-wide, so this test only widens what the
    // others create (they assert 0o600, which a wider umask cannot break).
    exercise(
        &dir,
        Config::default()
            .file_mode(0o640)
            .retention_check_interval_ms(0),
    );
    // With the usual umask 022 nothing is cleared from 0o640 / 0o750.
    assert_modes(&dir, 0o640, 0o750);
}

/// Runs `f` on another thread and fails if it takes more than 10 s (a
/// FIFO or a device read would block or run forever).
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what}: hung"))
}

/// A data directory with topic `t` (one partition, data in it) and group
/// `g` with a committed offset, closed.
fn prepared() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(4096))
        .unwrap();
    let p = mq
        .producer(ProducerConfig::default().name("named"))
        .unwrap();
    for _ in 0..100 {
        p.send(Record::new("t").value(vec![1u8; 50])).unwrap();
    }
    drop(p);
    let mut c = mq.consumer(ConsumerConfig::group("g")).unwrap();
    c.assign(&[("t", 0)]).unwrap();
    c.commit_offsets(&[("t", 0, 10, "")]).unwrap();
    c.close();
    mq.close().unwrap();
    tmp
}

fn replace_with_fifo(path: &Path) {
    std::fs::remove_file(path).unwrap();
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

fn replace_with_symlink(path: &Path, target: &Path) {
    std::fs::remove_file(path).unwrap();
    symlink(target, path).unwrap();
}

/// The files of the prepared directory that a hostile writer replaces.
fn victims(root: &Path) -> Vec<PathBuf> {
    let part = root.join("topics/t/0");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&part)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "log" || x == "idx" || x == "tix")
        })
        .collect();
    logs.sort();
    let mut v = vec![
        root.join("topics/t/topic.json"),
        root.join("producers/registry.json"),
        root.join("groups/g.offsets"),
        part.join("producers.snapshot"),
    ];
    let n = logs.len(); // .idx, .log, .tix per segment, oldest first
    v.extend([&logs[0], &logs[1], &logs[2]].map(std::clone::Clone::clone)); // a sealed segment
    v.extend([&logs[n - 3], &logs[n - 2], &logs[n - 1]].map(std::clone::Clone::clone)); // the active one
    v
}

/// Opens the directory in `mode` (read-only with `None`) and uses it:
/// errors are fine, a hang, a panic or a huge allocation is not.
fn open_and_use(root: PathBuf, mode: Option<OpenMode>) -> Result<(), String> {
    let config = Config::default().retention_check_interval_ms(0);
    let config = match mode {
        Some(m) => config.mode(m),
        None => config.readonly(true),
    };
    let mq = Broker::open(&root, config).map_err(|e| e.to_string())?;
    let mut c = mq
        .consumer(ConsumerConfig::group("g"))
        .map_err(|e| e.to_string())?;
    c.subscribe(&["t"]).map_err(|e| e.to_string())?;
    for _ in 0..5 {
        c.poll(Duration::from_millis(20))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[test]
fn fifos_devices_and_huge_files_are_errors_not_hangs() {
    for kind in ["fifo", "dev-zero", "dev-urandom", "huge-sparse"] {
        let template = prepared();
        for i in 0..victims(template.path()).len() {
            // Each mode opens the files its own way (shared mode and a
            // read-only handle find a sealed segment's end from its seal
            // entry, without a walk), each on a fresh copy.
            for mode in [Some(OpenMode::Exclusive), Some(OpenMode::Shared), None] {
                let tmp = tempfile::tempdir().unwrap();
                copy_tree(template.path(), tmp.path());
                let victim = victims(tmp.path())[i].clone();
                if !victim.exists() {
                    continue;
                }
                match kind {
                    "fifo" => replace_with_fifo(&victim),
                    "dev-zero" => replace_with_symlink(&victim, Path::new("/dev/zero")),
                    "dev-urandom" => replace_with_symlink(&victim, Path::new("/dev/urandom")),
                    _ => {
                        let f = std::fs::OpenOptions::new()
                            .write(true)
                            .open(&victim)
                            .unwrap();
                        f.set_len(1 << 40).unwrap(); // 1 TiB, sparse
                    }
                }
                let root = tmp.path().to_path_buf();
                let what = format!("{kind} as {} ({mode:?})", victim.display());
                let outcome = within_10s(&what, move || open_and_use(root, mode));
                println!("{what}: {outcome:?}");
            }
        }
    }
}

#[test]
fn a_planted_temporary_symlink_is_not_written_through() {
    let tmp = prepared();
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(outside.path(), b"precious").unwrap();
    for planted in [
        tmp.path().join("topics/t/topic.json.tmp"),
        tmp.path().join("groups/g.offsets.tmp"),
        tmp.path().join("producers/registry.json.tmp"),
    ] {
        symlink(outside.path(), &planted).unwrap();
    }
    let mq = open(tmp.path());
    mq.add_partitions("t", 2).unwrap(); // rewrites topic.json
    let p = mq
        .producer(ProducerConfig::default().name("other"))
        .unwrap(); // registry
    drop(p);
    let mut c = mq.consumer(ConsumerConfig::group("g")).unwrap();
    c.assign(&[("t", 0)]).unwrap();
    c.commit_offsets(&[("t", 0, 20, "")]).unwrap(); // offsets
    c.close();
    mq.close().unwrap();
    assert_eq!(std::fs::read(outside.path()).unwrap(), b"precious");
    let mq = open(tmp.path());
    assert_eq!(mq.topic("t").unwrap().partitions.len(), 2);
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        let dst = to.join(e.file_name());
        if p.is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
            copy_tree(&p, &dst);
        } else {
            std::fs::copy(&p, &dst).unwrap();
        }
    }
}
