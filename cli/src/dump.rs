//! `mqlite dump`: the batch headers of a partition's segments, for
//! debugging. Reads the files directly (no lock), like `tail`.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use clap::Args;
use mqlite::log::batch::{
    BatchHeader, ATTR_APP_SEQUENCE, ATTR_LOG_APPEND_TIME, ATTR_NAMED_PRODUCER, CODEC_MASK,
    LENGTH_PREFIX, MIN_LENGTH,
};
use mqlite::log::follow::{segment_bases, Probe, SegmentFile};
use mqlite::Compression;
use serde_json::{json, Value};

use crate::since::format_ms;
use crate::topicdir::TopicDir;
use crate::CliResult;

/// Attribute bit 4: transactional batch (docs/FORMAT.md).
const ATTR_TRANSACTIONAL: u16 = 1 << 4;
/// Attribute bit 5: control batch (docs/FORMAT.md).
const ATTR_CONTROL: u16 = 1 << 5;

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Topic.
    topic: String,
    /// Partition.
    partition: u32,
    /// Only the segment starting at this offset (its file name).
    #[arg(long, value_name = "BASE")]
    segment: Option<u64>,
    /// One JSON object per batch, one per line.
    #[arg(long)]
    json: bool,
}

/// One line of the dump.
struct Row<'a> {
    file: &'a str,
    position: u64,
    header: Option<BatchHeader>,
    crc_ok: Option<bool>,
    error: Option<String>,
}

fn flags(attributes: u16) -> Vec<&'static str> {
    [
        (ATTR_LOG_APPEND_TIME, "log_append_time"),
        (ATTR_TRANSACTIONAL, "transactional"),
        (ATTR_CONTROL, "control"),
        (ATTR_APP_SEQUENCE, "app_sequence"),
        (ATTR_NAMED_PRODUCER, "named_producer"),
    ]
    .into_iter()
    .filter(|(bit, _)| attributes & bit != 0)
    .map(|(_, name)| name)
    .collect()
}

fn codec(h: &BatchHeader) -> String {
    match Compression::from_bits(h.attributes & CODEC_MASK) {
        Some(c) => c.name().to_owned(),
        None => format!("unknown({})", h.attributes & CODEC_MASK),
    }
}

fn row_json(r: &Row<'_>) -> Value {
    let mut v = json!({
        "file": r.file,
        "position": r.position,
        "crc_ok": r.crc_ok,
        "error": r.error,
    });
    if let Some(h) = &r.header {
        let m = v.as_object_mut().expect("an object");
        let fields = json!({
            "base_offset": h.base_offset,
            "last_offset": h.base_offset.checked_add(u64::from(h.last_offset_delta)),
            "record_count": h.record_count,
            "length": h.length,
            "size": LENGTH_PREFIX as u64 + u64::from(h.length),
            "magic": h.magic,
            "attributes": h.attributes,
            "flags": flags(h.attributes),
            "codec": codec(h),
            "producer_id": h.producer.producer_id,
            "producer_epoch": h.producer.producer_epoch,
            "base_sequence": h.producer.base_sequence,
            "first_timestamp": h.first_timestamp,
            "max_timestamp": h.max_timestamp,
            "crc": h.crc,
        });
        m.extend(fields.as_object().expect("an object").clone());
    }
    v
}

const TEXT_HEADER: &str = "file                      position  base_offset  count      size  codec   producer  epoch  sequence  first_timestamp           crc";

fn row_text(out: &mut impl Write, r: &Row<'_>) -> io::Result<()> {
    let status = match &r.error {
        Some(e) => format!("BAD: {e}"),
        None => "ok".to_owned(),
    };
    match &r.header {
        Some(h) => {
            let mut codec = codec(h);
            for f in flags(h.attributes) {
                codec.push('+');
                codec.push_str(f);
            }
            writeln!(
                out,
                "{:<24} {:>9} {:>12} {:>6} {:>9}  {:<6} {:>9} {:>6} {:>9}  {:<24}  {}",
                r.file,
                r.position,
                h.base_offset,
                h.record_count,
                LENGTH_PREFIX as u64 + u64::from(h.length),
                codec,
                h.producer.producer_id,
                h.producer.producer_epoch,
                h.producer.base_sequence,
                format_ms(h.first_timestamp),
                status
            )
        }
        None => writeln!(out, "{:<24} {:>9}  {status}", r.file, r.position),
    }
}

pub fn dump(data: &Path, args: DumpArgs) -> CliResult {
    let topic = TopicDir::open(data, &args.topic)?;
    let dir = topic.partition_dir(args.partition)?;
    let mut bases = segment_bases(&dir)?;
    if let Some(b) = args.segment {
        if !bases.contains(&b) {
            return Err(format!(
                "no segment starting at offset {b} in {} (segments: {})",
                dir.display(),
                bases
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into());
        }
        bases = vec![b];
    }
    let mut out = BufWriter::new(io::stdout().lock());
    if !args.json {
        writeln!(out, "{TEXT_HEADER}")?;
    }
    let mut bad: u64 = 0;
    let mut batches: u64 = 0;
    for base in bases {
        let mut seg = SegmentFile::open(&dir, base)?;
        let file_len = seg.file_len()?;
        let name = seg
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut pos = 0u64;
        let mut expected = base;
        loop {
            let (row, next) = match seg.probe(pos)? {
                Probe::End => break,
                Probe::Batch(b) => {
                    let h = *b.header();
                    let error = (h.base_offset != expected)
                        .then(|| format!("base offset out of sequence (expected {expected})"));
                    expected = h.next_offset();
                    let next = pos + h.total_len() as u64;
                    let row = Row {
                        file: &name,
                        position: pos,
                        header: Some(h),
                        crc_ok: Some(true),
                        error,
                    };
                    (row, Some(next))
                }
                Probe::Invalid {
                    reason,
                    header,
                    crc_ok,
                } => {
                    // Go on past a damaged batch when its length is
                    // plausible, to show what follows.
                    let next = header
                        .filter(|h| h.length >= MIN_LENGTH)
                        .map(|h| pos + LENGTH_PREFIX as u64 + u64::from(h.length))
                        .filter(|&n| n <= file_len);
                    if let Some(h) = header.filter(|_| next.is_some()) {
                        expected = h
                            .base_offset
                            .saturating_add(u64::from(h.last_offset_delta) + 1);
                    }
                    let row = Row {
                        file: &name,
                        position: pos,
                        header,
                        crc_ok,
                        error: Some(reason.to_owned()),
                    };
                    (row, next)
                }
            };
            batches += 1;
            if row.error.is_some() {
                bad += 1;
            }
            if args.json {
                writeln!(out, "{}", row_json(&row))?;
            } else {
                row_text(&mut out, &row)?;
            }
            match next {
                Some(n) => pos = n,
                None => break,
            }
        }
    }
    out.flush()?;
    if bad > 0 {
        return Err(format!(
            "{bad} of {batches} batch(es) in {}/{} are damaged",
            args.topic, args.partition
        )
        .into());
    }
    Ok(())
}
