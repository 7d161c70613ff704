"""A group's offsets: commits (OffsetCommit) and committed-offset look-ups (OffsetFetch).

Two machines that do no I/O, each owning its own state, beside the membership in
:class:`~kwire.consumer.coordinator.GroupCoordinator` (which holds them and routes their
responses; both send to the group's coordinator):

* :class:`Commits` -- the queue of commits (the application's and auto commit's): an older
  commit never overwrites a newer one of the same partition; a member commits only partitions
  it owns (NotAssignedError otherwise); retriable errors are retried until the commit's
  deadline; the group's answers that end a generation reset the membership.
* :class:`CommittedOffsets` -- the committed offsets of partitions waiting for a position
  (INITIALIZING), and the application's ``committed()`` queries.

Each has ``poll(now_ms, out)`` (appending the requests due), ``deadlines(known, ds)``
(appending when poll() next has work; ``known``: the coordinator is) and ``on_response``.
What they read of the membership (generation, member id, state, the coordinator) they read
from the group, which is the one owner of those.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import (
    CommitFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    KwireError,
    NotAssignedError,
    RebalanceInProgressError,
)
from ._codes import E, is_retriable
from ._codes import error as broker_error
from .member_state import MemberState
from .subscription import FetchState
from .types import (
    COORDINATOR_BROKER,
    CommitResult,
    CommittedResult,
    ErrorAction,
    OffsetAndMetadata,
    Request,
)

if TYPE_CHECKING:
    from .coordinator import GroupCoordinator

log = logging.getLogger("kwire.consumer.coordinator")

TP = tuple[str, int]
NO_GENERATION = -1
COORDINATOR_GONE = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE})


def topic_ids_complete(topic_ids: dict[str, Any], topics: Iterable[str]) -> bool:
    """Whether every topic has a (non-zero) id: OffsetCommit/OffsetFetch v10+ name topics by id."""
    for t in topics:
        tid = topic_ids.get(t)
        if tid is None or getattr(tid, "int", 1) == 0:
            return False
    return True


@dataclass
class PendingCommit:
    seq: int
    offsets: dict[TP, OffsetAndMetadata]
    token: Any
    user: bool
    deadline_ms: int
    next_try_ms: int = 0
    inflight: bool = False
    done: bool = False
    error: BaseException | None = None


@dataclass
class CommittedQuery:
    tps: list[TP]
    token: Any
    deadline_ms: int
    next_try_ms: int = 0
    inflight: bool = False


class Commits:
    """The group's commits: queued, sent to the coordinator, retried, answered as CommitResult."""

    def __init__(self, group: GroupCoordinator, *, auto_commit_interval_ms: int, now_ms: int) -> None:
        self.g = group
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.seq = 0
        self.pending: dict[int, PendingCommit] = {}       # seq -> commit not finished yet
        self.latest_seq: dict[TP, int] = {}                # tp -> the newest commit naming it
        self.next_auto_commit_ms = now_ms + auto_commit_interval_ms
        self.auto_commit_seq: int | None = None

    # --- inputs ------------------------------------------------------------------------------

    def commit(self, offsets: dict[TP, OffsetAndMetadata], now_ms: int, *, token: Any = None,
               user: bool = True, timeout_ms: int | None = None) -> int:
        """Queue an OffsetCommit (see GroupCoordinator.commit); returns its sequence number."""
        g = self.g
        self.seq += 1
        seq = self.seq
        deadline = now_ms + (timeout_ms if timeout_ms is not None else g.request_timeout_ms)
        c = PendingCommit(seq, dict(offsets), token, user, deadline)
        if g.group_id is None:
            self.finish(c, CommitFailedError("commit needs group.id"))
            return seq
        if not offsets:
            self.finish(c, None)
            return seq
        if self._fail_unowned(c):
            return seq
        for tp in c.offsets:
            self.latest_seq[tp] = seq
        self.pending[seq] = c
        return seq

    def in_flight(self, seq: int | None) -> bool:
        """Whether the commit ``seq`` has not finished."""
        return seq in self.pending

    def all_done(self) -> bool:
        return all(c.done for c in self.pending.values())

    def auto_commit_due(self) -> bool:
        """Auto commit applies now (a stable member, or a manual assignment)."""
        g = self.g
        return g.auto_commit and (g.state is MemberState.STABLE or (
            not g.subs.is_auto and bool(g.subs.assigned())))

    # --- poll ----------------------------------------------------------------------------------

    def poll(self, now_ms: int, out: list[Request]) -> None:
        self._maybe_auto_commit(now_ms)
        self._send(now_ms, out)

    def deadlines(self, known: bool, ds: list[int]) -> None:
        if self.auto_commit_due() and self.auto_commit_seq not in self.pending:
            ds.append(self.next_auto_commit_ms)
        for c in self.pending.values():
            if not c.inflight:
                ds.append(min(c.next_try_ms, c.deadline_ms) if known else c.deadline_ms)

    def _maybe_auto_commit(self, now_ms: int) -> None:
        g = self.g
        if not g.auto_commit or now_ms < self.next_auto_commit_ms:
            return
        if g.subs.is_auto and g.state is not MemberState.STABLE:
            return
        if self.auto_commit_seq is not None and self.auto_commit_seq in self.pending:
            return
        self.next_auto_commit_ms = now_ms + self.auto_commit_interval_ms
        offsets = g.subs.uncommitted()
        if offsets:
            self.auto_commit_seq = self.commit(offsets, now_ms, user=False)

    def _fail_unowned(self, c: PendingCommit) -> bool:
        """Fail ``c`` if it names a partition this group member does not own."""
        subs = self.g.subs
        if not subs.is_auto:
            return False  # manual assignment: the application decides what it commits
        unowned = sorted(tp for tp in c.offsets if not subs.is_assigned(tp))
        if not unowned:
            return False
        names = ", ".join(f"{t} [{p}]" for t, p in unowned)
        self.finish(c, NotAssignedError(
            f"commit failed: {names} not assigned to this member (revoked or lost in a "
            "rebalance; another member may own them now)", unowned))
        return True

    def _send(self, now_ms: int, out: list[Request]) -> None:
        g = self.g
        for c in list(self.pending.values()):
            if c.inflight:
                continue
            if now_ms >= c.deadline_ms:
                self.finish(c, c.error or KafkaTimeoutError("commit not completed within its timeout"))
                continue
            # An older commit must not overwrite a newer one of the same partition.
            stale = [tp for tp in c.offsets if self.latest_seq.get(tp, 0) > c.seq]
            for tp in stale:
                del c.offsets[tp]
            if not c.offsets:
                self.finish(c, None)
                continue
            if self._fail_unowned(c):
                continue
            if g.coordinator_id is None or now_ms < c.next_try_ms:
                continue
            if g.subs.is_auto and not g._can_commit_now():
                self.finish(c, RebalanceInProgressError(
                    "commit failed: the group is completing a rebalance (joined generation "
                    f"{g.generation}, assignment not received yet); commit again after the "
                    "next poll()"))
                continue
            out.append(self._request(c))
            c.inflight = True

    def _request(self, c: PendingCommit) -> Request:
        g = self.g
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), om in sorted(c.offsets.items()):
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch if om.leader_epoch is not None else -1,
                "committed_metadata": om.metadata if om.metadata is not None else "",
                "commit_timestamp": -1})
        member = g.subs.is_auto
        generation = g.generation if member else NO_GENERATION
        member_id = g.member_id if member else ""
        topics = [{"name": t, "topic_id": g._topic_ids.get(t), "partitions": ps}
                  for t, ps in by_topic.items()]
        body = {"group_id": g.group_id, "generation_id_or_member_epoch": generation,
                "generation_id": generation, "member_id": member_id,
                "group_instance_id": g.group_instance_id if member else None,
                "retention_time_ms": -1, "topics": topics}
        max_version = None if topic_ids_complete(g._topic_ids, by_topic) else 9
        return Request(COORDINATOR_BROKER, "OffsetCommit", lambda v: body, max_version=max_version,
                       timeout_ms=g.request_timeout_ms, context=g._ctx("commit", c.seq), owner=g)

    def finish(self, c: PendingCommit, err: BaseException | None) -> None:
        c.done = True
        c.error = err
        self.pending.pop(c.seq, None)
        if err is None:
            for tp, om in c.offsets.items():
                self.g.subs.mark_committed(tp, om.offset)
        self.g._actions.append(CommitResult(c.offsets, err, c.token, c.user))

    # --- responses -----------------------------------------------------------------------------

    def on_response(self, req: Request, resp: Any, now_ms: int) -> None:
        g = self.g
        ctx = req.context
        c = self.pending.get(ctx.payload)
        if c is None:
            return
        c.inflight = False
        if isinstance(resp, BaseException):
            c.error = resp
            c.next_try_ms = now_ms + g.retry_backoff_ms
            if isinstance(resp, (KafkaConnectionError, KafkaTimeoutError)) and \
                    ctx.coordinator_epoch == g._coordinator_epoch:
                g.mark_coordinator_unknown(f"OffsetCommit failed: {resp}", now_ms)
            return
        id_to_name = {v: k for k, v in g._topic_ids.items()}
        retry: dict[TP, OffsetAndMetadata] = {}
        failure: BaseException | None = None
        for t in resp.get("topics", ()):
            name: Any = t.get("name") or id_to_name.get(t.get("topic_id"))
            for p in t.get("partitions", ()):
                tp = (name, p["partition_index"])
                code = p.get("error_code", 0)
                om = c.offsets.get(tp)
                if om is None:
                    continue
                if code == 0:
                    g.subs.mark_committed(tp, om.offset)
                    continue
                if code in COORDINATOR_GONE:
                    if ctx.coordinator_epoch == g._coordinator_epoch:
                        g.mark_coordinator_unknown(f"OffsetCommit: {broker_error(code)}", now_ms)
                    retry[tp] = om
                elif code in (E.COORDINATOR_LOAD_IN_PROGRESS, E.REQUEST_TIMED_OUT,
                              E.UNKNOWN_TOPIC_OR_PARTITION) or (is_retriable(code) and code not in (
                              E.REBALANCE_IN_PROGRESS,)):
                    retry[tp] = om
                elif code == E.STALE_MEMBER_EPOCH:
                    # (KIP-848) sent under an older member epoch: again, under the current one
                    retry[tp] = om
                elif code == E.REBALANCE_IN_PROGRESS:
                    failure = RebalanceInProgressError(
                        f"commit failed: {broker_error(code)}; commit again after the next poll()")
                    if g.state is MemberState.STABLE:
                        g.request_rejoin("commit saw a rebalance")
                elif code in (E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID):
                    failure = CommitFailedError(
                        f"commit failed: {broker_error(code)}: the group rebalanced and the "
                        "partitions may now belong to another member")
                    if ctx.generation == g.generation and g._generation_valid() and \
                            g.state is not MemberState.LEAVING:
                        g._reset_membership(f"OffsetCommit: {broker_error(code)}",
                                            reset_member_id=code == E.UNKNOWN_MEMBER_ID)
                elif code == E.FENCED_INSTANCE_ID:
                    failure = broker_error(code)
                    g._fatal(failure)
                else:
                    failure = broker_error(code)
        if failure is not None:
            self.finish(c, failure)
        elif retry:
            c.offsets = retry
            c.error = broker_error(E.COORDINATOR_NOT_AVAILABLE)
            c.next_try_ms = now_ms + g.retry_backoff_ms
        else:
            self.finish(c, None)


class CommittedOffsets:
    """Committed offsets: for partitions waiting for a position, and for committed()."""

    def __init__(self, group: GroupCoordinator) -> None:
        self.g = group
        self.init_inflight = False
        self.init_next_ms = 0
        self.queries: list[CommittedQuery] = []

    def query(self, tps: Iterable[TP], now_ms: int, *, token: Any = None,
              timeout_ms: int | None = None) -> None:
        """Look committed offsets up; the answer arrives as a CommittedResult action."""
        g = self.g
        tps = list(dict.fromkeys(tps))
        if g.group_id is None:
            g._actions.append(CommittedResult({}, KwireError("committed() needs group.id"), token))
            return
        deadline = now_ms + (timeout_ms if timeout_ms is not None else g.request_timeout_ms)
        self.queries.append(CommittedQuery(tps, token, deadline))

    # --- poll ----------------------------------------------------------------------------------

    def _initial_due(self) -> bool:
        g = self.g
        return (g.group_id is not None and not self.init_inflight
                and (not g.subs.is_auto or g.state is MemberState.STABLE)
                and bool(g.subs.in_state(FetchState.INITIALIZING)))

    def poll(self, now_ms: int, out: list[Request]) -> None:
        g = self.g
        if g.coordinator_id is not None and now_ms >= self.init_next_ms and self._initial_due():
            tps = g.subs.in_state(FetchState.INITIALIZING)
            self.init_inflight = True
            out.append(self._request(tps, "init_fetch", tps))
        for q in list(self.queries):
            if q.inflight:
                continue
            if now_ms >= q.deadline_ms:
                self.queries.remove(q)
                g._actions.append(CommittedResult({}, KafkaTimeoutError(
                    "committed offsets not fetched within the timeout"), q.token))
                continue
            if g.coordinator_id is None or now_ms < q.next_try_ms:
                continue
            q.inflight = True
            out.append(self._request(q.tps, "query", q))

    def deadlines(self, known: bool, ds: list[int]) -> None:
        for q in self.queries:
            if not q.inflight:
                ds.append(min(q.next_try_ms, q.deadline_ms) if known else q.deadline_ms)
        if known and self._initial_due():
            ds.append(self.init_next_ms)

    def _request(self, tps: list[TP], kind: str, payload: Any) -> Request:
        g = self.g
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(tps):
            by_topic.setdefault(topic, []).append(partition)
        topics = [{"name": t, "topic_id": g._topic_ids.get(t), "partition_indexes": ps}
                  for t, ps in by_topic.items()]
        member_id, member_epoch = g._offset_fetch_member()
        body = {"group_id": g.group_id, "topics": topics, "require_stable": True,
                "groups": [{"group_id": g.group_id, "member_id": member_id,
                            "member_epoch": member_epoch, "topics": topics}]}
        max_version = None if topic_ids_complete(g._topic_ids, by_topic) else 9
        return Request(COORDINATOR_BROKER, "OffsetFetch", lambda v: body, max_version=max_version,
                       timeout_ms=g.request_timeout_ms, context=g._ctx(kind, payload), owner=g)

    def _parse(self, resp: dict[str, Any]) -> tuple[int, dict[TP, tuple[int, int | None, Any, int]]]:
        """(group error code, {tp: (offset, leader_epoch, metadata, error_code)})."""
        g = self.g
        if resp.get("groups"):
            grp = next((x for x in resp["groups"] if x.get("group_id") == g.group_id),
                       resp["groups"][0])
            topics, code = grp.get("topics", ()), grp.get("error_code", 0)
        else:
            topics, code = resp.get("topics", ()), resp.get("error_code", 0)
        id_to_name = {v: k for k, v in g._topic_ids.items()}
        out: dict[TP, tuple[int, int | None, Any, int]] = {}
        for t in topics or ():
            name: Any = t.get("name") or id_to_name.get(t.get("topic_id"))
            for p in t.get("partitions", ()):
                epoch = p.get("committed_leader_epoch", -1)
                out[(name, p["partition_index"])] = (
                    p.get("committed_offset", -1), None if epoch is None or epoch < 0 else epoch,
                    p.get("metadata"), p.get("error_code", 0))
        return code, out

    # --- responses -----------------------------------------------------------------------------

    def on_response(self, req: Request, resp: Any, now_ms: int) -> None:
        if req.context.kind == "init_fetch":
            self._on_initial(req, resp, now_ms)
        else:
            self._on_query(req, resp, now_ms)

    def _on_initial(self, req: Request, resp: Any, now_ms: int) -> None:
        g = self.g
        self.init_inflight = False
        ctx = req.context
        if isinstance(resp, BaseException):
            self.init_next_ms = now_ms + g.retry_backoff_ms
            if ctx.coordinator_epoch == g._coordinator_epoch:
                g.mark_coordinator_unknown(f"OffsetFetch failed: {resp}", now_ms)
            return
        code, parts = self._parse(resp)
        if code != 0:
            self.init_next_ms = now_ms + g.retry_backoff_ms
            if code in COORDINATOR_GONE:
                g.mark_coordinator_unknown(f"OffsetFetch: {broker_error(code)}", now_ms)
            elif code not in (E.COORDINATOR_LOAD_IN_PROGRESS, E.STALE_MEMBER_EPOCH):
                g._actions.append(ErrorAction(broker_error(code)))
            return
        retry = False
        subs = g.subs
        for tp in ctx.payload:
            st = subs.get(tp)
            if st is None or st.state is not FetchState.INITIALIZING:
                continue
            got = parts.get(tp)
            if got is None:
                retry = True
                continue
            offset, epoch, _meta, pcode = got
            if pcode == E.UNSTABLE_OFFSET_COMMIT or (pcode and is_retriable(pcode)):
                retry = True
                continue
            if pcode:
                g._actions.append(ErrorAction(broker_error(pcode), partitions=[tp]))
                retry = True
                continue
            if offset is not None and offset >= 0:
                subs.seek_committed(tp, offset, epoch)
            else:
                err = subs.request_reset(tp)
                if err is not None:
                    g._actions.append(ErrorAction(err, partitions=[tp]))
        if retry:
            self.init_next_ms = now_ms + g.retry_backoff_ms

    def _on_query(self, req: Request, resp: Any, now_ms: int) -> None:
        g = self.g
        q: CommittedQuery = req.context.payload
        q.inflight = False
        if q not in self.queries:
            return
        if isinstance(resp, BaseException):
            q.next_try_ms = now_ms + g.retry_backoff_ms
            return
        code, parts = self._parse(resp)
        if code != 0:
            if code in COORDINATOR_GONE:
                g.mark_coordinator_unknown(f"OffsetFetch: {broker_error(code)}", now_ms)
            if code in COORDINATOR_GONE or is_retriable(code) or code == E.STALE_MEMBER_EPOCH:
                q.next_try_ms = now_ms + g.retry_backoff_ms
                return
            self.queries.remove(q)
            g._actions.append(CommittedResult({}, broker_error(code), q.token))
            return
        if any(parts.get(tp, (0, 0, 0, 0))[3] == E.UNSTABLE_OFFSET_COMMIT for tp in q.tps):
            q.next_try_ms = now_ms + g.retry_backoff_ms
            return
        self.queries.remove(q)
        result = {}
        for tp in q.tps:
            offset, epoch, meta, pcode = parts.get(tp, (-1, None, None, 0))
            result[tp] = (OffsetAndMetadata(offset, epoch, meta), broker_error(pcode) if pcode else None)
        g._actions.append(CommittedResult(result, None, q.token))
