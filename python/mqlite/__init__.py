"""mqlite: an embeddable, in-process, persistent message-queue engine.

Topics split into partitions; each partition is an append-only commit log of
memory-mapped segment files. There is no server: open a data directory and
produce and consume in your own process::

    import mqlite

    with mqlite.open("data") as mq:
        mq.create_topic("orders", partitions=4)
        producer = mq.producer()
        md = producer.send("orders", b"paid", key=b"o-1")
        consumer = mq.consumer("billing")
        consumer.subscribe(["orders"])
        msg = consumer.poll(timeout=1.0)
        consumer.commit()

Consumers with the same ``group_id`` share the partitions of the topics they
subscribe to (a consumer group, as in Kafka): each partition is read by one
member at a time, and partitions move between members in ``poll()`` as
members come and go, with optional ``on_assign`` / ``on_revoke`` callbacks.
Committed offsets are durable; ``Broker.describe_group()`` shows who owns
what.

Share consumers (``Broker.share_consumer()``) consume topics as a job
queue: the members of a share group take any message, each to one member
at a time, and acknowledge each (``ack()``), give it back (``release()``,
now or after a delay), reject it to a dead-letter topic (``reject()``) or
extend its lock (``renew()``); a message whose lock runs out is delivered
again::

    with mq.share_consumer("workers", "orders") as jobs:
        for msg in jobs:
            handle(msg.value)
            msg.ack()

Errors are subclasses of :class:`mqlite.Error`, whose ``code`` attribute is
the engine's stable numeric error code (shared with the C API); each class
also has its code as a class attribute. One class per error kind; three
are also built-in exceptions, so ``except ValueError`` catches a bad
argument and ``except BufferError`` a full producer buffer (``Timeout`` is
also a ``TimeoutError``)::

    Error (code 0 only on instances not raised by the engine)
    +-- IoError (1)
    |   +-- DiskFull (2)
    +-- Locked (3)
    +-- InvalidArgument (4), also a ValueError
    |   +-- InvalidTopicName (100)
    |   +-- InvalidConfig (103)
    +-- Closed (5)
    +-- Timeout (6), also a TimeoutError (raised by no call today)
    +-- ReadOnly (7)
    +-- TopicExists (101)
    +-- UnknownTopic (102)
    +-- UnknownPartition (200)
    +-- OffsetOutOfRange (201)
    +-- Poisoned (202)
    +-- Corrupt (300)
    +-- UnsupportedVersion (301)
    +-- MessageTooLarge (400)
    +-- BufferFull (401), also a BufferError
    +-- OutOfOrderSequence (402)
    +-- ProducerFenced (403)
    +-- ProducerBusy (404)
    +-- TransactionTooLarge (410)
    +-- CommitFailed (500)
    +-- InvalidRecordState (501)

A re-sent ``sequence`` is not an error: ``send()`` returns metadata with
``duplicate=True`` (and the original offset), and ``on_delivery`` gets it
with ``err`` None. A sequence that skips ahead (a gap) raises
``OutOfOrderSequence`` only with ``strict_sequences=True``.

Arguments of the wrong type raise ``TypeError``; integers too large for
their argument raise ``OverflowError``; a ``str`` that cannot be UTF-8 (a
lone surrogate) raises ``UnicodeEncodeError`` (a ``ValueError``); negative
or out-of-range values raise ``mqlite.InvalidArgument`` (or its subclass
``InvalidConfig``), also a ``ValueError``.

Logging: the engine's warnings (recovery cut a damaged log, a committed
offset was reset, background work failed) go to the ``logging`` logger
``mqlite``; ``open()`` and ``Broker.close()`` deliver theirs before they
return, others follow within moments from a thread of the module. Records
the logger would drop are filtered out in the engine at no cost; the level
is read again at each ``open()`` and at least once a second.

Threads: brokers, producers and consumers may be shared between threads.
Calls that wait release the GIL; a consumer serialises its calls.

Closing: after ``close()`` (of the object, or of the broker it came from)
every method raises ``mqlite.Closed``, except ``close()`` itself (closing
twice is fine), ``stats()`` (a final snapshot), ``Consumer.wakeup()``,
``ShareConsumer.wakeup()`` and ``Processor.stop()`` (which do nothing
then); iterating over a closed consumer ends the loop, and ``with`` on a
closed object raises. Closing a broker closes its share consumers.

``os.fork()``: a broker belongs to the process that opened it, and so do
the producers, consumers and processors made from it. Only the forking
thread survives in the child: the engine's background threads do not, and a
lock one of them held at that instant would stay locked. So in the child
these objects report ``closed`` and every method raises ``mqlite.Closed``
(the message names both processes), even ``stats()``; ``close()``,
``Consumer.wakeup()`` and ``Processor.stop()`` do nothing, and
garbage-collecting the objects leaves the parent's broker untouched.
Messages received before the fork stay readable. The child may open a
broker of its own: on another directory, on the parent's once the parent
has closed it (until then ``mqlite.Locked``), or at once in shared mode
when the parent opened it shared (the child inherits none
of the parent's locks: not its append locks, not its group memberships).
The parent is not affected,
and its ``close()`` releases the directory even while children live. With
``multiprocessing``, the "spawn" and "forkserver" start methods sidestep
all this: each worker opens its own broker.
"""

from __future__ import annotations

import os
from typing import Dict, Optional, Union

from ._mqlite import (
    MAX_TOPIC_NAME_LEN,
    Broker,
    BufferFull,
    Closed,
    CommitFailed,
    Consumer,
    ConsumerStats,
    Corrupt,
    DiskFull,
    Error,
    GroupInfo,
    InvalidArgument,
    InvalidConfig,
    InvalidRecordState,
    InvalidTopicName,
    IoError,
    Locked,
    Message,
    MessageId,
    MessageTooLarge,
    Mirror,
    MirrorStats,
    OffsetOutOfRange,
    OutOfOrderSequence,
    PartitionInfo,
    Poisoned,
    Processor,
    ProcessorStats,
    Producer,
    ProducerFenced,
    ProducerBusy,
    ProducerRecord,
    ProducerStats,
    ReadOnly,
    RecordMetadata,
    ShareBacklog,
    ShareConsumer,
    ShareConsumerStats,
    ShareMessage,
    Timeout,
    TopicExists,
    TopicInfo,
    Transaction,
    TransactionTooLarge,
    UnknownPartition,
    UnknownTopic,
    UnsupportedVersion,
    __version__,
    mirror,
    mirror_status,
    murmur2,
    partition_for_key,
)

__all__ = [
    "MAX_TOPIC_NAME_LEN",
    "Broker",
    "BufferFull",
    "Closed",
    "CommitFailed",
    "Consumer",
    "ConsumerStats",
    "Corrupt",
    "DiskFull",
    "Error",
    "GroupInfo",
    "InvalidArgument",
    "InvalidConfig",
    "InvalidRecordState",
    "InvalidTopicName",
    "IoError",
    "Locked",
    "Message",
    "MessageId",
    "MessageTooLarge",
    "Mirror",
    "MirrorStats",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "PartitionInfo",
    "Poisoned",
    "Processor",
    "ProcessorStats",
    "Producer",
    "ProducerFenced",
    "ProducerBusy",
    "ProducerRecord",
    "ProducerStats",
    "ReadOnly",
    "RecordMetadata",
    "ShareConsumer",
    "ShareBacklog",
    "ShareConsumerStats",
    "ShareMessage",
    "Timeout",
    "TopicExists",
    "TopicInfo",
    "Transaction",
    "TransactionTooLarge",
    "UnknownPartition",
    "UnknownTopic",
    "UnsupportedVersion",
    "__version__",
    "mirror",
    "mirror_status",
    "murmur2",
    "open",
    "partition_for_key",
]


def open(  # noqa: A001 - shadows the builtin on purpose, like gzip.open
    path: Union[str, "os.PathLike[str]"],
    *,
    prefault: bool = True,
    file_mode: int = 0o600,
    retention_check_interval_ms: int = 60_000,
    max_commit_metadata_bytes: int = 4096,
    max_open_files: int = 256,
    mode: Optional[str] = None,
    shared: Optional[bool] = None,
    readonly: bool = False,
    auto_create_topics: bool = False,
    default_partitions: int = 1,
    kafka: Optional[Dict[str, str]] = None,
) -> Broker:
    """Opens (creating if needed) the data directory at ``path``.

    Joins the processes that have the directory open, or takes it alone,
    and recovers every topic. Use the result as a context manager, or call
    ``close()`` when done.

    By default one handle owns the directory, and every other ``open()``
    of it raises ``mqlite.Locked``. In shared mode (``mode="shared"``, or
    ``mode="auto"`` on a local filesystem) any number of processes may open
    it at once, and every one of them produces and consumes (see *Several
    processes* in the README)::

        # the application
        mq = mqlite.open("data", mode="shared")
        mq.producer().send("orders", b"paid")

        # a worker process, at the same time: produces and consumes too
        mq = mqlite.open("data", mode="shared")
        mq.producer().send("orders", b"refunded")
        consumer = mq.consumer("billing")
        consumer.subscribe(["orders"])

    With a ``kafka://host:port,...`` address instead of a directory, the
    broker, its producers and its consumers are a Kafka cluster's, with the
    same calls and errors (see docs/kafka.md for what differs)::

        mq = mqlite.open("kafka://127.0.0.1:9092")

    Args:
        path: The data directory, or a ``kafka://`` cluster address.
        prefault: Fault in segment pages in the background before the writer
            reaches them. Turn off to save memory with many idle topics.
        file_mode: Unix permission bits of created data files.
        retention_check_interval_ms: How often a background thread applies
            retention; 0 turns the thread off (retention then runs on segment
            roll and on ``Broker.enforce_retention()``).
        max_commit_metadata_bytes: Largest metadata string a commit may
            carry (Kafka's ``offset.metadata.max.bytes``); a longer one
            raises ``mqlite.InvalidArgument`` and commits nothing.
        max_open_files: Most descriptors the broker keeps open for its files
            (like RocksDB's ``max_open_files``): active segments and recovery
            points, in a cache that closes the least recently used and opens
            a file again when it is needed. At least 1.
        mode: How processes share the directory: ``"exclusive"`` (the
            default), ``"shared"``, or ``"auto"`` (shared mode on a local
            filesystem, exclusive mode on a network or user-space one such
            as NFS, CIFS, 9p or FUSE). In shared mode any number of processes open
            the directory at once, and every one of them produces, consumes,
            joins consumer groups (members in different processes share the
            partitions), commits and changes topics; a second ``open()`` of
            it in this process shares one engine with the first. In
            exclusive mode one handle owns the directory. ``Broker.mode``
            says which one was taken.
        shared: ``True`` for shared mode and ``False`` for exclusive mode,
            whatever the filesystem (``mode="shared"`` or
            ``mode="exclusive"``).
        readonly: Never write the directory's logs, offsets, topics or
            producer state, not even recovery (implies shared mode; like
            every shared handle it takes the shared-mode lock files):
            ``producer()``, topic changes and commits raise
            ``mqlite.ReadOnly``. For tools looking at a directory an
            application has open. The directory must exist.
        auto_create_topics: Create a topic on first use (Kafka's
            ``auto.create.topics.enable``): a send to a missing topic, and a
            consumer's ``subscribe()`` or ``assign()`` naming one (not a
            pattern), create it with ``default_partitions`` partitions and
            the default topic settings. Invalid names still raise
            ``mqlite.InvalidTopicName`` and create nothing; a read-only
            handle never creates (``mqlite.UnknownTopic`` as without it).
        default_partitions: Partitions of a topic created on first use
            (Kafka's ``num.partitions``), 1 to 100000.
        kafka: librdkafka properties for a cluster address (for example
            ``{"security.protocol": "SSL"}``), plus ``replication.factor``
            of the topics ``create_topic()`` makes and
            ``request.timeout.ms``; a directory ignores them.

    Returns:
        Broker: The open data directory.

    Raises:
        mqlite.Locked: Another handle holds the directory in the other mode
            (exclusive against shared), or any handle does in exclusive mode;
            the message names the holder.
        mqlite.InvalidArgument: ``path`` is empty or holds a NUL byte, or
            ``file_mode`` or the interval is out of range, or ``mode`` is
            not a mode's name or disagrees with ``shared``, or ``readonly``
            is set and ``path`` is not a data directory.
        mqlite.InvalidConfig: ``max_open_files`` is 0, or
            ``default_partitions`` is out of range, or shared mode was asked
            for on a network filesystem.
        mqlite.IoError: The directory cannot be created or read.
        mqlite.Corrupt: A topic's metadata is unreadable.
    """
    return Broker(
        path,
        prefault=prefault,
        file_mode=file_mode,
        retention_check_interval_ms=retention_check_interval_ms,
        max_commit_metadata_bytes=max_commit_metadata_bytes,
        max_open_files=max_open_files,
        mode=mode,
        shared=shared,
        readonly=readonly,
        auto_create_topics=auto_create_topics,
        default_partitions=default_partitions,
        kafka=kafka,
    )
