//! The run's shared state: what was acknowledged, who owns what, what
//! each group consumed, and the violations found.

use super::*;

macro_rules! counters {
    ($($name:ident: $doc:literal,)*) => {
        /// Operations performed, for the report.
        #[derive(Default)]
        pub(crate) struct Ops { $(#[doc = $doc] pub(crate) $name: AtomicU64,)* }

        impl Ops {
            pub(crate) fn report(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    records_acked: "records acknowledged to producers",
    sends: "blocking single sends",
    batch_sends: "send_batch calls",
    async_sent: "records sent with send_async",
    async_done: "send_async callbacks run",
    producer_restarts: "producers closed and replaced",
    partition_additions: "add_partitions calls",
    topics_created: "topics created under live pattern subscriptions",
    joins: "consumers created and subscribed",
    resubscribes: "subscribe again on a member (leave + join)",
    leaves_close: "members closed",
    leaves_unsubscribe: "members unsubscribed",
    expulsions: "members expelled for not polling (and joined again)",
    stalls: "stalls past max_poll_interval_ms",
    lost_partitions: "partitions an expelled member lost (on_lost)",
    expelled_handovers: "partitions taken over from an expelled member",
    zombie_polls: "polls by a member expelled meanwhile",
    assigned: "partitions assigned (on_assign)",
    revoked: "partitions revoked (on_revoke)",
    consumer_rebalances: "rebalances consumers took part in (ConsumerStats)",
    polls: "polls",
    messages: "messages consumed",
    commits: "commit() calls",
    commit_offsets: "commit_offsets() calls (at or below the position)",
    revoke_commits: "commits in on_revoke",
    drain_commits: "commits while draining",
    rejected_commits: "commits refused as expected (not owned, past the end)",
    seeks: "backward seeks",
    seeks_to_beginning: "seek_to_beginning calls",
    rejected_seeks: "seeks refused as expected (past the end, not assigned)",
    wakeups: "ConsumerWaker::wakeup calls",
    dup_handover: "records delivered again after a hand-over",
    dup_seek: "records read again after a seek",
    observations: "monitor observations of every group",
}

/// Consumption of one partition by one group.
#[derive(Default)]
pub(crate) struct Track {
    /// Times each offset was delivered (saturating).
    pub(crate) counts: Vec<u8>,
    /// Every offset below it was delivered at least once.
    pub(crate) frontier: u64,
}

/// One continuous ownership of a partition by one consumer.
pub(crate) struct Stint {
    /// The offset the consumer must be handed next.
    pub(crate) expected: u64,
    /// Offsets below it were delivered in this stint before a backward seek.
    pub(crate) reread_until: u64,
    /// Last counter seen per producer thread since the stint began or seeked.
    pub(crate) counters: HashMap<u16, u64>,
}

/// What one consumer slot knows of its consumer, shared with its listener.
#[derive(Default)]
pub(crate) struct SlotState {
    pub(crate) member: Option<String>,
    /// Set while the slot subscribes on purpose (a new member id is expected).
    pub(crate) rejoining: bool,
    /// Ordered, so that a seed picks the same partitions again.
    pub(crate) stints: BTreeMap<Tp, Stint>,
}

pub(crate) struct Shared {
    pub(crate) seed: u64,
    pub(crate) mq: Broker,
    pub(crate) phase: AtomicU8,
    pub(crate) stop_producers: AtomicBool,
    /// Per partition, by offset: the acknowledged payload (`pack`), or
    /// `NONE`.
    pub(crate) acks: Mutex<HashMap<Tp, Vec<u64>>>,
    /// `(group index, partition)` → member id, kept by the listeners.
    pub(crate) owners: Mutex<HashMap<(usize, Tp), String>>,
    pub(crate) tracks: Mutex<HashMap<(usize, Tp), Track>>,
    /// `(group, slot)` → the member id and assignment after its last poll.
    pub(crate) published: Mutex<HashMap<(usize, usize), Seen>>,
    pub(crate) wakers: Mutex<Vec<ConsumerWaker>>,
    pub(crate) violations: Mutex<Vec<String>>,
    pub(crate) violation_count: AtomicU64,
    pub(crate) generations: Mutex<Vec<u64>>,
    pub(crate) ops: Ops,
}

pub(crate) const NONE: u64 = u64::MAX;

pub(crate) fn pack(source: u16, counter: u64) -> u64 {
    (u64::from(source) << 48) | counter
}

pub(crate) fn mix(source: u16, counter: u64) -> u64 {
    let mut z = pack(source, counter).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A record's value: producer thread, counter, and a filler derived from
/// both (so a garbled value is recognised).
pub(crate) fn payload(source: u16, counter: u64) -> Vec<u8> {
    let h = mix(source, counter);
    let fill = (h % 48) as usize;
    let mut v = Vec::with_capacity(11 + fill);
    v.extend_from_slice(&source.to_le_bytes());
    v.extend_from_slice(&counter.to_le_bytes());
    v.push(fill as u8);
    v.extend((0..fill).map(|i| (h >> ((i % 8) * 8)) as u8 ^ i as u8));
    v
}

/// The producer thread and counter of a value made by [`payload`].
pub(crate) fn parse_payload(v: &[u8]) -> Option<(u16, u64)> {
    if v.len() < 11 {
        return None;
    }
    let source = u16::from_le_bytes([v[0], v[1]]);
    let counter = u64::from_le_bytes(v[2..10].try_into().ok()?);
    (v == payload(source, counter).as_slice()).then_some((source, counter))
}

pub(crate) fn tp_of(m: &Message) -> Tp {
    (m.topic().to_owned(), m.partition())
}

impl Shared {
    pub(crate) fn violation(&self, what: String) {
        let n = self.violation_count.fetch_add(1, Ordering::Relaxed);
        if (n as usize) < MAX_REPORTED {
            eprintln!("stress VIOLATION (seed {}): {what}", self.seed);
            lock(&self.violations).push(what);
        }
    }

    #[allow(clippy::unused_self)]
    pub(crate) fn bump(&self, counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn phase(&self) -> u8 {
        self.phase.load(Ordering::Acquire)
    }

    /// End offset of a partition, if it exists.
    pub(crate) fn end_offset(&self, topic: &str, partition: u32) -> Option<u64> {
        let info = self.mq.topic(topic).ok()?;
        info.partitions
            .get(partition as usize)
            .map(|p| p.end_offset)
    }

    /// Every partition the group `g` reads: `(partition, end offset)`.
    pub(crate) fn group_partitions(&self, g: usize) -> Vec<(Tp, u64)> {
        let topics: Vec<String> = if GROUPS[g].pattern {
            self.mq.topics()
        } else {
            STATIC_TOPICS
                .iter()
                .map(std::string::ToString::to_string)
                .collect()
        };
        let mut out = Vec::new();
        for t in topics {
            if let Ok(info) = self.mq.topic(&t) {
                for p in &info.partitions {
                    out.push(((t.clone(), p.partition), p.end_offset));
                }
            }
        }
        out
    }

    pub(crate) fn is_member(&self, g: usize, id: &str) -> bool {
        self.mq
            .describe_group(GROUPS[g].name)
            .is_ok_and(|info| info.members.iter().any(|m| m.id == id))
    }

    /// Records that `send` acknowledged `(source, counter)` at `md`.
    pub(crate) fn ack(&self, md: &RecordMetadata, source: u16, counter: u64) {
        if md.duplicate {
            self.violation(format!(
                "producer {source} record {counter} acknowledged as a duplicate (never re-sent): {md:?}"
            ));
            return;
        }
        let Some(offset) = md.known_offset() else {
            self.violation(format!(
                "producer {source} record {counter} acknowledged without an offset: {md:?}"
            ));
            return;
        };
        {
            let mut acks = lock(&self.acks);
            let v = acks
                .entry((md.topic.to_string(), md.partition))
                .or_default();
            let i = offset as usize;
            if v.len() <= i {
                v.resize(i + 1, NONE);
            }
            if v[i] != NONE {
                let prev = v[i];
                drop(acks);
                self.violation(format!(
                    "{}/{} offset {offset} acknowledged twice: to producer {} record {} and to producer {source} record {counter}",
                    md.topic,
                    md.partition,
                    prev >> 48,
                    prev & ((1 << 48) - 1)
                ));
                return;
            }
            v[i] = pack(source, counter);
        }
        self.bump(&self.ops.records_acked, 1);
    }

    /// Member `me` of group `g` was just assigned `tp` (from `on_assign`).
    pub(crate) fn take_ownership(&self, g: usize, tp: &Tp, me: &str) {
        let prev = lock(&self.owners).insert((g, tp.clone()), me.to_owned());
        match prev {
            None => {}
            Some(prev) if prev == me => self.violation(format!(
                "group {}: {}/{} assigned to {me}, which already holds it",
                GROUPS[g].name, tp.0, tp.1
            )),
            Some(prev) => {
                if self.is_member(g, &prev) {
                    self.violation(format!(
                        "group {}: {}/{} assigned to {me} while {prev} still holds it (no on_revoke ran)",
                        GROUPS[g].name, tp.0, tp.1
                    ));
                } else if GROUPS[g].expiry {
                    self.bump(&self.ops.expelled_handovers, 1);
                } else {
                    self.violation(format!(
                        "group {}: {}/{} assigned to {me}; its holder {prev} left the group without revoking it",
                        GROUPS[g].name, tp.0, tp.1
                    ));
                }
            }
        }
    }

    /// Member `me` of group `g` gives up `tp` (from `on_revoke`).
    pub(crate) fn release_ownership(&self, g: usize, tp: &Tp, me: &str) {
        let prev = lock(&self.owners).remove(&(g, tp.clone()));
        if prev.as_deref() != Some(me) {
            self.violation(format!(
                "group {}: {me} revoked {}/{}, which the listeners saw owned by {prev:?}",
                GROUPS[g].name, tp.0, tp.1
            ));
        }
    }

    /// Brings the slot's idea of its member id in line with the consumer's.
    /// A new id the slot did not ask for means the consumer was expelled and
    /// joined again by itself: what it held is gone without a revoke.
    pub(crate) fn sync_member(&self, g: usize, member_id: Option<&str>, st: &mut SlotState) {
        let now = member_id.map(str::to_owned);
        if now == st.member {
            return;
        }
        if let (Some(old), Some(new), false) = (&st.member, &now, st.rejoining) {
            self.bump(&self.ops.expulsions, 1);
            if !GROUPS[g].expiry {
                self.violation(format!(
                    "group {}: member {old} was replaced by {new} without leaving (expelled with max_poll_interval_ms of 300 s?)",
                    GROUPS[g].name
                ));
            }
            let mut owners = lock(&self.owners);
            let before = owners.len();
            owners.retain(|(gg, _), o| !(*gg == g && o == old));
            let lost = before - owners.len();
            drop(owners);
            if lost > 0 || !st.stints.is_empty() {
                self.violation(format!(
                    "group {}: {old} was expelled and still held {lost} partitions ({} stints): on_lost did not run",
                    GROUPS[g].name,
                    st.stints.len()
                ));
            }
            st.stints.clear();
        } else if !st.stints.is_empty() {
            self.violation(format!(
                "group {}: member {:?} became {now:?} still holding {:?} (no on_revoke)",
                GROUPS[g].name,
                st.member,
                st.stints.keys().collect::<Vec<_>>()
            ));
            st.stints.clear();
        }
        st.member = now;
    }

    /// After a poll: the consumer's assignment, its slot's stints and the
    /// ownership map agree.
    pub(crate) fn check_consistency(&self, g: usize, c: &Consumer, st: &SlotState) {
        let mut assigned = c.assignment();
        assigned.sort();
        let mut stints: Vec<Tp> = st.stints.keys().cloned().collect();
        stints.sort();
        let name = GROUPS[g].name;
        if assigned != stints {
            self.violation(format!(
                "group {name}: member {:?} reads {assigned:?} but was assigned {stints:?} by its listener",
                st.member
            ));
        }
        let Some(me) = &st.member else {
            if !assigned.is_empty() {
                self.violation(format!(
                    "group {name}: a consumer outside the group reads {assigned:?}"
                ));
            }
            return;
        };
        let mut mine: Vec<Tp> = lock(&self.owners)
            .iter()
            .filter(|((gg, _), o)| *gg == g && *o == me)
            .map(|((_, tp), _)| tp.clone())
            .collect();
        mine.sort();
        if mine != assigned {
            if GROUPS[g].expiry && !self.is_member(g, me) {
                // Expelled after this poll's sync: it learns at its next poll.
                self.bump(&self.ops.zombie_polls, 1);
            } else {
                self.violation(format!(
                    "group {name}: member {me} reads {assigned:?}, the ownership map says it owns {mine:?}"
                ));
            }
        }
    }

    /// Checks and records the messages one poll returned.
    pub(crate) fn consume(&self, g: usize, st: &mut SlotState, msgs: &[Message]) {
        if msgs.is_empty() {
            return;
        }
        let name = GROUPS[g].name;
        let mut bad = Vec::new();
        let acks = lock(&self.acks);
        let mut tracks = lock(&self.tracks);
        let mut dup_handover = 0;
        let mut dup_seek = 0;
        for m in msgs {
            let tp = tp_of(m);
            let o = m.offset();
            let Some(stint) = st.stints.get_mut(&tp) else {
                bad.push(format!(
                    "group {name}: member {:?} handed {}/{} offset {o}, a partition it was not assigned",
                    st.member, tp.0, tp.1
                ));
                continue;
            };
            if o != stint.expected {
                bad.push(format!(
                    "group {name}: member {:?} handed {}/{} offset {o}, expected {} ({})",
                    st.member,
                    tp.0,
                    tp.1,
                    stint.expected,
                    if o < stint.expected {
                        "went backwards"
                    } else {
                        "skipped records"
                    }
                ));
            }
            stint.expected = o + 1;
            let parsed = m.value().and_then(parse_payload);
            let Some((source, counter)) = parsed else {
                bad.push(format!(
                    "group {name}: {}/{} offset {o} has a garbled value {:?}",
                    tp.0,
                    tp.1,
                    m.value()
                ));
                continue;
            };
            if let Some(last) = stint.counters.insert(source, counter) {
                if counter <= last {
                    bad.push(format!(
                        "group {name}: {}/{} offset {o}: producer {source} record {counter} after its record {last}",
                        tp.0, tp.1
                    ));
                }
            }
            if let Some(&a) = acks.get(&tp).and_then(|v| v.get(o as usize)) {
                if a != NONE && a != pack(source, counter) {
                    bad.push(format!(
                        "group {name}: {}/{} offset {o} holds producer {source} record {counter}; send acknowledged producer {} record {} there",
                        tp.0, tp.1, a >> 48, a & ((1 << 48) - 1)
                    ));
                }
            }
            let t = tracks.entry((g, tp)).or_default();
            let i = o as usize;
            if t.counts.len() <= i {
                t.counts.resize(i + 1, 0);
            }
            if t.counts[i] > 0 {
                if o < stint.reread_until {
                    dup_seek += 1;
                } else {
                    dup_handover += 1;
                }
            }
            t.counts[i] = t.counts[i].saturating_add(1);
            while t.counts.get(t.frontier as usize).is_some_and(|&n| n > 0) {
                t.frontier += 1;
            }
        }
        drop(tracks);
        drop(acks);
        self.bump(&self.ops.messages, msgs.len() as u64);
        self.bump(&self.ops.dup_handover, dup_handover);
        self.bump(&self.ops.dup_seek, dup_seek);
        for b in bad {
            self.violation(b);
        }
    }

    pub(crate) fn frontier(&self, g: usize, tp: &Tp) -> u64 {
        lock(&self.tracks)
            .get(&(g, tp.clone()))
            .map_or(0, |t| t.frontier)
    }

    /// One look at every group from outside: owners unique, committed
    /// offsets not past the log end nor past what the group consumed.
    pub(crate) fn observe(&self) {
        for (g, spec) in GROUPS.iter().enumerate() {
            let info = match self.mq.describe_group(spec.name) {
                Ok(i) => i,
                Err(e) => {
                    self.violation(format!("describe_group({}): {e}", spec.name));
                    continue;
                }
            };
            {
                let mut gens = lock(&self.generations);
                gens[g] = gens[g].max(info.generation);
            }
            let mut seen = BTreeSet::new();
            for m in &info.members {
                for tp in &m.partitions {
                    if !seen.insert(tp.clone()) {
                        self.violation(format!(
                            "group {}: {}/{} owned twice in describe_group: {info:?}",
                            spec.name, tp.0, tp.1
                        ));
                    }
                }
            }
            // Ends and frontiers are read after the committed offsets: both
            // only grow.
            let mut ends: HashMap<String, Vec<u64>> = HashMap::new();
            for (t, p, c) in &info.committed {
                let end = match ends.get(t) {
                    Some(v) => v.get(*p as usize).copied(),
                    None => match self.mq.topic(t) {
                        Ok(ti) => {
                            let v: Vec<u64> = ti.partitions.iter().map(|x| x.end_offset).collect();
                            let e = v.get(*p as usize).copied();
                            ends.insert(t.clone(), v);
                            e
                        }
                        Err(_) => None,
                    },
                };
                let Some(end) = end else {
                    self.violation(format!(
                        "group {}: committed offset for {t}/{p}, which does not exist",
                        spec.name
                    ));
                    continue;
                };
                if c.offset > end {
                    self.violation(format!(
                        "group {}: committed {} for {t}/{p}, past its end {end}",
                        spec.name, c.offset
                    ));
                }
                let frontier = self.frontier(g, &(t.clone(), *p));
                if c.offset > frontier {
                    self.violation(format!(
                        "group {}: committed {} for {t}/{p}, but the group has only consumed everything below {frontier}",
                        spec.name, c.offset
                    ));
                }
            }
        }
        self.bump(&self.ops.observations, 1);
    }

    /// Whether every group consumed and committed every partition it reads
    /// to its end; else what is missing.
    pub(crate) fn drained(&self) -> std::result::Result<(), String> {
        for (g, spec) in GROUPS.iter().enumerate() {
            let committed: HashMap<Tp, u64> = self
                .mq
                .describe_group(spec.name)
                .map_err(|e| e.to_string())?
                .committed
                .into_iter()
                .map(|(t, p, c)| ((t, p), c.offset))
                .collect();
            for (tp, end) in self.group_partitions(g) {
                let frontier = self.frontier(g, &tp);
                let c = committed.get(&tp).copied().unwrap_or(0);
                if frontier < end || c < end {
                    return Err(format!(
                        "group {}: {}/{} consumed below {frontier}, committed {c}, end {end}",
                        spec.name, tp.0, tp.1
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether every group settled: each partition it reads owned by exactly
    /// one member, and each member's own assignment equal to what the group
    /// says it owns; else what is not.
    pub(crate) fn settled(&self) -> std::result::Result<(), String> {
        let published = lock(&self.published).clone();
        for (g, spec) in GROUPS.iter().enumerate() {
            let info = self
                .mq
                .describe_group(spec.name)
                .map_err(|e| e.to_string())?;
            let mine: BTreeMap<String, Vec<Tp>> = published
                .iter()
                .filter(|((gg, _), _)| *gg == g)
                .map(|(_, (id, a))| (id.clone(), a.clone()))
                .collect();
            let theirs: BTreeMap<String, Vec<Tp>> = info
                .members
                .iter()
                .map(|m| {
                    let mut v = m.partitions.clone();
                    v.sort();
                    (m.id.clone(), v)
                })
                .collect();
            if mine != theirs {
                return Err(format!(
                    "group {}: consumers read {mine:?}, the group says {theirs:?}",
                    spec.name
                ));
            }
            let mut owned: BTreeMap<Tp, usize> = BTreeMap::new();
            for a in mine.values() {
                for tp in a {
                    *owned.entry(tp.clone()).or_default() += 1;
                }
            }
            for (tp, _) in self.group_partitions(g) {
                let n = owned.remove(&tp).unwrap_or(0);
                if n != 1 {
                    return Err(format!(
                        "group {}: {}/{} has {n} owners: {mine:?}",
                        spec.name, tp.0, tp.1
                    ));
                }
            }
            if !owned.is_empty() {
                return Err(format!(
                    "group {}: owns partitions it does not read: {owned:?}",
                    spec.name
                ));
            }
        }
        Ok(())
    }
}
