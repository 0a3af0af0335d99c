//! `mqlite`: command-line tool for an mqlite data directory.
//!
//! Lists, creates, describes and deletes topics, produces records from
//! stdin or a file, consumes them to stdout, follows topics (`tail`),
//! describes consumer groups, verifies, repairs and dumps the log, and
//! measures throughput. Every command names the data directory with `--dir`
//! (or `MQLITE_DIR`, default `./data`). The reading commands (`topics`,
//! `topic describe`, `consume`, `groups`, `group describe`, `tail`) open it
//! read-only, so they work alongside an application that opened it in
//! shared mode; an application in exclusive mode excludes them (they say
//! so), except `tail`, which then reads the files. The writing commands open
//! it in exclusive mode, or shared when a shared-mode application holds it.
//! `dump` and `verify` read the files without opening the directory, change
//! nothing and work alongside any owner (see `open.rs`).
//!
//! Only `topic create` creates a missing data directory; every other command fails on one (`no such data directory:
//! <path>`), and every command on a `--dir` that is a file.
//!
//! Errors go to stderr as one line, `mqlite: <error>`, with exit code 1;
//! usage errors (and `repair` refusing to cut unconfirmed) exit with code 2.
//! The reference is `docs/cli.md`.

mod bench;
mod consume;
mod datadir;
mod dump;
mod groups;
mod mirror;
mod open;
mod output;
mod produce;
mod progress;
mod repair;
mod since;
mod tail;
mod topicdir;
mod topics;
mod verify;

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mqlite::{Acks, Error, TopicConfig};

/// Result of a command: any error becomes one line on stderr.
pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// A command that refused to run as asked (exit code 2, like a usage
/// error): `repair` without confirmation.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

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
    /// Writes records to a topic: the lines (or length-prefixed frames) of
    /// stdin or of a file.
    Produce(produce::ProduceArgs),
    /// Reads records of a topic to stdout and exits once caught up.
    Consume(consume::ConsumeArgs),
    /// Follows a topic like `tail -f`, alongside the process that writes:
    /// read-only in shared mode, or reading the files while an
    /// exclusive-mode process holds the directory (or with `--files`).
    Tail(tail::TailArgs),
    /// Lists the consumer groups with their lag.
    Groups {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Describes consumer groups.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Checks every batch of a topic (or of all topics), the topic files and
    /// the groups' committed offsets without changing anything or taking the
    /// lock; exits 1 on damage (a torn tail after a crash is a warning).
    Verify {
        /// Only this topic.
        topic: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Says what recovery will cut from the damaged partitions, then, once
    /// confirmed, opens the directory so that recovery cuts it.
    Repair(repair::RepairArgs),
    /// Prints the batch headers of a partition's segments (no lock taken);
    /// exits 1 when a batch is damaged.
    Dump(dump::DumpArgs),
    /// Measures produce and consume throughput in a temporary directory.
    Bench(bench::BenchArgs),
    /// Copies topics from the directory to a Kafka cluster (`--to`) or from
    /// a cluster into the directory (`--from`), once or with `--follow`
    /// until stopped; a stop at any moment loses and doubles nothing.
    Mirror(mirror::MirrorArgs),
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

/// Parses `--acks`: 0, 1, or all (-1).
pub fn parse_acks(s: &str) -> Result<Acks, String> {
    let n = match s {
        "all" | "-1" => -1,
        "0" => 0,
        "1" => 1,
        _ => return Err(format!("expected 0, 1 or all, got {s:?}")),
    };
    Acks::from_i32(n).map_err(|e| e.to_string())
}

/// Whether `e` is a closed stdout (`mqlite ... | head`): not an error.
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<io::Error>()
        .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<Refused>().is_some() => {
            eprintln!("mqlite: {}", e.to_string().replace('\n', " "));
            ExitCode::from(2)
        }
        Err(e) => {
            // One line, whatever the error's text holds.
            let msg = e.to_string().replace('\n', " ");
            match e.downcast_ref::<Error>() {
                Some(Error::Locked { .. }) => {
                    eprintln!("mqlite: {msg} (stop the process using it and retry)");
                }
                _ => eprintln!("mqlite: {msg}"),
            }
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> CliResult {
    // Commands that read the files without the lock, and `repair`, which
    // checks them before it opens the directory.
    match &cli.command {
        Command::Topic(TopicCommand::Create { .. }) => datadir::creatable(&cli.dir)?,
        // Its own temporary directory unless `--in-data-dir`.
        Command::Bench(args) if !args.in_data_dir => {}
        Command::Mirror(args) if args.writes_dir() => datadir::creatable(&cli.dir)?,
        _ => datadir::existing(&cli.dir)?,
    }
    let command = match cli.command {
        Command::Tail(args) => return tail::tail(&cli.dir, args),
        Command::Dump(args) => return dump::dump(&cli.dir, args),
        Command::Verify { topic, json } => return verify::verify(&cli.dir, topic.as_deref(), json),
        Command::Repair(args) => return repair::repair(&cli.dir, args),
        Command::Bench(args) => return bench::bench(&cli.dir, args),
        Command::Mirror(args) => return mirror::mirror(&cli.dir, args),
        other => other,
    };
    let broker = match &command {
        Command::Topics { .. }
        | Command::Topic(TopicCommand::Describe { .. })
        | Command::Groups { .. }
        | Command::Group(GroupCommand::Describe { .. }) => open::readonly(&cli.dir)?,
        Command::Consume(args) if args.group.is_none() => open::readonly(&cli.dir)?,
        _ => open::writable(&cli.dir)?,
    };
    match command {
        Command::Topics { json } => topics::topics(&broker, json),
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
            topics::describe_topic(&broker.topic(&name)?, json)
        }
        Command::Topic(TopicCommand::Delete { name }) => {
            broker.delete_topic(&name)?;
            println!("deleted topic {name}");
            Ok(())
        }
        Command::Produce(args) => produce::produce(&broker, args),
        Command::Consume(args) => consume::consume(&broker, args),
        Command::Groups { json } => groups::groups(&broker, json),
        Command::Group(GroupCommand::Describe { group, json }) => {
            groups::describe_group(&broker, &group, json)
        }
        Command::Tail(_)
        | Command::Dump(_)
        | Command::Bench(_)
        | Command::Mirror(_)
        | Command::Verify { .. }
        | Command::Repair(_) => {
            unreachable!("handled above")
        }
    }
}
