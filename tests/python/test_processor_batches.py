"""mqlite.Processor hands its workers batches (runs of one partition's
messages) and calls the handler for each message of a batch, holding the
GIL once per batch: a message that fails is retried on its own, from where
its batch stopped, and the messages before it are not handled again."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from groups_util import SEG, produce

import mqlite


@pytest.mark.parametrize("mode", ["orderly", "concurrently"])
def test_a_failure_retries_from_the_failing_message(mq: mqlite.Broker, mode: str) -> None:
    mq.create_topic("t", 2, segment_bytes=SEG)
    produce(mq, "t", 300)
    c = mq.consumer(group_id="g", max_poll_records=100)
    c.subscribe("t")
    proc = mqlite.Processor(c, threads=3, mode=mode, retry_backoff_ms=1)
    calls: Counter[tuple[int, int]] = Counter()
    order: dict[int, list[int]] = {0: [], 1: []}
    lock = threading.Lock()

    def handler(m: mqlite.Message) -> bool:
        with lock:
            calls[(m.partition, m.offset)] += 1
            if (m.partition, m.offset) == (0, 10) and calls[(0, 10)] <= 2:
                if calls[(0, 10)] == 2:
                    raise ValueError("fails again")
                return False
            order[m.partition].append(m.offset)
            if sum(map(len, order.values())) == 600:
                proc.stop()
        return True

    stats = proc.run(handler)
    assert stats.processed == 600 and stats.retries == 2 and stats.failed == 0
    assert calls[(0, 10)] == 3
    assert all(n == 1 for k, n in calls.items() if k != (0, 10)), "a message handled twice"
    assert len(calls) == 600
    if mode == "orderly":
        assert order == {0: list(range(300)), 1: list(range(300))}
    assert mq.describe_group("g").committed == {("t", 0): (300, ""), ("t", 1): (300, "")}
    c.close()


@pytest.mark.parametrize("mode", ["orderly", "concurrently"])
def test_run_batches_hands_out_runs_of_one_partition(mq: mqlite.Broker, mode: str) -> None:
    mq.create_topic("t", 2, segment_bytes=SEG)
    produce(mq, "t", 300)
    c = mq.consumer(group_id="g", max_poll_records=100)
    c.subscribe("t")
    proc = mqlite.Processor(c, threads=3, mode=mode, retry_backoff_ms=1)
    handled: Counter[tuple[int, int]] = Counter()
    sizes: list[int] = []
    order: dict[int, list[int]] = {0: [], 1: []}
    failed: set[tuple[int, int]] = set()
    lock = threading.Lock()

    def handler(messages: list[mqlite.Message]) -> int | None:
        with lock:
            sizes.append(len(messages))
            p, first = messages[0].partition, messages[0].offset
            ids = [(m.partition, m.offset) for m in messages]
            assert ids == [(p, first + i) for i in range(len(messages))], "one partition, in order"
            if (1, 20) in ids and (1, 20) not in failed:
                failed.add((1, 20))
                raise ValueError("fails once")  # the whole list failed
            for i, m in enumerate(messages):
                if (m.partition, m.offset) == (0, 10) and (0, 10) not in failed:
                    failed.add((0, 10))
                    return i  # the first i processed; offset 10 failed
                handled[(m.partition, m.offset)] += 1
                order[m.partition].append(m.offset)
            if len(handled) >= 600:
                proc.stop()
        return None

    stats = proc.run_batches(handler)
    assert stats.processed == 600 and stats.retries == 2 and stats.failed == 0
    assert max(sizes) > 1
    assert len(handled) == 600 and set(handled.values()) == {1}, "a message handled twice"
    if mode == "orderly":
        assert order == {0: list(range(300)), 1: list(range(300))}
    assert mq.describe_group("g").committed == {("t", 0): (300, ""), ("t", 1): (300, "")}
    c.close()


def test_run_batches_checks_what_the_handler_returns(mq: mqlite.Broker) -> None:
    mq.create_topic("t", 1, segment_bytes=SEG)
    produce(mq, "t", 5)
    c = mq.consumer(group_id="g")
    c.assign([("t", 0)])
    proc = mqlite.Processor(c, threads=1, retry_backoff_ms=1, max_retries=1)
    with pytest.raises(TypeError):
        proc.run_batches(5)  # type: ignore[arg-type]
    # A return that is not a count fails the batch's first message (logged):
    # with max_retries=1 each is given up on in turn.
    seen: list[int] = []

    def handler(messages: list[mqlite.Message]) -> int | None:
        seen.append(messages[0].offset)
        if len(set(seen)) == 5 and seen.count(4) == 2:
            proc.stop()
        return "all"  # type: ignore[return-value]

    stats = proc.run_batches(handler)
    assert stats.processed == 0 and stats.failed == 5
    c.close()
