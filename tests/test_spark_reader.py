"""The Spark source's executor-side reader against a scripted broker (no Spark).

A fake partition log answers Metadata, Fetch and ListOffsets over TCP, so the whole path runs:
NetworkClient, Fetch encoding, batch-header walking, aborted-transaction filtering, the row and
Arrow outputs.  Record sets are hand-built v2 batches, which can carry the gaps compaction
leaves (offset deltas that skip) and control batches.
"""
from __future__ import annotations

import struct
import uuid

import pyarrow as pa
import pytest
from crc32c import crc32c

from kwire import records
from kwire.errors import KafkaTimeoutError
from kwire.spark import reader as R
from kwire.spark.arrow import kafka_arrow_schema, to_record_batch
from kwire.spark.planner import DataLossError
from tests.fake_broker import FakeBroker, api_versions_ok, frame

TOPIC = "t"
TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
ZERO = uuid.UUID(int=0)
API_KEYS = [{"api_key": 18, "min_version": 0, "max_version": 3},
            {"api_key": 3, "min_version": 0, "max_version": 12},
            {"api_key": 1, "min_version": 4, "max_version": 17},
            {"api_key": 2, "min_version": 1, "max_version": 9}]


# --- hand-built record batches ------------------------------------------------------------------

def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _bytes(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def batch(base: int, deltas, *, last_delta=None, values=None, ts=1_700_000_000_000, pid=-1,
          transactional=False, control=None, headers=()) -> bytes:
    """A v2 batch with records at ``base + delta``; ``control`` = 0 abort / 1 commit marker."""
    recs = bytearray()
    for i, d in enumerate(deltas):
        if control is not None:
            key, value = struct.pack(">hh", 0, control), struct.pack(">hi", 0, 0)
        else:
            key = b"k%d" % (base + d)
            value = values[i] if values else b"v%d" % (base + d)
        body = (b"\x00" + _varint(i) + _varint(d) + _bytes(key) + _bytes(value) + _varint(len(headers))
                + b"".join(_bytes(k.encode()) + _bytes(v) for k, v in headers))
        recs += _varint(len(body)) + body
    attrs = (0x10 if transactional or control is not None else 0) | (0x20 if control is not None else 0)
    last = deltas[-1] if last_delta is None else last_delta
    after_crc = struct.pack(">hiqqqhii", attrs, last, ts, ts + last, pid, 0 if pid >= 0 else -1, -1,
                            len(deltas)) + bytes(recs)
    crc = crc32c(after_crc)
    head = struct.pack(">qiibI", base, 4 + 1 + 4 + len(after_crc), 0, 2, crc)
    return head + after_crc


class FakeLog:
    """One partition of topic "t" served by a FakeBroker."""

    def __init__(self, batches, *, log_start=0, hw=None, aborted=(), topic_id=TOPIC_ID, cut=False):
        self.batches = [(records.scan_spans(b)[0], b) for b in batches]
        self.log_start = log_start
        self.hw = hw if hw is not None else (self.batches[-1][0].last_offset + 1 if batches else 0)
        self.aborted = list(aborted)
        self.topic_id = topic_id
        self.cut = cut  # cut answers at partition_max_bytes, as brokers before KIP-74 did
        self.errors: list[int] = []  # error codes for the next Fetch answers
        self.starve = False  # answer Fetch with no records at all
        self.fetches: list[tuple[int, int, int]] = []  # (version, fetch_offset, partition_max_bytes)
        self.broker = FakeBroker(self.handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.broker.close()

    def settings(self, **kw):
        kafka = {"bootstrap.servers": self.broker.bootstrap, "retry.backoff.ms": 5,
                 **kw.pop("kafka", {})}
        return R.ReadSettings(kafka, **kw)

    def handle(self, key, version, cid, body):
        if key == 18:
            return api_versions_ok(version, cid, API_KEYS)
        if key == 3:
            return frame("Metadata", version, cid, {
                "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.broker.port}],
                "cluster_id": "fake", "controller_id": 1,
                "topics": [{"error_code": 0, "name": TOPIC, "topic_id": self.topic_id, "partitions": [
                    {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                     "replica_nodes": [1], "isr_nodes": [1]}]}]})
        if key == 2:
            parts = []
            for t in body["topics"]:
                for p in t["partitions"]:
                    off = self.log_start if p["timestamp"] == -2 else self.hw
                    parts.append({"partition_index": p["partition_index"], "error_code": 0,
                                  "timestamp": -1, "offset": off})
            return frame("ListOffsets", version, cid, {"topics": [{"name": TOPIC, "partitions": parts}]})
        if key == 1:
            req = body["topics"][0]
            if version >= 13:
                assert req["topic_id"] == self.topic_id
            p = req["partitions"][0]
            pos, pmb = p["fetch_offset"], p["partition_max_bytes"]
            self.fetches.append((version, pos, pmb))
            code, data = 0, b""
            if self.errors:
                code = self.errors.pop(0)
            elif pos < self.log_start or pos > self.hw:
                code = 1
            elif not self.starve:
                data = b"".join(b for s, b in self.batches if s.last_offset >= pos and s.base_offset < self.hw)
                if self.cut:
                    data = data[:pmb]
            pd = {"partition_index": 0, "error_code": code, "high_watermark": self.hw,
                  "last_stable_offset": self.hw, "log_start_offset": self.log_start,
                  "aborted_transactions": self.aborted, "preferred_read_replica": -1, "records": data}
            return frame("Fetch", version, cid, {"responses": [
                {"topic": TOPIC, "topic_id": self.topic_id, "partitions": [pd]}]})
        return None


def rows(settings, rng):
    return [(r.offset, r.value) for r in R.read_range_rows(settings, (TOPIC,) + rng)]


def arrow_rows(settings, rng):
    batches = list(R.read_range_arrow(settings, (TOPIC,) + rng))
    if not batches:
        return []
    t = pa.Table.from_batches(batches)
    return list(zip(t.column("offset").to_pylist(), t.column("value").to_pylist()))


@pytest.fixture(autouse=True)
def _fresh_cache():
    R.close_cached_clients()
    yield
    R.close_cached_clients()


# --- batch headers ------------------------------------------------------------------------------

def test_scan_spans_reads_headers_and_stops_at_a_truncated_tail():
    data = batch(0, [0, 1, 2]) + batch(3, [0], control=1, pid=9) + batch(10, [0, 5])
    spans = records.scan_spans(data + data[:30])
    assert [(s.base_offset, s.last_offset, s.is_control, s.is_transactional) for s in spans] == \
        [(0, 2, False, False), (3, 3, True, True), (10, 15, False, False)]
    assert spans[-1].end == len(data)
    assert records.scan_spans(b"") == []


def test_aborted_spans_follow_the_markers():
    spans = records.scan_spans(
        batch(0, [0, 1], pid=1, transactional=True)      # 0 aborted
        + batch(2, [0], pid=2, transactional=True)       # 1 committed (other producer)
        + batch(3, [0], pid=1, control=0)                # 2 abort marker of pid 1
        + batch(4, [0], pid=1, transactional=True)       # 3 pid 1's next transaction: committed
        + batch(5, [0], pid=1, control=1)                # 4
        + batch(6, [0]))                                 # 5 not transactional
    assert records.aborted_spans(spans, [{"producer_id": 1, "first_offset": 0}]) == {0}
    assert records.aborted_spans(spans, []) == set()
    assert records.record_runs(spans, {0}, 0, 100) == [(spans[1].start, spans[5].end)]
    assert records.record_runs(spans, set(), 4, 6) == [(spans[3].start, spans[4].end)]


# --- reading ranges -----------------------------------------------------------------------------

def test_rows_and_arrow_agree_and_cut_the_range_exactly():
    with FakeLog([batch(0, [0, 1, 2, 3]), batch(4, [0, 1, 2]), batch(7, [0, 1, 2])]) as log:
        s = log.settings()
        assert rows(s, (0, 0, 10)) == [(i, b"v%d" % i) for i in range(10)]
        assert rows(s, (0, 2, 8)) == [(i, b"v%d" % i) for i in range(2, 8)]
        assert arrow_rows(s, (0, 2, 8)) == rows(s, (0, 2, 8))
        assert rows(s, (0, 5, 5)) == []
        assert log.fetches[0][0] == 17  # topic ids known: the newest Fetch


def test_one_fetch_per_chunk_and_no_pauses(monkeypatch):
    monkeypatch.setattr(R.time, "sleep", lambda s: pytest.fail(f"the reader paused {s} s without a failure"))
    batches = [batch(10 * i, list(range(10))) for i in range(4)]
    with FakeLog(batches, cut=True) as log:
        s = log.settings(kafka={"max.partition.fetch.bytes": len(batches[0]) + 20})
        assert [o for o, _ in rows(s, (0, 0, 40))] == list(range(40))
        assert [pos for _, pos, _ in log.fetches] == [0, 10, 20, 30]
        assert [o for o, _ in arrow_rows(s, (0, 5, 35))] == list(range(5, 35))


def test_without_topic_ids_fetch_stays_below_v13():
    with FakeLog([batch(0, [0, 1])], topic_id=ZERO) as log:
        assert rows(log.settings(), (0, 0, 2)) == [(0, b"v0"), (1, b"v1")]
        assert log.fetches[0][0] == 12


def test_a_read_asks_for_4_mib_unless_told():
    with FakeLog([batch(0, [0, 1])]) as log:
        assert rows(log.settings(), (0, 0, 2)) == [(0, b"v0"), (1, b"v1")]
        assert rows(log.settings(kafka={"max.partition.fetch.bytes": 70_000}), (0, 0, 2)) == [(0, b"v0"), (1, b"v1")]
        assert [pmb for _, _, pmb in log.fetches] == [R.READ_FETCH_BYTES, 70_000] and R.READ_FETCH_BYTES == 4 << 20


def test_compaction_gaps_end_the_range_at_until():
    # offsets 2, 3, 5, 6 were compacted away; 7..9 are gone as whole batches
    log_batches = [batch(0, [0, 1, 4], last_delta=6), batch(10, [0, 2])]
    with FakeLog(log_batches) as log:
        s = log.settings()
        assert rows(s, (0, 0, 7)) == [(0, b"v0"), (1, b"v1"), (4, b"v4")]
        assert rows(s, (0, 2, 10)) == [(4, b"v4")]
        assert rows(s, (0, 5, 7)) == []
        assert rows(s, (0, 5, 12)) == [(10, b"v10")]
        assert arrow_rows(s, (0, 0, 13)) == [(0, b"v0"), (1, b"v1"), (4, b"v4"), (10, b"v10"), (12, b"v12")]


def test_transaction_markers_and_aborted_records():
    log_batches = [batch(0, [0, 1, 2], pid=1, transactional=True), batch(3, [0], pid=1, control=0),
                   batch(4, [0, 1], pid=1, transactional=True), batch(6, [0], pid=1, control=1),
                   batch(7, [0])]
    with FakeLog(log_batches, aborted=[{"producer_id": 1, "first_offset": 0}]) as log:
        committed = log.settings()
        assert rows(committed, (0, 0, 8)) == [(4, b"v4"), (5, b"v5"), (7, b"v7")]
        assert arrow_rows(committed, (0, 0, 8)) == [(4, b"v4"), (5, b"v5"), (7, b"v7")]
        assert rows(committed, (0, 3, 4)) == []  # only a marker: the range still ends
        assert rows(committed, (0, 0, 7)) == [(4, b"v4"), (5, b"v5")]
        uncommitted = log.settings(kafka={"isolation.level": "read_uncommitted"})
        assert [o for o, _ in rows(uncommitted, (0, 0, 8))] == [0, 1, 2, 4, 5, 7]


def test_offsets_below_the_log_start_are_data_loss():
    with FakeLog([batch(5, [0, 1, 2])], log_start=5) as log:
        with pytest.raises(DataLossError, match=r"offsets 2\.\.4 are gone; the log starts at 5"):
            rows(log.settings(), (0, 2, 8))
        assert rows(log.settings(fail_on_data_loss=False), (0, 2, 8)) == [(5, b"v5"), (6, b"v6"), (7, b"v7")]
        assert rows(log.settings(fail_on_data_loss=False), (0, 0, 3)) == []


def test_a_log_that_ends_before_until_is_data_loss():
    with FakeLog([batch(0, [0, 1, 2])]) as log:
        with pytest.raises(DataLossError, match=r"offsets 3\.\.9 .*log ends at 3"):
            rows(log.settings(), (0, 0, 10))
        assert [o for o, _ in rows(log.settings(fail_on_data_loss=False), (0, 0, 10))] == [0, 1, 2]


def test_leader_errors_refresh_and_retry():
    with FakeLog([batch(0, [0, 1])]) as log:
        log.errors = [6, 74]  # NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH
        assert rows(log.settings(), (0, 0, 2)) == [(0, b"v0"), (1, b"v1")]
        assert len(log.fetches) == 3


def test_fatal_fetch_errors_raise():
    with FakeLog([batch(0, [0, 1])]) as log:
        log.errors = [29]  # TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
            rows(log.settings(), (0, 0, 2))


def test_a_batch_larger_than_the_fetch_size_grows_the_fetch():
    big = [batch(0, list(range(20)), values=[b"x" * 50] * 20)]
    with FakeLog(big, cut=True) as log:
        got = rows(log.settings(kafka={"max.partition.fetch.bytes": 64}), (0, 0, 20))
        assert [o for o, _ in got] == list(range(20))
        assert [pmb for _, _, pmb in log.fetches][:3] == [64, 128, 256]


def test_no_records_within_the_poll_timeout_is_a_timeout():
    with FakeLog([batch(0, [0, 1])]) as log:
        log.starve = True
        with pytest.raises(KafkaTimeoutError, match="kafkaConsumer.pollTimeoutMs=200"):
            rows(log.settings(poll_timeout_ms=200, kafka={"fetch.wait.max.ms": 10}), (0, 0, 2))


def test_connections_are_cached_between_ranges():
    with FakeLog([batch(0, [0, 1, 2, 3])]) as log:
        s = log.settings()
        rows(s, (0, 0, 2))
        before = log.broker.connections
        (client, _), = R._idle[R._cache_key(s.kafka)]
        rows(s, (0, 2, 4))
        assert log.broker.connections == before
        assert R._idle[R._cache_key(s.kafka)][0][0] is client
        R.close_cached_clients()
        assert not R._idle


def test_a_cached_client_keeps_no_receive_buffers():
    """Fetch answers of 200 KB are filled into recycled buffers while a range is read; the
    connection cache frees them when it takes the client back."""
    big = [batch(i * 100, range(100), values=[b"x" * 2000] * 100) for i in range(6)]
    with FakeLog(big, cut=True) as log:
        s = log.settings(kafka={"max.partition.fetch.bytes": 210_000})
        assert [o for o, _ in arrow_rows(s, (0, 0, 600))] == list(range(600))
        (client, _), = R._idle[R._cache_key(s.kafka)]
        readers = [c.reader for c in client._conns.values()]
        assert sum(r.recycled for r in readers) >= 1
        assert all(r.spare_bytes == 0 for r in readers)


def test_headers_in_rows_and_arrow():
    with FakeLog([batch(0, [0, 1], headers=[("a", b"1"), ("b", None)])]) as log:
        s = log.settings(include_headers=True)
        got = list(R.read_range_rows(s, (TOPIC, 0, 0, 2)))
        assert got[0].headers == [("a", b"1"), ("b", None)]
        t = pa.Table.from_batches(list(R.read_range_arrow(s, (TOPIC, 0, 0, 2))))
        assert t.column("headers").to_pylist()[1] == [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]
        assert t.schema == kafka_arrow_schema(True)


# --- Arrow conversion -----------------------------------------------------------------------------

def test_arrow_schema_is_what_pyspark_expects():
    from pyspark.sql.pandas.types import to_arrow_schema

    from kwire.spark.schema import kafka_schema

    for headers in (False, True):
        assert kafka_arrow_schema(headers).equals(to_arrow_schema(kafka_schema(headers), timezone="UTC"))


def test_to_record_batch_nulls_and_slicing():
    from kwire.records import build_batch, decode_columns

    recs = [(None if i == 1 else b"k%d" % i, None if i == 2 else b"v%d" % i, [("h", b"%d" % i)] if i % 2 else [],
             1_000 + i) for i in range(5)]
    cols = decode_columns(build_batch(recs, 100))
    b = to_record_batch(cols, "t", 3, 101, 104, kafka_arrow_schema(True))
    assert b.num_rows == 3
    d = b.to_pydict()
    assert d["offset"] == [101, 102, 103] and d["key"] == [None, b"k2", b"k3"]
    assert d["value"] == [b"v1", None, b"v3"] and d["topic"] == ["t"] * 3 and d["partition"] == [3] * 3
    assert [ts.timestamp() for ts in d["timestamp"]] == [1.001, 1.002, 1.003]
    assert d["headers"] == [[{"key": "h", "value": b"1"}], [], [{"key": "h", "value": b"3"}]]
    assert to_record_batch(cols, "t", 3, 200, 300, kafka_arrow_schema()) is None


def test_arrow_batch_layout_cuts_to_its_limits_and_casts_only_what_differs():
    """ArrowBatchLayout.cut (a fused mapInArrow's batches): slices of at most max_records
    records and about max_bytes bytes, every record once and in order, cast to its schema."""

    from kwire.spark.arrow import ArrowBatchLayout

    schema = kafka_arrow_schema()
    values = [b"x" * (i % 50) for i in range(1000)]
    batch = pa.RecordBatch.from_pydict({
        "key": [None] * 1000, "value": values, "topic": ["t"] * 1000, "partition": [0] * 1000,
        "offset": list(range(1000)), "timestamp": [0] * 1000, "timestampType": [0] * 1000}, schema=schema)
    target = pa.schema([f.with_type(pa.timestamp("us", tz="Asia/Tokyo")) if f.name == "timestamp" else f
                        for f in schema])
    for max_records, max_bytes in ((None, None), (97, None), (None, batch.nbytes // 7), (300, 1000)):
        out = list(ArrowBatchLayout(target, max_records, max_bytes).cut(iter([batch, batch.slice(0, 5)])))
        assert all(b.schema == target for b in out)
        assert [o for b in out for o in b.column("offset").to_pylist()] == list(range(1000)) + list(range(5))
        assert [v for b in out for v in b.column("value").to_pylist()] == values + values[:5]
        if max_records:
            assert max(b.num_rows for b in out) <= max_records
        if max_bytes:
            assert len(out) >= batch.nbytes // max_bytes
        if max_records is None and max_bytes is None:
            assert [b.num_rows for b in out] == [1000, 5]
    same = list(ArrowBatchLayout(schema, None, None).cut(iter([batch])))
    assert same[0] is batch  # nothing to cast or cut: the batch itself


@pytest.mark.parametrize("ddl", [
    "key binary, n long, total long", "a bigint,b INT , c smallint, d tinyint", "x double, y float, z real",
    "flag boolean, s string, raw binary", "a_1 integer, B2 short, c byte"])
def test_plain_ddl_is_read_as_sparks_parser_reads_it(spark, ddl):
    """plain_ddl_struct (a fused mapInArrow's schema without Spark's parser) gives Spark's
    StructType for plain columns, and None for anything it does not read itself."""
    from pyspark.sql.types import StructType

    from kwire.spark.frame import plain_ddl_struct

    assert plain_ddl_struct(ddl) == StructType.fromDDL(ddl)


@pytest.mark.parametrize("ddl", [
    "", "a long,", "a array<int>", "`a b` long", "a decimal(10,2)", "a long not null", "a long comment 'x'",
    "a timestamp", "a map<string,int>", "a long, A string", "a struct<b: int>", "1a long"])
def test_other_ddl_is_left_to_sparks_parser(ddl):
    from kwire.spark.frame import plain_ddl_struct

    assert plain_ddl_struct(ddl) is None
