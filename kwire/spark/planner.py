"""Offset planning for the Spark source: pure functions, no I/O.

The driver looks offsets up (ListOffsets earliest / latest / by timestamp, OffsetFetch for a
group) and passes the answers in as plain dicts keyed by ``(topic, partition)``; these
functions turn them into ``[from, until)`` ranges.  Keeping the arithmetic here means every rule
(data loss, splitting, rate limits, the preferred executor) is tested without a cluster.

Data loss is what happens when the offsets a plan asks for are not in the log any more.
Each case, and where a plan goes on with ``fail_on_data_loss`` false (with it true, the plan
fails with :class:`~kwire.errors.DataLossError`; either way the message says what was lost):

=====================================================  =================================================
the topic's id changed (deleted and recreated; ids     the new log's earliest offset: the old offsets
from Metadata v10+, kept in the plan and in the        mean nothing there, and the new topic's records
streaming offsets)                                     are all unread.  (Spark's Kafka source keeps no
                                                       ids: it sees only the offsets below.)
the log starts above the start (retention,             the log start, as Spark's source does
DeleteRecords)
the log ends below the start (truncation, or a         the log end, as Spark's source does ("offset was
recreated topic without ids to tell)                   changed from X to Y, some data may have been
                                                       missed"); the records below it are not re-read
an ending offset past the end of the log               the log end
a partition is gone                                    dropped from the plan
=====================================================  =================================================
"""
from __future__ import annotations

import heapq
import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError, DataLossError, KwireError, NoOffsetForPartitionError
from .options import EARLIEST, LATEST, OffsetSpec

__all__ = [
    "DataLossError", "OffsetRange", "Plan", "timestamp_queries", "check_named_partitions",
    "resolve", "plan_ranges", "split_ranges", "balance_ranges", "preferred_executor", "lag", "cap_offsets",
    "offsets_to_json", "offsets_from_json", "topic_ids_from_json", "TOPIC_IDS_KEY",
]

TP = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one partition: one Spark task's work.

    ``preferred_executor`` is the executor this partition's ranges should run on (stable per
    partition, so an executor keeps reading the partitions it read before); None when unknown.
    ``topic_id`` is the id the topic had when the range was planned (None: unknown, not
    checked); a reader finding another id reads a recreated topic: data loss.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    preferred_executor: str | None = field(default=None, compare=False)
    topic_id: uuid.UUID | None = field(default=None, compare=False)

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}[{self.from_offset}, {self.until_offset})"


@dataclass
class Plan:
    """What one batch reads: its ranges, and what the planner had to say about it."""

    ranges: list[OffsetRange]
    start: dict[tuple[str, int], int]  # per partition, after data-loss adjustment
    end: dict[tuple[str, int], int]
    warnings: list[str] = field(default_factory=list)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)  # as planned (known ones)

    @property
    def total(self) -> int:
        return sum(r.size for r in self.ranges)


# --- resolving starting / ending positions -------------------------------------------------------

def timestamp_queries(spec: OffsetSpec, tps: Iterable[TP]) -> dict[TP, int]:
    """The ListOffsets timestamp look-ups ``spec`` needs: ``{tp: timestamp_ms}``."""
    if spec.kind == "timestamp":
        ts = spec.timestamp
        assert ts is not None  # (parse_options gives a "timestamp" spec its timestamp)
        return {tp: ts for tp in tps}
    if spec.kind == "timestamps":
        wanted = spec.timestamps_map()
        return {tp: wanted[tp] for tp in tps if tp in wanted}
    return {}


def check_named_partitions(spec: OffsetSpec, tps: Iterable[TP], option: str) -> None:
    """ConfigError if ``spec`` names partitions that are not among those read."""
    extra = spec.named_partitions() - set(tps)
    if extra:
        names = ", ".join(f"{t}-{p}" for t, p in sorted(extra))
        raise ConfigError(f"option {option!r} names partitions that are not read (no such partition, "
                          f"or not subscribed): {names}")


def resolve(spec: OffsetSpec, tps: Iterable[TP], *, earliest: Mapping[TP, int], latest: Mapping[TP, int],
            committed: Mapping[TP, int | None] | None = None, found: Mapping[TP, int | None] | None = None,
            auto_offset_reset: str = "latest", timestamp_strategy: str = "error",
            ending: bool = False) -> dict[TP, int]:
    """Concrete offsets for ``spec`` on each of ``tps``.

    ``found`` holds the answers to :func:`timestamp_queries` (None: no record at or after the
    timestamp); ``committed`` the group's committed offsets (None or < 0: none).  A start
    timestamp with no record follows ``timestamp_strategy`` (``error`` | ``latest``); an end
    timestamp with no record means latest.
    """
    committed = committed or {}
    found = found or {}
    named_offsets = spec.offsets_map() if spec.kind == "offsets" else {}
    named_ts = spec.timestamps_map() if spec.kind == "timestamps" else {}
    out: dict[TP, int] = {}
    for tp in tps:
        kind = spec.kind
        if kind == "offsets" and tp not in named_offsets:
            kind = spec.default
        elif kind == "timestamps" and tp not in named_ts:
            kind = spec.default
        if kind == "earliest":
            out[tp] = earliest[tp]
        elif kind == "latest":
            out[tp] = latest[tp]
        elif kind == "offsets":
            o = named_offsets[tp]
            out[tp] = earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o
        elif kind == "group":
            c = committed.get(tp)
            if c is not None and c >= 0:
                out[tp] = c
            elif auto_offset_reset == "earliest":
                out[tp] = earliest[tp]
            elif auto_offset_reset == "latest":
                out[tp] = latest[tp]
            else:
                raise NoOffsetForPartitionError(
                    f"{tp[0]}-{tp[1]} has no committed offset in the group and "
                    "kafka.auto.offset.reset=error")
        elif kind in ("timestamp", "timestamps"):
            at = found.get(tp)
            if at is not None and at >= 0:
                out[tp] = at
            elif ending or timestamp_strategy == "latest":
                out[tp] = latest[tp]
            else:
                ts = spec.timestamp if kind == "timestamp" else named_ts[tp]
                raise KwireError(f"{tp[0]}-{tp[1]} has no record at or after the starting timestamp "
                                 f"{ts}; set startingOffsetsByTimestampStrategy=latest to start at the "
                                 "end instead")
        else:  # pragma: no cover - options.py produces only the kinds above
            raise ConfigError(f"unknown offset spec kind {kind!r}")
    return out


# --- ranges ----------------------------------------------------------------------------------------

def preferred_executor(topic: str, partition: int, executors: Sequence[str]) -> str | None:
    """The executor a partition's ranges prefer: stable for a given executor set.

    A CRC of the partition's name (not ``hash()``, which differs between Python processes)
    modulo the sorted executor ids.
    """
    if not executors:
        return None
    ordered = sorted(executors)
    return ordered[zlib.crc32(f"{topic}\x00{partition}".encode()) % len(ordered)]


def _split_even(r: OffsetRange, parts: int) -> list[OffsetRange]:
    if parts <= 1:
        return [r]
    size = r.size
    bounds = [r.from_offset + size * k // parts for k in range(parts + 1)]
    return [replace(r, from_offset=a, until_offset=b) for a, b in zip(bounds, bounds[1:]) if b > a]


def split_ranges(ranges: Sequence[OffsetRange], *, min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Split ranges so none exceeds ``max_records_per_partition`` offsets and there are at
    least ``min_partitions`` of them (when there are that many offsets).

    Each range is cut into equal parts (sizes differ by at most one).  For ``min_partitions``
    the extra parts go to the ranges with the most offsets per part, so work evens out.
    """
    parts = []
    for r in ranges:
        n = 1
        if max_records_per_partition and r.size > max_records_per_partition:
            n = -(-r.size // max_records_per_partition)
        parts.append(n)
    total_parts = sum(parts)
    if min_partitions and total_parts < min_partitions:
        # a max-heap on offsets-per-part; a range cannot be cut finer than one offset per part
        heap = [(-(r.size / n), i) for i, (r, n) in enumerate(zip(ranges, parts)) if r.size > n]
        heapq.heapify(heap)
        while total_parts < min_partitions and heap:
            _, i = heapq.heappop(heap)
            parts[i] += 1
            total_parts += 1
            if ranges[i].size > parts[i]:
                heapq.heappush(heap, (-(ranges[i].size / parts[i]), i))
    out: list[OffsetRange] = []
    for r, n in zip(ranges, parts):
        out.extend(_split_even(r, n))
    return out


# A range is not cut for balance into parts smaller than this.  Measured (local[2], Kafka 4.3,
# 3 partitions): a per-key Python aggregation over 10M records was 1.11x faster as four parts;
# a count was not (one task's reader, JVM and consumer processes keep both cores busy), and at
# 1M records (parts of 167k) the extra task made the count ~4% slower.
BALANCE_MIN_PART_OFFSETS = 500_000


def balance_ranges(ranges: Sequence[OffsetRange], slots: int, *,
                   min_part_offsets: int | None = None) -> list[OffsetRange]:
    """Split ranges so ``slots`` concurrent tasks finish together: the number of non-empty
    parts becomes a multiple of ``slots`` (the fewest rounds of tasks that holds them all),
    with the extra parts going to the ranges with the most offsets per part
    (:func:`split_ranges`), but no part is cut below ``min_part_offsets`` (None:
    :data:`BALANCE_MIN_PART_OFFSETS`).

    The default layout of read_kafka and map_kafka_arrow when no split or pack option is
    given: three partitions on two cores read as two tasks, then one task alone (half the
    cores idle for a third of the job); as four parts, the second round is two half-size
    tasks.  Ranges already a multiple of ``slots`` are left as they are, and so are ranges the
    minimum would only let split into a layout that finishes no sooner (tasks start in order,
    each on the first free core)."""
    work = [r for r in ranges if r.size > 0]
    if slots <= 1 or not work or len(work) % slots == 0:
        return list(ranges)
    want = -(-len(work) // slots) * slots
    least = BALANCE_MIN_PART_OFFSETS if min_part_offsets is None else max(1, min_part_offsets)
    most = sum(r.size for r in work) // least  # parts of at least the minimum
    if min(want, most) <= len(work):
        return list(ranges)
    empty = len(ranges) - len(work)  # (split_ranges counts them as parts)
    parts = split_ranges(ranges, min_partitions=min(want, most) + empty)
    return parts if _makespan(parts, slots) < _makespan(ranges, slots) else list(ranges)


def batch_layout(ranges: Sequence[OffsetRange], slots: int, *, pack: bool
                 ) -> tuple[list[OffsetRange], int | None]:
    """The layout of a batch read given no split or pack option, over ``slots`` cores:
    ``(ranges, max_partitions)`` for :func:`task_groups`.

    The ranges are balanced into whole rounds of tasks (:func:`balance_ranges`); with
    ``pack`` (the caller knows the cores will all be there: local mode), more parts than
    cores are then packed into one task per core (:func:`pack_ranges`) -- each Python task
    costs scheduling, a worker round trip and its own start before it reads (measured: four
    partitions on local[2] aggregated in Python in ~0.1 s less as two tasks, cold).  Packing
    needs the cores counted right: on a cluster whose executors are still registering, or
    that grows with dynamic allocation, ``defaultParallelism`` undercounts them, and packed
    tasks could not spread out."""
    parts = balance_ranges(ranges, slots)
    if pack and slots >= 1 and sum(1 for r in parts if r.size > 0) > slots:
        return parts, slots
    return parts, None


def _makespan(ranges: Sequence[OffsetRange], slots: int) -> int:
    """Offsets the busiest of ``slots`` cores reads when tasks start in order on the first
    free one (Spark's order within a stage)."""
    free = [0] * slots
    for r in ranges:
        heapq.heapreplace(free, free[0] + r.size)
    return max(free)


def pack_ranges(ranges: Sequence[OffsetRange], slots: int) -> list[list[OffsetRange]]:
    """Group ranges into at most ``slots`` Spark tasks with even record counts.

    The opposite of :func:`split_ranges`: a Spark task costs tens of milliseconds before it
    reads anything (scheduling, the Python worker round trip), so many small ranges -- a topic
    with more partitions than the cluster has cores -- read faster as one task per core, each
    reading its ranges in turn over one cached connection.  Ranges are never cut.  Largest
    first, each range goes to the group with the fewest records so far (ties: the lower
    index); empty ranges are dropped; each group lists its ranges in (topic, partition,
    offset) order.  ``preferred_executor`` is not considered.
    """
    if slots < 1:
        raise ValueError(f"slots must be at least 1, not {slots}")
    work = sorted((r for r in ranges if r.size > 0), key=lambda r: (-r.size, r))
    groups: list[list[OffsetRange]] = [[] for _ in range(min(slots, len(work)))]
    heap = [(0, i) for i in range(len(groups))]
    for r in work:
        total, i = heapq.heappop(heap)
        groups[i].append(r)
        heapq.heappush(heap, (total + r.size, i))
    return [sorted(g) for g in groups]


def task_groups(ranges: Sequence[OffsetRange], max_partitions: int | None = None) -> list[list[OffsetRange]]:
    """The ranges each Spark task reads: one range per task (Spark's layout), or packed into
    at most ``max_partitions`` tasks (:func:`pack_ranges`)."""
    if max_partitions is None:
        return [[r] for r in ranges]
    return pack_ranges(ranges, max_partitions)


def plan_ranges(start: Mapping[TP, int], end: Mapping[TP, int], *,
                earliest: Mapping[TP, int] | None = None, latest: Mapping[TP, int] | None = None,
                fail_on_data_loss: bool = True, min_partitions: int | None = None,
                max_records_per_partition: int | None = None,
                executors: Sequence[str] = (), keep_empty: bool = False,
                start_ids: Mapping[str, uuid.UUID] | None = None,
                topic_ids: Mapping[str, uuid.UUID] | None = None) -> Plan:
    """The ``[from, until)`` ranges between ``start`` and ``end`` (``{tp: offset}``).

    Partitions in ``end`` but not in ``start`` are new: they start at ``earliest`` (or 0).
    Partitions in ``start`` but not in ``end`` are gone: data loss.  A topic whose id in
    ``topic_ids`` (now) differs from ``start_ids`` (when ``start`` was taken) was recreated:
    data loss, going on at ``earliest``.  A start below ``earliest`` lost the offsets in
    between; an end past ``latest`` (the log was truncated) or a start after its end asks for
    offsets the log does not have.  Topics missing from either id map are not checked (old
    checkpoints, brokers without ids).  Empty ranges are dropped unless ``keep_empty``.
    Ranges carry ``topic_ids``.
    """
    warnings: list[str] = []
    earliest = earliest or {}
    latest = latest or {}
    start_ids = start_ids or {}
    topic_ids = {t: i for t, i in (topic_ids or {}).items() if i is not None}

    def lost(message: str) -> None:
        if fail_on_data_loss:
            raise DataLossError(message + ". Some data may have been lost because it is not "
                                "available in Kafka any more: it was deleted (retention, "
                                "DeleteRecords) or the topic was recreated.  If you want the query "
                                "to go on regardless, set failOnDataLoss=false.")
        warnings.append(message + "; skipped (failOnDataLoss=false)")

    for tp in sorted(set(start) - set(end)):
        lost(f"{tp[0]}-{tp[1]} is gone (its topic was deleted or has fewer partitions now)")

    final_start: dict[TP, int] = {}
    final_end: dict[TP, int] = {}
    ranges: list[OffsetRange] = []
    for tp in sorted(end):
        until = end[tp]
        frm = start.get(tp)
        if frm is None:
            frm = earliest.get(tp, 0)
        low = earliest.get(tp)
        high = latest.get(tp)
        was, now = start_ids.get(tp[0]), topic_ids.get(tp[0])
        if tp in start and was is not None and now is not None and was != now:
            restart = low if low is not None else 0
            lost(f"{tp[0]}-{tp[1]}: the topic was deleted and recreated (topic id {was} is now {now}); "
                 f"offset {frm} was planned in the old topic; going on at the new log's start, {restart}")
            frm = restart
        if high is not None and until > high:
            lost(f"{tp[0]}-{tp[1]}: ending offset {until} is past the end of the log ({high})")
            until = high
        if low is not None and frm < low:
            lost(f"{tp[0]}-{tp[1]}: offsets {frm}..{min(low, until) - 1} requested but the log "
                 f"starts at {low}")
            frm = min(low, until)
        if frm > until:
            lost(f"{tp[0]}-{tp[1]}: starting offset {frm} is after the ending offset {until}")
            frm = until
        final_start[tp] = frm
        final_end[tp] = until
        if until > frm or keep_empty:
            ranges.append(OffsetRange(tp[0], tp[1], frm, until,
                                      preferred_executor(tp[0], tp[1], executors), topic_ids.get(tp[0])))
    ranges = split_ranges(ranges, min_partitions=min_partitions,
                          max_records_per_partition=max_records_per_partition)
    return Plan(ranges, final_start, final_end, warnings, dict(topic_ids))


# --- monitoring and rate limits --------------------------------------------------------------------

def lag(position: Mapping[TP, int], latest: Mapping[TP, int]) -> dict[TP, int]:
    """Offsets between ``position`` and the end of each log (0 when caught up)."""
    return {tp: max(0, latest[tp] - position.get(tp, latest[tp])) for tp in sorted(latest)}


def cap_offsets(start: Mapping[TP, int], latest: Mapping[TP, int], max_offsets: int | None) -> dict[TP, int]:
    """End offsets that take at most ``max_offsets`` offsets in total past ``start``.

    The limit is shared in proportion to each partition's backlog (largest remainder, so the
    shares add up exactly).  A partition missing from ``start`` has no backlog: callers put
    new partitions into ``start`` at their earliest offset.  A partition whose log ends before
    its start keeps its start (never goes backwards).
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if max_offsets is None or total <= max_offsets:
        return {tp: start.get(tp, latest[tp]) + n for tp, n in backlog.items()}
    shares = {}
    remainders = []
    for tp, n in backlog.items():
        exact = n * max_offsets / total
        shares[tp] = int(exact)
        remainders.append((-(exact - int(exact)), tp))
    left = max_offsets - sum(shares.values())
    for _, tp in sorted(remainders)[:left]:
        shares[tp] += 1
    return {tp: start.get(tp, latest[tp]) + shares[tp] for tp in backlog}


# --- the offsets Spark checkpoints -----------------------------------------------------------------

# '@' cannot occur in a Kafka topic name, so this key never collides with a topic.
TOPIC_IDS_KEY = "@topicIds"


def offsets_to_json(offsets: Mapping[TP, int],
                    topic_ids: Mapping[str, uuid.UUID | None] | None = None) -> dict[str, dict[str, Any]]:
    """``{(topic, partition): offset}`` as Spark's Kafka source writes it: ``{topic: {"p": off}}``,
    plus ``"@topicIds": {topic: "uuid"}`` for the topics whose id is known."""
    out: dict[str, dict[str, Any]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    ids = {t: str(i) for t, i in sorted((topic_ids or {}).items()) if i is not None and t in out}
    if ids:
        out[TOPIC_IDS_KEY] = ids
    return out


def offsets_from_json(value: Mapping[str, Mapping[str, int]]) -> dict[TP, int]:
    """The offsets of :func:`offsets_to_json` (or of Spark's Kafka source: no ids)."""
    out = {}
    for t, parts in value.items():
        if t == TOPIC_IDS_KEY:
            continue
        for p, o in parts.items():
            out[(t, int(p))] = int(o)
    return out


def topic_ids_from_json(value: Mapping[str, Any]) -> dict[str, uuid.UUID]:
    """The topic ids :func:`offsets_to_json` recorded (none in checkpoints written before)."""
    return {t: uuid.UUID(i) for t, i in (value.get(TOPIC_IDS_KEY) or {}).items()}
