//! `mqlite consume`: records of a topic to stdout, through the engine's
//! consumer (the data directory is opened read-only; with `--group`, which
//! commits, to write).

use std::collections::BTreeMap;
use std::io::{self, BufWriter, Write};
use std::time::Duration;

use clap::Args;
use mqlite::{Broker, ConsumerConfig, Message};

use crate::output::{write_record, Format, Rec};
use crate::CliResult;

/// How long a poll may return nothing before the consumer counts as caught up.
const CAUGHT_UP: Duration = Duration::from_millis(200);

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    /// Topic to read.
    topic: String,
    /// Consume in this group, starting at its committed offsets, and commit
    /// at the end.
    #[arg(long)]
    pub group: Option<String>,
    /// Start at the first retained offset of every partition.
    #[arg(long, conflicts_with_all = ["offset", "since"])]
    from_beginning: bool,
    /// Start at this offset in every partition (clamped to each partition's
    /// range).
    #[arg(long, conflicts_with = "since")]
    offset: Option<u64>,
    /// Start at the first record at or after this time in every partition:
    /// an RFC 3339 time (2024-05-01T12:00:00Z) or a duration back from now
    /// (30s, 10m, 2h, 1d).
    #[arg(long, value_name = "TIME", value_parser = crate::since::parse_since)]
    since: Option<i64>,
    /// Stop after this many records (waiting for them if needed).
    #[arg(long)]
    max: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// Writes one consumed message in `format`.
pub fn write_message(out: &mut impl Write, m: &Message, format: Format) -> io::Result<()> {
    let headers = m.headers();
    let rec = Rec {
        topic: m.topic(),
        partition: m.partition(),
        offset: m.offset(),
        timestamp: m.timestamp(),
        key: m.key(),
        value: m.value(),
        headers: &headers,
    };
    write_record(out, &rec, format)
}

pub fn consume(broker: &Broker, args: ConsumeArgs) -> CliResult {
    let info = broker.topic(&args.topic)?;
    let config = match &args.group {
        Some(g) => ConsumerConfig::group(g.as_str()).enable_auto_commit(false),
        None => ConsumerConfig::default(),
    };
    let mut consumer = broker.consumer(config)?;
    if args.group.is_some() {
        consumer.subscribe(&[args.topic.as_str()])?;
    } else {
        let parts: Vec<(&str, u32)> = info
            .partitions
            .iter()
            .map(|p| (args.topic.as_str(), p.partition))
            .collect();
        consumer.assign(&parts)?;
    }
    for (t, p) in consumer.assignment() {
        if args.from_beginning {
            consumer.seek_to_beginning(&t, p)?;
        } else if let Some(o) = args.offset {
            let range = broker
                .topic(&t)?
                .partitions
                .iter()
                .find(|x| x.partition == p)
                .map(|x| (x.start_offset, x.end_offset));
            if let Some((start, end)) = range {
                consumer.seek(&t, p, o.clamp(start, end))?;
            }
        } else if let Some(ts) = args.since {
            match consumer.offsets_for_times(&[(t.as_str(), p, ts)])?[0] {
                Some(o) => consumer.seek(&t, p, o)?,
                None => consumer.seek_to_end(&t, p)?,
            }
        }
    }

    let mut out = BufWriter::new(io::stdout().lock());
    let mut next: BTreeMap<(String, u32), u64> = BTreeMap::new();
    let mut seen: u64 = 0;
    let result = (|| -> CliResult {
        'outer: loop {
            if args.max.is_some_and(|m| seen >= m) {
                break;
            }
            let msgs = consumer.poll(CAUGHT_UP)?;
            if msgs.is_empty() {
                if args.max.is_none() {
                    break;
                }
                out.flush()?;
                continue;
            }
            for m in &msgs {
                if args.max.is_some_and(|max| seen >= max) {
                    break 'outer;
                }
                write_message(&mut out, m, args.format)?;
                next.insert((m.topic().to_string(), m.partition()), m.offset() + 1);
                seen += 1;
            }
        }
        out.flush()?;
        Ok(())
    })();
    if args.group.is_some() && !next.is_empty() {
        let offsets: Vec<(&str, u32, u64, &str)> = next
            .iter()
            .map(|((t, p), o)| (t.as_str(), *p, *o, ""))
            .collect();
        consumer.commit_offsets(&offsets)?;
    }
    consumer.close();
    result
}
