"""The classic consumer group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) on the
shared member machine of :mod:`.coordinator` (see its text for the states and the table)::

    UNJOINED ─▶ FIND_COORDINATOR ─▶ [PREPARING] ─▶ JOINING ─▶ SYNCING ─▶ STABLE
    JoinGroup (MEMBER_ID_REQUIRED: again with the id the broker gave); the leader runs the
    assignor on fresh metadata; SyncGroup hands out the assignments; Heartbeat every
    heartbeat.interval.ms (REBALANCE_IN_PROGRESS: rejoin; UNKNOWN_MEMBER_ID /
    ILLEGAL_GENERATION: partitions lost, rejoin; FENCED_INSTANCE_ID: fatal); LeaveGroup for
    dynamic members.  Eager assignors revoke everything before JoinGroup; cooperative ones
    (KIP-429) keep their partitions and move only the difference after SyncGroup.
"""
from __future__ import annotations

import logging
from typing import Any

from ..errors import KafkaConnectionError, KafkaTimeoutError
from ._codes import E
from ._codes import error as broker_error
from .assignors import (
    COOPERATIVE,
    EAGER,
    Assignor,
    decode_member_assignment,
    decode_member_subscription,
)
from .coordinator import (
    _COORDINATOR_GONE,
    NO_GENERATION,
    GroupCoordinator,
    MemberState,
    _Ctx,
)
from .leaving import LeaveStep
from .revocation import Revocation
from .types import COORDINATOR, AssignPartitions, ErrorAction, Request

log = logging.getLogger("kwire.consumer.coordinator")

# Errors after which joining again cannot help: the application must hear about them.
_FATAL_JOIN = {E.FENCED_INSTANCE_ID, E.GROUP_AUTHORIZATION_FAILED, E.INVALID_SESSION_TIMEOUT,
               E.INCONSISTENT_GROUP_PROTOCOL, E.GROUP_MAX_SIZE_REACHED, E.INVALID_GROUP_ID,
               E.UNSUPPORTED_VERSION, E.UNRELEASED_INSTANCE_ID}

# Membership requests stay at the newest versions librdkafka itself sends.  The later ones add
# nothing a classic consumer needs (flexible encoding; JoinGroup v8 "reason", v9
# skip_assignment; LeaveGroup v3 batches of static members, which we never send), every
# broker from Kafka 2.x to 4.x accepts these, and librdkafka's mock cluster advertises
# JoinGroup v6 / SyncGroup v4 / LeaveGroup v3+ but parses them as the older layouts.
_MAX_VERSION = {"JoinGroup": 5, "SyncGroup": 3, "Heartbeat": 3, "LeaveGroup": 2}


class ClassicGroupMember(GroupCoordinator):
    """A member of a classic group: JoinGroup / SyncGroup / Heartbeat / LeaveGroup, the
    leader's client-side assignment, eager or cooperative rebalancing."""

    _HANDLERS = {**GroupCoordinator._HANDLERS, "join": "_on_join", "sync": "_on_sync",
                 "heartbeat": "_on_heartbeat"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self._join_next_ms = 0
        self._joined_topics: tuple[str, ...] = ()
        self._group_members: list[Any] = []
        self._assignment: dict[str, bytes] | None = None
        self._await_metadata_after: int | None = None  # (metadata epoch)
        self._snapshot: dict[str, int] = {}  # topic -> partitions when the member joined

    def _current_snapshot(self) -> dict[str, int]:
        topics = set(self._member_topics())
        if self.is_leader:
            topics |= set(self.subs.group_topics)
        return {t: self._partitions_per_topic.get(t, 0) for t in topics}

    def _after_revocation(self, r: Revocation, now_ms: int) -> None:
        if r.then == "join":  # eager: everything revoked, now JoinGroup
            if self.state is MemberState.PREPARING:
                self._go_join(now_ms)
            return
        super()._after_revocation(r, now_ms)

    def _can_commit_now(self) -> bool:
        """Whether a member's commit can be sent now rather than fail fast.  While the group
        prepares a rebalance the broker still takes commits of the current generation (it
        refuses them only between JoinGroup and SyncGroup, REBALANCE_IN_PROGRESS): a
        cooperative member keeps its partitions then, and commits them over the broker's
        ordinary connection, beside the JoinGroup it holds.  Between JoinGroup and SyncGroup
        (SYNCING), or without a generation, nothing can be committed: fail at once (retriable)
        rather than wait out the rebalance."""
        if self.state is MemberState.SYNCING:
            return False
        if self.state is MemberState.JOINING:
            return self.protocol == COOPERATIVE and self._generation_valid()
        return True

    def _reset_membership(self, reason: str, *, reset_member_id: bool) -> None:
        owned = self.subs.assigned() if self.subs.is_auto else []
        self._lose(owned, reason, reset_member_id=reset_member_id)
        self.generation = NO_GENERATION
        self.is_leader = False
        if reset_member_id:
            self.member_id = ""
        self.heartbeat.in_flight = False
        self._sync_inflight = False
        self._join_inflight = False
        if self.state not in (MemberState.LEAVING, MemberState.CLOSED):
            self._to(MemberState.UNJOINED, reason)
            if self.leaving.requested:
                self._begin_leave(0)
        self._join_reason = reason

    def _check_subscription_against_metadata(self) -> None:
        """A STABLE member whose topics or partition counts changed rejoins (the classic
        protocol's leader assigns from the metadata it had)."""
        if self.state is MemberState.STABLE and self.subs.is_auto:
            if self._member_topics() != self._joined_topics:
                self.request_rejoin("subscribed topics changed")
            elif self._current_snapshot() != self._snapshot:
                self.request_rejoin("partition counts changed")

    def _membership_poll(self, now_ms: int, out: list[Request]) -> None:
        """The membership protocol's part of poll(): JoinGroup, SyncGroup, Heartbeat, leave."""
        state = self.state
        if state is MemberState.UNJOINED:
            if self._want_membership():
                self._begin_rebalance(now_ms)
        elif state is MemberState.FIND_COORDINATOR:
            if self.coordinator_id is not None:
                self._to(MemberState.JOINING, "coordinator found")
        elif state is MemberState.STABLE:
            if self._rejoin_needed and self.revocations.current is None and self._want_membership():
                self._begin_rebalance(now_ms)

        self._progress_revocation(now_ms)

        state = self.state
        if state is MemberState.JOINING:
            self._maybe_join(now_ms, out)
        elif state is MemberState.SYNCING:
            self._maybe_sync(now_ms, out)
        if self.state in (MemberState.STABLE, MemberState.PREPARING):
            self._maybe_heartbeat(now_ms, out)
        if self.state is MemberState.LEAVING:
            self._maybe_leave(now_ms, out)

    def _membership_deadlines(self, known: bool, ds: list[int]) -> None:
        """The membership protocol's deadlines (``known``: the coordinator is)."""
        if self.state is MemberState.UNJOINED and self._want_membership():
            ds.append(0)
        if known and self.state is MemberState.JOINING and not self._join_inflight:
            ds.append(self._join_next_ms)
        if known and self.state in (MemberState.STABLE, MemberState.PREPARING) \
                and self._generation_valid():
            if not self.heartbeat.in_flight:
                ds.append(self.heartbeat.next_ms)
            ds.append(self.heartbeat.session_deadline_ms())

    def _begin_rebalance(self, now_ms: int) -> None:
        self._rejoin_needed = False
        owned = self.subs.assigned()
        if self.protocol == EAGER and owned:
            if self._generation_valid():
                self._to(MemberState.PREPARING, self._join_reason)
                self._start_revocation(owned, "join", ask=True)
                return
            self._lose(owned, "rejoining without a generation", reset_member_id=False)
        self._go_join(now_ms)

    def _go_join(self, now_ms: int) -> None:
        if self.coordinator_id is None:
            self._to(MemberState.FIND_COORDINATOR, self._join_reason)
        else:
            self._to(MemberState.JOINING, self._join_reason)

    def _maybe_join(self, now_ms: int, out: list[Request]) -> None:
        if self._join_inflight or self.coordinator_id is None or now_ms < self._join_next_ms:
            return
        if self.subs.is_pattern and self._metadata_epoch == 0:
            self.needs_metadata = True
            return  # a pattern needs the topic list before we can say what we subscribe to
        topics = self._member_topics()
        self._joined_topics = topics
        owned = self.subs.assigned() if self.protocol == COOPERATIVE else []
        protocols = [{"name": a.name,
                      "metadata": a.subscription(topics, owned, self.generation, self.client_rack)}
                     for a in self.assignors]
        body = {
            "group_id": self.group_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "protocol_type": "consumer",
            "protocols": protocols,
            "reason": self._join_reason,
        }
        self._join_inflight = True
        self._rejoin_needed = False
        out.append(Request(COORDINATOR, "JoinGroup", lambda v: body,
                           max_version=_MAX_VERSION["JoinGroup"], timeout_ms=self.rebalance_timeout_ms + 5000,
                           context=self._ctx("join"), owner=self))

    def _on_join(self, req: Request, resp: dict[str, Any] | BaseException, now_ms: int) -> None:
        ctx: _Ctx = req.context
        self._join_inflight = False
        if self.state is not MemberState.JOINING or ctx.coordinator_epoch != self._coordinator_epoch:
            return
        if isinstance(resp, BaseException):
            if isinstance(resp, (KafkaConnectionError, KafkaTimeoutError)):
                self.mark_coordinator_unknown(f"JoinGroup failed: {resp}", now_ms)
            else:
                log.warning("group %s: JoinGroup failed: %s", self.group_id, resp)
                self._join_next_ms = now_ms + self.retry_backoff_ms
            return
        code = resp.get("error_code", 0)
        if code == 0:
            self.generation = resp["generation_id"]
            self.member_id = resp["member_id"]
            self.protocol_name = resp.get("protocol_name")
            self.leader_id = resp.get("leader")
            self.is_leader = self.leader_id == self.member_id
            log.info("group %s: joined generation %d as %s%s (protocol %s)", self.group_id,
                     self.generation, self.member_id, " (leader)" if self.is_leader else "",
                     self.protocol_name)
            self._assignment = None
            self._to(MemberState.SYNCING, "joined")
            if self.is_leader and not resp.get("skip_assignment", False):
                self._group_members = [
                    decode_member_subscription(m["member_id"], bytes(m["metadata"]),
                                               m.get("group_instance_id"))
                    for m in resp.get("members", ())]
                group_topics = frozenset(t for m in self._group_members for t in m.topics)
                self.subs.group_topics = group_topics
                # Assign from fresh metadata (partition counts may have changed, other members
                # may subscribe to topics we never looked up).  The round trip also lets the
                # followers' SyncGroups reach the coordinator first, which librdkafka's mock
                # cluster needs: it answers the sync as soon as the leader's arrives.
                self._await_metadata_after = self._metadata_epoch
                self.needs_metadata = True
            else:
                self._group_members = []
                self._assignment = {}
            return
        if code == E.MEMBER_ID_REQUIRED:
            # KIP-394: the broker named us; join again with that id right away.
            self.member_id = resp.get("member_id", "")
            self._join_next_ms = now_ms
            return
        if code == E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.generation = NO_GENERATION
            self._join_next_ms = now_ms
            return
        if code == E.ILLEGAL_GENERATION:
            self.generation = NO_GENERATION
            self._join_next_ms = now_ms
            return
        if code in (E.REBALANCE_IN_PROGRESS, E.COORDINATOR_LOAD_IN_PROGRESS):
            self._join_next_ms = now_ms + self.retry_backoff_ms
            return
        if code in _COORDINATOR_GONE:
            self.mark_coordinator_unknown(f"JoinGroup: {broker_error(code)}", now_ms)
            return
        if code in _FATAL_JOIN:
            self._fatal(broker_error(code))
            return
        self._actions.append(ErrorAction(broker_error(code)))
        self._join_next_ms = now_ms + self.retry_backoff_ms

    def _assignor(self, name: str | None) -> Assignor:
        for a in self.assignors:
            if a.name == name:
                return a
        return self.assignors[0]

    def _compute_assignment(self) -> None:
        members = self._group_members
        topics = {t for m in members for t in m.topics}
        counts = {t: self._partitions_per_topic[t] for t in topics if t in self._partitions_per_topic}
        self._assignment = self._assignor(self.protocol_name).assign_encoded(members, counts)
        self._await_metadata_after = None

    def _maybe_sync(self, now_ms: int, out: list[Request]) -> None:
        if self._sync_inflight or self.coordinator_id is None:
            return
        if self._assignment is None:
            if self._await_metadata_after is not None and self._metadata_epoch > self._await_metadata_after:
                self._compute_assignment()
            else:
                self.needs_metadata = True
                return
        assert self._assignment is not None
        assignments = [{"member_id": m, "assignment": a} for m, a in sorted(self._assignment.items())]
        body = {"group_id": self.group_id, "generation_id": self.generation,
                "member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "protocol_type": "consumer", "protocol_name": self.protocol_name,
                "assignments": assignments}
        self._sync_inflight = True
        out.append(Request(COORDINATOR, "SyncGroup", lambda v: body,
                           max_version=_MAX_VERSION["SyncGroup"], timeout_ms=self.rebalance_timeout_ms + 5000,
                           context=self._ctx("sync"), owner=self))

    def _on_sync(self, req: Request, resp: dict[str, Any] | BaseException, now_ms: int) -> None:
        ctx: _Ctx = req.context
        self._sync_inflight = False
        if (self.state is not MemberState.SYNCING or ctx.generation != self.generation
                or ctx.coordinator_epoch != self._coordinator_epoch):
            return
        if isinstance(resp, BaseException):
            if isinstance(resp, (KafkaConnectionError, KafkaTimeoutError)):
                self.mark_coordinator_unknown(f"SyncGroup failed: {resp}", now_ms)
            else:  # e.g. an answer we cannot decode: try the rebalance again
                log.warning("group %s: SyncGroup failed: %s; rejoining", self.group_id, resp)
                self._to(MemberState.JOINING, "sync failed")
                self._join_next_ms = now_ms + self.retry_backoff_ms
            return
        code = resp.get("error_code", 0)
        if code == 0:
            self._complete_sync(resp, now_ms)
            return
        if code == E.REBALANCE_IN_PROGRESS:
            self._to(MemberState.JOINING, "rebalance during sync")
            self._join_next_ms = now_ms
            return
        if code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            self._reset_membership(f"SyncGroup: {broker_error(code)}",
                                   reset_member_id=code == E.UNKNOWN_MEMBER_ID)
            return
        if code in _COORDINATOR_GONE:
            self.mark_coordinator_unknown(f"SyncGroup: {broker_error(code)}", now_ms)
            return
        if code in _FATAL_JOIN:
            self._fatal(broker_error(code))
            return
        self._actions.append(ErrorAction(broker_error(code)))
        self._to(MemberState.JOINING, "sync failed")
        self._join_next_ms = now_ms + self.retry_backoff_ms

    def _complete_sync(self, resp: dict[str, Any], now_ms: int) -> None:
        assignment = decode_member_assignment(resp.get("assignment"))
        assigned = sorted(set(assignment.partitions))
        self._to(MemberState.STABLE, f"generation {self.generation}")
        self.heartbeat.restart(now_ms, at_once=False)
        self._snapshot = self._current_snapshot()
        if self.auto_commit:
            self.commits.next_auto_commit_ms = now_ms + self.auto_commit_interval_ms
        if self.protocol == EAGER:
            self.subs.set_assignment(assigned)
            self._actions.append(AssignPartitions(assigned, incremental=False))
        else:
            owned = set(self.subs.assigned())
            added = [tp for tp in assigned if tp not in owned]
            revoked = sorted(owned - set(assigned))
            self.subs.add_assignment(added)
            self._actions.append(AssignPartitions(added, incremental=True))
            if revoked:
                self._start_revocation(revoked, "rejoin", ask=True)
        if self._member_topics() != self._joined_topics:
            self.request_rejoin("subscription changed during the rebalance")

    def _maybe_heartbeat(self, now_ms: int, out: list[Request]) -> None:
        if self.coordinator_id is None or not self._generation_valid() or not self.heartbeat.due(now_ms):
            return
        body = {"group_id": self.group_id, "generation_id": self.generation,
                "member_id": self.member_id, "group_instance_id": self.group_instance_id}
        self.heartbeat.sent(now_ms)
        out.append(Request(COORDINATOR, "Heartbeat", lambda v: body,
                           max_version=_MAX_VERSION["Heartbeat"], timeout_ms=min(self.request_timeout_ms, self.session_timeout_ms),
                           context=self._ctx("heartbeat"), owner=self))

    def _on_heartbeat(self, req: Request, resp: dict[str, Any] | BaseException, now_ms: int) -> None:
        ctx: _Ctx = req.context
        if ctx.coordinator_epoch == self._coordinator_epoch:
            self.heartbeat.in_flight = False
        if ctx.generation != self.generation or ctx.member_id != self.member_id:
            return  # answers a generation we left
        if isinstance(resp, BaseException):
            if ctx.coordinator_epoch == self._coordinator_epoch:
                self.mark_coordinator_unknown(f"heartbeat failed: {resp}", now_ms)
            return
        code = resp.get("error_code", 0)
        if code == 0:
            self.heartbeat.got_through(now_ms)
            return
        if code == E.REBALANCE_IN_PROGRESS:
            self.heartbeat.got_through(now_ms)
            if self.state is MemberState.STABLE:
                self.request_rejoin("the group is rebalancing")
            return
        if code in (E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID):
            if self.state is MemberState.LEAVING:
                self.generation = NO_GENERATION
                return
            self._reset_membership(f"heartbeat: {broker_error(code)}",
                                   reset_member_id=code == E.UNKNOWN_MEMBER_ID)
            return
        if code == E.FENCED_INSTANCE_ID:
            self._fatal(broker_error(code, f"group.instance.id {self.group_instance_id!r} is used "
                                           "by another member"))
            return
        if code in _COORDINATOR_GONE:
            self.mark_coordinator_unknown(f"heartbeat: {broker_error(code)}", now_ms)
            return
        # COORDINATOR_LOAD_IN_PROGRESS and anything else: try again soon.
        self.heartbeat.back_off(now_ms)

    def _maybe_leave(self, now_ms: int, out: list[Request]) -> None:
        # (static members say no goodbye: KIP-345)
        goodbye = self.group_instance_id is None and bool(self.member_id) and self.subs.is_auto
        step = self.leaving.step(goodbye=goodbye, coordinator_known=self.coordinator_id is not None,
                                 commits_done=self.commits.all_done())
        if step is LeaveStep.SEND:
            out.append(self._leave_request(self.member_id, None, "the consumer is leaving"))
        elif step is LeaveStep.FINISH:
            self._finish_leave()

    def _leave_request(self, member_id: str, instance_id: str | None, reason: str) -> Request:
        body = {"group_id": self.group_id, "member_id": member_id,
                "members": [{"member_id": member_id, "group_instance_id": instance_id,
                             "reason": reason}]}
        return Request(COORDINATOR, "LeaveGroup", lambda v: body,
                       max_version=_MAX_VERSION["LeaveGroup"], context=self._ctx("leave"), owner=self)

    def _take_pending_leave(self) -> list[Request]:
        """A LeaveGroup owed after max.poll.interval.ms expired (sent without waiting)."""
        owed = self.leaving.take_owed(self.coordinator_id is not None)
        if owed is None:
            return []
        member_id, instance_id = owed
        if instance_id is not None or not member_id:
            return []
        req = self._leave_request(member_id, None, "max.poll.interval.ms expired")
        req.context.extra["fire_and_forget"] = True
        return [req]
