"""The job-queue rows of bench/peers.py: taking items one by one and
acknowledging each (persist-queue's ``SQLiteAckQueue`` and its drop-in
``mqlite.compat.persistqueue``, and mqlite's share consumers used directly).

Two groups per size S, the items put before the clock starts:

- ``job queue S B, get + ack per item``: each acknowledgement written to the
  operating system, no fsync (survives ``kill -9``): mqlite
  ``commit_acks=1``, SQLite WAL with ``synchronous=NORMAL``;
- ``... , ack synced``: each acknowledgement on disk before it returns:
  mqlite ``commit_acks="all"``, SQLite ``synchronous=FULL``.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Any

import mqlite

if TYPE_CHECKING:
    from peers import Case, Measure, Scratch


def _fill(mq: mqlite.Broker, n: int, pad: bytes, batch: int) -> None:
    mq.create_topic("t")
    with mq.producer(acks=1) as p:
        for start in range(0, n, batch):
            p.send_batch("t", [pad + i.to_bytes(8, "little") for i in range(start, min(n, start + batch))])


def share_case(scratch: "Scratch", size: int, acks: Any, batch: int, pad_for: Any, check: Any) -> "Measure":
    """A share consumer: ``poll()`` and ``ack()`` per message (batch 1), or
    ``consume(batch)`` and one ``ack(list)`` per batch."""
    pad = pad_for(size)

    def measure(n: int) -> float:
        with scratch.dir() as d:
            with mqlite.open(d, mode="exclusive") as mq:
                _fill(mq, n, pad, 1000)
                sc = mq.share_consumer("jobs", "t", commit_acks=acks, max_poll_records=max(batch, 500))
                total = got = 0
                t0 = perf_counter()
                if batch == 1:
                    while got < n:
                        m = sc.poll(timeout=10.0)
                        if m is None:
                            raise RuntimeError(f"share poll: timed out after {got} of {n}")
                        total += len(m.value)  # type: ignore[arg-type]
                        m.ack()
                        got += 1
                else:
                    while got < n:
                        msgs = sc.consume(min(batch, n - got), timeout=10.0)
                        if not msgs:
                            raise RuntimeError(f"share consume: timed out after {got} of {n}")
                        total += sum(len(m.value) for m in msgs)  # type: ignore[misc]
                        sc.ack(msgs)
                        got += len(msgs)
                secs = perf_counter() - t0
                sc.close()
                check(total, n * size, "share consumer bytes")
                return secs

    return measure


def _put_then_get_ack(q: Any, n: int, pad: bytes, check: Any, name: str) -> float:
    """Seconds for n get + ack on an ack queue, after n untimed puts."""
    for i in range(n):
        q.put(pad + i.to_bytes(8, "little"))
    total = 0
    t0 = perf_counter()
    for _ in range(n):
        item = q.get(block=False)
        total += len(item)
        q.ack(item)
    secs = perf_counter() - t0
    check(total, n * (len(pad) + 8), f"{name} bytes")
    return secs


def compat_case(scratch: "Scratch", size: int, acks: Any, pad_for: Any, check: Any) -> "Measure":
    """``mqlite.compat.persistqueue.SQLiteAckQueue``: get + ack per item."""
    from mqlite.compat import persistqueue as pq

    pad = pad_for(size)

    def measure(n: int) -> float:
        with scratch.dir() as d:
            q = pq.SQLiteAckQueue(str(d / "q"), acks=acks)
            try:
                return _put_then_get_ack(q, n, pad, check, "compat SQLiteAckQueue")
            finally:
                q.close()

    return measure


def pq_ack_case(scratch: "Scratch", size: int, synchronous: str, pad_for: Any, check: Any) -> "Measure":
    """persist-queue ``SQLiteAckQueue``: get + ack per item."""
    import persistqueue

    pad = pad_for(size)

    def measure(n: int) -> float:
        with scratch.dir() as d:
            q = persistqueue.SQLiteAckQueue(str(d / "q"))
            # One connection when multithreading=False; the library offers no setting for this.
            q._putter.execute(f"PRAGMA synchronous={synchronous}")  # type: ignore[attr-defined]
            try:
                return _put_then_get_ack(q, n, pad, check, "persist-queue SQLiteAckQueue")
            finally:
                q.close()

    return measure


def cases(size: int, scratch: "Scratch", case: type["Case"], batch: int, pad_for: Any, check: Any) -> list["Case"]:
    """The job-queue rows of one size."""
    out: list[Case] = []
    for synced in (False, True):
        g = f"job queue {size} B, get + ack per item" + (", ack synced" if synced else "")
        acks: Any = "all" if synced else 1
        mq_note = (
            "commit_acks=all: each acknowledgement fsynced (concurrent ones share a sync)"
            if synced
            else "commit_acks=1: each acknowledgement written to the OS (survives kill -9), no fsync"
        )
        sqlite = "FULL" if synced else "NORMAL"
        sqlite_note = f"SQLite WAL, synchronous={sqlite}: a commit per ack" + (
            ", fsynced" if synced else ", no fsync"
        )
        out += [
            case(
                g,
                "mqlite share consumer poll() + ack()",
                mq_note,
                share_case(scratch, size, acks, 1, pad_for, check),
                reference=True,
                scalable=synced,
            ),
            case(
                g,
                f"mqlite share consumer consume({batch}) + ack(list)",
                mq_note + "; one acknowledgement record per batch",
                share_case(scratch, size, acks, batch, pad_for, check),
                scalable=synced,
            ),
            case(
                g,
                "mqlite.compat.persistqueue SQLiteAckQueue get + ack",
                mq_note,
                compat_case(scratch, size, acks, pad_for, check),
                scalable=True,
            ),
            case(
                g,
                "persist-queue SQLiteAckQueue get + ack",
                sqlite_note,
                pq_ack_case(scratch, size, sqlite, pad_for, check),
            ),
        ]
    return out
