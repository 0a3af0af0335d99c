//! The file a share group's acknowledgement state is kept in:
//! `<dir>/groups/<group>.share`, with `<group>.share.lock`.
//!
//! In exclusive mode the one process that uses the group holds the lock
//! file (`flock`, exclusive) for as long as the group is open. In shared
//! mode every process that uses the group takes the lock in that file's
//! page for each operation ([`Store::enter`], see `lock_page`), reads the
//! records the others appended since its last look (all of them again
//! when another process rewrote the file; nothing when the page says the
//! file is as this process left it), decides, appends, and lets go: the
//! file is the group's state, each process's memory a copy of it.
//!
//! It has the layout of the commits journal: a 16-byte header (magic
//! `MQSHRJ01`, generation) and records framed by length and CRC32C, read up
//! to the first that is cut short or does not check out. A record is a
//! sequence of operations, applied in order when the file is read back:
//!
//! - `1` start: topic length (u16), topic, partition (u32), start offset
//!   (u64). Every offset below is done; what is known below it is dropped.
//! - `2` run: topic length (u16), topic, partition (u32), first and last
//!   offset (u64, inclusive), state (u8: 0 available, 1 acknowledged,
//!   2 archived, 3 dead-lettering), delivery count (u32), not-before time
//!   (i64, ms since the epoch).
//! - `3` acquire (shared mode): topic length (u16), topic, partition (u32),
//!   first and last offset (u64, inclusive), delivery count (u32), lock
//!   deadline (u64, ms of the system's monotonic clock) and the holder's
//!   process token (u64, see `shared::procs`). Read back while the holder
//!   lives, the records are held by it until the deadline; once it has
//!   exited, they are available (their delivery counted). In exclusive
//!   mode an acquisition is stored as an available run with its delivery
//!   counted, so that a crash of the process counts as a delivery.
//!
//! Integers are little-endian. When the file passes 1 MiB and four times
//! what its state takes, it is rewritten (temporary file, sync, rename) as
//! one record holding the whole state, under the next generation.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lock_page::{LockPage, StateView, View};
use super::state::{is_foreign, Change, Entry, Part, State, Stored, FOREIGN};
use crate::clock::monotonic_ms;
use crate::error::{Error, IoContext, Result};
use crate::le_reader::LeReader;
use crate::offsets::journal::{self, HEADER_LEN};
use crate::shared::{process_alive, LiveLock};

const MAGIC: [u8; 8] = *b"MQSHRJ01";
const OP_START: u8 = 1;
const OP_RUN: u8 = 2;
const OP_ACQUIRE: u8 = 3;
/// The longest run believed when read back (a longer one is damage).
const MAX_RUN: u64 = 1 << 24;
/// Size past which the file may be rewritten.
const COMPACT_AFTER: u64 = 1 << 20;

/// Share partitions by topic and partition.
pub(crate) type Parts = HashMap<(String, u32), Part>;

/// One decoded operation.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Start {
        topic: String,
        partition: u32,
        offset: u64,
    },
    Run {
        topic: String,
        partition: u32,
        first: u64,
        last: u64,
        state: Stored,
        count: u32,
        not_before_ms: i64,
    },
    Acquire {
        topic: String,
        partition: u32,
        first: u64,
        last: u64,
        count: u32,
        deadline_ms: u64,
        owner: u64,
    },
}

/// Operations being encoded into one record.
#[derive(Debug, Default)]
pub(crate) struct Ops {
    bytes: Vec<u8>,
    /// Shared mode: this process's token, acquisitions are stored as such
    /// (see the module's notes). `None` in exclusive mode.
    owner: Option<u64>,
    /// Whether other processes' acquisitions are written too (a rewrite
    /// of the whole state); otherwise they are theirs to write.
    with_foreign: bool,
}

/// How one record's state is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored2 {
    Run(Stored, u32, i64),
    Acquire(u32, u64, u64),
    Skip,
}

/// Milliseconds of the monotonic clock at `at`, given `now` on both clocks
/// (rounded up: a lock never ends earlier for other processes).
fn mono_ms_of(at: Instant, now: Instant, now_mono: u64) -> u64 {
    match at.checked_duration_since(now) {
        Some(ahead) => now_mono.saturating_add(ahead.as_millis() as u64 + 1),
        None => now_mono.saturating_sub(now.duration_since(at).as_millis() as u64),
    }
}

/// The instant of `ms` of the monotonic clock, given `now` on both clocks.
fn instant_of(ms: u64, now: Instant, now_mono: u64) -> Instant {
    if ms >= now_mono {
        now + Duration::from_millis(ms - now_mono)
    } else {
        now.checked_sub(Duration::from_millis(now_mono - ms))
            .unwrap_or(now)
    }
}

impl Ops {
    /// Operations of a store whose process token is `owner` (shared mode;
    /// `None` in exclusive mode).
    pub(crate) fn new(owner: Option<u64>) -> Ops {
        Ops {
            owner,
            ..Ops::default()
        }
    }

    /// The whole state of `parts`, other processes' acquisitions included:
    /// what a rewrite of the file holds.
    pub(crate) fn whole(owner: Option<u64>, parts: &Parts) -> Ops {
        let mut ops = Ops {
            owner,
            with_foreign: true,
            ..Ops::default()
        };
        for ((t, p), part) in parts {
            ops.start(t, *p, part.start);
            let changes: Vec<Change> = part
                .entries
                .iter()
                .map(|(o, e)| Change {
                    offset: *o,
                    entry: e.clone(),
                })
                .collect();
            ops.changes(t, *p, &changes);
        }
        ops
    }
    /// Whether nothing was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn topic(&mut self, topic: &str, partition: u32) {
        // Topic names are at most 249 bytes.
        self.bytes
            .extend_from_slice(&(topic.len() as u16).to_le_bytes());
        self.bytes.extend_from_slice(topic.as_bytes());
        self.bytes.extend_from_slice(&partition.to_le_bytes());
    }

    /// Every offset of `topic`/`partition` below `offset` is done.
    pub(crate) fn start(&mut self, topic: &str, partition: u32, offset: u64) {
        self.bytes.push(OP_START);
        self.topic(topic, partition);
        self.bytes.extend_from_slice(&offset.to_le_bytes());
    }

    /// Offsets `first..=last` are in `state`.
    pub(crate) fn run(
        &mut self,
        topic: &str,
        partition: u32,
        first: u64,
        last: u64,
        s: State,
        count: u32,
    ) {
        let (stored, not_before) = s.stored();
        self.bytes.push(OP_RUN);
        self.topic(topic, partition);
        self.bytes.extend_from_slice(&first.to_le_bytes());
        self.bytes.extend_from_slice(&last.to_le_bytes());
        self.bytes.push(stored as u8);
        self.bytes.extend_from_slice(&count.to_le_bytes());
        self.bytes.extend_from_slice(&not_before.to_le_bytes());
    }

    /// Offsets `first..=last`, delivered `count` times, are held by the
    /// process of token `owner` until `deadline_ms` (monotonic clock).
    fn acquire(
        &mut self,
        at: (&str, u32),
        range: (u64, u64),
        count: u32,
        deadline_ms: u64,
        owner: u64,
    ) {
        self.bytes.push(OP_ACQUIRE);
        self.topic(at.0, at.1);
        self.bytes.extend_from_slice(&range.0.to_le_bytes());
        self.bytes.extend_from_slice(&range.1.to_le_bytes());
        self.bytes.extend_from_slice(&count.to_le_bytes());
        self.bytes.extend_from_slice(&deadline_ms.to_le_bytes());
        self.bytes.extend_from_slice(&owner.to_le_bytes());
    }

    /// How `e` is stored by these operations.
    fn stored_as(&self, e: &Entry, now: Instant, now_mono: u64) -> Stored2 {
        match (e.state, self.owner) {
            (State::Acquired { member, deadline }, Some(me)) => {
                let owner = if is_foreign(member) {
                    if !self.with_foreign {
                        return Stored2::Skip;
                    }
                    member & !FOREIGN
                } else {
                    me
                };
                Stored2::Acquire(e.count, mono_ms_of(deadline, now, now_mono), owner)
            }
            (state, _) => {
                let (s, not_before) = state.stored();
                Stored2::Run(s, e.count, not_before)
            }
        }
    }

    /// `changes` (in offset order) of `topic`/`partition`, as runs.
    pub(crate) fn changes(&mut self, topic: &str, partition: u32, changes: &[Change]) {
        let (now, now_mono) = (Instant::now(), monotonic_ms());
        let mut i = 0;
        while i < changes.len() {
            let c = &changes[i];
            let key = self.stored_as(&c.entry, now, now_mono);
            let mut j = i + 1;
            while j < changes.len()
                && changes[j].offset == changes[j - 1].offset + 1
                && self.stored_as(&changes[j].entry, now, now_mono) == key
            {
                j += 1;
            }
            let last = changes[j - 1].offset;
            match key {
                Stored2::Run(..) => self.run(
                    topic,
                    partition,
                    c.offset,
                    last,
                    c.entry.state,
                    c.entry.count,
                ),
                Stored2::Acquire(count, deadline_ms, owner) => {
                    self.acquire(
                        (topic, partition),
                        (c.offset, last),
                        count,
                        deadline_ms,
                        owner,
                    );
                }
                Stored2::Skip => {}
            }
            i = j;
        }
    }
}

fn decode(payload: &[u8]) -> Option<Vec<Op>> {
    let mut r = LeReader::new(payload);
    let mut ops = Vec::new();
    while !r.rest().is_empty() {
        let kind = r.u8()?;
        let tlen = r.u16()? as usize;
        let topic = r.text(tlen)?.to_owned();
        let partition = r.u32()?;
        ops.push(match kind {
            OP_START => Op::Start {
                topic,
                partition,
                offset: r.u64()?,
            },
            OP_ACQUIRE => {
                let first = r.u64()?;
                let last = r.u64()?;
                if last < first || last - first >= MAX_RUN {
                    return None;
                }
                Op::Acquire {
                    topic,
                    partition,
                    first,
                    last,
                    count: r.u32()?,
                    deadline_ms: r.u64()?,
                    owner: r.u64()?,
                }
            }
            OP_RUN => {
                let first = r.u64()?;
                let last = r.u64()?;
                let state = Stored::from_code(r.u8()?)?;
                let count = r.u32()?;
                let not_before_ms = r.u64()? as i64;
                if last < first || last - first >= MAX_RUN {
                    return None;
                }
                Op::Run {
                    topic,
                    partition,
                    first,
                    last,
                    state,
                    count,
                    not_before_ms,
                }
            }
            _ => return None,
        });
    }
    Some(ops)
}

/// How read-back operations are applied.
struct Replay<'a> {
    /// Operations other processes appended, applied to a state this
    /// process has been using: `start` and `next` only move forward, and
    /// the messages held stay with their records.
    catch_up: bool,
    /// Whether the process of a token still lives.
    alive: &'a mut dyn FnMut(u64) -> bool,
    now: Instant,
    now_mono: u64,
}

/// Applies read-back operations to `parts`.
fn apply(parts: &mut Parts, ops: Vec<Op>, replay: &mut Replay<'_>) {
    let set = |p: &mut Part, o: u64, state: State, count: u32| {
        let message = p.entries.get(&o).and_then(|e| e.message.clone());
        p.entries.insert(
            o,
            Entry {
                state,
                count,
                message,
            },
        );
    };
    for op in ops {
        match op {
            Op::Start {
                topic,
                partition,
                offset,
            } => {
                let p = parts
                    .entry((topic, partition))
                    .or_insert_with(|| Part::at(offset));
                if replay.catch_up {
                    p.start = p.start.max(offset);
                    p.next = p.next.max(offset);
                } else {
                    p.start = offset;
                    p.next = offset;
                }
                p.start_stored = p.start;
                p.entries = p.entries.split_off(&p.start);
            }
            Op::Acquire {
                topic,
                partition,
                first,
                last,
                count,
                deadline_ms,
                owner,
            } => {
                let state = if (replay.alive)(owner) {
                    State::Acquired {
                        member: FOREIGN | owner,
                        deadline: instant_of(deadline_ms, replay.now, replay.now_mono),
                    }
                } else {
                    State::Available { not_before_ms: 0 }
                };
                let p = parts
                    .entry((topic, partition))
                    .or_insert_with(|| Part::at(first));
                for o in first.max(p.start)..=last {
                    set(p, o, state, count);
                }
            }
            Op::Run {
                topic,
                partition,
                first,
                last,
                state,
                count,
                not_before_ms,
            } => {
                let p = parts
                    .entry((topic, partition))
                    .or_insert_with(|| Part::at(first));
                let state = State::from_stored(state, not_before_ms);
                for o in first.max(p.start)..=last {
                    set(p, o, state, count);
                }
            }
        }
    }
}

/// The state file of `group` in the groups directory `gdir`.
fn state_path(gdir: &Path, group: &str) -> PathBuf {
    gdir.join(format!("{group}.share"))
}

/// A state file as read (created if it was missing).
struct Loaded {
    path: PathBuf,
    file: Arc<File>,
    generation: u64,
    end: u64,
    parts: Parts,
}

impl Loaded {
    /// Reads (creating it if missing) the state file at `path`,
    /// acquisitions of processes `alive` says have exited read as
    /// available.
    fn read(path: PathBuf, mode: u32, alive: &mut dyn FnMut(u64) -> bool) -> Result<Loaded> {
        let mut parts = Parts::new();
        let contents = journal::read_records(&path, HEADER_LEN, MAGIC, decode)?;
        let (file, generation, end) = if let Some(c) = contents {
            let mut replay = Replay {
                catch_up: false,
                alive,
                now: Instant::now(),
                now_mono: monotonic_ms(),
            };
            for ops in c.commits {
                apply(&mut parts, ops, &mut replay);
            }
            let file = journal::open_append(&path)?;
            if c.len > c.end {
                // A record a crash cut short: removed before appending.
                file.set_len(c.end)
                    .ctx(|| format!("truncating {}", path.display()))?;
            }
            (file, c.generation, c.end)
        } else {
            if path.exists() {
                return Err(Error::Corrupt {
                    path,
                    position: 0,
                    reason: "not a share group state file".into(),
                });
            }
            (
                journal::create_with(&path, MAGIC, 1, &[], mode)?,
                1,
                HEADER_LEN,
            )
        };
        Ok(Loaded {
            path,
            file: Arc::new(file),
            generation,
            end,
            parts,
        })
    }

    fn into_store(self, mode: u32, access: Access) -> (Store, Parts) {
        (
            Store {
                path: self.path,
                file: self.file,
                generation: self.generation,
                end: self.end,
                appended: 0,
                mode,
                access,
            },
            self.parts,
        )
    }
}

/// Whether the process of a token lives, in the data directory `root`,
/// each token probed once per call of [`liveness`].
fn liveness(root: &Path) -> impl FnMut(u64) -> bool + '_ {
    let mut seen: HashMap<u64, bool> = HashMap::new();
    move |token| {
        *seen
            .entry(token)
            .or_insert_with(|| process_alive(root, token))
    }
}

/// The open store of one share group.
#[derive(Debug)]
pub(crate) struct Store {
    path: PathBuf,
    file: Arc<File>,
    generation: u64,
    /// Where the next record goes.
    end: u64,
    /// Bytes appended over the store's life (across rewrites): the tickets
    /// of the group commit of syncs.
    appended: u64,
    mode: u32,
    /// How the group is shared with other processes.
    access: Access,
}

/// Exclusive or shared use of a store.
#[derive(Debug)]
enum Access {
    /// The lock file, held while open.
    Exclusive { _held: LiveLock },
    /// Shared mode: the lock file, taken per operation.
    Shared(Shared),
}

/// What a store in shared mode needs.
#[derive(Debug)]
struct Shared {
    /// The group's lock, which also knows this process's token (its
    /// acquisitions are written with it) and the data directory (where
    /// processes' liveness is looked up).
    lock: Arc<LockPage>,
    /// The inode of the file as last read or written.
    ino: u64,
}

pub(crate) use super::lock_page::OpLock;

impl Store {
    /// Opens (creating it if needed) the store of `group` under
    /// `<dir>/groups/`, and reads its state back, for a process that
    /// holds the group alone (exclusive mode).
    ///
    /// # Errors
    /// [`Error::Locked`] if another process uses the group; I/O errors.
    pub(crate) fn open(dir: &Path, group: &str, mode: u32) -> Result<(Store, Parts)> {
        let gdir = dir.join("groups");
        crate::private_dir::create_dir_all(&gdir, mode)?;
        let lock_path = gdir.join(format!("{group}.share.lock"));
        let Some(lock) = LiveLock::try_hold(&lock_path, mode)? else {
            return Err(Error::Locked {
                path: lock_path,
                holder: "another process (a share group is used by one process at a time \
                         unless the data directory is open in shared mode)"
                    .into(),
            });
        };
        // No other process has the directory: the holders of acquisitions
        // stored are gone.
        let loaded = Loaded::read(state_path(&gdir, group), mode, &mut |_| false)?;
        Ok(loaded.into_store(mode, Access::Exclusive { _held: lock }))
    }

    /// Opens the store of `group` in a shared data directory `dir`, for the
    /// process of token `token`: every operation takes the lock
    /// ([`Store::enter`]).
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn open_shared(
        dir: &Path,
        group: &str,
        mode: u32,
        token: u64,
    ) -> Result<(Store, Parts)> {
        let gdir = dir.join("groups");
        crate::private_dir::create_dir_all(&gdir, mode)?;
        let lock_path = gdir.join(format!("{group}.share.lock"));
        let lock = LockPage::open(&lock_path, mode, dir, token)?;
        let (_held, _) = lock.lock();
        let loaded = Loaded::read(state_path(&gdir, group), mode, &mut liveness(dir))?;
        let ino = loaded.file.metadata().map_or(0, |m| m.ino());
        let (store, parts) = loaded.into_store(mode, Access::Shared(Shared { lock, ino }));
        store.record();
        Ok((store, parts))
    }

    /// Begins an operation on the group's state. In shared mode, takes the
    /// lock (waiting for another process's operation to end) and brings
    /// `parts` up to date with what other processes wrote; the lock is
    /// held until the returned guard is dropped. `None` in exclusive mode.
    ///
    /// # Errors
    /// I/O errors (the lock is released then).
    pub(crate) fn enter(&mut self, parts: &mut Parts) -> Result<Option<OpLock>> {
        let Access::Shared(sh) = &self.access else {
            return Ok(None);
        };
        let lock = Arc::clone(&sh.lock);
        let (guard, stolen) = lock.lock();
        if let Some(view) = self.view() {
            if !stolen && lock.says(view) {
                return Ok(Some(guard));
            }
        }
        self.catch_up(parts)?;
        self.record();
        Ok(Some(guard))
    }

    /// Shared mode: the state file as this store last read or wrote it.
    fn view(&self) -> Option<View> {
        match &self.access {
            Access::Shared(sh) => Some(View {
                ino: sh.ino,
                generation: self.generation,
                end: self.end,
            }),
            Access::Exclusive { .. } => None,
        }
    }

    /// Shared mode: records in the lock's page that the state file is as
    /// this store last read or wrote it (the lock held).
    fn record(&self) {
        if let (Access::Shared(sh), Some(view)) = (&self.access, self.view()) {
            sh.lock.record(view);
        }
    }

    /// Applies what other processes appended since this store last read
    /// or wrote, or reads everything again if one of them rewrote the
    /// file.
    fn catch_up(&mut self, parts: &mut Parts) -> Result<()> {
        let Access::Shared(sh) = &self.access else {
            return Ok(());
        };
        let (seen_ino, token) = (sh.ino, sh.lock.token());
        // The common case, one system call: the file is still this one
        // (not unlinked by another process's rewrite) and nothing was
        // appended since.
        if let Ok(meta) = self.file.metadata() {
            if meta.nlink() > 0 && meta.ino() == seen_ino && meta.len() == self.end {
                return Ok(());
            }
        }
        let root = sh.lock.root().to_owned();
        let mut alive = liveness(&root);
        let same = std::fs::metadata(&self.path).is_ok_and(|m| m.ino() == seen_ino);
        if same {
            if let Some(c) = journal::read_records(&self.path, self.end, MAGIC, decode)? {
                if c.generation == self.generation && c.ino == seen_ino {
                    let mut replay = Replay {
                        catch_up: true,
                        alive: &mut alive,
                        now: Instant::now(),
                        now_mono: monotonic_ms(),
                    };
                    for ops in c.commits {
                        apply(parts, ops, &mut replay);
                    }
                    if c.len > c.end {
                        // A process died in the middle of an append.
                        self.file
                            .set_len(c.end)
                            .ctx(|| format!("truncating {}", self.path.display()))?;
                    }
                    self.end = c.end;
                    return Ok(());
                }
            }
        }
        // Rewritten by another process: read whole, keeping this
        // process's messages and read positions.
        let fresh = Loaded::read(self.path.clone(), self.mode, &mut alive)?;
        let mut new_parts = fresh.parts;
        let own = FOREIGN | token;
        for (key, p) in &mut new_parts {
            let old = parts.get(key);
            if let Some(old) = old {
                p.next = old.next.max(p.start);
            }
            for (o, e) in &mut p.entries {
                let was = old.and_then(|old| old.entries.get(o));
                if let Some(was) = was {
                    if e.message.is_none() {
                        e.message.clone_from(&was.message);
                    }
                }
                // This process's own acquisitions (written with its token,
                // read back as another process's): held by the member that
                // took them while it holds that delivery; otherwise given
                // up here (their lock ran out), so available.
                if matches!(e.state, State::Acquired { member, .. } if member == own) {
                    e.state = match was {
                        Some(w) if w.count == e.count && w.state.is_held_here() => w.state,
                        _ => State::Available { not_before_ms: 0 },
                    };
                }
            }
        }
        *parts = new_parts;
        let ino = fresh.file.metadata().map_or(0, |m| m.ino());
        self.file = fresh.file;
        self.generation = fresh.generation;
        self.end = fresh.end;
        if let Access::Shared(sh) = &mut self.access {
            sh.ino = ino;
        }
        Ok(())
    }

    /// Appends one record of `ops`. Returns the ticket to wait on for it to
    /// be durable.
    ///
    /// # Errors
    /// I/O errors (nothing is appended then).
    pub(crate) fn append(&mut self, ops: &Ops) -> Result<u64> {
        if ops.is_empty() {
            return Ok(self.appended);
        }
        let record = journal::frame(&ops.bytes);
        journal::append(&self.file, &self.path, self.end, &record)?;
        self.end += record.len() as u64;
        self.appended += record.len() as u64;
        self.record();
        Ok(self.appended)
    }

    /// Whether the file is large enough, against `state_bytes` (an
    /// estimate of what the state takes), to be rewritten.
    pub(crate) fn wants_compaction(&self, state_bytes: u64) -> bool {
        self.end > COMPACT_AFTER && self.end > state_bytes.saturating_mul(4)
    }

    /// Rewrites the file as one record of `ops` (the whole state).
    ///
    /// # Errors
    /// I/O errors (the old file stays in use then).
    pub(crate) fn rewrite(&mut self, ops: &Ops) -> Result<()> {
        // No state: the header alone (an empty record would end the file
        // for readers, and the records appended after it with it).
        let record = if ops.is_empty() {
            Vec::new()
        } else {
            journal::frame(&ops.bytes)
        };
        let file =
            journal::create_with(&self.path, MAGIC, self.generation + 1, &record, self.mode)?;
        self.generation += 1;
        if let Access::Shared(sh) = &mut self.access {
            // Other processes see the new inode and read it whole.
            sh.ino = file.metadata().map_or(0, |m| m.ino());
        }
        self.file = Arc::new(file);
        self.end = HEADER_LEN + record.len() as u64;
        self.record();
        Ok(())
    }

    /// The file to sync, its path, and the bytes appended so far.
    pub(crate) fn sync_target(&self) -> (Option<Arc<File>>, PathBuf, u64) {
        (
            Some(Arc::clone(&self.file)),
            self.path.clone(),
            self.appended,
        )
    }

    /// Bytes appended so far.
    pub(crate) fn appended(&self) -> u64 {
        self.appended
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn operations_read_back_as_written() {
        let mut ops = Ops::default();
        ops.start("t", 3, 10);
        ops.run("t", 3, 12, 14, State::Acked, 1);
        ops.run("u", 0, 5, 5, State::Available { not_before_ms: 77 }, 2);
        let got = decode(&ops.bytes).unwrap();
        assert_eq!(got.len(), 3);
        let mut parts = Parts::new();
        let mut replay = Replay {
            catch_up: false,
            alive: &mut |_| false,
            now: Instant::now(),
            now_mono: monotonic_ms(),
        };
        apply(&mut parts, got, &mut replay);
        let t = &parts[&("t".to_owned(), 3)];
        assert_eq!((t.start, t.next), (10, 10));
        assert_eq!(t.entries.len(), 3);
        assert_eq!(t.entries[&13].state, State::Acked);
        let u = &parts[&("u".to_owned(), 0)];
        assert_eq!(u.entries[&5].state, State::Available { not_before_ms: 77 });
        assert_eq!(u.entries[&5].count, 2);
        // Cut anywhere, a payload does not decode.
        for cut in 1..ops.bytes.len() {
            let d = decode(&ops.bytes[..cut]);
            assert!(d.is_none() || d.unwrap().len() < 3, "cut at {cut}");
        }
    }

    fn entry(state: State, count: u32) -> Entry {
        Entry {
            state,
            count,
            message: None,
        }
    }

    /// Two stores of one group in one process stand for two processes (the
    /// lock belongs to each store's open file).
    #[test]
    fn shared_stores_catch_up_with_each_other_and_with_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let token = 0x1234;
        let (mut a, mut pa) = Store::open_shared(dir.path(), "g", 0o600, 99).unwrap();
        let (mut b, mut pb) = Store::open_shared(dir.path(), "g", 0o600, 99).unwrap();
        assert!(pa.is_empty() && pb.is_empty());
        // A takes 0..=2 (held by a process `token` that is not alive: read
        // back by B as available), acknowledges 3.
        {
            let _op = a.enter(&mut pa).unwrap().unwrap();
            let mut ops = Ops::new(Some(token));
            let deadline = Instant::now() + Duration::from_secs(60);
            let held = State::Acquired {
                member: 1,
                deadline,
            };
            let changes: Vec<Change> = (0..3)
                .map(|o| Change {
                    offset: o,
                    entry: entry(held, 1),
                })
                .chain([Change {
                    offset: 3,
                    entry: entry(State::Acked, 1),
                }])
                .collect();
            ops.start("t", 0, 0);
            ops.changes("t", 0, &changes);
            a.append(&ops).unwrap();
        }
        {
            let _op = b.enter(&mut pb).unwrap().unwrap();
            let t = &pb[&("t".to_owned(), 0)];
            assert_eq!(t.entries.len(), 4);
            assert_eq!(t.entries[&0].state, State::Available { not_before_ms: 0 });
            assert_eq!(t.entries[&0].count, 1);
            assert_eq!(t.entries[&3].state, State::Acked);
        }
        // Held by a live process (this one, whose probe sees itself
        // alive when registered): B sees it held, as a foreign member.
        let slot = crate::shared::ProcessSlot::register(dir.path(), 0o600).unwrap();
        {
            let _op = a.enter(&mut pa).unwrap().unwrap();
            let mut ops = Ops::new(Some(slot.token()));
            let held = State::Acquired {
                member: 7,
                deadline: Instant::now() + Duration::from_secs(60),
            };
            ops.changes(
                "t",
                0,
                &[Change {
                    offset: 5,
                    entry: entry(held, 2),
                }],
            );
            a.append(&ops).unwrap();
        }
        {
            let _op = b.enter(&mut pb).unwrap().unwrap();
            let e = &pb[&("t".to_owned(), 0)].entries[&5];
            assert_eq!(e.count, 2);
            match e.state {
                State::Acquired { member, deadline } => {
                    assert_eq!(member, FOREIGN | slot.token());
                    let left = deadline.saturating_duration_since(Instant::now());
                    assert!(
                        left > Duration::from_secs(58) && left <= Duration::from_secs(61),
                        "{left:?}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        // B rewrites the file (its acquisitions of others included); A
        // reads it whole, keeping its read position.
        pa.entry(("t".to_owned(), 0))
            .or_insert_with(|| Part::at(0))
            .next = 6;
        {
            let _op = b.enter(&mut pb).unwrap().unwrap();
            b.rewrite(&Ops::whole(Some(token), &pb)).unwrap();
        }
        {
            let _op = a.enter(&mut pa).unwrap().unwrap();
            let t = &pa[&("t".to_owned(), 0)];
            assert_eq!(t.next, 6);
            assert_eq!(t.entries.len(), 5);
            assert!(
                matches!(t.entries[&5].state, State::Acquired { member, .. } if member == FOREIGN | slot.token())
            );
            assert_eq!(t.entries[&3].state, State::Acked);
        }
        // Once that process is gone, a fresh reader sees the record free.
        drop(slot);
        let (_c, pc) = Store::open_shared(dir.path(), "g", 0o600, 99).unwrap();
        let e = &pc[&("t".to_owned(), 0)].entries[&5];
        assert_eq!(
            (e.state, e.count),
            (State::Available { not_before_ms: 0 }, 2)
        );
    }

    #[test]
    fn a_run_longer_than_believable_is_refused() {
        let mut ops = Ops::default();
        ops.run("t", 0, 0, MAX_RUN, State::Acked, 1);
        assert!(decode(&ops.bytes).is_none());
    }
}
