"""Apache Kafka itself, run from its Maven Central jars: one combined KRaft node or a cluster.

    with KafkaCluster() as k:                      # one node: broker + controller, 4.3.1
        k.bootstrap                                # "127.0.0.1:<port>"
    with KafkaCluster(3) as k:                     # three combined nodes, replication factor 3
        k.stop_node(2); k.start_node(2)            # same ports, same log.dirs: data kept

Jars: ``org.apache.kafka:kafka_2.13:<version>`` plus the Log4j 2 jars the distribution adds
itself (Kafka logs through slf4j-api 1.7, hence ``log4j-slf4j-impl``), copied with Maven's
dependency plugin into ``$KWIRE_KAFKA_CACHE`` (default ``~/.cache/kwire/kafka``)/<version>/lib
once; a stamp file marks a complete copy.  A failed download raises
:class:`EmbeddedBrokerError` naming the Maven command and its output -- never a skip.
:func:`kafka_tools_jars` copies ``org.apache.kafka:kafka-tools:<version>`` (the command-line
tools and Java's clients; main classes in :data:`TOOLS`) the same way into <version>/tools, for
running ``java -cp "<dir>/*" <class>``; :func:`maven_copy` is the one place that runs Maven.

Each node gets free loopback ports, its own ``log.dirs`` and log directory, is formatted with
``kafka.tools.StorageTool`` and started with ``kafka.Kafka``.  Ready means: every node answers
ApiVersions on its client listener and Metadata lists all brokers, over the wire.  ``close()``
kills every process and removes the data; the logs stay in
``self.workdir`` when ``keep_logs`` (the test fixtures keep them for failed tests).  A process
killed before ``close()`` takes its JVMs along (they die with their parent); the work
directory it left is removed by the next cluster started on the machine
(:func:`remove_orphaned_workdirs`: a work directory names its owner's pid until ``close()``).

Listeners beyond PLAINTEXT (SSL, SASL_PLAINTEXT, SASL_SSL) and any broker property are given by
the caller: ``KafkaCluster(listeners=("SASL_PLAINTEXT", "SSL"), properties={...})``; the
addresses are ``k.address("SSL")``.  SCRAM users are created at format time
(``scram_users=[("SCRAM-SHA-256", "alice", "secret")]``).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import EmbeddedBrokerError, die_with_parent, free_port

KAFKA_VERSION = "4.3.1"        # the reference peer
KAFKA_3_VERSION = "3.9.1"      # the last 3.x line: older API versions, classic groups only
LOG4J_VERSION = "2.24.3"
_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kwire</groupId><artifactId>kafka-broker-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = org.apache.kafka
logger.kafka.level = INFO
logger.requests.name = kafka.request.logger
logger.requests.level = WARN
"""

# Properties of a small, fast test cluster; replication settings follow the node count.
_BASE_PROPERTIES = {
    "inter.broker.listener.name": "PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.dedupe.buffer.size": "16777216",
    "log.cleaner.backoff.ms": "100",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


def cache_root() -> Path:
    return Path(os.environ.get("KWIRE_KAFKA_CACHE") or Path.home() / ".cache" / "kwire" / "kafka")


def kafka_jars(version: str = KAFKA_VERSION) -> Path:
    """The directory holding every jar of Apache Kafka ``version``'s broker; downloaded once."""
    return maven_copy(cache_root() / version / "lib", _POM.format(kafka=version, log4j=LOG4J_VERSION),
                      f"kafka_2.13-{version}.jar", what=f"Apache Kafka {version}",
                      stamp=f"kafka_2.13 {version}, log4j {LOG4J_VERSION}")


# The command-line tools' main classes, all in org.apache.kafka:kafka-tools in 4.x (kafka_2.13
# has none of them; 3.9's ConsoleProducer was still kafka.tools.ConsoleProducer there):
# java -cp "<kafka_tools_jars()>/*" <class> ...
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
}

_TOOLS_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kwire</groupId><artifactId>kafka-tools-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{kafka}</version></dependency>
  </dependencies>
</project>
"""


def kafka_tools_jars(version: str = KAFKA_VERSION) -> Path:
    """The directory holding ``org.apache.kafka:kafka-tools:<version>`` and its runtime
    dependencies (Java's AdminClient, producer and consumer; the main classes are in
    :data:`TOOLS`), beside the broker's jars in the cache; downloaded once."""
    return maven_copy(cache_root() / version / "tools", _TOOLS_POM.format(kafka=version),
                      f"kafka-tools-{version}.jar", what=f"Apache Kafka {version}'s tools",
                      stamp=f"kafka-tools {version}")


def maven_copy(lib: Path, pom: str, marker_jar: str, *, what: str, stamp: str,
               exclude_groups: Sequence[str] = (), drop: Callable[[Path], bool] | None = None) -> Path:
    """``lib`` once it holds the runtime dependencies of ``pom`` (copied from Maven Central by
    the dependency plugin into a temporary directory, then moved into place with a stamp file);
    ``marker_jar`` must be among them.  ``exclude_groups``: Maven group ids not to copy;
    ``drop(jar)``: jars to remove from the copy before it is moved into place.  Every Maven
    download of kwire.embedded goes through here."""
    if (lib / ".complete").exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise EmbeddedBrokerError(
            f"{what}'s jars come from Maven Central through Maven, and `mvn` is not on PATH "
            "(Debian: apt-get install maven; `bash tools/system-deps.sh kafka` does it)")
    work = Path(tempfile.mkdtemp(prefix=f"kwire-{lib.parent.name}-{lib.name}-", dir=cache_root().parent
                                 if cache_root().parent.exists() else None))
    try:
        (work / "pom.xml").write_text(pom)
        out = work / "lib"
        cmd = [mvn, "-B", "-q", "-f", str(work / "pom.xml"), f"{_DEPENDENCY_PLUGIN}:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={out}"]
        if exclude_groups:
            cmd.insert(-1, f"-DexcludeGroupIds={','.join(exclude_groups)}")
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if run.returncode != 0 or not (out / marker_jar).exists():
            raise EmbeddedBrokerError(
                f"downloading {what} from Maven Central failed (exit {run.returncode}): "
                f"{' '.join(cmd)}\n{(run.stdout + run.stderr)[-3000:]}")
        if drop is not None:
            for jar in out.glob("*.jar"):
                if drop(jar):
                    jar.unlink()
        (out / ".complete").write_text(stamp + "\n")
        lib.parent.mkdir(parents=True, exist_ok=True)
        if lib.exists():  # a partial copy from an interrupted run
            shutil.rmtree(lib)
        os.replace(out, lib)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return lib


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise EmbeddedBrokerError("Apache Kafka needs Java 17+ (Debian: apt-get install openjdk-17-jre-headless)")
    return found


def _api_versions_ok(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """ApiVersions v0 over a fresh socket; True when the broker answers with error code 0.

    v0 request: size INT32, api_key INT16 (18), api_version INT16 (0), correlation_id INT32,
    client_id STRING; response: size INT32, correlation_id INT32, error_code INT16, ...
    """
    client = b"kwire-ready"
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 10)
    except OSError:
        return False
    if head is None:
        return False
    _size, corr, error_code = struct.unpack(">iih", head)
    return bool(corr == 1 and error_code == 0)


def _recv_exact(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _metadata_broker_ids(host: str, port: int, timeout_s: float = 2.0) -> set[int]:
    """The node ids a Metadata v12 answer lists (empty on any failure)."""
    from ..protocol import api as protocol

    frame = protocol.encode_request("Metadata", 12, {"topics": []}, correlation_id=2, client_id="kwire-ready")
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(frame)
            head = _recv_exact(s, 4)
            if head is None:
                return set()
            payload = _recv_exact(s, struct.unpack(">i", head)[0])
    except OSError:
        return set()
    if payload is None:
        return set()
    resp = protocol.decode_response("Metadata", 12, payload)
    return {b["node_id"] for b in resp.body["brokers"]}


class KafkaNode:
    """One combined broker+controller process of a :class:`KafkaCluster`."""

    def __init__(self, cluster: KafkaCluster, node_id: int):
        self.cluster, self.node_id = cluster, node_id
        self.dir = cluster.workdir / f"node-{node_id}"
        self.data_dir = self.dir / "data"
        self.log_dir = self.dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.ports = {name: free_port() for name in ("PLAINTEXT", "CONTROLLER", *cluster.listener_names)}
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_s: float | None = None   # wall time of the last start, until ready

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    def address(self, listener: str = "PLAINTEXT") -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def write_config(self) -> None:
        c = self.cluster
        listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())
        protocol_map = {name: name for name in self.ports if name != "CONTROLLER"}
        protocol_map["CONTROLLER"] = "PLAINTEXT"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "listeners": listeners,
            "advertised.listeners": listeners,
            "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocol_map.items()),
            "log.dirs": str(self.data_dir),
            **c.replication_properties(),
            **_BASE_PROPERTIES,
            **c.quorum_properties(),
            **c.properties,
        }
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def format_command(self) -> list[str]:
        c = self.cluster
        cmd = [c.java, "-Xmx256m", "-cp", c.classpath, "kafka.tools.StorageTool", "format",
               "-t", c.cluster_id, "-c", str(self.config_path), "-g"]
        if len(c.nodes_ids) == 1:  # a dynamic quorum of one; more nodes use static voters
            cmd.append("--standalone")
        for mechanism, user, password in c.scram_users:
            cmd += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        return cmd

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        c = self.cluster
        log = open(self.log_dir / "stdout.log", "ab")
        self.started_s = time.monotonic()
        self.proc = subprocess.Popen(
            [c.java, f"-Xms{c.heap_mb}m", f"-Xmx{c.heap_mb}m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={c.workdir / 'log4j2.properties'}",
             f"-Dkafka.logs.dir={self.log_dir}", *c.jvm_args, "-cp", c.classpath, "kafka.Kafka",
             str(self.config_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent)
        log.close()

    def ready(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise EmbeddedBrokerError(
                f"Kafka node {self.node_id} exited with code {None if self.proc is None else self.proc.returncode}"
                f"; log tail:\n{self.log_tail()}")
        host, port = self.address().rsplit(":", 1)
        return _api_versions_ok(host, int(port))

    def stop(self, *, kill: bool = False, timeout_s: float = 20.0) -> None:
        """SIGTERM (a controlled shutdown) or SIGKILL; waits for the process to end."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n_bytes: int = 4000) -> str:
        parts = []
        for name in ("stdout.log", "server.log"):
            try:
                parts.append(f"--- {name}\n" + (self.log_dir / name).read_bytes()[-n_bytes:].decode("utf-8", "replace"))
            except OSError:
                pass
        return "\n".join(parts)


_OWNER_FILE = "owner.pid"      # in a cluster's work directory until close(): the pid that made it


def remove_orphaned_workdirs(root: str | None = None) -> list[Path]:
    """Remove the work directories (under ``root``, default the temporary directory) of
    clusters whose process died without closing them -- killed; its JVMs died with it.  A
    directory whose owner is alive, or kept for its logs by ``close()``, stays.  Returns the
    directories removed."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob("kwire-kafka-*"):
        try:
            pid = int((d / _OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue
        try:
            os.kill(pid, 0)
            continue                                  # alive (or a pid reused: keep it)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue                                  # alive, someone else's
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


class KafkaCluster:
    """``num_nodes`` combined KRaft nodes of Apache Kafka ``version`` on loopback."""

    def __init__(self, num_nodes: int = 1, *, version: str = KAFKA_VERSION, listeners: tuple[str, ...] = (),
                 properties: dict[str, str] | None = None,
                 scram_users: Sequence[tuple[str, str, str]] = (), heap_mb: int = 512,
                 jvm_args: tuple[str, ...] = (), start_timeout_s: float = 90.0, keep_logs: bool = False,
                 workdir: str | None = None) -> None:
        self.version = version
        self.listener_names = tuple(listeners)
        self.properties = {k: str(v) for k, v in (properties or {}).items()}
        self.scram_users = list(scram_users)
        self.heap_mb, self.jvm_args = heap_mb, tuple(jvm_args)
        self.keep_logs = keep_logs
        self.java = java_binary()
        self.classpath = str(kafka_jars(version) / "*")
        if workdir is None:
            remove_orphaned_workdirs()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"kwire-kafka-{version}-"))
        (self.workdir / _OWNER_FILE).write_text(str(os.getpid()))
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        self.nodes_ids = list(range(1, num_nodes + 1))
        self.cluster_id = self._random_uuid()
        self.nodes = {i: KafkaNode(self, i) for i in self.nodes_ids}
        self._closed = False
        self.startup_s: dict[int, float] = {}
        try:
            for node in self.nodes.values():
                node.write_config()
            self._format()
            self.start_nodes(self.nodes_ids, timeout_s=start_timeout_s)
        except BaseException:
            self.keep_logs = True
            self.close()
            raise

    # --- configuration -------------------------------------------------------------------------

    def _random_uuid(self) -> str:
        # A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Uuid.toString).
        # Like Kafka's Uuid.randomUuid, never one starting with '-': StorageTool would read
        # "-t -xyz" as an option and fail ("--cluster-id: expected one argument").
        import base64
        while True:
            uid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
            if uid[0] != "-":
                return uid

    def replication_properties(self) -> dict[str, str]:
        n = len(self.nodes_ids)
        rf = str(min(3, n))
        return {
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "1" if n == 1 else "3",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": "1" if n == 1 else "2",
            "transaction.state.log.num.partitions": "1" if n == 1 else "3",
            "default.replication.factor": rf,
            "min.insync.replicas": "1",
        }

    def quorum_properties(self) -> dict[str, str]:
        if len(self.nodes_ids) == 1:
            return {"controller.quorum.bootstrap.servers": self.nodes[1].address("CONTROLLER")}
        voters = ",".join(f"{i}@127.0.0.1:{self.nodes[i].ports['CONTROLLER']}" for i in self.nodes_ids)
        return {"controller.quorum.voters": voters}

    def _format(self) -> None:
        cmds = [node.format_command() for node in self.nodes.values()]
        with ThreadPoolExecutor(len(cmds)) as pool:
            runs = list(pool.map(lambda cmd: subprocess.run(cmd, capture_output=True, text=True, timeout=120), cmds))
        for node, run in zip(self.nodes.values(), runs):
            if run.returncode != 0:
                raise EmbeddedBrokerError(f"formatting Kafka node {node.node_id} failed (exit {run.returncode}):\n"
                                          f"{(run.stdout + run.stderr)[-3000:]}")

    # --- processes -----------------------------------------------------------------------------

    def start_nodes(self, node_ids: Sequence[int], timeout_s: float = 90.0) -> None:
        """Start the given nodes (config and data as they are) and wait until the cluster serves."""
        for i in node_ids:
            self.nodes[i].start()
        deadline = time.monotonic() + timeout_s
        pending = set(node_ids)
        while pending:
            for i in sorted(pending):
                if self.nodes[i].ready():
                    self.startup_s[i] = time.monotonic() - (self.nodes[i].started_s or 0.0)
                    pending.discard(i)
            if pending and time.monotonic() > deadline:
                raise EmbeddedBrokerError(
                    f"Kafka node(s) {sorted(pending)} not ready after {timeout_s}s; "
                    + "\n".join(self.nodes[i].log_tail() for i in sorted(pending)))
            time.sleep(0.1)
        self.wait_for_brokers(timeout_s=max(5.0, deadline - time.monotonic()))

    def wait_for_brokers(self, timeout_s: float = 60.0) -> None:
        """Until every running node's Metadata lists every running node."""
        running = {i for i, n in self.nodes.items() if n.running}
        deadline = time.monotonic() + timeout_s
        while True:
            seen = [_metadata_broker_ids(*self._hostport(i)) for i in running]
            if all(s >= running for s in seen):
                return
            if time.monotonic() > deadline:
                raise EmbeddedBrokerError(f"Kafka brokers {sorted(running)} not all registered after {timeout_s}s "
                                          f"(Metadata saw {seen})")
            time.sleep(0.1)

    def _hostport(self, node_id: int, listener: str = "PLAINTEXT") -> tuple[str, int]:
        host, port = self.nodes[node_id].address(listener).rsplit(":", 1)
        return host, int(port)

    def stop_node(self, node_id: int, *, kill: bool = False) -> None:
        self.nodes[node_id].stop(kill=kill)

    def start_node(self, node_id: int, timeout_s: float = 90.0) -> None:
        self.start_nodes([node_id], timeout_s=timeout_s)

    def restart(self, timeout_s: float = 90.0) -> None:
        """Every node stopped (controlled shutdown) and started again with its data."""
        for node in self.nodes.values():
            node.stop()
        self.start_nodes(self.nodes_ids, timeout_s=timeout_s)

    # --- addresses -----------------------------------------------------------------------------

    def address(self, listener: str = "PLAINTEXT") -> str:
        """bootstrap.servers for ``listener``: every node's address on it."""
        return ",".join(self.nodes[i].address(listener) for i in self.nodes_ids)

    @property
    def bootstrap(self) -> str:
        return self.address("PLAINTEXT")

    host = "127.0.0.1"

    @property
    def port(self) -> int:
        """The first node's PLAINTEXT port."""
        return self.nodes[self.nodes_ids[0]].ports["PLAINTEXT"]

    def log_tail(self, n_bytes: int = 4000) -> str:
        return "\n".join(f"=== Kafka node {i} ({self.nodes[i].log_dir})\n{self.nodes[i].log_tail(n_bytes)}"
                         for i in self.nodes_ids)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        nodes = [n for n in getattr(self, "nodes", {}).values()]
        for node in nodes:  # the data goes away: no controlled shutdown (a 3-node one takes ~12 s)
            node.stop(kill=True)
        if self.keep_logs:
            for node in nodes:
                shutil.rmtree(node.data_dir, ignore_errors=True)
            (self.workdir / _OWNER_FILE).unlink(missing_ok=True)   # kept on purpose: no sweep
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _main(argv: list[str] | None = None) -> int:
    """python -m kwire.embedded.kafka: fetch the jars ahead of a run, or (--run) start a
    broker on loopback and keep it until Ctrl-C."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m kwire.embedded.kafka",
        description="Fetch Apache Kafka's broker jars (and Java's client tools) from Maven Central "
                    f"into {cache_root()}, ahead of a test run; with --run, start Apache Kafka on "
                    "loopback (combined KRaft nodes on free ports) and keep it running until Ctrl-C.",
        epilog="Examples: `python -m kwire.embedded.kafka --run` (one node, prints its bootstrap "
               "address); `python -m kwire.embedded.kafka --run --nodes 3 3.9.1`.  From Python: "
               "`with kwire.embedded.kafka.KafkaCluster(1) as kafka: kafka.bootstrap`.  The demo on "
               "Kafka: `kwire demo --broker kafka`.")
    parser.add_argument("versions", nargs="*", metavar="VERSION",
                        help=f"Kafka versions (default: {KAFKA_VERSION} and {KAFKA_3_VERSION}; "
                             f"with --run, the first one given or {KAFKA_VERSION})")
    parser.add_argument("--run", action="store_true", help="start a broker and keep it until Ctrl-C")
    parser.add_argument("--nodes", type=int, default=1, metavar="N",
                        help="with --run: N combined KRaft nodes, replication factor min(3, N) (default 1)")
    args = parser.parse_args(argv)
    if args.run:
        if args.nodes < 1:
            parser.error("--nodes must be at least 1")
        version = args.versions[0] if args.versions else KAFKA_VERSION
        with KafkaCluster(args.nodes, version=version) as kafka:
            print(f"Apache Kafka {version}, {args.nodes} node{'s' if args.nodes > 1 else ''} "
                  f"(data and logs in {kafka.workdir}); bootstrap servers:", flush=True)
            print(kafka.bootstrap, flush=True)
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            try:
                stop.wait()
            except KeyboardInterrupt:
                pass
            print("stopping", flush=True)
        return 0
    for v in args.versions or [KAFKA_VERSION, KAFKA_3_VERSION]:
        t0 = time.monotonic()
        print(f"Apache Kafka {v}: {kafka_jars(v)} ({time.monotonic() - t0:.1f} s)")
    for v in args.versions or [KAFKA_VERSION]:  # Java's clients, for tests/test_java_captures.py
        t0 = time.monotonic()
        print(f"Apache Kafka {v} tools: {kafka_tools_jars(v)} ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
