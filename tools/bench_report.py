#!/usr/bin/env python3
"""Turn bench/results/*.json into tables and charts: ``make bench-report``.

    python tools/bench_report.py [--results bench/results] [--out docs/bench] [--readme README.md]

Reads what the benchmarks wrote:

* ``e2e-<target>.json`` — bench/test_bench_e2e.py, one per target (tansu, mock, replay);
* ``scaling.json`` — bench/test_bench_scaling.py;
* ``micro.json`` — pytest-benchmark's ``--benchmark-json`` of the microbenchmarks
  (bench/test_bench_records.py, bench/test_bench_spark.py, ...);
* ``spark-<target>.json`` — bench/test_bench_spark_source.py: kwire's Spark paths beside
  Spark's own Kafka source and confluent-kafka in mapPartitions, cold and warm;
* ``decode.json`` — bench/test_bench_decode.py: ``kwire decode`` beside tshark on one capture;

and writes ``<out>/README.md`` (every table), ``<out>/*.png`` (charts; each states the machine,
the versions and the date), and the summary table between ``<!-- bench:start -->`` and
``<!-- bench:end -->`` in the README's "Benchmarks" section (created at the end if missing).
Nothing is measured here; rerunning it on the same JSON gives the same files.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
TARGET_TITLES = {
    "kafka": "Apache Kafka 4.3 (one KRaft node, disk storage)",
    "tansu": "Tansu (one broker, memory storage)",
    "mock": "librdkafka's mock cluster (3 brokers)",
    "replay": "replay server (Fetch answered from memory: the client's own cost)",
}
CLIENT_ORDER = ["kwire-consumer", "kwire-fetch-arrow", "kwire-fetch-records", "kwire-fetch-raw",
                "confluent-kafka", "confluent-kafka-backoff10", "kafka-python", "aiokafka"]
REFERENCE = "kwire-consumer"


# --- loading ----------------------------------------------------------------------------------

def _read(path: Path) -> dict | None:
    """A results file, or None (with a warning) if it is missing, empty or not JSON, e.g.
    still being written by a run."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"bench_report: skipping {path}: {exc}", file=sys.stderr)
        return None


def load(results: Path) -> dict:
    out = {"e2e": {}, "scaling": _read(results / "scaling.json"), "micro": _read(results / "micro.json"),
           "decode": _read(results / "decode.json"), "group_join": _read(results / "group_join.json")}
    for path in sorted(results.glob("e2e-*.json")):
        doc = _read(path)
        if doc is not None:
            out["e2e"][doc.get("target", {}).get("name") or path.stem[4:]] = doc
    out["spark"] = {}
    for path in sorted(results.glob("spark-*.json")):
        doc = _read(path)
        if doc is not None and doc.get("sets"):
            out["spark"][doc.get("target", {}).get("name") or path.stem[6:]] = doc
    return out


def _client_key(name: str) -> tuple:
    return (CLIENT_ORDER.index(name) if name in CLIENT_ORDER else len(CLIENT_ORDER), name)


# --- formatting -------------------------------------------------------------------------------

def fmt_int(v) -> str:
    return "–" if v is None else f"{v:,.0f}"


def fmt(v, nd=2) -> str:
    if v is None:
        return "–"
    if isinstance(v, (int, float)) and abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{nd}f}"


def human(v: float) -> str:
    """1.85M, 170k, 0.49: short labels for charts."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def ratio(a, b) -> str:
    if not a or not b:
        return "–"
    r = a / b
    return f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def stamp(doc: dict) -> str:
    """Machine, versions and date of one results document, in one line."""
    m = doc.get("machine", {})
    v = m.get("versions", {})
    parts = [f"{m.get('cpu_model', '?')} ({m.get('cores', '?')} cores, {m.get('ram_gib', '?')} GiB)",
             f"Python {m.get('python', '?')}",
             f"kwire {v.get('kwire', '?')} ({v.get('kwire_codec', '?')})",
             f"confluent-kafka {v.get('confluent-kafka', '?')} / librdkafka {v.get('librdkafka', '?')}",
             f"kafka-python {v.get('kafka-python', '?')}", f"aiokafka {v.get('aiokafka', '?')}",
             f"Tansu {v.get('tansu', '?')}", str(doc.get("date", "?"))[:10]]
    s = "; ".join(parts)
    if doc.get("smoke"):
        s = "SMOKE RUN (tiny counts, numbers meaningless); " + s
    return s


def load_note(doc: dict) -> str:
    o = doc.get("other_load") or {}
    cpu = o.get("max_other_cpu_s_in_a_run")
    la = o.get("max_loadavg_1m_before_a_run")
    if cpu is None and la is None:
        return ""
    return (f"Other load: at most {fmt(cpu)} CPU-s used by other processes during a measured window; "
            f"1-minute load average before a run at most {fmt(la)}.")


def _m(run: dict, key: str):
    return run.get("metrics", {}).get(key) if run.get("ok") else None


def e2e_table(doc: dict, from_assignment: bool = False) -> list[str]:
    runs = sorted(doc.get("runs", []), key=lambda r: _client_key(r["client"]))
    ref = next((r for r in runs if r["client"] == REFERENCE and r.get("ok")), None)
    ref_rate = _m(ref, "records_per_s") if ref else None
    ref_cpu = _m(ref, "cpu_s_per_million") if ref else None
    lines = ["| client | records/s | MB/s | CPU s per M records | broker CPU s per M | peak RSS MiB | "
             "group join s | kwire Consumer records/s ÷ this | this CPU/record ÷ kwire Consumer |"
             + (" records/s from assignment | runs: records/s min–max |" if from_assignment else ""),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if from_assignment else "")]
    for r in runs:
        if not r.get("ok"):
            err = (r.get("error") or "failed").split(" [")[0].replace("|", "/")[:140]
            lines.append(f"| {r['client']} | failed: {err} | | | | | | | |" + (" | |" if from_assignment else ""))
            continue
        m = r["metrics"]
        lines.append("| " + " | ".join([
            r["client"], fmt_int(m.get("records_per_s")), fmt(m.get("mb_per_s"), 1),
            fmt(m.get("cpu_s_per_million")), fmt(m.get("broker_cpu_s_per_million")),
            fmt(m.get("maxrss_mib"), 1), fmt(m.get("join_s")),
            "–" if r["client"] == REFERENCE else ratio(ref_rate, m.get("records_per_s")),
            "–" if r["client"] == REFERENCE else ratio(m.get("cpu_s_per_million"), ref_cpu),
        ] + ([fmt_int(m.get("records_per_s_from_assignment")), spread(r)] if from_assignment else [])) + " |")
    return lines


def spread(run: dict) -> str:
    reps = run.get("repeats") or []
    rates = [x["records_per_s"] for x in reps if x.get("ok") and x.get("records_per_s")]
    if len(rates) < 2:
        return "1 run"
    failed = sum(1 for x in reps if not x.get("ok"))
    s = f"{len(rates)}: {human(min(rates))}–{human(max(rates))}"
    return s + (f" ({failed} failed)" if failed else "")


def dataset_line(doc: dict) -> str:
    ds = doc.get("dataset", {})
    req = doc.get("requested_dataset", {})
    s = (f"{ds.get('records', 0):,} records × {ds.get('value_bytes')} B values on {ds.get('partitions')} "
         f"partitions, compression {ds.get('compression')}")
    if req and req.get("records") != ds.get("records"):
        s += f" (asked for {req.get('records'):,}; this is what the target holds)"
    if req and req.get("partitions") != ds.get("partitions"):
        s += f" ({ds.get('partitions')} partitions: the target's fixed count)"
    return s


def scaling_rows(doc: dict, axis: str) -> list[dict]:
    rows = [r for r in doc.get("runs", []) if axis in (r.get("sweeps") or [])]
    return sorted(rows, key=lambda r: (_client_key(r["client"]), _axis_key(axis, r["dataset"][axis])))


def _axis_key(axis, v):
    if axis == "compression":
        order = ["none", "gzip", "snappy", "lz4", "zstd"]
        return order.index(v) if v in order else 99
    return v


def scaling_table(doc: dict, axis: str) -> list[str]:
    rows = scaling_rows(doc, axis)
    values = sorted({r["dataset"][axis] for r in rows}, key=lambda v: _axis_key(axis, v))
    clients = sorted({r["client"] for r in rows}, key=_client_key)
    head = {"partitions": "partitions", "value_bytes": "value bytes", "compression": "compression"}[axis]
    lines = ["| client | metric | " + " | ".join(f"{head} {v}" for v in values) + " |",
             "|---|---|" + "---:|" * len(values)]
    for c in clients:
        by = {r["dataset"][axis]: r for r in rows if r["client"] == c}
        for label, key, f in (("records/s", "records_per_s_from_assignment", fmt_int),
                              ("MB/s", "mb_per_s_from_assignment", lambda v: fmt(v, 1)),
                              ("CPU s per M records", "cpu_s_per_million_from_assignment", fmt)):
            cells = []
            for v in values:
                r = by.get(v)
                if r is None:
                    cells.append("")
                elif not r.get("ok"):
                    cells.append("failed")
                else:
                    cells.append(f(r["metrics"].get(key)))
            lines.append(f"| {c} | {label} | " + " | ".join(cells) + " |")
    return lines


def micro_tables(doc: dict) -> list[str]:
    benches = doc.get("benchmarks", [])
    if not benches:
        return []
    by_file: dict[str, list[dict]] = {}
    for b in benches:
        by_file.setdefault(b.get("fullname", b["name"]).split("::")[0], []).append(b)
    lines = []
    for f, bs in sorted(by_file.items()):
        lines += [f"#### `{f}`", "", "| benchmark | group | mean | min | ops/s | extra |", "|---|---|---:|---:|---:|---|"]
        for b in sorted(bs, key=lambda b: (b.get("group") or "", b["name"])):
            st = b.get("stats", {})
            extra = ", ".join(f"{k}={v}" for k, v in (b.get("extra_info") or {}).items())[:120]
            lines.append(f"| {b['name']} | {b.get('group') or ''} | {_secs(st.get('mean'))} | {_secs(st.get('min'))} | "
                         f"{fmt(st.get('ops'))} | {extra} |")
        lines.append("")
    return lines


def _secs(v) -> str:
    if v is None:
        return "–"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v / 1e-9:.3g} ns"


def micro_stamp(doc: dict) -> str:
    mi = doc.get("machine_info", {})
    cpu = (mi.get("cpu") or {}).get("brand_raw") or mi.get("processor") or "?"
    return f"{cpu}; Python {mi.get('python_version', '?')}; {str(doc.get('datetime', '?'))[:10]}"


# --- Spark: kwire beside Spark's own Kafka source ----------------------------------------------

SPARK_ORDER = ["kwire-df", "kwire-datasource", "kwire-arrow-rdd", "spark-kafka", "confluent-rdd"]
SPARK_NOTES = {
    "kwire-df": "`kwire.spark.read_kafka(spark, ...)`, kwire's default DataFrame path",
    "kwire-datasource": "`spark.read.format(\"kwire\")` (the Python Data Source)",
    "kwire-arrow-rdd": "`kwire.spark.kafka_arrow_rdd` (Arrow batches in an RDD, ranges planned by kwire)",
    "spark-kafka": "Spark's own source, `spark.read.format(\"kafka\")` (spark-sql-kafka-0-10, kafka-clients)",
    "confluent-rdd": "confluent-kafka in `mapPartitions`, a Consumer per partition (`fetch.queue.backoff.ms=10`)",
}
SPARK_TARGETS = {"kafka": "Apache Kafka 4.3", "tansu": "Tansu"}


def _spark_key(name: str) -> tuple:
    return (SPARK_ORDER.index(name) if name in SPARK_ORDER else len(SPARK_ORDER), name)


def _anchor_ratio(v) -> str:
    return "–" if v is None else f"{v:.2f}×"


def spark_stamp(doc: dict) -> str:
    m = doc.get("machine", {})
    v = m.get("versions", {})
    sp = m.get("spark", {})
    s = (f"{m.get('cpu_model', '?')} ({m.get('cores', '?')} cores); Python {m.get('python', '?')}; "
         f"PySpark {sp.get('pyspark', '?')} {doc.get('master', 'local[2]')}, "
         f"{', '.join(j[:-4] for j in sp.get('spark-sql-kafka-jars', []))}; kwire {v.get('kwire', '?')} "
         f"({v.get('kwire_codec', '?')}); confluent-kafka {v.get('confluent-kafka', '?')}; "
         f"{ {'kafka': 'Apache Kafka', 'tansu': 'Tansu'}.get(doc.get('target', {}).get('name'), '?')} {doc.get('target', {}).get('version') or ''}; "
         f"{str(doc.get('date', '?'))[:10]}")
    return ("SMOKE RUN (tiny counts, numbers meaningless); " + s) if doc.get("smoke") else s


def spark_set_line(doc: dict, st: dict) -> str:
    loads = [x.get("loadavg_1m_before") for r in st["rows"] for x in r.get("cold_runs", [])]
    loads = [x for x in loads if x is not None] + [st.get("warm_loadavg_1m_before")]
    loads = [x for x in loads if x is not None]
    s = (f"{st['records']:,} records × {st['value_bytes']} B values on {st['partitions']} partitions; "
         f"cold: median of {st['cold_repeat']} fresh process{'es' if st['cold_repeat'] != 1 else ''} per job, "
         f"warm: best of {st['warm_rounds']} interleaved round{'s' if st['warm_rounds'] != 1 else ''} in one session"
         + (" after a warm-up round" if st.get("warm_warmup", 1) else ""))
    if st.get("partial"):
        s += "; **partial: the run was stopped before every job ran**"
    if st.get("note"):
        s += f"; {st['note']}"
    if st.get("ends_explicit"):
        s += "; explicit `endingOffsets` (Tansu's ListOffsets(latest) is short of the end)"
    if loads:
        s += f"; 1-minute load average before a job {min(loads):.1f}–{max(loads):.1f}"
    src = st.get("kwire_source") or {}
    b, a = src.get("before") or {}, src.get("after") or {}
    if b.get("commit"):
        s += f"; kwire at {b['commit']}" + (" with local changes" if b.get("kwire_dirty") else "")
        if a.get("kwire_spark_tree") and a.get("kwire_spark_tree") != b.get("kwire_spark_tree"):
            s += f" (at {a.get('commit')} by the end: kwire/spark changed during the run)"
        elif a.get("commit") and a.get("commit") != b.get("commit"):
            s += f" (HEAD at {a.get('commit')} by the end; kwire/spark unchanged)"
    return s


def spark_table(st: dict) -> list[str]:
    """One size: per contender, cold seconds to the answer and warm best seconds per workload,
    with Spark's source's seconds ÷ this (above 1: faster than Spark's source)."""
    workloads = st.get("workloads") or sorted({r["workload"] for r in st["rows"]})
    by = {(r["contender"], r["workload"]): r for r in st["rows"]}
    contenders = sorted({r["contender"] for r in st["rows"]}, key=_spark_key)
    head = "| contender |"
    rule = "|---|"
    for w in workloads:
        head += f" {w} cold s | ÷ Spark | {w} warm s | ÷ Spark |"
        rule += "---:|---:|---:|---:|"
    lines = [head, rule]
    for c in contenders:
        cells = [c]
        for w in workloads:
            r = by.get((c, w)) or {}
            cells += [fmt(r.get("cold_to_answer_s")), _anchor_ratio(r.get("cold_to_answer_s_anchor_ratio")),
                      fmt(r.get("warm_best_s")), _anchor_ratio(r.get("warm_best_s_anchor_ratio"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def spark_cold_table(st: dict) -> list[str]:
    """Where a cold job's seconds go: session (JVM start), defining the job (read_kafka plans
    here), the first action; process exit after session.stop()."""
    lines = ["| job | to the answer s | JVM + SparkSession s | define (plan) s | first action s | define + first action s | "
             "÷ Spark | process exit s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def job_s(r):  # what depends on the contender: the session start is the same code for all
        return (r["cold_define_s"] + r["cold_first_action_s"]) if r.get("cold_define_s") is not None else None

    anchor = {r["workload"]: job_s(r) for r in st["rows"] if r["contender"] == "spark-kafka"}
    for r in sorted(st["rows"], key=lambda r: (r["workload"], _spark_key(r["contender"]))):
        if r.get("cold_to_answer_s") is None:
            continue
        j, a = job_s(r), anchor.get(r["workload"])
        lines.append(f"| {r['contender']} / {r['workload']} | {fmt(r['cold_to_answer_s'])} | {fmt(r['cold_session_s'])} | "
                     f"{fmt(r['cold_define_s'])} | {fmt(r['cold_first_action_s'])} | {fmt(j)} | "
                     f"{_anchor_ratio(a / j if a and j else None)} | {fmt(r['cold_process_s'])} |")
    return lines


def chart_spark(spark: dict, out: Path, fname: str) -> str | None:
    """Seconds per job (lower is better) for the first size of each target: cold and warm,
    count and the Python aggregation."""
    plt = _plt()
    targets = [t for t in ("kafka", "tansu") if t in spark] + [t for t in spark if t not in ("kafka", "tansu")]
    if not targets:
        return None
    panels = [("count", "cold_to_answer_s", "count, cold"), ("count", "warm_best_s", "count, warm"),
              ("agg", "cold_to_answer_s", "Python aggregation, cold"), ("agg", "warm_best_s", "Python aggregation, warm")]
    contenders = sorted({r["contender"] for t in targets for r in spark[t]["sets"][0]["rows"]}, key=_spark_key)
    fig, axes = plt.subplots(len(targets), len(panels), figsize=(4.0 * len(panels), 0.38 * len(contenders) * len(targets) + 1.6 * len(targets) + 0.6),
                             sharey=True, squeeze=False)
    for row, t in zip(axes, targets):
        st = spark[t]["sets"][0]
        by = {(r["contender"], r["workload"]): r for r in st["rows"]}
        for ax, (w, key, label) in zip(row, panels):
            ys = list(range(len(contenders)))
            vals = [(by.get((c, w)) or {}).get(key) or 0 for c in contenders]
            colors = ["#1f77b4" if c.startswith("kwire") else "#ff7f0e" if c == "spark-kafka" else "#999999"
                      for c in contenders]
            ax.barh(ys, vals, color=colors)
            for y, v in zip(ys, vals):
                ax.text(v, y, f" {v:.1f} s" if v else " –", va="center", fontsize=7)
            ax.set_yticks(ys)
            ax.set_yticklabels(contenders, fontsize=8)
            ax.invert_yaxis()
            ax.set_title(f"{SPARK_TARGETS.get(t, t)}, {st['records']:,} records: {label}", fontsize=8)
            ax.set_xlabel("seconds (lower is better)", fontsize=7)
            ax.tick_params(axis="x", labelsize=7)
            ax.margins(x=0.3)
    fig.suptitle("Spark local[2]: kwire (blue), Spark's own Kafka source (orange), confluent-kafka in mapPartitions (grey); "
                 "cold = a fresh process per job, JVM start included", fontsize=9)
    _footer(fig, spark_stamp(spark[targets[0]]))
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(out / fname, dpi=110)
    plt.close(fig)
    return fname


def spark_sections(spark: dict, charts: dict, *, full: bool, out_rel: str = ".") -> list[str]:
    lines = []
    if charts.get("spark_source"):
        lines += [f"![Spark: kwire beside Spark's Kafka source]({out_rel}/{charts['spark_source']})", ""]
    for t in [t for t in ("kafka", "tansu") if t in spark] + [t for t in spark if t not in ("kafka", "tansu")]:
        doc = spark[t]
        for st in doc["sets"]:
            lines += [f"**Spark local[2] on {SPARK_TARGETS.get(t, t)}** — {spark_set_line(doc, st)}; "
                      "seconds per job, ÷ Spark = Spark's source's seconds ÷ this (above 1: faster):", "",
                      *spark_table(st), ""]
            if full:
                lines += ["Cold jobs, step by step (medians, seconds; the answer and the exit counted from the launch, the session start being the same code for every contender):", "",
                          *spark_cold_table(st), ""]
        lines += [f"_{spark_stamp(doc)}._", ""]
    if full:
        lines += ["What each row is:", "", *[f"* `{c}` — {n}" for c, n in SPARK_NOTES.items()], "",
                  "`count` is `count()` (the RDDs sum per-task counts); `agg` is a per-record Python loop over the "
                  "keys and values (per key: records and the sum of the integer each value starts with) in "
                  "`mapInArrow` for the DataFrames, in `mapPartitions` for the RDDs, merged on the driver; every "
                  "answer is checked.", ""]
    return lines


# --- kwire decode beside tshark ----------------------------------------------------------------

DECODE_TASKS = (("summary", "one line per frame / packet"), ("json", "full JSON"))


def decode_line(doc: dict) -> str:
    cap = doc.get("capture", {})
    m = doc.get("machine", {})
    rows = (doc.get("rows") or {}).values()
    loads = [r.get("loadavg_1m_before") for row in rows for r in row.get("runs", [])]
    loads = [x for x in loads if x is not None]
    s = (f"capture of {cap.get('records', 0):,} records ({cap.get('records_produced', 0):,} produced and "
         f"{cap.get('records_consumed', 0):,} consumed, {cap.get('value_bytes')} B values, "
         f"{cap.get('clients', '?')} on {cap.get('broker', '?')}), {cap.get('bytes', 0) / 1e6:,.1f} MB, "
         f"tcpdump on loopback; each command a fresh process, output to /dev/null, median of "
         f"{doc.get('rounds')} interleaved round{'s' if doc.get('rounds') != 1 else ''} after a warm-up run; "
         f"{doc.get('tshark') or 'tshark ?'}; kwire {m.get('versions', {}).get('kwire', '?')}"
         f" ({m.get('versions', {}).get('kwire_codec', '?')})")
    src = doc.get("kwire_source") or {}
    if src.get("commit"):
        s += f" at {src['commit']}" + (" with local changes" if src.get("kwire_dirty") else "")
    s += f"; {m.get('cpu_model', '?')} ({m.get('cores', '?')} cores), Python {m.get('python', '?')}"
    if loads:
        s += f"; 1-minute load average before a command {min(loads):.1f}–{max(loads):.1f}"
    s += f"; {str(doc.get('date', '?'))[:10]}"
    return ("SMOKE RUN (tiny counts, numbers meaningless); " + s) if doc.get("smoke") else s


def decode_table(doc: dict) -> list[str]:
    """Per task: kwire's and tshark's median seconds (wall clock and CPU) and kwire ÷ tshark
    (below 1: kwire is faster)."""
    rows = doc.get("rows") or {}
    lines = ["| output | kwire command | wall s | CPU s | tshark command | wall s | CPU s | "
             "kwire ÷ tshark, wall | kwire ÷ tshark, CPU |", "|---|---|---:|---:|---|---:|---:|---:|---:|"]
    for label, k, t in doc.get("pairs") or ():
        a, b = rows.get(k) or {}, rows.get(t) or {}
        what = dict(DECODE_TASKS).get(label, label)
        lines.append(f"| {what} | `{a.get('command', k)}` | {fmt(a.get('median_wall_s'))} | {fmt(a.get('median_cpu_s'))} | "
                     f"`{b.get('command', t)}` | {fmt(b.get('median_wall_s'))} | {fmt(b.get('median_cpu_s'))} | "
                     f"{_anchor_ratio((doc.get('ratios') or {}).get(label))} | "
                     f"{_anchor_ratio((doc.get('cpu_ratios') or {}).get(label))} |")
    for name, row in rows.items():
        if name not in {x for p in doc.get("pairs") or () for x in p[1:]}:
            lines.append(f"| {name} (for information) | `{row.get('command', name)}` | {fmt(row.get('median_wall_s'))} | "
                         f"{fmt(row.get('median_cpu_s'))} | – | | | | |")
    return lines


def decode_section(doc: dict) -> list[str]:
    return [f"**`kwire decode` beside Wireshark's tshark** (`bench/test_bench_decode.py`) — {decode_line(doc)}:", "",
            *decode_table(doc), "",
            "Issue 18's targets: summary at most tshark's one-line time (÷ ≤ 1), full JSON at most half of "
            "`tshark -T json`'s (÷ ≤ 0.5).  CPU is the process's user + system time; on a busy machine wall "
            "time also holds the time spent waiting for a core.  kwire's JSON summarises record sets (batches, "
            "offsets, bytes); `--records full` decodes every record.  tshark's JSON holds every packet's layers "
            "and bytes but no records: Wireshark 4.0's Kafka dissector leaves Produce v9+ and Fetch v12+ bodies "
            "undecoded.", ""]


JOIN_CLIENTS = (("kwire-classic", "kwire, classic protocol"), ("confluent-classic", "confluent-kafka, classic protocol"),
                ("kwire-consumer", "kwire, KIP-848 (`group.protocol=consumer`)"),
                ("confluent-consumer", "confluent-kafka, KIP-848 (`group.protocol=consumer`)"))


def group_join_section(doc: dict) -> list[str]:
    """bench/test_bench_group_join.py: seconds from a fresh process's start to its first record,
    alone in a new group and as the second member of a group, with confluent ÷ kwire."""
    med = doc.get("median_s") or {}
    ratios = doc.get("confluent_over_kwire") or {}
    loads = doc.get("load_avg") or []
    lines = [f"**Group join time on Apache Kafka 4.3** (`bench/test_bench_group_join.py`) — seconds from a fresh "
             f"process's start to its first record, median of {doc.get('rounds', '?')} interleaved rounds"
             + (f", 1-minute load average {loads[0]:.1f} at the end" if loads else "")
             + (f"; {str(doc['date'])[:10]}" if doc.get("date") else "")
             + (".  SMOKE RUN (one round, numbers meaningless)" if doc.get("smoke") else "") + ":", "",
             "| client | alone in a new group, s | second member joining, s | confluent-kafka ÷ kwire, alone | "
             "confluent-kafka ÷ kwire, second |", "|---|---:|---:|---:|---:|"]
    for key, what in JOIN_CLIENTS:
        m = med.get(key)
        if not m:
            continue
        proto = key.split("-", 1)[1]
        r = ("", "") if key.startswith("confluent") else \
            (_anchor_ratio(ratios.get(f"{proto} first")), _anchor_ratio(ratios.get(f"{proto} second")))
        lines.append(f"| {what} | {fmt(m.get('first'))} | {fmt(m.get('second'))} | {r[0]} | {r[1]} |")
    lines += ["", "The broker keeps Kafka's default group timings except `group.initial.rebalance.delay.ms=0`; "
              "KIP-848's heartbeat interval is the broker's default 5 s, which bounds a second member's join "
              "under that protocol for both clients.  Above 1 in the ratio columns: kwire joins sooner.", ""]
    return lines


# --- charts -----------------------------------------------------------------------------------

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _footer(fig, text: str) -> None:
    import textwrap
    fig.text(0.01, 0.005, "\n".join(textwrap.wrap(text, 150)), fontsize=6.5, color="#444", va="bottom")


def chart_e2e(e2e: dict, out: Path, key: str, xlabel: str, title: str, fname: str,
              broker_key: str | None = None) -> str | None:
    plt = _plt()
    targets = [t for t in ("kafka", "tansu", "mock", "replay") if t in e2e] + [t for t in e2e if t not in ("kafka", "tansu", "mock", "replay")]
    if not targets:
        return None
    clients = sorted({r["client"] for t in targets for r in e2e[t]["runs"]}, key=_client_key)
    fig, axes = plt.subplots(1, len(targets), figsize=(4.6 * len(targets), 0.42 * len(clients) + 2.2),
                             sharey=True, squeeze=False)
    for ax, t in zip(axes[0], targets):
        by = {r["client"]: r for r in e2e[t]["runs"]}
        ys = list(range(len(clients)))
        vals, bvals, colors = [], [], []
        for c in clients:
            r = by.get(c)
            vals.append(_m(r, key) or 0 if r else 0)
            bvals.append((_m(r, broker_key) or 0) if (r and broker_key) else 0)
            colors.append("#1f77b4" if c.startswith("kwire") else "#999999")
        ax.barh(ys, vals, color=colors)
        if broker_key:
            ax.barh(ys, bvals, left=vals, color="#ff7f0e", alpha=0.7, label="broker")
        for y, c, v, b in zip(ys, clients, vals, bvals):
            r = by.get(c)
            if r is None:
                label = "not run"
            elif not r.get("ok"):
                label = "failed"
            elif _m(r, key) is None:
                label = "n/a"
            else:
                label = human(v) + (f" + {human(b)}" if b else "")
            ax.text(v + b, y, " " + label, va="center", fontsize=7)
        ax.set_yticks(ys)
        ax.set_yticklabels(clients, fontsize=8)
        ax.invert_yaxis()
        ds = e2e[t].get("dataset", {})
        ax.set_title(f"{t}: {ds.get('records', 0):,} × {ds.get('value_bytes')} B, {ds.get('partitions')} partitions",
                     fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.margins(x=0.25)
        if broker_key:
            ax.legend(["client", "broker"], fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=11)
    _footer(fig, stamp(e2e[targets[0]]))
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    fig.savefig(out / fname, dpi=110)
    plt.close(fig)
    return fname


def chart_scaling(doc: dict, out: Path, axis: str, fname: str) -> str | None:
    rows = scaling_rows(doc, axis)
    if not rows:
        return None
    plt = _plt()
    clients = sorted({r["client"] for r in rows}, key=_client_key)
    values = sorted({r["dataset"][axis] for r in rows}, key=lambda v: _axis_key(axis, v))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    metric = "mb_per_s_from_assignment" if axis == "value_bytes" else "records_per_s_from_assignment"
    for c in clients:
        by = {r["dataset"][axis]: r for r in rows if r["client"] == c and r.get("ok")}
        xs = [i if axis == "compression" else v for i, v in enumerate(values) if v in by]
        style = "-o" if c.startswith("kwire") else "--s"
        a1.plot(xs, [by[v]["metrics"].get(metric) or 0 for v in values if v in by], style, label=c, ms=4)
        cpu_key = "cpu_s_per_million_from_assignment"
        ys = []
        for v in values:
            if v not in by:
                continue
            m = by[v]["metrics"]
            if axis == "value_bytes":  # CPU per GB is the comparable cost when records grow
                ys.append((m.get(cpu_key) or 0) / 1e6 * 1e9 / v if v else 0)
            else:
                ys.append(m.get(cpu_key) or 0)
        a2.plot(xs, ys, style, label=c, ms=4)
    for ax in (a1, a2):
        if axis == "compression":
            ax.set_xticks(range(len(values)))
            ax.set_xticklabels(values)
        else:
            ax.set_xscale("log")
        ax.set_xlabel({"partitions": "partitions", "value_bytes": "value size (bytes)",
                       "compression": "compression"}[axis], fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    a1.set_ylabel("MB/s" if metric.startswith("mb") else "records/s", fontsize=9)
    a2.set_ylabel("client CPU s per GB of values" if axis == "value_bytes" else "client CPU s per million records",
                  fontsize=9)
    for ax in (a1, a2):  # log scale only where there is something positive to show
        if any(y > 0 for line in ax.get_lines() for y in line.get_ydata()):
            ax.set_yscale("log")
    a1.legend(fontsize=7)
    title = {"partitions": "Cost vs partitions", "value_bytes": "Cost vs record size",
             "compression": "Cost vs compression"}[axis]
    fig.suptitle(f"{title} (replay server: client cost only)", fontsize=11)
    _footer(fig, stamp(doc))
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    fig.savefig(out / fname, dpi=110)
    plt.close(fig)
    return fname


# --- documents --------------------------------------------------------------------------------

METRICS_NOTE = (
    "records/s and MB/s (of record values) are measured in the consuming process from the first "
    "delivery of records to the last record; CPU is that process's CPU time (all threads) over the "
    "same window, per million records; broker CPU is the broker process's CPU time over the same "
    "window (from /proc); peak RSS is the process's high-water mark (`VmHWM`); group join is subscribe() until "
    "the first assignment (the `kwire-fetch-*` rows read assigned partitions without a group). "
    "Each client runs alone in its own process, one after another; with several runs per client "
    "(round robin over the clients) the table shows the run with the median records/s.  End-to-end "
    "runs start with a warm-up round of every client, left out of the medians (kept in the JSON): a "
    "broker that has just started is slower for whichever client meets it first, and one in service "
    "is warm.")


def full_report(data: dict, charts: dict) -> str:
    lines = ["# kwire benchmarks", "",
             "Generated by `make bench-report` (tools/bench_report.py) from `bench/results/*.json`; "
             "measured by `make bench`.  " + METRICS_NOTE, ""]
    if data["e2e"]:
        lines += ["## End to end", ""]
        for name in ("throughput", "cpu"):
            if charts.get(f"e2e_{name}"):
                lines += [f"![{name}]({charts[f'e2e_{name}']})", ""]
        for t in [t for t in ("kafka", "tansu", "mock", "replay") if t in data["e2e"]] + \
                 [t for t in data["e2e"] if t not in ("kafka", "tansu", "mock", "replay")]:
            doc = data["e2e"][t]
            lines += [f"### {TARGET_TITLES.get(t, t)}", "", f"Data: {dataset_line(doc)}.", "",
                      *e2e_table(doc, from_assignment=True), "", f"_{stamp(doc)}._ {load_note(doc)}", ""]
            notes = [f"* `{r['client']}`: {r['metrics']['client_options']}" for r in doc.get("runs", [])
                     if r.get("metrics", {}).get("client_options")]
            if notes:
                lines += ["Client settings this target needed:", "", *notes, ""]
        clients = {}
        for doc in data["e2e"].values():
            clients.update(doc.get("clients") or {})
        if clients:
            lines += ["What each row is:", ""]
            lines += [f"* `{c}` — {clients[c]}" for c in sorted(clients, key=_client_key)]
            lines += [""]
    sc = data["scaling"]
    if sc:
        lines += ["## Scaling", "",
                  "On the replay server, so the client's own cost is what grows; each sweep keeps the "
                  f"rest at {sc.get('base')}.  Record-size points hold the bytes roughly constant.  "
                  "Rates and CPU here count from the partition assignment (or an assign-mode loop's "
                  "first Fetch) to the last record: with many partitions one Fetch answer can hold "
                  "most of the data, so a window opening at the first delivery would say little.", ""]
        for axis in ("partitions", "value_bytes", "compression"):
            lines += [f"### {axis.replace('_', ' ')}", ""]
            if charts.get(f"scaling_{axis}"):
                lines += [f"![{axis}]({charts[f'scaling_{axis}']})", ""]
            lines += [*scaling_table(sc, axis), ""]
        ref = [r for r in sc.get("runs", []) if "reference" in (r.get("sweeps") or [])]
        if ref:
            bp = sc.get("broker_point", {})
            lines += [f"### Reference point on {bp.get('target')}", "",
                      f"{bp.get('records', 0):,} records × {bp.get('value_bytes')} B on {bp.get('partitions')} partitions.", "",
                      "| client | records/s | CPU s per M | broker CPU s per M |", "|---|---:|---:|---:|"]
            for r in sorted(ref, key=lambda r: _client_key(r["client"])):
                if r.get("ok"):
                    m = r["metrics"]
                    lines.append(f"| {r['client']} | {fmt_int(m.get('records_per_s'))} | {fmt(m.get('cpu_s_per_million'))} | "
                                 f"{fmt(m.get('broker_cpu_s_per_million'))} |")
                else:
                    lines.append(f"| {r['client']} | failed | | |")
            lines += [""]
        lines += [f"_{stamp(sc)}._ {load_note(sc)}", ""]
    if data.get("spark"):
        lines += ["## Spark: kwire beside Spark's own Kafka source", "",
                  "bench/test_bench_spark_source.py: every job cold (a fresh process creating its SparkSession, "
                  "as a scheduled `spark-submit` job) and warm (one session, after a warm-up).", "",
                  *spark_sections(data["spark"], charts, full=True)]
    if data.get("group_join"):
        lines += ["## Group join time", "", *group_join_section(data["group_join"])]
    if data.get("decode"):
        lines += ["## kwire decode beside tshark", "", *decode_section(data["decode"])]
    mi = data["micro"]
    if mi:
        lines += ["## Microbenchmarks (pytest-benchmark)", "", f"_{micro_stamp(mi)}._", "", *micro_tables(mi)]
    return "\n".join(lines).rstrip() + "\n"


def readme_section(data: dict, charts: dict, out_rel: str) -> str:
    lines = [START, "",
             "_Generated by `make bench-report` from `bench/results/`; do not edit between the markers._", ""]
    if not data["e2e"] and not data["scaling"] and not data["micro"] and not data.get("spark") \
            and not data.get("decode") and not data.get("group_join"):
        return "\n".join(lines + ["No results yet: run `make bench`.", "", END])
    for t in [t for t in ("replay", "kafka", "tansu", "mock") if t in data["e2e"]]:
        doc = data["e2e"][t]
        lines += [f"**{TARGET_TITLES.get(t, t)}** — {dataset_line(doc)}:", "", *e2e_table(doc), ""]
        if load_note(doc):
            lines += [load_note(doc), ""]
    if data["e2e"]:
        any_doc = next(iter(data["e2e"].values()))
        lines += [f"_{stamp(any_doc)}._", ""]
    if charts.get("e2e_throughput"):
        lines += [f"![end-to-end throughput]({out_rel}/{charts['e2e_throughput']})", ""]
    if data.get("spark"):
        lines += ["**Spark: kwire beside Spark's own Kafka source** (`bench/test_bench_spark_source.py`; "
                  "cold = a fresh process per job, JVM start included; warm = one session after a warm-up):", "",
                  *spark_sections(data["spark"], charts, full=False, out_rel=out_rel)]
    if data.get("group_join"):
        lines += group_join_section(data["group_join"])
    if data.get("decode"):
        lines += decode_section(data["decode"])
    lines += [f"Scaling with partitions, record size and compression, CPU charts and the microbenchmarks: "
              f"[{out_rel}/README.md]({out_rel}/README.md).", "", END]
    return "\n".join(lines)


def splice_readme(readme: Path, section: str) -> None:
    text = readme.read_text() if readme.exists() else ""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        text = head + section + tail
    else:
        if "\n## Benchmarks" not in text:
            text = text.rstrip() + "\n\n## Benchmarks\n\n" + BENCH_INTRO + "\n"
        text = text.rstrip() + "\n\n" + section + "\n"
    readme.write_text(text)


BENCH_INTRO = """\
`make bench` runs the suite (pytest-benchmark microbenchmarks and the end-to-end runs in
`bench/`) and writes `bench/results/*.json`; `make bench-report` turns those into the table
below and the charts in `docs/bench/`.  Each client consumes the same topic in its own
process: kwire's Consumer, kwire's Fetch loops (Arrow columns, Record objects, and one that
decodes nothing, the ceiling), confluent-kafka (librdkafka), kafka-python and aiokafka, on
Tansu, on librdkafka's mock cluster and on `bench/replay_server.py`, which answers Fetch from
memory so that only the client's cost is measured.  Sizes are set by environment variables
(`KWIRE_BENCH_RECORDS`, ... — see `bench/harness.py`); `KWIRE_BENCH_SMOKE=1` is the tiny run
the test suite does (`tests/test_bench_smoke.py`)."""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench")
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    ap.add_argument("--no-readme", action="store_true", help="do not touch the README")
    ap.add_argument("--no-charts", action="store_true")
    args = ap.parse_args(argv)
    data = load(args.results)
    args.out.mkdir(parents=True, exist_ok=True)
    charts: dict[str, str | None] = {}
    if not args.no_charts:
        if data["e2e"]:
            charts["e2e_throughput"] = chart_e2e(data["e2e"], args.out, "records_per_s", "records/s",
                                                 "End to end: records/s, first record to last", "e2e_throughput.png")
            charts["e2e_cpu"] = chart_e2e(data["e2e"], args.out, "cpu_s_per_million", "CPU seconds per million records",
                                          "End to end: client CPU (blue/grey) and broker CPU (orange) per million records",
                                          "e2e_cpu.png", broker_key="broker_cpu_s_per_million")
        if data.get("spark"):
            charts["spark_source"] = chart_spark(data["spark"], args.out, "spark_source.png")
        if data["scaling"]:
            for axis in ("partitions", "value_bytes", "compression"):
                charts[f"scaling_{axis}"] = chart_scaling(data["scaling"], args.out, axis, f"scaling_{axis}.png")
    (args.out / "README.md").write_text(full_report(data, charts))
    if not args.no_readme:
        try:
            out_rel = str(args.out.resolve().relative_to(args.readme.resolve().parent))
        except ValueError:
            out_rel = str(args.out)
        splice_readme(args.readme, readme_section(data, charts, out_rel))
    print(f"wrote {args.out / 'README.md'}" + ("" if args.no_readme else f" and the table in {args.readme}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
