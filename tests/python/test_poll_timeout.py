"""poll() waits about as long as asked, and no longer."""

import time

import mqlite


def test_poll_timeout_returns_none_in_time(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)
    c = mq.consumer()
    c.subscribe("t")
    for timeout in (0.05, 0.25):
        start = time.monotonic()
        assert c.poll(timeout=timeout) is None
        took = time.monotonic() - start
        assert timeout * 0.9 <= took < timeout + 0.5, took


def test_poll_zero_does_not_wait(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    c = mq.consumer()
    c.subscribe("t")
    start = time.monotonic()
    assert c.poll(0) is None
    assert c.consume(10, timeout=0) == []
    assert time.monotonic() - start < 0.05


def test_poll_returns_at_once_when_data_is_there(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    mq.producer().send("t", b"v")
    c = mq.consumer()
    c.subscribe("t")
    start = time.monotonic()
    msg = c.poll(timeout=10)
    assert msg is not None and msg.value == b"v"
    assert time.monotonic() - start < 1


def test_poll_without_assignment_times_out(mq: mqlite.Broker) -> None:
    c = mq.consumer()
    assert c.assignment() == []
    start = time.monotonic()
    assert c.poll(timeout=0.1) is None
    assert 0.09 <= time.monotonic() - start < 0.6


def test_latest_starts_at_the_end(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer()
    p.send("t", b"old")
    c = mq.consumer(auto_offset_reset="latest")
    c.subscribe("t")
    assert c.position("t", 0) == 1
    assert c.poll(timeout=0.05) is None
    p.send("t", b"new")
    msg = c.poll(timeout=5)
    assert msg is not None and msg.value == b"new"
