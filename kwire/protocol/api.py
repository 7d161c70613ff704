"""Encode and decode any Kafka request or response, at any version kwire declares.

Frames on the wire::

    frame           = size:int32 payload          (size counts the payload only)
    request payload = request_header body
    request_header  v0: api_key:int16 api_version:int16 correlation_id:int32
                    v1: v0 + client_id:nullable string (always int16-length, even when flexible)
                    v2: v1 + tagged fields                 (used by flexible request versions)
    response payload= response_header body
    response_header v0: correlation_id:int32
                    v1: v0 + tagged fields                 (flexible versions; never ApiVersions)

Bodies are dicts keyed by snake_case field names; see kwire.protocol.messages for every field.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, TypeAlias

from .._impl import codec_module
from .._plan import Plan
from ..errors import ProtocolError, TruncatedError, UnsupportedVersionError
from . import messages as M
from .schema import Message, build_plan

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from .. import _codec  # the twins share its API (kwire/_codec.pyi)
else:
    _codec = codec_module()

Body: TypeAlias = dict[str, Any]  # a message body: snake_case field names -> values
ApiRef: TypeAlias = "str | int | Api"  # an API's name, key, or the Api itself
_I32 = struct.Struct(">i")
_HDR = struct.Struct(">hhi")

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7


@dataclass(frozen=True)
class Api:
    """One API.  Two version ranges: every version kwire can encode and decode
    (``oldest_version``-``newest_version``, for reading captures of any client), and the part
    of it kwire's client may negotiate (``min_version``-``max_version``): versions Kafka 4.0
    removed (KIP-896) and unstable ones are decode-only (see ``Message.negotiable``)."""

    key: int
    name: str
    request: Message
    response: Message

    @property
    def oldest_version(self) -> int:
        return self.request.valid_range[0]

    @property
    def newest_version(self) -> int:
        return self.request.valid_range[1]

    @property
    def min_version(self) -> int:
        """The oldest version kwire's client sends (> max_version if it never sends this API)."""
        r = self.request.negotiable_range
        return r[0] if r is not None else self.newest_version + 1

    @property
    def max_version(self) -> int:
        """The newest version kwire's client sends."""
        r = self.request.negotiable_range
        return r[1] if r is not None else self.newest_version

    def decodes(self, version: int) -> bool:
        """Whether kwire can encode and decode this version (including decode-only ones)."""
        return self.oldest_version <= version <= self.newest_version

    def negotiates(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def check_version(self, version: int) -> None:
        lo, hi = self.request.valid_range
        if not lo <= version <= hi:
            raise UnsupportedVersionError(f"{self.name} v{version} is outside the versions kwire knows ({lo}-{hi})")

    def is_flexible(self, version: int) -> bool:
        return self.request.is_flexible(version)

    def request_header_version(self, version: int) -> int:
        if self.key == CONTROLLED_SHUTDOWN_KEY and version == 0:
            return 0  # the only user of header v0 (no client id); removed in Kafka 4.0
        return 2 if self.request.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions responses always use header v0, so a client can parse one from a broker
        # that does not support the version it asked for (KIP-511).
        if self.key == API_VERSIONS_KEY:
            return 0
        return 1 if self.response.is_flexible(version) else 0


APIS: dict[int, Api] = {key: Api(key, name, req, resp) for key, (name, req, resp) in M.APIS.items()}
_BY_NAME: dict[str, Api] = {a.name.lower(): a for a in APIS.values()}


def api(name_or_key: str | int | Api) -> Api:
    """Look up an API by name (case-insensitive, e.g. "Fetch") or key (1)."""
    if isinstance(name_or_key, Api):
        return name_or_key
    if isinstance(name_or_key, int):
        found = APIS.get(name_or_key)
    else:
        found = _BY_NAME.get(str(name_or_key).lower())
    if found is None:
        raise UnsupportedVersionError(f"unknown or unsupported API {name_or_key!r}")
    return found


@cache
def _plan(msg: Message, version: int) -> Plan:
    return build_plan(msg.fields, version, msg.is_flexible(version))


def request_plan(a: ApiRef, version: int) -> Plan:
    a = api(a)
    a.check_version(version)
    return _plan(a.request, version)


def response_plan(a: ApiRef, version: int) -> Plan:
    a = api(a)
    a.check_version(version)
    return _plan(a.response, version)


# --- bodies ------------------------------------------------------------------------------

def encode_request_body(a: ApiRef, version: int, body: Body) -> bytes:
    return _codec.encode_message(request_plan(a, version), body)


def decode_request_body(a: ApiRef, version: int, data: Buffer) -> Body:
    return _codec.decode_message(request_plan(a, version), data)


def encode_response_body(a: ApiRef, version: int, body: Body) -> bytes:
    return _codec.encode_message(response_plan(a, version), body)


def decode_response_body(a: ApiRef, version: int, data: Buffer) -> Body:
    return _codec.decode_message(response_plan(a, version), data)


# --- frames ------------------------------------------------------------------------------

@dataclass
class RequestFrame:
    api: Api
    version: int
    correlation_id: int
    client_id: str | None
    body: Body
    header_tags: dict[int, bytes] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"api": self.api.name, "version": self.version, "correlation_id": self.correlation_id,
                "client_id": self.client_id, "body": self.body}


@dataclass
class ResponseFrame:
    api: Api
    version: int
    correlation_id: int
    body: Body

    def to_dict(self) -> dict[str, Any]:
        return {"api": self.api.name, "version": self.version, "correlation_id": self.correlation_id,
                "body": self.body}


def _check_header_version(v: int) -> int:
    if v not in (0, 1, 2):
        raise UnsupportedVersionError(f"request header v{v} does not exist (0-2)")
    return v


def _header_plan(msg: Message, header_version: int) -> Plan:
    return _plan(msg, header_version)


def encode_request(a: ApiRef, version: int, body: Body, *, correlation_id: int, client_id: str | None = "kwire",
                   size_prefix: bool = True, header_version: int | None = None) -> bytes:
    """A complete request frame (with its 4-byte size prefix unless ``size_prefix=False``).

    ``header_version`` overrides the header the API version implies (1, or 2 when flexible):
    header v0 has no client id (it was used only by ControlledShutdown v0)."""
    a = api(a)
    hv = a.request_header_version(version) if header_version is None else _check_header_version(header_version)
    out = bytearray(4 if size_prefix else 0)
    _codec.encode_struct(_header_plan(M.REQUEST_HEADER, hv), {
        "request_api_key": a.key, "request_api_version": version,
        "correlation_id": correlation_id, "client_id": client_id}, out)
    _codec.encode_struct(request_plan(a, version), body, out)
    if size_prefix:
        _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response(a: ApiRef, version: int, body: Body, *, correlation_id: int, size_prefix: bool = True) -> bytes:
    a = api(a)
    hv = a.response_header_version(version)
    out = bytearray(4 if size_prefix else 0)
    _codec.encode_struct(_header_plan(M.RESPONSE_HEADER, hv), {"correlation_id": correlation_id}, out)
    _codec.encode_struct(response_plan(a, version), body, out)
    if size_prefix:
        _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def strip_size_prefix(frame: Buffer, *, size_prefix: bool | None = None) -> memoryview:
    """Remove and check the int32 size prefix.  ``None`` = detect: strip if it matches the length."""
    mv = memoryview(frame).cast("B")
    if size_prefix is None:
        size_prefix = len(mv) >= 4 and _I32.unpack_from(mv, 0)[0] == len(mv) - 4
    if not size_prefix:
        return mv
    if len(mv) < 4:
        raise TruncatedError(f"frame of {len(mv)} bytes is shorter than its size prefix", position=0)
    size = _I32.unpack_from(mv, 0)[0]
    if size < 0:
        raise ProtocolError(f"negative frame size {size}", position=0)
    if size != len(mv) - 4:
        if size > len(mv) - 4:
            raise TruncatedError(f"frame says {size} bytes but only {len(mv) - 4} follow", position=4)
        raise ProtocolError(f"frame says {size} bytes but {len(mv) - 4} follow", position=4)
    return mv[4:]


def peek_request_header(payload: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request payload, without decoding the rest."""
    if len(payload) < 8:
        raise TruncatedError(f"request header needs 8 bytes, got {len(payload)}", position=0)
    key, version, correlation_id = _HDR.unpack_from(payload, 0)
    return key, version, correlation_id


def peek_correlation_id(payload: bytes | bytearray | memoryview) -> int:
    if len(payload) < 4:
        raise TruncatedError(f"response header needs 4 bytes, got {len(payload)}", position=0)
    correlation_id: int = _I32.unpack_from(payload, 0)[0]
    return correlation_id


def decode_request(frame: Buffer, *, size_prefix: bool | None = None, header_version: int | None = None) -> RequestFrame:
    """Decode a request frame whose api and version are read from its own header
    (``header_version`` as in :func:`encode_request`)."""
    payload = strip_size_prefix(frame, size_prefix=size_prefix)
    key, version, _ = peek_request_header(payload)
    a = api(key)
    a.check_version(version)
    hv = a.request_header_version(version) if header_version is None else _check_header_version(header_version)
    header, pos = _codec.decode_struct(_header_plan(M.REQUEST_HEADER, hv), payload)
    body = _codec.decode_message(request_plan(a, version), payload[pos:])
    tags = header.get("_unknown_tags", {})
    return RequestFrame(a, version, header["correlation_id"], header.get("client_id"), body, tags)


def decode_response(a: ApiRef, version: int, frame: Buffer, *, size_prefix: bool | None = False) -> ResponseFrame:
    """Decode a response frame; its api and version come from the request it answers."""
    a = api(a)
    payload = strip_size_prefix(frame, size_prefix=size_prefix)
    header, pos = _codec.decode_struct(_header_plan(M.RESPONSE_HEADER, a.response_header_version(version)), payload)
    try:
        body = _codec.decode_message(response_plan(a, version), payload[pos:])
    except ProtocolError:
        # A broker that does not support the ApiVersions version we sent answers with a v0 body
        # carrying UNSUPPORTED_VERSION (KIP-511), so parse it as v0 rather than fail.
        if a.key != API_VERSIONS_KEY or version == 0:
            raise
        version = 0
        body = _codec.decode_message(response_plan(a, 0), payload[pos:])
    return ResponseFrame(a, version, header["correlation_id"], body)


# --- the consumer protocol's embedded payloads (JoinGroup metadata, SyncGroup assignment) ---

def _embedded_encode(msg: Message, version: int, value: Body) -> bytes:
    lo, hi = msg.valid_range
    if not lo <= version <= hi:
        raise UnsupportedVersionError(f"{msg.name} v{version} is outside {lo}-{hi}")
    out = bytearray(struct.pack(">h", version))
    _codec.encode_struct(_plan(msg, version), value, out)
    return bytes(out)


def _embedded_decode(msg: Message, data: Buffer) -> tuple[int, Body]:
    mv = memoryview(data).cast("B")
    if len(mv) < 2:
        raise TruncatedError(f"{msg.name} needs a 2-byte version, got {len(mv)} bytes", position=0)
    version = struct.unpack_from(">h", mv, 0)[0]
    if version < 0:
        raise ProtocolError(f"{msg.name} has negative version {version}", position=0)
    hi = msg.valid_range[1]
    # Newer versions only append fields, so they parse with the newest format we know, and
    # their extra bytes are ignored (as the consumer protocol prescribes).
    value, pos = _codec.decode_struct(_plan(msg, min(version, hi)), mv, 2)
    if version <= hi and pos != len(mv):
        raise ProtocolError(f"{msg.name} v{version}: {len(mv) - pos} bytes left over", position=pos)
    return version, value


def encode_subscription(version: int, value: Body) -> bytes:
    return _embedded_encode(M.CONSUMER_SUBSCRIPTION, version, value)


def decode_subscription(data: Buffer) -> tuple[int, Body]:
    return _embedded_decode(M.CONSUMER_SUBSCRIPTION, data)


def encode_assignment(version: int, value: Body) -> bytes:
    return _embedded_encode(M.CONSUMER_ASSIGNMENT, version, value)


def decode_assignment(data: Buffer) -> tuple[int, Body]:
    return _embedded_decode(M.CONSUMER_ASSIGNMENT, data)


def to_jsonable(value: Any) -> Any:
    """Bodies as JSON-friendly values: bytes -> hex/len summaries are the tracer's job; here
    bytes become hex strings and UUIDs strings."""
    import uuid

    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value
