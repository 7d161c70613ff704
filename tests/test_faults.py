"""Surviving a bad network: a TCP proxy between kwire and the broker drops, stalls, cuts and
slows connections; a broker restarts on storage that outlives it; a group coordinator moves.

Each test checks the delivery contract, not just "no exception": every record produced is in
the log (at least once; a repeat only where a response was lost -- the at-least-once window),
a consumer reading by offset sees every offset exactly once, in order.
"""
from __future__ import annotations

import random
import time
from collections import Counter

import confluent_kafka
import pytest

import kwire
from kwire.consumer import Consumer, TopicPartition
from kwire.errors import KafkaConnectionError, KafkaTimeoutError
from kwire.net import NetworkClient
from kwire.net.client import GROUP_NODE_BASE

from .mock_control import ControlledMockCluster
from .tansu_util import ProxiedTansu, S3Server


def _md(v):
    return {"topics": None, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}


def _val(r):
    v = r.value
    return v() if callable(v) else v


def _create(bootstrap, topic, partitions):
    with kwire.Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([(topic, partitions, 1)], timeout=10, wait_for_leaders=True)


def _read_all(bootstrap, topic, partitions, n, timeout_s=30.0, idle_s=1.0, **cfg):
    """Every record of ``topic`` read by offset (no group): {partition: [values in offset order]}.

    Reads until ``n`` distinct values were seen and then ``idle_s`` passed with nothing new (to
    catch trailing repeats).  (Tansu 0.6.0's ListOffsets(latest) is no guide: it answers offsets
    below what Fetch returns, e.g. 1 for a partition of 200 records.)"""
    out: dict[int, list] = {p: [] for p in range(partitions)}
    offsets: dict[int, list] = {p: [] for p in range(partitions)}
    distinct: set = set()
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", **cfg}) as c:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        end = time.monotonic() + timeout_s
        last_new = time.monotonic()
        while time.monotonic() < end and (len(distinct) < n or time.monotonic() - last_new < idle_s):
            for r in c.consume(500, timeout=0.1):
                out[r.partition].append(_val(r))
                offsets[r.partition].append(r.offset)
                distinct.add(_val(r))
                last_new = time.monotonic()
    for p in range(partitions):
        assert offsets[p] == list(range(len(offsets[p]))), f"partition {p}: a gap or a repeat in offsets"
    return out


def _check_at_least_once(per_partition: dict, n: int, max_repeats: int):
    """Values are b"<seq>"; each seq must appear, in increasing first-appearance order per key's
    partition; repeats bounded."""
    seen = Counter()
    for p, values in per_partition.items():
        firsts = []
        for v in values:
            seq = int(v)
            if seen[seq] == 0:
                firsts.append(seq)
            seen[seq] += 1
        assert firsts == sorted(firsts), f"partition {p}: records out of order"
    missing = [i for i in range(n) if seen[i] == 0]
    assert not missing, f"lost {len(missing)} records, e.g. {missing[:10]}"
    repeats = sum(c - 1 for c in seen.values())
    assert repeats <= max_repeats, f"{repeats} repeats, more than the at-least-once window allows"
    return repeats


# --- NetworkClient ------------------------------------------------------------------------------

@pytest.fixture
def proxied():
    with ProxiedTansu() as t:
        yield t


def test_slow_link_delivers_frames_in_pieces(proxied, unique_topic):
    _create(proxied.bootstrap, unique_topic, 1)
    proxied.proxy.slow(chunk_bytes=7)  # every frame arrives in 7-byte reads, both ways
    errors = []
    with kwire.Producer({"bootstrap.servers": proxied.bootstrap, "linger.ms": 2}) as p:
        for i in range(200):
            p.produce(unique_topic, b"%d" % i, partition=0, on_delivery=lambda e, m: e and errors.append(e))
        assert p.flush(30) == 0
    assert not errors
    proxied.proxy.slow(chunk_bytes=3)
    got = _read_all(proxied.bootstrap, unique_topic, 1, 200)
    assert [int(v) for v in got[0]] == list(range(200))


def test_stalled_path_times_out_then_recovers(proxied):
    with NetworkClient({"bootstrap.servers": proxied.bootstrap, "request.timeout.ms": 1000,
                        "reconnect.backoff.ms": 20}, auto_metadata=False) as c:
        assert c.request(None, "Metadata", _md, 5000)["brokers"]
        proxied.proxy.paused = True
        start = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            c.request(None, "Metadata", _md, 1000)
        assert time.monotonic() - start < 3
        # the silent connection is declared dead after request.timeout.ms without an answer
        end = time.monotonic() + 5
        while c.is_ready(-1) and time.monotonic() < end:
            c.poll(50)
        assert not c.is_ready(-1)
        proxied.proxy.paused = False
        assert c.request(None, "Metadata", _md, 5000)["brokers"]


def test_connection_swallowed_by_a_passing_blackhole_recovers_before_the_setup_timeout(proxied):
    """A connection made while the path swallowed everything (accepted, never answered) is
    given up once it makes no progress for socket.connection.setup.stall.ms, not after the whole
    socket.connection.setup.timeout.ms (30 s here): a request made during a 1 s blackhole is
    answered within its 15 s timeout."""
    with NetworkClient({"bootstrap.servers": proxied.bootstrap, "reconnect.backoff.ms": 100},
                       auto_metadata=False) as c:
        assert c.request(None, "Metadata", _md, 5000)["brokers"]
        proxied.proxy.blackhole = True
        proxied.proxy.drop_all()
        end = time.monotonic() + 5
        while any(c.is_ready(n) for n in (-1, *c.metadata.brokers)) and time.monotonic() < end:
            c.poll(50)
        f = c.send(None, "Metadata", _md, timeout_ms=15000)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            c.poll(50)
        assert proxied.proxy.accepted >= 2  # reconnected into the blackhole
        proxied.proxy.blackhole = False
        c.wait(f)
        assert f.error is None, f.error
        assert f.response["brokers"]


def test_group_commits_recover_soon_after_a_blackhole(proxied, unique_topic):
    """A group member's connections are cut and its reconnections swallowed for a second:
    coordinator rediscovery and the commit recover within the commit's own timeout
    (request.timeout.ms 15 s, half the connection setup timeout)."""
    _create(proxied.bootstrap, unique_topic, 1)
    with kwire.Producer({"bootstrap.servers": proxied.bootstrap}) as p:
        for i in range(10):
            p.produce(unique_topic, b"%d" % i, partition=0)
        assert p.flush(30) == 0
    cfg = {"bootstrap.servers": proxied.bootstrap, "group.id": f"g-{unique_topic}",
           "auto.offset.reset": "earliest", "enable.auto.commit": False,
           "session.timeout.ms": 45000, "heartbeat.interval.ms": 1000, "request.timeout.ms": 15000}
    with Consumer(cfg) as c:
        c.subscribe([unique_topic])
        got = []
        end = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < end:
            got.extend(c.consume(10, timeout=0.2))
        assert len(got) == 10
        c.commit(asynchronous=False)
        proxied.proxy.blackhole = True
        proxied.proxy.drop_all()
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            c.consume(10, timeout=0.1)
        proxied.proxy.blackhole = False
        res = c.commit(offsets=[TopicPartition(unique_topic, 0, 10)], asynchronous=False)
        assert res[0].offset == 10


def test_dropped_connections_fail_in_flight_requests_then_reconnect(proxied):
    with NetworkClient({"bootstrap.servers": proxied.bootstrap, "reconnect.backoff.ms": 20},
                       auto_metadata=False) as c:
        for round_ in range(5):
            fs = [c.send(None, "Metadata", _md, timeout_ms=5000) for _ in range(20)]
            c.poll(0)
            proxied.proxy.drop_all()
            for f in fs:
                c.wait(f)
            assert all(f.error is None or isinstance(f.error, KafkaConnectionError) for f in fs)
            assert c.request(None, "Metadata", _md, 5000)["brokers"], round_
        assert proxied.proxy.accepted >= 5


# --- Producer -----------------------------------------------------------------------------------

def test_producer_survives_drops_cuts_and_stalls(proxied, unique_topic):
    partitions, n = 2, 3000
    _create(proxied.bootstrap, unique_topic, partitions)
    rng = random.Random(7)
    errors, faults = [], 0
    cfg = {"bootstrap.servers": proxied.bootstrap, "linger.ms": 2, "batch.num.messages": 50,
           "retry.backoff.ms": 20, "reconnect.backoff.ms": 20, "request.timeout.ms": 2000}
    with kwire.Producer(cfg) as p:
        for i in range(n):
            p.produce(unique_topic, b"%d" % i, key=b"k%d" % (i % 7), on_delivery=lambda e, m: e and errors.append(e))
            if i % 250 == 125:
                fault = rng.choice(["drop", "cut", "stall"])
                faults += 1
                if fault == "drop":
                    proxied.proxy.drop_all()
                elif fault == "cut":
                    proxied.proxy.cut_next_response(after_bytes=rng.randrange(1, 40))
                else:
                    proxied.proxy.paused = True
                    p.poll(0.3)
                    proxied.proxy.paused = False
            p.poll(0)
        assert p.flush(60) == 0
    assert not errors, errors[:3]
    got = _read_all(proxied.bootstrap, unique_topic, partitions, n)
    # a lost response makes the producer send a batch again: at most one batch (50) per fault
    repeats = _check_at_least_once(got, n, max_repeats=faults * 50 * partitions)
    print(f"faults={faults} connections={proxied.proxy.accepted} cuts={proxied.proxy.cuts} repeats={repeats}")
    assert proxied.proxy.accepted >= 4 and proxied.proxy.cuts >= 1  # it did reconnect


# --- Consumer -----------------------------------------------------------------------------------

def test_consumer_resumes_its_position_through_faults(proxied, unique_topic):
    # Values of ~120 B: the 4000 records take ~30 Fetch answers of at most 16 KB, so however
    # fast the consumer runs, answers are still to come when each fault is armed (with
    # 5-byte values everything was fetched in three answers, and under load the armed cut
    # could find no answer left to cut).
    partitions, n = 2, 4000
    pad = b"." * 120
    _create(proxied.bootstrap, unique_topic, partitions)
    p = confluent_kafka.Producer({"bootstrap.servers": proxied.bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(unique_topic, b"%d " % i + pad, partition=i % partitions)
    assert p.flush(30) == 0
    got: dict[int, list] = {0: [], 1: []}
    offsets: dict[int, list] = {0: [], 1: []}
    faults = ["cut", "drop", "stall", "slow", "drop"]
    cfg = {"bootstrap.servers": proxied.bootstrap, "auto.offset.reset": "earliest", "fetch.max.bytes": 20000,
           "max.partition.fetch.bytes": 8000, "reconnect.backoff.ms": 20, "retry.backoff.ms": 20,
           "request.timeout.ms": 2000, "queued.max.messages.kbytes": 1}  # fetch as we go, not all ahead
    with Consumer(cfg) as c:
        c.assign([TopicPartition(unique_topic, q, 0) for q in range(partitions)])
        end = time.monotonic() + 60
        total = 0
        while total < n and time.monotonic() < end:
            batch = c.consume(200, timeout=0.2)
            for r in batch:
                got[r.partition].append(int(_val(r).split()[0]))
                offsets[r.partition].append(r.offset)
            total += len(batch)
            if faults and total > (6 - len(faults)) * 300:
                fault = faults.pop(0)
                if fault == "drop":
                    proxied.proxy.drop_all()
                elif fault == "cut":
                    proxied.proxy.cut_next_response(after_bytes=500)
                elif fault == "stall":
                    proxied.proxy.paused = True
                    time.sleep(0.5)
                    proxied.proxy.paused = False
                else:
                    proxied.proxy.slow(chunk_bytes=97)
        assert not faults
        print(f"connections={proxied.proxy.accepted} cuts={proxied.proxy.cuts}")
        assert proxied.proxy.accepted >= 3 and proxied.proxy.cuts >= 1
    for q in range(partitions):
        assert offsets[q] == list(range(n // partitions)), f"partition {q}: a gap or a repeat"
        assert got[q] == list(range(q, n, partitions))


# --- a broker restart ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server


def test_broker_restart_loses_nothing(s3, unique_topic):
    """Tansu on S3 storage (moto) restarts mid-stream: the producer and a group consumer
    reconnect; what was acknowledged before survives, the consumer resumes from its committed
    offset, and what is produced after goes on from the same offsets."""
    group = unique_topic + "-g"
    with ProxiedTansu(storage=s3.storage, env=s3.env) as t:
        _create(t.bootstrap, unique_topic, 1)
        errors = []
        pcfg = {"bootstrap.servers": t.bootstrap, "linger.ms": 2, "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 50, "request.timeout.ms": 3000}
        ccfg = {"bootstrap.servers": t.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                "reconnect.backoff.ms": 50, "retry.backoff.ms": 50}
        with kwire.Producer(pcfg) as p:
            for i in range(300):
                p.produce(unique_topic, b"%d" % i, partition=0, on_delivery=lambda e, m: e and errors.append(e))
            assert p.flush(20) == 0
            first = []
            with Consumer(ccfg) as c:
                c.subscribe([unique_topic])
                end = time.monotonic() + 30
                while len(first) < 150 and time.monotonic() < end:
                    first.extend(c.consume(150 - len(first), timeout=0.2))
                assert len(first) == 150
                c.commit(asynchronous=False)

            t.restart()

            for i in range(300, 600):
                p.produce(unique_topic, b"%d" % i, partition=0, on_delivery=lambda e, m: e and errors.append(e))
            assert p.flush(60) == 0, t.log_tail()
        assert not errors, errors[:3]
        rest = []
        with Consumer(ccfg) as c:
            c.subscribe([unique_topic])
            end = time.monotonic() + 40
            while len(rest) < 450 and time.monotonic() < end:
                rest.extend(c.consume(500, timeout=0.2))
        assert [r.offset for r in first] == list(range(150))
        assert [r.offset for r in rest] == list(range(150, 600)), "did not resume from the committed offset"
        assert [int(_val(r)) for r in first + rest] == list(range(600))


# --- a coordinator move ---------------------------------------------------------------------------

FIND_COORDINATOR, HEARTBEAT, OFFSET_COMMIT = 10, 12, 8
NOT_COORDINATOR = 16


def test_group_coordinator_move_is_rediscovered(unique_topic):
    """librdkafka's mock cluster, driven through its C API (rd_kafka_mock_coordinator_set,
    rd_kafka_mock_push_request_errors via ctypes): the group's coordinator moves to another
    broker and the old one answers NOT_COORDINATOR; the consumer finds the new one, keeps its
    assignment and position, and its commits land."""
    group = unique_topic + "-g"
    with ControlledMockCluster(3) as mc:
        n = 400
        p = confluent_kafka.Producer({"bootstrap.servers": mc.bootstrap, "linger.ms": 5})
        for i in range(n):
            p.produce(unique_topic, b"%d" % i, partition=0)
        assert p.flush(20) == 0
        events = []
        cfg = {"bootstrap.servers": mc.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
               "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
               "max.partition.fetch.bytes": 2000, "retry.backoff.ms": 50}
        got = []
        with Consumer(cfg, tracer=events.append) as c:
            c.subscribe([unique_topic])
            end = time.monotonic() + 30
            while len(got) < n // 2 and time.monotonic() < end:
                got.extend(c.consume(50, timeout=0.2))
            c.commit(asynchronous=False)
            coordinators = [e["body"].get("node_id", None) if "node_id" in e["body"] else
                            (e["body"].get("coordinators") or [{}])[0].get("node_id")
                            for e in events if e["api"] == "FindCoordinator" and e["direction"] == "recv"]
            old = coordinators[-1]
            new = next(b for b in (1, 2, 3) if b != old)
            finds_before = len(coordinators)
            mc.set_coordinator(group, new)
            mc.push_request_errors(HEARTBEAT, NOT_COORDINATOR, 2)
            mc.push_request_errors(OFFSET_COMMIT, NOT_COORDINATOR, 1)
            end = time.monotonic() + 40
            while len(got) < n and time.monotonic() < end:
                got.extend(c.consume(50, timeout=0.2))
            c.commit(asynchronous=False)
            finds = [e for e in events if e["api"] == "FindCoordinator" and e["direction"] == "recv"]
            assert len(finds) > finds_before, "the coordinator was never looked up again"
            # on the new coordinator's ordinary connection or its own (group) connection
            commits_to_new = [e for e in events if e["api"] == "OffsetCommit" and e["direction"] == "recv"
                              and e["node_id"] in (new, GROUP_NODE_BASE - new)]
            assert commits_to_new, "no commit reached the new coordinator"
            committed = c.committed([TopicPartition(unique_topic, 0)], timeout=10)
            assert committed[0].offset == n
        assert [r.offset for r in got] == list(range(n))


PRODUCE = 0
METADATA = 3
NOT_LEADER_OR_FOLLOWER = 6


def test_produce_retry_after_not_leader_waits_for_fresh_metadata(unique_topic):
    """librdkafka's mock cluster answers the next Produce requests with
    NOT_LEADER_OR_FOLLOWER six times (rd_kafka_mock_push_request_errors): every retry is sent only after
    a Metadata answer that came in after the failure, and the records land once, in order."""
    with ControlledMockCluster(3) as mc:
        warm = confluent_kafka.Producer({"bootstrap.servers": mc.bootstrap})
        warm.produce(unique_topic, b"first", partition=0)
        assert warm.flush(20) == 0
        events = []
        reports = []
        with kwire.Producer({"bootstrap.servers": mc.bootstrap, "retry.backoff.ms": 20, "linger.ms": 0},
                      tracer=events.append) as p:
            p.produce(unique_topic, b"warm-up", partition=0)        # metadata and connections
            assert p.flush(20) == 0
            mc.push_request_errors(PRODUCE, NOT_LEADER_OR_FOLLOWER, 6)
            start = len(events)
            for i in range(3):
                p.produce(unique_topic, b"v%d" % i, partition=0,
                          on_delivery=lambda err, m: reports.append((err, m.offset(), m.value())))
            assert p.flush(20) == 0
        assert [(e, v) for e, _, v in reports] == [(None, b"v0"), (None, b"v1"), (None, b"v2")]
        offsets = [o for _, o, _ in reports]
        assert offsets == list(range(offsets[0], offsets[0] + 3)) and offsets[0] >= 2
        seen = [(e["direction"], e["api"], e["body"]) for e in events[start:]
                if e["api"] in ("Produce", "Metadata")]
        produce_answers = [b for d, a, b in seen if d == "recv" and a == "Produce"]
        codes = [p["error_code"] for b in produce_answers for t in b["responses"]
                 for p in t["partition_responses"]]
        assert codes[:6] == [NOT_LEADER_OR_FOLLOWER] * 6 and codes[-1] == 0
        # after each failed answer, a Metadata answer comes before the next Produce is sent
        failed = False
        for d, a, b in seen:
            if a == "Produce" and d == "recv":
                failed = any(p["error_code"] for t in b["responses"] for p in t["partition_responses"])
            elif a == "Metadata" and d == "recv":
                failed = False
            elif a == "Produce" and d == "send":
                assert not failed, "a Produce retry went out before fresh metadata arrived"
