"""What the record iterator tells and bounds for a memory budget (issue 14, defect 7), on both
twins: ``iter_records(...).record_bytes`` counts the record data (decompressed) of the batches
entered so far, which the consumer's fetcher turns into the decoded cost of the records it
queues; ``max_ahead_bytes`` bounds the batches the compiled twin's decompression worker
inflates ahead of the decoder (fewer ring slots, or no worker)."""
from __future__ import annotations

import os

import pytest

from kwire.errors import KwireError
from tests.test_records import (  # noqa: F401  (codec and compiled are fixtures)
    _worker_mix,
    codec,
    compiled,
    expected,
    kp_v2,
    legacy_message,
    tuples,
    v2_patch,
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


def _take_vs_islice(codec, data, steps, stop_at=None):
    """Call by call, what take(n) and list(islice(it, n)) give on two iterators over ``data``:
    the offsets of each call (or the error it raised) and the iterator's counters after it."""
    from itertools import islice

    out = []
    for how in ("take", "islice"):
        it = codec.iter_records(data)
        if stop_at is not None:
            it.record_cost, it.stop_at = 100, stop_at
        calls = []
        for n in steps:
            try:
                got = it.take(n) if how == "take" else list(islice(it, n))
            except KwireError as e:
                calls.append((type(e).__name__, str(e)))
                break
            calls.append(([r.offset for r in got], it.handed, it.exhausted, it.record_bytes))
        out.append(calls)
    return out


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_take_gives_what_islice_gives(codec, compression):
    # v2 batches of 1, 7, 30 and 2 records, a legacy message set between them and a control
    # batch: take(n) for steps that end inside runs, exactly at their ends and past them
    batches, base = [], 0
    for i, n in enumerate((1, 7, 30, 2)):
        batches.append(kp_v2(_recs(i, n), base, compression))
        base += n
    # a legacy message and a control batch (a COMMIT marker) after the records so far
    marker = kp_v2([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", [], 1234)], base + 1,
                   transactional=True, producer_id=9, producer_epoch=1, base_sequence=0)
    batches.insert(2, legacy_message(base, 1, b"k", b"legacy", timestamp=5))
    batches.insert(3, v2_patch(marker, attributes_or=0x20))
    data = b"".join(batches)
    for steps in ([1] * 50, [7] * 10, [8, 1, 30, 2, 5], [100], [3, 0, 4, 2, 1, 64]):
        took, sliced = _take_vs_islice(codec, data, steps)
        assert took == sliced, steps
        assert sum(len(c[0]) for c in took) == base + 1
    # with stop_at: the same stops before a batch, and the same resumption
    took, sliced = _take_vs_islice(codec, data, [5, 5, 50, 50, 50], stop_at=1)
    assert took == sliced and took[0][0] == [0] and not took[0][2]


def test_take_raises_where_islice_raises(codec):
    # the third batch says 12 records but holds 10 (its CRC made right): its eleventh record
    # runs past the batch; the call that reaches it raises, and the records of that call go
    # with it, as iterating gives them
    good = [kp_v2(_recs(i, 10), 10 * i) for i in range(4)]
    data = b"".join([good[0], good[1], v2_patch(good[2], records_count=12), good[3]])
    for steps in ([4] * 20, [10, 10, 1, 50], [25, 25], [20, 5, 5, 5], [30, 1]):
        took, sliced = _take_vs_islice(codec, data, steps)
        assert took == sliced, steps
        assert took[-1][0] == "CorruptRecordError"
        handed = [o for c in took[:-1] for o in c[0]]
        assert handed == list(range(len(handed))) and len(handed) <= 30


def test_a_one_header_records_list_is_made_once_and_kept(codec):
    # a record with one header keeps just its tuple until headers is read (compiled twin);
    # the list it then makes is the record's: the same object on every read, changes stay,
    # and equality, to_tuple and pickling see it
    import pickle

    data = kp_v2([(b"k", b"v", [("h", b"x")], 1), (b"k2", b"v2", [("a", b"1"), ("b", None)], 2)])
    one, two = list(codec.iter_records(data))
    h = one.headers
    assert h == [("h", b"x")] and one.headers is h
    h.append(("added", b"y"))
    assert one.headers == [("h", b"x"), ("added", b"y")]
    assert one.to_tuple()[5] == [("h", b"x"), ("added", b"y")]
    assert pickle.loads(pickle.dumps(one)) == one
    assert two.headers == [("a", b"1"), ("b", None)] and two.headers is two.headers
    fresh, _ = list(codec.iter_records(data))
    assert fresh != one and fresh.headers == [("h", b"x")]
