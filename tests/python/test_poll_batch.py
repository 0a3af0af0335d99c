"""`Consumer.poll_batch()` returns the messages of one fetch at once: the
same messages, in the same order, as `poll()`; after a `poll()` the rest of
that fetch without fetching again; positions, commits and statistics count
every message returned; a timeout returns an empty list; a closed consumer
raises."""

from __future__ import annotations

import time

import pytest

import mqlite

PER_PARTITION = 200


def fill(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)
    p = mq.producer()
    for part in (0, 1):
        p.send_batch("t", [f"{part}:{i}".encode() for i in range(PER_PARTITION)], partition=part)
    p.flush()


def consumer(mq: mqlite.Broker, group_id: str | None = None, max_poll_records: int = 7) -> mqlite.Consumer:
    c = mq.consumer(group_id, max_poll_records=max_poll_records, enable_auto_commit=False)
    c.assign([("t", 0), ("t", 1)])
    return c


def key(m: mqlite.Message) -> tuple[int, int, bytes | None]:
    return (m.partition, m.offset, m.value)


def test_same_messages_as_poll(mq: mqlite.Broker) -> None:
    fill(mq)
    a = consumer(mq)
    want = []
    while (m := a.poll(timeout=0)) is not None:
        want.append(key(m))
    assert len(want) == 2 * PER_PARTITION

    b = consumer(mq, "g")
    got, sizes = [], []
    while batch := b.poll_batch(timeout=0):
        sizes.append(len(batch))
        got.extend(key(m) for m in batch)
    assert got == want
    assert max(sizes) <= 7 and len(sizes) >= len(want) // 7
    assert [b.position("t", p) for p in (0, 1)] == [PER_PARTITION, PER_PARTITION]
    b.commit()
    assert b.committed([("t", 1)])[("t", 1)][0] == PER_PARTITION
    assert b.stats().records == len(want)


def test_after_poll_returns_the_rest_of_the_fetch(mq: mqlite.Broker) -> None:
    fill(mq)
    c = consumer(mq, max_poll_records=10)
    first = c.poll(timeout=1)
    assert first is not None
    rest = c.poll_batch(timeout=1)
    assert len(rest) == 9
    assert c.stats().records == 10


def test_timeout_and_closed(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)
    c = consumer(mq)
    start = time.monotonic()
    assert c.poll_batch(timeout=0.05) == []
    assert time.monotonic() - start >= 0.04
    with pytest.raises(mqlite.InvalidArgument):
        c.poll_batch(timeout=-1)
    c.close()
    with pytest.raises(mqlite.Closed, match="consumer"):
        c.poll_batch(timeout=0)
