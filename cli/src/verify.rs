//! `mqlite verify`: checks a data directory without changing it. Every
//! partition goes through the core's read-only check
//! ([`mqlite::log::check`]: every batch, the offset chain, the records),
//! every `topic.json` and every group's committed offsets are read. Nothing
//! is opened for writing, no lock is taken and nothing is created, so it
//! runs next to the owning process and gives the same report every time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mqlite::log::check::{
    check_partition, CheckOptions, Issue, IssueKind, PartitionCheck, Severity,
};
use mqlite::log::follow::segment_bases;
use mqlite::{read_committed_offsets, validate_topic_name, Error};
use serde_json::{json, Value};

use crate::progress::{bar, Unit};
use crate::topicdir::TopicDir;
use crate::CliResult;

/// One partition's check, or why it could not be made.
pub struct Part {
    pub topic: String,
    pub partition: u32,
    pub check: Result<PartitionCheck, String>,
}

impl Part {
    /// Errors found (a failed check counts as one).
    pub fn errors(&self) -> usize {
        self.check.as_ref().map_or(1, |c| c.count(Severity::Error))
    }

    fn warnings(&self) -> usize {
        self.check
            .as_ref()
            .map_or(0, |c| c.count(Severity::Warning))
    }
}

/// A problem in a file that is not a segment: `topic.json`, a group's
/// offsets.
pub struct FileProblem {
    pub severity: Severity,
    pub reason: String,
}

/// A topic whose `topic.json` (or partition list) has problems.
pub struct TopicReport {
    pub topic: String,
    pub file: PathBuf,
    pub problems: Vec<FileProblem>,
}

/// One group offsets file.
pub struct GroupReport {
    pub group: String,
    pub file: PathBuf,
    pub offsets: usize,
    pub problems: Vec<FileProblem>,
}

/// Everything `verify` found.
pub struct Report {
    pub data: PathBuf,
    pub parts: Vec<Part>,
    pub topics: Vec<TopicReport>,
    pub groups: Vec<GroupReport>,
}

fn errors(problems: &[FileProblem]) -> usize {
    problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .count()
}

impl Report {
    /// `(partitions, topic files, group files)` with errors.
    pub fn bad(&self) -> (usize, usize, usize) {
        (
            self.parts.iter().filter(|p| p.errors() > 0).count(),
            self.topics
                .iter()
                .filter(|t| errors(&t.problems) > 0)
                .count(),
            self.groups
                .iter()
                .filter(|g| errors(&g.problems) > 0)
                .count(),
        )
    }

    /// The one-line summary of what is bad, `None` when nothing is.
    pub fn summary(&self) -> Option<String> {
        let (p, t, g) = self.bad();
        let mut parts = Vec::new();
        if p > 0 {
            parts.push(format!("{p} partition(s) with corruption"));
        }
        if t > 0 {
            parts.push(format!("{t} damaged topic file(s)"));
        }
        if g > 0 {
            parts.push(format!("{g} damaged group offsets file(s)"));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// A path as printed: relative to the data directory.
    pub fn show(&self, path: &Path) -> String {
        path.strip_prefix(&self.data)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// Checks the data directory `data`: every topic and the groups' committed
/// offsets, or only topic `only` when given.
pub fn check_dir(data: &Path, only: Option<&str>, progress: bool) -> CliResult<Report> {
    crate::datadir::existing(data)?;
    let tdir = data.join("topics");
    let names = match only {
        Some(t) => {
            validate_topic_name(t)?;
            if !tdir.join(t).is_dir() {
                return Err(Error::UnknownTopic(t.to_owned()).into());
            }
            vec![t.to_owned()]
        }
        None => list_topics(&tdir)?,
    };
    let mut report = Report {
        data: data.to_owned(),
        parts: Vec::new(),
        topics: Vec::new(),
        groups: Vec::new(),
    };
    // What to check, with the bytes to read (for the progress bar).
    let mut todo = Vec::new();
    for name in &names {
        let (partitions, max_batch, problems) = topic_partitions(data, name);
        let file = tdir.join(name).join("topic.json");
        if !problems.is_empty() {
            report.topics.push(TopicReport {
                topic: name.clone(),
                file,
                problems,
            });
        }
        for p in partitions {
            todo.push((name.clone(), p, max_batch));
        }
    }
    let total: u64 = todo
        .iter()
        .map(|(t, p, _)| segment_bytes(&tdir.join(t).join(p.to_string())))
        .sum();
    let pb = if progress {
        bar(total, Unit::Bytes, "verify")
    } else {
        indicatif::ProgressBar::hidden()
    };
    for (topic, partition, max_batch) in todo {
        let dir = tdir.join(&topic).join(partition.to_string());
        let options = CheckOptions {
            max_batch_bytes: max_batch,
        };
        let check = check_partition(&dir, options, &mut |n| pb.inc(n)).map_err(|e| e.to_string());
        report.parts.push(Part {
            topic,
            partition,
            check,
        });
    }
    pb.finish_and_clear();
    // A topic without topic.json is removed by the next open: an error when
    // its partitions hold records.
    for t in &mut report.topics {
        let missing = t
            .problems
            .iter()
            .any(|p| p.reason.starts_with("no topic.json"));
        let records: u64 = report
            .parts
            .iter()
            .filter(|p| p.topic == t.topic)
            .filter_map(|p| p.check.as_ref().ok())
            .map(PartitionCheck::records)
            .sum();
        if missing && records > 0 {
            t.problems.push(FileProblem {
                severity: Severity::Error,
                reason: format!(
                    "its partitions hold {records} records, which the next open removes"
                ),
            });
        }
    }
    if only.is_none() {
        report.groups = check_groups(data, &report.parts);
    }
    Ok(report)
}

fn list_topics(tdir: &Path) -> CliResult<Vec<String>> {
    let entries = match std::fs::read_dir(tdir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("listing {}: {e}", tdir.display()).into()),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("listing {}: {e}", tdir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if validate_topic_name(&name).is_ok() && entry.path().is_dir() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The partitions of topic `name` to check, its largest batch, and the
/// problems of its `topic.json` and partition list. A damaged `topic.json`
/// does not stop the check: the partition directories found are checked.
fn topic_partitions(data: &Path, name: &str) -> (Vec<u32>, Option<usize>, Vec<FileProblem>) {
    let found = partition_dirs(&data.join("topics").join(name));
    let mut problems = Vec::new();
    match TopicDir::open(data, name) {
        Ok(t) => {
            let n = t.config.partitions;
            for p in 0..n {
                if !found.contains(&p) {
                    problems.push(FileProblem {
                        severity: Severity::Error,
                        reason: format!("partition directory {p} is missing ({n} partitions)"),
                    });
                }
            }
            let parts = found.into_iter().filter(|&p| p < n).collect();
            (parts, Some(t.config.max_message_bytes as usize), problems)
        }
        Err(e) => {
            let unfinished = matches!(e.downcast_ref::<Error>(), Some(Error::UnknownTopic(_)));
            problems.push(if unfinished {
                FileProblem {
                    severity: Severity::Warning,
                    reason: "no topic.json: an unfinished creation, removed by the next open"
                        .to_owned(),
                }
            } else {
                FileProblem {
                    severity: Severity::Error,
                    reason: e.to_string(),
                }
            });
            (found, None, problems)
        }
    }
}

/// The numbered subdirectories of a topic directory, sorted.
fn partition_dirs(dir: &Path) -> Vec<u32> {
    let mut out: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_owned();
            let digits = !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit());
            (digits && (name == "0" || !name.starts_with('0')))
                .then(|| name.parse().ok())
                .flatten()
        })
        .collect();
    out.sort_unstable();
    out
}

/// Bytes of the segment files in a partition directory.
fn segment_bytes(dir: &Path) -> u64 {
    segment_bases(dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|b| std::fs::metadata(mqlite::log::follow::segment_log_path(dir, b)).ok())
        .map(|m| m.len())
        .sum()
}

/// Reads every `groups/<name>.offsets`; committed offsets past the end of a
/// checked partition are warnings (a consumer of the group starts from its
/// reset policy there).
fn check_groups(data: &Path, parts: &[Part]) -> Vec<GroupReport> {
    let gdir = data.join("groups");
    let Ok(entries) = std::fs::read_dir(&gdir) else {
        return Vec::new();
    };
    let mut files: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.strip_suffix(".offsets")?.to_owned();
            validate_topic_name(&name).ok()?;
            Some((name, e.path()))
        })
        .collect();
    files.sort();
    let ends: BTreeMap<(&str, u32), u64> = parts
        .iter()
        .filter_map(|p| {
            Some((
                (p.topic.as_str(), p.partition),
                p.check.as_ref().ok()?.end_offset,
            ))
        })
        .collect();
    let mut out = Vec::new();
    for (group, file) in files {
        let mut problems = Vec::new();
        let mut offsets = 0;
        let error = |reason: String| FileProblem {
            severity: Severity::Error,
            reason,
        };
        match read_committed_offsets(&file) {
            Err(Error::Corrupt { reason, .. }) => {
                problems.push(error(format!("not valid committed offsets: {reason}")));
            }
            Err(e @ Error::UnsupportedVersion { .. }) => problems.push(error(e.to_string())),
            Err(e) => problems.push(error(format!("cannot be read: {e}"))),
            Ok(f) => {
                for (topic, ps) in &f {
                    for (&p, c) in ps {
                        offsets += 1;
                        if let Some(&end) = ends.get(&(topic.as_str(), p)) {
                            if c.offset > end {
                                problems.push(FileProblem {
                                    severity: Severity::Warning,
                                    reason: format!(
                                        "the offset committed for {topic}/{p}, {}, is past \
                                             its end {end}",
                                        c.offset
                                    ),
                                });
                            }
                        }
                    }
                }
            }
        }
        out.push(GroupReport {
            group,
            file,
            offsets,
            problems,
        });
    }
    out
}

/// One problem as text: place, details, reason.
pub fn describe(r: &Report, i: &Issue) -> String {
    let mut details = Vec::new();
    if let Some((b, l)) = i.stored_offsets {
        details.push(format!("stored offsets {b}-{l}"));
    }
    if let Some(e) = i.expected_offset {
        if i.kind != IssueKind::Lost {
            details.push(format!("expected offset {e}"));
        }
    }
    if i.len > 0 {
        details.push(format!("{} bytes", i.len));
    }
    if let Some((pos, off)) = i.resumed {
        details.push(format!("valid batches resume at byte {pos}, offset {off}"));
    }
    let details = if details.is_empty() {
        String::new()
    } else {
        format!(" ({})", details.join(", "))
    };
    let what = match i.kind {
        IssueKind::TornTail => {
            format!(
                "torn tail after an unclean shutdown (the next open cuts it): {}",
                i.reason
            )
        }
        _ => i.reason.clone(),
    };
    format!(
        "{}: {} at byte {}{details}: {what}",
        i.severity.name(),
        r.show(&i.path),
        i.position
    )
}

fn first_error(r: &Report, c: &PartitionCheck) -> Option<String> {
    c.issues
        .iter()
        .find(|i| i.severity == Severity::Error)
        .map(|i| {
            format!(
                "corrupt data in {} at byte {}: {}",
                r.show(&i.path),
                i.position,
                i.reason
            )
        })
}

fn status(errors: usize, warnings: usize) -> &'static str {
    match (errors, warnings) {
        (0, 0) => "ok",
        (0, _) => "warning",
        _ => "corrupt",
    }
}

fn problems_json(ps: &[FileProblem]) -> Value {
    ps.iter()
        .map(|p| json!({"severity": p.severity.name(), "reason": p.reason}))
        .collect()
}

/// The report as the JSON array of `verify --json`.
pub fn to_json(r: &Report) -> Value {
    let mut out = Vec::new();
    for p in &r.parts {
        let c = match &p.check {
            Ok(c) => c,
            Err(e) => {
                out.push(json!({
                    "kind": "partition",
                    "topic": p.topic,
                    "partition": p.partition,
                    "status": "corrupt",
                    "messages": 0,
                    "error": e,
                    "problems": [],
                }));
                continue;
            }
        };
        let problems: Vec<Value> = c
            .issues
            .iter()
            .map(|i| {
                json!({
                    "severity": i.severity.name(),
                    "kind": i.kind.name(),
                    "file": r.show(&i.path),
                    "position": i.position,
                    "bytes": i.len,
                    "expected_offset": i.expected_offset,
                    "stored_base_offset": i.stored_offsets.map(|o| o.0),
                    "stored_last_offset": i.stored_offsets.map(|o| o.1),
                    "resumed_position": i.resumed.map(|x| x.0),
                    "resumed_offset": i.resumed.map(|x| x.1),
                    "reason": i.reason,
                })
            })
            .collect();
        let count = |k: IssueKind, s: Severity| {
            c.issues
                .iter()
                .filter(|i| i.kind == k && i.severity == s)
                .count()
        };
        let cut = c.cut.as_ref();
        out.push(json!({
            "kind": "partition",
            "topic": p.topic,
            "partition": p.partition,
            "status": status(p.errors(), p.warnings()),
            "messages": c.records(),
            "batches": c.batches(),
            "segments": c.segments.len(),
            "start_offset": c.start_offset,
            "end_offset": c.end_offset,
            "shutdown": c.shutdown.name(),
            "error": first_error(r, c),
            "problems": problems,
            "recovery": {
                "truncated_bytes": cut.map_or(0, |c| c.bytes),
                "dropped_batches": cut.map_or(0, |c| c.batches),
                "torn_tails": count(IssueKind::TornTail, Severity::Warning),
                "corruptions": count(IssueKind::Batch, Severity::Error)
                    + count(IssueKind::Chain, Severity::Error),
                "file": cut.map(|c| r.show(&c.path)),
                "position": cut.map(|c| c.position),
                "offset": cut.and_then(|c| c.offset),
            },
        }));
    }
    for t in &r.topics {
        let e = errors(&t.problems);
        out.push(json!({
            "kind": "topic",
            "topic": t.topic,
            "partition": null,
            "file": r.show(&t.file),
            "status": status(e, t.problems.len() - e),
            "error": t.problems.iter().find(|p| p.severity == Severity::Error).map(|p| &p.reason),
            "problems": problems_json(&t.problems),
        }));
    }
    for g in &r.groups {
        let e = errors(&g.problems);
        out.push(json!({
            "kind": "group",
            "group": g.group,
            "file": r.show(&g.file),
            "offsets": g.offsets,
            "status": status(e, g.problems.len() - e),
            "error": g.problems.iter().find(|p| p.severity == Severity::Error).map(|p| &p.reason),
            "problems": problems_json(&g.problems),
        }));
    }
    Value::Array(out)
}

fn counted(errors: usize, warnings: usize) -> String {
    match (errors, warnings) {
        (0, 0) => "ok".to_owned(),
        (0, w) => format!("ok, {w} warning(s)"),
        (e, 0) => format!("CORRUPT: {e} problem(s)"),
        (e, w) => format!("CORRUPT: {e} problem(s), {w} warning(s)"),
    }
}

/// The report as text, one line per partition, topic and group, problems
/// indented under them.
pub fn to_text(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for p in &r.parts {
        let c = match &p.check {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(s, "{}/{}: CORRUPT: {e}", p.topic, p.partition);
                continue;
            }
        };
        let _ = writeln!(
            s,
            "{}/{}: {} messages, {}",
            p.topic,
            p.partition,
            c.records(),
            counted(p.errors(), p.warnings())
        );
        for i in &c.issues {
            let _ = writeln!(s, "  {}", describe(r, i));
        }
        if let Some(cut) = &c.cut {
            let _ = writeln!(s, "  {}", cut_text(r, cut));
        }
    }
    for t in &r.topics {
        let e = errors(&t.problems);
        let _ = writeln!(s, "topic {}: {}", t.topic, counted(e, t.problems.len() - e));
        for p in &t.problems {
            let _ = writeln!(
                s,
                "  {}: {}: {}",
                p.severity.name(),
                r.show(&t.file),
                p.reason
            );
        }
    }
    for g in &r.groups {
        let e = errors(&g.problems);
        let _ = writeln!(
            s,
            "group {}: {} committed offset(s), {}",
            g.group,
            g.offsets,
            counted(e, g.problems.len() - e)
        );
        for p in &g.problems {
            let _ = writeln!(
                s,
                "  {}: {}: {}",
                p.severity.name(),
                r.show(&g.file),
                p.reason
            );
        }
    }
    s
}

/// What recovery cuts from a partition, as text.
pub fn cut_text(r: &Report, cut: &mqlite::log::check::Cut) -> String {
    let from = cut
        .offset
        .map_or(String::new(), |o| format!(" (offset {o} on)"));
    format!(
        "recovery cuts from byte {} of {}{from}: {} batch(es), {} bytes",
        cut.position,
        r.show(&cut.path),
        cut.batches,
        cut.bytes
    )
}

/// `mqlite verify [TOPIC] [--json]`: exits 1 when anything is damaged.
pub fn verify(data: &Path, only: Option<&str>, json: bool) -> CliResult {
    let report = check_dir(data, only, true)?;
    let out = if json {
        format!("{}\n", to_json(&report))
    } else {
        to_text(&report)
    };
    use std::io::Write;
    std::io::stdout().lock().write_all(out.as_bytes())?;
    match report.summary() {
        Some(s) => Err(s.into()),
        None => Ok(()),
    }
}
