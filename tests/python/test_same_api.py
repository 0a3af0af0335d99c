"""One program, two backends: every test here runs once on a data
directory and once on a Kafka cluster (``mqlite.open("kafka://...")``,
the broker of ``kafka_cluster.py``), with the same calls and the same
results and errors."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

import mqlite

from kafka_cluster import cluster_url


@pytest.fixture(params=["directory", "kafka"])
def mq(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[mqlite.Broker]:
    if request.param == "directory":
        broker = mqlite.open(tmp_path / "data", prefault=False)
    else:
        broker = mqlite.open(cluster_url(), kafka={"request.timeout.ms": "20000"})
    try:
        yield broker
    finally:
        broker.close()


def fresh(tag: str) -> str:
    """A name no other test of the run uses (the cluster outlives a test)."""
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def read(consumer: mqlite.Consumer, n: int, timeout: float = 30.0) -> list[mqlite.Message]:
    out: list[mqlite.Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(consumer.consume(n - len(out), timeout=0.2))
    return out


def test_topics_are_created_listed_described_and_deleted(mq: mqlite.Broker) -> None:
    t = fresh("admin")
    mq.create_topic(t, partitions=3)
    assert t in mq.topics()
    assert len(mq.topic(t).partitions) == 3
    with pytest.raises(mqlite.TopicExists):
        mq.create_topic(t, partitions=3)
    with pytest.raises(mqlite.InvalidTopicName):
        mq.create_topic("bad/name")
    mq.delete_topic(t)
    assert t not in mq.topics()
    with pytest.raises(mqlite.UnknownTopic):
        mq.topic(t)


def test_records_come_back_whole_where_their_key_puts_them(mq: mqlite.Broker) -> None:
    t = fresh("records")
    mq.create_topic(t, partitions=3)
    p = mq.producer()
    sent = {}
    for i in range(30):
        key = f"user-{i % 7}".encode()
        md = p.send(t, f"event {i}".encode(), key=key, headers=[("seq", str(i).encode())],
                    timestamp=1_700_000_000_000 + i)
        assert md is not None
        assert md.partition == mqlite.partition_for_key(key, 3)
        sent[(md.partition, md.offset)] = (key, i)
    c = mq.consumer()
    c.assign([(t, 0), (t, 1), (t, 2)])
    got = read(c, 30)
    assert len(got) == 30
    for m in got:
        key, i = sent[(m.partition, m.offset)]
        assert (m.topic, m.key, m.value) == (t, key, f"event {i}".encode())
        assert m.headers == [("seq", str(i).encode())]
        assert m.timestamp == 1_700_000_000_000 + i
    c.close()


def test_a_group_resumes_from_its_commits(mq: mqlite.Broker) -> None:
    t, g = fresh("group"), fresh("g")
    mq.create_topic(t, partitions=2)
    p = mq.producer()
    for i in range(20):
        p.send(t, str(i).encode(), partition=i % 2)
    c = mq.consumer(g, enable_auto_commit=False)
    c.subscribe([t])
    assert len(read(c, 20)) == 20
    c.commit(offsets=[(t, 0, 4), (t, 1, 10)])
    assert c.committed([(t, 0), (t, 1)])[(t, 0)][0] == 4
    info = mq.describe_group(g)
    assert info.name == g
    assert len(info.members) == 1
    assert {k: v[0] for k, v in info.committed.items()} == {(t, 0): 4, (t, 1): 10}
    c.close()
    c = mq.consumer(g, enable_auto_commit=False)
    c.subscribe([t])
    again = read(c, 6)
    assert sorted((m.partition, m.offset) for m in again) == [(0, o) for o in range(4, 10)]
    c.close()


def test_rebalance_callbacks_run_on_both(mq: mqlite.Broker) -> None:
    t, g = fresh("callbacks"), fresh("cb")
    mq.create_topic(t, partitions=2)
    assigned: list[list[tuple[str, int]]] = []
    c = mq.consumer(g)
    c.subscribe([t], on_assign=lambda _c, parts: assigned.append(sorted(parts)))
    deadline = time.monotonic() + 30
    while not assigned and time.monotonic() < deadline:
        c.poll(0.2)
    assert assigned == [[(t, 0), (t, 1)]]
    c.close()


def test_bad_calls_get_the_same_errors(mq: mqlite.Broker) -> None:
    t = fresh("errors")
    mq.create_topic(t, partitions=2)
    p = mq.producer()
    with pytest.raises(mqlite.UnknownPartition):
        p.send(t, b"x", partition=5)
    c = mq.consumer()
    with pytest.raises(mqlite.UnknownPartition):
        c.assign([(t, 9)])
    with pytest.raises(mqlite.InvalidArgument):
        c.commit(offsets=[(t, 0, 0)])
    c.close()
    p.close()
    with pytest.raises(mqlite.Closed):
        p.send(t, b"late")


def test_the_example_runs_unchanged_on_both(tmp_path: Path) -> None:
    """examples/anywhere.py prints the same on a directory and a cluster."""
    import subprocess
    import sys

    example = Path(__file__).resolve().parents[2] / "examples" / "anywhere.py"
    run = fresh("ex")
    outputs = []
    for where in (str(tmp_path / "data"), cluster_url()):
        done = subprocess.run(
            [sys.executable, str(example), where, "--run", run],
            capture_output=True, text=True, timeout=300, check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0].startswith("300 orders read once each, ")
    assert ", lag 0\n" in outputs[0]
