"""Every exception class mqlite exports is raised by a real call, exactly
(not only a subclass), with its code and a message, and is documented;
except Timeout, which no call raises (see case_timeout).

The cases that need the process's resource limits (DiskFull: a file-size
limit; Poisoned: no file descriptor left for the fsync of a directory) run
in a subprocess.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest

import mqlite

EXCEPTIONS = sorted(
    (getattr(mqlite, n) for n in mqlite.__all__ if inspect.isclass(getattr(mqlite, n))),
    key=lambda c: c.__name__,
)
EXCEPTIONS = [c for c in EXCEPTIONS if issubclass(c, BaseException)]
SEG = 1 << 20


def open_broker(path: Path) -> mqlite.Broker:
    return mqlite.open(path, prefault=False, retention_check_interval_ms=0)


def raised(cls: type, call: Callable[[], object]) -> BaseException:
    """Runs `call`, which must raise exactly `cls` with its code and a
    message."""
    with pytest.raises(cls) as info:
        call()
    e = info.value
    assert type(e) is cls, f"{type(e).__name__} raised instead of {cls.__name__}: {e}"
    assert e.code == cls.code  # type: ignore[attr-defined]
    assert str(e)
    return e


def in_subprocess(script: str, tmp_path: Path) -> List[str]:
    """Runs `script` with the data directory as argv[1]; returns the names of
    the exceptions it printed as `RAISED <class> <code>` lines."""
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    out = []
    for line in r.stdout.splitlines():
        if line.startswith("RAISED "):
            _, name, code = line.split()
            assert int(code) == getattr(mqlite, name).code
            out.append(name)
    return out


def case_error(tmp_path: Path) -> None:
    # The root class is raised only for an error kind added to the engine
    # later; every engine error is one of its subclasses.
    mq = open_broker(tmp_path / "d")
    with pytest.raises(mqlite.Error) as info:
        mq.topic("missing")
    assert isinstance(info.value, mqlite.Error) and type(info.value) is not mqlite.Error
    assert mqlite.Error.code == 0


def case_io_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"not a directory")
    e = raised(mqlite.IoError, lambda: open_broker(tmp_path / "file" / "data"))
    assert "file" in str(e)


def case_disk_full(tmp_path: Path) -> None:
    script = """
        import resource, signal, sys, mqlite
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        mq = mqlite.open(sys.argv[1], prefault=False, retention_check_interval_ms=0)
        mq.create_topic("small", segment_bytes=1 << 16)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 15, resource.RLIM_INFINITY))
        try:
            mq.create_topic("big", segment_bytes=8 << 20)  # its first 64 KiB fail
        except mqlite.Error as e:
            print("RAISED", type(e).__name__, e.code)
        assert mq.topics() == ["small"], mq.topics()
        mq.producer().send("small", b"still writable")
        mq.close()
    """
    assert in_subprocess(script, tmp_path) == ["DiskFull"]


def case_locked(tmp_path: Path) -> None:
    # Exclusive mode, by name: a second open in one process of a shared
    # directory shares the engine instead.
    def exclusive() -> mqlite.Broker:
        return mqlite.open(tmp_path / "d", mode="exclusive", prefault=False)

    mq = exclusive()
    e = raised(mqlite.Locked, exclusive)
    assert "this process" in str(e)
    mq.close()


def case_invalid_argument(tmp_path: Path) -> None:
    raised(mqlite.InvalidArgument, lambda: mqlite.partition_for_key(b"k", 0))
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer()
    c.assign([("t", 0)])
    raised(mqlite.InvalidArgument, lambda: c.seek("t", 0, -1))
    raised(mqlite.InvalidArgument, lambda: c.poll(timeout=-1))


def case_closed(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.close()
    raised(mqlite.Closed, mq.topics)


def case_timeout(tmp_path: Path) -> None:
    # The one exception no call raises: the only wait that could time out,
    # Producer.flush(timeout), returns the number of records still queued
    # instead (confluent-kafka's convention). The class stays, with the
    # code the C and Rust APIs share, and its docstring says so.
    assert "raised by no call" in (inspect.getdoc(mqlite.Timeout) or "")
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG)
    p = mq.producer(acks="all", linger_ms=60_000)
    for _ in range(50):
        p.produce("t", b"x" * 100)
    # With no time at all the batch cannot have been flushed yet.
    assert 0 < p.flush(timeout=0) <= 50
    assert p.flush() == 0


def case_invalid_topic_name(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    for name in ("", "..", "a b", "__internal", "x" * 250, "a/b", "a\0b"):
        raised(mqlite.InvalidTopicName, lambda: mq.create_topic(name))


def case_topic_exists(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG)
    raised(mqlite.TopicExists, lambda: mq.create_topic("t", segment_bytes=SEG))


def case_unknown_topic(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    raised(mqlite.UnknownTopic, lambda: mq.producer().send("missing", b"v"))


def case_invalid_config(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    raised(mqlite.InvalidConfig, lambda: mq.create_topic("t", partitions=0))


def case_unknown_partition(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    raised(mqlite.UnknownPartition, lambda: mq.producer().send("t", b"v", partition=2))


def case_offset_out_of_range(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer()
    c.assign([("t", 0)])
    raised(mqlite.OffsetOutOfRange, lambda: c.seek("t", 0, 5))


def case_poisoned(tmp_path: Path) -> None:
    # The first flush of a new segment syncs its directory, which needs a
    # file descriptor: with none left it fails, and the partition refuses
    # writes until the directory is reopened. (The partition's first append
    # comes before, with descriptors: it rewrites the recovery point, and
    # without a descriptor for that it fails and changes nothing.)
    script = """
        import os, resource, sys, mqlite
        d = sys.argv[1]
        mq = mqlite.open(d, prefault=False, retention_check_interval_ms=0)
        mq.create_topic("t", segment_bytes=1 << 20)
        mq.producer(acks=1).send("t", b"zeroth")
        p = mq.producer(acks="all")
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lowest_free = os.open("/dev/null", os.O_RDONLY)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
        for value in (b"first", b"second"):
            try:
                p.send("t", value)
            except mqlite.Error as e:
                print("RAISED", type(e).__name__, e.code)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        try:
            p.send("t", b"with descriptors again")
        except mqlite.Error as e:
            print("RAISED", type(e).__name__, e.code)
        try:
            mq.close()
        except mqlite.Error:
            pass  # the final flush fails too; the broker is closed anyway
        mq = mqlite.open(d, prefault=False, retention_check_interval_ms=0)
        md = mq.producer(acks="all").send("t", b"after reopening")
        assert md.offset == mq.topic("t").partitions[0].end_offset - 1
        mq.close()
    """
    assert in_subprocess(script, tmp_path) == ["IoError", "Poisoned", "Poisoned"]


def topic_file(data: Path) -> Path:
    return data / "topics" / "t" / "topic.json"


def case_corrupt(tmp_path: Path) -> None:
    d = tmp_path / "d"
    with open_broker(d) as mq:
        mq.create_topic("t", segment_bytes=SEG)
    topic_file(d).write_bytes(b'{"version": 1, "name": ')
    # The directory opens; the damaged topic answers Corrupt.
    with open_broker(d) as mq:
        raised(mqlite.Corrupt, lambda: mq.topic("t"))


def case_unsupported_version(tmp_path: Path) -> None:
    d = tmp_path / "d"
    with open_broker(d) as mq:
        mq.create_topic("t", segment_bytes=SEG)
    meta = json.loads(topic_file(d).read_text())
    meta["version"] = 999
    topic_file(d).write_text(json.dumps(meta))
    with open_broker(d) as mq:
        e = raised(mqlite.UnsupportedVersion, lambda: mq.topic("t"))
    assert "999" in str(e)


def case_message_too_large(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG, max_message_bytes=1024)
    raised(mqlite.MessageTooLarge, lambda: mq.producer().send("t", b"x" * 2000))


def case_buffer_full(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG)
    p = mq.producer(acks="all", linger_ms=60_000, buffer_memory=4096, max_block_ms=0)

    def flood() -> None:
        for _ in range(100):
            p.produce("t", b"x" * 1000)

    e = raised(mqlite.BufferFull, flood)
    assert e.limit == 4096  # type: ignore[attr-defined]
    p.flush()


def case_out_of_order_sequence(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG)
    p = mq.producer(strict_sequences=True)
    p.send("t", b"a", sequence=0)
    e = raised(mqlite.OutOfOrderSequence, lambda: p.send("t", b"c", sequence=2))
    assert (e.expected, e.received) == (1, 2)  # type: ignore[attr-defined]


def case_producer_fenced(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG)
    old = mq.producer("ingest")
    new = mq.producer("ingest")
    e = raised(mqlite.ProducerFenced, lambda: old.send("t", b"v"))
    assert e.current_epoch == new.epoch  # type: ignore[attr-defined]


def case_transaction_too_large(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG)
    p = mq.producer(transactional_id="tx", max_transaction_bytes=300)
    with p.transaction() as tx:
        tx.send("t", b"x" * 100)
        e = raised(mqlite.TransactionTooLarge, lambda: tx.send("t", b"y" * 200))
        assert "limit of 300" in str(e)
        assert len(tx) == 1


def case_producer_busy(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG)
    first = mq.producer("only", access_mode="exclusive")
    raised(mqlite.ProducerBusy, lambda: mq.producer("only", access_mode="exclusive"))
    first.send("t", b"v")


def case_commit_failed(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", partitions=2, segment_bytes=SEG)
    a = mq.consumer("g", client_id="a")
    b = mq.consumer("g", client_id="b")
    a.subscribe("t")
    b.subscribe("t")
    deadline = time.monotonic() + 10
    while len(a.assignment()) != 1 or len(b.assignment()) != 1:
        assert time.monotonic() < deadline, "the group did not settle"
        a.poll(0.01)
        b.poll(0.01)
    (theirs,) = b.assignment()
    raised(mqlite.CommitFailed, lambda: a.commit([(theirs[0], theirs[1], 0)]))


def case_invalid_record_state(tmp_path: Path) -> None:
    mq = open_broker(tmp_path / "d")
    mq.create_topic("t", segment_bytes=SEG)
    mq.producer().send("t", b"v")
    sc = mq.share_consumer("sg", "t")
    m = sc.poll(timeout=5)
    assert m is not None
    m.ack()
    e = raised(mqlite.InvalidRecordState, m.ack)  # acknowledged already
    assert "offset 0" in str(e)
    sc.close()


def case_read_only(tmp_path: Path) -> None:
    open_broker(tmp_path / "d").close()
    with mqlite.open(tmp_path / "d", readonly=True) as ro:
        e = raised(mqlite.ReadOnly, ro.producer)
        assert "read-only" in str(e)
        raised(mqlite.ReadOnly, lambda: ro.create_topic("t"))
        assert ro.topics() == []


CASES: Dict[str, Callable[[Path], None]] = {
    "Error": case_error,
    "IoError": case_io_error,
    "DiskFull": case_disk_full,
    "Locked": case_locked,
    "InvalidArgument": case_invalid_argument,
    "Closed": case_closed,
    "Timeout": case_timeout,
    "ReadOnly": case_read_only,
    "InvalidTopicName": case_invalid_topic_name,
    "TopicExists": case_topic_exists,
    "UnknownTopic": case_unknown_topic,
    "InvalidConfig": case_invalid_config,
    "UnknownPartition": case_unknown_partition,
    "OffsetOutOfRange": case_offset_out_of_range,
    "Poisoned": case_poisoned,
    "Corrupt": case_corrupt,
    "UnsupportedVersion": case_unsupported_version,
    "MessageTooLarge": case_message_too_large,
    "BufferFull": case_buffer_full,
    "OutOfOrderSequence": case_out_of_order_sequence,
    "ProducerFenced": case_producer_fenced,
    "TransactionTooLarge": case_transaction_too_large,
    "ProducerBusy": case_producer_busy,
    "CommitFailed": case_commit_failed,
    "InvalidRecordState": case_invalid_record_state,
}


def test_every_exported_exception_has_a_case() -> None:
    assert sorted(c.__name__ for c in EXCEPTIONS) == sorted(CASES)


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda c: c.__name__)
def test_exception_is_raised_by_a_real_call(cls: type, tmp_path: Path) -> None:
    CASES[cls.__name__](tmp_path)


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda c: c.__name__)
def test_exception_is_documented(cls: type) -> None:
    assert issubclass(cls, mqlite.Error)
    assert cls.__module__ == "mqlite"
    doc = inspect.getdoc(cls) or ""
    assert len(doc) > 20, f"{cls.__name__} has no docstring"
    if cls is not mqlite.Error:
        assert f"(code {cls.code}" in doc, f"{cls.__name__}'s docstring does not give its code"  # type: ignore[attr-defined]
    # Listed in the package docstring's tree, with its code.
    tree = mqlite.__doc__ or ""
    assert f"{cls.__name__} (" in tree, f"{cls.__name__} missing from the mqlite docstring"
