"""How the consumer sizes its Fetch requests, on Apache Kafka (the state machine's rules are in
tests/consumer/test_fetch_budget.py).

A node answers one Fetch of a consumer at a time.  When one partition is behind but waits for
room in the budget and the node's other partitions are at their end, a Fetch for those alone is
held by the broker for fetch.wait.max.ms -- and the partition behind cannot be fetched from that
node until it returns.  The consumer waits for room instead and asks for all of them then.
"""
from __future__ import annotations

import time

import confluent_kafka

from kwire.consumer import Consumer


def _produce(peer, topic, partition, n, value_bytes=100):
    p = confluent_kafka.Producer({"bootstrap.servers": peer.bootstrap, "linger.ms": 20,
                                  "batch.size": 200_000})
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=b"%010d" % i + b"v" * (value_bytes - 10), partition=partition)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0


def _fetched(event):
    """{partition: number of record bytes} of a Fetch answer."""
    return {p["partition_index"]: len(p.get("records") or b"")
            for t in event["body"].get("responses", ()) for p in t.get("partitions", ())}


def test_a_partition_behind_is_not_held_up_by_a_long_poll_for_one_at_its_end(kafka, unique_topic,
                                                                           create_topic):
    # partition 0 empty, partition 1 with ~10 MB; an 8 MiB budget (room for ~2.5 MiB of
    # partition 1's raw bytes), and a broker wait long enough to see
    create_topic(kafka, unique_topic, 2)
    n = 100_000
    _produce(kafka, unique_topic, 1, n)
    events: list[dict] = []
    cfg = {"bootstrap.servers": kafka.bootstrap, "group.id": unique_topic + "-g",
           "auto.offset.reset": "earliest", "enable.auto.commit": False,
           "queued.max.messages.kbytes": 8192, "fetch.wait.max.ms": 3000}
    got = 0
    with Consumer(cfg, tracer=events.append) as c:
        c.subscribe([unique_topic])
        end = time.monotonic() + 30
        while got == 0 and time.monotonic() < end:
            got += len(c.consume(1, timeout=0.5))
        time.sleep(1.0)  # the driver fills the budget with partition 1's records meanwhile
        while got < n and time.monotonic() < end:
            got += len(c.consume(10_000, timeout=0.5))
    assert got == n
    answers = [_fetched(e) for e in events if e["api"] == "Fetch" and e["direction"] == "recv"]
    last = max(i for i, a in enumerate(answers) if a.get(1))  # the answer with partition 1's last bytes
    before = answers[:last]
    # the scenario happened: partition 1 was fetched in several answers, not all at once
    assert sum(1 for a in before if a.get(1)) >= 3
    # and no answer came back empty (held by the broker) while partition 1 was still behind
    assert all(any(a.values()) for a in before), [a for a in before if not any(a.values())]


def _first_fetch_sizes(events):
    """(max_bytes, [partition_max_bytes of each partition]) of the first Fetch sent (a full
    session request names every partition)."""
    body = next(e["body"] for e in events if e["api"] == "Fetch" and e["direction"] == "send")
    return body["max_bytes"], sorted(p["partition_max_bytes"] for t in body["topics"] for p in t["partitions"])


def test_a_nodes_partitions_share_a_12_mib_answer_unless_told(kafka, unique_topic, create_topic):
    create_topic(kafka, unique_topic, 3)
    for partition in range(3):
        _produce(kafka, unique_topic, partition, 10)
    for extra, expected in (({}, (12 << 20, [4 << 20] * 3)),
                            ({"max.partition.fetch.bytes": 65536}, (12 << 20, [65536] * 3)),
                            ({"queued.max.messages.kbytes": 8192}, (2 << 20, [1 << 20] * 3))):
        events: list[dict] = []
        cfg = {"bootstrap.servers": kafka.bootstrap, "group.id": f"{unique_topic}-{len(extra)}-{expected[0]}",
               "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra}
        got = 0
        with Consumer(cfg, tracer=events.append) as c:
            c.subscribe([unique_topic])
            end = time.monotonic() + 30
            while got < 30 and time.monotonic() < end:
                got += len(c.consume(100, timeout=0.5))
        assert got == 30
        assert _first_fetch_sizes(events) == expected, extra
