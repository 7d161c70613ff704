# Record batches (magic 2) and legacy message sets (magic 0/1).
#
# The pure-Python reference is kwire/_pycodec/records.py: same API, same checks in the same
# order, so both twins raise the same error class at the same position for the same bytes.
#
# A Fetch response's record set is a concatenation of entries, each framed the same way:
#
#   offset        int64    base offset (v2) / message offset (v0, v1)
#   size          int32    bytes that follow this field
#   ...           (size bytes; byte 16 of the entry is the magic in every format)
#
# Record batch, magic 2 (KIP-98):
#
#   baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (2)
#   crc uint32 (CRC-32C of attributes..end) | attributes int16 | lastOffsetDelta int32
#   baseTimestamp int64 | maxTimestamp int64 | producerId int64 | producerEpoch int16
#   baseSequence int32 | recordsCount int32 | records (compressed as one block if codec != 0)
#
#   attributes: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 timestamp
#   type (1 = LogAppendTime: every record's timestamp is maxTimestamp), bit 4 transactional,
#   bit 5 control batch.
#
#   record: length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
#           keyLength varint | key | valueLength varint | value
#           headerCount varint | [headerKeyLength varint | key (utf-8) | headerValueLength varint | value]
#   (lengths -1 mean null; zigzag varints throughout)
#
# Legacy message, magic 0/1:
#
#   offset int64 | messageSize int32 | crc uint32 (CRC-32 of magic..end) | magic int8
#   attributes int8 | [timestamp int64, magic 1 only] | keyLength int32 | key
#   valueLength int32 | value
#
#   attributes: bits 0-2 codec, bit 3 timestamp type (magic 1).  A compressed message is a
#   wrapper whose value is a compressed message set of inner messages; in magic 1 the inner
#   offsets are relative: absolute = wrapper offset - last inner offset + inner offset (unless
#   that is negative: a producer's wrapper at offset 0 keeps the inner offsets as they are).
#
# A truncated entry at the end of the buffer is normal (Fetch responses are cut at max
# bytes) and is skipped.  Anything wrong inside a complete entry raises CorruptRecordError
# (UnsupportedCompressionError for an unknown codec) carrying the input position.
#
# scan_spans (below, "the header scan") walks the same framing reading headers only; the
# decoder frames its entries with the same function (_rec_frame).

cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM, PyTuple_GET_ITEM
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.mem cimport PyMem_Realloc, PyMem_Free
from libc.string cimport memcmp

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op)

cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char* mem, Py_ssize_t size, int flags)
    int PyBUF_READ
    int PyBUF_WRITE

import time as _time
import zlib as _zlib
import cramjam as _cramjam
import xxhash as _xxhash
from kwire._crc import crc32c as _crc32c
from kwire.errors import KwireError as _KwireError


cdef enum:
    _LOG_OVERHEAD = 12          # offset + size, in front of every entry
    _MIN_ENTRY_SIZE = 14        # smallest legal size field (a v0 message with null key/value)
    _V0_MIN_SIZE = 14
    _V1_MIN_SIZE = 22
    _V2_HEADER = 61             # bytes before the first record of a v2 batch
    _V2_MIN_LENGTH = 49         # _V2_HEADER - _LOG_OVERHEAD
    _V2_CRC_START = 21          # the v2 CRC covers attributes..end
    _MIN_RECORD = 7             # smallest v2 record: seven one-byte varints/fields
    _HK_SLOTS = 8               # header-key cache: one entry per header position
    _HEADER_MISSES_MAX = 32     # header-pair sharing: differing values in a row before giving up
    _READ_OFFSET = 1            # which of a Record's computed fields were read (Record._reads)
    _READ_TIMESTAMP = 2
    _READ_HEADERS = 4
    _READ_ALL = 7
    _READ_SAMPLE_EVERY = 64     # iterating Records: every this many, see whether it was read in full
    _READ_PROBE_EVERY = 1024    # iterating _ReadRecords: every this many a Record, to see the same
    _HK_MAX = 64                # longest header key the cache remembers

_CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
_XERIAL_BLOCK = 32 * 1024       # xerial's (and the Java producer's) block size
# The most one batch (or legacy wrapper) may decompress to; the consumer passes its
# fetch.max.decompressed.bytes (kwire.config says why 64 MiB).  Keep equal to the twin's.
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


# --- the user-facing objects -----------------------------------------------------------

cdef inline list _rec_headers_list(object h):
    # The headers list of the decoder's forms (None: no headers, a tuple: the only header);
    # untracked, as the decoder's lists (see Record's doc)
    cdef list out
    if h is None:
        out = PyList_New(0)
    else:
        out = PyList_New(1)
        Py_INCREF(h)
        PyList_SET_ITEM(out, 0, h)
    PyObject_GC_UnTrack(<void*>out)
    return out


@cython.no_gc
@cython.freelist(1024)
cdef class Record:
    """One record: ``offset``, ``timestamp`` (ms), ``timestamp_type`` (0 CreateTime,
    1 LogAppendTime, -1 none: magic 0), ``key``/``value`` (bytes or None), ``headers``
    (list of ``(str, bytes | None)``), and where it came from: ``topic``, ``partition``,
    ``leader_epoch`` (-1 when unknown), which the consumer sets.

    Records do not take part in cyclic garbage collection (they are created by the million),
    nor do the ``headers`` lists and tuples the decoder makes; do not put a Record (or any
    container that could point back to it) inside its own ``headers`` list.

    A record without headers holds no list until ``headers`` is first read (then an empty
    one, the same list on every read): most records have none, and a list per record was a
    third of the decoder's allocations and what set the collector's clock going.  Likewise a
    record with one header holds just its ``(key, value)`` tuple until then.

    Iterating records (``iter_records``), an application that reads every record's offset,
    timestamp and headers before asking for the next gets instances of a private subclass
    with the same values, those three made while decoding (see ``_ReadRecord``): test with
    ``isinstance``, not ``type``.
    """
    cdef int64_t _offset
    cdef int64_t _timestamp
    cdef readonly int timestamp_type
    cdef uint8_t _reads             # _READ_* bits: which of the computed fields were read
                                    # (here, in timestamp_type's padding: Record stays 80 bytes)
    cdef readonly bytes key
    cdef readonly bytes value
    # the headers list; or None: no headers, or a tuple: the only header (the decoder's
    # forms, made into the list when headers is first read)
    cdef object _headers
    cdef public str topic
    cdef public int32_t partition
    cdef public int32_t leader_epoch

    def __init__(self, offset, timestamp, timestamp_type, key, value, headers=None,
                 topic=None, partition=-1, leader_epoch=-1):
        if type(self) is not Record:  # (a _ReadRecord's slots would keep the decoded values)
            raise TypeError("only a Record can be initialised; the decoder makes the others")
        self._offset = offset
        self._timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = None if key is None else bytes(key)
        self.value = None if value is None else bytes(value)
        self._headers = None if headers is None else list(headers)
        self.topic = topic
        self.partition = partition
        self.leader_epoch = leader_epoch

    @property
    def offset(self):
        """The record's offset in its partition."""
        self._reads |= _READ_OFFSET
        return self._offset

    @property
    def timestamp(self):
        """The record's timestamp (ms since the epoch; -1 none)."""
        self._reads |= _READ_TIMESTAMP
        return self._timestamp

    @property
    def headers(self):
        """The record's headers: a list of ``(str, bytes | None)``."""
        self._reads |= _READ_HEADERS
        cdef object h = self._headers
        if type(h) is list:
            return h
        h = _rec_headers_list(h)
        self._headers = h
        return h

    def to_tuple(self):
        """``(offset, timestamp, timestamp_type, key, value, headers, topic, partition, leader_epoch)``"""
        return (self._offset, self._timestamp, self.timestamp_type, self.key, self.value,
                self.headers, self.topic, self.partition, self.leader_epoch)

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        cdef Record o = <Record>other
        return (self._offset == o._offset and self._timestamp == o._timestamp
                and self.timestamp_type == o.timestamp_type and self.key == o.key
                and self.value == o.value and self.headers == o.headers
                and self.topic == o.topic and self.partition == o.partition
                and self.leader_epoch == o.leader_epoch)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __reduce__(self):
        return (Record, self.to_tuple())

    def __repr__(self):
        return (f"Record(offset={self._offset}, timestamp={self._timestamp}, "
                f"timestamp_type={self.timestamp_type}, key={self.key!r}, value={self.value!r}, "
                f"headers={self.headers!r}, topic={self.topic!r}, partition={self.partition}, "
                f"leader_epoch={self.leader_epoch})")


# Record.key and Record.value as member descriptors (T_OBJECT_EX, read-only) in place of the
# getset properties Cython makes: the interpreter specialises attribute loads through member
# descriptors (LOAD_ATTR_SLOT), so ``record.value`` in an application's loop costs what a
# __slots__ attribute does (a loop reading value and its length: 29 instead of 42 ns a record).
from cpython.object cimport PyTypeObject

cdef extern from *:
    # (Cython's name for Record's object struct; a rename fails the build, never silently)
    """
    #define KW_RECORD_KEY_OFFSET ((Py_ssize_t)offsetof(struct __pyx_obj_5kwire_6_codec_Record, key))
    #define KW_RECORD_VALUE_OFFSET ((Py_ssize_t)offsetof(struct __pyx_obj_5kwire_6_codec_Record, value))
    """
    Py_ssize_t KW_RECORD_KEY_OFFSET
    Py_ssize_t KW_RECORD_VALUE_OFFSET

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
        const char* doc
    int T_OBJECT_EX
    int READONLY

cdef extern from "Python.h":
    unsigned long Py_TPFLAGS_BASETYPE
    object PyDescr_NewMember(PyTypeObject* t, PyMemberDef* m)
    void PyType_Modified(PyTypeObject* t)
    int PyDict_SetItemString(PyObject* d, const char* key, object val) except -1

cdef PyMemberDef _RECORD_MEMBERS[2]


cdef _member_descriptors(object cls, PyMemberDef* members, int n, names, offsets, docs):
    # read-only T_OBJECT_EX member descriptors for the given slots, put in cls's dict
    cdef PyTypeObject* t = <PyTypeObject*>cls
    cdef int i
    for i in range(n):
        members[i].name = <const char*>names[i]
        members[i].offset = offsets[i]
        members[i].doc = <const char*>docs[i]
        members[i].type = T_OBJECT_EX
        members[i].flags = READONLY
        PyDict_SetItemString(t.tp_dict, members[i].name, PyDescr_NewMember(t, &members[i]))
    PyType_Modified(t)


# (the descriptors point into these bytes: module globals, they live as long as the types)
_RECORD_MEMBER_TEXTS = ((b"key", b"value"),
                        (b"The record's key (bytes), or None.", b"The record's value (bytes), or None."))
_member_descriptors(Record, _RECORD_MEMBERS, 2, _RECORD_MEMBER_TEXTS[0],
                    (KW_RECORD_KEY_OFFSET, KW_RECORD_VALUE_OFFSET), _RECORD_MEMBER_TEXTS[1])


@cython.final
@cython.no_gc
cdef class _ReadRecord(Record):
    """A Record made for an application that reads offset, timestamp and headers.

    Record computes those three when they are read (an int object each, the headers list):
    a record that is only counted or whose value alone is read costs nothing for them.  Read
    through a getset, each costs ~9 ns more than a plain slot (CPython specialises attribute
    loads only for object slots).  When an iterator's records have been read so (each
    decoder samples one record in 64: read in full before the next one was asked for), the
    decoder makes this subclass instead, with the three made at decoding and served from
    object slots (member descriptors), and a Record every 1024 records whose reading decides
    whether it goes on.  The values are the same, ``type(r)`` is not.
    """
    cdef object _offset_obj
    cdef object _timestamp_obj

    def __init__(self, *args, **kwargs):
        raise TypeError("_ReadRecord is made by the decoder; construct a Record")

    def __reduce__(self):
        return (Record, self.to_tuple())


cdef extern from *:
    """
    #define KW_READ_OFFSET_OFFSET ((Py_ssize_t)offsetof(struct __pyx_obj_5kwire_6_codec__ReadRecord, _offset_obj))
    #define KW_READ_TIMESTAMP_OFFSET ((Py_ssize_t)offsetof(struct __pyx_obj_5kwire_6_codec__ReadRecord, _timestamp_obj))
    #define KW_RECORD_HEADERS_OFFSET ((Py_ssize_t)offsetof(struct __pyx_obj_5kwire_6_codec_Record, _headers))
    """
    Py_ssize_t KW_READ_OFFSET_OFFSET
    Py_ssize_t KW_READ_TIMESTAMP_OFFSET
    Py_ssize_t KW_RECORD_HEADERS_OFFSET

cdef PyMemberDef _READ_RECORD_MEMBERS[3]
_READ_RECORD_MEMBER_TEXTS = ((b"offset", b"timestamp", b"headers"),
                             (b"The record's offset in its partition.",
                              b"The record's timestamp (ms since the epoch; -1 none).",
                              b"The record's headers: a list of ``(str, bytes | None)``."))
_member_descriptors(_ReadRecord, _READ_RECORD_MEMBERS, 3, _READ_RECORD_MEMBER_TEXTS[0],
                    (KW_READ_OFFSET_OFFSET, KW_READ_TIMESTAMP_OFFSET, KW_RECORD_HEADERS_OFFSET),
                    _READ_RECORD_MEMBER_TEXTS[1])


# Python code may not subclass Record (as before _ReadRecord): only the decoder makes subclasses
(<PyTypeObject*>Record).tp_flags &= ~Py_TPFLAGS_BASETYPE
PyType_Modified(<PyTypeObject*>Record)


@cython.final
cdef class RecordBatch:
    """One v2 record batch, or one legacy (magic 0/1) message with its inner messages.

    ``records`` holds every record, including a control batch's control records (which
    iter_records leaves out).  For legacy entries the producer fields are -1 and
    ``max_timestamp`` is the (wrapper) message's timestamp.
    """
    cdef readonly int64_t base_offset
    cdef readonly int64_t last_offset
    cdef readonly int magic
    cdef readonly str compression
    cdef readonly bint is_transactional
    cdef readonly bint is_control
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int timestamp_type
    cdef readonly int64_t first_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly list records
    cdef readonly Py_ssize_t size_bytes

    def __init__(self, base_offset, last_offset, magic, compression, is_transactional,
                 is_control, producer_id, producer_epoch, base_sequence,
                 partition_leader_epoch, timestamp_type, first_timestamp, max_timestamp,
                 records, size_bytes):
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.magic = magic
        self.compression = compression
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self.timestamp_type = timestamp_type
        self.first_timestamp = first_timestamp
        self.max_timestamp = max_timestamp
        self.records = list(records)
        self.size_bytes = size_bytes

    def to_tuple(self):
        return (self.base_offset, self.last_offset, self.magic, self.compression,
                self.is_transactional, self.is_control, self.producer_id, self.producer_epoch,
                self.base_sequence, self.partition_leader_epoch, self.timestamp_type,
                self.first_timestamp, self.max_timestamp, self.records, self.size_bytes)

    def __len__(self):
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __eq__(self, other):
        if not isinstance(other, RecordBatch):
            return NotImplemented
        return self.to_tuple() == (<RecordBatch>other).to_tuple()

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __reduce__(self):
        return (RecordBatch, self.to_tuple())

    def __repr__(self):
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"magic={self.magic}, compression={self.compression!r}, "
                f"records={len(self.records)}, is_transactional={self.is_transactional}, "
                f"is_control={self.is_control}, producer_id={self.producer_id}, "
                f"size_bytes={self.size_bytes})")


# --- shared small helpers --------------------------------------------------------------

cdef inline int64_t _rec_add64(int64_t a, int64_t b) noexcept nogil:
    # Two's-complement wrap instead of C's undefined signed overflow (the twin does the same).
    return <int64_t>(<uint64_t>a + <uint64_t>b)


cdef object _rec_view(const uint8_t* p, Py_ssize_t n):
    # A read-only memoryview over memory we already hold (the input or a decompressed block).
    return PyMemoryView_FromMemory(<char*>p, n, PyBUF_READ)


cdef object _rec_rewrap(exc, Py_ssize_t start, bint decompressed):
    # Inside a complete entry every malformation is corruption.  Positions inside a
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


cdef int64_t _rec_snappy_bound(const uint8_t* p, Py_ssize_t n, Py_ssize_t position) except -1:
    # A raw snappy block starts with its uncompressed length (uvarint).  cramjam allocates
    # that much up front and aborts the process if it cannot, so the claim is checked
    # against the most that n compressed bytes can expand to (a 3-byte copy emits at most
    # 64 bytes: about 21x).  Returns the claim (the exact size the block decompresses to).
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef Py_ssize_t i = 0
    cdef uint8_t b
    while True:
        if i >= n or shift > 28:
            raise CorruptRecordError(f"bad snappy length preamble at position {position}",
                                     position=position)
        b = p[i]
        i += 1
        v |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            break
        shift += 7
    if v > <uint64_t>n * 22 + 64:
        raise CorruptRecordError(
            f"snappy block at position {position} claims {v} bytes from {n} compressed bytes",
            position=position)
    return <int64_t>v


cdef object _rec_snappy(const uint8_t* p, Py_ssize_t n, Py_ssize_t position, Py_ssize_t limit,
                       where):
    # Raw snappy, or xerial framing (what the Java producer writes):
    #   magic 0x82 'SNAPPY' 0x00 | version int32 | compat int32 | [length int32 | raw block]...
    # A raw block's preamble is its exact uncompressed length, so the cap is checked on the
    # preambles (summed over xerial blocks) before anything is decompressed.
    cdef Py_ssize_t pos
    cdef int32_t blen
    cdef int64_t total = 0
    if n >= 16 and memcmp(p, b"\x82SNAPPY\x00", 8) == 0:
        pos = 16
        pieces = []
        while pos < n:
            if n - pos < 4:
                raise CorruptRecordError(f"truncated xerial snappy block length at position {position}",
                                         position=position)
            blen = <int32_t>ld_be32(p + pos)
            pos += 4
            if blen < 0 or blen > n - pos:
                raise CorruptRecordError(f"xerial snappy block length {blen} at position {position} "
                                         f"overruns the data", position=position)
            total += _rec_snappy_bound(p + pos, blen, position)
            if total > limit:
                raise _rec_limit_error(2, position, limit, where)
            pieces.append(_cramjam.snappy.decompress_raw(_rec_view(p + pos, blen)))
            pos += blen
        if len(pieces) == 1:
            return pieces[0]
        return b"".join(pieces)
    if _rec_snappy_bound(p, n, position) > limit:
        raise _rec_limit_error(2, position, limit, where)
    return _cramjam.snappy.decompress_raw(_rec_view(p, n))


cdef object _rec_legacy_lz4(const uint8_t* p, Py_ssize_t n):
    # Kafka 0.8/0.9 wrote the LZ4 frame header checksum over magic+descriptor instead of the
    # descriptor alone.  If the byte matches that broken value, patch in the correct one.
    cdef Py_ssize_t dlen
    cdef uint8_t flg, hc
    if n < 7 or p[0] != 0x04 or p[1] != 0x22 or p[2] != 0x4D or p[3] != 0x18:
        return _rec_view(p, n)
    flg = p[4]
    dlen = 2 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if n < 4 + dlen + 1:
        return _rec_view(p, n)
    hc = p[4 + dlen]
    if hc == ((_xxhash.xxh32_intdigest(_rec_view(p + 4, dlen)) >> 8) & 0xFF):
        return _rec_view(p, n)
    broken = (_xxhash.xxh32_intdigest(_rec_view(p, 4 + dlen)) >> 8) & 0xFF
    if hc != broken:
        return _rec_view(p, n)  # the decoder will report the bad checksum
    fixed = bytearray(_rec_view(p, n))
    fixed[4 + dlen] = (_xxhash.xxh32_intdigest(_rec_view(p + 4, dlen)) >> 8) & 0xFF
    return fixed


cdef object _rec_limit_error(int codec, Py_ssize_t position, Py_ssize_t limit, where):
    # where: (topic, partition, offset) of the batch
    topic, partition, offset = where
    of = f" of {topic} [{partition}]" if topic is not None else ""
    return DecompressionLimitError(
        f"{_CODEC_NAMES[codec]} batch at offset {offset}{of} (the entry at position {position}) "
        f"decompresses to more than {limit} bytes (fetch.max.decompressed.bytes)",
        position=position, limit=limit, topic=topic,
        partition=partition if partition >= 0 else None, offset=offset)


cdef object _rec_bounded(int codec, fn, src, Py_ssize_t n, Py_ssize_t position, Py_ssize_t limit,
                         where):
    # gzip, lz4 or zstd into a block that starts at a few times the input and grows 4x, never
    # past limit + 1 bytes: output that fills that block is over the cap, and decompression
    # stops there (cramjam's *_into streams into the block and fails when it is full).
    # (the block is left uninitialised: the codec writes what it keeps, the rest is cut off)
    cdef Py_ssize_t size = min(n * 8 + 65536, limit + 1)
    while True:
        out = PyByteArray_FromStringAndSize(NULL, size)
        try:
            got = fn(src, out)
        except Exception as exc:
            if not _rec_short_output(exc):
                raise
            if size > limit:
                raise _rec_limit_error(codec, position, limit, where) from None
            size = min(size * 4, limit + 1)
            continue
        if got > limit:
            raise _rec_limit_error(codec, position, limit, where)
        del out[got:]
        return out


cdef object _rec_decompress(int codec, const uint8_t* p, Py_ssize_t n, int magic,
                            Py_ssize_t position, Py_ssize_t limit, where):
    # Returns a buffer-protocol object; its size is what the codec actually produced, at most
    # limit bytes (else DecompressionLimitError, before more than limit + 1 bytes are made).
    try:
        if codec == 1:
            return _rec_bounded(1, _cramjam.gzip.decompress_into, _rec_view(p, n), n, position,
                                limit, where)
        if codec == 2:
            return _rec_snappy(p, n, position, limit, where)
        if codec == 3:
            src = _rec_legacy_lz4(p, n) if magic < 2 else _rec_view(p, n)
            return _rec_bounded(3, _cramjam.lz4.decompress_into, src, n, position, limit, where)
        if codec == 4:
            return _rec_bounded(4, _cramjam.zstd.decompress_into, _rec_view(p, n), n, position,
                                limit, where)
    except _KwireError:
        raise
    except MemoryError:
        raise
    except Exception as exc:
        raise CorruptRecordError(
            f"{_CODEC_NAMES[codec]} decompression failed for the entry at position {position}: {exc}",
            position=position) from exc
    raise UnsupportedCompressionError(f"compression codec {codec} at position {position}",
                                      position=position)


# --- decompressing v2 batches into a reused block ------------------------------------------
# cramjam's decompress() returns a fresh buffer per batch; fresh memory costs a page fault per
# 4 KiB, which for lz4 costs more than the decompression itself.  v2 batches decompress into
# one scratch block per decoder instead (from the column pool, so the next call reuses it):
# the records are copied out before the next batch overwrites it.

cdef extern from *:
    """
    #define KWIRE_SCRATCH_LIMIT ((Py_ssize_t)1 << 31)
    """
    Py_ssize_t _SCRATCH_LIMIT "KWIRE_SCRATCH_LIMIT"

cdef int64_t _rec_frame_content_size(int codec, const uint8_t* p, Py_ssize_t n) noexcept:
    # The uncompressed size a zstd or lz4 frame header declares, or -1.
    #   zstd: magic 28 B5 2F FD | descriptor | [window] | [dict id 1/2/4] | [content size 1/2/4/8]
    #   lz4:  magic 04 22 4D 18 | FLG | BD | [content size u64 le, when FLG bit 3] | HC
    cdef uint8_t fhd
    cdef Py_ssize_t pos, fcs
    cdef uint64_t v = 0
    cdef int i
    if codec == 4 and n >= 6 and p[0] == 0x28 and p[1] == 0xB5 and p[2] == 0x2F and p[3] == 0xFD:
        fhd = p[4]
        pos = 5 + (0 if fhd & 0x20 else 1)
        pos += (0, 1, 2, 4)[fhd & 0x03]
        fcs = (1 if fhd & 0x20 else 0, 2, 4, 8)[fhd >> 6]
        if fcs == 0 or pos + fcs > n:
            return -1
        for i in range(fcs):
            v |= (<uint64_t>p[pos + i]) << (8 * i)
        if fcs == 2:
            v += 256
        return <int64_t>v if v < (<uint64_t>1 << 62) else -1
    if codec == 3 and n >= 15 and p[0] == 0x04 and p[1] == 0x22 and p[2] == 0x4D and p[3] == 0x18:
        if not (p[4] & 0x08):
            return -1
        for i in range(7):
            v |= (<uint64_t>p[6 + i]) << (8 * i)
        return <int64_t>v if p[13] == 0 else -1     # more than 2^56 bytes is not a size we believe
    return -1


cdef int _rec_busy() except -1:
    raise RuntimeError("a kwire record iterator was advanced by two threads at once")


cdef bint _rec_short_output(exc):
    # cramjam's *_into says this when the output block was too small
    return "failed to write whole buffer" in str(exc)


# --- the header scan: one walker for every caller ------------------------------------------
#
# scan_spans() reads only the headers of a record set's entries, so callers learn where the
# entries are and what they hold before (or instead of) decoding them: the consumer's next
# fetch offset and leader epoch, the read_committed filter (kwire.records.aborted_spans), the
# Spark reader's byte ranges.  What it reads of each entry:
#
#   every entry    offset int64 @0 | size int32 @8 (bytes that follow) | ... | magic int8 @16
#   magic 2        partitionLeaderEpoch int32 @12 | attributes int16 @21 | lastOffsetDelta
#                  int32 @23 | producerId int64 @43 | recordsCount int32 @57 | records @61
#   control batch  (uncompressed, recordsCount >= 1) its first record: length varint |
#                  attributes int8 | timestampDelta varlong | offsetDelta varint |
#                  keyLength varint | key = version int16 | type int16 (0 ABORT, 1 COMMIT)
#   magic 0/1      the entry's offset is its last offset (a compressed wrapper carries its
#                  last inner message's offset; its first is not in the header); no epoch,
#                  producer or transaction fields
#
# The framing is checked exactly as the decoder checks it (_rec_frame serves both): fewer
# than 12 bytes left, or a size past the end, is a truncated trailing entry and ends the
# scan; a size below 14, a magic 2 batch shorter than its header, or an unknown magic raises
# CorruptRecordError with the decoder's position.  Every read is checked against the end of
# the buffer.  CRCs and records are left to the decoder.

cdef enum:
    _SPAN_EPOCH = 12            # partitionLeaderEpoch in a v2 batch
    _SPAN_ATTRIBUTES = 21
    _SPAN_LAST_DELTA = 23
    _SPAN_PRODUCER = 43
    _SPAN_COUNT = 57
    _CONTROL_ABORT = 0


@cython.final
cdef class Span:
    """One complete entry of a record set, as its header tells it (see scan_spans).

    Bytes ``[start, end)`` of the scanned buffer; offsets ``base_offset..last_offset``;
    ``magic``; ``leader_epoch`` (partitionLeaderEpoch; -1 for magic 0/1); ``producer_id``
    (-1 for magic 0/1); ``is_transactional``, ``is_control``; ``control_type``, the type of
    an uncompressed control batch's first control record (0 ABORT, 1 COMMIT; -1 otherwise or
    unreadable).  For magic 0/1, ``base_offset`` is the entry's offset, which for a compressed
    wrapper is its last inner offset (the first is not in the header).
    """
    cdef readonly Py_ssize_t start
    cdef readonly Py_ssize_t end
    cdef readonly int64_t base_offset
    cdef readonly int64_t last_offset
    cdef readonly int magic
    cdef readonly int32_t leader_epoch
    cdef readonly int64_t producer_id
    cdef readonly bint is_transactional
    cdef readonly bint is_control
    cdef readonly int control_type

    def __init__(self, start, end, base_offset, last_offset, magic, leader_epoch, producer_id,
                 is_transactional, is_control, control_type=-1):
        self.start = start
        self.end = end
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.magic = magic
        self.leader_epoch = leader_epoch
        self.producer_id = producer_id
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.control_type = control_type

    def to_tuple(self):
        return (self.start, self.end, self.base_offset, self.last_offset, self.magic,
                self.leader_epoch, self.producer_id, self.is_transactional, self.is_control,
                self.control_type)

    def __eq__(self, other):
        if not isinstance(other, Span):
            return NotImplemented
        return self.to_tuple() == (<Span>other).to_tuple()

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __reduce__(self):
        return (Span, self.to_tuple())

    def __repr__(self):
        return ("Span(start=%d, end=%d, base_offset=%d, last_offset=%d, magic=%d, "
                "leader_epoch=%d, producer_id=%d, is_transactional=%s, is_control=%s, "
                "control_type=%d)" % self.to_tuple())


cdef inline int _rec_frame_size(const uint8_t* buf, Py_ssize_t start, Py_ssize_t end,
                                int32_t* size) noexcept nogil:
    # 1: a complete entry starts at `start` (its size field in *size); 0: the buffer ends
    # inside it (a truncated trailing entry); -1: its size is one no entry can have.  Every
    # walk over a record set's entries frames them with this function: the decoder
    # (next_entry, through _rec_frame), the decompression worker's look-ahead (start_pipe)
    # and scan_spans.
    cdef Py_ssize_t remaining = end - start
    if remaining < _LOG_OVERHEAD:
        return 0
    size[0] = <int32_t>ld_be32(buf + start + 8)
    if size[0] < _MIN_ENTRY_SIZE:
        return -1
    if size[0] > remaining - _LOG_OVERHEAD:
        return 0
    return 1


cdef inline int _rec_frame(const uint8_t* buf, Py_ssize_t start, Py_ssize_t end,
                           int32_t* size) except -1:
    # _rec_frame_size, with the impossible size raised as corruption.
    cdef int r = _rec_frame_size(buf, start, end, size)
    if r < 0:
        raise CorruptRecordError(
            f"entry at position {start} has size {size[0]}, smaller than any record",
            position=start + 8)
    return r


cdef object _rec_short_batch(Py_ssize_t start, int32_t batch_length):
    return CorruptRecordError(
        f"batch at position {start} has length {batch_length}, shorter than its header",
        position=start + 8)


cdef object _rec_bad_magic(Py_ssize_t start, int magic):
    return CorruptRecordError(f"unknown magic {magic} in the entry at position {start}",
                              position=start + 16)


cdef inline uint64_t _rec_ld_be64(const uint8_t* p) noexcept nogil:
    return (<uint64_t>ld_be32(p) << 32) | <uint64_t>ld_be32(p + 4)


cdef inline Py_ssize_t _rec_scan_uvarint(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end,
                                         uint64_t* out) noexcept nogil:
    # An unsigned varint of at most 10 bytes ending before `end`: the position after it, or
    # -1 (the caller then gives up quietly; the decoder reports what is wrong).
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    while shift < 70:
        if pos >= end:
            return -1
        b = buf[pos]
        pos += 1
        v |= (<uint64_t>(b & 0x7F)) << shift
        if not b & 0x80:
            out[0] = v
            return pos
        shift += 7
    return -1


cdef int _rec_control_type(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    # The type in the key of the control record at `pos` (an uncompressed control batch's
    # first record; see the layout above), or -1 when it cannot be read.
    cdef uint64_t v
    cdef int64_t key_length
    pos = _rec_scan_uvarint(buf, pos, end, &v)      # length
    if pos < 0 or pos >= end:
        return -1
    pos += 1                                        # attributes
    pos = _rec_scan_uvarint(buf, pos, end, &v)      # timestampDelta
    if pos < 0:
        return -1
    pos = _rec_scan_uvarint(buf, pos, end, &v)      # offsetDelta
    if pos < 0:
        return -1
    pos = _rec_scan_uvarint(buf, pos, end, &v)      # keyLength (zigzag)
    if pos < 0:
        return -1
    key_length = <int64_t>(v >> 1) ^ -(<int64_t>(v & 1))
    if key_length < 4 or key_length > end - pos:
        return -1
    return <int16_t>((<uint16_t>buf[pos + 2] << 8) | buf[pos + 3])


cdef list _rec_scan(const uint8_t* buf, Py_ssize_t end, bint until_damage):
    cdef list out = []
    cdef Py_ssize_t pos = 0, stop
    cdef int32_t size
    cdef int magic
    cdef uint16_t attributes
    cdef Span s
    try:
        # _rec_frame checked the size against what is left of the buffer, so every read
        # below is inside the entry: byte 16 (size >= 14), the 61-byte v2 header (size >= 49
        # is checked first), the control record (bounded by `stop`).
        while _rec_frame(buf, pos, end, &size):
            stop = pos + _LOG_OVERHEAD + size
            magic = buf[pos + 16]
            s = Span.__new__(Span)
            s.start = pos
            s.end = stop
            s.base_offset = <int64_t>_rec_ld_be64(buf + pos)
            s.magic = magic
            s.control_type = -1
            if magic == 2:
                if size < _V2_MIN_LENGTH:
                    raise _rec_short_batch(pos, size)
                attributes = (<uint16_t>buf[pos + _SPAN_ATTRIBUTES] << 8) | buf[pos + _SPAN_ATTRIBUTES + 1]
                s.last_offset = _rec_add64(s.base_offset,
                                           <int32_t>ld_be32(buf + pos + _SPAN_LAST_DELTA))
                s.leader_epoch = <int32_t>ld_be32(buf + pos + _SPAN_EPOCH)
                s.producer_id = <int64_t>_rec_ld_be64(buf + pos + _SPAN_PRODUCER)
                s.is_transactional = (attributes & 0x10) != 0
                s.is_control = (attributes & 0x20) != 0
                if (s.is_control and (attributes & 0x07) == 0
                        and <int32_t>ld_be32(buf + pos + _SPAN_COUNT) >= 1):
                    s.control_type = _rec_control_type(buf, pos + _V2_HEADER, stop)
            elif magic == 0 or magic == 1:
                s.last_offset = s.base_offset
                s.leader_epoch = -1
                s.producer_id = -1
            else:
                raise _rec_bad_magic(pos, magic)
            out.append(s)
            pos = stop
    except CorruptRecordError:
        if not until_damage:
            raise
    return out


def scan_spans(data, *, until_damage=False):
    """The complete entries of a record set (a Fetch answer's ``records``), as a list of
    :class:`Span`, from their headers only (no CRC check, no decoding).

    A truncated entry at the end (Fetch cuts answers at max bytes) ends the scan.  Malformed
    framing (a size no entry can have, a v2 batch shorter than its header, an unknown magic)
    raises CorruptRecordError, or with ``until_damage=True`` ends the scan there too, for a
    caller whose decoder will report it.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _rec_scan(<const uint8_t*>view.buf, view.len, until_damage)
    finally:
        PyBuffer_Release(&view)


# --- the decoder ------------------------------------------------------------------------

cdef struct _RecEntry:
    int64_t base_offset
    int64_t last_offset
    int64_t first_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int32_t partition_leader_epoch
    int32_t base_sequence
    int16_t producer_epoch
    int magic
    int codec
    int timestamp_type
    bint is_transactional
    bint is_control
    Py_ssize_t size


cdef inline void _rec_copy(uint8_t* dst, const uint8_t* src, Py_ssize_t n) noexcept nogil:
    # Keys, header keys and small values are a few bytes: two overlapping fixed-size moves
    # beat a call to memcpy.
    if n >= 8 and n <= 16:
        memcpy(dst, src, 8)
        memcpy(dst + n - 8, src + n - 8, 8)
    elif n >= 4 and n < 8:
        memcpy(dst, src, 4)
        memcpy(dst + n - 4, src + n - 4, 4)
    elif n < 4:
        while n > 0:
            n -= 1
            dst[n] = src[n]
    else:
        memcpy(dst, src, n)


cdef struct _V2Run:
    # the records section of one v2 batch, being decoded
    Cursor c
    int32_t remaining
    int32_t count
    int64_t base_offset
    int64_t first_ts
    int64_t max_ts
    int ts_type
    int32_t leader_epoch


cdef inline bint _same_header(tuple h, str key, const uint8_t* p, Py_ssize_t n):
    """Whether the header ``h`` ((str, bytes | None)) has the key ``key`` (the decoder's
    cached str, compared by identity) and the value of ``n`` bytes at ``p`` (-1: null)."""
    cdef object v
    if <PyObject*>PyTuple_GET_ITEM(h, 0) is not <PyObject*>key:
        return False
    v = <object>PyTuple_GET_ITEM(h, 1)
    if n < 0:
        return v is None
    return (v is not None and PyBytes_GET_SIZE(v) == n
            and memcmp(PyBytes_AS_STRING(v), p, n) == 0)


cdef Record _rec_read_record(int64_t offset, int64_t timestamp, object headers):
    # A _ReadRecord with its offset, timestamp and headers list made (the rest is the caller's)
    cdef _ReadRecord r = _ReadRecord.__new__(_ReadRecord)
    r._offset_obj = offset
    r._timestamp_obj = timestamp
    r._headers = headers if type(headers) is list else _rec_headers_list(headers)
    return r


@cython.final
@cython.no_gc
cdef class _RecDecoder:
    """Walks the entries of one buffer.  next_entry() fills a _RecEntry and leaves the
    records in .records (or appends them to .sink for decode_columns).

    Not tracked by the garbage collector (nothing it holds can refer back to it): were it,
    an iterator caught in cyclic garbage (an exception's traceback holding a frame that holds
    it) would make the collector clear the memoryview it reads while it still holds a buffer
    of it -- CPython then crashes when the decoder lets go of that buffer."""
    cdef object owner
    cdef Py_buffer view
    cdef bint has_view
    cdef const uint8_t* buf
    cdef Py_ssize_t pos
    cdef Py_ssize_t end
    cdef bint check_crc
    cdef bint in_decompressed
    cdef str topic
    cdef int32_t partition
    cdef int32_t leader_epoch_default
    cdef list records
    cdef _RecColumns sink
    cdef bint lazy                  # iter_records: v2 records are decoded one per next()
    cdef _V2Run run
    cdef bint run_active
    cdef Py_ssize_t run_start       # position of the batch being decoded (for errors)
    cdef Py_buffer run_view         # the decompressed block the run reads, while held
    cdef bint has_run_view
    cdef void* scratch              # v2 batches decompress into this block (pool memory)
    cdef Py_ssize_t scratch_cap
    cdef double expand_hint         # uncompressed / compressed size of the last batch
    cdef const uint8_t* run_data    # the decompressed records of the current batch
    cdef kw_zctx zctx               # native lz4/zstd contexts of this thread
    cdef kw_pipe pipe               # the decompression worker (see _inflate.pxi), when on
    cdef bint pipe_tried
    cdef bint pipe_on
    cdef int pipe_next              # the next job the decoder takes
    cdef int pipe_held              # jobs [0, pipe_held) may be given back once the run ends
    cdef long pipe_pid
    cdef bint busy                  # inside next_entry: another thread must not enter
    cdef Py_ssize_t pipe_slot_cap[8]  # what the pool handed out for each slot
    cdef Py_ssize_t max_out         # the most one batch may decompress to
    cdef list ranges                # iter_records(ranges=): the byte ranges to decode, in turn
    cdef Py_ssize_t range_i         # the next of them
    cdef Py_ssize_t ahead_max       # the most the worker's ring may hold (-1: no bound)
    # bytes of record data (decompressed) in the entries entered so far: what the records
    # decoded from them may cost, for callers that budget memory (iter_records().record_bytes)
    cdef Py_ssize_t data_bytes
    # header keys repeat from record to record: remember the last key seen at each header
    # position and hand out the same str when the bytes match
    cdef PyObject* hk_str[_HK_SLOTS]
    # records handed out one by one (iterating): whether to make _ReadRecords (the application
    # reads every record's offset, timestamp and headers), records to make before read_turn,
    # and the sample read_turn made last (a Record, held until the next record is made)
    cdef bint read_ready
    cdef int read_next
    cdef Record read_sample
    cdef Py_ssize_t hk_len[_HK_SLOTS]
    cdef char hk_raw[_HK_SLOTS][_HK_MAX]
    # likewise whole headers: the (key, value) pair last made at each position, which the
    # next record shares when its header there is the same (key and value); h_misses counts
    # the records in a row whose header there differed (at _HEADER_MISSES_MAX: no more tries)
    cdef PyObject* h_pair[_HK_SLOTS]
    cdef int h_misses[_HK_SLOTS]

    def __cinit__(self, data, bint check_crc, topic, int32_t partition,
                  int32_t leader_epoch_default,
                  Py_ssize_t max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES,
                  Py_ssize_t max_ahead_bytes=-1):
        if max_decompressed_bytes < 0:
            raise ValueError("max_decompressed_bytes must be >= 0")
        self.max_out = max_decompressed_bytes
        self.ahead_max = max_ahead_bytes
        PyObject_GetBuffer(data, &self.view, PyBUF_SIMPLE)
        self.has_view = True
        self.owner = data
        self.buf = <const uint8_t*>self.view.buf
        self.pos = 0
        self.end = self.view.len
        self.check_crc = check_crc
        self.topic = topic
        self.partition = partition
        self.leader_epoch_default = leader_epoch_default

    def __dealloc__(self):
        cdef int i
        for i in range(_HK_SLOTS):
            Py_XDECREF(self.hk_str[i])
            self.hk_str[i] = NULL
            Py_XDECREF(self.h_pair[i])
            self.h_pair[i] = NULL
        self.release_run()
        self.stop_pipe()
        kw_zctx_free(&self.zctx)
        _pool_give(self.scratch, self.scratch_cap)
        self.scratch = NULL
        if self.has_view:
            PyBuffer_Release(&self.view)
            self.has_view = False

    cdef inline str header_key(self, Py_ssize_t idx, const uint8_t* p, Py_ssize_t n):
        # Header keys are UTF-8; undecodable bytes survive as surrogates (surrogateescape)
        # so a batch the broker accepted can always be consumed and re-encoded.
        cdef str s
        if idx < _HK_SLOTS and n <= _HK_MAX:
            if (self.hk_str[idx] != NULL and self.hk_len[idx] == n
                    and memcmp(self.hk_raw[idx], p, n) == 0):
                return <str>self.hk_str[idx]
            s = PyUnicode_DecodeUTF8(<const char*>p, n, "surrogateescape")
            Py_XDECREF(self.hk_str[idx])
            Py_INCREF(s)
            self.hk_str[idx] = <PyObject*>s
            memcpy(self.hk_raw[idx], p, n)
            self.hk_len[idx] = n
            return s
        return PyUnicode_DecodeUTF8(<const char*>p, n, "surrogateescape")

    cdef int next_entry(self, _RecEntry* e) except -1:
        """1 when an entry was decoded, 0 at the end (a trailing partial entry is skipped).
        With ``ranges``, the end of one range moves on to the next; a failure ends them all."""
        cdef int r
        cdef tuple rng
        if self.ranges is None:
            return self.entry(e)
        try:
            r = self.entry(e)
            while r == 0 and self.range_i < PyList_GET_SIZE(self.ranges):
                rng = <tuple>PyList_GET_ITEM(self.ranges, self.range_i)
                self.range_i += 1
                self.pos = <Py_ssize_t>rng[0]
                self.end = <Py_ssize_t>rng[1]
                self.pipe_tried = False  # (a worker for this range's compressed batches)
                r = self.entry(e)
        except BaseException:
            self.range_i = PyList_GET_SIZE(self.ranges)
            raise
        return r

    cdef int entry(self, _RecEntry* e) except -1:
        """next_entry within the current range (the whole buffer without ranges)."""
        cdef Py_ssize_t start = self.pos
        cdef int32_t size
        cdef int magic, complete
        if self.busy:
            _rec_busy()
        self.records = None
        try:
            complete = _rec_frame(self.buf, start, self.end, &size)
        except CorruptRecordError:
            self.pos = self.end
            self.stop_pipe()
            raise
        if not complete:
            self.pos = self.end
            self.stop_pipe()
            return 0
        magic = self.buf[start + 16]
        self.in_decompressed = False
        # The GIL is released inside (decompression, CRC of big batches, waiting for the
        # worker): a second thread advancing this decoder meanwhile is refused.
        self.busy = True
        try:
            if magic == 2:
                self.decode_v2(start, start + _LOG_OVERHEAD + size, e)
            elif magic == 0 or magic == 1:
                self.decode_legacy(start, start + _LOG_OVERHEAD + size, magic, e)
            else:
                raise _rec_bad_magic(start, magic)
        except ProtocolError as exc:
            self.release_run()
            self.stop_pipe()
            self.pos = self.end
            raise _rec_rewrap(exc, start, self.in_decompressed)
        except BaseException:
            self.release_run()
            self.stop_pipe()
            self.pos = self.end
            raise
        finally:
            self.busy = False
        self.pos = start + _LOG_OVERHEAD + size
        return 1

    cdef int decode_v2(self, Py_ssize_t start, Py_ssize_t end, _RecEntry* e) except -1:
        cdef Cursor c
        cdef int32_t batch_length, last_offset_delta, count, leader_epoch
        cdef uint32_t crc
        cdef int16_t attributes
        c.buf = self.buf
        c.pos = start
        c.end = end
        e.base_offset = rd_i64(&c)
        batch_length = rd_i32(&c)
        e.partition_leader_epoch = rd_i32(&c)
        e.magic = rd_i8(&c)
        if batch_length < _V2_MIN_LENGTH:
            raise _rec_short_batch(start, batch_length)
        crc = rd_u32(&c)
        if self.check_crc:
            actual = _crc32c(_rec_view(self.buf + start + _V2_CRC_START, end - start - _V2_CRC_START))
            if actual != crc:
                raise CorruptRecordError(
                    f"batch at position {start} fails its CRC-32C: computed {actual:#010x}, "
                    f"stored {crc:#010x}", position=start + 17)
        attributes = rd_i16(&c)
        last_offset_delta = rd_i32(&c)
        e.first_timestamp = rd_i64(&c)
        e.max_timestamp = rd_i64(&c)
        e.producer_id = rd_i64(&c)
        e.producer_epoch = rd_i16(&c)
        e.base_sequence = rd_i32(&c)
        count = rd_i32(&c)
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
        e.last_offset = _rec_add64(e.base_offset, last_offset_delta)
        e.size = end - start
        leader_epoch = (e.partition_leader_epoch if e.partition_leader_epoch >= 0
                        else self.leader_epoch_default)
        self.run_start = start
        if e.codec == 0:
            self.v2_begin(self.buf, c.pos, end, count, e, leader_epoch)
        elif e.codec != 2:
            n = self.inflate(e.codec, self.buf + c.pos, end - c.pos, start, e.base_offset)
            self.in_decompressed = True
            self.v2_begin(self.run_data, 0, n, count, e, leader_epoch)
        else:
            block = _rec_decompress(e.codec, self.buf + c.pos, end - c.pos, 2, start, self.max_out,
                                    (self.topic, self.partition, e.base_offset))
            PyObject_GetBuffer(block, &self.run_view, PyBUF_SIMPLE)
            self.has_run_view = True
            self.in_decompressed = True
            self.v2_begin(<const uint8_t*>self.run_view.buf, 0, self.run_view.len, count, e,
                          leader_epoch)
        if self.lazy and not e.is_control:
            # iter_records: the records are decoded one per next() (see lazy_next); the
            # decompressed block stays held until the run ends
            self.run_active = True
            return 0
        try:
            if self.sink is not None and not e.is_control:
                self.v2_columns()
            else:
                self.records = self.v2_list()
        finally:
            self.release_run()
        self.in_decompressed = False
        return 0

    cdef object limit_error(self, int codec, Py_ssize_t position, int64_t offset):
        return _rec_limit_error(codec, position, self.max_out, (self.topic, self.partition, offset))

    cdef Py_ssize_t inflate(self, int codec, const uint8_t* p, Py_ssize_t n,
                            Py_ssize_t position, int64_t offset) except -1:
        # gzip, lz4 or zstd: sets self.run_data, returns the uncompressed size.  From the
        # worker's slot when it decompressed this batch, else into self.scratch.
        cdef kw_job* job
        cdef int j
        if not self.pipe_tried and _native(codec) and self.expand_hint > 0:
            # the first compressed batch was done here and told how well they compress
            self.pipe_tried = True
            self.start_pipe(position)
        if self.pipe_on and self.pipe_pid != getpid():
            self.stop_pipe()        # a forked child: the worker thread stayed in the parent
        if self.pipe_on and self.pipe_next < self.pipe.njobs \
                and self.pipe.jobs[self.pipe_next].entry == position:
            j = self.pipe_next
            self.pipe_next += 1
            with nogil:
                kw_pipe_wait(&self.pipe, j)
            job = &self.pipe.jobs[j]
            if job.status == 1 and job.produced > self.max_out:
                # (slots hold at most max_out + 1 bytes: the worker stopped there)
                kw_pipe_release(&self.pipe, j + 1)
                raise self.limit_error(codec, position, offset)
            if job.status == 1:
                self.pipe_held = j + 1
                self.run_data = self.pipe.slot[j % self.pipe.nslots]
                return job.produced
            kw_pipe_release(&self.pipe, j + 1)
            if job.status == KW_FAILED:
                raise CorruptRecordError(
                    f"{_CODEC_NAMES[codec]} decompression failed for the entry at position "
                    f"{position}: {job.msg.decode('ascii', 'replace')}", position=position)
            # KW_TOO_SMALL: bigger than a slot; done here, with a growing block
        n = self.decompress_into_scratch(codec, p, n, position, offset)
        self.run_data = <const uint8_t*>self.scratch
        return n

    cdef Py_ssize_t job_estimate(self, int codec, const uint8_t* src, Py_ssize_t n) noexcept:
        # The slot a batch needs: its declared size, else its size at the expansion seen so
        # far (+50%); -1 when that is more than a slot may be (the decoder does it then).
        cdef int64_t declared = _rec_frame_content_size(codec, src, n)
        cdef double est
        if declared >= 0:
            return <Py_ssize_t>declared if declared <= _PIPE_MAX_SLOT else -1
        est = n * self.expand_hint * 1.5 + 4096
        return <Py_ssize_t>est if est <= _PIPE_MAX_SLOT else -1

    cdef int start_pipe(self, Py_ssize_t pos) except -1:
        # Hand the compressed batches from `pos` on to a worker, when there are enough of them.
        # Two passes over the entry headers (both bounds-checked the same way): count, fill.
        # (Damage ends the look-ahead: the decoder reports it when it gets there.)
        cdef Py_ssize_t size, total = 0, slot_cap = _PIPE_MIN_SLOT, est, first = pos
        cdef int32_t size32
        cdef int njobs = 0, codec, i, npass
        cdef kw_job* jobs = NULL
        for npass in range(2):
            pos = first
            i = 0
            while _rec_frame_size(self.buf, pos, self.end, &size32) > 0:
                size = size32
                if self.buf[pos + 16] != 2 or size < _V2_MIN_LENGTH:
                    pos += _LOG_OVERHEAD + size
                    continue
                codec = self.buf[pos + 22] & 0x07
                if _native(codec):
                    est = self.job_estimate(codec, self.buf + pos + _V2_HEADER,
                                            _LOG_OVERHEAD + size - _V2_HEADER)
                    if 0 <= est <= self.max_out:    # (else the decoder stops at the cap)
                        if npass == 0:
                            njobs += 1
                            total += size
                            if est > slot_cap:
                                slot_cap = est
                        else:
                            jobs[i].src = self.buf + pos + _V2_HEADER
                            jobs[i].n = _LOG_OVERHEAD + size - _V2_HEADER
                            jobs[i].entry = pos
                            jobs[i].codec = codec
                            jobs[i].status = 0
                            jobs[i].produced = 0
                            jobs[i].msg = NULL
                            i += 1
                pos += _LOG_OVERHEAD + size
            if npass == 0:
                # one job is worth a thread only when the tests force the worker on
                if (njobs == 0 or _pipe_min_bytes < 0 or total < _pipe_min_bytes
                        or (njobs < 2 and _pipe_min_bytes > 0)):
                    return 0
                jobs = <kw_job*>malloc(njobs * sizeof(kw_job))
                if jobs == NULL:
                    return 0
                # a slot never holds more than the cap + 1 (its worker stops there)
                if slot_cap > self.max_out + 1:
                    slot_cap = self.max_out + 1
        self.pipe.jobs = jobs
        self.pipe.njobs = njobs
        self.pipe.slot_cap = slot_cap
        # the ring holds decompressed batches ahead of the records handed out: as many slots
        # as ahead_max allows (a caller's memory budget), and no worker for fewer than two
        if self.ahead_max < 0 or self.ahead_max >= KW_PIPE_SLOTS * slot_cap:
            self.pipe.nslots = KW_PIPE_SLOTS
        else:
            self.pipe.nslots = <int>(self.ahead_max // slot_cap)
            if self.pipe.nslots < 2:
                free(jobs)
                self.pipe.jobs = NULL
                self.pipe.njobs = 0
                return 0
        for i in range(self.pipe.nslots):  # (the pool may hand out bigger blocks)
            self.pipe.slot[i] = <uint8_t*>_pool_take(slot_cap, &self.pipe_slot_cap[i])
            if self.pipe.slot[i] == NULL:
                self.free_pipe_memory()
                return 0
        if kw_pipe_start(&self.pipe) != 0:
            self.free_pipe_memory()
            return 0
        global _pipe_starts
        _pipe_starts += 1
        self.pipe_on = True
        self.pipe_next = 0
        self.pipe_held = 0
        self.pipe_pid = getpid()
        return 0

    cdef void free_pipe_memory(self) noexcept:
        cdef int i
        for i in range(KW_PIPE_SLOTS):
            if self.pipe.slot[i] != NULL:
                _pool_give(self.pipe.slot[i], self.pipe_slot_cap[i])
                self.pipe.slot[i] = NULL
        free(self.pipe.jobs)
        self.pipe.jobs = NULL
        self.pipe.njobs = 0

    cdef void stop_pipe(self) noexcept:
        # Called with no slot in use (after release_run).  In a forked child the worker
        # thread does not exist (and its lock may be frozen held): no join, just the memory,
        # which is the child's own copy.
        if not self.pipe_on:
            return
        self.pipe_on = False
        if self.pipe_pid == getpid():
            with nogil:
                kw_pipe_stop(&self.pipe)
        self.free_pipe_memory()

    cdef Py_ssize_t decompress_into_scratch(self, int codec, const uint8_t* p, Py_ssize_t n,
                                            Py_ssize_t position, int64_t offset) except -1:
        # gzip, lz4 or zstd into self.scratch; returns the uncompressed size.  The block is
        # sized from the frame header when it declares the size, else from the last batch's
        # expansion; when it turns out too small it grows 4x and the batch is decompressed
        # again.  The decompressor never gets more than max_out + 1 bytes to write into, so a
        # bomb stops there (DecompressionLimitError) instead of allocating what it claims; past
        # 2 GiB (more than Kafka's int32 sizes can describe) is corrupt whatever the cap.  lz4
        # and zstd use the native libraries (GIL released) when they loaded, else cramjam.
        cdef int64_t declared = _rec_frame_content_size(codec, p, n)
        cdef Py_ssize_t want, got, cap
        cdef Py_ssize_t bound = min(self.max_out + 1, _SCRATCH_LIMIT)
        cdef double hint = self.expand_hint if self.expand_hint > 0 else 4.0
        cdef const char* msg = NULL
        cdef bint native = _native(codec)
        if 0 <= declared < _SCRATCH_LIMIT:
            want = <Py_ssize_t>declared
        else:   # the last batch's expansion (at most 16x: the growth below handles the rest)
            want = <Py_ssize_t>(n * min(hint, 16.0) * 1.25) + 4096
            if want > _SCRATCH_LIMIT or want < 0:
                want = _SCRATCH_LIMIT
        if want > bound:
            want = bound
        src = None if native else _rec_view(p, n)
        fn = (None, _cramjam.gzip.decompress_into, None, _cramjam.lz4.decompress_into,
              _cramjam.zstd.decompress_into)[codec]
        while True:
            if self.scratch == NULL or self.scratch_cap < want:
                _pool_give(self.scratch, self.scratch_cap)
                self.scratch = _pool_take(max(want, <Py_ssize_t>_POOL_MIN_BLOCK), &self.scratch_cap)
                if self.scratch == NULL:
                    self.scratch_cap = 0
                    raise MemoryError()
            cap = min(self.scratch_cap, bound)     # (the pool may hand out a bigger block)
            if native:
                with nogil:
                    got = kw_inflate(&self.zctx, codec, p, n, <uint8_t*>self.scratch, cap, &msg)
                if got >= 0:
                    break
                if got == KW_FAILED:
                    raise CorruptRecordError(
                        f"{_CODEC_NAMES[codec]} decompression failed for the entry at position "
                        f"{position}: {msg.decode('ascii', 'replace')}", position=position)
            else:
                try:
                    got = fn(src, PyMemoryView_FromMemory(<char*>self.scratch, cap, PyBUF_WRITE))
                    break
                except MemoryError:
                    raise
                except Exception as exc:
                    if not _rec_short_output(exc):
                        raise CorruptRecordError(
                            f"{_CODEC_NAMES[codec]} decompression failed for the entry at position "
                            f"{position}: {exc}", position=position) from exc
            if cap >= bound:
                if bound > self.max_out:
                    raise self.limit_error(codec, position, offset)
                raise CorruptRecordError(
                    f"{_CODEC_NAMES[codec]} batch at position {position} decompresses to more "
                    f"than 2 GiB", position=position)
            want = min(self.scratch_cap * 4, bound)
        if got > self.max_out:
            raise self.limit_error(codec, position, offset)
        if n > 0:
            self.expand_hint = <double>got / n
        return got

    cdef void release_run(self) noexcept:
        if self.has_run_view:
            PyBuffer_Release(&self.run_view)
            self.has_run_view = False
        if self.pipe_held:
            if self.pipe_on and self.pipe_pid == getpid():
                kw_pipe_release(&self.pipe, self.pipe_held)
            self.pipe_held = 0
        self.run_active = False

    cdef int v2_begin(self, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, int32_t count,
                      _RecEntry* e, int32_t leader_epoch) except -1:
        cdef _V2Run* run = &self.run
        if count > (end - pos) // _MIN_RECORD:
            raise CorruptRecordError(
                f"records count {count} cannot fit in {end - pos} bytes", position=pos)
        self.data_bytes += end - pos
        run.c.buf = buf
        run.c.pos = pos
        run.c.end = end
        run.remaining = count
        run.count = count
        run.base_offset = e.base_offset
        run.first_ts = e.first_timestamp
        run.max_ts = e.max_timestamp
        run.ts_type = e.timestamp_type
        run.leader_epoch = leader_epoch
        return 0

    cdef int v2_end(self) except -1:
        cdef _V2Run* run = &self.run
        if run.c.pos != run.c.end:
            raise CorruptRecordError(
                f"{run.c.end - run.c.pos} bytes left after the last of {run.count} records",
                position=run.c.pos)
        return 0

    cdef list v2_list(self):
        cdef list out = PyList_New(self.run.count)
        cdef int32_t i
        cdef Record r
        for i in range(self.run.count):
            r = self.v2_next(False)
            Py_INCREF(r)
            PyList_SET_ITEM(out, i, r)
        self.v2_end()
        return out

    cdef Record lazy_next(self, bint one_by_one):
        # The next record of the active run, or None once the run is over (and checked).
        if self.busy:
            _rec_busy()
        try:
            if self.run.remaining > 0:
                return self.v2_next(one_by_one)
            self.v2_end()
        except BaseException as exc:
            self.lazy_failed(exc)
            raise
        self.release_run()
        return None

    cdef Py_ssize_t lazy_fill(self, list out, Py_ssize_t n) except -1:
        # lazy_next n times into out, with one try for the lot: the records appended (at most
        # n); fewer when the run ended (checked, as lazy_next checks it: only when one more
        # record is asked for).
        cdef Py_ssize_t k = 0
        cdef Record r
        if self.busy:
            _rec_busy()
        try:
            while k < n and self.run.remaining > 0:
                r = self.v2_next(False)
                out.append(r)
                k += 1
            if k == n:
                return k
            self.v2_end()
        except BaseException as exc:
            self.lazy_failed(exc)
            raise
        self.release_run()
        return k

    cdef int lazy_failed(self, BaseException exc) except -1:
        # A record of the active run could not be decoded: the decoder is done with this
        # data; a ProtocolError is raised again with the batch's position.
        cdef bint compressed = self.in_decompressed
        self.release_run()
        self.stop_pipe()
        self.pos = self.end
        if isinstance(exc, ProtocolError):
            raise _rec_rewrap(exc, self.run_start, compressed)
        return 0

    cdef Record read_turn(self, int64_t offset, int64_t timestamp, object headers):
        # v2_next's record when read_next runs out: a Record held as the sample, or, the record
        # after one, the verdict: were the sample's offset, timestamp and headers all read
        # before this record was asked for?  Then _ReadRecords for the next _READ_PROBE_EVERY
        # records (the first of them this one), else Records for the next _READ_SAMPLE_EVERY.
        if self.read_sample is None:
            self.read_sample = Record.__new__(Record)
            self.read_next = 1
            return self.read_sample
        self.read_ready = self.read_sample._reads == _READ_ALL
        self.read_sample = None
        if self.read_ready:
            self.read_next = _READ_PROBE_EVERY
            return _rec_read_record(offset, timestamp, headers)
        self.read_next = _READ_SAMPLE_EVERY
        return Record.__new__(Record)

    @cython.boundscheck(False)
    cdef Record v2_next(self, bint one_by_one):
        # The hot loop body: one Record, its key/value bytes and header tuples; everything
        # else stays in C variables.
        cdef _V2Run* run = &self.run
        cdef Cursor* c = &run.c
        cdef Cursor rc
        cdef int32_t j, length, off_delta, klen, vlen, hcount, hklen, hvlen
        cdef int64_t ts_delta
        cdef const uint8_t* p
        cdef list hlist
        cdef tuple h
        cdef Record r
        cdef object key, value, hval
        cdef object headers = None
        cdef str hkey
        cdef Py_ssize_t rec_start = c.pos
        rd_zz32_to(c, &length)
        if length < 0 or length > c.end - c.pos:
            raise CorruptRecordError(
                f"record at position {rec_start} has length {length}, past the end of its batch",
                position=rec_start)
        rc.buf = c.buf
        rc.pos = c.pos
        rc.end = c.pos + length
        c.pos = rc.end
        run.remaining -= 1
        rd_view(&rc, 1, &p)                 # record attributes: unused
        rd_zz64_to(&rc, &ts_delta)
        rd_zz32_to(&rc, &off_delta)
        rd_zz32_to(&rc, &klen)
        if klen >= 0:
            rd_view(&rc, klen, &p)
            key = PyBytes_FromStringAndSize(<const char*>p, klen)
        elif klen == -1:
            key = None
        else:
            raise CorruptRecordError(f"record at position {rec_start} has key length {klen}",
                                     position=rec_start)
        rd_zz32_to(&rc, &vlen)
        if vlen >= 0:
            rd_view(&rc, vlen, &p)
            value = PyBytes_FromStringAndSize(<const char*>p, vlen)
        elif vlen == -1:
            value = None
        else:
            raise CorruptRecordError(f"record at position {rec_start} has value length {vlen}",
                                     position=rec_start)
        rd_zz32_to(&rc, &hcount)
        if hcount < 0 or hcount > (rc.end - rc.pos) // 2:
            raise CorruptRecordError(
                f"record at position {rec_start} has header count {hcount}", position=rec_start)
        hlist = PyList_New(hcount) if hcount > 1 else None
        for j in range(hcount):
            rd_zz32_to(&rc, &hklen)
            if hklen < 0:
                raise CorruptRecordError(
                    f"record at position {rec_start} has header key length {hklen}",
                    position=rec_start)
            rd_view(&rc, hklen, &p)
            hkey = self.header_key(j, p, hklen)
            rd_zz32_to(&rc, &hvlen)
            if hvlen >= 0:
                rd_view(&rc, hvlen, &p)
            elif hvlen != -1:
                raise CorruptRecordError(
                    f"record at position {rec_start} has header value length {hvlen}",
                    position=rec_start)
            if j < _HK_SLOTS and self.h_pair[j] != NULL and _same_header(
                    <tuple>self.h_pair[j], hkey, p, hvlen):
                # the header the last record had at this position: the pair is immutable,
                # so this record shares it (no str, bytes or tuple made)
                h = <tuple>self.h_pair[j]
                self.h_misses[j] = 0
            else:
                hval = PyBytes_FromStringAndSize(<const char*>p, hvlen) if hvlen >= 0 else None
                h = PyTuple_New(2)
                Py_INCREF(hkey)
                PyTuple_SET_ITEM(h, 0, hkey)
                Py_INCREF(hval)
                PyTuple_SET_ITEM(h, 1, hval)
                # A header tuple holds only str/bytes/None: it cannot be part of a cycle, so
                # the cyclic GC need not track it (records are created by the million).
                PyObject_GC_UnTrack(<void*>h)
                if j < _HK_SLOTS and self.h_misses[j] < _HEADER_MISSES_MAX:
                    # remember it for the next record, until this position's values have
                    # differed from record to record too often (unique ids: then stop trying)
                    self.h_misses[j] += 1
                    Py_XDECREF(self.h_pair[j])
                    if self.h_misses[j] < _HEADER_MISSES_MAX:
                        Py_INCREF(h)
                        self.h_pair[j] = <PyObject*>h
                    else:
                        self.h_pair[j] = NULL
            if hlist is None:
                headers = h
            else:
                Py_INCREF(h)
                PyList_SET_ITEM(hlist, j, h)
        # Likewise the headers list: a fresh list of untracked tuples.  Untracked, millions of
        # buffered records cost the GC nothing (with them tracked, decode ran ~4x slower).
        # No headers, no list; one header, its tuple alone (Record.headers makes the list when
        # first read: a record whose headers are never read never gets one).
        if hlist is not None:
            PyObject_GC_UnTrack(<void*>hlist)
            headers = hlist
        if rc.pos != rc.end:
            raise CorruptRecordError(
                f"record at position {rec_start} has {rc.end - rc.pos} bytes after its headers",
                position=rec_start)
        cdef int64_t offset = _rec_add64(run.base_offset, off_delta)
        cdef int64_t timestamp = run.max_ts if run.ts_type == 1 else _rec_add64(run.first_ts, ts_delta)
        if one_by_one:
            # Iterating: make _ReadRecords while the application reads every record's offset,
            # timestamp and headers (see read_turn), Records otherwise.  Records taken by the
            # thousand (take(), whole batches) are never sampled: made there, the three waited
            # in memory until read, and reading them then cost more than the getters save
            # (consume() on Kafka, one header a record, everything read: 0.92x).
            self.read_next -= 1
            if self.read_next > 0:
                if self.read_ready:
                    r = _rec_read_record(offset, timestamp, headers)
                    headers = r._headers
                else:
                    r = Record.__new__(Record)
            else:
                r = self.read_turn(offset, timestamp, headers)
                if r._headers is not None:      # (a _ReadRecord's list; a Record has none yet)
                    headers = r._headers
        else:
            r = Record.__new__(Record)
        r._offset = offset
        r._timestamp = timestamp
        r.timestamp_type = run.ts_type
        r.key = key
        r.value = value
        r._headers = headers
        r.topic = self.topic
        r.partition = self.partition
        r.leader_epoch = run.leader_epoch
        return r

    @cython.boundscheck(False)
    cdef int v2_columns(self) except -1:
        # Same checks as v2_next, but the fields go straight into the column buffers.  The
        # column pointers and lengths live in locals (registers) for the whole batch and
        # are written back before anything that can grow a column.
        cdef _V2Run* run = &self.run
        cdef Cursor cur = run.c            # a local copy the compiler can keep in registers
        cdef Cursor* c = &cur
        cdef Cursor rc
        cdef int32_t i, j, length, off_delta, klen, vlen, hcount, hklen, hvlen
        cdef int64_t ts_delta
        cdef int64_t base_offset = run.base_offset
        cdef int64_t first_ts = run.first_ts
        cdef int64_t max_ts = run.max_ts
        cdef int8_t ts_type = <int8_t>run.ts_type
        cdef bint log_append = ts_type == 1
        cdef const uint8_t* p
        cdef Py_ssize_t rec_start, n, m
        cdef _RecColumns s = self.sink
        cdef uint8_t* dp[4]
        cdef Py_ssize_t dl[4]
        cdef Py_ssize_t dc[4]
        s.reserve_records(run.count)
        cdef int64_t* p_offset = s.p_offset
        cdef int64_t* p_timestamp = s.p_timestamp
        cdef int8_t* p_ts_type = s.p_ts_type
        cdef int32_t* p_key_off = s.p_key_off
        cdef uint8_t* p_key_valid = s.p_key_valid
        cdef int32_t* p_value_off = s.p_value_off
        cdef uint8_t* p_value_valid = s.p_value_valid
        cdef int32_t* p_header_off = s.p_header_off
        cdef int32_t* p_hkey_off = s.p_hkey_off
        cdef int32_t* p_hvalue_off = s.p_hvalue_off
        cdef uint8_t* p_hvalue_valid = s.p_hvalue_valid
        for j in range(4):
            dp[j] = s.dptr[j]
            dl[j] = s.dlen[j]
            dc[j] = s.dcap[j]
        n = s.n
        m = s.m
        rc.buf = c.buf
        try:
            for i in range(run.count):
                rec_start = c.pos
                rd_zz32_to(c, &length)
                if length < 0 or length > c.end - c.pos:
                    raise CorruptRecordError(
                        f"record at position {rec_start} has length {length}, past the end of its batch",
                        position=rec_start)
                rc.pos = c.pos
                rc.end = c.pos + length
                c.pos = rc.end
                rd_view(&rc, 1, &p)
                rd_zz64_to(&rc, &ts_delta)
                rd_zz32_to(&rc, &off_delta)
                p_offset[n] = _rec_add64(base_offset, off_delta)
                p_timestamp[n] = max_ts if log_append else _rec_add64(first_ts, ts_delta)
                p_ts_type[n] = ts_type
                rd_zz32_to(&rc, &klen)
                if klen >= 0:
                    rd_view(&rc, klen, &p)
                    _col_put(s, 0, dp, dl, dc, p, klen)
                    p_key_valid[n] = 1
                elif klen == -1:
                    p_key_valid[n] = 0
                else:
                    raise CorruptRecordError(f"record at position {rec_start} has key length {klen}",
                                             position=rec_start)
                p_key_off[n + 1] = <int32_t>dl[0]
                rd_zz32_to(&rc, &vlen)
                if vlen >= 0:
                    rd_view(&rc, vlen, &p)
                    _col_put(s, 1, dp, dl, dc, p, vlen)
                    p_value_valid[n] = 1
                elif vlen == -1:
                    p_value_valid[n] = 0
                else:
                    raise CorruptRecordError(f"record at position {rec_start} has value length {vlen}",
                                             position=rec_start)
                p_value_off[n + 1] = <int32_t>dl[1]
                rd_zz32_to(&rc, &hcount)
                if hcount < 0 or hcount > (rc.end - rc.pos) // 2:
                    raise CorruptRecordError(
                        f"record at position {rec_start} has header count {hcount}", position=rec_start)
                if m + hcount > s.cap_m:
                    s.m = m
                    s.reserve_headers(hcount)
                    p_hkey_off = s.p_hkey_off
                    p_hvalue_off = s.p_hvalue_off
                    p_hvalue_valid = s.p_hvalue_valid
                for j in range(hcount):
                    rd_zz32_to(&rc, &hklen)
                    if hklen < 0:
                        raise CorruptRecordError(
                            f"record at position {rec_start} has header key length {hklen}",
                            position=rec_start)
                    rd_view(&rc, hklen, &p)
                    _col_put(s, 2, dp, dl, dc, p, hklen)
                    p_hkey_off[m + 1] = <int32_t>dl[2]
                    rd_zz32_to(&rc, &hvlen)
                    if hvlen >= 0:
                        rd_view(&rc, hvlen, &p)
                        _col_put(s, 3, dp, dl, dc, p, hvlen)
                        p_hvalue_valid[m] = 1
                    elif hvlen == -1:
                        p_hvalue_valid[m] = 0
                    else:
                        raise CorruptRecordError(
                            f"record at position {rec_start} has header value length {hvlen}",
                            position=rec_start)
                    p_hvalue_off[m + 1] = <int32_t>dl[3]
                    m += 1
                if rc.pos != rc.end:
                    raise CorruptRecordError(
                        f"record at position {rec_start} has {rc.end - rc.pos} bytes after its headers",
                        position=rec_start)
                p_header_off[n + 1] = <int32_t>m
                n += 1
        finally:
            run.c.pos = cur.pos
            for j in range(4):
                s.dlen[j] = dl[j]
            s.n = n
            s.m = m
        run.remaining = 0
        self.v2_end()
        return 0

    cdef int decode_legacy(self, Py_ssize_t start, Py_ssize_t end, int magic,
                           _RecEntry* e) except -1:
        cdef Cursor c
        cdef int64_t offset, timestamp
        cdef int attributes, ts_type
        cdef Py_buffer dview
        cdef Record r
        cdef int32_t vlen
        c.buf = self.buf
        c.pos = start
        c.end = end
        offset = self.legacy_message(&c, magic, &timestamp, &attributes)
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
        key = self.legacy_bytes(&c, start)
        if e.codec == 0:
            value = self.legacy_bytes(&c, start)
            records = [self.legacy_record(offset, timestamp, e.timestamp_type, key, value)]
            self.data_bytes += e.size
        else:
            if e.codec > 4:
                raise UnsupportedCompressionError(
                    f"message at position {start} uses unknown compression codec {e.codec}",
                    position=start + 17)
            vlen = rd_i32(&c)
            if vlen < 0:
                raise CorruptRecordError(f"compressed message at position {start} has no value",
                                         position=c.pos - 4)
            _need(&c, vlen)
            block = _rec_decompress(e.codec, self.buf + c.pos, vlen, magic, start, self.max_out,
                                    (self.topic, self.partition, offset))
            c.pos += vlen
            PyObject_GetBuffer(block, &dview, PyBUF_SIMPLE)
            self.data_bytes += dview.len
            self.in_decompressed = True
            try:
                records = self.legacy_inner(<const uint8_t*>dview.buf, dview.len, magic, offset,
                                            timestamp, e.timestamp_type)
            finally:
                PyBuffer_Release(&dview)
            self.in_decompressed = False
        if c.pos != end:
            raise CorruptRecordError(
                f"message at position {start} has {end - c.pos} bytes after its value",
                position=c.pos)
        e.base_offset = (<Record>records[0])._offset
        e.first_timestamp = (<Record>records[0])._timestamp
        if self.sink is not None:
            for r in records:
                self.sink.append_record(r)
        else:
            self.records = records
        return 0

    cdef int64_t legacy_message(self, Cursor* c, int magic, int64_t* timestamp,
                                int* attributes) except? -1:
        # Reads offset..attributes[, timestamp] of one message; the caller has checked that
        # the whole message (size field included) lies within c.end.
        cdef Py_ssize_t start = c.pos
        cdef int64_t offset = rd_i64(c)
        cdef int32_t size = rd_i32(c)
        cdef uint32_t crc = rd_u32(c)
        rd_i8(c)  # magic, already dispatched on
        if size < (_V1_MIN_SIZE if magic == 1 else _V0_MIN_SIZE):
            raise CorruptRecordError(
                f"magic {magic} message at position {start} has size {size}, smaller than its header",
                position=start + 8)
        if self.check_crc:
            actual = _zlib.crc32(_rec_view(c.buf + start + 16, c.end - start - 16))
            if actual != crc:
                raise CorruptRecordError(
                    f"message at position {start} fails its CRC-32: computed {actual:#010x}, "
                    f"stored {crc:#010x}", position=start + 12)
        attributes[0] = <uint8_t>rd_i8(c)
        timestamp[0] = rd_i64(c) if magic == 1 else -1
        return offset

    cdef object legacy_bytes(self, Cursor* c, Py_ssize_t start):
        cdef int32_t n = rd_i32(c)
        if n == -1:
            return None
        if n < -1:
            raise CorruptRecordError(f"message at position {start} has a field of length {n}",
                                     position=c.pos - 4)
        return rd_bytes_n(c, n)

    cdef Record legacy_record(self, int64_t offset, int64_t timestamp, int ts_type, key, value):
        cdef Record r = Record.__new__(Record)
        r._offset = offset
        r._timestamp = timestamp
        r.timestamp_type = ts_type
        r.key = key
        r.value = value
        # (no headers list: Record.headers makes an empty one when asked)
        r.topic = self.topic
        r.partition = self.partition
        r.leader_epoch = self.leader_epoch_default
        return r

    cdef list legacy_inner(self, const uint8_t* buf, Py_ssize_t n, int magic,
                           int64_t wrapper_offset, int64_t wrapper_ts, int wrapper_ts_type):
        # The inner message set of a compressed wrapper: complete messages only, same magic,
        # no further compression.
        cdef Cursor c
        cdef Py_ssize_t start
        cdef int32_t size
        cdef int64_t offset, timestamp, last_rel, base
        cdef int attributes
        cdef list records = []
        cdef Record r
        c.buf = buf
        c.pos = 0
        while c.pos < n:
            start = c.pos
            if n - start < _LOG_OVERHEAD:
                raise CorruptRecordError(f"truncated inner message at position {start}",
                                         position=start)
            size = <int32_t>ld_be32(buf + start + 8)
            if size < _MIN_ENTRY_SIZE or size > n - start - _LOG_OVERHEAD:
                raise CorruptRecordError(f"inner message at position {start} has size {size}",
                                         position=start + 8)
            if buf[start + 16] != magic:
                raise CorruptRecordError(
                    f"inner message at position {start} has magic {buf[start + 16]}, "
                    f"its wrapper {magic}", position=start + 16)
            c.end = start + _LOG_OVERHEAD + size
            offset = self.legacy_message(&c, magic, &timestamp, &attributes)
            if attributes & 0x07:
                raise CorruptRecordError(f"inner message at position {start} is itself compressed",
                                         position=start + 17)
            key = self.legacy_bytes(&c, start)
            value = self.legacy_bytes(&c, start)
            if c.pos != c.end:
                raise CorruptRecordError(
                    f"inner message at position {start} has {c.end - c.pos} bytes after its value",
                    position=c.pos)
            if wrapper_ts_type == 1:
                timestamp = wrapper_ts
            records.append(self.legacy_record(offset, timestamp,
                                              wrapper_ts_type if magic == 1 else -1, key, value))
        if not records:
            raise CorruptRecordError("compressed message holds no inner messages", position=0)
        if magic == 1:
            # inner offsets are relative (0..n-1); the wrapper carries the last absolute one.
            # A wrapper offset below the last relative one (a producer's message set, before the
            # broker assigned offsets: wrapper 0) leaves the inner offsets as they are, as
            # Kafka's Java client does -- never negative offsets.
            last_rel = (<Record>records[len(records) - 1])._offset
            base = _rec_add64(wrapper_offset, -last_rel)
            if base >= 0:
                for r in records:
                    r._offset = _rec_add64(base, r._offset)
        return records


cdef RecordBatch _rec_make_batch(_RecEntry* e, list records):
    cdef RecordBatch b = RecordBatch.__new__(RecordBatch)
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


@cython.final
cdef class _RecordIterator:
    cdef _RecDecoder dec
    cdef list cur           # records of a legacy entry (decoded eagerly)
    cdef Py_ssize_t idx
    cdef Py_ssize_t n
    # stop_at >= 0: next() stops (StopIteration, resumable) instead of entering another
    # batch once record_bytes + record_cost * records handed out has reached it;
    # exhausted: the data itself ended
    cdef public Py_ssize_t stop_at
    cdef public Py_ssize_t record_cost
    cdef readonly Py_ssize_t handed
    cdef readonly bint exhausted

    def __iter__(self):
        return self

    @property
    def record_bytes(self):
        """Bytes of record data (after decompression) in the batches entered so far: what
        the records handed out, and the rest of the current batch, may cost."""
        return self.dec.data_bytes

    def __next__(self):
        cdef _RecDecoder dec = self.dec
        cdef object r
        if dec.run_active and dec.run.remaining > 0 and not dec.busy:
            # the common case, lazy_next's without its layers: a record of the batch in hand
            try:
                r = dec.v2_next(True)
            except BaseException as exc:
                dec.lazy_failed(exc)
                raise
            self.handed += 1
            return r
        r = self.next_or_none(True)
        if r is None:
            raise StopIteration
        return r

    def take(self, Py_ssize_t n):
        """``list(islice(self, n))``: up to ``n`` records, fewer when the data ended or
        ``stop_at`` stopped it (an empty list: nothing more now), without the iterator
        protocol per record.  An error raises as iterating would, and the records of this
        call go with it."""
        cdef list out = []
        cdef Py_ssize_t k
        cdef object r
        cdef _RecDecoder dec = self.dec
        while n > 0:
            if dec.run_active:
                k = dec.lazy_fill(out, n)
                self.handed += k
                n -= k
                if n == 0 or dec.run_active:
                    break
            r = self.next_or_none(False)
            if r is None:
                break
            out.append(r)
            n -= 1
        return out

    cdef object next_or_none(self, bint one_by_one):
        # __next__'s work: the next record, or None (the data ended, or stop_at stops it)
        cdef _RecEntry e
        cdef _RecDecoder dec = self.dec
        cdef object r
        while True:
            if dec.run_active:
                r = dec.lazy_next(one_by_one)
                if r is not None:
                    self.handed += 1
                    return r
            elif self.idx < self.n:
                r = <object>PyList_GET_ITEM(self.cur, self.idx)
                self.idx += 1
                self.handed += 1
                return r
            self.cur = None
            self.idx = self.n = 0
            if self.exhausted or (self.stop_at >= 0 and dec.data_bytes
                                  + self.handed * self.record_cost >= self.stop_at):
                return None
            if not dec.next_entry(&e):
                self.exhausted = True
                return None
            if e.is_control or dec.run_active:
                continue
            self.cur = dec.records
            dec.records = None
            self.n = PyList_GET_SIZE(self.cur)


@cython.final
cdef class _BatchIterator:
    cdef _RecDecoder dec

    def __iter__(self):
        return self

    def __next__(self):
        cdef _RecEntry e
        if not self.dec.next_entry(&e):
            raise StopIteration
        records = self.dec.records
        self.dec.records = None
        return _rec_make_batch(&e, records)


def iter_records(data, check_crc=True, topic=None, partition=-1, leader_epoch_default=-1, *,
                 max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES, max_ahead_bytes=None,
                 ranges=None):
    """Iterate the user records in ``data`` (a Fetch response's record set).

    Control batches are left out; a truncated entry at the end is skipped.  Each record gets
    ``topic``/``partition``, and ``leader_epoch`` from its batch (``leader_epoch_default``
    when the batch has none).  Raises CorruptRecordError (a KwireError) on malformed data,
    DecompressionLimitError (one) when a batch decompresses to more than
    ``max_decompressed_bytes``.  ``max_ahead_bytes`` bounds the decompressed batches a
    decompression worker holds ahead of the records handed out (None: 8 of them).

    For callers that budget memory: the iterator's ``record_bytes`` counts the record data
    (decompressed) of the batches entered so far and ``handed`` the records handed out; with
    ``stop_at`` set (>= 0) it stops before entering another batch once ``record_bytes`` +
    ``record_cost`` x ``handed`` has reached it (raise ``stop_at`` and iterate on);
    ``exhausted`` says the data itself ended.

    ``ranges``: decode only these ``(start, end)`` byte ranges of ``data`` (ordered, not
    overlapping; kwire.records.record_runs gives them), one after the other with one decoder,
    each as if it were a record set of its own; error positions stay positions in ``data``.
    """
    cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
    it.stop_at = -1
    it.dec = _RecDecoder(data, check_crc, topic, partition, leader_epoch_default,
                         max_decompressed_bytes, -1 if max_ahead_bytes is None else max_ahead_bytes)
    it.dec.lazy = True
    if ranges is not None:
        it.dec.ranges = _rec_ranges(ranges, it.dec.view.len)
        it.dec.end = 0      # (the first next_entry moves to the first range)
    return it


cdef list _rec_ranges(ranges, Py_ssize_t n):
    # iter_records' ranges: (start, end) byte ranges of the buffer, in order, not overlapping
    cdef list out = []
    cdef Py_ssize_t a, b, prev = 0
    for r in ranges:
        a, b = r
        if a < prev or b < a or b > n:
            raise ValueError(f"ranges must be ordered, non-overlapping (start, end) byte ranges "
                             f"of the buffer ({n} bytes); got {r!r}")
        out.append((a, b))
        prev = b
    return out


def iter_batches(data, check_crc=True, *, topic=None, partition=-1, leader_epoch_default=-1,
                 max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES, max_ahead_bytes=None):
    """Iterate the RecordBatch entries in ``data``, control batches included
    (``max_ahead_bytes`` as for iter_records)."""
    cdef _BatchIterator it = _BatchIterator.__new__(_BatchIterator)
    it.dec = _RecDecoder(data, check_crc, topic, partition, leader_epoch_default,
                         max_decompressed_bytes, -1 if max_ahead_bytes is None else max_ahead_bytes)
    return it


# --- columns ----------------------------------------------------------------------------
#
# decode_columns copies nearly all of its input into fresh column buffers.  Memory fresh
# from the OS costs a page fault per 4 KiB, which costs more than the decoding itself, so
# big column blocks go back to a small pool when their _ColumnBuffer dies and the next
# decode_columns call reuses them (bounded: _POOL_SLOTS blocks, _pool_limit bytes).

from libc.stdlib cimport malloc, free
from cpython.buffer cimport PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES

cdef enum:
    _POOL_SLOTS = 32
    _POOL_MIN_BLOCK = 64 * 1024

cdef void* _pool_ptr[_POOL_SLOTS]
cdef Py_ssize_t _pool_cap[_POOL_SLOTS]
cdef int _pool_n = 0
cdef Py_ssize_t _pool_bytes = 0
cdef Py_ssize_t _pool_limit = 64 * 1024 * 1024


cdef extern from *:
    """
    /* Column blocks of several MiB: on Linux map them directly and ask for transparent huge
       pages, so first use costs one page fault per 2 MiB instead of one per 4 KiB. */
    #if defined(__linux__)
    #include <sys/mman.h>
    static void* kwire_big_alloc(size_t n) {
        void* p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
    #ifdef MADV_HUGEPAGE
        madvise(p, n, MADV_HUGEPAGE);
    #endif
        return p;
    }
    static void kwire_big_free(void* p, size_t n) { munmap(p, n); }
    /* growing moves page-table entries instead of copying the bytes */
    static void* kwire_big_realloc(void* p, size_t old, size_t n) {
        void* q = mremap(p, old, n, MREMAP_MAYMOVE);
        return q == MAP_FAILED ? NULL : q;
    }
    #else
    static void* kwire_big_alloc(size_t n) { return malloc(n); }
    static void kwire_big_free(void* p, size_t n) { (void)n; free(p); }
    static void* kwire_big_realloc(void* p, size_t old, size_t n) { (void)old; return realloc(p, n); }
    #endif
    """
    void* kwire_big_alloc(size_t n) nogil
    void kwire_big_free(void* p, size_t n) nogil
    void* kwire_big_realloc(void* p, size_t old, size_t n) nogil


cdef enum:
    _BIG_BLOCK = 4 * 1024 * 1024        # from here on blocks are mapped, in 2 MiB steps
    _BIG_STEP = 2 * 1024 * 1024


cdef void* _pool_take(Py_ssize_t want, Py_ssize_t* cap) noexcept:
    # Smallest retained block that fits (and is not absurdly bigger), else a new one.
    # NULL only when the allocation fails.  Blocks of _BIG_BLOCK or more are mapped (their
    # capacity says so: _pool_free relies on it).
    global _pool_n, _pool_bytes
    cdef int i, best = -1
    cdef void* p
    if want >= _POOL_MIN_BLOCK:
        for i in range(_pool_n):
            if _pool_cap[i] >= want and _pool_cap[i] <= 4 * want + (1 << 20):
                if best < 0 or _pool_cap[i] < _pool_cap[best]:
                    best = i
        if best >= 0:
            p = _pool_ptr[best]
            cap[0] = _pool_cap[best]
            _pool_bytes -= _pool_cap[best]
            _pool_n -= 1
            _pool_ptr[best] = _pool_ptr[_pool_n]
            _pool_cap[best] = _pool_cap[_pool_n]
            return p
    if want >= _BIG_BLOCK:
        cap[0] = (want + _BIG_STEP - 1) // _BIG_STEP * _BIG_STEP
        return kwire_big_alloc(cap[0])
    cap[0] = want if want > 0 else 1
    return malloc(cap[0])


cdef void _pool_free(void* p, Py_ssize_t cap) noexcept:
    if cap >= _BIG_BLOCK:
        kwire_big_free(p, cap)
    else:
        free(p)


cdef void _pool_give(void* p, Py_ssize_t cap) noexcept:
    global _pool_n, _pool_bytes
    if p == NULL:
        return
    if cap >= _POOL_MIN_BLOCK and _pool_n < _POOL_SLOTS and _pool_bytes + cap <= _pool_limit:
        _pool_ptr[_pool_n] = p
        _pool_cap[_pool_n] = cap
        _pool_n += 1
        _pool_bytes += cap
    else:
        _pool_free(p, cap)


@cython.final
cdef class _ColumnBuffer:
    """The read-only memory of one decode_columns column (a buffer-protocol exporter)."""
    cdef void* ptr
    cdef Py_ssize_t cap
    cdef Py_ssize_t nbytes
    cdef Py_ssize_t itemsize
    cdef bytes fmt
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __getbuffer__(self, Py_buffer* view, int flags):
        if flags & PyBUF_WRITABLE == PyBUF_WRITABLE:
            raise BufferError("decode_columns buffers are read-only")
        view.buf = self.ptr
        view.obj = self
        view.len = self.nbytes
        view.readonly = 1
        view.ndim = 1
        if flags & PyBUF_FORMAT == PyBUF_FORMAT:
            view.format = PyBytes_AS_STRING(self.fmt)
            view.itemsize = self.itemsize
        else:
            view.format = NULL
            view.itemsize = 1
        view.shape = self.shape if flags & PyBUF_ND == PyBUF_ND else NULL
        view.strides = self.strides if flags & PyBUF_STRIDES == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __dealloc__(self):
        _pool_give(self.ptr, self.cap)
        self.ptr = NULL


cdef enum:
    # per-record columns
    _C_OFFSET = 0
    _C_TIMESTAMP = 1
    _C_TS_TYPE = 2
    _C_KEY_OFF = 3
    _C_KEY_VALID = 4
    _C_VALUE_OFF = 5
    _C_VALUE_VALID = 6
    _C_HEADER_OFF = 7
    # per-header columns
    _C_HKEY_OFF = 8
    _C_HVALUE_OFF = 9
    _C_HVALUE_VALID = 10
    # data columns (dlen/dcap/dptr index = column - _C_KEY_DATA)
    _C_KEY_DATA = 11
    _C_VALUE_DATA = 12
    _C_HKEY_DATA = 13
    _C_HVALUE_DATA = 14
    _C_COUNT = 15

_COL_NAMES = ("offset", "timestamp", "timestamp_type", "key_offsets", "key_valid",
              "value_offsets", "value_valid", "header_offsets", "header_key_offsets",
              "header_value_offsets", "header_value_valid", "key_data", "value_data",
              "header_key_data", "header_value_data")
_COL_FORMATS = (b"q", b"q", b"b", b"i", b"?", b"i", b"?", b"i", b"i", b"i", b"?",
                b"B", b"B", b"B", b"B")
cdef Py_ssize_t[_C_COUNT] _COL_ITEMSIZE = [8, 8, 1, 4, 1, 4, 1, 4, 4, 4, 1, 1, 1, 1, 1]
# offsets columns hold one more entry than their rows
cdef Py_ssize_t[_C_COUNT] _COL_EXTRA = [0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0]


@cython.final
cdef class _RecColumns:
    """Growable column buffers (raw memory from the pool) that finish() turns into
    _ColumnBuffer objects."""
    cdef void* cols[_C_COUNT]
    cdef Py_ssize_t caps[_C_COUNT]
    cdef Py_ssize_t n, cap_n          # records
    cdef Py_ssize_t m, cap_m          # headers
    cdef Py_ssize_t dlen[4]
    cdef Py_ssize_t dcap[4]
    cdef uint8_t* dptr[4]
    cdef int64_t* p_offset
    cdef int64_t* p_timestamp
    cdef int8_t* p_ts_type
    cdef int32_t* p_key_off
    cdef uint8_t* p_key_valid
    cdef int32_t* p_value_off
    cdef uint8_t* p_value_valid
    cdef int32_t* p_header_off
    cdef int32_t* p_hkey_off
    cdef int32_t* p_hvalue_off
    cdef uint8_t* p_hvalue_valid

    def __cinit__(self, Py_ssize_t records_hint, Py_ssize_t data_hint):
        cdef int i
        for i in range(_C_COUNT):
            self.cols[i] = NULL
            self.caps[i] = 0
        for i in range(4):
            self.dlen[i] = 0
        self.n = self.m = self.cap_n = self.cap_m = 0
        self.grow_records(records_hint if records_hint > 16 else 16)
        self.grow_headers(records_hint if records_hint > 16 else 16)
        self.grow_data(0, records_hint * 16 + 256)
        self.grow_data(1, data_hint + 256)
        self.grow_data(2, records_hint * 16 + 256)
        self.grow_data(3, records_hint * 16 + 256)
        self.p_key_off[0] = 0
        self.p_value_off[0] = 0
        self.p_header_off[0] = 0
        self.p_hkey_off[0] = 0
        self.p_hvalue_off[0] = 0

    def __dealloc__(self):
        cdef int i
        for i in range(_C_COUNT):
            _pool_give(self.cols[i], self.caps[i])
            self.cols[i] = NULL

    cdef int resize(self, int col, Py_ssize_t nbytes, Py_ssize_t used) except -1:
        # move column `col` to a block of at least nbytes, keeping its first `used` bytes
        cdef Py_ssize_t cap
        cdef void* p
        if self.caps[col] >= _BIG_BLOCK and nbytes > self.caps[col]:
            # a mapped block grows in place (or moves without copying)
            cap = (nbytes + _BIG_STEP - 1) // _BIG_STEP * _BIG_STEP
            p = kwire_big_realloc(self.cols[col], self.caps[col], cap)
            if p == NULL:
                raise MemoryError()
            self.cols[col] = p
            self.caps[col] = cap
            return 0
        p = _pool_take(nbytes, &cap)
        if p == NULL:
            raise MemoryError()
        if used:
            memcpy(p, self.cols[col], used)
        _pool_give(self.cols[col], self.caps[col])
        self.cols[col] = p
        self.caps[col] = cap
        return 0

    cdef int grow_records(self, Py_ssize_t cap) except -1:
        cdef int col
        for col in range(_C_HKEY_OFF):
            self.resize(col, (cap + _COL_EXTRA[col]) * _COL_ITEMSIZE[col],
                         (self.n + _COL_EXTRA[col]) * _COL_ITEMSIZE[col] if self.cols[col] else 0)
        self.cap_n = cap
        self.p_offset = <int64_t*>self.cols[_C_OFFSET]
        self.p_timestamp = <int64_t*>self.cols[_C_TIMESTAMP]
        self.p_ts_type = <int8_t*>self.cols[_C_TS_TYPE]
        self.p_key_off = <int32_t*>self.cols[_C_KEY_OFF]
        self.p_key_valid = <uint8_t*>self.cols[_C_KEY_VALID]
        self.p_value_off = <int32_t*>self.cols[_C_VALUE_OFF]
        self.p_value_valid = <uint8_t*>self.cols[_C_VALUE_VALID]
        self.p_header_off = <int32_t*>self.cols[_C_HEADER_OFF]
        return 0

    cdef int grow_headers(self, Py_ssize_t cap) except -1:
        cdef int col
        for col in range(_C_HKEY_OFF, _C_KEY_DATA):
            self.resize(col, (cap + _COL_EXTRA[col]) * _COL_ITEMSIZE[col],
                         (self.m + _COL_EXTRA[col]) * _COL_ITEMSIZE[col] if self.cols[col] else 0)
        self.cap_m = cap
        self.p_hkey_off = <int32_t*>self.cols[_C_HKEY_OFF]
        self.p_hvalue_off = <int32_t*>self.cols[_C_HVALUE_OFF]
        self.p_hvalue_valid = <uint8_t*>self.cols[_C_HVALUE_VALID]
        return 0

    cdef int grow_data(self, int d, Py_ssize_t cap) except -1:
        self.resize(_C_KEY_DATA + d, cap, self.dlen[d])
        self.dcap[d] = self.caps[_C_KEY_DATA + d]
        self.dptr[d] = <uint8_t*>self.cols[_C_KEY_DATA + d]
        return 0

    cdef inline int reserve_records(self, Py_ssize_t k) except -1:
        cdef Py_ssize_t need = self.n + k
        if need > self.cap_n:
            self.grow_records(need if need > 2 * self.cap_n else 2 * self.cap_n)
        return 0

    cdef inline int reserve_headers(self, Py_ssize_t k) except -1:
        cdef Py_ssize_t need = self.m + k
        if need > self.cap_m:
            self.grow_headers(need if need > 2 * self.cap_m else 2 * self.cap_m)
        return 0

    cdef int make_room(self, int d, Py_ssize_t need) except -1:
        if need > 0x7FFFFFFF:
            raise ProtocolError(f"{_COL_NAMES[_C_KEY_DATA + d]} would exceed 2 GiB "
                                "(int32 offsets); decode smaller inputs", position=None)
        self.grow_data(d, need if need > 2 * self.dcap[d] else 2 * self.dcap[d])
        return 0

    cdef inline int put_data(self, int d, const uint8_t* p, Py_ssize_t k) except -1:
        cdef Py_ssize_t need = self.dlen[d] + k
        if need > self.dcap[d]:
            self.make_room(d, need)
        memcpy(self.dptr[d] + self.dlen[d], p, k)
        self.dlen[d] = need
        return 0

    cdef int put_bytes(self, int d, bytes b) except -1:
        return self.put_data(d, <const uint8_t*>PyBytes_AS_STRING(b), len(b))

    cdef int append_record(self, Record r) except -1:
        # The slow path for legacy messages (already decoded into Records).
        cdef Py_ssize_t n = self.n
        self.reserve_records(1)
        self.p_offset[n] = r._offset
        self.p_timestamp[n] = r._timestamp
        self.p_ts_type[n] = <int8_t>r.timestamp_type
        self.p_key_valid[n] = r.key is not None
        if r.key is not None:
            self.put_bytes(0, r.key)
        self.p_key_off[n + 1] = <int32_t>self.dlen[0]
        self.p_value_valid[n] = r.value is not None
        if r.value is not None:
            self.put_bytes(1, r.value)
        self.p_value_off[n + 1] = <int32_t>self.dlen[1]
        self.p_header_off[n + 1] = <int32_t>self.m
        self.n = n + 1
        return 0

    def finish(self):
        cdef int col
        cdef Py_ssize_t nbytes
        cdef _ColumnBuffer cb
        out = {"num_records": self.n}
        for col in range(_C_COUNT):
            if col < _C_HKEY_OFF:
                nbytes = (self.n + _COL_EXTRA[col]) * _COL_ITEMSIZE[col]
            elif col < _C_KEY_DATA:
                nbytes = (self.m + _COL_EXTRA[col]) * _COL_ITEMSIZE[col]
            else:
                nbytes = self.dlen[col - _C_KEY_DATA]
            if self.caps[col] > 2 * nbytes + _POOL_MIN_BLOCK:
                # mostly unused: copy out and leave the big block to the pool
                self.resize(col, nbytes, nbytes)
            cb = _ColumnBuffer.__new__(_ColumnBuffer)
            cb.ptr = self.cols[col]
            cb.cap = self.caps[col]
            self.cols[col] = NULL
            self.caps[col] = 0
            cb.nbytes = nbytes
            cb.itemsize = _COL_ITEMSIZE[col]
            cb.shape[0] = nbytes // cb.itemsize
            cb.strides[0] = cb.itemsize
            cb.fmt = _COL_FORMATS[col]
            out[_COL_NAMES[col]] = memoryview(cb)
        return out


cdef inline int _col_put(_RecColumns s, int d, uint8_t** dp, Py_ssize_t* dl, Py_ssize_t* dc,
                         const uint8_t* p, Py_ssize_t k) except -1:
    # append k bytes to data column d, whose pointer/length/capacity the caller keeps in
    # locals (dp/dl/dc); grow through the sink when full
    if dl[d] + k > dc[d]:
        s.dlen[d] = dl[d]
        s.make_room(d, dl[d] + k)
        dp[d] = s.dptr[d]
        dc[d] = s.dcap[d]
    _rec_copy(dp[d] + dl[d], p, k)
    dl[d] += k
    return 0


cdef Py_ssize_t _rec_count_hint(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end) noexcept:
    # decode_columns' first guess of the records in [pos, end): the records counts of the
    # complete v2 entries there (no checks: a guess; the decoder checks)
    cdef Py_ssize_t hint = 0, size
    cdef int32_t count
    while end - pos >= _V2_HEADER:
        size = <int32_t>ld_be32(buf + pos + 8)
        if size < _MIN_ENTRY_SIZE or size > end - pos - _LOG_OVERHEAD:
            break
        count = <int32_t>ld_be32(buf + pos + 57)
        if buf[pos + 16] == 2 and count > 0:
            hint += count if count < size else size
        pos += _LOG_OVERHEAD + size
    return hint


def decode_columns(data, check_crc=True, *, max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES,
                   ranges=None):
    """Decode every user record in ``data`` into column buffers, with no per-record object.

    Returns a dict: ``num_records``; ``offset``/``timestamp`` (int64), ``timestamp_type``
    (int8); ``key_offsets``/``value_offsets`` (int32, n+1) into ``key_data``/``value_data``
    (uint8) with ``key_valid``/``value_valid`` (bool); ``header_offsets`` (int32, n+1) into
    the flattened headers: ``header_key_offsets`` + ``header_key_data`` (UTF-8),
    ``header_value_offsets`` + ``header_value_data`` + ``header_value_valid``.  Every column
    is a read-only memoryview with its item format (``q``, ``i``, ``b``, ``?``, ``B``):
    numpy.asarray / pyarrow.py_buffer take them without copying (``bytes(col)`` copies).
    Control batches are left out, as in iter_records.  The memory of big columns goes back
    to a small reuse pool (at most 64 MiB) when they are freed.

    ``ranges``: decode only these ``(start, end)`` byte ranges of ``data``, into one set of
    columns, as iter_records(ranges=) does (kwire.records.record_runs gives them).
    """
    cdef _RecDecoder dec = _RecDecoder(data, check_crc, None, -1, -1, max_decompressed_bytes)
    cdef _RecEntry e
    cdef Py_ssize_t hint = 0, data_hint = 0, a, b
    if ranges is None:
        hint = _rec_count_hint(dec.buf, 0, dec.end)
        data_hint = dec.end
    else:
        dec.ranges = _rec_ranges(ranges, dec.view.len)
        dec.end = 0      # (the first next_entry moves to the first range)
        for a, b in dec.ranges:
            hint += _rec_count_hint(dec.buf, a, b)
            data_hint += b - a
    # the columns are sized from the batch headers
    dec.sink = _RecColumns(hint, data_hint)
    while dec.next_entry(&e):
        pass
    return dec.sink.finish()


# --- building ---------------------------------------------------------------------------

cdef struct _RecWriter:
    uint8_t* data
    Py_ssize_t len
    Py_ssize_t cap


cdef int _w_reserve(_RecWriter* w, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef void* p
    if w.len + n <= w.cap:
        return 0
    cap = w.cap * 2
    if cap < w.len + n:
        cap = w.len + n
    if cap < 256:
        cap = 256
    p = PyMem_Realloc(w.data, cap)
    if p == NULL:
        raise MemoryError()
    w.data = <uint8_t*>p
    w.cap = cap
    return 0


cdef inline int _w_uvarint(_RecWriter* w, uint64_t v) except -1:
    _w_reserve(w, 10)
    while v >= 0x80:
        w.data[w.len] = <uint8_t>(v | 0x80)
        w.len += 1
        v >>= 7
    w.data[w.len] = <uint8_t>v
    w.len += 1
    return 0


cdef inline int _w_zz(_RecWriter* w, int64_t v) except -1:
    return _w_uvarint(w, (<uint64_t>v << 1) ^ <uint64_t>(v >> 63))


cdef inline int _w_raw(_RecWriter* w, const void* p, Py_ssize_t n) except -1:
    _w_reserve(w, n)
    memcpy(w.data + w.len, p, n)
    w.len += n
    return 0


cdef int _w_nullable(_RecWriter* w, object b) except -1:
    # varint length + bytes, -1 for None; anything with the buffer protocol is accepted
    cdef Py_buffer view
    if b is None:
        return _w_zz(w, -1)
    PyObject_GetBuffer(b, &view, PyBUF_SIMPLE)
    try:
        _w_zz(w, view.len)
        _w_raw(w, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef inline void _st_be(uint8_t* p, uint64_t v, int n) noexcept:
    cdef int i
    for i in range(n - 1, -1, -1):
        p[i] = <uint8_t>v
        v >>= 8


cdef object _rec_compress(int codec, bytes data):
    cdef Py_ssize_t i, n
    if codec == 1:
        return bytes(_cramjam.gzip.compress(data))
    if codec == 2:
        # xerial framing, as the Java producer writes it
        out = bytearray(_XERIAL_HEADER)
        n = len(data)
        mv = memoryview(data)
        for i in range(0, n, _XERIAL_BLOCK):
            block = _cramjam.snappy.compress_raw(mv[i:i + _XERIAL_BLOCK])
            out += len(block).to_bytes(4, "big")
            out += block
        return bytes(out)
    if codec == 3:
        # independent blocks: the Java consumer does not accept linked LZ4 blocks
        comp = _cramjam.lz4.Compressor(None, False, False)
        comp.compress(data)
        return bytes(comp.finish())
    return bytes(_cramjam.zstd.compress(data))


def build_batch(records, base_offset=0, compression="none", *, magic=2, producer_id=-1,
                producer_epoch=-1, base_sequence=-1, is_transactional=False, timestamp_type=0,
                partition_leader_epoch=-1, is_control=False):
    """Encode one magic-2 record batch.  Each record is ``(key, value, headers, timestamp_ms)``
    with key/value bytes-like or None, headers an iterable of ``(str, bytes-like | None)``,
    and timestamp_ms an int (None: now).  Offsets are base_offset, base_offset + 1, ...
    """
    cdef _RecWriter body, rec
    cdef int64_t first_ts = -1, max_ts = -1, ts
    cdef int32_t i, count
    cdef int codec
    cdef uint8_t* h
    cdef int attributes
    if magic != 2:
        raise ValueError(f"build_batch encodes magic 2 only, not {magic!r}")
    try:
        codec = _CODEC_NAMES.index(compression)
    except ValueError:
        raise ValueError(f"unknown compression {compression!r}; use one of {_CODEC_NAMES}") from None
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type!r}")
    items = []
    now_ms = None
    for item in records:
        key, value, headers, timestamp = item
        if timestamp is None:
            if now_ms is None:
                now_ms = int(_time.time() * 1000)
            timestamp = now_ms
        items.append((key, value, headers, timestamp))
    count = len(items)
    if count:
        first_ts = items[0][3]
        max_ts = max(it[3] for it in items)
    body.data = NULL
    body.len = body.cap = 0
    rec.data = NULL
    rec.len = rec.cap = 0
    try:
        for i in range(count):
            key, value, headers, timestamp = items[i]
            ts = timestamp
            rec.len = 0
            _w_raw(&rec, b"\x00", 1)                       # record attributes
            _w_zz(&rec, _rec_add64(ts, -first_ts))
            _w_zz(&rec, i)
            _w_nullable(&rec, key)
            _w_nullable(&rec, value)
            hl = list(headers) if headers is not None else []
            _w_zz(&rec, len(hl))
            for hk, hv in hl:
                if not isinstance(hk, str):
                    raise TypeError(f"header keys must be str, not {type(hk).__name__}")
                _w_nullable(&rec, (<str>hk).encode("utf-8", "surrogateescape"))
                _w_nullable(&rec, hv)
            _w_zz(&body, rec.len)
            _w_raw(&body, rec.data, rec.len)
        payload = PyBytes_FromStringAndSize(<const char*>body.data, body.len)
    finally:
        PyMem_Free(body.data)
        PyMem_Free(rec.data)
    if codec:
        payload = _rec_compress(codec, payload)
    attributes = codec | (timestamp_type << 3) | (0x10 if is_transactional else 0) | (0x20 if is_control else 0)
    out = PyBytes_FromStringAndSize(NULL, _V2_HEADER + len(payload))
    h = <uint8_t*>PyBytes_AS_STRING(out)
    _st_be(h, <uint64_t><int64_t>base_offset, 8)
    _st_be(h + 8, <uint32_t>(_V2_HEADER - _LOG_OVERHEAD + len(payload)), 4)
    _st_be(h + 12, <uint32_t><int32_t>partition_leader_epoch, 4)
    h[16] = 2
    _st_be(h + 21, <uint16_t>attributes, 2)
    _st_be(h + 23, <uint32_t><int32_t>(count - 1 if count else 0), 4)
    _st_be(h + 27, <uint64_t>first_ts, 8)
    _st_be(h + 35, <uint64_t>max_ts, 8)
    _st_be(h + 43, <uint64_t><int64_t>producer_id, 8)
    _st_be(h + 51, <uint16_t><int16_t>producer_epoch, 2)
    _st_be(h + 53, <uint32_t><int32_t>base_sequence, 4)
    _st_be(h + 57, <uint32_t>count, 4)
    memcpy(h + _V2_HEADER, PyBytes_AS_STRING(payload), len(payload))
    _st_be(h + 17, <uint32_t>_crc32c(_rec_view(h + _V2_CRC_START, len(payload) + _V2_HEADER - _V2_CRC_START)), 4)
    return out
