"""on_assign / on_revoke: order, a commit inside on_revoke handing over
exactly what was processed, seeks in on_assign, exceptions, re-entrancy."""

from __future__ import annotations

import gc
import time
import weakref
from typing import Any

import pytest
from groups_util import SEG, drain_all, ids, produce, settle

import mqlite


def test_commit_in_on_revoke_hands_over_exactly(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 50)
    log: list[Any] = []  # callbacks and messages of `a`, in order

    def on_assign(c: mqlite.Consumer, parts: list[tuple[str, int]]) -> None:
        log.append(("assign", sorted(parts), sorted(c.assignment())))

    def on_revoke(c: mqlite.Consumer, parts: list[tuple[str, int]]) -> None:
        # Still owned while the callback runs; commit what was processed.
        assert set(parts) <= set(c.assignment())
        committed = c.commit()
        log.append(("revoke", sorted(parts), committed, c.committed(parts)))

    a = mq.consumer("g", client_id="a", enable_auto_commit=False)
    a.subscribe(["t"], on_assign=on_assign, on_revoke=on_revoke)
    assert log == [("assign", [("t", 0), ("t", 1)], [("t", 0), ("t", 1)])]
    # a processes 30 messages one by one (more are buffered in the binding).
    for _ in range(30):
        m = a.poll(5)
        assert m is not None
        log.append(m)
    b = mq.consumer("g", client_id="b", enable_auto_commit=False)
    b.subscribe(["t"])
    # a hands out buffered messages for up to 100 ms before it goes back to
    # the engine (and rebalances); past that, its next poll revokes, with
    # messages of both partitions still buffered.
    time.sleep(0.15)
    got: dict[int, list[mqlite.Message]] = {}
    deadline = time.monotonic() + 5
    while not any(e[0] == "revoke" for e in log if isinstance(e, tuple)):
        assert time.monotonic() < deadline
        m = a.poll(0.01)
        if m is not None:
            log.append(m)
    revoke_at = next(i for i, e in enumerate(log) if isinstance(e, tuple) and e[0] == "revoke")
    _, revoked, committed, after = log[revoke_at]
    assert revoked == [("t", 1)]
    a_before = [e for e in log[:revoke_at] if isinstance(e, mqlite.Message)]
    # The commit covered exactly what a had handed out of each partition.
    assert ids(a_before) == [(0, o) for o in range(30)]
    assert sorted(committed) == [("t", 0, 30), ("t", 1, 0)]
    assert after == {tp: (o, "") for (t, q, o) in committed for tp in [(t, q)] if (t, q) in revoked}
    # After the revoke a never returns messages of partition 1 (its
    # buffered ones were put back before the rebalance).
    got[0] = a_before + [e for e in log[revoke_at:] if isinstance(e, mqlite.Message)]
    assert all(m.partition == 0 for m in log[revoke_at:] if isinstance(m, mqlite.Message))
    drain_all([a, b], 100, got)
    assert all(m.partition == 0 for m in got[0][len(a_before) :])
    assert all(m.partition == 1 for m in got[1])
    # b resumed partition 1 exactly at a's commit: no loss, no duplicates.
    start = next(o for (t, q, o) in committed if q == 1)
    assert ids(got[1])[0] == (1, start)
    everything = ids(got[0]) + ids(got[1])
    assert len(everything) == len(set(everything)) == 100


def test_callbacks_order_through_join_leave_close(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    events: list[tuple[str, str, list[tuple[str, int]]]] = []

    def cbs(name: str) -> dict[str, Any]:
        return {
            "on_assign": lambda c, p: events.append((name, "assign", sorted(p))),
            "on_revoke": lambda c, p: events.append((name, "revoke", sorted(p))),
        }

    a = mq.consumer("g", client_id="a")
    b = mq.consumer("g", client_id="b")
    a.subscribe("t", **cbs("a"))
    b.subscribe("t", **cbs("b"))
    settle([a, b], lambda: len(b.assignment()) == 1)
    a.close()
    settle([b], lambda: len(b.assignment()) == 2)
    b.unsubscribe()
    assert events == [
        ("a", "assign", [("t", 0), ("t", 1)]),
        ("a", "revoke", [("t", 1)]),  # revoked first ...
        ("b", "assign", [("t", 1)]),  # ... then assigned to b
        ("a", "revoke", [("t", 0)]),  # close
        ("b", "assign", [("t", 0)]),
        ("b", "revoke", [("t", 0), ("t", 1)]),  # unsubscribe
    ]


def test_seek_in_on_assign(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    produce(mq, "t", 10)

    def on_assign(c: mqlite.Consumer, parts: list[tuple[str, int]]) -> None:
        for t, p in parts:
            c.seek(t, p, 7)
            assert c.position(t, p) == 7

    c = mq.consumer("g")
    c.subscribe("t", on_assign=on_assign)
    assert ids(c.consume(10, timeout=5)) == [(0, 7), (0, 8), (0, 9)]


def test_calls_inside_a_callback(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 5)
    seen: dict[str, Any] = {}

    def on_assign(c: mqlite.Consumer, parts: list[tuple[str, int]]) -> None:
        seen["member"] = c.member_id
        seen["positions"] = [c.position(t, p) for t, p in parts]
        seen["lag"] = c.lag()
        seen["times"] = c.offsets_for_times([("t", 0, 0)])
        seen["stats"] = c.stats().rebalances
        seen["committed"] = c.committed()
        c.seek_to_end("t", 1)
        c.seek_to_beginning("t", 1)
        for call in (
            lambda: c.poll(0),
            lambda: c.consume(1, timeout=0),
            lambda: next(iter(c)),
            lambda: c.subscribe("t"),
            lambda: c.unsubscribe(),
            lambda: c.assign([("t", 0)]),
        ):
            with pytest.raises(RuntimeError, match="inside on_assign or on_revoke"):
                call()

    c = mq.consumer("g", client_id="x")
    c.subscribe("t", on_assign=on_assign)
    assert seen == {
        "member": c.member_id,
        "positions": [0, 0],
        "lag": {("t", 0): 5, ("t", 1): 5},
        "times": [0],
        "stats": 1,
        "committed": {},
    }
    assert len(c.consume(10, timeout=5)) == 10


def test_exception_in_callback_propagates_out_of_the_call(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 5)

    def on_assign(c: mqlite.Consumer, parts: list[tuple[str, int]]) -> None:
        raise ValueError(f"assign {sorted(parts)}")

    def on_revoke(c: mqlite.Consumer, parts: list[tuple[str, int]]) -> None:
        raise KeyError("revoke")

    a = mq.consumer("g", client_id="a")
    with pytest.raises(ValueError, match=r"assign \[\('t', 0\), \('t', 1\)\]"):
        a.subscribe("t", on_assign=on_assign, on_revoke=on_revoke)
    # The partitions are assigned anyway, and the consumer goes on.
    assert sorted(a.assignment()) == [("t", 0), ("t", 1)]
    assert a.poll(5) is not None
    b = mq.consumer("g", client_id="b")
    b.subscribe("t")
    time.sleep(0.12)  # a goes back to the engine (and rebalances) at its next poll
    with pytest.raises(KeyError, match="revoke"):
        for _ in range(20):
            a.poll(0.01)
    assert a.assignment() == [("t", 0)]
    settle([b], lambda: b.assignment() == [("t", 1)], got={})
    with pytest.raises(KeyError):
        a.close()  # revokes the rest: raises, closed anyway
    assert a.closed


def test_close_inside_a_callback(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 5)
    calls: list[str] = []

    def on_revoke(c: mqlite.Consumer, parts: list[tuple[str, int]]) -> None:
        calls.append(f"revoke {sorted(parts)} closed={c.closed}")
        c.commit()
        c.close()  # takes effect once the poll that ran this is done

    a = mq.consumer("g", client_id="a", enable_auto_commit=False)
    a.subscribe("t", on_revoke=on_revoke)
    first = a.poll(5)
    assert first is not None
    b = mq.consumer("g", client_id="b")
    b.subscribe("t")
    time.sleep(0.12)
    got = list(a)  # iteration ends when the consumer closes
    assert a.closed
    assert calls[0] == "revoke [('t', 1)] closed=False"
    assert calls[1] == "revoke [('t', 0)] closed=True"  # leaving the group
    with pytest.raises(mqlite.Closed):
        a.poll(0)
    # b gets both partitions and resumes after what a handed out.
    got_b: dict[int, list[mqlite.Message]] = {}
    settle([b], lambda: len(b.assignment()) == 2, got_b)
    drain_all([b], 10 - 1 - len(got), got_b)
    everything = ids([first] + got + got_b.get(0, []))
    assert sorted(everything) == [(p, o) for p in range(2) for o in range(5)]


def test_callbacks_need_a_group(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    for c in (mq.consumer(), mq.consumer("g", broadcast=True)):
        with pytest.raises(mqlite.InvalidArgument, match="group_id"):
            c.subscribe("t", on_assign=lambda c, p: None)
        with pytest.raises(TypeError, match="on_revoke must be callable"):
            c.subscribe("t", on_revoke=3)  # type: ignore[arg-type]


def test_resubscribe_replaces_callbacks(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    mq.create_topic("u", segment_bytes=SEG)
    events: list[str] = []
    c = mq.consumer("g")
    c.subscribe("t", on_assign=lambda c, p: events.append(f"old assign {p}"), on_revoke=lambda c, p: events.append(f"old revoke {p}"))
    c.subscribe("u", on_assign=lambda c, p: events.append(f"new assign {p}"))
    # The old subscription's revoke runs the old callback.
    assert events == ["old assign [('t', 0)]", "old revoke [('t', 0)]", "new assign [('u', 0)]"]
    # A refused subscription keeps the current one (and its callbacks).
    with pytest.raises(mqlite.InvalidTopicName):
        c.subscribe("bad/name", on_assign=lambda c, p: events.append("never"))
    c.unsubscribe()
    assert events[-1] == "new assign [('u', 0)]"


def test_consumer_with_self_referencing_callbacks_is_collected(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer("g")
    holder = {"c": c}
    c.subscribe("t", on_assign=lambda _c, _p: holder["c"].assignment())
    ref = weakref.ref(c)
    del c, holder
    gc.collect()
    assert ref() is None
    # It left the group when it was collected.
    assert mq.describe_group("g").members == []


def test_callbacks_run_on_the_polling_thread_with_the_gil_released_while_waiting(mq: mqlite.Broker) -> None:
    import threading

    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    threads: list[int] = []
    a = mq.consumer("g")
    b = mq.consumer("g")
    a.subscribe("t")
    b.subscribe("t", on_assign=lambda c, p: threads.append(threading.get_ident()))
    result: list[Any] = []

    def poller() -> None:
        # b waits in poll (without the GIL) until a releases a partition.
        result.append(b.poll(3))

    t = threading.Thread(target=poller)
    t.start()
    time.sleep(0.1)
    a.poll(0)  # revokes one partition: b's waiting poll takes it
    t.join()
    assert threads == [t.ident]
    assert b.assignment() == [("t", 1)]


def test_assign_revokes_a_subscription_through_on_revoke(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    produce(mq, "t", 5)
    revoked: list[Any] = []

    def on_revoke(c: mqlite.Consumer, parts: list[tuple[str, int]]) -> None:
        revoked.append((sorted(parts), c.commit()))

    c = mq.consumer("g", enable_auto_commit=False)
    c.subscribe("t", on_revoke=on_revoke)
    m = c.poll(5)
    assert m is not None
    c.assign([("t", 0)])  # leaves the group: on_revoke commits what was handed out
    assert revoked == [([("t", 0), ("t", 1)], sorted([("t", m.partition, m.offset + 1), ("t", 1 - m.partition, 0)]))]
    assert c.member_id is None and c.assignment() == [("t", 0)]
    assert mq.describe_group("g").members == []
