//! What several processes on one data directory share: words in mapped
//! pages that they read and write with atomics, waits and wake-ups on those
//! words across processes, liveness from locks the kernel releases when a
//! process ends, and the check that the directory is on a local filesystem.
//!
//! Everything read from a shared page was written by another process, which
//! may have been killed half-way or may not be mqlite at all: callers treat
//! each value as untrusted input and check it before use (a page whose
//! header does not match is reset or ignored, never trusted).

mod append_lock;
mod boot;
mod dir;
mod fs_kind;
mod futex;
mod liveness;
mod lock_page;
mod page;
mod procs;
mod tail;

pub(crate) use append_lock::{AppendGuard, LockLayout, LockWords, Processes, Stolen};
pub(crate) use dir::{hold_exclusive, DirShare, ExclusiveHold, SHM_FILE};
pub(crate) use fs_kind::{filesystem_kind, FsKind};
pub(crate) use futex::WaitOutcome;
pub(crate) use liveness::{LiveLock, Liveness};
pub(crate) use lock_page::{LockPage, OpLock, FREE_AT};
pub(crate) use page::{SharedPage, Word32, Word64, PAGE_LEN};
pub(crate) use procs::{left_by_a_dead_process, process_alive, ProcessSlot};
pub(crate) use tail::{LastBatch, Tail, TailPage, TAIL_FILE};
