"""The Consumer: confluent-kafka's API over kwire's state machines.

Two threads, one owner each:

* the **driver** (a background thread) owns the NetworkClient, the SubscriptionState and every
  state machine (GroupCoordinator, PositionManager, Fetcher).  It loops: apply the
  application's commands, let each machine ``poll(now_ms)`` for requests, send them, wait in
  ``NetworkClient.poll`` until the next deadline or a response, hand responses back, decode
  fetched records (kwire.records) and queue them.  Heartbeats go on while the application
  processes records.
* the **application** thread (poll/consume/commit/...) takes decoded records from a queue,
  whole chunks at a time (one list per partition per fetch), without a lock per record, and
  posts commands to the driver.  Rebalance callbacks run here, in order with the records.

Threading model for the application: one thread at a time uses a Consumer.  It may be handed
from one thread to another, but poll()/consume() must not run in two threads at once: the
second, concurrent call raises ConcurrentUseError at once (it would take records from the
middle of what the first is handing out).  Other calls (commit, seek, pause, assignment, ...)
belong to the same thread as poll(), or to the callbacks poll() runs.

The queue carries record chunks and events (seek completions, errors, commit results).  Every
chunk carries the partition's *fence* (see SubscriptionState): after seek(), pause() or a
revocation the application drops chunks fetched under an older fence, so no per-partition lock
is needed.  Group events (assign/revoke/lost, and the group's errors such as max.poll.interval
exceeded) do not wait behind the buffered chunks: they go through a second, *urgent* queue
that every poll()/consume() looks at before handing out another record, so the records of a
partition that was revoked or lost are dropped before the application sees one more.  Buffered
memory is bounded (queued.max.messages.kbytes), raw and decoded together (see kwire.consumer.
fetcher): the driver decodes a piece only while the decoded ones waiting are under the
decode-ahead room, the application reports the bytes it has taken, and the fetcher stops while
the budget is used.

At-least-once auto commit: records returned by one poll()/consume() call count as consumed when
the application calls again (or commits, or closes); the driver commits consumed offsets every
auto.commit.interval.ms, before every revocation and on close.
"""
from __future__ import annotations

import logging
import re
import threading
from collections import deque
from typing import Any, Callable, Iterable, Mapping

from ..config import Config, parse_config
from ..errors import (ConcurrentUseError, ConfigError, ConsumerClosedError, DecompressionLimitError,
                      KafkaTimeoutError, KwireError, LogTruncationError, MaxPollIntervalExceededError,
                      NoOffsetForPartitionError)
from ..net import NetworkClient, now_ms
from ..net.metadata import Metadata
from ..stats import ConsumerStats
from .assignors import get_assignor
from .coordinator import GroupCoordinator
from .fetcher import DECODE_AHEAD_BYTES, Fetcher, FetchedChunk
from .member import ConsumerGroupMember
from .offsets import READ_COMMITTED, READ_UNCOMMITTED, ListOffsetsResult, PositionManager
from .subscription import FetchState, ResetStrategy, SubscriptionState
from .types import (COORDINATOR, COORDINATOR_BROKER, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
                    OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, OFFSET_STORED, AssignPartitions,
                    CommitResult, CommittedResult, ErrorAction, GroupMetadata, LosePartitions, OffsetAndMetadata,
                    Request, RevokePartitions, TopicPartition)

log = logging.getLogger("kwire.consumer")

_INF = float("inf")
_MAX_WAIT_MS = 1000          # the driver wakes at least this often
_UNKNOWN_TOPIC_REFRESH_MS = 1000
_CLOSE_TIMEOUT_MS = 15000
# Fetched data stays raw (compact bytes) in the driver until the application is about to need
# it, and is decoded a piece at a time: only Fetcher.decode_ahead_bytes of decoded records (at
# most DECODE_AHEAD_BYTES) wait in the queue.  Few live Record objects keep memory and the
# garbage collector's work small; the driver decodes the next piece while the application
# works through the current one.
# The application wakes the driver once it has taken this much of the decoded data (or when it
# runs out of records), not after every chunk: a wake-up is a system call in the application's
# thread and hands the GIL to the driver, which the application then waits to get back.
_WAKE_AFTER_BYTES = DECODE_AHEAD_BYTES // 2


# --- driver -> application events (besides the state machines' actions) ----------------------

class _SeekDone:
    __slots__ = ("tp", "fence")

    def __init__(self, tp, fence):
        self.tp, self.fence = tp, fence


class _AssignmentChanged:
    """Manual assignment changed: ``added`` {tp: created fence}, ``removed`` [tp]."""
    __slots__ = ("added", "removed")

    def __init__(self, added, removed):
        self.added, self.removed = added, removed


class _GroupEvent:
    """A coordinator action with the fences the application needs."""
    __slots__ = ("action", "fences")

    def __init__(self, action, fences):
        self.action, self.fences = action, fences


class PartitionEOF:
    """``enable.partition.eof``: the application has had every record of ``topic`` [``partition``]
    before ``offset``, the partition's high watermark when it was fetched.  poll() returns it
    (consume() returns it alone in its list), once per end reached: again only after more
    records, a seek or a new assignment."""

    __slots__ = ("topic", "partition", "offset", "fence")

    def __init__(self, topic, partition, offset, fence):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.fence = fence

    def __repr__(self) -> str:
        return f"PartitionEOF({self.topic} [{self.partition}] at {self.offset})"


class _Future:
    __slots__ = ("_event", "value", "error")

    def __init__(self):
        self._event = threading.Event()
        self.value = None
        self.error = None

    def set(self, value=None, error=None) -> None:
        self.value, self.error = value, error
        self._event.set()

    def wait(self, timeout_s: float | None):
        if not self._event.wait(timeout_s):
            raise KafkaTimeoutError("the operation did not complete within the timeout")
        if self.error is not None:
            raise self.error
        return self.value


def _timeout_s(timeout) -> float | None:
    if timeout is None or timeout < 0:
        return None
    return float(timeout)


def _tps(partitions) -> list[TopicPartition]:
    if isinstance(partitions, TopicPartition):
        return [partitions]
    return list(partitions)


class Consumer:
    """A Kafka consumer with confluent-kafka's API (``poll`` returns kwire Records).

    ::

        with Consumer({"bootstrap.servers": "localhost:9092", "group.id": "g",
                       "auto.offset.reset": "earliest"}) as c:
            c.subscribe(["topic"])
            while True:
                records = c.consume(1000, timeout=1.0)
    """

    def __init__(self, config: Mapping[str, Any] | Config | None = None, *, tracer=None, **kwargs):
        cfg = parse_config(dict(config or {}) if not isinstance(config, Config) else config,
                           role="consumer", **kwargs)
        self.config = cfg
        self._net = NetworkClient(cfg, tracer=tracer, role="consumer",
                                  allow_auto_topic_creation=cfg.allow_auto_create_topics)
        self._md: Metadata = self._net.metadata
        now = now_ms()
        self._subs = SubscriptionState(cfg.auto_offset_reset)
        self._group_id = cfg.group_id
        member_kw = {"remote_assignor": cfg.group_remote_assignor} \
            if cfg.group_protocol == "consumer" else {}
        self._coord = (ConsumerGroupMember if member_kw else GroupCoordinator)(
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

        # shared between the threads: deques (thread-safe append/popleft) and single-writer values
        self._q: deque = deque()             # driver -> app: chunks and events
        self._urgent: deque = deque()        # driver -> app: group events, ahead of the chunks
        self._cond = threading.Condition()
        self._app_waiting = False
        self._cmds: deque = deque()          # app -> driver
        self._released: deque = deque()      # app -> driver: (tp, bytes) taken from the buffer
        self._unsignalled = 0                # app: bytes released since it last woke the driver
        # (half the buffer at most: with a small queued.max.messages.kbytes the driver must hear
        # of the room while the application still has records to work on)
        self._wake_after_bytes = max(1, min(_WAKE_AFTER_BYTES, self._fetcher.decode_ahead_bytes // 2))
        self._last_poll_ms = now             # app writes
        self._in_poll = False                # app writes: blocked inside poll/consume/close
        self._consumed: dict = {}            # app writes: tp -> (offset, epoch, fence)
        self._consumed_ver = 0
        self._driver_error: BaseException | None = None
        self._driver_done = threading.Event()
        self._auth_reported: BaseException | None = None  # driver writes: last one pushed

        # application-thread state
        self._in_app = threading.Lock()      # held by the thread inside poll()/consume()
        self._cur: list | None = None
        self._cur_chunk: FetchedChunk | None = None
        self._cur_tp = None
        self._idx = 0
        self._fence: dict = {}               # tp -> lowest acceptable chunk fence
        self._assign_fence: dict = {}        # tp -> the fence of its assignment
        self._pending_seeks: dict = {}
        self._pos: dict = {}                 # tp -> (next offset, leader epoch, assign fence)
        self._dirty: set = set()
        self._assigned: dict = {}            # the application's view of the assignment
        self._on_assign = self._on_revoke = self._on_lost = None
        self._auto_store = cfg.enable_auto_offset_store
        self._app_subscribed = False
        self._closed = False
        self._closing = False
        self._app_event: PartitionEOF | None = None  # handed out by the next poll()/consume()

        # driver-thread state
        self._raw: deque = deque()           # fetched chunks not decoded yet
        self._decoded_bytes = 0              # decoded and queued, not yet released by the app
        self._inflight: dict = {}
        self._seen_consumed_ver = 0
        self._md_version = -1
        self._next_unknown_refresh_ms = 0
        self._close_deadline_ms: int | None = None
        self._close_future: _Future | None = None
        self._eof_at: dict = {} if cfg.enable_partition_eof else None  # tp -> (offset, fence) reported
        self._stats = ConsumerStats.maybe(cfg, self._net, now)  # None: statistics off

        self._thread = threading.Thread(target=self._drive, name="kwire-consumer", daemon=True)
        self._thread.start()

    # =========================================================================================
    # application thread: the public API
    # =========================================================================================

    def subscribe(self, topics: Iterable[str], on_assign: Callable | None = None,
                  on_revoke: Callable | None = None, on_lost: Callable | None = None) -> None:
        """Join the group (group.id) consuming ``topics``: names, or ``^regex`` patterns."""
        self._check_open()
        topics = [topics] if isinstance(topics, str) else list(topics)
        if self._group_id is None:
            raise KwireError("subscribe() needs group.id")
        if not topics:
            raise ValueError("subscribe() needs at least one topic")
        for t in topics:
            if t.startswith("^"):
                try:
                    re.compile(t)
                except re.error as exc:
                    raise ConfigError(f"invalid topic pattern {t!r} in subscribe(): {exc}") from None
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        self._app_subscribed = True
        self._call("subscribe", topics)

    def unsubscribe(self) -> None:
        """Leave the group: on_revoke for the current assignment, commit (auto commit), leave."""
        self._check_open()
        self._app_enter()
        owned = list(self._assigned)
        if owned and self._on_revoke is not None:
            self._on_revoke(self, [TopicPartition(t, p) for t, p in owned])
        consumed = self._consumed_for(owned)
        self._forget(owned)
        self._app_subscribed = False
        self._call("unsubscribe", consumed)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment (or, inside on_assign, the starting offsets of the assignment)."""
        self._check_open()
        parts = [(tp.topic, tp.partition, tp.offset, tp.leader_epoch) for tp in _tps(partitions)]
        self._call("assign", parts, False)

    def incremental_assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        parts = [(tp.topic, tp.partition, tp.offset, tp.leader_epoch) for tp in _tps(partitions)]
        self._call("assign", parts, True)

    def unassign(self) -> None:
        self._check_open()
        self._call("unassign", None)

    def incremental_unassign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        self._call("unassign", [(tp.topic, tp.partition) for tp in _tps(partitions)])

    def consumer_group_metadata(self) -> GroupMetadata:
        """The group membership as a transactional producer's send_offsets_to_transaction()
        needs it (group id, generation or KIP-848 member epoch, member id, group.instance.id);
        take it after poll() returned the records whose offsets go into the transaction."""
        self._check_open()
        if self._group_id is None:
            raise ConfigError("consumer_group_metadata() needs group.id")
        coord = self._coord
        epoch = getattr(coord, "member_epoch", None)
        generation = epoch if isinstance(epoch, int) else getattr(coord, "generation", -1)
        return GroupMetadata(self._group_id, int(generation), getattr(coord, "member_id", "") or "",
                             getattr(coord, "group_instance_id", None))

    def assignment(self) -> list[TopicPartition]:
        """The partitions assigned, without those the group has taken away already: lost ones
        leave at once (their on_lost and records wait for the next poll()/consume()); revoked
        ones when on_revoke has run."""
        lost = self._lost_pending() if self._urgent else ()
        return [TopicPartition(t, p) for t, p in self._assigned if (t, p) not in lost]

    def _lost_pending(self) -> set:
        """Partitions lost by the driver whose event waits in the urgent queue."""
        lost: set = set()
        for ev in list(self._urgent):  # (a copy, taken at once: the driver may append)
            if type(ev) is _GroupEvent and isinstance(ev.action, LosePartitions):
                lost.update(ev.action.partitions)
        return lost

    def poll(self, timeout: float | None = None):
        """The next record, or None after ``timeout`` seconds (None or -1: wait forever)."""
        if not self._in_app.acquire(False):
            raise ConcurrentUseError("poll() called while poll()/consume() of this consumer runs "
                                     "(in another thread, or in a callback it runs)")
        try:
            if self._closed:
                raise ConsumerClosedError("poll() on a closed consumer")
            return self._poll(timeout)
        finally:
            self._in_app.release()

    def _poll(self, timeout):
        self._app_enter()
        if self._urgent:
            self._take_urgent()
        cur = self._cur
        if cur is None:
            if not self._next_chunk(self._deadline(timeout)):
                ev, self._app_event = self._app_event, None
                return ev
            cur = self._cur
        i = self._idx
        rec = cur[i]
        tp = self._cur_tp
        i += 1
        # after a chunk's last record, past its trailing control batches and aborted records too
        nxt = self._cur_chunk.next_offset if i >= len(cur) else rec.offset + 1
        self._pos[tp] = (nxt, rec.leader_epoch, self._assign_fence.get(tp, 0))
        self._dirty.add(tp)
        if i >= len(cur):
            self._done_chunk()
        else:
            self._idx = i
        return rec

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list:
        """Up to ``num_messages`` records; waits up to ``timeout`` seconds for the first one
        (None or -1: forever) and returns as soon as nothing more is buffered."""
        if num_messages < 0 or num_messages > 1_000_000:
            raise ValueError("num_messages must be between 0 and 1000000")
        if not self._in_app.acquire(False):
            raise ConcurrentUseError("consume() called while poll()/consume() of this consumer "
                                     "runs (in another thread, or in a callback it runs)")
        try:
            if self._closed:
                raise ConsumerClosedError("consume() on a closed consumer")
            return self._consume(num_messages, timeout)
        finally:
            self._in_app.release()

    def _consume(self, num_messages, timeout):
        self._app_enter()
        if self._urgent:
            self._take_urgent()
        out = None
        need = num_messages
        deadline = self._deadline(timeout)
        while need > 0:
            if self._urgent and out is not None:
                break  # a group event: handled (before any further record) by the next call
            cur = self._cur
            if cur is None:
                # With records in hand, return them before handling an event: a revocation
                # would count them as consumed (and commit them) before the caller saw them.
                if not self._next_chunk(deadline if out is None else 0, events=out is None):
                    if self._app_event is not None:  # (only when out is None)
                        out, self._app_event = [self._app_event], None
                    break
                cur = self._cur
            i = self._idx
            n = len(cur)
            j = i + need
            if i == 0 and j >= n:
                part = cur
            else:
                part = cur[i:j]
            last = part[-1]
            tp = self._cur_tp
            nxt = self._cur_chunk.next_offset if j >= n else last.offset + 1  # as in poll()
            self._pos[tp] = (nxt, last.leader_epoch, self._assign_fence.get(tp, 0))
            self._dirty.add(tp)
            if j >= n:
                self._done_chunk()
            else:
                self._idx = j
            if out is None:
                out = part
            else:
                out.extend(part)
            need -= len(part)
        return out if out is not None else []

    def commit(self, message=None, offsets: Iterable[TopicPartition] | None = None,
               asynchronous: bool = True):
        """Commit ``offsets``, the position after ``message``, or (neither) every partition's
        position after the records returned so far.  Synchronous commits return the committed
        TopicPartitions or raise; asynchronous ones report to the ``on_commit`` callback."""
        self._check_open()
        self._app_enter()
        if self._group_id is None:
            raise KwireError("commit() needs group.id")
        if message is not None:
            om = {(message.topic, message.partition): OffsetAndMetadata(
                message.offset + 1, message.leader_epoch if message.leader_epoch >= 0 else None, "")}
        elif offsets is not None:
            om = {}
            for tp in _tps(offsets):
                if tp.offset < 0:
                    raise ValueError(f"commit offset for {tp.topic} [{tp.partition}] must be >= 0")
                om[(tp.topic, tp.partition)] = OffsetAndMetadata(tp.offset, tp.leader_epoch, tp.metadata)
        else:
            source = self._pos if self._auto_store else self._consumed
            om = {tp: OffsetAndMetadata(off, ep if ep is not None and ep >= 0 else None, "")
                  for tp, (off, ep, _) in source.items() if tp in self._assigned}
        if not om:
            if asynchronous:
                return None
            raise KwireError("no offsets to commit")
        if asynchronous:
            self._post("commit", om, None)
            return None
        fut = _Future()
        self._post("commit", om, fut)
        result: CommitResult = self._wait(fut, None)
        if result.error is not None:
            raise result.error
        return [TopicPartition(t, p, o.offset, o.metadata, o.leader_epoch)
                for (t, p), o in sorted(result.offsets.items())]

    def store_offsets(self, message=None, offsets: Iterable[TopicPartition] | None = None) -> None:
        """Mark what the application has processed (the position after ``message``, or
        ``offsets``): the next commit, automatic or commit() without arguments, stores it.
        Meant for enable.auto.offset.store=false."""
        self._check_open()
        if message is not None:
            items = [((message.topic, message.partition), message.offset + 1, message.leader_epoch)]
        elif offsets is not None:
            items = [((tp.topic, tp.partition), tp.offset, tp.leader_epoch) for tp in _tps(offsets)]
        else:
            raise ValueError("store_offsets() needs a message or offsets")
        for tp, off, ep in items:
            if tp not in self._assigned:
                raise KwireError(f"store_offsets(): {tp[0]} [{tp[1]}] is not assigned")
            self._consumed[tp] = (off, ep, self._assign_fence.get(tp, 0))
        self._consumed_ver += 1

    def committed(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                  ) -> list[TopicPartition]:
        """The committed offsets of ``partitions`` (offset -1001 where nothing is committed)."""
        self._check_open()
        tps = [(tp.topic, tp.partition) for tp in _tps(partitions)]
        timeout_ms = None if _timeout_s(timeout) is None else int(timeout * 1000)
        fut = _Future()
        self._post("committed", tps, fut, timeout_ms)
        res: CommittedResult = self._wait(fut, timeout)
        if res.error is not None:
            raise res.error
        out = []
        for t, p in tps:
            om, err = res.offsets.get((t, p), (OffsetAndMetadata(-1), None))
            out.append(TopicPartition(t, p, om.offset if om.offset >= 0 else OFFSET_INVALID,
                                      om.metadata, om.leader_epoch, err))
        return out

    def position(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """The offset of the next record poll() would return, per partition (-1001 unknown)."""
        self._check_open()
        parts = _tps(partitions)
        unknown = [(tp.topic, tp.partition) for tp in parts
                   if (tp.topic, tp.partition) not in self._pos]
        fallback = self._call("position", unknown) if unknown else {}
        out = []
        for tp in parts:
            key = (tp.topic, tp.partition)
            if key in self._pos:
                off, ep, _ = self._pos[key]
            else:
                off, ep = fallback.get(key, (OFFSET_INVALID, None))
            out.append(TopicPartition(tp.topic, tp.partition, off, None,
                                      ep if ep is not None and ep >= 0 else None))
        return out

    def seek(self, partition: TopicPartition) -> None:
        """Fetch ``partition`` from ``partition.offset`` (OFFSET_BEGINNING / OFFSET_END too)."""
        self._check_open()
        tp = (partition.topic, partition.partition)
        if tp not in self._assigned:
            raise KwireError(f"seek(): {partition.topic} [{partition.partition}] is not assigned")
        self._drop_current(tp)
        self._fence[tp] = _INF
        self._pending_seeks[tp] = self._pending_seeks.get(tp, 0) + 1
        off = partition.offset
        if off >= 0:
            self._pos[tp] = (off, partition.leader_epoch, self._assign_fence.get(tp, 0))
            if self._auto_store:
                self._consumed[tp] = self._pos[tp]
                self._consumed_ver += 1
        else:
            self._pos.pop(tp, None)
        self._post("seek", tp, off, partition.leader_epoch)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop returning and fetching records of ``partitions`` (buffered ones are dropped and
        fetched again after resume)."""
        self._check_open()
        items = []
        for tp in _tps(partitions):
            key = (tp.topic, tp.partition)
            if key not in self._assigned:
                continue
            self._drop_current(key)
            self._fence[key] = _INF
            self._pending_seeks[key] = self._pending_seeks.get(key, 0) + 1
            pos = self._pos.get(key)
            items.append((key, None if pos is None else (pos[0], pos[1])))
        self._post("pause", items)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        self._post("resume", [(tp.topic, tp.partition) for tp in _tps(partitions)])

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        """(low, high) watermarks; ``cached`` answers from the last fetch (-1001 if none)."""
        self._check_open()
        tp = (partition.topic, partition.partition)
        if cached:
            return self._call("watermarks", tp)
        res = self._list_offsets({tp: EARLIEST_TIMESTAMP}, timeout, READ_UNCOMMITTED)
        low = res[tp]
        res = self._list_offsets({tp: LATEST_TIMESTAMP}, timeout, READ_UNCOMMITTED)
        return low, res[tp]

    def offsets_for_times(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                          ) -> list[TopicPartition]:
        """For each partition, the earliest offset whose timestamp is >= ``partition.offset``
        (a timestamp in ms); -1 where there is none."""
        self._check_open()
        parts = _tps(partitions)
        res = self._list_offsets({(tp.topic, tp.partition): tp.offset for tp in parts}, timeout,
                                 self._isolation)
        return [TopicPartition(tp.topic, tp.partition, res[(tp.topic, tp.partition)]) for tp in parts]

    def list_topics(self, topic: str | None = None, timeout: float | None = -1):
        """A snapshot of the cluster's metadata (all topics, or ``topic``)."""
        self._check_open()
        fut = _Future()
        self._post("metadata", topic, fut, None if _timeout_s(timeout) is None else int(timeout * 1000))
        return self._wait(fut, timeout)

    def close(self) -> None:
        """on_revoke, commit consumed offsets (auto commit), leave the group, stop."""
        if self._closed:
            return
        self._closing = True
        try:
            if self._driver_error is None and self._thread.is_alive():
                self._app_enter()
                self._in_poll = True
                owned = list(self._assigned)
                if owned and self._app_subscribed and self._on_revoke is not None:
                    try:
                        self._on_revoke(self, [TopicPartition(t, p) for t, p in owned])
                    except Exception:
                        log.exception("on_revoke raised during close()")
                fut = _Future()
                self._post("close", self._consumed_for(owned), fut)
                try:
                    fut.wait(_CLOSE_TIMEOUT_MS / 1000 + 5)
                except KafkaTimeoutError:
                    log.warning("close(): the driver did not finish in time")
        finally:
            self._closed = True
            self._cmds.append(("stop",))
            self._net.wakeup()
            self._thread.join(10)
            self._q.clear()
            self._urgent.clear()
            self._cur = None
            self._assigned = {}  # assignment() of a closed consumer: nothing

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            if not self._closed and self._thread.is_alive():
                self._cmds.append(("stop",))
                self._net.wakeup()
        except Exception:
            pass

    # --- application-thread helpers -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        if self._driver_error is not None:
            raise self._driver_error

    def _deadline(self, timeout) -> float:
        t = _timeout_s(timeout)
        return _INF if t is None else now_ms() + t * 1000

    def _app_enter(self) -> None:
        """Records returned by the previous call are consumed now (at-least-once); with
        enable.auto.offset.store=false only store_offsets() says what is consumed."""
        self._last_poll_ms = now_ms()
        if self._dirty and self._auto_store:
            pos, consumed = self._pos, self._consumed
            for tp in self._dirty:
                p = pos.get(tp)
                if p is not None:
                    consumed[tp] = p
            self._dirty.clear()
            self._consumed_ver += 1
        elif self._dirty:
            self._dirty.clear()

    def _consumed_for(self, tps) -> dict:
        return {tp: self._consumed[tp] for tp in tps if tp in self._consumed}

    def _post(self, *cmd) -> None:
        self._cmds.append(cmd)
        self._net.wakeup()

    def _wait(self, fut: _Future, timeout):
        t = _timeout_s(timeout)
        end = None if t is None else now_ms() + t * 1000
        while True:
            step = 0.2 if end is None else max(0.0, min(0.2, (end - now_ms()) / 1000))
            try:
                return fut.wait(step)
            except KafkaTimeoutError:
                if self._driver_error is not None:
                    raise self._driver_error from None
                if not self._thread.is_alive():
                    raise KwireError("the consumer's driver thread stopped") from None
                if end is not None and now_ms() >= end:
                    raise

    def _call(self, *cmd):
        fut = _Future()
        self._post(*cmd, fut)
        return self._wait(fut, None)

    def _list_offsets(self, timestamps: dict, timeout, isolation) -> dict:
        timeout_ms = None if _timeout_s(timeout) is None else int(timeout * 1000)
        fut = _Future()
        self._post("list_offsets", timestamps, fut, timeout_ms, isolation)
        res: ListOffsetsResult = self._wait(fut, timeout)
        if res.errors:
            raise next(iter(res.errors.values()))
        return {tp: v[0] for tp, v in res.offsets.items()}

    def _release(self, chunk: FetchedChunk) -> None:
        self._released.append((chunk.tp, chunk.nbytes))
        self._unsignalled += chunk.nbytes
        if self._unsignalled >= self._wake_after_bytes:
            self._wake_driver()

    def _wake_driver(self) -> None:
        """Tell a waiting driver about the bytes taken since the last call, if it has use for
        them: chunks to decode, or room to fetch again."""
        self._unsignalled = 0
        if self._raw or self._fetcher.starved:
            self._net.wakeup()

    def _done_chunk(self) -> None:
        chunk = self._cur_chunk
        self._cur = self._cur_chunk = self._cur_tp = None
        self._idx = 0
        if chunk is not None:
            self._release(chunk)

    def _drop_current(self, tp) -> None:
        if self._cur_tp == tp:
            self._done_chunk()

    def _forget(self, tps) -> None:
        for tp in tps:
            self._assigned.pop(tp, None)
            self._fence.pop(tp, None)
            self._assign_fence.pop(tp, None)
            self._pending_seeks.pop(tp, None)
            self._pos.pop(tp, None)
            self._consumed.pop(tp, None)
            self._dirty.discard(tp)
            self._drop_current(tp)
        self._consumed_ver += 1

    def _adopt(self, fences: dict) -> None:
        for tp, f in fences.items():
            self._assigned[tp] = True
            self._fence[tp] = f
            self._assign_fence[tp] = f
            self._pending_seeks.pop(tp, None)
            self._pos.pop(tp, None)
            self._consumed.pop(tp, None)

    def _next_chunk(self, deadline: float, events: bool = True) -> bool:
        """Make the next acceptable chunk current, handling events on the way; False when the
        deadline passes first (or, with ``events=False``, when an event comes next)."""
        q = self._q
        urgent = self._urgent
        while True:
            if urgent:
                if not events:
                    return False
                self._take_urgent()
            try:
                if not events and type(q[0]) is not FetchedChunk:
                    return False
                item = q.popleft()
            except IndexError:
                if self._driver_error is not None:
                    raise self._driver_error
                now = now_ms()
                if now >= deadline:
                    return False
                if self._unsignalled:
                    self._wake_driver()  # out of records: whatever we took counts now
                with self._cond:
                    self._app_waiting = True
                    self._in_poll = True
                    try:
                        if not q and not urgent:
                            wait = None if deadline == _INF else (deadline - now) / 1000
                            self._cond.wait(min(wait, 1.0) if wait is not None else 1.0)
                    finally:
                        self._app_waiting = False
                        self._in_poll = False
                self._last_poll_ms = now_ms()
                continue
            if type(item) is FetchedChunk:
                f = self._fence.get(item.tp)
                if f is None or item.fence < f:
                    self._release(item)
                    continue
                if not item.records:  # only control batches or aborted transactions
                    self._step_over(item)
                    continue
                self._cur = item.records
                self._cur_chunk = item
                self._cur_tp = item.tp
                self._idx = 0
                return True
            if type(item) is PartitionEOF:
                f = self._fence.get((item.topic, item.partition))
                if f is None or item.fence < f:
                    continue  # seeked, paused or revoked since
                self._app_event = item
                return False
            self._event(item)

    def _take_urgent(self) -> None:
        """Handle the group events waiting (callbacks run here; an error raised leaves the rest
        for the next call)."""
        urgent = self._urgent
        while urgent:
            self._event(urgent.popleft())

    def _step_over(self, chunk: FetchedChunk) -> None:
        """The position moves past a chunk with no record for the application (its bytes were
        released when it was decoded), as past a record: position() and commits see it."""
        tp = chunk.tp
        prev = self._pos.get(tp)
        self._pos[tp] = (chunk.next_offset, prev[1] if prev else None, self._assign_fence.get(tp, 0))
        self._dirty.add(tp)

    def _event(self, item) -> None:
        if type(item) is dict:  # a statistics document from the driver (stats_cb)
            self._stats.deliver(self, item)
            return
        if type(item) is _SeekDone:
            n = self._pending_seeks.get(item.tp, 0) - 1
            if n <= 0:
                self._pending_seeks.pop(item.tp, None)
                # (a seek from before a revocation and a new assignment is stale: group events
                # overtake the queue, so its completion may come after the new assignment)
                if item.tp in self._assigned and item.fence >= self._assign_fence.get(item.tp, 0):
                    self._fence[item.tp] = item.fence
            else:
                self._pending_seeks[item.tp] = n
            return
        if type(item) is _AssignmentChanged:
            self._forget(item.removed)
            self._adopt(item.added)
            return
        if type(item) is _GroupEvent:
            a = item.action
            if self._stats is not None:
                self._stats.on_rebalance(type(a).__name__, now_ms())
            tps = [TopicPartition(t, p) for t, p in a.partitions]
            if isinstance(a, AssignPartitions):
                self._adopt(item.fences)
                if self._on_assign is not None:
                    self._on_assign(self, tps)
            elif isinstance(a, RevokePartitions):
                # Partitions lost since the revocation was asked for (e.g. max.poll.interval
                # expired before the application came back) get on_lost only, not both.
                lost = {tp for ev in self._urgent if type(ev) is _GroupEvent
                        and isinstance(ev.action, LosePartitions) for tp in ev.action.partitions}
                tps = [TopicPartition(t, p) for t, p in a.partitions
                       if (t, p) in self._assigned and (t, p) not in lost]
                self._app_enter()
                consumed = self._consumed_for(a.partitions)
                try:
                    if self._on_revoke is not None and tps:
                        self._on_revoke(self, tps)
                finally:
                    self._app_enter()
                    consumed.update(self._consumed_for(a.partitions))
                    self._forget([tp for tp in a.partitions if tp not in lost])
                    self._post("ack_revoke", a.ack_id, consumed)
            elif isinstance(a, LosePartitions):
                tps = [TopicPartition(t, p) for t, p in a.partitions if (t, p) in self._assigned]
                self._forget(a.partitions)
                cb = self._on_lost or self._on_revoke
                if cb is not None and tps:
                    cb(self, tps)
            return
        if isinstance(item, CommitResult):
            cb = self.config.on_commit
            if cb is not None:
                parts = [TopicPartition(t, p, o.offset, o.metadata, o.leader_epoch)
                         for (t, p), o in sorted(item.offsets.items())]
                cb(item.error, parts)
            return
        if isinstance(item, ErrorAction):
            err = item.error
            # (a batch over fetch.max.decompressed.bytes fails the same way on every re-fetch:
            # the application must raise the limit or seek past it, so it is raised too)
            if item.fatal or isinstance(err, (NoOffsetForPartitionError, LogTruncationError,
                                              MaxPollIntervalExceededError,
                                              DecompressionLimitError)) or \
                    getattr(err, "name", "") in ("OFFSET_OUT_OF_RANGE", "TOPIC_AUTHORIZATION_FAILED",
                                                 "GROUP_AUTHORIZATION_FAILED"):
                raise err
            cb = self.config.error_cb
            if cb is not None:
                cb(err)
            else:
                where = ", ".join(f"{t} [{p}]" for t, p in item.partitions or ())
                log.warning("consumer error%s: %s", f" on {where}" if where else "", err)
            return
        if isinstance(item, BaseException):
            raise item

    # =========================================================================================
    # driver thread
    # =========================================================================================

    def _drive(self) -> None:
        try:
            while True:
                now = now_ms()
                if self._apply_commands(now):
                    break
                self._sync_from_app(now)
                self._metadata_step(now)
                self._send_all(now)  # (before decoding: e.g. a Fetch the released bytes allow)
                self._decode_ahead()
                self._dispatch_actions()
                if self._stats is not None and self._stats.due(now):
                    self._push_urgent(self._stats.driver_report(self, now))
                if self._close_future is not None and self._close_complete(now):
                    break
                timeout = self._wait_ms(now)
                done = self._net.poll(timeout)
                auth = self._net.authentication_error
                if auth is not None and auth is not self._auth_reported:
                    # Wrong credentials or an untrusted broker: the application hears of it at
                    # once (consume() raises it, as Java's poll() does) instead of waiting on
                    # retries that cannot succeed; the network client's backoff paces them.
                    self._auth_reported = auth
                    self._push(auth)
                if done:
                    self._on_done(done)
                    self._dispatch_actions()
        except BaseException as exc:  # a bug or a dead network client: tell the application
            log.exception("the consumer's driver thread failed")
            self._driver_error = exc if isinstance(exc, KwireError) else KwireError(
                f"consumer driver failed: {exc!r}")
            self._q.append(self._driver_error)  # (nothing decodes the raw chunks any more)
            if self._app_waiting:
                with self._cond:
                    self._cond.notify()
        finally:
            fut = self._close_future
            try:
                self._net.close()
            except Exception:
                pass
            self._driver_done.set()
            if fut is not None:
                fut.set(None)
            with self._cond:
                self._cond.notify_all()

    def _push(self, item) -> None:
        """Queue an event for the application, after every chunk fetched before it (behind
        the raw chunks, which are decoded only as the application makes room)."""
        (self._raw if self._raw else self._q).append(item)
        if self._app_waiting:
            with self._cond:
                self._cond.notify()

    def _push_urgent(self, item) -> None:
        """Queue a group event for the application ahead of every buffered chunk: the next
        poll()/consume() handles it before handing out another record."""
        self._urgent.append(item)
        if self._app_waiting:
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
            chunk = self._fetcher.decode_piece(chunk, self._fetcher.piece_bytes)
            if raw[0].done:
                raw.popleft()
            if chunk is None:
                return
            if self._stats is not None:
                self._stats.on_chunk(chunk)
            self._decoded_bytes += chunk.nbytes
            self._q.append(chunk)
        if self._app_waiting:
            with self._cond:
                self._cond.notify()

    def _decode_ahead(self) -> None:
        raw = self._raw
        ahead = self._fetcher.decode_ahead_bytes
        while raw and (self._decoded_bytes < ahead or type(raw[0]) is not FetchedChunk):
            self._decode_next()

    def _wait_ms(self, now: int) -> int:
        ds = [self._coord.next_deadline_ms(), self._positions.next_deadline_ms(),
              self._fetcher.next_deadline_ms()]
        d = min((x for x in ds if x is not None), default=now + _MAX_WAIT_MS)
        if self._close_deadline_ms is not None:
            d = min(d, self._close_deadline_ms)
        if self._stats is not None and not self._stats.pending:
            d = min(d, self._stats.next_ms)
        if self._released or self._cmds or (self._raw and self._decoded_bytes <
                                            self._fetcher.decode_ahead_bytes):
            return 0
        return int(max(0, min(d - now, _MAX_WAIT_MS)))

    # --- app -> driver ----------------------------------------------------------------------------

    def _sync_from_app(self, now: int) -> None:
        rel = self._released
        while rel:
            tp, n = rel.popleft()
            self._fetcher.release(tp, n)
            self._decoded_bytes -= n
        if self._consumed_ver != self._seen_consumed_ver:
            self._seen_consumed_ver = self._consumed_ver
            for tp, (off, ep, fence) in self._consumed.copy().items():
                self._subs.mark_consumed(tp, off, ep, fence=fence)
        coord = self._coord
        coord.app_in_poll = self._in_poll or self._closing
        if self._last_poll_ms > coord.last_app_poll_ms:
            coord.on_app_poll(self._last_poll_ms)

    def _apply_commands(self, now: int) -> bool:
        cmds = self._cmds
        while cmds:
            cmd = cmds.popleft()
            name = cmd[0]
            if name == "stop":
                return True
            try:
                getattr(self, "_cmd_" + name)(now, *cmd[1:])
            except Exception as exc:
                fut = cmd[-1] if isinstance(cmd[-1], _Future) else None
                if fut is not None:
                    fut.set(error=exc)
                else:
                    self._push(ErrorAction(exc))
        return False

    def _mark(self, consumed: dict) -> None:
        for tp, (off, ep, fence) in consumed.items():
            self._subs.mark_consumed(tp, off, ep, fence=fence)

    def _cmd_subscribe(self, now, topics, fut) -> None:
        changed = self._subs.subscribe(topics)
        if self._subs.is_pattern:
            self._md.want_all_topics()
        self._md.add_topics([t for t in topics if not t.startswith("^")])
        self._md.request_update()
        if changed:
            self._coord.on_subscription_changed()
        fut.set(None)

    def _cmd_unsubscribe(self, now, consumed, fut) -> None:
        self._mark(consumed)
        if self._subs.is_auto:
            self._coord.leave(now, revoke=False)
        fut.set(None)

    def _cmd_assign(self, now, parts, incremental, fut) -> None:
        subs = self._subs
        tps = [(t, p) for t, p, _, _ in parts]
        if subs.is_auto:
            # inside on_assign: the group decided the partitions; apply the offsets given
            for t, p, off, ep in parts:
                if (t, p) in subs:
                    self._apply_offset((t, p), off, ep)
            fut.set(None)
            return
        old = set(subs.assigned())
        new = list(dict.fromkeys((list(subs.assigned()) if incremental else []) + tps))
        subs.assign_manual(new)
        self._md.add_topics({t for t, _ in new})
        for t, p, off, ep in parts:
            self._apply_offset((t, p), off, ep)
        added = {tp: subs.state(tp).created_fence for tp in new if tp not in old}
        removed = [tp for tp in old if tp not in set(new)]
        self._push(_AssignmentChanged(added, removed))
        fut.set(None)

    def _apply_offset(self, tp, offset, leader_epoch) -> None:
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

    def _cmd_unassign(self, now, tps, fut) -> None:
        subs = self._subs
        if subs.is_auto:
            raise KwireError("unassign() while subscribed: use unsubscribe()")
        old = subs.assigned()
        keep = [] if tps is None else [tp for tp in old if tp not in set(tps)]
        subs.assign_manual(keep)
        self._push(_AssignmentChanged({}, [tp for tp in old if tp not in set(keep)]))
        fut.set(None)

    def _cmd_seek(self, now, tp, offset, leader_epoch) -> None:
        if tp not in self._subs:
            return
        self._apply_offset(tp, offset, leader_epoch)
        self._push(_SeekDone(tp, self._subs.state(tp).fence))

    def _cmd_pause(self, now, items) -> None:
        subs = self._subs
        for tp, app_pos in items:
            st = subs.get(tp)
            if st is None:
                continue
            st.paused = True
            if st.state is FetchState.FETCHING:
                # rewind to what the application has seen: buffered records are dropped
                offset = app_pos[0] if app_pos is not None else st.fence_offset
                if offset is not None:
                    subs.seek(tp, offset)
                    if app_pos is not None and app_pos[1] is not None:
                        st.position = st.position._replace(offset_epoch=app_pos[1])
            self._push(_SeekDone(tp, st.fence))

    def _cmd_resume(self, now, tps) -> None:
        self._subs.resume(tps)

    def _cmd_commit(self, now, offsets, fut) -> None:
        self._coord.commit(offsets, now, token=fut)

    def _cmd_committed(self, now, tps, fut, timeout_ms) -> None:
        self._coord.fetch_committed(tps, now, token=fut, timeout_ms=timeout_ms)

    def _cmd_list_offsets(self, now, timestamps, fut, timeout_ms, isolation) -> None:
        self._md.add_topics({t for t, _ in timestamps})
        self._positions.list_offsets(timestamps, now, token=fut, timeout_ms=timeout_ms,
                                     isolation_level=isolation)

    def _cmd_ack_revoke(self, now, ack_id, consumed) -> None:
        self._mark(consumed)
        self._coord.ack_revoke(ack_id, now)

    def _cmd_position(self, now, tps, fut) -> None:
        out = {}
        for tp in tps:
            st = self._subs.get(tp)
            if st is not None and st.state is FetchState.FETCHING and st.fence_offset is not None:
                out[tp] = (st.fence_offset, st.position.offset_epoch if st.position else None)
        fut.set(out)

    def _cmd_watermarks(self, now, tp, fut) -> None:
        st = self._subs.get(tp)
        if st is None:
            fut.set((OFFSET_INVALID, OFFSET_INVALID))
        else:
            fut.set((st.log_start_offset if st.log_start_offset >= 0 else OFFSET_INVALID,
                     st.high_watermark if st.high_watermark >= 0 else OFFSET_INVALID))

    def _cmd_metadata(self, now, topic, fut, timeout_ms) -> None:
        names = None if topic is None else [topic]
        md = Metadata()

        def done(f):
            if f.error is not None:
                fut.set(error=f.error)
                return
            md.update(f.response, now_ms(), all_topics=True)
            fut.set(md.snapshot())

        f = self._net.send(None, "Metadata", lambda v: md.request_body(v, names),
                           timeout_ms=timeout_ms)
        self._inflight[f] = done

    def _cmd_close(self, now, consumed, fut) -> None:
        self._mark(consumed)
        self._coord.leave(now, revoke=False, close=True)
        self._close_future = fut
        self._close_deadline_ms = now + _CLOSE_TIMEOUT_MS

    def _close_complete(self, now: int) -> bool:
        if self._coord.closed:
            return True
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
            for name, t in md.topics.items():
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
        reqs = self._coord.poll(now)
        if self._group_id is None:
            self._positions.reset_initializing()
        reqs += self._positions.poll(now)
        reqs += self._fetcher.poll(now)
        for req in reqs:
            self._send(req)

    def _send(self, req: Request) -> None:
        node = req.node
        if node == COORDINATOR_BROKER:
            coord = self._coord
            node = coord.coordinator_id
            if node is None:
                from ..errors import KafkaConnectionError
                req.owner.on_response(req, KafkaConnectionError("the group coordinator is unknown"),
                                      now_ms())
                return
            # Commits and offset look-ups go on the coordinator's own connection, so they do not
            # queue behind a long-poll Fetch (a broker answers one request per connection at a
            # time: a caught-up consumer's commit waited fetch.wait.max.ms) -- unless a
            # JoinGroup/SyncGroup the broker may hold for a whole rebalance is in flight there.
            if not self._membership_call_in_flight():
                node = self._net.group_node(node, coord.coordinator_host, coord.coordinator_port)
        elif node == COORDINATOR:
            coord = self._coord
            node = coord.coordinator_id
            if node is None:
                from ..errors import KafkaConnectionError
                req.owner.on_response(req, KafkaConnectionError("the group coordinator is unknown"),
                                      now_ms())
                return
            # its own connection: a JoinGroup held for the rebalance does not stop the fetches
            node = self._net.group_node(node, coord.coordinator_host, coord.coordinator_port)
        f = self._net.send(node, req.api, req.body, timeout_ms=req.timeout_ms,
                           min_version=req.min_version, max_version=req.max_version)
        self._inflight[f] = req

    def _membership_call_in_flight(self) -> bool:
        return any(getattr(r, "api", None) in ("JoinGroup", "SyncGroup") for r in self._inflight.values())

    def _on_done(self, done) -> None:
        fetcher = self._fetcher
        raw = []
        eof = [] if self._eof_at is not None else None
        for f in done:
            req = self._inflight.pop(f, None)
            if req is None:
                continue
            if not isinstance(req, Request):
                req(f)
                continue
            resp = f.error if f.error is not None else f.response
            result = req.owner.on_response(req, resp, now_ms())
            if req.owner is fetcher:
                if result:
                    raw.extend(result)
                if eof is not None and isinstance(req.context, dict):
                    eof.extend(req.context.get("offsets", ()))
        if eof:
            self._report_eof(eof, raw)
        if not raw:
            return
        # Positions already moved past the fetched batches (from their headers): ask for the
        # next data first, then decode while the broker works on it.
        self._send_all(now_ms())
        self._raw.extend(raw)
        self._decode_ahead()

    def _report_eof(self, tps, raw: list) -> None:
        """enable.partition.eof: a partition whose position reached its high watermark, after
        its records (_push queues behind the raw chunks, so `raw` is queued first)."""
        for tp in tps:
            st = self._subs.get(tp)
            if st is None or not st.fetchable:
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
                if isinstance(a.token, _Future):
                    a.token.set(a)
                if self.config.on_commit is not None:
                    self._push(a)
                if a.error is not None and not a.user:
                    log.warning("auto commit failed: %s", a.error)
            elif isinstance(a, CommittedResult):
                if isinstance(a.token, _Future):
                    a.token.set(a)
            elif isinstance(a, (AssignPartitions, RevokePartitions, LosePartitions)):
                fences = {}
                if isinstance(a, AssignPartitions):
                    for tp in a.partitions:
                        st = self._subs.get(tp)
                        if st is not None:
                            fences[tp] = st.created_fence
                    self._md.add_topics({t for t, _ in a.partitions})
                self._push_urgent(_GroupEvent(a, fences))
            else:
                self._push_urgent(a)  # the group's errors
        for a in self._positions.drain_actions():
            if isinstance(a, ListOffsetsResult):
                if isinstance(a.token, _Future):
                    a.token.set(a)
            else:
                self._push(a)
        for a in self._fetcher.drain_actions():
            self._push(a)
