"""Shared fixtures: a fresh data directory and an open broker per test."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

import mqlite


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def mq(data_dir: Path) -> Iterator[mqlite.Broker]:
    # No background retention thread and no prefaulting: tests stay quick and
    # deterministic; retention is exercised through enforce_retention().
    broker = mqlite.open(data_dir, prefault=False, retention_check_interval_ms=0)
    try:
        yield broker
    finally:
        broker.close()


def drain(consumer: mqlite.Consumer, expected: int, timeout: float = 5.0) -> list[mqlite.Message]:
    """Polls until `expected` messages arrived (or fails after `timeout`)."""
    out: list[mqlite.Message] = []
    while len(out) < expected:
        batch = consumer.consume(expected - len(out), timeout=timeout)
        assert batch, f"timed out after {len(out)} of {expected} messages"
        out.extend(batch)
    return out
