"""Decoded frames and trace events, for people and for scripts.

An *event* is a dict (``Item.to_event()`` from a capture, or a live trace event normalised by
:mod:`kwire.debug.trace`) with: ``kind`` ("request", "response", "undecoded", "gap", "tls",
"note"), ``ts`` (epoch seconds), ``packet`` (the capture's packet number), ``client``/``broker``
addresses, ``node_id``, ``to_broker``, ``api``, ``api_key``, ``version``, ``correlation_id``,
``client_id`` (a response's is its request's), ``size_bytes`` (a frame's bytes on the wire, its
size prefix included), ``rtt_ms``, ``body``, and for damage ``reason``, ``data``, ``offset``
and ``partial`` (a :class:`kwire.debug.partial.Partial`).

Text (``format="text"``)::

    HH:MM:SS.ffffff  #PACKET  CLIENT → BROKER  Api vN  corr=C  client_id="x"  SIZE B
      field: value
      acks: -1 (ALL)                     names beside numbers (kwire.debug.names)
      list:
        - field: value
    HH:MM:SS.ffffff  #PACKET  CLIENT ← BROKER  Api vN  corr=C  SIZE B  rtt=R ms

``summary=True``: one line per event (:func:`summary_line`), errors named at its end.  Times
are UTC.  On a terminal the same lines are coloured through rich; piped, they are plain.
JSON (``format="json"``) is one object per event and line: the body with names beside the
numbers, bytes as hex, UUIDs as strings, and ``errors`` ({name: count}).

Record payloads (``records`` fields: Produce requests, Fetch responses) are summarised --
batches, records, offset range, bytes, compression -- or, with ``records="full"``, every batch
header (CRC checked) and record (that needs :mod:`kwire.records`).
"""
from __future__ import annotations

import datetime as _dt
import json
import struct
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO, overload

from .._plan import T_ARRAY, T_RECORDS, T_STRUCT, Plan
from ..errors import KwireError
from ..protocol import api as P
from .names import CONTROL_TYPE, TIMESTAMP_TYPE, Name, annotate, error_name, errors_in, name_key

if TYPE_CHECKING:
    from rich.console import Console
    from rich.highlighter import ReprHighlighter

    from .._codec import RecordBatch  # the twins share its API (kwire/_codec.pyi)
    from .partial import Partial

__all__ = ["Renderer", "RecordSet", "format_ts", "hexdump", "summarise_records", "to_json_event"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
FORMATS = ("text", "json")
RECORD_MODES = ("summary", "full")
TEXT_HEX_LIMIT = 512  # bytes of undecodable data shown in text; JSON carries all of them
TEXT_BYTES_LIMIT = 32  # bytes of a bytes field shown inline in text
INLINE_WIDTH = 100  # a struct of scalars this short goes on one line
COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
_BYTES = (bytes, bytearray, memoryview)

Event = dict[str, Any]  # an event: an Item's to_event(), or built by hand (kwire decode --hex)
Entry = dict[str, Any]  # a record-set entry's header fields (and, in full, its records)
TopicNames = dict[uuid.UUID, str]  # topic id -> name
IterBatches = Callable[..., Iterator["RecordBatch"]]


@overload
def format_ts(ts: float, *, date: bool = False) -> str: ...
@overload
def format_ts(ts: float | None, *, date: bool = False) -> str | None: ...


def format_ts(ts: float | None, *, date: bool = False) -> str | None:
    """UTC with microseconds: "HH:MM:SS.ffffff", or ISO 8601 with the date and "Z"."""
    if ts is None:
        return None if date else "-"
    # Whole microseconds first: float seconds would print 0.0033 as .003299.
    t = _EPOCH + _dt.timedelta(microseconds=round(float(ts) * 1_000_000))
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if date else t.strftime("%H:%M:%S.%f")


def hexdump(data: bytes, *, indent: str = "", limit: int | None = None, base: int = 0) -> list[str]:
    """Offset (from ``base``), 16 bytes in hex (two groups of 8), and the printable ASCII of
    each line."""
    shown = data if limit is None else data[:limit]
    lines = []
    for off in range(0, len(shown), 16):
        chunk = shown[off:off + 16]
        hx = " ".join(f"{b:02x}" for b in chunk[:8])
        if len(chunk) > 8:
            hx += "  " + " ".join(f"{b:02x}" for b in chunk[8:])
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{indent}{base + off:06x}  {hx:<48}  |{text}|")
    if len(shown) < len(data):
        lines.append(f"{indent}... {len(data) - len(shown)} more bytes (all of them in --format json)")
    return lines


# --- record payloads -----------------------------------------------------------------------

class RecordSet(dict[str, Any]):
    """A records field, summarised (a dict, so JSON takes it as is; text renders it as one line)."""


def _iter_batches() -> IterBatches | None:
    try:
        from ..records import iter_batches
    except ImportError:
        return None
    found: IterBatches = iter_batches  # kwire.records re-exports the codec's, untyped
    return found


def _walk_entries(data: bytes) -> tuple[list[Entry], int]:
    """The entries of a record set from their headers alone (no CRC check, no decompression).

    Entry: offset:int64 size:int32 then ``size`` bytes whose 5th (byte 16 of the entry) is the
    magic.  Magic 2 batch: ... attributes:int16 at 21, lastOffsetDelta:int32 at 23,
    recordsCount:int32 at 57.  Magic 0/1 message: attributes:int8 at 17.
    Returns (entries, bytes of a partial entry at the end); each entry knows its ``start`` and
    ``end`` in ``data``.
    """
    out: list[Entry] = []
    pos, n = 0, len(data)
    while pos + 12 <= n:
        offset, size = struct.unpack_from(">qi", data, pos)
        if size < 0 or pos + 12 + size > n or size < 5:
            break
        magic = data[pos + 16]
        if magic == 2 and size >= 49:
            attrs, last_delta = struct.unpack_from(">hi", data, pos + 21)
            count = struct.unpack_from(">i", data, pos + 57)[0]
            out.append({"base_offset": offset, "last_offset": offset + last_delta, "magic": 2,
                        "compression": attrs & 7, "count": count, "control": bool(attrs & 0x20),
                        "start": pos, "end": pos + 12 + size})
        else:
            attrs = data[pos + 17] if size >= 6 else 0
            out.append({"base_offset": offset, "last_offset": offset, "magic": magic,
                        "compression": attrs & 7, "count": 1, "control": False,
                        "start": pos, "end": pos + 12 + size})
        pos += 12 + size
    return out, n - pos


# The header of a magic 2 batch (KIP-98), the fields --records full shows:
#   baseOffset:int64 batchLength:int32 partitionLeaderEpoch:int32 magic:int8 crc:uint32
#   attributes:int16 lastOffsetDelta:int32 baseTimestamp:int64 maxTimestamp:int64
#   producerId:int64 producerEpoch:int16 baseSequence:int32 recordsCount:int32 records...
# CRC-32C covers attributes to the end.  Attributes: bits 0-2 compression, 3 timestamp type
# (1 = LogAppendTime), 4 transactional, 5 control.
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
# A magic 0/1 message: offset:int64 size:int32 crc:uint32 magic:int8 attributes:int8
#   [timestamp:int64 if magic 1] key:bytes value:bytes; CRC-32 (zlib) covers magic to the end.
_V1_HEADER = struct.Struct(">qiIbb")


def _batch_header(raw: bytes, e: Entry) -> Entry:
    """Every header field of one entry, with its CRC checked."""
    start, end = e["start"], e["end"]
    if e["magic"] == 2 and end - start >= _V2_HEADER.size:
        (base, length, leader_epoch, magic, crc, attrs, last_delta, base_ts, max_ts, pid, epoch, seq,
         count) = _V2_HEADER.unpack_from(raw, start)
        from .._crc import crc32c

        actual = crc32c(raw[start + 21:end])
        return {"base_offset": base, "last_offset_delta": last_delta, "last_offset": base + last_delta,
                "magic": magic, "batch_length": length, "partition_leader_epoch": leader_epoch,
                "crc": f"0x{crc:08x}", "crc_ok": actual == crc, "attributes": attrs,
                "compression": _codec_name(attrs & 7),
                "timestamp_type": TIMESTAMP_TYPE[(attrs >> 3) & 1],
                "is_transactional": bool(attrs & 0x10), "is_control": bool(attrs & 0x20),
                "base_timestamp": base_ts, "max_timestamp": max_ts, "producer_id": pid,
                "producer_epoch": epoch, "base_sequence": seq, "records_count": count}
    import zlib

    base, length, crc, magic, attrs = _V1_HEADER.unpack_from(raw, start)
    out: Entry = {"base_offset": base, "last_offset_delta": 0, "last_offset": base, "magic": magic,
           "batch_length": length, "crc": f"0x{crc:08x}", "crc_ok": zlib.crc32(raw[start + 16:end]) == crc,
           "attributes": attrs, "compression": _codec_name(attrs & 7),
           "timestamp_type": TIMESTAMP_TYPE[(attrs >> 3) & 1] if magic == 1 else TIMESTAMP_TYPE[-1]}
    if magic == 1 and end - start >= _V1_HEADER.size + 8:
        out["timestamp"] = struct.unpack_from(">q", raw, start + _V1_HEADER.size)[0]
    return out


def _control(key: bytes | None) -> dict[str, Any] | None:
    """A control record's key: version:int16 type:int16 (0 ABORT, 1 COMMIT)."""
    if key is None or len(key) < 4:
        return None
    version, ctype = struct.unpack_from(">hh", key, 0)
    return {"version": version, "type": CONTROL_TYPE.get(ctype, f"UNKNOWN_{ctype}")}


def _full_batches(raw: bytes, entries: list[Entry], iter_batches: IterBatches) -> list[Entry]:
    """Each entry's header, then its records (decoded without the CRC check, so a batch whose
    CRC fails still shows what it holds, flagged by ``crc_ok``)."""
    out: list[Entry] = []
    for e in entries:
        b = _batch_header(raw, e)
        try:
            decoded = list(iter_batches(raw[e["start"]:e["end"]], check_crc=False))
        except KwireError as exc:
            pos = getattr(exc, "position", None)
            b["error"] = f"{exc}" + (f" (at byte {e['start'] + pos} of the record set)" if pos is not None else "")
            b["records"] = []
            out.append(b)
            continue
        records: list[dict[str, Any]] = []
        for batch in decoded:
            for r in batch.records:
                rec = {"offset": r.offset, "timestamp": r.timestamp,
                       "timestamp_type": TIMESTAMP_TYPE.get(r.timestamp_type, str(r.timestamp_type)),
                       "key": r.key, "value": r.value, "headers": [[k, v] for k, v in r.headers]}
                if batch.is_control:
                    rec["control"] = _control(r.key)
                records.append(rec)
        b["records"] = records
        # A compressed magic 0/1 wrapper's offset is its last inner record's: the records it
        # holds are what its offsets span (magic 2 says so in its header).
        b["first_offset"] = records[0]["offset"] if records and b["magic"] < 2 else b["base_offset"]
        if records and b["magic"] < 2:
            b["last_offset"] = records[-1]["offset"]
        out.append(b)
    return out


def _codec_name(code: int | str) -> str:
    if isinstance(code, str):
        return code
    return COMPRESSION[code] if 0 <= code < len(COMPRESSION) else f"codec-{code}"


def summarise_records(data: bytes | bytearray | memoryview | None, *, full: bool = False) -> RecordSet | None:
    """Summary of a record payload: batches, records, first/last offset, bytes, compression.

    Uses kwire.records.iter_batches (which checks CRCs and decompresses) when importable, else
    reads the batch headers.  ``partial_bytes``: a cut entry at the end (normal in a Fetch
    response); ``error``: why the payload could not be decoded.  ``full`` adds ``contents``,
    every batch and record.
    """
    if data is None:
        return None
    raw = bytes(data)
    entries, partial = _walk_entries(raw)
    summary = RecordSet(batches=len(entries), records=sum(e["count"] for e in entries),
                        first_offset=entries[0]["base_offset"] if entries else None,
                        last_offset=entries[-1]["last_offset"] if entries else None,
                        bytes=len(raw),
                        compression=",".join(sorted({_codec_name(e["compression"]) for e in entries})) or None)
    if partial:
        summary["partial_bytes"] = partial
    iter_batches = _iter_batches()
    if iter_batches is None:
        if full:
            summary["error"] = "full records need kwire.records, which is not available"
        return summary
    try:
        batches = list(iter_batches(raw))
    except KwireError as exc:
        pos = getattr(exc, "position", None)
        summary["error"] = f"{exc}" + (f" (at byte {pos})" if pos is not None else "")
        if full:  # every batch's header, and the records of those that decode
            summary["contents"] = _full_batches(raw, entries, iter_batches)
        return summary
    summary.update(batches=len(batches), records=sum(len(b.records) for b in batches),
                   first_offset=batches[0].base_offset if batches else None,
                   last_offset=batches[-1].last_offset if batches else None,
                   compression=",".join(sorted({_codec_name(b.compression) for b in batches})) or None)
    if full:
        summary["contents"] = _full_batches(raw, entries, iter_batches)
    return summary


def _plan_for(event: Event) -> Plan | None:
    try:
        a = P.api(event["api_key"] if event.get("api_key") is not None else event["api"])
        if event.get("kind") == "request":
            return P.request_plan(a, event["version"])
        return P.response_plan(a, event["version"])
    except (KwireError, KeyError, TypeError):
        return None


def _with_records(value: Any, plan: Plan, full: bool) -> Any:
    """A copy of a decoded body whose records fields (found through the message's plan) are
    replaced by their RecordSet summaries."""
    ops, tagged, _ = plan
    out = dict(value)
    for op in (*ops, *tagged):
        code, name, sub = op[0], op[1], op[4]
        v = out.get(name)
        if v is None:
            continue
        if code == T_RECORDS and isinstance(v, _BYTES):
            out[name] = summarise_records(v, full=full)
        elif code == T_STRUCT and isinstance(v, dict):
            out[name] = _with_records(v, sub, full)
        elif code == T_ARRAY and sub[0] == T_STRUCT and isinstance(v, list):
            out[name] = [_with_records(e, sub[4], full) if isinstance(e, dict) else e for e in v]
    return out


def _with_records_by_name(value: Any, full: bool) -> Any:
    """The same without a plan (an event whose api/version kwire does not know)."""
    if isinstance(value, dict):
        return {k: (summarise_records(v, full=full) if k == "records" and isinstance(v, _BYTES)
                    else _with_records_by_name(v, full)) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_records_by_name(v, full) for v in value]
    return value


# SASL credentials travel in SaslAuthenticate's auth_bytes: a capture holds them in clear, but
# kwire never prints them (the live tracer gets them redacted already).
_SASL_AUTHENTICATE_KEY = 36


def prepare_body(event: Event, records: str = "summary", topic_names: TopicNames | None = None,
                 body: Any = None) -> Any:
    """The body as shown: credentials redacted, record sets summarised (or decoded in full),
    names beside the numbers (:func:`kwire.debug.names.annotate`)."""
    body = event.get("body") if body is None else body
    if not isinstance(body, dict):
        return body
    if event.get("api_key") == _SASL_AUTHENTICATE_KEY and isinstance(body.get("auth_bytes"), (bytes, bytearray)):
        body = dict(body, auth_bytes=f"<redacted: {len(body['auth_bytes'])} bytes>")
    plan = _plan_for(event)
    full = records == "full"
    body = _with_records(body, plan, full) if plan is not None else _with_records_by_name(body, full)
    return annotate(body, event.get("api_key"), event.get("kind"), topic_names)


class Embedded:
    """Bytes that hold a consumer-protocol payload, decoded for the text view (JSON keeps the
    bytes as hex: the exact wire content)."""

    def __init__(self, label: str, raw: bytes, value: dict[str, Any]):
        self.label, self.raw, self.value = label, raw, value


def _consumer_payloads(event: Event, body: dict[str, Any]) -> dict[str, Any]:
    """JoinGroup's subscriptions and SyncGroup's assignments, when the group speaks the
    "consumer" protocol (or does not say: older versions carry no protocol_type)."""
    key, kind = event.get("api_key"), event.get("kind")
    if key not in (11, 14) or body.get("protocol_type", "consumer") not in ("consumer", None):
        return body

    def decode(raw: Any, subscription: bool) -> Any:
        if not isinstance(raw, (bytes, bytearray, memoryview)) or not raw:
            return raw
        try:
            version, value = (P.decode_subscription if subscription else P.decode_assignment)(raw)
        except KwireError:
            return raw
        return Embedded(f"consumer {'subscription' if subscription else 'assignment'} v{version}",
                        bytes(raw), value)

    def each(items: list[Any] | None, field: str, subscription: bool) -> list[Any]:
        return [({**e, field: decode(e.get(field), subscription)} if isinstance(e, dict) else e)
                for e in items or []]

    out = dict(body)
    if key == 11 and kind == "request" and "protocols" in out:
        out["protocols"] = each(out["protocols"], "metadata", True)
    elif key == 11 and "members" in out:
        out["members"] = each(out["members"], "metadata", True)
    elif key == 14 and kind == "request" and "assignments" in out:
        out["assignments"] = each(out["assignments"], "assignment", False)
    elif key == 14 and "assignment" in out:
        out["assignment"] = decode(out["assignment"], False)
    return out


def _record_problems(value: Any) -> list[str]:
    found: list[str] = []
    if isinstance(value, RecordSet):
        if "error" in value:
            found.append(value["error"])
    elif isinstance(value, dict):
        for v in value.values():
            found.extend(_record_problems(v))
    elif isinstance(value, list):
        for v in value:
            found.extend(_record_problems(v))
    return found


# --- JSON ------------------------------------------------------------------------------------

def _direction(event: Event) -> str | None:
    tb = event.get("to_broker")
    return None if tb is None else ("client->broker" if tb else "broker->client")


def error_counts(body: Any) -> dict[str, int]:
    """{error name: how many times} of the non-zero error codes anywhere in a body."""
    out: dict[str, int] = {}
    for code in errors_in(body):
        name = error_name(code)
        out[name] = out.get(name, 0) + 1
    return out


def _hex(b: bytes | None) -> str | None:
    return None if b is None else bytes(b).hex()


def jsonable(value: Any) -> Any:
    """:func:`kwire.protocol.api.to_jsonable`, with a fast path for record sets decoded in full
    (a million records should not be walked value by value)."""
    if isinstance(value, RecordSet):
        contents = value.get("contents")
        if contents is None:
            return dict(value)
        out = dict(value)
        out["contents"] = [
            {**{k: v for k, v in b.items() if k != "records"},
             "records": [{**r, "key": None if r["key"] is None else r["key"].hex(),
                          "value": None if r["value"] is None else r["value"].hex(),
                          "headers": [[k, _hex(v)] for k, v in r["headers"]] if r["headers"] else []}
                         for r in b["records"]]}
            for b in contents]
        return out
    if type(value) is dict:
        return {str(k): jsonable(v) for k, v in value.items()}
    if type(value) is list:
        return [jsonable(v) for v in value]
    return P.to_jsonable(value)


def _partial_json(partial: Partial) -> dict[str, Any]:
    return {"header": jsonable(partial.header),
            "body": jsonable(partial.body) if partial.body is not None else None,
            "complete": partial.complete, "reason": partial.reason, "path": partial.path or None,
            "position": partial.position}


def to_json_event(event: Event, records: str = "summary", body: Any = None, *, summary: bool = False,
                  topic_names: TopicNames | None = None) -> dict[str, Any]:
    """The JSON object for one event (keys in a fixed order).  ``summary``: without the body."""
    kind = event.get("kind")
    out: dict[str, Any] = {
        "time": format_ts(event.get("ts"), date=True), "ts": event.get("ts"), "packet": event.get("packet"),
        "kind": kind, "direction": _direction(event), "client": event.get("client"),
        "broker": event.get("broker"), "node_id": event.get("node_id"), "connection": event.get("connection"),
        "api": event.get("api"), "api_key": event.get("api_key"), "version": event.get("version"),
        "correlation_id": event.get("correlation_id"), "size_bytes": event.get("size_bytes"),
        "rtt_ms": event.get("rtt_ms"),
    }
    if kind in ("request", "response", "undecoded"):
        out["client_id"] = event.get("client_id")
    if kind in ("request", "response"):
        b = prepare_body(event, records, topic_names) if body is None else body
        out["errors"] = error_counts(b)
        if not summary:
            out["body"] = jsonable(b)
    else:
        partial = event.get("partial")
        if partial is not None and partial.body is not None:
            out["errors"] = error_counts(partial.body)
        out["reason"] = event.get("reason")
        out["offset"] = event.get("offset")
        if not summary:
            if partial is not None:
                pbody = prepare_body(event, records, topic_names, body=partial.body) if partial.body else None
                out["partial"] = dict(_partial_json(partial), body=jsonable(pbody))
            if event.get("data") is not None:
                out["hex"] = bytes(event["data"]).hex()
    if event.get("file") is not None:  # `kwire decode DIR`: which capture file it came from
        out["file"] = event["file"]
    return out


# --- text --------------------------------------------------------------------------------------

def _bytes_text(b: bytes | bytearray | memoryview) -> str:
    b = bytes(b)
    if not b:
        return '<0 bytes>'
    hx = b[:TEXT_BYTES_LIMIT].hex()
    return f"<{len(b)} bytes> {hx}" + ("..." if len(b) > TEXT_BYTES_LIMIT else "")


def _data_text(b: bytes | bytearray | memoryview | None) -> str:
    """A record key/value/header: a string when it is printable UTF-8, else hex."""
    if b is None:
        return "null"
    b = bytes(b)
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return _bytes_text(b)
    if s.isprintable():
        return json.dumps(s, ensure_ascii=False)
    return _bytes_text(b)


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return _bytes_text(v)
    if isinstance(v, uuid.UUID):
        return str(v)
    return str(v)


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _records_line(rs: RecordSet) -> str:
    if rs["bytes"] == 0:
        return "empty (0 B)"
    parts = [_plural(rs["batches"], "batch", "batches"), _plural(rs["records"], "record")]
    if rs.get("first_offset") is not None:
        parts.append(f"offsets {rs['first_offset']}-{rs['last_offset']}")
    parts.append(f"{rs['bytes']} B")
    if rs.get("compression"):
        parts.append(rs["compression"])
    if rs.get("partial_bytes"):
        parts.append(f"{rs['partial_bytes']} B partial batch at the end")
    if rs.get("error"):
        parts.append(f"CANNOT DECODE: {rs['error']}")
    return ", ".join(parts)


def _ts_text(ms: Any) -> str:
    if not isinstance(ms, int) or ms < 0:
        return str(ms)
    return format_ts(ms / 1000.0, date=True)


def _records_lines(rs: RecordSet, pad: str) -> list[str]:
    out: list[str] = []
    for b in rs.get("contents", ()):
        flags = [f"magic {b['magic']}", b["compression"]]
        if b.get("is_transactional"):
            flags.append("transactional")
        if b.get("is_control"):
            flags.append("control")
        line = (f"{pad}batch offsets {b.get('first_offset', b['base_offset'])}-{b['last_offset']}, "
                f"{_plural(len(b['records']), 'record')}, {', '.join(flags)}")
        if b["magic"] < 2 and b.get("first_offset", b["base_offset"]) != b["base_offset"]:
            line += f", wrapper offset {b['base_offset']}"
        if b["magic"] == 2:
            line += (f", producer {b['producer_id']} epoch {b['producer_epoch']} seq {b['base_sequence']}"
                     f", leader epoch {b['partition_leader_epoch']}")
        line += f", crc {b['crc']} {'ok' if b['crc_ok'] else 'MISMATCH'}"
        out.append(line)
        if b["magic"] == 2:
            out.append(f"{pad}  {b['timestamp_type']} base {_ts_text(b['base_timestamp'])} max "
                       f"{_ts_text(b['max_timestamp'])}, attributes 0x{b['attributes']:04x}, "
                       f"last offset delta {b['last_offset_delta']}, {b['records_count']} in header, "
                       f"length {b['batch_length']} B")
        else:
            out.append(f"{pad}  {b['timestamp_type']}"
                       + (f" {_ts_text(b['timestamp'])}" if "timestamp" in b else "")
                       + f", attributes 0x{b['attributes']:02x}, length {b['batch_length']} B")
        if b.get("error"):
            out.append(f"{pad}  CANNOT DECODE: {b['error']}")
        for r in b["records"]:
            line = (f"{pad}  offset {r['offset']}  ts {_ts_text(r['timestamp'])}"
                    f"  key {_data_text(r['key'])}  value {_data_text(r['value'])}")
            if r.get("control"):
                line += f"  control {r['control']['type']} v{r['control']['version']}"
            if r["headers"]:
                line += "  headers " + ", ".join(f"{json.dumps(k, ensure_ascii=False)}={_data_text(v)}"
                                                 for k, v in r["headers"])
            out.append(line)
    return out


def _is_scalar(v: Any) -> bool:
    return not isinstance(v, (dict, list, Embedded)) or isinstance(v, RecordSet)


def _fields(value: dict[Any, Any]) -> Iterator[tuple[str, Any, Name | None]]:
    """(key, value, name) of a dict's fields: the names annotate() added are folded into the
    field they name (``acks: -1 (ALL)``), not shown as fields of their own."""
    for k, v in value.items():
        if isinstance(v, Name):
            continue
        name = value.get(name_key(str(k)))
        yield str(k), v, (name if isinstance(name, Name) and not name.quiet else None)


def tree_lines(value: Any, indent: int = 2) -> list[str]:
    """A decoded body as an indented tree, one field per line."""
    pad = " " * indent
    out: list[str] = []
    if not isinstance(value, dict):
        return [pad + _scalar(value)]
    for k, v, name in _fields(value):
        out.extend(_field_lines(k, v, indent, name))
    return out


def _named_scalar(v: Any, name: str | None) -> str:
    return _scalar(v) + (f" ({name})" if name else "")


def _inline(v: dict[Any, Any]) -> str | None:
    """A small struct of scalars on one line: ``{epoch: -1, end_offset: -1}``."""
    if not all(_is_scalar(x) and not isinstance(x, RecordSet) for x in v.values()):
        return None
    text = "{" + ", ".join(f"{k}: {_named_scalar(x, name)}" for k, x, name in _fields(v)) + "}"
    return text if len(text) <= INLINE_WIDTH else None


def _field_lines(k: str, v: Any, indent: int, name: str | None = None) -> list[str]:
    pad = " " * indent
    if isinstance(v, RecordSet):
        return [f"{pad}{k}: {_records_line(v)}", *_records_lines(v, pad + "  ")]
    if isinstance(v, Embedded):
        return [f"{pad}{k}: <{len(v.raw)} bytes> {v.label}", *tree_lines(v.value, indent + 2)]
    if isinstance(v, dict):
        inline = _inline(v)
        return [f"{pad}{k}: {inline}"] if inline is not None else [f"{pad}{k}:", *tree_lines(v, indent + 2)]
    if isinstance(v, list):
        if not v:
            return [f"{pad}{k}: []"]
        if all(_is_scalar(e) and not isinstance(e, RecordSet) for e in v):
            return [f"{pad}{k}: [{', '.join(_scalar(e) for e in v)}]"]
        lines = [f"{pad}{k}:"]
        for e in v:
            inline = _inline(e) if isinstance(e, dict) else None
            if inline is not None:
                lines.append(f"{pad}  - {inline}")
                continue
            sub = tree_lines(e, indent + 4) if isinstance(e, dict) else [" " * (indent + 4) + _scalar(e)]
            if not sub:
                lines.append(f"{pad}  - {{}}")
                continue
            lines.append(f"{pad}  - " + sub[0][indent + 4:])
            lines.extend(sub[1:])
        return lines
    return [f"{pad}{k}: {_named_scalar(v, name)}"]


def _route(event: Event) -> str:
    """"client → broker" (a request) or "client ← broker", each as host:port."""
    client, broker, node = event.get("client"), event.get("broker"), event.get("node_id")
    tb = event.get("to_broker")
    if tb is None and not (client or broker or node is not None):
        return ""
    arrow = "→" if tb else "←" if tb is not None else "-"
    target = " ".join(x for x in (f"node {node}" if node is not None else "", broker or "") if x)
    return " ".join(x for x in (client, arrow, target) if x)


def header_line(event: Event) -> str:
    kind = event.get("kind")
    parts = [format_ts(event["ts"])] if event.get("ts") is not None else []
    if event.get("packet") is not None:
        parts.append(f"#{event['packet']}")
    route = _route(event)
    if route:
        parts.append(route)
    if kind in ("request", "response"):
        parts.append(f"{event.get('api')} v{event.get('version')}")
        parts.append(f"corr={event.get('correlation_id')}")
        if kind == "request" and event.get("client_id") is not None:
            parts.append(f"client_id={json.dumps(event['client_id'], ensure_ascii=False)}")
    elif kind == "undecoded":
        label = "UNDECODED"
        if event.get("api") or event.get("api_key") is not None:
            label += f" {event.get('api') or 'api ' + str(event.get('api_key'))} v{event.get('version')}"
        parts.append(label)
        if event.get("correlation_id") is not None:
            parts.append(f"corr={event['correlation_id']}")
    elif kind == "gap":
        parts.append("GAP")
    elif kind == "tls":
        parts.append("TLS")
    else:
        parts.append("NOTE")
    if event.get("size_bytes") is not None and kind != "gap":
        parts.append(f"{event['size_bytes']} B")
    if event.get("rtt_ms") is not None:
        parts.append(f"rtt={event['rtt_ms']:.3f} ms")
    if event.get("offset") is not None and kind == "undecoded":
        parts.append(f"at stream offset {event['offset']}")
    return "  ".join(parts)


def _errors_text(counts: dict[str, int]) -> str:
    return ", ".join(name if n == 1 else f"{name}×{n}" for name, n in counts.items())


def summary_line(event: Event, records: str = "summary", body: Any = None,
                 topic_names: TopicNames | None = None) -> str:
    """One line per event: time, packet, route, client id, api/version, corr, size, rtt, and
    the names of the errors the body carries (or why it did not decode)."""
    kind = event.get("kind")
    parts = [format_ts(event["ts"])] if event.get("ts") is not None else []
    if event.get("packet") is not None:
        parts.append(f"#{event['packet']}")
    route = _route(event)
    if route:
        parts.append(route)
    if event.get("client_id") is not None:
        parts.append(json.dumps(event["client_id"], ensure_ascii=False))
    if kind in ("request", "response"):
        parts.append(f"{event.get('api')} v{event.get('version')}")
    elif kind == "undecoded":
        label = "UNDECODED"
        if event.get("api") or event.get("api_key") is not None:
            label += f" {event.get('api') or 'api ' + str(event.get('api_key'))} v{event.get('version')}"
        parts.append(label)
    else:
        parts.append({"gap": "GAP", "tls": "TLS"}.get(kind or "", "NOTE"))
    if event.get("correlation_id") is not None:
        parts.append(f"corr={event['correlation_id']}")
    if event.get("size_bytes") is not None:
        parts.append(f"{event['size_bytes']} B")
    if event.get("rtt_ms") is not None:
        parts.append(f"rtt={event['rtt_ms']:.3f} ms")
    if kind in ("request", "response"):
        b = prepare_body(event, records, topic_names) if body is None else body
        errors = error_counts(b)
        if errors:
            parts.append(_errors_text(errors))
    elif event.get("reason"):
        parts.append(("why: " if kind == "undecoded" else "") + event["reason"])
    return "  ".join(parts)


def _partial_lines(event: Event, records: str, topic_names: TopicNames | None) -> list[str]:
    """What a frame that did not decode still says, where decoding stopped, and the bytes from
    there on."""
    partial: Partial = event["partial"]
    lines = ["  decoded before the failure:" if not partial.complete else "  decoded:"]
    lines.extend(tree_lines(dict(partial.header), indent=4))
    if partial.body:
        body = prepare_body(event, records, topic_names, body=partial.body)
        lines.extend(tree_lines(_consumer_payloads(event, body), indent=4))
    lines.append(f"  stopped: {partial.describe()}")
    data = event.get("data")
    if data is not None:
        rest = bytes(data)[partial.position:]
        if rest:
            lines.append(f"  the rest, from byte {partial.position}:")
            lines.extend(hexdump(rest, indent="    ", limit=TEXT_HEX_LIMIT, base=partial.position))
    return lines


def text_lines(event: Event, records: str = "summary", body: Any = None,
               topic_names: TopicNames | None = None) -> list[str]:
    """The text rendering of one event, as lines (no trailing newline)."""
    kind = event.get("kind")
    lines = [header_line(event)]
    if kind in ("request", "response"):
        b = prepare_body(event, records, topic_names) if body is None else body
        if isinstance(b, dict):
            b = _consumer_payloads(event, b)
        lines.extend(tree_lines(b) if isinstance(b, dict) else ([] if b is None else ["  " + _scalar(b)]))
    else:
        if event.get("reason"):
            lines.append(f"  {'why' if kind == 'undecoded' else 'what'}: {event['reason']}")
        if event.get("partial") is not None:
            lines.extend(_partial_lines(event, records, topic_names))
        elif event.get("data") is not None:
            lines.extend(hexdump(bytes(event["data"]), indent="    ", limit=TEXT_HEX_LIMIT))
    return lines


# --- the renderer --------------------------------------------------------------------------------

class Renderer:
    """Writes events to a stream in one format; counts what it could not decode.

    ``color``: None = rich colours when ``stream`` is a terminal (text only), True/False to force.
    ``problems`` counts record payloads that failed to decode (frames that failed are the
    capture decoder's to count).
    """

    def __init__(self, format: str = "text", records: str = "summary", *, stream: TextIO | None = None,
                 color: bool | None = None, summary: bool = False, topic_names: TopicNames | None = None):
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, not {format!r}")
        if records not in RECORD_MODES:
            raise ValueError(f"records must be one of {RECORD_MODES}, not {records!r}")
        self.format = format
        self.records = records
        self.summary = summary  # one line per event, without bodies
        self.topic_names = topic_names if topic_names is not None else {}  # topic id -> name
        self.stream = stream if stream is not None else sys.stdout
        if color is None:
            isatty = getattr(self.stream, "isatty", None)
            color = bool(isatty and isatty())
        self.color = color and format == "text"
        self._console: Console | None = None
        self._highlight: ReprHighlighter | None = None
        self.problems = 0
        self.problem_notes: list[str] = []

    def render(self, event: Event) -> str:
        """The event as text (lines joined by newlines) or as one JSON line, without the
        final newline."""
        body = None
        if event.get("kind") in ("request", "response") and self.summary:
            body = event.get("body")  # a summary names errors only: record sets stay undecoded
        elif event.get("kind") in ("request", "response"):
            body = prepare_body(event, self.records, self.topic_names)
            found = _record_problems(body)
            if found:
                self.problems += len(found)
                self.problem_notes.extend(found)
        if self.format == "json":
            return json.dumps(to_json_event(event, self.records, body, summary=self.summary,
                                            topic_names=self.topic_names),
                              ensure_ascii=False, separators=(", ", ": "))
        if self.summary:
            return summary_line(event, self.records, body, self.topic_names)
        return "\n".join(text_lines(event, self.records, body, self.topic_names))

    def write(self, event: Event) -> None:
        text = self.render(event)
        if not self.color:
            self.stream.write(text + "\n")
            return
        self._rich_print(event, text)

    def _rich_print(self, event: Event, text: str) -> None:
        from rich.console import Console
        from rich.highlighter import ReprHighlighter
        from rich.text import Text

        if self._console is None or self._highlight is None:
            self._console = Console(file=self.stream, force_terminal=True, highlight=False, soft_wrap=True)
            self._highlight = ReprHighlighter()
        console, highlight = self._console, self._highlight
        head, *rest = text.split("\n")
        kind = event.get("kind")
        style = {"request": "bold cyan", "response": "bold green", "undecoded": "bold red",
                 "gap": "bold red", "tls": "bold red", "note": "yellow"}.get(kind or "", "")
        console.print(Text(head, style=style))
        for line in rest:
            console.print(highlight(Text(line)))

    def flush(self) -> None:
        flush = getattr(self.stream, "flush", None)
        if flush:
            flush()
