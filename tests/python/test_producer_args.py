"""Producer settings: the memory bound, invalid arguments, closed producers,
and the new exception classes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import mqlite


def test_new_exception_classes() -> None:
    for cls, code in [
        (mqlite.BufferFull, 401),
        (mqlite.OutOfOrderSequence, 402),
        (mqlite.ProducerFenced, 403),
    ]:
        assert issubclass(cls, mqlite.Error) and cls.code == code
        assert cls.__module__ == "mqlite"
    assert not issubclass(mqlite.OutOfOrderSequence, mqlite.InvalidArgument)


def test_buffer_full_after_max_block_ms(mq: mqlite.Broker) -> None:
    """acks=all records hold buffer_memory until their flush; a flood of
    produce() with no time to wait fills it."""
    mq.create_topic("t")
    limit = 8192
    p = mq.producer(acks="all", buffer_memory=limit, max_block_ms=0)
    delivered: list[object] = []
    queued = 0
    err = None
    deadline = time.monotonic() + 10
    while err is None and time.monotonic() < deadline:
        try:
            p.produce("t", b"x" * 1000, on_delivery=lambda e, m: delivered.append(e))
            queued += 1
        except mqlite.BufferFull as e:
            err = e
    assert err is not None, "the buffer never filled"
    assert err.code == 401 and err.limit == limit  # type: ignore[attr-defined]
    assert err.buffered + 1000 > limit  # type: ignore[attr-defined]
    p.flush()
    # Refused records were not queued; the others are all delivered.
    assert len(delivered) == queued and all(e is None for e in delivered)
    assert mq.topic("t").partitions[0].end_offset == queued
    assert p.stats().peak_buffered_bytes <= limit


def test_peak_buffered_bytes_stays_within_buffer_memory(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=4)
    limit = 64 * 1024
    p = mq.producer(acks="all", linger_ms=2, buffer_memory=limit, batch_size=4096)
    for i in range(5000):
        p.produce("t", b"y" * 200, key=str(i % 10))
    p.flush()
    st = p.stats()
    assert st.records == 5000
    assert 0 < st.peak_buffered_bytes <= limit
    assert st.buffered_bytes == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"linger_ms": -1},
        {"batch_size": -1},
        {"buffer_memory": 0},
        {"buffer_memory": -5},
        {"max_block_ms": -1},
        {"dedup_window": 0},
        {"acks": 3},
        {"compression": "rar"},
        {"partitioner": "hash"},
    ],
)
def test_invalid_settings(mq: mqlite.Broker, kwargs: dict[str, object]) -> None:
    with pytest.raises(mqlite.InvalidArgument):
        mq.producer(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"idempotent": 1},
        {"strict_sequences": "yes"},
        {"linger_ms": 1.5},
        {"batch_size": "16k"},
        {"compression": b"gzip"},
        {"interceptors": 3},
        {"partitioner": 1.0},
        {"name": b"bytes"},
    ],
)
def test_wrong_types(mq: mqlite.Broker, kwargs: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        mq.producer(**kwargs)  # type: ignore[arg-type]


def test_send_argument_types(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer()
    for call in [
        lambda: p.produce("t", 5),  # type: ignore[arg-type]
        lambda: p.produce("t", b"x", key=5),  # type: ignore[arg-type]
        lambda: p.produce("t", b"x", headers=5),  # type: ignore[arg-type]
        lambda: p.produce("t", b"x", timestamp="now"),  # type: ignore[arg-type]
        lambda: p.send("t", b"x", sequence=1.0),  # type: ignore[arg-type]
        lambda: p.send_batch("t", [b"x"], sequences="0"),  # type: ignore[arg-type]
        lambda: p.send_batch("t", [b"x"], keys=[5]),  # type: ignore[list-item]
        lambda: p.send_batch("t", [b"x"], timestamps=["x"]),  # type: ignore[list-item]
        lambda: p.poll("soon"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(TypeError):
            call()
    assert mq.topic("t").partitions[0].end_offset == 0


def test_closed_producer_raises(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer("closing")
    p.send("t", b"x", sequence=0)
    p.close()
    p.close()
    for call in [
        lambda: p.send("t", b"x"),
        lambda: p.produce("t", b"x"),
        lambda: p.send_batch("t", [b"x"]),
        lambda: p.poll(),
        lambda: p.flush(),
        lambda: p.last_sequence(),
    ]:
        with pytest.raises(mqlite.Closed, match="producer"):
            call()
    assert p.stats().records == 1  # still readable
    assert p.name == "closing"


def test_producer_of_closed_broker(data_dir: Path) -> None:
    mq = mqlite.open(data_dir)
    mq.create_topic("t")
    p = mq.producer(linger_ms=60_000)
    mq.close()
    for call in [
        lambda: p.produce("t", b"x"),
        lambda: p.send_batch("t", [b"x"]),
        lambda: p.flush(),
    ]:
        with pytest.raises(mqlite.Closed):
            call()
    p.close()
