"""Records come back exactly as sent: keys, values, headers, tombstones."""

from conftest import drain

import mqlite


def test_values_keys_headers_round_trip(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer()
    sent = [
        p.send("t", b"plain"),
        p.send("t", b"keyed", key=b"k1"),
        p.send("t", b"with headers", key=b"k2", headers=[("a", b"1"), ("b", b"2"), ("a", b"3")]),
        p.send("t", None, key=b"gone"),  # tombstone
        p.send("t", b""),
        p.send("t", bytes(range(256)) * 10, key=b"\x00\xff"),
    ]
    assert [md.offset for md in sent] == list(range(6))
    assert all(md.topic == "t" and md.partition == 0 for md in sent)

    c = mq.consumer()
    c.subscribe(["t"])
    got = drain(c, 6)
    assert [m.offset for m in got] == list(range(6))
    assert [m.value for m in got] == [
        b"plain",
        b"keyed",
        b"with headers",
        None,
        b"",
        bytes(range(256)) * 10,
    ]
    assert [m.key for m in got] == [None, b"k1", b"k2", b"gone", None, b"\x00\xff"]
    assert got[2].headers == [("a", b"1"), ("b", b"2"), ("a", b"3")]
    assert got[0].headers == []
    assert all(m.topic == "t" and m.partition == 0 for m in got)
    assert [m.timestamp for m in got] == [md.timestamp for md in sent]


def test_accepted_value_types(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer()
    p.send("t", "text é", key="clé")
    p.send("t", bytearray(b"bytearray"), key=bytearray(b"ba"))
    p.send("t", memoryview(b"xxmemoryviewxx")[2:-2], key=memoryview(b"mv"))
    p.send("t", b"h", headers={"str": "text", "bytes": b"raw", "ba": bytearray(b"x")})
    c = mq.consumer()
    c.assign([("t", 0)])
    a, b, m, h = drain(c, 4)
    assert (a.value, a.key) == ("text é".encode(), "clé".encode())
    assert (b.value, b.key) == (b"bytearray", b"ba")
    assert (m.value, m.key) == (b"memoryview", b"mv")
    assert h.headers == [("str", b"text"), ("bytes", b"raw"), ("ba", b"x")]


def test_explicit_timestamp_and_partition(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=3)
    p = mq.producer()
    md = p.send("t", b"v", partition=2, timestamp=1_234_567)
    assert (md.partition, md.offset, md.timestamp) == (2, 0, 1_234_567)
    c = mq.consumer()
    c.assign([("t", 2)])
    msg = c.poll(timeout=5)
    assert msg is not None
    assert (msg.partition, msg.timestamp, msg.value) == (2, 1_234_567, b"v")


def test_message_helpers(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer()
    p.send("t", b"", key=b"k")
    p.send("t", b"x" * 100)
    c = mq.consumer()
    c.assign([("t", 0)])
    empty, long = drain(c, 2)
    assert len(empty) == 0 and len(long) == 100
    assert bool(empty)  # present even though its value is empty
    assert "offset=0" in repr(empty) and "key=b'k'" in repr(empty)
    assert repr(long).endswith("...)")
    md = p.send("t", b"z")
    assert repr(md) == f"RecordMetadata(topic='t', partition=0, offset=2, timestamp={md.timestamp})"
