//! A consumer group shared by several processes: its state in files that
//! every member's process reads and writes under one lock.
//!
//! Files of group `g` in `<dir>/groups/`:
//! - `g.lock`: an exclusive `flock` held for each read-modify-write of the
//!   state (short: read, change, write back).
//! - `g.state`: the [`State`] as JSON, replaced atomically (a temporary
//!   file renamed over it). It is not synced: membership describes live
//!   processes, and after a power loss none of them is.
//! - `g.shm`: a [`SharedPage`] with the group's epoch (bumped at every
//!   rebalance and release, so that a member learns of a change with one
//!   load, without the lock), a word other processes may wait on, and one
//!   slot per member where it records its polls without the lock.
//! - `g.members/<id>.live`: held locked by the member's process for as
//!   long as the member exists. A member whose file can be locked by
//!   someone else is dead (its process ended): the next member to take the
//!   group's lock removes it. See [`crate::shared::LiveLock`].
//!
//! A poll takes the lock only when it has something to learn: the epoch
//! changed since the member's last look, the topics' partition counts
//! changed, another member's poll deadline passed, or [`PROBE_INTERVAL_MS`]
//! went by (to look for dead members). Otherwise it writes its poll time
//! into its slot and goes on.
//!
//! Every value read from these files is untrusted: a state file that does
//! not parse is replaced by an empty state (its members find themselves
//! removed and join again), a page with a foreign header is reset, and a
//! slot whose tag does not match its member is ignored.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::state::{Counts, Handover, MemberSpec, State};
use crate::clock::monotonic_ms;
use crate::error::{Error, IoContext, Result};
use crate::shared::{LiveLock, Liveness, SharedPage, Word32, Word64, PAGE_LEN};
use crate::sync::lock;

/// How often a polling member looks for dead members, in ms.
pub(crate) const PROBE_INTERVAL_MS: u64 = 100;

const MAGIC: [u8; 8] = *b"MQGROUP1";
const EPOCH: Word64 = Word64::at(8);
/// Bumped with the epoch, for waiters (32 bits: a futex word).
const CHANGES: Word32 = Word32::at(16);
const SLOTS_AT: usize = 64;
const SLOT_LEN: usize = 16;
/// The most members a shared group holds at once.
pub(crate) const MAX_MEMBERS: usize = (PAGE_LEN - SLOTS_AT) / SLOT_LEN;

/// A member's slot: a tag naming the member, then its last poll.
fn slot_words(slot: u32) -> Option<(Word64, Word64)> {
    let at = SLOTS_AT.checked_add((slot as usize).checked_mul(SLOT_LEN)?)?;
    Some((Word64::checked(at)?, Word64::checked(at + 8)?))
}

/// The tag of member `id` in its slot (never 0, the tag of a free slot).
fn tag_of(id: &str) -> u64 {
    // FNV-1a: stable across processes and builds.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h | 1
}

#[derive(Debug)]
struct Cache {
    lock_file: File,
    /// The state as last read or written.
    state: State,
    /// The page's epoch when `state` was read or written.
    epoch: u64,
    /// For each member of this process, the epoch when it last took the
    /// lock: a member whose epoch is still current has nothing to learn.
    synced: HashMap<String, u64>,
    /// The liveness locks of this process's members.
    lives: HashMap<String, LiveLock>,
    /// When a poll next takes the lock to look for dead members.
    next_probe_ms: u64,
}

/// The state of one group shared by several processes (see the module
/// documentation).
#[derive(Debug)]
pub(crate) struct SharedStore {
    group: String,
    state_path: PathBuf,
    lives_dir: PathBuf,
    page: SharedPage,
    mode: u32,
    cache: Mutex<Cache>,
}

/// What a change did, for the caller to wake its waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Changed {
    /// The epoch moved: members may have something to do.
    Yes,
    /// Nothing another member must learn.
    No,
}

impl SharedStore {
    /// Opens the shared state of group (storage name) `key` in `gdir`
    /// (`<dir>/groups`, which exists).
    pub(crate) fn open(gdir: &Path, key: &str, mode: u32) -> Result<SharedStore> {
        let lock_path = gdir.join(format!("{key}.lock"));
        let lock_file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .ctx(|| format!("opening {}", lock_path.display()))?;
        let lives_dir = gdir.join(format!("{key}.members"));
        crate::private_dir::create_dir_all(&lives_dir, mode)?;
        let page = SharedPage::open(&gdir.join(format!("{key}.shm")), mode)?;
        let store = SharedStore {
            group: crate::offsets::group_of_key(key).to_owned(),
            state_path: gdir.join(format!("{key}.state")),
            lives_dir,
            page,
            mode,
            cache: Mutex::new(Cache {
                lock_file,
                state: State::default(),
                epoch: u64::MAX,
                synced: HashMap::new(),
                lives: HashMap::new(),
                next_probe_ms: 0,
            }),
        };
        // Reads the state (and resets a foreign page) under the lock.
        store.locked(None, |_, _| Ok(()))?;
        Ok(store)
    }

    /// The group's epoch (one load of the shared page).
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.page.load64(EPOCH)
    }

    fn live_path(&self, id: &str) -> PathBuf {
        self.lives_dir.join(format!("{id}.live"))
    }

    /// Reads the state file; a missing one is an empty state, a damaged
    /// one too (logged).
    fn load(&self) -> State {
        match crate::atomic_file::read_small(&self.state_path) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                ::log::error!(
                    "group {:?}: state file {} is not valid ({e}); starting from an empty state, members join again",
                    self.group,
                    self.state_path.display()
                );
                State::default()
            }),
            Ok(None) => State::default(),
            Err(e) => {
                ::log::error!(
                    "group {:?}: reading {}: {e}; starting from an empty state, members join again",
                    self.group,
                    self.state_path.display()
                );
                State::default()
            }
        }
    }

    fn store(&self, st: &State) -> Result<()> {
        let bytes = serde_json::to_vec(st)
            .map_err(|e| Error::InvalidArgument(format!("group state does not serialise: {e}")))?;
        crate::atomic_file::write_atomic(&self.state_path, &bytes, self.mode, false)
    }

    /// Members' poll times from their slots, where newer than the state's.
    fn merge_polls(&self, st: &mut State) {
        for (id, m) in &mut st.members {
            if let Some((tag, poll)) = slot_words(m.slot) {
                if self.page.load64(tag) == tag_of(id) {
                    m.last_poll_ms = m.last_poll_ms.max(self.page.load64(poll));
                }
            }
        }
    }

    /// The earliest poll deadline of a member other than `id`, with the
    /// poll times of the slots.
    fn next_deadline(&self, st: &State, id: &str) -> Option<u64> {
        st.members
            .iter()
            .filter(|(mid, _)| *mid != id)
            .map(|(mid, m)| {
                let mut last = m.last_poll_ms;
                if let Some((tag, poll)) = slot_words(m.slot) {
                    if self.page.load64(tag) == tag_of(mid) {
                        last = last.max(self.page.load64(poll));
                    }
                }
                let interval =
                    u64::try_from(m.spec.max_poll_interval.as_millis()).unwrap_or(u64::MAX);
                last.saturating_add(interval)
            })
            .min()
    }

    fn record_poll(&self, id: &str, slot: u32, now_ms: u64) {
        if let Some((tag, poll)) = slot_words(slot) {
            self.page.store64(poll, now_ms);
            self.page.store64(tag, tag_of(id));
        }
    }

    fn clear_slot(&self, id: &str, slot: u32) {
        if let Some((tag, _)) = slot_words(slot) {
            if self.page.load64(tag) == tag_of(id) {
                self.page.store64(tag, 0);
            }
        }
    }

    /// Runs `f` on the state under the group's lock: reads the state,
    /// removes dead members, runs `f`, writes the state back if it changed
    /// and bumps the epoch if members must learn of it.
    ///
    /// Without `counts` (a commit's check), dead members are left for the
    /// next look that has them: removing one rebalances, which needs the
    /// topics' partition counts.
    fn locked<R>(
        &self,
        counts: Option<Counts<'_>>,
        f: impl FnOnce(&mut Cache, &mut State) -> Result<R>,
    ) -> Result<(R, Changed)> {
        let mut c = lock(&self.cache);
        c.lock_file
            .lock()
            .ctx(|| format!("locking the state of group {:?}", self.group))?;
        let res = self.locked_inner(&mut c, counts, f);
        let _ = c.lock_file.unlock();
        res
    }

    fn locked_inner<R>(
        &self,
        c: &mut Cache,
        counts: Option<Counts<'_>>,
        f: impl FnOnce(&mut Cache, &mut State) -> Result<R>,
    ) -> Result<(R, Changed)> {
        if !self.page.has_magic(MAGIC) {
            // New, or written by something else: members' slots are lost
            // (the state file still has their last polls).
            self.page.reset(MAGIC);
        }
        let loaded = self.load();
        let mut st = loaded.clone();
        self.merge_polls(&mut st);
        let dead: Vec<String> = match counts {
            None => Vec::new(),
            Some(_) => st
                .members
                .keys()
                .filter(|id| !c.lives.contains_key(*id))
                .filter(|id| {
                    matches!(
                        LiveLock::probe(&self.live_path(id)),
                        Ok(Liveness::Dead | Liveness::Missing)
                    )
                })
                .cloned()
                .collect(),
        };
        for id in &dead {
            ::log::warn!(
                "group {}: the process of member {id} ended; removed",
                self.group
            );
            if let Some(m) = st.members.get(id) {
                self.clear_slot(id, m.slot);
            }
            let _ = std::fs::remove_file(self.live_path(id));
        }
        if let Some(counts) = counts {
            st.remove(&dead, counts);
        }
        // Members of this process that the state no longer has (expelled,
        // or lost with a damaged state file) are over: their locks go.
        c.lives.retain(|id, live| {
            let keep = st.members.contains_key(id);
            if !keep {
                let _ = std::fs::remove_file(live.path());
            }
            keep
        });
        let changes = st.changes;
        let r = f(c, &mut st)?;
        if st != loaded {
            self.store(&st)?;
        }
        let changed = if st.changes == changes {
            Changed::No
        } else {
            self.page.add64(EPOCH, 1);
            self.page.add32(CHANGES, 1);
            self.page.wake32(CHANGES);
            Changed::Yes
        };
        c.epoch = self.page.load64(EPOCH);
        c.state = st;
        Ok((r, changed))
    }

    /// Adds a member of this process; returns its id.
    pub(crate) fn join(
        &self,
        client: &str,
        spec: MemberSpec,
        counts: Counts<'_>,
    ) -> Result<(String, Changed)> {
        let now = monotonic_ms();
        self.locked(Some(counts), |c, st| {
            let used: std::collections::HashSet<u32> =
                st.members.values().map(|m| m.slot).collect();
            let slot = (0..MAX_MEMBERS as u32)
                .find(|s| !used.contains(s))
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "group {:?} has {MAX_MEMBERS} members, the most a group shared by processes holds",
                        self.group
                    ))
                })?;
            // Ids are never reused while their holder lives, even when
            // the state was lost (a damaged file) and counts again from 1.
            while LiveLock::probe(&self.live_path(&st.next_id(client)))? == Liveness::Alive {
                st.next_member += 1;
            }
            let id = st.join(&self.group, client, spec, counts, now, slot)?;
            // Held before the state naming the member is written (below,
            // under the same lock), so no one can find the member dead.
            let live = LiveLock::try_hold(&self.live_path(&id), self.mode)?.ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "group {:?}: the liveness file of new member {id} is held by another process",
                    self.group
                ))
            })?;
            self.record_poll(&id, slot, now);
            c.lives.insert(id.clone(), live);
            Ok(id)
        })
        .map(|(id, changed)| {
            lock(&self.cache).synced.remove(&id);
            (id, changed)
        })
    }

    /// Changes a member's subscription.
    pub(crate) fn update(&self, id: &str, spec: MemberSpec, counts: Counts<'_>) -> Result<Changed> {
        self.locked(Some(counts), |_, st| {
            st.update(id, spec, counts);
            Ok(())
        })
        .map(|((), c)| c)
    }

    /// Removes a member of this process and ends its liveness lock.
    pub(crate) fn leave(&self, id: &str, counts: Counts<'_>) -> Result<Changed> {
        let ((), changed) = self.locked(Some(counts), |c, st| {
            if let Some(m) = st.members.get(id) {
                self.clear_slot(id, m.slot);
            }
            st.remove(&[id.to_owned()], counts);
            c.synced.remove(id);
            Ok(())
        })?;
        // Gone from the state first, then the file: a probe in between
        // finds it missing, which is what it is.
        let live = lock(&self.cache).lives.remove(id);
        if let Some(live) = live {
            let _ = std::fs::remove_file(live.path());
        }
        Ok(changed)
    }

    /// Whether `id` is still a member.
    pub(crate) fn is_member(&self, id: &str, counts: Counts<'_>) -> Result<bool> {
        {
            let c = lock(&self.cache);
            if c.epoch == self.epoch() && self.page.has_magic(MAGIC) {
                return Ok(c.state.members.contains_key(id));
            }
        }
        self.locked(Some(counts), |_, st| Ok(st.members.contains_key(id)))
            .map(|(b, _)| b)
    }

    /// Member `id` polls (see [`State::sync`]); takes the lock only when
    /// there is something to learn (see the module documentation).
    pub(crate) fn sync(&self, id: &str, counts: Counts<'_>) -> Result<(Handover, Changed)> {
        let now = monotonic_ms();
        {
            let c = lock(&self.cache);
            let epoch = self.epoch();
            if let Some(me) = c.state.members.get(id) {
                if c.synced.get(id) == Some(&epoch)
                    && c.epoch == epoch
                    && now < c.next_probe_ms
                    && self.page.has_magic(MAGIC)
                    && !c.state.partitions_changed(counts)
                {
                    self.record_poll(id, me.slot, now);
                    if self.next_deadline(&c.state, id).is_none_or(|d| now <= d) {
                        return Ok((
                            Handover {
                                generation: c.state.generation,
                                ..Handover::default()
                            },
                            Changed::No,
                        ));
                    }
                }
            }
        }
        let (h, changed) = self.locked(Some(counts), |c, st| {
            let h = st.sync(&self.group, id, counts, now)?;
            if let Some(m) = st.members.get(id) {
                self.record_poll(id, m.slot, now);
            }
            c.next_probe_ms = now + PROBE_INTERVAL_MS;
            Ok(h)
        })?;
        let mut c = lock(&self.cache);
        let epoch = c.epoch;
        c.synced.insert(id.to_owned(), epoch);
        Ok((h, changed))
    }

    /// Member `id` gives up `partitions`.
    pub(crate) fn release(
        &self,
        id: &str,
        partitions: &[crate::assign::TopicPartition],
        counts: Counts<'_>,
    ) -> Result<Changed> {
        self.locked(Some(counts), |_, st| {
            st.release(id, partitions);
            Ok(())
        })
        .map(|((), c)| c)
    }

    /// The earliest moment `id` should look at the group again: another
    /// member's poll deadline, or the next look for dead members (monotonic
    /// ms).
    pub(crate) fn next_look_ms(&self, id: &str) -> Option<u64> {
        let c = lock(&self.cache);
        let probe = (c.state.members.len() > 1).then_some(c.next_probe_ms);
        match (self.next_deadline(&c.state, id), probe) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The state as it is now (read under the lock).
    pub(crate) fn current(&self, counts: Counts<'_>) -> Result<State> {
        self.locked(Some(counts), |_, st| Ok(st.clone()))
            .map(|(s, _)| s)
    }

    /// Runs `f` on the state under the group's lock, without changing it:
    /// for a commit's ownership check and write, which other processes
    /// must not interleave with a hand-over. Reads the state file only:
    /// members' poll times stay in their slots (nothing here needs them),
    /// so nothing is written back.
    pub(crate) fn with_lock<R>(&self, f: impl FnOnce(&State) -> Result<R>) -> Result<R> {
        let c = lock(&self.cache);
        c.lock_file
            .lock()
            .ctx(|| format!("locking the state of group {:?}", self.group))?;
        let res = f(&self.load());
        let _ = c.lock_file.unlock();
        res
    }

    /// Whether any process has members in the group now.
    pub(crate) fn has_members(&self) -> bool {
        !lock(&self.cache).state.members.is_empty()
    }
}
