"""The next-generation consumer group protocol (KIP-848) as a state machine that does no I/O.

``group.protocol=consumer``.  The broker runs the assignor; the member heartbeats
(ConsumerGroupHeartbeat) what it subscribes to and what it owns, and the answers carry its
member epoch and, when it changed, its target assignment::

    UNJOINED ─▶ [FIND_COORDINATOR] ─▶ JOINING ─────────────────▶ STABLE
                                      heartbeat with epoch 0,     heartbeat every
                                      every field                 heartbeat_interval_ms (the
                                         ▲                        broker's); a new target:
                                         │                        reconcile
    STABLE ── FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: partitions lost, JOINING with epoch 0
              (same member id)
           ── FENCED_INSTANCE_ID / UNRELEASED_INSTANCE_ID and other fatal errors: UNJOINED
           ── no poll() for max.poll.interval.ms: leave (epoch -1, -2 for a static member),
              partitions lost, JOINING again when the application polls
    close()/unsubscribe(): on_revoke, commit, heartbeat with epoch -1 (-2: a static member
    leaves for a while, the broker keeps its assignment for a session) ─▶ LEAVING ─▶ CLOSED

Reconciling a target assignment (the broker names topics by id; ids metadata does not know yet
wait for it, and the rest is reconciled meanwhile): the partitions leaving go first --
on_revoke, the application's acknowledgement, the commit of their consumed offsets -- then
on_assign for the partitions arriving, and a heartbeat at once whose ``TopicPartitions`` tells
the broker what the member now owns (the broker hands a partition to its next owner only
after that).  One reconciliation at a time: a target that arrives meanwhile is reconciled
next, from what the member then owns.

A heartbeat carries every field when the member joins or after a failed heartbeat; otherwise
only the fields that changed since the last answered one (null: unchanged).

Coordinator discovery, commits (OffsetCommit with the member epoch) and committed-offset
look-ups are the classic coordinator's (:class:`~kwire.consumer.coordinator.GroupCoordinator`),
which this class extends with the membership above.
"""
from __future__ import annotations

import base64
import logging
import re
import uuid
from typing import Any

from ._codes import E
from ._codes import error as broker_error
from .assignors import COOPERATIVE
from .coordinator import (
    _COORDINATOR_GONE,
    NO_GENERATION,
    GroupCoordinator,
    MemberState,
    _Ctx,
)
from .leaving import LeaveStep
from .revocation import Revocation
from .subscription import SubscriptionState
from .types import COORDINATOR, AssignPartitions, ErrorAction, Request

log = logging.getLogger("kwire.consumer.member")

TP = tuple[str, int]  # (topic, partition)
_Subscription = tuple[tuple[str, ...] | None, str | None]  # (names, regex) as the broker hears it

_S = MemberState
_LEGAL_848: dict[MemberState, frozenset[MemberState]] = {
    _S.UNJOINED: frozenset({_S.UNJOINED, _S.FIND_COORDINATOR, _S.JOINING, _S.LEAVING, _S.CLOSED}),
    _S.FIND_COORDINATOR: frozenset({_S.FIND_COORDINATOR, _S.JOINING, _S.UNJOINED, _S.LEAVING,
                                    _S.CLOSED}),
    _S.JOINING: frozenset({_S.JOINING, _S.STABLE, _S.FIND_COORDINATOR, _S.UNJOINED, _S.LEAVING,
                           _S.CLOSED}),
    _S.STABLE: frozenset({_S.STABLE, _S.JOINING, _S.FIND_COORDINATOR, _S.UNJOINED, _S.LEAVING,
                          _S.CLOSED}),
    _S.LEAVING: frozenset({_S.UNJOINED, _S.CLOSED}),
    _S.CLOSED: frozenset(),
    _S.PREPARING: frozenset(),
    _S.SYNCING: frozenset(),
}

LEAVE_EPOCH = -1          # a dynamic member leaves the group
STATIC_LEAVE_EPOCH = -2   # a static member leaves for now; its assignment waits a session

# Errors after which heartbeating again cannot help: the application must hear about them.
_FATAL = {E.FENCED_INSTANCE_ID, E.UNRELEASED_INSTANCE_ID, E.GROUP_AUTHORIZATION_FAILED,
          E.TOPIC_AUTHORIZATION_FAILED, E.INVALID_REQUEST, E.GROUP_MAX_SIZE_REACHED,
          E.UNSUPPORTED_ASSIGNOR, E.UNSUPPORTED_VERSION, E.INVALID_REGULAR_EXPRESSION,
          E.GROUP_ID_NOT_FOUND, E.INCONSISTENT_GROUP_PROTOCOL}


def new_member_id() -> str:
    """A member id the client makes itself (KIP-1082): a random UUID, as Kafka prints one."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def broker_regex(names: frozenset[str] | set[str], patterns: tuple[re.Pattern[str], ...]) -> str:
    """One regular expression for the broker (RE2/J, matched against the whole topic name)
    that means what kwire's subscription means: each ``^pattern`` matches names that start
    with a match, as librdkafka's do, and each name only itself."""
    alts = [f"(?:{p.pattern[1:] if p.pattern.startswith('^') else p.pattern}).*" for p in patterns]
    alts += ["".join("\\" + ch if not (ch.isalnum() or ch in "_-") else ch for ch in name)
             for name in sorted(names)]
    return "|".join(alts)


class ConsumerGroupMember(GroupCoordinator):
    """A KIP-848 group member: ConsumerGroupHeartbeat membership, the broker's assignments
    reconciled revoke-first, and the classic coordinator's commits and offset look-ups."""

    _legal = _LEGAL_848
    _HANDLERS = {**GroupCoordinator._HANDLERS, "cgh": "_on_cgh"}

    def __init__(self, subscriptions: SubscriptionState, *, group_id: str | None,
                 remote_assignor: str | None = None,
                 member_id: str | None = None, **kw: Any):
        super().__init__(subscriptions, group_id=group_id, **kw)
        self.protocol = COOPERATIVE  # partitions move one by one, as cooperative-sticky's do
        self.remote_assignor = remote_assignor or None
        self.member_id = member_id or new_member_id()
        self._server_named = False       # v0 brokers name the member in their first answer
        self._send_all = True            # the next heartbeat carries every field
        self._sent_subscription: _Subscription | None = None  # (names, regex) the broker has
        self._sent_owned: frozenset[TP] | None = None  # owned partitions the broker has
        self._target: frozenset[tuple[Any, int]] | None = None  # (topic id, partition) to reconcile
        self._target_waits_for: int | None = None      # metadata epoch it could not resolve in
        self._reconciled_once = False    # on_assign ran since this member joined
        self._join_seq = 0               # answers of an earlier membership are ignored

    @property
    def member_epoch(self) -> int:
        return max(self.generation, 0)

    # --- inputs from the driver ----------------------------------------------------------------

    def _check_subscription_against_metadata(self) -> None:
        pass  # (the broker follows subscriptions and partition counts itself)

    def on_subscription_changed(self) -> None:
        self.failed = None
        self.leaving.resubscribed()  # the next heartbeat says what changed

    def request_rejoin(self, reason: str) -> None:
        # (the broker decides when the group rebalances; a member only reports what changed)
        log.debug("group %s: %s (the next heartbeat reports it)", self.group_id, reason)

    def mark_coordinator_unknown(self, reason: str, now_ms: int) -> None:
        self._send_all = True
        super().mark_coordinator_unknown(reason, now_ms)

    # --- membership ----------------------------------------------------------------------------

    def _membership_poll(self, now_ms: int, out: list[Request]) -> None:
        state = self.state
        if state is MemberState.UNJOINED:
            if self._want_membership():
                self._join(now_ms, "joining")
        elif state is MemberState.FIND_COORDINATOR:
            if self.coordinator_id is not None:
                self._to(MemberState.JOINING, "coordinator found")
        self._progress_revocation(now_ms)
        self._maybe_reconcile(now_ms)
        if self.state in (MemberState.JOINING, MemberState.STABLE):
            self._maybe_heartbeat(now_ms, out)
        if self.state is MemberState.LEAVING:
            self._maybe_leave(now_ms, out)

    def _membership_deadlines(self, known: bool, ds: list[int]) -> None:
        if self.state is MemberState.UNJOINED and self._want_membership():
            ds.append(0)
        if known and self.state in (MemberState.JOINING, MemberState.STABLE) and not self.heartbeat.in_flight:
            ds.append(self._heartbeat_due_ms())
        if known and self.state is MemberState.STABLE:
            ds.append(self.heartbeat.session_deadline_ms())
        if self._reconcile_ready():
            ds.append(0)

    def _forget_membership(self) -> None:
        """Not a member (any more): no epoch, nothing reported, answers to earlier heartbeats
        ignored, the next heartbeat a full join."""
        self.generation = NO_GENERATION
        self._join_seq += 1
        self._send_all = True
        self._target = None
        self._sent_owned = None
        self._reconciled_once = False

    def _join(self, now_ms: int, reason: str) -> None:
        self._forget_membership()
        self.heartbeat.next_ms = now_ms  # (a join is sent at once)
        if self.coordinator_id is None:
            self._to(MemberState.FIND_COORDINATOR, reason)
        else:
            self._to(MemberState.JOINING, reason)

    def _subscription(self) -> _Subscription:
        """(sorted names, None) or (None, regex) as the broker is to be told."""
        subs = self.subs
        if subs.is_pattern:
            return None, broker_regex(subs.topics, subs.patterns)
        return tuple(sorted(subs.topics)), None

    def _owned(self) -> frozenset[TP]:
        return frozenset(self.subs.assigned())

    def _heartbeat_due_ms(self) -> int:
        if self.state is MemberState.JOINING or self._send_all:
            return self.heartbeat.next_ms
        if self._sent_subscription != self._subscription():
            return 0  # the application subscribed to something else
        if self.revocations.current is None and self._sent_owned != self._owned():
            return 0  # a reconciliation finished: acknowledge it
        return self.heartbeat.next_ms

    def _maybe_heartbeat(self, now_ms: int, out: list[Request]) -> None:
        if self.coordinator_id is None or not self.heartbeat.due(now_ms, self._heartbeat_due_ms()):
            return
        joining = self.state is MemberState.JOINING
        full = self._send_all or joining
        subscription = self._subscription()
        owned = self._owned()
        send_subscription = full or subscription != self._sent_subscription
        send_owned = full or (self.revocations.current is None and owned != self._sent_owned)
        names, regex = subscription
        if send_subscription and regex is None and (full or (
                self._sent_subscription is not None and self._sent_subscription[1] is not None)):
            regex = ""  # no regex (and drop one the broker has), as librdkafka says it
        epoch = 0 if joining else self.generation
        body: dict[str, Any] = {
            "group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
            "instance_id": self.group_instance_id,
            "rack_id": self.client_rack if full else None,
            "rebalance_timeout_ms": self.rebalance_timeout_ms if full else -1,
            "subscribed_topic_names": list(names or ()) if send_subscription else None,
            "subscribed_topic_regex": regex if send_subscription else None,
            "server_assignor": self.remote_assignor if full else None,
            "topic_partitions": self._by_topic_id(owned) if send_owned else None,
        }
        member_id = self.member_id

        def build(version: int) -> dict[str, Any]:
            if version == 0 and epoch == 0 and not self._server_named:
                return {**body, "member_id": ""}  # (before KIP-1082 the broker names members)
            return body

        self.heartbeat.sent(now_ms)
        out.append(Request(COORDINATOR, "ConsumerGroupHeartbeat", build,
                           timeout_ms=min(self.request_timeout_ms, self.session_timeout_ms),
                           context=self._ctx("cgh", None, join_seq=self._join_seq,
                                             subscription=subscription if send_subscription else None,
                                             owned=owned if send_owned else None,
                                             sent_member_id=member_id),
                           owner=self))

    def _by_topic_id(self, tps: frozenset[TP]) -> list[dict[str, Any]]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(tps):
            by_topic.setdefault(topic, []).append(partition)
        return [{"topic_id": self._topic_ids[t], "partitions": ps} for t, ps in by_topic.items()
                if t in self._topic_ids]

    def _on_cgh(self, req: Request, resp: dict[str, Any] | BaseException, now_ms: int) -> None:
        ctx = req.context
        if ctx.extra.get("leave") is not None:
            self._on_leave(req, resp, now_ms)  # (as the classic LeaveGroup's answer)
            return
        if ctx.coordinator_epoch == self._coordinator_epoch:
            self.heartbeat.in_flight = False
        if ctx.extra["join_seq"] != self._join_seq or \
                self.state not in (MemberState.JOINING, MemberState.STABLE):
            return  # answers a membership this member has left
        if isinstance(resp, BaseException):
            self._send_all = True
            if ctx.coordinator_epoch == self._coordinator_epoch:
                self.mark_coordinator_unknown(f"heartbeat failed: {resp}", now_ms)
            return
        code = resp.get("error_code", 0)
        if code == 0:
            self._heartbeat_answered(ctx, resp, now_ms)
            return
        self._send_all = True
        message = resp.get("error_message")
        if code in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
            self._fence(f"heartbeat: {broker_error(code, message)}", now_ms)
        elif code in _COORDINATOR_GONE:
            self.mark_coordinator_unknown(f"heartbeat: {broker_error(code)}", now_ms)
        elif code == E.COORDINATOR_LOAD_IN_PROGRESS:
            self.heartbeat.back_off(now_ms)
        elif code in _FATAL:
            if code == E.FENCED_INSTANCE_ID or code == E.UNRELEASED_INSTANCE_ID:
                message = message or (f"group.instance.id {self.group_instance_id!r} is used by "
                                      "another member")
            self._fatal(broker_error(code, message))
        else:
            self._actions.append(ErrorAction(broker_error(code, message)))
            self.heartbeat.back_off(now_ms)

    def _heartbeat_answered(self, ctx: _Ctx, resp: dict[str, Any], now_ms: int) -> None:
        self.heartbeat.got_through(now_ms)
        if resp.get("member_id"):
            self.member_id = resp["member_id"]
            self._server_named = True
        epoch = resp.get("member_epoch", 0)
        interval = resp.get("heartbeat_interval_ms", 0)
        if interval > 0:
            self.heartbeat.interval_ms = interval  # (the broker says how often)
        self.heartbeat.next_ms = now_ms + self.heartbeat.interval_ms
        if epoch <= 0:
            # Not a member yet (librdkafka's mock cluster answers a join with epoch 0 until it
            # has an assignment): the next heartbeat joins again, every field.
            self._send_all = True
            return
        if ctx.extra["subscription"] is not None:
            self._sent_subscription = ctx.extra["subscription"]
        if ctx.extra["owned"] is not None:
            self._sent_owned = ctx.extra["owned"]
        self._send_all = False
        if epoch != self.generation:
            log.info("group %s: member %s epoch %d", self.group_id, self.member_id, epoch)
        self.generation = epoch
        if self.state is MemberState.JOINING:
            self._to(MemberState.STABLE, f"joined with epoch {epoch}")
            if self.auto_commit:
                self.commits.next_auto_commit_ms = now_ms + self.auto_commit_interval_ms
        assignment = resp.get("assignment")
        if assignment is not None:
            self._target = frozenset((t["topic_id"], p) for t in assignment.get("topic_partitions", ())
                                     for p in t.get("partitions", ()))
            self._target_waits_for = None

    def _fence(self, reason: str, now_ms: int) -> None:
        """The broker no longer counts this member (epoch): its partitions are lost; join again
        with epoch 0 and the same member id."""
        owned = self.subs.assigned() if self.subs.is_auto else []
        self._lose(owned, reason, reset_member_id=False)
        self._server_named = False  # (a v0 broker names a fenced member anew)
        if self.state not in (MemberState.LEAVING, MemberState.CLOSED):
            self._join(now_ms, reason)

    def _reset_membership(self, reason: str, *, reset_member_id: bool) -> None:
        # (a commit saw UNKNOWN_MEMBER_ID, max.poll.interval.ms expired, ...): the member id stays
        owned = self.subs.assigned() if self.subs.is_auto else []
        self._lose(owned, reason, reset_member_id=False)
        self._forget_membership()
        self.heartbeat.in_flight = False
        if self.state not in (MemberState.LEAVING, MemberState.CLOSED):
            self._to(MemberState.UNJOINED, reason)
            if self.leaving.requested:
                self._begin_leave(0)

    # --- reconciliation ------------------------------------------------------------------------

    def _reconcile_ready(self) -> bool:
        return (self._target is not None and self.revocations.current is None
                and self.state is MemberState.STABLE
                and self._target_waits_for != self._metadata_epoch)

    def _maybe_reconcile(self, now_ms: int) -> None:
        if not self._reconcile_ready():
            return
        target = self._target
        assert target is not None  # (_reconcile_ready)
        names = {tid: name for name, tid in self._topic_ids.items()}
        wanted = {(names[tid], p) for tid, p in target if tid in names}
        unresolved = len(wanted) < len(target)
        owned = set(self.subs.assigned())
        revoked = sorted(owned - wanted)
        if revoked:
            # first the partitions leaving: on_revoke, ack, commit; then this runs again
            log.info("group %s: epoch %d revokes %d partition(s)", self.group_id, self.generation,
                     len(revoked))
            self._start_revocation(revoked, "reconcile", ask=True)
            return
        added = sorted(wanted - owned)
        if added or not self._reconciled_once:
            self.subs.add_assignment(added)
            self._actions.append(AssignPartitions(added, incremental=True))
            self._reconciled_once = True
            log.info("group %s: epoch %d assigns %d partition(s)", self.group_id, self.generation,
                     len(added))
        if unresolved:
            # topics this member has no metadata for yet: reconcile the rest when it comes
            self._target_waits_for = self._metadata_epoch
            self.needs_metadata = True
        else:
            self._target = None

    def _after_revocation(self, r: Revocation, now_ms: int) -> None:
        if r.then == "reconcile":
            return  # _maybe_reconcile goes on with the partitions arriving
        super()._after_revocation(r, now_ms)

    def _offset_fetch_member(self) -> tuple[str | None, int]:
        # (KIP-848: a member's look-up names it, so the broker answers with what is stable for
        # its epoch -- STALE_MEMBER_EPOCH otherwise, and the look-up is sent again)
        if self.subs.is_auto and self.generation > 0:
            return self.member_id, self.generation
        return None, -1

    def _can_commit_now(self) -> bool:
        return self.state in (MemberState.STABLE, MemberState.LEAVING) and self.generation > 0

    # --- leaving -------------------------------------------------------------------------------

    def _maybe_leave(self, now_ms: int, out: list[Request]) -> None:
        # (a join heartbeat in flight may have made this a member: say goodbye after it)
        goodbye = (self.generation != NO_GENERATION or self.heartbeat.in_flight) and self.subs.is_auto
        step = self.leaving.step(goodbye=goodbye, coordinator_known=self.coordinator_id is not None,
                                 commits_done=self.commits.all_done())
        if step is LeaveStep.SEND:
            out.append(self._leave_heartbeat("the consumer is leaving"))
        elif step is LeaveStep.FINISH:
            self._finish_leave()

    def _leave_heartbeat(self, reason: str, *, fire_and_forget: bool = False) -> Request:
        epoch = STATIC_LEAVE_EPOCH if self.group_instance_id is not None else LEAVE_EPOCH
        log.info("group %s: member %s leaves (epoch %d): %s", self.group_id, self.member_id,
                 epoch, reason)
        body = {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
                "instance_id": self.group_instance_id, "rack_id": None,
                "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
                "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None}
        return Request(COORDINATOR, "ConsumerGroupHeartbeat", lambda v: body,
                       timeout_ms=self.request_timeout_ms,
                       context=self._ctx("cgh", None, leave=epoch, fire_and_forget=fire_and_forget),
                       owner=self)

    def _finish_leave(self) -> None:
        member_id = self.member_id
        super()._finish_leave()
        self.member_id = member_id  # (the client's own id: the same one if it joins again)
        self._forget_membership()
        self._sent_subscription = None

    def _take_pending_leave(self) -> list[Request]:
        """The leave owed after max.poll.interval.ms expired (sent without waiting)."""
        if self.leaving.take_owed(self.coordinator_id is not None) is None:
            return []
        return [self._leave_heartbeat("max.poll.interval.ms expired", fire_and_forget=True)]
