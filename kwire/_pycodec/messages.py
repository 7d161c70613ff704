"""Pure-Python interpreter of message plans: the reference twin of kwire/_messages.pxi.

A plan (see kwire.protocol.schema) is walked field by field.  Wire encodings, by type:

    bool      1 byte, non-zero is true          int8/16/32/64, uint16/32: big-endian
    float64   8-byte IEEE 754, big-endian       uuid: 16 raw bytes
    string    int16 length (-1 null) + UTF-8    | flexible: uvarint(length + 1), 0 = null
    bytes     int32 length (-1 null) + bytes    | flexible: uvarint(length + 1), 0 = null
    records   as bytes (a nested record-batch blob, decoded by kwire.records); decoded as a
              read-only memoryview of the message buffer, not a copy
    array     int32 count (-1 null) + elements  | flexible: uvarint(count + 1), 0 = null
    struct    its fields in order; a nullable struct is preceded by int8 (-1 null, 1 present)
    flexible structs end with tagged fields:
              uvarint count, then per field: uvarint tag, uvarint size, `size` bytes of value
"""
from __future__ import annotations

import struct
import uuid
from typing import Any

from .._plan import (
    T_ARRAY,
    T_BOOL,
    T_BYTES,
    T_FLOAT64,
    T_INT8,
    T_INT16,
    T_INT32,
    T_INT64,
    T_RECORDS,
    T_STRING,
    T_STRUCT,
    T_UINT16,
    T_UINT32,
    T_UUID,
    Op,
    Plan,
    struct_default,
)
from ..errors import ProtocolError, TrailingBytesError, TruncatedError

IMPLEMENTATION = "python"

Body = dict[str, Any]
_Bytes = bytes | bytearray | memoryview

_FIXED = {
    T_INT8: struct.Struct(">b"),
    T_INT16: struct.Struct(">h"),
    T_INT32: struct.Struct(">i"),
    T_INT64: struct.Struct(">q"),
    T_UINT16: struct.Struct(">H"),
    T_UINT32: struct.Struct(">I"),
    T_FLOAT64: struct.Struct(">d"),
}
_I8 = _FIXED[T_INT8]
_I16 = _FIXED[T_INT16]
_I32 = _FIXED[T_INT32]


class _Reader:
    __slots__ = ("data", "pos", "end")

    def __init__(self, data: _Bytes, pos: int, end: int):
        self.data = data
        self.pos = pos
        self.end = end

    def need(self, n: int) -> int:
        p = self.pos
        if n < 0 or n > self.end - p:
            raise TruncatedError(f"needed {n} bytes at position {p}, only {self.end - p} left", position=p)
        self.pos = p + n
        return p

    def fixed(self, st: struct.Struct) -> Any:
        p = self.need(st.size)
        return st.unpack_from(self.data, p)[0]

    def uvarint(self) -> int:
        start = self.pos
        v = shift = 0
        while True:
            p = self.need(1)
            b: int = self.data[p]
            if shift == 63 and b > 1:
                raise ProtocolError(f"varint overflows 64 bits at position {p}", position=p)
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise ProtocolError(f"varint longer than 10 bytes at position {p}", position=p)
        if v > 0xFFFFFFFF:
            raise ProtocolError(f"unsigned varint {v} exceeds 32 bits at position {start}", position=start)
        return v

    def raw(self, n: int) -> bytes:
        p = self.need(n)
        return bytes(self.data[p:p + n])

    def view(self, n: int) -> memoryview:
        """A read-only view of the next ``n`` bytes (record sets are not copied)."""
        p = self.need(n)
        return memoryview(self.data).cast("B")[p:p + n].toreadonly()

    def text(self, n: int) -> str:
        p = self.need(n)
        try:
            return str(self.data[p:p + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"invalid UTF-8 in string at position {p}: {exc.reason}", position=p) from None


def _length(r: _Reader, flexible: bool, st: struct.Struct, nullable: bool, what: str) -> int:
    """Read a length/count prefix; -1 means null.  Negative lengths other than null are errors."""
    start = r.pos
    n = r.uvarint() - 1 if flexible else r.fixed(st)
    if n < -1 or (n == -1 and not nullable):
        raise ProtocolError(f"invalid {what} length {n} at position {start}", position=start)
    return n


def _read_value(r: _Reader, op: Op) -> Any:
    code, name, nullable, default, sub, tag, flexible = op
    st = _FIXED.get(code)
    if st is not None:
        return r.fixed(st)
    if code == T_STRING:
        n = _length(r, flexible, _I16, nullable, "string")
        return None if n < 0 else r.text(n)
    if code == T_BYTES or code == T_RECORDS:
        n = _length(r, flexible, _I32, nullable or code == T_RECORDS, "bytes")
        if n < 0:
            return None
        return r.view(n) if code == T_RECORDS else r.raw(n)
    if code == T_ARRAY:
        start = r.pos
        n = _length(r, flexible, _I32, nullable, "array")
        if n < 0:
            return None
        # Every element takes at least one byte: a count beyond the remaining bytes is corrupt,
        # and checking now stops a forged count from making us loop or allocate for nothing.
        if n > r.end - r.pos:
            raise TruncatedError(f"array of {n} elements at position {start} exceeds the {r.end - r.pos} bytes left",
                                 position=start)
        if sub[0] == T_STRUCT:
            plan = sub[4]
            return [_read_struct(r, plan) for _ in range(n)]
        return [_read_value(r, sub) for _ in range(n)]
    if code == T_STRUCT:
        if nullable:
            present = r.fixed(_I8)
            if present < 0:
                return None
        return _read_struct(r, sub)
    if code == T_BOOL:
        p = r.need(1)
        return r.data[p] != 0
    if code == T_UUID:
        return uuid.UUID(bytes=r.raw(16))
    raise ProtocolError(f"unknown type code {code} for field {name}")  # a schema bug


def _read_struct(r: _Reader, plan: Plan) -> Body:
    ops, tagged_ops, flexible = plan
    out: Body = {}
    for op in ops:
        out[op[1]] = _read_value(r, op)
    if flexible:
        for op in tagged_ops:
            out[op[1]] = _default_of(op)
        count = r.uvarint()
        for _ in range(count):
            tag = r.uvarint()
            size = r.uvarint()
            start = r.need(size)
            known = next((o for o in tagged_ops if o[5] == tag), None)
            if known is None:
                out.setdefault("_unknown_tags", {})[tag] = bytes(r.data[start:start + size])
                continue
            sub_reader = _Reader(r.data, start, start + size)
            out[known[1]] = _read_value(sub_reader, known)
            if sub_reader.pos != start + size:
                raise TrailingBytesError(
                    f"tagged field {tag} ({known[1]}) left {start + size - sub_reader.pos} bytes unread",
                    position=sub_reader.pos)
    return out


def _default_of(op: Op) -> Any:
    code, name, nullable, default, sub = op[:5]
    if code == T_STRUCT and not nullable:
        return struct_default(sub)
    if isinstance(default, list):
        return []
    return default


def decode_struct(plan: Plan, data: _Bytes, pos: int = 0, end: int = -1) -> tuple[Body, int]:
    """Decode one struct at ``pos``; returns ``(dict, next_pos)``.  Bytes after it are allowed."""
    mv = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    r = _Reader(mv, pos, len(mv) if end < 0 else end)
    value = _read_struct(r, plan)
    return value, r.pos


def decode_message(plan: Plan, data: _Bytes) -> Body:
    """Decode a whole message body; every byte must be consumed."""
    value, pos = decode_struct(plan, data)
    if pos != len(data):
        raise TrailingBytesError(f"{len(data) - pos} bytes left over after the message at position {pos}",
                                 position=pos)
    return value


# --- encoding --------------------------------------------------------------------------

def _uvarint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _write_length(out: bytearray, n: int, flexible: bool, st: struct.Struct) -> None:
    if flexible:
        _uvarint(out, n + 1)
    else:
        out += st.pack(n)


def _write_value(out: bytearray, op: Op, v: Any) -> None:
    code, name, nullable, default, sub, tag, flexible = op
    fixed = _FIXED.get(code)
    if fixed is not None:
        try:
            out += fixed.pack(v)
        except struct.error as exc:
            raise ProtocolError(f"field {name}: {exc} (value {v!r})") from None
        return
    if code == T_STRING:
        if v is None:
            _null(op)
            _write_length(out, -1, flexible, _I16)
            return
        b = v.encode("utf-8")
        if not flexible and len(b) > 0x7FFF:
            raise ProtocolError(f"field {name}: string of {len(b)} bytes exceeds int16 length")
        _write_length(out, len(b), flexible, _I16)
        out += b
        return
    if code == T_BYTES or code == T_RECORDS:
        if v is None:
            if code != T_RECORDS:
                _null(op)
            _write_length(out, -1, flexible, _I32)
            return
        _write_length(out, len(v), flexible, _I32)
        out += v
        return
    if code == T_ARRAY:
        if v is None:
            _null(op)
            _write_length(out, -1, flexible, _I32)
            return
        _write_length(out, len(v), flexible, _I32)
        if sub[0] == T_STRUCT:
            for item in v:
                _write_struct(out, sub[4], item)
        else:
            for item in v:
                _write_value(out, sub, item)
        return
    if code == T_STRUCT:
        if nullable:
            if v is None:
                out += _I8.pack(-1)
                return
            out += _I8.pack(1)
        elif v is None:
            _null(op)
        _write_struct(out, sub, v)
        return
    if code == T_BOOL:
        out.append(1 if v else 0)
        return
    if code == T_UUID:
        if isinstance(v, uuid.UUID):
            out += v.bytes
        elif isinstance(v, (bytes, bytearray)) and len(v) == 16:
            out += v
        else:
            raise ProtocolError(f"field {name}: expected a UUID, got {v!r}")
        return
    raise ProtocolError(f"unknown type code {code} for field {name}")


def _null(op: Op) -> None:
    if not op[2]:
        raise ProtocolError(f"field {op[1]} is not nullable in this version")


def _write_struct(out: bytearray, plan: Plan, value: Body) -> None:
    ops, tagged_ops, flexible = plan
    if not isinstance(value, dict):
        raise ProtocolError(f"expected a dict for a struct, got {type(value).__name__}")
    for op in ops:
        name = op[1]
        v = value[name] if name in value else _default_of(op)
        _write_value(out, op, v)
    if flexible:
        fields = []
        for op in tagged_ops:
            name = op[1]
            if name not in value:
                continue
            v = value[name]
            if v == _default_of(op):
                continue  # tagged fields are written only when they differ from the default
            buf = bytearray()
            _write_value(buf, op, v)
            fields.append((op[5], bytes(buf)))
        unknown = value.get("_unknown_tags")
        if unknown:
            fields.extend(unknown.items())
            fields.sort()
        _uvarint(out, len(fields))
        for tag, data in fields:
            _uvarint(out, tag)
            _uvarint(out, len(data))
            out += data


def encode_struct(plan: Plan, value: Body, out: bytearray | None = None) -> bytearray:
    buf = bytearray() if out is None else out
    _write_struct(buf, plan, value)
    return buf


def encode_message(plan: Plan, value: Body) -> bytes:
    return bytes(encode_struct(plan, value))
