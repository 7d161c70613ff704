"""The record layer against independent encoders and decoders (kafka-python, aiokafka).

Every test runs on both twins through the `codec` fixture (compiled kwire._codec and pure
kwire._pycodec).  Golden bytes come from kafka-python's builders (or are assembled here from
the wire layout with zlib/gzip/crc32c, where kafka-python cannot produce them); kwire's
build_batch output is read back by kafka-python's and aiokafka's readers.
"""
from __future__ import annotations

import gzip
import os
import pickle
import struct
import subprocess
import sys
import time
import zlib

import cramjam
import lz4.frame
import pytest
import xxhash
import zstandard
from crc32c import crc32c
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kwire.errors import CorruptRecordError, KwireError, UnsupportedCompressionError
from tests.conftest import CODECS

# The compiled twin decompresses lz4/zstd with the native libraries, on a worker thread when a
# buffer holds enough compressed batches (kwire/_inflate.pxi).  Test inputs are small, so the
# record tests run the compiled twin three ways: as shipped, with the worker forced on for
# any two compressed batches, and with cramjam instead of the native libraries.
_MODES = {"cython": None, "cython-worker": (True, 0), "cython-cramjam": (False, -1)}


@pytest.fixture(params=[pytest.param((p.values[0], m), id=m) for p in CODECS if p.id == "cython"
                        for m in _MODES] + [p for p in CODECS if p.id == "pure"])
def codec(request):
    if not isinstance(request.param, tuple):
        yield request.param
        return
    twin, mode = request.param
    if _MODES[mode] is None:
        yield twin
        return
    previous = twin._decompression_settings(*_MODES[mode])
    try:
        yield twin
    finally:
        twin._decompression_settings(*previous)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
KP_CODEC = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


# --- helpers ----------------------------------------------------------------------------

def sample_records(n=20, base_ts=1_700_000_000_000):
    """(key, value, headers, timestamp) with null keys/values, empty and unicode headers."""
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else b"key-%d" % i
        value = None if i % 7 == 3 else (b"value-%d-" % i) * (i % 4 + 1)
        headers = []
        if i % 2:
            headers.append(("trace-id", b"t%d" % i))
        if i % 3 == 1:
            headers.append(("ünïcode-ключ", None))
            headers.append(("", b""))
        out.append((key, value, headers, base_ts + i * 13 - (i % 3) * 50))
    return out


def kp_v2(records, base_offset=0, compression="none", *, transactional=False, producer_id=-1,
          producer_epoch=-1, base_sequence=-1):
    """A v2 batch from kafka-python's builder (offset deltas start at base_offset, as the
    kafka-python producer writes them; the batch base offset field is 0)."""
    b = MemoryRecordsBuilder(2, KP_CODEC[compression], 1 << 24, offset=base_offset,
                             transactional=transactional, producer_id=producer_id,
                             producer_epoch=producer_epoch, base_sequence=base_sequence)
    for key, value, headers, ts in records:
        assert b.append(ts, key, value, headers) is not None
    b.close()
    return bytes(b.buffer())


def set_base_offset(batch, base_offset):
    """Rewrite the (CRC-free) base offset field: what the broker does on append."""
    return struct.pack(">q", base_offset) + batch[8:]


def v2_patch(batch, *, attributes_or=0, max_timestamp=None, records_count=None,
             leader_epoch=None, recrc=True):
    b = bytearray(batch)
    if attributes_or:
        b[21:23] = (int.from_bytes(b[21:23], "big") | attributes_or).to_bytes(2, "big")
    if max_timestamp is not None:
        b[35:43] = struct.pack(">q", max_timestamp)
    if records_count is not None:
        b[57:61] = struct.pack(">i", records_count)
    if leader_epoch is not None:
        b[12:16] = struct.pack(">i", leader_epoch)
    if recrc:
        b[17:21] = crc32c(bytes(b[21:])).to_bytes(4, "big")
    return bytes(b)


def v2_recompress(batch, codec_id, compressed_records):
    """Swap the records section of an uncompressed v2 batch for `compressed_records`."""
    head = bytearray(batch[:61])
    head[8:12] = struct.pack(">i", 49 + len(compressed_records))
    head[21:23] = ((int.from_bytes(head[21:23], "big") & ~7) | codec_id).to_bytes(2, "big")
    out = bytes(head) + compressed_records
    return v2_patch(out)


def legacy_message(offset, magic, key, value, *, attributes=0, timestamp=None):
    """One legacy message assembled from the wire layout (CRC-32 over magic..end)."""
    body = struct.pack(">bB", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def expected(records, first_offset, *, ts_type=0, leader_epoch=-1, max_ts=None, topic=None,
             partition=-1):
    out = []
    for i, (key, value, headers, ts) in enumerate(records):
        if ts_type == 1:
            ts = max_ts
        out.append((first_offset + i, ts, ts_type, key, value, list(headers), topic, partition,
                    leader_epoch))
    return out


def tuples(records):
    return [r.to_tuple() for r in records]


def column_tuples(cols):
    """Rebuild record tuples (without topic/partition/leader_epoch) from decode_columns."""
    n = cols["num_records"]
    c = {k: (v.tolist() if isinstance(v, memoryview) and v.format != "B" else v)
         for k, v in cols.items()}
    kd, vd = bytes(cols["key_data"]), bytes(cols["value_data"])
    hkd, hvd = bytes(cols["header_key_data"]), bytes(cols["header_value_data"])
    out = []
    for i in range(n):
        key = kd[c["key_offsets"][i]:c["key_offsets"][i + 1]] if c["key_valid"][i] else None
        value = vd[c["value_offsets"][i]:c["value_offsets"][i + 1]] if c["value_valid"][i] else None
        headers = []
        for j in range(c["header_offsets"][i], c["header_offsets"][i + 1]):
            hk = hkd[c["header_key_offsets"][j]:c["header_key_offsets"][j + 1]].decode(
                "utf-8", "surrogateescape")
            hv = (hvd[c["header_value_offsets"][j]:c["header_value_offsets"][j + 1]]
                  if c["header_value_valid"][j] else None)
            headers.append((hk, hv))
        out.append((c["offset"][i], c["timestamp"][i], c["timestamp_type"][i], key, value, headers))
    return out


def check_columns(codec, data, check_crc=True):
    """decode_columns must agree with iter_records on any valid input."""
    want = [t[:6] for t in tuples(codec.iter_records(data, check_crc))]
    assert column_tuples(codec.decode_columns(data, check_crc)) == want


# --- magic 2 golden bytes from kafka-python -------------------------------------------------

@pytest.mark.parametrize("compression", CODECS)
def test_v2_golden_kafka_python(codec, compression):
    recs = sample_records(30)
    batch = set_base_offset(kp_v2(recs, 0, compression), 1000)
    data = batch + set_base_offset(kp_v2(recs[:3], 0, compression), 2000)
    got = tuples(codec.iter_records(data, topic="orders", partition=4))
    want = (expected(recs, 1000, leader_epoch=0, topic="orders", partition=4)
            + expected(recs[:3], 2000, leader_epoch=0, topic="orders", partition=4))
    assert got == want
    batches = list(codec.iter_batches(data))
    # (kafka-python leaves a batch uncompressed when compression would not shrink it)
    assert batches[0].compression == compression
    b = batches[0]
    assert (b.base_offset, b.last_offset, b.magic, len(b)) == (1000, 1029, 2, 30)
    assert (b.is_transactional, b.is_control, b.producer_id, b.producer_epoch, b.base_sequence) == (
        False, False, -1, -1, -1)
    assert b.first_timestamp == recs[0][3]
    assert b.max_timestamp == max(r[3] for r in recs)
    assert b.timestamp_type == 0
    assert b.size_bytes == len(batch)
    assert [r.to_tuple()[:6] for r in b.records] == [t[:6] for t in want[:30]]
    check_columns(codec, data)


def test_v2_kafka_python_offsets_as_written(codec):
    # kafka-python's producer writes base offset 0 and deltas from its own counter
    recs = sample_records(4)
    data = kp_v2(recs, 100)
    assert [r.offset for r in codec.iter_records(data)] == [100, 101, 102, 103]
    (batch,) = codec.iter_batches(data)
    assert (batch.base_offset, batch.last_offset) == (0, 103)


def test_v2_transactional_fields(codec):
    recs = sample_records(5)
    data = set_base_offset(kp_v2(recs, 0, "lz4", transactional=True, producer_id=123456789012,
                                 producer_epoch=7, base_sequence=42), 77)
    (b,) = codec.iter_batches(data)
    assert b.is_transactional and not b.is_control
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (123456789012, 7, 42)
    assert tuples(codec.iter_records(data)) == expected(recs, 77, leader_epoch=0)


def test_v2_control_batch(codec):
    # a COMMIT marker: key = version int16 0 + type int16 1; value = version + coordinator epoch
    marker = kp_v2([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", [], 1234)], 0,
                   transactional=True, producer_id=9, producer_epoch=1, base_sequence=0)
    marker = v2_patch(set_base_offset(marker, 10), attributes_or=0x20)
    user = set_base_offset(kp_v2(sample_records(3), 0), 11)
    data = marker + user
    assert [r.offset for r in codec.iter_records(data)] == [11, 12, 13]
    batches = list(codec.iter_batches(data))
    assert [b.is_control for b in batches] == [True, False]
    assert batches[0].is_transactional
    (ctl,) = batches[0].records
    assert (ctl.offset, ctl.key, ctl.value) == (10, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")
    assert column_tuples(codec.decode_columns(data)) == [
        t[:6] for t in tuples(codec.iter_records(data))]
    # our own encoder writes the same control batch
    ours = codec.build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", [], 1234)], 10,
                             producer_id=9, producer_epoch=1, base_sequence=0,
                             is_transactional=True, is_control=True, partition_leader_epoch=0)
    assert ours == marker


def test_v2_log_append_time(codec):
    recs = sample_records(6)
    data = v2_patch(set_base_offset(kp_v2(recs, 0, "gzip"), 500), attributes_or=0x08,
                    max_timestamp=1_800_000_000_000)
    got = tuples(codec.iter_records(data))
    assert got == expected(recs, 500, ts_type=1, max_ts=1_800_000_000_000, leader_epoch=0)
    (b,) = codec.iter_batches(data)
    assert b.timestamp_type == 1 and b.max_timestamp == 1_800_000_000_000
    check_columns(codec, data)


def test_v2_leader_epoch(codec):
    data = v2_patch(kp_v2(sample_records(2)), leader_epoch=-1)
    assert {r.leader_epoch for r in codec.iter_records(data, leader_epoch_default=3)} == {3}
    data = v2_patch(kp_v2(sample_records(2)), leader_epoch=12)
    assert {r.leader_epoch for r in codec.iter_records(data, leader_epoch_default=3)} == {12}
    (b,) = codec.iter_batches(data)
    assert b.partition_leader_epoch == 12


def test_empty_v2_batch(codec):
    # compaction can leave a batch with no records (it keeps the producer state)
    data = codec.build_batch([], 40) + codec.build_batch([(b"k", b"v", [], 1)], 41)
    assert [r.offset for r in codec.iter_records(data)] == [41]
    batches = list(codec.iter_batches(data))
    assert [len(b) for b in batches] == [0, 1]
    check_columns(codec, data)


def test_mixed_magic_in_one_buffer(codec):
    # after a message-format upgrade a Fetch response can hold v1 messages then v2 batches
    v1 = legacy_message(5, 1, b"a", b"1", timestamp=111)
    v2 = codec.build_batch([(b"b", b"2", [("h", b"x")], 222)], 6)
    got = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
           for r in codec.iter_records(v1 + v2)]
    assert got == [(5, 111, 0, b"a", b"1", []), (6, 222, 0, b"b", b"2", [("h", b"x")])]
    check_columns(codec, v1 + v2)


# --- xerial / raw snappy, lz4 checksums --------------------------------------------------------

def test_snappy_xerial_multiblock(codec):
    # kafka-python (like the Java producer) writes xerial framing in 32 KiB blocks
    recs = [(b"k%d" % i, os.urandom(200) + b"x" * 300, [], 1000 + i) for i in range(200)]
    data = kp_v2(recs, 0, "snappy")
    assert data[61:69] == b"\x82SNAPPY\x00"
    (length,) = struct.unpack_from(">i", data, 61 + 16)
    assert length < len(data) - 61 - 20, "expected more than one xerial block"
    assert tuples(codec.iter_records(data)) == expected(recs, 0, leader_epoch=0)


def test_snappy_raw(codec):
    recs = sample_records(10)
    plain = kp_v2(recs)
    data = v2_recompress(plain, 2, bytes(cramjam.snappy.compress_raw(plain[61:])))
    assert not data[61:].startswith(b"\x82SNAPPY")
    assert tuples(codec.iter_records(data)) == expected(recs, 0, leader_epoch=0)


# --- decompression into the decoder's reused block ---------------------------------------------
# The compiled twin decompresses v2 batches into one block per decoder, sized from the frame
# header's content size when there is one, else from the previous batch's expansion, and
# grows it when a batch turns out bigger.  These inputs walk every one of those paths.

def _lz4_frame(data, *, content_size):
    c = lz4.frame.compress(data, store_size=content_size)
    flg = c[4]
    assert bool(flg & 0x08) == content_size
    return c


def _zstd_frame(data, *, content_size):
    c = zstandard.ZstdCompressor(write_content_size=content_size).compress(data)
    assert (zstandard.get_frame_parameters(c).content_size != zstandard.CONTENTSIZE_UNKNOWN) == content_size
    return c


@pytest.mark.parametrize("frame", [_lz4_frame, _zstd_frame], ids=["lz4", "zstd"])
@pytest.mark.parametrize("content_size", [True, False], ids=["declared", "undeclared"])
def test_v2_batches_of_changing_expansion(codec, frame, content_size):
    # small, then highly compressible (~5 MB of one byte: the block must grow more than once),
    # then small again, then random (expands less than the last): every record intact
    codec_id = 3 if frame is _lz4_frame else 4
    shapes = [
        [(b"a%d" % i, b"v" * 10, [], 1000 + i) for i in range(5)],
        [(b"b%d" % i, b"\0" * 500_000, [("h", b"x")], 2000 + i) for i in range(10)],
        [(None, b"w%d" % i, [], 3000 + i) for i in range(3)],
        [(b"d%d" % i, os.urandom(3000), [], 4000 + i) for i in range(40)],
    ]
    data, want, base = b"", [], 0
    for recs in shapes:
        plain = kp_v2(recs, base)
        data += v2_recompress(plain, codec_id, frame(plain[61:], content_size=content_size))
        want += expected(recs, base, leader_epoch=0)
        base += len(recs)
    assert tuples(codec.iter_records(data)) == want
    assert column_tuples(codec.decode_columns(data)) == [t[:6] for t in want]


@pytest.mark.parametrize("declared", [1, 100, 2**40], ids=["too-small", "small", "huge"])
def test_v2_zstd_wrong_declared_content_size(codec, declared):
    # a frame header that lies about the size is corruption (zstd checks it), never a crash
    # or a short read; a claim past 2 GiB is not believed when sizing the block
    plain = kp_v2(sample_records(50))
    good = _zstd_frame(plain[61:], content_size=True)
    fhd = good[4]
    assert fhd >> 6 in (1, 2, 3) or fhd & 0x20
    # re-encode the header with an 8-byte content size field holding `declared`
    window = b"" if fhd & 0x20 else good[5:6]
    fcs_len = {0: 1 if fhd & 0x20 else 0, 1: 2, 2: 4, 3: 8}[fhd >> 6]
    rest = good[5 + len(window) + fcs_len:]
    lying = good[:4] + bytes([(fhd & 0x3F) | 0xC0]) + window + struct.pack("<Q", declared) + rest
    data = v2_recompress(plain, 4, lying)
    with pytest.raises(CorruptRecordError) as info:
        list(codec.iter_records(data))
    assert info.value.position == 0
    with pytest.raises(CorruptRecordError):
        codec.decode_columns(data)


def _lz4_header_checksum_broken(frame):
    flg = frame[4]
    dlen = 2 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    good = (xxhash.xxh32_intdigest(frame[4:4 + dlen]) >> 8) & 0xFF
    return frame[4 + dlen] != good


def test_legacy_lz4_broken_header_checksum(codec):
    # Kafka 0.8/0.9 (magic 0) computed the LZ4 header checksum over the magic number too;
    # kafka-python's magic-0 builder reproduces that bug
    b = LegacyRecordBatchBuilder(magic=0, compression_type=3, batch_size=1 << 20)
    for i in range(4):
        b.append(i, None, b"k%d" % i, b"v%d" % i)
    data = bytes(b.build())
    assert _lz4_header_checksum_broken(data[26 + 4:])   # wrapper value after its length
    got = [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type) for r in codec.iter_records(data)]
    assert got == [(i, b"k%d" % i, b"v%d" % i, -1, -1) for i in range(4)]


def test_v2_lz4_broken_header_checksum_rejected(codec):
    # only legacy messages get the compatibility fix; a v2 batch must carry a valid frame
    plain = kp_v2(sample_records(4))
    frame = bytearray(cramjam.lz4.compress(plain[61:]))
    frame[6] ^= 0xFF
    data = v2_recompress(plain, 3, bytes(frame))
    with pytest.raises(CorruptRecordError):
        list(codec.iter_records(data))


# --- legacy golden bytes -------------------------------------------------------------------

@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4"])
def test_legacy_golden_kafka_python(codec, magic, compression):
    b = MemoryRecordsBuilder(magic, KP_CODEC[compression], 1 << 20, offset=50)
    rows = [(2000 + i, None if i == 1 else b"k%d" % i, None if i == 2 else b"v%d" % i * 20)
            for i in range(5)]
    for ts, key, value in rows:
        b.append(ts, key, value)
    b.close()
    data = bytes(b.buffer())
    if compression != "none":
        # the broker sets the wrapper offset to the last inner offset
        data = set_base_offset(data, 54)
    want = [(50 + i, ts if magic == 1 else -1, 0 if magic == 1 else -1, key, value, [])
            for i, (ts, key, value) in enumerate(rows)]
    assert [t[:6] for t in tuples(codec.iter_records(data))] == want
    batches = list(codec.iter_batches(data))
    assert {b.magic for b in batches} == {magic}
    assert {b.compression for b in batches} == {compression}
    assert batches[-1].last_offset == 54
    assert batches[0].base_offset == 50
    check_columns(codec, data)


def _wrapper(offset, magic, inner, codec_id, compressed, *, timestamp=None, ts_type=0):
    return legacy_message(offset, magic, None, compressed, attributes=codec_id | (ts_type << 3),
                          timestamp=timestamp)


def test_legacy_v1_relative_offsets(codec):
    # broker-written magic 1: inner offsets 0..n-1, wrapper offset = last absolute offset
    inner = b"".join(legacy_message(i, 1, b"k%d" % i, b"v%d" % i, timestamp=100 + i)
                     for i in range(3))
    data = _wrapper(1002, 1, inner, 1, gzip.compress(inner), timestamp=102)
    got = [(r.offset, r.timestamp, r.timestamp_type, r.key) for r in codec.iter_records(data)]
    assert got == [(1000, 100, 0, b"k0"), (1001, 101, 0, b"k1"), (1002, 102, 0, b"k2")]
    (b,) = codec.iter_batches(data)
    assert (b.base_offset, b.last_offset, b.max_timestamp, b.first_timestamp) == (1000, 1002, 102, 100)


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4"])
def test_legacy_v1_wrapper_below_its_last_relative_offset_keeps_inner_offsets(codec, compression):
    """A producer's magic-1 message set (kafka-python's builder, as in a Produce request): the
    wrapper's offset is 0, below the last relative inner offset.  Kafka's Java client then keeps
    the inner offsets as they are; kwire gave -2, -1, 0."""
    b = LegacyRecordBatchBuilder(magic=1, compression_type=KP_CODEC[compression], batch_size=1 << 20)
    for i in range(3):
        b.append(i, timestamp=1000 + i, key=b"k%d" % i, value=b"v%d" % i)
    data = bytes(b.build())
    assert struct.unpack(">q", data[:8]) == (0,)
    got = [(r.offset, r.timestamp, r.key, r.value) for r in codec.iter_records(data)]
    assert got == [(i, 1000 + i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    assert all(r.offset >= 0 for batch in codec.iter_batches(data) for r in batch.records)
    check_columns(codec, data)
    # the same set once a broker assigned offsets (wrapper = last absolute offset) is absolute
    assert [r.offset for r in codec.iter_records(set_base_offset(data, 502))] == [500, 501, 502]


def test_legacy_v1_log_append_time(codec):
    inner = b"".join(legacy_message(i, 1, None, b"v%d" % i, timestamp=100 + i) for i in range(3))
    data = _wrapper(7, 1, inner, 1, gzip.compress(inner), timestamp=999, ts_type=1)
    got = [(r.offset, r.timestamp, r.timestamp_type) for r in codec.iter_records(data)]
    assert got == [(5, 999, 1), (6, 999, 1), (7, 999, 1)]


def test_legacy_v0_absolute_inner_offsets(codec):
    inner = b"".join(legacy_message(40 + i, 0, None, b"v%d" % i) for i in range(3))
    data = _wrapper(42, 0, inner, 1, gzip.compress(inner))
    assert [r.offset for r in codec.iter_records(data)] == [40, 41, 42]


def test_legacy_nested_compression_rejected(codec):
    inner = legacy_message(0, 1, None, gzip.compress(b"x"), attributes=1, timestamp=1)
    data = _wrapper(0, 1, inner, 1, gzip.compress(inner), timestamp=1)
    with pytest.raises(CorruptRecordError):
        list(codec.iter_records(data))


def test_legacy_empty_wrapper_rejected(codec):
    data = _wrapper(0, 1, b"", 1, gzip.compress(b""), timestamp=1)
    with pytest.raises(CorruptRecordError):
        list(codec.iter_records(data))


# --- our encoder, read by independent decoders ---------------------------------------------

@pytest.mark.parametrize("compression", CODECS)
def test_build_batch_read_by_kafka_python(codec, compression):
    recs = sample_records(40)
    data = codec.build_batch(recs, 300, compression, producer_id=55, producer_epoch=2,
                             base_sequence=9, is_transactional=True, partition_leader_epoch=4)
    batch = MemoryRecords(data).next_batch()
    assert batch.validate_crc()
    assert (batch.base_offset, batch.is_transactional, batch.producer_id, batch.producer_epoch,
            batch.base_sequence, batch.leader_epoch) == (300, True, 55, 2, 9, 4)
    got = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, list(r.headers))
           for r in batch]
    assert got == [t[:6] for t in expected(recs, 300)]
    # and our decoders read it back
    assert tuples(codec.iter_records(data)) == expected(recs, 300, leader_epoch=4)
    check_columns(codec, data)


@pytest.mark.parametrize("compression", CODECS)
def test_build_batch_read_by_aiokafka(codec, compression):
    from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords

    recs = sample_records(25)
    data = codec.build_batch(recs, 7, compression)
    batch = AioMemoryRecords(data).next_batch()
    assert batch.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(o, ts, k, v, h) for (o, ts, _, k, v, h, *_) in expected(recs, 7)]


def test_build_batch_log_append_time(codec):
    data = codec.build_batch([(b"a", b"1", [], 10), (b"b", b"2", [], 30)], 0, timestamp_type=1)
    batch = MemoryRecords(data).next_batch()
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in codec.iter_records(data)] == [30, 30]


def test_build_batch_accepts_buffers_and_none_timestamp(codec):
    data = codec.build_batch([(bytearray(b"k"), memoryview(b"v"), [("h", bytearray(b"x"))], None)])
    (r,) = codec.iter_records(data)
    assert (r.key, r.value, r.headers) == (b"k", b"v", [("h", b"x")])
    assert r.timestamp > 1_600_000_000_000


@pytest.mark.parametrize("bad", [
    dict(compression="brotli"), dict(magic=1), dict(timestamp_type=2),
])
def test_build_batch_rejects_bad_arguments(codec, bad):
    with pytest.raises(ValueError):
        codec.build_batch([(b"k", b"v", [], 1)], **bad)


def test_build_batch_rejects_bad_types(codec):
    with pytest.raises(TypeError):
        codec.build_batch([("str key", b"v", [], 1)])
    with pytest.raises(TypeError):
        codec.build_batch([(b"k", b"v", [(b"bytes header key", b"v")], 1)])


@pytest.mark.parametrize("compression", CODECS)
def test_twins_build_identical_bytes(compression):
    from kwire import _codec, _pycodec

    recs = sample_records(50)
    kw = dict(producer_id=3, producer_epoch=1, base_sequence=5, is_transactional=True)
    assert _codec.build_batch(recs, 9, compression, **kw) == _pycodec.build_batch(recs, 9, compression, **kw)


# --- integrity: CRC, truncation, corruption ---------------------------------------------

def test_v2_crc_failure(codec):
    data = bytearray(kp_v2([(b"k", b"x" * 50, [], 1)] * 5))
    data[-20] ^= 0x40                      # inside the last record's value
    with pytest.raises(CorruptRecordError) as info:
        list(codec.iter_records(bytes(data)))
    assert info.value.position == 17
    assert len(list(codec.iter_records(bytes(data), check_crc=False))) == 5
    with pytest.raises(CorruptRecordError):
        codec.decode_columns(bytes(data))
    with pytest.raises(CorruptRecordError):
        list(codec.iter_batches(bytes(data)))


def test_legacy_crc_failure(codec):
    good = legacy_message(0, 1, b"k", b"value", timestamp=5)
    data = bytearray(good * 2)
    data[len(good) + 30] ^= 1
    got = []
    with pytest.raises(CorruptRecordError) as info:
        for r in codec.iter_records(bytes(data)):
            got.append(r.offset)
    assert got == [0] and info.value.position == len(good) + 12
    assert len(list(codec.iter_records(bytes(data), check_crc=False))) == 2


@pytest.mark.parametrize("compression", CODECS)
def test_trailing_partial_batch_is_skipped(codec, compression):
    first = codec.build_batch(sample_records(3), 0, compression)
    second = codec.build_batch(sample_records(4), 3, compression)
    for cut in range(len(second)):
        data = first + second[:cut]
        assert [r.offset for r in codec.iter_records(data)] == [0, 1, 2]
        assert len(list(codec.iter_batches(data))) == 1
        assert codec.decode_columns(data)["num_records"] == 3


def test_legacy_trailing_partial_message_is_skipped(codec):
    m = legacy_message(0, 0, b"k", b"v")
    for cut in range(len(m)):
        assert [r.offset for r in codec.iter_records(m + m[:cut])] == [0]


def test_huge_length_at_end_does_not_allocate(codec):
    # a size field claiming ~2 GiB at the end looks like a truncated entry: skipped
    data = codec.build_batch([(b"k", b"v", [], 1)]) + struct.pack(">qi", 1, 0x7FFFFFF0) + b"\x00" * 50
    assert len(list(codec.iter_records(data))) == 1


def test_huge_records_count_rejected(codec):
    data = v2_patch(codec.build_batch([(b"k", b"v", [], 1)]), records_count=0x7FFFFFFF)
    with pytest.raises(CorruptRecordError):
        list(codec.iter_records(data))
    with pytest.raises(CorruptRecordError):
        codec.decode_columns(data)


def test_snappy_huge_claimed_length_rejected(codec):
    # cramjam would try to allocate the claimed size (and abort the process if it cannot)
    plain = kp_v2(sample_records(2))
    block = b"\x80\x80\x80\x80\x0c" + b"\x00" * 20          # claims 3 GiB
    for payload in (block, b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2 + struct.pack(">i", len(block)) + block):
        data = v2_recompress(plain, 2, payload)
        with pytest.raises(CorruptRecordError):
            list(codec.iter_records(data))


def test_unknown_compression(codec):
    data = v2_patch(kp_v2(sample_records(2)), attributes_or=0x05)
    with pytest.raises(UnsupportedCompressionError) as info:
        list(codec.iter_records(data))
    assert info.value.position == 21


@pytest.mark.parametrize("count", [0, 1, 3, 4, 100])
def test_records_count_mismatch(codec, count):
    data = v2_patch(kp_v2(sample_records(2)), records_count=count)
    with pytest.raises(CorruptRecordError):
        list(codec.iter_records(data))
    with pytest.raises(CorruptRecordError):
        list(codec.iter_batches(data))


def test_record_length_disagrees_with_content(codec):
    data = bytearray(codec.build_batch([(b"key", b"value", [], 1), (b"k2", b"v2", [], 2)]))
    assert data[61] == 2 * 14                     # first record's length varint (zigzag 14)
    for delta in (-2, -1, 1, 2):
        bad = bytearray(data)
        bad[61] = 2 * (14 + delta)
        with pytest.raises(CorruptRecordError) as info:
            list(codec.iter_records(v2_patch(bytes(bad))))
        assert 61 <= info.value.position <= 61 + 16     # within the first record


def test_bad_magic_and_short_sizes(codec):
    good = codec.build_batch([(b"k", b"v", [], 1)])
    bad_magic = good[:16] + b"\x03" + good[17:]
    with pytest.raises(CorruptRecordError) as info:
        list(codec.iter_records(good + bad_magic))
    assert info.value.position == len(good) + 16
    short = struct.pack(">qi", 0, 13) + b"\x00" * 13
    with pytest.raises(CorruptRecordError):
        list(codec.iter_records(short))
    short_v2 = struct.pack(">qi", 0, 30) + b"\x00" * 4 + b"\x02" + b"\x00" * 25
    with pytest.raises(CorruptRecordError):
        list(codec.iter_records(short_v2))


def test_corrupt_compressed_payload(codec):
    for compression in ("gzip", "snappy", "lz4", "zstd"):
        plain = kp_v2(sample_records(3))
        data = v2_recompress(plain, KP_CODEC[compression], b"\x00garbage" * 4)
        with pytest.raises(CorruptRecordError) as info:
            list(codec.iter_records(data))
        assert info.value.position == 0


def test_iterator_is_finished_after_an_error(codec):
    data = codec.build_batch([(b"k", b"v", [], 1)])
    bad = bytearray(data)
    bad[-1] ^= 1
    it = codec.iter_records(bytes(bad))
    with pytest.raises(KwireError):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_inputs_of_any_buffer_type(codec):
    data = codec.build_batch(sample_records(3), 0, "zstd")
    want = tuples(codec.iter_records(data))
    for wrapped in (bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        assert tuples(codec.iter_records(wrapped)) == want
    with pytest.raises(TypeError):
        codec.iter_records("not bytes")


# --- the objects ------------------------------------------------------------------------

def test_record_object(codec):
    r = codec.Record(5, 1000, 0, b"k", None, [("h", b"v")], "t", 2, 3)
    assert r.to_tuple() == (5, 1000, 0, b"k", None, [("h", b"v")], "t", 2, 3)
    assert r == codec.Record(5, 1000, 0, b"k", None, [("h", b"v")], "t", 2, 3)
    assert r != codec.Record(5, 1000, 0, b"k", None, [("h", b"v")], "t", 2, 4)
    assert repr(r).startswith("Record(offset=5, timestamp=1000")
    assert pickle.loads(pickle.dumps(r)) == r
    with pytest.raises(TypeError):
        hash(r)
    r.topic, r.partition, r.leader_epoch = "other", 9, 1
    assert (r.topic, r.partition, r.leader_epoch) == ("other", 9, 1)
    d = codec.Record(1, 2, 0, None, None)
    assert (d.headers, d.topic, d.partition, d.leader_epoch) == ([], None, -1, -1)


def test_record_batch_object(codec):
    data = codec.build_batch(sample_records(3), 10, "gzip")
    (b,) = codec.iter_batches(data)
    (b2,) = codec.iter_batches(data)
    assert b == b2 and len(b) == 3 and [r.offset for r in b] == [10, 11, 12]
    assert pickle.loads(pickle.dumps(b)) == b
    assert "compression='gzip'" in repr(b)


def test_topic_partition_on_records(codec):
    data = codec.build_batch(sample_records(2), 0)
    assert {(r.topic, r.partition) for r in codec.iter_records(data, topic="t", partition=7)} == {("t", 7)}


# --- columns -> Arrow -------------------------------------------------------------------

def test_columns_layout(codec):
    data = codec.build_batch(sample_records(12), 100, "lz4")
    cols = codec.decode_columns(data)
    n = cols["num_records"]
    assert n == 12
    formats = {"offset": "q", "timestamp": "q", "timestamp_type": "b", "key_offsets": "i",
               "key_valid": "?", "value_offsets": "i", "value_valid": "?",
               "header_offsets": "i", "header_key_offsets": "i", "header_value_offsets": "i",
               "header_value_valid": "?", "key_data": "B", "value_data": "B",
               "header_key_data": "B", "header_value_data": "B"}
    for name, fmt in formats.items():
        assert cols[name].format == fmt, name
        assert cols[name].readonly
    for name in ("key_offsets", "value_offsets", "header_offsets"):
        assert len(cols[name]) == n + 1
    m = len(cols["header_value_valid"])
    assert len(cols["header_key_offsets"]) == len(cols["header_value_offsets"]) == m + 1
    assert cols["header_offsets"][n] == m


def test_decode_columns_ranges_join_the_runs(codec):
    # runs of compressed and plain batches (the read_committed filter's byte ranges) decoded
    # into one set of columns; in the worker mode a worker decompresses each run's batches
    from kwire.records import record_runs

    recs = [(b"k%d" % i, b"v%d" % i * 50, [("h", b"%d" % i)] if i % 3 else [], 1_000 + i)
            for i in range(40)]
    kinds = ["zstd", "zstd", "none", "lz4", "lz4", "gzip", "zstd", "zstd", "none"]
    data = b"".join(codec.build_batch(recs, 40 * i, c) for i, c in enumerate(kinds))
    runs = record_runs(codec.scan_spans(data), {2, 5})
    assert len(runs) == 3
    want = [t[:6] for t in tuples(codec.iter_records(data, ranges=runs))]
    assert [t[0] for t in want] == [o for i in (0, 1, 3, 4, 6, 7, 8) for o in range(40 * i, 40 * i + 40)]
    assert column_tuples(codec.decode_columns(data, ranges=runs)) == want
    assert column_tuples(codec.decode_columns(memoryview(data), False, ranges=iter(runs))) == want


def test_to_arrow(codec):
    pa = pytest.importorskip("pyarrow")
    from kwire.records import to_arrow

    recs = sample_records(15)
    data = codec.build_batch(recs, 0, "snappy") + codec.build_batch(recs[:2], 15)
    table = to_arrow(codec.decode_columns(data), topic="t", partition=2)
    table.validate(full=True)
    rows = table.to_pylist()
    want = tuples(codec.iter_records(data, topic="t", partition=2))
    assert [r["offset"] for r in rows] == [w[0] for w in want]
    assert [r["key"] for r in rows] == [w[3] for w in want]
    assert [r["value"] for r in rows] == [w[4] for w in want]
    assert [[(h["key"], h["value"]) for h in r["headers"]] for r in rows] == [w[5] for w in want]
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [w[1] for w in want]
    assert table.column("topic").to_pylist() == ["t"] * len(rows)
    assert table.schema.field("headers").type == pa.list_(
        pa.struct([("key", pa.string()), ("value", pa.binary())]))


def test_to_arrow_slices_and_takes_a_schema(codec):
    pa = pytest.importorskip("pyarrow")
    from kwire.records import to_arrow

    recs = [(None if i == 1 else b"k%d" % i, None if i == 2 else b"v%d" % i,
             [("h", b"%d" % i), ("n", None)] if i % 2 else [], 1_000 + i) for i in range(6)]
    cols = codec.decode_columns(codec.build_batch(recs[:4], 100, "lz4") + codec.build_batch(recs[4:], 104))
    whole = to_arrow(cols)
    assert to_arrow(cols, lo=101, until=104).equals(whole.slice(1, 3))
    assert to_arrow(cols, lo=103).equals(whole.slice(3))
    assert to_arrow(cols, until=101).equals(whole.slice(0, 1))
    for lo, until in ((200, 300), (0, 100), (104, 102)):
        empty = to_arrow(cols, lo=lo, until=until, topic="t", partition=1)
        assert empty.num_rows == 0 and empty.schema.names[-2:] == ["topic", "partition"]

    # Spark's Kafka source schema: its order, us timestamps, int32 timestampType, a named
    # list element (kwire.spark.arrow.kafka_arrow_schema)
    entry = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    schema = pa.schema([
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(pa.field("element", entry)))])
    b = to_arrow(cols, topic="t", partition=3, lo=101, until=105, schema=schema)
    b.validate(full=True)
    assert b.schema == schema
    d = b.to_pydict()
    assert d["offset"] == [101, 102, 103, 104] and d["key"] == [None, b"k2", b"k3", b"k4"]
    assert d["value"] == [b"v1", None, b"v3", b"v4"]
    assert d["topic"] == ["t"] * 4 and d["partition"] == [3] * 4 and d["timestampType"] == [0] * 4
    assert b.column("timestamp").cast(pa.int64()).to_pylist() == [1_001_000, 1_002_000, 1_003_000, 1_004_000]
    assert d["headers"] == [[{"key": "h", "value": b"1"}, {"key": "n", "value": None}], [],
                            [{"key": "h", "value": b"3"}, {"key": "n", "value": None}], []]
    # a few columns, other types
    few = pa.schema([pa.field("timestamp", pa.timestamp("ns")), pa.field("partition", pa.int64()),
                     pa.field("timestamp_type", pa.int16()), pa.field("topic", pa.large_string())])
    b = to_arrow(cols, topic="é", partition=-1, lo=104, schema=few)
    b.validate(full=True)
    assert b.to_pydict() == {"timestamp": [pa.scalar(1_004_000_000, pa.timestamp("ns")).as_py(),
                                           pa.scalar(1_005_000_000, pa.timestamp("ns")).as_py()],
                             "partition": [-1, -1], "timestamp_type": [0, 0], "topic": ["é", "é"]}
    for bad, kwargs in ((pa.schema([("bogus", pa.int64())]), {}),
                        (pa.schema([("topic", pa.string())]), {}),
                        (pa.schema([("timestamp", pa.timestamp("s"))]), {}),
                        (pa.schema([("timestamp", pa.int64())]), {}),
                        (pa.schema([("headers", pa.binary())]), {})):
        with pytest.raises(ValueError):
            to_arrow(cols, schema=bad, **kwargs)


def test_to_arrow_header_keys_that_are_not_utf8(codec):
    pa = pytest.importorskip("pyarrow")
    from kwire.records import to_arrow

    cols = codec.decode_columns(codec.build_batch([(None, b"v", [("\udcff", b"x")], 5)], 0))
    b = to_arrow(cols)       # binary keys then
    assert b.column("headers").to_pylist() == [[{"key": b"\xff", "value": b"x"}]]
    # a schema's string keys are taken as they are (Spark gets the bytes)
    entry = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    b = to_arrow(cols, schema=pa.schema([pa.field("headers", pa.list_(entry))]))
    assert b.column("headers").flatten().flatten()[0].buffers()[2].to_pybytes() == b"\xff"


def test_columns_survive_the_source(codec):
    np = pytest.importorskip("numpy")
    data = bytearray(codec.build_batch(sample_records(5), 0))
    cols = codec.decode_columns(data)
    data[:] = b"\x00" * len(data)
    assert np.asarray(cols["offset"]).tolist() == [0, 1, 2, 3, 4]


# --- implementation choice --------------------------------------------------------------

def _run(code, **env):
    full = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for k in ("KWIRE_PURE", "KWIRE_REQUIRE_EXTENSION"):
        full.pop(k, None)
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True)


def test_public_module_picks_the_implementation():
    code = "from kwire import records; print(records.IMPLEMENTATION, records.Record.__module__)"
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cython", "kwire._codec"]
    out = _run(code, KWIRE_PURE="1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["python", "kwire._pycodec.records"]


def test_missing_extension_is_loud_when_required():
    code = "import sys; sys.modules['kwire._codec'] = None\nfrom kwire import records; print(records.IMPLEMENTATION)"
    out = _run(code, KWIRE_REQUIRE_EXTENSION="1")
    assert out.returncode != 0 and "ImportError" in out.stderr
    out = _run(code)
    assert out.returncode == 0 and out.stdout.strip() == "python"


def test_columns_large_and_growing(codec):
    # big columns (mapped blocks, reused from the pool) and columns that must grow well past
    # their first guess (highly compressible batches decode to far more than their input)
    big = [(b"k%06d" % i, b"%0100d" % i, [("h", b"v")], i) for i in range(60_000)]
    compressible = [(None, b"\x00" * 1000, [], i) for i in range(20_000)]
    for data in (codec.build_batch(big, 0), codec.build_batch(compressible, 0, "zstd")):
        want = [t[:6] for t in tuples(codec.iter_records(data))]
        first = codec.decode_columns(data)
        second = codec.decode_columns(data)       # while the first is alive
        assert column_tuples(first) == column_tuples(second) == want
        del first, second
        assert column_tuples(codec.decode_columns(data)) == want


# --- the decompression worker (compiled twin) ---------------------------------------------------

def _worker_mix(n_batches=60):
    """Compressed v2 batches of every codec with uncompressed, legacy and control entries in
    between, all recompressed by the native-independent builders; (data, expected tuples)."""
    codecs = ["lz4", "zstd", "none", "zstd", "gzip", "lz4", "snappy"]
    data, want, base = b"", [], 0
    for i in range(n_batches):
        recs = [(b"k%d-%d" % (i, j), os.urandom(20) + b"v" * (50 + i), [("h", b"%d" % j)], 1000 + j)
                for j in range(30 + i % 7)]
        data += _codec_build(recs, base, codecs[i % len(codecs)])
        want += expected(recs, base)
        base += len(recs)
        if i % 11 == 5:     # a legacy message and a control batch between the batches
            data += legacy_message(base, 1, b"lk", b"lv", timestamp=77)
            want.append((base, 77, 0, b"lk", b"lv", [], None, -1, -1))
            base += 1
            data += v2_patch(kp_v2([(None, b"\x00\x00\x00\x00\x00\x01", [], 5)], base), attributes_or=0x30)
            base += 1
    return data, want


def _codec_build(recs, base, compression):
    from kwire import _pycodec
    return _pycodec.build_batch(recs, base, compression)


@pytest.fixture
def compiled():
    from kwire import _impl
    if _impl.IMPLEMENTATION != "cython":
        pytest.skip("the compiled twin did not build")  # CI requires it (KWIRE_REQUIRE_EXTENSION)
    from kwire import _codec
    previous = _codec._decompression_settings(True, 0)
    yield _codec
    _codec._decompression_settings(*previous)


def test_worker_mixed_entries(compiled):
    data, want = _worker_mix()
    assert compiled.NATIVE_DECOMPRESSION == ("lz4", "zstd")   # what CI installs (libzstd1, liblz4-1)
    started = compiled._worker_starts()
    assert tuples(compiled.iter_records(data)) == want
    assert compiled._worker_starts() == started + 1
    assert column_tuples(compiled.decode_columns(data)) == [t[:6] for t in want]
    batches = list(compiled.iter_batches(data))
    assert [r.to_tuple() for b in batches for r in b.records if not b.is_control] == want


def test_worker_corrupt_batch_in_the_middle(compiled):
    # batch 3 of 8 carries a damaged lz4 frame under a valid CRC: the records before it come
    # out, then CorruptRecordError points at that batch; the worker does not outlive the error
    recs = sample_records(40)
    batches = [kp_v2(recs, 40 * i) for i in range(8)]
    frames = [bytearray(cramjam.lz4.compress(b[61:])) for b in batches]
    frames[3][len(frames[3]) // 2] ^= 0xFF
    frames[3][len(frames[3]) // 2 + 1] ^= 0x55
    data = b"".join(v2_recompress(b, 3, bytes(f)) for b, f in zip(batches, frames))
    position = sum(len(v2_recompress(b, 3, bytes(f))) for b, f in zip(batches[:3], frames[:3]))
    got = []
    with pytest.raises(CorruptRecordError) as info:
        for r in compiled.iter_records(data):
            got.append(r.offset)
    assert info.value.position == position
    assert got == list(range(120))
    with pytest.raises(CorruptRecordError) as info:
        compiled.decode_columns(data)
    assert info.value.position == position


def test_worker_abandoned_iterators_and_threads(compiled):
    # iterators dropped half-way (the worker may be mid-batch) and several threads decoding
    # at once: every result complete, nothing hangs
    import gc
    import threading

    data, want = _worker_mix(40)
    for take in (0, 1, 500, len(want) - 1):
        it = compiled.iter_records(data)
        for _ in range(take):
            next(it)
        del it
        gc.collect()
    results, errors = [], []

    def decode():
        try:
            for _ in range(5):
                results.append(tuples(compiled.iter_records(data)) == want)
                results.append(column_tuples(compiled.decode_columns(data)) == [t[:6] for t in want])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=decode) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == [] and results and all(results)


def test_worker_off_and_cramjam_agree(compiled):
    # the three ways the compiled twin can decompress give the same records
    data, want = _worker_mix(30)
    outcomes = []
    for native, min_bytes in ((True, 0), (True, -1), (False, -1)):
        compiled._decompression_settings(native, min_bytes)
        outcomes.append(tuples(compiled.iter_records(data)))
    assert outcomes == [want, want, want]


def test_expansion_guess_after_a_highly_compressible_batch(codec):
    # 16 MiB of zeros (undeclared size: ratio ~ thousands) then 300 KB of random bytes: the
    # second batch's block must not be sized from the first one's ratio (that was 40 GB)
    cz = zstandard.ZstdCompressor(write_content_size=False)
    b1 = kp_v2([(b"k", b"\0" * (16 << 20), [], 1)])
    b2 = kp_v2([(b"k", os.urandom(300_000), [], 1)], 1)
    data = v2_recompress(b1, 4, cz.compress(b1[61:])) + v2_recompress(b2, 4, cz.compress(b2[61:]))
    got = [(r.offset, len(r.value)) for r in codec.iter_records(data)]
    assert got == [(0, 16 << 20), (1, 300_000)]


@pytest.mark.parametrize("codec_id", [3, 4], ids=["lz4", "zstd"])
def test_empty_compressed_payload_is_corrupt(codec, codec_id):
    # a compressed batch must carry a frame, even for zero records
    plain = kp_v2([])
    data = v2_recompress(plain, codec_id, b"")
    with pytest.raises(CorruptRecordError) as info:
        list(codec.iter_batches(data))
    assert info.value.position == 0


def test_worker_iterator_shared_by_threads(compiled):
    # an iterator is not thread-safe, but two threads advancing one at once get RuntimeError
    # (like a generator that is already executing), never a crash: run in a child process
    script = (
        "import threading, sys\n"
        "sys.path.insert(0, %r)\n"
        "from tests.test_records import _worker_mix\n"
        "from kwire import _codec\n"
        "_codec._decompression_settings(True, 0)\n"
        "data, want = _worker_mix(60)\n"
        "bad = []\n"
        "for trial in range(20):\n"
        "    it = _codec.iter_records(data)\n"
        "    def run():\n"
        "        try:\n"
        "            for _ in it: pass\n"
        "        except RuntimeError as exc:\n"
        "            assert 'two threads' in str(exc), exc\n"
        "        except BaseException as exc:\n"
        "            bad.append(repr(exc))\n"
        "    ts = [threading.Thread(target=run) for _ in range(3)]\n"
        "    [t.start() for t in ts]; [t.join(30) for t in ts]\n"
        "    assert not any(t.is_alive() for t in ts)\n"
        "print('bad', bad)\n"
        "sys.exit(1 if bad else 0)\n" % os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _task_count():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_worker_gone_after_an_error_with_the_iterator_kept(compiled):
    recs = sample_records(40)
    batches = [kp_v2(recs, 40 * i) for i in range(12)]
    frames = [bytearray(cramjam.lz4.compress(b[61:])) for b in batches]
    frames[6][len(frames[6]) // 2] ^= 0xFF
    data = b"".join(v2_recompress(b, 3, bytes(f)) for b, f in zip(batches, frames))
    before = _task_count()
    started = compiled._worker_starts()
    it = compiled.iter_records(data)
    with pytest.raises(CorruptRecordError):
        for _ in it:
            pass
    assert compiled._worker_starts() == started + 1
    # joined, though `it` is still alive (threads of earlier tests may still be ending or
    # starting elsewhere in the process: wait for the count to settle, briefly)
    deadline = time.monotonic() + 3
    while _task_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _task_count() <= before
    assert list(it) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_worker_fork_child_goes_on_alone(compiled):
    # fork while a worker is running ahead: the child finishes the iteration without it
    import signal
    import time

    data, want = _worker_mix(60)
    started = compiled._worker_starts()
    it = compiled.iter_records(data)
    got = []
    while compiled._worker_starts() == started:
        got.append(next(it).to_tuple())
    time.sleep(0.2)                      # the worker fills its ring and sleeps on the lock
    pid = os.fork()
    if pid == 0:                         # the child: exit status tells the parent
        signal.alarm(20)
        try:
            ok = got + [r.to_tuple() for r in it] == want
        except BaseException:
            ok = False
        os._exit(0 if ok else 3)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert got + [r.to_tuple() for r in it] == want


def test_environment_switches_native_and_worker_off():
    # KWIRE_NATIVE_DECOMPRESSION=0: cramjam only; KWIRE_DECOMPRESSION_WORKER=0: no worker
    # thread (e.g. on executors whose cores are all busy with tasks)
    from kwire import _impl
    if _impl.IMPLEMENTATION != "cython":
        pytest.skip("the compiled twin did not build")
    code = ("from kwire import _codec; print(_codec.NATIVE_DECOMPRESSION, "
            "_codec._decompression_settings())")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outs = {}
    for env in ({}, {"KWIRE_NATIVE_DECOMPRESSION": "0"}, {"KWIRE_DECOMPRESSION_WORKER": "0"}):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                              env={**os.environ, **env}, timeout=60, check=True)
        outs[tuple(env)] = done.stdout.strip()
    assert outs[()] == "('lz4', 'zstd') (True, 131072)"
    assert outs[("KWIRE_NATIVE_DECOMPRESSION",)] == "() (False, 131072)"
    assert outs[("KWIRE_DECOMPRESSION_WORKER",)] == "('lz4', 'zstd') (True, -1)"


def test_records_without_headers_make_nothing_the_collector_counts(compiled):
    # A list per record (even an empty, untracked one) counted towards the cyclic collector's
    # allocation clock: a collection every 700 decoded records.  Records without headers now
    # hold no list until asked, on both the v2 and the legacy paths.
    import gc

    n = 5000
    v2 = compiled.build_batch([(None, b"v%d" % i, [], i) for i in range(n)], 0)
    b = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 22)
    for i in range(n):
        b.append(i, timestamp=i, key=None, value=b"v%d" % i)
    legacy = bytes(b.build())
    for data in (v2, legacy):
        gc.disable()
        try:
            gc.collect()
            before = gc.get_count()[0]
            recs = list(compiled.iter_records(data))
            grown = gc.get_count()[0] - before
        finally:
            gc.enable()
        assert len(recs) == n and grown < n // 50, grown
        assert [r.headers for r in recs[:3]] == [[], [], []]


def test_headers_list_is_the_records_own(codec):
    # the same list on every read, so changes to it stay with the record (records with and
    # without headers alike)
    data = codec.build_batch([(None, b"a", [], 0), (None, b"b", [("h", b"x")], 0)], 7)
    plain, with_h = codec.iter_records(data)
    assert plain.headers == [] and plain.headers is plain.headers
    plain.headers.append(("k", None))
    assert plain.headers == [("k", None)] and plain.to_tuple()[5] == [("k", None)]
    assert with_h.headers is with_h.headers and with_h.headers == [("h", b"x")]
    assert codec.Record(1, 2, 0, None, b"v") == codec.Record(1, 2, 0, None, b"v", headers=[])
    assert codec.Record(1, 2, 0, None, b"v").headers == []


def test_a_repeated_header_is_shared(compiled):
    # a record whose header at a position is the previous record's there (key and value)
    # shares its (key, value) tuple (immutable: nothing to tell apart but identity); a
    # different value, a null after a non-null value, a key too long for the key cache do not
    long_key = "k" * 200
    rows = [[("ct", b"json")], [("ct", b"json")], [("ct", b"json")], [("ct", b"avro")],
            [("ct", None)], [("ct", None)], [], [("ct", None)], [(long_key, b"x")],
            [(long_key, b"x")], [("ct", b"json"), ("id", b"1")], [("ct", b"json"), ("id", b"2")]]
    data = compiled.build_batch([(None, b"v", h, 0) for h in rows], 0)
    recs = list(compiled.iter_records(data))
    assert [r.headers for r in recs] == rows
    same = [[a is b for a, b in zip(recs[i].headers, recs[i - 1].headers)] for i in range(1, len(recs))]
    assert same == [[True], [True], [False], [False], [True], [], [], [False], [False],
                    [False], [True, False]]
    assert recs[7].headers[0] is recs[5].headers[0]     # a record without headers between
    # changing a record's headers list changes nothing of another's
    recs[1].headers.append(("added", None))
    assert recs[0].headers == [("ct", b"json")] and recs[2].headers == [("ct", b"json")]


def test_a_damaged_header_after_shared_ones_is_a_corrupt_record(codec):
    # the third record repeats the header the first two share, but its value length runs past
    # the record's end: the two records before it come out whole, then CorruptRecordError
    # (the length is checked against the record before any comparison with the shared pair)
    data = bytearray(codec.build_batch([(None, b"v%d" % i, [("ct", b"json")], 0) for i in range(3)], 0))
    at = bytes(data).rindex(b"\x04ct\x08json")
    data[at + 3] = 0x7E                                  # value length 63 of a 4-byte rest
    data = v2_patch(bytes(data))                         # a valid CRC over the damaged record
    got = []
    with pytest.raises(CorruptRecordError, match="needed 63 bytes"):
        for r in codec.iter_records(data):
            got.append((r.value, r.headers))
    assert got == [(b"v0", [("ct", b"json")]), (b"v1", [("ct", b"json")])]


def test_header_sharing_stops_trying_after_a_run_of_differing_values(compiled):
    # unique values (trace ids): after 32 differing values in a row the decoder stops
    # comparing, so equal values that follow are no longer shared; the records are the same
    rows = [[("trace", b"%08d" % i)] for i in range(40)] + [[("trace", b"same")]] * 3
    data = compiled.build_batch([(None, b"v", h, 0) for h in rows], 0)
    recs = list(compiled.iter_records(data))
    assert [r.headers for r in recs] == rows
    assert recs[41].headers[0] == recs[42].headers[0] and recs[41].headers[0] is not recs[42].headers[0]
    short = [[("trace", b"%08d" % i)] for i in range(10)] + [[("trace", b"same")]] * 3
    recs = list(compiled.iter_records(compiled.build_batch([(None, b"v", h, 0) for h in short], 0)))
    assert recs[11].headers[0] is recs[12].headers[0]


def test_key_and_value_are_member_descriptors(compiled):
    # record.key / record.value go through member descriptors, which the interpreter
    # specialises in an application's loop (a __slots__ attribute's cost), not getset
    # properties; still read-only, None for a null key or value
    import types

    for name in ("key", "value"):
        assert isinstance(compiled.Record.__dict__[name], types.MemberDescriptorType)
    data = compiled.build_batch([(b"k", b"v", [], 0), (None, None, [], 0)], 3)
    a, b = compiled.iter_records(data)
    assert (a.key, a.value, b.key, b.value) == (b"k", b"v", None, None)
    with pytest.raises(AttributeError):
        a.value = b"x"
    with pytest.raises(AttributeError):
        a.key = b"x"
    r = compiled.Record(1, 2, 0, bytearray(b"k"), memoryview(b"v"))
    assert (r.key, r.value) == (b"k", b"v") and type(r.key) is bytes and type(r.value) is bytes


# --- records read in full: the decoder's read-ready mode (_ReadRecord) -----------------------

def _mixed_rows(n):
    # no header, one, two (the second repeating: shared tuples), a null value
    shapes = [[], [("trace", None)], [("ct", b"json"), ("id", b"x")]]
    return [(b"k%d" % i, b"v%d" % i, [(k, v if v is None else v + b"%d" % (i % 2))
                                       for k, v in shapes[i % 3]], 1_000 + i) for i in range(n)]


def _read_all(r):
    return (r.offset, r.timestamp, r.key, r.value, r.headers)


def _batches(rows, per=1000):
    return b"".join(_codec_build(rows[i:i + per], i, "none") for i in range(0, len(rows), per))


def test_records_read_in_full_come_from_slots(compiled):
    # an iterator whose records are read in full (offset, timestamp, headers) before the next
    # is asked for makes _ReadRecords (values made at decoding, served from object slots): the
    # first record is a sample, its reading decides; then 1024 _ReadRecords, a Record as the
    # next sample, and so on.  Same values; Records in every other way
    import types

    rows = _mixed_rows(3000)
    got, kinds = [], []
    for r in compiled.iter_records(_batches(rows), topic="t", partition=2):
        got.append(_read_all(r))
        kinds.append(type(r))
    assert got == [(i, 1_000 + i, k, v, h) for i, (k, v, h, _) in enumerate(rows)]
    read_type = kinds[1]
    assert read_type is not compiled.Record and issubclass(read_type, compiled.Record)
    assert [i for i, t in enumerate(kinds) if t is compiled.Record] == [0, 1025, 2050]
    for name in ("offset", "timestamp", "headers"):
        assert isinstance(read_type.__dict__[name], types.MemberDescriptorType)
        assert not isinstance(compiled.Record.__dict__[name], types.MemberDescriptorType)
    with pytest.raises(TypeError, match="made by the decoder"):
        read_type(1, 2, 0, None, b"v")
    with pytest.raises(TypeError, match="not an acceptable base type"):
        type("Mine", (compiled.Record,), {})
    with pytest.raises(TypeError, match="only a Record can be initialised"):
        compiled.Record.__init__(next(r for r in compiled.iter_records(_batches(rows))
                                      if _read_all(r) and type(r) is read_type), 99, 98, 0, None, b"v")
    with pytest.raises(TypeError, match="not an acceptable base type"):   # (final: direct calls)
        type("Mine", (compiled._RecDecoder,), {})


def _read_records(compiled, data, **kw):
    # _ReadRecords out of data (the first record read in full turns them on), and the Records
    # the same data gives when nothing is read
    it = compiled.iter_records(data, **kw)
    first = next(it)
    _read_all(first)
    recs = [first] + [r for r in it if _read_all(r)]
    plain = list(compiled.iter_records(data, **kw))
    return recs, plain


def test_a_read_record_is_a_record(compiled):
    rows = _mixed_rows(7)
    recs, plain = _read_records(compiled, compiled.build_batch(rows, 40), topic="t", partition=2)
    assert type(recs[0]) is compiled.Record and all(type(r) is not compiled.Record for r in recs[1:])
    assert all(type(r) is compiled.Record for r in plain)
    for r, p in zip(recs, plain):
        assert r == p and p == r and not (r != p) and repr(r) == repr(p) and r.to_tuple() == p.to_tuple()
        back = pickle.loads(pickle.dumps(r))
        assert type(back) is compiled.Record and back == r
        assert (r.topic, r.partition, r.leader_epoch, r.timestamp_type) == ("t", 2, -1, 0)
        r.topic, r.partition = "u", 5
        assert (r.topic, r.partition) == ("u", 5)
        for name in ("offset", "timestamp", "headers", "key", "value"):
            with pytest.raises(AttributeError):
                setattr(r, name, None)
    # each record's headers list is its own (no headers: a fresh empty list each)
    assert recs[3].headers == [] and recs[6].headers == [] and recs[3].headers is not recs[6].headers
    recs[3].headers.append(("added", None))
    recs[5].headers.append(("added", None))
    assert recs[6].headers == [] and recs[2].headers == [("ct", b"json0"), ("id", b"x0")]
    assert recs[3].headers is recs[3].headers and recs[3].to_tuple()[5] == [("added", None)]
    assert recs[5].headers[2] == ("added", None) and plain[5].headers == rows[5][2]


def test_records_read_in_part_kept_or_taken_stay_records(compiled):
    # Records unless each record is read in full before the next one is asked for: reading
    # offset and value only; list() then reading in full; take() (consume()'s way), across
    # batches too; an iterator beside one whose records are read in full
    rows = _mixed_rows(3000)
    data = _batches(rows)
    assert {type(r) for r in compiled.iter_records(data) if (r.offset, r.value)} == {compiled.Record}
    for _ in range(2):
        kept = list(compiled.iter_records(data))
        assert [_read_all(r) for r in kept] == [(i, 1_000 + i) + rows[i][:3] for i in range(3000)]
        assert {type(r) for r in kept} == {compiled.Record}
    it = compiled.iter_records(data)
    kinds = set()
    while recs := it.take(300):
        kinds.update(type(r) for r in recs)
        assert [_read_all(r) for r in recs] == [(r.offset, 1_000 + r.offset) + rows[r.offset][:3]
                                                for r in recs]
    assert kinds == {compiled.Record}
    full, part = compiled.iter_records(data), compiled.iter_records(data)
    kinds = set()
    for a, b in zip(full, part):
        _read_all(a)
        assert b.value
        kinds.add(type(b))
    assert kinds == {compiled.Record} and type(a) is not compiled.Record


def test_read_records_stop_once_reading_stops(compiled):
    # the application stops reading headers: the next sample (a Record after at most 1024
    # _ReadRecords) is not read in full, and Records follow from there on (one in 64 a sample)
    rows = [(None, b"v", [("h", b"x")], 0)] * 1000
    data = b"".join(compiled.build_batch(rows, i * 1000) for i in range(5))
    it = compiled.iter_records(data)
    for _ in range(10):
        _read_all(next(it))
    kinds = [type(r) is compiled.Record for r in it if (r.offset, r.timestamp)]   # (True: a Record)
    assert len(kinds) == 4990
    assert kinds.index(True) == 1025 - 10 and all(kinds[1025 - 10:])
    assert not any(kinds[:1025 - 10])


def test_a_damaged_record_while_reading_in_full_is_a_corrupt_record(compiled):
    # the read-in-full mode is on (records 1.. are _ReadRecords) when record 150's value length
    # runs past its record: the 150 before come out whole and equal to what was produced,
    # then CorruptRecordError, then nothing more
    rows = [(b"k%03d" % i, b"v%03d" % i, [("h", b"x%03d" % i)], 1_000 + i) for i in range(200)]
    data = bytearray(compiled.build_batch(rows, 0))
    at = bytes(data).index(b"\x08k150\x08v150")
    data[at + 5] = 0x7E                                  # value length 63 of a shorter rest
    data = v2_patch(bytes(data))                         # a valid CRC over the damaged record
    got, kinds = [], set()
    it = compiled.iter_records(data)
    with pytest.raises(CorruptRecordError):
        for r in it:
            got.append(_read_all(r))
            kinds.add(type(r))
    assert got == [(i, 1_000 + i) + rows[i][:3] for i in range(150)]
    assert len(kinds) == 2                                # Records and _ReadRecords both
    assert list(it) == []
