"""The record layer's header scan (``scan_spans``) and read_committed filter (``aborted_spans``,
``record_runs``), issue #16: one walker and one filter for the consumer and the Spark reader.

* the twins agree (spans, or the error class and position) on hypothesis-built record sets
  (v2 batches of every kind, legacy messages, truncated tails) and on a few thousand mutations
  of the record layer's fuzz seeds;
* on the same inputs the scan says what the three walkers it replaced said: the consumer's
  ``scan_record_set`` and the Spark reader's ``scan_batches`` (kept below, verbatim, as
  oracles), except where the scan is now stricter on purpose: an unknown magic, and a size no
  entry can have in the last 12-16 bytes, are damage (the decoder always said so);
* the filter on real batches (``build_batch``, transactional and control batches) hands out
  what the decode-every-batch filter the consumer used (oracle below) handed out, and what
  the generated transactions say was committed;
* ``iter_records(ranges=)``, which decodes the filter's byte runs with one decoder, agrees
  across the twins and with decoding each run on its own; ``decode_columns(ranges=)`` (the
  Spark Arrow reader's) agrees across the twins and with ``iter_records(ranges=)``.
"""
from __future__ import annotations

import gzip
import random
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire import _codec, _pycodec, records
from kwire.errors import CorruptRecordError, KwireError
from tests.test_records import column_tuples
from tests.test_records_props import SEEDS, _columns, _mutate

TWINS = [pytest.param(_codec, id="cython"), pytest.param(_pycodec, id="pure")]


def wrap64(v):
    return ((v + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)


# --- the walkers this scan replaced (before issue #16), kept as oracles ---------------------------

_OLD_HEAD = struct.Struct(">qi")
_OLD_I32 = struct.Struct(">i")


def old_scan_record_set(data):
    """kwire.consumer.fetcher.scan_record_set before #16: (last offset, leader epoch)."""
    pos, end = 0, len(data)
    last = epoch = None
    unpack_head, unpack_i32 = _OLD_HEAD.unpack_from, _OLD_I32.unpack_from
    while end - pos >= 12:
        offset, size = unpack_head(data, pos)
        if size < 14 or size > end - pos - 12:
            break
        if data[pos + 16] == 2:
            if size < 49:
                break
            epoch = unpack_i32(data, pos + 12)[0]
            last = offset + unpack_i32(data, pos + 23)[0]
        else:
            last, epoch = offset, None
        pos += 12 + size
    return last, epoch


_OLD_ENTRY = struct.Struct(">qiiB")
_OLD_V2 = struct.Struct(">hi")
_OLD_I64 = struct.Struct(">q")


def old_scan_batches(data):
    """kwire.spark.reader.scan_batches before #16: (start, end, base, last, control,
    transactional, producer id) per entry."""
    out = []
    n = len(data)
    pos = 0
    while n - pos >= 17:
        base, size, _, magic = _OLD_ENTRY.unpack_from(data, pos)
        end = pos + 12 + size
        if size < 14 or end > n:
            if size < 14:
                raise CorruptRecordError(f"record entry at position {pos} has size {size}", position=pos)
            break
        if magic == 2:
            if size < 49:
                raise CorruptRecordError(f"record batch at position {pos} has size {size}", position=pos)
            attrs, last_delta = _OLD_V2.unpack_from(data, pos + 21)
            pid = _OLD_I64.unpack_from(data, pos + 43)[0]
            out.append((pos, end, base, base + last_delta, bool(attrs & 0x20), bool(attrs & 0x10), pid))
        else:
            out.append((pos, end, base, base, False, False, -1))
        pos = end
    return out


def old_committed_records(data, aborted):
    """The consumer's read_committed filter before #16 (_CommittedRecords._walk): decode every
    batch, track aborted producer ids, end them at an ABORT control record."""
    aborted_txns = sorted((a["first_offset"], a["producer_id"]) for a in aborted)
    ai = 0
    aborted_pids: set = set()
    out = []
    for batch in _codec.iter_batches(data):
        last = batch.last_offset
        while ai < len(aborted_txns) and aborted_txns[ai][0] <= last:
            aborted_pids.add(aborted_txns[ai][1])
            ai += 1
        if batch.is_control:
            ctype = None
            if batch.records and batch.records[0].key is not None and len(batch.records[0].key) >= 4:
                ctype = int.from_bytes(batch.records[0].key[2:4], "big", signed=True)
            if aborted_pids and batch.producer_id in aborted_pids and ctype in (0, None):
                aborted_pids.discard(batch.producer_id)
        elif not (batch.is_transactional and batch.producer_id in aborted_pids):
            out.extend(batch.records)
    return out


# --- comparing ----------------------------------------------------------------------------------

def _spans(twin, data, until_damage=False):
    """('ok', [span tuples]) or ('err', class name, position)."""
    try:
        return ("ok", [s.to_tuple() for s in twin.scan_spans(data, until_damage=until_damage)])
    except KwireError as exc:
        return ("err", type(exc).__name__, exc.position)


def _old_spark(data):
    try:
        return ("ok", old_scan_batches(data))
    except CorruptRecordError:
        return ("err",)


def _damage_the_old_walkers_passed(data, position):
    """Where the new scan is stricter on purpose: is the error at ``position`` an unknown
    magic, or a bad size with fewer than 17 bytes left (the Spark walker stopped there)?"""
    start = position - 16 if position >= 16 and data[position] not in (0, 1, 2) else position - 8
    return data[start + 16] not in (0, 1, 2) if len(data) - start >= 17 else True


def check_against_everything(data):
    strict = _spans(_codec, data)
    assert _spans(_pycodec, data) == strict
    assert _spans(_codec, memoryview(data)) == strict
    lenient = _spans(_codec, data, until_damage=True)
    assert lenient[0] == "ok" and _spans(_pycodec, data, until_damage=True) == lenient
    spans = lenient[1]
    if strict[0] == "ok":
        assert strict[1] == spans
    # every span lies inside the data, in order, without gaps
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert all(s[0] < s[1] <= len(data) for s in spans)

    # the consumer's walker: the last entry's offset and epoch (magic 0/1: none), up to damage
    got = (spans[-1][3], spans[-1][5] if spans[-1][4] == 2 else None) if spans else (None, None)
    old = old_scan_record_set(data)
    old = (None if old[0] is None else wrap64(old[0]), old[1])
    stopped_at = spans[-1][1] if spans else 0
    if got != old:
        # only where the old walker read an unknown magic as a legacy entry
        assert data[stopped_at + 16] not in (0, 1, 2), (got, old, data.hex())
        assert old_scan_record_set(data[:stopped_at]) == (got[0] if spans else None, got[1])

    # the Spark reader's walker: the same spans, or the same failure
    spark = _old_spark(data)
    if strict[0] == "ok":
        assert spark[0] == "ok"
        assert [(s[0], s[1], s[2], wrap64(s[3]), s[4], s[5], s[6]) for s in spark[1]] == \
            [(s[0], s[1], s[2], s[3], s[8], s[7], s[6]) for s in spans]
    elif spark[0] == "ok":
        assert _damage_the_old_walkers_passed(data, strict[2]), (strict, data.hex())


# --- hypothesis: record sets built from parts ---------------------------------------------------

def _legacy(offset, magic, key, value, attributes=0, ts=5):
    body = struct.pack(">bB", magic, attributes) + (struct.pack(">q", ts) if magic == 1 else b"")
    for f in (key, value):
        body += struct.pack(">i", -1) if f is None else struct.pack(">i", len(f)) + f
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def _control(base, pid, ctype, **kw):
    return records.build_batch([(struct.pack(">hh", 0, ctype), struct.pack(">hi", 0, 0), [], 1)],
                               base, producer_id=pid, producer_epoch=0, is_transactional=True,
                               is_control=True, **kw)


v2_entry = st.builds(
    lambda base, n, comp, epoch, pid, txn: records.build_batch(
        [(None, b"v%d" % i, [], 1000 + i) for i in range(n)], base, comp,
        partition_leader_epoch=epoch, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
        is_transactional=txn),
    st.integers(-(1 << 63), (1 << 63) - 100), st.integers(1, 5),
    st.sampled_from(["none", "gzip", "lz4", "zstd"]), st.integers(-(1 << 31), (1 << 31) - 1),
    st.integers(-1, 1 << 40), st.booleans())
control_entry = st.builds(_control, st.integers(0, 1 << 40), st.integers(0, 1 << 40),
                          st.integers(-3, 3), compression=st.sampled_from(["none", "gzip"]))
legacy_entry = st.builds(
    lambda off, magic, wrap: (_legacy(off, magic, None, gzip.compress(
        b"".join(_legacy(i, magic, b"k", b"v") for i in range(3))), attributes=1)
        if wrap else _legacy(off, magic, b"k", b"v")),
    st.integers(0, 1 << 50), st.sampled_from([0, 1]), st.booleans())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(st.one_of(v2_entry, control_entry, legacy_entry), max_size=6),
       cut=st.integers(0, 80), flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                              max_size=3))
def test_scan_twins_and_old_walkers_agree_on_built_record_sets(entries, cut, flips):
    data = b"".join(entries)
    check_against_everything(data)
    if data:
        check_against_everything(data[:max(0, len(data) - cut)])
        b = bytearray(data)
        for pos, value in flips:
            b[pos % len(b)] = value
        check_against_everything(bytes(b))


def _ranged(twin, data, ranges):
    """('ok', records) or ('err', class name, position, records before it) of iter_records
    over ``ranges`` of ``data``."""
    out = []
    try:
        for r in twin.iter_records(data, ranges=ranges):
            out.append(r.to_tuple())
        return ("ok", out)
    except KwireError as exc:
        return ("err", type(exc).__name__, exc.position, out)


def _ranged_columns(twin, data, ranges):
    """('ok', columns as bytes) or ('err', class name, position) of decode_columns over
    ``ranges`` of ``data``."""
    try:
        return ("ok", _columns(twin.decode_columns(data, ranges=ranges)))
    except KwireError as exc:
        return ("err", type(exc).__name__, exc.position)


def check_ranges(data, rng):
    """iter_records(ranges=) and decode_columns(ranges=) on both twins: the same records or
    the same failure, and when the ranges decode, the records of decoding each range's bytes
    on its own."""
    spans = _codec.scan_spans(data, until_damage=True)
    skip = {k for k in range(len(spans)) if rng.random() < 0.4}
    ranges = records.record_runs(spans, skip)
    compiled = _ranged(_codec, data, ranges)
    assert _ranged(_pycodec, data, ranges) == compiled, (ranges, data.hex())
    columns = _ranged_columns(_codec, data, ranges)
    assert _ranged_columns(_pycodec, data, ranges) == columns, (ranges, data.hex())
    assert columns[0] == compiled[0]
    if compiled[0] == "ok":
        alone = [r.to_tuple() for a, b in ranges for r in _codec.iter_records(data[a:b])]
        assert compiled[1] == alone
        cols = _codec.decode_columns(data, ranges=ranges)
        assert column_tuples(cols) == [t[:6] for t in alone]
    else:
        assert columns[1:] == compiled[1:3]


@pytest.mark.parametrize("seed_name", sorted(SEEDS))
def test_scan_twins_and_old_walkers_agree_on_mutations(seed_name):
    rng = random.Random(f"kwire-spans-{seed_name}")
    seed = SEEDS[seed_name]
    check_against_everything(seed)
    assert _spans(_codec, seed)[0] == "ok"
    for _ in range(400):
        data = _mutate(rng, seed)
        check_against_everything(data)
        check_against_everything(seed + data)
        check_ranges(seed + data, rng)


@pytest.mark.parametrize("twin", TWINS)
def test_iter_records_ranges_are_checked(twin):
    data = records.build_batch([(None, b"a", [], 1)], 0) * 2
    assert list(twin.iter_records(data, ranges=[])) == []
    assert twin.decode_columns(data, ranges=[])["num_records"] == 0
    for bad in ([(0, len(data) + 1)], [(10, 5)], [(20, 30), (0, 10)], [(-1, 3)]):
        with pytest.raises(ValueError):
            twin.iter_records(data, ranges=bad)
        with pytest.raises(ValueError):
            twin.decode_columns(data, ranges=bad)


# --- the scan, by example -----------------------------------------------------------------------

@pytest.mark.parametrize("twin", TWINS)
def test_spans_of_real_batches(twin):
    plain = records.build_batch([(None, b"a", [], 1)] * 3, 5, "zstd", partition_leader_epoch=4)
    txn = records.build_batch([(None, b"t", [], 1)] * 2, 8, producer_id=9, producer_epoch=0,
                              base_sequence=0, is_transactional=True, partition_leader_epoch=4)
    marker = _control(10, 9, 0, partition_leader_epoch=5)
    legacy = _legacy(14, 1, None, gzip.compress(b"".join(_legacy(i, 1, b"k", b"v") for i in range(4))),
                     attributes=1)
    data = plain + txn + marker + legacy
    spans = twin.scan_spans(data)
    a, b, c = len(plain), len(plain) + len(txn), len(plain) + len(txn) + len(marker)
    assert [s.to_tuple() for s in spans] == [
        (0, a, 5, 7, 2, 4, -1, False, False, -1),
        (a, b, 8, 9, 2, 4, 9, True, False, -1),
        (b, c, 10, 10, 2, 5, 9, True, True, 0),
        (c, len(data), 14, 14, 1, -1, -1, False, False, -1),  # a wrapper's offset is its last
    ]
    assert [r.offset for r in twin.iter_records(data[c:])] == [11, 12, 13, 14]
    assert twin.scan_spans(data[:-1]) == spans[:3]                    # a truncated tail ends it
    assert spans[2] == twin.Span(*spans[2].to_tuple()) and spans[2] != spans[1]


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize("damage, position", [
    (lambda d: d + struct.pack(">qi", 0, 13) + b"\0" * 13, 8),       # size below any entry
    (lambda d: d + struct.pack(">qiib", 0, 40, 0, 2) + b"\0" * 35, 8),  # v2 shorter than its header
    (lambda d: d + struct.pack(">qiib", 0, 40, 0, 3) + b"\0" * 35, 16),  # unknown magic
])
def test_malformed_framing_is_a_corrupt_record_error(twin, damage, position):
    good = records.build_batch([(None, b"a", [], 1)], 0)
    data = damage(good)
    with pytest.raises(CorruptRecordError) as info:
        twin.scan_spans(data)
    assert info.value.position == len(good) + position
    with pytest.raises(CorruptRecordError) as decoded:
        list(twin.iter_records(data))            # the decoder frames entries the same way
    assert decoded.value.position == info.value.position
    assert twin.scan_spans(data, until_damage=True) == twin.scan_spans(good)


# --- the filter on real batches ---------------------------------------------------------------------

def committed(data, aborted, lo=None):
    """What the filter hands out: the records of record_runs, decoded."""
    spans = records.scan_spans(data)
    runs = records.record_runs(spans, records.aborted_spans(spans, aborted), lo)
    return [r for r in records.iter_records(data, ranges=runs) if lo is None or r.offset >= lo]


def test_filter_drops_aborted_transactions_and_markers():
    def txn(base, pid, *values):
        return records.build_batch([(None, v, [], 1) for v in values], base, producer_id=pid,
                                   producer_epoch=0, base_sequence=0, is_transactional=True)
    data = (records.build_batch([(None, b"plain", [], 1)], 0)          # 0
            + txn(1, 1, b"t1a", b"t1b")                                  # 1-2 aborted
            + txn(3, 2, b"t2")                                           # 3 committed
            + _control(4, 1, 0)                                          # 4 ABORT pid 1
            + _control(5, 2, 1)                                          # 5 COMMIT pid 2
            + txn(6, 1, b"t1c")                                          # 6 pid 1 again: committed
            + _control(7, 1, 1))                                         # 7
    aborted = [{"producer_id": 1, "first_offset": 1}]
    spans = records.scan_spans(data)
    assert records.aborted_spans(spans, aborted) == {1}
    assert records.aborted_spans(spans, None) == set() == records.aborted_spans(spans, [])
    assert [r.value for r in committed(data, aborted)] == [b"plain", b"t2", b"t1c"]
    assert committed(data, aborted) == old_committed_records(data, aborted)
    # the control batches stay inside the runs (the decoders leave them out)
    assert records.record_runs(spans, {1}) == [(spans[0].start, spans[0].end), (spans[2].start, len(data))]
    assert records.record_runs(spans, {1}, 3, 6) == [(spans[2].start, spans[4].end)]
    assert [r.value for r in committed(data, aborted, lo=2)] == [b"t2", b"t1c"]
    runs = records.record_runs(spans, {1})
    for twin in (_codec, _pycodec):
        assert column_tuples(twin.decode_columns(data, ranges=runs)) == [
            r.to_tuple()[:6] for r in committed(data, aborted)]


def test_a_commit_marker_does_not_end_an_aborted_transaction():
    # (a log a broker would not write; the consumer's filter has always read the marker's type,
    # like Kafka's Java consumer, and an unreadable type counts as ABORT)
    def txn(base, pid):
        return records.build_batch([(None, b"x%d" % base, [], 1)], base, producer_id=pid,
                                   producer_epoch=0, is_transactional=True)
    for marker, aborted_after in [(_control(1, 1, 1), {0, 2}), (_control(1, 1, 0), {0}),
                                  (_control(1, 1, 0, compression="gzip"), {0}),
                                  (_control(1, 1, 7), {0, 2})]:
        data = txn(0, 1) + marker + txn(2, 1)
        spans = records.scan_spans(data)
        assert records.aborted_spans(spans, [{"producer_id": 1, "first_offset": 0}]) == aborted_after
        assert committed(data, [{"producer_id": 1, "first_offset": 0}]) == \
            old_committed_records(data, [{"producer_id": 1, "first_offset": 0}])


def test_runs_keep_a_legacy_wrapper_whose_first_offsets_are_in_range():
    wrapper = _legacy(9, 1, None, gzip.compress(b"".join(_legacy(i, 1, b"k", b"v%d" % i)
                                                         for i in range(4))), attributes=1)
    spans = records.scan_spans(wrapper)
    assert (spans[0].base_offset, spans[0].last_offset) == (9, 9)  # the first is not in the header
    assert records.record_runs(spans, (), 6, 8) == [(0, len(wrapper))]
    assert [r.offset for r in records.iter_records(wrapper)] == [6, 7, 8, 9]


@st.composite
def transactions(draw):
    """Real batches of interleaved transactions of three producers (and plain batches), each
    ended by its marker; the aborted_transactions a broker would list; the values
    read_committed must hand out."""
    parts, aborted, aborted_values, values_in_order = [], [], set(), []
    open_txn: dict[int, tuple[int, bool, list]] = {}  # pid -> (first offset, aborting, values)
    offset = 0

    def end(pid):
        first, aborting, txn_values = open_txn.pop(pid)
        parts.append(_control(offset, pid, 0 if aborting else 1))
        if aborting:
            aborted.append({"producer_id": pid, "first_offset": first})
            aborted_values.update(txn_values)

    for _ in range(draw(st.integers(1, 25))):
        pid = draw(st.sampled_from([-1, 1, 2, 3]))
        if pid in open_txn and draw(st.booleans()):
            end(pid)
            offset += 1
            continue
        values = [b"%d" % (offset + i) for i in range(draw(st.integers(1, 3)))]
        values_in_order.extend(values)
        if pid < 0:
            parts.append(records.build_batch([(None, v, [], 1) for v in values], offset))
        else:
            if pid not in open_txn:
                open_txn[pid] = (offset, draw(st.booleans()), [])
            parts.append(records.build_batch([(None, v, [], 1) for v in values], offset,
                                             draw(st.sampled_from(["none", "zstd"])),
                                             producer_id=pid, producer_epoch=0, is_transactional=True))
            open_txn[pid][2].extend(values)
        offset += len(values)
    for pid in sorted(open_txn):
        end(pid)
        offset += 1
    return b"".join(parts), aborted, [v for v in values_in_order if v not in aborted_values]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=transactions(), lo_frac=st.floats(0, 1))
def test_filter_matches_the_decoding_filter_on_generated_transactions(case, lo_frac):
    data, aborted, want_values = case
    spans = records.scan_spans(data)
    got = committed(data, aborted)
    assert [r.value for r in got] == want_values
    assert [r.to_tuple() for r in got] == [r.to_tuple() for r in old_committed_records(data, aborted)]
    assert [r.to_tuple() for r in _pycodec_committed(data, aborted)] == [r.to_tuple() for r in got]
    runs = records.record_runs(spans, records.aborted_spans(spans, aborted))
    for twin in (_codec, _pycodec):
        assert column_tuples(twin.decode_columns(data, ranges=runs)) == [r.to_tuple()[:6] for r in got]
    lo = int(lo_frac * (spans[-1].last_offset + 1))
    assert [r.offset for r in committed(data, aborted, lo)] == [r.offset for r in got if r.offset >= lo]


def _pycodec_committed(data, aborted):
    spans = _pycodec.scan_spans(data)
    runs = records.record_runs(spans, records.aborted_spans(spans, aborted))
    return list(_pycodec.iter_records(data, ranges=runs))
