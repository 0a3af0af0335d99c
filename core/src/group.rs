//! Consumer groups inside one process: membership, the target assignment
//! computed by the group's strategy, and the hand-over of partitions.
//!
//! Every member of a group shares the partitions of its subscribed topics.
//! When the membership or the partitions change, the group computes a new
//! target assignment and bumps its generation. Each member brings itself in
//! line at its next `poll`: it first revokes (and releases) the partitions
//! it owns that are no longer its own — after its revoke callback and, with
//! auto-commit, a commit — then takes those of its target that nobody holds
//! any more. So at any moment a partition has at most one owner, and a new
//! owner starts at the offset the previous one committed.
//!
//! A member that does not poll for `max_poll_interval_ms` is removed from
//! the group by the next member that polls, and its partitions are released.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::assign::{assign, Assignment, AssignmentStrategy, MemberInfo, TopicPartition};
use crate::error::{Error, Result};
use crate::log::Waiter;
use crate::offsets::{CommittedOffset, OffsetStore};
use crate::sync::lock;

/// The partition count of a topic (`None` when it does not exist).
pub(crate) type Counts<'a> = &'a dyn Fn(&str) -> Option<u32>;

/// A member's wishes, given when it joins or changes its subscription.
#[derive(Debug, Clone)]
pub(crate) struct MemberSpec {
    /// The topics it subscribes to (already resolved from a pattern).
    pub topics: Vec<String>,
    /// The group's strategy as this member asks for it.
    pub strategy: AssignmentStrategy,
    /// Partitions it asks for (`by_config`).
    pub wanted: Vec<TopicPartition>,
    /// How long it may go without polling.
    pub max_poll_interval: Duration,
}

#[derive(Debug)]
struct Member {
    spec: MemberSpec,
    last_poll: Instant,
    waiter: Option<Arc<Waiter>>,
}

#[derive(Debug, Default)]
struct State {
    members: BTreeMap<String, Member>,
    generation: u64,
    strategy: AssignmentStrategy,
    /// Partition counts the target was computed for.
    partitions: BTreeMap<String, u32>,
    target: Assignment,
    owner: HashMap<TopicPartition, String>,
    next_member: u64,
}

/// Where a reader of a group resumes on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// At the committed offset.
    At(u64),
    /// The committed offset was found beyond the end of the log (recovery
    /// had cut the log below it): it is out of range. `log_end` is where
    /// the log ended then, the first offset that may hold records the
    /// group never read.
    OutOfRange { committed: u64, log_end: u64 },
}

impl Resume {
    /// The offset reading resumes at (with an out-of-range mark, the cut).
    pub(crate) fn offset(self) -> u64 {
        match self {
            Resume::At(o) => o,
            Resume::OutOfRange { log_end, .. } => log_end,
        }
    }
}

/// One consumer group.
#[derive(Debug)]
pub(crate) struct Group {
    name: String,
    state: Mutex<State>,
    offsets: Mutex<OffsetStore>,
    /// Bumped at every rebalance and release: a member holding fetched
    /// messages reads it (one atomic load per message handed out) to know
    /// when to bring itself in line with the group before the next one.
    epoch: AtomicU64,
}

/// What a member must do to match the group's target.
#[derive(Debug, Default)]
pub(crate) struct Handover {
    /// The generation this answer belongs to.
    pub generation: u64,
    /// Owned partitions that are no longer the member's: revoke them, then
    /// call [`Group::release`].
    pub revoke: Vec<TopicPartition>,
    /// Partitions the member now owns (already recorded as its own).
    pub acquired: Vec<TopicPartition>,
}

impl Group {
    /// Opens the group `name` (its committed offsets).
    pub(crate) fn open(dir: &Path, name: &str, mode: u32) -> Result<Group> {
        Ok(Group {
            name: name.to_owned(),
            state: Mutex::new(State::default()),
            offsets: Mutex::new(OffsetStore::open(dir, name, mode)?),
            epoch: AtomicU64::new(0),
        })
    }

    /// Changes whenever a member may have something to do (a rebalance, a
    /// release of partitions).
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The group's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Adds a member; returns its id.
    pub(crate) fn join(
        &self,
        client: &str,
        spec: MemberSpec,
        counts: Counts<'_>,
    ) -> Result<String> {
        let mut st = lock(&self.state);
        if !st.members.is_empty() && st.strategy != spec.strategy {
            return Err(Error::InvalidArgument(format!(
                "group {:?} uses the {} strategy; this member asks for {}",
                self.name, st.strategy, spec.strategy
            )));
        }
        st.strategy = spec.strategy;
        st.next_member += 1;
        let id = format!("{}-{:010}", client, st.next_member);
        st.members.insert(
            id.clone(),
            Member {
                spec,
                last_poll: Instant::now(),
                waiter: None,
            },
        );
        let partitions = Self::partitions(&st, counts);
        self.rebalance(&mut st, partitions);
        Ok(id)
    }

    /// Changes a member's subscription.
    pub(crate) fn update(&self, id: &str, spec: MemberSpec, counts: Counts<'_>) {
        let mut st = lock(&self.state);
        if let Some(m) = st.members.get_mut(id) {
            m.spec = spec;
            let partitions = Self::partitions(&st, counts);
            self.rebalance(&mut st, partitions);
        }
    }

    /// Partition counts of every topic some member subscribes to.
    fn partitions(st: &State, counts: Counts<'_>) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        for m in st.members.values() {
            for t in &m.spec.topics {
                if !out.contains_key(t) {
                    if let Some(n) = counts(t) {
                        out.insert(t.clone(), n);
                    }
                }
            }
        }
        out
    }

    /// Removes a member and releases everything it owns.
    pub(crate) fn leave(&self, id: &str, counts: Counts<'_>) {
        let mut st = lock(&self.state);
        if st.members.remove(id).is_some() {
            st.owner.retain(|_, o| o != id);
            let partitions = Self::partitions(&st, counts);
            self.rebalance(&mut st, partitions);
        }
    }

    /// Whether the group has members now or committed offsets.
    fn is_in_use(&self) -> bool {
        !lock(&self.state).members.is_empty() || !lock(&self.offsets).is_empty()
    }

    /// Whether `id` is still a member (it may have been removed for not
    /// polling in time).
    pub(crate) fn is_member(&self, id: &str) -> bool {
        lock(&self.state).members.contains_key(id)
    }

    /// Recomputes the target assignment and wakes every member.
    fn rebalance(&self, st: &mut State, partitions: BTreeMap<String, u32>) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let members: Vec<MemberInfo> = st
            .members
            .iter()
            .map(|(id, m)| MemberInfo {
                id: id.clone(),
                topics: m.spec.topics.clone(),
                wanted: m.spec.wanted.clone(),
            })
            .collect();
        // Sticky keeps what each member holds now.
        let mut previous: Assignment = HashMap::new();
        for (tp, o) in &st.owner {
            previous.entry(o.clone()).or_default().push(tp.clone());
        }
        st.target = assign(st.strategy, &members, &partitions, &previous);
        st.partitions = partitions;
        st.generation += 1;
        for m in st.members.values() {
            if let Some(w) = &m.waiter {
                w.wake();
            }
        }
    }

    /// Called by member `id` at every poll: records that it is alive,
    /// removes members that stopped polling, rebalances if the partitions
    /// changed, and says what the member must revoke and what it now owns.
    pub(crate) fn sync(
        &self,
        id: &str,
        counts: Counts<'_>,
        waiter: Option<&Arc<Waiter>>,
    ) -> Result<Handover> {
        let mut st = lock(&self.state);
        let now = Instant::now();
        match st.members.get_mut(id) {
            Some(m) => {
                m.last_poll = now;
                if let Some(w) = waiter {
                    m.waiter = Some(Arc::clone(w));
                }
            }
            None => {
                return Err(Error::InvalidArgument(format!(
                    "this consumer was removed from group {:?} for not polling within max_poll_interval_ms; subscribe again",
                    self.name
                )))
            }
        }
        let expired: Vec<String> = st
            .members
            .iter()
            .filter(|(mid, m)| {
                *mid != id && now.duration_since(m.last_poll) > m.spec.max_poll_interval
            })
            .map(|(mid, _)| mid.clone())
            .collect();
        for mid in &expired {
            ::log::warn!(
                "group {}: member {mid} did not poll within max_poll_interval_ms; removed",
                self.name
            );
            st.members.remove(mid);
            st.owner.retain(|_, o| o != mid);
        }
        let partitions = Self::partitions(&st, counts);
        if !expired.is_empty() || partitions != st.partitions {
            self.rebalance(&mut st, partitions);
        }
        let target = st.target.get(id).cloned().unwrap_or_default();
        let revoke: Vec<TopicPartition> = st
            .owner
            .iter()
            .filter(|(tp, o)| *o == id && !target.contains(tp))
            .map(|(tp, _)| tp.clone())
            .collect();
        let mut acquired = Vec::new();
        for tp in target {
            if !st.owner.contains_key(&tp) {
                st.owner.insert(tp.clone(), id.to_owned());
                acquired.push(tp);
            }
        }
        Ok(Handover {
            generation: st.generation,
            revoke,
            acquired,
        })
    }

    /// Member `id` gives up `partitions` (after revoking them); members
    /// waiting for them are woken.
    pub(crate) fn release(&self, id: &str, partitions: &[TopicPartition]) {
        let st = &mut *lock(&self.state);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        for tp in partitions {
            if st.owner.get(tp).is_some_and(|o| o == id) {
                st.owner.remove(tp);
            }
        }
        for (mid, m) in &st.members {
            if mid != id {
                if let Some(w) = &m.waiter {
                    w.wake();
                }
            }
        }
    }

    /// The earliest moment another member's poll deadline passes (so a
    /// waiting member wakes to expel it).
    pub(crate) fn next_expiry(&self, id: &str) -> Option<Instant> {
        let st = lock(&self.state);
        st.members
            .iter()
            .filter(|(mid, _)| *mid != id)
            .map(|(_, m)| m.last_poll + m.spec.max_poll_interval)
            .min()
    }

    /// The generation, the current members and what each owns.
    pub(crate) fn describe(&self) -> (u64, Vec<(String, Vec<TopicPartition>)>) {
        let st = lock(&self.state);
        let mut owned: BTreeMap<String, Vec<TopicPartition>> =
            st.members.keys().map(|k| (k.clone(), Vec::new())).collect();
        for (tp, o) in &st.owner {
            owned.entry(o.clone()).or_default().push(tp.clone());
        }
        for v in owned.values_mut() {
            v.sort();
        }
        (st.generation, owned.into_iter().collect())
    }

    /// Forgets the committed offsets of a deleted topic.
    pub(crate) fn remove_topic(&self, topic: &str) -> Result<()> {
        lock(&self.offsets).remove_topic(topic)
    }

    /// Every committed offset of the group.
    pub(crate) fn all_committed(&self) -> Vec<(String, u32, CommittedOffset)> {
        lock(&self.offsets).all()
    }

    /// The committed offset of a partition.
    pub(crate) fn committed(&self, topic: &str, partition: u32) -> Option<CommittedOffset> {
        lock(&self.offsets).get(topic, partition).cloned()
    }

    /// Where a reader of the group resumes on a partition: the committed
    /// offset, or, when that was found beyond the end of the log, an
    /// out-of-range mark with the end the log had then.
    pub(crate) fn resume(&self, topic: &str, partition: u32) -> Option<Resume> {
        let offsets = lock(&self.offsets);
        let committed = offsets.get(topic, partition)?.offset;
        Some(match offsets.out_of_range(topic, partition) {
            Some(log_end) => Resume::OutOfRange { committed, log_end },
            None => Resume::At(committed),
        })
    }

    /// Marks committed offsets beyond their partition's log end as out of
    /// range (see [`Resume::OutOfRange`]), logging each.
    pub(crate) fn mark_beyond_end(&self, end_of: &dyn Fn(&str, u32) -> Option<u64>) {
        let mut offsets = lock(&self.offsets);
        let marked = match offsets.mark_beyond_end(end_of) {
            Ok(m) => m,
            Err(e) => {
                ::log::error!(
                    "group {:?}: could not record committed offsets beyond the log end: {e}",
                    self.name
                );
                return;
            }
        };
        for (t, p, committed, end) in marked {
            ::log::warn!(
                "group {:?}: committed offset {committed} of {t}/{p} is beyond the end of the log \
                 ({end}; recovery cut the log below it): out of range, its readers resume by \
                 auto_offset_reset",
                self.name
            );
        }
    }

    /// Commits offsets (durably). With `member`, only partitions it owns.
    pub(crate) fn commit(
        &self,
        member: Option<&str>,
        offsets: &[(String, u32, CommittedOffset)],
    ) -> Result<()> {
        if let Some(id) = member {
            let st = lock(&self.state);
            for (t, p, _) in offsets {
                if st.owner.get(&(t.clone(), *p)).is_none_or(|o| o != id) {
                    return Err(Error::CommitFailed(format!(
                        "{t}/{p} is not owned by this member of group {:?} (it was revoked in a rebalance)",
                        self.name
                    )));
                }
            }
        }
        lock(&self.offsets).commit(offsets)
    }
}

/// The groups of one data directory.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    map: Mutex<HashMap<String, Arc<Group>>>,
    /// Groups (storage names) whose offsets file could not be read: the
    /// error each use of them gets.
    damaged: Mutex<HashMap<String, Error>>,
}

impl Groups {
    /// Opens every group that has committed offsets in `dir`.
    pub(crate) fn load_all(&self, dir: &Path, mode: u32) -> Result<()> {
        let gdir = dir.join("groups");
        let Ok(entries) = std::fs::read_dir(&gdir) else {
            return Ok(());
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(g) = name.strip_suffix(".offsets") {
                if crate::offsets::is_valid_key(g) {
                    match self.get(dir, g, mode) {
                        Ok(_) => {}
                        // One damaged group is unavailable; the rest opens.
                        Err(e) if crate::broker::is_damage(&e) => {
                            ::log::error!("consumer group {g:?} is unavailable: {e}");
                            lock(&self.damaged).insert(g.to_owned(), e);
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(())
    }

    /// Marks, in every group opened, the committed offsets beyond their
    /// partition's log end as out of range.
    pub(crate) fn mark_beyond_end(&self, end_of: &dyn Fn(&str, u32) -> Option<u64>) {
        for g in self.all() {
            g.mark_beyond_end(end_of);
        }
    }

    /// Names of the groups with members or committed offsets, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        let groups: Vec<(String, Arc<Group>)> = lock(&self.map)
            .iter()
            .map(|(n, g)| (n.clone(), Arc::clone(g)))
            .collect();
        let mut names: Vec<String> = groups
            .into_iter()
            .filter(|(_, g)| g.is_in_use())
            .map(|(n, _)| crate::offsets::group_of_key(&n).to_owned())
            .collect();
        names.extend(
            lock(&self.damaged)
                .keys()
                .map(|n| crate::offsets::group_of_key(n).to_owned()),
        );
        names.sort();
        names.dedup();
        names
    }

    /// The damaged groups (storage names) and their errors.
    pub(crate) fn damaged(&self) -> Vec<(String, Error)> {
        lock(&self.damaged)
            .iter()
            .map(|(n, e)| (n.clone(), e.duplicate()))
            .collect()
    }

    /// Every group opened so far.
    pub(crate) fn all(&self) -> Vec<Arc<Group>> {
        lock(&self.map).values().cloned().collect()
    }

    /// The group `name` (opened on first use), or the offsets of a
    /// broadcast consumer stored under `name`.
    pub(crate) fn get(&self, dir: &Path, name: &str, mode: u32) -> Result<Arc<Group>> {
        let mut map = lock(&self.map);
        if let Some(g) = map.get(name) {
            return Ok(Arc::clone(g));
        }
        if let Some(e) = lock(&self.damaged).get(name) {
            return Err(e.duplicate());
        }
        let g = Arc::new(Group::open(dir, name, mode)?);
        map.insert(name.to_owned(), Arc::clone(&g));
        Ok(g)
    }
}
