//! The model's checks of the driver's steps: deliveries, dead letters,
//! polls that found nothing, and each process's state against the model.

use super::super::state::{is_foreign, FOREIGN};
use super::driver::Sys;
use super::*;

/// How far a lock deadline read back from the state file may be from the
/// one written: it is stored in whole ms of the monotonic clock (rounded
/// up) and read back against the clocks read again (see `Clock` in
/// `shared.rs`).
const DEADLINE_SLACK: Duration = Duration::from_millis(40);

impl Sys {
    fn exhausted(&self, count: u32) -> bool {
        self.limits.exhausted(count)
    }

    /// The step in which the process of member `m` died, if it did.
    fn holder_dead(&self, m: u64) -> Option<u64> {
        let h = self.holders.get(&m)?;
        self.deaths.get(&(h.proc, h.inc)).copied()
    }

    /// Whether process `pi` knows for sure that member `m`'s process died
    /// (it looked after the death, or read the state file whole).
    fn knows_dead(&self, pi: usize, m: u64) -> bool {
        self.holder_dead(m).is_some_and(|d| self.pm[pi].noticed > d)
    }

    /// The first record of `p` not done (acknowledged or dead-lettered).
    fn first_open(&self, p: u32) -> Option<u64> {
        self.model
            .range((p, 0)..=(p, u64::MAX))
            .find(|(_, r)| !r.done())
            .map(|(&(_, o), _)| o)
    }

    /// Whether the record may be delivered or dead-lettered now (by some
    /// process: one held by a dead process's member may).
    fn due(&self, r: MRec) -> bool {
        match r.s {
            M::Avail { not_before_ms } => not_before_ms <= self.wall(),
            M::Held {
                member,
                deadline_ms,
            } => deadline_ms <= self.now_ms || self.holder_dead(member).is_some(),
            M::Rejected => true,
            M::Archived | M::Acked => false,
        }
    }

    /// Whether process `pi` must deliver or dead-letter the record now.
    fn due_in(&self, pi: usize, r: MRec) -> bool {
        match r.s {
            M::Held {
                member,
                deadline_ms,
            } => deadline_ms <= self.now_ms || self.knows_dead(pi, member),
            _ => self.due(r),
        }
    }

    /// Records delivered to member `mi`, in order.
    pub(super) fn on_delivered(
        &mut self,
        mi: usize,
        delivered: &[Delivered],
    ) -> Result<(), String> {
        let id = self.members[mi].uid;
        let lock_ms = self.members[mi].lock_ms;
        for (m, count) in delivered {
            let (p, o) = (m.partition(), m.offset());
            let first = self.first_open(p);
            let Some(&r) = self.model.get(&(p, o)) else {
                return Err(format!("{p}/{o} delivered, but it is no record"));
            };
            let what = format!(
                "{p}/{o} (delivery {count}) to member {id} at {} ms, being {r:?}",
                self.now_ms
            );
            ensure!(r.s != M::Acked, "acknowledged, delivered again: {what}");
            ensure!(
                !matches!(r.s, M::Archived | M::Rejected),
                "dead-lettered, delivered again: {what}"
            );
            if let M::Held {
                member,
                deadline_ms,
            } = r.s
            {
                ensure!(
                    deadline_ms <= self.now_ms || self.holder_dead(member).is_some(),
                    "delivered while locked to a live member: {what}"
                );
            }
            if let M::Avail { not_before_ms } = r.s {
                ensure!(
                    not_before_ms <= self.wall(),
                    "delivered before its delay: {what}"
                );
            }
            ensure!(
                !self.exhausted(r.count),
                "delivered past max_deliveries: {what}"
            );
            ensure!(*count == r.count + 1, "delivery count not counted: {what}");
            let first = first.unwrap_or(o);
            ensure!(
                o < first + self.limits.max_in_flight,
                "delivered outside the window (first not done {first}): {what}"
            );
            self.model.insert(
                (p, o),
                MRec {
                    s: M::Held {
                        member: id,
                        deadline_ms: self.now_ms + lock_ms,
                    },
                    count: *count,
                },
            );
            let held = &mut self.members[mi].held;
            held.push((p, o, *count));
            if held.len() > HANDLES {
                held.remove(0);
            }
        }
        Ok(())
    }

    /// Dead letters sent by the last call (of process `pi`).
    pub(super) fn on_sent(&mut self, pi: usize) -> Result<(), String> {
        for k in std::mem::take(&mut self.sink.unarchived) {
            self.resend_ok.insert(k);
        }
        let dying = self.procs[pi].dying;
        let mut sent = std::mem::take(&mut self.sink.sent);
        // A batch that names a record twice sends it twice: the dead
        // letters' producer drops the second as a duplicate.
        sent.sort_unstable();
        sent.dedup();
        for (p, o, count) in sent {
            let r = self.model[&(p, o)];
            let what = format!("{p}/{o} (count {count}) sent to the dead letters, being {r:?}");
            ensure!(!self.acked.contains(&(p, o)), "acknowledged: {what}");
            ensure!(r.count == count, "count: {what}");
            let ok = match r.s {
                M::Rejected => true,
                // Sent again after a crash (and not archived yet if this
                // call died too).
                M::Archived => {
                    self.resend_ok.contains(&(p, o)) && (dying || self.resend_ok.remove(&(p, o)))
                }
                M::Avail { .. } | M::Held { .. } => self.exhausted(r.count) && self.due(r),
                M::Acked => false,
            };
            ensure!(ok, "not to be dead-lettered: {what}");
            self.model.insert(
                (p, o),
                MRec {
                    s: M::Archived,
                    count,
                },
            );
            self.dlq.insert((p, o), count);
        }
        Ok(())
    }

    /// After a poll of process `pi` that waited and got nothing: nothing
    /// in the window is deliverable or to be dead-lettered by it now.
    pub(super) fn nothing_deliverable(&self, pi: usize) -> Result<(), String> {
        for p in 0..self.srcs.len() as u32 {
            let Some(first) = self.first_open(p) else {
                continue;
            };
            let window = first + self.limits.max_in_flight;
            for (&(_, o), &r) in self.model.range((p, first)..(p, window)) {
                ensure!(
                    !self.due_in(pi, r),
                    "a poll of process {pi} that waited got nothing, but {p}/{o} is {r:?} \
                     (count {}) at {} ms (window {first}..{window})",
                    r.count,
                    self.now_ms
                );
            }
        }
        Ok(())
    }

    /// Whether a view's acquisition of a record the model says member `m`
    /// holds until `deadline_ms` is right: the member's own process sees
    /// the member and the deadline as decided; any other (and a process
    /// that read it back) sees the holder's process and about the
    /// deadline, unless it knows that process died.
    fn acquired_ok(
        &self,
        viewer: Option<usize>,
        member: u64,
        deadline: Instant,
        m: u64,
        deadline_ms: u64,
    ) -> bool {
        let Some(h) = self.holders.get(&m) else {
            return false;
        };
        let exact = self.base + Duration::from_millis(deadline_ms);
        let own = viewer == Some(h.proc) && self.pm[h.proc].inc == h.inc;
        if own {
            return member == h.id && deadline == exact;
        }
        let Some(token) = h.token else {
            return false;
        };
        let near = deadline.max(exact) - deadline.min(exact) <= DEADLINE_SLACK;
        let known_dead = match viewer {
            Some(v) => self.knows_dead(v, m),
            None => self.holder_dead(m).is_some(),
        };
        member == FOREIGN | token && near && !known_dead
    }

    /// A state (`viewer`: process `viewer`'s, or `None`, a process that
    /// just read it back) against the model.
    pub(super) fn check_view(&self, parts: &Parts, viewer: Option<usize>) -> Result<(), String> {
        let now_ms = self.now_ms;
        for (&(p, o), &r) in &self.model {
            let what = format!("{p}/{o} at {now_ms} ms, model {r:?}");
            if self.limits.max_deliveries > 0 {
                ensure!(
                    r.count <= self.limits.max_deliveries,
                    "over the limit: {what}"
                );
            }
            let Some(part) = parts.get(&key(p)) else {
                ensure!(
                    r.count == 0 && r.s == (M::Avail { not_before_ms: 0 }),
                    "no state of the partition: {what}"
                );
                continue;
            };
            if o < part.start {
                ensure!(r.done(), "start {} passed it: {what}", part.start);
                continue;
            }
            let Some(e) = part.entries.get(&o) else {
                if o < part.next {
                    ensure!(r.done(), "read (next {}) and not known: {what}", part.next);
                } else {
                    ensure!(
                        r.count == 0 && r.s == (M::Avail { not_before_ms: 0 }),
                        "not known: {what}"
                    );
                }
                continue;
            };
            ensure!(e.count == r.count, "count {} in the state: {what}", e.count);
            let expired_or_due = |r: MRec| self.exhausted(r.count) && self.due(r);
            let ok = match (e.state, r.s) {
                (State::Acked, M::Acked)
                | (State::Archived, M::Archived)
                | (State::DeadLettering, M::Rejected) => true,
                (
                    State::Acquired { member, deadline },
                    M::Held {
                        member: m,
                        deadline_ms,
                    },
                ) => self.acquired_ok(viewer, member, deadline, m, deadline_ms),
                (State::Available { not_before_ms: a }, M::Avail { not_before_ms: b }) => a == b,
                // A lock found run out, or its holder's process dead.
                (
                    State::Available { not_before_ms: 0 },
                    M::Held {
                        member,
                        deadline_ms,
                    },
                ) => deadline_ms <= now_ms || self.holder_dead(member).is_some(),
                (State::DeadLettering, M::Archived) => self.resend_ok.contains(&(p, o)),
                (State::DeadLettering, M::Avail { .. } | M::Held { .. }) => expired_or_due(r),
                _ => false,
            };
            ensure!(ok, "state {:?}: {what}", e.state);
        }
        for ((_, p), part) in parts {
            ensure!(
                part.start <= part.next,
                "{p}: start {} past next {}",
                part.start,
                part.next
            );
            for o in part.entries.keys() {
                ensure!(
                    self.model.contains_key(&(*p, *o)),
                    "{p}/{o} has a state but is no record"
                );
            }
        }
        Ok(())
    }

    /// Across the processes that live: no record is locked to two members
    /// at once, and each lock a process's state gives its own member is
    /// the model's.
    fn check_holds(&self) -> Result<(), String> {
        let now = self.base + Duration::from_millis(self.now_ms);
        let mut holds: BTreeMap<(u32, u64), (usize, u64)> = BTreeMap::new();
        for (pi, proc) in self.procs.iter().enumerate() {
            if !proc.alive() {
                continue;
            }
            for ((_, p), part) in &proc.engine.parts {
                for (o, e) in &part.entries {
                    let State::Acquired { member, deadline } = e.state else {
                        continue;
                    };
                    if is_foreign(member) || deadline <= now {
                        continue;
                    }
                    if let Some((q, other)) = holds.insert((*p, *o), (pi, member)) {
                        return Err(format!(
                            "{p}/{o} locked to member {other} of process {q} and to member \
                             {member} of process {pi} at {} ms",
                            self.now_ms
                        ));
                    }
                    let r = self.model.get(&(*p, *o));
                    let held_by = |m: &u64| {
                        self.holders.get(m).is_some_and(|h| {
                            h.id == member && h.proc == pi && h.inc == self.pm[pi].inc
                        })
                    };
                    ensure!(
                        matches!(r, Some(MRec { s: M::Held { member: m, .. }, .. }) if held_by(m)),
                        "{p}/{o} locked to member {member} of process {pi} at {} ms, model {r:?}",
                        self.now_ms
                    );
                }
            }
        }
        Ok(())
    }

    /// After a step: the state of the process that looked at the file
    /// last (the file's state) against the model, and the locks of all.
    pub(super) fn check(&self) -> Result<(), String> {
        if let Some(pi) = self.current {
            self.check_view(&self.procs[pi].engine.parts, Some(pi))
                .map_err(|e| format!("process {pi}: {e}"))?;
        }
        self.check_holds()?;
        for k in &self.acked {
            ensure!(
                !self.dlq.contains_key(k),
                "{k:?} acknowledged and dead-lettered"
            );
        }
        Ok(())
    }
}
