"""A Spark standalone cluster for the tests: one master and two workers (1 core, 1 GB each) on
loopback, started from pyspark's own jars.

    cluster = SparkCluster()                  # master + workers, ready when both workers are ALIVE
    cluster.master_url                        # "spark://127.0.0.1:<port>"
    cluster.driver_conf()                     # Spark properties a driver on the cluster needs
    driver_env()                              # environment for a driver process (python <script>)
    cluster.close()                           # every JVM killed (executors die with their worker)

The pip package ships no ``sbin/start-master.sh`` (only the history server's scripts), so the
JVMs are started directly: ``java -cp "<pyspark>/jars/*" org.apache.spark.deploy.master.Master``
and ``...deploy.worker.Worker``, with the JVM options ``bin/spark-class`` adds on Java 17.
Every port is a free loopback port (RPC and web UI; the master's REST submission server is
off), ``SPARK_LOCAL_IP=127.0.0.1`` keeps the web UIs on loopback too.  Ready means: the
master's JSON (``http://127.0.0.1:<ui>/json/``) says ALIVE and lists both workers ALIVE.

Each JVM gets a session of its own and ``PR_SET_PDEATHSIG`` (as :mod:`kwire.embedded.kafka`),
so a killed test run leaves no master or worker behind; executors are the workers' children,
in their process group, and exit when they lose their worker.  Logs (each daemon's, and the
executors' ``stdout``/``stderr`` under ``work/<app>/<executor>/``) stay in :attr:`workdir` when
a test of the run failed.

Executors run this interpreter (the driver's ``PYSPARK_PYTHON``/``spark.pyspark.python``) with
this checkout first on ``PYTHONPATH`` (the workers' environment and ``spark.executorEnv``), so
``import kwire`` there imports the code under test.

``python -m tests.spark_cluster`` starts a cluster, prints its startup time and stops it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from kwire.embedded import die_with_parent, free_port
from kwire.embedded.kafka import java_binary

ROOT = Path(__file__).resolve().parent.parent

# What `bin/spark-class` (Spark 4.2's launcher, JavaModuleOptions) adds to every JVM on Java 17+.
_JVM_OPTIONS = [
    "-XX:+IgnoreUnrecognizedVMOptions", "--add-modules=jdk.incubator.vector",
    *(f"--add-opens={m}=ALL-UNNAMED" for m in (
        "java.base/java.lang", "java.base/java.lang.invoke", "java.base/java.lang.reflect",
        "java.base/java.io", "java.base/java.net", "java.base/java.nio", "java.base/java.util",
        "java.base/java.util.concurrent", "java.base/java.util.concurrent.atomic",
        "java.base/jdk.internal.ref", "java.base/sun.nio.ch", "java.base/sun.nio.cs",
        "java.base/sun.security.action", "java.base/sun.util.calendar",
        "java.security.jgss/sun.security.krb5")),
    "-Dio.netty.tryReflectionSetAccessible=true",
]

# Properties of the master and the workers (a --properties-file).
_DAEMON_PROPERTIES = {
    "spark.master.rest.enabled": "false",   # else a REST submission server on 6066
    "spark.worker.cleanup.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


class SparkClusterError(RuntimeError):
    """The cluster could not be started."""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _scala_version(jars: Path) -> str:
    """From the scala-library jar: Spark's launcher needs SPARK_SCALA_VERSION outside a build
    tree (the workers build the executors' command lines with it)."""
    for jar in jars.glob("scala-library-*.jar"):
        return ".".join(jar.name[len("scala-library-"):].split(".")[:2])
    raise SparkClusterError(f"no scala-library jar in {jars}")


class _Daemon:
    """One master or worker JVM."""

    def __init__(self, name: str, cmd: list[str], env: dict, log_path: Path):
        self.name, self.log_path = name, log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=log_path.parent, preexec_fn=die_with_parent)

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            raise SparkClusterError(f"Spark {self.name} exited with code {self.proc.returncode}; log tail:\n"
                                    f"{self.log_tail()}")

    def log_tail(self, n_bytes: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-n_bytes:].decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the worker's executors are in its group
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)


class SparkCluster:
    """A standalone master and ``workers`` workers of ``cores`` cores and ``memory_mb`` each."""

    def __init__(self, workers: int = 2, *, cores: int = 1, memory_mb: int = 1024, daemon_heap_mb: int = 256,
                 start_timeout_s: float = 120.0, keep_logs: bool = False, workdir: str | None = None):
        self.keep_logs = keep_logs
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kwire-spark-cluster-"))
        self.home = spark_home()
        self.java = java_binary()
        jars = self.home / "jars"
        self.classpath = str(jars / "*")
        self.cores, self.memory_mb, self.num_workers = cores, memory_mb, workers
        self.host = "127.0.0.1"
        self.master_port, self.master_ui_port = free_port(), free_port()
        self.master_url = f"spark://{self.host}:{self.master_port}"
        self.daemons: list[_Daemon] = []
        self._closed = False
        props = self.workdir / "spark-daemons.conf"
        props.write_text("".join(f"{k} {v}\n" for k, v in _DAEMON_PROPERTIES.items()))
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_SCALA_VERSION": _scala_version(jars),
            "SPARK_LOCAL_IP": self.host,
            "SPARK_LOCAL_DIRS": str(self.workdir / "local"),
            "SPARK_CONF_DIR": str(self.workdir),        # no spark-env.sh or defaults of the machine
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": _python_path(),
        }
        base = [self.java, f"-Xmx{daemon_heap_mb}m", *_JVM_OPTIONS, "-cp", self.classpath]
        t0 = time.monotonic()
        try:
            self.daemons.append(_Daemon(
                "master", [*base, "org.apache.spark.deploy.master.Master", "--host", self.host,
                           "--port", str(self.master_port), "--webui-port", str(self.master_ui_port),
                           "--properties-file", str(props)],
                self.env, self._log_path("master")))
            # Workers try the master again only after 5-15 s: start them once it listens.
            self._wait(lambda: _listening(self.host, self.master_port), start_timeout_s, "the master to listen")
            for i in range(workers):
                work = self.workdir / f"worker-{i}"
                work.mkdir()
                self.daemons.append(_Daemon(
                    f"worker {i}", [*base, "org.apache.spark.deploy.worker.Worker", "--host", self.host,
                                    "--port", str(free_port()), "--webui-port", str(free_port()),
                                    "--cores", str(cores), "--memory", f"{memory_mb}m", "--work-dir", str(work),
                                    "--properties-file", str(props), self.master_url],
                    self.env, self._log_path(f"worker-{i}")))
            self._wait(self._workers_alive, max(10.0, start_timeout_s - (time.monotonic() - t0)),
                       f"{workers} workers to register")
        except BaseException:
            self.keep_logs = True
            self.close()
            raise
        self.startup_s = time.monotonic() - t0

    def _log_path(self, name: str) -> Path:
        (self.workdir / "logs").mkdir(exist_ok=True)
        return self.workdir / "logs" / f"{name}.log"

    def master_json(self) -> dict | None:
        """The master's state as its web UI's /json/ gives it (None while it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.master_ui_port}/json/", timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def _workers_alive(self) -> bool:
        state = self.master_json() or {}
        alive = [w for w in state.get("workers", ()) if w.get("state") == "ALIVE"]
        return state.get("status") == "ALIVE" and len(alive) == self.num_workers

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            for d in self.daemons:
                d.check_running()
            if time.monotonic() > deadline:
                raise SparkClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}; master:\n"
                                        f"{self.daemons[0].log_tail()}")
            time.sleep(0.1)

    def wait_idle(self, timeout_s: float = 120.0) -> None:
        """Until no application holds the workers' cores (one that ended or whose driver died
        gives them back once the master noticed)."""
        def idle():
            state = self.master_json() or {}
            return not state.get("activeapps") and state.get("coresused", 0) == 0
        self._wait(idle, timeout_s, "the workers to be free of applications")

    # --- what a driver needs ------------------------------------------------------------------

    def driver_conf(self, **extra: str) -> dict[str, str]:
        """Spark properties of a driver on this cluster: an executor per worker."""
        return {
            "spark.master": self.master_url,
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.executor.cores": str(self.cores),
            "spark.executor.memory": f"{min(512, self.memory_mb)}m",
            "spark.cores.max": str(self.cores * self.num_workers),
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": _python_path(),
            "spark.sql.shuffle.partitions": "4",
            **extra,
        }

    def log_tail(self, n_bytes: int = 2000) -> str:
        parts = [f"=== {d.name} ({d.log_path})\n{d.log_tail(n_bytes)}" for d in self.daemons]
        for f in sorted(self.workdir.glob("worker-*/app-*/*/stderr"))[-4:]:
            parts.append(f"=== executor {f.parent.parent.name}/{f.parent.name} ({f})\n"
                         + f.read_bytes()[-n_bytes:].decode("utf-8", "replace"))
        return "\n".join(parts)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for d in reversed(self.daemons):
            d.kill()
        if not self.keep_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def driver_env() -> dict[str, str]:
    """Environment of a driver process (on the cluster or local): this interpreter and this
    checkout on the driver and in the executors' Python workers."""
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": _python_path(), "SPARK_LOCAL_IP": "127.0.0.1"}


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _python_path() -> str:
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    return os.pathsep.join([str(ROOT), *paths])


@pytest.fixture(scope="session")
def spark_cluster(request):
    """A Spark standalone cluster (master + 2 workers, 1 core and 1 GB each) for the session;
    its logs stay on disk when a test of the run failed."""
    cluster = SparkCluster(keep_logs=True)
    yield cluster
    cluster.keep_logs = request.session.testsfailed > 0
    cluster.close()
    if cluster.keep_logs:
        print(f"\nkwire: Spark cluster logs of this run kept in {cluster.workdir}")


if __name__ == "__main__":
    with SparkCluster() as c:
        print(f"Spark standalone cluster {c.master_url}: ready in {c.startup_s:.1f} s ({c.workdir})")
