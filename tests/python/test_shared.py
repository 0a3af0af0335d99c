"""Shared mode (``mqlite.open(path, shared=True)``, ``mode=...`` and ``readonly=True``):
several processes on one data directory.

The worker processes are started with ``multiprocessing``'s "spawn"
method, so each opens the directory with a handle of its own; they report
what they did through a queue. One test forks with ``os.fork()`` to check
what a child inherits from a shared parent.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from pathlib import Path
from typing import Any, Optional

import pytest

import mqlite

SPAWN = multiprocessing.get_context("spawn")
TOPIC = "jobs"
GROUP = "workers"
PARTITIONS = 4
WORKERS = 3
RECORDS = 600


def open_shared(path: str, **kwargs: Any) -> mqlite.Broker:
    return mqlite.open(path, prefault=False, retention_check_interval_ms=0, shared=True, **kwargs)


def group_worker(path: str, name: str, stop: Any, results: Any) -> None:
    """A member of GROUP: consumes and commits until `stop` is set, noting
    when it owned which partition (a monotonic clock, the same in every
    process) and what it received. Puts its report on `results`."""
    report: dict[str, Any] = {"name": name, "pid": os.getpid(), "owned": [], "got": [], "error": None}
    try:
        mq = open_shared(path)
        owned: dict[int, float] = {}
        stray: list[tuple[int, int]] = []

        def on_assign(_c: mqlite.Consumer, tps: list[tuple[str, int]]) -> None:
            now = time.monotonic()
            for _t, p in tps:
                owned[p] = now

        def on_revoke(_c: mqlite.Consumer, tps: list[tuple[str, int]]) -> None:
            now = time.monotonic()
            for _t, p in tps:
                if p in owned:
                    report["owned"].append((p, owned.pop(p), now))

        consumer = mq.consumer(GROUP, client_id=name, enable_auto_commit=False)
        consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        while not stop.is_set():
            batch = consumer.consume(100, timeout=0.1)
            for m in batch:
                if m.partition not in owned:
                    stray.append((m.partition, m.offset))
                report["got"].append((m.partition, m.offset, m.value))
            if batch:
                consumer.commit()
        # Closing leaves the group; nobody can own these partitions before
        # it starts.
        now = time.monotonic()
        consumer.close()
        for p, since in owned.items():
            report["owned"].append((p, since, now))
        report["stray"] = stray
        mq.close()
    except BaseException as e:  # reported to the parent, which fails the test
        report["error"] = f"{type(e).__name__}: {e}"
    results.put(report)


def readonly_reader(path: str, expected: int, results: Any) -> None:
    """Opens read-only and reads TOPIC from the start until `expected`
    records arrived (the parent writes meanwhile); reports them and what a
    producer and a topic creation raised."""
    report: dict[str, Any] = {"got": [], "error": None, "refused": []}
    try:
        mq = mqlite.open(path, readonly=True)
        for attempt in (lambda: mq.producer(), lambda: mq.create_topic("other")):
            try:
                attempt()
                report["refused"].append(None)
            except mqlite.Error as e:
                report["refused"].append(type(e).__name__)
        consumer = mq.consumer()
        consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while len(report["got"]) < expected and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=0.5):
                report["got"].append((m.partition, m.offset, m.value))
        report["topics"] = mq.topics()
        consumer.close()
        mq.close()
    except BaseException as e:
        report["error"] = f"{type(e).__name__}: {e}"
    results.put(report)


def writer_attempt(path: str, results: Any) -> None:
    """Opens shared and writes one record to partition 0 of TOPIC beside
    the parent; reports its offset (or the error)."""
    out: dict[str, Any] = {"error": None}
    try:
        with open_shared(path) as mq:
            try:
                md = mq.producer().send(TOPIC, b"second", partition=0)
                out["producer"] = None
                out["offset"] = md.offset
            except mqlite.Error as e:
                out["producer"] = (type(e).__name__, str(e))
            out["topics"] = mq.topics()
    except BaseException as e:
        out["error"] = f"{type(e).__name__}: {e}"
    results.put(out)


def exclusive_attempt(path: str, results: Any) -> None:
    """Tries an exclusive open while the parent holds the directory shared."""
    try:
        mqlite.open(path, mode="exclusive").close()
        results.put(None)
    except mqlite.Error as e:
        results.put(type(e).__name__)


def member_then_fork(path: str, results: Any) -> None:
    """Joins GROUP and takes every partition, then forks a child that
    sleeps, and waits to be killed. Reports the child's pid."""
    try:
        mq = open_shared(path)
        consumer = mq.consumer(GROUP, max_poll_interval_ms=300_000)
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while len(consumer.assignment()) < PARTITIONS and time.monotonic() < deadline:
            consumer.poll(timeout=0.1)
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        results.put((pid, sorted(consumer.assignment())))
    except BaseException as e:
        results.put((None, f"{type(e).__name__}: {e}"))
    time.sleep(120)


def get(results: Any, n: int, timeout: float = 120.0) -> list[Any]:
    out = []
    for _ in range(n):
        try:
            out.append(results.get(timeout=timeout))
        except queue.Empty:
            pytest.fail(f"{len(out)} of {n} worker reports arrived within {timeout} s")
    return out


def wait_for_members(mq: mqlite.Broker, n: int, timeout: float = 60.0) -> None:
    """Waits until GROUP has `n` members (in any process)."""
    deadline = time.monotonic() + timeout
    while len(mq.describe_group(GROUP).members) < n:
        if time.monotonic() > deadline:
            pytest.fail(f"the group has {mq.describe_group(GROUP).members}, not {n} members")
        time.sleep(0.05)


def value(i: int) -> bytes:
    return b"job-%d" % i


def test_group_workers_in_processes_share_the_partitions(data_dir: Path) -> None:
    path = str(data_dir)
    mq = open_shared(path)
    try:
        mq.create_topic(TOPIC, partitions=PARTITIONS)
        producer = mq.producer()
        stop = SPAWN.Event()
        results = SPAWN.Queue()
        workers = []
        # The workers join one after another while records are written:
        # each join moves partitions between the members.
        for w in range(WORKERS):
            proc = SPAWN.Process(target=group_worker, args=(path, f"w{w}", stop, results))
            proc.start()
            workers.append(proc)
            wait_for_members(mq, w + 1)
            for i in range(w * RECORDS // WORKERS, (w + 1) * RECORDS // WORKERS):
                producer.send(TOPIC, value(i), key=b"%d" % i)
                if i % 50 == 0:
                    time.sleep(0.05)
        producer.flush()
        ends = {p: i.end_offset for p, i in enumerate(mq.topic(TOPIC).partitions)}
        assert sum(ends.values()) == RECORDS
        # Until the group committed everything (from the parent's own view).
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            committed = mq.describe_group(GROUP).committed
            if all(committed.get((TOPIC, p), (0, ""))[0] >= ends[p] for p in range(PARTITIONS)):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the group committed {mq.describe_group(GROUP).committed}, the ends are {ends}")
        stop.set()
        reports = get(results, WORKERS)
        for proc in workers:
            proc.join(30)
            assert proc.exitcode == 0
    finally:
        mq.close()

    for r in reports:
        assert r["error"] is None, r
        assert r["stray"] == [], f"{r['name']} got records of partitions it did not own: {r['stray'][:5]}"
    # Every record at least once, with the value written.
    got = {(p, o): v for r in reports for p, o, v in r["got"]}
    assert sorted(got) == sorted((p, o) for p in range(PARTITIONS) for o in range(ends[p]))
    assert sorted(got.values()) == sorted(value(i) for i in range(RECORDS))
    # One owner per partition at a time: the intervals of different
    # workers over one partition do not overlap.
    for p in range(PARTITIONS):
        spans = sorted((since, until, r["name"]) for r in reports for q, since, until in r["owned"] if q == p)
        assert spans, f"nobody owned partition {p}"
        for i, (s1, u1, n1) in enumerate(spans):
            for s2, u2, n2 in spans[i + 1 :]:
                assert n1 == n2 or u1 <= s2, f"partition {p}: {n1} owned it {s1}..{u1}, {n2} {s2}..{u2}"
    # More than one worker did work.
    assert sum(1 for r in reports if r["got"]) >= 2


def test_readonly_reader_process_while_the_parent_writes(data_dir: Path) -> None:
    path = str(data_dir)
    with open_shared(path) as mq:
        mq.create_topic(TOPIC, partitions=PARTITIONS)
        producer = mq.producer()
        for i in range(RECORDS // 2):
            producer.send(TOPIC, value(i))
        producer.flush()
        results = SPAWN.Queue()
        proc = SPAWN.Process(target=readonly_reader, args=(path, RECORDS, results))
        proc.start()
        for i in range(RECORDS // 2, RECORDS):
            producer.send(TOPIC, value(i))
            if i % 50 == 0:
                producer.flush()
                time.sleep(0.02)
        producer.flush()
        (report,) = get(results, 1)
        proc.join(30)
    assert report["error"] is None, report
    assert report["refused"] == ["ReadOnly", "ReadOnly"]
    assert report["topics"] == [TOPIC]
    assert sorted(v for _p, _o, v in report["got"]) == sorted(value(i) for i in range(RECORDS))
    per_partition: dict[int, list[int]] = {}
    for p, o, _v in report["got"]:
        per_partition.setdefault(p, []).append(o)
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets)))


def test_readonly_refuses_writes(data_dir: Path) -> None:
    with mqlite.open(data_dir) as mq:
        mq.create_topic(TOPIC, partitions=1)
        mq.producer().send(TOPIC, b"one")
    with mqlite.open(data_dir, readonly=True) as ro:
        with pytest.raises(mqlite.ReadOnly) as e:
            ro.producer()
        assert e.value.code == 7 and mqlite.ReadOnly.code == 7
        with pytest.raises(mqlite.ReadOnly):
            ro.create_topic("other")
        with pytest.raises(mqlite.ReadOnly):
            ro.delete_topic(TOPIC)
        with pytest.raises(mqlite.ReadOnly):
            ro.add_partitions(TOPIC, 2)
        consumer = ro.consumer("g", enable_auto_commit=False)
        consumer.assign([(TOPIC, 0)])
        (m,) = consumer.consume(1, timeout=5)
        assert m.value == b"one"
        with pytest.raises(mqlite.ReadOnly):
            consumer.commit()
        assert ro.topics() == [TOPIC]
        assert len(ro.topic(TOPIC).partitions) == 1
        consumer.close()
    # Nothing was changed: the exclusive open finds the topic as it was.
    with mqlite.open(data_dir) as mq:
        assert mq.topics() == [TOPIC]
        assert mq.topic(TOPIC).partitions[0].end_offset == 1
        assert mq.describe_group("g").committed == {}
    assert issubclass(mqlite.ReadOnly, mqlite.Error)
    assert "ReadOnly" in mqlite.__all__


# The shared-mode lock files every shared handle takes (created if missing).
LOCK_FILES = {"LIVE", "INIT", "mqlite.shm"}


def tree(data_dir: Path) -> list[tuple[str, int, int]]:
    """Every path below `data_dir` but the lock files, with size and mtime."""
    return sorted(
        (str(p.relative_to(data_dir)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in data_dir.rglob("*")
        if str(p.relative_to(data_dir)) not in LOCK_FILES
    )


def readonly_session(data_dir: Path, group: Optional[str]) -> None:
    """Reads a record through a read-only handle (with a consumer in
    `group`, if any) and tries to write."""
    with mqlite.open(data_dir, readonly=True) as ro:
        consumer = ro.consumer(group, enable_auto_commit=False)
        consumer.assign([(TOPIC, 0)])
        assert len(consumer.consume(1, timeout=5)) == 1
        if group is not None:
            with pytest.raises(mqlite.ReadOnly):
                consumer.commit()
        consumer.close()
        with pytest.raises(mqlite.ReadOnly):
            ro.producer()
        with pytest.raises(mqlite.ReadOnly):
            ro.create_topic("other")


def test_readonly_writes_no_data(data_dir: Path) -> None:
    with mqlite.open(data_dir) as mq:
        mq.create_topic(TOPIC, partitions=1)
        mq.producer().send(TOPIC, b"one")
    before = tree(data_dir)
    readonly_session(data_dir, None)
    assert tree(data_dir) == before


def test_readonly_group_consumer_writes_no_data(data_dir: Path) -> None:
    with mqlite.open(data_dir) as mq:
        mq.create_topic(TOPIC, partitions=1)
        mq.producer().send(TOPIC, b"one")
    before = tree(data_dir)
    readonly_session(data_dir, "g")
    assert tree(data_dir) == before


def test_readonly_open_of_a_missing_directory_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "data"
    with pytest.raises(mqlite.InvalidArgument, match="not a data directory"):
        mqlite.open(missing, readonly=True)
    assert not (tmp_path / "nope").exists()


def test_exclusive_and_shared_exclude_each_other(data_dir: Path) -> None:
    path = str(data_dir)
    with open_shared(path):
        results = SPAWN.Queue()
        proc = SPAWN.Process(target=exclusive_attempt, args=(path, results))
        proc.start()
        assert get(results, 1) == ["Locked"]
        proc.join(30)
        with pytest.raises(mqlite.Locked):
            mqlite.open(path, mode="exclusive")
    with mqlite.open(path, mode="exclusive"):
        with pytest.raises(mqlite.Locked):
            open_shared(path)
        with pytest.raises(mqlite.Locked):
            mqlite.open(path, readonly=True)


def test_mode_names_the_mode_and_auto_takes_shared_mode_here(data_dir: Path) -> None:
    path = str(data_dir)
    with mqlite.open(path, mode="auto", prefault=False) as a:
        assert a.mode == "shared"
        # Another handle in this process shares the engine; exclusive mode
        # is refused while it is open, by name or by shared=False.
        with mqlite.open(path, mode="SHARED") as b:
            assert b.mode == "shared"
        for kwargs in ({"mode": "exclusive"}, {"shared": False}, {}):
            with pytest.raises(mqlite.Locked):
                mqlite.open(path, **kwargs)
    with mqlite.open(path) as x:
        assert x.mode == "exclusive"
    with mqlite.open(path, shared=True, mode="shared") as y:
        assert y.mode == "shared"
    for kwargs in ({"mode": "both"}, {"mode": "exclusive", "shared": True}, {"mode": "shared", "shared": False}):
        with pytest.raises(mqlite.InvalidArgument):
            mqlite.open(path, **kwargs)
    with pytest.raises(TypeError):
        mqlite.open(path, mode=1)


def test_a_second_process_writes_beside_the_first(data_dir: Path) -> None:
    path = str(data_dir)
    with open_shared(path) as mq:
        mq.create_topic(TOPIC)
        producer = mq.producer()
        assert producer.send(TOPIC, b"first", partition=0).offset == 0
        results = SPAWN.Queue()
        proc = SPAWN.Process(target=writer_attempt, args=(path, results))
        proc.start()
        (out,) = get(results, 1)
        proc.join(30)
        assert out["error"] is None and out["producer"] is None, out
        assert out["offset"] == 1 and out["topics"] == [TOPIC], out
        assert producer.send(TOPIC, b"third", partition=0).offset == 2


def test_second_open_in_one_process_sees_the_same_topics(data_dir: Path) -> None:
    a = open_shared(str(data_dir))
    b = open_shared(str(data_dir))
    try:
        a.create_topic("t1", partitions=2)
        assert "t1" in b.topics()
        b.producer().send("t1", b"from b", partition=1)
        assert a.topic("t1").partitions[1].end_offset == 1
        consumer = a.consumer()
        consumer.assign([("t1", 1)])
        (m,) = consumer.consume(1, timeout=5)
        assert m.value == b"from b"
        consumer.close()
        b.close()
        # Closing one handle leaves the other working.
        assert a.topics() == ["t1"]
        a.create_topic("t2")
    finally:
        b.close()
        a.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_inherits_no_locks_of_a_shared_parent(data_dir: Path) -> None:
    path = str(data_dir)
    mq = open_shared(path)
    mq.create_topic(TOPIC)
    mq.producer().send(TOPIC, b"before fork")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: opens the directory itself, then waits
        code = 1
        try:
            os.close(w)
            with open_shared(path) as own:
                consumer = own.consumer()
                consumer.assign([(TOPIC, 0)])
                got = consumer.consume(1, timeout=5)
                code = 0 if [m.value for m in got] == [b"before fork"] else 2
                consumer.close()
            os.read(r, 1)  # until the parent is done
        finally:
            os._exit(code)
    os.close(r)
    try:
        mq.close()
        # The child lives on and held none of the parent's locks: another
        # process writes, and exclusive mode is refused only while the
        # child's own shared handle is open.
        results = SPAWN.Queue()
        proc = SPAWN.Process(target=writer_attempt, args=(path, results))
        proc.start()
        (out,) = get(results, 1)
        proc.join(30)
        assert out["error"] is None and out["producer"] is None, out
    finally:
        os.write(w, b"x")
        os.close(w)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_keep_a_dead_member_alive(data_dir: Path) -> None:
    """A member's process forks, then dies: its child must not hold the
    member's liveness lock, or the group would wait `max_poll_interval_ms`
    (here 300 s) before giving its partitions to another member."""
    path = str(data_dir)
    with open_shared(path) as mq:
        mq.create_topic(TOPIC, partitions=PARTITIONS)
    results = SPAWN.Queue()
    proc = SPAWN.Process(target=member_then_fork, args=(path, results))
    proc.start()
    ((grandchild, owned),) = get(results, 1)
    try:
        assert grandchild is not None, owned
        assert owned == [(TOPIC, p) for p in range(PARTITIONS)]
        proc.kill()  # dies without leaving the group; its child lives on
        # (join() would wait for the child too, which holds a descriptor
        # of multiprocessing's: is_alive() reaps the process itself.)
        deadline = time.monotonic() + 30
        while proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not proc.is_alive()
        with open_shared(path) as mq:
            consumer = mq.consumer(GROUP, max_poll_interval_ms=300_000)
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 20
            while len(consumer.assignment()) < PARTITIONS and time.monotonic() < deadline:
                consumer.poll(timeout=0.1)
            assert len(consumer.assignment()) == PARTITIONS, mq.describe_group(GROUP).members
            consumer.close()
    finally:
        if grandchild is not None:
            os.kill(grandchild, 9)
