"""Share groups whose members are in several processes of a shared data
directory (``mqlite.open(path, shared=True)``): they take disjoint
messages and each is acknowledged once; the messages a killed process
held go to the others at once, counted as delivered."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import mqlite

SPAWN = multiprocessing.get_context("spawn")
N = 600


def open_shared(path: str) -> mqlite.Broker:
    return mqlite.open(path, prefault=False, retention_check_interval_ms=0, shared=True)


def worker(path: str, stop: Any, results: Any) -> None:
    """Takes and acknowledges messages of group `w` until `stop` is set,
    then reports `(value, delivery_count)` of each."""
    got: list[tuple[bytes, int]] = []
    try:
        with open_shared(path) as mq:
            sc = mq.share_consumer("w", "jobs", lock_duration_ms=30000, max_poll_records=10)
            results.put(("ready", None))
            while not stop.is_set():
                for m in sc.poll_batch(timeout=0.05):
                    got.append((m.value, m.delivery_count))
                    m.ack()
            sc.close()
        results.put(("done", got))
    except BaseException as e:  # reported to the parent, which fails the test
        results.put(("error", repr(e)))


def hoarder(path: str, results: Any) -> None:
    """Takes one poll's messages with a lock of a minute, reports them,
    and waits to be killed."""
    with open_shared(path) as mq:
        sc = mq.share_consumer("w", "jobs", lock_duration_ms=60000, max_poll_records=50)
        held = sc.poll_batch(timeout=10)
        results.put(("held", [m.value for m in held]))
        stop = multiprocessing.Event()
        stop.wait(120)


def fill(path: Path, n: int) -> None:
    with open_shared(str(path)) as mq:
        mq.create_topic("jobs", partitions=3)
        p = mq.producer()
        for i in range(n):
            p.send("jobs", b"%d" % i, partition=i % 3)
        p.flush()


def get(results: Any, kind: str, timeout: float = 60.0) -> Any:
    try:
        k, v = results.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"no {kind} report within {timeout} s")
    assert k == kind, (k, v)
    return v


def test_members_in_several_processes_take_disjoint_messages(tmp_path: Path) -> None:
    fill(tmp_path, N)
    stop = SPAWN.Event()
    results = SPAWN.Queue()
    procs = [SPAWN.Process(target=worker, args=(str(tmp_path), stop, results)) for _ in range(3)]
    for p in procs:
        p.start()
    for _ in procs:
        get(results, "ready")
    with open_shared(str(tmp_path)) as mq:
        sc = mq.share_consumer("w", "jobs")
        end = time.monotonic() + 60
        while sc.backlog().available + sc.backlog().in_flight > 0:
            assert time.monotonic() < end, sc.backlog()
            time.sleep(0.05)
        sc.close()
    stop.set()
    got = [m for _ in procs for m in get(results, "done")]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    values = sorted(int(v) for v, _ in got)
    assert values == list(range(N)), "every message once"
    assert all(c == 1 for _, c in got)


def test_a_killed_processes_messages_go_to_the_others(tmp_path: Path) -> None:
    fill(tmp_path, 100)
    results = SPAWN.Queue()
    h = SPAWN.Process(target=hoarder, args=(str(tmp_path), results))
    h.start()
    held = get(results, "held")
    assert held
    assert h.pid is not None
    os.kill(h.pid, signal.SIGKILL)
    h.join(30)
    with open_shared(str(tmp_path)) as mq:
        sc = mq.share_consumer("w", "jobs", lock_duration_ms=30000)
        got = []
        end = time.monotonic() + 20  # the hoarder's locks last a minute
        while len(got) < 100 and time.monotonic() < end:
            for m in sc.poll_batch(timeout=0.1):
                got.append((m.value, m.delivery_count))
                m.ack()
        sc.close()
    assert sorted(int(v) for v, _ in got) == list(range(100))
    for v, c in got:
        assert c == (2 if v in held else 1), v
