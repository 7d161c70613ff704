"""Streaming decode: frames printed as they are paired, from a live interface or a pipe.

``kwire decode -i IFACE`` runs ``tcpdump -i IFACE -U -w -`` (tcpdump writes each packet as it
reads it) and ``kwire decode -`` reads any pcap/pcapng stream on stdin; both go through
:class:`LiveDecoder`, which takes one packet at a time::

    packet -> TCP segment -> its connection's direction: bytes appended in sequence order
           (segments that arrive early wait; a hole still open after HOLE_LIMIT_BYTES of later
           data is given up as a gap and the stream resynchronises on the next frame)
           -> whole size-prefixed frames -> requests decoded from their own header, responses
           paired with them by correlation id -> items, handed out at once

It is the batch decoder's simpler sibling (:mod:`kwire.debug.capture` reads a whole file
first, so it can look ahead, reorder freely and report every byte); it shares its framing
checks (``request_start``) and frame decoding (``decode_request_item``/``decode_response_item``).
A connection is Kafka when one end is on one of the ports, or (auto-detection, for connections
whose SYN the stream has) when the opener's first bytes are a request header kwire knows.
"""
from __future__ import annotations

import socket
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..protocol import api as P
from . import capture as C
from .names import api_name
from .partial import partial_request, partial_response

__all__ = ["LiveDecoder", "packets"]

# A hole is declared lost when this much later data waits behind it, or when it is this old
# (capture time): a retransmission fills a hole within milliseconds; a dropped packet never does.
HOLE_LIMIT_BYTES = 256 * 1024
HOLE_WAIT_S = 1.0
_I32 = struct.Struct(">i")


@dataclass
class _Direction:
    next_seq: int | None = None  # the sequence number of the next byte expected
    buf: bytearray = field(default_factory=bytearray)
    early: dict[int, tuple[bytes, float, int]] = field(default_factory=dict)  # seq -> (payload, ts, packet) that arrived ahead
    hole_since: float | None = None  # capture time the oldest early segment arrived
    synced: bool = True  # False until a frame boundary is found (mid-connection start, gap)
    ts: float | None = None  # the time and packet of the last byte appended
    packet: int | None = None


@dataclass
class _Conn:
    index: int | None  # set when it is known to be Kafka
    client: C.Endpoint
    broker: C.Endpoint
    up: _Direction = field(default_factory=_Direction)
    down: _Direction = field(default_factory=_Direction)
    pending: dict[int, deque[C.Item]] = field(default_factory=dict)  # correlation id -> request items
    undecided: bool = False  # auto-detection still waiting for the client's first bytes


def packets(fileobj: IO[bytes]) -> Iterator[tuple[float, bytes, int]]:
    """(ts, link-layer bytes, link type) of each packet of a pcap/pcapng stream, as it arrives."""
    if C.dpkt is None:
        raise C.CaptureError("reading captures needs dpkt: pip install 'kwire[debug]' (or pip install dpkt)")
    dpkt = C.dpkt
    try:
        head = fileobj.peek(4)[:4] if hasattr(fileobj, "peek") else None
        if head is not None:  # a pipe cannot seek back: choose the reader by the magic number
            reader = (dpkt.pcapng.Reader if head == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader)(fileobj)
        else:
            reader = dpkt.pcap.UniversalReader(fileobj)
    except (ValueError, dpkt.Error, struct.error) as exc:
        raise C.CaptureError(f"not a pcap or pcapng stream ({exc})") from None
    linktype = reader.datalink()
    for ts, buf in reader:
        yield float(ts), buf, linktype


class LiveDecoder:
    """Feed packets with :meth:`feed`; each call returns the items it completed."""

    def __init__(self, ports: Iterable[int | str] = (C.DEFAULT_PORT,), *, auto_detect: bool = True):
        self.ports = set(int(p) for p in ports)
        self.auto_detect = auto_detect
        self.conns: dict[tuple[C.Endpoint, C.Endpoint], _Conn] = {}
        self.count = 0
        self.stats = {"packets": 0, "requests": 0, "responses": 0, "undecoded": 0, "gaps": 0,
                      "kafka_connections": 0, "auto_detected": 0, "undecoded_bytes": 0, "tls_connections": 0}
        self._link: dict[int, Callable[[bytes], object] | None] = {}

    # --- packets -----------------------------------------------------------------------------
    def feed(self, ts: float, buf: bytes, linktype: int) -> list[C.Item]:
        dpkt = C.dpkt
        self.stats["packets"] += 1
        index = self.stats["packets"]
        decode = self._link.get(linktype)
        if decode is None:
            decode = self._link[linktype] = C._link_decoder(linktype)
            if decode is None:
                raise C.CaptureError(f"link type {linktype} is not supported")
        try:
            ip = C._find_ip(decode(buf))
        except (dpkt.Error, struct.error, ValueError, IndexError):
            return []
        if ip is None or ip.p != 6 or not isinstance(ip.data, dpkt.tcp.TCP):
            return []
        tcp = ip.data
        fam = socket.AF_INET if isinstance(ip, dpkt.ip.IP) else socket.AF_INET6
        src, dst = (socket.inet_ntop(fam, ip.src), tcp.sport), (socket.inet_ntop(fam, ip.dst), tcp.dport)
        key = (src, dst) if src <= dst else (dst, src)
        conn = self.conns.get(key)
        syn = bool(tcp.flags & 0x02)
        if conn is None or (syn and not tcp.flags & 0x10 and (conn.up.buf or conn.down.buf or conn.pending)):
            conn = self.conns[key] = self._new_conn(src, dst, syn and not tcp.flags & 0x10)
        to_broker = src == conn.client
        d = conn.up if to_broker else conn.down
        if syn:
            d.next_seq = (tcp.seq + 1) & 0xFFFFFFFF
        out: list[C.Item] = []
        payload = bytes(tcp.data)
        if payload:
            self._segment(conn, d, to_broker, tcp.seq, payload, float(ts), index, out)
        return out

    def _new_conn(self, src: C.Endpoint, dst: C.Endpoint, opening: bool) -> _Conn:
        if dst[1] in self.ports:
            client, broker = src, dst
        elif src[1] in self.ports:
            client, broker = dst, src
        elif self.auto_detect and opening:
            c = _Conn(None, src, dst)
            c.undecided = True  # the opener's first bytes decide
            return c
        else:
            return _Conn(None, src, dst)  # not Kafka: tracked so it is not looked at again
        self.stats["kafka_connections"] += 1
        return _Conn(self.stats["kafka_connections"], client, broker)

    def _segment(self, conn: _Conn, d: _Direction, to_broker: bool, seq: int, payload: bytes, ts: float,
                 index: int, out: list[C.Item]) -> None:
        if conn.index is None:
            if not conn.undecided or not to_broker:
                return
            probe = C.Stream(payload, [], [], mid_start=False, closed=False)
            if len(payload) >= 14 and C.request_start(probe, 0) != C.NO:
                self.stats["kafka_connections"] += 1
                self.stats["auto_detected"] += 1
                conn.index = self.stats["kafka_connections"]
            conn.undecided = False
            if conn.index is None:
                return
        if d.next_seq is None:  # no SYN seen: the capture started mid-connection
            d.next_seq = seq
            d.synced = False
            out.append(self._item(conn, "note", to_broker, ts=ts, packet=index, reason=(
                f"capture starts mid-connection ({'client->broker' if to_broker else 'broker->client'}: no SYN seen)")))
        rel = (seq - d.next_seq) & 0xFFFFFFFF
        if rel >= 1 << 31:  # old bytes (a retransmission): keep what is new
            behind = (1 << 32) - rel
            if behind >= len(payload):
                return
            payload, seq, rel = payload[behind:], d.next_seq, 0
        if rel > 0:
            d.early[seq] = (payload, ts, index)
            if d.hole_since is None:
                d.hole_since = ts
            waiting = sum(len(p) for p, _, _ in d.early.values())
            if waiting <= HOLE_LIMIT_BYTES and ts - d.hole_since <= HOLE_WAIT_S:
                return
            first, lost = self._first_early(d)
            out.append(self._item(conn, "gap", to_broker, ts=ts, packet=index, size_bytes=lost, problem=True,
                                  reason=f"capture lost {lost} bytes ({'client->broker' if to_broker else 'broker->client'})"))
            self.stats["gaps"] += 1
            self._junk(conn, d, to_broker, out, "bytes just before a capture gap (a frame the gap cut)")
            d.next_seq = first
            d.synced = False
        else:
            self._append(d, payload, ts, index)
        while d.early:  # segments that were waiting for these bytes
            nxt = d.early.pop(d.next_seq, None)
            if nxt is None:
                break
            self._append(d, *nxt)
        if not d.early:
            d.hole_since = None
        self._frames(conn, d, to_broker, out)
        if to_broker and conn.down.buf:
            self._frames(conn, conn.down, False, out)  # responses that waited for these requests

    @staticmethod
    def _append(d: _Direction, payload: bytes, ts: float, index: int) -> None:
        assert d.next_seq is not None  # set (from the SYN or the first segment) before bytes are appended
        d.buf += payload
        d.next_seq = (d.next_seq + len(payload)) & 0xFFFFFFFF
        d.ts, d.packet = ts, index

    @staticmethod
    def _first_early(d: _Direction) -> tuple[int, int]:
        """The sequence number of the first segment waiting behind the hole, and the hole's size."""
        expected = d.next_seq
        assert expected is not None  # segments wait only behind a known next byte
        first = min(d.early, key=lambda s: (s - expected) & 0xFFFFFFFF)
        return first, (first - expected) & 0xFFFFFFFF

    # --- frames ------------------------------------------------------------------------------
    def _plausible(self, conn: _Conn, to_broker: bool) -> C.Plausible:
        if to_broker:
            return C.request_start
        return C.response_start(lambda: {c for c, q in conn.pending.items() if q})

    def _junk(self, conn: _Conn, d: _Direction, to_broker: bool, out: list[C.Item], reason: str,
              upto: int | None = None) -> None:
        upto = len(d.buf) if upto is None else upto
        if upto:
            data = bytes(d.buf[:upto])
            del d.buf[:upto]
            self.stats["undecoded"] += 1
            self.stats["undecoded_bytes"] += len(data)
            out.append(self._item(conn, "undecoded", to_broker, ts=d.ts, packet=d.packet, data=data,
                                  size_bytes=len(data), reason=reason, problem=True))

    def _frames(self, conn: _Conn, d: _Direction, to_broker: bool, out: list[C.Item]) -> None:
        min_size = C.MIN_REQUEST_BYTES if to_broker else C.MIN_RESPONSE_BYTES
        while True:
            buf = d.buf
            if not d.synced:
                stream = C.Stream(bytes(buf), [], [], mid_start=True, closed=False)
                plausible = self._plausible(conn, to_broker)
                q = next((q for q in range(0, max(0, len(buf) - 7)) if plausible(stream, q) != C.NO), None)
                if q is None:
                    if len(buf) > C.RESYNC_WINDOW_BYTES:
                        self._junk(conn, d, to_broker, out, "no frame boundary found; bytes skipped",
                                   upto=len(buf) - 16)
                    return
                self._junk(conn, d, to_broker, out, "bytes before the first recognisable frame", upto=q)
                d.synced = True
                continue
            if len(buf) < 4:
                return
            size = _I32.unpack_from(buf, 0)[0]
            if not min_size <= size <= C.MAX_FRAME_BYTES:
                d.synced = False
                self._junk(conn, d, to_broker, out, f"impossible frame size {size}", upto=1)
                continue
            if len(buf) < 4 + size:
                return
            if not to_broker and size >= 4 and conn.up.early and not conn.pending.get(_I32.unpack_from(buf, 4)[0]):
                return  # its request may be behind a hole in the other direction: wait for it
            payload = bytes(buf[4:4 + size])
            del buf[:4 + size]
            out.append(self._decode(conn, d, to_broker, size, payload))

    def _item(self, conn: _Conn, kind: str, to_broker: bool, **kw: Any) -> C.Item:
        return C.Item(kind, client=C.endpoint_text(conn.client), broker=C.endpoint_text(conn.broker),
                      to_broker=to_broker, connection=conn.index, **kw)

    def _decode(self, conn: _Conn, d: _Direction, to_broker: bool, size: int, payload: bytes) -> C.Item:
        common: dict[str, Any] = dict(client=C.endpoint_text(conn.client), broker=C.endpoint_text(conn.broker),
                      connection=conn.index, ts=d.ts, packet=d.packet)
        if to_broker:
            it, expect = C.decode_request_item(payload, size, **common)
            if expect and it.correlation_id is not None:
                conn.pending.setdefault(it.correlation_id, deque()).append(it)
        else:
            corr = _I32.unpack_from(payload, 0)[0]
            q = conn.pending.get(corr)
            req = q.popleft() if q else None
            it = C.decode_response_item(payload, size, req, **common)
        self.stats[{"request": "requests", "response": "responses"}.get(it.kind, "undecoded")] += 1
        if it.kind == "undecoded":
            self.stats["undecoded_bytes"] += len(it.data or b"")
        return it

    def finish(self) -> list[C.Item]:
        """At the end of the capture: frames it cut, requests it left unanswered."""
        out: list[C.Item] = []
        for conn in self.conns.values():
            if conn.index is None:
                continue
            for d, to_broker in ((conn.up, True), (conn.down, False)):
                if d.early:  # bytes waiting behind a hole the capture never filled
                    first, lost = self._first_early(d)
                    out.append(self._item(conn, "gap", to_broker, ts=d.ts, packet=d.packet, size_bytes=lost,
                                          problem=True, reason=(
                                              f"capture lost {lost} bytes "
                                              f"({'client->broker' if to_broker else 'broker->client'})")))
                    self.stats["gaps"] += 1
                    self._junk(conn, d, to_broker, out, "bytes just before a capture gap (a frame the gap cut)")
                    d.next_seq, d.synced = first, False
                    while d.early:
                        nxt = d.early.pop(d.next_seq, None)
                        if nxt is None:
                            break
                        self._append(d, *nxt)
                    d.early.clear()
                self._frames(conn, d, to_broker, out)  # frames that waited for a hole to be given up
                if not d.buf:
                    continue
                buf = bytes(d.buf)
                size = _I32.unpack_from(buf, 0)[0] if len(buf) >= 4 else None
                it = self._item(conn, "undecoded", to_broker, ts=d.ts, packet=d.packet, data=buf,
                                size_bytes=len(buf), problem=True,
                                reason=(f"the capture ends after {len(buf) - 4} of this frame's {size} bytes"
                                        if size is not None and d.synced else
                                        "the capture ends inside these bytes"))
                if size is not None and d.synced and len(buf) >= 12:
                    if to_broker:
                        it.api_key, it.version, it.correlation_id = struct.unpack_from(">hhi", buf, 4)
                        it.api = api_name(it.api_key)
                        it.partial = partial_request(buf[4:])
                    else:
                        corr = _I32.unpack_from(buf, 4)[0]
                        q = conn.pending.get(corr)
                        if q:
                            req = q.popleft()
                            it.correlation_id, it.api, it.api_key, it.version = corr, req.api, req.api_key, req.version
                            it.request, req.response = req, it
                            if (req.api_key is not None and req.version is not None  # a request's header has both
                                    and P.APIS.get(req.api_key) is not None):
                                it.partial = partial_response(req.api_key, req.version, buf[4:])
                    if it.partial is not None:
                        it.partial.note = "the capture ends inside the frame"
                self.stats["undecoded"] += 1
                self.stats["undecoded_bytes"] += len(buf)
                out.append(it)
                d.buf.clear()
            left = sorted((i.correlation_id, i.api or "?") for q in conn.pending.values() for i in q)
            if left:
                shown = ", ".join(f"{api} #{c}" for c, api in left[:8]) + (" ..." if len(left) > 8 else "")
                out.append(self._item(conn, "note", True, ts=conn.up.ts, reason=(
                    f"{len(left)} request(s) without a response in the capture: {shown}")))
                conn.pending.clear()
        return out

    @property
    def problems(self) -> int:
        return self.stats["undecoded"] + self.stats["gaps"]
