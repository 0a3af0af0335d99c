//! Claims on a producer name, for the access modes of named producers
//! ([`ProducerAccessMode`]).
//!
//! A claim is a `flock` on `<dir>/producers/names/<name>.lock`: exclusive
//! for `Exclusive` and `WaitForExclusive` producers, shared for `Shared`
//! ones, none for `ExclusiveWithFencing` ones (they only look). It is held
//! while the producer is open and the kernel drops it when the process
//! ends, so a crashed holder never keeps a name. `flock` locks belong to an
//! open file description, so two producers of one process conflict as two
//! processes do.
//!
//! Claims are taken under the registry's lock (its mutex, and in shared
//! mode `registry.lock` as well), so that looking at the name's lock and
//! handing out an epoch are one step for every process.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::producer::ProducerAccessMode;
use crate::shared::{LiveLock, Liveness};

/// What a try to claim a name found.
#[derive(Debug)]
pub(crate) enum Claimed {
    /// The producer may open.
    Got {
        /// The lock it holds while open (none in the fencing mode).
        lock: Option<LiveLock>,
        /// Whether it takes a new epoch (false: it joins the open shared
        /// producers' epoch).
        new_epoch: bool,
    },
    /// An open producer excludes it: why.
    Busy(String),
}

/// The lock file of producer name `name` under `pdir` (`<dir>/producers`).
/// Names are checked before (letters, digits, `.`, `_`, `-`; never `.` or
/// `..`), so the path stays in the directory.
pub(crate) fn lock_path(pdir: &Path, name: &str) -> PathBuf {
    pdir.join("names").join(format!("{name}.lock"))
}

/// Tries to claim `name` for a producer in `mode`, without waiting.
pub(crate) fn try_claim(
    pdir: &Path,
    name: &str,
    mode: ProducerAccessMode,
    file_mode: u32,
) -> Result<Claimed> {
    let path = lock_path(pdir, name);
    if mode != ProducerAccessMode::ExclusiveWithFencing {
        crate::private_dir::create_dir_all(&pdir.join("names"), file_mode)?;
    }
    let busy = |who: &str| {
        Ok(Claimed::Busy(format!(
            "{who} producer of this name is open; one in the {mode} access mode cannot open beside it"
        )))
    };
    match mode {
        ProducerAccessMode::ExclusiveWithFencing => match LiveLock::probe(&path)? {
            Liveness::Alive => busy("an exclusive or shared"),
            Liveness::Dead | Liveness::Missing => Ok(Claimed::Got {
                lock: None,
                new_epoch: true,
            }),
        },
        ProducerAccessMode::Exclusive | ProducerAccessMode::WaitForExclusive => {
            match LiveLock::try_hold(&path, file_mode)? {
                Some(lock) => Ok(Claimed::Got {
                    lock: Some(lock),
                    new_epoch: true,
                }),
                None => busy("an exclusive or shared"),
            }
        }
        ProducerAccessMode::Shared => {
            let alone = LiveLock::probe(&path)? != Liveness::Alive;
            match LiveLock::try_hold_shared(&path, file_mode)? {
                Some(lock) => Ok(Claimed::Got {
                    lock: Some(lock),
                    new_epoch: alone,
                }),
                None => busy("an exclusive"),
            }
        }
    }
}
