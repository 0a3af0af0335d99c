"""Every codec round-trips through a consumer, also mixed in one partition."""

from __future__ import annotations

from pathlib import Path

import pytest

import mqlite

from conftest import drain

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def records(tag: str, n: int) -> list[tuple[bytes, bytes]]:
    # Compressible values, each distinct.
    return [(f"{tag}-k{i}".encode(), f"{tag} value {i} ".encode() * 20) for i in range(n)]


@pytest.mark.parametrize("codec", CODECS)
def test_codec_round_trip(mq: mqlite.Broker, codec: str) -> None:
    mq.create_topic("t", partitions=2)
    p = mq.producer(compression=codec, linger_ms=5)
    assert p.compression == codec
    recs = records(codec, 300)
    for k, v in recs[:100]:
        p.send("t", v, key=k, headers=[("codec", codec)])
    for k, v in recs[100:200]:
        p.produce("t", v, key=k, headers=[("codec", codec)])
    p.send_batch(
        "t", [v for _, v in recs[200:]], keys=[k for k, _ in recs[200:]], headers={"codec": codec}
    )
    p.flush()
    c = mq.consumer()
    c.subscribe("t")
    got = {(m.key, m.value) for m in drain(c, 300)}
    assert got == set(recs)
    st = p.stats()
    raw = sum(len(k) + len(v) for k, v in recs)
    if codec == "none":
        assert st.bytes > raw
    else:
        assert st.bytes < raw / 2, (codec, st.bytes, raw)


def test_mixed_codecs_in_one_partition_survive_reopening(data_dir: Path) -> None:
    expected: list[bytes] = []
    with mqlite.open(data_dir) as mq:
        mq.create_topic("t")
        for round_ in range(2):
            for codec in CODECS:
                p = mq.producer(compression=codec)
                values = [f"{codec}-{round_}-{i} ".encode() * 10 for i in range(50)]
                p.send_batch("t", values[:25])
                for v in values[25:]:
                    p.send("t", v)
                p.close()
                expected += values
    with mqlite.open(data_dir) as mq:
        c = mq.consumer()
        c.assign([("t", 0)])
        msgs = drain(c, len(expected))
        assert [m.value for m in msgs] == expected
        assert [m.offset for m in msgs] == list(range(len(expected)))


def test_codec_names(mq: mqlite.Broker) -> None:
    assert mq.producer(compression="ZSTD").compression == "zstd"
    assert mq.producer(compression=None).compression == "none"
    for bad in ["brotli", "", "gz"]:
        with pytest.raises(mqlite.InvalidArgument, match="compression"):
            mq.producer(compression=bad)
    with pytest.raises(TypeError):
        mq.producer(compression=1)  # type: ignore[arg-type]
