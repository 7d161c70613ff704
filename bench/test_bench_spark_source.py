"""Spark's own Kafka source as the anchor: kwire's Spark paths against ``format("kafka")`` and
confluent-kafka in ``mapPartitions``, cold and warm, on Apache Kafka and Tansu.

The contenders and workloads are in :mod:`bench.spark_jobs`.  For each target and size:

* **cold** — every (contender, workload) job in a fresh ``python`` process that creates its
  SparkSession (``local[2]``), defines the job, runs its one action and stops: what a scheduled
  ``spark-submit`` job pays, JVM start included.  The jobs run round robin, ``COLD_REPEAT`` times;
  the median is reported.  Only Spark's source gets ``spark.jars`` (the others need none).
* **warm** — one process, one session (with Spark's source's jars): a warm-up round of every job,
  then ``WARM_ROUNDS`` interleaved rounds; best and median seconds per job.

Ratios are Spark's source's seconds over the contender's (above 1: faster than Spark's source).
Every job's answer is checked (the count, or the per-key sums).  Nothing is asserted about time.

On Tansu 0.6, ListOffsets(latest) answers the last batch's base offset + 1, short of the log's
end, so there every job gets the end offsets (looked up once by kwire's offset reader, which
confirms them with a Fetch) as ``endingOffsets`` / its ranges instead of ``latest``.

Settings (environment):

* ``KWIRE_BENCH_SPARK_SOURCE_RECORDS`` — comma list of sizes (default ``1000000``; smoke 2,000);
  sizes after the first run only ``KWIRE_BENCH_SPARK_SOURCE_BIG_WORKLOADS`` (default ``count``)
* ``KWIRE_BENCH_SPARK_SOURCE_TARGETS`` (``kafka,tansu``; smoke ``tansu``),
  ``..._CONTENDERS``, ``..._WORKLOADS`` — comma lists to run a subset
* ``KWIRE_BENCH_SPARK_SOURCE_COLD_REPEAT`` (2; smoke 1), ``..._WARM_ROUNDS`` (3; smoke 1)
* ``KWIRE_BENCH_SPARK_PARTITIONS`` (4), ``KWIRE_BENCH_VALUE_BYTES`` (100)

Results go to ``bench/results/spark-<target>.json`` (``KWIRE_BENCH_RESULTS``); a size measured
again replaces that size's entry, other sizes are kept.  ``python tools/bench_report.py`` renders
them.

    python -m pytest -q -p no:cacheprovider bench/test_bench_spark_source.py -s
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.harness import child_env, machine_info, now_iso, system_busy_s
from bench.spark_jobs import CONTENDERS, WORKLOADS, produce

ROOT = Path(__file__).resolve().parent.parent
SMOKE = os.environ.get("KWIRE_BENCH_SMOKE", "") not in ("", "0")


def _list(name: str, default: str) -> list[str]:
    return [v.strip() for v in (os.environ.get(name) or default).split(",") if v.strip()]


SIZES = [int(v) for v in _list("KWIRE_BENCH_SPARK_SOURCE_RECORDS", "2000" if SMOKE else "1000000")]
BIG_WORKLOADS = _list("KWIRE_BENCH_SPARK_SOURCE_BIG_WORKLOADS", "count")
TARGETS = _list("KWIRE_BENCH_SPARK_SOURCE_TARGETS", "tansu" if SMOKE else "kafka,tansu")
JOB_CONTENDERS = _list("KWIRE_BENCH_SPARK_SOURCE_CONTENDERS", ",".join(CONTENDERS))
JOB_WORKLOADS = _list("KWIRE_BENCH_SPARK_SOURCE_WORKLOADS", ",".join(WORKLOADS))
COLD_REPEAT = int(os.environ.get("KWIRE_BENCH_SPARK_SOURCE_COLD_REPEAT") or (1 if SMOKE else 2))
WARM_ROUNDS = int(os.environ.get("KWIRE_BENCH_SPARK_SOURCE_WARM_ROUNDS") or (1 if SMOKE else 3))
PARTITIONS = int(os.environ.get("KWIRE_BENCH_SPARK_PARTITIONS") or 4)
VALUE_BYTES = int(os.environ.get("KWIRE_BENCH_VALUE_BYTES") or 100)
RESULTS = Path(os.environ.get("KWIRE_BENCH_RESULTS") or ROOT / "bench" / "results")
ANCHOR = "spark-kafka"
# smoke: one cold job (the default path), the warm process runs every job once
SMOKE_COLD = [("kwire-df", "count")]

SUMMARY: list[str] = []


def _env() -> dict:
    return child_env()  # kwire byte-compiled first, as an installed one is


def _child(mode: str, spec: dict, timeout_s: float) -> tuple[dict, float, str]:
    """Run ``python -m bench.spark_jobs MODE SPEC``; (its RESULT, wall seconds to exit, stderr tail)."""
    env = _env()  # (before the clock starts: the first call byte-compiles kwire)
    spec = dict(spec, t_launch=time.time())
    t0 = time.time()
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.spark_jobs", mode, json.dumps(spec)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=timeout_s)
        out, err = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        out, err = exc.stdout or "", f"timed out after {timeout_s:.0f} s\n{exc.stderr or ''}"
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    wall = time.time() - t0
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):]), wall, err[-3000:]
    return {"ok": False, "error": "no result: " + " | ".join(err.strip().splitlines()[-6:])}, wall, err[-3000:]


class _Target:
    def __init__(self, name: str):
        self.name = name
        if name == "kafka":
            from kwire.embedded.kafka import KafkaCluster
            self.broker = KafkaCluster(1)
            self.version = self.broker.version
        elif name == "tansu":
            from kwire.embedded import TansuBroker
            self.broker = TansuBroker()
            from bench.harness import _tansu_version
            self.version = _tansu_version()
        else:
            raise ValueError(f"unknown target {name!r} (kafka, tansu)")
        self.bootstrap = self.broker.bootstrap

    def close(self):
        self.broker.close()


def _ends(bootstrap: str, topic: str) -> dict:
    """{"0": end, ...}: each partition's end, as kwire's offset reader confirms it."""
    import kwire.spark as ks
    from kwire.spark.offset_reader import OffsetReader

    with OffsetReader(ks.parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic})) as r:
        plan, _ = r.plan_batch()
    return {str(x.partition): x.until_offset for x in plan.ranges}


def _load_doc(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _versions() -> dict:
    from importlib import metadata

    import pyspark

    from kwire.embedded.spark_kafka import spark_kafka_jars
    jars = [j.name for j in spark_kafka_jars()]
    return {"pyspark": pyspark.__version__, "spark-sql-kafka-jars": jars,
            "pandas": metadata.version("pandas")}


def _kwire_source() -> dict:
    """The commit kwire was measured at, and whether kwire/ had uncommitted changes (the
    checkout is shared: a job imports kwire from it when it starts)."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    return {"commit": git("rev-parse", "--short", "HEAD"), "kwire_dirty": bool(git("status", "--porcelain", "kwire")),
            "kwire_spark_tree": (git("rev-parse", "HEAD:kwire/spark") or "")[:10]}


def _median(xs):
    return statistics.median(xs) if xs else None


def run_size(target: _Target, n: int, workloads: list[str], log, checkpoint=lambda st: None) -> dict:
    source_before = _kwire_source()
    topic = f"bench-spark-source-{uuid.uuid4().hex[:8]}"
    t0 = time.time()
    produce(target.bootstrap, topic, n, PARTITIONS, VALUE_BYTES)
    load_s = time.time() - t0
    ends = _ends(target.bootstrap, topic)
    assert sum(ends.values()) == n, ends
    base = {"bootstrap": target.bootstrap, "topic": topic, "expected": n,
            "ends": ends if target.name == "tansu" else None}
    timeout = 300 + n / 5_000
    jobs = [(c, w) for w in workloads for c in JOB_CONTENDERS]
    cold_jobs = [j for j in SMOKE_COLD if j in jobs] if SMOKE else jobs
    cold: dict[str, list[dict]] = {f"{c}/{w}": [] for c, w in cold_jobs}
    warm_spec = {**base, "contenders": JOB_CONTENDERS, "workloads": workloads, "rounds": WARM_ROUNDS,
                 "warmup": 0 if SMOKE else 1}

    def summary(warm: dict, partial: bool = False) -> dict:
        rows = []
        for c, w in jobs:
            key = f"{c}/{w}"
            ok_cold = [r for r in cold.get(key, []) if r.get("ok")]
            secs = warm.get("seconds", {}).get(key) or []
            rows.append({
                "contender": c, "workload": w,
                "cold_to_answer_s": _median([r["to_answer_s"] for r in ok_cold]),
                "cold_session_s": _median([r["jvm_and_session_s"] for r in ok_cold]),
                "cold_define_s": _median([r["define_s"] for r in ok_cold]),
                "cold_first_action_s": _median([r["first_action_s"] for r in ok_cold]),
                "cold_process_s": _median([r["process_s"] for r in ok_cold]),
                "cold_runs": cold.get(key, []),
                "warm_best_s": min(secs) if secs else None,
                "warm_median_s": _median(secs),
                "warm_runs_s": secs,
                "warm_error": (warm.get("errors") or {}).get(key) or (None if warm.get("ok") or secs else warm.get("error")),
            })
        anchor = {r["workload"]: r for r in rows if r["contender"] == ANCHOR}
        for r in rows:
            a = anchor.get(r["workload"])
            for k in ("cold_to_answer_s", "cold_first_action_s", "warm_best_s", "warm_median_s"):
                r[f"{k}_anchor_ratio"] = (round(a[k] / r[k], 3) if a and a.get(k) and r.get(k) else None)
        return {"kwire_source": {"before": source_before, "after": _kwire_source()},
                "records": n, "partitions": PARTITIONS, "value_bytes": VALUE_BYTES, "workloads": workloads,
                "load_s": round(load_s, 2), "ends": ends, "ends_explicit": base["ends"] is not None,
                "cold_repeat": COLD_REPEAT, "warm_rounds": WARM_ROUNDS, "warm_warmup": warm_spec["warmup"],
                "warm_loadavg_1m_before": warm["loadavg_1m_before"], "warm_process_s": warm["process_s"],
                "partial": partial, "rows": rows}

    for rep in range(COLD_REPEAT):
        for c, w in cold_jobs:
            load_before = os.getloadavg()[0]
            busy0 = system_busy_s()
            res, wall, err = _child("cold", {**base, "contender": c, "workload": w}, timeout)
            res["process_s"] = round(wall, 3)
            res["machine_busy_cpu_s"] = round(system_busy_s() - busy0, 2)
            res["loadavg_1m_before"] = round(load_before, 2)
            if not res.get("ok"):
                res.setdefault("stderr_tail", err[-1500:])
            cold[f"{c}/{w}"].append(res)
            checkpoint(summary({"ok": False, "error": "not run yet (partial results)", "loadavg_1m_before": None,
                                "process_s": None}, partial=True))
            log(f"  {target.name} {n:,} cold #{rep + 1} {c}/{w}: "
                + (f"answer at {res['to_answer_s']:.2f} s (session {res['jvm_and_session_s']:.2f}, "
                   f"define {res['define_s']:.2f}, first action {res['first_action_s']:.2f}), exit {wall:.2f} s"
                   if res.get("ok") else f"FAILED {res.get('error')}"))
    load_before = os.getloadavg()[0]
    warm, wall, err = _child("warm", warm_spec, timeout * 3)
    warm["process_s"] = round(wall, 3)
    warm["loadavg_1m_before"] = round(load_before, 2)
    if not warm.get("ok"):
        warm.setdefault("stderr_tail", err[-1500:])
    log(f"  {target.name} {n:,} warm: " + ", ".join(
        f"{k} {min(v):.2f}" for k, v in warm.get("seconds", {}).items() if v) + (
        f"  ERRORS {warm.get('errors') or warm.get('error')}" if not warm.get("ok") else ""))

    return summary(warm)


def write(target: _Target, sets: list[dict]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"spark-{target.name}.json"
    old = _load_doc(path) if not SMOKE else None
    kept = [s for s in (old or {}).get("sets", []) if s["records"] not in {x["records"] for x in sets}
            and not (old or {}).get("smoke")]
    doc = {"schema": 1, "suite": f"spark-{target.name}", "date": now_iso(), "smoke": SMOKE,
           "machine": {**machine_info(), "spark": _versions()},
           "target": {"name": target.name, "version": target.version},
           "anchor": ANCHOR, "master": os.environ.get("KWIRE_BENCH_SPARK_MASTER", "local[2]"),
           "sets": sorted(kept + sets, key=lambda s: s["records"])}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    return path


@pytest.mark.timeout(0)
@pytest.mark.parametrize("target_name", TARGETS)
def test_spark_source_side_by_side(target_name):
    def log(line):
        SUMMARY.append(line)
        print(line, file=sys.stderr, flush=True)

    target = _Target(target_name)
    try:
        sets = []
        for i, n in enumerate(SIZES):
            workloads = JOB_WORKLOADS if i == 0 else [w for w in JOB_WORKLOADS if w in BIG_WORKLOADS]
            sets.append(run_size(target, n, workloads, log, checkpoint=lambda st: write(target, [*sets, st])))
            write(target, sets)
        path = write(target, sets)
    finally:
        target.close()
    doc = json.loads(path.read_text())
    for s in doc["sets"]:
        for r in s["rows"]:
            if r["cold_runs"]:
                assert all(x.get("ok") for x in r["cold_runs"]), (r["contender"], r["workload"], r["cold_runs"])
            assert r["warm_error"] is None and r["warm_runs_s"], (r["contender"], r["workload"], r["warm_error"])
