//! `mqlite repair`: runs the recovery that opening the directory runs, after
//! saying what it will cut. First the read-only check of `verify`; then,
//! once confirmed (`--yes`, or an answer on a terminal), the damaged
//! partitions are marked for a full check
//! ([`request_full_recovery`]: recovery otherwise trusts what was flushed
//! before a crash and everything after a clean close), the directory is
//! opened (taking its lock: recovery runs) and closed again, the recovery
//! statistics of every partition are printed, and the check runs again to
//! show what is left.

use std::io::{self, BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use mqlite::log::check::request_full_recovery;
use mqlite::{Broker, Config, RecoveryStats};

use crate::verify::{check_dir, cut_text, describe, to_text, Report};
use crate::{CliResult, Refused};

#[derive(Args, Debug)]
pub struct RepairArgs {
    /// Cut without asking.
    #[arg(long)]
    yes: bool,
}

/// What the check found that recovery does not fix, as lines.
fn problems(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for p in &r.parts {
        match &p.check {
            Err(e) => out.push(format!("{}/{}: {e}", p.topic, p.partition)),
            Ok(c) => out.extend(
                c.issues
                    .iter()
                    .map(|i| format!("{}/{}: {}", p.topic, p.partition, describe(r, i))),
            ),
        }
    }
    for t in &r.topics {
        out.extend(t.problems.iter().map(|p| {
            let file = r.show(&t.file);
            format!(
                "topic {}: {}: {file}: {}",
                t.topic,
                p.severity.name(),
                p.reason
            )
        }));
    }
    for g in &r.groups {
        out.extend(g.problems.iter().map(|p| {
            let file = r.show(&g.file);
            format!(
                "group {}: {}: {file}: {}",
                g.group,
                p.severity.name(),
                p.reason
            )
        }));
    }
    out
}

fn stats_text(s: &RecoveryStats) -> String {
    format!(
        "recovery cut {} bytes ({} batch(es); {} torn tail(s), {} corruption(s), \
         {} lost record(s), {} bytes moved aside)",
        s.truncated_bytes,
        s.dropped_batches,
        s.torn_tails,
        s.corruptions,
        s.lost_records,
        s.quarantined_bytes
    )
}

/// Asks on the terminal; `Ok(false)` unless the answer is yes.
fn confirm() -> CliResult<bool> {
    eprint!("cut these bytes? [y/N] ");
    io::stderr().flush()?;
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// `mqlite repair [--yes]`.
pub fn repair(data: &Path, args: RepairArgs) -> CliResult {
    let before = check_dir(data, None, true)?;
    let mut out = io::stdout().lock();
    let cuts: Vec<String> = before
        .parts
        .iter()
        .filter_map(|p| {
            let c = p.check.as_ref().ok()?.cut.as_ref()?;
            Some(format!(
                "  {}/{}: {}",
                p.topic,
                p.partition,
                cut_text(&before, c)
            ))
        })
        .collect();
    if cuts.is_empty() {
        let left = problems(&before);
        if before.summary().is_none() {
            writeln!(out, "nothing to repair: no damage found")?;
            for l in &left {
                writeln!(out, "  {l}")?;
            }
            return Ok(());
        }
        write!(out, "{}", to_text(&before))?;
        return Err(format!(
            "nothing for recovery to cut, but {}; repair does not fix that",
            before.summary().unwrap_or_default()
        )
        .into());
    }
    writeln!(out, "found:")?;
    for l in problems(&before) {
        writeln!(out, "  {l}")?;
    }
    writeln!(out, "recovery will cut:")?;
    for c in &cuts {
        writeln!(out, "{c}")?;
    }
    out.flush()?;
    if !args.yes {
        if !io::stdin().is_terminal() {
            return Err(Box::new(Refused(
                "not cutting without confirmation: stdin is not a terminal \
                 (pass --yes to cut); nothing changed"
                    .to_owned(),
            )));
        }
        if !confirm()? {
            return Err("not confirmed; nothing changed".into());
        }
    }
    {
        // Recovery checks every batch of these partitions, not only those
        // after the recovery point of an unclean shutdown.
        let dirs: Vec<PathBuf> = before
            .parts
            .iter()
            .filter(|p| p.check.as_ref().is_ok_and(|c| c.cut.is_some()))
            .filter_map(|p| Some(p.check.as_ref().ok()?.dir.clone()))
            .collect();
        request_full_recovery(data, &dirs)?;
        let broker = Broker::open(data, Config::default())?;
        for t in broker.topics() {
            for p in broker.topic(&t)?.partitions {
                if p.recovery != RecoveryStats::default() {
                    writeln!(out, "{t}/{}: {}", p.partition, stats_text(&p.recovery))?;
                }
            }
        }
        broker.close()?;
    }
    let after = check_dir(data, None, false)?;
    match after.summary() {
        None => {
            writeln!(out, "repaired: verify finds no damage")?;
            Ok(())
        }
        Some(s) => {
            writeln!(out, "left after recovery:")?;
            for l in problems(&after) {
                writeln!(out, "  {l}")?;
            }
            Err(format!("{s} left after recovery").into())
        }
    }
}
