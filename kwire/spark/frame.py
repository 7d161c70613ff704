"""``read_kafka``'s DataFrame: ``mapInArrow`` over it runs the function inside the read tasks.

A plain ``read_kafka(...).select("key", "value").mapInArrow(f, schema)`` is two Python stages:
kwire's read tasks hand their Arrow batches to the JVM, which turns them into rows, projects
them and writes them out again as Arrow for a second Python worker running ``f`` -- a JVM
round trip per record that cost the per-key aggregation of the Spark benchmark about half its
time.  :class:`KafkaDataFrame` is the DataFrame ``read_kafka`` returns on its default path
(``reader="mapInArrow"``, no ``commitToGroup``); it is an ordinary PySpark DataFrame except
for two methods:

* ``select`` with plain column names (or ``"*"``) returns a :class:`KafkaDataFrame` of those
  columns;
* ``mapInArrow(f, schema)`` runs ``f`` in the read tasks, as :func:`~kwire.spark.map_kafka_arrow`
  does, and ``f`` sees what Spark would have handed it: the Arrow types PySpark makes of the
  DataFrame's schema (the session's time zone on ``timestamp``, large binary/string types when
  ``spark.sql.execution.arrow.useLargeVarTypes`` is on), only the selected columns in their
  order, and batches of at most ``spark.sql.execution.arrow.maxRecordsPerBatch`` records and
  ``maxBytesPerBatch`` bytes.  The batches are cut where kwire's fetches end, so ``f`` may see
  shorter batches than Spark would give it (Spark fills each one); ``mapInArrow`` promises no
  batch size.

Everything else -- a ``filter``, a ``select`` of expressions, ``withColumn``, a cached or
persisted DataFrame, ``mapInArrow(..., barrier=True)`` or with a resource profile -- is
PySpark's own, and ``mapInArrow`` after it is Spark's two-stage one (the same answer, slower).
The fused DataFrame reads Kafka when an action runs, exactly like the unfused one: the planned
ranges are fixed at ``read_kafka``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from .arrow import ArrowBatchLayout
from .reader import ReadSettings

if TYPE_CHECKING:
    from pyspark.resource import ResourceProfile
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from .dataframe import ArrowFunction
    from .planner import OffsetRange

__all__ = ["KafkaDataFrame", "FusedRead"]


@dataclasses.dataclass(frozen=True)
class FusedRead:
    """What a fused ``mapInArrow`` needs to read the DataFrame's records in its own tasks."""

    settings: ReadSettings
    groups: list[list[OffsetRange]]
    columns: tuple[str, ...] | None = None  # the selected columns, in order; None: all


class KafkaDataFrame(ClassicDataFrame):
    """The DataFrame of :func:`~kwire.spark.read_kafka`'s default path: ``mapInArrow`` over it
    (after a ``select`` of column names, or directly) runs in the read tasks (see the module)."""

    _kwire_read: FusedRead

    def __init__(self, df: DataFrame, read: FusedRead):
        super().__init__(df._jdf, df.sparkSession)
        self._kwire_read = read

    def _fusing(self) -> bool:
        """Whether this DataFrame's steps may run in its own read tasks: not when Spark has it
        cached (Spark then reads the cache, not Kafka)."""
        if self.is_cached:
            return False
        level = self.storageLevel
        return not (level.useMemory or level.useDisk or level.useOffHeap)

    def select(self, *cols: Any) -> DataFrame:
        names = _plain_names(cols, self.columns)
        if names is None or not self._fusing():
            return super().select(*cols)
        from .dataframe import kafka_frame

        return kafka_frame(self.sparkSession, dataclasses.replace(self._kwire_read, columns=names))

    def count(self) -> int:
        if not self._fusing():
            return super().count()
        from .dataframe import count_read

        return count_read(self.sparkSession, self._kwire_read)

    def mapInArrow(self, func: ArrowFunction, schema: StructType | str,  # noqa: N802 - PySpark's name
                   barrier: bool = False, profile: ResourceProfile | None = None) -> DataFrame:
        if barrier or profile is not None or not self._fusing():
            return super().mapInArrow(func, schema, barrier, profile)
        from .dataframe import fused_map_in_arrow

        return fused_map_in_arrow(self.sparkSession, self._kwire_read, func, schema,
                                  arrow_batch_layout(self.sparkSession, self.schema))


def _plain_names(cols: Sequence[Any], columns: list[str]) -> tuple[str, ...] | None:
    """The selected column names when ``cols`` are plain names of ``columns`` (or ``"*"``),
    each at most once; else None (expressions, Column objects, unknown names)."""
    if len(cols) == 1 and isinstance(cols[0], (list, tuple)):
        cols = cols[0]
    names: list[str] = []
    for c in cols:
        if not isinstance(c, str):
            return None
        names.extend(columns if c == "*" else [c])
    if not names or len(set(names)) != len(names) or not set(names) <= set(columns):
        return None
    return tuple(names)


def arrow_batch_layout(spark: SparkSession, schema: StructType) -> ArrowBatchLayout:
    """The layout PySpark's Arrow workers use for ``schema`` in this session (its confs)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    def conf(name: str, default: str) -> str:
        # without a default: given one, RuntimeConfig.get returns it for an unset conf, not
        # Spark's own default (spark.sql.session.timeZone is the JVM's zone unless set)
        try:
            value = spark.conf.get(name)
        except Exception:  # a conf this Spark does not know
            return default
        return default if value is None else str(value)

    timezone = conf("spark.sql.session.timeZone", "UTC")
    large = conf("spark.sql.execution.arrow.useLargeVarTypes", "false").strip().lower() == "true"
    max_records = int(conf("spark.sql.execution.arrow.maxRecordsPerBatch", "10000"))
    # a byte size ("64m"; the JVM gives it back as "67108864b"), read as Spark reads it
    max_bytes_text = conf("spark.sql.execution.arrow.maxBytesPerBatch", "")
    jvm: Any = spark.sparkContext._jvm
    max_bytes = int(jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(max_bytes_text)) if max_bytes_text else 0
    arrow = to_arrow_schema(schema, timezone=timezone, prefers_large_types=large)
    # PySpark's to_arrow_schema puts UTC on every timestamp; the JVM writes the session's zone
    # (Spark's ArrowUtils), and that is what a mapInArrow function sees
    arrow = pa.schema([pa.field(f.name, pa.timestamp(f.type.unit, tz=timezone), f.nullable, f.metadata)
                       if pa.types.is_timestamp(f.type) and f.type.tz is not None else f for f in arrow],
                      metadata=arrow.metadata)
    return ArrowBatchLayout(
        arrow,
        max_records if max_records > 0 else None,
        max_bytes if max_bytes > 0 else None)
