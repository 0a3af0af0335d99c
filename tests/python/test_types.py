"""Arguments of the wrong type raise TypeError (never a panic)."""

import pytest

import mqlite


@pytest.fixture
def producer(mq: mqlite.Broker) -> mqlite.Producer:
    mq.create_topic("t", partitions=2)
    return mq.producer()


@pytest.mark.parametrize(
    "call",
    [
        lambda p: p.send(1, b"v"),
        lambda p: p.send(b"t", b"v"),
        lambda p: p.send("t", 1),
        lambda p: p.send("t", 1.5),
        lambda p: p.send("t", ["v"]),
        lambda p: p.send("t", b"v", key=7),
        lambda p: p.send("t", b"v", key=object()),
        lambda p: p.send("t", b"v", partition="0"),
        lambda p: p.send("t", b"v", partition=1.0),
        lambda p: p.send("t", b"v", timestamp=1.5),
        lambda p: p.send("t", b"v", timestamp="now"),
        lambda p: p.send("t", b"v", headers="a=b"),
        lambda p: p.send("t", b"v", headers=b"a=b"),
        lambda p: p.send("t", b"v", headers=[("a",)]),
        lambda p: p.send("t", b"v", headers=[("a", b"1", b"2")]),
        lambda p: p.send("t", b"v", headers=[(1, b"v")]),
        lambda p: p.send("t", b"v", headers=[("a", 1)]),
        lambda p: p.send("t", b"v", headers=[("a", None)]),
        lambda p: p.send("t", b"v", headers={1: b"v"}),
        lambda p: p.send("t", b"v", headers=["ab"]),
        lambda p: p.send("t", b"v", headers=5),
        lambda p: p.flush(timeout="1"),
    ],
)
def test_producer_type_errors(producer: mqlite.Producer, call) -> None:
    with pytest.raises(TypeError):
        call(producer)


def test_broker_type_errors(mq: mqlite.Broker) -> None:
    for call in [
        lambda: mq.create_topic(5),
        lambda: mq.create_topic("t", "4"),
        lambda: mq.create_topic("t", segment_bytes="big"),
        lambda: mq.topic(None),
        lambda: mq.delete_topic(3),
        lambda: mq.add_partitions("t", "3"),
        lambda: mq.offset_for_timestamp("t", 0, "yesterday"),
        lambda: mq.consumer(group_id=5),
    ]:
        with pytest.raises(TypeError):
            call()


def test_consumer_type_errors(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    c = mq.consumer()
    for call in [
        lambda: c.subscribe(5),
        lambda: c.subscribe([5]),
        lambda: c.subscribe(None),
        lambda: c.assign("t"),
        lambda: c.assign(["t"]),
        lambda: c.assign([("t", "0")]),
        lambda: c.assign([(0, 0)]),
        lambda: c.seek("t", "0", 0),
        lambda: c.poll("1"),
        lambda: c.consume("3"),
        lambda: c.position(0, 0),
    ]:
        with pytest.raises(TypeError):
            call()
