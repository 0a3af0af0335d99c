//! Low-level access to one partition log in shared mode, below the broker:
//! a writer log that keeps the tail page, and a reader log in a process
//! that does not write. For tests and benchmarks of the log layer until
//! the broker opens logs in shared mode. Not a stable API.

use std::path::Path;
use std::sync::Arc;

use super::batch::{self, ProducerFields, RecordRef};
use super::{Doorbell, LogConfig, PartitionLog, SharedLog, UncleanMark};
use crate::background::Pool;
use crate::error::Result;
use crate::files::FileCache;

/// Settings of a log opened here.
#[derive(Clone)]
pub struct Options {
    /// Most bytes of each segment.
    pub segment_bytes: usize,
    /// Delete the oldest sealed segments while the log is larger.
    pub retention_bytes: Option<u64>,
    /// Shared mode (keep the tail page) rather than exclusive mode.
    pub shared: bool,
    /// Called after every publish in shared mode.
    pub doorbell: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("segment_bytes", &self.segment_bytes)
            .field("retention_bytes", &self.retention_bytes)
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl Options {
    /// Segments of `segment_bytes`, no retention, exclusive mode.
    pub fn new(segment_bytes: usize) -> Options {
        Options {
            segment_bytes,
            retention_bytes: None,
            shared: false,
            doorbell: None,
        }
    }

    fn config(&self, unclean: Arc<UncleanMark>) -> LogConfig {
        LogConfig {
            segment_bytes: self.segment_bytes,
            index_interval_bytes: 4096,
            max_message_bytes: 1 << 20,
            retention_ms: None,
            retention_bytes: self.retention_bytes,
            prefault: false,
            file_mode: 0o600,
            log_append_time: false,
            respects_groups: false,
            unclean,
            pool: Arc::new(Pool::new(1)),
            files: Arc::new(FileCache::new(64)),
            shared: self.shared.then(|| SharedLog {
                writers: None,
                doorbell: self.doorbell.clone().map(|ring| {
                    // The hook given here runs its own fence, if any.
                    Doorbell(Arc::new(move |_fenced| ring()))
                }),
            }),
            committed: None,
        }
    }
}

/// A partition log this process writes.
#[derive(Debug)]
pub struct WriterLog(PartitionLog);

impl WriterLog {
    /// Opens (creating) the partition log in `dir`, recovering it.
    ///
    /// # Errors
    /// I/O errors; what recovery refuses.
    pub fn open(dir: &Path, options: &Options) -> Result<WriterLog> {
        std::fs::create_dir_all(dir)
            .map_err(|e| crate::Error::io(format!("creating {}", dir.display()), e))?;
        let unclean = Arc::new(UncleanMark::open(dir, 0o600)?);
        let (log, pending) =
            PartitionLog::open_unsynced(Arc::from("t"), 0, dir, options.config(unclean))?;
        if let Some(p) = pending {
            log.finish_pending(&p)?;
        }
        Ok(WriterLog(log))
    }

    /// Appends `values` as one batch (no key, timestamp `ts`); returns its
    /// base offset.
    ///
    /// # Errors
    /// What the append path returns (a full disk, a batch too large).
    pub fn append(&self, values: &[&[u8]], ts: i64) -> Result<u64> {
        let recs: Vec<RecordRef<'_>> = values
            .iter()
            .map(|v| RecordRef {
                key: None,
                value: Some(v),
                headers: &[],
                timestamp: ts,
            })
            .collect();
        Ok(self.0.append(&recs, ProducerFields::default())?.base_offset)
    }

    /// The next offset.
    pub fn end_offset(&self) -> u64 {
        self.0.end_offset()
    }

    /// The first retained offset.
    pub fn start_offset(&self) -> u64 {
        self.0.start_offset()
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.0.segment_count()
    }

    /// Runs retention now; returns how many segments it deleted.
    pub fn enforce_retention(&self) -> usize {
        self.0.enforce_retention(super::now_ms())
    }

    /// Flushes and closes the log.
    ///
    /// # Errors
    /// A failed flush.
    pub fn close(&self) -> Result<()> {
        self.0.close()
    }
}

/// A partition log another process (or another handle) writes.
#[derive(Debug)]
pub struct ReaderLog(PartitionLog);

/// One record read: its offset and value.
pub type Record = (u64, Vec<u8>);

impl ReaderLog {
    /// Opens the partition log in `dir` for reading only (see
    /// `PartitionLog::open_reader`).
    ///
    /// # Errors
    /// No segment or no tail page in `dir`; I/O errors.
    pub fn open(dir: &Path, options: &Options) -> Result<ReaderLog> {
        // Read, never written: a reader log appends nothing.
        let unclean = Arc::new(UncleanMark::open(dir, 0o600)?);
        Ok(ReaderLog(PartitionLog::open_reader(
            Arc::from("t"),
            0,
            dir,
            options.config(unclean),
        )?))
    }

    /// Learns what the writer published since the last call; whether
    /// anything changed.
    pub fn refresh(&self) -> bool {
        self.0.refresh()
    }

    /// The next offset, as far as this reader knows.
    pub fn end_offset(&self) -> u64 {
        self.0.end_offset()
    }

    /// The first retained offset, as far as this reader knows.
    pub fn start_offset(&self) -> u64 {
        self.0.start_offset()
    }

    /// Number of segments this reader maps.
    pub fn segment_count(&self) -> usize {
        self.0.segment_count()
    }

    /// Appends through the reader (refused: for tests of that refusal).
    ///
    /// # Errors
    /// Always, [`crate::Error::InvalidArgument`].
    pub fn append(&self, value: &[u8]) -> Result<u64> {
        let recs = [RecordRef {
            key: None,
            value: Some(value),
            headers: &[],
            timestamp: 0,
        }];
        Ok(self.0.append(&recs, ProducerFields::default())?.base_offset)
    }

    /// Every record from `from` to the published end, through the log's
    /// read path (each batch CRC-checked); uncompressed batches only.
    ///
    /// # Errors
    /// `from` out of range; a damaged batch.
    pub fn read_from(&self, from: u64) -> Result<Vec<Record>> {
        let mut c = self.0.cursor(from)?;
        let mut out = Vec::new();
        while let Some((at, h)) = self.0.next_batch(&mut c)? {
            let bytes = c.seg.bytes(at, at + h.total_len());
            for r in batch::Records::new(bytes, &h) {
                let r = r.map_err(|reason| c.seg.corrupt(at, reason))?;
                let offset = h.base_offset + u64::from(r.offset_delta);
                if offset >= from {
                    out.push((
                        offset,
                        r.value.map(|v| bytes[v].to_vec()).unwrap_or_default(),
                    ));
                }
            }
        }
        Ok(out)
    }
}
