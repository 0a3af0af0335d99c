"""Arguments of the wrong type or out of range raise TypeError, ValueError,
OverflowError or mqlite.InvalidArgument, never crash the interpreter and
never raise SystemError or a Rust panic.

Every public function and method (contract_calls.py) is called with every
wrong value of each of its arguments' kinds: None where a value is
required, an int for a str, a str for bytes-only arguments and lists, a
lone surrogate for a str, floats and lists for ints, huge ints, negative
numbers where only non-negative ones make sense. The calls run in a
subprocess, so that a crash fails this test with the call that caused it
instead of killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_wrong_arguments_raise_and_never_crash(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-X", "faulthandler", str(HERE / "contract_calls.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE,
    )
    lines = r.stdout.splitlines()
    if r.returncode not in (0, 1):
        last = lines[-1] if lines else "(before the first call)"
        raise AssertionError(f"the subprocess died (exit {r.returncode}) during: {last}\n{r.stderr[-4000:]}")
    failures = [line[5:] for line in lines if line.startswith("FAIL ")]
    assert not failures, f"{len(failures)} calls broke the contract:\n" + "\n".join(failures)
    assert r.returncode == 0, r.stderr[-4000:]
    (calls,) = [int(line.split()[1]) for line in lines if line.startswith("CALLS ")]
    # Every method and function was exercised (about 860 calls today).
    assert calls > 800, calls
