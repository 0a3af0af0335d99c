//! The file a share group's acknowledgement state is kept in:
//! `<dir>/groups/<group>.share`, with `<group>.share.lock` held (`flock`,
//! exclusive) by the one process that uses the group.
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
//!
//! Integers are little-endian. When the file passes 1 MiB and four times
//! what its state takes, it is rewritten (temporary file, sync, rename) as
//! one record holding the whole state, under the next generation.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::state::{Change, Part, State, Stored};
use crate::error::{Error, IoContext, Result};
use crate::le_reader::LeReader;
use crate::offsets::journal::{self, HEADER_LEN};
use crate::shared::LiveLock;

const MAGIC: [u8; 8] = *b"MQSHRJ01";
const OP_START: u8 = 1;
const OP_RUN: u8 = 2;
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
}

/// Operations being encoded into one record.
#[derive(Debug, Default)]
pub(crate) struct Ops {
    bytes: Vec<u8>,
}

impl Ops {
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

    /// `changes` (in offset order) of `topic`/`partition`, as runs.
    pub(crate) fn changes(&mut self, topic: &str, partition: u32, changes: &[Change]) {
        let mut i = 0;
        while i < changes.len() {
            let c = &changes[i];
            let key = (c.entry.state.stored(), c.entry.count);
            let mut j = i + 1;
            while j < changes.len()
                && changes[j].offset == changes[j - 1].offset + 1
                && (changes[j].entry.state.stored(), changes[j].entry.count) == key
            {
                j += 1;
            }
            let last = changes[j - 1].offset;
            self.run(
                topic,
                partition,
                c.offset,
                last,
                c.entry.state,
                c.entry.count,
            );
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

/// Applies read-back operations to `parts`.
fn apply(parts: &mut Parts, ops: Vec<Op>) {
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
                p.start = offset;
                p.next = offset;
                p.start_stored = offset;
                p.entries = p.entries.split_off(&offset);
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
                for o in first.max(p.start)..=last {
                    p.entries.insert(
                        o,
                        super::state::Entry {
                            state: State::from_stored(state, not_before_ms),
                            count,
                            message: None,
                        },
                    );
                }
            }
        }
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
    /// The lock file, held while open.
    _lock: LiveLock,
}

impl Store {
    /// Opens (creating it if needed) the store of `group` under
    /// `<dir>/groups/`, and reads its state back.
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
                holder: "another process (a share group is used by one process at a time)".into(),
            });
        };
        let path = gdir.join(format!("{group}.share"));
        let mut parts = Parts::new();
        let contents = journal::read_records(&path, HEADER_LEN, MAGIC, decode)?;
        let (file, generation, end) = if let Some(c) = contents {
            for ops in c.commits {
                apply(&mut parts, ops);
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
        Ok((
            Store {
                path,
                file: Arc::new(file),
                generation,
                end,
                appended: 0,
                mode,
                _lock: lock,
            },
            parts,
        ))
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
        let record = journal::frame(&ops.bytes);
        let file =
            journal::create_with(&self.path, MAGIC, self.generation + 1, &record, self.mode)?;
        self.generation += 1;
        self.file = Arc::new(file);
        self.end = HEADER_LEN + record.len() as u64;
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
        apply(&mut parts, got);
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

    #[test]
    fn a_run_longer_than_believable_is_refused() {
        let mut ops = Ops::default();
        ops.run("t", 0, 0, MAX_RUN, State::Acked, 1);
        assert!(decode(&ops.bytes).is_none());
    }
}
