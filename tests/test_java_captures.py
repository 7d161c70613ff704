"""Golden frames from Apache Kafka's own Java clients: the command-line tools of the broker's
release (``org.apache.kafka:kafka-tools``, from the same Maven Central cache as the broker) talk
to Apache Kafka 4.3 while tcpdump records loopback -- kafka-topics (AdminClient),
kafka-console-producer (idempotent producer), kafka-console-consumer under both group protocols
(classic: JoinGroup/SyncGroup/Heartbeat/OffsetCommit; consumer: KIP-848's
ConsumerGroupHeartbeat) and kafka-consumer-groups --describe.  Every frame decodes through
kwire's capture decoder with nothing left undecoded, re-encodes to exactly the bytes on the wire
with both codec twins, and the records the Java producer wrote read back, through kwire's
record decoder, as the lines it was given.

Captured live on each run (the librdkafka captures of test_protocol_captures.py are too); the
(api, version) pairs seen are printed with ``-s``.
"""
from __future__ import annotations

import signal
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kwire.debug.capture import decode_capture
from kwire.embedded.kafka import TOOLS, java_binary, kafka_tools_jars
from kwire.records import iter_batches, iter_records

from .test_protocol_captures import _settle, _tcpdump, decode_conversation, tcp_streams

LINES = ["first line", "zweite Zeile: äöü", "{\"json\": [1, 2, 3]}", "", "x" * 300, "last"]

# JVM flags for short-lived tools: start fast, stay small.
_JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Djava.awt.headless=true"]


def _tool(name: str, *args: str, stdin: str | None = None, timeout_s: float = 90.0) -> str:
    """Run one of Kafka's command-line tools (``name`` as in bin/, e.g. kafka-topics) from its
    Maven jars; its stdout, or a failure with its output."""
    cmd = [java_binary(), *_JVM, "-cp", f"{kafka_tools_jars()}/*", TOOLS[name], *args]
    try:
        run = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout_s,
                             start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{name} did not finish in {timeout_s} s: {' '.join(args)}\n{exc.stdout}\n{exc.stderr}")
    if run.returncode != 0:
        pytest.fail(f"{name} {' '.join(args)} exited {run.returncode}:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    return run.stdout


def _java_workload(bootstrap: str, protocols: tuple[str, ...], compression: str, admin_extras: bool,
                   workdir: Path) -> dict:
    topic = f"java-golden-{uuid.uuid4().hex[:8]}"
    groups = {protocol: f"java-{protocol}-{uuid.uuid4().hex[:8]}" for protocol in protocols}
    b = ["--bootstrap-server", bootstrap]
    _tool("kafka-topics", *b, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1")
    with ThreadPoolExecutor(2) as pool:  # JVMs side by side: starting one takes seconds
        described = pool.submit(_tool, "kafka-topics", *b, "--describe", "--topic", topic)
        pool.submit(_tool, "kafka-console-producer", *b, "--topic", topic, "--compression-codec", compression,
                    stdin="".join(line + "\n" for line in LINES)).result()
        described = described.result()

    def consume(group: str, protocol: str) -> list[str]:
        out = _tool("kafka-console-consumer", *b, "--topic", topic, "--group", group, "--from-beginning",
                    "--max-messages", str(len(LINES)), "--timeout-ms", "60000",
                    "--command-property", f"group.protocol={protocol}",
                    # A classic member heartbeats every 100 ms (default 3 s) while the broker
                    # holds its first Fetch for a second (its records are under fetch.min.bytes).
                    *(["--command-property", "heartbeat.interval.ms=100", "--command-property",
                       "fetch.min.bytes=1048576", "--command-property", "fetch.max.wait.ms=1000"]
                      if protocol == "classic" else []),
                    "--command-property", "enable.auto.commit=true")
        return out.split("\n")[:len(LINES)]

    with ThreadPoolExecutor(len(groups)) as pool:
        consumed = dict(zip(groups, pool.map(consume, groups.values(), groups)))
    # Then the groups described, and on Kafka 4.3 a few more admin calls beside it.
    offsets = workdir / "delete-records.json"
    offsets.write_text(f'{{"version": 1, "partitions": [{{"topic": "{topic}", "partition": 0, "offset": 2}}]}}')
    extras = [("kafka-log-dirs", *b, "--describe"),                                  # DescribeLogDirs
              ("kafka-metadata-quorum", *b, "describe", "--replication"),            # DescribeQuorum
              ("kafka-delete-records", *b, "--offset-json-file", str(offsets)),      # DeleteRecords
              ("kafka-transactions", *b, "describe-producers", "--topic", topic, "--partition", "0"),
              ] if admin_extras else []                                              # DescribeProducers
    with ThreadPoolExecutor(2) as pool:
        described_groups = pool.submit(_tool, "kafka-consumer-groups", *b, "--describe", "--all-groups")
        for done in [pool.submit(_tool, *extra) for extra in extras]:
            done.result()
        described_groups = described_groups.result()
    return {"topic": topic, "described": described, "consumed": consumed, "groups": described_groups,
            "group_ids": groups}


# Per broker: the group protocols its consumers use (Kafka 3.9 serves KIP-848 only as an early
# access feature, off by default), the producer's compression, whether a few more admin tools
# run (4.3 only: each JVM costs seconds), and the (api, version) pairs Java 4.3.1's tools must
# have used with it -- the newest both sides have.
BROKERS = {
    "kafka": (("classic", "consumer"), "zstd", True, {
        ("ApiVersions", 4), ("Metadata", 13), ("CreateTopics", 7), ("DescribeTopicPartitions", 0),
        ("DescribeConfigs", 4), ("DescribeCluster", 2),                                    # kafka-topics
        ("InitProducerId", 5), ("Produce", 13),                                            # producer
        ("FindCoordinator", 6), ("JoinGroup", 9), ("SyncGroup", 5), ("Heartbeat", 4),      # classic
        ("OffsetCommit", 9), ("OffsetFetch", 9), ("LeaveGroup", 5), ("Fetch", 18), ("ListOffsets", 11),
        ("ConsumerGroupHeartbeat", 1), ("OffsetCommit", 10), ("OffsetFetch", 10),          # KIP-848
        ("ListGroups", 5), ("DescribeGroups", 6), ("ConsumerGroupDescribe", 1),            # consumer-groups
        ("DescribeLogDirs", 5), ("DescribeQuorum", 2), ("DeleteRecords", 2), ("DescribeProducers", 0),
    }),
    "kafka39": (("classic",), "lz4", False, {
        ("ApiVersions", 4), ("Metadata", 12), ("CreateTopics", 7), ("DescribeTopicPartitions", 0),
        ("DescribeConfigs", 4), ("DescribeCluster", 1),
        ("InitProducerId", 5), ("Produce", 11),
        ("FindCoordinator", 6), ("JoinGroup", 9), ("SyncGroup", 5), ("Heartbeat", 4),
        ("OffsetCommit", 9), ("OffsetFetch", 9), ("LeaveGroup", 5), ("Fetch", 17), ("ListOffsets", 9),
        ("ListGroups", 5), ("DescribeGroups", 5), ("ConsumerGroupDescribe", 0),
    }),
}


@pytest.fixture(scope="module", params=sorted(BROKERS))
def java_capture(request, tmp_path_factory):
    kafka_tools_jars()  # a first download happens before tcpdump starts
    kafka = request.getfixturevalue(request.param)
    protocols, compression, admin_extras, expected = BROKERS[request.param]
    port = kafka.port
    workdir = tmp_path_factory.mktemp("java-captures")
    path = workdir / "kafka-java.pcap"
    proc = _tcpdump([port], path)
    try:
        _settle(port, path)
        work = _java_workload(kafka.bootstrap, protocols, compression, admin_extras, workdir)
        _settle(port, path)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    return {"path": path, "port": port, "broker": f"Apache Kafka {kafka.version}", "expected": expected,
            "compression": compression, **work}


def _pairs(items) -> set[tuple[str, int]]:
    return {(i.api, i.version) for i in items}


def test_the_java_tools_did_their_work(java_capture):
    c = java_capture
    assert f"Topic: {c['topic']}" in c["described"]
    assert c["consumed"] == {protocol: LINES for protocol in c["group_ids"]}
    for group in c["group_ids"].values():
        assert group in c["groups"]


def test_every_frame_decodes_with_nothing_left_over(java_capture):
    result = decode_capture(java_capture["path"], ports=[java_capture["port"]], auto_detect=False)
    # The broker is the session's: a connection another test left open before tcpdump started
    # (a group member still heartbeating) starts mid-stream -- not the Java tools', whose
    # connections all open in the capture.
    earlier = {i.connection for i in result.items
               if i.kind == "note" and "capture starts mid-connection" in (i.reason or "")}
    java = [i for i in result.items if i.connection not in earlier]
    assert len(java) > 100 and all(i.connection is not None for i in result.items)
    problems = [(i.kind, i.api, i.version, i.reason) for i in java if i.problem]
    assert problems == []
    if not earlier:  # (the statistics count every connection)
        assert result.stats["undecoded"] == 0 and result.stats["undecoded_bytes"] == 0
    assert result.stats["gaps"] == 0
    requests = [i for i in java if i.kind == "request"]
    responses = [i for i in java if i.kind == "response"]
    # Every request of a connection opened in the capture has its answer (Produce acks=0 aside).
    assert len(requests) == len(responses) > 50
    seen = _pairs(requests)
    print(f"\n(api, version) pairs from Java 4.3.1's tools and {java_capture['broker']}:")
    for name, version in sorted(seen):
        print(f"  {name} v{version}")
    assert java_capture["expected"] <= seen, sorted(java_capture["expected"] - seen)


def test_every_frame_reencodes_exactly_with_both_twins(java_capture):
    seen = decode_conversation(tcp_streams(java_capture["path"]), {java_capture["port"]})
    assert len(seen) > 100  # requests and responses
    if "consumer" in java_capture["group_ids"]:
        kip848 = [b for n, _, k, b in seen if n == "ConsumerGroupHeartbeat" and k == "response"
                  and b["error_code"] == 0]
        assert any(b["member_epoch"] > 0 and b["assignment"] is not None for b in kip848)
    joins = [b for n, _, k, b in seen if n == "JoinGroup" and k == "request"]
    assert joins and all(b["protocol_type"] == "consumer" for b in joins)


def test_the_java_producers_records_read_back_as_its_lines(java_capture):
    result = decode_capture(java_capture["path"], ports=[java_capture["port"]], auto_detect=False)
    frames = result.frames()
    created = [t for i in frames if i.api == "CreateTopics" and i.kind == "response" for t in i.body["topics"]]
    assert [t["name"] for t in created] == [java_capture["topic"]] and created[0]["error_code"] == 0
    topic_id = created[0]["topic_id"]
    produced, fetched, batches = [], {}, []
    for item in frames:
        if item.api == "Produce" and item.kind == "request":
            assert item.body["acks"] == -1
            for t in item.body["topic_data"]:
                # Produce v13 (Kafka 4.1+) names topics by id (KIP-516), older versions by name
                assert (t["topic_id"], item.version) == (topic_id, 13) if "topic_id" in t \
                    else (t["name"], item.version < 13) == (java_capture["topic"], True)
                for p in t["partition_data"]:
                    batches += iter_batches(p["records"])
                    records = list(iter_records(p["records"]))
                    produced += [r.value.decode() for r in records]
                    assert all(r.key is None and r.headers == [] for r in records)
        elif item.api == "Fetch" and item.kind == "response":
            for t in item.body["responses"]:
                assert t["topic_id"] == topic_id
                for p in t["partitions"]:
                    for r in iter_records(p["records"] or b""):
                        fetched.setdefault(item.connection, {})[r.offset] = r.value.decode()
    assert produced == LINES
    pids = [i.body["producer_id"] for i in frames if i.api == "InitProducerId" and i.kind == "response"
            and i.body["error_code"] == 0]
    assert len(pids) == 1 and pids[0] >= 0  # idempotent by default: one producer id
    assert [(b.compression, b.producer_id, b.producer_epoch, b.base_sequence) for b in batches] == \
        [(java_capture["compression"], pids[0], 0, 0)]
    # Each console consumer (one connection to the partition leader each) fetched every line.
    assert len(fetched) == len(java_capture["group_ids"])
    for by_offset in fetched.values():
        assert sorted(by_offset) == list(range(len(LINES)))
        assert [by_offset[o] for o in sorted(by_offset)] == LINES


@pytest.mark.parametrize("java_capture", ["kafka"], indirect=True)  # where the extras run
def test_the_admin_extras_answers_say_what_happened(java_capture):
    result = decode_capture(java_capture["path"], ports=[java_capture["port"]], auto_detect=False)
    answers = {}
    for item in result.frames("response"):
        answers.setdefault(item.api, []).append(item.body)
    pids = [b["producer_id"] for b in answers["InitProducerId"] if b["error_code"] == 0]
    # DeleteRecords up to offset 2 of partition 0: the log now starts there.
    (deleted,) = [p for b in answers["DeleteRecords"] for t in b["topics"] for p in t["partitions"]]
    assert (deleted["partition_index"], deleted["low_watermark"], deleted["error_code"]) == (0, 2, 0)
    # DescribeProducers: the console producer, its epoch, and the sequence of its 6th record.
    (producers,) = [p for b in answers["DescribeProducers"] for t in b["topics"] for p in t["partitions"]]
    assert [(s["producer_id"], s["producer_epoch"], s["last_sequence"]) for s in producers["active_producers"]] \
        == [(pids[0], 0, len(LINES) - 1)]
    # DescribeQuorum: one voter, node 1, the leader.
    (quorum,) = [p for b in answers["DescribeQuorum"] for t in b["topics"] for p in t["partitions"]]
    assert quorum["leader_id"] == 1 and [v["replica_id"] for v in quorum["current_voters"]] == [1]
    # DescribeLogDirs: the topic's partition in the broker's one log directory.
    dirs = [d for b in answers["DescribeLogDirs"] for d in b["results"] if d["error_code"] == 0]
    topics = {t["name"] for d in dirs for t in d["topics"]}
    assert java_capture["topic"] in topics
