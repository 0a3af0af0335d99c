//! Which application sequences a named producer has written: a floor below
//! which every sequence was written (to some partition), and the ranges
//! written above it.
//!
//! Each partition keeps one [`SeqRanges`] per named producer (in its
//! producer table and snapshot); [`crate::Producer::next_sequence`] merges
//! them. The floor is raised by the producer as its sequences become
//! contiguous, and ranges below it are dropped, so what is kept is the
//! sequences written out of order (those of sends still in flight). Past
//! [`MAX_RANGES`] ranges the oldest are forgotten: the merged answer can then
//! only be lower than the true one (more re-sending, which the dedup drops),
//! never higher.

use serde::{Deserialize, Serialize};

/// Most ranges kept above the floor, per producer and partition.
pub(crate) const MAX_RANGES: usize = 4096;

/// Sequences written: all of `0..floor`, plus `ranges` (sorted, disjoint,
/// not adjacent, each `[start, end)` and above the floor).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SeqRanges {
    /// Every sequence below this one was written (to some partition).
    pub floor: i64,
    /// Ranges `[start, end)` written above the floor, in order.
    pub ranges: Vec<(i64, i64)>,
}

impl SeqRanges {
    /// Empty, with every sequence below `floor` written.
    pub(crate) fn with_floor(floor: i64) -> SeqRanges {
        SeqRanges {
            floor: floor.max(0),
            ranges: Vec::new(),
        }
    }

    /// Whether `seq` is known to be written: below the floor, or in a range
    /// kept.
    pub(crate) fn contains(&self, seq: i64) -> bool {
        if seq < self.floor {
            return true;
        }
        let i = self.ranges.partition_point(|&(_, e)| e <= seq);
        self.ranges.get(i).is_some_and(|&(s, _)| s <= seq)
    }

    /// Adds `[start, end)`.
    pub(crate) fn insert(&mut self, start: i64, end: i64) {
        let start = start.max(self.floor);
        if start >= end {
            return;
        }
        // First range that ends at or after `start` (it may touch or overlap).
        let i = self.ranges.partition_point(|&(_, e)| e < start);
        // Ranges from i whose start is at or before `end` merge with the new one.
        let j = i + self.ranges[i..].partition_point(|&(s, _)| s <= end);
        let merged = if i < j {
            (start.min(self.ranges[i].0), end.max(self.ranges[j - 1].1))
        } else {
            (start, end)
        };
        self.ranges.splice(i..j, [merged]);
        self.absorb();
        if self.ranges.len() > MAX_RANGES {
            let drop = self.ranges.len() - MAX_RANGES;
            self.ranges.drain(..drop);
        }
    }

    /// Raises the floor to `floor` (never lowers it).
    pub(crate) fn raise_floor(&mut self, floor: i64) {
        if floor <= self.floor {
            return;
        }
        self.floor = floor;
        let keep = self.ranges.partition_point(|&(_, e)| e <= floor);
        self.ranges.drain(..keep);
        if let Some(first) = self.ranges.first_mut() {
            first.0 = first.0.max(floor);
        }
        self.absorb();
    }

    /// Moves a first range touching the floor into the floor.
    fn absorb(&mut self) {
        if let Some(&(s, e)) = self.ranges.first() {
            if s <= self.floor {
                self.floor = self.floor.max(e);
                self.ranges.remove(0);
            }
        }
    }

    /// Restores the invariants of a value read from a file.
    pub(crate) fn normalized(self) -> SeqRanges {
        let mut out = SeqRanges::with_floor(self.floor);
        let mut ranges = self.ranges;
        ranges.retain(|&(s, e)| s < e);
        // Bound what a hostile file can make us keep.
        if ranges.len() > MAX_RANGES {
            let drop = ranges.len() - MAX_RANGES;
            ranges.drain(..drop);
        }
        for (s, e) in ranges {
            out.insert(s, e);
        }
        out
    }

    /// The first sequence not written according to every set in `sets`
    /// together: the highest floor, advanced through the union of ranges.
    pub(crate) fn first_gap<'a>(sets: impl IntoIterator<Item = &'a SeqRanges>) -> i64 {
        let mut floor = 0;
        let mut all = Vec::new();
        for s in sets {
            floor = floor.max(s.floor);
            all.extend_from_slice(&s.ranges);
        }
        all.sort_unstable();
        for (s, e) in all {
            if s > floor {
                break;
            }
            floor = floor.max(e);
        }
        floor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_says_what_was_written() {
        let mut r = SeqRanges::with_floor(3);
        r.insert(5, 7);
        r.insert(9, 10);
        let written: Vec<i64> = (0..12).filter(|s| r.contains(*s)).collect();
        assert_eq!(written, vec![0, 1, 2, 5, 6, 9]);
    }

    #[test]
    fn ranges_merge_and_fold_into_the_floor() {
        let mut r = SeqRanges::default();
        r.insert(5, 6);
        r.insert(3, 4);
        r.insert(8, 10);
        assert_eq!(r.floor, 0);
        assert_eq!(r.ranges, vec![(3, 4), (5, 6), (8, 10)]);
        r.insert(4, 5);
        assert_eq!(r.ranges, vec![(3, 6), (8, 10)]);
        r.insert(0, 3);
        assert_eq!((r.floor, r.ranges.clone()), (6, vec![(8, 10)]));
        r.insert(2, 9);
        assert_eq!((r.floor, r.ranges.clone()), (10, vec![]));
    }

    #[test]
    fn raising_the_floor_drops_what_it_covers() {
        let mut r = SeqRanges::default();
        r.insert(3, 5);
        r.insert(7, 9);
        r.raise_floor(4);
        assert_eq!((r.floor, r.ranges.clone()), (5, vec![(7, 9)]));
        r.raise_floor(2);
        assert_eq!(r.floor, 5);
        r.raise_floor(7);
        assert_eq!((r.floor, r.ranges.clone()), (9, vec![]));
    }

    #[test]
    fn the_first_gap_of_several_partitions() {
        // Partition 0 holds 0,1,2 and 6; partition 1 holds 3 and 5: 4 is
        // missing although 6 was written.
        let mut p0 = SeqRanges::default();
        for s in [0, 1, 2, 6] {
            p0.insert(s, s + 1);
        }
        let mut p1 = SeqRanges::default();
        for s in [3, 5] {
            p1.insert(s, s + 1);
        }
        assert_eq!(SeqRanges::first_gap([&p0, &p1]), 4);
        p1.insert(4, 5);
        assert_eq!(SeqRanges::first_gap([&p0, &p1]), 7);
        // A floor from one partition counts for all.
        assert_eq!(SeqRanges::first_gap([&SeqRanges::with_floor(20), &p0]), 20);
        assert_eq!(SeqRanges::first_gap(std::iter::empty()), 0);
    }

    #[test]
    fn past_the_cap_the_oldest_ranges_are_forgotten() {
        let mut r = SeqRanges::default();
        for i in 0..(MAX_RANGES as i64 + 10) {
            r.insert(2 * i + 1, 2 * i + 2);
        }
        assert_eq!(r.ranges.len(), MAX_RANGES);
        assert_eq!(r.ranges[0], (21, 22));
        let bad = SeqRanges {
            floor: -3,
            ranges: vec![(9, 7), (4, 6), (1, 2), (5, 8)],
        }
        .normalized();
        assert_eq!((bad.floor, bad.ranges), (0, vec![(1, 2), (4, 8)]));
    }
}
