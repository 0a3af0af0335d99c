"""The Kafka-compatible broker of a pytest run: ``tansu``
(``cargo install tansu --version 0.6.0 --locked --features dynostore``,
which ``make test`` does when it is missing), started on 127.0.0.1 on
first use with its storage in memory. A shell watches this process and
stops the broker when it exits, however it exits.

Without a ``tansu`` binary (``MQLITE_TANSU``, then ``PATH``, then
``~/.cargo/bin``) the tests that need it are skipped, unless
``MQLITE_KAFKA_REQUIRED=1`` (set by ``make test``) makes that a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional

import pytest

_url: Optional[str] = None


def _binary() -> Optional[str]:
    if os.environ.get("MQLITE_TANSU"):
        return os.environ["MQLITE_TANSU"]
    found = shutil.which("tansu")
    if found:
        return found
    home = Path.home() / ".cargo" / "bin" / "tansu"
    return str(home) if home.is_file() else None


def cluster_url() -> str:
    """The ``kafka://`` address of the run's broker (started on first use)."""
    global _url
    if _url is not None:
        return _url
    binary = _binary()
    if binary is None:
        if os.environ.get("MQLITE_KAFKA_REQUIRED") == "1":
            pytest.fail("MQLITE_KAFKA_REQUIRED=1 but no tansu binary was found")
        pytest.skip("no tansu binary (see tests/python/kafka_cluster.py)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listen = f"tcp://127.0.0.1:{port}"
    script = (
        f'"$0" broker --listener-url {listen} --advertised-listener-url {listen} '
        f"--storage-engine memory://tansu/ >/dev/null 2>&1 & b=$!; "
        f"while kill -0 {os.getpid()} 2>/dev/null && kill -0 $b 2>/dev/null; do sleep 0.2; done; "
        f"kill $b 2>/dev/null"
    )
    subprocess.Popen(["sh", "-c", script, binary], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"tansu did not listen on {port}")
            time.sleep(0.05)
    _url = f"kafka://127.0.0.1:{port}"
    return _url
