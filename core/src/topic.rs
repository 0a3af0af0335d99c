//! Topics: configuration, name rules, and the partitions of one topic.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::atomic_file::write_atomic;
use crate::error::{Error, IoContext, Result};
use crate::log::{
    batch, LogConfig, PartitionLog, PendingSync, RecoveryStats, SharedLog, UncleanMark,
};
use crate::partition_handle::{PartitionHandle, Summary};
use crate::sync;

/// Version of `topic.json`.
const TOPIC_FILE_VERSION: u32 = 1;
/// Name of the topic metadata file.
pub(crate) const TOPIC_FILE: &str = "topic.json";

/// Longest topic name accepted (Kafka's limit).
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Configuration of a topic, persisted in `topic.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TopicConfig {
    /// Number of partitions (1 to 100,000).
    pub partitions: u32,
    /// Most bytes of log in one segment file; a new segment starts when
    /// the next batch does not fit (4 KiB to 2 GiB; default 64 MiB). The
    /// file is not preallocated to this size: it starts at 64 KiB and grows
    /// in steps (doubling, at most 32 MiB at a time) ahead of the data, and
    /// is trimmed to its data when the next segment starts.
    pub segment_bytes: u64,
    /// Delete closed segments whose newest record is older than this many
    /// milliseconds (`None`: keep forever, the default).
    pub retention_ms: Option<u64>,
    /// Delete the oldest closed segments while the partition holds more than
    /// this many bytes (`None`: no limit, the default).
    pub retention_bytes: Option<u64>,
    /// Largest encoded batch (a single message is a batch of one, with 61
    /// bytes of batch header); default 1 MiB. At most `segment_bytes`.
    pub max_message_bytes: u32,
    /// Bytes of log between two entries of the sparse indexes (default 4096).
    pub index_interval_bytes: u32,
    /// Stamp records with the time they are appended instead of the time the
    /// producer gave (Kafka's `message.timestamp.type=LogAppendTime`);
    /// default false (create time).
    pub log_append_time: bool,
    /// Time retention (`retention_ms`) keeps the segments that some consumer
    /// group has not committed past; `retention_bytes` stays a hard cap that
    /// deletes them anyway. Default false.
    pub retention_respects_groups: bool,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            partitions: 1,
            segment_bytes: 64 << 20,
            retention_ms: None,
            retention_bytes: None,
            max_message_bytes: 1 << 20,
            index_interval_bytes: 4096,
            log_append_time: false,
            retention_respects_groups: false,
        }
    }
}

impl TopicConfig {
    /// The default configuration with `partitions` partitions.
    pub fn new(partitions: u32) -> Self {
        TopicConfig {
            partitions,
            ..TopicConfig::default()
        }
    }

    /// Sets `segment_bytes`, lowering `max_message_bytes` to it if needed.
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        if u64::from(self.max_message_bytes) > bytes {
            self.max_message_bytes = bytes.min(u64::from(u32::MAX)) as u32;
        }
        self
    }

    /// Sets `retention_ms`.
    pub fn retention_ms(mut self, ms: u64) -> Self {
        self.retention_ms = Some(ms);
        self
    }

    /// Sets `retention_bytes`.
    pub fn retention_bytes(mut self, bytes: u64) -> Self {
        self.retention_bytes = Some(bytes);
        self
    }

    /// Sets `max_message_bytes`.
    pub fn max_message_bytes(mut self, bytes: u32) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Sets `retention_respects_groups`.
    pub fn retention_respects_groups(mut self, on: bool) -> Self {
        self.retention_respects_groups = on;
        self
    }

    /// Sets `log_append_time`.
    pub fn log_append_time(mut self, on: bool) -> Self {
        self.log_append_time = on;
        self
    }

    /// Sets `index_interval_bytes`.
    pub fn index_interval_bytes(mut self, bytes: u32) -> Self {
        self.index_interval_bytes = bytes;
        self
    }

    /// Checks every value against its allowed range.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if !(1..=100_000).contains(&self.partitions) {
            return bad(format!(
                "partitions must be 1 to 100000, got {}",
                self.partitions
            ));
        }
        if !(4096..=(2u64 << 30)).contains(&self.segment_bytes) {
            return bad(format!(
                "segment_bytes must be 4096 to 2147483648, got {}",
                self.segment_bytes
            ));
        }
        let min_msg = batch::HEADER_LEN as u32 + 8;
        if self.max_message_bytes < min_msg
            || u64::from(self.max_message_bytes) > self.segment_bytes
        {
            return bad(format!(
                "max_message_bytes must be {min_msg} to segment_bytes ({}), got {}",
                self.segment_bytes, self.max_message_bytes
            ));
        }
        if self.index_interval_bytes == 0 {
            return bad("index_interval_bytes must be at least 1".into());
        }
        Ok(())
    }
}

/// The names of internal topics (and of the delayed records' mover
/// group), which [`validate_topic_name`] reserves for the engine.
pub(crate) const INTERNAL_NAMES: [&str; 3] = [
    crate::delayed::TOPIC,
    crate::delayed::DEAD_LETTER_TOPIC,
    crate::delayed::MOVER_GROUP,
];

/// [`validate_topic_name`], letting the engine's internal names through.
pub(crate) fn validate_name_or_internal(name: &str) -> Result<()> {
    if INTERNAL_NAMES.contains(&name) {
        return Ok(());
    }
    validate_topic_name(name)
}

/// Checks a topic name: 1 to 249 characters of `[A-Za-z0-9._-]`, not `.` or
/// `..`, not starting with `__` (reserved for internal topics).
pub fn validate_topic_name(name: &str) -> Result<()> {
    let fail = |reason| {
        Err(Error::InvalidTopicName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return fail("it is longer than 249 characters");
    }
    if name == "." || name == ".." {
        return fail("'.' and '..' are not allowed");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return fail("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    if name.starts_with("__") {
        return fail("names starting with '__' are reserved for internal use");
    }
    Ok(())
}

/// One partition as described by [`crate::Broker::topic`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition number.
    pub partition: u32,
    /// First retained offset.
    pub start_offset: u64,
    /// Offset the next record will get.
    pub end_offset: u64,
    /// Bytes of log on disk.
    pub size_bytes: u64,
    /// Number of segment files.
    pub segments: usize,
    /// What recovery truncated when the data directory was opened.
    pub recovery: RecoveryStats,
    /// Flushes to disk since open; concurrent `acks=all` senders share them.
    pub flushes: u64,
}

/// A topic as described by [`crate::Broker::topic`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Topic name.
    pub name: String,
    /// Its configuration.
    pub config: TopicConfig,
    /// Its partitions, in order.
    pub partitions: Vec<PartitionInfo>,
}

#[derive(Serialize, Deserialize)]
struct TopicFile {
    version: u32,
    name: String,
    config: TopicConfig,
}

/// Partitions just opened, each with what its open still has to make
/// durable (see [`PartitionLog::sync_opened`]).
pub(crate) type Opened = Vec<(Arc<PartitionLog>, Option<PendingSync>)>;

/// Reads and checks `topic.json` in topic directory `dir`; `Ok(None)`
/// when there is none (an unfinished creation).
fn read_topic_file(dir: &Path) -> Result<Option<TopicFile>> {
    let path = dir.join(TOPIC_FILE);
    let Some(bytes) = crate::atomic_file::read_small(&path)? else {
        return Ok(None);
    };
    let file: TopicFile = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
        path: path.clone(),
        position: e.column() as u64,
        reason: e.to_string(),
    })?;
    if file.version != TOPIC_FILE_VERSION {
        return Err(Error::UnsupportedVersion {
            path,
            found: file.version,
            supported: TOPIC_FILE_VERSION,
        });
    }
    file.config.validate()?;
    Ok(Some(file))
}

/// Most threads opening one topic's partitions at once.
const OPEN_THREADS: usize = 4;
/// Partitions below which one more thread is not worth starting.
const PARTITIONS_PER_OPEN_THREAD: usize = 64;

/// Options from the broker that apply to every topic.
#[derive(Debug, Clone)]
pub(crate) struct TopicOptions {
    pub prefault: bool,
    pub file_mode: u32,
    /// The data directory's unclean mark.
    pub unclean: Arc<UncleanMark>,
    /// The broker's background threads.
    pub pool: Arc<crate::background::Pool>,
    /// The broker's descriptor cache.
    pub files: Arc<crate::files::FileCache>,
    /// Shared mode, in the writer: what the logs do for readers in other
    /// processes (`None` in exclusive mode).
    pub shared: Option<SharedLog>,
    /// Shared mode, not the writer: partitions open for reading only.
    pub reader: bool,
    /// What recovery asks the transaction log (see [`CommittedRuns`]).
    pub committed: Option<crate::log::CommittedRuns>,
}

/// A topic: its config and its partitions (each opened at the topic's open,
/// or on first use after a clean close: see `partition_handle.rs`).
#[derive(Debug)]
pub(crate) struct Topic {
    name: Arc<str>,
    dir: PathBuf,
    options: TopicOptions,
    config: RwLock<TopicConfig>,
    partitions: RwLock<Arc<Vec<Arc<PartitionHandle>>>>,
    /// Every partition's log, once all are open.
    all_open: RwLock<Option<Arc<Vec<Arc<PartitionLog>>>>>,
    deleted: AtomicBool,
    /// Set at close: no partition opens any more.
    closed: AtomicBool,
    /// The inode of the topic's directory when it was opened (shared
    /// mode: a topic deleted and created again under its name by another
    /// process has another).
    dir_ino: u64,
}

/// Runs `f` on every number of `range`, on several threads when there are
/// many (opening a partition is mostly system calls: a few opens, maps and
/// reads), and returns the results in order.
fn in_parallel<T: Send>(
    range: std::ops::Range<u32>,
    f: impl Fn(u32) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let count = range.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(OPEN_THREADS)
        .min(count / PARTITIONS_PER_OPEN_THREAD)
        .max(1);
    if threads == 1 {
        return range.map(f).collect();
    }
    let per = count.div_ceil(threads) as u32;
    let chunks: Vec<std::ops::Range<u32>> = (0..threads as u32)
        .map(|i| {
            let start = range.start + i * per;
            start.min(range.end)..(start + per).min(range.end)
        })
        .collect();
    let f = &f;
    let done: Vec<Result<Vec<T>>> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                std::thread::Builder::new().spawn_scoped(s, move || chunk.map(f).collect())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(e) => Err(Error::io("starting a thread to open partitions", e)),
            })
            .collect()
    });
    let mut all = Vec::with_capacity(count);
    for part in done {
        all.extend(part?);
    }
    Ok(all)
}

impl Topic {
    fn log_config(config: &TopicConfig, options: &TopicOptions) -> LogConfig {
        LogConfig {
            segment_bytes: config.segment_bytes as usize,
            index_interval_bytes: config.index_interval_bytes as usize,
            max_message_bytes: config.max_message_bytes as usize,
            retention_ms: config.retention_ms,
            retention_bytes: config.retention_bytes,
            prefault: options.prefault,
            file_mode: options.file_mode,
            log_append_time: config.log_append_time,
            respects_groups: config.retention_respects_groups,
            unclean: Arc::clone(&options.unclean),
            pool: Arc::clone(&options.pool),
            files: Arc::clone(&options.files),
            shared: options.shared.clone(),
            committed: options.committed.clone(),
        }
    }

    fn save(&self, config: &TopicConfig) -> Result<()> {
        let file = TopicFile {
            version: TOPIC_FILE_VERSION,
            name: self.name.to_string(),
            config: config.clone(),
        };
        let json = serde_json::to_vec_pretty(&file).expect("topic config serializes");
        write_atomic(
            &self.dir.join(TOPIC_FILE),
            &json,
            self.options.file_mode,
            true,
        )
    }

    /// Opens (creating what is missing) partitions `range` of the topic,
    /// synced: see [`Topic::open_partitions_unsynced`].
    fn open_partitions(
        name: &Arc<str>,
        dir: &Path,
        config: &TopicConfig,
        options: &TopicOptions,
        range: std::ops::Range<u32>,
    ) -> Result<Vec<Arc<PartitionLog>>> {
        let opened = Topic::open_partitions_unsynced(name, dir, config, options, range)?;
        PartitionLog::sync_opened(&opened, dir)?;
        Ok(opened.into_iter().map(|(log, _)| log).collect())
    }

    /// Opens (creating what is missing) partitions `range` of the topic,
    /// each with what its open still has to make durable (see
    /// [`PartitionLog::sync_opened`]): none may be used before that.
    fn open_partitions_unsynced(
        name: &Arc<str>,
        dir: &Path,
        config: &TopicConfig,
        options: &TopicOptions,
        range: std::ops::Range<u32>,
    ) -> Result<Opened> {
        in_parallel(range, |p| {
            PartitionLog::open_unsynced(
                Arc::clone(name),
                p,
                &dir.join(p.to_string()),
                Topic::log_config(config, options),
            )
            .map(|(log, pending)| (Arc::new(log), pending))
        })
    }

    fn new(name: Arc<str>, dir: PathBuf, options: TopicOptions, config: TopicConfig) -> Topic {
        use std::os::unix::fs::MetadataExt;
        Topic {
            dir_ino: std::fs::metadata(&dir).map_or(0, |m| m.ino()),
            name,
            dir,
            options,
            config: RwLock::new(config),
            partitions: RwLock::new(Arc::new(Vec::new())),
            all_open: RwLock::new(None),
            deleted: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// Sets the partitions to `logs`, all open.
    fn set_opened(&self, logs: Vec<Arc<PartitionLog>>) {
        let handles = logs
            .iter()
            .map(|l| Arc::new(PartitionHandle::opened(Arc::clone(l))))
            .collect();
        *sync::write(&self.partitions) = Arc::new(handles);
        *sync::write(&self.all_open) = Some(Arc::new(logs));
    }

    /// Creates the topic's directory, partitions and `topic.json` (written
    /// last: a directory without it is an unfinished creation).
    pub(crate) fn create(
        dir: PathBuf,
        name: &str,
        config: TopicConfig,
        options: TopicOptions,
    ) -> Result<Topic> {
        crate::private_dir::create_dir_all(&dir, options.file_mode)?;
        let name: Arc<str> = name.into();
        let partitions =
            Topic::open_partitions(&name, &dir, &config, &options, 0..config.partitions)?;
        let topic = Topic::new(name, dir, options, config.clone());
        topic.set_opened(partitions);
        topic.save(&config)?;
        Ok(topic)
    }

    /// Opens an existing topic directory. `Ok(None)` for an unfinished one.
    ///
    /// With `summary` (what the broker's last clean close recorded of each
    /// partition, trusted: nothing was written since), no partition is
    /// opened now: each opens on first use. Otherwise every partition is
    /// opened, and those its open checked are added to `unsynced`, to be
    /// made durable (with other topics', [`PartitionLog::sync_opened`])
    /// before the topic is used.
    pub(crate) fn open(
        dir: PathBuf,
        options: TopicOptions,
        unsynced: &mut Opened,
        summary: Option<Vec<Summary>>,
    ) -> Result<Option<Topic>> {
        let Some(file) = read_topic_file(&dir)? else {
            return Ok(None);
        };
        let name: Arc<str> = file.name.as_str().into();
        if let Some(summary) = summary.filter(|s| s.len() == file.config.partitions as usize) {
            // A partition whose recovery point still says it closed cleanly
            // where the summary says opens on first use; any other (a
            // point removed or rewritten since, retention leftovers) now.
            let slots = in_parallel(0..file.config.partitions, |p| {
                let s = summary[p as usize];
                let pdir = dir.join(p.to_string());
                if !s.eager && PartitionLog::clean_point(&pdir)? == Some(s.end_offset) {
                    return Ok((Arc::new(PartitionHandle::lazy(s)), None));
                }
                let (log, pending) = PartitionLog::open_unsynced(
                    Arc::clone(&name),
                    p,
                    &pdir,
                    Topic::log_config(&file.config, &options),
                )?;
                let log = Arc::new(log);
                let pending = pending.map(|pending| (Arc::clone(&log), Some(pending)));
                Ok((Arc::new(PartitionHandle::opened(log)), pending))
            })?;
            let mut handles = Vec::with_capacity(slots.len());
            for (h, pending) in slots {
                unsynced.extend(pending);
                handles.push(h);
            }
            let topic = Topic::new(name, dir, options, file.config);
            if handles.iter().all(|h| h.log().is_some()) {
                let logs = handles.iter().filter_map(|h| h.log().cloned()).collect();
                *sync::write(&topic.all_open) = Some(Arc::new(logs));
            }
            *sync::write(&topic.partitions) = Arc::new(handles);
            return Ok(Some(topic));
        }
        let opened = Topic::open_partitions_unsynced(
            &name,
            &dir,
            &file.config,
            &options,
            0..file.config.partitions,
        )?;
        let mut partitions = Vec::with_capacity(opened.len());
        for (log, pending) in opened {
            if pending.is_some() {
                unsynced.push((Arc::clone(&log), pending));
            }
            partitions.push(log);
        }
        let topic = Topic::new(name, dir, options, file.config);
        topic.set_opened(partitions);
        Ok(Some(topic))
    }

    /// Opens an existing topic directory for reading only (shared mode, a
    /// process that is not the writer; `options.reader` set): each
    /// partition opens on first use with [`PartitionLog::open_reader`],
    /// nothing written. `Ok(None)` for an unfinished topic.
    pub(crate) fn open_reader(dir: PathBuf, options: TopicOptions) -> Result<Option<Topic>> {
        let Some(file) = read_topic_file(&dir)? else {
            return Ok(None);
        };
        let name: Arc<str> = file.name.as_str().into();
        let handles = (0..file.config.partitions)
            .map(|_| Arc::new(PartitionHandle::lazy(Summary::default())))
            .collect();
        let topic = Topic::new(name, dir, options, file.config);
        *sync::write(&topic.partitions) = Arc::new(handles);
        Ok(Some(topic))
    }

    /// A reader topic: takes in what the writer changed in `topic.json`
    /// since (more partitions). Returns whether anything changed.
    pub(crate) fn follow_writer(&self) -> Result<bool> {
        let Some(file) = read_topic_file(&self.dir)? else {
            return Ok(false);
        };
        let old = self.partition_count();
        if file.config.partitions <= old {
            return Ok(false);
        }
        let mut all = sync::write(&self.all_open);
        let mut parts = sync::write(&self.partitions);
        let mut v: Vec<_> = parts.as_ref().clone();
        v.extend(
            (old..file.config.partitions)
                .map(|_| Arc::new(PartitionHandle::lazy(Summary::default()))),
        );
        *parts = Arc::new(v);
        // The new partitions open on first use.
        *all = None;
        *sync::write(&self.config) = file.config;
        Ok(true)
    }

    /// The topic name.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The inode of the topic's directory when it was opened.
    pub(crate) fn dir_ino(&self) -> u64 {
        self.dir_ino
    }

    /// The topic directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// In shared mode, brings the open logs of `handles` up to what the
    /// other processes published.
    pub(crate) fn refresh_open(&self, handles: &[Arc<PartitionHandle>]) {
        if self.options.reader {
            for log in handles.iter().filter_map(|h| h.log()) {
                log.refresh();
            }
        }
    }

    /// A snapshot of the partition handles.
    pub(crate) fn handles(&self) -> Arc<Vec<Arc<PartitionHandle>>> {
        Arc::clone(&sync::read(&self.partitions))
    }

    /// Number of partitions.
    #[inline]
    pub(crate) fn partition_count(&self) -> u32 {
        sync::read(&self.partitions).len() as u32
    }

    /// Every partition's log, opening those not open yet (on several
    /// threads when there are many).
    ///
    /// # Errors
    /// The error of the first partition that fails to open (the others
    /// stay usable), or `Closed` once the topic is closed.
    #[inline]
    pub(crate) fn partitions(&self) -> Result<Arc<Vec<Arc<PartitionLog>>>> {
        let opened = sync::read(&self.all_open).as_ref().map(Arc::clone);
        let all = match opened {
            Some(all) => all,
            None => self.open_all()?,
        };
        if self.options.reader {
            for log in all.iter() {
                log.refresh();
            }
        }
        Ok(all)
    }

    #[cold]
    fn open_all(&self) -> Result<Arc<Vec<Arc<PartitionLog>>>> {
        let handles = self.handles();
        let logs = in_parallel(0..handles.len() as u32, |p| {
            self.open_handle(p, &handles[p as usize])
        })?;
        let logs = Arc::new(logs);
        let mut all = sync::write(&self.all_open);
        // Partitions added meanwhile make the list incomplete: not kept.
        if sync::read(&self.partitions).len() == logs.len() {
            *all = Some(Arc::clone(&logs));
        }
        Ok(logs)
    }

    /// Opens the log of partition `p` (handle `h`) if this is its first use.
    pub(crate) fn open_handle(&self, p: u32, h: &PartitionHandle) -> Result<Arc<PartitionLog>> {
        h.get_or_open(|| {
            if self.is_deleted() {
                return Err(Error::UnknownTopic(self.name.to_string()));
            }
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed("broker"));
            }
            let config = sync::read(&self.config).clone();
            let dir = self.dir.join(p.to_string());
            if self.options.reader {
                let log = PartitionLog::open_reader(
                    Arc::clone(&self.name),
                    p,
                    &dir,
                    Topic::log_config(&config, &self.options),
                )?;
                return Ok(Arc::new(log));
            }
            let (log, pending) = PartitionLog::open_unsynced_trusting(
                Arc::clone(&self.name),
                p,
                &dir,
                Topic::log_config(&config, &self.options),
                true,
            )
            .inspect_err(|e| {
                ::log::error!(
                    "opening partition {p} of topic {:?} on first use: {e}",
                    &*self.name
                );
            })?;
            if let Some(pending) = &pending {
                log.finish_pending(pending)?;
            }
            Ok(Arc::new(log))
        })
    }

    /// Partition `p` (opened if this is its first use), or
    /// `UnknownPartition`.
    ///
    /// # Errors
    /// `UnknownPartition`; the error of its open (a damaged or unreadable
    /// file), which leaves the other partitions usable.
    #[inline]
    pub(crate) fn partition(&self, p: u32) -> Result<Arc<PartitionLog>> {
        let h = {
            let parts = sync::read(&self.partitions);
            match parts.get(p as usize) {
                Some(h) => match h.log() {
                    Some(log) => {
                        if self.options.reader {
                            // What the writer in another process published.
                            log.refresh();
                        }
                        return Ok(Arc::clone(log));
                    }
                    None => Arc::clone(h),
                },
                None => {
                    return Err(Error::UnknownPartition {
                        topic: self.name.to_string(),
                        partition: p,
                        count: parts.len() as u32,
                    })
                }
            }
        };
        self.open_handle(p, &h)
    }

    /// End offset of partition `p` (from its summary when it is not open).
    pub(crate) fn end_offset(&self, p: u32) -> Option<u64> {
        sync::read(&self.partitions)
            .get(p as usize)
            .map(|h| h.end_offset())
    }

    /// Sets partition `p`'s retention floor (see
    /// `PartitionLog::set_retention_floor`).
    pub(crate) fn set_retention_floor(&self, p: u32, floor: u64) {
        if let Some(h) = sync::read(&self.partitions).get(p as usize) {
            h.set_retention_floor(floor);
        }
    }

    /// Number of partitions whose log is open.
    #[cfg(test)]
    pub(crate) fn open_partition_count(&self) -> usize {
        self.handles().iter().filter(|h| h.log().is_some()).count()
    }

    /// Opens tried through partition `p`'s handle.
    #[cfg(test)]
    pub(crate) fn opens(&self, p: u32) -> u64 {
        self.handles()[p as usize].opens()
    }

    /// Grows the topic to `total` partitions; existing data stays.
    pub(crate) fn add_partitions(&self, total: u32) -> Result<()> {
        let mut config = sync::read(&self.config).clone();
        if total <= config.partitions {
            return Err(Error::InvalidArgument(format!(
                "topic {:?} already has {} partitions; the new count must be larger, got {total}",
                &*self.name, config.partitions
            )));
        }
        let old = config.partitions;
        config.partitions = total;
        config.validate()?;
        // Leftovers of an interrupted earlier attempt must not come back.
        for p in old..total {
            let d = self.dir.join(p.to_string());
            if d.exists() {
                std::fs::remove_dir_all(&d).ctx(|| format!("removing {}", d.display()))?;
            }
        }
        if self.options.reader {
            // Shared mode: created as an exclusive writer would, then
            // opened like every other partition here, on first use.
            let plain = TopicOptions {
                shared: None,
                reader: false,
                ..self.options.clone()
            };
            let added = Topic::open_partitions(&self.name, &self.dir, &config, &plain, old..total)?;
            for log in &added {
                log.close()?;
            }
            self.save(&config)?;
            drop(added);
            self.follow_writer()?;
            return Ok(());
        }
        let added =
            Topic::open_partitions(&self.name, &self.dir, &config, &self.options, old..total)?;
        self.save(&config)?;
        let mut all = sync::write(&self.all_open);
        let mut parts = sync::write(&self.partitions);
        let mut v: Vec<_> = parts.as_ref().clone();
        v.extend(
            added
                .iter()
                .map(|l| Arc::new(PartitionHandle::opened(Arc::clone(l)))),
        );
        *parts = Arc::new(v);
        if let Some(logs) = all.as_ref() {
            let mut logs: Vec<_> = logs.as_ref().clone();
            logs.extend(added);
            *all = Some(Arc::new(logs));
        }
        *sync::write(&self.config) = config;
        Ok(())
    }

    /// The config and per-partition state. Partitions not open yet open
    /// now: what their open's checks found is part of the description.
    ///
    /// # Errors
    /// The error of a partition that fails to open.
    pub(crate) fn info(&self) -> Result<TopicInfo> {
        let logs = self.partitions()?;
        let config = sync::read(&self.config).clone();
        let partitions = logs
            .iter()
            .map(|l| PartitionInfo {
                partition: l.partition(),
                start_offset: l.start_offset(),
                end_offset: l.end_offset(),
                size_bytes: l.size_bytes(),
                segments: l.segment_count(),
                recovery: l.recovery(),
                flushes: l.flushes(),
            })
            .collect();
        Ok(TopicInfo {
            name: self.name.to_string(),
            config,
            partitions,
        })
    }

    /// Whether time retention waits for consumer groups' commits.
    pub(crate) fn respects_groups(&self) -> bool {
        sync::read(&self.config).retention_respects_groups
    }

    /// Whether the topic was deleted.
    pub(crate) fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Marks the topic deleted and closes its partitions.
    pub(crate) fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
    }

    /// Flushes and closes every partition; returns the first error.
    pub(crate) fn close(&self) -> Result<()> {
        self.close_summarized().0
    }

    /// Flushes and closes every partition; returns the first error and,
    /// when every partition closed cleanly, each one's summary (see
    /// `partition_handle.rs`). No partition opens after this.
    pub(crate) fn close_summarized(&self) -> (Result<()>, Option<Vec<Summary>>) {
        self.closed.store(true, Ordering::Release);
        let handles = self.handles();
        let mut first = Ok(());
        let mut summaries = Some(Vec::with_capacity(handles.len()));
        for h in handles.iter() {
            let (r, s) = h.close();
            if first.is_ok() {
                first = r;
            }
            match (s, summaries.as_mut()) {
                (Some(s), Some(all)) => all.push(s),
                _ => summaries = None,
            }
        }
        (first, summaries)
    }

    /// Runs retention on every partition: those open, and those not open
    /// yet that hold more than one segment (retention never deletes the
    /// active one), which it opens.
    pub(crate) fn enforce_retention(&self, now: i64) -> usize {
        let retains = {
            let c = sync::read(&self.config);
            c.retention_ms.is_some() || c.retention_bytes.is_some()
        };
        let mut removed = 0;
        for (p, h) in self.handles().iter().enumerate() {
            let log = match h.log() {
                Some(log) => Arc::clone(log),
                None if retains && h.summary().is_some_and(|s| s.segments > 1) => {
                    match self.open_handle(p as u32, h) {
                        Ok(log) => log,
                        Err(e) => {
                            ::log::warn!(
                                "retention of partition {p} of topic {:?}: {e}",
                                &*self.name
                            );
                            continue;
                        }
                    }
                }
                None => continue,
            };
            removed += log.enforce_retention(now);
        }
        removed
    }

    /// Flushes every open partition (one not open yet has nothing to flush).
    pub(crate) fn flush(&self) -> Result<()> {
        for h in self.handles().iter() {
            if let Some(log) = h.log() {
                log.flush()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names() {
        for ok in ["a", "orders", "a.b-c_d", "A9", &"x".repeat(249)] {
            validate_topic_name(ok).unwrap();
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "__internal",
            "é",
            "a\0b",
            &"x".repeat(250),
        ] {
            assert!(
                matches!(
                    validate_topic_name(bad),
                    Err(Error::InvalidTopicName { .. })
                ),
                "{bad:?}"
            );
        }
    }

    /// After a clean close no partition is open; threads using one at once
    /// open it once and share its log; describing the topic opens the rest.
    #[test]
    fn first_use_opens_once() {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::Config::default().retention_check_interval_ms(0);
        {
            let mq = crate::Broker::open(dir.path(), config.clone()).unwrap();
            mq.create_topic("t", TopicConfig::new(4)).unwrap();
            mq.close().unwrap();
        }
        let mq = crate::Broker::open(dir.path(), config).unwrap();
        let topic = mq.inner().topic("t").unwrap();
        assert_eq!(topic.open_partition_count(), 0);
        let barrier = std::sync::Barrier::new(8);
        let logs: Vec<Arc<PartitionLog>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        topic.partition(2).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(logs.iter().all(|l| Arc::ptr_eq(l, &logs[0])));
        assert_eq!(topic.opens(2), 1);
        assert_eq!(topic.open_partition_count(), 1);
        assert_eq!(mq.topic("t").unwrap().partitions.len(), 4);
        assert_eq!(topic.open_partition_count(), 4);
        assert_eq!(topic.opens(2), 1);
    }

    #[test]
    fn config_ranges() {
        TopicConfig::default().validate().unwrap();
        assert!(TopicConfig::new(0).validate().is_err());
        assert!(TopicConfig::new(1).segment_bytes(100).validate().is_err());
        assert!(TopicConfig::new(1)
            .segment_bytes(8192)
            .max_message_bytes(8193)
            .validate()
            .is_err());
        assert!(TopicConfig::new(1)
            .index_interval_bytes(0)
            .validate()
            .is_err());
    }
}
