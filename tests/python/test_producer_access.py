"""Access modes of named producers (``access_mode=``) and automatic
numbering (``initial_sequence=``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import mqlite


def test_a_second_exclusive_producer_is_refused_and_changes_nothing(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    a = mq.producer("x", access_mode="exclusive")
    epoch = a.epoch
    with pytest.raises(mqlite.ProducerBusy) as info:
        mq.producer("x", access_mode="exclusive")
    assert info.value.code == 404
    for mode in ("shared", "exclusive_with_fencing"):
        with pytest.raises(mqlite.ProducerBusy):
            mq.producer("x", access_mode=mode)
    with pytest.raises(mqlite.Timeout):
        mq.producer("x", access_mode="wait_for_exclusive", max_block_ms=50)
    a.send("t", b"still works")
    assert a.epoch == epoch
    a.close()
    b = mq.producer("x", access_mode="exclusive")
    assert b.epoch == epoch + 1
    b.send("t", b"v")


def test_wait_for_exclusive_gets_the_name_when_the_holder_closes(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    a = mq.producer("x", access_mode="exclusive")
    got: list[mqlite.Producer] = []

    def wait() -> None:
        got.append(mq.producer("x", access_mode="wait_for_exclusive", max_block_ms=30000))

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)
    assert not got, "got the name while the exclusive producer was open"
    a.send("t", b"a")  # the waiter holds no GIL
    a.close()
    t.join(30)
    assert got and got[0].epoch == a.epoch + 1
    got[0].send("t", b"b")


def test_shared_producers_send_together_and_dedup_across(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    a = mq.producer("s", access_mode="shared")
    b = mq.producer("s", access_mode="shared")
    assert (a.producer_id, a.epoch) == (b.producer_id, b.epoch)
    first = a.send("t", b"q", sequence=4)
    again = b.send("t", b"q", sequence=4)
    assert not first.duplicate and again.duplicate and again.offset == first.offset
    a.send("t", b"1")
    b.send("t", b"2")
    a.send("t", b"3")
    with pytest.raises(mqlite.ProducerBusy):
        mq.producer("s", access_mode="exclusive")


def test_bad_access_settings_raise_invalid_argument(mq: mqlite.Broker) -> None:
    for kwargs in (
        {"name": "n", "access_mode": "Exclusive"},
        {"name": "n", "access_mode": "nope"},
        {"access_mode": "exclusive"},
        {"initial_sequence": 0},
        {"name": "n", "initial_sequence": -1},
        {"name": "n", "access_mode": "shared", "initial_sequence": 0},
    ):
        with pytest.raises(mqlite.InvalidArgument):
            mq.producer(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        mq.producer("n", access_mode=1)  # type: ignore[arg-type]
    # Nothing was claimed by the refused ones.
    mq.producer("n", access_mode="exclusive")


def test_numbering_continues_after_restarts(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with mqlite.open(data) as mq:
        mq.create_topic("t", partitions=2)
        p = mq.producer("n", initial_sequence=100)
        assert p.next_auto_sequence() == 100
        for i in range(3):
            assert not p.send("t", b"v", partition=i % 2).duplicate
        assert p.last_sequence() == 102
        p.close()
        p = mq.producer("n", initial_sequence=0)  # lower: after the last
        assert p.next_auto_sequence() == 103
        p.send("t", b"v")
        p.close()
        p = mq.producer("n", initial_sequence=1000)  # higher: from there
        assert p.next_auto_sequence() == 1000
        p.send("t", b"v")
        # An explicit sequence moves the counter past it.
        p.send("t", b"v", sequence=2000)
        assert p.next_auto_sequence() == 2001
        assert p.send("t", b"v", sequence=5).duplicate
        assert p.next_auto_sequence() == 2001
        p.close()
    with mqlite.open(data) as mq:
        p = mq.producer("n", initial_sequence=0)
        assert p.next_auto_sequence() == 2001
        p.send("t", b"v")
        assert p.last_sequence() == 2001
        assert sum(part.end_offset for part in mq.topic("t").partitions) == 7
        p.close()
        assert mq.producer("n").next_auto_sequence() is None
