//! Consumer groups: membership, the target assignment computed by the
//! group's strategy, and the hand-over of partitions.
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
//!
//! The rules live in [`state`]; the state itself lives in memory when one
//! process has the data directory, or in the group's files when several
//! processes share it ([`shared`]), where a member whose process ended is
//! also removed, found through a lock the kernel released.

mod shared;
mod state;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::assign::TopicPartition;
use crate::clock::monotonic_ms;
use crate::error::{Error, Result};
use crate::log::Waiter;
use crate::offsets::{CommittedOffset, OffsetStore};
use crate::shared::ProcessSlot;
use crate::sync::lock;

use shared::{Changed, SharedStore};
use state::State;
pub(crate) use state::{Counts, Handover, MemberSpec};

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

/// Where a group's membership and assignment live.
#[derive(Debug)]
enum Store {
    /// In memory: one process has the data directory.
    Local(Mutex<State>),
    /// In the group's files: several processes share the data directory.
    Shared(Box<SharedStore>),
}

/// One consumer group.
#[derive(Debug)]
pub(crate) struct Group {
    name: String,
    store: Store,
    offsets: Mutex<OffsetStore>,
    /// Bumped at every rebalance and release (in memory; a shared group
    /// keeps it in its shared page): a member holding fetched messages
    /// reads it (one atomic load per message handed out) to know when to
    /// bring itself in line with the group before the next one.
    epoch: AtomicU64,
    /// The waiters of this process's members, woken when the group changes.
    waiters: Mutex<HashMap<String, Arc<Waiter>>>,
    /// The committed offsets are read again whenever their file changed
    /// (a group shared by processes, or one seen through a read-only
    /// handle while other processes commit).
    follows_file: bool,
}

/// Converts a monotonic-clock time to an [`Instant`].
fn instant_of(ms: u64) -> Instant {
    let now_ms = monotonic_ms();
    let now = Instant::now();
    if ms >= now_ms {
        now + Duration::from_millis(ms - now_ms)
    } else {
        now.checked_sub(Duration::from_millis(now_ms - ms))
            .unwrap_or(now)
    }
}

impl Group {
    /// Opens the group `name` (its committed offsets), kept in memory.
    pub(crate) fn open(dir: &Path, name: &str, mode: u32) -> Result<Group> {
        Ok(Group {
            name: name.to_owned(),
            store: Store::Local(Mutex::new(State::default())),
            offsets: Mutex::new(OffsetStore::open(dir, name, mode)?),
            epoch: AtomicU64::new(0),
            waiters: Mutex::new(HashMap::new()),
            follows_file: false,
        })
    }

    /// Opens the group `name` for a read-only handle: its members are this
    /// process's only, its committed offsets read (again whenever other
    /// processes commit) and never written; nothing is created.
    pub(crate) fn open_read_only(dir: &Path, name: &str, mode: u32) -> Result<Group> {
        Ok(Group {
            name: name.to_owned(),
            store: Store::Local(Mutex::new(State::default())),
            offsets: Mutex::new(OffsetStore::open_read_only(dir, name, mode)?),
            epoch: AtomicU64::new(0),
            waiters: Mutex::new(HashMap::new()),
            follows_file: true,
        })
    }

    /// Opens the group `name` shared with other processes (see
    /// [`shared`]).
    /// `slot` is this process's registration in the data directory: the
    /// group's lock is held under its token.
    pub(crate) fn open_shared(
        dir: &Path,
        name: &str,
        mode: u32,
        slot: &Arc<ProcessSlot>,
    ) -> Result<Group> {
        let offsets = OffsetStore::open(dir, name, mode)?;
        let store = SharedStore::open(dir, name, mode, Arc::clone(slot))?;
        Ok(Group {
            name: name.to_owned(),
            store: Store::Shared(Box::new(store)),
            offsets: Mutex::new(offsets),
            epoch: AtomicU64::new(0),
            waiters: Mutex::new(HashMap::new()),
            follows_file: true,
        })
    }

    /// Changes whenever a member may have something to do (a rebalance, a
    /// release of partitions).
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        match &self.store {
            Store::Local(_) => self.epoch.load(Ordering::Acquire),
            Store::Shared(s) => s.epoch(),
        }
    }

    /// The group's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Runs a change on an in-memory state; bumps the epoch and wakes
    /// this process's members (but `except`) when members must learn of it.
    fn edit_local<R>(
        &self,
        st: &Mutex<State>,
        except: Option<&str>,
        f: impl FnOnce(&mut State) -> R,
    ) -> R {
        let (r, changed) = {
            let mut st = lock(st);
            let before = st.changes;
            let r = f(&mut st);
            (r, st.changes != before)
        };
        if changed {
            self.epoch.fetch_add(1, Ordering::AcqRel);
            self.wake_members(except);
        }
        r
    }

    fn after_shared(&self, changed: Changed, except: Option<&str>) {
        if changed == Changed::Yes {
            self.wake_members(except);
        }
    }

    fn wake_members(&self, except: Option<&str>) {
        for (id, w) in lock(&self.waiters).iter() {
            if except != Some(id.as_str()) {
                w.wake();
            }
        }
    }

    /// Adds a member; returns its id.
    pub(crate) fn join(
        &self,
        client: &str,
        spec: MemberSpec,
        counts: Counts<'_>,
    ) -> Result<String> {
        match &self.store {
            Store::Local(st) => self.edit_local(st, None, |st| {
                st.join(&self.name, client, spec, counts, monotonic_ms(), 0)
            }),
            Store::Shared(s) => {
                let (id, changed) = s.join(client, spec, counts)?;
                self.after_shared(changed, None);
                Ok(id)
            }
        }
    }

    /// Changes a member's subscription.
    pub(crate) fn update(&self, id: &str, spec: MemberSpec, counts: Counts<'_>) {
        match &self.store {
            Store::Local(st) => self.edit_local(st, None, |st| st.update(id, spec, counts)),
            Store::Shared(s) => match s.update(id, spec, counts) {
                Ok(changed) => self.after_shared(changed, None),
                Err(e) => ::log::warn!("group {:?}: changing member {id}: {e}", self.name),
            },
        }
    }

    /// Removes a member and releases everything it owns.
    pub(crate) fn leave(&self, id: &str, counts: Counts<'_>) {
        lock(&self.waiters).remove(id);
        match &self.store {
            Store::Local(st) => {
                self.edit_local(st, None, |st| st.remove(&[id.to_owned()], counts));
            }
            Store::Shared(s) => match s.leave(id, counts) {
                Ok(changed) => self.after_shared(changed, None),
                Err(e) => ::log::warn!("group {:?}: member {id} leaving: {e}", self.name),
            },
        }
    }

    /// Removes every member this engine holds (shared mode, at the
    /// broker's close): a consumer left open past its broker's close,
    /// never dropped, or leaked, is otherwise alive to the other members
    /// for as long as this process runs. In exclusive mode the members
    /// end with the engine.
    pub(crate) fn leave_all(&self, counts: Counts<'_>) {
        if let Store::Shared(s) = &self.store {
            for id in s.own_members() {
                self.leave(&id, counts);
            }
        }
    }

    /// Whether the group has members now or committed offsets.
    fn is_in_use(&self) -> bool {
        let members = match &self.store {
            Store::Local(st) => !lock(st).members.is_empty(),
            Store::Shared(s) => s.has_members(),
        };
        members || !lock(&self.offsets).is_empty()
    }

    /// Whether `id` is still a member (it may have been removed for not
    /// polling in time, or, shared, because its process was found dead).
    pub(crate) fn is_member(&self, id: &str, counts: Counts<'_>) -> bool {
        match &self.store {
            Store::Local(st) => lock(st).members.contains_key(id),
            Store::Shared(s) => s.is_member(id, counts).unwrap_or_else(|e| {
                ::log::warn!("group {:?}: {e}", self.name);
                true
            }),
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
        if let Some(w) = waiter {
            let mut ws = lock(&self.waiters);
            if ws.get(id).is_none_or(|x| !Arc::ptr_eq(x, w)) {
                ws.insert(id.to_owned(), Arc::clone(w));
            }
        }
        match &self.store {
            Store::Local(st) => self.edit_local(st, None, |st| {
                st.sync(&self.name, id, counts, monotonic_ms())
            }),
            Store::Shared(s) => {
                let (h, changed) = s.sync(id, counts)?;
                self.after_shared(changed, Some(id));
                Ok(h)
            }
        }
    }

    /// Member `id` gives up `partitions` (after revoking them); members
    /// waiting for them are woken.
    pub(crate) fn release(&self, id: &str, partitions: &[TopicPartition], counts: Counts<'_>) {
        match &self.store {
            Store::Local(st) => self.edit_local(st, Some(id), |st| st.release(id, partitions)),
            Store::Shared(s) => match s.release(id, partitions, counts) {
                Ok(changed) => self.after_shared(changed, Some(id)),
                Err(e) => ::log::warn!("group {:?}: member {id} releasing: {e}", self.name),
            },
        }
    }

    /// The earliest moment member `id` should look at the group again:
    /// another member's poll deadline passes (so a waiting member wakes to
    /// expel it) or, shared, the next look for dead members.
    pub(crate) fn next_expiry(&self, id: &str) -> Option<Instant> {
        let ms = match &self.store {
            Store::Local(st) => lock(st).next_expiry_ms(id),
            Store::Shared(s) => s.next_look_ms(id),
        };
        ms.map(instant_of)
    }

    /// The generation, the current members and what each owns.
    pub(crate) fn describe(&self, counts: Counts<'_>) -> (u64, Vec<(String, Vec<TopicPartition>)>) {
        match &self.store {
            Store::Local(st) => lock(st).describe(),
            Store::Shared(s) => match s.current(counts) {
                Ok(st) => st.describe(),
                Err(e) => {
                    ::log::warn!("group {:?}: {e}", self.name);
                    (0, Vec::new())
                }
            },
        }
    }

    /// The committed offsets, read again first if another process may
    /// have changed them (in a shared group: unless the lock page says
    /// that no process wrote them since this one last read or wrote them).
    fn offsets(&self) -> std::sync::MutexGuard<'_, OffsetStore> {
        // Asked before the offsets are locked: a commit holds the group's
        // state, then the offsets.
        let as_seen = match &self.store {
            Store::Shared(s) => s.offsets_as_seen(),
            Store::Local(_) => false,
        };
        let mut o = lock(&self.offsets);
        if self.follows_file && !as_seen {
            if let Err(e) = o.refresh() {
                ::log::warn!("group {:?}: reading committed offsets: {e}", self.name);
            }
        }
        o
    }

    /// Forgets the committed offsets of a deleted topic.
    pub(crate) fn remove_topic(&self, topic: &str) -> Result<()> {
        match &self.store {
            Store::Local(_) => lock(&self.offsets).remove_topic(topic),
            Store::Shared(s) => s.with_lock(true, |_, seen| {
                let mut o = lock(&self.offsets);
                if !seen {
                    if let Err(e) = o.refresh() {
                        ::log::warn!("group {:?}: reading committed offsets: {e}", self.name);
                    }
                }
                o.remove_topic(topic)
            }),
        }
    }

    /// Every committed offset of the group.
    pub(crate) fn all_committed(&self) -> Vec<(String, u32, CommittedOffset)> {
        self.offsets().all()
    }

    /// The committed offset of a partition.
    pub(crate) fn committed(&self, topic: &str, partition: u32) -> Option<CommittedOffset> {
        self.offsets().get(topic, partition).cloned()
    }

    /// Where a reader of the group resumes on a partition: the committed
    /// offset, or, when that was found beyond the end of the log, an
    /// out-of-range mark with the end the log had then.
    pub(crate) fn resume(&self, topic: &str, partition: u32) -> Option<Resume> {
        let offsets = self.offsets();
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

    /// Fails with [`Error::CommitFailed`] unless `member` owns every
    /// partition of `offsets` (what [`Group::commit`] checks).
    pub(crate) fn check_owned(&self, member: &str, offsets: &[(String, u32)]) -> Result<()> {
        let check = |st: &State| self.owned_by(st, member, offsets.iter().map(|(t, p)| (t, *p)));
        match &self.store {
            Store::Local(st) => check(&lock(st)),
            Store::Shared(s) => s.with_lock(false, |st, _| check(st)),
        }
    }

    fn owned_by<'a>(
        &self,
        st: &State,
        id: &str,
        mut parts: impl Iterator<Item = (&'a String, u32)>,
    ) -> Result<()> {
        match parts.find(|(t, p)| !st.owns(id, &((*t).clone(), *p))) {
            Some((t, p)) => Err(Error::CommitFailed(format!(
                "{t}/{p} is not owned by this member of group {:?} (it was revoked in a rebalance)",
                self.name
            ))),
            None => Ok(()),
        }
    }

    /// Syncs the commits this process made with `commit_acks` 1 or 0 (at
    /// close: a clean close leaves every commit durable).
    pub(crate) fn sync_commits(&self) -> Result<()> {
        let pending = lock(&self.offsets).pending();
        match pending {
            Some(p) => p
                .syncer
                .wait(p.ticket, || lock(&self.offsets).sync_target()),
            None => Ok(()),
        }
    }

    /// Commits offsets durably (synced). With `member`, only partitions
    /// it owns.
    pub(crate) fn commit(
        &self,
        member: Option<&str>,
        offsets: &[(String, u32, CommittedOffset)],
    ) -> Result<()> {
        self.commit_as(member, offsets, true)
    }

    /// Commits offsets; with `durable`, returns once they are synced
    /// (commits made meanwhile, by any thread, share the sync), else once
    /// they are written to the operating system. With `member`, only
    /// partitions it owns.
    pub(crate) fn commit_as(
        &self,
        member: Option<&str>,
        offsets: &[(String, u32, CommittedOffset)],
        durable: bool,
    ) -> Result<()> {
        let check = |st: &State| -> Result<()> {
            let Some(id) = member else { return Ok(()) };
            self.owned_by(st, id, offsets.iter().map(|(t, p, _)| (t, *p)))
        };
        let pending = match &self.store {
            Store::Local(st) => {
                check(&lock(st))?;
                lock(&self.offsets).commit(offsets, durable)?
            }
            // Under the group's lock: no hand-over in another process
            // comes between the check and the write.
            // The offsets are read again unless no process wrote them
            // since this one last read or wrote them.
            Store::Shared(s) => s.with_lock(true, |st, seen| {
                check(st)?;
                let mut o = lock(&self.offsets);
                if !seen {
                    o.refresh()?;
                }
                o.commit(offsets, durable)
            })?,
        };
        match pending {
            // Without the store's lock: commits made meanwhile append,
            // and one sync covers them all.
            Some(p) => p
                .syncer
                .wait(p.ticket, || lock(&self.offsets).sync_target()),
            None => Ok(()),
        }
    }
}

/// The groups of one data directory.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    /// Shared with other processes (their state in files), this
    /// process's registration in the data directory; `None`: kept in
    /// memory.
    shared: Option<Arc<ProcessSlot>>,
    /// Whether groups are opened for a read-only handle (see
    /// [`Group::open_read_only`]).
    read_only: bool,
    map: Mutex<HashMap<String, Arc<Group>>>,
    /// Groups (storage names) whose offsets file could not be read: the
    /// error each use of them gets.
    damaged: Mutex<HashMap<String, Error>>,
}

impl Groups {
    /// The groups of a data directory shared with other processes, for
    /// the process registered there as `slot`.
    pub(crate) fn shared(slot: Arc<ProcessSlot>) -> Groups {
        Groups {
            shared: Some(slot),
            ..Groups::default()
        }
    }

    /// The groups of a data directory seen through a read-only handle.
    pub(crate) fn read_only() -> Groups {
        Groups {
            read_only: true,
            ..Groups::default()
        }
    }

    /// Opens every group that has committed offsets in `dir`.
    pub(crate) fn load_all(&self, dir: &Path, mode: u32) -> Result<()> {
        let gdir = dir.join("groups");
        let Ok(entries) = std::fs::read_dir(&gdir) else {
            return Ok(());
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let key = name.strip_suffix(".offsets").or_else(|| {
                // Shared, a group may have members and nothing committed.
                name.strip_suffix(".state")
                    .filter(|_| self.shared.is_some())
            });
            if let Some(g) = key {
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

    /// Removes every member this engine holds from every group (see
    /// [`Group::leave_all`]).
    pub(crate) fn leave_all(&self, counts: Counts<'_>) {
        for g in self.all() {
            g.leave_all(counts);
        }
    }

    /// Syncs every group's commits (see [`Group::sync_commits`]); returns
    /// the first error.
    pub(crate) fn sync_commits(&self) -> Result<()> {
        let mut first = Ok(());
        for g in self.all() {
            let r = g.sync_commits();
            if first.is_ok() {
                first = r;
            }
        }
        first
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
        let g = Arc::new(if self.read_only {
            Group::open_read_only(dir, name, mode)?
        } else if let Some(slot) = &self.shared {
            Group::open_shared(dir, name, mode, slot)?
        } else {
            Group::open(dir, name, mode)?
        });
        map.insert(name.to_owned(), Arc::clone(&g));
        Ok(g)
    }
}

#[cfg(test)]
mod shared_tests;
