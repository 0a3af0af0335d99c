//! `mqlite tail`: follows a topic like `tail -f`, without opening the data
//! directory (no lock), so it works while another process owns it.
//!
//! Each partition is read by a [`Follower`], which finds new batches by
//! looking again: when nothing new is there, `tail` sleeps
//! [`POLL_INTERVAL`] (50 ms) before the next look, so records show up with
//! 25 ms of delay on average.

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args;
use mqlite::log::follow::{Follower, POLL_INTERVAL};

use crate::output::{write_record, Format, Rec};
use crate::topicdir::TopicDir;
use crate::CliResult;

/// Records taken from one partition before the next one gets its turn.
const ROUND: usize = 1000;
/// How often the topic's partition count is read again.
const RESCAN: Duration = Duration::from_secs(1);

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
    let mut topic = TopicDir::open(data, &args.topic)?;
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
