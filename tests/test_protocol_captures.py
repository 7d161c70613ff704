"""Golden frames from real peers: Apache Kafka 4.3's broker and controller (Java) and
librdkafka (confluent-kafka) talk while tcpdump records loopback; every frame of every API
they exchange -- admin, transactions, KIP-848 consumer groups, the broker's own calls to its
controller -- decodes with both codec twins, leaves no byte over, and re-encodes to exactly
the bytes on the wire.

The capture is read here with a few lines of pcap/TCP parsing (not kwire.debug), so this
checks the protocol tables and codecs alone.
"""
from __future__ import annotations

import shutil
import signal
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from kwire import _pycodec
from kwire._impl import codec_module
from kwire.protocol import api as P
from kwire.protocol import messages as M

_codec = codec_module()
_I32 = struct.Struct(">i")

# --- reading the capture --------------------------------------------------------------------

_LINK_HEADER = {0: 4, 1: 14, 113: 16, 276: 20}  # null, Ethernet, Linux SLL, SLL2


def tcp_streams(path: Path) -> dict[tuple, bytes]:
    """(src port, dst port, connection no.) -> the bytes that flowed, in order, from a pcap of
    IPv4 loopback traffic.  Retransmitted segments are dropped by sequence number."""
    data = path.read_bytes()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    link = struct.unpack_from(endian + "I", data, 20)[0]
    skip = _LINK_HEADER[link]
    pos, flows, nxt, seen_syn = 24, {}, {}, {}
    while pos + 16 <= len(data):
        incl = struct.unpack_from(endian + "I", data, pos + 8)[0]
        pkt = data[pos + 16: pos + 16 + incl]
        pos += 16 + incl
        ip = pkt[skip:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 0xF) * 4
        total = struct.unpack_from(">H", ip, 2)[0]
        tcp = ip[ihl:total]
        sport, dport, seq = struct.unpack_from(">HHI", tcp, 0)
        flags = tcp[13]
        payload = tcp[(tcp[12] >> 4) * 4:]
        key = (sport, dport)
        if flags & 0x02:  # SYN: a new connection on this port pair
            seen_syn[key] = seen_syn.get(key, -1) + 1
            nxt[key] = (seq + 1) & 0xFFFFFFFF
            continue
        if key not in nxt or not payload:
            continue
        if seq != nxt[key]:  # a retransmission (or a gap: the frame parser will say so)
            if (seq - nxt[key]) & 0x80000000:
                continue
        nxt[key] = (seq + len(payload)) & 0xFFFFFFFF
        flows.setdefault((sport, dport, seen_syn[key]), bytearray()).extend(payload)
    return {k: bytes(v) for k, v in flows.items()}


def frames(stream: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 4 <= len(stream):
        size = _I32.unpack_from(stream, pos)[0]
        if pos + 4 + size > len(stream):
            break
        out.append(stream[pos + 4: pos + 4 + size])
        pos += 4 + size
    assert len(stream) - pos < 4 + 64 * 1024 * 1024
    return out


def _both_twins(plan, body: bytes) -> dict:
    """Decode with each twin (strict: no byte left over), check they agree and that encoding
    the value gives the original bytes back."""
    value = _codec.decode_message(plan, body)
    assert _pycodec.decode_message(plan, body) == value
    assert bytes(_codec.encode_message(plan, value)) == bytes(body)
    assert bytes(_pycodec.encode_message(plan, value)) == bytes(body)
    return value


def decode_conversation(streams: dict, server_ports: set[int]) -> list[tuple[str, int, str, dict]]:
    """Every (api, version, kind, body) of the capture, requests paired with their answers."""
    out = []
    for (sport, dport, n), stream in sorted(streams.items()):
        if dport not in server_ports:
            continue
        pending = {}
        for payload in frames(stream):
            key, version, corr = P.peek_request_header(payload)
            a = P.api(key)
            hv = a.request_header_version(version)
            _, pos = _codec.decode_struct(P._header_plan(M.REQUEST_HEADER, hv), payload)
            out.append((a.name, version, "request", _both_twins(P.request_plan(a, version), payload[pos:])))
            pending[corr] = (a, version)
        for payload in frames(streams.get((dport, sport, n), b"")):
            corr = P.peek_correlation_id(payload)
            a, version = pending.pop(corr)
            _, pos = _codec.decode_struct(P._header_plan(M.RESPONSE_HEADER, a.response_header_version(version)),
                                          payload)
            out.append((a.name, version, "response", _both_twins(P.response_plan(a, version), payload[pos:])))
    return out


# --- taking the capture ---------------------------------------------------------------------

def _tcpdump(ports: list[int], path: Path) -> subprocess.Popen:
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        pytest.fail("tcpdump is missing: `make test` installs it (tools/system-deps.sh)")
    expr = " or ".join(f"tcp port {p}" for p in ports)
    # -B: a 64 MiB kernel buffer, so that a loaded machine does not make tcpdump drop packets
    # (a CI run lost 5 segments of the Java tools' traffic with the default 2 MiB)
    proc = subprocess.Popen([tcpdump, "-i", "lo", "--immediate-mode", "-U", "-n", "-s", "0", "-B", "65536",
                             "-Z", "root", "-w", str(path), expr], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    line = proc.stderr.readline()
    if b"listening on" not in line:
        proc.wait(timeout=10)
        pytest.fail(f"tcpdump did not start: {(line + proc.stderr.read()).decode(errors='replace')}")
    return proc


def _settle(port: int, path: Path) -> None:
    """Until tcpdump has written a probe connection made now (it writes in order)."""
    size = path.stat().st_size if path.exists() else 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        time.sleep(0.2)
        if path.exists() and path.stat().st_size > size:
            return
    pytest.fail("tcpdump wrote nothing")


def _confluent_workload(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        OffsetSpec,
    )

    topic = f"golden-{uuid.uuid4().hex[:8]}"
    group = f"golden-848-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    admin.describe_cluster().result(30)
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    for f in admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic),
                                     ConfigResource(ConfigResource.Type.BROKER, "1")]).values():
        f.result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)
    for f in admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()}).values():
        f.result(30)

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"golden-tx-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    admin.describe_consumer_groups([group])[group].result(30)
    admin.list_consumer_groups().result(30)
    consumer.close()
    producer.flush(10)
    admin.delete_topics([topic])[topic].result(30)


def _by_api(seen):
    out = {}
    for name, version, kind, _ in seen:
        out.setdefault(name, set()).add((kind, version))
    return out


@pytest.fixture
def fresh_kafka(request):
    """A Kafka of this test's own: the broker's connections to itself (WriteTxnMarkers) and to
    its controller must open while tcpdump watches -- the session's broker opened them during
    earlier tests, and a stream caught mid-way has no start to read frames from."""
    from .kafka_util import start_kafka, stop_kafka

    cluster = start_kafka(request, 1)
    yield cluster
    stop_kafka(request, cluster)


def test_real_peers_frames_decode_and_reencode_exactly(fresh_kafka, tmp_path):
    kafka = fresh_kafka
    node = next(iter(kafka.nodes.values()))
    ports = [node.ports["PLAINTEXT"], node.ports["CONTROLLER"]]
    path = tmp_path / "kafka.pcap"
    proc = _tcpdump(ports, path)
    try:
        _settle(ports[0], path)
        _confluent_workload(kafka.bootstrap)
        time.sleep(3)  # let the broker's heartbeat to its controller come by
        _settle(ports[0], path)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    seen = decode_conversation(tcp_streams(path), set(ports))
    by_api = _by_api(seen)
    # The APIs kwire did not have before Kafka 4.3.1's tables, each seen both ways: from
    # librdkafka's AdminClient, transactional producer and KIP-848 consumer, and the broker's
    # own calls (WriteTxnMarkers to itself; Envelope and AllocateProducerIds to its controller).
    for name in ("CreatePartitions", "DescribeConfigs", "IncrementalAlterConfigs", "DeleteTopics",
                 "InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn",
                 "WriteTxnMarkers", "ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "Envelope",
                 "AllocateProducerIds"):
        kinds = {k for k, _ in by_api.get(name, ())}
        assert kinds == {"request", "response"}, (name, sorted(by_api))
    # The content is right, not only the length: spot checks.
    hb = [b for n, _, k, b in seen if n == "ConsumerGroupHeartbeat" and k == "response" and b["error_code"] == 0]
    assert hb and any(b["member_epoch"] > 0 and b["heartbeat_interval_ms"] > 0 for b in hb)
    end = [b for n, _, k, b in seen if n == "EndTxn" and k == "request"]
    assert end and end[0]["committed"] is True
    # An Envelope carries a whole forwarded request (header and body): it decodes too.
    inner = [P.decode_request(b["request_data"], size_prefix=False)
             for n, _, k, b in seen if n == "Envelope" and k == "request"]
    assert inner and {r.api.name for r in inner} <= {"CreateTopics", "CreatePartitions", "DeleteTopics",
                                                     "IncrementalAlterConfigs", "AlterConfigs"}
