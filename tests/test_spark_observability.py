"""What a Spark user sees of kwire: lag and rates of streaming queries, kwire's log lines from
the Python processes Spark starts, and a fast, explained failure when the executors cannot
import kwire.  On Apache Kafka and Tansu (``peer``); the console and executor tests run a driver
in a process of its own, as ``spark-submit`` would."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kwire.spark as ks
from kwire.errors import ConfigError
from kwire.spark.progress import kafka_progress, offsets_of

from .test_spark import create, fill, options

pytestmark = [pytest.mark.spark]

ROOT = str(Path(__file__).resolve().parent.parent)


def test_kafka_progress_reads_offsets_and_lag_from_a_progress_document():
    doc = {"batchId": 3, "sources": [
        {"description": "kwire", "startOffset": {"t": {"0": 5, "1": 0}, "@topicIds": {"t": "x"}},
         "endOffset": json.dumps({"t": {"0": 10, "1": 4}, "@topicIds": {"t": "x"}}),
         "latestOffset": {"t": {"0": 25, "1": 4}}, "numInputRows": 9,
         "inputRowsPerSecond": 3.0, "processedRowsPerSecond": 90.0},
        {"description": "rate", "endOffset": 17, "latestOffset": None, "numInputRows": 1}]}
    [p] = kafka_progress(doc)
    assert (p.batch_id, p.rows, p.processed_rows_per_s) == (3, 9, 90.0)
    assert p.start == {("t", 0): 5, ("t", 1): 0} and p.end == {("t", 0): 10, ("t", 1): 4}
    assert p.lag == {("t", 0): 15, ("t", 1): 0} and p.total_lag == 15 and p.max_lag == 15
    assert "lag 15 (t-0 15, t-1 0)" in p.describe()
    assert offsets_of("not json") == {} and offsets_of(17) == {}


def test_streaming_progress_gives_per_partition_lag_and_the_listener_logs_it(spark, peer, unique_topic, tmp_path,
                                                                              caplog):
    ks.register(spark)
    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 15)  # 30 records, 8 per micro-batch
    lag = ks.add_lag_listener(spark)
    caplog.set_level(logging.INFO, logger="kwire.spark")
    stream = (spark.readStream.format("kwire")
              .options(**options(peer, unique_topic, startingOffsets="earliest", maxOffsetsPerTrigger=8)).load())
    q = (stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120) and q.exception() is None
    batches = [kafka_progress(p)[0] for p in q.recentProgress if kafka_progress(p)]
    batches = [b for b in batches if b.rows]
    assert sum(b.rows for b in batches) == 30 and len(batches) == 4
    tps = [(unique_topic, 0), (unique_topic, 1)]
    for b in batches:
        assert set(b.latest) == set(tps) and all(b.latest[tp] == 15 for tp in tps)
        assert b.lag == {tp: 15 - b.end[tp] for tp in tps}
    assert [b.total_lag for b in batches] == [22, 14, 6, 0]
    deadline = time.monotonic() + 30  # the listener bus delivers progress events asynchronously
    while time.monotonic() < deadline and not any(
            s.total_lag == 0 and s.rows for s in lag.last.get(str(q.id), [])):
        time.sleep(0.2)
    [last] = lag.last[str(q.id)]
    assert last.end == {tp: 15 for tp in tps} and last.lag == {tp: 0 for tp in tps}
    lines = [r.getMessage() for r in caplog.records if r.name == "kwire.spark" and "rows/s processed" in r.getMessage()]
    assert any("lag 22" in line for line in lines) and any("lag 0" in line for line in lines), lines


def _driver(script: str, *, pythonpath: str | None, cwd: Path, timeout_s: float = 240) -> subprocess.CompletedProcess:
    """Run ``script`` as a Spark driver of its own (local[2]) in ``cwd`` (the workers' working
    directory too, which ``python -m`` puts on their path); ``pythonpath`` is what the JVM and
    so the Python workers get (None: not set at all)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KWIRE_SPARK_LOG_LEVEL")}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    prelude = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        import kwire.spark as ks
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(script)], env=env, capture_output=True,
                          text=True, timeout=timeout_s, cwd=cwd)


def test_streaming_planning_and_commits_are_logged_on_the_driver_console(peer, unique_topic, tmp_path):
    """The stream's offsets, plans and commits run in a Python process the JVM starts; their
    INFO lines reach the driver's stderr, each with one logger prefix."""
    create(peer, unique_topic, 2)
    fill(peer, unique_topic, 2, 5)
    group = unique_topic + "-g"
    opts = options(peer, unique_topic, startingOffsets="earliest", commitToGroup=group)
    run = _driver(f"""
        ks.register(spark)
        q = (spark.readStream.format("kwire").options(**{opts!r}).load().writeStream.format("noop")
             .option("checkpointLocation", {str(tmp_path / 'ck')!r}).trigger(availableNow=True).start())
        q.awaitTermination()
        print("ROWS", sum(p["numInputRows"] for p in q.recentProgress))
        # the commit is the source's, in the Python process the JVM started; that process's
        # stderr reaches ours through a JVM thread, which a JVM exiting at once may cut short:
        # wait for the commit in Kafka, give the line a moment, stop Spark in order
        import time
        from kwire.spark.offset_reader import OffsetReader
        tps = [({unique_topic!r}, p) for p in range(2)]
        with OffsetReader(ks.parse_options({opts!r})) as r:
            deadline = time.monotonic() + 30
            while set(r.committed({group!r}, tps).values()) != {{5}} and time.monotonic() < deadline:
                time.sleep(0.1)
            print("COMMITTED", sorted(r.committed({group!r}, tps).items()))
        time.sleep(1)
        spark.stop()
    """, pythonpath=ROOT, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ROWS 10" in run.stdout
    assert f"COMMITTED [(({unique_topic!r}, 0), 5), (({unique_topic!r}, 1), 5)]" in run.stdout, run.stdout
    lines = [line for line in run.stderr.splitlines() if " kwire.spark [pid " in line]
    assert any("stream starts at" in line for line in lines), run.stderr[-3000:]
    assert any(f"{unique_topic}-0 reads [0, 5), 5 records" in line for line in lines), lines
    assert any(f"committed {{('{unique_topic}', 0): 5, ('{unique_topic}', 1): 5}} to group '{group}'" in line
               for line in lines), lines
    assert not any(line.count("kwire.spark") > 1 for line in lines), lines


def test_executors_without_kwire_fail_at_once_with_the_shipping_recipe(peer, unique_topic, tmp_path):
    """The driver imports kwire from the checkout, the workers get no path to it (as on a cluster
    where kwire was never shipped).  register and kafka_rdd raise ExecutorSetupError naming the
    executors' Python and the recipe before any read task runs (one probe job each);
    read_kafka's guarded read tasks fail the first action with the same message (no probe job);
    with spark.kwire.checkExecutors=true read_kafka raises ExecutorSetupError at the call."""
    create(peer, unique_topic, 1)
    fill(peer, unique_topic, 1, 3)
    opts = options(peer, unique_topic)
    run = _driver(f"""
        import time
        from kwire.errors import ExecutorSetupError
        for call in (lambda: ks.register(spark),
                     lambda: ks.kafka_rdd(spark.sparkContext, {{"bootstrap.servers": {peer.bootstrap!r}}},
                                          [({unique_topic!r}, 0, 0, 3)])):
            try:
                call()
                print("NO ERROR")
            except ExecutorSetupError as e:
                print("ERROR", e)
        print("JOBS", len(spark.sparkContext.statusTracker().getJobIdsForGroup(None)))
        df = ks.read_kafka(spark, **{opts!r})
        print("DEFINED, JOBS", len(spark.sparkContext.statusTracker().getJobIdsForGroup(None)))
        for action in (df.count, df.collect, lambda: df.select("value").toPandas()):
            t0 = time.monotonic()
            try:
                action()
                print("NO ERROR")
            except Exception as e:
                print("ACTION ERROR", round(time.monotonic() - t0, 1), " ".join(str(e).split()))
        spark.conf.set("spark.kwire.checkExecutors", "true")
        try:
            ks.read_kafka(spark, **{opts!r})
            print("NO ERROR")
        except ExecutorSetupError as e:
            print("ERROR", e)
    """, pythonpath=None, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    errors = [line for line in run.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 3 and "NO ERROR" not in run.stdout, run.stdout
    for e in errors:
        assert "kwire cannot be imported on the executors" in e and "No module named 'kwire'" in e
        assert sys.executable in e and "--archives env.tar.gz#environment" in e
    assert "JOBS 2" in run.stdout and "DEFINED, JOBS 2" in run.stdout  # one probe per call; none for read_kafka
    actions = [line for line in run.stdout.splitlines() if line.startswith("ACTION ERROR")]
    assert len(actions) == 3, run.stdout
    for a in actions:
        assert "ExecutorSetupError: kwire cannot be imported on the executors" in a, a
        assert "No module named 'kwire'" in a and sys.executable in a and "--archives env.tar.gz#environment" in a


def test_the_check_runs_once_per_application_and_can_be_turned_off(spark, peer, unique_topic, monkeypatch):
    """The probe job runs once per application for the paths without guarded tasks (kafka_rdd,
    register), never for read_kafka unless spark.kwire.checkExecutors=true, and not at all with
    false."""
    from kwire.spark import executors

    create(peer, unique_topic, 1)
    fill(peer, unique_topic, 1, 3)
    config = {"bootstrap.servers": peer.bootstrap}
    ks.kafka_rdd(spark.sparkContext, config, [(unique_topic, 0, 0, 3)])
    assert spark.sparkContext.applicationId in executors._checked
    probes = []
    monkeypatch.setattr(executors, "_run_probe", lambda *a: probes.append(a) or [])
    assert ks.kafka_rdd(spark.sparkContext, config, [(unique_topic, 0, 0, 3)]).count() == 3
    monkeypatch.setattr(executors, "_checked", set())
    assert ks.read_kafka(spark, **options(peer, unique_topic)).count() == 3
    assert probes == []  # read_kafka's tasks are guarded: no probe
    for setting, want in (("false", 0), ("true", 1)):
        spark.conf.set(executors.CHECK_CONF, setting)
        try:
            assert ks.read_kafka(spark, **options(peer, unique_topic)).count() == 3
            assert ks.kafka_rdd(spark.sparkContext, config, [(unique_topic, 0, 0, 3)]).count() == 3
        finally:
            spark.conf.unset(executors.CHECK_CONF)
        assert len(probes) == want  # true: read_kafka probes, and kafka_rdd finds the answer remembered
    spark.conf.set(executors.CHECK_CONF, "sometimes")
    try:
        with pytest.raises(ConfigError, match="must be auto, true or false"):
            ks.kafka_rdd(spark.sparkContext, config, [(unique_topic, 0, 0, 3)])
    finally:
        spark.conf.unset(executors.CHECK_CONF)
