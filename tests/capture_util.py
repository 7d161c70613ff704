"""Build small packet captures for the capture-decoder tests (with dpkt's packet classes and
file writers), and hand-build record batches so golden output does not depend on kwire.records.
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

import crc32c
import dpkt

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z

LINK_ETHERNET, LINK_NULL, LINK_RAW, LINK_SLL, LINK_SLL2 = 1, 0, 101, 113, 276


def record_batch(base_offset: int, records: list[tuple[bytes | None, bytes | None]], *,
                 timestamp_ms: int = 1_700_000_000_000) -> bytes:
    """One uncompressed magic-2 batch; every record gets ``timestamp_ms``."""

    def varint(n: int) -> bytes:
        n = (n << 1) ^ (n >> 63)
        out = bytearray()
        while True:
            b = n & 0x7F
            n >>= 7
            if n:
                out.append(b | 0x80)
            else:
                out.append(b)
                return bytes(out)

    def field_bytes(b):
        return varint(-1) if b is None else varint(len(b)) + b

    body = bytearray()
    for i, (k, v) in enumerate(records):
        rec = b"\x00" + varint(0) + varint(i) + field_bytes(k) + field_bytes(v) + varint(0)
        body += varint(len(rec)) + rec
    after_crc = struct.pack(">hiqqqhii", 0, len(records) - 1, timestamp_ms, timestamp_ms, -1, -1, -1,
                            len(records)) + bytes(body)
    crc = crc32c.crc32c(after_crc)
    batch_after_length = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", base_offset, len(batch_after_length)) + batch_after_length


@dataclass
class Packet:
    ts: float
    src: tuple
    dst: tuple
    seq: int
    ack: int
    flags: int
    payload: bytes
    snap: int | None = None  # keep only this many payload bytes in the file


@dataclass
class CaptureBuilder:
    """A TCP conversation between one client and one broker, as packets.

    ``send`` appends a segment (or several, ``mss`` bytes each) and advances the sender's
    sequence number; ``drop``/``reorder``/``duplicate`` edit the packet list afterwards.
    """

    client: tuple = ("127.0.0.1", 50000)
    broker: tuple = ("127.0.0.1", 9092)
    t0: float = T0
    mss: int = 1400
    packets: list = field(default_factory=list)
    now: float = 0.0
    seq: dict = field(default_factory=dict)

    def __post_init__(self):
        self.now = self.t0
        self.seq = {self.client: 1000, self.broker: 50000}

    def _pkt(self, src, dst, flags, payload=b"", dt=0.0001):
        self.now += dt
        self.packets.append(Packet(round(self.now, 6), src, dst, self.seq[src], self.seq[dst], flags, payload))
        return len(self.packets) - 1

    def handshake(self):
        c, b = self.client, self.broker
        self._pkt(c, b, dpkt.tcp.TH_SYN)
        self.seq[c] += 1
        self._pkt(b, c, dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK)
        self.seq[b] += 1
        self._pkt(c, b, dpkt.tcp.TH_ACK)
        return self

    def send(self, data: bytes, *, to_broker: bool = True, dt: float = 0.001) -> list[int]:
        src, dst = (self.client, self.broker) if to_broker else (self.broker, self.client)
        idx = []
        for i in range(0, len(data), self.mss):
            chunk = data[i:i + self.mss]
            idx.append(self._pkt(src, dst, dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH, chunk, dt if i == 0 else 0.00001))
            self.seq[src] += len(chunk)
        return idx

    def close(self):
        c, b = self.client, self.broker
        self._pkt(c, b, dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
        self.seq[c] += 1
        self._pkt(b, c, dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
        self.seq[b] += 1
        self._pkt(c, b, dpkt.tcp.TH_ACK)
        return self

    # --- encoding --------------------------------------------------------------------------

    @staticmethod
    def _ip(p: Packet):
        tcp = dpkt.tcp.TCP(sport=p.src[1], dport=p.dst[1], seq=p.seq, ack=p.ack, flags=p.flags,
                           win=65535, data=p.payload)
        if ":" in p.src[0]:
            ip = dpkt.ip6.IP6(src=socket.inet_pton(socket.AF_INET6, p.src[0]),
                              dst=socket.inet_pton(socket.AF_INET6, p.dst[0]), nxt=6, hlim=64, p=6, data=tcp)
            ip.plen = len(bytes(tcp))
            return ip, 0x86DD
        ip = dpkt.ip.IP(src=socket.inet_pton(socket.AF_INET, p.src[0]),
                        dst=socket.inet_pton(socket.AF_INET, p.dst[0]), p=6, ttl=64, data=tcp)
        ip.len = len(ip)
        return ip, 0x0800

    def frame(self, p: Packet, linktype: int) -> bytes:
        ip, ethtype = self._ip(p)
        if linktype == LINK_ETHERNET:
            buf = bytes(dpkt.ethernet.Ethernet(src=b"\x00" * 6, dst=b"\x00" * 6, type=ethtype, data=ip))
        elif linktype == LINK_SLL:
            buf = bytes(dpkt.sll.SLL(type=0, hrd=772, hlen=6, hdr=b"\x00" * 8, ethtype=ethtype, data=ip))
        elif linktype == LINK_SLL2:
            buf = bytes(dpkt.sll2.SLL2(ethtype=ethtype, intindex=1, hrd=772, type=0, hlen=6,
                                       hdr=b"\x00" * 8, data=ip))
        elif linktype == LINK_NULL:
            family = 2 if ethtype == 0x0800 else 30
            buf = struct.pack("=I", family) + bytes(ip)
        elif linktype == LINK_RAW:
            buf = bytes(ip)
        else:
            raise ValueError(linktype)
        if p.snap is not None:
            buf = buf[:len(buf) - len(p.payload) + p.snap]
        return buf

    def write(self, path, *, linktype: int = LINK_ETHERNET, pcapng: bool = False) -> str:
        with open(path, "wb") as f:
            if pcapng:
                w = dpkt.pcapng.Writer(f, snaplen=262144, linktype=linktype)
            else:
                w = dpkt.pcap.Writer(f, snaplen=262144, linktype=linktype)
            for p in self.packets:
                buf = self.frame(p, linktype)
                if pcapng:
                    w.writepkt(buf, ts=p.ts)
                else:
                    w.writepkt(buf, ts=p.ts)
        # dpkt's pcap writer stores the captured length as the original length; a packet cut
        # by ``snap`` is still told apart by its IP length, which is what the decoder reads.
        return str(path)


def pcap_records(path) -> list[tuple[int, int, float]]:
    """(file offset of the record header, captured length, timestamp) of each record of a
    classic microsecond pcap file (used to cut a file at a chosen place)."""
    data = open(path, "rb").read()
    endian = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    assert struct.unpack_from(endian + "I", data, 0)[0] == 0xA1B2C3D4, "not a microsecond pcap file"
    out, pos = [], 24
    while pos + 16 <= len(data):
        sec, usec, caplen = struct.unpack_from(endian + "III", data, pos)
        out.append((pos, caplen, sec + usec / 1e6))
        pos += 16 + caplen
    return out


def wait_until_written(port: int, path, timeout_s: float = 10.0) -> None:
    """Open and close a connection to ``port`` until the capture file at ``path`` grows: then
    the capture is live (at the start) or has written everything before the probe (at the end),
    since tcpdump -U writes each packet as it reads it, in order.  RuntimeError if it never does."""
    import time
    from pathlib import Path

    path = Path(path)
    size = max(path.stat().st_size if path.exists() else 0, 24)  # 24: the pcap file header
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        settle = time.monotonic() + 0.5
        while time.monotonic() < settle:
            if path.exists() and path.stat().st_size > size:
                return
            time.sleep(0.01)
    raise RuntimeError(f"tcpdump wrote no packet to {path} within {timeout_s}s")
