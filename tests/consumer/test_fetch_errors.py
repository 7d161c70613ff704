"""Garbage in a Fetch answer is not silent (issue 14, defect 8): an answer that cannot be read
reaches the application's error_cb (and the log) as a ProtocolError, instead of consume()
returning nothing forever.  A scripted broker serves Metadata and answers every Fetch with
the garbage."""
from __future__ import annotations

import logging
import struct
import time

import pytest

from kwire import TopicPartition
from kwire.consumer import Consumer
from kwire.errors import ProtocolError

from ..fake_broker import FakeBroker, api_versions_ok, frame

KEYS = [{"api_key": 18, "min_version": 0, "max_version": 4},
        {"api_key": 3, "min_version": 1, "max_version": 12},
        {"api_key": 1, "min_version": 4, "max_version": 12}]


def _broker(garbage):
    holder = {}

    def handler(key, version, cid, body):
        if key == 18:
            return api_versions_ok(version, cid, KEYS)
        if key == 3:
            return frame("Metadata", version, cid, {
                "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": holder["port"], "rack": None}],
                "cluster_id": "fake", "controller_id": 0,
                "topics": [{"error_code": 0, "name": "t", "is_internal": False, "partitions": [
                    {"error_code": 0, "partition_index": 0, "leader_id": 0, "leader_epoch": 0,
                     "replica_nodes": [0], "isr_nodes": [0], "offline_replicas": []}]}]})
        if key == 1:
            return garbage(version, cid)
        return None

    fb = FakeBroker(handler)
    holder["port"] = fb.port
    return fb


def _huge_length(version, cid):
    return struct.pack(">ii", 0x7FFFFFFF, cid) + b"\x00" * 32


def _truncated(version, cid):
    whole = frame("Fetch", version, cid, {
        "throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
            {"topic": "t", "partitions": [{"partition_index": 0, "error_code": 0, "high_watermark": 10,
                                           "last_stable_offset": 10, "log_start_offset": 0,
                                           "aborted_transactions": [], "preferred_read_replica": -1,
                                           "records": b"\x00" * 200}]}]})
    payload = whole[4:-60]  # the frame ends inside the partition's records
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("garbage", [_huge_length, _truncated], ids=["length-2^31-1", "truncated"])
def test_unreadable_fetch_answer_reaches_error_cb_and_the_log(garbage, caplog):
    errors: list = []
    with _broker(garbage) as fb, caplog.at_level(logging.WARNING, logger="kwire"):
        c = Consumer({"bootstrap.servers": fb.bootstrap, "error_cb": errors.append,
                      "reconnect.backoff.ms": 50})
        try:
            c.assign([TopicPartition("t", 0, 0)])
            end = time.monotonic() + 30
            while not errors and time.monotonic() < end:
                assert c.consume(10, timeout=0.2) == []
        finally:
            c.close()
    assert errors and isinstance(errors[0], ProtocolError), errors
    assert any("fetch from node 0 failed" in r.getMessage() for r in caplog.records)
