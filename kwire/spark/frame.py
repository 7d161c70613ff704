"""``read_kafka``'s DataFrame: ``select``, ``count`` and ``mapInArrow`` run in the read tasks.

``read_kafka`` reads in a ``mapInArrow`` over ``spark.range``, and Spark can see neither into
nor past a Python function: a ``select`` above it still makes the read tasks send every column
to the JVM, a ``count()`` turns every record into a JVM row to count it, and
``select("key", "value").mapInArrow(f, schema)`` is two Python stages -- the read tasks hand
their Arrow batches to the JVM, which makes rows of them and Arrow again for a second Python
worker running ``f`` (about half the time of the Spark benchmark's per-key aggregation).

:class:`KafkaDataFrame` is the DataFrame ``read_kafka`` returns on its default path
(``reader="mapInArrow"``, no ``commitToGroup``): an ordinary PySpark DataFrame except that

* ``select`` of plain column names (or ``"*"``) is a :class:`KafkaDataFrame` whose Java side
  is Spark's own projection (its columns stay the parent's: ``df.select("key").filter(df.key
  ...)`` resolves), while what kwire runs over it reads only those columns;
* ``count()`` counts in the read tasks (one row per task reaches the JVM);
* ``mapInArrow(f, schema)`` runs ``f`` in the read tasks, as
  :func:`~kwire.spark.map_kafka_arrow` does, handing it what Spark would: the Arrow types
  Spark's JVM writes for the DataFrame's schema (the session's time zone on ``timestamp``,
  large binary/string types with ``spark.sql.execution.arrow.useLargeVarTypes``), only the
  selected columns in their order, batches of at most
  ``spark.sql.execution.arrow.maxRecordsPerBatch`` records and ``maxBytesPerBatch`` bytes.
  They are cut where kwire's fetches end, so ``f`` may see a shorter batch where Spark would
  have filled one; ``mapInArrow`` promises no batch size either way.  The confs are read when
  an action runs (as Spark reads them), not when ``mapInArrow`` is called.

Everything else -- ``filter``, ``select`` of expressions or ``Column`` objects, ``withColumn``,
``mapInArrow(..., barrier=True)`` or with a resource profile -- is PySpark's own, and what
follows it is Spark's (the same answers, Spark's cost).  A cached or persisted DataFrame keeps
Spark's ``select``, ``count`` and ``mapInArrow`` too, so they read the cache, not Kafka; a
``select`` made *before* ``cache()`` is a read of its own and reads Kafka.  Every read is of
the ranges planned at ``read_kafka`` (the same records each time, as before).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from .arrow import ArrowBatchLayout
from .reader import ReadSettings

if TYPE_CHECKING:
    from pyspark.resource import ResourceProfile
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.types import StructType

    from .dataframe import ArrowFunction
    from .planner import OffsetRange

__all__ = ["KafkaDataFrame", "KafkaArrowFrame", "FusedRead"]


@dataclasses.dataclass(frozen=True)
class FusedRead:
    """What a fused ``mapInArrow`` needs to read the DataFrame's records in its own tasks."""

    settings: ReadSettings
    groups: list[list[OffsetRange]]
    columns: tuple[str, ...] | None = None  # the selected columns, in order; None: all


class _LazyJava(ClassicDataFrame):
    """A DataFrame whose Java side (``_jdf``) is made the first time something needs it, by
    :meth:`_kwire_make`: the actions kwire runs itself (as a Python RDD job) never make it, so
    a cold job that only counts or collects pays neither Spark SQL's first query nor its Arrow
    workers."""

    def __init__(self, spark: SparkSession):
        super().__init__(None, spark)  # the Java side (_jdf) is made when needed

    def _kwire_make(self) -> DataFrame:
        raise NotImplementedError

    @property
    def _jdf(self) -> Any:
        jdf = self.__dict__.get("_kwire_jdf")
        if jdf is None:
            jdf = self.__dict__["_kwire_jdf"] = self._kwire_make()._jdf
        return jdf

    @_jdf.setter
    def _jdf(self, jdf: Any) -> None:
        self.__dict__["_kwire_jdf"] = jdf

    def _fusing(self) -> bool:
        """Whether kwire may run this DataFrame's steps itself: not when Spark has it cached
        (Spark then reads the cache, not Kafka)."""
        if self.is_cached:
            return False
        if self.__dict__.get("_kwire_jdf") is None:
            return True  # no Java side yet: nothing of it can be cached
        level = self.storageLevel
        return not (level.useMemory or level.useDisk or level.useOffHeap)


class KafkaDataFrame(_LazyJava):
    """The DataFrame of :func:`~kwire.spark.read_kafka`'s default path: ``select`` of column
    names, ``count()`` and ``mapInArrow`` run in the read tasks (see the module)."""

    _kwire_read: FusedRead

    def __init__(self, spark: SparkSession, read: FusedRead, selected_from: tuple[KafkaDataFrame, tuple[Any, ...]]
                 | None = None):
        self._kwire_read = read
        self._kwire_selected_from = selected_from  # (parent, the select's arguments)
        super().__init__(spark)

    def _kwire_make(self) -> DataFrame:
        if self._kwire_selected_from is not None:
            # Spark's own projection of the parent's read: the columns keep the parent's
            # attributes, so df.select("key").filter(df.key ...) resolves as in Spark
            parent, cols = self._kwire_selected_from
            return ClassicDataFrame.select(parent, *cols)
        from .dataframe import read_frame

        return read_frame(self.sparkSession, self._kwire_read)

    def _kwire_schema(self) -> StructType:
        from .dataframe import read_schema

        return read_schema(self._kwire_read)

    def select(self, *cols: Any) -> DataFrame:
        names = _plain_names(cols, self._kwire_schema().fieldNames())
        if names is None or not self._fusing():
            return super().select(*cols)
        return KafkaDataFrame(self.sparkSession, dataclasses.replace(self._kwire_read, columns=names), (self, cols))

    def count(self) -> int:
        if not self._fusing():
            return super().count()
        from .dataframe import count_read

        return count_read(self.sparkSession, self._kwire_read)

    def mapInArrow(self, func: ArrowFunction, schema: StructType | str,  # noqa: N802 - PySpark's name
                   barrier: bool = False, profile: ResourceProfile | None = None) -> DataFrame:
        struct = None if barrier or profile is not None or not self._fusing() else struct_schema(schema)
        if struct is None:
            return super().mapInArrow(func, schema, barrier, profile)
        return KafkaArrowFrame(self.sparkSession, self._kwire_read, self._kwire_schema(), func, struct)


class KafkaArrowFrame(_LazyJava):
    """``mapInArrow(func, schema)`` over a :class:`KafkaDataFrame`: ``func`` runs in the read
    tasks.  ``collect()`` of a schema of plain columns (integers, floats, booleans, strings,
    binary) is a Python RDD job that brings ``func``'s Arrow batches to the driver and makes
    the same rows Spark's ``collect`` makes; batches whose types are not the schema's hand the
    job to Spark's own ``collect`` (which then runs ``func`` again, and fails as Spark does)."""

    def __init__(self, spark: SparkSession, read: FusedRead, read_schema: StructType, func: ArrowFunction,
                 schema: StructType, *, spark_batches: bool = True):
        self._kwire_read = read
        self._kwire_read_schema = read_schema
        self._kwire_func = func
        self._kwire_declared = schema
        self._kwire_spark_batches = spark_batches  # False: kwire's own batches (map_kafka_arrow)
        super().__init__(spark)

    def _kwire_task(self) -> Any:
        """The read tasks, handing ``func`` the batches as the session's confs say now (Spark
        reads them when a query runs, not when it is defined), or as kwire reads them."""
        from .dataframe import fused_task

        layout = arrow_batch_layout(self.sparkSession, self._kwire_read_schema) if self._kwire_spark_batches else None
        return fused_task(self._kwire_read, self._kwire_func, layout)

    def _kwire_make(self) -> DataFrame:
        from .dataframe import over_task_groups

        return over_task_groups(self.sparkSession, self._kwire_task(), self._kwire_declared)

    def collect(self) -> list[Row]:
        if self._fusing():
            from .dataframe import collect_in_tasks

            rows = collect_in_tasks(self.sparkSession, self._kwire_task(), self._kwire_declared)
            if rows is not None:
                return rows
        return super().collect()



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


# DDL type names of the plain columns (Spark's names and synonyms), for plain_ddl_struct
_PLAIN_DDL_TYPES = {
    "long": "LongType", "bigint": "LongType", "int": "IntegerType", "integer": "IntegerType",
    "short": "ShortType", "smallint": "ShortType", "byte": "ByteType", "tinyint": "ByteType",
    "double": "DoubleType", "float": "FloatType", "real": "FloatType", "boolean": "BooleanType",
    "string": "StringType", "binary": "BinaryType"}
_DDL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def plain_ddl_struct(ddl: str) -> StructType | None:
    """The StructType of a DDL string of plain columns (``"key binary, n long"``: names of
    letters, digits and underscores, types of :data:`_PLAIN_DDL_TYPES`), without asking
    Spark's parser -- its first use in a JVM takes a quarter of a second; None for anything
    else (Spark's parser reads that)."""
    from pyspark.sql import types as T

    fields = []
    for part in ddl.split(","):
        words = part.split()
        if len(words) != 2 or not _DDL_NAME.match(words[0]):
            return None
        name, kind = words[0], _PLAIN_DDL_TYPES.get(words[1].lower())
        if kind is None:
            return None
        fields.append(T.StructField(name, getattr(T, kind)(), True))
    if not fields or len({f.name.lower() for f in fields}) != len(fields):
        return None
    return T.StructType(fields)


def struct_schema(schema: StructType | str) -> StructType | None:
    """``schema`` as a StructType, a DDL string parsed now (as Spark's ``mapInArrow`` parses
    it: a bad one raises here); None when it is not a struct -- Spark's own ``mapInArrow``
    then refuses it with its own error."""
    from pyspark.sql.types import StructType

    if not isinstance(schema, str):
        return schema if isinstance(schema, StructType) else None
    parsed = plain_ddl_struct(schema) or StructType.fromDDL(schema)  # (Spark's parser: a JVM call)
    return parsed if isinstance(parsed, StructType) else None
