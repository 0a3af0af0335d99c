//! Where a copy resumes, read from what earlier copies wrote: the headers
//! of the last records of each destination partition.

use std::collections::HashMap;

use super::{
    MIRROR_COPIED_HEADER, MIRROR_OFFSET_HEADER, MIRROR_PARTITION_HEADER, MIRROR_PROGRESS_HEADER,
};
use crate::error::Result;
use crate::message::Message;

/// What a copied record says of where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Origin {
    /// Its source partition: `None` for a copy that maps partitions one
    /// to one (the destination partition's own number).
    pub partition: Option<u32>,
    /// Its offset in the source partition.
    pub offset: u64,
    /// On the last record a write put in a destination partition, when
    /// partitions map by key: for each source partition, the offset below
    /// which every record was in the destination when that write began.
    pub progress: Option<Vec<u64>>,
    /// On such a record: for source partitions a cut copy left records of
    /// in this destination partition above `progress`, the last of their
    /// offsets here (see [`MIRROR_COPIED_HEADER`]).
    pub copied: Vec<(u32, u64)>,
}

impl Origin {
    /// Whether this record ends what one write put in its partition, or
    /// is a one-to-one copy: either way, it says how far its source
    /// partitions had been copied.
    fn is_anchor(&self) -> bool {
        self.partition.is_none() || self.progress.is_some()
    }
}

fn header<'h>(headers: &'h [crate::Header], key: &str) -> Option<&'h str> {
    headers
        .iter()
        .rev()
        .find(|h| h.key == key)
        .and_then(|h| std::str::from_utf8(&h.value).ok())
}

/// Where `m` came from, if a copy wrote it.
pub(super) fn origin(m: &Message) -> Option<Origin> {
    let headers = m.headers();
    let offset = header(&headers, MIRROR_OFFSET_HEADER)?.parse().ok()?;
    let partition = match header(&headers, MIRROR_PARTITION_HEADER) {
        Some(p) => Some(p.parse().ok()?),
        None => None,
    };
    let progress = match header(&headers, MIRROR_PROGRESS_HEADER) {
        Some(v) => Some(
            v.split(',')
                .map(str::parse)
                .collect::<std::result::Result<Vec<u64>, _>>()
                .ok()?,
        ),
        None => None,
    };
    let copied = match header(&headers, MIRROR_COPIED_HEADER) {
        Some(v) => v
            .split(',')
            .map(|e| {
                let (p, o) = e.split_once(':')?;
                Some((p.parse().ok()?, o.parse().ok()?))
            })
            .collect::<Option<Vec<(u32, u64)>>>()?,
        None => Vec::new(),
    };
    Some(Origin {
        partition,
        offset,
        progress,
        copied,
    })
}

/// The messages of a destination partition whose offsets run from
/// `start` to about `end`, read back from the end until `enough` says
/// so or `start` is reached: the tail first, then a window four times
/// wider each time. `read(from, upto)` returns the messages from `from`
/// on, up to `upto` or further (a cluster may start at the next batch
/// past `from`: what a window misses at its start, the next one reads);
/// what a window returns that an earlier one had is dropped.
fn read_back(
    start: u64,
    end: u64,
    read: &mut dyn FnMut(u64, u64) -> Result<Vec<Message>>,
    enough: &dyn Fn(&[Message]) -> bool,
) -> Result<Vec<Message>> {
    let mut width = 16u64;
    let mut upto = end;
    let mut tail: Vec<Message> = Vec::new();
    while upto > start {
        let from = upto.saturating_sub(width).max(start);
        let had = tail.first().map_or(u64::MAX, Message::offset);
        let mut window: Vec<Message> = read(from, upto)?
            .into_iter()
            .filter(|m| m.offset() < had)
            .collect();
        window.append(&mut tail);
        tail = window;
        if enough(&tail) {
            break;
        }
        upto = from;
        width = width.saturating_mul(4);
    }
    Ok(tail)
}

/// The last source offset a one-to-one copy wrote into destination
/// partition `d` (offsets `start` to about `end`), read by `read` (see
/// [`read_back`]).
pub(super) fn one_to_one(
    d: u32,
    start: u64,
    end: u64,
    read: &mut dyn FnMut(u64, u64) -> Result<Vec<Message>>,
) -> Result<Option<u64>> {
    let mine = |o: &Origin| o.partition.is_none_or(|p| p == d);
    let tail = read_back(start, end, read, &|msgs| {
        msgs.iter().filter_map(origin).any(|o| mine(&o))
    })?;
    Ok(tail
        .iter()
        .filter_map(origin)
        .filter(|o| mine(o))
        .map(|o| o.offset)
        .max())
}

/// Where a copy that maps partitions by key resumes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ByKey {
    /// Per source partition: every record below this offset is in the
    /// destination.
    pub low: Vec<u64>,
    /// Per (source partition, destination partition): the last source
    /// offset found there past `low`'s evidence. A record of the source
    /// partition that maps to that destination partition, at or below
    /// it, is there already.
    pub last: HashMap<(u32, u32), u64>,
}

impl ByKey {
    /// Nothing known yet, for `sources` source partitions.
    pub fn new(sources: u32) -> ByKey {
        ByKey {
            low: vec![0; sources as usize],
            last: HashMap::new(),
        }
    }

    /// For a write that begins at `low` (every source partition's next
    /// offset to copy), the [`MIRROR_COPIED_HEADER`] value its last record
    /// in destination partition `d` carries: what a cut copy left there
    /// above `low`, `None` when nothing.
    pub fn copied_above(&self, d: u32, low: &[u64]) -> Option<String> {
        let mut above: Vec<(u32, u64)> = self
            .last
            .iter()
            .filter(|&(&(p, dd), &o)| dd == d && o >= low.get(p as usize).copied().unwrap_or(0))
            .map(|(&(p, _), &o)| (p, o))
            .collect();
        if above.is_empty() {
            return None;
        }
        above.sort_unstable();
        let entries: Vec<String> = above.iter().map(|(p, o)| format!("{p}:{o}")).collect();
        Some(entries.join(","))
    }

    /// Whether the record at `offset` of source partition `p`, mapped to
    /// destination partition `d`, is in the destination already.
    pub fn copied(&self, p: u32, d: u32, offset: u64) -> bool {
        offset < self.low.get(p as usize).copied().unwrap_or(0)
            || self.last.get(&(p, d)).is_some_and(|&o| offset <= o)
    }

    /// Learns from destination partition `d` (offsets `start` to about
    /// `end`, read by `read`) what was copied into it.
    ///
    /// Every write of such a copy waits for the destination's
    /// acknowledgement before the next, and its last record in each
    /// destination partition carries the progress of every source
    /// partition when it began (records below it were acknowledged).
    /// So the largest progress over all destination partitions is a
    /// point below which everything is copied, and the records past it
    /// that are in the destination were written by the last write there
    /// or by writes cut short: the records after the partition's last
    /// anchor, and the group that anchor ends (back to the anchor before
    /// it). A one-to-one copy's record is an anchor too: its partition's
    /// records up to it are all there.
    pub fn learn(
        &mut self,
        d: u32,
        start: u64,
        end: u64,
        read: &mut dyn FnMut(u64, u64) -> Result<Vec<Message>>,
    ) -> Result<()> {
        let tail = Self::tail(start, end, read)?;
        self.absorb(d, &tail);
        Ok(())
    }

    /// The part of a destination partition [`ByKey::learn`] reads: back
    /// to its second-to-last anchor.
    pub fn tail(
        start: u64,
        end: u64,
        read: &mut dyn FnMut(u64, u64) -> Result<Vec<Message>>,
    ) -> Result<Vec<Message>> {
        read_back(start, end, read, &|msgs| {
            msgs.iter()
                .filter_map(origin)
                .filter(Origin::is_anchor)
                .count()
                >= 2
        })
    }

    /// Learns from `tail`, read from destination partition `d` by
    /// [`ByKey::tail`].
    pub fn absorb(&mut self, d: u32, tail: &[Message]) {
        for o in tail.iter().filter_map(origin) {
            let p = o.partition.unwrap_or(d);
            if let Some(progress) = &o.progress {
                for (low, &q) in self.low.iter_mut().zip(progress) {
                    *low = (*low).max(q);
                }
            }
            for &(q, offset) in &o.copied {
                let last = self.last.entry((q, d)).or_insert(offset);
                *last = (*last).max(offset);
            }
            if o.partition.is_none() {
                if let Some(low) = self.low.get_mut(p as usize) {
                    *low = (*low).max(o.offset + 1);
                }
            }
            let last = self.last.entry((p, d)).or_insert(o.offset);
            *last = (*last).max(o.offset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Header;

    fn copy(offset: u64, headers: &[(&str, String)]) -> Message {
        let mut h: Vec<Header> = headers
            .iter()
            .map(|(k, v)| Header::new(*k, v.clone()))
            .collect();
        h.push(Header::new("app", "x"));
        let topic: std::sync::Arc<str> = "t".into();
        Message::from_fields(&topic, 0, offset, 0, None, Some(b"v"), &h)
    }

    /// A destination partition as a vector of messages, read as a copy
    /// reads one (from an offset to the end).
    fn reader(msgs: &[Message]) -> impl FnMut(u64, u64) -> Result<Vec<Message>> + '_ {
        move |from, _| {
            Ok(msgs
                .iter()
                .filter(|m| m.offset() >= from)
                .cloned()
                .collect())
        }
    }

    #[test]
    fn the_origin_of_a_copy_is_read_from_its_headers() {
        let m = copy(
            7,
            &[
                (MIRROR_OFFSET_HEADER, "41".into()),
                (MIRROR_PARTITION_HEADER, "2".into()),
                (MIRROR_PROGRESS_HEADER, "3,0,40".into()),
            ],
        );
        assert_eq!(
            origin(&m),
            Some(Origin {
                partition: Some(2),
                offset: 41,
                progress: Some(vec![3, 0, 40]),
                copied: Vec::new(),
            })
        );
        assert_eq!(origin(&copy(0, &[])), None);
        assert_eq!(
            origin(&copy(0, &[(MIRROR_OFFSET_HEADER, "x".into())])),
            None
        );
        assert_eq!(
            origin(&copy(
                0,
                &[
                    (MIRROR_OFFSET_HEADER, "1".into()),
                    (MIRROR_PROGRESS_HEADER, "1,,2".into())
                ]
            )),
            None
        );
    }

    #[test]
    fn a_one_to_one_copy_resumes_after_its_last_record_far_back() {
        let mut msgs: Vec<Message> = (0..5)
            .map(|i| copy(i, &[(MIRROR_OFFSET_HEADER, (100 + i).to_string())]))
            .collect();
        // Records another writer appended after the copy's.
        msgs.extend((5..1000).map(|i| copy(i, &[])));
        let last = one_to_one(0, 0, 1000, &mut reader(&msgs)).unwrap();
        assert_eq!(last, Some(104));
        assert_eq!(one_to_one(0, 0, 0, &mut reader(&[])).unwrap(), None);
    }

    #[test]
    fn a_copy_by_key_learns_the_progress_and_what_a_cut_write_left() {
        let rec = |dest_offset: u64, p: u32, o: u64, progress: Option<&str>| {
            let mut h = vec![
                (MIRROR_OFFSET_HEADER, o.to_string()),
                (MIRROR_PARTITION_HEADER, p.to_string()),
            ];
            if let Some(v) = progress {
                h.push((MIRROR_PROGRESS_HEADER, v.to_string()));
            }
            copy(dest_offset, &h)
        };
        // Destination partition 0: a write that began at (0, 0) ended;
        // then a write that began at (2, 1) ended; then a write cut short
        // left source 1's offset 3.
        let d0 = vec![
            rec(0, 0, 0, None),
            rec(1, 0, 1, Some("0,0")),
            rec(2, 1, 1, None),
            rec(3, 0, 2, Some("2,1")),
            rec(4, 1, 3, None),
        ];
        // Destination partition 1: one write that began at (2, 1) ended.
        let d1 = vec![rec(0, 1, 0, Some("0,0")), rec(1, 1, 2, Some("2,1"))];
        let mut k = ByKey::new(2);
        k.learn(0, 0, 5, &mut reader(&d0)).unwrap();
        k.learn(1, 0, 2, &mut reader(&d1)).unwrap();
        assert_eq!(k.low, vec![2, 1]);
        assert!(k.copied(1, 0, 3), "the cut write's record");
        assert!(!k.copied(1, 0, 4));
        assert!(k.copied(1, 1, 2));
        assert!(!k.copied(1, 1, 3), "source 1 offset 3 went to 0, not 1");
        assert!(!k.copied(0, 1, 2));
        assert!(k.copied(0, 0, 2));
    }

    #[test]
    fn what_a_cut_write_left_is_known_after_later_writes_bury_it() {
        let rec = |dest_offset: u64, p: u32, o: u64, progress: &str, copied: Option<&str>| {
            let mut h = vec![
                (MIRROR_OFFSET_HEADER, o.to_string()),
                (MIRROR_PARTITION_HEADER, p.to_string()),
                (MIRROR_PROGRESS_HEADER, progress.to_string()),
            ];
            if let Some(c) = copied {
                h.push((MIRROR_COPIED_HEADER, c.to_string()));
            }
            copy(dest_offset, &h)
        };
        // A write that began at (92, 0) put source 0's 92-97 in
        // destination partition 0 and was cut short before its records
        // for partition 1. The copy that resumed put 20 writes of source 1
        // there before it read source 0 again, each saying what the cut
        // write left above its starting point.
        let mut d0 = vec![rec(0, 0, 97, "92,0", None)];
        d0.extend((0..20).map(|i| rec(1 + i, 1, i, &format!("92,{i}"), Some("0:97"))));
        let mut k = ByKey::new(2);
        k.learn(0, 0, d0.len() as u64, &mut reader(&d0)).unwrap();
        assert_eq!(k.low, vec![92, 19]);
        assert!(k.copied(0, 0, 92));
        assert!(k.copied(0, 0, 97));
        assert!(!k.copied(0, 0, 98));
        assert!(!k.copied(0, 1, 94), "source 0's 94 went to 1, not 0");
        // Without the header, later writes hide the cut write's records.
        let bare: Vec<Message> = (0..20)
            .map(|i| rec(1 + i, 1, i, &format!("92,{i}"), None))
            .collect();
        let mut blind = ByKey::new(2);
        blind.learn(0, 0, 21, &mut reader(&bare)).unwrap();
        assert!(!blind.copied(0, 0, 92));
    }

    #[test]
    fn a_damaged_copied_header_makes_no_origin() {
        let m = copy(
            3,
            &[
                (MIRROR_OFFSET_HEADER, "4".into()),
                (MIRROR_PARTITION_HEADER, "0".into()),
                (MIRROR_PROGRESS_HEADER, "1".into()),
                (MIRROR_COPIED_HEADER, "0:x".into()),
            ],
        );
        assert_eq!(origin(&m), None);
        let m = copy(
            3,
            &[
                (MIRROR_OFFSET_HEADER, "4".into()),
                (MIRROR_PARTITION_HEADER, "0".into()),
                (MIRROR_PROGRESS_HEADER, "1".into()),
                (MIRROR_COPIED_HEADER, "0:9,2:7".into()),
            ],
        );
        assert_eq!(origin(&m).unwrap().copied, vec![(0, 9), (2, 7)]);
    }
}
