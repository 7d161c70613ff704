"""A Consumer's calls on offsets and positions (confluent-kafka's names): commits, stored and
committed offsets, positions, seek / pause / resume, watermarks, offsets for times, metadata.
Each runs in the application thread and asks the driver through a command where it must."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import KwireError
from ..net import now_ms  # noqa: F401
from .app import _INF, AppThread, _timeout_s
from .channel import (
    Commit,
    FetchCommitted,
    FetchMetadata,
    Future,
    ListOffsets,
    Pause,
    Positions,
    Resume,
    Seek,
    Watermarks,
)
from .offsets import READ_UNCOMMITTED, ListOffsetsResult
from .types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    OFFSET_INVALID,
    CommitResult,
    CommittedResult,
    OffsetAndMetadata,
    TopicPartition,
)


def _tps(partitions: TopicPartition | Iterable[TopicPartition]) -> list[TopicPartition]:
    if isinstance(partitions, TopicPartition):
        return [partitions]
    return list(partitions)


class OffsetCalls(AppThread):
    """commit, store_offsets, committed, position, seek, pause, resume, get_watermark_offsets,
    offsets_for_times, list_topics."""

    def commit(self, message: Any = None, offsets: Iterable[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
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

    def store_offsets(self, message: Any = None, offsets: Iterable[TopicPartition] | None = None) -> None:
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
        timeout_s = _timeout_s(timeout)
        timeout_ms = None if timeout_s is None else int(timeout_s * 1000)
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
            low, high = self._call(Watermarks, tp)
            return int(low), int(high)
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

    def list_topics(self, topic: str | None = None, timeout: float | None = -1) -> Any:
        """A snapshot of the cluster's metadata (all topics, or ``topic``)."""
        self._check_open()
        fut = Future()
        timeout_s = _timeout_s(timeout)
        self._post(FetchMetadata(topic, fut, None if timeout_s is None else int(timeout_s * 1000)))
        return self._wait(fut, timeout)

    def _list_offsets(self, timestamps: dict[Any, int], timeout: float | None, isolation: int
                      ) -> dict[Any, int]:
        timeout_s = _timeout_s(timeout)
        timeout_ms = None if timeout_s is None else int(timeout_s * 1000)
        fut = Future()
        self._post(ListOffsets(timestamps, fut, timeout_ms, isolation))
        res: ListOffsetsResult = self._wait(fut, timeout)
        if res.errors:
            raise next(iter(res.errors.values()))
        return {tp: v[0] for tp, v in res.offsets.items()}
