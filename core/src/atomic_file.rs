//! Replacing a small file atomically: the topic config, the producer
//! registry and snapshots, committed offsets.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};

/// Writes `bytes` to `path` atomically: a temporary file beside it (created
/// with `mode`), then a rename over `path`. With `sync`, the temporary file
/// is synced before the rename and the directory after it, so the new
/// content survives power loss once this returns.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32, sync: bool) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .ctx(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)
        .ctx(|| format!("writing {}", tmp.display()))?;
    if sync {
        f.sync_data().ctx(|| format!("syncing {}", tmp.display()))?;
    }
    drop(f);
    std::fs::rename(&tmp, path).ctx(|| format!("renaming {}", tmp.display()))?;
    if sync {
        if let Some(dir) = path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .ctx(|| format!("syncing {}", dir.display()))?;
        }
    }
    Ok(())
}
