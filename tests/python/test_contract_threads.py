"""Producers and consumers in many Python threads at once: four producer
threads (two per producer, every way of sending), two consumer groups of two
consumers each (one joining late, which moves partitions mid-stream). Every
group gets every record exactly once, each partition in offset order, each
key's records in the order they were sent. Bounded to a few seconds.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import mqlite

PARTITIONS = 4
PER_THREAD = 5000
THREADS = 4
TOTAL = PER_THREAD * THREADS
KEYS_PER_THREAD = 8
DEADLINE = 60.0  # seconds; a healthy run takes one or two


def key_of(thread: int, i: int) -> bytes:
    return f"k{thread}-{i % KEYS_PER_THREAD}".encode()


def value_of(thread: int, i: int) -> bytes:
    return f"{thread}:{i}".encode()


class Failures:
    """Exceptions raised in the threads, reported by the test."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.errors: List[str] = []

    def add(self, where: str, e: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{where}: {type(e).__name__}: {e}")


def produce(thread: int, p: mqlite.Producer, failures: Failures) -> None:
    """Thread `thread` sends its records in its own way."""
    try:
        indexes = range(PER_THREAD)
        if thread == 0:  # send(), one at a time (acks=1)
            for i in indexes:
                p.send("s", value_of(thread, i), key=key_of(thread, i))
        elif thread == 1:  # send_batch() (acks=1)
            for start in range(0, PER_THREAD, 100):
                chunk = range(start, start + 100)
                p.send_batch(
                    "s", [value_of(thread, i) for i in chunk], keys=[key_of(thread, i) for i in chunk]
                )
        elif thread == 2:  # produce() with delivery reports (acks="all", linger)
            errors: List[object] = []
            delivered = 0

            def report(err: Optional[mqlite.Error], md: Optional[mqlite.RecordMetadata]) -> None:
                nonlocal delivered
                if err is not None:
                    errors.append(err)
                delivered += 1

            for i in indexes:
                p.produce("s", value_of(thread, i), key=key_of(thread, i), on_delivery=report)
            p.flush(timeout=DEADLINE)
            assert not errors and delivered == PER_THREAD, (errors[:3], delivered)
        else:  # send_batch() (acks="all")
            for start in range(0, PER_THREAD, 250):
                chunk = range(start, start + 250)
                p.send_batch(
                    "s", [value_of(thread, i) for i in chunk], keys=[key_of(thread, i) for i in chunk]
                )
    except BaseException as e:  # noqa: BLE001 - reported by the test
        failures.add(f"producer thread {thread}", e)


Seen = List[Tuple[int, int, bytes, bytes]]  # partition, offset, key, value


def consume(
    c: mqlite.Consumer,
    seen: Seen,
    group_total: Dict[str, int],
    group: str,
    lock: threading.Lock,
    start: Optional[threading.Event],
    failures: Failures,
) -> None:
    try:
        if start is not None:
            start.wait(DEADLINE)
        c.subscribe("s")
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            with lock:
                if group_total[group] >= TOTAL:
                    break
            batch = c.consume(200, timeout=0.05)
            for m in batch:
                key, value = m.key, m.value
                assert key is not None and value is not None
                seen.append((m.partition, m.offset, key, value))
            with lock:
                group_total[group] += len(batch)
        c.close()
    except BaseException as e:  # noqa: BLE001
        failures.add(f"consumer {c.member_id} of {group}", e)


def check_group(name: str, seen_by: List[Seen], ends: List[int]) -> None:
    everything = [r for seen in seen_by for r in seen]
    got = sorted((p, o) for p, o, _, _ in everything)
    want = [(p, o) for p in range(PARTITIONS) for o in range(ends[p])]
    missing = sorted(set(want) - set(got))
    assert not missing, f"group {name} lost {len(missing)} records, e.g. {missing[:5]}"
    assert got == want, f"group {name} got duplicates"
    # Each consumer saw each partition's offsets in increasing order.
    for seen in seen_by:
        last: Dict[int, int] = {}
        for p, o, _, _ in seen:
            assert o > last.get(p, -1), f"group {name}: partition {p} went back to {o}"
            last[p] = o
    # Each key's records are in the order they were sent.
    by_key: Dict[bytes, List[Tuple[int, int]]] = defaultdict(list)
    for p, o, key, value in sorted(everything):
        thread, i = map(int, value.split(b":"))
        assert key == key_of(thread, i)
        by_key[key].append((o, i))
    for key, pairs in by_key.items():
        indexes = [i for _, i in pairs]
        assert indexes == sorted(indexes), f"group {name}: key {key!r} out of order"
    assert len(by_key) == THREADS * KEYS_PER_THREAD


def test_producer_and_consumer_threads(tmp_path: Path) -> None:
    failures = Failures()
    with mqlite.open(tmp_path / "d", prefault=False, retention_check_interval_ms=0) as mq:
        mq.create_topic("s", partitions=PARTITIONS, segment_bytes=1 << 20)
        fast = mq.producer()  # acks=1, shared by threads 0 and 1
        durable = mq.producer(acks="all", linger_ms=2)  # shared by threads 2 and 3
        lock = threading.Lock()
        totals = {"a": 0, "b": 0}
        late = threading.Event()
        consumers = {
            ("a", 0): (mq.consumer("a", client_id="a0"), None),
            ("a", 1): (mq.consumer("a", client_id="a1"), None),
            ("b", 0): (mq.consumer("b", client_id="b0"), None),
            # Joins once the group is well under way: a rebalance mid-stream.
            ("b", 1): (mq.consumer("b", client_id="b1"), late),
        }
        seen: Dict[Tuple[str, int], Seen] = {k: [] for k in consumers}
        threads = [
            threading.Thread(target=consume, args=(c, seen[k], totals, k[0], lock, start, failures))
            for k, (c, start) in consumers.items()
        ]
        threads += [
            threading.Thread(target=produce, args=(t, fast if t < 2 else durable, failures))
            for t in range(THREADS)
        ]
        started = time.monotonic()
        for t in threads:
            t.start()
        while time.monotonic() - started < DEADLINE:
            with lock:
                if totals["b"] >= TOTAL // 4:
                    break
            time.sleep(0.005)
        late.set()
        for t in threads:
            t.join(max(0.0, DEADLINE - (time.monotonic() - started)) + 5)
        assert not any(t.is_alive() for t in threads), "threads still running after the deadline"
        assert not failures.errors, "\n".join(failures.errors)
        ends = [p.end_offset for p in mq.topic("s").partitions]
        assert sum(ends) == TOTAL
        assert fast.stats().records + durable.stats().records == TOTAL
        for group in ("a", "b"):
            check_group(group, [seen[(group, 0)], seen[(group, 1)]], ends)
        # The late member did take partitions over.
        assert seen[("b", 1)], "the late consumer got nothing"
