"""Subscribing to a regular expression picks up topics created later, in a
group and outside one."""

from __future__ import annotations

import re

import pytest
from groups_util import SEG, drain_all, ids, settle

import mqlite


@pytest.mark.parametrize("group", [None, "g"])
def test_pattern_picks_up_a_new_topic(mq: mqlite.Broker, group: str | None) -> None:
    mq.create_topic("ev-a", segment_bytes=SEG)
    mq.create_topic("other", segment_bytes=SEG)
    c = mq.consumer(group)
    c.subscribe("^ev-.*")
    assert c.assignment() == [("ev-a", 0)]
    p = mq.producer()
    p.send("ev-a", b"1")
    p.send("other", b"no")
    mq.create_topic("ev-b", partitions=2, segment_bytes=SEG)
    p.send("ev-b", b"2", partition=1)
    got: dict[int, list[mqlite.Message]] = {}
    drain_all([c], 2, got)
    assert sorted((m.topic, m.value) for m in got[0]) == [("ev-a", b"1"), ("ev-b", b"2")]
    assert sorted(c.assignment()) == [("ev-a", 0), ("ev-b", 0), ("ev-b", 1)]
    assert c.poll(0.05) is None  # "other" does not match


def test_pattern_matches_whole_names(mq: mqlite.Broker) -> None:
    for t in ("log", "logs", "xlog"):
        mq.create_topic(t, segment_bytes=SEG)
    c = mq.consumer("g")
    c.subscribe("^log")
    assert c.assignment() == [("log", 0)]


def test_compiled_pattern_with_flags(mq: mqlite.Broker) -> None:
    mq.create_topic("Orders", segment_bytes=SEG)
    mq.create_topic("orders.eu", segment_bytes=SEG)
    mq.create_topic("refunds", segment_bytes=SEG)
    c = mq.consumer("g")
    c.subscribe(re.compile(r""" [Oo]rders   # either case
                                (\.\w+)?  # a region """, re.VERBOSE))
    assert sorted(c.assignment()) == [("Orders", 0), ("orders.eu", 0)]
    # Case-insensitive matching, by flag or inline.
    c1 = mq.consumer("g1")
    c1.subscribe(re.compile(r"orders(\.eu)?", re.IGNORECASE))
    assert sorted(c1.assignment()) == [("Orders", 0), ("orders.eu", 0)]
    c2 = mq.consumer("g2")
    c2.subscribe("^(?i)orders")
    assert sorted(c2.assignment()) == [("Orders", 0)]


def test_list_of_names_and_patterns(mq: mqlite.Broker) -> None:
    for t in ("a.1", "a.2", "ax1", "b"):
        mq.create_topic(t, segment_bytes=SEG)
    c = mq.consumer("g")
    c.subscribe(["b", "^a\\.\\d"])
    assert sorted(c.assignment()) == [("a.1", 0), ("a.2", 0), ("b", 0)]
    # A name beside a pattern must exist, and matches itself only ("." is literal).
    c2 = mq.consumer()
    c2.subscribe(["a.1", "^zzz"])
    assert c2.assignment() == [("a.1", 0)]
    with pytest.raises(mqlite.UnknownTopic):
        c2.subscribe(["nope", "^a.*"])
    assert c2.assignment() == [("a.1", 0)]  # unchanged


def test_two_members_share_pattern_topics(mq: mqlite.Broker) -> None:
    mq.create_topic("m-1", partitions=2, segment_bytes=SEG)
    a = mq.consumer("g", client_id="a")
    b = mq.consumer("g", client_id="b")
    a.subscribe("^m-\\d+")
    b.subscribe("^m-\\d+")
    settle([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)
    mq.create_topic("m-2", partitions=2, segment_bytes=SEG)
    settle([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
    assert sorted(a.assignment() + b.assignment()) == [("m-1", 0), ("m-1", 1), ("m-2", 0), ("m-2", 1)]


def test_invalid_patterns(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=SEG)
    c = mq.consumer("g")
    c.subscribe("t")
    for bad in ("^(", "^a{99999999}", re.compile(r"(?=t)t")):
        with pytest.raises(mqlite.InvalidArgument, match="pattern"):
            c.subscribe(bad)
    # Nothing changed.
    assert c.assignment() == [("t", 0)]
    with pytest.raises(TypeError, match="bytes"):
        c.subscribe(re.compile(b"t"))  # type: ignore[arg-type]
    assert ids(c.consume(1, timeout=0)) == []
