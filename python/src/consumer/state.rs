//! A consumer's locked state ([`State`]: the engine consumer and the buffer
//! of fetched messages) and its [`Counters`] of what was handed out.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(super) struct State {
    pub(super) consumer: mqlite::Consumer,
    /// Messages fetched from the engine but not yet handed out, in order.
    pub(super) buffer: VecDeque<mqlite::Message>,
    /// When the engine was last polled.
    pub(super) last_fetch: Instant,
    /// The auto-commit interval, for a consumer with a `group_id` and
    /// `enable_auto_commit`.
    pub(super) auto_commit: Option<Duration>,
    pub(super) last_auto_commit: Instant,
    /// The engine consumer was closed.
    pub(super) shut: bool,
}

impl State {
    /// Puts buffered messages back: seeks each partition to its first
    /// buffered offset, so the engine's positions match what was handed out.
    pub(super) fn unbuffer(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let mut firsts: Vec<(&str, u32, u64)> = Vec::new();
        for m in &self.buffer {
            if !firsts
                .iter()
                .any(|&(t, p, _)| p == m.partition() && t == m.topic())
            {
                firsts.push((m.topic(), m.partition(), m.offset()));
            }
        }
        let firsts: Vec<(String, u32, u64)> = firsts
            .into_iter()
            .map(|(t, p, o)| (t.to_owned(), p, o))
            .collect();
        self.buffer.clear();
        for (t, p, o) in firsts {
            // Fails only if retention removed the offset or the partition
            // went away; the engine then resets the position itself.
            let _ = self.consumer.seek(&t, p, o);
        }
    }

    /// Drops the buffered messages of one partition (before a seek of it).
    pub(super) fn drop_partition(&mut self, topic: &str, partition: u32) {
        self.buffer
            .retain(|m| m.partition() != partition || m.topic() != topic);
    }

    /// The first buffered offset of a partition, if any.
    pub(super) fn first_buffered(&self, topic: &str, partition: u32) -> Option<u64> {
        self.buffer
            .iter()
            .find(|m| m.partition() == partition && m.topic() == topic)
            .map(mqlite::Message::offset)
    }

    /// Whether an automatic commit is due (and if so restarts its clock).
    pub(super) fn auto_commit_due(&mut self) -> bool {
        match self.auto_commit {
            Some(every) if self.last_auto_commit.elapsed() >= every => {
                self.last_auto_commit = Instant::now();
                true
            }
            _ => false,
        }
    }

    /// Polls the engine into the (empty) buffer.
    pub(super) fn fetch(&mut self, timeout: Duration) -> mqlite::Result<()> {
        let got = self.consumer.poll(timeout);
        self.last_fetch = Instant::now();
        self.buffer.extend(got?);
        Ok(())
    }

    /// Closes the engine consumer, once: puts buffered messages back,
    /// commits (auto-commit; a group member commits in its `on_revoke`
    /// instead, as it leaves), leaves the group. Returns a failed commit.
    pub(super) fn shut_down(&mut self, broker_open: bool) -> Option<mqlite::Error> {
        if self.shut {
            return None;
        }
        self.shut = true;
        self.unbuffer();
        let commit =
            broker_open && self.auto_commit.is_some() && self.consumer.member_id().is_none();
        let err = if commit {
            self.consumer.commit().err()
        } else {
            None
        };
        self.consumer.close();
        err
    }
}

/// Counters of what was handed out to Python (the engine counts what it
/// fetched, buffered messages and re-reads included).
#[derive(Default)]
pub(super) struct Counters {
    pub(super) records: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) polls: AtomicU64,
}

/// Adds `n` to a counter written only with the state locked: a load and a
/// store (no atomic read-modify-write) cannot lose an update.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl Counters {
    /// Counts a message handed out (with the state locked).
    #[inline]
    pub(super) fn handed(&self, m: &mqlite::Message) {
        bump(&self.records, 1);
        let len = m.key().map_or(0, <[u8]>::len) + m.value().map_or(0, <[u8]>::len);
        bump(&self.bytes, len as u64);
    }
}
