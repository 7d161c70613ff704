"""``read_kafka`` (DataFrame), ``kafka_rdd`` and ``kafka_arrow_rdd`` (RDDs): Kafka into PySpark
without a Data Source.

:func:`read_kafka` plans on the driver, then hands the planned ranges to the "kwire" Data Source
(or, on request or without the Data Source API, to ``mapInArrow``), whose executors decode Fetch
answers straight into Arrow record batches; without pyarrow it falls back to the row path
through an RDD.  With ``commitToGroup`` the
DataFrame carries a :class:`~kwire.spark.commit.PendingCommit`: once an action over it
succeeded *and* read every planned range in full, the driver commits the planned end offsets
to the group; a failed action or a partial one (``show``, ``take``, ``limit``) commits nothing
(see :mod:`kwire.spark.commit`).

:func:`kafka_rdd` reads ranges you planned yourself and yields :class:`~kwire.spark.reader.KafkaRow`
tuples; :func:`kafka_arrow_rdd` yields ``pyarrow.RecordBatch`` es of the same ranges (no
per-record Python object).  Both take ``num_partitions`` to pack many small ranges into fewer
tasks (:func:`~kwire.spark.planner.pack_ranges`).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..config import parse_config
from ..errors import ConfigError, KwireError
from .commit import PendingCommit, RangeReport, commit_after_full_read, progress_param
from .executors import check_executors, guarded
from .offset_reader import OffsetReader, lookup_topic_ids
from .options import SourceOptions, parse_options
from .planner import OffsetRange, Plan, batch_layout, task_groups
from .reader import ReadSettings, _as_range, read_range_arrow, read_range_rows
from .schema import kafka_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import RDD, SparkContext
    from pyspark.accumulators import Accumulator
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from .arrow import ArrowBatchLayout
    from .frame import FusedRead

# a range as the tasks get it: (topic, partition, from, until, topic id or None)
RangeTuple = tuple[str, int, int, int, 'str | None']
# a mapInArrow function: Arrow batches in, Arrow batches out
ArrowFunction = Callable[[Iterator['pa.RecordBatch']], Iterator['pa.RecordBatch']]

__all__ = ["read_kafka", "map_kafka_arrow", "kafka_rdd", "kafka_arrow_rdd", "await_commit", "PendingCommit"]

_log = logging.getLogger("kwire.spark")


class _ArrowTaskGroups:
    """The ``mapInArrow`` function of :func:`read_kafka`'s default path (runs on executors).

    It maps ``spark.range(n, numPartitions=n)``, so task ``i`` gets the one id ``i`` and reads
    the ranges of task group ``i``, which travel inside this function.  Nothing but the JVM
    makes the ids: no Python stage before the read, no Data Source planning workers.  Its
    ``__name__`` is what ``explain()`` prints for the step: topics, ranges, records.
    """

    def __init__(self, settings: ReadSettings, groups: list[list[OffsetRange]],
                 columns: tuple[str, ...] | None = None):
        self.settings = settings
        self.groups = [tuple(_range_tuple(r) for r in g) for g in groups]
        self.columns = columns  # only these, in this order (a select pushed into the read); None: all
        self.__name__ = describe_ranges([r for g in groups for r in g])

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from .arrow import kafka_arrow_schema

        schema = kafka_arrow_schema(self.settings.include_headers)
        columns = None if self.columns is None else list(self.columns)
        for batch in batches:
            for i in batch.column(0).to_pylist():
                for r in self.groups[i]:
                    if columns is None:
                        yield from read_range_arrow(self.settings, r, schema)
                    else:
                        for b in read_range_arrow(self.settings, r, schema):
                            yield b.select(columns)




class _FusedArrowTaskGroups(_ArrowTaskGroups):
    """The ``mapInArrow`` function of :func:`map_kafka_arrow`: task ``i`` reads task group
    ``i`` and hands the batches straight to the user's function in the same Python worker --
    the records never cross to the JVM and back before the user's code sees them."""

    def __init__(self, settings: ReadSettings, groups: list[list[OffsetRange]], func: ArrowFunction,
                 columns: tuple[str, ...] | None, layout: ArrowBatchLayout | None = None):
        super().__init__(settings, groups, columns)
        self.func = func
        self.layout = layout  # a fused mapInArrow: the batches as Spark would have cut them
        self.__name__ = f"{getattr(func, '__name__', 'func')} over {self.__name__}"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        kafka_batches = super().__call__(batches)
        if self.layout is not None:
            kafka_batches = self.layout.cut(kafka_batches)
        yield from self.func(kafka_batches)


def describe_ranges(ranges: list[OffsetRange], limit: int = 4) -> str:
    """``kwire[t: 0 [0, 10), 1 [0, 12); 22 records]``: what a plan reads, for ``explain()``."""
    parts: list[str] = []
    by_topic: dict[str, list[OffsetRange]] = {}
    for r in ranges:
        by_topic.setdefault(r.topic, []).append(r)
    shown = 0
    for topic, rs in by_topic.items():
        items = []
        for r in rs:
            if shown >= limit:
                break
            items.append(f"{r.partition} [{r.from_offset}, {r.until_offset})")
            shown += 1
        more = len(rs) - len(items)
        if items:
            parts.append(f"{topic}: " + ", ".join(items) + (f" +{more} more" if more else ""))
        else:
            parts.append(f"{topic}: {len(rs)} ranges")
    total = sum(r.size for r in ranges)
    return f"kwire[{'; '.join(parts)}; {total} records]" if parts else "kwire[no records]"


class _GroupReader:
    """The ``mapPartitions`` function of :func:`kafka_rdd` (rows) and :func:`kafka_arrow_rdd`
    (Arrow batches): each element is a group of ranges one task reads in turn (runs on
    executors)."""

    def __init__(self, settings: ReadSettings, arrow: bool = False):
        self.settings = settings
        self.arrow = arrow

    def __call__(self, groups: Iterable[Sequence[OffsetRange | Sequence[Any]]]) -> Iterator[Any]:
        read: Callable[[OffsetRange | Sequence[Any]], Iterator[Any]]
        if self.arrow:
            from .arrow import kafka_arrow_schema

            schema = kafka_arrow_schema(self.settings.include_headers)
            read = lambda r: read_range_arrow(self.settings, r, schema)  # noqa: E731
        else:
            read = lambda r: read_range_rows(self.settings, r)  # noqa: E731
        for group in groups:
            for r in group:
                yield from read(r)


class _GroupCounter:
    """The ``mapPartitions`` function of a :class:`~kwire.spark.frame.KafkaDataFrame`'s
    ``count()``: each element is a group of ranges; yields the records read (Arrow batches
    counted, no record leaves the task)."""

    def __init__(self, settings: ReadSettings):
        self.reader = _GroupReader(settings, arrow=True)

    def __call__(self, groups: Iterable[Sequence[OffsetRange | Sequence[Any]]]) -> Iterator[int]:
        yield sum(b.num_rows for b in self.reader(groups))


def _ranges_rdd(sc: SparkContext, ranges: list[OffsetRange], num_partitions: int | None
                ) -> RDD[list[OffsetRange]]:
    """An RDD with one element per task: the list of ranges that task reads."""
    if num_partitions is not None and (isinstance(num_partitions, bool) or not isinstance(num_partitions, int)
                                       or num_partitions < 1):
        raise ConfigError(f"num_partitions must be a whole number of at least 1 (or None), "
                          f"not {num_partitions!r}")
    groups = task_groups(ranges, num_partitions)
    return sc.parallelize(groups, max(1, len(groups)))


def _range_tuple(r: OffsetRange) -> RangeTuple:
    return (r.topic, r.partition, r.from_offset, r.until_offset, None if r.topic_id is None else str(r.topic_id))


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value)
    return str(value)


_READERS = ("auto", "datasource", "mapInArrow", "rows")
# Options that only planning uses: the Data Source reads ranges planned here without them.
_PLANNING_ONLY = {name.lower() for name in (
    "commitToGroup", "startingOffsets", "endingOffsets", "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestampStrategy", "minPartitions", "maxRecordsPerPartition")}


def _data_source_available(spark: SparkSession) -> bool:
    return hasattr(spark, "dataSource") and _have("pyarrow")  # the Python Data Source API (Spark 4)


def read_kafka(spark: SparkSession, *, reader: str = "auto", **options: Any) -> DataFrame:
    """A DataFrame of the records the options select (Spark's Kafka source options; see
    :mod:`kwire.spark.options`), in Spark's Kafka schema.

    Planning happens now, on the driver: an unknown option, malformed JSON, a missing topic or
    an unreachable cluster raise here, before any task runs.

    ``reader`` picks how executors hand the records to Spark: ``"mapInArrow"`` (each task
    reads its planned ranges into Arrow batches in a ``mapInArrow`` over ``spark.range``;
    PySpark needs pandas installed for it), ``"datasource"`` (the "kwire" Python Data Source,
    reading the ranges planned here; Arrow batches), ``"rows"`` (an RDD of row tuples, no
    pyarrow needed), or ``"auto"``: the first of these that is available, in that order.

    ``mapInArrow`` comes first because scheduled batch jobs start cold: a Python Data Source
    makes Spark start three Python planning processes on the driver (look-up, creation,
    planning), each importing PySpark, pyarrow and kwire, before the first task runs, while
    ``mapInArrow`` over ``spark.range`` starts none; warm, the two move the same Arrow
    batches (see the README's Spark benchmarks).  Its DataFrame (without ``commitToGroup``)
    is a :class:`~kwire.spark.frame.KafkaDataFrame`: ``select`` of column names reads only
    those, ``count()`` counts in the read tasks, and ``mapInArrow`` over it runs in the read
    tasks.  Its read tasks check that the executors have this kwire
    (:func:`~kwire.spark.executors.guarded`) instead of a job of their own.
    """
    if reader not in _READERS:
        raise ConfigError(f"read_kafka: reader must be one of {', '.join(_READERS)}, not {reader!r}")
    opts = parse_options(options, streaming=False)
    if reader == "auto":
        reader = ("mapInArrow" if _have("pyarrow") and _have("pandas")
                  else "datasource" if _data_source_available(spark) else "rows")
    plan, opts, settings, progress = _plan_batch(spark, opts, guarded_tasks=reader == "mapInArrow")
    schema = kafka_schema(opts.include_headers)
    sc = spark.sparkContext
    if reader == "datasource":
        from .datasource import PLANNED_RANGES_OPTION, PROGRESS_OPTION, register_once

        register_once(spark)
        source = spark.read.format("kwire")
        for k, v in options.items():  # what reading the planned ranges needs
            if k.lower() not in _PLANNING_ONLY | {"maxpartitions"} and v is not None:
                source = source.option(k, _option_text(v))
        if opts.max_partitions is not None:  # given, or the layout packs the ranges
            source = source.option("maxPartitions", str(opts.max_partitions))
        rows = [_range_tuple(r) for r in plan.ranges]
        source = source.option(PLANNED_RANGES_OPTION, json.dumps(rows))
        if progress is not None:
            source = source.option(PROGRESS_OPTION, str(progress.aid))
        df = source.load()
    elif reader == "mapInArrow":
        from .frame import FusedRead

        read = FusedRead(settings, task_groups(plan.ranges, opts.max_partitions))
        # a KafkaDataFrame (select, count and mapInArrow run in the read tasks), but with
        # commitToGroup the observed read is the DataFrame the commit watches
        df = read_frame(spark, read) if opts.commit_group else kafka_frame(spark, read)
    else:
        rdd = _ranges_rdd(sc, plan.ranges, opts.max_partitions).mapPartitions(_GroupReader(settings))
        df = spark.createDataFrame(rdd, schema)
    if opts.commit_group:
        df = commit_after_full_read(spark, df, opts, plan.end, plan.ranges, progress)
    return df


def _classic(spark: SparkSession) -> bool:
    """A classic (not Spark Connect) session: its DataFrames can be subclassed."""
    return hasattr(spark, "_jsparkSession")


def over_task_groups(spark: SparkSession, task: _ArrowTaskGroups, schema: StructType | str) -> DataFrame:
    """``task`` (guarded) over ``spark.range(n, numPartitions=n)``: task ``i`` gets the id ``i``."""
    n = len(task.groups)
    return spark.range(0, n, 1, max(1, n)).mapInArrow(guarded(task), schema)


def read_schema(read: FusedRead) -> StructType:
    """The Spark schema of ``read``'s rows: Spark's Kafka schema, or its selected columns."""
    full = kafka_schema(read.settings.include_headers)
    return full if read.columns is None else _struct([full[c] for c in read.columns])


def read_frame(spark: SparkSession, read: FusedRead) -> DataFrame:
    """A plain DataFrame of ``read``'s records (its columns), read in a ``mapInArrow``."""
    return over_task_groups(spark, _ArrowTaskGroups(read.settings, read.groups, read.columns), read_schema(read))


def kafka_frame(spark: SparkSession, read: FusedRead) -> DataFrame:
    """A :class:`~kwire.spark.frame.KafkaDataFrame` of ``read`` where the session allows one
    (a classic session, not Spark Connect), else :func:`read_frame`."""
    if not _classic(spark):
        return read_frame(spark, read)
    from .frame import KafkaDataFrame

    return KafkaDataFrame(spark, read)


def count_read(spark: SparkSession, read: FusedRead) -> int:
    """The number of records ``read`` has, counted in its read tasks: a Python RDD job (Spark
    SQL is not needed to count, and in a cold job its first query and Arrow workers cost more
    than the read), described as the count of the ranges in Spark's UI."""
    sc = spark.sparkContext
    groups = [list(g) for g in read.groups]
    rdd = sc.parallelize(groups, max(1, len(groups))).mapPartitions(guarded(_GroupCounter(read.settings)))
    return int(sum(_collect_described(rdd, f"count of {describe_ranges([r for g in read.groups for r in g])}")))


def _collect_described(rdd: RDD[Any], description: str) -> list[Any]:
    """``rdd.collect()`` as a job named ``description`` in Spark's UI (the thread's previous
    description restored after)."""
    sc = rdd.context
    before = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(description)
    try:
        return rdd.collect()
    finally:
        sc.setLocalProperty("spark.job.description", before)  # type: ignore[arg-type]  # None unsets


def fused_task(read: FusedRead, func: ArrowFunction, layout: ArrowBatchLayout | None) -> _FusedArrowTaskGroups:
    """The read tasks of ``mapInArrow(func, schema)`` over a
    :class:`~kwire.spark.frame.KafkaDataFrame`: ``func`` gets the batches in ``layout`` (None:
    as kwire reads them, :func:`map_kafka_arrow`)."""
    return _FusedArrowTaskGroups(read.settings, read.groups, func, read.columns, layout)


class _IpcBatches:
    """The ``mapPartitions`` function of :func:`collect_in_tasks`: the task group ids of its
    partition through ``task``, each batch ``task`` yields as an Arrow IPC stream (bytes)."""

    def __init__(self, task: _ArrowTaskGroups):
        self.task = task

    def __call__(self, ids: Iterable[int]) -> Iterator[bytes]:
        import array

        import pyarrow as pa

        # the ids column from its buffer: pa.array() imports pandas (~0.2 s of a cold worker)
        values = array.array("q", ids)
        if not values:
            return  # Spark does not call a mapInArrow function for a partition without rows
        id_batch = pa.RecordBatch.from_arrays(
            [pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values.tobytes())])], names=["id"])
        for batch in self.task(iter([id_batch])):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as writer:
                writer.write_batch(batch)
            yield sink.getvalue().to_pybytes()


# Spark types whose rows collect_in_tasks makes itself (Arrow's Python values are Spark's)
_PLAIN_TYPES = ("LongType", "IntegerType", "ShortType", "ByteType", "DoubleType", "FloatType", "BooleanType",
                "StringType", "BinaryType")


def collect_in_tasks(spark: SparkSession, task: _ArrowTaskGroups, schema: StructType) -> list[Any] | None:
    """``collect()`` of ``task``'s output as a Python RDD job: the rows Spark's ``collect``
    would give, or None where Spark's own must decide -- a schema that is not of plain
    columns, ``spark.sql.execution.pyspark.binaryAsBytes=false``, or batches whose types are
    not the schema's (Spark fails those; this path never guesses)."""
    if not schema.fields or not all(type(f.dataType).__name__ in _PLAIN_TYPES for f in schema.fields):
        return None
    if len({f.name.lower() for f in schema.fields}) != len(schema.fields):
        return None  # Spark's collect fails on duplicate names
    try:
        if str(spark.conf.get("spark.sql.execution.pyspark.binaryAsBytes")).strip().lower() == "false":
            return None
    except Exception:  # a Spark without that conf: binary is bytes
        pass
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _create_row

    want = [f.type for f in to_arrow_schema(schema)]
    sc = spark.sparkContext
    n = len(task.groups)
    rdd = sc.parallelize(range(n), max(1, n)).mapPartitions(guarded(_IpcBatches(task)))
    blobs = _collect_described(rdd, getattr(task, "__name__", "kwire"))
    names = schema.fieldNames()
    rows: list[Any] = []
    for blob in blobs:
        for batch in pa.ipc.open_stream(blob):
            if [f.type for f in batch.schema] != want:
                return None  # Spark reads columns by position and fails on another type
            if any(not f.nullable and batch.column(i).null_count for i, f in enumerate(schema.fields)):
                return None  # Spark fails on a null in a non-nullable column
            rows.extend(_create_row(names, values) for values in zip(*(c.to_pylist() for c in batch.columns)))
    return rows


def _struct(fields: list[Any]) -> StructType:
    from pyspark.sql.types import StructType

    return StructType(fields)


def _local_mode(master: str | None) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N, F]``: the cores are the driver's, all
    there from the start (not ``local-cluster[...]``, whose executors register as on a cluster)."""
    return re.fullmatch(r"local(\[[^\]]*\])?", (master or "").strip()) is not None


def _plan_batch(spark: SparkSession, opts: SourceOptions, *, guarded_tasks: bool
                ) -> tuple[Plan, SourceOptions, ReadSettings, Accumulator[frozenset[RangeReport]] | None]:
    """Plan a batch read on the driver: (plan, the options with the layout chosen --
    ``max_partitions`` set when the ranges are packed --, executor settings, progress
    accumulator or None -- with commitToGroup, the read tasks report each range they read to
    its end).  ``guarded_tasks``: the read tasks will be
    :func:`~kwire.spark.executors.guarded` (no executor check job unless asked for)."""
    with OffsetReader(opts) as offsets:
        plan, _ = offsets.plan_batch()
    if opts.min_partitions is None and opts.max_records_per_partition is None and opts.max_partitions is None:
        # no layout asked for: even out the tasks over the cores, one task per core where the
        # cores are known (minPartitions=1 keeps Spark's one task per partition)
        sc = spark.sparkContext
        ranges, pack = batch_layout(plan.ranges, sc.defaultParallelism, pack=_local_mode(sc.master))
        plan = dataclasses.replace(plan, ranges=ranges)
        opts = dataclasses.replace(opts, max_partitions=pack)
    check_executors(spark, guarded_tasks=guarded_tasks)
    settings = ReadSettings.from_options(opts)
    progress = None
    if opts.commit_group:
        progress = spark.sparkContext.accumulator(frozenset(), progress_param())
        settings = dataclasses.replace(settings, progress=progress)
    return plan, opts, settings, progress


def map_kafka_arrow(spark: SparkSession, func: ArrowFunction, schema: StructType | str, *,
                    columns: Iterable[str] | None = None, **options: Any) -> DataFrame:
    """``func`` over the records the options select, inside the read tasks: a DataFrame of
    what ``func`` yields, in ``schema`` (a DDL string or StructType).

    As ``read_kafka(spark, **options).select(*columns).mapInArrow(func, schema)``, but each
    task gives the Arrow batches it reads straight to ``func`` in the same Python worker:
    the records do not go to the JVM and back to a second Python stage first.  ``func`` gets
    an iterator of ``pyarrow.RecordBatch`` es in Spark's Kafka schema (only ``columns``, in
    that order, when given) and yields RecordBatches of ``schema``, as for ``mapInArrow``.

    Planning and options are read_kafka's.  With ``commitToGroup``, offsets are committed
    after an action over the result succeeded, with no partial operator (limit, take, show,
    sample ...), and ``func`` took every batch of every planned range (the tasks report a
    range once ``func`` has pulled its last batch: a ``func`` that stops early, or fails,
    commits nothing).  Needs pyarrow and pandas (as ``mapInArrow`` does).

    Without ``commitToGroup`` (on a classic session) the DataFrame is a
    :class:`~kwire.spark.frame.KafkaArrowFrame`: its ``collect()`` of plain columns is a
    Python RDD job over the read tasks, not a Spark SQL query.
    """
    opts = parse_options(options, streaming=False)
    plan, opts, settings, progress = _plan_batch(spark, opts, guarded_tasks=True)
    groups = task_groups(plan.ranges, opts.max_partitions)
    if columns is not None:
        columns = tuple(columns)
        unknown = set(columns) - set(kafka_schema(opts.include_headers).fieldNames())
        if unknown:
            raise ConfigError(f"map_kafka_arrow: no column(s) {', '.join(sorted(unknown))} in "
                              "Spark's Kafka schema")
    struct = None
    if not opts.commit_group and _classic(spark):
        from .frame import struct_schema

        struct = struct_schema(schema)
    if struct is None:  # Spark's query (the commit watches it; or a schema Spark must judge)
        df = over_task_groups(spark, _FusedArrowTaskGroups(settings, groups, func, columns), schema)
        if opts.commit_group:
            df = commit_after_full_read(spark, df, opts, plan.end, plan.ranges, progress, records=False)
        return df
    from .frame import FusedRead, KafkaArrowFrame

    read = FusedRead(settings, groups, columns)
    return KafkaArrowFrame(spark, read, read_schema(read), func, struct, spark_batches=False)


def _rdd_settings(config: Mapping[str, Any], include_headers: bool, fail_on_data_loss: bool,
                  poll_timeout_ms: int) -> ReadSettings:
    cfg = parse_config(dict(config), role="consumer")
    return ReadSettings(dict(cfg.user), include_headers, fail_on_data_loss, poll_timeout_ms)


def kafka_rdd(sc: SparkContext, config: Mapping[str, Any], offset_ranges: Iterable[OffsetRange | Sequence[Any]], *,
              num_partitions: int | None = None, include_headers: bool = False, fail_on_data_loss: bool = True,
              poll_timeout_ms: int = 120_000) -> RDD[tuple[Any, ...]]:
    """An RDD of the records in ``offset_ranges``.

    ``config`` is a kwire configuration (``{"bootstrap.servers": ...}``); each range is an
    :class:`~kwire.spark.planner.OffsetRange` or a ``(topic, partition, from, until)`` tuple.
    Elements are :class:`~kwire.spark.reader.KafkaRow` tuples (``KafkaRowWithHeaders`` with
    ``include_headers``), which ``spark.createDataFrame(rdd, kafka_schema())`` accepts.

    Each range reads its topic as it is when the RDD is defined: a range without a topic id
    (``OffsetRange.topic_id``, or a fifth tuple element) gets the topic's id now (one Metadata
    request); a task finding the topic recreated -- another id -- reports data loss
    (:class:`~kwire.errors.DataLossError`, or a warning and the range skipped with
    ``fail_on_data_loss=False``), as it does for offsets below the log start or past its end.

    One Spark partition per range, as Spark's Kafka source does; with ``num_partitions``
    (e.g. ``sc.defaultParallelism``) the ranges are packed into at most that many partitions
    of even record counts, each task reading its ranges in turn -- fewer, longer tasks, for
    topics with many small partitions.  Empty ranges are then dropped.
    """
    settings = _rdd_settings(config, include_headers, fail_on_data_loss, poll_timeout_ms)
    ranges = _pin_topic_ids(config, offset_ranges)
    check_executors(sc)
    return _ranges_rdd(sc, ranges, num_partitions).mapPartitions(_GroupReader(settings))


def _pin_topic_ids(config: Mapping[str, Any], offset_ranges: Iterable[OffsetRange | Sequence[Any]]
                   ) -> list[OffsetRange]:
    """The ranges, each with the id its topic has now unless it names one (one Metadata request
    for the topics without): the RDD reads the topics as they are when it is defined."""
    ranges = [_as_range(r) for r in offset_ranges]
    unpinned = {r.topic for r in ranges if r.topic_id is None}
    if not unpinned:
        return ranges
    ids = lookup_topic_ids(config, unpinned)
    return [r if r.topic_id is not None else dataclasses.replace(r, topic_id=ids.get(r.topic)) for r in ranges]


def kafka_arrow_rdd(sc: SparkContext, config: Mapping[str, Any], offset_ranges: Iterable[OffsetRange | Sequence[Any]],
                    *, num_partitions: int | None = None, include_headers: bool = False,
                    fail_on_data_loss: bool = True, poll_timeout_ms: int = 120_000) -> RDD[pa.RecordBatch]:
    """An RDD of ``pyarrow.RecordBatch`` es holding the records in ``offset_ranges``, in the
    Spark Kafka schema (:func:`~kwire.spark.arrow.kafka_arrow_schema`), decoded column-wise
    in the executors without a Python object per record: for jobs that work on Arrow data
    (``pyarrow.compute``, Parquet writers, ``num_rows``) rather than rows.  Arguments as for
    :func:`kafka_rdd`.  Needs pyarrow on the executors.
    """
    settings = _rdd_settings(config, include_headers, fail_on_data_loss, poll_timeout_ms)
    ranges = _pin_topic_ids(config, offset_ranges)
    check_executors(sc)
    return _ranges_rdd(sc, ranges, num_partitions).mapPartitions(_GroupReader(settings, arrow=True))


# --- commitToGroup for batch reads: kwire.spark.commit ----------------------------------------------

def await_commit(df: DataFrame, timeout_s: float | None = None) -> dict[tuple[str, int], int]:
    """Wait for the ``commitToGroup`` commit of a :func:`read_kafka` DataFrame; return the
    committed offsets ``{(topic, partition): offset}``."""
    pending: PendingCommit | None = getattr(df, "kwire_commit", None)
    if pending is None:
        raise KwireError("this DataFrame has no commit pending (was it made by read_kafka with "
                         "commitToGroup?  Derived DataFrames do not carry it)")
    return pending.wait(timeout_s)
