"""mqlite.compat.persistqueue: persist-queue's queues on a data directory
(a topic per queue, a share group to take items). persist-queue's own tests
run against it with tests/python/persistqueue_compat/run.py."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import mqlite
import mqlite.compat.persistqueue as persistqueue


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "q")


def test_exceptions_are_the_queue_modules() -> None:
    assert persistqueue.Empty is queue.Empty
    assert persistqueue.Full is queue.Full
    assert persistqueue.FIFOSQLiteQueue is persistqueue.SQLiteQueue
    assert persistqueue.FIFOSQLiteAckQueue is persistqueue.SQLiteAckQueue


@pytest.mark.parametrize("cls", [persistqueue.Queue, persistqueue.SQLiteQueue, persistqueue.SQLiteAckQueue])
def test_put_get_fifo_and_qsize(path: str, cls: type) -> None:
    q = cls(path)
    assert q.empty() and q.qsize() == 0
    items = [{"n": i, "tags": ["a", i]} for i in range(20)]
    for it in items:
        q.put(it)
    assert q.qsize() == 20 and not q.empty() and not q.full()
    assert [q.get() for _ in range(20)] == items
    assert q.qsize() == 0 and q.empty()
    with pytest.raises(persistqueue.Empty):
        q.get_nowait()
    q.close()


def test_ids_raw_and_get_by_id(path: str) -> None:
    q = persistqueue.SQLiteQueue(path)
    assert [q.put(v) for v in ("a", "b", "c")] == [1, 2, 3]
    assert q.get(id=2) == "b"
    raw = q.get(raw=True)
    assert raw["pqid"] == 1 and raw["data"] == "a" and abs(raw["timestamp"] - time.time()) < 60
    assert q.get() == "c"
    q.close()


def test_ack_nack_ack_failed(path: str) -> None:
    q = persistqueue.SQLiteAckQueue(path)
    for v in ("v1", "v2", "v3", "v4"):
        q.put(v)
    v1, v2, v3 = q.get(), q.get(), q.get()
    assert (q.qsize(), q.unack_count(), q.ready_count(), q.active_size()) == (1, 3, 1, 4)
    assert q.nack(v1) == 1  # ready again, and first in line
    assert q.ack_failed(v3) == 3
    assert q.ack(v2) == 2
    assert q.ack("not handed out") is None
    assert (q.unack_count(), q.acked_count(), q.ack_failed_count()) == (0, 1, 1)
    again = q.get(raw=True)
    assert again["data"] == "v1" and again["pqid"] == 1
    assert q.ack(again) == 1  # a raw item names its id
    assert q.get() == "v4"
    assert q.ack(id=4) == 4
    assert (q.qsize(), q.unack_count(), q.acked_count()) == (0, 0, 3)
    q.clear_acked_data(keep_latest=1)
    assert q.acked_count() == 1
    q.close()
    # ack_failed sent v3 to the dead-letter topic; nothing else is left.
    with mqlite.open(path) as mq:
        dead = [t for t in mq.topics() if t.endswith(".failed")]
        assert dead == ["pq.ack.default.failed"]
        c = mq.consumer(auto_offset_reset="earliest")
        c.assign([(dead[0], 0)])
        m = c.poll(timeout=5)
        assert m is not None and m.value is not None
        assert dict(m.headers)["mqlite.dlq.reason"] == b"ack_failed"
        c.close()
    q = persistqueue.SQLiteAckQueue(path)
    assert q.qsize() == 0
    with pytest.raises(persistqueue.Empty):
        q.get(block=False)
    q.close()


def test_blocking_get_times_out_and_wakes_on_put(path: str) -> None:
    q = persistqueue.SQLiteAckQueue(path)
    start = time.monotonic()
    with pytest.raises(queue.Empty):
        q.get(timeout=0.2)
    assert 0.15 < time.monotonic() - start < 2
    with pytest.raises(ValueError):
        q.get(timeout=-1)
    got: list = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
    t.start()
    time.sleep(0.1)
    q.put("late")
    t.join(10)
    assert got == ["late"]
    q.close()


def test_queue_maxsize_task_done_and_join(path: str) -> None:
    q = persistqueue.Queue(path, maxsize=2)
    q.put(1)
    q.put(2)
    assert q.full()
    with pytest.raises(persistqueue.Full):
        q.put(3, block=False)
    with pytest.raises(persistqueue.Full):
        q.put(3, timeout=0.1)
    assert q.get() == 1
    q.put_nowait(3)
    for _ in range(2):
        q.get()
    for _ in range(3):
        q.task_done()
    q.join()
    with pytest.raises(ValueError):
        q.task_done()
    q.close()


def test_reopen_gives_back_what_was_not_acked(path: str) -> None:
    q = persistqueue.SQLiteAckQueue(path)
    for v in ("a", "b", "c"):
        q.put(v)
    a, b = q.get(), q.get()
    q.ack(a)
    assert b == "b" and q.unack_count() == 1
    del q  # closed: "b" is ready again
    q = persistqueue.SQLiteAckQueue(path)
    assert (q.qsize(), q.unack_count()) == (2, 0)
    assert q.get() == "b" and q.get() == "c"
    q.close()


@pytest.mark.parametrize("kind", ["Queue", "SQLiteQueue"])
def test_reopen_before_task_done_gives_items_back(path: str, kind: str) -> None:
    def make() -> object:
        if kind == "Queue":
            return persistqueue.Queue(path)
        return persistqueue.SQLiteQueue(path, auto_commit=False)

    q = make()
    for i in range(5):
        q.put(i)
    assert q.get() == 0
    q.task_done()  # 0 is done
    assert q.get() == 1 and q.get() == 2
    q.close()  # 1 and 2 were not made done
    q = make()
    assert q.qsize() == 4
    assert [q.get() for _ in range(4)] == [1, 2, 3, 4]
    q.close()


def test_resume_unack_tasks_gives_back_this_queues_items(path: str) -> None:
    q = persistqueue.SQLiteAckQueue(path)
    q.put("x")
    x = q.get()
    q.resume_unack_tasks()
    assert (q.qsize(), q.unack_count()) == (1, 0)
    assert q.ack(x) is None  # given back: no longer this queue's
    assert q.get() == "x"
    q.close()


def test_serializers_and_names(path: str) -> None:
    q = persistqueue.SQLiteQueue(path, name="with spaces/and slashes", serializer=persistqueue.serializers.json)
    q.put({"a": [1, 2]})
    other = persistqueue.SQLiteQueue(path)  # another name: another queue, same directory
    assert other.empty()
    assert q.get() == {"a": [1, 2]}
    f = persistqueue.Queue(path, serializer=persistqueue.serializers.json)
    f.put([1, "two"])
    assert f.get() == [1, "two"]
    for x in (q, other, f):
        x.close()
    mem = persistqueue.SQLiteAckQueue(":memory:")
    mem.put(b"bytes")
    assert mem.get() == b"bytes"
    mem.close()


CHILD = r"""
import sys
import mqlite.compat.persistqueue as persistqueue
q = persistqueue.SQLiteAckQueue(sys.argv[1])
out = sys.stdout
i = int(sys.argv[2])
nacked = set()
while True:
    q.put(i)
    out.write(f"p {i}\n"); out.flush()
    i += 1
    item = q.get()
    out.write(f"g {item}\n"); out.flush()
    if item % 3 == 0 and item not in nacked:
        nacked.add(item)
        q.nack(item)  # delivered again next
        continue
    q.ack(item)
    out.write(f"a {item}\n"); out.flush()
"""


def test_kill_9_loses_no_put_item_and_redelivers_no_acked_one(path: str) -> None:
    put: set = set()
    got: set = set()
    acked: set = set()
    start = 0
    for _ in range(3):
        child = subprocess.Popen([sys.executable, "-c", CHILD, path, str(start)], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        lines = 0
        deadline = time.monotonic() + 20
        for line in child.stdout:
            op, n = line.split()
            {"p": put, "g": got, "a": acked}[op].add(int(n))
            lines += 1
            if lines >= 150 + 37 * start % 50 or time.monotonic() > deadline:
                os.kill(child.pid, signal.SIGKILL)
                break
        child.wait()
        for line in child.stdout:  # what it wrote before it died
            op, n = line.split()
            {"p": put, "g": got, "a": acked}[op].add(int(n))
        start = max(put) + 1000
    q = persistqueue.SQLiteAckQueue(path)
    left = []
    while True:
        try:
            left.append(q.get(block=False))
        except persistqueue.Empty:
            break
    q.close()
    assert len(left) == len(set(left))
    assert not set(left) & acked, "an acknowledged item was delivered again"
    assert put - got <= set(left), "an item put was lost"
    # Every item put was acked or is left, but for the one in hand at each
    # kill (its ack may have gone through, unreported).
    assert len(put - acked - set(left)) <= 3
    assert len(put) > 100 and len(acked) > 50
