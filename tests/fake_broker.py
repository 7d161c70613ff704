"""A scripted one-connection-at-a-time broker for tests of the network layer's edge cases.

``handler(api_key, version, correlation_id, body) -> bytes | None`` returns the complete
response frame to send (use :func:`frame`), or None to stay silent.  The default handler
answers ApiVersions (listing Metadata and ApiVersions) and nothing else.
"""
from __future__ import annotations

import socket
import struct
import threading

from kwire.protocol import api as P

API_KEYS = [{"api_key": 18, "min_version": 0, "max_version": 4},
            {"api_key": 3, "min_version": 0, "max_version": 12}]


def frame(api, version: int, correlation_id: int, body: dict) -> bytes:
    return P.encode_response(api, version, body, correlation_id=correlation_id)


def api_versions_ok(version: int, correlation_id: int, api_keys=API_KEYS) -> bytes:
    return frame("ApiVersions", version, correlation_id,
                 {"error_code": 0, "api_keys": api_keys, "throttle_time_ms": 0})


class FakeBroker:
    def __init__(self, handler=None):
        self.handler = handler or (lambda key, v, cid, body: api_versions_ok(v, cid) if key == 18 else None)
        self.requests: list[tuple[int, int, int]] = []  # (api_key, version, correlation_id)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        self.port = self._listener.getsockname()[1]
        self.connections = 0
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            self._socks.append(sock)
            threading.Thread(target=self._conn, args=(sock,), daemon=True).start()

    def _conn(self, sock: socket.socket) -> None:
        try:
            while True:
                head = _recv_exact(sock, 4)
                if head is None:
                    return
                payload = _recv_exact(sock, struct.unpack(">i", head)[0])
                if payload is None:
                    return
                key, version, cid = P.peek_request_header(payload)
                self.requests.append((key, version, cid))
                try:
                    body = P.decode_request(payload, size_prefix=False).body
                except Exception:
                    body = None
                out = self.handler(key, version, cid, body)
                if out:
                    sock.sendall(out)
        except OSError:
            pass
        finally:
            sock.close()

    def close(self) -> None:
        self._listener.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)
