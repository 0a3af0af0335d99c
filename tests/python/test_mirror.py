"""Mirrors from Python: ``mqlite.mirror()`` copies a directory's topic to a
Kafka cluster (the broker of ``kafka_cluster.py``) and back, whole and once;
``mqlite.mirror_status()`` says how far behind a destination is; a
``mqlite.Mirror`` with ``follow=True`` runs on a thread, reports its stats
while it runs and ends with ``stop()``; wrong arguments raise mqlite's
errors."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

import mqlite
from kafka_cluster import cluster_url


@pytest.fixture
def cluster() -> mqlite.Broker:
    broker = mqlite.open(cluster_url(), kafka={"request.timeout.ms": "20000"})
    yield broker
    broker.close()


def fresh(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def everything(mq: mqlite.Broker, topic: str) -> list[tuple[int, bytes, bytes, list]]:
    """Every record of `topic` as (partition, key, value, headers), by
    partition and offset."""
    c = mq.consumer()
    parts = len(mq.topic(topic).partitions)
    c.assign([(topic, p) for p in range(parts)])
    out = []
    want = sum(p.end_offset - p.start_offset for p in mq.topic(topic).partitions)
    deadline = time.monotonic() + 30
    while len(out) < want and time.monotonic() < deadline:
        out.extend(c.consume(want - len(out), timeout=0.2))
    c.close()
    return sorted(
        ((m.partition, m.offset, m.key, m.value, [h for h in m.headers if not h[0].startswith("mqlite.")]) for m in out)
    )


def test_a_topic_goes_to_the_cluster_and_back_whole_and_once(tmp_path: Path, cluster: mqlite.Broker) -> None:
    a = mqlite.open(tmp_path / "a", prefault=False)
    b = mqlite.open(tmp_path / "b", prefault=False)
    t = fresh("py-mirror")
    a.create_topic(t, partitions=2)
    p = a.producer()
    for i in range(40):
        p.send(t, f"v{i}".encode(), key=f"k{i}".encode(), headers=[("i", str(i).encode())])
    p.flush()

    stats = mqlite.mirror(a, cluster, t, batch=16)
    assert (stats.copied, stats.lag, stats.errors, stats.last_error) == (40, 0, 0, None)
    assert stats.batches >= 3 and stats.elapsed > 0 and stats.rate > 0
    assert [part for part, _, _ in stats.partitions] == [0, 1]
    # Nothing new: nothing copied.
    assert mqlite.mirror(a, cluster, t).copied == 0

    for i in range(40, 45):
        p.send(t, f"v{i}".encode(), key=f"k{i}".encode())
    p.flush()
    behind = mqlite.mirror_status(a, cluster, t)
    assert (behind.lag, behind.copied) == (5, 0)
    assert mqlite.mirror(a, cluster, t).copied == 5

    assert mqlite.mirror(cluster, b, t).copied == 45
    got = [(part, k, v, h) for part, _, k, v, h in everything(b, t)]
    want = [(part, k, v, h) for part, _, k, v, h in everything(a, t)]
    assert got == want
    a.close()
    b.close()


def test_a_following_mirror_reports_while_it_runs_and_stops(tmp_path: Path, cluster: mqlite.Broker) -> None:
    a = mqlite.open(tmp_path / "a", prefault=False)
    t = fresh("py-follow")
    a.create_topic(t, partitions=1)
    p = a.producer()
    m = mqlite.Mirror(a, cluster, t, follow=True)
    assert m.topic == t
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(stats=m.run()))
    runner.start()
    try:
        for round_ in range(3):
            for i in range(10):
                p.send(t, f"r{round_}-{i}".encode())
            p.flush()
            deadline = time.monotonic() + 30
            while m.stats().copied < 10 * (round_ + 1):
                assert time.monotonic() < deadline, m.stats()
                time.sleep(0.02)
        with pytest.raises(mqlite.InvalidArgument, match="running already"):
            m.run()
    finally:
        m.stop()
        runner.join(30)
    assert not runner.is_alive()
    assert result["stats"].copied == 30
    assert result["stats"].errors == 0
    a.close()


def test_a_following_mirror_counts_errors_until_its_topic_exists(tmp_path: Path, cluster: mqlite.Broker) -> None:
    b = mqlite.open(tmp_path / "b", prefault=False)
    t = fresh("py-later")
    m = mqlite.Mirror(cluster, b, t, follow=True)
    runner = threading.Thread(target=m.run)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while m.stats().errors < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert "unknown topic" in m.stats().last_error
        cluster.create_topic(t, partitions=1)
        cluster.producer().send(t, b"late")
        while m.stats().copied < 1:
            assert time.monotonic() < deadline + 30
            time.sleep(0.02)
    finally:
        m.stop()
        runner.join(30)
    assert [v for _, _, _, v, _ in everything(b, t)] == [b"late"]
    b.close()


def test_wrong_arguments_raise(tmp_path: Path, cluster: mqlite.Broker) -> None:
    a = mqlite.open(tmp_path / "a", prefault=False)
    b = mqlite.open(tmp_path / "b", prefault=False)
    with pytest.raises(mqlite.InvalidArgument, match="directory and a Kafka cluster"):
        mqlite.Mirror(a, b, "t")
    with pytest.raises(mqlite.InvalidArgument, match="directory and a Kafka cluster"):
        mqlite.mirror_status(cluster, cluster, "t")
    with pytest.raises(mqlite.InvalidTopicName):
        mqlite.Mirror(a, cluster, "bad/name")
    with pytest.raises(mqlite.InvalidArgument, match="batch"):
        mqlite.mirror(a, cluster, "t", batch=0)
    with pytest.raises(mqlite.UnknownTopic):
        mqlite.mirror(a, cluster, fresh("nowhere"))
    with pytest.raises(TypeError):
        mqlite.Mirror(a, "kafka://x", "t")  # type: ignore[arg-type]
    m = mqlite.Mirror(a, cluster, "t")
    b.close()
    a.close()
    with pytest.raises(mqlite.Closed):
        m.run()
    with pytest.raises(mqlite.Closed):
        mqlite.mirror_status(a, cluster, "t")
