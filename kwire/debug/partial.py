"""Partial decodes: what a frame that does not decode still says, and where it stops.

The strict decoders (:mod:`kwire.protocol`) raise at the first thing wrong and return nothing,
which is right for a client and useless for a person looking at a broken frame.  This module
walks the same plan the codecs interpret, field by field with the pure-Python twin's reader
(the reference decoder), and keeps everything read before the failure::

    request payload  = api_key:int16 api_version:int16 correlation_id:int32
                       client_id:nullable string (int16 length) [tagged fields if flexible] body
    response payload = correlation_id:int32 [tagged fields if flexible] body

:func:`partial_request` and :func:`partial_response` return a :class:`Partial`: the header
fields, the body's fields up to the failure (containers that were being read hold what was read
of them), the reason, the field path being read, and ``position``, the byte of the frame (its
4-byte size prefix counted, also in the reader's messages) where decoding stopped.  They never
raise on bad bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._plan import T_ARRAY, T_STRUCT, Op, Plan
from .._pycodec.messages import _I8, _I16, _length, _read_value, _Reader
from .._pycodec.messages import _I32 as _PI32
from ..errors import KwireError, ProtocolError, TrailingBytesError, TruncatedError
from ..protocol import api as P
from ..protocol.api import Body
from .names import Name, api_name

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["Partial", "decode_as_sent", "partial_request", "partial_response"]

SIZE_PREFIX = 4


@dataclass
class Partial:
    header: dict[str, Any] = field(default_factory=dict)
    body: Body | None = None
    reason: str = ""
    path: str = ""  # the field being read when decoding stopped, e.g. "topics[0].partitions[2]"
    position: int = SIZE_PREFIX  # byte of the frame (size prefix included) where decoding stopped
    complete: bool = False  # the body decoded; the failure is after it (left-over bytes)
    note: str = ""  # what else to say (a frame the capture cut)

    def describe(self) -> str:
        where = f" while reading {self.path}" if self.path else ""
        return (f"at byte {self.position} of the frame{where}: {self.reason}"
                + (f" ({self.note})" if self.note else ""))


class _Stop(Exception):
    def __init__(self, exc: Exception, path: list[str], pos: int):
        self.exc, self.path, self.pos = exc, path, pos


def _walk_struct(r: _Reader, plan: Plan, out: Body, path: list[str]) -> None:
    ops, tagged_ops, flexible = plan
    for op in ops:
        _walk_field(r, op, out, path)
    if not flexible:
        return
    path.append("<tagged fields>")
    count = r.uvarint()
    for _ in range(count):
        tag = r.uvarint()
        size = r.uvarint()
        start = r.need(size)
        tagged = next((o for o in tagged_ops if o[5] == tag), None)
        if tagged is None:
            out.setdefault("_unknown_tags", {})[tag] = bytes(r.data[start:start + size])
            continue
        sub = _Reader(r.data, start, start + size)
        _walk_field(sub, tagged, out, path)
        if sub.pos != start + size:
            raise TrailingBytesError(f"tagged field {tag} ({tagged[1]}) left {start + size - sub.pos} bytes unread",
                                     position=sub.pos)
    path.pop()


def _walk_field(r: _Reader, op: Op, out: Body, path: list[str]) -> None:
    code, name, nullable, sub = op[0], op[1], op[2], op[4]
    path.append(name)
    if code == T_STRUCT:
        if nullable and r.fixed(_I8) < 0:
            out[name] = None
        else:
            inner: Body = {}
            out[name] = inner
            _walk_struct(r, sub, inner, path)
    elif code == T_ARRAY and sub[0] == T_STRUCT:
        start = r.pos
        n = _length(r, op[6], _PI32, nullable, "array")
        if n < 0:
            out[name] = None
        else:
            if n > r.end - r.pos:
                raise TruncatedError(f"array of {n} elements at position {start} exceeds the "
                                     f"{r.end - r.pos} bytes left", position=start)
            items: list[Body] = []
            out[name] = items
            for i in range(n):
                path.append(f"[{i}]")
                items.append({})
                _walk_struct(r, sub[4], items[-1], path)
                path.pop()
    else:
        out[name] = _read_value(r, op)
    path.pop()


def _path_text(path: list[str]) -> str:
    text = ""
    for p in path:
        text += p if p.startswith("[") or not text else "." + p
    return text


def _framed(payload: Buffer) -> memoryview:
    """The payload behind a 4-byte size prefix, so every position the reader reports counts
    the prefix, as the hex dumps do."""
    mv = memoryview(payload).cast("B")
    return memoryview(len(mv).to_bytes(4, "big", signed=True) + bytes(mv))


def _body(plan: Plan, payload: memoryview, pos: int, result: Partial) -> Partial:
    r = _Reader(payload, pos, len(payload))
    body: Body = {}
    result.body = body
    path: list[str] = []
    try:
        _walk_struct(r, plan, body, path)
    except KwireError as exc:
        p = getattr(exc, "position", None)
        result.reason = str(exc)
        result.path = _path_text(path)
        result.position = p if p is not None else r.pos
        return result
    result.complete = True
    result.position = r.pos
    if r.pos != len(payload):
        result.reason = f"{len(payload) - r.pos} bytes left over after the body"
    return result


def partial_request(payload: Buffer) -> Partial:
    """The header and body of a request payload (no size prefix), as far as they decode."""
    mv = _framed(payload)
    result = Partial()
    r = _Reader(mv, SIZE_PREFIX, len(mv))
    try:
        key = result.header["api_key"] = r.fixed(_I16)
        version = result.header["api_version"] = r.fixed(_I16)
        result.header["correlation_id"] = r.fixed(_PI32)
        result.header["api"] = Name(api_name(key))
        a = P.APIS.get(key)
        if not (a is not None and a.decodes(version) and a.request_header_version(version) == 0):
            n = r.fixed(_I16)  # the client id: every header but v0 (ControlledShutdown v0) has it
            if n < -1:
                raise ProtocolError(f"invalid client_id length {n}", position=r.pos - 2)
            result.header["client_id"] = None if n < 0 else r.text(n)
        if a is None:
            raise ProtocolError(f"{api_name(key)} (api key {key}) is not in kwire's protocol tables",
                                position=SIZE_PREFIX)
        if not a.decodes(version):
            raise ProtocolError(f"{a.name} v{version} is outside the versions kwire knows "
                                f"({a.oldest_version}-{a.newest_version})", position=SIZE_PREFIX + 2)
        if a.request_header_version(version) >= 2:
            count = r.uvarint()
            for _ in range(count):
                r.uvarint()
                r.need(r.uvarint())
        plan = P.request_plan(a, version)
    except KwireError as exc:
        p = getattr(exc, "position", None)
        result.reason = str(exc)
        result.path = "<request header>"
        result.position = p if p is not None else r.pos
        return result
    return _body(plan, mv, r.pos, result)


def partial_response(api: P.ApiRef, version: int, payload: Buffer) -> Partial:
    """The header and body of a response payload (no size prefix) to a request of ``api`` v
    ``version``, as far as they decode."""
    mv = _framed(payload)
    result = Partial()
    r = _Reader(mv, SIZE_PREFIX, len(mv))
    try:
        result.header["correlation_id"] = r.fixed(_PI32)
        a = P.api(api)
        if a.response_header_version(version) >= 1:
            count = r.uvarint()
            for _ in range(count):
                r.uvarint()
                r.need(r.uvarint())
        plan = P.response_plan(a, version)
    except KwireError as exc:
        p = getattr(exc, "position", None)
        result.reason = str(exc)
        result.path = "<response header>"
        result.position = p if p is not None else r.pos
        return result
    return _body(plan, mv, r.pos, result)


def decode_as_sent(plan: Plan, data: Buffer) -> Body:
    """A whole message body as the bytes carry it: like the strict decoders, except that tagged
    fields the bytes do not carry are left out instead of filled in with their defaults.
    Raises :class:`~kwire.errors.ProtocolError` on anything wrong or left over."""
    mv = _framed(data)
    result = _body(plan, mv, SIZE_PREFIX, Partial())
    body = result.body  # always set by _body
    if body is None or not result.complete or result.reason:
        raise ProtocolError(result.describe(), position=result.position)
    return body
