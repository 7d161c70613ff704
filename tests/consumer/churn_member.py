"""One member of the churn test (tests/consumer/test_churn.py), run as a process of its own so
that it can be SIGKILLed: ``python -m tests.consumer.churn_member CLIENT BOOTSTRAP TOPIC GROUP
ASSIGNOR COMMIT OUT`` with CLIENT ``kwire`` or ``confluent``, COMMIT ``auto`` or ``manual``, and
ASSIGNOR an assignor of the classic protocol or ``consumer``: KIP-848 (group.protocol=consumer).

It writes one line per event to OUT, with ``time.monotonic()`` (CLOCK_MONOTONIC: one clock
for every process of the machine) so the test can line events of all members up:

    A <t> <partition> ...   partitions assigned (added)
    V <t> <partition> ...   partitions revoked or lost
    R <t> <partition> <offset> ...   records handed to the application (one line per batch)
    E <t> <error>           an error

SIGTERM closes the consumer (revoking, committing, leaving) and exits.
"""
from __future__ import annotations

import signal
import sys
import time


def main(client: str, bootstrap: str, topic: str, group: str, assignor: str, commit: str, out_path: str) -> None:
    out = open(out_path, "a", buffering=1)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))

    def log(kind: str, *fields) -> None:
        out.write(" ".join([kind, f"{time.monotonic():.6f}", *map(str, fields)]) + "\n")

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": assignor, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500, "enable.auto.commit": commit == "auto",
            # the rebalance timeout: a join waits this long at most for members that never
            # rejoin (Tansu 0.6 does not expire a SIGKILLed member while a rebalance waits)
            "max.poll.interval.ms": 15000,
            "auto.commit.interval.ms": 500}
    if assignor == "consumer":  # KIP-848: the broker assigns and sets the session and heartbeats
        for key in ("partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms"):
            del conf[key]
        conf["group.protocol"] = "consumer"
    if client == "kwire":
        from kwire.consumer import Consumer
        group_apis = {"JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "FindCoordinator",
                      "ConsumerGroupHeartbeat"}

        def trace(ev):  # group traffic, for reading a failed run
            if ev["api"] in group_apis:
                b = ev.get("body") or {}
                log("T", ev["direction"], ev["api"], ev["node_id"], b.get("error_code", ""),
                    b.get("generation_id", b.get("member_epoch", "")), (b.get("member_id") or "")[-8:],
                    len(b.get("members") or ()) if ev["api"] == "JoinGroup" else "")
        c = Consumer({**conf, "fetch.wait.max.ms": 100}, tracer=trace)
        take = lambda: c.consume(500, timeout=0.1)  # noqa: E731
    else:
        from confluent_kafka import Consumer
        c = Consumer({**conf, "fetch.wait.max.ms": 100, "enable.metrics.push": False})
        take = lambda: c.consume(500, timeout=0.1)  # noqa: E731

    def assigned(_c, parts):
        log("A", *(p.partition for p in parts))

    dirty = []  # records handed out since the last manual commit

    def revoked(_c, parts):
        if commit == "manual" and parts and dirty:
            try:
                c.commit(asynchronous=False)
            except Exception as e:  # nothing consumed yet, or the group moved on
                log("E", type(e).__name__, str(e).replace("\n", " ")[:200])
        log("V", *(p.partition for p in parts))

    c.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=lambda _c, parts: log("V", *(p.partition for p in parts)))
    try:
        while not stop:
            try:
                recs = take()
            except Exception as e:
                log("E", type(e).__name__, str(e).replace("\n", " ")[:200])
                continue
            got = []
            for r in recs:
                if client == "confluent" and r.error():
                    log("E", r.error().name())
                    continue
                got.append(f"{r.partition()}:{r.offset()}" if client == "confluent" else f"{r.partition}:{r.offset}")
            if got:
                log("R", *got)
                dirty[:] = [1]
                if commit == "manual":
                    try:
                        c.commit(asynchronous=False)
                        dirty.clear()
                    except Exception as e:
                        log("E", type(e).__name__, str(e).replace("\n", " ")[:200])
    finally:
        c.close()
        log("X")
        out.close()


if __name__ == "__main__":
    main(*sys.argv[1:8])
