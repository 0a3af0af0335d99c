"""Closed objects report it and raise mqlite.Closed; closing twice is fine."""

from pathlib import Path

import pytest

import mqlite


def test_closed_broker(data_dir: Path) -> None:
    mq = mqlite.open(data_dir)
    mq.create_topic("t")
    p = mq.producer()
    c = mq.consumer()
    c.subscribe("t")
    assert not mq.closed and not p.closed and not c.closed
    mq.close()
    mq.close()  # twice is fine
    assert mq.closed and p.closed and c.closed
    for call in [
        lambda: mq.create_topic("u"),
        lambda: mq.delete_topic("t"),
        lambda: mq.add_partitions("t", 3),
        lambda: mq.topics(),
        lambda: mq.topic("t"),
        lambda: mq.offset_for_timestamp("t", 0, 0),
        lambda: mq.producer(),
        lambda: mq.consumer(),
        lambda: mq.flush(),
        lambda: mq.enforce_retention(),
        lambda: p.send("t", b"v"),
        lambda: p.flush(),
        lambda: c.poll(timeout=0),
        lambda: c.poll(timeout=0.05),
        lambda: c.seek("t", 0, 0),
    ]:
        with pytest.raises(mqlite.Closed) as info:
            call()
        assert info.value.code == 5
    p.close()  # closing a producer of a closed broker is fine
    c.close()


def test_closed_producer(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    with mq.producer() as p:
        p.send("t", b"v")
    assert p.closed
    assert "closed" in repr(p)
    with pytest.raises(mqlite.Closed, match="producer"):
        p.send("t", b"v")
    with pytest.raises(mqlite.Closed):
        p.flush()
    p.close()
    assert not mq.closed


def test_closed_consumer(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    mq.producer().send("t", b"v")
    with mq.consumer("g") as c:
        c.subscribe("t")
        assert c.group_id == "g"
    assert c.closed
    for call in [
        lambda: c.poll(timeout=0),
        lambda: c.consume(5, timeout=0),
        lambda: c.subscribe("t"),
        lambda: c.assign([("t", 0)]),
        lambda: c.assignment(),
        lambda: c.seek("t", 0, 0),
        lambda: c.position("t", 0),
    ]:
        with pytest.raises(mqlite.Closed, match="consumer"):
            call()
    c.close()
    assert list(c) == []  # iteration over a closed consumer just ends


def test_buffered_messages_not_served_after_broker_close(data_dir: Path) -> None:
    mq = mqlite.open(data_dir)
    mq.create_topic("t")
    p = mq.producer()
    for _ in range(10):
        p.send("t", b"v")
    c = mq.consumer()
    c.subscribe("t")
    assert c.poll(timeout=5) is not None  # the rest is prefetched
    mq.close()
    with pytest.raises(mqlite.Closed, match="broker"):
        c.poll(timeout=0)
    with pytest.raises(mqlite.Closed):
        c.position("t", 0)
    assert list(c) == []


def test_broker_context_manager_closes_on_error(data_dir: Path) -> None:
    with pytest.raises(RuntimeError):
        with mqlite.open(data_dir) as mq:
            raise RuntimeError("boom")
    assert mq.closed


def test_producer_keeps_broker_alive(data_dir: Path) -> None:
    # The broker object is not kept by the caller, only by its producer.
    p = mqlite.open(data_dir).producer()
    with pytest.raises(mqlite.UnknownTopic):
        p.send("t", b"v")
    assert not p.closed
