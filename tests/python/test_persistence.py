"""Data survives close and reopen; offsets continue where they stopped."""

from pathlib import Path

from conftest import drain

import mqlite


def test_reopen_keeps_topics_and_messages(data_dir: Path) -> None:
    with mqlite.open(data_dir, prefault=False) as mq:
        mq.create_topic("orders", partitions=2)
        mq.create_topic("other")
        p = mq.producer()
        for i in range(50):
            p.send("orders", f"v{i}".encode(), key=f"k{i}".encode(), headers={"i": str(i)})
    assert mq.closed

    with mqlite.open(data_dir, prefault=False) as mq:
        assert mq.topics() == ["orders", "other"]
        info = mq.topic("orders")
        assert len(info.partitions) == 2
        assert sum(pi.end_offset for pi in info.partitions) == 50
        c = mq.consumer()
        c.subscribe(["orders"])
        got = drain(c, 50)
        by_value = {m.value: m for m in got}
        for i in range(50):
            m = by_value[f"v{i}".encode()]
            assert m.key == f"k{i}".encode()
            assert m.headers == [("i", str(i).encode())]
            assert m.partition == mqlite.partition_for_key(m.key, 2)
        # New records continue the offsets.
        before = mq.topic("orders").partitions[0].end_offset
        md = mq.producer().send("orders", b"more", partition=0)
        assert md.offset == before


def test_flush_and_acks_all_persist(data_dir: Path) -> None:
    with mqlite.open(data_dir, prefault=False) as mq:
        mq.create_topic("t")
        p = mq.producer(acks="all")
        assert p.acks == "all"
        assert p.send("t", b"durable").offset == 0
        p.flush()
        p.flush(timeout=1.0)
        mq.flush()
    with mqlite.open(data_dir) as mq:
        c = mq.consumer()
        c.assign([("t", 0)])
        msg = c.poll(timeout=5)
        assert msg is not None and msg.value == b"durable"


def test_acks_forms(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    for acks, shown in [(0, 0), (1, 1), (-1, "all"), ("all", "all"), ("1", 1), ("0", 0)]:
        p = mq.producer(acks=acks)
        assert p.acks == shown
        assert p.send("t", b"x").topic == "t"
    assert mq.producer().acks == 1
