"""Renders the peer benchmarks into docs/benchmarks.md and docs/benchmarks.png.

Usage: .venv/bin/python bench/report.py [--in FILE ...] [--out docs/benchmarks.md] [--png FILE]

Reads target/bench/python-peers.json (bench/peers.py) and
target/bench/rust-peers.json (the bench/rust-peers crate), whichever exist,
or the files given with --in. Writes a markdown page with the machine, one
table per group (messages/s, MB/s, and how many times mqlite's reference row
is faster than each row), the targets and whether the figures meet
them, and a PNG chart of the same figures (log-scale messages/s per group)
embedded in the page.

The JSON of a suite (both suites write the same format)::

    {"suite": "python" | "rust", "date": "2026-12-01T03:40:00Z",
     "machine": {"cpu": ..., "cores": 2, "kernel": ..., "python": ... | null, "rustc": ... | null},
     "runs": 3,                                    # timed runs per row; figures are medians
     "rows": [{"group": "produce 100 B, acks=1",   # rows of a group are compared with each other
               "system": "mqlite send_batch",      # what was measured
               "durability": "...",                # the mode, in words
               "n": 1000000, "size": 100,          # messages per run, payload bytes
               "msgs_per_s": 1.2e7, "mb_per_s": 1200.0,
               "reference": true,                  # one row per group: the mqlite row compared with
               "baseline": true,                   # optional: no queue, a ceiling (memcpy, deque)
               "note": "..."}],                    # optional
     "notes": ["..."],                             # optional: lines about the whole run
     "load_avg": {"start": 1.2, "end": 0.9}}       # optional: 1-minute load average

Rows without "baseline" count as baselines when their system names one of
BASELINE_WORDS. Rows whose system starts with "mqlite" are mqlite's; the
others are peers, and the targets compare the reference row with them.
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
DEFAULT_INPUTS = [ROOT / "target" / "bench" / "python-peers.json", ROOT / "target" / "bench" / "rust-peers.json"]
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
        """How many times the reference row is faster than `row`."""
        ref = self.reference
        if ref is None or row.rate <= 0:
            return None
        return ref.rate / row.rate


@dataclass
class Suite:
    name: str
    doc: dict[str, Any]
    groups: list[Group]
    source: Path


def load(path: Path) -> Suite:
    """Reads one suite's JSON (the format is in docs/benchmarks.md)."""
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
    no_py = "" if py else "no Python figures (target/bench/python-peers.json is missing)"
    no_rs = "" if rs else "no Rust figures (target/bench/rust-peers.json is missing)"
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
        ratio = g.ratio(r)
        name = md_escape(r.system)
        if r.reference:
            name = f"**{name}** (reference)"
        elif r.baseline:
            name = f"{name} (baseline)"
        note = "; ".join(part for part in r.note.split("; ") if part and not SCALED_NOTE.match(part))
        if note:
            notes.append(f"{r.system}: {note}")
            name += f" [{len(notes)}]"
        shown = "1 (itself)" if r.reference else fmt_ratio(ratio) if ratio is not None else "n/a"
        lines.append(
            f"| {name} | {md_escape(r.durability)} | {r.n:,} | {fmt_rate(r.rate)} | {fmt_mb(r.mb)} | {shown} |"
        )
    if g.reference is None:
        lines.append("")
        lines.append("No single reference row in this group: no ratios.")
    if notes:
        lines.append("")
        lines += [f"[{i}] {md_escape(n)}  " for i, n in enumerate(notes, 1)]
        lines[-1] = lines[-1].rstrip()
    return lines


def machine_lines(suites: dict[str, Suite]) -> list[str]:
    first = next(iter(suites.values())).doc.get("machine", {})
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
        load = s.doc.get("load_avg")
        if load and load.get("start") is not None:
            tool += f"; 1-minute load average {load['start']:.1f} at the start"
            if load.get("end") is not None:
                tool += f", {load['end']:.1f} at the end"
        lines.append(
            f"| {s.name} suite | {s.doc.get('date', '?')}, medians of {s.doc.get('runs', '?')} runs"
            f"{', ' + tool if tool else ''} |"
        )
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
            lines.append(
                f"| {s.name} | {g.name} | {md_escape(ref.system)} | {fmt_rate(ref.rate)} | {md_escape(best.system)} "
                f"| {fmt_rate(best.rate)} | {fmt_ratio(ref.rate / best.rate)} |"
            )
    if not lines:
        return []
    head = [
        "| suite | group | mqlite row | messages/s | fastest peer | messages/s | mqlite is faster by |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    return head + lines


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
) -> str:
    out = [
        "# Benchmarks: mqlite against its peers",
        "",
        "<!-- Generated by bench/report.py from target/bench/*.json: edit those scripts, not this page. -->",
        "",
        "What each figure is: messages of one size produced or consumed per second, in one process on one",
        "machine, by mqlite and by the libraries or servers a user would pick instead. Rows in one group do",
        "the same work at a comparable durability (each row says which); the last column says how many times",
        "faster mqlite's reference row (in bold) is than that row: above 1, mqlite is faster. MB/s counts",
        "payload bytes (10^6). Baselines are no queue at all, only the ceiling for the cost of a call.",
        "On a machine busy with other work (see the load average below) absolute figures drop and move",
        "between runs; compare rows within a group, whose timed runs alternate.",
        "",
        "## Machine",
        "",
        *machine_lines(suites),
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
    out += kept[0]
    out += [
        REPRODUCE,
        "",
        "```sh",
        "make bench",
        "```",
        "",
        "This installs redis-server (Debian's package) if it is missing, builds the Python module into `.venv`",
        "with the peers from `bench/requirements.txt`, runs `bench/peers.py` (the Python suite, writing",
        "`target/bench/python-peers.json`), the `bench/rust-peers` crate (the Rust suite, writing",
        "`target/bench/rust-peers.json`), then `bench/report.py`, which writes this page and its chart.",
        "One part alone: `.venv/bin/python bench/peers.py --help` (`--n`, `--sizes`, `--runs`, `--only FILTER`,",
        "`--quick`), then `.venv/bin/python bench/report.py`.",
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


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--in", dest="inputs", type=Path, action="append", help="a suite's JSON (repeatable; default: both, if present)"
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the markdown page (default docs/benchmarks.md)")
    ap.add_argument("--png", type=Path, help="the chart (default: the page's path with .png)")
    args = ap.parse_args(argv)
    inputs = args.inputs or [p for p in DEFAULT_INPUTS if p.exists()]
    missing = [p for p in inputs if not p.exists()]
    if missing or not inputs:
        absent = ", ".join(map(str, missing or DEFAULT_INPUTS))
        print(f"report.py: no figures to render: {absent} missing", file=sys.stderr)
        return 1
    suites: dict[str, Suite] = {}
    for p in inputs:
        s = load(p)
        suites[s.name] = s
    suites = {k: suites[k] for k in SUITE_TITLES if k in suites}
    png = args.png or args.out.with_suffix(".png")
    chart(suites, png)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    kept = kept_parts(args.out.read_text()) if args.out.exists() else ([], [])
    args.out.write_text(render(suites, os.path.relpath(png, args.out.parent), kept))
    print(f"wrote {args.out} and {png}")
    for t in targets(suites):
        status, detail = judge(t)
        print(f"target: {t.text}: {status} ({detail})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
