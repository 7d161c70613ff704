"""Kafka traffic out of packet captures (.pcap and .pcapng).

The pipeline, one plain function per stage::

    read_segments(path)    capture file -> TCP segments per connection
                           (dpkt: pcap/pcapng files; Ethernet, Linux cooked v1/v2, BSD
                           loopback and raw-IP link layers; IPv4, IPv6, TCP)
    reassemble(segments)   one direction -> Stream: bytes by sequence number, duplicates and
                           overlaps dropped, the holes the capture lost recorded
    split_frames(stream)   Stream -> size-prefixed frames, resynchronising after damage
    decode_capture(path)   every Kafka connection: requests decoded from their own header,
                           each response paired with its request by correlation id (so its api
                           and version are known), all of it in time order

A Kafka frame on a stream::

    size:int32 (bytes that follow) | payload
    request payload  = api_key:int16 api_version:int16 correlation_id:int32 client_id ... body
    response payload = correlation_id:int32 ... body

Nothing is dropped silently: bytes that cannot be decoded become ``undecoded`` items carrying
the bytes and the reason; holes in the capture become ``gap`` items.  Limits: IP fragments are
not reassembled; a pcapng file's link type is its first interface's; TLS is recognised and
reported (see :mod:`kwire.debug.tls`), not decrypted.
"""
from __future__ import annotations

import bisect
import contextlib
import functools
import io
import mmap
import os
import socket
import struct
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import KwireError
from ..protocol import api as P
from .names import api_name
from .partial import Partial, partial_request, partial_response
from .tls import (
    CANNOT_DECRYPT,
    NO_KEYS,
    Decrypted,
    TlsKeylogError,
    TlsSummary,
    decrypt_with_tshark,
    find_tls,
    summarise_tls,
)

try:
    import dpkt as dpkt  # an explicit re-export: live.py uses the same (optional) module
except ImportError:  # pragma: no cover - exercised only without the extra installed
    dpkt = None

__all__ = ["CaptureError", "CaptureResult", "Item", "Stream", "decode_capture", "read_segments",
           "reassemble", "split_frames"]

DEFAULT_PORT = 9092
MAX_FRAME_BYTES = 256 * 1024 * 1024  # larger sizes are taken as damage, not as a frame
MIN_REQUEST_BYTES = 8  # api_key, api_version, correlation_id
MIN_RESPONSE_BYTES = 4  # correlation_id
RESYNC_WINDOW_BYTES = 4 * 1024 * 1024  # how far to look for the next frame after damage
MID_START_SCAN_BYTES = 64 * 1024  # how far auto-detection looks into a connection already open

_I32 = struct.Struct(">i")
_REQ_HDR = struct.Struct(">ihhih")  # size, api_key, api_version, correlation_id, client_id length
_RESP_HDR = struct.Struct(">ii")  # size, correlation_id

# Link-layer types (tcpdump.org/linktypes) we hand to dpkt.
_LINK_ETHERNET = 1
_LINK_NULL = 0
_LINK_LOOP = 108
_LINK_SLL = 113
_LINK_SLL2 = 276
_LINK_RAW = (12, 14, 101, 228, 229)  # raw IPv4/IPv6 under the numbers various systems use


class CaptureError(KwireError):
    """The file is not a capture kwire can read (not pcap/pcapng, or an unknown link type)."""


# --- items: what decode_capture reports ------------------------------------------------------

@dataclass
class Item:
    """One thing seen on the wire: a decoded frame, undecodable bytes, a gap or a note.

    ``kind`` is "request", "response", "undecoded", "gap", "tls" (a direction of a connection
    that carries TLS) or "note".  ``problem`` marks the
    items that mean some bytes could not be decoded (undecoded, gap, and some notes).
    ``size_bytes`` counts a frame's bytes on the wire, its 4-byte size prefix included.
    """

    kind: str
    ts: float | None = None
    client: str | None = None
    broker: str | None = None
    to_broker: bool | None = None
    api: str | None = None
    api_key: int | None = None
    version: int | None = None
    correlation_id: int | None = None
    client_id: str | None = None
    size_bytes: int | None = None
    rtt_ms: float | None = None
    body: dict[str, Any] | None = None
    reason: str | None = None
    data: bytes | None = None
    offset: int | None = None
    connection: int | None = None
    problem: bool = False
    packet: int | None = None  # the packet (numbered from 1, as Wireshark does) that completed it
    partial: Partial | None = None  # for a frame that did not decode
    # A response's request and a request's response (undecoded frames whose header was read
    # are paired too): filters select pairs, --summary names a response's client.
    request: Item | None = field(default=None, repr=False, compare=False)
    response: Item | None = field(default=None, repr=False, compare=False)

    def to_event(self) -> dict[str, Any]:
        """The dict render.py takes (the same shape as a live trace event after trace.py)."""
        client_id = self.client_id
        if client_id is None and self.request is not None:
            client_id = self.request.client_id
        return {
            "kind": self.kind, "ts": self.ts, "packet": self.packet, "client": self.client,
            "broker": self.broker, "node_id": None, "to_broker": self.to_broker,
            "connection": self.connection, "api": self.api, "api_key": self.api_key,
            "version": self.version, "correlation_id": self.correlation_id, "client_id": client_id,
            "size_bytes": self.size_bytes, "rtt_ms": self.rtt_ms, "body": self.body,
            "reason": self.reason, "data": self.data, "offset": self.offset, "partial": self.partial,
        }


@dataclass
class KafkaConnection:
    """One Kafka connection found in the capture (``index`` is Item.connection)."""

    index: int
    client: str
    broker: str
    found_by: str  # "port" or "auto"
    opened_in_capture: bool  # its SYN is in the capture: nothing before it is missing


@dataclass
class CaptureResult:
    items: list[Item]
    stats: dict[str, Any]
    connections: list[KafkaConnection] = field(default_factory=list)

    @property
    def problems(self) -> int:
        return sum(1 for i in self.items if i.problem)

    def frames(self, kind: str | None = None) -> list[Item]:
        kinds = ("request", "response") if kind is None else (kind,)
        return [i for i in self.items if i.kind in kinds]


# --- reading packets ---------------------------------------------------------------------------

@dataclass
class Segment:
    """One TCP segment: ``payload`` as captured, ``lost`` bytes of it the capture did not keep."""

    index: int  # packet number in the file, from 1 as tcpdump and Wireshark count
    ts: float
    seq: int
    flags: int
    payload: bytes | memoryview  # a memoryview of the mapped capture file, when it is mapped
    lost: int = 0

    @property
    def syn(self) -> bool:
        return bool(self.flags & 0x02)

    @property
    def fin_or_rst(self) -> bool:
        return bool(self.flags & 0x05)


Endpoint = tuple[str, int]  # (ip text, port)


def endpoint_text(ep: Endpoint) -> str:
    host, port = ep
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass
class Connection:
    """The segments of one TCP connection, each direction keyed by its source endpoint."""

    a: Endpoint  # source of the first packet seen
    b: Endpoint
    segments: dict[Endpoint, list[Segment]] = field(default_factory=dict)
    isn: dict[Endpoint, int] = field(default_factory=dict)  # initial sequence number (SYN seen)
    closed: set[Endpoint] = field(default_factory=set)  # endpoints that sent FIN or RST
    syn_from: Endpoint | None = None  # the side that opened the connection
    first_ts: float = 0.0
    has_data: bool = False

    def add(self, src: Endpoint, seg: Segment) -> None:
        if seg.syn:
            self.isn.setdefault(src, seg.seq)
            if not seg.flags & 0x10 and self.syn_from is None:  # SYN without ACK: the opener
                self.syn_from = src
        if seg.fin_or_rst:
            self.closed.add(src)
        if seg.payload or seg.lost:
            self.has_data = True
        self.segments.setdefault(src, []).append(seg)

    def other(self, ep: Endpoint) -> Endpoint:
        return self.b if ep == self.a else self.a


def _link_decoder(linktype: int) -> Callable[[bytes], object] | None:
    decoder: Callable[[bytes], object] | None = None  # a dpkt packet class (dpkt is untyped)
    if linktype == _LINK_ETHERNET:
        decoder = dpkt.ethernet.Ethernet
    elif linktype == _LINK_SLL:
        decoder = dpkt.sll.SLL
    elif linktype == _LINK_SLL2:
        decoder = dpkt.sll2.SLL2
    elif linktype in (_LINK_NULL, _LINK_LOOP):
        decoder = dpkt.loopback.Loopback
    elif linktype in _LINK_RAW:
        def raw_ip(buf: bytes) -> Any:  # a dpkt packet
            if buf and buf[0] >> 4 == 6:
                return dpkt.ip6.IP6(buf)
            return dpkt.ip.IP(buf)
        decoder = raw_ip
    return decoder


def _find_ip(pkt: object) -> Any:  # a dpkt IP or IP6 packet (dpkt is untyped), or None
    for _ in range(4):  # link header -> (VLAN, loopback-in-Ethernet...) -> IP
        if isinstance(pkt, (dpkt.ip.IP, dpkt.ip6.IP6)):
            return pkt
        pkt = getattr(pkt, "data", None)
        if not isinstance(pkt, dpkt.Packet):
            return None
    return None


_IP4_HDR = struct.Struct(">BxHxxHxB2x4s4s")  # version/IHL, total length, flags/fragment offset, protocol, addresses
_TCP_HDR = struct.Struct(">HHI4xH")  # ports, sequence number, data offset and flags


def _ipv4_at(linktype: int) -> Callable[[bytes | memoryview], int] | None:
    """For link types whose IPv4 packets the fast path reads: buf -> offset of the IPv4
    header, or -1 (anything else: read by dpkt)."""
    if linktype == _LINK_ETHERNET:
        return lambda buf: 14 if buf[12:14] == b"\x08\x00" else -1  # Ethernet II carrying IPv4
    if linktype in _LINK_RAW:
        return lambda buf: 0 if buf[:1] and buf[0] >> 4 == 4 else -1
    return None


def _fast_ipv4_tcp(buf: bytes | memoryview, at: int) -> tuple[str, str, int, int, int, int, bytes | memoryview, int] | None:
    """An IPv4 TCP packet read as dpkt reads it, without dpkt's copies per layer: (src ip, dst
    ip, sport, dport, seq, flags, payload, lost), or None where dpkt must decide (fragments,
    short headers, not TCP, not version 4)."""
    n = len(buf)
    if n < at + 20:
        return None
    v_hl, ip_len, frag, proto, src, dst = _IP4_HDR.unpack_from(buf, at)
    hl = (v_hl & 0xF) * 4
    start = at + hl
    if v_hl >> 4 != 4 or hl < 20 or frag & 0x1FFF or proto != 6 or start > n:
        return None
    end = min(at + ip_len, n) if ip_len else n
    if end - start < 20:
        return None
    sport, dport, seq, off_flags = _TCP_HDR.unpack_from(buf, start)
    off = (off_flags >> 12) * 4
    if off < 20:
        return None
    payload = buf[start + off:end]
    lost = max(0, ip_len - hl - off - len(payload)) if ip_len else 0
    return (socket.inet_ntop(socket.AF_INET, src), socket.inet_ntop(socket.AF_INET, dst), sport, dport, seq,
            off_flags & 0x1FF, payload, lost)


_PCAP_MICRO = {b"\xa1\xb2\xc3\xd4": ">", b"\xd4\xc3\xb2\xa1": "<"}  # classic pcap, microseconds


def _mapped_pcap(f: IO[bytes]) -> tuple[int, Iterator[tuple[float, memoryview]]] | None:
    """A classic pcap file (microsecond timestamps) mapped into memory: (link type, iterator of
    (ts, packet bytes as a memoryview of the mapping)), so packets are not copied out of the
    file one by one; None for anything else (pcapng, nanosecond pcap, an empty or unmappable
    file), which dpkt reads.  Packets come out as dpkt's pcap.Reader gives them: a record the
    file cuts short is yielded short, a cut record header raises dpkt's error."""
    try:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None
    order = _PCAP_MICRO.get(mm[:4]) if len(mm) >= 24 else None
    if order is None:
        mm.close()
        return None
    linktype = struct.unpack_from(order + "I", mm, 20)[0]
    rec = struct.Struct(order + "III")  # seconds, microseconds, captured length

    def packets() -> Iterator[tuple[float, memoryview]]:
        view = memoryview(mm)
        n, pos = len(mm), 24
        while pos < n:
            if pos + 16 > n:
                dpkt.pcap.LEPktHdr(bytes(view[pos:])) if order == "<" else dpkt.pcap.PktHdr(bytes(view[pos:]))
            sec, usec, caplen = rec.unpack_from(mm, pos)
            yield sec + (usec / 1E6), view[pos + 16:pos + 16 + caplen]
            pos += 16 + caplen

    return linktype, packets()


def read_segments(path: str | os.PathLike[str] | IO[bytes]) -> tuple[list[Connection], dict[str, Any], list[Item]]:
    """Every TCP connection in a capture (a path, or a binary file object), with its segments
    in capture order.

    Returns (connections, stats, notes): notes report damage to the file itself.
    """
    if dpkt is None:
        raise CaptureError("reading captures needs dpkt: pip install 'kwire[debug]' (or pip install dpkt)")
    stats: dict[str, Any] = {"packets": 0, "tcp_packets": 0, "other_packets": 0, "unreadable_packets": 0}
    notes: list[Item] = []
    by_key: dict[tuple[Endpoint, Endpoint], Connection] = {}
    done: list[Connection] = []
    opened: contextlib.AbstractContextManager[IO[bytes]]
    if isinstance(path, (str, os.PathLike)):
        name, named, opened = os.fspath(path), True, open(path, "rb")
    else:  # a binary file object (standard input)
        name, named, opened = "stdin", False, contextlib.nullcontext(path)
    with opened as f:
        mapped = _mapped_pcap(f) if named else None
        if mapped is not None:
            linktype, packets = mapped
        else:
            try:
                reader = dpkt.pcap.UniversalReader(f)
            except (ValueError, dpkt.Error, struct.error) as exc:
                raise CaptureError(f"{name}: not a pcap or pcapng capture ({exc})") from None
            linktype, packets = reader.datalink(), iter(reader)
        decode_link = _link_decoder(linktype)
        if decode_link is None:
            raise CaptureError(f"{name}: link type {linktype} is not supported "
                               "(Ethernet, Linux cooked v1/v2, loopback and raw IP are)")
        stats["link_type"] = linktype
        ipv4_at = _ipv4_at(linktype)
        last: tuple[Segment, Connection] | None = None
        while True:
            try:
                ts, buf = next(packets)
            except StopIteration:
                break
            except (dpkt.Error, struct.error, ValueError) as exc:
                notes.append(Item("note", ts=last[0].ts if last else None, problem=True, reason=(
                    f"the capture file ends inside the record after packet {stats['packets']} "
                    f"(a cut file?): {exc or type(exc).__name__}")))
                break
            stats["packets"] += 1
            index = stats["packets"]
            at = ipv4_at(buf) if ipv4_at is not None else -1
            fast = _fast_ipv4_tcp(buf, at) if at >= 0 else None
            if fast is not None:
                src, dst, sport, dport, seq, flags, payload, lost = fast
                stats["tcp_packets"] += 1
                seg = Segment(index, float(ts), seq, flags, payload, lost)
                s_ep, d_ep = (src, sport), (dst, dport)
            else:
                slow = _slow_segment(buf, ts, index, decode_link, stats, notes)
                if slow is None:
                    continue
                seg, s_ep, d_ep = slow
            key = (s_ep, d_ep) if s_ep <= d_ep else (d_ep, s_ep)
            conn = by_key.get(key)
            if conn is not None and seg.syn and not seg.flags & 0x10 and (
                    conn.has_data or conn.closed) and conn.isn.get(s_ep) != seg.seq:
                done.append(conn)  # the 4-tuple is reused by a new connection
                conn = None
            if conn is None:
                conn = by_key[key] = Connection(s_ep, d_ep, first_ts=seg.ts)
            conn.add(s_ep, seg)
            last = (seg, conn)
        if last is not None and last[0].lost:
            seg = last[0]
            notes.append(Item("note", ts=seg.ts, problem=False, reason=(
                f"the capture file ends inside packet {seg.index}: its last {seg.lost} bytes "
                "are missing (a cut file?)")))
    conns = done + list(by_key.values())
    conns.sort(key=lambda c: c.first_ts)
    return conns, stats, notes


def _slow_segment(buf: bytes | memoryview, ts: float, index: int, decode_link: Callable[[bytes], object],
                  stats: dict[str, Any], notes: list[Item]
                  ) -> tuple[Segment, Endpoint, Endpoint] | None:
    """One packet through dpkt: (Segment, source, destination), or None for a
    packet that is not TCP (counted in ``stats``, noted in ``notes`` when unreadable)."""
    try:
        ip = _find_ip(decode_link(bytes(buf)))
    except (dpkt.Error, struct.error, ValueError, IndexError):
        ip = None
    if ip is None:
        stats["other_packets"] += 1
        return None
    tcp = ip.data
    if ip.p != 6:
        stats["other_packets"] += 1
        return None
    if not isinstance(tcp, dpkt.tcp.TCP):
        stats["unreadable_packets"] += 1
        notes.append(Item("note", ts=float(ts), problem=True, reason=(
            f"packet {index} is too short (or fragmented) to read its TCP header; "
            "its bytes are missing from its stream")))
        return None
    stats["tcp_packets"] += 1
    if isinstance(ip, dpkt.ip.IP):
        src, dst = socket.inet_ntop(socket.AF_INET, ip.src), socket.inet_ntop(socket.AF_INET, ip.dst)
        seg_len = ip.len - ip.hl * 4 if ip.len else None
    else:
        src, dst = socket.inet_ntop(socket.AF_INET6, ip.src), socket.inet_ntop(socket.AF_INET6, ip.dst)
        ext = sum(e.length for e in getattr(ip, "all_extension_headers", ()))
        seg_len = ip.plen - ext if ip.plen else None
    payload = bytes(tcp.data)
    lost = max(0, seg_len - tcp.off * 4 - len(payload)) if seg_len is not None else 0
    return Segment(index, float(ts), tcp.seq, tcp.flags, payload, lost), (src, tcp.sport), (dst, tcp.dport)


# --- reassembly --------------------------------------------------------------------------------

class Stream:
    """One direction of a TCP connection, reassembled.

    ``data`` covers stream offsets [0, end); bytes inside ``holes`` (sorted (start, stop)
    pairs) were lost by the capture and read as zeros.  Offset 0 is the byte after the SYN, or
    the first byte captured when the capture started mid-connection (``mid_start``).
    """

    def __init__(self, data: bytes, holes: list[tuple[int, int]], times: list[tuple[int, float, int]], *,
                 mid_start: bool, closed: bool, duplicate_bytes: int = 0,
                 lost_segments: list[tuple[int, int, int]] | None = None):
        self.data = data if type(data) is bytes else bytes(data)
        self.holes = holes
        self._time_offsets = [t[0] for t in times]
        self._times = [t[1] for t in times]
        self._packets = [t[2] if len(t) > 2 else None for t in times]
        self.mid_start = mid_start
        self.closed = closed  # FIN/RST seen and nothing lost at the end
        self.duplicate_bytes = duplicate_bytes
        # (packet index, lost bytes, stream offset of the first lost byte) of short packets
        self.lost_segments = lost_segments or []

    @property
    def end(self) -> int:
        return len(self.data)

    def time_at(self, offset: int) -> float | None:
        if not self._times:
            return None
        i = bisect.bisect_right(self._time_offsets, offset) - 1
        return self._times[max(i, 0)]

    def first_hole(self, start: int, stop: int) -> tuple[int, int] | None:
        """The first hole overlapping [start, stop)."""
        holes = self.holes
        for i in range(max(bisect.bisect_right(holes, (start, float("inf"))) - 1, 0), len(holes)):
            hs, he = holes[i]
            if hs >= stop:
                return None
            if he > start:
                return hs, he
        return None

    def packet_at(self, offset: int) -> int | None:
        """The number (from 1, as Wireshark counts) of the packet that carried ``offset``."""
        if not self._packets:
            return None
        i = bisect.bisect_right(self._time_offsets, offset) - 1
        return self._packets[max(i, 0)]

    def lost_in(self, start: int, stop: int) -> int:
        return sum(max(0, min(he, stop) - max(hs, start)) for hs, he in self.holes if hs < stop and he > start)

    def runs(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The sub-ranges of [start, stop) the capture has."""
        out, pos = [], start
        stop = min(stop, self.end)
        while pos < stop:
            hole = self.first_hole(pos, stop)
            if hole is None:
                out.append((pos, stop))
                break
            if hole[0] > pos:
                out.append((pos, hole[0]))
            pos = hole[1]
        return out


def reassemble(segments: list[Segment], isn: int | None, *, closed: bool = False) -> Stream:
    """Order one direction's segments by sequence number into a Stream.

    Retransmitted and overlapping bytes are taken from the first copy captured; bytes no
    segment carries are holes.  Sequence numbers are unwrapped (mod 2**32) in capture order.
    """
    data_segs = [s for s in segments if s.payload or s.lost]
    if not data_segs:
        return Stream(b"", [], [], mid_start=isn is None, closed=closed)
    prev_seq = (isn + 1) & 0xFFFFFFFF if isn is not None else data_segs[0].seq
    prev_rel = 0
    placed = []
    for s in data_segs:
        seq = (s.seq + 1) & 0xFFFFFFFF if s.syn else s.seq  # data on a SYN (TCP Fast Open) follows the SYN
        diff = (seq - prev_seq) & 0xFFFFFFFF
        if diff >= 1 << 31:
            diff -= 1 << 32
        rel = prev_rel + diff
        prev_seq, prev_rel = seq, rel
        placed.append((rel, s.index, s))
    shift = 0 if isn is not None else -min(r for r, _, _ in placed)
    placed.sort(key=lambda p: (p[0], p[1]))
    chunks: list[bytes | memoryview] = []  # joined once at the end: a capture's bytes are copied once here
    cursor = 0  # the length of the chunks so far
    holes: list[tuple[int, int]] = []
    times: list[tuple[int, float, int]] = []  # (stream offset, ts, packet) where each segment's bytes start
    declared = 0
    duplicates = 0
    lost_segments = []
    for rel, _, s in placed:
        rel += shift
        if rel < 0:  # bytes before the SYN: cannot happen on a sane capture
            continue
        if rel > cursor:
            holes.append((cursor, rel))
            chunks.append(bytes(rel - cursor))
            cursor = rel
        cap_end = rel + len(s.payload)
        if cap_end > cursor:
            duplicates += cursor - rel
            times.append((cursor, s.ts, s.index))
            chunks.append(s.payload if cursor == rel else s.payload[cursor - rel:])
            cursor = cap_end
        else:
            duplicates += len(s.payload)
        if s.lost:
            lost_segments.append((s.index, s.lost, cap_end))
        declared = max(declared, cap_end + s.lost)
    if declared > cursor:
        holes.append((cursor, declared))
        chunks.append(bytes(declared - cursor))
        cursor = declared
    data = b"".join(chunks)
    # Merge holes that touch (a short packet followed by a lost one).
    merged: list[tuple[int, int]] = []
    for hs, he in holes:
        if merged and merged[-1][1] >= hs:
            merged[-1] = (merged[-1][0], max(merged[-1][1], he))
        else:
            merged.append((hs, he))
    tail_lost = bool(merged) and merged[-1][1] == len(data)
    return Stream(data, merged, times, mid_start=isn is None, closed=closed and not tail_lost,
                  duplicate_bytes=duplicates, lost_segments=lost_segments)


# --- framing -----------------------------------------------------------------------------------

@dataclass
class Piece:
    """What split_frames finds: a whole ``frame`` (payload without its size prefix), a frame
    the capture damaged (``damaged``: ``data`` holds one run of the bytes it has), or
    ``junk``: bytes that are not a recognisable frame."""

    kind: str
    offset: int
    data: bytes | memoryview  # a frame's: a memoryview of the stream's bytes
    size: int | None = None  # the frame's size field (a frame's is len(data))
    reason: str | None = None
    header: bytes | None = None  # a damaged frame's first 8 payload bytes when captured

    @property
    def end(self) -> int:
        """The stream offset just after the piece (a frame: after its size prefix and payload)."""
        return self.offset + (4 if self.kind == "frame" else 0) + len(self.data)


# How plausible it is that a frame starts at an offset: NO; WEAK (its header is sane but the
# frame runs past the captured data, so the next frame cannot confirm it); STRONG (the next
# frame's header is sane too, or the frame ends exactly where the data does).
NO, WEAK, STRONG = 0, 1, 2
Plausible = Callable[["Stream", int], int]  # (stream, offset) -> NO | WEAK | STRONG


def _confirm(stream: Stream, nxt: int, need: int, check_next: Callable[[int], bool]) -> int:
    """The tier of a candidate whose frame ends at ``nxt``, given the next frame's check."""
    if nxt > stream.end:
        # A closed stream (FIN/RST, nothing lost at its end) has no room for it.
        return NO if stream.closed else WEAK
    if nxt == stream.end:
        return STRONG
    if nxt + need > stream.end or stream.first_hole(nxt, nxt + need) is not None:
        return WEAK
    return STRONG if check_next(nxt) else NO


def _request_header_ok(data: bytes, q: int) -> int | None:
    """The frame size when a sane request header starts at ``q``: size, a known api key at a
    version kwire declares, a non-negative correlation id, a client id that fits."""
    size: int
    size, key, version, corr, cid_len = _REQ_HDR.unpack_from(data, q)
    if not MIN_REQUEST_BYTES <= size <= MAX_FRAME_BYTES or corr < 0 or not -1 <= cid_len <= size - 10:
        return None
    a = P.APIS.get(key)
    if a is None or not a.decodes(version):
        return None
    return size


def request_start(stream: Stream, q: int) -> int:
    """How plausibly a request frame starts at ``q`` (NO, WEAK or STRONG)."""
    data = stream.data
    if q + _REQ_HDR.size > stream.end:
        return NO
    size = _request_header_ok(data, q)
    if size is None:
        return NO
    return _confirm(stream, q + 4 + size, _REQ_HDR.size, lambda n: _request_header_ok(data, n) is not None)


def response_start(expected: Callable[[], set[int]]) -> Plausible:
    """How plausibly a response starts at ``q``: a sane size and a correlation id that one of
    the connection's unanswered requests carries, confirmed by a sane next size."""

    def next_ok(data: bytes, n: int) -> bool:
        size: int = _I32.unpack_from(data, n)[0]
        return MIN_RESPONSE_BYTES <= size <= MAX_FRAME_BYTES

    def check(stream: Stream, q: int) -> int:
        data = stream.data
        if q + _RESP_HDR.size > stream.end:
            return NO
        size, corr = _RESP_HDR.unpack_from(data, q)
        if not MIN_RESPONSE_BYTES <= size <= MAX_FRAME_BYTES or corr not in expected():
            return NO
        return _confirm(stream, q + 4 + size, 4, lambda n: next_ok(data, n))

    return check


def split_frames(stream: Stream, plausible: Plausible, *, min_size: int) -> Iterator[Piece]:
    """Cut a stream into size-prefixed frames.

    After damage (a hole over a size prefix, an impossible size, a stream that started
    mid-connection) it scans forward for the next offset where ``plausible`` holds and reports
    the bytes it skipped as junk.  ``plausible`` is called lazily, so it may depend on what the
    caller has decoded so far (a response's correlation id on the requests seen).
    """
    data, end = stream.data, stream.end
    view = memoryview(data)

    def junk(start: int, stop: int, reason: str) -> Iterator[Piece]:
        for a, b in stream.runs(start, stop):
            yield Piece("junk", a, data[a:b], reason=reason)

    def resync(start: int) -> int:
        """The first STRONG candidate at or after ``start``, else the first WEAK one, else
        ``end`` (nothing left to find) or -1 (gave up after RESYNC_WINDOW_BYTES)."""
        limit = min(end, start + RESYNC_WINDOW_BYTES)
        weak = -1
        q = start
        while q < limit:
            hole = stream.first_hole(q, q + 16)
            if hole is not None:
                q = hole[1]
                continue
            tier = plausible(stream, q)
            if tier == STRONG:
                return q
            if tier == WEAK and weak < 0:
                weak = q
            q += 1
        if weak >= 0:
            return weak
        return end if limit == end else -1

    pos = 0
    if stream.mid_start and plausible(stream, 0) != STRONG:
        q = resync(0)
        if q < 0:
            yield from junk(0, end, "the capture starts mid-connection and no frame boundary "
                                    f"was found in the first {RESYNC_WINDOW_BYTES} bytes")
            return
        yield from junk(0, q, "the capture starts mid-connection: bytes before the first "
                              "recognisable frame")
        pos = q
    while pos < end:
        hole = stream.first_hole(pos, pos + 4)
        if hole is not None or pos + 4 > end:
            if hole is None:
                yield Piece("damaged", pos, data[pos:end], reason=(
                    f"the capture ends inside this frame's size prefix ({end - pos} of 4 bytes)"))
                return
            yield from junk(pos, hole[0], "bytes just before a capture gap (a frame the gap cut)")
            q = resync(hole[1])
            if q < 0:
                yield from junk(hole[1], end, "after a capture gap no frame boundary was found "
                                              f"within {RESYNC_WINDOW_BYTES} bytes; rest of stream")
                return
            yield from junk(hole[1], q, "bytes after a capture gap, before the next recognisable frame")
            pos = q
            continue
        size = _I32.unpack_from(data, pos)[0]
        fend = pos + 4 + size
        impossible = (not min_size <= size <= MAX_FRAME_BYTES) or (stream.closed and fend > end)
        if impossible:
            q = resync(pos + 1)
            why = (f"impossible frame size {size} at stream offset {pos}"
                   + (" (more than the connection carried)" if min_size <= size <= MAX_FRAME_BYTES else ""))
            if q < 0:
                yield from junk(pos, end, why + f"; no frame boundary within {RESYNC_WINDOW_BYTES} "
                                              "bytes after it; rest of stream")
                return
            yield from junk(pos, q, why + ("; skipped to the next recognisable frame" if q < end else
                                           "; no recognisable frame after it"))
            pos = q
            continue
        lost = stream.lost_in(pos + 4, min(fend, end)) + max(0, fend - end)
        if lost:
            parts = []
            inside = stream.lost_in(pos + 4, min(fend, end))
            if inside:
                parts.append(f"the capture lost {inside} of its bytes")
            if fend > end:
                parts.append(f"the capture ends after {end - pos - 4} of its {size} bytes")
            reason = f"frame of {size} bytes at stream offset {pos}: " + "; ".join(parts)
            has_head = pos + 12 <= end and stream.first_hole(pos + 4, pos + 12) is None
            head = data[pos + 4:pos + 12] if has_head else None
            for a, b in stream.runs(pos, min(fend, end)):
                yield Piece("damaged", a, data[a:b], size=size, reason=reason, header=head)
                head = None  # attach the header once
            pos = fend
            continue
        yield Piece("frame", pos, view[pos + 4:fend], size=size)  # a view: frames are not copied
        pos = fend


# --- decoding a connection --------------------------------------------------------------------

def _describe_error(exc: Exception) -> str:
    pos = getattr(exc, "position", None)
    text = str(exc) or type(exc).__name__
    if pos is None or "position" in text:
        return text
    return f"{text} (decoder position {pos})"


def _is_kafka_port(ep: Endpoint, ports: Container[int]) -> bool:
    return ep[1] in ports


def _pick_broker(conn: Connection, streams: dict[Endpoint, Stream], ports: Container[int], auto: bool) -> tuple[Endpoint | None, str]:
    a_in, b_in = _is_kafka_port(conn.a, ports), _is_kafka_port(conn.b, ports)
    if a_in and b_in:
        if conn.syn_from is not None:
            return conn.other(conn.syn_from), "port"
        return conn.b, "port"
    if a_in or b_in:
        return (conn.a if a_in else conn.b), "port"
    if not auto:
        return None, ""
    for client in (conn.syn_from, conn.a, conn.b):
        if client is None:
            continue
        s = streams.get(client)
        if s is not None and s.end and not s.mid_start and request_start(s, 0) != NO:
            return conn.other(client), "auto"
    # A connection already open when the capture started: Kafka when one direction holds two
    # consecutive frames that decode strictly as requests within its first bytes.  (Headers
    # alone are not enough: a response with a small correlation id reads as a Produce header.)
    for client in (conn.a, conn.b):
        s = streams.get(client)
        if s is not None and s.mid_start and s.end and _two_requests_within(s, MID_START_SCAN_BYTES):
            return conn.other(client), "auto"
    return None, ""


def _two_requests_within(s: Stream, limit: int) -> bool:
    def decodes(q: int) -> int | None:
        """The offset after the request frame at ``q`` when it decodes, else None."""
        if q + 4 > s.end:
            return None
        end: int = q + 4 + _I32.unpack_from(s.data, q)[0]
        if end > s.end or s.first_hole(q, end) is not None:
            return None
        try:
            P.decode_request(s.data[q + 4:end], size_prefix=False)
        except KwireError:
            return None
        return end

    for q in range(min(s.end, limit)):
        if s.first_hole(q, q + 16) is None and request_start(s, q) == STRONG:
            nxt = decodes(q)
            if nxt is not None and decodes(nxt) is not None:
                return True
    return False


def decode_request_item(payload: bytes | memoryview, size: int, **where: Any) -> tuple[Item, bool]:
    """One whole request frame (``payload``: after its size prefix) as an Item, and whether a
    response will follow (not for Produce with acks=0).  ``where``: ts, packet, offset, client,
    broker, connection.  A frame that does not decode becomes an ``undecoded`` item with its
    partial decode; its header still pairs its response."""
    frame_bytes = 4 + len(payload)  # the frame itself (prefix + payload) is built only when shown as hex
    key = version = corr = None
    if len(payload) >= 8:
        key, version, corr = P.peek_request_header(payload)
    try:
        rf = P.decode_request(payload, size_prefix=False)
    except KwireError as exc:
        payload = bytes(payload)
        part = partial_request(payload)
        it = Item("undecoded", to_broker=True, data=_I32.pack(size) + payload, size_bytes=frame_bytes,
                  api=api_name(key), api_key=key,
                  version=version, correlation_id=corr, client_id=part.header.get("client_id"), problem=True,
                  reason=f"request cannot be decoded: {part.reason or _describe_error(exc)}", partial=part, **where)
        return it, corr is not None
    it = Item("request", to_broker=True, api=rf.api.name, api_key=rf.api.key, version=rf.version,
              correlation_id=rf.correlation_id, client_id=rf.client_id, size_bytes=frame_bytes, body=rf.body,
              **where)
    return it, not (rf.api.key == 0 and rf.body.get("acks") == 0)  # acks=0: the broker sends nothing


def decode_response_item(payload: bytes | memoryview, size: int, req: Item | None, **where: Any) -> Item:
    """One whole response frame as an Item, decoded as the answer to ``req`` (the request item
    with its correlation id, or None when the capture has none) and paired with it."""
    corr = P.peek_correlation_id(payload)
    common = dict(size_bytes=4 + len(payload), correlation_id=corr, **where)
    if req is not None and req.ts is not None and where.get("ts") is not None:
        common["rtt_ms"] = round((where["ts"] - req.ts) * 1000.0, 3)
    if req is None:
        return Item("undecoded", to_broker=False, data=_I32.pack(size) + bytes(payload), problem=True, reason=(
            f"response with correlation id {corr}: no request with that id on this connection "
            "in the capture, so its api and version are unknown"), **common)
    key, version = req.api_key, req.version  # (a paired request's header was read: both are set)
    if key is None or version is None or (a := P.APIS.get(key)) is None:
        it = Item("undecoded", to_broker=False, data=_I32.pack(size) + payload, problem=True, api=api_name(key),
                  api_key=key, version=version,
                  reason=f"response to {api_name(key)} (api key {key}), which kwire's "
                         "protocol tables do not declare", **common)
    else:
        try:
            rf = P.decode_response(a, version, payload, size_prefix=False)
        except KwireError as exc:
            payload = bytes(payload)
            part = partial_response(a, version, payload) if a.decodes(version) \
                else None
            it = Item("undecoded", to_broker=False, data=_I32.pack(size) + payload, problem=True, api=a.name, api_key=a.key,
                      version=version, partial=part,
                      reason=f"{a.name} v{version} response cannot be decoded: "
                             f"{part.reason if part is not None and part.reason else _describe_error(exc)}",
                      **common)
        else:
            it = Item("response", to_broker=False, api=a.name, api_key=a.key, version=rf.version, body=rf.body,
                      **common)
    it.request, req.response = req, it
    return it


def _tls_summaries(up: Stream, down: Stream) -> list[tuple[Stream, bool, TlsSummary]]:
    """(direction's stream, to_broker, TlsSummary) of the directions that carry TLS."""
    out: list[tuple[Stream, bool, TlsSummary]] = []
    for stream, to_broker in ((up, True), (down, False)):
        start = find_tls(stream.data, mid_start=stream.mid_start)
        if start is not None:
            out.append((stream, to_broker, summarise_tls(stream.data, start)))
    return out


def _plaintext_stream(chunks: list[tuple[int, float, bytes]] | None) -> Stream:
    """A direction's decrypted bytes (from tshark: (packet, ts, data) in order) as a Stream."""
    data = bytearray()
    times: list[tuple[int, float, int]] = []
    for packet, ts, chunk in chunks or ():
        times.append((len(data), ts, packet))
        data += chunk
    return Stream(bytes(data), [], times, mid_start=False, closed=False)


def _decode_connection(conn: Connection, index: int, broker: Endpoint, streams: dict[Endpoint, Stream],
                       plaintext: Decrypted | None = None) -> list[Item]:
    """``plaintext``: tshark's decryption of the capture's TLS connections (--tls-keylog)."""
    client = conn.other(broker)
    ctext, btext = endpoint_text(client), endpoint_text(broker)
    empty = Stream(b"", [], [], mid_start=False, closed=False)
    up, down = streams.get(client, empty), streams.get(broker, empty)
    items: list[Item] = []

    def item(kind: str, to_broker: bool, **kw: Any) -> Item:
        it = Item(kind, client=ctext, broker=btext, to_broker=to_broker, connection=index, **kw)
        items.append(it)
        return it

    tls = _tls_summaries(up, down)
    if tls:
        arrow = {True: "client->broker", False: "broker->client"}
        clear = {to_broker: (plaintext or {}).get((client, broker) if to_broker else (broker, client))
                 for to_broker in (True, False)}
        decrypted = any(clear.values())
        for stream, to_broker, summary in tls:
            why = ("decrypted with the key log (by tshark); the Kafka frames follow" if decrypted
                   else NO_KEYS if plaintext is not None else CANNOT_DECRYPT)
            item("tls", to_broker, ts=stream.time_at(summary.start), packet=stream.packet_at(summary.start),
                 offset=summary.start, size_bytes=summary.bytes, problem=not decrypted,
                 reason=f"TLS ({arrow[to_broker]}): {summary.describe()}; {why}")
        if not decrypted:
            return items
        up, down = _plaintext_stream(clear[True]), _plaintext_stream(clear[False])

    arrow = {True: "client->broker", False: "broker->client"}
    for stream, to_broker in ((up, True), (down, False)):
        if stream.mid_start and stream.end:
            item("note", to_broker, ts=stream.time_at(0), packet=stream.packet_at(0), problem=False, reason=(
                f"capture starts mid-connection ({arrow[to_broker]}: no SYN seen)"))
        for hs, he in stream.holes:
            short = [f"packet {i} was captured {n} bytes short (snap length)"
                     for i, n, at in stream.lost_segments if hs <= at < he]
            item("gap", to_broker, ts=stream.time_at(he) if he < stream.end else stream.time_at(hs),
                 packet=stream.packet_at(hs), offset=hs, size_bytes=he - hs, problem=True,
                 reason=f"capture lost {he - hs} bytes at stream offset {hs} ({arrow[to_broker]})"
                        + (f"; {'; '.join(short[:3])}" if short else ""))

    def damaged_partial(piece: Piece, decode: Callable[[bytes], Partial]) -> Partial | None:
        """A cut frame: decode its first run of captured bytes as far as they go."""
        if piece.header is None or piece.size is None:  # (a header is kept only with the size)
            return None
        result = decode(bytes(piece.data[4:]))
        result.note = (f"the capture has {len(piece.data)} of the frame's {piece.size + 4} bytes "
                       "before its first gap")
        return result

    # Requests first: their headers tell us how to decode the responses.
    pending: dict[int, deque[Item]] = {}  # correlation id -> requests waiting for their response
    for piece in split_frames(up, request_start, min_size=MIN_REQUEST_BYTES):
        last_byte = piece.end - 1
        ts, packet = up.time_at(last_byte), up.packet_at(last_byte)
        if piece.kind == "junk":
            item("undecoded", True, ts=up.time_at(piece.offset), packet=up.packet_at(piece.offset),
                 offset=piece.offset, data=piece.data, size_bytes=len(piece.data), reason=piece.reason,
                 problem=True)
            continue
        if piece.kind == "damaged":
            it = item("undecoded", True, ts=ts, packet=packet, offset=piece.offset, data=piece.data,
                      size_bytes=len(piece.data), reason=piece.reason, problem=True,
                      partial=damaged_partial(piece, partial_request))
            if piece.header is not None:  # still pair its response
                key, version, corr = struct.unpack(">hhi", piece.header)
                it.api_key, it.version, it.correlation_id = key, version, corr
                it.api = api_name(key)
                if it.partial is not None:
                    it.client_id = it.partial.header.get("client_id")
                pending.setdefault(corr, deque()).append(it)
            continue
        it, expect = decode_request_item(piece.data, len(piece.data), ts=ts, packet=packet, offset=piece.offset,
                                         client=ctext, broker=btext, connection=index)
        items.append(it)
        if expect and it.correlation_id is not None:
            pending.setdefault(it.correlation_id, deque()).append(it)

    def unanswered() -> set[int]:
        return {c for c, q in pending.items() if q}

    def pair(resp: Item, req: Item) -> None:
        resp.request, req.response = req, resp

    for piece in split_frames(down, response_start(unanswered), min_size=MIN_RESPONSE_BYTES):
        last_byte = piece.end - 1
        ts, packet = down.time_at(last_byte), down.packet_at(last_byte)
        if piece.kind != "frame":
            junk = piece.kind == "junk"
            it = item("undecoded", False, ts=down.time_at(piece.offset) if junk else ts,
                      packet=down.packet_at(piece.offset) if junk else packet,
                      offset=piece.offset, data=piece.data, size_bytes=len(piece.data),
                      reason=piece.reason, problem=True)
            if piece.kind == "damaged" and piece.header is not None:
                corr = _I32.unpack_from(piece.header, 0)[0]
                q = pending.get(corr)
                if q:
                    req = q.popleft()
                    key, version = req.api_key, req.version
                    it.correlation_id, it.api_key, it.version, it.api = corr, key, version, req.api
                    pair(it, req)
                    if key is not None and version is not None and P.APIS.get(key) is not None:
                        it.partial = damaged_partial(
                            piece, functools.partial(partial_response, key, version))
            continue
        corr = P.peek_correlation_id(piece.data)
        q = pending.get(corr)
        items.append(decode_response_item(piece.data, len(piece.data), q.popleft() if q else None, ts=ts, packet=packet,
                                          offset=piece.offset, client=ctext, broker=btext, connection=index))

    left = sorted((p.correlation_id, p.api or "?") for qq in pending.values() for p in qq)
    if left:
        last_ts = max((i.ts for i in items if i.ts is not None), default=None)
        shown = ", ".join(f"{api or '?'} #{c}" for c, api in left[:8]) + (" ..." if len(left) > 8 else "")
        item("note", True, ts=last_ts, problem=False, reason=(
            f"{len(left)} request(s) without a response in the capture: {shown}"))
    return items


def decode_capture(path: str | os.PathLike[str], *, ports: Iterable[int] = (DEFAULT_PORT,), auto_detect: bool = True,
                   tls_keylog: str | os.PathLike[str] | None = None) -> CaptureResult:
    """Decode every Kafka frame in a capture.

    A connection is Kafka when one end uses one of ``ports`` (that end is the broker), or,
    with ``auto_detect``, when one direction starts with a plausible request header.  TLS
    connections on ``ports`` are decrypted with ``tls_keylog`` (an SSLKEYLOGFILE) through
    tshark (:func:`kwire.debug.tls.decrypt_with_tshark`; a CaptureError when that fails).
    """
    ports = set(int(p) for p in ports)
    plaintext = None
    if tls_keylog is not None:
        try:
            plaintext = decrypt_with_tshark(path, tls_keylog, sorted(ports))
        except TlsKeylogError as exc:
            raise CaptureError(str(exc)) from None
    conns, stats, notes = read_segments(path)
    items: list[Item] = list(notes)
    stats.update(tcp_connections=len(conns), kafka_connections=0, auto_detected=0, requests=0,
                 responses=0, undecoded=0, gaps=0, undecoded_bytes=0, tls_connections=0, ports=sorted(ports),
                 auto_detect=auto_detect)
    others: dict[int, int] = {}  # port -> connections with data
    found: list[KafkaConnection] = []
    index = 0
    for conn in conns:
        streams = {ep: reassemble(segs, conn.isn.get(ep), closed=ep in conn.closed)
                   for ep, segs in conn.segments.items()}
        broker, how = _pick_broker(conn, streams, ports, auto_detect)
        if broker is None:
            if conn.has_data:  # for the hint: the server's port (the end the SYN went to)
                port = conn.other(conn.syn_from)[1] if conn.syn_from else min(conn.a[1], conn.b[1])
                others[port] = others.get(port, 0) + 1
            continue
        index += 1
        stats["kafka_connections"] += 1
        stats["auto_detected"] += how == "auto"
        found.append(KafkaConnection(index, endpoint_text(conn.other(broker)), endpoint_text(broker), how,
                                     conn.syn_from is not None))
        items.extend(_decode_connection(conn, index, broker, streams, plaintext))
    if not stats["kafka_connections"]:
        seen = ", ".join(f"{n} on port {p}" for p, n in sorted(others.items())[:10]) or "none with data"
        items.append(Item("note", problem=True, reason=(
            f"no Kafka connections found (ports {sorted(ports)}"
            f"{', auto-detect on' if auto_detect else ''}); TCP connections with data: {seen}"
            + ("; name the broker's port with --port" if others else ""))))
    for i in items:
        if i.kind == "request":
            stats["requests"] += 1
        elif i.kind == "response":
            stats["responses"] += 1
        elif i.kind == "undecoded":
            stats["undecoded"] += 1
            stats["undecoded_bytes"] += len(i.data or b"")
        elif i.kind == "gap":
            stats["gaps"] += 1
    stats["tls_connections"] = len({i.connection for i in items if i.kind == "tls" and i.problem})
    stats["tls_decrypted"] = len({i.connection for i in items if i.kind == "tls" and not i.problem})
    # Stable: equal times keep the per-connection order (notes, gaps, requests, responses).
    items.sort(key=lambda i: i.ts if i.ts is not None else float("inf"))
    return CaptureResult(items, stats, found)

