"""Fetching and commits go on through a cooperative rebalance (issue 14, defects 3 and 4).

A broker answers one connection's requests in order, and holds a member's JoinGroup until the
round completes (Tansu: about half the session timeout).  Group traffic therefore has a
connection of its own to the coordinator, as in Kafka's Java client and librdkafka: the
partitions a cooperative member keeps are fetched while its JoinGroup waits; and commits of
them go over the broker's ordinary connection while a JoinGroup/SyncGroup is in flight, so a
synchronous commit() does not wait for the rebalance either.  Otherwise commits go on the
coordinator's own connection, so that a caught-up consumer's commit does not queue behind its
long-poll Fetch.
"""
from __future__ import annotations

import threading
import time

import confluent_kafka

from kwire import TopicPartition
from kwire.consumer import Consumer
from kwire.errors import RebalanceInProgressError

TIMING = {"session.timeout.ms": 12000, "heartbeat.interval.ms": 500, "fetch.wait.max.ms": 100,
          "partition.assignment.strategy": "cooperative-sticky", "auto.offset.reset": "earliest"}


def test_kept_partitions_are_fetched_while_the_join_waits(tansu, unique_topic, create_topic):
    create_topic(tansu, unique_topic, 2)
    group = f"g-{unique_topic}"
    events: list = []
    lock = threading.Lock()

    def tracer(ev):
        with lock:
            events.append((ev["direction"], ev["api"], ev["node_id"], ev["correlation_id"],
                           ev["body"] if ev["api"] == "Fetch" and ev["direction"] == "recv" else None))

    cfg = {"bootstrap.servers": tansu.bootstrap, "group.id": group, **TIMING}
    a = Consumer(cfg, tracer=tracer)
    b = None
    stop = threading.Event()

    def produce():
        p = confluent_kafka.Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 0})
        i = 0
        while not stop.is_set():
            for part in (0, 1):
                p.produce(unique_topic, value=b"%d" % i, partition=part)
            i += 1
            p.poll(0)
            time.sleep(0.02)
        p.flush(10)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        a.subscribe([unique_topic])
        end = time.monotonic() + 60
        while len(a.assignment()) < 2:
            assert time.monotonic() < end, "A never got both partitions"
            a.consume(100, timeout=0.1)
        producer.start()
        with lock:
            joins_before = sum(1 for d, api, *_ in events if d == "send" and api == "JoinGroup")
        b = Consumer(cfg)
        b.subscribe([unique_topic])
        b_stop = threading.Event()

        def run_b():
            while not b_stop.is_set():
                b.consume(100, timeout=0.1)

        tb = threading.Thread(target=run_b, daemon=True)
        tb.start()
        # A rejoins (keeping one partition); wait until that JoinGroup has been answered
        end = time.monotonic() + 90
        committed = None
        while True:
            a.consume(100, timeout=0.1)
            with lock:
                sends = [i for i, e in enumerate(events) if e[0] == "send" and e[1] == "JoinGroup"]
                if len(sends) > joins_before:
                    i = sends[joins_before]
                    node, cid = events[i][2], events[i][3]
                    done = [j for j, e in enumerate(events) if j > i and e[0] == "recv"
                            and e[1] == "JoinGroup" and e[2] == node and e[3] == cid]
                    if done:
                        window = events[i:done[0] + 1]
                        break
            if len(sends) > joins_before and committed is None:
                # (defect 4) a commit of an owned partition while the JoinGroup is held: it
                # goes through, or fails at once with a retriable error -- it does not wait for
                # the rebalance
                tp = a.assignment()[0]
                try:
                    a.commit(offsets=[TopicPartition(tp.topic, tp.partition, 1)], asynchronous=False)
                    committed = "ok"
                except RebalanceInProgressError:
                    committed = "retriable"
                with lock:
                    join_answered = any(e[0] == "recv" and e[1] == "JoinGroup" and e[3] == cid
                                        for e in events[i:])
                assert not join_answered, "commit() waited for the rebalance"
            assert time.monotonic() < end, "A's rejoin never completed"
        assert committed is not None
        b_stop.set()
        tb.join(10)
        fetch_nodes = {e[2] for e in events if e[1] == "Fetch"}
        assert node not in fetch_nodes, "JoinGroup shares a connection with fetches"
        # Fetches sent after the JoinGroup were answered before it, with records.
        sent_after = {(e[2], e[3]) for e in window if e[0] == "send" and e[1] == "Fetch"}
        answered = [e for e in window if e[0] == "recv" and e[1] == "Fetch" and (e[2], e[3]) in sent_after]
        assert answered, "no fetch answered while the JoinGroup waited"
        with_records = [e for e in answered for t in e[4].get("responses", ())
                        for p in t.get("partitions", ()) if p.get("records")]
        assert with_records, "no records fetched while the JoinGroup waited"
    finally:
        stop.set()
        a.close()
        if b is not None:
            b.close()


def test_a_caught_up_consumers_commit_does_not_queue_behind_its_fetch(kafka, unique_topic, create_topic):
    """Found by a new user with `kwire decode`: every synchronous commit of a caught-up consumer
    took fetch.wait.max.ms, its OffsetCommit sent on the connection whose long-poll Fetch the
    broker was holding.  Checked from the trace: no OffsetCommit goes out on a connection with
    a Fetch in flight."""
    create_topic(kafka, unique_topic, 1)
    p = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(20):
        p.produce(unique_topic, b"%d" % i, partition=0)
    assert p.flush(10) == 0
    events: list = []
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{unique_topic}",
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 2000, "enable.auto.commit": False},
                 tracer=events.append)
    try:
        c.subscribe([unique_topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got += c.consume(100, timeout=0.5)
        assert len(got) == 20
        for _ in range(3):  # caught up: each Fetch now waits on the broker
            c.consume(100, timeout=0.3)
            c.commit(asynchronous=False)
    finally:
        c.close()
    in_flight: dict = {}  # node id -> APIs sent and not yet answered
    commits = 0
    for e in list(events):
        node = e["node_id"]
        if e["direction"] == "send":
            if e["api"] == "OffsetCommit":
                commits += 1
                assert "Fetch" not in in_flight.get(node, {}).values(), (node, in_flight.get(node))
            in_flight.setdefault(node, {})[e["correlation_id"]] = e["api"]
        else:
            in_flight.get(node, {}).pop(e["correlation_id"], None)
    assert commits >= 3
