"""Disk footprint: a hello world (one topic of 4 partitions, 10 small
messages sent and read back) takes at most 1 MiB on disk, counted as `du -s`
does (allocated blocks), both while the broker is open and after it closed.
Segment files start small and grow ahead of the data instead of being
preallocated to the full segment size (64 MiB by default)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import drain

import mqlite


def disk_usage(path: Path) -> int:
    """Bytes allocated on disk under `path`, directories included."""
    total = os.lstat(path).st_blocks * 512
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def test_hello_world_takes_at_most_one_mib(tmp_path: Path) -> None:
    data = tmp_path / "data"
    mq = mqlite.open(data)  # the defaults: page faulting ahead on
    mq.create_topic("greetings", 4)
    p = mq.producer()
    for i in range(10):
        p.send("greetings", b"hello %d" % i)
    c = mq.consumer(group_id="g")
    c.subscribe(["greetings"])
    got = drain(c, 10)
    assert sorted(m.value for m in got) == sorted(b"hello %d" % i for i in range(10))
    c.commit()
    while_open = disk_usage(data)
    c.close()
    mq.close()
    closed = disk_usage(data)
    assert while_open <= 1 << 20, while_open
    assert closed <= 1 << 20, closed


def test_a_growing_segment_stays_near_its_data(tmp_path: Path) -> None:
    mq = mqlite.open(tmp_path / "data", prefault=False, retention_check_interval_ms=0)
    mq.create_topic("t", 1, segment_bytes=16 << 20)
    p = mq.producer()
    log = tmp_path / "data/topics/t/0/00000000000000000000.log"
    value = b"x" * 1000
    for n in range(1, 3001):
        p.send("t", value, partition=0)
        if n % 500 == 0:
            data = mq.topic("t").partitions[0].size_bytes
            size = log.stat().st_size
            assert data <= size <= 4 * data + (64 << 10), (data, size)
    c = mq.consumer()
    c.assign([("t", 0)])
    assert len(drain(c, 3000)) == 3000
    mq.close()
