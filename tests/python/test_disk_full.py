"""A full disk from Python: a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored)
makes segment rolls, topic creation and commits fail with mqlite.DiskFull
(code 2), earlier data stays readable, and everything works once the limit
is lifted. Runs in a subprocess: the limit is process-wide."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import resource, signal, sys
    import mqlite

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def limit(n):
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, hard))

    mq = mqlite.open(sys.argv[1], prefault=False, retention_check_interval_ms=0)
    mq.create_topic("t", 1, segment_bytes=64 * 1024)
    p = mq.producer()
    acked = []
    for i in range(50):
        v = b"%06d" % i + b"x" * 200
        p.send("t", v, partition=0)
        acked.append(v)
    c = mq.consumer(group_id="g")
    c.assign([("t", 0)])
    c.commit([("t", 0, 10)])

    limit(1024)
    err = None
    for i in range(50, 5000):
        v = b"%06d" % i + b"x" * 200
        try:
            p.send("t", v, partition=0)
        except mqlite.DiskFull as e:
            err = e
            break
        acked.append(v)
    assert err is not None, "the roll never failed"
    assert err.code == 2 and isinstance(err, mqlite.IoError), (err.code, type(err))
    print("roll:", err)

    limit(16)
    for what, call in [
        ("create_topic", lambda: mq.create_topic("u", 2)),
        ("named producer", lambda: mq.producer(name="new-name")),
        ("commit", lambda: c.commit([("t", 0, 20)])),
    ]:
        try:
            call()
        except mqlite.DiskFull as e:
            print(what + ":", e)
        except mqlite.Error as e:
            assert what == "commit", (what, e)
            print(what + ":", type(e).__name__, e)
        else:
            raise AssertionError(what + " succeeded on a full disk")
    assert c.committed([("t", 0)])[("t", 0)][0] == 10

    limit(hard)
    for i in range(len(acked), len(acked) + 600):
        v = b"%06d" % i + b"x" * 200
        p.send("t", v, partition=0)
        acked.append(v)
    mq.create_topic("u", 2)
    mq.producer(name="new-name")
    c.commit([("t", 0, 20)])
    r = mq.consumer()
    r.assign([("t", 0)])
    got = [m.value for m in r.consume(100000, timeout=1.0)]
    assert got == acked, (len(got), len(acked))
    mq.close()
    print("ok", len(acked))
    """
)


def test_disk_full_from_python(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "roll: " in out.stdout and "\nok " in out.stdout, out.stdout
