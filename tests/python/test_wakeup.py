"""wakeup() from another thread ends a blocked poll at once."""

from __future__ import annotations

import threading
import time
from typing import Any

from groups_util import SEG

import mqlite


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    return t, out


def test_wakeup_ends_a_blocked_poll(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer("g")
    c.subscribe("t")
    start = time.monotonic()
    t, out = _in_thread(lambda: c.poll(None))  # would wait forever
    time.sleep(0.2)
    c.wakeup()
    t.join(5)
    assert not t.is_alive()
    assert out == [None]
    assert time.monotonic() - start < 1.5
    # Polls go on normally afterwards.
    mq.producer().send("t", b"x")
    m = c.poll(5)
    assert m is not None and m.value == b"x"


def test_wakeup_ends_consume_and_iteration(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer()
    c.subscribe("t")
    t, out = _in_thread(lambda: c.consume(10, timeout=30))
    time.sleep(0.1)
    c.wakeup()
    t.join(5)
    assert out == [[]]
    mq.producer().send("t", b"a")
    t, out = _in_thread(lambda: [m.value for m in c])
    time.sleep(0.2)
    c.wakeup()
    t.join(5)
    assert out == [[b"a"]]


def test_wakeup_before_poll_makes_the_next_wait_return(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer("g")
    c.subscribe("t")
    c.wakeup()
    start = time.monotonic()
    assert c.poll(10) is None
    assert time.monotonic() - start < 0.5
    # Only once.
    start = time.monotonic()
    assert c.poll(0.2) is None
    assert time.monotonic() - start >= 0.15


def test_close_from_another_thread_ends_a_blocked_poll_at_once(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer("g")
    c.subscribe("t")
    t, out = _in_thread(lambda: list(c))
    time.sleep(0.1)
    start = time.monotonic()
    c.close()
    t.join(5)
    assert out == [[]]
    assert time.monotonic() - start < 0.5
