"""Decoded record columns -> ``pyarrow.RecordBatch`` in Spark's Kafka source schema.

``decode_columns`` (kwire's record layer) already lays a record set out as contiguous column
buffers; here they become Arrow arrays without copying the key and value bytes:

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
only grow within a partition, so that is one binary search per end).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

__all__ = ["kafka_arrow_schema", "to_record_batch", "columns_from_records"]

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


def _validity(valid_col, n: int):
    """(bitmap buffer or None, null count) from a one-byte-per-row validity column."""
    valid = np.frombuffer(valid_col, dtype=np.bool_, count=n)
    nulls = n - int(np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _variable(type_, n: int, offsets, data, valid=None):
    bitmap, nulls = (None, 0) if valid is None else _validity(valid, n)
    return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def to_record_batch(cols: dict, topic: str, partition: int, lo: int, until: int,
                    schema: pa.Schema, include_headers: bool) -> pa.RecordBatch | None:
    """The records of ``cols`` with offsets in ``[lo, until)`` (None if there are none)."""
    n = cols["num_records"]
    if n == 0:
        return None
    offsets = np.frombuffer(cols["offset"], dtype=np.int64, count=n)
    first = int(np.searchsorted(offsets, lo, "left"))
    stop = int(np.searchsorted(offsets, until, "left"))
    m = stop - first
    if m <= 0:
        return None
    key = _variable(pa.binary(), n, cols["key_offsets"], cols["key_data"], cols["key_valid"])
    value = _variable(pa.binary(), n, cols["value_offsets"], cols["value_data"], cols["value_valid"])
    ts = np.frombuffer(cols["timestamp"], dtype=np.int64, count=n)[first:stop] * 1000
    ts_type = np.frombuffer(cols["timestamp_type"], dtype=np.int8, count=n)[first:stop].astype(np.int32)
    arrays = [
        key.slice(first, m), value.slice(first, m),
        pa.repeat(pa.scalar(topic, pa.string()), m),
        pa.repeat(pa.scalar(partition, pa.int32()), m),
        pa.array(offsets[first:stop], pa.int64()),
        pa.Array.from_buffers(_TIMESTAMP, m, [None, pa.py_buffer(ts)]),
        pa.array(ts_type, pa.int32()),
    ]
    if include_headers:
        header_offsets = np.frombuffer(cols["header_offsets"], dtype=np.int32, count=n + 1)
        h = int(header_offsets[-1])
        hkeys = _variable(pa.string(), h, cols["header_key_offsets"], cols["header_key_data"])
        hvalues = _variable(pa.binary(), h, cols["header_value_offsets"], cols["header_value_data"],
                            cols["header_value_valid"])
        structs = pa.StructArray.from_arrays([hkeys, hvalues], fields=list(_HEADER_STRUCT))
        headers = pa.ListArray.from_arrays(pa.array(header_offsets, pa.int32()), structs, type=_HEADERS)
        arrays.append(headers.slice(first, m))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def columns_from_records(records: Iterable) -> dict:
    """The ``decode_columns`` layout built from Record objects (for a codec without it)."""
    offs, tss, tst = [], [], []
    kd, ko, kv = bytearray(), [0], []
    vd, vo, vv = bytearray(), [0], []
    ho, hkd, hko, hvd, hvo, hvv = [0], bytearray(), [0], bytearray(), [0], []
    for r in records:
        offs.append(r.offset)
        tss.append(r.timestamp)
        tst.append(r.timestamp_type)
        kv.append(r.key is not None)
        kd += r.key or b""
        ko.append(len(kd))
        vv.append(r.value is not None)
        vd += r.value or b""
        vo.append(len(vd))
        for k, v in r.headers:
            hkd += k.encode()
            hko.append(len(hkd))
            hvv.append(v is not None)
            hvd += v or b""
            hvo.append(len(hvd))
        ho.append(len(hko) - 1)
    return {
        "num_records": len(offs),
        "offset": np.array(offs, np.int64), "timestamp": np.array(tss, np.int64),
        "timestamp_type": np.array(tst, np.int8),
        "key_offsets": np.array(ko, np.int32), "key_valid": np.array(kv, np.bool_), "key_data": bytes(kd),
        "value_offsets": np.array(vo, np.int32), "value_valid": np.array(vv, np.bool_),
        "value_data": bytes(vd), "header_offsets": np.array(ho, np.int32),
        "header_key_offsets": np.array(hko, np.int32), "header_key_data": bytes(hkd),
        "header_value_offsets": np.array(hvo, np.int32), "header_value_data": bytes(hvd),
        "header_value_valid": np.array(hvv, np.bool_),
    }
