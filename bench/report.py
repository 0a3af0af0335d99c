"""Renders the benchmarks into docs/benchmarks.md and docs/benchmarks.png.

Usage: .venv/bin/python bench/report.py [--dir DIR | --in FILE ...] [--out docs/benchmarks.md] [--png FILE]

Reads every suite's JSON in DIR (default: the newest bench/results/<date>/
directory, else target/bench): python-peers.json (bench/peers.py),
rust-peers.json (the bench/rust-peers crate), engine-<bench>.json (each
`cargo bench -p mqlite --bench <bench>` run with MQLITE_BENCH_JSON),
python-rates.json (bench/python_rates.py) and python-kafka.json
(bench/kafka_python.py), or the files given with --in.
Writes a markdown page with the machine and how busy it was, one table per
group (messages/s and how many times mqlite's reference row is faster than
each row, each as the median and the min-max over the interleaved runs),
the targets and whether the figures meet them, the engine's own tables, and
a PNG chart of the peer figures (log-scale messages/s per group).

The JSON of a peer suite (both peer suites write the same format)::

    {"suite": "python" | "rust", "date": "2026-12-01T03:40:00Z",
     "machine": {"cpu": ..., "cores": 2, "kernel": ..., "python": ... | null, "rustc": ... | null},
     "runs": 3,                                    # timed runs per row; figures are medians
     "interleaved": true,                          # run i of every row of a group ran together
     "machine_state": "shared" | "quiet" | null,   # as the person running it said (MQLITE_BENCH_MACHINE)
     "git": {"commit": "...", "dirty": false},     # the commit measured
     "command": "...",                             # what reproduces the run
     "rows": [{"group": "produce 100 B, acks=1",   # rows of a group are compared with each other
               "system": "mqlite send_batch",      # what was measured
               "durability": "...",                # the mode, in words
               "n": 1000000, "size": 100,          # messages per run, payload bytes
               "msgs_per_s": 1.2e7, "mb_per_s": 1200.0,
               "runs_msgs_per_s": [...],           # optional: each run's rate, in run order
               "msgs_per_s_min": ..., "msgs_per_s_max": ...,
               "reference": true,                  # one row per group: the mqlite row compared with
               "baseline": true,                   # optional: no queue, a ceiling (memcpy, deque)
               "note": "..."}],                    # optional
     "notes": ["..."],                             # optional: lines about the whole run
     "load_avg": {"start": 1.2, "end": 0.9}}       # optional: 1-minute load average

Rows without "baseline" count as baselines when their system names one of
BASELINE_WORDS. Rows whose system starts with "mqlite" are mqlite's; the
others are peers, and the targets compare the reference row with them.

An engine suite ("kind": "engine": core/benches/harness, bench/python_rates.py)
keeps the seconds of every run instead of rates::

    {"suite": "engine-log", "kind": "engine", "command": "...", "date": ..., "machine": {...},
     "machine_state": ..., "load_avg": {...}, "git": {...}, "runs": 3, "interleaved": true,
     "rows": [{"name": "...", "group": "100 B", "msgs": 2000000, "size": 100,
               "secs": [0.21, 0.19, 0.2],         # one per run, in run order
               "msgs_per_s": {"median": ..., "min": ..., "max": ...},  # optional, from secs
               "baseline": "row name" | null,      # ratios are to that row, run by run
               "ratio_to_baseline": {"median": ..., "min": ..., "max": ...} | null}],  # optional
     "figures": [{"name": "...", "unit": "ms", "values": [...],     # one value per run
                  "median": ..., "min": ..., "max": ...}],          # optional
     "notes": [...]}

A ratio is the median over the runs of the ratio within each run (the runs
interleave, so each pair ran in the same minutes), with its min-max.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
FALLBACK_DIR = ROOT / "target" / "bench"
DEFAULT_OUT = ROOT / "docs" / "benchmarks.md"
SUITE_TITLES = {
    "python": "Python: the mqlite module against Python queues",
    "rust": "Rust: the mqlite crate against Rust crates",
}
# Rows that measure no queue at all (the ceilings), when a suite does not mark them with "baseline".
BASELINE_WORDS = ("collections.deque", "memcpy", "memmap2", "raw mmap", "baseline")


# Data -------------------------------------------------------------------------


@dataclass
class Row:
    """One measured row of a suite."""

    suite: str
    group: str
    system: str
    durability: str
    n: int
    size: int
    rate: float
    mb: float
    reference: bool
    baseline: bool
    note: str
    runs: list[float]

    @property
    def lo(self) -> float:
        return min(self.runs)

    @property
    def hi(self) -> float:
        return max(self.runs)

    @property
    def is_mqlite(self) -> bool:
        return self.system.lower().startswith("mqlite")

    @property
    def is_peer(self) -> bool:
        """A competing system: neither mqlite nor a baseline."""
        return not self.is_mqlite and not self.baseline


@dataclass
class Group:
    """Rows compared with each other, and the mqlite row they are compared with."""

    suite: str
    name: str
    rows: list[Row]

    @property
    def reference(self) -> Optional[Row]:
        refs = [r for r in self.rows if r.reference]
        return refs[0] if len(refs) == 1 else None

    def ratio(self, row: Row) -> Optional[float]:
        """How many times the reference row is faster than `row` (see ratio_spread)."""
        spread = self.ratio_spread(row)
        return spread[0] if spread else None

    def ratio_spread(self, row: Row) -> Optional[tuple[float, float, float]]:
        """(median, min, max) over the runs of the reference's rate over `row`'s in the same run.

        Without runs of the same count in both rows: the ratio of the medians, three times.
        """
        ref = self.reference
        if ref is None or row.rate <= 0:
            return None
        if len(ref.runs) == len(row.runs) and len(row.runs) > 1 and min(row.runs) > 0:
            return spread([a / b for a, b in zip(ref.runs, row.runs)])
        r = ref.rate / row.rate
        return r, r, r


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of values."""
    v = sorted(values)
    m = len(v) // 2
    med = v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2
    return med, v[0], v[-1]


@dataclass
class Suite:
    name: str
    doc: dict[str, Any]
    groups: list[Group]
    source: Path


@dataclass
class EngineRow:
    """One rate row of an engine suite: its rate and ratio to its baseline, run by run."""

    name: str
    group: str
    size: int
    rates: list[float]
    ratios: Optional[list[float]]


@dataclass
class Engine:
    """An engine suite (core/benches, bench/python_rates.py): rows by group, and figures."""

    name: str
    doc: dict[str, Any]
    rows: list[EngineRow]
    figures: list[dict[str, Any]]
    source: Path


def load_engine(path: Path, doc: dict[str, Any]) -> Engine:
    """Reads an engine suite's JSON (see the module docstring)."""
    raw = doc.get("rows", [])
    rates = {str(r["name"]): [int(r["msgs"]) / float(x) for x in r["secs"]] for r in raw}
    rows = []
    for r in raw:
        own = rates[str(r["name"])]
        base = rates.get(str(r.get("baseline") or ""))
        ratios = [a / b for a, b in zip(own, base)] if base and len(base) == len(own) else None
        rows.append(EngineRow(str(r["name"]), str(r.get("group", "")), int(r.get("size", 0)), own, ratios))
    return Engine(str(doc["suite"]), doc, rows, list(doc.get("figures", [])), path)


def load_any(path: Path) -> Suite | Engine:
    """A peer suite or an engine suite, by its "kind"."""
    doc = json.loads(path.read_text())
    if doc.get("kind") == "engine":
        return load_engine(path, doc)
    return load(path, doc)


def load(path: Path, doc: Optional[dict[str, Any]] = None) -> Suite:
    """Reads one peer suite's JSON (the format is in the module docstring)."""
    if doc is None:
        doc = json.loads(path.read_text())
    suite = doc.get("suite")
    if suite not in SUITE_TITLES:
        raise ValueError(f"{path}: unknown suite {suite!r}")
    groups: dict[str, Group] = {}
    for raw in doc.get("rows", []):
        system = str(raw["system"])
        baseline = raw.get("baseline")
        if baseline is None:
            baseline = any(w in system.lower() for w in BASELINE_WORDS)
        row = Row(
            suite=suite,
            group=str(raw["group"]),
            system=system,
            durability=str(raw.get("durability", "")),
            n=int(raw["n"]),
            size=int(raw["size"]),
            rate=float(raw["msgs_per_s"]),
            mb=float(raw["mb_per_s"]),
            reference=bool(raw.get("reference", False)),
            baseline=bool(baseline),
            note=str(raw.get("note") or ""),
            runs=[float(x) for x in raw.get("runs_msgs_per_s") or [raw["msgs_per_s"]]],
        )
        groups.setdefault(row.group, Group(suite, row.group, [])).rows.append(row)
    return Suite(suite, doc, list(groups.values()), path)


# Targets ------------------------------------------------------------------------


@dataclass
class Target:
    text: str
    suite: str
    groups: list[Group]
    factor: float  # the reference must be at least this many times faster than every peer
    missing: str = ""


def targets(suites: dict[str, Suite]) -> list[Target]:
    """The targets, each with the groups it is judged on."""
    py = suites["python"].groups if "python" in suites else []
    rs = suites["rust"].groups if "rust" in suites else []
    no_py = "" if py else "no Python figures (no python-peers.json)"
    no_rs = "" if rs else "no Rust figures (no rust-peers.json)"
    produce = [g for g in py if g.name.startswith("produce")]
    return [
        Target("mqlite from Python ahead of every Python peer in every group", "python", py, 1.0, no_py),
        Target(
            "mqlite from Python 10x or more ahead of every Python peer on batched produce",
            "python",
            [g for g in produce if "batch" in g.name],
            10.0,
            no_py,
        ),
        Target(
            "mqlite from Python 10x or more ahead of every Python peer on durable (acks=all) produce",
            "python",
            [g for g in produce if "acks=all" in g.name],
            10.0,
            no_py,
        ),
        Target("mqlite's Rust API ahead of every Rust crate in every group", "rust", rs, 1.0, no_rs),
    ]


def judge(t: Target) -> tuple[str, str]:
    """("met" | "not met" | "no data", detail) for a target, from the figures."""
    if t.missing:
        return "no data", t.missing
    pairs = []  # (ratio, group, peer)
    for g in t.groups:
        for r in g.rows:
            ratio = g.ratio(r)
            if r.is_peer and ratio is not None:
                pairs.append((ratio, g.name, r.system))
    if not pairs:
        return "no data", "no peer rows with a reference row in these groups"
    failing = sorted(p for p in pairs if p[0] < t.factor)
    worst = min(pairs)
    if not failing:
        return "met", f"{len(pairs)} comparisons; smallest margin {fmt_ratio(worst[0])} ({worst[2]}, {worst[1]})"
    shown = "; ".join(f"{fmt_ratio(r)} against {s} ({g})" for r, g, s in failing[:3])
    more = f"; {len(failing) - 3} more" if len(failing) > 3 else ""
    short = "behind or level" if t.factor <= 1 else f"short of {t.factor:g}x"
    detail = f"{len(failing)} of {len(pairs)} comparisons {short}: {shown}{more}"
    # Where another mqlite row of a short group would meet the target, say so.
    others = []
    for g in t.groups:
        if not any(name == g.name for _, name, _ in failing):
            continue
        peers = [r for r in g.rows if r.is_peer]
        for r in g.rows:
            if r.is_mqlite and not r.reference and peers and all(r.rate >= t.factor * p.rate for p in peers):
                others.append(f"{r.system} would meet it in {g.name}")
    if others:
        detail += ". Among the other mqlite rows, " + "; ".join(others)
    return "not met", detail


# Formatting -----------------------------------------------------------------------


def fmt_rate(rate: float) -> str:
    if rate >= 1e6:
        return f"{rate / 1e6:.2f} M"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f} k"
    return f"{rate:.0f}"


def fmt_mb(mb: float) -> str:
    return f"{mb:,.0f}" if mb >= 100 else f"{mb:.1f}" if mb >= 1 else f"{mb:.2f}"


def fmt_ratio(ratio: float) -> str:
    if ratio < 0.1:
        return f"{ratio:.2g}x"
    if ratio >= 100:
        return f"{ratio:,.0f}x"
    if ratio >= 10:
        return f"{ratio:.1f}x"
    return f"{ratio:.2f}x"


def fmt_rate_spread(rate: float, lo: float, hi: float) -> str:
    """`1.23 M (1.10 M-1.31 M)`; the median alone when the runs agree (one run)."""
    if lo == hi:
        return fmt_rate(rate)
    return f"{fmt_rate(rate)} ({fmt_rate(lo)}-{fmt_rate(hi)})"


def fmt_ratio_spread(sp: tuple[float, float, float]) -> str:
    """`2.31x (2.02-2.50x)`."""
    med, lo, hi = sp
    if lo == hi:
        return fmt_ratio(med)
    return f"{fmt_ratio(med)} ({fmt_ratio(lo).rstrip('x')}-{fmt_ratio(hi)})"


def md_escape(text: str) -> str:
    return text.replace("|", "\\|")


# What bench/peers.py notes on a row whose N it cut: the table's N column already says it.
SCALED_NOTE = re.compile(r"^N scaled down to [\d,]+ \(slow row\)$")


def group_table(g: Group) -> list[str]:
    lines = [
        "| system | durability | N | messages/s | MB/s | mqlite is faster by |",
        "|---|---|---:|---:|---:|---:|",
    ]
    notes = []
    for r in g.rows:
        ratio = g.ratio_spread(r)
        name = md_escape(r.system)
        if r.reference:
            name = f"**{name}** (reference)"
        elif r.baseline:
            name = f"{name} (baseline)"
        note = "; ".join(part for part in r.note.split("; ") if part and not SCALED_NOTE.match(part))
        if note:
            notes.append(f"{r.system}: {note}")
            name += f" [{len(notes)}]"
        shown = "1 (itself)" if r.reference else fmt_ratio_spread(ratio) if ratio is not None else "n/a"
        lines.append(
            f"| {name} | {md_escape(r.durability)} | {r.n:,} | {fmt_rate_spread(r.rate, r.lo, r.hi)} "
            f"| {fmt_mb(r.mb)} | {shown} |"
        )
    if g.reference is None:
        lines.append("")
        lines.append("No single reference row in this group: no ratios.")
    if notes:
        lines.append("")
        lines += [f"[{i}] {md_escape(n)}  " for i, n in enumerate(notes, 1)]
        lines[-1] = lines[-1].rstrip()
    return lines


def quietness(doc: dict[str, Any]) -> str:
    """How busy the machine was: as the person running the suite said, and its load average."""
    load = doc.get("load_avg") or {}
    seen = [x for x in (load.get("start"), load.get("end")) if x is not None]
    said = doc.get("machine_state")
    if said:
        state = f"{said} (as stated by whoever ran it)"
    elif seen:
        state = "quiet by its load average" if max(seen) < 0.5 else "busy: other work ran beside it"
    else:
        state = "not recorded"
    if seen:
        start, end = load.get("start"), load.get("end")
        state += f"; 1-minute load average {start:.1f} at the start" if start is not None else ";"
        if end is not None:
            state += f", {end:.1f} at the end"
    return state


def run_line(doc: dict[str, Any]) -> str:
    """Date, runs, commit and quietness of one suite."""
    git = doc.get("git") or {}
    commit = git.get("commit")
    at = f", commit {commit[:12]}{' with local changes' if git.get('dirty') else ''}" if commit else ""
    mode = "interleaved" if doc.get("interleaved") else "back to back"
    return f"{doc.get('date', '?')}, {doc.get('runs', '?')} {mode} runs{at}; machine {quietness(doc)}"


def machine_lines(suites: dict[str, Suite], engines: Optional[dict[str, Engine]] = None) -> list[str]:
    docs = [s.doc for s in suites.values()] + [e.doc for e in (engines or {}).values()]
    first = docs[0].get("machine", {}) if docs else {}
    lines = [
        "| | |",
        "|---|---|",
        f"| CPU | {first.get('cpu', '?')} |",
        f"| cores | {first.get('cores', '?')} |",
        f"| kernel | {first.get('kernel', '?')} |",
    ]
    def kernel(m: dict[str, Any]) -> Any:
        # One suite says "Linux 6.x" (platform), the other "6.x" (uname -r).
        k = m.get("kernel")
        return k.removeprefix("Linux ") if isinstance(k, str) else k

    for s in suites.values():
        m = s.doc.get("machine", {})
        rustc = str(m.get("rustc") or "")
        tool = (
            f"Python {m['python']}"
            if m.get("python")
            else (rustc if rustc.startswith("rustc") else f"rustc {rustc}")
            if rustc
            else ""
        )
        if m.get("cpu") not in (None, first.get("cpu")) or kernel(m) not in (None, kernel(first)):
            tool += f" (on another machine: {m.get('cpu')}, {m.get('kernel')})"
        lines.append(f"| {s.name} suite | {run_line(s.doc)}{'; ' + tool if tool else ''} |")
    for e in (engines or {}).values():
        lines.append(f"| {e.name} | {run_line(e.doc)} |")
    return lines


def summary_lines(suites: dict[str, Suite]) -> list[str]:
    """A table with one line per group: the reference row against the fastest peer."""
    lines = []
    for s in suites.values():
        for g in s.groups:
            ref = g.reference
            peers = [r for r in g.rows if r.is_peer]
            if ref is None or not peers:
                continue
            best = max(peers, key=lambda r: r.rate)
            sp = g.ratio_spread(best)
            lines.append(
                f"| {s.name} | {g.name} | {md_escape(ref.system)} | {fmt_rate(ref.rate)} | {md_escape(best.system)} "
                f"| {fmt_rate(best.rate)} | {fmt_ratio_spread(sp) if sp else 'n/a'} |"
            )
    if not lines:
        return []
    head = [
        "| suite | group | mqlite row | messages/s | fastest peer | messages/s | mqlite is faster by |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    return head + lines


ENGINE_TITLES = {
    "python-rates": "The Python module against collections.deque (bench/python_rates.py)",
}


def engine_lines(e: Engine) -> list[str]:
    """An engine suite's tables: each row's rate and ratio to its baseline, median (min-max)."""
    title = ENGINE_TITLES.get(e.name, f"The engine: `{e.doc.get('command', e.name)}`")
    out = [f"### {title}", "", f"From `{e.source.name}`: {run_line(e.doc)}.", ""]
    if e.doc.get("command"):
        env = " ".join(f"{k}={v}" for k, v in sorted((e.doc.get("env") or {}).items()))
        out += ["```sh", f"{env + ' ' if env else ''}{e.doc['command']}", "```", ""]
    groups: list[str] = []
    for r in e.rows:
        if r.group not in groups:
            groups.append(r.group)
    for g in groups:
        out += [
            f"| {md_escape(g)} | messages/s | MB/s (payload) | ratio to the group's baseline row |",
            "|---|---:|---:|---:|",
        ]
        for r in (r for r in e.rows if r.group == g):
            med, lo, hi = spread(r.rates)
            ratio = fmt_ratio_spread(spread(r.ratios)) if r.ratios else "-"
            out.append(
                f"| {md_escape(r.name)} | {fmt_rate_spread(med, lo, hi)} | {fmt_mb(med * r.size / 1e6)} | {ratio} |"
            )
        out.append("")
    if e.figures:
        out += ["| figure | median | min-max |", "|---|---:|---:|"]
        for f in e.figures:
            med, lo, hi = spread([float(v) for v in f["values"]])
            u = f.get("unit", "")
            out.append(f"| {md_escape(str(f['name']))} | {med:.2f} {u} | {lo:.2f}-{hi:.2f} {u} |")
        out.append("")
    for n in e.doc.get("notes") or []:
        out.append(f"- {md_escape(str(n))}")
    return out


# The page's hand-written parts, which a new rendering keeps: the sections
# from this marker up to "## How to reproduce" (other benches' tables and
# readings), and any sections after "How to reproduce".
KEEP_MARK = "<!-- Not generated: bench/report.py keeps the sections from here to \"How to reproduce\". -->"
REPRODUCE = "## How to reproduce"


def kept_parts(old: str) -> tuple[list[str], list[str]]:
    """The hand-written lines of an earlier page: (before, after) "How to reproduce"."""
    lines = old.splitlines()
    before: list[str] = []
    after: list[str] = []
    if KEEP_MARK in lines:
        start = lines.index(KEEP_MARK)
        end = lines.index(REPRODUCE, start) if REPRODUCE in lines[start:] else len(lines)
        before = lines[start:end]
    if REPRODUCE in lines:
        rest = lines[lines.index(REPRODUCE) + 1 :]
        nxt = next((i for i, line in enumerate(rest) if line.startswith("## ")), None)
        if nxt is not None:
            after = rest[nxt:]
    return before, after


def render(
    suites: dict[str, Suite],
    png_name: Optional[str],
    kept: tuple[list[str], list[str]] = ([], []),
    engines: Optional[dict[str, Engine]] = None,
    source: str = "target/bench",
    printed: Optional[list[Path]] = None,
) -> str:
    engines = engines or {}
    printed = printed or []
    out = [
        "# Benchmarks: mqlite against its peers",
        "",
        f"<!-- Generated by bench/report.py from {source}/*.json: edit those scripts, not this page. -->",
        "",
        "What each figure is: messages of one size produced or consumed per second, in one process on one",
        "machine, by mqlite and by the libraries or servers a user would pick instead. Rows in one group do",
        "the same work at a comparable durability (each row says which); the last column says how many times",
        "faster mqlite's reference row (in bold) is than that row: above 1, mqlite is faster. MB/s counts",
        "payload bytes (10^6). Baselines are no queue at all, only the ceiling for the cost of a call.",
        "Each figure is the median over the runs, with the min-max in brackets; the runs of a group's rows",
        "are interleaved (run 1 of every row, then run 2, ...), and a ratio is the median of the ratios",
        "within each run. On a machine busy with other work (see below) absolute figures drop and move",
        "between runs; compare rows within a group. The raw figures of every run are in",
        f"`{source}/`.",
        "",
        "## Machine",
        "",
        *machine_lines(suites, engines),
        "",
        "## Targets",
        "",
        "Judged from the figures below by bench/report.py.",
        "",
        "| target | result | detail |",
        "|---|---|---|",
    ]
    for t in targets(suites):
        status, detail = judge(t)
        out.append(f"| {t.text} | {status} | {md_escape(detail)} |")
    out.append("")
    summary = summary_lines(suites)
    if summary:
        out += ["## In short", "", "Per group, mqlite's reference row against the fastest peer:", "", *summary, ""]
    if png_name:
        out += ["## Chart", "", f"![messages per second, log scale, per group]({png_name})", ""]
    for s in suites.values():
        out += [f"## {SUITE_TITLES[s.name]}", "", f"From `{s.source.name}`.", ""]
        for g in s.groups:
            out += [f"### {g.name}", "", *group_table(g), ""]
        notes = s.doc.get("notes") or []
        if notes:
            out += ["Notes from the run:", ""]
            out += [f"- {md_escape(str(n))}" for n in notes]
            out.append("")
    if engines or printed:
        out += ["## The engine and the Python module on their own", ""]
        out += [
            "Rates of the engine's own benches and of the Python module, each row beside a baseline",
            "measured in the same run (a raw write, a deque, the first row of a sweep).",
            "",
        ]
        for e in engines.values():
            out += engine_lines(e)
            out.append("")
        for p in printed:
            name = p.stem.removeprefix("engine-")
            out += [
                f"### The engine: `cargo bench -p mqlite --bench {name}` (printed output, no JSON)",
                "",
                f"From `{p.name}`: this bench does not write MQLITE_BENCH_JSON, so its figures carry no",
                "machine record and cannot be checked; what it printed:",
                "",
                "```",
                *p.read_text().rstrip().splitlines(),
                "```",
                "",
            ]
    out += kept[0]
    out += [
        REPRODUCE,
        "",
        "```sh",
        "make bench",
        "```",
        "",
        "This installs redis-server (Debian's package) if it is missing, builds the Python module into `.venv`",
        "with the peers from `bench/requirements.txt`, and writes every suite's JSON into",
        "`bench/results/<date>/` (`BENCH_OUT=dir` elsewhere; `MQLITE_BENCH_MACHINE=quiet` or `shared`",
        "records what you know of the machine): each `cargo bench -p mqlite --bench <name>` of `core/benches/`",
        "(`engine-<name>.json`), `bench/python_rates.py` (`python-rates.json`), `bench/peers.py`",
        "(`python-peers.json`), the `bench/rust-peers` crate (`rust-peers.json`), then `bench/report.py`,",
        "which writes this page and its chart from that directory. One part alone:",
        "`.venv/bin/python bench/peers.py --help` (`--n`, `--sizes`, `--runs`, `--only FILTER`, `--quick`),",
        "then `.venv/bin/python bench/report.py --dir DIR`. `BENCH_RUNS` (default 3) sets the interleaved runs,",
        "`BENCH_SCALE` (default 1) scales the engine benches' message counts and `BENCH_N` (default",
        "1000000) is the peer suites' messages per row: `make bench BENCH_SCALE=0.25 BENCH_N=250000` is a",
        "quarter of the full size. `bench/check_claims.py` (run by `make bench-smoke`) checks that every",
        "figure quoted in README.md's Performance section and in this page's hand-written reading is one",
        "the committed JSON shows; after a new run, `python3 bench/check_claims.py --fix bench/results/<date>`",
        "rewrites those figures from it, and the words around them (ahead, level, behind) are to be reread.",
        "Every mqlite row opens its data directory in exclusive mode, by name, whatever the default; rows",
        "that say shared mode open it in shared mode.",
        "",
    ]
    out += kept[1]
    if kept[1]:
        out.append("")
    return "\n".join(out)


# Chart ------------------------------------------------------------------------------


def chart(suites: dict[str, Suite], path: Path) -> None:
    """Horizontal bars of messages/s (log scale), one panel per group, two panels a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: list[Group] = []
    for s in suites.values():
        keys: dict[str, int] = {}
        for g in s.groups:
            keys.setdefault(re.sub(r"\b\d+ B\b", "S B", g.name), len(keys))

        def order(g: Group, keys: dict[str, int] = keys) -> tuple[int, int]:
            return keys[re.sub(r"\b\d+ B\b", "S B", g.name)], g.rows[0].size

        groups += sorted(s.groups, key=order)
    if not groups:
        return
    cols = 2
    lines = [groups[i : i + cols] for i in range(0, len(groups), cols)]
    heights = [max(len(g.rows) for g in line) + 1.6 for line in lines]
    fig = plt.figure(figsize=(17, 0.3 * sum(heights) + 0.8), dpi=100)
    grid = fig.add_gridspec(len(lines), cols, height_ratios=heights)
    colors = {"reference": "#c0392b", "mqlite": "#e59866", "peer": "#5d6d7e", "baseline": "#d5d8dc"}
    for li, line in enumerate(lines):
        for ci, g in enumerate(line):
            ax = fig.add_subplot(grid[li, ci])
            rows = list(reversed(g.rows))
            kinds = [
                "reference" if r.reference else "mqlite" if r.is_mqlite else "baseline" if r.baseline else "peer"
                for r in rows
            ]
            ax.barh(range(len(rows)), [r.rate for r in rows], color=[colors[k] for k in kinds], height=0.7)
            ax.set_xscale("log")
            ax.set_yticks(range(len(rows)))
            ax.set_yticklabels([r.system for r in rows], fontsize=8)
            for tick, k in zip(ax.get_yticklabels(), kinds):
                if k == "reference":
                    tick.set_fontweight("bold")
            lo = min(r.rate for r in rows)
            hi = max(r.rate for r in rows)
            ax.set_xlim(lo / 3, hi * 15)
            for y, r in enumerate(rows):
                ratio = g.ratio(r)
                label = fmt_rate(r.rate) + "/s"
                if ratio is not None and not r.reference:
                    label += f"  ({fmt_ratio(ratio)})"
                ax.text(r.rate * 1.08, y, label, va="center", fontsize=7.5)
            ax.set_ylim(-0.6, len(rows) - 0.4)
            ax.set_title(f"{g.suite}: {g.name}", fontsize=10, loc="left")
            ax.tick_params(axis="x", labelsize=7.5)
            ax.grid(axis="x", which="major", alpha=0.3)
    fig.suptitle(
        "messages/s, log scale; in brackets: how many times faster the mqlite reference row (bold) is", fontsize=11
    )
    from matplotlib.patches import Patch

    labels = {
        "reference": "mqlite, reference row",
        "mqlite": "mqlite, other rows",
        "peer": "peers",
        "baseline": "baselines",
    }
    fig.legend(
        handles=[Patch(color=colors[k], label=v) for k, v in labels.items()],
        loc="upper right",
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


# Main --------------------------------------------------------------------------------


def newest_results() -> Path:
    """The newest bench/results/<date>/ directory holding JSON, else target/bench."""
    dirs = sorted(d for d in RESULTS.glob("*") if d.is_dir() and any(d.glob("*.json"))) if RESULTS.is_dir() else []
    return dirs[-1] if dirs else FALLBACK_DIR


def suite_files(directory: Path) -> list[Path]:
    """The suites' files of a results directory, in the page's order: JSON, then the printed
    output (engine-<name>.txt) of an engine bench that wrote no JSON."""
    order = ["python-peers.json", "rust-peers.json", "python-rates.json", "python-kafka.json"]
    found = [directory / n for n in order if (directory / n).exists()]
    texts = [p for p in sorted(directory.glob("engine-*.txt")) if not p.with_suffix(".json").exists()]
    return found + sorted(directory.glob("engine-*.json")) + texts


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--in", dest="inputs", type=Path, action="append", help="a suite's JSON (repeatable)")
    ap.add_argument("--dir", type=Path, help="a results directory (default: the newest under bench/results)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the markdown page (default docs/benchmarks.md)")
    ap.add_argument("--png", type=Path, help="the chart (default: the page's path with .png)")
    ap.add_argument("--no-chart", action="store_true", help="no chart (needs no matplotlib)")
    args = ap.parse_args(argv)
    directory = args.dir or newest_results()
    inputs = args.inputs or suite_files(directory)
    missing = [p for p in inputs if not p.exists()]
    if missing or not inputs:
        absent = ", ".join(map(str, missing)) if missing else f"no suite's JSON in {directory}"
        print(f"report.py: no figures to render: {absent} missing", file=sys.stderr)
        return 1
    suites: dict[str, Suite] = {}
    engines: dict[str, Engine] = {}
    printed: list[Path] = []
    for p in inputs:
        if p.suffix == ".txt":
            printed.append(p)
            continue
        s = load_any(p)
        if isinstance(s, Engine):
            engines[s.name] = s
        else:
            suites[s.name] = s
    suites = {k: suites[k] for k in SUITE_TITLES if k in suites}
    png = args.png or args.out.with_suffix(".png")
    draw = bool(suites) and not args.no_chart
    if draw:
        chart(suites, png)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    kept = kept_parts(args.out.read_text()) if args.out.exists() else ([], [])
    parents = {p.resolve().parent for p in inputs}
    where = parents.pop() if len(parents) == 1 else directory.resolve()
    try:
        source = str(where.relative_to(ROOT))
    except ValueError:
        source = where.name
    page = render(suites, os.path.relpath(png, args.out.parent) if draw else None, kept, engines, source, printed)
    args.out.write_text(page)
    print(f"wrote {args.out}" + (f" and {png}" if draw else ""))
    for t in targets(suites):
        status, detail = judge(t)
        print(f"target: {t.text}: {status} ({detail})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
