"""KIP-848 consumer groups (``group.protocol=consumer``) on Apache Kafka 4.3.

The broker assigns; members heartbeat.  These tests run kwire members (threads of this
process, or processes of their own where a member must freeze) against the real group
coordinator, with the test timings of tests/kafka_util.py (6 s session, 500 ms heartbeat), and
check what a user relies on: partitions move one at a time and never belong to two members at
once, a librdkafka member shares the group, a regex picks up a new topic, a frozen member is
fenced and comes back, a static member restarts without a rebalance, and commits resume exactly.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import confluent_kafka
import pytest

from kwire import Consumer
from kwire.consumer.coordinator import MemberState
from kwire.errors import ConfigError, MaxPollIntervalExceededError

from .test_consumer_integration import produce

ROOT = Path(__file__).resolve().parents[2]


def member_cfg(kafka, group, **extra):
    return {"bootstrap.servers": kafka.bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", **extra}


class Member:
    """A kwire KIP-848 member polled by a thread of its own; callbacks and records go into one
    log stamped with time.monotonic(), shared by every member of a test."""

    def __init__(self, name, kafka, group, topics, *, journal, poll=True, **cfg):
        self.name = name
        self.journal = journal
        self.c = Consumer(member_cfg(kafka, group, **cfg))
        self.c.subscribe(topics, on_assign=self._cb("assign"), on_revoke=self._cb("revoke"),
                         on_lost=self._cb("lost"))
        self.errors: list = []
        self.polling = threading.Event()
        if poll:
            self.polling.set()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _cb(self, kind):
        def cb(_c, parts):
            self.journal.append((time.monotonic(), self.name, kind,
                                 sorted((tp.topic, tp.partition) for tp in parts)))
        return cb

    def _run(self):
        while not self._stop:
            if not self.polling.wait(0.1):
                continue
            try:
                recs = self.c.consume(500, timeout=0.1)
            except MaxPollIntervalExceededError as exc:
                self.errors.append(exc)
                continue
            now = time.monotonic()
            for r in recs:
                self.journal.append((now, self.name, "record", (r.topic, r.partition, r.offset)))

    def owned(self):
        return sorted((tp.topic, tp.partition) for tp in self.c.assignment())

    def close(self):
        self._stop = True
        self._thread.join(10)
        self.c.close()


def ownership_intervals(journal):
    """{tp: [(start, end, member)]} from the callbacks, and the records each member got."""
    open_: dict = {}
    intervals: dict = {}
    records = []
    for t, name, kind, what in sorted(journal, key=lambda e: e[0]):
        if kind == "assign":
            for tp in what:
                open_[(name, tp)] = t
        elif kind in ("revoke", "lost"):
            for tp in what:
                start = open_.pop((name, tp), None)
                assert start is not None, f"{name} gave up {tp} it did not own"
                intervals.setdefault(tp, []).append((start, t, name))
        elif kind == "record":
            records.append((t, name, what))
    for (name, tp), start in open_.items():
        intervals.setdefault(tp, []).append((start, float("inf"), name))
    return intervals, records


def assert_one_owner_at_a_time(journal, *, callbacks=True):
    """Records come only from partitions their member owns, and never while another member
    owns them.  With ``callbacks``, the members' own views (on_assign .. on_revoke/on_lost)
    never overlap either -- not so for a member that stopped polling: it hears of its loss only
    when it polls again."""
    intervals, records = ownership_intervals(journal)
    for tp, ivs in intervals.items():
        ivs.sort()
        for (_s1, e1, m1), (s2, _e2, m2) in zip(ivs, ivs[1:]):
            assert not callbacks or e1 <= s2, \
                f"{tp} owned by {m1} until {e1:.3f} and by {m2} from {s2:.3f}"
    for t, name, (topic, partition, offset) in records:
        ivs = intervals.get((topic, partition), ())
        assert any(s <= t <= e and m == name for s, e, m in ivs), \
            f"{name} got {topic}[{partition}]@{offset} outside its ownership"
        assert not any(s <= t <= e and m != name for s, e, m in ivs), \
            f"{name} got {topic}[{partition}]@{offset} while another member owned it"
    return records


def wait_for(cond, what, timeout_s=60.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Producer(threading.Thread):
    """Produces ``key = n`` records round-robin over a topic's partitions until stopped; what
    the broker acknowledged is in ``acked``."""

    def __init__(self, kafka, topic, partitions):
        super().__init__(daemon=True)
        self.p = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5,
                                           "acks": "all"})
        self.topic, self.partitions = topic, partitions
        self.acked: set = set()
        self.stop = threading.Event()

    def _ack(self, err, msg):
        if err is None:
            self.acked.add((msg.topic(), msg.partition(), msg.offset()))

    def run(self):
        n = 0
        while not self.stop.is_set():
            for _ in range(50):
                self.p.produce(self.topic, b"v%d" % n, key=b"%d" % n, partition=n % self.partitions,
                               on_delivery=self._ack)
                n += 1
            self.p.poll(0)
            time.sleep(0.02)
        self.p.flush(30)


def test_members_split_and_rebalance_incrementally(kafka, unique_topic, create_topic):
    """Three members join one after another and leave again while records keep coming: every
    acknowledged record is handed out, no partition has two owners at once, records come only
    from owned partitions, and a member keeps its partitions across a rebalance (it is asked
    to revoke only those that move)."""
    create_topic(kafka, unique_topic, 6)
    group = f"g-{unique_topic}"
    journal: list = []
    prod = Producer(kafka, unique_topic, 6)
    prod.start()
    a = Member("a", kafka, group, [unique_topic], journal=journal)
    wait_for(lambda: len(a.owned()) == 6, "a owns all six partitions")
    b = Member("b", kafka, group, [unique_topic], journal=journal)
    wait_for(lambda: len(a.owned()) + len(b.owned()) == 6 and b.owned(), "a and b share")
    c = Member("c", kafka, group, [unique_topic], journal=journal)
    wait_for(lambda: all(len(m.owned()) == 2 for m in (a, b, c)), "two partitions each")
    b.close()
    wait_for(lambda: len(a.owned()) + len(c.owned()) == 6, "a and c share b's partitions")
    prod.stop.set()
    prod.join(60)
    produced = set(prod.acked)
    wait_for(lambda: produced <= {w for _, _, k, w in list(journal) if k == "record"},
             "every acknowledged record handed out", 60)
    a.close()
    c.close()

    records = assert_one_owner_at_a_time(journal)
    assert produced <= {w for _, _, w in records}
    # incremental: a member is never asked to revoke a partition it keeps
    for name in ("a", "b", "c"):
        owned: set = set()
        for _, who, kind, what in sorted(journal, key=lambda e: e[0]):
            if who != name:
                continue
            if kind == "assign":
                assert not owned & set(what), f"{name} assigned {what} it already owned"
                owned |= set(what)
            elif kind == "revoke":
                owned -= set(what)
        assert not [e for e in journal if e[1] == name and e[2] == "lost"]
    a_revokes = [w for _, who, k, w in journal if who == "a" and k == "revoke"]
    assert a_revokes and all(len(w) < 6 for w in a_revokes[:-1]), a_revokes  # only the last is close()


@pytest.fixture(params=["kafka", "mock_cluster"])
def kip848_peer(request):
    """Apache Kafka 4.3 and librdkafka's mock cluster (its KIP-848 coordinator is librdkafka's
    own test double: a second, independent implementation of the broker side)."""
    return request.getfixturevalue(request.param)


def test_two_members_split_then_one_leaves(kip848_peer, unique_topic, create_topic):
    peer = kip848_peer
    n = create_topic(peer, unique_topic, 4)
    for p in range(n):
        produce(peer, unique_topic, [b"%d-%d" % (p, i) for i in range(100)], partition=p)
    group = f"g-{unique_topic}"
    journal: list = []
    a = Member("a", kafka=peer, group=group, topics=[unique_topic], journal=journal,
               **{"enable.auto.commit": False})
    wait_for(lambda: len(a.owned()) == n, "a owns every partition")
    b = Member("b", kafka=peer, group=group, topics=[unique_topic], journal=journal,
               **{"enable.auto.commit": False})
    wait_for(lambda: a.owned() and b.owned() and len(a.owned()) + len(b.owned()) == n, "a and b share")
    assert not set(a.owned()) & set(b.owned())
    b.close()
    wait_for(lambda: len(a.owned()) == n, "a owns every partition again")
    wait_for(lambda: {w[:2] for _, _, k, w in list(journal) if k == "record"} >=
             {(unique_topic, p) for p in range(n)}, "records of every partition")
    a.close()
    records = assert_one_owner_at_a_time(journal)
    assert {(t, p, o) for _, _, (t, p, o) in records} == \
        {(unique_topic, p, o) for p in range(n) for o in range(100)}


def test_kwire_and_librdkafka_members_share_a_group(kafka, unique_topic, create_topic):
    """A kwire member and a confluent-kafka (librdkafka) member with group.protocol=consumer
    split the partitions between them and together read every record once."""
    create_topic(kafka, unique_topic, 4)
    for p in range(4):
        produce(kafka, unique_topic, [b"%d-%d" % (p, i) for i in range(200)], partition=p)
    group = f"g-{unique_topic}"
    journal: list = []
    k = Member("kwire", kafka, group, [unique_topic], journal=journal, **{"enable.auto.commit": False})
    wait_for(lambda: len(k.owned()) == 4, "kwire owns all")
    r = confluent_kafka.Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})
    r_owned: set = set()
    r_records = []

    def on_assign(_c, parts):
        r_owned.update((p.topic, p.partition) for p in parts)
        journal.append((time.monotonic(), "rdkafka", "assign", sorted((p.topic, p.partition) for p in parts)))

    def on_revoke(_c, parts):
        r_owned.difference_update((p.topic, p.partition) for p in parts)
        journal.append((time.monotonic(), "rdkafka", "revoke", sorted((p.topic, p.partition) for p in parts)))

    r.subscribe([unique_topic], on_assign=on_assign, on_revoke=on_revoke)
    end = time.monotonic() + 60
    while time.monotonic() < end and not (len(r_owned) == 2 and len(k.owned()) == 2):
        m = r.poll(0.1)
        if m is not None and m.error() is None:
            r_records.append((time.monotonic(), "rdkafka", (m.topic(), m.partition(), m.offset())))
    assert len(r_owned) == 2 and len(k.owned()) == 2, (r_owned, k.owned())
    assert not r_owned & set(k.owned())
    # read what librdkafka owns to the end
    end = time.monotonic() + 30
    while time.monotonic() < end and len(r_records) < 400:
        m = r.poll(0.1)
        if m is not None and m.error() is None:
            r_records.append((time.monotonic(), "rdkafka", (m.topic(), m.partition(), m.offset())))
    for t, name, w in r_records:
        journal.append((t, name, "record", w))
    k_records = lambda: [w for _, who, kind, w in list(journal) if who == "kwire" and kind == "record"]  # noqa: E731
    k.close()
    r.close()
    records = assert_one_owner_at_a_time(journal)
    # kwire read its first two partitions' records of while it owned all four, librdkafka read
    # the two it got from offset 0 (nothing was committed): together every record
    got = {w for _, _, w in records}
    assert got == {(unique_topic, p, o) for p in range(4) for o in range(200)}, len(got)
    assert len(k_records()) >= 400


def test_regex_subscription_picks_up_a_new_topic(kafka, unique_topic, create_topic):
    """subscribe(["^prefix.*"]) sends SubscribedTopicRegex; the broker evaluates it and assigns
    a topic created later."""
    prefix = unique_topic[:40] + "-rx"
    create_topic(kafka, prefix + "-a", 2)
    create_topic(kafka, "other-" + unique_topic[:40], 1)
    journal: list = []
    m = Member("m", kafka, f"g-{unique_topic}", [f"^{prefix}-.*"], journal=journal)
    wait_for(lambda: m.owned() == [(prefix + "-a", 0), (prefix + "-a", 1)], "the first topic")
    create_topic(kafka, prefix + "-b", 1)
    produce(kafka, prefix + "-b", [b"late"], partition=0)
    wait_for(lambda: (prefix + "-b", 0, 0) in {w for _, _, k, w in list(journal) if k == "record"},
             "the record of the topic created later", 90)
    assert sorted(t for t, _ in m.owned()) == [prefix + "-a", prefix + "-a", prefix + "-b"]
    m.close()


MEMBER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from kwire import Consumer
cfg = json.loads(sys.argv[2])
c = Consumer(cfg)
def cb(kind):
    return lambda _c, ps: print(json.dumps([kind, sorted([p.topic, p.partition] for p in ps)]), flush=True)
c.subscribe([sys.argv[3]], on_assign=cb("assign"), on_revoke=cb("revoke"), on_lost=cb("lost"))
end = time.monotonic() + float(sys.argv[4])
while time.monotonic() < end:
    for r in c.consume(100, timeout=0.1):
        print(json.dumps(["record", [r.topic, r.partition, r.offset]]), flush=True)
c.close()
print(json.dumps(["closed", []]), flush=True)
"""


class MemberProcess:
    def __init__(self, kafka, group, topic, seconds, **cfg):
        self.p = subprocess.Popen([sys.executable, "-c", MEMBER, str(ROOT),
                                   json.dumps(member_cfg(kafka, group, **cfg)), topic, str(seconds)],
                                  stdout=subprocess.PIPE, text=True)
        self.events: list = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        for line in self.p.stdout:
            self.events.append(json.loads(line))

    def owned(self):
        owned: set = set()
        for kind, what in list(self.events):
            if kind == "assign":
                owned |= {tuple(x) for x in what}
            elif kind in ("revoke", "lost"):
                owned -= {tuple(x) for x in what}
        return sorted(owned)

    def kinds(self):
        return [k for k, _ in list(self.events) if k != "record"]

    def wait(self):
        self.p.wait(60)
        self._t.join(10)


def test_a_frozen_member_is_fenced_and_rejoins(kafka, unique_topic, create_topic):
    """A member process stopped (SIGSTOP) for longer than the session loses its partitions to
    the other member; woken up, it hears it was fenced (on_lost, not on_revoke: nothing is
    committed for it), joins again with epoch 0 and gets its share back."""
    create_topic(kafka, unique_topic, 4)
    group = f"g-{unique_topic}"
    journal: list = []
    frozen = MemberProcess(kafka, group, unique_topic, 40)
    try:
        wait_for(lambda: len(frozen.owned()) == 4, "the process member owns all")
        other = Member("other", kafka, group, [unique_topic], journal=journal)
        wait_for(lambda: len(frozen.owned()) == 2 and len(other.owned()) == 2, "two each")
        before = len(frozen.kinds())
        os.kill(frozen.p.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: len(other.owned()) == 4, "the other member takes all four", 30)
        finally:
            os.kill(frozen.p.pid, signal.SIGCONT)
        wait_for(lambda: "lost" in frozen.kinds(), "the woken member's on_lost", 30)
        wait_for(lambda: len(frozen.owned()) == 2 and len(other.owned()) == 2, "two each again")
        # fenced, not asked: on_lost (nothing committed for those partitions), then a new share
        assert frozen.kinds()[before:before + 2] == ["lost", "assign"], frozen.kinds()
        other.close()
    finally:
        frozen.p.kill()
        frozen.wait()


def test_a_static_member_restarts_without_a_rebalance(kafka, unique_topic, create_topic):
    """group.instance.id: a static member that closes leaves with epoch -2, and a new process
    with the same instance id within the session gets the same partitions back while the other
    member's assignment never moves."""
    create_topic(kafka, unique_topic, 4)
    group = f"g-{unique_topic}"
    journal: list = []
    s1 = MemberProcess(kafka, group, unique_topic, 6, **{"group.instance.id": "static-1"})
    try:
        wait_for(lambda: len(s1.owned()) == 4, "the static member owns all")
        other = Member("other", kafka, group, [unique_topic], journal=journal,
                       **{"group.instance.id": "static-2"})
        wait_for(lambda: len(s1.owned()) == 2 and len(other.owned()) == 2, "two each")
        before = other.owned()
        mine = s1.owned()
        s1.wait()  # closes after its 6 s: leaves with epoch -2
        assert s1.kinds()[-1] == "closed"
        events_before = len([e for e in journal if e[2] != "record"])
        s2 = MemberProcess(kafka, group, unique_topic, 6, **{"group.instance.id": "static-1"})
        wait_for(lambda: s2.owned() == mine, "the restarted member gets its partitions back", 30)
        s2.wait()
        assert other.owned() == before
        assert len([e for e in journal if e[2] != "record"]) == events_before, journal
        other.close()
    finally:
        s1.p.kill()


def test_max_poll_interval_leaves_then_rejoins(kafka, unique_topic, create_topic):
    """An application that stops polling for longer than max.poll.interval.ms: the member
    leaves (its partitions go to the other member), poll() raises MaxPollIntervalExceededError,
    on_lost runs, and polling again joins again."""
    create_topic(kafka, unique_topic, 2)
    group = f"g-{unique_topic}"
    journal: list = []
    slow = Member("slow", kafka, group, [unique_topic], journal=journal,
                  **{"max.poll.interval.ms": 3000})
    wait_for(lambda: len(slow.owned()) == 2, "slow owns both")
    other = Member("other", kafka, group, [unique_topic], journal=journal)
    wait_for(lambda: len(slow.owned()) == 1 and len(other.owned()) == 1, "one each")
    slow.polling.clear()
    wait_for(lambda: len(other.owned()) == 2, "the other member takes both", 30)
    slow.polling.set()
    wait_for(lambda: slow.errors, "MaxPollIntervalExceededError from poll()", 30)
    wait_for(lambda: len(slow.owned()) == 1 and len(other.owned()) == 1, "one each again", 30)
    # (an on_assign with nothing comes first: the broker's first answer may carry an empty
    # target, as Java's consumer also reports)
    events = [(k, w) for _, who, k, w in journal if who == "slow" and k != "record" and w]
    assert [k for k, _ in events] == ["assign", "revoke", "lost", "assign"], events
    slow.close()
    other.close()
    assert_one_owner_at_a_time(journal, callbacks=False)


def test_commits_resume_exactly(kafka, unique_topic, create_topic):
    """Records consumed and committed by one member are not read again by the next; the rest
    is read once: OffsetCommit carries the member epoch (v9+) and the broker takes it."""
    create_topic(kafka, unique_topic, 3)
    for p in range(3):
        produce(kafka, unique_topic, [b"%d-%d" % (p, i) for i in range(100)], partition=p)
    group = f"g-{unique_topic}"
    c = Consumer(member_cfg(kafka, group, **{"enable.auto.commit": False}))
    c.subscribe([unique_topic])
    first = []
    end = time.monotonic() + 30
    while len(first) < 120 and time.monotonic() < end:
        first += c.consume(120 - len(first), timeout=0.5)
    assert len(first) == 120
    c.commit(asynchronous=False)
    committed = {(tp.topic, tp.partition): tp.offset
                 for tp in c.committed([tp for tp in c.assignment()], timeout=10)}
    assert sum(max(0, o) for o in committed.values()) == 120, committed
    c.close()
    c2 = Consumer(member_cfg(kafka, group, **{"enable.auto.commit": False}))
    c2.subscribe([unique_topic])
    rest = []
    end = time.monotonic() + 30
    while len(rest) < 180 and time.monotonic() < end:
        rest += c2.consume(500, timeout=0.5)
    rest += c2.consume(500, timeout=1.0)
    c2.close()
    seen = [(r.partition, r.offset) for r in first + rest]
    assert sorted(seen) == [(p, o) for p in range(3) for o in range(100)]


def test_classic_only_settings_are_refused():
    for key, value in (("session.timeout.ms", 10000), ("heartbeat.interval.ms", 1000),
                       ("partition.assignment.strategy", "range")):
        with pytest.raises(ConfigError, match=key):
            Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                      "group.protocol": "consumer", key: value})


def test_an_unknown_remote_assignor_is_fatal(kafka, unique_topic, create_topic):
    """group.remote.assignor naming an assignor the broker lacks: UNSUPPORTED_ASSIGNOR reaches
    the application as an error from poll(), and the member does not retry in a loop."""
    create_topic(kafka, unique_topic, 1)
    c = Consumer(member_cfg(kafka, f"g-{unique_topic}", **{"group.remote.assignor": "nonesuch"}))
    c.subscribe([unique_topic])
    with pytest.raises(Exception, match="(?i)assignor"):
        end = time.monotonic() + 30
        while time.monotonic() < end:
            c.poll(0.2)
    assert c._coord.state is MemberState.UNJOINED
    c.close()


def test_cli_describes_a_kip848_group(kafka, unique_topic, create_topic, capsys):
    """kwire groups --describe of a KIP-848 group: ConsumerGroupDescribe's epochs, the broker's
    assignor, each member's subscription, assignment and target; kwire offsets of it."""
    from kwire.cli import main

    create_topic(kafka, unique_topic, 2)
    produce(kafka, unique_topic, [b"x%d" % i for i in range(10)], partition=0)
    group = f"g-{unique_topic}"
    journal: list = []
    m = Member("m", kafka, group, [unique_topic], journal=journal,
               **{"group.remote.assignor": "range", "client.id": "kip848-cli"})
    try:
        wait_for(lambda: len(m.owned()) == 2 and
                 sum(1 for e in list(journal) if e[2] == "record") == 10, "the member reads all")
        m.c.commit(asynchronous=False)
        assert main(["groups", "-b", kafka.bootstrap, "--describe", group, "--format", "json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert (d["state"], d["group_protocol"], d["assignor"]) == ("Stable", "consumer", "range")
        assert d["group_epoch"] >= 1 and d["assignment_epoch"] == d["group_epoch"]
        (mem,) = d["members"]
        assert mem["member_id"] == m.c._coord.member_id and mem["client_id"] == "kip848-cli"
        assert mem["member_epoch"] == m.c._coord.member_epoch and mem["member_type"] == "consumer"
        assert mem["subscribed_topics"] == [unique_topic] and mem["subscribed_regex"] is None
        assert mem["assignment"] == mem["target_assignment"] == [
            {"topic": unique_topic, "topic_id": mem["assignment"][0]["topic_id"], "partitions": [0, 1]}]

        assert main(["groups", "-b", kafka.bootstrap, "--describe", group]) == 0
        text = capsys.readouterr().out
        assert "protocol consumer (KIP-848)  assignor range" in text.splitlines()[0]
        assert f"{unique_topic}:0,1" in text and "kip848-cli" in text

        assert main(["offsets", "-b", kafka.bootstrap, "-g", group, "--format", "json"]) == 0
        o = json.loads(capsys.readouterr().out)
        assert [(r["partition"], r["committed"], r["end"], r["lag"]) for r in o["partitions"]] == \
            [(0, 10, 10, 0)]
        # (the owner of each partition comes from ConsumerGroupDescribe's assignments)
        assert (o["state"], o["partitions"][0]["client_id"]) == ("Stable", "kip848-cli")

        # the same through Admin and kwire.confluent's AdminClient (the CLI's source)
        from kwire.admin import Admin
        from kwire.confluent.admin import AdminClient, ConsumerGroupType
        with Admin({"bootstrap.servers": kafka.bootstrap}) as a:
            g = a.describe_consumer_groups([group])[group]
        assert (g.type, g.state, g.protocol, g.group_epoch) == ("consumer", "Stable", "range", d["group_epoch"])
        (gm,) = g.members
        assert gm.assignment == gm.target_assignment == ((unique_topic, 0), (unique_topic, 1))
        assert gm.member_epoch == mem["member_epoch"] and dict(g.topic_ids)[unique_topic] == \
            mem["assignment"][0]["topic_id"]
        cd = AdminClient({"bootstrap.servers": kafka.bootstrap}).describe_consumer_groups([group])[group].result(30)
        assert cd.type == ConsumerGroupType.CONSUMER and cd.partition_assignor == "range"
        assert sorted(tp.partition for tp in cd.members[0].target_assignment.topic_partitions) == [0, 1]
        import confluent_kafka.admin as ck_admin
        real_admin = ck_admin.AdminClient({"bootstrap.servers": kafka.bootstrap})  # (kept alive)
        real = real_admin.describe_consumer_groups([group])[group].result(30)
        assert (real.type.name, real.partition_assignor, real.state.name, len(real.members)) == \
            (cd.type.name, cd.partition_assignor, cd.state.name, len(cd.members))
    finally:
        m.close()


def test_a_confluent_kafka_program_runs_with_the_consumer_protocol(kafka, unique_topic, create_topic):
    """kwire.confluent with group.protocol=consumer: a classic confluent-kafka poll loop
    (on_assign, poll, commit(message=), close) reads every record once and its commits hold."""
    from kwire import confluent as ck

    create_topic(kafka, unique_topic, 2)
    for p in range(2):
        produce(kafka, unique_topic, [b"%d-%d" % (p, i) for i in range(50)], partition=p)
    group = f"g-{unique_topic}"
    conf = {"bootstrap.servers": kafka.bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    assigned = []
    c = ck.Consumer(conf)
    c.subscribe([unique_topic], on_assign=lambda _c, ps: assigned.extend(ps))
    seen = []
    end = time.monotonic() + 30
    while len(seen) < 100 and time.monotonic() < end:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        seen.append((m.partition(), m.offset()))
        c.commit(message=m, asynchronous=False)
    c.close()
    assert sorted(seen) == [(p, o) for p in range(2) for o in range(50)]
    assert sorted((tp.topic, tp.partition) for tp in assigned) == [(unique_topic, 0), (unique_topic, 1)]
    c2 = ck.Consumer(conf)
    committed = c2.committed([ck.TopicPartition(unique_topic, p) for p in range(2)], timeout=10)
    c2.close()
    assert [tp.offset for tp in committed] == [50, 50]
