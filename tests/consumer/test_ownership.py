"""A member hands out records and commits only for partitions it owns (issue 14, defect 1).

When the group takes partitions away (revoked in a rebalance, lost after max.poll.interval.ms
or a fenced generation), the records of them already buffered must not reach the application
any more, the callbacks must run before the next record, commits for them must fail, and a
max.poll.interval expiry is reported to the application (librdkafka's _MAX_POLL_EXCEEDED).
On Apache Kafka: the broker decides the rebalance and accepts or refuses the commits.
"""
from __future__ import annotations

import threading
import time

import pytest

from kwire import TopicPartition
from kwire.consumer.coordinator import MemberState
from kwire.errors import MaxPollIntervalExceededError, NotAssignedError

from .test_consumer_integration import GROUP, kconsumer, produce

PER_PARTITION = 3000


def _fill(kafka, topic, create_topic):
    create_topic(kafka, topic, 2)
    for p in (0, 1):
        produce(kafka, topic, [b"%d-%05d" % (p, i) + b"x" * 100 for i in range(PER_PARTITION)],
                partition=p)


class _Member:
    """A consumer whose callbacks and records go into one ordered log."""

    def __init__(self, kafka, group, topic, **cfg):
        self.log: list = []
        self.c = kconsumer(kafka, **{"group.id": group}, **GROUP, **cfg)
        self.c.subscribe([topic], on_assign=self._cb("assign"), on_revoke=self._cb("revoke"),
                         on_lost=self._cb("lost"))

    def _cb(self, kind):
        def cb(_c, parts):
            self.log.append((kind, sorted((tp.topic, tp.partition) for tp in parts)))
        return cb

    def consume(self, n=100, timeout=0.05):
        try:
            recs = self.c.consume(n, timeout=timeout)
        except MaxPollIntervalExceededError as exc:
            self.log.append(("error", exc))
            return []
        for r in recs:
            self.log.append(("record", (r.topic, r.partition)))
        return recs

    def owned_check(self):
        """Every record came from a partition owned (per the callbacks) when it was handed out."""
        owned: set = set()
        for kind, what in self.log:
            if kind == "assign":
                owned |= set(what)
            elif kind in ("revoke", "lost"):
                owned -= set(what)
            elif kind == "record":
                assert what in owned, f"record of {what} handed out while not owned: {self.log_summary()}"

    def log_summary(self):
        out = []
        for kind, what in self.log:
            if out and kind == "record" and out[-1][0] == "record" and out[-1][1] == what:
                out[-1] = ("record", what, out[-1][2] + 1)
            elif kind == "record":
                out.append(("record", what, 1))
            else:
                out.append((kind, what))
        return [(o[0], [x[1] for x in o[1]] if isinstance(o[1], list) else o[1]) + o[2:] for o in out[:30]]


def _wait(cond, what, timeout_s=90.0, step=None):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if step is not None:
            step()
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"not reached: {what}")


def test_lost_partitions_records_dropped_commit_refused_max_poll_reported(kafka, unique_topic,
                                                                         create_topic):
    """Member A stalls with a full buffer while B joins (a revocation is asked for and never
    answered), then max.poll.interval.ms expires: A's partitions are lost.  When A comes back:
    a commit for them fails with NotAssignedError; the first consume() runs on_lost (not
    on_revoke too) before any record, then raises MaxPollIntervalExceededError; A never hands
    out a record of a partition it does not own."""
    _fill(kafka, unique_topic, create_topic)
    group = f"g-{unique_topic}"
    a = _Member(kafka, group, unique_topic, **{"max.poll.interval.ms": 4000})
    b = None
    stop = threading.Event()
    try:
        _wait(lambda: a.consume(1, timeout=0.2), "A's first record")
        # A has both partitions and a buffer full of their records; now A stalls.
        b = _Member(kafka, group, unique_topic)
        b_recs: list = []

        def run_b():
            while not stop.is_set():
                b_recs.extend(b.consume())

        tb = threading.Thread(target=run_b, daemon=True)
        tb.start()
        # B can only be given partitions once A is out of the group (A never acks the revoke;
        # the broker waits for it until A's max.poll.interval.ms makes it leave).
        _wait(lambda: {r.partition for r in b_recs} == {0, 1}, "B consuming both partitions")

        # A's driver lost them (B has them): assignment() says so before A's next poll
        assert a.c.assignment() == []
        with pytest.raises(NotAssignedError):
            a.c.commit(offsets=[TopicPartition(unique_topic, 0, 5)], asynchronous=False)
        with pytest.raises(NotAssignedError):
            a.c.commit(asynchronous=False)  # the positions of what A handed out, lost too

        before = len(a.log)
        _wait(lambda: any(k == "error" for k, _ in a.log[before:]), "the max.poll error",
              step=lambda: a.consume())
        after = a.log[before:]
        first_error = next(i for i, (k, _) in enumerate(after) if k == "error")
        assert [k for k, _ in after[:first_error]] == ["lost"], (before, a.log_summary())
        assert after[0][1] == [(unique_topic, 0), (unique_topic, 1)]
        assert not any(k == "revoke" for k, _ in a.log), a.log_summary()
        # A rejoins and goes on consuming what it is given, nothing else.
        _wait(lambda: any(k == "assign" and w for k, w in a.log[before + first_error:]),
              "A assigned again", step=lambda: a.consume())
        a.owned_check()
    finally:
        stop.set()
        a.c.close()
        if b is not None:
            tb.join(10)
            b.c.close()


def test_revoked_partitions_buffered_records_are_dropped(kafka, unique_topic, create_topic):
    """Once A's member state machine has revoked its partitions (B joined; eager protocol), the
    next consume() runs on_revoke before handing out any record, although A's buffer still
    holds records of them."""
    _fill(kafka, unique_topic, create_topic)
    group = f"g-{unique_topic}"
    a = _Member(kafka, group, unique_topic)
    b = None
    stop = threading.Event()
    try:
        _wait(lambda: a.consume(1, timeout=0.2), "A's first record")
        b = _Member(kafka, group, unique_topic)

        def run_b():
            while not stop.is_set():
                b.consume()

        tb = threading.Thread(target=run_b, daemon=True)
        tb.start()
        # A's driver heard of the rebalance (heartbeat) and asked the application to revoke.
        _wait(lambda: a.c._coord.state is MemberState.PREPARING, "A revoking")
        before = len(a.log)
        _wait(lambda: len(a.log) > before, "A's next event", step=lambda: a.consume())
        assert a.log[before][0] == "revoke", a.log_summary()
        _wait(lambda: any(k == "assign" for k, _ in a.log[before:]), "A assigned again",
              step=lambda: a.consume())
        a.owned_check()
    finally:
        stop.set()
        a.c.close()
        if b is not None:
            tb.join(10)
            b.c.close()
