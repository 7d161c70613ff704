"""Classic confluent-kafka programs, written once against a module ``ck`` that is either the real
``confluent_kafka`` or ``kwire.confluent`` -- only the import differs.  Each returns what it
observed, in a form that must be the same for both (tests/test_confluent_dropin.py compares).
"""
from __future__ import annotations

import json
import time
import uuid

N = 20           # messages per program
PARTITIONS = 2


def produce(ck, bootstrap, topic, n=N, **conf):
    """Producer with delivery callbacks, flush(-1): what the callbacks saw."""
    seen = []

    def on_delivery(err, msg):
        assert isinstance(msg, ck.Message)
        seen.append((None if err is None else err.code(), msg.topic() == topic, msg.partition(),
                     msg.key(), msg.value(), msg.timestamp()[0], msg.error() is None,
                     msg.latency() is not None and msg.latency() >= 0))

    p = ck.Producer({"bootstrap.servers": bootstrap, **conf})
    assert bool(p) and len(p) == 0
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), key=f"k{i}", partition=i % PARTITIONS,
                  headers=[("h", f"{i}".encode())], timestamp=1_700_000_000_000 + i,
                  on_delivery=on_delivery)
        p.poll(0)
    queued = len(p) > 0
    left = p.flush(-1)
    served_after = p.poll(0)
    return {"queued": queued, "flush": left, "len": len(p), "poll_after": served_after,
            "reports": sorted(seen, key=lambda r: r[4])}


def _consumer(ck, bootstrap, group=None, **conf):
    return ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"g-{uuid.uuid4().hex[:8]}",
                        "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                        "heartbeat.interval.ms": 500, **conf})


def eof_loop(ck, bootstrap, topic, deadline_s=60):
    """subscribe + poll loop until every partition reported end-of-partition."""
    c = _consumer(ck, bootstrap, **{"enable.partition.eof": True})
    c.subscribe([topic])
    msgs, eofs = [], set()
    end = time.monotonic() + deadline_s
    while len(eofs) < PARTITIONS and time.monotonic() < end:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
            assert isinstance(m.error(), ck.KafkaError)
            eofs.add((m.topic(), m.partition(), m.offset()))
            continue
        msgs.append((m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp(),
                     len(m), m.leader_epoch() is None or m.leader_epoch() >= 0))
    again = c.poll(0.5)  # no second EOF without new messages
    c.close()
    try:
        c.poll(0)
        after_close = "returned"
    except RuntimeError as exc:
        after_close = str(exc)
    return {"msgs": sorted(msgs), "eofs": sorted(eofs), "again": again is None,
            "after_close": after_close}


def on_assign_offsets(ck, bootstrap, topic, start=5, deadline_s=60):
    """on_assign that sets each partition's starting offset, then consume(n) batches."""
    assigned = []

    def on_assign(c, parts):
        assigned.extend((p.topic, p.partition) for p in parts)
        for p in parts:
            p.offset = start
        c.assign(parts)

    c = _consumer(ck, bootstrap)
    c.subscribe([topic], on_assign=on_assign)
    got = []
    end = time.monotonic() + deadline_s
    want = N - PARTITIONS * start
    while len(got) < want and time.monotonic() < end:
        for m in c.consume(num_messages=7, timeout=1.0):
            assert m.error() is None, m.error()
            got.append((m.partition(), m.offset()))
    c.close()
    return {"assigned": sorted(assigned), "got": sorted(got)}


def commit_message(ck, bootstrap, topic, deadline_s=60):
    """enable.auto.commit=false, commit(message=, asynchronous=False), committed()."""
    c = _consumer(ck, bootstrap, **{"enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    end = time.monotonic() + deadline_s
    last = None
    n = 0
    while n < N // PARTITIONS and time.monotonic() < end:
        m = c.poll(1.0)
        if m is None or m.error():
            continue
        n += 1
        last = m
        if n == 4:
            res = c.commit(message=m, asynchronous=False)
            first = [(tp.topic == topic, tp.partition, tp.offset) for tp in res]
    committed = c.committed([ck.TopicPartition(topic, 0)], timeout=10)
    position = c.position([ck.TopicPartition(topic, 0)])
    wm = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
    c.close()
    return {"first": first, "last": last.offset(), "committed": [(p.partition, p.offset) for p in committed],
            "position": [(p.partition, p.offset) for p in position], "watermarks": tuple(wm)}


def store_offsets(ck, bootstrap, topic, deadline_s=60):
    """enable.auto.offset.store=false: store_offsets(message) then commit() (sync)."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = _consumer(ck, bootstrap, group, **{"enable.auto.offset.store": False, "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 1, 0)])
    end = time.monotonic() + deadline_s
    n = 0
    while n < 3 and time.monotonic() < end:
        m = c.poll(1.0)
        if m is None or m.error():
            continue
        n += 1
        c.store_offsets(message=m)
    res = c.commit(asynchronous=False)
    out = [(p.partition, p.offset) for p in res if p.topic == topic]
    c.close()
    c2 = _consumer(ck, bootstrap, group)
    committed = c2.committed([ck.TopicPartition(topic, 1)], timeout=10)
    c2.close()
    return {"commit": out, "committed": [(p.partition, p.offset) for p in committed]}


def admin_futures(ck, bootstrap, topic):
    """AdminClient: create_topics futures, again (already exists), list_topics."""
    from importlib import import_module
    admin = import_module(ck.__name__ + ".admin")
    a = admin.AdminClient({"bootstrap.servers": bootstrap})
    fs = a.create_topics([admin.NewTopic(topic, num_partitions=3, replication_factor=1)])
    first = {t: f.result(30) for t, f in fs.items()}
    fs = a.create_topics([admin.NewTopic(topic, num_partitions=3, replication_factor=1)])
    try:
        fs[topic].result(30)
        again = None
    except ck.KafkaException as exc:
        again = exc.args[0].code()
    for _ in range(50):
        md = a.list_topics(timeout=10)
        if topic in md.topics and len(md.topics[topic].partitions) == 3:
            break
        time.sleep(0.2)
    t = md.topics[topic]
    return {"first": first, "again": again, "partitions": sorted(t.partitions),
            "leaders": all(p.leader >= 0 for p in t.partitions.values()),
            "brokers": len(md.brokers) >= 1, "error": t.error}


def stats(ck, bootstrap, topic, deadline_s=30):
    """stats_cb with statistics.interval.ms: JSON documents with name/type/ts."""
    docs = []
    c = _consumer(ck, bootstrap, **{"statistics.interval.ms": 200, "stats_cb": docs.append})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    end = time.monotonic() + deadline_s
    while len(docs) < 2 and time.monotonic() < end:
        c.poll(0.2)
    c.close()
    d = json.loads(docs[0])
    return {"n": len(docs) >= 2, "keys": sorted(k for k in ("name", "type", "ts", "time", "topics")
                                                 if k in d), "type": d["type"]}


def unknown_topic(ck, bootstrap, deadline_s=30):
    """subscribe to a topic that does not exist: an error message names it."""
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    c = _consumer(ck, bootstrap, **{"allow.auto.create.topics": False})
    c.subscribe([missing])
    end = time.monotonic() + deadline_s
    err = None
    while err is None and time.monotonic() < end:
        m = c.poll(0.5)
        if m is not None and m.error():
            err = (m.error().code(), m.topic())
    c.close()
    return {"error": err, "expected": (ck.KafkaError.UNKNOWN_TOPIC_OR_PART, missing)}


def brokers_down(ck, deadline_s=15):
    """error_cb hears _ALL_BROKERS_DOWN when nothing listens at bootstrap.servers."""
    seen = []
    p = ck.Producer({"bootstrap.servers": "127.0.0.1:1", "error_cb": lambda e: seen.append(e.code())})
    end = time.monotonic() + deadline_s
    while ck.KafkaError._ALL_BROKERS_DOWN not in seen and time.monotonic() < end:
        p.poll(0.5)
    return {"all_down": ck.KafkaError._ALL_BROKERS_DOWN in seen}


def _poll_n(c, n, deadline_s=60):
    got = []
    end = time.monotonic() + deadline_s
    while len(got) < n and time.monotonic() < end:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append(m.offset())
    return got


def midway(ck, bootstrap, topic):
    """Records poll() handed out, and no more, count: commit() without arguments, position(),
    pause()/resume() and close() (auto commit) in the middle of what arrived."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = _consumer(ck, bootstrap, group, **{"enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    first = _poll_n(c, 3)
    committed = [(p.partition, p.offset) for p in c.commit(asynchronous=False) if p.topic == topic]
    position = [(p.partition, p.offset) for p in c.position([ck.TopicPartition(topic, 0)])]
    c.pause([ck.TopicPartition(topic, 0)])
    paused = c.poll(0.5)
    c.resume([ck.TopicPartition(topic, 0)])
    after_resume = _poll_n(c, 2)
    c.close()
    c = _consumer(ck, bootstrap, group, **{"enable.auto.commit": True, "auto.commit.interval.ms": 60000})
    c.assign([ck.TopicPartition(topic, 0)])
    resumed = _poll_n(c, 1)
    c.close()  # auto commit on close: only what poll() handed out
    c = _consumer(ck, bootstrap, group)
    at_close = [(p.partition, p.offset) for p in c.committed([ck.TopicPartition(topic, 0)], timeout=10)]
    c.close()
    return {"first": first, "committed": committed, "position": position, "paused": paused,
            "after_resume": after_resume, "resumed": resumed, "at_close": at_close}


def placement(ck, bootstrap, topic, partitioner=None):
    """Where keyed messages land (no partition given), with a partitioner or the default."""
    conf = {"bootstrap.servers": bootstrap}
    if partitioner:
        conf["partitioner"] = partitioner
    out = {}
    p = ck.Producer(conf)
    for i in range(40):
        key = f"key-{i}".encode()
        p.produce(topic, b"v", key=key,
                  on_delivery=lambda err, msg: out.__setitem__(msg.key(), msg.partition()))
    p.produce(topic, b"v", key=b"", on_delivery=lambda err, msg: out.__setitem__(b"", msg.partition()))
    assert p.flush(30) == 0
    if partitioner in (None, "consistent_random", "murmur2_random", "fnv1a_random"):
        out.pop(b"", None)  # random for an empty key
    return out


def serializing(ck, bootstrap, topic, deadline_s=60):
    """SerializingProducer / DeserializingConsumer with the basic serializers."""
    from importlib import import_module
    ser = import_module(ck.__name__ + ".serialization")
    err = import_module(ck.__name__ + ".error")
    p = ck.SerializingProducer({"bootstrap.servers": bootstrap,
                                "key.serializer": ser.StringSerializer(),
                                "value.serializer": ser.IntegerSerializer()})
    for i in range(5):
        p.produce(topic, key=f"k{i}", value=i * 1000, partition=0)
    with_bad = None
    try:
        p.produce(topic, key="k", value="not an int", partition=0)
    except err.ValueSerializationError as exc:
        with_bad = exc.code
    p.flush(-1)
    c = ck.DeserializingConsumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                                  "auto.offset.reset": "earliest",
                                  "key.deserializer": ser.StringDeserializer(),
                                  "value.deserializer": ser.IntegerDeserializer()})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got = []
    end = time.monotonic() + deadline_s
    while len(got) < 5 + prog_n(topic) and time.monotonic() < end:
        try:
            m = c.poll(1.0)
        except err.ValueDeserializationError as exc:
            got.append(("value-error", exc.code, exc.kafka_message.offset()))
            continue
        if m is not None:
            got.append((m.key(), m.value(), m.deserialized_value()))
    c.close()
    return {"bad": with_bad, "got": got}


def prog_n(topic):
    return N // PARTITIONS  # the records the producer program put in partition 0 before


def reset_error(ck, bootstrap, topic, deadline_s=10):
    """auto.offset.reset=error and a start offset past the end: an error message, not a hang."""
    c = _consumer(ck, bootstrap, **{"auto.offset.reset": "error"})
    c.assign([ck.TopicPartition(topic, 0, 1000)])
    end = time.monotonic() + deadline_s
    err = None
    while err is None and time.monotonic() < end:
        m = c.poll(0.5)
        if m is not None and m.error() is not None:
            err = (m.error().code(), m.topic() == topic, m.partition())
    c.close()
    return {"error": err}


def cluster_ids(ck, bootstrap, topic):
    """cluster_id() from a consumer and a producer."""
    c = _consumer(ck, bootstrap)
    p = ck.Producer({"bootstrap.servers": bootstrap})
    out = {"consumer": c.cluster_id(timeout=10), "producer": p.cluster_id(timeout=10)}
    c.close()
    return out


def rebalance(ck, bootstrap, topic, deadline_s=60):
    """Two members of one group: the second one's arrival revokes from the first (on_revoke),
    each ends with one partition; between them every message is seen."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    events = {"a": [], "b": []}

    def cbs(name):
        return {"on_assign": lambda c, ps: events[name].append(("assign", sorted(p.partition for p in ps))),
                "on_revoke": lambda c, ps: events[name].append(("revoke", sorted(p.partition for p in ps)))}

    a = _consumer(ck, bootstrap, group, **{"partition.assignment.strategy": "range"})
    a.subscribe([topic], **cbs("a"))
    seen = set()
    end = time.monotonic() + deadline_s
    while len(seen) < 4 and time.monotonic() < end:  # a few messages, then b joins
        m = a.poll(0.5)
        if m is not None and m.error() is None:
            seen.add((m.partition(), m.offset()))
    b = _consumer(ck, bootstrap, group, **{"partition.assignment.strategy": "range"})
    b.subscribe([topic], **cbs("b"))
    while (len(seen) < N or not (a.assignment() and b.assignment())) and time.monotonic() < end:
        for c in (a, b):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.add((m.partition(), m.offset()))
    final = sorted([sorted(p.partition for p in a.assignment()), sorted(p.partition for p in b.assignment())])
    a.close()
    b.close()
    return {"all_seen": len(seen) == N, "final": final,
            "a_revoked": any(e[0] == "revoke" for e in events["a"]),
            "a_first": events["a"][0],
            # which member gets which partition depends on the member ids: only how many
            "b_assigned": [len(e[1]) for e in events["b"] if e[0] == "assign"][-1:]}
