"""The network driver: sockets, selectors, framing, correlation ids.  No threads, no asyncio.

:class:`NetworkClient` is owned by one thread (the driver).  ``send`` only queues; ``poll``
does every piece of I/O — connecting, the ApiVersions handshake, writing, reading, framing,
matching responses to requests by correlation id, timeouts, reconnect backoff, and keeping the
:class:`~kwire.net.metadata.Metadata` cache fresh.  Only :meth:`NetworkClient.wakeup` may be
called from another thread.

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
band after 85-90% of it (state REAUTHENTICATING): SaslHandshake and SaslAuthenticate go out on the
same connection behind the requests already written, whose responses arrive first and complete
as usual; requests made meanwhile wait until the session is renewed, since Kafka closes a
connection that sends anything else during re-authentication or after its session expired.
"""
from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..config import Config, parse_config
from ..errors import (
    AuthenticationError,
    ConfigError,
    KafkaConnectionError,
    KafkaTimeoutError,
    KwireError,
    ProtocolError,
    UnsupportedVersionError,
)
from ..protocol import api as _api
from . import sasl as _sasl
from . import tls as _tls
from .connection import Connection, ConnState, InFlight, backoff_ms
from .handshake import (
    API_VERSIONS,
    ApiVersionsNegotiation,
    SetupRequest,
    choose_version,
    decode_body,
)
from .metadata import Metadata
from .nodes import GROUP_NODE_BASE, Nodes, auth_error, parse_bootstrap  # noqa: F401 (GROUP_NODE_BASE)
from .sasl_exchange import SaslExchange
from .timers import Close, Expire, Reauthenticate, Timeouts
from .trace import trace
from .transport import LinkEvents, Transport, now_ms

__all__ = ["NetworkClient", "InFlight", "now_ms"]

protocol_log = logging.getLogger("kwire.protocol")
_log = logging.getLogger("kwire.net")

_METADATA = _api.api("Metadata")
_PRODUCE = _api.api("Produce")
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
                 tracer: Callable[[dict], Any] | None = None, metadata: Metadata | None = None,
                 auto_metadata: bool = True, allow_auto_topic_creation: bool = False,
                 role: str = "admin", ssl_context=None):
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
        self._transport = Transport(LinkEvents(
            link_up=self._negotiate, frame=self._on_frame, close_conn=self._close_conn,
            written=lambda conn, f, now: self._complete(f, None, now, conn),
            protocol_failure=self._protocol_failure), self._ssl_context)
        self._pending_any: deque[InFlight] = deque()  # node_id=None requests awaiting a ready node
        self._completed: list[InFlight] = []  # user requests finished since the last poll()
        self._due_callbacks: deque[tuple[Callable[[InFlight], Any], InFlight]] = deque()
        self._next_correlation_id = 1
        self._finished_count = 0  # requests completed so far (internal ones too)
        self._metadata_inflight: InFlight | None = None
        self._rng = random.Random()
        self._closed = False
        self._authentication_error: AuthenticationError | None = None

    # === public API ======================================================================
    def send(self, node_id: int | None, api, body: dict | Callable[[int], dict], *,
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
        f = self._submit(node_id, _api.api(api), body, version, timeout_ms, internal=False,
                         min_version=min_version, max_version=max_version)
        if keep_raw:
            f.raw = b""
        return f

    def poll(self, timeout_ms: int = 0) -> list[InFlight]:
        """Do I/O for up to ``timeout_ms`` (returning early once something completes or on
        :meth:`wakeup`); return the requests that completed since the previous poll."""
        self._run(timeout_ms, until=None)
        done, self._completed = self._completed, []
        return done

    def request(self, node_id: int | None, api, body: dict | Callable[[int], dict],
                timeout_ms: int | None = None, *, version: int | None = None) -> dict:
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
                return f.result()
            retries -= 1  # the new send queues behind the reconnect backoff

    def wait(self, f: InFlight) -> InFlight:
        """Drive I/O until ``f`` is done (its own deadline bounds the wait)."""
        while not f.done:
            self._run(max(0, f.deadline_ms - now_ms()) + 1, until=f)
        try:
            self._completed.remove(f)
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

    def api_version(self, node_id: int | None, api) -> int:
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

    def refresh_metadata(self, topics: Iterable[str] | None = ..., timeout_ms: int | None = None, *,
                         allow_auto_topic_creation: bool | None = None) -> Metadata:
        """Fetch metadata now (blocking) for ``topics`` (None: all; default: the tracked ones)."""
        if topics is not ... and topics is not None:
            topics = list(topics)
        auto = self.allow_auto_topic_creation if allow_auto_topic_creation is None else allow_auto_topic_creation
        wanted = self.metadata.wanted_topics if topics is ... else topics
        wanted_snapshot = None if wanted is None else set(wanted)

        def body(v: int) -> dict:
            return self.metadata.request_body(v, wanted_snapshot, allow_auto_topic_creation=auto)

        f = self._submit(None, _METADATA, body, None, timeout_ms or self.config.socket_timeout_ms,
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
        return self._authentication_error

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
        return len(self._pending_any) + sum(c.load for c in self._conns.values())

    def disconnect(self, node_id: int) -> None:
        """Close one connection (its in-flight requests fail with KafkaConnectionError)."""
        conn = self._conns.get(node_id)
        if conn is not None and conn.state is not ConnState.DISCONNECTED:
            self._close_conn(conn, KafkaConnectionError(f"node {node_id}: disconnected by the client"),
                             now_ms(), failure=False)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        now = now_ms()
        err = KafkaConnectionError("network client closed")
        for conn in self._conns.values():
            if conn.state is not ConnState.DISCONNECTED:
                self._close_conn(conn, err, now, failure=False)
            while conn.queue:
                self._fail(conn.queue.popleft(), err)
        while self._pending_any:
            self._fail(self._pending_any.popleft(), err)
        self._run_callbacks()
        self._transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # === submitting ========================================================================
    def _submit(self, node_id, a, body, version, timeout_ms, *, internal: bool,
                min_version: int | None = None, max_version: int | None = None) -> InFlight:
        if self._closed:
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
                self._fail(f, exc)
                return f
        if node_id is None:
            self._pending_any.append(f)
            return f
        conn = self._nodes.broker(node_id)
        if conn is None:
            self._fail(f, KafkaConnectionError(f"unknown broker node {node_id} (not in metadata)"))
            return f
        conn.queue.append(f)
        if conn.ready:
            self._flush_queue(conn, now)
        return f

    def _choose_version(self, conn: Connection, a, requested: int | None,
                        caps: tuple[int | None, int | None] = (None, None)) -> int:
        return choose_version(conn.api_versions, a, requested, caps, node_id=conn.node_id,
                              address=conn.address)

    def _flush_queue(self, conn: Connection, now: int) -> None:
        """Encode the queued requests of a ready connection into its write buffer."""
        if conn.reauth_at_ms and now >= conn.reauth_at_ms:
            self._start_sasl(conn, now, reauth=True)  # they go out once the session is renewed
            return
        while conn.queue:
            f = conn.queue.popleft()
            if f.done:
                continue
            try:
                version = self._choose_version(conn, f._api, f._requested_version, f.version_range)
            except UnsupportedVersionError as exc:
                self._fail(f, exc)
                continue
            self._write_request(conn, f, version, now)
        self._transport.write(conn, now)

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
            self._fail(f, exc)
            return
        except Exception as exc:  # a malformed body: report it on the request, keep the driver alive
            err = ProtocolError(f"cannot encode {f.api} v{version}: {exc!r}")
            err.__cause__ = exc
            self._fail(f, err)
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

    # === the loop ===========================================================================
    def _run(self, timeout_ms: int, *, until: InFlight | None, quiet: bool = False) -> None:
        """Do I/O until ``until`` is done, or (without ``until``) until any request -- internal
        ones included -- completes, a wakeup, or ``timeout_ms``.  ``quiet``: completions from
        before this call do not count."""
        if self._closed:
            raise KafkaConnectionError("network client closed")
        start_count = self._finished_count
        now = now_ms()
        deadline = now + max(0, int(timeout_ms))

        def finished() -> bool:
            if until is not None:
                return until.done
            return self._finished_count != start_count or (bool(self._completed) and not quiet)

        while True:
            self._step(now)
            self._run_callbacks()
            done = finished()
            remaining = deadline - now
            if done or remaining <= 0:
                wait_ms = 0
            else:
                wait_ms = max(0, min(remaining, self._next_timer_ms(now) - now))
            woken = self._transport.select(wait_ms / 1000.0)
            now = now_ms()
            self._check_timeouts(now)
            self._run_callbacks()
            if finished() or woken or now >= deadline:
                return

    def _step(self, now: int) -> None:
        """Everything poll() does before waiting: metadata, connects, dispatch, writes."""
        if self.auto_metadata and self._metadata_inflight is None and self.metadata.needs_update(now):
            self._send_metadata_refresh(now)
        if self._pending_any:
            self._dispatch_any(now)
        for conn in list(self._conns.values()):
            if conn.queue:
                if conn.ready:
                    self._flush_queue(conn, now)
                elif conn.state is ConnState.DISCONNECTED and now >= conn.next_attempt_ms:
                    self._transport.connect(conn, now)
            if conn.out and conn.sock is not None and \
                    conn.state not in (ConnState.CONNECTING, ConnState.DISCONNECTED):
                self._transport.write(conn, now)

    def _send_metadata_refresh(self, now: int) -> None:
        md = self.metadata
        wanted = None if md.wanted_topics is None else set(md.wanted_topics)
        auto = self.allow_auto_topic_creation

        def body(v: int) -> dict:
            return md.request_body(v, wanted, allow_auto_topic_creation=auto)

        md.attempt(now)
        f = self._submit(None, _METADATA, body, None, self.request_timeout_ms, internal=True)
        self._metadata_inflight = f
        f.add_callback(self._on_metadata_refresh)

    def _on_metadata_refresh(self, f: InFlight) -> None:
        if f is self._metadata_inflight:
            self._metadata_inflight = None
        if f.error is not None:
            self.metadata.failed(now_ms())

    def _learn_metadata(self, f: InFlight, body: dict, now: int) -> None:
        """Every Metadata answer, whoever asked, updates the cache and broker addresses."""
        topics = (f.body or {}).get("topics")
        asked_all = topics is None or (f.version == 0 and not topics)
        self.metadata.update(body, now, all_topics=asked_all)
        self._nodes.learn_addresses()

    def _dispatch_any(self, now: int) -> None:
        conn = self._nodes.least_loaded_ready()
        if conn is not None:
            while self._pending_any:
                f = self._pending_any.popleft()
                if not f.done:
                    conn.queue.append(f)
            self._flush_queue(conn, now)
            return
        target = self._nodes.connect_target(None, now)
        if target is not None and target.state is ConnState.DISCONNECTED:
            self._transport.connect(target, now)
            return
        if target is None:
            # Everyone is backing off.  Requests that have seen every candidate fail since they
            # were queued fail now; the others wait (their deadline still applies).
            cands = self._nodes.candidates()
            for f in list(self._pending_any):
                # Strictly after: a failure in the very millisecond the request was made may
                # belong to an older connection (one the caller just saw die).
                if all(c.last_failure_ms is not None and c.last_failure_ms > f.created_ms for c in cands):
                    self._pending_any.remove(f)
                    self._fail(f, auth_error(cands) or KafkaConnectionError(
                        "no broker reachable: " + "; ".join(f"{c.address}: {c.last_error}" for c in cands)))

    # --- set-up requests: the exchanges of kwire.net.handshake and kwire.net.sasl_exchange ---------
    def _send_setup(self, conn: Connection, req: SetupRequest, now: int) -> None:
        f = InFlight(req.api, req.body, node_id=conn.node_id, version=req.version,
                     timeout_ms=self.setup_timeout_ms if req.timeout_ms is None else req.timeout_ms,
                     now_ms=now, internal=True)
        conn.handshake = f
        self._write_request(conn, f, req.version, now)
        self._transport.write(conn, now)

    def _negotiate(self, conn: Connection, now: int) -> None:
        conn.negotiation = ApiVersionsNegotiation(conn.node_id)
        self._send_setup(conn, conn.negotiation.request(), now)

    def _start_sasl(self, conn: Connection, now: int, *, reauth: bool = False) -> None:
        """SaslHandshake v1 naming the mechanism, after ApiVersions -- or, with ``reauth``, on a
        READY connection whose session is ending (KIP-368): the same exchange, written behind
        the requests in flight.  It may wait behind them, so it gets request.timeout.ms."""
        if reauth:
            _log.debug("node %s (%s): SASL session lifetime ending; re-authenticating (%d in flight)",
                       conn.node_id, conn.address, len(conn.in_flight))
        cfg = self.config
        mechanism, user = self._sasl_mechanism, cfg["sasl.username"]
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
        if f.api_key == API_VERSIONS.key:
            step = conn.negotiation.on_answer(payload)
        else:
            step = conn.sasl.on_answer(f.api_key, f.version, payload,
                                       sent_ms=f.sent_ms if f.sent_ms is not None else now)
        self._complete(f, step.body, now, conn, len(payload) + 4)
        if step.error is not None:
            raise step.error
        if step.send is not None:
            self._send_setup(conn, step.send, now)
        elif step.api_versions is not None:
            conn.api_versions = step.api_versions
            _log.debug("node %s (%s): ApiVersions v%d answered", conn.node_id, conn.address, f.version)
            if self._sasl_mechanism is not None:
                self._start_sasl(conn, now)
            else:
                self._become_ready(conn, now)
        elif step.authenticated:
            conn.sasl_session_lifetime_ms = step.session_lifetime_ms
            _log.debug("node %s (%s): authenticated with %s (session lifetime %s ms)", conn.node_id,
                       conn.address, conn.sasl.name, step.session_lifetime_ms or "unlimited")
            self._become_ready(conn, now, step.reauth_at_ms)

    def _become_ready(self, conn: Connection, now: int, reauth_at_ms: int = 0) -> None:
        self._authentication_error = None
        conn.become_ready(now, reauth_at_ms)
        if conn.queue:
            self._flush_queue(conn, now)

    def _close_conn(self, conn: Connection, error: KwireError, now: int, *, failure: bool = True) -> None:
        sock, was, lost, handshake = conn.shut(now, error, failure=failure, next_attempt_ms=lambda n: backoff_ms(
            n, self.reconnect_backoff_ms, self.reconnect_backoff_max_ms, self._rng))
        if sock is not None:
            self._transport.release(sock)
        if failure:
            _log.debug("node %s (%s): %s; retry in %d ms", conn.node_id, conn.address, error,
                       conn.next_attempt_ms - now)
        for f in lost:
            if f is not handshake and not f.done:
                self._fail(f, _as_connection_error(error, conn))
        if handshake is not None and not handshake.done:
            self._fail(handshake, error)
        if was not in (ConnState.READY, ConnState.REAUTHENTICATING) or isinstance(error, AuthenticationError):
            # The connection never became usable, or the credentials stopped working: what waited
            # for it fails now (callers retry, or — for node_id=None requests — another broker
            # is tried).
            while conn.queue:
                self._fail(conn.queue.popleft(), _as_connection_error(error, conn))
            if isinstance(error, AuthenticationError):
                self._authentication_error = error
                # Every broker takes the same credentials: waiting for another is futile.
                while self._pending_any:
                    self._fail(self._pending_any.popleft(), error)

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
                self._close_conn(conn, exc, now)
                return False
            except KwireError as exc:
                self._protocol_failure(conn, exc, now)
                return False
            return conn.sock is not None
        try:
            body = decode_body(f._api, f.version, payload)
        except KwireError as exc:
            self._fail(f, ProtocolError(f"cannot decode {f.api} v{f.version} response from node "
                                        f"{conn.node_id}: {exc}") if not isinstance(exc, ProtocolError) else exc)
            return True
        self._complete(f, body, now, conn, len(payload) + 4)
        return True

    def _protocol_failure(self, conn: Connection, exc: KwireError, now: int) -> None:
        # The request at the head of the line gets the real error; the rest lost their connection.
        head = next(iter(conn.in_flight.values()), None)
        if head is not None and not head.done and head is not conn.handshake:
            conn.in_flight.pop(head.correlation_id, None)
            self._fail(head, exc)
        _log.warning("node %s (%s): %s; closing the connection", conn.node_id, conn.address, exc)
        self._close_conn(conn, KafkaConnectionError(f"connection to node {conn.node_id} ({conn.address}) "
                                                    f"closed after a protocol error: {exc}"), now)

    # --- timeouts: kwire.net.timers says what is due ----------------------------------------------
    def _next_timer_ms(self, now: int) -> int:
        md_due = now + self.metadata.ms_until_update(now) \
            if self.auto_metadata and self._metadata_inflight is None else None
        return self._timeouts.next_wake_ms(now, self._conns.values(), self._pending_any,
                                           self._nodes.candidates() if self._pending_any else None, md_due)

    def _check_timeouts(self, now: int) -> None:
        note = self._nodes.last_errors(None) if self._pending_any else ""
        for act in self._timeouts.due(now, self._conns.values(), self._pending_any, waiting_note=note,
                                      spare_idle_ms=SPARE_IDLE_MS):
            if isinstance(act, Expire):
                if act.conn is None:
                    self._pending_any.remove(act.f)
                elif act.in_flight:
                    act.conn.abandon(act.f.correlation_id)
                else:
                    act.conn.queue.remove(act.f)
                self._fail(act.f, act.error)
            elif isinstance(act, Close):
                if act.stalled:
                    act.conn.setup_stalls += 1
                self._close_conn(act.conn, act.error, now)
            elif isinstance(act, Reauthenticate):
                self._start_sasl(act.conn, now, reauth=True)
            else:
                act.conn.reader.release_spares()

    # --- completion ---------------------------------------------------------------------------------
    def _complete(self, f: InFlight, body: dict | None, now: int, conn: Connection,
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

    def _fail(self, f: InFlight, error: KwireError) -> None:
        if f.done:
            return
        f.error = error
        self._finish(f)

    def _finish(self, f: InFlight) -> None:
        f._done = True
        self._finished_count += 1
        if not f.internal:
            self._completed.append(f)
        cbs, f._callbacks = f._callbacks, None
        if cbs:
            # Run later, at a point where no connection is half-way through a state change
            # (_run_callbacks): a callback may send, close or fail requests itself.
            self._due_callbacks.extend((cb, f) for cb in cbs)

    def _run_callbacks(self) -> None:
        """The callbacks of requests finished since the last call, outside of any I/O handling."""
        due = self._due_callbacks
        while due:
            cb, f = due.popleft()
            try:
                cb(f)
            except Exception:  # a callback's bug must not wedge the driver
                _log.exception("callback of %r raised", f)

    def _trace(self, direction: str, conn: Connection, f: InFlight, body: dict, size: int | None) -> None:
        trace(direction, conn, f, body, size, tracer=self.tracer, stats=self.stats, client_id=self.client_id)


def _as_connection_error(error: KwireError, conn: Connection) -> KwireError:
    if isinstance(error, (KafkaConnectionError, AuthenticationError)):
        return error
    err = KafkaConnectionError(f"connection to node {conn.node_id} ({conn.address}) failed: {error}")
    err.__cause__ = error
    return err
