//! A small pool of threads, shared by every partition of a broker, for
//! background work: faulting in pages ahead of a writer, writing blocks
//! back ahead of small flushes, preparing the next segment.
//!
//! A fixed number of threads ([`POOL_THREADS`]), started on the first job
//! (a broker never written to has none), take jobs from one queue in
//! order. Callers keep a job per partition from being queued twice (a
//! partition's `populating` flag, its prepare slot). [`Pool::shutdown`], at
//! the broker's close, drops the jobs still queued (unrun: what they held,
//! segments included, is released) and waits for the running ones; jobs
//! submitted afterwards are dropped at once.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::sync;

/// Threads of a broker's pool: the project's machines have two cores, and
/// the work is page faulting and disk writes.
pub(crate) const POOL_THREADS: usize = 2;

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    stopped: bool,
    /// Threads waiting for a job.
    idle: usize,
    handles: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("jobs", &self.jobs.len())
            .field("stopped", &self.stopped)
            .field("idle", &self.idle)
            .field("threads", &self.handles.len())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    work: Condvar,
}

/// A broker's background threads and their queue.
#[derive(Debug)]
pub(crate) struct Pool {
    shared: Arc<Shared>,
    threads: usize,
}

impl Pool {
    /// A pool of at most `threads` threads (none started yet).
    pub(crate) fn new(threads: usize) -> Pool {
        Pool {
            shared: Arc::default(),
            threads: threads.max(1),
        }
    }

    /// Queues `job`, starting a thread if none is idle and fewer than the
    /// pool's number run. Returns `false` (the job dropped, unrun) once the
    /// pool is shut down, or when it has no thread and none can start.
    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'static) -> bool {
        let mut st = sync::lock(&self.shared.state);
        if st.stopped {
            drop(st);
            drop(job);
            return false;
        }
        st.jobs.push_back(Box::new(job));
        if st.idle == 0 && st.handles.len() < self.threads {
            let shared = Arc::clone(&self.shared);
            let started = std::thread::Builder::new()
                .name("mqlite-background".into())
                .spawn(move || work(&shared));
            match started {
                Ok(h) => st.handles.push(h),
                Err(e) if st.handles.is_empty() => {
                    ::log::warn!("starting a background thread: {e}");
                    let job = st.jobs.pop_back();
                    drop(st);
                    drop(job);
                    return false;
                }
                Err(_) => {} // the running threads take it
            }
        }
        drop(st);
        self.shared.work.notify_one();
        true
    }

    /// Drops the queued jobs, waits for the running ones and stops the
    /// threads; later submissions are refused. Safe to call twice, and from
    /// a job (that thread is then not waited for).
    pub(crate) fn shutdown(&self) {
        let (jobs, handles) = {
            let mut st = sync::lock(&self.shared.state);
            st.stopped = true;
            (
                std::mem::take(&mut st.jobs),
                std::mem::take(&mut st.handles),
            )
        };
        self.shared.work.notify_all();
        drop(jobs);
        let me = std::thread::current().id();
        for h in handles {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }

    /// Threads started so far.
    #[cfg(test)]
    fn started(&self) -> usize {
        sync::lock(&self.shared.state).handles.len()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn work(shared: &Shared) {
    let mut st = sync::lock(&shared.state);
    loop {
        if let Some(job) = st.jobs.pop_front() {
            drop(st);
            // A panicking job must not take the thread (and the queue) down.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            st = sync::lock(&shared.state);
            continue;
        }
        if st.stopped {
            return;
        }
        st.idle += 1;
        st = shared
            .work
            .wait(st)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        st.idle -= 1;
    }
}

/// The result of a job, for the one caller waiting for it: set when the
/// job ends, or as "dropped" when the job is dropped unrun (the pool shut
/// down).
#[derive(Debug)]
pub(crate) struct Pending<T> {
    slot: Arc<(Mutex<Outcome<T>>, Condvar)>,
}

#[derive(Debug)]
enum Outcome<T> {
    Waiting,
    Done(T),
    Dropped,
}

/// The job's side of a [`Pending`].
#[derive(Debug)]
pub(crate) struct Completer<T> {
    slot: Arc<(Mutex<Outcome<T>>, Condvar)>,
    done: bool,
}

/// A pending result and the completer its job sets it with.
pub(crate) fn pending<T>() -> (Pending<T>, Completer<T>) {
    let slot = Arc::new((Mutex::new(Outcome::Waiting), Condvar::new()));
    (
        Pending {
            slot: Arc::clone(&slot),
        },
        Completer { slot, done: false },
    )
}

impl<T> Completer<T> {
    /// Sets the result.
    pub(crate) fn complete(mut self, value: T) {
        self.set(Outcome::Done(value));
    }

    fn set(&mut self, outcome: Outcome<T>) {
        self.done = true;
        *sync::lock(&self.slot.0) = outcome;
        self.slot.1.notify_all();
    }
}

impl<T> Drop for Completer<T> {
    fn drop(&mut self) {
        if !self.done {
            self.set(Outcome::Dropped);
        }
    }
}

impl<T> Pending<T> {
    /// Waits for the job: its result, or `None` if it was dropped unrun.
    pub(crate) fn wait(self) -> Option<T> {
        let (m, cv) = &*self.slot;
        let mut st = sync::lock(m);
        loop {
            match std::mem::replace(&mut *st, Outcome::Waiting) {
                Outcome::Done(v) => return Some(v),
                Outcome::Dropped => return None,
                Outcome::Waiting => {
                    st = cv
                        .wait(st)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Many jobs run on at most the pool's threads; shutdown drops what is
    /// queued and refuses more.
    #[test]
    fn bounded_threads_and_shutdown() {
        let pool = Pool::new(2);
        assert_eq!(pool.started(), 0, "no thread before the first job");
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..200 {
            let r = Arc::clone(&ran);
            assert!(pool.submit(move || {
                r.fetch_add(1, Ordering::Relaxed);
            }));
        }
        let (p, c) = pending();
        assert!(pool.submit(move || c.complete(7)));
        assert_eq!(p.wait(), Some(7));
        assert!(pool.started() <= 2);
        // Jobs start in order: when the last one ran, every job before it
        // had started, and all but the one the other thread may still run
        // had finished; that one finishes too.
        assert!(ran.load(Ordering::Relaxed) >= 199);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while ran.load(Ordering::Relaxed) < 200 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(ran.load(Ordering::Relaxed), 200);
        pool.shutdown();
        let (p, c) = pending::<u32>();
        assert!(!pool.submit(move || c.complete(1)));
        assert_eq!(p.wait(), None, "a refused job is dropped unrun");
    }

    /// A panicking job leaves the pool working.
    #[test]
    fn panics_are_contained() {
        let pool = Pool::new(1);
        assert!(pool.submit(|| panic!("a job failed")));
        let (p, c) = pending();
        assert!(pool.submit(move || c.complete(())));
        assert_eq!(p.wait(), Some(()));
    }
}
