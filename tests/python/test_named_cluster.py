"""Named producers on a Kafka cluster, from Python: the same calls as on a
directory (``last_sequence()`` after a restart, re-sent sequences reported
as duplicates, automatic numbering), each send one Kafka transaction.

The cluster is librdkafka's mock cluster, started inside a confluent-kafka
client (``test.mock.num.brokers``), because named producers need Kafka's
transactions and tansu (the broker of the other cluster tests) has none:
there a named producer is refused with ``InvalidConfig``, checked last."""

from __future__ import annotations

import logging
import time
from typing import Iterator

import confluent_kafka
import pytest

import mqlite

from kafka_cluster import cluster_url


class _Bootstrap(logging.Handler):
    """Catches the mock cluster's address in librdkafka's log."""

    def __init__(self) -> None:
        super().__init__()
        self.address: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        marker = "replaced with "
        if "Mock cluster enabled" in msg and marker in msg:
            self.address = msg.split(marker, 1)[1].strip()


@pytest.fixture
def mock_url() -> Iterator[str]:
    catcher = _Bootstrap()
    log = logging.getLogger(f"mqlite-mock-{id(catcher)}")
    log.addHandler(catcher)
    log.setLevel(logging.DEBUG)
    host = confluent_kafka.Producer({"test.mock.num.brokers": 1, "logger": log})
    deadline = time.monotonic() + 10
    while catcher.address is None and time.monotonic() < deadline:
        host.poll(0.05)
    assert catcher.address, "the mock cluster did not say its address"
    # The mock cluster makes a topic (4 partitions) when a producer asks
    # for its metadata; it cannot create one on request, as the first
    # named producer asks for the sequences' topic.
    for topic in ("orders", "__mqlite_sequences"):
        host.list_topics(topic, timeout=10)
    try:
        yield f"kafka://{catcher.address}"
    finally:
        host.flush(1)


def read_all(mq: mqlite.Broker, topic: str, want: int) -> list[bytes]:
    c = mq.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
    c.assign([(topic, p) for p in range(4)])
    out: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(out) < want and time.monotonic() < deadline:
        out.extend(m.value or b"" for m in c.consume(want, timeout=0.2))
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        out.extend(m.value or b"" for m in c.consume(want, timeout=0.1))
    c.close()
    return out


def test_a_restarted_named_producer_resumes_on_a_cluster(mock_url: str) -> None:
    mq = mqlite.open(mock_url, kafka={"request.timeout.ms": "10000"})
    p = mq.producer("orders")
    assert p.name == "orders"
    assert p.last_sequence() is None and p.next_sequence() == 0
    for i in range(5):
        md = p.send("orders", f"v{i}".encode(), key=f"k{i % 3}".encode(), sequence=i)
        assert md is not None and not md.duplicate
        assert md.partition == mqlite.partition_for_key(f"k{i % 3}".encode(), 4)
    p.close()

    p = mq.producer("orders")
    assert p.last_sequence() == 4 and p.next_sequence() == 5
    # A re-send of sequences 3..7 writes 5..7 only.
    written = p.send_batch(
        "orders", [f"v{i}".encode() for i in range(3, 8)], keys=[f"k{i % 3}".encode() for i in range(3, 8)],
        sequences=3,
    )
    assert written == 3
    assert p.last_sequence() == 7
    md = p.send("orders", b"v4", key=b"k1", sequence=4)
    assert md is not None and md.duplicate
    assert sorted(read_all(mq, "orders", 8)) == sorted(f"v{i}".encode() for i in range(8))

    # Automatic numbering goes on after the name's last sequence.
    auto = mq.producer("numbered", initial_sequence=10)
    assert auto.next_auto_sequence() == 10
    auto.send("orders", b"a10")
    auto.close()
    auto = mq.producer("numbered", initial_sequence=10)
    assert auto.next_auto_sequence() == 11
    mq.close()


def test_what_a_cluster_cannot_do_for_a_named_producer_is_refused(mock_url: str) -> None:
    mq = mqlite.open(mock_url, kafka={"request.timeout.ms": "10000"})
    with pytest.raises(mqlite.InvalidConfig):
        mq.producer("shared", access_mode="shared")
    with pytest.raises(mqlite.InvalidConfig):
        mq.producer("both", transactional_id="both")
    plain = mq.producer()
    with pytest.raises(mqlite.InvalidArgument):
        plain.last_sequence()
    mq.close()

    # tansu has no transactions: a named producer is refused there.
    cluster = mqlite.open(cluster_url(), kafka={"request.timeout.ms": "20000"})
    with pytest.raises(mqlite.InvalidConfig, match="transactions"):
        cluster.producer("orders")
    cluster.close()
