"""kwire.Consumer against the real peers: Tansu and librdkafka's mock cluster.

Group timing: both peers answer the first JoinGroup after a delay (Tansu: about half the
session timeout; the mock: 3 s, and it drops members whose session is shorter), so groups
here use session.timeout.ms=3000 and heartbeats every 300 ms.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time

import confluent_kafka
import pytest

import kwire
from kwire import TopicPartition
from kwire.consumer import OFFSET_BEGINNING, OFFSET_END, Consumer
from kwire.embedded import free_port, tansu_binary, wait_for_port
from kwire.errors import NoOffsetForPartitionError

GROUP = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 300}


# The interop tests run on the last 3.x release as well (older API versions, classic groups only).
@pytest.fixture(params=["kafka", "kafka39", "tansu", "mock_cluster"])
def broker(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(params=["kafka", "kafka39", "tansu"])
def peer(request):
    return request.getfixturevalue(request.param)


def kconsumer(peer, **cfg):
    base = {"bootstrap.servers": peer.bootstrap, "auto.offset.reset": "earliest"}
    base.update(cfg)
    return Consumer(base)


def produce(peer, topic, values, *, partition=None, compression="none", headers=None, keys=None,
            timestamps=None, one_per_batch=False):
    """Produce with confluent-kafka.  ``one_per_batch``: a batch per record (Tansu's ListOffsets
    answers "latest" with the last batch's base offset + 1, right only for such batches)."""
    p = confluent_kafka.Producer({"bootstrap.servers": peer.bootstrap, "compression.type": compression,
                                  "linger.ms": 0 if one_per_batch else 5})
    for i, v in enumerate(values):
        kw = {}
        if partition is not None:
            kw["partition"] = partition
        if headers is not None:
            kw["headers"] = headers(i)
        if keys is not None:
            kw["key"] = keys(i)
        if timestamps is not None:
            kw["timestamp"] = timestamps(i)
        p.produce(topic, value=v, **kw)
        if one_per_batch:
            p.flush(20)
    assert p.flush(20) == 0


def confluent_consumer(peer, **cfg):
    return confluent_kafka.Consumer({"bootstrap.servers": peer.bootstrap, "group.id": "probe", **cfg})


def drain(c, n, timeout_s=20.0, batch=500):
    out = []
    end = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < end:
        out.extend(c.consume(min(batch, n - len(out)), timeout=0.2))
    return out


def poll_all(consumers, until, timeout_s=30.0, sink=None):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for c in consumers:
            for r in c.consume(100, timeout=0.02):
                # A consumer hands out records only of partitions it owns at that moment.
                assert (r.topic, r.partition) in assigned(c), f"record of an unowned partition: {r}"
                if sink is not None:
                    sink.append((c, r))
        if until():
            return
    raise AssertionError("condition not met in time")


def assigned(c):
    return {(tp.topic, tp.partition) for tp in c.assignment()}


# --- records -------------------------------------------------------------------------------------

@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_reads_what_confluent_kafka_produced(broker, unique_topic, create_topic, compression):
    create_topic(broker, unique_topic, 1)
    n = 300
    produce(broker, unique_topic, [b"value-%d" % i * (i % 5 + 1) for i in range(n)], partition=0,
            compression=compression, keys=lambda i: None if i % 7 == 0 else b"k%d" % i,
            headers=lambda i: [("h", b"x%d" % i), ("empty", b""), ("none", None)] if i % 2 else [],
            timestamps=lambda i: 1_700_000_000_000 + i)
    with kconsumer(broker) as c:
        c.assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
        recs = drain(c, n)
    assert [r.offset for r in recs] == list(range(n))
    for i, r in enumerate(recs):
        assert r.value == b"value-%d" % i * (i % 5 + 1)
        assert r.key == (None if i % 7 == 0 else b"k%d" % i)
        assert r.timestamp == 1_700_000_000_000 + i
        want = [("h", b"x%d" % i), ("empty", b""), ("none", None)] if i % 2 else []
        assert list(r.headers) == want
        assert r.topic == unique_topic and r.partition == 0


# --- groups --------------------------------------------------------------------------------------

def test_two_members_split_then_one_takes_all(broker, unique_topic, create_topic):
    parts = create_topic(broker, unique_topic, 4)
    produce(broker, unique_topic, [b"a%d" % i for i in range(200)], keys=lambda i: b"%d" % i)
    group = f"g-{unique_topic}"
    c1 = kconsumer(broker, **{"group.id": group}, **GROUP)
    c2 = kconsumer(broker, **{"group.id": group}, **GROUP)
    c1.subscribe([unique_topic])
    c2.subscribe([unique_topic])
    got = []
    try:
        def split():
            a, b = assigned(c1), assigned(c2)
            assert not (a & b), f"overlap {a & b}"
            return a and b and len(a | b) == parts
        poll_all([c1, c2], split, sink=got)
        assert len(assigned(c1)) == len(assigned(c2)) == parts // 2
        poll_all([c1, c2], lambda: len({r.value for _, r in got}) >= 200, sink=got)
        # poll_all checked that each record came from a partition its reader owned then; once
        # split, nobody reads a partition the other one owns.
        split_at = len(got)
        poll_all([c1, c2], lambda: True, sink=got)
        for c, r in got[split_at:]:
            other = c2 if c is c1 else c1
            assert (r.topic, r.partition) not in assigned(other)
        c2.close()
        poll_all([c1], lambda: len(assigned(c1)) == parts)
        produce(broker, unique_topic, [b"b%d" % i for i in range(40)], keys=lambda i: b"%d" % i)
        later = []
        poll_all([c1], lambda: {r.value for _, r in later} >= {b"b%d" % i for i in range(40)},
                 sink=later)
        # At least once: c1 may re-read records of its own partitions whose revoke-time commit
        # the peer refused (librdkafka's mock rejects commits while the group is joining).
        assert {r.partition for _, r in later if r.value.startswith(b"b")} == set(range(parts))
    finally:
        c1.close()
        c2.close()


def test_kwire_and_confluent_kafka_share_a_group(broker, unique_topic, create_topic):
    parts = create_topic(broker, unique_topic, 4)
    group = f"g-{unique_topic}"
    kc = kconsumer(broker, **{"group.id": group, "partition.assignment.strategy": "range"}, **GROUP)
    cc = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                   "partition.assignment.strategy": "range",
                                   "session.timeout.ms": 3000, "heartbeat.interval.ms": 300,
                                   "auto.offset.reset": "earliest"})
    kc.subscribe([unique_topic])
    cc.subscribe([unique_topic])
    try:
        end = time.monotonic() + 40
        while time.monotonic() < end:
            kc.poll(0.02)
            cc.poll(0.02)
            a = assigned(kc)
            b = {(tp.topic, tp.partition) for tp in cc.assignment()}
            assert not (a & b), f"overlap {a & b}"
            if a and b and len(a | b) == parts:
                break
        else:
            raise AssertionError(f"no split: kwire {assigned(kc)} confluent {cc.assignment()}")
        produce(broker, unique_topic, [b"%d" % i for i in range(100)], keys=lambda i: b"%d" % i)
        seen_k, seen_c = [], []
        end = time.monotonic() + 20
        while len(seen_k) + len(seen_c) < 100 and time.monotonic() < end:
            seen_k += kc.consume(100, timeout=0.05)
            m = cc.poll(0.05)
            if m is not None and not m.error():
                seen_c.append(m)
        assert len(seen_k) + len(seen_c) == 100
        assert {r.partition for r in seen_k} <= {p for _, p in assigned(kc)}
        assert {m.partition() for m in seen_c}.isdisjoint({r.partition for r in seen_k})
    finally:
        kc.close()
        cc.close()


def test_cooperative_sticky_moves_only_what_must_move(broker, unique_topic, create_topic):
    parts = create_topic(broker, unique_topic, 4)
    group = f"g-{unique_topic}"
    cfg = {"group.id": group, "partition.assignment.strategy": "cooperative-sticky", **GROUP}
    revoked = []
    a = kconsumer(broker, **cfg)
    b = kconsumer(broker, **cfg)
    try:
        a.subscribe([unique_topic], on_revoke=lambda c, ps: revoked.append([p.partition for p in ps]))
        poll_all([a], lambda: len(assigned(a)) == parts)
        b.subscribe([unique_topic])

        def balanced():
            x, y = assigned(a), assigned(b)
            assert not (x & y), f"overlap {x & y}"
            return len(x) == len(y) == parts // 2
        poll_all([a, b], balanced, timeout_s=40)
        # incremental: a revoked exactly the partitions b took, never its whole assignment
        assert sorted(p for r in revoked for p in r) == sorted(p for _, p in assigned(b))
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("auto_commit", [False, True])
def test_commit_close_restart_resumes(broker, unique_topic, create_topic, auto_commit):
    create_topic(broker, unique_topic, 1)
    produce(broker, unique_topic, [b"%d" % i for i in range(100)], partition=0)
    group = f"g-{unique_topic}"
    cfg = {"group.id": group, "enable.auto.commit": auto_commit, **GROUP}
    with kconsumer(broker, **cfg) as c:
        c.subscribe([unique_topic])
        first = []
        while len(first) < 40:
            r = c.poll(10)
            assert r is not None
            first.append(r)
        if not auto_commit:
            committed = c.commit(asynchronous=False)
            assert [(tp.partition, tp.offset) for tp in committed] == [(0, 40)]
    with kconsumer(broker, **cfg) as c:
        c.subscribe([unique_topic])
        rest = drain(c, 60)
        assert c.committed([TopicPartition(unique_topic, 0)], timeout=10)[0].offset == 40
        time.sleep(0.3)
        assert c.poll(0.2) is None
    assert [r.offset for r in first] == list(range(40))
    assert [r.offset for r in rest] == list(range(40, 100))


# --- positions ------------------------------------------------------------------------------------

def test_seek_position_and_watermarks(broker, unique_topic, create_topic):
    create_topic(broker, unique_topic, 1)
    produce(broker, unique_topic, [b"%d" % i for i in range(50)], partition=0, one_per_batch=True)
    tp = TopicPartition(unique_topic, 0)
    with kconsumer(broker) as c:
        c.assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
        assert [r.offset for r in drain(c, 10, batch=10)] == list(range(10))
        assert c.position([tp])[0].offset == 10
        c.seek(TopicPartition(unique_topic, 0, 3))
        assert c.position([tp])[0].offset == 3
        assert c.poll(10).offset == 3
        c.seek(TopicPartition(unique_topic, 0, 45))
        assert [r.offset for r in drain(c, 5)] == [45, 46, 47, 48, 49]
        assert c.get_watermark_offsets(tp, timeout=10) == (0, 50)
        assert c.get_watermark_offsets(tp, cached=True) == (0, 50)
        c.seek(TopicPartition(unique_topic, 0, OFFSET_BEGINNING))
        assert c.poll(10).offset == 0
        c.seek(TopicPartition(unique_topic, 0, OFFSET_END))
        assert c.poll(0.5) is None
        # (the end is looked up asynchronously: a record produced before the look-up answers
        # would be behind the end it finds -- wait until the position is the end)
        deadline = time.monotonic() + 10
        while c.position([tp])[0].offset != 50 and time.monotonic() < deadline:
            assert c.poll(0.1) is None
        assert c.position([tp])[0].offset == 50
        produce(broker, unique_topic, [b"after-end"], partition=0)
        assert c.poll(10).value == b"after-end"


def test_a_bad_assign_changes_nothing(broker, unique_topic, create_topic):
    """assign() checks every partition before it moves any: a bad offset or leader epoch is a
    TypeError, and the partitions it named first are neither moved nor left waiting."""
    create_topic(broker, unique_topic, 2)
    for p in range(2):
        produce(broker, unique_topic, [b"%d-%d" % (p, i) for i in range(20)], partition=p)
    with kconsumer(broker) as c:
        c.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(2)])
        first = drain(c, 4, batch=4)
        assert len(first) == 4
        for bad in (TopicPartition(unique_topic, 1, "5"), TopicPartition(unique_topic, 1, 5, leader_epoch="0"),
                    TopicPartition(unique_topic, "1", 5)):
            with pytest.raises(TypeError, match="must be an int"):
                c.assign([TopicPartition(unique_topic, 0, 10), bad])
            with pytest.raises(TypeError, match="must be an int"):
                c.incremental_assign([TopicPartition(unique_topic, 0, 10), bad])
        got = drain(c, 36)  # partition 0 was not moved to 10, nor stalled: everything, once
        assert sorted((r.partition, r.offset) for r in first + got) == [(p, o) for p in range(2) for o in range(20)]
        c.assign([TopicPartition(unique_topic, p, 15) for p in range(2)])
        assert sorted((r.partition, r.offset) for r in drain(c, 10)) == [(p, o) for p in range(2) for o in range(15, 20)]


def test_offsets_for_times_agrees_with_confluent_kafka(broker, unique_topic, create_topic):
    """Neither peer searches by timestamp (Tansu answers 0, the mock -1): kwire must give what
    confluent-kafka gets from the same peer.  (The search itself is covered by the fake
    cluster's tests.)"""
    create_topic(broker, unique_topic, 1)
    base = 1_700_000_000_000
    produce(broker, unique_topic, [b"%d" % i for i in range(20)], partition=0,
            timestamps=lambda i: base + 10 * i)
    cc = confluent_consumer(broker)
    try:
        for ts in (base + 55, base + 10_000, base - 5):
            want = cc.offsets_for_times([confluent_kafka.TopicPartition(unique_topic, 0, ts)], timeout=10)
            with kconsumer(broker) as c:
                got = c.offsets_for_times([TopicPartition(unique_topic, 0, ts)], timeout=10)
            assert got[0].offset == want[0].offset, ts
    finally:
        cc.close()
    with kconsumer(broker) as c:  # and consuming from a position found that way works
        c.assign([TopicPartition(unique_topic, 0, 6)])
        assert c.poll(10).timestamp == base + 60


def test_pause_resume(broker, unique_topic, create_topic):
    create_topic(broker, unique_topic, 2)
    produce(broker, unique_topic, [b"a%d" % i for i in range(30)], partition=0)
    produce(broker, unique_topic, [b"b%d" % i for i in range(30)], partition=1)
    p0 = TopicPartition(unique_topic, 0)
    with kconsumer(broker) as c:
        c.assign([TopicPartition(unique_topic, 0, 0), TopicPartition(unique_topic, 1, 0)])
        seen = drain(c, 10, batch=1)
        c.pause([p0])
        produce(broker, unique_topic, [b"a%d" % i for i in range(30, 40)], partition=0)
        later = drain(c, 1000, timeout_s=2)
        assert all(r.partition == 1 for r in later)
        c.resume([p0])
        rest = drain(c, 70 - len(seen) - len(later))
        everything = seen + later + rest
        for p, n in ((0, 40), (1, 30)):
            assert [r.offset for r in everything if r.partition == p] == list(range(n))
        assert c.poll(0.5) is None


@pytest.mark.parametrize("reset", ["earliest", "latest", "error"])
def test_auto_offset_reset(broker, unique_topic, create_topic, reset):
    create_topic(broker, unique_topic, 1)
    produce(broker, unique_topic, [b"old%d" % i for i in range(5)], partition=0, one_per_batch=True)
    with kconsumer(broker, **{"auto.offset.reset": reset, "group.id": f"g-{unique_topic}"}) as c:
        c.assign([TopicPartition(unique_topic, 0)])
        if reset == "error":
            with pytest.raises(NoOffsetForPartitionError):
                for _ in range(50):
                    c.poll(0.2)
            return
        if reset == "latest":
            deadline = time.monotonic() + 10
            while c.position([TopicPartition(unique_topic, 0)])[0].offset < 0:
                assert time.monotonic() < deadline
                c.poll(0.05)
        produce(broker, unique_topic, [b"new%d" % i for i in range(3)], partition=0)
        recs = drain(c, 8 if reset == "earliest" else 3)
        if reset == "earliest":
            assert [r.value for r in recs][:5] == [b"old%d" % i for i in range(5)]
        else:
            assert [r.value for r in recs] == [b"new0", b"new1", b"new2"]


def test_unknown_topic(broker, unique_topic, create_topic):
    with kconsumer(broker, **{"group.id": f"g-{unique_topic}"}, **GROUP) as c:
        c.subscribe([unique_topic])
        t0 = time.monotonic()
        assert c.poll(1.0) is None  # no error, nothing to read
        assert time.monotonic() - t0 >= 0.9
        create_topic(broker, unique_topic, 1)
        produce(broker, unique_topic, [b"late"], partition=0)
        end = time.monotonic() + 30
        r = None
        while r is None and time.monotonic() < end:
            r = c.poll(0.2)
        assert r is not None and r.value == b"late"


# --- a connection cut mid-response ----------------------------------------------------------------

@pytest.fixture
def proxied_tansu():
    """Tansu advertising a TCP proxy in front of it, so every connection goes through it."""
    from tests.tcp_proxy import TcpProxy
    port = free_port()
    proxy = TcpProxy("127.0.0.1", port)
    log = open(os.devnull, "wb")
    proc = subprocess.Popen([tansu_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                             "--advertised-listener-url", f"tcp://{proxy.address}",
                             "--storage-engine", "memory://tansu/"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "RUST_LOG": "warn"})
    try:
        wait_for_port("127.0.0.1", port, 20, proc)

        class Peer:
            bootstrap = proxy.address
        yield Peer, proxy
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        proxy.close()
        log.close()


def test_connection_cut_mid_response_loses_nothing(proxied_tansu, unique_topic):
    """Each round arms a cut of the next bytes from the broker, then produces: the Fetch
    answering with the new records is cut mid-frame.  Every record must arrive exactly once."""
    peer, proxy = proxied_tansu
    admin = kwire.Admin({"bootstrap.servers": peer.bootstrap})
    admin.create_topics([(unique_topic, 2, 1)], timeout=10, wait_for_leaders=True)
    admin.close()
    got = []
    total = 0
    with kconsumer(peer, **{"reconnect.backoff.ms": 10, "retry.backoff.ms": 10,
                            "fetch.wait.max.ms": 2000}) as c:
        c.assign([TopicPartition(unique_topic, 0, 0), TopicPartition(unique_topic, 1, 0)])
        assert c.poll(0.5) is None  # connected, fetching
        for rnd, cut_at in enumerate([100, 3000, 7, 5000, 20, 9000]):
            proxy.cut_next_response(after_bytes=cut_at)
            produce(peer, unique_topic, [b"r%d-%05d" % (rnd, i) * 8 for i in range(500)],
                    keys=lambda i: b"%d" % i)
            total += 500
            end = time.monotonic() + 20
            while len(got) < total and time.monotonic() < end:
                got.extend(c.consume(500, timeout=0.2))
            assert len(got) == total, f"round {rnd}: {len(got)} of {total}"
    assert proxy.cuts >= 5
    for p in (0, 1):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(len(offsets))), "a gap or a repeat"
    assert sorted(r.value for r in got) == sorted(
        b"r%d-%05d" % (rnd, i) * 8 for rnd in range(6) for i in range(500))


def test_store_offsets_without_auto_store(peer, unique_topic, create_topic):
    create_topic(peer, unique_topic, 1)
    produce(peer, unique_topic, [b"%d" % i for i in range(20)], partition=0)
    cfg = {"group.id": f"g-{unique_topic}", "enable.auto.offset.store": False, **GROUP}
    with kconsumer(peer, **cfg) as c:
        c.subscribe([unique_topic])
        recs = drain(c, 20)
        c.store_offsets(recs[7])            # processed up to offset 7 only
        assert c.commit(asynchronous=False)[0].offset == 8
    with kconsumer(peer, **cfg) as c:
        c.subscribe([unique_topic])
        assert c.poll(10).offset == 8


def test_idle_consumer_does_not_spin(broker, unique_topic, create_topic):
    """A member with nothing to read waits in the network poll: heartbeats, long-polling
    fetches, nothing else.  Counted in requests on the wire, not in CPU seconds, so the
    check does not depend on the machine's load."""
    parts = create_topic(broker, unique_topic, 2)
    sends: dict[str, int] = {}
    counting = threading.Event()

    def tracer(event):
        if counting.is_set() and event["direction"] == "send":
            sends[event["api"]] = sends.get(event["api"], 0) + 1

    cfg = {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest",
           "group.id": f"g-{unique_topic}", "fetch.wait.max.ms": 500, **GROUP}
    with Consumer(cfg, tracer=tracer) as c:
        c.subscribe([unique_topic])
        poll_all([c], lambda: len(assigned(c)) == parts and c.position(
            [TopicPartition(unique_topic, 0)])[0].offset >= 0)
        counting.set()
        assert c.poll(2.0) is None
        counting.clear()
    # 2 s of long polls (500 ms each, one per leader) and heartbeats (every 300 ms): a dozen or
    # two requests.  A consumer that spins sends thousands.
    assert sends.get("Fetch", 0) <= 20 and sends.get("Heartbeat", 0) <= 12, sends
    assert set(sends) <= {"Fetch", "Heartbeat", "Metadata", "OffsetCommit"}, sends


def test_prefetch_memory_stays_within_the_budget_while_a_backlog_waits(peer, unique_topic, create_topic):
    """A 30 MB backlog and an application that stops after one record: the driver keeps
    fetching only up to queued.max.messages.kbytes (plus one response in flight and the small
    decode-ahead), so what it holds does not grow with the backlog."""
    import tracemalloc

    create_topic(peer, unique_topic, 1)
    p = confluent_kafka.Producer({"bootstrap.servers": peer.bootstrap, "linger.ms": 20,
                                  "batch.num.messages": 10000, "queue.buffering.max.messages": 400000})
    for i in range(300_000):
        p.produce(unique_topic, b"x" * 100, partition=0)
        if i % 50_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    cfg = {"bootstrap.servers": peer.bootstrap, "auto.offset.reset": "earliest",
           "queued.max.messages.kbytes": 2048}
    tracemalloc.start()
    try:
        with Consumer(cfg) as c:
            c.assign([TopicPartition(unique_topic, 0, 0)])
            assert c.poll(15) is not None
            base, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:  # the application is busy; the driver runs on
                time.sleep(0.1)
            _, peak = tracemalloc.get_traced_memory()
            # then everything still arrives, in order
            got = 1
            last = 0
            while got < 300_000:
                recs = c.consume(10_000, 10)
                assert recs, got
                assert recs[0].offset == last + 1
                last = recs[-1].offset
                got += len(recs)
    finally:
        tracemalloc.stop()
    backlog_bytes = 300_000 * 100
    assert peak - base < 16 << 20, (peak - base, backlog_bytes)
    assert got == 300_000
