"""Group join time: kwire and confluent-kafka (librdkafka), each with the classic protocol and
with KIP-848 (``group.protocol=consumer``), on Apache Kafka 4.3.1 (issue 15).

Each measurement is what a user meets: a fresh process that imports its client, subscribes and
polls until it holds its first record.  Two numbers per round and client:

* ``first``: a member alone in a new group -- process start to its first record;
* ``second``: a second member of the same group started while the first keeps polling --
  its process start to its first record (the group rebalances: the first member gives up
  partitions, which under KIP-848 the broker hands on only after the first member's
  acknowledgement).

The broker runs with Kafka's default group timings except ``group.initial.rebalance.delay.ms=0``
(kwire.embedded's test cluster): the classic protocol's 3 s delay for a new group would
dominate both clients alike.  KIP-848's heartbeat interval stays at its default (5 s): when a
member waits for the next heartbeat to learn its assignment, users wait for it too.

Rounds (``KWIRE_BENCH_JOIN_ROUNDS``, default 5; smoke 1) interleave the four clients; medians
and ratios go to ``bench/results/group_join.json``.
Run alone: ``python -m pytest -q -s -p no:cacheprovider bench/test_bench_group_join.py``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench import harness

ROOT = Path(__file__).resolve().parent.parent
SMOKE = os.environ.get("KWIRE_BENCH_SMOKE", "") not in ("", "0")
ROUNDS = max(1, harness._env_int("KWIRE_BENCH_JOIN_ROUNDS", 1 if SMOKE else 5))
PARTITIONS = 4
CLIENTS = ("kwire-classic", "kwire-consumer", "confluent-classic", "confluent-consumer")

# A member: prints the seconds from its process start to its first record, then keeps polling
# (so it stays in the group) until stdin closes.
MEMBER = r"""
import os, sys, time, select
t0 = float(sys.argv[4])
client, bootstrap, group, topic = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
sys.path.insert(0, os.environ["KWIRE_ROOT"])
proto = "consumer" if client.endswith("consumer") else "classic"
cfg = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
       "group.protocol": proto, "enable.auto.commit": False}  # (the second member reads too)
if client.startswith("kwire"):
    from kwire import Consumer
    c = Consumer(cfg)
    c.subscribe([topic])
    poll = lambda: c.consume(100, timeout=0.05)
else:
    import confluent_kafka
    if proto == "classic":
        cfg["partition.assignment.strategy"] = "cooperative-sticky"
    c = confluent_kafka.Consumer(cfg)
    c.subscribe([topic])
    poll = lambda: [m for m in c.consume(100, timeout=0.05) if m.error() is None]
got = False
while True:
    if poll() and not got:
        got = True
        print(f"{time.time() - t0:.4f}", flush=True)
    if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline():
        break
c.close()
"""


def _member(client: str, bootstrap: str, group: str, topic: str) -> subprocess.Popen:
    # (bytecode cached as a pip-installed package has it: compiling kwire's sources in every
    # fresh process would be a cost users do not pay)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["KWIRE_ROOT"] = str(ROOT)
    return subprocess.Popen([sys.executable, "-c", MEMBER, client, bootstrap, group,
                             repr(time.time()), topic], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)


def _first_record_s(p: subprocess.Popen, timeout_s: float = 60.0) -> float:
    import select
    if not select.select([p.stdout], [], [], timeout_s)[0]:
        raise AssertionError("no record within the timeout")
    return float(p.stdout.readline())


def _round(client: str, bootstrap: str, topic: str) -> tuple[float, float]:
    group = f"join-{client}-{uuid.uuid4().hex[:8]}"
    a = _member(client, bootstrap, group, topic)
    b = None
    try:
        first = _first_record_s(a)
        b = _member(client, bootstrap, group, topic)
        second = _first_record_s(b)
    finally:
        for p in (a, b):
            if p is not None:
                p.stdin.close()
                p.wait(60)
    return first, second


def test_group_join_time():
    from confluent_kafka import Producer

    from kwire.admin import Admin
    from kwire.embedded.kafka import KafkaCluster

    with KafkaCluster(1) as kafka:
        topic = "join-bench"
        with Admin({"bootstrap.servers": kafka.bootstrap}) as admin:
            admin.create_topics([(topic, PARTITIONS, 1)], timeout=30, wait_for_leaders=True)
        p = Producer({"bootstrap.servers": kafka.bootstrap})
        for i in range(PARTITIONS * 100):
            p.produce(topic, b"v%d" % i, partition=i % PARTITIONS)
        p.flush(30)
        times: dict[str, dict[str, list[float]]] = {c: {"first": [], "second": []} for c in CLIENTS}
        for _ in range(ROUNDS):
            for client in CLIENTS:
                first, second = _round(client, kafka.bootstrap, topic)
                times[client]["first"].append(first)
                times[client]["second"].append(second)
    med = {c: {k: statistics.median(v) for k, v in t.items()} for c, t in times.items()}
    ratios = {f"{proto} {k}": med[f"confluent-{proto}"][k] / med[f"kwire-{proto}"][k]
              for proto in ("classic", "consumer") for k in ("first", "second")}
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "broker": "Apache Kafka 4.3.1 (one KRaft node)",
              "smoke": SMOKE, "rounds": ROUNDS, "load_avg": os.getloadavg(), "seconds": times, "median_s": med,
              "confluent_over_kwire": ratios}
    # (KWIRE_BENCH_RESULTS, as the other benches: the test suite's smoke run writes elsewhere)
    out = Path(os.environ.get("KWIRE_BENCH_RESULTS") or ROOT / "bench" / "results") / "group_join.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print()
    print(f"group join, median of {ROUNDS} (load {os.getloadavg()[0]:.1f}); seconds from process start "
          "to the first record")
    print(f"{'client':22} {'alone':>8} {'second member':>14}")
    for c in CLIENTS:
        print(f"{c:22} {med[c]['first']:8.2f} {med[c]['second']:14.2f}")
    for k, v in ratios.items():
        print(f"confluent ÷ kwire, {k}: {v:.2f}x")
    assert all(len(t["first"]) == ROUNDS for t in times.values())
