"""kwire's Spark readers against Apache Kafka, found while building a Spark standalone cluster
for the tests.
"""
from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

import kwire.spark as ks
from kwire.admin import Admin
from kwire.spark.offset_reader import OffsetReader


def create(kafka, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(10)
    with Admin({"bootstrap.servers": kafka.bootstrap}) as a:
        a.wait_for_topics([topic], timeout=10)


def committed(kafka, topic: str, group: str, partitions: int) -> dict[int, int | None]:
    """The group's committed offsets, by OffsetFetch from this process."""
    with OffsetReader(ks.parse_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic})) as r:
        got = r.committed(group, [(topic, p) for p in range(partitions)])
    return {p: o for (_, p), o in got.items()}


def test_a_commit_is_retried_when_every_partition_finds_the_coordinator_loading(kafka, unique_topic):
    """The first commit of a test on a fresh Apache Kafka got
    COORDINATOR_LOAD_IN_PROGRESS for both partitions of its topic, and kwire gave up with a
    CommitFailedError: only a lone failed partition was retried.  Here the first OffsetCommit
    is answered so (for each of two partitions), the rest go to the broker."""
    create(kafka, unique_topic, 2)
    group = unique_topic + "-g"
    answered = []
    with OffsetReader(ks.parse_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": unique_topic})) as r:
        request = r.client.request

        def loading_once(node, api, body, *args, **kw):
            if api != "OffsetCommit" or answered:
                return request(node, api, body, *args, **kw)
            sent = body(9) if callable(body) else body
            answered.append(sent)
            return {"throttle_time_ms": 0, "topics": [
                {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": 14}
                                                   for p in t["partitions"]]} for t in sent["topics"]]}

        r.client.request = loading_once
        r.commit(group, {(unique_topic, 0): 5, (unique_topic, 1): 7})
    assert len(answered) == 1 and len(answered[0]["topics"][0]["partitions"]) == 2
    assert committed(kafka, unique_topic, group, 2) == {0: 5, 1: 7}
