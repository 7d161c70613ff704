"""A consumer group member as a state machine that does no I/O: what both group protocols
share.  The membership protocol itself is a subclass's -- :class:`~kwire.consumer.classic.
ClassicGroupMember` (JoinGroup / SyncGroup / Heartbeat / LeaveGroup, below) or
:class:`~kwire.consumer.member.ConsumerGroupMember` (KIP-848, ConsumerGroupHeartbeat).

    coordinator.poll(now_ms)                      -> PollResult  what to send now, and when
                                                                 poll() next has work
    coordinator.on_response(request, resp, now)   response dict, or the exception it failed with
    coordinator.drain_actions()                   -> [Action]    callbacks / results for the app

Membership (:class:`MemberState`, legal transitions in ``_LEGAL``)::

    UNJOINED ─▶ FIND_COORDINATOR ─▶ [PREPARING] ─▶ JOINING ─▶ SYNCING ─▶ STABLE
                                     eager only:      │  MEMBER_ID_REQUIRED: rejoin with the
                                     on_revoke(all),  │  member id the broker gave
                                     ack, commit      └─ leader: run the assignor
    STABLE ── heartbeat every heartbeat.interval.ms ──▶ REBALANCE_IN_PROGRESS: rejoin
           ── UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION: partitions lost, rejoin (new member id
              for the former)
           ── FENCED_INSTANCE_ID (static membership): fatal
           ── NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / disconnect: find the coordinator
              again (membership kept); COORDINATOR_LOAD_IN_PROGRESS: retry after backoff
           ── no poll() for max.poll.interval.ms: LeaveGroup, partitions lost, rejoin when the
              application polls again
    close(): on_revoke, commit, LeaveGroup (dynamic members only) ─▶ CLOSED

Cooperative rebalancing (KIP-429): partitions are kept while rejoining (they are listed as
owned in the subscription); after SyncGroup only the difference moves: on_assign(added), and
on_revoke(removed) followed by another JoinGroup so the leader can hand them on.

Here (both protocols): the member state and its transition table, coordinator discovery
(:mod:`.discovery`: losing the coordinator while STABLE keeps the generation; heartbeats
resume once found), commits and committed-offset look-ups (:mod:`.group_offsets`),
revocations (:mod:`.revocation`: on_revoke, then the commit of what was consumed), liveness
(:mod:`.liveness`: max.poll.interval.ms; the session), leaving (:mod:`.leaving`), and the one
poll (a :class:`~.types.PollResult`) and response routing into which each protocol adds its part
(``_membership_poll``, ``_membership_deadlines``, ``_maybe_leave``, ``_take_pending_leave``,
``_reset_membership``, ``_can_commit_now``, ``_HANDLERS``).
"""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import KwireError
from ._codes import E
from .assignors import (
    COOPERATIVE,
    Assignor,
    rebalance_protocol,
)
from .discovery import CoordinatorDiscovery
from .group_offsets import Commits, CommittedOffsets
from .leaving import Leaving
from .liveness import Heartbeat, PollInterval
from .member_state import MemberState as MemberState  # (re-exported: the states' old home)
from .revocation import Revocation, Revocations
from .subscription import FetchState, SubscriptionState
from .types import (
    Action,
    ErrorAction,
    LosePartitions,
    OffsetAndMetadata,
    PollResult,
    Request,
)

log = logging.getLogger("kwire.consumer.coordinator")

TP = tuple[str, int]  # (topic, partition)
NO_GENERATION = -1
NEVER = None


_S = MemberState
_LEGAL: dict[MemberState, frozenset[MemberState]] = {
    _S.UNJOINED: frozenset({_S.UNJOINED, _S.FIND_COORDINATOR, _S.PREPARING, _S.JOINING,
                            _S.LEAVING, _S.CLOSED}),
    _S.FIND_COORDINATOR: frozenset({_S.FIND_COORDINATOR, _S.PREPARING, _S.JOINING, _S.UNJOINED,
                                    _S.LEAVING, _S.CLOSED}),
    _S.PREPARING: frozenset({_S.FIND_COORDINATOR, _S.JOINING, _S.UNJOINED, _S.LEAVING, _S.CLOSED}),
    _S.JOINING: frozenset({_S.JOINING, _S.SYNCING, _S.FIND_COORDINATOR, _S.UNJOINED, _S.LEAVING,
                           _S.CLOSED}),
    _S.SYNCING: frozenset({_S.STABLE, _S.JOINING, _S.FIND_COORDINATOR, _S.UNJOINED, _S.LEAVING,
                           _S.CLOSED}),
    _S.STABLE: frozenset({_S.PREPARING, _S.JOINING, _S.FIND_COORDINATOR, _S.UNJOINED, _S.LEAVING,
                          _S.CLOSED}),
    _S.LEAVING: frozenset({_S.UNJOINED, _S.CLOSED}),
    _S.CLOSED: frozenset(),
}

_COORDINATOR_GONE = {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE}


class IllegalMemberTransition(KwireError):
    """A bug: the coordinator asked for a transition its table does not allow."""


@dataclass
class _Ctx:
    """What a request was sent under, to recognise stale responses."""
    kind: str
    coordinator_epoch: int
    generation: int = NO_GENERATION
    member_id: str = ""
    payload: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


class GroupCoordinator(ABC):
    """A group member's state, coordinator, commits, revocations and liveness; the membership
    protocol is the subclass's (:class:`~kwire.consumer.classic.ClassicGroupMember`,
    :class:`~kwire.consumer.member.ConsumerGroupMember`)."""

    def __init__(self, subscriptions: SubscriptionState, *, group_id: str | None,
                 assignors: list[Assignor], group_instance_id: str | None = None,
                 session_timeout_ms: int = 45000, rebalance_timeout_ms: int = 300000,
                 heartbeat_interval_ms: int = 3000, retry_backoff_ms: int = 100,
                 request_timeout_ms: int = 30000, enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, client_rack: str | None = None,
                 now_ms: int = 0):
        self.subs = subscriptions
        self.group_id = group_id
        self.group_instance_id = group_instance_id or None
        self.assignors = list(assignors)
        if not self.assignors:
            raise ValueError("at least one partition assignor is needed")
        self.protocol = rebalance_protocol(self.assignors)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.client_rack = client_rack or None

        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation = NO_GENERATION
        self.is_leader = False
        self.failed: BaseException | None = None

        # coordinator discovery: a machine of its own (discovery.py)
        self.discovery = CoordinatorDiscovery(group_id, retry_backoff_ms=retry_backoff_ms)

        # joining (the classic protocol keeps the rest of its join/sync state)
        self._join_inflight = self._sync_inflight = False
        self._join_reason = "initial join"
        self._rejoin_needed = False

        # liveness: the session (heartbeats) and the poll limit, machines of their own (liveness.py)
        self.heartbeat = Heartbeat(heartbeat_interval_ms, session_timeout_ms, retry_backoff_ms, now_ms)
        self.poll_interval = PollInterval(rebalance_timeout_ms, now_ms)  # (max.poll.interval.ms)

        # leaving (close(), unsubscribe(), the poll limit): a machine of its own (leaving.py)
        self.leaving = Leaving()

        # commits and committed offsets: machines of their own (group_offsets.py)
        self.commits = Commits(self, auto_commit_interval_ms=auto_commit_interval_ms, now_ms=now_ms)
        self.committed = CommittedOffsets(self)
        # giving partitions up (on_revoke, commit, remove): a machine of its own (revocation.py)
        self.revocations = Revocations(subscriptions, self.commits, auto_commit=self.auto_commit)

        # metadata
        self._partitions_per_topic: dict[str, int] = {}
        self._topic_ids: dict[str, Any] = {}
        self._metadata_epoch = 0
        self.needs_metadata = False

        self._actions: list[Action] = []

    # --- the transition table ----------------------------------------------------------------

    _legal = _LEGAL  # the transition table (the KIP-848 member has its own)

    def _to(self, new: MemberState, reason: str = "") -> None:
        if new not in self._legal[self.state]:
            raise IllegalMemberTransition(f"{self.state.name} -> {new.name} is not allowed ({reason})")
        if new is not self.state:
            log.debug("group %s: %s -> %s %s", self.group_id, self.state.name, new.name, reason)
        self.state = new

    # --- the coordinator (kept by the discovery machine) -------------------------------------

    @property
    def coordinator_id(self) -> int | None:
        return self.discovery.node_id

    @property
    def coordinator_host(self) -> str | None:
        return self.discovery.host

    @property
    def coordinator_port(self) -> int | None:
        return self.discovery.port

    @property
    def _coordinator_epoch(self) -> int:
        return self.discovery.epoch

    # --- inputs from the driver --------------------------------------------------------------

    def drain_actions(self) -> list[Action]:
        out, self._actions = self._actions, []
        return out

    def on_metadata(self, partitions_per_topic: dict[str, int], topic_ids: dict[str, Any] | None = None,
                    now_ms: int = 0) -> None:
        """Fresh cluster metadata: partition counts of known topics (and their ids)."""
        self._partitions_per_topic = dict(partitions_per_topic)
        if topic_ids is not None:
            self._topic_ids = dict(topic_ids)
        self._metadata_epoch += 1
        self.needs_metadata = False
        self._check_subscription_against_metadata()

    def on_app_poll(self, now_ms: int) -> None:
        if self.poll_interval.on_app_poll(now_ms):
            self._join_reason = "rejoin after max.poll.interval.ms expired"

    def on_subscription_changed(self) -> None:
        """The application subscribed (again): join, or rejoin with the new topics."""
        self.failed = None
        self.leaving.resubscribed()
        if self.state in (MemberState.STABLE, MemberState.JOINING, MemberState.SYNCING):
            self.request_rejoin("subscription changed")

    def request_rejoin(self, reason: str) -> None:
        if not self._rejoin_needed:
            log.info("group %s: rejoin needed: %s", self.group_id, reason)
        self._rejoin_needed = True
        self._join_reason = reason

    def ack_revoke(self, ack_id: int, now_ms: int = 0) -> None:
        """The application ran on_revoke for the revocation with this id."""
        self.revocations.ack(ack_id)

    def commit(self, offsets: dict[TP, OffsetAndMetadata], now_ms: int, *, token: Any = None,
               user: bool = True, timeout_ms: int | None = None) -> int:
        """Queue an OffsetCommit; its outcome arrives as a CommitResult action.

        A group member commits only partitions it owns: one revoked or lost may already be
        another member's, whose progress the commit would overwrite (the broker checks the
        generation, not who owns what).  Such a commit fails with NotAssignedError, here and
        again when it is sent (the partition may be lost while the commit waits)."""
        return self.commits.commit(offsets, now_ms, token=token, user=user, timeout_ms=timeout_ms)

    def fetch_committed(self, tps: Iterable[TP], now_ms: int, *, token: Any = None,
                        timeout_ms: int | None = None) -> None:
        """Look committed offsets up; the answer arrives as a CommittedResult action."""
        self.committed.query(tps, now_ms, token=token, timeout_ms=timeout_ms)

    def leave(self, now_ms: int, *, revoke: bool = True, close: bool = False,
              reason: str = "the consumer is leaving") -> None:
        """Leave the group (unsubscribe, or close with ``close=True``).

        With ``revoke``, on_revoke is asked for first and awaited (ack_revoke); without it the
        application has already run it.  Consumed offsets are committed (auto commit) before
        LeaveGroup; static members send no LeaveGroup (KIP-345: their session lets them come
        back without a rebalance).
        """
        if self.state is MemberState.CLOSED:
            return
        self.leaving.start(close=close)
        self._rejoin_needed = False
        owned = self.subs.assigned() if self.subs.is_auto else []
        if self.revocations.current is not None and self.revocations.current.then == "leave":
            return
        if self.subs.is_auto and self.generation != NO_GENERATION and owned:
            self._start_revocation(owned, "leave", ask=revoke)
        elif not self.subs.is_auto and self.auto_commit and self.subs.assigned():
            # manual assignment: commit what was consumed, then close
            self._start_revocation(self.subs.assigned(), "leave", ask=False, remove=False)
        else:
            if owned:
                self._lose(owned, "leaving without a valid generation", reset_member_id=False)
            self._begin_leave(now_ms)

    @property
    def closed(self) -> bool:
        return self.state is MemberState.CLOSED

    # --- helpers -----------------------------------------------------------------------------

    def _member_topics(self) -> tuple[str, ...]:
        return tuple(self.subs.resolve(self._partitions_per_topic))

    def _want_membership(self) -> bool:
        return (self.group_id is not None and self.subs.is_auto and not self.leaving.requested
                and self.failed is None and not self.poll_interval.left)

    def _generation_valid(self) -> bool:
        return self.generation != NO_GENERATION

    def _offset_fetch_member(self) -> tuple[str | None, int]:
        """(member id, member epoch) OffsetFetch v9+ names; a classic member names none."""
        return None, -1

    def _ctx(self, kind: str, payload: Any = None, **extra: Any) -> _Ctx:
        return _Ctx(kind, self._coordinator_epoch, self.generation, self.member_id, payload, extra)

    def _fatal(self, err: BaseException) -> None:
        log.error("group %s: fatal: %s", self.group_id, err)
        self.failed = err
        self._actions.append(ErrorAction(err, fatal=True))
        owned = self.subs.assigned() if self.subs.is_auto else []
        if owned:
            self._lose(owned, str(err), reset_member_id=False)
        self.generation = NO_GENERATION
        if self.state not in (MemberState.LEAVING, MemberState.CLOSED):
            self._to(MemberState.UNJOINED, "fatal error")

    def _lose(self, tps: list[TP], reason: str, *, reset_member_id: bool) -> None:
        """Partitions are no longer ours without a chance to revoke (no commit)."""
        log.warning("group %s: lost %d partition(s): %s", self.group_id, len(tps), reason)
        if tps:
            self._actions.append(LosePartitions(sorted(tps), self.protocol == COOPERATIVE))
            self.subs.remove_assignment(tps)
        self.revocations.drop()

    def mark_coordinator_unknown(self, reason: str, now_ms: int) -> None:
        if self.coordinator_id is not None:
            log.info("group %s: coordinator %s unusable: %s", self.group_id, self.coordinator_id, reason)
        self.discovery.forget(now_ms)
        self.heartbeat.in_flight = False
        if self.state in (MemberState.JOINING, MemberState.SYNCING):
            # Membership is in flux; join again (same member id) once the coordinator is back.
            self._join_inflight = self._sync_inflight = False
            self._to(MemberState.FIND_COORDINATOR, reason)

    # --- poll ----------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        """What to send now, and when to poll again: every deadline in it is one this method
        acts on when it comes, so a past one never stays past."""
        out: list[Request] = []
        if self.state is MemberState.CLOSED:
            return PollResult(out, None)
        self._check_liveness(now_ms)
        out.extend(self._take_pending_leave())
        self._maybe_find_coordinator(now_ms, out)
        self._membership_poll(now_ms, out)
        self.commits.poll(now_ms, out)
        self.committed.poll(now_ms, out)
        return PollResult(out, self._next_due_ms())

    def _next_due_ms(self) -> int | None:
        """When poll() next has something to do, given the state it left (None: only a
        response or the application can change things)."""
        ds = []
        if self.state is MemberState.CLOSED:
            return None
        known = self.coordinator_id is not None
        d = self.discovery.deadline(not known and self._needs_coordinator())
        if d is not None:
            ds.append(d)
        self._membership_deadlines(known, ds)
        d = self.poll_interval.deadline_ms()
        if d is not None and self._generation_valid() and \
                self.state not in (MemberState.LEAVING, MemberState.CLOSED):
            ds.append(d)
        self.commits.deadlines(known, ds)
        self.committed.deadlines(known, ds)
        if self.revocations.due():
            ds.append(0)
        if self.state is MemberState.LEAVING and self.leaving.due(
                coordinator_known=known, commits_done=self.commits.all_done(), member_id=self.member_id):
            ds.append(0)
        return min(ds) if ds else None

    # --- liveness ------------------------------------------------------------------------------

    def _check_liveness(self, now_ms: int) -> None:
        if not self._generation_valid() or self.state in (MemberState.LEAVING, MemberState.CLOSED):
            return
        expired = self.poll_interval.expired(now_ms)
        if expired is not None:
            log.warning("group %s: %s", self.group_id, expired)
            member = (self.member_id, self.group_instance_id)  # (the goodbye names the old one)
            self._reset_membership("max.poll.interval.ms expired",
                                   reset_member_id=self.group_instance_id is None)
            self.leaving.owe(*member)
            self._actions.append(ErrorAction(expired))
            return
        if self.state in (MemberState.STABLE, MemberState.PREPARING) and \
                self.heartbeat.session_expired(now_ms) and self.coordinator_id is not None:
            # No heartbeat got through for a whole session: assume the coordinator is gone.
            self.mark_coordinator_unknown("session timeout without heartbeat response", now_ms)

    # --- coordinator discovery -----------------------------------------------------------------

    def _needs_coordinator(self) -> bool:
        if self.group_id is None:
            return False
        return (self._want_membership() or self.state not in (MemberState.UNJOINED, MemberState.CLOSED)
                or bool(self.commits.pending) or bool(self.committed.queries)
                or bool(self.subs.in_state(FetchState.INITIALIZING))
                or self.leaving.owed is not None)

    def _maybe_find_coordinator(self, now_ms: int, out: list[Request]) -> None:
        req = self.discovery.poll(now_ms, self._needs_coordinator(), context=self._ctx("find"),
                                  owner=self)
        if req is not None:
            out.append(req)

    def _on_find(self, req: Request, resp: Any, now_ms: int) -> None:
        before = self._coordinator_epoch
        err = self.discovery.on_response(resp, now_ms)
        if err is not None:
            self._fatal(err)
        if self._coordinator_epoch == before:
            return  # not found (yet)
        self.heartbeat.restart(now_ms, at_once=True)  # a member that kept its generation checks in at once
        log.info("group %s: coordinator is node %s (%s:%s)", self.group_id, self.coordinator_id,
                 self.coordinator_host, self.coordinator_port)

    # --- revocation ----------------------------------------------------------------------------

    def _start_revocation(self, tps: list[TP], then: str, *, ask: bool, remove: bool = True) -> None:
        ask_app = self.revocations.start(tps, then, ask=ask, remove=remove,
                                         incremental=self.protocol == COOPERATIVE)
        if ask_app is not None:
            self._actions.append(ask_app)

    def _progress_revocation(self, now_ms: int) -> None:
        done = self.revocations.progress(now_ms, lambda offsets, now: self.commit(
            offsets, now, user=False, timeout_ms=min(self.request_timeout_ms, self.rebalance_timeout_ms)))
        if done is not None:
            self._after_revocation(done, now_ms)

    def _after_revocation(self, r: Revocation, now_ms: int) -> None:
        """What a finished revocation (on_revoke ran, offsets committed) leads to (the classic
        protocol's eager "join" is its own)."""
        if r.then == "rejoin":
            self.request_rejoin("partitions revoked for reassignment")
        elif r.then == "leave":
            self._begin_leave(now_ms)

    # --- the membership protocol's part (each subclass's) ---------------------------------------

    @abstractmethod
    def _membership_poll(self, now_ms: int, out: list[Request]) -> None:
        """The membership protocol's requests of poll() (joining, heartbeats, leaving)."""

    @abstractmethod
    def _membership_deadlines(self, known: bool, ds: list[int]) -> None:
        """The membership protocol's deadlines (``known``: the coordinator is)."""

    @abstractmethod
    def _maybe_leave(self, now_ms: int, out: list[Request]) -> None:
        """While LEAVING: the goodbye to send, or _finish_leave() when none is owed."""

    @abstractmethod
    def _take_pending_leave(self) -> list[Request]:
        """A goodbye owed after max.poll.interval.ms expired (sent without waiting)."""

    @abstractmethod
    def _can_commit_now(self) -> bool:
        """Whether a member's commit can be sent now rather than fail fast."""

    @abstractmethod
    def _reset_membership(self, reason: str, *, reset_member_id: bool) -> None:
        """The group is lost (fenced, the poll limit, ...): partitions lost, UNJOINED."""

    @abstractmethod
    def _check_subscription_against_metadata(self) -> None:
        """What new metadata means for the membership."""

    # --- leaving -------------------------------------------------------------------------------

    def _begin_leave(self, now_ms: int) -> None:
        if self.state is not MemberState.LEAVING:
            self._to(MemberState.LEAVING, "leaving")

    def _on_leave(self, req: Request, resp: Any, now_ms: int) -> None:
        if self.leaving.answered(bool(req.context.extra.get("fire_and_forget"))) and \
                self.state is MemberState.LEAVING:
            self._finish_leave()

    def _finish_leave(self) -> None:
        self.generation = NO_GENERATION
        self.is_leader = False
        if self.group_instance_id is None:
            self.member_id = ""
        if self.subs.is_auto:
            self.subs.remove_assignment(self.subs.assigned())
        state, unsubscribe = self.leaving.finished()
        if unsubscribe:
            self.subs.unsubscribe()
        self._to(state, "closed" if state is MemberState.CLOSED else "left")

    # --- responses -----------------------------------------------------------------------------

    def on_response(self, request: Request, response: Any, now_ms: int) -> None:
        kind = request.context.kind
        if kind == "commit":
            self.commits.on_response(request, response, now_ms)
        elif kind in ("init_fetch", "query"):
            self.committed.on_response(request, response, now_ms)
        else:
            getattr(self, self._HANDLERS[kind])(request, response, now_ms)

    # discovery's and the membership's responses (commits and look-ups go to their machines);
    # each protocol adds its own
    _HANDLERS: dict[str, str] = {"find": "_on_find", "leave": "_on_leave"}

