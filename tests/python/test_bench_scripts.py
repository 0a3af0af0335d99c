"""bench/peers.py and bench/report.py run end to end at a tiny N.

Only that they work and write what bench/report.py reads: no figure is
checked for speed. Redis rows are expected only where redis-server is
installed; without it the script must say it skips them, in one line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "bench" / "peers.py"
REPORT = ROOT / "bench" / "report.py"
ROW_KEYS = {"group", "system", "durability", "n", "size", "msgs_per_s", "mb_per_s", "reference"}
# Whichever system is measured, these groups come out of a run at one size.
GROUPS = [
    "produce 64 B, acks=1",
    "produce 64 B, acks=1, batches of 1000",
    "produce 64 B, acks=all",
    "produce 64 B, acks=all, batches of 1000",
    "consume 64 B",
    "consume 64 B, one-record batches",
    "job queue 64 B, get + ack per item",
    "job queue 64 B, get + ack per item, ack synced",
]
PEERS_EXPECTED = ["persist-queue SQLiteQueue", "persist-queue Queue", "litequeue", "diskcache", "queuelib"]


def run_peers(tmp_path: Path, *args: str, path_env: str | None = None) -> tuple[dict[str, Any], str]:
    """Runs peers.py with its scratch space in tmp_path; returns the JSON and stdout."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "python-peers.json"
    env = dict(os.environ, TMPDIR=str(scratch))
    if path_env is not None:
        env["PATH"] = path_env
    cmd = [sys.executable, str(PEERS), "--n", "200", "--sizes", "64", "--runs", "1", "--budget", "0.05"]
    proc = subprocess.run(
        [*cmd, "--out", str(out), *args], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(scratch.iterdir()) == [], "peers.py left files in $TMPDIR"
    return json.loads(out.read_text()), proc.stdout


def check_rows(doc: dict[str, Any]) -> None:
    assert doc["suite"] == "python"
    assert doc["runs"] == 1
    assert {"cpu", "cores", "kernel", "python"} <= set(doc["machine"])
    assert doc["interleaved"] is True and set(doc["load_avg"]) == {"start", "end"}
    assert doc["git"]["commit"] is None or len(doc["git"]["commit"]) == 40
    for row in doc["rows"]:
        assert ROW_KEYS <= set(row), row
        assert row["size"] == 64
        assert 1 <= row["n"] <= 200
        assert row["msgs_per_s"] > 0
        assert row["mb_per_s"] == pytest.approx(row["msgs_per_s"] * 64 / 1e6)
        # Every run's rate is kept; the median is one of them (one run here).
        assert len(row["runs_msgs_per_s"]) == doc["runs"]
        assert row["msgs_per_s_min"] <= row["msgs_per_s"] <= row["msgs_per_s_max"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in doc["rows"]:
        groups.setdefault(row["group"], []).append(row)
    for name, rows in groups.items():
        refs = [r["system"] for r in rows if r["reference"]]
        assert len(refs) == 1, (name, refs)
        assert refs[0].startswith("mqlite"), (name, refs)


def test_peers_and_report(tmp_path: Path) -> None:
    doc, stdout = run_peers(tmp_path)
    check_rows(doc)
    assert sorted({r["group"] for r in doc["rows"]}) == sorted(GROUPS)
    systems = " ".join(r["system"] for r in doc["rows"])
    for peer in PEERS_EXPECTED + ["mqlite send_batch", "mqlite consumer iteration", "collections.deque"]:
        assert peer in systems, peer
    # Each mqlite producer and consumer row has its shared-mode twin in the same group, never the reference.
    by_name = {(r["group"], r["system"]): r for r in doc["rows"]}
    twins = [k for k in by_name if k[1].endswith(" (shared mode)")]
    assert ("produce 64 B, acks=1", "mqlite send (shared mode)") in twins, twins
    assert ("consume 64 B", "mqlite consumer iteration (shared mode)") in twins, twins
    for group, system in twins:
        assert (group, system.removesuffix(" (shared mode)")) in by_name, system
        assert not by_name[group, system]["reference"]
    redis_rows = [r for r in doc["rows"] if r["system"].startswith("Redis")]
    if shutil.which("redis-server"):
        # Redis keeps no batches: it is not in the group of one-record batches;
        # and the job-queue groups compare ack queues only (bench/peers_jobqueue.py).
        not_redis = {"consume 64 B, one-record batches"} | {g for g in GROUPS if g.startswith("job queue")}
        assert {r["group"] for r in redis_rows} == set(GROUPS) - not_redis, redis_rows
    else:
        assert redis_rows == []
        assert "SKIP Redis" in stdout
    for r in doc["rows"]:
        assert (r["n"] < 200) == ("N scaled down" in r.get("note", "")), r

    md = tmp_path / "docs" / "benchmarks.md"
    proc = subprocess.run(
        [sys.executable, str(REPORT), "--in", str(tmp_path / "python-peers.json"), "--out", str(md)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = md.read_text()
    for group in GROUPS:
        assert f"### {group}\n" in page
    assert "![messages per second, log scale, per group](benchmarks.png)" in page
    assert "| mqlite from Python ahead of every Python peer in every group |" in page

    # Hand-written sections (the engine's own benches, appended readings)
    # survive a new rendering, in their places; a rendered table does not.
    report = importlib.util.spec_from_file_location("report", REPORT)
    assert report is not None and report.loader is not None
    mod = importlib.util.module_from_spec(report)
    sys.modules["report"] = mod
    report.loader.exec_module(mod)
    mine = f"{mod.KEEP_MARK}\n\n## The engine\n\nkept figure 1.23 M\n\n"
    appended = "## Appended later\n\nkept figure 4.56 M\n"
    reproduce = page.index(mod.REPRODUCE)
    stale = page[:reproduce].replace("| mqlite from Python", "| stale row")
    md.write_text(stale + mine + page[reproduce:] + "\n" + appended)
    proc = subprocess.run(
        [sys.executable, str(REPORT), "--in", str(tmp_path / "python-peers.json"), "--out", str(md)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = md.read_text()
    assert "stale row" not in again
    assert again.count("kept figure 1.23 M") == 1 and again.count("kept figure 4.56 M") == 1
    assert again.index("kept figure 1.23 M") < again.index(mod.REPRODUCE) < again.index("## Appended later")
    assert "no Rust figures" in page
    assert "make bench" in page
    png = (tmp_path / "docs" / "benchmarks.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


def test_without_redis_server(tmp_path: Path) -> None:
    # A PATH without redis-server: the Redis rows go, with one clear line.
    doc, stdout = run_peers(tmp_path, "--only", "consume 64", path_env=str(tmp_path))
    check_rows(doc)
    skips = [line for line in stdout.splitlines() if line.startswith("SKIP Redis")]
    assert len(skips) == 1 and "redis-server is not installed" in skips[0], stdout
    assert {r["group"] for r in doc["rows"]} == {"consume 64 B", "consume 64 B, one-record batches"}
    assert not any(r["system"].startswith("Redis") for r in doc["rows"])
    assert any("Redis: skipped" in n for n in doc["notes"])


def load_peers_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_peers", PEERS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_choose_n_scales_slow_rows_by_rate() -> None:
    peers = load_peers_module()

    def case(rate: float) -> Any:
        calls: list[int] = []

        def measure(n: int) -> float:
            calls.append(n)
            return n / rate  # as if timed: n messages at `rate` per second

        return peers.Case("g", "s", "d", measure), calls

    fast, calls = case(1e7)
    assert peers.choose_n(fast, 1_000_000, 2.0) == 1_000_000
    assert calls == [100, 1000, 10_000, 100_000, 1_000_000]
    slow, calls = case(1234.0)  # 2 s hold 2468 messages: rounded down to 2 digits
    assert peers.choose_n(slow, 1_000_000, 2.0) == 2400
    assert calls == [100, 1000]  # 1000 messages took 0.81 s, a quarter of the budget or more
    crawl, _ = case(10.0)
    assert peers.choose_n(crawl, 1_000_000, 2.0) == 100  # never fewer than 100
    assert peers.round_down(987_654) == 980_000


def test_twins_run_before_their_rows_on_even_runs() -> None:
    peers = load_peers_module()
    timed: list[str] = []

    def measure(name: str) -> Any:
        def run(n: int) -> float:
            if n == 20_000:  # the timed runs, not the warm-up
                timed.append(name)
            return n / 1e6

        return run

    cases = peers.with_shared_twins(
        [
            peers.Case("g", "peer", "d", measure("peer"), reference=True, scalable=False),
            peers.Case("g", "mqlite send", "d", measure("ex"), scalable=False, twin=measure("sh")),
            peers.Case("g", "other", "d", measure("other"), scalable=False),
        ]
    )
    args = argparse.Namespace(runs=3, n=20_000, budget=1.0)
    rows = peers.run_group(cases, args, [])
    assert [r["system"] for r in rows] == ["peer", "mqlite send", "mqlite send (shared mode)", "other"]
    once = ["peer", "ex", "sh", "other"]
    assert timed == once + ["peer", "sh", "ex", "other"] + once
    # A twin whose row is left out keeps its place after the row before it.
    assert peers.run_order([cases[0], cases[2], cases[3]], 2) == [0, 1, 2]


def test_report_without_figures(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPORT), "--in", str(tmp_path / "missing.json"), "--out", str(tmp_path / "b.md")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "no figures to render" in proc.stderr
    assert not (tmp_path / "b.md").exists()


def test_python_rates_runs_interleaved_into_json_and_report(tmp_path: Path) -> None:
    # Two runs of the send_batch rows (and the deque baselines, which the
    # filter keeps): every run's seconds in the JSON, and the page shows
    # each row's median with its min-max.
    out = tmp_path / "python-rates.json"
    env = dict(os.environ, MQLITE_BENCH_RUNS="2", MQLITE_BENCH_JSON=str(out), MQLITE_BENCH_MACHINE="shared")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "python_rates.py"), "2000", "send_batch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.index("run 1 of 2") < proc.stdout.index("run 2 of 2")
    doc = json.loads(out.read_text())
    assert doc["kind"] == "engine" and doc["runs"] == 2 and doc["interleaved"] is True
    for r in doc["rows"]:
        rates = sorted(r["msgs"] / s for s in r["secs"])
        assert r["msgs_per_s"]["min"] == pytest.approx(rates[0]) and r["msgs_per_s"]["max"] == pytest.approx(rates[-1])
    assert doc["machine_state"] == "shared" and doc["load_avg"]["end"] is not None
    names = [r["name"] for r in doc["rows"]]
    assert any("send_batch" in n for n in names) and "collections.deque.append, 100 B" in names
    for r in doc["rows"]:
        assert len(r["secs"]) == 2 and all(s > 0 for s in r["secs"]), r
        assert r["baseline"] in names
    md = tmp_path / "b.md"
    proc = subprocess.run(
        [sys.executable, str(REPORT), "--in", str(out), "--out", str(md), "--no-chart"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = md.read_text()
    assert "machine shared (as stated by whoever ran it)" in page
    row = next(line for line in page.splitlines() if line.startswith("| mqlite Producer.send_batch, acks=1,"))
    assert re.search(r"\| [\d.]+ [Mk] \([\d.]+ [Mk]-[\d.]+ [Mk]\) \|", row), row


def test_report_keeps_the_printed_output_of_a_bench_without_json(tmp_path: Path) -> None:
    # `make bench` keeps engine-<name>.txt when a bench wrote no JSON; the
    # page shows it as printed, and says it cannot be checked.
    results = tmp_path / "results"
    results.mkdir()
    (results / "engine-sweep.txt").write_text("| row | rate |\n|---|---|\n| sweep row 42 | 1.0 M |\n")
    md = tmp_path / "b.md"
    proc = subprocess.run(
        [sys.executable, str(REPORT), "--dir", str(results), "--out", str(md), "--no-chart"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = md.read_text()
    assert "### The engine: `cargo bench -p mqlite --bench sweep` (printed output, no JSON)" in page
    assert "| sweep row 42 | 1.0 M |" in page


def test_kafka_python_bench_runs_against_confluent_kafka(tmp_path: Path) -> None:
    # bench/kafka_python.py at a tiny N, two interleaved runs, on a tansu it
    # starts and stops itself: every row in the JSON, each mqlite row with
    # its confluent-kafka baseline. Without tansu it measures nothing.
    spec = importlib.util.spec_from_file_location("bench_kafka_python", ROOT / "bench" / "kafka_python.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.tansu_binary() is None:
        if os.environ.get("MQLITE_KAFKA_REQUIRED") == "1":
            pytest.fail("MQLITE_KAFKA_REQUIRED=1 but no tansu binary was found")
        pytest.skip("no tansu binary (see tests/python/kafka_cluster.py)")
    out = tmp_path / "python-kafka.json"
    env = dict(os.environ, MQLITE_BENCH_RUNS="2", MQLITE_BENCH_JSON=str(out), MQLITE_BENCH_MACHINE="shared")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "kafka_python.py"), "2000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.index("run 1 of 2") < proc.stdout.index("run 2 of 2")
    doc = json.loads(out.read_text())
    assert doc["suite"] == "python-kafka" and doc["kind"] == "engine" and doc["runs"] == 2
    names = [r["name"] for r in doc["rows"]]
    for size in ("100 B", "1 KiB"):
        for row in (
            "mqlite Producer.send",
            "mqlite Producer.send_batch of 1,000",
            "mqlite Producer.produce, then flush()",
            "mqlite Consumer.poll",
            "mqlite: iterate a Consumer",
            "mqlite Consumer.poll_batch",
        ):
            assert f"{row}, {size}" in names, (row, size, names)
    for r in doc["rows"]:
        assert len(r["secs"]) == 2 and all(s > 0 for s in r["secs"]), r
        if r["name"].startswith("mqlite"):
            assert r["baseline"] in names and r["baseline"].startswith("confluent-kafka"), r
            assert r["ratio_to_baseline"]["min"] <= r["ratio_to_baseline"]["max"], r
        else:
            assert r["baseline"] is None, r
    assert doc["machine_state"] == "shared" and doc["load_avg"]["end"] is not None
