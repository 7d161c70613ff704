# Bounds-checked primitive readers shared by every decoder in kwire._codec.
#
# A decoder takes (pointer, end) once and advances a Cursor through these inline helpers.
# Every helper checks the bytes it needs against `end` in one place (`_need`), so no
# decoder can read past its buffer.  Helpers return C values and signal errors with
# `except -1` (or `except? -1` where -1 is a legal value) raising kwire.errors types.
#
# All multi-byte integers on the Kafka wire are big-endian.

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.ref cimport PyObject
from cpython.memoryview cimport PyMemoryView_FromObject


cdef struct Cursor:
    const uint8_t* buf   # start of the buffer (for error positions)
    Py_ssize_t pos       # next byte to read
    Py_ssize_t end       # one past the last readable byte
    PyObject* owner      # message decoding only: a read-only byte memoryview of the same
                         # buffer (borrowed), that `records` fields are sliced from; or NULL


cdef inline int _truncated(Cursor* c, Py_ssize_t n) except -1:
    raise TruncatedError(
        f"needed {n} bytes at position {c.pos}, only {c.end - c.pos} left", position=c.pos)


cdef inline int _need(Cursor* c, Py_ssize_t n) except -1:
    if n < 0 or n > c.end - c.pos:
        _truncated(c, n)
    return 0


cdef inline int8_t rd_i8(Cursor* c) except? -1:
    _need(c, 1)
    cdef int8_t v = <int8_t>c.buf[c.pos]
    c.pos += 1
    return v


cdef inline int16_t rd_i16(Cursor* c) except? -1:
    _need(c, 2)
    cdef const uint8_t* p = c.buf + c.pos
    c.pos += 2
    return <int16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline uint16_t rd_u16(Cursor* c) except? 0xFFFF:
    _need(c, 2)
    cdef const uint8_t* p = c.buf + c.pos
    c.pos += 2
    return <uint16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline uint32_t rd_u32(Cursor* c) except? 0xFFFFFFFF:
    _need(c, 4)
    cdef const uint8_t* p = c.buf + c.pos
    c.pos += 4
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline int32_t rd_i32(Cursor* c) except? -1:
    return <int32_t>rd_u32(c)


cdef inline int64_t rd_i64(Cursor* c) except? -1:
    _need(c, 8)
    cdef const uint8_t* p = c.buf + c.pos
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    c.pos += 8
    return <int64_t>v


cdef inline uint64_t rd_uvarint64(Cursor* c) except? 0xFFFFFFFFFFFFFFFF:
    # Unsigned LEB128; at most 10 bytes for 64 bits.  Overlong encodings are an error
    # rather than silently wrapping.
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if c.pos >= c.end:
            _truncated(c, 1)
        b = c.buf[c.pos]
        c.pos += 1
        if shift == 63 and b > 1:
            raise ProtocolError(f"varint overflows 64 bits at position {c.pos - 1}", position=c.pos - 1)
        v |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            return v
        shift += 7
        if shift > 63:
            raise ProtocolError(f"varint longer than 10 bytes at position {c.pos - 1}", position=c.pos - 1)


cdef inline uint32_t rd_uvarint(Cursor* c) except? 0xFFFFFFFF:
    # Unsigned varint that must fit 32 bits (compact lengths, tag numbers, sizes).
    cdef Py_ssize_t start = c.pos
    cdef uint64_t v = rd_uvarint64(c)
    if v > 0xFFFFFFFF:
        raise ProtocolError(f"unsigned varint {v} exceeds 32 bits at position {start}", position=start)
    return <uint32_t>v


cdef inline int64_t rd_varlong(Cursor* c) except? -1:
    # Zigzag-encoded signed 64-bit varint (record fields).
    cdef uint64_t v = rd_uvarint64(c)
    return <int64_t>(v >> 1) ^ -(<int64_t>(v & 1))


cdef inline int32_t rd_varint(Cursor* c) except? -1:
    # Zigzag-encoded signed 32-bit varint (record fields).
    cdef Py_ssize_t start = c.pos
    cdef uint64_t v = rd_uvarint64(c)
    if v > 0xFFFFFFFF:
        raise ProtocolError(f"varint {v} exceeds 32 bits at position {start}", position=start)
    return <int32_t>(<uint32_t>(v >> 1) ^ -(<int32_t>(v & 1)))


cdef inline bytes rd_bytes_n(Cursor* c, Py_ssize_t n):
    _need(c, n)
    cdef bytes out = PyBytes_FromStringAndSize(<const char*>(c.buf + c.pos), n)
    c.pos += n
    return out


cdef inline str rd_str_n(Cursor* c, Py_ssize_t n):
    _need(c, n)
    cdef Py_ssize_t start = c.pos
    try:
        out = PyUnicode_DecodeUTF8(<const char*>(c.buf + c.pos), n, NULL)
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"invalid UTF-8 in string at position {start}: {exc.reason}", position=start) from None
    c.pos += n
    return out


# --- helpers added for the record layer (_records.pxi) ------------------------------------
# Same bounds checks as above, but the value comes back through a pointer and errors are a
# plain `except -1`: record fields use -1 for "null", and with `except? -1` every null key or
# value would cost a PyErr_Occurred() call in the hot loop.

cdef inline int rd_zz32_to(Cursor* c, int32_t* out) except -1:
    # Zigzag varint (32-bit).  One- and two-byte values (lengths < 64 / < 8192, the common
    # case in records) are decoded inline; longer ones go through the general reader.
    cdef uint32_t v
    cdef const uint8_t* p = c.buf + c.pos
    cdef Py_ssize_t left = c.end - c.pos
    if left >= 1 and p[0] < 0x80:
        c.pos += 1
        v = p[0]
    elif left >= 2 and p[1] < 0x80:
        c.pos += 2
        v = (<uint32_t>(p[0] & 0x7F)) | (<uint32_t>p[1] << 7)
    else:
        out[0] = rd_varint(c)
        return 0
    out[0] = <int32_t>(v >> 1) ^ -(<int32_t>(v & 1))
    return 0


cdef inline int rd_zz64_to(Cursor* c, int64_t* out) except -1:
    # Zigzag varlong (64-bit), same inline one- and two-byte paths.
    cdef uint64_t v
    cdef const uint8_t* p = c.buf + c.pos
    cdef Py_ssize_t left = c.end - c.pos
    if left >= 1 and p[0] < 0x80:
        c.pos += 1
        v = p[0]
    elif left >= 2 and p[1] < 0x80:
        c.pos += 2
        v = (<uint64_t>(p[0] & 0x7F)) | (<uint64_t>p[1] << 7)
    else:
        out[0] = rd_varlong(c)
        return 0
    out[0] = <int64_t>(v >> 1) ^ -(<int64_t>(v & 1))
    return 0


cdef inline int rd_view(Cursor* c, Py_ssize_t n, const uint8_t** out) except -1:
    # Zero-copy: point at the next n bytes (valid while the buffer is held) and skip them.
    _need(c, n)
    out[0] = c.buf + c.pos
    c.pos += n
    return 0


cdef inline uint32_t ld_be32(const uint8_t* p) noexcept nogil:
    # Unchecked big-endian load; the caller has already checked the bounds.
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


# --- receive buffers ------------------------------------------------------------------------------

from cpython.bytearray cimport PyByteArray_FromStringAndSize


def receive_buffer(Py_ssize_t size):
    """A ``bytearray`` of ``size`` bytes whose contents are left uninitialised, for a socket to
    fill (kwire.net.framing): ``bytearray(size)`` writes zeros over it, under the GIL, and on
    fresh memory that first touch is also where every page fault lands (about 2.5 ms for 3 MB
    here); left untouched, the pages are faulted in by ``recv_into``, which releases the GIL.
    Nothing reads the bytes before they are written: payloads are views of the filled part."""
    if size < 0:
        raise ValueError(f"receive_buffer: size {size} is negative")
    return PyByteArray_FromStringAndSize(NULL, size)
