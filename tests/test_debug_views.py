"""kwire decode's views on real traffic: filters, --summary, --stats, names, partial decodes,
TLS, packet numbers checked against Wireshark's tshark.

One capture (tcpdump on lo) is taken per module against Apache Kafka 4.3 (the session's `kafka`
fixture) while real clients work: confluent-kafka's AdminClient creates a topic and its
transactional producer commits one transaction and aborts another; kafka-python's and
confluent-kafka's consumers read it in two groups (read_uncommitted and read_committed), commit
and leave; kwire's NetworkClient asks for a topic that does not exist and lists offsets with the
EARLIEST/LATEST markers.  Every test below reads that capture, or a damaged copy of it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kwire.debug.capture import decode_capture
from kwire.protocol import api as P

from .capture_util import pcap_records
from .test_debug_capture import capturing, run_cli

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("KWIRE_UPDATE_GOLDEN", "") not in ("", "0")
MISSING_TOPIC = "kwire-debug-no-such-topic"


class Scenario:
    pcap: Path
    port: int
    topic: str
    group_kp: str
    group_ck: str
    kp_client_id: str


def _run_clients(bootstrap: str, topic: str, group_kp: str, group_ck: str) -> None:
    import confluent_kafka as ck
    import kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    from kwire.net import NetworkClient

    common = {"bootstrap.servers": bootstrap, "enable.metrics.push": False}
    admin = AdminClient(common)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = ck.Producer({**common, "transactional.id": f"txn-{topic}", "linger.ms": 1})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=b"c%d" % i, value=b"committed-%d" % i, partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, key=b"a%d" % i, value=b"aborted-%d" % i, partition=1)
    producer.flush(30)
    producer.abort_transaction(30)

    errors: list = []

    def kafka_python() -> None:
        try:
            kc = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group_kp,
                                     client_id="kp-views", auto_offset_reset="earliest",
                                     enable_auto_commit=False, consumer_timeout_ms=20000,
                                     session_timeout_ms=6000, heartbeat_interval_ms=300)
            seen = 0
            for _ in kc:  # read_uncommitted: the aborted records too
                seen += 1
                if seen == 5:
                    break
            time.sleep(0.7)  # a heartbeat or two
            kc.commit()
            kc.close()
            assert seen == 5, seen
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    t = threading.Thread(target=kafka_python)
    t.start()
    consumer = ck.Consumer({**common, "group.id": group_ck, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed", "enable.auto.commit": False,
                            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 30
    while seen < 3 and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    t.join(40)
    assert seen == 3, seen
    if errors:
        raise errors[0]

    client = NetworkClient({"bootstrap.servers": bootstrap, "client.id": "kwire-views"})
    try:
        client.request(None, "Metadata", lambda v: {"topics": [{"name": MISSING_TOPIC}],
                                                    "allow_auto_topic_creation": False}, timeout_ms=10_000)
        client.request(None, "ListOffsets", lambda v: {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2},
                                           {"partition_index": 1, "timestamp": -1}]}]}, timeout_ms=10_000)
    finally:
        client.close()


@pytest.fixture(scope="module")
def scenario(kafka, tmp_path_factory) -> Scenario:
    s = Scenario()
    s.port = kafka.port
    stamp = f"{os.getpid()}-{int(time.time() * 1000) % 100000}"
    s.topic, s.group_kp, s.group_ck = f"views-{stamp}", f"views-kp-{stamp}", f"views-ck-{stamp}"
    s.kp_client_id = "kp-views"
    with capturing(s.port, tmp_path_factory.mktemp("views")) as pcap:
        _run_clients(kafka.bootstrap, s.topic, s.group_kp, s.group_ck)
    s.pcap = pcap
    return s


@pytest.fixture(scope="module")
def decoded(scenario):
    return decode_capture(scenario.pcap, ports=[scenario.port], auto_detect=False)


def json_events(capsys, scenario, *args) -> tuple[int, list[dict]]:
    code, out, err = run_cli(capsys, str(scenario.pcap), "--port", str(scenario.port), "--no-auto",
                             "--format", "json", *args)
    return code, [json.loads(line) for line in out.splitlines()]


# --- filters ------------------------------------------------------------------------------

def test_api_version_corr_and_broker_filters(capsys, scenario, decoded):
    code, events = json_events(capsys, scenario, "--api", "Produce,fetch")
    assert events and {e["api"] for e in events} == {"Produce", "Fetch"}
    want = [(i.api, i.correlation_id, i.packet) for i in decoded.frames() if i.api in ("Produce", "Fetch")]
    assert [(e["api"], e["correlation_id"], e["packet"]) for e in events] == want
    # Api keys and globs name the same APIs.
    _, by_key = json_events(capsys, scenario, "--api", "0", "--api", "Fet*")
    assert by_key == events
    versions = sorted({i.version for i in decoded.frames() if i.api == "Fetch"})
    _, fetch = json_events(capsys, scenario, "--api", "Fetch", "--version", f"{versions[-1]}")
    assert fetch and all(e["version"] == versions[-1] for e in fetch)
    _, low = json_events(capsys, scenario, "--corr", "1-2")
    assert low and all(e["correlation_id"] in (1, 2) for e in low)
    assert {e["api"] for e in low} >= {"ApiVersions"}
    _, broker = json_events(capsys, scenario, "--broker", f"127.0.0.1:{scenario.port}")
    assert len(broker) == len([i for i in decoded.items if i.broker])
    _, other = json_events(capsys, scenario, "--broker", "127.0.0.1:1")
    assert other == []
    # Bad filter values are usage errors.
    for argv, msg in [(["--api", "NoSuchApi"], "no such API"), (["--version", "x"], "--version 'x'")]:
        code, _, err = run_cli(capsys, str(scenario.pcap), *argv)
        assert code == 2 and msg in err, err


def test_client_id_filter_keeps_request_response_pairs(capsys, scenario, decoded):
    _, events = json_events(capsys, scenario, "--client-id", scenario.kp_client_id)
    assert events
    assert all(e["client_id"] == scenario.kp_client_id for e in events)
    reqs = {(e["connection"], e["correlation_id"]) for e in events if e["kind"] == "request"}
    resps = {(e["connection"], e["correlation_id"]) for e in events if e["kind"] == "response"}
    assert resps and resps <= reqs
    assert {"JoinGroup", "SyncGroup", "Fetch", "OffsetCommit", "LeaveGroup"} <= {e["api"] for e in events}
    # A glob matches it too; a client id nobody used matches nothing.
    _, glob = json_events(capsys, scenario, "--client-id", "kp-vie*")
    assert glob == events
    assert json_events(capsys, scenario, "--client-id", "nobody")[1] == []


def test_group_filter_is_the_groups_conversation(capsys, scenario, decoded):
    _, events = json_events(capsys, scenario, "--group", scenario.group_ck)
    apis = {e["api"] for e in events}
    assert {"FindCoordinator", "JoinGroup", "SyncGroup", "OffsetFetch", "OffsetCommit", "LeaveGroup"} <= apis
    assert "Fetch" not in apis and "Produce" not in apis
    # Every response shown with its request; the requests that change the group answered.
    pairs = {}
    for e in events:
        pairs.setdefault((e["connection"], e["correlation_id"]), []).append(e)
    for k, frames in pairs.items():
        kinds = sorted(e["kind"] for e in frames)
        assert kinds in (["request", "response"], ["request"]), (k, kinds)
        if kinds == ["request"]:  # a consumer closing does not wait for its last requests' answers
            assert frames[0]["api"] in ("Heartbeat", "LeaveGroup", "FindCoordinator"), frames[0]
    # Responses that do not repeat the group id (JoinGroup's, Heartbeat's) come with their request.
    assert any(e["api"] == "JoinGroup" and e["kind"] == "response" for e in events)
    # Nothing of the other group.
    kp = {(e["connection"], e["correlation_id"]) for e in json_events(capsys, scenario, "--group", scenario.group_kp)[1]}
    assert kp and not kp & set(pairs)
    for e in events:
        if e["kind"] == "request" and e["api"] in ("JoinGroup", "SyncGroup", "OffsetCommit", "LeaveGroup"):
            assert e["body"]["group_id"] == scenario.group_ck


def test_topic_filter_names_topics_by_id_too(capsys, scenario, decoded):
    _, events = json_events(capsys, scenario, "--topic", scenario.topic)
    apis = {(e["api"], e["kind"]) for e in events}
    assert {("Produce", "request"), ("Produce", "response"), ("CreateTopics", "request"),
            ("ListOffsets", "request"), ("Fetch", "request"), ("Fetch", "response")} <= apis
    # Fetch >= 13 names topics by id only: the capture's Metadata responses give the name,
    # shown beside the id.
    fetches = [e for e in events if e["api"] == "Fetch" and e["kind"] == "request" and e["version"] >= 13]
    assert fetches
    for e in fetches:
        for t in e["body"]["topics"]:
            assert "name" not in t and t["topic"] == scenario.topic
    assert json_events(capsys, scenario, "--topic", MISSING_TOPIC + "-not-even-asked")[1] == []


def test_errors_filter_and_error_names(capsys, scenario, decoded):
    code, events = json_events(capsys, scenario, "--errors")
    assert events
    for e in events:
        assert e["errors"], e
    missing = [e for e in events if e["api"] == "Metadata"]
    assert missing and missing[0]["errors"] == {"UNKNOWN_TOPIC_OR_PARTITION": 1}
    topic = missing[0]["body"]["topics"][0]
    assert (topic["name"], topic["error_code"], topic["error"]) == (MISSING_TOPIC, 3, "UNKNOWN_TOPIC_OR_PARTITION")
    # Group joins of the classic protocol start with MEMBER_ID_REQUIRED (KIP-394).
    assert any(e["api"] == "JoinGroup" and "MEMBER_ID_REQUIRED" in e["errors"] for e in events)
    # Filters combine: every one must hold.
    _, both = json_events(capsys, scenario, "--errors", "--api", "Metadata")
    assert both == missing


# --- views ----------------------------------------------------------------------------------

def test_summary_one_line_per_frame(capsys, scenario, decoded):
    code, out, _ = run_cli(capsys, str(scenario.pcap), "--port", str(scenario.port), "--no-auto", "--summary")
    lines = out.splitlines()
    assert lines[-1].startswith("-- ")
    assert len(lines) - 1 == len(decoded.items)
    for item, line in zip(decoded.items, lines):
        if item.kind not in ("request", "response"):
            continue
        assert line.split("  ")[1] == f"#{item.packet}"
        assert f"{item.api} v{item.version}  corr={item.correlation_id}  {item.size_bytes} B" in line
        cid = item.client_id if item.kind == "request" else item.request.client_id
        assert json.dumps(cid) in line
    metadata = [line for line in lines if "Metadata v" in line and "UNKNOWN_TOPIC_OR_PARTITION" in line]
    assert len(metadata) == 1 and "←" in metadata[0] and "rtt=" in metadata[0]
    # JSON summary: the same objects without bodies.
    _, events = json_events(capsys, scenario, "--summary")
    assert events and all("body" not in e for e in events)
    assert [e["packet"] for e in events] == [i.packet for i in decoded.items]


def test_names_in_json_and_text(capsys, scenario):
    _, events = json_events(capsys, scenario, "--records", "full")
    produce = next(e for e in events if e["api"] == "Produce" and e["kind"] == "request")
    assert (produce["body"]["acks"], produce["body"]["acks_name"]) == (-1, "ALL")
    fetch_rc = [e for e in events if e["api"] == "Fetch" and e["kind"] == "request"
                and e["body"]["isolation_level"] == 1]
    assert fetch_rc and fetch_rc[0]["body"]["isolation_level_name"] == "READ_COMMITTED"
    lo = next(e for e in events if e["api"] == "ListOffsets" and e["kind"] == "request" and e["client_id"] == "kwire-views")
    parts = lo["body"]["topics"][0]["partitions"]
    assert [(p["timestamp"], p["timestamp_name"]) for p in parts] == [(-2, "EARLIEST"), (-1, "LATEST")]
    versions = next(e for e in events if e["api"] == "ApiVersions" and e["kind"] == "response")
    keys = {k["api_key"]: k["api"] for k in versions["body"]["api_keys"]}
    assert keys[0] == "Produce" and keys[1] == "Fetch" and keys[18] == "ApiVersions"
    coord = {e["body"]["key_type_name"] for e in events if e["api"] == "FindCoordinator" and e["kind"] == "request"}
    assert coord == {"GROUP", "TRANSACTION"}  # the consumers' groups, the producer's transactions
    # Every error_code has its name beside it, NONE included.
    assert all(p["error"] == "NONE" for t in next(e for e in events if e["api"] == "Produce" and e["kind"] == "response")
               ["body"]["responses"] for p in t["partition_responses"])
    # Record batches in full: transactional batches, the control records that end them.
    batches = [b for e in events if e["api"] == "Fetch" and e["kind"] == "response"
               for t in e["body"]["responses"] for p in t["partitions"] if p["records"]
               for b in p["records"].get("contents", ())]
    data = [b for b in batches if not b["is_control"]]
    control = [b for b in batches if b["is_control"]]
    assert data and control
    assert all(b["crc_ok"] and b["magic"] == 2 and b["timestamp_type"] == "CREATE_TIME" for b in batches)
    assert all(b["is_transactional"] and b["producer_id"] >= 0 and b["producer_epoch"] >= 0 for b in batches)
    assert {r["control"]["type"] for b in control for r in b["records"]} == {"COMMIT", "ABORT"}
    assert {r["value"] for b in data for r in b["records"]} >= {b"committed-0".hex(), b"aborted-1".hex()}
    # Text: names folded beside their numbers.
    code, out, _ = run_cli(capsys, str(scenario.pcap), "--port", str(scenario.port), "--no-auto",
                           "--records", "full", "--api", "Fetch,Produce,ListOffsets,Metadata")
    assert "  acks: -1 (ALL)" in out
    assert "isolation_level: 1 (READ_COMMITTED)" in out
    assert "timestamp: -2 (EARLIEST)" in out
    assert "error_code: 3 (UNKNOWN_TOPIC_OR_PARTITION)" in out
    assert "topic_id: " in out and f"({scenario.topic})" in out
    assert "control COMMIT v0" in out and "control ABORT v0" in out
    assert "transactional, control" in out and "crc 0x" in out and " ok" in out


def test_stats(capsys, scenario, decoded):
    code, out, _ = run_cli(capsys, str(scenario.pcap), "--port", str(scenario.port), "--no-auto",
                           "--stats", "--format", "json")
    stats = json.loads(out)
    want: dict = {}
    for i in decoded.items:
        if i.api is not None and i.kind in ("request", "response", "undecoded"):
            counts = want.setdefault((i.api, i.version), {"requests": 0, "responses": 0, "undecoded": 0})
            counts[{"request": "requests", "response": "responses", "undecoded": "undecoded"}[i.kind]] += 1
    got = {(a["api"], a["version"]): {k: a[k] for k in ("requests", "responses", "undecoded")}
           for a in stats["apis"]}
    assert got == want
    # Transaction APIs (which kwire's tables may lack: then counted, and named, as undecoded)
    assert sum(got[("EndTxn", 1)].values()) == 4  # commit and abort, each answered
    assert stats["errors"]["UNKNOWN_TOPIC_OR_PARTITION"]["apis"]["Metadata"] == 1
    assert stats["errors"]["MEMBER_ID_REQUIRED"]["count"] >= 2
    fetch_rtt = [r for r in stats["rtt"] if r["api"] == "Fetch"]
    assert fetch_rtt and fetch_rtt[0]["broker"] == f"127.0.0.1:{scenario.port}"
    assert all(r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["max_ms"] for r in stats["rtt"])
    tps = {(t["topic"], t["partition"]): t for t in stats["topic_partitions"]}
    assert tps[(scenario.topic, 0)]["produced_records"] == 3
    assert tps[(scenario.topic, 1)]["produced_records"] == 2
    # Both groups fetched the data batches (and the control batches the broker wrote).
    assert tps[(scenario.topic, 0)]["fetched_records"] >= 2 * 4
    for group, client in ((scenario.group_kp, "kp-views"), (scenario.group_ck, "rdkafka")):
        g = stats["groups"][group]
        assert len(g["members"]) == 1, g["members"]
        (member, m), = g["members"].items()
        # Usually one join; a loaded machine can make a client rejoin (seen with kafka-python:
        # generation 2), and the stats must count what the capture shows.
        events = [e["event"] for e in g["timeline"]]
        joined = sum(1 for e in events if e.startswith("joined"))
        assert m["client_id"] == client and m["joins"] == joined >= 1
        assert m["assignments"] == events.count("assigned") >= 1
        assert m["commits"] >= 1 and m["left"]
        assert events[:2] == ["JoinGroup request", "join failed"]
        assert "joined (leader)" in events and "assigned" in events and events[-1] == "leave"
        # the last assignment: a rejoin's first one can be empty (kafka-python joined before it
        # knew the topic's partitions, then rejoined)
        assigned = [e for e in g["timeline"] if e["event"] == "assigned"][-1]["assigned"]
        assert sorted(assigned) == [f"{scenario.topic}-0", f"{scenario.topic}-1"]
    code, text, _ = run_cli(capsys, str(scenario.pcap), "--port", str(scenario.port), "--no-auto", "--stats")
    assert "requests and responses per API and version:" in text
    assert "UNKNOWN_TOPIC_OR_PARTITION" in text and f"group '{scenario.group_ck}'" in text
    assert f"{scenario.topic}-0" in text and "p99" in text


def _legacy_message(offset: int, magic: int, key, value, *, attributes: int = 0,
                    timestamp_ms: int = 1_700_000_000_000) -> bytes:
    """One magic 0/1 message: offset:int64 size:int32 crc:uint32 magic:int8 attributes:int8
    [timestamp:int64 (magic 1)] key:bytes value:bytes; CRC-32 over magic..end."""
    import struct
    import zlib

    def b(x):
        return struct.pack(">i", -1) if x is None else struct.pack(">i", len(x)) + x

    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp_ms) if magic == 1 else b"") \
        + b(key) + b(value)
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def test_record_batches_in_full_for_every_magic(tmp_path, capsys):
    """--records full on a Fetch response carrying a magic 0 message, a magic 1 message, a
    gzip-compressed magic 1 wrapper and a magic 2 batch whose CRC was damaged: every header
    field, the CRC verdict, timestamp types and compression by name, every record."""
    import gzip
    import struct

    from .capture_util import CaptureBuilder, record_batch

    inner = _legacy_message(0, 1, b"i0", b"inner-0") + _legacy_message(1, 1, None, b"inner-1")
    # A compressed magic 1 wrapper carries its last inner offset; inner offsets are relative.
    wrapper = _legacy_message(7, 1, None, gzip.compress(inner), attributes=1)
    good = record_batch(8, [(b"k8", b"v8")])
    bad = bytearray(record_batch(9, [(b"k9", b"v9")]))
    bad[17:21] = struct.pack(">I", struct.unpack_from(">I", bad, 17)[0] ^ 1)  # the stored CRC
    records = (_legacy_message(4, 0, b"m0", b"magic-0") + _legacy_message(5, 1, b"m1", b"magic-1") + wrapper
               + good + bytes(bad))
    b = CaptureBuilder().handshake()
    b.send(P.encode_request("Fetch", 4, {"replica_id": -1, "max_wait_ms": 1, "min_bytes": 1, "max_bytes": 1 << 20,
                                         "isolation_level": 1, "topics": [{"topic": "legacy", "partitions": [
                                             {"partition": 0, "fetch_offset": 4, "partition_max_bytes": 1 << 20}]}]},
                            correlation_id=1, client_id="legacy"))
    b.send(P.encode_response("Fetch", 4, {"responses": [{"topic": "legacy", "partitions": [
        {"partition_index": 0, "high_watermark": 9, "last_stable_offset": 9, "records": records}]}]},
        correlation_id=1), to_broker=False)
    path = b.write(tmp_path / "legacy.pcap")
    code, out, _ = run_cli(capsys, str(path), "--records", "full", "--format", "json")
    resp = [json.loads(line) for line in out.splitlines()][1]
    rs = resp["body"]["responses"][0]["partitions"][0]["records"]
    assert "CRC" in rs["error"] or "crc" in rs["error"].lower()  # the strict decode fails...
    contents = rs["contents"]  # ...and each batch is still shown, with its own verdict
    assert [(c["magic"], c["base_offset"], c["compression"], c["crc_ok"]) for c in contents] == [
        (0, 4, "none", True), (1, 5, "none", True), (1, 7, "gzip", True), (2, 8, "none", True),
        (2, 9, "none", False)]
    assert [(c["first_offset"], c["last_offset"]) for c in contents] == [(4, 4), (5, 5), (6, 7), (8, 8), (9, 9)]
    assert [c["timestamp_type"] for c in contents] == [
        "NO_TIMESTAMP_TYPE", "CREATE_TIME", "CREATE_TIME", "CREATE_TIME", "CREATE_TIME"]
    assert [[(r["offset"], r["value"]) for r in c["records"]] for c in contents] == [
        [(4, b"magic-0".hex())], [(5, b"magic-1".hex())], [(6, b"inner-0".hex()), (7, b"inner-1".hex())],
        [(8, b"v8".hex())], [(9, b"v9".hex())]]
    v2 = contents[3]
    assert (v2["producer_id"], v2["producer_epoch"], v2["base_sequence"], v2["last_offset_delta"],
            v2["records_count"], v2["base_timestamp"], v2["max_timestamp"]) == (
        -1, -1, -1, 0, 1, 1_700_000_000_000, 1_700_000_000_000)
    assert code == 1  # a record set that does not decode strictly is a problem
    code, out, _ = run_cli(capsys, str(path), "--records", "full")
    assert "batch offsets 4-4, 1 record, magic 0, none, crc 0x" in out
    # the wrapper's own offset is its last inner record's: the batch spans 6-7
    assert "batch offsets 6-7, 2 records, magic 1, gzip, wrapper offset 7" in out
    assert "MISMATCH" in out and "CREATE_TIME base 2023-11-14T22:13:20.000000Z" in out
    assert 'key "i0"  value "inner-0"' in out


def test_stats_group_timeline_through_a_rebalance(kafka, scenario, tmp_path, capsys):
    """Two confluent-kafka consumers in one group, the second joining while the first is
    assigned: the first learns of the rebalance from a heartbeat (REBALANCE_IN_PROGRESS), rejoins,
    and both get partitions in the next generation -- as --stats tells it."""
    import confluent_kafka as ck

    group = f"rebalance-{scenario.topic}"
    conf = {"bootstrap.servers": kafka.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 200, "enable.metrics.push": False}

    def assigned(c, want: int, deadline_s: float = 30) -> None:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            c.poll(0.1)
            if len(c.assignment()) == want:
                return
        pytest.fail(f"{c} not assigned {want} partitions")

    with capturing(kafka.port, tmp_path) as pcap:
        first = ck.Consumer({**conf, "client.id": "first"})
        first.subscribe([scenario.topic])
        assigned(first, 2)
        second = ck.Consumer({**conf, "client.id": "second"})
        second.subscribe([scenario.topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (len(first.assignment()) == 1 and len(second.assignment()) == 1):
            first.poll(0.05)
            second.poll(0.05)
        assert len(first.assignment()) == len(second.assignment()) == 1
        second.close()
        first.close()
    code, out, _ = run_cli(capsys, str(pcap), "--port", str(kafka.port), "--no-auto", "--stats", "--format", "json",
                           "--group", group)
    g = json.loads(out)["groups"][group]
    assert len(g["generations"]) >= 2, g["generations"]
    members = {m["client_id"]: m for m in g["members"].values()}
    assert set(members) == {"first", "second"}
    assert members["first"]["rebalances"] >= 1 and members["first"]["joins"] >= 2
    assert len(members["first"]["generations"]) >= 2 and members["second"]["joins"] >= 1
    events = [(e["client_id"], e["event"]) for e in g["timeline"]]
    rebalance = events.index(("first", "rebalance"))
    assert ("first", "joined (leader)") in events[rebalance:] or ("first", "joined") in events[rebalance:]
    assigned_events = [e for e in g["timeline"] if e["event"] == "assigned" and e["client_id"] == "second"]
    assert assigned_events and len(assigned_events[-1]["assigned"]) == 1
    assert all(m["left"] for m in members.values())
    code, text, _ = run_cli(capsys, str(pcap), "--port", str(kafka.port), "--no-auto", "--stats", "--group", group)
    assert "rebalance  errors REBALANCE_IN_PROGRESS" in text


# --- packet numbers against Wireshark ---------------------------------------------------------

def test_packet_numbers_and_headers_agree_with_tshark(scenario, decoded):
    """For every Kafka request tshark's dissector finds (decode-as on the broker port), the packet
    number, api key, version and correlation id kwire reports are the same; and kwire finds no
    request tshark does not."""
    tshark = shutil.which("tshark")
    assert tshark, "tshark is missing: `make test` installs it (tools/system-deps.sh)"
    out = subprocess.run([tshark, "-r", str(scenario.pcap), "-n", "-d", f"tcp.port=={scenario.port},kafka",
                          "-Y", "kafka.request_key && tcp.srcport != %d" % scenario.port, "-T", "fields",
                          "-E", "occurrence=a", "-E", "aggregator=|",
                          "-e", "frame.number", "-e", "kafka.request_key", "-e", "kafka.api_version",
                          "-e", "kafka.correlation_id"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    theirs = set()
    for line in out.splitlines():
        frame, keys, versions, corrs = line.split("\t")
        for k, v, c in zip(keys.split("|"), versions.split("|"), corrs.split("|")):
            theirs.add((int(frame), int(k), int(v), int(c)))
    # Requests kwire's tables lack (the transaction APIs) are undecoded, their headers read.
    mine = {(i.packet, i.api_key, i.version, i.correlation_id) for i in decoded.items
            if i.to_broker and i.kind in ("request", "undecoded") and i.api_key is not None}
    assert len(theirs) > 50
    assert theirs == mine, (sorted(theirs - mine)[:5], sorted(mine - theirs)[:5])


# tshark's Kafka fields -> the body keys that hold the same values in kwire's decode
TSHARK_FIELDS = {
    "kafka.consumer_group": {"group_id", "key"}, "kafka.member_id": {"member_id"},
    "kafka.group_leader_id": {"leader"}, "kafka.generation_id": {"generation_id", "generation_id_or_member_epoch"},
    "kafka.error": {"error_code", "partition_error_code"}, "kafka.topic_name": {"name", "topic"},
    "kafka.partition_id": {"partition_index", "partition", "index", "partitions"},
    "kafka.protocol_type": {"protocol_type"}, "kafka.protocol_name": {"protocol_name", "name"},
    "kafka.session_timeout": {"session_timeout_ms"}, "kafka.rebalance_timeout": {"rebalance_timeout_ms"},
    "kafka.throttle_time": {"throttle_time_ms"}, "kafka.coordinator_key": {"key"},
    "kafka.node_id": {"node_id"}, "kafka.host": {"host"}, "kafka.port": {"port"},
}


def _values(body, keys: set) -> set[str]:
    out: set[str] = set()

    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                if k in keys and not isinstance(x, (dict, list)):
                    out.add("[ Null ]" if x is None else str(x))  # tshark's null
                elif k in keys and isinstance(x, list):
                    out.update(str(e) for e in x if not isinstance(e, (dict, list)))
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(body)
    return out


def test_values_agree_with_tshark(scenario, decoded):
    """Wireshark 4.0's Kafka dissector stops at old versions (Produce <= 8, Fetch <= 11, Metadata
    <= 9...); for every frame it decodes without an expert warning, each value it shows for the
    fields above is one kwire's decode of the same packet holds, and the header agrees."""
    tshark = shutil.which("tshark")
    assert tshark, "tshark is missing: `make test` installs it (tools/system-deps.sh)"
    fields = ["frame.number", "tcp.srcport", "kafka.correlation_id", "kafka.api_version", "kafka.client_id",
              "_ws.expert.message", *TSHARK_FIELDS]
    cmd = [tshark, "-r", str(scenario.pcap), "-n", "-d", f"tcp.port=={scenario.port},kafka", "-Y", "kafka",
           "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=\x1f"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    by_packet: dict = {}
    for i in decoded.frames():
        by_packet.setdefault((i.packet, i.to_broker), []).append(i)
    compared = set()
    for line in out.splitlines():
        row = dict(zip(fields, line.split("\t")))
        if row["_ws.expert.message"]:
            continue  # tshark itself says it could not decode it all
        to_broker = int(row["tcp.srcport"]) != scenario.port
        mine = by_packet.get((int(row["frame.number"]), to_broker))
        if not mine:
            # kwire's tables lack the transaction APIs: those frames are undecoded, not wrong
            undecoded = [i for i in decoded.items if i.packet == int(row["frame.number"]) and i.kind == "undecoded"]
            assert undecoded and all(i.api_key not in P.APIS for i in undecoded), row
            continue
        assert set(row["kafka.correlation_id"].split("\x1f")) == {str(i.correlation_id) for i in mine}, row
        if to_broker:
            assert set(row["kafka.api_version"].split("\x1f")) == {str(i.version) for i in mine}, row
            if row["kafka.client_id"]:
                assert set(row["kafka.client_id"].split("\x1f")) == {i.client_id for i in mine}, row
        for f, keys in TSHARK_FIELDS.items():
            if not row[f]:
                continue
            theirs = set(row[f].split("\x1f"))
            ours = set().union(*(_values(i.body, keys) for i in mine))
            assert theirs <= ours, (row["frame.number"], f, theirs, ours)
            compared.add((mine[0].api, f))
    # What tshark 4.0 decodes cleanly here: the classic group APIs, FindCoordinator, ApiVersions.
    assert {a for a, _ in compared} >= {"FindCoordinator", "Heartbeat"}, compared
    assert len(compared) >= 8, compared


# --- partial decodes on real bytes ---------------------------------------------------------------

def test_snap_length_cut_frames_decode_partially(tmp_path, capsys, scenario, decoded):
    """The real capture rewritten by editcap with a 200-byte snap length: each cut frame shows
    the fields before the cut, the reason, the position; nothing is invented."""
    editcap = shutil.which("editcap")
    assert editcap, "editcap is missing (tools/system-deps.sh installs tshark)"
    cut = tmp_path / "snap.pcap"
    subprocess.run([editcap, "-s", "200", str(scenario.pcap), str(cut)], check=True, timeout=60)
    result = decode_capture(cut, ports=[scenario.port], auto_detect=False)
    short = [i for i in result.items if i.kind == "gap"]
    # Each says which packets were captured short -- but for holes the capture itself had (on a
    # busy machine tcpdump may drop packets).
    snapped = [g for g in short if "captured" in g.reason and "snap length" in g.reason]
    assert snapped and len(snapped) >= len(short) - decoded.stats["gaps"]
    partial = [i for i in result.items if i.kind == "undecoded" and i.partial is not None]
    assert partial
    fetch = [i for i in partial if i.api == "Fetch" and not i.to_broker]
    assert fetch, [(i.api, i.reason) for i in partial]
    p = fetch[0].partial
    assert "the capture has" in p.note and p.header["correlation_id"] == fetch[0].correlation_id
    assert p.body is not None and "throttle_time_ms" in p.body and p.position > 4
    # Whole frames still decode as they did.
    whole = {(i.connection, i.correlation_id, i.kind) for i in result.frames()}
    before = {(i.connection, i.correlation_id, i.kind): i.body for i in decoded.frames()}
    assert whole and all(k in before for k in whole)
    code, out, _ = run_cli(capsys, str(cut), "--port", str(scenario.port), "--no-auto", "--api", "Fetch")
    assert code == 1
    assert "decoded before the failure:" in out and "stopped: at byte" in out and "the rest, from byte" in out


def test_damaged_real_response_as_hex(capsys, decoded):
    """A real Fetch response with a record set (re-encoded from what kwire decoded: the same
    size, byte for byte a round trip), cut inside its record set: the fields decoded before the
    failure, where it stopped, the rest in hex; as JSON too."""
    resp = next(i for i in decoded.frames("response") if i.api == "Fetch" and i.size_bytes > 200)
    frame = P.encode_response("Fetch", resp.version, resp.body, correlation_id=resp.correlation_id)
    assert len(frame) == resp.size_bytes
    body = frame[4:-30]
    cut = len(body).to_bytes(4, "big") + body  # a consistent size prefix: a truncated frame
    code, out, err = run_cli(capsys, "--hex", cut.hex(), "--response", "--api", "Fetch", "--version",
                             str(resp.version))
    assert code == 1, err
    assert "    correlation_id: %d" % resp.correlation_id in out
    assert "    throttle_time_ms: " in out and "responses:" in out
    assert re.search(r"while reading responses\[0\]\.partitions\[\d\]\.records", out), out
    code, out, _ = run_cli(capsys, "--hex", cut.hex(), "--response", "--api", "Fetch", "--version",
                           str(resp.version), "--format", "json")
    event = json.loads(out)
    assert event["kind"] == "undecoded" and event["partial"]["path"].endswith(".records")
    assert all(p["error"] == "NONE" for p in event["partial"]["body"]["responses"][0]["partitions"])
    assert event["partial"]["position"] > 20 and event["hex"] == cut.hex()
    # The whole frame behind a size prefix that disagrees: an error naming both sizes.
    wrong = (len(frame) + 3).to_bytes(4, "big") + frame[4:]
    code, out, err = run_cli(capsys, "--hex", wrong.hex(), "--response", "--api", "Fetch", "--version",
                             str(resp.version))
    assert code == 2 and not out
    assert f"size prefix says {len(frame) + 3} bytes follow, but {len(frame) - 4} do" in err


# --- TLS ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tls_capture(kafka, tmp_path_factory):
    """kwire's client speaking TLS to a TLS-terminating proxy in front of Apache Kafka (Python's
    ssl on both ends), captured on the proxy's port; the proxy writes its session keys to a key
    log (SSLKEYLOGFILE format, as librdkafka's ssl.keylog.file does)."""
    from kwire.net import NetworkClient

    from .certs import TestCA
    from .tcp_proxy import TcpProxy

    d = tmp_path_factory.mktemp("tls")
    ca = TestCA(d, "kwire decode CA")
    ctx = ca.server_context(ca.issue("server", dns=["localhost"], ips=["127.0.0.1"]))
    ctx.keylog_filename = str(d / "keys.log")
    with TcpProxy("127.0.0.1", kafka.port, tls=ctx) as proxy:
        with capturing(proxy.port, d) as pcap:
            client = NetworkClient({"bootstrap.servers": f"localhost:{proxy.port}", "security.protocol": "ssl",
                                    "ssl.ca.location": ca.pem, "client.id": "kwire-tls"})
            try:
                client.request(None, "Metadata", lambda v: {"topics": [{"name": MISSING_TOPIC}],
                                                            "allow_auto_topic_creation": False}, timeout_ms=10_000)
            finally:
                client.close()
    return pcap, proxy.port, d / "keys.log"


def test_tls_connection_is_reported_as_tls(capsys, tls_capture):
    """Without keys: reported as TLS (handshake, version, server name), not as frames of
    impossible sizes, and the decoder says what it needs to decrypt."""
    pcap, port, _ = tls_capture
    result = decode_capture(pcap, ports=[port], auto_detect=False)
    tls = [i for i in result.items if i.kind == "tls"]
    # (The capture's probe connections end in the handshake: the proxy's lone alert is TLS too.)
    up = next(i for i in tls if i.to_broker)
    down = next(i for i in tls if not i.to_broker and i.connection == up.connection)
    assert any(i.reason.startswith("TLS (broker->client): 1 TLS records (1 alert)") for i in tls)
    assert "ClientHello" in up.reason and "server name 'localhost'" in up.reason
    assert "ServerHello" in down.reason and "TLS 1.3" in down.reason
    assert "application_data" in up.reason and "--tls-keylog FILE" in up.reason
    assert not any("impossible frame size" in (i.reason or "") for i in result.items)
    assert not result.frames()
    code, out, _ = run_cli(capsys, str(pcap), "--port", str(port), "--no-auto")
    assert code == 1
    assert "  TLS  " in out and "TLS connection(s) not decrypted" in out.splitlines()[-1]


def test_tls_decrypted_with_a_key_log(tmp_path, capsys, tls_capture):
    """With the key log the Kafka frames inside TLS decode, paired, with their packet numbers;
    a key log without this session's secrets says so."""
    pcap, port, keylog = tls_capture
    assert keylog.stat().st_size > 0
    code, out, err = run_cli(capsys, str(pcap), "--port", str(port), "--no-auto", "--format", "json",
                             "--tls-keylog", str(keylog))
    events = [json.loads(line) for line in out.splitlines()]
    frames = [e for e in events if e["kind"] in ("request", "response")]
    kinds = [(e["kind"], e["api"]) for e in frames]
    assert kinds[:2] == [("request", "ApiVersions"), ("response", "ApiVersions")]
    assert set(kinds[2:]) == {("request", "Metadata"), ("response", "Metadata")}
    # (The client's own metadata refresh may be left unanswered when it closes.)
    assert 1 <= kinds.count(("response", "Metadata")) <= kinds.count(("request", "Metadata"))
    assert all(e["client_id"] == "kwire-tls" and e["packet"] for e in frames)
    md = [t for e in frames if e["kind"] == "response" and e["api"] == "Metadata"
          for t in e["body"]["topics"] if t["name"] == MISSING_TOPIC][0]
    assert (md["name"], md["error"]) == (MISSING_TOPIC, "UNKNOWN_TOPIC_OR_PARTITION")
    assert frames[1]["rtt_ms"] is not None and frames[1]["packet"] > frames[0]["packet"]
    assert "1 TLS connection(s) decrypted" in err
    empty = tmp_path / "other.log"
    empty.write_text("")
    result = decode_capture(pcap, ports=[port], auto_detect=False, tls_keylog=empty)
    assert not result.frames()
    assert any("the key log has no secrets for this connection" in i.reason for i in result.items if i.kind == "tls")
    code, _, err = run_cli(capsys, str(pcap), "--tls-keylog", str(tmp_path / "missing.log"))
    assert code == 1 and "cannot read the key log" in err


# --- live traces show what crossed the wire -----------------------------------------------

def test_trace_shows_the_bodies_the_capture_shows(kafka, tmp_path):
    """kwire's NetworkClient traced (JSON) while tcpdump captures the same connection: for every
    frame the trace body is the captured frame's body as its bytes carry it -- no field its
    version lacks, no tagged field the encoder did not send."""
    import io

    from kwire.debug.names import annotate
    from kwire.debug.partial import decode_as_sent
    from kwire.debug.trace import make_tracer
    from kwire.net import NetworkClient

    out = io.StringIO()
    with capturing(kafka.port, tmp_path) as pcap:
        client = NetworkClient({"bootstrap.servers": kafka.bootstrap, "client.id": "kwire-trace"},
                               tracer=make_tracer("json", stream=out))
        try:
            # The dict holds a field Metadata v12 does not have and leaves tagged fields out.
            client.request(None, "Metadata", lambda v: {"topics": [{"name": MISSING_TOPIC, "not_a_field": 1}],
                                                        "allow_auto_topic_creation": False}, timeout_ms=10_000)
        finally:
            client.close()
    traced = [json.loads(line) for line in out.getvalue().splitlines()]
    result = decode_capture(pcap, ports=[kafka.port], auto_detect=False)
    frames = {(i.kind, i.api, i.correlation_id): i for i in result.frames()
              if (i.client_id or (i.request and i.request.client_id)) == "kwire-trace"}
    assert {(e["kind"], e["api"]) for e in traced} == {("request", "ApiVersions"), ("response", "ApiVersions"),
                                                      ("request", "Metadata"), ("response", "Metadata")}
    for e in traced:
        captured = frames[(e["kind"], e["api"], e["correlation_id"])]
        a = P.api(captured.api)
        if e["kind"] == "request":
            plan, data = P.request_plan(a, captured.version), P.encode_request_body(a, captured.version, captured.body)
        else:
            plan, data = P.response_plan(a, captured.version), P.encode_response_body(a, captured.version,
                                                                                       captured.body)
        as_sent = P.to_jsonable(annotate(decode_as_sent(plan, data), a.key, e["kind"]))
        assert e["body"] == as_sent, (e["api"], e["kind"])
    md = next(e for e in traced if e["api"] == "Metadata" and e["kind"] == "request")
    assert md["body"]["topics"] == [{"topic_id": "00000000-0000-0000-0000-000000000000", "name": MISSING_TOPIC}]
    versions = next(e for e in traced if e["api"] == "ApiVersions" and e["kind"] == "response")
    # Tagged fields Kafka did not send are not shown as if it had.
    sent_tags = {"supported_features", "finalized_features_epoch", "finalized_features", "zk_migration_ready"}
    assert sent_tags & set(versions["body"]) == sent_tags & set(
        decode_as_sent(P.response_plan("ApiVersions", versions["version"]),
                       P.encode_response_body("ApiVersions", versions["version"],
                                              frames[("response", "ApiVersions", versions["correlation_id"])].body)))


# --- robustness ----------------------------------------------------------------------------------

def test_paths_that_are_not_capture_files(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a capture")
    code, out, err = run_cli(capsys, str(tmp_path))
    assert code == 2 and not out and err.count("\n") == 1 and "a directory without capture files" in err
    code, _, err = run_cli(capsys, str(tmp_path / "none.pcap"))
    assert code == 2 and "no such file" in err


def test_a_directory_decodes_each_capture_file_in_it(scenario, tmp_path, capsys):
    import shutil as _shutil

    _shutil.copy(scenario.pcap, tmp_path / "b.pcap")
    _shutil.copy(scenario.pcap, tmp_path / "a.pcapng" if str(scenario.pcap).endswith(".pcapng") else tmp_path / "a.pcap")
    (tmp_path / "notes.txt").write_text("skipped: not a capture")
    code, one, _ = run_cli(capsys, str(scenario.pcap), "--port", str(scenario.port), "--format", "json")
    single = [json.loads(line) for line in one.splitlines()]
    code2, both, _ = run_cli(capsys, str(tmp_path), "--port", str(scenario.port), "--format", "json")
    assert code2 == code
    events = [json.loads(line) for line in both.splitlines()]
    assert all("file" in e for e in events), [e for e in events if "file" not in e][:2]
    files = sorted({e["file"] for e in events})
    assert [os.path.basename(f) for f in files] in (["a.pcap", "b.pcap"], ["a.pcapng", "b.pcap"])
    for f in files:  # each file decoded on its own, exactly as alone
        assert [{k: v for k, v in e.items() if k != "file"} for e in events if e["file"] == f] == single
    code3, text, _ = run_cli(capsys, str(tmp_path), "--port", str(scenario.port), "--summary")
    assert [line for line in text.splitlines() if line.startswith("== ")] == [f"== {f} ==" for f in files]


def test_stdin_is_decoded_as_it_streams(scenario, decoded):
    """`kwire decode -`: the capture written into a pipe in two halves; the frames of the first
    half are printed before the second is written, and in the end every frame is the one the
    file decoder finds (same packet, correlation id, api, body)."""
    data = scenario.pcap.read_bytes()
    records = pcap_records(scenario.pcap)
    half = records[len(records) // 2][0]  # a packet boundary
    proc = subprocess.Popen([sys.executable, "-m", "kwire", "decode", "-", "--port", str(scenario.port), "--no-auto",
                             "--format", "json"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=Path(__file__).parent.parent)
    try:
        proc.stdin.write(data[:half])
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())  # arrives while stdin is still open
        assert first["kind"] == "request" and first["api"] == "ApiVersions"
        proc.stdin.write(data[half:])
        proc.stdin.close()
        rest = [json.loads(line) for line in proc.stdout.read().splitlines()]
        assert proc.wait(timeout=60) == (1 if decoded.problems else 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = [first, *rest]
    key = lambda e: (e["packet"], e["kind"], e["correlation_id"], e["api"])  # noqa: E731
    streamed = sorted(key(e) for e in events if e["kind"] in ("request", "response"))
    whole = sorted((i.packet, i.kind, i.correlation_id, i.api) for i in decoded.frames())
    assert streamed == whole
    by_key = {key(e): e for e in events}
    for i in decoded.frames():
        assert by_key[(i.packet, i.kind, i.correlation_id, i.api)]["body"] is not None
    assert "kwire decode: " in proc.stderr.read().decode()


def _stream(path, ports=(9092,)):
    from kwire.debug.live import LiveDecoder, packets

    decoder = LiveDecoder(ports)
    with open(path, "rb") as f:
        items = [i for ts, buf, lt in packets(f) for i in decoder.feed(ts, buf, lt)]
    return items + decoder.finish(), decoder


def test_streaming_decoder_reorders_and_reports_holes(tmp_path):
    """The streaming decoder on damaged captures (tests/capture_util.py): segments out of order
    and retransmitted are put right; a lost segment becomes a gap, the frame it cut is shown
    undecoded, and the stream resynchronises on the next request."""
    from .test_debug_capture import conversation

    b, where = conversation(mss=25)
    p = b.packets
    segs = where[3][0]
    p.insert(segs[3] + 1, p[segs[0]])  # a late retransmission of request 3's first segment
    p[segs[1]], p[segs[2]] = p[segs[2]], p[segs[1]]  # two of its segments out of order
    items, decoder = _stream(b.write(tmp_path / "reorder.pcap"))
    assert [(i.kind, i.correlation_id) for i in items if i.kind in ("request", "response")] == [
        (k, c) for c in range(1, 7) for k in ("request", "response")]
    assert decoder.problems == 0
    b, where = conversation(mss=30)
    del b.packets[where[2][0][2]]  # a middle segment of request 2
    items, decoder = _stream(b.write(tmp_path / "gap.pcap"))
    kinds = [(i.kind, i.correlation_id) for i in items]
    assert ("gap", None) in kinds
    assert [c for k, c in kinds if k == "request"] == [1, 3, 4, 5, 6]
    assert [c for k, c in kinds if k == "response"] == [1, 3, 4, 5, 6]
    assert any(i.kind == "undecoded" and i.to_broker for i in items)
    assert decoder.problems >= 2
    # The same captures through the file decoder agree on what decoded.
    whole = decode_capture(tmp_path / "gap.pcap")
    assert [i.correlation_id for i in whole.frames("request")] == [1, 3, 4, 5, 6]


def test_live_capture_of_a_running_consumer(kafka, scenario):
    """`kwire decode -i lo`: frames of a consumer that is still running are printed as they are
    paired (the first ones long before it stops); --count ends the capture."""
    from kwire import Consumer

    proc = subprocess.Popen([sys.executable, "-m", "kwire", "decode", "-i", "lo", "--port", str(kafka.port),
                             "--format", "json", "--client-id", "kwire-live-views", "--count", "40"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(__file__).parent.parent)
    stop = threading.Event()
    seen_while_running: list = []
    errors: list = []

    def consume() -> None:
        try:
            with Consumer({"bootstrap.servers": kafka.bootstrap, "client.id": "kwire-live-views",
                           "group.id": f"live-{scenario.topic}", "auto.offset.reset": "earliest",
                           "session.timeout.ms": 6000, "heartbeat.interval.ms": 200}) as c:
                c.subscribe([scenario.topic])
                while not stop.is_set():
                    c.poll(0.1)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    try:
        line = proc.stderr.readline().decode()
        assert "listening on lo" in line, line + proc.stderr.read().decode()
        t = threading.Thread(target=consume)
        t.start()
        try:
            deadline = time.monotonic() + 60
            while len(seen_while_running) < 40 and time.monotonic() < deadline:
                out = proc.stdout.readline()
                if not out:
                    break
                seen_while_running.append(json.loads(out))
            assert t.is_alive()  # the consumer is still running: the output streamed
        finally:
            stop.set()
            t.join(30)
        assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not errors, errors
    events = seen_while_running
    assert len([e for e in events if e["kind"] in ("request", "response")]) == 40
    assert all(e["client_id"] == "kwire-live-views" for e in events)
    apis = [e["api"] for e in events]
    assert apis[0] == "ApiVersions" and "JoinGroup" in apis and "SyncGroup" in apis
    # Responses come after their requests, paired (rtt known), each with its packet number.
    reqs = {}
    for e in events:
        if e["kind"] == "request":
            reqs[(e["connection"], e["correlation_id"])] = e
        else:
            req = reqs[(e["connection"], e["correlation_id"])]
            assert req["api"] == e["api"] and e["rtt_ms"] >= 0 and e["packet"] > req["packet"]


def test_filters_go_with_captures_not_hex(capsys):
    frame = P.encode_request("ApiVersions", 3, {}, correlation_id=1)
    for argv in (["--errors"], ["--group", "g"], ["--stats"], ["--topic", "t"]):
        code, _, err = run_cli(capsys, "--hex", frame.hex(), *argv)
        assert code == 2 and "go with a capture file" in err, argv


def test_stats_names_topics_of_commits_that_name_them_by_id(kafka, scenario, tmp_path, capsys):
    """OffsetCommit v10 (Kafka 4) names topics by id; --stats names them from the capture's
    Metadata answers, as the records table does (it printed "None-0")."""
    from kwire import Consumer, TopicPartition

    group = f"by-id-{scenario.topic}"
    with capturing(kafka.port, tmp_path) as pcap:
        with Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                       "enable.auto.commit": False}) as c:
            c.assign([TopicPartition(scenario.topic, 0)])
            got = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                got = c.consume(100, timeout=1.0)
            assert got
            c.commit(asynchronous=False)
    items = decode_capture(str(pcap), ports=[kafka.port]).items
    commits = [i for i in items if i.kind == "request" and i.api == "OffsetCommit"]
    assert commits and all(i.version >= 10 for i in commits), [i.version for i in commits]
    assert all(t.get("name") is None and t.get("topic_id") for i in commits for t in i.body["topics"])
    code, out, _ = run_cli(capsys, str(pcap), "--port", str(kafka.port), "--no-auto", "--stats", "--format", "json",
                           "--group", group)
    # (exit 1 says the capture also caught the tail of an earlier test's connection to the
    # shared broker, which is not decodable from its middle; the group's frames are whole)
    assert code in (0, 1)
    events = [e for e in json.loads(out)["groups"][group]["timeline"] if e["event"] == "commit"]
    assert events and all(list(e["offsets"]) == [f"{scenario.topic}-0"] for e in events), events
