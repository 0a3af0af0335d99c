"""Append-to-print latency of `mqlite tail` in its two ways, interleaved.

    .venv/bin/python bench/tail_latency.py target/release/mqlite [N] [RUNS]

Each run opens a fresh data directory in shared mode (this process is the
writer), starts `mqlite tail t` (the read-only consumer, woken by the
directory's doorbell) or `mqlite tail t --files` (the segment files
polled every 50 ms), waits a second, then sends N records (default 60),
20 ms apart, timing each from just before `send` until tail has printed
it. Runs alternate consumer, files, consumer, files... (RUNS of each,
default 3); it prints each run's median and the files/consumer ratio of
each pair. Needs the Python module (`make ext`) and the CLI
(`cargo build --release -p mqlite-cli`).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

import mqlite


def run(binary: str, n: int, files: bool) -> list[float]:
    """One run: the latencies in ms."""
    with tempfile.TemporaryDirectory() as d:
        mq = mqlite.open(d, shared=True)
        mq.create_topic("t")
        producer = mq.producer()
        args = [binary, "--dir", d, "tail", "t"] + (["--files"] if files else [])
        tail = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, bufsize=1)
        assert tail.stdout is not None
        time.sleep(1.0)  # tail is up, at the end of the topic
        latencies = []
        try:
            for i in range(n):
                t0 = time.monotonic()
                producer.send("t", b"%d" % i)
                line = tail.stdout.readline()
                latencies.append((time.monotonic() - t0) * 1000)
                assert line.strip() == str(i), line
                time.sleep(0.02)
        finally:
            tail.kill()
            tail.wait()
            mq.close()
        return latencies


def main() -> None:
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    medians: dict[str, list[float]] = {"consumer": [], "files": []}
    for _ in range(runs):
        for files in (False, True):
            medians["files" if files else "consumer"].append(statistics.median(run(binary, n, files)))
    for way, m in medians.items():
        print(f"tail ({way}): median latency per run, ms: " + ", ".join(f"{x:.2f}" for x in m))
    ratios = [f / c for c, f in zip(medians["consumer"], medians["files"])]
    print("files/consumer, per pair of runs: " + ", ".join(f"{r:.0f}x" for r in ratios))


if __name__ == "__main__":
    main()
