"""Kafka into PySpark through kwire: local[2] Spark against Tansu.

One SparkSession for the run (the ``spark`` fixture); topics are small.  Test data is written
with confluent-kafka, so what Spark reads was not produced by kwire.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import pyarrow as pa
import pyarrow.compute as pc

import kwire.spark as ks
from kwire.embedded import free_port
from kwire.errors import ConfigError, KwireError, UnknownTopicOrPartitionError
from kwire.spark import dataframe as spark_df
from kwire.spark.offset_reader import OffsetReader, UnreachableClusterError

pytestmark = [pytest.mark.spark, pytest.mark.tansu]


# --- helpers ------------------------------------------------------------------------------------

def create(tansu, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(10)


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

def test_subscribe_pattern_and_assign_select_partitions(tansu, unique_topic):
    create(tansu, unique_topic + "-a", 2)
    create(tansu, unique_topic + "-b", 1)
    boot = {"kafka.bootstrap.servers": tansu.bootstrap}

    def partitions(**kw):
        with OffsetReader(ks.parse_options({**boot, **kw})) as r:
            return r.partitions()

    assert partitions(subscribePattern=unique_topic + "-.*") == \
        [(unique_topic + "-a", 0), (unique_topic + "-a", 1), (unique_topic + "-b", 0)]
    assert partitions(subscribePattern=unique_topic) == []  # a full match, as in Java
    assert partitions(assign='{"%s-a": [1]}' % unique_topic) == [(unique_topic + "-a", 1)]
    with pytest.raises(UnknownTopicOrPartitionError, match="-a-5 .topic has 2 partitions"):
        partitions(assign='{"%s-a": [5]}' % unique_topic)


# --- batch reads --------------------------------------------------------------------------------

@pytest.mark.parametrize("reader", ["datasource", "mapInArrow", "rows"])
def test_read_kafka_returns_exactly_the_records(spark, tansu, unique_topic, reader):
    create(tansu, unique_topic, 3)
    expected = {}
    records = []
    for i in range(60):
        p = i % 3
        key = None if i % 10 == 0 else b"key-%d" % i
        value = None if i % 17 == 5 else b"value-%d" % i
        headers = [("n", b"%d" % i), ("empty", None)] if i % 2 else None
        records.append((p, key, value, headers))
        expected.setdefault(p, []).append((key, value, [("n", b"%d" % i), ("empty", None)] if i % 2 else []))
    produce(tansu, unique_topic, records)

    t0 = time.time()
    df = ks.read_kafka(spark, reader=reader, **options(tansu, unique_topic, includeHeaders="true"))
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


def test_data_source_splits_ranges(registered, tansu, unique_topic):
    spark = registered
    create(tansu, unique_topic, 2)
    fill(tansu, unique_topic, 2, 30)
    df = spark.read.format("kwire").options(**options(tansu, unique_topic, minPartitions=5)).load()
    assert df.rdd.getNumPartitions() == 5
    assert offsets_of(df) == {0: list(range(30)), 1: list(range(30))}
    df = spark.read.format("kwire").options(**options(tansu, unique_topic, maxRecordsPerPartition=7)).load()
    assert df.rdd.getNumPartitions() == 10  # ceil(30 / 7) = 5 per partition
    assert df.count() == 60


@pytest.fixture(scope="module")
def phases(tansu):
    """A topic written in three phases A, B, C (10 records per partition each, offsets 0-9,
    10-19, 20-29), with the times T1 (between A and B) and T2 (between B and C)."""
    topic = f"t-phases-{time.time_ns()}"
    create(tansu, topic, 2)
    times = []
    for phase in range(3):
        if phase:
            time.sleep(0.05)
            times.append(int(time.time() * 1000))
            time.sleep(0.05)
        fill(tansu, topic, 2, 10, start=10 * phase)
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
def test_starting_and_ending_offsets(spark, tansu, phases, form, expected):
    topic, t1, t2 = phases
    kw = form(topic, t1, t2)
    if "startingOffsets" in kw and '"1": 25' in kw["startingOffsets"]:
        kw["failOnDataLoss"] = "false"  # t-1 would start at 25 but end at 10: skipped, not failed
    df = ks.read_kafka(spark, **options(tansu, topic, **kw))
    assert offsets_of(df) == {p: list(r) for p, r in expected.items() if len(r)}


def test_a_starting_timestamp_with_no_record_is_an_error(tansu, phases):
    topic, _, t2 = phases
    o = ks.parse_options(options(tansu, topic, startingTimestamp=t2 + 3_600_000))
    with OffsetReader(o) as r, pytest.raises(KwireError, match="no record at or after the starting timestamp"):
        r.plan_batch()


def test_group_start_and_commit_round_trip(spark, tansu, unique_topic):
    create(tansu, unique_topic, 2)
    fill(tansu, unique_topic, 2, 10)
    group = unique_topic + "-g"
    kw = options(tansu, unique_topic, startingOffsets="group", commitToGroup=group,
                 **{"kafka.auto.offset.reset": "earliest"})
    df = ks.read_kafka(spark, **kw)
    assert df.count() == 20
    assert ks.await_commit(df, 30) == {(unique_topic, 0): 10, (unique_topic, 1): 10}

    fill(tansu, unique_topic, 2, 5, start=10)
    df = ks.read_kafka(spark, **kw)
    assert offsets_of(df) == {0: list(range(10, 15)), 1: list(range(10, 15))}
    ks.await_commit(df, 30)
    with OffsetReader(ks.parse_options(options(tansu, unique_topic))) as r:
        assert r.committed(group, [(unique_topic, 0), (unique_topic, 1)]) == \
            {(unique_topic, 0): 15, (unique_topic, 1): 15}
    # a group with nothing committed starts per kafka.auto.offset.reset
    fresh = options(tansu, unique_topic, startingOffsets="group", **{"kafka.group.id": group + "-new",
                                                                      "kafka.auto.offset.reset": "latest"})
    assert ks.read_kafka(spark, **fresh).count() == 0


def test_fail_on_data_loss(spark, tansu, unique_topic):
    # Tansu has no DeleteRecords, so the lost offsets are ones past the end of the log.
    create(tansu, unique_topic, 2)
    fill(tansu, unique_topic, 2, 10)
    gone = '{"%s": {"0": 50}}' % unique_topic
    with pytest.raises(ks.DataLossError, match="failOnDataLoss=false"):
        ks.read_kafka(spark, **options(tansu, unique_topic, startingOffsets=gone))
    df = ks.read_kafka(spark, **options(tansu, unique_topic, startingOffsets=gone, failOnDataLoss="false"))
    assert offsets_of(df) == {1: list(range(10))}

    # executors: a planned range past the end of the log
    sc = spark.sparkContext
    config = {"bootstrap.servers": tansu.bootstrap}
    rdd = ks.kafka_rdd(sc, config, [(unique_topic, 0, 5, 25)])
    with pytest.raises(Exception, match="DataLossError"):
        rdd.collect()
    rdd = ks.kafka_rdd(sc, config, [(unique_topic, 0, 5, 25)], fail_on_data_loss=False)
    assert [r.offset for r in rdd.collect()] == list(range(5, 10))


def test_kafka_rdd_rows(spark, tansu, unique_topic):
    create(tansu, unique_topic, 2)
    produce(tansu, unique_topic, [(i % 2, b"k%d" % i, b"v%d" % i, [("h", b"x")]) for i in range(20)])
    ranges = [(unique_topic, 0, 2, 7), ks.OffsetRange(unique_topic, 1, 0, 10)]
    rdd = ks.kafka_rdd(spark.sparkContext, {"bootstrap.servers": tansu.bootstrap}, ranges, include_headers=True)
    assert rdd.getNumPartitions() == 2
    rows = rdd.collect()
    assert [(r.partition, r.offset) for r in rows] == [(0, o) for o in range(2, 7)] + [(1, o) for o in range(10)]
    first = rows[0]
    assert isinstance(first, ks.KafkaRowWithHeaders)
    assert (first.key, first.value, first.topic, first.headers) == (b"k4", b"v4", unique_topic, [("h", b"x")])
    df = spark.createDataFrame(rdd, ks.kafka_schema(include_headers=True))
    assert df.count() == 15


def test_max_partitions_packs_ranges_for_read_kafka_and_the_data_source(registered, tansu, unique_topic):
    spark = registered
    create(tansu, unique_topic, 5)
    fill(tansu, unique_topic, 5, 12)
    expected = {p: list(range(12)) for p in range(5)}
    df = ks.read_kafka(spark, **options(tansu, unique_topic, maxPartitions=2))
    assert df.rdd.getNumPartitions() == 2 and offsets_of(df) == expected
    per_task = df.rdd.mapPartitions(lambda rows: [sorted({r.partition for r in rows})]).collect()
    assert sorted(per_task) == [[0, 2, 4], [1, 3]]  # 12 records each: 36 and 24
    df = spark.read.format("kwire").options(**options(tansu, unique_topic, maxPartitions=2)).load()
    assert df.rdd.getNumPartitions() == 2 and offsets_of(df) == expected
    df = spark.read.format("kwire").options(**options(tansu, unique_topic, maxPartitions=9)).load()
    assert df.rdd.getNumPartitions() == 5 and df.count() == 60


def test_kafka_arrow_rdd_and_packed_partitions(spark, tansu, unique_topic):
    """Arrow batches of exactly the planned ranges; num_partitions packs 5 ranges into 2 tasks
    of even record counts (rows and Arrow agree)."""
    create(tansu, unique_topic, 5)
    produce(tansu, unique_topic, [(i % 5, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)]) for i in range(100)])
    config = {"bootstrap.servers": tansu.bootstrap}
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
def test_read_kafka_readers_pack_and_start_where_asked(spark, tansu, unique_topic, reader):
    create(tansu, unique_topic, 2)
    fill(tansu, unique_topic, 2, 8)
    df = ks.read_kafka(spark, reader=reader, **options(tansu, unique_topic, maxPartitions=1,
                                                       startingOffsets='{"%s": {"1": 3}}' % unique_topic))
    assert df.rdd.getNumPartitions() == 1
    assert offsets_of(df) == {0: list(range(8)), 1: list(range(3, 8))}


@pytest.mark.parametrize("missing, expected", [((), "datasource"), (("dataSource",), "mapInArrow"),
                                               (("dataSource", "pandas"), "rows"), (("pyarrow",), "rows")])
def test_read_kafka_auto_picks_what_is_installed(spark, tansu, unique_topic, monkeypatch, missing, expected):
    create(tansu, unique_topic, 1)
    fill(tansu, unique_topic, 1, 5)
    have = spark_df._have
    monkeypatch.setattr(spark_df, "_have", lambda m: m not in missing and have(m))
    available = spark_df._data_source_available
    monkeypatch.setattr(spark_df, "_data_source_available",
                        lambda s: "dataSource" not in missing and available(s))
    df = ks.read_kafka(spark, **options(tansu, unique_topic))
    plan = df._jdf.queryExecution().analyzed().toString()  # its top node says which reader
    top = {"datasource": "RelationV2", "mapInArrow": "MapInArrow", "rows": "LogicalRDD"}[expected]
    assert plan.startswith(top), plan
    assert offsets_of(df) == {0: list(range(5))}
    with pytest.raises(ConfigError, match="reader must be one of"):
        ks.read_kafka(spark, reader="jdbc", **options(tansu, unique_topic))


def test_transaction_markers_leave_gaps_that_ranges_step_over(registered, tansu, unique_topic):
    spark = registered
    create(tansu, unique_topic, 1)
    p = Producer({"bootstrap.servers": tansu.bootstrap, "transactional.id": unique_topic})
    p.init_transactions(10)
    for txn in range(3):
        p.begin_transaction()
        for i in range(3):
            p.produce(unique_topic, value=b"%d-%d" % (txn, i), partition=0)
        p.commit_transaction(10)
    # offsets: 0-2, marker 3, 4-6, marker 7, 8-10, marker 11
    df = spark.read.format("kwire").options(**options(tansu, unique_topic, maxRecordsPerPartition=2)).load()
    assert df.rdd.getNumPartitions() == 6  # several ranges end on a marker
    rows = sorted((r.offset, r.value) for r in df.collect())
    assert rows == [(o, b"%d-%d" % (o // 4, o % 4)) for o in range(12) if o % 4 != 3]


# --- streaming ----------------------------------------------------------------------------------

def test_streaming_micro_batches_read_new_records_exactly_once(registered, tansu, unique_topic, tmp_path):
    spark = registered
    create(tansu, unique_topic, 2)
    fill(tansu, unique_topic, 2, 10)
    group = unique_topic + "-g"
    seen: list[tuple[int, list]] = []

    def collect(batch_df, batch_id):
        seen.append((batch_id, [(r.partition, r.offset, r.value) for r in batch_df.collect()]))

    def run():
        stream = (spark.readStream.format("kwire")
                  .options(**options(tansu, unique_topic, startingOffsets="earliest", maxOffsetsPerTrigger=8,
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

    fill(tansu, unique_topic, 2, 5, start=10)
    n = len(seen)
    run()
    second = [r for _, rows in seen[n:] for r in rows]
    assert sorted((p, o) for p, o, _ in second) == [(p, o) for p in range(2) for o in range(10, 15)]
    assert {(p, o) for p, o, _ in second}.isdisjoint({(p, o) for p, o, _ in first})
    assert all(v == b"%d-%d" % (p, o) for p, o, v in first + second)
    with OffsetReader(ks.parse_options(options(tansu, unique_topic))) as r:
        assert r.committed(group, [(unique_topic, 0), (unique_topic, 1)]) == \
            {(unique_topic, 0): 15, (unique_topic, 1): 15}


def test_streaming_with_max_partitions_packs_each_micro_batch(registered, tansu, unique_topic, tmp_path):
    spark = registered
    create(tansu, unique_topic, 3)
    fill(tansu, unique_topic, 3, 6)
    seen: list[tuple[int, list]] = []

    def collect(batch_df, batch_id):
        seen.append((batch_df.rdd.getNumPartitions(), [(r.partition, r.offset) for r in batch_df.collect()]))

    stream = (spark.readStream.format("kwire")
              .options(**options(tansu, unique_topic, startingOffsets="earliest", maxPartitions=1)).load())
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


def test_missing_topic(registered, tansu, unique_topic):
    with pytest.raises(UnknownTopicOrPartitionError, match=f"topic '{unique_topic}' does not exist"):
        ks.read_kafka(registered, **options(tansu, unique_topic))
    with pytest.raises(Exception, match="does not exist"):  # planning, before any task
        registered.read.format("kwire").options(**options(tansu, unique_topic)).load().collect()


def test_unreachable_cluster(registered):
    dead = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(UnreachableClusterError, match=f"cannot reach Kafka at kafka.bootstrap.servers={dead}"):
        ks.read_kafka(registered, **{"kafka.bootstrap.servers": dead, "subscribe": "t"})
    assert time.monotonic() - t0 < 10
    with pytest.raises(Exception, match="cannot reach Kafka"):
        registered.read.format("kwire").option("kafka.bootstrap.servers", dead).option("subscribe", "t") \
            .load().collect()
