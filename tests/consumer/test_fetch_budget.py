"""The fetcher's memory budget counts decoded records, not only wire bytes (issue 14, defect 7):
a Fetch answer's record sets stay raw and are decoded a piece at a time, each piece about
``piece_bytes`` of decoded cost (decompressed record bytes + a per-record object overhead);
raw bytes stay counted until their frame's last partition is decoded.  Real record batches
(kwire's codec, both twins where the twin matters), a SubscriptionState, no broker."""
from __future__ import annotations

from collections import deque
from itertools import pairwise
from types import SimpleNamespace

import pytest

from kwire import records
from kwire.consumer.fetch_buffer import (
    ANSWER_TARGET_BYTES,
    RECORD_OVERHEAD_BYTES,
    HandBack,
    fetch_answer_bytes,
)
from kwire.consumer.fetcher import Fetcher
from kwire.consumer.subscription import SubscriptionState
from kwire.errors import CorruptRecordError, DecompressionLimitError

PER_BATCH = 50
VALUE = 500


def _batches(n_batches, base=0, compression="zstd", value=VALUE):
    out, sections = [], []
    for i in range(n_batches):
        recs = [(None, b"%010d" % (base + j) + b"a" * (value - 10), None, 1000)
                for j in range(i * PER_BATCH, (i + 1) * PER_BATCH)]
        out.append(records.build_batch(recs, base + i * PER_BATCH, compression))
        sections.append(len(records.build_batch(recs, base + i * PER_BATCH)) - 61)
    return out, sections


def _fetcher(tps, budget=8 << 20, **kw):
    subs = SubscriptionState("earliest")
    subs.assign_manual(tps)
    for tp in tps:
        subs.seek(tp, 0)
    return Fetcher(subs, None, buffer_budget_bytes=budget, check_crcs=True, **kw), subs


def _answer(fetcher, parts):
    """Hand ``fetcher`` one Fetch answer holding ``parts`` {tp: record set} (fetched from 0)."""
    req = SimpleNamespace(context={"node": 1, "offsets": {tp: 0 for tp in parts},
                                   "leader_epochs": {tp: 0 for tp in parts}, "id_to_name": {}})
    resp = {"error_code": 0, "session_id": 0, "responses": [
        {"topic": tp[0], "partitions": [{"partition_index": tp[1], "error_code": 0,
                                          "high_watermark": -1, "records": data}]}
        for tp, data in parts.items()]}
    return fetcher.on_response(req, resp, 0)


class _App:
    """The application thread's side, as the Consumer has it (app.py): its own decoder of the
    fetcher's raw chunks, finished chunks handed back (HandBack) to the driver's buffer."""

    def __init__(self, fetcher):
        self.fetcher = fetcher
        self.returned = deque()
        self.decoder = fetcher.make_decoder(HandBack(self.returned, lambda n: None),
                                            fetcher.on_decode_failed)

    def hand_back(self):
        while self.returned:
            self.fetcher.buffer.take_back(self.returned.popleft())

    def actions(self):
        out, self.decoder.actions = self.decoder.actions, []
        return out


_apps = {}


def _app(fetcher):
    if fetcher not in _apps:
        _apps[fetcher] = _App(fetcher)
    return _apps[fetcher]


def _drain(fetcher, chunk, max_bytes, hand_back=True):
    app = _app(fetcher)
    pieces = []
    while not chunk.done:
        piece = app.decoder.decode_piece(chunk, max_bytes)
        if piece is not None:
            pieces.append(piece)
    if hand_back:
        app.hand_back()
    return pieces


def test_a_chunk_is_decoded_in_pieces_of_bounded_decoded_cost():
    tp = ("t", 0)
    batches, sections = _batches(40)
    data = b"".join(batches)
    f, subs = _fetcher([tp])
    [chunk] = _answer(f, {tp: data})
    assert subs.position(tp).offset == 40 * PER_BATCH      # from the headers, nothing decoded
    assert f.buffer.buffered_total == len(data)
    limit = 64 << 10
    batch_cost = max(sections) + PER_BATCH * RECORD_OVERHEAD_BYTES
    pieces = _drain(f, chunk, limit, hand_back=False)
    # every record once, in order; each piece starts where the one before said to go on
    offsets = [r.offset for p in pieces for r in p.records]
    assert offsets == list(range(40 * PER_BATCH))
    # (the last piece may be empty: the end of the data showed only after a full piece)
    assert all((p.records[0].offset if p.records else p.next_offset) == q.next_offset
               for q, p in pairwise(pieces))
    assert pieces[-1].next_offset == 40 * PER_BATCH
    assert [r.value[:10] for p in pieces for r in p.records] == [b"%010d" % o for o in offsets]
    # pieces keep to the limit (give or take the batch being entered), and together they cost
    # the decompressed record bytes plus the object overhead of each record: ~22x the wire
    assert len(pieces) > 10
    assert all(p.nbytes <= limit + batch_cost for p in pieces)
    total = sum(p.nbytes for p in pieces)
    assert total == sum(sections) + 40 * PER_BATCH * RECORD_OVERHEAD_BYTES
    assert total > 20 * len(data)
    # the raw bytes stay counted until the finished chunk is handed back to the driver (the
    # piece the application holds is not counted: the budget keeps decode_ahead_bytes for it)
    assert chunk.done and f.buffer.buffered_total == len(data)
    assert f.buffer.full_bytes() == len(data) + f.buffer.decode_ahead_bytes + f.buffer.worker_ahead_bytes
    _app(f).hand_back()
    assert f.buffer.buffered_total == 0 and not f.buffer.buffered


def test_the_budget_keeps_room_for_decoded_pieces_and_the_worker():
    tp = ("t", 0)
    f, _ = _fetcher([tp], budget=8 << 20)
    assert (f.buffer.decode_ahead_bytes, f.buffer.worker_ahead_bytes) == (2 << 20, 1 << 20)
    assert f.buffer.piece_bytes == 512 << 10
    f64, _ = _fetcher([tp], budget=64 << 20)
    assert (f64.buffer.decode_ahead_bytes, f64.buffer.worker_ahead_bytes) == (8 << 20, 8 << 20)
    # the request asks for an answer of a quarter of the budget (fetch_answer_bytes) ...
    f.metadata = _one_node()
    [req] = f.poll(0).requests
    assert req.body(12)["max_bytes"] == 2 << 20
    # ... and never for more than the budget leaves for raw bytes
    f.buffer.buffered_total = (5 << 20) - 1000
    f.inflight.clear()
    [req] = f.poll(0).requests
    assert req.body(12)["max_bytes"] == 1000


def _one_node(leader=1):
    return SimpleNamespace(leader_for=lambda t, p: leader, partition=lambda t, p: None,
                           topic_id=lambda t: None, request_update=lambda: None)


def _sizes(req):
    body = req.body(12)
    return body["max_bytes"], {(t["topic"], p["partition"]): p["partition_max_bytes"]
                               for t in body["topics"] for p in t["partitions"]}


def test_an_answer_is_about_12_mib_shared_by_the_nodes_partitions():
    assert fetch_answer_bytes(64 << 20, 50 << 20) == ANSWER_TARGET_BYTES == 12 << 20
    assert fetch_answer_bytes(8 << 20, 50 << 20) == 2 << 20          # a quarter of the budget
    assert fetch_answer_bytes(64 << 20, 1 << 20) == 1 << 20          # fetch.max.bytes
    assert fetch_answer_bytes(64 << 20, 50 << 20, 30 << 20) == 30 << 20  # an explicit partition max
    for n, each in ((1, 12 << 20), (3, 4 << 20), (6, 2 << 20), (12, 1 << 20), (40, 1 << 20)):
        tps = [("t", i) for i in range(n)]
        f, _ = _fetcher(tps, budget=64 << 20)
        f.metadata = _one_node()
        [req] = f.poll(0).requests
        assert _sizes(req) == (12 << 20, {tp: each for tp in tps})
    # max.partition.fetch.bytes given: as given, and the answer holds at least one of them
    tps = [("t", 0), ("t", 1)]
    f, _ = _fetcher(tps, budget=64 << 20, max_partition_fetch_bytes=20 << 20)
    f.metadata = _one_node()
    [req] = f.poll(0).requests
    assert _sizes(req) == (20 << 20, {tp: 20 << 20 for tp in tps})
    # partitions of two nodes: each node's share is its own
    tps = [("t", i) for i in range(4)]
    f, _ = _fetcher(tps, budget=64 << 20)
    f.metadata = SimpleNamespace(leader_for=lambda t, p: 1 if p == 0 else 2, partition=lambda t, p: None,
                                 topic_id=lambda t: None, request_update=lambda: None)
    sizes = sorted(sorted(_sizes(r)[1].items()) for r in f.poll(0).requests)
    assert sizes == [[(("t", 0), 12 << 20)], [(("t", i), 4 << 20) for i in (1, 2, 3)]]


def test_partitions_at_their_end_do_not_hold_the_node_while_another_waits_for_room():
    # b is behind but waits for room (its buffered bytes reached its share); a is at its end.
    # A Fetch for a alone would be held by the broker for fetch.wait.max.ms, and b could not be
    # fetched from that node until it came back: nothing goes out until b has room again.
    a, b = ("t", 0), ("t", 1)
    f, subs = _fetcher([a, b], budget=8 << 20)
    f.metadata = _one_node()
    subs.update_watermarks(a, 0)                    # a: at its end (high watermark 0)
    subs.update_watermarks(b, 10_000)
    f.buffer.add_raw(b, 4 << 20)                    # b: at its share of the room
    result = f.poll(0)
    assert result.requests == [] and f.starved      # the application's hand-back wakes us
    f.buffer.release_all()                          # the application freed b's room
    [req] = f.poll(0).requests
    assert set(_sizes(req)[1]) == {a, b}
    # a not at its end: it is fetched at once, without b
    f.inflight.clear()
    subs.update_watermarks(a, 500)
    f.buffer.release_all()
    f.buffer.add_raw(b, 4 << 20)
    [req] = f.poll(0).requests
    assert set(_sizes(req)[1]) == {a}


def test_a_frame_stays_counted_until_its_last_partition_is_decoded():
    a, b = ("t", 0), ("t", 1)
    da, db = b"".join(_batches(4)[0]), b"".join(_batches(6)[0])
    f, _ = _fetcher([a, b])
    ca, cb = _answer(f, {a: da, b: db})
    assert f.buffer.buffered_total == len(da) + len(db)
    _drain(f, ca, 1 << 20)
    # a's raw bytes are views of the same frame as b's: still in memory, still counted
    assert ca.done and f.buffer.buffered_total == len(da) + len(db)
    assert f.buffer.buffered.get(a, 0) == 0
    _drain(f, cb, 1 << 20)
    assert f.buffer.buffered_total == 0 and not f.buffer.buffered


def test_a_corrupt_batch_mid_chunk_rewinds_to_after_the_pieces_handed_out():
    tp = ("t", 0)
    batches, _ = _batches(10, compression="none")
    bad = bytearray(batches[6])
    bad[-5] ^= 0xFF                                      # fails its CRC
    batches[6] = bytes(bad)
    f, subs = _fetcher([tp])
    [chunk] = _answer(f, {tp: b"".join(batches)})
    fence = subs.state(tp).fence
    pieces = _drain(f, chunk, 8 << 10)
    # every record before the damaged batch goes out, then the error
    assert [r.offset for p in pieces for r in p.records] == list(range(6 * PER_BATCH))
    [action] = _app(f).actions()
    assert isinstance(action.error, CorruptRecordError) and action.partitions == [tp]
    # fetched again from the damaged batch (a new fence: later data is stale)
    assert subs.position(tp).offset == 6 * PER_BATCH
    assert subs.state(tp).fence != fence
    assert f.buffer.buffered_total == 0


def test_a_batch_over_the_decompression_limit_is_a_typed_error_not_an_allocation():
    tp = ("t", 0)
    good, _ = _batches(3)
    bomb = records.build_batch([(None, b"\0" * (8 << 20), None, 1)], 3 * PER_BATCH, "zstd")
    assert len(bomb) < 4096
    f, subs = _fetcher([tp], max_decompressed_bytes=1 << 20)
    [chunk] = _answer(f, {tp: b"".join(good) + bomb})
    pieces = _drain(f, chunk, 1 << 20)
    # every record before the bomb goes out, then the error; the position is the bomb's
    assert [r.offset for p in pieces for r in p.records] == list(range(3 * PER_BATCH))
    [action] = _app(f).actions()
    err = action.error
    assert isinstance(err, DecompressionLimitError)
    assert (err.partition, err.offset, err.limit) == (0, 3 * PER_BATCH, 1 << 20)
    assert subs.position(tp).offset == 3 * PER_BATCH


@pytest.mark.parametrize("read_committed", [True, False])
def test_aborted_transactions_are_dropped_piece_by_piece(read_committed):
    tp = ("t", 0)
    pid = 7
    out, base = [], 0
    for i in range(8):
        recs = [(None, b"%010d" % (base + j) + b"t" * 200, None, 1) for j in range(PER_BATCH)]
        out.append(records.build_batch(recs, base, "zstd", producer_id=pid, producer_epoch=0,
                                       base_sequence=base, is_transactional=True))
        base += PER_BATCH
        # transactions 1, 3, 5 and 7 aborted, the others committed
        marker = records.build_batch([(b"\0\0\0" + (b"\0" if i % 2 else b"\1"), b"\0" * 6, None, 1)],
                                     base, producer_id=pid, producer_epoch=0,
                                     is_transactional=True, is_control=True)
        out.append(marker)
        base += 1
    f, _ = _fetcher([tp], read_committed=read_committed)
    chunk = _answer(f, {tp: b"".join(out)})[0]
    chunk.aborted = [{"producer_id": pid, "first_offset": i * (PER_BATCH + 1)} for i in (1, 3, 5, 7)]
    pieces = _drain(f, chunk, 8 << 10)
    got = [r.offset for p in pieces for r in p.records]
    kept = range(8) if not read_committed else (0, 2, 4, 6)
    assert got == [i * (PER_BATCH + 1) + j for i in kept for j in range(PER_BATCH)]
    assert len(pieces) > 2 and pieces[-1].next_offset == base


@pytest.mark.parametrize("damage", [
    b"\0" * 8 + b"\0\0\0\x01" + b"\0" * 20,                  # a size no entry can have
    b"\0" * 8 + b"\0\0\0\x28" + b"\0\0\0\0\x07" + b"\0" * 35,  # magic 7
])
def test_damage_at_the_first_entry_is_reported_and_the_records_before_it_go_out(damage):
    """The header scan stops at damage: an answer that starts with it is reported at once (not
    fetched again and again in silence); one with batches before it hands those out first,
    and decoding reports the damage."""
    tp = ("t", 0)
    f, subs = _fetcher([tp])
    assert _answer(f, {tp: damage}) == []
    [action] = f.drain_actions()
    assert isinstance(action.error, CorruptRecordError) and action.partitions == [tp]
    assert action.error.offset == 0 and subs.position(tp).offset == 0
    assert tp in f._backoff_until

    good, _ = _batches(2, compression="none")
    [chunk] = _answer(f, {tp: b"".join(good) + damage})
    assert chunk.next_offset == 2 * PER_BATCH
    pieces = _drain(f, chunk, 8 << 10)
    assert [r.offset for p in pieces for r in p.records] == list(range(2 * PER_BATCH))
    [action] = _app(f).actions()
    assert isinstance(action.error, CorruptRecordError)
    assert subs.position(tp).offset == 2 * PER_BATCH
