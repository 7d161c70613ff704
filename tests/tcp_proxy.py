"""A small TCP proxy on loopback for fault injection: threads and blocking sockets.

    with TcpProxy("127.0.0.1", broker_port) as proxy:
        client = NetworkClient({"bootstrap.servers": proxy.address})
        proxy.cut_next_response(after_bytes=10)   # forward 10 bytes of the next reply, then cut

Each accepted client gets its own upstream connection and two pump threads.  Faults:

* :meth:`cut_next_response` — forward only ``after_bytes`` of the next chunk coming from the
  broker, then close both sides (a connection lost mid-frame);
* :meth:`drop_all` — close every live connection now;
* ``blackhole = True`` — keep accepting and reading, forward nothing (a silent peer).
"""
from __future__ import annotations

import socket
import threading


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, listen_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((listen_host, 0))
        self._listener.listen(16)
        self.host, self.port = self._listener.getsockname()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._cut_after: int | None = None
        self.blackhole = False
        self.accepted = 0
        self.cuts = 0
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-proxy-accept", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # --- faults -------------------------------------------------------------------------------
    def cut_next_response(self, after_bytes: int) -> None:
        """Forward ``after_bytes`` of the next data from the broker, then cut the connection."""
        with self._lock:
            self._cut_after = after_bytes

    def drop_all(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            _close(a)
            _close(b)

    # --- plumbing -----------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.blackhole:
                threading.Thread(target=self._swallow, args=(client,), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _swallow(self, sock: socket.socket) -> None:
        try:
            while sock.recv(65536):
                pass
        except OSError:
            pass
        _close(sock)

    def _pump(self, src: socket.socket, dst: socket.socket, downstream: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if downstream:
                    with self._lock:
                        cut, self._cut_after = self._cut_after, None
                    if cut is not None:
                        dst.sendall(data[:cut])
                        self.cuts += 1
                        break
                dst.sendall(data)
        except OSError:
            pass
        _close(src)
        _close(dst)

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        self.drop_all()

    def __enter__(self) -> "TcpProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
