"""The consumer's driver: the background thread that owns the network and the state machines.

:class:`Driver` owns the NetworkClient, the SubscriptionState and every state machine
(ClassicGroupMember or ConsumerGroupMember, PositionManager, Fetcher).  Its loop is :meth:`Driver.run`:
:meth:`Driver.step` applies the application's commands, lets each machine ``poll(now_ms)`` for
requests, sends them, decodes fetched records and hands events over; then the driver waits in
``NetworkClient.poll`` until the deadline ``step`` returned or a response, and gives the
responses back to their machines (:meth:`Driver.on_done`).

The application thread (:class:`~kwire.consumer.Consumer`) and the driver talk only through a
:class:`Channel`: commands (frozen dataclasses, below) go one way, chunks of records and events
the other.  Each field of the channel has one writer, named beside it.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..errors import KafkaConnectionError, KafkaTimeoutError, KwireError
from ..net import NetworkClient, now_ms
from ..net.metadata import Metadata
from ..stats import ConsumerStats
from .assignors import get_assignor
from .classic import ClassicGroupMember
from .coordinator import GroupCoordinator
from .fetcher import FetchedChunk, Fetcher
from .member import ConsumerGroupMember
from .offsets import READ_COMMITTED, READ_UNCOMMITTED, ListOffsetsResult, PositionManager
from .subscription import FetchState, ResetStrategy, SubscriptionState
from .types import (
    COORDINATOR,
    COORDINATOR_BROKER,
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    AssignPartitions,
    CommitResult,
    CommittedResult,
    ErrorAction,
    LosePartitions,
    Request,
    RevokePartitions,
    StateMachine,
)

log = logging.getLogger("kwire.consumer")

_MAX_WAIT_MS = 1000          # the driver wakes at least this often
_UNKNOWN_TOPIC_REFRESH_MS = 1000
CLOSE_TIMEOUT_MS = 15000

TP = tuple[str, int]
Consumed = dict[TP, tuple[int, "int | None", int]]  # tp -> (next offset, leader epoch, fence)


class Future:
    """The answer to a command, set by the driver, waited for by the application."""
    __slots__ = ("_event", "value", "error")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def set(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error
        self._event.set()

    def wait(self, timeout_s: float | None) -> Any:
        if not self._event.wait(timeout_s):
            raise KafkaTimeoutError("the operation did not complete within the timeout")
        if self.error is not None:
            raise self.error
        return self.value


# --- commands: application -> driver ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Subscribe:
    topics: list[str]
    fut: Future


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    consumed: Consumed
    fut: Future


@dataclass(frozen=True, slots=True)
class Assign:
    """Manual assignment (or, inside on_assign, the offsets to start the group's partitions at):
    ``parts`` [(topic, partition, offset or None, leader epoch or None)]."""
    parts: list[tuple[str, int, int | None, int | None]]
    incremental: bool
    fut: Future


@dataclass(frozen=True, slots=True)
class Unassign:
    tps: list[TP] | None  # None: all
    fut: Future


@dataclass(frozen=True, slots=True)
class Seek:
    tp: TP
    offset: int
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class Pause:
    items: list[tuple[TP, tuple[int, int | None] | None]]  # (tp, the application's position: offset, epoch)


@dataclass(frozen=True, slots=True)
class Resume:
    tps: list[TP]


@dataclass(frozen=True, slots=True)
class Commit:
    offsets: dict[TP, Any]  # tp -> OffsetAndMetadata
    fut: Future | None  # None: asynchronous, the result goes to on_commit only


@dataclass(frozen=True, slots=True)
class FetchCommitted:
    tps: list[TP]
    fut: Future
    timeout_ms: int | None


@dataclass(frozen=True, slots=True)
class ListOffsets:
    timestamps: dict[TP, int]
    fut: Future
    timeout_ms: int | None
    isolation: int


@dataclass(frozen=True, slots=True)
class AckRevoke:
    """on_revoke returned: ``consumed`` the positions to commit before the partitions go."""
    ack_id: int
    consumed: Consumed


@dataclass(frozen=True, slots=True)
class Positions:
    tps: list[TP]
    fut: Future


@dataclass(frozen=True, slots=True)
class Watermarks:
    tp: TP
    fut: Future


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    topic: str | None
    fut: Future
    timeout_ms: int | None


@dataclass(frozen=True, slots=True)
class Close:
    consumed: Consumed
    fut: Future


@dataclass(frozen=True, slots=True)
class Stop:
    """End the driver's loop at once (the consumer is being collected)."""


Command = (Subscribe | Unsubscribe | Assign | Unassign | Seek | Pause | Resume | Commit
           | FetchCommitted | ListOffsets | AckRevoke | Positions | Watermarks | FetchMetadata
           | Close | Stop)


# --- events: driver -> application (besides the state machines' actions) ----------------------------

@dataclass(frozen=True, slots=True)
class SeekDone:
    tp: TP
    fence: int


@dataclass(frozen=True, slots=True)
class AssignmentChanged:
    """Manual assignment changed: ``added`` {tp: created fence}, ``removed`` [tp]."""
    added: dict[TP, int]
    removed: list[TP]


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """A coordinator action with the fences the application needs."""
    action: AssignPartitions | RevokePartitions | LosePartitions
    fences: dict[TP, int]


@dataclass(frozen=True, slots=True, repr=False)
class PartitionEOF:
    """``enable.partition.eof``: the application has had every record of ``topic`` [``partition``]
    before ``offset``, the partition's high watermark when it was fetched.  poll() returns it
    (consume() returns it alone in its list), once per end reached: again only after more
    records, a seek or a new assignment."""
    topic: str
    partition: int
    offset: int
    fence: int

    def __repr__(self) -> str:
        return f"PartitionEOF({self.topic} [{self.partition}] at {self.offset})"


class Channel:
    """What the two threads share.  Deques (thread-safe append/popleft) carry the traffic; every
    other field has one writer."""

    def __init__(self) -> None:
        self.q: deque[Any] = deque()           # driver -> app: chunks and events, in fetch order
        self.urgent: deque[Any] = deque()      # driver -> app: group events, ahead of the chunks
        self.cmds: deque[Command] = deque()  # app -> driver
        self.released: deque[tuple[TP, int]] = deque()  # app -> driver: bytes taken from the buffer
        self.cond = threading.Condition()  # the driver notifies a waiting application
        self.app_waiting = False          # app writes: waiting on cond for the queue
        self.in_poll = False              # app writes: blocked inside poll/consume/close
        self.closing = False              # app writes: close() has begun
        self.last_poll_ms = 0             # app writes
        self.consumed: Consumed = {}      # app writes: what the application has consumed
        self.consumed_ver = 0             # app writes: bumped when `consumed` changed
        self.driver_error: BaseException | None = None  # driver writes: it stopped on this
        self.driver_done = threading.Event()            # driver sets: its loop ended


class Driver:
    """The driver thread's side of a Consumer (see the module docstring)."""

    def __init__(self, cfg: Config, ch: Channel, *, tracer: Any = None, network: Any = None,
                 clock: Callable[[], int] = now_ms) -> None:
        """``network``: an object with NetworkClient's surface in place of one (tests drive the
        driver's real step() against an in-memory broker with it); ``clock``: milliseconds,
        monotonic (a fake clock in those tests)."""
        self.config = cfg
        self._ch = ch
        self._q, self._urgent, self._cond = ch.q, ch.urgent, ch.cond
        self._clock = clock
        self._net = network if network is not None else NetworkClient(
            cfg, tracer=tracer, role="consumer", allow_auto_topic_creation=cfg.allow_auto_create_topics)
        self._md: Metadata = self._net.metadata
        now = clock()
        self._subs = SubscriptionState(cfg.auto_offset_reset)
        self._group_id = cfg.group_id
        member_kw = {"remote_assignor": cfg.group_remote_assignor} \
            if cfg.group_protocol == "consumer" else {}
        self._coord: GroupCoordinator = (ConsumerGroupMember if member_kw else ClassicGroupMember)(
            self._subs, group_id=cfg.group_id, **member_kw,
            assignors=[get_assignor(n) for n in cfg.partition_assignment_strategy],
            group_instance_id=cfg.group_instance_id, session_timeout_ms=cfg.session_timeout_ms,
            rebalance_timeout_ms=cfg.max_poll_interval_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms, retry_backoff_ms=cfg.retry_backoff_ms,
            request_timeout_ms=cfg.request_timeout_ms, enable_auto_commit=cfg.enable_auto_commit,
            auto_commit_interval_ms=cfg.auto_commit_interval_ms, client_rack=cfg.client_rack,
            now_ms=now)
        self._isolation = READ_COMMITTED if cfg.isolation_level == "read_committed" else READ_UNCOMMITTED
        self._positions = PositionManager(self._subs, self._md, isolation_level=self._isolation,
                                          retry_backoff_ms=cfg.retry_backoff_ms,
                                          request_timeout_ms=cfg.request_timeout_ms)
        self._fetcher = Fetcher(
            self._subs, self._md, fetch_min_bytes=cfg.fetch_min_bytes,
            fetch_max_wait_ms=cfg.fetch_wait_max_ms, fetch_max_bytes=cfg.fetch_max_bytes,
            max_partition_fetch_bytes=cfg.max_partition_fetch_bytes,
            buffer_budget_bytes=cfg.queued_max_messages_kbytes * 1024,
            read_committed=self._isolation == READ_COMMITTED, check_crcs=cfg.check_crcs,
            client_rack=cfg.client_rack, retry_backoff_ms=cfg.retry_backoff_ms,
            request_timeout_ms=cfg.request_timeout_ms,
            max_decompressed_bytes=cfg.fetch_max_decompressed_bytes)
        # every machine, in the order the driver polls them
        self._machines: tuple[StateMachine, ...] = (self._coord, self._positions, self._fetcher)
        self._raw: deque[Any] = deque()           # fetched chunks not decoded yet
        self._decoded_bytes = 0              # decoded and queued, not yet released by the app
        self._inflight: dict[Any, Any] = {}            # NetworkClient future -> Request (or a callback)
        self._seen_consumed_ver = 0
        self._md_version = -1
        self._next_unknown_refresh_ms = 0
        self._close_deadline_ms: int | None = None
        self._close_future: Future | None = None
        self._eof_at: dict[TP, tuple[int, int]] | None = {} if cfg.enable_partition_eof else None  # tp -> (offset, fence)
        self._auth_reported: BaseException | None = None  # the last one pushed
        self._stats = ConsumerStats.maybe(cfg, self._net, now)  # None: statistics off

    # --- what the application may ask of the driver's state (racy reads, for hints only) --------

    def wants_wakeup(self) -> bool:
        """Released bytes are of use to the driver now: chunks wait to be decoded, or the
        fetcher stopped for want of room."""
        return bool(self._raw) or self._fetcher.starved

    def wakeup(self) -> None:
        self._net.wakeup()

    # --- the loop ---------------------------------------------------------------------------------

    def run(self) -> None:
        """The thread's body: step, wait for the network, hand back the responses."""
        ch = self._ch
        try:
            while True:
                timeout = self.step(self._clock())
                if timeout is None:
                    break
                done = self._net.poll(timeout)
                auth = self._net.authentication_error
                if auth is not None and auth is not self._auth_reported:
                    # Wrong credentials or an untrusted broker: the application hears of it at
                    # once (consume() raises it, as Java's poll() does) instead of waiting on
                    # retries that cannot succeed; the network client's backoff paces them.
                    self._auth_reported = auth
                    self._push(auth)
                if done:
                    self.on_done(done)
        except BaseException as exc:  # a bug or a dead network client: tell the application
            log.exception("the consumer's driver thread failed")
            ch.driver_error = exc if isinstance(exc, KwireError) else KwireError(
                f"consumer driver failed: {exc!r}")
            self._q.append(ch.driver_error)  # (nothing decodes the raw chunks any more)
            if ch.app_waiting:
                with self._cond:
                    self._cond.notify()
        finally:
            fut = self._close_future
            try:
                self._net.close()
            except Exception:
                pass
            ch.driver_done.set()
            if fut is not None:
                fut.set(None)
            with self._cond:
                self._cond.notify_all()

    def step(self, now: int) -> int | None:
        """One turn of the loop without waiting: the milliseconds to wait for the network next,
        or None when the driver is done (stopped, or closed)."""
        if self._apply_commands(now):
            return None
        self._sync_from_app(now)
        self._metadata_step(now)
        self._send_all(now)  # (before decoding: e.g. a Fetch the released bytes allow)
        self._decode_ahead()
        self._dispatch_actions()
        if self._stats is not None and self._stats.due(now):
            self._push_urgent(self._stats.driver_report(self, now))
        if self._close_future is not None and self._close_complete(now):
            return None
        return self._wait_ms(now)

    def on_done(self, done: list[Any]) -> None:
        """Completed network futures: each goes back to the machine that asked."""
        fetcher = self._fetcher
        raw: list[FetchedChunk] = []
        eof: list[TP] | None = [] if self._eof_at is not None else None
        for f in done:
            req = self._inflight.pop(f, None)
            if req is None:
                continue
            if not isinstance(req, Request):
                req(f)
                continue
            resp = f.error if f.error is not None else f.response
            result = req.owner.on_response(req, resp, self._clock())
            if req.owner is fetcher:
                if result:
                    raw.extend(result)
                if eof is not None and isinstance(req.context, dict):
                    eof.extend(req.context.get("offsets", ()))
        if eof:
            self._report_eof(eof, raw)
        if raw:
            # Positions already moved past the fetched batches (from their headers): ask for
            # the next data first, then decode while the broker works on it.
            self._send_all(self._clock())
            self._raw.extend(raw)
            self._decode_ahead()
        self._dispatch_actions()

    # --- driver -> application --------------------------------------------------------------------

    def _push(self, item: Any) -> None:
        """Queue an event for the application, after every chunk fetched before it (behind
        the raw chunks, which are decoded only as the application makes room)."""
        (self._raw if self._raw else self._q).append(item)
        if self._ch.app_waiting:
            with self._cond:
                self._cond.notify()

    def _push_urgent(self, item: Any) -> None:
        """Queue a group event for the application ahead of every buffered chunk: the next
        poll()/consume() handles it before handing out another record."""
        self._urgent.append(item)
        if self._ch.app_waiting:
            with self._cond:
                self._cond.notify()

    def _decode_next(self) -> None:
        """The next piece of the first raw chunk (or the event queued behind the chunks)."""
        raw = self._raw
        chunk = raw[0]
        if type(chunk) is not FetchedChunk:
            self._q.append(raw.popleft())
        else:
            st = self._subs.get(chunk.tp)
            if st is None or st.fence != chunk.fence:
                raw.popleft()
                self._fetcher.finish(chunk)  # seeked, paused or revoked since
                return
            piece = self._fetcher.decode_piece(chunk, self._fetcher.piece_bytes)
            if raw[0].done:
                raw.popleft()
            if piece is None:
                return
            if self._stats is not None:
                self._stats.on_chunk(piece)
            self._decoded_bytes += piece.nbytes
            self._q.append(piece)
        if self._ch.app_waiting:
            with self._cond:
                self._cond.notify()

    def _decode_ahead(self) -> None:
        raw = self._raw
        ahead = self._fetcher.decode_ahead_bytes
        while raw and (self._decoded_bytes < ahead or type(raw[0]) is not FetchedChunk):
            self._decode_next()

    def _wait_ms(self, now: int) -> int:
        ds = [m.next_deadline_ms() for m in self._machines]
        d = min((x for x in ds if x is not None), default=now + _MAX_WAIT_MS)
        if self._close_deadline_ms is not None:
            d = min(d, self._close_deadline_ms)
        if self._stats is not None and not self._stats.pending:
            d = min(d, self._stats.next_ms)
        if self._ch.released or self._ch.cmds or (self._raw and self._decoded_bytes <
                                                  self._fetcher.decode_ahead_bytes):
            return 0
        return int(max(0, min(d - now, _MAX_WAIT_MS)))

    def _report_eof(self, tps: list[TP], raw: list[FetchedChunk]) -> None:
        """enable.partition.eof: a partition whose position reached its high watermark, after
        its records (_push queues behind the raw chunks, so `raw` is queued first)."""
        assert self._eof_at is not None
        for tp in tps:
            st = self._subs.get(tp)
            if st is None or not st.fetchable or st.position is None:
                continue
            off = st.position.offset
            if off == st.high_watermark and self._eof_at.get(tp) != (off, st.fence):
                self._eof_at[tp] = (off, st.fence)
                if raw:
                    self._raw.extend(raw)
                    raw.clear()
                self._push(PartitionEOF(tp[0], tp[1], off, st.fence))

    def _dispatch_actions(self) -> None:
        for a in self._coord.drain_actions():
            if isinstance(a, CommitResult):
                if isinstance(a.token, Future):
                    a.token.set(a)
                if self.config.on_commit is not None:
                    self._push(a)
                if a.error is not None and not a.user:
                    log.warning("auto commit failed: %s", a.error)
            elif isinstance(a, CommittedResult):
                if isinstance(a.token, Future):
                    a.token.set(a)
            elif isinstance(a, (AssignPartitions, RevokePartitions, LosePartitions)):
                fences = {}
                if isinstance(a, AssignPartitions):
                    for tp in a.partitions:
                        st = self._subs.get(tp)
                        if st is not None:
                            fences[tp] = st.created_fence
                    self._md.add_topics({t for t, _ in a.partitions})
                self._push_urgent(GroupEvent(a, fences))
            else:
                self._push_urgent(a)  # the group's errors
        for a in self._positions.drain_actions():
            if isinstance(a, ListOffsetsResult):
                if isinstance(a.token, Future):
                    a.token.set(a)
            else:
                self._push(a)
        for a in self._fetcher.drain_actions():
            self._push(a)

    # --- application -> driver --------------------------------------------------------------------

    def _sync_from_app(self, now: int) -> None:
        ch = self._ch
        rel = ch.released
        while rel:
            tp, n = rel.popleft()
            self._fetcher.release(tp, n)
            self._decoded_bytes -= n
        if ch.consumed_ver != self._seen_consumed_ver:
            self._seen_consumed_ver = ch.consumed_ver
            self._mark(ch.consumed.copy())
        coord = self._coord
        coord.app_in_poll = ch.in_poll or ch.closing
        if ch.last_poll_ms > coord.last_app_poll_ms:
            coord.on_app_poll(ch.last_poll_ms)

    def _apply_commands(self, now: int) -> bool:
        """Apply the application's commands in order; True on Stop."""
        cmds = self._ch.cmds
        while cmds:
            cmd = cmds.popleft()
            try:
                match cmd:
                    case Stop():
                        return True
                    case Subscribe():
                        self._subscribe(cmd)
                    case Unsubscribe():
                        self._mark(cmd.consumed)
                        if self._subs.is_auto:
                            self._coord.leave(now, revoke=False)
                        cmd.fut.set(None)
                    case Assign():
                        self._assign(cmd)
                    case Unassign():
                        self._unassign(cmd)
                    case Seek():
                        if cmd.tp in self._subs:
                            self._apply_offset(cmd.tp, cmd.offset, cmd.leader_epoch)
                            self._push(SeekDone(cmd.tp, self._subs.state(cmd.tp).fence))
                    case Pause():
                        self._pause(cmd)
                    case Resume():
                        self._subs.resume(cmd.tps)
                    case Commit():
                        self._coord.commit(cmd.offsets, now, token=cmd.fut)
                    case FetchCommitted():
                        self._coord.fetch_committed(cmd.tps, now, token=cmd.fut,
                                                    timeout_ms=cmd.timeout_ms)
                    case ListOffsets():
                        self._md.add_topics({t for t, _ in cmd.timestamps})
                        self._positions.list_offsets(cmd.timestamps, now, token=cmd.fut,
                                                     timeout_ms=cmd.timeout_ms,
                                                     isolation_level=cmd.isolation)
                    case AckRevoke():
                        self._mark(cmd.consumed)
                        self._coord.ack_revoke(cmd.ack_id, now)
                    case Positions():
                        cmd.fut.set(self._positions_of(cmd.tps))
                    case Watermarks():
                        cmd.fut.set(self._watermarks(cmd.tp))
                    case FetchMetadata():
                        self._fetch_metadata(cmd)
                    case Close():
                        self._mark(cmd.consumed)
                        self._coord.leave(now, revoke=False, close=True)
                        self._close_future = cmd.fut
                        self._close_deadline_ms = now + CLOSE_TIMEOUT_MS
            except Exception as exc:
                fut = getattr(cmd, "fut", None)
                if fut is not None:
                    fut.set(error=exc)
                else:
                    self._push(ErrorAction(exc))
        return False

    def _mark(self, consumed: Consumed) -> None:
        for tp, (off, ep, fence) in consumed.items():
            self._subs.mark_consumed(tp, off, ep, fence=fence)

    def _subscribe(self, cmd: Subscribe) -> None:
        topics = cmd.topics
        changed = self._subs.subscribe(topics)
        if self._subs.is_pattern:
            self._md.want_all_topics()
        self._md.add_topics([t for t in topics if not t.startswith("^")])
        self._md.request_update()
        if changed:
            self._coord.on_subscription_changed()
        cmd.fut.set(None)

    def _assign(self, cmd: Assign) -> None:
        subs = self._subs
        parts = cmd.parts
        tps = [(t, p) for t, p, _, _ in parts]
        if subs.is_auto:
            # inside on_assign: the group decided the partitions; apply the offsets given
            for t, p, off, ep in parts:
                if (t, p) in subs:
                    self._apply_offset((t, p), off, ep)
            cmd.fut.set(None)
            return
        old = set(subs.assigned())
        new = list(dict.fromkeys((list(subs.assigned()) if cmd.incremental else []) + tps))
        subs.assign_manual(new)
        self._md.add_topics({t for t, _ in new})
        for t, p, off, ep in parts:
            self._apply_offset((t, p), off, ep)
        added = {tp: subs.state(tp).created_fence for tp in new if tp not in old}
        removed = [tp for tp in old if tp not in set(new)]
        self._push(AssignmentChanged(added, removed))
        cmd.fut.set(None)

    def _apply_offset(self, tp: TP, offset: int | None, leader_epoch: int | None) -> None:
        st = self._subs.get(tp)
        if st is None:
            return
        if offset is None or offset in (OFFSET_INVALID, OFFSET_STORED):
            return  # committed offset (or the reset policy) decides
        if offset == OFFSET_BEGINNING:
            self._subs.request_reset(tp, ResetStrategy.EARLIEST)
        elif offset == OFFSET_END:
            self._subs.request_reset(tp, ResetStrategy.LATEST)
        elif offset >= 0:
            self._subs.seek(tp, offset, leader_epoch)

    def _unassign(self, cmd: Unassign) -> None:
        subs = self._subs
        if subs.is_auto:
            raise KwireError("unassign() while subscribed: use unsubscribe()")
        old = subs.assigned()
        keep = [] if cmd.tps is None else [tp for tp in old if tp not in set(cmd.tps)]
        subs.assign_manual(keep)
        self._push(AssignmentChanged({}, [tp for tp in old if tp not in set(keep)]))
        cmd.fut.set(None)

    def _pause(self, cmd: Pause) -> None:
        subs = self._subs
        for tp, app_pos in cmd.items:
            st = subs.get(tp)
            if st is None:
                continue
            st.paused = True
            if st.state is FetchState.FETCHING:
                # rewind to what the application has seen: buffered records are dropped
                offset = app_pos[0] if app_pos is not None else st.fence_offset
                if offset is not None:
                    subs.seek(tp, offset)
                    if app_pos is not None and app_pos[1] is not None and st.position is not None:
                        st.position = st.position._replace(offset_epoch=app_pos[1])
            self._push(SeekDone(tp, st.fence))

    def _positions_of(self, tps: list[TP]) -> dict[TP, tuple[int, int | None]]:
        out = {}
        for tp in tps:
            st = self._subs.get(tp)
            if st is not None and st.state is FetchState.FETCHING and st.fence_offset is not None:
                out[tp] = (st.fence_offset, st.position.offset_epoch if st.position else None)
        return out

    def _watermarks(self, tp: TP) -> tuple[int, int]:
        st = self._subs.get(tp)
        if st is None:
            return (OFFSET_INVALID, OFFSET_INVALID)
        return (st.log_start_offset if st.log_start_offset >= 0 else OFFSET_INVALID,
                st.high_watermark if st.high_watermark >= 0 else OFFSET_INVALID)

    def _fetch_metadata(self, cmd: FetchMetadata) -> None:
        names = None if cmd.topic is None else [cmd.topic]
        md = Metadata()
        fut = cmd.fut

        def done(f: Any) -> None:
            if f.error is not None:
                fut.set(error=f.error)
                return
            md.update(f.response, self._clock(), all_topics=True)
            fut.set(md.snapshot())

        f = self._net.send(None, "Metadata", lambda v: md.request_body(v, names),
                           timeout_ms=cmd.timeout_ms)
        self._inflight[f] = done

    def _close_complete(self, now: int) -> bool:
        if self._coord.closed:
            return True
        assert self._close_deadline_ms is not None
        if now >= self._close_deadline_ms:
            log.warning("close(): gave up waiting for the group (state %s)", self._coord.state.name)
            return True
        return False

    # --- metadata ---------------------------------------------------------------------------------

    def _metadata_step(self, now: int) -> None:
        md = self._md
        if self._coord.needs_metadata:
            md.request_update()
        if self._subs.is_auto and not self._subs.is_pattern and now >= self._next_unknown_refresh_ms:
            missing = [t for t in self._subs.topics if md.partitions_for(t) is None]
            if missing and md.updated_ms >= 0:
                md.request_update()
                self._next_unknown_refresh_ms = now + _UNKNOWN_TOPIC_REFRESH_MS
        if self._subs.is_pattern and md.is_stale(now):
            md.request_update()
        if md.version != self._md_version:
            self._md_version = md.version
            counts = {}
            ids = {}
            for name, _t in md.topics.items():
                parts = md.partitions_for(name)
                if parts is not None:
                    counts[name] = len(parts)
                    tid = md.topic_id(name)
                    if tid is not None:
                        ids[name] = tid
            self._coord.on_metadata(counts, ids, now)
            self._positions.on_metadata()

    # --- requests ---------------------------------------------------------------------------------

    def _send_all(self, now: int) -> None:
        if self._group_id is None:
            self._positions.reset_initializing()  # (no committed offsets to wait for)
        reqs = [req for m in self._machines for req in m.poll(now)]
        for req in reqs:
            self._send(req)

    def _send(self, req: Request) -> None:
        node: int | None
        if req.node in (COORDINATOR_BROKER, COORDINATOR):
            coord = self._coord
            node = coord.coordinator_id
            if node is None:
                req.owner.on_response(req, KafkaConnectionError("the group coordinator is unknown"),
                                      self._clock())
                return
            # COORDINATOR (membership calls) always gets the coordinator's own connection: a
            # JoinGroup held for the rebalance does not stop the fetches.  Commits and offset
            # look-ups (COORDINATOR_BROKER) go there too, so they do not queue behind a
            # long-poll Fetch (a broker answers one request per connection at a time: a
            # caught-up consumer's commit waited fetch.wait.max.ms) -- unless a
            # JoinGroup/SyncGroup the broker may hold for a whole rebalance is in flight there.
            if req.node == COORDINATOR or not self._membership_call_in_flight():
                node = self._net.group_node(node, coord.coordinator_host, coord.coordinator_port)
        else:
            node = req.node  # type: ignore[assignment]  # a broker id, or None: any broker
        f = self._net.send(node, req.api, req.body, timeout_ms=req.timeout_ms,
                           min_version=req.min_version, max_version=req.max_version)
        self._inflight[f] = req

    def _membership_call_in_flight(self) -> bool:
        return any(getattr(r, "api", None) in ("JoinGroup", "SyncGroup") for r in self._inflight.values())
