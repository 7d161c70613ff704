"""Kafka record batches: decode a Fetch response's record set, build batches, and columns.

    from kwire import records
    for rec in records.iter_records(data, topic="orders", partition=3):
        rec.offset, rec.timestamp, rec.key, rec.value, rec.headers
    for batch in records.iter_batches(data):       # control batches, producer ids, ...
        ...
    cols = records.decode_columns(data)            # no per-record Python objects
    table = records.to_arrow(cols)                 # zero-copy pyarrow.RecordBatch
    spans = records.scan_spans(data)               # entry headers only: offsets, producers
    skip = records.aborted_spans(spans, aborted_transactions)     # read_committed
    for start, end in records.record_runs(spans, skip):           # byte ranges to decode
        ...

This module is the one home of the record-set procedures the consumer and the Spark reader
share (issue #16): the header walk (:func:`scan_spans`) and the read_committed filter
(:func:`aborted_spans`, :func:`record_runs`).

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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._impl import IMPLEMENTATION, codec_module

__all__ = [
    "IMPLEMENTATION", "NATIVE_DECOMPRESSION", "Record", "RecordBatch", "Span", "iter_records", "iter_batches",
    "scan_spans", "aborted_spans", "record_runs", "build_batch", "decode_columns", "to_arrow",
]

_codec = codec_module()

Record = _codec.Record
RecordBatch = _codec.RecordBatch
iter_records = _codec.iter_records
iter_batches = _codec.iter_batches
build_batch = _codec.build_batch
Span = _codec.Span
scan_spans = _codec.scan_spans
decode_columns = _codec.decode_columns
NATIVE_DECOMPRESSION: tuple[str, ...] = getattr(_codec, "NATIVE_DECOMPRESSION", ())

CONTROL_ABORT = 0   # a control record's type: the ABORT marker (1 is COMMIT)


def aborted_spans(spans: Sequence[Any], aborted_transactions: Iterable[dict[str, Any]] | None
                  ) -> set[int]:
    """read_committed: the indexes of the :class:`Span` s (from :func:`scan_spans`) that hold
    records of aborted transactions.

    ``aborted_transactions`` is the Fetch answer's list for the partition (``producer_id``,
    ``first_offset``; None or empty: nothing was aborted).  An aborted transaction's producer
    is *aborting* from the first span whose last offset reaches ``first_offset`` until that
    producer's next ABORT marker (a control span whose ``control_type`` is ABORT, or could not
    be read; a COMMIT marker does not end it); while it is, its transactional non-control
    spans are aborted.  A producer has one open transaction at a time, so its next marker
    after the transaction's first offset is that transaction's end.  Control spans are never
    in the set: they hold no user records (the decoders leave them out), and
    :func:`record_runs` keeps them inside runs.  Kafka's Java consumer reasons the same way.
    """
    if not aborted_transactions:
        return set()
    pending = sorted((a["first_offset"], a["producer_id"]) for a in aborted_transactions)
    n = len(pending)
    i = 0
    aborting: set[int] = set()
    out: set[int] = set()
    for k, s in enumerate(spans):
        last = s.last_offset
        while i < n and pending[i][0] <= last:
            aborting.add(pending[i][1])
            i += 1
        if not aborting:
            if i == n:
                break  # nothing aborting and nothing left to abort
            continue
        if s.is_control:
            if s.control_type in (CONTROL_ABORT, -1):
                aborting.discard(s.producer_id)
        elif s.is_transactional and s.producer_id in aborting:
            out.add(k)
    return out


def record_runs(spans: Sequence[Any], skip: Iterable[int] = (), lo: int | None = None,
                until: int | None = None) -> list[tuple[int, int]]:
    """Byte ranges ``(start, end)`` of consecutive spans worth decoding: those not in ``skip``
    (indexes, e.g. :func:`aborted_spans`) that may hold offsets in ``[lo, until)`` (None: no
    bound).  Control spans stay inside a run (the decoders leave them out), so a run is not
    cut at every transaction marker.  A magic 0/1 span's first offset is not in its header (a
    compressed wrapper's offset is its last inner one), so ``until`` never leaves one out:
    the decoded records are cut at ``until`` by the caller."""
    skip = skip if isinstance(skip, (set, frozenset, dict)) else set(skip)
    runs: list[tuple[int, int]] = []
    start = end = -1
    for k, s in enumerate(spans):
        if (k in skip or (lo is not None and s.last_offset < lo)
                or (until is not None and s.magic >= 2 and s.base_offset >= until)):
            if start >= 0:
                runs.append((start, end))
                start = -1
            continue
        if start < 0:
            start = s.start
        end = s.end
    if start >= 0:
        runs.append((start, end))
    return runs


_TIMESTAMP_FACTOR = {"ms": 1, "us": 1000, "ns": 1_000_000}   # from the record layer's ms


def _validity(pa: Any, np: Any, valid: Any, n: int) -> tuple[Any, int]:
    """(Arrow validity bitmap or None, null count) from a per-row bool column."""
    mask = np.asarray(valid, dtype=np.bool_)
    if len(mask) != n:
        raise ValueError("validity column has the wrong length")
    nulls = n - int(np.count_nonzero(mask))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(mask, bitorder="little")), nulls


def _binary(pa: Any, np: Any, typ: Any, n: int, offsets: Any, data: Any, valid: Any) -> Any:
    bitmap, nulls = _validity(pa, np, valid, n) if valid is not None else (None, 0)
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def _headers(pa: Any, np: Any, columns: Mapping[str, Any], n: int, typ: Any) -> Any:
    """The headers column: list<struct<key, value>> over the flattened header buffers, of type
    ``typ`` (None: header keys string, or binary when they are not all valid UTF-8)."""
    m = len(columns["header_value_valid"])
    hvalue = _binary(pa, np, pa.binary(), m, columns["header_value_offsets"],
                     columns["header_value_data"], columns["header_value_valid"])
    if typ is None:
        hkey = _binary(pa, np, pa.string(), m, columns["header_key_offsets"],
                       columns["header_key_data"], None)
        try:
            hkey.validate(full=True)
        except pa.ArrowInvalid:
            hkey = _binary(pa, np, pa.binary(), m, columns["header_key_offsets"],
                           columns["header_key_data"], None)
        entries = pa.StructArray.from_arrays([hkey, hvalue], names=["key", "value"])
        typ = pa.list_(entries.type)
    else:
        if not pa.types.is_list(typ) or not pa.types.is_struct(typ.value_type):
            raise ValueError(f"the headers column cannot be {typ} (a list of struct<key, value>)")
        entry = typ.value_type
        hkey = _binary(pa, np, entry.field("key").type, m, columns["header_key_offsets"],
                       columns["header_key_data"], None)
        entries = pa.StructArray.from_arrays([hkey, hvalue], fields=list(entry))
    offsets = pa.py_buffer(columns["header_offsets"])
    return pa.Array.from_buffers(typ, n, [None, offsets], children=[entries])


def _constant(pa: Any, np: Any, value: Any, typ: Any, rows: int) -> Any:
    """``value`` repeated ``rows`` times as an Arrow array of ``typ`` (string and integer types
    laid out with numpy: several times faster than pyarrow.repeat)."""
    if pa.types.is_integer(typ):
        data = np.full(rows, value, dtype=typ.to_pandas_dtype())
        return pa.Array.from_buffers(typ, rows, [None, pa.py_buffer(data)])
    if typ == pa.string() and isinstance(value, str):
        raw = value.encode()
        if rows * len(raw) <= 0x7FFFFFFF:
            ends = np.arange(rows + 1, dtype=np.int32) * len(raw)
            return pa.Array.from_buffers(typ, rows, [None, pa.py_buffer(ends), pa.py_buffer(raw * rows)])
    return pa.repeat(pa.scalar(value, typ), rows)


def to_arrow(columns: Mapping[str, Any], *, topic: str | None = None, partition: int | None = None,
             lo: int | None = None, until: int | None = None, schema: Any = None) -> Any:
    """A ``pyarrow.RecordBatch`` over the buffers of :func:`decode_columns` (no copies of the
    key/value data).  The one Arrow builder (issue #16): the Spark reader's batches are built
    here too, with its schema.

    Columns: ``offset`` int64, ``timestamp`` timestamp[ms, UTC], ``timestamp_type`` int8,
    ``key``/``value`` binary, ``headers`` list<struct<key: string, value: binary>> (header
    keys fall back to binary if they are not valid UTF-8), and ``topic`` string /
    ``partition`` int32 when given.  Needs pyarrow and numpy.

    ``lo``/``until``: only the records with offsets in ``[lo, until)`` (None: no bound; the
    offsets of a record set only grow, so this is one binary search per end and a zero-copy
    slice).

    ``schema``: build these columns instead, in its order and with its types.  A field is
    one of the columns above by name (``timestampType``, as Spark's Kafka source spells it,
    is ``timestamp_type``); ``timestamp`` may be in ms, us or ns, ``offset``/``timestamp_type``
    any integer type, ``topic``/``partition`` any type their value converts to, and
    ``headers`` a list of struct<key, value> whose key type (string or binary) is taken as
    the schema says: string keys are not checked for UTF-8 here.
    """
    import numpy as np
    import pyarrow as pa

    n = columns["num_records"]
    first, rows = 0, n
    if n and (lo is not None or until is not None):
        offsets = np.frombuffer(columns["offset"], dtype=np.int64, count=n)
        first = 0 if lo is None else int(np.searchsorted(offsets, lo, "left"))
        stop = n if until is None else int(np.searchsorted(offsets, until, "left"))
        rows = max(stop - first, 0)
    whole = first == 0 and rows == n

    def fixed(name: str, own: Any, typ: Any) -> Any:
        # a fixed-width column as typ: zero-copy when typ is its own type (own), else
        # converted (only the rows kept)
        if typ is None or typ == own:
            arr = pa.Array.from_buffers(own, n, [None, pa.py_buffer(columns[name])])
            return arr if whole else arr.slice(first, rows)
        col = np.frombuffer(columns[name], dtype=own.to_pandas_dtype() if name != "timestamp"
                            else np.int64, count=n)[first:first + rows]
        if name == "timestamp":
            if not pa.types.is_timestamp(typ) or typ.unit not in _TIMESTAMP_FACTOR:
                raise ValueError(f"the timestamp column cannot be {typ} (a timestamp in ms, us or ns)")
            if typ.unit != "ms":
                col = col * _TIMESTAMP_FACTOR[typ.unit]
        else:
            col = col.astype(typ.to_pandas_dtype())
        return pa.Array.from_buffers(typ, rows, [None, pa.py_buffer(col)])

    def column(name: str, typ: Any) -> Any:
        if name == "offset":
            return fixed(name, pa.int64(), typ)
        if name == "timestamp":
            return fixed(name, pa.timestamp("ms", tz="UTC"), typ)
        if name in ("timestamp_type", "timestampType"):
            return fixed("timestamp_type", pa.int8(), typ)
        if name in ("key", "value"):
            arr = _binary(pa, np, pa.binary(), n, columns[name + "_offsets"], columns[name + "_data"],
                          columns[name + "_valid"])
        elif name == "headers":
            arr = _headers(pa, np, columns, n, typ)
        elif name in ("topic", "partition"):
            value = topic if name == "topic" else partition
            if value is None:
                raise ValueError(f"the schema has a {name} column: give {name}=")
            return _constant(pa, np, value, typ or (pa.string() if name == "topic" else pa.int32()), rows)
        else:
            raise ValueError(f"no record column is called {name!r}")
        return arr if whole else arr.slice(first, rows)

    if schema is None:
        names = ["offset", "timestamp", "timestamp_type", "key", "value", "headers"]
        names += [name for name, v in (("topic", topic), ("partition", partition)) if v is not None]
        return pa.RecordBatch.from_arrays([column(name, None) for name in names], names=names)
    return pa.RecordBatch.from_arrays([column(f.name, f.type) for f in schema], schema=schema)
