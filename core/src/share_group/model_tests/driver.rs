//! The driver of the model test: the group's glue over the real state
//! decisions and journal, and the model it is checked against (see the
//! parent module).

use super::*;

/// The system under test and its model.
pub(super) struct Sys {
    dir: tempfile::TempDir,
    store: Option<Store>,
    parts: Parts,
    limits: Limits,
    srcs: Vec<Arc<Source>>,
    /// Record offsets per partition.
    logs: Vec<Vec<u64>>,
    /// The next offset of each partition.
    ends: Vec<u64>,
    members: Vec<Member>,
    next_member: u64,
    base: Instant,
    now_ms: u64,
    dlq_fails: bool,
    crash_in_dead_letter: bool,
    /// Died (in a dead-lettering): nothing more is written or sent; the
    /// step ends with a restart.
    dying: bool,
    /// Dead-letter sends of the current call.
    sent: Vec<(u32, u64, u32)>,
    // The model.
    model: BTreeMap<(u32, u64), MRec>,
    /// What the dead-letter topic holds: record and delivery count.
    dlq: BTreeMap<(u32, u64), u32>,
    /// Sent, then the process died before they were stored as archived:
    /// they may be sent again (a duplicate the producer drops).
    resend_ok: BTreeSet<(u32, u64)>,
    acked: BTreeSet<(u32, u64)>,
}

impl Sys {
    pub(super) fn new(setup: &Setup) -> Sys {
        // Compactions and the store's creation sync: in memory when there
        // is a tmpfs.
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let (store, parts) = Store::open(dir.path(), GROUP, 0o600).unwrap();
        assert!(parts.is_empty());
        let topic: Arc<str> = Arc::from(TOPIC);
        let members = setup
            .members
            .iter()
            .enumerate()
            .map(|(i, &(lock_ms, max_poll))| Member::new(i as u64 + 1, lock_ms, max_poll))
            .collect::<Vec<_>>();
        Sys {
            dir,
            store: Some(store),
            parts,
            limits: Limits {
                max_deliveries: setup.max_deliveries,
                max_in_flight: setup.max_in_flight,
            },
            srcs: (0..setup.partitions)
                .map(|p| Arc::new(Source::buffer(&topic, p, Vec::new())))
                .collect(),
            logs: vec![Vec::new(); setup.partitions as usize],
            ends: vec![0; setup.partitions as usize],
            next_member: members.len() as u64 + 1,
            members,
            base: Instant::now(),
            now_ms: 0,
            dlq_fails: false,
            crash_in_dead_letter: false,
            dying: false,
            sent: Vec::new(),
            model: BTreeMap::new(),
            dlq: BTreeMap::new(),
            resend_ok: BTreeSet::new(),
            acked: BTreeSet::new(),
        }
    }

    fn now(&self) -> Instant {
        self.base + Duration::from_millis(self.now_ms)
    }

    fn wall(&self) -> i64 {
        WALL0 + self.now_ms as i64
    }

    fn assigned(&self) -> Vec<(String, u32)> {
        (0..self.srcs.len() as u32).map(key).collect()
    }

    // ---- The group (group.rs), over the synthetic clock. ----

    /// `ShareGroup::begin`.
    fn begin(&self, id: u64, lock_ms: u64) -> (Delivery, Instant) {
        let now = self.now();
        let to = Delivery {
            member: id,
            deadline: now + Duration::from_millis(lock_ms),
            now_ms: self.wall(),
        };
        (to, now)
    }

    /// `group::append` (a dead process writes nothing).
    fn append(&mut self, ops: &Ops) -> u64 {
        if self.dying {
            return 0;
        }
        self.store.as_mut().unwrap().append(ops).unwrap()
    }

    /// `ShareGroup::prepare` (without `next_due`).
    fn prepare(
        &mut self,
        id: u64,
        assigned: &[(String, u32)],
        max: usize,
        lock_ms: u64,
    ) -> Prepared {
        let (to, now) = self.begin(id, lock_ms);
        let limits = self.limits;
        let mut out = Prepared::default();
        let mut ops = Ops::new(None);
        let mut decided: Vec<((String, u32), Vec<Change>)> = Vec::new();
        let mut taken = 0usize;
        for key in assigned {
            let Some(part) = self.parts.get_mut(key) else {
                out.positions.push((key.clone(), None, false));
                continue;
            };
            let expired = part.expired(now, limits);
            out.expired += expired.len() as u64;
            part.apply(expired);
            let changes = part.redeliverable(to, max.saturating_sub(taken), limits);
            if !changes.is_empty() {
                taken += changes.len();
                ops.changes(&key.0, key.1, &changes);
                decided.push((key.clone(), changes));
            }
        }
        start_ops(&mut self.parts, &mut ops);
        self.append(&ops);
        mark_starts_stored(&mut self.parts);
        for (key, changes) in decided {
            for c in &changes {
                if let (State::Acquired { member, .. }, Some(m)) = (c.entry.state, &c.entry.message)
                {
                    if member != id {
                        continue;
                    }
                    out.delivered.push((m.clone(), c.entry.count));
                }
            }
            if let Some(p) = self.parts.get_mut(&key) {
                p.apply(changes.clone());
            }
            out.dead_lettered += self.settle_dead_letters(&key, &changes);
        }
        for key in assigned {
            let Some(p) = self.parts.get_mut(key) else {
                continue;
            };
            p.advance();
            out.positions
                .push((key.clone(), Some(p.next), p.window_full(limits)));
        }
        out
    }

    /// `ShareGroup::take_read`.
    fn take_read(
        &mut self,
        id: u64,
        reads: Vec<PartRead>,
        max: usize,
        lock_ms: u64,
    ) -> (Vec<Delivered>, u64) {
        let (to, _) = self.begin(id, lock_ms);
        let limits = self.limits;
        let mut ops = Ops::new(None);
        let mut decided = Vec::new();
        let mut taken = 0usize;
        for (key, start, messages) in reads {
            let Some(first) = messages.first().map(Message::offset) else {
                continue;
            };
            let part = self
                .parts
                .entry(key.clone())
                .or_insert_with(|| Part::at(start.unwrap_or(first)));
            let (changes, next) = part.read(to, start, &messages, max - taken, limits);
            taken += changes
                .iter()
                .filter(|c| matches!(c.entry.state, State::Acquired { member, .. } if member == id))
                .count();
            ops.changes(&key.0, key.1, &changes);
            decided.push((key, changes, next));
        }
        start_ops(&mut self.parts, &mut ops);
        self.append(&ops);
        mark_starts_stored(&mut self.parts);
        let mut delivered = Vec::new();
        let mut dead_lettered = 0;
        for (key, changes, next) in decided {
            for c in &changes {
                if let (State::Acquired { member, .. }, Some(m)) = (c.entry.state, &c.entry.message)
                {
                    if member != id {
                        continue;
                    }
                    delivered.push((m.clone(), c.entry.count));
                }
            }
            if let Some(p) = self.parts.get_mut(&key) {
                p.apply(changes.clone());
                p.next = p.next.max(next);
            }
            dead_lettered += self.settle_dead_letters(&key, &changes);
            if let Some(p) = self.parts.get_mut(&key) {
                p.advance();
            }
        }
        (delivered, dead_lettered)
    }

    /// `ShareGroup::settle` (the partitions in order, for a deterministic
    /// test).
    fn settle(&mut self, id: u64, records: &[(u32, u64, u32)], action: &Action) -> Settled {
        let now = self.now();
        for &(p, o, count) in records {
            let held = self
                .parts
                .get(&key(p))
                .and_then(|part| part.entries.get(&o))
                .is_some_and(|e| {
                    e.count == count
                        && matches!(e.state, State::Acquired { member, deadline }
                            if member == id && deadline > now)
                });
            if !held {
                return Settled::Refused;
            }
        }
        let mut by_part: BTreeMap<(String, u32), Vec<Change>> = BTreeMap::new();
        for &(p, o, _) in records {
            let key = key(p);
            let Some(e) = self.parts.get(&key).and_then(|part| part.entries.get(&o)) else {
                continue;
            };
            let entry = match action {
                Action::Ack => Entry {
                    state: State::Acked,
                    count: e.count,
                    message: None,
                },
                Action::Release { delay_ms } => Entry {
                    state: State::Available {
                        not_before_ms: if *delay_ms == 0 {
                            0
                        } else {
                            self.wall()
                                .saturating_add(i64::try_from(*delay_ms).unwrap_or(i64::MAX))
                                .saturating_add(1)
                        },
                    },
                    ..e.clone()
                },
                Action::Reject { .. } => Entry {
                    state: State::DeadLettering,
                    ..e.clone()
                },
                Action::Renew { lock } => Entry {
                    state: State::Acquired {
                        member: id,
                        deadline: now + *lock,
                    },
                    ..e.clone()
                },
                Action::Return => Entry {
                    state: State::Available { not_before_ms: 0 },
                    count: e.count.saturating_sub(1),
                    ..e.clone()
                },
            };
            by_part
                .entry(key)
                .or_default()
                .push(Change { offset: o, entry });
        }
        let mut ops = Ops::new(None);
        for (key, changes) in &mut by_part {
            changes.sort_by_key(|c| c.offset);
            // (Exclusive mode.)
            let stored = match action {
                Action::Ack | Action::Reject { .. } | Action::Return => true,
                Action::Release { delay_ms } => *delay_ms > 0,
                Action::Renew { .. } => false,
            };
            if stored {
                ops.changes(&key.0, key.1, changes);
            }
        }
        start_ops(&mut self.parts, &mut ops);
        self.append(&ops);
        mark_starts_stored(&mut self.parts);
        for (key, changes) in &by_part {
            if let Some(p) = self.parts.get_mut(key) {
                p.apply(changes.clone());
            }
        }
        let mut send_failed = false;
        if let Action::Reject { .. } = action {
            for (key, changes) in &by_part {
                if self.dead_letter(key, changes).is_err() {
                    send_failed = true;
                }
            }
        }
        for key in by_part.keys() {
            if let Some(p) = self.parts.get_mut(key) {
                p.advance();
            }
        }
        if send_failed {
            Settled::SendFailed
        } else {
            Settled::Done
        }
    }

    /// `ShareGroup::settle_dead_letters`.
    fn settle_dead_letters(&mut self, key: &(String, u32), changes: &[Change]) -> u64 {
        let dead: Vec<Change> = changes
            .iter()
            .filter(|c| c.entry.state == State::DeadLettering)
            .cloned()
            .collect();
        if dead.is_empty() {
            return 0;
        }
        self.dead_letter(key, &dead).unwrap_or(0)
    }

    /// `ShareGroup::dead_letter`, sending to the sink; dies after the sends
    /// when asked to.
    fn dead_letter(&mut self, key: &(String, u32), changes: &[Change]) -> Result<u64, ()> {
        let mut archived = Vec::new();
        let mut failed = false;
        for c in changes {
            let Some(m) = &c.entry.message else { continue };
            if self.dying || self.dlq_fails {
                failed = true;
                break;
            }
            self.sent.push((m.partition(), m.offset(), c.entry.count));
            archived.push(Change {
                offset: c.offset,
                entry: Entry {
                    state: State::Archived,
                    count: c.entry.count,
                    message: None,
                },
            });
        }
        let n = archived.len() as u64;
        if !archived.is_empty() {
            if self.crash_in_dead_letter {
                // The process dies before storing them as archived.
                self.crash_in_dead_letter = false;
                self.dying = true;
                for c in &archived {
                    self.resend_ok.insert((key.1, c.offset));
                }
                return Err(());
            }
            let mut ops = Ops::new(None);
            ops.changes(&key.0, key.1, &archived);
            self.append(&ops);
            if let Some(p) = self.parts.get_mut(key) {
                p.apply(archived);
            }
        }
        if failed {
            Err(())
        } else {
            Ok(n)
        }
    }

    /// `ShareGroup::maybe_compact`, whatever the file's size.
    fn compact(&mut self) {
        // Never empty in the group (a file past 1 MiB holds partitions);
        // an empty rewrite would end the file's records there.
        if self.parts.is_empty() {
            return;
        }
        let mut ops = Ops::whole(None);
        for ((t, p), part) in &self.parts {
            ops.start(t, *p, part.start);
            let changes: Vec<Change> = part
                .entries
                .iter()
                .map(|(o, e)| Change {
                    offset: *o,
                    entry: e.clone(),
                })
                .collect();
            ops.changes(t, *p, &changes);
        }
        self.store.as_mut().unwrap().rewrite(&ops).unwrap();
    }

    // ---- The member (mod.rs) and its reader. ----

    /// `ShareConsumer::place_reader`.
    fn place_reader(&mut self, mi: usize, positions: &[((String, u32), Option<u64>, bool)]) {
        let m = &mut self.members[mi];
        for (key, next, full) in positions {
            if *full {
                if m.paused.insert(key.clone()) {
                    m.reader_paused.insert(key.1);
                }
                continue;
            }
            if m.paused.remove(key) {
                m.reader_paused.remove(&key.1);
            }
            let Some(next) = *next else { continue };
            if m.positions.get(key) == Some(&next) {
                continue;
            }
            m.reader_pos.insert(key.1, next);
            m.positions.insert(key.clone(), next);
        }
    }

    /// The reader's poll: up to `max` records from the partitions not
    /// paused, from where it is (the log's start at first), the partitions
    /// taken in turn.
    fn read_log(&mut self, mi: usize, max: usize) -> Vec<Message> {
        let n = self.logs.len();
        let m = &mut self.members[mi];
        let mut out = Vec::new();
        for k in 0..n {
            let p = (m.reader_turn + k) % n;
            if m.reader_paused.contains(&(p as u32)) {
                continue;
            }
            let pos = m.reader_pos.get(&(p as u32)).copied().unwrap_or(0);
            for &o in self.logs[p].iter().filter(|&&o| o >= pos) {
                if out.len() >= max {
                    break;
                }
                out.push(message(&self.srcs[p], o));
                m.reader_pos.insert(p as u32, o + 1);
            }
        }
        m.reader_turn += 1;
        out
    }

    /// `ShareConsumer::split_read`.
    fn split_read(&mut self, mi: usize, read: Vec<Message>) -> Vec<PartRead> {
        let positions = &mut self.members[mi].positions;
        let mut by: Vec<PartRead> = Vec::new();
        for m in read {
            let key = (m.topic().to_owned(), m.partition());
            if let Some((_, _, v)) = by.iter_mut().find(|(k, _, _)| *k == key) {
                v.push(m);
            } else {
                let start = positions.get(&key).copied();
                by.push((key, start, vec![m]));
            }
        }
        for (key, _, v) in &by {
            if let Some(last) = v.last() {
                positions.insert(key.clone(), last.offset() + 1);
            }
        }
        by
    }

    /// The first half of a pass of `ShareConsumer::poll`: prepare, place
    /// the reader, read the log. Returns what was delivered, what was read,
    /// and whether anything happened.
    fn pass_begin(&mut self, mi: usize) -> Result<(usize, Vec<PartRead>, bool), String> {
        let (id, lock_ms, max) = {
            let m = &self.members[mi];
            (m.id, m.lock_ms, m.max_poll)
        };
        let assigned = self.assigned();
        let prepared = self.prepare(id, &assigned, max, lock_ms);
        self.on_delivered(mi, &prepared.delivered)?;
        self.on_sent()?;
        let got = prepared.delivered.len();
        self.place_reader(mi, &prepared.positions);
        let mut reads = Vec::new();
        if got < max && !self.dying {
            let read = self.read_log(mi, max);
            if !read.is_empty() {
                reads = self.split_read(mi, read);
            }
        }
        let busy = prepared.expired > 0 || prepared.dead_lettered > 0;
        Ok((got, reads, busy))
    }

    /// Where each partition is: what a pass that changed nothing leaves as
    /// it was.
    fn progress(&self) -> Vec<(u32, u64, u64, usize)> {
        let mut v: Vec<_> = self
            .parts
            .iter()
            .map(|((_, p), part)| (*p, part.start, part.next, part.entries.len()))
            .collect();
        v.sort_unstable();
        v
    }

    /// The second half of a pass: take what was read.
    fn pass_end(&mut self, mi: usize, got: usize, reads: Vec<PartRead>) -> Result<usize, String> {
        if reads.is_empty() || self.dying {
            return Ok(got);
        }
        let (id, lock_ms, max) = {
            let m = &self.members[mi];
            (m.id, m.lock_ms, m.max_poll)
        };
        let (more, _) = self.take_read(id, reads, max - got, lock_ms);
        self.on_delivered(mi, &more)?;
        self.on_sent()?;
        Ok(got + more.len())
    }

    /// `ShareConsumer::poll`: with `wait`, passes until something is
    /// delivered or a pass changes nothing (then nothing may be
    /// deliverable); without, as with a timeout of 0.
    fn poll(&mut self, mi: usize, wait: bool) -> Result<usize, String> {
        let bound = 4 + 2 * self.model.len();
        let mut passes = 0;
        // Passes in a row that changed nothing (the reader takes the
        // partitions in turn: each has one).
        let mut idle = 0;
        loop {
            passes += 1;
            let before = self.progress();
            let (got, reads, busy) = self.pass_begin(mi)?;
            let got = self.pass_end(mi, got, reads)?;
            // A pass that read records it could not take (the window's
            // free offsets hold no records) changes nothing: the poll
            // goes round until its timeout then.
            let busy = busy || self.progress() != before;
            idle = if busy { 0 } else { idle + 1 };
            if got > 0 || self.dying {
                return Ok(got);
            }
            if passes >= 2 && !wait {
                return Ok(0);
            }
            if passes >= 2 && idle >= self.srcs.len() {
                if !self.dlq_fails {
                    self.nothing_deliverable()?;
                }
                return Ok(0);
            }
            ensure!(
                passes < bound,
                "a poll of member {mi} went round {passes} times without delivering or \
                 settling anything"
            );
        }
    }

    fn interleaved(&mut self, a: usize, b: usize) -> Result<(), String> {
        let (got, reads, _) = self.pass_begin(a)?;
        if !self.dying {
            self.poll(b, false)?;
        }
        self.pass_end(a, got, reads)?;
        Ok(())
    }

    fn settle_op(
        &mut self,
        mi: usize,
        from: usize,
        act: Act,
        picks: &[usize],
    ) -> Result<(), String> {
        let handles = &self.members[from].held;
        if handles.is_empty() {
            return Ok(());
        }
        let records: Vec<(u32, u64, u32)> =
            picks.iter().map(|i| handles[i % handles.len()]).collect();
        let (id, lock_ms) = (self.members[mi].id, self.members[mi].lock_ms);
        let action = match act {
            Act::Ack => Action::Ack,
            Act::Release(delay_ms) => Action::Release { delay_ms },
            Act::Reject => Action::Reject {
                reason: "bad".into(),
            },
            Act::Renew => Action::Renew {
                lock: Duration::from_millis(lock_ms),
            },
            Act::Return => Action::Return,
        };
        let valid = records.iter().all(|&(p, o, c)| {
            let r = self.model[&(p, o)];
            r.count == c
                && matches!(r.s, M::Held { member, deadline_ms }
                    if member == id && deadline_ms > self.now_ms)
        });
        let got = self.settle(id, &records, &action);
        if !valid {
            ensure!(
                got == Settled::Refused,
                "member {id} settled {records:?} ({act:?}), which it does not hold: {got:?}"
            );
            // Stale handles go.
            let now_ms = self.now_ms;
            let model = &self.model;
            self.members[from].held.retain(|&(p, o, c)| {
                let r = model[&(p, o)];
                r.count == c && matches!(r.s, M::Held { deadline_ms, .. } if deadline_ms > now_ms)
            });
            return Ok(());
        }
        ensure!(
            got != Settled::Refused,
            "member {id} could not settle {records:?} ({act:?}), which it holds"
        );
        ensure!(
            got == Settled::Done || (matches!(act, Act::Reject) && (self.dlq_fails || self.dying)),
            "{act:?} of {records:?} failed: {got:?}"
        );
        // Each record once (a batch may name one twice).
        let mut once = records.clone();
        once.sort_unstable();
        once.dedup();
        for &(p, o, _) in &once {
            let wall = self.wall();
            let deadline_ms = self.now_ms + lock_ms;
            let r = self.model.get_mut(&(p, o)).unwrap();
            if matches!(act, Act::Return) {
                r.count -= 1;
            }
            r.s = match act {
                Act::Ack => {
                    self.acked.insert((p, o));
                    M::Acked
                }
                Act::Release(0) | Act::Return => M::Avail { not_before_ms: 0 },
                Act::Release(d) => M::Avail {
                    not_before_ms: wall + d as i64 + 1,
                },
                Act::Reject => M::Rejected,
                Act::Renew => M::Held {
                    member: id,
                    deadline_ms,
                },
            };
        }
        if !matches!(act, Act::Renew) {
            self.members[from].held.retain(|h| !records.contains(h));
        }
        self.on_sent()
    }

    fn produce(&mut self, p: u32, n: u64, gap: bool) {
        let Some(log) = self.logs.get_mut(p as usize) else {
            return;
        };
        let end = &mut self.ends[p as usize];
        // Gaps: offsets without a record (transaction markers, records
        // retention deleted), from one offset to wider than the largest
        // window, so that a gap at `next` as wide as the window is
        // passed (it once stalled the partition for good).
        if gap {
            *end += 1 + (n * 7 + *end) % 13;
        }
        for _ in 0..n {
            log.push(*end);
            self.model.insert(
                (p, *end),
                MRec {
                    s: M::Avail { not_before_ms: 0 },
                    count: 0,
                },
            );
            *end += 1;
        }
    }

    fn leave(&mut self, mi: usize) {
        let id = self.members[mi].id;
        for p in self.parts.values_mut() {
            p.release_member(id);
        }
        for r in self.model.values_mut() {
            if matches!(r.s, M::Held { member, .. } if member == id) {
                r.s = M::Avail { not_before_ms: 0 };
            }
        }
        let new = self.next_member;
        self.next_member += 1;
        self.members[mi].restart(new);
    }

    /// The process dies and starts again: the state is read back from the
    /// store, and must be what it was (acquired records counted as
    /// delivered, available again).
    fn crash(&mut self) -> Result<(), String> {
        let before: Vec<((u32, u64), Norm)> = self
            .model
            .keys()
            .map(|&(p, o)| ((p, o), norm(&self.parts, self.limits, p, o)))
            .collect();
        self.store = None;
        self.parts = Parts::new();
        let (store, parts) =
            Store::open(self.dir.path(), GROUP, 0o600).map_err(|e| format!("reopen: {e}"))?;
        self.store = Some(store);
        self.parts = parts;
        self.dying = false;
        self.next_member = 1;
        for i in 0..self.members.len() {
            let id = self.next_member;
            self.next_member += 1;
            self.members[i].restart(id);
        }
        for r in self.model.values_mut() {
            if let M::Held { .. } = r.s {
                r.s = M::Avail { not_before_ms: 0 };
            }
        }
        for ((p, o), b) in before {
            let a = norm(&self.parts, self.limits, p, o);
            ensure!(
                a == b,
                "{p}/{o} was {b:?} before the crash, read back as {a:?}"
            );
        }
        Ok(())
    }

    // ---- The model's checks. ----

    fn exhausted(&self, count: u32) -> bool {
        self.limits.exhausted(count)
    }

    /// The first record of `p` not done (acknowledged or dead-lettered).
    fn first_open(&self, p: u32) -> Option<u64> {
        self.model
            .range((p, 0)..=(p, u64::MAX))
            .find(|(_, r)| !r.done())
            .map(|(&(_, o), _)| o)
    }

    /// Whether the record may be delivered or dead-lettered now.
    fn due(&self, r: MRec) -> bool {
        match r.s {
            M::Avail { not_before_ms } => not_before_ms <= self.wall(),
            M::Held { deadline_ms, .. } => deadline_ms <= self.now_ms,
            M::Rejected => true,
            M::Archived | M::Acked => false,
        }
    }

    /// Records delivered to member `mi`, in order.
    fn on_delivered(&mut self, mi: usize, delivered: &[Delivered]) -> Result<(), String> {
        let id = self.members[mi].id;
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
            if let M::Held { deadline_ms, .. } = r.s {
                ensure!(deadline_ms <= self.now_ms, "delivered while locked: {what}");
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

    /// Dead letters sent by the last call.
    fn on_sent(&mut self) -> Result<(), String> {
        let mut sent = std::mem::take(&mut self.sent);
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
                    self.resend_ok.contains(&(p, o))
                        && (self.dying || self.resend_ok.remove(&(p, o)))
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

    /// After a poll that waited and got nothing: nothing in the window is
    /// deliverable or to be dead-lettered now.
    fn nothing_deliverable(&self) -> Result<(), String> {
        for p in 0..self.srcs.len() as u32 {
            let Some(first) = self.first_open(p) else {
                continue;
            };
            let window = first + self.limits.max_in_flight;
            for (&(_, o), &r) in self.model.range((p, first)..(p, window)) {
                ensure!(
                    !self.due(r),
                    "a poll that waited got nothing, but {p}/{o} is {r:?} (count {}) at {} ms \
                     (window {first}..{window})",
                    r.count,
                    self.now_ms
                );
            }
        }
        Ok(())
    }

    /// The group's state against the model.
    fn check(&self) -> Result<(), String> {
        let now_ms = self.now_ms;
        for (&(p, o), &r) in &self.model {
            let what = format!("{p}/{o} at {now_ms} ms, model {r:?}");
            if self.limits.max_deliveries > 0 {
                ensure!(
                    r.count <= self.limits.max_deliveries,
                    "over the limit: {what}"
                );
            }
            let Some(part) = self.parts.get(&key(p)) else {
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
                ) => member == m && deadline == self.base + Duration::from_millis(deadline_ms),
                (State::Available { not_before_ms: a }, M::Avail { not_before_ms: b }) => a == b,
                // A lock found run out.
                (State::Available { not_before_ms: 0 }, M::Held { deadline_ms, .. }) => {
                    deadline_ms <= now_ms
                }
                (State::DeadLettering, M::Archived) => self.resend_ok.contains(&(p, o)),
                (State::DeadLettering, M::Avail { .. } | M::Held { .. }) => expired_or_due(r),
                _ => false,
            };
            ensure!(ok, "state {:?}: {what}", e.state);
        }
        for ((_, p), part) in &self.parts {
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
        for k in &self.acked {
            ensure!(
                !self.dlq.contains_key(k),
                "{k:?} acknowledged and dead-lettered"
            );
        }
        Ok(())
    }

    pub(super) fn step(&mut self, op: &Op) -> Result<(), String> {
        let n = self.members.len();
        match op {
            Op::Poll { m, wait } => {
                self.poll(m % n, *wait)?;
            }
            Op::Interleaved { a, b } => {
                if a % n != b % n {
                    self.interleaved(a % n, b % n)?;
                }
            }
            Op::Settle {
                m,
                from,
                act,
                picks,
            } => self.settle_op(m % n, from % n, *act, picks)?,
            Op::Tick(ms) => self.now_ms += ms,
            Op::Produce { p, n, gap } => self.produce(*p, *n, *gap),
            Op::Crash => self.crash()?,
            Op::CrashInDeadLetter => self.crash_in_dead_letter = true,
            Op::DeadLetterFails(f) => self.dlq_fails = *f,
            Op::Leave(m) => self.leave(m % n),
            Op::Compact => self.compact(),
        }
        if self.dying {
            self.crash()?;
        }
        self.check()
    }

    /// Delivers, acknowledges or lets run out until nothing is left: then
    /// every record is done, and stays so across a restart.
    pub(super) fn drain(&mut self, acks: bool) -> Result<(), String> {
        self.dlq_fails = false;
        self.crash_in_dead_letter = false;
        let acks = acks || self.limits.max_deliveries == 0;
        let bound = 10 + 8 * self.model.len() * (self.limits.max_deliveries as usize + 1);
        let mut rounds = 0;
        loop {
            rounds += 1;
            ensure!(rounds < bound, "still delivering after {rounds} rounds");
            // Past every lock and delay.
            self.now_ms += 10_000;
            let mut got = 0;
            for mi in 0..self.members.len() {
                got += self.poll(mi, true)?;
                self.check()?;
                if acks {
                    let held = std::mem::take(&mut self.members[mi].held);
                    let live: Vec<(u32, u64, u32)> = held
                        .into_iter()
                        .filter(|&(p, o, c)| {
                            let r = self.model[&(p, o)];
                            r.count == c
                                && matches!(r.s, M::Held { deadline_ms, .. } if deadline_ms > self.now_ms)
                        })
                        .collect();
                    if !live.is_empty() {
                        let (id, from) = (self.members[mi].id, mi);
                        self.members[from].held = live.clone();
                        self.settle_op(mi, from, Act::Ack, &(0..live.len()).collect::<Vec<_>>())?;
                        ensure!(
                            live.iter()
                                .all(|&(p, o, _)| self.model[&(p, o)].s == M::Acked),
                            "member {id} could not acknowledge {live:?}"
                        );
                        self.check()?;
                    }
                }
            }
            if got == 0 {
                break;
            }
        }
        for (&(p, o), r) in &self.model {
            ensure!(r.done(), "drained, but {p}/{o} is {r:?}");
        }
        self.crash()?;
        self.check()?;
        for mi in 0..self.members.len() {
            let got = self.poll(mi, true)?;
            ensure!(got == 0, "{got} delivered after the drain and a restart");
        }
        self.check()
    }
}

/// `group::start_ops`.
fn start_ops(parts: &mut Parts, ops: &mut Ops) {
    for ((t, p), part) in parts.iter() {
        if part.start != part.start_stored {
            ops.start(t, *p, part.start);
        }
    }
}

/// `group::mark_starts_stored`.
fn mark_starts_stored(parts: &mut Parts) {
    for part in parts.values_mut() {
        part.start_stored = part.start;
    }
}
