//! Helpers shared by the log's unit tests: hand-made batches and writes
//! into segment files.

use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::log::batch::{self, encode_batch, ProducerFields, RecordRef};

/// Records with `values` and no key, headers or time of their own.
pub(crate) fn records<V: AsRef<str>>(values: &[V]) -> Vec<RecordRef<'_>> {
    values
        .iter()
        .map(|v| RecordRef {
            key: None,
            value: Some(v.as_ref().as_bytes()),
            headers: &[],
            timestamp: 1_700_000_000_000,
        })
        .collect()
}

/// Encodes one batch of `values` at `base`.
pub(crate) fn batch_bytes(base: u64, values: &[&str]) -> Vec<u8> {
    let recs = records(values);
    let mut buf = vec![0u8; batch::batch_len(&recs)];
    let n = encode_batch(&mut buf, base, &recs, ProducerFields::default(), 0);
    buf.truncate(n);
    buf
}

/// Writes `bytes` at `pos` of the file at `path`.
pub(crate) fn write_at(path: &Path, pos: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, pos).unwrap();
}
