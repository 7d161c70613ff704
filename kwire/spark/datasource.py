"""The PySpark Python Data Source "kwire": ``spark.read.format("kwire")`` and ``readStream``.

Register it once per session with :func:`kwire.spark.register`.  Where each piece runs:

* options are parsed when Spark instantiates the source (a Python process of the driver);
* ``partitions()`` (batch) and ``initialOffset`` / ``latestOffset`` / ``partitions`` /
  ``commit`` (streaming) plan on the driver: metadata, ListOffsets, OffsetFetch, OffsetCommit;
* ``read()`` runs in the executors' Python workers, one call per planned range (or group of
  ranges, with ``maxPartitions``), and yields ``pyarrow.RecordBatch`` es decoded straight from
  the Fetch answers.

Streaming offsets are Spark's Kafka format, ``{"topic": {"0": 42}}`` (next offset to read),
plus ``"@topicIds": {"topic": "<uuid>"}`` (Metadata v10+; checkpoints written without it are
still read), checkpointed by Spark.  A topic whose id changed between a batch's start and end
was deleted and recreated, a log that now ends below the start was truncated: both are data
loss (see :mod:`kwire.spark.planner` for where a stream goes on with failOnDataLoss=false).
``maxOffsetsPerTrigger`` becomes the default read limit
(``ReadMaxRows``); ``Trigger.AvailableNow`` reads up to the offsets that were latest when the
query started, in as many micro-batches as the limit asks.  ``commitToGroup`` commits each
micro-batch's end offsets once the batch is done: when Spark asks for the next batch's end
(``latestOffset``, which it does only after the previous batch completed, and once more before
a Trigger.AvailableNow run stops) or calls ``commit``, whichever comes first.

Batch reads with ``commitToGroup`` go through :func:`kwire.spark.read_kafka`: a Data Source
batch read has no hook that runs after the job, so the option is refused here.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import threading
import uuid
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from ..errors import ConfigError
from . import planner
from .offset_reader import OffsetReader, log_plan
from .options import SourceOptions, parse_options
from .planner import TP, OffsetRange
from .reader import ReadSettings, _as_range, read_range_arrow, read_range_rows
from .schema import kafka_schema_ddl

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from .commit import RangeReport

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
    _READ_LIMITS = True
except ImportError:  # PySpark < 4.2: no read limits
    _READ_LIMITS = False

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

__all__ = ["KwireDataSource", "RangePartition", "register_once", "PLANNED_RANGES_OPTION", "PROGRESS_OPTION"]

# Internal: read_kafka plans on the driver and hands the ranges over, so they are not planned
# twice (and a commit covers exactly what was read).
# JSON [[topic, partition, from, until, topic id or null], ...]
PLANNED_RANGES_OPTION = "kwire.plannedranges"
# Internal: read_kafka's commitToGroup -- the id of the driver's accumulator the read tasks report
# each range they read to its end to (kwire.spark.commit).
PROGRESS_OPTION = "kwire.progress"

_log = logging.getLogger("kwire.spark")


_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()
_registered_lock = threading.Lock()


def register_once(spark: SparkSession) -> None:
    """Register :class:`KwireDataSource` with ``spark`` unless this session has it already
    (Spark warns on every registration of a name it knows)."""
    with _registered_lock:
        if spark in _registered:
            return
        spark.dataSource.register(KwireDataSource)
        _registered.add(spark)


class RangePartition(InputPartition):
    """The ranges one task reads, in turn: ``value`` is a tuple of
    ``(topic, partition, from_offset, until_offset, topic_id)`` (one, unless ``maxPartitions``
    packed several; the topic's id as planned, or None)."""

    def __init__(self, ranges: list[OffsetRange]):
        super().__init__(tuple(_range_tuple(r) for r in ranges))

    @property
    def ranges(self) -> list[OffsetRange]:
        return [_as_range(v) for v in self.value]


def _range_tuple(r: OffsetRange) -> tuple[str, int, int, int, str | None]:
    """``(topic, partition, from, until, topic id or None)``: JSON- and pickle-friendly."""
    return (r.topic, r.partition, r.from_offset, r.until_offset,
            None if r.topic_id is None else str(r.topic_id))


def _include_headers(options: Mapping[str, Any]) -> bool:
    for k, v in dict(options).items():
        if k.lower() == "includeheaders":
            return str(v).strip().lower() in ("true", "1", "yes", "on")
    return False


def _split_internal(options: Mapping[str, str]) -> tuple[dict[str, str], list[OffsetRange] | None, int | None]:
    """The options without the internal ones; the planned ranges (or None) and the progress
    accumulator's id (or None)."""
    options = dict(options)
    planned: list[OffsetRange] | None = None
    progress: int | None = None
    for k in list(options):
        if k.lower() == PLANNED_RANGES_OPTION:
            planned = [_as_range(v) for v in json.loads(options.pop(k))]
        elif k.lower() == PROGRESS_OPTION:
            progress = int(options.pop(k))
    return options, planned, progress


def _progress_accumulator(aid: int) -> Accumulator[frozenset[RangeReport]]:
    """The driver's accumulator ``aid``, as a task sees it (pickled into the reader, it registers
    in each task's worker, which sends its updates back with the task's result)."""
    from pyspark.accumulators import _deserialize_accumulator

    from .commit import progress_param

    return _deserialize_accumulator(aid, frozenset(), progress_param())


def _read(settings: ReadSettings, partition: InputPartition) -> Iterator[Any]:
    if partition.value is None:  # Spark's stand-in when a plan has no partitions
        return
    read = read_range_rows if importlib.util.find_spec("pyarrow") is None else read_range_arrow
    for r in partition.value:
        yield from read(settings, r)


class KwireDataSource(DataSource):
    """``format("kwire")``: Kafka through kwire, with the options of Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "kwire"

    def schema(self) -> str:
        # Spark asks for the schema at load(), before it knows whether this is read or
        # readStream: check the options now (unknown names, malformed JSON) if they are wrong
        # for both; reader() / streamReader() apply the rules of their kind.
        options, _, _ = _split_internal(self.options)
        try:
            parse_options(options, streaming=False)
        except ConfigError as batch_error:
            try:
                parse_options(options, streaming=True)
            except ConfigError:
                raise batch_error from None
        return kafka_schema_ddl(_include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        options, planned, progress = _split_internal(self.options)
        opts = parse_options(options, streaming=False)
        if opts.commit_group:
            raise ConfigError("option 'commitToGroup' needs a hook after the job, which a Data Source "
                              "batch read does not have: use kwire.spark.read_kafka(spark, ...) for "
                              "batch reads, or readStream")
        reader = KwireBatchReader(opts, planned)
        if progress is not None:
            reader.settings = dataclasses.replace(reader.settings, progress=_progress_accumulator(progress))
        return reader

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KwireStreamReader(parse_options(self.options, streaming=True))


class KwireBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, planned: list[OffsetRange] | None = None) -> None:
        self.options = options
        self.settings = ReadSettings.from_options(options)
        self.planned = planned

    def partitions(self) -> list[RangePartition]:
        ranges = self.planned
        if ranges is None:
            with OffsetReader(self.options) as offsets:
                plan, _ = offsets.plan_batch()
            ranges = plan.ranges
        return [RangePartition(g) for g in planner.task_groups(ranges, self.options.max_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.settings, partition)


class KwireStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over ``[start, end)`` offsets; the driver state (a connection, the
    Trigger.AvailableNow target) stays out of what is pickled for the executors."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.settings = ReadSettings.from_options(options)
        self._offsets: OffsetReader | None = None
        self._target: dict[TP, int] | None = None  # Trigger.AvailableNow: read no further than this
        self._latest: dict[TP, int] | None = None
        self._latest_ids: dict[str, uuid.UUID] | None = None
        self._committed: dict[str, Any] | None = None  # the last offsets committed to commitToGroup

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_offsets"] = None
        return state

    @property
    def offsets(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(self.options)
        return self._offsets

    # --- offsets --------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        o = self.options
        r = self.offsets
        tps = r.partitions()
        planner.check_named_partitions(o.starting, tps, "startingOffsets")
        earliest, latest = r.earliest(tps), r.latest(tps)
        start, start_ids = r.resolve_start(tps, earliest, latest)
        _log.info("stream starts at %s", start)
        # startingOffsets=group: the ids the offsets were committed with, so that the first
        # batch reports offsets committed in a topic since deleted and recreated
        return planner.offsets_to_json(start, {**r.topic_ids(tps), **start_ids})

    def getDefaultReadLimit(self) -> Any:  # a ReadLimit; None before PySpark 4.2
        if not _READ_LIMITS:
            return None
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        r = self.offsets
        self._target = r.latest(r.partitions())
        _log.info("Trigger.AvailableNow reads up to %s", self._target)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        if start:
            # Spark plans the next batch only once the one ending at `start` is done, so this
            # is the first moment the last batch of a run (Trigger.AvailableNow's included) can
            # be committed; commit() below would only be called at the next run.
            self._commit(start)
        r = self.offsets
        tps = r.partitions()
        ids = r.topic_ids(tps)
        latest = r.latest(tps)
        self._latest = latest
        self._latest_ids = ids
        if self._target is not None:
            latest = {tp: min(o, self._target.get(tp, o)) for tp, o in latest.items()}
        if start is None:
            # PySpark before 4.2 calls latestOffset() without the start or a limit: all there is
            # (maxOffsetsPerTrigger needs 4.2's read limits).
            return planner.offsets_to_json(latest, ids)
        begin = planner.offsets_from_json(start)
        begin_ids = planner.topic_ids_from_json(start)
        recreated = {tp for tp in begin if tp in latest and tp[0] in begin_ids and tp[0] in ids
                     and begin_ids[tp[0]] != ids[tp[0]]}
        new = [tp for tp in tps if tp not in begin]
        restart = r.earliest(new + sorted(recreated)) if new or recreated else {}
        # partitions that appeared since the last batch start at their beginning; a recreated
        # topic's are counted from its new beginning (partitions() reports the loss)
        counted_from = {**begin, **restart}
        max_rows = getattr(limit, "max_rows", None)
        end = planner.cap_offsets(counted_from, latest, max_rows)
        for tp, o in begin.items():
            if tp in latest and latest[tp] < o and tp not in recreated:
                # The log now ends below the start (truncated; or recreated, where no ids tell):
                # end there, so that a batch runs and partitions() reports the loss, as Spark's
                # source does ("offset was changed from X to Y").
                end[tp] = latest[tp]
        # A partition that disappeared is left out (partitions() reports it).
        return planner.offsets_to_json(end, ids)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else planner.offsets_to_json(self._latest, self._latest_ids)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        o = self.options
        r = self.offsets
        begin = planner.offsets_from_json(start)
        until = planner.offsets_from_json(end)
        tps = sorted(set(begin) | set(until))
        earliest = r.earliest([tp for tp in tps if tp in until])
        latest = r.latest([tp for tp in tps if tp in until])
        # The ids `end` recorded, unless this batch is replayed from a checkpoint written before
        # ids were: then the ids now.
        now_ids = planner.topic_ids_from_json(end) or r.topic_ids([tp for tp in tps if tp in until])
        plan = planner.plan_ranges(begin, until, earliest=earliest, latest=latest,
                                   fail_on_data_loss=o.fail_on_data_loss,
                                   min_partitions=o.min_partitions,
                                   max_records_per_partition=o.max_records_per_partition,
                                   start_ids=planner.topic_ids_from_json(start), topic_ids=now_ids)
        for w in plan.warnings:
            _log.warning("%s", w)
        log_plan(plan, latest)
        return [RangePartition(g) for g in planner.task_groups(plan.ranges, o.max_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.settings, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit(end)

    def _commit(self, end: dict[str, Any]) -> None:
        group = self.options.commit_group
        if not group or end == self._committed:
            return
        offsets = planner.offsets_from_json(end)
        self.offsets.commit(group, offsets)
        self._committed = end
        _log.info("committed %s to group %r", offsets, group)

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None
