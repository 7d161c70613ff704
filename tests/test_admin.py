"""kwire.Admin against the real peers."""
import pytest

from kwire.admin import Admin, NewTopic
from kwire.errors import (
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)

from .fake_broker import FakeBroker, api_versions_ok, frame


def test_create_topics_and_typed_errors(peer, unique_topic):
    with Admin({"bootstrap.servers": peer.bootstrap}) as admin:
        assert admin.create_topics([(unique_topic, 4, 1)], timeout=10, wait_for_leaders=True) == {unique_topic: None}
        with pytest.raises(TopicAlreadyExistsError) as info:
            admin.create_topics([(unique_topic, 4, 1)], timeout=10)
        assert info.value.topic == unique_topic and info.value.code == 36
        assert admin.create_topics([NewTopic(unique_topic, 4, 1)], ignore_existing=True) == {unique_topic: None}
        res = admin.create_topics([unique_topic], raise_on_error=False)
        assert isinstance(res[unique_topic], TopicAlreadyExistsError)


def test_list_topics_snapshot(broker, create_topic, unique_topic):
    n = create_topic(broker, unique_topic, 3)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        snap = admin.list_topics(timeout=10)
        assert unique_topic in snap.topics and snap.brokers and snap.cluster_id
        t = snap.topics[unique_topic]
        assert t.error_code == 0 and sorted(t.partitions) == list(range(n))
        for p in t.partitions.values():
            assert p.leader in snap.brokers and p.leader in p.replicas and p.isr
        one = admin.list_topics(unique_topic)
        assert list(one.topics) == [unique_topic]
        missing = admin.list_topics("does-not-exist-" + unique_topic)
        assert missing.topics["does-not-exist-" + unique_topic].error_code == UnknownTopicOrPartitionError.code


def test_create_topics_unsupported_on_mock(mock_cluster, unique_topic):
    # librdkafka's mock cluster has no CreateTopics (its topics are created on first use).
    with Admin({"bootstrap.servers": mock_cluster.bootstrap}) as admin:
        with pytest.raises(UnsupportedVersionError):
            admin.create_topics([(unique_topic, 1, 1)])


def test_delete_records_against_fake_broker():
    # Tansu 0.6 lists DeleteRecords in ApiVersions, but its memory storage panics ("not yet
    # implemented") and drops the connection; the mock cluster has no DeleteRecords.  So: a fake.
    holder = {}

    def handler(key, version, cid, body):
        if key == 18:
            return api_versions_ok(version, cid, [
                {"api_key": 18, "min_version": 0, "max_version": 3},
                {"api_key": 3, "min_version": 0, "max_version": 12},
                {"api_key": 21, "min_version": 0, "max_version": 2}])
        if key == 3:
            return frame("Metadata", version, cid, {
                "brokers": [{"node_id": 7, "host": "127.0.0.1", "port": holder["fb"].port}],
                "controller_id": 7, "cluster_id": "fake",
                "topics": [{"error_code": 0, "name": "t", "partitions": [
                    {"error_code": 0, "partition_index": p, "leader_id": 7, "leader_epoch": 0,
                     "replica_nodes": [7], "isr_nodes": [7]} for p in (0, 1)]}]})
        if key == 21:
            holder["body"] = body
            return frame("DeleteRecords", version, cid, {"topics": [{"name": "t", "partitions": [
                {"partition_index": p["partition_index"], "low_watermark": p["offset"], "error_code": 0}
                for p in body["topics"][0]["partitions"]]}]})
        return None

    with FakeBroker(handler) as fb:
        holder["fb"] = fb
        with Admin({"bootstrap.servers": fb.bootstrap}) as admin:
            assert admin.delete_records({("t", 0): 4, ("t", 1): 9}) == {("t", 0): 4, ("t", 1): 9}
    assert sorted(p["partition_index"] for p in holder["body"]["topics"][0]["partitions"]) == [0, 1]
