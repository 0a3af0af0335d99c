//! `mqlite mirror`: copies topics between the data directory and a Kafka
//! cluster (`mqlite::Mirror`), once or until stopped, and says how far
//! behind a copy is (`--status`).
//!
//! A running copy writes its stats every second to
//! `<dir>/mirrors/<to|from>.<topic>.json` (pid, records copied, rate over
//! the last second, errors, lag), which `--status` shows beside the lag it
//! reads from the destination itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use mqlite::kafka::mirror;
use mqlite::{Broker, Config, Mirror, MirrorOptions, MirrorStats};
use serde_json::{json, Value};

use crate::{open, CliResult};

/// How often a running copy writes its stats file.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// A stats file older than this is from a copy that is no longer running
/// (it was stopped, or killed before it could say so).
const STALE_AFTER: Duration = Duration::from_secs(3);

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
    /// the last record copied); errors that may pass are counted and the
    /// copy starts again.
    #[arg(long, conflicts_with = "status")]
    follow: bool,
    /// Copy nothing: print how far the destination is behind, and the
    /// stats of a copy running on this directory.
    #[arg(long)]
    status: bool,
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
        self.from.is_some() && !self.status
    }

    fn direction(&self) -> &'static str {
        if self.to.is_some() {
            "to"
        } else {
            "from"
        }
    }
}

/// The stats file of the copy of `topic` in `direction` on `dir`.
fn stats_file(dir: &Path, direction: &str, topic: &str) -> PathBuf {
    dir.join("mirrors")
        .join(format!("{direction}.{topic}.json"))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A copy's stats as its stats file holds them.
fn stats_json(url: &str, s: &MirrorStats, recent_rate: f64, running: bool) -> Value {
    json!({
        "pid": std::process::id(),
        "cluster": url,
        "running": running,
        "updated_ms": now_ms(),
        "copied": s.copied,
        "batches": s.batches,
        "rate": recent_rate,
        "average_rate": s.rate(),
        "errors": s.errors,
        "last_error": s.last_error,
        "lag": s.lag(),
        "elapsed_ms": s.elapsed.as_millis() as u64,
    })
}

/// Writes `value` to `path` whole (a reader never sees half of it).
fn write_whole(path: &Path, value: &Value) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension(format!("json.{}", std::process::id()));
    std::fs::write(&tmp, value.to_string())?;
    std::fs::rename(&tmp, path)
}

/// Opens the cluster at `url` with `properties` (`key=value`).
fn open_cluster(url: &str, properties: &[String]) -> Result<Broker, Box<dyn std::error::Error>> {
    let mut config = Config::default();
    for p in properties {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("--property {p:?}: expected key=value"))?;
        config = config.kafka_property(k, v);
    }
    if mqlite::kafka::bootstrap_servers(url).is_none() {
        return Err(format!(
            "{url:?} is not a cluster address (expected {}host:port,...)",
            mqlite::kafka::URL_SCHEME
        )
        .into());
    }
    Ok(Broker::open(url, config)?)
}

/// Runs `mqlite mirror`.
pub fn mirror(dir: &Path, args: MirrorArgs) -> CliResult {
    let url = args
        .to
        .as_deref()
        .or(args.from.as_deref())
        .unwrap_or_default()
        .to_owned();
    let cluster = open_cluster(&url, &args.properties)?;
    let to_cluster = args.to.is_some();
    let broker = if to_cluster || args.status {
        open::readonly(dir)?
    } else {
        open::writable(dir)?
    };
    let topics = if !args.topics.is_empty() {
        args.topics.clone()
    } else if to_cluster {
        broker.topics()
    } else {
        return Err("--from needs at least one --topic".into());
    };
    let (source, dest) = if to_cluster {
        (&broker, &cluster)
    } else {
        (&cluster, &broker)
    };
    if args.status {
        return status(dir, args.direction(), source, dest, &topics);
    }
    let mirrors: Vec<Mirror> = topics
        .iter()
        .map(|t| {
            Mirror::new(
                t,
                MirrorOptions {
                    once: !args.follow,
                    max_batch: args.batch.max(1),
                    ..MirrorOptions::default()
                },
            )
        })
        .collect::<mqlite::Result<_>>()?;
    let done = AtomicBool::new(false);
    let results: Vec<mqlite::Result<MirrorStats>> = std::thread::scope(|s| {
        s.spawn(|| report(dir, args.direction(), &url, &mirrors, &done));
        let handles: Vec<_> = mirrors
            .iter()
            .map(|m| s.spawn(move || m.run(source, dest)))
            .collect();
        let results = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(mqlite::Error::InvalidArgument("copy panicked".into())))
            })
            .collect();
        done.store(true, Ordering::Release);
        results
    });
    let mut failed = None;
    for (t, r) in topics.iter().zip(results) {
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

/// Writes the stats file of each of `mirrors` every second until `done`,
/// then once more, marked not running. A file that cannot be written is
/// said once, and the copies go on.
fn report(dir: &Path, direction: &str, url: &str, mirrors: &[Mirror], done: &AtomicBool) {
    let mut last: Vec<(Instant, u64)> = vec![(Instant::now(), 0); mirrors.len()];
    let mut warned = false;
    loop {
        let finished = done.load(Ordering::Acquire);
        for (m, (at, copied)) in mirrors.iter().zip(&mut last) {
            let s = m.stats();
            let secs = at.elapsed().as_secs_f64();
            let rate = if secs > 0.0 {
                (s.copied - *copied) as f64 / secs
            } else {
                0.0
            };
            (*at, *copied) = (Instant::now(), s.copied);
            let path = stats_file(dir, direction, m.topic());
            if let Err(e) = write_whole(&path, &stats_json(url, &s, rate, !finished)) {
                if !warned {
                    eprintln!("mqlite: cannot write {}: {e}", path.display());
                    warned = true;
                }
            }
        }
        if finished {
            return;
        }
        let until = Instant::now() + REPORT_EVERY;
        while Instant::now() < until && !done.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `mqlite mirror --status`: per topic, the lag read from the destination
/// and what the stats file of the last copy says.
fn status(
    dir: &Path,
    direction: &str,
    source: &Broker,
    dest: &Broker,
    topics: &[String],
) -> CliResult {
    for t in topics {
        let s = mirror::status(source, dest, t)?;
        let parts: Vec<String> = s
            .partitions
            .iter()
            .map(|(p, next, end)| format!("{p}: {next}/{end}"))
            .collect();
        println!(
            "{t}: {} left to copy (partition: next/end {})",
            s.lag(),
            parts.join(", ")
        );
        let file = stats_file(dir, direction, t);
        let Ok(text) = std::fs::read_to_string(&file) else {
            println!("  no copy has run from this directory");
            continue;
        };
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a stats file: {e}", file.display()))?;
        let age_ms = now_ms().saturating_sub(v["updated_ms"].as_u64().unwrap_or(0));
        let state = if v["running"].as_bool() == Some(true)
            && Duration::from_millis(age_ms) < STALE_AFTER
        {
            format!("running (pid {})", v["pid"])
        } else if v["running"].as_bool() == Some(true) {
            format!(
                "not heard from for {:.0} s (pid {} was stopped or killed)",
                age_ms as f64 / 1000.0,
                v["pid"]
            )
        } else {
            format!("ended {:.0} s ago", age_ms as f64 / 1000.0)
        };
        println!(
            "  copy {state}: copied {} records in {} writes, {:.0} records/s now, \
             {:.0} on average, {} errors{}",
            v["copied"],
            v["batches"],
            v["rate"].as_f64().unwrap_or(0.0),
            v["average_rate"].as_f64().unwrap_or(0.0),
            v["errors"],
            v["last_error"]
                .as_str()
                .map(|e| format!(" (last: {e})"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
