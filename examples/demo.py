#!/usr/bin/env python3
"""The Python half of `make demo`.

    python examples/demo.py DATA_DIR            # produce and consume "orders"
    python examples/demo.py DATA_DIR --verify   # check what the C demo wrote

Without --verify: opens DATA_DIR, creates topic "orders" (4 partitions),
produces 10,000 orders and reads them all back with a consumer in group
"billing", printing counts per partition, time taken and rates; the group's
committed offsets are printed from Broker.describe_group().

With --verify: reopens DATA_DIR and checks topic "c-events", written by the C
demo (1000 messages keyed "c-<i>" with values "hello from C <i>"), and that
"orders" still holds its 10,000 messages and group "billing" committed all of
them. Exits non-zero if anything is missing or wrong.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import mqlite

ORDERS = "orders"
ORDER_COUNT = 10_000
C_TOPIC = "c-events"
C_COUNT = 1000


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s" if seconds > 0 else "n/a"


def print_stats(mq: mqlite.Broker, topic: str) -> None:
    info = mq.topic(topic)
    total = sum(p.end_offset - p.start_offset for p in info.partitions)
    print(f"  topic {info.name!r}: {len(info.partitions)} partition(s), {total} message(s)")
    for p in info.partitions:
        recovered = ""
        if p.truncated_bytes or p.dropped_batches:
            recovered = f", recovery cut {p.truncated_bytes} bytes / {p.dropped_batches} batches"
        print(
            f"    [{p.partition}] offsets {p.start_offset}..{p.end_offset}, "
            f"{p.size_bytes} bytes in {p.segments} segment(s){recovered}"
        )


def produce_and_consume(data_dir: str) -> int:
    with mqlite.open(data_dir) as mq:
        if ORDERS in mq.topics():
            mq.delete_topic(ORDERS)
        mq.create_topic(ORDERS, partitions=4)
        # Committed offsets outlive a deleted topic: start the group over.
        mq.consumer("billing").commit([(ORDERS, p, 0) for p in range(4)])

        # produce() queues each order and returns at once; on_delivery hears
        # how it went (served by flush() on this thread). Batches of each
        # partition wait up to 5 ms for more records and are lz4-compressed.
        delivered: Counter[int] = Counter()
        failed: list[mqlite.Error] = []

        def on_delivery(err: mqlite.Error | None, msg: mqlite.RecordMetadata | None) -> None:
            if err is not None:
                failed.append(err)
            elif msg is not None:
                delivered[msg.partition] += 1

        start = time.perf_counter()
        with mq.producer(compression="lz4", linger_ms=5) as producer:
            for i in range(ORDER_COUNT):
                producer.produce(
                    ORDERS,
                    f'{{"order": {i}, "amount_cents": {(i * 37) % 10_000}, "currency": "EUR"}}',
                    key=f"o-{i}",
                    headers=[("source", b"demo.py")],
                    on_delivery=on_delivery,
                )
            producer.flush()
            produced = time.perf_counter() - start
            stats = producer.stats()
        print(f"produced {ORDER_COUNT} orders in {produced * 1000:.1f} ms ({rate(ORDER_COUNT, produced)})")
        print(
            f"  {sum(delivered.values())} delivery reports, {len(failed)} failed; "
            f"{stats.batches} lz4 batches of {stats.average_batch_records:.1f} records, {stats.bytes} bytes"
        )
        if failed or sum(delivered.values()) != ORDER_COUNT:
            print("error: delivery reports do not add up", file=sys.stderr)
            return 1

        per_partition: Counter[int] = Counter()
        start = time.perf_counter()
        with mq.consumer("billing") as consumer:
            consumer.subscribe([ORDERS])
            received = 0
            while received < ORDER_COUNT:
                batch = consumer.consume(1000, timeout=5.0)
                if not batch:
                    break
                for msg in batch:
                    per_partition[msg.partition] += 1
                received += len(batch)
        consumed = time.perf_counter() - start
        print(f"consumed {received} orders in {consumed * 1000:.1f} ms ({rate(received, consumed)}), group 'billing'")
        for p in sorted(per_partition):
            print(f"  partition {p}: {per_partition[p]} orders")
        # Closing the consumer committed what it read (auto-commit).
        committed = mq.describe_group("billing").committed
        print("  committed: " + ", ".join(f"{t}/{p} at {o}" for (t, p), (o, _) in sorted(committed.items())))
        if received != ORDER_COUNT:
            print(f"error: expected {ORDER_COUNT} orders, got {received}", file=sys.stderr)
            return 1
    return 0


def verify(data_dir: str) -> int:
    problems: list[str] = []
    with mqlite.open(data_dir) as mq:
        topics = mq.topics()
        print(f"topics in {data_dir}: {', '.join(topics) or '(none)'}")
        if C_TOPIC not in topics:
            print(f"error: topic {C_TOPIC!r} is missing (the C demo writes it)", file=sys.stderr)
            return 1

        consumer = mq.consumer("verify")
        consumer.subscribe([C_TOPIC])
        seen: dict[int, bytes] = {}
        while True:
            batch = consumer.consume(1000, timeout=0.5)
            if not batch:
                break
            for msg in batch:
                key = (msg.key or b"").decode("utf-8", "replace")
                if not key.startswith("c-") or not key[2:].isdigit():
                    problems.append(f"unexpected key {key!r} at {msg.partition}/{msg.offset}")
                    continue
                i = int(key[2:])
                if i in seen:
                    problems.append(f"duplicate key {key!r}")
                seen[i] = msg.value or b""
        consumer.close()

        wrong = [i for i, v in seen.items() if v != f"hello from C {i}".encode()]
        missing = [i for i in range(C_COUNT) if i not in seen]
        if wrong:
            problems.append(f"{len(wrong)} wrong value(s), e.g. c-{wrong[0]} = {seen[wrong[0]]!r}")
        if missing:
            problems.append(f"{len(missing)} missing message(s), e.g. c-{missing[0]}")
        print(f"read {len(seen)} of {C_COUNT} messages written by C:")
        for i in sorted(seen)[:3]:
            print(f"  c-{i} = {seen[i].decode('utf-8', 'replace')!r}")
        if len(seen) > 3:
            last = max(seen)
            print(f"  ... c-{last} = {seen[last].decode('utf-8', 'replace')!r}")

        print("topic stats:")
        print_stats(mq, C_TOPIC)
        if ORDERS in topics:
            print_stats(mq, ORDERS)
            orders = sum(p.end_offset - p.start_offset for p in mq.topic(ORDERS).partitions)
            if orders != ORDER_COUNT:
                problems.append(f"topic {ORDERS!r} holds {orders} messages, expected {ORDER_COUNT}")
            committed = sum(o for (t, _), (o, _) in mq.describe_group("billing").committed.items() if t == ORDERS)
            print(f"group 'billing' committed {committed} of {ORDER_COUNT} orders")
            if committed != ORDER_COUNT:
                problems.append(f"group 'billing' committed {committed} orders, expected {ORDER_COUNT}")
        else:
            problems.append(f"topic {ORDERS!r} is missing")

    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if problems:
        return 1
    print("verify: OK")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_dir", metavar="DATA_DIR")
    parser.add_argument("--verify", action="store_true", help="check what the C demo wrote")
    args = parser.parse_args()
    try:
        return verify(args.data_dir) if args.verify else produce_and_consume(args.data_dir)
    except mqlite.Error as e:
        print(f"error: {e} (mqlite error code {e.code})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
