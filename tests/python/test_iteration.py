"""`for msg in consumer` blocks for messages and ends only when closed."""

import threading
import time

import mqlite


def test_iterate_then_close_from_other_thread(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)
    p = mq.producer()
    for i in range(10):
        p.send("t", str(i).encode(), key=str(i).encode())
    c = mq.consumer()
    c.subscribe(["t"])
    seen: list[bytes] = []

    def close_when_done() -> None:
        deadline = time.monotonic() + 5
        while len(seen) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # let the iterator block in its wait
        c.close()

    closer = threading.Thread(target=close_when_done)
    closer.start()
    start = time.monotonic()
    for msg in c:
        assert msg.value is not None
        seen.append(msg.value)
    closer.join()
    assert sorted(seen) == sorted(str(i).encode() for i in range(10))
    assert time.monotonic() - start < 3
    assert c.closed


def test_iteration_ends_when_broker_closes(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    c = mq.consumer()
    c.subscribe("t")
    threading.Timer(0.1, mq.close).start()
    assert list(c) == []
    assert c.closed


def test_iter_returns_self(mq: mqlite.Broker) -> None:
    c = mq.consumer()
    assert iter(c) is c
