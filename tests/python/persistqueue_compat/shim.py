"""pytest plugin for run.py: makes ``persistqueue`` (and the submodules
persist-queue's tests import from) resolve to mqlite.compat.persistqueue,
and skips, with the reason, the upstream tests listed in ``EXCLUDED``.

The classes mqlite.compat.persistqueue does not provide are stand-ins here
that skip the test constructing them.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any, Dict, List

import pytest

import mqlite.compat.persistqueue as compat

NOT_PROVIDED = "not provided by mqlite.compat.persistqueue"

#: Upstream tests skipped, by test name (the last part of the node id,
#: parameters included or not): why.
EXCLUDED: Dict[str, str] = {
    # test_queue.py (persistqueue.Queue)
    "test_partial_write": "writes into persist-queue's chunk file q00000 (its on-disk format)",
    "test_garbage_on_head": "writes into persist-queue's chunk file q00000 (its on-disk format)",
    "test_del": "checks persist-queue's open chunk files (headf, tailf)",
    # test_sqlqueue.py, test_sqlackqueue.py
    "test_update": "update(): an item cannot be changed once put (a log is append-only)",
    "test_queue": "queue() (listing the SQLite table) is not supported",
    "test_resume_unack": (
        "auto_resume=False: mqlite gives back unacknowledged items when a queue closes "
        "or its process dies, so they cannot stay unacked until resume_unack_tasks()"
    ),
}


def _stand_in(name: str) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        pytest.skip(f"{name} is {NOT_PROVIDED}")

    return type(name, (), {"__init__": __init__})


def _install() -> None:
    pq = types.ModuleType("persistqueue")
    pq.__dict__.update({k: v for k, v in vars(compat).items() if not k.startswith("__")})
    for name in ("FILOSQLiteQueue", "UniqueQ", "FILOSQLiteAckQueue", "UniqueAckQ", "PDict", "PriorityQueue"):
        setattr(pq, name, _stand_in(name))
    pq.__version__ = "1.1.0"
    for mod in ("", ".exceptions", ".queue", ".sqlbase", ".sqlqueue", ".sqlackqueue"):
        sys.modules["persistqueue" + mod] = pq
    ser = types.ModuleType("persistqueue.serializers")
    for name in ("pickle", "json", "msgpack", "cbor2"):
        obj = getattr(compat.serializers, name)
        setattr(ser, name, obj)
        sys.modules[f"persistqueue.serializers.{name}"] = obj  # type: ignore[assignment]
    sys.modules["persistqueue.serializers"] = ser
    pq.serializers = ser  # type: ignore[attr-defined]


_install()


def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    missing = [m for m in ("msgpack", "cbor2") if importlib.util.find_spec(m) is None]
    for item in items:
        base = item.name.split("[", 1)[0]
        if base in EXCLUDED:
            item.add_marker(pytest.mark.skip(reason=f"excluded: {EXCLUDED[base]}"))
            continue
        for m in missing:
            if f"serializer={m}" in item.name:
                item.add_marker(pytest.mark.skip(reason=f"the {m} package is not installed"))
