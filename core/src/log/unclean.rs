//! The data directory's unclean mark: one file, `recovery.session`, that
//! says which session of the directory last wrote to any partition.
//!
//! A partition closed cleanly records, in its recovery point, the session
//! the directory was in (see checkpoint.rs). Before the first append of a
//! broker's life, the broker starts a new session: it writes the next
//! session number here and syncs it, once for every partition. At open, a
//! partition's clean recovery point is trusted only when it names the
//! session this file holds: a partition appended to in a later session
//! (then not closed cleanly) names an older one, and is checked from its
//! recovery point as after any unclean shutdown. So is every partition when
//! this file is damaged. Without the file (a directory no session of this
//! kind wrote to), clean points are trusted as they are.
//!
//! The cost of sharing one mark: after a crash of a session that appended
//! to any partition, every partition is checked at the next open (not only
//! those appended to), in exchange for one sync per broker instead of one
//! per partition on the first appends after an open.
//!
//! Layout (16 bytes, little-endian): magic `MQUS`, version 1 (u8), three
//! zero bytes, session (u32), CRC32C of bytes 0..12 (u32).

use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

use super::checkpoint::RecoveryPoint;
use crate::error::{IoContext, Result};
use crate::faults::{self, SyncKind};
use crate::log::{crc, mmap};
use crate::sync;

/// File name, in the data directory.
pub(crate) const FILE: &str = "recovery.session";
const LEN: usize = 16;
const MAGIC: &[u8; 4] = b"MQUS";
const VERSION: u8 = 1;

fn encode(session: u32) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[0..4].copy_from_slice(MAGIC);
    b[4] = VERSION;
    b[8..12].copy_from_slice(&session.to_le_bytes());
    let crc = crc::crc32c(&b[..12]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode(b: &[u8]) -> Option<u32> {
    if b.len() != LEN || &b[0..4] != MAGIC || b[4] != VERSION {
        return None;
    }
    let crc = u32::from_le_bytes(b[12..16].try_into().ok()?);
    if crc != crc::crc32c(&b[..12]) {
        return None;
    }
    Some(u32::from_le_bytes(b[8..12].try_into().ok()?))
}

/// What the file said at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnDisk {
    /// No file: no session of this kind wrote to the directory.
    Absent,
    /// The file does not check out: no clean point is trusted.
    Damaged,
    /// The last session that appended to the directory.
    Session(u32),
}

/// The unclean mark of one data directory, shared by its partitions.
#[derive(Debug)]
pub(crate) struct UncleanMark {
    dir: PathBuf,
    mode: u32,
    on_disk: OnDisk,
    /// Set once this broker's session is on disk.
    marked: AtomicBool,
    /// The session clean closes record: this broker's once marked, else
    /// the one on disk (0 when none).
    session: AtomicU32,
    /// Serialises the first marks.
    lock: Mutex<()>,
}

impl UncleanMark {
    /// Reads the mark of data directory `dir` (files created with `mode`).
    pub(crate) fn open(dir: &Path, mode: u32) -> Result<UncleanMark> {
        let path = dir.join(FILE);
        let on_disk = match std::fs::read(&path) {
            Ok(b) => decode(&b).map_or(OnDisk::Damaged, OnDisk::Session),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => OnDisk::Absent,
            Err(e) => {
                return Err(crate::error::Error::io(
                    format!("reading {}", path.display()),
                    e,
                ))
            }
        };
        let session = match on_disk {
            OnDisk::Session(s) => s,
            OnDisk::Absent | OnDisk::Damaged => 0,
        };
        Ok(UncleanMark {
            dir: dir.to_owned(),
            mode,
            on_disk,
            marked: AtomicBool::new(false),
            session: AtomicU32::new(session),
            lock: Mutex::new(()),
        })
    }

    /// Whether something a clean close wrote in session `session` (the
    /// summary of the partitions, see `partition_handle.rs`) still holds:
    /// the directory is in that session (nothing was appended since), or
    /// no session of this kind ever wrote to it and `session` is 0.
    pub(crate) fn is_session(&self, session: u32) -> bool {
        match self.on_disk {
            OnDisk::Absent => session == 0,
            OnDisk::Damaged => false,
            OnDisk::Session(s) => session == s,
        }
    }

    /// Whether a partition whose recovery point says `point`, in session
    /// `session`, may skip the unclean-shutdown check.
    pub(crate) fn trusts(&self, point: RecoveryPoint, session: u32) -> bool {
        point.clean
            && match self.on_disk {
                OnDisk::Absent => true,
                OnDisk::Damaged => false,
                OnDisk::Session(s) => session == s,
            }
    }

    /// The session a clean close records.
    pub(crate) fn session(&self) -> u32 {
        self.session.load(Ordering::Acquire)
    }

    /// Makes sure this broker's session is on disk (synced) before a
    /// partition is written to: the first call writes it, later ones cost
    /// one atomic load.
    #[inline]
    pub(crate) fn mark(&self) -> Result<()> {
        if self.marked.load(Ordering::Acquire) {
            return Ok(());
        }
        self.mark_slow()
    }

    #[cold]
    fn mark_slow(&self) -> Result<()> {
        let _g = sync::lock(&self.lock);
        if self.marked.load(Ordering::Acquire) {
            return Ok(());
        }
        let next = match self.on_disk {
            OnDisk::Session(s) => s.wrapping_add(1).max(1),
            OnDisk::Absent => 1,
            // Unlike any number an earlier session may have written.
            OnDisk::Damaged => (crate::clock::now_ms() / 1000) as u32 | 1,
        };
        let path = self.dir.join(FILE);
        let created = !path.exists();
        let file: File = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(self.mode)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .ctx(|| format!("opening {}", path.display()))?;
        file.write_all_at(&encode(next), 0)
            .and_then(|()| file.set_len(LEN as u64))
            .ctx(|| format!("writing {}", path.display()))?;
        faults::before_sync(&path, SyncKind::File)
            .and_then(|()| file.sync_data())
            .ctx(|| format!("syncing {}", path.display()))?;
        faults::after_sync(&path, SyncKind::File);
        if created {
            mmap::sync_dir(&self.dir)?;
        }
        self.session.store(next, Ordering::Release);
        self.marked.store(true, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean() -> RecoveryPoint {
        RecoveryPoint {
            offset: 5,
            clean: true,
        }
    }

    #[test]
    fn round_trip_and_damage() {
        assert_eq!(decode(&encode(7)), Some(7));
        let mut b = encode(7);
        b[9] ^= 1;
        assert_eq!(decode(&b), None);
        assert_eq!(decode(&b[..3]), None);
    }

    /// A clean point is trusted only in the session it names; a new
    /// session, once marked, distrusts every point written before it.
    #[test]
    fn sessions_decide_trust() {
        let dir = tempfile::tempdir().unwrap();
        let m = UncleanMark::open(dir.path(), 0o600).unwrap();
        // No file: clean points of any session are trusted.
        assert!(m.trusts(clean(), 0));
        assert!(!m.trusts(
            RecoveryPoint {
                offset: 5,
                clean: false
            },
            0
        ));
        m.mark().unwrap();
        let s = m.session();
        assert_eq!(s, 1);
        let m2 = UncleanMark::open(dir.path(), 0o600).unwrap();
        assert!(!m2.trusts(clean(), 0), "written before the session");
        assert!(m2.trusts(clean(), s), "closed cleanly in it");
        m2.mark().unwrap();
        assert_eq!(m2.session(), 2);
        let m3 = UncleanMark::open(dir.path(), 0o600).unwrap();
        assert!(!m3.trusts(clean(), s));
        // Damaged: nothing is trusted, and the next session is new.
        std::fs::write(dir.path().join(FILE), b"junk").unwrap();
        let m4 = UncleanMark::open(dir.path(), 0o600).unwrap();
        assert!(!m4.trusts(clean(), 2));
        m4.mark().unwrap();
        assert!(m4.session() > 2);
    }
}
