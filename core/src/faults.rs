//! Test hooks where data is made durable, for fault-injection tests: a
//! failed fsync (the partition must be poisoned) and power loss (everything
//! not yet synced is lost). Not a stable API; no hook is installed unless a
//! test installs one, and then the cost is one atomic load per sync.

use crate::sync;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Where a sync happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncKind {
    /// `msync` of a memory-mapped file's written range (a segment log or
    /// index); `end` is the byte up to which the file is durable after it.
    Range {
        /// End of the synced range.
        end: u64,
    },
    /// `fsync` of a whole file (a sealed segment's size, a metadata file
    /// before its rename).
    File,
    /// `fsync` of a directory (created, renamed and removed entries).
    Dir,
    /// `syncfs` of the filesystem holding the directory `path`: every file
    /// and directory entry written there so far (many partitions' files
    /// made durable at once, at their creation or recovery).
    Filesystem,
}

/// A hook: called with `before = true` just before a sync (an `Err` makes
/// the sync fail with that error, as if the disk had reported it) and with
/// `before = false` once it succeeded.
pub type SyncHook = Arc<dyn Fn(&Path, SyncKind, bool) -> std::io::Result<()> + Send + Sync>;

static HOOKED: AtomicBool = AtomicBool::new(false);
static HOOK: RwLock<Option<SyncHook>> = RwLock::new(None);

/// Installs `hook` for the whole process (`None` removes it). Hooks see
/// every broker's syncs: filter by path.
pub fn set_sync_hook(hook: Option<SyncHook>) {
    let mut h = sync::write(&HOOK);
    HOOKED.store(hook.is_some(), Ordering::Release);
    *h = hook;
}

fn call(path: &Path, kind: SyncKind, before: bool) -> std::io::Result<()> {
    if !HOOKED.load(Ordering::Acquire) {
        return Ok(());
    }
    let hook = sync::read(&HOOK).clone();
    match hook {
        Some(h) => h(path, kind, before),
        None => Ok(()),
    }
}

/// Before a sync of `path`: the injected error, if any.
#[inline]
pub(crate) fn before_sync(path: &Path, kind: SyncKind) -> std::io::Result<()> {
    call(path, kind, true)
}

/// After a successful sync of `path`.
#[inline]
pub(crate) fn after_sync(path: &Path, kind: SyncKind) {
    let _ = call(path, kind, false);
}

/// The steps of a transaction's commit, in order, at which a
/// [`CommitHook`] is called (crash tests stop the process there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitStep {
    /// The data is written in every partition, not yet published.
    DataWritten,
    /// With `acks=all`: the data is synced.
    DataSynced,
    /// The commit record is in the transaction log: the commit point.
    Committed,
    /// A partition's data has its first batch's length back and its
    /// marker is written, in the log's file but not yet published to the
    /// other processes (called in each partition's publish, before the
    /// step that says that partition is published).
    PartMarked,
    /// Some partitions' data and markers are published (called after each
    /// but the last).
    PartPublished,
    /// Every partition's data and marker is published.
    Published,
    /// The consumer offsets sent into the transaction are committed.
    OffsetsApplied,
}

/// A hook called at each [`CommitStep`] of every transaction's commit.
pub type CommitHook = Arc<dyn Fn(CommitStep) + Send + Sync>;

static COMMIT_HOOKED: AtomicBool = AtomicBool::new(false);
static COMMIT_HOOK: RwLock<Option<CommitHook>> = RwLock::new(None);

/// Installs `hook` for the whole process (`None` removes it).
pub fn set_commit_hook(hook: Option<CommitHook>) {
    let mut h = sync::write(&COMMIT_HOOK);
    COMMIT_HOOKED.store(hook.is_some(), Ordering::Release);
    *h = hook;
}

/// At `step` of a commit.
#[inline]
pub(crate) fn commit_step(step: CommitStep) {
    if COMMIT_HOOKED.load(Ordering::Acquire) {
        let hook = sync::read(&COMMIT_HOOK).clone();
        if let Some(h) = hook {
            h(step);
        }
    }
}

/// The boot id set by [`set_boot_id`], if any.
static BOOT_ID: RwLock<Option<u128>> = RwLock::new(None);

/// Makes this process take `id` for the machine's boot id (`None`: the
/// real one again). For tests that model a power loss, which in life comes
/// with a restart of the machine: a shared-mode open that finds the boot id
/// changed since the directory was last written checks every log (see
/// docs/shared-mode.md).
pub fn set_boot_id(id: Option<u128>) {
    *sync::write(&BOOT_ID) = id;
}

/// The boot id set by [`set_boot_id`].
pub(crate) fn boot_id() -> Option<u128> {
    *sync::read(&BOOT_ID)
}

/// The size set by [`set_transaction_log_limit`]; 0: none.
static TXN_LOG_LIMIT: AtomicU64 = AtomicU64::new(0);

/// Makes this process's commits empty the transaction log once it passes
/// `bytes` rather than 64 MiB (`None`: 64 MiB again). For tests of the
/// emptying that should not write 64 MiB of commit records to reach it.
pub fn set_transaction_log_limit(bytes: Option<u64>) {
    TXN_LOG_LIMIT.store(bytes.unwrap_or(0), Ordering::Release);
}

/// The size set by [`set_transaction_log_limit`], if any.
#[inline]
pub(crate) fn transaction_log_limit() -> Option<u64> {
    match TXN_LOG_LIMIT.load(Ordering::Acquire) {
        0 => None,
        n => Some(n),
    }
}
