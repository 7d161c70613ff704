# cython: language_level=3
"""kwire's compiled codec: protocol messages and record batches.

The pure-Python twin with the same API is kwire._pycodec; kwire._impl picks one at import.
Pieces live in .pxi files included here so each stays readable:

  _primitives.pxi  bounds-checked cursor readers (every length checked against the end)
  _messages.pxi    the table-driven request/response interpreter (plans from kwire.protocol.schema)
  _records.pxi     record batches (magic 2) and legacy message sets (magic 0/1)
  _inflate.pxi     lz4/zstd through the native libraries, and the decompression worker
"""
from kwire.errors import (
    ProtocolError, TruncatedError, TrailingBytesError, CorruptRecordError,
    UnsupportedCompressionError, DecompressionLimitError,
)

IMPLEMENTATION = "cython"

include "_primitives.pxi"
include "_messages.pxi"
include "_inflate.pxi"
include "_records.pxi"
