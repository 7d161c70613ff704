"""Fuzz the frame reader (kwire/net/framing.py): arbitrary bytes, fed in arbitrary pieces,
must come out as the same frames a one-shot reference parse finds, or as one ProtocolError for
a forged size -- and a size claiming up to 2 GB must not allocate it.

    python fuzz/fuzz_framing.py -max_total_time=10 CORPUS_DIR      # --plain without atheris

The input's first byte picks the piece sizes and whether large payloads are read through
direct_buffer()/direct_filled() as the network client does.
"""
from __future__ import annotations

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common  # noqa: E402

try:
    import atheris
    with atheris.instrument_imports(include=["kwire"]):
        from kwire.errors import ProtocolError
        from kwire.net.framing import FrameReader
except ImportError:
    from kwire.errors import ProtocolError
    from kwire.net.framing import FrameReader

MAX_FRAME = 0x7FFFFFFF  # the largest receive.message.max.bytes allows: the reader must still not trust it


def reference(stream: bytes):
    frames, pos = [], 0
    while len(stream) - pos >= 4:
        size = struct.unpack_from(">i", stream, pos)[0]
        if size < 0:
            return frames, True
        if len(stream) - pos - 4 < size:
            break
        frames.append(stream[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames, False


def test_one_input(data: bytes) -> None:
    if not data:
        return
    mode, stream = data[0], data[1:]
    piece = (1, 2, 3, 7, 64, 1000, 4096, 65536)[mode & 7]
    direct = bool(mode & 8)
    reader = FrameReader(MAX_FRAME)
    got, bad, pos = [], False, 0
    try:
        while pos < len(stream):
            buf = reader.direct_buffer() if direct else None
            if buf is not None:
                n = min(len(buf), max(piece, 1024), len(stream) - pos)
                buf[:n] = stream[pos:pos + n]
                got += reader.direct_filled(n)
            else:
                n = min(piece, len(stream) - pos)
                got += reader.feed(stream[pos:pos + n])
            pos += n
    except ProtocolError:
        bad = True
    want, want_bad = reference(stream)
    assert bad == want_bad, (bad, want_bad)
    assert [bytes(g) for g in got] == want[:len(got)] and (bad or len(got) == len(want)), "frames differ"
    _common.check_memory(len(data))


def seeds() -> list[bytes]:
    f = _common.frame
    return [b"\x01" + f(b"abc") + f(b"") + f(b"x" * 300), b"\x0f" + f(b"y" * 70000) + f(b"tail"),
            b"\x02" + b"\x7f\xff\xff\xff" + b"z" * 40, b"\x00" + b"\xff\xff\xff\xff"]


if __name__ == "__main__":
    _common.limit_memory()
    _common.run(test_one_input, seeds())
