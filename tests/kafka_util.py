"""Apache Kafka clusters for tests: started with the test run's group timings, their logs kept
(and shown by conftest's report hook) when a test of the run failed.

    cluster = start_kafka(request, 3, listeners=("SSL",), properties={...})
    ...
    stop_kafka(request, cluster)          # in the fixture's teardown

Every cluster started here is listed in ``kafka_clusters`` while it runs.
"""
from __future__ import annotations

from kwire.embedded.kafka import KafkaCluster

kafka_clusters: list[KafkaCluster] = []

# Group timings for a test run: Kafka refuses session timeouts under
# group.min.session.timeout.ms (6 s by default) with INVALID_SESSION_TIMEOUT, and the KIP-848
# defaults (45 s session, 5 s heartbeat) would make every membership change take seconds.
# No retention by time: tests stamp records in 2023 (tests/confluent_programs.py and others),
# past the default 7 days, and the broker's sweep (every 5 minutes) deleted them between a
# test's produce and its consume.  Topics that test retention set retention.ms themselves.
KAFKA_TEST_PROPERTIES = {
    "log.retention.ms": "-1",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "500",
}


def start_kafka(request, num_nodes: int = 1, **kw) -> KafkaCluster:
    """A KafkaCluster whose logs stay on disk when a test of the run failed (see the report hook)."""
    properties = {**KAFKA_TEST_PROPERTIES, **kw.pop("properties", {})}
    cluster = KafkaCluster(num_nodes, keep_logs=True, properties=properties, **kw)
    kafka_clusters.append(cluster)
    return cluster


def stop_kafka(request, cluster: KafkaCluster) -> None:
    cluster.keep_logs = request.session.testsfailed > 0
    cluster.close()
    if cluster.keep_logs:
        print(f"\nkwire: Apache Kafka logs of this run kept in {cluster.workdir}")
    kafka_clusters.remove(cluster)
