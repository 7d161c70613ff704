"""What the record iterator tells and bounds for a memory budget (issue 14, defect 7), on both
twins: ``iter_records(...).record_bytes`` counts the record data (decompressed) of the batches
entered so far, which the consumer's fetcher turns into the decoded cost of the records it
queues; ``max_ahead_bytes`` bounds the batches the compiled twin's decompression worker
inflates ahead of the decoder (fewer ring slots, or no worker)."""
from __future__ import annotations

import os

import pytest

from tests.test_records import (  # noqa: F401  (codec and compiled are fixtures)
    _worker_mix,
    codec,
    compiled,
    expected,
    kp_v2,
    legacy_message,
    tuples,
)

RECORDS_SECTION = 61  # a v2 batch's header; the rest is its records section


def _recs(i, n):
    return [(b"k%d" % j, os.urandom(10) + b"v" * (100 * i + j), [("h", b"x")], 1000 + j)
            for j in range(n)]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_record_bytes_counts_each_batch_when_entered(codec, compression):
    # batches written by kafka-python (the independent encoder); the uncompressed batch says
    # how big each records section is once decompressed
    batches, want, sizes, base = [], [], [], 0
    for i, n in enumerate((5, 1, 17, 3)):
        recs = _recs(i, n)
        batches.append(kp_v2(recs, base, compression))
        sizes.append(len(kp_v2(recs, base)) - RECORDS_SECTION)
        want += expected(recs, base)
        base += n
    data = b"".join(batches)
    it = codec.iter_records(data, max_ahead_bytes=1 << 20)
    assert it.record_bytes == 0
    seen, got = [], []
    for r in it:
        got.append(r)
        seen.append(it.record_bytes)
    assert [t[:6] for t in tuples(got)] == [t[:6] for t in want]
    # after each record: the sizes of the batches entered so far (a whole batch counts once
    # its first record is out)
    entered = [sum(sizes[:k + 1]) for k, n in enumerate((5, 1, 17, 3)) for _ in range(n)]
    assert seen == entered
    assert it.record_bytes == sum(sizes)


def test_record_bytes_of_legacy_messages(codec):
    data = legacy_message(0, 1, b"k", b"v" * 40, timestamp=5) + legacy_message(1, 0, None, b"w")
    it = codec.iter_records(data)
    got = [(r.offset, it.record_bytes) for r in it]
    first = len(legacy_message(0, 1, b"k", b"v" * 40, timestamp=5))
    assert got == [(0, first), (1, first + len(legacy_message(1, 0, None, b"w")))]


def test_max_ahead_bytes_bounds_the_worker_ring(compiled):
    # slots are at least 1 MiB: under two of them no worker starts; with two (and then
    # three) the ring wraps around many times; every way gives the same records
    data, want = _worker_mix(60)
    outcomes = []
    for ahead, starts in ((None, 1), (1 << 20, 0), (2 << 20, 1), (3 << 20, 1), (0, 0)):
        before = compiled._worker_starts()
        outcomes.append(tuples(compiled.iter_records(data, max_ahead_bytes=ahead)))
        assert compiled._worker_starts() - before == starts, ahead
        batches = list(compiled.iter_batches(data, max_ahead_bytes=ahead))
        assert [r.to_tuple() for b in batches for r in b.records if not b.is_control] == want
    assert outcomes == [want] * 5


def test_max_ahead_bytes_must_be_an_integer(codec):
    with pytest.raises(TypeError):
        codec.iter_records(b"", max_ahead_bytes="1")


def test_stop_at_stops_before_a_batch_and_resumes(codec):
    # 4 batches of 10 records; stop_at counts record_bytes + record_cost per record handed out
    batches, sizes, want, base = [], [], [], 0
    for i in range(4):
        recs = _recs(i, 10)
        batches.append(kp_v2(recs, base, "zstd"))
        sizes.append(len(kp_v2(recs, base)) - RECORDS_SECTION)
        want += [base + j for j in range(10)]
        base += 10
    it = codec.iter_records(b"".join(batches))
    assert (it.stop_at, it.record_cost, it.handed, it.exhausted) == (-1, 0, 0, False)
    it.stop_at = 1                      # reached once the first batch is entered
    first = [r.offset for r in it]      # the whole first batch, then a stop before the second
    assert first == want[:10] and not it.exhausted and it.handed == 10
    it.record_cost = 1000
    it.stop_at = sizes[0] + 10 * 1000 + sizes[1] + 5 * 1000   # in the middle of the second
    second = [r.offset for r in it]     # batches are not cut: the second one whole
    assert second == want[10:20] and not it.exhausted
    it.stop_at = -1
    rest = [r.offset for r in it]
    assert rest == want[20:] and it.exhausted and it.handed == 40
    assert list(it) == []               # and stays ended


_CYCLE = r"""
import gc
from kwire import records
b = b"".join(records.build_batch([(None, b"x" * 100, None, 1)] * 50, i * 50, "zstd")
             for i in range(10))
frame = memoryview(bytearray(b"HEAD" + b))
data = frame[4:]
its = [records.iter_records(data), records.iter_batches(data)]
for it in its:
    next(it)

class Holder:
    pass

h = Holder()
h.its, h.data, h.me = its, data, h     # iterators half-way, in cyclic garbage
del its, it, h, data, frame
gc.collect()
print("collected")
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["cython", "pure"])
def test_iterators_in_cyclic_garbage_are_collected(pure):
    # (the consumer's fetcher put one there through an exception's traceback: the collector
    # cleared the memoryview the compiled decoder held a buffer of, and CPython crashed)
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "KWIRE_PURE": pure, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", _CYCLE], cwd=root, env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert (out.returncode, out.stdout.strip()) == (0, "collected"), out.stderr[-2000:]
