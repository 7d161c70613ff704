"""Shared fixtures: both codec twins, and the real peers: Apache Kafka (4.3, the reference; 3.9,
the last 3.x; a 3-node cluster), Tansu and librdkafka's mock cluster.

The brokers are started once per test session on free loopback ports and stopped at the end.
Tests that need a topic of their own create it with a unique name (see `unique_topic`).
"""
from __future__ import annotations

import itertools
import os
import uuid

import pytest

from kwire import _pycodec
from kwire.embedded import MockCluster, TansuBroker
from kwire.embedded.kafka import KAFKA_3_VERSION, KAFKA_VERSION

from .kafka_util import kafka_clusters, start_kafka, stop_kafka

try:
    from kwire import _codec as _compiled
except ImportError as exc:  # CI sets KWIRE_REQUIRE_EXTENSION=1 and must fail here, loudly
    if os.environ.get("KWIRE_REQUIRE_EXTENSION"):
        raise
    _compiled = None
    _compiled_error = exc

CODECS = [pytest.param(_pycodec, id="pure")]
if _compiled is not None:
    CODECS.insert(0, pytest.param(_compiled, id="cython"))


@pytest.fixture(params=CODECS)
def codec(request):
    """Each codec twin in turn: the compiled kwire._codec and the pure kwire._pycodec."""
    return request.param


@pytest.fixture(scope="session")
def tansu():
    """A Tansu broker (memory storage) for the whole session."""
    with TansuBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def mock_cluster():
    """librdkafka's 3-broker mock cluster for the whole session."""
    with MockCluster(3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka(request):
    """Apache Kafka 4.3 (the reference peer): one combined KRaft node for the whole session."""
    cluster = start_kafka(request, version=KAFKA_VERSION)
    yield cluster
    stop_kafka(request, cluster)


@pytest.fixture(scope="session")
def kafka39(request):
    """Apache Kafka 3.9, the last 3.x release: one combined KRaft node for the whole session."""
    cluster = start_kafka(request, version=KAFKA_3_VERSION)
    yield cluster
    stop_kafka(request, cluster)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that used Apache Kafka shows where its logs are and their tail."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and kafka_clusters and any("kafka" in n or n in ("peer", "broker") for n in getattr(item, "fixturenames", ())):
        for cluster in kafka_clusters:
            report.sections.append((f"Apache Kafka {cluster.version} ({cluster.workdir})", cluster.log_tail(1500)))


@pytest.fixture(params=["kafka", "tansu", "mock_cluster"])
def broker(request):
    """Each real peer in turn; `.bootstrap` is its bootstrap.servers string."""
    return request.getfixturevalue(request.param)


@pytest.fixture(params=["kafka", "tansu"])
def peer(request):
    """Apache Kafka, then Tansu: the peers that have CreateTopics, groups and committed offsets."""
    return request.getfixturevalue(request.param)


@pytest.fixture(params=["kafka", "kafka39"])
def kafka_version(request):
    """Apache Kafka 4.3, then 3.9."""
    return request.getfixturevalue(request.param)


_counter = itertools.count()


@pytest.fixture
def unique_topic(request):
    """A topic name no other test uses."""
    base = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:60]
    return f"t-{base}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def create_topic():
    """``create_topic(peer, name, partitions=3) -> partition count``.

    Uses CreateTopics where the peer has it (Tansu).  librdkafka's mock cluster has no
    CreateTopics: there a Metadata request with AllowAutoTopicCreation creates the topic, always
    with the mock's default of 4 partitions (replicated on its 3 brokers)."""
    from kwire.admin import Admin

    admins = []

    def create(peer, name: str, partitions: int = 3) -> int:
        admin = Admin({"bootstrap.servers": peer.bootstrap})
        admins.append(admin)
        if 19 in admin.network.broker_api_versions(None):  # CreateTopics
            admin.create_topics([(name, partitions, 1)], timeout=10, wait_for_leaders=True)
        else:
            admin.list_topics(name, allow_auto_topic_creation=True)
            admin.wait_for_topics([name], timeout=10)
        return len(admin.list_topics(name).topics[name].partitions)

    yield create
    for a in admins:
        a.close()


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for the whole run (a session takes ~10 s to start).

    Workers run this interpreter (PYSPARK_PYTHON) and import kwire from this checkout
    (PYTHONPATH), so they see the code under test.  Spark's own Kafka source
    (``format("kafka")``, jars from :mod:`kwire.embedded.spark_kafka`) is on the class path.
    """
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    from pyspark.sql import SparkSession

    from kwire.embedded.spark_kafka import spark_jars_conf

    session = (SparkSession.builder.master("local[2]").appName("kwire-tests")
               .config("spark.jars", spark_jars_conf())  # Spark's own Kafka source, beside kwire's
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# A Spark standalone cluster (master + 2 workers) for the session: tests/spark_cluster.py.
from .spark_cluster import spark_cluster  # noqa: E402,F401
