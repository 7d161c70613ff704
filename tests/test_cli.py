"""The cluster commands of `kwire` (metadata, topics, groups, offsets, consume, produce), run
in-process through kwire.cli.main against Tansu and librdkafka's mock cluster, plus a few as
real subprocesses.  Broker-free pieces (record rendering, JSON input, tables, usage errors) are
in tests/test_cli_units.py."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kwire.cli import main
from kwire.embedded import TansuBroker
from kwire.producer import partition_for

from .fake_broker import FakeBroker, api_versions_ok, frame

ROOT = Path(__file__).resolve().parent.parent
GROUP_CONF = ["-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500"]


def run(capsys, *argv, stdin: bytes | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def one_line_error(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"kwire {command}: "), err
    assert "Traceback" not in err
    return lines[0]


def closed_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --- metadata and topics -------------------------------------------------------------------------

def test_metadata_and_topics_json_shape(broker, unique_topic, create_topic, capsys):
    n = create_topic(broker, unique_topic, 3)
    code, out, err = run(capsys, "metadata", "-b", broker.bootstrap, "--format", "json")
    assert code == 0, err
    md = json.loads(out)
    assert set(md) == {"cluster_id", "controller_id", "brokers", "topics"}
    assert md["brokers"] and all(set(b) == {"node_id", "host", "port", "rack"} for b in md["brokers"])
    node_ids = {b["node_id"] for b in md["brokers"]}
    topic = next(t for t in md["topics"] if t["name"] == unique_topic)
    assert set(topic) == {"name", "topic_id", "internal", "error", "partitions"}
    assert [p["partition"] for p in topic["partitions"]] == list(range(n))
    for p in topic["partitions"]:
        assert set(p) == {"partition", "leader", "leader_epoch", "replicas", "isr", "offline_replicas", "error"}
        assert p["leader"] in node_ids and p["leader"] in p["replicas"] and set(p["isr"]) <= node_ids

    code, out, err = run(capsys, "topics", "-b", broker.bootstrap, "--format", "json")
    assert code == 0, err
    listed = {t["name"]: t for t in json.loads(out)}
    assert listed[unique_topic]["partitions"] == n
    assert listed[unique_topic]["replication_factor"] == len(topic["partitions"][0]["replicas"])

    # plain text when piped: a header row, then one row per partition
    code, out, err = run(capsys, "metadata", "-b", broker.bootstrap, "-t", unique_topic)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("cluster ") and f"brokers {len(node_ids)}" in lines[0]
    rows = [line.split() for line in lines if line.startswith(unique_topic)]
    assert [int(r[1]) for r in rows] == list(range(n))
    assert re.search(r"^TOPIC +PARTITION +LEADER +REPLICAS +ISR", out, re.M) and "\x1b[" not in out


def test_topics_create_then_describe(peer, unique_topic, capsys):
    b = peer.bootstrap
    code, out, err = run(capsys, "topics", "-b", b, "--create", unique_topic, "--partitions", 4,
                         "--replication-factor", 1)
    assert code == 0, err
    assert out.strip() == f"created: topic {unique_topic} with 4 partitions, replication factor 1"

    code, out, err = run(capsys, "topics", "-b", b, "--describe", unique_topic, "--format", "json")
    assert code == 0, err
    t = json.loads(out)
    assert t["name"] == unique_topic and t["topic_id"] and not t["internal"]
    assert [p["partition"] for p in t["partitions"]] == [0, 1, 2, 3]
    assert all(len(p["replicas"]) == 1 and p["isr"] == p["replicas"] for p in t["partitions"])

    code, out, err = run(capsys, "topics", "-b", b, "--describe", unique_topic)
    assert code == 0, err
    assert out.startswith(f"topic {unique_topic}  id {t['topic_id']}  partitions 4  replication 1")

    code, out, err = run(capsys, "topics", "-b", b, "--create", unique_topic, "--partitions", 4)
    assert code == 1
    assert one_line_error(err, "topics") == f"kwire topics: topic '{unique_topic}' already exists"
    code, out, err = run(capsys, "topics", "-b", b, "--create", unique_topic, "--if-not-exists", "--format", "json")
    assert code == 0, err
    assert json.loads(out) == {"topic": unique_topic, "created": False, "partitions": 4,
                               "replication_factor": 1, "topic_id": t["topic_id"]}


# --- produce and consume -------------------------------------------------------------------------

def test_produce_lines_then_consume_them_as_json(broker, unique_topic, create_topic, capsys, monkeypatch):
    n_parts = create_topic(broker, unique_topic, 3)
    keys = [f"key-{i}" for i in range(100)]
    values = [f"value {i} ✓" if i % 7 else f"value {i}:with:colons" for i in range(100)]
    lines = "".join(f"{k}:{v}\n" for k, v in zip(keys, values)).encode()
    code, out, err = run(capsys, "produce", "-b", broker.bootstrap, "-t", unique_topic, "-k", ":",
                         stdin=lines, monkeypatch=monkeypatch)
    assert code == 0, err
    assert out.startswith(f"produced 100 records to {unique_topic} (partition ")

    code, out, err = run(capsys, "consume", "--bootstrap", broker.bootstrap, "--topic", unique_topic,
                         "--from-beginning", "--count", 100, "--format", "json")
    assert code == 0, err
    got = json_lines(out)
    assert len(got) == 100
    # Per partition: the records in the order they were produced, at offsets 0, 1, 2, ...
    expected: dict[int, list] = {}
    for k, v in zip(keys, values):
        expected.setdefault(partition_for("murmur2_random", k.encode(), n_parts), []).append((k, v))
    by_part: dict[int, list] = {}
    for r in got:
        assert r["topic"] == unique_topic and r["tstype"] == "create" and r["ts"] > 0
        assert r["headers"] == [] and "key_encoding" not in r and "payload_encoding" not in r
        by_part.setdefault(r["partition"], []).append(r)
    assert set(by_part) == set(expected)
    for p, recs in by_part.items():
        assert [r["offset"] for r in recs] == list(range(len(expected[p])))
        assert [(r["key"], r["payload"]) for r in recs] == expected[p]


def test_json_records_round_trip_through_produce(peer, unique_topic, capsys, monkeypatch):
    b = peer.bootstrap
    copy = unique_topic + "-copy"
    for t in (unique_topic, copy):
        assert run(capsys, "topics", "-b", b, "--create", t, "--partitions", 2, "--replication-factor", 1)[0] == 0
    source = [
        {"key": "k1", "value": "text", "headers": {"h1": "a", "h2": "b"}, "partition": 0, "timestamp": 1_700_000_000_000},
        {"key": None, "value": "AP8BAg==", "value_encoding": "base64", "partition": 1},
        {"key": "gAE=", "key_encoding": "base64", "value": None, "partition": 1,
         "headers": [{"key": "bin", "value": "/w==", "value_encoding": "base64"}, ["n", None]]},
        {"value": {"nested": [1, 2]}, "partition": 0},
    ]
    data = "".join(json.dumps(o) + "\n" for o in source).encode()
    code, out, err = run(capsys, "produce", "-b", b, "-t", unique_topic, "--format", "json",
                         stdin=data, monkeypatch=monkeypatch)
    assert code == 0, err
    assert out.strip() == f"produced 4 records to {unique_topic} (partition 0: 2, 1: 2)"

    code, out, err = run(capsys, "consume", "-b", b, "-t", unique_topic, "--from-beginning", "--count", 4,
                         "--format", "json")
    assert code == 0, err
    first = sorted(json_lines(out), key=lambda r: (r["partition"], r["offset"]))
    p0 = [r for r in first if r["partition"] == 0]
    p1 = [r for r in first if r["partition"] == 1]
    assert p0[0]["key"] == "k1" and p0[0]["payload"] == "text" and p0[0]["ts"] == 1_700_000_000_000
    assert p0[0]["headers"] == [{"key": "h1", "value": "a"}, {"key": "h2", "value": "b"}]
    assert p0[1]["payload"] == '{"nested":[1,2]}' and p0[1]["key"] is None
    assert p1[0]["payload"] == "AP8BAg==" and p1[0]["payload_encoding"] == "base64" and p1[0]["key"] is None
    assert p1[1]["key"] == "gAE=" and p1[1]["key_encoding"] == "base64" and p1[1]["payload"] is None
    assert p1[1]["headers"] == [{"key": "bin", "value": "/w==", "value_encoding": "base64"},
                                {"key": "n", "value": None}]

    # kwire consume --format json | kwire produce --format json: the same records elsewhere
    code, out2, err = run(capsys, "produce", "-b", b, "-t", copy, "--format", "json",
                          stdin=out.encode(), monkeypatch=monkeypatch)
    assert code == 0, err
    code, out3, err = run(capsys, "consume", "-b", b, "-t", copy, "--from-beginning", "--count", 4,
                          "--format", "json")
    assert code == 0, err
    second = sorted(json_lines(out3), key=lambda r: (r["partition"], r["offset"]))

    def strip(r):
        return {k: v for k, v in r.items() if k != "topic"}

    assert [strip(r) for r in second] == [strip(r) for r in first]

    # text and value formats
    code, out, err = run(capsys, "consume", "-b", b, "-t", unique_topic, "-p", 1, "--from-beginning",
                         "--count", 2)
    assert code == 0, err
    assert out.splitlines()[0].endswith("base64:AP8BAg==")
    assert "key=base64:gAE=" in out.splitlines()[1] and "bin=base64:/w==  n=null  null" in out
    code, out, err = run(capsys, "consume", "-b", b, "-t", unique_topic, "-p", 0, "--from-beginning",
                         "--count", 2, "--format", "value")
    assert code == 0, err
    assert out == 'text\n{"nested":[1,2]}\n'


def test_consume_from_offset_and_from_timestamp(peer, unique_topic, capsys, monkeypatch):
    b = peer.bootstrap
    assert run(capsys, "topics", "-b", b, "--create", unique_topic, "--partitions", 1, "--replication-factor", 1)[0] == 0
    since_ms = None
    for batch in range(3):  # three produce runs: three batches
        if batch == 1:  # Tansu finds timestamps by append time, Kafka by record time: both after this
            time.sleep(0.05)
            since_ms = int(time.time() * 1000)
            time.sleep(0.05)
        data = "".join(f"b{batch}-{i}\n" for i in range(4)).encode()
        code, out, err = run(capsys, "produce", "-b", b, "-t", unique_topic, stdin=data, monkeypatch=monkeypatch)
        assert code == 0, err

    code, out, err = run(capsys, "consume", "-b", b, "-t", unique_topic, "--offset", 5, "--count", 7,
                         "--format", "json")
    assert code == 0, err
    assert [(r["offset"], r["payload"]) for r in json_lines(out)] == \
        [(5, "b1-1"), (6, "b1-2"), (7, "b1-3"), (8, "b2-0"), (9, "b2-1"), (10, "b2-2"), (11, "b2-3")]

    code, out, err = run(capsys, "consume", "-b", b, "-t", unique_topic, "--from-timestamp", since_ms,
                         "--idle-timeout", 1, "--format", "json")
    assert code == 0, err
    got = json_lines(out)
    assert [r["payload"] for r in got] == [f"b{x}-{i}" for x in (1, 2) for i in range(4)]
    assert got[0]["offset"] == 4 and got[0]["ts"] >= since_ms



# --- groups and offsets ------------------------------------------------------------------------

class _Member:
    """A kwire Consumer in a group, polled by a thread, recording its JoinGroup metadata and its
    SyncGroup assignment as they crossed the wire."""

    def __init__(self, bootstrap, group, topic, client_id):
        from kwire.consumer import Consumer

        self.sent: dict[str, list] = {}
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
                                 tracer=self._trace)
        self.consumer.subscribe([topic])
        self.records = []
        self.want = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _trace(self, event):
        if event["api"] in ("JoinGroup", "SyncGroup"):
            self.sent.setdefault(f"{event['api']} {event['direction']}", []).append(event["body"])

    def _poll(self):
        while not self._stop.is_set():
            with self._lock:
                want = self.want - len(self.records)
                if want > 0:
                    self.records += self.consumer.consume(want, timeout=0.1)
            time.sleep(0.02)

    def read(self, n, timeout_s=20):
        with self._lock:
            self.want = n
        deadline = time.monotonic() + timeout_s
        while len(self.records) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.records) == n

    def commit(self):
        with self._lock:
            return self.consumer.commit(asynchronous=False)

    def close(self):
        self._stop.set()
        self.thread.join(5)
        self.consumer.close()


def test_groups_describe_and_offsets_of_a_live_consumer(peer, unique_topic, capsys, monkeypatch):
    b = peer.bootstrap
    group = f"g-{unique_topic}"
    assert run(capsys, "topics", "-b", b, "--create", unique_topic, "--partitions", 2, "--replication-factor", 1)[0] == 0
    data = "".join(json.dumps({"value": f"v{i}", "partition": i % 2}) + "\n" for i in range(10)).encode()
    assert run(capsys, "produce", "-b", b, "-t", unique_topic, "--format", "json", stdin=data,
               monkeypatch=monkeypatch)[0] == 0
    member = _Member(b, group, unique_topic, "cli-test-member")
    try:
        member.read(4)
        member.commit()
        code, out, err = run(capsys, "groups", "-b", b, "--format", "json")
        assert code == 0, err
        listed = {g["group"]: g for g in json.loads(out)}
        assert listed[group]["protocol_type"] == "consumer" and listed[group]["coordinator"] >= 0

        code, out, err = run(capsys, "groups", "-b", b, "--describe", group, "--format", "json")
        assert code == 0, err
        d = json.loads(out)
        assert d["group"] == group and d["state"] == "Stable" and d["protocol_type"] == "consumer"
        assert len(d["members"]) == 1
        assert d["members"][0]["member_id"].startswith("cli-test-member-")
        m = d["members"][0]
        if isinstance(peer, TansuBroker):
            # Tansu 0.6 sends empty member metadata and assignments: nothing to decode
            assert m["subscription"] is None and m["assignment"] is None
        else:  # Kafka's behaviour: DescribeGroups returns the member's metadata and assignment as sent
            assert m["subscription"]["topics"] == [unique_topic]
            assigned = {(tp["topic"], p) for tp in m["assignment"]["partitions"] for p in tp["partitions"]}
            assert assigned == {(unique_topic, 0), (unique_topic, 1)}, m["assignment"]

        consumed = {p: sum(1 for r in member.records if r.partition == p) for p in (0, 1)}
        committed = {p: n or None for p, n in consumed.items()}  # a partition not read: nothing committed
        lags = {p: None if n is None else 5 - n for p, n in committed.items()}
        code, out, err = run(capsys, "offsets", "-b", b, "-g", group, "-t", unique_topic, "--format", "json")
        assert code == 0, err
        o = json.loads(out)
        assert o["group"] == group and o["state"] == "Stable"
        assert [(r["topic"], r["partition"], r["committed"], r["log_start"], r["end"], r["lag"])
                for r in o["partitions"]] == [(unique_topic, p, committed[p], 0, 5, lags[p]) for p in (0, 1)]
        total = sum(lag for lag in lags.values() if lag is not None)
        assert o["total_lag"] == (None if all(n is None for n in committed.values()) else total)
        assert o["partitions_without_commit"] == sum(1 for n in committed.values() if n is None)

        code, out, err = run(capsys, "offsets", "-b", b, "-g", group)  # only what the group committed
        assert code == 0, err
        assert f"state Stable  total lag {total}" in out.splitlines()[0]
        assert len(out.splitlines()) == 3 + sum(1 for n in committed.values() if n)
        assert re.search(r"^TOPIC +PARTITION +COMMITTED +LOG_START +END +LAG +MEMBER +CLIENT_ID", out, re.M)
        if not isinstance(peer, TansuBroker):  # (Tansu sends no assignments: no owner to show)
            owner = m["member_id"]
            assert [r["member_id"] for r in o["partitions"]] == [owner, owner]
            assert [r["client_id"] for r in o["partitions"]] == ["cli-test-member"] * 2
            assert re.search(rf"^{unique_topic} .* {re.escape(owner)} +cli-test-member\b", out, re.M)
    finally:
        member.close()

    # What a broker that keeps member metadata (Kafka does) would answer, with the bytes this
    # kwire Consumer really sent and received: kwire groups --describe decodes them.
    join = member.sent["JoinGroup send"][-1]
    sync = member.sent["SyncGroup recv"][-1]
    with _describing_broker(group, join["protocols"][0]["name"], join["protocols"][0]["metadata"],
                            sync["assignment"]) as fake:
        code, out, err = run(capsys, "groups", "-b", fake.bootstrap, "--describe", group, "--format", "json")
        assert code == 0, err
        m = json.loads(out)["members"][0]
        assert m["subscription"]["topics"] == [unique_topic]
        assert m["subscription"]["owned_partitions"] == []
        assert m["assignment"]["partitions"] == [{"topic": unique_topic, "partitions": [0, 1]}]
        assert m["client_id"] == "cli-test-member" and m["client_host"] == "/127.0.0.1"

        code, out, err = run(capsys, "groups", "-b", fake.bootstrap, "--describe", group)
        assert code == 0, err
        assert out.splitlines()[0].startswith(f"group {group}  state Stable  protocol consumer/")
        row = out.splitlines()[3].split()
        assert row[1:3] == ["cli-test-member", "/127.0.0.1"]
        assert row[-1] == f"{unique_topic}:0,1" and row[-3] == unique_topic

    code, out, err = run(capsys, "groups", "-b", b, "--describe", "no-such-group")
    assert code == 1
    assert one_line_error(err, "groups") == "kwire groups: group 'no-such-group' not found"
    code, out, err = run(capsys, "offsets", "-b", b, "-g", "no-such-group")
    assert code == 1
    assert one_line_error(err, "offsets") == "kwire offsets: group 'no-such-group' not found"


class _describing_broker:
    """A scripted one-node cluster whose coordinator describes ``group`` with one member."""

    def __init__(self, group, protocol, metadata, assignment):
        self.answer = {"error_code": 0, "group_id": group, "group_state": "Stable", "protocol_type": "consumer",
                       "protocol_data": protocol, "authorized_operations": -1,
                       "members": [{"member_id": "cli-test-member-1", "group_instance_id": None,
                                    "client_id": "cli-test-member", "client_host": "/127.0.0.1",
                                    "member_metadata": metadata, "member_assignment": assignment}]}
        self.broker = FakeBroker(self.handle)

    def handle(self, key, version, cid, body):
        port = self.broker.port
        if key == 18:
            return api_versions_ok(version, cid, [{"api_key": k, "min_version": 0, "max_version": v}
                                                  for k, v in ((18, 3), (3, 12), (10, 3), (15, 5))])
        if key == 3:
            return frame("Metadata", version, cid, {
                "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": port, "rack": None}],
                "cluster_id": "fake", "controller_id": 1, "topics": []})
        if key == 10:
            return frame("FindCoordinator", version, cid, {"error_code": 0, "error_message": None, "node_id": 1,
                                                           "host": "127.0.0.1", "port": port})
        if key == 15:
            return frame("DescribeGroups", version, cid, {"groups": [self.answer]})
        return None

    def __enter__(self):
        return self.broker

    def __exit__(self, *exc):
        self.broker.close()


def test_consume_with_group_traces_a_consumers_whole_life(peer, unique_topic, capsys, monkeypatch):
    b = peer.bootstrap
    group = f"g-{unique_topic}"
    assert run(capsys, "topics", "-b", b, "--create", unique_topic, "--partitions", 2, "--replication-factor", 1)[0] == 0
    data = "".join(json.dumps({"value": f"v{i}", "partition": i % 2}) + "\n" for i in range(20)).encode()
    assert run(capsys, "produce", "-b", b, "-t", unique_topic, "--format", "json", stdin=data,
               monkeypatch=monkeypatch)[0] == 0

    # No committed offset + --from-beginning: ListOffsets(earliest); 1.5 s idle: heartbeats;
    # the end: OffsetCommit, then LeaveGroup on close.
    code, out, err = run(capsys, "consume", "-b", b, "-t", unique_topic, "-g", group, "--from-beginning",
                         "--idle-timeout", 1.5, "--format", "json", "--trace", "--trace-format", "json", *GROUP_CONF)
    assert code == 0, err
    assert len(json_lines(out)) == 20
    events = [json.loads(line) for line in err.splitlines()]  # every stderr line is a JSON frame
    first_seen = []
    for e in events:
        assert e["kind"] in ("request", "response") and e["api"]
        if e["api"] not in first_seen:
            first_seen.append(e["api"])
    lifecycle = ["ApiVersions", "Metadata", "FindCoordinator", "JoinGroup", "SyncGroup", "OffsetFetch",
                 "ListOffsets", "Fetch", "Heartbeat", "OffsetCommit", "LeaveGroup"]
    assert [api for api in first_seen if api in lifecycle] == lifecycle, first_seen
    commits = [e for e in events if e["api"] == "OffsetCommit" and e["kind"] == "request"]
    assert commits[-1]["body"]["group_id"] == group

    code, out, err = run(capsys, "offsets", "-b", b, "-g", group, "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["partitions"]
    assert sorted((r["partition"], r["lag"]) for r in rows) == [(0, 0), (1, 0)]
    assert sum(r["committed"] for r in rows) == 20 and all(r["committed"] == r["end"] for r in rows)


def test_offsets_on_the_mock_cluster(mock_cluster, unique_topic, create_topic, capsys, monkeypatch):
    """librdkafka's mock has no DescribeGroups/ListGroups and answers OffsetFetch for "every
    topic" with a null list: kwire offsets asks topic by topic there."""
    b = mock_cluster.bootstrap
    group = f"g-{unique_topic}"
    n = create_topic(mock_cluster, unique_topic)
    data = "".join(json.dumps({"value": f"v{i}", "partition": i % n}) + "\n" for i in range(4 * n)).encode()
    assert run(capsys, "produce", "-b", b, "-t", unique_topic, "--format", "json", stdin=data,
               monkeypatch=monkeypatch)[0] == 0
    code, out, err = run(capsys, "consume", "-b", b, "-t", unique_topic, "-g", group, "--from-beginning",
                         "--count", 4 * n, "--format", "json", *GROUP_CONF)
    assert code == 0, err
    assert len(json_lines(out)) == 4 * n
    code, out, err = run(capsys, "offsets", "-b", b, "-g", group, "--format", "json")
    assert code == 0, err
    o = json.loads(out)
    assert [(r["topic"], r["partition"], r["committed"], r["end"], r["lag"]) for r in o["partitions"]] == \
        [(unique_topic, p, 4, 4, 0) for p in range(n)]
    assert o["state"] is None and o["total_lag"] == 0 and o["partitions_without_commit"] == 0
    # a topic the group committed nothing for: no lag to add up, not "total lag 0"
    other = unique_topic + "-other"
    m = create_topic(mock_cluster, other)
    code, out, err = run(capsys, "offsets", "-b", b, "-g", group, "-t", other, "--format", "json")
    assert code == 0, err
    o = json.loads(out)
    assert o["total_lag"] is None and o["partitions_without_commit"] == m
    assert all(r["committed"] is None and r["lag"] is None for r in o["partitions"])
    code, out, err = run(capsys, "offsets", "-b", b, "-g", group, "-t", other)
    assert code == 0, err
    assert f"total lag - ({m} of {m} partitions have no committed offset)" in out.splitlines()[0], out
    code, out, err = run(capsys, "offsets", "-b", b, "-g", group + "-other")
    assert code == 1
    assert "has no committed offsets" in one_line_error(err, "offsets")


def test_consume_trace_text_without_a_group(peer, unique_topic, capsys, monkeypatch):
    b = peer.bootstrap
    assert run(capsys, "topics", "-b", b, "--create", unique_topic, "--partitions", 1, "--replication-factor", 1)[0] == 0
    assert run(capsys, "produce", "-b", b, "-t", unique_topic, stdin=b"a\nb\nc\n", monkeypatch=monkeypatch)[0] == 0
    code, out, err = run(capsys, "consume", "-b", b, "-t", unique_topic, "--from-beginning", "--count", 3,
                         "--format", "value", "--trace")
    assert code == 0, err
    assert out == "a\nb\nc\n"
    heads = [line for line in err.splitlines() if " → " in line or " ← " in line]
    apis = []
    for line in heads:
        api = next(w for w in line.split() if w in ("ApiVersions", "Metadata", "ListOffsets", "Fetch"))
        if api not in apis:
            apis.append(api)
    assert apis[:2] == ["ApiVersions", "Metadata"] and apis[-1] == "Fetch", heads
    # no group traffic: no FindCoordinator or JoinGroup frame (ApiVersions names them as keys)
    assert not [line for line in heads if "FindCoordinator" in line or "JoinGroup" in line], heads
    assert any(" ← " in line and "Fetch" in line and "rtt=" in line for line in heads)


def test_debug_protocol_logs_a_line_per_frame(peer, capsys):
    code, out, err = run(capsys, "metadata", "-b", peer.bootstrap, "-X", "debug=protocol", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["brokers"]
    log = [line for line in err.splitlines() if "kwire.protocol" in line]
    assert any("send" in line and "ApiVersions" in line for line in log), err
    assert any("recv" in line and "Metadata" in line for line in log), err
    # one bounded line per frame: ApiVersions' answer lists ~90 APIs, its body is cut short
    versions = next(line for line in log if "recv" in line and "ApiVersions" in line)
    assert len(versions) < 600 and "chars; --trace shows all)" in versions, versions
    # both ends of the connection, and the rtt to the microsecond
    assert re.search(r"127\.0\.0\.1:\d+->" + re.escape(peer.bootstrap) + r" ApiVersions v\d+ .* rtt=\d+\.\d{3}ms",
                     versions), versions


# --- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["metadata"], ["topics"], ["topics", "--describe", "x"], ["groups"], ["groups", "--describe", "g"],
    ["offsets", "-g", "g"], ["consume", "-t", "x", "--count", "1"], ["produce", "-t", "x"],
])
def test_unreachable_bootstrap_is_one_line_and_exit_1(argv, capsys, monkeypatch):
    start = time.monotonic()
    code, out, err = run(capsys, *argv, "-b", f"127.0.0.1:{closed_port()}", "--timeout", 3,
                         stdin=b"v\n", monkeypatch=monkeypatch)
    assert code == 1
    line = one_line_error(err, argv[0])
    assert "127.0.0.1" in line and ("refused" in line or "reach" in line), line
    assert time.monotonic() - start < 3


@pytest.mark.parametrize("argv", [["metadata"], ["consume", "-t", "x"], ["groups", "--describe", "g"]])
def test_a_silent_broker_fails_within_the_timeout(argv, capsys):
    with FakeBroker(lambda *a: None) as silent:  # accepts, never answers
        start = time.monotonic()
        code, out, err = run(capsys, *argv, "-b", silent.bootstrap, "--timeout", 1)
        elapsed = time.monotonic() - start
    assert code == 1
    one_line_error(err, argv[0])
    assert elapsed < 5, elapsed


def test_unknown_topic_is_one_line_and_exit_1(peer, unique_topic, capsys, monkeypatch):
    b = peer.bootstrap
    for argv in (["consume", "-t", unique_topic], ["produce", "-t", unique_topic],
                 ["topics", "--describe", unique_topic], ["metadata", "-t", unique_topic],
                 ["offsets", "-g", "g", "-t", unique_topic]):
        code, out, err = run(capsys, *argv, "-b", b, stdin=b"v\n", monkeypatch=monkeypatch)
        assert code == 1, argv
        assert f"unknown topic '{unique_topic}'" in one_line_error(err, argv[0])
    # nothing was created on the way
    code, out, err = run(capsys, "topics", "-b", b, "--format", "json")
    assert unique_topic not in {t["name"] for t in json.loads(out)}


def test_groups_on_a_cluster_without_list_groups(mock_cluster, capsys):
    code, out, err = run(capsys, "groups", "-b", mock_cluster.bootstrap)
    assert code == 1
    assert "ListGroups" in one_line_error(err, "groups")


# --- as real processes -------------------------------------------------------------------------------

def _kwire(*argv, stdin: bytes | None = None, timeout=60):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "kwire", *map(str, argv)], input=stdin, capture_output=True,
                          timeout=timeout, env=env, cwd=str(ROOT))


def test_produce_and_consume_as_processes(peer, unique_topic, capsys):
    b = peer.bootstrap
    assert run(capsys, "topics", "-b", b, "--create", unique_topic, "--partitions", 1, "--replication-factor", 1)[0] == 0
    values = [b"plain", b"\xff\xfe not utf-8", "ünïcode".encode(), b""]
    proc = _kwire("produce", "-b", b, "-t", unique_topic, stdin=b"".join(v + b"\n" for v in values))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().strip() == f"produced 4 records to {unique_topic} (partition 0: 4)"
    proc = _kwire("consume", "-b", b, "-t", unique_topic, "--from-beginning", "--count", 4, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    got = json_lines(proc.stdout.decode())
    assert [r["offset"] for r in got] == [0, 1, 2, 3]
    assert [r["payload"] for r in got] == ["plain", "//4gbm90IHV0Zi04", "ünïcode", ""]
    assert [r.get("payload_encoding") for r in got] == [None, "base64", None, None]

    proc = _kwire("consume", "-b", f"127.0.0.1:{closed_port()}", "-t", unique_topic)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("kwire consume: ") and "Traceback" not in err


def test_consume_waiting_for_more_than_there_is_says_so_and_stops_on_ctrl_c(peer, unique_topic, capsys):
    """--count 5 of a topic holding 2: like kafka-console-consumer it waits for more, but after
    10 s without records it says so on stderr, once, naming --idle-timeout; Ctrl-C then stops it
    with the records printed and exit 0 (a new user's trial waited 10 minutes in silence)."""
    import signal as _signal

    b = peer.bootstrap
    assert run(capsys, "topics", "-b", b, "--create", unique_topic, "--partitions", 1, "--replication-factor", 1)[0] == 0
    assert _kwire("produce", "-b", b, "-t", unique_topic, stdin=b"one\ntwo\n").returncode == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "kwire", "consume", "-b", b, "-t", unique_topic, "--from-beginning",
                             "--count", "5", "--format", "value"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=str(ROOT))
    try:
        line = proc.stderr.readline().decode()  # blocks until the hint (or an error) is written
        assert "2 of 5 records so far, none for 10 s; waiting for more" in line and "--idle-timeout" in line, line
        proc.send_signal(_signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.decode().splitlines() == ["one", "two"]
