"""Tests of bench/check_claims.py on made-up results (run by `make bench-smoke`; pytest runs it too).

Usage: python3 bench/test_check_claims.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_claims  # noqa: E402

PEERS = {
    "suite": "rust",
    "runs": 3,
    "rows": [
        {"group": "g", "system": "mqlite send", "durability": "", "n": 100, "size": 100, "msgs_per_s": 300.0,
         "mb_per_s": 0.03, "reference": True, "runs_msgs_per_s": [300.0, 200.0, 330.0]},
        {"group": "g", "system": "peer", "durability": "", "n": 100, "size": 100, "msgs_per_s": 100.0,
         "mb_per_s": 0.01, "reference": False, "runs_msgs_per_s": [100.0, 100.0, 110.0]},
    ],
}
ENGINE = {
    "suite": "engine-x", "kind": "engine", "runs": 3,
    "rows": [
        {"name": "base", "group": "100 B", "msgs": 1000, "size": 100, "secs": [0.001, 0.001, 0.002], "baseline": None},
        {"name": "row", "group": "100 B", "msgs": 1000, "size": 100, "secs": [0.002, 0.004, 0.002], "baseline": "base"},
    ],
    "figures": [{"name": "open", "unit": "ms", "values": [1.0, 1.5, 1.25]}],
}


def check(text: str) -> list[str]:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "rust-peers.json").write_text(json.dumps(PEERS))
        (Path(d) / "engine-x.json").write_text(json.dumps(ENGINE))
        return check_claims.check_text(text, "t", Path(d))


def test_figures_rendered_from_the_runs() -> None:
    # Per-run ratios 3.0, 2.0, 3.0: median 3.00, spread 2.00-3.00.
    ok = (
        "send is 3.00x (2.00-3.00x)<!-- bench: ratio rust-peers | g | peer --> faster; "
        "it runs at 300 /s"  # a bare number with no unit is no figure
        " and row at 500 k/s (250-500 k/s)<!-- bench: rate engine-x | row -->, "
        "0.500x (0.250-1.00x)<!-- bench: ratio engine-x | row --> of base; "
        "open 1.25 ms (1.00-1.50 ms)<!-- bench: figure engine-x | open -->."
    )
    assert check(ok) == [], check(ok)


def test_a_figure_the_json_does_not_show_fails() -> None:
    bad = check("send is 3.10x (2.00-3.00x)<!-- bench: ratio rust-peers | g | peer -->")
    assert len(bad) == 1 and "the JSON shows '3.00x (2.00-3.00x)'" in bad[0], bad


def test_an_unmarked_figure_fails() -> None:
    bad = check("send is 4.25x faster, and 7.9 M/s, opening in 1.19 ms")
    assert len(bad) == 3 and all("has no <!-- bench" in b for b in bad), bad


def test_a_marker_naming_no_row_fails() -> None:
    bad = check("1.00x (1.00-1.00x)<!-- bench: ratio rust-peers | g | nobody -->")
    assert len(bad) == 1 and "no row 'nobody'" in bad[0], bad
    bad = check("1.00x<!-- bench: ratio missing-suite | g | peer -->")
    assert len(bad) == 1 and "missing-suite.json" in bad[0], bad


def test_code_spans_and_comments_are_not_figures() -> None:
    assert check("run `MQLITE_BENCH_SCALE=0.5x` <!-- 2.5x -->") == []


def test_fix_rewrites_the_figures_from_the_json() -> None:
    with tempfile.TemporaryDirectory(dir=check_claims.ROOT / "target") as d:
        (Path(d) / "rust-peers.json").write_text(json.dumps(PEERS))
        (Path(d) / "engine-x.json").write_text(json.dumps(ENGINE))
        rel = Path(d).relative_to(check_claims.ROOT)
        stale = (
            f"<!-- bench-results: {rel} -->\nsend is 9.99x (1.00-20.0x)<!-- bench: ratio rust-peers | g | peer --> "
            "faster; open 7.00 ms (1.00-9.00 ms)<!-- bench: figure engine-x | open -->."
        )
        fixed = check_claims.fix_text(stale)
        assert "send is 3.00x (2.00-3.00x)<!--" in fixed and "open 1.25 ms (1.00-1.50 ms)<!--" in fixed, fixed
        assert check_claims.check_text(fixed, "t") == []


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
            print(f"ok {name}")
