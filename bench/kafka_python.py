"""mqlite's Python module on a Kafka cluster against confluent-kafka used directly, in one run.

Usage: .venv/bin/python bench/kafka_python.py [N [FILTER]]

Both sides run librdkafka (mqlite through the ``rdkafka`` crate, confluent-kafka through its
wheel: the same librdkafka version, 2.12.1) against a ``tansu`` broker this script starts on
127.0.0.1 with its storage in memory and stops at the end (found as the Kafka tests find it:
``MQLITE_TANSU``, then ``PATH``, then ``~/.cargo/bin``; without it the script says so and exits
0 having measured nothing). Each mqlite row has as baseline the same work done with
confluent-kafka, whose producers and consumers get the librdkafka properties mqlite sets for the
same settings (``producer_props`` and ``consumer_props`` below mirror
core/src/kafka/{producer,consumer}.rs), on a topic of one partition; values of 100 B and of
1 KiB, no key, no headers, one value object sent again and again (what is measured is the call,
not the building of values):

- ``send``: ``Producer.send``, which returns once the cluster acknowledged the record (acks=1,
  linger_ms=0), against ``produce`` with an ``on_delivery`` callback then ``flush()`` (the
  synchronous idiom of confluent-kafka); N/50 records.
- ``send_batch``: ``Producer.send_batch`` of BATCH values, which waits for all of them, against
  BATCH ``produce`` calls then ``flush()`` (acks=1, linger_ms=0); N/5 records (1 KiB: N/10).
- ``produce + flush``: ``Producer.produce`` of every record with an ``on_delivery`` callback, then
  one ``flush()``, against confluent-kafka's ``produce`` with a callback and ``poll(0)`` after
  each (its documented loop; mqlite serves its callbacks at the start of each ``produce``), then
  ``flush()`` (acks=1, linger_ms=5); N records (1 KiB: 2N/5). A confluent-kafka ``produce`` that
  finds librdkafka's queue full (``BufferError``) polls for a millisecond and tries again, as
  mqlite does.
- ``poll``: a consumer without a group assigned partition 0, reading every message from the
  start, one per ``Consumer.poll(1.0)`` (and by iterating the consumer) against confluent-kafka's
  ``Consumer.poll(1.0)`` (checking ``error()``), reading each value's length; N records (1 KiB:
  3N/10), written before the clock starts.
- ``poll_batch``: ``Consumer.poll_batch(1.0)`` (up to ``max_poll_records``, 500) against
  ``Consumer.consume(num_messages, 1.0)`` asking for as many (never more than are left, so that
  the last call does not wait for messages that will not come).

The producer rows each get a fresh topic (deleted after) and send 10 records, each waited for,
before the clock starts (connection and metadata). A consumer row's topic holds one record more
than the row counts: the first is read by ``poll(1.0)`` before the clock starts (on tansu the first
message takes about 400 ms on both sides: the group coordinator, the offsets, the first fetch,
the same librdkafka work, which would hide the per-message cost), the rest timed. N defaults to
100,000; FILTER keeps the rows whose name contains it (and their baselines).

Runs are interleaved: every row once, then every row again, MQLITE_BENCH_RUNS times (default 3),
so the drifting load of a shared machine weighs on all rows alike; each ratio is taken within a
run and reported as the median and min-max over the runs. MQLITE_BENCH_JSON=path writes every
run's seconds there (the format bench/report.py reads; MQLITE_BENCH_MACHINE, "quiet" or
"shared", is recorded as given).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import git_commit, machine  # noqa: E402  (beside this script)

BATCH = 1000
WARMUP = 10
THROUGHPUT_LINGER_MS = 5
SIZES = [(100, "100 B"), (1024, "1 KiB")]
# mqlite's default request timeout on a cluster (also each record's delivery timeout).
REQUEST_TIMEOUT_MS = 30_000
# mqlite's defaults for a Python producer and consumer (Broker.producer(), Broker.consumer()).
BATCH_SIZE = 16_384
BUFFER_MEMORY = 33_554_432
MAX_POLL_RECORDS = 500


# The broker ------------------------------------------------------------------------------------


def tansu_binary() -> Optional[str]:
    """The tansu binary: MQLITE_TANSU, then PATH, then ~/.cargo/bin (None: not installed)."""
    if os.environ.get("MQLITE_TANSU"):
        return os.environ["MQLITE_TANSU"]
    found = shutil.which("tansu")
    if found:
        return found
    home = Path.home() / ".cargo" / "bin" / "tansu"
    return str(home) if home.is_file() else None


class Tansu:
    """A tansu broker of this script's own on 127.0.0.1, its storage in memory.

    A watching shell stops it if this process dies without calling ``stop()``.
    """

    def __init__(self, binary: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        listen = f"tcp://127.0.0.1:{self.port}"
        args = [binary, "broker", "--listener-url", listen, "--advertised-listener-url", listen]
        args += ["--storage-engine", "memory://tansu/"]
        devnull = subprocess.DEVNULL
        self.proc = subprocess.Popen(args, stdin=devnull, stdout=devnull, stderr=devnull)
        watch = f"while kill -0 {os.getpid()} 2>/dev/null && kill -0 {self.proc.pid} 2>/dev/null; do sleep 0.2; done"
        watch += f"; kill {self.proc.pid} 2>/dev/null"
        subprocess.Popen(["sh", "-c", watch], stdin=devnull, stdout=devnull, stderr=devnull)
        version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
        self.version = version.stdout.strip()
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"tansu did not listen on {self.port}") from None
                time.sleep(0.05)
        self.url = f"kafka://127.0.0.1:{self.port}"
        self.servers = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# librdkafka's properties, as mqlite sets them ---------------------------------------------------


def producer_props(servers: str, linger_ms: int) -> dict[str, Any]:
    """What mqlite's KafkaProducer sets for ``mq.producer(acks=1, linger_ms=linger_ms)``."""
    return {
        "bootstrap.servers": servers,
        "acks": "1",
        # Idempotence needs acks=all: with acks 1 mqlite turns it off.
        "enable.idempotence": False,
        "linger.ms": linger_ms,
        "batch.size": BATCH_SIZE,
        "queue.buffering.max.kbytes": -(-BUFFER_MEMORY // 1024),
        "compression.type": "none",
        "partitioner": "murmur2_random",
        "message.timeout.ms": REQUEST_TIMEOUT_MS,
    }


def consumer_props(servers: str, group: str) -> dict[str, Any]:
    """What mqlite's KafkaConsumer sets for ``mq.consumer()`` (no group: a private one)."""
    return {
        "bootstrap.servers": servers,
        "group.id": group,
        "auto.offset.reset": "earliest",
        # A consumer without a group never commits.
        "enable.auto.commit": False,
        "auto.commit.interval.ms": 5000,
        "enable.auto.offset.store": False,
        "max.poll.interval.ms": 300_000,
        "isolation.level": "read_committed",
        "partition.assignment.strategy": "range",
        "client.id": "consumer",
    }


# The rows ---------------------------------------------------------------------------------------


class Bench:
    """The broker, the admin handle, and fresh names."""

    def __init__(self, tansu: Tansu) -> None:
        import mqlite

        self.tansu = tansu
        self.mq = mqlite.open(tansu.url)
        self._next = 0
        self.filled: dict[int, str] = {}

    def fresh(self, tag: str) -> str:
        self._next += 1
        return f"bench-{tag}-{os.getpid()}-{self._next}"

    def new_topic(self, tag: str) -> str:
        t = self.fresh(tag)
        self.mq.create_topic(t, partitions=1)
        return t


def ck_produce(p: Any, topic: str, value: bytes, on_delivery: Callable[..., None]) -> None:
    """confluent-kafka's produce, polling while librdkafka's queue is full (as mqlite does)."""
    while True:
        try:
            p.produce(topic, value, on_delivery=on_delivery)
            return
        except BufferError:
            p.poll(0.001)


def confluent_produce(b: Bench, how: str, value: bytes, n: int) -> float:
    from confluent_kafka import Producer

    topic = b.new_topic("ck")
    p = Producer(producer_props(b.tansu.servers, THROUGHPUT_LINGER_MS if how == "produce" else 0))
    delivered = [0]
    failed: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(err)
        delivered[0] += 1

    for _ in range(WARMUP):
        ck_produce(p, topic, value, on_delivery)
        p.flush()
    t = time.perf_counter()
    if how == "send":
        for _ in range(n):
            ck_produce(p, topic, value, on_delivery)
            p.flush()
    elif how == "send_batch":
        for _ in range(n // BATCH):
            for _ in range(BATCH):
                ck_produce(p, topic, value, on_delivery)
            p.flush()
    else:
        for _ in range(n):
            ck_produce(p, topic, value, on_delivery)
            p.poll(0)
        p.flush()
    secs = time.perf_counter() - t
    assert not failed and delivered[0] == WARMUP + n, (failed[:3], delivered[0])
    b.mq.delete_topic(topic)
    return secs


def mqlite_produce(b: Bench, how: str, value: bytes, n: int) -> float:
    topic = b.new_topic("mq")
    p = b.mq.producer(acks=1, linger_ms=THROUGHPUT_LINGER_MS if how == "produce" else 0)
    delivered = [0]
    failed: list[Any] = []

    def on_delivery(err: Any, md: Any) -> None:
        if err is not None:
            failed.append(err)
        delivered[0] += 1

    for _ in range(WARMUP):
        p.send(topic, value)
    written = 0
    t = time.perf_counter()
    if how == "send":
        for _ in range(n):
            md = p.send(topic, value)
        written = n if md.offset is not None else 0
    elif how == "send_batch":
        values = [value] * BATCH
        for _ in range(n // BATCH):
            written += p.send_batch(topic, values)
    else:
        for _ in range(n):
            p.produce(topic, value, on_delivery=on_delivery)
        p.flush()
        written = delivered[0]
    secs = time.perf_counter() - t
    assert not failed and written == n, (failed[:3], written)
    p.close()
    b.mq.delete_topic(topic)
    return secs


def filled_topic(b: Bench, size: int, n: int) -> str:
    """A topic of one partition holding n records of `size` bytes, written on first call."""
    if size not in b.filled:
        topic = b.new_topic("read")
        p = b.mq.producer(acks=1, linger_ms=THROUGHPUT_LINGER_MS)
        value = b"v" * size
        for _ in range(n):
            p.produce(topic, value)
        p.flush()
        p.close()
        b.filled[size] = topic
    return b.filled[size]


def confluent_consume(b: Bench, size: int, n: int, batched: bool) -> float:
    from confluent_kafka import Consumer, TopicPartition

    topic = filled_topic(b, size, n + 1)
    c = Consumer(consumer_props(b.tansu.servers, b.fresh("ungrouped")))
    c.assign([TopicPartition(topic, 0)])
    deadline = time.monotonic() + 120
    first = None
    while first is None:
        first = c.poll(1.0)
        assert time.monotonic() < deadline, "confluent-kafka read nothing"
    if first.error():
        raise RuntimeError(first.error())
    got = 0
    nbytes = 0
    t = time.perf_counter()
    if batched:
        while got < n:
            for m in c.consume(min(MAX_POLL_RECORDS, n - got), 1.0):
                if m.error():
                    raise RuntimeError(m.error())
                nbytes += len(m.value())
                got += 1
            assert time.monotonic() < deadline, f"confluent-kafka read {got} of {n}"
    else:
        while got < n:
            m = c.poll(1.0)
            if m is None:
                assert time.monotonic() < deadline, f"confluent-kafka read {got} of {n}"
                continue
            if m.error():
                raise RuntimeError(m.error())
            nbytes += len(m.value())
            got += 1
    secs = time.perf_counter() - t
    c.close()
    assert nbytes == n * size, (nbytes, n, size)
    return secs


def mqlite_consume(b: Bench, size: int, n: int, how: str) -> float:
    topic = filled_topic(b, size, n + 1)
    c = b.mq.consumer()
    c.assign([(topic, 0)])
    deadline = time.monotonic() + 120
    while c.poll(1.0) is None:
        assert time.monotonic() < deadline, "mqlite read nothing"
    got = 0
    nbytes = 0
    t = time.perf_counter()
    if how == "poll_batch":
        while got < n:
            for m in c.poll_batch(1.0):
                nbytes += len(m.value)
                got += 1
            assert time.monotonic() < deadline, f"mqlite read {got} of {n}"
    elif how == "iterate":
        for m in c:
            nbytes += len(m.value)
            got += 1
            if got == n:
                break
    else:
        while got < n:
            m = c.poll(1.0)
            if m is None:
                assert time.monotonic() < deadline, f"mqlite read {got} of {n}"
                continue
            nbytes += len(m.value)
            got += 1
    secs = time.perf_counter() - t
    c.close()
    assert nbytes == n * size, (nbytes, n, size)
    return secs


def counts(n: int, size: int) -> dict[str, int]:
    """Records per row for values of `size` bytes, N being `n`."""
    batches = lambda k: max(1, k // BATCH) * BATCH  # noqa: E731
    if size <= 100:
        return {"send": max(1, n // 50), "send_batch": batches(n // 5), "produce": n, "consume": n}
    return {"send": max(1, n // 50), "send_batch": batches(n // 10), "produce": 2 * n // 5, "consume": 3 * n // 10}


Row = tuple[str, str, int, int, Optional[str], Callable[[Bench], float]]


def plan(n_base: int, only: str) -> list[Row]:
    """(name, group, records, size, baseline, measure) of every row, baselines first in each pair: N
    being `n_base`, the rows whose name contains `only` (and their baselines)."""
    rows: list[Row] = []
    produce = [
        ("send", "send: one record, waits for its delivery (acks=1, linger_ms=0)",
         "confluent-kafka produce + flush()", "mqlite Producer.send"),
        ("send_batch", f"send_batch: {BATCH:,} records, waits for all (acks=1, linger_ms=0)",
         f"confluent-kafka {BATCH:,} produce + flush()", f"mqlite Producer.send_batch of {BATCH:,}"),
        ("produce", f"throughput: produce each record, then one flush (acks=1, linger_ms={THROUGHPUT_LINGER_MS})",
         "confluent-kafka produce + poll(0), then flush()", "mqlite Producer.produce, then flush()"),
    ]
    for how, group, raw, own in produce:
        for size, label in SIZES:
            n = counts(n_base, size)[how]
            value = b"v" * size
            base = f"{raw}, {label}"
            rows.append((base, group, n, size, None,
                         lambda b, how=how, value=value, n=n: confluent_produce(b, how, value, n)))
            rows.append((f"{own}, {label}", group, n, size, base,
                         lambda b, how=how, value=value, n=n: mqlite_produce(b, how, value, n)))
    one = "poll: one message per call, from the start of an assigned partition (no group)"
    many = f"poll_batch: up to {MAX_POLL_RECORDS} messages per call, from the start (no group)"
    for size, label in SIZES:
        n = counts(n_base, size)["consume"]
        base = f"confluent-kafka Consumer.poll, {label}"
        rows.append((base, one, n, size, None, lambda b, size=size, n=n: confluent_consume(b, size, n, False)))
        rows.append((f"mqlite Consumer.poll, {label}", one, n, size, base,
                     lambda b, size=size, n=n: mqlite_consume(b, size, n, "poll")))
        rows.append((f"mqlite: iterate a Consumer, {label}", one, n, size, base,
                     lambda b, size=size, n=n: mqlite_consume(b, size, n, "iterate")))
        base = f"confluent-kafka Consumer.consume({MAX_POLL_RECORDS}), {label}"
        rows.append((base, many, n, size, None, lambda b, size=size, n=n: confluent_consume(b, size, n, True)))
        rows.append((f"mqlite Consumer.poll_batch, {label}", many, n, size, base,
                     lambda b, size=size, n=n: mqlite_consume(b, size, n, "poll_batch")))
    if only:
        keep = {r[0] for r in rows if only in r[0]}
        keep |= {r[4] for r in rows if r[0] in keep and r[4]}
        rows = [r for r in rows if r[0] in keep]
    return rows


# Reporting -------------------------------------------------------------------------------------


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


def fmt_rate(rate: float) -> str:
    return f"{rate / 1e6:.2f} M" if rate >= 1e6 else f"{rate / 1e3:.1f} k"


def main() -> int:
    n_base = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    only = sys.argv[2] if len(sys.argv) > 2 else ""
    runs = max(1, int(os.environ.get("MQLITE_BENCH_RUNS", "3")))
    binary = tansu_binary()
    if binary is None:
        print(
            "skipped: no tansu binary (MQLITE_TANSU, PATH, ~/.cargo/bin; "
            "cargo install tansu --version 0.6.0 --locked --features dynostore): nothing measured"
        )
        return 0
    import confluent_kafka

    rows = plan(n_base, only)
    doc: dict[str, Any] = {
        "suite": "python-kafka",
        "kind": "engine",
        "command": " ".join([".venv/bin/python bench/kafka_python.py", *sys.argv[1:]]),
        "env": {k: v for k, v in os.environ.items() if k in ("MQLITE_BENCH_RUNS",)},
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "machine_state": os.environ.get("MQLITE_BENCH_MACHINE"),
        "load_avg": {"start": os.getloadavg()[0], "end": None},
        "git": git_commit(),
        "runs": runs,
        "interleaved": True,
        "rows": [],
        "figures": [],
        "notes": [],
    }
    tansu = Tansu(binary)
    try:
        import mqlite

        b = Bench(tansu)
        doc["notes"] += [
            f"broker: {binary} ({tansu.version}), memory storage, on 127.0.0.1, started by the bench",
            f"baseline rows: confluent-kafka {confluent_kafka.version()[0]} (librdkafka "
            f"{confluent_kafka.libversion()[0]}) with the librdkafka properties mqlite sets; "
            f"mqlite {getattr(mqlite, '__version__', '')}".rstrip("; "),
        ]
        secs: dict[str, list[float]] = {r[0]: [] for r in rows}
        print(f"N = {n_base:,}; {len(rows)} rows; {runs} interleaved runs; broker {tansu.url}", flush=True)
        for run in range(1, runs + 1):
            print(f"run {run} of {runs}", flush=True)
            for name, _, n, _, _, fn in rows:
                secs[name].append(fn(b))
                print(f"  {name:<64} {fmt_rate(n / secs[name][-1]):>10}/s", flush=True)
        b.mq.close()
    finally:
        tansu.stop()
    print()
    print(f"{runs} interleaved runs; median (min-max)")
    print("| row | messages/s | ratio to its confluent-kafka row |")
    print("|---|---:|---:|")
    rates = {name: [n / s for s in secs[name]] for name, _, n, _, _, _ in rows}
    for name, group, n, size, base, _ in rows:
        m, lo, hi = spread(rates[name])
        ratio = None
        shown = "-"
        if base:
            rm, rlo, rhi = spread([a / c for a, c in zip(rates[name], rates[base])])
            ratio = {"median": rm, "min": rlo, "max": rhi}
            shown = f"{rm:.2f} ({rlo:.2f}-{rhi:.2f})"
        print(f"| {name} | {fmt_rate(m)} ({fmt_rate(lo)}-{fmt_rate(hi)}) | {shown} |")
        doc["rows"].append(
            {"name": name, "group": group, "msgs": n, "size": size, "secs": secs[name],
             "msgs_per_s": {"median": m, "min": lo, "max": hi}, "baseline": base, "ratio_to_baseline": ratio}
        )
    doc["load_avg"]["end"] = os.getloadavg()[0]
    out = os.environ.get("MQLITE_BENCH_JSON")
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
