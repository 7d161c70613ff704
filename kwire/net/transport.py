"""The sockets of the network client: connecting, TLS, writing, reading into frames.

:class:`Transport` is the one owner of the selector, the wakeup socket pair and the shared
receive buffer.  It moves bytes for the :class:`~kwire.net.connection.Connection` objects and
tells its owner (a :class:`LinkEvents`, the :class:`~kwire.net.client.NetworkClient`) what
happened: the link is up (TCP, and TLS when configured: send ApiVersions), a response frame
arrived, a request was written, the connection failed.  It knows nothing of Kafka's requests.

TLS goes through :class:`~kwire.net.tls.TlsSession` (memory buffers), so its handshake is a
connection state (TLS_HANDSHAKE) driven by the same readiness events.
"""
from __future__ import annotations

import errno
import itertools
import logging
import os
import selectors
import socket
import ssl
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import AuthenticationError, KafkaConnectionError, KwireError, ProtocolError
from .connection import Connection, ConnState, InFlight
from .tls import TlsSession

__all__ = ["Transport", "LinkEvents", "now_ms", "WAITALL_TIMEOUT_S"]

_log = logging.getLogger("kwire.net")

_CLOSED_DURING = {
    ConnState.TLS_HANDSHAKE: " during the TLS handshake",
    # Brokers close the connection, rather than answer, on some SASL failures (Kafka before
    # 1.0; Tansu for a mechanism it does not enable).
    ConnState.AUTHENTICATING: " during SASL authentication (is sasl.mechanism enabled on the broker?)",
    ConnState.REAUTHENTICATING: " during SASL re-authentication",
}
READ_CHUNK_BYTES = 256 * 1024
MAX_READS_PER_EVENT = 64  # then let other connections have a turn
# The rest of a large answer is read in one blocking call (MSG_WAITALL) with the GIL released,
# for at most this long, instead of a recv per readiness event: a thread that blocks in a
# system call must win the GIL back afterwards, and while another thread runs Python code that
# takes up to the interpreter's switch interval (5 ms) -- a consumer's driver reading a 2 MB
# Fetch answer that arrived in pieces went at the pace of the application's thread.
WAITALL_TIMEOUT_S = 0.01
_WAITALL = hasattr(socket, "MSG_WAITALL") and sys.platform.startswith("linux")
_IOV_MAX = 512


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True)
class LinkEvents:
    """What the transport tells its owner.  Each may close the connection."""

    link_up: Callable[[Connection, int], None]  # TCP (and TLS) is up: the set-up requests may go
    frame: Callable[[Connection, memoryview, int], bool]  # a response frame; False: conn closed
    written: Callable[[Connection, InFlight, int], None]  # an acks=0 request went out entirely
    close_conn: Callable[[Connection, KwireError, int], None]  # failed: shut it (release() its socket)
    protocol_failure: Callable[[Connection, KwireError, int], None]  # a bad frame: fail the head, close


class Transport:
    """Sockets for a set of connections, driven by :meth:`select`.  Not thread-safe, except
    :meth:`wakeup`."""

    def __init__(self, events: LinkEvents, ssl_context: ssl.SSLContext | None) -> None:
        self._events = events
        self._ssl_context = ssl_context
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._read_buf = bytearray(READ_CHUNK_BYTES)
        self._read_view = memoryview(self._read_buf)

    def wakeup(self) -> None:
        """Interrupt a blocking :meth:`select` (thread-safe)."""
        try:
            self._wake_w.send(b"\x01")
        except (BlockingIOError, OSError):
            pass  # already pending, or closed

    def close(self) -> None:
        try:
            self._selector.unregister(self._wake_r)
        except (KeyError, ValueError):
            pass
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def release(self, sock: socket.socket) -> None:
        """A connection's socket, given back by Connection.shut: close it."""
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()

    # --- connecting ---------------------------------------------------------------------------
    def connect(self, conn: Connection, now: int) -> None:
        conn.connecting(now)
        try:
            infos = socket.getaddrinfo(conn.host, conn.port, type=socket.SOCK_STREAM)
            family, _, proto, _, addr = infos[conn.addr_index % len(infos)]
            conn.addr_index += 1
            sock = socket.socket(family, socket.SOCK_STREAM, proto)
        except OSError as exc:
            self._events.close_conn(conn, KafkaConnectionError(f"cannot resolve {conn.address}: {exc}"), now)
            return
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        conn.attach(sock)
        err = sock.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
            self._events.close_conn(conn, KafkaConnectionError(
                f"cannot connect to node {conn.node_id} ({conn.address}): {errno.errorcode.get(err, err)}"), now)
            return
        self._selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
        _log.debug("connecting to node %s (%s)", conn.node_id, conn.address)
        if err == 0:
            self._connected(conn, now)

    def _connected(self, conn: Connection, now: int) -> None:
        if self._ssl_context is not None:
            conn.connected(now, TlsSession(self._ssl_context, conn.host))
            self._tls_handshake(conn, now)
            return
        conn.connected(now)
        self._events.link_up(conn, now)

    # --- TLS ----------------------------------------------------------------------------------
    def _tls_handshake(self, conn: Connection, now: int) -> None:
        """Advance the TLS handshake; once done, the link is up."""
        tls = conn.tls
        assert tls is not None
        try:
            done = tls.handshake()
        except AuthenticationError as exc:
            _log.warning("node %s (%s): %s", conn.node_id, conn.address, exc)
            self._events.close_conn(conn, exc, now)
            return
        out = tls.outgoing()
        if out:
            conn.out.append([memoryview(out), None])
        if not done:
            self.write(conn, now)
            return
        _log.debug("node %s (%s): %s established (%s)", conn.node_id, conn.address, tls.version,
                   (tls.cipher() or ("?",))[0])
        conn.tls_established(now)
        self._events.link_up(conn, now)

    def _on_tls_bytes(self, conn: Connection, tls: TlsSession, data: memoryview, now: int) -> bool:
        """Ciphertext from the socket: advance the handshake or decrypt and frame; False if the
        connection was closed."""
        tls.feed(data)
        if conn.state is ConnState.TLS_HANDSHAKE:
            self._tls_handshake(conn, now)
            if conn.sock is None or conn.state is ConnState.TLS_HANDSHAKE:
                return conn.sock is not None
        try:
            plain = tls.read()
        except AuthenticationError as exc:
            _log.warning("node %s (%s): %s", conn.node_id, conn.address, exc)
            self._events.close_conn(conn, exc, now)
            return False
        except KafkaConnectionError as exc:
            self._events.close_conn(conn, KafkaConnectionError(
                f"connection to node {conn.node_id} ({conn.address}) lost: {exc}"), now)
            return False
        out = tls.outgoing()  # e.g. a TLS 1.3 key update answer
        if out:
            conn.out.append([memoryview(out), None])
            self.write(conn, now)
            if conn.sock is None:
                return False
        if not plain:
            return True
        try:
            frames = conn.reader.feed(plain)
        except ProtocolError as exc:
            self._events.protocol_failure(conn, exc, now)
            return False
        for payload in frames:
            if not self._events.frame(conn, payload, now):
                return False
        if conn.abandoned or conn.discarding is not None:
            conn.skip_abandoned()
        return conn.sock is not None

    # --- readiness ----------------------------------------------------------------------------
    def select(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for readiness and handle it; True if :meth:`wakeup` was called."""
        woken = False
        try:
            events = self._selector.select(timeout_s)
        except InterruptedError:
            return False
        now = now_ms()
        for key, mask in events:
            conn: Connection | None = key.data
            if conn is None:
                woken = True
                try:
                    while self._wake_r.recv(1024):
                        pass
                except (BlockingIOError, OSError):
                    pass
                continue
            sock = conn.sock
            if sock is None or key.fileobj is not sock:
                continue
            if conn.state is ConnState.CONNECTING:
                if mask & (selectors.EVENT_WRITE | selectors.EVENT_READ):
                    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        self._events.close_conn(conn, KafkaConnectionError(
                            f"cannot connect to node {conn.node_id} ({conn.address}): {os.strerror(err)}"), now)
                        continue
                    self._connected(conn, now)
                continue
            if mask & selectors.EVENT_READ:
                self.read(conn, now)
            if conn.sock is not None and mask & selectors.EVENT_WRITE:
                self.write(conn, now)
        return woken

    def write(self, conn: Connection, now: int) -> None:
        """Write what the kernel takes of ``conn.out``; watch for writability if any is left."""
        sock = conn.sock
        if sock is None or conn.state is ConnState.CONNECTING:
            return
        out = conn.out
        while out:
            views = [item[0] for item in itertools.islice(out, _IOV_MAX)]
            try:
                n = sock.sendmsg(views) if len(views) > 1 else sock.send(views[0])
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._events.close_conn(conn, KafkaConnectionError(
                    f"connection to node {conn.node_id} ({conn.address}) lost while writing: {exc}"), now)
                return
            while n and out:
                item = out[0]
                view = item[0]
                if n >= len(view):
                    n -= len(view)
                    out.popleft()
                    f = item[1]
                    if f is not None:
                        f.sent_ms = now
                        f.sent_ns = time.monotonic_ns()
                        if not f.expect_response:
                            self._events.written(conn, f, now)
                else:
                    item[0] = view[n:]
                    n = 0
            if out:
                break  # the kernel buffer is full
        want_write = bool(out)
        if want_write != conn.write_registered and conn.sock is not None:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0)
            self._selector.modify(conn.sock, events, conn)
            conn.write_registered = want_write

    def read(self, conn: Connection, now: int) -> None:
        """Read what arrived (several reads, then other connections get a turn) and hand the
        complete frames over."""
        reader = conn.reader
        for _ in range(MAX_READS_PER_EVENT):
            sock = conn.sock
            if sock is None:
                return
            direct = reader.direct_buffer() if conn.tls is None else None
            try:
                if direct is not None and _WAITALL:
                    n = _recv_waitall(sock, direct)
                elif direct is not None:
                    n = sock.recv_into(direct)
                else:
                    n = sock.recv_into(self._read_view)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._events.close_conn(conn, KafkaConnectionError(
                    f"connection to node {conn.node_id} ({conn.address}) lost: {exc}"), now)
                return
            if n == 0:
                where = " mid-response" if reader.mid_frame else _CLOSED_DURING.get(conn.state, "")
                self._events.close_conn(conn, KafkaConnectionError(
                    f"connection to node {conn.node_id} ({conn.address}) closed by the broker{where}"), now)
                return
            conn.last_recv_ms = now
            if conn.tls is not None:
                if not self._on_tls_bytes(conn, conn.tls, self._read_view[:n], now):
                    return
                if n < len(self._read_buf):
                    return
                continue
            try:
                frames = reader.direct_filled(n) if direct is not None else reader.feed(self._read_view[:n])
            except ProtocolError as exc:
                self._events.protocol_failure(conn, exc, now)
                return
            for payload in frames:
                if not self._events.frame(conn, payload, now):
                    return
            if conn.abandoned or conn.discarding is not None:
                conn.skip_abandoned()
            if direct is None:
                if n < len(self._read_buf):
                    return  # drained the socket for now
            elif _WAITALL and n < len(direct):
                return  # the answer is not complete yet: back to the loop until more arrives


def _recv_waitall(sock: socket.socket, view: memoryview) -> int:
    """``recv_into(view)`` that waits, GIL released, until ``view`` is full, the connection
    ends, or :data:`WAITALL_TIMEOUT_S` passes (then what arrived; BlockingIOError if nothing)."""
    sec = int(WAITALL_TIMEOUT_S)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                    struct.pack("ll", sec, int((WAITALL_TIMEOUT_S - sec) * 1e6)))
    sock.setblocking(True)
    try:
        return sock.recv_into(view, len(view), socket.MSG_WAITALL)
    finally:
        sock.setblocking(False)
