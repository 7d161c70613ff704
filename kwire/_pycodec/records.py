"""Record batches (magic 2) and legacy message sets (magic 0/1): the pure-Python reference.

The compiled twin is kwire/_records.pxi (in kwire._codec).  Both have the same API and make
the same checks in the same order, so for any input they return equal values or raise the
same error class at the same position.  Keep them in step.

A Fetch response's record set is a concatenation of entries, each framed the same way::

    offset int64 | size int32 (bytes that follow) | ...   (byte 16 is the magic in every format)

Record batch, magic 2 (KIP-98)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (2)
    crc uint32 (CRC-32C of attributes..end) | attributes int16 | lastOffsetDelta int32
    baseTimestamp int64 | maxTimestamp int64 | producerId int64 | producerEpoch int16
    baseSequence int32 | recordsCount int32 | records (one compressed block if codec != 0)

    attributes: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 timestamp
    type (LogAppendTime: every record's timestamp is maxTimestamp), bit 4 transactional,
    bit 5 control.

    record: length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
            keyLength varint | key | valueLength varint | value | headerCount varint
            [headerKeyLength varint | key (utf-8) | headerValueLength varint | value]
    (zigzag varints; length -1 means null)

Legacy message, magic 0/1::

    offset int64 | messageSize int32 | crc uint32 (CRC-32 of magic..end) | magic int8
    attributes int8 | [timestamp int64, magic 1] | keyLength int32 | key | valueLength int32 | value

    A compressed message wraps a compressed message set of inner messages; magic 1 inner
    offsets are relative: absolute = wrapper offset - last inner offset + inner offset.

A truncated entry at the end of the buffer is normal (Fetch responses are cut at max bytes)
and is skipped; anything wrong inside a complete entry raises CorruptRecordError
(UnsupportedCompressionError for an unknown codec) with the input position.

scan_spans (see "the header scan" below) walks the same framing reading headers only; the
decoder frames its entries with the same function (_frame).
"""
from __future__ import annotations

import itertools
import operator
import struct
import time
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, SupportsIndex

import cramjam
import xxhash

from .._crc import crc32c as _crc32c
from ..errors import (
    CorruptRecordError,
    DecompressionLimitError,
    KwireError,
    ProtocolError,
    TruncatedError,
    UnsupportedCompressionError,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["Record", "RecordBatch", "Span", "iter_records", "iter_batches", "scan_spans", "build_batch",
           "decode_columns",
           "DEFAULT_MAX_DECOMPRESSED_BYTES"]

# The most one batch (or legacy wrapper) may decompress to; the consumer passes its
# fetch.max.decompressed.bytes (kwire.config says why 64 MiB).  Keep equal to the twin's.
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

_LOG_OVERHEAD = 12
_MIN_ENTRY_SIZE = 14
_V0_MIN_SIZE = 14
_V1_MIN_SIZE = 22
_V2_HEADER = 61
_V2_MIN_LENGTH = 49
_V2_CRC_START = 21
_MIN_RECORD = 7
_CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
_XERIAL_BLOCK = 32 * 1024

_V2_HEAD = struct.Struct(">qiibIhiqqqhii")   # the 61-byte v2 header
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_LEGACY_HEAD = struct.Struct(">qiIbB")       # offset, size, crc, magic, attributes

_Header = tuple[str, bytes | None]
# (topic, partition, offset) of a batch being decompressed, for DecompressionLimitError
_Where = tuple[str | None, int, int]


def _wrap64(v: int) -> int:
    """Two's-complement int64 wrap (what the compiled twin's arithmetic does)."""
    return ((v + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)


# --- the user-facing objects -----------------------------------------------------------

class _ByValue:
    """Equality, pickling and (no) hashing by ``to_tuple()``, shared by Record and RecordBatch."""

    __slots__ = ()

    if TYPE_CHECKING:
        def to_tuple(self) -> tuple[Any, ...]: ...

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self) or not isinstance(other, _ByValue):
            return NotImplemented
        return self.to_tuple() == other.to_tuple()

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    # unhashable (mutable, compared by value), as the compiled twin; object's __hash__ is a method
    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[_ByValue], tuple[Any, ...]]:
        return (type(self), self.to_tuple())


class Record(_ByValue):
    """One record: ``offset``, ``timestamp`` (ms), ``timestamp_type`` (0 CreateTime,
    1 LogAppendTime, -1 none: magic 0), ``key``/``value`` (bytes or None), ``headers``
    (list of ``(str, bytes | None)``), and where it came from: ``topic``, ``partition``,
    ``leader_epoch`` (-1 when unknown), which the consumer sets.
    """
    __slots__ = ("offset", "timestamp", "timestamp_type", "key", "value", "headers",
                 "topic", "partition", "leader_epoch")

    def __init__(self, offset: int, timestamp: int, timestamp_type: int, key: Buffer | None,
                 value: Buffer | None, headers: Iterable[_Header] | None = None,
                 topic: str | None = None, partition: int = -1, leader_epoch: int = -1) -> None:
        self.offset = operator.index(offset)
        self.timestamp = operator.index(timestamp)
        self.timestamp_type = operator.index(timestamp_type)
        self.key = None if key is None else bytes(key)
        self.value = None if value is None else bytes(value)
        self.headers: list[_Header] = [] if headers is None else list(headers)
        self.topic = topic
        self.partition = operator.index(partition)
        self.leader_epoch = operator.index(leader_epoch)

    def to_tuple(self) -> tuple[int, int, int, bytes | None, bytes | None, list[_Header],
                                str | None, int, int]:
        """``(offset, timestamp, timestamp_type, key, value, headers, topic, partition, leader_epoch)``"""
        return (self.offset, self.timestamp, self.timestamp_type, self.key, self.value,
                self.headers, self.topic, self.partition, self.leader_epoch)


    def __repr__(self) -> str:
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, "
                f"timestamp_type={self.timestamp_type}, key={self.key!r}, value={self.value!r}, "
                f"headers={self.headers!r}, topic={self.topic!r}, partition={self.partition}, "
                f"leader_epoch={self.leader_epoch})")


def _record(offset: int, timestamp: int, timestamp_type: int, key: bytes | None,
            value: bytes | None, headers: list[_Header], topic: str | None, partition: int,
            leader_epoch: int, _new: Any = object.__new__, _cls: type[Record] = Record) -> Record:
    # decoder-internal constructor: fields are already the right types
    r: Record = _new(_cls)
    r.offset = offset
    r.timestamp = timestamp
    r.timestamp_type = timestamp_type
    r.key = key
    r.value = value
    r.headers = headers
    r.topic = topic
    r.partition = partition
    r.leader_epoch = leader_epoch
    return r


class RecordBatch(_ByValue):
    """One v2 record batch, or one legacy (magic 0/1) message with its inner messages.

    ``records`` holds every record, including a control batch's control records (which
    iter_records leaves out).  For legacy entries the producer fields are -1 and
    ``max_timestamp`` is the (wrapper) message's timestamp.
    """
    __slots__ = ("base_offset", "last_offset", "magic", "compression", "is_transactional",
                 "is_control", "producer_id", "producer_epoch", "base_sequence",
                 "partition_leader_epoch", "timestamp_type", "first_timestamp", "max_timestamp",
                 "records", "size_bytes")

    def __init__(self, base_offset: int, last_offset: int, magic: int, compression: str,
                 is_transactional: bool, is_control: bool, producer_id: int, producer_epoch: int,
                 base_sequence: int, partition_leader_epoch: int, timestamp_type: int,
                 first_timestamp: int, max_timestamp: int, records: Iterable[Record],
                 size_bytes: int) -> None:
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.magic = magic
        self.compression = compression
        self.is_transactional = bool(is_transactional)
        self.is_control = bool(is_control)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self.timestamp_type = timestamp_type
        self.first_timestamp = first_timestamp
        self.max_timestamp = max_timestamp
        self.records = list(records)
        self.size_bytes = size_bytes

    def to_tuple(self) -> tuple[Any, ...]:
        return (self.base_offset, self.last_offset, self.magic, self.compression,
                self.is_transactional, self.is_control, self.producer_id, self.producer_epoch,
                self.base_sequence, self.partition_leader_epoch, self.timestamp_type,
                self.first_timestamp, self.max_timestamp, self.records, self.size_bytes)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)


    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"magic={self.magic}, compression={self.compression!r}, "
                f"records={len(self.records)}, is_transactional={self.is_transactional}, "
                f"is_control={self.is_control}, producer_id={self.producer_id}, "
                f"size_bytes={self.size_bytes})")


# --- primitives (the same semantics as _primitives.pxi) --------------------------------

def _need(pos: int, end: int, n: int) -> None:
    if n < 0 or n > end - pos:
        raise TruncatedError(f"needed {n} bytes at position {pos}, only {end - pos} left",
                             position=pos)


def _uvarint64(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    v = 0
    shift = 0
    while True:
        if pos >= end:
            _need(pos, end, 1)
        b = buf[pos]
        pos += 1
        if shift == 63 and b > 1:
            raise ProtocolError(f"varint overflows 64 bits at position {pos - 1}", position=pos - 1)
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, pos
        shift += 7


def _zz32(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varint that must fit 32 bits -> (value, new position)."""
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    start = pos
    v, pos = _uvarint64(buf, pos, end)
    if v > 0xFFFFFFFF:
        raise ProtocolError(f"varint {v} exceeds 32 bits at position {start}", position=start)
    return (v >> 1) ^ -(v & 1), pos


def _zz64(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varlong -> (value, new position)."""
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    v, pos = _uvarint64(buf, pos, end)
    return (v >> 1) ^ -(v & 1), pos


# --- decompression ---------------------------------------------------------------------

def _snappy_bound(block: bytes | memoryview, position: int) -> int:
    # The raw snappy preamble is the uncompressed length; cramjam allocates it up front (and
    # aborts the process if it cannot), so check it against what the block can expand to.
    n = len(block)
    v = 0
    shift = 0
    i = 0
    while True:
        if i >= n or shift > 28:
            raise CorruptRecordError(f"bad snappy length preamble at position {position}",
                                     position=position)
        b = block[i]
        i += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    if v > n * 22 + 64:
        raise CorruptRecordError(
            f"snappy block at position {position} claims {v} bytes from {n} compressed bytes",
            position=position)
    return v


def _snappy(data: bytes | memoryview, position: int, limit: int, where: _Where) -> bytes:
    # raw snappy, or xerial framing: magic | version int32 | compat int32 | [len int32 | block]...
    # A raw block's preamble is its exact uncompressed length, so the cap is checked on the
    # preambles (summed over xerial blocks) before anything is decompressed.
    n = len(data)
    total = 0
    if n >= 16 and data[:8] == _XERIAL_MAGIC:
        pos = 16
        pieces: list[bytes] = []
        while pos < n:
            if n - pos < 4:
                raise CorruptRecordError(f"truncated xerial snappy block length at position {position}",
                                         position=position)
            (blen,) = _I32.unpack_from(data, pos)
            pos += 4
            if blen < 0 or blen > n - pos:
                raise CorruptRecordError(f"xerial snappy block length {blen} at position {position} "
                                         f"overruns the data", position=position)
            block = data[pos:pos + blen]
            total += _snappy_bound(block, position)
            if total > limit:
                raise _limit_error(2, position, limit, where)
            pieces.append(bytes(cramjam.snappy.decompress_raw(block)))
            pos += blen
        return b"".join(pieces)
    if _snappy_bound(data, position) > limit:
        raise _limit_error(2, position, limit, where)
    return bytes(cramjam.snappy.decompress_raw(data))


def _legacy_lz4(data: bytes | memoryview) -> bytes | memoryview:
    # Kafka 0.8/0.9 computed the LZ4 frame header checksum over magic+descriptor; if the
    # byte matches that broken value, patch in the correct one.
    n = len(data)
    if n < 7 or data[:4] != b"\x04\x22\x4d\x18":
        return data
    flg = data[4]
    dlen = 2 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if n < 4 + dlen + 1:
        return data
    hc = data[4 + dlen]
    good = (xxhash.xxh32_intdigest(data[4:4 + dlen]) >> 8) & 0xFF
    if hc == good:
        return data
    if hc != (xxhash.xxh32_intdigest(data[:4 + dlen]) >> 8) & 0xFF:
        return data
    fixed = bytearray(data)
    fixed[4 + dlen] = good
    return bytes(fixed)


def _limit_error(codec: int, position: int, limit: int, where: _Where) -> DecompressionLimitError:
    # where: (topic, partition, offset) of the batch
    topic, partition, offset = where
    of = f" of {topic} [{partition}]" if topic is not None else ""
    return DecompressionLimitError(
        f"{_CODEC_NAMES[codec]} batch at offset {offset}{of} (the entry at position {position}) "
        f"decompresses to more than {limit} bytes (fetch.max.decompressed.bytes)",
        position=position, limit=limit, topic=topic,
        partition=partition if partition >= 0 else None, offset=offset)


def _short_output(exc: Exception) -> bool:
    # cramjam's *_into says this when the output block was too small
    return "failed to write whole buffer" in str(exc)


def _bounded(codec: int, fn: Callable[[bytes | memoryview, bytearray], int],
             data: bytes | memoryview, position: int, limit: int, where: _Where) -> bytes:
    # gzip, lz4 or zstd into a block that starts at a few times the input and grows 4x, never
    # past limit + 1 bytes: output that fills that block is over the cap, and decompression
    # stops there (cramjam's *_into streams into the block and fails when it is full).
    size = min(len(data) * 8 + 65536, limit + 1)
    while True:
        out = bytearray(size)
        try:
            got = fn(data, out)
        except Exception as exc:
            if not _short_output(exc):
                raise
            if size > limit:
                raise _limit_error(codec, position, limit, where) from None
            size = min(size * 4, limit + 1)
            continue
        if got > limit:
            raise _limit_error(codec, position, limit, where)
        del out[got:]
        return bytes(out)


def _decompress(codec: int, data: bytes | memoryview, magic: int, position: int, limit: int,
                where: _Where) -> bytes:
    try:
        if codec == 1:
            return _bounded(1, cramjam.gzip.decompress_into, data, position, limit, where)
        if codec == 2:
            return _snappy(data, position, limit, where)
        if codec == 3:
            if magic < 2:
                data = _legacy_lz4(data)
            return _bounded(3, cramjam.lz4.decompress_into, data, position, limit, where)
        if codec == 4:
            return _bounded(4, cramjam.zstd.decompress_into, data, position, limit, where)
    except KwireError:
        raise
    except MemoryError:
        raise
    except Exception as exc:
        raise CorruptRecordError(
            f"{_CODEC_NAMES[codec]} decompression failed for the entry at position {position}: {exc}",
            position=position) from exc
    raise UnsupportedCompressionError(f"compression codec {codec} at position {position}",
                                      position=position)


def _rewrap(exc: ProtocolError, start: int, decompressed: bool) -> ProtocolError:
    # Inside a complete entry every malformation is corruption; positions inside a
    # decompressed block mean nothing to the caller, so those errors point at the entry.
    if isinstance(exc, DecompressionLimitError):
        return exc      # names its batch already
    cls = type(exc) if isinstance(exc, CorruptRecordError) else CorruptRecordError
    if decompressed:
        new = cls(f"in the decompressed records of the entry at position {start}: {exc}",
                  position=start)
    elif cls is type(exc):
        return exc
    else:
        new = cls(str(exc), position=exc.position)
    new.__cause__ = exc
    return new


# --- the header scan: one walker for every caller (twin of the one in _records.pxi) ----------
#
# scan_spans() reads only the headers of a record set's entries: where they are and what they
# hold, for the consumer's next fetch offset and leader epoch, the read_committed filter
# (kwire.records.aborted_spans) and the Spark reader's byte ranges.  What it reads::
#
#   every entry    offset int64 @0 | size int32 @8 (bytes that follow) | ... | magic int8 @16
#   magic 2        partitionLeaderEpoch int32 @12 | attributes int16 @21 | lastOffsetDelta
#                  int32 @23 | producerId int64 @43 | recordsCount int32 @57 | records @61
#   control batch  (uncompressed, recordsCount >= 1) its first record: length varint |
#                  attributes int8 | timestampDelta varlong | offsetDelta varint |
#                  keyLength varint | key = version int16 | type int16 (0 ABORT, 1 COMMIT)
#   magic 0/1      the entry's offset is its last offset (a compressed wrapper carries its
#                  last inner message's offset; its first is not in the header)
#
# The framing is checked as the decoder checks it (_frame serves both): a truncated trailing
# entry ends the scan; a size below 14, a magic 2 batch shorter than its header or an unknown
# magic raises CorruptRecordError at the decoder's position.

_ENTRY_HEAD = struct.Struct(">qi")           # offset, size
# base offset, size, leader epoch, magic, (crc), attributes, last offset delta, (timestamps),
# producer id, (producer epoch, base sequence), records count
_SPAN_V2 = struct.Struct(">qiiB4xhi16xq6xi")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class Span(_ByValue):
    """One complete entry of a record set, as its header tells it (see scan_spans).

    Bytes ``[start, end)`` of the scanned buffer; offsets ``base_offset..last_offset``;
    ``magic``; ``leader_epoch`` (partitionLeaderEpoch; -1 for magic 0/1); ``producer_id``
    (-1 for magic 0/1); ``is_transactional``, ``is_control``; ``control_type``, the type of
    an uncompressed control batch's first control record (0 ABORT, 1 COMMIT; -1 otherwise or
    unreadable).  For magic 0/1, ``base_offset`` is the entry's offset, which for a compressed
    wrapper is its last inner offset (the first is not in the header).
    """
    __slots__ = ("start", "end", "base_offset", "last_offset", "magic", "leader_epoch",
                 "producer_id", "is_transactional", "is_control", "control_type")

    def __init__(self, start: int, end: int, base_offset: int, last_offset: int, magic: int,
                 leader_epoch: int, producer_id: int, is_transactional: bool, is_control: bool,
                 control_type: int = -1) -> None:
        self.start = operator.index(start)
        self.end = operator.index(end)
        self.base_offset = operator.index(base_offset)
        self.last_offset = operator.index(last_offset)
        self.magic = operator.index(magic)
        self.leader_epoch = operator.index(leader_epoch)
        self.producer_id = operator.index(producer_id)
        self.is_transactional = bool(is_transactional)
        self.is_control = bool(is_control)
        self.control_type = operator.index(control_type)

    def to_tuple(self) -> tuple[int, int, int, int, int, int, int, bool, bool, int]:
        return (self.start, self.end, self.base_offset, self.last_offset, self.magic,
                self.leader_epoch, self.producer_id, self.is_transactional, self.is_control,
                self.control_type)

    def __repr__(self) -> str:
        return ("Span(start=%d, end=%d, base_offset=%d, last_offset=%d, magic=%d, "
                "leader_epoch=%d, producer_id=%d, is_transactional=%s, is_control=%s, "
                "control_type=%d)" % self.to_tuple())


def _frame(buf: Any, start: int, end: int) -> int | None:
    """The size field of the complete entry at ``start``, or None when the buffer ends inside
    it (a truncated trailing entry).  A size no entry can have is corruption.  The decoder and
    scan_spans frame entries with this one function."""
    remaining = end - start
    if remaining < _LOG_OVERHEAD:
        return None
    size: int = _I32.unpack_from(buf, start + 8)[0]
    if size < _MIN_ENTRY_SIZE:
        raise CorruptRecordError(
            f"entry at position {start} has size {size}, smaller than any record",
            position=start + 8)
    if size > remaining - _LOG_OVERHEAD:
        return None
    return size


def _short_batch(start: int, batch_length: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"batch at position {start} has length {batch_length}, shorter than its header",
        position=start + 8)


def _bad_magic(start: int, magic: int) -> CorruptRecordError:
    return CorruptRecordError(f"unknown magic {magic} in the entry at position {start}",
                              position=start + 16)


def _scan_uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """(value, position after) of an unsigned varint of at most 10 bytes before ``end``, or
    (0, -1): the caller gives up quietly (the decoder reports what is wrong)."""
    v = shift = 0
    while shift < 70:
        if pos >= end:
            return 0, -1
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
    return 0, -1


def _control_type(buf: Any, pos: int, end: int) -> int:
    """The type in the key of the control record at ``pos``, or -1 when it cannot be read."""
    _, pos = _scan_uvarint(buf, pos, end)            # length
    if pos < 0 or pos >= end:
        return -1
    pos += 1                                         # attributes
    for _ in range(2):                               # timestampDelta, offsetDelta
        _, pos = _scan_uvarint(buf, pos, end)
        if pos < 0:
            return -1
    v, pos = _scan_uvarint(buf, pos, end)            # keyLength (zigzag)
    if pos < 0:
        return -1
    key_length = (v >> 1) ^ -(v & 1)
    if key_length < 4 or key_length > end - pos:
        return -1
    ctype: int = ((buf[pos + 2] << 8 | buf[pos + 3]) ^ 0x8000) - 0x8000
    return ctype


def _span(start: int, end: int, base_offset: int, last_offset: int, magic: int,
          leader_epoch: int, producer_id: int, is_transactional: bool, is_control: bool,
          control_type: int, _new: Any = object.__new__) -> Span:
    # Span() without its argument checks (the scan's values are ints and bools already):
    # a third of the scan's time otherwise
    s: Span = _new(Span)
    s.start = start
    s.end = end
    s.base_offset = base_offset
    s.last_offset = last_offset
    s.magic = magic
    s.leader_epoch = leader_epoch
    s.producer_id = producer_id
    s.is_transactional = is_transactional
    s.is_control = is_control
    s.control_type = control_type
    return s


def scan_spans(data: Any, *, until_damage: bool = False) -> list[Span]:
    """The complete entries of a record set (a Fetch answer's ``records``), as a list of
    :class:`Span`, from their headers only (no CRC check, no decoding).

    A truncated entry at the end (Fetch cuts answers at max bytes) ends the scan.  Malformed
    framing (a size no entry can have, a v2 batch shorter than its header, an unknown magic)
    raises CorruptRecordError, or with ``until_damage=True`` ends the scan there too, for a
    caller whose decoder will report it.
    """
    buf = data if isinstance(data, (bytes, bytearray)) else memoryview(data).cast("B")
    end = len(buf)
    out = []
    pos = 0
    head, v2, span, frame = _ENTRY_HEAD.unpack_from, _SPAN_V2.unpack_from, _span, _frame
    try:
        while True:
            size = frame(buf, pos, end)
            if size is None:
                break
            stop = pos + _LOG_OVERHEAD + size
            magic = buf[pos + 16]
            if magic == 2:
                if size < _V2_MIN_LENGTH:
                    raise _short_batch(pos, size)
                base, _, epoch, _, attributes, last, pid, count = v2(buf, pos)
                last += base
                if last > _INT64_MAX or last < _INT64_MIN:
                    last = _wrap64(last)
                control = attributes & 0x20 != 0
                ctype = -1
                if control and attributes & 0x07 == 0 and count >= 1:
                    ctype = _control_type(buf, pos + _V2_HEADER, stop)
                out.append(span(pos, stop, base, last, 2, epoch, pid, attributes & 0x10 != 0,
                                control, ctype))
            elif magic == 0 or magic == 1:
                offset = head(buf, pos)[0]
                out.append(span(pos, stop, offset, offset, magic, -1, -1, False, False, -1))
            else:
                raise _bad_magic(pos, magic)
            pos = stop
    except CorruptRecordError:
        if not until_damage:
            raise
    return out


# --- the decoder ------------------------------------------------------------------------

class _Entry:
    __slots__ = ("base_offset", "last_offset", "first_timestamp", "max_timestamp",
                 "producer_id", "partition_leader_epoch", "base_sequence", "producer_epoch",
                 "magic", "codec", "timestamp_type", "is_transactional", "is_control", "size")
    base_offset: int
    last_offset: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    partition_leader_epoch: int
    base_sequence: int
    producer_epoch: int
    magic: int
    codec: int
    timestamp_type: int
    is_transactional: bool
    is_control: bool
    size: int


class _Run:
    """The records section of one v2 batch, being decoded."""
    __slots__ = ("buf", "pos", "end", "remaining", "count", "base_offset", "first_ts",
                 "max_ts", "ts_type", "leader_epoch", "compressed")
    buf: bytes
    pos: int
    end: int
    remaining: int
    count: int
    base_offset: int
    first_ts: int
    max_ts: int
    ts_type: int
    leader_epoch: int
    compressed: bool


def _varint_bytes(buf: bytes, pos: int, end: int, what: str,
                  rec_start: int) -> tuple[bytes | None, int]:
    """A record's key or value: zigzag varint length (-1 null) + bytes -> (bytes | None, pos)."""
    n, pos = _zz32(buf, pos, end)
    if n >= 0:
        _need(pos, end, n)
        return buf[pos:pos + n], pos + n
    if n == -1:
        return None, pos
    raise CorruptRecordError(f"record at position {rec_start} has {what} length {n}", position=rec_start)


class _Decoder:
    __slots__ = ("buf", "pos", "end", "check_crc", "topic", "partition",
                 "leader_epoch_default", "in_decompressed", "lazy", "run", "run_start",
                 "records", "sink", "max_out", "data_bytes", "ranges", "range_i")
    buf: bytes
    pos: int
    end: int
    check_crc: bool
    topic: str | None
    partition: int
    leader_epoch_default: int
    in_decompressed: bool
    lazy: bool
    run: _Run | None
    run_start: int
    records: list[Record] | None
    sink: _Columns | None
    max_out: int
    data_bytes: int
    ranges: list[tuple[int, int]] | None
    range_i: int

    def __init__(self, data: Buffer, check_crc: bool, topic: str | None, partition: int,
                 leader_epoch_default: int,
                 max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> None:
        if isinstance(data, bytes):
            self.buf = data
        else:
            self.buf = memoryview(data).cast("B").tobytes()
        if topic is not None and not isinstance(topic, str):
            raise TypeError(f"topic must be str or None, not {type(topic).__name__}")
        self.pos = 0
        self.end = len(self.buf)
        self.check_crc = bool(check_crc)
        self.topic = topic
        self.partition = operator.index(partition)
        self.leader_epoch_default = operator.index(leader_epoch_default)
        self.max_out = operator.index(max_decompressed_bytes)
        if self.max_out < 0:
            raise ValueError("max_decompressed_bytes must be >= 0")
        self.in_decompressed = False
        self.lazy = False
        self.run = None
        self.run_start = 0
        self.records = None
        self.sink = None
        # bytes of record data (decompressed) in the entries entered so far (record_bytes)
        self.data_bytes = 0
        self.ranges = None  # iter_records(ranges=): the byte ranges to decode, in turn
        self.range_i = 0

    def next_entry(self) -> _Entry | None:
        """The next entry's _Entry (records in .records, or .run when lazy), None at the end.
        With ``ranges``, the end of one range moves on to the next; a failure ends them all."""
        ranges = self.ranges
        if ranges is None:
            return self.entry()
        try:
            e = self.entry()
            while e is None and self.range_i < len(ranges):
                self.pos, self.end = ranges[self.range_i]
                self.range_i += 1
                e = self.entry()
        except BaseException:
            self.range_i = len(ranges)
            raise
        return e

    def entry(self) -> _Entry | None:
        """next_entry within the current range (the whole buffer without ranges)."""
        start = self.pos
        self.records = None
        self.run = None
        try:
            size = _frame(self.buf, start, self.end)
        except CorruptRecordError:
            self.pos = self.end
            raise
        if size is None:
            self.pos = self.end
            return None
        magic = self.buf[start + 16]
        self.in_decompressed = False
        e = _Entry()
        try:
            if magic == 2:
                self.decode_v2(start, start + _LOG_OVERHEAD + size, e)
            elif magic == 0 or magic == 1:
                self.decode_legacy(start, start + _LOG_OVERHEAD + size, magic, e)
            else:
                raise _bad_magic(start, magic)
        except BaseException as exc:
            new = self._abort(exc, start, self.in_decompressed)
            if new is exc:
                raise
            raise new from exc
        self.pos = start + _LOG_OVERHEAD + size
        return e

    def _abort(self, exc: BaseException, start: int, compressed: bool) -> BaseException:
        """End the walk after a failure; the exception to raise (ours rewrapped with the
        entry's position, anything else as it is)."""
        self.run = None
        self.pos = self.end
        return _rewrap(exc, start, compressed) if isinstance(exc, ProtocolError) else exc

    def decode_v2(self, start: int, end: int, e: _Entry) -> None:
        buf = self.buf
        (batch_length,) = _I32.unpack_from(buf, start + 8)
        if batch_length < _V2_MIN_LENGTH:
            raise _short_batch(start, batch_length)
        (e.base_offset, _, e.partition_leader_epoch, e.magic, crc, attributes,
         last_offset_delta, e.first_timestamp, e.max_timestamp, e.producer_id,
         e.producer_epoch, e.base_sequence, count) = _V2_HEAD.unpack_from(buf, start)
        if self.check_crc:
            actual = _crc32c(memoryview(buf)[start + _V2_CRC_START:end])
            if actual != crc:
                raise CorruptRecordError(
                    f"batch at position {start} fails its CRC-32C: computed {actual:#010x}, "
                    f"stored {crc:#010x}", position=start + 17)
        e.codec = attributes & 0x07
        if e.codec > 4:
            raise UnsupportedCompressionError(
                f"batch at position {start} uses unknown compression codec {e.codec}",
                position=start + _V2_CRC_START)
        if count < 0:
            raise CorruptRecordError(f"batch at position {start} has records count {count}",
                                     position=start + 57)
        e.timestamp_type = (attributes >> 3) & 1
        e.is_transactional = (attributes & 0x10) != 0
        e.is_control = (attributes & 0x20) != 0
        e.last_offset = _wrap64(e.base_offset + last_offset_delta)
        e.size = end - start
        leader_epoch = (e.partition_leader_epoch if e.partition_leader_epoch >= 0
                        else self.leader_epoch_default)
        self.run_start = start
        if e.codec == 0:
            run = self.v2_begin(buf, start + _V2_HEADER, end, count, e, leader_epoch)
        else:
            block = _decompress(e.codec, memoryview(buf)[start + _V2_HEADER:end], 2, start,
                                self.max_out, (self.topic, self.partition, e.base_offset))
            self.in_decompressed = True
            run = self.v2_begin(block, 0, len(block), count, e, leader_epoch)
        run.compressed = e.codec != 0
        if self.lazy and not e.is_control:
            self.run = run
            return
        if self.sink is not None and not e.is_control:
            for r in self.v2_list(run):
                self.sink.append(r)
        else:
            self.records = self.v2_list(run)
        self.in_decompressed = False

    def v2_begin(self, buf: bytes, pos: int, end: int, count: int, e: _Entry,
                 leader_epoch: int) -> _Run:
        if count > (end - pos) // _MIN_RECORD:
            raise CorruptRecordError(
                f"records count {count} cannot fit in {end - pos} bytes", position=pos)
        self.data_bytes += end - pos
        run = _Run()
        run.buf = buf
        run.pos = pos
        run.end = end
        run.remaining = count
        run.count = count
        run.base_offset = e.base_offset
        run.first_ts = e.first_timestamp
        run.max_ts = e.max_timestamp
        run.ts_type = e.timestamp_type
        run.leader_epoch = leader_epoch
        return run

    @staticmethod
    def v2_end(run: _Run) -> None:
        if run.pos != run.end:
            raise CorruptRecordError(
                f"{run.end - run.pos} bytes left after the last of {run.count} records",
                position=run.pos)

    def v2_list(self, run: _Run) -> list[Record]:
        out = [self.v2_next(run) for _ in range(run.count)]
        self.v2_end(run)
        return out

    def lazy_records(self, run: _Run) -> Iterator[Record]:
        # the records of the active run (self.run), one at a time (iter_records)
        while True:
            try:
                if run.remaining > 0:
                    r = self.v2_next(run)
                else:
                    self.v2_end(run)
                    r = None
            except BaseException as exc:
                new = self._abort(exc, self.run_start, run.compressed)
                if new is exc:
                    raise
                raise new from exc
            if r is None:
                self.run = None
                return
            yield r

    def v2_next(self, run: _Run) -> Record:
        buf = run.buf
        pos = run.pos
        rec_start = pos
        length, pos = _zz32(buf, pos, run.end)
        if length < 0 or length > run.end - pos:
            raise CorruptRecordError(
                f"record at position {rec_start} has length {length}, past the end of its batch",
                position=rec_start)
        end = pos + length
        run.pos = end
        run.remaining -= 1
        _need(pos, end, 1)                       # record attributes: unused
        pos += 1
        ts_delta, pos = _zz64(buf, pos, end)
        off_delta, pos = _zz32(buf, pos, end)
        key, pos = _varint_bytes(buf, pos, end, "key", rec_start)
        value, pos = _varint_bytes(buf, pos, end, "value", rec_start)
        hcount, pos = _zz32(buf, pos, end)
        if hcount < 0 or hcount > (end - pos) // 2:
            raise CorruptRecordError(
                f"record at position {rec_start} has header count {hcount}", position=rec_start)
        headers: list[_Header] = []
        for _ in range(hcount):
            hklen, pos = _zz32(buf, pos, end)
            if hklen < 0:
                raise CorruptRecordError(
                    f"record at position {rec_start} has header key length {hklen}",
                    position=rec_start)
            _need(pos, end, hklen)
            hkey = bytes(buf[pos:pos + hklen]).decode("utf-8", "surrogateescape")
            pos += hklen
            hvlen, pos = _zz32(buf, pos, end)
            hval: bytes | None
            if hvlen >= 0:
                _need(pos, end, hvlen)
                hval = buf[pos:pos + hvlen]
                pos += hvlen
            elif hvlen == -1:
                hval = None
            else:
                raise CorruptRecordError(
                    f"record at position {rec_start} has header value length {hvlen}",
                    position=rec_start)
            headers.append((hkey, hval))
        if pos != end:
            raise CorruptRecordError(
                f"record at position {rec_start} has {end - pos} bytes after its headers",
                position=rec_start)
        ts = run.max_ts if run.ts_type == 1 else _wrap64(run.first_ts + ts_delta)
        return _record(_wrap64(run.base_offset + off_delta), ts, run.ts_type, key, value,
                       headers, self.topic, self.partition, run.leader_epoch)

    # legacy (magic 0/1) --------------------------------------------------------------

    def decode_legacy(self, start: int, end: int, magic: int, e: _Entry) -> None:
        buf = self.buf
        offset, timestamp, attributes, pos = self.legacy_message(buf, start, end, magic)
        e.magic = magic
        e.codec = attributes & 0x07
        e.timestamp_type = ((attributes >> 3) & 1) if magic == 1 else -1
        e.is_transactional = False
        e.is_control = False
        e.producer_id = -1
        e.producer_epoch = -1
        e.base_sequence = -1
        e.partition_leader_epoch = -1
        e.last_offset = offset
        e.max_timestamp = timestamp
        e.size = end - start
        key, pos = self.legacy_bytes(buf, pos, end, start)
        if e.codec == 0:
            value, pos = self.legacy_bytes(buf, pos, end, start)
            records = [self.legacy_record(offset, timestamp, e.timestamp_type, key, value)]
            self.data_bytes += e.size
        else:
            if e.codec > 4:
                raise UnsupportedCompressionError(
                    f"message at position {start} uses unknown compression codec {e.codec}",
                    position=start + 17)
            _need(pos, end, 4)
            (vlen,) = _I32.unpack_from(buf, pos)
            pos += 4
            if vlen < 0:
                raise CorruptRecordError(f"compressed message at position {start} has no value",
                                         position=pos - 4)
            _need(pos, end, vlen)
            block = _decompress(e.codec, memoryview(buf)[pos:pos + vlen], magic, start,
                                self.max_out, (self.topic, self.partition, offset))
            pos += vlen
            self.data_bytes += len(block)
            self.in_decompressed = True
            records = self.legacy_inner(block, magic, offset, timestamp, e.timestamp_type)
            self.in_decompressed = False
        if pos != end:
            raise CorruptRecordError(
                f"message at position {start} has {end - pos} bytes after its value",
                position=pos)
        e.base_offset = records[0].offset
        e.first_timestamp = records[0].timestamp
        if self.sink is not None:
            for r in records:
                self.sink.append(r)
        else:
            self.records = records

    def legacy_message(self, buf: bytes, start: int, end: int,
                       magic: int) -> tuple[int, int, int, int]:
        # offset..attributes[, timestamp]; the caller has checked the message lies in [start, end)
        offset, size, crc, _magic, attributes = _LEGACY_HEAD.unpack_from(buf, start)
        if size < (_V1_MIN_SIZE if magic == 1 else _V0_MIN_SIZE):
            raise CorruptRecordError(
                f"magic {magic} message at position {start} has size {size}, smaller than its header",
                position=start + 8)
        if self.check_crc:
            actual = zlib.crc32(memoryview(buf)[start + 16:end])
            if actual != crc:
                raise CorruptRecordError(
                    f"message at position {start} fails its CRC-32: computed {actual:#010x}, "
                    f"stored {crc:#010x}", position=start + 12)
        pos = start + 18
        if magic == 1:
            (timestamp,) = _I64.unpack_from(buf, pos)
            pos += 8
        else:
            timestamp = -1
        return offset, timestamp, attributes, pos

    @staticmethod
    def legacy_bytes(buf: bytes, pos: int, end: int, start: int) -> tuple[bytes | None, int]:
        _need(pos, end, 4)
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
        if n == -1:
            return None, pos
        if n < -1:
            raise CorruptRecordError(f"message at position {start} has a field of length {n}",
                                     position=pos - 4)
        _need(pos, end, n)
        return bytes(buf[pos:pos + n]), pos + n

    def legacy_record(self, offset: int, timestamp: int, ts_type: int, key: bytes | None,
                      value: bytes | None) -> Record:
        return _record(offset, timestamp, ts_type, key, value, [], self.topic, self.partition,
                       self.leader_epoch_default)

    def legacy_inner(self, buf: bytes, magic: int, wrapper_offset: int, wrapper_ts: int,
                     wrapper_ts_type: int) -> list[Record]:
        n = len(buf)
        pos = 0
        records: list[Record] = []
        while pos < n:
            start = pos
            if n - start < _LOG_OVERHEAD:
                raise CorruptRecordError(f"truncated inner message at position {start}",
                                         position=start)
            (size,) = _I32.unpack_from(buf, start + 8)
            if size < _MIN_ENTRY_SIZE or size > n - start - _LOG_OVERHEAD:
                raise CorruptRecordError(f"inner message at position {start} has size {size}",
                                         position=start + 8)
            if buf[start + 16] != magic:
                raise CorruptRecordError(
                    f"inner message at position {start} has magic {buf[start + 16]}, "
                    f"its wrapper {magic}", position=start + 16)
            end = start + _LOG_OVERHEAD + size
            offset, timestamp, attributes, pos = self.legacy_message(buf, start, end, magic)
            if attributes & 0x07:
                raise CorruptRecordError(f"inner message at position {start} is itself compressed",
                                         position=start + 17)
            key, pos = self.legacy_bytes(buf, pos, end, start)
            value, pos = self.legacy_bytes(buf, pos, end, start)
            if pos != end:
                raise CorruptRecordError(
                    f"inner message at position {start} has {end - pos} bytes after its value",
                    position=pos)
            if wrapper_ts_type == 1:
                timestamp = wrapper_ts
            records.append(self.legacy_record(offset, timestamp,
                                              wrapper_ts_type if magic == 1 else -1, key, value))
        if not records:
            raise CorruptRecordError("compressed message holds no inner messages", position=0)
        if magic == 1:
            # relative inner offsets; a wrapper offset below the last one (a producer's message
            # set) leaves them as they are, as Kafka's Java client does
            last_rel = records[-1].offset
            base = _wrap64(wrapper_offset - last_rel)
            if base >= 0:
                for r in records:
                    r.offset = _wrap64(base + r.offset)
        return records


def _make_batch(e: _Entry, records: list[Record]) -> RecordBatch:
    b = object.__new__(RecordBatch)
    b.base_offset = e.base_offset
    b.last_offset = e.last_offset
    b.magic = e.magic
    b.compression = _CODEC_NAMES[e.codec]
    b.is_transactional = e.is_transactional
    b.is_control = e.is_control
    b.producer_id = e.producer_id
    b.producer_epoch = e.producer_epoch
    b.base_sequence = e.base_sequence
    b.partition_leader_epoch = e.partition_leader_epoch
    b.timestamp_type = e.timestamp_type
    b.first_timestamp = e.first_timestamp
    b.max_timestamp = e.max_timestamp
    b.records = records
    b.size_bytes = e.size
    return b


class _RecordIterator:
    """iter_records' iterator: record_bytes, stop_at and exhausted as the compiled twin's."""
    __slots__ = ("_dec", "_cur", "stop_at", "record_cost", "handed", "exhausted")
    _cur: Iterator[Record] | None

    def __init__(self, dec: _Decoder) -> None:
        self._dec = dec
        self._cur = None
        self.stop_at = -1
        self.record_cost = 0
        self.handed = 0
        self.exhausted = False

    def __iter__(self) -> _RecordIterator:
        return self

    def take(self, n: int) -> list[Record]:
        """``list(islice(self, n))``, as the compiled twin's ``take``."""
        return list(itertools.islice(self, n))

    def __next__(self) -> Record:
        dec = self._dec
        while True:
            cur = self._cur
            if cur is not None:
                try:
                    r = next(cur)
                except StopIteration:
                    self._cur = None
                else:
                    self.handed += 1
                    return r
            if self.exhausted or (self.stop_at >= 0 and dec.data_bytes
                                  + self.handed * self.record_cost >= self.stop_at):
                raise StopIteration
            e = dec.next_entry()
            if e is None:
                self.exhausted = True
                raise StopIteration
            if e.is_control:
                continue
            run = dec.run
            if run is not None:
                self._cur = dec.lazy_records(run)
            else:
                records = dec.records
                assert records is not None  # (a complete entry, not lazy: its records)
                dec.records = None
                self._cur = iter(records)

    @property
    def record_bytes(self) -> int:
        """Bytes of record data (after decompression) in the batches entered so far: what
        the records handed out, and the rest of the current batch, may cost."""
        return self._dec.data_bytes


def _batches_gen(dec: _Decoder) -> Iterator[RecordBatch]:
    while True:
        e = dec.next_entry()
        if e is None:
            return
        records = dec.records
        assert records is not None  # (not lazy, no sink: every entry's records)
        dec.records = None
        yield _make_batch(e, records)


def iter_records(data: Buffer, check_crc: bool = True, topic: str | None = None,
                 partition: int = -1, leader_epoch_default: int = -1, *,
                 max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                 max_ahead_bytes: int | None = None,
                 ranges: Iterable[tuple[int, int]] | None = None) -> _RecordIterator:
    """Iterate the user records in ``data`` (a Fetch response's record set).

    Control batches are left out; a truncated entry at the end is skipped.  Each record gets
    ``topic``/``partition``, and ``leader_epoch`` from its batch (``leader_epoch_default``
    when the batch has none).  Raises CorruptRecordError (a KwireError) on malformed data,
    DecompressionLimitError (one) when a batch decompresses to more than
    ``max_decompressed_bytes``.  ``max_ahead_bytes`` bounds what a decompression worker holds
    ahead (this twin has none: one batch is decompressed at a time).  ``record_bytes``,
    ``handed``, ``record_cost``, ``stop_at`` and ``exhausted`` as in the compiled twin.

    ``ranges``: decode only these ``(start, end)`` byte ranges of ``data`` (ordered, not
    overlapping; kwire.records.record_runs gives them), one after the other with one decoder,
    each as if it were a record set of its own; error positions stay positions in ``data``.
    """
    _check_ahead(max_ahead_bytes)
    dec = _Decoder(data, check_crc, topic, partition, leader_epoch_default,
                   max_decompressed_bytes)
    dec.lazy = True
    if ranges is not None:
        dec.ranges = _ranges(ranges, dec.end)
        dec.end = 0  # (the first next_entry moves to the first range)
    return _RecordIterator(dec)


def _ranges(ranges: Any, n: int) -> list[tuple[int, int]]:
    """iter_records' ranges: (start, end) byte ranges of the buffer, in order, not overlapping."""
    out = []
    prev = 0
    for r in ranges:
        a, b = r
        a, b = operator.index(a), operator.index(b)
        if a < prev or b < a or b > n:
            raise ValueError(f"ranges must be ordered, non-overlapping (start, end) byte ranges "
                             f"of the buffer ({n} bytes); got {r!r}")
        out.append((a, b))
        prev = b
    return out


def _check_ahead(max_ahead_bytes: int | None) -> None:
    if max_ahead_bytes is not None:
        operator.index(max_ahead_bytes)  # (a TypeError as the compiled twin's)


def iter_batches(data: Buffer, check_crc: bool = True, *, topic: str | None = None,
                 partition: int = -1, leader_epoch_default: int = -1,
                 max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                 max_ahead_bytes: int | None = None) -> Iterator[RecordBatch]:
    """Iterate the RecordBatch entries in ``data``, control batches included
    (``max_ahead_bytes`` as for iter_records)."""
    _check_ahead(max_ahead_bytes)
    dec = _Decoder(data, check_crc, topic, partition, leader_epoch_default,
                   max_decompressed_bytes)
    return _batches_gen(dec)


# --- columns ----------------------------------------------------------------------------

class _Columns:
    __slots__ = ("offset", "timestamp", "timestamp_type", "key_offsets", "key_valid",
                 "value_offsets", "value_valid", "header_offsets", "header_key_offsets",
                 "header_value_offsets", "header_value_valid", "key_data", "value_data",
                 "header_key_data", "header_value_data")

    def __init__(self) -> None:
        self.offset = array("q")
        self.timestamp = array("q")
        self.timestamp_type = array("b")
        self.key_offsets = array("i", [0])
        self.key_valid = bytearray()
        self.value_offsets = array("i", [0])
        self.value_valid = bytearray()
        self.header_offsets = array("i", [0])
        self.header_key_offsets = array("i", [0])
        self.header_value_offsets = array("i", [0])
        self.header_value_valid = bytearray()
        self.key_data = bytearray()
        self.value_data = bytearray()
        self.header_key_data = bytearray()
        self.header_value_data = bytearray()

    @staticmethod
    def _check(name: str, data: bytearray) -> None:
        if len(data) > 0x7FFFFFFF:
            raise ProtocolError(f"{name} would exceed 2 GiB (int32 offsets); decode smaller inputs",
                                position=None)

    def append(self, r: Record) -> None:
        self.offset.append(r.offset)
        self.timestamp.append(r.timestamp)
        self.timestamp_type.append(r.timestamp_type)
        if r.key is not None:
            self.key_data += r.key
            self._check("key_data", self.key_data)
        self.key_valid.append(r.key is not None)
        self.key_offsets.append(len(self.key_data))
        if r.value is not None:
            self.value_data += r.value
            self._check("value_data", self.value_data)
        self.value_valid.append(r.value is not None)
        self.value_offsets.append(len(self.value_data))
        for k, v in r.headers:
            self.header_key_data += k.encode("utf-8", "surrogateescape")
            self._check("header_key_data", self.header_key_data)
            self.header_key_offsets.append(len(self.header_key_data))
            if v is not None:
                self.header_value_data += v
                self._check("header_value_data", self.header_value_data)
            self.header_value_valid.append(v is not None)
            self.header_value_offsets.append(len(self.header_value_data))
        self.header_offsets.append(len(self.header_key_offsets) - 1)

    def finish(self) -> dict[str, Any]:
        out: dict[str, Any] = {"num_records": len(self.offset)}
        for name in ("offset", "timestamp", "timestamp_type", "key_offsets", "key_valid",
                     "value_offsets", "value_valid", "header_offsets", "header_key_offsets",
                     "header_value_offsets", "header_value_valid", "key_data", "value_data",
                     "header_key_data", "header_value_data"):
            col = getattr(self, name)
            if isinstance(col, array):
                fmt = col.typecode
                assert fmt in ("q", "b", "i")  # int64, int8, int32 columns (once per column)
                out[name] = memoryview(col.tobytes()).cast(fmt)
            elif name.endswith("_valid"):
                out[name] = memoryview(bytes(col)).cast("?")
            else:
                out[name] = memoryview(bytes(col))
        return out


def decode_columns(data: Buffer, check_crc: bool = True, *,
                   max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                   ranges: Iterable[tuple[int, int]] | None = None) -> dict[str, Any]:
    """Decode every user record in ``data`` into column buffers (see kwire.records).

    Returns a dict: ``num_records``; ``offset``/``timestamp`` (int64), ``timestamp_type``
    (int8); ``key_offsets``/``value_offsets`` (int32, n+1) into ``key_data``/``value_data``
    with ``key_valid``/``value_valid`` (bool); ``header_offsets`` (int32, n+1) into the
    flattened headers: ``header_key_offsets`` + ``header_key_data`` (UTF-8),
    ``header_value_offsets`` + ``header_value_data`` + ``header_value_valid``.  Every column
    is a read-only memoryview with its item format.  Control batches are left out.

    ``ranges``: decode only these ``(start, end)`` byte ranges of ``data``, into one set of
    columns, as iter_records(ranges=) does (kwire.records.record_runs gives them).
    """
    dec = _Decoder(data, check_crc, None, -1, -1, max_decompressed_bytes)
    if ranges is not None:
        dec.ranges = _ranges(ranges, dec.end)
        dec.end = 0  # (the first next_entry moves to the first range)
    sink = dec.sink = _Columns()
    while dec.next_entry() is not None:
        pass
    return sink.finish()


# --- building ---------------------------------------------------------------------------

def _uvarint_bytes(v: int, out: bytearray) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _zz_bytes(v: int, out: bytearray) -> None:
    _uvarint_bytes(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF, out)


def _nullable(b: Buffer | None, out: bytearray) -> None:
    if b is None:
        _zz_bytes(-1, out)
        return
    data = memoryview(b).tobytes()
    _zz_bytes(len(data), out)
    out += data


def _int64(value: SupportsIndex) -> int:
    v = operator.index(value)
    if not -(1 << 63) <= v < (1 << 63):
        raise OverflowError(f"{v} does not fit in int64")
    return v


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return bytes(cramjam.gzip.compress(data))
    if codec == 2:
        # xerial framing, as the Java producer writes it
        out = bytearray(_XERIAL_HEADER)
        mv = memoryview(data)
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(mv[i:i + _XERIAL_BLOCK]))
            out += len(block).to_bytes(4, "big")
            out += block
        return bytes(out)
    if codec == 3:
        # independent blocks: the Java consumer does not accept linked LZ4 blocks
        comp = cramjam.lz4.Compressor(None, False, False)
        comp.compress(data)
        return bytes(comp.finish())
    return bytes(cramjam.zstd.compress(data))


def build_batch(records: Iterable[tuple[Buffer | None, Buffer | None,
                                       Iterable[tuple[str, Buffer | None]] | None, int | None]],
                base_offset: int = 0, compression: str = "none", *, magic: int = 2,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                is_transactional: bool = False, timestamp_type: int = 0,
                partition_leader_epoch: int = -1, is_control: bool = False) -> bytes:
    """Encode one magic-2 record batch.  Each record is ``(key, value, headers, timestamp_ms)``
    with key/value bytes-like or None, headers an iterable of ``(str, bytes-like | None)``,
    and timestamp_ms an int (None: now).  Offsets are base_offset, base_offset + 1, ...
    """
    if magic != 2:
        raise ValueError(f"build_batch encodes magic 2 only, not {magic!r}")
    try:
        codec = _CODEC_NAMES.index(compression)
    except ValueError:
        raise ValueError(f"unknown compression {compression!r}; use one of {_CODEC_NAMES}") from None
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type!r}")
    items: list[tuple[Buffer | None, Buffer | None, Iterable[tuple[str, Buffer | None]] | None,
                      int]] = []
    now_ms: int | None = None
    for item in records:
        key, value, headers, timestamp = item
        if timestamp is None:
            if now_ms is None:
                now_ms = int(time.time() * 1000)
            timestamp = now_ms
        items.append((key, value, headers, timestamp))
    count = len(items)
    first_ts = max_ts = -1
    if count:
        first_ts = _int64(items[0][3])
        max_ts = _int64(max(it[3] for it in items))
    body = bytearray()
    for i, (key, value, headers, timestamp) in enumerate(items):
        ts = _int64(timestamp)
        rec = bytearray(b"\x00")                     # record attributes
        _zz_bytes(_wrap64(ts - first_ts), rec)
        _zz_bytes(i, rec)
        _nullable(key, rec)
        _nullable(value, rec)
        hl = list(headers) if headers is not None else []
        _zz_bytes(len(hl), rec)
        for hk, hv in hl:
            if not isinstance(hk, str):
                raise TypeError(f"header keys must be str, not {type(hk).__name__}")
            _nullable(hk.encode("utf-8", "surrogateescape"), rec)
            _nullable(hv, rec)
        _zz_bytes(len(rec), body)
        body += rec
    payload = bytes(body)
    if codec:
        payload = _compress(codec, payload)
    attributes = (codec | (timestamp_type << 3) | (0x10 if is_transactional else 0)
                  | (0x20 if is_control else 0))
    try:
        head = struct.pack(">qiibIhiqqqhii", _int64(base_offset),
                           _V2_HEADER - _LOG_OVERHEAD + len(payload), partition_leader_epoch, 2, 0,
                           attributes, count - 1 if count else 0, first_ts, max_ts,
                           _int64(producer_id), producer_epoch, base_sequence, count)
    except struct.error as exc:
        raise OverflowError(str(exc)) from None
    out = bytearray(head)
    out += payload
    out[17:21] = _crc32c(memoryview(out)[_V2_CRC_START:]).to_bytes(4, "big")
    return bytes(out)
