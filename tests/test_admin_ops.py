"""kwire.Admin's topic, config, consumer-group, offset and cluster calls on Apache Kafka: each
checked by what the broker shows afterwards (metadata, a consumer's view, a second call)."""
from __future__ import annotations

import time

import pytest

from kwire.admin import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    OP_DELETE,
    OP_SET,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    Admin,
)
from kwire.consumer import Consumer, OffsetAndMetadata
from kwire.errors import (
    GroupIdNotFoundError,
    InvalidPartitionsError,
    KwireError,
    NonEmptyGroupError,
    UnknownTopicOrPartitionError,
)
from kwire.producer import Producer


@pytest.fixture
def admin(kafka):
    with Admin({"bootstrap.servers": kafka.bootstrap}) as a:
        yield a


def _produce(bootstrap, topic, counts, ts_ms=None):
    with Producer({"bootstrap.servers": bootstrap}) as p:
        for part, n in counts.items():
            for i in range(n):
                p.produce(topic, b"v%d" % i, partition=part,
                          timestamp=None if ts_ms is None else ts_ms + i)
        assert p.flush(30) == 0


def _consume_all(bootstrap, topic, group, n, *, close=True):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got = 0
    end = time.monotonic() + 30
    while got < n and time.monotonic() < end:
        got += len(c.consume(100, 0.2))
    assert got == n
    c.commit(asynchronous=False)
    if close:
        c.close()
    return c


def test_delete_topics_and_create_partitions(admin, unique_topic):
    admin.create_topics([(unique_topic, 2, 1)], wait_for_leaders=True)
    assert admin.create_partitions({unique_topic: 5}) == {unique_topic: None}
    end = time.monotonic() + 30
    while len(admin.list_topics(unique_topic).topics[unique_topic].partitions) != 5:
        assert time.monotonic() < end
        time.sleep(0.1)
    with pytest.raises(InvalidPartitionsError) as info:
        admin.create_partitions({unique_topic: 3})  # fewer than it has
    assert info.value.topic == unique_topic
    res = admin.create_partitions({unique_topic: 9}, validate_only=True)
    assert res == {unique_topic: None}
    assert len(admin.list_topics(unique_topic).topics[unique_topic].partitions) == 5
    missing = unique_topic + "-missing"
    res = admin.delete_topics([unique_topic, missing], raise_on_error=False)
    assert res[unique_topic] is None and isinstance(res[missing], UnknownTopicOrPartitionError)
    end = time.monotonic() + 30
    while admin.list_topics(unique_topic).topics[unique_topic].error_code != 3:
        assert time.monotonic() < end
        time.sleep(0.1)


def _configs_when(admin, key, ok, timeout_s=15.0):
    """The resource's configs once ``ok(configs)`` holds: a change reaches the broker through
    the KRaft metadata log a moment after the controller accepted it."""
    end = time.monotonic() + timeout_s
    while True:
        cfg = admin.describe_configs([key])[key]
        if ok(cfg) or time.monotonic() >= end:
            return cfg
        time.sleep(0.05)


def test_describe_and_incrementally_alter_configs(admin, unique_topic, kafka):
    admin.create_topics([(unique_topic, 1, 1)], wait_for_leaders=True)
    # (segment.ms: a setting the test brokers leave at Kafka's default; they set retention.ms)
    res = admin.describe_configs([(RESOURCE_TOPIC, unique_topic)])
    entry = res[(RESOURCE_TOPIC, unique_topic)]["segment.ms"]
    assert entry.is_default and entry.source == 5 and entry.value == "604800000"
    key = (RESOURCE_TOPIC, unique_topic)
    assert admin.incremental_alter_configs({key: [("segment.ms", OP_SET, 3600000),
                                                  ("cleanup.policy", OP_SET, "compact")]}) == {key: None}
    cfg = _configs_when(admin, key, lambda c: c["cleanup.policy"].value == "compact")
    assert (cfg["segment.ms"].value, cfg["segment.ms"].source, cfg["segment.ms"].is_default) == \
        ("3600000", 1, False)
    assert cfg["cleanup.policy"].value == "compact"
    # only what was named changes; DELETE returns a property to its default
    assert admin.incremental_alter_configs({key: [("segment.ms", OP_DELETE, None)]}) == {key: None}
    cfg = _configs_when(admin, key, lambda c: c["segment.ms"].is_default)
    assert cfg["segment.ms"].is_default and cfg["cleanup.policy"].value == "compact"
    # validate_only changes nothing; a bad value is the broker's typed error
    admin.incremental_alter_configs({key: [("segment.ms", OP_SET, 1)]}, validate_only=True)
    assert admin.describe_configs([key])[key]["segment.ms"].is_default
    res = admin.incremental_alter_configs({key: [("segment.ms", OP_SET, "soon")]}, raise_on_error=False)
    assert isinstance(res[key], KwireError) and res[key].name == "INVALID_CONFIG"
    # AlterConfigs (deprecated) replaces the whole configuration: cleanup.policy returns to default
    assert admin.alter_configs({key: {"segment.ms": 7200000}}) == {key: None}
    cfg = _configs_when(admin, key, lambda c: c["segment.ms"].value == "7200000")
    assert cfg["segment.ms"].value == "7200000" and cfg["cleanup.policy"].is_default
    # a broker's own configs, asked of that broker
    broker_id = str(next(iter(admin.list_topics().brokers)))
    bcfg = admin.describe_configs([(RESOURCE_BROKER, broker_id)], include_synonyms=True)
    bcfg = bcfg[(RESOURCE_BROKER, broker_id)]
    assert bcfg["group.min.session.timeout.ms"].value == "1000"  # set by the test cluster
    assert bcfg["group.min.session.timeout.ms"].synonyms
    missing = (RESOURCE_TOPIC, unique_topic + "-missing")
    res = admin.describe_configs([missing], raise_on_error=False)
    assert isinstance(res[missing], UnknownTopicOrPartitionError)


def test_consumer_groups_and_their_offsets(admin, kafka, unique_topic):
    topic, group = unique_topic, unique_topic + "-g"
    admin.create_topics([(topic, 2, 1)], wait_for_leaders=True)
    _produce(kafka.bootstrap, topic, {0: 4, 1: 3})
    member = _consume_all(kafka.bootstrap, topic, group, 7, close=False)
    try:
        listed = {g.group_id: g for g in admin.list_consumer_groups()}
        assert listed[group].protocol_type == "consumer" and listed[group].state == "Stable"
        assert listed[group].type == "classic"
        assert group in {g.group_id for g in admin.list_consumer_groups(states=["Stable"])}
        assert group not in {g.group_id for g in admin.list_consumer_groups(states=["Empty"])}
        d = admin.describe_consumer_groups([group])[group]
        assert (d.state, d.protocol_type, d.protocol) == ("Stable", "consumer", "range")
        assert len(d.members) == 1 and sorted(d.members[0].assignment) == [(topic, 0), (topic, 1)]
        assert d.members[0].subscribed_topics == (topic,)  # decoded from the member's metadata
        assert d.coordinator.id in admin.list_topics().brokers
        # a group with a member cannot be deleted, nor its offsets altered from outside
        assert isinstance(admin.delete_consumer_groups([group], raise_on_error=False)[group],
                          NonEmptyGroupError)
        res = admin.alter_consumer_group_offsets(group, {(topic, 0): 1}, raise_on_error=False)
        assert res[(topic, 0)].name == "UNKNOWN_MEMBER_ID"
    finally:
        member.close()
    assert admin.list_consumer_group_offsets(group) == {
        (topic, 0): OffsetAndMetadata(4, 0, ""), (topic, 1): OffsetAndMetadata(3, 0, "")}
    assert admin.describe_consumer_groups([group])[group].state == "Empty"
    # alter, then a new member starts where it says
    assert admin.alter_consumer_group_offsets(
        group, {(topic, 0): 1, (topic, 1): OffsetAndMetadata(2, None, "m")}) == \
        {(topic, 0): None, (topic, 1): None}
    assert admin.list_consumer_group_offsets(group, [(topic, 1)]) == {(topic, 1): OffsetAndMetadata(2, None, "m")}
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    end = time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < end:
        got += [(r.partition, r.offset) for r in c.consume(100, 0.2)]
    c.close()
    assert sorted(got) == [(0, 1), (0, 2), (0, 3), (1, 2)]
    # delete one partition's offset
    assert admin.delete_consumer_group_offsets(group, [(topic, 0)]) == {(topic, 0): None}
    assert admin.list_consumer_group_offsets(group, [(topic, 0), (topic, 1)]) == {
        (topic, 0): OffsetAndMetadata(-1, None, ""), (topic, 1): OffsetAndMetadata(2, None, "m")}
    # delete the group
    missing = group + "-missing"
    res = admin.delete_consumer_groups([group, missing], raise_on_error=False)
    assert res[group] is None and isinstance(res[missing], GroupIdNotFoundError)
    assert group not in {g.group_id for g in admin.list_consumer_groups()}
    with pytest.raises(GroupIdNotFoundError):
        admin.describe_consumer_groups([group])


def test_list_offsets_and_describe_cluster(admin, kafka, unique_topic):
    topic = unique_topic
    admin.create_topics([(topic, 2, 1)], wait_for_leaders=True)
    base = 1_700_000_000_000
    _produce(kafka.bootstrap, topic, {0: 5}, ts_ms=base)
    admin.delete_records({(topic, 0): 2})
    res = admin.list_offsets({(topic, 0): EARLIEST, (topic, 1): LATEST})
    assert res[(topic, 0)].offset == 2 and res[(topic, 1)].offset == 0
    assert admin.list_offsets({(topic, 0): LATEST})[(topic, 0)].offset == 5
    assert admin.list_offsets({(topic, 0): base + 3})[(topic, 0)].offset == 3
    newest = admin.list_offsets({(topic, 0): MAX_TIMESTAMP})[(topic, 0)]
    assert (newest.offset, newest.timestamp) == (4, base + 4)
    assert admin.list_offsets({(topic, 0): base + 99})[(topic, 0)].offset == -1
    missing = (topic + "-missing", 0)
    res = admin.list_offsets({missing: LATEST}, raise_on_error=False)
    assert isinstance(res[missing], UnknownTopicOrPartitionError)
    d = admin.describe_cluster()
    snap = admin.list_topics()
    assert d.cluster_id == snap.cluster_id and d.controller_id == snap.controller_id
    assert {(b.id, b.host, b.port) for b in d.brokers} == \
        {(b.node_id, b.host, b.port) for b in snap.brokers.values()}


def test_find_coordinator_and_log_bounds(admin, kafka, unique_topic):
    """The two procedures the CLI and Spark share: the group's coordinator (asked again while
    none is ready), and each log's bounds, the end confirmed by a Fetch -- under
    read_committed the last stable offset, before an open transaction's records."""
    import confluent_kafka

    topic = unique_topic
    admin.create_topics([(topic, 3, 1)], wait_for_leaders=True)
    _produce(kafka.bootstrap, topic, {0: 7, 1: 3})
    admin.delete_records({(topic, 0): 4})
    tx = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap,
                                   "transactional.id": f"bounds-{topic}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(5):
        tx.produce(topic, b"open%d" % i, partition=1)
    assert tx.flush(30) == 0  # written, not committed: the last stable offset stays at 3
    try:
        tps = [(topic, 0), (topic, 1), (topic, 2), (topic + "-missing", 0)]
        plain = admin.log_bounds(tps, raise_on_error=False)
        assert (plain[(topic, 0)].log_start, plain[(topic, 0)].end) == (4, 7)
        assert (plain[(topic, 1)].log_start, plain[(topic, 1)].end) == (0, 8)
        assert (plain[(topic, 2)].log_start, plain[(topic, 2)].end) == (0, 0)
        assert isinstance(plain[(topic + "-missing", 0)], UnknownTopicOrPartitionError)
        committed = admin.log_bounds([(topic, 1)], isolation_level="read_committed")
        assert committed[(topic, 1)].end == 3
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.log_bounds([(topic + "-missing", 0)])
    finally:
        tx.abort_transaction(30)
    # the coordinator of a group that does not exist yet: the broker names it all the same
    node = admin.find_coordinator(f"g-{topic}")
    snap = admin.list_topics()
    b = snap.brokers[node.id]
    assert (node.host, node.port) == (b.host, b.port)


def test_group_calls_ask_again_while_the_coordinator_is_not_ready():
    """A group call answered COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR (librdkafka's mock
    cluster, told to) finds the coordinator again and asks again, within its timeout; the
    coordinator is the broker the cluster was told to use."""
    import confluent_kafka

    from .mock_control import ControlledMockCluster

    with ControlledMockCluster(3) as mc:
        p = confluent_kafka.Producer({"bootstrap.servers": mc.bootstrap})
        p.produce("t-admin", b"x", partition=0)  # (the mock creates the topic)
        assert p.flush(10) == 0
        mc.set_coordinator("g-moved", 3)
        events: list = []
        with Admin({"bootstrap.servers": mc.bootstrap, "retry.backoff.ms": 20}, tracer=events.append) as a:
            assert a.find_coordinator("g-moved", timeout=20).id == 3
            assert a.alter_consumer_group_offsets("g-moved", {("t-admin", 0): 5}) == {("t-admin", 0): None}
            mc.push_request_errors(9, 14, 2)  # OffsetFetch: COORDINATOR_LOAD_IN_PROGRESS twice
            mc.push_request_errors(9, 16, 1)  # then NOT_COORDINATOR
            del events[:]
            got = a.list_consumer_group_offsets("g-moved", [("t-admin", 0)], timeout=20)
            assert got[("t-admin", 0)].offset == 5
            sent = [(e["api"], e["node_id"]) for e in events if e["direction"] == "send"]
            assert [api for api, _ in sent] == ["FindCoordinator", "OffsetFetch"] * 4
            assert {node for api, node in sent if api == "OffsetFetch"} == {3}


def test_list_offsets_asks_again_after_a_moved_leader():
    """ListOffsets answered NOT_LEADER_OR_FOLLOWER, then FENCED_LEADER_EPOCH (librdkafka's
    mock cluster, told to): Admin refreshes metadata and asks again within its timeout,
    sending the leader epoch it knows; a non-retriable error is the partition's result."""
    import confluent_kafka

    from .mock_control import ControlledMockCluster

    with ControlledMockCluster(3) as mc:
        p = confluent_kafka.Producer({"bootstrap.servers": mc.bootstrap})
        for i in range(4):
            p.produce("t-lo", b"x%d" % i, partition=0)
        assert p.flush(10) == 0
        events: list = []
        with Admin({"bootstrap.servers": mc.bootstrap, "retry.backoff.ms": 20}, tracer=events.append) as a:
            mc.push_request_errors(2, 6, 1)   # ListOffsets: NOT_LEADER_OR_FOLLOWER
            mc.push_request_errors(2, 74, 1)  # then FENCED_LEADER_EPOCH
            got = a.list_offsets({("t-lo", 0): LATEST}, timeout=20)
            assert got[("t-lo", 0)].offset == 4
            sent = [e for e in events if e["direction"] == "send"]
            assert [e["api"] for e in sent if e["api"] in ("Metadata", "ListOffsets")] == \
                ["Metadata", "ListOffsets"] * 3
            mc.push_request_errors(2, 87, 1)  # RECORD_LIST_TOO_LARGE: not retriable
            res = a.list_offsets({("t-lo", 0): LATEST}, timeout=20, raise_on_error=False)
            assert getattr(res[("t-lo", 0)], "code", None) == 87


def test_offsets_of_an_open_transaction_are_that_partitions_error(admin, kafka, unique_topic):
    """OffsetFetch with require_stable while a transaction holds an offset commit of one
    partition: that partition is UNSTABLE_OFFSET_COMMIT (its own result with
    raise_on_error=False, raised otherwise), the other partition's offset stands."""
    import confluent_kafka

    from kwire.errors import UnstableOffsetCommitError

    topic, group = unique_topic, unique_topic + "-g"
    admin.create_topics([(topic, 2, 1)], wait_for_leaders=True)
    assert admin.alter_consumer_group_offsets(group, {(topic, 1): 2}) == {(topic, 1): None}
    tx = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap,
                                   "transactional.id": f"open-offsets-{topic}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    meta = confluent_kafka.Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    try:
        tx.send_offsets_to_transaction([confluent_kafka.TopicPartition(topic, 0, 7)],
                                       meta.consumer_group_metadata(), 30)
        tps = [(topic, 0), (topic, 1)]
        got = admin.list_consumer_group_offsets(group, tps, require_stable=True, raise_on_error=False)
        assert isinstance(got[(topic, 0)], UnstableOffsetCommitError)
        assert got[(topic, 1)] == OffsetAndMetadata(2, None, "")
        with pytest.raises(UnstableOffsetCommitError):
            admin.list_consumer_group_offsets(group, tps, require_stable=True, timeout=5)
        # without require_stable the committed offsets are answered as they are
        assert admin.list_consumer_group_offsets(group, tps)[(topic, 0)].offset == -1
        tx.commit_transaction(30)
        # (the commit's markers land a moment later: until then the offset is still unstable)
        end = time.monotonic() + 20
        while isinstance(after := admin.list_consumer_group_offsets(
                group, tps, require_stable=True, raise_on_error=False)[(topic, 0)],
                UnstableOffsetCommitError) and time.monotonic() < end:
            time.sleep(0.05)
        assert after == OffsetAndMetadata(7, None, "")
    finally:
        meta.close()
