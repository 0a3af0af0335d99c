"""Share consumers (`Broker.share_consumer()`): the members of a share group
take any message, each to one member at a time, and acknowledge, release,
reject or renew each; a message whose lock runs out is delivered again; the
group's state survives reopening and `kill -9`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from groups_util import SEG

import mqlite


def open_broker(path: Path) -> mqlite.Broker:
    return mqlite.open(path, prefault=False, retention_check_interval_ms=0)


def fill(mq: mqlite.Broker, topic: str = "t", partitions: int = 1, per_partition: int = 1) -> None:
    mq.create_topic(topic, partitions=partitions, segment_bytes=SEG)
    p = mq.producer(acks="all")
    for part in range(partitions):
        p.send_batch(topic, [f"{part}-{i}".encode() for i in range(per_partition)], partition=part)


def drain(sc: mqlite.ShareConsumer, idle: float = 0.3) -> list[mqlite.ShareMessage]:
    """Every message `sc` gets until a poll of `idle` seconds finds none."""
    out: list[mqlite.ShareMessage] = []
    while True:
        batch = sc.poll_batch(timeout=idle)
        if not batch:
            return out
        out.extend(batch)


def key(m: mqlite.Message) -> tuple[str, int, int]:
    return (m.topic, m.partition, m.offset)


def test_members_take_disjoint_messages_and_ack(mq: mqlite.Broker) -> None:
    fill(mq, partitions=2, per_partition=20)
    a = mq.share_consumer("sg", "t", client_id="a", max_poll_records=4)
    b = mq.share_consumer("sg", ["t"], client_id="b", max_poll_records=4)
    assert a.group_id == b.group_id == "sg"
    got: dict[str, list[mqlite.ShareMessage]] = {"a": [], "b": []}
    deadline = time.monotonic() + 10
    while len(got["a"]) + len(got["b"]) < 40:
        assert time.monotonic() < deadline, {k: len(v) for k, v in got.items()}
        for name, c in (("a", a), ("b", b)):
            batch = c.poll_batch(timeout=0.05)
            got[name].extend(batch)
    keys_a = {key(m) for m in got["a"]}
    keys_b = {key(m) for m in got["b"]}
    assert got["a"] and got["b"]
    assert not keys_a & keys_b
    assert keys_a | keys_b == {("t", p, o) for p in range(2) for o in range(20)}
    assert all(isinstance(m, mqlite.Message) and m.delivery_count == 1 for m in got["a"] + got["b"])
    m = got["a"][0]
    assert m.value == f"{m.partition}-{m.offset}".encode() and m.id == f"t:{m.partition}:{m.offset}"
    a.ack(got["a"])  # one call for the list
    for m in got["b"]:
        m.ack()
    assert a.poll(timeout=0.2) is None and b.poll(timeout=0.2) is None
    sa, sb = a.stats(), b.stats()
    assert (sa.acked, sb.acked) == (len(got["a"]), len(got["b"]))
    assert sa.records == len(got["a"]) and sa.redelivered == 0 and sa.polls >= 1
    for c in (a, b):
        c.close()


def test_poll_consume_and_iteration(mq: mqlite.Broker) -> None:
    fill(mq, per_partition=6)
    with mq.share_consumer("sg", "t", max_poll_records=3) as sc:
        first = sc.poll(timeout=5)
        assert first is not None and first.offset == 0
        rest = sc.consume(10, timeout=5)  # what the engine poll delivered: 2 more
        assert [m.offset for m in rest] == [1, 2]
        seen = []
        for m in sc:
            seen.append(m.offset)
            m.ack()
            if len(seen) == 3:
                break
        assert seen == [3, 4, 5]
        sc.ack([first] + rest)
        sc.wakeup()
        assert list(sc) == []  # the wakeup ends the loop at once
        # A wakeup from another thread ends a waiting poll.
        threading.Timer(0.2, sc.wakeup).start()
        t0 = time.monotonic()
        assert sc.poll(timeout=30) is None
        assert time.monotonic() - t0 < 10
        s = sc.stats()
        assert (s.records, s.acked, s.released, s.rejected) == (6, 6, 0, 0)
        assert {"redelivered", "dead_lettered", "expired", "window_full", "skipped"} <= set(dir(s))
    assert sc.closed


def test_release_comes_back_and_delay_holds_it(mq: mqlite.Broker) -> None:
    fill(mq, per_partition=2)
    sc = mq.share_consumer("sg", "t", max_poll_records=1)
    m = sc.poll(timeout=5)
    assert m is not None and (m.offset, m.delivery_count) == (0, 1)
    m.release()
    again = sc.poll(timeout=5)
    assert again is not None and (again.offset, again.delivery_count) == (0, 2)
    # Released with a delay: the message behind it comes first, and it is not
    # back before the delay.
    t0 = time.monotonic()
    sc.release(again, delay_ms=600)
    behind = sc.poll(timeout=5)
    assert behind is not None and (behind.offset, behind.delivery_count) == (1, 1)
    behind.ack()
    assert sc.poll(timeout=0.3) is None
    later = sc.poll(timeout=5)
    assert later is not None and (later.offset, later.delivery_count) == (0, 3)
    assert time.monotonic() - t0 >= 0.55
    later.ack()
    assert sc.stats().released == 2 and sc.stats().redelivered == 2
    sc.close()


def test_reject_goes_to_the_dead_letter_topic(mq: mqlite.Broker) -> None:
    fill(mq, per_partition=3)
    sc = mq.share_consumer("sg", "t")
    ms = sc.consume(3, timeout=5)
    assert [m.offset for m in ms] == [0, 1, 2]
    ms[0].reject("bad input")
    sc.reject(ms[1:])  # default reason
    assert sc.poll(timeout=0.3) is None  # never delivered again
    assert sc.stats().rejected == 3 and sc.stats().dead_lettered == 3
    reader = mq.consumer()
    reader.assign([("t.sg.dlq", 0)])
    dead = reader.consume(10, timeout=5)
    assert [m.value for m in dead] == [b"0-0", b"0-1", b"0-2"]
    headers = [dict(m.headers) for m in dead]
    assert headers[0]["mqlite.dlq.reason"] == b"bad input"
    assert headers[1]["mqlite.dlq.reason"] == b"rejected"
    assert headers[0]["mqlite.dlq.topic"] == b"t"
    sc.close()


def test_max_deliveries_dead_letters(mq: mqlite.Broker) -> None:
    fill(mq)
    sc = mq.share_consumer("sg", "t", max_deliveries=2, dead_letter_topic="dead")
    for count in (1, 2):
        m = sc.poll(timeout=5)
        assert m is not None and m.delivery_count == count
        m.release()
    assert sc.poll(timeout=0.3) is None
    reader = mq.consumer()
    reader.assign([("dead", 0)])
    (dead,) = reader.consume(10, timeout=5)
    assert dead.value == b"0-0" and dict(dead.headers)["mqlite.dlq.deliveries"] == b"2"
    sc.close()


def test_lock_expiry_redelivers_and_the_old_delivery_is_refused(mq: mqlite.Broker) -> None:
    fill(mq)
    sc = mq.share_consumer("sg", "t", lock_duration_ms=200)
    old = sc.poll(timeout=5)
    assert old is not None and old.delivery_count == 1
    time.sleep(0.3)
    new = sc.poll(timeout=5)
    assert new is not None and key(new) == key(old) and new.delivery_count == 2
    with pytest.raises(mqlite.InvalidRecordState) as info:
        old.ack()
    assert info.value.code == 501 and isinstance(info.value, mqlite.Error)
    new.renew()  # a renewed lock outlives its first deadline
    time.sleep(0.15)
    sc.renew([new])
    time.sleep(0.15)
    new.ack()
    assert sc.poll(timeout=0.3) is None
    assert sc.stats().expired == 1
    sc.close()


def test_state_survives_reopening(data_dir: Path) -> None:
    with open_broker(data_dir) as mq:
        fill(mq, per_partition=6)
        sc = mq.share_consumer("sg", "t")
        ms = sc.consume(6, timeout=5)
        assert len(ms) == 6
        sc.ack(ms[:3])
        sc.close()
    # The messages of the closed consumer are still referenced: the group is
    # free all the same.
    with open_broker(data_dir) as mq:
        sc2 = mq.share_consumer("sg", "t")
        back = drain(sc2)
        assert [(m.offset, m.delivery_count) for m in back] == [(3, 2), (4, 2), (5, 2)]
        back[0].ack()
    # The broker's close() closed sc2 (and gave its messages back).
    assert sc2.closed
    with open_broker(data_dir) as mq:
        with mq.share_consumer("sg", "t") as sc3:
            last = drain(sc3)
            assert [(m.offset, m.delivery_count) for m in last] == [(4, 3), (5, 3)]
            sc3.ack(last)
    with open_broker(data_dir) as mq:
        with mq.share_consumer("sg", "t") as sc4:
            assert sc4.poll(timeout=0.3) is None
    assert ms and back  # referenced until here


def test_backlog_counts_available_in_flight_and_delayed(mq: mqlite.Broker) -> None:
    fill(mq, partitions=2, per_partition=5)
    sc = mq.share_consumer("sg", "t", max_poll_records=1)
    b = sc.backlog()
    assert isinstance(b, mqlite.ShareBacklog)
    assert (b.available, b.in_flight, b.delayed) == (10, 0, 0)  # never read: all available
    first, second, third = (sc.poll(timeout=5) for _ in range(3))
    assert first is not None and second is not None and third is not None
    assert (sc.backlog().available, sc.backlog().in_flight) == (7, 3)
    first.ack()
    second.release(delay_ms=60_000)
    third.release()
    b = sc.backlog()
    assert (b.available, b.in_flight, b.delayed) == (8, 0, 1)
    assert repr(b) == "ShareBacklog(available=8, in_flight=0, delayed=1)"
    # The whole group: another member's view is the same.
    other = mq.share_consumer("sg", "t")
    assert (other.backlog().available, other.backlog().delayed) == (8, 1)
    sc.close()
    with pytest.raises(mqlite.Closed):
        sc.backlog()


def test_invalid_arguments(mq: mqlite.Broker) -> None:
    fill(mq)
    for group in ("", "a b", "__x"):
        with pytest.raises(mqlite.InvalidArgument):
            mq.share_consumer(group, "t")
    bad: list[dict] = [
        {"lock_duration_ms": 0},
        {"lock_duration_ms": -1},
        {"max_in_flight": 0},
        {"max_poll_records": 0},
        {"max_deliveries": -1},
        {"auto_offset_reset": "error"},
        {"auto_offset_reset": "nowhere"},
        {"commit_acks": 2},
    ]
    for kwargs in bad:
        with pytest.raises(mqlite.InvalidArgument):
            mq.share_consumer("sg", "t", **kwargs)
    with pytest.raises(mqlite.InvalidTopicName):
        mq.share_consumer("sg", "bad topic")
    with pytest.raises(mqlite.InvalidTopicName):
        mq.share_consumer("sg", "t", dead_letter_topic="bad topic")
    with pytest.raises(TypeError):
        mq.share_consumer("sg", 5)  # type: ignore[arg-type]
    sc = mq.share_consumer("sg", max_deliveries=None)  # no limit; nothing subscribed
    assert sc.poll(timeout=0) is None
    # Members of a group in one process agree on its settings.
    with pytest.raises(mqlite.InvalidArgument):
        mq.share_consumer("sg", max_deliveries=3)
    sc.subscribe("t")
    m = sc.poll(timeout=5)
    assert m is not None
    with pytest.raises(TypeError):
        sc.ack("not a message")  # type: ignore[arg-type]
    with pytest.raises(mqlite.InvalidArgument):
        m.release(delay_ms=-5)
    with pytest.raises(mqlite.InvalidArgument):
        sc.poll(timeout=-1)
    sc.close()


def test_closed_consumer_raises_closed(mq: mqlite.Broker) -> None:
    fill(mq)
    sc = mq.share_consumer("sg", "t")
    m = sc.poll(timeout=5)
    assert m is not None
    sc.close()
    sc.close()  # twice is fine
    assert sc.closed
    for call in (lambda: sc.poll(timeout=0), lambda: sc.ack(m), m.ack, lambda: m.release(), lambda: sc.subscribe("t")):
        with pytest.raises(mqlite.Closed) as info:
            call()
        assert info.value.code == 5 and "closed" in str(info.value)
    assert list(sc) == []
    assert isinstance(sc.stats(), mqlite.ShareConsumerStats)
    with pytest.raises(mqlite.Closed):
        with sc:
            pass
    # close() gave the message back: another member gets it again.
    other = mq.share_consumer("sg", "t")
    again = other.poll(timeout=5)
    assert again is not None and key(again) == key(m) and again.delivery_count == 2
    mq.close()
    assert other.closed
    with pytest.raises(mqlite.Closed):
        other.poll(timeout=0)
    with pytest.raises(mqlite.Closed):
        again.ack()


CHILD = r"""
import sys, time
import mqlite

mq = mqlite.open(sys.argv[1], prefault=False)
sc = mq.share_consumer("g", "t", commit_acks=1, max_poll_records=8)
while True:
    m = sc.poll(10)
    if m is None:
        break
    print("D", m.partition, m.offset, m.delivery_count, flush=True)
    m.ack()
    print("A", m.partition, m.offset, flush=True)
    time.sleep(0.003)
"""

PARTITIONS = 2
PER_PARTITION = 150


def test_kill_9_acked_never_again_every_message_at_least_once(data_dir: Path) -> None:
    with open_broker(data_dir) as mq:
        fill(mq, partitions=PARTITIONS, per_partition=PER_PARTITION)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(data_dir)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    lines: list[list[str]] = []
    acked = 0
    deadline = time.monotonic() + 60
    try:
        while acked < 60:  # killed mid-way
            assert time.monotonic() < deadline, lines[-5:]
            line = child.stdout.readline()
            assert line, f"the child ended early: {lines[-5:]}"
            lines.append(line.split())
            acked += line.startswith("A")
    finally:
        os.kill(child.pid, signal.SIGKILL)
    lines.extend(line.split() for line in child.stdout)  # what it wrote before dying
    assert child.wait() == -signal.SIGKILL
    delivered_to_child = {(int(x[1]), int(x[2])) for x in lines if x[0] == "D"}
    acked_by_child = {(int(x[1]), int(x[2])) for x in lines if x[0] == "A"}
    assert len(acked_by_child) < PARTITIONS * PER_PARTITION

    # The child's hold on the group died with it: this process takes over.
    with open_broker(data_dir) as mq:
        with mq.share_consumer("g", "t") as sc:
            resumed = drain(sc)
            sc.ack(resumed)
            assert sc.poll(timeout=0.3) is None
    got = [((m.partition, m.offset), m.delivery_count) for m in resumed]
    again = {k for k, _ in got}
    assert len(again) == len(got)  # each once here
    assert not again & acked_by_child  # acknowledged: never delivered again
    everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    assert acked_by_child | again == everything  # every message delivered (and done)
    for k, count in got:
        # A delivery the killed child got counts.
        if k in delivered_to_child:
            assert count >= 2, (k, count)


def test_a_slow_consumer_gives_back_what_it_did_not_hand_out(mq: mqlite.Broker) -> None:
    """`poll()` hands a poll's messages out while half their lock is left;
    the rest go back to the group uncounted, so `max_deliveries=1` does not
    dead-letter messages the application never saw."""
    fill(mq, per_partition=5)
    sc = mq.share_consumer("sg", "t", lock_duration_ms=200, max_deliveries=1)
    seen = []
    deadline = time.monotonic() + 20
    while len(seen) < 5 and time.monotonic() < deadline:
        m = sc.poll(timeout=0.05)
        if m is None:
            continue
        assert m.delivery_count == 1, key(m)
        time.sleep(0.12)
        m.ack()
        seen.append(m.value)
    assert sorted(seen) == [f"0-{i}".encode() for i in range(5)]
    s = sc.stats()
    assert (s.dead_lettered, s.redelivered, s.acked) == (0, 0, 5)
    assert "t.sg.dlq" not in mq.topics()
    sc.close()
