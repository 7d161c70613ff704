"""Kafka record batches: decode a Fetch response's record set, build batches, and columns.

    from kwire import records
    for rec in records.iter_records(data, topic="orders", partition=3):
        rec.offset, rec.timestamp, rec.key, rec.value, rec.headers
    for batch in records.iter_batches(data):       # control batches, producer ids, ...
        ...
    cols = records.decode_columns(data)            # no per-record Python objects
    table = records.to_arrow(cols)                 # zero-copy pyarrow.RecordBatch

Magic 2 record batches and legacy magic 0/1 message sets, with gzip, snappy (raw and
xerial), lz4 and zstd.  A truncated entry at the end of ``data`` is skipped (Fetch responses
are cut at max bytes); malformed data raises :class:`kwire.errors.CorruptRecordError`.

The implementation is the compiled ``kwire._codec`` unless ``KWIRE_PURE=1`` selects the
pure-Python twin ``kwire._pycodec`` (see :mod:`kwire._impl`).  The compiled codec decompresses
lz4 and zstd with the native liblz4/libzstd (GIL released; ``NATIVE_DECOMPRESSION`` names the
codecs it found, ``KWIRE_NATIVE_DECOMPRESSION=0`` turns them off) and, when a buffer holds
several compressed batches, on a worker thread that runs ahead of the decoding.

Integrity comes from the batch CRC (``check_crc=True``, the default).  With it switched off a
damaged batch can decode to wrong bytes instead of raising, like any unchecked data; for zstd
frames without a checksum, how much damage the decompressor itself notices depends on the
libzstd version (Debian 12's 1.5.4 notices less than the newer copy inside cramjam).
"""
from __future__ import annotations

from ._impl import IMPLEMENTATION, codec_module

__all__ = [
    "IMPLEMENTATION", "NATIVE_DECOMPRESSION", "Record", "RecordBatch", "iter_records", "iter_batches", "build_batch",
    "decode_columns", "to_arrow",
]

_codec = codec_module()

Record = _codec.Record
RecordBatch = _codec.RecordBatch
iter_records = _codec.iter_records
iter_batches = _codec.iter_batches
build_batch = _codec.build_batch
decode_columns = _codec.decode_columns
NATIVE_DECOMPRESSION: tuple = getattr(_codec, "NATIVE_DECOMPRESSION", ())


def _validity(pa, np, valid, n):
    """(Arrow validity bitmap or None, null count) from a per-row bool column."""
    mask = np.asarray(valid, dtype=np.bool_)
    if len(mask) != n:
        raise ValueError("validity column has the wrong length")
    nulls = n - int(np.count_nonzero(mask))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(mask, bitorder="little")), nulls


def _binary(pa, np, typ, n, offsets, data, valid):
    bitmap, nulls = _validity(pa, np, valid, n) if valid is not None else (None, 0)
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def to_arrow(columns, *, topic=None, partition=None):
    """A ``pyarrow.RecordBatch`` over the buffers of :func:`decode_columns` (no copies of the
    key/value data).

    Columns: ``offset`` int64, ``timestamp`` timestamp[ms, UTC], ``timestamp_type`` int8,
    ``key``/``value`` binary, ``headers`` list<struct<key: string, value: binary>> (header
    keys fall back to binary if they are not valid UTF-8), and ``topic`` string /
    ``partition`` int32 when given.  Needs pyarrow and numpy.
    """
    import numpy as np
    import pyarrow as pa

    n = columns["num_records"]
    m = len(columns["header_value_valid"])
    offset = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(columns["offset"])])
    timestamp = pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), n,
                                      [None, pa.py_buffer(columns["timestamp"])])
    ts_type = pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(columns["timestamp_type"])])
    key = _binary(pa, np, pa.binary(), n, columns["key_offsets"], columns["key_data"],
                  columns["key_valid"])
    value = _binary(pa, np, pa.binary(), n, columns["value_offsets"], columns["value_data"],
                    columns["value_valid"])
    hkey = _binary(pa, np, pa.string(), m, columns["header_key_offsets"],
                   columns["header_key_data"], None)
    try:
        hkey.validate(full=True)
    except pa.ArrowInvalid:
        hkey = _binary(pa, np, pa.binary(), m, columns["header_key_offsets"],
                       columns["header_key_data"], None)
    hvalue = _binary(pa, np, pa.binary(), m, columns["header_value_offsets"],
                     columns["header_value_data"], columns["header_value_valid"])
    entries = pa.StructArray.from_arrays([hkey, hvalue], names=["key", "value"])
    header_offsets = pa.Array.from_buffers(pa.int32(), n + 1,
                                           [None, pa.py_buffer(columns["header_offsets"])])
    headers = pa.ListArray.from_arrays(header_offsets, entries)
    arrays = [offset, timestamp, ts_type, key, value, headers]
    names = ["offset", "timestamp", "timestamp_type", "key", "value", "headers"]
    if topic is not None:
        arrays.append(pa.repeat(pa.scalar(topic, pa.string()), n))
        names.append("topic")
    if partition is not None:
        arrays.append(pa.repeat(pa.scalar(partition, pa.int32()), n))
        names.append("partition")
    return pa.RecordBatch.from_arrays(arrays, names=names)
