//! A read-only check of one partition directory, for integrity tools
//! (`mqlite verify`, `mqlite repair`'s preview).
//!
//! [`check_partition`] walks every segment of a partition directory
//! (`<data>/topics/<topic>/<p>`) with positioned reads, like the
//! [`Follower`](super::follow::Follower): it opens every file read-only,
//! takes no lock, and creates, writes or truncates nothing, so it can run
//! next to the process that owns the directory and gives the same answer
//! every time it runs on the same bytes.
//!
//! Every batch gets the checks the engine makes ([`batch::check`]: bounds,
//! format version, record count, CRC32C), its base offset is checked against
//! the batch before it and each segment's base against the end of the one
//! before it, and the records of every valid batch are decoded (and
//! decompressed) as a reader would. Unlike recovery, the walk goes on past
//! damage: it resumes at the position the damaged batch's length field
//! points to when a valid batch starts there, else at the next position
//! (at any byte: compact batches are not aligned) holding a valid batch, and reports what
//! follows. Every damaged region becomes one [`Issue`] with its file, byte
//! position, size, offsets and reason.
//!
//! # Torn tails
//! The active (last) segment's file holds zeros after its data (it is
//! allocated ahead of the writer): a zero length field is the end of the
//! data, not damage. Damage at the very end of the active
//! segment, with no valid batch after it, after an unclean shutdown (the
//! partition's `recovery.point` file does not say "closed cleanly") and at
//! or after the recovery point's offset, is what a crash in the middle of
//! an append leaves: a [`IssueKind::TornTail`], a [`Severity::Warning`]
//! that the next open's recovery cuts. Run next to a live writer, a batch
//! being appended at that moment shows as one. Any other damage, and any
//! damage after a clean close, is a [`Severity::Error`].
//!
//! # Asking for a full check
//! Recovery checks every batch only after an unclean shutdown, and from the
//! recovery point on. [`request_full_recovery`], the one function here that
//! writes, marks partitions so that their next open checks (and cuts at)
//! every batch: what `mqlite repair` does before it opens the directory.
//!
//! Non-zero bytes after the end marker are looked for in the
//! `max_batch_bytes` ([`CheckOptions`]) after it in the active segment (a
//! partial write reaches no further), and to the end of the file in a
//! sealed one (whose file is trimmed to its data).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::log::batch::{self, Records, HEADER_LEN, LENGTH_PREFIX, MAGIC, MAX_MAGIC, MIN_LENGTH};
use crate::log::checkpoint;
use crate::log::compression::MAX_UNCOMPRESSED_LEN;
use crate::log::follow::{segment_bases, FollowedBatch, Probe, SegmentFile};

/// Bytes read at a time while looking for non-zero bytes or for the next
/// valid batch after damage.
const SCAN_CHUNK: usize = 1 << 20;
/// Window after the end marker of the active segment searched for the
/// bytes of a partial write, when no `max_batch_bytes` is given (the
/// default `max_message_bytes`).
const DEFAULT_END_WINDOW: usize = 1 << 20;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Left by a crash and handled by the next open without losing any
    /// acknowledged record: a torn tail after an unclean shutdown, a
    /// damaged recovery point (the next open checks every batch).
    Warning,
    /// Damage.
    Error,
}

impl Severity {
    /// `"warning"` or `"error"`.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// What kind of problem an [`Issue`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueKind {
    /// Bytes that do not hold valid batches in sequence (a failed check, a
    /// base offset out of sequence, stray bytes after the end marker).
    /// Recovery cuts the log at the first one.
    Batch,
    /// Damage at the very end of the active segment after an unclean
    /// shutdown: a partial last write (see the module documentation).
    TornTail,
    /// A segment that does not end where the next one starts.
    Chain,
    /// A batch that passes the checks but whose records do not decode: a
    /// reader fails on it, recovery keeps it.
    Records,
    /// Offsets below the recovery point (flushed, so acknowledged) that the
    /// log does not hold.
    Lost,
    /// The `recovery.point` file is damaged.
    RecoveryPoint,
    /// A segment file that cannot be opened or read.
    Unreadable,
}

impl IssueKind {
    /// A short name: `batch`, `torn_tail`, `chain`, `records`, `lost`,
    /// `recovery_point`, `unreadable`.
    pub fn name(self) -> &'static str {
        match self {
            IssueKind::Batch => "batch",
            IssueKind::TornTail => "torn_tail",
            IssueKind::Chain => "chain",
            IssueKind::Records => "records",
            IssueKind::Lost => "lost",
            IssueKind::RecoveryPoint => "recovery_point",
            IssueKind::Unreadable => "unreadable",
        }
    }

    /// Whether recovery cuts the log at a problem of this kind.
    fn cut_by_recovery(self) -> bool {
        matches!(
            self,
            IssueKind::Batch | IssueKind::TornTail | IssueKind::Chain
        )
    }
}

/// One problem found, with its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// How serious it is.
    pub severity: Severity,
    /// What it is.
    pub kind: IssueKind,
    /// The file.
    pub path: PathBuf,
    /// Byte position in the file.
    pub position: u64,
    /// Bytes the damaged region spans: up to where valid batches resume, or
    /// to its last non-zero byte when none follows (0 for a problem that is
    /// not a region of the file).
    pub len: u64,
    /// The base offset a batch at `position` must have (from the batches
    /// before it), when known.
    pub expected_offset: Option<u64>,
    /// Base and last offset as stored in the header found at `position`,
    /// when all of it could be read (unchecked: it may be damaged too).
    pub stored_offsets: Option<(u64, u64)>,
    /// Where valid batches resume after the damage, in the same file:
    /// `(position, base offset)`.
    pub resumed: Option<(u64, u64)>,
    /// Why.
    pub reason: String,
}

/// How the partition was last closed, from its `recovery.point` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Closed cleanly; everything below `offset` was flushed.
    Clean {
        /// The recovery point.
        offset: u64,
    },
    /// Open, or not closed cleanly (a crash); everything below `offset`
    /// was flushed.
    Unclean {
        /// The recovery point.
        offset: u64,
    },
    /// No recovery point file (the next open checks every batch).
    Unknown,
    /// A damaged recovery point file (the next open checks every batch).
    Damaged,
}

impl Shutdown {
    /// `"clean"`, `"unclean"`, `"unknown"` or `"damaged"`.
    pub fn name(self) -> &'static str {
        match self {
            Shutdown::Clean { .. } => "clean",
            Shutdown::Unclean { .. } => "unclean",
            Shutdown::Unknown => "unknown",
            Shutdown::Damaged => "damaged",
        }
    }
}

/// What the walk found in one segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSummary {
    /// The segment log file.
    pub path: PathBuf,
    /// Its base offset (from the file name).
    pub base: u64,
    /// Valid batches.
    pub batches: u64,
    /// Records in the valid batches.
    pub records: u64,
    /// Bytes holding data: up to the end of the last valid batch or
    /// damaged region (the rest of the file is zeros or unexamined).
    pub data_end: u64,
    /// The file's size.
    pub file_len: u64,
}

/// What recovery would cut from a partition: the log from the first damage
/// on (the damaged bytes and every batch after them, later segments
/// included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The file the cut starts in.
    pub path: PathBuf,
    /// Byte position of the cut in that file.
    pub position: u64,
    /// The first offset cut, when known.
    pub offset: Option<u64>,
    /// Batches removed: valid ones after the cut, and each damaged region.
    pub batches: u64,
    /// Bytes removed (valid and damaged).
    pub bytes: u64,
}

/// The result of [`check_partition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionCheck {
    /// The partition directory.
    pub dir: PathBuf,
    /// What its recovery point file says.
    pub shutdown: Shutdown,
    /// The segments, in offset order.
    pub segments: Vec<SegmentSummary>,
    /// Every problem found, in log order.
    pub issues: Vec<Issue>,
    /// First offset held (the first segment's base).
    pub start_offset: u64,
    /// Offset after the last valid batch.
    pub end_offset: u64,
    /// What recovery would cut at the next open, when anything.
    pub cut: Option<Cut>,
}

impl PartitionCheck {
    /// Valid batches.
    pub fn batches(&self) -> u64 {
        self.segments.iter().map(|s| s.batches).sum()
    }

    /// Records in the valid batches.
    pub fn records(&self) -> u64 {
        self.segments.iter().map(|s| s.records).sum()
    }

    /// Problems of severity `s`.
    pub fn count(&self, s: Severity) -> usize {
        self.issues.iter().filter(|i| i.severity == s).count()
    }

    /// Whether no error was found (warnings allowed).
    pub fn is_ok(&self) -> bool {
        self.count(Severity::Error) == 0
    }
}

/// Options of [`check_partition`].
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// The topic's `max_message_bytes` (the largest batch): how far past
    /// the active segment's end marker a partial write can reach. Default
    /// 1 MiB.
    pub max_batch_bytes: Option<usize>,
}

/// Checks the partition directory `dir` without changing anything (see the
/// [module documentation](self)). `progress` is called with the bytes of
/// the segment files passed over as the walk goes.
///
/// # Errors
/// An I/O error when the directory cannot be listed. Damaged or unreadable
/// segment files are [`Issue`]s, not errors.
pub fn check_partition(
    dir: &Path,
    options: CheckOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<PartitionCheck> {
    let meta = std::fs::metadata(dir).ctx(|| format!("reading {}", dir.display()))?;
    if !meta.is_dir() {
        return Err(Error::io(
            format!("checking {}", dir.display()),
            io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
        ));
    }
    let bases = segment_bases(dir)?;
    let (shutdown, point_issue) = read_shutdown(dir);
    let mut w = Walk {
        dir: dir.to_owned(),
        shutdown,
        end_window: options.max_batch_bytes.unwrap_or(DEFAULT_END_WINDOW) as u64,
        expected: None,
        end: None,
        issues: Vec::new(),
        open: None,
        segments: Vec::new(),
        cut: None,
        progress,
    };
    w.issues.extend(point_issue);
    for (i, &base) in bases.iter().enumerate() {
        let active = i + 1 == bases.len();
        if let (Some(e), Some(prev)) = (w.expected, w.segments.last()) {
            if e != base {
                let (path, position) = (prev.path.clone(), prev.data_end);
                w.push(Issue {
                    severity: Severity::Error,
                    kind: IssueKind::Chain,
                    path,
                    position,
                    len: 0,
                    expected_offset: Some(e),
                    stored_offsets: None,
                    resumed: None,
                    reason: format!(
                        "the segment ends at offset {e} but the next one starts at {base}"
                    ),
                });
            }
        }
        w.expected = Some(base);
        w.end = w.end.max(Some(base));
        w.segment(base, active);
    }
    let end_offset = w.end.unwrap_or(0);
    if let Shutdown::Clean { offset } | Shutdown::Unclean { offset } = w.shutdown {
        if offset > end_offset {
            let path = dir.join(checkpoint::FILE);
            w.issues.push(Issue {
                severity: Severity::Error,
                kind: IssueKind::Lost,
                path,
                position: 0,
                len: 0,
                expected_offset: Some(end_offset),
                stored_offsets: None,
                resumed: None,
                reason: format!(
                    "offsets {end_offset} to {} were flushed (recovery point {offset}) \
                     but the log ends at {end_offset}",
                    offset - 1
                ),
            });
        }
    }
    let mut cut = w.cut.take();
    if let Some(c) = &mut cut {
        let mut counting = false;
        for s in &w.segments {
            if s.path == c.path {
                counting = true;
                c.bytes += s.data_end.saturating_sub(c.position);
            } else if counting {
                c.bytes += s.data_end;
            }
        }
    }
    Ok(PartitionCheck {
        dir: dir.to_owned(),
        shutdown,
        start_offset: bases.first().copied().unwrap_or(0),
        end_offset,
        segments: w.segments,
        issues: w.issues,
        cut,
    })
}

/// Marks the partition directories `partitions` of the data directory
/// `data` so that their next open checks every batch, from the first
/// segment on, as after a crash before anything was flushed: rewrites
/// each one's `recovery.point` as "not closed cleanly, nothing flushed"
/// (a partition without the file is checked in full anyway). Takes the
/// directory's lock while it writes and lets it go before it returns.
/// Returns how many files were rewritten.
///
/// Any recovery point is safe (a lower one only means a longer check), but
/// the next open can no longer count records that were flushed and are
/// missing ([`RecoveryStats::lost_records`](crate::RecoveryStats)).
///
/// # Errors
/// [`Error::Locked`] when another handle holds the directory;
/// [`Error::InvalidArgument`] for a partition directory outside `data`; an
/// I/O error when a file cannot be written.
pub fn request_full_recovery(data: &Path, partitions: &[PathBuf]) -> Result<usize> {
    let topics = data.join("topics");
    for p in partitions {
        if p.parent().and_then(Path::parent) != Some(topics.as_path()) {
            return Err(Error::InvalidArgument(format!(
                "{} is not a partition directory of {}",
                p.display(),
                data.display()
            )));
        }
    }
    let _lock = crate::broker::take_lock(data, 0o600)?;
    // The next open must read every partition's point, not the summary of
    // the last clean close (partitions then open at the broker's open).
    crate::partition_handle::forget(data)?;
    let bytes = checkpoint::encode(checkpoint::RecoveryPoint {
        offset: 0,
        clean: false,
    });
    let mut rewritten = 0;
    for p in partitions {
        let path = p.join(checkpoint::FILE);
        let file = match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
        };
        let meta = file
            .metadata()
            .ctx(|| format!("reading {}", path.display()))?;
        if !meta.is_file() {
            continue; // not a recovery point: the open checks everything
        }
        file.set_len(bytes.len() as u64)
            .and_then(|()| file.write_all_at(&bytes, 0))
            .and_then(|()| file.sync_data())
            .ctx(|| format!("writing {}", path.display()))?;
        rewritten += 1;
    }
    Ok(rewritten)
}

/// Reads `recovery.point` without opening it for writing.
fn read_shutdown(dir: &Path) -> (Shutdown, Option<Issue>) {
    let path = dir.join(checkpoint::FILE);
    let damaged = |why: String| {
        let issue = Issue {
            severity: Severity::Warning,
            kind: IssueKind::RecoveryPoint,
            path: path.clone(),
            position: 0,
            len: 0,
            expected_offset: None,
            stored_offsets: None,
            resumed: None,
            reason: format!("{why}: the next open checks every batch"),
        };
        (Shutdown::Damaged, Some(issue))
    };
    let file = match open_read_only(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return (Shutdown::Unknown, None),
        Err(e) => return damaged(format!("cannot be read ({e})")),
    };
    let mut buf = [0u8; 64];
    let n = match file.metadata() {
        Ok(m) if !m.is_file() => return damaged("not a regular file".to_owned()),
        Ok(m) if m.len() > buf.len() as u64 => {
            return damaged(format!("{} bytes long", m.len()));
        }
        Ok(_) => match read_full_at(&file, &mut buf, 0) {
            Ok(n) => n,
            Err(e) => return damaged(format!("cannot be read ({e})")),
        },
        Err(e) => return damaged(format!("cannot be read ({e})")),
    };
    match checkpoint::decode(&buf[..n]) {
        Some(p) if p.clean => (Shutdown::Clean { offset: p.offset }, None),
        Some(p) => (Shutdown::Unclean { offset: p.offset }, None),
        None => damaged("damaged (size, magic, version or CRC)".to_owned()),
    }
}

/// Opens `path` read-only; `O_NONBLOCK` so that a FIFO in its place cannot
/// block (no effect on a regular file).
fn open_read_only(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

fn read_full_at(file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], pos + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The walk over a partition's segments.
struct Walk<'a> {
    dir: PathBuf,
    shutdown: Shutdown,
    end_window: u64,
    /// The base offset the next batch must have; `None` right after
    /// damage, where any valid batch resumes the chain.
    expected: Option<u64>,
    /// Offset after the last valid batch.
    end: Option<u64>,
    issues: Vec<Issue>,
    /// The damaged region being walked over: an index in `issues`.
    open: Option<usize>,
    segments: Vec<SegmentSummary>,
    cut: Option<Cut>,
    progress: &'a mut dyn FnMut(u64),
}

/// What the scan after damage found.
struct Resync {
    /// A valid batch: its position.
    batch: Option<u64>,
    /// Position after the last non-zero byte before it (or before the end
    /// of the scan), when there is one.
    data_end: Option<u64>,
}

impl Walk<'_> {
    fn push(&mut self, issue: Issue) {
        if self.cut.is_none() && issue.kind.cut_by_recovery() {
            self.cut = Some(Cut {
                path: issue.path.clone(),
                position: issue.position,
                offset: issue.expected_offset,
                batches: 0,
                bytes: 0,
            });
        }
        if matches!(issue.kind, IssueKind::Batch | IssueKind::TornTail) {
            self.cut_batch();
        }
        self.issues.push(issue);
    }

    fn cut_batch(&mut self) {
        if let Some(c) = &mut self.cut {
            c.batches += 1;
        }
    }

    /// Starts a damaged region at `pos`, unless one is open already (the
    /// damage goes on).
    fn damage(&mut self, path: &Path, pos: u64, reason: String, stored: Option<(u64, u64)>) {
        if self.open.is_some() {
            return;
        }
        self.push(Issue {
            severity: Severity::Error,
            kind: IssueKind::Batch,
            path: path.to_owned(),
            position: pos,
            len: 0,
            expected_offset: self.expected,
            stored_offsets: stored,
            resumed: None,
            reason,
        });
        self.open = Some(self.issues.len() - 1);
        self.expected = None;
    }

    fn segment(&mut self, base: u64, active: bool) {
        let path = super::follow::segment_log_path(&self.dir, base);
        let mut summary = SegmentSummary {
            path: path.clone(),
            base,
            batches: 0,
            records: 0,
            data_end: 0,
            file_len: 0,
        };
        let opened = SegmentFile::open(&self.dir, base)
            .and_then(|s| s.file_len().map(|n| (s, n)))
            .and_then(|(s, n)| {
                let f = open_read_only(&path).ctx(|| format!("opening {}", path.display()))?;
                Ok((s, n, f))
            });
        let (mut seg, file_len, file) = match opened {
            Ok(x) => x,
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                // Removed since the listing (retention, next to a live
                // owner): nothing to check, and the chain starts again.
                self.expected = None;
                return;
            }
            Err(e) => {
                self.unreadable(&path, 0, &e);
                self.expected = None;
                self.segments.push(summary);
                return;
            }
        };
        summary.file_len = file_len;
        let mut pos = 0u64;
        let mut data_end = 0u64;
        loop {
            let probe = match seg.probe(pos) {
                Ok(p) => p,
                Err(e) => {
                    self.unreadable(&path, pos, &e);
                    break;
                }
            };
            match probe {
                Probe::Batch(b) => {
                    let h = *b.header();
                    let total = h.total_len() as u64;
                    if let Some(i) = self.open.take() {
                        let issue = &mut self.issues[i];
                        issue.len = pos - issue.position;
                        issue.resumed = Some((pos, h.base_offset));
                    } else if let Some(e) = self.expected.filter(|&e| e != h.base_offset) {
                        self.damage(
                            &path,
                            pos,
                            format!(
                                "batch base offset out of sequence (expected {e}, found {})",
                                h.base_offset
                            ),
                            Some((h.base_offset, h.last_offset())),
                        );
                        pos += total;
                        data_end = pos;
                        (self.progress)(total);
                        continue;
                    }
                    self.cut_batch();
                    if let Err(reason) = decode_records(&b) {
                        self.issues.push(Issue {
                            severity: Severity::Error,
                            kind: IssueKind::Records,
                            path: path.clone(),
                            position: pos,
                            len: total,
                            expected_offset: Some(h.base_offset),
                            stored_offsets: Some((h.base_offset, h.last_offset())),
                            resumed: None,
                            reason: reason.to_owned(),
                        });
                    }
                    summary.batches += 1;
                    summary.records += u64::from(h.record_count);
                    self.expected = Some(h.next_offset());
                    self.end = self.expected;
                    pos += total;
                    data_end = pos;
                    (self.progress)(total);
                }
                Probe::End => {
                    // A zero length field (or the end of the file): the end
                    // of the data, unless non-zero bytes follow.
                    let limit = if active {
                        file_len.min(pos.saturating_add(self.end_window))
                    } else {
                        file_len
                    };
                    match last_nonzero(&file, pos, limit) {
                        Ok(None) => break,
                        Ok(Some(_)) => {}
                        Err(e) => {
                            let e = Error::io(format!("reading {}", path.display()), e);
                            self.unreadable(&path, pos, &e);
                            break;
                        }
                    }
                    self.damage(
                        &path,
                        pos,
                        "non-zero bytes after the end marker (a zero length field)".to_owned(),
                        None,
                    );
                    match self.resync(&mut seg, &file, &path, pos, file_len) {
                        Some(Resync { batch: Some(r), .. }) => pos = r,
                        Some(Resync { data_end: e, .. }) => {
                            data_end = e.unwrap_or(pos).max(data_end);
                            break;
                        }
                        None => break,
                    }
                }
                Probe::Invalid { reason, header, .. } => {
                    let stored = header.map(|h| {
                        (
                            h.base_offset,
                            h.base_offset.saturating_add(u64::from(h.last_offset_delta)),
                        )
                    });
                    self.damage(&path, pos, reason.to_owned(), stored);
                    // Resync by the length field, else by scanning.
                    let claimed = header.map(|h| h.length).or_else(|| length_at(&file, pos));
                    let next = claimed
                        .filter(|&l| l >= MIN_LENGTH)
                        .map(|l| pos + (LENGTH_PREFIX as u64) + u64::from(l))
                        .filter(|&n| n <= file_len);
                    if let Some(n) = next {
                        if matches!(seg.probe(n), Ok(Probe::Batch(_))) {
                            (self.progress)(n - pos);
                            pos = n;
                            data_end = n;
                            continue;
                        }
                    }
                    match self.resync(&mut seg, &file, &path, pos, file_len) {
                        Some(Resync { batch: Some(r), .. }) => {
                            (self.progress)(r - pos);
                            pos = r;
                            data_end = r;
                        }
                        Some(Resync { data_end: e, .. }) => {
                            data_end = e.unwrap_or(pos + 1);
                            break;
                        }
                        None => break,
                    }
                }
            }
        }
        (self.progress)(file_len.saturating_sub(pos));
        summary.data_end = data_end.max(pos);
        if let Some(i) = self.open.take() {
            // Damage that reaches the end of the data.
            let torn = active && self.torn_tail_allowed(self.issues[i].expected_offset);
            let issue = &mut self.issues[i];
            issue.len = summary.data_end.saturating_sub(issue.position);
            if torn {
                issue.kind = IssueKind::TornTail;
                issue.severity = Severity::Warning;
            }
        }
        self.segments.push(summary);
    }

    /// Whether damage at the end of the active segment where offset
    /// `expected` should start can be a torn tail.
    fn torn_tail_allowed(&self, expected: Option<u64>) -> bool {
        match self.shutdown {
            Shutdown::Clean { .. } => false,
            Shutdown::Unclean { offset } => expected.is_none_or(|e| e >= offset),
            Shutdown::Unknown | Shutdown::Damaged => true,
        }
    }

    fn unreadable(&mut self, path: &Path, pos: u64, e: &Error) {
        self.issues.push(Issue {
            severity: Severity::Error,
            kind: IssueKind::Unreadable,
            path: path.to_owned(),
            position: pos,
            len: 0,
            expected_offset: self.expected,
            stored_offsets: None,
            resumed: None,
            reason: e.to_string(),
        });
    }

    /// Looks for the next valid batch after the damage at `damage` (on the
    /// batch alignment) up to the end of the file, noting the last non-zero
    /// byte on the way. `None` after an I/O error (then reported).
    fn resync(
        &mut self,
        seg: &mut SegmentFile,
        file: &File,
        path: &Path,
        damage: u64,
        file_len: u64,
    ) -> Option<Resync> {
        let mut chunk_start = damage;
        let mut data_end = None;
        let mut buf = vec![0u8; SCAN_CHUNK + HEADER_LEN];
        while chunk_start < file_len {
            let got = match read_full_at(file, &mut buf, chunk_start) {
                Ok(n) => n,
                Err(e) => {
                    let e = Error::io(format!("reading {}", path.display()), e);
                    self.unreadable(path, chunk_start, &e);
                    return None;
                }
            };
            if got == 0 {
                break;
            }
            let scan = got.min(SCAN_CHUNK);
            let mut off = 0;
            while off < scan {
                let p = chunk_start + off as u64;
                let b = &buf[off..got];
                if p > damage && plausible_header(b, file_len - p) {
                    if let Ok(Probe::Batch(_)) = seg.probe(p) {
                        return Some(Resync {
                            batch: Some(p),
                            data_end,
                        });
                    }
                }
                if b[0] != 0 {
                    data_end = Some(p + 1);
                }
                off += 1;
            }
            chunk_start += scan as u64;
        }
        Some(Resync {
            batch: None,
            data_end,
        })
    }
}

/// Whether `b` (bytes at some position, `room` bytes left in the file)
/// could start a batch: a length in range and a format version.
fn plausible_header(b: &[u8], room: u64) -> bool {
    if b.len() < LENGTH_PREFIX + 5 {
        return false;
    }
    let length = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    length >= MIN_LENGTH
        && LENGTH_PREFIX as u64 + u64::from(length) <= room
        && (MAGIC..=MAX_MAGIC).contains(&b[16])
}

/// The length field at `pos`, when its bytes can be read.
fn length_at(file: &File, pos: u64) -> Option<u32> {
    let mut b = [0u8; LENGTH_PREFIX];
    match read_full_at(file, &mut b, pos) {
        Ok(LENGTH_PREFIX) => Some(u32::from_le_bytes([b[8], b[9], b[10], b[11]])),
        _ => None,
    }
}

/// Position after the last non-zero byte in `[from, to)` of `file`.
fn last_nonzero(file: &File, from: u64, to: u64) -> io::Result<Option<u64>> {
    let mut buf = vec![0u8; SCAN_CHUNK.min(to.saturating_sub(from) as usize)];
    let mut pos = from;
    let mut last = None;
    while pos < to {
        let want = buf.len().min((to - pos) as usize);
        let got = read_full_at(file, &mut buf[..want], pos)?;
        if got == 0 {
            break;
        }
        if let Some(i) = buf[..got].iter().rposition(|&x| x != 0) {
            last = Some(pos + i as u64 + 1);
        }
        pos += got as u64;
    }
    Ok(last)
}

/// Decodes (and decompresses) every record of a checked batch, as a reader
/// does.
fn decode_records(b: &FollowedBatch) -> std::result::Result<(), &'static str> {
    let h = b.header();
    let section = batch::records_section(b.bytes(), h, MAX_UNCOMPRESSED_LEN)?;
    let mut n = 0u32;
    for r in Records::in_section(&section, h) {
        if r?.offset_delta > h.last_offset_delta {
            return Err("record offset delta past the batch's last offset");
        }
        n += 1;
    }
    if n != h.record_count {
        return Err("fewer records than the record count");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
