"""Spark drivers for tests/test_spark_cluster.py, each in a process of its own (a driver the
tests can SIGKILL; the test process may hold a local[2] SparkContext of its own).

    python tests/spark_cluster_driver.py serve            # jobs named on stdin, one JSON line each
    python tests/spark_cluster_driver.py JOB 'KWARGS'     # one job

The Spark properties come as JSON in ``KWIRE_SPARK_CONF`` (``SparkCluster.driver_conf()``, or
``{"spark.master": "local[2]"}``).  ``serve`` reads ``{"job": NAME, "kwargs": {...}}`` lines and
answers each with one line, ``{"result": ...}`` or ``{"error": ..., "traceback": ...}``, on
what was stdout when the process started; everything else written to stdout (Spark's JVM, a
stray print) goes to stderr instead.  Byte strings travel as hex.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

_reply = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)


def _executor_id() -> str:
    """The executor whose Python worker runs this (``--executor-id`` of the JVM up the process
    tree); "driver" in local mode."""
    pid = os.getpid()
    for _ in range(6):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if b"--executor-id" in cmd:
            return cmd[cmd.index(b"--executor-id") + 1].decode()
    return "driver"


def _hex(b):
    return None if b is None else bytes(b).hex()


def _committed(bootstrap: str, topic: str, group: str, partitions: int) -> dict:
    import kwire.spark as ks
    from kwire.spark.offset_reader import OffsetReader

    with OffsetReader(ks.parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic})) as r:
        got = r.committed(group, [(topic, p) for p in range(partitions)])
    return {str(p): o for (_, p), o in got.items()}


# --- jobs: (spark, **kwargs) -> JSON-able -----------------------------------------------------

def executors(spark) -> dict:
    """The executors registered with the driver, and those four 0.3 s tasks ran on."""
    sc = spark.sparkContext
    ran = sc.parallelize(range(4), 4).map(lambda _: (time.sleep(0.3), _executor_id())[1]).collect()
    return {"registered": sorted(sc._jsc.sc().getExecutorIds().mkString(",").split(",")), "ran_on": sorted(set(ran)),
            "driver_pid": os.getpid()}


def records(spark, bootstrap: str, topic: str, way: str, ranges=None) -> dict:
    """Every record ``way`` reads: [partition, offset, key hex, value hex]; and the executors
    that read them."""
    from pyspark.sql import functions as F

    import kwire.spark as ks

    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    config = {"bootstrap.servers": bootstrap}
    sc = spark.sparkContext
    if way.startswith("read_kafka"):
        reader = way.partition(":")[2] or "auto"
        df = ks.read_kafka(spark, reader=reader, **options)
    elif way == "format":
        ks.register(spark)
        df = spark.read.format("kwire").options(**options).load()
    if way in ("format",) or way.startswith("read_kafka"):
        where = F.udf(_executor_id)()
        rows = df.select("partition", "offset", "key", "value", where.alias("executor")).collect()
        out = [(r.partition, r.offset, _hex(r.key), _hex(r.value), r.executor) for r in rows]
    elif way == "rdd":
        rdd = ks.kafka_rdd(sc, config, [tuple(r) for r in ranges])
        out = rdd.map(lambda r: (r.partition, r.offset, _hex(r.key), _hex(r.value), _executor_id())).collect()
    elif way == "arrow_rdd":
        arrow = ks.kafka_arrow_rdd(sc, config, [tuple(r) for r in ranges])

        def rows_of(batch):
            e = _executor_id()
            return [(p, o, _hex(k), _hex(v), e) for p, o, k, v in zip(
                batch["partition"].to_pylist(), batch["offset"].to_pylist(),
                batch["key"].to_pylist(), batch["value"].to_pylist())]
        out = arrow.flatMap(rows_of).collect()
    else:
        raise ValueError(f"unknown way {way!r}")
    return {"records": sorted([list(r[:4]) for r in out]), "executors": sorted({r[4] for r in out})}


def group_read(spark, bootstrap: str, topic: str, group: str, partitions: int) -> dict:
    """startingOffsets=group + commitToGroup: collect() everything, wait for the commit."""
    import kwire.spark as ks

    df = ks.read_kafka(spark, **{"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                 "startingOffsets": "group", "commitToGroup": group,
                                 "kafka.auto.offset.reset": "earliest"})
    rows = sorted([r.partition, r.offset, _hex(r.value)] for r in df.collect())
    committed = ks.await_commit(df, 60)
    return {"records": rows, "committed": {str(p): o for (_, p), o in committed.items()},
            "group": _committed(bootstrap, topic, group, partitions)}


def failing_read(spark, bootstrap: str, topic: str, group: str, partitions: int, where: str) -> dict:
    """A job over a startingOffsets=group + commitToGroup DataFrame that fails at offset 7 of
    each partition: in the read task (``where="read"``: a UDF in the reading stage) or in a later
    stage (``"later"``: after a shuffle, every read task done).  Returns the error, the commit's
    reason once the listener reported the failure, and the group's offsets then."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    import kwire.spark as ks

    def fail(offset):
        if offset == 7:
            raise ValueError("boom at offset 7")
        return offset

    boom = F.udf(fail, LongType())
    df = ks.read_kafka(spark, **{"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                 "startingOffsets": "group", "commitToGroup": group,
                                 "kafka.auto.offset.reset": "earliest"})
    job = df.select(boom("offset")) if where == "read" else df.repartition(3).select(boom("offset"))
    try:
        job.collect()
        error = None
    except Exception as exc:  # the job must fail
        error = str(exc)[:2000]
    pending = df.kwire_commit
    deadline = time.monotonic() + 60
    while pending.actions_seen < 1 and not pending.done and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"error": error, "reason": pending.reason, "done": pending.done, "actions_seen": pending.actions_seen,
            "group": _committed(bootstrap, topic, group, partitions)}


def slow_group_read(spark, bootstrap: str, topic: str, group: str, partitions: int, marker_dir: str,
                    sleep_s: float) -> dict:
    """group_read through a slow step: each task writes a marker file when it gets its first
    Arrow batch, then sleeps ``sleep_s`` per batch.  The test SIGKILLs this driver meanwhile."""
    import kwire.spark as ks

    df = ks.read_kafka(spark, **{"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                 "startingOffsets": "group", "commitToGroup": group,
                                 "kafka.auto.offset.reset": "earliest"})

    def slow(batches):
        for batch in batches:
            Path(marker_dir, f"task-{os.getpid()}-{time.monotonic_ns()}").touch()
            time.sleep(sleep_s)
            yield batch

    n = df.mapInArrow(slow, df.schema).count()
    committed = ks.await_commit(df, 60)
    return {"count": n, "committed": {str(p): o for (_, p), o in committed.items()}}


def stream(spark, bootstrap: str, topic: str, group: str, checkpoint: str, sink: str, markers: str,
           trigger: str, per_trigger: int, pause_at: int | None = None, pause: str = "") -> dict:
    """A kwire stream (commitToGroup) into a foreachBatch sink writing each micro-batch to
    ``sink/batch-<id>.json`` (write, then rename: a batch run again replaces its file).

    ``pause`` at micro-batch ``pause_at`` or later: ``"after-write"`` (the file is there, Spark's
    commit log not yet) or ``"before-write"``, after touching ``markers/<pause>-<id>``; the test
    kills the driver there.  ``trigger``: "continuous" (a micro-batch every second until killed)
    or "availableNow" (up to the latest offsets, then return)."""
    import kwire.spark as ks

    ks.register(spark)
    source = (spark.readStream.format("kwire")
              .options(**{"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                          "maxOffsetsPerTrigger": per_trigger, "commitToGroup": group}).load())

    def write(batch_df, batch_id):
        rows = sorted([r.partition, r.offset, _hex(r.value)]
                      for r in batch_df.select("partition", "offset", "value").collect())
        paused = pause_at is not None and batch_id >= pause_at
        if paused and pause == "before-write":
            Path(markers, f"{pause}-{batch_id}").touch()
            time.sleep(600)
        tmp = Path(sink, f".batch-{batch_id}.tmp")
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, Path(sink, f"batch-{batch_id:06d}.json"))
        Path(markers, f"written-{batch_id}").touch()
        if paused and pause == "after-write":
            Path(markers, f"{pause}-{batch_id}").touch()
            time.sleep(600)

    writer = source.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if trigger == "availableNow" else \
        writer.trigger(processingTime="1 second")
    q = writer.start()
    q.awaitTermination()
    return {"exception": None if q.exception() is None else str(q.exception())}


JOBS = {f.__name__: f for f in (executors, records, group_read, failing_read, slow_group_read, stream)}


def session(conf: dict, executors_wanted: int):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(f"kwire-driver-{os.getpid()}")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    deadline = time.monotonic() + 120
    while spark.sparkContext._jsc.sc().getExecutorIds().size() < executors_wanted:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {executors_wanted} executors registered after 120 s")
        time.sleep(0.1)
    return spark


def _answer(job: str, kwargs: dict, spark) -> dict:
    try:
        return {"result": JOBS[job](spark, **kwargs)}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:4000], "traceback": traceback.format_exc()[-6000:]}


def main(argv: list[str]) -> int:
    conf = json.loads(os.environ["KWIRE_SPARK_CONF"])
    wanted = int(os.environ.get("KWIRE_SPARK_EXECUTORS", "0"))
    spark = session(conf, wanted)
    _reply.write(json.dumps({"ready": os.getpid()}) + "\n")
    try:
        if argv[0] == "serve":
            for line in sys.stdin:
                request = json.loads(line)
                _reply.write(json.dumps(_answer(request["job"], request.get("kwargs", {}), spark)) + "\n")
            return 0
        answer = _answer(argv[0], json.loads(argv[1]) if len(argv) > 1 else {}, spark)
        _reply.write(json.dumps(answer) + "\n")
        return 1 if "error" in answer else 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
