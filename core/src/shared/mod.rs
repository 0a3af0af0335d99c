//! What several processes on one data directory share: words in mapped
//! pages that they read and write with atomics, waits and wake-ups on those
//! words across processes, liveness from locks the kernel releases when a
//! process ends, and the check that the directory is on a local filesystem.
//!
//! Everything read from a shared page was written by another process, which
//! may have been killed half-way or may not be mqlite at all: callers treat
//! each value as untrusted input and check it before use (a page whose
//! header does not match is reset or ignored, never trusted).

#[cfg_attr(not(test), allow(dead_code, unused_imports))] // the log's shared appends call it
mod append_lock;
mod dir;
mod fs_kind;
mod futex;
mod liveness;
mod page;
#[cfg_attr(not(test), allow(dead_code, unused_imports))] // the log's shared appends call it
mod procs;
mod tail;

#[allow(unused_imports)] // the log's shared appends use them
pub(crate) use append_lock::{AppendGuard, Stolen, WAIT_SLICE};
pub(crate) use dir::{hold_exclusive, DirShare, ExclusiveHold};
pub(crate) use fs_kind::{filesystem_kind, FsKind};
pub(crate) use futex::WaitOutcome;
pub(crate) use liveness::{LiveLock, Liveness};
pub(crate) use page::{SharedPage, Word32, Word64, PAGE_LEN};
#[allow(unused_imports)] // the log's shared appends use them
pub(crate) use procs::{process_alive, ProcessSlot, PROCS_DIR};
pub(crate) use tail::{Tail, TailPage};
