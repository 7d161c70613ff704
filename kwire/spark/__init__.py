"""Kafka into PySpark through kwire.

Modelled on Spark's own Kafka source: the driver plans ``[from, until)`` offset ranges with pure
functions (:mod:`kwire.spark.planner`) from offsets it looks up (:mod:`kwire.spark.offset_reader`);
executors read exactly those ranges without joining a consumer group, over cached connections
(:mod:`kwire.spark.reader`), decoding straight into Arrow (:mod:`kwire.spark.arrow`); offsets
are committed by the driver after the job (``commitToGroup``).

Four ways in::

    df = kwire.spark.read_kafka(spark, **{"kafka.bootstrap.servers": "h:9092", "subscribe": "t"})

    kwire.spark.register(spark)
    df = spark.read.format("kwire").option("kafka.bootstrap.servers", "h:9092") \\
                                   .option("subscribe", "t").load()
    stream = spark.readStream.format("kwire").option(...).load()

    rdd = kwire.spark.kafka_rdd(sc, {"bootstrap.servers": "h:9092"}, [("t", 0, 0, 100)])
    batches = kwire.spark.kafka_arrow_rdd(sc, {"bootstrap.servers": "h:9092"}, ranges,
                                          num_partitions=sc.defaultParallelism)

Options are Spark's Kafka source options (:mod:`kwire.spark.options`) plus
``startingOffsets=group`` and ``commitToGroup``.
"""
from __future__ import annotations

from typing import Any

from .logs import route_worker_logs

route_worker_logs()  # in a Python worker Spark started: kwire.spark's lines to its stderr

from .dataframe import (
    PendingCommit,
    await_commit,
    kafka_arrow_rdd,
    kafka_rdd,
    map_kafka_arrow,
    read_kafka,
)
from .executors import check_executors
from .options import OffsetSpec, SourceOptions, parse_options
from .planner import DataLossError, OffsetRange, Plan, pack_ranges, plan_ranges, split_ranges
from .progress import KafkaProgress, add_lag_listener, kafka_progress
from .reader import KafkaRow, KafkaRowWithHeaders, ReadSettings, close_cached_clients
from .schema import kafka_schema, kafka_schema_ddl

__all__ = [
    "read_kafka", "map_kafka_arrow", "kafka_rdd", "kafka_arrow_rdd", "register", "await_commit", "PendingCommit",
    "parse_options", "SourceOptions", "OffsetSpec",
    "OffsetRange", "Plan", "plan_ranges", "split_ranges", "pack_ranges", "DataLossError",
    "KafkaRow", "KafkaRowWithHeaders", "ReadSettings", "close_cached_clients",
    "kafka_schema", "kafka_schema_ddl",
    "kafka_progress", "KafkaProgress", "add_lag_listener", "check_executors",
]


def register(spark: Any) -> None:
    """Register the "kwire" Python Data Source with ``spark`` (batch and streaming reads),
    once per session, after checking that the executors can import kwire
    (:func:`~kwire.spark.executors.check_executors`)."""
    from .datasource import register_once

    check_executors(spark)
    register_once(spark)
