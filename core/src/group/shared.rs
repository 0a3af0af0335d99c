//! A consumer group shared by several processes: its state in files that
//! every member's process reads and writes under one lock.
//!
//! Files of group `g` in `<dir>/groups/`:
//! - `g.lock`: the group's lock, a [`LockPage`] held for each
//!   read-modify-write of the state and for each commit (short: read,
//!   change, write back). Beside the lock's words, the page holds a
//!   version of the state file and one of the group's committed offsets
//!   (`g.offsets` and its journal), each bumped by the holder that wrote
//!   them: a holder whose process last saw the version the page holds
//!   reads it again (a commit that finds both as its process left them
//!   makes one system call, its append). A lock taken over from
//!   a dead holder, or a page new or foreign, gets new versions, which no
//!   process has seen: every process reads then.
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
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::state::{Counts, Handover, MemberSpec, State};
use crate::clock::monotonic_ms;
use crate::error::{Error, Result};
use crate::shared::{
    LiveLock, Liveness, LockPage, OpLock, ProcessSlot, SharedPage, Word32, Word64, FREE_AT,
    PAGE_LEN,
};
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

/// The magic of the lock page (`g.lock`).
const LOCK_MAGIC: [u8; 8] = *b"MQGRPL01";
/// The state file's version: bumped by each holder that writes it.
const STATE_VERSION: Word64 = Word64::at(FREE_AT);
/// The committed offsets' version: bumped by each holder that writes them.
const OFFSETS_VERSION: Word64 = Word64::at(FREE_AT + 8);

/// A version no process has seen: random, so that a page reset or taken
/// over never comes back to a version some process saw before.
fn fresh_version() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// The name of member `id`'s liveness file: `<id>.live`, or, for an id
/// too long for a file name (a client id of more than 239 bytes), the
/// first 200 bytes of the id, a `~` and the CRC32C of the whole id (every
/// process derives the same name; ids hold no `~`).
fn live_file_name(id: &str) -> String {
    const MAX_FILE_NAME: usize = 255;
    let name = format!("{id}.live");
    if name.len() <= MAX_FILE_NAME {
        return name;
    }
    let h = crate::log::crc::crc32c(id.as_bytes());
    let mut keep = id.len().min(200);
    while !id.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}~{h:08x}.live", &id[..keep])
}

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
    /// The state as last read or written.
    state: State,
    /// The state file's version (in the lock page) that `state` is, when
    /// known: `None` after a write that failed.
    state_seen: Option<u64>,
    /// The committed offsets' version (in the lock page) that the group's
    /// offset store holds, when known.
    offsets_seen: Option<u64>,
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
    /// The group's lock, held under this process's token.
    lock: Arc<LockPage>,
    /// This process's registration, kept while the group may hold its
    /// lock (a token let go is taken for a dead holder's).
    _slot: Arc<ProcessSlot>,
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
    /// Opens the shared state of group (storage name) `key` in data
    /// directory `dir` (whose `groups` exists), for the process registered
    /// there as `slot`.
    pub(crate) fn open(
        dir: &Path,
        key: &str,
        mode: u32,
        slot: Arc<ProcessSlot>,
    ) -> Result<SharedStore> {
        let gdir = dir.join("groups");
        let lock = LockPage::open(&gdir.join(format!("{key}.lock")), mode, dir, slot.token())?;
        let lives_dir = gdir.join(format!("{key}.members"));
        crate::private_dir::create_dir_all(&lives_dir, mode)?;
        let page = SharedPage::open(&gdir.join(format!("{key}.shm")), mode)?;
        let store = SharedStore {
            group: crate::offsets::group_of_key(key).to_owned(),
            state_path: gdir.join(format!("{key}.state")),
            lives_dir,
            page,
            lock,
            _slot: slot,
            mode,
            cache: Mutex::new(Cache {
                state: State::default(),
                state_seen: None,
                offsets_seen: None,
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
        self.lives_dir.join(live_file_name(id))
    }

    /// Reads the state file; a missing one is an empty state, a damaged
    /// one too (logged, and `None`).
    fn load(&self) -> Option<State> {
        match crate::atomic_file::read_small(&self.state_path) {
            Ok(Some(bytes)) => match serde_json::from_slice(&bytes) {
                Ok(st) => Some(st),
                Err(e) => {
                    ::log::error!(
                        "group {:?}: state file {} is not valid ({e}); starting from an empty state, members join again",
                        self.group,
                        self.state_path.display()
                    );
                    None
                }
            },
            Ok(None) => Some(State::default()),
            Err(e) => {
                ::log::error!(
                    "group {:?}: reading {}: {e}; starting from an empty state, members join again",
                    self.group,
                    self.state_path.display()
                );
                None
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

    /// Takes the group's lock. A lock taken over from a dead holder (who
    /// may have written without saying so) or a page new or foreign gets
    /// versions no process has seen.
    fn take(&self) -> OpLock {
        let (held, stolen) = self.lock.lock();
        if stolen || !self.lock.has_magic(LOCK_MAGIC) {
            self.lock.store64(STATE_VERSION, fresh_version());
            self.lock.store64(OFFSETS_VERSION, fresh_version());
            self.lock.set_magic(LOCK_MAGIC);
        }
        held
    }

    /// Bumps the version at `w` (the lock held); returns the new one.
    fn bump(&self, w: Word64) -> u64 {
        let v = self.lock.load64(w).wrapping_add(1);
        self.lock.store64(w, v);
        v
    }

    /// The state as the file has it, the lock held: the cached one when
    /// the page says the file is the version it was read or written as.
    /// A damaged file is replaced by an empty state, with a new version
    /// and epoch: every process reads the same state then, and members
    /// learn at their next look that they were removed.
    fn state_now(&self, c: &mut Cache) {
        let mut version = self.lock.load64(STATE_VERSION);
        if c.state_seen == Some(version) {
            return;
        }
        c.state = self.load().unwrap_or_else(|| {
            let empty = State::default();
            if let Err(e) = self.store(&empty) {
                ::log::warn!("group {:?}: replacing its damaged state: {e}", self.group);
            }
            version = self.bump(STATE_VERSION);
            self.page.add64(EPOCH, 1);
            self.page.add32(CHANGES, 1);
            self.page.wake32(CHANGES);
            empty
        });
        c.state_seen = Some(version);
        c.epoch = self.epoch();
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
        let _held = self.take();
        self.locked_inner(&mut c, counts, f)
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
        self.state_now(c);
        let loaded = c.state.clone();
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
            c.state_seen = None;
            let stored = self.store(&st);
            // Written or not, the file may have changed.
            let version = self.bump(STATE_VERSION);
            stored?;
            c.state_seen = Some(version);
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
    /// must not interleave with a hand-over. Reads the state file only
    /// when it changed since this process last read or wrote it, and
    /// writes nothing back: members' poll times stay in their slots
    /// (nothing here needs them). `f` also learns whether the group's
    /// offset store holds the committed offsets as they are (no process
    /// wrote them since it last read or wrote them); with
    /// `writes_offsets`, `f` may write them, and the next holders learn
    /// that they changed.
    pub(crate) fn with_lock<R>(
        &self,
        writes_offsets: bool,
        f: impl FnOnce(&State, bool) -> Result<R>,
    ) -> Result<R> {
        let mut c = lock(&self.cache);
        let _held = self.take();
        self.state_now(&mut c);
        let offsets_seen = c.offsets_seen == Some(self.lock.load64(OFFSETS_VERSION));
        let res = f(&c.state, offsets_seen);
        if writes_offsets {
            let version = self.bump(OFFSETS_VERSION);
            c.offsets_seen = res.is_ok().then_some(version);
        }
        res
    }

    /// Whether the committed offsets are, as far as the lock page says,
    /// as this process last read or wrote them. Read without the lock: a
    /// commit another process is making now may not be counted yet, as
    /// when the files themselves are read without it.
    pub(crate) fn offsets_as_seen(&self) -> bool {
        let c = lock(&self.cache);
        self.lock.has_magic(LOCK_MAGIC) && c.offsets_seen == Some(self.lock.load64(OFFSETS_VERSION))
    }

    /// Whether any process has members in the group now.
    pub(crate) fn has_members(&self) -> bool {
        !lock(&self.cache).state.members.is_empty()
    }

    /// The members of this process (those whose liveness lock it holds).
    pub(crate) fn own_members(&self) -> Vec<String> {
        lock(&self.cache).lives.keys().cloned().collect()
    }
}
