"""Protocol-message decoding: a Fetch response with many partitions, kwire (compiled and pure)
against kafka-python 3's decoder.

Fetch v11 is the classic layout (int16/int32 lengths); v17 is flexible (compact lengths and
tagged fields: unsigned varints everywhere), so the pair also measures kwire's varint path.
Each partition carries a small records blob (decoded separately by the record layer, so here it
is only sliced out).  ``messages/s`` lands in extra_info and in the summary table.
"""
from __future__ import annotations

import uuid

import pytest

from kwire import _codec, _pycodec
from kwire.protocol import api as P

TOPICS = 10
PARTITIONS = 20  # per topic: 200 partitions in one response
RECORDS_BLOB = bytes(range(256)) * 2


def _fetch_body(version: int) -> dict:
    return {
        "throttle_time_ms": 0, "error_code": 0, "session_id": 7,
        "responses": [{
            "topic": f"topic-{t}", "topic_id": uuid.UUID(int=t + 1),
            "partitions": [{
                "partition_index": p, "error_code": 0, "high_watermark": 1_000_000 + p,
                "last_stable_offset": 1_000_000 + p, "log_start_offset": 0,
                "aborted_transactions": [], "preferred_read_replica": -1, "records": RECORDS_BLOB,
            } for p in range(PARTITIONS)],
        } for t in range(TOPICS)],
    }


@pytest.fixture(params=[11, 17], ids=lambda v: f"fetch-v{v}")
def fetch_response(request):
    v = request.param
    return v, P.encode_response_body("Fetch", v, _fetch_body(v))


@pytest.mark.parametrize("codec", [_codec, _pycodec], ids=["kwire-cython", "kwire-pure"])
def test_fetch_response_decode_kwire(benchmark, report, fetch_response, codec):
    v, data = fetch_response
    plan = P.response_plan("Fetch", v)
    loops = 50

    def run():  # results are dropped as they come, as a client would after using them
        for _ in range(loops):
            codec.decode_message(plan, data)

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    report(f"fetch-v{v}-decode/{codec.IMPLEMENTATION}", loops, unit="messages")


def test_fetch_response_decode_kafka_python(benchmark, report, fetch_response):
    from kafka.protocol.consumer import FetchResponse

    v, data = fetch_response
    loops = 50

    def run():
        for _ in range(loops):
            FetchResponse.decode(data, version=v)

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    report(f"fetch-v{v}-decode/kafka-python", loops, unit="messages")
