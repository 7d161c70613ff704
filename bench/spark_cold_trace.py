"""Where a cold Spark job's seconds go: one job of :mod:`bench.spark_jobs` in a fresh process,
with a timeline of every Python process Spark starts and of the JVM's own steps.

    python -m bench.spark_cold_trace --target tansu --records 1000000 --contender kwire-df [--workload count]

It starts the broker and loads the topic, then runs the cold job with

* a ``sitecustomize`` on the Python path (this file, ``--site`` mode) that logs, from every Python
  process that starts -- the driver, the JVM's planner workers for the Python Data Source, the
  ``pyspark.daemon`` and the workers it forks --, its start, the first import of the heavy
  packages (pyspark, py4j, pyarrow, pandas, numpy, kwire, confluent_kafka) with their duration,
  and its exit;
* Log4j at INFO with millisecond timestamps for the JVM steps (SparkContext start, jobs, stages,
  tasks, Python runners) into a file.

The timeline (seconds since launch) and a summary by phase are printed, and written as JSON
with ``--json PATH``.  Timing only: nothing here is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.harness import child_env

ROOT = Path(__file__).resolve().parent.parent

_SITE = r'''
import atexit, builtins, os, sys, time
_path = os.environ.get("KWIRE_TRACE_FILE")
if _path:
    _WATCH = {"pyspark", "py4j", "pyarrow", "pandas", "numpy", "kwire", "confluent_kafka", "cloudpickle"}
    def _log(event, extra=""):
        try:
            with open(_path, "a") as f:
                f.write(f"{time.time():.6f}\t{os.getpid()}\t{os.getppid()}\t{event}\t{extra}\n")
        except OSError:
            pass
    _log("start", " ".join(sys.argv)[:300])
    atexit.register(lambda: _log("exit"))
    _orig = builtins.__import__
    _busy = set()
    def _import(name, globals=None, locals=None, fromlist=(), level=0):
        top = name.partition(".")[0]
        if level == 0 and top in _WATCH and top not in sys.modules and top not in _busy:
            _busy.add(top)
            t0 = time.time()
            try:
                return _orig(name, globals, locals, fromlist, level)
            finally:
                _busy.discard(top)
                _log("import", f"{top} {time.time() - t0:.4f} from {t0:.6f}")
        return _orig(name, globals, locals, fromlist, level)
    builtins.__import__ = _import
    _fork = getattr(os, "register_at_fork", None)
    if _fork:
        _fork(after_in_child=lambda: _log("forked"))
'''

_LOG4J = """status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{UNIX_MILLIS}} %p %c{{1}}: %m%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.sc.name = org.apache.spark.SparkContext
logger.sc.level = INFO
logger.dag.name = org.apache.spark.scheduler.DAGScheduler
logger.dag.level = INFO
logger.tsm.name = org.apache.spark.scheduler.TaskSetManager
logger.tsm.level = INFO
logger.exe.name = org.apache.spark.executor.Executor
logger.exe.level = INFO
logger.py.name = org.apache.spark.api.python
logger.py.level = DEBUG
logger.sqlpy.name = org.apache.spark.sql.execution.python
logger.sqlpy.level = DEBUG
logger.sqlds.name = org.apache.spark.sql.execution.datasources.v2.python
logger.sqlds.level = DEBUG
logger.state.name = org.apache.spark.sql.internal.SharedState
logger.state.level = INFO
logger.codegen.name = org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator
logger.codegen.level = INFO
"""


def _env_with(site_dir: str, trace: str) -> dict:
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([site_dir, str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["KWIRE_TRACE_FILE"] = trace
    env["KWIRE_BENCH_SPARK_LOGLEVEL"] = "keep"
    return env


def trace_job(bootstrap: str, topic: str, expected: int, contender: str, workload: str,
              ends: dict | None = None, second: bool = True) -> dict:
    work = Path(tempfile.mkdtemp(prefix="kwire-cold-trace-"))
    (work / "site").mkdir()
    (work / "site" / "sitecustomize.py").write_text(_SITE)
    trace, jlog = work / "python.tsv", work / "jvm.log"
    (work / "log4j2.properties").write_text(_LOG4J.format(path=jlog))
    spec = {"bootstrap": bootstrap, "topic": topic, "expected": expected, "contender": contender,
            "workload": workload, "ends": ends, "second_action": second,
            "conf": {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{work / 'log4j2.properties'}"}}
    t_launch = time.time()
    spec["t_launch"] = t_launch
    proc = subprocess.run([sys.executable, "-m", "bench.spark_jobs", "cold", json.dumps(spec)], cwd=ROOT,
                          env=_env_with(str(work / "site"), str(trace)), capture_output=True, text=True, timeout=1200)
    t_exit = time.time()
    result = next((json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")),
                  {"ok": False, "error": proc.stderr[-2000:]})
    events = []
    for line in trace.read_text().splitlines() if trace.exists() else []:
        t, pid, ppid, event, extra = (line.split("\t") + [""])[:5]
        events.append({"t": round(float(t) - t_launch, 3), "src": f"py{pid}", "ppid": int(ppid), "event": event,
                       "detail": extra})
    for line in jlog.read_text().splitlines() if jlog.exists() else []:
        m = re.match(r"(\d{13}) (\w+) (\S+): (.*)", line)
        if m:
            events.append({"t": round(int(m.group(1)) / 1000 - t_launch, 3), "src": "jvm", "event": m.group(3),
                           "detail": m.group(4)[:220]})
    events.sort(key=lambda e: e["t"])
    return {"contender": contender, "workload": workload, "records": expected, "result": result,
            "process_exit_s": round(t_exit - t_launch, 3), "events": events, "dir": str(work)}


def summarize(tr: dict) -> list[str]:
    """The phases, in seconds since launch, from the marks and the events."""
    r = tr["result"]
    marks = r.get("marks", {})
    out = [f"{tr['contender']} / {tr['workload']}, {tr['records']:,} records: answer at {r.get('to_answer_s')} s, "
           f"exit {tr['process_exit_s']} s; second job in the same session {r.get('second_job_s')} s"]
    for k, v in marks.items():
        out.append(f"  mark {k:22s} {v:8.3f}")
    pids: dict[str, dict] = {}
    for e in tr["events"]:
        if e["src"].startswith("py"):
            p = pids.setdefault(e["src"], {"start": None, "argv": "", "imports": [], "exit": None, "forked": None})
            if e["event"] == "start":
                p["start"], p["argv"] = e["t"], e["detail"]
            elif e["event"] == "forked":
                p["forked"] = e["t"]
            elif e["event"] == "exit":
                p["exit"] = e["t"]
            elif e["event"] == "import":
                name, dur = e["detail"].split()[:2]
                p["imports"].append(f"{name} {float(dur):.2f}s@{e['t'] - float(dur):.2f}")
    for pid, p in pids.items():
        began = p["start"] if p["start"] is not None else p["forked"]
        out.append(f"  {pid}: {'fork' if p['start'] is None else 'start'} {began} exit {p['exit']} "
                   f"{p['argv'][:90]}  imports: {', '.join(p['imports']) or '-'}")
    keys = ("Running Spark version", "Submitting job", "Starting job", "Job ", "Got job", "Submitting ResultStage",
            "Submitting ShuffleMapStage", "Starting task", "Finished task", "ResultStage", "ShuffleMapStage",
            "Registered", "Successfully started", "Added JAR", "Python", "python", "worker", "Worker")
    for e in tr["events"]:
        if e["src"] == "jvm" and any(k in e["detail"] for k in keys):
            out.append(f"  {e['t']:8.3f} jvm {e['event']}: {e['detail'][:150]}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--target", default="tansu", choices=("tansu", "kafka"))
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--contender", action="append")
    ap.add_argument("--workload", default="count")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from bench.spark_jobs import produce
    from bench.test_bench_spark_source import _ends, _Target

    target = _Target(args.target)
    try:
        topic = f"trace-{uuid.uuid4().hex[:8]}"
        produce(target.bootstrap, topic, args.records, args.partitions, 100)
        ends = _ends(target.bootstrap, topic)
        traces = []
        for c in args.contender or ["kwire-df", "spark-kafka"]:
            tr = trace_job(target.bootstrap, topic, args.records, c, args.workload,
                           ends if args.target == "tansu" else None)
            traces.append(tr)
            print("\n".join(summarize(tr)), flush=True)
    finally:
        target.close()
    if args.json:
        args.json.write_text(json.dumps(traces, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
