"""Message ids: ``Message.id`` and ``RecordMetadata.id`` as
``"<topic>:<partition>:<offset>"``, and ``Consumer.seek(id)``."""

from __future__ import annotations

import pytest

import mqlite


def test_ids_of_sent_and_consumed_messages_match_and_seek_goes_there(mq: mqlite.Broker) -> None:
    mq.create_topic("ord.e-r_s", partitions=2)
    mq.create_topic("other")
    p = mq.producer()
    sent = [p.send("ord.e-r_s", bytes([i]), partition=1) for i in range(4)]
    assert [m.id for m in sent] == [f"ord.e-r_s:1:{i}" for i in range(4)]
    c = mq.consumer()
    c.assign([("ord.e-r_s", 1)])
    got = []
    while len(got) < 4:
        m = c.poll(1.0)
        assert m is not None
        got.append(m)
    assert [m.id for m in got] == [m.id for m in sent]
    c.seek(sent[2].id)
    m = c.poll(1.0)
    assert m is not None and m.id == sent[2].id and m.value == bytes([2])
    c.seek_to_id(sent[0].id)
    m = c.poll(1.0)
    assert m is not None and m.offset == 0
    # The old form still works.
    c.seek("ord.e-r_s", 1, 3)
    m = c.poll(1.0)
    assert m is not None and m.offset == 3
    # Bad ids and unassigned partitions: InvalidArgument, as seek gives.
    for bad in ("", "ord.e-r_s", "ord.e-r_s:1", "ord.e-r_s:1:x", "ord.e-r_s:01:1", "a b:1:1"):
        with pytest.raises(mqlite.InvalidArgument):
            c.seek(bad)
    with pytest.raises(mqlite.InvalidArgument) as by_id:
        c.seek("other:0:0")
    with pytest.raises(mqlite.InvalidArgument) as by_seek:
        c.seek("other", 0, 0)
    assert str(by_id.value) == str(by_seek.value)
    with pytest.raises(TypeError):
        c.seek("ord.e-r_s", 1)  # type: ignore[call-overload]
    with pytest.raises(mqlite.OffsetOutOfRange):
        c.seek("ord.e-r_s:1:99")


def test_an_unknown_offset_has_no_id(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer(acks=0)
    md = p.send("t", b"v")
    assert md.offset is None and md.id is None


def test_message_id_objects_parse_print_and_compare() -> None:
    mid = mqlite.MessageId.parse("a.b_c-9:4294967295:18446744073709551615")
    assert (mid.topic, mid.partition, mid.offset) == ("a.b_c-9", 4294967295, 18446744073709551615)
    assert str(mid) == "a.b_c-9:4294967295:18446744073709551615"
    assert mqlite.MessageId("t", 3, 7) == mqlite.MessageId.parse("t:3:7")
    assert len({mqlite.MessageId("t", 3, 7), mqlite.MessageId.parse("t:3:7")}) == 1
    assert repr(mqlite.MessageId("t", 0, 0)) == "MessageId('t:0:0')"
    for bad in ("", "t:0", "t:0:0:0", "t:-1:0", "t:0:01", ":0:0", "t:4294967296:0"):
        with pytest.raises(mqlite.InvalidArgument):
            mqlite.MessageId.parse(bad)
    for topic, partition, offset in (("a b", 0, 0), ("t:x", 0, 0), ("t", -1, 0), ("t", 0, -1), ("", 0, 0)):
        with pytest.raises(mqlite.InvalidArgument):
            mqlite.MessageId(topic, partition, offset)


def test_a_message_id_object_names_the_message(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    md = mq.producer().send("t", b"v")
    c = mq.consumer()
    c.assign([("t", 0)])
    m = c.poll(1.0)
    assert m is not None and md.id == m.id
    mid = mqlite.MessageId.parse(m.id)
    assert (mid.topic, mid.partition, mid.offset) == (m.topic, m.partition, m.offset)
    c.seek(str(mid))
    again = c.poll(1.0)
    assert again is not None and again.offset == m.offset
