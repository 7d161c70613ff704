"""``kwire demo``: the main job, end to end.

1. Start an embedded broker, Tansu or with ``--broker kafka`` Apache Kafka (unless
   ``--bootstrap`` names a cluster).
2. Create the topic (6 partitions) and, if it is new or empty, produce ``--records`` records
   with :class:`kwire.Producer` (a progress bar on stderr).
3. Run a PySpark ``local[2]`` job that reads the topic through kwire from the group's committed
   offsets, aggregates count and bytes per key and per partition, and commits the end offsets
   to the group once the job succeeded.
4. Run the same job again: it finds 0 new records, because the first run committed.

Tables go to stdout; progress and logs to stderr.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import ExitStack
from typing import Any

from .errors import KwireError, TopicAlreadyExistsError

_VALUE_BYTES = 100
_KEYS = 12


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _produce(bootstrap: str, topic: str, n: int, err: Any) -> float:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from .producer import Producer

    payload = b"v" * _VALUE_BYTES
    keys = [f"key-{i:02d}".encode() for i in range(_KEYS)]
    start = time.perf_counter()
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                   "compression.type": "lz4", "acks": "all"}) as producer, \
            Progress(TextColumn("producing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                     console=err, transient=False) as bar:
        task = bar.add_task("produce", total=n)
        step = 10_000
        for lo in range(0, n, step):
            for i in range(lo, min(n, lo + step)):
                producer.produce(topic, payload, key=keys[i % _KEYS])
            producer.poll(0)
            bar.update(task, completed=min(n, lo + step))
        remaining = producer.flush(120)
        if remaining:
            raise KwireError(f"{remaining} records were not acknowledged within 120 s")
    return time.perf_counter() - start


def _spark() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("kwire-demo")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _job(spark: Any, bootstrap: str, topic: str, group: str
         ) -> tuple[list[Any], list[Any], dict[Any, Any], dict[str, float]]:
    """One run of the job: read new records, aggregate, commit.  Returns the tables and timing."""
    from pyspark.sql import functions as F

    from .spark import await_commit, read_kafka

    start = time.perf_counter()
    df = read_kafka(spark, **{
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "group",
        "kafka.group.id": group,
        "kafka.auto.offset.reset": "earliest",
        "commitToGroup": group,
    })
    planned = time.perf_counter()
    per_partition = (df.groupBy("partition")
                     .agg(F.count(F.lit(1)).alias("records"), F.sum(F.length("value")).alias("bytes"))
                     .orderBy("partition").collect())
    first = time.perf_counter()
    per_key = (df.groupBy(F.col("key").cast("string").alias("key"))
               .agg(F.count(F.lit(1)).alias("records"), F.sum(F.length("value")).alias("bytes"))
               .orderBy("key").collect())
    again = time.perf_counter()
    committed = await_commit(df, timeout_s=60)
    timing = {"plan_s": planned - start, "first_action_s": first - planned, "second_action_s": again - first}
    return per_partition, per_key, committed, timing


def _timing_line(records: int, timing: dict[str, float], cold: bool) -> str:
    """Planning, the first action and the same read again, each on its own: a first action
    also pays for starting Spark's Python workers (cold), the second reads warm."""
    def rate(seconds: float) -> str:
        return f"{records / seconds:,.0f} records/s" if records and seconds > 0 else "-"

    first = "first action" + (" (starts Spark's Python workers)" if cold else "")
    return (f"planning {timing['plan_s']:.2f} s; {first} {timing['first_action_s']:.2f} s "
            f"({rate(timing['first_action_s'])}); the same records read again "
            f"{timing['second_action_s']:.2f} s ({rate(timing['second_action_s'])}, steady state)")


def _table(title: str, first: str, rows: Any, total_label: str = "total") -> Any:
    from rich.table import Table

    table = Table(title=title)
    table.add_column(first)
    table.add_column("records", justify="right")
    table.add_column("bytes", justify="right")
    records = volume = 0
    for row in rows:
        table.add_row(str(row[0]), f"{row['records']:,}", f"{row['bytes'] or 0:,}")
        records += row["records"]
        volume += row["bytes"] or 0
    table.add_row(total_label, f"{records:,}", f"{volume:,}", style="bold")
    return table, records


def run_demo(args: Any) -> int:
    from .admin import Admin
    from .embedded import TansuBroker

    out, err = _console(), _console(stderr=True)
    with ExitStack() as stack:
        bootstrap = args.bootstrap
        if not bootstrap and getattr(args, "broker", "tansu") == "kafka":
            from .embedded.kafka import KafkaCluster

            t0 = time.monotonic()
            cluster = stack.enter_context(KafkaCluster())
            bootstrap = cluster.bootstrap
            err.print(f"started an embedded Apache Kafka {cluster.version} node on {bootstrap} "
                      f"in {time.monotonic() - t0:.1f} s")
        elif not bootstrap:
            broker = stack.enter_context(TansuBroker())
            bootstrap = broker.bootstrap
            err.print(f"started an embedded Tansu broker on {bootstrap}")
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            created = True
            try:
                admin.create_topics([(args.topic, args.partitions, 1)], timeout=30)
            except TopicAlreadyExistsError:
                created = False
            admin.wait_for_topics([args.topic], timeout=30)
        if created:
            err.print(f"created topic {args.topic!r} with {args.partitions} partitions")
            produce_s = _produce(bootstrap, args.topic, args.records, err)
            err.print(f"produced {args.records:,} records in {produce_s:.1f} s "
                      f"({args.records / produce_s:,.0f} records/s)")
        else:
            err.print(f"topic {args.topic!r} exists: producing nothing, reading what is new")

        err.print("starting PySpark local[2] ...")
        spark = _spark()
        stack.callback(spark.stop)
        for run in (1, 2):
            per_partition, per_key, committed, timing = _job(spark, bootstrap, args.topic, args.group)
            table, total = _table(f"run {run}: records per partition", "partition", per_partition)
            out.print(table)
            if per_key:
                out.print(_table(f"run {run}: records per key", "key", per_key)[0])
            out.print(f"run {run}: {total:,} new records; committed end offsets of {len(committed)} partitions "
                      f"to group {args.group!r} (sum {sum(committed.values()):,})")
            out.print("  " + _timing_line(total, timing, cold=run == 1), soft_wrap=True)
    return 0
