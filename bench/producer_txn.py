"""What idempotence and transactions cost kwire's Producer, beside confluent-kafka's, on one
Apache Kafka 4.3 node: records/s of N records of 100 bytes to a 3-partition topic, per mode
(plain, ``enable.idempotence``, ``transactional.id`` with one transaction per 10,000 records),
the contenders interleaved in rounds; reported as ratios from one run.

    python bench/producer_txn.py [N] [ROUNDS]
"""
from __future__ import annotations

import sys
import time
import uuid

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

import kwire.confluent as kc
from kwire.embedded.kafka import KafkaCluster

TXN_RECORDS = 10_000
VALUE = b"x" * 100


def run(ck, bootstrap: str, mode: str, n: int) -> float:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        f.result(30)
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"}
    if mode == "idempotent":
        conf["enable.idempotence"] = True
    if mode == "transactional":
        conf["transactional.id"] = topic
    p = ck.Producer(conf)
    if mode == "transactional":
        p.init_transactions(30)
    start = time.perf_counter()
    for i in range(n):
        if mode == "transactional" and i % TXN_RECORDS == 0:
            if i:
                p.commit_transaction(60)
            p.begin_transaction()
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    if mode == "transactional":
        p.commit_transaction(60)
    assert p.flush(60) == 0
    elapsed = time.perf_counter() - start
    return n / elapsed


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    results: dict = {}
    with KafkaCluster(1) as k:
        for r in range(rounds):
            for mode in ("plain", "idempotent", "transactional"):
                for name, ck in (("kwire.confluent", kc), ("confluent_kafka", confluent_kafka)):
                    rate = run(ck, k.bootstrap, mode, n)
                    results.setdefault((name, mode), []).append(rate)
                    print(f"round {r} {name:16} {mode:14} {rate:12,.0f} rec/s", flush=True)
    best = {key: max(v) for key, v in results.items()}
    print("\nbest of rounds; ratios:")
    for mode in ("plain", "idempotent", "transactional"):
        ours, theirs = best[("kwire.confluent", mode)], best[("confluent_kafka", mode)]
        print(f"{mode:14} kwire {ours:12,.0f}  confluent {theirs:12,.0f}  kwire/confluent {ours / theirs:5.2f}x  "
              f"kwire {mode}/plain {ours / best[('kwire.confluent', 'plain')]:5.2f}x  "
              f"confluent {mode}/plain {theirs / best[('confluent_kafka', 'plain')]:5.2f}x")


if __name__ == "__main__":
    main()
