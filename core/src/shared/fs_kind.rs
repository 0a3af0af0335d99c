//! Whether a directory is on a filesystem whose locks and shared maps work
//! between processes.
//!
//! Shared mode rests on `flock` and on pages mapped by several processes,
//! which network filesystems do not give across machines (and give
//! unreliably on one): the reason SQLite's WAL mode does not work over a
//! network filesystem. FUSE filesystems may forward both to anything.
//! The kind is read with `statfs(2)`; where that does not exist (not
//! Linux) every filesystem counts as local.

use std::path::Path;

use crate::error::Result;

/// What kind of filesystem a directory is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FsKind {
    /// A local filesystem (or one this build cannot tell apart from one).
    Local,
    /// A network or user-space filesystem, named.
    Remote(&'static str),
}

/// Names a remote filesystem's `statfs` magic number.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn remote_name(magic: u64) -> Option<&'static str> {
    Some(match magic {
        0x6969 => "NFS",
        0xFF53_4D42 => "CIFS",
        0xFE53_4D42 => "SMB2",
        0x517B => "SMB",
        0x0102_1997 => "9p",
        0x6573_5546 => "FUSE",
        0x00C3_6400 => "Ceph",
        0x5346_414F => "AFS",
        0x7375_7245 => "Coda",
        0x564C => "NCP",
        0x0BD0_0BD0 => "Lustre",
        0x4750_4653 => "GPFS",
        _ => return None,
    })
}

/// The kind of filesystem `dir` is on.
///
/// # Errors
/// I/O errors of `statfs` (a missing directory, say).
#[cfg(target_os = "linux")]
pub(crate) fn filesystem_kind(dir: &Path) -> Result<FsKind> {
    use crate::error::{Error, IoContext};
    use std::os::unix::ffi::OsStrExt;

    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| {
        Error::InvalidArgument(format!("path {} contains a NUL byte", dir.display()))
    })?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    #[allow(unsafe_code)]
    // SAFETY: `c` is a NUL-terminated path that outlives the call; `st`
    // is writable memory of the size `statfs` fills.
    let rc = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).ctx(|| format!("statfs of {}", dir.display()));
    }
    #[allow(unsafe_code)]
    // SAFETY: `statfs` returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // f_type's width differs by target
    let magic = (st.f_type as i64 as u64) & 0xFFFF_FFFF;
    Ok(remote_name(magic).map_or(FsKind::Local, FsKind::Remote))
}

/// The kind of filesystem `dir` is on (always local where `statfs`'s
/// filesystem magic is not available).
#[cfg(not(target_os = "linux"))]
pub(crate) fn filesystem_kind(_dir: &Path) -> Result<FsKind> {
    Ok(FsKind::Local)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn remote_magics_are_named_and_local_ones_are_not() {
        assert_eq!(remote_name(0x6969), Some("NFS"));
        assert_eq!(remote_name(0xFF53_4D42), Some("CIFS"));
        assert_eq!(remote_name(0x6573_5546), Some("FUSE"));
        assert_eq!(remote_name(0x0102_1997), Some("9p"));
        assert_eq!(remote_name(0xEF53), None); // ext4
        assert_eq!(remote_name(0x0102_1994), None); // tmpfs
        assert_eq!(remote_name(0x5846_5342), None); // XFS
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_test_directory_is_local_and_a_missing_one_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(filesystem_kind(dir.path()).unwrap(), FsKind::Local);
        assert!(filesystem_kind(&dir.path().join("missing")).is_err());
    }
}
