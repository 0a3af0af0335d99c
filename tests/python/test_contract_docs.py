"""Every public class, function, method and attribute of mqlite has a
docstring (what `help()` and IDEs show)."""

from __future__ import annotations

import inspect
from typing import List, Tuple

import pytest

import mqlite

EXPORTED = [n for n in mqlite.__all__ if not n.startswith("_") and n != "MAX_TOPIC_NAME_LEN"]


def own_members(cls: type) -> List[Tuple[str, object]]:
    """The public members `cls` defines itself (not those of `object` or
    `BaseException`)."""
    out = []
    for name, attr in vars(cls).items():
        if name.startswith("_") or name == "code":
            continue
        out.append((name, attr))
    return out


@pytest.mark.parametrize("name", EXPORTED)
def test_documented(name: str) -> None:
    obj = getattr(mqlite, name)
    assert (inspect.getdoc(obj) or "").strip(), f"mqlite.{name} has no docstring"
    if not inspect.isclass(obj):
        return
    missing = [m for m, attr in own_members(obj) if not (getattr(attr, "__doc__", None) or "").strip()]
    assert not missing, f"mqlite.{name}: members without a docstring: {missing}"


def test_the_check_sees_members() -> None:
    # The check above would pass vacuously if it found no members.
    assert {"send", "closed", "stats"} <= {m for m, _ in own_members(mqlite.Producer)}
    assert {"offset", "value"} <= {m for m, _ in own_members(mqlite.RecordMetadata) + own_members(mqlite.Message)}


def test_module_docstring_documents_fork_and_close() -> None:
    doc = mqlite.__doc__ or ""
    assert "os.fork()" in doc and "close()" in doc
