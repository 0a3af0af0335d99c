"""Named producers in several writer processes of one shared data directory
(``mqlite.open(path, shared=True)``):

- the **writer storm**: writer processes with named producers send records
  with their own sequences while the test kills them with ``SIGKILL`` at
  random moments and starts them again, each resuming after its
  ``last_sequence()``; a reader process checks every record as it reads.
  At the end every producer's sequences are there once each, from 0 to its
  last, the offsets are dense and every acknowledged record is there,
  intact;
- **fencing across processes**: a newer instance of a name in another
  process gets the same producer id, a higher epoch and the older one's
  ``last_sequence()``; the older one's next send raises ``ProducerFenced``;
- **a topic deleted under a writer** in another process: its next send
  raises ``UnknownTopic``, and it writes again once the topic is created
  again.

Processes are made with ``multiprocessing``'s "spawn" method: each opens
the directory with a handle of its own.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import random
import time
from pathlib import Path
from typing import Any

import pytest

import mqlite

SPAWN = multiprocessing.get_context("spawn")
STORM = "storm"
PARTITIONS = 2
WRITERS = 2
STORM_SECONDS = 4.0


def open_shared(path: str) -> mqlite.Broker:
    return mqlite.open(path, prefault=False, retention_check_interval_ms=0, shared=True)


def value(w: int, seq: int) -> bytes:
    """Writer `w`'s record of sequence `seq`: a tag, then 0-63 bytes that
    depend on both, so that a record read back can be checked whole."""
    tail = bytes((seq * 7 + w * 13 + i) % 251 for i in range(seq % 64))
    return b"p%d-%d-" % (w, seq) + tail


def parse(v: bytes) -> tuple[int, int]:
    """(writer, sequence) of a record `value` made; AssertionError if it is
    not one of them, whole."""
    tag, _, _rest = v.partition(b"-")
    w = int(tag[1:])
    seq = int(v.split(b"-")[1])
    assert v == value(w, seq), f"damaged record {v[:40]!r}"
    return w, seq


def read_values(mq: mqlite.Broker, topic: str, n: int) -> list[bytes]:
    """The values of partition 0 of `topic` from its start, `n` of them."""
    consumer = mq.consumer()
    consumer.assign([(topic, 0)])
    out: list[bytes] = []
    while len(out) < n:
        batch = consumer.consume(n - len(out), timeout=5.0)
        assert batch, f"read {len(out)} of {n}"
        out.extend(m.value or b"" for m in batch)
    consumer.close()
    return out


def get(results: Any, timeout: float = 120.0) -> Any:
    try:
        return results.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"no report within {timeout} s")


def storm_writer(path: str, w: int, acks: Any, journal: str) -> None:
    """Writer `w`: its named producer `p<w>` resumes after its
    `last_sequence()` and sends one record at a time, sequence `seq` to
    partition `seq % PARTITIONS`, journalling `<seq> <offset>` of each
    acknowledged one, until it is killed."""
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with open_shared(path) as mq:
        p = mq.producer(f"p{w}", acks=acks)
        last = p.last_sequence()
        seq = 0 if last is None else last + 1
        while True:
            md = p.send(STORM, value(w, seq), partition=seq % PARTITIONS, sequence=seq)
            assert md is not None and md.offset is not None and not md.duplicate
            os.write(fd, b"%d %d %d\n" % (seq, md.partition, md.offset))
            seq += 1


def storm_reader(path: str, ready: Any, stop: Any, results: Any) -> None:
    """Reads every partition of STORM from the start while the writers
    write, until `stop` is set and nothing new arrives: each record whole,
    offsets dense, each writer's sequences rising in each partition.
    Reports how many it read, or the first fault."""
    out: dict[str, Any] = {"error": None, "read": 0}
    try:
        with open_shared(path) as mq:
            consumer = mq.consumer()
            consumer.assign([(STORM, p) for p in range(PARTITIONS)])
            for p in range(PARTITIONS):
                consumer.seek_to_beginning(STORM, p)
            ready.set()
            next_offset = [0] * PARTITIONS
            last_seq: dict[tuple[int, int], int] = {}
            quiet = 0
            while quiet < 5 or not stop.is_set():
                batch = consumer.consume(500, timeout=0.1)
                quiet = 0 if batch else quiet + 1
                for m in batch:
                    assert m.offset == next_offset[m.partition], (
                        f"partition {m.partition}: offset {m.offset} after {next_offset[m.partition] - 1}"
                    )
                    next_offset[m.partition] += 1
                    w, seq = parse(m.value or b"")
                    assert seq % PARTITIONS == m.partition, f"p{w} seq {seq} in partition {m.partition}"
                    before = last_seq.get((w, m.partition), -1)
                    assert seq > before, f"p{w}: seq {seq} after {before} in partition {m.partition}"
                    last_seq[(w, m.partition)] = seq
                    out["read"] += 1
            consumer.close()
    except BaseException as e:  # reported to the parent, which fails the test
        out["error"] = f"{type(e).__name__}: {e}"
        ready.set()
    results.put(out)


def test_writer_storm_named_producers_resume_after_kill_9(data_dir: Path, tmp_path: Path) -> None:
    path = str(data_dir)
    with open_shared(path) as mq:
        mq.create_topic(STORM, partitions=PARTITIONS)
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    journals = [str(tmp_path / f"journal-{w}") for w in range(WRITERS)]
    acks: list[Any] = ["all", 1]

    def start(w: int) -> Any:
        proc = SPAWN.Process(target=storm_writer, args=(path, w, acks[w % 2], journals[w]))
        proc.start()
        return proc

    ready, stop, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    rd = SPAWN.Process(target=storm_reader, args=(path, ready, stop, results))
    rd.start()
    assert ready.wait(60), "the reader never started"
    procs = [start(w) for w in range(WRITERS)]
    kills = 0
    deadline = time.monotonic() + STORM_SECONDS
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 0.7))
        w = rng.randrange(WRITERS)
        if procs[w].exitcode is not None:
            pytest.fail(f"writer {w} ended by itself (exit code {procs[w].exitcode}); seed {seed}")
        procs[w].kill()
        procs[w].join(30)
        kills += 1
        procs[w] = start(w)
    time.sleep(0.5)  # the last ones started send too
    for proc in procs:
        assert proc.exitcode is None, f"a writer ended by itself (exit code {proc.exitcode}); seed {seed}"
        proc.kill()
        proc.join(30)
    stop.set()
    seen = get(results)
    rd.join(30)
    assert rd.exitcode == 0
    assert seen["error"] is None, f"{seen['error']}; seed {seed}"
    assert kills >= 3

    # Everything, read again by a fresh handle.
    got: dict[int, dict[int, tuple[int, int]]] = {w: {} for w in range(WRITERS)}
    total = 0
    with open_shared(path) as mq:
        consumer = mq.consumer()
        consumer.assign([(STORM, p) for p in range(PARTITIONS)])
        ends = [mq.topic(STORM).partitions[p].end_offset for p in range(PARTITIONS)]
        total = sum(ends)
        offsets: list[list[int]] = [[] for _ in range(PARTITIONS)]
        while sum(len(o) for o in offsets) < total:
            batch = consumer.consume(1000, timeout=5.0)
            assert batch, f"read {sum(len(o) for o in offsets)} of {total}"
            for m in batch:
                offsets[m.partition].append(m.offset)
                w, seq = parse(m.value or b"")
                assert seq not in got[w], f"p{w}: seq {seq} twice; seed {seed}"
                got[w][seq] = (m.partition, m.offset)
        consumer.close()
        for p in range(PARTITIONS):
            assert offsets[p] == list(range(ends[p])), f"partition {p}: offsets not dense"
        for w in range(WRITERS):
            seqs = sorted(got[w])
            assert seqs == list(range(len(seqs))), f"p{w}: sequences with gaps; seed {seed}"
            assert len(seqs) > 0, f"p{w} wrote nothing"
            p = mq.producer(f"p{w}")
            assert p.last_sequence() == seqs[-1]
            p.close()
    assert seen["read"] == total, f"the reader read {seen['read']} of {total}"
    for w in range(WRITERS):
        lines = Path(journals[w]).read_bytes().splitlines()
        assert lines, f"p{w} acknowledged nothing"
        for line in lines:
            # One write(2) a line: a kill leaves it whole or absent.
            seq, part, off = (int(x) for x in line.split(b" "))
            assert got[w].get(seq) == (part, off), f"p{w}: acknowledged seq {seq} at {part}/{off} lost"


FENCED = "fenced"


def fence_old(path: str, old_sent: Any, new_opened: Any, results: Any) -> None:
    """The older instance of `f`: sends sequences 0..49, says so, waits for
    the newer instance, then tries sequence 50. Reports its ids and what
    that send did."""
    out: dict[str, Any] = {"error": None}
    try:
        with open_shared(path) as mq:
            p = mq.producer("f")
            anon = mq.producer()
            out.update(id=p.producer_id, epoch=p.epoch, anon=anon.producer_id)
            for seq in range(50):
                p.send(FENCED, b"old-%d" % seq, partition=0, sequence=seq)
            old_sent.set()
            assert new_opened.wait(60), "the newer instance never opened"
            try:
                md = p.send(FENCED, b"old-50", partition=0, sequence=50)
                out["after"] = f"written at {md.offset if md else None}"
            except mqlite.ProducerFenced:
                out["after"] = "ProducerFenced"
    except BaseException as e:
        out["error"] = f"{type(e).__name__}: {e}"
        old_sent.set()
    results.put(out)


def test_a_named_producer_in_another_process_fences_the_first(data_dir: Path) -> None:
    path = str(data_dir)
    with open_shared(path) as mq:
        mq.create_topic(FENCED, partitions=1)
        old_sent, new_opened, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
        proc = SPAWN.Process(target=fence_old, args=(path, old_sent, new_opened, results))
        proc.start()
        assert old_sent.wait(60)
        p = mq.producer("f")
        anon = mq.producer()
        last = p.last_sequence()
        new_opened.set()
        old = get(results)
        proc.join(30)
        assert old["error"] is None, old["error"]
        assert proc.exitcode == 0
        assert p.producer_id == old["id"], "one name, one producer id"
        assert p.epoch is not None and p.epoch > old["epoch"]
        assert last == 49, "the newer instance resumes after the older one's sequences"
        assert old["after"] == "ProducerFenced", old["after"]
        ids = [old["id"], old["anon"], anon.producer_id]
        assert len(set(ids)) == 3, f"producer ids unique across processes: {ids}"
        for seq in range(50, 100):
            md = p.send(FENCED, b"new-%d" % seq, partition=0, sequence=seq)
            assert md is not None and not md.duplicate
        assert mq.topic(FENCED).partitions[0].end_offset == 100
        got = read_values(mq, FENCED, 100)
        want = [b"old-%d" % s for s in range(50)] + [b"new-%d" % s for s in range(50, 100)]
        assert got == want, "the fenced instance wrote nothing after the fence"


DELETED = "d"


def delete_producer(path: str, producing: Any, failed: Any, recreated: Any, results: Any) -> None:
    """Sends to DELETED until a send fails, says when it sent 200 and when
    one failed; reports the failure's type; once the topic is created
    again, sends one record with the same producer and reports its
    offset."""
    out: dict[str, Any] = {"error": None, "sent": 0}
    try:
        with open_shared(path) as mq:
            p = mq.producer()
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, "the topic was never deleted"
                try:
                    p.send(DELETED, b"x" * 100, partition=0)
                except mqlite.Error as e:
                    out["failure"] = type(e).__name__
                    failed.set()
                    break
                out["sent"] += 1
                if out["sent"] == 200:
                    producing.set()
            producing.set()
            assert recreated.wait(60), "the topic was never created again"
            md = p.send(DELETED, b"again", partition=0)
            out["again"] = md.offset if md else None
    except BaseException as e:
        out["error"] = f"{type(e).__name__}: {e}"
        producing.set()
        failed.set()
    results.put(out)


def test_a_topic_deleted_under_a_writer_in_another_process(data_dir: Path) -> None:
    path = str(data_dir)
    with open_shared(path) as mq:
        mq.create_topic(DELETED, partitions=1)
        producing, failed, recreated, results = (SPAWN.Event(), SPAWN.Event(), SPAWN.Event(), SPAWN.Queue())
        args = (path, producing, failed, recreated, results)
        proc = SPAWN.Process(target=delete_producer, args=args)
        proc.start()
        assert producing.wait(60)
        mq.delete_topic(DELETED)
        assert DELETED not in mq.topics()
        # The writer learns of the delete at its next send.
        assert failed.wait(60), "the writer's sends never failed"
        mq.create_topic(DELETED, partitions=1)
        recreated.set()
        out = get(results)
        proc.join(30)
        assert out["error"] is None, out["error"]
        assert proc.exitcode == 0
        assert out["sent"] >= 200
        assert out["failure"] == "UnknownTopic", out
        assert out["again"] == 0, "the topic created again starts at offset 0"
        assert mq.topic(DELETED).partitions[0].end_offset == 1
        assert read_values(mq, DELETED, 1) == [b"again"]
