//! Directories created with the data directory's permissions: the file mode
//! ([`Config::file_mode`](crate::Config), default `0o600`) plus the search
//! bit wherever it grants read, so the default is owner-only `0o700`.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use crate::error::{IoContext, Result};

/// The directory mode that goes with `file_mode`.
pub(crate) fn dir_mode(file_mode: u32) -> u32 {
    let mode = file_mode & 0o777;
    mode | ((mode & 0o444) >> 2)
}

/// Creates `dir` and any missing parents with [`dir_mode`]`(file_mode)`
/// (existing directories keep theirs).
pub(crate) fn create_dir_all(dir: &Path, file_mode: u32) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(dir_mode(file_mode))
        .create(dir)
        .ctx(|| format!("creating {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::dir_mode;

    #[test]
    fn search_bits_follow_read_bits() {
        assert_eq!(dir_mode(0o600), 0o700);
        assert_eq!(dir_mode(0o640), 0o750);
        assert_eq!(dir_mode(0o644), 0o755);
        assert_eq!(dir_mode(0o200), 0o200);
    }
}
