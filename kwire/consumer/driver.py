"""The consumer's driver: the background thread that owns the network and the state machines.

:class:`Driver` owns the NetworkClient, the SubscriptionState and every state machine
(ClassicGroupMember or ConsumerGroupMember, PositionManager, Fetcher).  Its loop is :meth:`Driver.run`:
:meth:`Driver.step` applies the application's commands, lets each machine ``poll(now_ms)`` (one
:class:`~.types.PollResult`: requests and the next deadline), sends them, decodes fetched records and hands events over; then the driver waits in
``NetworkClient.poll`` until the deadline ``step`` returned or a response, and gives the
responses back to their machines (:meth:`Driver.on_done`).

The application thread (:class:`~kwire.consumer.Consumer`) and the driver talk only through a
:class:`~kwire.consumer.channel.Channel`: commands (frozen dataclasses, :mod:`.channel`) go one
way, chunks of records and events the other.  Each field of the channel has one writer, named
beside it.  The commands are applied by :mod:`.driver_commands`.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..config import Config
from ..errors import KafkaConnectionError, KwireError
from ..net import NetworkClient, now_ms
from ..net.metadata import Metadata
from ..stats import ConsumerStats
from .assignors import get_assignor
from .channel import (
    TP,
    Channel,
    Future,
    GroupEvent,
    PartitionEOF,
)
from .classic import ClassicGroupMember
from .coordinator import GroupCoordinator
from .driver_commands import CommandHandlers
from .fetcher import FetchedChunk, Fetcher
from .member import ConsumerGroupMember
from .offsets import READ_COMMITTED, READ_UNCOMMITTED, ListOffsetsResult, PositionManager
from .subscription import SubscriptionState
from .types import (
    COORDINATOR,
    COORDINATOR_BROKER,
    AssignPartitions,
    CommitResult,
    CommittedResult,
    LosePartitions,
    Request,
    RevokePartitions,
    StateMachine,
)

log = logging.getLogger("kwire.consumer")

_MAX_WAIT_MS = 1000          # the driver wakes at least this often
_UNKNOWN_TOPIC_REFRESH_MS = 1000


class Driver(CommandHandlers):
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
            # not given: sized per node from the answer (Fetcher, fetch_buffer.fetch_answer_bytes)
            max_partition_fetch_bytes=(cfg.max_partition_fetch_bytes
                                       if "max.partition.fetch.bytes" in cfg.user else None),
            buffer_budget_bytes=cfg.queued_max_messages_kbytes * 1024,
            read_committed=self._isolation == READ_COMMITTED, check_crcs=cfg.check_crcs,
            client_rack=cfg.client_rack, retry_backoff_ms=cfg.retry_backoff_ms,
            request_timeout_ms=cfg.request_timeout_ms,
            max_decompressed_bytes=cfg.fetch_max_decompressed_bytes)
        # every machine, in the order the driver polls them
        self._machines: tuple[StateMachine, ...] = (self._coord, self._positions, self._fetcher)
        self._due_ms: list[int | None] = []  # each machine's next deadline, from its last poll
        self._repoll = False  # a machine changed after its last poll: poll before waiting
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
        """Returned chunks are of use to the driver now: the fetcher stopped for want of room."""
        return self._fetcher.starved

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
            self._q.append(ch.driver_error)
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
        self._send_all(now)
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
        if raw:
            # Positions already moved past the fetched batches (from their headers): ask for
            # the next data first, then hand the raw chunks to the application, which decodes
            # them while the broker works on the next ones.
            self._send_all(self._clock())
            self._q.extend(raw)
            if self._ch.app_waiting:
                with self._cond:
                    self._cond.notify()
        if eof:
            self._report_eof(eof)
        self._dispatch_actions()

    # --- driver -> application --------------------------------------------------------------------

    def _push(self, item: Any) -> None:
        """Queue an event for the application, after every chunk fetched before it."""
        self._q.append(item)
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

    def _wait_ms(self, now: int) -> int:
        if self._repoll:  # a machine changed after its poll (a send failed at once): poll again
            return 0
        d = min((x for x in self._due_ms if x is not None), default=now + _MAX_WAIT_MS)
        if self._close_deadline_ms is not None:
            d = min(d, self._close_deadline_ms)
        if self._stats is not None and not self._stats.pending:
            d = min(d, self._stats.next_ms)
        if self._ch.released or self._ch.cmds:
            return 0
        return int(max(0, min(d - now, _MAX_WAIT_MS)))

    def _report_eof(self, tps: list[TP]) -> None:
        """enable.partition.eof: a partition whose position reached its high watermark, after
        its records (queued before this)."""
        assert self._eof_at is not None
        for tp in tps:
            st = self._subs.get(tp)
            if st is None or not st.fetchable or st.position is None:
                continue
            off = st.position.offset
            if off == st.high_watermark and self._eof_at.get(tp) != (off, st.fence):
                self._eof_at[tp] = (off, st.fence)
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
            self._fetcher.buffer.take_back(rel.popleft())
        if ch.consumed_ver != self._seen_consumed_ver:
            self._seen_consumed_ver = ch.consumed_ver
            self._mark(ch.consumed.copy())
        coord = self._coord
        coord.poll_interval.app_in_poll = ch.in_poll or ch.closing
        if ch.last_poll_ms > coord.poll_interval.last_app_poll_ms:
            coord.on_app_poll(ch.last_poll_ms)

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
        results = [m.poll(now) for m in self._machines]
        self._due_ms = [r.next_deadline_ms for r in results]
        self._repoll = False
        for r in results:
            for req in r.requests:
                self._send(req)

    def _send(self, req: Request) -> None:
        node: int | None
        if req.node in (COORDINATOR_BROKER, COORDINATOR):
            coord = self._coord
            node = coord.coordinator_id
            if node is None:
                req.owner.on_response(req, KafkaConnectionError("the group coordinator is unknown"),
                                      self._clock())
                self._repoll = True
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
