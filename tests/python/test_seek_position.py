"""seek() and position() agree with what poll() hands out, despite prefetching."""

from conftest import drain

import mqlite


def fill(mq: mqlite.Broker, n: int = 100) -> None:
    mq.create_topic("t", partitions=2)
    p = mq.producer()
    for i in range(n):
        p.send("t", str(i).encode(), partition=i % 2)


def test_position_tracks_handed_out_messages(mq: mqlite.Broker) -> None:
    fill(mq)
    c = mq.consumer(max_poll_records=500)
    c.assign([("t", 0), ("t", 1)])
    assert c.position("t", 0) == 0
    msg = c.poll(timeout=5)
    assert msg is not None
    # The engine prefetched more, but the position is just after this one.
    assert c.position("t", msg.partition) == msg.offset + 1
    other = 1 - msg.partition
    assert c.position("t", other) == 0


def test_seek_back_and_forward(mq: mqlite.Broker) -> None:
    fill(mq)
    c = mq.consumer()
    c.assign([("t", 0)])
    first = drain(c, 5)
    assert [m.offset for m in first] == [0, 1, 2, 3, 4]
    c.seek("t", 0, 40)
    assert c.position("t", 0) == 40
    msg = c.poll(timeout=5)
    assert msg is not None and (msg.offset, msg.value) == (40, b"80")
    c.seek("t", 0, 2)
    msg = c.poll(timeout=5)
    assert msg is not None and msg.offset == 2
    c.seek("t", 0, 50)  # the end is a valid position
    assert c.poll(timeout=0) is None


def test_reassign_keeps_unreturned_messages(mq: mqlite.Broker) -> None:
    fill(mq)
    c = mq.consumer()
    c.assign([("t", 0), ("t", 1)])
    msg = c.poll(timeout=5)
    assert msg is not None
    # Reassigning must not lose what was prefetched but not handed out.
    c.assign([("t", 0), ("t", 1)])
    rest = drain(c, 99)
    offsets = {(m.partition, m.offset) for m in rest} | {(msg.partition, msg.offset)}
    assert len(offsets) == 100


def test_consume_batches(mq: mqlite.Broker) -> None:
    fill(mq)
    c = mq.consumer(max_poll_records=7)
    c.subscribe("t")
    batch = c.consume(30, timeout=5)
    assert len(batch) == 30  # filled across several engine fetches
    rest = c.consume(1000, timeout=5)
    assert len(rest) == 70
    assert c.consume(10, timeout=0.01) == []
    per_partition: dict[int, list[int]] = {}
    for m in batch + rest:
        per_partition.setdefault(m.partition, []).append(m.offset)
    assert per_partition == {0: list(range(50)), 1: list(range(50))}


def test_offset_reset_error(mq: mqlite.Broker) -> None:
    fill(mq, 4)
    c = mq.consumer(auto_offset_reset="error")
    c.assign([("t", 0)])
    try:
        c.position("t", 0)
    except mqlite.OffsetOutOfRange:
        pass  # no stored position: an error, as asked
    c.seek("t", 0, 1)
    msg = c.poll(timeout=5)
    assert msg is not None and msg.offset == 1


def test_failed_seek_changes_nothing(mq: mqlite.Broker) -> None:
    mq.create_topic("one", partitions=1)
    p = mq.producer()
    p.send_batch("one", [str(i).encode() for i in range(100)], partition=0)
    c = mq.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.assign([("one", 0)])
    first = c.poll(timeout=5)
    assert first is not None and first.offset == 0
    for seek in (lambda: c.seek("one", 0, 1000), lambda: c.seek("one", 0, 101)):
        try:
            seek()
        except mqlite.OffsetOutOfRange:
            pass
        else:
            raise AssertionError("seek past the end succeeded")
        assert c.position("one", 0) == 1
    rest = drain(c, 99)
    assert [m.offset for m in rest] == list(range(1, 100))
    c.commit()
    assert c.committed()[("one", 0)][0] == 100
