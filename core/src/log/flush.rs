//! Flushing a partition's log: group commit, where concurrent `acks=all`
//! callers share one flush, and the flush of the segments itself.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::{lock, PartitionLog, Segment, WriteAhead};
use crate::error::Result;
use crate::sync;

/// How long a sender waits at a time for a flush under way in another
/// process, and how many times, before it flushes itself (that process may
/// have died, or its flush may be slow).
const SHARED_FLUSH_SLICE: std::time::Duration = std::time::Duration::from_millis(2);
const SHARED_FLUSH_WAITS: u32 = 8;

#[derive(Debug, Default)]
pub(super) struct FlushState {
    /// Every offset below this is on disk.
    pub(super) flushed: u64,
    /// A flush (msync) is running.
    pub(super) in_progress: bool,
    /// A caller (the leader) waits for more callers before it flushes.
    pub(super) collecting: bool,
    /// Counts the flushes started; callers count themselves in the round
    /// they wait for.
    pub(super) round: u64,
    /// The end offset the running flush covers, at least.
    pub(super) flushing_to: u64,
    /// Callers waiting for the next flush to start (each counted once per
    /// round).
    pub(super) arrivals: usize,
    /// Callers the next flush waits for: as many as were waiting on the last
    /// one, counting those that came while it ran. A steady group of `n`
    /// `acks=all` senders is so served by one flush per round of `n`.
    pub(super) expected: usize,
    /// Records the last flush covered: the next one also waits until as
    /// many were appended, so that a flusher fed by appenders that do not
    /// wait for it (the producer's thread flushing `send_async` records)
    /// covers as much per flush as the last one.
    pub(super) last_covered: u64,
    /// A caller sleeps on [`PartitionLog::flush_ends`]: the flusher wakes
    /// the sleepers when it ends.
    pub(super) sleepers: bool,
    /// A collection was completed by the last caller it waited for, which
    /// flushes in the leader's place: the leader, still waiting on
    /// `arrival_cv`, is woken when that flush ends.
    pub(super) leader_waiting: bool,
    /// How long the last flush took: the longest a leader waits.
    pub(super) last_flush: std::time::Duration,
}

/// The state of `acks=all` flushes shared by a partition's callers.
#[derive(Debug)]
pub(super) struct GroupCommit {
    pub(super) state: Mutex<FlushState>,
    /// Wakes a flush leader collecting callers.
    pub(super) arrival_cv: Condvar,
    /// Counts finished flushes (wrapping): the futex word callers waiting
    /// for a flush sleep on, all woken by one `wake_all` when it changes.
    pub(super) flush_ends: AtomicU32,
    /// The blocks written ahead of small flushes ([`PartitionLog::write_ahead`]).
    pub(super) written_ahead: Mutex<WriteAhead>,
}

impl GroupCommit {
    /// The state of a log whose offsets below `flushed` are on disk,
    /// nothing written ahead.
    pub(super) fn new(flushed: u64) -> GroupCommit {
        GroupCommit {
            state: Mutex::new(FlushState {
                flushed,
                ..FlushState::default()
            }),
            arrival_cv: Condvar::new(),
            flush_ends: AtomicU32::new(0),
            written_ahead: Mutex::new(WriteAhead {
                segment: u64::MAX,
                to: 0,
                last_end: 0,
            }),
        }
    }
}

impl PartitionLog {
    /// Group commit: returns once every offset below `target` is on disk.
    ///
    /// Concurrent callers share one flush. The first caller to find no flush
    /// running (the leader) waits, for at most the last flush's duration,
    /// until as many callers wait as the last flush served (see
    /// [`FlushState::expected`]) and as many records were appended as it
    /// covered; the caller that completes that flushes at once in the
    /// leader's place, so the round does not also wait for the leader to
    /// be woken. A lone sender never waits.
    #[inline(never)]
    pub(crate) fn flush_to(&self, target: u64) -> Result<()> {
        if self.flushed_fast.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        if self.flushed_elsewhere(target) {
            return Ok(());
        }
        let mut st = lock(&self.group.state);
        let mut counted_in = None;
        loop {
            if st.flushed >= target {
                return Ok(());
            }
            if self.poisoned.load(Ordering::Acquire) {
                return Err(self.poisoned_error());
            }
            // A caller the running flush covers waits for it uncounted.
            let covered = st.in_progress && target <= st.flushing_to;
            if counted_in != Some(st.round) && !covered {
                counted_in = Some(st.round);
                st.arrivals += 1;
            }
            let lead = !st.in_progress && !st.collecting;
            let complete = st.collecting && self.collected(&st);
            if !lead && !complete {
                let seen = self.group.flush_ends.load(Ordering::Acquire);
                st.sleepers = true;
                drop(st);
                while self.group.flush_ends.load(Ordering::Acquire) == seen {
                    atomic_wait::wait(&self.group.flush_ends, seen);
                }
                if self.flushed_fast.load(Ordering::Acquire) >= target {
                    return Ok(());
                }
                st = lock(&self.group.state);
                continue;
            }
            if complete {
                // The leader still waits on `arrival_cv`: it sees from
                // `round` that its round was taken over, and is woken when
                // the flush ends.
                st.collecting = false;
                st.leader_waiting = true;
            } else if !self.collected(&st) {
                let wait = st.last_flush.min(std::time::Duration::from_millis(2));
                let deadline = Instant::now() + wait;
                let round = st.round;
                st.collecting = true;
                while st.round == round && !self.collected(&st) {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    st = sync::wait_timeout(&self.group.arrival_cv, st, deadline - now).0;
                }
                if st.round != round {
                    continue; // taken over: wait for that flush
                }
                st.collecting = false;
            }
            self.flush_round(st)?;
            if self.flushed_fast.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            st = lock(&self.group.state);
        }
    }

    /// Shared mode, several writers: whether another process's flush
    /// covered `target` (one that ended, or one under way, waited for);
    /// then this process counts it as flushed. While a flush under way in
    /// another process does not cover `target`, the caller waits for it to
    /// end and flushes after it, covering everything appended meanwhile
    /// (the cross-process form of group commit). Waits are bounded (the
    /// flushing process may have died): `false` makes the caller flush
    /// itself, which is always safe.
    fn flushed_elsewhere(&self, target: u64) -> bool {
        let Some(sw) = self.shared_writer() else {
            return false;
        };
        let mut waits = 0;
        loop {
            let seen = sw.page.flush_ends();
            let flushed = sw.page.flushed();
            if flushed >= target {
                // Another process's view may be ahead of this one's: what
                // this process counts as flushed stays within its own end.
                let flushed = flushed.min(self.end_offset()).max(target);
                let mut st = lock(&self.group.state);
                st.flushed = st.flushed.max(flushed);
                self.flushed_fast.fetch_max(st.flushed, Ordering::AcqRel);
                return true;
            }
            // A flush is under way when the latest one to start covers
            // more than the flushed offset says.
            if sw.page.flushing_to() <= flushed || waits == SHARED_FLUSH_WAITS {
                return false;
            }
            sw.page.wait_flush_end(seen, SHARED_FLUSH_SLICE);
            waits += 1;
        }
    }

    /// Whether the next flush has what the last one had: as many callers
    /// waiting and as many records appended since.
    fn collected(&self, st: &FlushState) -> bool {
        st.arrivals >= st.expected
            && self.end_offset().saturating_sub(st.flushed) >= st.last_covered
    }

    /// Runs one group-commit flush for the callers counted so far, then
    /// wakes everyone waiting. Called with the flush state locked.
    fn flush_round(&self, mut st: MutexGuard<'_, FlushState>) -> Result<()> {
        st.in_progress = true;
        st.flushing_to = self.end_offset();
        let served = std::mem::take(&mut st.arrivals);
        let before = st.flushed;
        st.round += 1;
        drop(st);
        let started = Instant::now();
        let shared = self.shared_writer();
        if let Some(sw) = shared {
            sw.page.note_flushing(self.end_offset());
        }
        let res = self.flush_segments();
        if let (Some(sw), Ok(end)) = (shared, &res) {
            // The waiting senders of every process that this flush covers.
            sw.page.note_flushed(*end);
        }
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.group.state);
        st.in_progress = false;
        st.last_flush = started.elapsed();
        st.expected = served + st.arrivals;
        let res = match res {
            Ok(end) => {
                st.last_covered = end.saturating_sub(before).max(1);
                st.flushed = st.flushed.max(end);
                self.flushed_fast.store(st.flushed, Ordering::Release);
                Ok(end)
            }
            Err(e) => {
                self.poisoned.store(true, Ordering::Release);
                Err(e)
            }
        };
        // Everyone waiting looks again: the served return at once, the
        // others take the lock (one of them leads the next flush).
        self.group.flush_ends.fetch_add(1, Ordering::Release);
        let sleepers = std::mem::take(&mut st.sleepers);
        let leader = std::mem::take(&mut st.leader_waiting);
        drop(st);
        if sleepers {
            atomic_wait::wake_all(&raw const self.group.flush_ends);
        }
        if leader {
            self.group.arrival_cv.notify_all();
        }
        let end = res?;
        // After the wake-ups, which are what the senders wait for. Not
        // synced: a lost update only lengthens a recovery.
        let _ = self.checkpoint.advance(end);
        self.write_ahead();
        Ok(())
    }

    /// Flushes everything published so far; returns the offset it covers.
    fn flush_segments(&self) -> Result<u64> {
        let end = self.end_offset();
        let dirty: Vec<Arc<Segment>> = {
            let segs = sync::read(&self.segments);
            let mut v: Vec<_> = segs
                .iter()
                .rev()
                .take_while(|s| !(s.is_sealed() && s.is_flushed()))
                .cloned()
                .collect();
            v.reverse();
            v
        };
        for s in dirty {
            s.flush()?;
        }
        Ok(end)
    }

    /// Flushes everything appended so far.
    pub(crate) fn flush(&self) -> Result<()> {
        self.flush_to(self.end_offset())
    }
}
