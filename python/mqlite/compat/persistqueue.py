"""persist-queue's queues, kept in an mqlite data directory.

A drop-in for the ``persistqueue`` module of the ``persist-queue`` package:
change the import and keep the code::

    import mqlite.compat.persistqueue as persistqueue

    q = persistqueue.SQLiteAckQueue("jobs")   # a data directory
    q.put({"photo": 17})
    item = q.get(timeout=5)                   # raises persistqueue.Empty
    try:
        handle(item)
        q.ack(item)
    except TemporaryError:
        q.nack(item)                          # ready again, retried first
    except BadInput:
        q.ack_failed(item)                    # never delivered again

The queue's path is an mqlite data directory (``mqlite.open(path)``); each
queue is a topic with one partition (so items come out in the order they
went in) and a share group of the same name (``pq.ack.<name>`` for the ack
queues, ``pq.sql.<name>`` for ``SQLiteQueue``, ``pq.queue`` for ``Queue``).
``put()`` sends a record; ``get()`` takes one from the share group, locked
to this queue object until it is acknowledged: ``ack`` acknowledges it,
``nack`` releases it (delivered again at once), ``ack_failed`` rejects it
to the dead-letter topic ``<topic>.failed``. Items handed out and not
acknowledged when the queue is closed, garbage-collected, or its process
dies are ready again when the queue is opened next (persist-queue's
``auto_resume``).

Items are pickled by default (``serializer=``: ``serializers.pickle``,
``serializers.json``, ``serializers.msgpack``, ``serializers.cbor2``, or
any object with persist-queue's serializer methods: ``dumps``/``loads``
for the SQLite queues, ``dump``/``load`` on a file object for ``Queue``).

mqlite's own keyword, on every queue: ``acks`` (``"all"``, the default:
``put()`` and acknowledgements are synced to disk before they return, as
SQLite's commits are; ``1``: written to the operating system, which
survives ``kill -9`` but not a crash of the machine).

Differences from persist-queue (docs/python.md, "persist-queue
compatibility", has the full list): one process at a time uses a data
directory (another raises ``mqlite.Locked``); ``Empty`` and ``Full`` are
``queue.Empty`` and ``queue.Full``; ``acked_count()`` and
``ack_failed_count()`` count what this queue object settled;
``get(id=...)`` looks through the ready items; the FILO and unique queues,
``PDict``, ``PriorityQueue``, ``update()`` and ``queue()`` are not
provided.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json as _json
import logging
import os
import pickle as _pickle
import queue as _queue
import re
import shutil
import tempfile
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import mqlite

__all__ = [
    "AckStatus",
    "Empty",
    "FIFOSQLiteAckQueue",
    "FIFOSQLiteQueue",
    "Full",
    "Queue",
    "SQLiteAckQueue",
    "SQLiteQueue",
    "serializers",
]

log = logging.getLogger(__name__)

#: Raised by ``get`` on an empty queue (``queue.Empty``, so both
#: ``except persistqueue.Empty`` and ``except queue.Empty`` catch it).
Empty = _queue.Empty
#: Raised by ``Queue.put`` on a full queue (``queue.Full``).
Full = _queue.Full

#: How long an item handed out stays locked to its queue object: persist-
#: queue has no visibility timeout, so in effect for ever (until the queue
#: is closed or its process dies).
_LOCK_MS = 365 * 24 * 3600 * 1000
#: Items read ahead of the first one not done (mqlite's share-group
#: window): how many items may be handed out or done behind one that is
#: handed out and not acknowledged.
_MAX_IN_FLIGHT = 100_000
#: Longest wait before a blocked call looks again (seconds).
_TICK = 0.1
#: Polls of nothing in a row before a non-blocking get says Empty while the
#: group still counts items as available (a read between redeliveries and
#: new records can come back empty once).
_EMPTY_POLLS = 3


class _PickleSerializer:
    """Pickle, protocol 4 (persist-queue's default serializer)."""

    protocol = 4

    def dumps(self, value: Any, sort_keys: bool = False) -> bytes:
        if sort_keys and isinstance(value, dict):
            value = {k: value[k] for k in sorted(value)}
        return _pickle.dumps(value, protocol=self.protocol)

    def loads(self, data: bytes) -> Any:
        return _pickle.loads(data)

    def dump(self, value: Any, fp: Any, sort_keys: bool = False) -> None:
        fp.write(self.dumps(value, sort_keys))

    def load(self, fp: Any) -> Any:
        return _pickle.load(fp)


class _JsonSerializer:
    """JSON, UTF-8, one value per line."""

    def dumps(self, value: Any, sort_keys: bool = False) -> bytes:
        return _json.dumps(value, sort_keys=sort_keys).encode("utf-8")

    def loads(self, data: bytes) -> Any:
        return _json.loads(data.decode("utf-8"))

    def dump(self, value: Any, fp: Any, sort_keys: bool = False) -> None:
        fp.write(self.dumps(value, sort_keys) + b"\n")

    def load(self, fp: Any) -> Any:
        return self.loads(fp.readline())


class _LengthPrefixed:
    """A serializer whose ``dump``/``load`` frame each value with its
    length (4 bytes, little-endian)."""

    def dumps(self, value: Any, sort_keys: bool = False) -> bytes:
        raise NotImplementedError

    def loads(self, data: bytes) -> Any:
        raise NotImplementedError

    def dump(self, value: Any, fp: Any, sort_keys: bool = False) -> None:
        data = self.dumps(value, sort_keys)
        fp.write(len(data).to_bytes(4, "little") + data)

    def load(self, fp: Any) -> Any:
        n = int.from_bytes(fp.read(4), "little")
        return self.loads(fp.read(n))


def _sorted_dict(value: Any, sort_keys: bool) -> Any:
    if sort_keys and isinstance(value, dict):
        return {k: value[k] for k in sorted(value)}
    return value


class _MsgpackSerializer(_LengthPrefixed):
    """msgpack (the ``msgpack`` package, imported when first used); arrays
    come back as tuples, as persist-queue's do."""

    def dumps(self, value: Any, sort_keys: bool = False) -> bytes:
        return bytes(importlib.import_module("msgpack").packb(_sorted_dict(value, sort_keys), use_bin_type=True))

    def loads(self, data: bytes) -> Any:
        return importlib.import_module("msgpack").unpackb(data, use_list=False, raw=False)


class _Cbor2Serializer(_LengthPrefixed):
    """CBOR (the ``cbor2`` package, imported when first used)."""

    def dumps(self, value: Any, sort_keys: bool = False) -> bytes:
        return bytes(importlib.import_module("cbor2").dumps(_sorted_dict(value, sort_keys)))

    def loads(self, data: bytes) -> Any:
        return importlib.import_module("cbor2").loads(data)


class serializers:  # noqa: N801 (persist-queue's name: persistqueue.serializers.json)
    """The serializers of persist-queue's ``persistqueue.serializers``."""

    pickle = _PickleSerializer()
    json = _JsonSerializer()
    msgpack = _MsgpackSerializer()
    cbor2 = _Cbor2Serializer()


class AckStatus:
    """persist-queue's item states (its SQLite status column)."""

    inited = "0"
    ready = "1"
    unack = "2"
    acked = "5"
    ack_failed = "9"


# --- data directories ---------------------------------------------------


class _Dir:
    """One open data directory, shared by the queues of this process that
    use it (mqlite opens a directory once per process)."""

    def __init__(self, path: str, temporary: bool) -> None:
        self.path = path
        self.temporary = temporary
        self.pid = os.getpid()
        self.refs = 0
        self.broker = mqlite.open(path)


_dirs: Dict[str, _Dir] = {}
_dirs_lock = threading.Lock()


def _open_dir(path: str) -> _Dir:
    if path == ":memory:":
        d = _Dir(tempfile.mkdtemp(prefix="mqlite-persistqueue-"), temporary=True)
        d.refs = 1
        return d
    os.makedirs(path, exist_ok=True)
    key = os.path.realpath(path)
    with _dirs_lock:
        found = _dirs.get(key)
        if found is None or found.pid != os.getpid() or found.broker.closed:
            found = _dirs[key] = _Dir(key, temporary=False)
        found.refs += 1
        return found


def _close_dir(d: _Dir) -> None:
    with _dirs_lock:
        d.refs -= 1
        if d.refs > 0:
            return
        if _dirs.get(d.path) is d:
            del _dirs[d.path]
    if d.pid == os.getpid():
        d.broker.close()
    if d.temporary:
        shutil.rmtree(d.path, ignore_errors=True)


_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}\Z")


def _topic_name(kind: str, name: str) -> str:
    """The topic (and share group) of a queue: ``pq.<kind>.<name>``, or a
    hash of the name when it is not a valid topic name."""
    if _NAME.match(name) and name not in (".", ".."):
        return f"pq.{kind}.{name}"
    return f"pq.{kind}.h{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:40]}"


def _check_timeout(timeout: Optional[float]) -> None:
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


# --- the queues ---------------------------------------------------------


class _Base:
    """A queue: a topic with one partition, a producer, and a member of the
    queue's share group."""

    _closed = True

    def _open(self, path: str, kind: str, name: str, acks: Union[int, str]) -> None:
        if acks not in (1, "1", "all", -1):
            raise ValueError(f"acks must be 1 or 'all', got {acks!r}")
        self._dir = _open_dir(path)
        try:
            mq = self._dir.broker
            self._topic = _topic_name(kind, name)
            if self._topic not in mq.topics():
                try:
                    mq.create_topic(self._topic, partitions=1)
                except mqlite.TopicExists:
                    pass
            self._producer = mq.producer(acks=acks)
            self._consumer = mq.share_consumer(
                self._topic,
                self._topic,
                lock_duration_ms=_LOCK_MS,
                max_deliveries=0,
                dead_letter_topic=self._topic + ".failed",
                max_in_flight=_MAX_IN_FLIGHT,
                max_poll_records=1,
                commit_acks=acks,
            )
        except BaseException:
            _close_dir(self._dir)
            raise
        self._closed = False

    def close(self) -> None:
        """Closes the queue: items handed out and not acknowledged (or not
        made done by ``task_done()``) are ready again."""
        if self._closed:
            return
        self._closed = True
        try:
            self._consumer.close()
            self._producer.close()
        finally:
            _close_dir(self._dir)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown, a forked child
            pass

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # items in and out

    def _send(self, data: bytes) -> int:
        md = self._producer.send(self._topic, data)
        if md is None or md.offset is None:  # acks=0: no offset to name the item by
            raise ValueError("mqlite.compat.persistqueue needs acks=1 or acks='all'")
        return md.offset + 1

    def _backlog(self) -> Any:
        return self._consumer.backlog()

    def _ready(self) -> int:
        b = self._backlog()
        return int(b.available + b.delayed)

    def _poll_now(self) -> Any:
        for _ in range(_EMPTY_POLLS):
            m = self._consumer.poll(0)
            if m is not None:
                return m
            if self._backlog().available == 0:
                break
        raise Empty

    def _next(self, block: bool, timeout: Optional[float]) -> Any:
        """The next item's message, as persist-queue's ``get`` waits."""
        if not block:
            return self._poll_now()
        if timeout is None:
            while True:
                m = self._consumer.poll(1.0)
                if m is not None:
                    return m
        _check_timeout(timeout)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return self._poll_now()
            m = self._consumer.poll(left)
            if m is not None:
                return m

    def _scan(self, choose: Callable[[List[Any]], Any]) -> Any:
        """Takes every ready item, keeps the one `choose` picks (or None)
        and gives the others back."""
        taken: List[Any] = []
        pick = None
        try:
            misses = 0
            while True:
                m = self._consumer.poll(0)
                if m is not None:
                    taken.append(m)
                    continue
                misses += 1
                if misses >= _EMPTY_POLLS or self._backlog().available == 0:
                    break
            pick = choose(taken)
        finally:
            rest = [m for m in taken if m is not pick]
            if rest:
                self._consumer.release(rest)
        return pick

    def _find(self, block: bool, timeout: Optional[float], choose: Callable[[List[Any]], Any]) -> Any:
        if block:
            _check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            m = self._scan(choose)
            if m is not None:
                return m
            if not block:
                raise Empty
            if deadline is None:
                time.sleep(_TICK)
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise Empty
            time.sleep(min(left, _TICK))


class Queue(_Base):
    """persist-queue's file-based FIFO queue (``persistqueue.Queue``).

    ``get()`` hands out the next item; ``task_done()`` makes every item got
    so far done (autosave=False, the default: as persist-queue saves its
    read position then); with ``autosave=True`` an item is done when
    ``get()`` returns it. Items got and not made done come back when the
    queue is opened again. ``chunksize`` and ``tempdir`` are accepted and
    not used.
    """

    def __init__(
        self,
        path: str,
        maxsize: int = 0,
        chunksize: int = 100,
        tempdir: Optional[str] = None,
        serializer: Any = serializers.pickle,
        autosave: bool = False,
        *,
        acks: Union[int, str] = "all",
    ) -> None:
        self.path = path
        self.maxsize = maxsize
        self.chunksize = chunksize
        self.tempdir = tempdir
        self.serializer = serializer
        self.autosave = autosave
        self.mutex = threading.Lock()
        self.not_empty = threading.Condition(self.mutex)
        self.not_full = threading.Condition(self.mutex)
        self.all_tasks_done = threading.Condition(self.mutex)
        self._pending: List[Any] = []
        self._open(path, "queue", "default", acks)
        self.unfinished_tasks = self._ready()

    def _qsize(self) -> int:
        return self._ready()

    def qsize(self) -> int:
        """Items ready to get (not got and not made done)."""
        return self._qsize()

    def empty(self) -> bool:
        return self.qsize() == 0

    def full(self) -> bool:
        return self.maxsize > 0 and self.qsize() >= self.maxsize

    def put(self, item: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """Adds an item, on disk when this returns. With ``maxsize``, waits
        for room (``block``, up to ``timeout`` seconds) or raises ``Full``."""
        buf = io.BytesIO()
        self.serializer.dump(item, buf)
        data = buf.getvalue()
        with self.not_full:
            if self.maxsize > 0:
                if not block:
                    if self._qsize() >= self.maxsize:
                        raise Full
                elif timeout is None:
                    while self._qsize() >= self.maxsize:
                        self.not_full.wait(_TICK)
                elif timeout < 0:
                    raise ValueError("'timeout' must be a non-negative number")
                else:
                    endtime = time.monotonic() + timeout
                    while self._qsize() >= self.maxsize:
                        remaining = endtime - time.monotonic()
                        if remaining <= 0.0:
                            raise Full
                        self.not_full.wait(min(remaining, _TICK))
            self._send(data)
            self.unfinished_tasks += 1
            self.not_empty.notify()

    def put_nowait(self, item: Any) -> None:
        self.put(item, False)

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        """Removes and returns the next item; waits for one (``block``, up
        to ``timeout`` seconds) or raises ``Empty``."""
        m = self._next(block, timeout)
        try:
            item = self.serializer.load(io.BytesIO(m.value or b""))
        except BaseException:
            m.release()
            raise
        if self.autosave:
            m.ack()
        with self.mutex:
            if not self.autosave:
                self._pending.append(m)
            self.not_full.notify()
        return item

    def get_nowait(self) -> Any:
        return self.get(False)

    def task_done(self) -> None:
        """One task is done; makes every item got so far done (they are not
        given back when the queue is opened again)."""
        with self.all_tasks_done:
            unfinished = self.unfinished_tasks - 1
            if unfinished <= 0:
                if unfinished < 0:
                    raise ValueError("task_done() called too many times.")
                self.all_tasks_done.notify_all()
            self.unfinished_tasks = unfinished
            pending, self._pending = self._pending, []
        if pending:
            try:
                self._consumer.ack(pending)
            except BaseException:
                with self.mutex:
                    self._pending[:0] = pending
                raise

    def join(self) -> None:
        """Waits until ``task_done()`` was called for every item put."""
        with self.all_tasks_done:
            while self.unfinished_tasks:
                self.all_tasks_done.wait()


def _row_id(id: Any) -> Optional[int]:
    """An item id given to ``get(id=...)``: an int, or a raw item."""
    if isinstance(id, dict) and "pqid" in id:
        return int(id["pqid"])
    if isinstance(id, int) and not isinstance(id, bool):
        return id
    if isinstance(id, str) and id.isnumeric():
        return int(id)
    return None


class _SQLBase(_Base):
    """What persist-queue's SQLite queues share."""

    _KIND = "sql"

    def __init__(
        self,
        path: str,
        name: str = "default",
        multithreading: bool = False,
        timeout: float = 10.0,
        auto_commit: bool = True,
        serializer: Any = serializers.pickle,
        db_file_name: Optional[str] = None,
        *,
        acks: Union[int, str] = "all",
    ) -> None:
        self.path = path
        self.name = name
        self.multithreading = multithreading
        self.timeout = timeout
        self.auto_commit = auto_commit
        self.db_file_name = db_file_name or "data.db"
        self.memory_sql = path == ":memory:"
        self._serializer = serializer
        self._lock = threading.Lock()
        self._open(path, self._KIND, name, acks)

    def put(self, item: Any, block: bool = True) -> int:
        """Adds an item, on disk when this returns; returns its id."""
        return self._send(self._serializer.dumps(item))

    def put_nowait(self, item: Any) -> int:
        return self.put(item, block=False)

    def _message(self, block: bool, timeout: Optional[float], rowid: Optional[int], next_in_order: bool = False) -> Any:
        if rowid is None:
            return self._next(block, timeout)
        if next_in_order:

            def choose(ms: List[Any]) -> Any:
                after = [m for m in ms if m.offset + 1 > rowid]
                pool = after or ms
                return min(pool, key=lambda m: m.offset) if pool else None

        else:

            def choose(ms: List[Any]) -> Any:
                return next((m for m in ms if m.offset + 1 == rowid), None)

        return self._find(block, timeout, choose)

    def _raw(self, m: Any, item: Any) -> Dict[str, Any]:
        return {"pqid": m.offset + 1, "data": item, "timestamp": m.timestamp / 1000.0}

    def _load(self, m: Any) -> Any:
        try:
            return self._serializer.loads(m.value or b"")
        except BaseException:
            m.release()
            raise

    @property
    def size(self) -> int:
        """Items ready to get."""
        return self._ready()

    @property
    def total(self) -> int:
        return self._ready()

    def qsize(self) -> int:
        return max(0, self.size)

    def empty(self) -> bool:
        return self.size == 0

    def full(self) -> bool:
        return False

    def __len__(self) -> int:
        return self.size

    def shrink_disk_usage(self) -> None:
        """Nothing to do: retention (``mqlite.open`` settings, or the
        topic's) deletes old segments."""

    def queue(self) -> Any:
        raise NotImplementedError("mqlite.compat.persistqueue: queue() is not supported")

    def update(self, item: Any, id: Optional[int] = None) -> Any:
        raise NotImplementedError("mqlite.compat.persistqueue: items cannot be changed once put")


class SQLiteQueue(_SQLBase):
    """persist-queue's SQLite FIFO queue (``persistqueue.SQLiteQueue``).

    With ``auto_commit=True`` (the default) an item is removed when
    ``get()`` returns it; with ``auto_commit=False``, when ``task_done()``
    is called next (items got before that come back when the queue is
    opened again). ``multithreading``, ``timeout`` and ``db_file_name`` are
    accepted and not used; ``path=":memory:"`` keeps the queue in a
    temporary directory removed at ``close()``.
    """

    _KIND = "sql"

    def __init__(self, path: str, name: str = "default", *args: Any, **kwargs: Any) -> None:
        self._pending: List[Any] = []
        super().__init__(path, name, *args, **kwargs)

    def get(self, block: bool = True, timeout: Optional[float] = None, id: Any = None, raw: bool = False) -> Any:
        """Removes and returns the next item (or the item ``id``, a number
        or a raw item); waits for one (``block``, up to ``timeout``
        seconds) or raises ``Empty``. ``raw=True`` returns ``{"pqid": id,
        "data": item, "timestamp": seconds}``."""
        m = self._message(block, timeout, _row_id(id))
        item = self._load(m)
        if self.auto_commit:
            m.ack()
        else:
            with self._lock:
                self._pending.append(m)
        return self._raw(m, item) if raw else item

    def get_nowait(self, id: Any = None, raw: bool = False) -> Any:
        return self.get(block=False, id=id, raw=raw)

    def task_done(self) -> None:
        """With ``auto_commit=False``: makes the items got so far removed."""
        if self.auto_commit:
            return
        with self._lock:
            pending, self._pending = self._pending, []
        if pending:
            try:
                self._consumer.ack(pending)
            except BaseException:
                with self._lock:
                    self._pending[:0] = pending
                raise


FIFOSQLiteQueue = SQLiteQueue


class SQLiteAckQueue(_SQLBase):
    """persist-queue's queue with acknowledgements
    (``persistqueue.SQLiteAckQueue``).

    ``get()`` hands an item out; then ``ack(item)`` (done), ``nack(item)``
    (ready again, delivered before the items behind it) or
    ``ack_failed(item)`` (to the dead-letter topic ``<topic>.failed``, never
    delivered again). An item is named by the object ``get()`` returned, by
    a raw item (``get(raw=True)``), or by ``id=``. Items handed out and not
    settled are ready again once the queue is closed or its process dies
    (``auto_resume=False`` does not keep them back).
    """

    _KIND = "ack"

    def __init__(self, path: str, auto_resume: bool = True, **kwargs: Any) -> None:
        self._unack_cache: Dict[int, Any] = {}
        self._unack_msgs: Dict[int, Any] = {}
        self._acked = 0
        self._failed = 0
        super().__init__(path, **kwargs)
        if not self.auto_commit:
            warnings.warn("disable auto commit is not supported in ack queue")
            self.auto_commit = True
        self.auto_resume = auto_resume

    def get(
        self,
        block: bool = True,
        timeout: Optional[float] = None,
        id: Any = None,
        next_in_order: bool = False,
        raw: bool = False,
    ) -> Any:
        """Hands out the next ready item (or the item ``id``; with
        ``next_in_order=True`` the first ready item after ``id``, from the
        start when there is none); waits for one (``block``, up to
        ``timeout`` seconds) or raises ``Empty``."""
        rowid = _row_id(id)
        if rowid is None and next_in_order:
            raise ValueError("'next_in_order' requires the preceding 'id' be specified.")
        if next_in_order and not isinstance(next_in_order, bool):
            raise ValueError("'next_in_order' must be a boolean (True/False)")
        m = self._message(block, timeout, rowid, next_in_order)
        item = self._load(m)
        with self._lock:
            self._unack_cache[m.offset + 1] = item
            self._unack_msgs[m.offset + 1] = m
        return self._raw(m, item) if raw else item

    def get_nowait(self, id: Any = None, raw: bool = False) -> Any:
        return self.get(block=False, id=id, raw=raw)

    def task_done(self) -> None:
        """Nothing to do: every call is committed when it returns."""

    # settling

    def _find_item_id(self, item: Any, search: bool = True) -> Optional[int]:
        if item is None:
            return None
        if isinstance(item, dict) and "pqid" in item:
            return int(item["pqid"])
        if search:
            for key, value in self._unack_cache.items():
                if value is item:
                    return key
        elif isinstance(item, int) or (isinstance(item, str) and item.isnumeric()):
            return int(item)
        log.warning("Item id not Interger and can't find item in unack cache.")
        return None

    @staticmethod
    def _check_id(item: Any, id: Optional[int]) -> Tuple[Any, bool]:
        if id is not None and item is not None:
            raise ValueError("Specify an id or an item, not both.")
        if id is None and item is None:
            raise ValueError("Specify an id or an item.")
        if id is not None:
            return id, False
        return item, True

    def _settle(self, item: Any, id: Optional[int], how: Callable[[Any], None]) -> Optional[int]:
        item, search = self._check_id(item, id)
        with self._lock:
            _id = self._find_item_id(item, search)
            if _id is None:
                return None
            m = self._unack_msgs.pop(_id, None)
            self._unack_cache.pop(_id, None)
        if m is None:
            log.warning("item %d is not handed out by this queue", _id)
            return None
        how(m)
        return _id

    def ack(self, item: Any = None, id: Optional[int] = None) -> Optional[int]:
        """The item is done: never delivered again. Returns its id (None if
        this queue did not hand it out)."""

        def how(m: Any) -> None:
            m.ack()
            self._acked += 1

        return self._settle(item, id, how)

    def nack(self, item: Any = None, id: Optional[int] = None) -> Optional[int]:
        """The item is ready again, delivered before the items behind it."""
        return self._settle(item, id, lambda m: m.release(0))

    def ack_failed(self, item: Any = None, id: Optional[int] = None) -> Optional[int]:
        """The item failed: it goes to the dead-letter topic
        ``<topic>.failed`` and is never delivered again."""

        def how(m: Any) -> None:
            m.reject("ack_failed")
            self._failed += 1

        return self._settle(item, id, how)

    def resume_unack_tasks(self) -> None:
        """Makes the items this queue handed out and did not settle ready
        again (items of an earlier run are ready again already)."""
        with self._lock:
            ms = list(self._unack_msgs.values())
            self._unack_msgs.clear()
            self._unack_cache.clear()
        if ms:
            log.info("resume %d unack tasks", len(ms))
            self._consumer.release(ms)

    # counts

    def ready_count(self) -> int:
        """Items ready to get."""
        return self._ready()

    def unack_count(self) -> int:
        """Items handed out and not settled (by any queue object of this
        name in this process)."""
        return int(self._backlog().in_flight)

    def acked_count(self) -> int:
        """Items this queue object acknowledged, less those
        ``clear_acked_data()`` dropped."""
        return self._acked

    def ack_failed_count(self) -> int:
        """Items this queue object marked failed, less those
        ``clear_acked_data(clear_ack_failed=True)`` dropped."""
        return self._failed

    def clear_acked_data(self, max_delete: int = 1000, keep_latest: int = 1000, clear_ack_failed: bool = False) -> None:
        """Lowers ``acked_count()`` (and ``ack_failed_count()`` with
        ``clear_ack_failed``) as persist-queue's deletion would: up to
        ``max_delete`` of them, keeping the ``keep_latest`` last. Settled
        items take no room of their own in mqlite: retention removes old
        segments."""

        def cleared(n: int) -> int:
            gone = max(0, n - keep_latest) if keep_latest and keep_latest > 0 else n
            if max_delete and max_delete > 0:
                gone = min(gone, max_delete)
            return gone

        with self._lock:
            if clear_ack_failed:
                gone = cleared(self._acked + self._failed)
                from_failed = min(gone, self._failed)
                self._failed -= from_failed
                self._acked -= gone - from_failed
            else:
                self._acked -= cleared(self._acked)

    def active_size(self) -> int:
        """Items ready plus those this queue handed out and did not settle."""
        return max(0, self.size + len(self._unack_cache))

    def close(self) -> None:
        with self._lock:
            self._unack_msgs.clear()
            self._unack_cache.clear()
        super().close()


FIFOSQLiteAckQueue = SQLiteAckQueue
