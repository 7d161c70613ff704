"""What the consumer subscribes to, what it is assigned, and where it is in each partition.

One :class:`SubscriptionState` per consumer, owned by the driver thread; every other state
machine (coordinator, fetcher, position resolver) reads and changes partition state only
through its methods, so each partition's fetch state has one owner and one transition table.

Per-partition fetch state (:class:`FetchState`)::

    INITIALIZING ──OffsetFetch: committed──▶ FETCHING (or AWAIT_VALIDATION when the commit
         │                                   carries a leader epoch the leader may not share)
         └──no commit──▶ AWAIT_RESET ──ListOffsets (auto.offset.reset)──▶ FETCHING
                          (auto.offset.reset=error: NoOffsetForPartitionError, until seek())
    FETCHING ──leader epoch changed──▶ AWAIT_VALIDATION ──OffsetForLeaderEpoch (KIP-320)──▶
         FETCHING (maybe at the divergence point after a truncation; LogTruncationError when
         auto.offset.reset=error)
    FETCHING ──OFFSET_OUT_OF_RANGE──▶ AWAIT_RESET
    any ──seek()──▶ FETCHING (AWAIT_VALIDATION when a leader epoch is given)

``paused`` and ``pending_revocation`` are flags beside the state: they stop fetching without
losing the position.

Consumed-but-not-committed bookkeeping (at-least-once auto commit): the application reports
what it has *finished* with (:meth:`SubscriptionState.mark_consumed`); commits record what the
group has stored (:meth:`mark_committed`); :meth:`uncommitted` is the difference.
"""
from __future__ import annotations

import enum
import re
from collections.abc import ItemsView, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import ConfigError, KwireError, LogTruncationError, NoOffsetForPartitionError
from .types import OffsetAndMetadata

TP = tuple[str, int]  # (topic, partition)


class FetchState(enum.Enum):
    INITIALIZING = "initializing"
    AWAIT_RESET = "await_reset"
    AWAIT_VALIDATION = "await_validation"
    FETCHING = "fetching"


# The one table of legal transitions.  Nothing returns to INITIALIZING: a partition starts
# there when assigned, and leaves the state machine when unassigned.
_LEGAL: dict[FetchState, frozenset[FetchState]] = {
    FetchState.INITIALIZING: frozenset({FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION,
                                        FetchState.FETCHING}),
    FetchState.AWAIT_RESET: frozenset({FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION,
                                       FetchState.FETCHING}),
    FetchState.AWAIT_VALIDATION: frozenset({FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION,
                                            FetchState.FETCHING}),
    FetchState.FETCHING: frozenset({FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION,
                                    FetchState.FETCHING}),
}


class IllegalStateTransition(KwireError):
    """A bug: a state machine asked for a transition the table does not allow."""


class ResetStrategy(str, enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    ERROR = "error"  # auto.offset.reset=error: no automatic reset


class SubscriptionType(enum.Enum):
    NONE = "none"
    AUTO_TOPICS = "auto_topics"      # subscribe(["a", "b"])
    AUTO_PATTERN = "auto_pattern"    # subscribe(["^a.*"]) (may mix names)
    USER_ASSIGNED = "user_assigned"  # assign([...])


class Position(NamedTuple):
    """Where the next fetch starts.

    ``offset_epoch`` is the leader epoch of the record before ``offset`` (from the record batch,
    or the committed leader epoch); ``current_leader_epoch`` is the partition leader's epoch
    the position was last checked against.  Either may be None when unknown.
    """

    offset: int
    offset_epoch: int | None = None
    current_leader_epoch: int | None = None


@dataclass(eq=False, slots=True)
class PartitionState:
    state: FetchState = FetchState.INITIALIZING
    position: Position | None = None
    reset_strategy: ResetStrategy | None = None
    paused: bool = False
    pending_revocation: bool = False
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    next_retry_ms: int = 0          # earliest time of the next reset/validation request
    inflight: bool = False          # a reset/validation request is outstanding
    blocked: bool = False           # waiting for the application (seek) after an error
    consumed: OffsetAndMetadata | None = None
    committed: int | None = None
    fence: int = 0                  # bumped whenever the position jumps (see SubscriptionState)
    created_fence: int = 0          # the fence when assigned: older application state is stale
    fence_offset: int | None = None  # the position when the fence last changed

    @property
    def has_valid_position(self) -> bool:
        return self.state is FetchState.FETCHING

    @property
    def fetchable(self) -> bool:
        return (self.state is FetchState.FETCHING and not self.paused
                and not self.pending_revocation)


class SubscriptionState:
    """Subscription, assignment and per-partition positions of one consumer.

    ``fence``: every jump of a partition's position (assign, seek, reset, truncation) takes a
    new value from one counter.  Fetched records carry the fence they were fetched under, so the
    application side can drop records of a position that no longer holds without asking.
    """

    def __init__(self, default_reset: str | ResetStrategy = ResetStrategy.LATEST):
        self.default_reset = ResetStrategy(default_reset)
        self.type = SubscriptionType.NONE
        self.topics: frozenset[str] = frozenset()
        self.patterns: tuple[re.Pattern[str], ...] = ()
        self.group_topics: frozenset[str] = frozenset()  # leader: every member's topics
        self._parts: dict[TP, PartitionState] = {}
        self._fence_seq = 0
        self.assignment_id = 0  # bumped on every assignment change

    # --- subscription ------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> bool:
        """Subscribe to names and ``^regex`` patterns; True if the subscription changed."""
        topics = list(topics)
        if not topics:
            raise ValueError("subscribe() needs at least one topic")
        if self.type is SubscriptionType.USER_ASSIGNED:
            raise KwireError("subscribe() after assign(): unassign() first")
        names = frozenset(t for t in topics if not t.startswith("^"))
        try:
            patterns = tuple(re.compile(t) for t in topics if t.startswith("^"))
        except re.error as exc:
            raise ConfigError(f"invalid topic pattern in subscribe(): {exc}") from None
        new_type = SubscriptionType.AUTO_PATTERN if patterns else SubscriptionType.AUTO_TOPICS
        changed = (names != self.topics or [p.pattern for p in patterns]
                   != [p.pattern for p in self.patterns] or new_type is not self.type)
        self.type, self.topics, self.patterns = new_type, names, patterns
        return changed

    def unsubscribe(self) -> list[TP]:
        """Drop subscription and assignment; returns the partitions that were assigned."""
        gone = list(self._parts)
        self.type = SubscriptionType.NONE
        self.topics, self.patterns, self.group_topics = frozenset(), (), frozenset()
        self._set_assignment([])
        return gone

    @property
    def is_auto(self) -> bool:
        return self.type in (SubscriptionType.AUTO_TOPICS, SubscriptionType.AUTO_PATTERN)

    @property
    def is_pattern(self) -> bool:
        return self.type is SubscriptionType.AUTO_PATTERN

    def matches(self, topic: str) -> bool:
        if topic in self.topics:
            return True
        return any(p.match(topic) for p in self.patterns)

    def resolve(self, known_topics: Iterable[str]) -> list[str]:
        """The subscribed topics among ``known_topics`` (plus every explicit name), sorted."""
        out = set(self.topics)
        if self.patterns:
            out.update(t for t in known_topics if any(p.match(t) for p in self.patterns))
        return sorted(out)

    # --- assignment --------------------------------------------------------------------------

    def assign_manual(self, tps: Iterable[TP]) -> None:
        if self.is_auto:
            raise KwireError("assign() while subscribed: unsubscribe() first")
        tps = list(dict.fromkeys(tps))
        self.type = SubscriptionType.USER_ASSIGNED if tps else SubscriptionType.NONE
        self._set_assignment(tps)

    def set_assignment(self, tps: Iterable[TP]) -> None:
        """The coordinator's assignment (eager: all of it)."""
        self._set_assignment(list(dict.fromkeys(tps)))

    def add_assignment(self, tps: Iterable[TP]) -> list[TP]:
        """Incremental assignment (cooperative); returns the partitions actually added."""
        added = []
        for tp in tps:
            if tp not in self._parts:
                self._parts[tp] = self._new_state()
                added.append(tp)
        if added:
            self.assignment_id += 1
        return added

    def remove_assignment(self, tps: Iterable[TP]) -> list[TP]:
        removed = [tp for tp in tps if self._parts.pop(tp, None) is not None]
        if removed:
            self.assignment_id += 1
        return removed

    def _set_assignment(self, tps: list[TP]) -> None:
        old = self._parts
        self._parts = {tp: old.get(tp) or self._new_state() for tp in tps}
        self.assignment_id += 1

    def _new_state(self) -> PartitionState:
        self._fence_seq += 1
        return PartitionState(fence=self._fence_seq, created_fence=self._fence_seq)

    def assigned(self) -> list[TP]:
        return list(self._parts)

    def is_assigned(self, tp: TP) -> bool:
        return tp in self._parts

    def state(self, tp: TP) -> PartitionState:
        return self._parts[tp]

    def get(self, tp: TP) -> PartitionState | None:
        return self._parts.get(tp)

    def items(self) -> ItemsView[TP, PartitionState]:
        return self._parts.items()

    def __contains__(self, tp: object) -> bool:
        return tp in self._parts

    def __len__(self) -> int:
        return len(self._parts)

    # --- the transition table ----------------------------------------------------------------

    def _transition(self, tp: TP, st: PartitionState, new: FetchState, *,
                    position: Position | None = None, keep_position: bool = False,
                    fence: bool = True) -> None:
        if new not in _LEGAL[st.state]:
            raise IllegalStateTransition(f"{tp}: {st.state.name} -> {new.name} is not allowed")
        st.state = new
        if not keep_position:
            st.position = position
        st.inflight = False
        st.blocked = False
        st.next_retry_ms = 0
        if new is not FetchState.AWAIT_RESET:
            st.reset_strategy = None
        if fence:
            self._fence_seq += 1
            st.fence = self._fence_seq
            st.fence_offset = None if st.position is None else st.position.offset

    # --- positions ---------------------------------------------------------------------------

    def seek(self, tp: TP, offset: int, leader_epoch: int | None = None) -> None:
        """The application's seek: fetch from ``offset`` (validated when an epoch is given)."""
        st = self._parts[tp]
        if leader_epoch is not None and leader_epoch >= 0:
            self._transition(tp, st, FetchState.AWAIT_VALIDATION,
                             position=Position(offset, leader_epoch, None))
        else:
            self._transition(tp, st, FetchState.FETCHING, position=Position(offset, None, None))

    def seek_committed(self, tp: TP, offset: int, leader_epoch: int | None,
                       current_leader_epoch: int | None = None, *, validate: bool = True) -> bool:
        """A committed offset from OffsetFetch; only for partitions still INITIALIZING."""
        st = self._parts.get(tp)
        if st is None or st.state is not FetchState.INITIALIZING:
            return False
        if leader_epoch is not None and leader_epoch < 0:
            leader_epoch = None
        st.committed = offset
        if validate and leader_epoch is not None:
            self._transition(tp, st, FetchState.AWAIT_VALIDATION,
                             position=Position(offset, leader_epoch, current_leader_epoch))
        else:
            self._transition(tp, st, FetchState.FETCHING,
                             position=Position(offset, leader_epoch, current_leader_epoch))
        return True

    def request_reset(self, tp: TP, strategy: ResetStrategy | str | None = None
                      ) -> NoOffsetForPartitionError | None:
        """Move ``tp`` to AWAIT_RESET.  With strategy ``error`` the partition waits for a
        seek() and the returned NoOffsetForPartitionError should reach the application."""
        st = self._parts[tp]
        strategy = ResetStrategy(strategy) if strategy is not None else self.default_reset
        self._transition(tp, st, FetchState.AWAIT_RESET, position=None)
        st.reset_strategy = strategy
        if strategy is ResetStrategy.ERROR:
            st.blocked = True
            return NoOffsetForPartitionError(
                f"no committed offset for {tp[0]} [{tp[1]}] and auto.offset.reset=error")
        return None

    def complete_reset(self, tp: TP, strategy: ResetStrategy, offset: int,
                       leader_epoch: int | None = None, current_leader_epoch: int | None = None
                       ) -> bool:
        """ListOffsets answered a reset; ignored if the partition moved on meanwhile."""
        st = self._parts.get(tp)
        if st is None or st.state is not FetchState.AWAIT_RESET or st.reset_strategy is not strategy:
            return False
        if leader_epoch is not None and leader_epoch < 0:
            leader_epoch = None
        self._transition(tp, st, FetchState.FETCHING,
                         position=Position(offset, leader_epoch, current_leader_epoch))
        return True

    def maybe_validate(self, tp: TP, leader_epoch: int | None, *, supported: bool = True) -> bool:
        """Metadata says the leader's epoch is ``leader_epoch``: a FETCHING position last
        checked under an older epoch must be validated (KIP-320).  True if it now must."""
        st = self._parts.get(tp)
        if st is None or st.position is None or leader_epoch is None or leader_epoch < 0:
            return False
        pos = st.position
        if pos.current_leader_epoch is not None and leader_epoch <= pos.current_leader_epoch:
            return False
        if st.state is FetchState.FETCHING and supported and pos.offset_epoch is not None \
                and pos.current_leader_epoch is not None:
            self._transition(tp, st, FetchState.AWAIT_VALIDATION,
                             position=pos._replace(current_leader_epoch=leader_epoch), fence=False)
            return True
        # Nothing to check against (no epoch of our own, or the first epoch we learn): adopt it.
        st.position = pos._replace(current_leader_epoch=leader_epoch)
        return False

    def request_validation(self, tp: TP) -> bool:
        """Check a FETCHING position with the leader (e.g. Fetch reported a diverging epoch)."""
        st = self._parts.get(tp)
        if st is None or st.state is not FetchState.FETCHING or st.position is None \
                or st.position.offset_epoch is None:
            return False
        self._transition(tp, st, FetchState.AWAIT_VALIDATION, keep_position=True, fence=False)
        return True

    def skip_validation(self, tp: TP) -> None:
        """The leader cannot validate (old broker): trust the position."""
        st = self._parts.get(tp)
        if st is not None and st.state is FetchState.AWAIT_VALIDATION:
            self._transition(tp, st, FetchState.FETCHING, keep_position=True, fence=False)

    def complete_validation(self, tp: TP, requested: Position, end_offset: int,
                            end_epoch: int, current_leader_epoch: int | None = None
                            ) -> KwireError | None:
        """OffsetForLeaderEpoch answered for ``requested``.

        The leader's log for the epoch of our last record ends at ``end_offset``.  Beyond our
        position, or equal, nothing was lost.  Below it, the log was truncated under us: resume
        at the divergence point when auto.offset.reset is earliest/latest, else report a
        LogTruncationError and wait for seek().  An undefined answer (-1) means the epoch is
        older than the log: reset by policy.  Returns an error for the application, if any.
        """
        st = self._parts.get(tp)
        if st is None or st.state is not FetchState.AWAIT_VALIDATION or st.position != requested:
            return None
        if end_offset < 0 or end_epoch < 0:
            if self.default_reset is ResetStrategy.ERROR:
                st.blocked = True
                st.inflight = False
                return LogTruncationError(
                    f"{tp[0]} [{tp[1]}]: the leader knows no end offset for epoch "
                    f"{requested.offset_epoch}; seek() to continue")
            self.request_reset(tp)
            return None
        if end_offset < requested.offset:
            if self.default_reset is ResetStrategy.ERROR:
                st.blocked = True
                st.inflight = False
                err = LogTruncationError(
                    f"{tp[0]} [{tp[1]}]: log truncated at offset {end_offset} (epoch {end_epoch}) "
                    f"below position {requested.offset}; seek() to continue")
                err.divergent_offset = end_offset  # type: ignore[attr-defined]
                return err
            leader_epoch = current_leader_epoch if current_leader_epoch is not None and \
                current_leader_epoch >= 0 else requested.current_leader_epoch
            self._transition(tp, st, FetchState.FETCHING,
                             position=Position(end_offset, end_epoch, leader_epoch))
            return None
        if current_leader_epoch is not None and current_leader_epoch >= 0:
            st.position = requested._replace(current_leader_epoch=current_leader_epoch)
        self._transition(tp, st, FetchState.FETCHING, keep_position=True, fence=False)
        return None

    def advance(self, tp: TP, next_offset: int, offset_epoch: int | None,
                fetch_leader_epoch: int | None = None) -> None:
        """Records up to ``next_offset`` were fetched (no fence change: this is sequential)
        from a leader that accepted ``fetch_leader_epoch`` as current.  A position that knew
        no leader epoch (a seek()) takes that one, so the next leader change is validated
        (KIP-320) instead of adopted unchecked."""
        st = self._parts[tp]
        pos = st.position
        assert pos is not None  # (fetched: it had a position)
        if offset_epoch is None or offset_epoch < 0:
            offset_epoch = pos.offset_epoch
        current = pos.current_leader_epoch
        if current is None and fetch_leader_epoch is not None and fetch_leader_epoch >= 0:
            current = fetch_leader_epoch
        st.position = Position(next_offset, offset_epoch, current)

    def position(self, tp: TP) -> Position | None:
        st = self._parts.get(tp)
        return None if st is None else st.position

    def update_watermarks(self, tp: TP, high_watermark: int | None = None,
                          last_stable_offset: int | None = None,
                          log_start_offset: int | None = None) -> None:
        st = self._parts.get(tp)
        if st is None:
            return
        if high_watermark is not None and high_watermark >= 0:
            st.high_watermark = high_watermark
        if last_stable_offset is not None and last_stable_offset >= 0:
            st.last_stable_offset = last_stable_offset
        if log_start_offset is not None and log_start_offset >= 0:
            st.log_start_offset = log_start_offset

    # --- flags -------------------------------------------------------------------------------

    def pause(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            if tp in self._parts:
                self._parts[tp].paused = True

    def resume(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            if tp in self._parts:
                self._parts[tp].paused = False

    def paused(self) -> list[TP]:
        return [tp for tp, st in self._parts.items() if st.paused]

    def mark_pending_revocation(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            st = self._parts.get(tp)
            if st is not None:
                st.pending_revocation = True

    # --- queries -----------------------------------------------------------------------------

    def fetchable(self) -> list[TP]:
        return [tp for tp, st in self._parts.items() if st.fetchable]

    def in_state(self, state: FetchState) -> list[TP]:
        return [tp for tp, st in self._parts.items() if st.state is state]

    def all_fetching(self) -> bool:
        return all(st.state is FetchState.FETCHING for st in self._parts.values())

    # --- at-least-once bookkeeping -----------------------------------------------------------

    def mark_consumed(self, tp: TP, offset: int, leader_epoch: int | None = None,
                      metadata: str | None = "", *, fence: int | None = None) -> None:
        """The application is done with every record before ``offset``.  ``fence``: the
        assignment the application saw; news about an earlier assignment of ``tp`` is ignored."""
        st = self._parts.get(tp)
        if st is not None and (fence is None or fence >= st.created_fence):
            if leader_epoch is not None and leader_epoch < 0:
                leader_epoch = None
            st.consumed = OffsetAndMetadata(offset, leader_epoch, metadata)

    def mark_committed(self, tp: TP, offset: int) -> None:
        st = self._parts.get(tp)
        if st is not None:
            st.committed = offset

    def uncommitted(self, tps: Iterable[TP] | None = None) -> dict[TP, OffsetAndMetadata]:
        """Consumed offsets the group has not stored yet (of ``tps``, default all assigned)."""
        out = {}
        items = self._parts.items() if tps is None else (
            (tp, self._parts[tp]) for tp in tps if tp in self._parts)
        for tp, st in items:
            c = st.consumed
            if c is not None and c.offset != st.committed:
                out[tp] = c
        return out
