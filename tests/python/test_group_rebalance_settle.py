"""A group settles within two polls of each member, whatever the members
hold, while a producer writes continuously: 8 partitions; member A polls one
message at a time (so it holds fetched messages not handed out yet); B
joins and within two polls each the partitions are split 4/4; B closes and
within two polls A owns all 8. Messages fetched but not handed out for a
partition that moved are dropped and the new owner starts at the committed
offset: every record written is delivered (at least once), none skipped."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from groups_util import SEG

import mqlite

PARTITIONS = 8


def test_a_group_settles_within_two_polls_while_a_producer_writes(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=PARTITIONS, segment_bytes=SEG)
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            p = mq.producer()
            n = 0
            while not stop.is_set():
                for part in range(PARTITIONS):
                    p.send("t", str(n).encode(), partition=part)
                n += 1
                if n % 16 == 0:
                    time.sleep(0.001)
            p.flush()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(0.05)
        seen: dict[int, set[int]] = defaultdict(set)

        def take(c: mqlite.Consumer) -> None:
            m = c.poll(0.1)
            if m is not None:
                seen[m.partition].add(m.offset)

        a = mq.consumer("g", enable_auto_commit=True)
        a.subscribe("t")
        for _ in range(5):
            take(a)
        assert len(a.assignment()) == PARTITIONS
        # B joins while A holds most of a poll's worth of fetched messages.
        b = mq.consumer("g", enable_auto_commit=True)
        b.subscribe("t")
        for _ in range(2):
            take(a)
            take(b)
        sizes = sorted(len(c.assignment()) for c in (a, b))
        assert sizes == [4, 4], f"not settled within two polls each: {sizes}"
        owned = set(a.assignment()) | set(b.assignment())
        assert owned == {("t", p) for p in range(PARTITIONS)}
        # Both read on for a while, then B leaves.
        until = time.monotonic() + 0.2
        while time.monotonic() < until:
            take(a)
            take(b)
        b.close()
        for _ in range(2):
            take(a)
        assert len(a.assignment()) == PARTITIONS, "A did not take B's partitions within two polls"
    finally:
        stop.set()
        writer.join()
    assert not errors, errors
    # A reads to the end of every partition.
    ends = [p.end_offset for p in mq.topic("t").partitions]
    deadline = time.monotonic() + 30
    while any(a.position("t", p) < ends[p] for p in range(PARTITIONS)):
        assert time.monotonic() < deadline, "A did not reach the end"
        for m in a.consume(1000, timeout=0.1):
            seen[m.partition].add(m.offset)
    # At least once: every record written was delivered to a member.
    for p in range(PARTITIONS):
        missing = set(range(ends[p])) - seen[p]
        assert not missing, f"partition {p}: {len(missing)} offsets never delivered, first {min(missing)}"
    a.close()
