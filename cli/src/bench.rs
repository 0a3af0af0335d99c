//! `mqlite bench`: a quick produce and consume throughput check, in a
//! temporary data directory (or a temporary topic of the data directory).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::ProgressBar;
use mqlite::{Acks, BorrowedRecord, Broker, Config, ConsumerConfig, ProducerConfig, TopicConfig};
use serde_json::json;

use crate::progress::{bar, Unit};
use crate::CliResult;

/// How long consuming may see nothing new before it gives up.
const STALL: Duration = Duration::from_secs(10);

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Number of messages.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    n: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=(1 << 20)))]
    size: u64,
    /// Partitions of the benchmark topic.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    partitions: u32,
    /// Durability: 0, 1 or all.
    #[arg(long, default_value = "1", value_parser = crate::parse_acks)]
    acks: Acks,
    /// Records per send: 1 sends one by one (`Producer::send`), more sends
    /// them in groups (`Producer::send_batch`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    batch: u64,
    /// Use a temporary topic in the data directory (`--dir`, which is then
    /// locked) instead of a temporary data directory, to measure that disk.
    #[arg(long)]
    pub in_data_dir: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn acks_name(a: Acks) -> &'static str {
    match a {
        Acks::Zero => "0",
        Acks::One => "1",
        Acks::All => "all",
    }
}

/// Removes what the benchmark created, also on an error.
enum Scratch {
    Dir(PathBuf),
    Topic(String),
}

struct Cleanup<'a> {
    broker: &'a Broker,
    scratch: &'a Scratch,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        match self.scratch {
            Scratch::Dir(d) => {
                let _ = self.broker.close();
                let _ = std::fs::remove_dir_all(d);
            }
            Scratch::Topic(t) => {
                let _ = self.broker.delete_topic(t);
            }
        }
    }
}

/// Duration and rates of one phase.
struct Phase {
    seconds: f64,
    messages: u64,
    bytes: u64,
}

impl Phase {
    fn per_sec(&self) -> f64 {
        self.messages as f64 / self.seconds.max(1e-9)
    }

    fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "seconds": self.seconds,
            "messages_per_sec": self.per_sec(),
            "mb_per_sec": self.mb_per_sec(),
        })
    }
}

fn produce(broker: &Broker, topic: &str, args: &BenchArgs, pb: &ProgressBar) -> CliResult<Phase> {
    let producer = broker.producer(ProducerConfig::default().acks(args.acks))?;
    let value: Vec<u8> = (0..args.size).map(|i| b'a' + (i % 26) as u8).collect();
    let record = BorrowedRecord {
        topic,
        value: Some(&value),
        ..BorrowedRecord::default()
    };
    let group = vec![record; args.batch.min(args.n) as usize];
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < args.n {
        let k = (args.n - sent).min(args.batch);
        if k == 1 {
            producer.send_borrowed(&record)?;
        } else {
            producer.send_batch(&group[..k as usize])?;
        }
        sent += k;
        pb.inc(k);
    }
    producer.flush()?;
    let seconds = started.elapsed().as_secs_f64();
    producer.close()?;
    Ok(Phase {
        seconds,
        messages: sent,
        bytes: sent * args.size,
    })
}

fn consume(broker: &Broker, topic: &str, args: &BenchArgs, pb: &ProgressBar) -> CliResult<Phase> {
    let mut consumer = broker.consumer(ConsumerConfig::default().max_poll_records(10_000))?;
    let parts: Vec<(&str, u32)> = (0..args.partitions).map(|p| (topic, p)).collect();
    consumer.assign(&parts)?;
    for p in 0..args.partitions {
        consumer.seek_to_beginning(topic, p)?;
    }
    let started = Instant::now();
    let mut last_progress = Instant::now();
    let (mut messages, mut bytes) = (0u64, 0u64);
    while messages < args.n {
        let msgs = consumer.poll(Duration::from_millis(100))?;
        if msgs.is_empty() {
            if last_progress.elapsed() > STALL {
                return Err(format!("consumed only {messages} of {} messages", args.n).into());
            }
            continue;
        }
        last_progress = Instant::now();
        messages += msgs.len() as u64;
        bytes += msgs
            .iter()
            .map(|m| m.value().map_or(0, <[u8]>::len) as u64)
            .sum::<u64>();
        pb.inc(msgs.len() as u64);
    }
    let seconds = started.elapsed().as_secs_f64();
    consumer.close();
    Ok(Phase {
        seconds,
        messages,
        bytes,
    })
}

pub fn bench(data: &Path, args: BenchArgs) -> CliResult {
    let pid = std::process::id();
    let (broker, scratch, topic) = if args.in_data_dir {
        let broker = Broker::open(data, Config::default())?;
        let topic = format!("mqlite-bench-{pid}");
        (broker, Scratch::Topic(topic.clone()), topic)
    } else {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("mqlite-bench-{pid}-{nanos}"));
        let broker = Broker::open(&dir, Config::default())?;
        (broker, Scratch::Dir(dir), "bench".to_owned())
    };
    // Created before the topic, so that a failed creation removes the
    // temporary directory too.
    let cleanup = Cleanup {
        broker: &broker,
        scratch: &scratch,
    };
    broker.create_topic(&topic, TopicConfig::new(args.partitions))?;
    let pb = bar(args.n, Unit::Messages, "produce");
    let produced = produce(&broker, &topic, &args, &pb);
    pb.finish_and_clear();
    let produced = produced?;
    let pb = bar(args.n, Unit::Messages, "consume");
    let consumed = consume(&broker, &topic, &args, &pb);
    pb.finish_and_clear();
    let consumed = consumed?;
    let place = match &scratch {
        Scratch::Dir(d) => d.display().to_string(),
        Scratch::Topic(t) => format!("topic {t} of {}", data.display()),
    };
    drop(cleanup);

    let mut out = io::stdout().lock();
    if args.json {
        let v = json!({
            "messages": args.n,
            "size": args.size,
            "partitions": args.partitions,
            "acks": acks_name(args.acks),
            "batch": args.batch,
            "produce": produced.json(),
            "consume": consumed.json(),
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(
            out,
            "{} messages of {} bytes, {} partition(s), acks={}, {} per send, in {place}",
            args.n,
            args.size,
            args.partitions,
            acks_name(args.acks),
            args.batch
        )?;
        for (name, p) in [("produce", &produced), ("consume", &consumed)] {
            writeln!(
                out,
                "{name}: {:>10.3} s {:>14.0} msg/s {:>10.1} MB/s",
                p.seconds,
                p.per_sec(),
                p.mb_per_sec()
            )?;
        }
    }
    Ok(())
}
