"""The Consumer: confluent-kafka's API over kwire's state machines.

Two threads, one owner each:

* the **driver** (a background thread, :mod:`kwire.consumer.driver`) owns the NetworkClient,
  the SubscriptionState and every state machine (GroupCoordinator, PositionManager, Fetcher).
  It loops: apply the application's commands, let each machine ``poll(now_ms)`` for requests,
  send them, wait in ``NetworkClient.poll`` until the next deadline or a response, hand
  responses back, decode fetched records (kwire.records) and queue them.  Heartbeats go on
  while the application processes records.
* the **application** thread (poll/consume/commit/...) takes decoded records from a queue,
  whole chunks at a time (one list per partition per fetch), without a lock per record, and
  posts commands (frozen dataclasses) to the driver.  Rebalance callbacks run here, in order
  with the records.  This module is the application thread's side; the two share only a
  :class:`~kwire.consumer.driver.Channel`.

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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..config import Config, parse_config
from ..errors import (
    ConcurrentUseError,
    ConfigError,
    ConsumerClosedError,
    DecompressionLimitError,
    KafkaTimeoutError,
    KwireError,
    LogTruncationError,
    MaxPollIntervalExceededError,
    NoOffsetForPartitionError,
)
from ..net import now_ms
from .driver import (
    CLOSE_TIMEOUT_MS,
    AckRevoke,
    Assign,
    AssignmentChanged,
    Channel,
    Close,
    Command,
    Commit,
    Driver,
    FetchCommitted,
    FetchMetadata,
    Future,
    GroupEvent,
    ListOffsets,
    PartitionEOF,
    Pause,
    Positions,
    Resume,
    Seek,
    SeekDone,
    Stop,
    Subscribe,
    Unassign,
    Unsubscribe,
    Watermarks,
)
from .fetcher import DECODE_AHEAD_BYTES, FetchedChunk
from .offsets import READ_UNCOMMITTED, ListOffsetsResult
from .types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    OFFSET_INVALID,
    AssignPartitions,
    CommitResult,
    CommittedResult,
    ErrorAction,
    GroupMetadata,
    LosePartitions,
    OffsetAndMetadata,
    RevokePartitions,
    TopicPartition,
)

__all__ = ["Consumer", "PartitionEOF"]

log = logging.getLogger("kwire.consumer")

_INF = float("inf")
# Fetched data stays raw (compact bytes) in the driver until the application is about to need
# it, and is decoded a piece at a time: only Fetcher.decode_ahead_bytes of decoded records (at
# most DECODE_AHEAD_BYTES) wait in the queue.  Few live Record objects keep memory and the
# garbage collector's work small; the driver decodes the next piece while the application
# works through the current one.
# The application wakes the driver once it has taken this much of the decoded data (or when it
# runs out of records), not after every chunk: a wake-up is a system call in the application's
# thread and hands the GIL to the driver, which the application then waits to get back.
_WAKE_AFTER_BYTES = DECODE_AHEAD_BYTES // 2


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

    def __init__(self, config: Mapping[str, Any] | Config | None = None, *, tracer=None,
                 network=None, **kwargs):
        """``network``: for tests, an object with NetworkClient's surface to use instead of a
        NetworkClient (see kwire.consumer.driver.Driver)."""
        cfg = parse_config(dict(config or {}) if not isinstance(config, Config) else config,
                           role="consumer", **kwargs)
        self.config = cfg
        ch = self._ch = Channel()
        self._driver = drv = Driver(cfg, ch, tracer=tracer, network=network)
        ch.last_poll_ms = now_ms()
        self._q, self._urgent, self._cond, self._cmds = ch.q, ch.urgent, ch.cond, ch.cmds
        self._consumed = ch.consumed                # (the application writes it)
        self._group_id = cfg.group_id
        self._isolation = drv._isolation
        self._stats = drv._stats                    # (its application half runs here)
        self._unsignalled = 0                # bytes released since the driver was last woken
        # (half the buffer at most: with a small queued.max.messages.kbytes the driver must hear
        # of the room while the application still has records to work on)
        self._wake_after_bytes = max(1, min(_WAKE_AFTER_BYTES, drv._fetcher.decode_ahead_bytes // 2))

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
        self._app_event: PartitionEOF | None = None  # handed out by the next poll()/consume()

        self._thread = threading.Thread(target=drv.run, name="kwire-consumer", daemon=True)
        self._thread.start()

    # The driver's objects, for diagnostics and the layers above (statistics, kwire.confluent):
    # read them from the application thread only where a stale or racy value is harmless.
    @property
    def _coord(self):
        return self._driver._coord

    @property
    def _subs(self):
        return self._driver._subs

    @property
    def _net(self):
        return self._driver._net

    @property
    def _md(self):
        return self._driver._md

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
        self._call(Subscribe, list(topics))

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
        self._call(Unsubscribe, consumed)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment (or, inside on_assign, the starting offsets of the assignment)."""
        self._check_open()
        parts = [(tp.topic, tp.partition, tp.offset, tp.leader_epoch) for tp in _tps(partitions)]
        self._call(Assign, parts, False)

    def incremental_assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        parts = [(tp.topic, tp.partition, tp.offset, tp.leader_epoch) for tp in _tps(partitions)]
        self._call(Assign, parts, True)

    def unassign(self) -> None:
        self._check_open()
        self._call(Unassign, None)

    def incremental_unassign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        self._call(Unassign, [(tp.topic, tp.partition) for tp in _tps(partitions)])

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
            if type(ev) is GroupEvent and isinstance(ev.action, LosePartitions):
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
            self._post(Commit(om, None))
            return None
        fut = Future()
        self._post(Commit(om, fut))
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
        self._ch.consumed_ver += 1

    def committed(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                  ) -> list[TopicPartition]:
        """The committed offsets of ``partitions`` (offset -1001 where nothing is committed)."""
        self._check_open()
        tps = [(tp.topic, tp.partition) for tp in _tps(partitions)]
        timeout_ms = None if _timeout_s(timeout) is None else int(timeout * 1000)
        fut = Future()
        self._post(FetchCommitted(tps, fut, timeout_ms))
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
        fallback = self._call(Positions, unknown) if unknown else {}
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
                self._ch.consumed_ver += 1
        else:
            self._pos.pop(tp, None)
        self._post(Seek(tp, off, partition.leader_epoch))

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
        self._post(Pause(items))

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        self._post(Resume([(tp.topic, tp.partition) for tp in _tps(partitions)]))

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        """(low, high) watermarks; ``cached`` answers from the last fetch (-1001 if none)."""
        self._check_open()
        tp = (partition.topic, partition.partition)
        if cached:
            return self._call(Watermarks, tp)
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
        fut = Future()
        self._post(FetchMetadata(topic, fut, None if _timeout_s(timeout) is None else int(timeout * 1000)))
        return self._wait(fut, timeout)

    def close(self) -> None:
        """on_revoke, commit consumed offsets (auto commit), leave the group, stop."""
        if self._closed:
            return
        self._ch.closing = True
        try:
            if self._ch.driver_error is None and self._thread.is_alive():
                self._app_enter()
                self._ch.in_poll = True
                owned = list(self._assigned)
                if owned and self._app_subscribed and self._on_revoke is not None:
                    try:
                        self._on_revoke(self, [TopicPartition(t, p) for t, p in owned])
                    except Exception:
                        log.exception("on_revoke raised during close()")
                fut = Future()
                self._post(Close(self._consumed_for(owned), fut))
                try:
                    fut.wait(CLOSE_TIMEOUT_MS / 1000 + 5)
                except KafkaTimeoutError:
                    log.warning("close(): the driver did not finish in time")
        finally:
            self._closed = True
            self._post(Stop())
            self._thread.join(10)
            self._q.clear()
            self._urgent.clear()
            self._cur = None
            self._assigned = {}  # assignment() of a closed consumer: nothing

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            if not self._closed and self._thread.is_alive():
                self._post(Stop())
        except Exception:
            pass

    # --- application-thread helpers -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        if self._ch.driver_error is not None:
            raise self._ch.driver_error

    def _deadline(self, timeout) -> float:
        t = _timeout_s(timeout)
        return _INF if t is None else now_ms() + t * 1000

    def _app_enter(self) -> None:
        """Records returned by the previous call are consumed now (at-least-once); with
        enable.auto.offset.store=false only store_offsets() says what is consumed."""
        self._ch.last_poll_ms = now_ms()
        if self._dirty and self._auto_store:
            pos, consumed = self._pos, self._consumed
            for tp in self._dirty:
                p = pos.get(tp)
                if p is not None:
                    consumed[tp] = p
            self._dirty.clear()
            self._ch.consumed_ver += 1
        elif self._dirty:
            self._dirty.clear()

    def _consumed_for(self, tps) -> dict:
        return {tp: self._consumed[tp] for tp in tps if tp in self._consumed}

    def _post(self, cmd: Command) -> None:
        self._cmds.append(cmd)
        self._driver.wakeup()

    def _wait(self, fut: Future, timeout):
        t = _timeout_s(timeout)
        end = None if t is None else now_ms() + t * 1000
        while True:
            step = 0.2 if end is None else max(0.0, min(0.2, (end - now_ms()) / 1000))
            try:
                return fut.wait(step)
            except KafkaTimeoutError:
                if self._ch.driver_error is not None:
                    raise self._ch.driver_error from None
                if not self._thread.is_alive():
                    raise KwireError("the consumer's driver thread stopped") from None
                if end is not None and now_ms() >= end:
                    raise

    def _call(self, command: Callable[..., Command], *args):
        """Post ``command(*args, fut)`` and wait for its answer."""
        fut = Future()
        self._post(command(*args, fut))
        return self._wait(fut, None)

    def _list_offsets(self, timestamps: dict, timeout, isolation) -> dict:
        timeout_ms = None if _timeout_s(timeout) is None else int(timeout * 1000)
        fut = Future()
        self._post(ListOffsets(timestamps, fut, timeout_ms, isolation))
        res: ListOffsetsResult = self._wait(fut, timeout)
        if res.errors:
            raise next(iter(res.errors.values()))
        return {tp: v[0] for tp, v in res.offsets.items()}

    def _release(self, chunk: FetchedChunk) -> None:
        self._ch.released.append((chunk.tp, chunk.nbytes))
        self._unsignalled += chunk.nbytes
        if self._unsignalled >= self._wake_after_bytes:
            self._wake_driver()

    def _wake_driver(self) -> None:
        """Tell a waiting driver about the bytes taken since the last call, if it has use for
        them: chunks to decode, or room to fetch again."""
        self._unsignalled = 0
        if self._driver.wants_wakeup():
            self._driver.wakeup()

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
        self._ch.consumed_ver += 1

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
                if self._ch.driver_error is not None:
                    raise self._ch.driver_error from None
                now = now_ms()
                if now >= deadline:
                    return False
                if self._unsignalled:
                    self._wake_driver()  # out of records: whatever we took counts now
                with self._cond:
                    self._ch.app_waiting = True
                    self._ch.in_poll = True
                    try:
                        if not q and not urgent:
                            wait = None if deadline == _INF else (deadline - now) / 1000
                            self._cond.wait(min(wait, 1.0) if wait is not None else 1.0)
                    finally:
                        self._ch.app_waiting = False
                        self._ch.in_poll = False
                self._ch.last_poll_ms = now_ms()
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
        if type(item) is SeekDone:
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
        if type(item) is AssignmentChanged:
            self._forget(item.removed)
            self._adopt(item.added)
            return
        if type(item) is GroupEvent:
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
                lost = {tp for ev in self._urgent if type(ev) is GroupEvent
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
                    self._post(AckRevoke(a.ack_id, consumed))
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
