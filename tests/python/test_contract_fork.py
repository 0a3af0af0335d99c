"""What a child made by os.fork() may do (the module docstring's rule).

In the child, the broker, producers, consumers and processors made before
the fork report `closed`, every method raises mqlite.Closed naming both
processes (`close()`, `Consumer.wakeup()` and `Processor.stop()` do
nothing), nothing hangs, even with engine and Python threads busy in the
parent at the fork, and garbage collection and interpreter exit in the child
leave the parent's broker alone. Messages received before the fork stay
readable. The child can open a broker of its own on another directory at
once, and on the parent's after the parent closed it; the parent can close
and reopen its directory while the child lives.

The scenario runs in a fresh interpreter (this file run as a script), so
that pytest's own process never forks.
"""

from __future__ import annotations

import gc
import os
import select
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, List

HERE = Path(__file__).resolve().parent
WAIT = 60.0  # seconds before a silent process counts as hung


def open_broker(path: Path) -> Any:
    import mqlite

    return mqlite.open(path, mode="exclusive", prefault=False, retention_check_interval_ms=0)


def read_line(fd: int, timeout: float) -> str:
    """One line from a pipe; fails after `timeout`."""
    out = b""
    deadline = time.monotonic() + timeout
    while not out.endswith(b"\n"):
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        assert ready, f"nothing from the other process in {timeout} s (hung?)"
        chunk = os.read(fd, 1)
        assert chunk, "the other process closed the pipe"
        out += chunk
    return out.decode().strip()


def child(env: Any, polling: Any, message: Any, data: Path, own: Path, from_parent: int, to_parent: int) -> None:
    """The forked child's checks; raises on a broken rule."""
    import mqlite
    from contract_calls import METHOD_CALLS

    parent = os.getppid()
    objects = [env.broker, env.producer, env.consumer, env.processor_consumer, env.share_consumer, polling]
    assert all(o.closed for o in objects), [o.closed for o in objects]
    assert env.consumer.member_id is None and polling.member_id is None
    assert env.producer.name == "p"  # plain attributes still read
    assert message.value == b"before the fork"  # received before: still readable

    does_nothing = {
        "Broker.close": None,
        "Broker.__exit__": False,
        "Producer.close": None,
        "Producer.__exit__": False,
        "Consumer.close": None,
        "Consumer.__exit__": False,
        "Consumer.wakeup": None,
        "Processor.stop": None,
        "ShareConsumer.close": None,
        "ShareConsumer.__exit__": False,
        "ShareConsumer.wakeup": None,
    }
    for c in METHOD_CALLS:
        target = env.target(c.owner)
        call = getattr(target, c.name)
        if c.id in does_nothing:
            assert call(*c.args, **c.kwargs_for(env)) == does_nothing[c.id], c.id
        elif c.id in ("Consumer.__iter__", "ShareConsumer.__iter__"):
            assert call() is target
        else:
            try:
                call(*c.args, **c.kwargs_for(env))
            except mqlite.Closed as e:
                text = str(e)
                assert e.code == 5 and "fork" in text, (c.id, text)
                assert str(parent) in text and str(os.getpid()) in text, (c.id, text)
            else:
                raise AssertionError(f"{c.id} did not raise in the forked child")
    # The consumer that was waiting in poll() in another thread at the fork
    # (its lock may have been held then): nothing may wait for that lock.
    for call in (lambda: polling.poll(timeout=0), polling.stats, polling.assignment, lambda: next(polling)):
        try:
            call()
        except mqlite.Closed:
            pass
        else:
            raise AssertionError("the polling consumer worked in the child")
    polling.close()
    polling.wakeup()
    try:
        mqlite.Processor(env.processor_consumer)
    except mqlite.Closed:
        pass
    else:
        raise AssertionError("a processor was made in the child")

    # The parent holds its directory: Locked, naming the parent.
    try:
        open_broker(data)
    except mqlite.Locked as e:
        assert str(parent) in str(e), str(e)
    else:
        raise AssertionError("the child opened the parent's open directory")

    # A broker of its own works.
    with open_broker(own) as mine:
        mine.create_topic("c", segment_bytes=1 << 20)
        mine.producer().send("c", b"child")
        c = mine.consumer()
        c.assign([("c", 0)])
        got = c.poll(timeout=5)
        assert got is not None and got.value == b"child"

    # Some of the parent's objects go away now, the rest at exit.
    del polling
    gc.collect()

    os.write(to_parent, b"ready\n")
    assert read_line(from_parent, WAIT) == "closed"
    with open_broker(data) as again:  # the parent closed it
        again.producer().send("t", b"from the child", partition=1)
    os.write(to_parent, b"done\n")


def scenario(root: Path) -> None:
    """Run in a fresh interpreter: threads busy, fork, check both sides."""
    import mqlite
    from contract_calls import make_env

    data, own = root / "data", root / "own"
    # Exclusive mode, by name: the child must find the parent's directory
    # locked (a shared directory is open to any process).
    env = make_env(data, mode="exclusive")
    env.producer.send("t", b"before the fork", partition=1)
    reader = env.broker.consumer()
    reader.assign([("t", 1)])
    message = reader.poll(timeout=5)
    assert message is not None and message.value == b"before the fork"

    # Busy at the fork: a consumer waiting in poll(), a processor running
    # over a group, a lingering producer sending from another thread.
    polling = env.broker.consumer("waiting")
    polling.subscribe("t")
    lingering = env.broker.producer(linger_ms=5)
    stop = threading.Event()
    errors: List[BaseException] = []

    def keep(f: Any) -> None:
        try:
            while not stop.is_set():
                f()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    busy = [
        threading.Thread(target=keep, args=(lambda: polling.poll(timeout=0.05),)),
        threading.Thread(target=keep, args=(lambda: lingering.produce("t", b"busy", partition=0),)),
    ]
    proc_stats: List[Any] = []
    processor = threading.Thread(target=lambda: proc_stats.append(env.processor.run(lambda m: True)))
    for t in busy + [processor]:
        t.start()
    time.sleep(0.2)

    from_parent, to_child = os.pipe()
    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            child(env, polling, message, data, own, from_parent, to_parent)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        if code:
            os._exit(code)
        sys.exit(0)  # a normal exit: finalisation with parent objects alive

    try:
        stop.set()
        for t in busy:
            t.join(WAIT)
        env.processor.stop()
        processor.join(WAIT)
        assert not errors, errors
        assert read_line(from_child, WAIT) == "ready"
        # The parent's objects work as before.
        md = env.producer.send("t", b"parent after the fork", partition=1)
        assert reader.poll(timeout=5) is not None  # the next record of partition 1
        lingering.close()
        for c in (reader, polling, env.consumer, env.share_consumer):
            c.close()
        env.producer.close()
        env.broker.close()
        # The child still lives and inherited the lock's descriptor: the
        # directory must be free all the same.
        assert md.offset is not None
        with open_broker(data) as again:
            assert again.topic("t").partitions[1].end_offset == md.offset + 1
        os.write(to_child, b"closed\n")
        assert read_line(from_child, WAIT) == "done"
        deadline = time.monotonic() + WAIT
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            assert time.monotonic() < deadline, "the child did not exit (hung at exit?)"
            time.sleep(0.01)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}"
    except BaseException:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        raise
    with open_broker(data) as final:
        c = final.consumer()
        c.assign([("t", 1)])
        values = [m.value for m in c.consume(100, timeout=5)]
        assert values == [b"before the fork", b"parent after the fork", b"from the child"], values
        assert isinstance(final, mqlite.Broker)
    print("SCENARIO OK", flush=True)


def test_fork(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-X", "faulthandler", str(Path(__file__)), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE,
    )
    assert r.returncode == 0 and "SCENARIO OK" in r.stdout, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    scenario(Path(sys.argv[1]))
