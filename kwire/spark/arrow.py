"""Decoded record columns -> ``pyarrow.RecordBatch`` in Spark's Kafka source schema.

``decode_columns`` (kwire's record layer) already lays a record set out as contiguous column
buffers; the record layer's Arrow builder (:func:`kwire.records.to_arrow`) makes them Arrow
arrays without copying the key and value bytes.  This module says what Spark wants of it:

=================  ==========================================  ===============================
column             Arrow type                                  built from
=================  ==========================================  ===============================
key, value         binary                                      offsets + data (+ validity)
topic              string                                      one value repeated
partition          int32                                       one value repeated
offset             int64                                       offset column
timestamp          timestamp[us, tz=UTC]                       timestamp (ms) * 1000
timestampType      int32                                       timestamp_type (int8)
headers            list<element: struct<key: string,           header offsets; key / value
                   value: binary>>                             offsets + data (+ validity)
=================  ==========================================  ===============================

The types are exactly what PySpark's ``to_arrow_schema`` makes of the Spark schema (Spark checks
``equals``), which the tests assert.  Records outside ``[lo, until)`` are sliced away (offsets
only grow within a partition, so that is one binary search per end).  Header keys are
passed to Spark as the codec decoded them, without a UTF-8 check.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from ..records import to_arrow

__all__ = ["kafka_arrow_schema", "to_record_batch", "ArrowBatchLayout"]

_HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_HEADERS = pa.list_(pa.field("element", _HEADER_STRUCT))
_TIMESTAMP = pa.timestamp("us", tz="UTC")


def kafka_arrow_schema(include_headers: bool = False) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()),
        pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()), pa.field("timestamp", _TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _HEADERS))
    return pa.schema(fields)


def to_record_batch(cols: dict[str, Any], topic: str, partition: int, lo: int, until: int,
                    schema: pa.Schema) -> pa.RecordBatch | None:
    """The records of ``cols`` with offsets in ``[lo, until)`` in ``schema`` (None if there are
    none), built by the record layer's one Arrow builder, :func:`kwire.records.to_arrow`."""
    batch = to_arrow(cols, topic=topic, partition=partition, lo=lo, until=until, schema=schema)
    return batch if batch.num_rows else None


@dataclasses.dataclass(frozen=True)
class ArrowBatchLayout:
    """The Arrow batches Spark would hand a ``mapInArrow`` function over a DataFrame: their
    schema and the most records and bytes one holds (None: no limit)."""

    schema: pa.Schema
    max_records: int | None
    max_bytes: int | None

    def cut(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` in this layout's types, none longer than its limits (slices: no copy
        of the records' bytes; a cast only where a type differs, e.g. the time zone)."""
        cast = None
        for b in batches:
            if cast is None:
                cast = not b.schema.equals(self.schema)
            if cast:
                b = b.cast(self.schema)
            rows = b.num_rows
            step = rows
            if self.max_records is not None:
                step = min(step, self.max_records)
            if self.max_bytes is not None and rows:
                nbytes = b.nbytes
                if nbytes > self.max_bytes:
                    step = min(step, max(1, rows * self.max_bytes // nbytes))
            if step >= rows:
                yield b
                continue
            for start in range(0, rows, step):
                yield b.slice(start, step)
