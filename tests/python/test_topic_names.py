"""Topic names follow Kafka's rules; bad ones raise InvalidTopicName."""

import pytest

import mqlite


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a/b", "a b", "__x", "__consumer_offsets", "é", "a\0b", "x" * 250],
)
def test_invalid_names(mq: mqlite.Broker, name: str) -> None:
    with pytest.raises(mqlite.InvalidTopicName) as info:
        mq.create_topic(name)
    assert info.value.code == 100
    # It is also an InvalidArgument, and an mqlite.Error.
    assert isinstance(info.value, mqlite.InvalidArgument)
    assert mq.topics() == []


@pytest.mark.parametrize("name", ["a", "orders", "a.b-c_d", "A9", "_single", "x" * 249])
def test_valid_names(mq: mqlite.Broker, name: str) -> None:
    mq.create_topic(name)
    assert mq.topics() == [name]
    assert mqlite.MAX_TOPIC_NAME_LEN == 249


def test_duplicate_topic(mq: mqlite.Broker) -> None:
    mq.create_topic("t")
    with pytest.raises(mqlite.TopicExists):
        mq.create_topic("t", partitions=3)
