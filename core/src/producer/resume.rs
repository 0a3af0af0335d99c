//! Where a named producer resumes after a restart:
//! [`Producer::next_sequence`].

use super::{lock, Inner, Producer};
use crate::error::{Error, Result};
use crate::seqranges::SeqRanges;

impl Producer {
    /// The first application sequence ([`Record::sequence`]) this producer
    /// has not written: the smallest `s >= 0` that no partition of any
    /// topic holds. An application numbering its records 0, 1, 2, ...
    /// resumes after a crash by re-sending from here, with the same
    /// sequences and to the same partitions (by key or explicit partition):
    /// records that were written after a gap are dropped as duplicates,
    /// the others are written, so none is lost and none is doubled.
    ///
    /// Unlike [`Producer::last_sequence`] + 1, this is safe after
    /// asynchronous sends ([`Producer::send_async`]): they may have written
    /// a higher sequence to one partition while lower ones queued for
    /// another were lost in the crash.
    ///
    /// When the application skipped sequences, this is the first one
    /// skipped (the first gap), even if higher ones were written.
    ///
    /// Each partition keeps the sequences of the producer written above a
    /// floor below which all are known written; the floor is raised after
    /// this call and as sends complete, so what is kept is bounded by the
    /// sends in flight (at most 4096 ranges per
    /// partition; past that the oldest are forgotten and the answer can
    /// only be lower, which costs re-sending, never records). The call
    /// loads each partition's producer table (its snapshot and the batch
    /// headers after it, the active segment's) when not yet loaded, so the
    /// first call after opening reads those headers of every partition.
    /// Data written by a version without this state, or whose snapshot was
    /// lost, counts only from the batches read: the answer is then lower.
    ///
    /// Exact after a process crash. After an operating-system crash or
    /// power loss, it only accounts for what the file system kept: flush
    /// (`acks=all` or [`Producer::flush`]) before relying on it there.
    ///
    /// Call it before sending; sends running concurrently may or may not be
    /// counted.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the producer is not idempotent;
    /// [`Error::Closed`] when the broker is closed; I/O errors reading the
    /// state.
    ///
    /// [`Record::sequence`]: crate::Record::sequence
    pub fn next_sequence(&self) -> Result<i64> {
        on_cluster!(self, k => k.next_sequence());
        let inner = &**self.inner();
        let Some(id) = &inner.identity else {
            return Err(Error::InvalidArgument(
                "next_sequence needs an idempotent producer".into(),
            ));
        };
        inner.broker.check_open()?;
        let named = id.named.is_some();
        let known = inner.written_floor();
        let topics = inner.broker.all_topics();
        let mut sets = Vec::new();
        for topic in &topics {
            for log in topic.partitions()?.iter() {
                if let Some(s) = log.producer_written(id.id, named, known)? {
                    sets.push(s);
                }
            }
        }
        let next = SeqRanges::first_gap(&sets);
        // Everything below `next` is written: the partitions can forget it.
        for topic in &topics {
            for log in topic.partitions()?.iter() {
                log.producer_written(id.id, named, next)?;
            }
        }
        lock(&inner.written)
            .get_or_insert_with(SeqRanges::default)
            .raise_floor(next);
        Ok(next)
    }
}

impl Inner {
    /// The floor of the sequences known written, handed to the partitions
    /// with each sequenced batch (0 before [`Producer::next_sequence`]).
    pub(super) fn written_floor(&self) -> i64 {
        lock(&self.written).as_ref().map_or(0, |w| w.floor)
    }

    /// Counts `count` records from application sequence `seq` as written
    /// (or found already written). Out of line: the send path inlines its
    /// caller.
    #[inline(never)]
    pub(super) fn note_written(&self, seq: i64, count: usize) {
        if let Some(w) = lock(&self.written).as_mut() {
            w.insert(seq, seq.saturating_add(count as i64));
        }
    }
}
