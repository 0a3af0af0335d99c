"""Retention deletes old segments; consumers restart at the new start."""

import time

import mqlite


def test_retention_bytes_with_tiny_segments(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=4096, retention_bytes=8192)
    p = mq.producer()
    for i in range(400):
        p.send("t", b"%05d" % i + b"x" * 95)
    # Retention also runs when a segment rolls; enforce_retention() finishes
    # whatever is left.
    assert mq.enforce_retention() >= 0
    info = mq.topic("t").partitions[0]
    assert info.end_offset == 400
    assert info.start_offset > 0
    assert info.size_bytes <= 8192 + 4096  # the limit plus the active segment
    assert mq.enforce_retention() == 0

    c = mq.consumer(auto_offset_reset="earliest")
    c.assign([("t", 0)])
    assert c.position("t", 0) == info.start_offset
    first = c.poll(timeout=5)
    assert first is not None and first.offset == info.start_offset
    assert first.value is not None and first.value.startswith(b"%05d" % info.start_offset)


def test_enforce_retention_by_age(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=4096, retention_ms=1000)
    p = mq.producer()
    old = int(time.time() * 1000) - 700  # not yet expired while writing
    for i in range(200):
        p.send("t", b"x" * 100, timestamp=old)
    before = mq.topic("t").partitions[0]
    assert before.segments > 3 and before.start_offset == 0
    time.sleep(0.5)  # now 1.2 s old: every closed segment has expired

    deleted = mq.enforce_retention()
    after = mq.topic("t").partitions[0]
    assert deleted == before.segments - 1  # all but the active segment
    assert after.segments == 1
    assert after.start_offset > 0 and after.end_offset == 200

    c = mq.consumer()
    c.subscribe("t")
    msg = c.poll(timeout=5)
    assert msg is not None and msg.offset == after.start_offset


def test_no_retention_keeps_everything(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=4096)
    p = mq.producer()
    for _ in range(200):
        p.send("t", b"x" * 100)
    assert mq.enforce_retention() == 0
    info = mq.topic("t").partitions[0]
    assert info.start_offset == 0 and info.segments > 3


def test_retention_respects_groups(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=4096, retention_ms=1, retention_respects_groups=True)
    assert mq.topic("t").retention_respects_groups is True
    mq.create_topic("plain")
    assert mq.topic("plain").retention_respects_groups is False

    p = mq.producer()
    for _ in range(10):
        p.send("t", b"x" * 100)
    c = mq.consumer(group_id="g", enable_auto_commit=False, auto_offset_reset="earliest")
    c.subscribe("t")
    c.commit(offsets=[("t", 0, 5)])
    for _ in range(300):  # many segments, all older than retention_ms soon
        p.send("t", b"x" * 100)
    time.sleep(0.05)
    mq.enforce_retention()
    info = mq.topic("t").partitions[0]
    assert info.segments > 3
    assert info.start_offset <= 5
    c.close()
