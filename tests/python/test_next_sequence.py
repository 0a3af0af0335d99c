"""Producer.next_sequence(): the first application sequence not written to
any partition, where a named producer resumes after a crash. With sequences
sent to their partitions in a crafted order (3, for partition 0, missing
while 4 and 5 reached partitions 1 and 2), last_sequence() + 1 would skip 3;
next_sequence() answers 3, also after reopening, and re-sending from it
fills the gap and writes nothing twice."""

from __future__ import annotations

from pathlib import Path

import pytest

import mqlite

from conftest import drain

PARTS = 3


def sequences_in(mq: mqlite.Broker) -> list[int]:
    total = sum(p.end_offset - p.start_offset for p in mq.topic("t").partitions)
    c = mq.consumer()
    c.subscribe("t")
    msgs = drain(c, total) if total else []
    c.close()
    return sorted(int((m.value or b"").decode()) for m in msgs)


def test_next_sequence_is_the_first_gap_after_reopening(data_dir: Path) -> None:
    with mqlite.open(data_dir) as mq:
        mq.create_topic("t", partitions=PARTS)
        p = mq.producer(name="ingest")
        assert p.next_sequence() == 0
        for seq in [0, 1, 2, 4, 5]:
            md = p.send("t", str(seq).encode(), partition=seq % PARTS, sequence=seq)
            assert not md.duplicate
        assert (p.next_sequence(), p.last_sequence()) == (3, 5)
    with mqlite.open(data_dir) as mq:
        p = mq.producer(name="ingest")
        start = p.next_sequence()
        assert start == 3
        delivered: list[mqlite.RecordMetadata] = []

        def on_delivery(err: object, md: mqlite.RecordMetadata) -> None:
            assert err is None
            delivered.append(md)

        for seq in range(start, 9):
            p.produce("t", str(seq).encode(), partition=seq % PARTS, sequence=seq,
                      on_delivery=on_delivery)
        p.flush()
        assert sorted(md.duplicate for md in delivered) == [False] * 4 + [True] * 2
        assert p.next_sequence() == 9
        assert sequences_in(mq) == list(range(9))


def test_skipped_sequences_and_errors(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=PARTS)
    p = mq.producer(name="sparse")
    for seq in [0, 1, 7, 8]:
        p.send("t", str(seq).encode(), sequence=seq)
    assert p.next_sequence() == 2
    assert mq.producer().next_sequence() == 0  # anonymous: nothing written
    plain = mq.producer(idempotent=False)
    with pytest.raises(mqlite.InvalidArgument, match="idempotent"):
        plain.next_sequence()
    p.close()
    with pytest.raises(mqlite.Closed):
        p.next_sequence()
