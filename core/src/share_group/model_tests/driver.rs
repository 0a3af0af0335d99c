//! The driver of the model tests: processes (each the group's engine over
//! its own store and state, `process.rs`), members (the consumer's side
//! of `mod.rs` over a reader of a synthetic log), the operations, and the
//! model they are checked against (the checks are in `check.rs`).

use super::process::{Clock, DlqSink, Proc, LIVENESS_CHECK_MS};
use super::*;

/// Whose a member's model id is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Holder {
    /// Its id in its process's group.
    pub id: u64,
    /// The process.
    pub proc: usize,
    /// Its incarnation (see [`ProcModel::inc`]).
    pub inc: u64,
    /// Its token (shared mode).
    pub token: Option<u64>,
}

/// What the model knows of a process.
#[derive(Debug, Default)]
pub(super) struct ProcModel {
    /// Bumped by each start.
    pub inc: u64,
    /// The id of its next member (`Inner::next_member`).
    pub next_id: u64,
    /// The last step in which it looked whether the holders of records
    /// live, or read the state file whole.
    pub noticed: u64,
    /// Another process rewrote the state file since it last read it.
    pub reread: bool,
    /// When its next poll looks whether the holders of records live
    /// (`release_dead_holders`, at most every `LIVENESS_CHECK`).
    pub next_check_ms: u64,
}

/// The system under test and its model.
pub(super) struct Sys {
    pub(super) dir: tempfile::TempDir,
    pub(super) shared: bool,
    pub(super) procs: Vec<Proc>,
    pub(super) pm: Vec<ProcModel>,
    pub(super) limits: Limits,
    pub(super) srcs: Vec<Arc<Source>>,
    /// Record offsets per partition.
    pub(super) logs: Vec<Vec<u64>>,
    /// The next offset of each partition.
    pub(super) ends: Vec<u64>,
    pub(super) members: Vec<Member>,
    pub(super) next_uid: u64,
    /// Every member's model id given out, and whose it is.
    pub(super) holders: HashMap<u64, Holder>,
    /// The step when each process incarnation `(process, inc)` died.
    pub(super) deaths: HashMap<(usize, u64), u64>,
    pub(super) base: Instant,
    pub(super) now_ms: u64,
    pub(super) sink: DlqSink,
    /// A logical clock of steps, deaths and looks.
    pub(super) seq: u64,
    /// The process whose state is the file's (the last to read it and
    /// write), if it lives.
    pub(super) current: Option<usize>,
    // The model.
    pub(super) model: BTreeMap<(u32, u64), MRec>,
    /// What the dead-letter topic holds: record and delivery count.
    pub(super) dlq: BTreeMap<(u32, u64), u32>,
    /// Sent, then the process died before they were stored as archived:
    /// they may be sent again (a duplicate the producer drops).
    pub(super) resend_ok: BTreeSet<(u32, u64)>,
    pub(super) acked: BTreeSet<(u32, u64)>,
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
        let limits = Limits {
            max_deliveries: setup.max_deliveries,
            max_in_flight: setup.max_in_flight,
        };
        let base = Instant::now();
        let clk = Clock {
            now: base,
            wall: WALL0,
        };
        let procs: Vec<Proc> = (0..setup.procs.max(1))
            .map(|_| Proc::open(dir.path(), limits, setup.shared, clk))
            .collect();
        assert!(procs.iter().all(|p| p.engine.parts.is_empty()));
        let topic: Arc<str> = Arc::from(TOPIC);
        let mut sys = Sys {
            dir,
            shared: setup.shared,
            pm: procs
                .iter()
                .map(|_| ProcModel {
                    next_id: 1,
                    ..ProcModel::default()
                })
                .collect(),
            current: Some(procs.len() - 1),
            procs,
            limits,
            srcs: (0..setup.partitions)
                .map(|p| Arc::new(Source::buffer(&topic, p, Vec::new())))
                .collect(),
            logs: vec![Vec::new(); setup.partitions as usize],
            ends: vec![0; setup.partitions as usize],
            next_uid: 1,
            members: Vec::new(),
            holders: HashMap::new(),
            deaths: HashMap::new(),
            base,
            now_ms: 0,
            sink: DlqSink::default(),
            seq: 0,
            model: BTreeMap::new(),
            dlq: BTreeMap::new(),
            resend_ok: BTreeSet::new(),
            acked: BTreeSet::new(),
        };
        for (i, &(lock_ms, max_poll)) in setup.members.iter().enumerate() {
            let pi = i % sys.procs.len();
            let (id, uid) = sys.new_member(pi);
            sys.members
                .push(Member::new(id, uid, pi, lock_ms, max_poll));
        }
        sys
    }

    fn clk(&self) -> Clock {
        Clock {
            now: self.base + Duration::from_millis(self.now_ms),
            wall: self.wall(),
        }
    }

    pub(super) fn wall(&self) -> i64 {
        WALL0 + self.now_ms as i64
    }

    fn assigned(&self) -> Vec<(String, u32)> {
        (0..self.srcs.len() as u32).map(key).collect()
    }

    /// Whether member `mi`'s process lives.
    fn active(&self, mi: usize) -> bool {
        self.procs[self.members[mi].proc].alive()
    }

    /// A new member of process `pi` (`ShareGroup::join`): its id there,
    /// and in the model.
    fn new_member(&mut self, pi: usize) -> (u64, u64) {
        let id = self.pm[pi].next_id;
        self.pm[pi].next_id += 1;
        let uid = self.next_uid;
        self.next_uid += 1;
        let h = Holder {
            id,
            proc: pi,
            inc: self.pm[pi].inc,
            token: self.procs[pi].owner,
        };
        self.holders.insert(uid, h);
        (id, uid)
    }

    // ---- Processes. ----

    /// Before a call of process `pi` that takes the state file's lock and
    /// reads what the others wrote: what it learns then.
    fn entering(&mut self, pi: usize) {
        if self.pm[pi].reread {
            self.pm[pi].reread = false;
            self.pm[pi].noticed = self.seq;
        }
        self.current = Some(pi);
    }

    /// Process `pi` dies (`kill -9`): its `.live` file and the lock go,
    /// the records it holds stay held (counted) for the others to take.
    fn kill(&mut self, pi: usize) {
        if !self.procs[pi].alive() {
            return;
        }
        self.procs[pi].kill();
        self.deaths.insert((pi, self.pm[pi].inc), self.seq);
        self.seq += 1;
        for m in &mut self.members {
            if m.proc == pi {
                m.held.clear();
            }
        }
        if self.current == Some(pi) {
            self.current = None;
        }
    }

    /// Process `pi` starts (again): a new token, its members new, the
    /// state read back.
    fn start(&mut self, pi: usize) -> Result<(), String> {
        self.kill(pi);
        self.pm[pi].inc += 1;
        self.pm[pi].next_id = 1;
        self.pm[pi].reread = false;
        self.pm[pi].noticed = self.seq;
        self.pm[pi].next_check_ms = self.now_ms;
        self.procs[pi] = Proc::open(self.dir.path(), self.limits, self.shared, self.clk());
        for mi in 0..self.members.len() {
            if self.members[mi].proc == pi {
                let ids = self.new_member(pi);
                self.members[mi].restart(ids);
            }
        }
        self.current = Some(pi);
        self.check_view(&self.procs[pi].engine.parts, Some(pi))
            .map_err(|e| format!("process {pi} read back: {e}"))
    }

    /// Every process dies and starts again. In exclusive mode (one
    /// process), the state read back must be what it was (acquired records
    /// counted as delivered, available again).
    fn crash(&mut self) -> Result<(), String> {
        let before: Vec<((u32, u64), Norm)> = if self.shared {
            Vec::new()
        } else {
            self.model
                .keys()
                .map(|&(p, o)| ((p, o), norm(&self.procs[0].engine.parts, self.limits, p, o)))
                .collect()
        };
        for pi in 0..self.procs.len() {
            self.kill(pi);
        }
        if !self.shared {
            for r in self.model.values_mut() {
                if let M::Held { .. } = r.s {
                    r.s = M::Avail { not_before_ms: 0 };
                }
            }
        }
        for pi in 0..self.procs.len() {
            self.start(pi)?;
        }
        for ((p, o), b) in before {
            let a = norm(&self.procs[0].engine.parts, self.limits, p, o);
            ensure!(
                a == b,
                "{p}/{o} was {b:?} before the crash, read back as {a:?}"
            );
        }
        Ok(())
    }

    /// Shared mode: the state as a process that opens the group now reads
    /// it.
    fn reopen_check(&mut self) -> Result<(), String> {
        if !self.shared {
            return Ok(());
        }
        let (store, parts) = Store::open_shared(self.dir.path(), GROUP, 0o600, 1)
            .map_err(|e| format!("open: {e}"))?;
        drop(store);
        self.check_view(&parts, None)
            .map_err(|e| format!("read back by a new process: {e}"))
    }

    fn compact(&mut self, pi: usize) {
        if !self.procs[pi].alive() {
            return;
        }
        self.entering(pi);
        let clk = self.clk();
        self.procs[pi].compact(clk);
        for (q, pm) in self.pm.iter_mut().enumerate() {
            if q != pi && self.procs[q].alive() {
                pm.reread = true;
            }
        }
    }

    fn look(&mut self, pi: usize) {
        if !self.procs[pi].alive() {
            return;
        }
        self.entering(pi);
        let clk = self.clk();
        self.procs[pi].look(clk);
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
        let (id, pi, lock_ms, max) = {
            let m = &self.members[mi];
            (m.id, m.proc, m.lock_ms, m.max_poll)
        };
        let assigned = self.assigned();
        self.entering(pi);
        if self.shared && self.now_ms >= self.pm[pi].next_check_ms {
            // It looks whether the holders of records live.
            self.pm[pi].noticed = self.seq;
            self.pm[pi].next_check_ms = self.now_ms + LIVENESS_CHECK_MS;
        }
        let clk = self.clk();
        let prepared = self.procs[pi].prepare(clk, &mut self.sink, id, &assigned, max, lock_ms);
        self.on_delivered(mi, &prepared.delivered)?;
        self.on_sent(pi)?;
        let got = prepared.delivered.len();
        self.place_reader(mi, &prepared.positions);
        let mut reads = Vec::new();
        if got < max && !self.procs[pi].dying {
            let read = self.read_log(mi, max);
            if !read.is_empty() {
                reads = self.split_read(mi, read);
            }
        }
        let busy = prepared.expired > 0 || prepared.dead_lettered > 0;
        Ok((got, reads, busy))
    }

    /// Where each partition is for process `pi`: what a pass that changed
    /// nothing leaves as it was.
    fn progress(&self, pi: usize) -> Vec<(u32, u64, u64, usize)> {
        let mut v: Vec<_> = self.procs[pi]
            .engine
            .parts
            .iter()
            .map(|((_, p), part)| (*p, part.start, part.next, part.entries.len()))
            .collect();
        v.sort_unstable();
        v
    }

    /// The second half of a pass: take what was read.
    fn pass_end(&mut self, mi: usize, got: usize, reads: Vec<PartRead>) -> Result<usize, String> {
        let (id, pi, lock_ms, max) = {
            let m = &self.members[mi];
            (m.id, m.proc, m.lock_ms, m.max_poll)
        };
        if reads.is_empty() || self.procs[pi].dying || !self.procs[pi].alive() {
            return Ok(got);
        }
        self.entering(pi);
        let clk = self.clk();
        let (more, _) =
            self.procs[pi].take_read(clk, &mut self.sink, id, reads, max - got, lock_ms);
        self.on_delivered(mi, &more)?;
        self.on_sent(pi)?;
        Ok(got + more.len())
    }

    /// `ShareConsumer::poll`: with `wait`, passes until something is
    /// delivered or a pass changes nothing (then nothing may be
    /// deliverable); without, as with a timeout of 0.
    pub(super) fn poll(&mut self, mi: usize, wait: bool) -> Result<usize, String> {
        let pi = self.members[mi].proc;
        let bound = 4 + 2 * self.model.len();
        let mut passes = 0;
        // Passes in a row that changed nothing (the reader takes the
        // partitions in turn: each has one).
        let mut idle = 0;
        loop {
            passes += 1;
            let before = self.progress(pi);
            let (got, reads, busy) = self.pass_begin(mi)?;
            let got = self.pass_end(mi, got, reads)?;
            // A pass that read records it could not take (the window's
            // free offsets hold no records) changes nothing: the poll
            // goes round until its timeout then.
            let busy = busy || self.progress(pi) != before;
            idle = if busy { 0 } else { idle + 1 };
            if got > 0 || self.procs[pi].dying {
                return Ok(got);
            }
            if passes >= 2 && !wait {
                return Ok(0);
            }
            if passes >= 2 && idle >= self.srcs.len() {
                if !self.sink.fails {
                    self.nothing_deliverable(pi)?;
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

    /// Member `a` prepares and reads the log, then `b` (of the same process
    /// or another) polls (and its process compacts), then `a` takes what
    /// it read.
    fn interleaved(&mut self, a: usize, b: usize, compact: bool) -> Result<(), String> {
        let (got, reads, _) = self.pass_begin(a)?;
        if !self.procs[self.members[a].proc].dying {
            self.poll(b, false)?;
            let pb = self.members[b].proc;
            if compact && !self.procs[pb].dying {
                self.compact(pb);
            }
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
        let (id, uid, pi, lock_ms) = {
            let m = &self.members[mi];
            (m.id, m.uid, m.proc, m.lock_ms)
        };
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
        self.entering(pi);
        let valid = records.iter().all(|&(p, o, c)| {
            let r = self.model[&(p, o)];
            r.count == c
                && matches!(r.s, M::Held { member, deadline_ms }
                    if member == uid && deadline_ms > self.now_ms)
        });
        let clk = self.clk();
        let got = self.procs[pi].settle(clk, &mut self.sink, id, &records, &action);
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
            got == Settled::Done
                || (matches!(act, Act::Reject) && (self.sink.fails || self.procs[pi].dying)),
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
                    member: uid,
                    deadline_ms,
                },
            };
        }
        if !matches!(act, Act::Renew) {
            self.members[from].held.retain(|h| !records.contains(h));
        }
        self.on_sent(pi)
    }

    fn produce(&mut self, p: u32, n: u64, gap: bool) {
        let Some(log) = self.logs.get_mut(p as usize) else {
            return;
        };
        let end = &mut self.ends[p as usize];
        // Gaps: offsets without a record (transaction markers, records
        // retention deleted), from one offset to wider than the largest
        // window, so that a gap at `next` as wide as the window is
        // passed (a partition must not stall on it).
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
        let (id, uid, pi) = {
            let m = &self.members[mi];
            (m.id, m.uid, m.proc)
        };
        if self.shared {
            self.entering(pi);
        }
        let clk = self.clk();
        self.procs[pi].leave(clk, id);
        // Its records are available again, stored so in shared mode; a
        // record whose lock ran out may be stored as still acquired (its
        // process found it run out), which is the same.
        let now_ms = self.now_ms;
        for r in self.model.values_mut() {
            let live = matches!(r.s, M::Held { member, deadline_ms }
                if member == uid && deadline_ms > now_ms);
            if live {
                r.s = M::Avail { not_before_ms: 0 };
            }
        }
        let ids = self.new_member(pi);
        self.members[mi].restart(ids);
    }

    pub(super) fn step(&mut self, op: &Op) -> Result<(), String> {
        self.seq += 1;
        let n = self.members.len();
        let np = self.procs.len();
        match op {
            Op::Poll { m, wait } => {
                if self.active(m % n) {
                    self.poll(m % n, *wait)?;
                }
            }
            Op::Interleaved { a, b, compact } => {
                if a % n != b % n && self.active(a % n) && self.active(b % n) {
                    self.interleaved(a % n, b % n, *compact)?;
                }
            }
            Op::Settle {
                m,
                from,
                act,
                picks,
            } => {
                if self.active(m % n) {
                    self.settle_op(m % n, from % n, *act, picks)?;
                }
            }
            Op::Tick(ms) => self.now_ms += ms,
            Op::Produce { p, n, gap } => self.produce(*p, *n, *gap),
            Op::Crash => self.crash()?,
            Op::Kill(p) => {
                // One process at least lives.
                if self.procs.iter().filter(|q| q.alive()).count() > 1 {
                    self.kill(p % np);
                }
            }
            Op::Restart(p) => self.start(p % np)?,
            Op::Look(p) => self.look(p % np),
            Op::Reopen => self.reopen_check()?,
            Op::CrashInDeadLetter => self.sink.crash_next = true,
            Op::DeadLetterFails(f) => self.sink.fails = *f,
            Op::Leave(m) => {
                if self.active(m % n) {
                    self.leave(m % n);
                }
            }
            Op::Compact(p) => self.compact(p % np),
        }
        for pi in 0..np {
            if self.procs[pi].dying {
                if self.shared {
                    self.kill(pi);
                } else {
                    self.crash()?;
                }
            }
        }
        self.check()
    }

    /// Delivers, acknowledges or lets run out until nothing is left: then
    /// every record is done, and stays so across a restart. In shared mode
    /// the records dead processes hold come back first, their locks not
    /// run out, then the dead processes start again.
    pub(super) fn drain(&mut self, acks: bool) -> Result<(), String> {
        self.sink.fails = false;
        self.sink.crash_next = false;
        let acks = acks || self.limits.max_deliveries == 0;
        if self.shared {
            // Every process looks at the holders: each member takes
            // until it gets nothing, then nothing a dead process holds is
            // left in the window.
            self.now_ms += LIVENESS_CHECK_MS;
            for mi in 0..self.members.len() {
                let mut polls = 0;
                while self.active(mi) && self.poll(mi, true)? > 0 {
                    self.check()?;
                    polls += 1;
                    ensure!(
                        polls <= self.model.len(),
                        "member {mi} polled {polls} times"
                    );
                }
            }
            for pi in 0..self.procs.len() {
                if !self.procs[pi].alive() {
                    self.start(pi)?;
                }
            }
        }
        // Past every lock and delay (in steps of 100 ms).
        let longest = self.members.iter().map(|m| m.lock_ms).max().unwrap_or(0);
        let tick = (longest + 2000).max(10_000).div_ceil(100) * 100;
        let bound = 10 + 8 * self.model.len() * (self.limits.max_deliveries as usize + 1);
        let mut rounds = 0;
        loop {
            rounds += 1;
            ensure!(rounds < bound, "still delivering after {rounds} rounds");
            self.now_ms += tick;
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
                        let (id, from) = (self.members[mi].uid, mi);
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
        self.reopen_check()?;
        for mi in 0..self.members.len() {
            let got = self.poll(mi, true)?;
            ensure!(got == 0, "{got} delivered after the drain and a restart");
        }
        self.check()
    }
}
