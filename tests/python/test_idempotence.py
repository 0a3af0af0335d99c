"""Named producers and application sequences: duplicates are dropped (and
reported with duplicate=True, not raised), gaps raise OutOfOrderSequence
only with strict_sequences, last_sequence() survives restarts and crashes,
and a newer producer of the same name fences the older one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

import pytest

import mqlite

from conftest import drain


def values_in(mq: mqlite.Broker, topic: str) -> list[bytes]:
    total = sum(p.end_offset - p.start_offset for p in mq.topic(topic).partitions)
    c = mq.consumer()
    c.subscribe(topic)
    msgs = drain(c, total) if total else []
    c.close()
    return [m.value or b"" for m in msgs]


def test_resent_sequence_is_a_duplicate_with_the_original_offset(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=3)
    p = mq.producer("orders")
    first = [p.send("t", f"r{i}".encode(), sequence=i) for i in range(10)]
    assert all(not md.duplicate and md.offset is not None for md in first)
    # Without key or partition, a sequenced record goes where its re-send goes.
    assert [md.partition for md in first] == [i % 3 for i in range(10)]
    again = [p.send("t", f"r{i}".encode(), sequence=i) for i in range(10)]
    assert all(md.duplicate for md in again)
    assert [(md.partition, md.offset) for md in again] == [(md.partition, md.offset) for md in first]
    assert sorted(values_in(mq, "t")) == sorted(f"r{i}".encode() for i in range(10))
    st = p.stats()
    assert st.records == 10 and st.duplicates == 10 and st.errors == 0
    assert p.last_sequence() == 9


def test_duplicate_through_produce_and_send_batch(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    p = mq.producer("batcher")
    assert p.send_batch("t", [f"r{i}".encode() for i in range(100)], sequences=0) == 100
    # An overlapping range: only the new records are written.
    assert p.send_batch("t", [f"r{i}".encode() for i in range(50, 150)], sequences=50) == 50
    assert p.send_batch("t", [b"r150", b"r151"], sequences=[150, 151]) == 2
    got: list[tuple[Optional[mqlite.Error], Optional[mqlite.RecordMetadata]]] = []
    p.produce("t", b"r10", sequence=10, on_delivery=lambda e, m: got.append((e, m)))
    p.produce("t", b"r152", sequence=152, on_delivery=lambda e, m: got.append((e, m)))
    p.flush()
    (e1, dup), (e2, new) = got
    assert e1 is None and dup is not None and dup.duplicate and dup.offset == 10
    assert e2 is None and new is not None and not new.duplicate and new.offset == 152
    assert values_in(mq, "t") == [f"r{i}".encode() for i in range(153)]
    assert p.last_sequence() == 152


def test_gaps_allowed_by_default_and_rejected_when_strict(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    lax = mq.producer("lax")
    lax.send("t", b"a", sequence=0)
    assert not lax.send("t", b"b", sequence=5).duplicate  # a gap: fine by default
    assert lax.last_sequence() == 5

    strict = mq.producer("strict", strict_sequences=True)
    strict.send("t", b"c", sequence=0)
    strict.send("t", b"d", sequence=1)
    with pytest.raises(mqlite.OutOfOrderSequence) as info:
        strict.send("t", b"e", sequence=3)
    e = info.value
    assert e.code == 402 and isinstance(e, mqlite.Error)
    assert (e.expected, e.received) == (2, 3)  # type: ignore[attr-defined]
    assert (e.topic, e.partition) == ("t", 0)  # type: ignore[attr-defined]
    # A duplicate is still not an error, even when strict.
    md = strict.send("t", b"d", sequence=1)
    assert md.duplicate and md.offset == 3
    assert values_in(mq, "t") == [b"a", b"b", b"c", b"d"]
    # The gap raised from produce() too, nothing queued.
    with pytest.raises(mqlite.OutOfOrderSequence):
        strict.send_batch("t", [b"x"], sequences=7)
    assert strict.stats().records == 2


def test_last_sequence_survives_reopening(data_dir: Path) -> None:
    with mqlite.open(data_dir) as mq:
        mq.create_topic("t", partitions=2)
        p = mq.producer("durable")
        assert p.last_sequence() is None
        pid = p.producer_id
        for i in range(7):
            p.send("t", b"x", sequence=i)
        p.close()
    with mqlite.open(data_dir) as mq:
        p = mq.producer("durable")
        assert p.producer_id == pid
        assert p.epoch is not None and p.epoch >= 1
        assert p.last_sequence() == 6
        assert p.send("t", b"x", sequence=6).duplicate
        assert not p.send("t", b"x", sequence=7).duplicate
        assert mq.producer("other").last_sequence() is None


CHILD = textwrap.dedent(
    """
    import sys
    import mqlite

    path, total = sys.argv[1], int(sys.argv[2])
    mq = mqlite.open(path)
    if "t" not in mq.topics():
        mq.create_topic("t", partitions=3)
    p = mq.producer("resumable")
    for i in range(total):
        p.send("t", b"rec-%d" % i, sequence=i)
        print(i, flush=True)
    print("done", flush=True)
    """
)


def test_resume_after_kill_9(data_dir: Path, tmp_path: Path) -> None:
    total = 20_000
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    child = subprocess.Popen(
        [sys.executable, str(script), str(data_dir), str(total)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    acked = -1
    for line in child.stdout:
        if line.strip() == "done":
            break
        acked = int(line)
        if acked >= 3000:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL
    assert acked >= 3000

    with mqlite.open(data_dir) as mq:
        p = mq.producer("resumable")
        last = p.last_sequence()
        assert last is not None and last >= acked  # nothing acknowledged is lost
        # Resume from before the last acknowledged record: the overlap is
        # recognised, not written twice.
        start = max(0, acked - 500)
        duplicates = 0
        for i in range(start, total):
            if p.send("t", b"rec-%d" % i, sequence=i).duplicate:
                duplicates += 1
        assert duplicates == last - start + 1
        got = values_in(mq, "t")
    assert len(got) == total  # zero duplicates in the topic
    assert set(got) == {b"rec-%d" % i for i in range(total)}  # zero loss


def test_a_new_producer_of_the_same_name_fences_the_old(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    old = mq.producer("fenced")
    old.send("t", b"before", sequence=0)
    new = mq.producer("fenced")
    assert new.producer_id == old.producer_id
    assert old.epoch is not None and new.epoch == old.epoch + 1
    got: list[object] = []
    for call in [
        lambda: old.send("t", b"late"),
        lambda: old.send("t", b"late", sequence=1),
        lambda: old.produce("t", b"late", on_delivery=lambda e, m: got.append(e)),
        lambda: old.send_batch("t", [b"late", b"late"]),
    ]:
        with pytest.raises(mqlite.ProducerFenced) as info:
            call()
        e = info.value
        assert e.code == 403
        assert (e.epoch, e.current_epoch) == (old.epoch, new.epoch)  # type: ignore[attr-defined]
        assert e.producer_id == old.producer_id  # type: ignore[attr-defined]
    old.flush()
    assert got == []
    assert new.send("t", b"after", sequence=1).offset == 1
    assert values_in(mq, "t") == [b"before", b"after"]


def test_anonymous_idempotent_producers_get_distinct_ids(mq: mqlite.Broker) -> None:
    a, b = mq.producer(), mq.producer()
    assert a.producer_id != b.producer_id
    assert a.epoch == 0 and a.name is None


def test_invalid_idempotence_arguments(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    plain = mq.producer(idempotent=False)
    with pytest.raises(mqlite.InvalidArgument, match="idempotent"):
        plain.send("t", b"x", sequence=0)
    with pytest.raises(mqlite.InvalidArgument, match="idempotent"):
        plain.produce("t", b"x", sequence=0)
    with pytest.raises(mqlite.InvalidArgument, match="idempotent"):
        plain.last_sequence()
    with pytest.raises(mqlite.InvalidArgument, match="idempotent"):
        mq.producer("n", idempotent=False)
    p = mq.producer("n")
    with pytest.raises(mqlite.InvalidArgument):
        p.send("t", b"x", sequence=-1)
    with pytest.raises(mqlite.InvalidArgument):
        p.send_batch("t", [b"x"], sequences=[-1])
    with pytest.raises(TypeError):
        p.send("t", b"x", sequence="1")  # type: ignore[arg-type]
    for bad in ["", "has space", "a/b", "x" * 1000]:
        with pytest.raises(mqlite.InvalidArgument):
            mq.producer(bad)
    with pytest.raises(TypeError):
        mq.producer(5)  # type: ignore[arg-type]
    for window in (0, 1001, -1):
        with pytest.raises(mqlite.InvalidArgument):
            mq.producer(dedup_window=window)
    assert mq.topic("t").partitions[0].end_offset == 0
