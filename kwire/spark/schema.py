"""The schema of a Kafka DataFrame, as Spark's Kafka source defines it.

=============  ============================================  ====================================
column         type                                          value
=============  ============================================  ====================================
key            binary                                        the record key (null: none)
value          binary                                        the record value (null: tombstone)
topic          string
partition      int
offset         long
timestamp      timestamp                                     record (or log-append) time, UTC
timestampType  int                                           0 create time, 1 log append, -1 none
headers        array<struct<key: string, value: binary>>     only with includeHeaders=true
=============  ============================================  ====================================
"""
from __future__ import annotations

from typing import Any

__all__ = ["kafka_schema_ddl", "kafka_schema", "COLUMNS"]

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")

_DDL = ("key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int")
_HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"


def kafka_schema_ddl(include_headers: bool = False) -> str:
    return _DDL + (_HEADERS_DDL if include_headers else "")


def kafka_schema(include_headers: bool = False) -> Any:
    """The schema as a ``pyspark.sql.types.StructType``."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("offset", LongType()), StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)
