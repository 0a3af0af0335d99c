//! `mqlite`: command-line tool for an mqlite data directory.
//!
//! Lists, creates, describes and deletes topics, produces records from
//! stdin, consumes them to stdout (as text or JSON lines) and describes
//! consumer groups. Every command opens the data directory given by `--dir`
//! (or `MQLITE_DIR`, default `./data`) and takes its lock, so it fails with a
//! clear message while another process holds the directory.
//!
//! Errors go to stderr as one line, `mqlite: <error>`, with exit code 1;
//! usage errors exit with code 2.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mqlite::{
    Acks, Broker, Config, ConsumerConfig, Error, Message, ProducerConfig, Record, TopicConfig,
    TopicInfo,
};
use serde_json::{json, Value};

/// How long a poll may return nothing before the consumer counts as caught up.
const CAUGHT_UP: Duration = Duration::from_millis(200);

type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser, Debug)]
#[command(
    name = "mqlite",
    version,
    about = "Command-line tool for mqlite data directories"
)]
struct Cli {
    /// The data directory.
    #[arg(long, global = true, env = "MQLITE_DIR", default_value = "./data")]
    dir: PathBuf,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Lists the topics.
    Topics {
        /// Print a JSON array with partitions and offsets.
        #[arg(long)]
        json: bool,
    },
    /// Creates, describes or deletes a topic.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Writes the lines of stdin to a topic, one record per line.
    Produce(ProduceArgs),
    /// Reads records of a topic to stdout.
    Consume(ConsumeArgs),
    /// Describes consumer groups.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Reads every batch of a topic (or of all topics), checking its CRC and
    /// offsets, and reports what recovery found at open; exits 1 on
    /// corruption.
    Verify {
        /// Only this topic.
        topic: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum TopicCommand {
    /// Creates a topic.
    Create {
        /// Topic name.
        name: String,
        /// Number of partitions.
        #[arg(long)]
        partitions: u32,
        /// Delete segments older than this many milliseconds.
        #[arg(long)]
        retention_ms: Option<u64>,
        /// Keep at most this many bytes per partition.
        #[arg(long)]
        retention_bytes: Option<u64>,
        /// Size of one segment file in bytes.
        #[arg(long)]
        segment_bytes: Option<u64>,
    },
    /// Shows a topic's configuration and partitions.
    Describe {
        /// Topic name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deletes a topic and its data.
    Delete {
        /// Topic name.
        name: String,
    },
}

#[derive(Subcommand, Debug)]
enum GroupCommand {
    /// Shows a group's members and committed offsets with lag.
    Describe {
        /// Group name.
        group: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
struct ProduceArgs {
    /// Topic to write to.
    topic: String,
    /// Split each line at the first occurrence of this character: the part
    /// before is the key, the rest the value.
    #[arg(long)]
    key_separator: Option<char>,
    /// Write every record to this partition.
    #[arg(long)]
    partition: Option<u32>,
    /// Durability: 0, 1 or all.
    #[arg(long, default_value = "1", value_parser = parse_acks)]
    acks: Acks,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    /// The value, as UTF-8 (lossy), one per line.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Args, Debug)]
struct ConsumeArgs {
    /// Topic to read.
    topic: String,
    /// Consume in this group, starting at its committed offsets, and commit
    /// at the end.
    #[arg(long)]
    group: Option<String>,
    /// Start at the first retained offset of every partition.
    #[arg(long, conflicts_with = "offset")]
    from_beginning: bool,
    /// Start at this offset in every partition (clamped to each partition's
    /// range).
    #[arg(long)]
    offset: Option<u64>,
    /// Stop after this many records (waiting for them if needed).
    #[arg(long)]
    max: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

fn parse_acks(s: &str) -> Result<Acks, String> {
    let n = match s {
        "all" | "-1" => -1,
        "0" => 0,
        "1" => 1,
        _ => return Err(format!("expected 0, 1 or all, got {s:?}")),
    };
    Acks::from_i32(n).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                if io.kind() == io::ErrorKind::BrokenPipe {
                    return ExitCode::SUCCESS;
                }
            }
            match e.downcast_ref::<Error>() {
                Some(Error::Locked { .. }) => {
                    eprintln!("mqlite: {e} (stop the process using it and retry)")
                }
                _ => eprintln!("mqlite: {e}"),
            }
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> CliResult {
    let broker = Broker::open(&cli.dir, Config::default())?;
    match cli.command {
        Command::Topics { json } => topics(&broker, json),
        Command::Topic(TopicCommand::Create {
            name,
            partitions,
            retention_ms,
            retention_bytes,
            segment_bytes,
        }) => {
            let mut config = TopicConfig::new(partitions);
            if let Some(ms) = retention_ms {
                config = config.retention_ms(ms);
            }
            if let Some(b) = retention_bytes {
                config = config.retention_bytes(b);
            }
            if let Some(b) = segment_bytes {
                config = config.segment_bytes(b);
            }
            broker.create_topic(&name, config)?;
            println!("created topic {name} with {partitions} partition(s)");
            Ok(())
        }
        Command::Topic(TopicCommand::Describe { name, json }) => {
            describe_topic(&broker.topic(&name)?, json)
        }
        Command::Topic(TopicCommand::Delete { name }) => {
            broker.delete_topic(&name)?;
            println!("deleted topic {name}");
            Ok(())
        }
        Command::Produce(args) => produce(&broker, args),
        Command::Consume(args) => consume(&broker, args),
        Command::Group(GroupCommand::Describe { group, json }) => {
            describe_group(&broker, &group, json)
        }
        Command::Verify { topic, json } => verify(&broker, topic.as_deref(), json),
    }
}

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

fn topics(broker: &Broker, json: bool) -> CliResult {
    let mut names = broker.topics();
    names.sort();
    let mut out = BufWriter::new(io::stdout().lock());
    if json {
        let mut all = Vec::with_capacity(names.len());
        for name in &names {
            let info = broker.topic(name)?;
            all.push(json!({
                "name": info.name,
                "partitions": info.partitions.len(),
                "offsets": offsets_json(&info),
            }));
        }
        writeln!(out, "{}", Value::Array(all))?;
    } else {
        for name in &names {
            writeln!(out, "{name}")?;
        }
    }
    out.flush()?;
    Ok(())
}

fn describe_topic(info: &TopicInfo, json: bool) -> CliResult {
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

fn produce(broker: &Broker, args: ProduceArgs) -> CliResult {
    // Fail before reading stdin when the topic does not exist.
    broker.topic(&args.topic)?;
    let producer = broker.producer(ProducerConfig::default().acks(args.acks))?;
    let mut sep_buf = [0u8; 4];
    let sep = args
        .key_separator
        .map(|c| c.encode_utf8(&mut sep_buf).as_bytes().to_vec());
    let stdin = io::stdin().lock();
    let mut count: u64 = 0;
    for line in stdin.split(b'\n') {
        let mut line = line?;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let mut record = Record::new(args.topic.as_str());
        match sep
            .as_deref()
            .and_then(|s| find(&line, s).map(|i| (i, s.len())))
        {
            Some((i, n)) => {
                record = record.key(&line[..i]).value(&line[i + n..]);
            }
            None => record = record.value(line),
        }
        if let Some(p) = args.partition {
            record = record.partition(p);
        }
        producer.send(record)?;
        count += 1;
    }
    producer.flush()?;
    producer.close()?;
    eprintln!("{count} record(s) written to {}", args.topic);
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn consume(broker: &Broker, args: ConsumeArgs) -> CliResult {
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

fn verify(broker: &Broker, only: Option<&str>, json: bool) -> CliResult {
    let topics = match only {
        Some(t) => vec![t.to_owned()],
        None => broker.topics(),
    };
    let mut results = Vec::new();
    for t in &topics {
        let info = broker.topic(t)?;
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
                match c.poll(std::time::Duration::ZERO) {
                    Ok(msgs) if msgs.is_empty() => break,
                    Ok(msgs) => checked.messages += msgs.len() as u64,
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

fn lossy(b: Option<&[u8]>) -> Value {
    b.map_or(Value::Null, |b| {
        Value::String(String::from_utf8_lossy(b).into_owned())
    })
}

fn write_message(out: &mut impl Write, m: &Message, format: Format) -> io::Result<()> {
    match format {
        Format::Text => {
            let v = m.value().unwrap_or_default();
            writeln!(out, "{}", String::from_utf8_lossy(v))
        }
        Format::Json => {
            let v = json!({
                "topic": m.topic(),
                "partition": m.partition(),
                "offset": m.offset(),
                "timestamp": m.timestamp(),
                "key": lossy(m.key()),
                "value": lossy(m.value()),
            });
            writeln!(out, "{v}")
        }
    }
}

fn describe_group(broker: &Broker, group: &str, json: bool) -> CliResult {
    let info = broker.describe_group(group)?;
    let mut committed = info.committed.clone();
    committed.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut rows = Vec::with_capacity(committed.len());
    for (t, p, c) in &committed {
        let end = broker.topic(t).ok().and_then(|ti| {
            ti.partitions
                .iter()
                .find(|x| x.partition == *p)
                .map(|x| x.end_offset)
        });
        let lag = end.map(|e| e.saturating_sub(c.offset));
        rows.push((t.as_str(), *p, c.offset, end, lag, c.timestamp));
    }
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
        let offsets: Vec<Value> = rows
            .iter()
            .map(|(t, p, o, end, lag, ts)| {
                json!({
                    "topic": t,
                    "partition": p,
                    "committed": o,
                    "end_offset": end,
                    "lag": lag,
                    "timestamp": ts,
                })
            })
            .collect();
        let v = json!({
            "name": info.name,
            "generation": info.generation,
            "members": members,
            "offsets": offsets,
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
        for (t, p, o, end, lag, _) in &rows {
            writeln!(
                out,
                "{:<24} {:>9} {:>12} {:>12} {:>12}",
                t,
                p,
                o,
                opt(*end),
                opt(*lag)
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
