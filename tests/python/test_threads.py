"""Objects may be shared between threads without crashing."""

import threading

import mqlite


def test_consumer_shared_between_threads(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=4)
    p = mq.producer()
    n = 2000
    for i in range(n):
        p.send("t", str(i).encode(), key=str(i).encode())
    c = mq.consumer()
    c.subscribe("t")
    got: list[list[bytes]] = [[] for _ in range(4)]
    errors: list[BaseException] = []

    def read(slot: int) -> None:
        try:
            while True:
                batch = c.consume(37, timeout=0.2)
                if not batch:
                    return
                got[slot].extend(m.value for m in batch if m.value is not None)
                c.position("t", 0)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    everything = sorted(v for slot in got for v in slot)
    assert everything == sorted(str(i).encode() for i in range(n))


def test_consumer_used_from_another_thread(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    c = mq.consumer()
    c.subscribe("t")
    mq.producer().send("t", b"v")
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(c.poll(timeout=5)))
    t.start()
    t.join()
    assert isinstance(result[0], mqlite.Message)
    # And again from this thread, which has its own wait state in the engine.
    assert c.poll(timeout=0.05) is None


def test_producer_shared_between_threads(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=3)
    p = mq.producer()

    def send() -> None:
        for i in range(500):
            p.send("t", b"v", key=str(i).encode())

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(pi.end_offset for pi in mq.topic("t").partitions) == 2000
