"""Splitting a byte stream into Kafka frames, without I/O.

Wire layout::

    frame = size:int32 payload        (size counts the payload only, big-endian, >= 0)

:class:`FrameReader` is fed whatever ``recv`` produced and hands back complete payloads, each a
read-only ``memoryview`` of exactly the payload's size.  A size above ``max_frame_bytes`` (or
negative) raises :class:`~kwire.errors.ProtocolError` *before* anything is allocated.  Within the
limit, the payload buffer still grows with the bytes that actually arrive (growing fourfold, from
64 KiB), never with what the size prefix claims: a peer that announces 2 GB and sends ten bytes
costs us 64 KiB, and memory stays under four times what was received.  Large payloads are read
straight into that buffer (:meth:`FrameReader.direct_buffer`) so a 50 MB Fetch response is not
copied through a small scratch buffer.

Buffers of large payloads are recycled.  Fresh memory costs a page fault per 4 KiB on first touch
(3-6 us each on a small VM) -- more than the copy from the socket itself.  New buffers come from
the codec's ``receive_buffer`` uninitialised (``bytearray(n)`` would zero-fill them, taking every
fault under the GIL; untouched, they are faulted in by ``recv_into``, GIL released).  And the reader
remembers the large buffers it handed out (each at most :data:`SPARE_MAX_BYTES`), and fills the
next large payload into one that nobody references any more: no view of it, no object decoded
from it without a copy (records of a Fetch answer are views of the payload, so a buffer stays
out of reuse until those are dropped).  The check is the buffer's reference count, which counts
every memoryview and every buffer export of it.  A consumer whose application is behind holds
many answers at once (up to its fetch budget) and frees the oldest first, so the reader
remembers up to :data:`SPARE_TRACKED` buffers, in use or not (one in use costs nothing extra:
its holder keeps it alive anyway), and keeps at most :data:`SPARE_BUFFERS` idle ones of
:data:`SPARE_TOTAL_BYTES` together once a payload is finished (the oldest idle ones are
forgotten first).  A recycled buffer is only ever one that earlier data filled, and at most
twice the payload, so the bound above holds for it too.  The network client forgets a
connection's buffers once it has been idle for a while (:meth:`FrameReader.release_spares`).
Without CPython's reference counts and GIL (PyPy, free-threaded builds) nothing is recycled.

A payload nobody wants any more (the answer to a request that timed out) can be dropped half
way (:meth:`FrameReader.discard_current`): its remaining bytes are counted off as they arrive,
never stored, so a late or dripping answer costs no memory however large it claims to be.
"""
from __future__ import annotations

import struct
import sys
from typing import cast

from .._impl import codec_module
from ..errors import ProtocolError

_I32 = struct.Struct(">i")
# A bytearray for a payload, left uninitialised by the compiled codec (see receive_buffer)
_new_buffer = codec_module().receive_buffer

# Reading a payload this large or larger goes straight into its own buffer.
DIRECT_READ_MIN_BYTES = 64 * 1024
# First allocation for a payload; then the buffer grows fourfold as data arrives, up to its size.
GROWTH_FACTOR = 4
INITIAL_BUFFER_BYTES = 64 * 1024
# Payloads at least this large, and at most SPARE_MAX_BYTES, are filled into recycled buffers.
SPARE_MIN_BYTES = 128 * 1024
SPARE_MAX_BYTES = 16 * 1024 * 1024
SPARE_BUFFERS = 4  # per reader (connection): at most this many idle buffers are kept,
SPARE_TOTAL_BYTES = 32 * 1024 * 1024  # of at most this many bytes together;
# and at most this many remembered in all, idle or still in use (a consumer's fetch budget of
# 64 MiB holds about 20 answers of 3 partitions x 1 MiB).
SPARE_TRACKED = 32
# A buffer grown for a recyclable payload gets this much headroom (1/8), so that the next,
# slightly larger answer still fits it.
_HEADROOM_SHIFT = 3

# Recycling needs CPython's reference counts with the GIL (not PyPy, not free-threaded builds).
RECYCLING = hasattr(sys, "getrefcount") and getattr(sys, "_is_gil_enabled", lambda: True)()
if RECYCLING:
    _getrefcount = sys.getrefcount
    _probe = [bytearray(1)]
    _UNSHARED_REFS = _getrefcount(_probe[0])  # a list slot + the call's argument
    del _probe


class FrameReader:
    """Accumulates bytes; returns complete frame payloads (read-only ``memoryview`` s) in order."""

    __slots__ = ("max_frame_bytes", "_header", "_body", "_size", "_filled", "_spares", "recycled",
                 "_skip")

    def __init__(self, max_frame_bytes: int):
        self.max_frame_bytes = max_frame_bytes
        self._header = bytearray()  # partial size prefix (< 4 bytes)
        self._body: bytearray | None = None  # payload being filled (its length may be < or > _size)
        self._size = 0  # the payload's size, from its prefix
        self._filled = 0  # bytes of _body already filled
        self._spares: list[bytearray] = []  # large buffers handed out, oldest first
        self.recycled = 0  # payloads that went into a recycled buffer (for tests and stats)
        self._skip = 0  # bytes of a discarded payload still to come (see discard_current)

    @property
    def mid_frame(self) -> bool:
        """True when part of a frame has been read (a disconnect now loses a response)."""
        return bool(self._header) or self._body is not None or self._skip > 0

    @property
    def discarding(self) -> bool:
        """True while the rest of a discarded payload is being counted off."""
        return self._skip > 0

    @property
    def current_correlation_id(self) -> int | None:
        """The correlation id of the response being read, once its first 4 bytes are in."""
        if self._body is None or self._filled < 4:
            return None
        correlation_id: int = _I32.unpack_from(self._body, 0)[0]
        return correlation_id

    def discard_current(self) -> None:
        """Drop the payload being read: its buffer now, its remaining bytes as they arrive."""
        if self._body is None:
            return
        self._skip = self._size - self._filled
        self._body = None
        self._filled = self._size = 0

    def _start(self, size: int) -> None:
        if size < 0 or size > self.max_frame_bytes:
            raise ProtocolError(f"response frame claims {size} bytes; the limit is "
                                f"{self.max_frame_bytes} (receive.message.max.bytes + slack)")
        body = self._unshared_spare(size) if size >= SPARE_MIN_BYTES else None
        if body is None:
            body = _new_buffer(min(size, INITIAL_BUFFER_BYTES))
        else:
            self.recycled += 1
        self._body = body
        self._size = size
        self._filled = 0

    def _unshared_spare(self, size: int) -> bytearray | None:
        """The smallest remembered buffer that holds ``size`` bytes, at most twice that (a small
        payload must not pin a big buffer), and that nobody references any more (taken out of
        the list), or None."""
        spares = self._spares
        best = -1
        for i in range(len(spares)):
            n = len(spares[i])
            if size <= n <= 2 * size and (best < 0 or n < len(spares[best])) \
                    and _getrefcount(spares[i]) <= _UNSHARED_REFS:
                best = i
        return spares.pop(best) if best >= 0 else None

    def _trim_spares(self) -> None:
        """Forget the oldest buffers beyond :data:`SPARE_TRACKED`, and the oldest idle ones beyond
        :data:`SPARE_BUFFERS` / :data:`SPARE_TOTAL_BYTES` of idle ones."""
        spares = self._spares
        if len(spares) > SPARE_TRACKED:
            del spares[:len(spares) - SPARE_TRACKED]
        idle = idle_bytes = 0
        for i in range(len(spares) - 1, -1, -1):  # the newest first: the oldest idle ones go
            if _getrefcount(spares[i]) <= _UNSHARED_REFS:
                n = len(spares[i])
                if idle < SPARE_BUFFERS and idle_bytes + n <= SPARE_TOTAL_BYTES:
                    idle += 1
                    idle_bytes += n
                else:
                    del spares[i]

    @property
    def spare_bytes(self) -> int:
        """Bytes held by remembered buffers (whether or not something still references them)."""
        return sum(map(len, self._spares))

    def release_spares(self) -> None:
        """Forget the remembered buffers (those nobody references are freed); e.g. when the
        connection goes idle."""
        self._spares.clear()

    def _reserve(self, need: int) -> bytearray:
        """Capacity for ``need`` more bytes: grow fourfold (capped at the payload size, plus
        headroom for recycling) when short.  A new buffer each time, so a caller's lingering
        view of the old one is harmless."""
        body = cast(bytearray, self._body)  # set: a payload is being read
        want = self._filled + need
        if want > len(body):
            size = self._size
            cap = size + (size >> _HEADROOM_SHIFT) if SPARE_MIN_BYTES <= size <= SPARE_MAX_BYTES else size
            new = _new_buffer(min(cap, max(want, GROWTH_FACTOR * len(body))))
            new[:self._filled] = memoryview(body)[:self._filled]
            self._body = body = new
        return body

    def direct_buffer(self) -> memoryview | None:
        """Where the next ``recv_into`` may write directly, when a large payload is half read."""
        if self._body is None or self._size - self._filled < DIRECT_READ_MIN_BYTES:
            return None
        body = self._reserve(DIRECT_READ_MIN_BYTES)
        return memoryview(body)[self._filled:self._size]

    def direct_filled(self, n: int) -> list[memoryview]:
        """``n`` bytes were written into :meth:`direct_buffer`."""
        self._filled += n
        return self._finish_if_full([])

    def _finish_if_full(self, out: list[memoryview]) -> list[memoryview]:
        body = self._body
        size = self._size
        if body is not None and self._filled == size:
            out.append(memoryview(body)[:size].toreadonly())
            if RECYCLING and SPARE_MIN_BYTES <= len(body) <= SPARE_MAX_BYTES + (SPARE_MAX_BYTES >> _HEADROOM_SHIFT):
                self._spares.append(body)
                self._trim_spares()
            self._body = None
            self._filled = self._size = 0
        return out

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Consume ``data``; return the payloads it completed (possibly none)."""
        mv = memoryview(data).cast("B")
        out: list[memoryview] = []
        pos, end = 0, len(mv)
        while pos < end:
            if self._skip:
                take = min(self._skip, end - pos)
                self._skip -= take
                pos += take
                continue
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
