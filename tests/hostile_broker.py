"""A hostile broker: a frame-aware proxy in front of a real one (Apache Kafka, Tansu) that
answers like it, except for the frames it is told to spoil.

    with HostileProxy(broker.host, broker.port) as hostile:    # hostile.bootstrap: its address
        hostile.spoil("Fetch", "drip", times=1)                 # the next Fetch answer, dripped

It reads whole frames both ways.  Requests are passed on as they are, after noting each
one's api and version by correlation id; answers are passed on as they are, except:

* Metadata and FindCoordinator answers name the proxy instead of the broker (decoded, the
  host/port replaced, encoded again), so every connection the client opens goes through it;
* an answer to an api told to :meth:`spoil` is spoiled, ``times`` times:

  - ``drip``: sent a few bytes at a time with a pause between (a peer that trickles);
  - ``huge``: its size prefix says 2 GiB - 1, then a few real bytes, then nothing (a client
    that believes it would allocate 2 GiB);
  - ``truncate``: half of it, then the connection closed;
  - ``garbage``: the right size, random bytes;
  - ``corrupt``: one byte of the first record batch's records flipped (its CRC no longer
    matches), re-framed (Fetch only).

``spoiled`` counts what was done; ``client_closed`` counts connections the client closed while
an answer was being dripped to it.
"""
from __future__ import annotations

import random
import socket
import struct
import threading
import time
from typing import Any

from kwire.protocol import api as P

_I32 = struct.Struct(">i")
FAULTS = ("drip", "huge", "truncate", "garbage", "corrupt")


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    out = bytearray()
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except OSError:
            return None
        if not chunk:
            return None
        out += chunk
    return bytes(out)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    body = _recv_exact(sock, _I32.unpack(head)[0])
    return None if body is None else head + body


class HostileProxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, drip_bytes: int = 16, drip_delay_s: float = 0.25):
        self.upstream = (upstream_host, upstream_port)
        self.drip_bytes, self.drip_delay_s = drip_bytes, drip_delay_s
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(32)
        self.host, self.port = self._listener.getsockname()
        self._lock = threading.Lock()
        self._faults: dict[str, list[Any]] = {}  # api name -> [fault, times left]
        self._socks: list[socket.socket] = []
        self.spoiled: dict[str, int] = {}
        self.client_closed = 0
        self._closed = False
        threading.Thread(target=self._accept_loop, name="hostile-accept", daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def spoil(self, api_name: str, fault: str, times: int = 1) -> None:
        assert fault in FAULTS, fault
        with self._lock:
            self._faults[api_name] = [fault, times]

    def _take_fault(self, api_name: str) -> str | None:
        with self._lock:
            f = self._faults.get(api_name)
            if not f or f[1] <= 0:
                return None
            f[1] -= 1
            self.spoiled[f[0]] = self.spoiled.get(f[0], 0) + 1
            return f[0]

    # --- plumbing ------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
            pending: dict[int, tuple[str, int]] = {}
            gone = threading.Event()  # set when the client closed its side
            threading.Thread(target=self._requests, args=(client, upstream, pending, gone), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, pending, gone), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, pending: dict,
                  gone: threading.Event) -> None:
        while True:
            frame = _read_frame(client)
            if frame is None:
                gone.set()
                break
            key, version, corr = P.peek_request_header(memoryview(frame)[4:])
            pending[corr] = (P.api(key).name, version)
            try:
                upstream.sendall(frame)
            except OSError:
                break
        _shut(client, upstream)

    def _answers(self, upstream: socket.socket, client: socket.socket, pending: dict,
                 gone: threading.Event) -> None:
        try:
            while True:
                frame = _read_frame(upstream)
                if frame is None:
                    break
                corr = P.peek_correlation_id(memoryview(frame)[4:])
                name, version = pending.pop(corr, (None, None))
                if name in ("Metadata", "FindCoordinator"):
                    frame = self._name_the_proxy(name, version, corr, frame)
                fault = self._take_fault(name) if name else None
                if not self._send(client, frame, fault, name, version, corr, gone):
                    break
        finally:
            _shut(client, upstream)

    def _send(self, client: socket.socket, frame: bytes, fault: str | None, name, version, corr,
              gone: threading.Event) -> bool:
        try:
            if fault is None:
                client.sendall(frame)
            elif fault == "drip":
                for i in range(0, len(frame), self.drip_bytes):
                    if gone.wait(self.drip_delay_s):
                        self.client_closed += 1
                        return False
                    client.sendall(frame[i:i + self.drip_bytes])
            elif fault == "huge":
                client.sendall(_I32.pack(0x7FFFFFFF) + frame[4:64])
                time.sleep(30)  # then nothing: the client must give up on its own
                return False
            elif fault == "truncate":
                client.sendall(frame[: len(frame) // 2])
                return False
            elif fault == "garbage":
                client.sendall(frame[:8] + random.Random(corr).randbytes(len(frame) - 8))
            elif fault == "corrupt":
                client.sendall(_corrupt_records(name, version, corr, frame))
            return True
        except OSError:
            return False

    def _name_the_proxy(self, name: str, version: int, corr: int, frame: bytes) -> bytes:
        body = P.decode_response(name, version, frame[4:]).body
        if name == "Metadata":
            for b in body.get("brokers") or ():
                b["host"], b["port"] = self.host, self.port
        else:
            for c in body.get("coordinators") or [body]:
                if c.get("host"):
                    c["host"], c["port"] = self.host, self.port
        return P.encode_response(name, version, body, correlation_id=corr)

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            _close(s)

    def __enter__(self) -> HostileProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _corrupt_records(name: str, version: int, corr: int, frame: bytes) -> bytes:
    """The Fetch answer with the last byte of the first non-empty record set flipped."""
    assert name == "Fetch", "corrupt spoils Fetch answers"
    body = P.decode_response(name, version, frame[4:]).body
    for t in body.get("responses") or ():
        for p in t.get("partitions") or ():
            records = p.get("records")
            if records:
                data = bytearray(records)
                data[-1] ^= 0xFF
                p["records"] = bytes(data)
                return P.encode_response(name, version, body, correlation_id=corr)
    return frame


def _shut(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _close(s: socket.socket) -> None:
    try:
        s.close()
    except OSError:
        pass
