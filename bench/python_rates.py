"""Rates of the Python module against an in-memory baseline, in one run.

Usage: .venv/bin/python bench/python_rates.py [N [FILTER]]

N messages of 100 bytes (default 1,000,000); the 1 KiB rows send N/4 and
the send(acks="all") row N/200 (one flush per message). FILTER keeps only
the rows whose name contains it (and the baselines). Prints messages/s for
each row and the ratio to collections.deque, the ceiling for per-call
overhead (the Processor row: to the plain poll_batch loop over the same
data, the loop a Processor replaces), as the median and min-max of
MQLITE_BENCH_RUNS runs (default 3), interleaved: every row once, then every
row again, so a shared machine's drifting load weighs on all rows alike;
each ratio is taken within a run. MQLITE_BENCH_JSON=path writes every
run's seconds there (the format bench/report.py reads; MQLITE_BENCH_MACHINE,
"quiet" or "shared", is recorded as given).

The send and produce rows build each message in the loop, as a user would,
like the deque rows. The send_batch rows send lists built before the clock
starts, in calls of BATCH values: what they measure is the call, not the
building of the values (which alone runs at about the deque.append rate).
produce rows include the final flush(). The commit rows commit one
partition's offset per call, N/5 times with commit_acks=1 and N/200 times
with commit_acks="all", against the system calls such a commit makes:
os.pwrite of a commit's journal record (and os.fdatasync).

Then the produce-to-consume latency: a producer thread sends LAT_RATE
messages/s (acks=1) for LAT_SECS seconds, each value carrying
time.perf_counter_ns() at its send; the main thread iterates a consumer and
records the delay at which each message arrives. Both threads share the GIL,
which dominates the figures. Printed as p50, p99 and p99.9 in µs.
"""

import collections
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import mqlite

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
N_1K = max(1, N // 4)
N_ALL = max(1, N // 200)
N_C = max(1, N // 5)
RUNS = max(1, int(os.environ.get("MQLITE_BENCH_RUNS", "3")))
BATCH = 1000
PAD = b"x" * 92
PAD_1K = b"x" * 1016


def message(i):
    """A distinct 100-byte message, built in the loop as a user would."""
    return PAD + i.to_bytes(8, "little")


def message_1k(i):
    """A distinct 1 KiB message."""
    return PAD_1K + i.to_bytes(8, "little")


def deque_put(n, make):
    def run():
        q = collections.deque()
        t = time.perf_counter()
        for i in range(n):
            q.append(make(i))
        return time.perf_counter() - t

    return run


def deque_get():
    q = collections.deque(message(i) for i in range(N))
    t = time.perf_counter()
    for _ in range(N):
        len(q.popleft())
    return time.perf_counter() - t


def with_topic(fn):
    with tempfile.TemporaryDirectory() as d:
        with mqlite.open(d, mode="exclusive") as mq:
            mq.create_topic("t", partitions=1, segment_bytes=512 << 20)
            return fn(mq)


def rows_to_run(rows):
    """All rows, or those whose name contains argv[2] (and the baselines)."""
    if len(sys.argv) <= 2:
        return rows
    return [r for r in rows if sys.argv[2] in r[2] or r[2].startswith(("collections", "plain", "os.pwrite"))]


def send(n, make, acks):
    def run(mq):
        p = mq.producer(acks=acks)
        t = time.perf_counter()
        for i in range(n):
            p.send("t", make(i))
        return time.perf_counter() - t

    return lambda: with_topic(run)


def produce(n, make, acks, callback=False):
    def run(mq):
        p = mq.producer(acks=acks)
        delivered = []
        cb = (lambda err, msg: delivered.append(msg)) if callback else None
        t = time.perf_counter()
        for i in range(n):
            p.produce("t", make(i), on_delivery=cb)
        p.flush()
        secs = time.perf_counter() - t
        assert not callback or len(delivered) == n
        return secs

    return lambda: with_topic(run)


def send_batch(n, make, acks):
    def run(mq):
        p = mq.producer(acks=acks)
        batches = [[make(i) for i in range(s, min(n, s + BATCH))] for s in range(0, n, BATCH)]
        t = time.perf_counter()
        for b in batches:
            p.send_batch("t", b)
        secs = time.perf_counter() - t
        assert p.stats().records == n
        return secs

    return lambda: with_topic(run)


def iterate(mq):
    p = mq.producer(acks=1)
    for i in range(N):
        p.send("t", message(i))
    c = mq.consumer(auto_offset_reset="earliest")
    c.assign([("t", 0)])
    t = time.perf_counter()
    n = 0
    for msg in c:
        len(msg.value)
        n += 1
        if n == N:
            break
    return time.perf_counter() - t


def iterate_group(mq):
    """Two members of a group, one partition each, iterated in turn."""
    mq.create_topic("g2", partitions=2, segment_bytes=512 << 20)
    p = mq.producer(acks=1)
    for i in range(N - N % 2):
        p.send("g2", message(i), partition=i % 2)
    members = [mq.consumer("bench", client_id=f"c{i}", enable_auto_commit=True) for i in range(2)]
    t = time.perf_counter()
    for c in members:
        c.subscribe(["g2"])
    got = [0, 0]
    while not all(len(c.assignment()) == 1 for c in members):  # the first member hands one over
        for i, c in enumerate(members):
            if c.poll(0) is not None:
                got[i] += 1
    for i, c in enumerate(members):
        if got[i] < N // 2:
            for msg in c:
                len(msg.value)
                got[i] += 1
                if got[i] == N // 2:
                    break
    for c in members:
        c.close()  # commits
    secs = time.perf_counter() - t
    assert got == [N // 2, N // 2], got
    return secs


def fill(mq):
    """N messages in topic t, for the rows that read them."""
    mq.producer(acks=1).send_batch("t", [message(i) for i in range(N)])


def poll_batch_loop(mq):
    """The plain loop a Processor replaces: poll_batch, a trivial handler per
    message, commit."""
    fill(mq)
    c = mq.consumer("plain", enable_auto_commit=False)
    c.assign([("t", 0)])
    handler = lambda m: True  # noqa: E731
    t = time.perf_counter()
    n = 0
    while n < N:
        for m in c.poll_batch(timeout=1.0):
            handler(m)
            n += 1
    c.commit()
    secs = time.perf_counter() - t
    c.close()
    return secs


def pwrite_commits(n, sync=False):
    """The system calls of a commit: os.pwrite of a commit's journal
    record (41 bytes for one partition of topic "t") at the end of a
    file, one call each, and with `sync` an os.fdatasync after each."""
    record = b"r" * 41
    with tempfile.TemporaryDirectory() as d:
        fd = os.open(os.path.join(d, "f"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            t = time.perf_counter()
            for i in range(n):
                os.pwrite(fd, record, i * 41)
                if sync:
                    os.fdatasync(fd)
            return time.perf_counter() - t
        finally:
            os.close(fd)


def commits(n, acks):
    """`n` commits of one partition's offset, one call each, with
    `commit_acks=acks`."""

    def run(mq):
        mq.producer(acks=1).send_batch("t", [message(i) for i in range(100)])
        c = mq.consumer("commits", enable_auto_commit=False, commit_acks=acks)
        c.assign([("t", 0)])
        offsets = [[("t", 0, i % 100)] for i in range(n)]
        c.commit(offsets[0])  # the journal exists before the clock starts
        t = time.perf_counter()
        for o in offsets:
            c.commit(o)
        secs = time.perf_counter() - t
        c.close()
        return secs

    return lambda: with_topic(run)


def processor(mq, threads=4):
    """A Processor (orderly) over the same data, with a trivial handler that
    stops it after the last message."""
    fill(mq)
    c = mq.consumer("proc", enable_auto_commit=False)
    c.assign([("t", 0)])
    proc = mqlite.Processor(c, threads)
    count = [0]

    def handler(m):
        count[0] += 1
        if count[0] == N:
            proc.stop()
        return True

    t = time.perf_counter()
    stats = proc.run(handler)
    secs = time.perf_counter() - t
    assert stats.processed == N, stats
    c.close()
    return secs


LAT_RATE = 20_000
LAT_SECS = 2.0


def latency(mq):
    """Delays in ns from send to arrival in a consumer iterating the topic."""
    total = int(LAT_RATE * LAT_SECS)
    c = mq.consumer(auto_offset_reset="latest")
    c.assign([("t", 0)])
    c.seek_to_end("t", 0)

    def producer():
        p = mq.producer(acks=1)
        start = time.perf_counter()
        for i in range(total):
            ahead = start + i / LAT_RATE - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
            p.send("t", time.perf_counter_ns().to_bytes(8, "little") + PAD)

    t = threading.Thread(target=producer)
    delays = []
    t.start()
    for msg in c:
        delays.append(time.perf_counter_ns() - int.from_bytes(msg.value[:8], "little"))
        if len(delays) == total:
            break
    t.join()
    c.close()
    return delays


def latency_figures():
    """p50, p99, p99.9 and max of one latency run, in µs."""
    delays = sorted(with_topic(latency))
    pick = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))] / 1e3  # noqa: E731
    return {"p50": pick(0.5), "p99": pick(0.99), "p99.9": pick(0.999), "max": delays[-1] / 1e3}


def spread(values):
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


def fmt_rate(rate):
    return f"{rate / 1e6:.2f} M" if rate >= 100_000 else f"{rate / 1e3:.1f} k"


def fmt_ratio(r):
    return f"{r:.2f}" if r >= 0.01 else f"{r:.4f}"


def git_commit():
    """The commit measured, and whether tracked files differed from it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def out(*args):
        try:
            return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None

    commit = out("rev-parse", "HEAD")
    status = out("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip() if commit else None, "dirty": None if status is None else bool(status.strip())}


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "rustc": None,
    }


def main():
    b = f"batches of {BATCH}"
    rows = [
        ("put", N, "collections.deque.append, 100 B", deque_put(N, message)),
        ("put", N, "mqlite Producer.send, acks=1", send(N, message, 1)),
        ("put", N_ALL, f"mqlite Producer.send, acks=all ({N_ALL:,} msgs, one flush each)", send(N_ALL, message, "all")),
        ("put", N, "mqlite Producer.produce + flush, acks=1", produce(N, message, 1)),
        ("put", N, "... with on_delivery callbacks", produce(N, message, 1, callback=True)),
        ("put", N, "mqlite Producer.produce + flush, acks=all", produce(N, message, "all")),
        ("put", N, f"mqlite Producer.send_batch, acks=1, {b}", send_batch(N, message, 1)),
        ("put", N, f"mqlite Producer.send_batch, acks=all, {b}", send_batch(N, message, "all")),
        ("put1k", N_1K, "collections.deque.append, 1 KiB", deque_put(N_1K, message_1k)),
        ("put1k", N_1K, "mqlite Producer.send, acks=1, 1 KiB", send(N_1K, message_1k, 1)),
        ("put1k", N_1K, "mqlite Producer.produce + flush, acks=1, 1 KiB", produce(N_1K, message_1k, 1)),
        ("put1k", N_1K, "mqlite Producer.produce + flush, acks=all, 1 KiB", produce(N_1K, message_1k, "all")),
        ("put1k", N_1K, f"mqlite Producer.send_batch, acks=1, 1 KiB, {b}", send_batch(N_1K, message_1k, 1)),
        ("put1k", N_1K, f"mqlite Producer.send_batch, acks=all, 1 KiB, {b}", send_batch(N_1K, message_1k, "all")),
        ("commit", N_C, "os.pwrite of 41 B (a commit's journal record)", lambda: pwrite_commits(N_C)),
        ("commit", N_C, "mqlite Consumer.commit of one offset, commit_acks=1", commits(N_C, 1)),
        ("commit_sync", N_ALL, "os.pwrite + os.fdatasync of 41 B", lambda: pwrite_commits(N_ALL, sync=True)),
        ("commit_sync", N_ALL, f"mqlite Consumer.commit of one offset, commit_acks=all ({N_ALL:,})", commits(N_ALL, "all")),
        ("get", N, "collections.deque.popleft", deque_get),
        ("get", N, "mqlite: iterate a Consumer, reading .value", lambda: with_topic(iterate)),
        ("get", N, "mqlite: iterate two Consumers of a group, one partition each", lambda: with_topic(iterate_group)),
        ("proc", N, "plain poll_batch loop, trivial handler, one commit", lambda: with_topic(poll_batch_loop)),
        ("proc", N, "Processor, trivial handler (orderly, 4 threads)", lambda: with_topic(processor)),
    ]
    rows = rows_to_run(rows)
    with_latency = len(sys.argv) <= 2 or sys.argv[2] in "produce-to-consume latency"
    doc = {
        "suite": "python-rates",
        "kind": "engine",
        "command": " ".join([".venv/bin/python bench/python_rates.py", *sys.argv[1:]]),
        "env": {k: v for k, v in os.environ.items() if k in ("MQLITE_BENCH_RUNS",)},
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "machine_state": os.environ.get("MQLITE_BENCH_MACHINE"),
        "load_avg": {"start": os.getloadavg()[0], "end": None},
        "git": git_commit(),
        "runs": RUNS,
        "interleaved": True,
        "rows": [],
        "figures": [],
        "notes": [],
    }
    secs = {name: [] for _, _, name, _ in rows}
    lat = collections.defaultdict(list)
    print(f"{N:,} messages of 100 bytes ({N_1K:,} of 1 KiB); {RUNS} interleaved runs", flush=True)
    for run in range(1, RUNS + 1):
        print(f"run {run} of {RUNS}", flush=True)
        for _, n, name, fn in rows:
            secs[name].append(fn())
            print(f"  {name:<64} {fmt_rate(n / secs[name][-1]):>10}/s", flush=True)
        if with_latency:
            for k, v in latency_figures().items():
                lat[k].append(v)
    first = {}
    for kind, n, name, _ in rows:
        first.setdefault(kind, name)
        m, lo, hi = spread([n / x for x in secs[name]])
        doc["rows"].append(
            {"name": name, "group": kind, "msgs": n, "size": 1024 if "1 KiB" in name else 100,
             "secs": secs[name], "msgs_per_s": {"median": m, "min": lo, "max": hi}, "baseline": first[kind]}
        )
    what = f"produce-to-consume latency, {LAT_RATE:,} msgs/s for {LAT_SECS:g} s (acks=1, one producer thread)"
    for k, v in lat.items():
        m, lo, hi = spread(v)
        doc["figures"].append({"name": f"{what}, {k}", "unit": "us", "values": v, "median": m, "min": lo, "max": hi})
    print()
    print(f"{RUNS} interleaved runs; median (min-max)")
    print("| row | messages/s | ratio to the first row of its group (deque; poll_batch loop) |")
    print("|---|---:|---:|")
    for kind, n, name, _ in rows:
        rates = [n / x for x in secs[name]]
        base = [dict((r[2], r[1]) for r in rows)[first[kind]] / x for x in secs[first[kind]]]
        m, lo, hi = spread(rates)
        rm, rlo, rhi = spread([a / c for a, c in zip(rates, base)])
        print(
            f"| {name} | {fmt_rate(m)} ({fmt_rate(lo)}-{fmt_rate(hi)}) "
            f"| {fmt_ratio(rm)} ({fmt_ratio(rlo)}-{fmt_ratio(rhi)}) |"
        )
    if lat:
        print()
        print(f"{what}, µs: median (min-max)")
        for k, v in lat.items():
            m, lo, hi = spread(v)
            print(f"  {k}: {m:.0f} ({lo:.0f}-{hi:.0f})")
    doc["load_avg"]["end"] = os.getloadavg()[0]
    out = os.environ.get("MQLITE_BENCH_JSON")
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
