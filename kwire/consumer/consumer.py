"""The Consumer: confluent-kafka's API over kwire's state machines.

Two threads, one owner each:

* the **driver** (a background thread, :mod:`kwire.consumer.driver`) owns the NetworkClient,
  the SubscriptionState and every state machine (GroupCoordinator, PositionManager, Fetcher).
  It loops: apply the application's commands, let each machine ``poll(now_ms)`` for requests,
  send them, wait in ``NetworkClient.poll`` until the next deadline or a response, hand
  responses back and queue the fetched record sets raw, as they came.  Heartbeats go on
  while the application processes records.
* the **application** thread (poll/consume/commit/...) takes raw chunks (one per partition
  per fetch) from a queue, decodes them a piece at a time (kwire.records) and hands the
  records out, without a lock per record, and
  posts commands (frozen dataclasses) to the driver.  Rebalance callbacks run here, in order
  with the records.  This module (with :mod:`.offset_calls`, the offset and position calls,
  and :mod:`.app`, the application thread's state and event handling) is the application
  thread's side; the two share only a :class:`~kwire.consumer.driver.Channel`.

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
fetch_buffer): the budget keeps room for the one decoded piece the application holds, the
application hands each raw chunk back once it is decoded (or dropped), and the fetcher stops
while the budget is used.

At-least-once auto commit: records returned by one poll()/consume() call count as consumed when
the application calls again (or commits, or closes); the driver commits consumed offsets every
auto.commit.interval.ms, before every revocation and on close.
"""
from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..config import Config, parse_config
from ..errors import (
    ConcurrentUseError,
    ConfigError,
    ConsumerClosedError,
    KafkaTimeoutError,
    KwireError,
)
from ..net import now_ms
from .channel import (
    CLOSE_TIMEOUT_MS,
    Assign,
    Channel,
    Close,
    Future,
    PartitionEOF,
    Stop,
    Subscribe,
    Unassign,
    Unsubscribe,
)
from .driver import Driver
from .fetch_buffer import DECODE_AHEAD_BYTES, HandBack
from .offset_calls import OffsetCalls, _tps
from .types import (
    GroupMetadata,
    TopicPartition,
)

if TYPE_CHECKING:
    from ..net.metadata import Metadata
    from ..records import Record
    from .coordinator import GroupCoordinator
    from .subscription import SubscriptionState

__all__ = ["Consumer", "PartitionEOF", "RebalanceCallback"]

# on_assign / on_revoke / on_lost: called with the consumer and the partitions
RebalanceCallback = Callable[[Any, list[TopicPartition]], object]

log = logging.getLogger("kwire.consumer")

# Fetched data stays raw (compact bytes) until the application is about to need it, and the
# application's thread decodes it a piece at a time (about FetchBuffer.piece_bytes of decoded
# records): few live Record objects keep memory and the garbage collector's work small, and
# decoding does not wait for the driver thread to win the GIL (nor the driver for decoding:
# it is left the network).
# The application wakes the driver once it has handed back this much raw data (or when it
# runs out of records), not after every chunk: a wake-up is a system call in the application's
# thread and hands the GIL to the driver, which the application then waits to get back.
_WAKE_AFTER_BYTES = DECODE_AHEAD_BYTES // 2


def _assign_parts(call: str, partitions: Iterable[TopicPartition]) -> list[tuple[str, int, int | None, int | None]]:
    """(topic, partition, offset, leader epoch) of each partition, checked before anything
    changes: an assign() that moves some partitions (their fences raised until the driver's
    SeekDone) must not stop half-way on a bad value and leave the rest waiting for good."""
    parts: list[tuple[str, int, int | None, int | None]] = []
    for tp in _tps(partitions):
        for name, value in (("partition", tp.partition), ("offset", tp.offset), ("leader_epoch", tp.leader_epoch)):
            if not (isinstance(value, int) and not isinstance(value, bool)) and not (value is None and name != "partition"):
                raise TypeError(f"{call}(): the {name} of {tp.topic!r} [{tp.partition}] must be an int, "
                                f"not {type(value).__name__}")
        if not isinstance(tp.topic, str):
            raise TypeError(f"{call}(): a topic must be a str, not {type(tp.topic).__name__}")
        parts.append((tp.topic, tp.partition, tp.offset, tp.leader_epoch))
    return parts


class Consumer(OffsetCalls):
    """A Kafka consumer with confluent-kafka's API (``poll`` returns kwire Records).

    ::

        with Consumer({"bootstrap.servers": "localhost:9092", "group.id": "g",
                       "auto.offset.reset": "earliest"}) as c:
            c.subscribe(["topic"])
            while True:
                records = c.consume(1000, timeout=1.0)
    """

    def __init__(self, config: Mapping[str, Any] | Config | None = None, *, tracer: Any = None,
                 network: Any = None, **kwargs: Any) -> None:
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
        buffer = drv._fetcher.buffer
        # raw chunks are decoded here, in the application's thread, a piece at a time
        self._decoder = drv._fetcher.make_decoder(HandBack(ch.released, self._returned),
                                                  self._decode_failed)
        self._piece_bytes = buffer.piece_bytes
        self._unsignalled = 0                # raw bytes handed back since the driver was last woken
        # (half the decode room at most: with a small queued.max.messages.kbytes the driver must
        # hear of the room while the application still has records to work on)
        self._wake_after_bytes = max(1, min(_WAKE_AFTER_BYTES, buffer.decode_ahead_bytes // 2))

        # application-thread state
        self._in_app = threading.Lock()      # held by the thread inside poll()/consume()
        self._cur = None
        self._cur_next_offset = -1
        self._cur_tp = None
        self._idx = 0
        self._fence = {}                     # tp -> lowest acceptable chunk fence
        self._assign_fence = {}              # tp -> the fence of its assignment
        self._pending_seeks = {}
        self._pos = {}                       # tp -> (next offset, leader epoch, assign fence)
        self._dirty = set()
        self._assigned = {}                  # the application's view of the assignment
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
    def _coord(self) -> GroupCoordinator:
        return self._driver._coord

    @property
    def _subs(self) -> SubscriptionState:
        return self._driver._subs

    @property
    def _net(self) -> Any:  # a NetworkClient (or a test's stand-in)
        return self._driver._net

    @property
    def _md(self) -> Metadata:
        return self._driver._md

    # =========================================================================================
    # application thread: the public API
    # =========================================================================================

    def subscribe(self, topics: Iterable[str], on_assign: RebalanceCallback | None = None,
                  on_revoke: RebalanceCallback | None = None,
                  on_lost: RebalanceCallback | None = None) -> None:
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
        parts = _assign_parts("assign", partitions)
        self._moving(parts)
        self._call(Assign, parts, False)

    def incremental_assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        parts = _assign_parts("incremental_assign", partitions)
        self._moving(parts)
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

    def poll(self, timeout: float | None = None) -> Record | PartitionEOF | None:
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

    def _poll(self, timeout: float | None) -> Record | PartitionEOF | None:
        self._app_enter()
        if self._urgent:
            self._take_urgent()
        cur = self._cur
        if cur is None:
            cur = self._next_chunk(self._deadline(timeout))
            if cur is None:
                ev, self._app_event = self._app_event, None
                return ev
        i = self._idx
        rec = cur[i]
        tp = self._cur_tp
        i += 1
        # after a chunk's last record, past its trailing control batches and aborted records too
        nxt = self._cur_next_offset if i >= len(cur) else rec.offset + 1
        self._pos[tp] = (nxt, rec.leader_epoch, self._assign_fence.get(tp, 0))
        self._dirty.add(tp)
        if i >= len(cur):
            self._done_chunk()
        else:
            self._idx = i
        return rec

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Record] | list[PartitionEOF]:
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

    def _consume(self, num_messages: int, timeout: float | None) -> list[Any]:
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
                cur = self._next_chunk(deadline if out is None else 0, events=out is None)
                if cur is None:
                    if self._app_event is not None:  # (only when out is None)
                        out, self._app_event = [self._app_event], None
                    break
            i = self._idx
            n = len(cur)
            j = i + need
            if i == 0 and j >= n:
                part = cur
            else:
                part = cur[i:j]
            last = part[-1]
            tp = self._cur_tp
            nxt = self._cur_next_offset if j >= n else last.offset + 1  # as in poll()
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

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed and self._thread.is_alive():
                self._post(Stop())
        except Exception:
            pass
