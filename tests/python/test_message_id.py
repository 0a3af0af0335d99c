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
