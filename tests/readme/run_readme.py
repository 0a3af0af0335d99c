#!/usr/bin/env python3
"""Runs the README's quick-start code blocks, each twice on one data directory.

    .venv/bin/python tests/readme/run_readme.py [--readme README.md] [--only python|rust|c]

The blocks are the fenced blocks tagged ```python, ```rust and ```c under the
README's "## Quick start" heading (up to the next "## " heading); there must
be one of each. Each is run as a user would run it, verbatim, in a fresh
temporary directory, then run again in the same directory (a quick start
must work on a second run too):

  python  with this interpreter (`make readme-test` uses .venv/bin/python,
          where `make ext` installed the module);
  c       compiled with `cc -std=c11 -Wall -Werror -Iinclude ... -Ltarget/release
          -lmqlite` (`make ffi` built the library) and run;
  rust    as src/main.rs of a small cargo project that depends on
          `mqlite = { path = "<repo>/core" }`, built with the workspace's
          target directory (CARGO_TARGET_DIR) and Cargo.lock so nothing is
          built twice; the project lives in target/readme-test/rust.

Exits non-zero when a block is missing, does not build, or fails on either run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANGS = ("python", "rust", "c")
TIMEOUT = 900


def quick_start_blocks(readme: Path) -> dict[str, str]:
    """The fenced blocks under "## Quick start", by language tag."""
    text = readme.read_text(encoding="utf-8")
    m = re.search(r"^## Quick start[^\n]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if m is None:
        raise SystemExit(f"{readme}: no '## Quick start' section")
    blocks: dict[str, str] = {}
    for fence in re.finditer(r"^```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)^```[ \t]*$", m.group(1), re.M | re.S):
        lang, body = fence.group(1), fence.group(2)
        if lang in LANGS:
            if lang in blocks:
                raise SystemExit(f"{readme}: two ```{lang} blocks under Quick start")
            blocks[lang] = body
    missing = [lang for lang in LANGS if lang not in blocks]
    if missing:
        raise SystemExit(f"{readme}: no ```{'/'.join(missing)} block under Quick start")
    return blocks


def run(cmd: list[str], cwd: Path, label: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        sys.stderr.write(f"FAIL  {label}: {' '.join(cmd)} exited with {proc.returncode}\n")
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(1)
    return proc.stdout


def twice(cmd: list[str], work: Path, lang: str) -> None:
    """Runs cmd in work two times (same data directory), echoing the output."""
    for n in (1, 2):
        out = run(cmd, work, f"{lang} block, run {n}")
        print(f"PASS  {lang} block, run {n}")
        print("".join(f"    | {line}\n" for line in out.splitlines()), end="")


def python_block(code: str, work: Path, python: str) -> None:
    (work / "quickstart.py").write_text(code)
    twice([python, "quickstart.py"], work, "python")


def c_block(code: str, work: Path) -> None:
    libdir = ROOT / "target" / "release"
    if not (libdir / "libmqlite.so").exists():
        raise SystemExit(f"no libmqlite.so in {libdir}: build it with `make ffi`")
    src, exe = work / "quickstart.c", work / "quickstart"
    src.write_text(code)
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-std=c11", "-Wall", "-Werror", f"-I{ROOT / 'include'}", str(src), "-o", str(exe)]
    run([*cmd, f"-L{libdir}", "-lmqlite", f"-Wl,-rpath,{libdir}"], work, "c block, compile")
    print("PASS  c block, compiled with -std=c11 -Wall -Werror")
    twice([str(exe)], work, "c")


def rust_block(code: str, work: Path) -> None:
    project = ROOT / "target" / "readme-test" / "rust"
    (project / "src").mkdir(parents=True, exist_ok=True)
    core = (ROOT / "core").as_posix()
    (project / "Cargo.toml").write_text(
        "[package]\n"
        'name = "readme-quickstart"\n'
        'version = "0.0.0"\n'
        'edition = "2021"\n'
        "publish = false\n\n"
        "[dependencies]\n"
        f'mqlite = {{ path = "{core}" }}\n\n'
        "# Not a member of any workspace above it.\n"
        "[workspace]\n"
    )
    (project / "src" / "main.rs").write_text(code)
    # The workspace's lock: the same dependency versions, already built.
    shutil.copyfile(ROOT / "Cargo.lock", project / "Cargo.lock")
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    cargo = os.environ.get("CARGO", "cargo")
    run([cargo, "build", "-q", "--manifest-path", str(project / "Cargo.toml")], work, "rust block, build", env)
    print("PASS  rust block, built")
    twice([str(target / "debug" / "readme-quickstart")], work, "rust")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    ap.add_argument("--only", choices=LANGS, action="append", help="run only these blocks")
    ap.add_argument("--python", default=sys.executable, help="the interpreter for the Python block")
    args = ap.parse_args()
    blocks = quick_start_blocks(args.readme)
    for lang in args.only or LANGS:
        with tempfile.TemporaryDirectory(prefix=f"mqlite-readme-{lang}-") as tmp:
            work = Path(tmp)
            if lang == "python":
                python_block(blocks[lang], work, args.python)
            elif lang == "c":
                c_block(blocks[lang], work)
            else:
                rust_block(blocks[lang], work)
    print("readme-test: every quick-start block ran twice")
    return 0


if __name__ == "__main__":
    sys.exit(main())
