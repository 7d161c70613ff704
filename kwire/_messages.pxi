# Table-driven request/response codec: the compiled twin of kwire/_pycodec/messages.py.
#
# It walks a plan built by kwire.protocol.schema.build_plan:
#   plan = (ops, tagged_ops, flexible);  op = (code, name, nullable, default, sub, tag, flexible)
#
# Wire encodings, by type:
#   bool      1 byte, non-zero is true          int8/16/32/64, uint16/32: big-endian
#   float64   8-byte IEEE 754, big-endian       uuid: 16 raw bytes
#   string    int16 length (-1 null) + UTF-8    | flexible: uvarint(length + 1), 0 = null
#   bytes     int32 length (-1 null) + bytes    | flexible: uvarint(length + 1), 0 = null
#   records   as bytes (a record-batch blob, decoded separately by kwire.records); decoded as a
#             read-only memoryview of the message buffer, not a copy
#   array     int32 count (-1 null) + elements  | flexible: uvarint(count + 1), 0 = null
#   struct    its fields in order; a nullable struct is preceded by int8 (-1 null, 1 present)
#   flexible structs end with tagged fields:
#             uvarint count, then per field: uvarint tag, uvarint size, `size` bytes of value

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from libc.string cimport memcpy as _m_memcpy
import uuid as _uuid_mod
import struct as _struct_mod

from kwire._plan import struct_default as _struct_default

cdef enum:
    C_BOOL = 1
    C_INT8 = 2
    C_INT16 = 3
    C_INT32 = 4
    C_INT64 = 5
    C_UINT16 = 6
    C_UINT32 = 7
    C_FLOAT64 = 8
    C_STRING = 9
    C_BYTES = 10
    C_RECORDS = 11
    C_UUID = 12
    C_STRUCT = 13
    C_ARRAY = 14

cdef object _UUID = _uuid_mod.UUID
cdef object _F64 = _struct_mod.Struct(">d")


cdef inline Py_ssize_t _rd_length(Cursor* c, bint flexible, int width, bint nullable, str what) except -2:
    # A length/count prefix; -1 is null.  Other negative values are corrupt.
    cdef Py_ssize_t start = c.pos
    cdef Py_ssize_t n
    if flexible:
        n = <Py_ssize_t>rd_uvarint(c) - 1
    elif width == 2:
        n = rd_i16(c)
    else:
        n = rd_i32(c)
    if n < -1 or (n == -1 and not nullable):
        raise ProtocolError(f"invalid {what} length {n} at position {start}", position=start)
    return n


cdef object _msg_default(tuple op):
    cdef int code = op[0]
    if code == C_STRUCT and not op[2]:
        return _struct_default(op[4])
    d = op[3]
    if type(d) is list:
        return []
    return d


# --- decoding ---------------------------------------------------------------------------
#
# Plans arrive as nested tuples (the contract shared with the pure twin).  For decoding they are
# compiled once into _Plan/_Op objects whose fields are C values, so the hot loop reads C
# attributes instead of indexing and unboxing tuple items for every field of every message.

cdef class _Op:
    cdef int code
    cdef bint nullable
    cdef bint flexible
    cdef int tag
    cdef object name
    cdef object default          # value for an absent tagged field (see _fresh)
    cdef bint flat_default       # default is a dict of scalars only
    cdef _Plan plan              # T_STRUCT, or an array whose elements are structs
    cdef _Op elem                # an array of non-struct elements


cdef class _Plan:
    cdef list ops                # untagged fields, wire order
    cdef list tagged             # tagged fields (flexible versions)
    cdef bint flexible
    cdef bint has_records        # a records field, here or in a nested struct
    cdef object plan_tuple       # keeps the source tuple alive while it keys the cache


cdef dict _COMPILED = {}         # id(plan tuple) -> _Plan


cdef object _fresh(object v):
    # Defaults are shared templates: hand out copies of the mutable ones.
    if type(v) is dict:
        return {k: _fresh(x) for k, x in (<dict>v).items()}
    if type(v) is list:
        return []
    return v


cdef inline object _fresh_default(_Op op):
    # Most struct defaults hold only scalars: a C-level dict copy is enough.
    if op.flat_default:
        return (<dict>op.default).copy()
    return _fresh(op.default)


cdef _Op _compile_op(tuple op):
    cdef _Op o = _Op.__new__(_Op)
    o.code = op[0]
    o.name = op[1]
    o.nullable = op[2]
    o.tag = op[5]
    o.flexible = op[6]
    if o.code == C_STRUCT:
        o.plan = _compile(op[4])
        o.default = None if o.nullable else _struct_default(op[4])
        o.flat_default = type(o.default) is dict and not any(
            type(x) is dict or type(x) is list for x in (<dict>o.default).values())
    elif o.code == C_ARRAY:
        sub = op[4]
        if sub[0] == C_STRUCT:
            o.plan = _compile(sub[4])
        else:
            o.elem = _compile_op(sub)
        o.default = op[3]
    else:
        o.default = op[3]
    return o


cdef _Plan _compile(tuple plan):
    cdef _Plan p = _COMPILED.get(id(plan))
    if p is not None and p.plan_tuple is plan:
        return p
    p = _Plan.__new__(_Plan)
    p.plan_tuple = plan
    p.ops = [_compile_op(op) for op in plan[0]]
    p.tagged = [_compile_op(op) for op in plan[1]]
    p.flexible = plan[2]
    p.has_records = any(_op_has_records(o) for o in p.ops) or any(_op_has_records(o) for o in p.tagged)
    _COMPILED[id(plan)] = p
    return p


cdef bint _op_has_records(_Op o):
    if o.code == C_RECORDS:
        return True
    if o.plan is not None:
        return o.plan.has_records
    return o.elem is not None and _op_has_records(o.elem)


cdef object _records_owner(object data, _Plan plan):
    # Record sets are handed out as views of the message's buffer, not copies: a Fetch answer is
    # mostly records, and copying them would double the memory traffic of every fetch.
    if not plan.has_records:
        return None
    cdef object mv = PyMemoryView_FromObject(data)
    if mv.ndim != 1 or mv.itemsize != 1 or mv.format != "B":
        mv = mv.cast("B")
    return mv.toreadonly()


cdef object _rd_value(Cursor* c, _Op op):
    cdef int code = op.code
    cdef Py_ssize_t n, i, start
    cdef list items
    cdef _Plan sub
    if code == C_INT32:
        return rd_i32(c)
    if code == C_INT64:
        return rd_i64(c)
    if code == C_INT16:
        return rd_i16(c)
    if code == C_STRING:
        n = _rd_length(c, op.flexible, 2, op.nullable, "string")
        if n < 0:
            return None
        return rd_str_n(c, n)
    if code == C_INT8:
        return rd_i8(c)
    if code == C_ARRAY:
        start = c.pos
        n = _rd_length(c, op.flexible, 4, op.nullable, "array")
        if n < 0:
            return None
        # Every element takes at least one byte: a forged count cannot make us loop or allocate.
        if n > c.end - c.pos:
            raise TruncatedError(
                f"array of {n} elements at position {start} exceeds the {c.end - c.pos} bytes left",
                position=start)
        items = []
        if op.plan is not None:
            sub = op.plan
            for i in range(n):
                items.append(_rd_struct(c, sub))
        else:
            for i in range(n):
                items.append(_rd_value(c, op.elem))
        return items
    if code == C_STRUCT:
        if op.nullable and rd_i8(c) < 0:
            return None
        return _rd_struct(c, op.plan)
    if code == C_BYTES or code == C_RECORDS:
        n = _rd_length(c, op.flexible, 4, op.nullable or code == C_RECORDS, "bytes")
        if n < 0:
            return None
        if code == C_RECORDS and c.owner != NULL:
            _need(c, n)
            c.pos += n
            return (<object>c.owner)[c.pos - n:c.pos]
        return rd_bytes_n(c, n)
    if code == C_BOOL:
        return rd_i8(c) != 0
    if code == C_UUID:
        return _UUID(bytes=rd_bytes_n(c, 16))
    if code == C_UINT16:
        return rd_u16(c)
    if code == C_UINT32:
        return rd_u32(c)
    if code == C_FLOAT64:
        return _F64.unpack_from(rd_bytes_n(c, 8))[0]
    raise ProtocolError(f"unknown type code {code} for field {op.name}")


cdef dict _rd_struct(Cursor* c, _Plan plan):
    cdef dict out = {}
    cdef _Op op
    cdef _Op found
    cdef uint32_t count, k, tag, size
    cdef Py_ssize_t stop, saved_end
    for op in plan.ops:
        out[op.name] = _rd_value(c, op)
    if not plan.flexible:
        return out
    for op in plan.tagged:
        out[op.name] = _fresh_default(op)
    count = rd_uvarint(c)
    for k in range(count):
        tag = rd_uvarint(c)
        size = rd_uvarint(c)
        _need(c, size)
        stop = c.pos + size
        found = None
        for op in plan.tagged:
            if <uint32_t>op.tag == tag:
                found = op
                break
        if found is None:
            out.setdefault("_unknown_tags", {})[tag] = rd_bytes_n(c, size)
            continue
        saved_end = c.end
        c.end = stop
        try:
            out[found.name] = _rd_value(c, found)
        finally:
            c.end = saved_end
        if c.pos != stop:
            raise TrailingBytesError(
                f"tagged field {tag} ({found.name}) left {stop - c.pos} bytes unread", position=c.pos)
    return out


def decode_struct(tuple plan, data, Py_ssize_t pos=0, Py_ssize_t end=-1):
    """Decode one struct at ``pos``; returns ``(dict, next_pos)``.  Bytes after it are allowed."""
    cdef Py_buffer view
    cdef Cursor c
    cdef _Plan compiled = _compile(plan)
    cdef object owner = _records_owner(data, compiled)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        c.buf = <const uint8_t*>view.buf
        c.owner = <PyObject*>owner if owner is not None else NULL
        c.end = view.len if end < 0 else min(end, view.len)
        if pos < 0 or pos > c.end:
            raise TruncatedError(f"start position {pos} is outside the buffer", position=pos)
        c.pos = pos
        value = _rd_struct(&c, compiled)
        return value, c.pos
    finally:
        PyBuffer_Release(&view)


def decode_message(tuple plan, data):
    """Decode a whole message body; every byte must be consumed."""
    cdef Py_buffer view
    cdef Cursor c
    cdef _Plan compiled = _compile(plan)
    cdef object owner = _records_owner(data, compiled)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        c.buf = <const uint8_t*>view.buf
        c.owner = <PyObject*>owner if owner is not None else NULL
        c.pos = 0
        c.end = view.len
        value = _rd_struct(&c, compiled)
        if c.pos != c.end:
            raise TrailingBytesError(f"{c.end - c.pos} bytes left over after the message at position {c.pos}",
                                     position=c.pos)
        return value
    finally:
        PyBuffer_Release(&view)


# --- encoding ------------------------------------------------------------------------------

cdef class _WBuf:
    """A growable byte buffer; appends are amortised O(1)."""
    cdef bytearray data
    cdef Py_ssize_t size

    def __cinit__(self):
        self.data = bytearray(256)
        self.size = 0

    cdef inline char* reserve(self, Py_ssize_t n) except NULL:
        cdef Py_ssize_t cap = PyByteArray_GET_SIZE(self.data)
        if self.size + n > cap:
            while cap < self.size + n:
                cap *= 2
            PyByteArray_Resize(self.data, cap)
        cdef char* p = PyByteArray_AS_STRING(self.data) + self.size
        self.size += n
        return p

    cdef inline int put_u8(self, uint8_t v) except -1:
        self.reserve(1)[0] = <char>v
        return 0

    cdef inline int put_be(self, uint64_t v, int width) except -1:
        cdef char* p = self.reserve(width)
        cdef int i
        for i in range(width):
            p[i] = <char>((v >> (8 * (width - 1 - i))) & 0xFF)
        return 0

    cdef inline int put_uvarint(self, uint64_t v) except -1:
        while v >= 0x80:
            self.put_u8(<uint8_t>((v & 0x7F) | 0x80))
            v >>= 7
        self.put_u8(<uint8_t>v)
        return 0

    cdef inline int put_raw(self, const char* src, Py_ssize_t n) except -1:
        if n:
            _m_memcpy(self.reserve(n), src, n)
        return 0

    cdef bytearray finish(self):
        PyByteArray_Resize(self.data, self.size)
        return self.data


cdef int _wr_length(_WBuf w, Py_ssize_t n, bint flexible, int width) except -1:
    if flexible:
        w.put_uvarint(<uint64_t>(n + 1))
    else:
        w.put_be(<uint64_t>(<int64_t>n), width)
    return 0


cdef int _wr_null(tuple op) except -1:
    if not op[2]:
        raise ProtocolError(f"field {op[1]} is not nullable in this version")
    return 0


# Python-int bounds per (width, signed): computed in Python so 64-bit limits cannot overflow C.
cdef dict _INT_BOUNDS = {
    (w, sg): ((-(1 << (8 * w - 1)), (1 << (8 * w - 1)) - 1) if sg else (0, (1 << (8 * w)) - 1))
    for w in (1, 2, 4, 8) for sg in (True, False)
}


cdef int _wr_int(_WBuf w, object v, int width, bint signed, str name) except -1:
    lo, hi = _INT_BOUNDS[(width, signed)]
    if not isinstance(v, int) or v < lo or v > hi:
        raise ProtocolError(f"field {name}: {v!r} does not fit a {'' if signed else 'u'}int{8 * width}")
    if signed:
        w.put_be(<uint64_t>(<int64_t>v), width)
    else:
        w.put_be(<uint64_t>v, width)
    return 0


cdef int _wr_value(_WBuf w, tuple op, object v) except -1:
    cdef int code = op[0]
    cdef bint flexible = op[6]
    cdef tuple sub
    cdef bytes b
    cdef const unsigned char[:] mv
    if code == C_INT32:
        return _wr_int(w, v, 4, True, op[1])
    if code == C_INT16:
        return _wr_int(w, v, 2, True, op[1])
    if code == C_INT64:
        return _wr_int(w, v, 8, True, op[1])
    if code == C_INT8:
        return _wr_int(w, v, 1, True, op[1])
    if code == C_UINT16:
        return _wr_int(w, v, 2, False, op[1])
    if code == C_UINT32:
        return _wr_int(w, v, 4, False, op[1])
    if code == C_STRING:
        if v is None:
            _wr_null(op)
            return _wr_length(w, -1, flexible, 2)
        b = (<str?>v).encode("utf-8")
        if not flexible and len(b) > 0x7FFF:
            raise ProtocolError(f"field {op[1]}: string of {len(b)} bytes exceeds int16 length")
        _wr_length(w, len(b), flexible, 2)
        return w.put_raw(b, len(b))
    if code == C_BYTES or code == C_RECORDS:
        if v is None:
            if code != C_RECORDS:
                _wr_null(op)
            return _wr_length(w, -1, flexible, 4)
        if isinstance(v, bytes):
            b = <bytes>v
        else:
            b = bytes(v)
        _wr_length(w, len(b), flexible, 4)
        return w.put_raw(b, len(b))
    if code == C_ARRAY:
        if v is None:
            _wr_null(op)
            return _wr_length(w, -1, flexible, 4)
        _wr_length(w, len(v), flexible, 4)
        sub = op[4]
        if sub[0] == C_STRUCT:
            for item in v:
                _wr_struct(w, sub[4], item)
        else:
            for item in v:
                _wr_value(w, sub, item)
        return 0
    if code == C_STRUCT:
        if op[2]:
            if v is None:
                return w.put_u8(0xFF)
            w.put_u8(1)
        elif v is None:
            _wr_null(op)
        return _wr_struct(w, op[4], v)
    if code == C_BOOL:
        return w.put_u8(1 if v else 0)
    if code == C_UUID:
        if isinstance(v, _UUID):
            b = v.bytes
        elif isinstance(v, (bytes, bytearray)) and len(v) == 16:
            b = bytes(v)
        else:
            raise ProtocolError(f"field {op[1]}: expected a UUID, got {v!r}")
        return w.put_raw(b, 16)
    if code == C_FLOAT64:
        b = _F64.pack(v)
        return w.put_raw(b, 8)
    raise ProtocolError(f"unknown type code {code} for field {op[1]}")


cdef int _wr_struct(_WBuf w, tuple plan, object value) except -1:
    cdef tuple ops = plan[0]
    cdef tuple tagged_ops = plan[1]
    cdef bint flexible = plan[2]
    cdef tuple op
    cdef dict d
    cdef list fields
    cdef _WBuf tw
    if not isinstance(value, dict):
        raise ProtocolError(f"expected a dict for a struct, got {type(value).__name__}")
    d = <dict>value
    for op in ops:
        name = op[1]
        if name in d:
            _wr_value(w, op, d[name])
        else:
            _wr_value(w, op, _msg_default(op))
    if not flexible:
        return 0
    fields = []
    for op in tagged_ops:
        name = op[1]
        if name not in d:
            continue
        v = d[name]
        if v == _msg_default(op):
            continue  # tagged fields are written only when they differ from the default
        tw = _WBuf()
        _wr_value(tw, op, v)
        fields.append((op[5], bytes(tw.finish())))
    unknown = d.get("_unknown_tags")
    if unknown:
        fields.extend(unknown.items())
        fields.sort()
    w.put_uvarint(len(fields))
    for tag, data in fields:
        w.put_uvarint(tag)
        w.put_uvarint(len(data))
        w.put_raw(data, len(data))
    return 0


def encode_struct(tuple plan, value, out=None):
    """Encode ``value`` (a dict) by ``plan``; appends to ``out`` (a bytearray) if given."""
    cdef _WBuf w = _WBuf()
    _wr_struct(w, plan, value)
    data = w.finish()
    if out is None:
        return data
    out += data
    return out


def encode_message(tuple plan, value):
    cdef _WBuf w = _WBuf()
    _wr_struct(w, plan, value)
    return bytes(w.finish())
