"""Connection set-up, without I/O: the ApiVersions negotiation, the version each request goes
at, and when a SASL session must be renewed.

The :class:`~kwire.net.client.NetworkClient` writes what these return and feeds them the
answers it reads; nothing here touches a socket or a clock.

ApiVersions (KIP-511)::

    client: ApiVersions vN (the newest kwire knows)
    broker: error_code=0, api_keys=[(key, min, max)...]          -> negotiated
        or: error_code=UNSUPPORTED_VERSION in a v0-format body   -> ask again at
            listing (at least) its ApiVersions range                min(kwire max, theirs, N-1)

Quirks of librdkafka's mock cluster (2.x) that are tolerated here, and only these:

* it answers UNSUPPORTED_VERSION with a body that is neither v0 nor flexible (a one-byte array
  count, a throttle time): when that body does not parse as v0 we step down one version;
* it ends flexible responses with one extra empty tagged-field section (a lone 0x00 after the
  body): :func:`decode_body` ignores up to :data:`MAX_ZERO_PADDING` trailing zero bytes.

Re-authentication (KIP-368): a SaslAuthenticate answer may give the session a lifetime;
:func:`reauth_at_ms` says when to renew it in band.
"""
from __future__ import annotations

import logging
import random
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import __version__
from ..errors import (
    KwireError,
    ProtocolError,
    TrailingBytesError,
    UnsupportedVersionError,
    for_code,
)
from ..protocol import api as _api

__all__ = ["API_VERSIONS", "SetupRequest", "SetupStep", "ApiVersionsNegotiation", "choose_version",
           "decode_body", "reauth_at_ms", "REAUTH_SHARE", "REAUTH_MARGIN_MS", "MAX_ZERO_PADDING"]

_log = logging.getLogger("kwire.net")

API_VERSIONS = _api.api("ApiVersions")
UNSUPPORTED_VERSION = 35
MAX_ZERO_PADDING = 2
# Re-authenticate after this share of the broker's session lifetime, less up to 5% jitter (Java's
# client: 85-95%) -- but at least REAUTH_MARGIN_MS before the session ends, or after three
# quarters of a shorter one: a request written just before the renewal starts must still reach
# the broker before the session expires, or the broker closes the connection, and with a short
# lifetime 10% is not much (200 ms of a 2 s session: a loaded machine's broker answered in
# 292 ms and a consumer's Fetch arrived late).  Not earlier: Kafka refuses a re-authentication
# less than a second after the previous one (ILLEGAL_SASL_STATE).
REAUTH_SHARE = 0.9
REAUTH_MARGIN_MS = 1000
_I16 = struct.Struct(">h")

ApiVersionRanges = dict[int, tuple[int, int]]  # api key -> (min, max) the broker supports


@dataclass(frozen=True)
class SetupRequest:
    """A set-up request to write: ApiVersions, SaslHandshake or SaslAuthenticate."""

    api: _api.Api
    version: int
    body: dict[str, Any]
    timeout_ms: int | None = None  # None: socket.connection.setup.timeout.ms

    def __repr__(self) -> str:  # auth_bytes carry credentials
        return f"<SetupRequest {self.api.name} v{self.version}>"


@dataclass(frozen=True)
class SetupStep:
    """What a set-up answer leads to.  ``body`` is the decoded answer (the driver traces it
    before acting).  Then exactly one of: ``error`` (close the connection with it), ``send``
    (the next set-up request), ``api_versions`` (negotiated), ``authenticated`` (the SASL
    exchange succeeded; renew the session at ``reauth_at_ms``, 0 = never)."""

    body: dict[str, Any]
    error: KwireError | None = None
    send: SetupRequest | None = None
    api_versions: ApiVersionRanges | None = None
    authenticated: bool = False
    session_lifetime_ms: int = 0
    reauth_at_ms: int = 0

    def __repr__(self) -> str:  # the body may carry auth_bytes
        what = ("error" if self.error is not None else "send" if self.send is not None
                else "negotiated" if self.api_versions is not None else
                "authenticated" if self.authenticated else "?")
        return f"<SetupStep {what}>"


class ApiVersionsNegotiation:
    """One connection's ApiVersions exchange: :meth:`request`, then :meth:`on_answer` for each
    answer until it returns ``api_versions`` or an ``error``."""

    def __init__(self, node_id: int, *, client_software_version: str = __version__) -> None:
        self.node_id = node_id
        self.version = API_VERSIONS.max_version  # of the request on the wire
        self._body = {"client_software_name": "kwire", "client_software_version": client_software_version}

    def request(self) -> SetupRequest:
        return SetupRequest(API_VERSIONS, self.version, dict(self._body))

    def on_answer(self, payload: bytes | bytearray | memoryview) -> SetupStep:
        """The answer's payload (header included, size prefix not).  Raises a KwireError if it
        cannot be decoded at all."""
        error_code = _I16.unpack_from(payload, 4)[0] if len(payload) >= 6 else -1
        if error_code == UNSUPPORTED_VERSION:
            return self._step_down(payload, error_code)
        body = _api.decode_response(API_VERSIONS, self.version, payload).body
        if body["error_code"] != 0:
            return SetupStep(body, error=for_code(
                body["error_code"], f"ApiVersions v{self.version} refused by node {self.node_id}"))
        return SetupStep(body, api_versions={
            k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]})

    def _step_down(self, payload: bytes | bytearray | memoryview, error_code: int) -> SetupStep:
        try:
            body = _api.decode_response(API_VERSIONS, 0, payload).body
            theirs = next((k["max_version"] for k in body["api_keys"]
                           if k["api_key"] == API_VERSIONS.key), None)
        except KwireError:  # the mock cluster's body: neither v0 nor flexible
            body = {"error_code": error_code, "api_keys": []}
            theirs = None
        sent = self.version
        retry = sent - 1 if theirs is None else min(API_VERSIONS.max_version, theirs, sent - 1)
        if retry < 0:
            return SetupStep(body, error=ProtocolError(
                f"node {self.node_id} supports no ApiVersions version kwire knows"))
        _log.debug("node %s: ApiVersions v%d unsupported; retrying with v%d", self.node_id, sent, retry)
        self.version = retry
        return SetupStep(body, send=self.request())


def choose_version(api_versions: Mapping[int, tuple[int, int]] | None, a: _api.Api,
                   requested: int | None, caps: tuple[int | None, int | None] = (None, None), *,
                   node_id: int, address: str) -> int:
    """The version a request of ``a`` goes at: ``requested`` if both sides support it (and it
    is within ``caps``), else the newest both support within ``caps``."""
    broker = (api_versions or {}).get(a.key)
    if broker is None:
        raise UnsupportedVersionError(f"broker node {node_id} ({address}) does not support {a.name}")
    lo = max(a.min_version, broker[0])
    hi = min(a.max_version, broker[1])
    if caps[0] is not None:
        lo = max(lo, caps[0])
    if caps[1] is not None:
        hi = min(hi, caps[1])
    if requested is not None:
        if not lo <= requested <= hi:
            raise UnsupportedVersionError(
                f"{a.name} v{requested} is not supported: kwire knows v{a.min_version}-{a.max_version}, "
                f"node {node_id} v{broker[0]}-{broker[1]}")
        return requested
    if lo > hi:
        raise UnsupportedVersionError(
            f"no common {a.name} version: kwire knows v{a.min_version}-{a.max_version}, "
            f"node {node_id} v{broker[0]}-{broker[1]}")
    return hi


def reauth_at_ms(sent_ms: int, session_lifetime_ms: int, rng: random.Random) -> int:
    """When to renew a SASL session the broker gave ``session_lifetime_ms`` (0: no limit, never).

    Counted from ``sent_ms``, when the SaslAuthenticate that got the lifetime was written: the
    broker's clock started between that and its answer."""
    if session_lifetime_ms <= 0:
        return 0
    share_ms = int(session_lifetime_ms * REAUTH_SHARE * rng.uniform(0.95, 1.0))
    return sent_ms + max(session_lifetime_ms * 3 // 4, min(share_ms, session_lifetime_ms - REAUTH_MARGIN_MS))


def decode_body(a: _api.Api, version: int, payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Decode a response payload, strictly -- with one tolerated quirk.

    librdkafka's mock cluster (2.x) ends flexible responses with one extra empty tagged-field
    section (a lone 0x00 after the body).  Trailing bytes that are all zero, at most
    :data:`MAX_ZERO_PADDING` of them, are therefore ignored; anything else left over is still a
    TrailingBytesError.
    """
    try:
        return _api.decode_response(a, version, payload).body
    except TrailingBytesError:
        if not a.is_flexible(version):
            raise
        for pad in range(1, MAX_ZERO_PADDING + 1):
            if len(payload) <= pad or payload[-pad] != 0:
                break
            try:
                return _api.decode_response(a, version, memoryview(payload)[:-pad]).body
            except TrailingBytesError:
                continue
        raise
