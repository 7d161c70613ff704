"""The network driver: sockets, selectors, framing, correlation ids.  No threads, no asyncio.

:class:`NetworkClient` is owned by one thread (the driver).  ``send`` only queues; ``poll``
does every piece of I/O — connecting, the ApiVersions handshake, writing, reading, framing,
matching responses to requests by correlation id, timeouts, reconnect backoff, and keeping the
:class:`~kwire.net.metadata.Metadata` cache fresh.  Only :meth:`NetworkClient.wakeup` may be
called from another thread.

Who owns what (each part has one owner; the state machines do no I/O):

* :class:`NetworkClient` (here): the public API, the configuration, the poll loop and the
  metadata refresh;
* :class:`~kwire.net.dispatch.Dispatcher`: the requests in motion (routing, correlation ids,
  completion, callbacks) and each connection's set-up exchange;
* :class:`~kwire.net.transport.Transport`: the sockets, the selector and TLS bytes;
* :class:`~kwire.net.nodes.Nodes`: node id -> Connection, and which one a request goes to;
* :class:`~kwire.net.timers.Timeouts`: what is due when (sans-I/O);
* :mod:`kwire.net.handshake`, :mod:`kwire.net.sasl_exchange`: the ApiVersions negotiation and
  the SASL exchange (sans-I/O); :mod:`kwire.net.trace`: the tracer and the protocol log.

Requests are pipelined: each connection may have many written and unanswered at once; Kafka
answers them in order, and each response is matched to its request by correlation id.  Since
a broker answers one connection's requests in order, a request it holds (a JoinGroup waits for
the whole group) holds up everything behind it: group traffic therefore goes over a connection
of its own to the coordinator (:meth:`NetworkClient.group_node`, as Kafka's Java client and
librdkafka do), and fetches from that broker go on meanwhile.

Version negotiation (KIP-511): on connect we send ApiVersions at the newest version kwire
knows.  A broker that does not know it answers UNSUPPORTED_VERSION with a v0-format body listing
the ApiVersions range it supports; we retry with the newest version in both.  Afterwards each
request goes out at the newest version both sides support, unless the caller pins one.

Failure semantics:

* a connection lost (or closed by a protocol error) fails the requests written on it with
  :class:`~kwire.errors.KafkaConnectionError` — whether the broker acted on them is unknown, so
  the *caller* decides whether to retry.  Requests still queued for that broker stay queued
  and the connection is re-established after the reconnect backoff;
* a request whose deadline passes fails with :class:`~kwire.errors.KafkaTimeoutError`; its
  late response, if any, is skipped as it arrives without being stored.  A connection whose
  oldest request has not been answered completely within ``max(its timeout,
  request.timeout.ms)`` of being sent is closed -- bytes trickling in do not keep it alive, so
  a dripped answer cannot hold up the requests behind it for longer than that;
* a response frame larger than ``receive.message.max.bytes`` + 64 KiB is a
  :class:`~kwire.errors.ProtocolError` and closes the connection before anything is allocated;
* an authentication failure -- SASL refused, a TLS certificate that does not verify -- is an
  :class:`~kwire.errors.AuthenticationError` (:class:`~kwire.errors.SslAuthenticationError`),
  not a connection error: the requests waiting for that connection (and those waiting for any
  broker) fail with it at once instead of being retried until their deadline.

Security (``security.protocol``): with ``ssl`` / ``sasl_ssl`` the socket carries TLS through
:class:`~kwire.net.tls.TlsSession` (memory buffers, so the handshake is just another connection
state, TLS_HANDSHAKE); with ``sasl_plaintext`` / ``sasl_ssl`` the connection authenticates after
ApiVersions (state AUTHENTICATING): SaslHandshake v1 names the mechanism, then SaslAuthenticate
carries the mechanism's messages (:mod:`kwire.net.sasl`) until it is done.  Credentials are
never logged: the tracer and the ``kwire.protocol`` logger see ``auth_bytes`` as "<redacted>".
When the broker gives the SASL session a lifetime (KIP-368), the connection re-authenticates in
band after 85-90% of it, at least a second before its end if that leaves three quarters
(state REAUTHENTICATING): SaslHandshake and SaslAuthenticate go out on the
same connection behind the requests already written, whose responses arrive first and complete
as usual; requests made meanwhile wait until the session is renewed, since Kafka closes a
connection that sends anything else during re-authentication or after its session expired.
"""
from __future__ import annotations

import logging
import random
import ssl
from collections.abc import Callable, Iterable, Mapping
from types import EllipsisType
from typing import Any

from ..config import Config, parse_config
from ..errors import (
    AuthenticationError,
    ConfigError,
    KafkaConnectionError,
    KafkaTimeoutError,
)
from ..protocol import api as _api
from ..protocol.api import ApiRef, Body
from . import tls as _tls
from .connection import Connection, ConnState, InFlight
from .dispatch import Dispatcher
from .handshake import choose_version
from .metadata import Metadata
from .nodes import GROUP_NODE_BASE, Nodes, auth_error, parse_bootstrap  # noqa: F401 (GROUP_NODE_BASE)
from .timers import Timeouts
from .trace import trace
from .transport import now_ms

__all__ = ["NetworkClient", "InFlight", "now_ms"]

protocol_log = logging.getLogger("kwire.protocol")

_METADATA = _api.api("Metadata")
SPARE_IDLE_MS = 10_000  # a connection idle this long forgets its recycled receive buffers
FRAME_SLACK_BYTES = 64 * 1024  # headers and framing around receive.message.max.bytes of data
# Requests that only read: sending one again after a lost connection cannot change anything.
RETRY_SAFE_APIS = frozenset({
    "ApiVersions", "Metadata", "ListOffsets", "Fetch", "OffsetFetch", "FindCoordinator",
    "DescribeGroups", "ListGroups", "OffsetForLeaderEpoch", "GetTelemetrySubscriptions",
})


class NetworkClient:
    """Connections to a Kafka cluster, driven by :meth:`poll`.  Not thread-safe.

    ``config`` is a dict of configuration properties (see :mod:`kwire.config`) or a parsed
    :class:`~kwire.config.Config`.  ``tracer`` is called with a dict for every request sent and
    response received (``direction`` "send"/"recv", ``node_id``, ``address``, ``api``,
    ``version``, ``correlation_id``, ``size_bytes``, ``rtt_ms`` and ``rtt_us`` (recv),
    ``client_id``, ``local_address`` (this end of the connection), ``body``; SASL
    ``auth_bytes`` arrive as "<redacted>").  ``ssl_context``: an ``ssl.SSLContext`` to use
    instead of the one built from the ``ssl.*`` properties.
    """

    def __init__(self, config: Mapping[str, Any] | Config | None = None, *,
                 tracer: Callable[[dict[str, Any]], Any] | None = None, metadata: Metadata | None = None,
                 auto_metadata: bool = True, allow_auto_topic_creation: bool = False,
                 role: str = "admin", ssl_context: ssl.SSLContext | None = None) -> None:
        cfg = config if isinstance(config, Config) else parse_config(config or {}, role=role)
        self.config = cfg
        self.client_id: str = cfg.client_id
        self.tracer = tracer
        self.stats = None  # kwire.stats.NetStats when statistics are on (stats_cb)
        self.request_timeout_ms: int = cfg.request_timeout_ms
        self.setup_timeout_ms: int = cfg.socket_connection_setup_timeout_ms
        self.setup_stall_ms: int = cfg.socket_connection_setup_stall_ms
        self.reconnect_backoff_ms: int = cfg.reconnect_backoff_ms
        self.reconnect_backoff_max_ms: int = cfg.reconnect_backoff_max_ms
        self.max_frame_bytes: int = cfg.receive_message_max_bytes + FRAME_SLACK_BYTES
        self._timeouts = Timeouts(request_timeout_ms=self.request_timeout_ms, setup_timeout_ms=self.setup_timeout_ms,
                                  setup_stall_ms=self.setup_stall_ms)
        self.metadata = metadata or Metadata(cfg.metadata_max_age_ms, refresh_backoff_ms=cfg.retry_backoff_ms)
        self.auto_metadata = auto_metadata
        self.allow_auto_topic_creation = allow_auto_topic_creation
        if cfg.debug_enabled("protocol") and protocol_log.getEffectiveLevel() > logging.DEBUG:
            protocol_log.setLevel(logging.DEBUG)
        bootstrap = parse_bootstrap(cfg.bootstrap_servers)
        if not bootstrap:
            raise ConfigError("configuration property 'bootstrap.servers' is required")
        protocol = cfg.security_protocol
        self._ssl_context = None
        if protocol in ("ssl", "sasl_ssl"):
            self._ssl_context = ssl_context if ssl_context is not None else _tls.build_context(cfg)
        self._sasl_mechanism: str | None = None
        if protocol in ("sasl_plaintext", "sasl_ssl"):
            for key in ("sasl.username", "sasl.password"):
                if cfg[key] is None:
                    raise ConfigError(f"configuration property {key!r} is required with "
                                      f"security.protocol={protocol}")
            self._sasl_mechanism = cfg["sasl.mechanism"].upper()
        self._nodes = Nodes(bootstrap, self.metadata, self.max_frame_bytes)
        self._conns = self._nodes.conns  # node id -> Connection (owned by self._nodes)
        self._rng = random.Random()
        self._dispatch = Dispatcher(cfg, self._nodes, self.metadata, trace=self._trace, rng=self._rng,
                                    ssl_context=self._ssl_context, sasl_mechanism=self._sasl_mechanism)
        self._transport = self._dispatch.transport
        self._metadata_inflight: InFlight | None = None

    # === public API ======================================================================
    def send(self, node_id: int | None, api: ApiRef, body: Body | Callable[[int], Body], *,
             version: int | None = None, timeout_ms: int | None = None,
             min_version: int | None = None, max_version: int | None = None,
             keep_raw: bool = False) -> InFlight:
        """Queue a request; :meth:`poll` sends it.  ``node_id=None``: the least-loaded broker.

        ``body`` is a dict or ``callable(version) -> dict`` (called once the version is known).
        ``version=None`` picks the newest version both kwire and the broker support, within
        ``[min_version, max_version]`` when given (e.g. a body that needs topic names caps
        Fetch below v13).  ``timeout_ms`` (default request.timeout.ms) counts from now and
        includes connecting.  ``keep_raw``: also keep the response payload bytes (header and
        body, without the size prefix) as ``InFlight.raw`` (for golden files and hex dumps).
        """
        f = self._dispatch.submit(node_id, _api.api(api), body, version, timeout_ms, internal=False,
                         min_version=min_version, max_version=max_version)
        if keep_raw:
            f.raw = b""
        return f

    def poll(self, timeout_ms: int = 0) -> list[InFlight]:
        """Do I/O for up to ``timeout_ms`` (returning early once something completes or on
        :meth:`wakeup`); return the requests that completed since the previous poll."""
        self._run(timeout_ms, until=None)
        done, self._dispatch.completed = self._dispatch.completed, []
        return done

    def request(self, node_id: int | None, api: ApiRef, body: Body | Callable[[int], Body],
                timeout_ms: int | None = None, *, version: int | None = None) -> Body:
        """Send one request and wait for its response (raising its error).

        A read-only request (see :data:`RETRY_SAFE_APIS`) that was written to a connection which
        then turned out dead -- the broker closed it while idle and we learn so only now -- is
        sent once more on a fresh connection, within its timeout: asking twice cannot change
        anything.  A connection that cannot be set up fails the request at once, and other
        requests fail with their :class:`KafkaConnectionError`; the caller decides.

        Other requests that complete meanwhile stay for the next :meth:`poll`.
        """
        deadline_ms = now_ms() + (self.request_timeout_ms if timeout_ms is None else int(timeout_ms))
        retries = 1 if _api.api(api).name in RETRY_SAFE_APIS else 0
        while True:
            f = self.send(node_id, api, body, version=version, timeout_ms=max(1, deadline_ms - now_ms()))
            self.wait(f)
            stale = isinstance(f.error, KafkaConnectionError) and f.sent_ms is not None
            if not (stale and retries) or now_ms() >= deadline_ms:
                res = f.result()
                return {} if res is None else res  # (None: a request the broker does not answer)
            retries -= 1  # the new send queues behind the reconnect backoff

    def wait(self, f: InFlight) -> InFlight:
        """Drive I/O until ``f`` is done (its own deadline bounds the wait)."""
        while not f.done:
            self._run(max(0, f.deadline_ms - now_ms()) + 1, until=f)
        try:
            self._dispatch.completed.remove(f)
        except ValueError:
            pass
        return f

    def release_buffers(self) -> None:
        """Free the receive buffers kept for recycling (see :mod:`kwire.net.framing`) on every
        connection, e.g. before the client sits unused in a cache."""
        for conn in self._conns.values():
            conn.reader.release_spares()

    def wakeup(self) -> None:
        """Interrupt a blocking :meth:`poll` (thread-safe)."""
        self._transport.wakeup()

    def api_version(self, node_id: int | None, api: ApiRef) -> int:
        """The version a request of ``api`` to ``node_id`` would use (connecting if needed)."""
        a = _api.api(api)
        conn = self.ensure_ready(node_id)
        return self._choose_version(conn, a, None)

    def broker_api_versions(self, node_id: int | None) -> dict[int, tuple[int, int]]:
        """The broker's ApiVersions answer: api key -> (min, max) (connecting if needed)."""
        return dict(self.ensure_ready(node_id).api_versions or {})

    def ensure_ready(self, node_id: int | None, timeout_ms: int | None = None) -> Connection:
        """Connect to ``node_id`` (any broker if None) and wait until it is ready.

        Raises KafkaConnectionError once the node (or, for None, every known broker) failed
        to connect since the call began, KafkaTimeoutError after ``timeout_ms``
        (default socket.connection.setup.timeout.ms).
        """
        timeout_ms = self.setup_timeout_ms if timeout_ms is None else timeout_ms
        start = now_ms()
        deadline = start + timeout_ms
        while True:
            conn = self._nodes.ready(node_id)
            if conn is not None:
                return conn
            now = now_ms()
            if now >= deadline:
                break
            target = self._nodes.connect_target(node_id, now)
            if node_id is not None:
                if target is None:
                    raise KafkaConnectionError(f"unknown broker node {node_id}")
                if target.state is ConnState.DISCONNECTED:
                    if target.last_failure_ms is not None and target.last_failure_ms > start:
                        if isinstance(target.last_error, AuthenticationError):
                            raise target.last_error
                        raise KafkaConnectionError(f"cannot connect to node {node_id} ({target.address}): "
                                                   f"{target.last_error}")
                    if now >= target.next_attempt_ms:
                        self._transport.connect(target, now)
            elif target is not None and target.state is ConnState.DISCONNECTED:
                self._transport.connect(target, now)
            elif target is None:
                cands = self._nodes.all_failed_since(start)
                if cands is not None:
                    auth = auth_error(cands)
                    if auth is not None:
                        raise auth
                    raise KafkaConnectionError("no broker reachable" + self._nodes.last_errors(None))
            self._run(min(deadline - now, 20), until=None, quiet=True)
        raise KafkaTimeoutError(f"no connection to {'any broker' if node_id is None else f'node {node_id}'} "
                                f"within {timeout_ms} ms{self._nodes.last_errors(node_id)}")

    def refresh_metadata(self, topics: Iterable[str] | None | EllipsisType = ..., timeout_ms: int | None = None, *,
                         allow_auto_topic_creation: bool | None = None) -> Metadata:
        """Fetch metadata now (blocking) for ``topics`` (None: all; default: the tracked ones)."""
        if topics is not ... and topics is not None:
            topics = list(topics)
        auto = self.allow_auto_topic_creation if allow_auto_topic_creation is None else allow_auto_topic_creation
        wanted = self.metadata.wanted_topics if topics is ... else topics
        wanted_snapshot = None if wanted is None else set(wanted)

        def body(v: int) -> Body:
            return self.metadata.request_body(v, wanted_snapshot, allow_auto_topic_creation=auto)

        f = self._dispatch.submit(None, _METADATA, body, None, timeout_ms or self.config.socket_timeout_ms,
                         internal=False)
        self.wait(f)
        f.result()
        return self.metadata

    @property
    def authentication_error(self) -> AuthenticationError | None:
        """The last authentication failure (SASL or TLS) of any connection, until one connection
        authenticates again; None if there was none.  Layers that wait for metadata without a
        request of their own (a producer holding records for an unknown topic) check it to fail
        at once rather than at their deadline."""
        return self._dispatch.authentication_error

    def group_node(self, node_id: int, host: str | None = None, port: int | None = None) -> int:
        """The node id of a second connection to broker ``node_id`` (at ``host``:``port``, as
        FindCoordinator named it, else from metadata), for a group coordinator's traffic: its
        JoinGroup may wait for a whole rebalance, and must not hold up the fetches on the
        broker's ordinary connection.  Like Kafka's Java client, the id is 2^31 - 1 - node_id."""
        return self._nodes.group_node(node_id, host, port)

    def least_loaded_node(self) -> int | None:
        conn = self._nodes.least_loaded_ready()
        return None if conn is None else conn.node_id

    def is_ready(self, node_id: int) -> bool:
        conn = self._conns.get(node_id)
        return conn is not None and conn.ready

    def connection_state(self, node_id: int) -> ConnState | None:
        conn = self._conns.get(node_id)
        return None if conn is None else conn.state

    def in_flight_count(self, node_id: int | None = None) -> int:
        if node_id is not None:
            conn = self._conns.get(node_id)
            return 0 if conn is None else len(conn.in_flight)
        return sum(len(c.in_flight) for c in self._conns.values())

    def pending_count(self) -> int:
        """Requests queued or written and not yet done."""
        return len(self._dispatch.pending_any) + sum(c.load for c in self._conns.values())

    def disconnect(self, node_id: int) -> None:
        """Close one connection (its in-flight requests fail with KafkaConnectionError)."""
        conn = self._conns.get(node_id)
        if conn is not None and conn.state is not ConnState.DISCONNECTED:
            self._dispatch.close_conn(conn, KafkaConnectionError(f"node {node_id}: disconnected by the client"),
                                      now_ms(), failure=False)

    def close(self) -> None:
        self._dispatch.close()

    def __enter__(self) -> NetworkClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # === submitting ========================================================================
    def _choose_version(self, conn: Connection, a: _api.Api, requested: int | None,
                        caps: tuple[int | None, int | None] = (None, None)) -> int:
        return choose_version(conn.api_versions, a, requested, caps, node_id=conn.node_id,
                              address=conn.address)

    # === the loop ===========================================================================
    def _run(self, timeout_ms: int, *, until: InFlight | None, quiet: bool = False) -> None:
        """Do I/O until ``until`` is done, or (without ``until``) until any request -- internal
        ones included -- completes, a wakeup, or ``timeout_ms``.  ``quiet``: completions from
        before this call do not count."""
        if self._dispatch.closed:
            raise KafkaConnectionError("network client closed")
        start_count = self._dispatch.finished_count
        now = now_ms()
        deadline = now + max(0, int(timeout_ms))

        def finished() -> bool:
            if until is not None:
                return until.done
            return self._dispatch.finished_count != start_count or (bool(self._dispatch.completed) and not quiet)

        while True:
            self._step(now)
            self._dispatch.run_callbacks()
            done = finished()
            remaining = deadline - now
            if done or remaining <= 0:
                wait_ms = 0
            else:
                wait_ms = max(0, min(remaining, self._next_timer_ms(now) - now))
            woken = self._transport.select(wait_ms / 1000.0)
            now = now_ms()
            self._dispatch.apply_timeouts(now, self._timeouts, spare_idle_ms=SPARE_IDLE_MS)
            self._dispatch.run_callbacks()
            if finished() or woken or now >= deadline:
                return

    def _step(self, now: int) -> None:
        """Everything poll() does before waiting: metadata, connects, dispatch, writes."""
        if self.auto_metadata and self._metadata_inflight is None and self.metadata.needs_update(now):
            self._send_metadata_refresh(now)
        if self._dispatch.pending_any:
            self._dispatch.dispatch_any(now)
        for conn in list(self._conns.values()):
            if conn.queue:
                if conn.ready:
                    self._dispatch.flush_queue(conn, now)
                elif conn.state is ConnState.DISCONNECTED and now >= conn.next_attempt_ms:
                    self._transport.connect(conn, now)
            if conn.out and conn.sock is not None and \
                    conn.state not in (ConnState.CONNECTING, ConnState.DISCONNECTED):
                self._transport.write(conn, now)

    def _send_metadata_refresh(self, now: int) -> None:
        md = self.metadata
        wanted = None if md.wanted_topics is None else set(md.wanted_topics)
        auto = self.allow_auto_topic_creation

        def body(v: int) -> Body:
            return md.request_body(v, wanted, allow_auto_topic_creation=auto)

        md.attempt(now)
        f = self._dispatch.submit(None, _METADATA, body, None, self.request_timeout_ms, internal=True)
        self._metadata_inflight = f
        f.add_callback(self._on_metadata_refresh)

    def _on_metadata_refresh(self, f: InFlight) -> None:
        if f is self._metadata_inflight:
            self._metadata_inflight = None
        if f.error is not None:
            self.metadata.failed(now_ms())

    # --- set-up requests: the exchanges of kwire.net.handshake and kwire.net.sasl_exchange ---------
    # --- timeouts: kwire.net.timers says what is due ----------------------------------------------
    def _next_timer_ms(self, now: int) -> int:
        md_due = now + self.metadata.ms_until_update(now) \
            if self.auto_metadata and self._metadata_inflight is None else None
        return self._timeouts.next_wake_ms(now, self._conns.values(), self._dispatch.pending_any,
                                           self._nodes.candidates() if self._dispatch.pending_any else None, md_due)

    # --- completion ---------------------------------------------------------------------------------
    def _trace(self, direction: str, conn: Connection, f: InFlight, body: Body, size: int | None) -> None:
        trace(direction, conn, f, body, size, tracer=self.tracer, stats=self.stats, client_id=self.client_id)
