"""Requests from queue to answer: routing, encoding, matching answers, completing, failing.

:class:`Dispatcher` is the one owner of the requests in motion: those waiting for any broker,
the correlation ids, the completed ones not yet handed out by poll, and the callbacks due.  It
also carries each connection through its set-up exchange -- ApiVersions
(:mod:`kwire.net.handshake`), then SASL (:mod:`kwire.net.sasl_exchange`) -- writing what those
machines return.  Bytes move through its :class:`~kwire.net.transport.Transport`; the
:class:`~kwire.net.client.NetworkClient` runs the loop and the public API.

Failure semantics are the client's (see :mod:`kwire.net.client`): a lost connection fails the
requests written on it with KafkaConnectionError; a connection that never became ready fails
what waited for it; an authentication failure fails everything waiting for any broker too.
"""
from __future__ import annotations

import logging
import random
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..config import Config
from ..errors import (
    AuthenticationError,
    KafkaConnectionError,
    KwireError,
    ProtocolError,
    UnsupportedVersionError,
)
from ..protocol import api as _api
from . import sasl as _sasl
from .connection import Connection, ConnState, InFlight, backoff_ms
from .handshake import (
    API_VERSIONS,
    ApiVersionsNegotiation,
    SetupRequest,
    choose_version,
    decode_body,
)
from .metadata import Metadata
from .nodes import Nodes, auth_error
from .sasl_exchange import SaslExchange
from .timers import Close, Expire, Reauthenticate, Timeouts
from .transport import LinkEvents, Transport, now_ms

__all__ = ["Dispatcher"]

_log = logging.getLogger("kwire.net")

_METADATA = _api.api("Metadata")
_PRODUCE = _api.api("Produce")

Tracer = Callable[[str, Connection, InFlight, dict[str, Any], "int | None"], None]


class Dispatcher:
    """The requests of one network client, and its connections' set-up exchanges."""

    def __init__(self, cfg: Config, nodes: Nodes, metadata: Metadata, *, trace: Tracer,
                 ssl_context: ssl.SSLContext | None, sasl_mechanism: str | None, rng: random.Random) -> None:
        self.config = cfg
        self.client_id: str = cfg.client_id
        self.request_timeout_ms: int = cfg.request_timeout_ms
        self.setup_timeout_ms: int = cfg.socket_connection_setup_timeout_ms
        self.reconnect_backoff_ms: int = cfg.reconnect_backoff_ms
        self.reconnect_backoff_max_ms: int = cfg.reconnect_backoff_max_ms
        self.metadata = metadata
        self._nodes = nodes
        self._trace = trace
        self._sasl_mechanism = sasl_mechanism
        self._rng = rng
        self.transport = Transport(LinkEvents(
            link_up=self._negotiate, frame=self._on_frame, close_conn=self.close_conn,
            written=lambda conn, f, now: self.complete(f, None, now, conn),
            protocol_failure=self._protocol_failure), ssl_context)
        self.pending_any: deque[InFlight] = deque()  # node_id=None requests awaiting a ready node
        self.completed: list[InFlight] = []  # user requests finished since the last poll()
        self._due_callbacks: deque[tuple[Callable[[InFlight], Any], InFlight]] = deque()
        self._next_correlation_id = 1
        self.finished_count = 0  # requests completed so far (internal ones too)
        self.closed = False
        # The last authentication failure, until a connection authenticates again.
        self.authentication_error: AuthenticationError | None = None

    def close(self) -> None:
        """Close every connection, fail every request waiting, close the sockets (once)."""
        if self.closed:
            return
        self.closed = True
        now = now_ms()
        err = KafkaConnectionError("network client closed")
        for conn in self._nodes.conns.values():
            if conn.state is not ConnState.DISCONNECTED:
                self.close_conn(conn, err, now, failure=False)
            while conn.queue:
                self.fail(conn.queue.popleft(), err)
        while self.pending_any:
            self.fail(self.pending_any.popleft(), err)
        self.run_callbacks()
        self.transport.close()

    def submit(self, node_id: int | None, a: _api.Api, body: dict[str, Any] | Callable[[int], dict[str, Any]],
               version: int | None, timeout_ms: int | None, *, internal: bool,
               min_version: int | None = None, max_version: int | None = None) -> InFlight:
        if self.closed:
            raise KafkaConnectionError("network client closed")
        now = now_ms()
        timeout = self.request_timeout_ms if timeout_ms is None else int(timeout_ms)
        f = InFlight(a, body, node_id=node_id, version=version, timeout_ms=timeout, now_ms=now,
                     internal=internal)
        f.version_range = (min_version, max_version)
        if version is not None:
            try:
                a.check_version(version)
            except UnsupportedVersionError as exc:
                self.fail(f, exc)
                return f
        if node_id is None:
            self.pending_any.append(f)
            return f
        conn = self._nodes.broker(node_id)
        if conn is None:
            self.fail(f, KafkaConnectionError(f"unknown broker node {node_id} (not in metadata)"))
            return f
        conn.queue.append(f)
        if conn.ready:
            self.flush_queue(conn, now)
        return f

    def flush_queue(self, conn: Connection, now: int) -> None:
        """Encode the queued requests of a ready connection into its write buffer."""
        if conn.reauth_at_ms and now >= conn.reauth_at_ms:
            self.start_sasl(conn, now, reauth=True)  # they go out once the session is renewed
            return
        while conn.queue:
            f = conn.queue.popleft()
            if f.done:
                continue
            try:
                version = choose_version(conn.api_versions, f._api, f._requested_version, f.version_range,
                                         node_id=conn.node_id, address=conn.address)
            except UnsupportedVersionError as exc:
                self.fail(f, exc)
                continue
            self._write_request(conn, f, version, now)
        self.transport.write(conn, now)

    def _write_request(self, conn: Connection, f: InFlight, version: int, now: int) -> None:
        f.version = version
        f.node_id = conn.node_id
        try:
            body = f._body_source(version) if callable(f._body_source) else f._body_source
            if not isinstance(body, dict):
                raise TypeError(f"request body must be a dict, got {type(body).__name__}")
            cid = self._next_correlation_id
            self._next_correlation_id = cid + 1 if cid < 0x7FFFFFFF else 1
            frame = _api.encode_request(f._api, version, body, correlation_id=cid, client_id=self.client_id)
        except KwireError as exc:
            self.fail(f, exc)
            return
        except Exception as exc:  # a malformed body: report it on the request, keep the driver alive
            err = ProtocolError(f"cannot encode {f.api} v{version}: {exc!r}")
            err.__cause__ = exc
            self.fail(f, err)
            return
        f.body = body
        f.correlation_id = cid
        f.size_bytes = len(frame)
        if f.api_key == _PRODUCE.key and body.get("acks") == 0:
            f.expect_response = False  # the broker sends nothing back for acks=0
        else:
            conn.in_flight[cid] = f
        if conn.tls is not None:
            frame = conn.tls.encrypt(frame)
        conn.out.append([memoryview(frame), f])
        self._trace("send", conn, f, body, len(frame))

    def dispatch_any(self, now: int) -> None:
        conn = self._nodes.least_loaded_ready()
        if conn is not None:
            while self.pending_any:
                f = self.pending_any.popleft()
                if not f.done:
                    conn.queue.append(f)
            self.flush_queue(conn, now)
            return
        target = self._nodes.connect_target(None, now)
        if target is not None and target.state is ConnState.DISCONNECTED:
            self.transport.connect(target, now)
            return
        if target is None:
            # Everyone is backing off.  Requests that have seen every candidate fail since they
            # were queued fail now; the others wait (their deadline still applies).
            cands = self._nodes.candidates()
            for f in list(self.pending_any):
                # Strictly after: a failure in the very millisecond the request was made may
                # belong to an older connection (one the caller just saw die).
                if all(c.last_failure_ms is not None and c.last_failure_ms > f.created_ms for c in cands):
                    self.pending_any.remove(f)
                    self.fail(f, auth_error(cands) or KafkaConnectionError(
                        "no broker reachable: " + "; ".join(f"{c.address}: {c.last_error}" for c in cands)))

    def _learn_metadata(self, f: InFlight, body: dict[str, Any], now: int) -> None:
        """Every Metadata answer, whoever asked, updates the cache and broker addresses."""
        topics = (f.body or {}).get("topics")
        asked_all = topics is None or (f.version == 0 and not topics)
        self.metadata.update(body, now, all_topics=asked_all)
        self._nodes.learn_addresses()

    def _send_setup(self, conn: Connection, req: SetupRequest, now: int) -> None:
        f = InFlight(req.api, req.body, node_id=conn.node_id, version=req.version,
                     timeout_ms=self.setup_timeout_ms if req.timeout_ms is None else req.timeout_ms,
                     now_ms=now, internal=True)
        conn.handshake = f
        self._write_request(conn, f, req.version, now)
        self.transport.write(conn, now)

    def _negotiate(self, conn: Connection, now: int) -> None:
        conn.negotiation = ApiVersionsNegotiation(conn.node_id)
        self._send_setup(conn, conn.negotiation.request(), now)

    def start_sasl(self, conn: Connection, now: int, *, reauth: bool = False) -> None:
        """SaslHandshake v1 naming the mechanism, after ApiVersions -- or, with ``reauth``, on a
        READY connection whose session is ending (KIP-368): the same exchange, written behind
        the requests in flight.  It may wait behind them, so it gets request.timeout.ms."""
        if reauth:
            _log.debug("node %s (%s): SASL session lifetime ending; re-authenticating (%d in flight)",
                       conn.node_id, conn.address, len(conn.in_flight))
        cfg = self.config
        mechanism, user = self._sasl_mechanism, cfg["sasl.username"]
        assert mechanism is not None  # only SASL listeners get here
        exchange = SaslExchange(lambda: _sasl.new_mechanism(mechanism, user, cfg["sasl.password"]),
                                user, node_id=conn.node_id, address=conn.address,
                                security_protocol=cfg.security_protocol, reauth=reauth,
                                reauth_timeout_ms=self.request_timeout_ms, rng=self._rng)
        req = exchange.start(conn.api_versions or {})
        conn.authenticating(now, exchange, reauth=reauth)
        self._send_setup(conn, req, now)

    def _on_setup_answer(self, conn: Connection, f: InFlight, payload: memoryview, now: int) -> None:
        """The answer to the set-up request in flight: trace it, then send the next one or
        become ready.  Raises what closes the connection (AuthenticationError or KwireError)."""
        negotiation, exchange = conn.negotiation, conn.sasl
        if f.api_key == API_VERSIONS.key and negotiation is not None:
            step = negotiation.on_answer(payload)
        elif exchange is not None and f.version is not None:
            step = exchange.on_answer(f.api_key, f.version, payload,
                                      sent_ms=f.sent_ms if f.sent_ms is not None else now)
        else:
            raise ProtocolError(f"node {conn.node_id}: an answer to {f.api} outside its exchange")
        self.complete(f, step.body, now, conn, len(payload) + 4)
        if step.error is not None:
            raise step.error
        if step.send is not None:
            self._send_setup(conn, step.send, now)
        elif step.api_versions is not None:
            conn.api_versions = step.api_versions
            _log.debug("node %s (%s): ApiVersions v%d answered", conn.node_id, conn.address, f.version)
            if self._sasl_mechanism is not None:
                self.start_sasl(conn, now)
            else:
                self._become_ready(conn, now)
        elif step.authenticated:
            conn.sasl_session_lifetime_ms = step.session_lifetime_ms
            _log.debug("node %s (%s): authenticated with %s (session lifetime %s ms)", conn.node_id,
                       conn.address, exchange.name if exchange else "?", step.session_lifetime_ms or "unlimited")
            self._become_ready(conn, now, step.reauth_at_ms)

    def _become_ready(self, conn: Connection, now: int, reauth_at_ms: int = 0) -> None:
        self.authentication_error = None
        conn.become_ready(now, reauth_at_ms)
        if conn.queue:
            self.flush_queue(conn, now)

    def close_conn(self, conn: Connection, error: KwireError, now: int, *, failure: bool = True) -> None:
        sock, was, lost, handshake = conn.shut(now, error, failure=failure, next_attempt_ms=lambda n: backoff_ms(
            n, self.reconnect_backoff_ms, self.reconnect_backoff_max_ms, self._rng))
        if sock is not None:
            self.transport.release(sock)
        if failure:
            _log.debug("node %s (%s): %s; retry in %d ms", conn.node_id, conn.address, error,
                       conn.next_attempt_ms - now)
        for f in lost:
            if f is not handshake and not f.done:
                self.fail(f, as_connection_error(error, conn))
        if handshake is not None and not handshake.done:
            self.fail(handshake, error)
        if was not in (ConnState.READY, ConnState.REAUTHENTICATING) or isinstance(error, AuthenticationError):
            # The connection never became usable, or the credentials stopped working: what waited
            # for it fails now (callers retry, or — for node_id=None requests — another broker
            # is tried).
            while conn.queue:
                self.fail(conn.queue.popleft(), as_connection_error(error, conn))
            if isinstance(error, AuthenticationError):
                self.authentication_error = error
                # Every broker takes the same credentials: waiting for another is futile.
                while self.pending_any:
                    self.fail(self.pending_any.popleft(), error)

    def _on_frame(self, conn: Connection, payload: memoryview, now: int) -> bool:
        """Match and decode one response frame; False if the connection was closed."""
        if len(payload) < 4:
            self._protocol_failure(conn, ProtocolError(f"response frame of {len(payload)} bytes has no header"), now)
            return False
        cid = _api.peek_correlation_id(payload)
        f = conn.in_flight.pop(cid, None)
        if f is None:
            if conn.abandoned.pop(cid, None) is not None:
                return True  # the answer to a request that already timed out
            self._protocol_failure(conn, ProtocolError(
                f"node {conn.node_id} sent a response with unknown correlation id {cid}"), now)
            return False
        f.received_ms = now
        f.received_ns = time.monotonic_ns()
        if f.raw is not None:
            f.raw = bytes(payload)
        if f is conn.handshake:
            try:
                self._on_setup_answer(conn, f, payload, now)
            except AuthenticationError as exc:
                _log.warning("node %s (%s): %s", conn.node_id, conn.address, exc)
                self.close_conn(conn, exc, now)
                return False
            except KwireError as exc:
                self._protocol_failure(conn, exc, now)
                return False
            return conn.sock is not None
        try:
            assert f.version is not None  # set when written
            body = decode_body(f._api, f.version, payload)
        except KwireError as exc:
            self.fail(f, ProtocolError(f"cannot decode {f.api} v{f.version} response from node "
                                        f"{conn.node_id}: {exc}") if not isinstance(exc, ProtocolError) else exc)
            return True
        self.complete(f, body, now, conn, len(payload) + 4)
        return True

    def _protocol_failure(self, conn: Connection, exc: KwireError, now: int) -> None:
        # The request at the head of the line gets the real error; the rest lost their connection.
        cid, head = next(iter(conn.in_flight.items()), (0, None))
        if head is not None and not head.done and head is not conn.handshake:
            del conn.in_flight[cid]
            self.fail(head, exc)
        _log.warning("node %s (%s): %s; closing the connection", conn.node_id, conn.address, exc)
        self.close_conn(conn, KafkaConnectionError(f"connection to node {conn.node_id} ({conn.address}) "
                                                    f"closed after a protocol error: {exc}"), now)

    def complete(self, f: InFlight, body: dict[str, Any] | None, now: int, conn: Connection,
                 size_bytes: int | None = None) -> None:
        if f.done:
            return
        f.response = body
        if body is not None:
            if f.received_ms is None:
                f.received_ms = now
            self._trace("recv", conn, f, body, size_bytes)
            if f.api_key == _METADATA.key:
                self._learn_metadata(f, body, now)
        self._finish(f)

    def fail(self, f: InFlight, error: KwireError) -> None:
        if f.done:
            return
        f.error = error
        self._finish(f)

    def _finish(self, f: InFlight) -> None:
        f._done = True
        self.finished_count += 1
        if not f.internal:
            self.completed.append(f)
        cbs, f._callbacks = f._callbacks, None
        if cbs:
            # Run later, at a point where no connection is half-way through a state change
            # (_run_callbacks): a callback may send, close or fail requests itself.
            self._due_callbacks.extend((cb, f) for cb in cbs)

    def run_callbacks(self) -> None:
        """The callbacks of requests finished since the last call, outside of any I/O handling."""
        due = self._due_callbacks
        while due:
            cb, f = due.popleft()
            try:
                cb(f)
            except Exception:  # a callback's bug must not wedge the driver
                _log.exception("callback of %r raised", f)

    def apply_timeouts(self, now: int, timeouts: Timeouts, *, spare_idle_ms: int) -> None:
        """Carry out what :class:`~kwire.net.timers.Timeouts` says is due at ``now``."""
        note = self._nodes.last_errors(None) if self.pending_any else ""
        for act in timeouts.due(now, self._nodes.conns.values(), self.pending_any, waiting_note=note,
                                spare_idle_ms=spare_idle_ms):
            if isinstance(act, Expire):
                if act.conn is None:
                    self.pending_any.remove(act.f)
                elif act.in_flight:
                    act.conn.abandon(act.f.correlation_id or 0)
                else:
                    act.conn.queue.remove(act.f)
                self.fail(act.f, act.error)
            elif isinstance(act, Close):
                if act.stalled:
                    act.conn.setup_stalls += 1
                self.close_conn(act.conn, act.error, now)
            elif isinstance(act, Reauthenticate):
                self.start_sasl(act.conn, now, reauth=True)
            else:
                act.conn.reader.release_spares()


def as_connection_error(error: KwireError, conn: Connection) -> KwireError:
    if isinstance(error, (KafkaConnectionError, AuthenticationError)):
        return error
    err = KafkaConnectionError(f"connection to node {conn.node_id} ({conn.address}) failed: {error}")
    err.__cause__ = error
    return err
