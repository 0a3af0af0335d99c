//! A process of the model tests: the share group's [`Engine`] (what
//! `ShareGroup` runs on) over its own store, called with the synthetic
//! clock ([`Clock`]) and the model's dead-letter sink ([`DlqSink`]), and,
//! in shared mode, its process token (its `procs/<token>.live`).

use std::path::Path;

use super::super::engine::{DeadLetterSink, Engine, Env, LIVENESS_CHECK};
use super::*;
use crate::error::{Error, Result};
use crate::shared::ProcessSlot;

/// The engine's `LIVENESS_CHECK`, in ms.
pub(super) const LIVENESS_CHECK_MS: u64 = LIVENESS_CHECK.as_millis() as u64;

/// The clock as a call of the group reads it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    /// `Instant::now()`.
    pub now: Instant,
    /// `clock::now_ms()` (wall clock, ms since the epoch).
    pub wall: i64,
}

impl Env for Clock {
    fn check_open(&self) -> Result<()> {
        Ok(())
    }

    fn now(&self) -> Instant {
        self.now
    }

    fn wall_ms(&self) -> i64 {
        self.wall
    }
}

/// The dead-letter topic (its named producer drops duplicates) and its
/// faults, shared by the processes.
#[derive(Debug, Default)]
pub(super) struct DlqSink {
    /// Sends fail (the topic cannot be written).
    pub fails: bool,
    /// The next process to dead-letter records dies after the sends,
    /// before it stores them as archived.
    pub crash_next: bool,
    /// What the current call sent: record and delivery count.
    pub sent: Vec<(u32, u64, u32)>,
    /// Sent by a process that died before storing them as archived.
    pub unarchived: Vec<(u32, u64)>,
}

/// The error of a send the sink's faults fail.
fn send_failed() -> Error {
    Error::Closed("dead-letter topic")
}

/// The sink as one call of a process sends to it: once the process died
/// (after sends, before archiving them), nothing more is sent.
struct CallSink<'a> {
    sink: &'a mut DlqSink,
    dying: &'a mut bool,
    /// Records sent since the last flush.
    batch: Vec<(u32, u64)>,
}

impl DeadLetterSink for CallSink<'_> {
    fn send(&mut self, m: &Message, count: u32, _reason: &str) -> Result<()> {
        if *self.dying || self.sink.fails {
            return Err(send_failed());
        }
        self.sink.sent.push((m.partition(), m.offset(), count));
        self.batch.push((m.partition(), m.offset()));
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let batch = std::mem::take(&mut self.batch);
        if self.sink.crash_next {
            // The process dies before storing them as archived.
            self.sink.crash_next = false;
            *self.dying = true;
            self.sink.unarchived.extend(batch);
            return Err(send_failed());
        }
        Ok(())
    }
}

/// One process's share group.
#[derive(Debug)]
pub(super) struct Proc {
    /// Closed: the process is dead.
    pub engine: Engine,
    /// Shared mode: the process's token.
    pub owner: Option<u64>,
    /// Shared mode: the process's `procs/<token>.live` (dropped when it
    /// dies).
    slot: Option<ProcessSlot>,
    /// Died in the middle of a call: nothing more is sent, and it is
    /// killed at the end of the step.
    pub dying: bool,
}

impl Proc {
    /// A process that opens the group (`Registry::get`): in shared mode it
    /// registers in the directory first (`Broker::open`).
    pub(super) fn open(dir: &Path, limits: Limits, shared: bool, clk: Clock) -> Proc {
        let slot = shared.then(|| ProcessSlot::register(dir, 0o600).unwrap());
        let owner = slot.as_ref().map(ProcessSlot::token);
        let engine = Engine::open(dir, GROUP, 0o600, owner, limits, clk.now).unwrap();
        Proc {
            engine,
            owner,
            slot,
            dying: false,
        }
    }

    /// The process dies (`kill -9`): its file lock and its `.live` file
    /// go.
    pub(super) fn kill(&mut self) {
        self.engine.close();
        self.slot = None;
        self.dying = false;
    }

    pub(super) fn alive(&self) -> bool {
        self.engine.is_open()
    }

    fn sink<'a>(dying: &'a mut bool, sink: &'a mut DlqSink) -> CallSink<'a> {
        CallSink {
            sink,
            dying,
            batch: Vec::new(),
        }
    }

    /// `ShareGroup::backlog`'s look at the state (under the lock, what
    /// other processes wrote read in), without the counting.
    pub(super) fn look(&mut self, clk: Clock) {
        let _op = self.engine.enter(&clk).unwrap();
    }

    /// `ShareGroup::prepare`.
    pub(super) fn prepare(
        &mut self,
        clk: Clock,
        sink: &mut DlqSink,
        id: u64,
        assigned: &[(String, u32)],
        max: usize,
        lock_ms: u64,
    ) -> Prepared {
        let mut sink = Self::sink(&mut self.dying, sink);
        let lock_for = Duration::from_millis(lock_ms);
        self.engine
            .prepare(&clk, &mut sink, id, assigned, max, lock_for)
            .unwrap()
    }

    /// `ShareGroup::take_read`.
    pub(super) fn take_read(
        &mut self,
        clk: Clock,
        sink: &mut DlqSink,
        id: u64,
        reads: Vec<PartRead>,
        max: usize,
        lock_ms: u64,
    ) -> (Vec<Delivered>, u64) {
        let mut sink = Self::sink(&mut self.dying, sink);
        let lock_for = Duration::from_millis(lock_ms);
        let taken = self
            .engine
            .take_read(&clk, &mut sink, id, reads, max, lock_for)
            .unwrap();
        (taken.delivered, taken.dead_lettered)
    }

    /// `ShareGroup::settle` (a rejection not synced first).
    pub(super) fn settle(
        &mut self,
        clk: Clock,
        sink: &mut DlqSink,
        id: u64,
        records: &[(u32, u64, u32)],
        action: &Action,
    ) -> Settled {
        let records: Vec<(&str, u32, u64, u32)> =
            records.iter().map(|&(p, o, c)| (TOPIC, p, o, c)).collect();
        let mut sink = Self::sink(&mut self.dying, sink);
        let got = self
            .engine
            .settle(&clk, id, &records, action, false)
            .and_then(|settling| self.engine.finish_settle(&mut sink, settling));
        match got {
            Ok(_) => Settled::Done,
            Err(Error::InvalidRecordState(_)) => Settled::Refused,
            Err(Error::Closed("dead-letter topic")) => Settled::SendFailed,
            Err(e) => panic!("settling {records:?}: {e}"),
        }
    }

    /// `ShareGroup::leave`, but the group stays open: a new member takes
    /// the place of the one that left.
    pub(super) fn leave(&mut self, clk: Clock, id: u64) {
        self.engine.leave(&clk, id);
    }

    /// The engine's compaction, whatever the file's size, as the end of an
    /// operation (under the lock, what the others wrote read in).
    pub(super) fn compact(&mut self, clk: Clock) {
        let _op = self.engine.enter(&clk).unwrap();
        self.engine.compact().unwrap();
    }
}
