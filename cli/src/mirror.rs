//! `mqlite mirror`: copies topics between the data directory and a Kafka
//! cluster (`mqlite::kafka::mirror`), once or until stopped.

use std::path::Path;

use clap::Args;
use mqlite::kafka::mirror::{self, MirrorOptions, MirrorStats};
use mqlite::kafka::KafkaBroker;

use crate::{open, CliResult};

/// Arguments of `mqlite mirror`.
#[derive(Args, Debug)]
pub struct MirrorArgs {
    /// Copy the directory's topics to this cluster (`kafka://host:port,...`).
    #[arg(long, conflicts_with = "from", required_unless_present = "from")]
    to: Option<String>,
    /// Copy this cluster's topics (`kafka://host:port,...`) into the directory.
    #[arg(long)]
    from: Option<String>,
    /// A topic to copy (repeat for several); default: every topic of the
    /// directory (with `--to`).
    #[arg(long = "topic")]
    topics: Vec<String>,
    /// Keep copying what arrives, until the process is stopped (a stop at
    /// any moment loses and doubles nothing: the next run resumes after
    /// the last record copied).
    #[arg(long)]
    follow: bool,
    /// Records per write to the destination (at most).
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// A librdkafka property for the cluster connection, `key=value`
    /// (repeat for several), such as `security.protocol=SSL`.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
}

impl MirrorArgs {
    /// Whether the copy writes into the directory (which it may create).
    pub fn writes_dir(&self) -> bool {
        self.from.is_some()
    }
}

/// Runs `mqlite mirror`.
pub fn mirror(dir: &Path, args: MirrorArgs) -> CliResult {
    let props: Vec<(&str, &str)> = args
        .properties
        .iter()
        .map(|p| {
            p.split_once('=')
                .ok_or_else(|| format!("--property {p:?}: expected key=value"))
        })
        .collect::<Result<_, _>>()?;
    let url = args
        .to
        .as_deref()
        .or(args.from.as_deref())
        .unwrap_or_default();
    let cluster = KafkaBroker::open(url, &props)?;
    let to_cluster = args.to.is_some();
    let broker = if to_cluster {
        open::readonly(dir)?
    } else {
        open::writable(dir)?
    };
    let topics = if args.topics.is_empty() && to_cluster {
        broker.topics()
    } else if args.topics.is_empty() {
        return Err("--from needs at least one --topic".into());
    } else {
        args.topics.clone()
    };
    let options = MirrorOptions {
        once: !args.follow,
        max_batch: args.batch.max(1),
        ..MirrorOptions::default()
    };
    let results: Vec<(String, mqlite::Result<MirrorStats>)> = std::thread::scope(|s| {
        let handles: Vec<_> = topics
            .iter()
            .map(|t| {
                let (broker, cluster, options) = (&broker, &cluster, &options);
                s.spawn(move || {
                    if to_cluster {
                        mirror::to_cluster(broker, cluster, t, options)
                    } else {
                        mirror::from_cluster(cluster, broker, t, options)
                    }
                })
            })
            .collect();
        topics
            .iter()
            .cloned()
            .zip(handles.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(mqlite::Error::InvalidArgument("copy panicked".into())))
            }))
            .collect()
    });
    let mut failed = None;
    for (t, r) in results {
        match r {
            Ok(s) => println!(
                "{t}: copied {} records in {} writes, {} left to copy",
                s.copied,
                s.batches,
                s.lag()
            ),
            Err(e) => {
                eprintln!("mqlite: {t}: {e}");
                failed = Some(e);
            }
        }
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
