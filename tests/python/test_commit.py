"""commit(), committed(), auto-commit and lag(): a commit covers exactly the
messages handed out to Python, and is durable."""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

import pytest
from groups_util import SEG, ids, produce, settle

import mqlite


def test_commit_covers_what_was_handed_out_not_what_was_buffered(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 20)
    c = mq.consumer("g", enable_auto_commit=False)
    c.subscribe("t")
    got = [c.poll(5) for _ in range(5)]  # the engine fetched 40; 5 handed out
    assert all(m is not None for m in got)
    done = c.commit()
    handed = {(m.partition, m.offset) for m in got if m is not None}
    assert done is not None
    for t, p, o in done:
        offsets = [off for part, off in handed if part == p]
        assert o == (max(offsets) + 1 if offsets else 0)
    assert c.committed() == {("t", p): (o, "") for _, p, o in done}
    # The messages put back for the commit are read again, in order.
    rest = [c.poll(5) for _ in range(35)]
    assert sorted(ids([m for m in got + rest if m is not None])) == [(p, o) for p in range(2) for o in range(20)]
    assert c.poll(0) is None


def test_explicit_offsets_and_metadata_are_durable(data_dir: Path) -> None:
    with mqlite.open(data_dir, prefault=False) as mq:
        mq.create_topic("t", partitions=3, segment_bytes=SEG)
        produce(mq, "t", 10)
        c = mq.consumer("g")
        assert c.commit([("t", 0, 4), ("t", 2, 10, "checkpoint α")]) == [("t", 0, 4), ("t", 2, 10)]
        assert c.committed([("t", 0), ("t", 1), ("t", 2)]) == {("t", 0): (4, ""), ("t", 2): (10, "checkpoint α")}
        c.commit([("t", 0, 5, "again")])  # overwrites
    with mqlite.open(data_dir, prefault=False) as mq:
        c = mq.consumer("g")
        assert c.committed([("t", 0), ("t", 2)]) == {("t", 0): (5, "again"), ("t", 2): (10, "checkpoint α")}
        assert mq.describe_group("g").committed == {("t", 0): (5, "again"), ("t", 2): (10, "checkpoint α")}
        # A new member (or an assignment) starts at the committed offsets.
        c.subscribe("t")
        assert [c.position("t", p) for p in range(3)] == [5, 0, 10]
        first = {m.partition: m.offset for m in reversed(c.consume(100, timeout=5))}
        assert first == {0: 5, 1: 0}
        a = mq.consumer("other")
        a.commit([("t", 1, 7)])
        a.assign([("t", 1)])
        assert a.position("t", 1) == 7


def test_close_commits_what_was_handed_out(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    produce(mq, "t", 100)
    c = mq.consumer("g")  # auto-commit on, 5 s interval
    c.subscribe("t")
    for _ in range(3):
        assert c.poll(5) is not None
    c.close()  # 97 buffered messages are not committed
    assert mq.describe_group("g").committed == {("t", 0): (3, "")}
    c2 = mq.consumer("g")
    c2.subscribe("t")
    m = c2.poll(5)
    assert m is not None and m.offset == 3


def test_garbage_collected_consumer_commits_too(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    produce(mq, "t", 50)
    c = mq.consumer("g")
    c.subscribe("t")
    for _ in range(7):
        c.poll(5)
    del c
    gc.collect()
    assert mq.describe_group("g").committed == {("t", 0): (7, "")}
    assert mq.describe_group("g").members == []


def test_no_commit_without_auto_commit(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    produce(mq, "t", 5)
    c = mq.consumer("g", enable_auto_commit=False)
    c.subscribe("t")
    assert len(c.consume(5, timeout=5)) == 5
    c.close()
    assert mq.describe_group("g").committed == {}


def test_auto_commit_every_interval(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    produce(mq, "t", 100)
    c = mq.consumer("g", auto_commit_interval_ms=50)
    c.subscribe("t")
    for _ in range(5):
        assert c.poll(5) is not None
    assert c.committed() == {}
    time.sleep(0.15)  # past the interval and the 100 ms refresh
    m = c.poll(5)  # commits the 5 handed out, then hands out the 6th
    assert m is not None and m.offset == 5
    assert c.committed() == {("t", 0): (5, "")}
    assert c.stats().commits == 1


def test_auto_commit_before_a_rebalance(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 10)
    a = mq.consumer("g", client_id="a")
    a.subscribe("t")
    taken = a.consume(3, timeout=5)
    b = mq.consumer("g", client_id="b")
    b.subscribe("t")
    time.sleep(0.12)
    got: dict[int, list[mqlite.Message]] = {0: list(taken)}
    settle([a, b], lambda: len(b.assignment()) == 1, got)
    # a committed what it had handed out before giving a partition away.
    handed = {m.partition: m.offset + 1 for m in got[0]}
    committed = mq.describe_group("g").committed
    (revoked,) = b.assignment()
    assert committed[revoked] == (handed.get(revoked[1], 0), "")


def test_commit_of_a_partition_not_owned(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    a = mq.consumer("g", client_id="a")
    b = mq.consumer("g", client_id="b")
    a.subscribe("t")
    b.subscribe("t")
    settle([a, b], lambda: len(b.assignment()) == 1)
    (theirs,) = b.assignment()
    with pytest.raises(mqlite.CommitFailed, match="not owned") as info:
        a.commit([(theirs[0], theirs[1], 0)])
    assert info.value.code == 500 and mqlite.CommitFailed.code == 500
    assert isinstance(info.value, mqlite.Error)
    b.commit([(theirs[0], theirs[1], 0)])  # the owner may


def test_on_commit_callback(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 3)
    calls: list[tuple[Any, list[tuple[str, int, int]]]] = []
    a = mq.consumer("g", client_id="a", on_commit=lambda err, offs: calls.append((err, offs)))
    b = mq.consumer("g", client_id="b")
    a.subscribe("t")
    assert a.commit([("t", 0, 1)]) == [("t", 0, 1)]
    assert calls == [(None, [("t", 0, 1)])]
    assert a.commit([("t", 1, 2)], asynchronous=True) is None
    assert calls[-1] == (None, [("t", 1, 2)])
    b.subscribe("t")
    settle([a, b], lambda: len(b.assignment()) == 1, got={})
    (theirs,) = b.assignment()
    # asynchronous: the failure goes to on_commit only.
    assert a.commit([(theirs[0], theirs[1], 1)], asynchronous=True) is None
    err, offs = calls[-1]
    assert isinstance(err, mqlite.CommitFailed) and offs == [(theirs[0], theirs[1], 1)]
    # synchronous: on_commit sees it, and commit() raises it.
    with pytest.raises(mqlite.CommitFailed):
        a.commit([(theirs[0], theirs[1], 1)])
    assert isinstance(calls[-1][0], mqlite.CommitFailed)
    # Without on_commit an asynchronous failure is raised.
    with pytest.raises(mqlite.CommitFailed):
        b.commit([(a.assignment()[0][0], a.assignment()[0][1], 0)], asynchronous=True)


def test_lag(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 10)
    c = mq.consumer("g", enable_auto_commit=False)
    c.subscribe("t")
    assert c.lag() == {("t", 0): 10, ("t", 1): 10}
    taken = [c.poll(5) for _ in range(3)]  # from one partition; the rest is buffered
    (p,) = {m.partition for m in taken if m is not None}
    # Nothing committed: the lag counts from what was handed out.
    assert c.lag() == {("t", p): 7, ("t", 1 - p): 10}
    c.commit([("t", p, 1)])
    assert c.lag() == {("t", p): 9, ("t", 1 - p): 10}
    mq.producer().send("t", b"x", partition=p)
    assert c.lag()[("t", p)] == 10


def test_stats(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 5)
    c = mq.consumer("g", enable_auto_commit=False)
    c.subscribe("t")
    m = c.poll(5)
    assert m is not None
    batch = c.consume(4, timeout=5)
    list_ = [m, *batch]
    s = c.stats()
    assert (s.records, s.polls, s.commits, s.skipped) == (5, 2, 0, 0)
    assert s.bytes == sum(len(x.value or b"") + len(x.key or b"") for x in list_)
    assert s.rebalances == 1
    c.commit()
    assert c.stats().commits == 1
    assert "ConsumerStats(records=5" in repr(c.stats())
    c.close()
    assert c.stats().records == 5  # readable once closed


def test_commit_metadata_is_bounded(data_dir: Path) -> None:
    with mqlite.open(data_dir, prefault=False, max_commit_metadata_bytes=8) as mq:
        mq.create_topic("t")
        mq.producer().send_batch("t", [b"x"] * 5, partition=0)
        c = mq.consumer("g", enable_auto_commit=False)
        c.assign([("t", 0)])
        c.commit([("t", 0, 2, "8 bytes!")])
        with pytest.raises(mqlite.InvalidArgument, match="max_commit_metadata_bytes"):
            c.commit([("t", 0, 3, "nine byte")])
        assert c.committed() == {("t", 0): (2, "8 bytes!")}
    with pytest.raises(mqlite.InvalidArgument):
        mqlite.open(data_dir, max_commit_metadata_bytes=-1)


def test_group_and_broadcast_offsets_never_collide(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    mq.producer().send_batch("t", [b"x"] * 10, partition=0)
    member = mq.consumer("a.b", enable_auto_commit=False)
    member.assign([("t", 0)])
    solo = mq.consumer("a", client_id="b", broadcast=True, enable_auto_commit=False)
    solo.assign([("t", 0)])
    member.commit([("t", 0, 3)])
    solo.commit([("t", 0, 8)])
    assert member.committed() == {("t", 0): (3, "")}
    assert solo.committed() == {("t", 0): (8, "")}
    assert mq.groups() == ["a", "a.b"]


@pytest.mark.parametrize("commit_acks", ["all", -1, 1, 0, "1"])
def test_commits_with_every_commit_acks_read_back_after_a_reopen(data_dir: Path, commit_acks: Any) -> None:
    with mqlite.open(data_dir, prefault=False) as mq:
        mq.create_topic("t", partitions=1, segment_bytes=SEG)
        produce(mq, "t", 20)
        c = mq.consumer("g", enable_auto_commit=False, commit_acks=commit_acks)
        c.assign([("t", 0)])
        for o in range(1, 21):
            c.commit([("t", 0, o)])
        c.close()
    with mqlite.open(data_dir, prefault=False) as mq:
        assert mq.describe_group("g").committed == {("t", 0): (20, "")}


def test_commit_acks_out_of_range_is_refused(mq: mqlite.Broker) -> None:
    for bad in (2, -2, "most", "2"):
        with pytest.raises(mqlite.InvalidArgument, match="acks"):
            mq.consumer("g", commit_acks=bad)
    for wrong in (1.5, True, b"1"):
        with pytest.raises(TypeError, match="acks"):
            mq.consumer("g", commit_acks=wrong)
