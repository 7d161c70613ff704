"""kwire.Producer against the real peers, read back by confluent-kafka; and the record codec
against librdkafka's encoder (golden bytes fetched raw from Tansu)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import confluent_kafka as ck
import pytest

from kwire.errors import KafkaTimeoutError, MessageTooLargeError
from kwire.net import NetworkClient
from kwire.producer import Producer, fnv1a, murmur2, partition_for

from .fake_broker import FakeBroker, api_versions_ok, frame
from .wire_bodies import fetch_body

GOLDEN = Path(__file__).parent / "golden"
COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _signed(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


# --- hashing (no I/O) -----------------------------------------------------------------------

def test_murmur2_matches_kafka_java_vectors():
    # Values from Kafka's own unit test of Utils.murmur2 (signed Java ints).
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for data, expected in cases.items():
        assert _signed(murmur2(data)) == expected, data


def test_fnv1a_reference_values():
    assert fnv1a(b"") == 0x811C9DC5
    assert fnv1a(b"a") == 0xE40C292C
    assert fnv1a(b"foobar") == 0xBF9CF968


def _keys():
    return [b"", b"a", b"key-1", b"user:42", bytes(range(7)), "ünïcode".encode(), b"x" * 100] + \
        [f"k{i}".encode() for i in range(40)]


def test_partitioners_match_librdkafka(peer, create_topic, unique_topic):
    n = create_topic(peer, unique_topic, 7)
    keys = _keys()
    for name in ("murmur2_random", "murmur2", "consistent_random", "consistent", "fnv1a_random", "fnv1a"):
        got = {}
        p = ck.Producer({"bootstrap.servers": peer.bootstrap, "partitioner": name, "linger.ms": 5})
        sent = keys + ([None] if not name.endswith("_random") else [])
        for k in sent:
            p.produce(unique_topic, b"v", key=k,
                      on_delivery=lambda err, m, k=k, got=got: got.__setitem__(k, m.partition()))
        assert p.flush(10) == 0
        del p
        for k in sent:
            ours = partition_for(name, k, n)
            if ours is None:  # a random choice (e.g. an empty key with consistent_random)
                assert k is None or (name == "consistent_random" and k == b"")
                continue
            assert ours == got[k], (name, k)


# --- kwire produces, confluent-kafka consumes -----------------------------------------------------

def _records(n: int):
    out = []
    base_ts = 1_700_000_000_000
    for i in range(n):
        key = None if i % 7 == 3 else (b"" if i % 11 == 5 else f"key-{i % 5}".encode())
        value = None if i % 13 == 6 else (f"value-{i}-".encode() * (1 + i % 9))
        if i % 4 == 0:
            headers = None
        elif i % 4 == 1:
            headers = {"h1": b"one", "h2": None}
        else:
            headers = [("dup", b"a"), ("dup", b"b"), ("ü", "text"), ("empty", b"")]
        timestamp = None if i % 3 == 0 else base_ts + i
        partition = 0 if i % 10 == 9 else None
        out.append(dict(key=key, value=value, headers=headers, timestamp=timestamp, partition=partition))
    return out


def _consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 20.0):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        md = c.list_topics(topic, timeout=10)
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in md.topics[topic].partitions])
        got = []
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m)
        extra = c.poll(0.3)
        assert extra is None or extra.error() is not None, "more records than produced"
        return got
    finally:
        c.close()


def _as_tuple(m, timestamp):
    hdrs = m.headers()
    return (m.partition(), m.offset(), m.key(), m.value(), [tuple(h) for h in hdrs] if hdrs else None,
            timestamp)


def _as_tuple_report(m):
    # The record's own timestamp: librdkafka's mock answers Produce with LogAppendTimeMs=1234
    # for CreateTime topics, which the report's timestamp() faithfully passes on.
    return _as_tuple(m, (ck.TIMESTAMP_CREATE_TIME, m.create_timestamp()))


def _as_tuple_consumed(m):
    return _as_tuple(m, m.timestamp())


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_kwire_produces_confluent_reads_exactly(broker, create_topic, unique_topic, compression):
    create_topic(broker, unique_topic, 3)
    reports = []
    conf = {"bootstrap.servers": broker.bootstrap, "compression.type": compression, "linger.ms": 10,
            "batch.num.messages": 16}  # several batches per partition
    produced = _records(60)
    with Producer(conf) as p:
        for i, r in enumerate(produced):
            p.produce(unique_topic, on_delivery=lambda err, m, i=i: reports.append((i, err, m)), **r)
        assert len(p) == 60
        assert p.flush(15) == 0
        assert len(p) == 0
    assert [e for _, e, _ in reports if e is not None] == []
    ours = sorted(_as_tuple_report(m) for _, _, m in reports)
    assert len({(t[0], t[1]) for t in ours}) == 60  # distinct (partition, offset)
    theirs = sorted(_as_tuple_consumed(m) for m in _consume_all(broker.bootstrap, unique_topic, 60))
    assert theirs == ours
    for i, _, m in reports:  # explicit partitions and timestamps were honoured
        r = produced[i]
        if r["partition"] is not None:
            assert m.partition() == r["partition"]
        if r["timestamp"] is not None:
            assert m.create_timestamp() == r["timestamp"]
        assert m.value() == r["value"]


def test_keyed_records_land_where_java_puts_them(broker, create_topic, unique_topic):
    n = create_topic(broker, unique_topic, 3)
    reports = []
    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0}) as p:
        for k in _keys():
            p.produce(unique_topic, b"v", key=k, on_delivery=lambda e, m: reports.append(m))
        p.flush(10)
    assert len(reports) == len(_keys())
    for m in reports:
        assert m.error() is None
        assert m.partition() == (murmur2(m.key()) & 0x7FFFFFFF) % n


def test_null_keys_stick_to_one_partition_per_batch(peer, create_topic, unique_topic):
    create_topic(peer, unique_topic, 5)
    reports = []
    with Producer({"bootstrap.servers": peer.bootstrap, "linger.ms": 1000}) as p:
        p.list_topics(unique_topic)  # warm the metadata
        p.poll(0.2)
        for i in range(30):
            p.produce(unique_topic, b"v%d" % i, on_delivery=lambda e, m: reports.append(m))
        p.flush(10)
    assert len({m.partition() for m in reports}) == 1
    assert [m.offset() for m in reports] == list(range(reports[0].offset(), reports[0].offset() + 30))


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(peer, create_topic, unique_topic, acks):
    create_topic(peer, unique_topic, 1)
    reports = []
    with Producer({"bootstrap.servers": peer.bootstrap, "acks": acks, "linger.ms": 0}) as p:
        for i in range(5):
            p.produce(unique_topic, b"v%d" % i, on_delivery=lambda e, m: reports.append((e, m)))
        assert p.flush(10) == 0
    assert all(e is None for e, _ in reports)
    offsets = [m.offset() for _, m in reports]
    assert offsets == ([-1001] * 5 if acks == "0" else list(range(5)))  # OFFSET_INVALID
    assert len(_consume_all(peer.bootstrap, unique_topic, 5)) == 5


def test_poll_serves_callbacks_and_config_callback(peer, create_topic, unique_topic):
    create_topic(peer, unique_topic, 1)
    seen = []
    with Producer({"bootstrap.servers": peer.bootstrap, "on_delivery": lambda e, m: seen.append(m)}) as p:
        p.produce(unique_topic, "text value", key="text key")
        served = 0
        deadline = time.monotonic() + 10
        while not served and time.monotonic() < deadline:
            served = p.poll(0.5)
        assert served == 1 and len(p) == 0
    assert seen[0].value() == b"text value" and seen[0].key() == b"text key"
    assert seen[0].latency() is not None and seen[0].latency() >= 0


def test_local_errors():
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": 2,
                  "message.max.bytes": 1000})
    try:
        with pytest.raises(MessageTooLargeError):
            p.produce("t", b"x" * 2000)
        p.produce("t", b"a")
        p.produce("t", b"b")
        with pytest.raises(BufferError):
            p.produce("t", b"c")
        with pytest.raises(TypeError):
            Producer({"bootstrap.servers": "127.0.0.1:1"}).produce("t", 42)
    finally:
        p._net.close()


def test_delivery_timeout_for_unknown_topic(peer, unique_topic):
    reports = []
    conf = {"bootstrap.servers": peer.bootstrap, "allow.auto.create.topics": False,
            "delivery.timeout.ms": 800}
    with Producer(conf) as p:
        p.produce(unique_topic, b"v", on_delivery=lambda e, m: reports.append(e))
        t0 = time.monotonic()
        assert p.flush(5) == 0
        assert time.monotonic() - t0 < 3
    assert isinstance(reports[0], KafkaTimeoutError)


def test_retries_after_not_leader_with_metadata_refresh():
    state = {"produce": 0, "metadata": 0}
    fb_holder = {}

    def handler(key, version, cid, body):
        if key == 18:
            return api_versions_ok(version, cid, [
                {"api_key": 18, "min_version": 0, "max_version": 3},
                {"api_key": 3, "min_version": 0, "max_version": 12},
                {"api_key": 0, "min_version": 3, "max_version": 9}])
        if key == 3:
            state["metadata"] += 1
            return frame("Metadata", version, cid, {
                "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": fb_holder["fb"].port}],
                "controller_id": 1, "cluster_id": "fake",
                "topics": [{"error_code": 0, "name": "t", "partitions": [
                    {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                     "replica_nodes": [1], "isr_nodes": [1]}]}]})
        if key == 0:
            state["produce"] += 1
            code = 6 if state["produce"] == 1 else 0  # NOT_LEADER_OR_FOLLOWER once
            return frame("Produce", version, cid, {"responses": [{"name": "t", "partition_responses": [
                {"index": 0, "error_code": code, "base_offset": -1 if code else 42}]}]})
        return None

    reports = []
    with FakeBroker(handler) as fb:
        fb_holder["fb"] = fb
        with Producer({"bootstrap.servers": fb.bootstrap, "retry.backoff.ms": 20}) as p:
            p.produce("t", b"v", on_delivery=lambda e, m: reports.append((e, m)))
            assert p.flush(5) == 0
    err, m = reports[0]
    assert err is None and m.offset() == 42 and m.partition() == 0
    assert state["produce"] == 2 and state["metadata"] >= 2


# --- confluent-kafka produces, kwire fetches raw and decodes (golden bytes) ------------------------

def _golden_records():
    base_ts = 1_700_000_000_000
    out = []
    for i in range(12):
        headers = [("trace", f"t{i}".encode()), ("null", None)] if i % 2 else []
        out.append((None if i == 4 else f"k{i}".encode(), None if i == 7 else f"golden value {i} ".encode() * 3,
                    headers, base_ts + i * 1000))
    return out


def _record_json(offset, ts, key, value, headers):
    return {"offset": offset, "timestamp": ts, "key": None if key is None else key.hex(),
            "value": None if value is None else value.hex(),
            "headers": [[k, None if v is None else v.hex()] for k, v in (headers or [])]}


def _decode_fetch_records(records_blob):
    from kwire.records import iter_records
    return [_record_json(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(records_blob)]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_librdkafka_batches_decode_exactly(peer, create_topic, unique_topic, compression):
    create_topic(peer, unique_topic, 1)
    delivered = []
    p = ck.Producer({"bootstrap.servers": peer.bootstrap, "compression.type": compression,
                     "linger.ms": 50, "batch.num.messages": 5})
    produced = _golden_records()
    for i, (key, value, headers, ts) in enumerate(produced):
        p.produce(unique_topic, value, key, headers=headers or None, timestamp=ts, partition=0,
                  on_delivery=lambda e, m, i=i: delivered.append((i, e, m)))
    assert p.flush(10) == 0
    del p
    assert all(e is None for _, e, _ in delivered) and len(delivered) == len(produced)
    # (delivery reports carry no headers: take them from what was produced)
    expected = sorted((_record_json(m.offset(), produced[i][3], produced[i][0], produced[i][1], produced[i][2])
                       for i, _, m in delivered), key=lambda r: r["offset"])

    with NetworkClient({"bootstrap.servers": peer.bootstrap}) as c:
        c.metadata.add_topics([unique_topic])
        md = c.refresh_metadata(timeout_ms=5000)
        leader = md.leader_for(unique_topic, 0)
        f = c.send(leader, "Fetch", fetch_body(unique_topic, md.topic_id(unique_topic)), keep_raw=True)
        c.wait(f)
        resp = f.result()
    part = resp["responses"][0]["partitions"][0]
    assert part["error_code"] == 0 and part["high_watermark"] == len(expected)
    assert _decode_fetch_records(part["records"]) == expected

    # keep a few raw responses as golden files for the offline codec tests
    stem = GOLDEN / f"fetch_librdkafka_{compression}"
    if os.environ.get("KWIRE_REGEN_GOLDEN") or not stem.with_suffix(".bin").exists():
        GOLDEN.mkdir(exist_ok=True)
        stem.with_suffix(".bin").write_bytes(f.raw)
        stem.with_suffix(".json").write_text(json.dumps({
            "source": f"librdkafka {ck.libversion()[0]} producer (compression.type={compression}, "
                      "linger.ms=50, batch.num.messages=5) -> Tansu; Fetch response payload "
                      "(response header + body, no size prefix)",
            "api": "Fetch", "version": f.version, "topic": unique_topic, "records": expected}, indent=1) + "\n")


def _golden_files():
    return sorted(GOLDEN.glob("fetch_librdkafka_*.json")) if GOLDEN.exists() else []


@pytest.mark.parametrize("path", _golden_files(), ids=lambda p: p.stem)
def test_golden_fetch_responses_decode_offline(path):
    from kwire.protocol import api as P
    meta = json.loads(path.read_text())
    raw = path.with_suffix(".bin").read_bytes()
    resp = P.decode_response(meta["api"], meta["version"], raw).body
    part = resp["responses"][0]["partitions"][0]
    assert _decode_fetch_records(part["records"]) == meta["records"]
