"""A group member killed with SIGKILL: a new member resumes at the last
commit that returned. Every message is read at least once, and only those
handed out after that commit are read twice: with commits synced
(`commit_acks="all"`) and with commits only written to the operating
system (`commit_acks=1`, which a process crash keeps)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from groups_util import SEG

import mqlite

PARTITIONS = 2
PER_PARTITION = 150

CHILD = r"""
import sys, time
import mqlite

mq = mqlite.open(sys.argv[1], prefault=False)
acks = sys.argv[2] if sys.argv[2] == "all" else int(sys.argv[2])
c = mq.consumer("g", enable_auto_commit=False, max_poll_records=16, commit_acks=acks)
c.subscribe(["t"])
n = 0
while True:
    m = c.poll(10)
    if m is None:
        break
    print("M", m.partition, m.offset, flush=True)
    n += 1
    if n % 10 == 0:
        done = c.commit()
        print("C", " ".join(f"{p}:{o}" for _, p, o in done), flush=True)
    time.sleep(0.005)
"""


@pytest.mark.parametrize("commit_acks", ["all", "1"])
def test_new_member_resumes_at_the_last_commit(data_dir: Path, commit_acks: str) -> None:
    with mqlite.open(data_dir, prefault=False) as mq:
        mq.create_topic("t", partitions=PARTITIONS, segment_bytes=SEG)
        p = mq.producer(acks="all")
        for part in range(PARTITIONS):
            p.send_batch("t", [b"v"] * PER_PARTITION, partition=part)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data_dir), commit_acks],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    lines: list[list[str]] = []
    commits = after = 0
    deadline = time.monotonic() + 30
    # Kill it 5 messages after its 5th commit: those are read again.
    while after < 5:
        assert time.monotonic() < deadline, lines
        line = child.stdout.readline()
        assert line, f"child ended early: {lines}"
        lines.append(line.split())
        commits += line.startswith("C")
        after += commits >= 5 and line.startswith("M")
    os.kill(child.pid, signal.SIGKILL)
    lines.extend(line.split() for line in child.stdout)  # whatever it wrote before dying
    assert child.wait() == -signal.SIGKILL
    seen_by_child = [(int(x[1]), int(x[2])) for x in lines if x[0] == "M"]
    last_commit: dict[int, int] = {}
    for x in lines:
        if x[0] == "C":
            last_commit.update({int(a): int(b) for a, b in (kv.split(":") for kv in x[1:])})
    assert len(seen_by_child) < PARTITIONS * PER_PARTITION  # killed half-way

    # The lock died with the child: a new process (here, this one) opens it.
    with mqlite.open(data_dir, prefault=False) as mq:
        assert mq.describe_group("g").committed == {("t", p): (o, "") for p, o in last_commit.items()}
        c = mq.consumer("g", enable_auto_commit=False)
        c.subscribe("t")
        resumed: list[tuple[int, int]] = []
        while True:
            batch = c.consume(500, timeout=0.5)
            if not batch:
                break
            resumed.extend((m.partition, m.offset) for m in batch)
    firsts = {part: min(o for q, o in resumed if q == part) for part in {q for q, _ in resumed}}
    assert firsts == {part: last_commit.get(part, 0) for part in firsts}
    everything = set(seen_by_child) | set(resumed)
    assert everything == {(part, o) for part in range(PARTITIONS) for o in range(PER_PARTITION)}
    twice = set(seen_by_child) & set(resumed)
    assert len(twice) >= 5
    assert twice == {(part, o) for part, o in seen_by_child if o >= last_commit.get(part, 0)}
    assert len(resumed) == len(set(resumed))
