"""Two or more consumers of a group share partitions, one owner each, and
hand them over on close, unsubscribe and when a member stops polling."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from groups_util import SEG, drain_all, ids, owners, produce, settle

import mqlite


def test_two_members_split_then_hand_over_on_close(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=4, segment_bytes=SEG)
    a = mq.consumer("g", client_id="a")
    a.subscribe(["t"])
    assert a.member_id is not None and a.member_id.startswith("a-")
    assert sorted(a.assignment()) == [("t", p) for p in range(4)]
    b = mq.consumer("g", client_id="b")
    b.subscribe(["t"])
    # b joined, but a still holds everything until it polls.
    assert b.assignment() == []
    settle([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
    own = owners(mq, "g")
    assert len(own) == 4
    assert {tp for tp, m in own.items() if m == a.member_id} == set(a.assignment())
    assert {tp for tp, m in own.items() if m == b.member_id} == set(b.assignment())
    info = mq.describe_group("g")
    assert info.name == "g" and info.generation >= 2
    assert b.member_id is not None
    assert sorted(m for m, _ in info.members) == sorted([a.member_id, b.member_id])
    a.close()
    assert a.member_id is None
    # a left at once: b takes everything at its next poll.
    settle([b], lambda: len(b.assignment()) == 4)
    assert owners(mq, "g") == {("t", p): b.member_id for p in range(4)}
    assert [m for m, _ in mq.describe_group("g").members] == [b.member_id]


def test_every_message_read_once_across_members(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=6, segment_bytes=SEG)
    produce(mq, "t", 50)
    cs = [mq.consumer("g", client_id=f"c{i}", enable_auto_commit=False) for i in range(3)]
    for c in cs:
        c.subscribe("t")
    got: dict[int, list[mqlite.Message]] = {}
    settle(cs, lambda: all(len(c.assignment()) == 2 for c in cs), got)
    drain_all(cs, 300, got)
    everything = [x for v in got.values() for x in ids(v)]
    assert len(everything) == len(set(everything)) == 300
    for i, c in enumerate(cs):
        assert {m.partition for m in got[i]} == {p for _, p in c.assignment()}


def test_unsubscribe_hands_over(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    a = mq.consumer("g")
    b = mq.consumer("g")
    a.subscribe("t")
    b.subscribe("t")
    settle([a, b], lambda: len(b.assignment()) == 1)
    a.unsubscribe()
    assert a.assignment() == [] and a.member_id is None
    assert a.poll(0) is None  # reads nothing, not an error
    settle([b], lambda: len(b.assignment()) == 2)
    a.subscribe("t")  # joins again
    settle([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)


@pytest.mark.parametrize("strategy", ["averagely", "range", "round_robin", "by_circle", "consistent_hash", "sticky"])
def test_strategies_share_every_partition(mq: mqlite.Broker, strategy: str) -> None:
    mq.create_topic("t", partitions=7, segment_bytes=SEG)
    cs = [mq.consumer("g", assignment_strategy=strategy) for _ in range(3)]  # type: ignore[arg-type]
    for c in cs:
        c.subscribe(["t"])
    settle(cs, lambda: sum(len(c.assignment()) for c in cs) == 7 and all(c.assignment() for c in cs))
    assert len(owners(mq, "g")) == 7


def test_by_config_reads_the_wanted_partitions(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=4, segment_bytes=SEG)
    a = mq.consumer("g", assignment_strategy="by_config", wanted_partitions=[("t", 0), ("t", 3)])
    b = mq.consumer("g", assignment_strategy="by_config", wanted_partitions=[("t", 1)])
    a.subscribe("t")
    b.subscribe("t")
    settle([a, b], lambda: sorted(b.assignment()) == [("t", 1)])
    assert sorted(a.assignment()) == [("t", 0), ("t", 3)]


def test_strategy_must_match_the_group(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    first = mq.consumer("g", assignment_strategy="sticky")
    first.subscribe("t")
    other = mq.consumer("g", assignment_strategy="range")
    with pytest.raises(mqlite.InvalidArgument, match="strategy"):
        other.subscribe("t")
    first.close()  # a group left empty takes any strategy
    other.subscribe("t")


def test_member_that_stops_polling_loses_its_partitions(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    a = mq.consumer("g", client_id="a", max_poll_interval_ms=200)
    b = mq.consumer("g", client_id="b", max_poll_interval_ms=200)
    a.subscribe("t")
    b.subscribe("t")
    settle([a, b], lambda: len(b.assignment()) == 1)
    start = time.monotonic()
    # Only b polls: a is removed after 200 ms and b gets both partitions.
    settle([b], lambda: len(b.assignment()) == 2)
    assert time.monotonic() - start >= 0.15
    assert [m for m, _ in mq.describe_group("g").members] == [b.member_id]
    # a joins again at its next poll.
    settle([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)


def test_expelled_member_hears_on_lost_and_cannot_commit(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 3)
    events: list[tuple[str, list[tuple[str, int]], str]] = []

    def on_revoke(c: mqlite.Consumer, parts: list[tuple[str, int]]) -> None:
        events.append(("revoke", parts, ""))

    def on_lost(c: mqlite.Consumer, parts: list[tuple[str, int]]) -> None:
        try:
            c.commit([(parts[0][0], parts[0][1], 1)])
            outcome = "committed"
        except mqlite.CommitFailed:
            outcome = "CommitFailed"
        events.append(("lost", parts, outcome))

    got: dict[int, list[mqlite.Message]] = {}
    a = mq.consumer("g", client_id="a", max_poll_interval_ms=200)
    b = mq.consumer("g", client_id="b", max_poll_interval_ms=200)
    a.subscribe("t", on_revoke=on_revoke, on_lost=on_lost)
    b.subscribe("t")
    settle([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1, got)
    held = a.assignment()
    old_id = a.member_id
    events.clear()
    committed = mq.describe_group("g").committed
    settle([b], lambda: len(b.assignment()) == 2, got)
    a.poll(timeout=0)
    # on_lost, not on_revoke; no auto-commit; a commit there refused.
    assert events == [("lost", held, "CommitFailed")]
    assert mq.describe_group("g").committed == committed
    assert a.member_id != old_id
    settle([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1, got)


def test_on_revoke_stands_in_for_a_missing_on_lost(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    revoked: list[tuple[str, int]] = []
    a = mq.consumer("g", client_id="a", max_poll_interval_ms=200, enable_auto_commit=False)
    b = mq.consumer("g", client_id="b", max_poll_interval_ms=200, enable_auto_commit=False)
    a.subscribe("t", on_revoke=lambda c, parts: revoked.extend(parts))
    b.subscribe("t")
    settle([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)
    held = a.assignment()
    revoked.clear()
    settle([b], lambda: len(b.assignment()) == 2)
    a.poll(timeout=0)
    assert revoked == held


def test_broadcast_gives_every_consumer_everything(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=3, segment_bytes=SEG)
    produce(mq, "t", 10)
    cs = [mq.consumer("b", client_id=f"x{i}", broadcast=True, enable_auto_commit=False) for i in range(2)]
    for c in cs:
        c.subscribe("t")
        assert c.member_id is None  # not a member: nothing is shared
        assert len(c.assignment()) == 3
    for i, c in enumerate(cs):
        got: dict[int, list[mqlite.Message]] = {}
        drain_all([c], 30, got)
        assert sorted(ids(got[0])) == [(p, o) for p in range(3) for o in range(10)]
    # Offsets of their own, described as <group>+<client_id> (never the
    # group <group>.<client_id>).
    cs[0].commit()
    cs[1].commit([("t", 0, 4)])
    assert mq.describe_group("b+x0").committed == {("t", p): (10, "") for p in range(3)}
    assert mq.describe_group("b+x1").committed == {("t", 0): (4, "")}
    assert mq.describe_group("b.x0").committed == {}
    assert mq.describe_group("b").members == []


def test_consume_in_a_group_returns_what_one_fetch_brought(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    produce(mq, "t", 30)
    c = mq.consumer("g", max_poll_records=10)
    c.subscribe("t")
    batch = c.consume(25, timeout=5)
    assert ids(batch) == [(0, o) for o in range(10)]
    assert ids(c.consume(25, timeout=5)) == [(0, o) for o in range(10, 20)]


def test_describe_group(mq: mqlite.Broker) -> None:
    info = mq.describe_group("nobody")
    assert (info.name, info.members, info.committed) == ("nobody", [], {})
    assert "GroupInfo(name='nobody'" in repr(info)
    with pytest.raises(mqlite.InvalidArgument):
        mq.describe_group("bad name")
    with pytest.raises(TypeError):
        mq.describe_group(3)  # type: ignore[arg-type]


def test_groups_lists_groups_in_use(mq: mqlite.Broker, data_dir: Path) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 3)
    assert mq.groups() == []
    mq.describe_group("nobody")  # described only: not in use
    assert mq.groups() == []
    member = mq.consumer("members")
    member.subscribe("t")
    committer = mq.consumer("billing", enable_auto_commit=False)
    committer.assign([("t", 0)])
    assert committer.poll(timeout=5) is not None
    committer.commit()
    broadcast = mq.consumer("radio", client_id="one", broadcast=True)
    broadcast.subscribe("t")
    broadcast.commit([("t", 0, 1)])
    assert mq.groups() == ["billing", "members", "radio"]
    member.close()
    assert mq.groups() == ["billing", "radio"]
    # From the files, after a reopen.
    mq.close()
    again = mqlite.open(data_dir, prefault=False, retention_check_interval_ms=0)
    try:
        assert again.groups() == ["billing", "radio"]
    finally:
        again.close()
    with pytest.raises(mqlite.Closed):
        mq.groups()
