//! The coordinator in shared mode: every process that may write commits
//! through the data directory's one transaction log.
//!
//! A commit holds the directory's transaction lock (`TXN`, an exclusive
//! `flock` the kernel releases when its holder dies) from before it looks
//! at the log to after it noted the transaction applied, so whoever holds
//! the lock knows that no commit is under way. Holding it, a process
//! first takes in what the others appended to the log since it last
//! looked (all of it again when one of them emptied it: a new file), then
//! finishes every commit record not noted as applied: its committer died
//! after the commit point, or could not commit the offsets. Finishing one
//! writes its markers (taking a partition's append lock over from a dead
//! committer restores its part, see `log/txn_part.rs`), commits its
//! offsets and notes it applied. Every commit in shared mode ends with
//! that note, so the log is emptied only when nothing is left to finish.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::journal::{CommitRecord, Entry, Journal};
use super::{apply_offsets, write_missing_markers, Coordinator, State};
use crate::broker::BrokerInner;
use crate::error::{IoContext, Result};

/// The directory's transaction lock, held; let go when dropped.
pub(super) struct Held(Arc<File>);

impl Drop for Held {
    fn drop(&mut self) {
        // Closing the file (at the engine's close, or the process's end)
        // lets go too.
        let _ = self.0.unlock();
    }
}

/// The directory's transaction lock file.
pub(crate) const LOCK_FILE: &str = "TXN";

impl Coordinator {
    /// Shared mode: the coordinator of data directory `dir` for a process
    /// that may write. The log is read under the lock, at each commit and
    /// at [`Coordinator::finish_at_open`].
    pub(crate) fn open_shared(dir: &Path, mode: u32) -> Coordinator {
        Coordinator {
            state: Mutex::new(State {
                journal: Journal::unread(dir, mode),
                next_txn: 0,
                loaded: Vec::new(),
                applied: HashSet::new(),
                pending: Vec::new(),
                touched: HashSet::new(),
                lock_file: None,
            }),
            committed: Arc::new(HashMap::new()),
            lock_path: Some(dir.join(LOCK_FILE)),
            mode,
        }
    }

    /// Shared mode, once the engine is open: finishes the commits whose
    /// committer died after their commit point; with `restarted` (the
    /// first open after a restart of the machine) writes the markers of
    /// every commit in the log, since a power loss may have taken markers
    /// that were never synced.
    pub(crate) fn finish_at_open(&self, broker: &BrokerInner, restarted: bool) -> Result<()> {
        let mut st = crate::sync::lock(&self.state);
        let _held = self.hold(&mut st, broker, restarted)?;
        if st.journal.len() > self.compact_at() {
            super::compact(&mut st, broker)?;
        }
        Ok(())
    }

    /// Shared mode: takes the transaction lock and catches up with the log
    /// (see the module doc); `all`: every commit's markers. `None` in
    /// exclusive mode.
    pub(super) fn hold(
        &self,
        st: &mut State,
        broker: &BrokerInner,
        all: bool,
    ) -> Result<Option<Held>> {
        let Some(path) = &self.lock_path else {
            return Ok(None);
        };
        // Opened once, locked for each commit.
        let file = if let Some(f) = &st.lock_file {
            Arc::clone(f)
        } else {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(self.mode)
                .open(path)
                .ctx(|| format!("opening {}", path.display()))?;
            Arc::clone(st.lock_file.insert(Arc::new(f)))
        };
        file.lock().ctx(|| format!("locking {}", path.display()))?;
        let held = Held(file);
        let (new, replaced) = st.journal.refresh()?;
        if replaced {
            // Emptied by another process: everything in it was finished.
            st.touched.clear();
            st.loaded.clear();
        }
        st.next_txn = st.next_txn.max(new.next_txn);
        for c in new.commits {
            for p in &c.parts {
                st.touched.insert((p.topic.clone(), p.partition));
            }
            if all || !new.applied.contains(&c.txn) {
                st.loaded.push(c);
            }
        }
        st.loaded.retain(|c| all || !new.applied.contains(&c.txn));
        let mut left = Vec::new();
        for c in std::mem::take(&mut st.loaded) {
            let applied = new.applied.contains(&c.txn);
            if let Err(e) = finish(st, broker, &c, applied) {
                ::log::warn!(
                    "finishing transaction {} ({:?}), whose committer died or could not \
                     commit its offsets: {e}",
                    c.txn,
                    c.transactional_id
                );
                left.push(c);
            }
        }
        st.loaded = left;
        Ok(Some(held))
    }

    /// Whether this is a shared-mode coordinator.
    pub(super) fn is_shared(&self) -> bool {
        self.lock_path.is_some()
    }

    /// Bytes of log after which a commit first empties it: smaller in
    /// shared mode, where every process reads the whole log at its first
    /// commit.
    pub(super) fn compact_at(&self) -> u64 {
        if self.is_shared() {
            super::COMPACT_AT_SHARED
        } else {
            super::COMPACT_AT
        }
    }
}

/// Writes the markers of `c` where they are missing and, unless it is
/// noted `applied`, commits its offsets and notes it so.
fn finish(st: &mut State, broker: &BrokerInner, c: &CommitRecord, applied: bool) -> Result<()> {
    write_missing_markers(broker, c)?;
    if applied {
        return Ok(());
    }
    if !c.offsets.is_empty() {
        apply_offsets(broker, &c.offsets)?;
    }
    st.journal.append(&Entry::Applied { txn: c.txn }, false)
}
