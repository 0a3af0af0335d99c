"""Several writer processes on one shared data directory
(``mqlite.open(path, shared=True)``).

Writer processes (``multiprocessing``'s "spawn" method: each opens the
directory with a handle of its own) produce to one partition at once while
a reader process reads; racers released at once create the same topic, one
wins and the others get ``TopicExists``. Each scenario runs with one
writer process and with several.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from pathlib import Path
from typing import Any

import pytest

import mqlite

SPAWN = multiprocessing.get_context("spawn")
TOPIC = "w"
RECORDS = 2000


def open_shared(path: str) -> mqlite.Broker:
    return mqlite.open(path, prefault=False, retention_check_interval_ms=0, shared=True)


def value(writer: int, i: int) -> bytes:
    return b"w%d-%d" % (writer, i)


def get(results: Any, n: int, timeout: float = 120.0) -> list[Any]:
    out = []
    for _ in range(n):
        try:
            out.append(results.get(timeout=timeout))
        except queue.Empty:
            pytest.fail(f"{len(out)} of {n} reports arrived within {timeout} s: {out}")
    return out


def writer(path: str, w: int, start: Any, results: Any) -> None:
    """Takes a producer, meets the other writers and the parent at the
    barrier `start`, then sends RECORDS records to TOPIC/0 one by one, each
    offset past the one before. Reports its offsets or its error."""
    out: dict[str, Any] = {"writer": w, "error": None, "offsets": []}
    try:
        with open_shared(path) as mq:
            producer = mq.producer()
            start.wait(60)
            for i in range(RECORDS):
                md = producer.send(TOPIC, value(w, i), partition=0)
                out["offsets"].append(md.offset)
            producer.flush()
            producer.close()
    except BaseException as e:  # reported to the parent, which fails the test
        out["error"] = f"{type(e).__name__}: {e}"
        start.abort()  # nobody waits for this writer
    results.put(out)


def reader(path: str, expected: int, ready: Any, stop: Any, results: Any) -> None:
    """Reads TOPIC/0 from the start, while the writers write, until
    `expected` records arrived (or `stop` is set); reports (offset, value)
    of each."""
    out: dict[str, Any] = {"error": None, "got": []}
    try:
        with open_shared(path) as mq:
            consumer = mq.consumer()
            consumer.assign([(TOPIC, 0)])
            consumer.seek_to_beginning(TOPIC, 0)
            ready.set()
            idle = 0
            while len(out["got"]) < expected and idle < 600 and not stop.is_set():
                batch = consumer.consume(500, timeout=0.1)
                idle = 0 if batch else idle + 1
                out["got"].extend((m.offset, m.value) for m in batch)
            consumer.close()
    except BaseException as e:
        out["error"] = f"{type(e).__name__}: {e}"
    results.put(out)


def producers_in_processes(data_dir: Path, writers: int) -> None:
    path = str(data_dir)
    with open_shared(path) as mq:
        mq.create_topic(TOPIC, partitions=1)
    total = writers * RECORDS
    # The writers start sending together, once all hold a producer.
    start = SPAWN.Barrier(writers + 1)
    ready = SPAWN.Event()
    stop = SPAWN.Event()
    results = SPAWN.Queue()
    read = SPAWN.Queue()
    rd = SPAWN.Process(target=reader, args=(path, total, ready, stop, read))
    rd.start()
    procs = [SPAWN.Process(target=writer, args=(path, w, start, results)) for w in range(writers)]
    for p in procs:
        p.start()
    assert ready.wait(60), "the reader never started"
    try:
        start.wait(60)
    except threading.BrokenBarrierError:
        pass  # a writer failed: its report says why
    reports = sorted(get(results, writers), key=lambda r: r["writer"])
    if any(r["error"] for r in reports):
        stop.set()  # the reader would wait for records that never come
    (seen,) = get(read, 1)
    for p in [*procs, rd]:
        p.join(30)
        assert p.exitcode == 0
    errors = [r for r in reports if r["error"]]
    # The first error; the others' BrokenBarrierError follows from it.
    errors.sort(key=lambda r: "BrokenBarrierError" in r["error"])
    assert not errors, errors[0]
    for r in reports:
        assert r["offsets"] == sorted(r["offsets"]), f"writer {r['writer']}: offsets out of order"
    assert seen["error"] is None, seen
    got = seen["got"]
    # Offsets dense, every record once, each writer's in the order it sent.
    assert [o for o, _v in got] == list(range(total))
    per_writer: dict[int, list[int]] = {}
    for _o, v in got:
        w, i = v.decode().lstrip("w").split("-")
        per_writer.setdefault(int(w), []).append(int(i))
    assert sorted(per_writer) == list(range(writers))
    for w, seqs in per_writer.items():
        assert seqs == list(range(RECORDS)), f"writer {w}: not in the order sent"
    # The acknowledged offsets hold what was sent.
    by_offset = dict(got)
    for r in reports:
        for i, o in enumerate(r["offsets"]):
            assert by_offset[o] == value(r["writer"], i)
    # A fresh handle sees the same.
    with open_shared(path) as mq:
        assert mq.topic(TOPIC).partitions[0].end_offset == total


def test_one_writer_process_with_a_reader_process(data_dir: Path) -> None:
    producers_in_processes(data_dir, 1)


def test_three_writer_processes_on_one_partition(data_dir: Path) -> None:
    producers_in_processes(data_dir, 3)


ROUNDS = 20


def racer_process(path: str, name: str, threads: int, racers: int, barrier: Any, results: Any) -> None:
    """`threads` racers, each with a handle of its own: each round, all
    racers (of every process) meet at `barrier`, then create topic
    `c<round>`; then each sends one record to it and reads it until it saw
    every racer's. Reports per round what create_topic did."""

    def race(racer: str) -> None:
        out: dict[str, Any] = {"racer": racer, "error": None, "rounds": []}
        try:
            with open_shared(path) as mq:
                producer = mq.producer()
                for r in range(ROUNDS):
                    topic = f"c{r}"
                    barrier.wait(60)
                    try:
                        mq.create_topic(topic, partitions=1)
                        out["rounds"].append("ok")
                    except mqlite.TopicExists:
                        out["rounds"].append("TopicExists")
                    producer.send(topic, racer.encode(), partition=0)
                    consumer = mq.consumer()
                    consumer.assign([(topic, 0)])
                    consumer.seek_to_beginning(topic, 0)
                    seen: list[bytes] = []
                    for _ in range(300):
                        seen.extend(m.value or b"" for m in consumer.consume(racers, timeout=0.1))
                        if len(seen) >= racers:
                            break
                    consumer.close()
                    assert len(seen) == racers and racer.encode() in seen, (topic, seen)
                producer.close()
        except BaseException as e:
            out["error"] = f"{type(e).__name__}: {e}"
            barrier.abort()  # the other racers stop waiting for this one
        results.put(out)

    ts = [threading.Thread(target=race, args=(f"{name}.{t}",)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def creation_race(data_dir: Path, processes: int, threads: int) -> None:
    path = str(data_dir)
    with open_shared(path):
        pass
    racers = processes * threads
    barrier = SPAWN.Barrier(racers)
    results = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=racer_process, args=(path, f"p{n}", threads, racers, barrier, results))
        for n in range(processes)
    ]
    for p in procs:
        p.start()
    reports = get(results, racers)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    errors = [r for r in reports if r["error"]]
    # The first error; the others' BrokenBarrierError follows from it.
    errors.sort(key=lambda r: "BrokenBarrierError" in r["error"])
    assert not errors, errors[0]
    for rnd in range(ROUNDS):
        outcomes = sorted(r["rounds"][rnd] for r in reports)
        assert outcomes == ["TopicExists"] * (racers - 1) + ["ok"], f"round {rnd}: {outcomes}"
    with open_shared(path) as mq:
        for rnd in range(ROUNDS):
            assert mq.topic(f"c{rnd}").partitions[0].end_offset == racers


def test_concurrent_topic_creation_threads_of_one_process(data_dir: Path) -> None:
    creation_race(data_dir, 1, 2)


def test_concurrent_topic_creation_two_processes(data_dir: Path) -> None:
    creation_race(data_dir, 2, 1)
