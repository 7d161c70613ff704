"""Where ``kwire.spark``'s log lines go in the Python processes Spark starts.

Planning and commits of a streaming query, the Data Source's planning and every read task run
in Python processes the JVM starts (``SPARK_PYTHON_RUNTIME=PYTHON_WORKER``), where nobody
configured logging: Python would drop INFO lines and print WARNINGs without a name or time.
There, unless the process configured logging itself, ``kwire.spark`` writes its lines to the
process's stderr, which Spark hands on: the driver's console in ``local`` mode, the executor's
stderr log on a cluster.  ``KWIRE_SPARK_LOG_LEVEL`` (default ``INFO``) sets the level, e.g. in
``spark.executorEnv.KWIRE_SPARK_LOG_LEVEL``.

On the driver, configure logging as usual (``logging.basicConfig(level=logging.INFO)``).
"""
from __future__ import annotations

import logging
import os
import sys

__all__ = ["in_spark_worker", "route_worker_logs", "LOG_FORMAT"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [pid %(process)d]: %(message)s"
_routed = False


def in_spark_worker() -> bool:
    """Whether this process is a Python worker the Spark JVM started."""
    return os.environ.get("SPARK_PYTHON_RUNTIME") == "PYTHON_WORKER"


def route_worker_logs() -> None:
    """In a Spark Python worker without logging configured, send ``kwire.spark`` to stderr."""
    global _routed
    if _routed or not in_spark_worker():
        return
    _routed = True
    log = logging.getLogger("kwire.spark")
    if log.handlers or logging.getLogger("kwire").handlers or logging.getLogger().handlers:
        return
    level = os.environ.get("KWIRE_SPARK_LOG_LEVEL", "INFO").upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    log.addHandler(handler)
    log.setLevel(logging.getLevelName(level) if isinstance(logging.getLevelName(level), int) else logging.INFO)
    log.propagate = False
