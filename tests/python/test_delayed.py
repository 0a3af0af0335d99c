"""Delayed delivery from Python (`send(..., delay_ms=...)` or
`deliver_at=...`): the record reaches its topic when due, in the order of
the delivery times, from `send`, `produce`, `send_batch` and transactions."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import mqlite


def open_broker(path: Path) -> mqlite.Broker:
    return mqlite.open(path, prefault=False, retention_check_interval_ms=0)


def read(mq: mqlite.Broker, topic: str, n: int, within: float = 10.0) -> list[tuple[bytes, float]]:
    """The values of the first `n` messages of `topic`, with when each came."""
    c = mq.consumer(group_id="g")
    c.subscribe([topic])
    out: list[tuple[bytes, float]] = []
    end = time.monotonic() + within
    while len(out) < n and time.monotonic() < end:
        m = c.poll(timeout=0.02)
        if m is not None:
            out.append((bytes(m.value), time.monotonic()))
    c.close()
    return out


def test_a_delayed_record_arrives_when_due(tmp_path: Path) -> None:
    with open_broker(tmp_path) as mq:
        mq.create_topic("t", partitions=2)
        p = mq.producer()
        sent = time.monotonic()
        md = p.send("t", b"later", key=b"k", headers={"h": b"v"}, delay_ms=400)
        assert md is not None and md.topic == "__delayed"
        p.send("t", b"now", partition=1)
        got = read(mq, "t", 2)
        assert [v for v, _ in got] == [b"now", b"later"]
        assert got[1][1] - sent >= 0.4


def test_records_arrive_in_the_order_of_their_delivery_times(tmp_path: Path) -> None:
    with open_broker(tmp_path) as mq:
        mq.create_topic("t")
        p = mq.producer()
        now_ms = int(time.time() * 1000)
        p.send("t", b"c", deliver_at=now_ms + 900)
        p.produce("t", b"a", delay_ms=300)
        p.flush()
        p.send_batch("t", [b"b1", b"b2"], delay_ms=600)
        assert [v for v, _ in read(mq, "t", 4)] == [b"a", b"b1", b"b2", b"c"]


def test_a_delayed_record_of_a_committed_transaction_arrives(tmp_path: Path) -> None:
    with open_broker(tmp_path) as mq:
        mq.create_topic("t")
        p = mq.producer(transactional_id="tx")
        with p.transaction() as tx:
            tx.send("t", b"x", delay_ms=200)
        assert [v for v, _ in read(mq, "t", 1)] == [b"x"]


def test_bad_delivery_times_are_refused_and_nothing_waits(tmp_path: Path) -> None:
    with open_broker(tmp_path) as mq:
        mq.create_topic("t")
        p = mq.producer()
        with pytest.raises(mqlite.InvalidArgument):
            p.send("t", b"x", delay_ms=10, deliver_at=1)
        with pytest.raises(mqlite.InvalidArgument):
            p.send("t", b"x", delay_ms=-1)
        with pytest.raises(mqlite.UnknownTopic):
            p.send("nope", b"x", delay_ms=1000)
        assert "__delayed" not in mq.topics()
        # Due already: sent as it is.
        md = p.send("t", b"x", deliver_at=1)
        assert md is not None and md.topic == "t"
