"""topic() describes config and per-partition state; topics can grow and go."""

import mqlite


def test_topic_info_config_and_stats(mq: mqlite.Broker) -> None:
    mq.create_topic(
        "t",
        partitions=3,
        segment_bytes=1 << 20,
        retention_ms=60_000,
        retention_bytes=10 << 20,
        max_message_bytes=4096,
    )
    p = mq.producer()
    for i in range(30):
        p.send("t", b"x" * 100, partition=i % 3)
    info = mq.topic("t")
    assert isinstance(info, mqlite.TopicInfo)
    assert info.name == "t"
    assert info.segment_bytes == 1 << 20
    assert info.retention_ms == 60_000
    assert info.retention_bytes == 10 << 20
    assert info.max_message_bytes == 4096
    assert info.index_interval_bytes > 0
    assert [pi.partition for pi in info.partitions] == [0, 1, 2]
    for pi in info.partitions:
        assert isinstance(pi, mqlite.PartitionInfo)
        assert (pi.start_offset, pi.end_offset) == (0, 10)
        assert pi.size_bytes >= 10 * 100
        assert pi.segments == 1
        assert (pi.truncated_bytes, pi.dropped_batches, pi.torn_tails, pi.corruptions) == (0, 0, 0, 0)
    assert "partitions=3" in repr(info)
    assert "end_offset=10" in repr(info.partitions[0])


def test_defaults(mq: mqlite.Broker) -> None:
    mq.create_topic("d")
    info = mq.topic("d")
    assert len(info.partitions) == 1
    assert info.retention_ms is None and info.retention_bytes is None
    assert info.segment_bytes == 64 << 20
    assert info.max_message_bytes == 1 << 20


def test_add_and_delete(mq: mqlite.Broker) -> None:
    mq.create_topic("a", partitions=2)
    mq.create_topic("b")
    assert mq.topics() == ["a", "b"]
    mq.producer().send("a", b"v", partition=1)
    mq.add_partitions("a", 5)
    info = mq.topic("a")
    assert len(info.partitions) == 5
    assert info.partitions[1].end_offset == 1
    assert mq.producer().send("a", b"v", partition=4).offset == 0
    mq.delete_topic("a")
    assert mq.topics() == ["b"]
    mq.create_topic("a")  # the name is free again, and empty
    assert mq.topic("a").partitions[0].end_offset == 0


def test_subscription_follows_added_partitions(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=1)
    c = mq.consumer()
    c.subscribe("t")
    assert c.assignment() == [("t", 0)]
    mq.add_partitions("t", 3)
    mq.producer().send("t", b"p2", partition=2)
    msg = c.poll(timeout=5)
    assert msg is not None and (msg.partition, msg.value) == (2, b"p2")
    assert sorted(c.assignment()) == [("t", 0), ("t", 1), ("t", 2)]


def test_offset_for_timestamp(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer()
    for i in range(10):
        p.send("t", b"v", timestamp=1000 + i * 10)
    assert mq.offset_for_timestamp("t", 0, 0) == 0
    assert mq.offset_for_timestamp("t", 0, 1000) == 0
    assert mq.offset_for_timestamp("t", 0, 1035) == 4
    assert mq.offset_for_timestamp("t", 0, 1090) == 9
    assert mq.offset_for_timestamp("t", 0, 5000) is None


def test_flushes_count_acks_all_flushes(mq: mqlite.Broker) -> None:
    mq.create_topic("f", partitions=2)
    assert [pi.flushes for pi in mq.topic("f").partitions] == [0, 0]
    p = mq.producer(acks="all")
    for _ in range(3):
        p.send("f", b"durable", partition=1)
    before = mq.topic("f").partitions[1].flushes
    assert 1 <= before <= 3
    assert mq.topic("f").partitions[0].flushes == 0
    p.send("f", b"one more", partition=1)
    assert mq.topic("f").partitions[1].flushes == before + 1
    assert "flushes=" in repr(mq.topic("f").partitions[1])
