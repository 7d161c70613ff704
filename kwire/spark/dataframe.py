"""``read_kafka`` (DataFrame), ``kafka_rdd`` and ``kafka_arrow_rdd`` (RDDs): Kafka into PySpark
without a Data Source.

:func:`read_kafka` plans on the driver, then hands the planned ranges to the "kwire" Data Source
(or, on request or without the Data Source API, to ``mapInArrow``), whose executors decode Fetch
answers straight into Arrow record batches; without pyarrow it falls back to the row path
through an RDD.  With ``commitToGroup`` the
DataFrame carries a :class:`PendingCommit`: once the first Spark action over it succeeds (a
``pyspark.sql.Observation`` on the DataFrame tells), the driver commits the planned end
offsets to the group.

:func:`kafka_rdd` reads ranges you planned yourself and yields :class:`~kwire.spark.reader.KafkaRow`
tuples; :func:`kafka_arrow_rdd` yields ``pyarrow.RecordBatch`` es of the same ranges (no
per-record Python object).  Both take ``num_partitions`` to pack many small ranges into fewer
tasks (:func:`~kwire.spark.planner.pack_ranges`).
"""
from __future__ import annotations

import importlib.util
import json
import logging
import threading
import uuid
from typing import Any, Iterable, Mapping

from ..config import parse_config
from ..errors import ConfigError, KafkaTimeoutError, KwireError
from .offset_reader import OffsetReader
from .options import SourceOptions, parse_options
from .planner import OffsetRange, task_groups
from .reader import ReadSettings, _as_range, read_range_arrow, read_range_rows
from .schema import kafka_schema

__all__ = ["read_kafka", "kafka_rdd", "kafka_arrow_rdd", "await_commit", "PendingCommit"]

_log = logging.getLogger("kwire.spark")

_RANGES_SCHEMA = "topic string, partition int, from_offset long, until_offset long"


class _ArrowRanges:
    """The ``mapInArrow`` function: each input row is a range to read (runs on executors)."""

    def __init__(self, settings: ReadSettings):
        self.settings = settings

    def __call__(self, batches):
        from .arrow import kafka_arrow_schema

        schema = kafka_arrow_schema(self.settings.include_headers)
        for batch in batches:
            for row in batch.to_pylist():
                r = (row["topic"], row["partition"], row["from_offset"], row["until_offset"])
                yield from read_range_arrow(self.settings, r, schema)


class _GroupReader:
    """The ``mapPartitions`` function of :func:`kafka_rdd` (rows) and :func:`kafka_arrow_rdd`
    (Arrow batches): each element is a group of ranges one task reads in turn (runs on
    executors)."""

    def __init__(self, settings: ReadSettings, arrow: bool = False):
        self.settings = settings
        self.arrow = arrow

    def __call__(self, groups):
        if self.arrow:
            from .arrow import kafka_arrow_schema

            schema = kafka_arrow_schema(self.settings.include_headers)
            read = lambda r: read_range_arrow(self.settings, r, schema)  # noqa: E731
        else:
            read = lambda r: read_range_rows(self.settings, r)  # noqa: E731
        for group in groups:
            for r in group:
                yield from read(r)


def _ranges_rdd(sc, ranges: list[OffsetRange], num_partitions: int | None):
    """An RDD with one element per task: the list of ranges that task reads."""
    if num_partitions is not None and (isinstance(num_partitions, bool) or not isinstance(num_partitions, int)
                                       or num_partitions < 1):
        raise ConfigError(f"num_partitions must be a whole number of at least 1 (or None), "
                          f"not {num_partitions!r}")
    groups = task_groups(ranges, num_partitions)
    return sc.parallelize(groups, max(1, len(groups)))


def _range_rows(group: list[OffsetRange]) -> list[tuple]:
    return [(r.topic, r.partition, r.from_offset, r.until_offset) for r in group]


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


def _data_source_available(spark) -> bool:
    return hasattr(spark, "dataSource") and _have("pyarrow")  # the Python Data Source API (Spark 4)


def read_kafka(spark, *, reader: str = "auto", **options: Any):
    """A DataFrame of the records the options select (Spark's Kafka source options; see
    :mod:`kwire.spark.options`), in Spark's Kafka schema.

    Planning happens now, on the driver: an unknown option, malformed JSON, a missing topic or
    an unreachable cluster raise here, before any task runs.

    ``reader`` picks how executors hand the records to Spark: ``"datasource"`` (the "kwire"
    Python Data Source, reading the ranges planned here; Arrow batches), ``"mapInArrow"``
    (a DataFrame of the ranges, mapped to Arrow batches; needs pandas installed), ``"rows"``
    (an RDD of row tuples, no pyarrow needed), or ``"auto"``: the first of these that is
    available, in that order (the Data Source is the fastest: it skips the ranges DataFrame).
    """
    if reader not in _READERS:
        raise ConfigError(f"read_kafka: reader must be one of {', '.join(_READERS)}, not {reader!r}")
    opts = parse_options(options, streaming=False)
    if reader == "auto":
        reader = ("datasource" if _data_source_available(spark)
                  else "mapInArrow" if _have("pyarrow") and _have("pandas") else "rows")
    with OffsetReader(opts) as offsets:
        plan, _ = offsets.plan_batch()
    settings = ReadSettings.from_options(opts)
    schema = kafka_schema(opts.include_headers)
    sc = spark.sparkContext
    if reader == "datasource":
        from .datasource import PLANNED_RANGES_OPTION, KwireDataSource

        spark.dataSource.register(KwireDataSource)
        source = spark.read.format("kwire")
        for k, v in options.items():  # what reading the planned ranges needs
            if k.lower() not in _PLANNING_ONLY and v is not None:
                source = source.option(k, _option_text(v))
        rows = [(r.topic, r.partition, r.from_offset, r.until_offset) for r in plan.ranges]
        df = source.option(PLANNED_RANGES_OPTION, json.dumps(rows)).load()
    elif reader == "mapInArrow":
        # a Spark partition per task group: the rows of group i land in partition i
        tasks = _ranges_rdd(sc, plan.ranges, opts.max_partitions).flatMap(_range_rows)
        ranges = spark.createDataFrame(tasks, _RANGES_SCHEMA)
        df = ranges.mapInArrow(_ArrowRanges(settings), schema)
    else:
        rdd = _ranges_rdd(sc, plan.ranges, opts.max_partitions).mapPartitions(_GroupReader(settings))
        df = spark.createDataFrame(rdd, schema)
    if opts.commit_group:
        df = _commit_after_first_action(df, opts, plan.end,
                                        nothing_to_read=not any(r.until_offset > r.from_offset for r in plan.ranges))
    return df


def _rdd_settings(config: Mapping[str, Any], include_headers: bool, fail_on_data_loss: bool,
                  poll_timeout_ms: int) -> ReadSettings:
    cfg = parse_config(dict(config), role="consumer")
    return ReadSettings(dict(cfg.user), include_headers, fail_on_data_loss, poll_timeout_ms)


def kafka_rdd(sc, config: Mapping[str, Any], offset_ranges: Iterable, *, num_partitions: int | None = None,
              include_headers: bool = False, fail_on_data_loss: bool = True, poll_timeout_ms: int = 120_000):
    """An RDD of the records in ``offset_ranges``.

    ``config`` is a kwire configuration (``{"bootstrap.servers": ...}``); each range is an
    :class:`~kwire.spark.planner.OffsetRange` or a ``(topic, partition, from, until)`` tuple.
    Elements are :class:`~kwire.spark.reader.KafkaRow` tuples (``KafkaRowWithHeaders`` with
    ``include_headers``), which ``spark.createDataFrame(rdd, kafka_schema())`` accepts.

    One Spark partition per range, as Spark's Kafka source does; with ``num_partitions``
    (e.g. ``sc.defaultParallelism``) the ranges are packed into at most that many partitions
    of even record counts, each task reading its ranges in turn -- fewer, longer tasks, for
    topics with many small partitions.  Empty ranges are then dropped.
    """
    settings = _rdd_settings(config, include_headers, fail_on_data_loss, poll_timeout_ms)
    ranges = [_as_range(r) for r in offset_ranges]
    return _ranges_rdd(sc, ranges, num_partitions).mapPartitions(_GroupReader(settings))


def kafka_arrow_rdd(sc, config: Mapping[str, Any], offset_ranges: Iterable, *, num_partitions: int | None = None,
                    include_headers: bool = False, fail_on_data_loss: bool = True, poll_timeout_ms: int = 120_000):
    """An RDD of ``pyarrow.RecordBatch`` es holding the records in ``offset_ranges``, in the
    Spark Kafka schema (:func:`~kwire.spark.arrow.kafka_arrow_schema`), decoded column-wise
    in the executors without a Python object per record: for jobs that work on Arrow data
    (``pyarrow.compute``, Parquet writers, ``num_rows``) rather than rows.  Arguments as for
    :func:`kafka_rdd`.  Needs pyarrow on the executors.
    """
    settings = _rdd_settings(config, include_headers, fail_on_data_loss, poll_timeout_ms)
    ranges = [_as_range(r) for r in offset_ranges]
    return _ranges_rdd(sc, ranges, num_partitions).mapPartitions(_GroupReader(settings, arrow=True))


# --- commitToGroup for batch reads --------------------------------------------------------------

class PendingCommit:
    """The ``commitToGroup`` commit of a :func:`read_kafka` DataFrame (``df.kwire_commit``).

    A driver thread waits for the DataFrame's first successful action, then commits
    ``offsets`` to ``group``.  :meth:`wait` returns what was committed, or raises why not.
    """

    def __init__(self, options: SourceOptions, offsets: Mapping[tuple[str, int], int], observation):
        self.options = options
        self.group = options.commit_group
        self.offsets = dict(offsets)
        self.committed: dict | None = None
        self.error: BaseException | None = None
        self._observation = observation
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kwire-commit-{self.group}", daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _run(self) -> None:
        # With nothing planned there is no job that could fail (and Spark reports no metrics
        # for an empty plan), so the end offsets -- which equal the start -- are committed now.
        if self._observation is not None:
            try:
                self._observation.get  # blocks until an action over the DataFrame has succeeded
            except Exception as exc:  # e.g. the session stopped before any action
                self.error = exc
                self._done.set()
                return
        try:
            with OffsetReader(self.options) as offsets:
                offsets.commit(self.group, self.offsets)
            self.committed = dict(self.offsets)
            _log.info("kwire.spark: committed %s to group %r", self.offsets, self.group)
        except BaseException as exc:
            self.error = exc
            _log.error("kwire.spark: committing to group %r failed: %s", self.group, exc)
        finally:
            self._done.set()

    def wait(self, timeout_s: float | None = None) -> dict:
        if not self._done.wait(timeout_s):
            raise KafkaTimeoutError(f"the commit to group {self.group!r} has not happened within "
                                    f"{timeout_s} s (it waits for the DataFrame's first action)")
        if self.error is not None:
            raise self.error
        return dict(self.committed or {})


def _commit_after_first_action(df, options: SourceOptions, end: Mapping, nothing_to_read: bool = False):
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    if nothing_to_read:
        df.kwire_commit = PendingCommit(options, end, None)
        return df

    observation = Observation(f"kwire-commit-{uuid.uuid4().hex}")
    observed = df.observe(observation, F.count(F.lit(1)).alias("records"))
    observed.kwire_commit = PendingCommit(options, end, observation)
    return observed


def await_commit(df, timeout_s: float | None = None) -> dict:
    """Wait for the ``commitToGroup`` commit of a :func:`read_kafka` DataFrame; return the
    committed offsets ``{(topic, partition): offset}``."""
    pending = getattr(df, "kwire_commit", None)
    if pending is None:
        raise KwireError("this DataFrame has no commit pending (was it made by read_kafka with "
                         "commitToGroup?  Derived DataFrames do not carry it)")
    return pending.wait(timeout_s)
