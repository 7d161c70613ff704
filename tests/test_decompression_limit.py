"""Decompression bombs (issue 14, defect 7): a batch may decompress to at most
``max_decompressed_bytes`` (the consumer's ``fetch.max.decompressed.bytes``); past it the codecs
raise DecompressionLimitError naming the batch, having stopped at the cap instead of allocating
what the batch expands to.

Every input here is made by the real compressors (cramjam through build_batch, lz4.frame,
zstandard, kafka-python's legacy builder), and runs through every decompression path: the
compiled twin as shipped (native lz4/zstd), with the worker thread forced on, with cramjam
instead of the native libraries, and the pure-Python twin (the ``codec`` fixture of
test_records).
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
from kafka.record.memory_records import MemoryRecordsBuilder

from kwire.errors import CorruptRecordError, DecompressionLimitError
from tests.test_records import (  # noqa: F401  (codec and compiled are fixtures)
    KP_CODEC,
    _lz4_frame,
    _zstd_frame,
    codec,
    compiled,
    kp_v2,
    set_base_offset,
    v2_recompress,
)

VALUE = b"\0" * 100_000          # compresses to almost nothing
N = 20                           # ~2 MB per batch, decompressed


def _records(n=N, value=VALUE, ts=1_700_000_000_000):
    return [(b"k%d" % i, value, [("h", b"x")], ts + i) for i in range(n)]


def _plain_size(codec, records, base_offset=0):
    # the size of the records section, uncompressed: what the batch decompresses to
    return len(codec.build_batch(records, base_offset)) - 61


def _assert_limit(exc, *, limit, offset, topic=None, partition=None, position=0):
    assert type(exc) is DecompressionLimitError
    assert isinstance(exc, CorruptRecordError)
    assert exc.limit == limit and exc.offset == offset
    assert exc.topic == topic and exc.partition == partition
    assert exc.position == position
    assert "fetch.max.decompressed.bytes" in str(exc)


def _every_api_fails(codec, data, limit, offset, position=0):
    with pytest.raises(DecompressionLimitError) as info:
        list(codec.iter_records(data, True, "t", 3, max_decompressed_bytes=limit))
    _assert_limit(info.value, limit=limit, offset=offset, topic="t", partition=3, position=position)
    with pytest.raises(DecompressionLimitError) as info:
        list(codec.iter_batches(data, topic="t", partition=3, max_decompressed_bytes=limit))
    _assert_limit(info.value, limit=limit, offset=offset, topic="t", partition=3, position=position)
    with pytest.raises(DecompressionLimitError) as info:
        codec.decode_columns(data, max_decompressed_bytes=limit)
    _assert_limit(info.value, limit=limit, offset=offset, position=position)


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_v2_bomb_stops_at_the_cap(codec, compression):
    recs = _records()
    size = _plain_size(codec, recs, 40)
    data = codec.build_batch(recs, 40, compression)
    assert len(data) * 10 < size            # a bomb in miniature
    # exactly at the cap is legal; one byte less is not
    assert len(list(codec.iter_records(data, max_decompressed_bytes=size))) == N
    assert len(codec.decode_columns(data, max_decompressed_bytes=size)["offset"]) == N
    _every_api_fails(codec, data, size - 1, 40)
    _every_api_fails(codec, data, 64 * 1024, 40)
    _every_api_fails(codec, data, 0, 40)


@pytest.mark.parametrize("frame", [_lz4_frame, _zstd_frame], ids=["lz4", "zstd"])
@pytest.mark.parametrize("content_size", [True, False], ids=["declared", "undeclared"])
def test_v2_bomb_frames_with_and_without_declared_size(codec, frame, content_size):
    # the block is sized from the frame header when it declares a size, else from the
    # expansion seen so far: the cap holds either way (also when the header lies, below)
    plain = kp_v2(_records())
    data = set_base_offset(v2_recompress(plain, 3 if frame is _lz4_frame else 4,
                                         frame(plain[61:], content_size=content_size)), 7)
    assert len(list(codec.iter_records(data, max_decompressed_bytes=len(plain) - 61))) == N
    _every_api_fails(codec, data, len(plain) - 62, 7)
    _every_api_fails(codec, data, 100_000, 7)


def test_v2_bomb_after_good_batches(codec):
    # good batches first (they set the expansion the decoder expects, and with the worker
    # forced on they go to the worker thread with the bomb): their records are delivered,
    # then the bomb fails, naming its own offset and position
    small = [(b"a", b"v" * 100, [], 1000)]
    data = b""
    for base in range(5):
        data += codec.build_batch(small, base, "lz4")
    bomb_at = len(data)
    data += codec.build_batch(_records(), 5, "lz4")
    data += codec.build_batch(small, 5 + N, "lz4")
    got = []
    with pytest.raises(DecompressionLimitError) as info:
        for rec in codec.iter_records(data, True, "t", 0, max_decompressed_bytes=500_000):
            got.append(rec.offset)
    assert got == [0, 1, 2, 3, 4]
    _assert_limit(info.value, limit=500_000, offset=5, topic="t", partition=0, position=bomb_at)
    assert len(list(codec.iter_records(data))) == 5 + N + 1     # under the default cap


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4"])
def test_legacy_wrapper_bomb(codec, magic, compression):
    # a magic 0/1 compressed wrapper (kafka-python's encoder); the error names the wrapper's
    # offset (the field in front of the wrapper message)
    b = MemoryRecordsBuilder(magic, KP_CODEC[compression], 1 << 24, offset=30)
    for i in range(N):
        b.append(2000 + i, b"k%d" % i, VALUE)
    b.close()
    data = bytes(b.buffer())
    assert len(data) < 200_000
    assert len(list(codec.iter_records(data))) == N
    _every_api_fails(codec, data, 1_000_000, struct.unpack_from(">q", data)[0])


def test_default_cap_is_64_mib_in_both_twins():
    from kwire import config, records
    from kwire._pycodec import records as pure
    assert pure.DEFAULT_MAX_DECOMPRESSED_BYTES == 64 << 20
    assert records._codec.DEFAULT_MAX_DECOMPRESSED_BYTES == 64 << 20
    prop = next(p for p in config.PROPERTIES if p.name == "fetch.max.decompressed.bytes")
    assert prop.default == 64 << 20


def test_worker_path_hits_the_cap(compiled):
    # the worker decompresses undeclared-size lz4 batches into slots of at most cap + 1 bytes;
    # a bomb among them fails at the cap whether the worker or the decoder met it
    data = b""
    for base in range(4):
        plain = kp_v2([(b"a", os.urandom(5000), [], 1)])
        data += set_base_offset(v2_recompress(plain, 3, _lz4_frame(plain[61:], content_size=False)),
                                base)
    bomb = kp_v2(_records())
    bomb_at = len(data)
    data += set_base_offset(v2_recompress(bomb, 3, _lz4_frame(bomb[61:], content_size=False)), 4)
    started = compiled._worker_starts()
    with pytest.raises(DecompressionLimitError) as info:
        list(compiled.iter_records(data, max_decompressed_bytes=300_000))
    assert compiled._worker_starts() == started + 1
    _assert_limit(info.value, limit=300_000, offset=4, position=bomb_at)


# A real bomb: 1 GiB of zeros, streamed into each compressor (never held whole), decoded under
# the default cap in a fresh interpreter so its peak RSS shows what decoding allocated.
_BOMB_SCRIPT = r"""
import os, resource, struct, sys, zlib
import lz4.frame, zstandard
from crc32c import crc32c
from kwire.errors import CorruptRecordError, DecompressionLimitError
codec_name, twin = sys.argv[1], sys.argv[2]
if twin == "pure":
    from kwire._pycodec import records as R
else:
    from kwire import _codec as R
MIB = b"\0" * (1 << 20)
if codec_name == "gzip":
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    body = b"".join(c.compress(MIB) for _ in range(1024)) + c.flush()
    cid = 1
elif codec_name == "zstd":
    c = zstandard.ZstdCompressor().compressobj()
    body = b"".join(c.compress(MIB) for _ in range(1024)) + c.flush()
    cid = 4
else:
    c = lz4.frame.LZ4FrameCompressor()
    body = c.begin() + b"".join(c.compress(MIB) for _ in range(1024)) + c.flush()
    cid = 3
# a v2 batch header around it: base offset 9, one record claimed
head = struct.pack(">qiibIhiqqqhii", 9, 49 + len(body), 0, 2, 0, cid, 0, 0, 0, -1, -1, -1, 1)
crc = crc32c(head[21:] + body)
data = head[:17] + struct.pack(">I", crc) + head[21:] + body
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    list(R.iter_records(data))
    print("no error")
except DecompressionLimitError as exc:
    print("limit", exc.offset, exc.limit)
except CorruptRecordError as exc:   # (no limit: the block decompressed, then did not parse)
    print("corrupt", exc)
print(len(body), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.parametrize("twin", ["cython", "pure"])
@pytest.mark.parametrize("compression", ["gzip", "zstd", "lz4"])
def test_one_gib_bomb_stays_within_the_default_cap(twin, compression):
    if twin == "cython":
        from kwire import _impl
        if _impl.IMPLEMENTATION != "cython":
            pytest.skip("the compiled twin did not build")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", _BOMB_SCRIPT, compression, twin],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": root}, check=True).stdout.split("\n")
    assert out[0] == f"limit 9 {64 << 20}", out
    compressed, grew_mib = map(int, out[1].split())
    assert compressed < 5 << 20                 # the bomb: 1 GiB from a few MB at most
    # the default cap is 64 MiB: decoding may hold the cap (and the pure twin a copy of it; the
    # compiled twin's block pool up to 64 MiB of the smaller blocks it grew through), never
    # the gigabyte
    assert grew_mib < 200, f"peak RSS grew by {grew_mib} MiB"
