//! `mqlite groups` and `mqlite group describe`: consumer groups, their
//! committed offsets and lag.

use std::io::{self, BufWriter, Write};

use mqlite::{Broker, GroupInfo};
use serde_json::{json, Value};

use crate::CliResult;

/// One committed offset with the partition's end and the lag.
struct OffsetRow {
    topic: String,
    partition: u32,
    committed: u64,
    end: Option<u64>,
    lag: Option<u64>,
    timestamp: i64,
}

fn offset_rows(broker: &Broker, info: &GroupInfo) -> Vec<OffsetRow> {
    let mut committed = info.committed.clone();
    committed.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    committed
        .into_iter()
        .map(|(t, p, c)| {
            let end = broker.topic(&t).ok().and_then(|ti| {
                ti.partitions
                    .iter()
                    .find(|x| x.partition == p)
                    .map(|x| x.end_offset)
            });
            OffsetRow {
                lag: end.map(|e| e.saturating_sub(c.offset)),
                topic: t,
                partition: p,
                committed: c.offset,
                end,
                timestamp: c.timestamp,
            }
        })
        .collect()
}

fn offsets_json(rows: &[OffsetRow]) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            json!({
                "topic": r.topic,
                "partition": r.partition,
                "committed": r.committed,
                "end_offset": r.end,
                "lag": r.lag,
                "timestamp": r.timestamp,
            })
        })
        .collect()
}

pub fn groups(broker: &Broker, json: bool) -> CliResult {
    let mut all = Vec::new();
    // A damaged group is listed as such; the others are described.
    let mut damaged = Vec::new();
    // The CLI's broker has no members: these are the groups with
    // committed offsets.
    for name in broker.groups() {
        match broker.describe_group(&name) {
            Ok(info) => {
                let rows = offset_rows(broker, &info);
                all.push((info, rows));
            }
            Err(e) => damaged.push((name, e.to_string())),
        }
    }
    let mut out = BufWriter::new(io::stdout().lock());
    let total = |rows: &[OffsetRow]| -> Option<u64> { rows.iter().map(|r| r.lag).sum() };
    if json {
        let v: Vec<Value> = all
            .iter()
            .map(|(info, rows)| {
                json!({
                    "name": info.name,
                    "members": info.members.len(),
                    "partitions": rows.len(),
                    "lag": total(rows),
                    "offsets": offsets_json(rows),
                })
            })
            .chain(
                damaged
                    .iter()
                    .map(|(name, e)| json!({"name": name, "damaged": e})),
            )
            .collect();
        writeln!(out, "{}", Value::Array(v))?;
    } else {
        writeln!(out, "{:<32} {:>10} {:>12}", "group", "partitions", "lag")?;
        for (info, rows) in &all {
            let lag = total(rows).map_or_else(|| "-".to_owned(), |l| l.to_string());
            writeln!(out, "{:<32} {:>10} {:>12}", info.name, rows.len(), lag)?;
        }
        for (name, e) in &damaged {
            writeln!(out, "{name:<32} damaged: {e}")?;
        }
    }
    out.flush()?;
    Ok(())
}

pub fn describe_group(broker: &Broker, group: &str, json: bool) -> CliResult {
    let info = broker.describe_group(group)?;
    // The engine describes any name (a group nobody used is empty); a
    // name `groups` does not list and with nothing to show is a mistake.
    if info.members.is_empty()
        && info.committed.is_empty()
        && !broker.groups().iter().any(|g| g == group)
    {
        return Err(format!(
            "unknown consumer group {group:?}: it has no committed offsets and no members"
        )
        .into());
    }
    let rows = offset_rows(broker, &info);
    let mut out = BufWriter::new(io::stdout().lock());
    if json {
        let members: Vec<Value> = info
            .members
            .iter()
            .map(|m| {
                json!({
                    "id": m.id,
                    "partitions": m.partitions.iter()
                        .map(|(t, p)| json!({"topic": t, "partition": p}))
                        .collect::<Vec<_>>(),
                })
            })
            .collect();
        let v = json!({
            "name": info.name,
            "generation": info.generation,
            "members": members,
            "offsets": offsets_json(&rows),
        });
        writeln!(out, "{v}")?;
    } else {
        let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        writeln!(out, "group: {}", info.name)?;
        writeln!(out, "generation: {}", info.generation)?;
        writeln!(out, "members: {}", info.members.len())?;
        for m in &info.members {
            let parts: Vec<String> = m
                .partitions
                .iter()
                .map(|(t, p)| format!("{t}/{p}"))
                .collect();
            writeln!(out, "  {} [{}]", m.id, parts.join(", "))?;
        }
        writeln!(
            out,
            "{:<24} {:>9} {:>12} {:>12} {:>12}",
            "topic", "partition", "committed", "end", "lag"
        )?;
        for r in &rows {
            writeln!(
                out,
                "{:<24} {:>9} {:>12} {:>12} {:>12}",
                r.topic,
                r.partition,
                r.committed,
                opt(r.end),
                opt(r.lag)
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
