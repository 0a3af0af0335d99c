//! Which processes have a shared data directory open: each registers a
//! random token, and proves it is alive by an exclusive `flock` on
//! `<dir>/procs/<token as 16 hex digits>.live` for as long as it has the
//! directory open.
//!
//! A token names a process in words of shared pages (the owner of a
//! partition's append lock): any process can then learn whether that
//! process still lives by probing its file (see [`super::liveness`]). The
//! kernel releases the lock when the process ends, however it ends, so a
//! dead process is recognised without pids (reused) or timeouts (a slow
//! process is not a dead one).
//!
//! Tokens are never reused: a registering process creates its file with
//! `O_EXCL` and draws another token if the name is taken. A process that
//! registers removes the files of dead processes it finds, holding each
//! one's lock while it removes it; the registering process, for its part,
//! checks after taking its lock that its path still names the file it
//! locked, so a sweep that raced with its registration makes it start over
//! rather than hold a lock on a removed file.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{LiveLock, Liveness};
use crate::error::{Error, IoContext, Result};

/// The directory of the `.live` files, in the data directory.
pub(crate) const PROCS_DIR: &str = "procs";

/// The suffix of a process's file in [`PROCS_DIR`].
const LIVE_SUFFIX: &str = ".live";

/// How many tokens a registration draws before it gives up (each retry
/// means a name collision or a sweep racing with it: both rare).
const REGISTER_TRIES: usize = 16;

/// This process's registration in a shared data directory: its token and
/// the held lock on its `.live` file. Dropping it removes the file (best
/// effort) and releases the lock.
#[derive(Debug)]
pub(crate) struct ProcessSlot {
    token: u64,
    /// Holds the exclusive lock (closing it releases it).
    file: File,
    path: PathBuf,
}

impl ProcessSlot {
    /// Registers this process in the data directory `dir`: creates
    /// `<dir>/procs/` (directory mode from `mode`, as the data directory's
    /// other directories) and `<dir>/procs/<token:016x>.live` (permission
    /// bits `mode`) with a fresh random nonzero token, and holds its
    /// exclusive lock until dropped. Removes, best effort, the `.live`
    /// files of dead processes it finds there first.
    pub(crate) fn register(dir: &Path, mode: u32) -> Result<ProcessSlot> {
        let procs = dir.join(PROCS_DIR);
        crate::private_dir::create_dir_all(&procs, mode)?;
        sweep_dead(&procs);
        for _ in 0..REGISTER_TRIES {
            let token = random_token()?;
            let path = live_path_in(&procs, token);
            let file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&path)
            {
                Ok(f) => f,
                // Another process has (or had) this token: draw again.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io(format!("creating {}", path.display()), e)),
            };
            match file.try_lock() {
                Ok(()) => {}
                // A sweep holds it, and will remove it.
                Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Error(e)) => {
                    let _ = std::fs::remove_file(&path);
                    return Err(Error::io(format!("locking {}", path.display()), e));
                }
            }
            // A sweep may have removed the file between its creation and
            // our lock: the lock is worth something only on the file the
            // path names.
            if is_same_file(&file, &path) {
                return Ok(ProcessSlot { token, file, path });
            }
        }
        Err(Error::io(
            format!("registering in {}", procs.display()),
            std::io::Error::other(format!(
                "no free token after {REGISTER_TRIES} tries (files keep colliding or vanishing)"
            )),
        ))
    }

    /// This process's token (never 0, top bit clear).
    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    /// The held `.live` file.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ProcessSlot {
    fn drop(&mut self) {
        // Removed while still locked, so that no prober takes a removed
        // file for a dead process's file it may remove (it would find it
        // missing: dead either way). The lock goes with the descriptor.
        if is_same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether the process that registered `token` in the data directory `dir`
/// still has it open: `false` when its `.live` file is missing or its lock
/// can be taken (the lock is then released again at once), and for the
/// token 0. A probe from the holder's own process sees it alive (the lock
/// belongs to the holder's open file description, not to the process). An
/// error other than a missing file (which says nothing of the holder)
/// counts as alive: taking a live holder's lock would corrupt the log,
/// while waiting costs only time.
pub(crate) fn process_alive(dir: &Path, token: u64) -> bool {
    if token == 0 {
        return false;
    }
    let path = live_path_in(&dir.join(PROCS_DIR), token);
    match LiveLock::probe(&path) {
        Ok(Liveness::Alive) => true,
        Ok(Liveness::Dead | Liveness::Missing) => false,
        Err(e) => {
            log::warn!(
                "cannot tell whether process {token:016x} is alive, taking it as alive: {e}"
            );
            true
        }
    }
}

/// The `.live` file of `token` in the procs directory `procs`.
fn live_path_in(procs: &Path, token: u64) -> PathBuf {
    procs.join(format!("{token:016x}{LIVE_SUFFIX}"))
}

/// Whether `path` names the file open as `file` (same device and inode).
fn is_same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Removes the `.live` files in `procs` whose lock can be taken (their
/// process ended without removing its file), holding each lock while it
/// removes the file. Best effort: errors leave files behind, which later
/// sweeps try again.
fn sweep_dead(procs: &Path) {
    for (path, file) in dead_process_files(procs) {
        if is_same_file(&file, &path) {
            let _ = std::fs::remove_file(&path);
        }
        // Dropping `file` releases the lock, after the removal.
    }
}

/// Whether `dir/procs/` holds the file of a process that ended without
/// closing the directory (killed, or crashed). A clean close removes its
/// process's file, so one left there means the last session of the
/// directory did not end cleanly.
pub(crate) fn left_by_a_dead_process(dir: &Path) -> bool {
    dead_process_files(&dir.join(PROCS_DIR)).next().is_some()
}

/// The process files in `procs` whose lock could be taken (their process
/// ended), each with its path and its descriptor, which holds the lock
/// until dropped. Files of live processes, names not of this kind and
/// files that cannot be opened are skipped.
fn dead_process_files(procs: &Path) -> impl Iterator<Item = (PathBuf, File)> {
    std::fs::read_dir(procs)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| is_process_file(&entry.file_name()))
        .filter_map(|entry| {
            let path = entry.path();
            // Not blocking: a FIFO planted here is skipped, not waited on.
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
                .ok()?;
            file.try_lock().is_ok().then_some((path, file))
        })
}

/// Whether `name` is a process's file: 16 hex digits and `.live`.
fn is_process_file(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .and_then(|n| n.strip_suffix(LIVE_SUFFIX))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A random nonzero token of 63 bits from the operating system (the top
/// bit is clear: share groups mark other processes' holders with it).
fn random_token() -> Result<u64> {
    const SOURCE: &str = "/dev/urandom";
    let mut f = File::open(SOURCE).ctx(|| format!("opening {SOURCE}"))?;
    loop {
        let mut buf = [0u8; 8];
        f.read_exact(&mut buf).ctx(|| format!("reading {SOURCE}"))?;
        let token = u64::from_le_bytes(buf) >> 1;
        if token != 0 {
            return Ok(token);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::Duration;

    /// A child process killed when the test ends, passed or failed.
    struct KillOnDrop(std::process::Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    const CHILD_ENV: &str = "MQLITE_TEST_PROCS_CHILD";

    #[test]
    fn a_registered_process_is_alive_until_it_drops_its_slot() {
        let dir = tempfile::tempdir().unwrap();
        let slot = ProcessSlot::register(dir.path(), 0o600).unwrap();
        let token = slot.token();
        assert_ne!(token, 0);
        assert_eq!(
            slot.path(),
            dir.path().join("procs").join(format!("{token:016x}.live"))
        );
        // Probed from the holder's own process: still alive.
        assert!(process_alive(dir.path(), token));
        assert!(process_alive(dir.path(), token), "a probe keeps no lock");
        drop(slot);
        assert!(!process_alive(dir.path(), token));
        assert!(!dir
            .path()
            .join("procs")
            .join(format!("{token:016x}.live"))
            .exists());
    }

    #[test]
    fn two_registrations_have_different_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let a = ProcessSlot::register(dir.path(), 0o600).unwrap();
        let b = ProcessSlot::register(dir.path(), 0o600).unwrap();
        assert_ne!(a.token(), b.token());
        assert!(process_alive(dir.path(), a.token()));
        assert!(process_alive(dir.path(), b.token()));
        drop(a);
        assert!(process_alive(dir.path(), b.token()));
    }

    #[test]
    fn the_zero_token_and_unknown_tokens_are_dead() {
        let dir = tempfile::tempdir().unwrap();
        let slot = ProcessSlot::register(dir.path(), 0o600).unwrap();
        assert!(!process_alive(dir.path(), 0));
        assert!(!process_alive(
            dir.path(),
            slot.token() ^ 0x5A5A_0000_0000_0001
        ));
        assert!(!process_alive(dir.path(), u64::MAX));
        // No procs directory at all.
        let empty = tempfile::tempdir().unwrap();
        assert!(!process_alive(empty.path(), 0xDEAD_BEEF));
    }

    #[test]
    fn registering_removes_only_dead_processes_files() {
        let dir = tempfile::tempdir().unwrap();
        let live = ProcessSlot::register(dir.path(), 0o600).unwrap();
        let procs = dir.path().join("procs");
        // A dead process's file (nobody holds it) and a foreign file.
        let dead = procs.join("00000000000000aa.live");
        std::fs::write(&dead, b"").unwrap();
        let other = procs.join("notes.txt");
        std::fs::write(&other, b"").unwrap();
        let _new = ProcessSlot::register(dir.path(), 0o600).unwrap();
        assert!(!dead.exists());
        assert!(other.exists());
        assert!(live.path().exists());
        assert!(process_alive(dir.path(), live.token()));
    }

    #[cfg(unix)]
    #[test]
    fn files_take_the_given_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let slot = ProcessSlot::register(dir.path(), 0o640).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("procs")), 0o750);
        // The umask may remove bits, never add them.
        assert_eq!(mode(slot.path()) & !0o640, 0);
    }

    /// Not a test on its own: the child process of
    /// `a_killed_process_is_dead`, which registers in the directory named
    /// in its environment, prints its token and waits to be killed.
    #[test]
    #[ignore = "run as a child process by a_killed_process_is_dead"]
    fn procs_child_registers_until_killed() {
        let Some(dir) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let slot = ProcessSlot::register(Path::new(&dir), 0o600).unwrap();
        println!("token {:016x}", slot.token());
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    #[test]
    fn a_killed_process_is_dead() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = KillOnDrop(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--ignored",
                    "--exact",
                    "shared::procs::tests::procs_child_registers_until_killed",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, dir.path())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut token = None;
        for line in BufReader::new(child.0.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            // The harness prints the test's name on the same line first.
            if let Some((_, hex)) = line.split_once("token ") {
                token = Some(u64::from_str_radix(hex.trim(), 16).unwrap());
                break;
            }
        }
        let token = token.expect("the child printed no token");
        assert!(process_alive(dir.path(), token));
        child.0.kill().unwrap(); // SIGKILL: the child's Drop never runs
        child.0.wait().unwrap();
        let file = dir.path().join("procs").join(format!("{token:016x}.live"));
        assert!(file.exists(), "left behind by the killed child");
        assert!(!process_alive(dir.path(), token));
        // The next registration sweeps it away.
        let _slot = ProcessSlot::register(dir.path(), 0o600).unwrap();
        assert!(!file.exists());
        assert!(!process_alive(dir.path(), token));
    }
}
