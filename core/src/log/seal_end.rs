//! Where a sealed segment's data ends, for a process that opens a log other
//! processes write (shared mode), found without walking the segment.
//!
//! A writer that seals a segment appends a last time-index entry naming the
//! offset after the segment and the position where its data ends (see
//! [`super::Segment::seal`]), then trims the log file to that position (in
//! shared mode, up to the next page with zeros, see
//! [`super::segment::shared_sealed_len`]). A process opening the log takes
//! the entry when the files bear it out:
//! - it names the next segment's base offset;
//! - the log file is as long as a segment sealed with that much data;
//! - the batch headers from the offset index's last entry lead exactly to
//!   that position and that offset.
//!
//! Only those few headers are read, with `pread`: no page of the segment is
//! mapped in, so opening a partition costs the same whatever its sealed
//! segments hold. The segment's largest timestamp is the entry's; it is
//! checked against the batch headers when time retention or a time lookup
//! first asks (as for a segment opened in exclusive mode). When anything
//! does not hold, the caller walks every header instead.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::batch::{self, BatchHeader};
use super::follow::open_regular;
use super::index::{u32_at, OFFSET_ENTRY, TIME_ENTRY};
use super::segment::{segment_path, shared_sealed_len};

/// The most batch headers read after the offset index's last entry: the
/// index has an entry every few KiB of batches, so a sealed segment whose
/// end lies further needs the full walk (its index is not what a writer
/// leaves).
const MAX_HEADERS: usize = 4096;

/// What a sealed segment's seal entry says, once checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SealEnd {
    /// Where its data ends (bytes of the log file).
    pub end: usize,
    /// Its largest record timestamp, as its writer knew it.
    pub max_timestamp: i64,
}

/// The seal entry of the segment of `dir` based at `base`, whose log file
/// is `log_len` bytes long and which the segment based at `next_base`
/// follows, when the files bear it out (see the module doc).
pub(super) fn seal_end(dir: &Path, base: u64, next_base: u64, log_len: u64) -> Option<SealEnd> {
    let (ts, rel, end) = last_entry(&segment_path(dir, base, "tix"), TIME_ENTRY)
        .map(|b| (i64_at(&b, 0), u32_at(&b, 8), u64::from(u32_at(&b, 12))))?;
    if base.checked_add(u64::from(rel)) != Some(next_base) || end > log_len || end == 0 {
        return None;
    }
    let end_usize = usize::try_from(end).ok()?;
    if log_len != end && log_len != shared_sealed_len(end_usize) as u64 {
        return None;
    }
    let log = open_regular(&segment_path(dir, base, "log")).ok()?;
    // The walk starts at the offset index's last entry, or at the start.
    let from = last_entry(&segment_path(dir, base, "idx"), OFFSET_ENTRY)
        .map(|b| (u64::from(u32_at(&b, 4)), base + u64::from(u32_at(&b, 0))))
        .filter(|&(pos, _)| pos < end);
    let walked = from
        .and_then(|(pos, offset)| walk_to(&log, pos, offset, end))
        .or_else(|| walk_to(&log, 0, base, end));
    (walked == Some(next_base)).then_some(SealEnd {
        end: end_usize,
        max_timestamp: ts,
    })
}

/// Follows the batch headers of `log` from byte `pos` (a batch of base
/// offset `offset`) while they chain on; the offset after the last one
/// when they end exactly at byte `end`, else `None`.
fn walk_to(log: &File, mut pos: u64, mut offset: u64, end: u64) -> Option<u64> {
    let mut head = [0u8; batch::HEADER_LEN];
    for _ in 0..MAX_HEADERS {
        if pos == end {
            return Some(offset);
        }
        let want = usize::try_from((end - pos).min(head.len() as u64)).ok()?;
        let got = &mut head[..want];
        log.read_exact_at(got, pos).ok()?;
        let h = BatchHeader::parse(got)?;
        let total = h.total_len() as u64;
        if h.length < batch::MIN_LENGTH || h.base_offset != offset || total > end - pos {
            return None;
        }
        pos += total;
        offset = h
            .base_offset
            .checked_add(u64::from(h.last_offset_delta) + 1)?;
    }
    None
}

/// The last entry (`width` bytes) of the index file at `path`: `None` when
/// it cannot be read, holds none, or ends in an unused (zero) entry.
fn last_entry(path: &Path, width: usize) -> Option<Vec<u8>> {
    let file = open_regular(path).ok()?;
    let len = file.metadata().ok()?.len();
    let width_u64 = width as u64;
    if len < width_u64 {
        return None;
    }
    let at = (len / width_u64 - 1) * width_u64;
    let mut b = vec![0u8; width];
    file.read_exact_at(&mut b, at).ok()?;
    (!b.iter().all(|&x| x == 0)).then_some(b)
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    i64::from_le_bytes(w)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::log::test_util::write_at;
    use crate::{Broker, Config, ProducerConfig, Record, TopicConfig};

    /// A partition of `segment_bytes` segments holding `records` records
    /// of 20-110 bytes, written and closed in shared mode (or not): its
    /// directory and its segments' base offsets.
    fn sealed_log(
        dir: &Path,
        shared: bool,
        segment_bytes: u64,
        records: u32,
    ) -> (PathBuf, Vec<u64>) {
        let mq = Broker::open(dir, Config::default().prefault(false).shared(shared)).unwrap();
        mq.create_topic("t", TopicConfig::new(1).segment_bytes(segment_bytes))
            .unwrap();
        let p = mq.producer(ProducerConfig::default()).unwrap();
        for i in 0..records {
            let v = vec![b'a' + (i % 26) as u8; 20 + (i as usize * 7) % 90];
            let r = Record::new("t")
                .partition(0)
                .value(&v[..])
                .timestamp(1000 + i64::from(i));
            p.send(r).unwrap();
        }
        drop(p);
        mq.close().unwrap();
        let part = dir.join("topics").join("t").join("0");
        let mut bases: Vec<u64> = std::fs::read_dir(&part)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                name.strip_suffix(".log")?.parse().ok()
            })
            .collect();
        bases.sort_unstable();
        assert!(bases.len() >= 4, "{bases:?}");
        (part, bases)
    }

    fn log_len(dir: &Path, base: u64) -> u64 {
        std::fs::metadata(segment_path(dir, base, "log"))
            .unwrap()
            .len()
    }

    /// Every sealed segment's seal entry checks out, in either mode; it
    /// names the end of the data (the zeros after it, in shared mode, up
    /// to the page) and the segment's largest timestamp.
    #[test]
    fn every_sealed_segment_ends_where_its_seal_entry_says() {
        for shared in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let (part, bases) = sealed_log(dir.path(), shared, 4096, 300);
            for pair in bases.windows(2) {
                let (base, next) = (pair[0], pair[1]);
                let len = log_len(&part, base);
                let s = seal_end(&part, base, next, len).unwrap();
                let want_len = if shared {
                    shared_sealed_len(s.end) as u64
                } else {
                    s.end as u64
                };
                assert_eq!(len, want_len, "segment {base}");
                let log = File::open(segment_path(&part, base, "log")).unwrap();
                assert_eq!(walk_to(&log, 0, base, s.end as u64), Some(next));
                // Records base..next have timestamps 1000 + offset.
                assert_eq!(s.max_timestamp, 1000 + next as i64 - 1, "segment {base}");
            }
        }
    }

    /// The entry is refused whenever the files do not bear it out; an
    /// offset index that points nowhere only costs a walk from the start.
    #[test]
    fn files_that_do_not_bear_the_entry_out_refuse_it() {
        let dir = tempfile::tempdir().unwrap();
        let (part, bases) = sealed_log(dir.path(), true, 32 << 10, 2000);
        let (base, next) = (bases[1], bases[2]);
        let len = log_len(&part, base);
        let tix = segment_path(&part, base, "tix");
        let idx = segment_path(&part, base, "idx");
        let log = segment_path(&part, base, "log");
        let good = seal_end(&part, base, next, len).unwrap();
        let tix_bytes = std::fs::read(&tix).unwrap();
        let last = tix_bytes.len() - TIME_ENTRY;
        let restore = || std::fs::write(&tix, &tix_bytes).unwrap();

        // Another next segment.
        assert_eq!(seal_end(&part, base, next + 1, len), None);
        // The entry naming another offset.
        write_at(&tix, last as u64 + 8, &(next - base + 1).to_le_bytes()[..4]);
        assert_eq!(seal_end(&part, base, next, len), None);
        restore();
        // The entry naming where the last batch starts, not where it ends
        // (within the same page: only the offsets tell).
        let log_file = File::open(&log).unwrap();
        let (mut pos, mut starts) = (0u64, Vec::new());
        while pos < good.end as u64 {
            starts.push(pos);
            let mut head = [0u8; batch::HEADER_LEN];
            let n = (good.end as u64 - pos).min(head.len() as u64) as usize;
            log_file.read_exact_at(&mut head[..n], pos).unwrap();
            pos += BatchHeader::parse(&head[..n]).unwrap().total_len() as u64;
        }
        let last_start = *starts.last().unwrap() as u32;
        write_at(&tix, last as u64 + 12, &last_start.to_le_bytes());
        assert_eq!(seal_end(&part, base, next, len), None);
        restore();
        // No time index, or an empty one.
        std::fs::write(&tix, b"").unwrap();
        assert_eq!(seal_end(&part, base, next, len), None);
        std::fs::remove_file(&tix).unwrap();
        assert_eq!(seal_end(&part, base, next, len), None);
        restore();
        // A log file longer than a sealed one with that much data.
        assert_eq!(seal_end(&part, base, next, len + 4096), None);
        // A batch header between the index's last entry and the end with
        // another base offset.
        let second_last = starts[starts.len() - 2];
        let mut head = [0u8; 8];
        log_file.read_exact_at(&mut head, second_last).unwrap();
        write_at(
            &log,
            second_last,
            &(u64::from_le_bytes(head) + 1).to_le_bytes(),
        );
        assert_eq!(seal_end(&part, base, next, len), None);
        write_at(&log, second_last, &head);
        assert_eq!(seal_end(&part, base, next, len), Some(good));
        // An offset index whose last entry points nowhere: the walk starts
        // at the segment's start instead.
        let idx_len = std::fs::metadata(&idx).unwrap().len();
        assert!(
            idx_len >= OFFSET_ENTRY as u64,
            "the segment has index entries"
        );
        write_at(
            &idx,
            idx_len - OFFSET_ENTRY as u64,
            &[9, 0, 0, 0, 3, 0, 0, 0],
        );
        assert_eq!(seal_end(&part, base, next, len), Some(good));
    }
}
