//! The power-loss model of the durability tests: which bytes of a file
//! survive when the power goes out, given how far it was synced.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
const SECTOR: usize = 512;

/// splitmix64's output function.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Per file, the byte up to which it is durable.
pub fn durable_marks(path: &Path) -> HashMap<PathBuf, u64> {
    let mut m: HashMap<PathBuf, u64> = HashMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return m;
    };
    for line in text.lines() {
        if let Some((p, end)) = line.split_once('\t') {
            if let Ok(end) = end.parse::<u64>() {
                let e = m.entry(PathBuf::from(p)).or_default();
                *e = (*e).max(end);
            }
        }
    }
    m
}

/// splitmix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        mix(self.0)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What power loss does to one file: pages past `durable` that differ from
/// `before` (what the file held when the child started) are kept, reverted,
/// torn (per 512-byte sector) or garbled where they changed. Returns how many pages were changed.
#[allow(clippy::needless_range_loop)] // byte positions matter here
pub fn lose_power(path: &Path, before: &[u8], durable: usize, rng: &mut Rng) -> usize {
    let Ok(mut now) = std::fs::read(path) else {
        return 0;
    };
    let mut changed = 0;
    let first_page = durable / PAGE * PAGE;
    let mut page = first_page;
    while page < now.len() {
        let end = (page + PAGE).min(now.len());
        // The old content of a byte past the durable end: what it held
        // before the child ran (zero where the file was shorter).
        let old = |i: usize| -> u8 { before.get(i).copied().unwrap_or(0) };
        let dirty = (page.max(durable)..end).any(|i| now[i] != old(i));
        if dirty {
            match rng.below(4) {
                0 => {} // the page reached the disk
                1 => {
                    for i in page.max(durable)..end {
                        now[i] = old(i);
                    }
                    changed += 1;
                }
                2 => {
                    let mut s = page;
                    while s < end {
                        let se = (s + SECTOR).min(end);
                        if rng.below(2) == 0 {
                            for i in s.max(durable)..se {
                                now[i] = old(i);
                            }
                        }
                        s = se;
                    }
                    changed += 1;
                }
                _ => {
                    // Garbage where the child wrote (a torn sector write);
                    // bytes it did not touch were already on disk.
                    for i in page.max(durable)..end {
                        if now[i] != old(i) {
                            now[i] = rng.next() as u8;
                        }
                    }
                    changed += 1;
                }
            }
        }
        page = end;
    }
    std::fs::write(path, &now).unwrap();
    changed
}

/// The power goes out for `files`: each is damaged by [`lose_power`] past
/// its durable end, the larger of what `marks` (see [`durable_marks`])
/// says and its last nonzero byte in `before` (what it held when the cycle
/// began, durable since: the checks of the last cycle closed it). A file
/// `before` lacks has nothing older to revert to. Returns the pages
/// changed.
pub fn power_out<'a>(
    files: impl IntoIterator<Item = &'a PathBuf>,
    before: &HashMap<PathBuf, Vec<u8>>,
    marks: &HashMap<PathBuf, u64>,
    rng: &mut Rng,
) -> usize {
    let mut pages = 0;
    for path in files {
        let old = before.get(path).map(Vec::as_slice).unwrap_or_default();
        let durable_before = old.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let durable = (marks.get(path).copied().unwrap_or(0) as usize).max(durable_before);
        pages += lose_power(path, old, durable, rng);
    }
    pages
}

/// In a child process of a power test: its data directory and cycle,
/// from the environment variables `dir_var` and `cycle_var`, with every
/// sync under the directory recorded in `marks_name` beside it (see
/// [`record_syncs`]). `None` in a normal test run (not a child).
pub fn child_setup(dir_var: &str, cycle_var: &str, marks_name: &str) -> Option<(PathBuf, u64)> {
    let dir = PathBuf::from(std::env::var(dir_var).ok()?);
    let cycle: u64 = std::env::var(cycle_var).unwrap().parse().unwrap();
    record_syncs(&dir, &dir.parent().unwrap().join(marks_name));
    Some((dir, cycle))
}

/// In a child process: tells [`run_and_kill`] that it is ready.
pub fn say_ready() {
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
}

/// Runs the test `child` of this test binary with `env`, waits (at most a
/// minute) for it to print a line ending in `READY`, lets it run for
/// `run_for`, kills it (SIGKILL) and returns every other line it printed.
pub fn run_and_kill(child: &str, env: &[(&str, String)], run_for: Duration) -> Vec<String> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", child, "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut proc = cmd.spawn().unwrap();
    let stdout = proc.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) if l.ends_with("READY") => break,
            Ok(l) => lines.push(l),
            Err(e) => panic!("{child} never got ready ({e})"),
        }
    }
    std::thread::sleep(run_for);
    let _ = proc.kill();
    proc.wait().unwrap();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    lines
}

/// The number in environment variable `var`, else `default`.
pub fn env_or(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default)
}

/// A seed for a run: the one in environment variable `var` (to replay a
/// run), else the clock's; printed with how to replay it.
pub fn seed(var: &str, what: &str) -> u64 {
    let seed = env_or(
        var,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    );
    println!("{what} seed: {seed} ({var}={seed} replays it)");
    seed
}

/// Installs a sync hook that appends `<path>\t<end>` to the file `marks`
/// after every completed sync of a file under `data_dir`: how far it is
/// durable (the end of an `msync`ed range; a file's length after an
/// `fsync` of it whole, such as the transaction log's, appended with
/// `write(2)`: its length when the sync began, since what another thread
/// appends meanwhile may miss it). A `<path>.tmp` counts for `<path>`:
/// files replaced atomically are synced under that name, then renamed.
pub fn record_syncs(data_dir: &Path, marks: &Path) {
    let marks = Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(marks)
            .unwrap(),
    );
    // Per thread, the length of the file whose sync it began.
    let started: Mutex<HashMap<(std::thread::ThreadId, PathBuf), u64>> = Mutex::new(HashMap::new());
    let data_dir = data_dir.to_owned();
    mqlite::faults::set_sync_hook(Some(Arc::new(move |path: &Path, kind, before| {
        if !path.starts_with(&data_dir) {
            return Ok(());
        }
        let key = (std::thread::current().id(), path.to_owned());
        if before {
            if kind == mqlite::faults::SyncKind::File {
                let len = std::fs::metadata(path).map_or(0, |m| m.len());
                started.lock().unwrap().insert(key, len);
            }
            return Ok(());
        }
        let end = match kind {
            mqlite::faults::SyncKind::Range { end } => end,
            mqlite::faults::SyncKind::File => started.lock().unwrap().remove(&key).unwrap_or(0),
            _ => return Ok(()),
        };
        let name = path.to_string_lossy();
        let name = name.strip_suffix(".tmp").unwrap_or(&name);
        let mut f = marks.lock().unwrap();
        writeln!(f, "{name}\t{end}")
    })));
}
