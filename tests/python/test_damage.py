"""One damaged file takes down only what it belongs to, and the damage is
listed; committed offsets beyond a log cut by recovery are reset."""

from __future__ import annotations

import subprocess
import sys
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


def flip_in_value(part: Path, value: bytes) -> None:
    """Flips a byte inside `value` in whichever segment of `part` holds it."""
    for log in sorted(part.glob("*.log")):
        data = bytearray(log.read_bytes())
        at = data.find(value)
        if at >= 0:
            data[at + len(value) // 2] ^= 0x20
            log.write_bytes(bytes(data))
            return
    raise AssertionError(f"{value!r} not found")


def test_damage_after_a_clean_close_is_corruption_kept_aside(tmp_path: Path) -> None:
    # Exclusive mode, by name: its open checks the active segment's tail
    # after a clean close too (shared mode's does not).
    with mqlite.open(tmp_path, mode="exclusive", prefault=False) as mq:
        mq.create_topic("t")
        p = mq.producer()
        for i in range(10):
            p.send("t", b"v-%05d" % i, partition=0)
    part = tmp_path / "topics" / "t" / "0"
    flip_in_value(part, b"v-00007")
    with mqlite.open(tmp_path, mode="exclusive", prefault=False) as mq:
        info = mq.topic("t").partitions[0]
        assert info.end_offset == 7
        assert (info.corruptions, info.torn_tails, info.lost_records) == (1, 0, 3)
        assert info.quarantined_bytes > 0
        kept = list(part.glob("*.log.damaged-*"))
        assert len(kept) == 1 and kept[0].stat().st_size == info.quarantined_bytes


def test_a_committed_offset_beyond_a_cut_log_resumes_at_the_cut(tmp_path: Path) -> None:
    # Exclusive mode, by name: the crash is made by removing the recovery
    # point, which its open checks.
    with mqlite.open(tmp_path, mode="exclusive", prefault=False) as mq:
        mq.create_topic("t", segment_bytes=16 * 1024)
        p = mq.producer()
        for i in range(1200):
            p.send("t", b"old-%05d" % i, partition=0)
        for group, broadcast in (("g", False), ("b", True)):
            c = mq.consumer(group, client_id="node", broadcast=broadcast, enable_auto_commit=False)
            c.assign([("t", 0)])
            c.commit([("t", 0, 600)])
    part = tmp_path / "topics" / "t" / "0"
    flip_in_value(part, b"old-00500")
    (part / "recovery.point").unlink()  # as a crash leaves it
    with mqlite.open(tmp_path, mode="exclusive", prefault=False) as mq:
        info = mq.topic("t").partitions[0]
        assert info.end_offset == 500 and info.dropped_batches == 700
        p = mq.producer()
        for i in range(700):
            p.send("t", b"new-%05d" % i, partition=0)
        for group, broadcast in (("g", False), ("b", True)):
            c = mq.consumer(
                group,
                client_id="node",
                broadcast=broadcast,
                enable_auto_commit=False,
                auto_offset_reset="latest",
                max_poll_records=10_000,
            )
            c.assign([("t", 0)])
            got = c.poll_batch(timeout=5)
            values = [m.value for m in got]
            assert len(values) == 700 and values[0] == b"new-00000", group
            assert c.stats().offset_resets == 1
            c.close()


WRITER = """
import sys, time, mqlite
mq = mqlite.open(sys.argv[1], mode="shared", prefault=False)
mq.create_topic("t")
p = mq.producer()
for i in range(10):
    p.send("t", b"v-%05d" % i, partition=0)
p.flush()
print("READY", flush=True)
time.sleep(60)
"""


def test_a_lone_shared_open_after_a_killed_writer_checks_and_cuts_damage(
    tmp_path: Path,
) -> None:
    """A shared-mode writer killed with -9 leaves its process file; the next
    process to open the directory alone checks every partition, as an
    exclusive open after a crash does, and reports what it cut."""
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"READY"
    finally:
        child.kill()
        child.wait()
    flip_in_value(tmp_path / "topics" / "t" / "0", b"v-00009")
    with mqlite.open(tmp_path, mode="shared", prefault=False) as mq:
        info = mq.topic("t").partitions[0]
        assert info.end_offset == 9
        assert info.dropped_batches == 1 and info.truncated_bytes > 0
        c = mq.consumer("g")
        c.assign([("t", 0)])
        got = [m.value for m in c.poll_batch(timeout=1.0)]
        assert got == [b"v-%05d" % i for i in range(9)]
