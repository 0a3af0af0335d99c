#!/usr/bin/env python3
"""Runs persist-queue's own tests against mqlite.compat.persistqueue.

    .venv/bin/python tests/python/persistqueue_compat/run.py [pytest args]

Fetches the sdist of persist-queue PINNED from PyPI with pip (once, into
the cache directory: $MQLITE_PERSISTQUEUE_CACHE, or target/persistqueue-
compat in the repository), checks its SHA-256, takes its test modules for
Queue, SQLiteQueue and SQLiteAckQueue out of it, unchanged, and runs them
with pytest and the plugin shim.py, which makes ``persistqueue`` resolve
to mqlite.compat.persistqueue and skips the tests it lists (with the
reason). Nothing of persist-queue is kept in the repository.

Offline once the sdist is in the cache. When it is not there and cannot be
downloaded, prints why and exits 0 (skipped). Exits with pytest's status
otherwise.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PINNED = "1.1.0"
SHA256 = "4c042a3d39c9af4fa24497da76697fb4fff7abe6af04bcf55f099e0c23bc2c67"
SDIST = f"persist_queue-{PINNED}.tar.gz"
#: persist-queue's test modules run here.
MODULES = ["test_queue.py", "test_sqlqueue.py", "test_sqlackqueue.py"]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def cache_dir() -> Path:
    env = os.environ.get("MQLITE_PERSISTQUEUE_CACHE")
    return Path(env) if env else REPO / "target" / "persistqueue-compat"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(cache: Path) -> Path | None:
    """The sdist in the cache, downloaded if missing; None if it cannot be."""
    sdist = cache / SDIST
    if sdist.exists() and sha256(sdist) == SHA256:
        return sdist
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--timeout", "15", "--retries", "1", "-d", tmp, f"persist-queue=={PINNED}"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"SKIPPED: could not run pip to download persist-queue=={PINNED}: {e}")
            return None
        got = Path(tmp) / SDIST
        if r.returncode != 0 or not got.exists():
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            print(f"SKIPPED: could not download persist-queue=={PINNED} from PyPI:")
            print("\n".join("    " + line for line in tail))
            return None
        if sha256(got) != SHA256:
            print(f"{SDIST} from PyPI does not have the pinned SHA-256 {SHA256}")
            sys.exit(1)
        os.replace(got, sdist)
    return sdist


def extract(sdist: Path, cache: Path) -> Path:
    """persist-queue's test modules, unchanged, in a directory of their own."""
    work = cache / f"tests-{PINNED}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    with tarfile.open(sdist) as tar:
        for name in MODULES:
            member = tar.getmember(f"persist_queue-{PINNED}/persistqueue/tests/{name}")
            data = tar.extractfile(member)
            assert data is not None
            (work / name).write_bytes(data.read())
    # An ini file of their own, so that the repository's pytest settings
    # (and tests/python/conftest.py) are not used.
    (work / "pytest.ini").write_text("[pytest]\n")
    return work


def main() -> int:
    cache = cache_dir()
    sdist = fetch(cache)
    if sdist is None:
        return 0
    work = extract(sdist, cache)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "pytest", "-p", "shim", "-p", "no:cacheprovider",
           "-c", str(work / "pytest.ini"), "--rootdir", str(work), "-rs",
           *(str(work / m) for m in MODULES), *sys.argv[1:]]
    return subprocess.run(cmd, env=env, cwd=work).returncode


if __name__ == "__main__":
    sys.exit(main())
