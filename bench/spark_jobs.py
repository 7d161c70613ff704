"""The jobs of bench/test_bench_spark_source.py: five ways to get a Kafka topic into PySpark,
each doing the same two workloads, cold (a fresh process per job, as ``spark-submit`` runs a
scheduled job) or warm (one session, after a warm-up).

Contenders (:data:`CONTENDERS`):

* ``kwire-df``          ``kwire.spark.read_kafka(spark, ...)``: kwire's default DataFrame path
                        (plans on the driver, reads in a ``mapInArrow`` over ``spark.range``; the
                        agg workload's ``select("key", "value").mapInArrow(...)`` over it runs in
                        the read tasks, kwire.spark.frame)
* (``kwire-df-mapinarrow``, not in the default list: ``read_kafka(..., reader="mapInArrow")``)
* ``kwire-fused``       ``kwire.spark.map_kafka_arrow(spark, func, schema, ...)``: the workload's
                        Arrow function runs inside the read task (no JVM round trip first)
* ``kwire-datasource``  ``spark.read.format("kwire")`` after ``kwire.spark.register(spark)``
* ``kwire-arrow-rdd``   ``kwire.spark.kafka_arrow_rdd`` over ranges kwire's offset reader plans
* ``spark-kafka``       Spark's own Kafka source, ``spark.read.format("kafka")`` with
                        ``startingOffsets=earliest``, ``endingOffsets=latest`` (the
                        spark-sql-kafka-0-10 jar matching pyspark, :mod:`kwire.embedded.spark_kafka`)
* ``confluent-rdd``     confluent-kafka inside ``mapPartitions``: a Consumer per partition,
                        assigned its ``[low, high)`` (watermarks looked up with confluent-kafka on
                        the driver), ``consume(num_messages=10000)``, ``fetch.queue.backoff.ms=10``
                        (the tuned setting; its 1 s default stalls fetching)

Workloads (:data:`WORKLOADS`):

* ``count`` — the number of records (``df.count()``; the RDDs sum per-task counts);
* ``agg``   — Python over every record: per key (``k00``..``k99``) the record count and the sum of
  the integer each value starts with, computed by a per-record Python loop over Arrow columns in
  ``mapInArrow`` (DataFrames: ``select("key", "value").mapInArrow(...)``), in ``mapPartitions``
  over Arrow batches (kwire-arrow-rdd) or over confluent's messages; the per-task partial sums are
  collected and merged on the driver.  Every contender's answer is checked against the known one.

Run one cold job: ``python -m bench.spark_jobs cold '<json spec>'``; all warm jobs in one session:
``python -m bench.spark_jobs warm '<json spec>'``.  Each prints one ``RESULT {json}`` line.
"""
from __future__ import annotations

import json
import os
import sys
import time

T_START = time.time()  # as early as this process can note it (the parent notes its launch too)

from pathlib import Path  # noqa: E402

ROOT = str(Path(__file__).resolve().parent.parent)
CONTENDERS = ("kwire-df", "kwire-fused", "kwire-datasource", "kwire-arrow-rdd", "spark-kafka", "confluent-rdd")
WORKLOADS = ("count", "agg")
KEYS = 100                 # record i has key b"k%02d" % (i % KEYS)
INT_MOD = 1000             # and a value starting with b"%010d" % (i % INT_MOD)
AGG_DDL = "key binary, n long, total long"


# --- the data set and the answers ------------------------------------------------------------------

def record(i: int, value_bytes: int) -> tuple[bytes, bytes]:
    head = b"%010d," % (i % INT_MOD)
    return b"k%02d" % (i % KEYS), head + b"x" * max(0, value_bytes - len(head))


def expected_agg(n: int) -> dict[bytes, tuple[int, int]]:
    """Per key: (records, sum of the values' integers) of records 0..n-1."""
    out: dict[bytes, list[int]] = {}
    counts: dict[tuple[int, int], int] = {}
    period = INT_MOD  # (i % KEYS, i % INT_MOD) repeats every lcm(KEYS, INT_MOD) = 1000 records
    full, rest = divmod(n, period)
    for j in range(period):
        c = full + (1 if j < rest else 0)
        if c:
            counts[(j % KEYS, j % INT_MOD)] = counts.get((j % KEYS, j % INT_MOD), 0) + c
    for (k, v), c in counts.items():
        e = out.setdefault(b"k%02d" % k, [0, 0])
        e[0] += c
        e[1] += c * v
    return {k: (a, b) for k, (a, b) in out.items()}


def produce(bootstrap: str, topic: str, n: int, partitions: int, value_bytes: int) -> None:
    """Create ``topic`` and write records 0..n-1 round-robin over its partitions."""
    import confluent_kafka

    from kwire.admin import Admin

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([(topic, partitions, 1)], timeout=30, wait_for_leaders=True)
    p = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
        "batch.size": 1_000_000, "acks": "1", "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 1_048_576})
    failed: list = []

    def report(err, _msg):
        if err is not None and len(failed) < 5:
            failed.append(err)

    for i in range(n):
        k, v = record(i, value_bytes)
        while True:
            try:
                p.produce(topic, v, key=k, partition=i % partitions, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(300)
    if left or failed:
        raise RuntimeError(f"loading {topic}: {left} records not delivered, errors {failed}")


# --- the Python workload (runs in the workers) -------------------------------------------------------

def _agg_rows(pairs, acc: dict) -> None:
    for k, v in pairs:
        x = int(v[:10])
        e = acc.get(k)
        if e is None:
            acc[k] = [1, x]
        else:
            e[0] += 1
            e[1] += x


def agg_arrow(batches):
    """mapInArrow: Arrow batches with key and value columns -> one batch of partial sums."""
    import pyarrow as pa

    acc: dict = {}
    for b in batches:
        _agg_rows(zip(b.column("key").to_pylist(), b.column("value").to_pylist()), acc)
    yield pa.RecordBatch.from_pydict(
        {"key": list(acc), "n": [e[0] for e in acc.values()], "total": [e[1] for e in acc.values()]},
        schema=pa.schema([("key", pa.binary()), ("n", pa.int64()), ("total", pa.int64())]))


def agg_arrow_partition(batches):
    """mapPartitions over kafka_arrow_rdd's batches -> (key, n, total) tuples."""
    acc: dict = {}
    for b in batches:
        _agg_rows(zip(b.column("key").to_pylist(), b.column("value").to_pylist()), acc)
    return [(k, e[0], e[1]) for k, e in acc.items()]


def count_arrow_partition(batches):
    yield sum(b.num_rows for b in batches)


def count_arrow(batches):
    """map_kafka_arrow: the records' count as one batch."""
    import pyarrow as pa

    yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]},
                                     schema=pa.schema([("n", pa.int64())]))


def merge(rows) -> dict[bytes, tuple[int, int]]:
    out: dict[bytes, list[int]] = {}
    for k, n, total in rows:
        e = out.setdefault(bytes(k), [0, 0])
        e[0] += n
        e[1] += total
    return {k: (a, b) for k, (a, b) in out.items()}


def _confluent_reader(bootstrap: str, workload: str):
    """The mapPartitions function: each element is one (topic, partition, low, high) range."""
    def read(ranges):
        import uuid

        from confluent_kafka import Consumer, TopicPartition

        total = 0
        acc: dict = {}
        for topic, partition, low, high in ranges:
            if high <= low:
                continue
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                          "enable.auto.commit": False, "enable.partition.eof": False,
                          "fetch.queue.backoff.ms": 10})
            c.assign([TopicPartition(topic, partition, low)])
            deadline = time.monotonic() + 600
            done = False
            while not done and time.monotonic() < deadline:
                for m in c.consume(num_messages=10000, timeout=1.0):
                    if m.error() is not None:
                        continue
                    off = m.offset()
                    if off >= high:
                        done = True
                        break
                    if workload == "count":
                        total += 1
                    else:
                        v = m.value()
                        x = int(v[:10])
                        e = acc.get(m.key())
                        if e is None:
                            acc[m.key()] = [1, x]
                        else:
                            e[0] += 1
                            e[1] += x
                    if off + 1 >= high:
                        done = True
                        break
            c.close()
            if not done:
                raise RuntimeError(f"confluent-kafka did not reach offset {high} of {topic}[{partition}]")
        if workload == "count":
            yield total
        else:
            yield from ((k, e[0], e[1]) for k, e in acc.items())
    return read


def _confluent_ranges(bootstrap: str, topic: str) -> list[tuple]:
    """[low, high) per partition, looked up with confluent-kafka (what its user plans with)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-plan", "enable.auto.commit": False})
    try:
        parts = sorted(c.list_topics(topic, timeout=30).topics[topic].partitions)
        out = []
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            out.append((topic, p, low, high))
        return out
    finally:
        c.close()


# --- the jobs -----------------------------------------------------------------------------------------

def _kafka_options(bootstrap: str, topic: str, ends: dict | None) -> dict:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "endingOffsets": "latest" if ends is None else json.dumps({topic: ends})}


def define(spark, contender: str, workload: str, bootstrap: str, topic: str, ends: dict | None = None):
    """Everything before the action (for read_kafka and the RDDs that includes planning);
    returns the action, a function giving the job's answer.

    ``ends`` ({"0": end, ...}) replaces ``endingOffsets=latest`` where the broker's ListOffsets
    answer is short of the log's end (Tansu 0.6 answers the last batch's base offset + 1)."""
    opts = _kafka_options(bootstrap, topic, ends)
    if contender in ("kwire-df", "kwire-df-mapinarrow", "kwire-datasource", "spark-kafka"):
        if contender.startswith("kwire-df"):
            import kwire.spark as ks
            df = ks.read_kafka(spark, **opts, **({"reader": "mapInArrow"} if contender.endswith("mapinarrow") else {}))
        elif contender == "kwire-datasource":
            import kwire.spark as ks
            ks.register(spark)
            df = spark.read.format("kwire").options(**opts).load()
        else:
            df = spark.read.format("kafka").options(**opts).load()
        if workload == "count":
            return df.count
        partial = df.select("key", "value").mapInArrow(agg_arrow, AGG_DDL)
        return lambda: merge((r["key"], r["n"], r["total"]) for r in partial.collect())
    if contender == "kwire-fused":
        import kwire.spark as ks
        if workload == "count":
            counts = ks.map_kafka_arrow(spark, count_arrow, "n long", columns=["offset"], **opts)
            return lambda: sum(r["n"] for r in counts.collect())
        partial = ks.map_kafka_arrow(spark, agg_arrow, AGG_DDL, columns=["key", "value"], **opts)
        return lambda: merge((r["key"], r["n"], r["total"]) for r in partial.collect())
    sc = spark.sparkContext
    if contender == "kwire-arrow-rdd":
        import kwire.spark as ks
        from kwire.spark.offset_reader import OffsetReader

        with OffsetReader(ks.parse_options(opts)) as reader:
            plan, _ = reader.plan_batch()
        rdd = ks.kafka_arrow_rdd(sc, {"bootstrap.servers": bootstrap}, plan.ranges)
        if workload == "count":
            return lambda: rdd.mapPartitions(count_arrow_partition).sum()
        return lambda: merge(rdd.mapPartitions(agg_arrow_partition).collect())
    if contender == "confluent-rdd":
        ranges = _confluent_ranges(bootstrap, topic)
        if ends is not None:
            ranges = [(t, p, low, int(ends[str(p)])) for t, p, low, _high in ranges]
        rdd = sc.parallelize(ranges, len(ranges)).mapPartitions(_confluent_reader(bootstrap, workload))
        if workload == "count":
            return rdd.sum
        return lambda: merge(rdd.collect())
    raise ValueError(f"unknown contender {contender!r}")


def check(answer, workload: str, n: int) -> str | None:
    """None when ``answer`` is the right one, else what is wrong."""
    if workload == "count":
        return None if answer == n else f"counted {answer}, expected {n}"
    want = expected_agg(n)
    if answer == want:
        return None
    wrong = sorted(k for k in set(want) | set(answer) if want.get(k) != answer.get(k))[:3]
    return f"per-key sums differ for {len(wrong)}+ keys, e.g. " + ", ".join(
        f"{k!r}: {answer.get(k)} != {want.get(k)}" for k in wrong)


# --- the session ---------------------------------------------------------------------------------------

def session(app: str, *, spark_kafka: bool, extra_conf: dict | None = None):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *paths])
    from pyspark.sql import SparkSession

    b = (SparkSession.builder.master(os.environ.get("KWIRE_BENCH_SPARK_MASTER", "local[2]")).appName(app)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "4"))
    if spark_kafka:
        from kwire.embedded.spark_kafka import spark_jars_conf
        b = b.config("spark.jars", spark_jars_conf())
    for k, v in (extra_conf or {}).items():
        b = b.config(k, v)
    s = b.getOrCreate()
    if os.environ.get("KWIRE_BENCH_SPARK_LOGLEVEL") != "keep":  # bench/spark_cold_trace.py keeps its own
        s.sparkContext.setLogLevel("ERROR")
    return s


def run_cold(spec: dict) -> dict:
    """One job in this fresh process: timestamps of each step (wall clock, seconds)."""
    t_launch = spec.get("t_launch", T_START)
    marks = {"python_started": T_START}
    import pyspark  # noqa: F401
    import pyspark.sql  # noqa: F401
    marks["pyspark_imported"] = time.time()
    spark = session(f"cold-{spec['contender']}", spark_kafka=spec["contender"] == "spark-kafka",
                    extra_conf=spec.get("conf"))
    marks["session_ready"] = time.time()
    action = define(spark, spec["contender"], spec["workload"], spec["bootstrap"], spec["topic"], spec.get("ends"))
    marks["defined"] = time.time()
    answer = action()
    marks["first_action_done"] = time.time()
    problem = check(answer, spec["workload"], spec["expected"])
    out = {"ok": problem is None, "error": problem,
           "marks": {k: round(v - t_launch, 4) for k, v in marks.items()},
           "jvm_and_session_s": round(marks["session_ready"] - marks["pyspark_imported"], 4),
           "define_s": round(marks["defined"] - marks["session_ready"], 4),
           "first_action_s": round(marks["first_action_done"] - marks["defined"], 4),
           "to_answer_s": round(marks["first_action_done"] - t_launch, 4)}
    if spec.get("second_action"):  # the same job again in this session: what was paid only once
        t0 = time.time()
        again = define(spark, spec["contender"], spec["workload"], spec["bootstrap"], spec["topic"], spec.get("ends"))()
        out["second_job_s"] = round(time.time() - t0, 4)
        assert check(again, spec["workload"], spec["expected"]) is None
    spark.stop()
    return out


def run_warm(spec: dict) -> dict:
    """Every (contender, workload) in one session: a warm-up round, then ``rounds`` interleaved
    rounds; the seconds of each job (definition, planning and action)."""
    spark = session("warm", spark_kafka="spark-kafka" in spec["contenders"])
    jobs = [(c, w) for w in spec["workloads"] for c in spec["contenders"]]
    times: dict[str, list[float]] = {f"{c}/{w}": [] for c, w in jobs}
    errors: dict[str, str] = {}
    for rnd in range(spec.get("warmup", 1) + spec["rounds"]):
        for c, w in jobs:
            t0 = time.perf_counter()
            try:
                answer = define(spark, c, w, spec["bootstrap"], spec["topic"], spec.get("ends"))()
            except Exception as exc:  # recorded, the others go on
                errors[f"{c}/{w}"] = f"{type(exc).__name__}: {str(exc)[:500]}"
                continue
            dt = time.perf_counter() - t0
            problem = check(answer, w, spec["expected"])
            if problem:
                errors[f"{c}/{w}"] = problem
            elif rnd >= spec.get("warmup", 1):
                times[f"{c}/{w}"].append(round(dt, 4))
            print(f"  warm round {rnd} {c}/{w}: {dt:.3f} s" + (f" WRONG: {problem}" if problem else ""),
                  file=sys.stderr, flush=True)
    spark.stop()
    return {"ok": not errors, "errors": errors, "seconds": times}


if __name__ == "__main__":
    mode, spec = sys.argv[1], json.loads(sys.argv[2])
    try:
        result = run_cold(spec) if mode == "cold" else run_warm(spec)
    except Exception as exc:
        import traceback
        traceback.print_exc()
        result = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:1000]}"}
    print("RESULT " + json.dumps(result), flush=True)
