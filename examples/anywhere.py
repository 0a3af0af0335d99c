#!/usr/bin/env python3
"""One program, a directory or a Kafka cluster: the same code runs on both.

    python examples/anywhere.py data                      # a data directory
    python examples/anywhere.py kafka://127.0.0.1:9092    # a Kafka cluster

Creates topic "orders-<run>" (3 partitions), sends 300 orders keyed by
customer (so each customer's orders stay in order in one partition), reads
them back as consumer group "billing-<run>" committing as it goes, then
restarts the group to show it resumes after its commits. Prints what it
saw; the output is the same on a directory and on a cluster. ``--run``
names the topic and group (default: the current time), so runs against a
long-lived cluster do not meet each other's data.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import mqlite

CUSTOMERS = 7
ORDERS = 300


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("where", help="a data directory or a kafka://host:port address")
    ap.add_argument("--run", default=str(int(time.time())), help="suffix of the topic and group names")
    args = ap.parse_args()
    topic, group = f"orders-{args.run}", f"billing-{args.run}"

    with mqlite.open(args.where) as mq:
        mq.create_topic(topic, partitions=3)
        producer = mq.producer(acks="all")
        for i in range(ORDERS):
            customer = f"customer-{i % CUSTOMERS}"
            producer.send(topic, f"order {i}: {i % 50 + 1} EUR".encode(), key=customer.encode())
        producer.flush()

        # Read half, commit, restart: the group resumes after its commit.
        seen: Counter[str] = Counter()
        total = 0
        consumer = mq.consumer(group, enable_auto_commit=False)
        consumer.subscribe([topic])
        read = 0
        while read < ORDERS // 2:
            for m in consumer.consume(ORDERS // 2 - read, timeout=1.0):
                seen[m.key.decode()] += 1
                total += int(m.value.split(b": ")[1].split()[0])
                read += 1
        consumer.commit()
        consumer.close()
        consumer = mq.consumer(group, enable_auto_commit=False)
        consumer.subscribe([topic])
        while read < ORDERS:
            for m in consumer.consume(ORDERS - read, timeout=1.0):
                seen[m.key.decode()] += 1
                total += int(m.value.split(b": ")[1].split()[0])
                read += 1
        consumer.commit()
        lag = sum(consumer.lag().values())
        consumer.close()

        partitions = {c: mqlite.partition_for_key(c.encode(), 3) for c in sorted(seen)}
        print(f"{read} orders read once each, {total} EUR in all, lag {lag}")
        for customer in sorted(seen):
            print(f"  {customer}: {seen[customer]} orders, partition {partitions[customer]}")
        mq.delete_topic(topic)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
