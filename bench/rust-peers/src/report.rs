//! The shared bench result format (suite "rust"), the machine description,
//! and the table printed while the rows run.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::runner::{Context, Group, Res};

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Rows of one group are compared with each other.
    pub group: String,
    /// What was measured.
    pub system: String,
    /// The durability mode, in words.
    pub durability: String,
    /// Messages per run.
    pub n: u64,
    /// Payload bytes per message.
    pub size: usize,
    /// Median messages per second.
    pub msgs_per_s: f64,
    /// Messages per second of each run, in the order they ran (the runs of
    /// a group's rows are interleaved, so run `i` of every row of the
    /// group ran in the same minutes).
    pub runs_msgs_per_s: Vec<f64>,
    /// The slowest run's messages per second.
    pub msgs_per_s_min: f64,
    /// The fastest run's messages per second.
    pub msgs_per_s_max: f64,
    /// Median payload MB (10^6 bytes) per second.
    pub mb_per_s: f64,
    /// The mqlite row the group's others are compared with.
    pub reference: bool,
    /// A raw baseline: no queue, a ceiling.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub baseline: bool,
    /// Anything that makes the row differ from the others of its group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Where the figures were measured.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model.
    pub cpu: String,
    /// Logical CPUs available.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// Always null in this suite.
    pub python: Option<String>,
    /// `rustc --version` of the build.
    pub rustc: Option<String>,
}

/// The whole result file.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always "rust".
    pub suite: &'static str,
    /// UTC start time, ISO 8601.
    pub date: String,
    /// The machine.
    pub machine: Machine,
    /// Runs per row (figures are medians).
    pub runs: usize,
    /// Always true: the runs of a group's rows alternate.
    pub interleaved: bool,
    /// What reproduces the run.
    pub command: String,
    /// What the person running it says of the machine (`MQLITE_BENCH_MACHINE`:
    /// `quiet` or `shared`), as given.
    pub machine_state: Option<String>,
    /// The 1-minute load average at the start and at the end.
    pub load_avg: LoadAvg,
    /// The mqlite commit measured.
    pub git: Git,
    /// The rows, group by group.
    pub rows: Vec<Row>,
    /// Lines about the whole run (peers left out of a group, and why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The 1-minute load average, from /proc/loadavg.
#[derive(Debug, Clone, Serialize)]
pub struct LoadAvg {
    /// When the run started.
    pub start: Option<f64>,
    /// When it ended (set by [`Report::write`]).
    pub end: Option<f64>,
}

/// The commit measured.
#[derive(Debug, Clone, Serialize)]
pub struct Git {
    /// `git rev-parse HEAD` of the mqlite checkout.
    pub commit: Option<String>,
    /// Whether tracked files differed from it.
    pub dirty: Option<bool>,
}

/// The 1-minute load average now.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn git() -> Git {
    let dir = env!("CARGO_MANIFEST_DIR");
    Git {
        commit: output("git", &["-C", dir, "rev-parse", "HEAD"]),
        dirty: output(
            "git",
            &["-C", dir, "status", "--porcelain", "--untracked-files=no"],
        )
        .map(|s| !s.is_empty()),
    }
}

impl Report {
    /// An empty report dated now; `command` is what reproduces it.
    pub fn new(runs: usize, command: String) -> Report {
        Report {
            suite: "rust",
            date: utc_now(),
            machine: machine(),
            runs,
            interleaved: true,
            command,
            machine_state: std::env::var("MQLITE_BENCH_MACHINE").ok(),
            load_avg: LoadAvg {
                start: load_average(),
                end: None,
            },
            git: git(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Writes the report as JSON to `path`, creating its directory.
    pub fn write(&mut self, path: &Path) -> Res<()> {
        self.load_avg.end = load_average();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).ctx("creating the output directory")?;
        }
        let text = serde_json::to_string_pretty(self).ctx("encoding the report")?;
        std::fs::write(path, text + "\n").ctx("writing the report")
    }
}

fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| std::env::consts::OS.to_owned());
    let rustc = env!("PEERS_RUSTC_VERSION");
    Machine {
        cpu,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel,
        python: None,
        rustc: (!rustc.is_empty()).then(|| rustc.to_owned()),
    }
}

/// Now, as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (the usual
/// era-based conversion: 400-year eras of 146,097 days, years starting in
/// March so that the leap day ends them).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Prints a group's heading, its note and the peers it leaves out.
pub fn print_heading(group: &Group) {
    println!();
    println!("== {} (n = {}) ==", group.name, group.n);
    if let Some(note) = &group.note {
        println!("   note: {note}");
    }
    for why in &group.left_out {
        println!("   left out: {why}");
    }
    println!(
        "  {:<44} {:>14} {:>10} {:>8}  (min-max msgs/s)",
        "system", "msgs/s", "MB/s", "vs ref"
    );
}

/// Prints one row, with its ratio to the reference when that was measured.
pub fn print_row(row: &Row, reference: Option<f64>) {
    let ratio = reference.map_or_else(|| "-".to_owned(), |r| format!("{:.2}x", row.msgs_per_s / r));
    let scaled = row
        .note
        .as_deref()
        .filter(|n| n.contains("scaled down"))
        .map_or(String::new(), |_| format!("  (n = {})", row.n));
    println!(
        "  {:<44} {:>14.0} {:>10.1} {:>8}  ({:.0}-{:.0}){}",
        row.system,
        row.msgs_per_s,
        row.mb_per_s,
        ratio,
        row.msgs_per_s_min,
        row.msgs_per_s_max,
        scaled
    );
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
    }
}
