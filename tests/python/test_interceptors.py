"""Interceptors: on_send may change records; on_acknowledgement sees every
outcome; one that raises is logged and skipped, never losing the record."""

from __future__ import annotations

import logging
from typing import Optional

import pytest

import mqlite

from conftest import drain


class Tagger:
    def __init__(self, tag: bytes) -> None:
        self.tag = tag
        self.sent = 0

    def on_send(self, record: mqlite.ProducerRecord) -> mqlite.ProducerRecord:
        self.sent += 1
        return record.replace(value=(record.value or b"") + self.tag, headers=[("tag", self.tag)])


class Recorder:
    def __init__(self) -> None:
        self.acks: list[tuple[Optional[mqlite.Error], Optional[mqlite.RecordMetadata]]] = []

    def on_acknowledgement(
        self, err: Optional[mqlite.Error], metadata: Optional[mqlite.RecordMetadata]
    ) -> None:
        self.acks.append((err, metadata))


def read(mq: mqlite.Broker, n: int) -> list[mqlite.Message]:
    c = mq.consumer()
    c.subscribe("t")
    return drain(c, n)


def test_on_send_changes_records_in_order(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    a, b, rec = Tagger(b"+a"), Tagger(b"+b"), Recorder()
    p = mq.producer(interceptors=[a, b, rec])
    md = p.send("t", b"one")
    p.produce("t", b"two")
    assert p.send_batch("t", [b"three", b"four"]) == 2
    p.flush()
    msgs = read(mq, 4)
    assert [m.value for m in msgs] == [b"one+a+b", b"two+a+b", b"three+a+b", b"four+a+b"]
    assert all(m.headers == [("tag", b"+b")] for m in msgs)
    assert a.sent == b.sent == 4
    assert [m.offset for _, m in rec.acks if m is not None] == [0, 1, 2, 3]
    assert all(e is None for e, _ in rec.acks)
    assert md.offset == 0


def test_on_send_can_reroute_and_keep(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    mq.create_topic("u", partitions=2)

    class Router:
        def on_send(self, record: mqlite.ProducerRecord) -> Optional[mqlite.ProducerRecord]:
            if record.value == b"keep":
                return None  # unchanged
            return mqlite.ProducerRecord("u", record.value, partition=1)

    p = mq.producer(interceptors=[Router()])
    assert p.send("t", b"keep").topic == "t"
    md = p.send("t", b"move")
    assert (md.topic, md.partition) == ("u", 1)


def test_acknowledgements_served_on_poll_with_errors(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    rec = Recorder()
    p = mq.producer(interceptors=[rec], linger_ms=60_000)
    p.produce("t", b"x")
    assert rec.acks == []
    p.flush()
    assert len(rec.acks) == 1
    with pytest.raises(mqlite.UnknownPartition):
        p.send("t", b"x", partition=7)
    assert p.poll() == 1
    err, md = rec.acks[-1]
    assert isinstance(err, mqlite.UnknownPartition) and err.code == 200 and md is None


def test_raising_interceptors_are_logged_and_skipped(
    mq: mqlite.Broker, caplog: pytest.LogCaptureFixture
) -> None:
    mq.create_topic("t")

    class Broken:
        def on_send(self, record: mqlite.ProducerRecord) -> mqlite.ProducerRecord:
            raise ValueError("on_send broke")

        def on_acknowledgement(self, err: object, metadata: object) -> None:
            raise ValueError("on_acknowledgement broke")

    class WrongType:
        def on_send(self, record: mqlite.ProducerRecord) -> object:
            return "not a record"

    rec, tag = Recorder(), Tagger(b"!")
    got: list[object] = []
    p = mq.producer(interceptors=[Broken(), WrongType(), tag, rec])
    with caplog.at_level(logging.WARNING, logger="mqlite"):
        p.send("t", b"a")
        p.produce("t", b"b", on_delivery=lambda e, m: got.append(m))
        p.send_batch("t", [b"c"])
        p.flush()
    assert [m.value for m in read(mq, 3)] == [b"a!", b"b!", b"c!"]  # not lost
    assert len(rec.acks) == 3 and len(got) == 1
    text = caplog.text
    assert "on_send broke" in text and "on_acknowledgement broke" in text
    assert "must return an mqlite.ProducerRecord" in text
    assert all(r.name == "mqlite" for r in caplog.records)


def test_interceptor_arguments(mq: mqlite.Broker) -> None:
    class Nothing:
        pass

    with pytest.raises(TypeError, match="on_send or an on_acknowledgement"):
        mq.producer(interceptors=[Nothing()])
    with pytest.raises(TypeError):
        mq.producer(interceptors=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        mq.producer(interceptors="abc")  # type: ignore[arg-type]
    mq.producer(interceptors=[])
    mq.producer(interceptors=(Recorder(),))


def test_python_hooks_on_threads_that_released_the_gil(mq: mqlite.Broker) -> None:
    """acks="all" sends release the GIL; the interceptor and the partitioner
    then attach again on that thread, while other threads produce with the
    GIL held and serve callbacks: no deadlock, nothing lost."""
    import threading

    mq.create_topic("t", partitions=3)
    tag, rec = Tagger(b"#"), Recorder()
    p = mq.producer(
        acks="all",
        linger_ms=1,
        interceptors=[tag, rec],
        partitioner=lambda r, n: len(r.value or b"") % n,
    )
    delivered: list[object] = []
    errors: list[BaseException] = []

    def sender(kind: str) -> None:
        try:
            for i in range(200):
                v = f"{kind}{i}".encode()
                if kind == "send":
                    p.send("t", v)
                elif kind == "batch" and i % 20 == 0:
                    p.send_batch("t", [v] * 20)
                elif kind == "produce":
                    p.produce("t", v, on_delivery=lambda e, m: delivered.append(m))
            p.flush()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=sender, args=(k,)) for k in ("send", "batch", "produce", "send")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "deadlock"
    assert errors == []
    p.flush()
    assert len(delivered) == 200
    assert tag.sent == 800
    assert len(rec.acks) == 800
    assert sum(pi.end_offset for pi in mq.topic("t").partitions) == 800
