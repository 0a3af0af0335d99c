//! The processes that have a shared data directory open: each holds an
//! exclusive lock on a file of its own under `procs/`, named by a random
//! token, for as long as it has the directory open.
//! (interim version: replaced by the full module)

use std::path::{Path, PathBuf};

use super::{LiveLock, Liveness};
use crate::error::Result;

/// This process's registration in a shared data directory.
#[derive(Debug)]
pub(crate) struct ProcessSlot {
    token: u64,
    _live: LiveLock,
}

fn live_path(dir: &Path, token: u64) -> PathBuf {
    dir.join("procs").join(format!("{token:016x}.live"))
}

impl ProcessSlot {
    /// Registers this process under `dir/procs/`.
    pub(crate) fn register(dir: &Path, mode: u32) -> Result<ProcessSlot> {
        crate::private_dir::create_dir_all(&dir.join("procs"), mode)?;
        loop {
            let token = crate::clock::now_ms() as u64
                ^ (u64::from(std::process::id()) << 40)
                ^ (std::ptr::from_ref(&mode) as u64).rotate_left(17);
            if token == 0 {
                continue;
            }
            if let Some(live) = LiveLock::try_hold(&live_path(dir, token), mode)? {
                return Ok(ProcessSlot { token, _live: live });
            }
        }
    }

    /// The token.
    pub(crate) fn token(&self) -> u64 {
        self.token
    }
}

/// Whether the process with `token` still has `dir` open.
pub(crate) fn process_alive(dir: &Path, token: u64) -> bool {
    token != 0
        && matches!(
            LiveLock::probe(&live_path(dir, token)),
            Ok(Liveness::Alive) | Err(_)
        )
}
