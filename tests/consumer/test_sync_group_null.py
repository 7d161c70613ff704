"""A SyncGroup answer with a null assignment keeps its error code (issue 14, defect 11).

Kafka sends empty bytes, never null; a broker that sends null (int32 -1, or compact length 0
from v4) with an error code used to make the whole answer undecodable ("invalid bytes length
-1"), so the member saw a decoding failure instead of, say, REBALANCE_IN_PROGRESS.  (The
coordinator takes a None assignment as an empty one; the fake cluster's SyncGroup error
answers now carry null, so the coordinator tests exercise that too.)"""
from __future__ import annotations

import struct

import pytest

from kwire.consumer._codes import E
from kwire.protocol import api as P


def _null_assignment_body(version: int, code: int) -> bytes:
    """SyncGroup response body written by hand, with a null assignment."""
    out = b""
    if version >= 1:
        out += struct.pack(">i", 0)          # throttle_time_ms
    out += struct.pack(">h", code)           # error_code
    if version >= 5:
        out += b"\x00\x00"                   # protocol_type, protocol_name: null (compact)
    if version >= 4:
        out += b"\x00" + b"\x00"             # assignment: null (compact), tagged fields: none
    else:
        out += struct.pack(">i", -1)         # assignment: null
    return out


@pytest.mark.parametrize("version", range(0, 6))
def test_null_assignment_decodes_with_its_error_code(codec, version):
    plan = P.response_plan("SyncGroup", version)
    body = codec.decode_message(plan, _null_assignment_body(version, E.REBALANCE_IN_PROGRESS))
    assert body["error_code"] == E.REBALANCE_IN_PROGRESS
    assert body["assignment"] is None
