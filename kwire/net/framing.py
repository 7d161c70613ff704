"""Splitting a byte stream into Kafka frames, without I/O.

Wire layout::

    frame = size:int32 payload        (size counts the payload only, big-endian, >= 0)

:class:`FrameReader` is fed whatever ``recv`` produced and hands back complete payloads.  A size
above ``max_frame_bytes`` (or negative) raises :class:`~kwire.errors.ProtocolError` *before*
anything is allocated.  Within the limit, the payload buffer still grows with the bytes that
actually arrive (growing fourfold, from 64 KiB), never with what the size prefix claims: a peer
that announces 2 GB and sends ten bytes costs us 64 KiB, and memory stays under four times what
was received.  Fourfold rather than doubling halves the copying of large Fetch responses.  Large payloads are read straight into that buffer (:meth:`FrameReader.direct_buffer`)
so a 50 MB Fetch response is not copied through a small scratch buffer.
"""
from __future__ import annotations

import struct

from ..errors import ProtocolError

_I32 = struct.Struct(">i")

# Reading a payload this large or larger goes straight into its own buffer.
DIRECT_READ_MIN_BYTES = 64 * 1024
# First allocation for a payload; then the buffer grows fourfold as data arrives, up to its size.
GROWTH_FACTOR = 4
INITIAL_BUFFER_BYTES = 64 * 1024


class FrameReader:
    """Accumulates bytes; returns complete frame payloads (``bytearray``) in order."""

    __slots__ = ("max_frame_bytes", "_header", "_body", "_size", "_filled")

    def __init__(self, max_frame_bytes: int):
        self.max_frame_bytes = max_frame_bytes
        self._header = bytearray()  # partial size prefix (< 4 bytes)
        self._body: bytearray | None = None  # payload being filled (its capacity may be < _size)
        self._size = 0  # the payload's size, from its prefix
        self._filled = 0  # bytes of _body already filled

    @property
    def mid_frame(self) -> bool:
        """True when part of a frame has been read (a disconnect now loses a response)."""
        return bool(self._header) or self._body is not None

    def _start(self, size: int) -> None:
        if size < 0 or size > self.max_frame_bytes:
            raise ProtocolError(f"response frame claims {size} bytes; the limit is "
                                f"{self.max_frame_bytes} (receive.message.max.bytes + slack)")
        self._body = bytearray(min(size, INITIAL_BUFFER_BYTES))
        self._size = size
        self._filled = 0

    def _reserve(self, need: int) -> bytearray:
        """Capacity for ``need`` more bytes: grow fourfold (capped at the payload size) when short.
        A new buffer each time, so a caller's lingering view of the old one is harmless."""
        body = self._body
        want = self._filled + need
        if want > len(body):
            new = bytearray(min(self._size, max(want, GROWTH_FACTOR * len(body))))
            new[:self._filled] = memoryview(body)[:self._filled]
            self._body = body = new
        return body

    def direct_buffer(self) -> memoryview | None:
        """Where the next ``recv_into`` may write directly, when a large payload is half read."""
        if self._body is None or self._size - self._filled < DIRECT_READ_MIN_BYTES:
            return None
        body = self._reserve(DIRECT_READ_MIN_BYTES)
        return memoryview(body)[self._filled:]

    def direct_filled(self, n: int) -> list[bytearray]:
        """``n`` bytes were written into :meth:`direct_buffer`."""
        self._filled += n
        return self._finish_if_full([])

    def _finish_if_full(self, out: list[bytearray]) -> list[bytearray]:
        body = self._body
        if body is not None and self._filled == self._size:
            out.append(body)  # len(body) == _size: the capacity never exceeds the size
            self._body = None
            self._filled = self._size = 0
        return out

    def feed(self, data) -> list[bytearray]:
        """Consume ``data``; return the payloads it completed (possibly none)."""
        mv = memoryview(data).cast("B")
        out: list[bytearray] = []
        pos, end = 0, len(mv)
        while pos < end:
            if self._body is None:
                need = 4 - len(self._header)
                if not self._header and end - pos >= 4:
                    size = _I32.unpack_from(mv, pos)[0]
                    pos += 4
                else:
                    take = min(need, end - pos)
                    self._header += mv[pos:pos + take]
                    pos += take
                    if len(self._header) < 4:
                        break
                    size = _I32.unpack_from(self._header, 0)[0]
                    self._header.clear()
                self._start(size)
                self._finish_if_full(out)  # zero-length payloads
                continue
            take = min(self._size - self._filled, end - pos)
            body = self._reserve(take)
            body[self._filled:self._filled + take] = mv[pos:pos + take]
            self._filled += take
            pos += take
            self._finish_if_full(out)
        return out
