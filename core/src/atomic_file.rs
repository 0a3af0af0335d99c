//! Small metadata files (the topic config, the producer registry and
//! snapshots, committed offsets): read with a size bound, replaced
//! atomically.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};
use crate::faults::{self, SyncKind};

/// Writes `bytes` to `path` atomically: a temporary file beside it (created
/// with `mode`), then a rename over `path`. With `sync`, the temporary file
/// is synced before the rename and the directory after it, so the new
/// content survives power loss once this returns.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32, sync: bool) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    // A leftover temporary file (a crash mid-write) goes first; `create_new`
    // then refuses anything that appears in its place, symlinks included,
    // so the write can never land outside the data directory.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .ctx(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)
        .ctx(|| format!("writing {}", tmp.display()))?;
    if sync {
        faults::before_sync(&tmp, SyncKind::File)
            .and_then(|()| f.sync_data())
            .ctx(|| format!("syncing {}", tmp.display()))?;
        faults::after_sync(&tmp, SyncKind::File);
    }
    drop(f);
    std::fs::rename(&tmp, path).ctx(|| format!("renaming {}", tmp.display()))?;
    if sync {
        if let Some(dir) = path.parent() {
            faults::before_sync(dir, SyncKind::Dir)
                .and_then(|()| File::open(dir))
                .and_then(|d| d.sync_all())
                .ctx(|| format!("syncing {}", dir.display()))?;
            faults::after_sync(dir, SyncKind::Dir);
        }
    }
    Ok(())
}

/// The largest metadata file read: far above any real one, small enough that
/// a hostile or damaged file cannot make the reader allocate without bound.
pub(crate) const MAX_METADATA_LEN: u64 = 64 << 20;

/// Reads the small file at `path`: `Ok(None)` when it does not exist. A
/// path that is not a regular file (a FIFO would block the reader forever,
/// a device would never end) or is larger than [`MAX_METADATA_LEN`] is an
/// [`Error::Corrupt`](crate::Error::Corrupt).
pub(crate) fn read_small(path: &Path) -> Result<Option<Vec<u8>>> {
    let mut f = match open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).ctx(|| format!("opening {}", path.display())),
    };
    let meta = f
        .metadata()
        .ctx(|| format!("reading the size of {}", path.display()))?;
    let corrupt = |reason: &str| crate::Error::Corrupt {
        path: path.to_owned(),
        position: 0,
        reason: reason.to_owned(),
    };
    if !meta.is_file() {
        return Err(corrupt("not a regular file"));
    }
    if meta.len() > MAX_METADATA_LEN {
        return Err(corrupt("larger than any metadata file this engine writes"));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::io::Read::by_ref(&mut f)
        .take(MAX_METADATA_LEN + 1)
        .read_to_end(&mut bytes)
        .ctx(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > MAX_METADATA_LEN {
        return Err(corrupt("larger than any metadata file this engine writes"));
    }
    Ok(Some(bytes))
}

/// Opens `path` for reading without blocking on a FIFO (`O_NONBLOCK` has no
/// effect on regular files); the caller checks the file type.
pub(crate) fn open_regular(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}
