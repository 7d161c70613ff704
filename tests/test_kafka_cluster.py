"""What only a real broker can show: leader changes (KIP-320), unclean leader election, a group
coordinator that moves, and a broker restarted with its data -- on Apache Kafka 4.3.

One 3-node KRaft cluster (three combined broker+controller nodes) serves the module; every test
starts the nodes it stopped again (the ``cluster`` fixture checks), so the next test finds all
three.  All three nodes are also the controller quorum: at most one may be down while the
cluster must make a decision (elect a leader, shrink an ISR).

Records are produced by confluent-kafka (an independent client) and checked by exact offset and
value: nothing lost, nothing twice.  kwire's own requests are seen through the NetworkClient's
tracer hook (``Consumer(tracer=...)``), so the tests can say that a position was validated with
OffsetForLeaderEpoch, not only that the records came out right.
"""
from __future__ import annotations

import threading
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import kwire
from kwire import TopicPartition
from kwire.consumer import Consumer
from kwire.errors import LogTruncationError

from .kafka_util import start_kafka, stop_kafka

# Faster failure detection than the defaults (9 s broker session, 30 s replica lag), so a
# SIGKILLed node is fenced, and its partitions move, within a few seconds.
CLUSTER_PROPERTIES = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
}

GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
# Small fetches: a consumer stopped by a failure is truly mid-log (its position well short of
# the end, every partition partly read), not holding the whole log in its prefetch buffer.
SMALL_FETCHES = {"max.partition.fetch.bytes": 2048, "fetch.max.bytes": 4096,
                 "queued.max.messages.kbytes": 8}


@pytest.fixture(scope="module")
def cluster3(request):
    cluster = start_kafka(request, 3, properties=CLUSTER_PROPERTIES)
    yield cluster
    stop_kafka(request, cluster)


@pytest.fixture
def cluster(cluster3):
    """The module's 3-node cluster with every node running, before and after the test."""
    _restore(cluster3)
    yield cluster3
    _restore(cluster3)


def _restore(cluster) -> None:
    down = [i for i, n in cluster.nodes.items() if not n.running]
    if down:
        cluster.start_nodes(down)


# --- helpers --------------------------------------------------------------------------------------

class Trace:
    """A tracer for kwire's NetworkClient that keeps OffsetForLeaderEpoch / Fetch frames."""

    def __init__(self):
        self.events: list[dict] = []
        self._lock = threading.Lock()

    def __call__(self, event: dict) -> None:
        if event.get("api") in ("OffsetForLeaderEpoch", "FindCoordinator"):
            with self._lock:
                self.events.append(event)

    def frames(self, api: str, direction: str) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["api"] == api and e["direction"] == direction]

    def validations(self, topic: str) -> list[tuple[dict, dict]]:
        """(request partition, response partition) pairs of OffsetForLeaderEpoch for ``topic``."""
        reqs = {e["correlation_id"]: e for e in self.frames("OffsetForLeaderEpoch", "send")}
        out = []
        for resp in self.frames("OffsetForLeaderEpoch", "recv"):
            req = reqs.get(resp["correlation_id"])
            if req is None:
                continue
            sent = {p["partition"]: p for t in req["body"]["topics"] if t["topic"] == topic
                    for p in t["partitions"]}
            for t in resp["body"]["topics"]:
                if t["topic"] != topic:
                    continue
                for p in t["partitions"]:
                    if p["partition"] in sent:
                        out.append((sent[p["partition"]], p))
        return out


def admin_client(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def create_topic(cluster, name: str, partitions: int = 1, *, replicas: list[list[int]] | None = None,
                 config: dict | None = None) -> None:
    if replicas is not None:
        new = NewTopic(name, num_partitions=len(replicas), replica_assignment=replicas, config=config or {})
    else:
        new = NewTopic(name, partitions, 3, config=config or {})
    admin = admin_client(cluster)  # the futures need their client alive
    admin.create_topics([new], operation_timeout=20)[name].result(30)
    wait_for(lambda: all(p.leader >= 0 for p in partitions_of(cluster, name).values())
             and len(partitions_of(cluster, name)) == (partitions if replicas is None else len(replicas)),
             30, f"leaders for {name}")


def partitions_of(cluster, topic: str) -> dict:
    with kwire.Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
        info = admin.list_topics(topic, timeout=10).topics.get(topic)
    return {} if info is None or info.error_code else dict(info.partitions)


def wait_for(cond, timeout_s: float, what: str, interval_s: float = 0.2):
    end = time.monotonic() + timeout_s
    while True:
        try:
            value = cond()
        except Exception:  # a broker on its way down or up
            value = None
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def produce(cluster, topic: str, values: list[bytes], *, partition: int = 0, acks: str = "all",
            timeout_s: float = 60.0) -> list[int]:
    """Produce ``values`` in order to one partition; returns the offset of each (from the
    delivery reports).  Idempotent with acks=all: retries across a leader change add nothing."""
    conf = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "acks": acks,
            "message.timeout.ms": int(timeout_s * 1000), "topic.metadata.refresh.interval.ms": 1000}
    conf["enable.idempotence"] = acks == "all"
    if acks != "all":
        conf["retries"] = 0
    p = confluent_kafka.Producer(conf)
    offsets: dict[int, int] = {}
    errors = []

    def report(err, msg, i):
        if err is not None:
            errors.append(err)
        else:
            offsets[i] = msg.offset()

    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=partition, on_delivery=lambda e, m, i=i: report(e, m, i))
        p.poll(0)
    assert p.flush(timeout_s + 10) == 0
    assert not errors, errors[:3]
    return [offsets[i] for i in range(len(values))]


def take(c: Consumer, n: int, timeout_s: float = 60.0) -> list[tuple[int, int, bytes]]:
    """Exactly ``n`` records as (partition, offset, value); fails on a shortfall."""
    out: list = []
    end = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < end:
        for r in c.consume(n - len(out), timeout=0.5):
            out.append((r.partition, r.offset, bytes(r.value)))
    assert len(out) == n, f"got {len(out)} of {n} records in {timeout_s}s"
    return out


def nothing_more(c: Consumer, wait_s: float = 1.5) -> None:
    extra = c.consume(100, timeout=wait_s)
    assert extra == [], [(r.partition, r.offset) for r in extra[:5]]


def kwire_consumer(cluster, tracer=None, **cfg) -> Consumer:
    base = {"bootstrap.servers": cluster.bootstrap, "auto.offset.reset": "earliest",
            "retry.backoff.ms": 50, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500}
    base.update(cfg)
    return Consumer(base, tracer=tracer)


def values(prefix: str, n: int) -> list[bytes]:
    return [b"%s-%05d" % (prefix.encode(), i) for i in range(n)]


# --- (1) leader changes ----------------------------------------------------------------------------

@pytest.mark.parametrize("kill,seek", [(False, False), (True, True)], ids=["sigterm", "sigkill-after-seek"])
def test_consumer_follows_a_new_leader_and_validates_its_position(cluster, unique_topic, kill, seek):
    """The leader of the partition stops mid-consumption (controlled shutdown, or SIGKILL):
    kwire finds the new leader, checks its position with OffsetForLeaderEpoch under the new
    leader epoch (KIP-320), and reads every record exactly once.  ``seek``: the position comes
    from a seek() made while the metadata was current (no leader epoch known with it), as
    Kafka's Java consumer validates those too."""
    create_topic(cluster, unique_topic, 1)
    first = values("before", 3000)
    assert produce(cluster, unique_topic, first) == list(range(3000))
    p0 = partitions_of(cluster, unique_topic)[0]
    old_leader, old_epoch = p0.leader, p0.leader_epoch
    assert sorted(p0.isr) == [1, 2, 3]

    trace = Trace()
    with kwire_consumer(cluster, trace, **SMALL_FETCHES) as c:
        c.assign([TopicPartition(unique_topic, 0, 0)])
        got = take(c, 1000)
        if seek:
            c.seek(TopicPartition(unique_topic, 0, 1000))
            got += take(c, 100)
        cluster.stop_node(old_leader, kill=kill)
        p1 = wait_for(lambda: (lambda p: p if p.leader not in (-1, old_leader) else None)(
            partitions_of(cluster, unique_topic)[0]), 30, "a new leader")
        assert p1.leader_epoch > old_epoch
        second = values("after", 1000)
        assert produce(cluster, unique_topic, second) == list(range(3000, 4000))
        got += take(c, 3000 - (100 if seek else 0))
        nothing_more(c)
        position = c.position([TopicPartition(unique_topic, 0)])[0].offset

    expected = [(0, i, v) for i, v in enumerate(first + second)]
    assert got == expected
    assert position == 4000
    checks = trace.validations(unique_topic)
    assert checks, "kwire did not validate its position after the leader change (no OffsetForLeaderEpoch)"
    under_new = [(req, resp) for req, resp in checks if req["current_leader_epoch"] >= p1.leader_epoch]
    assert under_new, f"no validation under the new leader epoch {p1.leader_epoch}: {checks}"
    for req, resp in under_new:
        assert resp["error_code"] == 0, resp
        if req["leader_epoch"] < p1.leader_epoch:
            # A clean election: the old epoch ends, on the new leader too, after all 3000
            # records written under it -- at or past our position, so nothing was truncated.
            assert resp["end_offset"] == 3000, (req, resp)


# --- (2) unclean leader election -------------------------------------------------------------------

def test_unclean_election_truncation_is_detected_and_handled_per_reset_policy(cluster, unique_topic):
    """Kafka truncates the log under the consumers: a replica 200 records behind is elected
    uncleanly.  Each kwire consumer's OffsetForLeaderEpoch finds the divergence point (offset
    500).  As in Kafka's Java consumer, an automatic policy (earliest, latest) resumes *at the
    divergence*, not at either end: the new leader's records at 500.. come next.  With
    auto.offset.reset=error the truncation surfaces as LogTruncationError naming the divergence;
    the partition waits for seek(), then reads on.  A committed offset past the divergence is
    validated the same way by a member that starts after the election.

    The partition lives on two replicas [L, F]; the third node stays out of it but keeps the
    controller quorum (three voters) alive while one of L, F is down.  F stops (controlled: out
    of the ISR at once), L takes 200 records alone (acks=1), the consumers read all 700, L is
    killed -- with L and F down there is no quorum, so nothing changes -- and F starts again,
    behind, restoring the quorum; the topic allows unclean election.
    """
    topic, leader, follower = unique_topic, 1, 2
    create_topic(cluster, topic, replicas=[[leader, follower]],
                 config={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"})
    wait_for(lambda: partitions_of(cluster, topic)[0].leader == leader, 30, "the preferred leader")
    written = values("both", 500) + values("alone", 200)
    assert produce(cluster, topic, written[:500]) == list(range(500))
    wait_for(lambda: sorted(partitions_of(cluster, topic)[0].isr) == [leader, follower], 30, "full ISR")
    cluster.stop_node(follower)
    wait_for(lambda: list(partitions_of(cluster, topic)[0].isr) == [leader], 30, "the leader alone in the ISR")
    assert produce(cluster, topic, written[500:], acks="1") == list(range(500, 700))

    policies = ("earliest", "latest", "error")
    traces = {r: Trace() for r in policies}
    consumers = {r: kwire_consumer(cluster, traces[r], **{"auto.offset.reset": r}) for r in policies}
    try:
        for c in consumers.values():
            c.assign([TopicPartition(topic, 0, 0)])
        for r, c in consumers.items():
            assert take(c, 700) == [(0, i, v) for i, v in enumerate(written)], r
        # A group's committed offset (700, with the leader epoch of record 699) from before
        # the election: a member that starts after it must validate the commit too.
        group = {"group.id": f"g-{topic}", "enable.auto.commit": False}
        with kwire_consumer(cluster, **group) as committer:
            committer.assign([TopicPartition(topic, 0)])
            assert take(committer, 700)[-1][1] == 699
            [commit] = committer.commit(asynchronous=False)
        assert (commit.offset, commit.leader_epoch is not None) == (700, True)

        cluster.stop_node(leader, kill=True)
        cluster.start_node(follower)
        # Kafka elects F by itself once F is back: the topic allows unclean election.  (The
        # operator's way, ElectLeaders UNCLEAN, is not needed; the test would fail here if the
        # controller did not.)
        p = wait_for(lambda: (lambda q: q if q.leader == follower else None)(partitions_of(cluster, topic)[0]),
                     30, "the stale follower elected uncleanly")
        # The new leader's log ends where F stopped: records 500..699 exist nowhere any more.
        assert consumers["earliest"].get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 500)
        replaced = values("new", 30)
        assert produce(cluster, topic, replaced) == list(range(500, 530))
        expected = [(0, 500 + i, v) for i, v in enumerate(replaced)]

        for r in ("earliest", "latest"):
            assert take(consumers[r], 30) == expected, r
            nothing_more(consumers[r], 0.5)

        # The commit survives the truncation (the group's offsets are not the partition's log);
        # a new member validates it and starts at the divergence point as well.
        traces["committed"] = Trace()
        with kwire_consumer(cluster, traces["committed"], **group) as fresh:
            fresh.assign([TopicPartition(topic, 0)])
            assert take(fresh, 30) == expected
            nothing_more(fresh, 0.5)
            assert fresh.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 700

        c = consumers["error"]
        end = time.monotonic() + 30
        err = None
        while err is None and time.monotonic() < end:
            try:
                extra = c.consume(10, timeout=0.5)
            except LogTruncationError as exc:
                err = exc
            else:
                assert extra == [], [(r.offset, bytes(r.value)) for r in extra]
        assert err is not None, "no LogTruncationError after the unclean election"
        assert getattr(err, "divergent_offset", None) == 500, err
        nothing_more(c, 1.0)  # blocked until the application decides
        c.seek(TopicPartition(topic, 0, err.divergent_offset))
        assert take(c, 30) == expected
        nothing_more(c, 0.5)
    finally:
        for c in consumers.values():
            c.close()

    for r in traces:
        found = [(req, resp) for req, resp in traces[r].validations(topic)
                 if req["current_leader_epoch"] == p.leader_epoch and resp["error_code"] == 0]
        assert any(resp["end_offset"] == 500 for _, resp in found), (r, traces[r].validations(topic))


# --- (3) the group coordinator moves ---------------------------------------------------------------

def _coordinator(cluster, group: str) -> int:
    admin = admin_client(cluster)
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(15).coordinator.id


def test_group_rediscovers_a_stopped_coordinator_and_keeps_its_offsets(cluster, unique_topic):
    """The group coordinator's broker stops: kwire finds the new coordinator, keeps consuming
    and committing, and the offsets committed before the move are intact after it (a fresh
    member resumes exactly there)."""
    create_topic(cluster, unique_topic, 3)
    group = f"g-{unique_topic}"
    per = 200
    sent = {p: values(f"p{p}", per) for p in range(3)}
    for p in range(3):
        assert produce(cluster, unique_topic, sent[p], partition=p) == list(range(per))

    trace = Trace()
    cfg = {"group.id": group, "enable.auto.commit": False, **GROUP, **SMALL_FETCHES}
    c = kwire_consumer(cluster, trace, **cfg)
    got: list = []
    try:
        c.subscribe([unique_topic])
        got += take(c, 300)
        first = c.commit(asynchronous=False)
        committed_before = {tp.partition: tp.offset for tp in first}
        coordinator = _coordinator(cluster, group)
        finds_before = len(trace.frames("FindCoordinator", "send"))

        cluster.stop_node(coordinator)
        got += take(c, 300)
        nothing_more(c)
        # committed() asks the coordinator: the new one, which loaded the offsets topic.
        seen = {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(unique_topic, p) for p in range(3)], timeout=30)}
        assert seen == {p: committed_before.get(p, -1001) for p in range(3)}
        c.commit(asynchronous=False)
        assert len(trace.frames("FindCoordinator", "send")) > finds_before, \
            "kwire never looked for a new coordinator"
        assert _coordinator(cluster, group) != coordinator
    finally:
        c.close()

    # Every record exactly once, per partition in order.
    by_p = {p: [(o, v) for q, o, v in got if q == p] for p in range(3)}
    assert by_p == {p: list(enumerate(sent[p])) for p in range(3)}

    # The old coordinator back; a fresh member of the group resumes at the committed ends.
    cluster.start_node(coordinator)
    more = {p: values(f"more{p}", 20) for p in range(3)}
    for p in range(3):
        assert produce(cluster, unique_topic, more[p], partition=p) == list(range(per, per + 20))
    with kwire_consumer(cluster, **cfg) as c2:
        c2.subscribe([unique_topic])
        rest = take(c2, 60)
        nothing_more(c2)
    assert sorted(rest) == sorted((p, per + i, v) for p in range(3) for i, v in enumerate(more[p]))


# --- (4) a single node restarted with its data ---------------------------------------------------

@pytest.fixture(scope="module")
def single(request):
    cluster = start_kafka(request, 1)
    yield cluster
    stop_kafka(request, cluster)


def test_single_node_restart_resumes_exactly(single, unique_topic):
    """The only broker restarts (same ports, same log directory) mid-consumption: the kwire
    member rides it out -- reconnects, rediscovers its coordinator, keeps its position -- and
    a fresh member resumes at the offsets committed before the restart."""
    topic = unique_topic
    with kwire.Admin({"bootstrap.servers": single.bootstrap}) as admin:
        admin.create_topics([(topic, 2, 1)], timeout=10, wait_for_leaders=True)
    first = {p: values(f"a{p}", 500) for p in range(2)}
    for p in range(2):
        produce(single, topic, first[p], partition=p)
    group = f"g-{topic}"
    cfg = {"group.id": group, "enable.auto.commit": False, **GROUP, **SMALL_FETCHES}
    got: list = []
    with kwire_consumer(single, **cfg) as c:
        c.subscribe([topic])
        got += take(c, 400)
        committed = {tp.partition: tp.offset for tp in c.commit(asynchronous=False)}
        single.restart()  # controlled shutdown, then the same ports and log directory
        second = {p: values(f"b{p}", 100) for p in range(2)}
        for p in range(2):
            assert produce(single, topic, second[p], partition=p) == list(range(500, 600))
        got += take(c, 800)
        nothing_more(c)
        assert {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(topic, p) for p in range(2)], timeout=30)} == \
            {p: committed.get(p, -1001) for p in range(2)}
    by_p = {p: [(o, v) for q, o, v in got if q == p] for p in range(2)}
    assert by_p == {p: list(enumerate(first[p] + second[p])) for p in range(2)}

    # close() committed nothing (auto commit off): a fresh member starts at the commit made
    # before the restart and reads the rest exactly once.
    with kwire_consumer(single, **cfg) as c2:
        c2.subscribe([topic])
        n = sum(600 - committed.get(p, 0) for p in range(2))
        rest = take(c2, n)
        nothing_more(c2)
    want = [(p, o, v) for p in range(2) for o, v in enumerate(first[p] + second[p])
            if o >= committed.get(p, 0)]
    assert sorted(rest) == sorted(want)
