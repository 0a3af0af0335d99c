"""Ctrl-C interrupts a poll that waits with no timeout."""

import _thread
import threading
import time

import pytest

import mqlite


def test_keyboard_interrupt_stops_poll(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    c = mq.consumer()
    c.subscribe("t")
    timer = threading.Timer(0.2, _thread.interrupt_main)
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        c.poll()
    timer.join()
    assert time.monotonic() - start < 2
    # The consumer still works afterwards.
    mq.producer().send("t", b"after")
    msg = c.poll(timeout=5)
    assert msg is not None and msg.value == b"after"
