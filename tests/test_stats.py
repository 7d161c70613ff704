"""stats_cb + statistics.interval.ms (kwire.stats) on Apache Kafka: the fields people graph,
checked against the records produced and consumed; and side by side with confluent-kafka on the
same broker in the same test: every key kwire emits is one librdkafka emits at the same place,
and the values that depend only on the data (offsets, lag, message counts, group state) agree."""
from __future__ import annotations

import json
import threading
import time

import confluent_kafka
import pytest

import kwire.confluent
from kwire.consumer import Consumer, TopicPartition
from kwire.producer import Producer

SPLIT = {0: 7, 1: 5}  # records produced to each partition
N = sum(SPLIT.values())


@pytest.fixture
def topic(kafka, create_topic, unique_topic):
    assert create_topic(kafka, unique_topic, 2) == 2
    return unique_topic


def _fill(bootstrap, topic, split=SPLIT):
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        for part, n in split.items():
            for i in range(n):
                p.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=part)
        assert p.flush(30) == 0


def _until(docs, pred, step, deadline_s=30.0):
    """Call ``step()`` until a document satisfying ``pred`` came; that document."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        step()
        for d in reversed(docs):
            doc = json.loads(d)
            try:
                if pred(doc):
                    return doc
            except KeyError:  # (a document from before the assignment)
                continue
    raise AssertionError(f"no statistics document as expected in {deadline_s}s "
                         f"(last: {docs[-1] if docs else None})")


def _parts(doc, topic):
    return {int(p): v for p, v in doc["topics"][topic]["partitions"].items()}


def _all_committed(doc, topic) -> bool:
    parts = _parts(doc, topic)
    return {k: v["committed_offset"] for k, v in parts.items() if k >= 0} == SPLIT


def test_statistics_are_off_unless_both_keys_are_set(kafka):
    for extra in ({}, {"stats_cb": print}, {"statistics.interval.ms": 100}):
        with Producer({"bootstrap.servers": kafka.bootstrap, **extra}) as p:
            assert p._stats is None and p.network.stats is None
        c = Consumer({"bootstrap.servers": kafka.bootstrap, **extra})
        try:
            assert c._stats is None and c._net.stats is None
        finally:
            c.close()


def test_producer_statistics_count_what_was_sent(kafka, topic):
    docs, threads = [], []

    def cb(doc):
        threads.append(threading.current_thread())
        docs.append(doc)

    p = Producer({"bootstrap.servers": kafka.bootstrap, "statistics.interval.ms": 50,
                  "stats_cb": cb, "linger.ms": 60_000})
    try:
        for part, n in SPLIT.items():
            for _ in range(n):
                p.produce(topic, b"x" * 10, key=b"k", partition=part)
        # held by linger.ms: queued, not sent
        doc = _until(docs, lambda d: d["msg_cnt"] == N, lambda: p.poll(0.05))
        assert doc["type"] == "producer" and doc["name"].startswith("kwire#producer-")
        assert doc["msg_size"] >= N * 12 and doc["txmsgs"] == 0
        assert {k: v["msgq_cnt"] for k, v in _parts(doc, topic).items()} == SPLIT
        assert p.flush(30) == 0
        doc = _until(docs, lambda d: d["txmsgs"] == N, lambda: p.poll(0.05))
        assert doc["msg_cnt"] == 0 and doc["msg_size"] == 0
        parts = _parts(doc, topic)
        assert {k: v["txmsgs"] for k, v in parts.items()} == SPLIT
        assert all(v["msgq_cnt"] == 0 and v["msgs_inflight"] == 0 and v["leader"] >= 0
                   for v in parts.values())
        # record bytes as on the wire: at least key and value of each record
        assert doc["txmsg_bytes"] == sum(v["txbytes"] for v in parts.values()) >= N * 11
        brokers = doc["brokers"].values()
        assert sum(b["req"].get("Produce", 0) for b in brokers) >= 1
        assert doc["tx"] == sum(b["tx"] for b in brokers) >= 2
        assert doc["rx_bytes"] == sum(b["rxbytes"] for b in brokers) > 0
        assert all(b["state"] == "UP" for b in brokers if b["nodeid"] >= 0)
        assert set(threads) == {threading.main_thread()}
    finally:
        p.close()


def test_consumer_statistics_offsets_lag_and_fetch_queue(kafka, topic):
    """Manual assignment, 3 of partition 0's 7 records consumed and committed."""
    _fill(kafka.bootstrap, topic)
    docs, threads = [], []

    def cb(doc):
        threads.append(threading.current_thread())
        docs.append(doc)

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": topic,
                  "enable.auto.commit": False, "statistics.interval.ms": 50, "stats_cb": cb})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        end = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < end:
            r = c.poll(0.2)
            if r is not None:
                got.append(r.offset)
        assert got == [0, 1, 2]
        c.commit(asynchronous=False)
        # consume(0) hands out no record but serves the statistics
        doc = _until(docs, lambda d: _parts(d, topic)[0]["committed_offset"] == 3,
                     lambda: (c.consume(0, 0), time.sleep(0.02)))
        p0 = _parts(doc, topic)[0]
        assert p0["hi_offset"] == p0["ls_offset"] == 7 and p0["lo_offset"] == 0
        assert p0["app_offset"] == p0["stored_offset"] == 3
        assert p0["consumer_lag"] == p0["consumer_lag_stored"] == 4
        assert p0["fetch_state"] == "active" and p0["next_offset"] == 7
        # the 7 records came in one batch: 4 wait for the application
        assert p0["rxmsgs"] == p0["msgs"] == 7 and p0["fetchq_cnt"] == 4
        assert doc["rxmsgs"] == 7 and doc["rxmsg_bytes"] == p0["rxbytes"] > 7 * 4
        assert doc["cgrp"]["assignment_size"] == 1 and doc["cgrp"]["rebalance_cnt"] == 0
        fetch_broker = [b for b in doc["brokers"].values() if b["req"].get("Fetch")]
        assert fetch_broker and fetch_broker[0]["nodeid"] >= 0
        assert any(b["req"].get("OffsetCommit", 0) >= 1 for b in doc["brokers"].values()), doc["brokers"]
        assert set(threads) == {threading.main_thread()}
    finally:
        c.close()


def test_consumer_statistics_of_a_group_member(kafka, topic):
    _fill(kafka.bootstrap, topic)
    docs = []
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": topic,
                  "auto.offset.reset": "earliest", "statistics.interval.ms": 50,
                  "stats_cb": docs.append})
    try:
        c.subscribe([topic])
        got = 0
        end = time.monotonic() + 30
        while got < N and time.monotonic() < end:
            got += len(c.consume(100, 0.2))
        assert got == N
        c.commit(asynchronous=False)
        doc = _until(docs, lambda d: _all_committed(d, topic),
                     lambda: (c.consume(0, 0), time.sleep(0.02)))
        for k, v in _parts(doc, topic).items():
            assert v["hi_offset"] == v["app_offset"] == v["stored_offset"] == SPLIT[k]
            assert v["consumer_lag"] == v["consumer_lag_stored"] == 0
            assert v["rxmsgs"] == SPLIT[k] and v["fetchq_cnt"] == 0 and v["desired"]
        assert doc["rxmsgs"] == N
        g = doc["cgrp"]
        assert (g["state"], g["join_state"], g["assignment_size"]) == ("up", "steady", 2)
        assert g["rebalance_cnt"] == 1
        coord = [b for b in doc["brokers"].values() if b["name"] == "GroupCoordinator"]
        assert coord and coord[0]["req"].get("JoinGroup", 0) >= 1
        assert coord[0]["rtt"]["cnt"] >= 0 and coord[0]["rtt"]["max"] >= coord[0]["rtt"]["min"]
    finally:
        c.close()


# --- side by side with confluent-kafka -------------------------------------------------------

def _keys_within(ours: dict, theirs: dict, where: str, problems: list) -> None:
    """Every key of ``ours`` is a key of ``theirs`` (recursively, for objects both have)."""
    for k, v in ours.items():
        if k not in theirs:
            problems.append(f"{where}.{k}")
        elif isinstance(v, dict) and isinstance(theirs[k], dict) and \
                k not in ("brokers", "topics", "partitions", "req", "rtt"):
            # (those are keyed by names that differ between the clients: checked apart)
            _keys_within(v, theirs[k], f"{where}.{k}", problems)


def _shape_problems(ours: dict, theirs: dict) -> list:
    """Keys kwire emits that librdkafka does not (at the same level of the document)."""
    problems: list = []
    _keys_within(ours, theirs, "", problems)
    tb = next(iter(theirs["brokers"].values()))
    for name, b in ours["brokers"].items():
        _keys_within(b, tb, f".brokers.{name}", problems)
        problems += [f".brokers.{name}.req.{k}" for k in b["req"] if k not in tb["req"]]
        _keys_within(b["rtt"], tb["rtt"], f".brokers.{name}.rtt", problems)
    for t, tv in ours["topics"].items():
        theirs_t = next(iter(theirs["topics"].values()))
        _keys_within(tv, theirs_t, f".topics.{t}", problems)
        tp = next(iter(theirs_t["partitions"].values()))
        for p, pv in tv["partitions"].items():
            _keys_within(pv, tp, f".topics.{t}.partitions.{p}", problems)
    return problems


# what kwire claims (STATISTICS.md's names), at each level
CLAIMED_TOP = {"name", "client_id", "type", "ts", "time", "age", "replyq", "msg_cnt", "msg_size",
               "msg_max", "simple_cnt", "metadata_cache_cnt", "brokers", "topics", "tx",
               "tx_bytes", "rx", "rx_bytes", "txmsgs", "txmsg_bytes", "rxmsgs", "rxmsg_bytes"}
CLAIMED_BROKER = {"name", "nodeid", "nodename", "source", "state", "tx", "txbytes", "rx",
                  "rxbytes", "outbuf_cnt", "waitresp_cnt", "req", "rtt"}
CLAIMED_RTT = {"min", "max", "avg", "sum", "cnt", "stddev", "p50", "p75", "p90", "p95", "p99",
               "p99_99", "outofrange", "hdrsize"}
CLAIMED_PART = {"partition", "broker", "leader", "desired", "unknown", "msgs"}
CLAIMED_CONSUMER_PART = CLAIMED_PART | {
    "fetchq_cnt", "fetchq_size", "fetch_state", "next_offset", "app_offset", "stored_offset",
    "committed_offset", "commited_offset", "eof_offset", "lo_offset", "hi_offset", "ls_offset",
    "consumer_lag", "consumer_lag_stored", "rxmsgs", "rxbytes"}
CLAIMED_PRODUCER_PART = CLAIMED_PART | {"msgq_cnt", "msgq_bytes", "xmit_msgq_cnt",
                                        "xmit_msgq_bytes", "msgs_inflight", "txmsgs", "txbytes"}
CLAIMED_CGRP = {"state", "stateage", "join_state", "rebalance_age", "rebalance_cnt",
                "rebalance_reason", "assignment_size"}


def _check_claims(doc, topic, part_keys, problems, who):
    missing = CLAIMED_TOP - set(doc)
    for b in doc["brokers"].values():
        missing |= CLAIMED_BROKER - set(b)
        missing |= CLAIMED_RTT - set(b["rtt"])
    for v in _parts(doc, topic).values():
        missing |= part_keys - set(v)
    if doc["type"] == "consumer":
        missing |= CLAIMED_CGRP - set(doc["cgrp"])
    problems += [f"{who} lacks {k}" for k in sorted(missing)]


def _produce_with(ck, bootstrap, topic):
    docs = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "statistics.interval.ms": 100,
                     "stats_cb": docs.append})
    for part, n in SPLIT.items():
        for i in range(n):
            p.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=part)
    assert p.flush(30) == 0
    # (librdkafka counts a retried send again in txmsgs -- right after a topic's creation a
    # Produce may meet NOT_LEADER -- kwire counts acknowledged records once)
    return _until(docs, lambda d: d["txmsgs"] >= N and d["msg_cnt"] == 0, lambda: p.poll(0.05))


def _consume_with(ck, bootstrap, topic, group):
    docs = []
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "statistics.interval.ms": 100, "stats_cb": docs.append})
    try:
        c.subscribe([topic])
        got = 0
        end = time.monotonic() + 30
        while got < N and time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got += 1
        assert got == N
        c.commit(asynchronous=False)
        return _until(docs, lambda d: _all_committed(d, topic),
                      lambda: c.poll(0.05))
    finally:
        c.close()


def test_same_keys_and_values_as_confluent_kafka(kafka, create_topic, unique_topic):
    real, ours = {}, {}
    for name, ck, out in (("ck", confluent_kafka, real), ("kw", kwire.confluent, ours)):
        t = f"{unique_topic}-{name}"
        assert create_topic(kafka, t, 2) == 2
        out["producer"] = _produce_with(ck, kafka.bootstrap, t)
        out["consumer"] = _consume_with(ck, kafka.bootstrap, t, f"g-{t}")
        out["topic"] = t
    problems: list = []
    for role, part_keys in (("producer", CLAIMED_PRODUCER_PART), ("consumer", CLAIMED_CONSUMER_PART)):
        ours_doc, real_doc = ours[role], real[role]
        problems += [f"{role}: kwire emits {p[1:]}, librdkafka does not"
                     for p in _shape_problems(ours_doc, real_doc)]
        _check_claims(ours_doc, ours["topic"], part_keys, problems, f"kwire {role}")
        _check_claims(real_doc, real["topic"], part_keys, problems, f"librdkafka {role}")
    assert not problems, "\n".join(problems)

    # the values that depend only on the data agree
    def producer_view(doc, topic):
        return (doc["type"], doc["msg_cnt"], doc["rxmsgs"],
                {k: (v["msgq_cnt"], v["msgs_inflight"]) for k, v in _parts(doc, topic).items()
                 if k >= 0})

    assert ours["producer"]["txmsgs"] == N <= real["producer"]["txmsgs"]
    assert {k: v["txmsgs"] for k, v in _parts(ours["producer"], ours["topic"]).items() if k >= 0} == SPLIT
    assert all(v["txmsgs"] >= SPLIT[k] for k, v in _parts(real["producer"], real["topic"]).items() if k >= 0)

    def consumer_view(doc, topic):
        g = doc["cgrp"]
        return (doc["type"], doc["rxmsgs"], doc["txmsgs"], doc["msg_cnt"],
                (g["state"], g["join_state"], g["rebalance_cnt"], g["assignment_size"]),
                {k: {f: v[f] for f in ("lo_offset", "hi_offset", "ls_offset", "committed_offset",
                                        "app_offset", "stored_offset", "next_offset",
                                        "consumer_lag", "consumer_lag_stored", "rxmsgs",
                                        "fetch_state", "desired")}
                 for k, v in _parts(doc, topic).items() if k >= 0})

    assert producer_view(ours["producer"], ours["topic"]) == producer_view(real["producer"], real["topic"])
    assert consumer_view(ours["consumer"], ours["topic"]) == consumer_view(real["consumer"], real["topic"])


def test_window_statistics():
    from kwire.stats import window
    w = window(list(range(1, 101)), 100, 5050, 1, 100)
    assert (w["min"], w["max"], w["avg"], w["sum"], w["cnt"]) == (1, 100, 50, 5050, 100)
    assert (w["p50"], w["p75"], w["p90"], w["p95"], w["p99"], w["p99_99"]) == (50, 75, 90, 95, 99, 100)
    assert w["stddev"] == 28  # population standard deviation of 1..100: 28.87
    assert window([], 0, 0, 0, 0) == dict.fromkeys(w, 0)
