"""Spark: count N records of a Tansu topic in local[2], kwire against confluent-kafka.

Contenders (each counts every record of the topic):

* ``kwire-arrow-df``      ``kwire.spark.read_kafka(...).count()``: plans on the driver, reads
                          through the Data Source; executors decode Fetch answers straight into
                          Arrow record batches
* ``kwire-mapinarrow-df`` ``read_kafka(..., reader="mapInArrow")``: the same through mapInArrow
* ``kwire-data-source``   ``spark.read.format("kwire")...load().count()``: the Python Data Source,
                          same Arrow path
* ``kwire-arrow-rdd``     ``kwire.spark.kafka_arrow_rdd(...)``, summing the batches' ``num_rows``
                          (the decoding without Spark's Arrow transfer to the JVM), a task per
                          partition
* ``kwire-rows-rdd``      ``kwire.spark.kafka_rdd(...).count()``: one KafkaRow tuple per record
* ``confluent-rdd``       ``mapPartitions`` with a confluent_kafka.Consumer per partition (assign,
                          consume(num_messages=10000)), default settings
* ``confluent-rdd-backoff10``  the same with ``fetch.queue.backoff.ms=10`` (the tuned baseline)
* ``...-packed``          the same work in one task per core (``sc.defaultParallelism``) instead of
                          one per partition: kwire with ``num_partitions=`` / the ``maxPartitions``
                          option, confluent-kafka with one consumer assigned all of the task's
                          partitions
* ``spark-arrow-floor``   not Kafka: ``mapInArrow`` yielding ready-made Arrow batches of the same
                          shape, i.e. what Spark alone costs to take N records from Python

Every contender runs 3 timed rounds after a warm-up.  Because this kind of machine drifts by tens
of percent within minutes, the headline ratios come from ``test_arrow_vs_tuned_baseline``, which
runs kwire's Arrow path and the tuned baseline *interleaved* (both task layouts, every round) and
compares best against best.  Nothing is asserted about time.  ``KWIRE_BENCH_SPARK_RECORDS`` sets
N (default 1,000,000); ``KWIRE_BENCH_SMOKE=1`` makes it 5,000 so the file can run as a smoke test.

    python -m pytest bench/test_bench_spark.py -p no:cacheprovider
"""
from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.harness import byte_compile_sources

ROOT = str(Path(__file__).resolve().parent.parent)
SMOKE = os.environ.get("KWIRE_BENCH_SMOKE", "") not in ("", "0")
N = int(os.environ.get("KWIRE_BENCH_SPARK_RECORDS", "5000" if SMOKE else "1000000"))
PARTITIONS = 4
VALUE_BYTES = 100
ROUNDS = 1 if SMOKE else 3

RATES: dict[str, float] = {}  # contender -> records/s (best round)


@pytest.fixture(scope="module")
def spark():
    byte_compile_sources()  # the workers import kwire as an installed one: compiled
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *paths])
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("kwire-bench")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def topic():
    """(bootstrap, topic) holding N records of VALUE_BYTES-byte values in PARTITIONS partitions."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from kwire.embedded import TansuBroker

    with TansuBroker() as broker:
        name = f"bench-spark-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
            f.result(30)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                      "queue.buffering.max.messages": 1_000_000})
        value = b"x" * VALUE_BYTES
        for i in range(N):
            while True:
                try:
                    p.produce(name, key=b"%08d" % i, value=value, partition=i % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(120) == 0
        yield broker.bootstrap, name


@pytest.fixture(scope="module", autouse=True)
def _warm_jvm(request):
    """A cold JVM makes whichever contender runs first pay for JIT compilation of Spark's
    Python and Arrow paths: run each kind of job a few times before anything is timed."""
    if SMOKE or not {"spark", "topic"} <= set(request.fixturenames):
        return
    import kwire.spark as ks

    spark = request.getfixturevalue("spark")
    bootstrap, t = request.getfixturevalue("topic")
    ks.register(spark)
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": t, "maxPartitions": 2}
    for _ in range(3):
        ks.read_kafka(spark, reader="mapInArrow", **opts).count()
        spark.read.format("kwire").options(**{k: str(v) for k, v in opts.items()}).load().count()
        ks.kafka_rdd(spark.sparkContext, {"bootstrap.servers": bootstrap}, _ranges(bootstrap, t),
                     num_partitions=2).count()


def _ranges(bootstrap, name):
    import kwire.spark as ks
    from kwire.spark.offset_reader import OffsetReader

    with OffsetReader(ks.parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": name})) as r:
        plan, _ = r.plan_batch()
    assert plan.total == N
    return plan.ranges


def _run(benchmark, name, fn):
    result = benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=0 if SMOKE else 1)
    assert result == N
    best = benchmark.stats.stats.min
    RATES[name] = N / best
    benchmark.extra_info["records"] = N
    benchmark.extra_info["records_per_s"] = round(N / best)
    for peer in ("confluent-rdd", "confluent-rdd-backoff10"):
        if not name.startswith("confluent") and peer in RATES:
            benchmark.extra_info[f"ratio_vs_{peer}"] = round(RATES[name] / RATES[peer], 2)


def _confluent_count(bootstrap, extra):
    """The baseline's mapPartitions function: each element is a list of ranges, read by one
    consumer assigned all of them (one range per task unless packed)."""
    def count(groups):
        from confluent_kafka import Consumer, TopicPartition

        total = 0
        for ranges in groups:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                          "enable.auto.commit": False, "enable.partition.eof": False, **extra})
            c.assign([TopicPartition(r.topic, r.partition, r.from_offset) for r in ranges])
            until = {(r.topic, r.partition): r.until_offset for r in ranges}
            left = {tp for tp, u in until.items() if u > 0}
            deadline = time.monotonic() + 120
            while left and time.monotonic() < deadline:
                for m in c.consume(num_messages=10000, timeout=1.0):
                    if m.error() is None:
                        tp = (m.topic(), m.partition())
                        if m.offset() < until[tp]:
                            total += 1
                            if m.offset() + 1 == until[tp]:
                                left.discard(tp)
            c.close()
        yield total
    return count


def _groups(ranges, packed: bool, sc):
    from kwire.spark import pack_ranges

    return pack_ranges(ranges, sc.defaultParallelism) if packed else [[r] for r in ranges]


def _confluent_job(sc, bootstrap, ranges, extra, packed=False):
    groups = _groups(ranges, packed, sc)
    fn = _confluent_count(bootstrap, extra)
    return lambda: sc.parallelize(groups, len(groups)).mapPartitions(fn).sum()


def _kwire_arrow_job(sc, bootstrap, ranges, packed=False):
    import kwire.spark as ks

    parts = sc.defaultParallelism if packed else None
    return lambda: ks.kafka_arrow_rdd(sc, {"bootstrap.servers": bootstrap}, ranges,
                                      num_partitions=parts).map(lambda b: b.num_rows).sum()


def _kwire_rows_job(sc, bootstrap, ranges, packed=False):
    import kwire.spark as ks

    parts = sc.defaultParallelism if packed else None
    return lambda: ks.kafka_rdd(sc, {"bootstrap.servers": bootstrap}, ranges, num_partitions=parts).count()


@pytest.mark.parametrize("name, extra, packed", [
    ("confluent-rdd", {}, False),
    ("confluent-rdd-backoff10", {"fetch.queue.backoff.ms": 10}, False),
    ("confluent-rdd-backoff10-packed", {"fetch.queue.backoff.ms": 10}, True)])
def test_confluent_mappartitions(benchmark, spark, topic, name, extra, packed):
    bootstrap, t = topic
    _run(benchmark, name, _confluent_job(spark.sparkContext, bootstrap, _ranges(bootstrap, t), extra, packed))


@pytest.mark.parametrize("reader", ["auto", "mapInArrow"])
@pytest.mark.parametrize("packed", [False, True], ids=["per-partition", "packed"])
def test_kwire_arrow_dataframe(benchmark, spark, topic, packed, reader):
    import kwire.spark as ks

    bootstrap, t = topic
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": t}
    if packed:
        opts["maxPartitions"] = spark.sparkContext.defaultParallelism
    name = "kwire-arrow-df" if reader == "auto" else "kwire-mapinarrow-df"
    _run(benchmark, name + ("-packed" if packed else ""),
         lambda: ks.read_kafka(spark, reader=reader, **opts).count())


@pytest.mark.parametrize("packed", [False, True], ids=["per-partition", "packed"])
def test_kwire_data_source(benchmark, spark, topic, packed):
    import kwire.spark as ks

    bootstrap, t = topic
    ks.register(spark)
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": t}
    if packed:
        opts["maxPartitions"] = str(spark.sparkContext.defaultParallelism)
    _run(benchmark, "kwire-data-source" + ("-packed" if packed else ""),
         lambda: spark.read.format("kwire").options(**opts).load().count())


@pytest.mark.parametrize("packed", [False, True], ids=["per-partition", "packed"])
def test_kwire_arrow_rdd(benchmark, spark, topic, packed):
    bootstrap, t = topic
    _run(benchmark, "kwire-arrow-rdd" + ("-packed" if packed else ""),
         _kwire_arrow_job(spark.sparkContext, bootstrap, _ranges(bootstrap, t), packed))


@pytest.mark.parametrize("packed", [False, True], ids=["per-partition", "packed"])
def test_kwire_rows_rdd(benchmark, spark, topic, packed):
    bootstrap, t = topic
    _run(benchmark, "kwire-rows-rdd" + ("-packed" if packed else ""),
         _kwire_rows_job(spark.sparkContext, bootstrap, _ranges(bootstrap, t), packed))


# --- the headline: kwire's Arrow path against the tuned baseline, interleaved --------------------

INTERLEAVED: dict[str, float] = {}  # contender -> best seconds, from test_arrow_vs_tuned_baseline


def test_arrow_vs_tuned_baseline(benchmark, spark, topic):
    """kwire-arrow-rdd-packed is timed by pytest-benchmark; before each of its rounds the other
    three run once (the tuned baseline in both layouts, kwire's Arrow path a task per
    partition), so every contender sees the same stretch of machine time."""
    bootstrap, t = topic
    sc = spark.sparkContext
    ranges = _ranges(bootstrap, t)
    tuned = {"fetch.queue.backoff.ms": 10}
    others = {
        "confluent-rdd-backoff10": _confluent_job(sc, bootstrap, ranges, tuned),
        "confluent-rdd-backoff10-packed": _confluent_job(sc, bootstrap, ranges, tuned, packed=True),
        "kwire-arrow-rdd": _kwire_arrow_job(sc, bootstrap, ranges),
    }
    best = dict.fromkeys(others, float("inf"))

    def setup():
        for name, job in others.items():
            t0 = time.perf_counter()
            assert job() == N
            best[name] = min(best[name], time.perf_counter() - t0)

    rounds = 1 if SMOKE else 6
    result = benchmark.pedantic(_kwire_arrow_job(sc, bootstrap, ranges, packed=True), setup=setup,
                                rounds=rounds, iterations=1, warmup_rounds=0 if SMOKE else 1)
    assert result == N
    best["kwire-arrow-rdd-packed"] = benchmark.stats.stats.min
    INTERLEAVED.update(best)
    baseline = min(best["confluent-rdd-backoff10"], best["confluent-rdd-backoff10-packed"])
    for name in ("kwire-arrow-rdd", "kwire-arrow-rdd-packed"):
        benchmark.extra_info[f"{name}_vs_best_tuned_baseline"] = round(baseline / best[name], 2)
    benchmark.extra_info["per_partition_vs_per_partition"] = round(
        best["confluent-rdd-backoff10"] / best["kwire-arrow-rdd"], 2)
    benchmark.extra_info["packed_vs_packed"] = round(
        best["confluent-rdd-backoff10-packed"] / best["kwire-arrow-rdd-packed"], 2)
    benchmark.extra_info["best_seconds"] = {k: round(v, 4) for k, v in best.items()}


# --- Spark's own floor: the Arrow hand-over with no Kafka at all ---------------------------------

_FLOOR_CACHE: dict = {}


def _floor_batches(partition: int, rows: int):
    """Record batches in the Kafka schema (8 B keys, VALUE_BYTES values), built once per
    Python worker so the timing holds only Spark's side."""
    key = rows          # one set per worker, whichever partitions it gets
    if key not in _FLOOR_CACHE:
        import pyarrow as pa

        from kwire.spark.arrow import kafka_arrow_schema

        schema = kafka_arrow_schema(False)
        out, step = [], 10_000
        for lo in range(0, rows, step):
            n = min(step, rows - lo)
            out.append(pa.record_batch([
                pa.array([b"%08d" % i for i in range(lo, lo + n)], pa.binary()),
                pa.array([b"x" * VALUE_BYTES] * n, pa.binary()),
                pa.array(["bench-topic"] * n, pa.string()),
                pa.array([partition] * n, pa.int32()),
                pa.array(range(lo, lo + n), pa.int64()),
                pa.array([1_700_000_000_000_000] * n, schema.field("timestamp").type),
                pa.array([0] * n, pa.int32()),
            ], schema=schema))
        _FLOOR_CACHE[key] = out
    return _FLOOR_CACHE[key]


def _floor_map(batches):
    for b in batches:
        for row in b.to_pylist():
            yield from _floor_batches(row["partition"], row["rows"])


def test_spark_arrow_floor(benchmark, spark, topic):
    """mapInArrow yielding ready-made batches of the same shape: what any Python DataFrame
    source pays Spark to hand N records to the JVM (an upper bound for kwire-arrow-df and
    kwire-data-source on this machine)."""
    from kwire.spark.schema import kafka_schema

    per = N // PARTITIONS
    assert per * PARTITIONS == N
    rows = [(p, per) for p in range(PARTITIONS)]
    ranges = spark.createDataFrame(spark.sparkContext.parallelize(rows, PARTITIONS), "partition int, rows int")
    df = ranges.mapInArrow(_floor_map, kafka_schema(False))
    df.count()  # build the cached batches in the workers
    _run(benchmark, "spark-arrow-floor", df.count)


class _Summary:
    """A pytest plugin, registered by this module, that prints the ratio table at the end."""

    def pytest_terminal_summary(self, terminalreporter):
        if not RATES and not INTERLEAVED:
            return
        write = terminalreporter.write_line
        write("")
        write(f"Spark local[2]: {N:,} records of {VALUE_BYTES} B in {PARTITIONS} partitions, best of {ROUNDS}")
        for name, rate in sorted(RATES.items(), key=lambda kv: -kv[1]):
            ratios = "  ".join(f"{rate / RATES[p]:5.2f}x {p}" for p in ("confluent-rdd", "confluent-rdd-backoff10")
                               if p in RATES and not name.startswith("confluent"))
            write(f"  {name:32s} {rate / 1e6:7.3f} M rec/s   {ratios}")
        if INTERLEAVED:
            b = INTERLEAVED
            write("")
            write("Arrow path vs the tuned baseline (fetch.queue.backoff.ms=10), interleaved rounds, best vs best:")
            for name in ("confluent-rdd-backoff10", "confluent-rdd-backoff10-packed", "kwire-arrow-rdd",
                         "kwire-arrow-rdd-packed"):
                write(f"  {name:32s} {N / b[name] / 1e6:7.3f} M rec/s")
            write(f"  task per partition, both:  {b['confluent-rdd-backoff10'] / b['kwire-arrow-rdd']:5.2f}x")
            write(f"  task per core, both:       {b['confluent-rdd-backoff10-packed'] / b['kwire-arrow-rdd-packed']:5.2f}x")
            base = min(b["confluent-rdd-backoff10"], b["confluent-rdd-backoff10-packed"])
            kw = min(b["kwire-arrow-rdd"], b["kwire-arrow-rdd-packed"])
            write(f"  best kwire vs best baseline: {base / kw:5.2f}x")


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    plugins = request.config.pluginmanager
    if not plugins.has_plugin("kwire-spark-bench-summary"):
        plugins.register(_Summary(), "kwire-spark-bench-summary")
