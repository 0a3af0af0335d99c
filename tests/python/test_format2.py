"""Format version 2 from Python: one-record batches are compact on disk, and
a batch of a newer format is refused with UnsupportedVersion, not cut."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import mqlite


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def batches(log: bytes) -> list[tuple[int, int]]:
    """(position, total length) of each batch, walked by the length field."""
    out = []
    pos = 0
    while pos + 12 <= len(log):
        (length,) = struct.unpack_from("<I", log, pos + 8)
        if length == 0:
            break
        out.append((pos, 12 + length))
        pos += 12 + length
    return out


def test_one_record_batches_take_at_most_40_bytes_beyond_key_and_value(tmp_path: Path) -> None:
    n = 100
    with mqlite.open(tmp_path, prefault=False) as mq:
        mq.create_topic("t")
        p = mq.producer()
        payload = 0
        for i in range(n):
            key = f"key-{i}".encode()
            value = b"v" * (16 + i)
            p.send("t", value, key=key, partition=0)
            payload += len(key) + len(value)
        used = mq.topic("t").partitions[0].size_bytes
    assert used <= payload + n * 40, (used - payload) / n
    log = next((tmp_path / "topics" / "t" / "0").glob("*.log")).read_bytes()
    found = batches(log)
    assert len(found) == n
    assert all(log[pos + 16] == 2 for pos, _ in found)  # magic 2: compact


def test_a_batch_from_a_newer_format_is_refused_and_kept(tmp_path: Path) -> None:
    with mqlite.open(tmp_path, mode="exclusive", prefault=False) as mq:
        for t in ("t", "u"):
            mq.create_topic(t)
            p = mq.producer()
            for i in range(5):
                p.send(t, f"{t}-{i}".encode(), partition=0)
    path = next((tmp_path / "topics" / "t" / "0").glob("*.log"))
    log = bytearray(path.read_bytes())
    pos, total = batches(bytes(log))[-1]
    log[pos + 16] = 4  # a magic this build does not know, with a valid CRC
    struct.pack_into("<I", log, pos + 12, crc32c(bytes(log[pos + 16 : pos + total])))
    path.write_bytes(bytes(log))
    (path.parent / "recovery.point").unlink()  # every batch is checked
    with mqlite.open(tmp_path, mode="exclusive", prefault=False) as mq:
        with pytest.raises(mqlite.UnsupportedVersion) as e:
            mq.topic("t")
        assert e.value.code == 301
        assert mq.topic("u").partitions[0].end_offset == 5
    assert path.read_bytes() == bytes(log)
