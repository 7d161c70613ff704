"""Giving partitions up in order, for both group protocols: ask the application (on_revoke) and
wait for its acknowledgement, commit what it consumed of them (with auto commit), then take them
out of the assignment -- and only then say what comes next (``then``: JoinGroup for an eager
rebalance, a rejoin, LeaveGroup, or KIP-848's reconciliation going on).

A machine of its own without I/O; the group member owns it and drives it from its poll.  At
most one revocation runs at a time.

    revocations.start(tps, then, ask=..., remove=..., incremental=...)  -> RevokePartitions | None
    revocations.ack(ack_id)                          the application ran on_revoke
    revocations.progress(now_ms, commit)             -> the finished Revocation, or None
    revocations.due()                                progress() has work now
    revocations.drop()                               the partitions were lost instead
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .group_offsets import Commits
from .subscription import SubscriptionState
from .types import OffsetAndMetadata, RevokePartitions

TP = tuple[str, int]  # (topic, partition)


@dataclass
class Revocation:
    tps: list[TP]
    ack_id: int
    then: str  # "join": eager rebalance; "rejoin": cooperative; "leave"; "reconcile": KIP-848
    acked: bool = False
    remove: bool = True  # take the partitions out of the assignment (not when closing a manual one)
    commit_seq: int | None = None
    committed: bool = False


# commit(offsets, now_ms) -> the commit's sequence number (Commits.commit, not the user's)
CommitFn = Callable[[dict[TP, OffsetAndMetadata], int], int]


class Revocations:
    """The member's one revocation in progress (``current``)."""

    def __init__(self, subscriptions: SubscriptionState, commits: Commits, *, auto_commit: bool):
        self._subs = subscriptions
        self._commits = commits
        self._auto_commit = auto_commit
        self._ack_seq = 0
        self.current: Revocation | None = None

    def start(self, tps: list[TP], then: str, *, ask: bool, remove: bool = True,
              incremental: bool = False) -> RevokePartitions | None:
        """Begin giving ``tps`` up; with ``ask``, the action that asks the application (its
        acknowledgement comes back through ack()).  The partitions stop fetching at once."""
        self._ack_seq += 1
        r = self.current = Revocation(sorted(tps), self._ack_seq, then, acked=not ask, remove=remove)
        if remove:
            self._subs.mark_pending_revocation(tps)
        return RevokePartitions(r.tps, incremental, r.ack_id) if ask else None

    def ack(self, ack_id: int) -> None:
        r = self.current
        if r is not None and r.ack_id == ack_id:  # (a late ack of an older one changes nothing)
            r.acked = True

    def drop(self) -> None:
        self.current = None

    def due(self) -> bool:
        """Acknowledged and not waiting for its commit: progress() moves it on now."""
        r = self.current
        return r is not None and r.acked and (r.commit_seq is None or not self._commits.in_flight(r.commit_seq))

    def progress(self, now_ms: int, commit: CommitFn) -> Revocation | None:
        """Commit what was consumed once acknowledged; when that is done, remove the
        partitions and return the finished revocation."""
        r = self.current
        if r is None or not r.acked:
            return None
        if not r.committed:
            if r.commit_seq is None:
                offsets = self._subs.uncommitted(r.tps) if self._auto_commit else {}
                if offsets:
                    r.commit_seq = commit(offsets, now_ms)
                    if self._commits.in_flight(r.commit_seq):
                        return None
            elif self._commits.in_flight(r.commit_seq):
                return None
            r.committed = True
        self.current = None
        if r.remove:
            self._subs.remove_assignment(r.tps)
        return r
