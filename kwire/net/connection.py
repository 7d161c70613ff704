"""One broker connection: its state machine, its queues, and the request it is waiting on.

The :class:`~kwire.net.transport.Transport` owns the sockets and moves bytes; this module
holds what a connection *is*: an explicit state (:class:`ConnState`, legal transitions checked
in :meth:`Connection.transition`), the requests queued until it is ready, the requests written
and awaiting their response (keyed by correlation id: several may be in flight at once — Kafka
answers them in order), the bytes not yet written, and the frame reader.

    DISCONNECTED --connect()--> CONNECTING --TCP up--> [TLS_HANDSHAKE] --> NEGOTIATING
                                                                             | ApiVersions
                                         READY <-- SaslHandshake + SaslAuthenticate rounds --
                                          ^ |              [AUTHENTICATING]                  |
                                          | +------------------------------------------------+
                                          |                      (no SASL)
                   session renewed  <-- REAUTHENTICATING <-- session lifetime nearly over (KIP-368)
    any state --failure / timeout / peer closed / close()--> DISCONNECTED

TLS_HANDSHAKE is passed through for security.protocol ssl / sasl_ssl, AUTHENTICATING for
sasl_plaintext / sasl_ssl.  Until READY, the one request on the wire is the setup request
(``handshake``: ApiVersions, SaslHandshake or SaslAuthenticate); user requests wait in ``queue``.
REAUTHENTICATING (KIP-368) runs the SASL exchange again on the open connection: the requests
written before it stay in flight and are answered first (Kafka answers in order), new ones wait
in ``queue`` until the session is renewed -- the broker refuses anything else meanwhile.
"""
from __future__ import annotations

import enum
import random
import socket
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import KwireError
from .framing import FrameReader

if TYPE_CHECKING:
    from .handshake import ApiVersionsNegotiation
    from .sasl_exchange import SaslExchange


class ConnState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"  # TCP connect in progress
    TLS_HANDSHAKE = "tls_handshake"  # TLS handshake in progress
    NEGOTIATING = "negotiating"  # ApiVersions sent, answer pending
    AUTHENTICATING = "authenticating"  # SaslHandshake / SaslAuthenticate in progress
    READY = "ready"
    REAUTHENTICATING = "reauthenticating"  # KIP-368: a new SASL exchange on a ready connection


_LEGAL: dict[ConnState, frozenset[ConnState]] = {
    ConnState.DISCONNECTED: frozenset({ConnState.CONNECTING}),
    ConnState.CONNECTING: frozenset({ConnState.TLS_HANDSHAKE, ConnState.NEGOTIATING, ConnState.DISCONNECTED}),
    ConnState.TLS_HANDSHAKE: frozenset({ConnState.NEGOTIATING, ConnState.DISCONNECTED}),
    ConnState.NEGOTIATING: frozenset({ConnState.AUTHENTICATING, ConnState.READY, ConnState.DISCONNECTED}),
    ConnState.AUTHENTICATING: frozenset({ConnState.READY, ConnState.DISCONNECTED}),
    ConnState.READY: frozenset({ConnState.REAUTHENTICATING, ConnState.DISCONNECTED}),
    ConnState.REAUTHENTICATING: frozenset({ConnState.READY, ConnState.DISCONNECTED}),
}

# States between TCP connect and READY: bounded by socket.connection.setup.timeout.ms.
SETUP_STATES = frozenset({ConnState.CONNECTING, ConnState.TLS_HANDSHAKE, ConnState.NEGOTIATING,
                          ConnState.AUTHENTICATING})


class InFlight:
    """One request: queued, written, or answered.

    ``response`` is the decoded body (a dict) once answered; ``error`` a
    :class:`~kwire.errors.KwireError` if it failed (connection lost, timed out, version
    unsupported, undecodable).  Exactly one of them is set once ``done``.
    Produce with ``acks=0`` gets no response: it is done, with ``response=None``, once written.
    """

    __slots__ = ("api", "api_key", "version", "node_id", "correlation_id", "body", "response",
                 "error", "created_ms", "sent_ms", "received_ms", "sent_ns", "received_ns",
                 "timeout_ms", "deadline_ms",
                 "expect_response", "internal", "size_bytes", "version_range", "raw", "_body_source",
                 "_requested_version",
                 "_callbacks", "_api", "_done")

    def __init__(self, api_obj: Any, body: dict[str, Any] | Callable[[int], dict[str, Any]], *,
                 node_id: int | None, version: int | None,
                 timeout_ms: int, now_ms: int, internal: bool = False):
        self._api = api_obj
        self.api: str = api_obj.name
        self.api_key: int = api_obj.key
        self._requested_version = version
        self.version: int | None = version
        self.node_id = node_id
        self.correlation_id: int | None = None
        self._body_source = body
        self.body: dict[str, Any] | None = body if isinstance(body, dict) else None
        self.response: dict[str, Any] | None = None
        self.error: KwireError | None = None
        self.created_ms = now_ms
        self.sent_ms: int | None = None
        self.received_ms: int | None = None
        # time.monotonic_ns() when the last byte went out / the answer was read: rtt in µs
        self.sent_ns: int | None = None
        self.received_ns: int | None = None
        self.timeout_ms = timeout_ms
        self.deadline_ms = now_ms + timeout_ms
        self.expect_response = True
        self.internal = internal
        self.size_bytes = 0
        self.version_range: tuple[int | None, int | None] = (None, None)
        self.raw: bytes | None = None  # the response payload, when asked for (keep_raw)
        self._callbacks: list[Callable[[InFlight], Any]] | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    @property
    def rtt_ms(self) -> int | None:
        if self.sent_ms is None or self.received_ms is None:
            return None
        return self.received_ms - self.sent_ms

    @property
    def rtt_us(self) -> int | None:
        """Microseconds from the request's last byte written to its answer read."""
        if self.sent_ns is None or self.received_ns is None:
            return None
        return (self.received_ns - self.sent_ns) // 1000

    def add_callback(self, fn: Callable[[InFlight], Any]) -> None:
        """Call ``fn(self)`` when done (from the driver's poll; at once if already done)."""
        if self._done:
            fn(self)
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(fn)

    def result(self) -> dict[str, Any] | None:
        """The response, or raise the error."""
        if not self._done:
            raise RuntimeError(f"{self.api} request not done yet")
        if self.error is not None:
            raise self.error
        return self.response

    def __repr__(self) -> str:
        state = "done" if self._done else ("sent" if self.sent_ms is not None else "queued")
        extra = f" error={self.error!r}" if self.error is not None else ""
        return (f"<InFlight {self.api} v{self.version} node={self.node_id} "
                f"corr={self.correlation_id} {state}{extra}>")


def backoff_ms(failures: int, base_ms: int, max_ms: int, rng: random.Random | None = None) -> int:
    """Reconnect backoff after ``failures`` consecutive failures: base * 2^(failures-1), capped,
    with +-20% jitter so many clients do not reconnect in lockstep."""
    if failures <= 0 or base_ms <= 0:
        return 0
    exp = min(max_ms, base_ms * (1 << min(failures - 1, 30)))
    jitter = (rng or random).uniform(0.8, 1.2)
    return int(min(max_ms, exp * jitter))


class Connection:
    """The state of one broker connection (the socket itself is driven by the Transport)."""

    def __init__(self, node_id: int, host: str, port: int, max_frame_bytes: int):
        self.node_id = node_id
        self.host = host
        self.port = port
        self.state = ConnState.DISCONNECTED
        self.state_since_ms = 0
        self.sock: socket.socket | None = None
        self.max_frame_bytes = max_frame_bytes
        self.reader = FrameReader(max_frame_bytes)
        self.queue: deque[InFlight] = deque()  # waiting for READY
        self.in_flight: dict[int, InFlight] = {}  # written, awaiting response; in send order
        self.abandoned: dict[int, tuple[int, int]] = {}  # timed-out corr id -> (sent_ms, timeout_ms)
        self.discarding: tuple[int, int] | None = None  # (sent_ms, timeout_ms) of the answer being
        #                                              skipped by the reader (an abandoned one)
        self.out: deque[list[Any]] = deque()  # [memoryview, InFlight | None] not yet written
        self.api_versions: dict[int, tuple[int, int]] | None = None
        self.handshake: InFlight | None = None  # the set-up request in flight
        self.negotiation: ApiVersionsNegotiation | None = None  # the ApiVersions exchange (NEGOTIATING)
        self.failures = 0  # consecutive failed attempts
        self.setup_stalls = 0  # consecutive attempts given up for making no progress in setup
        self.next_attempt_ms = 0
        self.last_failure_ms: int | None = None
        self.last_error: KwireError | None = None
        self.last_recv_ms = 0
        self.write_registered = False
        self.addr_index = 0  # which getaddrinfo result to try next
        self.tls = None  # TlsSession while connected with TLS
        self.sasl: SaslExchange | None = None  # the SASL exchange during (RE)AUTHENTICATING
        self.sasl_session_lifetime_ms = 0  # KIP-368: the broker's answer, 0 = no limit
        self.reauth_at_ms = 0  # when to re-authenticate (KIP-368; 0 = never)
        self.reauthentications = 0  # completed in-band re-authentications of this connection
        self.dedicated = False  # a second connection for one purpose (group traffic): never
        #                         picked for requests to any broker (node_id None)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ready(self) -> bool:
        return self.state is ConnState.READY

    @property
    def load(self) -> int:
        return len(self.in_flight) + len(self.queue)

    def transition(self, new: ConnState, now_ms: int) -> None:
        if new not in _LEGAL[self.state]:
            raise AssertionError(f"connection to node {self.node_id}: illegal transition "
                                 f"{self.state.name} -> {new.name}")
        self.state = new
        self.state_since_ms = now_ms

    # --- the connection's life: every state change happens in one of these ---------------------

    def connecting(self, now_ms: int) -> None:
        """A connect attempt begins (the socket follows with :meth:`attach`)."""
        self.transition(ConnState.CONNECTING, now_ms)

    def attach(self, sock: socket.socket) -> None:
        """The attempt's socket, non-blocking, registered for reading and writing."""
        self.sock = sock
        self.reset_buffers()
        self.write_registered = True

    def connected(self, now_ms: int, tls: Any = None) -> None:
        """TCP is up: the TLS handshake (``tls``, a TlsSession) comes next, or ApiVersions."""
        self.last_recv_ms = now_ms
        if tls is not None:
            self.transition(ConnState.TLS_HANDSHAKE, now_ms)
            self.tls = tls
        else:
            self.transition(ConnState.NEGOTIATING, now_ms)

    def tls_established(self, now_ms: int) -> None:
        self.transition(ConnState.NEGOTIATING, now_ms)

    def authenticating(self, now_ms: int, exchange: SaslExchange, *, reauth: bool = False) -> None:
        """A SASL exchange begins: after ApiVersions, or (KIP-368) on a READY connection whose
        session is ending."""
        self.transition(ConnState.REAUTHENTICATING if reauth else ConnState.AUTHENTICATING, now_ms)
        self.sasl = exchange

    def become_ready(self, now_ms: int, reauth_at_ms: int = 0) -> None:
        """Set up (or re-authenticated): requests may go; the failure counts start over."""
        if self.state is ConnState.REAUTHENTICATING:
            self.reauthentications += 1
        self.handshake = None
        self.negotiation = None
        self.sasl = None
        self.reauth_at_ms = reauth_at_ms
        self.transition(ConnState.READY, now_ms)
        self.failures = 0
        self.setup_stalls = 0
        self.last_error = None

    def shut(self, now_ms: int, error: KwireError, *, failure: bool,
             next_attempt_ms: Callable[[int], int]) -> tuple[socket.socket | None, ConnState,
                                                             list[InFlight], InFlight | None]:
        """Disconnected (or closed on purpose, ``failure=False``).  Returns the socket to close,
        the state it was in, the requests that were written or being written (acks=0 ones
        included), and the set-up request in flight; the caller fails them.  On a failure the
        next attempt waits ``next_attempt_ms(failures)`` (the reconnect backoff)."""
        was = self.state
        sock, self.sock = self.sock, None
        in_flight = list(self.in_flight.values())
        handshake = self.handshake
        # acks=0 requests are not in in_flight; those not fully written are lost too.
        unsent = [item[1] for item in self.out if item[1] is not None and not item[1].expect_response]
        self.reset_buffers()
        if was is not ConnState.DISCONNECTED:
            self.transition(ConnState.DISCONNECTED, now_ms)
        self.api_versions = None
        if failure:
            self.failures += 1
            self.last_failure_ms = now_ms
            self.last_error = error
            self.next_attempt_ms = now_ms + next_attempt_ms(self.failures)
        return sock, was, in_flight + unsent, handshake

    # --- answers to requests that timed out: skipped unstored as they arrive ---------------------

    def abandon(self, correlation_id: int) -> InFlight:
        """Request ``correlation_id``, written, timed out: its answer, if it comes, is skipped."""
        f = self.in_flight.pop(correlation_id)
        self.abandoned[correlation_id] = (f.sent_ms if f.sent_ms is not None else f.created_ms, f.timeout_ms)
        return f

    def skip_abandoned(self) -> None:
        """The answer being read is to a request that timed out: skip the rest of it unstored
        (it may claim up to receive.message.max.bytes; nobody will read it)."""
        reader = self.reader
        if self.discarding is not None and not reader.discarding:
            self.discarding = None  # the skipped answer is over
        cid = reader.current_correlation_id
        if cid is not None:
            entry = self.abandoned.pop(cid, None)
            if entry is not None:
                reader.discard_current()
                self.discarding = entry

    def oldest_abandoned(self) -> tuple[int, int] | None:
        """(sent_ms, timeout_ms) of the oldest request that timed out unanswered (its answer
        may be arriving, or being skipped)."""
        if self.discarding is not None:
            if self.reader.discarding:
                return self.discarding
            self.discarding = None
        return next(iter(self.abandoned.values()), None)

    def reset_buffers(self) -> None:
        self.reader = FrameReader(self.max_frame_bytes)
        self.out.clear()
        self.in_flight = {}
        self.abandoned = {}
        self.discarding = None
        self.handshake = None
        self.negotiation = None
        self.write_registered = False
        self.tls = None
        self.sasl = None
        self.reauth_at_ms = 0

    def __repr__(self) -> str:
        return f"<Connection node={self.node_id} {self.address} {self.state.name}>"
