"""``commitToGroup`` for batch reads: commit only what a successful action read in full.

A :func:`~kwire.spark.read_kafka` DataFrame with ``commitToGroup`` commits its planned end
offsets to the group once, after the first Spark action over it (or over a DataFrame derived
from it) that

1. **succeeded**: a ``QueryExecutionListener`` registered through py4j reports the action's
   outcome.  (Not ``pyspark.sql.Observation.get``: since PySpark 4 it returns whatever metrics
   were collected when an action *fails*, so it cannot tell success from failure.)  A later
   stage that fails after every read task finished -- a UDF after a shuffle -- fails the action,
   and nothing is committed.
2. **passed every record on**: its optimized plan has no limit, offset, tail or sample (a
   ``show()``, ``take(n)``, ``head()``, ``first()``, ``limit(n)``: Spark may read whole ranges
   for them -- ``limit(12)`` over two ranges of 10 records read and observed all 20 in tests --
   but only n records go on);
3. **read every planned range in full**, and passed every record of it on to the rest of the
   query.  Two independent witnesses must agree:

   * the executors: a read task, once a range's reader ran to its end, adds
     ``(topic, partition, from, until, records, fingerprint)`` to a PySpark accumulator.
     Spark merges accumulator updates of successful tasks only (a task that fails while or
     after reading reports nothing);
   * the query: the DataFrame is ``observe``\\ d right above the scan, counting the records
     that flowed through it in this action and XOR-ing their ``offset ^ (partition << 40)``.

   The executors' reports alone are not enough: Spark may read a Python task's output to its
   end although nothing above it used the rows (a scan an optimisation cut short, a task
   whose output Spark drained to reuse its worker), and their reports add up over actions.
   The observed metrics alone cannot tell a complete range either (transaction markers and
   compaction leave gaps in the offsets).  A range counts as read when both say so: every
   planned range reported, and the action observed exactly the reported number of records
   with the same fingerprint (so a record counted twice and another missing do not pass).

**A partial action commits nothing.**  ``show()``, ``take(n)``, ``head()``, ``first()``,
``isEmpty()`` or anything over ``limit(n)`` (``df.limit(1000).write...`` included) commit
nothing, not even the ranges they happened to read in full: the commit keeps waiting for a
later action that reads everything -- ``count()``, a ``write``, a ``collect()``,
``toPandas()`` -- and commits all the planned end offsets then.  Partial actions never commit
part of the plan, so the group's committed offsets never move past a record that no
successful action passed on.  :attr:`PendingCommit.reason` says why nothing has been
committed yet.

Actions that go around the DataFrame API (``df.rdd...``, ``df.foreach``) report no query
outcome and never commit.  An action in which the DataFrame appears twice (a self-union or
self-join) observes its records twice and does not commit either.  If failOnDataLoss=false
skipped records that vanished between two actions, the ranges have two different reports and
the commit refuses (the reason says so).
"""
from __future__ import annotations

import logging
import queue
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, KafkaTimeoutError, KwireError
from .offset_reader import OffsetReader
from .options import SourceOptions
from .planner import OffsetRange

if TYPE_CHECKING:
    from pyspark.accumulators import AccumulatorParam

__all__ = ["PendingCommit", "progress_param", "check_complete", "observe_for_commit", "commit_after_full_read",
           "FINGERPRINT_SHIFT"]

_log = logging.getLogger("kwire.spark")

# Logical plan nodes after which an action passes on only some of the records it read: their
# names open a line of the plan's tree string (after the tree's "+- " / ":- ").
_PARTIAL_OPERATORS = re.compile(r"^[\s:|+-]*(GlobalLimit|LocalLimit|Limit|Tail|Offset|Sample)\b", re.M)

FINGERPRINT_SHIFT = 40  # a record's fingerprint is offset ^ (partition << 40)

RangeKey = tuple[str, int, int, int]  # (topic, partition, from_offset, until_offset)
# An executor's report of a range it read to its end: (topic, partition, from, until, records, fingerprint)
RangeReport = tuple[str, int, int, int, int, int]
# What the listener hands the commit thread: (kind, action's name, detail)
ActionEvent = tuple[str, str, Any]


def progress_param() -> AccumulatorParam[frozenset[RangeReport]]:
    """The accumulator parameter for the executors' finished-range reports."""
    from pyspark.accumulators import AccumulatorParam

    class _ProgressParam(AccumulatorParam[frozenset[RangeReport]]):
        """Finished ranges: a frozenset of (topic, partition, from, until, records, fingerprint)."""

        def zero(self, value: frozenset[RangeReport]) -> frozenset[RangeReport]:
            return frozenset()

        def addInPlace(self, a: Iterable[RangeReport],  # noqa: N802 - PySpark's name
                       b: Iterable[RangeReport]) -> frozenset[RangeReport]:
            return frozenset(a) | frozenset(b)

    return _ProgressParam()


def check_complete(planned: Iterable[OffsetRange], reports: Iterable[RangeReport],
                   observed_records: int | None, observed_fingerprint: int | None, *,
                   records_observed: bool = True) -> str | None:
    """None when the action read every planned range in full; else why not (pure).

    ``reports``: the executors' ``(topic, partition, from, until, records, fingerprint)``;
    ``observed_*``: the action's observed record count and XOR of fingerprints (None: no row
    was observed).  Without ``records_observed`` (map_kafka_arrow: the records never reach
    the JVM; the user's function took every batch of a range it reported) only the reports
    count.
    """
    by_range: dict[RangeKey, set[tuple[int, int]]] = {}
    for t, p, a, b, n, fp in reports:
        by_range.setdefault((t, p, a, b), set()).add((n, fp))
    want_n = 0
    want_fp = 0
    unread = []
    for r in planned:
        key = (r.topic, r.partition, r.from_offset, r.until_offset)
        got = by_range.get(key)
        if not got:
            unread.append(str(r))
            continue
        if len(got) > 1:
            return (f"{r} was read twice with different records ({sorted(got)}): records vanished "
                    "between actions (failOnDataLoss=false)")
        n, fp = next(iter(got))
        want_n += n
        want_fp ^= fp
    if unread:
        more = f" and {len(unread) - 3} more" if len(unread) > 3 else ""
        return f"no action has read {', '.join(unread[:3])}{more} to its end"
    if not records_observed:
        return None
    seen_n = observed_records or 0
    seen_fp = observed_fingerprint or 0
    if seen_n != want_n or seen_fp != want_fp:
        return (f"the action passed on {seen_n} of the {want_n} records planned (a partial action: "
                "show, take, limit, head; or the DataFrame appears twice in it)")
    return None


def observe_for_commit(df: Any, name: str, *, records: bool = True) -> Any:
    """``df`` observed under ``name``: the record count and the XOR of fingerprints -- or,
    without ``records`` (rows that are not Kafka records), only the row count, so the listener
    still hears of each action."""
    from pyspark.sql import functions as F

    if not records:
        return df.observe(name, F.count(F.lit(1)).alias("rows"), F.lit(None).cast("long").alias("none"))
    fingerprint = F.col("offset").bitwiseXOR(F.shiftleft(F.col("partition").cast("long"), FINGERPRINT_SHIFT))
    return df.observe(name, F.count(F.lit(1)).alias("records"), F.bit_xor(fingerprint).alias("fingerprint"))


class _ActionListener:
    """A ``QueryExecutionListener`` in Python (py4j callback): hands the outcome of each action
    over the observed DataFrame to the commit thread; does nothing else on Spark's listener
    thread."""

    def __init__(self, name: str, events: queue.Queue[ActionEvent]):
        self.name = name
        self.events = events

    def onSuccess(self, func_name: str, qe: Any, duration_ns: int) -> None:  # noqa: N802 - Java's name
        try:
            metrics = qe.observedMetrics()
            if metrics.contains(self.name):
                row = metrics.apply(self.name)
                found = _PARTIAL_OPERATORS.search(qe.optimizedPlan().toString())
                self.events.put(("success", func_name, (row.get(0), row.get(1), found and found.group(1))))
        except Exception as exc:  # never let an error travel back into Spark's listener bus
            self.events.put(("error", func_name, exc))

    def onFailure(self, func_name: str, qe: Any, exception: Any) -> None:  # noqa: N802
        try:
            if self.name in qe.logical().toString():
                self.events.put(("failure", func_name, str(exception.getMessage())))
        except Exception as exc:
            self.events.put(("error", func_name, exc))

    class Java:
        implements = ["org.apache.spark.sql.util.QueryExecutionListener"]


class PendingCommit:
    """The ``commitToGroup`` commit of a :func:`read_kafka` DataFrame (``df.kwire_commit``).

    A driver thread waits for the first successful action over the DataFrame that read every
    planned range in full (see the module's documentation), then commits ``offsets`` (the
    plan's end offsets) to ``group``.  :meth:`wait` returns what was committed, or raises why
    not; :attr:`reason` says why nothing is committed yet.
    """

    def __init__(self, options: SourceOptions, offsets: Mapping[tuple[str, int], int], *,
                 planned: list[OffsetRange] | None = None, progress: Any = None, spark: Any = None,
                 name: str | None = None, records_observed: bool = True):
        self.options = options
        self.records_observed = records_observed
        if options.commit_group is None:
            raise ConfigError("a PendingCommit needs options with commitToGroup")
        self.group: str = options.commit_group
        self.offsets = dict(offsets)
        self.planned = list(planned or [])
        self.name = name
        self.committed: dict[tuple[str, int], int] | None = None
        self.error: BaseException | None = None
        self.reason = "waiting for the first action over the DataFrame"
        self.actions_seen = 0  # outcomes of actions over the DataFrame handled so far
        self._progress = progress
        self._events: queue.Queue[ActionEvent] = queue.Queue()
        self._done = threading.Event()
        self._listener: _ActionListener | None = None
        self._manager: Any = None  # the session's JVM ExecutionListenerManager
        if spark is not None:
            if name is None:
                raise ConfigError("a PendingCommit that listens to Spark needs the observation's name")
            self._listen(spark, name)
        self._thread = threading.Thread(target=self._run, name=f"kwire-commit-{self.group}", daemon=True)
        self._thread.start()

    def _listen(self, spark: Any, name: str) -> None:
        jsession = getattr(spark, "_jsparkSession", None)
        if jsession is None:
            raise ConfigError("commitToGroup needs a classic SparkSession (not Spark Connect): it learns "
                              "whether an action succeeded from a QueryExecutionListener on the driver")
        from pyspark.java_gateway import ensure_callback_server_started

        start_callbacks: Callable[[Any], None] = ensure_callback_server_started  # unannotated in PySpark
        start_callbacks(spark.sparkContext._gateway)
        self._listener = _ActionListener(name, self._events)
        self._manager = jsession.listenerManager()
        self._manager.register(self._listener)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _stop_listening(self) -> None:
        if self._manager is not None:
            try:
                self._manager.unregister(self._listener)
            except Exception:  # the session (or the JVM) is gone
                pass
            self._manager = None

    def cancel(self) -> None:
        """Stop waiting: nothing will be committed."""
        if not self._done.is_set():
            self.error = KwireError(f"the commit to group {self.group!r} was cancelled")
            self._events.put(("cancel", "", None))

    def _run(self) -> None:
        try:
            if self.name is not None:  # else nothing was planned: the end offsets equal the start
                while True:
                    kind, func, detail = self._events.get()
                    if kind == "cancel":
                        return
                    if self._handle(kind, func, detail):
                        break
                    self.actions_seen += 1
            with OffsetReader(self.options) as offsets:
                offsets.commit(self.group, self.offsets)
            self.committed = dict(self.offsets)
            self.reason = "committed"
            _log.info("committed %s to group %r", self.offsets, self.group)
        except BaseException as exc:
            self.error = exc
            self.reason = f"committing to group {self.group!r} failed: {exc}"
            _log.error("%s", self.reason)
        finally:
            self._stop_listening()
            self._done.set()

    def _handle(self, kind: str, func: str, detail: Any) -> bool:
        """True when this action's outcome allows the commit; else :attr:`reason` says why not."""
        if kind == "failure":
            self.reason = f"the last action ({func}) failed: nothing committed; {detail}"
            _log.warning("%s", self.reason)
            return False
        if kind == "error":
            self.reason = f"the outcome of an action ({func}) could not be read: {detail!r}"
            _log.warning("%s", self.reason)
            return False
        records, fingerprint, partial = detail
        if partial:
            why: str | None = f"it has a {partial} (a partial action: show, take, head, limit, first, tail, sample)"
        else:
            why = check_complete(self.planned, self._progress.value, records, fingerprint,
                                 records_observed=self.records_observed)
        if why is None:
            return True
        self.reason = f"the last action ({func}) succeeded, but {why}: nothing committed yet"
        _log.info("%s", self.reason)
        return False

    def wait(self, timeout_s: float | None = None) -> dict[tuple[str, int], int]:
        if not self._done.wait(timeout_s):
            raise KafkaTimeoutError(f"the commit to group {self.group!r} has not happened within "
                                    f"{timeout_s} s: {self.reason}")
        if self.error is not None:
            raise self.error
        return dict(self.committed or {})


def commit_after_full_read(spark: Any, df: Any, options: SourceOptions, end: Mapping[tuple[str, int], int],
                           planned: list[OffsetRange], progress: Any, *, records: bool = True) -> Any:
    """``df`` observed, carrying its :class:`PendingCommit` as ``df.kwire_commit``.
    ``records``: the rows of ``df`` are the records read (False: what a function made of them)."""
    if not any(r.until_offset > r.from_offset for r in planned):
        df.kwire_commit = PendingCommit(options, end)
        return df
    name = f"kwire-commit-{uuid.uuid4().hex}"
    observed = observe_for_commit(df, name, records=records)
    observed.kwire_commit = PendingCommit(options, end, planned=planned, progress=progress, spark=spark,
                                          name=name, records_observed=records)
    return observed
