//! One-message consumption for share consumers
//! ([`ShareConsumer::poll_one`]): the messages a poll took from the group
//! and the consumer holds until it hands them out, one per call.
//!
//! A poll takes up to `max_poll_records` messages from the group at once
//! (one write of the group's state for all of them), and their locks start
//! then. Handing them out one by one keeps that cost per poll, not per
//! message. A held message is handed out only while at least half of its
//! lock is left, so that the application has time to settle it: once half
//! the lock has run, the messages still held are given back to the group
//! (one write, available to every member at once, their delivery not
//! counted: the application never saw them) and the next call polls
//! again. Held messages are never renewed, so a slow consumer does not
//! keep messages from the other members: one that takes longer than half
//! a lock per message should lower `max_poll_records`.
//!
//! `poll` returns the held messages first; a new subscription and
//! `close` give them back.

use std::time::{Duration, Instant};

use super::group::Action;
use super::{ShareConsumer, ShareMessage};
use crate::error::{Error, Result};

impl ShareConsumer {
    /// Returns the next message, waiting up to `timeout` for one; `None`
    /// when the timeout passed (or the [`waker`](Self::waker) was used).
    ///
    /// It takes what [`poll`](Self::poll) would, holds it, and hands it out
    /// one message per call, so a loop over `poll_one` costs little more
    /// per message than one over `poll`. A held message is handed out only
    /// while at least half of its lock is left; the others are given back
    /// to the group then, uncounted (see the [module documentation]).
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    ///
    /// [module documentation]: crate::share_group
    pub fn poll_one(&mut self, timeout: Duration) -> Result<Option<ShareMessage>> {
        if let Some(m) = self.next_held() {
            return Ok(Some(m));
        }
        self.check_open()?;
        self.stats.polls += 1;
        let mut got = self.fetch(timeout)?.into_iter();
        let Some(first) = got.next() else {
            return Ok(None);
        };
        self.held.extend(got);
        self.count_handed(std::slice::from_ref(&first));
        Ok(Some(first))
    }

    /// [`poll_one`](Self::poll_one) when it can return at once: the next
    /// held message, if the consumer holds one with at least half of its
    /// lock left. `None` otherwise (then `poll_one` polls). No wait; no
    /// write but the one that gives held messages back once half their
    /// lock has run. For bindings that hand out held messages under their
    /// own lock and release it for a poll.
    pub fn next_held(&mut self) -> Option<ShareMessage> {
        if self.check_open().is_err() || !self.held_fresh() {
            return None;
        }
        let m = self.held.pop_front()?;
        self.stats.polls += 1;
        self.count_handed(std::slice::from_ref(&m));
        Some(m)
    }

    /// The held messages, taken out (all of them, counted as delivered),
    /// or none if half their lock has run (then they are given back).
    pub(super) fn take_held(&mut self) -> Vec<ShareMessage> {
        if !self.held_fresh() {
            return Vec::new();
        }
        let out: Vec<ShareMessage> = self.held.drain(..).collect();
        self.count_handed(&out);
        out
    }

    /// Whether messages are held with at least half their lock left; held
    /// messages past that are given back.
    fn held_fresh(&mut self) -> bool {
        if self.held.is_empty() {
            return false;
        }
        if Instant::now() >= self.held_until {
            self.give_back_held();
            return false;
        }
        true
    }

    /// Counts `messages` as handed to the application.
    pub(super) fn count_handed(&mut self, messages: &[ShareMessage]) {
        self.stats.records += messages.len() as u64;
        self.stats.redelivered += messages.iter().filter(|m| m.delivery_count > 1).count() as u64;
    }

    /// Notes when messages taken from the group by a poll that started at
    /// `polled_at` stop being handed out.
    pub(super) fn hold_from(&mut self, polled_at: Instant) {
        self.held_until = polled_at + self.member.lock / 2;
    }

    /// Gives the held messages back to the group: available to every
    /// member now, their delivery not counted. A message whose lock ran
    /// out meanwhile is the group's already.
    pub(super) fn give_back_held(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held: Vec<ShareMessage> = self.held.drain(..).collect();
        let records = Self::records(&held);
        match self.member.settle(&records, Action::Return) {
            Ok(()) => {}
            Err(Error::InvalidRecordState(_)) => {
                // Some locks ran out: give back the others one by one.
                for r in &records {
                    let _ = self.member.settle(std::slice::from_ref(r), Action::Return);
                }
            }
            // The group closed, or its state could not be written: the
            // locks run out and the group delivers them again.
            Err(e) => ::log::debug!("giving back held messages: {e}"),
        }
    }
}
