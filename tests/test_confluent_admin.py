"""kwire.confluent's AdminClient side by side with confluent-kafka's on Apache Kafka: one
classic admin program (topics, partitions, configs, groups and their offsets, partition offsets,
records, the cluster) run with each module in the same test, on topics and groups of its own;
what the two observe must be the same."""
from __future__ import annotations

import concurrent.futures
import time
import warnings

import confluent_kafka
import confluent_kafka.admin
import pytest

import kwire.confluent
import kwire.confluent.admin

MODULES = {"confluent_kafka": confluent_kafka, "kwire.confluent": kwire.confluent}
BASE_TS = 1_700_000_000_000


def _outcome(fut):
    """A future's result, or the name of the KafkaError it raised."""
    assert isinstance(fut, concurrent.futures.Future)
    try:
        return ("ok", fut.result(30))
    except Exception as exc:
        assert type(exc).__name__ == "KafkaException", repr(exc)
        return ("error", exc.args[0].name())


def _wait(pred, what, deadline_s=30):
    end = time.monotonic() + deadline_s
    while not pred():
        assert time.monotonic() < end, what
        time.sleep(0.1)


def admin_program(ck, bootstrap, topic, group):
    """What a confluent-kafka admin program sees, with names made neutral ("T", "G")."""
    adm = ck.admin
    a = adm.AdminClient({"bootstrap.servers": bootstrap})
    seen = {}
    missing_topic, missing_group = topic + "-missing", group + "-missing"
    seen["create"] = {k.replace(topic, "T"): _outcome(f)
                      for k, f in a.create_topics([adm.NewTopic(topic, 2, 1)]).items()}
    _wait(lambda: len(a.list_topics(topic, 10).topics[topic].partitions) == 2, "topic")
    futs = a.create_partitions([adm.NewPartitions(topic, 3)])
    seen["grow"] = [(k == topic, _outcome(f)) for k, f in futs.items()]
    _wait(lambda: len(a.list_topics(topic, 10).topics[topic].partitions) == 3, "partitions")
    seen["shrink"] = [_outcome(f) for f in a.create_partitions([adm.NewPartitions(topic, 2)]).values()]

    # configs (segment.ms: a setting the test brokers leave at Kafka's default; they set retention.ms)
    res = adm.ConfigResource(adm.ResourceType.TOPIC, topic)
    bad = adm.ConfigResource("topic", missing_topic)

    def described(r, names=("segment.ms", "cleanup.policy", "min.insync.replicas")):
        (k, f), = a.describe_configs([r]).items()
        assert k == r
        kind, out = _outcome(f)
        if kind == "error":
            return kind, out
        return kind, {n: (out[n].value, out[n].source, out[n].is_default,
                          out[n].is_read_only, out[n].is_sensitive, out[n].is_synonym,
                          sorted((s.name, s.value, s.source, s.is_synonym)
                                 for s in out[n].synonyms.values())) for n in names}
    seen["config"] = described(res)
    seen["config_missing"] = described(bad)
    change = adm.ConfigResource(adm.ResourceType.TOPIC, topic, incremental_configs=[
        adm.ConfigEntry("segment.ms", "3600000", incremental_operation=adm.AlterConfigOpType.SET),
        adm.ConfigEntry("cleanup.policy", "compact", incremental_operation=adm.AlterConfigOpType.SET)])
    seen["alter"] = [_outcome(f) for f in a.incremental_alter_configs([change]).values()]
    # (a describe right after an alter may still see the old values: KRaft brokers apply a
    # config change when the metadata record reaches them -- wait for it, either module)
    _wait(lambda: described(res)[1]["segment.ms"][0] == "3600000", "the alter applied")
    seen["config_after"] = described(res)
    reset = adm.ConfigResource(adm.ResourceType.TOPIC, topic, incremental_configs=[
        adm.ConfigEntry("segment.ms", None, incremental_operation=adm.AlterConfigOpType.DELETE),
        adm.ConfigEntry("cleanup.policy", None, incremental_operation=adm.AlterConfigOpType.DELETE)])
    seen["reset"] = [_outcome(f) for f in a.incremental_alter_configs([reset]).values()]
    _wait(lambda: described(res)[1]["segment.ms"][2], "the reset applied")  # is_default
    seen["config_reset"] = described(res)
    whole = adm.ConfigResource(adm.ResourceType.TOPIC, topic, set_config={"segment.ms": "7200000"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        futs = a.alter_configs([whole])
    seen["alter_whole"] = ([w.category.__name__ for w in caught], [_outcome(f) for f in futs.values()])
    _wait(lambda: described(res)[1]["segment.ms"][0] == "7200000", "the whole alter applied")
    seen["config_whole"] = described(res)
    worse = adm.ConfigResource(adm.ResourceType.TOPIC, topic, incremental_configs=[
        adm.ConfigEntry("segment.ms", "soon", incremental_operation=adm.AlterConfigOpType.SET)])
    seen["alter_bad"] = [_outcome(f) for f in a.incremental_alter_configs([worse]).values()]

    # records, then a group member
    p = ck.Producer({"bootstrap.servers": bootstrap})
    for part, n in ((0, 4), (1, 3)):
        for i in range(n):
            p.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=part, timestamp=BASE_TS + i)
    assert p.flush(30) == 0
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "prog",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = 0
    end = time.monotonic() + 30
    while got < 7 and time.monotonic() < end:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got += 1
    assert got == 7
    c.commit(asynchronous=False)
    _wait(lambda: c.assignment() and len(c.assignment()) == 3, "assignment")

    def groups(**kw):
        kind, r = _outcome(a.list_consumer_groups(**kw))
        assert kind == "ok" and r.errors == []
        return sorted((g.is_simple_consumer_group, g.state.name, g.type.name)
                      for g in r.valid if g.group_id == group)

    _wait(lambda: groups(states={ck.ConsumerGroupState.STABLE}), "stable group")
    seen["list_stable"] = groups(states={ck.ConsumerGroupState.STABLE})
    seen["list_empty"] = groups(states={ck.ConsumerGroupState.EMPTY})

    def description(g):
        (k, f), = a.describe_consumer_groups([g]).items()
        kind, d = _outcome(f)
        if kind == "error":
            return kind, d
        return kind, (d.group_id == g, d.is_simple_consumer_group, d.state.name, d.type.name,
                      d.partition_assignor, d.coordinator.id, d.coordinator.port,
                      [(m.client_id, m.host, m.group_instance_id,
                        sorted((tp.topic == topic, tp.partition) for tp in m.assignment.topic_partitions))
                       for m in d.members])
    seen["describe_active"] = description(group)
    seen["describe_missing"] = description(missing_group)
    seen["delete_active"] = [_outcome(f) for f in a.delete_consumer_groups([group]).values()]

    def offsets(req):
        futs = req()
        (k, f), = futs.items()
        assert k == group
        kind, r = _outcome(f)
        if kind == "error":
            return kind, r
        return kind, (r.group_id == group, [(tp.topic == topic, tp.partition, tp.offset,
                                              tp.error.name() if tp.error else None)
                                             for tp in r.topic_partitions])
    alter = [ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, 0, 1)])]
    seen["alter_active"] = offsets(lambda: a.alter_consumer_group_offsets(alter))
    c.close()
    seen["offsets"] = offsets(lambda: a.list_consumer_group_offsets(
        [ck.ConsumerGroupTopicPartitions(group)]))
    seen["offsets_some"] = offsets(lambda: a.list_consumer_group_offsets(
        [ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, 1), ck.TopicPartition(topic, 2)])]))
    seen["alter_empty"] = offsets(lambda: a.alter_consumer_group_offsets(alter))
    seen["offsets_after"] = offsets(lambda: a.list_consumer_group_offsets(
        [ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, 0)])]))
    seen["describe_empty"] = description(group)

    # partition offsets, records
    OS = adm.OffsetSpec

    def listed(specs, **kw):
        futs = a.list_offsets(specs, **kw)
        assert set(futs) == set(specs)
        out = {}
        for tp, f in sorted(futs.items()):
            kind, r = _outcome(f)
            out[(tp.topic == topic, tp.partition)] = (kind, r if kind == "error" else
                                                       (r.offset, r.timestamp, r.leader_epoch))
        return out
    seen["list_offsets"] = listed({ck.TopicPartition(topic, 0): OS.latest(),
                                   ck.TopicPartition(topic, 1): OS.earliest(),
                                   ck.TopicPartition(topic, 2): OS.latest()})
    seen["list_offsets_ts"] = listed({ck.TopicPartition(topic, 0): OS.for_timestamp(BASE_TS + 2),
                                      ck.TopicPartition(topic, 1): OS.max_timestamp(),
                                      ck.TopicPartition(topic, 2): OS.for_timestamp(BASE_TS)},
                                     isolation_level=ck.IsolationLevel.READ_COMMITTED)
    seen["list_offsets_missing"] = listed({ck.TopicPartition(missing_topic, 0): OS.latest()})
    futs = a.delete_records([ck.TopicPartition(topic, 0, 2)])
    seen["delete_records"] = [(k.partition, _outcome(f)[1].low_watermark) for k, f in futs.items()]
    seen["earliest_after"] = listed({ck.TopicPartition(topic, 0): OS.earliest()})

    # the cluster
    kind, d = _outcome(a.describe_cluster())
    md = a.list_topics(timeout=10)
    seen["cluster"] = (kind, d.cluster_id == md.cluster_id, d.controller.id == md.controller_id,
                       sorted((n.id, n.host, n.port) for n in d.nodes), d.authorized_operations)

    # deletions
    seen["delete_groups"] = sorted((k == group, _outcome(f)) for k, f in
                                   a.delete_consumer_groups([group, missing_group]).items())
    seen["delete_topics"] = sorted((k == topic, _outcome(f)) for k, f in
                                   a.delete_topics([topic, missing_topic]).items())
    _wait(lambda: a.list_topics(topic, 10).topics[topic].error is not None, "deleted topic")
    return seen


def test_admin_program_same_as_confluent_kafka(kafka, unique_topic):
    res = {name: admin_program(ck, kafka.bootstrap, f"{unique_topic}-{i}", f"g-{unique_topic}-{i}")
           for i, (name, ck) in enumerate(MODULES.items())}
    real, ours = res["confluent_kafka"], res["kwire.confluent"]
    for key in real:
        assert ours[key] == real[key], key
    # and what they saw is what happened
    assert ours["grow"] == [(True, ("ok", None))] and ours["shrink"] == [("error", "INVALID_PARTITIONS")]
    assert ours["config_after"][1]["segment.ms"][:3] == ("3600000", 1, False)
    assert ours["config_reset"][1]["segment.ms"][2] is True
    assert ours["config_whole"][1]["segment.ms"][0] == "7200000"
    assert ours["describe_active"][1][2] == "STABLE" and ours["delete_active"] == [("error", "NON_EMPTY_GROUP")]
    assert ours["offsets"][1][1] == [(True, 0, 4, None), (True, 1, 3, None)]
    assert ours["list_offsets_ts"][(True, 0)][1][0] == 2
    assert ours["delete_records"] == [(0, 2)] and ours["earliest_after"][(True, 0)][1][0] == 2


def test_argument_errors_as_confluent_kafka(kafka):
    """Bad arguments raise the same exception types, at the call."""
    calls = [
        lambda a, ck: a.delete_topics([]),
        lambda a, ck: a.describe_configs([]),
        lambda a, ck: a.describe_configs(["t"]),
        lambda a, ck: a.list_consumer_groups(states=[ck.ConsumerGroupState.STABLE]),
        lambda a, ck: a.list_consumer_groups(states={"Stable"}),
        lambda a, ck: a.describe_consumer_groups([]),
        lambda a, ck: a.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions("g"),
                                                     ck.ConsumerGroupTopicPartitions("h")]),
        lambda a, ck: a.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions("")]),
        lambda a, ck: a.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions("g", [])]),
        lambda a, ck: a.list_consumer_group_offsets(
            [ck.ConsumerGroupTopicPartitions("g", [ck.TopicPartition("t", 0, 5)])]),
        lambda a, ck: a.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions("g")]),
        lambda a, ck: a.alter_consumer_group_offsets(
            [ck.ConsumerGroupTopicPartitions("g", [ck.TopicPartition("t", 0, -1)])]),
        lambda a, ck: a.list_offsets([ck.TopicPartition("t", 0)]),
        lambda a, ck: a.list_offsets({ck.TopicPartition("t", 0): -1}),
        lambda a, ck: a.list_offsets({ck.TopicPartition("t", -1): ck.admin.OffsetSpec.latest()}),
        lambda a, ck: a.list_offsets({ck.TopicPartition("t", 0): ck.admin.OffsetSpec.latest()},
                                     isolation_level=1),
    ]
    raised = {}
    for name, ck in MODULES.items():
        a = ck.admin.AdminClient({"bootstrap.servers": kafka.bootstrap})
        out = []
        for call in calls:
            try:
                call(a, ck)
                out.append(None)
            except Exception as exc:
                out.append(type(exc).__name__)
        raised[name] = out
    assert raised["kwire.confluent"] == raised["confluent_kafka"], "\n".join(map(str, zip(*raised.values())))
    assert None not in raised["kwire.confluent"]
    # where confluent-kafka's answer is an accident (a str where a NewPartitions belongs:
    # AttributeError; a non-str topic: accepted, failing later) kwire says TypeError at once
    a = kwire.confluent.admin.AdminClient({"bootstrap.servers": kafka.bootstrap})
    with pytest.raises(TypeError):
        a.delete_topics(["t", 1])
    with pytest.raises(TypeError):
        a.create_partitions(["t"])


def test_value_types_as_confluent_kafka():
    """Enum numbers and the constructors' behaviour, as confluent-kafka's."""
    ours, real = kwire.confluent, confluent_kafka
    for enum in ("ConsumerGroupState", "ConsumerGroupType", "IsolationLevel"):
        assert {e.name: e.value for e in getattr(ours, enum)} == \
            {e.name: e.value for e in getattr(real, enum)}
    for enum in ("ResourceType", "ConfigSource", "AlterConfigOpType"):
        mine = {e.name: e.value for e in getattr(ours.admin, enum)}
        theirs = {e.name: e.value for e in getattr(real.admin, enum)}
        assert all(theirs[k] == v for k, v in mine.items()), enum
    for m in (ours, real):
        r = m.admin.ConfigResource("TOPIC", "x", set_config={"a": "1"})
        assert (r.restype.name, r.restype_int, len(r), repr(r)) == ("TOPIC", 2, 1, "ConfigResource(ResourceType.TOPIC,x)")
        assert r == m.admin.ConfigResource(m.admin.ResourceType.TOPIC, "x") and hash(r) == hash(m.admin.ConfigResource(2, "x"))
        with pytest.raises(ValueError):
            m.admin.ConfigResource("nonsense", "x")
        assert repr(m.admin.NewPartitions("t", 3)) == "NewPartitions(topic=t,new_total_count=3)"
        assert str(m.Node(1, "h", 2, "r")) == "(1) h:2 (Rack - r)"
        assert repr(m.admin.ConfigEntry("a", "b")) == 'ConfigEntry(a="b")'
        assert [m.admin.OffsetSpec(v)._value for v in (-1, -2, -3, 7)] == [-1, -2, -3, 7]
        assert m.admin.OffsetSpec.for_timestamp(5)._value == 5
        assert m.admin.ListOffsetsResultInfo(1, 2, -1).leader_epoch is None
        listing = m.admin.ConsumerGroupListing("g", False, "STABLE", 2)
        assert (listing.state, listing.type) == (m.ConsumerGroupState.STABLE, m.ConsumerGroupType.CLASSIC)


def _described(ck, bootstrap, topics, **kw):
    """describe_topics through ``ck``: per topic the description as plain values, or the error."""
    a = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for name, fut in a.describe_topics(ck.TopicCollection(topics), **kw).items():
        kind, d = _outcome(fut)
        if kind == "error":
            out[name] = d
            continue
        def node(n):
            return None if n is None else (n.id, n.host, n.port, n.rack)
        out[name] = (d.name, str(d.topic_id), d.topic_id.get_most_significant_bits(),
                     d.topic_id.get_least_significant_bits(), d.is_internal,
                     [(p.id, node(p.leader), [node(r) for r in p.replicas], [node(r) for r in p.isr])
                      for p in d.partitions],
                     None if d.authorized_operations is None else sorted(o.name for o in d.authorized_operations))
    return out


def test_describe_topics_same_as_confluent_kafka(kafka, unique_topic):
    """Topic ids (as Uuid), partitions, leaders, replicas, ISR, internal flag and authorized
    operations: kwire.confluent's AdminClient answers what confluent-kafka's does."""
    a = confluent_kafka.admin.AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in a.create_topics([confluent_kafka.admin.NewTopic(unique_topic, 3, 1)]).values():
        f.result(20)
    topics = [unique_topic, "__consumer_offsets", unique_topic + "-missing"]
    # an offset commit makes sure the internal __consumer_offsets exists
    tps = [confluent_kafka.TopicPartition(unique_topic, 0, 1)]
    for f in a.alter_consumer_group_offsets([confluent_kafka.ConsumerGroupTopicPartitions(
            "g-" + unique_topic, tps)]).values():
        f.result(20)
    _wait(lambda: "__consumer_offsets" in a.list_topics(timeout=10).topics, "__consumer_offsets")
    for kw in ({}, {"include_authorized_operations": True}):
        real = _described(confluent_kafka, kafka.bootstrap, topics, **kw)
        ours = _described(kwire.confluent, kafka.bootstrap, topics, **kw)
        assert ours == real, kw
    mine = ours[unique_topic]
    assert len(mine[5]) == 3 and mine[5][0][1][0] == 1 and mine[4] is False
    assert ours["__consumer_offsets"][4] is True
    assert ours[unique_topic + "-missing"] == "UNKNOWN_TOPIC_OR_PART"
    # kwire's own Admin: the topic id as a uuid.UUID, the same bits
    from kwire.admin import Admin
    with Admin({"bootstrap.servers": kafka.bootstrap}) as adm:
        d = adm.describe_topics([unique_topic])[unique_topic]
    assert str(kwire.confluent.Uuid.from_uuid(d.topic_id)) == mine[1]
    # argument errors raise the same types at the call
    raised = {}
    for name, ck in MODULES.items():
        adm = ck.admin.AdminClient({"bootstrap.servers": kafka.bootstrap})
        out = []
        for arg in ([unique_topic], ck.TopicCollection("x"), ck.TopicCollection([""]),
                    ck.TopicCollection([1]), ck.TopicCollection(["a", "a"])):
            try:
                adm.describe_topics(arg)
                out.append(None)
            except Exception as exc:
                out.append(type(exc).__name__)
        raised[name] = out
    assert raised["kwire.confluent"] == raised["confluent_kafka"]
    # duplicates: one future, failed with _INVALID_ARG; an empty collection: no futures
    for ck in MODULES.values():
        adm = ck.admin.AdminClient({"bootstrap.servers": kafka.bootstrap})
        assert {k: _outcome(f) for k, f in adm.describe_topics(ck.TopicCollection(["a", "a"])).items()} == \
            {"a": ("error", "_INVALID_ARG")}
        assert adm.describe_topics(ck.TopicCollection([])) == {}


def test_uuid_as_confluent_kafka():
    for msb, lsb in ((1234567890123, -987654321), (0, 0), (-1, -1), (-(1 << 63), (1 << 63) - 1)):
        ours, real = kwire.confluent.Uuid(msb, lsb), confluent_kafka.Uuid(msb, lsb)
        assert (str(ours), repr(ours)) == (str(real), repr(real))
        assert (ours.get_most_significant_bits(), ours.get_least_significant_bits()) == (msb, lsb)
    for bad in (("x", 1), (1 << 63, 0), (0, -(1 << 63) - 1)):
        errs = []
        for m in (kwire.confluent, confluent_kafka):
            try:
                m.Uuid(*bad)
                errs.append(None)
            except Exception as exc:
                errs.append(type(exc).__name__)
        assert errs[0] == errs[1], bad
