//! `mqlite tail`: follows a topic like `tail -f`, alongside the process
//! that writes it. Two ways, chosen at start:
//!
//! - The data directory is opened read-only (shared mode), and a consumer
//!   assigned the topic's partitions polls: it waits on the directory's
//!   doorbell, so a record shows up as soon as the writer appends it, in
//!   whatever process. This is the way while the directory is free or held
//!   by shared-mode processes. Meanwhile an exclusive-mode open of the
//!   directory fails (as with any shared handle).
//! - While an exclusive-mode process holds the directory (the read-only
//!   open gets `Locked`), or with `--files`, the directory is not opened at
//!   all (no lock): each partition is read by a [`Follower`], which finds
//!   new batches by looking again: when nothing new is there, `tail` sleeps
//!   [`POLL_INTERVAL`] (50 ms) before the next look, so records show up
//!   with 25 ms of delay on average.

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args;
use mqlite::log::follow::{Follower, POLL_INTERVAL};
use mqlite::{Broker, ConsumerConfig, Error};

use crate::consume::write_message;
use crate::open::{self, HeldExclusively};
use crate::output::{write_record, Format, Rec};
use crate::topicdir::TopicDir;
use crate::CliResult;

/// Records taken from one partition before the next one gets its turn.
const ROUND: usize = 1000;
/// How often the topic's partition count is read again.
const RESCAN: Duration = Duration::from_secs(1);
/// Longest wait of one consumer poll (the doorbell wakes it earlier).
const WAIT: Duration = Duration::from_millis(500);

#[derive(Args, Debug)]
pub struct TailArgs {
    /// Topic to follow.
    topic: String,
    /// Only this partition.
    #[arg(long)]
    partition: Option<u32>,
    /// Print the retained records first, then follow (default: only records
    /// written from now on).
    #[arg(long)]
    from_beginning: bool,
    /// Exit after this many records.
    #[arg(long)]
    max: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Read the segment files without opening the data directory (no lock,
    /// a 50 ms poll), even when it could be opened read-only: so that an
    /// application may open it in exclusive mode while tail runs.
    #[arg(long)]
    files: bool,
}

struct Followed {
    partition: u32,
    follower: Follower,
    skipped: u64,
}

fn follower(topic: &TopicDir, partition: u32, from_beginning: bool) -> CliResult<Followed> {
    let mut f = Follower::open(topic.partition_dir(partition)?)?
        .with_max_batch_bytes(topic.config.max_message_bytes as usize);
    if !from_beginning {
        f.seek_to_end()?;
    }
    Ok(Followed {
        partition,
        follower: f,
        skipped: 0,
    })
}

pub fn tail(data: &Path, args: TailArgs) -> CliResult {
    let topic = TopicDir::open(data, &args.topic)?;
    if let Some(p) = args.partition {
        topic.partition_dir(p)?; // an unknown partition is an error either way
    }
    if !args.files {
        match open::readonly(data) {
            Ok(broker) => return tail_shared(&broker, &args),
            // An exclusive-mode process holds it: read the files.
            Err(e) if e.is::<HeldExclusively>() => {}
            Err(e) => return Err(e),
        }
    }
    tail_files(data, topic, &args)
}

/// Follows with a consumer of a read-only handle.
fn tail_shared(broker: &Broker, args: &TailArgs) -> CliResult {
    let name = args.topic.as_str();
    let mut consumer = broker.consumer(ConsumerConfig::default())?;
    let mut count = match args.partition {
        Some(_) => 0,
        None => partitions(broker, name)?,
    };
    let wanted: Vec<(&str, u32)> = match args.partition {
        Some(p) => vec![(name, p)],
        None => (0..count).map(|p| (name, p)).collect(),
    };
    consumer.assign(&wanted)?;
    for &(t, p) in &wanted {
        if args.from_beginning {
            consumer.seek_to_beginning(t, p)?;
        } else {
            consumer.seek_to_end(t, p)?;
        }
    }
    let mut out = BufWriter::new(io::stdout().lock());
    let mut seen: u64 = 0;
    let mut skipped: u64 = 0;
    let mut rescanned = Instant::now();
    loop {
        for m in consumer.poll(WAIT)? {
            write_message(&mut out, &m, args.format)?;
            seen += 1;
            if args.max.is_some_and(|max| seen >= max) {
                out.flush()?;
                return Ok(());
            }
        }
        out.flush()?;
        let now_skipped = consumer.stats().skipped;
        if now_skipped > skipped {
            eprintln!(
                "mqlite: {} record(s) of {name} were deleted by retention before they were read",
                now_skipped - skipped
            );
            skipped = now_skipped;
        }
        // Partitions added to the topic meanwhile: follow them from their
        // start (everything in them is new), the others from where they are.
        if args.partition.is_none() && rescanned.elapsed() >= RESCAN {
            rescanned = Instant::now();
            let now = partitions(broker, name)?;
            if now > count {
                let mut at = Vec::new();
                for p in 0..count {
                    at.push(consumer.position(name, p)?);
                }
                let all: Vec<(&str, u32)> = (0..now).map(|p| (name, p)).collect();
                consumer.assign(&all)?;
                for p in 0..now {
                    match at.get(p as usize) {
                        Some(&o) => consumer.seek(name, p, o)?,
                        None => consumer.seek_to_beginning(name, p)?,
                    }
                }
                count = now;
            }
        }
    }
}

/// The number of partitions of `topic`.
fn partitions(broker: &Broker, topic: &str) -> Result<u32, Error> {
    Ok(broker.topic(topic)?.partitions.len() as u32)
}

/// Follows by reading the segment files (no lock).
fn tail_files(data: &Path, mut topic: TopicDir, args: &TailArgs) -> CliResult {
    let mut followed = Vec::new();
    match args.partition {
        Some(p) => followed.push(follower(&topic, p, args.from_beginning)?),
        None => {
            for p in 0..topic.config.partitions {
                followed.push(follower(&topic, p, args.from_beginning)?);
            }
        }
    }
    let mut out = BufWriter::new(io::stdout().lock());
    let mut seen: u64 = 0;
    let mut rescanned = Instant::now();
    loop {
        let mut any = false;
        for f in &mut followed {
            let records = f.follower.poll(ROUND)?;
            any |= !records.is_empty();
            for r in &records {
                let rec = Rec {
                    topic: &args.topic,
                    partition: f.partition,
                    offset: r.offset,
                    timestamp: r.timestamp,
                    key: r.key.as_deref(),
                    value: r.value.as_deref(),
                    headers: &r.headers,
                };
                write_record(&mut out, &rec, args.format)?;
                seen += 1;
                if args.max.is_some_and(|m| seen >= m) {
                    out.flush()?;
                    return Ok(());
                }
            }
            let skipped = f.follower.skipped();
            if skipped > f.skipped {
                eprintln!(
                    "mqlite: {} record(s) of {}/{} were deleted by retention before they were read",
                    skipped - f.skipped,
                    args.topic,
                    f.partition
                );
                f.skipped = skipped;
            }
        }
        out.flush()?;
        if any {
            continue;
        }
        // Partitions added to the topic meanwhile: follow them from their
        // start (everything in them is new).
        if args.partition.is_none() && rescanned.elapsed() >= RESCAN {
            rescanned = Instant::now();
            if let Ok(t) = TopicDir::open(data, &args.topic) {
                topic = t;
                for p in followed.len() as u32..topic.config.partitions {
                    followed.push(follower(&topic, p, true)?);
                }
            }
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}
