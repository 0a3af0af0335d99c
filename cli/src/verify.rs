//! `mqlite verify`: reads every batch of a topic (or of all topics) through
//! the engine's consumer, which checks each one's CRC and offsets.

use std::io::{self, Write};
use std::time::Duration;

use mqlite::{Broker, ConsumerConfig};
use serde_json::{json, Value};

use crate::progress::{bar, Unit};
use crate::CliResult;

/// What `verify` found in one partition.
struct Checked {
    topic: String,
    partition: u32,
    messages: u64,
    error: Option<String>,
    truncated_bytes: u64,
    torn_tails: u64,
    corruptions: u64,
}

pub fn verify(broker: &Broker, only: Option<&str>, json: bool) -> CliResult {
    let topics = match only {
        Some(t) => vec![t.to_owned()],
        None => broker.topics(),
    };
    let mut infos = Vec::with_capacity(topics.len());
    for t in &topics {
        infos.push(broker.topic(t)?);
    }
    let total: u64 = infos
        .iter()
        .flat_map(|i| &i.partitions)
        .map(|p| p.end_offset - p.start_offset)
        .sum();
    let pb = bar(total, Unit::Messages, "verify");
    let mut results = Vec::new();
    for info in &infos {
        let t = &info.name;
        for p in &info.partitions {
            let mut c = broker.consumer(ConsumerConfig::default().max_poll_records(10_000))?;
            c.assign(&[(t.as_str(), p.partition)])?;
            let start = c.seek_to_beginning(t, p.partition);
            let mut checked = Checked {
                topic: t.clone(),
                partition: p.partition,
                messages: 0,
                error: None,
                truncated_bytes: p.recovery.truncated_bytes,
                torn_tails: p.recovery.torn_tails,
                corruptions: p.recovery.corruptions,
            };
            if let Err(e) = start {
                checked.error = Some(e.to_string());
            }
            while checked.error.is_none() {
                match c.poll(Duration::ZERO) {
                    Ok(msgs) if msgs.is_empty() => break,
                    Ok(msgs) => {
                        checked.messages += msgs.len() as u64;
                        pb.inc(msgs.len() as u64);
                    }
                    Err(e) => {
                        checked.error = Some(e.to_string());
                        break;
                    }
                }
            }
            if checked.error.is_none() && c.position(t, p.partition)? < p.end_offset {
                checked.error = Some(format!(
                    "stopped at offset {} before the end {}",
                    c.position(t, p.partition)?,
                    p.end_offset
                ));
            }
            results.push(checked);
        }
    }
    pb.finish_and_clear();
    let bad = results
        .iter()
        .filter(|r| r.error.is_some() || r.corruptions > 0)
        .count();
    let mut out = io::stdout().lock();
    if json {
        let v: Vec<Value> = results
            .iter()
            .map(|r| {
                json!({
                    "topic": r.topic,
                    "partition": r.partition,
                    "messages": r.messages,
                    "error": r.error,
                    "recovery": {
                        "truncated_bytes": r.truncated_bytes,
                        "torn_tails": r.torn_tails,
                        "corruptions": r.corruptions,
                    },
                })
            })
            .collect();
        writeln!(out, "{}", Value::Array(v))?;
    } else {
        for r in &results {
            let status = match (&r.error, r.corruptions) {
                (Some(e), _) => format!("CORRUPT: {e}"),
                (None, n) if n > 0 => {
                    format!(
                        "corruption found and truncated at open ({} bytes)",
                        r.truncated_bytes
                    )
                }
                (None, _) if r.torn_tails > 0 => {
                    format!(
                        "ok (a torn tail of {} bytes was truncated at open)",
                        r.truncated_bytes
                    )
                }
                _ => "ok".to_owned(),
            };
            writeln!(
                out,
                "{}/{}: {} messages, {status}",
                r.topic, r.partition, r.messages
            )?;
        }
    }
    if bad > 0 {
        return Err(format!("{bad} partition(s) with corruption").into());
    }
    Ok(())
}
