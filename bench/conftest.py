"""Benchmark helpers: records/s bookkeeping and a ratio table at the end of the run.

    pytest bench/ -p no:cacheprovider          (pytest-benchmark prints its own table too)
"""
from __future__ import annotations

import pytest

RESULTS: dict[str, float] = {}   # name -> items per second (best round)
SECONDS: dict[str, float] = {}   # name -> best round, seconds
COMPRESSED: dict[tuple, tuple] = {}  # (codec, api, worker) -> (ratio to bare, added ratio)


@pytest.fixture
def compressed_ratios():
    """Where test_bench_records puts its interleaved compressed-vs-bare ratios."""
    return COMPRESSED


@pytest.fixture
def report(benchmark):
    """report(name, items, unit="records"): store items/s of the finished benchmark."""
    def _report(name, items, unit="records"):
        stats = getattr(benchmark, "stats", None)
        if stats is None:                      # --benchmark-disable
            return
        best = stats.stats.min
        RESULTS[name] = items / best
        SECONDS[name] = best
        benchmark.extra_info[f"{unit}_per_s"] = round(items / best)
        benchmark.extra_info["items"] = items
    return _report


def _ratio(a, b):
    if a in RESULTS and b in RESULTS:
        return f"{RESULTS[a] / RESULTS[b]:6.2f}x"
    return "   n/a"


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    w = terminalreporter.write_line
    w("")
    w("kwire record-layer benchmarks (best round)")
    for name in sorted(RESULTS):
        unit = "GB/s" if name.startswith("crc32c") else ("k msg/s" if name.startswith("fetch-v") else "M rec/s")
        value = RESULTS[name] / {"GB/s": 1e9, "k msg/s": 1e3}.get(unit, 1e6)
        w(f"  {name:44s} {value:8.2f} {unit}")
    w("")
    w("ratios (records/s, higher is better for kwire)")
    rows = [
        ("kwire cython vs aiokafka (both check CRCs)", "records/kwire-cython", "records/aiokafka"),
        ("kwire cython vs aiokafka (no CRC checks)", "records-nocrc/kwire-cython", "records-nocrc/aiokafka"),
        ("kwire cython vs aiokafka (every field read, CRCs)", "records-touching/kwire-cython",
         "records-touching/aiokafka"),
        ("kwire cython vs kafka-python (CRCs)", "records/kwire-cython", "records/kafka-python"),
        ("kwire cython vs kwire pure", "records/kwire-cython", "records/kwire-pure"),
        ("decode_columns (1 MiB chunks) vs iter_records", "columns-chunks/kwire-cython", "records/kwire-cython"),
    ]
    for v in (11, 17):
        rows.append((f"Fetch v{v} response decode: kwire cython vs kafka-python",
                     f"fetch-v{v}-decode/cython", f"fetch-v{v}-decode/kafka-python"))
        rows.append((f"Fetch v{v} response decode: kwire cython vs kwire pure",
                     f"fetch-v{v}-decode/cython", f"fetch-v{v}-decode/python"))
    for label, a, b in rows:
        w(f"  {label:52s} {_ratio(a, b)}")
    w("")
    if COMPRESSED:
        w("compressed batches: kwire time / bare decompression time of the same payloads")
        w("  (measured interleaved, best vs best; bare: the faster of cramjam into a reused block")
        w("   and the lz4/zstandard wheels; added: kwire time minus decoding the same records")
        w("   uncompressed, over the bare time)")
        for (codec, api, worker), (ratio, added) in sorted(COMPRESSED.items()):
            label = api + (" (no worker)" if worker else "")
            w(f"  {codec:4s} {label:26s} {ratio:6.2f}x   added {added:5.2f}x")
