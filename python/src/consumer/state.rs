//! A consumer's locked state ([`State`]: the engine consumer) and the
//! [`Counters`] kept here.

use std::sync::atomic::AtomicU64;

pub(super) struct State {
    pub(super) consumer: mqlite::Consumer,
    /// The engine consumer was closed.
    pub(super) shut: bool,
}

impl State {
    /// Closes the engine consumer, once (it commits with auto-commit and
    /// leaves its group).
    pub(super) fn shut_down(&mut self) {
        if !self.shut {
            self.shut = true;
            self.consumer.close();
        }
    }
}

/// Counters of the calls made from Python (the engine counts each of its
/// own polls, and a Python wait is several of them).
#[derive(Default)]
pub(super) struct Counters {
    pub(super) polls: AtomicU64,
}
