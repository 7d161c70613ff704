"""Record decoding throughput: kwire (compiled and pure) against kafka-python and aiokafka.

Workload: 1M records of an 8-byte key, a 100-byte JSON-ish value and one header
(``trace-id`` -> 16 bytes), in v2 batches of 1000 records (~145 KB each, about what a
producer with batch.size=128k..256k writes).  Every decoder consumes every record object;
``records/s`` lands in ``benchmark.extra_info`` and in the summary table (bench/conftest.py).

Peers that are slow decode fewer records (the same per-record reporting).  Consumers check
CRCs by default (check.crcs=true), so the headline numbers do too; the *-nocrc rows leave
them out on both sides.  The records-touching rows also read every field of every record
(offset, timestamp, key, value, headers), as an application does.
"""
from __future__ import annotations

import collections
import os
import random
import time

import cramjam
import pytest
from crc32c import crc32c

from kwire import _codec, _pycodec

SMOKE = os.environ.get("KWIRE_BENCH_SMOKE", "") not in ("", "0")  # the suite's smoke run
PER_BATCH = 1000
N_BATCHES = 5 if SMOKE else 1000
TOTAL = PER_BATCH * N_BATCHES
SLOW_BATCHES = 2 if SMOKE else 50       # pure twin and kafka-python: 50k records

_consume = collections.deque


def _rounds(n: int) -> int:
    return 1 if SMOKE else n


def _records(seed=7):
    rng = random.Random(seed)
    out = []
    for i in range(PER_BATCH):
        v = b'{"id":%08d,"user":"u%05d","amount":%6d.%02d,"currency":"EUR","ts":%13d,"note":"' % (
            i, rng.randrange(100000), rng.randrange(1000000), rng.randrange(100), 1_700_000_000_000 + i)
        v = (v + bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(100)))[:99] + b"}"
        out.append((b"k%07d" % rng.randrange(10_000_000), v,
                    [("trace-id", b"%016x" % rng.getrandbits(64))], 1_700_000_000_000 + i))
    return out


_CORPUS = {}


def corpus(compression="none"):
    """(all batches concatenated, list of batches) for 1M records."""
    if compression not in _CORPUS:
        recs = _records()
        batches = [_codec.build_batch(recs, i * PER_BATCH, compression) for i in range(N_BATCHES)]
        _CORPUS[compression] = (b"".join(batches), batches)
    return _CORPUS[compression]


def fetch_chunks(batches, size=1 << 20):
    """Group batches into ~1 MiB Fetch-response-sized buffers."""
    chunks, cur, n = [], [], 0
    for b in batches:
        cur.append(b)
        n += len(b)
        if n >= size:
            chunks.append(b"".join(cur))
            cur, n = [], 0
    if cur:
        chunks.append(b"".join(cur))
    return chunks


# --- Record objects -------------------------------------------------------------------------

def _kwire(codec, data, check_crc=True):
    _consume(codec.iter_records(data, check_crc), maxlen=0)


def _peer_loop(memory_records_cls, data, check_crc):
    # aiokafka and kafka-python share the MemoryRecords / next_batch / validate_crc shape
    records = memory_records_cls(data)
    while True:
        batch = records.next_batch()
        if batch is None:
            return
        if check_crc and not batch.validate_crc():
            raise ValueError("crc")
        _consume(batch, maxlen=0)


def _aiokafka(data, check_crc=True):
    from aiokafka.record.memory_records import MemoryRecords
    _peer_loop(MemoryRecords, data, check_crc)


def _kafka_python(data, check_crc=True):
    from kafka.record.memory_records import MemoryRecords
    _peer_loop(MemoryRecords, data, check_crc)


def test_records_kwire_cython(benchmark, report):
    data, _ = corpus()
    benchmark.pedantic(_kwire, (_codec, data), rounds=_rounds(10), warmup_rounds=1)
    report("records/kwire-cython", TOTAL)


def test_records_kwire_cython_nocrc(benchmark, report):
    data, _ = corpus()
    benchmark.pedantic(_kwire, (_codec, data, False), rounds=_rounds(10), warmup_rounds=1)
    report("records-nocrc/kwire-cython", TOTAL)


def test_records_kwire_pure(benchmark, report):
    _, batches = corpus()
    data = b"".join(batches[:SLOW_BATCHES])
    benchmark.pedantic(_kwire, (_pycodec, data), rounds=_rounds(3), warmup_rounds=1)
    report("records/kwire-pure", SLOW_BATCHES * PER_BATCH)


def test_records_aiokafka(benchmark, report):
    data, _ = corpus()
    from aiokafka.record.default_records import DefaultRecordBatch

    assert DefaultRecordBatch.__module__.startswith("aiokafka.record._crecords"), "want aiokafka's Cython reader"
    benchmark.pedantic(_aiokafka, (data,), rounds=_rounds(10), warmup_rounds=1)
    report("records/aiokafka", TOTAL)


def test_records_aiokafka_nocrc(benchmark, report):
    data, _ = corpus()
    benchmark.pedantic(_aiokafka, (data, False), rounds=_rounds(10), warmup_rounds=1)
    report("records-nocrc/aiokafka", TOTAL)


def test_records_kafka_python(benchmark, report):
    _, batches = corpus()
    data = b"".join(batches[:SLOW_BATCHES])
    benchmark.pedantic(_kafka_python, (data,), rounds=_rounds(3), warmup_rounds=1)
    report("records/kafka-python", SLOW_BATCHES * PER_BATCH)


# --- the same, touching every field of every record ----------------------------------------------
# What an application does with the records: read offset, timestamp, key, value and headers.
# The loop around the decoder is the same for every client, so its cost is in both numbers.

def _touch(records) -> int:
    n = 0
    for r in records:
        n += r.offset + r.timestamp + len(r.key) + len(r.value) + len(r.headers)
    return n


def _kwire_touch(codec, data):
    return _touch(codec.iter_records(data, True))


def _aiokafka_touch(data):
    from aiokafka.record.memory_records import MemoryRecords

    records, n = MemoryRecords(data), 0
    while (batch := records.next_batch()) is not None:
        if not batch.validate_crc():
            raise ValueError("crc")
        n += _touch(batch)
    return n


def test_records_touching_kwire_cython(benchmark, report):
    data, _ = corpus()
    benchmark.pedantic(_kwire_touch, (_codec, data), rounds=_rounds(10), warmup_rounds=1)
    report("records-touching/kwire-cython", TOTAL)


def test_records_touching_aiokafka(benchmark, report):
    data, _ = corpus()
    assert _aiokafka_touch(data) == _kwire_touch(_codec, data)  # the same fields, the same sums
    benchmark.pedantic(_aiokafka_touch, (data,), rounds=_rounds(10), warmup_rounds=1)
    report("records-touching/aiokafka", TOTAL)


# --- compressed batches vs bare decompression ---------------------------------------------------

def _bare(compression, how):
    """A plain single-threaded decompressor: cramjam into one reused block (the fastest we
    know here: fresh output buffers cost a page fault per 4 KiB), or the lz4/zstandard wheels."""
    if how == "cramjam-into":
        fn, out = getattr(cramjam, compression).decompress_into, bytearray(4 << 20)
        return lambda payload: fn(payload, out)
    if compression == "lz4":
        import lz4.frame
        return lz4.frame.decompress
    import zstandard
    return zstandard.ZstdDecompressor().decompress


@pytest.mark.parametrize("how", ["cramjam-into", "package"])
@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_bare_decompress(benchmark, report, compression, how):
    _, batches = corpus(compression)
    payloads = [b[61:] for b in batches]          # each batch's compressed records section
    fn = _bare(compression, how)
    benchmark.pedantic(lambda: _consume(map(fn, payloads), maxlen=0), rounds=_rounds(10), warmup_rounds=1)
    report(f"bare-decompress/{compression}/{how}", TOTAL)


# kwire as shipped (a worker thread decompresses ahead, kwire/_inflate.pxi) and single-threaded
_WORKER = {"": None, "-noworker": (True, -1)}


@pytest.fixture(params=list(_WORKER), ids=["worker", "noworker"])
def worker(request):
    setting = _WORKER[request.param]
    previous = _codec._decompression_settings(*setting) if setting else None
    yield request.param
    if previous:
        _codec._decompression_settings(*previous)


# This VM's speed drifts by tens of percent from minute to minute, so the ratio that matters
# (kwire / bare decompression) is measured interleaved: before every timed kwire round, the
# setup step times the bare decompressors and the uncompressed decode of the same records.
# The ratios (best vs best) go to the compressed_ratios fixture; the summary prints them.

def _interleaved(benchmark, ratios, key, compression, kwire_fn, plain_fn):
    _, batches = corpus(compression)
    payloads = [b[61:] for b in batches]
    bares = [_bare(compression, how) for how in ("cramjam-into", "package")]
    best = {"bare": float("inf"), "plain": float("inf")}

    def setup():
        for fn in bares:
            t = time.perf_counter()
            _consume(map(fn, payloads), maxlen=0)
            best["bare"] = min(best["bare"], time.perf_counter() - t)
        t = time.perf_counter()
        plain_fn()
        best["plain"] = min(best["plain"], time.perf_counter() - t)

    benchmark.pedantic(kwire_fn, setup=setup, rounds=_rounds(15), warmup_rounds=1)
    kw = benchmark.stats.stats.min
    ratios[key] = (kw / best["bare"], (kw - best["plain"]) / best["bare"])
    benchmark.extra_info["ratio_to_bare_decompression"] = round(kw / best["bare"], 3)
    benchmark.extra_info["added_over_uncompressed_per_bare"] = round((kw - best["plain"]) / best["bare"], 3)


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_records_compressed(benchmark, report, compressed_ratios, compression, worker):
    data, _ = corpus(compression)
    plain, _ = corpus()
    _interleaved(benchmark, compressed_ratios, (compression, "iter_records", worker), compression,
                 lambda: _kwire(_codec, data), lambda: _kwire(_codec, plain))
    report(f"records-{compression}/kwire-cython{worker}", TOTAL)


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_columns_compressed(benchmark, report, compressed_ratios, compression, worker):
    data, _ = corpus(compression)
    plain, _ = corpus()
    _interleaved(benchmark, compressed_ratios, (compression, "decode_columns", worker), compression,
                 lambda: _codec.decode_columns(data), lambda: _codec.decode_columns(plain))
    report(f"columns-{compression}/kwire-cython{worker}", TOTAL)


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_records_compressed_aiokafka(benchmark, report, compression):
    data, _ = corpus(compression)
    benchmark.pedantic(_aiokafka, (data,), rounds=_rounds(3), warmup_rounds=1)
    report(f"records-{compression}/aiokafka", TOTAL)


# --- CRC and columns ------------------------------------------------------------------------

def test_crc32c_throughput(benchmark, report):
    data, _ = corpus()
    benchmark.pedantic(crc32c, (data,), rounds=_rounds(10), warmup_rounds=1)
    report("crc32c", len(data), unit="bytes")


def test_columns_whole_buffer(benchmark, report):
    data, _ = corpus()
    benchmark.pedantic(_codec.decode_columns, (data,), rounds=_rounds(10), warmup_rounds=1)
    report("columns-whole/kwire-cython", TOTAL)


def test_columns_fetch_chunks(benchmark, report):
    # what a consumer does: one decode per ~1 MiB partition response, results dropped
    chunks = fetch_chunks(corpus()[1])
    benchmark.pedantic(lambda: _consume(map(_codec.decode_columns, chunks), maxlen=0),
                       rounds=_rounds(10), warmup_rounds=1)
    report("columns-chunks/kwire-cython", TOTAL)


def test_columns_fetch_chunks_nocrc(benchmark, report):
    chunks = fetch_chunks(corpus()[1])
    benchmark.pedantic(lambda: _consume((_codec.decode_columns(c, False) for c in chunks), maxlen=0),
                       rounds=_rounds(10), warmup_rounds=1)
    report("columns-chunks-nocrc/kwire-cython", TOTAL)


def test_columns_to_arrow(benchmark, report):
    pytest.importorskip("pyarrow")
    from kwire.records import to_arrow

    chunks = fetch_chunks(corpus()[1])
    benchmark.pedantic(lambda: _consume((to_arrow(_codec.decode_columns(c)) for c in chunks), maxlen=0),
                       rounds=_rounds(3), warmup_rounds=1)
    report("columns-to-arrow/kwire-cython", TOTAL)
