"""Partition choice: explicit, by key, sticky (default), round-robin, and a
Python callable."""

from __future__ import annotations

from collections import Counter
from typing import Optional

import pytest

import mqlite


def test_keys_follow_partition_for_key_with_every_partitioner(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=5)
    for kind in ["sticky", "round_robin"]:
        p = mq.producer(partitioner=kind)
        for i in range(50):
            key = f"user-{i}".encode()
            assert p.send("t", b"v", key=key).partition == mqlite.partition_for_key(key, 5)
        got: list[Optional[mqlite.RecordMetadata]] = []
        for i in range(50):
            p.produce("t", b"v", key=f"user-{i}", on_delivery=lambda e, m: got.append(m))
        p.flush()
        assert [m.partition if m else None for m in got] == [
            mqlite.partition_for_key(f"user-{i}", 5) for i in range(50)
        ]


def test_sticky_stays_then_moves(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=4)
    p = mq.producer(batch_size=1000)  # sticky is the default
    assert p.partitioner == "sticky"
    parts = [p.send("t", b"x" * 100).partition for _ in range(400)]
    # Runs of one partition, about batch_size bytes each, not a rotation.
    runs = 1 + sum(1 for a, b in zip(parts, parts[1:]) if a != b)
    assert 10 <= runs <= 100, runs
    assert len(set(parts)) > 1
    first_run = parts.index(next(q for q in parts if q != parts[0]))
    assert first_run >= 5


def test_round_robin_takes_turns(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=3)
    p = mq.producer(partitioner="round_robin")
    parts = [p.send("t", b"x").partition for _ in range(9)]
    assert sorted(Counter(parts).values()) == [3, 3, 3]
    assert parts[:3] == parts[3:6] == parts[6:]


def test_callable_partitioner(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=4)
    seen: list[tuple[mqlite.ProducerRecord, int]] = []

    def by_value(record: mqlite.ProducerRecord, partitions: int) -> int:
        seen.append((record, partitions))
        return len(record.value or b"") % partitions

    p = mq.producer(partitioner=by_value)
    assert p.partitioner == "custom"
    md = p.send("t", b"abc", key=b"k", headers={"h": b"1"}, timestamp=5, sequence=9)
    assert md.partition == 3
    rec, n = seen[-1]
    assert n == 4
    assert (rec.topic, rec.value, rec.key, rec.partition) == ("t", b"abc", b"k", None)
    assert (rec.headers, rec.timestamp, rec.sequence) == ([("h", b"1")], 5, 9)
    # Called for produce() and send_batch() too; not for an explicit partition.
    p.produce("t", b"12345")
    p.flush()
    assert p.send_batch("t", [b"", b"1", b"22"]) == 3
    assert p.send("t", b"abc", partition=0).partition == 0
    assert [len(r.value or b"") for r, _ in seen] == [3, 5, 0, 1, 2]
    assert [pi.end_offset for pi in mq.topic("t").partitions] == [2, 2, 1, 1]


def test_callable_partitioner_errors(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)

    def boom(record: mqlite.ProducerRecord, partitions: int) -> int:
        raise KeyError("no partition for you")

    p = mq.producer(partitioner=boom)
    # The callable's own exception propagates, and nothing is written.
    with pytest.raises(KeyError, match="no partition"):
        p.send("t", b"x")
    with pytest.raises(KeyError):
        p.produce("t", b"x")
    with pytest.raises(KeyError):
        p.send_batch("t", [b"x", b"y"])
    assert p.send("t", b"x", partition=1).offset == 0  # explicit: not called

    with pytest.raises(mqlite.InvalidArgument, match="returned 2"):
        mq.producer(partitioner=lambda r, n: n).send("t", b"x")
    with pytest.raises(mqlite.InvalidArgument, match="returned -1"):
        mq.producer(partitioner=lambda r, n: -1).send("t", b"x")
    with pytest.raises(TypeError, match="int"):
        mq.producer(partitioner=lambda r, n: "0").send("t", b"x")  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError):
        mq.producer(partitioner=lambda: 0).send("t", b"x")  # type: ignore[arg-type,misc]
    assert [pi.end_offset for pi in mq.topic("t").partitions] == [0, 1]


def test_partitioner_argument_checks(mq: mqlite.Broker) -> None:
    assert mq.producer(partitioner="round-robin").partitioner == "round_robin"
    assert mq.producer(partitioner=None).partitioner == "sticky"
    with pytest.raises(mqlite.InvalidArgument, match="partitioner"):
        mq.producer(partitioner="random")
    with pytest.raises(TypeError):
        mq.producer(partitioner=3)  # type: ignore[arg-type]


def test_producer_record() -> None:
    r = mqlite.ProducerRecord("t", "v", key=b"k", headers={"a": "b"}, sequence=3)
    assert (r.topic, r.value, r.key, r.headers, r.sequence) == ("t", b"v", b"k", [("a", b"b")], 3)
    assert r.partition is None and r.timestamp is None
    r2 = r.replace(value=bytearray(b"w"), partition=1, key=None)
    assert (r2.value, r2.partition, r2.key, r2.sequence) == (b"w", 1, None, 3)
    assert r.value == b"v"  # unchanged
    with pytest.raises(TypeError):
        r.replace(colour="red")
    with pytest.raises(TypeError):
        mqlite.ProducerRecord("t", 5)  # type: ignore[arg-type]
    with pytest.raises(mqlite.InvalidArgument):
        mqlite.ProducerRecord("t", partition=-1)
    assert "ProducerRecord(topic=" in repr(r)


def test_sticky_send_batch_moves_on(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=4)
    p = mq.producer(batch_size=1000)
    for _ in range(50):
        p.send_batch("t", [b"x" * 100] * 20)
    assert sum(1 for pi in mq.topic("t").partitions if pi.end_offset > 0) > 1
