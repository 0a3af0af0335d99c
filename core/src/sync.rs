//! Poison-tolerant locking, the one helper the engine and its bindings use.
//!
//! A lock is poisoned when a thread panicked while holding it. The engine's
//! shared state stays consistent across such a panic (every update that
//! matters is completed before anything that can panic, or is repaired on
//! the next use), and one panicking user callback must not make every later
//! call on the broker panic too; so a poisoned lock is simply taken.

use std::sync::{
    Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
    WaitTimeoutResult,
};
use std::time::Duration;

/// Locks `m`, poisoned or not.
#[inline]
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes `l` for reading, poisoned or not.
#[inline]
pub fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Takes `l` for writing, poisoned or not.
#[inline]
pub fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `cv` with `guard`, poisoned or not.
#[inline]
pub fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `cv` with `guard` for at most `timeout`, poisoned or not.
#[inline]
pub fn wait_timeout<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    cv.wait_timeout(guard, timeout)
        .unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A lock poisoned by a panicking holder is still taken, with the
    /// holder's last update in it.
    #[test]
    fn poisoned_locks_are_taken() {
        let m = Arc::new(Mutex::new(0));
        let l = Arc::new(RwLock::new(0));
        let (m2, l2) = (Arc::clone(&m), Arc::clone(&l));
        let r = std::thread::spawn(move || {
            let mut g = m2.lock().unwrap();
            let mut w = l2.write().unwrap();
            *g = 1;
            *w = 2;
            panic!("poison");
        })
        .join();
        assert!(r.is_err());
        assert!(m.is_poisoned() && l.is_poisoned());
        assert_eq!(*lock(&m), 1);
        assert_eq!(*read(&l), 2);
        *write(&l) = 3;
        assert_eq!(*read(&l), 3);
        let cv = Condvar::new();
        let (g, to) = wait_timeout(&cv, lock(&m), Duration::from_millis(1));
        assert!(to.timed_out());
        assert_eq!(*g, 1);
    }
}
