"""The benchmark suite, shrunk to a few hundred records, so that it never rots.

Runs ``pytest bench`` in smoke mode (``KWIRE_BENCH_SMOKE=1``) in a subprocess with the results
going to a temporary directory, checks that every results file is complete and sane, and
renders the report from them (into temporary copies, never the repository's README).
Nothing here looks at how fast anything was.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import check_results_doc

ROOT = Path(__file__).resolve().parent.parent
SUITES = ("e2e-kafka", "e2e-tansu", "e2e-mock", "e2e-replay", "scaling")


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory):
    base = tmp_path_factory.mktemp("bench-smoke")
    results = base / "results"
    results.mkdir()
    env = dict(os.environ, KWIRE_BENCH_SMOKE="1", KWIRE_BENCH_RESULTS=str(results))
    env.pop("KWIRE_BENCH_CLIENTS", None)
    env.pop("KWIRE_BENCH_TARGETS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "bench",
           f"--benchmark-json={results / 'micro.json'}", "--benchmark-max-time=0.001",
           "--benchmark-min-rounds=1", "--benchmark-warmup=off"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-2000:])
    return base


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("suite", SUITES)
def test_results_are_complete(smoke_results, suite):
    doc = json.loads((smoke_results / "results" / f"{suite}.json").read_text())
    assert doc["smoke"] is True
    assert check_results_doc(doc) == []
    versions = doc["machine"]["versions"]
    for name in ("kwire", "confluent-kafka", "librdkafka", "kafka-python", "aiokafka", "tansu"):
        assert versions.get(name), name
    assert doc["machine"]["cores"] and doc["machine"]["cpu_model"]
    runs = doc["runs"]
    assert runs
    for r in runs:
        assert r["ok"] or r["error"], r  # a failure always says why
    ok = [r for r in runs if r["ok"]]
    assert ok
    for r in ok:
        m = r["metrics"]
        assert r["records"] == r["dataset"]["records"] > 0
        assert m["records_per_s"] > 0 and m["maxrss_mib"] > 0 and m["cpu_total_s"] > 0
        assert m["broker_cpu_s_whole_run"] is not None  # the broker's CPU was read
    if suite == "e2e-replay":  # the replay server speaks enough Kafka for every client
        assert {r["client"] for r in ok} >= {"kwire-fetch-raw", "confluent-kafka", "aiokafka", "kafka-python"}


@pytest.mark.timeout(1800)
def test_spark_source_results(smoke_results):
    """bench/test_bench_spark_source.py in smoke mode: every job ran warm with the right answer
    (the jobs check their answers), the default path also cold, step by step."""
    from bench.spark_jobs import CONTENDERS, WORKLOADS

    doc = json.loads((smoke_results / "results" / "spark-tansu.json").read_text())
    assert doc["smoke"] is True and doc["anchor"] == "spark-kafka"
    assert doc["machine"]["spark"]["pyspark"] and doc["machine"]["spark"]["spark-sql-kafka-jars"]
    (st,) = doc["sets"]
    assert {(r["contender"], r["workload"]) for r in st["rows"]} == {(c, w) for c in CONTENDERS for w in WORKLOADS}
    for r in st["rows"]:
        assert r["warm_error"] is None and r["warm_runs_s"], r
    cold = [x for r in st["rows"] for x in r["cold_runs"]]
    assert cold
    for x in cold:
        assert x["ok"], x
        assert 0 < x["jvm_and_session_s"] < x["to_answer_s"] <= x["process_s"]


@pytest.mark.timeout(1800)
def test_decode_results(smoke_results):
    """bench/test_bench_decode.py in smoke mode: a capture made in the run, every command
    (kwire decode and tshark) ran on it and succeeded, ratios for both pairs."""
    doc = json.loads((smoke_results / "results" / "decode.json").read_text())
    assert doc["smoke"] is True and check_results_doc(doc) == []
    cap = doc["capture"]
    assert cap["records"] == cap["records_produced"] + cap["records_consumed"] > 0 and cap["bytes"] > 0
    assert set(doc["rows"]) == {"kwire-summary", "tshark-oneline", "kwire-json", "tshark-json", "kwire-stats",
                                "kwire-json-records-full"}
    for row in doc["rows"].values():
        assert row["runs"] and all(r["exit"] == 0 and r["wall_s"] > 0 for r in row["runs"]), row
    assert set(doc["ratios"]) == set(doc["cpu_ratios"]) == {"summary", "json"}


@pytest.mark.timeout(1800)
def test_micro_json(smoke_results):
    doc = json.loads((smoke_results / "results" / "micro.json").read_text())
    assert doc["benchmarks"], "pytest-benchmark wrote no benchmarks"


@pytest.mark.timeout(1800)
def test_report_renders(smoke_results):
    out = smoke_results / "docs"
    readme = smoke_results / "README.md"
    readme.write_text("# kwire\n\nIntro.\n")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_report.py"),
                           "--results", str(smoke_results / "results"), "--out", str(out),
                           "--readme", str(readme)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = readme.read_text()
    assert "## Benchmarks" in text and "<!-- bench:start -->" in text and "<!-- bench:end -->" in text
    assert "| kwire-consumer |" in text and "SMOKE RUN" in text
    report = (out / "README.md").read_text()
    assert "## End to end" in report and "## Scaling" in report and "Microbenchmarks" in report
    assert "Spark: kwire beside Spark's own Kafka source" in text and "| spark-kafka |" in text
    assert "## Spark: kwire beside Spark's own Kafka source" in report
    assert "`kwire decode` beside Wireshark's tshark" in text and "| one line per frame / packet |" in text
    assert "## kwire decode beside tshark" in report
    assert "**Group join time on Apache Kafka 4.3**" in text and "| kwire, classic protocol |" in text
    assert "## Group join time" in report and "| confluent-kafka, KIP-848" in report
    for png in ("e2e_throughput.png", "e2e_cpu.png", "scaling_partitions.png", "spark_source.png"):
        assert (out / png).stat().st_size > 1000
    # splicing again replaces the section instead of adding a second one
    subprocess.run([sys.executable, str(ROOT / "tools" / "bench_report.py"), "--results",
                    str(smoke_results / "results"), "--out", str(out), "--readme", str(readme)],
                   check=True, capture_output=True, timeout=300)
    again = readme.read_text()
    assert again.count("<!-- bench:start -->") == 1 and again.count("## Benchmarks") == 1
