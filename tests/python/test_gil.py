"""A poll that waits releases the GIL, and a send from another thread wakes it."""

import threading
import time

import mqlite


def test_other_thread_runs_while_poll_waits(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    c = mq.consumer()
    c.subscribe("t")
    counter = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal counter
        while not stop.is_set():
            counter += 1

    # Rust code holding the GIL never hands it over: a poll that kept it
    # would stop the spinner for its whole wait.
    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.01)
        before = counter
        assert c.poll(timeout=0.3) is None
        during = counter - before
    finally:
        stop.set()
        t.join()
    assert during > 10_000, during


def test_send_from_thread_wakes_blocked_poll(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=3)
    c = mq.consumer()
    c.subscribe("t")
    p = mq.producer()

    def later() -> None:
        time.sleep(0.2)
        p.send("t", b"wake", key=b"k")

    t = threading.Thread(target=later)
    start = time.monotonic()
    t.start()
    msg = c.poll(timeout=10)  # None = forever would also do; 10 s bounds a failure
    took = time.monotonic() - start
    t.join()
    assert msg is not None and msg.value == b"wake"
    assert 0.15 <= took < 2, took


def test_poll_forever_woken_by_send(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    c = mq.consumer()
    c.subscribe("t")
    p = mq.producer(acks="all")
    t = threading.Timer(0.1, lambda: p.send("t", b"x"))
    t.start()
    msg = c.poll()  # no timeout
    t.join()
    assert msg is not None and msg.value == b"x"


def test_acks_all_sends_from_threads(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)
    p = mq.producer(acks="all")
    errors: list[BaseException] = []

    def send(n: int) -> None:
        try:
            for i in range(20):
                p.send("t", f"{n}-{i}".encode(), key=str(n))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=send, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(pi.end_offset for pi in mq.topic("t").partitions) == 80
