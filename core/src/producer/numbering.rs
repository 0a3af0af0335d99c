//! Automatic numbering of a named producer's records
//! ([`ProducerConfig::initial_sequence`](super::ProducerConfig::initial_sequence)).
//!
//! A record sent without a sequence gets the producer's next one. Numbers
//! must reach each partition in increasing order (a lower one arriving
//! after a higher one would be taken for a duplicate), so a number is taken
//! and its record handed to the send path under one lock, held until the
//! send has written or queued it. A delivery callback that sends from the
//! thread holding it (callbacks run after the record that ran them was
//! placed) numbers its records without taking the lock again.

use std::cell::RefCell;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use super::record::BorrowedRecord;
use crate::error::Result;
use crate::sync::lock;

/// The counter of a producer that numbers its records.
#[derive(Debug)]
pub(super) struct Numbering {
    /// Held while a number is taken and its record sent.
    order: Mutex<()>,
    /// The next number.
    next: AtomicI64,
}

thread_local! {
    /// The numberings whose lock this thread holds (by address).
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks a numbering held by this thread until dropped.
struct Holding(usize);

impl Holding {
    fn new(n: &Numbering) -> Holding {
        let at = std::ptr::from_ref(n) as usize;
        HELD.with(|h| h.borrow_mut().push(at));
        Holding(at)
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&a| a == self.0) {
                h.remove(i);
            }
        });
    }
}

/// What [`Numbering::one`] did.
pub(super) enum Numbered<T> {
    /// It sent the record (numbered) through the closure: the outcome.
    Sent(Result<T>),
    /// The record needs no number (it has one, and this thread already
    /// numbers): send it as it is.
    AsIs,
}

impl Numbering {
    /// A counter starting at `first`.
    pub(super) fn new(first: i64) -> Numbering {
        Numbering {
            order: Mutex::new(()),
            next: AtomicI64::new(first),
        }
    }

    /// The next number (tests and resumption).
    pub(super) fn peek(&self) -> i64 {
        self.next.load(Ordering::Acquire)
    }

    /// Moves the counter to at least `next`.
    pub(super) fn raise(&self, next: i64) {
        self.next.fetch_max(next, Ordering::AcqRel);
    }

    fn held_here(&self) -> bool {
        let at = std::ptr::from_ref(self) as usize;
        HELD.with(|h| h.borrow().contains(&at))
    }

    /// Sends one record through `send`, numbered when it has no sequence
    /// (an explicit one moves the counter past it). A failed send gives its
    /// number back.
    pub(super) fn one<T>(
        &self,
        r: &BorrowedRecord<'_>,
        send: impl FnOnce(&BorrowedRecord<'_>) -> Result<T>,
    ) -> Numbered<T> {
        let nested = self.held_here();
        if nested {
            if let Some(s) = r.sequence {
                self.raise(s.saturating_add(1));
                return Numbered::AsIs;
            }
        }
        let _order = (!nested).then(|| lock(&self.order));
        let _holding = Holding::new(self);
        let before = self.peek();
        let seq = match r.sequence {
            Some(s) => s,
            None => before,
        };
        self.raise(seq.saturating_add(1));
        let after = self.peek();
        let numbered = BorrowedRecord {
            sequence: Some(seq),
            ..*r
        };
        let res = send(&numbered);
        if res.is_err() && self.peek() == after {
            // Nothing was written (and nothing numbered since): the
            // number is free again.
            self.next.store(before, Ordering::Release);
        }
        Numbered::Sent(res)
    }

    /// Sends records through `send`, those without a sequence numbered in
    /// order. Numbers of a failed batch are not given back (some of its
    /// records may be written): a gap, which only a producer with
    /// `strict_sequences` refuses.
    pub(super) fn many<T>(
        &self,
        records: &[BorrowedRecord<'_>],
        send: impl FnOnce(&[BorrowedRecord<'_>]) -> Result<T>,
    ) -> Numbered<T> {
        let nested = self.held_here();
        if nested && records.iter().all(|r| r.sequence.is_some()) {
            for r in records {
                self.raise(r.sequence.unwrap_or(0).saturating_add(1));
            }
            return Numbered::AsIs;
        }
        let _order = (!nested).then(|| lock(&self.order));
        let _holding = Holding::new(self);
        let numbered: Vec<BorrowedRecord<'_>> = records
            .iter()
            .map(|r| {
                let seq = match r.sequence {
                    Some(s) => s,
                    None => self.peek(),
                };
                self.raise(seq.saturating_add(1));
                BorrowedRecord {
                    sequence: Some(seq),
                    ..*r
                }
            })
            .collect();
        Numbered::Sent(send(&numbered))
    }
}
