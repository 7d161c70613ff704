"""Positions that need the partition leader's help, as a state machine without I/O.

* AWAIT_RESET partitions: ListOffsets to their leader with the reset strategy's timestamp
  (earliest = -2, latest = -1; latest honours the isolation level, so read_committed starts at
  the last stable offset).
* AWAIT_VALIDATION partitions (KIP-320): OffsetForLeaderEpoch asks the leader where the log of
  our last record's epoch ends; :meth:`SubscriptionState.complete_validation` decides between
  "fine", "truncated: resume at the divergence" and LogTruncationError.  Brokers without the
  API (or a partition without epochs) skip validation.
* The application's queries: offsets_for_times and watermarks, answered as
  :class:`ListOffsetsResult` actions.

Leaders and epochs come from :class:`kwire.net.metadata.Metadata` (read only, except for
``request_update()`` when an answer says the metadata is stale).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import KafkaTimeoutError, UnsupportedVersionError
from ._codes import E, is_invalid_metadata, is_retriable
from ._codes import error as broker_error
from .subscription import FetchState, PartitionState, ResetStrategy, SubscriptionState
from .types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Action, ErrorAction, PollResult, Request

if TYPE_CHECKING:
    from ..net.metadata import Metadata
    from .subscription import Position

log = logging.getLogger("kwire.consumer.offsets")

TP = tuple[str, int]  # (topic, partition)
Part = dict[str, Any]  # one partition's entry of a request or response body
_S = TypeVar("_S")     # what a request sent for a partition
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1

_RESET_TIMESTAMP = {ResetStrategy.EARLIEST: EARLIEST_TIMESTAMP, ResetStrategy.LATEST: LATEST_TIMESTAMP}


@dataclass
class ListOffsetsResult(Action):
    """``offsets``: {tp: (offset, timestamp, leader_epoch)} (offset -1: none at that time);
    ``errors``: {tp: exception} for partitions that failed."""
    offsets: dict[TP, tuple[int, int, int | None]]
    errors: dict[TP, BaseException]
    token: Any = None


@dataclass
class _Query:
    timestamps: dict[TP, int]          # tp -> timestamp still to answer
    token: Any
    deadline_ms: int
    isolation_level: int
    results: dict[TP, tuple[int, int, int | None]] = field(default_factory=dict)
    errors: dict[TP, BaseException] = field(default_factory=dict)
    inflight: set[TP] = field(default_factory=set)   # tps in flight
    next_try_ms: int = 0
    metadata_version: int = -1  # the cache's version when asked: only newer answers are trusted


def _by_topic(items: dict[TP, Part]) -> list[dict[str, Any]]:
    out: dict[str, list[Part]] = {}
    for (topic, _partition), part in sorted(items.items()):
        out.setdefault(topic, []).append(part)
    return [{"name": t, "topic": t, "partitions": ps} for t, ps in out.items()]


def _fixed(body: dict[str, Any]) -> Callable[[int], dict[str, Any]]:
    """A request's ``build`` for a body the same in every version."""
    return lambda _version: body


class PositionManager:
    def __init__(self, subscriptions: SubscriptionState, metadata: Metadata, *,
                 isolation_level: int = READ_COMMITTED, retry_backoff_ms: int = 100,
                 request_timeout_ms: int = 30000) -> None:
        self.subs = subscriptions
        self.metadata = metadata
        self.isolation_level = isolation_level
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.validation_supported = True
        self._queries: list[_Query] = []
        self._actions: list[Action] = []
        self._metadata_version = -1
        self._missing_reported: set[TP] = set()  # manually assigned tps reported as not existing

    def drain_actions(self) -> list[Action]:
        out, self._actions = self._actions, []
        return out

    # --- metadata-driven validation ------------------------------------------------------------

    def _leader(self, tp: TP) -> tuple[int | None, int]:
        p = self.metadata.partition(tp[0], tp[1])
        if p is None or p.leader < 0:
            return None, -1
        return p.leader, p.leader_epoch

    def _missing(self, tp: TP) -> bool:
        """Whether the cluster said ``tp`` does not exist (its topic unknown, or the topic
        without that partition): the cache's answer, not merely its ignorance."""
        t = self.metadata.topic(tp[0])
        if t is None:
            return False
        if t.error_code == E.UNKNOWN_TOPIC_OR_PARTITION and not t.partitions:
            return True
        return not t.error_code and bool(t.partitions) and tp[1] not in t.partitions

    def on_metadata(self) -> None:
        """After a metadata update: positions under a new leader epoch need validating;
        manually assigned partitions the cluster says do not exist are reported (once, until
        they appear)."""
        if self.metadata.version == self._metadata_version:
            return
        self._metadata_version = self.metadata.version
        if not self.subs.is_auto:
            for tp in self.subs.assigned():
                if self._missing(tp):
                    if tp not in self._missing_reported:
                        self._missing_reported.add(tp)
                        self._actions.append(ErrorAction(broker_error(
                            E.UNKNOWN_TOPIC_OR_PARTITION, f"{tp[0]} [{tp[1]}] does not exist"),
                            partitions=[tp]))
                else:
                    self._missing_reported.discard(tp)
        for tp, st in self.subs.items():
            if st.position is None:
                continue
            _, epoch = self._leader(tp)
            if epoch is not None and epoch >= 0:
                self.subs.maybe_validate(tp, epoch, supported=self.validation_supported)

    def reset_initializing(self) -> None:
        """Without a group there is no committed offset: INITIALIZING goes straight to reset."""
        for tp in self.subs.in_state(FetchState.INITIALIZING):
            err = self.subs.request_reset(tp)
            if err is not None:
                self._actions.append(ErrorAction(err, partitions=[tp]))

    # --- poll --------------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        out: list[Request] = []
        self._resets(now_ms, out)
        self._validations(now_ms, out)
        self._send_queries(now_ms, out)
        return PollResult(out, self._next_retry_ms())

    def _next_retry_ms(self) -> int | None:
        """The first retry or query deadline ahead (None: only a response changes things)."""
        ds = []
        for _tp, st in self.subs.items():
            if st.state in (FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION) \
                    and not st.inflight and not st.blocked:
                ds.append(st.next_retry_ms)
        for q in self._queries:
            ds.append(q.deadline_ms)
            if len(q.inflight) < len(q.timestamps):
                ds.append(q.next_try_ms)
        return min(ds) if ds else None

    def _group_by_leader(self, tps: list[TP], now_ms: int) -> dict[int, list[TP]]:
        by_node: dict[int, list[TP]] = {}
        for tp in tps:
            node, _ = self._leader(tp)
            if node is None:
                self.metadata.request_update()
                st = self.subs.get(tp)
                if st is not None:
                    st.next_retry_ms = now_ms + self.retry_backoff_ms
                continue
            by_node.setdefault(node, []).append(tp)
        return by_node

    def _resets(self, now_ms: int, out: list[Request]) -> None:
        due = [tp for tp, st in self.subs.items()
               if st.state is FetchState.AWAIT_RESET and not st.inflight and not st.blocked
               and st.next_retry_ms <= now_ms and st.reset_strategy in _RESET_TIMESTAMP]
        if not due:
            return
        for node, tps in self._group_by_leader(due, now_ms).items():
            parts: dict[TP, Part] = {}
            sent: dict[TP, tuple[ResetStrategy, int]] = {}
            for tp in tps:
                st = self.subs.state(tp)
                strategy = st.reset_strategy
                if strategy is None:  # (not due: filtered out above)
                    continue
                _, epoch = self._leader(tp)
                parts[tp] = {"partition_index": tp[1], "current_leader_epoch": epoch,
                             "timestamp": _RESET_TIMESTAMP[strategy], "max_num_offsets": 1}
                sent[tp] = (strategy, epoch)
                st.inflight = True
            body: dict[str, Any] = {"replica_id": CONSUMER_REPLICA_ID, "isolation_level": self.isolation_level,
                    "topics": _by_topic(parts), "timeout_ms": self.request_timeout_ms}
            out.append(Request(node, "ListOffsets", _fixed(body), min_version=1,
                               timeout_ms=self.request_timeout_ms,
                               context=("reset", sent), owner=self))

    def _validations(self, now_ms: int, out: list[Request]) -> None:
        due = [tp for tp, st in self.subs.items()
               if st.state is FetchState.AWAIT_VALIDATION and not st.inflight and not st.blocked
               and st.next_retry_ms <= now_ms]
        if not due:
            return
        if not self.validation_supported:
            for tp in due:
                self.subs.skip_validation(tp)
            return
        for node, tps in self._group_by_leader(due, now_ms).items():
            parts: dict[TP, Part] = {}
            sent: dict[TP, tuple[Position, int]] = {}
            for tp in tps:
                st = self.subs.state(tp)
                _, epoch = self._leader(tp)
                pos = st.position
                assert pos is not None  # AWAIT_VALIDATION always has a position
                if pos.offset_epoch is None:
                    self.subs.skip_validation(tp)
                    continue
                parts[tp] = {"partition": tp[1], "current_leader_epoch": epoch,
                             "leader_epoch": pos.offset_epoch}
                sent[tp] = (pos, epoch)
                st.inflight = True
            if not parts:
                continue
            topics = [{"topic": t["name"], "partitions": t["partitions"]} for t in _by_topic(parts)]
            body: dict[str, Any] = {"replica_id": CONSUMER_REPLICA_ID, "topics": topics}
            out.append(Request(node, "OffsetForLeaderEpoch", _fixed(body),
                               timeout_ms=self.request_timeout_ms,
                               context=("validate", sent), owner=self))

    # --- the application's queries -----------------------------------------------------------------

    def list_offsets(self, timestamps: dict[TP, int], now_ms: int, *, token: Any = None,
                     timeout_ms: int | None = None, isolation_level: int | None = None) -> None:
        """Offsets for timestamps (or EARLIEST/LATEST); answered by a ListOffsetsResult."""
        q = _Query(dict(timestamps), token,
                   now_ms + (timeout_ms if timeout_ms is not None else self.request_timeout_ms),
                   self.isolation_level if isolation_level is None else isolation_level,
                   metadata_version=self.metadata.version)
        if not timestamps:
            self._actions.append(ListOffsetsResult({}, {}, token))
            return
        self._queries.append(q)

    def _send_queries(self, now_ms: int, out: list[Request]) -> None:
        for q in list(self._queries):
            if now_ms >= q.deadline_ms:
                for tp in q.timestamps:
                    q.errors.setdefault(tp, KafkaTimeoutError(f"ListOffsets for {tp} timed out"))
                self._finish_query(q)
                continue
            if now_ms < q.next_try_ms:
                continue
            todo = [tp for tp in q.timestamps if tp not in q.inflight]
            if self.metadata.version > q.metadata_version:
                # the cluster has answered since the query was made: a partition it says does
                # not exist is an error now, not a wait until the timeout
                for tp in [tp for tp in todo if self._missing(tp)]:
                    q.errors[tp] = broker_error(E.UNKNOWN_TOPIC_OR_PARTITION,
                                                f"{tp[0]} [{tp[1]}] does not exist")
                    del q.timestamps[tp]
                    todo.remove(tp)
                if not q.timestamps:
                    self._finish_query(q)
                    continue
            if not todo:
                continue
            for node, tps in self._group_by_leader(todo, now_ms).items():
                parts: dict[TP, Part] = {}
                for tp in tps:
                    _, epoch = self._leader(tp)
                    parts[tp] = {"partition_index": tp[1], "current_leader_epoch": epoch,
                                 "timestamp": q.timestamps[tp], "max_num_offsets": 1}
                    q.inflight.add(tp)
                body: dict[str, Any] = {"replica_id": CONSUMER_REPLICA_ID,
                                        "isolation_level": q.isolation_level,
                        "topics": _by_topic(parts), "timeout_ms": self.request_timeout_ms}
                out.append(Request(node, "ListOffsets", _fixed(body), min_version=1,
                                   timeout_ms=self.request_timeout_ms,
                                   context=("query", (q, list(parts))), owner=self))
            if len(q.inflight) < len(q.timestamps):
                q.next_try_ms = now_ms + self.retry_backoff_ms

    def _finish_query(self, q: _Query) -> None:
        if q in self._queries:
            self._queries.remove(q)
            self._actions.append(ListOffsetsResult(q.results, q.errors, q.token))

    # --- responses ------------------------------------------------------------------------------------

    @staticmethod
    def _list_offsets_parts(resp: dict[str, Any]) -> dict[TP, Part]:
        out: dict[TP, Part] = {}
        for t in resp.get("topics", ()):
            for p in t.get("partitions", ()):
                out[(t["name"], p["partition_index"])] = p
        return out

    def on_response(self, request: Request, resp: dict[str, Any] | BaseException,
                    now_ms: int) -> None:
        kind, payload = request.context
        if kind == "reset":
            self._on_reset(payload, resp, now_ms)
        elif kind == "validate":
            self._on_validate(payload, resp, now_ms)
        else:
            self._on_query(payload, resp, now_ms)

    def _answered(self, sent: dict[TP, _S], parts: dict[TP, Part]
                  ) -> Iterator[tuple[TP, _S, PartitionState, Part | None, int]]:
        """The partitions of a sent request still assigned, each no longer in flight, with what
        was sent for it, its answer (None: missing) and that answer's error code."""
        for tp, what in sent.items():
            st = self.subs.get(tp)
            if st is None:
                continue
            st.inflight = False
            p = parts.get(tp)
            code = p.get("error_code", 0) if p is not None else E.UNKNOWN_TOPIC_OR_PARTITION
            yield tp, what, st, p, code

    def _retry_later(self, tps: Iterable[TP], now_ms: int) -> None:
        for tp in tps:
            st = self.subs.get(tp)
            if st is not None:
                st.inflight = False
                st.next_retry_ms = now_ms + self.retry_backoff_ms

    def _on_reset(self, sent: dict[TP, tuple[ResetStrategy, int]],
                  resp: dict[str, Any] | BaseException, now_ms: int) -> None:
        if isinstance(resp, BaseException):
            self.metadata.request_update()
            self._retry_later(sent, now_ms)
            return
        parts = self._list_offsets_parts(resp)
        for tp, (strategy, epoch), st, p, code in self._answered(sent, parts):
            if p is not None and code == 0:
                offset = p.get("offset", -1)
                if offset is None or offset < 0:
                    old = p.get("old_style_offsets") or []
                    offset = old[0] if old else -1
                if offset < 0:
                    st.next_retry_ms = now_ms + self.retry_backoff_ms
                    continue
                leader_epoch = p.get("leader_epoch", -1)
                self.subs.complete_reset(tp, strategy, offset,
                                         leader_epoch if leader_epoch >= 0 else None,
                                         epoch if epoch is not None and epoch >= 0 else None)
                continue
            if is_invalid_metadata(code) or code in (E.FENCED_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH):
                self.metadata.request_update()
            if code == E.TOPIC_AUTHORIZATION_FAILED:
                st.blocked = True
                self._actions.append(ErrorAction(broker_error(code), partitions=[tp]))
                continue
            if not is_retriable(code) and not is_invalid_metadata(code):
                self._actions.append(ErrorAction(broker_error(code), partitions=[tp]))
            st.next_retry_ms = now_ms + self.retry_backoff_ms

    def _on_validate(self, sent: dict[TP, tuple[Position, int]],
                     resp: dict[str, Any] | BaseException, now_ms: int) -> None:
        if isinstance(resp, UnsupportedVersionError):
            log.info("the broker has no OffsetForLeaderEpoch: positions are not validated")
            self.validation_supported = False
            for tp in sent:
                self.subs.skip_validation(tp)
            return
        if isinstance(resp, BaseException):
            self.metadata.request_update()
            self._retry_later(sent, now_ms)
            return
        parts: dict[TP, Part] = {}
        for t in resp.get("topics", ()):
            for p in t.get("partitions", ()):
                parts[(t["topic"], p["partition"])] = p
        for tp, (pos, epoch), st, p, code in self._answered(sent, parts):
            if p is not None and code == 0:
                err = self.subs.complete_validation(tp, pos, p.get("end_offset", -1),
                                                    p.get("leader_epoch", -1), epoch)
                if err is not None:
                    self._actions.append(ErrorAction(err, partitions=[tp]))
                continue
            if code == E.UNSUPPORTED_VERSION:
                self.subs.skip_validation(tp)
                continue
            if is_invalid_metadata(code) or code in (E.FENCED_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH):
                self.metadata.request_update()
            elif not is_retriable(code):
                self._actions.append(ErrorAction(broker_error(code), partitions=[tp]))
            st.next_retry_ms = now_ms + self.retry_backoff_ms

    def _on_query(self, payload: tuple[_Query, list[TP]], resp: dict[str, Any] | BaseException,
                  now_ms: int) -> None:
        q, tps = payload
        for tp in tps:
            q.inflight.discard(tp)
        if q not in self._queries:
            return
        if isinstance(resp, BaseException):
            self.metadata.request_update()
            q.next_try_ms = now_ms + self.retry_backoff_ms
            return
        parts = self._list_offsets_parts(resp)
        for tp in tps:
            p = parts.get(tp)
            code = p.get("error_code", 0) if p is not None else E.UNKNOWN_TOPIC_OR_PARTITION
            if p is not None and code == 0:
                offset = p.get("offset", -1)
                epoch = p.get("leader_epoch", -1)
                found_ts = p.get("timestamp", -1)
                if q.timestamps[tp] >= 0 and found_ts < 0:
                    # A search by time that found no record: Kafka answers offset -1; some
                    # brokers (Tansu 0.6) answer offset 0 with timestamp -1.  Both mean none.
                    offset = -1
                q.results[tp] = (offset, found_ts, epoch if epoch >= 0 else None)
                del q.timestamps[tp]
            elif is_retriable(code) or is_invalid_metadata(code):
                self.metadata.request_update()
                q.next_try_ms = now_ms + self.retry_backoff_ms
            else:
                q.errors[tp] = broker_error(code)
                del q.timestamps[tp]
        if not q.timestamps:
            self._finish_query(q)
