"""Checks that every figure quoted in README.md and docs/benchmarks.md is one the committed JSON shows.

Usage: python3 bench/check_claims.py [FILE ...]   (default: README.md's "Performance" section and
       the hand-written part of docs/benchmarks.md, from report.py's KEEP_MARK to "How to reproduce")
       python3 bench/check_claims.py --fix [bench/results/DATE]
           rewrites those figures from the JSON (of DATE: the declaration is changed too), then checks;
           the words around them (ahead, level, behind) are yours to reread.

A quoted figure is followed at once by a marker naming where it comes from, in an HTML comment
(invisible once rendered); the results directory is named once, before the first marker:

    <!-- bench-results: bench/results/2026-12-03 -->
    ... `send` is 2.98x (2.50-3.10x)<!-- bench: ratio python-peers | produce 100 B, acks=1 | queuelib FifoDiskQueue.push --> ...

Markers (SUITE is the JSON file's name without .json):

- ``ratio SUITE | GROUP | SYSTEM``: in a peer suite, how many times the group's reference row is
  faster than SYSTEM: the median and min-max over the runs of the ratio within each run;
- ``rate SUITE | GROUP | SYSTEM``: a peer suite row's messages/s, median (min-max);
- ``rate SUITE | ROW``: an engine suite row's messages/s;
- ``ratio SUITE | ROW``: an engine row over its baseline row, run by run;
  ``ratio SUITE | ROW | OTHER``: ROW over OTHER, run by run;
- ``figure SUITE | NAME``: an engine suite's figure (latency, open time), median (min-max).

The checker renders each figure from the JSON (see `expected`) and fails when the text before a
marker does not end with exactly that rendering, when a marker names a row the JSON lacks, or when a
figure-like number (a ratio such as ``3.5x``, a rate such as ``7.9 M/s``, a time such as ``1.2 ms``)
stands in the checked text without a marker. Exit status 1 lists every problem.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402  (bench/report.py: the same ratios as the rendered tables)

MARKER = re.compile(r"<!--\s*bench:\s*(\w+)\s+([^|]+?)\s*\|\s*(.*?)\s*-->", re.S)
RESULTS = re.compile(r"<!--\s*bench-results:\s*(\S+)\s*-->")
COMMENT = re.compile(r"<!--.*?-->", re.S)
CODE = re.compile(r"`[^`\n]*`")
# What reads as a measured figure: a ratio, a rate, a time.
# A figure as `expected` renders it ("2.98x (2.50-3.10x)", "7.90 M/s (7.1-8.2 M/s)", "1.19 ms (...)"),
# or a bare one, right before a marker.
_NUM = r"-?\d[\d,]*(?:\.\d+)?"
_UNIT = r"(?:x| [MkK]/s| [A-Za-zµ]+)"
RENDERED = re.compile(rf"{_NUM}{_UNIT}(?: \({_NUM}-{_NUM}{_UNIT}\))?\s*$")
FIGURE = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?"
    r"(?:x(?![\w])| ?[MkK](?:/s| msg/s| msgs/s| messages/s)| ?(?:ms|us|µs)(?![\w])| ?[MG]B/s)"
)


def num(x: float) -> str:
    """Three significant digits, no exponent: 0.583, 5.83, 58.3, 583 (and -3.19)."""
    a = abs(x)
    if a >= 100:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def fmt_ratio(sp: tuple[float, float, float]) -> str:
    med, lo, hi = sp
    return f"{num(med)}x ({num(lo)}-{num(hi)}x)"


def fmt_rate(sp: tuple[float, float, float]) -> str:
    med, lo, hi = sp
    scale, unit = (1e6, "M") if med >= 1e6 else (1e3, "k")
    return f"{num(med / scale)} {unit}/s ({num(lo / scale)}-{num(hi / scale)} {unit}/s)"


def fmt_figure(sp: tuple[float, float, float], unit: str) -> str:
    med, lo, hi = sp
    u = "x" if unit == "x" else f" {unit}"
    return f"{num(med)}{u} ({num(lo)}-{num(hi)}{u})"


class Results:
    """The suites of one results directory, loaded once each."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._cache: dict[str, Any] = {}

    def suite(self, name: str) -> Any:
        if name not in self._cache:
            path = self.dir / f"{name}.json"
            if not path.exists():
                raise KeyError(f"no {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
            self._cache[name] = report.load_any(path)
        return self._cache[name]


def expected(results: Results, kind: str, suite_name: str, args: list[str]) -> str:
    """The rendering of the figure a marker names (KeyError: no such row)."""
    suite = results.suite(suite_name)
    if isinstance(suite, report.Suite):
        if len(args) != 2:
            raise KeyError(f"a peer suite's marker names GROUP | SYSTEM, got {args}")
        group = next((g for g in suite.groups if g.name == args[0]), None)
        if group is None:
            raise KeyError(f"no group {args[0]!r} in {suite_name}")
        row = next((r for r in group.rows if r.system == args[1]), None)
        if row is None:
            raise KeyError(f"no row {args[1]!r} in {suite_name} / {args[0]}")
        if kind == "ratio":
            sp = group.ratio_spread(row)
            if sp is None:
                raise KeyError(f"no reference row in {suite_name} / {args[0]}")
            return fmt_ratio(sp)
        if kind == "rate":
            return fmt_rate(report.spread(row.runs))
        raise KeyError(f"{kind!r} does not apply to a peer suite")
    rows = {r.name: r for r in suite.rows}
    if kind == "figure":
        fig = next((f for f in suite.figures if f["name"] == args[0]), None)
        if fig is None:
            raise KeyError(f"no figure {args[0]!r} in {suite_name}")
        return fmt_figure(report.spread([float(v) for v in fig["values"]]), str(fig.get("unit", "")))
    for a in args:
        if a not in rows:
            raise KeyError(f"no row {a!r} in {suite_name}")
    row = rows[args[0]]
    if kind == "rate":
        return fmt_rate(report.spread(row.rates))
    if kind == "ratio":
        if len(args) == 1:
            if not row.ratios:
                raise KeyError(f"row {args[0]!r} of {suite_name} has no baseline")
            return fmt_ratio(report.spread(row.ratios))
        other = rows[args[1]].rates
        return fmt_ratio(report.spread([a / b for a, b in zip(row.rates, other)]))
    raise KeyError(f"unknown marker kind {kind!r}")


def trailing_figure(text: str, end: int) -> tuple[int, int]:
    """The span of the figure-like characters just before `end` (a wrong figure is reported once,
    not again as unmarked)."""
    m = re.search(r"[\d.,()\- xkKMGBmsuµ/]*$", text[:end])
    return (m.start() if m else end), end


def check_text(text: str, where: str, results_dir: Optional[Path] = None) -> list[str]:
    """Problems in one piece of checked text (empty: every figure is backed by the JSON)."""
    problems = []
    covered: list[tuple[int, int]] = []
    results: Optional[Results] = Results(results_dir) if results_dir else None
    declared = RESULTS.search(text)
    if declared:
        results = Results(ROOT / declared.group(1))
    for m in MARKER.finditer(text):
        kind, suite, rest = m.group(1), m.group(2).strip(), m.group(3)
        args = [a.strip() for a in rest.split("|")]
        line = text.count("\n", 0, m.start()) + 1
        if results is None:
            problems.append(f"{where}:{line}: a marker before any <!-- bench-results: DIR -->")
            continue
        try:
            want = expected(results, kind, suite, args)
        except (KeyError, ValueError) as e:
            problems.append(f"{where}:{line}: {e.args[0] if e.args else e}")
            covered.append(trailing_figure(text, m.start()))
            continue
        before = text[: m.start()].rstrip()
        if not before.endswith(want):
            got = before[-len(want) - 10 :].split("\n")[-1]
            problems.append(f"{where}:{line}: the JSON shows {want!r}, the text says ...{got!r}")
            covered.append(trailing_figure(text, m.start()))
            continue
        covered.append((len(before) - len(want), m.start()))
    # Figures outside any marked span (comments and code spans are not prose).
    blank = COMMENT.sub(lambda c: " " * len(c.group()), text)
    blank = CODE.sub(lambda c: " " * len(c.group()), blank)
    for f in FIGURE.finditer(blank):
        if not any(a <= f.start() and f.end() <= b for a, b in covered):
            line = text.count("\n", 0, f.start()) + 1
            problems.append(f"{where}:{line}: {f.group()!r} has no <!-- bench: ... --> marker")
    return problems


def fix_text(text: str, results_dir: Optional[str] = None) -> str:
    """`text` with each marked figure replaced by the JSON's rendering (and, with `results_dir`, the
    bench-results declaration pointing there). Prose around the figures is left to be reread."""
    if results_dir:
        text = RESULTS.sub(f"<!-- bench-results: {results_dir} -->", text)
    declared = RESULTS.search(text)
    if not declared:
        return text
    results = Results(ROOT / declared.group(1))
    out, at = [], 0
    for m in MARKER.finditer(text):
        kind, suite, args = m.group(1), m.group(2).strip(), [a.strip() for a in m.group(3).split("|")]
        try:
            want = expected(results, kind, suite, args)
        except (KeyError, ValueError):
            continue  # reported by check_text
        old = RENDERED.search(text, at, m.start())
        if old is None:
            continue  # no figure of the rendered shape before the marker: reported by check_text
        out.append(text[at : old.start()] + want)
        at = m.start()
    out.append(text[at:])
    return "".join(out)


def section(text: str, start: str, end_prefix: str) -> tuple[str, int]:
    """The lines from the line `start` to the next line starting with `end_prefix`, and the first's number."""
    lines = text.splitlines()
    if start not in lines:
        return "", 0
    i = lines.index(start)
    j = next((k for k in range(i + 1, len(lines)) if lines[k].startswith(end_prefix)), len(lines))
    return "\n".join(lines[i:j]), i


def default_targets() -> list[tuple[str, str]]:
    """(name, text) of what is checked by default."""
    out = []
    readme = (ROOT / "README.md").read_text()
    perf, _ = section(readme, "## Performance", "## ")
    out.append(("README.md (Performance)", perf))
    bench = ROOT / "docs" / "benchmarks.md"
    if bench.exists():
        kept, _ = section(bench.read_text(), report.KEEP_MARK, report.REPRODUCE)
        out.append(("docs/benchmarks.md (hand-written part)", kept))
    return out


def fix_files(results_dir: Optional[str]) -> None:
    """Rewrites the marked figures of README.md's Performance section and docs/benchmarks.md's
    hand-written part in place (after a new `make bench`)."""
    for path, start, end in (
        (ROOT / "README.md", "## Performance", "## "),
        (ROOT / "docs" / "benchmarks.md", report.KEEP_MARK, report.REPRODUCE),
    ):
        text = path.read_text()
        part, _ = section(text, start, end)
        if part:
            path.write_text(text.replace(part, fix_text(part, results_dir)))
            print(f"rewrote the marked figures of {path.relative_to(ROOT)}: reread the prose around them")


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--fix"]:
        fix_files(argv[1] if len(argv) > 1 else None)
        argv = []
    targets = [(a, Path(a).read_text()) for a in argv] if argv else default_targets()
    problems = []
    markers = 0
    for name, text in targets:
        markers += len(MARKER.findall(text))
        problems += check_text(text, name)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_claims.py: {len(problems)} figure(s) not backed by the committed JSON", file=sys.stderr)
        return 1
    print(f"check_claims.py: {markers} quoted figure(s), each one the committed JSON shows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
