//! The recovery point of a partition: the offset below which everything is
//! known to be on disk, and whether the log was closed cleanly.
//!
//! A crash that keeps the page cache (`kill -9`) leaves the segment files
//! whole, but a power loss can tear any page written after the last flush,
//! in the log and in its indexes alike, in sealed segments too. So after an
//! unclean shutdown, recovery must check every batch at or after the
//! recovery point rather than trust the indexes. The point advances after
//! every flush (one `pwrite`, not synced: a lost update only means a longer
//! check), and `close` records a clean shutdown, which lets the next open
//! skip the check. A clean close also records the directory's session
//! (see unclean.rs): before the first append after an open, the data
//! directory starts a new session, once for all its partitions, so a crash
//! after it is never mistaken for a clean shutdown (a clean point of an
//! older session is not trusted).
//!
//! The file is read at open and its descriptor closed. The explicit writes
//! (after a recovery at open, at close) open it for the write alone; from
//! the first [`CheckpointFile::advance`] (after a flush) on, as the point
//! then advances after every flush, its descriptor is kept in the broker's
//! descriptor cache (which may close it; the next write opens it again),
//! until [`CheckpointFile::release`] at the log's close. So a partition
//! never flushed since the open holds no descriptor for it.
//!
//! Layout (24 bytes, little-endian): magic `MQRP`, version 2 (u8), clean
//! (u8), two zero bytes, offset (u64), session (u32), CRC32C of bytes 0..20
//! (u32). Version 1 (written before sessions; its session bytes are zero)
//! is read as session 0. A file that does not check out counts as "check
//! everything", as version 2 does for a reader that knows only version 1.

use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::error::{Error, IoContext, Result};
use crate::faults::{self, SyncKind};
use crate::files::{new_file_id, FileCache};
use crate::log::crc;
use crate::sync;

/// File name, in the partition directory.
pub(crate) const FILE: &str = "recovery.point";
const LEN: usize = 24;
const MAGIC: &[u8; 4] = b"MQRP";
const VERSION: u8 = 2;
/// Recovery points written before sessions (session 0).
const VERSION_1: u8 = 1;

/// What the file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecoveryPoint {
    /// Everything below this offset was flushed.
    pub offset: u64,
    /// The log was closed cleanly after that flush: nothing to check.
    pub clean: bool,
}

/// The file's bytes for `p` (session 0).
pub(crate) fn encode(p: RecoveryPoint) -> [u8; LEN] {
    encode_session(p, 0)
}

/// The file's bytes for `p`, written in directory session `session`.
pub(crate) fn encode_session(p: RecoveryPoint, session: u32) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[0..4].copy_from_slice(MAGIC);
    b[4] = VERSION;
    b[5] = u8::from(p.clean);
    b[8..16].copy_from_slice(&p.offset.to_le_bytes());
    b[16..20].copy_from_slice(&session.to_le_bytes());
    let crc = crc::crc32c(&b[..20]);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The recovery point held in a file's bytes; `None` unless they check
/// out (size, magic, version, CRC).
pub(crate) fn decode(b: &[u8]) -> Option<RecoveryPoint> {
    decode_session(b).map(|(p, _)| p)
}

/// The recovery point held in a file's bytes and the session it was
/// written in; `None` unless they check out.
pub(crate) fn decode_session(b: &[u8]) -> Option<(RecoveryPoint, u32)> {
    if b.len() != LEN || &b[0..4] != MAGIC || !matches!(b[4], VERSION | VERSION_1) || b[5] > 1 {
        return None;
    }
    let crc = u32::from_le_bytes(b[20..24].try_into().ok()?);
    if crc != crc::crc32c(&b[..20]) {
        return None;
    }
    let point = RecoveryPoint {
        offset: u64::from_le_bytes(b[8..16].try_into().ok()?),
        clean: b[5] == 1,
    };
    Some((point, u32::from_le_bytes(b[16..20].try_into().ok()?)))
}

/// The recovery-point file of a partition.
#[derive(Debug)]
pub(crate) struct CheckpointFile {
    path: std::path::PathBuf,
    mode: u32,
    /// The broker's descriptor cache, where the file's descriptor is kept
    /// (under `id`) from the first [`CheckpointFile::advance`] on.
    files: Arc<FileCache>,
    id: u64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The offset last written: [`CheckpointFile::advance`] never moves the
    /// point back, whichever of two flushers gets here first.
    written: u64,
    /// Whether the descriptor is kept in the cache (from the first advance).
    kept: bool,
    /// Set by [`CheckpointFile::release`]: the file is not opened again.
    released: bool,
}

fn open_file(path: &Path, mode: u32) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// Reads the recovery point at `path` and the session it names: `None`
/// when there is none. One read of one byte more than a point: anything
/// but a regular file of exactly `LEN` bytes (a directory, a FIFO, a
/// device, a longer file) reads as no point.
pub(crate) fn read_point(path: &Path) -> Result<Option<(RecoveryPoint, u32)>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
    Ok(match file {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
        Ok(file) => {
            let mut b = [0u8; LEN + 1];
            match file.read_at(&mut b, 0) {
                Ok(LEN) => decode_session(&b[..LEN]),
                _ => None,
            }
        }
    })
}

impl CheckpointFile {
    /// Opens (creating with `mode`) the file in `dir` and reads it: `None`
    /// when it is new, short or damaged.
    #[cfg(test)]
    pub(crate) fn open(dir: &Path, mode: u32) -> Result<(CheckpointFile, Option<RecoveryPoint>)> {
        let (file, point) = CheckpointFile::open_session(dir, mode, &Arc::new(FileCache::new(4)))?;
        Ok((file, point.map(|(p, _)| p)))
    }

    /// [`CheckpointFile::open`], with the session the point was written in.
    /// The descriptor, when kept, goes in `files`.
    pub(crate) fn open_session(
        dir: &Path,
        mode: u32,
        files: &Arc<FileCache>,
    ) -> Result<(CheckpointFile, Option<(RecoveryPoint, u32)>)> {
        let path = dir.join(FILE);
        let point = read_point(&path)?;
        let state = Mutex::new(State {
            written: point.map_or(0, |(p, _)| p.offset),
            kept: false,
            released: false,
        });
        let file = CheckpointFile {
            path,
            mode,
            files: Arc::clone(files),
            id: new_file_id(),
            state,
        };
        Ok((file, point))
    }

    /// Records progress after a flush: everything below `offset` is on
    /// disk, the log still open (not synced). Skipped when the file already
    /// says as much, so a flusher that gets here after a later one (or
    /// after the clean close) cannot move the point back.
    pub(crate) fn advance(&self, offset: u64) -> Result<()> {
        let mut st = self.lock();
        if offset <= st.written {
            return Ok(());
        }
        // Progress is recorded after every flush: keep the file open.
        st.kept = true;
        self.write_locked(
            &mut st,
            RecoveryPoint {
                offset,
                clean: false,
            },
            0,
            false,
        )
    }

    /// Records `point`; with `sync`, on disk before this returns.
    pub(crate) fn write(&self, point: RecoveryPoint, sync: bool) -> Result<()> {
        self.write_session(point, 0, sync)
    }

    /// Records `point` as written in directory session `session` (what a
    /// clean close records, see unclean.rs).
    pub(crate) fn write_session(
        &self,
        point: RecoveryPoint,
        session: u32,
        sync: bool,
    ) -> Result<()> {
        let mut st = self.lock();
        self.write_locked(&mut st, point, session, sync)
    }

    /// Closes the descriptor; later writes fail with [`Error::Closed`]
    /// (the log is closed: nothing is recorded after its clean close).
    pub(crate) fn release(&self) {
        let mut st = self.lock();
        st.released = true;
        st.kept = false;
        self.files.remove(self.id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        sync::lock(&self.state)
    }

    fn write_locked(
        &self,
        st: &mut State,
        point: RecoveryPoint,
        session: u32,
        sync: bool,
    ) -> Result<()> {
        if st.released {
            return Err(Error::Closed("recovery point"));
        }
        let open = || open_file(&self.path, self.mode);
        let file = if st.kept {
            self.files.get(self.id, open)
        } else {
            open().map(Arc::new)
        }
        .ctx(|| format!("opening {}", self.path.display()))?;
        file.write_all_at(&encode_session(point, session), 0)
            .ctx(|| format!("writing {}", self.path.display()))?;
        if sync {
            faults::before_sync(&self.path, SyncKind::File)
                .and_then(|()| file.sync_data())
                .ctx(|| format!("syncing {}", self.path.display()))?;
            faults::after_sync(&self.path, SyncKind::File);
        }
        st.written = point.offset;
        Ok(())
    }
}

impl Drop for CheckpointFile {
    fn drop(&mut self) {
        self.files.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        for p in [
            RecoveryPoint {
                offset: 0,
                clean: false,
            },
            RecoveryPoint {
                offset: u64::MAX,
                clean: true,
            },
        ] {
            assert_eq!(decode(&encode(p)), Some(p));
        }
        let mut b = encode(RecoveryPoint {
            offset: 7,
            clean: true,
        });
        b[9] ^= 1;
        assert_eq!(decode(&b), None);
        assert_eq!(decode(&b[..10]), None);
        assert_eq!(decode(&[0u8; LEN]), None);
        // The session round-trips; a version 1 file reads as session 0.
        let p = RecoveryPoint {
            offset: 9,
            clean: true,
        };
        assert_eq!(decode_session(&encode_session(p, 42)), Some((p, 42)));
        let mut v1 = encode(p);
        v1[4] = VERSION_1;
        let crc = crc::crc32c(&v1[..20]);
        v1[20..24].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_session(&v1), Some((p, 0)));
    }

    /// Progress never moves the point back, nor overwrites a clean close
    /// with an older offset; explicit writes (open, close) always land.
    /// The open reads one regular file of exactly one point and creates
    /// nothing: a missing file, a longer one or a directory in its place
    /// read as no point.
    #[test]
    fn open_reads_a_point_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        assert_eq!(CheckpointFile::open(dir.path(), 0o600).unwrap().1, None);
        assert!(!path.exists(), "the open created the file");
        let p = RecoveryPoint {
            offset: 5,
            clean: true,
        };
        std::fs::write(&path, encode(p)).unwrap();
        assert_eq!(CheckpointFile::open(dir.path(), 0o600).unwrap().1, Some(p));
        let mut longer = encode(p).to_vec();
        longer.push(0);
        std::fs::write(&path, longer).unwrap();
        assert_eq!(CheckpointFile::open(dir.path(), 0o600).unwrap().1, None);
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert_eq!(CheckpointFile::open(dir.path(), 0o600).unwrap().1, None);
    }

    #[test]
    fn advance_only_moves_forward() {
        let dir = tempfile::tempdir().unwrap();
        let read = || CheckpointFile::open(dir.path(), 0o600).unwrap().1.unwrap();
        let (f, point) = CheckpointFile::open(dir.path(), 0o600).unwrap();
        assert_eq!(point, None);
        f.advance(10).unwrap();
        f.advance(5).unwrap();
        assert_eq!(
            read(),
            RecoveryPoint {
                offset: 10,
                clean: false
            }
        );
        let closed = RecoveryPoint {
            offset: 12,
            clean: true,
        };
        f.write(closed, false).unwrap();
        f.advance(12).unwrap();
        f.advance(11).unwrap();
        assert_eq!(read(), closed);
        let reopened = RecoveryPoint {
            offset: 12,
            clean: false,
        };
        f.write(reopened, true).unwrap();
        assert_eq!(read(), reopened);
        f.advance(13).unwrap();
        assert_eq!(
            read(),
            RecoveryPoint {
                offset: 13,
                clean: false
            }
        );
    }
}
