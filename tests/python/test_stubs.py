"""The type stubs (python/mqlite/_mqlite.pyi, and mqlite/__init__.py) match
the compiled module: mypy's stubtest compares every class, function,
signature and default with what the module has at run time.

stubtest needs no allowlist for this module today: PyO3 gives every
function and method a `__text_signature__`, so it sees everything the stubs
declare. If it ever needs one, put it in `stubtest_allowlist.txt` beside
this file, each entry with a comment saying why; it is passed when present.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALLOWLIST = HERE / "stubtest_allowlist.txt"


def test_stubs_match_the_module(tmp_path: Path) -> None:
    try:
        import mypy.stubtest  # noqa: F401
    except ImportError as e:  # not a skip: the check must not silently vanish
        raise AssertionError("mypy is missing: run `make venv` (tests/python/requirements.txt)") from e
    cmd = [sys.executable, "-m", "mypy.stubtest", "mqlite"]
    if ALLOWLIST.exists():
        cmd += ["--allowlist", str(ALLOWLIST)]
    # From an empty directory: no mypy configuration or cache of the
    # project's gets involved.
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, f"stubtest found differences:\n{r.stdout}\n{r.stderr}"
    assert "Success" in r.stdout, r.stdout


def test_stubs_are_the_ones_beside_the_module() -> None:
    import mqlite

    package = Path(mqlite.__file__).parent
    assert (package / "_mqlite.pyi").exists() and (package / "py.typed").exists()
