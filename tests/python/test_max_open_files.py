"""max_open_files: the broker's descriptor limit. 0 is refused with a typed
error; a limit far below the number of partitions still writes and reads
every partition, within that many descriptors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import mqlite

PARTITIONS = 30
LIMIT = 2


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_zero_is_invalid_and_creates_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with pytest.raises(mqlite.InvalidConfig, match="max_open_files"):
        mqlite.open(data, max_open_files=0)
    assert not data.exists()
    with pytest.raises(mqlite.InvalidArgument, match="max_open_files"):
        mqlite.open(data, max_open_files=-1)


def test_fewer_descriptors_than_partitions(tmp_path: Path) -> None:
    before = open_fds()
    with mqlite.open(tmp_path, prefault=False, max_open_files=LIMIT) as mq:
        mq.create_topic("t", partitions=PARTITIONS)
        most = open_fds()
        with mq.producer(acks="all") as p:
            for rnd in range(3):
                for i in range(PARTITIONS):
                    p.send("t", value=f"{i}-{rnd}".encode(), partition=i)
                    most = max(most, open_fds())
        c = mq.consumer()
        c.subscribe("t")
        got: list[bytes] = []
        while len(got) < 3 * PARTITIONS:
            m = c.poll(1.0)
            if m is None:
                break
            got.append(m.value)
        c.close()
        assert sorted(got) == sorted(f"{i}-{r}".encode() for i in range(PARTITIONS) for r in range(3))
    # The limit, the directory lock, and one file opened for a call.
    assert most <= before + LIMIT + 2, (most, before)
