"""A data directory in exclusive mode can be open only once at a time."""

import os
from pathlib import Path

import pytest

import mqlite


def test_second_open_is_locked_and_names_holder(data_dir: Path) -> None:
    # Exclusive mode, by name (a second open of a shared directory in one
    # process shares the engine).
    first = mqlite.open(data_dir, mode="exclusive")
    try:
        with pytest.raises(mqlite.Locked) as info:
            mqlite.open(data_dir, mode="exclusive")
        message = str(info.value)
        assert str(os.getpid()) in message
        assert "this process" in message
        assert info.value.code == mqlite.Locked.code == 3
        assert isinstance(info.value, mqlite.Error)
    finally:
        first.close()
    # Released on close: opening works again.
    with mqlite.open(data_dir) as again:
        assert not again.closed


def test_lock_released_by_context_manager(data_dir: Path) -> None:
    with mqlite.open(data_dir):
        pass
    with mqlite.open(data_dir):
        pass


def test_path_property(data_dir: Path) -> None:
    with mqlite.open(str(data_dir)) as mq:
        assert mq.path == str(data_dir)
        assert "open" in repr(mq)
    assert "closed" in repr(mq)
