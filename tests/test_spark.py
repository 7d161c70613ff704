"""Kafka into PySpark through kwire: local[2] Spark against Tansu.

One SparkSession for the run (the ``spark`` fixture); topics are small.  Test data is written
with confluent-kafka, so what Spark reads was not produced by kwire.

The data-loss tests (recreated topics, truncated logs, deleted records) run on Apache Kafka and
on Tansu (the ``peer`` fixture).  Tansu 0.6 supports DeleteTopics, CreateTopics of a deleted
name and topic ids in Metadata (a recreated topic gets a new id), but not DeleteRecords (it
closes the connection on the request), so the deleted-records case runs on Kafka only; and it
answers OffsetFetch without the commit metadata, so committed offsets cannot carry the topic's
id there (Kafka's behaviour: the metadata round-trips).  Both drop a deleted topic's committed
offsets.  Otherwise, where both ran, they behaved alike.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

import kwire.spark as ks
from kwire.embedded import TansuBroker, free_port
from kwire.errors import ConfigError, KafkaTimeoutError, KwireError, UnknownTopicOrPartitionError
from kwire.spark import dataframe as spark_df
from kwire.spark.offset_reader import OffsetReader, UnreachableClusterError

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.spark, pytest.mark.tansu]


# --- helpers ------------------------------------------------------------------------------------

def create(peer, topic: str, partitions: int) -> None:
    """Create ``topic`` and wait until Metadata shows it with leaders: Apache Kafka answers
    CreateTopics once the controller committed the topic, before brokers serve it."""
    admin = AdminClient({"bootstrap.servers": peer.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(10)
    from kwire.admin import Admin
    with Admin({"bootstrap.servers": peer.bootstrap}) as a:
        a.wait_for_topics([topic], timeout=10)


def produce(tansu, topic: str, records, **config) -> None:
    """``records``: (partition, key, value, headers) tuples, flushed in order."""
    p = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 2, **config})
    for partition, key, value, headers in records:
        p.produce(topic, key=key, value=value, partition=partition, headers=headers)
    assert p.flush(10) == 0


def fill(tansu, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    produce(tansu, topic, [(p, b"k%d" % i, b"%d-%d" % (p, i), None)
                           for i in range(start, start + per_partition) for p in range(partitions)])


def offsets_of(df) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r in df.select("partition", "offset").collect():
        out.setdefault(r.partition, []).append(r.offset)
    return {p: sorted(v) for p, v in sorted(out.items())}


def options(tansu, topic: str, **kw) -> dict:
    return {"kafka.bootstrap.servers": tansu.bootstrap, "subscribe": topic, **kw}


@pytest.fixture(scope="module")
def registered(spark):
    ks.register(spark)
    return spark


# --- what is read -------------------------------------------------------------------------------

def test_subscribe_pattern_and_assign_select_partitions(peer, unique_topic):
    create(peer, unique_topic + "-a", 2)
    create(peer, unique_topic + "-b", 1)
    boot = {"kafka.bootstrap.servers": peer.bootstrap}

    def partitions(**kw):
        with OffsetReader(ks.parse_options({**boot, **kw})) as r:
            return r.partitions()

    assert partitions(subscribePattern=unique_topic + "-.*") == \
        [(unique_topic + "-a", 0), (unique_topic + "-a", 1), (unique_topic + "-b", 0)]
    assert partitions(subscribePattern=unique_topic) == []  # a full match, as in Java
    assert partitions(assign='{"%s-a": [1]}' % unique_topic) == [(unique_topic + "-a", 1)]
    with pytest.raises(UnknownTopicOrPartitionError, match="-a-5 .topic has 2 partitions"):
        partitions(assign='{"%s-a": [5]}' % unique_topic)


@pytest.fixture(params=["kafka", "kafka39", "tansu"])
def any_kafka_peer(request):
    """Apache Kafka 4.3 and 3.9, and Tansu: the exact-records test runs on each."""
    return request.getfixturevalue(request.param)


# --- batch reads --------------------------------------------------------------------------------

@pytest.mark.parametrize("reader", ["datasource", "mapInArrow", "rows"])
def test_read_kafka_returns_exactly_the_records(spark, any_kafka_peer, unique_topic, reader):
    peer = any_kafka_peer
    create(peer, unique_topic, 3)
    expected = {}
    records = []
    for i in range(60):
        p = i % 3
        key = None if i % 10 == 0 else b"key-%d" % i
        value = None if i % 17 == 5 else b"value-%d" % i
        headers = [("n", b"%d" % i), ("empty", None)] if i % 2 else None
        records.append((p, key, value, headers))
        expected.setdefault(p, []).append((key, value, [("n", b"%d" % i), ("empty", None)] if i % 2 else []))
    produce(peer, unique_topic, records)

    t0 = time.time()
    df = ks.read_kafka(spark, reader=reader, **options(peer, unique_topic, includeHeaders="true"))
    assert df.schema == ks.kafka_schema(include_headers=True)
    rows = df.collect()
    got = {}
    for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
        assert r.topic == unique_topic and r.timestampType == 0
        assert abs(r.timestamp.timestamp() - t0) < 120
        headers = [(h.key, h.value) for h in r.headers]
        got.setdefault(r.partition, []).append((r.key, r.value, headers))
    assert got == expected
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in range(3) for o in range(20)]
    counts = {r.partition: r["count"] for r in df.groupBy("partition").count().collect()}
    assert counts == {0: 20, 1: 20, 2: 20}


def test_data_source_splits_ranges(registered, peer, unique_topic):
    spark = registered
    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 30)
    df = spark.read.format("kwire").options(**options(peer, unique_topic, minPartitions=5)).load()
    assert df.rdd.getNumPartitions() == 5
    assert offsets_of(df) == {0: list(range(30)), 1: list(range(30))}
    df = spark.read.format("kwire").options(**options(peer, unique_topic, maxRecordsPerPartition=7)).load()
    assert df.rdd.getNumPartitions() == 10  # ceil(30 / 7) = 5 per partition
    assert df.count() == 60


@pytest.fixture
def phases(peer):
    """A topic written in three phases A, B, C (10 records per partition each, offsets 0-9,
    10-19, 20-29), with the times T1 (between A and B) and T2 (between B and C)."""
    topic = f"t-phases-{time.time_ns()}"
    create(peer, topic, 2)
    times = []
    for phase in range(3):
        if phase:
            time.sleep(0.05)
            times.append(int(time.time() * 1000))
            time.sleep(0.05)
        fill(peer, topic, 2, 10, start=10 * phase)
    return topic, times[0], times[1]


def _ts(topic, t):
    return '{"%s": {"0": %d, "1": %d}}' % (topic, t, t)


@pytest.mark.parametrize("form, expected", [
    (lambda t, t1, t2: {"startingOffsets": '{"%s": {"0": 5, "1": -2}}' % t,
                        "endingOffsets": '{"%s": {"0": 15, "1": -1}}' % t},
     {0: range(5, 15), 1: range(0, 30)}),
    (lambda t, t1, t2: {"endingOffsets": '{"%s": {"0": 3}}' % t},  # unnamed partitions: latest
     {0: range(0, 3), 1: range(0, 30)}),
    (lambda t, t1, t2: {"startingOffsetsByTimestamp": _ts(t, t1), "endingOffsetsByTimestamp": _ts(t, t2)},
     {0: range(10, 20), 1: range(10, 20)}),
    (lambda t, t1, t2: {"startingTimestamp": t2}, {0: range(20, 30), 1: range(20, 30)}),
    (lambda t, t1, t2: {"startingOffsets": '{"%s": {"1": 25}}' % t, "endingTimestamp": t1},
     {0: range(0, 10), 1: []}),
    (lambda t, t1, t2: {"startingTimestamp": t2 + 3_600_000, "startingOffsetsByTimestampStrategy": "latest"},
     {}),
], ids=["offsets-json", "ending-json-default", "timestamps-json", "starting-timestamp",
        "start-after-end-skipped", "timestamp-strategy-latest"])
def test_starting_and_ending_offsets(spark, peer, phases, form, expected):
    topic, t1, t2 = phases
    kw = form(topic, t1, t2)
    if "startingOffsets" in kw and '"1": 25' in kw["startingOffsets"]:
        kw["failOnDataLoss"] = "false"  # t-1 would start at 25 but end at 10: skipped, not failed
    df = ks.read_kafka(spark, **options(peer, topic, **kw))
    assert offsets_of(df) == {p: list(r) for p, r in expected.items() if len(r)}


def test_a_starting_timestamp_with_no_record_is_an_error(peer, phases):
    topic, _, t2 = phases
    o = ks.parse_options(options(peer, topic, startingTimestamp=t2 + 3_600_000))
    with OffsetReader(o) as r, pytest.raises(KwireError, match="no record at or after the starting timestamp"):
        r.plan_batch()


def test_group_start_and_commit_round_trip(spark, peer, unique_topic):
    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 10)
    group = unique_topic + "-g"
    kw = options(peer, unique_topic, startingOffsets="group", commitToGroup=group,
                 **{"kafka.auto.offset.reset": "earliest"})
    df = ks.read_kafka(spark, **kw)
    assert df.count() == 20
    assert ks.await_commit(df, 30) == {(unique_topic, 0): 10, (unique_topic, 1): 10}

    fill(peer, unique_topic, 2, 5, start=10)
    df = ks.read_kafka(spark, **kw)
    assert offsets_of(df) == {0: list(range(10, 15)), 1: list(range(10, 15))}
    ks.await_commit(df, 30)
    with OffsetReader(ks.parse_options(options(peer, unique_topic))) as r:
        assert r.committed(group, [(unique_topic, 0), (unique_topic, 1)]) == \
            {(unique_topic, 0): 15, (unique_topic, 1): 15}
    # a group with nothing committed starts per kafka.auto.offset.reset
    fresh = options(peer, unique_topic, startingOffsets="group", **{"kafka.group.id": group + "-new",
                                                                      "kafka.auto.offset.reset": "latest"})
    assert ks.read_kafka(spark, **fresh).count() == 0


@pytest.mark.parametrize("reader", ["datasource", "mapInArrow", "rows"])
def test_read_kafka_evens_tasks_out_over_the_cores(spark, peer, unique_topic, reader, monkeypatch):
    """Three partitions on local[2]: four even parts (one range cut in two), packed into one
    task per core -- not two tasks and then one alone, nor four tasks; exactly the records,
    and a group commit of the partitions' ends."""
    import kwire.spark.planner as planner

    monkeypatch.setattr(planner, "BALANCE_MIN_PART_OFFSETS", 4)  # 12 records a partition here
    assert spark.sparkContext.defaultParallelism == 2
    create(peer, unique_topic, 3)
    fill(peer, unique_topic, 3, 12)
    group = unique_topic + "-g"
    df = ks.read_kafka(spark, reader=reader, **options(peer, unique_topic, commitToGroup=group))
    assert df.rdd.getNumPartitions() == 2
    per_task = df.rdd.mapPartitions(lambda rows: [sorted({(r.partition, r.offset) for r in rows})]).collect()
    assert sorted(len(t) for t in per_task) == [18, 18]  # a whole partition and half of one each
    halves = [[p for p in range(3) if sum(1 for q, _ in t if q == p) == 6] for t in per_task]
    assert len(halves[0]) == 1 and halves[0] == halves[1]  # the cut partition, half in each task
    assert offsets_of(df) == {p: list(range(12)) for p in range(3)}
    assert ks.await_commit(df, 30) == {(unique_topic, p): 12 for p in range(3)}
    # minPartitions=1: Spark's layout, a task per partition
    assert ks.read_kafka(spark, reader=reader, **options(peer, unique_topic, minPartitions=1)).rdd.getNumPartitions() == 3
    # fewer offsets than the minimum part: no cut, still one task per core (two partitions and one)
    monkeypatch.setattr(planner, "BALANCE_MIN_PART_OFFSETS", 100_000)
    df = ks.read_kafka(spark, reader=reader, **options(peer, unique_topic))
    assert df.rdd.getNumPartitions() == 2
    assert sorted(df.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()) == [12, 24]
    assert offsets_of(df) == {p: list(range(12)) for p in range(3)}


# --- commitToGroup: only what a successful action read in full -----------------------------------

def committed(tansu, topic: str, group: str, partitions: int) -> dict:
    with OffsetReader(ks.parse_options(options(tansu, topic))) as r:
        return r.committed(group, [(topic, p) for p in range(partitions)])


def settle(df, actions: int) -> None:
    """Wait until the commit thread has handled the outcome of ``actions`` actions."""
    pending = df.kwire_commit
    deadline = time.monotonic() + 30
    while getattr(pending, "actions_seen", actions) < actions and not pending.done:
        assert time.monotonic() < deadline, pending.reason
        time.sleep(0.05)
    time.sleep(0.5 if hasattr(pending, "actions_seen") else 3)  # (before the fix: give it time)


def commit_frame(spark, tansu, topic: str, group: str, reader: str, partitions: int = 2, per: int = 10):
    create(tansu, topic, partitions)
    fill(tansu, topic, partitions, per)
    return ks.read_kafka(spark, reader=reader, **options(tansu, topic, commitToGroup=group,
                                                          startingOffsets="earliest"))


READERS = ["datasource", "mapInArrow", "rows"]


@pytest.mark.parametrize("reader", READERS)
def test_partial_actions_commit_nothing_until_an_action_reads_everything(spark, peer, unique_topic, reader):
    """show / take / limit / head read part of the ranges: nothing is committed (not even the
    ranges they happened to read to the end); the first action reading every range commits."""
    group = unique_topic + "-g"
    df = commit_frame(spark, peer, unique_topic, group, reader)
    nothing = {(unique_topic, 0): None, (unique_topic, 1): None}
    df.show(3)
    assert len(df.take(2)) == 2
    assert len(df.limit(12).collect()) == 12  # all of one partition, part of the other
    assert df.head() is not None
    settle(df, 4)
    assert committed(peer, unique_topic, group, 2) == nothing
    with pytest.raises(KafkaTimeoutError, match="has not happened within 0.1 s: .*nothing committed yet"):
        ks.await_commit(df, 0.1)
    assert df.count() == 20
    assert ks.await_commit(df, 30) == {(unique_topic, 0): 10, (unique_topic, 1): 10}
    assert committed(peer, unique_topic, group, 2) == {(unique_topic, 0): 10, (unique_topic, 1): 10}


def _fail_at_offset_7(column: str):
    def fail(offset):
        if offset == 7:
            raise ValueError("boom at offset 7")
        return offset

    return F.udf(fail, LongType())(column)


@pytest.mark.parametrize("reader", READERS)
def test_failed_actions_commit_nothing(spark, peer, unique_topic, reader):
    """A failure in the read task itself (a UDF in the reading stage, after part of the range
    went through) and a failure in a later stage (after a shuffle: every read task succeeded)
    commit nothing; a later successful action does."""
    group = unique_topic + "-g"
    df = commit_frame(spark, peer, unique_topic, group, reader)
    with pytest.raises(Exception, match="boom at offset 7"):
        df.select(_fail_at_offset_7("offset")).collect()
    with pytest.raises(Exception, match="boom at offset 7"):
        df.repartition(3).select(_fail_at_offset_7("offset")).collect()
    settle(df, 2)
    assert "failed" in getattr(df.kwire_commit, "reason", "failed")
    assert committed(peer, unique_topic, group, 2) == {(unique_topic, 0): None, (unique_topic, 1): None}
    assert df.groupBy("partition").count().count() == 2  # a derived DataFrame, every record read
    assert ks.await_commit(df, 30) == {(unique_topic, 0): 10, (unique_topic, 1): 10}


@pytest.mark.parametrize("reader", READERS)
def test_balanced_parts_commit_nothing_when_one_part_fails(spark, peer, unique_topic, reader, monkeypatch):
    """Partition 0 read as two parts (three partitions evened out over local[2], in two tasks): a task
    failing in the second part, after the first part and the other partitions were read to
    their ends, commits nothing -- not partition 0 up to the cut either; a partial action
    commits nothing; a full read then commits every partition's end."""
    import kwire.spark.planner as planner

    monkeypatch.setattr(planner, "BALANCE_MIN_PART_OFFSETS", 4)
    group = unique_topic + "-g"
    df = commit_frame(spark, peer, unique_topic, group, reader, partitions=3, per=12)
    plain = ks.read_kafka(spark, reader=reader, **options(peer, unique_topic, startingOffsets="earliest"))
    tasks = plain.rdd.mapPartitions(lambda rows: [sorted({(r.partition, r.offset) for r in rows})]).collect()
    halves = sorted([o for p, o in t if p == 0] for t in tasks)  # four parts packed two per task:
    assert len(tasks) == 2 and halves == [list(range(6)), list(range(6, 12))]  # [0, 6) and [6, 12) apart

    def fail(partition, offset):
        if partition == 0 and offset == 9:
            raise ValueError("boom in the second part")
        return offset

    with pytest.raises(Exception, match="boom in the second part"):
        df.select(F.udf(fail, LongType())("partition", "offset")).collect()
    assert len(df.limit(20).collect()) == 20
    settle(df, 2)
    assert committed(peer, unique_topic, group, 3) == {(unique_topic, p): None for p in range(3)}
    assert df.count() == 36
    assert ks.await_commit(df, 30) == {(unique_topic, p): 12 for p in range(3)}


def test_a_failing_commit_is_raised_by_await_commit(spark, peer, unique_topic, monkeypatch):
    from kwire.errors import CommitFailedError

    def refuse(self, group, offsets, metadata=None):
        raise CommitFailedError(f"refused for {group}")

    monkeypatch.setattr(OffsetReader, "commit", refuse)
    group = unique_topic + "-g"
    df = commit_frame(spark, peer, unique_topic, group, "datasource")
    assert df.count() == 20
    with pytest.raises(CommitFailedError, match="refused for " + group):
        ks.await_commit(df, 30)
    assert df.kwire_commit.reason == f"committing to group {group!r} failed: refused for {group}"
    monkeypatch.undo()
    assert committed(peer, unique_topic, group, 2) == {(unique_topic, 0): None, (unique_topic, 1): None}


def test_commit_needs_a_classic_session(tansu):
    from kwire.spark.commit import PendingCommit

    opts = ks.parse_options(options(tansu, "t", commitToGroup="g"))
    with pytest.raises(ConfigError, match="classic SparkSession"):
        PendingCommit(opts, {("t", 0): 5}, planned=[ks.OffsetRange("t", 0, 0, 5)], progress=None,
                      spark=object(), name="x")


def test_the_listener_hands_each_outcome_to_the_commit_thread(tansu):
    """The paths a real session rarely takes: an outcome that cannot be read, a failed action,
    an unrelated query, a cancelled commit -- nothing is committed on any of them."""
    from types import SimpleNamespace as NS

    from kwire.spark.commit import PendingCommit, _ActionListener

    opts = ks.parse_options(options(tansu, "t", commitToGroup="g"))
    pending = PendingCommit(opts, {("t", 0): 5}, planned=[ks.OffsetRange("t", 0, 0, 5)],
                            progress=NS(value=frozenset()), spark=None, name="kwire-commit-x")
    listener = _ActionListener("kwire-commit-x", pending._events)

    def broken():
        raise RuntimeError("py4j went away")

    def seen(n):
        deadline = time.monotonic() + 10
        while pending.actions_seen < n:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return pending.reason

    plan = NS(toString=lambda: "Aggregate\n+- CollectMetrics kwire-commit-x, [count(1)]")
    listener.onSuccess("count", NS(observedMetrics=broken), 0)
    assert "the outcome of an action (count) could not be read" in seen(1)
    listener.onFailure("collect", NS(logical=lambda: plan), NS(getMessage=lambda: "boom"))
    assert seen(2).startswith("the last action (collect) failed: nothing committed; boom")
    listener.onFailure("collect", NS(logical=lambda: NS(toString=lambda: "Project [a]")), NS(getMessage=str))
    metrics = NS(contains=lambda name: True, apply=lambda name: NS(get=lambda i: [5, 0][i]))
    limited = NS(toString=lambda: "GlobalLimit 5\n+- LocalLimit 5\n   +- CollectMetrics kwire-commit-x")
    listener.onSuccess("head", NS(observedMetrics=lambda: metrics, optimizedPlan=lambda: limited), 0)
    assert "it has a GlobalLimit (a partial action" in seen(3)
    assert pending._events.empty() and not pending.done
    pending.cancel()
    with pytest.raises(KwireError, match="cancelled"):
        pending.wait(10)
    assert pending.committed is None


def test_check_complete_needs_every_range_and_every_record():
    from kwire.spark.commit import check_complete

    a, b = ks.OffsetRange("t", 0, 0, 10), ks.OffsetRange("t", 1, 0, 4)
    fa = 0
    for o in range(0, 9):  # offset 9 is a transaction marker: 9 records
        fa ^= o
    fb = 0
    for o in range(4):
        fb ^= o ^ (1 << 40)
    reports = {("t", 0, 0, 10, 9, fa), ("t", 1, 0, 4, 4, fb)}
    assert check_complete([a, b], reports, 13, fa ^ fb) is None
    assert "no action has read t-1[0, 4)" in check_complete([a, b], {("t", 0, 0, 10, 9, fa)}, 13, fa ^ fb)
    assert "passed on 12 of the 13" in check_complete([a, b], reports, 12, fa ^ fb ^ 3)
    # the right count, but a record twice and another missing: the fingerprint differs
    assert "passed on 13 of the 13" in check_complete([a, b], reports, 13, fa ^ fb ^ 3 ^ 5)
    assert "read twice with different records" in check_complete(
        [a], {("t", 0, 0, 10, 9, fa), ("t", 0, 0, 10, 8, fa ^ 8)}, 9, fa)


def test_fail_on_data_loss(spark, peer, unique_topic):
    # Tansu has no DeleteRecords, so the lost offsets are ones past the end of the log.
    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 10)
    gone = '{"%s": {"0": 50}}' % unique_topic
    with pytest.raises(ks.DataLossError, match="failOnDataLoss=false"):
        ks.read_kafka(spark, **options(peer, unique_topic, startingOffsets=gone))
    df = ks.read_kafka(spark, **options(peer, unique_topic, startingOffsets=gone, failOnDataLoss="false"))
    assert offsets_of(df) == {1: list(range(10))}

    # executors: a planned range past the end of the log
    sc = spark.sparkContext
    config = {"bootstrap.servers": peer.bootstrap}
    rdd = ks.kafka_rdd(sc, config, [(unique_topic, 0, 5, 25)])
    with pytest.raises(Exception, match="DataLossError"):
        rdd.collect()
    rdd = ks.kafka_rdd(sc, config, [(unique_topic, 0, 5, 25)], fail_on_data_loss=False)
    assert [r.offset for r in rdd.collect()] == list(range(5, 10))


def test_kafka_rdd_rows(spark, peer, unique_topic):
    create(peer, unique_topic, 2)
    produce(peer, unique_topic, [(i % 2, b"k%d" % i, b"v%d" % i, [("h", b"x%d" % i)] * (i % 3))
                                 for i in range(20)])
    ranges = [(unique_topic, 0, 2, 7), ks.OffsetRange(unique_topic, 1, 0, 10)]
    rdd = ks.kafka_rdd(spark.sparkContext, {"bootstrap.servers": peer.bootstrap}, ranges, include_headers=True)
    assert rdd.getNumPartitions() == 2
    rows = rdd.collect()
    assert [(r.partition, r.offset) for r in rows] == [(0, o) for o in range(2, 7)] + [(1, o) for o in range(10)]
    first = rows[0]
    assert isinstance(first, ks.KafkaRowWithHeaders)
    assert (first.key, first.value, first.topic, first.headers) == (b"k4", b"v4", unique_topic, [("h", b"x4")])
    # every row exact: the reader reads each record's offset, timestamp and headers before the
    # next, so after the first of a range its records come from the decoder's read-in-full
    # mode (kwire._codec._ReadRecord)
    want = [(b"k%d" % i, b"v%d" % i, [("h", b"x%d" % i)] * (i % 3)) for i in
            [2 * o for o in range(2, 7)] + [2 * o + 1 for o in range(10)]]
    assert [(r.key, r.value, r.headers) for r in rows] == want
    assert all(r.timestamp.year >= 2026 for r in rows)
    df = spark.createDataFrame(rdd, ks.kafka_schema(include_headers=True))
    assert df.count() == 15


def test_max_partitions_packs_ranges_for_read_kafka_and_the_data_source(registered, peer, unique_topic):
    spark = registered
    create(peer, unique_topic, 5)
    fill(peer, unique_topic, 5, 12)
    expected = {p: list(range(12)) for p in range(5)}
    df = ks.read_kafka(spark, **options(peer, unique_topic, maxPartitions=2))
    assert df.rdd.getNumPartitions() == 2 and offsets_of(df) == expected
    per_task = df.rdd.mapPartitions(lambda rows: [sorted({r.partition for r in rows})]).collect()
    assert sorted(per_task) == [[0, 2, 4], [1, 3]]  # 12 records each: 36 and 24
    df = spark.read.format("kwire").options(**options(peer, unique_topic, maxPartitions=2)).load()
    assert df.rdd.getNumPartitions() == 2 and offsets_of(df) == expected
    df = spark.read.format("kwire").options(**options(peer, unique_topic, maxPartitions=9)).load()
    assert df.rdd.getNumPartitions() == 5 and df.count() == 60


def test_kafka_arrow_rdd_and_packed_partitions(spark, peer, unique_topic):
    """Arrow batches of exactly the planned ranges; num_partitions packs 5 ranges into 2 tasks
    of even record counts (rows and Arrow agree)."""
    create(peer, unique_topic, 5)
    produce(peer, unique_topic, [(i % 5, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)]) for i in range(100)])
    config = {"bootstrap.servers": peer.bootstrap}
    ranges = [(unique_topic, p, 2 * p, 20) for p in range(5)]  # 20, 18, 16, 14, 12 records
    sc = spark.sparkContext
    expected = sorted((p, o) for p in range(5) for o in range(2 * p, 20))
    batches = ks.kafka_arrow_rdd(sc, config, ranges, include_headers=True)
    assert batches.getNumPartitions() == 5
    table = pa.Table.from_batches(batches.collect())
    assert table.schema.names == ks.kafka_schema(include_headers=True).fieldNames()
    assert sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist())) == expected
    row = table.filter(pc.and_(pc.equal(table["offset"], 7), pc.equal(table["partition"], 3))).to_pylist()[0]
    assert (row["key"], row["value"], row["topic"], row["headers"]) == (b"k38", b"v38", unique_topic,
                                                                       [{"key": "h", "value": b"38"}])
    packed = ks.kafka_arrow_rdd(sc, config, ranges, num_partitions=2)
    assert packed.getNumPartitions() == 2
    per_task = packed.mapPartitions(lambda bs: [sum(b.num_rows for b in bs)]).collect()
    assert sorted(per_task) == [34, 46]  # largest first, to the lighter task: {18, 16}, {20, 14, 12}
    pairs = packed.flatMap(lambda b: zip(b["partition"].to_pylist(), b["offset"].to_pylist())).collect()
    assert sorted(pairs) == expected
    rows = ks.kafka_rdd(sc, config, ranges, num_partitions=2)
    assert rows.getNumPartitions() == 2 and sorted((r.partition, r.offset) for r in rows.collect()) == expected
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ConfigError, match="num_partitions"):
            ks.kafka_arrow_rdd(sc, config, ranges, num_partitions=bad)


@pytest.mark.parametrize("reader", ["datasource", "mapInArrow", "rows"])
def test_read_kafka_readers_pack_and_start_where_asked(spark, peer, unique_topic, reader):
    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 8)
    df = ks.read_kafka(spark, reader=reader, **options(peer, unique_topic, maxPartitions=1,
                                                       startingOffsets='{"%s": {"1": 3}}' % unique_topic))
    assert df.rdd.getNumPartitions() == 1
    assert offsets_of(df) == {0: list(range(8)), 1: list(range(3, 8))}


@pytest.mark.parametrize("missing, expected", [((), "mapInArrow"), (("pandas",), "datasource"),
                                               (("dataSource", "pandas"), "rows"), (("pyarrow",), "rows")])
def test_read_kafka_auto_picks_what_is_installed(spark, peer, unique_topic, monkeypatch, missing, expected):
    create(peer, unique_topic, 1)
    fill(peer, unique_topic, 1, 5)
    have = spark_df._have
    monkeypatch.setattr(spark_df, "_have", lambda m: m not in missing and have(m))
    available = spark_df._data_source_available
    monkeypatch.setattr(spark_df, "_data_source_available",
                        lambda s: "dataSource" not in missing and available(s))
    df = ks.read_kafka(spark, **options(peer, unique_topic))
    plan = df._jdf.queryExecution().analyzed().toString()  # its top node says which reader
    top = {"datasource": "RelationV2", "mapInArrow": "MapInArrow", "rows": "LogicalRDD"}[expected]
    assert plan.startswith(top), plan
    assert offsets_of(df) == {0: list(range(5))}
    with pytest.raises(ConfigError, match="reader must be one of"):
        ks.read_kafka(spark, reader="jdbc", **options(peer, unique_topic))


def test_the_default_plan_names_its_topic_ranges_and_records(spark, peer, unique_topic):
    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 6)
    df = ks.read_kafka(spark, **options(peer, unique_topic, startingOffsets='{"%s": {"0": 2, "1": 0}}' % unique_topic))
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert f"kwire[{unique_topic}: 0 [2, 6), 1 [0, 6); 10 records]" in plan, plan
    assert df.count() == 10


def test_transaction_markers_leave_gaps_that_ranges_step_over(registered, peer, unique_topic):
    spark = registered
    create(peer, unique_topic, 1)
    p = Producer({"bootstrap.servers": peer.bootstrap, "transactional.id": unique_topic})
    p.init_transactions(10)
    for txn in range(3):
        p.begin_transaction()
        for i in range(3):
            p.produce(unique_topic, value=b"%d-%d" % (txn, i), partition=0)
        p.commit_transaction(10)
    # offsets: 0-2, marker 3, 4-6, marker 7, 8-10, marker 11
    df = spark.read.format("kwire").options(**options(peer, unique_topic, maxRecordsPerPartition=2)).load()
    assert df.rdd.getNumPartitions() == 6  # several ranges end on a marker
    rows = sorted((r.offset, r.value) for r in df.collect())
    assert rows == [(o, b"%d-%d" % (o // 4, o % 4)) for o in range(12) if o % 4 != 3]


# --- streaming ----------------------------------------------------------------------------------

def test_streaming_micro_batches_read_new_records_exactly_once(registered, peer, unique_topic, tmp_path):
    spark = registered
    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 10)
    group = unique_topic + "-g"
    seen: list[tuple[int, list]] = []

    def collect(batch_df, batch_id):
        seen.append((batch_id, [(r.partition, r.offset, r.value) for r in batch_df.collect()]))

    def run():
        stream = (spark.readStream.format("kwire")
                  .options(**options(peer, unique_topic, startingOffsets="earliest", maxOffsetsPerTrigger=8,
                                     commitToGroup=group))
                  .load())
        q = (stream.writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(120)
        assert q.exception() is None

    run()
    first = [r for _, rows in seen for r in rows]
    assert sorted((p, o) for p, o, _ in first) == [(p, o) for p in range(2) for o in range(10)]
    assert all(len(rows) <= 8 for _, rows in seen) and len(seen) >= 3

    fill(peer, unique_topic, 2, 5, start=10)
    n = len(seen)
    run()
    second = [r for _, rows in seen[n:] for r in rows]
    assert sorted((p, o) for p, o, _ in second) == [(p, o) for p in range(2) for o in range(10, 15)]
    assert {(p, o) for p, o, _ in second}.isdisjoint({(p, o) for p, o, _ in first})
    assert all(v == b"%d-%d" % (p, o) for p, o, v in first + second)
    with OffsetReader(ks.parse_options(options(peer, unique_topic))) as r:
        assert r.committed(group, [(unique_topic, 0), (unique_topic, 1)]) == \
            {(unique_topic, 0): 15, (unique_topic, 1): 15}


def test_streaming_with_max_partitions_packs_each_micro_batch(registered, peer, unique_topic, tmp_path):
    spark = registered
    create(peer, unique_topic, 3)
    fill(peer, unique_topic, 3, 6)
    seen: list[tuple[int, list]] = []

    def collect(batch_df, batch_id):
        seen.append((batch_df.rdd.getNumPartitions(), [(r.partition, r.offset) for r in batch_df.collect()]))

    stream = (spark.readStream.format("kwire")
              .options(**options(peer, unique_topic, startingOffsets="earliest", maxPartitions=1)).load())
    q = (stream.writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120) and q.exception() is None
    assert [n for n, rows in seen if rows] == [1]
    assert sorted(r for _, rows in seen for r in rows) == [(p, o) for p in range(3) for o in range(6)]


# --- errors -------------------------------------------------------------------------------------

def test_option_errors_are_raised_before_spark_runs(spark, tansu):
    with pytest.raises(ConfigError, match="unknown option 'startingOfset'"):
        ks.read_kafka(spark, **options(tansu, "t", startingOfset="earliest"))
    with pytest.raises(ConfigError, match="malformed JSON"):
        ks.read_kafka(spark, **options(tansu, "t", startingOffsets='{"t": {"0": 1}'))


def test_data_source_option_errors(registered, tansu):
    spark = registered
    with pytest.raises(Exception, match="unknown option 'bogus'"):
        spark.read.format("kwire").options(**options(tansu, "t", bogus="1")).load()
    with pytest.raises(Exception, match="malformed JSON"):
        spark.read.format("kwire").options(**options(tansu, "t", endingOffsets="{oops")).load()
    with pytest.raises(Exception, match="commitToGroup"):  # refused when the batch read is planned
        spark.read.format("kwire").options(**options(tansu, "t", commitToGroup="g")).load().collect()


def test_missing_topic(registered, peer, unique_topic):
    with pytest.raises(UnknownTopicOrPartitionError, match=f"topic '{unique_topic}' does not exist"):
        ks.read_kafka(registered, **options(peer, unique_topic))
    with pytest.raises(Exception, match="does not exist"):  # planning, before any task
        registered.read.format("kwire").options(**options(peer, unique_topic)).load().collect()


def test_unreachable_cluster(registered):
    dead = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(UnreachableClusterError, match=f"cannot reach Kafka at kafka.bootstrap.servers={dead}"):
        ks.read_kafka(registered, **{"kafka.bootstrap.servers": dead, "subscribe": "t"})
    assert time.monotonic() - t0 < 10
    with pytest.raises(Exception, match="cannot reach Kafka"):
        registered.read.format("kwire").option("kafka.bootstrap.servers", dead).option("subscribe", "t") \
            .load().collect()


# --- data loss: recreated topics, truncated logs, deleted records ---------------------------------
#
# Run on Apache Kafka and on Tansu (the `peer` fixture).  Tansu (0.6) has DeleteTopics, topic ids
# in Metadata (a recreated topic gets a new id) and CreateTopics, but no DeleteRecords: it closes
# the connection on the request, so the log-start cases run on Kafka only.  Where the two differ
# the assertion says which is Kafka's behaviour.

def recreate(peer, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again (Kafka deletes asynchronously: retry the create).

    A producer's metadata request may auto-create it on Kafka in between (auto.create.topics
    .enable): a topic with a new id and the same partition count is as good."""
    from kwire.admin import Admin
    from kwire.spark.offset_reader import lookup_topic_ids

    config = {"bootstrap.servers": peer.bootstrap}
    old_id = lookup_topic_ids(config, [topic])[topic]
    admin = AdminClient(config)
    for f in admin.delete_topics([topic]).values():
        f.result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
                f.result(30)
            return
        except Exception:
            if lookup_topic_ids(config, [topic]).get(topic) not in (None, old_id):
                with Admin(config) as kwire_admin:  # (asks without creating it)
                    if len(kwire_admin.list_topics(topic).topics[topic].partitions) == partitions:
                        return
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def delete_records(peer, topic: str, before: dict[int, int]) -> None:
    from confluent_kafka import TopicPartition

    admin = AdminClient({"bootstrap.servers": peer.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, p, o) for p, o in before.items()]).values():
        f.result(30)


def stream_once(spark, peer, topic: str, checkpoint, **kw):
    """One Trigger.AvailableNow run: the (partition, offset, value) rows read, and the query's
    error (None)."""
    seen: list = []

    def collect(batch_df, batch_id):
        seen.extend((r.partition, r.offset, r.value) for r in batch_df.collect())

    stream = (spark.readStream.format("kwire")
              .options(**options(peer, topic, **{"startingOffsets": "earliest", **kw})).load())
    q = (stream.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(180)
    except Exception as exc:
        return seen, exc
    return seen, q.exception()


def test_offsets_json_records_topic_ids_and_reads_old_checkpoints():
    import uuid

    from kwire.spark import planner

    tid = uuid.uuid4()
    value = planner.offsets_to_json({("t", 0): 5, ("t", 1): 7, ("u", 0): 1}, {"t": tid, "u": None})
    assert value == {"t": {"0": 5, "1": 7}, "u": {"0": 1}, "@topicIds": {"t": str(tid)}}
    assert planner.offsets_from_json(value) == {("t", 0): 5, ("t", 1): 7, ("u", 0): 1}
    assert planner.topic_ids_from_json(value) == {"t": tid}
    old = {"t": {"0": 5}}  # a checkpoint written before ids: read, nothing to compare
    assert planner.offsets_from_json(old) == {("t", 0): 5} and planner.topic_ids_from_json(old) == {}


def test_plan_ranges_reports_a_changed_topic_id():
    import uuid

    from kwire.errors import DataLossError
    from kwire.spark import planner

    old, new = uuid.uuid4(), uuid.uuid4()
    kw = dict(earliest={("t", 0): 0}, latest={("t", 0): 1000}, start_ids={"t": old}, topic_ids={"t": new})
    with pytest.raises(DataLossError, match="deleted and recreated .topic id .* is now"):
        planner.plan_ranges({("t", 0): 500}, {("t", 0): 1000}, **kw)
    assert issubclass(DataLossError, KwireError) and ks.DataLossError is DataLossError
    plan = planner.plan_ranges({("t", 0): 500}, {("t", 0): 1000}, fail_on_data_loss=False, **kw)
    assert [(r.from_offset, r.until_offset, r.topic_id) for r in plan.ranges] == [(0, 1000, new)]
    assert "going on at the new log's start, 0" in plan.warnings[0]
    same = planner.plan_ranges({("t", 0): 500}, {("t", 0): 1000}, **{**kw, "topic_ids": {"t": old}})
    assert [(r.from_offset, r.until_offset, r.topic_id) for r in same.ranges] == [(500, 1000, old)]
    unknown = planner.plan_ranges({("t", 0): 500}, {("t", 0): 1000}, **{**kw, "start_ids": {}})
    assert [(r.from_offset, r.until_offset) for r in unknown.ranges] == [(500, 1000)]


@pytest.mark.parametrize("fail", [True, False], ids=["fail", "warn"])
def test_streaming_detects_a_recreated_topic(registered, peer, unique_topic, tmp_path, fail, caplog):
    """The issue's case: the checkpoint holds 50 per partition, the topic is deleted and created
    again and holds 10: before, an empty batch and no error, later [50, ...) read silently."""
    spark = registered
    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 50)
    seen, error = stream_once(spark, peer, unique_topic, tmp_path / "ck")
    assert error is None and len(seen) == 100
    recreate(peer, unique_topic, 2)
    produce(peer, unique_topic, [(p, None, b"new-%d-%d" % (p, i), None) for i in range(10) for p in range(2)])
    seen, error = stream_once(spark, peer, unique_topic, tmp_path / "ck", failOnDataLoss=str(fail).lower())
    if fail:
        assert error is not None and "DataLossError" in str(error) and "recreated" in str(error), error
        assert seen == []
    else:
        # failOnDataLoss=false: a warning, and the new topic read from its start
        assert error is None, error
        assert sorted((p, o, v) for p, o, v in seen) == [(p, i, b"new-%d-%d" % (p, i))
                                                         for p in range(2) for i in range(10)]
        fill(peer, unique_topic, 2, 5, start=10)  # and on from there
        seen, error = stream_once(spark, peer, unique_topic, tmp_path / "ck", failOnDataLoss="false")
        assert error is None and sorted((p, o) for p, o, _ in seen) == [(p, o) for p in range(2)
                                                                       for o in range(10, 15)]


def strip_topic_ids(checkpoint) -> None:
    """Make ``checkpoint``'s offset log look written before offsets carried topic ids."""
    import re

    for f in (checkpoint / "offsets").iterdir():
        if f.name.startswith("."):
            f.unlink()  # the checksum of the file rewritten below
        else:
            f.write_text(re.sub(r',\s*"@topicIds":\s*\{[^}]*\}', "", f.read_text()))


@pytest.mark.parametrize("fail", [True, False], ids=["fail", "warn"])
def test_streaming_detects_a_log_that_ends_below_the_start(registered, peer, unique_topic, tmp_path, fail):
    """The issue's case where no topic id can tell: a checkpoint written before offsets carried
    ids holds 50, the topic is recreated and holds 20, so its log ends below the start.  Before:
    no batch, no error, and later only the records from offset 50 on were read."""
    spark = registered
    create(peer, unique_topic, 1)
    fill(peer, unique_topic, 1, 50)
    seen, error = stream_once(spark, peer, unique_topic, tmp_path / "ck")
    assert error is None and len(seen) == 50
    strip_topic_ids(tmp_path / "ck")
    recreate(peer, unique_topic, 1)
    fill(peer, unique_topic, 1, 20)
    seen, error = stream_once(spark, peer, unique_topic, tmp_path / "ck", failOnDataLoss=str(fail).lower())
    if fail:
        assert error is not None and "DataLossError" in str(error), error
        assert "starting offset 50 is after the ending offset 20" in str(error)
    else:
        # as Spark's source: the batch is skipped and the stream goes on at the log's end
        assert error is None and seen == []
        fill(peer, unique_topic, 1, 3, start=20)
        seen, error = stream_once(spark, peer, unique_topic, tmp_path / "ck", failOnDataLoss="false")
        assert error is None and sorted(o for _, o, _ in seen) == [20, 21, 22]


@pytest.mark.parametrize("fail", [True, False], ids=["fail", "warn"])
def test_streaming_detects_deleted_records(registered, kafka, unique_topic, tmp_path, fail):
    """The log start moved above the stream's position (DeleteRecords).  Apache Kafka only:
    Tansu 0.6 has no DeleteRecords (it closes the connection on the request)."""
    peer = kafka
    spark = registered
    create(peer, unique_topic, 1)
    fill(peer, unique_topic, 1, 10)
    seen, error = stream_once(spark, peer, unique_topic, tmp_path / "ck")
    assert error is None and len(seen) == 10
    fill(peer, unique_topic, 1, 20, start=10)
    delete_records(peer, unique_topic, {0: 25})
    seen, error = stream_once(spark, peer, unique_topic, tmp_path / "ck", failOnDataLoss=str(fail).lower())
    if fail:
        assert error is not None and "DataLossError" in str(error) and "log starts at 25" in str(error), error
    else:
        assert error is None and sorted(o for _, o, _ in seen) == list(range(25, 30))


@pytest.mark.parametrize("fail", [True, False], ids=["fail", "warn"])
def test_batch_reads_and_rdds_detect_a_topic_recreated_after_planning(spark, peer, unique_topic, fail):
    """read_kafka plans, kafka_rdd / kafka_arrow_rdd pin the topic's id when defined; the topic is
    recreated with as many records before the tasks run.  Before, they read the new topic's
    records at the planned offsets as if nothing had happened."""
    create(peer, unique_topic, 1)
    fill(peer, unique_topic, 1, 10)
    config = {"bootstrap.servers": peer.bootstrap}
    frames = [ks.read_kafka(spark, reader=reader, **options(peer, unique_topic, failOnDataLoss=str(fail).lower(),
                                                            **{"kafkaConsumer.pollTimeoutMs": 20000}))
              for reader in READERS]
    rdd = ks.kafka_rdd(spark.sparkContext, config, [(unique_topic, 0, 0, 10)], fail_on_data_loss=fail,
                       poll_timeout_ms=20000)
    arrow = ks.kafka_arrow_rdd(spark.sparkContext, config, [(unique_topic, 0, 0, 10)], fail_on_data_loss=fail,
                               poll_timeout_ms=20000)
    recreate(peer, unique_topic, 1)
    produce(peer, unique_topic, [(0, None, b"new-%d" % i, None) for i in range(10)])
    for read in [*(df.collect for df in frames), rdd.collect, arrow.collect]:
        if fail:
            with pytest.raises(Exception, match="DataLossError.*recreated"):
                read()
        else:
            assert read() == []  # the planned range is skipped, with a warning


@pytest.mark.parametrize("fail", [True, False], ids=["fail", "warn"])
def test_group_offsets_committed_in_a_recreated_topic(spark, peer, unique_topic, fail):
    """startingOffsets=group after the topic was deleted and recreated.  Both Apache Kafka and
    Tansu drop a deleted topic's committed offsets (the group then starts per
    kafka.auto.offset.reset); offsets that outlive the topic -- copied back, synced from another
    cluster -- carry the old topic's id in the metadata kwire commits them with, which tells.
    (Before: the new topic was read from the old offset, 10, on.)"""
    create(peer, unique_topic, 1)
    fill(peer, unique_topic, 1, 10)
    group = unique_topic + "-g"
    tp = (unique_topic, 0)
    kw = options(peer, unique_topic, startingOffsets="group", commitToGroup=group,
                 failOnDataLoss=str(fail).lower(), **{"kafka.auto.offset.reset": "earliest"})
    df = ks.read_kafka(spark, **kw)
    assert df.count() == 10 and ks.await_commit(df, 30) == {tp: 10}
    with OffsetReader(ks.parse_options(options(peer, unique_topic))) as r:
        offsets, ids = r.committed_with_ids(group, [tp])
        old_id = r.topic_ids([tp])[unique_topic]
    if isinstance(peer, TansuBroker):
        # Tansu (0.6) answers OffsetFetch without the commit metadata, so the topic id cannot
        # travel with the offsets there: what follows is Kafka's behaviour.
        assert offsets == {tp: 10} and ids == {}
        return
    assert offsets == {tp: 10} and ids == {unique_topic: old_id}  # Kafka keeps commit metadata
    recreate(peer, unique_topic, 1)
    fill(peer, unique_topic, 1, 20)
    assert committed(peer, unique_topic, group, 1) == {tp: None}  # both peers dropped them
    with OffsetReader(ks.parse_options(options(peer, unique_topic))) as r:
        r.commit(group, {tp: 10}, metadata=f"kwire.topicId={old_id}")  # as a copy would bring them back
    if fail:
        with pytest.raises(ks.DataLossError, match="deleted and recreated"):
            ks.read_kafka(spark, **kw)
    else:
        assert offsets_of(ks.read_kafka(spark, **kw)) == {0: list(range(20))}


# --- map_kafka_arrow: the user's Arrow function inside the read task ------------------------------

def _per_partition(batches):
    """(partition, records, sum of offsets, the values) per partition seen."""
    import pyarrow as pa

    acc: dict = {}
    for b in batches:
        assert b.schema.names == ["partition", "offset", "value"]  # exactly the columns asked for
        for p, o, v in zip(*(b.column(i).to_pylist() for i in range(3))):
            e = acc.setdefault(p, [0, 0, []])
            e[0] += 1
            e[1] += o
            e[2].append(v)
    yield pa.RecordBatch.from_pydict(
        {"partition": list(acc), "n": [e[0] for e in acc.values()],
         "offsets": [e[1] for e in acc.values()], "values": [e[2] for e in acc.values()]})


_PER_PARTITION_DDL = "partition long, n long, offsets long, values array<binary>"


def test_map_kafka_arrow_hands_the_read_batches_to_the_function(spark, any_kafka_peer, unique_topic):
    peer = any_kafka_peer
    create(peer, unique_topic, 3)
    produce(peer, unique_topic, [(i % 3, None, b"v%d" % i, None) for i in range(60)])
    df = ks.map_kafka_arrow(spark, _per_partition, _PER_PARTITION_DDL,
                            columns=["partition", "offset", "value"], **options(peer, unique_topic))
    assert "_per_partition over kwire[" in df._jdf.queryExecution().toString()
    rows = {r.partition: (r.n, r.offsets, r["values"]) for r in df.collect()}
    assert rows == {p: (20, sum(range(20)), [b"v%d" % i for i in range(p, 60, 3)]) for p in range(3)}
    with pytest.raises(ConfigError, match="no column.*nope"):
        ks.map_kafka_arrow(spark, _per_partition, _PER_PARTITION_DDL, columns=["nope"],
                           **options(peer, unique_topic))


def _biggest_batch(batches):
    import pyarrow as pa

    yield pa.RecordBatch.from_pydict({"biggest": [max((b.num_rows for b in batches), default=0)]},
                                     schema=pa.schema([("biggest", pa.int64())]))


def test_map_kafka_arrow_collects_in_its_read_tasks(spark, peer, unique_topic, monkeypatch):
    """map_kafka_arrow's DataFrame (no commitToGroup) collects plain columns as a Python RDD
    job -- no Spark SQL query -- with exactly Spark's rows; its function keeps kwire's batches
    (not cut to maxRecordsPerBatch); other schemas and other actions are Spark's."""
    from pyspark.sql import functions as F

    from kwire.spark import dataframe
    from kwire.spark.frame import KafkaArrowFrame

    create(peer, unique_topic, 2)
    produce(peer, unique_topic, [(i % 2, None, None if i % 9 == 4 else b"v%d" % i, None) for i in range(400)])
    ran = []
    real = dataframe.collect_in_tasks
    monkeypatch.setattr(dataframe, "collect_in_tasks", lambda *a: ran.append(real(*a)) or ran[-1])
    opts = options(peer, unique_topic)
    fused = ks.map_kafka_arrow(spark, _plain_columns, _PLAIN_DDL, columns=["offset", "value"], **opts)
    assert isinstance(fused, KafkaArrowFrame)
    got = fused.collect()
    assert ran[-1] is not None and fused.__dict__.get("_kwire_jdf") is None  # no Spark SQL query ran
    want = ks.map_kafka_arrow(spark, _plain_columns, _PLAIN_DDL, columns=["offset", "value"], **opts
                              ).filter(F.lit(True)).collect()  # Spark's own collect
    assert ran[-1] is not None and len(got) == 400
    assert sorted(map(repr, got)) == sorted(map(repr, want))
    types = sorted(repr([type(v) for v in r]) for r in got)
    assert types == sorted(repr([type(v) for v in r]) for r in want)
    before = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    try:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
        sizes = ks.map_kafka_arrow(spark, _biggest_batch, "biggest long", columns=["offset"], **opts)
        assert max(r.biggest for r in sizes.collect()) == 200  # a partition's records in one batch
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", before)
    assert fused.count() == 400  # Spark's count of the function's rows
    with pytest.raises(Exception, match="notatype|PARSE|DATATYPE"):  # a bad schema fails at once
        ks.map_kafka_arrow(spark, _plain_columns, "a notatype", **opts)
    committing = ks.map_kafka_arrow(spark, _plain_columns, _PLAIN_DDL, columns=["offset", "value"],
                                    **options(peer, unique_topic, commitToGroup=unique_topic + "-g"))
    assert not isinstance(committing, KafkaArrowFrame)  # the commit watches Spark's query
    assert len(committing.collect()) == 400 and ks.await_commit(committing, 30) == {
        (unique_topic, 0): 200, (unique_topic, 1): 200}


def _what_the_function_sees(batches):
    """(Arrow schema, largest batch, batches, every row as a tuple) of what mapInArrow got."""
    import pyarrow as pa

    schema, sizes, rows = None, [], []
    for b in batches:
        schema = b.schema
        sizes.append(b.num_rows)
        rows.extend(repr(row) for row in zip(*(c.to_pylist() for c in b.columns)))
    yield pa.RecordBatch.from_pydict({"schema": [str(schema)], "biggest": [max(sizes, default=0)],
                                      "batches": [len(sizes)], "rows": [rows]})


_SEES_DDL = "schema string, biggest long, batches long, rows array<string>"


def _seen(df):
    """What a mapInArrow over ``df`` saw: ({schema}, largest batch, batches, sorted rows), and
    how many MapInArrow steps its plan has (1: the function ran in the read tasks)."""
    out = df.mapInArrow(_what_the_function_sees, _SEES_DDL)
    got = out.collect()
    steps = out._jdf.queryExecution().optimizedPlan().toString().count("MapInArrow")
    return ({r.schema for r in got if r.batches}, max(r.biggest for r in got), sum(r.batches for r in got),
            sorted(x for r in got for x in r.rows)), steps


def test_mapInArrow_over_read_kafka_runs_in_the_read_tasks_and_sees_what_spark_would_give(
        spark, peer, unique_topic):
    """read_kafka(...).select(names).mapInArrow(f) runs f in the read tasks (one Python stage),
    and f gets what Spark's own two-stage mapInArrow hands it: the same types (session time
    zone, large binary/string types when asked), the same columns in the same order, batches no
    longer than maxRecordsPerBatch, the same rows.  Anything else stays Spark's."""
    from pyspark.sql import functions as F

    from kwire.spark.frame import KafkaDataFrame

    create(peer, unique_topic, 3)
    produce(peer, unique_topic, [(i % 3, b"k%d" % i, None if i % 11 == 3 else b"v%d" % i,
                                  [("h", b"%d" % i)] if i % 2 else None) for i in range(2000)])
    confs = {"spark.sql.session.timeZone": "America/New_York",
             "spark.sql.execution.arrow.maxRecordsPerBatch": "97",
             "spark.sql.execution.arrow.useLargeVarTypes": "true"}
    before = {k: spark.conf.get(k) for k in confs}
    try:
        for conf in ({}, confs):
            for k, v in conf.items():
                spark.conf.set(k, v)
            df = ks.read_kafka(spark, **options(peer, unique_topic, includeHeaders="true"))
            assert isinstance(df, KafkaDataFrame)
            for fused in (df.select("value", "timestamp", "key"), df.select(["headers", "offset"]),
                          df, df.select("*")):
                assert isinstance(fused, KafkaDataFrame)
                unfused = fused.filter(F.lit(True))  # any other step: Spark's own mapInArrow
                assert not isinstance(unfused, KafkaDataFrame)
                (schemas, biggest, batches, rows), steps = _seen(fused)
                (want_schemas, want_biggest, _, want_rows), want_steps = _seen(unfused)
                assert (steps, want_steps) == (1, 2)
                assert schemas == want_schemas and len(schemas) == 1
                assert rows == want_rows and len(rows) == 2000
                assert biggest <= int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch"))
                assert batches >= 2000 // biggest
            if conf:
                (schemas, *_), _ = _seen(df.select("key", "timestamp"))
                assert schemas == {"key: large_binary\ntimestamp: timestamp[us, tz=America/New_York]"}
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)


def test_select_and_count_over_read_kafka_run_in_the_read_tasks(spark, any_kafka_peer, unique_topic, monkeypatch):
    """select(names) over read_kafka's DataFrame gives the rows and schema of Spark's projection,
    whose columns stay the parent's (they resolve after it); count() over either counts in the
    read tasks (only the selected columns read); on Kafka 4.3 and 3.9 and Tansu."""
    from pyspark.sql import functions as F

    from kwire.spark import dataframe

    peer = any_kafka_peer
    create(peer, unique_topic, 3)
    produce(peer, unique_topic, [(i % 3, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)] if i % 4 else None)
                                 for i in range(300)])
    df = ks.read_kafka(spark, **options(peer, unique_topic, includeHeaders="true"))
    counted = []
    real = dataframe.count_read
    monkeypatch.setattr(dataframe, "count_read", lambda *a: counted.append(1) or real(*a))
    for names in (["value", "partition"], ["headers", "offset", "key"], ["*"]):
        pruned = df.select(*names)
        spark_projection = df.filter(F.lit(True)).select(*names)
        assert pruned.schema == spark_projection.schema
        assert sorted(map(repr, pruned.collect())) == sorted(map(repr, spark_projection.collect()))
        assert pruned.count() == 300
    # the selection's columns are the parent's (Spark's projection): its columns resolve after it
    assert df.select("key", "value").filter(df.partition.isNull() | df.value.isNotNull()).count() == 300
    assert df.select("key", "value").withColumn("v", df.value.cast("string")).filter("v like 'v1%'").count() == \
        df.filter(F.lit(True)).filter(F.col("value").cast("string").like("v1%")).count()
    assert df.select("*").select(df.key).count() == 300 and len(df.select("key").orderBy(df.key).collect()) == 300
    fresh = ks.read_kafka(spark, **options(peer, unique_topic, includeHeaders="true"))
    assert fresh.select("offset").count() == 300
    # count() is a Python RDD job: the DataFrame's Java side was never made (no Spark SQL query)
    assert fresh.__dict__.get("_kwire_jdf") is None
    assert df.count() == 300 and df.select("key").count() == 300
    assert len(counted) == 6
    assert df.filter(F.col("partition") == 1).count() == 100 and len(counted) == 6  # Spark's count


def _plain_columns(batches):
    """Every plain Spark type, nulls included, from the records read."""
    import pyarrow as pa

    for b in batches:
        offsets = b.column("offset").to_pylist()
        values = b.column("value").to_pylist()
        yield pa.RecordBatch.from_arrays([
            pa.array(offsets, pa.int64()), pa.array([o % 7 if o % 5 else None for o in offsets], pa.int32()),
            pa.array([o % 100 for o in offsets], pa.int16()), pa.array([o % 3 for o in offsets], pa.int8()),
            pa.array([o / 3 if o % 4 else None for o in offsets], pa.float64()),
            pa.array([o / 8 for o in offsets], pa.float32()), pa.array([o % 2 == 0 for o in offsets], pa.bool_()),
            pa.array([None if v is None else v.decode() + "-é" for v in values], pa.string()),
            pa.array(values, pa.binary())],
            names=["o", "i", "s", "b", "d", "f", "t", "text", "raw"])


_PLAIN_DDL = "o long, i int, s short, b byte, d double, f float, t boolean, text string, raw binary"


def _wrong_type(batches):
    import pyarrow as pa

    for b in batches:
        yield pa.RecordBatch.from_arrays([pa.array([1] * b.num_rows, pa.int32())], names=["n"])


def _with_nulls(batches):
    import pyarrow as pa

    for b in batches:
        yield pa.RecordBatch.from_arrays([b.column(0), pa.array([None] * b.num_rows, pa.int64())], names=["o", "x"])


def _sizes_and_zone(batches):
    import pyarrow as pa

    biggest, zone = 0, None
    for b in batches:
        biggest, zone = max(biggest, b.num_rows), b.schema.field("timestamp").type.tz
    yield pa.RecordBatch.from_pydict({"biggest": [biggest], "zone": [zone]})


def test_count_and_collect_run_by_kwire_fail_as_jobs_fail(spark, kafka, unique_topic, tmp_path):
    """The actions kwire runs as RDD jobs fail the way the Spark SQL ones do: a function that
    raises fails collect() with its message (and is not retried through Spark's collect); a
    planned range whose records were deleted after planning (DeleteRecords: Apache Kafka) fails
    count() and collect() in the tasks with DataLossError, or, with failOnDataLoss=false,
    counts what is left."""
    peer = kafka
    from pyspark.sql import functions as F

    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 10)
    df = ks.read_kafka(spark, **options(peer, unique_topic))
    calls = tmp_path / "calls"  # local[2]: the workers write where the test reads (a failed
    # task's accumulator updates are dropped, so they cannot count)

    def boom(batches):
        with open(calls, "a") as f:
            f.write("call\n")
        for _ in batches:
            raise ValueError("boom in the user's function")
        yield from ()

    with pytest.raises(Exception, match="boom in the user's function"):
        df.select("value").mapInArrow(boom, "n long").collect()
    assert calls.read_text().count("call") == len(df._kwire_read.groups)  # once a task: no second run via Spark
    # records deleted between planning and the action: the read tasks find the log start moved
    lost = ks.read_kafka(spark, **options(peer, unique_topic))
    kept = ks.read_kafka(spark, **options(peer, unique_topic, failOnDataLoss="false"))
    delete_records(peer, unique_topic, {0: 5})
    for action in (lost.count, lost.select("offset").count,
                   lambda: lost.mapInArrow(_plain_columns_of_offsets, "o long").collect()):
        with pytest.raises(Exception, match="DataLossError"):
            action()
    assert kept.count() == kept.filter(F.lit(True)).count() == 15
    assert sorted(r.o for r in kept.mapInArrow(_plain_columns_of_offsets, "o long").collect()) == \
        sorted(list(range(5, 10)) + list(range(10)))


def _plain_columns_of_offsets(batches):
    import pyarrow as pa

    for b in batches:
        yield pa.RecordBatch.from_arrays([b.column("offset")], names=["o"])


def test_collect_of_a_fused_mapInArrow_over_nothing_is_empty(spark, peer, unique_topic):
    """No records planned: Spark calls no mapInArrow function, so collect() is [] (not one
    call over nothing), as through Spark's plan."""
    from pyspark.sql import functions as F

    create(peer, unique_topic, 2)
    df = ks.read_kafka(spark, **options(peer, unique_topic))

    def total(batches):
        import pyarrow as pa

        yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]}, schema=pa.schema([("n", pa.int64())]))

    assert df.mapInArrow(total, "n long").collect() == df.filter(F.lit(True)).mapInArrow(total, "n long").collect() == []
    assert df.count() == 0


def test_collect_of_a_fused_mapInArrow_is_sparks_collect(spark, peer, unique_topic, monkeypatch):
    """collect() of mapInArrow over read_kafka runs as a Python RDD job for plain columns and
    gives exactly the rows (values, types, order, names) Spark's own collect gives; other
    schemas, and batches not of the schema's types, are Spark's own collect (and fail as
    Spark fails)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from kwire.spark import dataframe
    from kwire.spark.frame import KafkaArrowFrame

    create(peer, unique_topic, 3)
    produce(peer, unique_topic, [(i % 3, None, None if i % 9 == 4 else b"v%d" % i, None) for i in range(900)])
    df = ks.read_kafka(spark, **options(peer, unique_topic))
    ran = []
    real = dataframe.collect_in_tasks
    monkeypatch.setattr(dataframe, "collect_in_tasks", lambda *a: ran.append(real(*a)) or ran[-1])
    for schema in (_PLAIN_DDL, StructType.fromDDL(_PLAIN_DDL)):
        fused = df.select("offset", "value").mapInArrow(_plain_columns, schema)
        assert isinstance(fused, KafkaArrowFrame)
        got = fused.collect()
        want = df.filter(F.lit(True)).select("offset", "value").mapInArrow(_plain_columns, schema).collect()
        assert ran[-1] is not None and fused.__dict__.get("_kwire_jdf") is None  # no Spark SQL query ran
        assert got == want and len(got) == 900
        assert [r.asDict() for r in got] == [r.asDict() for r in want]
        assert [[type(v) for v in r] for r in got] == [[type(v) for v in r] for r in want]
    with pytest.raises(Exception, match="notatype|PARSE|DATATYPE"):  # a bad schema fails at once, as Spark's
        df.mapInArrow(_plain_columns, "a notatype")
    with pytest.raises(Exception) as spark_s:  # not a struct: Spark's mapInArrow refuses it, its way
        df.filter(F.lit(True)).mapInArrow(_plain_columns, "long")
    with pytest.raises(type(spark_s.value)) as ours:
        df.mapInArrow(_plain_columns, "long")
    assert str(ours.value) == str(spark_s.value)
    # what Spark's collect refuses, this one does not answer either: duplicate names, a null
    # in a non-nullable column
    def outcome(frame):
        try:
            return sorted(map(repr, frame.collect()))
        except Exception as e:  # Spark's failure
            return type(e).__name__

    for schema in ("o long, O long", StructType.fromDDL("o long").add("x", "long", nullable=False)):
        fused = df.select("offset").mapInArrow(_with_nulls, schema)
        assert outcome(fused) == outcome(df.filter(F.lit(True)).select("offset").mapInArrow(_with_nulls, schema))
        assert ran[-1] is None  # Spark's own collect answered (or failed)
    # the session's confs are read when the action runs, as Spark reads them
    sizes = df.select("timestamp").mapInArrow(_sizes_and_zone, "biggest long, zone string")
    before = {k: spark.conf.get(k) for k in ("spark.sql.session.timeZone", "spark.sql.execution.arrow.maxRecordsPerBatch")}
    try:
        spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "13")
        assert {(r.biggest, r.zone) for r in sizes.collect()} == {(13, "Asia/Tokyo")} and ran[-1] is not None
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    nested = df.mapInArrow(_what_the_function_sees, _SEES_DDL)
    assert len(nested.collect()) >= 1 and ran[-1] is None  # an array column: Spark's collect
    with pytest.raises(Exception, match="getLong|UNSUPPORTED_CALL|ArrowColumnVector"):
        df.mapInArrow(_wrong_type, "n long").collect()  # int32 for a long: Spark's own failure
    assert ran[-1] is None


_READ_TASKS_IN_A_FRESH_WORKER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import pyarrow as pa
from kwire.spark import dataframe as d
from kwire.spark.arrow import ArrowBatchLayout, kafka_arrow_schema
from kwire.spark.planner import OffsetRange
from kwire.spark.reader import ReadSettings

settings = ReadSettings({"bootstrap.servers": sys.argv[2]}, False, True, 30000)
groups = [[OffsetRange(sys.argv[3], 0, 0, 50)]]
target = pa.schema([f.with_type(pa.timestamp("us", tz="Asia/Tokyo")) if f.name == "timestamp" else f
                    for f in kafka_arrow_schema()])
task = d._FusedArrowTaskGroups(settings, groups, lambda batches: batches, None, ArrowBatchLayout(target, 7, None))
blobs = list(d._IpcBatches(task)(iter([0])))
rows = sum(b.num_rows for blob in blobs for b in pa.ipc.open_stream(blob))
counted = list(d._GroupCounter(settings)(iter(groups)))
print(json.dumps({"pandas": "pandas" in sys.modules, "rows": rows, "blobs": len(blobs), "counted": counted}))
"""


def test_read_tasks_do_not_import_pandas(peer, unique_topic):
    """What read_kafka's tasks run in a fresh Python worker -- a fused mapInArrow cut to
    Spark's layout (a cast and slices), its batches for collect(), the count -- imports no
    pandas: a cold worker would pay ~0.2 s for it (pa.array() imports it)."""
    create(peer, unique_topic, 1)
    fill(peer, unique_topic, 1, 50)
    out = subprocess.run([sys.executable, "-c", _READ_TASKS_IN_A_FRESH_WORKER, str(ROOT), peer.bootstrap, unique_topic],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"pandas": False, "rows": 50, "blobs": 8, "counted": [50]}


def test_mapInArrow_over_read_kafka_stays_sparks_where_it_must(spark, peer, unique_topic):
    """Expressions, a cached read, barrier mode and commitToGroup keep Spark's own mapInArrow
    (two Python stages; same answer)."""
    from pyspark.sql import functions as F

    from kwire.spark.frame import KafkaDataFrame

    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 50)
    df = ks.read_kafka(spark, **options(peer, unique_topic))
    want = _seen(df)[0][3]
    assert not isinstance(df.select(F.col("key")), KafkaDataFrame)
    assert not isinstance(df.select("key", "key"), KafkaDataFrame)
    assert not isinstance(df.select("KEY"), KafkaDataFrame)  # resolved by Spark, not by name here
    barrier = df.mapInArrow(_what_the_function_sees, _SEES_DDL, barrier=True)
    assert barrier._jdf.queryExecution().optimizedPlan().toString().count("MapInArrow") == 2
    assert sorted(x for r in barrier.collect() for x in r.rows) == want
    cached = ks.read_kafka(spark, **options(peer, unique_topic)).cache()
    try:
        assert cached.count() == 100
        assert not isinstance(cached.select("key"), KafkaDataFrame)  # Spark's projection of the cache
        (_, _, _, rows), _ = _seen(cached)
        plan = cached.mapInArrow(_what_the_function_sees, _SEES_DDL)._jdf.queryExecution().toString()
        assert "InMemoryRelation" in plan and rows == want
    finally:
        cached.unpersist()
    committing = ks.read_kafka(spark, **options(peer, unique_topic, commitToGroup=unique_topic + "-g",
                                                startingOffsets="earliest"))
    assert not isinstance(committing, KafkaDataFrame)


def _stop_after_first_batch(batches):
    import pyarrow as pa

    first = next(iter(batches), None)
    yield pa.RecordBatch.from_pydict({"n": [0 if first is None else first.num_rows]})


def _fail_in_function(batches):
    for _ in batches:
        raise ValueError("boom in the user's function")
    yield from ()


def test_map_kafka_arrow_commits_only_after_the_function_read_everything(spark, peer, unique_topic):
    """commitToGroup through map_kafka_arrow: a function that fails, or stops before the end of
    its ranges, commits nothing; one that reads everything commits the planned ends."""
    group = unique_topic + "-g"
    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 10)
    opts = options(peer, unique_topic, commitToGroup=group, startingOffsets="earliest")
    nothing = {(unique_topic, 0): None, (unique_topic, 1): None}

    failing = ks.map_kafka_arrow(spark, _fail_in_function, "n long", **opts)
    with pytest.raises(Exception, match="boom in the user's function"):
        failing.collect()
    stopping = ks.map_kafka_arrow(spark, _stop_after_first_batch, "n long", **opts)
    assert sum(r.n for r in stopping.collect()) > 0
    settle(failing, 1)
    settle(stopping, 1)
    assert committed(peer, unique_topic, group, 2) == nothing

    counting = ks.map_kafka_arrow(
        spark, lambda bs: iter([__import__("pyarrow").RecordBatch.from_pydict(
            {"n": [sum(b.num_rows for b in bs)]})]), "n long", **opts)
    assert len(counting.limit(1).collect()) == 1  # a partial action: the function read all, still
    settle(counting, 1)
    assert committed(peer, unique_topic, group, 2) == nothing
    assert sum(r.n for r in counting.collect()) == 20
    assert ks.await_commit(counting, 30) == {(unique_topic, 0): 10, (unique_topic, 1): 10}
    assert committed(peer, unique_topic, group, 2) == {(unique_topic, 0): 10, (unique_topic, 1): 10}
