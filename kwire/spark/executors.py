"""Check, once per Spark application, that the executors can run kwire.

Without kwire on the executors every read task fails on unpickling its function, Spark retries
it (``spark.task.maxFailures``, 4 on a cluster) and the job ends after a minute with a long
stack trace.  :func:`check_executors` runs one tiny job first -- its function does not need
kwire to be unpickled -- and raises :class:`~kwire.errors.ExecutorSetupError` at once, saying
what the executors' Python reported and how to ship kwire (docs/SPARK.md, "Shipping kwire to
executors").  :func:`~kwire.spark.read_kafka`, :func:`~kwire.spark.register`,
:func:`~kwire.spark.kafka_rdd` and :func:`~kwire.spark.kafka_arrow_rdd` call it; the answer is
remembered per application, so it costs one short job per application (in a cold job it starts
the Python worker that the read then reuses).

:func:`~kwire.spark.read_kafka` (its default path, and every DataFrame made from it) and
:func:`~kwire.spark.map_kafka_arrow` run no such job: their read tasks are :func:`guarded`, a
function the executors unpickle without kwire, which imports kwire first and, if that fails or
finds another version, fails the task with the same message (``ExecutorSetupError: kwire cannot
be imported on the executors: ...`` and the recipe) -- the first action fails at once, with no
minute of retries, and a cold job does not pay a job of its own (0.5-0.8 s of a cold
``read_kafka(...).count()`` that is ~4 s in all).

``spark.kwire.checkExecutors``: ``auto`` (the default: the job where no guard is), ``true`` (the
job before every path, read_kafka's too: ``ExecutorSetupError`` at the call), ``false`` (no job;
the guards stay: they cost nothing).
"""
from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..errors import ConfigError, ExecutorSetupError

__all__ = ["check_executors", "guarded", "SHIPPING_RECIPE", "CHECK_CONF"]

_log = logging.getLogger("kwire.spark")

CHECK_CONF = "spark.kwire.checkExecutors"

SHIPPING_RECIPE = (
    "Ship kwire with the job: pack a Python environment that has kwire "
    "(python -m venv env && env/bin/pip install 'kwire[arrow]' 'pandas>=2.2,<3' venv-pack "
    "&& env/bin/venv-pack -p env -o env.tar.gz) "
    "and submit with --archives env.tar.gz#environment --conf spark.pyspark.python=./environment/bin/python "
    "(for format(\"kwire\") and streams in client mode also unpack env.tar.gz into ./environment in the "
    "driver's working directory: Spark starts the Data Source's planning Python there with that relative path); "
    "or install kwire into the executors' Python. "
    "See docs/SPARK.md, 'Shipping kwire to executors'.")

# The probe is compiled from source in a module of its own name, so cloudpickle sends it by
# value: the executors unpickle it without kwire.
_PROBE_SOURCE = '''
def probe(_):
    import importlib, sys
    try:
        kwire = importlib.import_module("kwire")
        impl = importlib.import_module("kwire._impl").IMPLEMENTATION
        importlib.import_module("kwire.spark.reader")
        yield (sys.executable, sys.version.split()[0], getattr(kwire, "__version__", "?"), impl, None)
    except Exception as e:  # report, never fail the probe task
        yield (sys.executable, sys.version.split()[0], None, None, "%s: %s" % (type(e).__name__, e))
'''

# The same probe as a mapInArrow function: a DataFrame job runs in the Python worker daemon that
# read_kafka's mapInArrow tasks then reuse (an RDD job starts a daemon of its own, a second
# Python start-up in a cold job).
_ARROW_PROBE_SOURCE = _PROBE_SOURCE + '''

def strings(pa, values):
    # A string column made from its buffers: pa.array() imports pandas (to see whether it was
    # given a pandas object), a third of a second of each cold worker's start that the read
    # tasks after the probe never need.
    import array
    offsets, data, valid = array.array("i", [0]), bytearray(), bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v is not None:
            data += v.encode()
            valid[i >> 3] |= 1 << (i & 7)
        offsets.append(len(data))
    return pa.Array.from_buffers(pa.string(), len(values), [
        pa.py_buffer(bytes(valid)), pa.py_buffer(offsets.tobytes()), pa.py_buffer(bytes(data))])


def arrow_probe(batches):
    import pyarrow as pa
    rows = []
    for batch in batches:
        for _ in range(batch.num_rows):
            rows.extend(probe(None))
    cols = list(zip(*rows)) if rows else [(), (), (), (), ()]
    yield pa.RecordBatch.from_arrays([strings(pa, list(c)) for c in cols],
                                     names=["exe", "version", "kwire", "impl", "error"])
'''
_ARROW_PROBE_SCHEMA = "exe string, version string, kwire string, impl string, error string"

_lock = threading.Lock()
_checked: set[str] = set()


def _probe(name: str = "probe") -> Callable[..., Any]:
    namespace: dict[str, Any] = {"__name__": "kwire_executor_probe"}
    exec(compile(_ARROW_PROBE_SOURCE, "<kwire executor probe>", "exec"), namespace)
    probe: Callable[..., Any] = namespace[name]
    return probe


def _run_probe(spark_or_sc: Any, tasks: int) -> list[tuple[Any, ...]]:
    """The executors' reports: through a DataFrame's mapInArrow when given a SparkSession and
    PySpark can run one here (pyarrow and pandas), else through an RDD."""
    sc = getattr(spark_or_sc, "sparkContext", spark_or_sc)
    if sc is not spark_or_sc and importlib.util.find_spec("pyarrow") and importlib.util.find_spec("pandas"):
        df = spark_or_sc.range(0, tasks, 1, tasks).mapInArrow(_probe("arrow_probe"), _ARROW_PROBE_SCHEMA)
        return [tuple(r) for r in df.collect()]
    reports: list[tuple[Any, ...]] = sc.parallelize(range(tasks), tasks).mapPartitions(_probe()).collect()
    return reports


def _check_setting(spark_or_sc: Any, sc: Any) -> str:
    """``spark.kwire.checkExecutors`` as "auto", "true" or "false": the session's conf (given a
    SparkContext, the active session's), else the application's."""
    session = spark_or_sc if spark_or_sc is not sc else _active_session()
    if session is not None:  # (a session's conf holds the application's too)
        value = session.conf.get(CHECK_CONF, "auto")
    else:  # the context's own conf: getConf() would copy it, a JVM call per entry
        value = sc._jsc.sc().conf().get(CHECK_CONF, "auto")
    text = str(value).strip().lower()
    if text in ("false", "0", "no", "off"):
        return "false"
    if text in ("true", "1", "yes", "on"):
        return "true"
    if text in ("auto", ""):
        return "auto"
    raise ConfigError(f"{CHECK_CONF} must be auto, true or false, not {value!r}")


def _active_session() -> Any:
    try:
        from pyspark.sql import SparkSession

        return SparkSession.getActiveSession()
    except Exception:  # no SQL here, or no session
        return None


def check_executors(sc: Any, *, guarded_tasks: bool = False) -> None:
    """Raise :class:`~kwire.errors.ExecutorSetupError` unless the executors import this
    kwire version (once per application; ``sc`` a SparkContext or SparkSession).

    ``guarded_tasks``: the caller's read tasks are :func:`guarded` -- then the job runs only
    with ``spark.kwire.checkExecutors=true``."""
    spark_or_sc, sc = sc, getattr(sc, "sparkContext", sc)
    setting = _check_setting(spark_or_sc, sc)
    if setting == "false" or (setting == "auto" and guarded_tasks):
        return
    app = sc.applicationId
    with _lock:
        if app in _checked:
            return
        tasks = max(1, min(int(sc.defaultParallelism), 8))
        try:
            reports = _run_probe(spark_or_sc, tasks)
        except Exception as e:  # the executors' Python did not even start, or died
            first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
            raise ExecutorSetupError(f"Spark could not run a Python task on the executors to check for kwire "
                                     f"({first[:300]}). {SHIPPING_RECIPE}") from e
        bad = sorted({r for r in reports if r[4] is not None})
        if bad:
            where = "; ".join(f"{exe} (Python {ver}): {err}" for exe, ver, _, _, err in bad)
            raise ExecutorSetupError(f"kwire cannot be imported on the executors: {where}. {SHIPPING_RECIPE}")
        versions = sorted({(r[2], r[3]) for r in reports})
        if any(v != __version__ for v, _ in versions):
            raise ExecutorSetupError(
                f"the executors have kwire {', '.join(v for v, _ in versions)}, the driver {__version__}: "
                f"plans and offsets must be read by the same version. {SHIPPING_RECIPE}")
        if any(impl != "cython" for _, impl in versions):
            _log.warning("the executors run kwire's pure-Python codec (the compiled one did not load there): "
                         "reading works, several times slower")
        _checked.add(app)


# A read task's wrapper, compiled in a module of its own name as the probe is, so cloudpickle
# sends it by value: an executor without kwire unpickles it, and it says what is wrong.
_GUARD_SOURCE = '''
class ExecutorSetupError(RuntimeError):
    """kwire.errors.ExecutorSetupError's name, where kwire cannot be imported."""


def guarded(payload, version, recipe, name):
    def task(batches):
        import sys
        try:
            import kwire
            import kwire.spark.reader
        except Exception as e:
            raise ExecutorSetupError("kwire cannot be imported on the executors: %s (Python %s): %s: %s. %s" % (
                sys.executable, sys.version.split()[0], type(e).__name__, e, recipe)) from None
        if getattr(kwire, "__version__", None) != version:
            raise ExecutorSetupError(
                "the executors have kwire %s, the driver %s: plans and offsets must be read by the same "
                "version. %s" % (getattr(kwire, "__version__", "?"), version, recipe))
        impl = getattr(sys.modules.get("kwire._impl"), "IMPLEMENTATION", None)
        if impl not in ("cython", None) and not getattr(kwire, "_kwire_warned_impl", False):
            kwire._kwire_warned_impl = True
            import logging
            logging.getLogger("kwire.spark").warning(
                "this executor runs kwire's pure-Python codec (the compiled one did not load here): "
                "reading works, several times slower")
        import pickle
        return pickle.loads(payload)(batches)
    task.__name__ = task.__qualname__ = name
    return task
'''


def guarded(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` (a ``mapInArrow`` function of kwire's) wrapped for the executors: the wrapper
    unpickles without kwire, imports kwire, checks its version, and only then unpickles and
    calls ``func`` -- an executor without kwire, or with another version, fails the task with
    ``ExecutorSetupError: ...`` and the shipping recipe.  The wrapper has ``func``'s
    ``__name__`` (what ``explain()`` prints)."""
    from pyspark import cloudpickle

    dumps: Callable[[Any], bytes] = cloudpickle.dumps  # unannotated in PySpark
    namespace: dict[str, Any] = {"__name__": "kwire_executor_guard"}
    exec(compile(_GUARD_SOURCE, "<kwire executor guard>", "exec"), namespace)
    wrap: Callable[..., Callable[..., Any]] = namespace["guarded"]
    return wrap(dumps(func), __version__, SHIPPING_RECIPE, getattr(func, "__name__", "kwire_read"))
