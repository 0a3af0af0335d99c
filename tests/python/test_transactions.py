"""Transactions: records across topics and partitions and consumer offsets
become visible together at the commit or not at all; the context manager,
confluent-kafka's calls, fencing, the size limit, threads, and the
isolation levels."""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any, Iterator, List, Tuple

import pytest

import mqlite


@pytest.fixture
def topics(mq: mqlite.Broker) -> Iterator[mqlite.Broker]:
    mq.create_topic("a", partitions=2)
    mq.create_topic("b")
    yield mq


def values(mq: mqlite.Broker, topic: str, partition: int, isolation_level: str = "read_committed") -> List[bytes]:
    """Every value in topic/partition, read to its end (markers included:
    the position ends at the end offset, no marker is delivered)."""
    end = end_offset(mq, topic, partition)
    c = mq.consumer(isolation_level=isolation_level)
    c.assign([(topic, partition)])
    out: List[bytes] = []
    while True:
        m = c.poll(0.2)
        if m is None:
            break
        out.append(m.value)
    assert c.position(topic, partition) == end
    c.close()
    return out


def end_offset(mq: mqlite.Broker, topic: str, partition: int) -> int:
    c = mq.consumer()
    c.assign([(topic, partition)])
    c.seek_to_end(topic, partition)
    end = c.position(topic, partition)
    c.close()
    return end


def committed(mq: mqlite.Broker, group: str, topic: str, partition: int) -> Any:
    c = mq.consumer(group)
    got = c.committed([(topic, partition)])
    c.close()
    return got.get((topic, partition))


def test_commit_across_topics_and_partitions(topics: mqlite.Broker) -> None:
    p = topics.producer(transactional_id="etl-1")
    assert p.transactional_id == "etl-1"
    tx = p.transaction()
    tx.send("a", b"a0-1", partition=0)
    tx.send("a", b"a1-1", partition=1, key=b"k", headers={"h": b"v"})
    tx.send("b", "b0-1", timestamp=1234)
    tx.send("a", b"a0-2", partition=0)
    assert len(tx) == 4
    assert [end_offset(topics, t, q) for t, q in [("a", 0), ("a", 1), ("b", 0)]] == [0, 0, 0]
    mds = tx.commit()
    assert [(m.topic, m.partition, m.offset) for m in mds] == [("a", 0, 0), ("a", 1, 0), ("b", 0, 0), ("a", 0, 1)]
    assert mds[2].timestamp == 1234
    assert values(topics, "a", 0) == [b"a0-1", b"a0-2"]
    assert values(topics, "a", 1) == [b"a1-1"]
    assert values(topics, "b", 0) == [b"b0-1"]
    assert tx.done and len(tx) == 0
    for call in [lambda: tx.send("a", b"late"), tx.commit, tx.abort, lambda: tx.send_offsets_to("g", [])]:
        with pytest.raises(mqlite.InvalidArgument, match="already committed or aborted"):
            call()


def test_abort_and_a_dropped_transaction_write_nothing(topics: mqlite.Broker) -> None:
    p = topics.producer(transactional_id="etl-1")
    tx = p.transaction()
    tx.send("a", b"x", partition=0)
    with pytest.raises(mqlite.InvalidArgument, match="already open"):
        p.transaction()
    tx.abort()
    with pytest.raises(mqlite.InvalidArgument, match="already committed or aborted"):
        tx.commit()
    assert end_offset(topics, "a", 0) == 0
    # The producer may begin again; abort_transaction() on a begun one.
    p.begin_transaction()
    p.send("b", b"aborted")
    p.abort_transaction()
    assert end_offset(topics, "b", 0) == 0
    with pytest.raises(mqlite.InvalidArgument, match="no transaction is open"):
        p.commit_transaction()
    # A transaction dropped without commit stays the producer's open one
    # (confluent-kafka's model) until abort_transaction() or close().
    tx = p.transaction()
    tx.send("a", b"dropped", partition=0)
    del tx
    gc.collect()
    with pytest.raises(mqlite.InvalidArgument, match="already open"):
        p.transaction()
    p.abort_transaction()
    assert end_offset(topics, "a", 0) == 0
    # Closing the producer aborts its open transaction.
    tx = p.transaction()
    tx.send("b", b"closed")
    p.close()
    assert tx.done
    assert end_offset(topics, "b", 0) == 0
    with pytest.raises(mqlite.Closed):
        tx.send("b", b"late")


def test_context_manager_commits_or_aborts_and_reraises(topics: mqlite.Broker) -> None:
    p = topics.producer(transactional_id="ctx")
    with p.transaction() as tx:
        tx.send("b", b"one")
        assert p.send("b", b"two") is None  # joins the open transaction
        assert end_offset(topics, "b", 0) == 0
    assert tx.done
    assert values(topics, "b", 0) == [b"one", b"two"]

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with p.transaction() as tx:
            tx.send("b", b"lost")
            raise Boom()
    assert tx.done
    assert values(topics, "b", 0) == [b"one", b"two"]
    # Ended inside the block: the exit does nothing more.
    with p.transaction() as tx:
        tx.send("b", b"aborted-inside")
        tx.abort()
    assert values(topics, "b", 0) == [b"one", b"two"]
    # Outside a transaction, send() writes at once again.
    md = p.send("b", b"plain")
    assert md is not None and md.offset is not None


def test_offsets_commit_only_with_the_transaction(topics: mqlite.Broker) -> None:
    topics.create_topic("in")
    plain = topics.producer()
    for i in range(3):
        plain.send("in", b"in-%d" % i)
    c = topics.consumer("g", enable_auto_commit=False)
    c.assign([("in", 0)])
    assert c.poll(1.0) is not None and c.poll(1.0) is not None
    p = topics.producer(transactional_id="ctp")
    with pytest.raises(RuntimeError):
        with p.transaction() as tx:
            tx.send("b", b"out-aborted")
            tx.send_offsets(c)
            raise RuntimeError("abort")
    assert committed(topics, "g", "in", 0) is None
    with p.transaction() as tx:
        tx.send("b", b"out")
        tx.send_offsets(c)
        assert committed(topics, "g", "in", 0) is None
    assert committed(topics, "g", "in", 0)[0] == 2
    # Explicit offsets, metadata optional, the later entry wins.
    with p.transaction() as tx:
        tx.send_offsets_to("other", [("in", 0, 1), ("in", 0, 3, "meta")])
        with pytest.raises(mqlite.OffsetOutOfRange):
            tx.send_offsets_to("other", [("in", 0, 99)])
        with pytest.raises(mqlite.UnknownTopic):
            tx.send_offsets_to("other", [("nope", 0, 0)])
        with pytest.raises(mqlite.InvalidArgument):
            tx.send_offsets_to("other", [("in", -1, 0)])
        with pytest.raises(TypeError):
            tx.send_offsets_to("other", "in")
    assert committed(topics, "other", "in", 0) == (3, "meta")
    # A consumer without a group has no offsets to send.
    alone = topics.consumer()
    alone.assign([("in", 0)])
    with p.transaction() as tx:
        with pytest.raises(mqlite.InvalidArgument, match="group_id"):
            tx.send_offsets(alone)
    with pytest.raises(mqlite.InvalidArgument, match="group_id"):
        alone.consumer_group_metadata()


class TopicPartition:
    """Stands for confluent-kafka's TopicPartition (what the API reads of it)."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset


def test_confluent_consume_transform_produce(topics: mqlite.Broker) -> None:
    topics.create_topic("in", partitions=2)
    src = topics.producer()
    for i in range(6):
        src.send("in", b"v%d" % i, partition=i % 2)
    consumer = topics.consumer("etl", enable_auto_commit=False)
    consumer.assign([("in", 0), ("in", 1)])
    p = topics.producer(transactional_id="etl-1")
    p.init_transactions()
    delivered: List[Tuple[Any, Any]] = []
    batches = 0
    while True:
        msgs = consumer.consume(num_messages=2, timeout=0.5)
        if not msgs:
            break
        p.begin_transaction()
        for m in msgs:
            p.produce("b", m.value.upper(), on_delivery=lambda err, md: delivered.append((err, md)))
        positions = [TopicPartition(m.topic, m.partition, m.offset + 1) for m in msgs]
        p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
        # Nothing of the batch is visible before the commit.
        assert len(delivered) == 2 * batches
        before = committed(topics, "etl", msgs[-1].topic, msgs[-1].partition)
        assert before is None or before[0] <= msgs[-1].offset
        mds = p.commit_transaction()
        assert len(mds) == len(msgs)
        assert committed(topics, "etl", msgs[-1].topic, msgs[-1].partition)[0] == msgs[-1].offset + 1
        batches += 1
    assert batches == 3
    assert sorted(values(topics, "b", 0)) == sorted(b"V%d" % i for i in range(6))
    assert len(delivered) == 6 and all(err is None and md.topic == "b" for err, md in delivered)
    assert consumer.lag() == {("in", 0): 0, ("in", 1): 0}
    # A group id string works as group metadata too.
    p.begin_transaction()
    p.send_offsets_to_transaction([("in", 0, 1)], "other")
    p.commit_transaction()
    assert committed(topics, "other", "in", 0)[0] == 1
    with pytest.raises(TypeError):
        p.begin_transaction()
        try:
            p.send_offsets_to_transaction([("in", 0, 1)], 7)
        finally:
            p.abort_transaction()


def test_transactions_need_a_transactional_id(topics: mqlite.Broker) -> None:
    p = topics.producer()
    assert p.transactional_id is None
    for call in [p.transaction, p.begin_transaction, p.init_transactions]:
        with pytest.raises(mqlite.InvalidArgument, match="transactional_id"):
            call()
    with pytest.raises(mqlite.InvalidArgument, match="no transaction is open"):
        p.abort_transaction()
    with pytest.raises(mqlite.InvalidArgument):
        topics.producer(transactional_id="bad/name")
    with pytest.raises(mqlite.InvalidArgument):
        topics.producer(transactional_id="x", max_transaction_bytes=0)
    with pytest.raises(mqlite.InvalidArgument):
        topics.producer(transactional_id="x", transaction_timeout_ms=-1)
    with pytest.raises(TypeError):
        topics.producer(transactional_id=5)


def test_a_newer_producer_fences_the_older(topics: mqlite.Broker) -> None:
    old = topics.producer(transactional_id="fence")
    tx = old.transaction()
    tx.send("a", b"from-old", partition=1)
    new = topics.producer(transactional_id="fence")
    with pytest.raises(mqlite.ProducerFenced):
        tx.commit()
    with pytest.raises(mqlite.ProducerFenced):
        old.transaction()
    assert end_offset(topics, "a", 1) == 0
    with new.transaction() as tx2:
        tx2.send("a", b"from-new", partition=1)
    assert values(topics, "a", 1) == [b"from-new"]


def test_transaction_too_large_keeps_it_open(topics: mqlite.Broker) -> None:
    p = topics.producer(transactional_id="small", max_transaction_bytes=300)
    with p.transaction() as tx:
        tx.send("b", b"x" * 100)
        with pytest.raises(mqlite.TransactionTooLarge) as info:
            tx.send("b", b"y" * 200)
        assert info.value.code == 410
        assert len(tx) == 1
        # Bad records: typed errors, nothing added.
        with pytest.raises(mqlite.UnknownTopic):
            tx.send("nope", b"v")
        with pytest.raises(mqlite.UnknownPartition):
            tx.send("b", b"v", partition=5)
        with pytest.raises(mqlite.InvalidArgument):
            tx.send("b", b"v", partition=-1)
        with pytest.raises(mqlite.InvalidArgument):
            tx.send("b", b"v", timestamp=-5)
        with pytest.raises(mqlite.InvalidArgument, match="sequence"):
            p.send("b", b"v", sequence=1)
        with pytest.raises(mqlite.InvalidArgument, match="send_batch"):
            p.send_batch("b", [b"v"])
        with pytest.raises(TypeError):
            tx.send("b", 5)  # type: ignore[arg-type]
        assert len(tx) == 1
    assert values(topics, "b", 0) == [b"x" * 100]


def test_transaction_timeout_aborts(topics: mqlite.Broker) -> None:
    p = topics.producer(transactional_id="slow", transaction_timeout_ms=1)
    tx = p.transaction()
    tx.send("b", b"late")
    time.sleep(0.02)
    with pytest.raises(mqlite.Timeout):
        tx.commit()
    assert end_offset(topics, "b", 0) == 0


def test_threads_send_into_one_transaction(topics: mqlite.Broker) -> None:
    p = topics.producer(transactional_id="threads")
    per_thread, threads = 200, 4
    with p.transaction() as tx:

        def work(t: int) -> None:
            for i in range(per_thread):
                if i % 2:
                    tx.send("a", b"%d-%d" % (t, i), partition=i % 2)
                else:
                    p.send("a", b"%d-%d" % (t, i), partition=i % 2)

        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(tx) == per_thread * threads
        assert end_offset(topics, "a", 0) == 0 and end_offset(topics, "a", 1) == 0
    got = values(topics, "a", 0) + values(topics, "a", 1)
    assert sorted(got) == sorted(b"%d-%d" % (t, i) for t in range(threads) for i in range(per_thread))


def test_isolation_levels_read_the_same_records(topics: mqlite.Broker) -> None:
    p = topics.producer(transactional_id="iso")
    with p.transaction() as tx:
        tx.send("b", b"c1")
    tx = p.transaction()
    tx.send("b", b"aborted")
    tx.abort()
    with p.transaction() as tx:
        tx.send("b", b"c2")
    committed_view = values(topics, "b", 0, "read_committed")
    uncommitted_view = values(topics, "b", 0, "read_uncommitted")
    assert committed_view == uncommitted_view == [b"c1", b"c2"]
    with pytest.raises(mqlite.InvalidArgument, match="isolation_level"):
        topics.consumer(isolation_level="serializable")
    # A caught-up member has no lag over the markers.
    c = topics.consumer("lag", isolation_level="read_uncommitted")
    c.assign([("b", 0)])
    assert [m.value for m in iter(lambda: c.poll(0.2), None)] == [b"c1", b"c2"]
    c.commit()
    assert c.lag() == {("b", 0): 0}


def shared_committer(path: str, name: str, n: int, start: Any, results: Any) -> None:
    """Commits `n` transactions of two records (a/0 and a/1) and an offset
    of group `g-<name>` on a/0 (the i-th commits offset i), from a process of its own in shared mode; reports
    what it committed, or its error."""
    out: dict[str, Any] = {"name": name, "error": None}
    try:
        with mqlite.open(path, shared=True, prefault=False) as mq:
            p = mq.producer(transactional_id=name)
            start.wait(60)
            for i in range(n):
                with p.transaction() as tx:
                    tx.send("a", b"%s-%d-0" % (name.encode(), i), partition=0)
                    tx.send("a", b"%s-%d-1" % (name.encode(), i), partition=1)
                    tx.send_offsets_to(f"g-{name}", [("a", 0, i)])
            p.close()
    except BaseException as e:  # reported to the parent, which fails the test
        out["error"] = f"{type(e).__name__}: {e}"
        start.abort()
    results.put(out)


def test_transactions_commit_from_several_processes_in_shared_mode(data_dir: Any) -> None:
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    path = str(data_dir / "s")
    n = 40
    with mqlite.open(path, shared=True) as mq:
        mq.create_topic("a", partitions=2)
        mq.create_topic("b")
    start = spawn.Barrier(3)
    results = spawn.Queue()
    procs = [spawn.Process(target=shared_committer, args=(path, f"t{w}", n, start, results)) for w in range(2)]
    for pr in procs:
        pr.start()
    start.wait(60)
    reports = [results.get(timeout=120) for _ in procs]
    for pr in procs:
        pr.join(60)
    assert [r["error"] for r in reports] == [None, None], reports
    with mqlite.open(path, shared=True) as mq:
        a0, a1 = values(mq, "a", 0), values(mq, "a", 1)
        # Every transaction whole, each process's in its order.
        assert sorted(v[:-2] for v in a0) == sorted(v[:-2] for v in a1)
        for w in ("t0", "t1"):
            mine = [v for v in a0 if v.startswith(w.encode())]
            assert mine == [b"%s-%d-0" % (w.encode(), i) for i in range(n)]
            assert committed(mq, f"g-{w}", "a", 0)[0] == n - 1
    # A read-only handle makes no transactional producer.
    with mqlite.open(path, shared=True, readonly=True) as ro:
        with pytest.raises(mqlite.ReadOnly):
            ro.producer(transactional_id="x")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()")
def test_a_forked_child_cannot_use_the_parents_transaction(topics: mqlite.Broker) -> None:
    p = topics.producer(transactional_id="fork")
    tx = p.transaction()
    tx.send("b", b"parent")
    pid = os.fork()
    if pid == 0:  # the child: every use raises Closed, nothing hangs
        code = 0
        try:
            for call in (lambda: tx.send("b", b"child"), tx.commit, tx.abort, lambda: len(tx)):
                try:
                    call()
                    code = 1
                except mqlite.Closed as e:
                    if "fork" not in str(e):
                        code = 2
            if not tx.done:
                code = 3
            repr(tx)
            tx.__exit__(None, None, None)
        except BaseException:  # noqa: BLE001 - reported through the exit code
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert tx.commit()[0].offset == 0
    assert values(topics, "b", 0) == [b"parent"]
