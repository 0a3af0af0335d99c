"""Topic creation on first use from Python: off by default
(mqlite.UnknownTopic); with auto_create_topics=True, send, produce,
send_batch, assign and subscribe create the topic with default_partitions
partitions; invalid names and read-only handles create nothing;
concurrent first uses share one topic."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import mqlite


def test_off_by_default(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "d") as mq:
        with pytest.raises(mqlite.UnknownTopic):
            mq.producer().send("missing", b"v")
        with pytest.raises(mqlite.UnknownTopic):
            mq.consumer().assign([("missing", 0)])
        assert mq.topics() == []


def test_first_use_creates(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "d", auto_create_topics=True, default_partitions=3) as mq:
        p = mq.producer()
        assert p.send("sent", b"v").offset == 0
        p.produce("produced", b"v")
        p.flush()
        assert p.send_batch("batched", [b"a", b"b"]) == 2
        c = mq.consumer()
        c.assign([("assigned", 2)])
        c.subscribe(["subscribed"])
        for t in ("sent", "produced", "batched", "assigned", "subscribed"):
            assert len(mq.topic(t).partitions) == 3, t
        before = mq.topics()
        with pytest.raises(mqlite.InvalidTopicName):
            p.send("bad name", b"v")
        with pytest.raises(mqlite.InvalidTopicName):
            c.assign([("bad/name", 0)])
        assert mq.topics() == before


def test_concurrent_first_uses_share_one_topic(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "d", auto_create_topics=True, default_partitions=2) as mq:
        errors: list = []

        def use(i: int) -> None:
            try:
                if i % 2:
                    mq.producer().send("race", b"%d" % i)
                else:
                    mq.consumer().assign([("race", 1)])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=use, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert mq.topics() == ["race"]
        info = mq.topic("race")
        assert len(info.partitions) == 2
        assert sum(p.end_offset for p in info.partitions) == 4


def test_read_only_handles_never_create(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "d", shared=True) as writer:
        writer.create_topic("t", 1)
        with mqlite.open(tmp_path / "d", readonly=True, auto_create_topics=True) as ro:
            with pytest.raises(mqlite.UnknownTopic):
                ro.consumer().assign([("missing", 0)])
        assert writer.topics() == ["t"]


@pytest.mark.parametrize("n", [0, -1, 100_001])
def test_default_partitions_is_checked(tmp_path: Path, n: int) -> None:
    with pytest.raises(mqlite.InvalidConfig, match="default_partitions"):
        mqlite.open(tmp_path / "d", default_partitions=n)
