//! Appending to a partition that other processes append to (shared mode,
//! several writers).
//!
//! Every process opens the log as in `reader.rs`, with its active segment
//! mapped writable. An append takes the partition's append lock, kept in
//! its tail page ([`TailPage::lock_append`]: one compare-and-swap when
//! nobody else holds it; a holder is waited for while it lives, and its
//! lock taken over once the kernel says it died), then:
//! 1. catches up with what the others appended since this process last
//!    looked (nothing to do, two loads, when the tail page's sequence and
//!    next offset are what this process last wrote or took in): the tail
//!    page says where the log ends, and this process's view moves there
//!    (a roll to a segment another process created; segments retention
//!    removed). The new batches of the active segment are walked by their
//!    headers only (lengths within the file, offsets following on): a
//!    live holder published them whole, and the read path checks every
//!    batch's CRC32C before delivery. The walk takes each batch's
//!    timestamp, and its producer fields into the producer table when it
//!    is loaded (named producers' windows, epochs that fence older
//!    instances). When the producer table is not loaded, the walk is
//!    skipped: the tail page names where the last batch its publisher
//!    appended starts, and the active segment's largest timestamp; that
//!    one header is checked (it ends at the published length, its
//!    offsets at the tail's next offset) and the end believed
//!    ([`PartitionLog::adopt_tail_end`]). After a roll, or a tail page
//!    that fails its checks, the checks are a reader's (CRC32C included).
//!    The index entries the others wrote are taken in before this process
//!    writes one;
//! 2. after taking the lock from a dead holder, repairs: a transaction's
//!    part it left unpublished after the transaction's commit point is
//!    finished (see `txn_part.rs`); other bytes it may have written past
//!    the published end are zeroed (the tail page records where its write
//!    in progress ended), and empty segment files it
//!    created but never published are removed (one holding data is
//!    followed); a tail page it left half-written, or whose words the
//!    files do not bear out (damaged), is rebuilt from the files (the
//!    newest segment, read to its last whole valid batch), never from
//!    this process's own view, which may be older than what others
//!    published;
//! 3. appends as a single writer does, records where its write will end
//!    before writing past the published end, publishes the new end in the
//!    tail page and lets go.
//!
//! Rolls happen under the lock and publish the new segment in the tail
//! page at once; retention runs under it too. Each process's writer
//! prepares its own next segment ahead of a roll, under a name of its own
//! (`next.<token>.*`, see [`PartitionLog::prepared_stem`]), and renames it
//! at the roll; those a process left when it died are removed by the next
//! preparation of another process (or by the first lone open). A sealed
//! segment's file is trimmed only to a length every mapping may touch (see
//! [`super::segment::shared_sealed_len`]), and nothing of another
//! process's is ever cut below what it published.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::batch::{self, BatchHeader};
use super::reader::{holds_data, list_bases, SharedWriter, Walk};
use super::segment::{segment_path, PREPARED_STEM};
use super::{PartitionLog, Segment, Writer};
use crate::error::Result;
use crate::shared::{AppendGuard, Stolen, Tail};
use crate::sync;

impl PartitionLog {
    /// The name stem of this process's prepared next segment: `next` when
    /// no other process appends to the log, else `next.<token>` (the
    /// process's token in 16 hex digits, as its `.live` file), so that the
    /// writers of several processes each prepare their own and a roll
    /// renames the roller's.
    pub(super) fn prepared_stem(&self) -> String {
        match self.shared_writer() {
            Some(sw) => format!("{PREPARED_STEM}.{:016x}", sw.writers.slot.token()),
            None => PREPARED_STEM.to_owned(),
        }
    }

    /// In shared mode, the sweep the job preparing this process's next
    /// segment runs first over the partition directory: see
    /// [`remove_dead_prepared`].
    pub(super) fn dead_prepared_sweep(&self) -> Option<impl FnOnce(&Path) + Send + 'static> {
        let sw = self.shared_writer()?;
        let (root, me) = (Arc::clone(&sw.writers.root), sw.writers.slot.token());
        Some(move |dir: &Path| remove_dead_prepared(dir, &root, me))
    }

    /// The part of the log that appends with other processes, if this
    /// process appends to it in shared mode.
    #[inline]
    pub(super) fn shared_writer(&self) -> Option<&SharedWriter> {
        self.reader.as_ref().and_then(|r| r.writer.as_ref())
    }

    /// At open: gives a partition's tail page its first content, read from
    /// the files, when no process did yet (a partition no process opened
    /// in shared mode since the directory was last used alone).
    pub(super) fn start_shared_tail(&self) {
        let Some(sw) = self.shared_writer() else {
            return;
        };
        let made = sw.page.init_if_new(|| {
            let mut w = sync::lock(&self.writer);
            self.scan_without_tail(&mut w);
            self.tail_of(&w)
        });
        if let Err(e) = made {
            // The next append rebuilds the page from the files.
            ::log::warn!(
                "{}/{}: starting the tail page: {e}",
                self.topic,
                self.partition
            );
        }
    }

    /// The tail page's content for the log as `w` sees it.
    fn tail_of(&self, w: &Writer) -> Tail {
        Tail {
            next_offset: w.next_offset,
            active_base: w.active.base(),
            published: w.active.end() as u64,
            log_start: self.start_offset(),
            cuts: 0,
            last_batch: None,
        }
    }

    /// Before an append (or a roll, or retention) in shared mode with
    /// several writers: takes the partition's append lock and brings `w`
    /// up to date with what other processes did (see the module doc).
    /// `None` for a log no other process appends to.
    ///
    /// # Errors
    /// I/O errors of the repair after a dead holder.
    pub(super) fn lock_for_append(&self, w: &mut Writer) -> Result<Option<AppendGuard<'_>>> {
        let (Some(r), Some(sw)) = (self.reader.as_deref(), self.shared_writer()) else {
            return Ok(None);
        };
        let me = sw.writers.slot.token();
        let root = &sw.writers.root;
        let guard = sw
            .page
            .lock_append(me, &|t| t == me || crate::shared::process_alive(root, t))?;
        let stolen = guard.stolen();
        if stolen.is_some()
            || !sw
                .page
                .unchanged_since(sw.known_seq.load(Ordering::Acquire), w.next_offset)
        {
            self.catch_up_locked(r, sw, w, stolen)?;
        }
        // Otherwise nobody else wrote since this process last did (or
        // looked).
        Ok(Some(guard))
    }

    /// [`PartitionLog::lock_for_append`] once the lock is held and the log
    /// changed since this process last looked, or the lock was taken from
    /// a dead holder (`stolen`).
    #[cold]
    #[inline(never)]
    fn catch_up_locked(
        &self,
        r: &super::reader::ReaderState,
        sw: &SharedWriter,
        w: &mut Writer,
        stolen: Option<Stolen>,
    ) -> Result<()> {
        let before = w.next_offset;
        let base_before = w.active.base();
        // Whether the producers' state follows every batch up to the end
        // (a trusted walk of the active segment takes it in on the way).
        let mut observed = false;
        match stolen {
            Some(stolen) => self.take_over(r, sw, w, stolen)?,
            None => match sw.page.read_with_seq() {
                // Published whole by a live holder (the lock was let go,
                // not taken over): headers only.
                Some((tail, seq)) if self.believe_tail(r, w, tail, seq, Walk::Trusted) => {
                    observed = w.active.base() == base_before;
                }
                // A page that is not a tail page (overwritten), that a
                // holder left half-written, or whose words the files do
                // not bear out: rebuilt from the files.
                _ => self.take_over(
                    r,
                    sw,
                    w,
                    Stolen {
                        from: 0,
                        in_progress_end: 0,
                    },
                )?,
            },
        }
        if w.producers_loaded && w.next_offset > before && !observed {
            self.observe_producers(w, before);
        }
        Ok(())
    }

    /// The catch-up of a process that took the append lock from a live
    /// holder ([`Walk::Trusted`]), when its producer table is not loaded
    /// (nothing in the new batches' headers is needed but their end):
    /// believes the published end `tail` names in `seg` (the active
    /// segment, no roll since this process last looked) once the one
    /// batch its publisher appended last checks out: it starts at or after
    /// this process's published length, its header parses, it ends exactly
    /// at the published length and its offsets end at the tail's next
    /// offset. The segment's largest timestamp is raised to the one the
    /// publisher knew. Returns whether it did; otherwise nothing changed
    /// and the caller walks the headers.
    pub(super) fn adopt_tail_end(&self, w: &mut Writer, seg: &Segment, tail: &Tail) -> bool {
        let Some(last) = tail.last_batch else {
            return false;
        };
        if w.producers_loaded {
            return false;
        }
        let log = seg.log_file();
        let from = log.published();
        let (Ok(pos), Ok(end)) = (usize::try_from(last.pos), usize::try_from(tail.published))
        else {
            return false;
        };
        // A file another process grew since this one looked is walked
        // (which reads its length again).
        if pos < from || pos >= end || end > log.allocated() || tail.next_offset <= w.next_offset {
            return false;
        }
        let Some(h) = BatchHeader::parse(log.unpublished(pos, end)) else {
            return false;
        };
        let ends_at_tail = h
            .base_offset
            .checked_add(u64::from(h.last_offset_delta) + 1)
            == Some(tail.next_offset);
        if h.length < batch::MIN_LENGTH
            || h.total_len() != end - pos
            || h.base_offset < w.next_offset
            || !ends_at_tail
        {
            return false;
        }
        seg.note_timestamp(last.max_timestamp.max(h.max_timestamp));
        // Published by another process: not flushed by this one.
        log.advance_published(end, false);
        self.end_offset.store(tail.next_offset, Ordering::Release);
        w.next_offset = tail.next_offset;
        true
    }

    /// Shared mode, several writers: brings this process's view of the log
    /// up to everything the others published, holding the append lock for
    /// a moment (which also finishes or clears what a dead holder left).
    /// Nothing for a log no other process appends to.
    ///
    /// # Errors
    /// [`crate::Error::Closed`]; I/O errors of a repair.
    pub(crate) fn catch_up(&self) -> Result<()> {
        if self.shared_writer().is_none() {
            return Ok(());
        }
        let mut w = sync::lock(&self.writer);
        if w.closed {
            return Err(self.closed_error());
        }
        self.lock_for_append(&mut w).map(drop)
    }

    /// The lock was taken from a dead holder (`stolen`), or the tail page
    /// cannot be read: positions the log at its true end and repairs what
    /// the holder left (see the module doc), then publishes the end.
    fn take_over(
        &self,
        r: &super::reader::ReaderState,
        sw: &SharedWriter,
        w: &mut Writer,
        stolen: Stolen,
    ) -> Result<()> {
        let believed = sw
            .page
            .read_with_seq()
            .is_some_and(|(tail, seq)| self.believe_tail(r, w, tail, seq, Walk::Checked));
        if believed {
            self.remove_unpublished_segments(w);
        } else {
            // Not a tail page, half-written, or damaged: this process's
            // view may be older than what the others published, which the
            // files hold as whole valid batches.
            // The newest segment file is the active one (a roll creates it
            // at the offset the old one ends at), read to its last whole
            // valid batch.
            if let Some(&newest) = list_bases(&self.dir)?.last() {
                let active = sync::read(&self.segments).last().cloned();
                if let Some(active) = active.filter(|a| newest > a.base()) {
                    self.follow_roll(w, &active, newest);
                }
            }
            let active = std::sync::Arc::clone(&w.active);
            if let Some(len) = active.log_file().refresh_allocated() {
                self.advance(w, &active, len as u64);
            }
        }
        w.active.refresh_lengths();
        let allocated = w.active.allocated();
        // Where the dead holder's write ended, from a page that holds:
        // only then is anything past the end cleared. A page that fails
        // its checks may have had its lock's words damaged too, and then
        // the holder taken for dead may be a live process writing past the
        // end at this moment. What is left there is never read: readers
        // stop at the published end, the next append writes over it, and
        // a lone open's recovery cuts it.
        let dirty_to = match usize::try_from(stolen.in_progress_end) {
            Ok(ip) if stolen.from != 0 && believed => Some(ip.min(allocated)),
            _ => None,
        };
        // A committer that died after its commit point: its part is
        // finished, not cleared.
        self.restore_committed(w, &sw.writers.root, dirty_to.unwrap_or(allocated));
        let end = w.active.end();
        if let Some(dirty_to) = dirty_to.filter(|&d| d > end) {
            let Writer {
                active,
                active_writer,
                ..
            } = w;
            super::index::zero_nonzero(active.reserve(active_writer, dirty_to - end));
            ::log::warn!(
                "{}/{}: a writer process died appending at byte {end} of segment {}; the {} \
                 bytes it left unpublished were cleared",
                self.topic,
                self.partition,
                active.base(),
                dirty_to - end
            );
        }
        w.indexes_stale = true;
        w.max_ts = w.max_ts.max(w.active.max_timestamp());
        self.end_offset.store(w.next_offset, Ordering::Release);
        self.write_tail(w.next_offset, &w.active);
        Ok(())
    }

    /// Moves the log to what `tail` says ([`PartitionLog::apply_tail`],
    /// walking as `how` says) and returns whether the page is to be
    /// believed: every batch up to its published end checked out, and the
    /// log now ends where it says (its active segment, published length
    /// and next offset). A page that fails this was damaged: a process
    /// that went by it would take its own older view for the log's end,
    /// then clear or overwrite what others published after it.
    fn believe_tail(
        &self,
        r: &super::reader::ReaderState,
        w: &mut Writer,
        tail: Tail,
        seq: u32,
        how: Walk,
    ) -> bool {
        let (_, applied) = self.apply_tail(r, w, tail, seq, how);
        applied
            && w.next_offset == tail.next_offset
            && w.active.base() == tail.active_base
            && w.active.log_file().published() as u64 == tail.published
    }

    /// Removes the files of empty segments after the active one: created
    /// by a roll whose writer died before it published it (no reader
    /// believes a segment the tail page does not name). One that holds
    /// data was published (a roll publishes its segment before anything is
    /// appended to it): the tail page was wrong, and the log follows it.
    fn remove_unpublished_segments(&self, w: &mut Writer) {
        let Ok(bases) = list_bases(&self.dir) else {
            return;
        };
        let active = std::sync::Arc::clone(&w.active);
        let later: Vec<u64> = bases.into_iter().filter(|&b| b > active.base()).collect();
        if let Some(&newest) = later.iter().rev().find(|&&b| holds_data(&self.dir, b)) {
            ::log::warn!(
                "{}/{}: segment {newest} holds data the tail page did not name; following it",
                self.topic,
                self.partition
            );
            if self.follow_roll(w, &active, newest).is_some() {
                let active = std::sync::Arc::clone(&w.active);
                if let Some(len) = active.log_file().refresh_allocated() {
                    self.advance(w, &active, len as u64);
                }
            }
            return;
        }
        for base in later {
            for ext in ["log", "idx", "tix"] {
                let _ = std::fs::remove_file(segment_path(&self.dir, base, ext));
            }
        }
    }

    /// Takes the sequence state of the batches other processes appended
    /// from offset `from` on into the producer table (named producers'
    /// windows, epochs that fence older instances).
    pub(super) fn observe_producers(&self, w: &mut Writer, from: u64) {
        let Ok(mut c) = self.cursor(from) else {
            return;
        };
        loop {
            match self.next_batch(&mut c) {
                Ok(Some((_, h))) => {
                    if h.base_offset >= from {
                        w.producers.observe(&h);
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    if !self.skip_damaged(&mut c) {
                        break;
                    }
                }
            }
        }
    }
}

/// Removes, best effort, the files of the segments that other processes
/// prepared in the partition directory `dir` and left when they ended
/// without closing it (`next.<token>.*` whose token no live process holds
/// in the data directory `root`; `me` is this process's). Tokens are never
/// reused, so a dead token's files are never taken up again.
pub(super) fn remove_dead_prepared(dir: &Path, root: &Path, me: u64) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    // Each prepared segment has three files: one probe per token.
    let mut dead: Vec<(u64, bool)> = Vec::new();
    for entry in listing.flatten() {
        let Some(token) = entry.file_name().to_str().and_then(prepared_token) else {
            continue;
        };
        if token == me {
            continue;
        }
        let is_dead = if let Some(&(_, d)) = dead.iter().find(|(t, _)| *t == token) {
            d
        } else {
            let d = !crate::shared::process_alive(root, token);
            dead.push((token, d));
            d
        };
        if is_dead {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The token in the name of a file of a segment prepared in shared mode,
/// `next.<16 hex digits>.<log|idx|tix>`; `None` for any other name.
fn prepared_token(name: &str) -> Option<u64> {
    let (hex, ext) = name
        .strip_prefix(PREPARED_STEM)?
        .strip_prefix('.')?
        .split_once('.')?;
    if hex.len() != 16 || !matches!(ext, "log" | "idx" | "tix") {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}
