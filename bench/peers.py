"""mqlite from Python against the queues a Python user would pick instead.

Usage: .venv/bin/python bench/peers.py [--n N] [--sizes 100,1024] [--runs 3]
       [--budget SECONDS] [--only FILTER] [--out FILE] [--quick] [--exclusive-only]

Measures, in one run on this machine, producing and consuming messages of
each size (100 B and 1 KiB by default) with:

- mqlite: ``send`` one by one, ``produce`` + ``flush``, ``send_batch``, and
  consuming by iterating a consumer and by ``consume()`` in batches;
- persist-queue (``SQLiteQueue`` and its file ``Queue``), litequeue,
  diskcache's ``Deque``, queuelib's ``FifoDiskQueue``;
- Redis Streams (XADD, XREAD) against a redis-server this script starts on
  127.0.0.1 (a free port, its own temporary directory) and stops when done;
- ``collections.deque``, the ceiling for the cost of one Python call.

Rows are grouped: rows in one group do the same work at a comparable
durability, and each group has one mqlite reference row. The groups, per
size S:

- ``produce S B, acks=1``: one call per message, no fsync (each row says
  what survives a crash of the process);
- ``produce S B, acks=1, batches of 1000``: the same through each system's
  batch API (a list of 1000 values per call, one transaction, a pipeline);
  lists built before the clock starts, for every system alike;
- ``produce S B, acks=all`` and ``..., batches of 1000``: each call returns
  once its messages are on disk (fsync or msync). Peers without such a mode
  are left out, with a note;
- ``consume S B``: reading back messages written before the clock starts;
- ``consume S B, one-record batches``: the same read of a log written by one
  ``send`` per message, beside queuelib (one record per entry) and a
  buffered read of a file of the same bytes (the floor);
- ``job queue S B, get + ack per item`` and ``..., ack synced``: taking
  items put before the clock starts and acknowledging each, with
  persist-queue's ``SQLiteAckQueue``, its drop-in
  ``mqlite.compat.persistqueue``, and mqlite's share consumers
  (bench/peers_jobqueue.py).

The durable batched groups have a floor too: one ``os.write`` of each batch
then ``os.fdatasync``.

mqlite's rows open their data directory in exclusive mode by name; each of
its producer and consumer rows is followed by its shared-mode twin,
"<row> (shared mode)", the same work with the directory opened in shared
mode, run interleaved with the rest of its group (``--exclusive-only``
leaves the twins out).

mqlite's rows (but for ``send`` with acks=all) and the baselines use N
messages, after a warm-up run. The other rows first run at growing N to
measure their rate, then use N messages, or fewer when the timed part would
take longer than ``--budget`` seconds per run (fsync per message, slow
peers), or the whole run with its untimed setup (filling a queue before
consuming it, closing) five times that: rates are messages per second, so
the figures stay comparable; such rows say so in their note. The timed runs
of a group go round its rows, ``--runs`` times; medians are reported, and
the JSON keeps every run's rate, the min and max, the load average before
and after, and the commit measured. The
JSON (its format is in bench/report.py) goes to
target/bench/python-peers.json; bench/report.py renders it.

Everything is written under a temporary directory in $TMPDIR, removed at the
end.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import mqlite

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_jobqueue  # noqa: E402  (beside this script)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "target" / "bench" / "python-peers.json"
BATCH = 1000
# Calibration starts here and grows tenfold until a run takes a quarter of the budget.
CALIBRATION_START = 100
# A whole call, setup included, may take this many times the budget.
WALL_FACTOR = 5
# Messages of the untimed warm-up run of a row that always uses N.
WARM_UP = 10_000

perf_counter = time.perf_counter


# Messages -------------------------------------------------------------------


def pad_for(size: int) -> bytes:
    """The constant part of a message of `size` bytes (the last 8 are its number)."""
    return b"x" * (size - 8)


def batches_for(n: int, size: int) -> list[list[bytes]]:
    """n distinct messages of `size` bytes, in lists of BATCH."""
    pad = pad_for(size)
    return [[pad + i.to_bytes(8, "little") for i in range(s, min(n, s + BATCH))] for s in range(0, n, BATCH)]


# Where the data goes ----------------------------------------------------------


class Scratch:
    """A temporary directory under $TMPDIR handing out fresh subdirectories."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="mqlite-peers-"))
        self._count = 0

    @contextlib.contextmanager
    def dir(self) -> Iterator[Path]:
        """A new empty directory, removed with its contents afterwards."""
        self._count += 1
        path = self.root / f"run{self._count}"
        path.mkdir()
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# Cases ------------------------------------------------------------------------

Measure = Callable[[int], float]  # n messages -> seconds taken


@dataclass
class Case:
    """One row: what is measured, at which durability, and how."""

    group: str
    system: str
    durability: str
    measure: Measure
    reference: bool = False
    baseline: bool = False
    note: str = ""
    # May N be cut to fit the budget? None: peers yes; mqlite rows and baselines no (always N).
    scalable: Optional[bool] = None
    size: int = 0  # set by plan()
    # The same measure with mqlite's directory opened in shared mode: a twin row after this one.
    twin: Optional[Measure] = None
    # Whether this row is the shared-mode twin of the row before it.
    is_twin: bool = False


def check(got: int, n: int, what: str) -> None:
    """Fails the row when a system did not take or return all n messages."""
    if got != n:
        raise RuntimeError(f"{what}: {got} of {n} messages")


# collections.deque: the per-call ceiling --------------------------------------


def deque_append(size: int) -> Measure:
    pad = pad_for(size)

    def measure(n: int) -> float:
        q: collections.deque[bytes] = collections.deque()
        t0 = perf_counter()
        for i in range(n):
            q.append(pad + i.to_bytes(8, "little"))
        secs = perf_counter() - t0
        check(len(q), n, "deque.append")
        return secs

    return measure


def deque_extend(size: int) -> Measure:
    def measure(n: int) -> float:
        batches = batches_for(n, size)
        q: collections.deque[bytes] = collections.deque()
        t0 = perf_counter()
        for b in batches:
            q.extend(b)
        secs = perf_counter() - t0
        check(len(q), n, "deque.extend")
        return secs

    return measure


def deque_popleft(size: int) -> Measure:
    def measure(n: int) -> float:
        q = collections.deque(v for b in batches_for(n, size) for v in b)
        total = 0
        t0 = perf_counter()
        for _ in range(n):
            total += len(q.popleft())
        secs = perf_counter() - t0
        check(total, n * size, "deque.popleft bytes")
        return secs

    return measure


# mqlite -------------------------------------------------------------------------


@contextlib.contextmanager
def mqlite_topic(scratch: Scratch, mode: str = "exclusive") -> Iterator[mqlite.Broker]:
    """A broker in a fresh directory with topic "t" (one partition, default settings),
    the directory opened in `mode` by name (exclusive, or shared for a shared-mode twin)."""
    with scratch.dir() as d:
        mq = mqlite.open(d, mode=mode)
        try:
            mq.create_topic("t")
            yield mq
        finally:
            mq.close()


def mqlite_send(scratch: Scratch, size: int, acks: Any, mode: str = "exclusive") -> Measure:
    pad = pad_for(size)

    def measure(n: int) -> float:
        with mqlite_topic(scratch, mode) as mq:
            p = mq.producer(acks=acks)
            t0 = perf_counter()
            for i in range(n):
                p.send("t", pad + i.to_bytes(8, "little"))
            secs = perf_counter() - t0
            check(p.stats().records, n, "mqlite send")
            p.close()
            return secs

    return measure


def mqlite_produce(scratch: Scratch, size: int, acks: Any, mode: str = "exclusive") -> Measure:
    pad = pad_for(size)

    def measure(n: int) -> float:
        with mqlite_topic(scratch, mode) as mq:
            p = mq.producer(acks=acks)
            t0 = perf_counter()
            for i in range(n):
                p.produce("t", pad + i.to_bytes(8, "little"))
            p.flush()
            secs = perf_counter() - t0
            stats = p.stats()
            check(stats.records, n, "mqlite produce")
            check(stats.errors, 0, "mqlite produce errors")
            p.close()
            return secs

    return measure


def mqlite_send_batch(scratch: Scratch, size: int, acks: Any, mode: str = "exclusive") -> Measure:
    def measure(n: int) -> float:
        batches = batches_for(n, size)
        with mqlite_topic(scratch, mode) as mq:
            p = mq.producer(acks=acks)
            t0 = perf_counter()
            for b in batches:
                p.send_batch("t", b)
            secs = perf_counter() - t0
            check(p.stats().records, n, "mqlite send_batch")
            p.close()
            return secs

    return measure


def mqlite_consume(
    scratch: Scratch, size: int, batched: bool, singles: bool = False, mode: str = "exclusive"
) -> Measure:
    """Reads n messages back; with `singles` they were written by one `send`
    each (one record per log batch), else by `send_batch` of BATCH."""

    def measure(n: int) -> float:
        with mqlite_topic(scratch, mode) as mq:
            with mq.producer(acks=1) as p:
                for b in batches_for(n, size):
                    if singles:
                        for v in b:
                            p.send("t", v)
                    else:
                        p.send_batch("t", b)
            c = mq.consumer("bench", auto_offset_reset="earliest")
            total = got = 0
            t0 = perf_counter()
            c.subscribe(["t"])
            if batched:
                while got < n:
                    msgs = c.consume(min(BATCH, n - got), timeout=10.0)
                    if not msgs:
                        raise RuntimeError(f"mqlite consume: timed out after {got} of {n}")
                    for m in msgs:
                        total += len(m.value)  # type: ignore[arg-type]
                    got += len(msgs)
            else:
                for m in c:
                    total += len(m.value)  # type: ignore[arg-type]
                    got += 1
                    if got == n:
                        break
            secs = perf_counter() - t0
            c.close()
            check(total, n * size, "mqlite consume bytes")
            return secs

    return measure


# persist-queue ------------------------------------------------------------------


def pq_sqlite(scratch: Scratch, size: int, synchronous: str, op: str) -> Measure:
    """persist-queue SQLiteQueue; op is "put" or "get" (get: auto_commit=False, task_done per BATCH)."""
    import persistqueue

    pad = pad_for(size)

    def measure(n: int) -> float:
        with scratch.dir() as d:
            q = persistqueue.SQLiteQueue(str(d / "q"), auto_commit=(op == "put"))
            # One connection when multithreading=False; the library offers no setting for this.
            q._putter.execute(f"PRAGMA synchronous={synchronous}")  # type: ignore[attr-defined]
            try:
                return pq_put_or_get(q, op, n, pad, "SQLiteQueue")
            finally:
                q.close()

    return measure


def pq_put_or_get(q: Any, op: str, n: int, pad: bytes, name: str) -> float:
    """Seconds for n puts (op "put"), or for n gets with task_done() every
    BATCH after n untimed puts (op "get"), on a persist-queue queue."""
    if op == "put":
        t0 = perf_counter()
        for i in range(n):
            q.put(pad + i.to_bytes(8, "little"))
        secs = perf_counter() - t0
        check(q.qsize(), n, f"{name}.put")
        return secs
    for i in range(n):
        q.put(pad + i.to_bytes(8, "little"))
    total = 0
    t0 = perf_counter()
    for i in range(n):
        total += len(q.get(block=False))
        if (i + 1) % BATCH == 0 or i + 1 == n:
            q.task_done()
    secs = perf_counter() - t0
    check(total, n * (len(pad) + 8), f"{name}.get bytes")
    return secs


def pq_file(scratch: Scratch, size: int, op: str) -> Measure:
    """persist-queue's file Queue, chunks of 10,000 messages; op is "put" or "get"."""
    import persistqueue

    pad = pad_for(size)

    def measure(n: int) -> float:
        with scratch.dir() as d:
            (d / "tmp").mkdir()
            q = persistqueue.Queue(str(d / "q"), chunksize=10_000, tempdir=str(d / "tmp"))
            return pq_put_or_get(q, op, n, pad, "Queue")

    return measure


# litequeue ------------------------------------------------------------------------


def litequeue_case(scratch: Scratch, size: int, synchronous: str, op: str) -> Measure:
    """litequeue; op is "put", "put_batch" (a transaction per BATCH) or "pop"."""
    from litequeue import LiteQueue

    pad = pad_for(size)

    def measure(n: int) -> float:
        with scratch.dir() as d:
            q = LiteQueue(str(d / "q.db"))
            q.conn.execute(f"PRAGMA synchronous={synchronous}")
            try:
                if op == "put":
                    t0 = perf_counter()
                    for i in range(n):
                        q.put(pad + i.to_bytes(8, "little"))
                    secs = perf_counter() - t0
                elif op == "put_batch":
                    batches = batches_for(n, size)
                    t0 = perf_counter()
                    for b in batches:
                        with q.transaction():
                            for v in b:
                                q.put(v)
                    secs = perf_counter() - t0
                else:
                    for b in batches_for(n, size):
                        with q.transaction():
                            for v in b:
                                q.put(v)
                    total = 0
                    t0 = perf_counter()
                    for _ in range(n):
                        total += len(q.pop().data)
                    secs = perf_counter() - t0
                    check(total, n * size, "litequeue pop bytes")
                    return secs
                check(q.qsize(), n, "litequeue put")
                return secs
            finally:
                q.close()

    return measure


# diskcache ------------------------------------------------------------------------


def diskcache_case(scratch: Scratch, size: int, synchronous: int, op: str) -> Measure:
    """diskcache Deque; op is "append", "extend" (a transaction per BATCH) or "popleft"."""
    import diskcache

    pad = pad_for(size)

    def measure(n: int) -> float:
        with scratch.dir() as d:
            cache = diskcache.Cache(str(d / "c"), eviction_policy="none", sqlite_synchronous=synchronous)
            q = diskcache.Deque.fromcache(cache)
            try:
                if op == "append":
                    t0 = perf_counter()
                    for i in range(n):
                        q.append(pad + i.to_bytes(8, "little"))
                    secs = perf_counter() - t0
                elif op == "extend":
                    batches = batches_for(n, size)
                    t0 = perf_counter()
                    for b in batches:
                        with q.transact():
                            q.extend(b)
                    secs = perf_counter() - t0
                else:
                    for b in batches_for(n, size):
                        with q.transact():
                            q.extend(b)
                    total = 0
                    t0 = perf_counter()
                    for _ in range(n):
                        total += len(q.popleft())
                    secs = perf_counter() - t0
                    check(total, n * size, "Deque.popleft bytes")
                    return secs
                check(len(q), n, "Deque append")
                return secs
            finally:
                cache.close()

    return measure


# Raw files: the floor under a durable batch and under a read ------------------------


def raw_write_fdatasync(scratch: Scratch, size: int) -> Measure:
    """One os.write of each batch of BATCH messages (joined first), then os.fdatasync."""

    def measure(n: int) -> float:
        batches = batches_for(n, size)
        with scratch.dir() as d:
            fd = os.open(d / "raw", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                t0 = perf_counter()
                for b in batches:
                    os.write(fd, b"".join(b))
                    os.fdatasync(fd)
                secs = perf_counter() - t0
                check(os.fstat(fd).st_size, n * size, "raw write + fdatasync bytes")
                return secs
            finally:
                os.close(fd)

    return measure


def raw_file_read(scratch: Scratch, size: int) -> Measure:
    """A file of the n messages back to back, read one message at a time through a 64 KiB buffer."""

    def measure(n: int) -> float:
        with scratch.dir() as d:
            with open(d / "raw", "wb") as f:
                for b in batches_for(n, size):
                    f.write(b"".join(b))
            total = 0
            with open(d / "raw", "rb", buffering=64 << 10) as f:
                t0 = perf_counter()
                for _ in range(n):
                    total += len(f.read(size))
                secs = perf_counter() - t0
            check(total, n * size, "raw read bytes")
            return secs

    return measure


# queuelib -------------------------------------------------------------------------


def queuelib_case(scratch: Scratch, size: int, op: str) -> Measure:
    """queuelib FifoDiskQueue; op is "push" or "pop"."""
    from queuelib import FifoDiskQueue

    pad = pad_for(size)

    def measure(n: int) -> float:
        with scratch.dir() as d:
            q = FifoDiskQueue(d / "q")
            try:
                if op == "push":
                    t0 = perf_counter()
                    for i in range(n):
                        q.push(pad + i.to_bytes(8, "little"))
                    secs = perf_counter() - t0
                    check(len(q), n, "FifoDiskQueue.push")
                    return secs
                for i in range(n):
                    q.push(pad + i.to_bytes(8, "little"))
                total = 0
                t0 = perf_counter()
                for _ in range(n):
                    total += len(q.pop())  # type: ignore[arg-type]
                secs = perf_counter() - t0
                check(total, n * size, "FifoDiskQueue.pop bytes")
                return secs
            finally:
                q.close()

    return measure


# Redis Streams ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of our own on 127.0.0.1, with AOF on, in its own directory."""

    def __init__(self, directory: Path) -> None:
        import redis

        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
        directory.mkdir(parents=True)
        self.directory = directory
        self.port = free_port()
        self.log = directory / "redis.log"
        args = [exe, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(directory)]
        args += ["--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no"]
        args += ["--logfile", str(self.log)]
        devnull = subprocess.DEVNULL
        self.proc = subprocess.Popen(args, stdin=devnull, stdout=devnull, stderr=subprocess.STDOUT)
        self.client = redis.Redis(host="127.0.0.1", port=self.port, protocol=2)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with code {self.proc.returncode}: {self.log_tail()}")
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not answer within 10 s: {self.log_tail()}") from None
                time.sleep(0.05)
        self.version = self.client.info("server")["redis_version"]

    def log_tail(self) -> str:
        try:
            return " | ".join(self.log.read_text().strip().splitlines()[-3:])
        except OSError:
            return "(no log)"

    def reset(self, appendfsync: str) -> None:
        """An empty stream and the given AOF fsync policy."""
        self.client.delete("s")
        self.client.config_set("appendfsync", appendfsync)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.client.close()


def redis_case(server: RedisServer, size: int, appendfsync: str, op: str) -> Measure:
    """Redis Streams; op is "xadd" (a round trip each), "xadd_pipeline" (BATCH per pipeline) or "xread"."""
    pad = pad_for(size)
    r = server.client

    def fill(batches: list[list[bytes]]) -> None:
        pipe = r.pipeline(transaction=False)
        for b in batches:
            for v in b:
                pipe.xadd("s", {"v": v})
            pipe.execute()

    def measure(n: int) -> float:
        server.reset(appendfsync)
        try:
            if op == "xadd":
                t0 = perf_counter()
                for i in range(n):
                    r.xadd("s", {"v": pad + i.to_bytes(8, "little")})
                secs = perf_counter() - t0
                check(r.xlen("s"), n, "XADD")
                return secs
            if op == "xadd_pipeline":
                batches = batches_for(n, size)
                t0 = perf_counter()
                fill(batches)
                secs = perf_counter() - t0
                check(r.xlen("s"), n, "XADD pipelined")
                return secs
            fill(batches_for(n, size))
            total = got = 0
            last = b"0-0"
            t0 = perf_counter()
            while got < n:
                reply: Any = r.xread({"s": last}, count=BATCH)
                entries = reply[0][1]
                for _id, fields in entries:
                    total += len(fields[b"v"])
                got += len(entries)
                last = entries[-1][0]
            secs = perf_counter() - t0
            check(total, n * size, "XREAD bytes")
            return secs
        finally:
            r.delete("s")

    return measure


# The plan -----------------------------------------------------------------------------

ACKS1 = "acks=1"
ACKSALL = "acks=all"
MQ_ACKS1 = "acks=1: in the page cache (no fsync per message)"
SQLITE_NORMAL = "SQLite WAL, synchronous=NORMAL: commit per call, no fsync"
SQLITE_FULL = "SQLite WAL, synchronous=FULL: fsync per commit"


def plan(
    sizes: list[int],
    scratch: Scratch,
    redis_server: Optional[RedisServer],
    notes: list[str],
    twins: bool = True,
) -> list[Case]:
    """Every row, in the order they run; each group's reference row first.

    With `twins`, each mqlite row with a shared-mode measure is followed by
    that row in shared mode (see `with_shared_twins`)."""
    cases: list[Case] = []
    for size in sizes:
        first = len(cases)
        g = f"produce {size} B, {ACKS1}"
        cases += [
            mqlite_row(g, "mqlite send", MQ_ACKS1, mqlite_send, scratch, size, 1, reference=True),
            mqlite_row(g, "mqlite produce + flush", MQ_ACKS1 + "; delivery reports", mqlite_produce, scratch, size, 1),
            Case(g, "persist-queue SQLiteQueue.put", SQLITE_NORMAL, pq_sqlite(scratch, size, "NORMAL", "put")),
            Case(
                g,
                "persist-queue Queue.put (files)",
                "flush() to the OS per put, info file replaced per put; fsync once per chunk of 10,000",
                pq_file(scratch, size, "put"),
            ),
            Case(g, "litequeue put", SQLITE_NORMAL, litequeue_case(scratch, size, "NORMAL", "put")),
            Case(g, "diskcache Deque.append", SQLITE_NORMAL, diskcache_case(scratch, size, 1, "append")),
            Case(
                g,
                "queuelib FifoDiskQueue.push",
                "os.write per push, no fsync; head/tail positions saved only at close()",
                queuelib_case(scratch, size, "push"),
            ),
        ]
        if redis_server:
            cases.append(
                Case(
                    g,
                    "Redis Streams XADD, a round trip each",
                    "AOF, appendfsync everysec (fsync once a second)",
                    redis_case(redis_server, size, "everysec", "xadd"),
                )
            )
        cases.append(Case(g, "collections.deque.append", "memory only", deque_append(size), baseline=True))

        g = f"produce {size} B, {ACKS1}, batches of {BATCH}"
        cases += [
            mqlite_row(g, "mqlite send_batch", MQ_ACKS1, mqlite_send_batch, scratch, size, 1, reference=True),
            Case(
                g,
                "litequeue put, a transaction per batch",
                "SQLite WAL, synchronous=NORMAL: commit per batch, no fsync",
                litequeue_case(scratch, size, "NORMAL", "put_batch"),
            ),
            Case(
                g,
                "diskcache Deque.extend, a transaction per batch",
                "SQLite WAL, synchronous=NORMAL: commit per batch, no fsync",
                diskcache_case(scratch, size, 1, "extend"),
            ),
        ]
        if redis_server:
            cases.append(
                Case(
                    g,
                    "Redis Streams XADD, pipelined",
                    "AOF, appendfsync everysec (fsync once a second)",
                    redis_case(redis_server, size, "everysec", "xadd_pipeline"),
                )
            )
        cases.append(Case(g, "collections.deque.extend", "memory only", deque_extend(size), baseline=True))

        g = f"produce {size} B, {ACKSALL}"
        cases += [
            # The reference is how mqlite serves durable produce: each
            # message's delivery is reported only once an msync covers it,
            # and one msync covers many messages. The blocking one-by-one
            # `send` is listed too: like every peer's put, it pays one
            # fsync per message, so it can only be level with them.
            mqlite_row(
                g,
                "mqlite produce + flush",
                "acks=all: each delivery reported after the msync that covers it (shared msyncs)",
                mqlite_produce, scratch, size, "all",
                reference=True,
            ),
            mqlite_row(
                g,
                "mqlite send",
                "acks=all: msync before each send returns",
                mqlite_send, scratch, size, "all",
                note="one thread, one msync per message",
                scalable=True,
            ),
            Case(g, "persist-queue SQLiteQueue.put", SQLITE_FULL, pq_sqlite(scratch, size, "FULL", "put")),
            Case(g, "litequeue put", SQLITE_FULL, litequeue_case(scratch, size, "FULL", "put")),
            Case(g, "diskcache Deque.append", SQLITE_FULL, diskcache_case(scratch, size, 2, "append")),
        ]
        if redis_server:
            cases.append(
                Case(
                    g,
                    "Redis Streams XADD, a round trip each",
                    "AOF, appendfsync always (fsync before the reply)",
                    redis_case(redis_server, size, "always", "xadd"),
                )
            )

        g = f"produce {size} B, {ACKSALL}, batches of {BATCH}"
        cases += [
            mqlite_row(
                g,
                "mqlite send_batch",
                "acks=all: one msync per send_batch call",
                mqlite_send_batch, scratch, size, "all",
                reference=True,
            ),
            Case(
                g,
                "litequeue put, a transaction per batch",
                "SQLite WAL, synchronous=FULL: fsync per batch",
                litequeue_case(scratch, size, "FULL", "put_batch"),
            ),
            Case(
                g,
                "diskcache Deque.extend, a transaction per batch",
                "SQLite WAL, synchronous=FULL: fsync per batch",
                diskcache_case(scratch, size, 2, "extend"),
            ),
        ]
        if redis_server:
            cases.append(
                Case(
                    g,
                    "Redis Streams XADD, pipelined",
                    "AOF, appendfsync always (fsync per event-loop round, before the replies)",
                    redis_case(redis_server, size, "always", "xadd_pipeline"),
                )
            )
        cases.append(
            Case(
                g,
                "raw os.write + os.fdatasync",
                f"one os.write of each batch of {BATCH} (joined), then os.fdatasync",
                raw_write_fdatasync(scratch, size),
                baseline=True,
            )
        )

        g = f"consume {size} B"
        cases += [
            mqlite_row(
                g,
                "mqlite consumer iteration",
                "reads the page cache; offsets auto-committed every 5 s",
                mqlite_consume, scratch, size, False,
                reference=True,
            ),
            mqlite_row(
                g,
                f"mqlite consume({BATCH})",
                "reads the page cache; offsets auto-committed every 5 s",
                mqlite_consume, scratch, size, True,
            ),
            Case(
                g,
                f"persist-queue SQLiteQueue.get, task_done per {BATCH}",
                "SQLite WAL, synchronous=NORMAL: auto_commit=False, a commit per task_done",
                pq_sqlite(scratch, size, "NORMAL", "get"),
            ),
            Case(
                g,
                f"persist-queue Queue.get (files), task_done per {BATCH}",
                "info file replaced per task_done, no fsync",
                pq_file(scratch, size, "get"),
            ),
            Case(
                g,
                "litequeue pop",
                "SQLite WAL, synchronous=NORMAL: marks each message locked, a commit per pop",
                litequeue_case(scratch, size, "NORMAL", "pop"),
            ),
            Case(
                g,
                "diskcache Deque.popleft",
                "SQLite WAL, synchronous=NORMAL: deletes each message, a commit per pop",
                diskcache_case(scratch, size, 1, "popleft"),
            ),
            Case(
                g,
                "queuelib FifoDiskQueue.pop",
                "os.read per pop; tail position saved only at close()",
                queuelib_case(scratch, size, "pop"),
            ),
        ]
        if redis_server:
            cases.append(
                Case(
                    g,
                    f"Redis Streams XREAD COUNT {BATCH}",
                    "reads memory; no consumer group",
                    redis_case(redis_server, size, "everysec", "xread"),
                )
            )
        cases.append(Case(g, "collections.deque.popleft", "memory only", deque_popleft(size), baseline=True))

        g = f"consume {size} B, one-record batches"
        cases += [
            mqlite_row(
                g,
                "mqlite consumer iteration",
                "a log written by one send per message (one record per batch); otherwise as in the consume group",
                mqlite_consume, scratch, size, False, True,
                reference=True,
            ),
            Case(
                g,
                "queuelib FifoDiskQueue.pop",
                "one os.write per push, one os.read per pop; tail position saved only at close()",
                queuelib_case(scratch, size, "pop"),
            ),
            Case(
                g,
                "raw file read, 64 KiB buffer",
                "a file of the messages back to back, f.read(size) per message",
                raw_file_read(scratch, size),
                baseline=True,
            ),
        ]
        cases += peers_jobqueue.cases(size, scratch, Case, BATCH, pad_for, check)
        if twins:
            cases[first:] = with_shared_twins(cases[first:])
        for c in cases[first:]:
            c.size = size
            if c.scalable is None:
                c.scalable = not (c.system.startswith("mqlite") or c.baseline)
    notes.append(
        f"Left out of the {ACKSALL} groups: persist-queue's file Queue (it fsyncs a chunk file only when the chunk "
        "fills and never its info file) and queuelib's FifoDiskQueue (no fsync at all)."
    )
    notes.append(
        f"Batched groups: persist-queue (both queues) and queuelib have no batch API (a put or push is its own "
        "commit or write), so they appear only in the one-call-per-message groups."
    )
    return cases


def mqlite_row(
    group: str, system: str, durability: str, factory: Callable[..., Measure], *args: Any, **kw: Any
) -> Case:
    """An mqlite row measuring `factory(*args)`, with its shared-mode twin
    `factory(*args, mode="shared")` (see `with_shared_twins`); `kw` go to `Case`."""
    return Case(group, system, durability, factory(*args), twin=factory(*args, mode="shared"), **kw)


def with_shared_twins(cases: list[Case]) -> list[Case]:
    """`cases` with each row that has a `twin` followed by it: the same row
    with mqlite's data directory opened in shared mode, "<system> (shared
    mode)". Twins run interleaved with the exclusive-mode rows of their
    group, so their ratio comes from one run; a twin runs after its row on
    odd runs and before it on even ones (see `run_order`)."""
    out: list[Case] = []
    for c in cases:
        out.append(c)
        if c.twin is not None:
            out.append(
                dataclasses.replace(
                    c,
                    system=f"{c.system} (shared mode)",
                    durability=f"{c.durability}; data directory opened in shared mode",
                    measure=c.twin,
                    reference=False,
                    twin=None,
                    is_twin=True,
                )
            )
    return out


# Running ----------------------------------------------------------------------------------


def round_down(x: float) -> int:
    """x rounded down to two significant digits (at least 100)."""
    x = max(100, int(x))
    scale = 10 ** max(0, len(str(x)) - 2)
    return x // scale * scale


def choose_n(case: Case, n_max: int, budget: float) -> int:
    """Runs the case at growing N (warming it up) and picks the N it uses.

    N is cut where the timed part would take more than `budget` seconds, or
    the whole call (setup such as filling a queue for a consume row, and
    closing) more than WALL_FACTOR times that.
    """
    n = min(n_max, CALIBRATION_START)
    while True:
        t0 = perf_counter()
        secs = case.measure(n)
        wall = perf_counter() - t0
        if n >= n_max or secs >= budget / 4 or wall >= budget * WALL_FACTOR / 4:
            break
        n = min(n_max, n * 10)
    fit = min(n / max(secs, 1e-9) * budget, n / max(wall, 1e-9) * budget * WALL_FACTOR)
    return n_max if fit >= n_max else min(n_max, round_down(fit))


def fmt_rate(rate: float) -> str:
    if rate >= 1e6:
        return f"{rate / 1e6:.2f} M"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f} k"
    return f"{rate:.0f}"


def machine() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    cpu = cpu or platform.processor() or platform.machine()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "rustc": None,
    }


def git_commit() -> dict[str, Any]:
    """The commit measured, and whether tracked files differed from it."""

    def out(*args: str) -> Optional[str]:
        try:
            return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None

    commit = out("rev-parse", "HEAD")
    status = out("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip() if commit else None, "dirty": None if status is None else bool(status.strip())}


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def run_order(cases: list[Case], run: int) -> list[int]:
    """The order in which run `run` (from 1) measures `cases`: as listed on
    odd runs; on even runs each shared-mode twin goes before its row, so
    that neither mode always runs right after the other (a row that runs
    second can find the page cache and the CPU's frequency as the first
    left them)."""
    order = list(range(len(cases)))
    if run % 2 == 0:
        for i in range(1, len(order)):
            # A twin whose row was left out stays where it is.
            if cases[i].is_twin and cases[i - 1].twin is not None:
                order[i - 1], order[i] = order[i], order[i - 1]
    return order


def run_group(cases: list[Case], args: argparse.Namespace, failed: list[str]) -> list[dict[str, Any]]:
    """Measures one group's rows and prints them; returns the JSON rows.

    A row that raises is left out and described in `failed`.

    The timed runs go round the rows (run 1 of every row, then run 2, ...),
    so that load from elsewhere on the machine falls on all rows alike;
    twins swap places with their rows on even runs (`run_order`).
    """
    sizes: dict[int, int] = {}
    times: dict[int, list[float]] = {}
    for i, c in enumerate(cases):
        try:
            if c.scalable:
                sizes[i] = choose_n(c, args.n, args.budget)
            else:
                c.measure(min(args.n, WARM_UP))
                sizes[i] = args.n
            times[i] = []
        except Exception as e:  # one broken row must not lose the others
            failed.append(f"{c.group}: {c.system}: {type(e).__name__}: {e}")
            print(f"FAILED {failed[-1]}", flush=True)
    for run in range(1, args.runs + 1):
        for i in run_order(cases, run):
            if i not in times:
                continue
            try:
                times[i].append(cases[i].measure(sizes[i]))
            except Exception as e:
                failed.append(f"{cases[i].group}: {cases[i].system}: {type(e).__name__}: {e}")
                print(f"FAILED {failed[-1]}", flush=True)
                del times[i]
    rows = []
    ref = None
    for i, secs in times.items():
        c, n = cases[i], sizes[i]
        rate = n / statistics.median(secs)
        runs = [n / s for s in secs]
        note = c.note
        if n < args.n:
            note = "; ".join(x for x in (note, f"N scaled down to {n:,} (slow row)") if x)
        row: dict[str, Any] = {
            "group": c.group,
            "system": c.system,
            "durability": c.durability,
            "n": n,
            "size": c.size,
            "msgs_per_s": rate,
            "runs_msgs_per_s": runs,
            "msgs_per_s_min": min(runs),
            "msgs_per_s_max": max(runs),
            "mb_per_s": rate * c.size / 1e6,
            "reference": c.reference,
        }
        if c.baseline:
            row["baseline"] = True
        if note:
            row["note"] = note
        rows.append(row)
        if c.reference:
            ref = rate
    print(f"{'system':<52} {'n':>10} {'msgs/s':>10} {'MB/s':>8} {'ratio':>7}  durability")
    for row in rows:
        ratio = f"{ref / row['msgs_per_s']:.2f}" if ref else "-"
        print(
            f"{row['system']:<52} {row['n']:>10,} {fmt_rate(row['msgs_per_s']):>10} {row['mb_per_s']:>8.1f}"
            f" {ratio:>7}  {row['durability']}",
            flush=True,
        )
    return rows


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="messages per run (default 1,000,000)")
    ap.add_argument("--sizes", default="100,1024", help="payload sizes in bytes, comma-separated (default 100,1024)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per row; medians are reported (default 3)")
    ap.add_argument(
        "--budget",
        type=float,
        default=2.0,
        help="seconds the timed part of a run may take before N is scaled down (with setup: 5x; default 2)",
    )
    ap.add_argument("--only", default="", help="only rows whose 'group: system' contains this (case-insensitive)")
    default_out = DEFAULT_OUT.relative_to(ROOT)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {default_out})")
    ap.add_argument("--quick", action="store_true", help="a tiny run to check that everything works: N=2000, 1 run")
    ap.add_argument("--no-redis", action="store_true", help="leave Redis out")
    ap.add_argument(
        "--exclusive-only",
        action="store_true",
        help="leave out the shared-mode twins of mqlite's rows (each mqlite row is measured in exclusive "
        "mode, then again with the data directory in shared mode)",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.runs, args.budget = min(args.n, 2000), 1, min(args.budget, 0.5)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.n < 1 or args.runs < 1 or args.budget <= 0:
        ap.error("--n and --runs must be at least 1, --budget positive")
    if any(s < 8 for s in args.sizes):
        ap.error("sizes must be at least 8 bytes")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    # Stopped from outside: still stop redis-server and remove the data.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scratch = Scratch()
    notes: list[str] = []
    redis_server: Optional[RedisServer] = None
    doc: dict[str, Any] = {
        "suite": "python",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "runs": args.runs,
        "interleaved": True,
        "command": " ".join([".venv/bin/python bench/peers.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine_state": os.environ.get("MQLITE_BENCH_MACHINE"),
        "git": git_commit(),
        "rows": [],
        "notes": notes,
        # Other work on the machine shows here: figures of a busy machine are lower and noisier.
        "load_avg": {"start": os.getloadavg()[0], "end": None},
    }
    try:
        if args.no_redis:
            notes.append("Redis: left out (--no-redis).")
        else:
            try:
                redis_server = RedisServer(scratch.root / "redis")
                notes.append(f"Redis {redis_server.version}, started by the bench on 127.0.0.1:{redis_server.port}.")
            except Exception as e:  # any failure to start means: no Redis rows, said once
                notes.append(f"Redis: skipped, {e}")
                print(f"SKIP Redis Streams rows: {e}", flush=True)
        cases = plan(args.sizes, scratch, redis_server, notes, twins=not args.exclusive_only)
        only = args.only.lower()
        cases = [c for c in cases if only in f"{c.group}: {c.system}".lower()]
        notes.append(
            f"N = {args.n:,} messages per run; a row whose timed run would take more than {args.budget:g} s (or "
            f"{args.budget * WALL_FACTOR:g} s with its untimed setup) uses fewer, and its note says how many: "
            "rates are messages per second, so rows stay comparable."
        )
        print(f"{len(cases)} rows, N = {args.n:,}, medians of {args.runs} runs; data in {scratch.root}", flush=True)
        failed: list[str] = []
        groups: dict[str, list[Case]] = {}
        for case in cases:
            groups.setdefault(case.group, []).append(case)
        for name, members in groups.items():
            print(f"\n## {name}", flush=True)
            doc["rows"] += run_group(members, args, failed)
            write_json(args.out, doc)
        print()
        for line in notes:
            print(f"note: {line}")
        for line in failed:
            notes.append(f"FAILED, left out: {line}")
        doc["load_avg"]["end"] = os.getloadavg()[0]
        write_json(args.out, doc)
        print(f"wrote {args.out}")
        if failed:
            print(f"{len(failed)} rows failed", file=sys.stderr)
            return 1
    finally:
        if redis_server:
            redis_server.stop()
        scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
