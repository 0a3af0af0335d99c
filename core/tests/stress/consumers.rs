//! The consumer side: group members (slots) with their rebalance
//! listeners, polling, committing and seeking at random.

use super::*;

/// The rebalance listener of one consumer slot.
pub(crate) struct Listener {
    pub(crate) sh: Arc<Shared>,
    pub(crate) g: usize,
    pub(crate) state: Arc<Mutex<SlotState>>,
    pub(crate) rng: Rng,
}

impl RebalanceListener for Listener {
    fn on_assign(&mut self, c: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        let sh = &self.sh;
        let mut st = lock(&self.state);
        sh.sync_member(self.g, c.member_id(), &mut st);
        let me = c.member_id().unwrap_or("<none>").to_owned();
        for tp in partitions {
            sh.take_ownership(self.g, tp, &me);
            // A new owner starts at the group's committed offset (nothing
            // is retained away here, so "earliest" is 0).
            let start = match c.committed(&tp.0, tp.1) {
                Ok(c) => c.map_or(0, |c| c.offset),
                Err(e) => {
                    sh.violation(format!("committed({}/{}) in on_assign: {e}", tp.0, tp.1));
                    0
                }
            };
            let stint = Stint {
                expected: start,
                reread_until: 0,
                counters: HashMap::new(),
            };
            if st.stints.insert(tp.clone(), stint).is_some() {
                sh.violation(format!(
                    "group {}: {}/{} assigned to {me} twice without a revoke",
                    GROUPS[self.g].name, tp.0, tp.1
                ));
            }
        }
        sh.bump(&sh.ops.assigned, partitions.len() as u64);
    }

    fn on_revoke(&mut self, c: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        let sh = Arc::clone(&self.sh);
        let g = self.g;
        let mut st = lock(&self.state);
        sh.sync_member(g, c.member_id(), &mut st);
        let me = c.member_id().unwrap_or("<none>").to_owned();
        // Manual committers hand over exactly what they processed, half the
        // time (the other half leaves duplicates for the next owner).
        let commit = !GROUPS[g].auto_commit && self.rng.range(0, 2) == 0;
        let mut to_commit = Vec::new();
        for tp in partitions {
            match st.stints.remove(tp) {
                Some(stint) => {
                    match c.position(&tp.0, tp.1) {
                        Ok(p) if p != stint.expected => sh.violation(format!(
                            "group {}: {me} position of {}/{} is {p}, but it was handed everything below {}",
                            GROUPS[g].name, tp.0, tp.1, stint.expected
                        )),
                        Ok(_) => {}
                        Err(e) => sh.violation(format!(
                            "position({}/{}) in on_revoke: {e}",
                            tp.0, tp.1
                        )),
                    }
                    to_commit.push((tp.clone(), stint.expected));
                }
                None => sh.violation(format!(
                    "group {}: {me} revoked {}/{}, which it was never assigned",
                    GROUPS[g].name, tp.0, tp.1
                )),
            }
            sh.release_ownership(g, tp, &me);
        }
        drop(st);
        if commit && !to_commit.is_empty() {
            let offsets: Vec<(&str, u32, u64, &str)> = to_commit
                .iter()
                .map(|((t, p), o)| (t.as_str(), *p, *o, "revoke"))
                .collect();
            match c.commit_offsets(&offsets) {
                Ok(()) => sh.bump(&sh.ops.revoke_commits, 1),
                Err(e) => sh.violation(format!(
                    "group {}: {me} commit in on_revoke of {offsets:?}: {e}",
                    GROUPS[g].name
                )),
            }
        }
        sh.bump(&sh.ops.revoked, partitions.len() as u64);
    }

    fn on_lost(&mut self, c: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        let sh = &self.sh;
        let g = self.g;
        let mut st = lock(&self.state);
        let me = c.member_id().unwrap_or("<none>").to_owned();
        if !GROUPS[g].expiry {
            sh.violation(format!(
                "group {}: {me} lost {partitions:?} but its members never stall",
                GROUPS[g].name
            ));
        }
        if sh.is_member(g, &me) {
            sh.violation(format!(
                "group {}: {me} told it lost {partitions:?} while still a member",
                GROUPS[g].name
            ));
        }
        for tp in partitions {
            if st.stints.remove(tp).is_none() {
                sh.violation(format!(
                    "group {}: {me} lost {}/{}, which it was never assigned",
                    GROUPS[g].name, tp.0, tp.1
                ));
            }
            // Another member may have taken it already.
            let mut owners = lock(&sh.owners);
            if owners.get(&(g, tp.clone())) == Some(&me) {
                owners.remove(&(g, tp.clone()));
            }
            drop(owners);
            // Nothing can be committed for a lost partition.
            match c.commit_offsets(&[(tp.0.as_str(), tp.1, 0, "lost")]) {
                Err(Error::CommitFailed(_)) => {}
                other => sh.violation(format!(
                    "group {}: {me} commit of lost {}/{}: {other:?}",
                    GROUPS[g].name, tp.0, tp.1
                )),
            }
        }
        drop(st);
        sh.bump(&sh.ops.lost_partitions, partitions.len() as u64);
    }
}

/// One consumer thread of a group: joins, polls, and in the run phase
/// leaves, re-subscribes, commits, seeks and stalls at random.
#[allow(clippy::struct_field_names)]
pub(crate) struct Slot {
    pub(crate) sh: Arc<Shared>,
    pub(crate) g: usize,
    pub(crate) slot: usize,
    pub(crate) rng: Rng,
    pub(crate) state: Arc<Mutex<SlotState>>,
    pub(crate) consumer: Option<Consumer>,
    pub(crate) subscribed: bool,
    pub(crate) rejoin_at: Instant,
    /// Messages since the last commit while draining.
    pub(crate) uncommitted: bool,
    /// The last poll returned nothing.
    pub(crate) caught_up: bool,
    /// When the last commit while draining was made.
    pub(crate) last_commit: Instant,
    /// When the next random action of the run phase is due.
    pub(crate) next_chaos: Instant,
}

impl Slot {
    pub(crate) fn run(mut self) {
        while self.sh.phase() != STOP {
            let phase = self.sh.phase();
            if !self.subscribed {
                if phase == RUN && Instant::now() < self.rejoin_at {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                self.join();
                continue;
            }
            self.poll_once();
            if phase == RUN {
                self.chaos();
            } else {
                self.drain_commit();
            }
        }
        self.leave(true);
    }

    pub(crate) fn listener(&mut self) -> Box<dyn RebalanceListener> {
        Box::new(Listener {
            sh: Arc::clone(&self.sh),
            g: self.g,
            state: Arc::clone(&self.state),
            rng: Rng::new(self.rng.next_u64()),
        })
    }

    /// Creates a consumer if there is none, and subscribes it.
    pub(crate) fn join(&mut self) {
        let spec = &GROUPS[self.g];
        let mut listener = None;
        if self.consumer.is_none() {
            let config = ConsumerConfig::group(spec.name)
                .client_id(format!("{}-s{}", spec.name, self.slot))
                .assignment_strategy(spec.strategy)
                .enable_auto_commit(spec.auto_commit)
                .auto_commit_interval_ms(self.rng.range(5, 100))
                .max_poll_records(self.rng.range(1, 300) as usize)
                .max_poll_interval_ms(if spec.expiry { EXPIRY_MS } else { 300_000 });
            match self.sh.mq.consumer(config) {
                Ok(c) => {
                    lock(&self.sh.wakers)[self.slot_index()] = c.waker();
                    self.consumer = Some(c);
                }
                Err(e) => {
                    self.sh.violation(format!("creating a consumer: {e}"));
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            }
            listener = Some(self.listener());
        }
        self.subscribe(listener);
        self.sh.bump(&self.sh.ops.joins, 1);
    }

    pub(crate) fn slot_index(&self) -> usize {
        GROUPS[..self.g].iter().map(|g| g.slots).sum::<usize>() + self.slot
    }

    /// Subscribes (again), with a new listener or keeping the one set.
    pub(crate) fn subscribe(&mut self, listener: Option<Box<dyn RebalanceListener>>) {
        let spec = &GROUPS[self.g];
        let c = self.consumer.as_mut().expect("a consumer");
        lock(&self.state).rejoining = true;
        let res = if spec.pattern {
            c.subscribe_pattern(PATTERN, listener)
        } else {
            match listener {
                Some(l) => c.subscribe_with(&STATIC_TOPICS, l),
                None => c.subscribe(&STATIC_TOPICS),
            }
        };
        let mut st = lock(&self.state);
        self.sh.sync_member(self.g, c.member_id(), &mut st);
        st.rejoining = false;
        drop(st);
        match res {
            Ok(()) => self.subscribed = true,
            Err(e) => self
                .sh
                .violation(format!("group {}: subscribe: {e}", spec.name)),
        }
    }

    /// Closes the consumer (or only unsubscribes it); its partitions must
    /// all have been revoked.
    pub(crate) fn leave(&mut self, close: bool) {
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        let spec = &GROUPS[self.g];
        if close {
            c.close();
            self.sh
                .bump(&self.sh.ops.consumer_rebalances, c.stats().rebalances);
        } else {
            c.unsubscribe();
        }
        {
            let mut st = lock(&self.state);
            self.sh.sync_member(self.g, c.member_id(), &mut st);
            if !st.stints.is_empty() {
                self.sh.violation(format!(
                    "group {}: left still holding {:?} (no on_revoke)",
                    spec.name,
                    st.stints.keys().collect::<Vec<_>>()
                ));
                st.stints.clear();
            }
            st.member = None;
        }
        if !c.assignment().is_empty() {
            self.sh.violation(format!(
                "group {}: after leaving, the consumer still reads {:?}",
                spec.name,
                c.assignment()
            ));
        }
        lock(&self.sh.published).remove(&(self.g, self.slot));
        if close {
            self.consumer = None;
        }
        self.subscribed = false;
    }

    pub(crate) fn poll_once(&mut self) {
        let timeout = Duration::from_millis(self.rng.range(0, 15));
        let c = self.consumer.as_mut().expect("subscribed");
        let res = c.poll(timeout);
        self.sh.bump(&self.sh.ops.polls, 1);
        let mut st = lock(&self.state);
        self.sh.sync_member(self.g, c.member_id(), &mut st);
        match res {
            Ok(msgs) => {
                self.uncommitted |= !msgs.is_empty();
                self.caught_up = msgs.is_empty();
                self.sh.consume(self.g, &mut st, &msgs);
            }
            Err(e) => self
                .sh
                .violation(format!("group {}: poll: {e}", GROUPS[self.g].name)),
        }
        self.sh.check_consistency(self.g, c, &st);
        let mut assignment = c.assignment();
        assignment.sort();
        let published = st.member.clone().map(|m| (m, assignment));
        drop(st);
        let mut p = lock(&self.sh.published);
        match published {
            Some(v) => p.insert((self.g, self.slot), v),
            None => p.remove(&(self.g, self.slot)),
        };
    }

    /// While draining: commit what was consumed. Commits are durable (an
    /// fsync each): while catching up, at most one every 100 ms.
    pub(crate) fn drain_commit(&mut self) {
        let due = self.caught_up || self.last_commit.elapsed() > Duration::from_millis(100);
        if !due || (!self.uncommitted && self.rng.range(0, 20) != 0) {
            return;
        }
        self.uncommitted = false;
        self.last_commit = Instant::now();
        let c = self.consumer.as_mut().expect("subscribed");
        match c.commit() {
            Ok(()) => self.sh.bump(&self.sh.ops.drain_commits, 1),
            Err(e) => self.sh.violation(format!(
                "group {}: commit while draining: {e}",
                GROUPS[self.g].name
            )),
        }
    }

    /// Now and then in the run phase, one random action.
    pub(crate) fn chaos(&mut self) {
        let now = Instant::now();
        if now < self.next_chaos {
            return;
        }
        self.next_chaos = now + Duration::from_millis(self.rng.range(5, 100));
        let spec = &GROUPS[self.g];
        let commit_odds = if spec.auto_commit { 100 } else { 250 };
        match self.rng.range(0, 1000) {
            0..=29 => {
                self.leave(true);
                self.sh.bump(&self.sh.ops.leaves_close, 1);
                self.rejoin_at = Instant::now() + Duration::from_millis(self.rng.range(0, 200));
            }
            30..=44 => {
                self.leave(false);
                self.sh.bump(&self.sh.ops.leaves_unsubscribe, 1);
                self.rejoin_at = Instant::now() + Duration::from_millis(self.rng.range(0, 200));
            }
            45..=64 => {
                self.subscribe(None);
                self.sh.bump(&self.sh.ops.resubscribes, 1);
            }
            65..=84 => self.bad_commits(),
            85..=184 => self.commit_some(),
            185..=304 => self.seek_back(false),
            305..=319 => self.seek_back(true),
            320..=339 => self.bad_seeks(),
            340..=389 => std::thread::sleep(Duration::from_millis(self.rng.range(10, 60))),
            390..=394 if spec.expiry => {
                self.sh.bump(&self.sh.ops.stalls, 1);
                std::thread::sleep(Duration::from_millis(
                    self.rng.range(STALL_MS.0, STALL_MS.1),
                ));
            }
            r if (400..400 + commit_odds).contains(&r) => self.commit_all(),
            _ => {}
        }
    }

    /// An owned partition and the offset this consumer must be handed next.
    pub(crate) fn pick_owned(&mut self) -> Option<(Tp, u64)> {
        let st = lock(&self.state);
        if st.stints.is_empty() {
            return None;
        }
        let i = self.rng.range(0, st.stints.len() as u64) as usize;
        st.stints
            .iter()
            .nth(i)
            .map(|(tp, s)| (tp.clone(), s.expected))
    }

    /// Commits every position, then checks what the group stored.
    pub(crate) fn commit_all(&mut self) {
        let spec = &GROUPS[self.g];
        let c = self.consumer.as_mut().expect("subscribed");
        match c.commit() {
            Ok(()) => {
                self.sh.bump(&self.sh.ops.commits, 1);
                let st = lock(&self.state);
                for (tp, s) in &st.stints {
                    let got = c.committed(&tp.0, tp.1).ok().flatten().map(|c| c.offset);
                    if got.unwrap_or(0) != s.expected {
                        self.sh.violation(format!(
                            "group {}: after commit(), {}/{} committed {got:?}, position {}",
                            spec.name, tp.0, tp.1, s.expected
                        ));
                    }
                }
            }
            Err(Error::CommitFailed(_)) if spec.expiry => {}
            Err(e) => self
                .sh
                .violation(format!("group {}: commit: {e}", spec.name)),
        }
    }

    /// Commits one owned partition at or below its position.
    pub(crate) fn commit_some(&mut self) {
        let Some((tp, expected)) = self.pick_owned() else {
            return;
        };
        let spec = &GROUPS[self.g];
        let offset = expected - self.rng.range(0, expected.min(20) + 1);
        let c = self.consumer.as_mut().expect("subscribed");
        match c.commit_offsets(&[(&tp.0, tp.1, offset, "stress")]) {
            Ok(()) => {
                self.sh.bump(&self.sh.ops.commit_offsets, 1);
                let got = c.committed(&tp.0, tp.1).ok().flatten();
                if got
                    .as_ref()
                    .is_none_or(|c| c.offset != offset || c.metadata != "stress")
                {
                    self.sh.violation(format!(
                        "group {}: committed {offset} to {}/{}, read back {got:?}",
                        spec.name, tp.0, tp.1
                    ));
                }
            }
            Err(Error::CommitFailed(_)) if spec.expiry => {}
            Err(e) => self.sh.violation(format!(
                "group {}: commit_offsets({}/{} at {offset}): {e}",
                spec.name, tp.0, tp.1
            )),
        }
    }

    /// Commits that must be refused: past the end, and of a partition this
    /// member does not own.
    pub(crate) fn bad_commits(&mut self) {
        let spec = &GROUPS[self.g];
        let g = self.g;
        let owned: BTreeSet<Tp> = lock(&self.state).stints.keys().cloned().collect();
        let all = self.sh.group_partitions(g);
        let c = self.consumer.as_mut().expect("subscribed");
        if let Some((tp, end)) = owned
            .iter()
            .next()
            .and_then(|tp| all.iter().find(|(t, _)| t == tp).cloned())
        {
            let past = end + 1_000_000_000;
            match c.commit_offsets(&[(&tp.0, tp.1, past, "")]) {
                Err(Error::OffsetOutOfRange { .. }) => {
                    self.sh.bump(&self.sh.ops.rejected_commits, 1);
                }
                other => self.sh.violation(format!(
                    "group {}: committing {past} to {}/{} (end {end}) gave {other:?}, not OffsetOutOfRange",
                    spec.name, tp.0, tp.1
                )),
            }
        }
        let others: Vec<&Tp> = all
            .iter()
            .map(|(tp, _)| tp)
            .filter(|tp| !owned.contains(*tp))
            .collect();
        if !others.is_empty() {
            let tp = others[self.rng.range(0, others.len() as u64) as usize];
            match c.commit_offsets(&[(&tp.0, tp.1, 0, "")]) {
                Err(Error::CommitFailed(_)) => self.sh.bump(&self.sh.ops.rejected_commits, 1),
                other => self.sh.violation(format!(
                    "group {}: member {:?} committing {}/{}, which it does not own, gave {other:?}, not CommitFailed",
                    spec.name,
                    c.member_id(),
                    tp.0,
                    tp.1
                )),
            }
        }
    }

    /// Seeks an owned partition backwards (or to its beginning).
    pub(crate) fn seek_back(&mut self, to_beginning: bool) {
        let Some((tp, expected)) = self.pick_owned() else {
            return;
        };
        let spec = &GROUPS[self.g];
        let target = if to_beginning {
            0
        } else {
            expected - self.rng.range(0, expected.min(50) + 1)
        };
        let c = self.consumer.as_mut().expect("subscribed");
        match c.position(&tp.0, tp.1) {
            Ok(p) if p == expected => {}
            other => self.sh.violation(format!(
                "group {}: position({}/{}) is {other:?}, but it was handed everything below {expected}",
                spec.name, tp.0, tp.1
            )),
        }
        let res = if to_beginning {
            c.seek_to_beginning(&tp.0, tp.1)
        } else {
            c.seek(&tp.0, tp.1, target)
        };
        match res {
            Ok(()) => {
                let mut st = lock(&self.state);
                let s = st.stints.get_mut(&tp).expect("picked");
                s.reread_until = s.reread_until.max(expected);
                s.expected = target;
                s.counters.clear();
                let counter = if to_beginning {
                    &self.sh.ops.seeks_to_beginning
                } else {
                    &self.sh.ops.seeks
                };
                self.sh.bump(counter, 1);
            }
            Err(e) => self.sh.violation(format!(
                "group {}: seek({}/{}, {target}): {e}",
                spec.name, tp.0, tp.1
            )),
        }
    }

    /// Seeks that must be refused and leave the position alone.
    pub(crate) fn bad_seeks(&mut self) {
        let spec = &GROUPS[self.g];
        let g = self.g;
        if let Some((tp, expected)) = self.pick_owned() {
            let c = self.consumer.as_mut().expect("subscribed");
            let past = self.sh.end_offset(&tp.0, tp.1).unwrap_or(0) + 1_000_000_000;
            match c.seek(&tp.0, tp.1, past) {
                Err(Error::OffsetOutOfRange { .. }) => self.sh.bump(&self.sh.ops.rejected_seeks, 1),
                other => self.sh.violation(format!(
                    "group {}: seek({}/{}, {past}) gave {other:?}, not OffsetOutOfRange",
                    spec.name, tp.0, tp.1
                )),
            }
            match c.position(&tp.0, tp.1) {
                Ok(p) if p == expected => {}
                other => self.sh.violation(format!(
                    "group {}: after a refused seek, position({}/{}) is {other:?}, expected {expected}",
                    spec.name, tp.0, tp.1
                )),
            }
        }
        let owned: BTreeSet<Tp> = lock(&self.state).stints.keys().cloned().collect();
        let all = self.sh.group_partitions(g);
        if let Some((tp, _)) = all.iter().find(|(tp, _)| !owned.contains(tp)) {
            let c = self.consumer.as_mut().expect("subscribed");
            match c.seek(&tp.0, tp.1, 0) {
                Err(Error::InvalidArgument(_)) => self.sh.bump(&self.sh.ops.rejected_seeks, 1),
                other => self.sh.violation(format!(
                    "group {}: seek on {}/{}, not assigned, gave {other:?}, not InvalidArgument",
                    spec.name, tp.0, tp.1
                )),
            }
        }
    }
}
