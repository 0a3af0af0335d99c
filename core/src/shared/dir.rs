//! A data directory opened by several processes at once: who is there,
//! and the directory's doorbell.
//!
//! Files in the data directory:
//! - `LIVE`: every process that has the directory open in shared mode
//!   holds a shared `flock` on it for as long as it does (the dead-man
//!   switch of SQLite's shared memory). A process that can take it
//!   exclusively is alone. A process that opens the directory in exclusive
//!   mode holds it exclusively, so shared and exclusive opens exclude each
//!   other.
//! - `INIT`: held exclusively around a shared open's first steps (learning
//!   whether it is alone and, if it is, recovery and the reset of the
//!   shared pages), so that two openers never both think they are alone.
//! - `LOCK`: held exclusively by a process that has the directory open in
//!   exclusive mode, with its pid written in it for error messages.
//! - `mqlite.shm`: a [`SharedPage`] with the doorbell (a futex word bumped
//!   after appends and group changes, when someone waits), the count of
//!   waiters, and the topics version (bumped when topics are created,
//!   deleted or grow), and the boot of the machine in which a process that
//!   may write last opened the directory. A cache: reset by a process that
//!   opens alone.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use super::{FsKind, LiveLock, SharedPage, WaitOutcome, Word32, Word64};
use crate::error::{Error, Result};
use crate::sync::lock;

/// The presence lock every process of a shared directory holds.
pub(crate) const LIVE_FILE: &str = "LIVE";
/// The lock around a shared open's first steps.
pub(crate) const INIT_FILE: &str = "INIT";
/// The directory's shared page.
pub(crate) const SHM_FILE: &str = "mqlite.shm";

const MAGIC: [u8; 8] = *b"MQSHM001";
const DOORBELL: Word32 = Word32::at(8);
const WAITERS: Word32 = Word32::at(12);
const TOPICS_VERSION: Word64 = Word64::at(16);
/// The boot id (see `boot.rs`) when a process that may write last opened
/// the directory, low and high halves; 0 when none did.
const BOOT_LO: Word64 = Word64::at(24);
const BOOT_HI: Word64 = Word64::at(32);

/// What a shared open learns under `INIT`, before it joins the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opening {
    /// No other process has the directory open.
    pub alone: bool,
    /// The machine restarted since a process that may write last opened
    /// the directory in shared mode (or that cannot be known, or it was
    /// never opened so): the shared pages may be stale, and the files may
    /// have lost pages that were never synced. Only said of a process
    /// that is alone; one that is not and may write is refused instead
    /// (see [`DirShare::open`]).
    pub restarted: bool,
}

/// One process's share of a data directory opened in shared mode.
#[derive(Debug)]
pub(crate) struct DirShare {
    page: SharedPage,
    /// `LIVE`, held shared until [`DirShare::leave`].
    live: Mutex<Option<LiveLock>>,
}

/// How a process holds a data directory against shared openers.
#[derive(Debug)]
pub(crate) struct ExclusiveHold {
    _live: LiveLock,
}

/// Takes `LIVE` exclusively for a process that opens `dir` in exclusive
/// mode: processes that have it open in shared mode keep it out.
///
/// # Errors
/// [`Error::Locked`] while processes have the directory open shared.
pub(crate) fn hold_exclusive(dir: &Path, mode: u32) -> Result<ExclusiveHold> {
    let start = std::time::Instant::now();
    loop {
        if let Some(live) = LiveLock::try_hold(&dir.join(LIVE_FILE), mode)? {
            return Ok(ExclusiveHold { _live: live });
        }
        // A child being spawned may hold this process's last lock for a
        // moment (see `broker::take_lock`).
        if start.elapsed() >= crate::broker::SPAWN_GRACE {
            return Err(Error::Locked {
                path: dir.to_owned(),
                holder: "processes that opened it in shared mode".to_owned(),
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The pid that `dir`'s `LOCK` names: the last process that opened it in
/// exclusive mode.
fn exclusive_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join(crate::broker::LOCK_FILE))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
}

/// Who holds `dir` in exclusive mode, for an error message: the pid its
/// `LOCK` names.
fn exclusive_holder(dir: &Path) -> String {
    match exclusive_pid(dir) {
        Some(pid) => format!("process {pid}, which opened it in exclusive mode"),
        None => "a process that opened it in exclusive mode".to_owned(),
    }
}

impl DirShare {
    /// Opens `dir` (which exists) in shared mode: refuses a network
    /// filesystem, then, under `INIT`, learns whether this process is the
    /// only one and whether the machine restarted since the directory was
    /// last written (see [`Opening`]), runs `setup` (recovery and whatever
    /// a lone process may rebuild), resets the shared page when alone, and
    /// holds `LIVE` shared from then on. A process that opens alone and
    /// may write (`may_write`) records this boot in the page: `setup` must
    /// have checked the logs when it was told of a restart. One that may
    /// only read leaves the record as it was, for the next writer.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a directory on a network filesystem;
    /// [`Error::Locked`] while a process holds it in exclusive mode, and
    /// for a process that may write when the machine restarted since the
    /// directory was last written and read-only processes opened it since
    /// (its logs are checked by the first writer that opens it alone);
    /// what `setup` returns; I/O errors.
    pub(crate) fn open<T>(
        dir: &Path,
        mode: u32,
        may_write: bool,
        setup: impl FnOnce(Opening) -> Result<T>,
    ) -> Result<(DirShare, T)> {
        DirShare::open_in_boot(dir, mode, may_write, super::boot::boot_id(), setup)
    }

    /// [`DirShare::open`] in the boot `now` (`None`: not known).
    fn open_in_boot<T>(
        dir: &Path,
        mode: u32,
        may_write: bool,
        now: Option<u128>,
        setup: impl FnOnce(Opening) -> Result<T>,
    ) -> Result<(DirShare, T)> {
        if let FsKind::Remote(kind) = super::filesystem_kind(dir)? {
            return Err(Error::InvalidConfig(format!(
                "{} is on a {kind} filesystem: shared mode needs locks and shared memory that work \
                 between processes, which network filesystems do not give; open it in exclusive mode",
                dir.display()
            )));
        }
        let _init = LiveLock::hold(&dir.join(INIT_FILE), mode)?;
        let live_path = dir.join(LIVE_FILE);
        let start = std::time::Instant::now();
        let alone = loop {
            if let Some(live) = LiveLock::try_hold(&live_path, mode)? {
                break Some(live);
            }
            // Held shared by other processes (this one is not alone), or
            // exclusively: by a process in exclusive mode, or for a moment
            // by a child this process is spawning, whose copy of the
            // descriptor of an exclusive lock this process just let go of
            // lives until its exec. Only the last is waited out.
            if LiveLock::try_hold_shared(&live_path, mode)?.is_some()
                || exclusive_pid(dir) != Some(std::process::id())
                || start.elapsed() >= crate::broker::SPAWN_GRACE
            {
                break None;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let is_alone = alone.is_some();
        let page = SharedPage::open(&dir.join(SHM_FILE), mode)?;
        let recorded = if page.has_magic(MAGIC) {
            u128::from(page.load64(BOOT_LO)) | u128::from(page.load64(BOOT_HI)) << 64
        } else {
            0
        };
        let restarted = if is_alone {
            now.is_none_or(|now| now != recorded)
        } else {
            // A live process proves no restart since it opened; only a
            // read-only one can have opened first after a restart (it
            // leaves the record as it was). No record (a directory last
            // used in exclusive mode) or no boot id: nothing to tell.
            now.is_some_and(|now| recorded != 0 && now != recorded)
        };
        if restarted && !is_alone && may_write {
            return Err(Error::Locked {
                path: dir.to_owned(),
                holder: "read-only processes that opened it first after the machine restarted \
                         (its logs are checked by the first process that opens it alone and \
                         may write: close the read-only handles, then open it again)"
                    .to_owned(),
            });
        }
        let out = setup(Opening {
            alone: is_alone,
            restarted: restarted && is_alone,
        })?;
        if is_alone || !page.has_magic(MAGIC) {
            let boot = match now {
                Some(now) if may_write => now,
                _ => recorded,
            };
            page.reset_with(MAGIC, || {
                page.store64(BOOT_LO, boot as u64);
                page.store64(BOOT_HI, (boot >> 64) as u64);
            });
        }
        drop(alone);
        // Cannot block: exclusive holders take `LIVE` without waiting and
        // only outside `INIT`... unless one holds it now, which try finds.
        // A child this process is spawning may hold for a moment the
        // exclusive lock this open just let go of (its copy of the
        // descriptor lives until its exec): that is retried for a while.
        let start = std::time::Instant::now();
        let live = loop {
            if let Some(live) = LiveLock::try_hold_shared(&live_path, mode)? {
                break live;
            }
            if !is_alone || start.elapsed() >= crate::broker::SPAWN_GRACE {
                return Err(Error::Locked {
                    path: dir.to_owned(),
                    holder: exclusive_holder(dir),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        Ok((
            DirShare {
                page,
                live: Mutex::new(Some(live)),
            },
            out,
        ))
    }

    /// Leaves the directory (at close): lets go of `LIVE`, so that a
    /// process may open it exclusively, even while this share is still
    /// referenced.
    pub(crate) fn leave(&self) {
        lock(&self.live).take();
    }

    /// Rings the doorbell: wakes every process waiting on it. Cheap when
    /// nobody waits (a fence and one load). Called after the change it
    /// announces is visible (an append published, a group changed).
    pub(crate) fn ring(&self) {
        // Pairs with the fence in `prepare_wait`: either this load sees
        // the waiter counted, or the waiter's look for data sees the change.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.ring_after_fence();
    }

    /// [`DirShare::ring`] for a caller that ran a sequentially consistent
    /// fence after its change (the append lock's release, say).
    pub(crate) fn ring_after_fence(&self) {
        if self.page.load32(WAITERS) != 0 {
            self.ring_always();
        }
    }

    /// Starts a wait on the doorbell: counts the waiter in, then reads the
    /// doorbell. The caller looks for data next, and waits with
    /// [`DoorbellWait::wait`] only if it found none: a ring after this
    /// call ends that wait at once, so no wake-up is lost between the look
    /// and the wait.
    pub(crate) fn prepare_wait(&self) -> DoorbellWait<'_> {
        let counted = self.page.add32(WAITERS, 1).is_some();
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        DoorbellWait {
            share: self,
            seen: self.page.load32(DOORBELL),
            counted,
        }
    }

    /// Bumps the topics version: other processes look at the topics again.
    pub(crate) fn topics_changed(&self) {
        self.page.add64(TOPICS_VERSION, 1);
        self.ring_always();
    }

    /// The topics version.
    pub(crate) fn topics_version(&self) -> u64 {
        self.page.load64(TOPICS_VERSION)
    }

    fn ring_always(&self) {
        self.page.add32(DOORBELL, 1);
        self.page.wake32(DOORBELL);
    }
}

/// A waiter counted in on the doorbell (see [`DirShare::prepare_wait`]);
/// dropping it counts it out.
#[derive(Debug)]
pub(crate) struct DoorbellWait<'a> {
    share: &'a DirShare,
    seen: u32,
    /// Whether the waiter count includes this wait (not on a read-only
    /// page, where a wait polls).
    counted: bool,
}

impl DoorbellWait<'_> {
    /// Waits until the doorbell moves from its value at the start of the
    /// wait, or `timeout` passes. On a read-only page (nobody learns of
    /// the waiter) it sleeps for at most 10 ms instead.
    pub(crate) fn wait(&self, timeout: Duration) -> WaitOutcome {
        if !self.counted {
            std::thread::sleep(timeout.min(Duration::from_millis(10)));
            return WaitOutcome::TimedOut;
        }
        self.share.page.wait32(DOORBELL, self.seen, timeout)
    }

    /// Whether the doorbell rang since the wait started.
    #[cfg(test)]
    pub(crate) fn rang(&self) -> bool {
        self.share.page.load32(DOORBELL) != self.seen
    }
}

impl Drop for DoorbellWait<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.share.page.sub32(WAITERS, 1);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn the_first_opener_is_alone_and_the_next_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (a, o) = DirShare::open(dir.path(), 0o600, true, Ok).unwrap();
        assert!(o.alone);
        let (b, o) = DirShare::open(dir.path(), 0o600, true, Ok).unwrap();
        assert!(!o.alone);
        drop(a);
        drop(b);
        let (_c, o) = DirShare::open(dir.path(), 0o600, true, Ok).unwrap();
        assert!(o.alone, "everyone left");
    }

    #[test]
    fn a_lone_opener_learns_of_a_restart_since_the_last_writer_opened() {
        let dir = tempfile::tempdir().unwrap();
        let open = |may_write, boot| {
            DirShare::open_in_boot(dir.path(), 0o600, may_write, boot, Ok).map(|(_, o)| o)
        };
        let restarted = |o: Opening| o.restarted;
        // A new directory: nothing recorded, so the logs are checked.
        assert!(restarted(open(true, Some(1)).unwrap()));
        assert!(!restarted(open(true, Some(1)).unwrap()), "same boot");
        assert!(restarted(open(true, Some(2)).unwrap()), "a restart");
        // No boot id: every lone writer checks.
        assert!(restarted(open(true, None).unwrap()));
        assert!(restarted(open(true, None).unwrap()));
        // A read-only opener leaves the record for the next writer.
        assert!(restarted(open(true, Some(3)).unwrap()));
        assert!(restarted(open(false, Some(4)).unwrap()));
        assert!(restarted(open(false, Some(4)).unwrap()));
        assert!(restarted(open(true, Some(4)).unwrap()));
        assert!(!restarted(open(true, Some(4)).unwrap()));
    }

    #[test]
    fn a_writer_after_a_reader_that_came_first_after_a_restart_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let open = |may_write, boot| {
            DirShare::open_in_boot(dir.path(), 0o600, may_write, boot, Ok).map(|(s, _)| s)
        };
        drop(open(true, Some(1)).unwrap());
        let reader = open(false, Some(2)).unwrap();
        assert!(matches!(open(true, Some(2)), Err(Error::Locked { .. })));
        let other_reader = open(false, Some(2)).unwrap();
        drop((reader, other_reader));
        let writer = open(true, Some(2)).unwrap();
        // Not alone, same boot as recorded: no check, no refusal.
        let second = DirShare::open_in_boot(dir.path(), 0o600, true, Some(2), Ok).unwrap();
        assert_eq!(
            second.1,
            Opening {
                alone: false,
                restarted: false
            }
        );
        drop((writer, second));
    }

    #[test]
    fn shared_and_exclusive_opens_exclude_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let (a, ()) = DirShare::open(dir.path(), 0o600, true, |_| Ok(())).unwrap();
        assert!(matches!(
            hold_exclusive(dir.path(), 0o600),
            Err(Error::Locked { .. })
        ));
        drop(a);
        let ex = hold_exclusive(dir.path(), 0o600).unwrap();
        assert!(matches!(
            DirShare::open(dir.path(), 0o600, true, |_| Ok(())),
            Err(Error::Locked { .. })
        ));
        drop(ex);
        assert!(DirShare::open(dir.path(), 0o600, true, |_| Ok(())).is_ok());
    }

    #[test]
    fn a_ring_in_one_share_wakes_a_waiter_in_another() {
        let dir = tempfile::tempdir().unwrap();
        let (a, ()) = DirShare::open(dir.path(), 0o600, true, |_| Ok(())).unwrap();
        let (b, ()) = DirShare::open(dir.path(), 0o600, true, |_| Ok(())).unwrap();
        let b = Arc::new(b);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || {
                let w = b.prepare_wait();
                tx.send(()).unwrap();
                let t = Instant::now();
                while !w.rang() {
                    w.wait(Duration::from_secs(30));
                }
                t.elapsed()
            })
        };
        rx.recv().unwrap();
        // One ring, after the waiter counted itself in, must end the wait
        // (a private futex, or a missed count, would sleep out the 30 s).
        std::thread::sleep(Duration::from_millis(50));
        a.ring();
        assert!(waiter.join().unwrap() < Duration::from_secs(10));
        let before = a.page.load32(DOORBELL);
        a.ring(); // nobody waits: the doorbell stays
        assert_eq!(a.page.load32(DOORBELL), before);
        let w = a.prepare_wait();
        a.ring();
        assert!(w.rang());
        let v = a.topics_version();
        b.topics_changed();
        assert_eq!(a.topics_version(), v + 1);
    }
}
