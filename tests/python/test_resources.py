"""Descriptors and mappings a broker holds (Linux: /proc/self/fd, /proc/self/maps).

A constant number of descriptors per partition, none per sealed segment, and
none at all once the broker is closed, though its producers, consumers and
messages are still referenced. A message still referenced keeps its segment
mapped (its bytes stay readable); its descriptors are closed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import mqlite

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")

#: Exclusive mode, by name: the counts are that mode's (a shared-mode
#: process also holds its process file and the partitions' tail pages).
MODE = "exclusive"


def fds_under(data: Path) -> list[str]:
    """Paths of the descriptors open on files under `data` (the directory's lock files aside)."""
    root = str(data.resolve())
    locks = {os.path.join(root, "LOCK"), os.path.join(root, "LIVE")}
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the descriptor listdir itself used, closed since
        if target.startswith(root + os.sep) and target not in locks:
            out.append(target)
    return out


def maps_under(data: Path) -> int:
    """Mappings of files under `data`."""
    root = str(data.resolve()) + os.sep
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if len(line.split()) >= 6 and line.split()[5].startswith(root))


def sealed_segments(mq: mqlite.Broker, topic: str) -> int:
    return sum(p.segments - 1 for p in mq.topic(topic).partitions)


def test_close_releases_every_descriptor_while_objects_live(data_dir: Path) -> None:
    mq = mqlite.open(data_dir, mode=MODE, prefault=False, retention_check_interval_ms=0)
    mq.create_topic("t", partitions=2, segment_bytes=4096)
    assert len(fds_under(data_dir)) == 2  # the active segment's log, per partition
    p = mq.producer(acks="all")
    for i in range(100):
        p.send("t", b"x" * 300, partition=i % 2)
    few = fds_under(data_dir)
    sealed_few = sealed_segments(mq, "t")
    for i in range(1000):
        p.send("t", b"x" * 300, partition=i % 2)
    assert sealed_segments(mq, "t") >= sealed_few + 50
    # Flushed partitions also hold their recovery point; nothing per sealed segment.
    assert len(few) == 4
    many = fds_under(data_dir)
    assert len(many) == 4
    assert sum(f.endswith(".log") for f in many) == 2  # the new active segments

    c = mq.consumer()
    c.subscribe("t")
    first = c.poll(timeout=1.0)
    assert first is not None
    rest = c.poll_batch(timeout=0)
    while rest:
        rest = c.poll_batch(timeout=0)
    mq.close()
    assert fds_under(data_dir) == []
    # Only `first` (still referenced) keeps a segment mapped, and readable.
    assert 1 <= maps_under(data_dir) <= 3
    assert first.value == b"x" * 300
    del first
    assert maps_under(data_dir) == 0
    # The producer and consumer are still referenced, and closed.
    assert p.closed and c.closed
    with pytest.raises(mqlite.Closed):
        p.send("t", b"late")
    with pytest.raises(mqlite.Closed):
        c.poll(timeout=0)
    assert fds_under(data_dir) == [] and maps_under(data_dir) == 0


def test_reopened_partitions_hold_one_descriptor(data_dir: Path) -> None:
    with mqlite.open(data_dir, mode=MODE, prefault=False, retention_check_interval_ms=0) as mq:
        for t in range(20):
            mq.create_topic(f"t{t}", segment_bytes=4096)
            mq.producer().send(f"t{t}", b"v" * 3000)
            mq.producer().send(f"t{t}", b"v" * 3000)  # rolls
    mq = mqlite.open(data_dir, mode=MODE, prefault=False, retention_check_interval_ms=0)
    # After a clean close partitions open on first use: none yet.
    assert fds_under(data_dir) == []
    for t in range(20):
        mq.topic(f"t{t}")
    assert len(fds_under(data_dir)) == 20
    mq.close()
    assert fds_under(data_dir) == []


def test_messages_held_for_poll_are_released_at_close(data_dir: Path) -> None:
    """poll() hands out one message and the engine holds the rest of what it
    fetched (hundreds of messages over many segments): closing the broker
    releases every descriptor, and the held messages' mappings; only the
    handed-out message keeps one."""
    mq = mqlite.open(data_dir, mode=MODE, prefault=False, retention_check_interval_ms=0)
    mq.create_topic("t", partitions=2, segment_bytes=4096)
    p = mq.producer(acks="all")
    for i in range(1000):
        p.send("t", b"x" * 300, partition=i % 2)
    assert sealed_segments(mq, "t") >= 50
    c = mq.consumer()
    c.subscribe("t")
    first = c.poll(timeout=1.0)
    assert first is not None and first.offset == 0
    # Many segments are mapped, those of the held messages among them.
    assert maps_under(data_dir) > 3
    mq.close()
    assert fds_under(data_dir) == []
    assert 1 <= maps_under(data_dir) <= 3
    assert first.value == b"x" * 300
    del first
    assert maps_under(data_dir) == 0
    # The consumer is still referenced, closed, and holds nothing.
    with pytest.raises(mqlite.Closed):
        c.poll(timeout=0)
    assert fds_under(data_dir) == [] and maps_under(data_dir) == 0
