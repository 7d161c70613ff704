"""Every message, every version, both directions, both codec twins.

"Every version" is every version kwire decodes -- including the decode-only ones (versions
Kafka 4.0 removed, transcribed from 3.9; unstable ones), not only those its client negotiates.

* round trip: random valid values encode and decode back to themselves;
* twins agree byte for byte;
* golden: kafka-python 3's generated codec (an independent encoder built from Kafka's JSON
  schemas) decodes our bytes and re-encodes them to the same bytes, and the reverse, for
  every API and version it has.
"""
from __future__ import annotations

import random

import pytest

from kwire import _pycodec
from kwire.errors import (
    KwireError,
    ProtocolError,
    TrailingBytesError,
    TruncatedError,
    UnsupportedVersionError,
)
from kwire.protocol import api as P

from .protocol_values import sample_struct

CASES = [(a.name, kind, v)
         for a in P.APIS.values()
         for kind in ("request", "response")
         for v in range(a.oldest_version, a.newest_version + 1)]


def _plan(name, kind, v):
    return P.request_plan(name, v) if kind == "request" else P.response_plan(name, v)


@pytest.mark.parametrize("name,kind,version", CASES, ids=[f"{n}-{k}-v{v}" for n, k, v in CASES])
def test_round_trip_every_version(codec, name, kind, version):
    plan = _plan(name, kind, version)
    rng = random.Random(f"{name}/{kind}/{version}")
    for _ in range(8):
        value = sample_struct(plan, rng)
        data = codec.encode_message(plan, value)
        assert codec.decode_message(plan, data) == value
        # The twins agree on the bytes.
        assert _pycodec.encode_message(plan, value) == data


@pytest.mark.parametrize("name,kind,version", CASES, ids=[f"{n}-{k}-v{v}" for n, k, v in CASES])
def test_truncation_is_a_typed_error(codec, name, kind, version):
    plan = _plan(name, kind, version)
    value = sample_struct(plan, random.Random(version))
    data = codec.encode_message(plan, value)
    for cut in range(len(data)):
        with pytest.raises(KwireError):
            codec.decode_message(plan, data[:cut])
    with pytest.raises(TrailingBytesError):
        codec.decode_message(plan, data + b"\x00")


def test_unknown_tagged_fields_are_kept_and_reencoded(codec):
    plan = P.request_plan("Fetch", 12)
    value = sample_struct(plan, random.Random(1))
    value["_unknown_tags"] = {77: b"\x01\x02\x03"}
    data = codec.encode_message(plan, value)
    back = codec.decode_message(plan, data)
    assert back["_unknown_tags"] == {77: b"\x01\x02\x03"}
    assert codec.encode_message(plan, back) == data


@pytest.mark.parametrize("version", [4, 11, 12, 17])
@pytest.mark.parametrize("source", ["bytes", "bytearray", "offset-view"])
def test_records_decode_as_read_only_views_of_the_message(codec, version, source):
    """A record set is sliced out of the message buffer, not copied (Fetch answers are mostly
    records); both twins hand out a read-only byte memoryview over the same bytes."""
    plan = P.response_plan("Fetch", version)
    blobs = [bytes(range(256)) * 3, b"", b"\x07" * 5]
    value = sample_struct(plan, random.Random(version))

    def element_plan(struct_plan, name):  # an array field's element struct plan
        return next(op for op in struct_plan[0] if op[1] == name)[4][4]

    topic_plan = element_plan(plan, "responses")
    part_plan = element_plan(topic_plan, "partitions")
    topic = sample_struct(topic_plan, random.Random(1))
    topic["partitions"] = [{**sample_struct(part_plan, random.Random(i)), "records": b} for i, b in enumerate(blobs)]
    value["responses"] = [topic]
    data = codec.encode_message(plan, value)
    buf = {"bytes": data, "bytearray": bytearray(data), "offset-view": memoryview(b"xyz" + data)[3:]}[source]
    back = codec.decode_message(plan, buf)
    got = [p["records"] for p in back["responses"][0]["partitions"]]
    assert [bytes(r) for r in got] == blobs
    for rec in got:
        assert isinstance(rec, memoryview) and rec.readonly and rec.format == "B" and rec.ndim == 1
    if source == "bytearray":  # a view, not a copy: it sees the buffer it was sliced from
        buf[bytes(buf).index(blobs[0]) + 1] ^= 0xFF
        assert got[0][1] == blobs[0][1] ^ 0xFF


def test_forged_array_count_does_not_allocate(codec):
    plan = P.response_plan("Metadata", 1)
    # throttle-less v1: brokers array count claims 2**31-1 elements in a 6-byte body.
    with pytest.raises(TruncatedError):
        codec.decode_message(plan, b"\x7f\xff\xff\xff\x00\x00")


def test_negative_lengths_are_rejected(codec):
    plan = P.request_plan("FindCoordinator", 0)  # key: non-nullable string
    with pytest.raises(ProtocolError):
        codec.decode_message(plan, b"\xff\xfe")


def test_frames_with_headers(codec):
    body = {"client_software_name": "kwire", "client_software_version": "0.1"}
    frame = P.encode_request("ApiVersions", 3, body, correlation_id=42, client_id="me")
    req = P.decode_request(frame)
    assert (req.api.name, req.version, req.correlation_id, req.client_id) == ("ApiVersions", 3, 42, "me")
    assert req.body["client_software_name"] == "kwire"
    # ApiVersions responses use header v0 even at flexible versions.
    resp_body = sample_struct(P.response_plan("ApiVersions", 3), random.Random(3))
    rframe = P.encode_response("ApiVersions", 3, resp_body, correlation_id=42)
    assert rframe[4:8] == (42).to_bytes(4, "big")
    assert P.decode_response("ApiVersions", 3, rframe, size_prefix=True).body == resp_body
    # Fetch v12 is flexible: header v1 carries an (empty) tagged-field section.
    fbody = sample_struct(P.response_plan("Fetch", 12), random.Random(4))
    fframe = P.encode_response("Fetch", 12, fbody, correlation_id=7)
    assert fframe[8] == 0
    assert P.decode_response("Fetch", 12, fframe, size_prefix=None).correlation_id == 7


def test_size_prefix_mismatch_is_reported():
    frame = P.encode_request("Heartbeat", 4, {"group_id": "g"}, correlation_id=1)
    with pytest.raises(TruncatedError):
        P.decode_request(frame[:-1], size_prefix=True)


def test_consumer_protocol_payloads():
    sub = {"topics": ["a", "b"], "user_data": None,
           "owned_partitions": [{"topic": "a", "partitions": [0, 2]}], "generation_id": 5, "rack_id": "r1"}
    data = P.encode_subscription(3, sub)
    assert P.decode_subscription(data) == (3, sub)
    # A newer version parses with the newest format we know; its extra bytes are ignored.
    newer = b"\x00\x07" + data[2:] + b"future"
    assert P.decode_subscription(newer) == (7, sub)
    asg = {"assigned_partitions": [{"topic": "a", "partitions": [1]}], "user_data": b"u"}
    assert P.decode_assignment(P.encode_assignment(1, asg)) == (1, asg)
    with pytest.raises(TruncatedError):
        P.decode_assignment(b"\x00")


# --- golden: kafka-python 3's independent codec ------------------------------------------

def _kafka_python_classes() -> dict:
    """(api key, kind) -> kafka-python 3's message class (JSON-driven, one per API)."""
    import importlib
    import pkgutil

    import kafka.protocol as kp

    out = {}
    for info in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        try:
            mod = importlib.import_module(info.name)
        except Exception:  # pragma: no cover - a module needing an optional extra
            continue
        for attr in dir(mod):
            j = getattr(getattr(mod, attr), "_json", None)
            if isinstance(j, dict) and j.get("type") in ("request", "response"):
                out.setdefault((j["apiKey"], j["type"]), getattr(mod, attr))
    return out


kp_classes = _kafka_python_classes()


def _kp_versions(cls):
    lo, _, hi = cls._json["validVersions"].partition("-")
    return range(int(lo), int(hi or lo) + 1)


GOLDEN = [(n, k, v) for (n, k, v) in CASES
          if (P.api(n).key, k) in kp_classes and v in _kp_versions(kp_classes[(P.api(n).key, k)])]


def test_golden_covers_every_api_kafka_python_has():
    # kafka-python 3 has 52 of Kafka's APIs (no telemetry, KRaft/controller, share or
    # streams groups); every one of them is cross-checked at every version both know.
    assert {(P.api(n).key, k) for n, k, _ in GOLDEN} == set(kp_classes)
    assert len({P.api(n).key for n, _, _ in GOLDEN}) >= 52


@pytest.mark.parametrize("name,kind,version", GOLDEN, ids=[f"{n}-{k}-v{v}" for n, k, v in GOLDEN])
def test_golden_against_kafka_python(codec, name, kind, version):
    plan = _plan(name, kind, version)
    cls = kp_classes[(P.api(name).key, kind)]
    rng = random.Random(f"golden/{name}/{kind}/{version}")
    for _ in range(5):
        value = sample_struct(plan, rng)
        if name == "ApiVersions" and kind == "response":
            value["error_code"] = 0  # kafka-python reads an error response as v0 (see test below)
        ours = codec.encode_message(plan, value)
        theirs_obj = cls.decode(ours, version=version)
        theirs_obj._header = None  # decode() leaves it unset; encode() reads it
        theirs = bytes(theirs_obj.encode(version=version))
        assert theirs == ours
        assert codec.decode_message(plan, theirs) == value


def test_api_versions_error_response_falls_back_to_v0():
    # A broker that does not support the requested ApiVersions version answers with a v0 body
    # (KIP-511); the client must parse it to learn which versions it may use.
    body = {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]}
    frame = P.encode_response("ApiVersions", 0, body, correlation_id=9)
    resp = P.decode_response("ApiVersions", 4, frame, size_prefix=True)
    assert resp.version == 0
    assert resp.body["error_code"] == 35
    assert resp.body["api_keys"] == body["api_keys"]


def test_request_header_versions_0_to_2():
    body = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    for hv in (0, 1, 2):
        frame = P.encode_request("Heartbeat", 3, body, correlation_id=11, client_id="cid", header_version=hv)
        req = P.decode_request(frame, header_version=hv)
        assert (req.correlation_id, req.body["member_id"]) == (11, "m")
        assert req.client_id == (None if hv == 0 else "cid")
    # v0: api key, version, correlation id, then the body at once (no client id)
    v0 = P.encode_request("Heartbeat", 3, body, correlation_id=11, header_version=0, size_prefix=False)
    assert v0[:8] == bytes.fromhex("000c0003 0000000b".replace(" ", "")) and v0[8:10] == b"\x00\x01"
    with pytest.raises(UnsupportedVersionError):
        P.encode_request("Heartbeat", 3, body, correlation_id=1, header_version=3)
