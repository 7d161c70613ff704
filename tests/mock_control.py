"""librdkafka's mock cluster with its C control API, reached through ctypes in a child process.

confluent-kafka does not wrap ``rd_kafka_mock_*``, but the librdkafka it bundles exports them,
so a child process loads that library with ctypes, creates an ``rd_kafka_t`` and a mock cluster
on it, prints the bootstrap servers and then obeys commands on stdin:

    coord <group> <broker_id>              rd_kafka_mock_coordinator_set(cluster, "group", ...)
    txncoord <transactional_id> <broker>   rd_kafka_mock_coordinator_set(cluster, "transaction", ...)
    errors <api_key> <error_code> <count>  rd_kafka_mock_push_request_errors: the next <count>
                                            requests of that API fail with that code

    with ControlledMockCluster(3) as mc:
        mc.set_coordinator("my-group", 2)
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

from kwire.embedded import EmbeddedBrokerError, wait_for_port

_CHILD = textwrap.dedent("""
    import ctypes, glob, os, sys
    import confluent_kafka
    libdir = os.path.join(os.path.dirname(confluent_kafka.__file__), "..", "confluent_kafka.libs")
    found = glob.glob(os.path.join(libdir, "librdkafka*.so*"))
    lib = ctypes.CDLL(found[0]) if found else ctypes.CDLL(confluent_kafka.cimpl.__file__)
    vp, cp, i32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32
    lib.rd_kafka_conf_new.restype = vp
    lib.rd_kafka_conf_set.argtypes = [vp, cp, cp, cp, ctypes.c_size_t]
    lib.rd_kafka_new.restype = vp
    lib.rd_kafka_new.argtypes = [ctypes.c_int, vp, cp, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = vp
    lib.rd_kafka_mock_cluster_new.argtypes = [vp, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = cp
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [vp]
    lib.rd_kafka_mock_coordinator_set.argtypes = [vp, cp, cp, i32]
    lib.rd_kafka_mock_coordinator_set.restype = ctypes.c_int
    lib.rd_kafka_mock_push_request_errors.restype = None
    conf = lib.rd_kafka_conf_new()
    err = ctypes.create_string_buffer(512)
    lib.rd_kafka_conf_set(conf, b"log_level", b"0", err, 512)
    rk = lib.rd_kafka_new(0, conf, err, 512)
    mc = lib.rd_kafka_mock_cluster_new(rk, int(sys.argv[1]))
    print("BOOTSTRAP " + lib.rd_kafka_mock_cluster_bootstraps(mc).decode(), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "coord":
            rc = lib.rd_kafka_mock_coordinator_set(mc, b"group", words[1].encode(), int(words[2]))
        elif words[0] == "txncoord":
            rc = lib.rd_kafka_mock_coordinator_set(mc, b"transaction", words[1].encode(), int(words[2]))
        elif words[0] == "errors":
            key, code, count = (int(w) for w in words[1:4])
            args = [ctypes.c_int(code)] * count
            lib.rd_kafka_mock_push_request_errors(vp(mc), ctypes.c_int16(key), ctypes.c_size_t(count), *args)
            rc = 0
        else:
            rc = -1
        print("OK %d" % rc, flush=True)
""")


class ControlledMockCluster:
    def __init__(self, num_brokers: int = 3, start_timeout_s: float = 20.0):
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(num_brokers)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        line = self.proc.stdout.readline()
        if not line.startswith("BOOTSTRAP "):
            self.close()
            raise EmbeddedBrokerError("the controlled mock cluster did not start")
        self.bootstrap = line.split(None, 1)[1].strip()
        for hostport in self.bootstrap.split(","):
            host, port = hostport.rsplit(":", 1)
            wait_for_port(host, int(port), start_timeout_s, self.proc)

    def _command(self, text: str) -> int:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        if not answer or answer[0] != "OK":
            raise EmbeddedBrokerError(f"mock cluster command {text!r} failed: {answer}")
        return int(answer[1])

    def set_coordinator(self, group: str, broker_id: int) -> None:
        rc = self._command(f"coord {group} {broker_id}")
        if rc != 0:
            raise EmbeddedBrokerError(f"rd_kafka_mock_coordinator_set returned {rc}")

    def set_transaction_coordinator(self, transactional_id: str, broker_id: int) -> None:
        rc = self._command(f"txncoord {transactional_id} {broker_id}")
        if rc != 0:
            raise EmbeddedBrokerError(f"rd_kafka_mock_coordinator_set returned {rc}")

    def push_request_errors(self, api_key: int, error_code: int, count: int = 1) -> None:
        self._command(f"errors {api_key} {error_code} {count}")

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
