"""Fetcher (sessions, budget, errors, transactions) and PositionManager (resets, KIP-320
validation, queries) against the fake cluster."""
from __future__ import annotations

from collections import deque

import pytest

from kwire import records as RL
from kwire.consumer._codes import E
from kwire.consumer.fetch_buffer import HandBack
from kwire.consumer.fetcher import Fetcher, FetchSession, decode_partition
from kwire.consumer.offsets import ListOffsetsResult, PositionManager
from kwire.consumer.subscription import FetchState, Position, SubscriptionState
from kwire.consumer.types import ErrorAction, PollResult
from kwire.errors import CorruptRecordError, KafkaConnectionError, LogTruncationError

from .fakes import (
    Driver,
    FakeCluster,
    FBatch,
    FRecord,
    fake_iter_records,
    fake_scan,
)


class MetadataRefresher:
    """Refreshes the metadata when someone asked, then lets positions react (as the driver)."""

    def __init__(self, cluster, md, positions):
        self.cluster, self.md, self.positions = cluster, md, positions
        self.refreshes = 0

    def poll(self, now_ms):
        if self.md.update_requested:
            self.cluster.refresh(self.md)
            self.refreshes += 1
        self.positions.on_metadata()
        return PollResult([], None)


class Setup:
    def __init__(self, cluster, *, reset="earliest", read_committed=True, budget=64 << 20, **kw):
        self.cluster = cluster
        self.driver = Driver(cluster)
        self.md = cluster.metadata()
        self.subs = SubscriptionState(reset)
        self.positions = PositionManager(self.subs, self.md, retry_backoff_ms=50)
        # the fake cluster's token batches, or (real_records) the record layer on real bytes
        fakes = {} if cluster.real_records else {"iter_records": fake_iter_records, "scan": fake_scan}
        self.fetcher = Fetcher(self.subs, self.md, **fakes,
                               fetch_max_wait_ms=kw.pop("max_wait", 100), buffer_budget_bytes=budget,
                               read_committed=read_committed, retry_backoff_ms=50, **kw)
        self.refresher = MetadataRefresher(cluster, self.md, self.positions)
        self.chunks = []
        # the application thread's decoder, as the Consumer has it (app.py): a decoded chunk
        # stays in the driver's budget until hand_back() (the driver's take_back)
        self.returned = deque()
        self.decoder = self.fetcher.make_decoder(HandBack(self.returned, lambda n: None),
                                                 self.fetcher.on_decode_failed)
        self.driver.add(self.refresher)
        self.driver.add(self.positions)
        self.driver.add(self.fetcher, self._decode)

    def _decode(self, raw):
        for c in raw:
            c = self.decoder.decode(c)
            if c is not None:
                self.chunks.append(c)

    def hand_back(self):
        while self.returned:
            self.fetcher.buffer.take_back(self.returned.popleft())

    def assign(self, tps, *, start=None):
        self.subs.assign_manual(tps)
        if start is None:
            self.positions.reset_initializing()
        else:
            for tp in tps:
                self.subs.seek(tp, start)

    def records(self, tp=None):
        return [r for c in self.chunks if tp is None or c.tp == tp for r in c.records]

    def offsets(self, tp=None):
        return [r.offset for r in self.records(tp)]

    def fetch_bodies(self):
        return [(n, v, b) for _, n, api, v, b in self.cluster.log if api == "Fetch"]

    def run_until(self, cond, max_ms=10000):
        return self.driver.run_until(cond, max_ms)


@pytest.fixture
def cluster():
    c = FakeCluster(nodes=(1, 2))
    c.create_topic("t", 4)  # partitions 0,2 on node 1; 1,3 on node 2
    return c


def fill(cluster, tp, n, per_batch=5):
    for i in range(0, n, per_batch):
        cluster.append(tp, [b"v%d" % j for j in range(i, min(n, i + per_batch))])


# --- basics ------------------------------------------------------------------------------------

def test_fetches_everything_in_order(cluster):
    for p in range(4):
        fill(cluster, ("t", p), 23)
    s = Setup(cluster)
    s.assign([("t", p) for p in range(4)])
    s.run_until(lambda: len(s.records()) == 92)
    for p in range(4):
        assert s.offsets(("t", p)) == list(range(23))
        assert s.subs.position(("t", p)).offset == 23
    assert s.subs.state(("t", 0)).high_watermark == 23


def test_one_fetch_in_flight_per_broker(cluster):
    s = Setup(cluster, max_wait=500)
    s.assign([("t", p) for p in range(4)])
    s.driver.run(2000)
    fetches = [(t, n) for t, n, api in s.driver.sent if api == "Fetch"]
    for node in (1, 2):
        times = [t for t, n in fetches if n == node]
        assert times and all(b - a >= 500 for a, b in zip(times, times[1:]))
    # each broker only hears about the partitions it leads
    for node, _, body in s.fetch_bodies():
        parts = {p["partition"] for t in body["topics"] for p in t["partitions"]}
        assert parts <= ({0, 2} if node == 1 else {1, 3})


def test_position_skips_control_batches_and_compaction_gaps(cluster):
    tp = ("t", 0)
    cluster.logs[tp] = [
        FBatch(0, 4, [FRecord(0, b"a"), FRecord(3, b"b")]),      # compacted: 1,2,4 gone
        FBatch(5, 5, [FRecord(5, b"")], 7, True, True),           # a commit marker
        FBatch(6, 9, [FRecord(9, b"c")]),
    ]
    s = Setup(cluster)
    s.assign([tp])
    s.run_until(lambda: s.subs.position(tp) is not None and s.subs.position(tp).offset == 10)
    assert s.offsets(tp) == [0, 3, 9]


def test_records_before_the_fetch_offset_in_a_batch_are_dropped(cluster):
    tp = ("t", 0)
    fill(cluster, tp, 10, per_batch=10)
    s = Setup(cluster)
    s.assign([tp], start=4)
    s.run_until(lambda: s.subs.position(tp).offset == 10)
    assert s.offsets(tp) == list(range(4, 10))


def test_partial_trailing_batch_is_fetched_again():
    data = _batch(0, 2) + _batch(2, 3)[:-1]
    recs, next_offset, _ = decode_partition(RL.iter_records, data, 0, topic="t", partition=0,
                                            aborted=None, read_committed=False, check_crc=True)
    assert [r.offset for r in recs] == [0, 1] and next_offset == 2


def test_read_committed_drops_aborted_transactions(cluster):
    tp = ("t", 0)
    cluster.real_records = True  # (the filter reads the batches' headers)
    cluster.append(tp, [b"plain"])                                   # 0
    cluster.append(tp, [b"t1a", b"t1b"], producer_id=1, transactional=True)   # 1-2 aborted
    cluster.append(tp, [b"t2"], producer_id=2, transactional=True)   # 3 committed
    cluster.append_control(tp, 1, abort=True)                        # 4
    cluster.append_control(tp, 2, abort=False)                       # 5
    cluster.append(tp, [b"t1c"], producer_id=1, transactional=True)  # 6 new txn, committed
    cluster.append_control(tp, 1, abort=False)                       # 7
    cluster.aborted = {tp: [{"producer_id": 1, "first_offset": 1}]}
    s = Setup(cluster, read_committed=True)
    s.assign([tp])
    s.run_until(lambda: s.subs.position(tp) is not None and s.subs.position(tp).offset == 8)
    assert [r.value for r in s.records(tp)] == [b"plain", b"t2", b"t1c"]

    s2 = Setup(cluster, read_committed=False)
    s2.assign([tp])
    s2.run_until(lambda: s2.subs.position(tp) is not None and s2.subs.position(tp).offset == 8)
    assert [r.value for r in s2.records(tp)] == [b"plain", b"t1a", b"t1b", b"t2", b"t1c"]



def test_a_chunk_left_without_records_still_reaches_the_application(cluster):
    """Only an aborted transaction and its marker: the chunk comes back empty (no decoded
    cost) and finished, so the Consumer can move its position to ``next_offset`` and hand the
    raw chunk back."""
    tp = ("t", 0)
    cluster.real_records = True
    cluster.append(tp, [b"x", b"y"], producer_id=1, transactional=True)  # 0-1 aborted
    cluster.append_control(tp, 1, abort=True)                            # 2
    cluster.aborted = {tp: [{"producer_id": 1, "first_offset": 0}]}
    s = Setup(cluster, read_committed=True)
    s.assign([tp])
    s.run_until(lambda: s.subs.position(tp) is not None and s.subs.position(tp).offset == 3)
    assert s.chunks and all(c.records == [] and c.nbytes == 0 for c in s.chunks)
    assert s.chunks[-1].next_offset == 3
    s.hand_back()
    assert s.fetcher.buffer.buffered.get(tp, 0) == 0 and s.fetcher.buffer.buffered_total == 0

# --- sessions --------------------------------------------------------------------------------

def test_incremental_fetch_session(cluster):
    fill(cluster, ("t", 0), 5)
    s = Setup(cluster, max_wait=200)
    s.assign([("t", 0), ("t", 2)])
    s.run_until(lambda: len(s.records()) == 5)
    s.driver.run(1000)
    bodies = [b for n, v, b in s.fetch_bodies() if n == 1]
    first, second = bodies[0], bodies[1]
    assert first["session_epoch"] == 0 and first["session_id"] == 0
    assert len(first["topics"][0]["partitions"]) == 2
    assert second["session_id"] != 0 and second["session_epoch"] == 1
    # only ("t", 0) moved: the incremental request names only it
    assert [p["partition"] for t in second["topics"] for p in t["partitions"]] == [0]
    assert [b["session_epoch"] for b in bodies[2:5]] == [2, 3, 4]
    assert all(b["topics"] == [] for b in bodies[2:5])  # nothing changed: nothing listed
    fill(cluster, ("t", 2), 3)
    s.run_until(lambda: len(s.records()) == 8)


def test_paused_partition_is_forgotten_and_resumed(cluster):
    s = Setup(cluster, max_wait=100)
    s.assign([("t", 0), ("t", 2)])
    s.driver.run(500)
    s.subs.pause([("t", 2)])
    s.driver.run(300)
    bodies = [b for n, v, b in s.fetch_bodies() if n == 1]
    forgot = [b for b in bodies if b["forgotten_topics_data"]]
    assert forgot and forgot[0]["forgotten_topics_data"][0]["partitions"] == [2]
    fill(cluster, ("t", 2), 3)
    s.driver.run(500)
    assert s.records(("t", 2)) == []  # paused: not fetched
    s.subs.resume([("t", 2)])
    s.run_until(lambda: len(s.records(("t", 2))) == 3)


@pytest.mark.parametrize("code", [E.FETCH_SESSION_ID_NOT_FOUND, E.INVALID_FETCH_SESSION_EPOCH])
def test_session_errors_fall_back_to_full_fetch(cluster, code):
    s = Setup(cluster, max_wait=100)
    s.assign([("t", 0), ("t", 2)])
    s.driver.run(500)
    cluster.inject("Fetch", code)
    n = len(s.fetch_bodies())
    s.driver.run(500)
    after = [b for nd, v, b in s.fetch_bodies()[n:] if nd == 1]
    assert after[1]["session_epoch"] == 0 and len(after[1]["topics"][0]["partitions"]) == 2
    fill(cluster, ("t", 0), 4)
    s.run_until(lambda: len(s.records()) == 4)


def test_network_error_restarts_session(cluster):
    s = Setup(cluster, max_wait=100)
    s.assign([("t", 0)])
    s.driver.run(400)
    cluster.inject("Fetch", KafkaConnectionError("cut"))
    n = len(s.fetch_bodies())
    s.driver.run(400)
    after = [b for nd, v, b in s.fetch_bodies()[n:] if nd == 1]
    assert after[1]["session_epoch"] == 0


def test_session_unit():
    fs = FetchSession(1)
    a, b = ("t", 0), ("t", 1)
    send, forget, sid, ep = fs.build({a: (0,), b: (0,)}, topic_ids=True, sessions=True)
    assert (sid, ep, set(send), forget) == (0, 0, {a, b}, [])
    assert fs.on_response(0, 77)
    send, forget, sid, ep = fs.build({a: (5,)}, topic_ids=True, sessions=True)
    assert (sid, ep, send, forget) == (77, 1, {a: (5,)}, [b])
    fs.on_response(0, 77)
    send, forget, sid, ep = fs.build({a: (5,)}, topic_ids=False, sessions=True)
    assert ep == 0 and send == {a: (5,)}  # switching to names starts over
    fs.on_response(E.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert fs.session_id == 0 and fs.epoch == 0
    # broker without sessions (answers session id 0): full fetches every time
    fs2 = FetchSession(2)
    fs2.build({a: (0,)}, topic_ids=True, sessions=True)
    fs2.on_response(0, 0)
    assert fs2.build({a: (1,)}, topic_ids=True, sessions=True)[3] == 0


@pytest.mark.parametrize("version,expect_ids", [(12, False), (13, True), (18, True)])
def test_topic_ids_from_v13(cluster, version, expect_ids):
    cluster.versions["Fetch"] = version
    fill(cluster, ("t", 0), 3)
    s = Setup(cluster)
    s.assign([("t", 0)])
    s.run_until(lambda: len(s.records()) == 3)
    n, v, body = s.fetch_bodies()[0]
    assert v == version
    t = body["topics"][0]
    if expect_ids:
        assert t["topic_id"] == cluster.topic_ids["t"]
    else:
        assert t["topic"] == "t"


def test_topic_without_id_caps_fetch_at_v12(cluster):
    cluster.create_topic("old", 1, with_id=False)
    fill(cluster, ("old", 0), 2)
    s = Setup(cluster)
    s.assign([("old", 0)])
    s.run_until(lambda: len(s.records()) == 2)
    assert s.fetch_bodies()[0][1] == 12


def test_sessionless_old_fetch_versions(cluster):
    cluster.versions["Fetch"] = 6
    fill(cluster, ("t", 0), 3)
    s = Setup(cluster)
    s.assign([("t", 0)])
    s.run_until(lambda: len(s.records()) == 3)


# --- budget ----------------------------------------------------------------------------------

def test_buffer_budget_stops_and_resumes_fetching(cluster):
    for _ in range(20):
        cluster.append(("t", 0), [b"x"])
    s = Setup(cluster, budget=16, max_partition_fetch_bytes=1)
    s.assign([("t", 0)])
    s.driver.run(1000)
    got = len(s.records())
    assert 0 < got < 20
    assert s.fetcher.starved and s.fetcher.buffer.buffered_total >= 16
    n = len(s.fetch_bodies())
    s.driver.run(1000)
    assert len(s.fetch_bodies()) == n  # nothing fetched while the budget is used up
    s.hand_back()
    s.run_until(lambda: len(s.records()) > got)


def test_request_asks_only_for_free_bytes(cluster):
    s = Setup(cluster, budget=4000, fetch_max_bytes=10**6)
    s.assign([("t", 0)])
    s.fetcher.buffer.buffered[("t", 0)] = 2700
    s.fetcher.buffer.buffered_total = 2700
    s.driver.run(50)
    # 4000 - 2700 raw - 1000 kept for decoded pieces (a quarter of the budget): less than the
    # answer it would ask for otherwise (a quarter of the budget, fetch_answer_bytes)
    assert s.fetcher.buffer.decode_ahead_bytes == 1000 and s.fetcher.answer_bytes == 1000
    assert s.fetch_bodies()[0][2]["max_bytes"] == 300


# --- per-partition errors ----------------------------------------------------------------------

def test_offset_out_of_range_resets_by_policy(cluster):
    fill(cluster, ("t", 0), 10)
    cluster.log_start[("t", 0)] = 5
    cluster.logs[("t", 0)] = [b for b in cluster.logs[("t", 0)] if b.base_offset >= 5]
    s = Setup(cluster, reset="earliest")
    s.assign([("t", 0)], start=2)
    s.run_until(lambda: s.offsets() and s.offsets()[-1] == 9)
    assert s.offsets() == list(range(5, 10))


def test_offset_out_of_range_with_reset_error_reports(cluster):
    s = Setup(cluster, reset="error")
    s.assign([("t", 0)], start=50)
    s.driver.run(500)
    errs = s.fetcher.drain_actions()
    assert errs and errs[0].error.name == "OFFSET_OUT_OF_RANGE"
    assert s.subs.state(("t", 0)).state is FetchState.AWAIT_RESET and s.subs.state(("t", 0)).blocked


def test_not_leader_refreshes_metadata_and_follows_the_leader(cluster):
    fill(cluster, ("t", 0), 4)
    s = Setup(cluster)
    s.assign([("t", 0)])
    s.run_until(lambda: len(s.records()) == 4)
    cluster.leaders[("t", 0)] = 2  # moved; the client's metadata still says node 1
    cluster.leader_epochs[("t", 0)] = 1
    fill(cluster, ("t", 0), 4)
    s.run_until(lambda: len(s.records()) == 8)
    assert s.refresher.refreshes >= 1
    assert any(n == 2 and b["topics"] for n, v, b in s.fetch_bodies())


# --- positions -------------------------------------------------------------------------------

@pytest.mark.parametrize("reset,expected", [("earliest", 0), ("latest", 7)])
def test_reset_strategies(cluster, reset, expected):
    fill(cluster, ("t", 1), 7)
    s = Setup(cluster, reset=reset)
    s.assign([("t", 1)])
    s.run_until(lambda: s.subs.state(("t", 1)).state is FetchState.FETCHING)
    assert s.subs.position(("t", 1)).offset == expected
    body = next(b for _, n, api, v, b in cluster.log if api == "ListOffsets")
    assert body["topics"][0]["partitions"][0]["timestamp"] == (-2 if reset == "earliest" else -1)
    assert body["isolation_level"] == 1


def test_reset_error_raises_no_offset(cluster):
    s = Setup(cluster, reset="error")
    s.subs.assign_manual([("t", 0)])
    s.positions.reset_initializing()
    acts = s.positions.drain_actions()
    from kwire.errors import NoOffsetForPartitionError
    assert isinstance(acts[0].error, NoOffsetForPartitionError)
    s.driver.run(300)
    assert not [x for x in cluster.log if x[2] == "ListOffsets"]
    s.subs.seek(("t", 0), 0)  # the application decides
    assert s.subs.state(("t", 0)).state is FetchState.FETCHING


def test_leader_change_triggers_validation_no_truncation(cluster):
    tp = ("t", 0)
    fill(cluster, tp, 5)
    s = Setup(cluster)
    s.assign([tp])
    s.run_until(lambda: len(s.records()) == 5)
    assert s.subs.position(tp) == Position(5, 0, 0)
    cluster.epoch_ends[tp][0] = 5
    cluster.leader_epochs[tp] = 1
    s.md.request_update()
    s.run_until(lambda: any(x[2] == "OffsetForLeaderEpoch" for x in cluster.log))
    s.run_until(lambda: s.subs.state(tp).state is FetchState.FETCHING)
    assert s.subs.position(tp).offset == 5 and s.subs.position(tp).current_leader_epoch == 1


def test_truncation_detected_resumes_at_divergence(cluster):
    tp = ("t", 0)
    fill(cluster, tp, 10)
    s = Setup(cluster)
    s.assign([tp])
    s.run_until(lambda: len(s.records()) == 10)
    # the new leader only had epoch 0 up to offset 7; it truncated 7..9 and wrote anew
    cluster.epoch_ends[tp][0] = 7
    cluster.logs[tp] = [b for b in cluster.logs[tp] if b.last_offset < 7]
    cluster.leader_epochs[tp] = 1
    cluster.logs[tp][-1] = FBatch(5, 6, [FRecord(5, b"v5"), FRecord(6, b"v6")])
    cluster.append(tp, [b"new7", b"new8"], epoch=1)
    s.md.request_update()
    s.run_until(lambda: any(r.value == b"new8" for r in s.records()))
    assert [r.value for r in s.records()][-2:] == [b"new7", b"new8"]


def test_truncation_with_reset_error_reports_log_truncation(cluster):
    tp = ("t", 0)
    fill(cluster, tp, 10)
    s = Setup(cluster, reset="error")
    s.subs.assign_manual([tp])
    s.subs.seek(tp, 0)
    s.run_until(lambda: len(s.records()) == 10)
    cluster.epoch_ends[tp][0] = 7
    cluster.leader_epochs[tp] = 1
    s.md.request_update()
    s.run_until(lambda: s.subs.state(tp).blocked)
    errs = [a.error for a in s.positions.drain_actions() if isinstance(a, ErrorAction)]
    assert isinstance(errs[0], LogTruncationError) and errs[0].divergent_offset == 7


def test_validation_skipped_when_broker_lacks_the_api(cluster):
    tp = ("t", 0)
    cluster.unsupported.add("OffsetForLeaderEpoch")
    s = Setup(cluster)
    s.subs.assign_manual([tp])
    s.subs.seek(tp, 0, leader_epoch=3)
    s.run_until(lambda: s.subs.state(tp).state is FetchState.FETCHING)
    assert not s.positions.validation_supported


def test_list_offsets_query(cluster):
    fill(cluster, ("t", 1), 4)
    for b in cluster.logs[("t", 1)]:
        for r in b.records:
            r.timestamp = 1000 + r.offset * 10
    s = Setup(cluster)
    s.positions.list_offsets({("t", 1): 1015, ("t", 3): -1}, s.driver.clock.now_ms, token="q")
    s.run_until(lambda: s.positions._queries == [])
    res = [a for a in s.positions.drain_actions() if isinstance(a, ListOffsetsResult)][0]
    assert res.token == "q" and res.offsets[("t", 1)][0] == 2 and res.offsets[("t", 3)][0] == 0
    assert res.errors == {}


@pytest.mark.parametrize("zero_quirk", [False, True])
def test_list_offsets_query_without_a_match_is_minus_one(cluster, zero_quirk):
    # Kafka answers offset -1 / timestamp -1; Tansu 0.6 answers offset 0 / timestamp -1.
    fill(cluster, ("t", 1), 4)
    for b in cluster.logs[("t", 1)]:
        for r in b.records:
            r.timestamp = 1000 + r.offset * 10
    cluster.no_match_answers_zero = zero_quirk
    s = Setup(cluster)
    s.positions.list_offsets({("t", 1): 999_999}, s.driver.clock.now_ms, token="q")
    s.run_until(lambda: s.positions._queries == [])
    res = [a for a in s.positions.drain_actions() if isinstance(a, ListOffsetsResult)][0]
    assert res.offsets[("t", 1)][0] == -1


def test_list_offsets_query_times_out_without_leader(cluster):
    s = Setup(cluster)
    s.positions.list_offsets({("nope", 0): -1}, s.driver.clock.now_ms, token=1, timeout_ms=300)
    s.run_until(lambda: s.positions._queries == [], 2000)
    res = [a for a in s.positions.drain_actions() if isinstance(a, ListOffsetsResult)][0]
    from kwire.errors import KafkaTimeoutError
    assert isinstance(res.errors[("nope", 0)], KafkaTimeoutError)


def test_seek_during_fetch_discards_stale_data(cluster):
    tp = ("t", 0)
    fill(cluster, tp, 10)
    s = Setup(cluster, max_wait=0)
    s.assign([tp], start=0)
    s.driver.step()  # fetch from 0 is in flight
    fence = s.subs.state(tp).fence
    s.subs.seek(tp, 8)
    assert s.subs.state(tp).fence > fence
    s.run_until(lambda: s.subs.position(tp).offset == 10)
    assert s.offsets(tp) == [8, 9]


def test_answers_for_a_position_left_behind_leave_a_seek_alone(cluster):
    """OFFSET_OUT_OF_RANGE resets only a partition still at the offset the Fetch was sent for
    (as Kafka's Java consumer); a reset's ListOffsets answered after a seek() changes nothing
    either.  Neither leaves the partition without a position."""
    tp = ("t", 0)
    fill(cluster, tp, 10)
    s = Setup(cluster, max_wait=0)
    s.assign([tp], start=50)  # past the end
    s.driver.step()           # the Fetch from 50 went out; OFFSET_OUT_OF_RANGE is on its way
    s.subs.seek(tp, 3)
    s.run_until(lambda: s.subs.position(tp).offset == 10)
    assert s.offsets(tp) == list(range(3, 10))
    assert not [e for e in cluster.log if e[2] == "ListOffsets"]
    s.chunks.clear()
    s.subs.request_reset(tp)  # (earliest)
    s.driver.step()           # its ListOffsets went out; offset 0 is on its way
    s.subs.seek(tp, 6)
    s.run_until(lambda: s.subs.position(tp).offset == 10)
    assert s.offsets(tp) == [6, 7, 8, 9]
    assert [e for e in cluster.log if e[2] == "ListOffsets"]


# --- the header scan against real record sets ----------------------------------------------------

def _batch(base, n, **kw):
    from kwire import records
    return records.build_batch([(None, b"v%d" % i, None, 1000 + i) for i in range(n)],
                               base_offset=base, **kw)


def test_scan_record_set_real_batches():
    from kwire.consumer.fetcher import scan_record_set

    def last(data):
        spans = scan_record_set(data)
        return (spans[-1].last_offset, spans[-1].leader_epoch) if spans else (None, None)
    data = _batch(0, 3, partition_leader_epoch=4) + _batch(3, 5, partition_leader_epoch=7)
    assert last(data) == (7, 7)
    assert last(memoryview(data)) == (7, 7)
    assert last(data[:-1]) == (2, 4)  # the partial tail is ignored
    assert last(data[:10]) == (None, None)
    assert last(b"") == (None, None)
    damaged = data + b"\0" * 8 + b"\0\0\0\x01" + b"\0" * 20  # size 1: no entry is that small
    assert last(damaged) == (7, 7)  # up to the damage: the decoding reports it
    with pytest.raises(CorruptRecordError):
        scan_record_set(damaged, until_damage=False)


def test_scan_matches_decode_for_compressed_and_control_batches():
    from kwire.consumer.fetcher import decode_records, scan_record_set
    data = (_batch(0, 4, compression="zstd") + _batch(4, 1, is_control=True, is_transactional=True)
            + _batch(5, 2, compression="gzip"))
    assert scan_record_set(data)[-1].last_offset == 6
    recs = decode_records(RL.iter_records, data, 2, topic="t", partition=0, aborted=None,
                          read_committed=True, check_crc=True)
    assert [r.offset for r in recs] == [2, 3, 5, 6]


def test_corrupt_record_set_rewinds_and_reports(cluster):
    from kwire.consumer.fetcher import FetchedChunk
    s = Setup(cluster)
    tp = ("t", 0)
    s.assign([tp], start=10)
    st = s.subs.state(tp)
    s.subs.advance(tp, 20, None)
    chunk = FetchedChunk(tp, None, st.fence, 8, 20, -1, data=b"\x00" * 8, fetch_offset=10)

    def boom(*a, **k):
        from kwire.errors import CorruptRecordError
        raise CorruptRecordError("bad crc")
    s.decoder._iter_records = boom
    assert s.decoder.decode(chunk) is None
    assert s.subs.position(tp).offset == 10
    [action] = s.decoder.actions
    assert isinstance(action.error, CorruptRecordError) and action.partitions == [tp]
