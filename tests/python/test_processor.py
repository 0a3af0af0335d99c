"""mqlite.Processor: orderly and concurrent processing on worker threads,
committing only what was processed."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import mqlite
from groups_util import SEG, produce


def committed(mq: mqlite.Broker, group: str, topic: str, partitions: int) -> list[int | None]:
    c = mq.describe_group(group).committed
    return [c[(topic, p)][0] if (topic, p) in c else None for p in range(partitions)]


def test_orderly_keeps_partition_order(mq: mqlite.Broker) -> None:
    mq.create_topic("t", 4, segment_bytes=SEG)
    produce(mq, "t", 200)
    c = mq.consumer(group_id="g", auto_offset_reset="earliest", max_poll_records=50)
    c.subscribe("t")
    # Messages buffered by the Python consumer are put back, not skipped.
    first = c.poll(timeout=5)
    assert first is not None
    c.commit()
    skip = (first.partition, first.offset + 1)

    proc = mqlite.Processor(c, threads=3)
    seen: dict[int, list[int]] = {p: [] for p in range(4)}
    threads: set[str] = set()
    lock = threading.Lock()
    total = 4 * 200 - 1

    def handler(m: mqlite.Message) -> bool:
        assert m.value == f"{m.partition}:{m.offset}".encode()
        with lock:
            seen[m.partition].append(m.offset)
            threads.add(threading.current_thread().name)
            if sum(map(len, seen.values())) == total:
                proc.stop()
        return True

    stats = proc.run(handler)
    assert stats.processed == total and stats.retries == 0 and stats.failed == 0
    assert stats.commits >= 1
    for p in range(4):
        start = skip[1] if p == skip[0] else 0
        assert seen[p] == list(range(start, 200)), p
    assert threading.current_thread().name not in threads
    assert committed(mq, "g", "t", 4) == [200] * 4
    assert not proc.running
    c.close()


def test_concurrently_never_commits_past_a_failing_message(
    mq: mqlite.Broker, caplog: pytest.LogCaptureFixture
) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    produce(mq, "t", 50)
    c = mq.consumer(group_id="g", auto_offset_reset="earliest")
    c.subscribe("t")
    proc = mqlite.Processor(
        c, threads=4, mode="concurrently", commit_interval_ms=10, retry_backoff_ms=40
    )
    fails = {"n": 0}
    while_failing: list[int | None] = []
    done: set[int] = set()
    lock = threading.Lock()

    def handler(m: mqlite.Message) -> bool:
        if m.offset == 10 and fails["n"] < 3:
            fails["n"] += 1
            while_failing.append(committed(mq, "g", "t", 1)[0])
            if fails["n"] == 2:
                raise ValueError("boom")
            return False
        with lock:
            done.add(m.offset)
            if len(done) == 50:
                proc.stop()
        return True

    with caplog.at_level(logging.WARNING, logger="mqlite"):
        stats = proc.run(handler)
    assert stats.processed == 50 and stats.retries == 3 and stats.failed == 0
    assert len(while_failing) == 3
    assert all(o is None or o <= 10 for o in while_failing), while_failing
    assert committed(mq, "g", "t", 1) == [50]
    failures = [r for r in caplog.records if r.name == "mqlite" and r.exc_info]
    assert len(failures) == 1 and "offset 10" in failures[0].getMessage()
    c.close()


def test_max_retries_gives_up(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    produce(mq, "t", 5)
    c = mq.consumer(group_id="g", auto_offset_reset="earliest")
    c.subscribe("t")
    proc = mqlite.Processor(c, threads=1, retry_backoff_ms=1, max_retries=2)
    calls: list[int] = []

    def handler(m: mqlite.Message) -> bool:
        calls.append(m.offset)
        if m.offset == 4:
            proc.stop()
        return m.offset != 2

    stats = proc.run(handler)
    assert calls == [0, 1, 2, 2, 2, 3, 4]
    assert (stats.processed, stats.retries, stats.failed) == (4, 2, 1)
    assert committed(mq, "g", "t", 1) == [5]
    c.close()


def test_a_message_given_up_on_goes_to_the_dead_letter_topic(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    produce(mq, "t", 5)
    c = mq.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.subscribe("t")
    proc = mqlite.Processor(c, threads=1, retry_backoff_ms=1, max_retries=1, dead_letter_topic="t.dlq")

    def handler(m: mqlite.Message) -> bool:
        if m.offset == 4:
            proc.stop()
        return m.offset != 2

    stats = proc.run(handler)
    assert (stats.processed, stats.retries, stats.failed, stats.dead_lettered) == (4, 1, 1, 1)
    assert "dead_lettered=1" in repr(stats)
    assert committed(mq, "g", "t", 1) == [5]
    c.close()
    dl = mq.consumer(auto_offset_reset="earliest")
    dl.assign([("t.dlq", 0)])
    m = dl.poll(timeout=5)
    assert m is not None and m.value == b"0:2"
    h = dict(m.headers)
    assert (h["mqlite.dlq.topic"], h["mqlite.dlq.partition"], h["mqlite.dlq.offset"]) == (b"t", b"0", b"2")
    assert h["mqlite.dlq.deliveries"] == b"2"
    assert b"2 times" in h["mqlite.dlq.reason"]
    assert dl.poll(timeout=0) is None
    dl.close()


def test_a_bad_dead_letter_topic_is_refused(mq: mqlite.Broker) -> None:
    c = mq.consumer(group_id="g")
    with pytest.raises(mqlite.InvalidTopicName):
        mqlite.Processor(c, max_retries=1, dead_letter_topic="no/such name")
    assert mq.topics() == []
    c.close()


def test_stop_from_another_thread_and_consumer_usable_after(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    produce(mq, "t", 10)
    c = mq.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.subscribe("t")
    proc = mqlite.Processor(c, threads=2, mode="concurrent")
    got: list[int] = []
    inside: list[BaseException] = []

    def handler(m: mqlite.Message) -> bool:
        try:
            c.poll(0)
        except RuntimeError as e:
            inside.append(e)
        got.append(m.offset)
        return True

    result: list[mqlite.ProcessorStats] = []
    t = threading.Thread(target=lambda: result.append(proc.run(handler)))
    t.start()
    deadline = time.monotonic() + 5
    while len(got) < 10:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert proc.running
    with pytest.raises(RuntimeError, match="Processor"):
        c.poll(0)
    with pytest.raises(RuntimeError, match="Processor"):
        c.commit()
    with pytest.raises(RuntimeError, match="already running"):
        proc.run(handler)
    proc.stop()
    t.join(5)
    assert not t.is_alive()
    assert result[0].processed == 10
    assert len(inside) == 10 and "Processor" in str(inside[0])

    # The consumer is back, at the position after what was processed.
    assert c.position("t", 0) == 10
    assert c.committed() == {("t", 0): (10, "")}
    produce(mq, "t", 1)
    m = c.poll(timeout=5)
    assert m is not None and m.offset == 10
    c.commit()
    assert committed(mq, "g", "t", 1) == [11]

    # A stop() before run() makes that run return at once.
    proc.stop()
    started = time.monotonic()
    assert proc.run(handler).processed == 0
    assert time.monotonic() - started < 2
    c.close()


def test_errors(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    with pytest.raises(mqlite.InvalidArgument, match="group_id"):
        mqlite.Processor(mq.consumer())
    c = mq.consumer(group_id="g")
    c.subscribe("t")
    with pytest.raises(mqlite.InvalidArgument, match="mode"):
        mqlite.Processor(c, mode="sideways")
    with pytest.raises(mqlite.InvalidArgument, match="threads"):
        mqlite.Processor(c, threads=0)
    with pytest.raises(mqlite.InvalidArgument):
        mqlite.Processor(c, max_in_flight=0)
    with pytest.raises(mqlite.InvalidArgument):
        mqlite.Processor(c, retry_backoff_ms=-1)
    proc = mqlite.Processor(c)
    assert "orderly" in repr(proc) and proc.consumer is c
    with pytest.raises(TypeError):
        proc.run(42)  # type: ignore[arg-type]
    c.close()
    with pytest.raises(mqlite.Closed):
        proc.run(lambda m: True)
