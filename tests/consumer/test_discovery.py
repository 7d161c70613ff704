"""CoordinatorDiscovery alone: when it asks, what it asks at every FindCoordinator version, what
it keeps, and how it forgets."""
from __future__ import annotations

import pytest

from kwire.consumer._codes import E
from kwire.consumer.discovery import TRANSACTION_KEY, CoordinatorDiscovery
from kwire.errors import KafkaConnectionError, KwireError
from kwire.protocol import api as P


def test_asks_only_when_wanted_and_unknown_and_backs_off():
    d = CoordinatorDiscovery("g", retry_backoff_ms=100)
    assert d.poll(0, False, context=None, owner=None) is None and d.deadline(False) is None
    req = d.poll(0, True, context="ctx", owner="o")
    assert req is not None and req.api == "FindCoordinator" and req.node is None
    assert d.poll(0, True, context=None, owner=None) is None  # one in flight
    assert d.on_response(KafkaConnectionError("down"), 1000) is None
    assert d.node_id is None and d.deadline(True) == 1100
    assert d.poll(1050, True, context=None, owner=None) is None
    assert d.poll(1100, True, context=None, owner=None) is not None
    d.on_response({"error_code": E.COORDINATOR_NOT_AVAILABLE, "node_id": -1, "host": "", "port": -1}, 2000)
    assert d.node_id is None and d.deadline(True) == 2100


@pytest.mark.parametrize("version", range(P.api("FindCoordinator").min_version,
                                          P.api("FindCoordinator").max_version + 1))
def test_the_request_and_answer_at_every_version(version):
    d = CoordinatorDiscovery("tx-1", key_type=TRANSACTION_KEY)
    req = d.poll(0, True, context=None, owner=None)
    body = P.decode_request_body("FindCoordinator", version,
                                 P.encode_request_body("FindCoordinator", version, req.body(version)))
    if version >= 4:
        assert body["coordinator_keys"] == ["tx-1"]
    else:
        assert body["key"] == "tx-1"
    if version >= 1:
        assert body["key_type"] == TRANSACTION_KEY
    if version >= 4:
        resp = {"coordinators": [{"key": "other", "node_id": 9, "host": "h9", "port": 9, "error_code": 0},
                                 {"key": "tx-1", "node_id": 3, "host": "h3", "port": 9093, "error_code": 0}]}
    else:
        resp = {"error_code": 0, "node_id": 3, "host": "h3", "port": 9093}
    resp = P.decode_response_body("FindCoordinator", version,
                                  P.encode_response_body("FindCoordinator", version, resp))
    epoch = d.epoch
    assert d.on_response(resp, 5) is None
    assert (d.node_id, d.host, d.port) == (3, "h3", 9093) and d.epoch == epoch + 1
    assert d.poll(10, True, context=None, owner=None) is None  # known: nothing to ask


def test_authorization_is_returned_as_fatal_and_forget_starts_over():
    d = CoordinatorDiscovery("g", retry_backoff_ms=50)
    d.poll(0, True, context=None, owner=None)
    err = d.on_response({"error_code": E.GROUP_AUTHORIZATION_FAILED, "node_id": -1, "host": "",
                         "port": -1, "error_message": "no"}, 0)
    assert isinstance(err, KwireError) and "GROUP_AUTHORIZATION_FAILED" in repr(err) + str(type(err))
    d.poll(100, True, context=None, owner=None)
    d.on_response({"error_code": 0, "node_id": 1, "host": "h", "port": 1}, 100)
    epoch = d.epoch
    assert d.forget(200) is True and d.node_id is None and d.epoch == epoch + 1
    assert d.forget(210) is False
    assert d.deadline(True) == 260  # (each report of a gone coordinator backs off again)
