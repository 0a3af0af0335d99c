//! Whether a process is alive, from a lock the kernel releases when the
//! process ends.
//!
//! A process (or a consumer-group member, or a writer) proves it is alive
//! by holding an exclusive `flock` on a file of its own for as long as it
//! lives. Another process learns whether it still does by trying to take
//! the same lock without blocking: the kernel drops a dead process's locks
//! with its descriptors, so the try succeeds exactly when the holder is
//! gone. Neither pids (reused, and different inside containers) nor
//! timeouts (a slow process is not a dead one) decide it.
//!
//! `flock` locks belong to an open file description: a second open of the
//! same file in the holding process conflicts with the first, so a probe
//! made from the holder's own process also sees it alive.
//!
//! Locks on network filesystems are not reliable; shared mode refuses
//! them (see `fs_kind`).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// What a probe of a liveness lock found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Someone holds the lock.
    Alive,
    /// The file exists and nobody holds its lock: its holder ended.
    Dead,
    /// There is no such file.
    Missing,
}

/// A held lock on a file: exclusive ([`LiveLock::try_hold`]) or shared
/// ([`LiveLock::hold_shared`]). Dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct LiveLock {
    /// Holds the lock (closing it releases it).
    _file: File,
    path: PathBuf,
}

fn open_lock_file(path: &Path, mode: u32) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .open(path)
        .ctx(|| format!("opening {}", path.display()))
}

impl LiveLock {
    /// Takes the exclusive lock of `path` (creating the file with
    /// permission bits `mode`) without waiting; `None` when another holder
    /// has it, exclusive or shared.
    pub(crate) fn try_hold(path: &Path, mode: u32) -> Result<Option<LiveLock>> {
        let file = open_lock_file(path, mode)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(LiveLock {
                _file: file,
                path: path.to_owned(),
            })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(Error::io(format!("locking {}", path.display()), e)),
        }
    }

    /// Takes the exclusive lock of `path`, waiting for other holders to
    /// let go (for short critical sections that every holder keeps short).
    pub(crate) fn hold(path: &Path, mode: u32) -> Result<LiveLock> {
        let file = open_lock_file(path, mode)?;
        file.lock().ctx(|| format!("locking {}", path.display()))?;
        Ok(LiveLock {
            _file: file,
            path: path.to_owned(),
        })
    }

    /// Takes a shared lock on `path`, waiting while an exclusive holder
    /// has it. Any number of processes hold it shared at once.
    #[cfg(test)]
    pub(crate) fn hold_shared(path: &Path, mode: u32) -> Result<LiveLock> {
        let file = open_lock_file(path, mode)?;
        file.lock_shared()
            .ctx(|| format!("locking {} (shared)", path.display()))?;
        Ok(LiveLock {
            _file: file,
            path: path.to_owned(),
        })
    }

    /// Takes a shared lock on `path` without waiting; `None` while an
    /// exclusive holder has it.
    pub(crate) fn try_hold_shared(path: &Path, mode: u32) -> Result<Option<LiveLock>> {
        let file = open_lock_file(path, mode)?;
        match file.try_lock_shared() {
            Ok(()) => Ok(Some(LiveLock {
                _file: file,
                path: path.to_owned(),
            })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(Error::io(format!("locking {}", path.display()), e)),
        }
    }

    /// Whether anyone holds a lock on `path` (exclusive or shared), found
    /// by trying to take it exclusively without waiting; a lock taken by
    /// the try is released at once.
    pub(crate) fn probe(path: &Path) -> Result<Liveness> {
        let file = match OpenOptions::new().read(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Liveness::Missing),
            Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
        };
        match file.try_lock() {
            Ok(()) => Ok(Liveness::Dead),
            Err(TryLockError::WouldBlock) => Ok(Liveness::Alive),
            Err(TryLockError::Error(e)) => Err(Error::io(format!("probing {}", path.display()), e)),
        }
    }

    /// The locked file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    const CHILD_ENV: &str = "MQLITE_TEST_LIVE_LOCK_CHILD";

    #[test]
    fn a_held_lock_is_alive_and_a_released_one_dead() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.live");
        assert_eq!(LiveLock::probe(&path).unwrap(), Liveness::Missing);
        let held = LiveLock::try_hold(&path, 0o600).unwrap().unwrap();
        assert_eq!(held.path(), path);
        assert_eq!(LiveLock::probe(&path).unwrap(), Liveness::Alive);
        assert!(LiveLock::try_hold(&path, 0o600).unwrap().is_none());
        drop(held);
        assert_eq!(LiveLock::probe(&path).unwrap(), Liveness::Dead);
        assert!(LiveLock::try_hold(&path, 0o600).unwrap().is_some());
    }

    #[test]
    fn shared_holders_coexist_and_keep_out_an_exclusive_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LIVE");
        let a = LiveLock::hold_shared(&path, 0o600).unwrap();
        let b = LiveLock::hold_shared(&path, 0o600).unwrap();
        assert!(LiveLock::try_hold(&path, 0o600).unwrap().is_none());
        assert_eq!(LiveLock::probe(&path).unwrap(), Liveness::Alive);
        drop(a);
        assert!(LiveLock::try_hold(&path, 0o600).unwrap().is_none());
        drop(b);
        assert!(LiveLock::try_hold(&path, 0o600).unwrap().is_some());
    }

    /// Not a test on its own: the child process of
    /// `a_killed_holder_is_dead`, which holds the lock named in its
    /// environment until it is killed.
    #[test]
    #[ignore = "run as a child process by a_killed_holder_is_dead"]
    fn live_lock_child_holds_until_killed() {
        let Some(path) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let _held = LiveLock::try_hold(Path::new(&path), 0o600)
            .unwrap()
            .unwrap();
        println!("holding");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    #[test]
    fn a_killed_holder_is_dead() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("child.live");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "shared::liveness::tests::live_lock_child_holds_until_killed",
                "--nocapture",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while LiveLock::probe(&path).unwrap() != Liveness::Alive {
            assert!(t.elapsed() < Duration::from_secs(30), "child never held");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(LiveLock::try_hold(&path, 0o600).unwrap().is_none());
        child.kill().unwrap(); // SIGKILL: no destructor runs in the child
        child.wait().unwrap();
        assert_eq!(LiveLock::probe(&path).unwrap(), Liveness::Dead);
        assert!(LiveLock::try_hold(&path, 0o600).unwrap().is_some());
    }
}
