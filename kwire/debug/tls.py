"""Recognising TLS on a Kafka connection (SSL and SASL_SSL listeners), so it is reported as TLS
and not as Kafka frames of impossible sizes.

A TLS record (RFC 8446 section 5.1, the same framing since SSL 3.0)::

    content_type:uint8 (20 change_cipher_spec, 21 alert, 22 handshake, 23 application_data,
                        24 heartbeat)
    legacy_version:uint16 (0x0300-0x0304)  length:uint16 (at most 2^14 + 2048)  fragment

A handshake record's fragment starts ``msg_type:uint8 length:uint24``; a ClientHello (1) carries
the server name (SNI, extension 0) and a ServerHello (2) the negotiated version (extension 43,
supported_versions, for TLS 1.3).

Decrypting needs the session secrets, which a key log (SSLKEYLOGFILE format: what librdkafka's
``ssl.keylog.file``, Java's and Python's ``SSLContext.keylog_filename`` write) holds.  No
well-kept Python library turns captured TLS plus a key log into plaintext (``cryptography`` has
the primitives, not the TLS 1.2 PRF / TLS 1.3 key schedule and record layer for every cipher
suite), so :func:`decrypt_with_tshark` asks Wireshark's ``tshark`` (the well-kept TLS
implementation that does this) for each connection's decrypted application data, packet by
packet, and kwire decodes the Kafka frames in it.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = ["TlsSummary", "decrypt_with_tshark", "find_tls", "summarise_tls", "CANNOT_DECRYPT", "NO_KEYS"]

CONTENT_TYPES = {20: "change_cipher_spec", 21: "alert", 22: "handshake", 23: "application_data",
                 24: "heartbeat"}
VERSIONS = {0x0300: "SSL 3.0", 0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2", 0x0304: "TLS 1.3"}
MAX_RECORD = (1 << 14) + 2048
SCAN_BYTES = 64 * 1024  # how far into a stream that started mid-connection to look for records

CANNOT_DECRYPT = ("encrypted: give the session keys with --tls-keylog FILE (SSLKEYLOGFILE format; "
                  "decrypted through tshark), or capture a plaintext listener")
NO_KEYS = ("encrypted, and the key log has no secrets for this connection (or tshark could not "
           "use them)")

_REC = struct.Struct(">BHH")


def _record_at(data: bytes, pos: int) -> int | None:
    """The length of the TLS record whose header is at ``pos``, or None."""
    if pos + 5 > len(data):
        return None
    ctype, version, length = _REC.unpack_from(data, pos)
    length = int(length)
    if ctype not in CONTENT_TYPES or not 0x0300 <= version <= 0x0304 or not 0 < length <= MAX_RECORD:
        return None
    return length


def _chain(data: bytes, pos: int, want: int) -> tuple[int, bool]:
    """How many well-formed records follow each other from ``pos`` (up to ``want``), and
    whether they end exactly where the data does."""
    n = 0
    while n < want:
        length = _record_at(data, pos)
        if length is None:
            break
        pos += 5 + length
        n += 1
        if pos >= len(data):
            break
    return n, pos == len(data)


def find_tls(data: bytes, *, mid_start: bool) -> int | None:
    """Where TLS records start in one direction of a connection, or None when it is not TLS.

    From the start: a handshake record (a ClientHello or ServerHello), two chained records, or
    records that are all the direction carried (a server's lone alert to a client that hung up
    in the handshake).  Mid-connection: the first offset within SCAN_BYTES from which three
    records chain."""
    if not data:
        return None
    length = _record_at(data, 0)
    if length is not None:
        hello = data[0] == 22 and len(data) > 5 and data[5] in (1, 2)
        n, exact = _chain(data, 0, 2)
        if hello or n == 2 or exact:
            return 0
    if not mid_start:
        return None
    for pos in range(1, min(len(data), SCAN_BYTES)):
        if _record_at(data, pos) is not None and _chain(data, pos, 3)[0] == 3:
            return pos
    return None


@dataclass
class TlsSummary:
    start: int
    records: dict[str, int] = field(default_factory=dict)  # content type name -> count
    bytes: int = 0
    version: str | None = None
    server_name: str | None = None
    hello: str | None = None  # "ClientHello" / "ServerHello"
    cut: int = 0  # bytes of a last record the data does not complete

    def describe(self) -> str:
        parts = [f"{sum(self.records.values())} TLS records ({', '.join(f'{n} {k}' for k, n in self.records.items())})",
                 f"{self.bytes} bytes"]
        if self.hello:
            parts.append(self.hello)
        if self.version:
            parts.append(self.version)
        if self.server_name:
            parts.append(f"server name {self.server_name!r}")
        if self.cut:
            parts.append(f"last record cut ({self.cut} bytes missing)")
        return ", ".join(parts)


def _extensions(body: bytes, pos: int) -> Iterator[tuple[int, bytes]]:
    """(type, data) of a hello's extensions starting at ``pos`` (the extensions length)."""
    if pos + 2 > len(body):
        return
    end = min(len(body), pos + 2 + struct.unpack_from(">H", body, pos)[0])
    pos += 2
    while pos + 4 <= end:
        etype, elen = struct.unpack_from(">HH", body, pos)
        yield etype, body[pos + 4:pos + 4 + elen]
        pos += 4 + elen


def _hello(fragment: bytes, summary: TlsSummary) -> None:
    """SNI from a ClientHello; the version from a ServerHello."""
    try:
        msg = fragment[0]
        body = fragment[4:]
        version = struct.unpack_from(">H", body, 0)[0]
        pos = 2 + 32
        pos += 1 + body[pos]  # session id
        if msg == 1:
            summary.hello = "ClientHello"
            pos += 2 + struct.unpack_from(">H", body, pos)[0]  # cipher suites
            pos += 1 + body[pos]  # compression methods
            for etype, data in _extensions(body, pos):
                if etype == 0 and len(data) > 5 and data[2] == 0:
                    n = struct.unpack_from(">H", data, 3)[0]
                    summary.server_name = data[5:5 + n].decode("ascii", "replace")
        elif msg == 2:
            summary.hello = "ServerHello"
            summary.version = VERSIONS.get(version, hex(version))
            pos += 2 + 1  # cipher suite, compression method
            for etype, data in _extensions(body, pos):
                if etype == 43 and len(data) == 2:
                    v = struct.unpack_from(">H", data, 0)[0]
                    summary.version = VERSIONS.get(v, hex(v))
    except (IndexError, struct.error):
        pass


def summarise_tls(data: bytes, start: int) -> TlsSummary:
    """Count the records of one direction from ``start``; read its hello if it has one."""
    s = TlsSummary(start)
    pos = start
    while pos < len(data):
        length = _record_at(data, pos)
        if length is None:
            break
        name = CONTENT_TYPES[data[pos]]
        s.records[name] = s.records.get(name, 0) + 1
        if name == "handshake" and s.hello is None and pos + 9 <= len(data) and data[pos + 5] in (1, 2):
            _hello(data[pos + 5:pos + 5 + length], s)
        end = pos + 5 + length
        if end > len(data):
            s.cut = end - len(data)
        pos = end
    s.bytes = min(pos, len(data)) - start
    return s


# (source endpoint, destination endpoint) -> [(packet number, timestamp, decrypted bytes), ...]
Decrypted = dict[tuple[tuple[str, int], tuple[str, int]], list[tuple[int, float, bytes]]]


class TlsKeylogError(Exception):
    """tshark is missing or failed: the message says which and why."""


def decrypt_with_tshark(capture: str | os.PathLike[str], keylog: str | os.PathLike[str],
                        ports: Iterable[int]) -> Decrypted:
    """The decrypted application data of every TLS connection on ``ports`` in ``capture``:
    ``{(source endpoint, destination endpoint): [(packet, ts, bytes), ...]}`` in capture order,
    endpoints as ``(ip text, port)``."""
    tshark = shutil.which("tshark")
    if tshark is None:
        raise TlsKeylogError("--tls-keylog needs tshark (Wireshark's command line, apt-get install tshark) "
                             "to decrypt; it is not on PATH")
    if not os.access(keylog, os.R_OK):
        raise TlsKeylogError(f"{os.fspath(keylog)}: cannot read the key log")
    cmd = [tshark, "-n", "-r", os.fspath(capture), "-o", f"tls.keylog_file:{os.fspath(keylog)}",
           "--disable-protocol", "kafka"]
    for p in ports:
        cmd += ["-d", f"tcp.port=={int(p)},tls"]
    cmd += ["-Y", "tls && data", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
            "-e", "frame.number", "-e", "frame.time_epoch", "-e", "ip.src", "-e", "ipv6.src", "-e", "tcp.srcport",
            "-e", "ip.dst", "-e", "ipv6.dst", "-e", "tcp.dstport", "-e", "data.data"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise TlsKeylogError(f"tshark could not decrypt: {proc.stderr.strip()[-500:]}")
    out: Decrypted = {}
    for line in proc.stdout.splitlines():
        f = line.split("\t")
        if len(f) < 9 or not f[8]:
            continue
        src = (f[2] or f[3], int(f[4]))
        dst = (f[5] or f[6], int(f[7]))
        data = b"".join(bytes.fromhex(h) for h in f[8].split(","))
        out.setdefault((src, dst), []).append((int(f[0]), float(f[1]), data))
    return out
