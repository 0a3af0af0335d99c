//! Producer ids and named producers' epochs of one data directory, in
//! `<dir>/producers/registry.json` (written tmp + fsync + rename).
//!
//! Anonymous producers get a fresh id from a block reserved in the file,
//! so creating one rarely writes. A named producer keeps its id and gets a
//! new epoch each time a producer object is made under its name; the
//! newest object fences the older ones.
//!
//! In shared mode ([`Registry::open_shared`]) several processes use the
//! file: every change is a read-modify-write under an exclusive `flock` on
//! `<dir>/producers/registry.lock`, re-reading the file first, so that no
//! two processes hand out one id and a name's epoch goes up across all of
//! them. A producer learns that a newer one of its name started in another
//! process from the epochs page (`epochs`), one load per send; whatever
//! the page says that does not match is settled by the file, read under
//! the lock: the file is the truth, the page a cache.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::claim::{try_claim, Claimed};
use super::epochs::EpochPage;
use super::validate_producer_name;
use crate::atomic_file::write_atomic;
use crate::error::{Error, Result};
use crate::producer::ProducerAccessMode;
use crate::shared::LiveLock;
use crate::sync;

/// Ids reserved per write of the registry for anonymous producers.
const ID_BLOCK: i64 = 1024;

/// An identity without a slot in the epochs page.
const NO_SLOT: usize = usize::MAX;

#[derive(Debug, Default, Serialize, Deserialize)]
struct RegistryFile {
    /// First id not yet handed out or reserved.
    next_id: i64,
    /// Named producers: name -> (id, epoch).
    named: HashMap<String, NamedRecord>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct NamedRecord {
    id: i64,
    epoch: i16,
}

/// What the processes of a shared-mode directory share about the registry.
#[derive(Debug)]
struct Shared {
    /// Held around every read-modify-write of the file and every write to
    /// the page.
    lock_path: PathBuf,
    /// The registry file.
    file_path: PathBuf,
    mode: u32,
    page: EpochPage,
}

impl Shared {
    fn hold(&self) -> Result<LiveLock> {
        LiveLock::hold(&self.lock_path, self.mode)
    }
}

/// How a named identity watches for newer epochs from other processes.
#[derive(Debug)]
struct Watch {
    shared: Arc<Shared>,
    /// Its slot in the epochs page, or [`NO_SLOT`] when it has none (then
    /// it watches the page's version).
    slot: AtomicUsize,
    /// The page's version when the file was last read.
    seen_version: AtomicU64,
    /// Whether an unreadable registry has been reported.
    warned: AtomicBool,
}

/// The live identity of a named producer, shared by the registry and every
/// producer object made under the name in this process; the newest object
/// (in any process, in shared mode) fences the older.
#[derive(Debug)]
pub(crate) struct NamedIdentity {
    /// The producer id, stable across restarts.
    pub id: i64,
    name: String,
    /// The newest epoch this process knows of.
    newest: AtomicI16,
    /// Shared mode: where newer epochs of other processes show.
    watch: Option<Watch>,
}

impl NamedIdentity {
    fn new(id: i64, name: &str, epoch: i16, shared: Option<&Arc<Shared>>) -> NamedIdentity {
        NamedIdentity {
            id,
            name: name.to_owned(),
            newest: AtomicI16::new(epoch),
            watch: shared.map(|s| Watch {
                shared: Arc::clone(s),
                slot: AtomicUsize::new(NO_SLOT),
                seen_version: AtomicU64::new(0),
                warned: AtomicBool::new(false),
            }),
        }
    }

    /// The epoch of the newest producer of this name: a producer object
    /// whose epoch is lower is fenced.
    ///
    /// In exclusive mode, one atomic load. In shared mode, one more load
    /// of the epochs page; when the page does not say what this process
    /// expects (a newer producer elsewhere, or garbage), the registry file
    /// is read under the registry lock and decides. An unreadable file
    /// fences nothing (the partitions still refuse batches older than one
    /// they hold).
    #[inline]
    pub(crate) fn current_epoch(&self) -> i16 {
        let newest = self.newest.load(Ordering::Acquire);
        let Some(w) = &self.watch else {
            return newest;
        };
        let slot = w.slot.load(Ordering::Acquire);
        let fresh = if slot == NO_SLOT {
            w.shared.page.version() == w.seen_version.load(Ordering::Acquire)
        } else {
            w.shared.page.holds(slot, self.id, newest)
        };
        if fresh {
            newest
        } else {
            self.refresh(w)
        }
    }

    /// Reads this name's epoch from the registry file under the lock,
    /// and repairs the page to say it.
    #[cold]
    fn refresh(&self, w: &Watch) -> i16 {
        let sh = &w.shared;
        let unreadable = |e: Error| {
            if !w.warned.swap(true, Ordering::AcqRel) {
                ::log::warn!(
                    "producer {:?}: cannot check for a newer producer of its name in other \
                     processes ({e})",
                    self.name
                );
            }
            self.newest.load(Ordering::Acquire)
        };
        let _held = match sh.hold() {
            Ok(l) => l,
            Err(e) => return unreadable(e),
        };
        sh.page.ensure();
        let version = sh.page.version();
        let recorded = match Registry::read(&sh.file_path) {
            Ok(f) => f
                .named
                .get(&self.name)
                .filter(|r| r.id == self.id)
                .map(|r| r.epoch),
            Err(e) => return unreadable(e),
        };
        w.warned.store(false, Ordering::Release);
        let newest = self.newest.load(Ordering::Acquire);
        let current = recorded.map_or(newest, |e| e.max(newest));
        self.newest.fetch_max(current, Ordering::AcqRel);
        let slot = sh.page.slot_for(self.id, false);
        if let Some(s) = slot {
            sh.page.write(s, self.id, current);
        }
        w.slot.store(slot.unwrap_or(NO_SLOT), Ordering::Release);
        w.seen_version.store(version, Ordering::Release);
        current
    }

    /// Records epoch `epoch`, just handed out (under the registry lock in
    /// shared mode, with the page's `slot` and `version`).
    fn acquired(&self, epoch: i16, slot: Option<usize>, version: u64) {
        self.newest.fetch_max(epoch, Ordering::AcqRel);
        if let Some(w) = &self.watch {
            w.slot.store(slot.unwrap_or(NO_SLOT), Ordering::Release);
            w.seen_version.store(version, Ordering::Release);
        }
    }
}

#[derive(Debug)]
struct RegistryState {
    file: RegistryFile,
    /// Ids reserved in the file and not yet handed out: `[next, end)`.
    next_anonymous: i64,
    reserved_end: i64,
    live: HashMap<String, Arc<NamedIdentity>>,
}

/// Producer id allocation and named producers of one data directory.
#[derive(Debug)]
pub(crate) struct Registry {
    path: PathBuf,
    /// `<dir>/producers`.
    pdir: PathBuf,
    mode: u32,
    state: Mutex<RegistryState>,
    /// Why the registry file could not be read, when it is damaged: ids
    /// cannot be handed out safely (one already in the logs would make new
    /// records look like duplicates), so idempotent producers are refused
    /// with this error; everything else works.
    damage: Option<Error>,
    /// Shared mode: the lock and the epochs page.
    shared: Option<Arc<Shared>>,
}

impl Registry {
    /// Opens (or starts) the registry under `<dir>/producers/` for this
    /// process alone (exclusive mode). A damaged file leaves the registry
    /// unavailable (see [`Registry::damage`]) rather than failing.
    pub(crate) fn open(dir: &Path, mode: u32) -> Result<Registry> {
        Self::open_with(dir, mode, false)
    }

    /// Opens (or starts) the registry under `<dir>/producers/` for use by
    /// several processes at once (shared mode): every change re-reads the
    /// file under `registry.lock`, and named producers' epochs are
    /// published in `epochs.shm`. A damaged file is handled as by
    /// [`Registry::open`].
    pub(crate) fn open_shared(dir: &Path, mode: u32) -> Result<Registry> {
        Self::open_with(dir, mode, true)
    }

    fn open_with(dir: &Path, mode: u32, shared: bool) -> Result<Registry> {
        let pdir = dir.join("producers");
        crate::private_dir::create_dir_all(&pdir, mode)?;
        let path = pdir.join("registry.json");
        let shared = if shared {
            let sh = Shared {
                lock_path: pdir.join("registry.lock"),
                file_path: path.clone(),
                mode,
                page: EpochPage::open(&pdir.join("epochs.shm"), mode)?,
            };
            let held = sh.hold()?;
            sh.page.ensure();
            drop(held);
            Some(Arc::new(sh))
        } else {
            None
        };
        // A reader needs no lock: the file is replaced whole by a rename.
        match Self::read(&path) {
            Ok(file) => Ok(Self::with(path, mode, file, None, shared)),
            Err(e) if crate::broker::is_damage(&e) => {
                ::log::error!(
                    "the producer registry is unavailable ({e}): idempotent producers are \
                     refused until it is repaired or removed"
                );
                Ok(Self::with(
                    path,
                    mode,
                    RegistryFile::default(),
                    Some(e),
                    shared,
                ))
            }
            Err(e) => Err(e),
        }
    }

    fn with(
        path: PathBuf,
        mode: u32,
        file: RegistryFile,
        damage: Option<Error>,
        shared: Option<Arc<Shared>>,
    ) -> Registry {
        let next = file.next_id;
        Registry {
            pdir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            path,
            mode,
            state: Mutex::new(RegistryState {
                file,
                next_anonymous: next,
                reserved_end: next,
                live: HashMap::new(),
            }),
            damage,
            shared,
        }
    }

    /// The error idempotent producers get while the registry is damaged.
    pub(crate) fn damage(&self) -> Option<Error> {
        self.damage.as_ref().map(Error::duplicate)
    }

    fn check_usable(&self) -> Result<()> {
        match &self.damage {
            Some(e) => Err(e.duplicate()),
            None => Ok(()),
        }
    }

    fn read(path: &Path) -> Result<RegistryFile> {
        let path = path.to_owned();
        let file = match crate::atomic_file::read_small(&path)? {
            Some(bytes) => {
                serde_json::from_slice::<RegistryFile>(&bytes).map_err(|e| Error::Corrupt {
                    path: path.clone(),
                    position: e.column() as u64,
                    reason: format!("producer registry is not valid: {e}"),
                })?
            }
            None => RegistryFile::default(),
        };
        if file.next_id < 0
            || file
                .named
                .values()
                .any(|r| r.id < 0 || r.id >= file.next_id)
        {
            return Err(Error::Corrupt {
                path,
                position: 0,
                reason: "producer registry holds ids out of range".into(),
            });
        }
        Ok(file)
    }

    fn save(&self, file: &RegistryFile) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(file).expect("registry serialises");
        write_atomic(&self.path, &bytes, self.mode, true)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryState> {
        sync::lock(&self.state)
    }

    /// Shared mode: takes the registry lock and reads the file again, into
    /// `st`, before a change. Nothing in exclusive mode (the file in
    /// memory is the truth).
    fn begin(&self, st: &mut RegistryState) -> Result<Option<LiveLock>> {
        let Some(sh) = &self.shared else {
            return Ok(None);
        };
        let held = sh.hold()?;
        st.file = Self::read(&self.path)?;
        Ok(Some(held))
    }

    /// A fresh id for an anonymous producer (epoch 0).
    pub(crate) fn allocate_anonymous(&self) -> Result<i64> {
        self.check_usable()?;
        let mut st = self.lock();
        if st.next_anonymous == st.reserved_end {
            let _held = self.begin(&mut st)?;
            let end = st.file.next_id + ID_BLOCK;
            let old = st.file.next_id;
            st.file.next_id = end;
            if let Err(e) = self.save(&st.file) {
                st.file.next_id = old;
                return Err(e);
            }
            st.next_anonymous = old;
            st.reserved_end = end;
        }
        let id = st.next_anonymous;
        st.next_anonymous += 1;
        Ok(id)
    }

    /// The id of the producer named `name` (allocated on first use) and a new
    /// epoch, which fences every older object of that name (in every
    /// process, in shared mode): the `ExclusiveWithFencing` access mode.
    #[cfg(test)]
    pub(crate) fn acquire_named(&self, name: &str) -> Result<(Arc<NamedIdentity>, i16)> {
        let (ident, epoch, _) = self.acquire_named_as(
            name,
            ProducerAccessMode::ExclusiveWithFencing,
            Duration::ZERO,
        )?;
        Ok((ident, epoch))
    }

    /// The id and epoch of a producer named `name` opening in access mode
    /// `mode`, with the claim on the name it holds while open (see
    /// `claim`). [`Error::ProducerBusy`] when an open producer of the name
    /// excludes it; in `WaitForExclusive`, waits for them to close for at
    /// most `max_block`, then [`Error::Timeout`]. A refused producer
    /// changes nothing.
    pub(crate) fn acquire_named_as(
        &self,
        name: &str,
        mode: ProducerAccessMode,
        max_block: Duration,
    ) -> Result<(Arc<NamedIdentity>, i16, Option<LiveLock>)> {
        validate_producer_name(name)?;
        self.acquire_key_as(name, mode, max_block)
    }

    /// The id and a new epoch of the transactional producer `txn_id` (the
    /// same naming rules as producer names), which fences every older
    /// producer with that transactional id. Kept apart from producer names
    /// (`txn:` before it in the registry: a producer name has no `:`).
    pub(crate) fn acquire_transactional(&self, txn_id: &str) -> Result<(Arc<NamedIdentity>, i16)> {
        validate_producer_name(txn_id).map_err(|_| {
            Error::InvalidArgument(format!(
                "transactional id {txn_id:?}: 1 to 249 characters of ASCII letters, digits, '.', '_' and '-'"
            ))
        })?;
        let (ident, epoch, _) = self.acquire_key_as(
            &format!("txn:{txn_id}"),
            ProducerAccessMode::ExclusiveWithFencing,
            Duration::ZERO,
        )?;
        Ok((ident, epoch))
    }

    /// [`Registry::acquire_named_as`] of the registry key `name`, checked.
    fn acquire_key_as(
        &self,
        name: &str,
        mode: ProducerAccessMode,
        max_block: Duration,
    ) -> Result<(Arc<NamedIdentity>, i16, Option<LiveLock>)> {
        self.check_usable()?;
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            let reason = match self.try_acquire_named(name, mode)? {
                Ok(got) => return Ok(got),
                Err(reason) => reason,
            };
            if mode != ProducerAccessMode::WaitForExclusive {
                return Err(Error::ProducerBusy {
                    name: name.to_owned(),
                    reason,
                });
            }
            let waited = start.elapsed();
            if waited >= max_block {
                return Err(Error::Timeout(max_block.as_millis() as u64));
            }
            // The holders' locks go with their processes: polled, not a
            // guess about whether they are alive.
            std::thread::sleep(pause.min(max_block.saturating_sub(waited)));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// One try of [`Registry::acquire_named_as`]: `Err(reason)` inside
    /// when the name is busy.
    #[allow(clippy::type_complexity)]
    fn try_acquire_named(
        &self,
        name: &str,
        mode: ProducerAccessMode,
    ) -> Result<std::result::Result<(Arc<NamedIdentity>, i16, Option<LiveLock>), String>> {
        let mut st = self.lock();
        let held = self.begin(&mut st)?;
        let (claim, new_epoch) = match try_claim(&self.pdir, name, mode, self.mode)? {
            Claimed::Got { lock, new_epoch } => (lock, new_epoch),
            Claimed::Busy(reason) => return Ok(Err(reason)),
        };
        let before = st.file.named.get(name).copied();
        if let (false, Some(record)) = (new_epoch, before) {
            // A shared producer joining the open ones: their epoch.
            let (slot, version) = match &self.shared {
                Some(sh) => {
                    sh.page.ensure();
                    let slot = sh.page.slot_for(record.id, false);
                    if let Some(s) = slot {
                        sh.page.write(s, record.id, record.epoch);
                    }
                    (slot, sh.page.version())
                }
                None => (None, 0),
            };
            let ident = self.live_identity(&mut st, name, record);
            ident.acquired(record.epoch, slot, version);
            drop(held);
            return Ok(Ok((ident, record.epoch, claim)));
        }
        let record = if let Some(r) = before {
            if r.epoch == i16::MAX {
                return Err(Error::InvalidArgument(format!(
                    "producer name {name:?} has used every epoch"
                )));
            }
            NamedRecord {
                id: r.id,
                epoch: r.epoch + 1,
            }
        } else {
            // Take the id from the file's counter, past any ids reserved
            // for anonymous producers.
            let id = st.file.next_id;
            st.file.next_id += 1;
            NamedRecord { id, epoch: 0 }
        };
        st.file.named.insert(name.to_owned(), record);
        if let Err(e) = self.save(&st.file) {
            if let Some(r) = before {
                st.file.named.insert(name.to_owned(), r)
            } else {
                st.file.next_id -= 1;
                st.file.named.remove(name)
            };
            return Err(e);
        }
        if before.is_none() && st.next_anonymous == st.reserved_end {
            st.next_anonymous = st.file.next_id;
            st.reserved_end = st.file.next_id;
        }
        // Publish the epoch to the other processes (under the lock).
        let (slot, version) = match &self.shared {
            Some(sh) => {
                sh.page.ensure();
                let version = sh.page.bump_version();
                let slot = sh.page.slot_for(record.id, true);
                if let Some(s) = slot {
                    sh.page.write(s, record.id, record.epoch);
                }
                (slot, version)
            }
            None => (None, 0),
        };
        let ident = self.live_identity(&mut st, name, record);
        ident.acquired(record.epoch, slot, version);
        drop(held);
        Ok(Ok((ident, record.epoch, claim)))
    }

    /// This process's live identity of `name`, made for `record` when
    /// missing or when the name now has another id (the file was
    /// replaced).
    fn live_identity(
        &self,
        st: &mut RegistryState,
        name: &str,
        record: NamedRecord,
    ) -> Arc<NamedIdentity> {
        let shared = self.shared.as_ref();
        st.live
            .entry(name.to_owned())
            .and_modify(|i| {
                if i.id != record.id {
                    *i = Arc::new(NamedIdentity::new(record.id, name, record.epoch, shared));
                }
            })
            .or_insert_with(|| Arc::new(NamedIdentity::new(record.id, name, record.epoch, shared)))
            .clone()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use crate::dedup::epochs::{pack, SLOTS};

    #[test]
    fn registry_fences_and_persists() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::open(dir.path(), 0o600).unwrap();
        let a = r.allocate_anonymous().unwrap();
        let (n1, e1) = r.acquire_named("ingest-1").unwrap();
        let (n2, e2) = r.acquire_named("ingest-1").unwrap();
        assert_eq!(n1.id, n2.id);
        assert_ne!(a, n1.id);
        assert_eq!((e1, e2), (0, 1));
        assert_eq!(n1.current_epoch(), 1);
        drop(r);
        let r = Registry::open(dir.path(), 0o600).unwrap();
        let (n3, e3) = r.acquire_named("ingest-1").unwrap();
        assert_eq!((n3.id, e3), (n1.id, 2));
        let b = r.allocate_anonymous().unwrap();
        assert!(b > a && b != n1.id);
        assert!(r.acquire_named("bad/name").is_err());
        assert!(!dir.path().join("producers/epochs.shm").exists());
    }

    /// What one thread got: anonymous ids, and (name, id, epoch) of each
    /// named acquisition.
    type Got = (Vec<i64>, Vec<(String, i64, i16)>);

    fn mixed(r: &Registry, thread: usize, n: usize) -> Got {
        let (mut anon, mut named) = (Vec::new(), Vec::new());
        for i in 0..n {
            if i % 16 == 0 {
                // Names shared by every thread, and ones of this thread.
                let name = if i % 2 == 0 {
                    format!("shared-{}", i % 7)
                } else {
                    format!("own-{thread}-{i}")
                };
                let (ident, epoch) = r.acquire_named(&name).unwrap();
                named.push((name, ident.id, epoch));
            } else {
                anon.push(r.allocate_anonymous().unwrap());
            }
        }
        (anon, named)
    }

    /// Checks that no id was handed out twice, that a name kept one id, and
    /// that each name's epochs were 0, 1, 2... with none handed out twice.
    fn check_unique(all: &[Got]) {
        let mut anon = HashSet::new();
        for (a, _) in all {
            for id in a {
                assert!(anon.insert(*id), "anonymous id {id} handed out twice");
            }
        }
        let mut ids: HashMap<&str, i64> = HashMap::new();
        let mut epochs: HashMap<&str, Vec<i16>> = HashMap::new();
        for (_, n) in all {
            for (name, id, epoch) in n {
                assert_eq!(*ids.entry(name).or_insert(*id), *id, "{name} changed id");
                assert!(!anon.contains(id), "named id {id} also anonymous");
                epochs.entry(name).or_default().push(*epoch);
            }
        }
        let distinct: HashSet<i64> = ids.values().copied().collect();
        assert_eq!(distinct.len(), ids.len(), "two names share an id");
        for (name, mut e) in epochs {
            e.sort_unstable();
            let want: Vec<i16> = (0..e.len() as i16).collect();
            assert_eq!(e, want, "epochs of {name}");
        }
    }

    /// Two opens of one directory are two holders of the registry lock, as
    /// two processes are.
    #[test]
    fn two_shared_registries_never_hand_out_one_id_twice() {
        let dir = tempfile::tempdir().unwrap();
        let a = Arc::new(Registry::open_shared(dir.path(), 0o600).unwrap());
        let b = Arc::new(Registry::open_shared(dir.path(), 0o600).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let r = Arc::clone(if t % 2 == 0 { &a } else { &b });
                std::thread::spawn(move || mixed(&r, t, 3000))
            })
            .collect();
        let all: Vec<Got> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        check_unique(&all);
        // Both blocks of anonymous ids and the named ids are in the file.
        let file = Registry::read(&dir.path().join("producers/registry.json")).unwrap();
        let max = all
            .iter()
            .flat_map(|(a, n)| a.iter().copied().chain(n.iter().map(|x| x.1)))
            .max()
            .unwrap();
        assert!(file.next_id > max);
    }

    #[test]
    fn a_newer_producer_in_another_registry_fences_the_older() {
        let dir = tempfile::tempdir().unwrap();
        let a = Registry::open_shared(dir.path(), 0o600).unwrap();
        let b = Registry::open_shared(dir.path(), 0o600).unwrap();
        let (ia, ea) = a.acquire_named("ingest").unwrap();
        assert_eq!(ia.current_epoch(), ea);
        let (ib, eb) = b.acquire_named("ingest").unwrap();
        assert_eq!((ib.id, eb), (ia.id, ea + 1));
        assert_eq!(ia.current_epoch(), eb, "a sees b's newer epoch");
        assert_eq!(ib.current_epoch(), eb);
        let (ia2, ea2) = a.acquire_named("ingest").unwrap();
        assert!(Arc::ptr_eq(&ia, &ia2));
        assert_eq!(ea2, eb + 1);
        assert_eq!(ib.current_epoch(), ea2, "and b sees a's");
        // Another name is not disturbed.
        let (other, eo) = b.acquire_named("other").unwrap();
        assert_eq!(other.current_epoch(), eo);
        assert_eq!(ia.current_epoch(), ea2);
    }

    /// Whatever garbage the epochs page holds, a producer is fenced exactly
    /// when the registry file says a newer one exists.
    #[test]
    fn garbage_in_the_epochs_page_never_fences_and_never_hides_a_fence() {
        let dir = tempfile::tempdir().unwrap();
        let page_path = dir.path().join("producers/epochs.shm");
        let a = Registry::open_shared(dir.path(), 0o600).unwrap();
        let b = Registry::open_shared(dir.path(), 0o600).unwrap();
        a.acquire_named("p").unwrap();
        let (ia, ea) = a.acquire_named("p").unwrap();
        assert_eq!(ea, 1);
        let raw = EpochPage::open(&page_path, 0o600).unwrap();
        let slot = raw.find(ia.id).unwrap();
        let at = EpochPage::state_offset(slot);
        for garbage in [
            pack(ia.id, ea + 5),
            pack(ia.id, ea - 1),
            pack(ia.id, i16::MAX),
            0,
            u64::MAX,
        ] {
            raw.poke(at, garbage);
            assert_eq!(ia.current_epoch(), ea, "garbage {garbage:#x} fenced");
            assert!(raw.holds(slot, ia.id, ea), "the slot was repaired");
        }
        // The whole page, header included.
        let junk: Vec<u8> = (0..4096u32).map(|i| (i * 31 + 7) as u8).collect();
        std::fs::write(&page_path, &junk).unwrap();
        assert_eq!(ia.current_epoch(), ea);
        assert_eq!(ia.current_epoch(), ea);
        // A fence after the garbage is still seen.
        let (_, eb) = b.acquire_named("p").unwrap();
        assert_eq!(ia.current_epoch(), eb);
        // And one made while the page is garbage again.
        std::fs::write(&page_path, &junk).unwrap();
        let (_, eb2) = b.acquire_named("p").unwrap();
        assert_eq!(ia.current_epoch(), eb2);
    }

    /// More named producers than slots: those without one watch the
    /// page's version and still see every fence.
    #[test]
    fn producers_without_a_slot_still_see_fences() {
        let dir = tempfile::tempdir().unwrap();
        let a = Registry::open_shared(dir.path(), 0o600).unwrap();
        let b = Registry::open_shared(dir.path(), 0o600).unwrap();
        let idents: Vec<_> = (0..SLOTS + 20)
            .map(|i| a.acquire_named(&format!("n{i}")).unwrap())
            .collect();
        for (ident, epoch) in &idents {
            assert_eq!(ident.current_epoch(), *epoch);
        }
        // Slots were taken back from the first ones by the later ones.
        let slotless = idents
            .iter()
            .filter(|(i, _)| i.watch.as_ref().unwrap().slot.load(Ordering::Acquire) == NO_SLOT)
            .count();
        assert!(slotless >= 20, "{slotless} without a slot");
        for (i, (ident, epoch)) in idents.iter().enumerate() {
            let (_, newer) = b.acquire_named(&format!("n{i}")).unwrap();
            assert_eq!(newer, epoch + 1);
            assert_eq!(ident.current_epoch(), newer, "n{i} not fenced");
        }
    }

    /// While nothing changes, checking the epoch reads the page only: it
    /// goes on while another process holds the registry lock, with a slot
    /// and without one.
    #[test]
    fn an_unchanged_epoch_is_checked_without_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let a = Registry::open_shared(dir.path(), 0o600).unwrap();
        let idents: Vec<_> = (0..SLOTS + 2)
            .map(|i| a.acquire_named(&format!("n{i}")).unwrap())
            .collect();
        for (ident, epoch) in &idents {
            // Those whose slot was taken notice it here.
            assert_eq!(ident.current_epoch(), *epoch);
        }
        let watch = |i: &NamedIdentity| i.watch.as_ref().unwrap().slot.load(Ordering::Acquire);
        let with_slot = idents.iter().find(|(i, _)| watch(i) != NO_SLOT).unwrap();
        let without = idents.iter().find(|(i, _)| watch(i) == NO_SLOT).unwrap();
        let check: Vec<_> = [with_slot, without]
            .iter()
            .map(|(i, e)| (Arc::clone(i), *e))
            .collect();
        // Another holder of the lock, as another process would be.
        let held = LiveLock::hold(&dir.path().join("producers/registry.lock"), 0o600).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for (ident, epoch) in &check {
                for _ in 0..10_000 {
                    assert_eq!(ident.current_epoch(), *epoch);
                }
            }
            tx.send(()).unwrap();
        });
        let done = rx.recv_timeout(Duration::from_secs(30));
        drop(held);
        assert!(done.is_ok(), "a check waited for the registry lock");
    }

    /// A registry file damaged while processes run: changes fail with
    /// `Corrupt` and leave the file as it is; no producer is fenced.
    #[test]
    fn a_damaged_file_fails_changes_and_fences_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("producers/registry.json");
        let a = Registry::open_shared(dir.path(), 0o600).unwrap();
        let b = Registry::open_shared(dir.path(), 0o600).unwrap();
        let (ia, ea) = a.acquire_named("p").unwrap();
        std::fs::write(&path, b"{ not json").unwrap();
        assert!(matches!(b.acquire_named("p"), Err(Error::Corrupt { .. })));
        assert!(matches!(b.allocate_anonymous(), Err(Error::Corrupt { .. })));
        assert_eq!(std::fs::read(&path).unwrap(), b"{ not json");
        // Garbage in its slot now cannot be checked against the file: not
        // a fence.
        let raw = EpochPage::open(&dir.path().join("producers/epochs.shm"), 0o600).unwrap();
        raw.poke(
            EpochPage::state_offset(raw.find(ia.id).unwrap()),
            pack(ia.id, ea + 1),
        );
        assert_eq!(ia.current_epoch(), ea);
        // A registry opened on the damaged file is unavailable, as in
        // exclusive mode.
        let c = Registry::open_shared(dir.path(), 0o600).unwrap();
        assert!(c.damage().is_some());
        assert!(c.allocate_anonymous().is_err());
    }

    // ------------------------------------------------ several processes

    const CHILD_ROLE: &str = "MQLITE_TEST_REGISTRY_ROLE";
    const CHILD_DIR: &str = "MQLITE_TEST_REGISTRY_DIR";
    const CHILD_ARG: &str = "MQLITE_TEST_REGISTRY_ARG";

    /// Not a test on its own: the child processes of the tests below.
    #[test]
    #[ignore = "run as a child process by the registry's process tests"]
    fn registry_child() {
        let (Ok(role), Some(dir)) = (std::env::var(CHILD_ROLE), std::env::var_os(CHILD_DIR)) else {
            return;
        };
        let dir = PathBuf::from(dir);
        let arg = std::env::var(CHILD_ARG).unwrap_or_default();
        let r = Registry::open_shared(&dir, 0o600).unwrap();
        match role.as_str() {
            // Mixed allocations; prints one line per id.
            "alloc" => {
                let (anon, named) = mixed(&r, arg.parse().unwrap(), 1500);
                use std::fmt::Write as _;
                let mut out = String::new();
                for id in anon {
                    writeln!(out, "anon {id}").unwrap();
                }
                for (name, id, epoch) in named {
                    writeln!(out, "named {name} {id} {epoch}").unwrap();
                }
                print!("{out}");
            }
            // Takes name "p", says so, and waits to be fenced.
            // Holds the registry lock until killed (at most a minute, so
            // that a failed test leaves no process behind for long).
            "hold" => {
                let _held = LiveLock::hold(&dir.join("producers/registry.lock"), 0o600).unwrap();
                std::fs::write(dir.join("child.ready"), b"").unwrap();
                std::thread::sleep(Duration::from_secs(60));
            }
            "fenced" => {
                let (ident, epoch) = r.acquire_named("p").unwrap();
                let tmp = dir.join("child.ready.tmp");
                std::fs::write(&tmp, epoch.to_string()).unwrap();
                std::fs::rename(&tmp, dir.join("child.ready")).unwrap();
                let t = Instant::now();
                while ident.current_epoch() == epoch {
                    assert!(t.elapsed() < Duration::from_secs(30), "never fenced");
                    std::thread::sleep(Duration::from_millis(1));
                }
                println!("fenced-by {}", ident.current_epoch());
            }
            other => panic!("unknown role {other}"),
        }
    }

    fn child(role: &str, dir: &Path, arg: &str) -> std::process::Child {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "dedup::registry::tests::registry_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ROLE, role)
            .env(CHILD_DIR, dir)
            .env(CHILD_ARG, arg)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    }

    fn parse_got(out: &str) -> Got {
        let (mut anon, mut named) = (Vec::new(), Vec::new());
        for line in out.lines() {
            // The harness may have printed the test's name before it.
            let Some(at) = line.find("anon ").or_else(|| line.find("named ")) else {
                continue;
            };
            let w: Vec<&str> = line[at..].split_whitespace().collect();
            match w.as_slice() {
                ["anon", id] => anon.push(id.parse().unwrap()),
                ["named", name, id, epoch] => named.push((
                    (*name).to_owned(),
                    id.parse().unwrap(),
                    epoch.parse().unwrap(),
                )),
                _ => {}
            }
        }
        (anon, named)
    }

    #[test]
    fn processes_never_hand_out_one_id_twice() {
        let dir = tempfile::tempdir().unwrap();
        let kids: Vec<_> = (0..3)
            .map(|t| child("alloc", dir.path(), &t.to_string()))
            .collect();
        // This process takes part too.
        let r = Registry::open_shared(dir.path(), 0o600).unwrap();
        let mut all = vec![mixed(&r, 3, 1500)];
        for k in kids {
            let out = k.wait_with_output().unwrap();
            assert!(out.status.success(), "child failed: {}", out.status);
            let got = parse_got(&String::from_utf8(out.stdout).unwrap());
            assert_eq!(got.0.len() + got.1.len(), 1500);
            all.push(got);
        }
        check_unique(&all);
    }

    #[test]
    fn a_producer_in_another_process_is_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let mut kid = child("fenced", dir.path(), "");
        let ready = dir.path().join("child.ready");
        let t = Instant::now();
        while !ready.exists() {
            assert!(t.elapsed() < Duration::from_secs(30), "child never ready");
            if let Some(s) = kid.try_wait().unwrap() {
                panic!("child exited early: {s}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let child_epoch: i16 = std::fs::read_to_string(&ready).unwrap().parse().unwrap();
        let r = Registry::open_shared(dir.path(), 0o600).unwrap();
        let (_, epoch) = r.acquire_named("p").unwrap();
        assert_eq!(epoch, child_epoch + 1);
        let out = kid.wait_with_output().unwrap();
        assert!(out.status.success(), "child failed: {}", out.status);
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains(&format!("fenced-by {epoch}")),
            "child said: {text}"
        );
    }

    /// A process killed while it holds the registry lock holds up nobody:
    /// the kernel releases the lock with it.
    #[test]
    fn a_holder_killed_inside_the_lock_blocks_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let r = Arc::new(Registry::open_shared(dir.path(), 0o600).unwrap());
        let mut kid = child("hold", dir.path(), "");
        let t = Instant::now();
        while !dir.path().join("child.ready").exists() {
            assert!(t.elapsed() < Duration::from_secs(30), "child never ready");
            std::thread::sleep(Duration::from_millis(2));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let r2 = Arc::clone(&r);
        std::thread::spawn(move || tx.send(r2.acquire_named("p").map(|x| x.1)).unwrap());
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "acquired while another process held the lock"
        );
        kid.kill().unwrap(); // SIGKILL: nothing runs in the child
        kid.wait().unwrap();
        let got = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(got.unwrap(), 0);
    }
}
