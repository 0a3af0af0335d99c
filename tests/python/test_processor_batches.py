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
