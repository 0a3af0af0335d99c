//! A data directory opened in shared mode: several processes at once, any
//! of them writing (see docs/shared-mode.md).
//!
//! - The open takes this process's share of the directory ([`DirShare`]:
//!   `LIVE` shared, the doorbell page), registers the process under
//!   `procs/` (its token, held alive by a lock the kernel releases when it
//!   dies) and opens every topic ([`Topic::open_reader`]): no recovery,
//!   nothing written. An exclusive open removes the partitions' tail
//!   pages (its appends would make them stale); the next shared-mode use
//!   rebuilds them from the files.
//! - The first process that opens the directory alone and able to write,
//!   after the machine restarted or after a process ended without closing
//!   it (its `.live` file is left under `procs/`), checks every partition
//!   as an exclusive open after a crash does (a power loss may have torn
//!   what was never synced, and left tail pages older than the files;
//!   files may have been damaged while no process ran), then blanks the
//!   tail pages ([`check_logs`]).
//! - Each partition is appended to by any process under its append lock
//!   (see `log/shared_writer.rs`); read-only handles only read.
//! - Topic changes, from any process, hold the directory's DDL lock and
//!   bump its topics version; the others look at the topics directory
//!   again when they see it move ([`BrokerInner::follow_topics`]).
//! - A second open of the directory in this process shares the engine
//!   (like a second SQLite connection): handles are counted, and the last
//!   close closes it.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use super::{topics_dir, Broker, BrokerInner, Config, OpenMode, Recovered};
use crate::background::{Pool, POOL_THREADS};
use crate::dedup::Registry;
use crate::error::{Error, IoContext, Result};
use crate::files::FileCache;
use crate::group::Groups;
use crate::log::{Doorbell, RecoveryStats, SharedLog, SharedWriters, UncleanMark};
use crate::shared::{DirShare, FsKind, LiveLock, ProcessSlot};

/// The directory's DDL lock file (shared mode): topic changes hold it.
const DDL_FILE: &str = "DDL";
use crate::sync;
use crate::topic::{Topic, TopicOptions};

/// An engine open in shared mode in this process.
struct Engine {
    dev: u64,
    ino: u64,
    readonly: bool,
    /// The process that opened it (a forked child never reuses its
    /// parent's engine: the threads are not there).
    pid: u32,
    inner: Weak<BrokerInner>,
}

/// The engines open in shared mode in this process.
static ENGINES: Mutex<Vec<Engine>> = Mutex::new(Vec::new());

/// Whether `config` opens `dir` in shared mode. [`OpenMode::Auto`] takes
/// shared mode on a local filesystem and exclusive mode on a network or
/// user-space one (that of `dir`'s nearest existing ancestor while `dir`
/// does not exist yet).
///
/// # Errors
/// I/O errors of `statfs`.
pub(super) fn wanted(dir: &Path, config: &Config) -> Result<bool> {
    takes_shared_mode(config.open_mode(), || {
        let existing = dir
            .ancestors()
            .find(|a| a.exists())
            .filter(|a| !a.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        crate::shared::filesystem_kind(existing)
    })
}

/// Whether `mode` takes shared mode on the filesystem `kind` tells (asked
/// only for [`OpenMode::Auto`]).
fn takes_shared_mode(mode: OpenMode, kind: impl FnOnce() -> Result<FsKind>) -> Result<bool> {
    Ok(match mode {
        OpenMode::Shared => true,
        OpenMode::Exclusive => false,
        OpenMode::Auto => kind()? == FsKind::Local,
    })
}

/// Opens `path` in shared mode (see the module doc), sharing the engine
/// of an open handle on the same directory in this process.
pub(super) fn open(path: &Path, config: Config) -> Result<Broker> {
    let dir = path.to_owned();
    if config.readonly {
        if !dir.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "{} is not a data directory (a read-only open creates nothing)",
                dir.display()
            )));
        }
    } else {
        crate::private_dir::create_dir_all(&dir, config.file_mode)?;
    }
    let meta = std::fs::metadata(&dir).ctx(|| format!("reading {}", dir.display()))?;
    let (dev, ino, pid) = (meta.dev(), meta.ino(), std::process::id());
    let mut engines = sync::lock(&ENGINES);
    engines.retain(|e| e.inner.strong_count() > 0);
    let same =
        |e: &&Engine| e.dev == dev && e.ino == ino && e.readonly == config.readonly && e.pid == pid;
    if let Some(inner) = engines.iter().find(same).and_then(|e| e.inner.upgrade()) {
        if !inner.is_closed() {
            inner.handles.fetch_add(1, Ordering::AcqRel);
            return Ok(Broker::on(inner));
        }
    }
    let inner = open_engine(dir, config)?;
    BrokerInner::start_delayed(&inner);
    engines.push(Engine {
        dev,
        ino,
        readonly: inner.config.readonly,
        pid,
        inner: Arc::downgrade(&inner),
    });
    Ok(Broker::on(inner))
}

/// Opens a new engine on `dir` in shared mode.
fn open_engine(dir: std::path::PathBuf, config: Config) -> Result<Arc<BrokerInner>> {
    let mode = config.file_mode;
    let readonly = config.readonly;
    // What the check of the logs at this open found, if it ran.
    let mut recovered = HashMap::new();
    let (share, checked) = DirShare::open(&dir, mode, !readonly, |opening| {
        if !opening.alone || readonly {
            return Ok(false);
        }
        // The first process in (no exclusive session runs): a commit an
        // exclusive session's crash interrupted is finished only by an
        // exclusive open, and its records would be written over here.
        if crate::txn::has_exclusive_commits(&dir)? {
            return Err(Error::Locked {
                path: dir.clone(),
                holder:
                    "transactions an exclusive-mode session left unfinished when it ended \
                         without closing (open the directory once in exclusive mode to finish them)"
                        .into(),
            });
        }
        // After a restart of the machine, or a process that ended without
        // closing it (a `.live` file is left under `procs/`): every
        // partition is checked, as an exclusive open after a crash does.
        let crashed = !opening.restarted && crate::shared::left_by_a_dead_process(&dir);
        if opening.restarted || crashed {
            let why = if crashed {
                "a process ended without closing it"
            } else {
                "the machine restarted"
            };
            recovered = check_logs(&dir, &config, why)?;
        }
        Ok(opening.restarted || crashed)
    })?;
    let share = Arc::new(share);
    let shared = if readonly {
        None
    } else {
        let ring = Arc::clone(&share);
        Some(SharedLog {
            doorbell: Some(Doorbell(Arc::new(move |fenced| {
                if fenced {
                    ring.ring_after_fence();
                } else {
                    ring.ring();
                }
            }))),
            writers: Some(SharedWriters {
                slot: Arc::new(ProcessSlot::register(&dir, mode)?),
                root: dir.as_path().into(),
            }),
        })
    };
    let options = TopicOptions {
        prefault: config.prefault,
        file_mode: mode,
        unclean: Arc::new(UncleanMark::open(&dir, mode)?),
        pool: Arc::new(Pool::new(POOL_THREADS)),
        files: Arc::new(FileCache::new(config.max_open_files)),
        shared,
        reader: true,
        committed: None,
    };
    crate::clock::calibrate_on(&options.pool);
    let registry = OnceLock::new();
    if !readonly {
        let _ = registry.set(Registry::open_shared(&dir, mode)?);
    }
    // Read before the listing: a change during it is seen next time.
    let seen = share.topics_version();
    let dir_of = dir.clone();
    // A read-only handle has no registration, and commits nothing.
    let writer_slot = options
        .shared
        .as_ref()
        .and_then(|s| s.writers.as_ref())
        .map(|w| Arc::clone(&w.slot));
    let inner = Arc::new(BrokerInner {
        registry,
        topics_version: AtomicU64::new(0),
        groups: match &writer_slot {
            Some(slot) => Groups::shared(Arc::clone(slot)),
            None => Groups::read_only(),
        },
        share_groups: crate::share_group::Registry::default(),
        mover: crate::delayed::MoverSlot::default(),
        damaged: RwLock::new(HashMap::new()),
        recovered,
        held: Mutex::new(Vec::new()),
        exclusive: Mutex::new(None),
        share: Some(share),
        topics_seen: AtomicU64::new(seen),
        handles: AtomicUsize::new(1),
        dir,
        config,
        options,
        lock: Mutex::new(None),
        topics: RwLock::new(HashMap::new()),
        ddl: Mutex::new(()),
        closed: AtomicBool::new(false),
        janitor: Mutex::new(None),
        coordinator: writer_slot
            .map(|slot| crate::txn::Coordinator::open_shared(&dir_of, mode, slot)),
    });
    inner.read_topics();
    inner.groups.load_all(&inner.dir, mode)?;
    if let Some(c) = &inner.coordinator {
        // Commits whose committer died after their commit point.
        c.finish_at_open(&inner, checked)?;
    }
    for t in inner.topic_names() {
        inner.refresh_retention_floors(&t);
    }
    if !readonly {
        // Retention runs in every process that writes, under each
        // partition's append lock.
        BrokerInner::start_janitor(&inner);
    }
    Ok(inner)
}

/// The first shared open after the machine restarted, or after a process
/// ended without closing the directory (`why` says which, for the log),
/// when no other process has it open and this one may write. After a
/// power loss, pages never synced may be torn in any partition and in the
/// tail pages, which may also be older than the files they describe (a
/// writer trusting one would write over acknowledged records); after a
/// crash, published records are whole (the page cache kept them), and the
/// check finds damage made to the files meanwhile, as an exclusive open
/// does. So every partition is opened as an exclusive open after a crash
/// opens it (checked from its recovery point, cut at the first damage,
/// indexes rebuilt) and closed, and the tail pages are made blank: the
/// processes rebuild them from the checked files. A partition that closed
/// cleanly since its last write is not checked again. Returns what the
/// checks cut, by topic directory (its inode) and partition, for
/// [`crate::Broker::topic`] to report.
fn check_logs(dir: &Path, config: &Config, why: &str) -> Result<Recovered> {
    let tdir = topics_dir(dir);
    if !tdir.is_dir() {
        return Ok(HashMap::new());
    }
    ::log::warn!("{}: {why}; checking every partition", dir.display());
    let options = TopicOptions {
        prefault: false,
        file_mode: config.file_mode,
        unclean: Arc::new(UncleanMark::open(dir, config.file_mode)?),
        pool: Arc::new(Pool::new(POOL_THREADS)),
        files: Arc::new(FileCache::new(config.max_open_files)),
        shared: None,
        reader: false,
        // Data of transactions past their commit point whose markers a
        // power loss took is kept (the markers are written at the open).
        committed: Some(crate::txn::committed_runs_in(dir)?),
    };
    // No summaries: every partition is opened (and checked if it must be).
    let (topics, damaged) = super::open_topics(&tdir, &options, &mut HashMap::new())?;
    for (name, e) in &damaged {
        ::log::error!("topic {name:?} could not be checked ({why}): {e}");
    }
    let mut recovered = HashMap::new();
    let mut first = Ok(());
    for topic in topics.values() {
        if let Ok(info) = topic.info() {
            for p in info.partitions {
                if p.recovery != RecoveryStats::default() {
                    recovered.insert((topic.dir_ino(), p.partition), p.recovery);
                }
            }
        }
        let closed = topic.close();
        if first.is_ok() {
            first = closed;
        }
    }
    first?;
    blank_tail_pages(dir);
    Ok(recovered)
}

/// At an exclusive open (no process has the directory open in shared
/// mode), of a directory that was used in shared mode: removes every
/// partition's tail page, and the directory's shared page last, since
/// this session's appends would make the pages stale, and a stale page
/// would make a shared-mode appender write over records after the end it
/// names. The next shared-mode use rebuilds them from the files. Nothing
/// when the directory was not used in shared mode since its last
/// exclusive open.
pub(super) fn leave_shared_mode(dir: &Path) {
    let shm = dir.join(crate::shared::SHM_FILE);
    if !shm.exists() {
        return;
    }
    forget_tail_pages(dir);
    let _ = std::fs::remove_file(shm);
}

/// Removes every partition's tail page.
fn forget_tail_pages(dir: &Path) {
    for_each_tail_page(dir, |tail| {
        let _ = std::fs::remove_file(tail);
    });
}

/// Makes every partition's tail page blank (its magic zeroed in place), so
/// that the next process to use the partition builds it again from the
/// files, as for a missing page (readers and writers take a page without
/// its magic for no page). Cheaper than removing the files: 0.2 s against
/// 2.7 s for 10,000 of them (docs/decisions.md). A page that cannot be
/// written, or is shorter than its magic, is removed.
fn blank_tail_pages(dir: &Path) {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    for_each_tail_page(dir, |tail| {
        let blanked = std::fs::OpenOptions::new()
            .write(true)
            // Not blocking: a FIFO planted there is not waited on.
            .custom_flags(libc::O_NONBLOCK)
            .open(tail)
            .and_then(|f| {
                let meta = f.metadata()?;
                if !meta.is_file() || meta.len() < 8 {
                    return Err(std::io::Error::other("not a tail page"));
                }
                f.write_all_at(&[0u8; 8], 0)
            });
        if blanked.is_err() {
            let _ = std::fs::remove_file(tail);
        }
    });
}

/// Runs `f` on the path of every partition's tail page (which may not
/// exist).
fn for_each_tail_page(dir: &Path, mut f: impl FnMut(&Path)) {
    let Ok(topics) = std::fs::read_dir(topics_dir(dir)) else {
        return;
    };
    for topic in topics.flatten() {
        let Ok(parts) = std::fs::read_dir(topic.path()) else {
            continue;
        };
        for part in parts.flatten() {
            if part.path().is_dir() {
                f(&part.path().join(crate::shared::TAIL_FILE));
            }
        }
    }
}

impl BrokerInner {
    /// Shared mode: this process's share of the directory.
    pub(crate) fn share(&self) -> Option<&Arc<DirShare>> {
        self.share.as_ref()
    }

    /// Fails with [`Error::ReadOnly`] for a read-only handle (`what` names
    /// the refused call).
    pub(crate) fn check_writable(&self, what: &str) -> Result<()> {
        if self.config.readonly {
            return Err(Error::ReadOnly(what.to_owned()));
        }
        Ok(())
    }

    /// Before a write (`what`: a producer, a topic change): fails for a
    /// read-only handle. Every other process may write (shared mode
    /// serialises appends per partition, and topic changes by the
    /// directory's DDL lock).
    ///
    /// # Errors
    /// [`Error::ReadOnly`] for a read-only handle.
    pub(crate) fn ensure_writer(self: &Arc<Self>, what: &str) -> Result<()> {
        if self.share.is_some() {
            self.check_writable(what)?;
        }
        Ok(())
    }

    /// Shared mode: holds the directory's DDL lock (a topic change by any
    /// process) and takes in the topic changes made before it was taken.
    /// `None` in exclusive mode.
    pub(crate) fn hold_ddl(&self) -> Result<Option<LiveLock>> {
        let Some(share) = &self.share else {
            return Ok(None);
        };
        let held = LiveLock::hold(&self.dir.join(DDL_FILE), self.config.file_mode)?;
        let version = share.topics_version();
        if version != self.topics_seen.load(Ordering::Acquire) {
            let opened = {
                let _ddl = sync::lock(&self.ddl);
                let opened = self.read_topics();
                self.topics_seen.store(version, Ordering::Release);
                self.topics_changed();
                opened
            };
            self.refresh_floors_of(&opened);
        }
        Ok(Some(held))
    }

    /// Options for a topic created in shared mode: written as an exclusive
    /// writer would (no tail pages), then opened as every topic is here.
    /// This process's token in a shared data directory it writes (see
    /// `shared::procs`); `None` in exclusive mode and for a read-only
    /// handle.
    pub(crate) fn process_token(&self) -> Option<u64> {
        let writers = self.options.shared.as_ref()?.writers.as_ref()?;
        Some(writers.slot.token())
    }

    pub(crate) fn plain_topic_options(&self) -> TopicOptions {
        TopicOptions {
            shared: None,
            reader: false,
            ..self.options.clone()
        }
    }

    /// Shared mode, the writer: tells the other processes that topics
    /// changed.
    pub(crate) fn announce_topics(&self) {
        if let Some(share) = &self.share {
            share.topics_changed();
            self.topics_seen
                .store(share.topics_version(), Ordering::Release);
        }
    }

    /// Shared mode, not the writer: takes in the topics the writer
    /// created, grew or deleted since the last look (one load of the
    /// shared page when nothing changed).
    #[inline]
    pub(crate) fn follow_topics(&self) {
        if let Some(share) = &self.share {
            if share.topics_version() != self.topics_seen.load(Ordering::Acquire) {
                self.follow_topics_slow(share);
            }
        }
    }

    #[cold]
    fn follow_topics_slow(&self, share: &DirShare) {
        let opened = {
            let _ddl = sync::lock(&self.ddl);
            let version = share.topics_version();
            if version == self.topics_seen.load(Ordering::Acquire) {
                return;
            }
            let opened = self.read_topics();
            self.topics_seen.store(version, Ordering::Release);
            self.topics_changed();
            opened
        };
        self.refresh_floors_of(&opened);
    }

    /// Sets the retention floors of topics just opened (their logs keep
    /// everything until then).
    fn refresh_floors_of(&self, topics: &[String]) {
        for t in topics {
            self.refresh_retention_floors(t);
        }
    }

    /// Brings the reader topics in line with the topics directory: opens
    /// new ones, grows those with more partitions, drops deleted ones (and
    /// one deleted and created again under its name, opened anew).
    /// Returns the names of the topics opened.
    fn read_topics(&self) -> Vec<String> {
        let mut opened = Vec::new();
        let tdir = topics_dir(&self.dir);
        let Ok(listing) = std::fs::read_dir(&tdir) else {
            return opened; // nothing created yet
        };
        let mut present = HashSet::new();
        for entry in listing.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if crate::topic::validate_name_or_internal(&name).is_err() || !entry.path().is_dir() {
                continue;
            }
            let ino = entry.metadata().map_or(0, |m| m.ino());
            let current = self.topics_read().get(&name).cloned();
            if let Some(t) = current.filter(|t| t.dir_ino() == ino) {
                present.insert(name.clone());
                if let Err(e) = t.follow_writer() {
                    ::log::warn!("following topic {name:?}: {e}");
                }
                continue;
            }
            match Topic::open_reader(entry.path(), self.topic_options()) {
                Ok(Some(t)) => {
                    present.insert(name.clone());
                    opened.push(name.clone());
                    sync::write(&self.damaged).remove(&name);
                    if let Some(old) = sync::write(&self.topics).insert(name, Arc::new(t)) {
                        old.mark_deleted();
                    }
                }
                Ok(None) => {} // being created
                Err(e) => {
                    ::log::error!("topic {name:?} is unavailable: {e}");
                    present.insert(name.clone());
                    if let Some(old) = sync::write(&self.topics).remove(&name) {
                        old.mark_deleted();
                    }
                    sync::write(&self.damaged).insert(name, e);
                }
            }
        }
        sync::write(&self.topics).retain(|name, t| {
            let keep = present.contains(name);
            if !keep {
                t.mark_deleted();
            }
            keep
        });
        sync::write(&self.damaged).retain(|name, _| present.contains(name));
        opened
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_shared_mode_on_a_local_filesystem_only() {
        let local = || Ok(FsKind::Local);
        let nfs = || Ok(FsKind::Remote("NFS"));
        assert!(takes_shared_mode(OpenMode::Auto, local).unwrap());
        assert!(!takes_shared_mode(OpenMode::Auto, nfs).unwrap());
        // An explicit mode does not look at the filesystem (shared mode
        // on NFS is refused later, by the shared open itself).
        let unasked = || -> Result<FsKind> { panic!("the filesystem was looked at") };
        assert!(takes_shared_mode(OpenMode::Shared, unasked).unwrap());
        assert!(!takes_shared_mode(OpenMode::Exclusive, unasked).unwrap());
        let failing = || Err(Error::InvalidArgument("statfs".into()));
        assert!(takes_shared_mode(OpenMode::Auto, failing).is_err());
    }
}
