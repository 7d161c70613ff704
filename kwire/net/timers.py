"""The network client's deadlines, without I/O: when poll must wake up next, and what is due.

:class:`Timeouts` reads the connections (and the requests waiting for any broker) at ``now_ms``
and says what to do -- fail a request that timed out, close a connection whose set-up or
answer is overdue, renew a SASL session (KIP-368), drop idle receive buffers.  The
:class:`~kwire.net.client.NetworkClient` carries each action out before the next is worked out
(:meth:`Timeouts.due` is a generator), so an action sees the effects of the ones before it.

The limits:

* a request fails after its own ``timeout_ms``, queued, written or waiting for any broker;
* connection set-up (TCP, TLS, ApiVersions, SASL) is bounded by
  socket.connection.setup.timeout.ms, and by socket.connection.setup.stall.ms without progress
  (doubled per consecutive stalled attempt);
* a re-authentication gets its SaslHandshake's timeout;
* a ready connection whose oldest timed-out request has not had its answer completed within
  ``max(its timeout, request.timeout.ms)`` of being sent is closed: responses come in order, so
  whatever trickles in, everything behind it would wait too.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..errors import KafkaConnectionError, KafkaTimeoutError, KwireError
from .connection import SETUP_STATES, Connection, ConnState, InFlight

__all__ = ["Timeouts", "Expire", "Close", "Reauthenticate", "ReleaseSpares", "Action"]

IDLE_WAKE_MS = 60_000  # poll wakes up at least this often


@dataclass(frozen=True)
class Expire:
    """Request ``f`` timed out: take it from where it waits (``conn`` None: the requests for
    any broker; ``in_flight``: written, so its late answer must be skipped) and fail it."""

    f: InFlight
    error: KwireError
    conn: Connection | None = None
    in_flight: bool = False


@dataclass(frozen=True)
class Close:
    """Close ``conn`` with ``error``; ``stalled``: its set-up made no progress."""

    conn: Connection
    error: KwireError
    stalled: bool = False


@dataclass(frozen=True)
class Reauthenticate:
    conn: Connection


@dataclass(frozen=True)
class ReleaseSpares:
    conn: Connection


Action = Expire | Close | Reauthenticate | ReleaseSpares


class Timeouts:
    """The client's time limits, and what they make due."""

    def __init__(self, *, request_timeout_ms: int, setup_timeout_ms: int, setup_stall_ms: int) -> None:
        self.request_timeout_ms = request_timeout_ms
        self.setup_timeout_ms = setup_timeout_ms
        self.setup_stall_ms = setup_stall_ms

    def stall_ms(self, conn: Connection) -> int:
        """How long this setup attempt may go without progress: socket.connection.setup.stall.ms,
        doubled per consecutive stalled attempt, up to socket.connection.setup.timeout.ms."""
        return min(self.setup_timeout_ms, self.setup_stall_ms << min(conn.setup_stalls, 20))

    def answer_overdue_ms(self, oldest: tuple[int, int]) -> int:
        """When the answer to the oldest abandoned request ((sent_ms, timeout_ms)) is overdue."""
        return oldest[0] + max(oldest[1], self.request_timeout_ms)

    def next_wake_ms(self, now_ms: int, conns: Iterable[Connection], pending_any: Iterable[InFlight],
                     candidates: Iterable[Connection] | None, metadata_due_ms: int | None) -> int:
        """The earliest time something may be due.  ``candidates``: the connections a request
        for any broker may wait on (None when none waits); ``metadata_due_ms``: when the
        metadata wants refreshing (None: not watched)."""
        t = now_ms + IDLE_WAKE_MS
        if metadata_due_ms is not None:
            t = min(t, metadata_due_ms)
        for f in pending_any:
            t = min(t, f.deadline_ms)
        for c in candidates or ():
            if c.state is ConnState.DISCONNECTED:
                t = min(t, max(now_ms, c.next_attempt_ms))
        for conn in conns:
            if conn.state in SETUP_STATES:
                t = min(t, conn.state_since_ms + self.setup_timeout_ms,
                        max(conn.state_since_ms, conn.last_recv_ms) + self.stall_ms(conn))
            elif conn.reauth_at_ms and conn.state is ConnState.READY:
                t = min(t, max(now_ms, conn.reauth_at_ms))
            elif conn.state is ConnState.REAUTHENTICATING and conn.handshake is not None:
                t = min(t, conn.handshake.deadline_ms)
            if conn.queue:
                t = min(t, min(f.deadline_ms for f in conn.queue))
                if conn.state is ConnState.DISCONNECTED:
                    t = min(t, max(now_ms, conn.next_attempt_ms))
            if conn.in_flight:
                t = min(t, min(f.deadline_ms for f in conn.in_flight.values()))
            if conn.state is ConnState.READY and (conn.abandoned or conn.discarding is not None):
                oldest = conn.oldest_abandoned()
                if oldest is not None:
                    t = min(t, max(now_ms, self.answer_overdue_ms(oldest)))
        return t

    def due(self, now_ms: int, conns: Iterable[Connection], pending_any: Iterable[InFlight], *,
            waiting_note: str, spare_idle_ms: int) -> Iterator[Action]:
        """What is due at ``now_ms``, one action at a time; the caller carries each out before
        asking for the next.  ``waiting_note``: the brokers' last errors, for the message of a
        request for any broker that timed out."""
        for f in [f for f in pending_any if now_ms >= f.deadline_ms]:
            yield Expire(f, KafkaTimeoutError(f"{f.api} request timed out after {f.timeout_ms} ms "
                                              f"waiting for a broker connection{waiting_note}"))
        for conn in list(conns):
            yield from self._due_on(now_ms, conn, spare_idle_ms)

    def _due_on(self, now_ms: int, conn: Connection, spare_idle_ms: int) -> Iterator[Action]:
        where = f"node {conn.node_id} ({conn.address})"
        if conn.state in SETUP_STATES:
            if now_ms - conn.state_since_ms >= self.setup_timeout_ms:
                yield Close(conn, KafkaConnectionError(
                    f"connection setup to {where} timed out after {self.setup_timeout_ms} ms in state "
                    f"{conn.state.name} (socket.connection.setup.timeout.ms)"))
                return
            stall_ms = self.stall_ms(conn)
            if now_ms - max(conn.state_since_ms, conn.last_recv_ms) >= stall_ms:
                yield Close(conn, KafkaConnectionError(
                    f"connection setup to {where} made no progress for {stall_ms} ms in state "
                    f"{conn.state.name} (socket.connection.setup.stall.ms)"), stalled=True)
                return
        if conn.reauth_at_ms and conn.state is ConnState.READY and now_ms >= conn.reauth_at_ms:
            yield Reauthenticate(conn)  # KIP-368: renew the session in band
            if conn.sock is None:
                return
        elif conn.state is ConnState.REAUTHENTICATING and conn.handshake is not None \
                and now_ms >= conn.handshake.deadline_ms:
            yield Close(conn, KafkaConnectionError(
                f"SASL re-authentication with {where} got no answer within "
                f"{conn.handshake.timeout_ms} ms"))
            return
        if not conn.in_flight and now_ms - conn.last_recv_ms >= spare_idle_ms and conn.reader.spare_bytes:
            yield ReleaseSpares(conn)  # idle: do not keep large receive buffers around
        if conn.queue:
            last = f"; last error: {conn.last_error}" if conn.last_error else ""
            for f in [f for f in conn.queue if now_ms >= f.deadline_ms]:
                yield Expire(f, KafkaTimeoutError(f"{f.api} request to node {conn.node_id} timed out after "
                                                  f"{f.timeout_ms} ms before it could be sent{last}"), conn)
        if conn.in_flight:
            for f in [f for f in conn.in_flight.values() if now_ms >= f.deadline_ms and f is not conn.handshake]:
                yield Expire(f, KafkaTimeoutError(
                    f"{f.api} v{f.version} request to {where} got no response within {f.timeout_ms} ms"),
                    conn, in_flight=True)
        if (conn.abandoned or conn.discarding is not None) and conn.state is ConnState.READY:
            oldest = conn.oldest_abandoned()
            if oldest is not None and now_ms >= self.answer_overdue_ms(oldest):
                yield Close(conn, KafkaConnectionError(
                    f"{where} did not complete an answer within "
                    f"{max(oldest[1], self.request_timeout_ms)} ms of its request"))
