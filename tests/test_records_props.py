"""Property tests and a bounded fuzz run for the record layer, on both twins.

* round trip: arbitrary records (null keys/values, headers, any int64 timestamps and base
  offsets, every compression) through build_batch and back, on both twins, byte-identical;
* varints: hand-encoded record fields (including overlong encodings) decode to the values
  they encode, and oversized ones are rejected;
* fuzz: a deterministic few thousand truncations and mutations of valid inputs of every
  kind.  Only KwireError subclasses may come out, and the twins must agree on everything:
  the records, or the error class, its position and the records yielded before it.
"""
from __future__ import annotations

import gzip
import random
import signal
import struct
import zlib

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecordsBuilder

from kwire import _codec, _pycodec
from kwire.errors import CorruptRecordError, KwireError  # noqa: I001  (before _codec: import cycle)

TWINS = [pytest.param(_codec, id="cython"), pytest.param(_pycodec, id="pure")]
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


def wrap64(v):
    return ((v + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)


# --- round trip -----------------------------------------------------------------------------

header = st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=20))
record = st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=300),
                   st.lists(header, max_size=4), INT64)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record, max_size=25), base_offset=INT64,
       compression=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
       producer_id=INT64, producer_epoch=st.integers(-(1 << 15), (1 << 15) - 1),
       base_sequence=st.integers(-(1 << 31), (1 << 31) - 1),
       leader_epoch=st.integers(-(1 << 31), (1 << 31) - 1),
       transactional=st.booleans(), ts_type=st.sampled_from([0, 1]))
def test_round_trip(records, base_offset, compression, producer_id, producer_epoch,
                    base_sequence, leader_epoch, transactional, ts_type):
    kw = dict(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
              is_transactional=transactional, timestamp_type=ts_type,
              partition_leader_epoch=leader_epoch)
    data = _codec.build_batch(records, base_offset, compression, **kw)
    assert _pycodec.build_batch(records, base_offset, compression, **kw) == data
    max_ts = max((r[3] for r in records), default=-1)
    want = [(wrap64(base_offset + i), max_ts if ts_type == 1 else ts, ts_type, key, value,
             list(headers), None, -1, leader_epoch if leader_epoch >= 0 else -1)
            for i, (key, value, headers, ts) in enumerate(records)]
    for twin in (_codec, _pycodec):
        assert [r.to_tuple() for r in twin.iter_records(data)] == want
        (batch,) = twin.iter_batches(data)
        assert (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                batch.is_transactional, batch.partition_leader_epoch, batch.compression,
                len(batch)) == (base_offset, producer_id, producer_epoch, base_sequence,
                                transactional, leader_epoch, compression, len(records))
        assert _columns(twin.decode_columns(data)) == _columns(_codec.decode_columns(data))


def _columns(cols):
    return {k: (v.tobytes() if isinstance(v, memoryview) else v) for k, v in cols.items()}


# --- varints --------------------------------------------------------------------------------

def uvarint(v, pad=0):
    """LEB128, optionally overlong: `pad` extra continuation bytes carrying zeros."""
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v or pad:
            out.append(b | 0x80)
            if not v:
                pad -= 1
                if pad == 0:
                    out.append(0)
                    break
                continue
        else:
            out.append(b)
            break
    return bytes(out)


def zz(v, bits, pad=0):
    return uvarint(((v << 1) ^ (v >> (bits - 1))) & ((1 << bits) - 1), pad)


def hand_batch(body_fields, count=1):
    """A v2 batch around one hand-encoded record body (valid CRC, base offset 0)."""
    body = b"".join(body_fields)
    records = uvarint(((len(body) << 1)) & 0xFFFFFFFF) + body
    head = struct.pack(">qiibIhiqqqhii", 0, 49 + len(records), -1, 2, 0, 0, 0, 1000, 1000, -1, -1,
                       -1, count)
    out = bytearray(head + records)
    out[17:21] = crc32c(bytes(out[21:])).to_bytes(4, "big")
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(off=st.integers(-(1 << 31), (1 << 31) - 1), ts=INT64,
       pad_off=st.integers(0, 4), pad_ts=st.integers(0, 2))
def test_varint_fields(off, ts, pad_off, pad_ts):
    # overlong encodings still decode (as long as they fit 10 bytes and the value its width)
    off_enc = zz(off, 32, pad_off)
    ts_enc = zz(ts, 64, pad_ts) if len(zz(ts, 64)) + pad_ts <= 10 else zz(ts, 64)
    data = hand_batch([b"\x00", ts_enc, off_enc, zz(-1, 32), zz(-1, 32), zz(0, 32)])
    for twin in (_codec, _pycodec):
        (r,) = twin.iter_records(data)
        assert (r.offset, r.timestamp, r.key, r.value) == (off, wrap64(1000 + ts), None, None)


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize("field", [
    uvarint(1 << 32),                       # a 32-bit varint field holding 33 bits
    b"\xff" * 10 + b"\x01",                 # longer than 10 bytes
    b"\x80" * 9 + b"\x02",                  # overflows 64 bits
])
def test_varint_rejected(twin, field):
    data = hand_batch([b"\x00", b"\x00", field, zz(-1, 32), zz(-1, 32), zz(0, 32)])
    with pytest.raises(CorruptRecordError):
        list(twin.iter_records(data))


# --- fuzz -----------------------------------------------------------------------------------

def _kp(magic, compression, n=6, offset=0):
    b = MemoryRecordsBuilder(magic, compression, 1 << 20, offset=offset)
    for i in range(n):
        hdrs = [("h%d" % i, b"v" * i), ("n", None)] if magic == 2 else []
        b.append(1000 + i, None if i == 2 else b"k%d" % i, None if i == 3 else b"val%d" % i * 7, hdrs)
    b.close()
    return bytes(b.buffer())


def _legacy(offset, magic, key, value, attributes=0, ts=5):
    body = struct.pack(">bB", magic, attributes) + (struct.pack(">q", ts) if magic == 1 else b"")
    for f in (key, value):
        body += struct.pack(">i", -1) if f is None else struct.pack(">i", len(f)) + f
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def _seeds():
    recs = [(b"k%d" % i if i % 3 else None, b"value-%d" % i * (i % 5) if i % 4 else None,
             [("hdr", b"x" * i)] * (i % 3), 10_000 + i) for i in range(12)]
    seeds = {}
    for comp in ["none", "gzip", "snappy", "lz4", "zstd"]:
        seeds[f"v2-{comp}"] = _codec.build_batch(recs, 100, comp) + _codec.build_batch(recs[:3], 112, comp)
        seeds[f"v2-kp-{comp}"] = _kp(2, ["none", "gzip", "snappy", "lz4", "zstd"].index(comp))
    seeds["v2-control"] = _codec.build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01", [], 5)],
                                             7, is_control=True, is_transactional=True,
                                             producer_id=1, producer_epoch=0)
    seeds["v2-log-append"] = _codec.build_batch(recs, 0, "zstd", timestamp_type=1)
    for magic in (0, 1):
        for comp in range(4):
            seeds[f"v{magic}-kp-{comp}"] = _kp(magic, comp)
    inner = b"".join(_legacy(i, 1, b"k", b"v%d" % i, ts=i) for i in range(4))
    seeds["v1-gzip-relative"] = _legacy(9, 1, None, gzip.compress(inner), attributes=1 | 8)
    seeds["mixed"] = _legacy(1, 1, b"a", b"b") + _codec.build_batch(recs[:4], 2, "lz4")
    return seeds


SEEDS = _seeds()


def _mutate(rng, data):
    kind = rng.randrange(6)
    b = bytearray(data)
    if kind == 0:
        return bytes(b[:rng.randrange(len(b))])                       # truncate
    if kind == 1:
        for _ in range(rng.randint(1, 4)):                             # flip bytes
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 2:                                                      # random byte values
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 3:                                                      # extreme int32 somewhere
        pos = rng.randrange(max(1, len(b) - 4))
        b[pos:pos + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00",
                                     b"\x00\x00\x00\x00", b"\x00\x00\x00\x01"])
        return bytes(b)
    if kind == 4:                                                      # insert bytes
        pos = rng.randrange(len(b) + 1)
        return bytes(b[:pos] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + b[pos:])
    pos = rng.randrange(len(b))                                        # delete bytes
    return bytes(b[:pos] + b[pos + rng.randint(1, 8):])


def _outcome(run):
    """('ok', result) or ('err', class name, position, partial result)."""
    partial = []
    try:
        run(partial)
        return ("ok", partial)
    except KwireError as exc:
        return ("err", type(exc).__name__, exc.position, partial)


def _records(twin, data, crc):
    def run(out):
        for r in twin.iter_records(data, crc, topic="t", partition=1):
            out.append(r.to_tuple())
    return run


def _batches(twin, data, crc):
    def run(out):
        for b in twin.iter_batches(data, crc):
            t = b.to_tuple()
            out.append(t[:-2] + ([r.to_tuple() for r in t[-2]], t[-1]))
    return run


def _cols(twin, data, crc):
    def run(out):
        out.append(_columns(twin.decode_columns(data, crc)))
    return run


class _CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise _CaseTimeout()


# The compiled twin's other ways to decompress lz4/zstd (kwire/_inflate.pxi): the worker
# thread forced on for any two compressed batches, and cramjam instead of the native libraries.
_DECOMPRESSION_MODES = {"native": None, "worker": (True, 0), "cramjam": (False, -1)}


@pytest.mark.timeout(600, method="thread")   # the per-case limit below uses SIGALRM
@pytest.mark.parametrize("seed_name, mode", [(s, "native") for s in sorted(SEEDS)]
                         + [(s, m) for s in ("v2-lz4", "v2-zstd") for m in ("worker", "cramjam")])
def test_fuzz_twins_agree(seed_name, mode):
    rng = random.Random(f"kwire-records-{seed_name}")
    seed = SEEDS[seed_name]
    cases = [seed] + [_mutate(rng, seed) for _ in range(1000)]
    if _DECOMPRESSION_MODES[mode] is not None:
        restore = _codec._decompression_settings(*_DECOMPRESSION_MODES[mode])
        try:
            _fuzz_cases(seed_name, cases)
        finally:
            _codec._decompression_settings(*restore)
    else:
        _fuzz_cases(seed_name, cases)


def _fuzz_cases(seed_name, cases):
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for i, data in enumerate(cases):
            signal.setitimer(signal.ITIMER_REAL, 5.0)                 # per-case limit
            try:
                for crc in (True, False):
                    for api in (_records, _batches, _cols):
                        compiled = _outcome(api(_codec, data, crc))
                        pure = _outcome(api(_pycodec, data, crc))
                        assert compiled == pure, (seed_name, i, api.__name__, crc, data.hex())
                        if i == 0:
                            assert compiled[0] == "ok", compiled
            except _CaseTimeout:
                pytest.fail(f"case {i} of {seed_name} took more than 5 s: {data.hex()}")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)
