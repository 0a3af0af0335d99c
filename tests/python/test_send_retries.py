"""Retries and fault avoidance from Python: with one partition full (a
file-size limit, SIGXFSZ ignored), key-less records go to the other
partitions and all land once; keyed and explicit-partition records raise
mqlite.DiskFull; the stats count the retry and the avoided partition. The
full-disk part runs in a subprocess: the limit is process-wide."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mqlite

SCRIPT = textwrap.dedent(
    """
    import resource, signal, sys
    import mqlite

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def limit(n):
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, hard))

    mq = mqlite.open(sys.argv[1], prefault=False, retention_check_interval_ms=0)
    mq.create_topic("t", 3, segment_bytes=64 * 1024)
    p = mq.producer()
    rr = mq.producer(partitioner="round_robin", retries=2, fault_backoff_ms=60_000)
    lingering = mq.producer(partitioner="round_robin", linger_ms=5)
    for _ in range(50):
        p.send("t", b"f" * 1000, partition=1)

    limit(1024)
    # Partition 1 fills up: explicit sends fail with the typed error.
    err = None
    for _ in range(200):
        try:
            p.send("t", b"f" * 1000, partition=1)
        except mqlite.DiskFull as e:
            err = e
            break
    assert err is not None, "partition 1 never filled"
    while True:
        try:
            p.send("t", b"small-0000", partition=1)
        except mqlite.DiskFull:
            break
    key = next(k for k in (b"key-%d" % i for i in range(100000))
               if mqlite.partition_for_key(k, 3) == 1)
    try:
        p.send("t", b"keyed", key=key)
    except mqlite.DiskFull:
        pass
    else:
        raise AssertionError("a keyed record moved")

    # Key-less records: sent, batched and lingering, all land elsewhere.
    values = []
    for i in range(30):
        v = b"one-%05d" % i
        assert rr.send("t", v).partition != 1
        values.append(v)
    batch = [b"bat-%05d" % i for i in range(30)]
    assert rr.send_batch("t", batch) == 30
    values += batch
    reports = []
    for i in range(30):
        v = b"asy-%05d" % i
        lingering.produce("t", v, on_delivery=lambda err, md: reports.append((err, md)))
        values.append(v)
    lingering.flush()
    assert len(reports) == 30
    assert all(err is None and md.partition != 1 for err, md in reports), reports
    st, lst = rr.stats(), lingering.stats()
    limit(hard)
    assert st.avoided_partitions == 1 and st.retries >= 1, st
    assert lst.avoided_partitions == 1 and lst.retries >= 1, lst
    assert st.errors == 0 and lst.errors == 0

    c = mq.consumer()
    c.assign([("t", 0), ("t", 1), ("t", 2)])
    got = [(m.partition, m.value) for m in c.consume(100000, timeout=1.0)]
    wanted = set(values)
    mine = [(part, v) for part, v in got if v in wanted]
    assert sorted(v for _, v in mine) == sorted(values), (len(mine), len(values))
    assert all(part != 1 for part, _ in mine)
    assert not any(v == b"keyed" for _, v in got)
    mq.close()
    print("ok", st.retries, lst.retries)
    """
)


def test_key_less_records_avoid_a_full_partition(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok"), run.stdout


def test_settings_are_checked(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "d") as mq:
        for kw in ("retries", "fault_backoff_ms", "delivery_timeout_ms"):
            with pytest.raises(mqlite.InvalidArgument, match=kw):
                mq.producer(**{kw: -1})
        with pytest.raises(mqlite.InvalidArgument, match="retries"):
            mq.producer(retries=2**32)
        p = mq.producer(retries=0, fault_backoff_ms=0, delivery_timeout_ms=0)
        st = p.stats()
        assert st.retries == 0 and st.avoided_partitions == 0
        assert "avoided_partitions=0" in repr(st)
