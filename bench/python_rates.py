"""Rates of the Python module against an in-memory baseline, in one run.

Usage: .venv/bin/python bench/python_rates.py [N] (default 1,000,000 messages
of 100 bytes). Prints messages/s for each row and the ratio to
collections.deque, the ceiling for per-call overhead. Medians of 3 runs.
"""

import collections
import statistics
import sys
import tempfile
import time

import mqlite

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
PAD = b"x" * 92


def message(i):
    """A distinct 100-byte message, built in the loop as a user would."""
    return PAD + i.to_bytes(8, "little")


def deque_put():
    q = collections.deque()
    t = time.perf_counter()
    for i in range(N):
        q.append(message(i))
    return time.perf_counter() - t


def deque_get():
    q = collections.deque(message(i) for i in range(N))
    t = time.perf_counter()
    for _ in range(N):
        len(q.popleft())
    return time.perf_counter() - t


def with_topic(fn):
    with tempfile.TemporaryDirectory() as d:
        with mqlite.open(d) as mq:
            mq.create_topic("t", partitions=1, segment_bytes=512 << 20)
            return fn(mq)


def send(mq):
    p = mq.producer(acks=1)
    t = time.perf_counter()
    for i in range(N):
        p.send("t", message(i))
    return time.perf_counter() - t


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


def main():
    rows = [
        ("put", "collections.deque.append", deque_put),
        ("put", "mqlite Producer.send, acks=1", lambda: with_topic(send)),
        ("get", "collections.deque.popleft", deque_get),
        ("get", "mqlite: iterate a Consumer, reading .value", lambda: with_topic(iterate)),
    ]
    base = {}
    print(f"{N:,} messages of 100 bytes, each built in the loop; medians of 3 runs")
    print("| row | messages/s | ratio to deque |")
    print("|---|---:|---:|")
    for kind, name, fn in rows:
        secs = statistics.median(fn() for _ in range(3))
        rate = N / secs
        base.setdefault(kind, rate)
        print(f"| {name} | {rate / 1e6:.2f} M | {rate / base[kind]:.2f} |")


if __name__ == "__main__":
    main()
