//! The handle on one data directory: open and close, the directory lock,
//! topics, and the factories for producers and consumers.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::background::{Pool, POOL_THREADS};
use crate::consumer::{Consumer, ConsumerConfig, Held};
use crate::dedup::Registry;
use crate::error::{Error, IoContext, Result};
use crate::files::FileCache;
use crate::group::{Group, Groups, Resume};
use crate::log::{now_ms, PartitionLog, UncleanMark};
use crate::offsets::CommittedOffset;
use crate::producer::{Producer, ProducerConfig};
use crate::share_group::{ShareConsumer, ShareConsumerConfig};
use crate::shared::{DirShare, ExclusiveHold};
use crate::sync;
use crate::topic::{validate_topic_name, Topic, TopicConfig, TopicInfo, TopicOptions};
use crate::txn::Coordinator;

mod config;
mod shared;

pub use config::{Config, OpenMode, DEFAULT_MAX_COMMIT_METADATA_BYTES, DEFAULT_MAX_OPEN_FILES};

/// Name of the lock file in the data directory.
pub const LOCK_FILE: &str = "LOCK";

type Stop = Arc<(Mutex<bool>, Condvar)>;

/// Shared state behind a [`Broker`], also held by its producers and consumers.
#[derive(Debug)]
pub(crate) struct BrokerInner {
    dir: PathBuf,
    config: Config,
    /// What every topic's partitions share (see [`TopicOptions`]).
    options: TopicOptions,
    /// Exclusive mode: the `LOCK` file, held while open.
    lock: Mutex<Option<File>>,
    /// Exclusive mode: `LIVE` held exclusively, keeping shared openers out.
    exclusive: Mutex<Option<ExclusiveHold>>,
    /// Shared mode: this process's share of the directory.
    share: Option<Arc<DirShare>>,
    /// Shared mode: the directory's topics version this process last
    /// took in (see `BrokerInner::follow_topics`).
    topics_seen: AtomicU64,
    /// Open [`Broker`] handles on this engine (shared mode: a second open
    /// of the directory in this process shares the engine).
    handles: AtomicUsize,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// Serialises topic creation, deletion and growth.
    ddl: Mutex<()>,
    closed: AtomicBool,
    janitor: Mutex<Option<(JoinHandle<()>, Stop)>>,
    /// Producer ids and names: opened with the directory in exclusive
    /// mode, and in shared mode unless the handle is read-only.
    registry: OnceLock<Registry>,
    /// Bumped whenever a topic is created, deleted or grows and at close,
    /// so that caches of topic lookups (producers', pattern subscriptions')
    /// know to look again.
    topics_version: AtomicU64,
    groups: Groups,
    /// Share groups with members in this process.
    share_groups: crate::share_group::Registry,
    /// The mover of delayed records, once started.
    mover: crate::delayed::MoverSlot,
    /// Topics whose metadata or logs could not be opened (damaged): the
    /// error every use of them gets. Listed by `topics()`; only
    /// `delete_topic` changes them.
    damaged: RwLock<HashMap<String, Error>>,
    /// Shared mode: what the check of every partition at this open cut
    /// (after a restart of the machine or a process's crash), by topic
    /// directory inode and partition; empty otherwise (exclusive mode
    /// keeps it in each partition's log).
    recovered: Recovered,
    /// The messages consumers fetched and hold for one-message hand-out
    /// ([`Consumer::poll_one`]): dropped at close, so that no mapping
    /// outlives it but the messages the application itself holds.
    held: Mutex<Vec<Weak<Held>>>,
    /// The transaction coordinator (none for a read-only handle).
    coordinator: Option<Coordinator>,
}

/// Whether an error opening one topic, group or registry is damage to that
/// piece alone (it is set aside and the rest opens), not a failure of the
/// directory as a whole (I/O errors such as a full descriptor table).
pub(crate) fn is_damage(e: &Error) -> bool {
    matches!(
        e,
        Error::Corrupt { .. } | Error::UnsupportedVersion { .. } | Error::InvalidConfig(_)
    )
}

/// A consumer group as [`Broker::describe_group`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    /// The group's name.
    pub name: String,
    /// Incremented at every rebalance in this process.
    pub generation: u64,
    /// Members now, by id.
    pub members: Vec<GroupMember>,
    /// Committed offsets: `(topic, partition, committed)`.
    pub committed: Vec<(String, u32, CommittedOffset)>,
}

/// One member of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// Its member id (`<client_id>-<number>`).
    pub id: String,
    /// The partitions it owns now.
    pub partitions: Vec<(String, u32)>,
}

/// An open data directory: the entry point of the engine.
///
/// Dropping it closes it (see [`Broker::close`]).
#[derive(Debug)]
pub struct Broker {
    engine: Engine,
    /// This handle was closed (the engine stays open while another handle
    /// on it is: shared mode).
    closed: AtomicBool,
}

/// What a broker runs on.
#[derive(Debug)]
enum Engine {
    /// A data directory.
    Dir(Arc<BrokerInner>),
    /// A Kafka cluster.
    #[cfg(feature = "kafka")]
    Kafka(Arc<crate::kafka::KafkaBroker>),
}

/// Returns from the calling method with `$e` (`$k` the cluster's broker)
/// when the broker runs on a Kafka cluster.
macro_rules! on_cluster {
    ($self:ident, $k:ident => $e:expr) => {
        #[cfg(feature = "kafka")]
        if let Engine::Kafka($k) = &$self.engine {
            return $e;
        }
    };
}

fn topics_dir(dir: &Path) -> PathBuf {
    dir.join("topics")
}

/// How long a lock held by this process is retried (see [`take_lock`]).
pub(crate) const SPAWN_GRACE: Duration = Duration::from_millis(200);

/// Takes the exclusive lock of the data directory `dir` (held while the
/// returned file is open), writing the pid into `LOCK`.
pub(crate) fn take_lock(dir: &Path, mode: u32) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .open(&path)
        .ctx(|| format!("opening {}", path.display()))?;
    let start = std::time::Instant::now();
    loop {
        match f.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io(format!("locking {}", path.display()), e))
            }
        }
        let mut holder = String::new();
        let _ = f.rewind();
        let _ = f.read_to_string(&mut holder);
        let pid = holder.trim().parse::<u32>();
        // This process's own lock, just released by a close, can still be
        // held for a moment by a child being spawned (the forked child
        // shares the lock's file description until its exec closes it).
        if pid == Ok(std::process::id()) && start.elapsed() < SPAWN_GRACE {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        let holder = match pid {
            Ok(pid) if pid == std::process::id() => {
                format!("this process (pid {pid}), through another open handle")
            }
            Ok(pid) => format!("process {pid}"),
            Err(_) => "another process".to_owned(),
        };
        return Err(Error::Locked {
            path: dir.to_owned(),
            holder,
        });
    }
    f.set_len(0)
        .and_then(|()| f.rewind())
        .and_then(|()| writeln!(f, "{}", std::process::id()))
        .ctx(|| format!("writing {}", path.display()))?;
    Ok(f)
}

/// The topics a directory's open found, and those damaged with their
/// errors.
type OpenedTopics = (HashMap<String, Arc<Topic>>, HashMap<String, Error>);

/// What recovery cut, by topic directory inode and partition.
type Recovered = HashMap<(u64, u32), crate::log::RecoveryStats>;

/// Opens every topic in `tdir` with `options` (`summaries`: what the last
/// clean close recorded, for partitions to open on first use) and makes
/// what their opens checked durable: the topics, and the damaged ones
/// with their errors.
fn open_topics(
    tdir: &Path,
    options: &TopicOptions,
    summaries: &mut HashMap<String, Vec<crate::partition_handle::Summary>>,
) -> Result<OpenedTopics> {
    let mut topics = HashMap::new();
    let mut damaged = HashMap::new();
    // What the topics' opens checked, made durable in one pass below.
    let mut unsynced = Vec::new();
    for entry in std::fs::read_dir(tdir).ctx(|| format!("listing {}", tdir.display()))? {
        let entry = entry.ctx(|| format!("listing {}", tdir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if crate::topic::validate_name_or_internal(&name).is_err() || !entry.path().is_dir() {
            continue;
        }
        let summary = summaries.remove(&name);
        match Topic::open(entry.path(), options.clone(), &mut unsynced, summary) {
            Ok(Some(t)) => {
                topics.insert(name, Arc::new(t));
            }
            Ok(None) => {
                // Creation never finished (no topic.json): discard it.
                let _ = std::fs::remove_dir_all(entry.path());
            }
            // One damaged topic is unavailable; the others open.
            Err(e) if is_damage(&e) => {
                ::log::error!("topic {name:?} is unavailable: {e}");
                damaged.insert(name, e);
            }
            Err(e) => return Err(e),
        }
    }
    PartitionLog::sync_opened(&unsynced, tdir)?;
    Ok((topics, damaged))
}

impl Broker {
    /// Opens (creating if needed) the data directory at `path` in the mode
    /// `config` asks for ([`Config::mode`]; [`Broker::mode`] tells which
    /// one [`OpenMode::Auto`] took) and recovers every topic. In exclusive
    /// mode the handle takes the directory's lock; in shared mode it joins
    /// the processes that have the directory open (see
    /// docs/shared-mode.md). After a clean close, a partition is not
    /// opened here but on its first use (see `partitions.summary` in
    /// docs/FORMAT.md); after an unclean one, every partition is opened
    /// and checked here.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a config out of range (nothing is
    /// opened or created), and for shared mode ([`OpenMode::Shared`]) on
    /// a network filesystem; [`Error::Locked`] in exclusive mode when
    /// another handle, in this process or another, holds the directory,
    /// and in shared mode while a process holds it in exclusive mode; I/O
    /// and corruption errors from recovery.
    pub fn open(path: impl AsRef<Path>, config: Config) -> Result<Broker> {
        config.validate()?;
        #[cfg(feature = "kafka")]
        if let Some(url) = path
            .as_ref()
            .to_str()
            .filter(|p| p.starts_with(crate::kafka::URL_SCHEME))
        {
            let props: Vec<(&str, &str)> = config
                .kafka_properties
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let cluster = crate::kafka::KafkaBroker::open(url, &props)?;
            return Ok(Broker {
                engine: Engine::Kafka(Arc::new(cluster)),
                closed: AtomicBool::new(false),
            });
        }
        let dir = path.as_ref().to_owned();
        if shared::wanted(&dir, &config)? {
            return shared::open(&dir, config);
        }
        crate::private_dir::create_dir_all(&dir, config.file_mode)?;
        let lock = take_lock(&dir, config.file_mode)?;
        let exclusive = crate::shared::hold_exclusive(&dir, config.file_mode)?;
        shared::leave_shared_mode(&dir);
        let tdir = topics_dir(&dir);
        crate::private_dir::create_dir_all(&tdir, config.file_mode)?;
        let trash = dir.join("trash");
        if trash.exists() {
            let _ = std::fs::remove_dir_all(&trash);
        }
        // Before the topics: recovery asks it about transaction data.
        let coordinator = Coordinator::open(&dir, config.file_mode)?;
        let options = TopicOptions {
            prefault: config.prefault,
            file_mode: config.file_mode,
            unclean: Arc::new(UncleanMark::open(&dir, config.file_mode)?),
            pool: Arc::new(Pool::new(POOL_THREADS)),
            files: Arc::new(FileCache::new(config.max_open_files)),
            shared: None,
            reader: false,
            committed: Some(coordinator.committed_runs()),
        };
        crate::clock::calibrate_on(&options.pool);
        // After a clean close, partitions open on first use.
        let mut summaries =
            crate::partition_handle::take(&dir, |session| options.unclean.is_session(session))?;
        let (topics, damaged) = open_topics(&tdir, &options, &mut summaries)?;
        let registry = OnceLock::new();
        let _ = registry.set(Registry::open(&dir, config.file_mode)?);
        let inner = Arc::new(BrokerInner {
            registry,
            topics_version: AtomicU64::new(0),
            groups: Groups::default(),
            share_groups: crate::share_group::Registry::default(),
            mover: crate::delayed::MoverSlot::default(),
            exclusive: Mutex::new(Some(exclusive)),
            share: None,
            topics_seen: AtomicU64::new(0),
            handles: AtomicUsize::new(1),
            damaged: RwLock::new(damaged),
            recovered: Recovered::new(),
            held: Mutex::new(Vec::new()),
            dir,
            config,
            options,
            lock: Mutex::new(Some(lock)),
            topics: RwLock::new(topics),
            ddl: Mutex::new(()),
            closed: AtomicBool::new(false),
            janitor: Mutex::new(None),
            coordinator: Some(coordinator),
        });
        inner.groups.load_all(&inner.dir, inner.config.file_mode)?;
        // Markers and offsets of transactions a crash interrupted after
        // their commit point (before offsets are checked against the ends).
        if let Some(c) = &inner.coordinator {
            c.recover(&inner)?;
        }
        // Recovery may have cut a log below offsets committed before the
        // crash: those are out of range now (before anything is appended).
        inner
            .groups
            .mark_beyond_end(&|t, p| inner.topic(t).ok().and_then(|t| t.end_offset(p)));
        for t in inner.topic_names() {
            inner.refresh_retention_floors(&t);
        }
        BrokerInner::start_janitor(&inner);
        BrokerInner::start_delayed(&inner);
        Ok(Broker::on(inner))
    }

    /// A new handle on an engine (counted in already).
    fn on(inner: Arc<BrokerInner>) -> Broker {
        Broker {
            engine: Engine::Dir(inner),
            closed: AtomicBool::new(false),
        }
    }

    /// Fails with [`Error::Closed`] once this handle (or its engine) is
    /// closed.
    #[inline]
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("broker"));
        }
        on_cluster!(self, _k => Ok(()));
        self.inner().check_open()
    }

    /// The directory engine. Every public call of a broker on a Kafka
    /// cluster returns before it would get here ([`on_cluster!`]).
    pub(crate) fn inner(&self) -> &Arc<BrokerInner> {
        match &self.engine {
            Engine::Dir(inner) => inner,
            #[cfg(feature = "kafka")]
            Engine::Kafka(_) => unreachable!("a broker on a Kafka cluster has no data directory"),
        }
    }

    /// The broker's Kafka cluster, when it runs on one.
    #[cfg(feature = "kafka")]
    pub fn cluster(&self) -> Option<&crate::kafka::KafkaBroker> {
        match &self.engine {
            Engine::Kafka(k) => Some(k),
            Engine::Dir(_) => None,
        }
    }

    /// The mode the directory is open in: [`OpenMode::Shared`] or
    /// [`OpenMode::Exclusive`], never [`OpenMode::Auto`] (a broker on a
    /// Kafka cluster: shared).
    pub fn mode(&self) -> OpenMode {
        on_cluster!(self, _k => OpenMode::Shared);
        if self.inner().share.is_some() {
            OpenMode::Shared
        } else {
            OpenMode::Exclusive
        }
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        on_cluster!(self, k => Path::new(k.url()));
        &self.inner().dir
    }

    /// Whether a missing topic is created on first use: `auto_create_topics`
    /// is set and the handle is not read-only.
    pub fn auto_creates_topics(&self) -> bool {
        on_cluster!(self, _k => false);
        self.inner().auto_creates()
    }

    /// Creates a topic.
    ///
    /// # Errors
    /// [`Error::InvalidTopicName`], [`Error::InvalidConfig`],
    /// [`Error::TopicExists`].
    pub fn create_topic(&self, name: &str, config: TopicConfig) -> Result<()> {
        self.check_open()?;
        on_cluster!(self, k => k.create_topic(name, config));
        self.inner().create_topic(name, config)
    }

    /// Deletes a topic and its data. Readers holding its messages keep them
    /// valid; the files go when the last one lets go.
    pub fn delete_topic(&self, name: &str) -> Result<()> {
        self.check_open()?;
        on_cluster!(self, k => k.delete_topic(name));
        self.inner().ensure_writer("delete_topic")?;
        let _shared_ddl = self.inner().hold_ddl()?;
        let _ddl = sync::lock(&self.inner().ddl);
        if self.inner().damaged_topic(name).is_some() {
            return self.inner().delete_damaged_topic(name);
        }
        let topic = sync::write(&self.inner().topics)
            .remove(name)
            .ok_or_else(|| Error::UnknownTopic(name.to_owned()))?;
        topic.mark_deleted();
        self.inner().topics_changed();
        crate::producer::forget_cached_topic();
        // Committed offsets of the topic go with it (as in Kafka), so a
        // topic created again under the name starts afresh.
        for g in self.inner().groups.all() {
            if let Err(e) = g.remove_topic(name) {
                ::log::warn!("forgetting offsets of {name} in group {}: {e}", g.name());
            }
        }
        let _ = topic.close();
        // Move aside first (atomic), then remove.
        let trash = self.inner().dir.join("trash");
        std::fs::create_dir_all(&trash).ctx(|| format!("creating {}", trash.display()))?;
        let aside = trash.join(format!("{name}-{}", now_ms()));
        std::fs::rename(topic.dir(), &aside)
            .ctx(|| format!("removing {}", topic.dir().display()))?;
        self.inner().announce_topics();
        let _ = std::fs::remove_dir_all(&aside);
        Ok(())
    }

    /// Names of all topics, sorted.
    pub fn topics(&self) -> Vec<String> {
        on_cluster!(self, k => k.topics().unwrap_or_else(|e| {
            ::log::warn!("listing topics: {e}");
            Vec::new()
        }));
        self.inner().follow_topics();
        let mut v: Vec<String> = self.inner().topics_read().keys().cloned().collect();
        v.extend(sync::read(&self.inner().damaged).keys().cloned());
        v.sort();
        v
    }

    /// The topics and consumer groups that could not be opened because
    /// their files are damaged, with the error each use of them gets
    /// (`Corrupt` or `UnsupportedVersion`): `(kind, name, error)` with
    /// kind `"topic"` or `"group"`, and `("producers", "registry", error)`
    /// when the producer registry is damaged.
    pub fn damaged(&self) -> Vec<(String, String, Error)> {
        on_cluster!(self, _k => Vec::new());
        let mut v: Vec<(String, String, Error)> = sync::read(&self.inner().damaged)
            .iter()
            .map(|(n, e)| ("topic".to_owned(), n.clone(), e.duplicate()))
            .collect();
        v.extend(
            self.inner()
                .groups
                .damaged()
                .into_iter()
                .map(|(n, e)| ("group".to_owned(), n, e)),
        );
        if let Some(e) = self.inner().registry.get().and_then(Registry::damage) {
            v.push(("producers".to_owned(), "registry".to_owned(), e));
        }
        v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        v
    }

    /// Describes a topic: its config and each partition's offsets and size.
    /// Partitions not opened yet (after a clean close they open on first
    /// use) are opened: what their open found is part of the description.
    pub fn topic(&self, name: &str) -> Result<TopicInfo> {
        on_cluster!(self, k => k.topic(name));
        let topic = self.inner().topic(name)?;
        let mut info = topic.info()?;
        for p in &mut info.partitions {
            if let Some(r) = self.inner().recovered.get(&(topic.dir_ino(), p.partition)) {
                p.recovery = *r;
            }
        }
        Ok(info)
    }

    /// Grows a topic to `partitions` partitions, keeping existing data.
    pub fn add_partitions(&self, name: &str, partitions: u32) -> Result<()> {
        self.check_open()?;
        on_cluster!(self, k => k.add_partitions(name, partitions));
        self.inner().ensure_writer("add_partitions")?;
        let _shared_ddl = self.inner().hold_ddl()?;
        let _ddl = sync::lock(&self.inner().ddl);
        let res = self.inner().topic(name)?.add_partitions(partitions);
        self.inner().topics_changed();
        self.inner().announce_topics();
        self.inner().refresh_retention_floors(name);
        res
    }

    /// The earliest offset of `topic`/`partition` whose record timestamp is
    /// at or after `timestamp_ms`, or `None` when all records are older.
    pub fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp_ms: i64,
    ) -> Result<Option<u64>> {
        on_cluster!(self, k => k.offset_for_timestamp(topic, partition, timestamp_ms));
        self.inner()
            .topic(topic)?
            .partition(partition)?
            .offset_for_timestamp(timestamp_ms)
    }

    /// A new producer.
    pub fn producer(&self, config: ProducerConfig) -> Result<Producer> {
        self.check_open()?;
        on_cluster!(self, k => Ok(Producer::on_cluster(k.producer(config)?)));
        Producer::new(Arc::clone(self.inner()), config)
    }

    /// A new consumer.
    pub fn consumer(&self, config: ConsumerConfig) -> Result<Consumer> {
        self.check_open()?;
        on_cluster!(self, k => Ok(Consumer::on_cluster(k.consumer(config)?)));
        Consumer::new(Arc::clone(self.inner()), config)
    }

    /// A new share consumer (a member of a share group: any member takes
    /// any message, acknowledges each; see [`ShareConsumer`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for invalid settings, or settings that
    /// differ from those of the group's members open in this process;
    /// [`Error::Locked`] if another process uses the group (exclusive mode only);
    /// [`Error::ReadOnly`] on a read-only handle.
    pub fn share_consumer(&self, config: ShareConsumerConfig) -> Result<ShareConsumer> {
        self.check_open()?;
        on_cluster!(self, _k => Err(crate::kafka::not_on_cluster("share consumers")));
        ShareConsumer::new(Arc::clone(self.inner()), config)
    }

    /// Names of the consumer groups, sorted (Kafka's `listConsumerGroups`):
    /// those with committed offsets in the data directory (the offsets of
    /// broadcast consumers count for their `group_id`) and those with
    /// members in this process (in shared mode, in any process). A group that was only described
    /// is not listed.
    pub fn groups(&self) -> Vec<String> {
        on_cluster!(self, k => k.groups().unwrap_or_else(|e| {
            ::log::warn!("listing consumer groups: {e}");
            Vec::new()
        }));
        if self.inner().share.is_some() {
            // Groups other processes created since.
            if let Err(e) = self
                .inner()
                .groups
                .load_all(&self.inner().dir, self.inner().config.file_mode)
            {
                ::log::warn!("listing consumer groups: {e}");
            }
        }
        self.inner().groups.names()
    }

    /// Describes consumer group `name`: its members in this process (each
    /// with the partitions it owns now) and its committed offsets.
    ///
    /// `name` may also be `<group_id>+<client_id>`: the offsets of that
    /// broadcast consumer (it has no members).
    ///
    /// On a Kafka cluster: the group's members wherever they run, with the
    /// partitions the coordinator assigned them, and its committed offsets
    /// on every topic of the cluster; the generation is 0 (see
    /// [`crate::kafka::KafkaBroker::describe_group`]).
    pub fn describe_group(&self, name: &str) -> Result<GroupInfo> {
        on_cluster!(self, k => k.describe_group(name));
        if !crate::offsets::is_valid_key(name) {
            crate::offsets::validate_group_id("group", name)?;
        }
        let g = self.inner().group(name)?;
        let (generation, members) = g.describe(&|t| self.inner().partition_count(t));
        Ok(GroupInfo {
            name: name.to_owned(),
            generation,
            members: members
                .into_iter()
                .map(|(id, partitions)| GroupMember { id, partitions })
                .collect(),
            committed: g.all_committed(),
        })
    }

    /// Flushes every partition to disk.
    pub fn flush(&self) -> Result<()> {
        self.check_open()?;
        on_cluster!(self, _k => Ok(()));
        for t in self.inner().all_topics() {
            t.flush()?;
        }
        Ok(())
    }

    /// Applies retention to every topic now; returns the number of segments
    /// deleted.
    pub fn enforce_retention(&self) -> Result<usize> {
        self.check_open()?;
        on_cluster!(self, _k => Ok(0));
        Ok(self.inner().enforce_retention())
    }

    /// Flushes everything, stops background work and releases the lock.
    /// Producers and consumers made from this broker fail with
    /// [`Error::Closed`] afterwards. Closing twice is fine.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        on_cluster!(self, _k => Ok(()));
        if self.inner().handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            return self.inner().close();
        }
        Ok(())
    }

    /// Whether [`Broker::close`] was called.
    pub fn is_closed(&self) -> bool {
        on_cluster!(self, _k => self.closed.load(Ordering::Acquire));
        self.closed.load(Ordering::Acquire) || self.inner().closed.load(Ordering::Acquire)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            ::log::warn!("closing {}: {e}", self.inner().dir.display());
        }
    }
}

impl BrokerInner {
    fn topic_options(&self) -> TopicOptions {
        self.options.clone()
    }

    fn topics_read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Topic>>> {
        sync::read(&self.topics)
    }

    /// The current topics version (see `topics_version`).
    #[inline]
    pub(crate) fn topics_version(&self) -> u64 {
        self.follow_topics();
        self.topics_version.load(Ordering::Acquire)
    }

    fn topics_changed(&self) {
        self.topics_version.fetch_add(1, Ordering::AcqRel);
    }

    /// [`Config::max_commit_metadata_bytes`].
    pub(crate) fn max_commit_metadata_bytes(&self) -> usize {
        self.config.max_commit_metadata_bytes
    }

    /// The consumer group `name` (its committed offsets, its members).
    /// The transaction coordinator.
    ///
    /// # Errors
    /// [`Error::ReadOnly`] for a read-only handle.
    pub(crate) fn coordinator(&self) -> Result<&Coordinator> {
        self.coordinator
            .as_ref()
            .ok_or_else(|| Error::ReadOnly("transactions".into()))
    }

    /// The data directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Permission bits of the files the engine creates.
    pub(crate) fn file_mode(&self) -> u32 {
        self.config.file_mode
    }

    /// The share groups of this process.
    pub(crate) fn share_groups(&self) -> &crate::share_group::Registry {
        &self.share_groups
    }

    /// The mover of delayed records.
    pub(crate) fn mover(&self) -> &crate::delayed::MoverSlot {
        &self.mover
    }

    /// Starts the mover of delayed records if some may wait.
    pub(crate) fn start_delayed(this: &Arc<BrokerInner>) {
        if this.partition_count(crate::delayed::TOPIC).is_some() {
            crate::delayed::start_mover(this);
        }
    }

    pub(crate) fn group(&self, name: &str) -> Result<Arc<Group>> {
        self.check_open()?;
        self.groups.get(&self.dir, name, self.config.file_mode)
    }

    /// Recomputes, for each partition of `topic` (if it respects groups),
    /// the lowest offset any group committed, or any share group open in
    /// this process has not done with: time retention keeps what lies past
    /// it. Groups that never committed for a partition do not hold it back.
    /// The delayed records' topic is kept whole while its mover does not
    /// run in this process.
    pub(crate) fn refresh_retention_floors(&self, topic: &str) {
        let Ok(t) = self.topic(topic) else { return };
        if !t.respects_groups() {
            return;
        }
        let groups = self.groups.all();
        for p in 0..t.partition_count() {
            let floor = groups
                .iter()
                .filter_map(|g| g.resume(topic, p))
                .map(Resume::offset)
                .chain(
                    self.share_groups
                        .floor(topic, p, topic == crate::delayed::TOPIC),
                )
                .min()
                .unwrap_or(u64::MAX);
            t.set_retention_floor(p, floor);
        }
    }

    /// Partition count of topic `name`, if it exists.
    pub(crate) fn partition_count(&self, name: &str) -> Option<u32> {
        self.follow_topics();
        self.topics_read()
            .get(name)
            .filter(|t| !t.is_deleted())
            .map(|t| t.partition_count())
    }

    /// Names of every topic.
    pub(crate) fn topic_names(&self) -> Vec<String> {
        self.follow_topics();
        let mut v: Vec<String> = self.topics_read().keys().cloned().collect();
        v.sort();
        v
    }

    /// Producer ids and names (not for a read-only handle).
    pub(crate) fn registry(&self) -> Result<&Registry> {
        self.registry
            .get()
            .ok_or_else(|| Error::ReadOnly("producer".into()))
    }

    pub(crate) fn all_topics(&self) -> Vec<Arc<Topic>> {
        self.topics_read().values().cloned().collect()
    }

    /// Fails with [`Error::Closed`] once closed.
    #[inline]
    /// Registers a consumer's held messages, to be dropped at close.
    pub(crate) fn register_held(&self, held: &Arc<Held>) {
        let mut all = sync::lock(&self.held);
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(held));
    }

    /// Whether the broker was closed.
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed("broker"))
        } else {
            Ok(())
        }
    }

    /// The error of a damaged topic, if `name` is one.
    pub(crate) fn damaged_topic(&self, name: &str) -> Option<Error> {
        sync::read(&self.damaged).get(name).map(Error::duplicate)
    }

    /// Removes a damaged topic's directory and its committed offsets (the
    /// caller holds the DDL lock).
    fn delete_damaged_topic(&self, name: &str) -> Result<()> {
        let dir = topics_dir(&self.dir).join(name);
        let trash = self.dir.join("trash");
        std::fs::create_dir_all(&trash).ctx(|| format!("creating {}", trash.display()))?;
        let aside = trash.join(format!("{name}-{}", now_ms()));
        std::fs::rename(&dir, &aside).ctx(|| format!("removing {}", dir.display()))?;
        let _ = std::fs::remove_dir_all(&aside);
        sync::write(&self.damaged).remove(name);
        for g in self.groups.all() {
            if let Err(e) = g.remove_topic(name) {
                ::log::warn!("forgetting offsets of {name} in group {}: {e}", g.name());
            }
        }
        self.topics_changed();
        Ok(())
    }

    /// [`Broker::create_topic`].
    pub(crate) fn create_topic(self: &Arc<Self>, name: &str, config: TopicConfig) -> Result<()> {
        self.check_open()?;
        crate::topic::validate_name_or_internal(name)?;
        config.validate()?;
        self.ensure_writer("create_topic")?;
        let shared_ddl = self.hold_ddl()?;
        let _ddl = sync::lock(&self.ddl);
        if self.topics_read().contains_key(name) {
            return Err(Error::TopicExists(name.to_owned()));
        }
        if let Some(e) = self.damaged_topic(name) {
            // Never replaced silently: `delete_topic` first.
            return Err(e);
        }
        let dir = topics_dir(&self.dir).join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).ctx(|| format!("removing {}", dir.display()))?;
        }
        let topic = if shared_ddl.is_some() {
            // Shared mode: written as an exclusive writer would, then
            // opened as every topic is in this mode.
            let partitions = config.partitions;
            let made = Topic::create(dir.clone(), name, config, self.plain_topic_options())?;
            made.close()?;
            drop(made);
            // Each partition's tail page is made with it, so that its first
            // use creates no file.
            for p in 0..partitions {
                crate::shared::TailPage::create_empty(
                    &dir.join(p.to_string()),
                    self.config.file_mode,
                )?;
            }
            Topic::open_reader(dir, self.topic_options())?.ok_or_else(|| {
                Error::InvalidArgument(format!("topic {name:?} vanished while being created"))
            })?
        } else {
            Topic::create(dir, name, config, self.topic_options())?
        };
        sync::write(&self.topics).insert(name.to_owned(), Arc::new(topic));
        self.topics_changed();
        self.announce_topics();
        // Its logs keep everything until the floors are known.
        self.refresh_retention_floors(name);
        Ok(())
    }

    /// The topic `name`, created first when it is missing and
    /// [`Config::auto_create_topics`] is on (with
    /// [`Config::default_partitions`] partitions). A creation racing with
    /// another thread's or process's (`TopicExists`) takes that topic. A
    /// read-only handle never creates. Errors as [`BrokerInner::topic`],
    /// and [`Error::InvalidTopicName`] for a name that cannot be created.
    pub(crate) fn topic_or_create(self: &Arc<Self>, name: &str) -> Result<Arc<Topic>> {
        match self.topic(name) {
            Err(Error::UnknownTopic(_)) if self.auto_creates() => {
                validate_topic_name(name)?;
                match self.create_topic(name, TopicConfig::new(self.config.default_partitions)) {
                    Ok(()) | Err(Error::TopicExists(_)) => {}
                    Err(e) => return Err(e),
                }
                self.topic(name)
            }
            r => r,
        }
    }

    /// Whether a missing topic is created on first use.
    pub(crate) fn auto_creates(&self) -> bool {
        self.config.auto_create_topics && !self.config.readonly
    }

    /// The topic `name`, or `UnknownTopic` (or `Closed`, or the error of a
    /// damaged topic).
    #[inline]
    pub(crate) fn topic(&self, name: &str) -> Result<Arc<Topic>> {
        self.check_open()?;
        self.follow_topics();
        if let Some(t) = self.topics_read().get(name) {
            return Ok(Arc::clone(t));
        }
        Err(self
            .damaged_topic(name)
            .unwrap_or_else(|| Error::UnknownTopic(name.to_owned())))
    }

    fn enforce_retention(&self) -> usize {
        if self.config.readonly {
            return 0; // the writers' job
        }
        let now = now_ms();
        self.all_topics()
            .iter()
            .map(|t| {
                if t.respects_groups() {
                    // Floors as they are now (share groups move theirs
                    // without telling).
                    self.refresh_retention_floors(t.name());
                }
                t.enforce_retention(now)
            })
            .sum()
    }

    fn start_janitor(this: &Arc<BrokerInner>) {
        let every = this.config.retention_check_interval_ms;
        if every == 0 {
            return;
        }
        let stop: Stop = Arc::new((Mutex::new(false), Condvar::new()));
        let weak: Weak<BrokerInner> = Arc::downgrade(this);
        let s = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("mqlite-retention".into())
            .spawn(move || loop {
                let (m, cv) = &*s;
                let guard = sync::lock(m);
                let (guard, _) = cv
                    .wait_timeout_while(guard, Duration::from_millis(every), |stopped| !*stopped)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if *guard {
                    return;
                }
                drop(guard);
                match weak.upgrade() {
                    Some(b) if !b.closed.load(Ordering::Acquire) => {
                        b.enforce_retention();
                    }
                    _ => return,
                }
            });
        if let Ok(h) = handle {
            *sync::lock(&this.janitor) = Some((h, stop));
        }
    }

    fn close(&self) -> Result<()> {
        crate::producer::forget_cached_topic();
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.topics_changed();
        if let Some((h, stop)) = sync::lock(&self.janitor).take() {
            *sync::lock(&stop.0) = true;
            stop.1.notify_all();
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        self.mover.stop();
        if self.share.is_some() {
            // Consumers still open (or leaked) leave their groups now, while
            // the topics are there to count partitions: the other members
            // would take them for alive as long as this process runs.
            self.groups.leave_all(&|t| self.partition_count(t));
        }
        // Queued background jobs are dropped (they hold segments), running
        // ones waited for: no thread of the broker outlives the close.
        self.options.pool.shutdown();
        let mut first = Ok(());
        // What the next open needs to open partitions on first use: written
        // only when every partition closed cleanly.
        let mut summaries = Some(Vec::new());
        for t in self.all_topics() {
            let (r, s) = t.close_summarized();
            if first.is_ok() {
                first = r;
            }
            match (s, summaries.as_mut()) {
                (Some(s), Some(all)) => all.push((t.name().to_string(), s)),
                _ => summaries = None,
            }
        }
        if let (Ok(()), Some(c)) = (&first, &self.coordinator) {
            // Every marker is on disk now.
            c.close();
        }
        // Commits made with commit_acks 1 or 0 too.
        let synced = self.groups.sync_commits();
        if first.is_ok() {
            first = synced;
        }
        // Shared mode: another process may write after this one closes.
        let summaries = summaries.filter(|_| self.share.is_none());
        if let (Ok(()), Some(all)) = (&first, summaries) {
            let session = self.options.unclean.session();
            if let Err(e) =
                crate::partition_handle::write(&self.dir, self.config.file_mode, session, &all)
            {
                // The next open opens every partition, as after a crash.
                ::log::warn!("writing the partitions' summary: {e}");
            }
        }
        let held = std::mem::take(&mut *sync::lock(&self.held));
        for h in held.iter().filter_map(Weak::upgrade) {
            h.clear();
        }
        // Releasing the file releases the flock.
        sync::lock(&self.lock).take();
        sync::lock(&self.exclusive).take();
        if let Some(share) = &self.share {
            // No share group's lock is held under this process's token
            // once it goes (new operations are refused since `closed`),
            // and no record either.
            self.share_groups.close_members();
            share.leave();
        }
        first
    }
}
