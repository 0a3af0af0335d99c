"""The public API of mqlite as a table: for every public method of every
class, a valid call and the kind of each argument.

The contract tests (``test_contract_*.py``) iterate over it: every method
after ``close()``, in a forked child, and with arguments of the wrong type.
``test_contract_closed.py`` checks that the table covers every public
method the module has, so a new method cannot escape the contract.

Run as a script (``python contract_calls.py DIR``), it calls every method with
every wrong argument of its kinds and prints one line per mismatch; the test
runs it in a subprocess so that a crash cannot take pytest down with it.
"""

from __future__ import annotations

import inspect
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

import mqlite

#: The resource classes, whose methods follow the open/closed contract.
CLASSES: Tuple[type, ...] = (
    mqlite.Broker,
    mqlite.Producer,
    mqlite.Consumer,
    mqlite.Processor,
    mqlite.ShareConsumer,
)

#: Dunder methods that are part of the public protocol of those classes.
PROTOCOL = ("__enter__", "__exit__", "__iter__", "__next__", "__len__")


def public_methods(cls: type) -> List[str]:
    """The public methods of ``cls`` (properties excluded)."""
    out = []
    for name in dir(cls):
        if name.startswith("_") and name not in PROTOCOL:
            continue
        attr = inspect.getattr_static(cls, name)
        if inspect.isdatadescriptor(attr):
            continue
        if callable(attr):
            out.append(name)
    return sorted(out)


def public_properties(cls: type) -> List[str]:
    """The public read-only attributes of ``cls``."""
    return sorted(
        name
        for name in dir(cls)
        if not name.startswith("_") and inspect.isdatadescriptor(inspect.getattr_static(cls, name))
    )


def callback(*args: object) -> bool:
    """A callable for every callback argument."""
    return True


@dataclass
class Env:
    """A broker with topic ``t`` (2 partitions, one record in partition 0),
    and one object of each class made from it."""

    broker: mqlite.Broker
    producer: mqlite.Producer
    consumer: mqlite.Consumer
    processor: mqlite.Processor
    #: The processor's consumer.
    processor_consumer: mqlite.Consumer
    #: A share consumer of group ``sg`` subscribed to ``t``.
    share_consumer: mqlite.ShareConsumer
    #: The record of partition 0, delivered to ``share_consumer``.
    share_message: mqlite.ShareMessage

    def target(self, cls: str) -> Any:
        return {
            "Broker": self.broker,
            "Producer": self.producer,
            "Consumer": self.consumer,
            "Processor": self.processor,
            "ShareConsumer": self.share_consumer,
            "ShareMessage": self.share_message,
        }[cls]

    def close_all(self) -> None:
        for c in (self.consumer, self.processor_consumer, self.share_consumer):
            c.close()
        self.producer.close()
        self.broker.close()


@dataclass(frozen=True)
class FromEnv:
    """An argument that is an object of the environment (its attribute
    ``attr``), put in when the call is made."""

    attr: str


SEGMENT = 1 << 20


def make_env(path: Path, mode: Optional[str] = None) -> Env:
    broker = mqlite.open(path, mode=mode, prefault=False, retention_check_interval_ms=0)
    broker.create_topic("t", partitions=2, segment_bytes=SEGMENT)
    producer = broker.producer(name="p", transactional_id="p-tx")
    producer.send("t", b"v", partition=0)
    # Offsets stored by hand, so that store_offsets() is a valid call.
    consumer = broker.consumer("g", enable_auto_offset_store=False)
    consumer.assign([("t", 0), ("t", 1)])
    processor_consumer = broker.consumer("g2")
    processor_consumer.subscribe("t")
    processor = mqlite.Processor(processor_consumer, 1)
    share_consumer = broker.share_consumer("sg", "t")
    share_message = share_consumer.poll(timeout=5)
    assert share_message is not None
    return Env(broker, producer, consumer, processor, processor_consumer, share_consumer, share_message)


@dataclass
class Call:
    """A valid call of ``owner.name`` and the kind of each argument."""

    owner: str
    name: str
    kwargs: Dict[str, Any] = field(default_factory=dict)
    kinds: Dict[str, str] = field(default_factory=dict)
    #: Positional arguments (only for ``__exit__``, which takes ``*exc``).
    args: Tuple[Any, ...] = ()
    #: Run on a fresh environment before its calls (e.g. begin a
    #: transaction for the calls that need one open).
    before: Optional[Callable[[Env], Any]] = None

    @property
    def id(self) -> str:
        return f"{self.owner}.{self.name}"

    def kwargs_for(self, env: Env) -> Dict[str, Any]:
        """The keyword arguments, with the environment's objects put in."""
        return {k: getattr(env, v.attr) if isinstance(v, FromEnv) else v for k, v in self.kwargs.items()}


# The valid calls. Every keyword is an argument of the method; `kinds` says
# what each accepts (see BAD below).
METHOD_CALLS: List[Call] = [
    # Broker
    Call("Broker", "__enter__"),
    Call("Broker", "__exit__", args=(None, None, None)),
    Call("Broker", "add_partitions", {"name": "t", "partitions": 3}, {"name": "str", "partitions": "u32"}),
    Call("Broker", "close"),
    Call(
        "Broker",
        "consumer",
        {
            "group_id": "g3",
            "client_id": "c",
            "assignment_strategy": "by_config",
            "auto_offset_reset": "earliest",
            "enable_auto_commit": True,
            "auto_commit_interval_ms": 1000,
            "max_poll_interval_ms": 1000,
            "broadcast": False,
            "max_poll_records": 10,
            "wanted_partitions": [("t", 0)],
            "on_commit": callback,
            "enable_auto_offset_store": True,
            "isolation_level": "read_uncommitted",
            "commit_acks": 1,
        },
        {
            "group_id": "str?",
            "client_id": "str",
            "assignment_strategy": "str",
            "auto_offset_reset": "str",
            "enable_auto_commit": "bool",
            "auto_commit_interval_ms": "uint",
            "max_poll_interval_ms": "uint",
            "broadcast": "bool",
            "max_poll_records": "uint",
            "wanted_partitions": "pairs?",
            "on_commit": "callable?",
            "enable_auto_offset_store": "bool",
            "isolation_level": "str",
            "commit_acks": "acks",
        },
    ),
    Call(
        "Broker",
        "share_consumer",
        {
            "group": "sg2",
            "topics": "t",
            "lock_duration_ms": 1000,
            "max_deliveries": 3,
            "dead_letter_topic": "t.dead",
            "max_in_flight": 100,
            "max_poll_records": 10,
            "auto_offset_reset": "latest",
            "commit_acks": 1,
            "client_id": "c",
        },
        {
            "group": "str",
            "topics": "topics?",
            "lock_duration_ms": "uint",
            "max_deliveries": "u32?",
            "dead_letter_topic": "str?",
            "max_in_flight": "u32",
            "max_poll_records": "uint",
            "auto_offset_reset": "str",
            "commit_acks": "acks",
            "client_id": "str?",
        },
    ),
    Call(
        "Broker",
        "create_topic",
        {
            "name": "u",
            "partitions": 2,
            "segment_bytes": SEGMENT,
            "retention_ms": 1000,
            "retention_bytes": 1 << 30,
            "max_message_bytes": 1000,
            "log_append_time": True,
            "retention_respects_groups": True,
        },
        {
            "name": "str",
            "partitions": "u32",
            "segment_bytes": "uint?",
            "retention_ms": "uint?",
            "retention_bytes": "uint?",
            "max_message_bytes": "u32?",
            "log_append_time": "bool",
            "retention_respects_groups": "bool",
        },
    ),
    Call("Broker", "delete_topic", {"name": "t"}, {"name": "str"}),
    Call("Broker", "describe_group", {"name": "g"}, {"name": "str"}),
    Call("Broker", "enforce_retention"),
    Call("Broker", "flush"),
    Call(
        "Broker",
        "offset_for_timestamp",
        {"topic": "t", "partition": 0, "timestamp_ms": 0},
        {"topic": "str", "partition": "u32", "timestamp_ms": "int"},
    ),
    Call(
        "Broker",
        "producer",
        {
            "name": "p2",
            "idempotent": True,
            "acks": "all",
            "linger_ms": 1,
            "batch_size": 100,
            "buffer_memory": 1 << 20,
            "max_block_ms": 100,
            "compression": "lz4",
            "partitioner": "round_robin",
            "dedup_window": 5,
            "strict_sequences": True,
            "interceptors": [],
            "retries": 3,
            "fault_backoff_ms": 1000,
            "delivery_timeout_ms": 0,
            "transactional_id": "p2-tx",
            "max_transaction_bytes": 1 << 20,
            "transaction_timeout_ms": 1000,
            "access_mode": "exclusive",
            "initial_sequence": 0,
        },
        {
            "name": "str?",
            "idempotent": "bool",
            "acks": "acks",
            "linger_ms": "uint",
            "batch_size": "uint",
            "buffer_memory": "uint",
            "max_block_ms": "uint",
            "compression": "str?",
            "partitioner": "partitioner?",
            "dedup_window": "uint",
            "strict_sequences": "bool",
            "interceptors": "objects?",
            "retries": "u32",
            "fault_backoff_ms": "uint",
            "delivery_timeout_ms": "uint",
            "transactional_id": "str?",
            "max_transaction_bytes": "uint",
            "transaction_timeout_ms": "uint",
            "access_mode": "str?",
            "initial_sequence": "uint?",
        },
    ),
    Call("Broker", "topic", {"name": "t"}, {"name": "str"}),
    Call("Broker", "topics"),
    Call("Broker", "groups"),
    Call("Broker", "damaged"),
    # Producer
    Call("Producer", "__enter__"),
    Call("Producer", "__exit__", args=(None, None, None)),
    Call("Producer", "close"),
    Call("Producer", "flush", {"timeout": 5.0}, {"timeout": "timeout?"}),
    Call("Producer", "__len__"),
    Call("Producer", "last_sequence"),
    Call("Producer", "next_sequence"),
    Call("Producer", "next_auto_sequence"),
    Call("Producer", "poll", {"timeout": 0.0}, {"timeout": "timeout?"}),
    Call(
        "Producer",
        "produce",
        {
            "topic": "t",
            "value": b"v",
            "key": b"k",
            "partition": 1,
            "headers": [("h", b"v")],
            "timestamp": 1,
            "sequence": 7,
            "on_delivery": callback,
            "delay_ms": None,
            "deliver_at": None,
        },
        {
            "topic": "str",
            "value": "data?",
            "key": "data?",
            "partition": "u32?",
            "headers": "headers?",
            "timestamp": "int?",
            "sequence": "uint?",
            "on_delivery": "callable?",
            "delay_ms": "uint?",
            "deliver_at": "int?",
        },
    ),
    Call(
        "Producer",
        "send",
        {
            "topic": "t",
            "value": b"v",
            "key": b"k",
            "partition": 1,
            "headers": {"h": b"v"},
            "timestamp": 1,
            "sequence": 8,
            "delay_ms": None,
            "deliver_at": None,
        },
        {
            "topic": "str",
            "value": "data?",
            "key": "data?",
            "partition": "u32?",
            "headers": "headers?",
            "timestamp": "int?",
            "sequence": "uint?",
            "delay_ms": "uint?",
            "deliver_at": "int?",
        },
    ),
    Call(
        "Producer",
        "send_batch",
        {
            "topic": "t",
            "values": [b"a", b"b"],
            "keys": [b"k", None],
            "partition": 0,
            "headers": [("h", b"v")],
            "timestamps": [1, 2],
            "sequences": 10,
            "delay_ms": None,
            "deliver_at": None,
        },
        {
            "topic": "str",
            "values": "datas",
            "keys": "datas?",
            "partition": "u32?",
            "headers": "headers?",
            "timestamps": "ints?",
            "sequences": "uints?",
            "delay_ms": "uint?",
            "deliver_at": "int?",
        },
    ),
    Call("Producer", "stats"),
    # Producer: transactions (the environment's producer has a transactional id)
    Call("Producer", "transaction"),
    Call("Producer", "init_transactions", {"timeout": 5.0}, {"timeout": "timeout?"}),
    Call("Producer", "begin_transaction"),
    Call(
        "Producer",
        "send_offsets_to_transaction",
        {"offsets": [("t", 0, 1)], "group_metadata": "g", "timeout": 5.0},
        {"offsets": "offsets", "group_metadata": "str", "timeout": "timeout?"},
        before=lambda env: env.producer.begin_transaction(),
    ),
    Call(
        "Producer",
        "commit_transaction",
        {"timeout": 5.0},
        {"timeout": "timeout?"},
        before=lambda env: env.producer.begin_transaction(),
    ),
    Call(
        "Producer",
        "abort_transaction",
        {"timeout": 5.0},
        {"timeout": "timeout?"},
        before=lambda env: env.producer.begin_transaction(),
    ),
    # Consumer
    Call("Consumer", "__enter__"),
    Call("Consumer", "__exit__", args=(None, None, None)),
    Call("Consumer", "__iter__"),
    Call("Consumer", "__next__"),
    Call("Consumer", "assign", {"partitions": [("t", 0)]}, {"partitions": "pairs"}),
    Call("Consumer", "assignment"),
    Call("Consumer", "close"),
    Call(
        "Consumer",
        "commit",
        {"offsets": [("t", 0, 1)], "asynchronous": False},
        {"offsets": "offsets?", "asynchronous": "bool"},
    ),
    Call("Consumer", "committed", {"partitions": [("t", 0)]}, {"partitions": "pairs?"}),
    Call(
        "Consumer",
        "consume",
        {"num_messages": 5, "timeout": 0.0},
        {"num_messages": "uint", "timeout": "timeout?"},
    ),
    Call("Consumer", "lag"),
    Call("Consumer", "pause", {"partitions": [("t", 0)]}, {"partitions": "pairs"}),
    Call("Consumer", "paused"),
    Call("Consumer", "offsets_for_times", {"partitions": [("t", 0, 0)]}, {"partitions": "times"}),
    Call("Consumer", "poll", {"timeout": 0.0}, {"timeout": "timeout?"}),
    Call("Consumer", "poll_batch", {"timeout": 0.0}, {"timeout": "timeout?"}),
    Call("Consumer", "position", {"topic": "t", "partition": 0}, {"topic": "str", "partition": "u32"}),
    Call(
        "Consumer",
        "seek",
        {"topic": "t", "partition": 0, "offset": 0},
        {"topic": "str", "partition": "u32", "offset": "uint"},
    ),
    Call("Consumer", "resume", {"partitions": [("t", 0)]}, {"partitions": "pairs"}),
    Call("Consumer", "seek_to_beginning", {"topic": "t", "partition": 0}, {"topic": "str", "partition": "u32"}),
    Call("Consumer", "seek_to_end", {"topic": "t", "partition": 0}, {"topic": "str", "partition": "u32"}),
    Call("Consumer", "seek_to_id", {"id": "t:0:0"}, {"id": "str"}),
    Call("Consumer", "stats"),
    Call(
        "Consumer",
        "store_offsets",
        {"offsets": [("t", 0, 1)], "message": None},
        {"offsets": "offsets?", "message": "message?"},
    ),
    Call(
        "Consumer",
        "subscribe",
        {"topics": "t", "on_assign": callback, "on_revoke": callback, "on_lost": callback},
        {"topics": "topics", "on_assign": "callable?", "on_revoke": "callable?", "on_lost": "callable?"},
    ),
    Call("Consumer", "unsubscribe"),
    Call("Consumer", "wakeup"),
    Call("Consumer", "consumer_group_metadata"),
    # ShareConsumer (the environment's holds one message: share_message)
    Call("ShareConsumer", "__enter__"),
    Call("ShareConsumer", "__exit__", args=(None, None, None)),
    Call("ShareConsumer", "__iter__"),
    Call("ShareConsumer", "__next__", before=lambda env: env.share_consumer.release(env.share_message)),
    Call("ShareConsumer", "ack", {"messages": FromEnv("share_message")}, {"messages": "share_messages"}),
    Call("ShareConsumer", "backlog"),
    Call("ShareConsumer", "close"),
    Call(
        "ShareConsumer",
        "consume",
        {"num_messages": 5, "timeout": 0.0},
        {"num_messages": "uint", "timeout": "timeout?"},
    ),
    Call("ShareConsumer", "poll", {"timeout": 0.0}, {"timeout": "timeout?"}),
    Call("ShareConsumer", "poll_batch", {"timeout": 0.0}, {"timeout": "timeout?"}),
    Call(
        "ShareConsumer",
        "reject",
        {"messages": FromEnv("share_message"), "reason": "bad"},
        {"messages": "share_messages", "reason": "str"},
    ),
    Call(
        "ShareConsumer",
        "release",
        {"messages": FromEnv("share_message"), "delay_ms": 10},
        {"messages": "share_messages", "delay_ms": "uint"},
    ),
    Call("ShareConsumer", "renew", {"messages": FromEnv("share_message")}, {"messages": "share_messages"}),
    Call("ShareConsumer", "stats"),
    Call("ShareConsumer", "subscribe", {"topics": ["t"]}, {"topics": "topics"}),
    Call("ShareConsumer", "wakeup"),
    # ShareMessage: its settling calls follow its consumer's open/closed contract
    Call("ShareMessage", "ack"),
    Call("ShareMessage", "reject", {"reason": "bad"}, {"reason": "str"}),
    Call("ShareMessage", "release", {"delay_ms": 10}, {"delay_ms": "uint"}),
    Call("ShareMessage", "renew"),
    # Processor (run() is preceded by stop(), so that it returns at once)
    Call("Processor", "run", {"handler": callback}, {"handler": "callable"}),
    Call("Processor", "run_batches", {"handler": callback}, {"handler": "callable"}),
    Call("Processor", "stop"),
]

#: Constructors and module functions: (id, function, valid kwargs, kinds).
FUNCTION_CALLS: List[Tuple[str, Callable[..., Any], Dict[str, Any], Dict[str, str]]] = [
    (
        "mqlite.open",
        mqlite.open,
        {"path": "DIR", "prefault": False, "file_mode": 0o600, "retention_check_interval_ms": 0,
         "max_commit_metadata_bytes": 4096, "max_open_files": 8, "mode": "exclusive", "shared": False,
         "readonly": False,
         "auto_create_topics": True, "default_partitions": 2, "kafka": {"client.id": "c"}},
        {"path": "path", "prefault": "bool", "file_mode": "uint", "retention_check_interval_ms": "uint",
         "max_commit_metadata_bytes": "uint", "max_open_files": "uint", "mode": "str?", "shared": "bool?",
         "readonly": "bool",
         "auto_create_topics": "bool", "default_partitions": "u32", "kafka": "str_map?"},
    ),
    (
        "mqlite.Broker",
        mqlite.Broker,
        {"path": "DIR", "prefault": False, "file_mode": 0o600, "retention_check_interval_ms": 0,
         "max_commit_metadata_bytes": 4096, "max_open_files": 8, "mode": "exclusive", "shared": False,
         "readonly": False,
         "auto_create_topics": True, "default_partitions": 2, "kafka": {"client.id": "c"}},
        {"path": "path", "prefault": "bool", "file_mode": "uint", "retention_check_interval_ms": "uint",
         "max_commit_metadata_bytes": "uint", "max_open_files": "uint", "mode": "str?", "shared": "bool?",
         "readonly": "bool",
         "auto_create_topics": "bool", "default_partitions": "u32", "kafka": "str_map?"},
    ),
    ("mqlite.murmur2", mqlite.murmur2, {"data": b"k"}, {"data": "data"}),
    (
        "mqlite.partition_for_key",
        mqlite.partition_for_key,
        {"key": b"k", "partitions": 3},
        {"key": "data", "partitions": "u32"},
    ),
    (
        "mqlite.ProducerRecord",
        mqlite.ProducerRecord,
        {
            "topic": "t",
            "value": b"v",
            "key": b"k",
            "partition": 0,
            "headers": [("h", b"v")],
            "timestamp": 1,
            "sequence": 1,
        },
        {
            "topic": "str",
            "value": "data?",
            "key": "data?",
            "partition": "u32?",
            "headers": "headers?",
            "timestamp": "int?",
            "sequence": "int?",
        },
    ),
    (
        "mqlite.Processor",
        mqlite.Processor,
        {
            "consumer": "CONSUMER",
            "threads": 2,
            "mode": "concurrently",
            "commit_interval_ms": 100,
            "max_in_flight": 10,
            "retry_backoff_ms": 10,
            "max_retries": 3,
            "dead_letter_topic": "t.dlq",
        },
        {
            "consumer": "consumer",
            "threads": "uint",
            "mode": "str",
            "commit_interval_ms": "uint",
            "max_in_flight": "uint",
            "retry_backoff_ms": "uint",
            "max_retries": "u32?",
            "dead_letter_topic": "str?",
        },
    ),
]

Expected = Union[Type[BaseException], Tuple[Type[BaseException], ...]]

_INT_BAD: List[Tuple[Any, Expected]] = [
    ("1", TypeError),
    (1.5, TypeError),
    (b"1", TypeError),
    ([1], TypeError),
    (2**64, OverflowError),
    (-(2**64), OverflowError),
    (10**100, OverflowError),
]
_UINT_BAD = _INT_BAD + [(-1, mqlite.InvalidArgument)]
_U32_BAD = _UINT_BAD + [(2**32, mqlite.InvalidArgument)]
_STR_BAD: List[Tuple[Any, Expected]] = [
    (5, TypeError),
    (b"t", TypeError),
    (1.5, TypeError),
    (["t"], TypeError),
    ("\ud800", ValueError),  # a lone surrogate cannot be UTF-8: UnicodeEncodeError
]
_DATA_BAD: List[Tuple[Any, Expected]] = [
    (5, TypeError),
    (1.5, TypeError),
    (object(), TypeError),
    (["v"], TypeError),
    ({"a": b"b"}, TypeError),
    ("\ud800", ValueError),
]
_CALLABLE_BAD: List[Tuple[Any, Expected]] = [(5, TypeError), ("f", TypeError), (b"f", TypeError)]
# A pair with a huge partition fails the (str, int) conversion as a whole:
# TypeError or OverflowError.
_PAIRS_BAD: List[Tuple[Any, Expected]] = [
    ("t", TypeError),
    (5, TypeError),
    ([5], TypeError),
    (["t"], TypeError),
    ([("t",)], TypeError),
    ([("t", "0")], TypeError),
    ([(0, 0)], TypeError),
    ([("t", 1.5)], TypeError),
    ([("t", -1)], mqlite.InvalidArgument),
    ([("t", 2**64)], (TypeError, OverflowError)),
]
_NONE_REQUIRED: List[Tuple[Any, Expected]] = [(None, TypeError)]

#: Wrong values of each kind of argument, with the exception each must raise.
BAD: Dict[str, List[Tuple[Any, Expected]]] = {
    "str": _NONE_REQUIRED + _STR_BAD,
    "str?": _STR_BAD,
    "int": _NONE_REQUIRED + _INT_BAD,
    "int?": _INT_BAD,
    "uint": _NONE_REQUIRED + _UINT_BAD,
    "uint?": _UINT_BAD,
    "u32": _NONE_REQUIRED + _U32_BAD,
    "u32?": _U32_BAD,
    "bool": [(None, TypeError), (1, TypeError), ("yes", TypeError), (b"", TypeError)],
    "bool?": [(1, TypeError), ("yes", TypeError), (b"", TypeError)],
    "timeout?": [
        ("1", TypeError),
        (b"1", TypeError),
        ([1], TypeError),
        (-1, mqlite.InvalidArgument),
        (-0.001, mqlite.InvalidArgument),
        (float("nan"), mqlite.InvalidArgument),
        (float("-inf"), mqlite.InvalidArgument),
        (10**400, OverflowError),
    ],
    "data": _NONE_REQUIRED + _DATA_BAD,
    "data?": _DATA_BAD,
    "datas": [
        (None, TypeError),
        (b"ab", TypeError),
        ("ab", TypeError),
        (bytearray(b"ab"), TypeError),
        (5, TypeError),
        ([5], TypeError),
        ([b"a", object()], TypeError),
    ],
    "datas?": [(b"ab", TypeError), ("ab", TypeError), (5, TypeError), ([5, b"a"], TypeError)],
    "ints?": [
        ("1", TypeError),
        (1.5, TypeError),
        (["x", "y"], TypeError),
        ([1.5, 2.5], TypeError),
        (2**64, OverflowError),
        ([2**64, 1], OverflowError),
    ],
    "uints?": [
        ("1", TypeError),
        (1.5, TypeError),
        (["x", "y"], TypeError),
        (2**64, OverflowError),
        (-1, mqlite.InvalidArgument),
        ([-1, -2], mqlite.InvalidArgument),
    ],
    "headers?": [
        ("a=b", TypeError),
        (b"a=b", TypeError),
        (5, TypeError),
        ([("a",)], TypeError),
        ([("a", b"1", b"2")], TypeError),
        ([(1, b"v")], TypeError),
        ([("a", 1)], TypeError),
        ([("a", None)], TypeError),
        ({1: b"v"}, TypeError),
        ({"a": 5}, TypeError),
        (["ab"], TypeError),
        ([("\ud800", b"v")], ValueError),
    ],
    "str_map?": [
        ("a=b", TypeError),
        (5, TypeError),
        ([("a", "b")], TypeError),
        ({1: "v"}, TypeError),
        ({"a": 5}, TypeError),
        ({"a": b"v"}, TypeError),
    ],
    "callable": _NONE_REQUIRED + _CALLABLE_BAD,
    "callable?": _CALLABLE_BAD,
    "pairs": _NONE_REQUIRED + _PAIRS_BAD,
    "pairs?": _PAIRS_BAD,
    "times": [
        (None, TypeError),
        ("t", TypeError),
        ([("t", 0)], TypeError),
        ([("t", "0", 0)], TypeError),
        ([("t", 0, "now")], TypeError),
        ([("t", -1, 0)], mqlite.InvalidArgument),
        ([("t", 0, 2**64)], (TypeError, OverflowError)),
    ],
    "offsets": [
        (None, TypeError),
        ("t", TypeError),
        (5, TypeError),
        ([("t", 0)], TypeError),
        ([("t", 0, "1")], TypeError),
        ([("t", 0, -1)], mqlite.InvalidArgument),
        ([("t", -1, 0)], mqlite.InvalidArgument),
    ],
    "offsets?": [
        ("t", TypeError),
        (5, TypeError),
        ([("t", 0)], TypeError),
        ([("t", 0, "1")], TypeError),
        ([("t", 0, 1, 5)], TypeError),
        ([("t", 0, -1)], mqlite.InvalidArgument),
        ([("t", -1, 0)], mqlite.InvalidArgument),
    ],
    "topics": [(None, TypeError), (5, TypeError), ([5], TypeError), (b"t", TypeError), ([b"t"], TypeError)],
    "topics?": [(5, TypeError), ([5], TypeError), (b"t", TypeError), ([b"t"], TypeError)],
    "share_messages": [
        (None, TypeError),
        (5, TypeError),
        ("m", TypeError),
        (b"m", TypeError),
        ([5], TypeError),
        ([None], TypeError),
        (("t", 0, 0), TypeError),
    ],
    "acks": [
        (1.5, TypeError),
        (b"all", TypeError),
        ([1], TypeError),
        (True, TypeError),
        (2**64, OverflowError),
        (2, mqlite.InvalidArgument),
        ("some", mqlite.InvalidArgument),
    ],
    "partitioner?": [(5, TypeError), (b"sticky", TypeError), ("nope", mqlite.InvalidArgument)],
    "objects?": [(5, TypeError), ("ab", TypeError), ([object()], TypeError)],
    "path": [
        (None, TypeError),
        (5, TypeError),
        (1.5, TypeError),
        ("", mqlite.InvalidArgument),
        ("a\0b", mqlite.InvalidArgument),
    ],
    "consumer": [(None, TypeError), (5, TypeError), ("c", TypeError)],
    "message?": [(5, TypeError), ("m", TypeError), (("t", 0, 1), TypeError)],
}

#: ProducerRecord.replace(**changes): changes that must fail.
REPLACE_BAD: List[Tuple[Dict[str, Any], Expected]] = [
    ({"bogus": 1}, TypeError),
    ({"topic": 5}, TypeError),
    ({"value": 5}, TypeError),
    ({"key": 1.5}, TypeError),
    ({"partition": "0"}, TypeError),
    ({"partition": -1}, mqlite.InvalidArgument),
    ({"partition": 2**64}, OverflowError),
    ({"headers": "a=b"}, TypeError),
    ({"timestamp": "now"}, TypeError),
    ({"timestamp": 2**64}, OverflowError),
    ({"sequence": 1.5}, TypeError),
]


def _describe(e: BaseException) -> str:
    return f"{type(e).__module__}.{type(e).__qualname__}: {e}"


def _check(case: str, call: Callable[[], Any], expected: Expected, failures: List[str]) -> None:
    """Runs one bad call: it must raise `expected`, with a message."""
    print(case, flush=True)  # the last line names the culprit if this crashes
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - PanicException is a BaseException
        if not isinstance(e, expected) or isinstance(e, SystemError):
            failures.append(f"{case}: raised {_describe(e)}, expected {expected}")
        elif not str(e):
            failures.append(f"{case}: {type(e).__name__} without a message")
        return
    failures.append(f"{case}: no exception, expected {expected}")


def _valid(case: str, call: Callable[[], Any], failures: List[str]) -> None:
    """Runs the valid call the bad ones were derived from: it must work."""
    print(case, flush=True)
    try:
        call()
    except BaseException as e:  # noqa: BLE001
        failures.append(f"{case}: the valid call failed: {_describe(e)}")


def run_type_cases(root: Path) -> Tuple[int, List[str]]:
    """Every method and function with every wrong argument of its kinds.

    Returns the number of calls made and the failures."""
    failures: List[str] = []
    calls = 0
    n = 0

    def fresh() -> Env:
        nonlocal n
        n += 1
        return make_env(root / f"env{n}")

    for c in METHOD_CALLS:
        env = fresh()
        if c.before is not None:
            c.before(env)
        target = env.target(c.owner)
        method = getattr(target, c.name)
        valid = c.kwargs_for(env)
        for arg, kind in c.kinds.items():
            for value, expected in BAD[kind]:
                kwargs = dict(valid, **{arg: value})
                calls += 1
                _check(f"{c.id}({arg}={value!r})", lambda: method(*c.args, **kwargs), expected, failures)
        if c.owner == "Processor" and c.name in ("run", "run_batches"):
            env.processor.stop()  # so that the valid run() returns at once
        calls += 1
        _valid(f"{c.id} (valid)", lambda: method(*c.args, **valid), failures)
        env.close_all()

    for fid, fn, valid, kinds in FUNCTION_CALLS:
        env = fresh()

        def resolve(kwargs: Dict[str, Any]) -> Dict[str, Any]:
            out = dict(kwargs)
            if out.get("path") == "DIR":
                out["path"] = root / f"open{n}"
            if out.get("consumer") == "CONSUMER":
                out["consumer"] = env.broker.consumer("g4")
            return out

        for arg, kind in kinds.items():
            for value, expected in BAD[kind]:
                kwargs = resolve(dict(valid, **{arg: value}))
                calls += 1
                _check(f"{fid}({arg}={value!r})", lambda: fn(**kwargs), expected, failures)
        calls += 1
        made: List[Any] = []
        _valid(f"{fid} (valid)", lambda: made.append(fn(**resolve(valid))), failures)
        for obj in made:
            if isinstance(obj, mqlite.Broker):
                obj.close()
        env.close_all()

    record = mqlite.ProducerRecord("t", b"v")
    for changes, expected in REPLACE_BAD:
        calls += 1
        _check(f"ProducerRecord.replace(**{changes!r})", lambda: record.replace(**changes), expected, failures)
    return calls, failures


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        calls, failures = run_type_cases(Path(argv[0]))
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        return 2
    print(f"CALLS {calls}")
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
