"""Flow control and stored offsets: pause()/resume()/paused(), and
store_offsets() with enable_auto_offset_store=False (commits, automatic
ones included, take only what was stored: the at-least-once idiom)."""

from __future__ import annotations

import pytest
from groups_util import SEG, produce

import mqlite


def test_a_paused_partition_yields_nothing_while_others_do(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 20)
    c = mq.consumer()
    c.assign([("t", 0), ("t", 1)])
    assert c.paused() == []
    first = c.poll(5)  # the rest of the fetch is held by the engine
    assert first is not None and first.offset == 0
    paused, other = first.partition, 1 - first.partition
    c.pause([("t", paused)])
    c.pause([("t", paused)])  # pausing again changes nothing
    assert c.paused() == [("t", paused)]
    got = [c.poll(1) for _ in range(20)]
    assert [(m.partition, m.offset) for m in got if m is not None] == [(other, o) for o in range(20)]
    assert c.poll(0) is None
    assert c.position("t", paused) == 1
    # Resumed: reading continues where it was, nothing skipped or repeated.
    c.resume([("t", paused)])
    assert c.paused() == []
    rest = [c.poll(1) for _ in range(19)]
    assert [(m.partition, m.offset) for m in rest if m is not None] == [(paused, o) for o in range(1, 20)]
    assert c.poll(0) is None


def test_pausing_a_partition_not_assigned_is_an_error_and_pauses_nothing(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 3)
    c = mq.consumer()
    c.assign([("t", 0)])
    with pytest.raises(mqlite.InvalidArgument, match="not assigned"):
        c.pause([("t", 0), ("t", 1)])
    with pytest.raises(mqlite.InvalidArgument, match="not assigned"):
        c.pause([("nope", 0)])
    assert c.paused() == []
    with pytest.raises(mqlite.InvalidArgument, match="not assigned"):
        c.resume([("t", 1)])
    assert [c.poll(1).offset for _ in range(3)] == [0, 1, 2]  # type: ignore[union-attr]
    c.close()
    with pytest.raises(mqlite.Closed):
        c.pause([("t", 0)])


def test_auto_commit_commits_only_what_was_stored(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=1, segment_bytes=SEG)
    produce(mq, "t", 30)
    conf = dict(enable_auto_commit=True, auto_commit_interval_ms=0, enable_auto_offset_store=False)
    c = mq.consumer("g", **conf)  # type: ignore[arg-type]
    c.assign([("t", 0)])
    # Ten handed out, the first five processed: stored one by one.
    for i in range(10):
        m = c.poll(5)
        assert m is not None and m.offset == i
        if i < 5:
            c.store_offsets(message=m)
    assert c.poll(1) is not None  # a poll auto-commits (interval 0)
    assert c.committed() == {("t", 0): (5, "")}
    c.store_offsets([("t", 0, 7)])
    # Closing auto-commits what was stored, not what was handed out (11).
    c.close()
    c = mq.consumer("g", **conf)  # type: ignore[arg-type]
    c.assign([("t", 0)])
    m = c.poll(5)
    assert m is not None and m.offset == 7
    c.close()


def test_store_offsets_rejects_bad_input_and_changes_nothing(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 5)
    c = mq.consumer("g", enable_auto_commit=False, enable_auto_offset_store=False)
    c.assign([("t", 0)])
    m = c.poll(5)
    assert m is not None
    c.store_offsets(message=m)
    with pytest.raises(mqlite.InvalidArgument, match="not assigned"):
        c.store_offsets([("t", 0, 4), ("t", 1, 1)])
    with pytest.raises(mqlite.InvalidArgument, match="exactly one"):
        c.store_offsets()
    with pytest.raises(mqlite.InvalidArgument, match="exactly one"):
        c.store_offsets([("t", 0, 4)], message=m)
    with pytest.raises(TypeError):
        c.store_offsets(message=("t", 0, 4))  # type: ignore[arg-type]
    c.commit()
    assert c.committed() == {("t", 0): (1, "")}
    # With the automatic store on (the default), or without a group: refused.
    auto = mq.consumer("h")
    auto.assign([("t", 0)])
    with pytest.raises(mqlite.InvalidArgument, match="enable_auto_offset_store"):
        auto.store_offsets(message=m)
    alone = mq.consumer(enable_auto_offset_store=False)
    alone.assign([("t", 0)])
    with pytest.raises(mqlite.InvalidArgument, match="group_id"):
        alone.store_offsets([("t", 0, 1)])
