"""The three ways to send: send() (blocking), produce() with on_delivery
callbacks served by poll()/flush(), and send_batch()."""

from __future__ import annotations

import threading
import time
from typing import Optional, Union

import pytest

import mqlite

from conftest import drain

Report = tuple[Optional[mqlite.Error], Optional[mqlite.RecordMetadata]]


def read_all(mq: mqlite.Broker, topic: str, n: int) -> list[mqlite.Message]:
    c = mq.consumer()
    c.subscribe(topic)
    msgs = drain(c, n)
    c.close()
    return msgs


@pytest.mark.parametrize("acks", [1, "all"])
@pytest.mark.parametrize("linger_ms", [0, 5])
def test_produce_reports_every_record_once_in_order(
    mq: mqlite.Broker, acks: Union[int, str], linger_ms: int
) -> None:
    mq.create_topic("t", partitions=3)
    p = mq.producer(acks=acks, linger_ms=linger_ms)
    reports: dict[bytes, list[Report]] = {}
    order: list[tuple[int, int]] = []

    def report_for(value: bytes):  # type: ignore[no-untyped-def]
        def on_delivery(err: Optional[mqlite.Error], msg: Optional[mqlite.RecordMetadata]) -> None:
            reports.setdefault(value, []).append((err, msg))
            assert msg is not None and msg.offset is not None
            order.append((msg.partition, msg.offset))

        return on_delivery

    n = 600
    for i in range(n):
        v = f"v{i}".encode()
        p.produce("t", v, key=f"k{i % 7}", on_delivery=report_for(v))
    p.flush()
    assert len(reports) == n
    assert all(len(r) == 1 and r[0][0] is None for r in reports.values())
    # In send order per partition: offsets only grow.
    for part in range(3):
        offsets = [o for (q, o) in order if q == part]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    # The reported offsets are where a consumer finds the records.
    for m in read_all(mq, "t", n):
        assert m.value is not None
        md = reports[m.value][0][1]
        assert md is not None
        assert (md.topic, md.partition, md.offset) == ("t", m.partition, m.offset)
        assert md.partition == mqlite.partition_for_key(m.key or b"", 3)
        assert md.duplicate is False
    p.close()


def test_callbacks_run_on_the_serving_thread_only(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer(linger_ms=10_000)  # nothing is written before flush
    threads: list[int] = []
    for i in range(5):
        p.produce("t", b"x", on_delivery=lambda err, msg: threads.append(threading.get_ident()))
    assert p.poll(0) == 0 and threads == []
    p.flush()
    assert threads == [threading.get_ident()] * 5
    assert p.poll() == 0


def test_poll_waits_for_a_lingering_batch(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer(linger_ms=50)
    got: list[Report] = []
    p.produce("t", b"x", on_delivery=lambda err, msg: got.append((err, msg)))
    start = time.monotonic()
    served = 0
    while not served and time.monotonic() - start < 5:
        served = p.poll(timeout=1.0)
    assert served == 1 and len(got) == 1
    assert got[0][1] is not None and got[0][1].offset == 0


def test_poll_timeout_without_anything_pending(mq: mqlite.Broker) -> None:
    p = mq.producer()
    start = time.monotonic()
    assert p.poll(timeout=0.05) == 0
    assert 0.04 <= time.monotonic() - start < 2
    with pytest.raises(mqlite.InvalidArgument):
        p.poll(timeout=-1)


def test_callback_exception_propagates_and_the_rest_stay_queued(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer(linger_ms=10_000)
    seen: list[int] = []

    def cb(i: int):  # type: ignore[no-untyped-def]
        def on_delivery(err: object, msg: object) -> None:
            seen.append(i)
            if i == 1:
                raise RuntimeError("callback failed")

        return on_delivery

    for i in range(4):
        p.produce("t", b"x", on_delivery=cb(i))
    with pytest.raises(RuntimeError, match="callback failed"):
        p.flush()
    assert seen == [0, 1]
    assert p.poll() == 2
    assert seen == [0, 1, 2, 3]
    assert mq.topic("t").partitions[0].end_offset == 4


def test_produce_errors_raise_at_once_without_callback(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2, max_message_bytes=1024)
    p = mq.producer()
    called: list[object] = []
    with pytest.raises(mqlite.UnknownTopic):
        p.produce("nope", b"x", on_delivery=lambda e, m: called.append(e))
    with pytest.raises(mqlite.UnknownPartition):
        p.produce("t", b"x", partition=5, on_delivery=lambda e, m: called.append(e))
    with pytest.raises(mqlite.MessageTooLarge):
        p.produce("t", b"x" * 4000, on_delivery=lambda e, m: called.append(e))
    with pytest.raises(TypeError):
        p.produce("t", b"x", on_delivery=42)  # type: ignore[arg-type]
    p.flush()
    assert called == []
    assert p.stats().records == 0


def test_produce_acks_0_reports_unknown_offsets(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer(acks=0)
    got: list[Report] = []
    for _ in range(3):
        p.produce("t", b"x", on_delivery=lambda err, msg: got.append((err, msg)))
    md = p.send("t", b"y")
    assert md.offset is None and md.partition == 0 and not md.duplicate
    p.flush()
    assert len(got) == 3
    assert all(err is None and msg is not None for err, msg in got)
    assert mq.topic("t").partitions[0].end_offset == 4


def test_flush_timeout_returns_what_is_still_queued(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer(acks="all", linger_ms=60_000)
    got: list[Report] = []
    for _ in range(50):
        p.produce("t", b"x" * 100, on_delivery=lambda err, msg: got.append((err, msg)))
    # With no time at all the appended batch cannot have been flushed yet:
    # not an error, the records are still queued.
    left = p.flush(timeout=0)
    assert isinstance(left, int) and 0 < left <= 50
    assert left + len(got) == 50, (left, len(got))
    assert p.flush(timeout=30) == 0
    assert len(got) == 50 and all(err is None for err, _ in got)
    assert p.flush() == 0 and p.flush(timeout=0) == 0  # nothing queued


def test_len_counts_records_until_their_callback_ran(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)
    p = mq.producer(linger_ms=60_000)
    assert len(p) == 0
    seen: list[int] = []
    for i in range(10):
        p.produce("t", b"v", partition=0, on_delivery=lambda err, msg: seen.append(len(p)))
        assert len(p) == i + 1
    p.produce("t", b"no callback", partition=0)  # counted until written
    assert len(p) == 11
    p.send("t", b"sync", partition=1)  # done when it returns: not counted
    p.send_batch("t", [b"a", b"b"], partition=1)
    assert len(p) == 11
    # poll() serves only what is done: the batch still lingers.
    assert p.poll(0) == 0 and len(p) == 11
    assert p.flush() == 0
    assert len(p) == 0
    # Each callback still counted itself and the callbacks after it.
    assert seen == list(range(10, 0, -1))
    # A callback not yet served keeps its record counted.
    q = mq.producer()  # linger 0: written at once, report queued
    q.produce("t", b"x", on_delivery=lambda err, msg: None)
    assert len(q) == 1
    assert q.poll(5.0) == 1 and len(q) == 0
    # After close everything was delivered.
    q.produce("t", b"y", on_delivery=lambda err, msg: None)
    q.close()
    assert len(q) == 0


def test_close_serves_the_remaining_callbacks(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    got: list[Report] = []
    with mq.producer(linger_ms=60_000) as p:
        for _ in range(10):
            p.produce("t", b"x", on_delivery=lambda err, msg: got.append((err, msg)))
        assert got == []
    assert len(got) == 10
    assert mq.topic("t").partitions[0].end_offset == 10


def test_send_batch_round_trip(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=4)
    p = mq.producer()
    values = [f"value-{i}".encode() for i in range(1000)]
    keys = [f"key-{i % 13}".encode() for i in range(1000)]
    assert p.send_batch("t", values, keys=keys, headers={"h": b"1"}, timestamps=1234) == 1000
    msgs = read_all(mq, "t", 1000)
    assert sorted(m.value or b"" for m in msgs) == sorted(values)
    for m in msgs:
        assert m.key is not None and m.value is not None
        assert m.partition == mqlite.partition_for_key(m.key, 4)
        assert int(m.value.split(b"-")[1]) % 13 == int(m.key.split(b"-")[1])
        assert m.headers == [("h", b"1")]
        assert m.timestamp == 1234
    st = p.stats()
    assert st.records == 1000 and st.batches <= 4 * 2


def test_send_batch_value_types_and_explicit_partition(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)
    p = mq.producer(acks="all")
    values = (b"bytes", bytearray(b"bytearray"), memoryview(b"memoryview"), "str", None)
    assert p.send_batch("t", values, partition=1, timestamps=[1, 2, 3, 4, 5]) == 5
    assert p.send_batch("t", (v for v in [b"gen"]), partition=1) == 1  # any iterable
    assert p.send_batch("t", [], partition=1) == 0
    msgs = read_all(mq, "t", 6)
    assert [m.value for m in msgs] == [b"bytes", b"bytearray", b"memoryview", b"str", None, b"gen"]
    assert [m.partition for m in msgs] == [1] * 6
    assert [m.timestamp for m in msgs[:5]] == [1, 2, 3, 4, 5]


def test_send_batch_bad_arguments(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)
    p = mq.producer()
    with pytest.raises(TypeError):
        p.send_batch("t", b"not a list")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        p.send_batch("t", "not a list")
    with pytest.raises(TypeError):
        p.send_batch("t", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        p.send_batch("t", [b"ok", 5])  # type: ignore[list-item]
    with pytest.raises(mqlite.InvalidArgument):
        p.send_batch("t", [b"a", b"b"], keys=[b"k"])
    with pytest.raises(mqlite.InvalidArgument):
        p.send_batch("t", [b"a", b"b"], timestamps=[1])
    with pytest.raises(mqlite.InvalidArgument):
        p.send_batch("t", [b"a"], partition=-1)
    with pytest.raises(mqlite.UnknownPartition):
        p.send_batch("t", [b"a"], partition=2)
    with pytest.raises(mqlite.UnknownTopic):
        p.send_batch("nope", [b"a"])
    assert sum(pi.end_offset for pi in mq.topic("t").partitions) == 0


def test_send_batch_partial_write_reports_written(mq: mqlite.Broker) -> None:
    mq.create_topic("t", max_message_bytes=1024)
    p = mq.producer()
    values = [b"x" * 600, b"y" * 600, b"z" * 4000]
    with pytest.raises(mqlite.MessageTooLarge) as info:
        p.send_batch("t", values)
    written = info.value.written  # type: ignore[attr-defined]
    assert written == mq.topic("t").partitions[0].end_offset
    assert written in (0, 1, 2)


def test_sends_from_threads_with_callbacks_and_a_spinner(mq: mqlite.Broker) -> None:
    """acks=all completions on the background thread, callbacks served by
    several Python threads, while another thread keeps the GIL busy: no
    deadlock, every callback once."""
    mq.create_topic("t", partitions=3)
    p = mq.producer(acks="all", linger_ms=1)
    lock = threading.Lock()
    seen: list[tuple[int, int]] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def cb(err: object, msg: Optional[mqlite.RecordMetadata]) -> None:
        assert err is None and msg is not None and msg.offset is not None
        with lock:
            seen.append((msg.partition, msg.offset))

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    def produce(n: int) -> None:
        try:
            for i in range(300):
                p.produce("t", f"{n}-{i}".encode(), key=str(i), on_delivery=cb)
                if i % 50 == 0:
                    p.send("t", b"sync", key=str(n))
                    p.poll(0)
            p.flush()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    spinner = threading.Thread(target=spin)
    spinner.start()
    workers = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=60)
        assert not t.is_alive(), "deadlock"
    stop.set()
    spinner.join()
    assert errors == []
    p.flush()
    assert len(seen) == 1200 and len(set(seen)) == 1200
    assert sum(pi.end_offset for pi in mq.topic("t").partitions) == 1200 + 4 * 6


def test_stats_counters(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer(linger_ms=60_000, batch_size=1 << 20)
    st = p.stats()
    assert (st.records, st.bytes, st.batches, st.errors, st.duplicates) == (0, 0, 0, 0, 0)
    assert st.average_batch_records == 0.0 and st.average_batch_bytes == 0.0
    for _ in range(100):
        p.produce("t", b"x" * 100)
    assert p.stats().buffered_bytes > 10_000
    assert p.buffered_bytes == p.stats().buffered_bytes
    p.flush()
    assert p.buffered_bytes == 0
    st = p.stats()
    assert st.records == 100 and st.batches == 1
    assert st.average_batch_records == 100.0
    assert st.bytes > 100 * 100 and st.average_batch_bytes == float(st.bytes)
    assert st.buffered_bytes == 0 and st.peak_buffered_bytes > 10_000
    with pytest.raises(mqlite.UnknownPartition):
        p.send("t", b"x", partition=3)
    assert p.stats().errors == 1
    assert "records=100" in repr(st)


def test_properties(mq: mqlite.Broker) -> None:
    p = mq.producer(compression="zstd", partitioner="round_robin")
    assert p.compression == "zstd" and p.partitioner == "round_robin"
    assert p.idempotent and p.name is None
    assert p.producer_id is not None and p.producer_id >= 0 and p.epoch == 0
    q = mq.producer(idempotent=False)
    assert not q.idempotent and q.producer_id is None and q.epoch is None
    assert mq.producer().compression == "none" and mq.producer().partitioner == "sticky"
    named = mq.producer("writer-1")
    assert named.name == "writer-1"
    assert "writer-1" in repr(named)


def test_close_runs_every_callback_and_raises_the_first_error(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer(linger_ms=60_000)
    seen: list[int] = []

    def cb(i: int):  # type: ignore[no-untyped-def]
        def on_delivery(err: object, msg: object) -> None:
            seen.append(i)
            if i in (1, 3):
                raise RuntimeError(f"callback {i} failed")

        return on_delivery

    for i in range(5):
        p.produce("t", b"x", on_delivery=cb(i))
    with pytest.raises(RuntimeError, match="callback 1 failed"):
        p.close()
    assert seen == [0, 1, 2, 3, 4]
    assert p.closed
    p.close()


def test_send_batch_sequence_overflow(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer("seq")
    with pytest.raises(mqlite.InvalidArgument, match="overflow"):
        p.send_batch("t", [b"a", b"b"], sequences=2**63 - 1)


def test_log_append_time_topic(mq: "mqlite.Broker") -> None:
    import time

    mq.create_topic("lat", partitions=1, log_append_time=True)
    assert mq.topic("lat").log_append_time
    before = int(time.time() * 1000)
    p = mq.producer()
    md = p.send("lat", b"v", timestamp=1000)
    assert md.timestamp >= before
    c = mq.consumer()
    c.assign([("lat", 0)])
    m = c.poll(timeout=1.0)
    assert m is not None and m.timestamp == md.timestamp


def test_a_producer_is_true_with_nothing_queued(mq: mqlite.Broker) -> None:
    p = mq.producer()
    assert len(p) == 0 and bool(p) is True
