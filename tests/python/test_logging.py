"""The engine's log records reach Python's ``logging`` (logger ``mqlite``),
filtered by its level before they leave the engine; recovery counters and
``offset_resets`` are reported in ``topic()`` and ``Consumer.stats()``."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

import mqlite
from mqlite import _mqlite

VALUE = b"0123456789abcdefghijklmnopqrstuvwxyz" * 2

#: Exclusive mode, by name: the tests make a log look crashed by removing its
#: recovery point, which exclusive mode's open checks (shared mode checks the
#: logs after a process's crash or a restart).
MODE = "exclusive"

#: The level the engine filters by before it queues a record (private).
log_level = _mqlite._log_level  # type: ignore[attr-defined]


def write(data_dir: Path, n: int) -> None:
    """Appends `n` records to t/0 (made if missing) and closes cleanly."""
    with mqlite.open(data_dir, mode=MODE, prefault=False, retention_check_interval_ms=0) as mq:
        if "t" not in mq.topics():
            mq.create_topic("t", segment_bytes=1 << 20)
        p = mq.producer()
        for _ in range(n):
            p.send("t", VALUE, partition=0)
        p.close()


def damage(data_dir: Path) -> None:
    """Flips a byte in the middle of the last record of the active segment
    of t/0, so that its batch fails the CRC check at the next open, and
    removes the recovery point, as a crash before any flush leaves it: the
    bad batch is then a torn tail, which recovery cuts with a warning."""
    path = data_dir / "topics" / "t" / "0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    at = data.rfind(VALUE)
    assert at >= 0
    data[at + len(VALUE) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    (data_dir / "topics" / "t" / "0" / "recovery.point").unlink()


def reopen(data_dir: Path) -> mqlite.Broker:
    return mqlite.open(data_dir, mode=MODE, prefault=False, retention_check_interval_ms=0)


def engine_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if hasattr(r, "mqlite_target")]


def test_recovery_warning_reaches_logging(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(data_dir, 5)
    damage(data_dir)
    with caplog.at_level(logging.WARNING, logger="mqlite"):
        mq = reopen(data_dir)
        # Delivered before open() returned: no waiting.
        warnings = [r for r in engine_records(caplog) if "truncated" in r.getMessage()]
    try:
        assert len(warnings) == 1, caplog.text
        r = warnings[0]
        assert r.name == "mqlite" and r.levelno == logging.WARNING
        assert "00000000000000000000.log" in r.getMessage()
        assert r.mqlite_target.startswith("mqlite::")  # type: ignore[attr-defined]
        assert r.pathname.endswith(".rs") and r.lineno > 0
        info = mq.topic("t").partitions[0]
        assert info.truncated_bytes > 0 and info.dropped_batches >= 1
        assert info.end_offset < 5
        # The counters the lead fills in exist (their values are theirs).
        assert isinstance(info.lost_records, int) and isinstance(info.quarantined_bytes, int)
        assert "lost_records=" in repr(info) and "quarantined_bytes=" in repr(info)
    finally:
        mq.close()


def test_clean_directory_logs_nothing_and_counts_zero(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(data_dir, 3)
    with caplog.at_level(logging.DEBUG, logger="mqlite"):
        with reopen(data_dir) as mq:
            info = mq.topic("t").partitions[0]
            c = mq.consumer("g")
            c.assign([("t", 0)])
            assert len(c.consume(3, timeout=5.0)) == 3
            c.commit()
            stats = c.stats()
            c.close()
    assert engine_records(caplog) == []
    assert (info.truncated_bytes, info.dropped_batches, info.torn_tails, info.corruptions) == (0, 0, 0, 0)
    assert (info.lost_records, info.quarantined_bytes) == (0, 0)
    assert stats.offset_resets == 0 and "offset_resets=0" in repr(stats)


def test_level_is_read_at_open_and_filters_in_the_engine(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("mqlite")
    write(data_dir, 3)
    damage(data_dir)
    with caplog.at_level(logging.ERROR, logger="mqlite"):
        with reopen(data_dir) as mq:
            # The engine itself drops warnings now (nothing is queued).
            assert log_level() == logging.ERROR
            assert mq.topic("t").partitions[0].truncated_bytes > 0
        assert engine_records(caplog) == []
        logger.setLevel(logging.DEBUG)
        with reopen(data_dir):
            assert log_level() == logging.DEBUG
        logging.disable(logging.CRITICAL)
        try:
            with reopen(data_dir):
                assert log_level() == 0  # nothing passes
        finally:
            logging.disable(logging.NOTSET)
    with reopen(data_dir):
        assert log_level() == logger.getEffectiveLevel()


def test_records_logged_outside_open_arrive_from_the_delivery_thread(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A time lookup in a sealed segment whose time index disagrees with the
    # log warns in the middle of a call that keeps the GIL: the record is
    # queued and the module's delivery thread emits it, without close().
    with mqlite.open(data_dir, mode=MODE, prefault=False, retention_check_interval_ms=0) as mq:
        mq.create_topic("t", segment_bytes=4096)
        p = mq.producer()
        for i in range(200):
            p.send("t", b"x" * 100, partition=0, timestamp=1_700_000_000_000 + i)
        p.close()
    tix = sorted((data_dir / "topics" / "t" / "0").glob("*.tix"))[0]
    data = bytearray(tix.read_bytes())
    for k in range(0, len(data) - 15, 16):  # entries: ts i64, rel u32, pos u32
        if any(data[k : k + 16]):
            pos = int.from_bytes(data[k + 12 : k + 16], "little") + 1
            data[k + 12 : k + 16] = pos.to_bytes(4, "little")
    tix.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="mqlite"):
        with reopen(data_dir) as mq:
            c = mq.consumer()
            assert c.offsets_for_times([("t", 0, 1_700_000_000_010)]) == [10]
            deadline = time.monotonic() + 60  # liveness, not speed
            while not engine_records(caplog) and time.monotonic() < deadline:
                time.sleep(0.01)
            got = [r for r in engine_records(caplog) if "time index" in r.getMessage()]
            assert len(got) == 1, caplog.text
            assert got[0].name == "mqlite" and got[0].threadName != "MainThread"
            c.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_forked_child_gets_its_own_records(data_dir: Path) -> None:
    # The parent's delivery thread runs (a broker was opened); the child
    # has only the forking thread, yet its records arrive, and the queue's
    # lock is never inherited held.
    write(data_dir, 3)
    damage(data_dir)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            seen: list[str] = []
            handler = logging.Handler()
            handler.emit = lambda r: seen.append(r.getMessage())  # type: ignore[method-assign]
            logging.getLogger("mqlite").addHandler(handler)
            with reopen(data_dir):
                pass
            code = 0 if sum("truncated" in m for m in seen) == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
