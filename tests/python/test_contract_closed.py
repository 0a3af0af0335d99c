"""Every public method of a closed object raises mqlite.Closed, except the
few documented to work once closed; the table of calls (contract_calls.py)
covers every public method.

Two ways to be closed: the object's own `close()` (the processor's is its
consumer's), or its broker's.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Dict

import pytest

import mqlite
from contract_calls import CLASSES, FUNCTION_CALLS, METHOD_CALLS, Call, make_env, public_methods

#: What the calls that still work after close() return (None: anything).
WORKS_AFTER_CLOSE: Dict[str, Any] = {
    "Broker.close": None,
    "Broker.__exit__": False,
    "Producer.close": None,
    "Producer.__exit__": False,
    "Producer.stats": mqlite.ProducerStats,
    "Producer.__len__": 0,  # close() delivered everything
    "Consumer.close": None,
    "Consumer.__exit__": False,
    "Consumer.__iter__": mqlite.Consumer,
    "Consumer.stats": mqlite.ConsumerStats,
    "Consumer.wakeup": None,
    "Processor.stop": None,
    "ShareConsumer.close": None,
    "ShareConsumer.__exit__": False,
    "ShareConsumer.__iter__": mqlite.ShareConsumer,
    "ShareConsumer.stats": mqlite.ShareConsumerStats,
    "ShareConsumer.wakeup": None,
}


def test_table_covers_every_public_method() -> None:
    for cls in CLASSES:
        in_table = sorted(c.name for c in METHOD_CALLS if c.owner == cls.__name__)
        assert in_table == public_methods(cls), f"contract_calls.METHOD_CALLS is out of date for {cls.__name__}"


def test_table_covers_every_argument() -> None:
    def params(fn: Any) -> list:
        sig = inspect.signature(fn)
        return sorted(
            p.name
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )

    for c in METHOD_CALLS:
        cls = getattr(mqlite, c.owner)
        assert params(getattr(cls, c.name)) == sorted(c.kinds) == sorted(c.kwargs), c.id
    for fid, fn, valid, kinds in FUNCTION_CALLS:
        assert params(fn) == sorted(kinds) == sorted(valid), fid


def call(env: Any, c: Call) -> Any:
    return getattr(env.target(c.owner), c.name)(*c.args, **c.kwargs_for(env))


def check_closed_contract(env: Any, c: Call) -> None:
    if c.id in WORKS_AFTER_CLOSE:
        result = call(env, c)
        want = WORKS_AFTER_CLOSE[c.id]
        if isinstance(want, type):
            assert isinstance(result, want), c.id
        elif want is not None:
            assert result == want, c.id
    elif c.id in ("Consumer.__next__", "ShareConsumer.__next__"):
        with pytest.raises(StopIteration):  # iteration over a closed consumer ends
            call(env, c)
    else:
        with pytest.raises(mqlite.Closed) as info:
            call(env, c)
        assert info.value.code == 5, c.id
        assert "closed" in str(info.value), c.id


@pytest.mark.parametrize("how", ["own close()", "broker close()"])
def test_every_method_after_close(tmp_path: Path, how: str) -> None:
    env = make_env(tmp_path / "d")
    if how == "own close()":
        # Each object closed by its own close(); the broker last.
        env.consumer.close()
        env.processor_consumer.close()
        env.share_consumer.close()
        env.producer.close()
        env.broker.close()
    else:
        env.broker.close()
    assert env.broker.closed and env.producer.closed
    assert env.consumer.closed and env.processor_consumer.closed and env.share_consumer.closed
    assert env.consumer.member_id is None and env.processor_consumer.member_id is None
    for c in METHOD_CALLS:
        check_closed_contract(env, c)
    with pytest.raises(mqlite.Closed):
        mqlite.Processor(env.processor_consumer)


def test_objects_of_a_closed_broker_stay_closed_after_reopening(tmp_path: Path) -> None:
    env = make_env(tmp_path / "d")
    env.broker.close()
    with mqlite.open(tmp_path / "d", prefault=False, retention_check_interval_ms=0) as again:
        assert again.topics() == ["t"]
        with pytest.raises(mqlite.Closed):
            env.producer.send("t", b"v")
        with pytest.raises(mqlite.Closed):
            env.consumer.poll(timeout=0)


def test_processor_run_raises_once_its_consumer_is_closed(tmp_path: Path) -> None:
    env = make_env(tmp_path / "d")
    env.processor_consumer.close()
    with pytest.raises(mqlite.Closed):
        env.processor.run(lambda m: True)
    assert not env.processor.running
