//! `mqlite topics` and `mqlite topic describe`.

use std::io::{self, BufWriter, Write};

use mqlite::{Broker, TopicInfo};
use serde_json::{json, Value};

use crate::CliResult;

fn offsets_json(info: &TopicInfo) -> Value {
    info.partitions
        .iter()
        .map(|p| {
            json!({
                "partition": p.partition,
                "start_offset": p.start_offset,
                "end_offset": p.end_offset,
            })
        })
        .collect()
}

pub fn topics(broker: &Broker, json: bool) -> CliResult {
    let mut names = broker.topics();
    names.sort();
    let mut out = BufWriter::new(io::stdout().lock());
    if json {
        let mut all = Vec::with_capacity(names.len());
        for name in &names {
            // A damaged topic is listed as such.
            all.push(match broker.topic(name) {
                Ok(info) => json!({
                    "name": info.name,
                    "partitions": info.partitions.len(),
                    "offsets": offsets_json(&info),
                }),
                Err(e) => json!({"name": name, "damaged": e.to_string()}),
            });
        }
        writeln!(out, "{}", Value::Array(all))?;
    } else {
        for name in &names {
            match broker.topic(name) {
                Ok(_) => writeln!(out, "{name}")?,
                Err(e) => writeln!(out, "{name}  (damaged: {e})")?,
            }
        }
    }
    out.flush()?;
    Ok(())
}

pub fn describe_topic(info: &TopicInfo, json: bool) -> CliResult {
    let c = &info.config;
    let mut out = BufWriter::new(io::stdout().lock());
    if json {
        let parts: Vec<Value> = info
            .partitions
            .iter()
            .map(|p| {
                json!({
                    "partition": p.partition,
                    "start_offset": p.start_offset,
                    "end_offset": p.end_offset,
                    "size_bytes": p.size_bytes,
                    "segments": p.segments,
                })
            })
            .collect();
        let v = json!({
            "name": info.name,
            "partitions": info.partitions.len(),
            "config": {
                "segment_bytes": c.segment_bytes,
                "retention_ms": c.retention_ms,
                "retention_bytes": c.retention_bytes,
                "max_message_bytes": c.max_message_bytes,
            },
            "offsets": parts,
        });
        writeln!(out, "{v}")?;
    } else {
        let opt = |v: Option<u64>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
        writeln!(out, "topic: {}", info.name)?;
        writeln!(out, "partitions: {}", info.partitions.len())?;
        writeln!(out, "segment_bytes: {}", c.segment_bytes)?;
        writeln!(out, "retention_ms: {}", opt(c.retention_ms))?;
        writeln!(out, "retention_bytes: {}", opt(c.retention_bytes))?;
        writeln!(out, "max_message_bytes: {}", c.max_message_bytes)?;
        writeln!(
            out,
            "{:>9} {:>12} {:>12} {:>12} {:>8}",
            "partition", "start", "end", "bytes", "segments"
        )?;
        for p in &info.partitions {
            writeln!(
                out,
                "{:>9} {:>12} {:>12} {:>12} {:>8}",
                p.partition, p.start_offset, p.end_offset, p.size_bytes, p.segments
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
