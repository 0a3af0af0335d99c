"""Helpers shared by the consumer-group tests."""

from __future__ import annotations

import time
from typing import Callable

import mqlite

# Segment size of the test topics: 1 MiB instead of 64 MiB of disk per
# partition.
SEG = 1 << 20


def produce(mq: mqlite.Broker, topic: str, per_partition: int) -> None:
    """Writes `per_partition` records to every partition, values "p:i"."""
    partitions = len(mq.topic(topic).partitions)
    p = mq.producer()
    for part in range(partitions):
        p.send_batch(topic, [f"{part}:{i}".encode() for i in range(per_partition)], partition=part)


def settle(
    consumers: list[mqlite.Consumer],
    done: Callable[[], bool],
    got: dict[int, list[mqlite.Message]] | None = None,
    timeout: float = 5.0,
) -> None:
    """Polls every consumer in turn until `done()`; messages they return go
    to `got[index]` (they must not be lost by a test that counts them)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the group did not settle"
        for i, c in enumerate(consumers):
            m = c.poll(0.01)
            if m is not None:
                assert got is not None, f"unexpected message {m!r}"
                got.setdefault(i, []).append(m)


def owners(mq: mqlite.Broker, group: str) -> dict[tuple[str, int], str]:
    """Who owns each partition, checking nobody owns one twice."""
    out: dict[tuple[str, int], str] = {}
    for member, parts in mq.describe_group(group).members:
        for tp in parts:
            assert tp not in out, f"{tp} owned by {out[tp]} and {member}"
            out[tp] = member
    return out


def drain_all(
    consumers: list[mqlite.Consumer], total: int, got: dict[int, list[mqlite.Message]], timeout: float = 10.0
) -> None:
    """Polls every consumer until `total` messages arrived in all."""
    deadline = time.monotonic() + timeout
    while sum(len(v) for v in got.values()) < total:
        assert time.monotonic() < deadline, f"only {sum(len(v) for v in got.values())} of {total}"
        for i, c in enumerate(consumers):
            for m in c.consume(100, timeout=0.01):
                got.setdefault(i, []).append(m)


def ids(msgs: list[mqlite.Message]) -> list[tuple[int, int]]:
    return [(m.partition, m.offset) for m in msgs]
