//! The journal of a group's commits: `<dir>/groups/<name>.commits`, one
//! record appended per commit, so that a commit costs a `write(2)` (and,
//! when it must survive a crash of the machine, an `fdatasync` shared by
//! the commits made meanwhile) rather than the rewrite of every offset.
//!
//! Layout (little-endian): a 16-byte header, magic `MQCOMJ01` and the
//! journal's generation (u64, the `journal` field of the offsets file it
//! continues); then records, each the payload's length (u32), the
//! payload's CRC32C (u32) and the payload: the number of entries (u32),
//! then per entry the partition (u32), the offset (u64), the timestamp
//! (i64), the topic's length (u16), the metadata's length (u32), the
//! topic and the metadata (UTF-8). A record is one commit, all or
//! nothing: reading stops at the first record that is cut short or does
//! not check out (a write a crash interrupted), and the next writer
//! truncates the file there before it appends.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::CommittedOffset;
use crate::error::{Error, IoContext, Result};
use crate::faults::{self, SyncKind};
use crate::le_reader::LeReader;
use crate::log::crc::crc32c;
use crate::sync::lock;

const MAGIC: [u8; 8] = *b"MQCOMJ01";
/// Bytes before the first record.
pub(crate) const HEADER_LEN: u64 = 16;
/// Bytes before a record's payload.
pub(crate) const RECORD_HEADER: usize = 8;
/// Bytes of an entry besides its topic and metadata.
const ENTRY_FIXED: usize = 4 + 8 + 8 + 2 + 4;

/// One committed offset of a commit.
pub(super) type Entry = (String, u32, CommittedOffset);

/// The record of one commit.
///
/// # Errors
/// [`Error::InvalidArgument`] for a topic name longer than 65,535 bytes
/// or metadata longer than 4 GiB (neither can be committed).
pub(super) fn encode(entries: &[Entry]) -> Result<Vec<u8>> {
    let len: usize = 4 + entries
        .iter()
        .map(|(t, _, c)| ENTRY_FIXED + t.len() + c.metadata.len())
        .sum::<usize>();
    let payload_len = u32::try_from(len)
        .map_err(|_| Error::InvalidArgument("a commit of more than 4 GiB".into()))?;
    let mut out = Vec::with_capacity(RECORD_HEADER + len);
    out.extend_from_slice(&payload_len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let count = u32::try_from(entries.len())
        .map_err(|_| Error::InvalidArgument("too many offsets in one commit".into()))?;
    out.extend_from_slice(&count.to_le_bytes());
    for (topic, partition, c) in entries {
        let tlen = u16::try_from(topic.len())
            .map_err(|_| Error::InvalidArgument(format!("topic name of {} bytes", topic.len())))?;
        let mlen = u32::try_from(c.metadata.len())
            .map_err(|_| Error::InvalidArgument("commit metadata over 4 GiB".into()))?;
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&c.offset.to_le_bytes());
        out.extend_from_slice(&c.timestamp.to_le_bytes());
        out.extend_from_slice(&tlen.to_le_bytes());
        out.extend_from_slice(&mlen.to_le_bytes());
        out.extend_from_slice(topic.as_bytes());
        out.extend_from_slice(c.metadata.as_bytes());
    }
    let crc = crc32c(&out[RECORD_HEADER..]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// `payload` framed as a record: its length, its CRC32C, itself.
pub(crate) fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The entries of a payload that checked out; `None` if they do not parse.
fn decode(payload: &[u8]) -> Option<Vec<Entry>> {
    let mut c = LeReader::new(payload);
    let count = c.u32()? as usize;
    // Each entry takes ENTRY_FIXED bytes at least: a count the payload
    // cannot hold is not believed (nor allocated for).
    if count > payload.len() / ENTRY_FIXED {
        return None;
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let partition = c.u32()?;
        let offset = c.u64()?;
        let timestamp = c.u64()? as i64;
        let tlen = c.u16()? as usize;
        let mlen = c.u32()? as usize;
        let topic = c.text(tlen)?.to_owned();
        let metadata = c.text(mlen)?.to_owned();
        out.push((
            topic,
            partition,
            CommittedOffset {
                offset,
                metadata,
                timestamp,
            },
        ));
    }
    c.rest().is_empty().then_some(out)
}

/// What a read of a journal found.
#[derive(Debug)]
pub(crate) struct Contents<T = Vec<Entry>> {
    /// The journal's generation.
    pub generation: u64,
    /// The payloads of the whole, valid records read, decoded, in order
    /// (for the commits journal: the commits).
    pub commits: Vec<T>,
    /// Where the last of them ends (the next record's position).
    pub end: u64,
    /// The file's length when read.
    pub len: u64,
    /// The file's inode.
    pub ino: u64,
}

/// Reads the journal at `path` from byte `from` (at least
/// [`HEADER_LEN`]) to its last whole, valid record. `None` when there is
/// no journal, or its header is not one.
///
/// # Errors
/// I/O errors other than a missing file.
pub(super) fn read(path: &Path, from: u64) -> Result<Option<Contents>> {
    read_records(path, from, MAGIC, decode)
}

/// Reads a file of the journal's layout (a 16-byte header of `magic` and
/// generation, then length- and CRC32C-framed records) at `path` from byte
/// `from` to its last whole record that checks out and that `decode`
/// accepts. `None` when there is no file, or its header is not `magic`.
///
/// # Errors
/// I/O errors other than a missing file.
pub(crate) fn read_records<T>(
    path: &Path,
    from: u64,
    magic: [u8; 8],
    decode: impl Fn(&[u8]) -> Option<T>,
) -> Result<Option<Contents<T>>> {
    use std::os::unix::fs::MetadataExt;
    let mut f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
    };
    let meta = f.metadata().ctx(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        return Ok(None);
    }
    let mut header = [0u8; HEADER_LEN as usize];
    if f.read_exact(&mut header).is_err() || header[..8] != magic[..] {
        return Ok(None);
    }
    let generation = u64::from_le_bytes(header[8..16].try_into().unwrap_or_default());
    let from = from.max(HEADER_LEN);
    let mut bytes = Vec::new();
    if meta.len() > from {
        let want = usize::try_from(meta.len() - from).unwrap_or(usize::MAX);
        bytes.reserve(want.min(64 << 20));
        f.seek(SeekFrom::Start(from))
            .ctx(|| format!("reading {}", path.display()))?;
        (&f).take(meta.len() - from)
            .read_to_end(&mut bytes)
            .ctx(|| format!("reading {}", path.display()))?;
    }
    let mut commits = Vec::new();
    let mut pos = 0usize;
    while bytes.len() - pos >= RECORD_HEADER {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap_or_default());
        let start = pos + RECORD_HEADER;
        if len == 0 || bytes.len() - start < len {
            break;
        }
        let payload = &bytes[start..start + len];
        if crc32c(payload) != crc {
            break;
        }
        let Some(entries) = decode(payload) else {
            break;
        };
        commits.push(entries);
        pos = start + len;
    }
    Ok(Some(Contents {
        generation,
        commits,
        end: from + pos as u64,
        len: meta.len(),
        ino: meta.ino(),
    }))
}

/// Creates the journal of `generation` at `path` (header only), replacing
/// any, durably: written to a temporary file, synced, renamed, and the
/// directory synced. Returns it opened for appending.
pub(super) fn create(path: &Path, generation: u64, mode: u32) -> Result<File> {
    create_with(path, MAGIC, generation, &[], mode)
}

/// Creates a file of the journal's layout at `path`: the header (`magic`,
/// `generation`) and then `records` (already framed), replacing any file
/// there, durably (temporary file, sync, rename, directory sync). Returns
/// it opened for appending.
pub(crate) fn create_with(
    path: &Path,
    magic: [u8; 8],
    generation: u64,
    records: &[u8],
    mode: u32,
) -> Result<File> {
    let mut header = Vec::with_capacity(HEADER_LEN as usize + records.len());
    header.extend_from_slice(&magic);
    header.extend_from_slice(&generation.to_le_bytes());
    header.extend_from_slice(records);
    crate::atomic_file::write_atomic(path, &header, mode, true)?;
    open_append(path)
}

/// Opens the journal at `path` for appending (positioned writes).
pub(crate) fn open_append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .ctx(|| format!("opening {}", path.display()))
}

/// Writes `record` at `at`; on failure, cuts the file back to `at` (best
/// effort: a record cut short is not read back anyway).
pub(crate) fn append(file: &File, path: &Path, at: u64, record: &[u8]) -> Result<()> {
    file.write_all_at(record, at).map_err(|e| {
        let _ = file.set_len(at);
        Error::io(format!("writing {}", path.display()), e)
    })
}

/// Group commit of the journal's syncs: a commit that must be durable
/// waits until a sync that started after its record was written ends.
/// The first to find none running leads the next one: it waits, for at
/// most as long as the last sync took (and 2 ms), until as many commits
/// wait as the last sync served, then syncs for all of them. A steady
/// group of `n` committing threads is so served by one sync per round of
/// `n` commits; a lone committer never waits.
///
/// Two condition variables keep wake-ups to the threads that can act on
/// them: an arriving commit wakes the collecting leader alone (and only
/// once as many as it waits for have come), and the end of a sync wakes
/// the commits waiting for it. Waking every waiter at each arrival costs
/// more than the sync on a machine with few cores.
#[derive(Debug, Default)]
pub(crate) struct Syncer {
    state: Mutex<SyncState>,
    /// A collecting leader waits here for commits to arrive.
    arrived: Condvar,
    /// Commits wait here for a sync (or a leader's place) to come free.
    synced: Condvar,
}

#[derive(Debug, Default)]
struct SyncState {
    /// Every byte appended below this (counted over the journal's whole
    /// life, across compactions) is durable.
    synced: u64,
    /// A sync runs.
    syncing: bool,
    /// A leader waits for more commits before it syncs.
    collecting: bool,
    /// Commits that came to wait since the last sync started.
    arrivals: usize,
    /// Commits the next sync waits for: as many as the last one served,
    /// counting those that came while it ran.
    expected: usize,
    /// How long the last sync took: the longest a leader waits.
    last_sync: Duration,
    /// A sync failed: nothing can be said of what it covered, and every
    /// later durable commit fails (as a failed flush poisons a partition).
    failed: Option<String>,
}

/// What a commit that must be durable waits for.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The syncer of the journal the commit went to.
    pub syncer: Arc<Syncer>,
    /// The count of bytes appended once its record was.
    pub ticket: u64,
}

impl Syncer {
    /// Returns once every byte appended up to `ticket` is durable. `now`
    /// gives the journal to sync and the count of bytes appended so far
    /// (the sync covers them all).
    ///
    /// # Errors
    /// I/O errors of the sync, then of every later call.
    pub(crate) fn wait(
        &self,
        ticket: u64,
        now: impl Fn() -> (Option<Arc<File>>, PathBuf, u64),
    ) -> Result<()> {
        let mut st = lock(&self.state);
        st.arrivals += 1;
        if st.collecting && st.arrivals >= st.expected {
            // The collecting leader has what it waits for.
            self.arrived.notify_one();
        }
        loop {
            if let Some(e) = &st.failed {
                return Err(Error::io(
                    "an earlier sync of committed offsets failed",
                    std::io::Error::other(e.clone()),
                ));
            }
            if st.synced >= ticket {
                return Ok(());
            }
            if st.syncing || st.collecting {
                st = crate::sync::wait(&self.synced, st);
                continue;
            }
            if st.arrivals < st.expected {
                st.collecting = true;
                let deadline = Instant::now() + st.last_sync.min(Duration::from_millis(2));
                while st.arrivals < st.expected {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    st = crate::sync::wait_timeout(&self.arrived, st, left).0;
                }
                st.collecting = false;
            }
            st.syncing = true;
            let served = std::mem::take(&mut st.arrivals);
            drop(st);
            let started = Instant::now();
            let (file, path, appended) = now();
            let res = match &file {
                Some(f) => faults::before_sync(&path, SyncKind::File)
                    .and_then(|()| f.sync_data())
                    .map(|()| faults::after_sync(&path, SyncKind::File)),
                None => Ok(()),
            };
            st = lock(&self.state);
            st.syncing = false;
            st.last_sync = started.elapsed();
            st.expected = served + st.arrivals;
            let covered = match res {
                Ok(()) => {
                    st.synced = st.synced.max(appended);
                    st.synced >= ticket
                }
                Err(e) => {
                    st.failed = Some(format!("syncing {}: {e}", path.display()));
                    false
                }
            };
            // Wake the waiters with the lock let go: woken while it is
            // held, each would block on it again in turn.
            drop(st);
            self.synced.notify_all();
            if covered {
                return Ok(());
            }
            st = lock(&self.state);
        }
    }

    /// Everything appended up to `appended` is durable by other means (a
    /// compaction wrote it into a synced offsets file).
    pub(crate) fn covered(&self, appended: u64) {
        let mut st = lock(&self.state);
        st.synced = st.synced.max(appended);
        self.synced.notify_all();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entry(t: &str, p: u32, o: u64, m: &str) -> Entry {
        (
            t.to_owned(),
            p,
            CommittedOffset {
                offset: o,
                metadata: m.to_owned(),
                timestamp: -5,
            },
        )
    }

    #[test]
    fn records_read_back_and_a_torn_one_ends_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.commits");
        let f = create(&path, 7, 0o600).unwrap();
        let a = vec![entry("t", 0, 5, ""), entry("u", 3, 9, "meta")];
        let b = vec![entry("t", 0, 6, "é")];
        let ra = encode(&a).unwrap();
        let rb = encode(&b).unwrap();
        append(&f, &path, HEADER_LEN, &ra).unwrap();
        append(&f, &path, HEADER_LEN + ra.len() as u64, &rb).unwrap();
        let r = read(&path, 0).unwrap().unwrap();
        assert_eq!(r.generation, 7);
        assert_eq!(r.commits, vec![a.clone(), b.clone()]);
        assert_eq!(r.end, r.len);
        // From the second record on.
        let r2 = read(&path, HEADER_LEN + ra.len() as u64).unwrap().unwrap();
        assert_eq!(r2.commits, vec![b]);
        // Every cut and every flipped byte of the last record: it is not
        // read, the first one is.
        let whole = std::fs::read(&path).unwrap();
        let last = HEADER_LEN as usize + ra.len();
        for cut in last..whole.len() {
            std::fs::write(&path, &whole[..cut]).unwrap();
            let r = read(&path, 0).unwrap().unwrap();
            assert_eq!(r.commits, vec![a.clone()], "cut at {cut}");
            assert_eq!(r.end, last as u64);
        }
        for at in last..whole.len() {
            let mut bad = whole.clone();
            bad[at] ^= 0x40;
            std::fs::write(&path, &bad).unwrap();
            let r = read(&path, 0).unwrap().unwrap();
            assert_eq!(r.commits, vec![a.clone()], "flipped byte {at}");
        }
    }

    #[test]
    fn no_journal_or_a_foreign_file_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.commits");
        assert!(read(&path, 0).unwrap().is_none());
        std::fs::write(&path, b"not a journal at all").unwrap();
        assert!(read(&path, 0).unwrap().is_none());
    }

    #[test]
    fn a_payload_claiming_more_entries_than_it_holds_is_refused() {
        let mut p = Vec::new();
        p.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&p).is_none());
        let rec = encode(&[entry("t", 1, 2, "x")]).unwrap();
        assert!(decode(&rec[RECORD_HEADER..]).is_some());
        assert!(decode(&rec[RECORD_HEADER..rec.len() - 1]).is_none());
    }
}
