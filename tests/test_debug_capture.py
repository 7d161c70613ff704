"""kwire decode: Kafka frames out of packet captures, single hex frames, and live traces.

Real captures: tcpdump on ``lo`` while confluent-kafka, kafka-python, aiokafka and kwire talk to the broker
fixture (and the same capture rewritten as pcapng by Wireshark's editcap); a small one is saved
under tests/golden/ so the offline tests run anywhere.  Damage (gaps, cut files, flipped bytes,
retransmissions) is built with tests/capture_util.py.  ``KWIRE_UPDATE_GOLDEN=1`` rewrites the
golden renderings (and the saved real capture, from the live test).
"""
from __future__ import annotations

import importlib.util
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from kwire import cli
from kwire.debug.capture import decode_capture
from kwire.debug.render import Renderer, summarise_records
from kwire.debug.trace import enable_protocol_log, make_tracer
from kwire.protocol import api as P

from .capture_util import (
    LINK_ETHERNET,
    LINK_NULL,
    LINK_RAW,
    LINK_SLL,
    LINK_SLL2,
    CaptureBuilder,
    pcap_records,
    record_batch,
    wait_until_written,
)

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("KWIRE_UPDATE_GOLDEN", "") not in ("", "0")
SAVED_CAPTURE = GOLDEN / "decode-tansu-clients.pcap"
SAVED_CAPTURE_INFO = GOLDEN / "decode-tansu-clients.json"
CLIENT_APIS = {"ApiVersions", "Metadata", "Produce", "Fetch", "FindCoordinator", "JoinGroup",
               "SyncGroup", "Heartbeat", "OffsetCommit", "LeaveGroup"}


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(["decode", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean(result, connections: set | None = None) -> None:
    """Every frame decoded, every response paired with its request (on ``connections``, the
    indexes of the connections to check; default all)."""
    def mine(i):
        return connections is None or i.connection in connections

    bad = [(i.kind, i.reason) for i in result.items if i.problem and mine(i)]
    assert not bad, bad
    reqs = {(i.connection, i.correlation_id): i for i in result.frames("request")}
    for resp in filter(mine, result.frames("response")):
        req = reqs.get((resp.connection, resp.correlation_id))
        assert req is not None, resp
        assert (req.api, req.version) == (resp.api, resp.version)
        assert resp.rtt_ms is not None and resp.rtt_ms >= 0


# --- a real capture ---------------------------------------------------------------------------

@contextmanager
def capturing(port: int, directory: Path):
    """tcpdump on lo, filtered on ``port``; yields the .pcap path."""
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        pytest.fail("tcpdump is missing: `make test` installs it (tools/system-deps.sh)")
    path = directory / "live.pcap"
    cmd = [tcpdump, "-i", "lo", "--immediate-mode", "-U", "-n", "-s", "0", "-B", "65536", "-Z", "root", "-w", str(path),
           f"tcp port {port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        line = proc.stderr.readline()  # "tcpdump: listening on lo, ..." or why it could not
        if b"listening on" not in line:
            proc.wait(timeout=10)
            pytest.fail(f"tcpdump did not start: {(line + proc.stderr.read()).decode(errors='replace')}")
        wait_until_written(port, path)
        yield path
        wait_until_written(port, path)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def as_pcapng(path: Path) -> Path | None:
    """The same capture rewritten as pcapng by Wireshark's editcap (installed with tshark)."""
    editcap = shutil.which("editcap")
    if editcap is None:
        return None
    out = path.with_suffix(".pcapng")
    subprocess.run([editcap, "-F", "pcapng", str(path), str(out)], check=True, timeout=60,
                   stdout=subprocess.DEVNULL)
    return out


TOTAL_RECORDS = 9  # 6 from confluent-kafka, 3 from kwire


def run_real_clients(bootstrap: str, topic: str) -> None:
    """confluent-kafka's and kwire's Producers, then confluent-kafka's, kafka-python's,
    aiokafka's and kwire's Consumers, each in its own group, side by side so their joins
    overlap."""
    import confluent_kafka as ck
    import kafka

    from kwire.producer import Producer

    # enable.metrics.push=False: librdkafka would otherwise send GetTelemetrySubscriptions (71),
    # an API kwire's tables do not declare (test_unknown_api_is_shown_not_dropped covers that).
    common = {"bootstrap.servers": bootstrap, "enable.metrics.push": False}
    producer = ck.Producer({**common, "linger.ms": 1})
    for i in range(6):
        producer.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, headers=[("h", b"x")])
    assert producer.flush(10) == 0
    with Producer({"bootstrap.servers": bootstrap, "client.id": "kwire-live"}) as kp:
        for i in range(3):
            kp.produce(topic, b"kwire-%d" % i, key=b"kw")
        assert kp.flush(10) == 0
    errors: list = []

    def kafka_python_consumer():
        try:
            kc = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"kp-{topic}",
                                     auto_offset_reset="earliest", enable_auto_commit=False,
                                     consumer_timeout_ms=15000, session_timeout_ms=6000,
                                     max_poll_interval_ms=6000, heartbeat_interval_ms=300)
            seen = 0
            for _ in kc:
                seen += 1
                if seen == TOTAL_RECORDS:
                    break
            time.sleep(0.7)  # a heartbeat or two
            kc.commit()
            kc.close()
            assert seen == TOTAL_RECORDS, seen
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def kwire_consumer():
        from kwire import Consumer

        try:
            with Consumer({"bootstrap.servers": bootstrap, "client.id": "kwire-live-consumer",
                           "group.id": f"kw-{topic}", "auto.offset.reset": "earliest",
                           "enable.auto.commit": False, "session.timeout.ms": 6000,
                           "heartbeat.interval.ms": 300}) as kc:
                kc.subscribe([topic])
                seen, deadline = 0, time.monotonic() + 20
                while seen < TOTAL_RECORDS and time.monotonic() < deadline:
                    seen += len(kc.consume(TOTAL_RECORDS, 0.2))
                end = time.monotonic() + 0.7
                while time.monotonic() < end:  # a heartbeat or two
                    kc.poll(0.1)
                kc.commit(asynchronous=False)
            assert seen == TOTAL_RECORDS, seen
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def aiokafka_consumer():
        import asyncio

        import aiokafka

        async def run():
            kc = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"ak-{topic}",
                                           client_id="aiokafka-live", auto_offset_reset="earliest",
                                           enable_auto_commit=False, session_timeout_ms=6000,
                                           heartbeat_interval_ms=300, max_poll_interval_ms=6000)
            await kc.start()
            try:
                seen, deadline = 0, time.monotonic() + 20
                while seen < TOTAL_RECORDS and time.monotonic() < deadline:
                    got = await kc.getmany(timeout_ms=200)
                    seen += sum(len(v) for v in got.values())
                await asyncio.sleep(0.7)  # a heartbeat or two
                await kc.commit()
            finally:
                await kc.stop()
            assert seen == TOTAL_RECORDS, seen

        try:
            asyncio.run(run())
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    t = threading.Thread(target=kafka_python_consumer)
    t.start()
    t2 = threading.Thread(target=kwire_consumer)
    t2.start()
    t3 = threading.Thread(target=aiokafka_consumer)
    t3.start()
    consumer = ck.Consumer({**common, "group.id": f"ck-{topic}", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "session.timeout.ms": 6000,
                            "max.poll.interval.ms": 6000, "heartbeat.interval.ms": 300})
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 20
    while seen < TOTAL_RECORDS and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            seen += 1
    end = time.monotonic() + 0.7
    while time.monotonic() < end:  # a heartbeat or two
        consumer.poll(0.1)
    consumer.commit(asynchronous=False)
    consumer.close()
    t.join(30)
    t2.join(30)
    t3.join(30)
    assert seen == TOTAL_RECORDS, seen
    if errors:
        raise errors[0]


def test_live_capture_of_real_clients(peer, unique_topic, tmp_path, capsys):
    with capturing(peer.port, tmp_path) as pcap:
        run_real_clients(peer.bootstrap, unique_topic)
    files = {"pcap": pcap, "pcapng": as_pcapng(pcap)}
    if files["pcapng"] is None:
        pytest.fail("editcap is missing: `make test` installs it (tools/system-deps.sh, tshark)")
    for kind, path in files.items():
        result = decode_capture(path, ports=[peer.port], auto_detect=False)
        # Only connections opened during the capture: a client another test left running on the
        # session's broker may show up mid-connection.
        ours = {c.index for c in result.connections if c.opened_in_capture}
        assert_clean(result, ours)
        apis = {i.api for i in result.frames() if i.connection in ours}
        assert CLIENT_APIS <= apis, (kind, CLIENT_APIS - apis)
        clients = {i.client_id for i in result.frames("request")}
        assert {"rdkafka", "kwire-live", "kwire-live-consumer"} <= clients, clients
        assert any(c and c.startswith("kafka-python") for c in clients), clients
        assert "aiokafka-live" in clients, clients
        # kwire's own consumer, its whole life in order of first appearance
        kwire_apis = []
        for i in result.frames("request"):
            if i.client_id == "kwire-live-consumer" and i.api not in kwire_apis:
                kwire_apis.append(i.api)
        life = ["FindCoordinator", "JoinGroup", "SyncGroup", "OffsetFetch", "Fetch", "Heartbeat",
                "OffsetCommit", "LeaveGroup"]
        assert set(life) <= set(kwire_apis), kwire_apis
        first = {a: kwire_apis.index(a) for a in life}
        # joining, then positions, then fetching; heartbeats start once a member (after
        # SyncGroup) -- before or after the first Fetch, as the machine's timing has it
        assert first["FindCoordinator"] < first["JoinGroup"] < first["SyncGroup"] < first["OffsetFetch"] \
            < first["Fetch"] < first["OffsetCommit"] < first["LeaveGroup"], kwire_apis
        assert first["SyncGroup"] < first["Heartbeat"] < first["LeaveGroup"], kwire_apis
        assert kwire_apis[0] == "ApiVersions", kwire_apis
        produced = [i for i in result.frames("request") if i.api == "Produce"]
        assert produced and all(i.body["topic_data"] for i in produced)
        # The CLI agrees: exit 0, one JSON object per line, every record counted once.
        code, out, err = run_cli(capsys, str(path), "--port", str(peer.port), "--format", "json")
        assert code == (1 if result.problems else 0), err
        events = [json.loads(line) for line in out.splitlines()]
        events = [e for e in events if e["connection"] in ours]
        assert {e["kind"] for e in events} <= {"request", "response", "note"}
        produce_records = sum(p["records"]["records"] for e in events
                              if e["api"] == "Produce" and e["kind"] == "request"
                              for t in e["body"]["topic_data"] for p in t["partition_data"])
        assert produce_records == TOTAL_RECORDS
    if UPDATE:
        shutil.copyfile(pcap, SAVED_CAPTURE)
        SAVED_CAPTURE_INFO.write_text(json.dumps({"broker_port": peer.port}) + "\n")


def test_saved_real_capture_decodes_offline(capsys):
    """The capture the live test saved (tcpdump on lo: confluent-kafka and kafka-python
    against Tansu), so this runs without tcpdump or a broker."""
    assert SAVED_CAPTURE.stat().st_size < 200_000
    port = json.loads(SAVED_CAPTURE_INFO.read_text())["broker_port"]
    by_port = decode_capture(SAVED_CAPTURE, ports=[port], auto_detect=False)
    assert_clean(by_port)
    assert CLIENT_APIS <= {i.api for i in by_port.frames()}
    # Auto-detection finds the same connections (the capture has their SYNs).
    auto = decode_capture(SAVED_CAPTURE, ports=[9092])
    assert auto.stats["auto_detected"] == by_port.stats["kafka_connections"] > 0
    def frames(result):
        return [(i.api, i.correlation_id) for i in result.frames()]

    assert frames(auto) == frames(by_port)
    code, out, _ = run_cli(capsys, str(SAVED_CAPTURE))
    assert code == 0
    assert "Produce v" in out and "records: 1 batch" in out
    assert out.rstrip().splitlines()[-1].startswith("-- ")
    # Nothing on port 9092 and no auto-detection: nothing found, said so, exit 1.
    code, out, _ = run_cli(capsys, str(SAVED_CAPTURE), "--no-auto")
    assert code == 1 and "no Kafka connections found" in out and f"on port {port}" in out


# --- golden renderings of fixed frames ----------------------------------------------------------

def golden_conversation() -> CaptureBuilder:
    """A fixed conversation: ApiVersions, Metadata, Produce, Fetch (records), JoinGroup (an
    error; a consumer subscription), SyncGroup (an assignment), each answered."""
    b = CaptureBuilder().handshake()
    batch = record_batch(0, [(b"k0", b"v0"), (None, b"hello")])
    batch2 = record_batch(2, [(b"k2", b"\x00\xff")])
    frames = [
        (P.encode_request("ApiVersions", 3, {"client_software_name": "kwire", "client_software_version": "0.1"},
                          correlation_id=1, client_id="golden"), True),
        (P.encode_response("ApiVersions", 3, {"error_code": 0, "api_keys": [
            {"api_key": 0, "min_version": 3, "max_version": 11},
            {"api_key": 1, "min_version": 4, "max_version": 16},
            {"api_key": 3, "min_version": 0, "max_version": 12},
            {"api_key": 18, "min_version": 0, "max_version": 4}]}, correlation_id=1), False),
        (P.encode_request("Metadata", 12, {"topics": [{"name": "golden"}],
                                           "allow_auto_topic_creation": False}, correlation_id=2,
                          client_id="golden"), True),
        (P.encode_response("Metadata", 12, {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092}],
                                            "cluster_id": "c1", "controller_id": 1, "topics": [
            {"error_code": 0, "name": "golden", "partitions": [
                {"partition_index": 0, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1],
                 "isr_nodes": [1]}]}]},
                           correlation_id=2), False),
        (P.encode_request("Produce", 9, {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": "golden", "partition_data": [{"index": 0, "records": batch}]}]},
                          correlation_id=3, client_id="golden"), True),
        (P.encode_response("Produce", 9, {"responses": [{"name": "golden", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 0}]}]}, correlation_id=3), False),
        (P.encode_request("Fetch", 12, {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20,
                                        "isolation_level": 0, "topics": [{"topic": "golden", "partitions": [
                                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]},
                          correlation_id=4, client_id="golden"), True),
        # The record set ends with a cut batch, as a Fetch response at its byte limit does.
        (P.encode_response("Fetch", 12, {"responses": [{"topic": "golden", "partitions": [
            {"partition_index": 0, "high_watermark": 3, "last_stable_offset": 3, "log_start_offset": 0,
             "records": batch + batch2 + batch2[:20]}]}]}, correlation_id=4), False),
    ]
    subscription = P.encode_subscription(3, {"topics": ["golden"], "generation_id": -1, "rack_id": None})
    assignment = P.encode_assignment(0, {"assigned_partitions": [{"topic": "golden", "partitions": [0, 1]}]})
    join = {"group_id": "g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": subscription}]}
    frames += [
        (P.encode_request("JoinGroup", 7, join, correlation_id=5, client_id="golden"), True),
        (P.encode_response("JoinGroup", 7, {"error_code": 79, "member_id": "m-1", "protocol_type": "consumer"},
                           correlation_id=5), False),
        (P.encode_request("SyncGroup", 5, {"group_id": "g", "generation_id": 1, "member_id": "m-1",
                                           "protocol_type": "consumer", "protocol_name": "range",
                                           "assignments": [{"member_id": "m-1", "assignment": assignment}]},
                          correlation_id=6, client_id="golden"), True),
        (P.encode_response("SyncGroup", 5, {"protocol_type": "consumer", "protocol_name": "range",
                                            "assignment": assignment}, correlation_id=6), False),
    ]
    for data, to_broker in frames:
        b.send(data, to_broker=to_broker)
    return b.close()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs; KWIRE_UPDATE_GOLDEN=1 rewrites it"


@pytest.mark.parametrize("fmt,name", [("text", "decode-frames.txt"), ("json", "decode-frames.jsonl")])
def test_golden_rendering(tmp_path, capsys, fmt, name):
    path = golden_conversation().write(tmp_path / "golden.pcap")
    code, out, _ = run_cli(capsys, path, "--format", fmt, "--color", "never")
    assert code == 0
    check_golden(name, out)
    if fmt == "json":
        events = [json.loads(line) for line in out.splitlines()]
        assert [(e["kind"], e["api"], e["correlation_id"]) for e in events][:2] == [
            ("request", "ApiVersions", 1), ("response", "ApiVersions", 1)]
        fetch = [e for e in events if e["api"] == "Fetch"][-1]["body"]["responses"][0]["partitions"][0]["records"]
        assert fetch == {"batches": 2, "records": 3, "first_offset": 0, "last_offset": 2,
                         "bytes": fetch["bytes"], "compression": "none", "partial_bytes": 20}


@pytest.mark.parametrize("fmt,name", [("text", "decode-damaged.txt"), ("json", "decode-damaged.jsonl")])
def test_golden_damage_rendering(tmp_path, capsys, fmt, name):
    """A request kwire cannot decode (unknown api key), its response, and a capture gap."""
    b = CaptureBuilder(mss=40).handshake()
    b.send(P.encode_request("ApiVersions", 3, {}, correlation_id=1, client_id="g"))
    b.send(P.encode_response("ApiVersions", 3, {"api_keys": []}, correlation_id=1), to_broker=False)
    unknown = bytearray(P.encode_request("Heartbeat", 4, {"group_id": "g", "generation_id": 1, "member_id": "m"},
                                         correlation_id=2, client_id="g"))
    unknown[4:6] = (71).to_bytes(2, "big")  # GetTelemetrySubscriptions: not in kwire's tables
    b.send(bytes(unknown))
    b.send(P.encode_response("Heartbeat", 4, {}, correlation_id=2), to_broker=False)
    big = P.encode_request("Metadata", 12, {"topics": [{"name": "x" * 60}]},
                           correlation_id=3, client_id="g")
    lost = b.send(big)[1]  # the second of its segments goes missing
    b.send(P.encode_response("Metadata", 12, {"brokers": []}, correlation_id=3), to_broker=False)
    b.send(P.encode_request("Heartbeat", 4, {"group_id": "g", "generation_id": 1, "member_id": "m"},
                            correlation_id=4, client_id="g"))
    del b.packets[lost]
    path = b.write(tmp_path / "damaged.pcap")
    code, out, _ = run_cli(capsys, path, "--format", fmt, "--color", "never")
    assert code == 1
    check_golden(name, out)


# --- single frames as hex -------------------------------------------------------------------------

def test_hex_request_with_and_without_size_prefix(capsys):
    frame = P.encode_request("Metadata", 12, {"topics": None}, correlation_id=7, client_id="cli")
    spaced = " ".join(frame[i:i + 4].hex() for i in range(0, len(frame), 4))
    for hx in (frame.hex(), frame[4:].hex(), "0x" + frame.hex(), spaced):
        code, out, err = run_cli(capsys, "--hex", hx, "--request")
        assert code == 0, err
        assert out.splitlines()[0] == f'→  Metadata v12  corr=7  client_id="cli"  {len(frame)} B'
        assert "  topics: null" in out
    code, out, _ = run_cli(capsys, "--hex", frame.hex(), "--format", "json")  # --request is the default
    event = json.loads(out)
    assert [event[k] for k in ("api", "version", "correlation_id", "client_id")] == ["Metadata", 12, 7, "cli"]


def test_hex_response_with_and_without_size_prefix(capsys):
    frame = P.encode_response("ApiVersions", 3, {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]},
                              correlation_id=9)
    for hx in (frame.hex(), frame[4:].hex()):
        for api in ("ApiVersions", "18", "apiversions"):
            code, out, err = run_cli(capsys, "--hex", hx, "--response", "--api", api, "--version", "3")
            assert code == 0, err
            assert out.startswith("←  ApiVersions v3  corr=9")
            assert "    - {api_key: 18 (ApiVersions), min_version: 0, max_version: 4}" in out


def test_hex_errors(capsys):
    frame = P.encode_request("Metadata", 12, {"topics": None}, correlation_id=7)
    # A size prefix that disagrees with the length: an error naming both, not another frame
    # (these bytes without their prefix would read as "Produce v20").
    code, out, err = run_cli(capsys, "--hex", frame[:-3].hex() + "ff")
    assert code == 2 and not out
    assert f"size prefix says {len(frame) - 4} bytes follow, but {len(frame) - 6} do" in err
    # Not decodable, prefix consistent: exit 1, the fields decoded, the reason and position,
    # then the bytes from there on.
    named = P.encode_request("Metadata", 12, {"topics": [{"name": "orders-and-more"}]}, correlation_id=7,
                             client_id="cli")
    cut = (len(named) - 12).to_bytes(4, "big") + named[4:-8]  # the topic name cut short
    code, out, _ = run_cli(capsys, "--hex", cut.hex())
    assert code == 1
    assert "UNDECODED Metadata v12  corr=7" in out
    assert "why: request cannot be decoded: needed 15 bytes at position 36, only 11 left" in out
    assert ("    api_key: 3 (Metadata)\n    api_version: 12\n    correlation_id: 7\n    client_id: \"cli\"\n"
            "    topics:\n      - {topic_id: 00000000-0000-0000-0000-000000000000}\n") in out
    assert "  stopped: at byte 36 of the frame while reading topics[0].name: needed 15 bytes" in out
    assert "  the rest, from byte 36:\n    000024  6f 72 64 65 72 73 2d 61  6e 64 2d " in out
    code, out, _ = run_cli(capsys, "--hex", frame.hex(), "--response", "--api", "Fetch", "--version", "12")
    assert code == 1 and "response cannot be decoded" in out
    # Usage errors: exit 2 with a message.
    for argv, msg in [
        (["--hex", "zz"], "not valid hex"),
        (["--hex", frame.hex(), "--response"], "needs --api and --version"),
        (["--hex", frame.hex(), "--response", "--api", "NoSuchApi", "--version", "1"], "unknown"),
        (["--hex", frame.hex(), "--api", "Fetch"], "describe a --response"),
        ([], "give a capture file"),
        (["x.pcap", "--hex", "00"], "give one of: a capture file, -i IFACE, --hex"),
        (["/nonexistent/x.pcap"], "no such file"),
    ]:
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and msg in err, (argv, err)
    with pytest.raises(SystemExit) as exc:
        cli.main(["decode", "--format", "xml", "x.pcap"])
    assert exc.value.code == 2


def test_python_dash_m_kwire_decode():
    frame = P.encode_request("ApiVersions", 3, {}, correlation_id=1, client_id="m")
    out = subprocess.run([sys.executable, "-m", "kwire", "decode", "--hex", frame.hex(), "--format", "json"],
                         capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["api"] == "ApiVersions"


# --- damaged captures -------------------------------------------------------------------------

def conversation(n: int = 6, *, mss: int = 1400, start: int = 1) -> tuple[CaptureBuilder, dict]:
    """n Metadata request/response pairs (corr start..start+n-1); returns the builder and, per
    correlation id, the packet indexes of (request, response) segments."""
    b = CaptureBuilder(mss=mss).handshake()
    where = {}
    for corr in range(start, start + n):
        req = P.encode_request("Metadata", 12, {"topics": [{"name": f"topic-{corr}-" + "x" * 40}]},
                               correlation_id=corr, client_id="damage")
        resp = P.encode_response("Metadata", 12, {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092}],
                                                  "topics": []}, correlation_id=corr)
        where[corr] = (b.send(req), b.send(resp, to_broker=False))
    return b, where


def decoded_corrs(result, kind: str = "request") -> list[int]:
    return [i.correlation_id for i in result.frames(kind)]


def test_flipped_bytes_in_a_frame(tmp_path, capsys):
    b, where = conversation()
    seg = b.packets[where[3][0][0]]
    seg.payload = seg.payload[:4] + b"\x7f\x7f" + seg.payload[6:]  # request 3's api key
    seg = b.packets[where[5][1][0]]
    flipped = bytes(x ^ 0xFF for x in seg.payload[12:20])
    seg.payload = seg.payload[:12] + flipped + seg.payload[20:]  # response 5's body
    path = b.write(tmp_path / "flipped.pcap")
    result = decode_capture(path)
    assert decoded_corrs(result) == [1, 2, 4, 5, 6]
    assert decoded_corrs(result, "response") == [1, 2, 4, 6]
    bad = [i for i in result.items if i.problem]
    assert [(i.kind, i.correlation_id, i.to_broker) for i in bad] == [
        ("undecoded", 3, True), ("undecoded", 3, False), ("undecoded", 5, False)]
    assert "request cannot be decoded" in bad[0].reason and "32639" in bad[0].reason
    assert "(api key 32639), which kwire's protocol tables do not declare" in bad[1].reason
    assert bad[2].reason.startswith("Metadata v12 response cannot be decoded")
    assert all(i.data for i in bad)
    code, out, _ = run_cli(capsys, path)
    assert code == 1
    assert out.count("UNDECODED") == 3 and "-- 5 requests, 4 responses" in out


def test_flipped_size_prefix_resynchronises(tmp_path):
    b, where = conversation()
    seg = b.packets[where[2][0][0]]
    seg.payload = b"\x7f\xff\xff\xff" + seg.payload[4:]  # request 2's size: impossible
    seg = b.packets[where[4][1][0]]
    seg.payload = b"\x00\x00\x00\x01" + seg.payload[4:]  # response 4's size: too small to be its frame
    result = decode_capture(b.write(tmp_path / "sizes.pcap"))
    assert decoded_corrs(result) == [1, 3, 4, 5, 6]
    assert decoded_corrs(result, "response") == [1, 3, 5, 6]
    reasons = [i.reason for i in result.items if i.problem]
    assert any("impossible frame size 2147483647" in r for r in reasons), reasons
    assert all(i.kind == "undecoded" and i.data for i in result.items if i.problem)
    # Response 2 lost its request; the bytes of response 4 shown: every byte accounted for.
    resp2 = [i for i in result.items if i.problem and i.correlation_id == 2]
    assert resp2 and "no request with that id" in resp2[0].reason


def test_truncated_capture_file(tmp_path, capsys):
    """The saved real capture cut inside a packet's data, and inside a record header."""
    records = pcap_records(SAVED_CAPTURE)
    data = SAVED_CAPTURE.read_bytes()
    full = decode_capture(SAVED_CAPTURE)
    # The packet carrying the most data: cut it in half, or inside its record header.
    k = max(range(len(records)), key=lambda i: records[i][1])
    offset, caplen, cut_ts = records[k]
    before = [(i.api, i.correlation_id, i.connection) for i in full.frames() if i.ts < cut_ts]
    for cut, what in [(offset + 16 + caplen // 2, "ends inside packet"),
                      (offset + 7, "ends inside the record after packet")]:
        path = tmp_path / "cut.pcap"
        path.write_bytes(data[:cut])
        result = decode_capture(path)
        notes = [i.reason for i in result.items if i.kind == "note" and "capture file" in i.reason]
        assert len(notes) == 1 and what in notes[0], notes
        # Every frame before the cut decodes as it did; nothing after it is invented.
        got = [(i.api, i.correlation_id, i.connection) for i in result.frames()]
        assert got == before
        assert result.problems
        code, out, _ = run_cli(capsys, str(path))
        assert code == 1
        assert notes[0] in out


def test_gap_inside_a_frame_and_over_a_size_prefix(tmp_path, capsys):
    b, where = conversation(mss=30)
    inside = where[2][0][2]  # a middle segment of request 2: the size prefix says where 3 starts
    prefix = where[4][0][0]  # the first segment of request 4: its size prefix is lost
    for i in sorted((inside, prefix), reverse=True):
        del b.packets[i]
    result = decode_capture(b.write(tmp_path / "gaps.pcap"))
    gaps = [i for i in result.items if i.kind == "gap"]
    assert [g.size_bytes for g in gaps] == [30, 30]
    assert all(g.reason.startswith("capture lost 30 bytes at stream offset") for g in gaps)
    assert decoded_corrs(result) == [1, 3, 5, 6]
    # Request 2's response still decodes: the damaged frame's header was captured.
    assert decoded_corrs(result, "response") == [1, 2, 3, 5, 6]
    undecoded = [i for i in result.items if i.kind == "undecoded"]
    assert any("the capture lost 30 of its bytes" in i.reason for i in undecoded)
    assert any("after a capture gap" in i.reason for i in undecoded)
    code, out, _ = run_cli(capsys, b.write(tmp_path / "gaps.pcap"))
    assert code == 1 and "GAP" in out


def test_unrecoverable_gap_stops_the_stream_with_a_note(tmp_path):
    b = CaptureBuilder(mss=100).handshake()
    b.send(P.encode_request("ApiVersions", 3, {}, correlation_id=1))
    idx = b.send(bytes(range(256)) * 4)  # not Kafka at all after the gap
    b.send(bytes(200))
    del b.packets[idx[0]]
    result = decode_capture(b.write(tmp_path / "junk.pcap"))
    assert decoded_corrs(result) == [1]
    junk = [i for i in result.items if i.kind == "undecoded"]
    assert junk and sum(len(i.data) for i in junk) == 1024 - 100 + 200
    assert "no recognisable frame" in junk[-1].reason or "before the next recognisable frame" in junk[-1].reason


def test_snap_length_short_packets(tmp_path):
    b, where = conversation(n=3, mss=20)
    b.packets[where[2][1][1]].snap = 10  # the broker's second segment of response 2 kept 10 bytes
    result = decode_capture(b.write(tmp_path / "snap.pcap"))
    gap = [i for i in result.items if i.kind == "gap"]
    assert len(gap) == 1 and "captured 10 bytes short" in gap[0].reason
    assert decoded_corrs(result, "response") == [1, 3]
    assert decoded_corrs(result) == [1, 2, 3]


def test_retransmissions_reordering_and_overlaps_reassemble(tmp_path):
    b, where = conversation(mss=25)
    p = b.packets
    segs, (first, second) = where[3][0], where[5][1][:2]
    # An overlapping resend of response 5's first segment that also carries 7 bytes of its second.
    dup = type(p[first])(**{**p[first].__dict__})
    dup.payload = p[first].payload + p[second].payload[:7]
    p.insert(second + 1, dup)
    p.insert(segs[3] + 1, p[segs[0]])  # a late retransmission of request 3's first segment
    p[segs[1]], p[segs[2]] = p[segs[2]], p[segs[1]]  # request 3's next two segments out of order
    result = decode_capture(b.write(tmp_path / "retrans.pcap"))
    assert_clean(result)
    assert decoded_corrs(result) == decoded_corrs(result, "response") == [1, 2, 3, 4, 5, 6]


def test_capture_started_mid_connection(tmp_path):
    b, where = conversation(mss=25)
    cut = where[2][0][1]  # start inside request 2 (no handshake, no frame boundary)
    b.packets = [p for i, p in enumerate(b.packets) if i >= cut]
    result = decode_capture(b.write(tmp_path / "mid.pcap"))
    assert decoded_corrs(result) == [3, 4, 5, 6]
    assert decoded_corrs(result, "response") == [3, 4, 5, 6]
    notes = [i.reason for i in result.items if i.kind == "note"]
    assert any("mid-connection" in n for n in notes)
    assert any(i.kind == "undecoded" and "mid-connection" in i.reason for i in result.items)


@pytest.mark.parametrize("linktype", [LINK_ETHERNET, LINK_NULL, LINK_RAW, LINK_SLL, LINK_SLL2])
@pytest.mark.parametrize("pcapng", [False, True], ids=["pcap", "pcapng"])
@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_link_layers_and_file_formats(tmp_path, linktype, pcapng, ipv6):
    b = CaptureBuilder(client=("::1", 40000), broker=("::1", 9092)) if ipv6 else CaptureBuilder()
    b.handshake()
    b.send(P.encode_request("ApiVersions", 3, {}, correlation_id=1))
    b.send(P.encode_response("ApiVersions", 3, {}, correlation_id=1), to_broker=False)
    result = decode_capture(b.close().write(tmp_path / "x.cap", linktype=linktype, pcapng=pcapng))
    assert_clean(result)
    assert [(i.kind, i.api) for i in result.frames()] == [("request", "ApiVersions"), ("response", "ApiVersions")]
    assert result.frames()[0].broker == ("[::1]:9092" if ipv6 else "127.0.0.1:9092")


def test_ports_and_auto_detection(tmp_path):
    b = CaptureBuilder(broker=("127.0.0.1", 19092)).handshake()
    b.send(P.encode_request("ApiVersions", 3, {}, correlation_id=1))
    b.send(P.encode_response("ApiVersions", 3, {}, correlation_id=1), to_broker=False)
    other = CaptureBuilder(client=("127.0.0.1", 50001), broker=("127.0.0.1", 8080)).handshake()
    other.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    b.packets += other.packets
    path = b.write(tmp_path / "ports.pcap")
    assert decode_capture(path).stats["auto_detected"] == 1
    assert decode_capture(path, auto_detect=False).stats["kafka_connections"] == 0
    several = decode_capture(path, ports=[9092, 19092], auto_detect=False)
    assert several.stats["kafka_connections"] == 1 and several.problems == 0
    http = decode_capture(path, ports=[8080], auto_detect=False)
    assert http.problems and all(i.kind != "request" for i in http.items)


def test_unknown_api_is_shown_not_dropped(tmp_path):
    b = CaptureBuilder().handshake()
    frame = bytearray(P.encode_request("ApiVersions", 3, {}, correlation_id=1))
    frame[4:6] = (71).to_bytes(2, "big")
    b.send(bytes(frame))
    b.send(P.encode_response("ApiVersions", 3, {}, correlation_id=1), to_broker=False)
    result = decode_capture(b.write(tmp_path / "u.pcap"))
    assert [(i.kind, i.api_key, i.correlation_id) for i in result.items if i.problem] == [
        ("undecoded", 71, 1), ("undecoded", 71, 1)]
    assert result.items[0].data == bytes(frame)


def test_not_a_capture(tmp_path, capsys):
    path = tmp_path / "x.pcap"
    path.write_bytes(b"hello, not a capture at all")
    code, _, err = run_cli(capsys, str(path))
    assert code == 1 and "not a pcap or pcapng capture" in err


# --- record payloads ---------------------------------------------------------------------------

def test_records_summary_and_full(tmp_path, capsys):
    batch = record_batch(5, [(b"k", b"v"), (None, b"\x00\x01")])
    s = summarise_records(batch)
    assert dict(s) == {"batches": 1, "records": 2, "first_offset": 5, "last_offset": 6, "bytes": len(batch),
                       "compression": "none"}
    assert summarise_records(None) is None
    corrupt = bytearray(batch)
    corrupt[-1] ^= 0xFF
    if importlib.util.find_spec("kwire.records") is not None:
        assert "error" in summarise_records(bytes(corrupt))
        full = summarise_records(batch, full=True)["contents"]
        assert [(r["offset"], r["key"], r["value"]) for r in full[0]["records"]] == [
            (5, b"k", b"v"), (6, None, b"\x00\x01")]
        path = golden_conversation().write(tmp_path / "g.pcap")
        code, out, _ = run_cli(capsys, path, "--records", "full")
        assert code == 0
        assert 'offset 1  ts 2023-11-14T22:13:20.000000Z  key null  value "hello"' in out
        assert 'value <2 bytes> 00ff' in out
    else:
        assert summarise_records(batch, full=True)["error"].startswith("full records need kwire.records")


# --- live traces ---------------------------------------------------------------------------------

def trace_event(direction: str, **kw) -> dict:
    """What NetworkClient hands its tracer."""
    event = {"direction": direction, "node_id": 1, "address": "127.0.0.1:9092", "api": "Produce",
             "api_key": 0, "version": 9, "correlation_id": 5, "size_bytes": 120,
             "rtt_ms": 1.25 if direction == "recv" else None,
             "body": {"transactional_id": None, "acks": 1, "timeout_ms": 100, "topic_data": [
                 {"name": "t", "partition_data": [{"index": 0, "records": record_batch(0, [(b"a", b"b")])}]}]}}
    event.update(kw)
    return event


def test_tracer_text_and_json():
    out = io.StringIO()
    tracer = make_tracer(stream=out)
    tracer(trace_event("send", ts=1_700_000_000.5))
    lines = out.getvalue().splitlines()
    assert lines[0] == "22:13:20.500000  → node 1 127.0.0.1:9092  Produce v9  corr=5  120 B"
    assert "          records: 1 batch, 1 record, offsets 0-0" in lines[-1]
    out = io.StringIO()
    tracer = make_tracer("json", stream=out)
    body = {"responses": [], "throttle_time_ms": 0}
    tracer(trace_event("recv", body=body, ts=1_700_000_000.5))
    event = json.loads(out.getvalue())
    assert event == {"time": "2023-11-14T22:13:20.500000Z", "ts": 1700000000.5, "packet": None, "kind": "response",
                     "direction": "broker->client", "client": None, "broker": "127.0.0.1:9092", "node_id": 1,
                     "connection": None, "api": "Produce", "api_key": 0, "version": 9, "correlation_id": 5,
                     "size_bytes": 120, "rtt_ms": 1.25, "client_id": None, "errors": {},
                     "body": {"responses": [], "throttle_time_ms": 0}}


def test_tracer_through_logging(caplog):
    tracer = make_tracer(logger="kwire.protocol.trace")
    with caplog.at_level(logging.INFO, logger="kwire.protocol.trace"):
        tracer(trace_event("send"))  # DEBUG is off: nothing rendered
    assert not caplog.records
    with caplog.at_level(logging.DEBUG, logger="kwire.protocol.trace"):
        tracer(trace_event("send"))
    (rec,) = caplog.records
    assert "Produce v9  corr=5" in rec.getMessage()
    assert rec.kwire_event["body"]["topic_data"][0]["partition_data"][0]["records"]["records"] == 1
    stream = io.StringIO()
    handler = enable_protocol_log(stream)
    try:
        tracer(trace_event("recv", body={"responses": []}))
    finally:
        log = logging.getLogger("kwire.protocol.trace")
        log.removeHandler(handler)
        log.setLevel(logging.NOTSET)
    assert "← node 1 127.0.0.1:9092  Produce v9  corr=5  120 B  rtt=1.250 ms" in stream.getvalue()


def test_tracer_on_a_real_network_client(peer):
    from kwire.net import NetworkClient

    out, text = io.StringIO(), io.StringIO()
    raw: list[dict] = []
    json_tracer, text_tracer = make_tracer("json", stream=out), make_tracer(stream=text)

    def tracer(ev):
        raw.append(ev)
        json_tracer(ev)
        text_tracer(ev)

    client = NetworkClient({"bootstrap.servers": peer.bootstrap, "client.id": "trace-test"}, tracer=tracer)
    try:
        client.request(None, "Metadata", lambda v: {"topics": []}, timeout_ms=10_000)
        local = "%s:%d" % client._conns[next(iter(client._conns))].sock.getsockname()[:2]
    finally:
        client.close()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    pairs = {(e["api"], e["kind"]) for e in events}
    assert {("ApiVersions", "request"), ("ApiVersions", "response"), ("Metadata", "request"),
            ("Metadata", "response")} <= pairs
    assert all(e["broker"] and e["size_bytes"] for e in events)
    # as a capture shows them: both ends of the connection, the client id, rtt in microseconds
    assert all(e["client"] == local and e["client_id"] == "trace-test" for e in events), events[0]
    for ev, e in zip(raw, events):
        if e["kind"] == "response":
            assert isinstance(ev["rtt_us"], int) and ev["rtt_us"] >= 0
            assert e["rtt_ms"] == ev["rtt_us"] / 1000
    assert f"{local} → node -1 {peer.bootstrap}" in text.getvalue(), text.getvalue()[:300]


def test_renderer_colours_only_terminals():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    r = Renderer(stream=tty)
    r.write({"kind": "note", "ts": 0.0, "reason": "x"})
    assert r.color and "\x1b[" in tty.getvalue()
    plain = io.StringIO()
    Renderer(stream=plain).write({"kind": "note", "ts": 0.0, "reason": "x"})
    assert plain.getvalue() == "00:00:00.000000  NOTE\n  what: x\n"


def test_sasl_credentials_are_never_printed(capsys):
    secret = b"\x00alice\x00s3cret-password"
    frame = P.encode_request("SaslAuthenticate", 2, {"auth_bytes": secret}, correlation_id=5)
    for fmt in ("text", "json"):
        code, out, err = run_cli(capsys, "--hex", frame.hex(), "--format", fmt)
        assert code == 0, err
        assert "s3cret" not in out and secret.hex() not in out
        assert "redacted" in out
