//! The data directory named by `--dir`, checked before a command uses it:
//! only `topic create` may create it, every other command needs it to
//! exist, so that a mistyped path is an error
//! instead of an empty directory made on the way.

use std::io::ErrorKind;
use std::path::Path;

use crate::CliResult;

/// Fails unless `dir` is an existing directory: "no such data directory"
/// when nothing is there, "not a directory" for a file.
pub fn existing(dir: &Path) -> CliResult {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(not_a_directory(dir)),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            Err(format!("no such data directory: {}", dir.display()).into())
        }
        Err(e) => Err(format!("cannot read data directory {}: {e}", dir.display()).into()),
    }
}

/// Fails when something other than a directory is at `dir`; a missing
/// `dir` is fine (the command creates it).
pub fn creatable(dir: &Path) -> CliResult {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(not_a_directory(dir)),
        _ => Ok(()),
    }
}

fn not_a_directory(dir: &Path) -> Box<dyn std::error::Error> {
    format!(
        "not a directory: {} (--dir names a data directory)",
        dir.display()
    )
    .into()
}
