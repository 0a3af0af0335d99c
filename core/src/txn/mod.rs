//! Transactions: atomic writes across partitions and topics, with consumer
//! offsets, committed through the data directory's transaction log.
//!
//! A transaction is buffered by its producer and written only at its
//! commit, so no open transaction ever holds readers back (there is no
//! last stable offset to wait for). [`Coordinator::commit`]:
//!
//! 1. takes the writer lock of every partition it writes, in (topic,
//!    partition) order, and writes its data there, unpublished
//!    ([`PartitionLog::prepare_transaction`]);
//! 2. with `acks=all`, syncs that data;
//! 3. appends the commit record to `transactions.log` (synced with
//!    `acks=all`): **the commit point**;
//! 4. writes each partition's commit marker and publishes data and marker
//!    together, letting go of each lock;
//! 5. commits the consumer offsets sent into the transaction, then notes in
//!    the log that the transaction is applied.
//!
//! A failure before the commit point leaves every log as it was. After a
//! crash, recovery keeps the unmarked data of a transaction whose commit
//! record exists, and cuts any other (`log/recover.rs`);
//! [`Coordinator::recover`] then writes the missing markers and commits
//! the offsets of every commit record not noted as applied. Commits are
//! serialised by the coordinator; in shared mode, across processes, by the
//! directory's transaction lock (`shared.rs`).

mod journal;
mod shared;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::broker::BrokerInner;
use crate::dedup::NamedIdentity;
use crate::error::{Error, Result};
use crate::faults::{commit_step, CommitStep};
use crate::log::batch::{ProducerFields, RecordRef};
use crate::log::{now_ms, CommittedRun, CommittedRuns, PartitionLog};
use crate::offsets::CommittedOffset;
use crate::sync::lock;
pub(crate) use journal::{find_commit, OffsetRecord, PartRecord};
use journal::{CommitRecord, Entry, Journal, Loaded};

/// Bytes of transaction log after which a commit first makes every marker
/// durable and empties the log (in shared mode too: a process reads only
/// what the lock's page does not say is finished, see `shared.rs`).
const COMPACT_AT: u64 = 64 << 20;

/// [`COMPACT_AT`], or what a test set instead.
fn compact_at() -> u64 {
    crate::faults::transaction_log_limit().unwrap_or(COMPACT_AT)
}

/// The data directory's transaction coordinator.
#[derive(Debug)]
pub(crate) struct Coordinator {
    state: Mutex<State>,
    /// `(topic, partition, first offset)` of every transaction in the log
    /// at open, with its first batch's length: recovery puts the length
    /// back and keeps their unmarked data.
    committed: Arc<HashMap<(String, u32, u64), CommittedRun>>,
    /// Shared mode: where the directory's transaction lock is, and the
    /// process it is taken for.
    lock_site: Option<shared::LockSite>,
    /// Permission bits of the files it creates.
    mode: u32,
}

#[derive(Debug)]
struct State {
    journal: Journal,
    next_txn: u64,
    /// Commit records read at open (until [`Coordinator::recover`]): a
    /// crash may have lost the marker of any of them, applied or not.
    /// Shared mode: the commit records in the log left to finish.
    loaded: Vec<CommitRecord>,
    /// Of those, the ones noted as applied.
    applied: HashSet<u64>,
    /// Commits of this session whose offsets could not be committed (the
    /// next open commits them): while there are any, the log is never
    /// emptied.
    pending: Vec<CommitRecord>,
    /// The partitions written by transactions in the log: their markers
    /// are made durable before the log is emptied.
    touched: HashSet<(String, u32)>,
    /// Shared mode: bytes of the log were skipped (the lock's page said
    /// their commits were finished), so `touched` may miss partitions:
    /// the log is read whole before it is emptied.
    touched_partly: bool,
    /// Shared mode: the directory's transaction lock page, once mapped.
    lock_page: Option<Arc<crate::shared::SharedPage>>,
}

/// A transaction to commit, its records grouped by partition.
pub(crate) struct Commit<'a> {
    pub transactional_id: &'a str,
    pub identity: &'a NamedIdentity,
    pub producer_id: i64,
    pub epoch: i16,
    /// Each partition's log and records, in (topic, partition) order.
    pub parts: Vec<(Arc<PartitionLog>, Vec<RecordRef<'a>>)>,
    pub offsets: Vec<OffsetRecord>,
    pub sync: bool,
}

impl Coordinator {
    /// Opens the coordinator of data directory `dir` (its transaction log).
    pub(crate) fn open(dir: &Path, mode: u32) -> Result<Coordinator> {
        let (journal, loaded) = Journal::open(dir, mode)?;
        let Loaded {
            commits,
            mut applied,
            next_txn,
        } = loaded;
        // Shared commits that the last shared session finished (it wrote
        // no note for them: see `shared.rs`).
        let clean = shared::clean_bytes(dir, journal.ident(), journal.len());
        applied.extend(
            commits
                .iter()
                .filter(|c| c.shared && c.end <= clean)
                .map(|c| c.txn),
        );
        let mut committed = HashMap::new();
        let mut touched = HashSet::new();
        for c in &commits {
            for p in &c.parts {
                committed.insert(
                    (p.topic.clone(), p.partition, p.first),
                    CommittedRun {
                        len: p.first_len,
                        crc: p.first_crc,
                    },
                );
                touched.insert((p.topic.clone(), p.partition));
            }
        }
        Ok(Coordinator {
            state: Mutex::new(State {
                journal,
                next_txn,
                loaded: commits,
                applied,
                pending: Vec::new(),
                touched,
                touched_partly: false,
                lock_page: None,
            }),
            committed: Arc::new(committed),
            lock_site: None,
            mode,
        })
    }

    /// What recovery asks about unmarked transaction data.
    pub(crate) fn committed_runs(&self) -> CommittedRuns {
        let set = Arc::clone(&self.committed);
        CommittedRuns(Arc::new(move |topic: &str, partition, first| {
            set.get(&(topic.to_owned(), partition, first)).copied()
        }))
    }

    /// After the topics opened: writes the markers a crash left out (of
    /// every transaction in the log: a power loss can take a marker that
    /// was not synced yet, whatever the log says) and commits the offsets
    /// of the transactions not noted as applied; then, the markers made
    /// durable, empties the log.
    pub(crate) fn recover(&self, broker: &BrokerInner) -> Result<()> {
        let mut st = lock(&self.state);
        let applied = std::mem::take(&mut st.applied);
        for c in std::mem::take(&mut st.loaded) {
            write_missing_markers(broker, &c)?;
            if !applied.contains(&c.txn) && !c.offsets.is_empty() {
                apply_offsets(broker, &c.offsets)?;
                st.journal.append(&Entry::Applied { txn: c.txn }, false)?;
            }
        }
        if st.journal.len() > 0 {
            compact(&mut st, broker)?;
        }
        // The page described the log just emptied.
        shared::forget_page(broker.dir());
        Ok(())
    }

    /// Commits `c` (see the module doc). Returns each part's first offset.
    ///
    /// # Errors
    /// [`Error::ProducerFenced`] when a newer producer took the
    /// transactional id; what writing the logs or the transaction log
    /// returns. Nothing is written when an error is returned before the
    /// commit point; an error committing the offsets after it is returned
    /// too (the records are committed; the offsets are committed again at
    /// the next open).
    pub(crate) fn commit(&self, broker: &BrokerInner, c: Commit<'_>) -> Result<Vec<u64>> {
        let mut st = lock(&self.state);
        // Shared mode: the directory's transaction lock, held to the end,
        // and what the other processes committed.
        let held = self.hold(&mut st, broker, false)?;
        let res = self.commit_held(&mut st, broker, c);
        if let Some(h) = held {
            h.release(&st);
        }
        res
    }

    /// [`Coordinator::commit`], the lock held.
    fn commit_held(&self, st: &mut State, broker: &BrokerInner, c: Commit<'_>) -> Result<Vec<u64>> {
        let current = c.identity.current_epoch();
        if current != c.epoch {
            return Err(Error::ProducerFenced {
                producer_id: c.producer_id,
                epoch: c.epoch,
                current_epoch: current,
            });
        }
        if st.journal.len() > compact_at() {
            compact(st, broker)?;
        }
        check_members(broker, &c.offsets)?;
        let producer = ProducerFields {
            producer_id: c.producer_id,
            producer_epoch: c.epoch,
            base_sequence: -1,
        };
        let mut prepared = Vec::with_capacity(c.parts.len());
        for (log, records) in &c.parts {
            prepared.push(log.prepare_transaction(records, producer)?);
        }
        commit_step(CommitStep::DataWritten);
        if c.sync {
            for p in &prepared {
                p.sync()?;
            }
            commit_step(CommitStep::DataSynced);
        }
        let txn = st.next_txn;
        let timestamp = now_ms();
        let record = CommitRecord {
            txn,
            transactional_id: c.transactional_id.to_owned(),
            producer_id: c.producer_id,
            epoch: c.epoch,
            timestamp,
            parts: prepared
                .iter()
                .map(|p| PartRecord {
                    topic: p.log().topic().to_string(),
                    partition: p.log().partition(),
                    first: p.first_offset(),
                    marker: p.marker_offset(),
                    first_len: p.first_len(),
                    first_crc: Some(p.first_crc()),
                })
                .collect(),
            offsets: c.offsets,
            shared: self.is_shared(),
            end: 0,
        };
        st.journal.append(&Entry::Commit(record.clone()), c.sync)?;
        st.next_txn += 1;
        commit_step(CommitStep::Committed);
        let firsts: Vec<u64> = prepared
            .iter()
            .map(crate::log::PreparedPart::first_offset)
            .collect();
        let n = prepared.len();
        for (i, p) in prepared.into_iter().enumerate() {
            p.publish(txn, timestamp);
            if i + 1 < n {
                commit_step(CommitStep::PartPublished);
            }
        }
        commit_step(CommitStep::Published);
        for p in &record.parts {
            st.touched.insert((p.topic.clone(), p.partition));
        }
        if record.offsets.is_empty() {
            // Nothing to note: only offsets are applied again at open (in
            // shared mode, the lock's page says the commit ended).
            commit_step(CommitStep::OffsetsApplied);
            return Ok(firsts);
        }
        // Not noted as applied (nor the log emptied) until the offsets
        // are committed: the next open commits them again, to the same
        // values. The note is not synced for the same reason; in shared
        // mode the lock's page takes its place when the lock is let go.
        let applied = apply_offsets(broker, &record.offsets)
            .inspect(|()| commit_step(CommitStep::OffsetsApplied))
            .and_then(|()| {
                if self.is_shared() {
                    Ok(())
                } else {
                    st.journal.append(&Entry::Applied { txn }, false)
                }
            });
        if let Err(e) = applied {
            if self.is_shared() {
                // Any process's next commit finishes it.
                st.loaded.push(record);
            } else {
                st.pending.push(record);
            }
            return Err(e);
        }
        Ok(firsts)
    }

    /// At a clean close, after every log was flushed: empties the log.
    pub(crate) fn close(&self) {
        if self.is_shared() {
            return; // other processes may have commits to finish
        }
        let mut st = lock(&self.state);
        if st.journal.len() > 0 && st.pending.is_empty() {
            let next = st.next_txn;
            if let Err(e) = st.journal.reset(next) {
                ::log::warn!("emptying the transaction log failed: {e}");
            }
        }
    }
}

/// Whether the transaction log of data directory `dir` holds commit
/// records of an exclusive session: one is open, or ended without closing
/// (its last commits may need their markers, and their first batches'
/// lengths, written back by an exclusive open).
pub(crate) fn has_exclusive_commits(dir: &Path) -> Result<bool> {
    if shared::log_as_page_left(dir) {
        // Only shared holders wrote it since it was last checked.
        return Ok(false);
    }
    Ok(Journal::open_read(dir)?.commits.iter().any(|c| !c.shared))
}

/// What recovery asks about unmarked transaction data, from the log of
/// data directory `dir` as it is (shared mode, the check after a restart
/// of the machine).
pub(crate) fn committed_runs_in(dir: &Path) -> Result<CommittedRuns> {
    let mut set = HashMap::new();
    for c in Journal::open_read(dir)?.commits {
        for p in c.parts {
            let run = CommittedRun {
                len: p.first_len,
                crc: p.first_crc,
            };
            set.insert((p.topic, p.partition, p.first), run);
        }
    }
    Ok(CommittedRuns(Arc::new(
        move |topic: &str, partition, first| {
            set.get(&(topic.to_owned(), partition, first)).copied()
        },
    )))
}

/// Writes the marker of `c` in each of its partitions where it is
/// missing at the end (its data kept by recovery, or finished by a
/// take-over); says so where its data is gone.
fn write_missing_markers(broker: &BrokerInner, c: &CommitRecord) -> Result<()> {
    let marker = c.marker();
    for p in &c.parts {
        let Ok(log) = broker
            .topic(&p.topic)
            .and_then(|t| t.partition(p.partition))
        else {
            continue; // deleted since
        };
        if !log.append_commit_marker(p.marker, &marker)? && log.end_offset() < p.marker {
            ::log::error!(
                "transaction {} ({:?}): its data in {}/{} from offset {} is gone (not synced \
                 before a power loss?)",
                c.txn,
                c.transactional_id,
                p.topic,
                p.partition,
                p.first
            );
        }
    }
    Ok(())
}

/// Fails with [`Error::CommitFailed`] when a member that sent offsets no
/// longer owns one of their partitions.
fn check_members(broker: &BrokerInner, offsets: &[OffsetRecord]) -> Result<()> {
    let mut members: Vec<(&str, &str)> = offsets
        .iter()
        .filter_map(|o| Some((o.group.as_str(), o.member.as_deref()?)))
        .collect();
    members.sort_unstable();
    members.dedup();
    for (g, m) in members {
        let parts: Vec<(String, u32)> = offsets
            .iter()
            .filter(|o| o.group == g && o.member.as_deref() == Some(m))
            .map(|o| (o.topic.clone(), o.partition))
            .collect();
        broker.group(g)?.check_owned(m, &parts)?;
    }
    Ok(())
}

/// Commits the consumer offsets of a transaction, group by group.
fn apply_offsets(broker: &BrokerInner, offsets: &[OffsetRecord]) -> Result<()> {
    let mut groups: Vec<&str> = offsets.iter().map(|o| o.group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    for g in groups {
        let entries: Vec<(String, u32, CommittedOffset)> = offsets
            .iter()
            .filter(|o| o.group == g)
            .map(|o| {
                (
                    o.topic.clone(),
                    o.partition,
                    CommittedOffset {
                        offset: o.offset,
                        metadata: o.metadata.clone(),
                        timestamp: now_ms(),
                    },
                )
            })
            .collect();
        broker.group(g)?.commit(None, &entries)?;
    }
    Ok(())
}

/// Makes every marker of the transactions in the log durable (their
/// partitions flushed), then empties the log.
fn compact(st: &mut State, broker: &BrokerInner) -> Result<()> {
    if !st.pending.is_empty() || !st.loaded.is_empty() {
        return Ok(());
    }
    if st.touched_partly {
        // Partitions of the commits whose bytes were skipped.
        for c in Journal::open_read(broker.dir())?.commits {
            for p in c.parts {
                st.touched.insert((p.topic, p.partition));
            }
        }
        st.touched_partly = false;
    }
    for (topic, partition) in &st.touched {
        if let Ok(log) = broker.topic(topic).and_then(|t| t.partition(*partition)) {
            // Shared mode: markers other processes wrote are flushed too.
            log.catch_up()?;
            log.flush()?;
        }
    }
    st.touched.clear();
    let next = st.next_txn;
    st.journal.reset(next)
}
