"""Invalid input to the group API raises the documented exception."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from groups_util import SEG

import mqlite


def test_bad_consumer_settings(mq: mqlite.Broker) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"assignment_strategy": "fastest"}, "strategy"),
        ({"client_id": "bad id"}, "client_id"),
        ({"client_id": ""}, "client_id"),
        ({"auto_commit_interval_ms": -1}, "auto_commit_interval_ms"),
        ({"max_poll_interval_ms": 0}, "max_poll_interval_ms"),
        ({"wanted_partitions": [("t", 0)]}, "by_config"),
        ({"broadcast": True}, "group_id"),
        ({"max_poll_records": 0}, "max_poll_records"),
        ({"auto_offset_reset": "middle"}, "auto_offset_reset"),
    ]
    for kwargs, match in cases:
        with pytest.raises(mqlite.InvalidArgument, match=match):
            mq.consumer(**kwargs)
    with pytest.raises(mqlite.InvalidArgument, match="group_id"):
        mq.consumer("bad/group")
    # A group's files are named after it: 243 bytes at most, with broadcast
    # group id, "+" and client id together.
    with pytest.raises(mqlite.InvalidArgument, match="at most 243"):
        mq.consumer("g" * 244)
    with pytest.raises(mqlite.InvalidArgument, match="at most 243"):
        mq.consumer("g", client_id="c" * 242, broadcast=True)
    with pytest.raises(mqlite.InvalidArgument, match="at most 243"):
        mq.share_consumer("g" * 244)
    for kwargs in ({"group_id": "g" * 243}, {"group_id": "g", "client_id": "c" * 241, "broadcast": True}):
        consumer = mq.consumer(**kwargs)
        consumer.close()
    with pytest.raises(mqlite.InvalidArgument):
        mq.consumer("g", assignment_strategy="by_config", wanted_partitions=[("t", -1)])


def test_wrong_types(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer("g")
    c.subscribe("t")
    calls: list[Callable[[], Any]] = [
        lambda: mq.consumer("g", enable_auto_commit="yes"),  # type: ignore
        lambda: mq.consumer("g", assignment_strategy=3),  # type: ignore
        lambda: mq.consumer("g", client_id=None),  # type: ignore
        lambda: mq.consumer("g", auto_commit_interval_ms=1.5),  # type: ignore
        lambda: mq.consumer("g", on_commit=5),  # type: ignore
        lambda: mq.consumer("g", assignment_strategy="by_config", wanted_partitions="t"),  # type: ignore
        lambda: c.subscribe(123),  # type: ignore
        lambda: c.subscribe([1]),  # type: ignore
        lambda: c.subscribe(b"t"),  # type: ignore
        lambda: c.subscribe(None),  # type: ignore
        lambda: c.subscribe("t", on_assign=1),  # type: ignore
        lambda: c.subscribe("t", on_lost=1),  # type: ignore
        lambda: c.commit("t"),  # type: ignore
        lambda: c.commit([("t", 0)]),  # type: ignore
        lambda: c.commit([("t", 0, "1")]),  # type: ignore
        lambda: c.commit([("t", 0, 1, 2)]),  # type: ignore
        lambda: c.commit(5),  # type: ignore
        lambda: c.committed("t"),  # type: ignore
        lambda: c.committed([("t",)]),  # type: ignore
        lambda: c.offsets_for_times("t"),  # type: ignore
        lambda: c.offsets_for_times([("t", 0)]),  # type: ignore
        lambda: c.seek_to_beginning("t", "0"),  # type: ignore
        lambda: c.seek_to_end(0, 0),  # type: ignore
        lambda: c.commit(asynchronous="no"),  # type: ignore
    ]
    for call in calls:
        with pytest.raises(TypeError):
            call()


def test_unknown_topics_and_partitions(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    c = mq.consumer("g")
    # A topic that does not exist yet is waited for; an invalid name is
    # refused.
    with pytest.raises(mqlite.InvalidTopicName):
        c.subscribe(["t", "bad/name"])
    with pytest.raises(mqlite.InvalidArgument, match="at least one topic"):
        c.subscribe([])
    c.subscribe("t")
    with pytest.raises(mqlite.UnknownTopic):
        c.commit([("nope", 0, 0)])
    with pytest.raises(mqlite.UnknownPartition):
        c.commit([("t", 2, 0)])
    with pytest.raises(mqlite.UnknownTopic):
        c.committed([("nope", 0)])
    with pytest.raises(mqlite.UnknownPartition):
        c.committed([("t", 5)])
    with pytest.raises(mqlite.UnknownTopic):
        c.offsets_for_times([("nope", 0, 0)])
    with pytest.raises(mqlite.UnknownPartition):
        c.offsets_for_times([("t", 9, 0)])
    with pytest.raises(mqlite.UnknownTopic):
        c.seek_to_beginning("nope", 0)
    with pytest.raises(mqlite.UnknownPartition):
        c.seek_to_end("t", 7)


def test_offsets_out_of_range(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    mq.producer().send("t", b"x")
    c = mq.consumer("g")
    c.subscribe("t")
    with pytest.raises(mqlite.InvalidArgument, match="offset must not be negative"):
        c.commit([("t", 0, -1)])
    with pytest.raises(mqlite.InvalidArgument, match="partition"):
        c.commit([("t", -1, 0)])
    with pytest.raises(mqlite.OffsetOutOfRange):
        c.commit([("t", 0, 2)])  # past the end offset (1)
    c.commit([("t", 0, 1)])  # the end itself is fine
    with pytest.raises(mqlite.InvalidArgument, match="negative"):
        c.seek("t", 0, -5)
    with pytest.raises(mqlite.OffsetOutOfRange):
        c.seek("t", 0, 99)
    with pytest.raises(mqlite.InvalidArgument):
        c.offsets_for_times([("t", -1, 0)])
    with pytest.raises(mqlite.InvalidArgument, match="not assigned"):
        mq.consumer("h").seek_to_end("t", 0)


def test_commit_needs_a_group(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer()
    c.subscribe("t")
    with pytest.raises(mqlite.InvalidArgument, match="group_id"):
        c.commit()
    with pytest.raises(mqlite.InvalidArgument, match="group_id"):
        c.commit([("t", 0, 0)])
    with pytest.raises(mqlite.InvalidArgument, match="group_id"):
        c.committed()
    with pytest.raises(mqlite.InvalidArgument, match="group_id"):
        mq.consumer().committed([])
    assert c.member_id is None
    assert c.lag() == {("t", 0): 0}


def test_closed_consumer_raises(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer("g")
    c.subscribe("t")
    c.close()
    for call in [
        lambda: c.subscribe("^t"),
        lambda: c.unsubscribe(),
        lambda: c.commit(),
        lambda: c.commit([("t", 0, 0)]),
        lambda: c.committed(),
        lambda: c.lag(),
        lambda: c.seek_to_beginning("t", 0),
        lambda: c.seek_to_end("t", 0),
        lambda: c.offsets_for_times([("t", 0, 0)]),
    ]:
        with pytest.raises(mqlite.Closed):
            call()
    assert c.member_id is None
    c.wakeup()  # harmless
    c.close()
