"""kwire's Spark readers on a Spark standalone cluster (tests/spark_cluster.py: a master and two
1-core workers, so tasks run in two executor JVMs apart from the driver) against Apache Kafka.

Drivers run in processes of their own (tests/spark_cluster_driver.py): a long-lived one serves
the tests of :class:`TestOneApplication`; the tests that SIGKILL a driver start theirs, one
application at a time (an application takes both workers' cores).  Records are produced with
confluent-kafka, so what Spark reads was not written by kwire; committed offsets are read back
with kwire's OffsetFetch (``OffsetReader.committed``) from the test process.
"""
from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kwire.spark as ks
from kwire.admin import Admin
from kwire.embedded import die_with_parent
from kwire.spark.offset_reader import OffsetReader

from .spark_cluster import driver_env

pytestmark = [pytest.mark.spark]

DRIVER = Path(__file__).resolve().parent / "spark_cluster_driver.py"
LOCAL_CONF = {"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
              "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
              "spark.sql.shuffle.partitions": "4"}


# --- helpers ------------------------------------------------------------------------------------

class DriverError(AssertionError):
    pass


class Driver:
    """``python tests/spark_cluster_driver.py ARGS`` in a session of its own (so SIGKILL reaches
    the Python driver and its JVM at once); its stderr (Spark's log) goes to ``log``."""

    def __init__(self, args: list[str], conf: dict, log: Path, executors: int = 0, cluster=None):
        self.log, self.cluster = log, cluster
        env = {**driver_env(), "KWIRE_SPARK_CONF": json.dumps(conf), "KWIRE_SPARK_EXECUTORS": str(executors)}
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, str(DRIVER), *args], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, env=env, text=True,
                                         preexec_fn=die_with_parent)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.pid = self.expect("ready", 300)

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(json.loads(line))
        self._lines.put(None)

    def _trouble(self, what: str) -> DriverError:
        tail = self.log.read_bytes()[-6000:].decode("utf-8", "replace") if self.log.exists() else ""
        cluster = f"\n--- cluster\n{self.cluster.log_tail()}" if self.cluster is not None else ""
        return DriverError(f"driver: {what}\n--- driver log ({self.log})\n{tail}{cluster}")

    def expect(self, key: str, timeout_s: float):
        try:
            msg = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise self._trouble(f"no answer within {timeout_s} s") from None
        if msg is None:
            raise self._trouble(f"exited with code {self.proc.wait()}")
        if key not in msg:
            raise self._trouble(f"{msg.get('error')}\n{msg.get('traceback', '')}")
        return msg[key]

    def call(self, job: str, timeout_s: float = 300, **kwargs):
        self.proc.stdin.write(json.dumps({"job": job, "kwargs": kwargs}) + "\n")
        self.proc.stdin.flush()
        return self.expect("result", timeout_s)

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the driver's Python process and its JVM together."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def close(self, timeout_s: float = 60) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise self._trouble(f"did not stop within {timeout_s} s") from None


def run_job(job: str, conf: dict, log: Path, executors: int, cluster=None, timeout_s: float = 300, **kwargs):
    """One job in a driver process of its own; its result."""
    d = Driver([job, json.dumps(kwargs)], conf, log, executors, cluster)
    try:
        return d.expect("result", timeout_s)
    finally:
        d.close()


def create(kafka, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(10)
    with Admin({"bootstrap.servers": kafka.bootstrap}) as a:
        a.wait_for_topics([topic], timeout=10)


def produce(kafka, topic: str, records) -> list[tuple]:
    """``records``: (partition, key, value); returns (partition, offset, key hex, value hex) of
    each, as the broker acknowledged them."""
    acked = []

    def report(err, msg):
        assert err is None, err
        acked.append((msg.partition(), msg.offset(), hx(msg.key()), hx(msg.value())))

    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 2})
    for partition, key, value in records:
        p.produce(topic, key=key, value=value, partition=partition, on_delivery=report)
    assert p.flush(10) == 0
    assert len(acked) == len(records)
    return sorted(acked)


def fill(kafka, topic: str, partitions: int, per_partition: int, start: int = 0) -> list[tuple]:
    return produce(kafka, topic, [(p, b"k%d" % i, b"%d-%d" % (p, i))
                                  for i in range(start, start + per_partition) for p in range(partitions)])


def hx(b):
    return None if b is None else bytes(b).hex()


def committed(kafka, topic: str, group: str, partitions: int) -> dict[int, int | None]:
    """The group's committed offsets, by OffsetFetch from this process."""
    with OffsetReader(ks.parse_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic})) as r:
        got = r.committed(group, [(topic, p) for p in range(partitions)])
    return {p: o for (_, p), o in got.items()}


def commit(kafka, topic: str, group: str, offsets: dict[int, int]) -> None:
    """What an earlier job of the group committed."""
    with OffsetReader(ks.parse_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic})) as r:
        r.commit(group, {(topic, p): o for p, o in offsets.items()})


def by_partition(offsets: dict) -> dict[int, int]:
    return {int(p): o for p, o in offsets.items()}


def wait_for(predicate, timeout_s: float, what: str, driver: Driver | None = None):
    deadline = time.monotonic() + timeout_s
    while True:
        got = predicate()
        if got:
            return got
        if driver is not None and not driver.running():
            raise driver._trouble(f"exited with code {driver.proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise (driver._trouble if driver else AssertionError)(f"timed out waiting for {what}")
        time.sleep(0.05)


# --- one application, two executors --------------------------------------------------------------

@pytest.fixture(scope="class")
def app(spark_cluster, tmp_path_factory):
    """A driver process on the cluster serving the jobs of a test class; stopped after it (an
    application holds both workers' cores)."""
    spark_cluster.wait_idle()  # an application of an earlier test is gone
    d = Driver(["serve"], spark_cluster.driver_conf(), tmp_path_factory.mktemp("driver") / "driver.log",
               executors=2, cluster=spark_cluster)
    yield d
    assert d.close() == 0
    spark_cluster.wait_idle()


class TestOneApplication:
    """Jobs of one long-lived driver process on the cluster."""

    def test_tasks_run_in_the_workers_executors(self, app):
        got = app.call("executors")
        assert got["registered"] == ["0", "1"]
        assert got["ran_on"] == ["0", "1"]  # four tasks, two at a time: one core per executor
        assert got["driver_pid"] != os.getpid()

    @pytest.mark.parametrize("way", ["read_kafka", "read_kafka:mapInArrow", "read_kafka:rows", "format",
                                     "arrow_rdd", "rdd"])
    def test_exactly_the_produced_records(self, app, kafka, unique_topic, way):
        create(kafka, unique_topic, 3)
        expected = produce(kafka, unique_topic, [
            (i % 3, None if i % 10 == 0 else b"key-%d" % i, None if i % 17 == 5 else b"value-%d" % i)
            for i in range(90)])
        got = app.call("records", bootstrap=kafka.bootstrap, topic=unique_topic, way=way,
                       ranges=[(unique_topic, p, 0, 30) for p in range(3)])
        assert [tuple(r) for r in got["records"]] == expected
        assert got["executors"] == ["0", "1"]  # three tasks on two 1-core executors

    def test_group_round_trip(self, app, kafka, unique_topic):
        create(kafka, unique_topic, 2)
        first = fill(kafka, unique_topic, 2, 10)
        group = unique_topic + "-g"
        kw = dict(bootstrap=kafka.bootstrap, topic=unique_topic, group=group, partitions=2)
        got = app.call("group_read", **kw)
        assert [tuple(r) for r in got["records"]] == [(p, o, v) for p, o, _, v in first]
        assert by_partition(got["committed"]) == {0: 10, 1: 10} == by_partition(got["group"])

        second = fill(kafka, unique_topic, 2, 5, start=10)
        got = app.call("group_read", **kw)
        assert [tuple(r) for r in got["records"]] == [(p, o, v) for p, o, _, v in second]  # from 10 on
        assert by_partition(got["committed"]) == {0: 15, 1: 15}
        assert committed(kafka, unique_topic, group, 2) == {0: 15, 1: 15}

    @pytest.mark.parametrize("where", ["read", "later"])
    def test_failed_jobs_commit_nothing(self, app, kafka, unique_topic, where):
        """The job fails at offset 7 in the read task (a UDF in the reading stage) or in a later
        stage (after a shuffle, once every read task succeeded): the group's offsets stay
        where an earlier job left them (2); a later full job commits the ends."""
        create(kafka, unique_topic, 2)
        records = fill(kafka, unique_topic, 2, 10)
        group = unique_topic + "-g"
        commit(kafka, unique_topic, group, {0: 2, 1: 2})
        kw = dict(bootstrap=kafka.bootstrap, topic=unique_topic, group=group, partitions=2)
        got = app.call("failing_read", where=where, **kw)
        assert got["error"] is not None and "boom at offset 7" in got["error"]
        assert got["actions_seen"] == 1 and not got["done"]
        assert re.match(r"the last action \(\w+\) failed: nothing committed; .*boom at offset 7", got["reason"],
                        re.S), got["reason"]
        assert by_partition(got["group"]) == {0: 2, 1: 2}
        assert committed(kafka, unique_topic, group, 2) == {0: 2, 1: 2}

        got = app.call("group_read", **kw)
        assert [tuple(r) for r in got["records"]] == [(p, o, v) for p, o, _, v in records if o >= 2]
        assert committed(kafka, unique_topic, group, 2) == {0: 10, 1: 10}


# --- SIGKILLed drivers ----------------------------------------------------------------------------

@pytest.mark.parametrize("master", ["cluster", "local[2]"])
def test_driver_killed_mid_job_commits_nothing_and_the_next_job_reads_the_rest(request, kafka, unique_topic,
                                                                                tmp_path, master):
    """A driver reading with startingOffsets=group + commitToGroup is SIGKILLed (Python and JVM)
    while its tasks run: the group's offsets stay where the previous job left them, and the
    next job reads exactly the records after them."""
    cluster = request.getfixturevalue("spark_cluster") if master == "cluster" else None
    conf, executors = (cluster.driver_conf(), 2) if cluster else (LOCAL_CONF, 0)
    if cluster:
        cluster.wait_idle()
    create(kafka, unique_topic, 2)
    records = fill(kafka, unique_topic, 2, 20)
    group = unique_topic + "-g"
    commit(kafka, unique_topic, group, {0: 10, 1: 10})  # an earlier job read offsets 0-9
    kw = dict(bootstrap=kafka.bootstrap, topic=unique_topic, group=group, partitions=2)
    markers = tmp_path / "markers"
    markers.mkdir()

    driver = Driver(["slow_group_read", json.dumps({**kw, "marker_dir": str(markers), "sleep_s": 600})],
                    conf, tmp_path / "killed.log", executors, cluster)
    wait_for(lambda: any(markers.iterdir()), 300, "a task to start", driver)
    driver.kill()
    if cluster:
        cluster.wait_idle()  # the master saw the driver go and took its executors away
    assert committed(kafka, unique_topic, group, 2) == {0: 10, 1: 10}

    got = run_job("group_read", conf, tmp_path / "resumed.log", executors, cluster, **kw)
    assert [tuple(r) for r in got["records"]] == [(p, o, v) for p, o, _, v in records if o >= 10]
    assert committed(kafka, unique_topic, group, 2) == {0: 20, 1: 20}


class SlowProducer:
    """Produces to partitions 0 and 1 in turn, ~``rate`` records a second, until stopped;
    ``acked`` holds (partition, offset, value hex) of every record the broker acknowledged."""

    def __init__(self, kafka, topic: str, rate: float):
        self.acked: list[tuple] = []
        self.producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
        self.topic, self.rate = topic, rate
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _ack(self, err, msg):
        assert err is None, err
        self.acked.append((msg.partition(), msg.offset(), hx(msg.value())))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.producer.produce(self.topic, value=b"s-%d" % i, partition=i % 2, on_delivery=self._ack)
            self.producer.poll(0)
            i += 1
            time.sleep(1 / self.rate)
        assert self.producer.flush(10) == 0
        self.produced = i

    def stop(self) -> list[tuple]:
        self._stop.set()
        self.thread.join(30)
        assert len(self.acked) == self.produced
        return sorted(self.acked)


def read_sink(sink: Path) -> list[tuple]:
    return [tuple(r) for f in sorted(sink.glob("batch-*.json")) for r in json.loads(f.read_text())]


def assert_committed_were_processed(kafka, topic: str, group: str, sink: Path) -> None:
    """Every record below the group's committed offset of its partition is in the sink."""
    held = {(p, o) for p, o, _ in read_sink(sink)}
    for p, o in committed(kafka, topic, group, 2).items():
        assert o is None or all((p, x) in held for x in range(o)), (p, o)


def test_streaming_driver_killed_twice_sink_holds_every_record_once(kafka, spark_cluster, unique_topic, tmp_path):
    """A kwire stream into a foreachBatch sink (a file per batch id, replaced when the batch runs
    again) on the cluster, its driver SIGKILLed twice while a producer keeps producing -- once
    after a batch's file was written but before Spark's commit log says so, once before the
    file -- and restarted from the checkpoint each time; then run to the end
    (Trigger.AvailableNow).  The sink holds every produced record exactly once, and the group's
    offsets (commitToGroup) never pass a record the sink does not hold."""
    spark_cluster.wait_idle()
    create(kafka, unique_topic, 2)
    group = unique_topic + "-g"
    sink, markers, checkpoint = tmp_path / "sink", tmp_path / "markers", tmp_path / "checkpoint"
    sink.mkdir()
    markers.mkdir()
    conf = spark_cluster.driver_conf()
    kw = dict(bootstrap=kafka.bootstrap, topic=unique_topic, group=group, checkpoint=str(checkpoint),
              sink=str(sink), markers=str(markers), per_trigger=300)
    producer = SlowProducer(kafka, unique_topic, rate=20)
    written: dict[str, str] = {}  # the sink's files as they were when a driver was killed
    try:
        for run, pause in enumerate(["after-write", "before-write"]):
            # pause two batches after what the sink holds: the restarted stream first ran
            # the killed batch again (and maybe more)
            pause_at = len(list(sink.glob("batch-*.json"))) + 2
            driver = Driver(["stream", json.dumps({**kw, "trigger": "continuous", "pause_at": pause_at,
                                                   "pause": pause})],
                            conf, tmp_path / f"run-{run}.log", 2, spark_cluster)
            marker = wait_for(lambda pause=pause: [m for m in markers.iterdir() if m.name.startswith(pause)], 300,
                              f"micro-batch {pause_at} to pause {pause}", driver)
            driver.kill()
            spark_cluster.wait_idle()
            for m in marker:
                m.unlink()
            assert_committed_were_processed(kafka, unique_topic, group, sink)
            written.update((f.name, f.read_text()) for f in sink.glob("batch-*.json"))
    finally:
        produced = producer.stop()
    assert len(produced) > 100

    got = run_job("stream", conf, tmp_path / "run-last.log", 2, spark_cluster, trigger="availableNow", **kw)
    assert got == {"exception": None}
    # a batch run again after a kill (its file written, Spark's commit log not) read the same records
    assert {name: (sink / name).read_text() for name in written} == written
    rows = read_sink(sink)
    assert len(rows) == len(set(rows))  # no record twice
    assert sorted(rows) == produced
    ends = {p: 1 + max(o for q, o, _ in produced if q == p) for p in (0, 1)}
    assert committed(kafka, unique_topic, group, 2) == ends


# --- found here -----------------------------------------------------------------------------------

def _loading_commits(reader, times: int) -> list:
    """Make ``reader``'s first ``times`` OffsetCommits (sent through its Admin) come back with
    COORDINATOR_LOAD_IN_PROGRESS (14) on every partition; the rest go to the broker.  Returns
    the list the intercepted request bodies are appended to."""
    answered: list = []
    admin = reader.admin
    call = admin._call

    def loading(node, api, body, *args, **kw):
        if api != "OffsetCommit" or len(answered) >= times:
            return call(node, api, body, *args, **kw)
        sent = body(9) if callable(body) else body
        answered.append(sent)
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": 14}
                                               for p in t["partitions"]]} for t in sent["topics"]]}

    admin._call = loading
    return answered


def test_a_commit_is_retried_when_every_partition_finds_the_coordinator_loading(kafka, unique_topic):
    """The first commit of the cluster test above on a fresh Apache Kafka got
    COORDINATOR_LOAD_IN_PROGRESS for both partitions of its topic, and kwire gave up with a
    CommitFailedError: only a lone failed partition was retried.  Here the first OffsetCommit
    is answered so (for each of two partitions), the rest go to the broker."""
    create(kafka, unique_topic, 2)
    group = unique_topic + "-g"
    with OffsetReader(ks.parse_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": unique_topic})) as r:
        answered = _loading_commits(r, 1)
        r.commit(group, {(unique_topic, 0): 5, (unique_topic, 1): 7})
    assert len(answered) == 1 and len(answered[0]["topics"][0]["partitions"]) == 2
    assert committed(kafka, unique_topic, group, 2) == {0: 5, 1: 7}


def test_a_loading_coordinator_is_waited_for_beyond_the_offset_retries(kafka, unique_topic):
    """A coordinator still loading its offsets (a fresh or restarted broker) answers
    COORDINATOR_LOAD_IN_PROGRESS for seconds; fetchOffset.numRetries (3, Spark's default) with
    Spark's 10 ms interval would give up within a second.  kwire waits for a coordinator until
    request.timeout.ms: here the first 8 OffsetCommits are answered so, then the broker's."""
    create(kafka, unique_topic, 1)
    group = unique_topic + "-g"
    with OffsetReader(ks.parse_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": unique_topic})) as r:
        answered = _loading_commits(r, 8)
        r.commit(group, {(unique_topic, 0): 3})
    assert len(answered) == 8
    assert committed(kafka, unique_topic, group, 1) == {0: 3}
