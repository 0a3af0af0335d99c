//! How the commands open the data directory.
//!
//! The reading commands open it read-only (`Config::readonly`): they write
//! no data (only the shared-mode lock files) and work alongside an
//! application that holds the directory in shared mode. An application in
//! exclusive mode (the default) excludes every other handle: then they fail
//! with [`HeldExclusively`], which says what to do, except `tail`, which
//! falls back to reading the files without opening the directory.
//!
//! The writing commands (and `consume --group`, which commits) open it in
//! exclusive mode, as an application does by default; when a shared-mode
//! application holds it they open it shared instead and write beside it.

use std::path::Path;

use mqlite::{Broker, Config, Error};

/// A read-only open refused because a process holds the directory in
/// exclusive mode.
#[derive(Debug)]
pub struct HeldExclusively(pub Error);

impl std::fmt::Display for HeldExclusively {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: to read it while that process runs, the application must \
             open it in shared mode (Python \
             mqlite.open(path, shared=True), Rust Config::shared(true), C \
             mql_config_set_shared); or stop that process and retry",
            self.0
        )
    }
}

impl std::error::Error for HeldExclusively {}

/// Opens `dir` read-only; [`HeldExclusively`] when an exclusive-mode
/// process holds it.
pub fn readonly(dir: &Path) -> Result<Broker, Box<dyn std::error::Error>> {
    match Broker::open(dir, Config::default().readonly(true)) {
        Ok(b) => Ok(b),
        Err(e @ Error::Locked { .. }) => Err(Box::new(HeldExclusively(e))),
        Err(e) => Err(e.into()),
    }
}

/// Opens `dir` to write: in exclusive mode, or shared when shared-mode
/// processes hold it.
pub fn writable(dir: &Path) -> mqlite::Result<Broker> {
    match Broker::open(dir, Config::default()) {
        Err(Error::Locked { .. }) => Broker::open(dir, Config::default().shared(true)),
        other => other,
    }
}
