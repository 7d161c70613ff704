"""Splitting a byte stream into Kafka frames, without I/O.

Wire layout::

    frame = size:int32 payload        (size counts the payload only, big-endian, >= 0)

:class:`FrameReader` is fed whatever ``recv`` produced and hands back complete payloads.  A size
above ``max_frame_bytes`` (or negative) raises :class:`~kwire.errors.ProtocolError` *before*
anything is allocated: a bogus or hostile size must never make us reserve gigabytes.  Large
payloads can be read straight into their final buffer (:meth:`FrameReader.direct_buffer`) so a
50 MB Fetch response is not copied through a small scratch buffer.
"""
from __future__ import annotations

import struct

from ..errors import ProtocolError

_I32 = struct.Struct(">i")

# Reading a payload this large or larger goes straight into its own buffer.
DIRECT_READ_MIN_BYTES = 64 * 1024


class FrameReader:
    """Accumulates bytes; returns complete frame payloads (``bytearray``) in order."""

    __slots__ = ("max_frame_bytes", "_header", "_body", "_filled")

    def __init__(self, max_frame_bytes: int):
        self.max_frame_bytes = max_frame_bytes
        self._header = bytearray()  # partial size prefix (< 4 bytes)
        self._body: bytearray | None = None  # payload being filled
        self._filled = 0  # bytes of _body already filled

    @property
    def mid_frame(self) -> bool:
        """True when part of a frame has been read (a disconnect now loses a response)."""
        return bool(self._header) or self._body is not None

    def _start(self, size: int) -> None:
        if size < 0 or size > self.max_frame_bytes:
            raise ProtocolError(f"response frame claims {size} bytes; the limit is "
                                f"{self.max_frame_bytes} (receive.message.max.bytes + slack)")
        self._body = bytearray(size)
        self._filled = 0

    def direct_buffer(self) -> memoryview | None:
        """Where the next ``recv_into`` may write directly, when a large payload is half read."""
        body = self._body
        if body is None or len(body) - self._filled < DIRECT_READ_MIN_BYTES:
            return None
        return memoryview(body)[self._filled:]

    def direct_filled(self, n: int) -> list[bytearray]:
        """``n`` bytes were written into :meth:`direct_buffer`."""
        self._filled += n
        return self._finish_if_full([])

    def _finish_if_full(self, out: list[bytearray]) -> list[bytearray]:
        body = self._body
        if body is not None and self._filled == len(body):
            out.append(body)
            self._body = None
            self._filled = 0
        return out

    def feed(self, data) -> list[bytearray]:
        """Consume ``data``; return the payloads it completed (possibly none)."""
        mv = memoryview(data).cast("B")
        out: list[bytearray] = []
        pos, end = 0, len(mv)
        while pos < end:
            body = self._body
            if body is None:
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
            take = min(len(body) - self._filled, end - pos)
            body[self._filled:self._filled + take] = mv[pos:pos + take]
            self._filled += take
            pos += take
            self._finish_if_full(out)
        return out
