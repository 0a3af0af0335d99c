//! What a broker describes: topics and their partitions (`Broker.topic()`)
//! and consumer groups (`Broker.describe_group()`).

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// One partition of a topic, as described by `Broker.topic()`.
///
/// Attributes:
///     partition (int): Partition number.
///     start_offset (int): First retained offset.
///     end_offset (int): Offset the next record will get.
///     size_bytes (int): Bytes of log on disk.
///     segments (int): Number of segment files.
///     flushes (int): Flushes to disk since the data directory was opened
///         (concurrent `acks="all"` senders share them).
///     truncated_bytes (int): Bytes recovery removed from the tail on open.
///     dropped_batches (int): Batches recovery removed on open.
///     torn_tails (int): Torn tails (partial last writes) recovery cut.
///     corruptions (int): Damage recovery found where no torn write can be:
///         followed by more data, in a log closed cleanly, or in a sealed
///         segment.
///     lost_records (int): Records below the recovery point (acknowledged as
///         written) that the log no longer holds: a cut, emptied or missing
///         segment file.
///     quarantined_bytes (int): Bytes of damaged log recovery moved aside
///         for inspection (next to the segment, as
///         `<base>.log.damaged-<position>`) instead of dropping them.
///     abandoned_transactions (int): Transactions whose records a crash
///         left before their commit point, cut (never readable).
///
/// Recovery also logs each repair on the `mqlite` logger (a warning).
#[pyclass(frozen, get_all, module = "mqlite")]
#[derive(Clone)]
pub struct PartitionInfo {
    /// int: Partition number.
    partition: u32,
    /// int: First retained offset.
    start_offset: u64,
    /// int: Offset the next record will get.
    end_offset: u64,
    /// int: Bytes of log on disk.
    size_bytes: u64,
    /// int: Number of segment files.
    segments: usize,
    /// int: Flushes to disk since the data directory was opened (concurrent
    /// `acks="all"` senders share them).
    flushes: u64,
    /// int: Bytes recovery removed from the tail on open.
    truncated_bytes: u64,
    /// int: Batches recovery removed on open.
    dropped_batches: u64,
    /// int: Torn tails (partial last writes) recovery cut.
    torn_tails: u64,
    /// int: Damage recovery found where no torn write can be (followed by
    /// more data, in a log closed cleanly, or in a sealed segment).
    corruptions: u64,
    /// int: Records below the recovery point (acknowledged as written) that
    /// the log no longer holds: a cut, emptied or missing segment file.
    lost_records: u64,
    /// int: Bytes of damaged log recovery moved aside for inspection instead
    /// of dropping them.
    quarantined_bytes: u64,
    /// int: Transactions whose records a crash left before their commit
    /// point, cut (never readable).
    abandoned_transactions: u64,
}

#[pymethods]
impl PartitionInfo {
    fn __repr__(&self) -> String {
        format!(
            "PartitionInfo(partition={}, start_offset={}, end_offset={}, size_bytes={}, segments={}, \
             flushes={}, truncated_bytes={}, dropped_batches={}, torn_tails={}, corruptions={}, lost_records={}, \
             quarantined_bytes={}, abandoned_transactions={})",
            self.partition,
            self.start_offset,
            self.end_offset,
            self.size_bytes,
            self.segments,
            self.flushes,
            self.truncated_bytes,
            self.dropped_batches,
            self.torn_tails,
            self.corruptions,
            self.lost_records,
            self.quarantined_bytes,
            self.abandoned_transactions
        )
    }
}

/// A topic as described by `Broker.topic()`: its config and partitions.
///
/// Attributes:
///     name (str): The topic name.
///     segment_bytes (int): Size of each segment file.
///     retention_ms (int | None): Time-based retention, or None.
///     retention_bytes (int | None): Size-based retention per partition, or
///         None.
///     max_message_bytes (int): Largest encoded record accepted.
///     index_interval_bytes (int): Bytes of log between two index entries.
///     log_append_time (bool): Records are stamped with their append time.
///     retention_respects_groups (bool): Time retention keeps segments
///         consumer groups have not committed past.
///     partitions (list[PartitionInfo]): One entry per partition, in order.
#[pyclass(frozen, module = "mqlite")]
pub struct TopicInfo {
    /// str: The topic name.
    #[pyo3(get)]
    name: String,
    /// int: Size of each segment file.
    #[pyo3(get)]
    segment_bytes: u64,
    /// int | None: Time-based retention, or None.
    #[pyo3(get)]
    retention_ms: Option<u64>,
    /// int | None: Size-based retention per partition, or None.
    #[pyo3(get)]
    retention_bytes: Option<u64>,
    /// int: Largest encoded record accepted.
    #[pyo3(get)]
    max_message_bytes: u32,
    /// int: Bytes of log between two index entries.
    #[pyo3(get)]
    index_interval_bytes: u32,
    /// bool: Records are stamped with their append time.
    #[pyo3(get)]
    log_append_time: bool,
    /// bool: Time retention keeps segments consumer groups have not committed past.
    #[pyo3(get)]
    retention_respects_groups: bool,
    partitions: Vec<PartitionInfo>,
}

impl From<mqlite::TopicInfo> for TopicInfo {
    fn from(t: mqlite::TopicInfo) -> Self {
        TopicInfo {
            name: t.name,
            segment_bytes: t.config.segment_bytes,
            retention_ms: t.config.retention_ms,
            retention_bytes: t.config.retention_bytes,
            max_message_bytes: t.config.max_message_bytes,
            index_interval_bytes: t.config.index_interval_bytes,
            log_append_time: t.config.log_append_time,
            retention_respects_groups: t.config.retention_respects_groups,
            partitions: t
                .partitions
                .into_iter()
                .map(|p| PartitionInfo {
                    partition: p.partition,
                    start_offset: p.start_offset,
                    end_offset: p.end_offset,
                    size_bytes: p.size_bytes,
                    segments: p.segments,
                    flushes: p.flushes,
                    truncated_bytes: p.recovery.truncated_bytes,
                    dropped_batches: p.recovery.dropped_batches,
                    torn_tails: p.recovery.torn_tails,
                    corruptions: p.recovery.corruptions,
                    lost_records: p.recovery.lost_records,
                    quarantined_bytes: p.recovery.quarantined_bytes,
                    abandoned_transactions: p.recovery.abandoned_transactions,
                })
                .collect(),
        }
    }
}

#[pymethods]
impl TopicInfo {
    /// list[PartitionInfo]: One entry per partition, in order.
    #[getter]
    fn partitions(&self) -> Vec<PartitionInfo> {
        self.partitions.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "TopicInfo(name='{}', partitions={}, segment_bytes={}, retention_ms={}, retention_bytes={}, \
             max_message_bytes={}, index_interval_bytes={})",
            self.name,
            self.partitions.len(),
            self.segment_bytes,
            opt(self.retention_ms),
            opt(self.retention_bytes),
            self.max_message_bytes,
            self.index_interval_bytes
        )
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "None".to_owned(), |v| v.to_string())
}

/// A consumer group as `Broker.describe_group()` sees it.
///
/// Attributes:
///     name (str): The group.
///     generation (int): Incremented at every rebalance in this process.
///     members (list[tuple[str, list[tuple[str, int]]]]): Each member's id
///         and the (topic, partition) pairs it owns now, by member id.
///     committed (dict[tuple[str, int], tuple[int, str]]): The committed
///         (offset, metadata) by (topic, partition).
#[pyclass(frozen, module = "mqlite")]
pub struct GroupInfo {
    /// str: The group.
    #[pyo3(get)]
    name: String,
    /// int: Incremented at every rebalance in this process.
    #[pyo3(get)]
    generation: u64,
    members: Vec<(String, Vec<(String, u32)>)>,
    committed: Vec<(String, u32, u64, String)>,
}

impl From<mqlite::GroupInfo> for GroupInfo {
    fn from(g: mqlite::GroupInfo) -> Self {
        GroupInfo {
            name: g.name,
            generation: g.generation,
            members: g
                .members
                .into_iter()
                .map(|m| (m.id, m.partitions))
                .collect(),
            committed: g
                .committed
                .into_iter()
                .map(|(t, p, c)| (t, p, c.offset, c.metadata))
                .collect(),
        }
    }
}

#[pymethods]
impl GroupInfo {
    /// list[tuple[str, list[tuple[str, int]]]]: (member id, partitions) pairs.
    #[getter]
    fn members(&self) -> Vec<(String, Vec<(String, u32)>)> {
        self.members.clone()
    }

    /// dict[tuple[str, int], tuple[int, str]]: (offset, metadata) by
    /// (topic, partition).
    #[getter]
    fn committed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (t, p, o, m) in &self.committed {
            d.set_item((t, *p), (*o, m))?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "GroupInfo(name='{}', generation={}, members={}, committed={})",
            self.name,
            self.generation,
            self.members.len(),
            self.committed.len()
        )
    }
}
