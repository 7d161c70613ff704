"""A small TCP proxy on loopback for fault injection: threads and blocking sockets.

    with TcpProxy("127.0.0.1", broker_port) as proxy:
        client = NetworkClient({"bootstrap.servers": proxy.address})
        proxy.cut_next_response(after_bytes=10)   # forward 10 bytes of the next reply, then cut

Each accepted client gets its own upstream connection and two pump threads.  Faults:

* :meth:`cut_next_response` — forward only ``after_bytes`` of the next chunk coming from the
  broker, then close both sides (a connection lost mid-frame);
* :meth:`drop_all` — close every live connection now;
* ``blackhole = True`` — keep accepting and reading, forward nothing (a silent peer);
* ``paused = True`` — live connections stay open but nothing is forwarded, either way, until
  it is set back to False (a stalled network path); the data is held, not lost;
* :meth:`slow` — forward in ``chunk_bytes`` pieces with ``delay_s`` between them (a slow
  link: frames arrive in many partial reads).

``tls=ssl_context`` (a server-side context) terminates TLS: clients speak TLS to the proxy,
which forwards plaintext upstream -- a TLS listener in front of a broker that has none.  With
TLS each connection is pumped by one thread (an SSL socket is not safe to read and write from
two threads at once).
"""
from __future__ import annotations

import select
import socket
import ssl
import threading
import time


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, listen_host: str = "127.0.0.1",
                 tls: ssl.SSLContext | None = None):
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
        self.paused = False
        self.chunk_bytes: int | None = None
        self.chunk_delay_s = 0.0
        self.tls = tls
        self.tls_errors: list[str] = []  # handshakes that failed (wrong CA, no client cert, ...)
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

    def slow(self, chunk_bytes: int | None, delay_s: float = 0.0) -> None:
        """Forward at most ``chunk_bytes`` at a time, sleeping ``delay_s`` between (None: full speed)."""
        self.chunk_bytes = chunk_bytes
        self.chunk_delay_s = delay_s

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
            if self.tls is not None:
                threading.Thread(target=self._serve_tls, args=(client,), daemon=True).start()
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

    def _forward(self, data: bytes, dst: socket.socket, downstream: bool) -> bool:
        """Send ``data`` on, applying the faults; False once the connection must end."""
        while self.paused and not self._closed:
            time.sleep(0.01)
        if downstream:
            with self._lock:
                cut, self._cut_after = self._cut_after, None
            if cut is not None:
                dst.sendall(data[:cut])
                self.cuts += 1
                return False
        step = self.chunk_bytes
        if not step:
            dst.sendall(data)
            return True
        for i in range(0, len(data), step):
            dst.sendall(data[i:i + step])
            if self.chunk_delay_s:
                time.sleep(self.chunk_delay_s)
        return True

    def _pump(self, src: socket.socket, dst: socket.socket, downstream: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or not self._forward(data, dst, downstream):
                    break
        except OSError:
            pass
        _close(src)
        _close(dst)

    def _serve_tls(self, raw: socket.socket) -> None:
        try:
            raw.settimeout(10)
            client = self.tls.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            self.tls_errors.append(str(exc))
            _close(raw)
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _close(client)
            return
        client.settimeout(None)
        upstream.settimeout(None)
        with self._lock:
            self._pairs.append((client, upstream))
        try:
            while True:
                ready = [client] if client.pending() else select.select([client, upstream], [], [], 0.5)[0]
                for src in ready:
                    data = src.recv(65536)
                    if not data:
                        raise EOFError
                    downstream = src is upstream
                    if not self._forward(data, client if downstream else upstream, downstream):
                        raise EOFError
        except (OSError, EOFError, ValueError):
            pass
        _close(client)
        _close(upstream)

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        self.drop_all()

    def __enter__(self) -> TcpProxy:
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
