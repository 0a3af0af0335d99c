"""Ctrl-C interrupts a poll that waits (with no timeout or a long one)."""

import _thread
import signal
import threading
import time
from typing import Iterator

import pytest

import mqlite


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt, as in an interactive program.

    A process started in the background by a shell without job control
    inherits SIGINT ignored, and Python then keeps it ignored, so
    ``_thread.interrupt_main()`` would do nothing."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_keyboard_interrupt_stops_poll(mq: mqlite.Broker, sigint_raises: None) -> None:
    mq.create_topic("t")
    c = mq.consumer()
    c.subscribe("t")
    timer = threading.Timer(0.2, _thread.interrupt_main)
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        # Without a timeout in practice: a lost interrupt fails the test
        # instead of hanging it.
        c.poll(timeout=60)
    timer.join()
    assert time.monotonic() - start < 2
    # The consumer still works afterwards.
    mq.producer().send("t", b"after")
    msg = c.poll(timeout=5)
    assert msg is not None and msg.value == b"after"
