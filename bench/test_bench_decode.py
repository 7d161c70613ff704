"""`kwire decode` beside Wireshark's tshark on one large capture (issue 18, Performance).

The capture is made once per run: Tansu (kwire.embedded.TansuBroker) on loopback, tcpdump
listening on its port, confluent-kafka's producer writing ``KWIRE_BENCH_DECODE_RECORDS``
records (default 500,000 x 100 B values on 3 partitions; smoke 200) and confluent-kafka's
consumer reading them back from its assigned partitions, so the file holds that many records twice (Produce requests and Fetch responses):
1M records and about 120 MB at the defaults.

Then each command runs as a user runs it -- a fresh process, output to /dev/null -- in
interleaved rounds (``KWIRE_BENCH_DECODE_ROUNDS``, default 5; smoke 1), and the median
wall-clock seconds of each is reported, with the ratios the issue asks for:

* summary: ``kwire decode CAP --port P --summary`` vs ``tshark -r CAP -d tcp.port==P,kafka``
  (tshark's one line per packet);
* json: ``kwire decode CAP --port P --format json`` vs ``tshark -r CAP -d tcp.port==P,kafka -T json``;
* for information (no tshark counterpart): ``kwire decode CAP --port P --stats``, and
  ``--format json --records full`` (every record decoded, key and value in hex -- tshark 4.0's
  JSON here holds the frames' bytes but not their records, its Kafka dissector leaving Produce
  v9+ and Fetch v12+ bodies undecoded).

Results go to ``bench/results/decode.json``; tools/bench_report.py renders them.
Run alone: ``python -m pytest -q -p no:cacheprovider bench/test_bench_decode.py -s``;
``python -m bench.test_bench_decode OUT.pcap`` only makes a capture.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench import harness
from tests.capture_util import wait_until_written

ROOT = Path(__file__).resolve().parent.parent
SMOKE = os.environ.get("KWIRE_BENCH_SMOKE", "") not in ("", "0")
RECORDS = harness._env_int("KWIRE_BENCH_DECODE_RECORDS", 200 if SMOKE else 500_000)
VALUE_BYTES = harness._env_int("KWIRE_BENCH_DECODE_VALUE_BYTES", 100)
ROUNDS = max(1, harness._env_int("KWIRE_BENCH_DECODE_ROUNDS", 1 if SMOKE else 5))
PARTITIONS = 3


def _consume(bootstrap: str, topic: str, records: int, timeout_s: float) -> int:
    import confluent_kafka

    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:  # assigned partitions: no group join to wait for
        c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                  for p in range(PARTITIONS)])
        got, deadline = 0, time.monotonic() + timeout_s
        while got < records and time.monotonic() < deadline:
            for m in c.consume(num_messages=10_000, timeout=1.0):
                if m.error() is None:
                    got += 1
        return got
    finally:
        c.close()


def make_capture(path: Path, records: int = RECORDS, value_bytes: int = VALUE_BYTES) -> dict:
    """Produce and consume ``records`` on Tansu under tcpdump; the capture's facts."""
    from kwire.admin import Admin
    from kwire.embedded import TansuBroker

    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        raise RuntimeError("tcpdump is missing: `make test` installs it (tools/system-deps.sh)")
    topic = f"bench-decode-{uuid.uuid4().hex[:8]}"
    with TansuBroker() as broker:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([(topic, PARTITIONS, 1)], timeout=30, wait_for_leaders=True)
        cmd = [tcpdump, "-i", "lo", "-U", "-n", "-s", "0", "-B", "65536", "-Z", "root", "-w", str(path),
               f"tcp port {broker.port}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            line = proc.stderr.readline()
            if b"listening on" not in line:
                proc.wait(timeout=10)
                raise RuntimeError(f"tcpdump did not start: {(line + proc.stderr.read()).decode(errors='replace')}")
            wait_until_written(broker.port, path)
            produced = harness.produce_dataset(broker.bootstrap, harness.Dataset(topic, PARTITIONS, records, value_bytes))
            consumed = _consume(broker.bootstrap, topic, records, timeout_s=60 + records / 5000)
            wait_until_written(broker.port, path)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
    dropped = [ln for ln in err.decode(errors="replace").splitlines() if "dropped by kernel" in ln]
    if consumed != records:
        raise RuntimeError(f"consumed {consumed} of {records} records")
    return {"path": str(path), "bytes": path.stat().st_size, "port": broker.port, "topic": topic,
            "partitions": PARTITIONS, "value_bytes": value_bytes, "records_produced": produced,
            "records_consumed": consumed, "records": produced + consumed,
            "tcpdump": dropped[0].strip() if dropped else None, "broker": "tansu",
            "clients": "confluent-kafka's producer and consumer"}


def commands(cap: dict) -> dict[str, list[str]]:
    kwire = [sys.executable, "-m", "kwire", "decode", cap["path"], "--port", str(cap["port"])]
    tshark = [shutil.which("tshark") or "tshark", "-r", cap["path"], "-d", f"tcp.port=={cap['port']},kafka"]
    return {
        "kwire-summary": kwire + ["--summary"],
        "tshark-oneline": tshark,
        "kwire-json": kwire + ["--format", "json"],
        "tshark-json": tshark + ["-T", "json"],
        "kwire-stats": kwire + ["--stats"],
        # every record decoded and printed, key and value as hex: more than tshark -T json does
        # here (Wireshark 4.0 leaves Produce v9+ and Fetch v12+ bodies undecoded)
        "kwire-json-records-full": kwire + ["--format", "json", "--records", "full"],
    }


PAIRS = (("summary", "kwire-summary", "tshark-oneline"), ("json", "kwire-json", "tshark-json"))


def _env(pycache: Path | None) -> dict:
    """The child environment: kwire importable from this checkout, and its bytecode cached
    (in ``pycache``) as an installed kwire's is -- PYTHONDONTWRITEBYTECODE would make every run
    compile whatever changed since the last .pyc was written."""
    env = harness.child_env()
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _run(cmd: list[str], env: dict) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": round(wall, 4), "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 4),
            "maxrss_mib": round(after.ru_maxrss / 1024, 1), "exit": proc.returncode,
            "stderr_tail": proc.stderr.decode(errors="replace")[-300:], "loadavg_1m_before": round(load, 2)}


def _shown(cmd: list[str], cap: dict) -> str:
    """A command as a user types it: ``kwire decode CAP --port P ...`` (run as python -m kwire)."""
    words = ["kwire"] + cmd[3:] if cmd[:3] == [sys.executable, "-m", "kwire"] else [Path(cmd[0]).name] + cmd[1:]
    port = str(cap["port"])
    return " ".join("CAP" if w == cap["path"] else "P" if w == port else w.replace(f"=={port},", "==P,")
                    for w in words)


def measure(cap: dict, rounds: int = ROUNDS, log=print, pycache: Path | None = None) -> dict:
    """Every command once to warm up (bytecode written, the capture in the page cache), then
    ``rounds`` interleaved rounds; per command the median wall-clock and CPU seconds."""
    cmds = commands(cap)
    env = _env(pycache)
    for cmd in cmds.values():
        _run(cmd, env)
    runs: dict[str, list[dict]] = {name: [] for name in cmds}
    for i in range(rounds):
        order = list(cmds) if i % 2 == 0 else list(reversed(cmds))  # neither side always goes first
        for name in order:
            r = _run(cmds[name], env)
            runs[name].append(r)
            log(f"  decode round {i + 1} {name:15s} {r['wall_s']:8.2f} s  cpu {r['cpu_s']:7.2f} s  exit {r['exit']}")
    rows = {}
    for name, rs in runs.items():
        rows[name] = {"command": _shown(cmds[name], cap),
                      "median_wall_s": round(statistics.median(r["wall_s"] for r in rs), 4),
                      "median_cpu_s": round(statistics.median(r["cpu_s"] for r in rs), 4),
                      "runs": rs}
    ratios = {label: round(rows[k]["median_wall_s"] / rows[t]["median_wall_s"], 3) for label, k, t in PAIRS}
    cpu_ratios = {label: round(rows[k]["median_cpu_s"] / rows[t]["median_cpu_s"], 3) for label, k, t in PAIRS}
    return {"rows": rows, "ratios": ratios, "cpu_ratios": cpu_ratios}


def _kwire_source() -> dict:
    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return ""
    return {"commit": git("rev-parse", "--short", "HEAD"), "kwire_dirty": bool(git("status", "--porcelain", "kwire"))}


def _tshark_version() -> str | None:
    try:
        out = subprocess.run(["tshark", "--version"], capture_output=True, text=True, timeout=30).stdout
        return out.splitlines()[0].rstrip(".") if out else None
    except OSError:
        return None


def test_decode_vs_tshark(tmp_path):
    assert shutil.which("tshark"), "tshark is missing: `make test` installs it (tools/system-deps.sh)"
    cap = make_capture(tmp_path / "bench-decode.pcap")
    print(f"\ndecode: capture of {cap['records']:,} records, {cap['bytes'] / 1e6:.1f} MB, port {cap['port']}")
    m = measure(cap, pycache=tmp_path / "pycache")
    cap["path"] = "bench-decode.pcap (made in the run, not kept)"
    doc = {"capture": cap, "rounds": ROUNDS, "tshark": _tshark_version(), "pairs": [list(p) for p in PAIRS],
           "kwire_source": _kwire_source(), **m, "runs": []}
    path = harness.write_results(harness.Settings.from_env(), "decode", doc)
    saved = harness.json.loads(path.read_text())
    assert not harness.check_results_doc(saved), harness.check_results_doc(saved)
    for name, row in m["rows"].items():  # every command decoded the whole capture without failing
        for r in row["runs"]:
            assert r["exit"] == 0, (name, r)
    for label, ratio in m["ratios"].items():
        print(f"decode {label}: kwire / tshark wall-clock = {ratio:.2f}, CPU = {m['cpu_ratios'][label]:.2f}")


if __name__ == "__main__":
    # python -m bench.test_bench_decode OUT.pcap            make a capture
    # python -m bench.test_bench_decode CAP PORT [ROUNDS]   measure on an existing one
    if len(sys.argv) > 2:
        import json
        import tempfile
        cap = {"path": str(Path(sys.argv[1]).resolve()), "port": int(sys.argv[2])}
        with tempfile.TemporaryDirectory() as tmp:
            m = measure(cap, int(sys.argv[3]) if len(sys.argv) > 3 else ROUNDS, pycache=Path(tmp))
        print(json.dumps({k: m[k] for k in ("ratios", "cpu_ratios")}),
              {k: (r["median_wall_s"], r["median_cpu_s"]) for k, r in m["rows"].items()})
    else:
        out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench-decode.pcap").resolve()
        print(make_capture(out))
