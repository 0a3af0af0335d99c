//! The producer's batch send ([`Producer::send_batch`](super::Producer::send_batch)):
//! the records routed, grouped per partition and appended as few batches
//! as fit, duplicates of the application's sequences reported, and one
//! flush per partition for `acks=all`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::route::Lent;
use super::{Inner, RecordMetadata};
use crate::error::{Error, Result};
use crate::log::batch::{self, RecordRef};
use crate::log::compression::Compression;
use crate::log::{now_ms, BatchSource, PartitionLog, UNKNOWN_OFFSET};
use crate::producer::{Acks, BorrowedRecord};
use crate::sync::lock;

impl Inner {
    /// Sends many records, batch by batch per partition.
    pub(super) fn send_many(
        &self,
        records: &[BorrowedRecord<'_>],
        on_each: &mut dyn FnMut(usize, &RecordMetadata),
    ) -> Result<()> {
        self.check_usable()?;
        if records.is_empty() {
            return Ok(());
        }
        let started = self.ack_deadline_start();
        if self.config.acks == Acks::Zero {
            for (i, r) in records.iter().enumerate() {
                let md = self.enqueue(r, None)?;
                on_each(i, &md);
            }
            return Ok(());
        }
        // Route every record, then group the indices per partition, in
        // order (a counting sort: a few allocations whatever the number of
        // partitions, no hashing). The topic and its partition list are
        // looked up once per topic of the call: records of topics that
        // take turns still share one group per partition.
        let mut runs: Vec<Lent> = Vec::new();
        // Group of each partition of each topic (`u32::MAX`: none yet).
        let mut slots: Vec<Vec<u32>> = Vec::new();
        // (topic, partition) of each group, in order of first appearance.
        let mut groups: Vec<(u32, u32)> = Vec::new();
        // Group of each record.
        let mut group_of: Vec<u32> = Vec::with_capacity(records.len());
        let mut run = usize::MAX;
        // The previous record's topic: callers mostly pass one `&str` for
        // all, which needs no string compare.
        let mut last_topic: &str = "";
        let mut sequenced = false;
        for r in records {
            self.check_sequence(r)?;
            sequenced |= r.sequence.is_some();
            let same_topic = run != usize::MAX
                && (std::ptr::eq(r.topic, last_topic) || &**runs[run].parts().name() == r.topic);
            last_topic = r.topic;
            if !same_topic {
                // Kept until the appends are done: the groups point into
                // it (the per-thread cache then keeps the last topic only).
                let known = runs.iter().position(|l| &**l.parts().name() == r.topic);
                run = if let Some(i) = known {
                    i
                } else {
                    let lent = self.partitions_of(r.topic)?;
                    slots.push(vec![u32::MAX; lent.parts().len()]);
                    runs.push(lent);
                    runs.len() - 1
                };
            }
            let parts = runs[run].parts();
            let topic = parts.name();
            let count = parts.len() as u32;
            let partition = self.choose(topic, count, r, || {
                r.value.map_or(0, <[u8]>::len) + r.key.map_or(0, <[u8]>::len) + 8
            })?;
            if partition >= count {
                return Err(Error::UnknownPartition {
                    topic: r.topic.to_owned(),
                    partition,
                    count,
                });
            }
            let slot = &mut slots[run][partition as usize];
            if *slot == u32::MAX {
                *slot = groups.len() as u32;
                groups.push((run as u32, partition));
            }
            group_of.push(*slot);
        }
        drop(slots);
        // Every partition written to is open before anything is appended
        // (an open that fails changes nothing).
        for &(run, partition) in &groups {
            runs[run as usize].parts().get(partition)?;
        }
        // Start of each group's indices in `order`, then the indices.
        let mut starts: Vec<usize> = vec![0; groups.len() + 1];
        for &g in &group_of {
            starts[g as usize + 1] += 1;
        }
        for g in 0..groups.len() {
            starts[g + 1] += starts[g];
        }
        let mut order: Vec<usize> = vec![0; records.len()];
        {
            let mut next = starts.clone();
            for (i, &g) in group_of.iter().enumerate() {
                order[next[g as usize]] = i;
                next[g as usize] += 1;
            }
        }
        let now = now_ms();
        let mut refs: Vec<RecordRef<'_>> = Vec::with_capacity(records.len().min(1024));
        let mut flush_targets: Vec<(Arc<PartitionLog>, u64)> = Vec::new();
        let log_of = |g: usize| {
            groups
                .get(g)
                .and_then(|&(run, partition)| runs[run as usize].parts().get(partition).ok())
        };
        // Over many partitions every append starts on cold cache lines:
        // the next partitions' are asked for ahead (the writer two groups
        // ahead, where the next one writes one ahead), to arrive while
        // this one is written.
        if let Some(l) = log_of(0) {
            l.prefetch_writer();
        }
        if let Some(l) = log_of(1) {
            l.prefetch_writer();
        }
        if let Some(l) = log_of(0) {
            l.prefetch_tail();
        }
        for (g, &(run, partition)) in groups.iter().enumerate() {
            let log = runs[run as usize].parts().get(partition)?;
            if let Some(l) = log_of(g + 2) {
                l.prefetch_writer();
            }
            if let Some(l) = log_of(g + 1) {
                l.prefetch_tail();
            }
            let partition = &partition;
            let idx = &order[starts[g]..starts[g + 1]];
            let max_batch = log.max_batch_bytes();
            let topic = Arc::clone(log.topic());
            let guard = if sequenced || self.pending.load(Ordering::Acquire) > 0 {
                let mut st = lock(&self.acc);
                self.append_pending_of(&mut st, log);
                Some(st)
            } else {
                None
            };
            let id = self.identity.as_ref().map_or(-1, |i| i.id);
            let mut last_seq = if sequenced && id >= 0 {
                log.producer_last_seq(id, self.is_named())?
            } else {
                -1
            };
            let mut k = 0;
            while k < idx.len() {
                // One chunk: records that fit one batch and, with sequences,
                // carry consecutive ones.
                refs.clear();
                let first = &records[idx[k]];
                let first_ts = first.timestamp.unwrap_or(now);
                let first_seq = first.sequence;
                if let Some(s) = first_seq {
                    if self.written_before(log, id, s, last_seq)? {
                        // Already written: report as a duplicate (not on a
                        // poisoned partition, see `append_sequenced`).
                        log.check_not_poisoned()?;
                        self.note_written(s, 1);
                        let original = log.producer_offset_of(id, self.is_named(), s)?;
                        self.stats.duplicates(1);
                        if self.config.acks == Acks::All {
                            // The original may have been written with a
                            // lower `acks`: durable before this returns.
                            let end = original.map_or_else(|| log.end_offset(), |o| o + 1);
                            match flush_targets.iter_mut().find(|(l, _)| Arc::ptr_eq(l, log)) {
                                Some((_, t)) => *t = (*t).max(end),
                                None => flush_targets.push((Arc::clone(log), end)),
                            }
                        }
                        on_each(
                            idx[k],
                            &RecordMetadata {
                                topic: Arc::clone(&topic),
                                partition: *partition,
                                offset: original.unwrap_or(UNKNOWN_OFFSET),
                                timestamp: first_ts,
                                duplicate: true,
                            },
                        );
                        k += 1;
                        continue;
                    }
                }
                let limit = max_batch.saturating_sub(batch::HEADER_LEN + batch::ALIGN);
                let mut size = 0;
                let start = k;
                while k < idx.len() {
                    let r = &records[idx[k]];
                    let rec = RecordRef {
                        key: r.key,
                        value: r.value,
                        headers: r.headers,
                        timestamp: r.timestamp.unwrap_or(now),
                    };
                    let n = k - start;
                    let len = batch::encoded_record_len(&rec, first_ts, n);
                    if n > 0 {
                        let consecutive = match (first_seq, r.sequence) {
                            (None, None) => true,
                            (Some(f), Some(s)) => s == f + n as i64,
                            _ => false,
                        };
                        if !consecutive || size + len > limit {
                            break;
                        }
                    }
                    size += len;
                    refs.push(rec);
                    k += 1;
                }
                let res = if self.config.compression == Compression::None {
                    let len = batch::section_batch_len(size);
                    let src = BatchSource::Records(&refs, len);
                    self.append(log, src, first_seq).map(|a| {
                        let bytes = a.bytes;
                        (a, bytes)
                    })
                } else {
                    self.append_records(log, &refs, first_seq)
                };
                let ((appended, len), partition) = match res {
                    Ok(a) => (a, *partition),
                    Err(e) => {
                        // Key-less records go to another partition.
                        let movable = idx[start..k].iter().all(|&i| self.movable(&records[i]));
                        let parts = runs[run as usize].parts();
                        self.retry_elsewhere(parts, *partition, movable, &refs, e)?
                    }
                };
                let log = runs[run as usize].parts().get(partition)?;
                let partition = &partition;
                if appended.duplicate {
                    self.stats.duplicates(refs.len() as u64);
                } else {
                    self.stats.written(refs.len() as u64, len as u64);
                    if let Some(f) = first_seq {
                        last_seq = f + refs.len() as i64 - 1;
                    }
                }
                let mut md = RecordMetadata {
                    topic: Arc::clone(&topic),
                    partition: *partition,
                    offset: 0,
                    timestamp: 0,
                    duplicate: appended.duplicate,
                };
                for (j, rec) in refs.iter().enumerate() {
                    md.offset = if appended.base_offset == UNKNOWN_OFFSET {
                        UNKNOWN_OFFSET
                    } else {
                        appended.base_offset + j as u64
                    };
                    md.timestamp = appended.log_append_time.unwrap_or(rec.timestamp);
                    on_each(idx[start + j], &md);
                }
                if self.config.acks == Acks::All {
                    // A duplicate's original too (it may have been written
                    // with a lower `acks`).
                    let end = if appended.base_offset == UNKNOWN_OFFSET {
                        log.end_offset()
                    } else {
                        appended.base_offset + refs.len() as u64
                    };
                    match flush_targets.iter_mut().find(|(l, _)| Arc::ptr_eq(l, log)) {
                        Some((_, t)) => *t = (*t).max(end),
                        None => flush_targets.push((Arc::clone(log), end)),
                    }
                }
            }
            if guard.is_some() {
                drop(guard);
                self.fire();
            }
        }
        for (log, target) in flush_targets {
            log.flush_to(target)?;
        }
        // Every record was reported: the caller counts none as failed.
        self.check_ack_deadline(started)
            .inspect_err(|_| self.stats.errors(records.len() as u64))
    }
}
