"""Every invalid input raises the right exception class, with its code."""

import pytest

import mqlite


def test_exception_tree() -> None:
    kinds = [
        (mqlite.IoError, 1),
        (mqlite.DiskFull, 2),
        (mqlite.Locked, 3),
        (mqlite.InvalidArgument, 4),
        (mqlite.Closed, 5),
        (mqlite.Timeout, 6),
        (mqlite.InvalidTopicName, 100),
        (mqlite.TopicExists, 101),
        (mqlite.UnknownTopic, 102),
        (mqlite.InvalidConfig, 103),
        (mqlite.UnknownPartition, 200),
        (mqlite.OffsetOutOfRange, 201),
        (mqlite.Poisoned, 202),
        (mqlite.Corrupt, 300),
        (mqlite.UnsupportedVersion, 301),
        (mqlite.MessageTooLarge, 400),
        (mqlite.BufferFull, 401),
        (mqlite.OutOfOrderSequence, 402),
        (mqlite.ProducerFenced, 403),
        (mqlite.ProducerBusy, 404),
        (mqlite.TransactionTooLarge, 410),
    ]
    for cls, code in kinds:
        assert issubclass(cls, mqlite.Error)
        assert cls.code == code
        assert cls.__module__ == "mqlite"
    assert issubclass(mqlite.Error, Exception)
    assert issubclass(mqlite.DiskFull, mqlite.IoError)
    assert issubclass(mqlite.InvalidTopicName, mqlite.InvalidArgument)
    assert issubclass(mqlite.InvalidConfig, mqlite.InvalidArgument)


def test_unknown_topic(mq: mqlite.Broker) -> None:
    p = mq.producer()
    c = mq.consumer()
    calls = [
        lambda: p.send("nope", b"v"),
        lambda: mq.topic("nope"),
        lambda: mq.delete_topic("nope"),
        lambda: mq.add_partitions("nope", 2),
        lambda: mq.offset_for_timestamp("nope", 0, 0),
        lambda: c.assign([("nope", 0)]),
    ]
    for call in calls:
        with pytest.raises(mqlite.UnknownTopic) as info:
            call()
        assert info.value.code == 102
        assert "nope" in str(info.value)


def test_unknown_partition(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)
    with pytest.raises(mqlite.UnknownPartition) as info:
        mq.producer().send("t", b"v", partition=2)
    assert info.value.code == 200
    with pytest.raises(mqlite.UnknownPartition):
        mq.consumer().assign([("t", 5)])
    with pytest.raises(mqlite.UnknownPartition):
        mq.offset_for_timestamp("t", 9, 0)
    with pytest.raises(mqlite.InvalidArgument):
        mq.producer().send("t", b"v", partition=-1)


def test_message_too_large(mq: mqlite.Broker) -> None:
    mq.create_topic("t", max_message_bytes=1024)
    p = mq.producer()
    p.send("t", b"x" * 500)
    with pytest.raises(mqlite.MessageTooLarge) as info:
        p.send("t", b"x" * 2000)
    assert info.value.code == 400
    assert mq.topic("t").partitions[0].end_offset == 1  # nothing written


@pytest.mark.parametrize("acks", [2, -2, 100, "some", "", "ALL"])
def test_bad_acks_value(mq: mqlite.Broker, acks: object) -> None:
    with pytest.raises(mqlite.InvalidArgument):
        mq.producer(acks=acks)  # type: ignore[arg-type]


@pytest.mark.parametrize("acks", [1.0, True, b"all", [1]])
def test_bad_acks_type(mq: mqlite.Broker, acks: object) -> None:
    with pytest.raises(TypeError):
        mq.producer(acks=acks)  # type: ignore[arg-type]


def test_bad_consumer_settings(mq: mqlite.Broker) -> None:
    with pytest.raises(mqlite.InvalidArgument):
        mq.consumer(auto_offset_reset="sometimes")  # type: ignore[arg-type]
    with pytest.raises(mqlite.InvalidArgument):
        mq.consumer(max_poll_records=0)
    with pytest.raises(TypeError):
        mq.consumer(auto_offset_reset=1)  # type: ignore[arg-type]
    for ok in ("earliest", "latest", "error"):
        mq.consumer("g", auto_offset_reset=ok)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"partitions": 0},
        {"partitions": -1},
        {"partitions": 100_001},
        {"segment_bytes": 100},
        {"segment_bytes": -5},
        {"segment_bytes": 8192, "max_message_bytes": 8193},
        {"max_message_bytes": 10},
        {"retention_ms": -1},
        {"retention_bytes": -1},
    ],
)
def test_bad_topic_config(mq: mqlite.Broker, kwargs: dict) -> None:
    with pytest.raises(mqlite.InvalidConfig) as info:
        mq.create_topic("t", **kwargs)
    assert info.value.code == 103
    assert mq.topics() == []


def test_add_partitions_must_grow(mq: mqlite.Broker) -> None:
    mq.create_topic("t", partitions=2)
    with pytest.raises(mqlite.InvalidArgument):
        mq.add_partitions("t", 2)
    with pytest.raises(mqlite.InvalidConfig):
        mq.add_partitions("t", -3)


def test_seek_errors(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    mq.producer().send("t", b"v")
    c = mq.consumer()
    with pytest.raises(mqlite.InvalidArgument):
        c.seek("t", 0, 0)  # not assigned
    c.assign([("t", 0)])
    with pytest.raises(mqlite.OffsetOutOfRange) as info:
        c.seek("t", 0, 5)
    assert info.value.code == 201
    with pytest.raises(mqlite.InvalidArgument):
        c.seek("t", 0, -1)
    with pytest.raises(mqlite.InvalidArgument):
        c.position("t", 1)


def test_bad_open_arguments(tmp_path) -> None:
    with pytest.raises(mqlite.InvalidArgument):
        mqlite.open(tmp_path / "a", file_mode=0o10000)
    with pytest.raises(mqlite.InvalidArgument):
        mqlite.open(tmp_path / "b", retention_check_interval_ms=-1)
    with pytest.raises(TypeError):
        mqlite.open(123)  # type: ignore[arg-type]


def test_bad_timeouts(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    c = mq.consumer()
    c.subscribe("t")
    for bad in (-1, -0.001, float("nan")):
        with pytest.raises(mqlite.InvalidArgument):
            c.poll(timeout=bad)
        with pytest.raises(mqlite.InvalidArgument):
            c.consume(1, timeout=bad)
        with pytest.raises(mqlite.InvalidArgument):
            mq.producer().flush(timeout=bad)
    with pytest.raises(mqlite.InvalidArgument):
        c.consume(0, timeout=0)


def test_three_classes_are_also_builtin_exceptions() -> None:
    pairs = [
        (mqlite.InvalidArgument, ValueError),
        (mqlite.InvalidTopicName, ValueError),
        (mqlite.InvalidConfig, ValueError),
        (mqlite.Timeout, TimeoutError),
        (mqlite.BufferFull, BufferError),
    ]
    for cls, builtin in pairs:
        assert issubclass(cls, builtin) and issubclass(cls, mqlite.Error), cls
        assert cls.__module__ == "mqlite" and cls.__qualname__ == cls.__name__
    # The others are not.
    for cls in (mqlite.UnknownTopic, mqlite.Closed, mqlite.IoError):
        assert not issubclass(cls, (ValueError, TimeoutError, BufferError)), cls
    # The tree below them is unchanged.
    assert mqlite.InvalidTopicName.__mro__[1] is mqlite.InvalidArgument
    assert mqlite.InvalidConfig.__mro__[1] is mqlite.InvalidArgument
    assert mqlite.InvalidArgument.__mro__[1] is mqlite.Error


def test_except_value_error_catches_bad_arguments(mq: mqlite.Broker) -> None:
    def bad_partitions() -> None:
        mqlite.partition_for_key(b"k", 0)

    def bad_name() -> None:
        mq.create_topic("a b")

    def bad_config() -> None:
        mq.create_topic("t", segment_bytes=1)

    def bad_timeout() -> None:
        mq.producer().flush(timeout=-1)

    for call, cls, code in [
        (bad_partitions, mqlite.InvalidArgument, 4),
        (bad_name, mqlite.InvalidTopicName, 100),
        (bad_config, mqlite.InvalidConfig, 103),
        (bad_timeout, mqlite.InvalidArgument, 4),
    ]:
        try:
            call()
        except ValueError as e:
            assert type(e) is cls and isinstance(e, mqlite.Error), repr(e)
            assert e.code == code  # type: ignore[attr-defined]
            assert str(e)
        else:
            raise AssertionError(f"{call.__name__} raised nothing")
    assert mq.topics() == []


def test_except_buffer_error_catches_a_full_buffer(mq: mqlite.Broker) -> None:
    mq.create_topic("t", segment_bytes=1 << 20)
    p = mq.producer(acks="all", linger_ms=60_000, buffer_memory=4096, max_block_ms=0)
    with pytest.raises(BufferError) as info:
        for _ in range(100):
            p.produce("t", b"x" * 1000)
    e = info.value
    assert type(e) is mqlite.BufferFull and e.code == 401  # type: ignore[attr-defined]
    assert e.limit == 4096  # type: ignore[attr-defined]
    p.flush()


def test_timeout_instances_behave_as_timeout_errors() -> None:
    # No call of the module raises Timeout (Producer.flush returns what is
    # still queued); an instance is still an ordinary TimeoutError.
    e = mqlite.Timeout("timed out after 5 ms")
    assert isinstance(e, TimeoutError) and isinstance(e, OSError)
    assert str(e) == "timed out after 5 ms" and e.args == ("timed out after 5 ms",)
    assert e.code == 6


def test_classes_follow_the_core_list_of_kinds() -> None:
    """Every core error kind has its own class, with its code, and every
    exception class of the module is one of them (or the root)."""
    kinds = mqlite._mqlite._error_kinds()  # type: ignore[attr-defined]
    assert len({code for code, _, _ in kinds}) == len(kinds)
    assert len({status for _, _, status in kinds}) == len(kinds)
    classes = {name: getattr(mqlite, name) for _, name, _ in kinds}
    assert len(set(classes.values())) == len(kinds)
    for code, name, status in kinds:
        cls = classes[name]
        assert cls.__name__ == name and cls.code == code, name
        assert issubclass(cls, mqlite.Error)
        assert status.startswith("MQL_")
    exported = {
        name
        for name in mqlite.__all__
        if isinstance(getattr(mqlite, name), type)
        and issubclass(getattr(mqlite, name), mqlite.Error)
    }
    assert exported == set(classes) | {"Error"}
    assert issubclass(mqlite.CommitFailed, mqlite.Error) and mqlite.CommitFailed.code == 500
    assert issubclass(mqlite.InvalidRecordState, mqlite.Error) and mqlite.InvalidRecordState.code == 501
    assert issubclass(mqlite.BufferFull, BufferError)
    assert issubclass(mqlite.Timeout, TimeoutError)
    assert issubclass(mqlite.InvalidConfig, ValueError)
