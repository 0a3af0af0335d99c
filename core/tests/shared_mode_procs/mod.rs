//! What the shared-mode tests share: child processes (this test binary run
//! again in a role), waits that are always bounded, self-checking payloads,
//! append-only journals and a seeded random source.
//!
//! A child is started as `<test binary> --ignored --exact child
//! --nocapture` with the environment naming its role, the data directory,
//! a work directory (logs, journals, marker files) and one argument. Each
//! test file has one `#[ignore]`d `child` test that dispatches on the role;
//! in an ordinary run it is skipped, and run by hand without the
//! environment it does nothing.
#![allow(dead_code)] // each test file uses its own part

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mqlite::{Broker, Config, ConsumerConfig, OffsetReset, OpenMode};

const ROLE: &str = "MQLITE_SM_ROLE";
const DATA: &str = "MQLITE_SM_DATA";
const WORK: &str = "MQLITE_SM_WORK";
const ARG: &str = "MQLITE_SM_ARG";
const NAME: &str = "MQLITE_SM_NAME";

/// Whether the long versions run (`MQLITE_SOAK=1`, set by `make soak`).
pub fn soak() -> bool {
    std::env::var("MQLITE_SOAK").is_ok_and(|v| v == "1")
}

/// `short` in an ordinary run, `long` under `MQLITE_SOAK=1`.
pub fn pick<T>(short: T, long: T) -> T {
    if soak() {
        long
    } else {
        short
    }
}

/// A shared-mode config for tests (no prefaulting, no retention thread).
pub fn shared() -> Config {
    Config::default()
        .prefault(false)
        .retention_check_interval_ms(0)
        .shared(true)
}

/// A read-only config for tests.
pub fn readonly() -> Config {
    shared().readonly(true)
}

/// An exclusive-mode config for tests (by name: whatever the default).
pub fn exclusive() -> Config {
    Config::default()
        .mode(OpenMode::Exclusive)
        .prefault(false)
        .retention_check_interval_ms(0)
}

/// A test's directories: `data` (the data directory, nothing else in it)
/// and `work` (the children's output, journals and markers).
pub struct Dirs {
    _tmp: tempfile::TempDir,
    /// The data directory.
    pub data: PathBuf,
    /// Everything else.
    pub work: PathBuf,
}

impl Dirs {
    /// Two new empty directories.
    pub fn new() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let work = tmp.path().join("work");
        std::fs::create_dir(&data).unwrap();
        std::fs::create_dir(&work).unwrap();
        Dirs {
            _tmp: tmp,
            data,
            work,
        }
    }
}

/// What a child learns from its environment.
pub struct ChildEnv {
    /// Its role.
    pub role: String,
    /// Its unique name (for its files).
    pub name: String,
    /// The data directory.
    pub data: PathBuf,
    /// The work directory.
    pub work: PathBuf,
    /// The role's argument.
    pub arg: String,
}

impl ChildEnv {
    /// This process's child environment, if it was started as a child.
    pub fn get() -> Option<ChildEnv> {
        let role = std::env::var(ROLE).ok()?;
        Some(ChildEnv {
            role,
            name: std::env::var(NAME).unwrap(),
            data: std::env::var_os(DATA).unwrap().into(),
            work: std::env::var_os(WORK).unwrap().into(),
            arg: std::env::var(ARG).unwrap_or_default(),
        })
    }

    /// The argument split at commas, each parsed as a number.
    pub fn nums(&self) -> Vec<u64> {
        self.arg.split(',').map(|s| s.parse().unwrap()).collect()
    }

    /// Creates the marker `<name>.ready` in the work directory.
    pub fn ready(&self) {
        mark(&self.work, &format!("{}.ready", self.name));
    }

    /// Whether the parent asked every child to stop.
    pub fn stopping(&self) -> bool {
        self.work.join("STOP").exists()
    }

    /// A file of the work directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.work.join(name)
    }
}

/// Creates an empty marker file.
pub fn mark(work: &Path, name: &str) {
    File::create(work.join(name)).unwrap();
}

/// Asks every child of `work` to stop (each looks for `STOP`).
pub fn request_stop(work: &Path) {
    mark(work, "STOP");
}

/// A child process of a test.
pub struct Proc {
    /// Its unique name.
    pub name: String,
    child: Child,
    work: PathBuf,
    status: Option<ExitStatus>,
}

/// Starts this test binary again as role `role`, named `name` (unique in
/// the test: its output goes to `<work>/<name>.out` and `.err`).
pub fn spawn(role: &str, name: &str, dirs: &Dirs, arg: &str) -> Proc {
    let out = File::create(dirs.work.join(format!("{name}.out"))).unwrap();
    let err = File::create(dirs.work.join(format!("{name}.err"))).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(NAME, name)
        .env(DATA, &dirs.data)
        .env(WORK, &dirs.work)
        .env(ARG, arg)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap();
    Proc {
        name: name.to_owned(),
        child,
        work: dirs.work.clone(),
        status: None,
    }
}

impl Proc {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status if it has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status
    }

    /// `kill -9`, then waits for it (a child that had ended already is
    /// only waited for).
    pub fn kill9(&mut self) -> ExitStatus {
        if self.exited().is_none() {
            let _ = self.child.kill();
            self.status = Some(self.child.wait().unwrap());
        }
        self.status.unwrap()
    }

    /// Waits at most `timeout` for it to end; `None` if it did not (then
    /// it is killed, so that no test leaves a process behind).
    pub fn wait_for(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kill9();
        None
    }

    /// Waits for its `<name>.ready` marker (panics if it exits first or
    /// after `timeout`).
    pub fn wait_ready(&mut self, timeout: Duration) {
        let marker = self.work.join(format!("{}.ready", self.name));
        let end = Instant::now() + timeout;
        while !marker.exists() {
            if let Some(s) = self.exited() {
                panic!(
                    "{} exited ({s}) before it was ready:\n{}",
                    self.name,
                    self.output()
                );
            }
            assert!(
                Instant::now() < end,
                "{} not ready after {timeout:?}:\n{}",
                self.name,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// What it printed: standard output, then standard error (the end of
    /// each).
    pub fn output(&self) -> String {
        // The start (a panic's message) and the end of each, when long.
        let tail = |ext: &str| {
            let s = std::fs::read_to_string(self.work.join(format!("{}.{ext}", self.name)))
                .unwrap_or_default();
            if s.len() <= 6000 {
                return s;
            }
            let head = (3000..s.len())
                .find(|&i| s.is_char_boundary(i))
                .unwrap_or(0);
            let tail = (s.len() - 3000..s.len())
                .find(|&i| s.is_char_boundary(i))
                .unwrap_or(0);
            format!("{}\n[...]\n{}", &s[..head], &s[tail..])
        };
        format!(
            "--- {} stdout ---\n{}--- {} stderr ---\n{}",
            self.name,
            tail("out"),
            self.name,
            tail("err")
        )
    }

    /// Its standard output, whole.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.work.join(format!("{}.out", self.name))).unwrap_or_default()
    }

    /// The first line of its standard output holding `prefix`, from there
    /// on (the test harness may have printed the test's name before it).
    pub fn line(&self, prefix: &str) -> Option<String> {
        self.stdout()
            .lines()
            .find_map(|l| l.find(prefix).map(|at| l[at..].to_owned()))
    }

    /// Asserts that it ended by itself with status 0 within `timeout`.
    pub fn expect_success(&mut self, timeout: Duration) {
        match self.wait_for(timeout) {
            None => panic!(
                "{} still running after {timeout:?} (a hang):\n{}",
                self.name,
                self.output()
            ),
            Some(s) if s.success() => {}
            Some(s) => panic!("{} failed ({s}):\n{}", self.name, self.output()),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The signal that ended a process, if one did.
pub fn signal_of(status: ExitStatus) -> Option<i32> {
    status.signal()
}

/// Waits until `f` holds, at most `timeout` (panics naming `what`).
pub fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < end, "timed out after {timeout:?}: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An append-only text file written one line per `write` (O_APPEND), so
/// that lines of several processes interleave whole, in the order they
/// were written.
///
/// A `write` that crosses a page of the file can be cut there by a
/// `kill -9` (the kernel checks for a fatal signal between pages), leaving
/// the start of a line without its end. So each write starts on a new line
/// (a cut line never runs into the next writer's), and each line ends with
/// [`LINE_END`]: [`read_lines`] keeps only the lines that have it.
pub struct Journal(File);

/// The mark that ends every whole line of a [`Journal`].
const LINE_END: char = ';';

impl Journal {
    /// Opens (creating) `path` for appending.
    pub fn open(path: &Path) -> Journal {
        Journal(
            OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
                .unwrap(),
        )
    }

    /// Appends `line` in one write.
    pub fn line(&mut self, line: &str) {
        self.lines(line);
    }

    /// Appends the lines of `text` in one write.
    pub fn lines(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut s = String::with_capacity(text.len() + 16);
        s.push('\n');
        for line in text.lines() {
            s.push_str(line);
            s.push(LINE_END);
            s.push('\n');
        }
        self.0.write_all(s.as_bytes()).unwrap();
    }
}

/// The whole lines of a [`Journal`] (none if it does not exist): a line
/// that a killed writer left without its end is left out.
pub fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_suffix(LINE_END))
        .map(str::to_owned)
        .collect()
}

/// A self-checking payload: `tag|seq|padding|crc`, the CRC32C of what
/// precedes it (`pad` bytes of padding).
pub fn payload(tag: &str, seq: u64, pad: usize) -> Vec<u8> {
    let mut v = format!("{tag}|{seq}|{}|", "p".repeat(pad)).into_bytes();
    let crc = crc32c::crc32c(&v);
    v.extend_from_slice(format!("{crc:08x}").as_bytes());
    v
}

/// The tag and sequence number of a payload made by [`payload`], or why
/// it is not one.
pub fn check_payload(v: &[u8]) -> Result<(String, u64), String> {
    let bad = || {
        format!(
            "not a payload of this test: {:?}",
            String::from_utf8_lossy(v)
        )
    };
    if v.len() < 8 {
        return Err(bad());
    }
    let (body, crc) = v.split_at(v.len() - 8);
    let crc = std::str::from_utf8(crc).map_err(|_| bad())?;
    if u32::from_str_radix(crc, 16).ok() != Some(crc32c::crc32c(body)) {
        return Err(bad());
    }
    let text = std::str::from_utf8(body).map_err(|_| bad())?;
    let mut it = text.split('|');
    let tag = it.next().ok_or_else(bad)?;
    let seq = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    Ok((tag.to_owned(), seq))
}

/// Microseconds since the epoch (the same clock in every process).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// A small seeded random source (xorshift64*).
pub struct Rng(u64);

impl Rng {
    /// Seeded from `MQLITE_SM_SEED` if set, else from the clock and pid;
    /// the seed is printed so that a failure can be replayed.
    pub fn new(what: &str) -> Rng {
        let seed = std::env::var("MQLITE_SM_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| now_us() ^ (u64::from(std::process::id()) << 32));
        eprintln!("{what}: MQLITE_SM_SEED={seed}");
        Rng(seed | 1)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The end offset of `topic`/`partition` as `mq` sees it.
pub fn end_offset(mq: &Broker, topic: &str, partition: u32) -> u64 {
    mq.topic(topic).unwrap().partitions[partition as usize].end_offset
}

/// Every record of `topic`/`partition` from its start to its end now, as
/// `(offset, value)`, read through a fresh standalone consumer of `mq`.
pub fn read_all(mq: &Broker, topic: &str, partition: u32) -> Vec<(u64, Vec<u8>)> {
    let end = end_offset(mq, topic, partition);
    let mut c = mq
        .consumer(
            ConsumerConfig::default()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(10_000),
        )
        .unwrap();
    c.assign(&[(topic, partition)]).unwrap();
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    // The position, not the last record: a transaction's marker may end
    // the log.
    while c.position(topic, partition).unwrap() < end && Instant::now() < deadline {
        for m in c.poll(Duration::from_millis(100)).unwrap() {
            out.push((m.offset(), m.value().unwrap_or_default().to_vec()));
        }
    }
    out
}

/// Ends a child on an engine error: prints `ERROR <kind>: <error>` (what
/// the parent shows when the child fails) and exits with status 2.
pub fn fail(what: &str, e: &mqlite::Error) -> ! {
    println!("ERROR {}: {what}: {e}", e.kind().name());
    eprintln!("ERROR {}: {what}: {e}", e.kind().name());
    std::process::exit(2);
}

/// The value of `r`, or the child ends through [`fail`].
pub fn ok<T>(what: &str, r: mqlite::Result<T>) -> T {
    r.unwrap_or_else(|e| fail(what, &e))
}

/// Waits until the marker `name` exists in `work`, at most `timeout`;
/// whether it does.
pub fn wait_marker(work: &Path, name: &str, timeout: Duration) -> bool {
    let path = work.join(name);
    let end = Instant::now() + timeout;
    while !path.exists() {
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    true
}

/// `kill -9` to every one of `procs` first, then waits for each: they
/// die at (nearly) the same moment.
pub fn kill9_all(procs: &mut [Proc]) {
    for p in procs.iter_mut() {
        if p.exited().is_none() {
            let _ = p.child.kill();
        }
    }
    for p in procs.iter_mut() {
        p.kill9();
    }
}

impl Proc {
    /// Asserts that it is still running (panics with its output if not).
    pub fn expect_running(&mut self) {
        if let Some(s) = self.exited() {
            panic!("{} ended ({s}):\n{}", self.name, self.output());
        }
    }
}
