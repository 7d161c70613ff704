"""Where the log has holes, on Apache Kafka 4.3: compaction, DeleteRecords and retention.

* A compacted topic has gaps (overwritten keys, removed tombstones) and tombstones: kwire's
  Consumer and every Spark reader step over the gaps, stop exactly at ``until`` and return
  exactly the records a plain confluent-kafka read sees (Spark's own source hung or failed
  here: SPARK-25005).
* DeleteRecords and retention move the log start above a consumer's position: the Fetch answers
  OFFSET_OUT_OF_RANGE and the consumer resets per ``auto.offset.reset`` -- earliest, latest, or
  ``error``, which raises a typed OffsetOutOfRangeError to the application instead of skipping.
* DeleteRecords moves the log start above a Spark read's planned start, before or after the
  plan: with failOnDataLoss=true every reader raises DataLossError; with false it returns
  exactly the surviving records.

Compaction and retention are driven by the broker's own threads; the tests wait for them by
reading the log (with a deadline), never by fixed sleeps.  Only segment rolls need time to
pass: ``segment.ms=100`` rolls a segment at the first append 100 ms after it was opened.
"""
from __future__ import annotations

import time
import uuid

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

import kwire.spark as ks
from kwire import TopicPartition
from kwire.admin import Admin, NewTopic
from kwire.consumer import OFFSET_BEGINNING, Consumer
from kwire.errors import OffsetOutOfRangeError

from .kafka_util import start_kafka, stop_kafka

ROLL_S = 0.15  # just over segment.ms: the next append opens a new segment

COMPACT = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "100", "min.compaction.lag.ms": "0"}


# --- helpers ------------------------------------------------------------------------------------

def new_topic(cluster, name: str, partitions: int = 1, **config) -> str:
    with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1, config=config)], timeout=20,
                            wait_for_leaders=True)
    return name


def produce(cluster, topic: str, records, **config) -> None:
    """``records``: (partition, key, value) or (partition, key, value, timestamp_ms) tuples,
    written in order with confluent-kafka (so what kwire reads was not written by kwire)."""
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, **config})
    for partition, key, value, *ts in records:
        p.produce(topic, key=key, value=value, partition=partition, timestamp=ts[0] if ts else 0)
    assert p.flush(20) == 0


def plain_read(cluster, topic: str, partitions: int, timeout_s: float = 30.0) -> dict[int, list[tuple]]:
    """Every record of ``topic`` as confluent-kafka reads it: {partition: [(offset, key, value)]}."""
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "plain-read",
                                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                  for p in range(partitions)])
        out: dict[int, list[tuple]] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"confluent-kafka did not reach the end of {topic}"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            out[m.partition()].append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def watermarks(cluster, topic: str, partition: int = 0) -> tuple[int, int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "watermarks"})
    try:
        return c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()


def wait_for(what: str, check, timeout_s: float = 45.0, every_s: float = 0.2):
    """Poll ``check()`` until it returns something true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"waited {timeout_s:.0f} s for {what}"
        time.sleep(every_s)


def kconsumer(cluster, reset: str, **config) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap, "auto.offset.reset": reset, **config})


def consume_until(consumer: Consumer, ends: dict[tuple[str, int], int], timeout_s: float = 30.0) -> dict:
    """Records per (topic, partition) until every position reaches its end offset in ``ends``."""
    got: dict[tuple[str, int], list[tuple]] = {tp: [] for tp in ends}
    deadline = time.monotonic() + timeout_s

    def done():
        return all(p.offset >= ends[(p.topic, p.partition)]
                   for p in consumer.position([TopicPartition(t, p) for t, p in ends]))

    while not done():
        assert time.monotonic() < deadline, f"stuck at {consumer.position([TopicPartition(t, p) for t, p in ends])}"
        for m in consumer.consume(100, 0.2):
            got[(m.topic, m.partition)].append((m.offset, m.key, m.value))
    return got


# --- a compacted topic with gaps and tombstones ----------------------------------------------------

def k(p: int, i) -> bytes:
    return b"p%d-%s" % (p, str(i).encode())


def _unique_keys_before(records: list[tuple], end: int) -> bool:
    keys = [key for off, key, _ in records if off < end]
    return len(keys) == len(set(keys))


class Compacted:
    """The topic of :func:`compacted`: ``log[p]`` is every surviving (offset, key, value)."""

    def __init__(self, name: str, log: dict[int, list[tuple]]):
        self.name = name
        self.log = log
        self.end = {p: recs[-1][0] + 1 for p, recs in log.items()}

    def between(self, p: int, lo: int, hi: int) -> list[tuple]:
        return [r for r in self.log[p] if lo <= r[0] < hi]


@pytest.fixture(scope="module")
def compacted(kafka):
    """Two partitions written in rounds, one segment each, then compacted twice by the broker.

    Per partition (offsets)::

        0-9   k0..k9 = r0        10-14 k0..k4 = r1      15-16 tombstones k5 k6   17 k0 = r2
        18    x1 (rolls: the cleaner compacts 0-17; k5/k6's tombstones get a delete horizon)
        19    k7 = r3   20 tombstone k8
        21    x2 (rolls: 18-20 are compacted, k5/k6's tombstones removed)
        22    k1 = r4   23 tombstone k9        (the active segment: never cleaned)

    Survivors: 9 (k9 r0), 11-14 (k1..k4 r1), 17 (k0 r2), 18, 19, 20 (tombstone), 21, 22, 23;
    gaps at 0-8, 10 and 15-16 (removed tombstones)."""
    topic = new_topic(kafka, f"t-compacted-{uuid.uuid4().hex[:8]}", 2, **COMPACT)

    def round_(*items):
        produce(kafka, topic, [(p, k(p, key), value) for p in (0, 1) for key, value in items])
        time.sleep(ROLL_S)

    round_(*((i, b"r0-%d" % i) for i in range(10)))
    round_(*((i, b"r1-%d" % i) for i in range(5)))
    round_((5, None), (6, None), (0, b"r2-0"))
    round_(("x1", b"roll"))  # opens a new segment: 0-17 can be cleaned
    wait_for("the first compaction (0-17)", lambda: all(
        _unique_keys_before(recs, 18) for recs in plain_read(kafka, topic, 2).values()))
    time.sleep(ROLL_S)  # past k5/k6's delete horizon (delete.retention.ms=100)
    round_((7, b"r3-7"), (8, None))
    produce(kafka, topic, [(p, k(p, key), value) for p in (0, 1)
                           for key, value in (("x2", b"roll"), (1, b"r4-1"), (9, None))])

    def survivors(p):
        return [(9, k(p, 9), b"r0-9")] + [(10 + i, k(p, i), b"r1-%d" % i) for i in range(1, 5)] + [
            (17, k(p, 0), b"r2-0"), (18, k(p, "x1"), b"roll"), (19, k(p, 7), b"r3-7"), (20, k(p, 8), None),
            (21, k(p, "x2"), b"roll"), (22, k(p, 1), b"r4-1"), (23, k(p, 9), None)]

    expected = {p: survivors(p) for p in (0, 1)}
    log = wait_for("the second compaction (tombstones of k5, k6 removed)",
                   lambda: (lambda log: log if log == expected else None)(plain_read(kafka, topic, 2)))
    time.sleep(0.5)
    assert plain_read(kafka, topic, 2) == log, "the cleaner went on changing the log"
    return Compacted(topic, log)


def test_consumer_reads_exactly_the_survivors_of_compaction(kafka, compacted):
    t = compacted.name
    # auto.offset.reset=error: a gap must never look like OFFSET_OUT_OF_RANGE
    with kconsumer(kafka, "error") as c:
        c.assign([TopicPartition(t, 0, OFFSET_BEGINNING), TopicPartition(t, 1, 0)])
        got = consume_until(c, {(t, 0): 24, (t, 1): 24})
        assert got == {(t, p): compacted.log[p] for p in (0, 1)}
        assert [tp.offset for tp in c.position([TopicPartition(t, 0), TopicPartition(t, 1)])] == [24, 24]
        # a position inside a gap reads on from the next survivor
        c.seek(TopicPartition(t, 0, 15))
        c.seek(TopicPartition(t, 1, 1))
        got = consume_until(c, {(t, 0): 24, (t, 1): 24})
        assert got == {(t, 0): compacted.between(0, 15, 24), (t, 1): compacted.between(1, 1, 24)}


# Ranges that start, end or lie wholly in gaps: (partition, from, until).
GAP_RANGES = [(0, 0, 24), (1, 10, 17), (0, 15, 17), (1, 1, 9), (0, 19, 21), (1, 12, 23), (0, 0, 10)]


def expected_rows(log: Compacted, ranges) -> list[tuple]:
    return sorted((p, *r) for p, lo, hi in ranges for r in log.between(p, lo, hi))


def spark_options(cluster, topic: str, **kw) -> dict:
    # a reader waiting for offsets that do not exist fails after 30 s instead of hanging
    return {"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
            "kafkaConsumer.pollTimeoutMs": "30000", **kw}


def row_tuples(rows) -> list[tuple]:
    return sorted((r.partition, r.offset, r.key, r.value) for r in rows)


def arrow_tuples(batches) -> list[tuple]:
    out = []
    for b in batches:
        cols = [b.column(n).to_pylist() for n in ("partition", "offset", "key", "value")]
        out.extend(zip(*cols))
    return sorted(out)


@pytest.fixture(scope="module")
def registered(spark):
    ks.register(spark)
    return spark


def test_kafka_rdd_and_kafka_arrow_rdd_read_ranges_with_gaps_exactly(spark, kafka, compacted):
    sc = spark.sparkContext
    config = {"bootstrap.servers": kafka.bootstrap}
    ranges = [(compacted.name, p, lo, hi) for p, lo, hi in GAP_RANGES]
    want = expected_rows(compacted, GAP_RANGES)
    assert ks.kafka_rdd(sc, config, ranges, poll_timeout_ms=30_000).getNumPartitions() == len(ranges)
    assert row_tuples(ks.kafka_rdd(sc, config, ranges, poll_timeout_ms=30_000).collect()) == want
    assert row_tuples(ks.kafka_rdd(sc, config, ranges, num_partitions=2, poll_timeout_ms=30_000).collect()) == want
    assert arrow_tuples(ks.kafka_arrow_rdd(sc, config, ranges, poll_timeout_ms=30_000).collect()) == want
    assert arrow_tuples(ks.kafka_arrow_rdd(sc, config, ranges, num_partitions=2,
                                           poll_timeout_ms=30_000).collect()) == want


@pytest.mark.parametrize("reader", ["datasource", "mapInArrow", "rows"])
def test_read_kafka_stops_at_until_inside_gaps(spark, kafka, compacted, reader):
    t = compacted.name
    df = ks.read_kafka(spark, reader=reader, **spark_options(kafka, t))
    assert row_tuples(df.collect()) == expected_rows(compacted, [(0, 0, 24), (1, 0, 24)])
    assert df.count() == 2 * 12
    # both ends inside gaps: [10, 17) of partition 0 (10 and 15-16 are gone), [1, 9) of 1 (all gone)
    df = ks.read_kafka(spark, reader=reader, **spark_options(
        kafka, t, startingOffsets='{"%s": {"0": 10, "1": 1}}' % t,
        endingOffsets='{"%s": {"0": 17, "1": 9}}' % t))
    assert row_tuples(df.collect()) == expected_rows(compacted, [(0, 10, 17), (1, 1, 9)])
    assert df.count() == 4


def test_data_source_splits_compacted_ranges_into_gaps(registered, kafka, compacted):
    t = compacted.name
    # 10 splits of 2 x 24 offsets: several splits hold no surviving record at all
    df = registered.read.format("kwire").options(**spark_options(kafka, t, minPartitions="10")).load()
    assert df.rdd.getNumPartitions() >= 10
    assert row_tuples(df.collect()) == expected_rows(compacted, [(0, 0, 24), (1, 0, 24)])
    df = registered.read.format("kwire").options(**spark_options(
        kafka, t, startingOffsets='{"%s": {"0": 15, "1": 19}}' % t,
        endingOffsets='{"%s": {"0": 21, "1": 23}}' % t, maxRecordsPerPartition="2")).load()
    assert row_tuples(df.collect()) == expected_rows(compacted, [(0, 15, 21), (1, 19, 23)])


# --- DeleteRecords moves the log start ---------------------------------------------------------------

def deleted_below(cluster, name: str, *, records: int = 20, log_start: int = 12) -> str:
    """A 1-partition topic of ``records`` records in one batch, then DeleteRecords up to
    ``log_start`` -- inside the batch, so Fetch still returns records below the log start."""
    topic = new_topic(cluster, name)
    produce(cluster, topic, [(0, b"k%d" % i, b"v%d" % i) for i in range(records)], **{"linger.ms": 200})
    with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
        assert admin.delete_records({(topic, 0): log_start}) == {(topic, 0): log_start}
    assert watermarks(cluster, topic) == (log_start, records)
    return topic


def test_delete_records_then_reset_to_earliest(kafka, unique_topic):
    t = deleted_below(kafka, unique_topic)
    with kconsumer(kafka, "earliest") as c:
        c.assign([TopicPartition(t, 0, 3)])  # below the log start: OFFSET_OUT_OF_RANGE
        got = consume_until(c, {(t, 0): 20})
        assert got == {(t, 0): [(o, b"k%d" % o, b"v%d" % o) for o in range(12, 20)]}


def test_delete_records_then_reset_to_latest(kafka, unique_topic):
    t = deleted_below(kafka, unique_topic)
    with kconsumer(kafka, "latest") as c:
        c.assign([TopicPartition(t, 0, 3)])
        assert consume_until(c, {(t, 0): 20}) == {(t, 0): []}
        produce(kafka, t, [(0, None, b"new%d" % i) for i in range(3)])
        got = consume_until(c, {(t, 0): 23})
        assert got == {(t, 0): [(20 + i, None, b"new%d" % i) for i in range(3)]}


@pytest.mark.parametrize("reset", ["error", "none"])  # librdkafka's name, Java's
def test_delete_records_then_error_reaches_the_application(kafka, unique_topic, reset):
    t = deleted_below(kafka, unique_topic)
    with kconsumer(kafka, reset) as c:
        c.assign([TopicPartition(t, 0, 3)])
        deadline = time.monotonic() + 30
        with pytest.raises(OffsetOutOfRangeError, match=rf"{t} \[0\] offset 3"):
            while time.monotonic() < deadline:
                assert c.consume(10, 0.5) == []  # nothing is skipped to
        # no silent reset afterwards either: the partition waits for seek()
        assert c.consume(10, 1.0) == []
        assert c.position([TopicPartition(t, 0)])[0].offset < 12
        c.seek(TopicPartition(t, 0, OFFSET_BEGINNING))
        got = consume_until(c, {(t, 0): 20})
        assert got == {(t, 0): [(o, b"k%d" % o, b"v%d" % o) for o in range(12, 20)]}



@pytest.mark.parametrize("reset", ["earliest", "error"])
def test_delete_records_under_a_paused_consumer(kafka, unique_topic, reset):
    """The log start passes a consumer's position while it holds still (paused: its buffered
    records are dropped, and it fetches again from its position on resume)."""
    t = new_topic(kafka, unique_topic)
    produce(kafka, t, [(0, b"k%d" % i, b"v%d" % i) for i in range(20)], **{"linger.ms": 200})
    with kconsumer(kafka, reset) as c:
        c.assign([TopicPartition(t, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 3:
            assert time.monotonic() < deadline
            got += c.consume(3 - len(got), 0.5)
        assert [m.offset for m in got] == [0, 1, 2]
        c.pause([TopicPartition(t, 0)])
        with Admin({"bootstrap.servers": kafka.bootstrap}) as admin:
            admin.delete_records({(t, 0): 12})
        c.resume([TopicPartition(t, 0)])
        if reset == "error":
            with pytest.raises(OffsetOutOfRangeError, match=rf"{t} \[0\] offset 3"):
                while time.monotonic() < deadline:
                    assert c.consume(10, 0.5) == []
            assert c.position([TopicPartition(t, 0)])[0].offset == 3
            c.seek(TopicPartition(t, 0, 12))
        got = consume_until(c, {(t, 0): 20})
        assert got == {(t, 0): [(o, b"k%d" % o, b"v%d" % o) for o in range(12, 20)]}


# --- retention moves the log start under a committed position -------------------------------------

@pytest.fixture(scope="module")
def kafka_retention(request):
    """A Kafka of its own that applies retention every 100 ms from the start (both are static
    broker settings; the defaults are every 5 minutes, the first 30 s after startup)."""
    cluster = start_kafka(request, properties={"log.retention.check.interval.ms": "100",
                                               "log.initial.task.delay.ms": "0"})
    yield cluster
    stop_kafka(request, cluster)


def expired_below_commit(cluster, topic: str, group: str) -> None:
    """Ten records written ten minutes ago (offsets 0-9, one segment) and five now (10-14, the
    next segment); ``group`` commits offset 3; then retention.ms drops to one minute and the
    broker deletes the old segment: the log starts at 10, above the committed 3."""
    new_topic(cluster, topic, **{"cleanup.policy": "delete", "segment.ms": "100", "retention.ms": "3600000"})
    old = int(time.time() * 1000) - 600_000
    produce(cluster, topic, [(0, b"k%d" % i, b"old%d" % i, old + i) for i in range(10)])
    with Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group}) as c:
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 3
    time.sleep(ROLL_S)
    produce(cluster, topic, [(0, b"k%d" % i, b"new%d" % i) for i in range(10, 15)])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(20)
    wait_for("retention to delete offsets 0-9", lambda: watermarks(cluster, topic) == (10, 15))


def group_consumer(cluster, topic: str, group: str, reset: str) -> Consumer:
    c = kconsumer(cluster, reset, **{"group.id": group, "enable.auto.commit": False,
                                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    return c


def test_retention_below_the_committed_offset_resets_to_earliest(kafka_retention, unique_topic):
    t, group = unique_topic, unique_topic + "-g"
    expired_below_commit(kafka_retention, t, group)
    with group_consumer(kafka_retention, t, group, "earliest") as c:
        got = consume_until(c, {(t, 0): 15})
        assert got == {(t, 0): [(o, b"k%d" % o, b"new%d" % o) for o in range(10, 15)]}


def test_retention_below_the_committed_offset_resets_to_latest(kafka_retention, unique_topic):
    t, group = unique_topic, unique_topic + "-g"
    expired_below_commit(kafka_retention, t, group)
    with group_consumer(kafka_retention, t, group, "latest") as c:
        assert consume_until(c, {(t, 0): 15}) == {(t, 0): []}
        produce(kafka_retention, t, [(0, b"later", b"later%d" % i) for i in range(2)])
        got = consume_until(c, {(t, 0): 17})
        assert got == {(t, 0): [(15, b"later", b"later0"), (16, b"later", b"later1")]}


@pytest.mark.parametrize("reset", ["error", "none"])
def test_retention_below_the_committed_offset_with_reset_error_raises(kafka_retention, unique_topic, reset):
    t, group = unique_topic, unique_topic + "-g"
    expired_below_commit(kafka_retention, t, group)
    with group_consumer(kafka_retention, t, group, reset) as c:
        deadline = time.monotonic() + 30
        with pytest.raises(OffsetOutOfRangeError, match=rf"{t} \[0\] offset 3"):
            while time.monotonic() < deadline:
                assert c.consume(10, 0.5) == []
        assert c.consume(10, 1.0) == []  # still nothing: no silent reset
        c.seek(TopicPartition(t, 0, OFFSET_BEGINNING))
        got = consume_until(c, {(t, 0): 15})
        assert got == {(t, 0): [(o, b"k%d" % o, b"new%d" % o) for o in range(10, 15)]}
        # the committed offset is still the application's to move
        assert c.committed([TopicPartition(t, 0)], timeout=10)[0].offset == 3


def test_test_brokers_keep_records_stamped_long_ago(kafka_retention, unique_topic):
    """The test brokers keep records whatever their timestamps (kafka_util.KAFKA_TEST_PROPERTIES:
    log.retention.ms=-1).  Many tests stamp theirs in 2023 (tests/confluent_programs.py), past
    Kafka's default 7 days: a retention sweep (every 5 minutes on the session's broker) between
    a test's produce and its consume emptied the log under it -- a consumer at offset 5 got
    OFFSET_OUT_OF_RANGE, reset to the new log start (10) and read nothing."""
    t, swept = unique_topic, unique_topic + "-swept"
    new_topic(kafka_retention, t)
    new_topic(kafka_retention, swept, **{"retention.ms": "60000"})
    old = 1_700_000_000_000
    produce(kafka_retention, t, [(0, b"k%d" % i, b"v%d" % i, old + i) for i in range(10)])
    # a topic with a retention of its own shows sweeps happening: two deletions after the
    # produce above, so that a whole sweep ran after it (sweeps do not overlap)
    for n in (10, 20):
        produce(kafka_retention, swept, [(0, b"k", b"v", old)] * 10)
        wait_for(f"retention to delete {swept} below {n}", lambda n=n: watermarks(kafka_retention, swept) == (n, n))
    assert watermarks(kafka_retention, t) == (0, 10)


# --- Spark with the log start moved above the planned start (DeleteRecords) ------------------------

# raised in an executor, a DataLossError reaches the driver inside Spark's exception
LOST_BELOW_12 = r"DataLossError[\s\S]*starts at 12"


def deleted_two_partitions(cluster, topic: str) -> str:
    """Partition 0: offsets 0-19 in one batch (the tests delete below 12, inside it);
    partition 1: 0-9, never deleted."""
    new_topic(cluster, topic, 2)
    produce(cluster, topic, [(0, b"k%d" % i, b"v%d" % i) for i in range(20)] +
            [(1, b"k%d" % i, b"w%d" % i) for i in range(10)], **{"linger.ms": 200})
    return topic


def delete_below(cluster, topic: str, partition: int, offset: int) -> None:
    with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
        assert admin.delete_records({(topic, partition): offset}) == {(topic, partition): offset}


SURVIVORS_AFTER_DELETE = sorted([(0, o, b"k%d" % o, b"v%d" % o) for o in range(12, 20)] +
                                [(1, o, b"k%d" % o, b"w%d" % o) for o in range(10)])


@pytest.mark.parametrize("reader", ["datasource", "mapInArrow", "rows"])
def test_read_kafka_with_the_log_start_above_the_plan(spark, kafka, unique_topic, reader):
    t = deleted_two_partitions(kafka, unique_topic)
    start = '{"%s": {"0": 3, "1": 0}}' % t
    # planned before the records went: the executors find the log start moved
    strict = ks.read_kafka(spark, reader=reader, **spark_options(kafka, t, startingOffsets=start))
    lenient = ks.read_kafka(spark, reader=reader, **spark_options(kafka, t, startingOffsets=start,
                                                                  failOnDataLoss="false"))
    delete_below(kafka, t, 0, 12)
    with pytest.raises(Exception, match=LOST_BELOW_12):
        strict.collect()
    assert row_tuples(lenient.collect()) == SURVIVORS_AFTER_DELETE
    assert lenient.count() == 18
    # planned after: the driver sees it
    with pytest.raises(ks.DataLossError, match="starts at 12"):
        ks.read_kafka(spark, reader=reader, **spark_options(kafka, t, startingOffsets=start)).collect()
    df = ks.read_kafka(spark, reader=reader, **spark_options(kafka, t, startingOffsets=start,
                                                             failOnDataLoss="false"))
    assert row_tuples(df.collect()) == SURVIVORS_AFTER_DELETE
    assert df.count() == 18


def test_data_source_with_the_log_start_above_the_plan(registered, kafka, unique_topic):
    t = deleted_two_partitions(kafka, unique_topic)
    delete_below(kafka, t, 0, 12)
    start = '{"%s": {"0": 3, "1": 0}}' % t
    with pytest.raises(Exception, match=LOST_BELOW_12):
        registered.read.format("kwire").options(**spark_options(kafka, t, startingOffsets=start)).load().collect()
    df = registered.read.format("kwire").options(**spark_options(
        kafka, t, startingOffsets=start, failOnDataLoss="false", minPartitions="6")).load()
    assert row_tuples(df.collect()) == SURVIVORS_AFTER_DELETE
    assert df.count() == 18


def test_rdds_with_the_log_start_above_the_plan(spark, kafka, unique_topic):
    t = deleted_two_partitions(kafka, unique_topic)
    delete_below(kafka, t, 0, 12)
    sc = spark.sparkContext
    config = {"bootstrap.servers": kafka.bootstrap}
    ranges = [(t, 0, 3, 20), (t, 1, 0, 10), (t, 0, 5, 8)]  # the last one wholly deleted
    for rdd in (ks.kafka_rdd, ks.kafka_arrow_rdd):
        with pytest.raises(Exception, match=LOST_BELOW_12):
            rdd(sc, config, ranges, poll_timeout_ms=30_000).collect()
    lenient = dict(fail_on_data_loss=False, poll_timeout_ms=30_000)
    assert row_tuples(ks.kafka_rdd(sc, config, ranges, **lenient).collect()) == SURVIVORS_AFTER_DELETE
    assert arrow_tuples(ks.kafka_arrow_rdd(sc, config, ranges, num_partitions=2, **lenient).collect()) == \
        SURVIVORS_AFTER_DELETE
