"""The application thread's side of a :class:`~kwire.consumer.Consumer`: what it has received
from the driver and not yet returned (the current chunk, positions, fences, the assignment as
the application sees it), the events it handles in order with the records (callbacks run
here), and how it talks to the driver (commands posted, futures awaited).  The state is set up
by ``Consumer.__init__`` and read and written by the application thread only (see
:mod:`kwire.consumer.consumer` for the two threads)."""
from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from time import sleep as _sleep
from typing import Any

from ..config import Config
from ..errors import (
    ConsumerClosedError,
    DecompressionLimitError,
    KafkaTimeoutError,
    KwireError,
    LogTruncationError,
    MaxPollIntervalExceededError,
    NoOffsetForPartitionError,
)
from ..net import now_ms
from .channel import (
    AckRevoke,
    AssignmentChanged,
    Channel,
    Command,
    DecodeFailed,
    Future,
    GroupEvent,
    PartitionEOF,
    SeekDone,
    moves_position,
)
from .driver import Driver
from .fetch_buffer import ChunkDecoder, FetchedChunk
from .types import (
    AssignPartitions,
    CommitResult,
    ErrorAction,
    LosePartitions,
    RevokePartitions,
    TopicPartition,
)

log = logging.getLogger("kwire.consumer")

_INF = float("inf")


def _timeout_s(timeout: float | None) -> float | None:
    if timeout is None or timeout < 0:
        return None
    return float(timeout)


class AppThread:
    """The application thread's state and its handling of what the driver sends."""

    config: Config
    _ch: Channel
    _driver: Driver
    _thread: threading.Thread
    _q: deque[Any]
    _urgent: deque[Any]
    _cond: threading.Condition
    _cmds: deque[Any]
    _consumed: dict[Any, Any]   # tp -> (offset, leader epoch, fence): what counts as consumed
    _stats: Any
    _group_id: str | None
    _isolation: int
    _decoder: ChunkDecoder      # raw chunks -> pieces of records, in this thread
    _piece_bytes: int           # about the decoded bytes of one piece
    _unsignalled: int           # raw bytes handed back since the driver was last woken
    _wake_after_bytes: int
    _cur: list[Any] | None      # the current chunk's records, handed out from _idx on
    _cur_next_offset: int       # the current chunk's next offset (after its last record)
    _cur_tp: Any
    _idx: int
    _fence: dict[Any, float]    # tp -> lowest acceptable chunk fence
    _assign_fence: dict[Any, int]  # tp -> the fence of its assignment
    _pending_seeks: dict[Any, int]
    _pos: dict[Any, Any]        # tp -> (next offset, leader epoch, assign fence)
    _dirty: set[Any]
    _assigned: dict[Any, bool]  # the application's view of the assignment
    _on_assign: Callable[..., Any] | None
    _on_revoke: Callable[..., Any] | None
    _on_lost: Callable[..., Any] | None
    _auto_store: bool
    _closed: bool
    _app_event: PartitionEOF | None  # handed out by the next poll()/consume()

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        if self._ch.driver_error is not None:
            raise self._ch.driver_error

    def _deadline(self, timeout: float | None) -> float:
        t = _timeout_s(timeout)
        return _INF if t is None else now_ms() + t * 1000

    def _post(self, cmd: Command) -> None:
        self._cmds.append(cmd)
        self._driver.wakeup()

    def _wait(self, fut: Future, timeout: float | None) -> Any:
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

    def _call(self, command: Callable[..., Command], *args: Any) -> Any:
        """Post ``command(*args, fut)`` and wait for its answer."""
        fut = Future()
        self._post(command(*args, fut))
        return self._wait(fut, None)

    def _lost_pending(self) -> set[Any]:
        """Partitions lost by the driver whose event waits in the urgent queue."""
        lost: set[Any] = set()
        for ev in list(self._urgent):  # (a copy, taken at once: the driver may append)
            if type(ev) is GroupEvent and isinstance(ev.action, LosePartitions):
                lost.update(ev.action.partitions)
        return lost

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

    def _consumed_for(self, tps: Iterable[Any]) -> dict[Any, Any]:
        return {tp: self._consumed[tp] for tp in tps if tp in self._consumed}

    def _returned(self, nbytes: int) -> None:
        """A raw chunk went back to the driver (HandBack): its bytes are room to fetch again."""
        self._unsignalled += nbytes
        if self._unsignalled >= self._wake_after_bytes:
            self._wake_driver()

    def _decode_failed(self, tp: Any, fence: int, resume_offset: int) -> None:
        """A raw chunk was damaged after the records handed out (its error comes next, from the
        decoder's actions): the driver fetches the partition again from ``resume_offset``; the
        chunks fetched under the same fence, queued behind it, are stale."""
        self._post(DecodeFailed(tp, fence, resume_offset))
        f = self._fence.get(tp)
        if f is not None and f <= fence:
            self._fence[tp] = fence + 1  # (the driver's rewind takes a newer fence)

    def _decode(self, raw: FetchedChunk) -> FetchedChunk | None:
        """The next piece of a raw chunk, decoded here, in the application thread (the rest of
        the chunk goes back to the head of the queue), or None: nothing more in it; a damaged
        chunk's error is handled then (after the records before the damage)."""
        dec = self._decoder
        piece = dec.decode_piece(raw, self._piece_bytes)
        # Let the driver have the GIL now if it waits for it (sleep(0) gives it up; ~1 us when
        # no thread waits): a Fetch answer that arrived needs the GIL for a few short moments
        # (the reads, the parse, the next Fetch), and without this it gets it only when the
        # interpreter's switch interval (5 ms) forces us out of a CPU-bound decode -- several
        # times per answer, while the broker idles and the application later waits for data.
        # Once per piece (about piece_bytes of decoded records): measured 1.3x the records/s.
        _sleep(0)
        if not raw.done:
            self._q.appendleft(raw)
        if dec.actions:
            actions, dec.actions = dec.actions, []
            for a in actions:
                self._error(a)
        if piece is not None and self._stats is not None:
            self._stats.on_chunk(piece)
        return piece

    def _wake_driver(self) -> None:
        """Tell a waiting driver about the bytes taken since the last call, if it has use for
        them: chunks to decode, or room to fetch again."""
        self._unsignalled = 0
        if self._driver.wants_wakeup():
            self._driver.wakeup()

    def _done_chunk(self) -> None:
        self._cur = self._cur_tp = None
        self._idx = 0

    def _drop_current(self, tp: Any) -> None:
        if self._cur_tp == tp:
            self._done_chunk()

    def _forget(self, tps: Iterable[Any]) -> None:
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

    def _moving(self, parts: Iterable[tuple[str, int, int | None, int | None]]) -> None:
        """assign() gives partitions assigned already a new position (inside on_assign: the
        group's partitions): as for seek(), what was fetched before is dropped until the
        driver's SeekDone names the fence of the new position."""
        for t, p, offset, _ in parts:
            tp = (t, p)
            if tp in self._assigned and moves_position(offset):
                self._drop_current(tp)
                self._fence[tp] = _INF
                self._pending_seeks[tp] = self._pending_seeks.get(tp, 0) + 1
                self._pos.pop(tp, None)  # (position() asks the driver until a record comes)

    def _adopt(self, fences: dict[Any, int]) -> None:
        for tp, f in fences.items():
            self._assigned[tp] = True
            self._fence[tp] = f
            self._assign_fence[tp] = f
            self._pending_seeks.pop(tp, None)
            self._pos.pop(tp, None)
            self._consumed.pop(tp, None)

    def _next_chunk(self, deadline: float, events: bool = True) -> list[Any] | None:
        """Make the next acceptable chunk current and return its records, handling events on
        the way; None when the deadline passes first (or, with ``events=False``, when an event
        comes next)."""
        q = self._q
        urgent = self._urgent
        while True:
            if urgent:
                if not events:
                    return None
                self._take_urgent()
            try:
                if not events and type(q[0]) is not FetchedChunk:
                    return None
                item = q.popleft()
            except IndexError:
                if self._ch.driver_error is not None:
                    raise self._ch.driver_error from None
                now = now_ms()
                if now >= deadline:
                    return None
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
                    self._decoder.buffer.finish(item)  # seeked, paused or revoked since
                    continue
                piece = self._decode(item)
                if piece is None:
                    continue
                item = piece
                if not item.records:  # only control batches or aborted transactions
                    self._step_over(item)
                    continue
                self._cur = item.records
                self._cur_next_offset = item.next_offset
                self._cur_tp = item.tp
                self._idx = 0
                return item.records
            if type(item) is PartitionEOF:
                f = self._fence.get((item.topic, item.partition))
                if f is None or item.fence < f:
                    continue  # seeked, paused or revoked since
                self._app_event = item
                return None
            self._event(item)

    def _take_urgent(self) -> None:
        """Handle the group events waiting (callbacks run here; an error raised leaves the rest
        for the next call)."""
        urgent = self._urgent
        while urgent:
            self._event(urgent.popleft())

    def _step_over(self, chunk: FetchedChunk) -> None:
        """The position moves past a piece with no record for the application, as past a
        record: position() and commits see it."""
        tp = chunk.tp
        prev = self._pos.get(tp)
        self._pos[tp] = (chunk.next_offset, prev[1] if prev else None, self._assign_fence.get(tp, 0))
        self._dirty.add(tp)

    def _event(self, item: Any) -> None:
        """One event from the driver, in the application thread (callbacks run here)."""
        match item:
            case dict():  # a statistics document from the driver (stats_cb)
                self._stats.deliver(self, item)
            case SeekDone(tp=tp, fence=fence):
                n = self._pending_seeks.get(tp, 0) - 1
                if n <= 0:
                    self._pending_seeks.pop(tp, None)
                    # (a seek from before a revocation and a new assignment is stale: group
                    # events overtake the queue, so its completion may come after the new
                    # assignment)
                    if tp in self._assigned and fence >= self._assign_fence.get(tp, 0):
                        self._fence[tp] = fence
                else:
                    self._pending_seeks[tp] = n
            case AssignmentChanged(removed=removed, added=added):
                self._forget(removed)
                self._adopt(added)
            case GroupEvent(action=action):
                if self._stats is not None:
                    self._stats.on_rebalance(type(action).__name__, now_ms())
                self._group_event(item, action)
            case CommitResult(error=error, offsets=offsets):
                cb = self.config.on_commit
                if cb is not None:
                    cb(error, [TopicPartition(t, p, o.offset, o.metadata, o.leader_epoch)
                               for (t, p), o in sorted(offsets.items())])
            case ErrorAction():
                self._error(item)
            case BaseException():
                raise item

    def _group_event(self, item: GroupEvent, action: Any) -> None:
        match action:
            case AssignPartitions(partitions=partitions):
                self._adopt(item.fences)
                if self._on_assign is not None:
                    self._on_assign(self, [TopicPartition(t, p) for t, p in partitions])
            case RevokePartitions(partitions=partitions, ack_id=ack_id):
                # Partitions lost since the revocation was asked for (e.g. max.poll.interval
                # expired before the application came back) get on_lost only, not both.
                lost = {tp for ev in self._urgent if type(ev) is GroupEvent
                        and isinstance(ev.action, LosePartitions) for tp in ev.action.partitions}
                tps = [TopicPartition(t, p) for t, p in partitions
                       if (t, p) in self._assigned and (t, p) not in lost]
                self._app_enter()
                consumed = self._consumed_for(partitions)
                try:
                    if self._on_revoke is not None and tps:
                        self._on_revoke(self, tps)
                finally:
                    self._app_enter()
                    consumed.update(self._consumed_for(partitions))
                    self._forget([tp for tp in partitions if tp not in lost])
                    self._post(AckRevoke(ack_id, consumed))
            case LosePartitions(partitions=partitions):
                tps = [TopicPartition(t, p) for t, p in partitions if (t, p) in self._assigned]
                self._forget(partitions)
                cb = self._on_lost or self._on_revoke
                if cb is not None and tps:
                    cb(self, tps)

    def _error(self, item: ErrorAction) -> None:
        err = item.error
        # (a batch over fetch.max.decompressed.bytes fails the same way on every re-fetch: the
        # application must raise the limit or seek past it, so it is raised too)
        if item.fatal or isinstance(err, (NoOffsetForPartitionError, LogTruncationError,
                                          MaxPollIntervalExceededError, DecompressionLimitError)) or \
                getattr(err, "name", "") in ("OFFSET_OUT_OF_RANGE", "TOPIC_AUTHORIZATION_FAILED",
                                             "GROUP_AUTHORIZATION_FAILED"):
            raise err
        cb = self.config.error_cb
        if cb is not None:
            cb(err)
        else:
            where = ", ".join(f"{t} [{p}]" for t, p in item.partitions or ())
            log.warning("consumer error%s: %s", f" on {where}" if where else "", err)
