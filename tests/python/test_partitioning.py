"""Keys land on Kafka's murmur2 partition, and stay there."""

import mqlite

# Kafka's own vectors (UtilsTest.testMurmur2).
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


def test_murmur2_matches_kafka() -> None:
    for key, want in KAFKA_VECTORS:
        assert mqlite.murmur2(key) == want


def test_partition_for_key_formula() -> None:
    for n in (1, 2, 3, 4, 7, 16, 100):
        assert mqlite.partition_for_key(b"21", n) == (-973932308 & 0x7FFFFFFF) % n
        for key, h in KAFKA_VECTORS:
            assert mqlite.partition_for_key(key, n) == (h & 0x7FFFFFFF) % n
    assert mqlite.partition_for_key("21", 7) == mqlite.partition_for_key(b"21", 7)


def test_partition_for_key_rejects_zero_partitions() -> None:
    import pytest

    with pytest.raises(mqlite.InvalidArgument):
        mqlite.partition_for_key(b"k", 0)
    with pytest.raises(mqlite.InvalidArgument):
        mqlite.partition_for_key(b"k", -1)
    with pytest.raises(TypeError):
        mqlite.partition_for_key(123, 4)  # type: ignore[arg-type]


def test_send_uses_key_partition_and_is_stable(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=6)
    p = mq.producer()
    for i in range(200):
        key = f"user-{i % 40}".encode()
        md = p.send("t", b"v", key=key)
        assert md.partition == mqlite.partition_for_key(key, 6)
    c = mq.consumer()
    c.subscribe("t")
    seen: dict[bytes, set[int]] = {}
    for _ in range(200):
        msg = c.poll(timeout=5)
        assert msg is not None and msg.key is not None
        seen.setdefault(msg.key, set()).add(msg.partition)
    assert len(seen) == 40
    assert all(len(parts) == 1 for parts in seen.values())


def test_no_key_spreads_round_robin(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=4)
    p = mq.producer(partitioner="round_robin")
    parts = [p.send("t", b"v").partition for _ in range(8)]
    assert sorted(parts) == [0, 0, 1, 1, 2, 2, 3, 3]
