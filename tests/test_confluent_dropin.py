"""kwire.confluent as a drop-in: classic confluent-kafka programs (tests/confluent_programs.py)
run unchanged, with only the import switched, against Apache Kafka and Tansu -- and against the
real confluent-kafka on the same broker in the same run; what they observe must be the same."""
from __future__ import annotations

import confluent_kafka
import pytest

import kwire.confluent

from . import confluent_programs as prog

MODULES = {"confluent_kafka": confluent_kafka, "kwire.confluent": kwire.confluent}


@pytest.fixture
def topics(peer, create_topic, unique_topic):
    """One topic per module, each filled by that module's own producer program."""
    out = {}
    for name, ck in MODULES.items():
        t = f"{unique_topic}-{name.replace('.', '-')}"
        assert create_topic(peer, t, prog.PARTITIONS) == prog.PARTITIONS
        out[name] = (t, prog.produce(ck, peer.bootstrap, t))
    return out


def both(fn, peer, topics, **kw):
    res = {name: fn(ck, peer.bootstrap, topics[name][0], **kw) for name, ck in MODULES.items()}
    return res["confluent_kafka"], res["kwire.confluent"]


def test_producer_callbacks_and_flush(peer, topics):
    real = topics["confluent_kafka"][1]
    ours = topics["kwire.confluent"][1]
    assert ours == real
    assert ours["flush"] == 0 and ours["len"] == 0 and len(ours["reports"]) == prog.N
    assert all(r[0] is None and r[1] and r[5] == confluent_kafka.TIMESTAMP_CREATE_TIME for r in ours["reports"])


def test_poll_loop_with_partition_eof(peer, topics):
    real, ours = both(prog.eof_loop, peer, topics)
    for r in (real, ours):
        r["eofs"] = [(p, o) for _, p, o in r["eofs"]]
    assert ours == real
    assert ours["eofs"] == [(0, prog.N // 2), (1, prog.N // 2)]
    assert len(ours["msgs"]) == prog.N and ours["after_close"] == "Consumer closed"
    assert ours["msgs"][0][5] == (confluent_kafka.TIMESTAMP_CREATE_TIME, 1_700_000_000_000)


def test_on_assign_sets_offsets_and_consume_batches(peer, topics):
    real, ours = both(prog.on_assign_offsets, peer, topics)
    for r in (real, ours):
        r["assigned"] = [p for _, p in r["assigned"]]
    assert ours == real
    assert min(o for _, o in ours["got"]) == 5


def test_commit_message_and_committed(peer, topics):
    real, ours = both(prog.commit_message, peer, topics)
    assert ours == real
    assert ours["committed"] == [(0, 4)] and ours["last"] == prog.N // 2 - 1
    # (Tansu answers ListOffsets(latest) oddly -- (0, 1) here -- for both clients alike)
    if type(peer).__name__ != "TansuBroker":
        assert ours["watermarks"] == (0, prog.N // 2)


def test_store_offsets_then_commit(peer, topics):
    real, ours = both(prog.store_offsets, peer, topics)
    assert ours == real
    assert ours["committed"] == [(1, 3)]


def test_stats_cb(peer, topics):
    real, ours = both(prog.stats, peer, topics)
    assert ours == real
    assert ours["type"] == "consumer"


def test_admin_client_futures(peer, unique_topic):
    res = {name: prog.admin_futures(ck, peer.bootstrap, f"{unique_topic}-{i}")
           for i, (name, ck) in enumerate(MODULES.items())}
    real, ours = res["confluent_kafka"], res["kwire.confluent"]
    for r in (real, ours):
        r["first"] = list(r["first"].values())
    assert ours == real
    assert ours["again"] == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS


def test_subscribe_unknown_topic_is_an_error_message(peer):
    res = {name: prog.unknown_topic(ck, peer.bootstrap) for name, ck in MODULES.items()}
    real, ours = res["confluent_kafka"], res["kwire.confluent"]
    assert ours["error"] == ours["expected"]
    assert (real["error"] is not None) == (ours["error"] is not None)
    assert real["error"][0] == ours["error"][0]


def test_error_cb_all_brokers_down():
    assert prog.brokers_down(kwire.confluent) == prog.brokers_down(confluent_kafka) == {"all_down": True}


def test_commit_position_pause_and_close_midway(peer, topics):
    real, ours = both(prog.midway, peer, topics)
    assert ours == real
    assert ours["first"] == [0, 1, 2] and ours["committed"] == [(0, 3)] and ours["position"] == [(0, 3)]
    assert ours["after_resume"] == [3, 4] and ours["resumed"] == [3] and ours["at_close"] == [(0, 4)]


@pytest.mark.parametrize("partitioner", [None, "consistent_random", "consistent", "murmur2_random",
                                         "murmur2", "fnv1a_random"])
def test_key_placement_as_confluent(peer, create_topic, unique_topic, partitioner):
    topic = unique_topic
    assert create_topic(peer, topic, 5) == 5
    real = prog.placement(confluent_kafka, peer.bootstrap, topic, partitioner)
    ours = prog.placement(kwire.confluent, peer.bootstrap, topic, partitioner)
    assert len(ours) >= 40 and len(set(ours.values())) > 1
    assert ours == real


def test_serializing_producer_and_deserializing_consumer(peer, topics):
    real, ours = both(prog.serializing, peer, topics)
    assert ours == real
    assert ours["bad"] == confluent_kafka.KafkaError._VALUE_SERIALIZATION
    assert ours["got"][-1] == ("k4", 4000, 4000)


def test_offset_reset_error_is_an_error_message(peer, topics):
    real, ours = both(prog.reset_error, peer, topics)
    assert ours == real
    if type(peer).__name__ != "TansuBroker":  # Tansu answers a fetch past the end with nothing
        assert ours["error"] == (confluent_kafka.KafkaError._AUTO_OFFSET_RESET, True, 0)


def test_cluster_id(peer, topics):
    real, ours = both(prog.cluster_ids, peer, topics)
    assert ours == real


def test_rebalance_between_two_members(peer, topics):
    real, ours = both(prog.rebalance, peer, topics)
    assert ours["all_seen"] and ours["final"] == [[0], [1]] and ours["a_revoked"]
    assert ours["a_first"] == ("assign", [0, 1])
    assert ours == real


def test_consume_then_commit_gets_whole_batches(kafka, create_topic, unique_topic):
    """consume(num_messages) gives up to num_messages at once, as confluent-kafka does, even in a
    loop that commits after each batch (poll()'s adaptive batch used to cap it: a commit taking
    longer than 100 ms kept consume() at one message per call)."""
    create_topic(kafka, unique_topic, 1)
    p = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(145):
        p.produce(unique_topic, b"%d" % i, partition=0)
    assert p.flush(10) == 0
    c = kwire.confluent.Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{unique_topic}",
                                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([unique_topic])
        sizes = []
        while sum(sizes) < 145 and len(sizes) < 40:
            msgs = c.consume(num_messages=1000, timeout=2.0)
            if msgs:
                c.commit(asynchronous=False)
                sizes.append(len(msgs))
        assert sum(sizes) == 145 and len(sizes) <= 3, sizes
    finally:
        c.close()
