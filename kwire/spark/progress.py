"""Lag and rates of kwire's streaming source, read from Spark's query progress on the driver.

Python streaming sources cannot add metrics to ``StreamingQueryProgress`` (Spark's
``ReportsSourceMetrics`` has no Python counterpart in PySpark 4.2), but kwire's source reports
the latest offsets it saw (``reportLatestOffset``), so each progress holds, per source, the
batch's ``startOffset``/``endOffset``, the ``latestOffset`` and the row rates.  From them::

    lag = kwire.spark.add_lag_listener(spark)   # an INFO line per batch on "kwire.spark"
    q = spark.readStream.format("kwire")...start()
    ...
    p = kwire.spark.kafka_progress(q.lastProgress)[0]
    p.lag            # {("t", 0): 120, ("t", 1): 0}: records after the batch's end
    p.total_lag, p.rows, p.processed_rows_per_s

Lag is ``latest - end`` per partition as of the batch's planning, the same figure Spark's own
Kafka source reports as ``avgOffsetsBehindLatest``/``maxOffsetsBehindLatest``.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["KafkaProgress", "kafka_progress", "offsets_of", "LagRecorder", "add_lag_listener"]

_log = logging.getLogger("kwire.spark")

TP = tuple[str, int]  # (topic, partition)


@dataclasses.dataclass(frozen=True)
class KafkaProgress:
    """One Kafka source of one micro-batch."""
    batch_id: int
    rows: int
    input_rows_per_s: float
    processed_rows_per_s: float
    start: dict[TP, int]   # {(topic, partition): offset}; empty for the first batch
    end: dict[TP, int]
    latest: dict[TP, int]
    lag: dict[TP, int]     # {(topic, partition): latest - end}

    @property
    def total_lag(self) -> int:
        return sum(self.lag.values())

    @property
    def max_lag(self) -> int:
        return max(self.lag.values(), default=0)

    def describe(self) -> str:
        worst = sorted(self.lag.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
        parts = ", ".join(f"{t}-{p} {n}" for (t, p), n in worst)
        return (f"batch {self.batch_id}: {self.rows} rows, {self.processed_rows_per_s:,.0f} rows/s processed, "
                f"{self.input_rows_per_s:,.0f} rows/s in; lag {self.total_lag}" + (f" ({parts})" if parts else ""))


def offsets_of(value: Any) -> dict[TP, int]:
    """``{(topic, partition): offset}`` from a source offset as progress reports it (a JSON
    string or a dict in Spark's Kafka format); other sources' offsets give ``{}``."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, Mapping):
        return {}
    out: dict[TP, int] = {}
    for topic, parts in value.items():
        if topic.startswith("@") or not isinstance(parts, Mapping):
            continue
        for p, o in parts.items():
            try:
                out[(topic, int(p))] = int(o)
            except (TypeError, ValueError):
                return {}
    return out


def _as_dict(progress: Any) -> Mapping[str, Any]:
    if isinstance(progress, Mapping):
        return progress
    if isinstance(progress, str):
        parsed: Mapping[str, Any] = json.loads(progress)
        return parsed
    json_text = getattr(progress, "json", None)  # pyspark's StreamingQueryProgress
    if json_text is not None:
        parsed = json.loads(json_text)
        return parsed
    raise TypeError(f"not a streaming query progress: {type(progress).__name__}")


def kafka_progress(progress: Any) -> list[KafkaProgress]:
    """The Kafka sources (Spark Kafka offset format, kwire's included) of one progress:
    ``StreamingQueryProgress``, ``query.lastProgress`` (a dict) or its JSON."""
    p = _as_dict(progress)
    out = []
    for source in p.get("sources") or ():
        end = offsets_of(source.get("endOffset"))
        latest = offsets_of(source.get("latestOffset"))
        if not end:
            continue
        out.append(KafkaProgress(
            batch_id=int(p.get("batchId", -1)), rows=int(source.get("numInputRows") or 0),
            input_rows_per_s=float(source.get("inputRowsPerSecond") or 0.0),
            processed_rows_per_s=float(source.get("processedRowsPerSecond") or 0.0),
            start=offsets_of(source.get("startOffset")), end=end, latest=latest,
            lag={tp: max(0, latest[tp] - o) for tp, o in end.items() if tp in latest}))
    return out


class LagRecorder:
    """What :func:`add_lag_listener` registers, minus Spark's base class (so that importing
    ``kwire.spark`` does not import PySpark's streaming module): logs each batch's Kafka lag
    and rates on the driver (INFO on ``kwire.spark``) and keeps the last
    :class:`KafkaProgress` es per query id in ``last``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last: dict[str, list[KafkaProgress]] = {}

    def record(self, progress: Any) -> None:
        sources = kafka_progress(progress)
        if not sources:
            return
        with self._lock:
            self.last[str(progress.id)] = sources
        for s in sources:
            _log.info("query %s %s", progress.name or progress.id, s.describe())


def add_lag_listener(spark: Any) -> LagRecorder:
    """Register a ``StreamingQueryListener`` with ``spark`` that logs every micro-batch's Kafka
    lag and rates (INFO on ``kwire.spark``); returns its :class:`LagRecorder`, whose ``last``
    holds the latest :class:`KafkaProgress` es per query id."""
    from pyspark.sql.streaming import StreamingQueryListener

    recorder = LagRecorder()

    class _LagListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            recorder.record(event.progress)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(_LagListener())
    return recorder
