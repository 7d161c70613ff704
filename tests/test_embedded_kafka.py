"""The Apache Kafka fixture itself (kwire.embedded.kafka): what the rest of the suite relies on.

* a download that cannot happen is an EmbeddedBrokerError naming what is missing, never a skip;
* a broker never outlives the process that started it, even one killed without teardown;
* a stopped and restarted node keeps its data (log.dirs survive ``stop``).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kwire.admin import Admin
from kwire.embedded import EmbeddedBrokerError
from kwire.embedded import kafka as ek

ROOT = Path(__file__).resolve().parent.parent


def test_missing_maven_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KWIRE_KAFKA_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn anywhere
    with pytest.raises(EmbeddedBrokerError, match="mvn.*not on PATH"):
        ek.kafka_jars("4.3.1")


def test_a_version_maven_central_does_not_serve_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KWIRE_KAFKA_CACHE", str(tmp_path / "cache"))
    with pytest.raises(EmbeddedBrokerError, match=r"downloading Apache Kafka 0\.0\.1 from Maven Central failed"):
        ek.kafka_jars("0.0.1")
    assert not (tmp_path / "cache" / "0.0.1" / "lib" / ".complete").exists()


def test_cluster_ids_never_look_like_options():
    cluster = ek.KafkaCluster.__new__(ek.KafkaCluster)
    assert all(not cluster._random_uuid().startswith("-") for _ in range(2000))


@pytest.mark.parametrize("broker", ["kafka", "tansu"])
def test_a_killed_parent_takes_its_broker_along(tmp_path, broker):
    """A test run or demo killed without its teardown (os._exit here) leaves no broker behind:
    Apache Kafka's JVM and Tansu both die with the process that started them."""
    start = ("from kwire.embedded.kafka import KafkaCluster\nk = KafkaCluster(1)\npid = k.nodes[1].proc.pid\n"
             "work = str(k.workdir)\n"
             if broker == "kafka" else
             "from kwire.embedded import TansuBroker\nk = TansuBroker()\npid = k.proc.pid\nwork = ''\n")
    script = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        + start +
        "print(work, pid, flush=True)\n"
        "os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    *work, pid_text = out.stdout.split()
    pid = int(pid_text)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail(f"the {broker} broker {pid} outlived the process that started it")
    if broker == "kafka":
        # its work directory stays until the next cluster on the machine sweeps it away
        workdir = Path(work[0])
        assert (workdir / "owner.pid").exists()
        assert workdir in ek.remove_orphaned_workdirs(str(workdir.parent))
        assert not workdir.exists()


def test_only_the_work_directories_of_dead_owners_are_swept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    dirs = {}
    for name, owner in (("dead", str(dead.pid)), ("alive", str(os.getpid())), ("kept", None),
                        ("garbled", "not a pid")):
        d = tmp_path / f"kwire-kafka-4.3.1-{name}"
        (d / "node-1").mkdir(parents=True)
        if owner is not None:
            (d / "owner.pid").write_text(owner)
        dirs[name] = d
    (tmp_path / "something-else").mkdir()
    (tmp_path / "something-else" / "owner.pid").write_text(str(dead.pid))
    assert ek.remove_orphaned_workdirs(str(tmp_path)) == [dirs["dead"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kwire-kafka-4.3.1-alive", "kwire-kafka-4.3.1-garbled", "kwire-kafka-4.3.1-kept", "something-else"]


def test_a_restarted_node_keeps_its_data(request):
    from .kafka_util import start_kafka, stop_kafka

    cluster = start_kafka(request, 1)
    try:
        with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
            admin.create_topics([("kept", 2, 1)], timeout=20, wait_for_leaders=True)
        cluster.stop_node(1)
        assert not cluster.nodes[1].running
        cluster.start_node(1)
        with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
            snap = admin.wait_for_topics(["kept"], timeout=30)
            assert sorted(snap.topics["kept"].partitions) == [0, 1]
        assert cluster.startup_s[1] > 0
    finally:
        stop_kafka(request, cluster)


def test_tools_jars_of_a_version_maven_central_does_not_serve_are_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KWIRE_KAFKA_CACHE", str(tmp_path / "cache"))
    with pytest.raises(EmbeddedBrokerError, match=r"downloading Apache Kafka 0\.0\.1's tools from Maven Central failed"):
        ek.kafka_tools_jars("0.0.1")
    assert not (tmp_path / "cache" / "0.0.1" / "tools" / ".complete").exists()


def test_run_serves_a_broker_until_terminated(tmp_path):
    """`python -m kwire.embedded.kafka --run` prints a bootstrap address a client can use, and
    SIGTERM stops the broker and removes its data directory."""
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "kwire.embedded.kafka", "--run"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        header = proc.stdout.readline()
        bootstrap = proc.stdout.readline().strip()
        assert header.startswith(f"Apache Kafka {ek.KAFKA_VERSION}, 1 node (data and logs in "), \
            (header, proc.stderr.read() if proc.poll() is not None else "")
        workdir = Path(header.split("data and logs in ", 1)[1].split(")", 1)[0])
        assert workdir.is_dir() and bootstrap.startswith("127.0.0.1:")
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            assert list(admin.list_topics(timeout=30).brokers) == [1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert proc.stdout.read().strip() == "stopping"
        assert not workdir.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
