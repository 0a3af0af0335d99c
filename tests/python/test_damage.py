"""One damaged file takes down only what it belongs to, and the damage is
listed; committed offsets beyond a log cut by recovery are reset."""

from __future__ import annotations

from pathlib import Path

import pytest

import mqlite


def populate(path: Path) -> None:
    with mqlite.open(path, prefault=False) as mq:
        for t in ("a", "b"):
            mq.create_topic(t)
            mq.producer().send_batch(t, [b"1", b"2", b"3"], partition=0)
        for g in ("g", "h"):
            c = mq.consumer(g, enable_auto_commit=False)
            c.assign([("b", 0)])
            c.commit([("b", 0, 1)])


def test_a_damaged_topic_is_listed_and_the_rest_works(tmp_path: Path) -> None:
    populate(tmp_path)
    (tmp_path / "topics" / "a" / "topic.json").write_bytes(b'{"version": 1, "na')
    (tmp_path / "groups" / "g.offsets").write_bytes(b"not json")
    with mqlite.open(tmp_path, prefault=False) as mq:
        assert mq.topics() == ["a", "b"]
        assert mq.groups() == ["g", "h"]
        assert [(k, n) for k, n, _ in mq.damaged()] == [("group", "g"), ("topic", "a")]
        with pytest.raises(mqlite.Corrupt):
            mq.topic("a")
        with pytest.raises(mqlite.Corrupt):
            mq.producer().send("a", b"x")
        with pytest.raises(mqlite.Corrupt):
            mq.consumer("g")
        h = mq.consumer("h", enable_auto_commit=False)
        h.assign([("b", 0)])
        assert h.position("b", 0) == 1
        mq.producer().send("b", b"4")
        mq.delete_topic("a")
        assert [(k, n) for k, n, _ in mq.damaged()] == [("group", "g")]
        mq.create_topic("a")


def test_clean_directory_has_no_damage(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    assert mq.damaged() == []
