"""The delivery timeout from Python: a record queued (linger) longer than
delivery_timeout_ms is not appended and its callback gets mqlite.Timeout;
within it, or with no limit (0), it is appended."""

from __future__ import annotations

import time
from pathlib import Path

import mqlite


def test_queued_records_past_their_deadline_are_not_appended(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "d", retention_check_interval_ms=0) as mq:
        mq.create_topic("t", 1)
        p = mq.producer(linger_ms=60_000, delivery_timeout_ms=50)
        reports: list = []
        p.produce("t", b"late", on_delivery=lambda err, md: reports.append((err, md)))
        time.sleep(0.2)
        p.flush()
        assert len(reports) == 1
        err, md = reports[0]
        assert isinstance(err, mqlite.Timeout), err
        assert isinstance(err, TimeoutError)
        assert md is None or md.offset is None
        assert mq.topic("t").partitions[0].end_offset == 0
        assert p.stats().errors == 1

        reports.clear()
        p.produce("t", b"in time", on_delivery=lambda err, md: reports.append((err, md)))
        p.flush()
        assert reports[0][0] is None

        patient = mq.producer(linger_ms=60_000, delivery_timeout_ms=0)
        reports.clear()
        patient.produce("t", b"patient", on_delivery=lambda err, md: reports.append((err, md)))
        time.sleep(0.2)
        patient.flush()
        assert reports[0][0] is None

        c = mq.consumer()
        c.assign([("t", 0)])
        got = [m.value for m in c.consume(100, timeout=0.5)]
        assert got == [b"in time", b"patient"]
